//! `gpudirect import` over outputs published by others (issue #33):
//! `tests/fixtures/nccl-tests-published/`, each file named with its source in that folder's
//! README.md, and what a person reads off each in its `manifest.tsv`. Every file either
//! imports with the manifest's collective, largest size and busbw at that size, or is
//! refused (or judged) with the reason the table below gives.

use std::path::PathBuf;

use super::common::*;

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nccl-tests-published")
}

/// Files `import` refuses, and what its error must say.
const REFUSED: [(&str, &str); 10] = [
    // One-rank worlds: no collective to ask for; the run is the problem.
    (
        "interleaved-1rank-1-nccl-tests-294.txt",
        "every process ran the test alone",
    ),
    // sendrecv's busbw is its algbw whatever the rank count: only the user knows it.
    ("sendrecv-1-li-plus-playground.txt", "pass --ranks"),
    // nccl-tests before 2.13 (an `error` column): no collective fits, and no rank count.
    ("sendrecv-2-nccl-tests-104.txt", "pass --collective"),
    // Its right-hand columns were cut off when pasted: no busbw/algbw ratio fits.
    (
        "other-column-cut-1-skypilot-nebius.txt",
        "pass --collective",
    ),
    (
        "not-nccl-tests-1-skypilot-nebius-ib-send-bw.txt",
        "this is a perftest output",
    ),
    (
        "not-nccl-tests-2-skypilot-4448-all-reduce-bench-stacked.txt",
        "PyTorch collective benchmark",
    ),
    (
        "not-nccl-tests-3-nccl-120-nccl1-all-gather-test.txt",
        "NCCL 1's test programs",
    ),
    (
        "not-nccl-tests-4-mscclpp-83-mscclpp-test.txt",
        "an mscclpp-test output",
    ),
    // Issue #40: refused for what it is, not for a missing --collective.
    (
        "not-nccl-tests-5-ompi-12318-osu-reduce.txt",
        "an OSU micro-benchmark output",
    ),
    (
        "not-nccl-tests-6-eessi-716-osu-bw.txt",
        "an OSU micro-benchmark output",
    ),
];

/// Files that import, but not as the manifest's reading: what the history must hold.
/// Files recorded with a status other than `ok`, or whose collective is not named: (file,
/// status, what import must say, whether the collective and busbw are still as read by
/// hand).
const JUDGED: [(&str, &str, &str, bool); 7] = [
    // Two hosts each ran `-g 8` alone (nccl-tests built without MPI under mpirun): two
    // headers, one process each, their rows interleaved. Recorded failed, with the fix.
    (
        "interleaved-nrank-1-nccl-tests-306.txt",
        "failed",
        "ran the test alone, in a world of its own",
        false,
    ),
    // Two one-rank processes in two containers, each with its whole header: the same
    // verdict (busbw 0.00 tells no collective).
    (
        "interleaved-1rank-2-nccl-tests-329-two-docker.txt",
        "failed",
        "the test's header was printed 2 times: every process ran the test alone",
        false,
    ),
    // The paste starts below `# nThread` and stops before the summary: said, not judged.
    (
        "cut-short-1-hisohara-ai-scripts-rccl-mi355x.txt",
        "ok",
        "no summary line",
        false,
    ),
    // gather with a linear step of 128 MiB, cut 9 sizes before its (reduced) maxBytes: the
    // sizes lie closer than 10% apart, so the last row must not stand for the missing ones.
    (
        "cut-short-2-nccl-tests-350-gather.txt",
        "failed",
        "its rows stop at 11408506880 B, the 9 larger size(s) its header asks for (up to 12616466432 B) are missing",
        true,
    ),
    // Pasted without its `#`s, cut at 16 MiB of 15534478677 (the `Reducing maxBytes` line,
    // `#`-less too, is read).
    (
        "cut-short-3-nccl-tests-323-lost-hash.txt",
        "failed",
        "its rows stop at 16777216 B, the 9 larger size(s) its header asks for (up to 8589934592 B) are missing",
        true,
    ),
    // Issue #40 form 8: nccl-tests before 2.0 (no redop for broadcast, no `Collective test
    // starting`): the command line names broadcast_perf. The paste stops after one row.
    (
        "broadcast-pre2-1-nccl-tests-82.txt",
        "failed",
        "its rows stop at 8 B",
        true,
    ),
    // scatter and gather rows look alike (redop none, a root, busbw (n-1)/n of algbw): the
    // text names neither, so the collective stays unknown rather than guessed.
    (
        "srun-label-1-awsome-distributed-training-slurm-104.txt",
        "ok",
        "",
        false,
    ),
];

struct Line {
    file: String,
    collective: String,
    max_size: Option<u64>,
    busbw: Option<f64>,
}

fn manifest() -> Vec<Line> {
    let text = std::fs::read_to_string(folder().join("manifest.tsv")).expect("manifest.tsv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split('\t').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (file, collective, max, busbw) = (
        col("file"),
        col("collective"),
        col("max_size_bytes"),
        col("busbw_at_max"),
    );
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Line {
                file: f[file].to_string(),
                collective: f[collective].to_string(),
                max_size: f.get(max).and_then(|v| v.parse().ok()),
                // Two values (`361.10;22.20`) mean two interleaved runs: no one figure.
                busbw: f.get(busbw).and_then(|v| v.parse().ok()),
            }
        })
        .collect()
}

#[test]
fn every_published_output_imports_as_read_by_hand_or_is_refused_with_why() {
    let dir = scratch("published", "import");
    let lines = manifest();
    assert!(lines.len() >= 19, "{} files in the manifest", lines.len());
    for (i, line) in lines.iter().enumerate() {
        let db = dir.path().join(format!("h{i}.sqlite"));
        let path = folder().join(&line.file);
        assert!(
            path.is_file(),
            "{} is in the manifest but not in the folder",
            line.file
        );
        let mut import = gpudirect_without(&["GPUDIRECT_DB"]);
        import.args(["--db"]).arg(&db).arg("import").arg(&path);
        let out = run(&mut import);
        let said = format!("{}{}", stdout(&out), stderr(&out));
        if let Some((_, why)) = REFUSED.iter().find(|(f, _)| *f == line.file) {
            assert_eq!(out.status.code(), Some(3), "{}: {said}", line.file);
            assert!(said.contains(why), "{}: wanted `{why}`: {said}", line.file);
            continue;
        }
        assert!(out.status.success(), "{}: {said}", line.file);
        let mut history = gpudirect_without(&["GPUDIRECT_DB"]);
        history.args(["--db"]).arg(&db).args(["history", "--json"]);
        let runs: serde_json::Value = serde_json::from_str(&ok(&mut history)).expect("JSON");
        let r = &runs[0];
        assert_eq!(
            r["max_size_bytes"].as_u64(),
            line.max_size,
            "{}: {r}",
            line.file
        );
        match JUDGED.iter().find(|(f, ..)| *f == line.file) {
            Some((_, status, why, figures)) => {
                assert_eq!(r["status"], *status, "{}: {r}", line.file);
                assert!(said.contains(why), "{}: wanted `{why}`: {said}", line.file);
                if !figures {
                    continue;
                }
            }
            None => assert_eq!(r["status"], "ok", "{}: {said}", line.file),
        }
        assert_eq!(
            r["collective"],
            line.collective.as_str(),
            "{}: {r}",
            line.file
        );
        let want = line.busbw.expect("a busbw in the manifest");
        let got = r["busbw"].as_f64().unwrap_or(f64::NAN);
        assert!(
            (got - want).abs() < 0.005,
            "{}: busbw {got}, manifest {want}",
            line.file
        );
    }
}

/// Issue #40 form 6: an empty file, a binary (the gpudirect program itself), a gzip of a
/// real output cut in half and plain text with no part of an nccl-tests output are refused
/// (exit 3) for what they are, and nothing is recorded; the same output gzipped whole is read.
#[test]
fn import_refuses_what_is_not_an_output_and_records_nothing() {
    use std::io::Write;
    let dir = scratch("published", "junk");
    let real = std::fs::read(fixture("h200x2-formats/cur_algo_ring.txt")).expect("fixture");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&real).expect("gzip");
    let whole = gz.finish().expect("gzip");
    let inputs: [(&str, Vec<u8>, &str); 4] = [
        ("empty.txt", Vec::new(), "this file is empty"),
        (
            "gpudirect.bin",
            std::fs::read(BIN).expect("the binary"),
            "this is binary data",
        ),
        (
            "cut.txt.gz",
            whole[..whole.len() / 2].to_vec(),
            "gzip data that cannot be decompressed",
        ),
        (
            "notes.txt",
            b"ran all_reduce on 2 nodes, looked fine\n".to_vec(),
            "no nccl-tests header, table, summary or failure",
        ),
    ];
    let db = dir.path().join("h.sqlite");
    for (name, bytes, why) in inputs {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write");
        let mut import = gpudirect_without(&["GPUDIRECT_DB"]);
        import.args(["--db"]).arg(&db).arg("import").arg(&path);
        let out = run(&mut import);
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(3), "{name}: {said}");
        assert!(
            said.contains(why) && said.contains("nothing recorded"),
            "{name}: {said}"
        );
    }
    let mut history = gpudirect_without(&["GPUDIRECT_DB"]);
    history.args(["--db"]).arg(&db).args(["history", "--json"]);
    let runs: serde_json::Value = serde_json::from_str(&ok(&mut history)).expect("JSON");
    assert_eq!(runs.as_array().map(Vec::len), Some(0), "{runs}");
    let gz = dir.path().join("whole.txt.gz");
    std::fs::write(&gz, &whole).expect("write");
    let mut import = gpudirect_without(&["GPUDIRECT_DB"]);
    import.args(["--db"]).arg(&db).arg("import").arg(&gz);
    let out = run(&mut import);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("(all_reduce, ok"), "{}", stdout(&out));
}

/// Issue #40 form 7 on real pastes (facts in the folder's README, written before import ran):
/// a README's excerpt with the author's `...` before and after 5 rows and the run's own
/// summary is a completed run whose paste leaves rows out, said, with the run's own average;
/// a guide's output whose log lines were cut (`-----some output truncated-----`) but whose
/// 28 rows are all there is complete with nothing to say about rows; an output cut at the
/// end without its summary stays cut short.
#[test]
fn elided_pastes_with_their_summary_are_completed_runs() {
    let dir = scratch("published", "elided");
    let import = |file: &str, db: &str| {
        let db = dir.path().join(db);
        let mut cmd = gpudirect_without(&["GPUDIRECT_DB"]);
        cmd.args(["--db"])
            .arg(&db)
            .arg("import")
            .arg(folder().join(file));
        let out = run(&mut cmd);
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(out.status.success(), "{file}: {said}");
        let mut history = gpudirect_without(&["GPUDIRECT_DB"]);
        history.args(["--db"]).arg(&db).args(["history", "--json"]);
        let runs: serde_json::Value = serde_json::from_str(&ok(&mut history)).expect("JSON");
        (said, runs[0].clone())
    };
    let (said, r) = import(
        "elided-2-terraform-aws-eks-blueprints-dots.txt",
        "dots.sqlite",
    );
    assert_eq!(r["status"], "ok", "{said}");
    assert_eq!(r["collective"], "all_reduce", "{r}");
    assert_eq!(r["avg_busbw"].as_f64(), Some(1.15327), "{r}");
    assert_eq!(r["max_size_bytes"].as_u64(), Some(4194304), "{r}");
    assert!(
        said.contains("the paste leaves rows out (cut at lines 3, 9): it shows 5 row(s), 262144 B to 4194304 B")
            && said.contains("the run's own, over rows not all shown")
            && said.contains("inferred 2 ranks"),
        "{said}"
    );
    let (said, r) = import("elided-3-aws-dlami-efa-truncated.txt", "cut-log.sqlite");
    assert_eq!(r["status"], "ok", "{said}");
    assert_eq!(r["total_ranks"].as_u64(), Some(16), "{r}");
    assert_eq!(r["node_count"].as_u64(), Some(2), "{r}");
    assert_eq!(r["max_size_bytes"].as_u64(), Some(1073741824), "{r}");
    assert_eq!(
        r["row_count"].as_u64(),
        Some(56),
        "28 sizes, out- and in-place: {r}"
    );
    assert_eq!(r["avg_busbw"].as_f64(), Some(2.80613), "{r}");
    assert!(
        !said.contains("leaves rows out") && !said.contains("cut short"),
        "{said}"
    );
    let (said, r) = import("cut-short-3-nccl-tests-323-lost-hash.txt", "cut-end.sqlite");
    assert_eq!(r["status"], "failed", "{said}");
    assert!(said.contains("the output is cut short"), "{said}");
}
