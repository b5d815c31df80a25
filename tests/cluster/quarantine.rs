//! Quarantine on the local cluster (issue #44): `validate --quarantine` puts the node it
//! finds slow into the tool's reservation instead of draining it; users' jobs no longer
//! start there while root's (the admin's checks) still can, and the evidence is in the
//! node's comment beside an admin's own.

use cluster_tests::*;

/// Issue #44's first done-when, with the nccl-tests stand-in making node3 slow: `validate
/// --quarantine` (root, in an allocation of node[1-3]) quarantines node3 and nothing else,
/// keeps the admin's comment, and drains nothing; then the test user's 3-node job runs on
/// node1, node2 and node4, a job of theirs asking for node3 is refused, and root's job in
/// the reservation still runs there together with a node outside it.
#[test]
fn validate_quarantine_keeps_users_off_a_slow_node_and_root_can_still_test_it() {
    let _guard = cluster();
    let _lift = LiftQuarantine;
    let (standin, db) = standin_and_db("quarantine");
    let dir = db.parent().unwrap().to_path_buf();
    let mut admin_note = slurm_command_as(Who::Root, "scontrol");
    admin_note.args(["update", "nodename=node3", "comment=rack 4, ticket 11"]);
    assert_ok(&run(&mut admin_note), "the admin's comment on node3");

    let args = [
        &["validate"][..],
        &VALIDATE_STANDIN_ARGS,
        &[
            "--json",
            "--quarantine",
            "--nccl-tests-dir",
            standin.to_str().unwrap(),
        ],
    ]
    .concat();
    let steps = [Step::gpudirect(&db, &args).env("STANDIN_SLOW_NODES", "node3")];
    let (output, steps) =
        steps_in_one_allocation_as(Who::Root, &["-N3", "-w", "node[1-3]"], &dir, &steps);
    assert_ok(&output, "the allocation");
    let [validate] = &steps[..] else {
        panic!("{steps:?}")
    };
    validate.assert_code(1, "validate --quarantine is degraded");
    let report: serde_json::Value = serde_json::from_str(&validate.stdout).expect("--json");
    let actions = report["drains"].as_array().expect("drains");
    assert_eq!(actions.len(), 1, "{report}");
    assert_eq!(actions[0]["node"], "node3", "{report}");
    assert_eq!(actions[0]["outcome"], "quarantined", "{report}");
    assert!(
        validate
            .stderr
            .contains("quarantined node3 in reservation gpudirect-quarantine"),
        "{}",
        validate.stderr
    );

    // In Slurm: node3 alone in the reservation, its comment the admin's and ours; no drain.
    let shown = reservation();
    assert!(shown.contains("Nodes=node3 "), "{shown}");
    assert!(shown.contains("MAINT") && shown.contains("FLEX"), "{shown}");
    let comment = comment_of("node3");
    assert!(
        comment.starts_with("rack 4, ticket 11 | gpudirect quarantine (validate, node, since ")
            && comment.contains("): slow node"),
        "{comment}"
    );
    assert_eq!(comment_of("node2"), "", "node2 was healthy");
    for node in ["node1", "node2", "node3"] {
        let state = sinfo_state(node);
        assert!(!state.contains("drain"), "{node}: {state}");
    }

    // The test user's jobs: one on every node but one runs on all the others (waiting for
    // the allocation's nodes to finish completing); node3 is refused.
    let nodes = cluster_nodes();
    let mut others = slurm_command_within(Who::User, "srun", 60);
    others.args([format!("-N{}", nodes - 1).as_str(), "hostname"]);
    let others = run(&mut others);
    assert_ok(&others, "the user's job on all nodes but one");
    let mut hosts: Vec<String> = stdout(&others).lines().map(str::to_string).collect();
    hosts.sort();
    let mut expected: Vec<String> = (1..=nodes)
        .map(|i| format!("node{i}"))
        .filter(|node| node != "node3")
        .collect();
    expected.sort();
    assert_eq!(hosts, expected, "{}", stderr(&others));
    let mut on_node3 = slurm_command_within(Who::User, "srun", 60);
    on_node3.args(["--immediate=5", "-w", "node3", "hostname"]);
    let on_node3 = run(&mut on_node3);
    assert!(!on_node3.status.success(), "the user's job ran on node3");
    let mut in_reservation = slurm_command_within(Who::User, "srun", 60);
    in_reservation.args([
        "--immediate=5",
        "--reservation",
        RESERVATION,
        "-w",
        "node3",
        "hostname",
    ]);
    let in_reservation = run(&mut in_reservation);
    assert!(
        stderr(&in_reservation).contains("Access denied"),
        "the user may not use the reservation: {}",
        stderr(&in_reservation)
    );

    // Root's job (the admin's checks) in the reservation: node3 with node4, outside it.
    let mut roots = slurm_command_within(Who::Root, "srun", 60);
    roots.args([
        "--reservation",
        RESERVATION,
        "-N2",
        "-w",
        "node3,node4",
        "hostname",
    ]);
    let roots = run(&mut roots);
    assert_ok(&roots, "root's job in the reservation");
    let mut hosts: Vec<String> = stdout(&roots).lines().map(str::to_string).collect();
    hosts.sort();
    assert_eq!(hosts, ["node3", "node4"]);
}

/// `gpudirect sweep` as root, with the nccl-tests stand-in and `slow` naming the nodes it
/// makes slow: its exit status and JSON outcome.
fn sweep(
    db: &std::path::Path,
    standin: &std::path::Path,
    slow: &str,
) -> (Option<i32>, serde_json::Value) {
    let mut validate: Vec<&str> = VALIDATE_STANDIN_ARGS.to_vec();
    validate.extend(["--nccl-tests-dir", standin.to_str().unwrap()]);
    sweep_with(db, &validate, &[("STANDIN_SLOW_NODES", slow)])
}

/// node3 quarantined by `validate --quarantine` with the stand-in making it slow.
fn quarantine_node3(db: &std::path::Path, standin: &std::path::Path) {
    let args = [
        &["validate"][..],
        &VALIDATE_STANDIN_ARGS,
        &[
            "--json",
            "--quarantine",
            "--nccl-tests-dir",
            standin.to_str().unwrap(),
        ],
    ]
    .concat();
    let steps = [Step::gpudirect(db, &args).env("STANDIN_SLOW_NODES", "node3")];
    let dir = db.parent().unwrap().to_path_buf();
    let (output, steps) =
        steps_in_one_allocation_as(Who::Root, &["-N3", "-w", "node[1-3]"], &dir, &steps);
    assert_ok(&output, "the allocation");
    steps[0].assert_code(1, "validate --quarantine");
    assert!(comment_of("node3").contains("gpudirect quarantine (validate, node, since "));
}

/// Issue #44's sweep done-when, on the stand-in (the fault is the stand-in's slow node3,
/// "restored" by no longer naming it): a sweep with node3 still slow keeps it (failed 1);
/// with the fault gone two sweeps return it (the reservation then deleted, the admin's
/// comment kept); quarantined again, three failed sweeps drain it with the evidence.
#[test]
fn sweep_keeps_a_failing_node_returns_it_after_two_passes_and_drains_it_after_three_failures() {
    let _guard = cluster();
    let _lift = LiftQuarantine;
    let _resume = ResumeNodesOnDrop;
    let (standin, db) = standin_and_db("sweep");
    let mut admin_note = slurm_command_as(Who::Root, "scontrol");
    admin_note.args(["update", "nodename=node3", "comment=rack 4"]);
    assert_ok(&run(&mut admin_note), "the admin's comment on node3");
    quarantine_node3(&db, &standin);

    let (code, out) = sweep(&db, &standin, "node3");
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(out["suspects"], serde_json::json!(["node3"]), "{out}");
    assert_eq!(out["nodes"][0]["action"], "kept", "{out}");
    assert_eq!(out["nodes"][0]["verdict"], "slow_node", "{out}");
    assert!(
        comment_of("node3").contains("(validate, node, failed 1, since "),
        "{}",
        comment_of("node3")
    );

    for (round, want) in [(1, "kept"), (2, "returned")] {
        let (code, out) = sweep(&db, &standin, "");
        assert_eq!(code, Some(0), "pass {round}: {out}");
        assert_eq!(out["nodes"][0]["action"], want, "pass {round}: {out}");
    }
    assert_eq!(
        comment_of("node3"),
        "rack 4",
        "the admin's comment kept, ours gone"
    );
    let shown = reservation();
    assert!(
        shown.contains("not found"),
        "no node quarantined, no reservation: {shown}"
    );

    quarantine_node3(&db, &standin);
    let mut last = serde_json::Value::Null;
    for _ in 0..3 {
        let (code, out) = sweep(&db, &standin, "node3");
        assert_eq!(code, Some(1), "{out}");
        last = out;
    }
    assert_eq!(last["nodes"][0]["action"], "drained", "{last}");
    let state = sinfo_state("node3");
    assert!(
        state.starts_with("drain")
            && state.contains("gpudirect validate: sweep: failed 3 sweeps in a row: slow node"),
        "{state}"
    );
    assert!(
        !comment_of("node3").contains("gpudirect quarantine"),
        "out of the quarantine"
    );
}

/// A sweep never takes nodes a pending job waits for: with node3 quarantined, the test
/// user's job asking for every node of the cluster pends, and the sweep submits nothing.
#[test]
fn sweep_submits_nothing_while_a_pending_job_needs_the_nodes() {
    let _guard = cluster();
    let _lift = LiftQuarantine;
    let (standin, db) = standin_and_db("sweep-backoff");
    quarantine_node3(&db, &standin);
    let mut sbatch = slurm_command("sbatch");
    sbatch.args([
        "--parsable",
        format!("-N{}", cluster_nodes()).as_str(),
        "--job-name=wants-all",
        "--wrap",
        "sleep 1",
    ]);
    let submitted = run(&mut sbatch);
    assert_ok(&submitted, "the user's job on every node");
    let job = stdout(&submitted).trim().to_string();
    let cancel = scopeguard_cancel(&job);
    pending_for_nodes(&job);

    let (code, out) = sweep(&db, &standin, "");
    assert_eq!(code, Some(0), "{out}");
    let skipped = out["skipped"].as_str().unwrap_or_default();
    assert!(
        skipped.contains(&format!("job {job}")) && skipped.contains("waits for nodes"),
        "{out}"
    );
    assert_eq!(out["nodes"], serde_json::json!([]), "{out}");
    let mut squeue = slurm_command_as(Who::Root, "squeue");
    squeue.args(["-h", "-n", "gpudirect-sweep"]);
    assert_eq!(
        stdout(&run(&mut squeue)).trim(),
        "",
        "no sweep job submitted"
    );
    drop(cancel);
}

/// Waits (up to 30 s) until Slurm has tried `job` and left it pending for nodes: until then
/// its reason is `None` and a sweep rightly sees no job waiting.
fn pending_for_nodes(job: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let mut squeue = slurm_command_as(Who::Root, "squeue");
        squeue.args(["-h", "-j", job, "-o", "%T %r"]);
        let shown = stdout(&run(&mut squeue)).trim().to_string();
        let (state, reason) = shown.split_once(' ').unwrap_or((&shown, ""));
        if state == "PENDING" && reason != "None" {
            return;
        }
        assert!(
            state == "PENDING" && std::time::Instant::now() < deadline,
            "job {job} should pend for nodes while node3 is quarantined: {shown}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// Cancels `job` when dropped (the test user's own job).
fn scopeguard_cancel(job: &str) -> impl Drop + '_ {
    struct Cancel<'a>(&'a str);
    impl Drop for Cancel<'_> {
        fn drop(&mut self) {
            let mut scancel = slurm_command("scancel");
            scancel.arg(self.0);
            let _ = scancel.output();
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    Cancel(job)
}
