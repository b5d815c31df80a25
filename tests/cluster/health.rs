//! `gpudirect health` as Slurm's own HealthCheckProgram on the local cluster (issue #17):
//! slurmd runs it every few seconds on every node (`scripts/local-cluster health on`); a
//! NIC taken down drains its node with a `gpudirect health:` reason naming the NIC within one
//! interval, and restoring it returns the node within the next; a drain an admin set for
//! another reason, or by `gpudirect validate`, is never lifted. Its `nic_counters` check names
//! a node's veth whose receive drops rose between two runs (issue #44).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cluster_tests::*;
use gpudirect::runner::is_running;

/// Seconds between two health checks of a node (HealthCheckInterval).
const INTERVAL: u64 = 3;

/// `sinfo`'s state and reason of `node`: `drained gpudirect: NIC eth3 is down`.
fn state_and_reason(node: &str) -> String {
    let mut sinfo = slurm_command("sinfo");
    sinfo.args(["-h", "-n", node, "-o", "%T %E"]);
    stdout(&run(&mut sinfo)).trim().to_string()
}

/// Polls `node` until `want` holds of its state and reason, for up to `limit`; the last
/// state seen, and how long it took.
fn wait_for(node: &str, limit: Duration, want: impl Fn(&str) -> bool) -> (String, Duration) {
    let start = Instant::now();
    loop {
        let seen = state_and_reason(node);
        if want(&seen) || start.elapsed() > limit {
            return (seen, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Health checks off, NICs restored and every node back in service, whatever happened.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        local_cluster(&["health", "off"]);
        local_cluster(&["nic", "node2", "eth3", "restore"]);
        // Every node: the quick test's checks run on all of them, and a hung one drains
        // each (the tests' own drains of node3 and node4 go too).
        let mut sinfo = slurm_command("sinfo");
        sinfo.args(["-h", "-N", "-o", "%N"]);
        for node in stdout(&run(&mut sinfo)).lines() {
            let mut cmd = slurm_command_as(Who::Root, "scontrol");
            cmd.args([
                "update",
                &format!("nodename={}", node.trim()),
                "state=resume",
            ]);
            run(&mut cmd);
        }
        // `health off` reconfigures Slurm: the nodes re-register (sinfo marks them `*`
        // meanwhile). The next test gets a cluster whose every node answers.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            let mut sinfo = slurm_command("sinfo");
            sinfo.args(["-h", "-N", "-o", "%t"]);
            let states = stdout(&run(&mut sinfo));
            if !states.is_empty() && !states.contains('*') && !states.contains("drain") {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

#[test]
fn the_health_check_drains_a_node_whose_nic_is_down_and_returns_it_once_restored() {
    let _guard = cluster();
    let _restore = Restore;
    // An admin's own drain, for another reason, before the checks start.
    let mut admin = slurm_command_as(Who::Root, "scontrol");
    admin.args([
        "update",
        "nodename=node3",
        "state=drain",
        "reason=bad DIMM, ticket 4411",
    ]);
    assert_ok(&run(&mut admin), "an admin's drain");
    // A drain `gpudirect validate --drain` set (its tag): health, which finds node4
    // healthy every interval, must not return it (security review S3).
    let mut validate = slurm_command_as(Who::Root, "scontrol");
    validate.args([
        "update",
        "nodename=node4",
        "state=drain",
        "reason=gpudirect validate: slow node, slow in every pairing (3/3)",
    ]);
    assert_ok(&run(&mut validate), "validate's drain");
    let _ = std::fs::remove_file(state_dir().join("log/evidence-node2.json"));
    local_cluster_ok(&["health", "on", "--interval", &INTERVAL.to_string()]);
    // A healthy node stays in service through a few checks.
    std::thread::sleep(Duration::from_secs(2 * INTERVAL + 1));
    let seen = state_and_reason("node2");
    assert!(seen.starts_with("idle"), "{seen}");

    local_cluster_ok(&["nic", "node2", "eth3", "down"]);
    // Within one interval (and the polling's margin: slurmd's timer runs on its own).
    let limit = Duration::from_secs(2 * INTERVAL + 5);
    let (seen, took) = wait_for("node2", limit, |s| s.starts_with("drain"));
    assert!(
        seen.starts_with("drain") && seen.contains("gpudirect health:") && seen.contains("eth3"),
        "after {took:?}: {seen}"
    );
    eprintln!("node2 drained {took:?} after eth3 went down: {seen}");
    // --on-drain got the evidence for the repair request (the wrapper keeps it). It runs
    // after the drain, which the poll above may see first.
    let kept = state_dir().join("log/evidence-node2.json");
    let start = Instant::now();
    let text = loop {
        match std::fs::read_to_string(&kept) {
            Ok(text) if !text.trim().is_empty() => break text,
            _ if start.elapsed() > Duration::from_secs(10) => {
                panic!(
                    "the --on-drain command kept no evidence at {}",
                    kept.display()
                )
            }
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let evidence: serde_json::Value = serde_json::from_str(&text).expect("the evidence is JSON");
    assert_eq!(evidence["node"], "node2", "{evidence}");
    assert_eq!(evidence["failures"][0]["check"], "nics", "{evidence}");
    assert!(
        evidence["reason"].as_str().unwrap().contains("eth3"),
        "{evidence}"
    );

    local_cluster_ok(&["nic", "node2", "eth3", "restore"]);
    let (seen, took) = wait_for("node2", limit, |s| s.starts_with("idle"));
    assert!(seen.starts_with("idle"), "after {took:?}: {seen}");
    eprintln!("node2 back {took:?} after eth3 was restored: {seen}");

    // node3 passed every check meanwhile, but its drain is the admin's: it stays.
    let seen = state_and_reason("node3");
    assert!(
        seen.starts_with("drain") && seen.contains("bad DIMM, ticket 4411"),
        "{seen}"
    );
    let log = std::fs::read_to_string(state_dir().join("log/health-node3.log")).unwrap();
    assert!(
        log.contains("node3 stays drained: not health's own drain"),
        "{log}"
    );
    // node4, drained by validate, is still drained after all these intervals.
    let seen = state_and_reason("node4");
    assert!(
        seen.starts_with("drain") && seen.contains("gpudirect validate: slow node"),
        "{seen}"
    );
    let log = std::fs::read_to_string(state_dir().join("log/health-node4.log")).unwrap();
    assert!(
        log.matches("node4 stays drained: not health's own drain")
            .count()
            >= 2,
        "two health intervals at least:\n{log}"
    );
}

/// `health on --quarantine` (issue #44): node2's eth3 down puts node2 into the quarantine
/// reservation within an interval or two, with the evidence in its comment, classed `nic`,
/// and never drains it; restored, health returns its own quarantine and the reservation
/// goes.
#[test]
fn the_health_check_quarantines_a_node_whose_nic_is_down_and_returns_it_once_restored() {
    let _guard = cluster();
    let _restore = Restore;
    let _lift = LiftQuarantine;
    local_cluster_ok(&[
        "health",
        "on",
        "--quarantine",
        "--interval",
        &INTERVAL.to_string(),
    ]);
    local_cluster_ok(&["nic", "node2", "eth3", "down"]);
    let limit = Duration::from_secs(3 * INTERVAL + 10);
    // The comment is written first, then the reservation: both within the limit.
    let start = Instant::now();
    let comment = loop {
        let comment = comment_of("node2");
        let done =
            comment.contains("gpudirect quarantine") && reservation().contains("Nodes=node2 ");
        if done || start.elapsed() > limit {
            break comment;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        comment.starts_with("gpudirect quarantine (health, nic, since ")
            && comment.contains("eth3"),
        "after {:?}: {comment}",
        start.elapsed()
    );
    let mut show = slurm_command_as(Who::Root, "scontrol");
    show.args(["show", "reservation", "gpudirect-quarantine", "--oneliner"]);
    let shown = stdout(&run(&mut show));
    assert!(shown.contains("Nodes=node2 "), "{shown}");
    let seen = state_and_reason("node2");
    assert!(!seen.contains("drain"), "quarantined, not drained: {seen}");

    local_cluster_ok(&["nic", "node2", "eth3", "restore"]);
    // The comment is cleared first, then the reservation deleted: both within the limit.
    let start = Instant::now();
    while (comment_of("node2").contains("gpudirect quarantine")
        || !reservation().contains("not found"))
        && start.elapsed() < limit
    {
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(comment_of("node2"), "", "after {:?}", start.elapsed());
    let shown = stdout(&run(&mut show));
    assert!(shown.contains("not found"), "{shown}");
    // The wrapper writes a run's output to the log once the run ends, which can be just
    // after the run cleared the comment and deleted the reservation (seen in CI).
    let read_log =
        || std::fs::read_to_string(state_dir().join("log/health-node2.log")).unwrap_or_default();
    let start = Instant::now();
    while !read_log().contains("returned node2 from the quarantine") && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(250));
    }
    let log = read_log();
    assert!(log.contains("returned node2 from the quarantine"), "{log}");
}

/// How many of node2's health runs since `from` (a byte offset in its log) exited `code`.
fn exits_since(from: usize, code: u32) -> usize {
    let log = std::fs::read_to_string(state_dir().join("log/health-node2.log")).unwrap_or_default();
    log.get(from..)
        .unwrap_or_default()
        .matches(&format!("health exit {code} "))
        .count()
}

/// Security review S2, under slurmd as its HealthCheckProgram (root, slurmd's bare
/// environment): the quick all_reduce without a history to record in is "could not check"
/// (exit 3) and drains nothing, interval after interval (the earlier build drained every
/// node); a hung all_reduce_perf is killed, its whole tree, within `--deadline`, and the
/// node is drained for it with health's tag.
#[test]
fn the_quick_test_under_slurmd_drains_nothing_without_a_history_and_kills_a_hung_one() {
    use std::os::unix::fs::PermissionsExt;
    let _guard = cluster();
    let _restore = Restore;
    // A folder root alone can change: health as root runs nothing else.
    let quick = state_dir().join("test-shared/quick-nccl");
    let _ = std::fs::remove_dir_all(&quick);
    std::fs::create_dir_all(&quick).unwrap();
    std::fs::set_permissions(&quick, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = quick.join("all_reduce_perf");
    share(&workspace_bin("nccl-tests-standin"), &bin);
    let log = state_dir().join("log/health-node2.log");
    let start_of = || std::fs::metadata(&log).map_or(0, |m| m.len() as usize);

    // node2 in service to begin with (an earlier run's drain may still be on it).
    let mut resume = slurm_command_as(Who::Root, "scontrol");
    resume.args(["update", "nodename=node2", "state=resume"]);
    run(&mut resume);
    let (seen, _) = wait_for("node2", Duration::from_secs(20), |s| s.starts_with("idle"));
    assert!(seen.starts_with("idle"), "node2 is not in service: {seen}");

    // 1. No --db (slurmd gives no HOME): exit 3 every interval, node2 stays in service.
    let from = start_of();
    local_cluster_ok(&[
        "health",
        "on",
        "--interval",
        &INTERVAL.to_string(),
        "--quick-nccl",
        quick.to_str().unwrap(),
    ]);
    let started = Instant::now();
    while exits_since(from, 3) < 2 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        exits_since(from, 3) >= 2,
        "two checks exited 3: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(exits_since(from, 1), 0, "no check failed");
    let seen = state_and_reason("node2");
    assert!(seen.starts_with("idle"), "nothing drained: {seen}");

    // 2. A hung all_reduce_perf, a history, a deadline of 8 s: killed within it, drained.
    let pid_file = state_dir().join("log/quick-hang-node2.pid");
    let _ = std::fs::remove_file(&pid_file);
    std::fs::remove_file(&bin).unwrap();
    std::fs::write(
        &bin,
        format!(
            "#!/bin/sh\necho $$ >> {}/log/quick-hang-$(hostname).pid\nexec sleep 300\n",
            state_dir().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let db = state_dir().join("test-shared/quick-hang.sqlite");
    let _ = std::fs::remove_file(&db);
    local_cluster_ok(&[
        "health",
        "on",
        "--interval",
        &INTERVAL.to_string(),
        "--quick-nccl",
        quick.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
        "--deadline",
        "8",
    ]);
    // The reason is the failure's own words: the all_reduce ran past its time limit.
    let hung = |s: &str| {
        s.starts_with("drain")
            && s.contains("gpudirect health:")
            && s.contains("ran past its timeout")
    };
    let (seen, took) = wait_for("node2", Duration::from_secs(60), hung);
    assert!(hung(&seen), "after {took:?}: {seen}");
    // Every hung all_reduce_perf is gone once its check ended: health off, one deadline
    // for the check in flight, and none of the pids the script wrote is left.
    local_cluster_ok(&["health", "off"]);
    std::thread::sleep(Duration::from_secs(10));
    let pids: Vec<i32> = std::fs::read_to_string(&pid_file)
        .expect("the hung all_reduce_perf started")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(!pids.is_empty());
    let left: Vec<i32> = pids.iter().copied().filter(|p| is_running(*p)).collect();
    assert!(
        left.is_empty(),
        "hung all_reduce_perf left running: {left:?} of {pids:?}"
    );
    // Each run took the deadline at most (the all_reduce's own limit, 6 s, and the drain).
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let longest = text
        .lines()
        .filter_map(|l| l.strip_prefix("health exit 1 wall_ms "))
        .filter_map(|ms| ms.trim().parse::<u64>().ok())
        .max()
        .expect("a run that failed");
    assert!(
        longest < 8_000,
        "a check took {longest} ms, past its 8 s deadline"
    );
    let _ = std::fs::remove_dir_all(&quick);
}

/// `gpudirect health` as root in `node`'s own namespaces (slurmd's: its NICs and its
/// sysfs), as slurmd runs it, with its NIC error counters kept in `state`; its JSON report.
fn health_in_node(node: &str, state: &Path) -> (Option<i32>, serde_json::Value) {
    let pid = std::fs::read_to_string(state_dir().join(format!("run/slurmd-{node}.pid")))
        .unwrap_or_else(|e| panic!("{node}'s slurmd pid: {e}"));
    let mut cmd = Command::new("nsenter");
    cmd.args(["--target", pid.trim(), "--net", "--mount", "--uts", "--"])
        .arg(workspace_bin("gpudirect"))
        .args(["health", "--json", "--node", node, "--config"])
        .arg(plugin_config())
        .arg("--counters-state")
        .arg(state);
    let out = run(&mut cmd);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "health's report is not JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

/// Sends `count` Ethernet frames of an ethertype nobody handles (0x88b5, IEEE's local
/// experimental one) out of the host end `host_end` of a node's veth: the node's end
/// receives them, no protocol takes them, and the kernel counts each in its `rx_dropped`.
fn frames_nobody_takes(host_end: &str, count: u32) {
    let script = format!(
        "import socket\n\
         s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n\
         s.bind(('{host_end}', 0))\n\
         frame = b'\\xff' * 6 + b'\\x02\\x00\\x00\\x00\\x00\\x01' + b'\\x88\\xb5' + bytes(46)\n\
         for _ in range({count}):\n    s.send(frame)\n"
    );
    let out = run(Command::new("python3").arg("-c").arg(script));
    assert_ok(
        &out,
        &format!("python3 sending {count} frames out of {host_end}"),
    );
}

/// Issue #44: health's `nic_counters` on the local cluster. A first run keeps node1's
/// readings and passes; then node1's eth1 receives 5000 frames it drops (its veth's host end
/// `gd1e1` sends them), and the next run names eth1 and `rx_dropped` (the default limit is
/// 100 drops a minute, and the runs are seconds apart: a minute's allowance); the run
/// after passes again, the rise behind it.
#[test]
fn health_names_a_veth_whose_receive_drops_rise() {
    let _guard = cluster();
    // A folder root alone can change, as root's health requires.
    let state = shared_dir().join("nic-counters");
    let _ = std::fs::remove_dir_all(&state);

    let (code, first) = health_in_node("node1", &state);
    assert_eq!(code, Some(0), "{first}");
    assert!(
        first["checked"].to_string().contains("nic_counters"),
        "{first}"
    );
    assert!(state.join("nic-counters-node1.json").is_file());

    frames_nobody_takes("gd1e1", 5000);
    let (code, second) = health_in_node("node1", &state);
    assert_eq!(code, Some(1), "{second}");
    let failures = second["failures"].as_array().unwrap();
    let named: Vec<&str> = failures
        .iter()
        .filter(|f| f["check"] == "nic_counters")
        .filter_map(|f| f["problem"].as_str())
        .collect();
    assert!(
        named
            .iter()
            .any(|p| p.starts_with("eth1: rx_dropped rose by ")),
        "{second}"
    );
    assert!(
        named.iter().all(|p| p.starts_with("eth1: ")),
        "only eth1 is named: {second}"
    );
    let rise = second["nic_counters"]["rises"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["nic"] == "eth1" && r["class"] == "drops")
        .and_then(|r| r["rise"].as_u64())
        .unwrap_or(0);
    assert!(rise >= 5000, "eth1's drops rose by {rise}: {second}");

    let (code, third) = health_in_node("node1", &state);
    assert_eq!(code, Some(0), "the rise is behind it: {third}");
    let _ = std::fs::remove_dir_all(&state);
}
