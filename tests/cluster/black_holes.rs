//! Black holes on the local cluster (issue #44): `gpudirect sweep --black-holes` reads the
//! ended jobs from Slurm's accounting. The local cluster has it (slurmdbd) on the host's Slurm
//! (22.05) only, so this runs in the `launcher` binary, not in `extra` with the rest of the
//! quarantine's tests (which runs on 24.11 and 26.05 too).

use cluster_tests::*;

/// Issue #44's black hole: one job, run by two ordinary users on node1, node2 and node3, that
/// fails within 2 s only where the host is node3 (exit 1). `sweep --black-holes` (as root)
/// reads the ended jobs from sacct (slurmdbd on the local cluster), names node3 alone with
/// the evidence, quarantines it (the reservation holds it) and tests it in the same sweep.
#[test]
fn sweep_names_a_black_hole_from_sacct_and_quarantines_it() {
    let _guard = cluster();
    let _lift = LiftQuarantine;
    let started = std::time::Instant::now();
    let (standin, db) = standin_and_db("black-hole");
    let fails_on_node3 = r#"sleep 1; [ "$(hostname)" != node3 ]"#;
    for who in [Who::User, Who::Other] {
        for node in ["node3", "node1", "node3", "node2"] {
            let mut srun = slurm_command_as(who, "srun");
            srun.args(["-N1", "-w", node, "sh", "-c", fails_on_node3]);
            let out = run(&mut srun);
            assert_eq!(
                out.status.success(),
                node != "node3",
                "{node}: {}",
                stderr(&out)
            );
        }
    }
    // slurmctld hands job ends to slurmdbd within a second or two. The window reaches back
    // to this test's start, counted again when it is used: it is relative to "now".
    let window = || format!("{}s", started.elapsed().as_secs() + 3);
    let ended = || {
        let mut sacct = slurm_command_as(Who::Root, "sacct");
        sacct
            .args(["-a", "-X", "-n", "-P", "-o", "JobID", "--starttime"])
            .arg(format!("now-{}", started.elapsed().as_secs() + 3));
        stdout(&run(&mut sacct)).lines().count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while ended() < 8 {
        assert!(
            std::time::Instant::now() < deadline,
            "sacct never showed the 8 jobs"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let mut validate: Vec<&str> = VALIDATE_STANDIN_ARGS.to_vec();
    validate.extend(["--nccl-tests-dir", standin.to_str().unwrap()]);
    let (code, out) = sweep_with_args(&db, &["--black-holes", &window()], &validate, &[]);
    assert_eq!(code, Some(1), "a black hole quarantined: {out}");
    let holes = out["black_holes"].as_array().expect("black_holes");
    assert_eq!(holes.len(), 1, "node3 alone: {out}");
    assert_eq!(holes[0]["node"], "node3", "{out}");
    assert_eq!(holes[0]["action"], "quarantined", "{out}");
    let comment = comment_of("node3");
    assert!(
        comment.contains("gpudirect quarantine (validate, node")
            && comment.contains("black hole: 4 of its 4 jobs")
            && comment.contains("of 2 users (gdtestuser, gdtestuser2)"),
        "{comment}"
    );
    assert!(reservation().contains("Nodes=node3"), "{}", reservation());
    // Quarantined, then swept: the same sweep tested it (the stand-in passes it).
    assert_eq!(out["suspects"], serde_json::json!(["node3"]), "{out}");
    assert_eq!(out["nodes"][0]["action"], "kept", "{out}");
}
