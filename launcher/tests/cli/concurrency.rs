//! Two `gpudirect import` processes writing one history at once, while a third reads it:
//! no lost runs, and no "database is locked" reaching the user.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::common::{fixture, gpudirect_without, scratch};

fn gpudirect() -> Command {
    gpudirect_without(&["GPUDIRECT_DB", "RUST_LOG"])
}

#[test]
fn two_writers_and_a_reader_share_one_history() {
    let tmp = scratch("concurrency", "writers");
    let dir = tmp.path();
    let db = dir.join("history.sqlite");
    let bytes = std::fs::read(fixture("h200x2-nvlink/all_reduce_g2.txt")).expect("fixture");
    let files = |tag: &str| -> Vec<PathBuf> {
        (0..25)
            .map(|i| {
                let p = dir.join(format!("{tag}-{i}.txt"));
                std::fs::write(&p, &bytes).unwrap();
                p
            })
            .collect()
    };
    let (a, b) = (files("a"), files("b"));
    let writer = |files: &[PathBuf]| {
        gpudirect()
            .arg("--db")
            .arg(&db)
            .arg("import")
            .args(files)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start an importer")
    };
    // The history must exist before the reader starts; the writers create it otherwise.
    let first = gpudirect()
        .arg("--db")
        .arg(&db)
        .arg("import")
        .arg(&a[0])
        .output()
        .unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    // Every run in the history, as JSON.
    let list_all = || {
        gpudirect()
            .arg("--db")
            .arg(&db)
            .args(["history", "--json", "--limit", "0"])
            .output()
            .expect("start gpudirect history")
    };
    let w1 = writer(&a[1..]);
    let w2 = writer(&b);
    let mut reads = 0;
    let mut w1 = Some(w1);
    let mut w2 = Some(w2);
    let mut outcomes = Vec::new();
    while w1.is_some() || w2.is_some() {
        let read = list_all();
        let err = String::from_utf8_lossy(&read.stderr);
        assert!(read.status.success(), "a read failed during writes: {err}");
        assert!(!err.contains("locked"), "{err}");
        let _: serde_json::Value = serde_json::from_slice(&read.stdout).expect("history --json");
        reads += 1;
        for slot in [&mut w1, &mut w2] {
            if let Some(child) = slot {
                if child.try_wait().unwrap().is_some() {
                    let out = slot.take().unwrap().wait_with_output().unwrap();
                    outcomes.push(out);
                }
            }
        }
    }
    for out in outcomes {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "an importer failed: {err}");
        assert!(!err.contains("locked"), "{err}");
    }
    let all = list_all();
    let runs: serde_json::Value = serde_json::from_slice(&all.stdout).unwrap();
    let count = runs
        .as_array()
        .map(Vec::len)
        .or_else(|| runs["runs"].as_array().map(Vec::len));
    assert_eq!(
        count,
        Some(50),
        "every run from both writers is there ({reads} reads during the writes)"
    );
}
