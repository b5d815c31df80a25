//! `gpudirect health --extra` as slurmd's HealthCheckProgram (issue #32): each node's
//! verdict lands in its Slurm `Extra` JSON, and jobs submitted with
//! `--extra "gpudirect_ok=1"` (SchedulerParameters=extra_constraints) avoid a node whose
//! NIC is down, then may use it once the NIC is back; an admin's own key in the node's
//! Extra survives every write. On Slurm 22.05, which has no extra constraints, the check
//! says so and writes nothing.
//!
//! Run on every Slurm version the cluster runs (scripts/test runs this binary on 24.11 and
//! 26.05 too), and so are the quarantine's tests on the nccl-tests stand-in (`quarantine`:
//! reservations and node comments are what may differ between versions). The health check runs with `--no-drain`, so that what keeps jobs away from
//! the node is its Extra alone.

use std::time::{Duration, Instant};

use cluster_tests::*;

mod quarantine;

/// Seconds between two health checks of a node (HealthCheckInterval): every node's check
/// starts at once, and on 24.11 a burst of scontrol calls can wait 5 s for slurmctld
/// (docs/local-cluster.md), so the checks are spaced more widely than health.rs's.
const INTERVAL: u64 = 10;

/// The node whose NIC goes down, and that NIC.
const NODE: &str = "node2";
const NIC: &str = "eth3";

/// An admin's own Extra key, set before the checks start.
const ADMIN_EXTRA: &str = r#"{"admin_rack":"r7"}"#;

/// `scontrol update nodename=NODE extra=VALUE`, as root.
fn set_extra(node: &str, value: &str) {
    let mut cmd = slurm_command_as(Who::Root, "scontrol");
    cmd.args([
        "update",
        &format!("nodename={node}"),
        &format!("extra={value}"),
    ]);
    assert_ok(
        &run(&mut cmd),
        &format!("scontrol update {node} extra={value}"),
    );
}

/// Every node's Extra as JSON (`Null` where it has none), from `scontrol --json show node`.
fn extras() -> Vec<(String, serde_json::Value)> {
    let mut cmd = slurm_command("scontrol");
    cmd.args(["--json", "show", "node"]);
    let out = run(&mut cmd);
    assert_ok(&out, "scontrol --json show node");
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("scontrol's JSON");
    doc["nodes"]
        .as_array()
        .expect("a nodes list")
        .iter()
        .map(|n| {
            let name = n["name"].as_str().unwrap_or_default().to_string();
            let extra = n["extra"]
                .as_str()
                .filter(|e| !e.trim().is_empty())
                .map(|e| serde_json::from_str(e).unwrap_or(serde_json::Value::String(e.into())))
                .unwrap_or(serde_json::Value::Null);
            (name, extra)
        })
        .collect()
}

/// The Extra of `node`.
fn extra_of(node: &str) -> serde_json::Value {
    extras()
        .into_iter()
        .find(|(n, _)| n == node)
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("{node} not listed"))
}

/// Polls until `want` holds of every node's Extra, for up to `limit`; what was seen last.
fn wait_for_extras(
    limit: Duration,
    want: impl Fn(&[(String, serde_json::Value)]) -> bool,
) -> Vec<(String, serde_json::Value)> {
    let start = Instant::now();
    loop {
        let seen = extras();
        if want(&seen) || start.elapsed() > limit {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A job's state and nodes: `PENDING (null)` or `COMPLETED node[1,3-7]`.
fn job_state(job: &str) -> String {
    let mut cmd = slurm_command("scontrol");
    cmd.args(["show", "job", job, "--oneliner"]);
    let line = stdout(&run(&mut cmd));
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
            .unwrap_or("?")
            .to_string()
    };
    format!("{} {}", field("JobState"), field("NodeList"))
}

/// Health off, the NIC restored, every node's Extra cleared and the user's jobs cancelled,
/// whatever happened.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        local_cluster(&["health", "off"]);
        local_cluster(&["nic", NODE, NIC, "restore"]);
        let mut cancel = slurm_command_as(Who::Root, "scancel");
        cancel.args(["-u", TEST_USER]);
        run(&mut cancel);
        // No assertion here: a panic while the test unwinds would abort the binary.
        let mut sinfo = slurm_command("sinfo");
        sinfo.args(["-h", "-N", "-o", "%N"]);
        let listed = sinfo
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        for node in listed.unwrap_or_default().lines() {
            let mut cmd = slurm_command_as(Who::Root, "scontrol");
            cmd.args(["update", &format!("nodename={}", node.trim()), "extra="]);
            let _ = cmd.output();
        }
    }
}

#[test]
fn jobs_that_ask_for_healthy_nodes_avoid_a_node_health_marked_bad_in_its_extra() {
    let _guard = cluster();
    let _restore = Restore;
    let version = slurm_major_minor();
    let log = state_dir().join(format!("log/health-{NODE}.log"));
    let _ = std::fs::remove_file(&log);
    // The admin's own key, before the checks start (22.05 has no Extra to keep it in).
    if version >= (23, 0) {
        set_extra(NODE, ADMIN_EXTRA);
    }
    local_cluster_ok(&[
        "health",
        "on",
        "--interval",
        &INTERVAL.to_string(),
        "--extra",
        "--no-drain",
    ]);
    if version < (23, 0) {
        let start = Instant::now();
        let text = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("--extra") || start.elapsed() > Duration::from_secs(4 * INTERVAL + 10)
            {
                break text;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        assert!(
            text.contains("--extra: Slurm 22.05")
                && text.contains("cannot select nodes on their Extra"),
            "{text}"
        );
        return;
    }
    let limit = Duration::from_secs(4 * INTERVAL + 10);
    let seen = wait_for_extras(limit, |all| all.iter().all(|(_, e)| e["gpudirect_ok"] == 1));
    assert!(
        seen.iter()
            .all(|(_, e)| e["gpudirect_ok"] == 1 && e["gpudirect_health_ok"] == 1),
        "every node healthy in its Extra: {seen:?}"
    );
    let nodes = seen.len();
    assert!(nodes >= 3, "{seen:?}");
    assert_eq!(
        extra_of(NODE)["admin_rack"],
        "r7",
        "the admin's key after our first write"
    );

    local_cluster_ok(&["nic", NODE, NIC, "down"]);
    let seen = wait_for_extras(limit, |all| {
        all.iter().any(|(n, e)| n == NODE && e["gpudirect_ok"] == 0)
    });
    let bad = seen
        .iter()
        .find(|(n, _)| n == NODE)
        .map(|(_, e)| e.clone())
        .unwrap();
    assert_eq!(bad["gpudirect_ok"], 0, "{seen:?}");
    assert_eq!(bad["gpudirect_health_ok"], 0, "{bad}");
    assert_eq!(bad["admin_rack"], "r7", "the admin's key survives: {bad}");
    // Not drained: Extra alone keeps jobs away.
    let state = sinfo_state(NODE);
    assert!(!state.contains("drain"), "{state}");

    // A job of every node but one runs, on the others.
    let out_dir = fresh_temp_dir("extra-jobs");
    let submit = |n: usize, tag: &str| {
        let mut cmd = slurm_command("sbatch");
        cmd.args([
            "--parsable",
            &format!("-N{n}"),
            "--extra",
            "gpudirect_ok=1",
            "-o",
            &out_dir.join(format!("{tag}.out")).display().to_string(),
            "--wrap",
            "srun hostname",
        ]);
        let out = run(&mut cmd);
        assert_ok(&out, "sbatch --extra");
        stdout(&out).trim().to_string()
    };
    let wait_job = |job: &str, limit: Duration| {
        let start = Instant::now();
        loop {
            let s = job_state(job);
            if s.starts_with("COMPLETED") || s.starts_with("FAILED") || start.elapsed() > limit {
                return s;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    let others = submit(nodes - 1, "others");
    let s = wait_job(&others, Duration::from_secs(60));
    assert!(s.starts_with("COMPLETED"), "job {others}: {s}");
    let ran = std::fs::read_to_string(out_dir.join("others.out")).unwrap_or_default();
    assert_eq!(ran.lines().count(), nodes - 1, "{ran}");
    assert!(
        !ran.lines().any(|l| l.trim() == NODE),
        "ran on {NODE}: {ran}"
    );

    // A job of every node waits while the node is bad ...
    let all = submit(nodes, "all");
    std::thread::sleep(Duration::from_secs(2 * INTERVAL));
    let s = job_state(&all);
    assert!(
        s.starts_with("PENDING"),
        "job {all} while {NODE} is bad: {s}"
    );
    // ... and runs once it has recovered.
    local_cluster_ok(&["nic", NODE, NIC, "restore"]);
    let s = wait_job(&all, Duration::from_secs(4 * INTERVAL + 60));
    assert!(
        s.starts_with("COMPLETED"),
        "job {all} after {NODE} recovered: {s}"
    );
    let ran = std::fs::read_to_string(out_dir.join("all.out")).unwrap_or_default();
    assert!(ran.lines().any(|l| l.trim() == NODE), "{ran}");
    let back = extra_of(NODE);
    assert_eq!(back["gpudirect_ok"], 1, "{back}");
    assert_eq!(
        back["admin_rack"], "r7",
        "the admin's key survives recovery: {back}"
    );
    // The health log says each write and why.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("Extra set (verdict changed)"), "{text}");
}
