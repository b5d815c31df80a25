//! `gpudirect history`, `show`, `compare` and `export` end to end: the built binary on a
//! history filled by `gpudirect import` from the recorded real outputs in
//! `tests/fixtures/nccl-tests/` (2xH200: NVLink, forced socket transport, and a GPU slowed
//! by a second process).
//!
//! Fixtures are copied into a scratch folder first: `import` takes a run's time from the
//! file's modification time, which the tests set to order the runs.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tempfile::TempDir;

use crate::common::{assert_stderr_contains, fixture, gpudirect_without, scratch, stderr};

const NVLINK: &str = "h200x2-nvlink/all_reduce_g2.txt";
const SOCKET: &str = "h200x2-nvlink/all_reduce_g2_socket.txt";
const CLEAN: &str = "h200x2-degraded/all_reduce_g2_clean.txt";
const DEGRADED: [&str; 3] = [
    "h200x2-degraded/all_reduce_g2_load_matmul_duty0.3_gpu1.txt",
    "h200x2-degraded/all_reduce_g2_load_copy_gpu1.txt",
    "h200x2-degraded/all_reduce_g2_load_matmul_gpu1.txt",
];
const REPLAY_LINE: &str = "# nccl-tests STAND-IN replaying h200x2-nvlink/all_reduce_g2.txt \
    (recorded on 2xH200; not a measurement of this machine)";

/// A scratch folder with its own history file.
struct Scratch {
    dir: TempDir,
    db: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = scratch("history", name);
        let db = dir.path().join("history.sqlite");
        Scratch { dir, db }
    }

    /// The binary with this history and nothing from the test runner's environment.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = gpudirect_without(&["GPUDIRECT_DB", "RUST_LOG", "XDG_DATA_HOME"]);
        cmd.arg("--db").arg(&self.db).args(args);
        cmd
    }

    /// Runs `gpudirect ARGS` with its stdout's reader gone: the read end is closed before
    /// the child writes anything (`gpudirect history | head -1`).
    fn with_stdout_closed(&self, args: &[&str]) -> Output {
        let mut child = self
            .cmd(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        child.wait_with_output().unwrap()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("start gpudirect")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(args)).unwrap()
    }

    /// Copies `content` to `name` in the scratch folder, dated `age_days` ago, and imports
    /// it; returns the new run's id.
    fn import_bytes(&self, name: &str, content: &[u8], age_days: u64, extra: &[&str]) -> i64 {
        let path = self.dir.path().join(name);
        fs::write(&path, content).unwrap();
        let when = SystemTime::now() - Duration::from_secs(age_days * 86_400);
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(when)
            .unwrap();
        let mut args = vec!["import", "--json"];
        args.extend_from_slice(extra);
        let path_text = path.to_str().unwrap().to_string();
        args.push(&path_text);
        let out = self.json(&args);
        assert_eq!(out[0]["duplicate"], false, "{out}");
        out[0]["run_id"].as_i64().unwrap()
    }

    fn import(&self, rel: &str, copy_name: &str, age_days: u64, extra: &[&str]) -> i64 {
        self.import_bytes(copy_name, &fs::read(fixture(rel)).unwrap(), age_days, extra)
    }
}

/// The run ids of a `history --json` listing, in its order.
fn run_ids(listing: &Value) -> Vec<i64> {
    let runs = listing.as_array().expect("a JSON array of runs");
    runs.iter()
        .map(|r| r["id"].as_i64().expect("an id"))
        .collect()
}

/// NVLink run (id 1, two days old) and socket run (id 2, variant `socket`, one day old).
fn two_runs(name: &str) -> Scratch {
    let s = Scratch::new(name);
    assert_eq!(s.import(NVLINK, "nvlink.txt", 2, &[]), 1);
    assert_eq!(
        s.import(SOCKET, "socket.txt", 1, &["--variant", "socket"]),
        2
    );
    s
}

#[test]
fn history_lists_filters_and_prints_json() {
    let s = two_runs("list");
    let table = s.ok(&["history"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("ID  WHEN (UTC)"), "{table}");
    // Newest first: the socket run, then NVLink with its 8 GiB peak.
    assert!(lines[1].trim_start().starts_with("2 "), "{table}");
    assert!(
        lines[1].contains("socket") && lines[1].contains("Socket"),
        "{table}"
    );
    assert!(
        lines[2].contains("343.64") && lines[2].contains("8 GiB"),
        "{table}"
    );
    assert!(!table.contains("(replay)"), "{table}");

    let all = s.json(&["history", "--json"]);
    assert_eq!(run_ids(&all), [2, 1]);
    assert_eq!(all[1]["busbw"], 343.64);
    assert_eq!(all[1]["replay_of"], Value::Null);

    let ids_of = |args: &[&str]| -> Vec<i64> {
        let mut full = vec!["history", "--json"];
        full.extend_from_slice(args);
        run_ids(&s.json(&full))
    };
    assert_eq!(ids_of(&["--variant", "socket"]), [2]);
    // --node switches to the node's view; the other filters still apply.
    let node = s.json(&["history", "--json", "--node", "vm", "--variant", "socket"]);
    assert_eq!(node["runs"].as_array().unwrap().len(), 1);
    assert_eq!(node["runs"][0]["run_id"], 2);
    let nobody = s.json(&["history", "--json", "--node", "gpu99"]);
    assert!(nobody["runs"].as_array().unwrap().is_empty());
    assert!(ids_of(&["--collective", "all_gather"]).is_empty());
    assert!(ids_of(&["--status", "failed"]).is_empty());
    assert_eq!(ids_of(&["--limit", "1"]), [2]);
    assert_eq!(ids_of(&["--since", "36h"]), [2]);
    assert_eq!(ids_of(&["--since", "2000-01-01"]), [2, 1]);

    // No match is not an error; a bad filter value is, and says what to write.
    let empty = s.run(&["history", "--cluster", "nowhere"]);
    assert!(empty.status.success());
    assert_stderr_contains(&empty, "no runs match");
    let bad = s.run(&["history", "--since", "yesterday"]);
    assert_eq!(bad.status.code(), Some(3));
    assert_stderr_contains(&bad, "RFC 3339");
    let bad = s.run(&["history", "--status", "great"]);
    assert_stderr_contains(&bad, "ok, wrong");
}

#[test]
fn show_prints_every_row_and_the_raw_output_unchanged() {
    let s = two_runs("show");
    let text = s.ok(&["show", "1"]);
    assert!(text.starts_with("run 1: all_reduce ok (import)"), "{text}");
    assert!(text.contains("nccl-tests 2.19.6, NCCL 2.28.9"), "{text}");
    assert!(text.contains("results (62 rows"), "{text}");
    // Sizes read as people write them, first and last row of the sweep.
    assert!(text.contains("\n    8 B "), "{text}");
    assert!(text.contains("\n  8 GiB "), "{text}");
    assert!(text.contains("findings:\n  none"), "{text}");
    assert!(!text.contains("REPLAY"), "{text}");

    let json = s.json(&["show", "2", "--json"]);
    assert_eq!(json["id"], 2);
    assert_eq!(json["variant"], "socket");
    assert_eq!(json["transport"], "Socket");
    assert_eq!(json["rows"].as_array().unwrap().len(), 56);
    assert_eq!(json["replay_of"], Value::Null);

    let raw = s.run(&["show", "2", "--raw"]);
    assert!(raw.status.success());
    assert_eq!(raw.stdout, fs::read(fixture(SOCKET)).unwrap());

    let missing = s.run(&["show", "99"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(missing.stdout.is_empty());
    assert_stderr_contains(&missing, "no run 99");
}

#[test]
fn compare_flags_the_socket_fallback_and_exits_1() {
    let s = two_runs("compare");
    let out = s.run(&["compare", "1", "2"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(text.contains("overall: REGRESSION"), "{text}");
    // 1 GiB out-of-place: 321.81 (NVLink) -> 3.17 (socket).
    let gib = text
        .lines()
        .find(|l| l.trim_start().starts_with("1 GiB  large  out"))
        .unwrap();
    assert!(gib.contains("321.81") && gib.contains("3.17") && gib.contains("-99.0%"));
    assert!(gib.ends_with("regression"), "{gib}");
    // Sizes below the 1 MiB split are shown in the small band, with its own verdict.
    assert!(text.contains("512 KiB  small  out"), "{text}");
    assert!(
        text.contains("band small (below 1 MiB, latency-bound): REGRESSION"),
        "{text}"
    );
    assert!(
        text.contains("band large (1 MiB and up, bandwidth-bound): REGRESSION"),
        "{text}"
    );
    assert_stderr_contains(&out, "of the large band");
    assert_stderr_contains(&out, "regression: run 2");

    let json_out = s.run(&["compare", "1", "2", "--json", "--min-size", "0"]);
    assert_eq!(json_out.status.code(), Some(1));
    let json: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(json["overall"], "regression");
    assert_eq!(json["reference"]["run_id"], 1);
    assert_eq!(json["options"]["min_size_bytes"], 0);
    // 8 B .. 1 GiB in both runs, out and in place; 2 .. 8 GiB only in the NVLink run.
    assert_eq!(json["rows"].as_array().unwrap().len(), 2 * 31);
    assert_eq!(json["counts"]["missing"], 6);
    let bands = json["bands"].as_array().unwrap();
    assert_eq!(bands.len(), 2);
    assert_eq!(bands[0]["band"], "small");
    assert_eq!(bands[0]["below_bytes"], 1 << 20);
    // 8 B .. 512 KiB: 17 sizes x 2 placements; 1 MiB .. 1 GiB: 11 x 2, plus the 6 missing.
    assert_eq!(
        bands[0]["counts"]["regression"].as_u64().unwrap()
            + bands[0]["counts"]["ok"].as_u64().unwrap(),
        34
    );
    assert_eq!(bands[1]["band"], "large");
    assert_eq!(bands[1]["verdict"], "regression");
    assert_eq!(bands[1]["counts"]["regression"], 22);
    assert_eq!(bands[1]["counts"]["missing"], 6);
    // A split at 0 puts every size in the large band.
    let all_large = s.json_status(&["compare", "1", "2", "--json", "--band-split", "0"], 1);
    assert_eq!(all_large["bands"][0]["verdict"], "missing");
    assert_eq!(
        all_large["bands"][1]["counts"]["regression"]
            .as_u64()
            .unwrap()
            + all_large["bands"][1]["counts"]["ok"].as_u64().unwrap(),
        56
    );

    // The same run against itself, and the reverse direction, are not regressions.
    let same = s.run(&["compare", "1", "1"]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    assert!(String::from_utf8_lossy(&same.stdout).contains("overall: OK"));
    let better = s.run(&["compare", "2", "1"]);
    assert_eq!(better.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&better.stdout).contains("overall: IMPROVEMENT"));

    let usage = s.run(&["compare", "1"]);
    assert_eq!(usage.status.code(), Some(3));
    assert_stderr_contains(&usage, "two run ids");
    let unknown = s.run(&["compare", "1", "42"]);
    assert_stderr_contains(&unknown, "no run 42");
    let help = s.ok(&["compare", "--help"]);
    assert!(
        help.contains("Exit status: 1 when the overall verdict is regression"),
        "{help}"
    );
}

#[test]
fn compare_with_a_baseline_of_earlier_runs() {
    let s = Scratch::new("baseline");
    let first = s.import(NVLINK, "a.txt", 4, &[]);
    s.import(CLEAN, "b.txt", 3, &[]);
    s.import(NVLINK, "c.txt", 2, &[]);
    let socket = s.import(SOCKET, "d.txt", 1, &[]);

    let out = s.run(&["compare", &socket.to_string(), "--baseline", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["reference"]["kind"], "baseline");
    assert_eq!(json["reference"]["run_ids"], serde_json::json!([3, 2, 1]));
    assert_eq!(json["overall"], "regression");
    // The 1 GiB reference is the median of 321.81, 326.94 and 321.81.
    let gib = json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["size_bytes"] == 1 << 30 && r["placement"] == "out")
        .unwrap();
    assert_eq!(gib["reference_busbw"], 321.81);

    // Only the last one earlier run.
    let one = s.json_status(&["compare", "3", "--baseline", "1", "--json"], 0);
    assert_eq!(one["reference"]["run_ids"], serde_json::json!([2]));

    let none = s.run(&["compare", &first.to_string(), "--baseline"]);
    assert_eq!(none.status.code(), Some(3));
    assert_stderr_contains(&none, "no earlier ok run");
}

impl Scratch {
    fn json_status(&self, args: &[&str], code: i32) -> Value {
        let out = self.run(args);
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

#[test]
fn export_formats_parse_back() {
    let s = two_runs("export");
    let csv = s.ok(&["export", "--format", "csv"]);
    let lines: Vec<&str> = csv.lines().collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    // The run's 16 columns, the table row's 12 (NCCL's algorithm and protocol last), and
    // the replay marking last of all.
    assert_eq!(header.len(), 29);
    assert_eq!(header[0], "run_id");
    assert_eq!(header[26..], ["algorithm", "protocol", "replay_of"]);
    // 31 sizes x 2 placements (NVLink) + 28 x 2 (socket), newest run first.
    assert_eq!(lines.len(), 1 + 62 + 56);
    let busbw = header.iter().position(|h| *h == "busbw").unwrap();
    let size = header.iter().position(|h| *h == "size_bytes").unwrap();
    let last: Vec<&str> = lines.last().unwrap().split(',').collect();
    assert_eq!(last.len(), 29);
    assert_eq!(
        (last[0], last[size], last[busbw]),
        ("1", "8589934592", "343.09")
    );
    assert!(lines[1].starts_with("2,"), "{}", lines[1]);

    let json = s.json(&["export", "--json", "--variant", "socket"]);
    let records = json.as_array().unwrap();
    assert_eq!(records.len(), 56);
    assert!(records
        .iter()
        .all(|r| r["run_id"] == 2 && r["replay_of"].is_null()));

    let jsonl = s.ok(&["export", "--format", "jsonl", "--limit", "1"]);
    let parsed: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(parsed.len(), 56);

    // -o writes the file whole and leaves no temporary file behind.
    let target = s.dir.path().join("out.csv");
    let out = s.run(&["export", "-o", target.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert_eq!(fs::read_to_string(&target).unwrap(), csv);
    let leftovers: Vec<_> = fs::read_dir(s.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty());
    // A folder that does not exist: an error naming the file, nothing created.
    let bad = s.dir.path().join("no/such/dir/out.csv");
    let out = s.run(&["export", "-o", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert_stderr_contains(&out, "out.csv");
}

#[test]
fn replays_are_marked_everywhere_and_kept_out_of_the_trend() {
    let s = Scratch::new("replay");
    let measured = s.import(NVLINK, "nvlink.txt", 2, &[]);
    let mut replay = format!("{REPLAY_LINE}\n").into_bytes();
    replay.extend(fs::read(fixture(NVLINK)).unwrap());
    let replayed = s.import_bytes("replay.txt", &replay, 1, &[]);

    let table = s.ok(&["history"]);
    let row = |id: i64| {
        table
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{id} ")))
            .unwrap()
            .to_string()
    };
    assert!(row(replayed).ends_with("import (replay)"), "{table}");
    assert!(!row(measured).contains("replay"), "{table}");
    assert!(
        table.contains("not a measurement")
            && table.contains(&format!(
                "run {replayed} replays h200x2-nvlink/all_reduce_g2.txt"
            )),
        "{table}"
    );
    let json = s.json(&["history", "--json"]);
    assert_eq!(json[0]["replay_of"], "h200x2-nvlink/all_reduce_g2.txt");
    assert_eq!(json[1]["replay_of"], Value::Null);

    let shown = s.ok(&["show", &replayed.to_string()]);
    assert!(
        shown.contains("REPLAY: this run is the nccl-tests stand-in"),
        "{shown}"
    );

    let node = s.ok(&["history", "--node", "vm", "--size", "1G"]);
    assert!(node.contains("busbw at 1 GiB"), "{node}");
    assert!(node.contains("321.81"), "{node}");
    assert!(node.contains("import (replay)"), "{node}");
    assert!(node.contains("replays are left out of the trend"), "{node}");
    // One measurement only (the replay does not count): no trend judged.
    assert!(node.contains("not judged (1 ok measurement(s)"), "{node}");
    let node_json = s.json(&["history", "--node", "vm", "--json"]);
    assert_eq!(node_json["runs"].as_array().unwrap().len(), 2);
    assert_eq!(
        node_json["runs"][1]["replay_of"],
        "h200x2-nvlink/all_reduce_g2.txt"
    );
    assert_eq!(
        node_json["trends"][0]["run_ids"],
        serde_json::json!([measured])
    );

    let csv = s.ok(&["export"]);
    let marked = csv
        .lines()
        .filter(|l| l.ends_with(",h200x2-nvlink/all_reduce_g2.txt"))
        .count();
    assert_eq!(marked, 62);

    let cmp = s.ok(&["compare", &measured.to_string(), &replayed.to_string()]);
    assert!(
        cmp.contains(&format!("note: run {replayed} is a stand-in replay")),
        "{cmp}"
    );
}

#[test]
fn node_history_flags_a_downward_trend() {
    let s = Scratch::new("trend");
    // Three healthy runs, then three with a second process loading GPU 1.
    s.import(NVLINK, "h1.txt", 6, &[]);
    s.import(CLEAN, "h2.txt", 5, &[]);
    s.import(NVLINK, "h3.txt", 4, &[]);
    for (i, rel) in DEGRADED.iter().enumerate() {
        s.import(rel, &format!("d{i}.txt"), 3 - i as u64, &[]);
    }
    let text = s.ok(&["history", "--node", "vm", "--size", "1G"]);
    let trend = text.lines().find(|l| l.starts_with("trend ")).unwrap();
    assert!(trend.starts_with("trend all_reduce 1 GiB float"), "{text}");
    // 272.69, 152.10 and 149.81 against the median 321.81 of the healthy runs.
    assert!(
        trend.contains("DOWNWARD") && trend.contains("15.3%, 52.7%, 53.4%"),
        "{text}"
    );
    // At a 60 % tolerance none of them is a drop.
    let lenient = s.ok(&[
        "history",
        "--node",
        "vm",
        "--size",
        "1G",
        "--tolerance",
        "60",
    ]);
    assert!(
        lenient.contains(": steady (earlier median 321.81"),
        "{lenient}"
    );
    let json = s.json(&["history", "--node", "vm", "--size", "1G", "--json"]);
    assert_eq!(json["trends"][0]["trend"], "downward");
    assert_eq!(json["trends"][0]["earlier_median"], 321.81);
    // --size without --node makes no sense and says so.
    let out = s.run(&["history", "--size", "1G"]);
    assert_eq!(out.status.code(), Some(3));
    assert_stderr_contains(&out, "--node");
}

#[test]
fn a_missing_history_says_how_to_create_one() {
    let s = Scratch::new("missing");
    for args in [
        &["history"][..],
        &["show", "1"],
        &["compare", "1", "2"],
        &["export"],
    ] {
        let out = s.run(args);
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains("no history at"), "{args:?}: {err}");
        assert!(err.contains("gpudirect import"), "{args:?}: {err}");
        assert!(err.contains("gpudirect run"), "{args:?}: {err}");
    }
    // Reading never creates the file.
    assert!(!s.db.exists());
}

#[test]
fn a_reader_that_goes_away_is_not_a_crash() {
    // Regression: `print!` panicked (exit 101) on `gpudirect history | head -1`.
    let s = two_runs("pipe");
    for args in [
        &["history"][..],
        &["history", "--json"],
        &["history", "--node", "vm"],
        &["show", "1"],
        &["show", "1", "--raw"],
        &["compare", "2", "1"],
        &["export"],
    ] {
        let out = s.with_stdout_closed(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{args:?}");
    }
}

/// Every other command that writes to stdout ends quietly on a closed stdout too: exit 0
/// (1 only if `compare` printed its regression before the reader left), never a panic or
/// exit 3.
#[test]
fn every_command_survives_a_closed_stdout() {
    let s = two_runs("pipe-all");
    let config = s.dir.path().join("gpudirect.toml");
    fs::write(&config, include_str!("../../../slurm-conf/gpudirect.toml")).unwrap();
    let config = config.to_str().unwrap();
    let nvlink = fixture(NVLINK);
    let report_dir = s.dir.path().join("report");
    for args in [
        &["--help"][..],
        &["history", "--help"],
        &["hostfile", "--nodelist", "n[1-64]"],
        &["import", "--force", nvlink.to_str().unwrap()],
        &["import", "--json", "--force", nvlink.to_str().unwrap()],
        &["profiles", "--config", config, "list"],
        &["profiles", "--config", config, "show", "tcpx"],
        &[
            "profiles",
            "--config",
            config,
            "explain",
            "--profile",
            "tcpx",
            "--node",
            "n1",
        ],
        &[
            "report",
            "--runs",
            "1,2",
            "-o",
            report_dir.to_str().unwrap(),
        ],
        &["export", "--format", "json"],
        &["compare", "1", "2", "--json"],
    ] {
        let out = s.with_stdout_closed(args);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{args:?}: {:?} {}",
            out.status,
            stderr(&out)
        );
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn labels_are_recorded_filtered_shown_and_name_a_baseline() {
    let s = Scratch::new("labels");
    let base = s.import(NVLINK, "base.txt", 3, &["--label", "before-upgrade"]);
    let later = s.import(CLEAN, "clean.txt", 2, &["--label", "before-upgrade"]);
    let socket = s.import(SOCKET, "socket.txt", 1, &[]);

    let listed = s.json(&["history", "--json", "--label", "before-upgrade"]);
    assert_eq!(run_ids(&listed), [later, base]);
    assert_eq!(listed[0]["label"], "before-upgrade");
    let table = s.ok(&["history"]);
    assert!(table.lines().next().unwrap().ends_with("LABEL"), "{table}");
    assert!(s
        .ok(&["show", &base.to_string()])
        .contains("label:         before-upgrade"));
    assert_eq!(
        s.json(&["show", &socket.to_string(), "--json"])["label"],
        Value::Null
    );

    // The newest ok run with the label is the reference.
    let cmp = s.json_status(
        &[
            "compare",
            &socket.to_string(),
            "--baseline-label",
            "before-upgrade",
            "--json",
        ],
        1,
    );
    assert_eq!(cmp["reference"]["kind"], "labeled");
    assert_eq!(cmp["reference"]["run_id"], later);
    assert_eq!(cmp["overall"], "regression");
    let text = s.run(&[
        "compare",
        &socket.to_string(),
        "--baseline-label",
        "before-upgrade",
    ]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains(&format!(
            "reference: run {later}, the newest ok run labelled `before-upgrade`"
        )),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    // The labelled run itself is compared with the other run so labelled.
    let own = s.json_status(
        &[
            "compare",
            &later.to_string(),
            "--baseline-label",
            "before-upgrade",
            "--json",
        ],
        0,
    );
    assert_eq!(own["reference"]["run_id"], base);
    let none = s.run(&["compare", &socket.to_string(), "--baseline-label", "nope"]);
    assert_eq!(none.status.code(), Some(3));
    assert_stderr_contains(&none, "no ok run labelled `nope`");
    let empty = s.run(&["import", "--label", " ", fixture(NVLINK).to_str().unwrap()]);
    assert_eq!(empty.status.code(), Some(3));
    assert_stderr_contains(&empty, "empty label");
}

/// The rows of a recorded output, as someone would paste them from a log: optionally with
/// the column-header lines, without anything else of nccl-tests' header or footer.
fn bare_table(rel: &str, with_column_header: bool) -> String {
    let text = fs::read_to_string(fixture(rel)).unwrap();
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            let names = t.starts_with("#") && t.contains("size") && t.contains("busbw");
            let units = t.starts_with("#") && t.contains("(B)");
            (with_column_header && (names || units))
                || t.split_whitespace()
                    .next()
                    .is_some_and(|w| w.parse::<u64>().is_ok())
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn a_bare_table_imports_with_inferred_or_named_collective_and_ranks() {
    let s = Scratch::new("bare");
    for (name, header) in [("rows.txt", false), ("with-names.txt", true)] {
        let table = bare_table(NVLINK, header);
        assert!(
            !table.contains("nThread") && table.lines().count() >= 31,
            "{table}"
        );
        let path = s.dir.path().join(name);
        fs::write(&path, &table).unwrap();
        let file = path.to_str().unwrap();

        // Nothing named: both are inferred from the rows, recorded as inferred, and shown.
        let out = s.json(&["import", "--json", "--force", file]);
        let notes: Vec<&str> = out[0]["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|n| n.starts_with("inferred"))
            .collect();
        assert_eq!(notes.len(), 2, "{out}");
        assert!(
            notes[0].starts_with("inferred collective all_reduce: "),
            "{out}"
        );
        assert!(notes[1].starts_with("inferred 2 ranks: "), "{out}");
        let id = out[0]["run_id"].as_i64().unwrap().to_string();
        let shown = s.ok(&["show", &id]);
        assert!(
            shown.contains("note:") && shown.contains("inferred 2 ranks"),
            "{shown}"
        );
        assert_eq!(s.json(&["show", &id, "--json"])["total_ranks"], 2);
        // All-reduce on 2 ranks prints busbw = algbw; 16 ranks would be 1.875 x algbw.
        let out = s.run(&[
            "import",
            "--collective",
            "all_reduce",
            "--ranks",
            "16",
            file,
        ]);
        assert_eq!(out.status.code(), Some(3));
        assert_stderr_contains(&out, "does not fit all_reduce on 16 ranks");
        let out = s.json(&[
            "import",
            "--json",
            "--collective",
            "all_reduce",
            "--ranks",
            "2",
            "--force",
            file,
        ]);
        // Without the column-header lines the standard layout was assumed, and it says so.
        let notes = out[0]["notes"].as_array().unwrap().len();
        assert_eq!(notes, usize::from(!header), "{out}");
        let id = out[0]["run_id"].as_i64().unwrap();
        let run = s.json(&["show", &id.to_string(), "--json"]);
        assert_eq!(run["collective"], "all_reduce");
        assert_eq!(run["total_ranks"], 2);
        assert_eq!(run["rows"].as_array().unwrap().len(), 62);
        assert_eq!(run["busbw"], 343.64);
    }
}

/// `gpudirect show` of a run whose output had NCCL's per-operation lines lists the
/// algorithm and protocol per size, and the versions the output named (issue #18).
#[test]
fn show_lists_nccl_algorithm_and_protocol_per_size() {
    let s = Scratch::new("tuning");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/nccl-tests-handmade/v2.19_all_reduce_tuning_split_rows.txt");
    let out = s.json(&["import", "--json", path.to_str().unwrap()]);
    let id = out[0]["run_id"].as_i64().unwrap().to_string();
    let shown = s.ok(&["show", &id]);
    let header = shown.lines().find(|l| l.contains("SIZE")).unwrap();
    assert!(
        header.contains("ALGO") && header.contains("PROTO"),
        "{shown}"
    );
    let rows: Vec<&str> = shown
        .lines()
        .filter(|l| l.trim_end().ends_with("SIMPLE"))
        .collect();
    assert_eq!(rows.len(), 2, "{shown}");
    assert!(
        rows.iter().all(|r| r.trim_end().ends_with("RING  SIMPLE")),
        "{shown}"
    );
    let json = s.json(&["show", &id, "--json"]);
    assert_eq!(json["rows"][0]["algorithm"], "RING");
    assert_eq!(json["rows"][0]["protocol"], "SIMPLE");
    // A run without those lines has no such columns.
    let plain = s.json(&[
        "import",
        "--json",
        "--line-rate-gbit",
        "3200",
        fixture(NVLINK).to_str().unwrap(),
    ]);
    let plain_id = plain[0]["run_id"].as_i64().unwrap().to_string();
    let shown = s.ok(&["show", &plain_id]);
    assert!(!shown.contains("ALGO"), "{shown}");
    // 343.64 GB/s at 8 GiB of 3200 Gbit/s = 400 GB/s.
    assert!(
        shown.contains("86% of the node's line rate (400.0 GB/s)"),
        "{shown}"
    );
    let compared = s.run(&["compare", &id, &plain_id]);
    let text = String::from_utf8_lossy(&compared.stdout);
    assert!(text.contains("OF LINE RATE"), "{text}");
    // The two ran other NCCL versions (2.28.9 and 2.28.3): compare says so.
    let out = s.run(&["compare", "--json", &plain_id, &id]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        notes.iter().any(|n| n.starts_with(&format!(
            "NCCL differs: run {id} ran 2.28.3, run {plain_id} had 2.28.9"
        ))),
        "{notes:?}"
    );
    // One cluster, one fabric: one version set, the newest run's (each is the first of
    // its kind).
    let sets = s.json(&["history", "--versions", "--json"]);
    assert_eq!(sets.as_array().unwrap().len(), 1, "{sets}");
    assert_eq!(sets[0]["basis"], "first run of its kind");
    let text = s.ok(&["history", "--versions"]);
    assert!(
        text.contains("MET ITS BASELINE") && text.contains("NCCL 2.28."),
        "{text}"
    );
    let misuse = s.run(&["history", "--tolerance", "3"]);
    assert_eq!(misuse.status.code(), Some(3));
    assert_stderr_contains(&misuse, "--tolerance applies to --node or --versions");
}

/// A history written before the `tool` column (schema 3, by the gpudirect of the GPU box's
/// fourth call: validate's pairs, its per-rail pairs and a tune) opens with every run and
/// row, each run given the tool its variant names, as export guessed before the column
/// (issue #42).
#[test]
fn a_real_history_from_before_the_tool_column_keeps_every_run() {
    let dir = scratch("history", "schema3");
    let db = dir.path().join("history.sqlite");
    fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../docs/results/gpu-box/call4/history.sqlite"),
        &db,
    )
    .unwrap();
    let gpudirect = || {
        let mut cmd = gpudirect_without(&["GPUDIRECT_DB"]);
        cmd.arg("--db").arg(&db);
        cmd
    };
    let out = gpudirect()
        .args(["history", "--json", "--limit", "0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut tools: Vec<(i64, String, String)> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["variant"].as_str().unwrap().to_string(),
                r["tool"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    tools.sort();
    assert_eq!(tools.len(), 25, "{runs}");
    for (id, variant, tool) in &tools {
        // Runs 1-18 are validate's pairs (7 of them per rail), 19-25 a tune's steps,
        // which the old guess (and so the migration) calls `run`.
        let want = if *id <= 18 { "validate" } else { "run" };
        assert_eq!(tool, want, "run {id} ({variant})");
        assert_eq!(variant.starts_with("validate:pairs"), *id <= 18, "run {id}");
    }
    // Every result row is still there: 78 rows, one CSV line each.
    let csv = gpudirect()
        .args(["export", "--format", "csv"])
        .output()
        .unwrap();
    assert!(csv.status.success(), "{}", stderr(&csv));
    assert_eq!(
        String::from_utf8(csv.stdout).unwrap().lines().count(),
        1 + 78
    );
}
