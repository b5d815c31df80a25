//! The installed gpudirect-slurm package on the local cluster: what the package itself ships,
//! run by Slurm. scripts/test runs this binary after `scripts/check-package --keep-installed`
//! and `scripts/local-cluster up --plugin installed`; on a cluster of the checkout's own
//! plugin it fails at once, saying so.

use std::time::{Duration, Instant};

use cluster_tests::*;

/// Where the package installs slurmd's HealthCheckProgram.
const HEALTH_CHECK: &str = "/usr/lib/gpudirect-slurm/health-check";
/// Its settings, in the admin's place (the local cluster writes them while the check is on).
const HEALTH_SETTINGS: &str = "/etc/default/gpudirect-health";
/// Seconds between two health checks of a node.
const INTERVAL: u64 = 3;

/// `sinfo`'s state and reason of `node`, polled until `want` holds or `limit` passes.
fn wait_for(node: &str, limit: Duration, want: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let mut sinfo = slurm_command("sinfo");
        sinfo.args(["-h", "-n", node, "-o", "%T %E"]);
        let seen = stdout(&run(&mut sinfo)).trim().to_string();
        if want(&seen) || start.elapsed() > limit {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The health check off, node2's eth1 restored and node2 resumed, whatever happened.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        local_cluster(&["health", "off"]);
        local_cluster(&["nic", "node2", "eth1", "restore"]);
        let mut resume = slurm_command_as(Who::Root, "scontrol");
        resume.args(["update", "nodename=node2", "state=resume"]);
        run(&mut resume);
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

/// Issue #42: the package's health-check wrapper is slurmd's HealthCheckProgram, reading
/// its settings from /etc/default/gpudirect-health: it runs the package's gpudirect on every
/// node, logs each run, drains node2 when its eth1 goes down and returns it once restored;
/// `health off` takes the settings away again.
#[test]
fn the_packaged_health_check_runs_under_slurmd_and_drains_a_node_whose_nic_is_down() {
    assert!(
        plugin_installed(),
        "this binary tests the installed package: run it on `scripts/local-cluster up --plugin installed`"
    );
    let _guard = cluster();
    let _restore = Restore;
    let log = state_dir().join("log/health-node2.log");
    let _ = std::fs::remove_file(&log);
    local_cluster_ok(&["health", "on", "--interval", &INTERVAL.to_string()]);
    let conf = std::fs::read_to_string(slurm_conf()).expect("slurm.conf");
    assert!(
        conf.lines()
            .any(|l| l == format!("HealthCheckProgram={HEALTH_CHECK}")),
        "{conf}"
    );
    let settings = std::fs::read_to_string(HEALTH_SETTINGS).expect("the wrapper's settings");
    assert!(
        settings.contains("GPUDIRECT='/usr/bin/gpudirect'"),
        "{settings}"
    );

    // slurmd ran the wrapper, which ran the package's gpudirect and logged its status.
    let start = Instant::now();
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("health exit 0 wall_ms ") {
            break text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(4 * INTERVAL + 10),
            "no healthy run logged in {}: {text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        text.lines().next().is_some_and(|l| l.ends_with('Z')),
        "{text}"
    );

    local_cluster_ok(&["nic", "node2", "eth1", "down"]);
    let limit = Duration::from_secs(2 * INTERVAL + 10);
    let seen = wait_for("node2", limit, |s| s.starts_with("drain"));
    assert!(
        seen.starts_with("drain") && seen.contains("gpudirect health:") && seen.contains("eth1"),
        "{seen}"
    );
    local_cluster_ok(&["nic", "node2", "eth1", "restore"]);
    let seen = wait_for("node2", limit, |s| s.starts_with("idle"));
    assert!(seen.starts_with("idle"), "{seen}");

    local_cluster_ok(&["health", "off"]);
    assert!(
        !std::path::Path::new(HEALTH_SETTINGS).exists(),
        "health off leaves {HEALTH_SETTINGS}"
    );
}

/// The wrapper sources its settings as root: one that others can change, or a link, is not
/// read and nothing runs (exit 3, the fix named); a root-owned one is, and its `HEALTH_ARGS`
/// reach the program as separate arguments, logged with the exit status.
#[test]
fn the_packaged_health_check_reads_only_settings_root_alone_can_change() {
    assert!(
        plugin_installed(),
        "this binary tests the installed package: run it on `scripts/local-cluster up --plugin installed`"
    );
    let dir = fresh_temp_dir("health-settings");
    let logs = dir.join("logs");
    let settings = dir.join("settings");
    std::fs::write(
        &settings,
        format!(
            "HEALTH_ARGS='--drain --retries 2'\nGPUDIRECT=/bin/echo\nLOG_DIR='{}'\n",
            logs.display()
        ),
    )
    .unwrap();
    let wrapper = |env_node: &str| {
        let mut cmd = std::process::Command::new(HEALTH_CHECK);
        cmd.arg(&settings).env("SLURMD_NODENAME", env_node);
        run(&mut cmd)
    };
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&settings, std::fs::Permissions::from_mode(0o666)).unwrap();
    let refused = wrapper("nodeA");
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("is not a regular file that root alone can change")
            && stderr(&refused).contains("chmod 0644"),
        "{}",
        stderr(&refused)
    );
    assert!(!logs.exists(), "a refused run logged");

    let link = dir.join("link");
    std::os::unix::fs::symlink(&settings, &link).unwrap();
    let mut through_link = std::process::Command::new(HEALTH_CHECK);
    through_link.arg(&link);
    let through_link = run(&mut through_link);
    assert_eq!(through_link.status.code(), Some(3));

    std::fs::set_permissions(&settings, std::fs::Permissions::from_mode(0o644)).unwrap();
    let ran = wrapper("nodeA");
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    let logged = std::fs::read_to_string(logs.join("health-nodeA.log")).expect("the log");
    let lines: Vec<&str> = logged.lines().collect();
    assert_eq!(lines.len(), 3, "{logged}");
    assert_eq!(
        lines[1],
        "health --config /etc/slurm/gpudirect.toml --drain --retries 2"
    );
    assert!(lines[2].starts_with("health exit 0 wall_ms "), "{logged}");
}
