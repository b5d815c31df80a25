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
