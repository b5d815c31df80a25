//! `gpudirect hang` off a cluster: stand-ins for `scontrol` (the job is running on node1)
//! and `srun` (node1's agent line, as `--label` prints it), the agent's RAS answer a real
//! recorded one (tests/fixtures/nccl-ras) with a hash and a host another user chose.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gpudirect::hang::{AgentReport, JobProcess, Poll};
use gpudirect::ras::parse_answer;

use crate::common::{gpudirect_without, run, scratch, stderr, stdout};

/// An executable shell script `name` in `bin`.
fn script(bin: &Path, name: &str, body: &str) {
    let path = bin.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("write stand-in");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Stand-ins in `dir/bin`: `scontrol` (job 77 runs on node1) and `srun`, which prints
/// node1's agent line (its two polls a recorded RAS answer with `hostile` applied) and then
/// `then` (a shell command). Returns the `hang` command for job 77.
fn stand_ins(
    dir: &Path,
    hostile: impl Fn(&str) -> String,
    then: &str,
    job_pids: Vec<u32>,
) -> impl Fn(bool) -> std::process::Output {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/nccl-ras/status-json-rank1-stalled.txt");
    let text = std::fs::read_to_string(fixture).expect("fixture");
    let status = parse_answer(&hostile(&text)).expect("the fixture parses");
    let poll = |at| Poll {
        at,
        status: Some(status.clone()),
        error: None,
    };
    let report = AgentReport {
        gpudirect_hang: 1,
        node: "node1".into(),
        addrs: vec!["10.9.1.1".into()],
        processes: vec![JobProcess {
            pid: 1559,
            task: Some(0),
            step: Some(0),
            ras_addr: None,
        }],
        job_pids,
        ras_addr: "127.0.0.1:28028".into(),
        polls: vec![poll(0.0), poll(5.0)],
    };
    let line = dir.join("agent.line");
    std::fs::write(
        &line,
        format!("0: {}\n", serde_json::to_string(&report).expect("json")),
    )
    .expect("write");
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).expect("bin");
    script(
        &bin,
        "scontrol",
        "echo \"JobId=$3 JobState=RUNNING NodeList=node1 NumNodes=1\"\n",
    );
    script(&bin, "srun", &format!("cat '{}'\n{then}\n", line.display()));
    move |json: bool| {
        let mut cmd = gpudirect_without(&["SLURM_JOB_ID"]);
        cmd.env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .args(["hang", "77", "--polls", "2"]);
        if json {
            cmd.arg("--json");
        }
        run(&mut cmd)
    }
}

/// Security review T2: escape sequences in a RAS answer (an OSC 0 title, a colour, an
/// erase-line) reached the terminal of whoever ran `hang` raw; now they are shown escaped,
/// and `--json` keeps them exact.
#[test]
fn hang_shows_escape_sequences_from_a_ras_answer_escaped() {
    let dir = scratch("hang", "escapes");
    let hang = stand_ins(
        dir.path(),
        |text| {
            text.replace("0x1ec60967e0c6312c", "0xdead\\u001b]0;PWNED\\u0007")
                .replace("10.9.1.2", "10.9.1.2\\u001b[2K\\u001b[1G")
        },
        "",
        vec![1559],
    );
    let out = hang(false);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(
        !out.stdout.iter().any(|&b| b < 0x20 && b != b'\n'),
        "a control byte reached the terminal: {text:?}"
    );
    assert!(
        text.contains("communicator 0xdead\\x1b]0;PWNED\\x07"),
        "{text}"
    );
    assert!(text.contains("10.9.1.2\\x1b[2K\\x1b[1G"), "{text}");

    // JSON stays exact: the answer's own characters, escaped by JSON itself.
    let out = hang(true);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        value["communicators"][0]["hash"], "0xdead\u{1b}]0;PWNED\u{7}",
        "{value}"
    );
}

/// Security review T8: the caller read all of srun's output, however much the agents
/// wrote. Now it keeps at most 64 MiB per node of the job and says what it left.
#[test]
fn hang_reads_a_bounded_amount_of_the_agents_output_and_says_so() {
    let dir = scratch("hang", "bounded");
    let hang = stand_ins(
        dir.path(),
        str::to_string,
        "head -c 70000000 /dev/zero | tr '\\0' x; echo",
        vec![1559],
    );
    let out = hang(false);
    let err = stderr(&out);
    // node1's line came first and is read whole: the stalled rank is still named.
    assert_eq!(out.status.code(), Some(1), "{}{err}", stdout(&out));
    let line = std::fs::metadata(dir.path().join("agent.line"))
        .expect("line")
        .len();
    let dropped = line + 70_000_001 - 67_108_864;
    assert!(
        err.contains("the agents wrote more than 67108864 bytes")
            && err.contains(&format!("the {dropped} bytes after that were not read")),
        "{err}"
    );
    assert!(
        err.len() < 4096,
        "the cut line is not printed whole: {} bytes",
        err.len()
    );
}

/// Security review T1: an answer whose rank on node1 is a process Slurm does not list for
/// the job (a squatter's service on the job's port inventing a diagnosis) is not the job's:
/// hang names the rank and gives no diagnosis (exit 3), in text and JSON.
#[test]
fn hang_gives_no_diagnosis_from_an_answer_naming_processes_not_the_jobs() {
    let dir = scratch("hang", "foreign");
    let hang = stand_ins(dir.path(), str::to_string, "", vec![4242]);
    let out = hang(false);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(3), "{text}{}", stderr(&out));
    assert!(
        text.contains("on node1 as pid 1559, which is not one of job 77's processes there"),
        "{text}"
    );
    assert!(!text.contains("behind"), "no diagnosis: {text}");
    let out = hang(true);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(value["not_the_jobs"][0]["pid"], 1559, "{value}");
    assert_eq!(value["communicators"], serde_json::json!([]), "{value}");
}
