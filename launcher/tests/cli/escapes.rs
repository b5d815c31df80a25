//! Security review T2: text from outside (an NCCL log, a history's labels) reaches the
//! terminal with its escape sequences shown, not sent; `--json` keeps it exact. (`hang`'s
//! case is in `hang.rs`.)

use std::path::PathBuf;

use crate::common::{fixture, gpudirect_without, run, scratch, stderr, stdout};

/// An OSC 0 title, an SGR colour, an erase-line and an OSC 52 clipboard write.
const ESCAPES: &str = "\x1b]0;PWNED\x07\x1b[31mRED\x1b[0m\x1b[2K\x1b]52;c;ZWNobyBwd25lZA==\x07";

/// No byte below 0x20 other than a newline.
fn assert_no_controls(out: &std::process::Output) {
    let text = stdout(out);
    assert!(
        !out.stdout
            .iter()
            .any(|&b| (b < 0x20 && b != b'\n') || b == 0x7f),
        "a control byte reached the terminal: {text:?}"
    );
}

#[test]
fn log_shows_escape_sequences_from_the_log_escaped() {
    let dir = scratch("escapes", "log");
    let real = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/nccl-logs/lent-host/torch-allreduce-2node-socket-rank0.txt");
    let mut text = std::fs::read_to_string(real).expect("fixture");
    text.push_str(&format!(
        "node1:1432:1432 [0] NCCL WARN Timeout {ESCAPES} waiting\n"
    ));
    let log = dir.path().join("esc.log");
    std::fs::write(&log, text).expect("write");
    let mut cmd = gpudirect_without(&["GPUDIRECT_CONFIG"]);
    cmd.args(["log", "--gpudirect", "none"]).arg(&log);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_no_controls(&out);
    // The reader drops colour codes itself; what is left of the others is shown escaped.
    assert!(
        stdout(&out).contains("PWNED\\x07") && stdout(&out).contains("ZWNobyBwd25lZA==\\x07"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn history_and_show_show_escape_sequences_in_labels_escaped() {
    let dir = scratch("escapes", "history");
    let db = dir.path().join("history.sqlite");
    let gpudirect = |args: &[&str]| {
        let mut cmd = gpudirect_without(&["GPUDIRECT_DB", "RUST_LOG", "XDG_DATA_HOME"]);
        cmd.arg("--db").arg(&db).args(args);
        run(&mut cmd)
    };
    let input = fixture("h200x2-nvlink/all_reduce_g2.txt");
    let out = gpudirect(&[
        "import",
        "--label",
        "lbl",
        input.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // import refuses such a label; a history someone else wrote holds whatever they put
    // there, as the review's did.
    let label = format!("lbl{ESCAPES}");
    let conn = rusqlite::Connection::open(&db).expect("open the history");
    conn.execute("UPDATE runs SET label = ?1", [&label])
        .expect("set the label");
    drop(conn);
    for args in [&["history"][..], &["show", "1"]] {
        let out = gpudirect(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_no_controls(&out);
        assert!(
            stdout(&out).contains("lbl\\x1b]0;PWNED\\x07"),
            "{args:?}: {}",
            stdout(&out)
        );
    }
    // JSON stays exact: the label as it was given.
    let out = gpudirect(&["history", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(value[0]["label"], label.as_str(), "{value}");
}
