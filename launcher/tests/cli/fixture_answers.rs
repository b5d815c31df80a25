//! Issue #40: `gpudirect log` on every fixture log and `gpudirect import` on every fixture
//! output, compared with the answers recorded in `tests/fixtures/answers.tsv`. That file was
//! first written from main's code before the reader changed (commit "fixture answers"), so
//! a change that makes any answer differ shows up here, line by line: a better answer is
//! written into the file in the same commit (the diff says what changed), a worse one is a
//! bug. `GPUDIRECT_RECORD_ANSWERS=1` rewrites the file from the binary under test.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::common::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files under `dir` (recursively) that are fixtures, not their notes.
fn fixture_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("a fixture folder") {
            let path = entry.expect("an entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                stack.push(path);
            } else if name != "README.md" && name != "manifest.tsv" && !name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn rel(path: &Path) -> String {
    path.strip_prefix(repo().join("tests/fixtures"))
        .unwrap_or(path)
        .display()
        .to_string()
}

/// What `gpudirect log --gpudirect none --json` read from one log, in one line: exit
/// status, NCCL lines, processes, hosts, versions, trouble by kind, and each communicator's
/// id, size, nodes, ranks logged and transports.
fn log_answer(path: &Path) -> String {
    let out = run(gpudirect_without(&["GPUDIRECT_CONFIG"])
        .current_dir(repo().join("tests/fixtures"))
        .args(["log", "--gpudirect", "none", "--json"])
        .arg(rel(path)));
    let code = out.status.code().unwrap_or(-1);
    let Ok(report) = serde_json::from_slice::<Value>(&out.stdout) else {
        let err = stderr(&out);
        let first = err.lines().next().unwrap_or("").to_string();
        return format!("log\t{}\texit={code}\terror={}", rel(path), clean(&first));
    };
    let log = &report["log"];
    let procs = log["processes"].as_array().cloned().unwrap_or_default();
    let mut hosts: Vec<&str> = procs.iter().filter_map(|p| p["host"].as_str()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let mut versions: Vec<&str> = procs
        .iter()
        .filter_map(|p| p["nccl_version"].as_str())
        .collect();
    versions.sort_unstable();
    versions.dedup();
    let events = log["event_counts"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let mut networks: Vec<&str> = procs
        .iter()
        .flat_map(|p| p["networks"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    networks.sort_unstable();
    networks.dedup();
    let mut loose: Vec<String> = procs
        .iter()
        .flat_map(|p| p["links"].as_array().cloned().unwrap_or_default())
        .filter_map(|l| l["via"].as_str().map(transport_of))
        .collect();
    loose.sort_unstable();
    loose.dedup();
    let comms: Vec<String> = log["communicators"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let mut nets: Vec<String> = c["ranks"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|r| r["links"].as_array().cloned().unwrap_or_default())
                .filter_map(|l| l["via"].as_str().map(transport_of))
                .collect();
            nets.sort_unstable();
            nets.dedup();
            format!(
                "{}:{}r:{}n:{}logged:{}",
                c["id"].as_str().unwrap_or("?"),
                c["nranks"],
                c["nnodes"],
                c["ranks"].as_array().map_or(0, Vec::len),
                nets.join("+")
            )
        })
        .collect();
    format!(
        "log\t{}\texit={code}\tnccl_lines={}\tprocesses={}\thosts={}\tversions={}\tnetworks={}\tevents={events}\tfindings={}\tcomms={}\tloose={}",
        rel(path),
        log["nccl_lines"],
        procs.len(),
        hosts.len(),
        versions.join(","),
        networks.join(","),
        report["verdict"]["findings"].as_array().map_or(0, Vec::len),
        comms.join(" "),
        loose.join("+")
    )
}

/// A `via` without its device numbers: the transport and its options.
fn transport_of(via: &str) -> String {
    via.split('/')
        .filter(|s| s.parse::<u32>().is_err() && !s.contains('('))
        .collect::<Vec<_>>()
        .join("/")
}

/// What `gpudirect import --json` made of one output: exit status, and the run recorded
/// (status, collective, avg busbw, findings) or the error.
fn import_answer(path: &Path, db: &Path) -> String {
    let out = run(gpudirect_without(&["GPUDIRECT_DB"])
        .current_dir(repo().join("tests/fixtures"))
        .arg("--db")
        .arg(db)
        .args(["import", "--json"])
        .arg(rel(path)));
    let code = out.status.code().unwrap_or(-1);
    let results: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let r = &results[0];
    let what = match r["error"].as_str() {
        Some(e) => format!("error={}", clean(e)),
        None => format!(
            "status={}\tcollective={}\tavg_busbw={}\tfindings={}",
            r["status"].as_str().unwrap_or("?"),
            r["collective"].as_str().unwrap_or("?"),
            r["avg_busbw"]
                .as_f64()
                .map_or("-".to_string(), |b| format!("{b:.2}")),
            r["findings"].as_array().map_or(0, Vec::len)
        ),
    };
    format!("import\t{}\texit={code}\t{what}", rel(path))
}

/// A message in one field: no tabs or newlines, at most 160 characters.
fn clean(text: &str) -> String {
    let one: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    one.chars().take(160).collect()
}

#[test]
fn every_fixture_log_and_output_reads_as_recorded() {
    let fixtures = repo().join("tests/fixtures");
    let dir = scratch("answers", "import");
    let mut answers = Vec::new();
    for path in fixture_files(&fixtures.join("nccl-logs")) {
        answers.push(log_answer(&path));
    }
    for (i, path) in ["nccl-tests", "nccl-tests-handmade", "nccl-tests-published"]
        .iter()
        .flat_map(|d| fixture_files(&fixtures.join(d)))
        .enumerate()
    {
        answers.push(import_answer(
            &path,
            &dir.path().join(format!("h{i}.sqlite")),
        ));
    }
    let file = fixtures.join("answers.tsv");
    let got = answers.join("\n") + "\n";
    if std::env::var_os("GPUDIRECT_RECORD_ANSWERS").is_some() {
        std::fs::write(&file, &got).expect("write answers.tsv");
        return;
    }
    let want = std::fs::read_to_string(&file).expect("tests/fixtures/answers.tsv");
    let want_lines: Vec<&str> = want.lines().collect();
    let differ: Vec<String> = got
        .lines()
        .filter(|l| !want_lines.contains(l))
        .map(|l| {
            let key: String = l.split('\t').take(2).collect::<Vec<_>>().join("\t");
            let was = want_lines
                .iter()
                .find(|w| w.starts_with(&format!("{key}\t")))
                .unwrap_or(&"(new file)");
            format!("now: {l}\nwas: {was}")
        })
        .collect();
    assert!(
        differ.is_empty() && got.lines().count() == want_lines.len(),
        "{} answer(s) differ from tests/fixtures/answers.tsv:\n{}",
        differ.len(),
        differ.join("\n")
    );
}
