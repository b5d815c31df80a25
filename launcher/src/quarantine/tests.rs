//! The quarantine's pure parts, on Slurm 22.05's own output recorded on the local cluster.

use super::*;

/// `scontrol show node node3` on Slurm 22.05.8, node drained, with a comment of an admin's
/// text and ours (recorded on the local cluster, 2026-12-05).
const SHOW_NODE_22_05: &str = "NodeName=node3 Arch=x86_64 CoresPerSocket=1 
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=1.78
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=gpu:8
   NodeAddr=10.213.0.3 NodeHostName=node3 Version=22.05.8
   OS=Linux 6.18.44-fc-v1252 #1 SMP PREEMPT_DYNAMIC @0 
   RealMemory=1 AllocMem=0 FreeMem=13103 Sockets=8 Boards=1
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=local 
   BootTime=2026-12-04T16:16:50 SlurmdStartTime=2026-12-05T07:59:32
   LastBusyTime=2026-12-05T08:20:18
   CfgTRES=cpu=8,mem=1M,billing=8
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
   Reason=test why [root@2026-12-05T08:20:35]
   Comment=admin note Reason=x | gpudirect quarantine (validate, nic): eth3 slow

NodeName=node4 Arch=x86_64 CoresPerSocket=1 
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s

";

/// `scontrol show reservation gpudirect-quarantine --oneliner` on Slurm 22.05.8.
const SHOW_RESERVATION_22_05: &str = "ReservationName=gpudirect-quarantine StartTime=2026-12-05T08:03:23 EndTime=2027-12-05T08:03:23 Duration=365-00:00:00 Nodes=node[2-3] NodeCnt=2 CoreCnt=16 Features=(null) PartitionName=(null) Flags=MAINT,FLEX,IGNORE_JOBS,SPEC_NODES TRES=cpu=16 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n";

#[test]
fn an_entry_reads_back_what_it_wrote_and_nothing_else() {
    let mut entry = Entry::new(
        Tool::Validate,
        Cause::Nic,
        "node2 eth3 slow | 40%\n\x1b[2Jof floor",
    );
    assert_eq!(entry.problem, "node2 eth3 slow / 40% [2Jof floor");
    assert_eq!(
        entry.render(),
        "gpudirect quarantine (validate, nic): node2 eth3 slow / 40% [2Jof floor"
    );
    assert_eq!(Entry::parse(&entry.render()), Some(entry.clone()));
    entry.passed = 1;
    entry.failed = 2;
    assert_eq!(
        entry.render(),
        "gpudirect quarantine (validate, nic, passed 1, failed 2): node2 eth3 slow / 40% [2Jof floor"
    );
    assert_eq!(Entry::parse(&entry.render()), Some(entry));
    for other in [
        "gpudirect quarantine (sweep, nic): x",
        "gpudirect quarantine (health, disk): x",
        "gpudirect quarantine (health, nic, passed x): x",
        "gpudirect quarantine (health, nic) x",
        "bad DIMM",
    ] {
        assert_eq!(Entry::parse(other), None, "{other}");
    }
    let long = "x".repeat(500);
    assert_eq!(
        Entry::new(Tool::Health, Cause::Node, &long)
            .problem
            .chars()
            .count(),
        MAX_PROBLEM
    );
}

#[test]
fn an_admins_comment_is_kept_beside_ours() {
    let ours = Entry::new(Tool::Health, Cause::Nic, "eth1 down");
    let both = join_comment(Some("rack 4, ticket 11"), Some(&ours));
    assert_eq!(
        both,
        "rack 4, ticket 11 | gpudirect quarantine (health, nic): eth1 down"
    );
    assert_eq!(
        split_comment(Some(&both)),
        (Some("rack 4, ticket 11".into()), Some(ours.clone()))
    );
    assert_eq!(
        split_comment(Some(&ours.render())),
        (None, Some(ours.clone()))
    );
    assert_eq!(split_comment(Some("rack 4")), (Some("rack 4".into()), None));
    assert_eq!(split_comment(None), (None, None));
    assert_eq!(split_comment(Some("  ")), (None, None));
    // Released: the admin's text alone again, or nothing.
    assert_eq!(
        join_comment(Some("rack 4, ticket 11"), None),
        "rack 4, ticket 11"
    );
    assert_eq!(join_comment(None, None), "");
    // A text that only looks like ours is the admin's.
    let lookalike = "see gpudirect quarantine (later)";
    assert_eq!(
        split_comment(Some(lookalike)),
        (Some(lookalike.into()), None)
    );
}

#[test]
fn the_reservation_changes_only_to_hold_exactly_the_quarantined_nodes() {
    let nodes = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(change_for(None, &[]), Change::Nothing);
    assert_eq!(
        change_for(None, &nodes(&["node3", "node2"])),
        Change::Create(nodes(&["node2", "node3"]))
    );
    assert_eq!(change_for(Some(&nodes(&["node2"])), &[]), Change::Delete);
    assert_eq!(
        change_for(
            Some(&nodes(&["node3", "node2"])),
            &nodes(&["node2", "node3", "node2"])
        ),
        Change::Nothing
    );
    assert_eq!(
        change_for(Some(&nodes(&["node2"])), &nodes(&["node2", "node4"])),
        Change::SetNodes(nodes(&["node2", "node4"]))
    );
}

#[test]
fn slurms_output_gives_the_comments_and_the_reservations_nodes() {
    assert_eq!(
        parse_node_comments(SHOW_NODE_22_05),
        vec![
            (
                "node3".to_string(),
                Some(
                    "admin note Reason=x | gpudirect quarantine (validate, nic): eth3 slow"
                        .to_string()
                )
            ),
            ("node4".to_string(), None),
        ]
    );
    let (admin, ours) = split_comment(parse_node_comments(SHOW_NODE_22_05)[0].1.as_deref());
    assert_eq!(admin.as_deref(), Some("admin note Reason=x"));
    assert_eq!(
        ours.map(|e| (e.tool, e.cause)),
        Some((Tool::Validate, Cause::Nic))
    );
    assert_eq!(
        parse_reservation_nodes(SHOW_RESERVATION_22_05),
        Ok(vec!["node2".to_string(), "node3".to_string()])
    );
    assert_eq!(
        parse_reservation_nodes("ReservationName=r Nodes=(null) NodeCnt=0"),
        Ok(vec![])
    );
    assert!(parse_reservation_nodes("ReservationName=r").is_err());
    assert!(parse_reservation_nodes("Nodes=node[3-").is_err());
}

#[test]
fn a_pending_job_that_waits_for_nodes_stops_the_sweep_and_others_do_not() {
    use sweep::queue_wants_nodes;
    assert_eq!(queue_wants_nodes(""), None);
    assert_eq!(
        queue_wants_nodes("41 Dependency\n42 JobHeldUser\n43 BeginTime\n"),
        None
    );
    assert_eq!(
        queue_wants_nodes("41 Dependency\n44 ReqNodeNotAvail, Reserved for maintenance\n"),
        Some("job 44 (ReqNodeNotAvail, Reserved for maintenance)".into())
    );
    assert_eq!(
        queue_wants_nodes("45 Resources\n"),
        Some("job 45 (Resources)".into())
    );
    assert_eq!(
        queue_wants_nodes("46 Priority\n"),
        Some("job 46 (Priority)".into())
    );
}

#[test]
fn a_sweep_tests_idle_suspects_with_enough_healthy_partners() {
    use sweep::{idle_nodes, plan, Plan};
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    // sinfo -h -N -o "%N %T" on 22.05 with node3 in the maint reservation.
    let idle = idle_nodes("node1 idle\nnode2 allocated\nnode3 maint\nnode4 idle\nnode5 drained\nnode6 idle*\nnode7 mixed\n");
    assert_eq!(idle, s(&["node1", "node3", "node4"]));
    assert_eq!(
        plan(&s(&["node3"]), &idle, 4, 2, 0),
        Ok(Plan {
            suspects: s(&["node3"]),
            partners: s(&["node1", "node4"])
        })
    );
    // A quarantined node that is busy (a job that ran on before) waits for the next sweep.
    assert!(plan(&s(&["node2"]), &idle, 4, 2, 0)
        .unwrap()
        .suspects
        .is_empty());
    // Too few: one suspect and one partner.
    let e = plan(&s(&["node3"]), &s(&["node3", "node4"]), 4, 2, 0).unwrap_err();
    assert!(e.contains("a sweep needs 3 nodes"), "{e}");
    // No suspect: healthy idle nodes are swept themselves, at least three.
    assert_eq!(plan(&[], &idle, 4, 2, 0).unwrap().partners.len(), 3);
    // Every idle node quarantined: no healthy partner.
    let e = plan(&s(&["node1", "node3", "node4"]), &idle, 2, 2, 0).unwrap_err();
    assert!(e.contains("0 healthy"), "{e}");
}

/// One suspect among six idle nodes, two partners a sweep: sweep after sweep (each counted
/// sweep moves the rotation on) it meets every healthy node, two at a time.
#[test]
fn the_partners_rotate_from_sweep_to_sweep() {
    use sweep::{plan, rotation};
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let idle = s(&["node1", "node2", "node3", "node4", "node5", "node6"]);
    let suspects = s(&["node3"]);
    let mut entry = Entry::new(Tool::Validate, Cause::Node, "slow");
    let mut met = std::collections::BTreeSet::new();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = rotation(&[("node3".to_string(), entry.clone())], &suspects);
        let p = plan(&suspects, &idle, 4, 2, r).unwrap();
        assert_eq!(p.partners.len(), 2);
        assert!(!p.partners.contains(&"node3".to_string()));
        met.extend(p.partners.clone());
        seen.push(p.partners);
        entry.failed += 1;
    }
    assert_eq!(met.len(), 5, "{seen:?}");
    assert_ne!(seen[0], seen[1]);
    // Another node's count does not move this sweep's partners.
    let other = [("node5".to_string(), entry.clone())];
    assert_eq!(rotation(&other, &suspects), 0);
}

#[test]
fn passes_in_a_row_return_a_node_and_failures_in_a_row_drain_it() {
    use sweep::{after_sweep, Next};
    let settings = Settings::default();
    let start = Entry::new(Tool::Validate, Cause::Node, "slow node");
    let (once, next) = after_sweep(&start, Some("healthy"), &settings);
    assert_eq!((once.passed, once.failed, next), (1, 0, Next::Keep));
    let (twice, next) = after_sweep(&once, Some("healthy"), &settings);
    assert_eq!((twice.passed, next), (2, Next::Return));
    // A failure breaks the run of passes.
    let (failed, next) = after_sweep(&once, Some("slow_node"), &settings);
    assert_eq!((failed.passed, failed.failed, next), (0, 1, Next::Keep));
    let (f2, _) = after_sweep(&failed, Some("failed"), &settings);
    let (f3, next) = after_sweep(&f2, Some("down"), &settings);
    assert_eq!((f3.failed, next), (3, Next::Drain));
    for nothing in [
        None,
        Some("could_not_start"),
        Some("unknown"),
        Some("bad_link"),
    ] {
        assert_eq!(
            after_sweep(&once, nothing, &settings),
            (once.clone(), Next::Unchanged)
        );
    }
}

#[test]
fn a_rails_report_gives_each_node_its_worst_rail() {
    let report = serde_json::json!({"nodes": ["node1", "node2"], "units": [
        {"node": "node1", "rail": "eth1", "verdict": {"kind": "healthy"}},
        {"node": "node2", "rail": "eth1", "verdict": {"kind": "healthy"}},
        {"node": "node2", "rail": "eth3", "verdict": {"kind": "slow_node"}},
        {"node": "node2", "rail": "eth4", "verdict": {"kind": "down"}},
    ]});
    let v = sweep::verdicts(&report);
    assert_eq!(v.get("node1").map(String::as_str), Some("healthy"));
    assert_eq!(v.get("node2").map(String::as_str), Some("slow_node"));
    let nodes = serde_json::json!({"nodes": [{"node": "node3", "verdict": {"kind": "failed"}}]});
    assert_eq!(
        sweep::verdicts(&nodes).get("node3").map(String::as_str),
        Some("failed")
    );
    assert!(sweep::verdicts(&serde_json::json!({})).is_empty());
}

#[test]
fn a_node_quarantined_for_a_nic_is_swept_per_rail_unless_the_admin_chose_a_test() {
    let nic = Entry::new(Tool::Validate, Cause::Nic, "node2 eth3 slow");
    let node = Entry::new(Tool::Validate, Cause::Node, "node3 slow in every pair");
    let entries = vec![("node2".to_string(), nic), ("node3".to_string(), node)];
    let words = |list: &[&str]| list.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    let both = words(&["node2", "node3"]);

    assert_eq!(
        sweep::chosen_test(&words(&["--floor", "60"]), &entries, &both),
        words(&["--per-rail", "--gpudirect", "auto"])
    );
    // The admin's mode or rails are theirs: only --per-rail is added.
    assert_eq!(
        sweep::chosen_test(&words(&["--gpudirect=tcpx"]), &entries, &both),
        words(&["--per-rail"])
    );
    assert_eq!(
        sweep::chosen_test(&words(&["--rails", "eth1,eth2"]), &entries, &both),
        words(&["--per-rail"])
    );
    // The admin chose a test; or no suspect of this sweep is there for a NIC.
    for admin in [&["--test", "rails"][..], &["--test=nccl"], &["--per-rail"]] {
        assert!(sweep::chosen_test(&words(admin), &entries, &both).is_empty());
    }
    assert!(sweep::chosen_test(&[], &entries, &words(&["node3"])).is_empty());
}
