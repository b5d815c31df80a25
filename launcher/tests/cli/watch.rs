//! `gpudirect watch` on NCCL Inspector dumps recorded on the lent H200
//! (`tests/fixtures/nccl-inspector/`, a stand-in for a live job's dump folders).

use std::path::PathBuf;

use crate::common::{fixture, gpudirect_without, run, scratch, stderr, stdout};

fn dumps(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/nccl-inspector")
        .join(name)
}

/// `gpudirect watch --dumps` on one recorded folder.
fn watch_dumps(name: &str) -> std::process::Output {
    run(gpudirect_without(&["GPUDIRECT_DB"])
        .args(["watch", "--dumps"])
        .arg(dumps(name)))
}

#[test]
fn the_rank_that_slept_is_named_late_and_the_clean_job_passes() {
    let out = watch_dumps("late-rank1");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("LATE: rank 1 on node2 starts its collectives about"),
        "{text}"
    );
    assert!(
        text.contains("the network is not what holds the job"),
        "{text}"
    );

    let out = run(gpudirect_without(&["GPUDIRECT_DB"])
        .args(["watch", "--json", "--dumps"])
        .arg(dumps("clean")));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let comm = &json["communicators"][0];
    assert_eq!(comm["findings"], serde_json::json!([]));
    assert_eq!(comm["judged"], true);
    assert_eq!(json["files"], 2);
}

#[test]
fn the_baseline_comes_from_the_history_runs_of_the_variant() {
    let dir = scratch("watch", "baseline");
    let db = dir.path().join("h.sqlite");
    let out = run(gpudirect_without(&["GPUDIRECT_DB", "SLURM_CLUSTER_NAME"])
        .arg("--db")
        .arg(&db)
        .args(["import", "--cluster", "box", "--variant", "socket-bed"])
        .arg(fixture("gpu-box/all_reduce_srun_socket_bed_n2.txt")));
    assert!(out.status.success(), "{}", stderr(&out));
    // 64 MiB all_reduce over the same two nodes measured 1.85 GB/s in nccl-tests; the job's
    // clean AllReduce of 64 MiB ran at 1.93: at its baseline, no finding.
    let out = run(gpudirect_without(&["GPUDIRECT_DB", "SLURM_CLUSTER_NAME"])
        .arg("--db")
        .arg(&db)
        .args([
            "watch",
            "--cluster",
            "box",
            "--baseline-variant",
            "socket-bed",
            "--dumps",
        ])
        .arg(dumps("clean")));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("% of 1.85"), "{text}");
    // The job with a late rank: the waiting rank's AllReduce shows 0.8 GB/s, but the judge
    // takes each collective's fastest rank (no waiting in its time), 1.85: LATE, not SLOW.
    let out = run(gpudirect_without(&["GPUDIRECT_DB", "SLURM_CLUSTER_NAME"])
        .arg("--db")
        .arg(&db)
        .args([
            "watch",
            "--cluster",
            "box",
            "--baseline-variant",
            "socket-bed",
            "--dumps",
        ])
        .arg(dumps("late-rank1"))
        .args(["--window", "1h"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(!stdout(&out).contains("SLOW:"), "{}", stdout(&out));
}

#[test]
fn the_baseline_cluster_is_the_one_runs_are_recorded_under() {
    // `run` and `validate` record under GPUDIRECT_CLUSTER (scripts/gpu-box sets it); watch
    // looked only at SLURM_CLUSTER_NAME and found no baseline for those runs.
    let dir = scratch("watch", "cluster");
    let db = dir.path().join("h.sqlite");
    let out = run(gpudirect_without(&["GPUDIRECT_DB", "SLURM_CLUSTER_NAME"])
        .arg("--db")
        .arg(&db)
        .args(["import", "--cluster", "box", "--variant", "socket-bed"])
        .arg(fixture("gpu-box/all_reduce_srun_socket_bed_n2.txt")));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(gpudirect_without(&["GPUDIRECT_DB", "SLURM_CLUSTER_NAME"])
        .env("GPUDIRECT_CLUSTER", "box")
        .arg("--db")
        .arg(&db)
        .args(["watch", "--baseline-variant", "socket-bed", "--dumps"])
        .arg(dumps("clean")));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("% of 1.85"), "{}", stdout(&out));
}

#[test]
fn no_dumps_or_too_few_collectives_cannot_be_judged() {
    let empty = scratch("watch", "empty");
    let out = run(gpudirect_without(&["GPUDIRECT_DB"])
        .args(["watch", "--dumps"])
        .arg(empty.path()));
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("no Inspector sample in 0 file(s)"),
        "{}",
        stderr(&out)
    );

    let out = watch_dumps("inspector-2.28.9");
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stdout(&out).contains("not judged: at most 1 collective(s)"),
        "{}",
        stdout(&out)
    );

    let out = watch_dumps("one-rank-wrote");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("SILENT: rank(s) 0 wrote no sample"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn follow_judges_again_each_round_and_prints_json_lines() {
    let start = std::time::Instant::now();
    let out = run(gpudirect_without(&["GPUDIRECT_DB"])
        .args([
            "watch", "--json", "--follow", "300ms", "--rounds", "3", "--dumps",
        ])
        .arg(dumps("late-rank1")));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(start.elapsed() >= std::time::Duration::from_millis(600));
    let text = stdout(&out);
    let rounds: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(rounds.len(), 3, "{text}");
    for r in &rounds {
        assert_eq!(r["communicators"][0]["findings"][0]["kind"], "late_rank");
    }
}

#[test]
fn a_shaped_nic_on_four_nodes_is_below_the_baseline_in_a_short_window() {
    // Recorded on the lent H100 (docs/results/watch-gpu-box.md): four nodes, node3's eth1
    // shaped to 300 mbit mid-run; the baseline is nccl-tests on the same nodes and profile.
    // The AllGather's 16 MiB a rank is nccl-tests' 64 MiB row over 4 ranks.
    let dir = scratch("watch", "nic");
    let db = dir.path().join("h.sqlite");
    let out = run(gpudirect_without(&["GPUDIRECT_DB", "SLURM_CLUSTER_NAME"])
        .arg("--db")
        .arg(&db)
        .args(["import", "--cluster", "box", "--variant", "socket-bed"])
        .arg(fixture("gpu-box/all_reduce_srun_socket_bed_n4.txt"))
        .arg(fixture("gpu-box/all_gather_srun_socket_bed_n4.txt")));
    assert!(out.status.success(), "{}", stderr(&out));
    let watch = |window: &str| {
        run(gpudirect_without(&["GPUDIRECT_DB", "SLURM_CLUSTER_NAME"])
            .arg("--db")
            .arg(&db)
            .args([
                "watch",
                "--cluster",
                "box",
                "--baseline-variant",
                "socket-bed",
            ])
            .args(["--window", window, "--dumps"])
            .arg(dumps("four-nodes-node3-eth1-slow")))
    };
    // The last 10 s: only the shaped collectives, about 4% of the baseline.
    let out = watch("10s");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("SLOW: AllGather of 16 MiB runs at 0.04 GB/s busbw, 4% of its baseline 0.89"),
        "{text}"
    );
    assert!(text.contains("at nccl-tests' size 67108864 B"), "{text}");
    assert!(text.contains("SLOW: AllReduce of 64 MiB"), "{text}");
    assert!(!text.contains("LATE:"), "{text}");
    // The whole recording: the clean collectives before the change are the majority, and the
    // median of the window says nothing is wrong (what a long --window costs).
    let out = watch("1h");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// `gpudirect epilog` outside slurmd: no job is no run, and a config it cannot trust or read
/// leaves the folder, said so (the removal itself: tests/cluster/watch.rs, as slurmd runs it).
#[test]
fn epilog_without_a_job_or_a_config_says_so_and_removes_nothing() {
    let out = run(gpudirect_without(&["SLURM_JOB_ID", "SLURM_JOB_UID"]).arg("epilog"));
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no job: slurmd gives its Epilog SLURM_JOB_ID"),
        "{}",
        stderr(&out)
    );
    let out = run(gpudirect_without(&["SLURM_JOB_ID", "SLURM_JOB_UID"]).args([
        "epilog",
        "--job",
        "77",
        "--uid",
        "1000",
        "--config",
        "/nonexistent/gpudirect.toml",
    ]));
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(
        said.contains("job 77") && said.contains("/nonexistent/gpudirect.toml"),
        "{said}"
    );
    assert!(
        said.contains("its telemetry folder, if any, is left"),
        "{said}"
    );
}

/// The connection profiler's `.links` files recorded on the lent H100 under Slurm (call B,
/// `tests/fixtures/nccl-inspector/links-*`, a stand-in for a live job's folders), each cut at
/// the end of a phase of one job, judged over the newest 6 s as the live rounds were.
#[test]
fn recorded_connection_timings_name_node3s_nic_only_when_it_was_slowed() {
    let watch = |name: &str| {
        run(gpudirect_without(&["GPUDIRECT_DB"])
            .args(["watch", "--window", "6s", "--dumps"])
            .arg(dumps(name)))
    };
    let clean = watch("links-clean");
    assert_eq!(clean.status.code(), Some(0), "{}", stdout(&clean));
    assert!(stdout(&clean).contains("connections healthy"));

    // Egress only: the one slow pair is node3's sends; a ring's one pair cannot say which
    // end, and says so.
    let out = watch("links-node3-eth1-slow-out");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("SLOW CONNECTION: rank 2 on node3 -> rank 3 on node4"),
        "{text}"
    );
    assert!(
        text.contains("either end of each may be at fault"),
        "{text}"
    );

    // Both ways: both of rank 2's connections, so rank 2, node3, its NIC.
    let out = watch("links-node3-eth1-slow-both");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("SLOW CONNECTION: rank 2 on node3, its NIC eth1"),
        "{text}"
    );

    // A late rank makes the sends into it wait (2.5x): not a slow link.
    let late = run(gpudirect_without(&["GPUDIRECT_DB"])
        .args(["watch", "--window", "1h", "--dumps"])
        .arg(dumps("links-late-rank2")));
    assert_eq!(late.status.code(), Some(0), "{}", stdout(&late));
    assert!(stdout(&late).contains("connections healthy"));
}
