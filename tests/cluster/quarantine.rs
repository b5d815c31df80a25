//! Quarantine on the local cluster (issue #44): `validate --quarantine` puts the node it
//! finds slow into the tool's reservation instead of draining it; users' jobs no longer
//! start there while root's (the admin's checks) still can, and the evidence is in the
//! node's comment beside an admin's own.

use cluster_tests::*;

/// The reservation of the cluster's config (it writes no `[quarantine]`: the default).
const RESERVATION: &str = "gpudirect-quarantine";

/// The quarantine lifted and every comment cleared, whatever happened: the next test
/// starts with every node idle.
struct LiftQuarantine;

impl Drop for LiftQuarantine {
    fn drop(&mut self) {
        let mut delete = slurm_command_as(Who::Root, "scontrol");
        delete.args(["delete", &format!("reservationname={RESERVATION}")]);
        let _ = delete.output();
        for node in ["node1", "node2", "node3", "node4"] {
            let mut clear = slurm_command_as(Who::Root, "scontrol");
            clear.args(["update", &format!("nodename={node}"), "comment="]);
            let _ = clear.output();
        }
    }
}

/// What `scontrol show reservation` says of ours (empty when there is none).
fn reservation() -> String {
    let mut show = slurm_command_as(Who::Root, "scontrol");
    show.args(["show", "reservation", RESERVATION, "--oneliner"]);
    stdout(&run(&mut show))
}

/// node3's comment, from `scontrol show node node3`'s `Comment=` line.
fn comment_of(node: &str) -> String {
    let mut show = slurm_command_as(Who::Root, "scontrol");
    show.args(["show", "node", node]);
    stdout(&run(&mut show))
        .lines()
        .find_map(|l| l.trim().strip_prefix("Comment="))
        .unwrap_or_default()
        .to_string()
}

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
        comment.starts_with("rack 4, ticket 11 | gpudirect quarantine (validate, node): slow node"),
        "{comment}"
    );
    assert_eq!(comment_of("node2"), "", "node2 was healthy");
    for node in ["node1", "node2", "node3"] {
        let state = sinfo_state(node);
        assert!(!state.contains("drain"), "{node}: {state}");
    }

    // The test user's jobs: a 3-node job takes the three others; node3 is refused.
    let mut three = slurm_command_within(Who::User, "srun", 60);
    three.args(["-N3", "hostname"]);
    let three = run(&mut three);
    assert_ok(&three, "the user's 3-node job");
    let mut hosts: Vec<String> = stdout(&three).lines().map(str::to_string).collect();
    hosts.sort();
    assert_eq!(hosts, ["node1", "node2", "node4"], "{}", stderr(&three));
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

/// `gpudirect sweep --json -- VALIDATE` as root: its exit status and JSON outcome.
fn sweep_with(
    db: &std::path::Path,
    validate: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, serde_json::Value) {
    let lock = db.with_file_name("sweep.lock");
    let gpudirect = workspace_bin("gpudirect").display().to_string();
    let mut cmd = slurm_command_within(Who::Root, &gpudirect, 420);
    cmd.args(["--db", db.to_str().unwrap(), "sweep", "--json"])
        .args(["--lock", lock.to_str().unwrap(), "--"])
        .args(validate)
        .env("GPUDIRECT_CONFIG", plugin_config());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = run(&mut cmd);
    let text = stdout(&output);
    let value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "sweep --json: {e}: {text}\n{}{}",
            stderr(&output),
            cluster_state_if_cut(&output)
        )
    });
    (output.status.code(), value)
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
    assert!(comment_of("node3").contains("gpudirect quarantine (validate, node)"));
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
        comment_of("node3").contains("(validate, node, failed 1)"),
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
/// user's job asking for all four nodes pends, and the sweep submits nothing.
#[test]
fn sweep_submits_nothing_while_a_pending_job_needs_the_nodes() {
    let _guard = cluster();
    let _lift = LiftQuarantine;
    let (standin, db) = standin_and_db("sweep-backoff");
    quarantine_node3(&db, &standin);
    let mut sbatch = slurm_command("sbatch");
    sbatch.args([
        "--parsable",
        "-N4",
        "--job-name=wants-all",
        "--wrap",
        "sleep 1",
    ]);
    let submitted = run(&mut sbatch);
    assert_ok(&submitted, "the user's 4-node job");
    let job = stdout(&submitted).trim().to_string();
    let cancel = scopeguard_cancel(&job);

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

/// Issue #44's first done-when on real traffic: node2's eth3 slowed to 50 Mbit/s, `validate
/// --test rails --quarantine` (root, all nodes, real MPI per rail) quarantines node2 for its
/// NIC; a sweep over the rails while it is still slow keeps it; after `nic ... restore` two
/// sweeps return it and the reservation is gone.
#[test]
fn a_slowed_nic_is_quarantined_kept_while_slow_and_returned_by_two_sweeps_after_restore() {
    let _guard = cluster();
    let _lift = LiftQuarantine;
    let db = temp_db("quarantine-rails");
    let mpi = workspace_bin("gpudirect-mpi");
    let rails = [
        "--test",
        "rails",
        "--rails",
        "eth1,eth2,eth3,eth4",
        "--mpi-program",
        mpi.to_str().unwrap(),
    ];
    {
        let _slow = Nic::set("node2", "eth3", &["slow", "50mbit"]);
        let args = [&["validate", "--json", "--quarantine"][..], &rails].concat();
        let nodes = format!("-N{}", cluster_nodes());
        let output = gpudirect_in_allocation_as(Who::Root, &[&nodes], &db, &args, &[]);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{}{}",
            stdout(&output),
            stderr(&output)
        );
        let comment = comment_of("node2");
        assert!(
            comment.starts_with("gpudirect quarantine (validate, nic): ")
                && comment.contains("eth3"),
            "{comment}"
        );
        let shown = reservation();
        assert!(shown.contains("Nodes=node2 "), "{shown}");

        let (code, out) = sweep_with(&db, &rails, &[]);
        assert_eq!(code, Some(1), "still slow: {out}");
        assert_eq!(out["suspects"], serde_json::json!(["node2"]), "{out}");
        assert_eq!(out["nodes"][0]["verdict"], "slow_node", "{out}");
        assert_eq!(out["nodes"][0]["action"], "kept", "{out}");
    }
    for want in ["kept", "returned"] {
        let (code, out) = sweep_with(&db, &rails, &[]);
        assert_eq!(code, Some(0), "restored: {out}");
        assert_eq!(out["nodes"][0]["verdict"], "healthy", "{out}");
        assert_eq!(out["nodes"][0]["action"], want, "{out}");
    }
    assert_eq!(comment_of("node2"), "");
    assert!(reservation().contains("not found"));
}
