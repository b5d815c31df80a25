//! `gpudirect health` without Slurm: the node checks against a config of this host, and
//! `--quick-nccl` with the nccl-tests stand-in (replays of real 2xH200 recordings; a GPU
//! slowed by a competing load for the slow one) judged against the history.

use std::path::{Path, PathBuf};

use gpudirect::runner::is_running;
use serde_json::Value;

use crate::common::{gpudirect_without, run, scratch, stderr, stdout};

/// A config whose node set `hx` has a profile with one data NIC, `lo` (which exists and
/// is up here), and skips the `gpus` check (no Slurm here to say the gres): its checks pass
/// on any machine.
fn config(dir: &Path, nic: &str) -> String {
    let path = dir.join("gpudirect.toml");
    std::fs::write(
        &path,
        format!(
            "[profiles.here]\ndata_nics = [\"{nic}\"]\n[profiles.here.checks]\nnics = true\n\n\
             [[node_set]]\nname = \"hx\"\nhosts = \"hx\"\nprofile = \"here\"\nskip_checks = [\"gpus\"]\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// A PATH with no Slurm on it (a folder in `dir` with only `sleep`, which the hanging
/// stand-in runs): the quick test runs by hand off a cluster, where no `scontrol` can be
/// asked whether the node is idle. A machine's own `scontrol` that cannot answer would stop
/// it (security review T6).
fn no_slurm_path(dir: &Path) -> PathBuf {
    let bin = dir.join("no-slurm-bin");
    if !bin.exists() {
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink("/bin/sleep", bin.join("sleep")).unwrap();
    }
    bin
}

/// `gpudirect health` for node `hx`, its history in `dir`, no Slurm on PATH.
fn health(dir: &Path, config: &str, args: &[&str]) -> std::process::Output {
    let standin = dir.join("standin");
    if !standin.exists() {
        std::fs::create_dir(&standin).unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_nccl-tests-standin"),
            standin.join("all_reduce_perf"),
        )
        .unwrap();
    }
    let mut cmd = gpudirect_without(&[
        "GPUDIRECT_CONFIG",
        "SLURMD_NODENAME",
        "SLURM_CLUSTER_NAME",
        "GPUDIRECT_CLUSTER",
        "CUDA_VISIBLE_DEVICES",
        "STANDIN_SLOW_GPUS",
        "NCCL_TESTS_DIR",
    ]);
    cmd.env("PATH", no_slurm_path(dir))
        .env("GPUDIRECT_DB", dir.join("history.sqlite"))
        .args([
            "health",
            "--node",
            "hx",
            "--config",
            config,
            "--cluster",
            "c1",
        ])
        .arg("--nccl-tests-dir")
        .arg(&standin)
        // The scratch folder sits in /tmp, which anyone may write: health as root trusts
        // only what root alone can change, so the tests vouch for their own folder.
        .arg("--insecure-trust-below")
        .arg(dir)
        .args(args);
    run(&mut cmd)
}

#[test]
fn a_missing_nic_fails_in_nhc_form_and_a_present_one_passes() {
    let dir = scratch("health", "nics");
    let ok = health(dir.path(), &config(dir.path(), "lo"), &["--json"]);
    assert_eq!(ok.status.code(), Some(0), "{}{}", stdout(&ok), stderr(&ok));
    let report: Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(report["profile"], "here");
    assert!(
        report["failures"].as_array().unwrap().is_empty(),
        "{report}"
    );
    let bad = health(dir.path(), &config(dir.path(), "gdmissing0"), &[]);
    assert_eq!(bad.status.code(), Some(1), "{}", stdout(&bad));
    assert!(
        stdout(&bad)
            .starts_with("ERROR: gpudirect: Health check failed: nics: NIC gdmissing0 is missing"),
        "{}",
        stdout(&bad)
    );
    // A node no node set names has nothing to check.
    let other = run(gpudirect_without(&["GPUDIRECT_CONFIG"])
        .args(["health", "--node", "elsewhere", "--config"])
        .arg(config(dir.path(), "lo"))
        .arg("--insecure-trust-below")
        .arg(dir.path()));
    assert_eq!(other.status.code(), Some(0));
    assert!(
        stdout(&other).contains("nothing to check"),
        "{}",
        stdout(&other)
    );
}

#[test]
fn quick_nccl_is_judged_against_the_history_and_a_slow_gpu_fails() {
    let dir = scratch("health", "quick");
    let config = config(dir.path(), "lo");
    // The stand-in has the 2xH200 recordings of -b 8 -e 8G.
    let quick = ["--quick-nccl", "--gpus", "2", "-b", "8", "-e", "8G"];
    let first = health(dir.path(), &config, &[&quick[..], &["--json"]].concat());
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}{}",
        stdout(&first),
        stderr(&first)
    );
    let report: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert!(report["checked"].to_string().contains("nccl"), "{report}");
    // Replays are recorded but never a baseline: there is none yet.
    assert!(
        report["notes"].to_string().contains("starts the baseline"),
        "{report}"
    );

    // Two real single-node measurements of this cluster (2xH200, 343.64 and 346.51 GB/s
    // at 8 GiB), recorded as quick tests (variant `health`, 2 GPUs), make the baseline: a
    // run of another variant or GPU count never would (docs/cli.md, "Comparable runs").
    for rel in [
        "h200x2-nvlink/all_reduce_g2.txt",
        "h200x2-degraded/all_reduce_g2_clean.txt",
    ] {
        let out = run(gpudirect_without(&["GPUDIRECT_DB"])
            .env("GPUDIRECT_DB", dir.path().join("history.sqlite"))
            .args(["import", "--cluster", "c1", "--variant", "health"])
            .arg(crate::common::fixture(rel)));
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let clean = health(dir.path(), &config, &quick);
    let text = stdout(&clean);
    assert_eq!(clean.status.code(), Some(0), "{text}");
    assert!(text.contains("median of 2 earlier runs 345.07"), "{text}");

    // A GPU slowed by a competing load: about half the busbw.
    let mut cmd = gpudirect_without(&["GPUDIRECT_CONFIG", "SLURMD_NODENAME", "NCCL_TESTS_DIR"]);
    cmd.env("PATH", no_slurm_path(dir.path()))
        .env("GPUDIRECT_DB", dir.path().join("history.sqlite"))
        .env("STANDIN_SLOW_GPUS", "1")
        .env("CUDA_VISIBLE_DEVICES", "0,1")
        .args([
            "health",
            "--node",
            "hx",
            "--config",
            &config,
            "--cluster",
            "c1",
        ])
        .arg("--nccl-tests-dir")
        .arg(dir.path().join("standin"))
        .arg("--insecure-trust-below")
        .arg(dir.path())
        .args(quick);
    let slow = run(&mut cmd);
    let text = stdout(&slow);
    assert_eq!(slow.status.code(), Some(1), "{text}{}", stderr(&slow));
    assert!(
        text.starts_with("ERROR: gpudirect: Health check failed: nccl: all_reduce over 2 GPUs: ")
            && text.contains("of the median of 2 earlier runs (345.07)"),
        "{text}"
    );
}

/// The quick all_reduce finds NCCL where the profile's jobs do: slurmd gives a health check
/// no library path, so the profile's `library_dirs` go first on the test's LD_LIBRARY_PATH
/// (found on the GPU bed, where NCCL lives in a Python wheel: docs/results/gpu-box-runs.md).
#[test]
fn the_quick_all_reduce_gets_the_profiles_library_dirs() {
    let dir = scratch("health", "libdirs");
    // A folder that passes the ownership check (root's, nothing above it writable by
    // others), as an installed NCCL's is.
    let lib = std::path::Path::new("/usr/lib");
    let path = dir.path().join("gpudirect.toml");
    std::fs::write(
        &path,
        format!(
            "[profiles.here]\ndata_nics = [\"lo\"]\nlibrary_dirs = [\"{}\"]\n\
             [profiles.here.checks]\nnics = true\n\n\
             [[node_set]]\nname = \"hx\"\nhosts = \"hx\"\nprofile = \"here\"\nskip_checks = [\"gpus\"]\n",
            lib.display()
        ),
    )
    .unwrap();
    let config = path.to_str().unwrap();
    let out = health(
        dir.path(),
        config,
        &[
            "--quick-nccl",
            "--gpus",
            "2",
            "-b",
            "8",
            "-e",
            "8G",
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let show = run(gpudirect_without(&["GPUDIRECT_DB"])
        .env("GPUDIRECT_DB", dir.path().join("history.sqlite"))
        .args(["show", "1", "--json"]));
    assert!(show.status.success(), "{}", stderr(&show));
    let run: Value = serde_json::from_slice(&show.stdout).unwrap();
    let path = run["env"]["LD_LIBRARY_PATH"].as_str().unwrap_or_default();
    assert!(
        path.split(':').next() == Some(lib.to_str().unwrap()),
        "LD_LIBRARY_PATH {path:?} in {}",
        run["env"]
    );
}

/// A quick all_reduce that cannot run at all (no all_reduce_perf there) is no finding about
/// the node: exit 3, no failure, and with --drain nothing is drained or resumed (security
/// review S2: such an error used to drain every node every interval).
#[test]
fn a_quick_test_that_cannot_run_exits_3_and_drains_nothing() {
    let dir = scratch("health", "cannot-run");
    let config = config(dir.path(), "lo");
    // The stand-in folder `health` uses, left empty: no all_reduce_perf to run.
    std::fs::create_dir(dir.path().join("standin")).unwrap();
    let out = health(
        dir.path(),
        &config,
        &["--quick-nccl", "--gpus", "2", "--drain", "--json"],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["failures"], serde_json::json!([]), "{report}");
    assert!(
        report["could_not_check"].as_str().is_some_and(|w| w
            .contains("could not run the all_reduce")
            && w.contains("no all_reduce_perf")),
        "{report}"
    );
    assert!(
        report["slurm"].is_null(),
        "nothing drained or resumed: {report}"
    );
    let text = health(dir.path(), &config, &["--quick-nccl", "--gpus", "2"]);
    assert!(
        stdout(&text).contains("hx could not be checked: nccl: could not run the all_reduce"),
        "{}",
        stdout(&text)
    );
}

/// Security review S9: health as root trusts only a config root alone can change, as the
/// plugin does: one others may write is refused (exit 3, nothing checked or drained). On
/// the earlier build it was loaded and drove root's checks and drains.
#[test]
fn a_config_others_can_change_is_refused_with_exit_3() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("health", "config-rights");
    let config = config(dir.path(), "lo");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o664)).unwrap();
    let out = health(dir.path(), &config, &[]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("root alone can change") && stderr(&out).contains("mode 664"),
        "{}",
        stderr(&out)
    );
    // Without the tests' own trust, as root, even a 0644 config in /tmp is refused: a
    // folder above it (/tmp) is anyone's.
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let plain = run(gpudirect_without(&["GPUDIRECT_CONFIG"])
        .args(["health", "--node", "hx", "--config", &config]));
    let as_root = nix::unistd::geteuid().is_root();
    assert_eq!(
        plain.status.code(),
        Some(if as_root { 3 } else { 0 }),
        "as root: {as_root}; {}{}",
        stdout(&plain),
        stderr(&plain)
    );
}

/// Security review S1: the quick all_reduce runs, as root, only a program and libraries
/// that root alone can change (here: the tests' folder's owner): an all_reduce_perf in a
/// folder others may write, or an LD_PRELOAD of such a file, is refused before anything
/// runs (exit 3, no failure, nothing drained). The earlier build ran either.
#[test]
fn the_quick_test_refuses_a_program_or_preload_others_can_change() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("health", "untrusted-binary");
    let config = config(dir.path(), "lo");
    let standin = dir.path().join("standin");
    std::fs::create_dir(&standin).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_nccl-tests-standin"),
        standin.join("all_reduce_perf"),
    )
    .unwrap();
    std::fs::set_permissions(&standin, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = health(
        dir.path(),
        &config,
        &["--quick-nccl", "--gpus", "2", "--drain", "--json"],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let why = report["could_not_check"].as_str().unwrap_or_default();
    assert!(
        why.contains("refusing to run it as root") && why.contains("writable by group and others"),
        "{report}"
    );
    assert!(report["slurm"].is_null(), "nothing drained: {report}");
    assert!(
        !dir.path().join("history.sqlite").exists(),
        "nothing ran, nothing was recorded"
    );

    // The folder fixed, a preloaded library in a folder others may write is refused too.
    std::fs::set_permissions(&standin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(open.join("x.so"), "").unwrap();
    let preload = format!("{}:", open.join("x.so").display());
    let quick = |var: &str, value: &str| {
        let mut cmd = gpudirect_without(&["GPUDIRECT_CONFIG", "NCCL_TESTS_DIR", "LD_PRELOAD"]);
        cmd.env("GPUDIRECT_DB", dir.path().join("history.sqlite"))
            .env("PATH", no_slurm_path(dir.path()))
            .args([
                "health",
                "--node",
                "hx",
                "--config",
                &config,
                "--quick-nccl",
                "--gpus",
                "2",
            ])
            .args(["--json", "--insecure-trust-below"])
            .arg(dir.path())
            .arg("--nccl-tests-dir")
            .arg(&standin)
            .env(var, value);
        run(&mut cmd)
    };
    let out = quick("LD_PRELOAD", &preload);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["could_not_check"]
            .as_str()
            .is_some_and(|w| w.contains("x.so") && w.contains("refusing")),
        "{report}"
    );

    // A library folder or preloaded file not there yet, where others could make it, is
    // refused too (security review T5: it was skipped, and the all_reduce ran as root).
    let missing_lib = open.join("lib").display().to_string();
    let missing_so = open.join("not-yet.so").display().to_string();
    for (var, value) in [
        ("LD_LIBRARY_PATH", missing_lib.as_str()),
        ("LD_PRELOAD", missing_so.as_str()),
    ] {
        let out = quick(var, value);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{var}={value}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let why = report["could_not_check"].as_str().unwrap_or_default();
        assert!(
            why.contains(value)
                && why.contains("refusing")
                && (why.contains("not there") || why.contains("does not exist")),
            "{var}={value}: {report}"
        );
    }
}

/// A fake all_reduce_perf that hangs, as a wedged GPU would, and writes its pid.
fn hanging_all_reduce(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let standin = dir.join("standin");
    std::fs::create_dir(&standin).unwrap();
    let bin = standin.join("all_reduce_perf");
    std::fs::write(
        &bin,
        format!(
            "#!/bin/sh\necho $$ > {}/pid\nexec sleep 300\n",
            dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir.join("pid")
}

/// Security review S2: a hung all_reduce is bounded by --deadline with its whole process
/// group (it used to run 120 s, past slurmd's 60 s kill): it is a finding (exit 1, check
/// `nccl`), found within the deadline, and nothing of it is left running.
#[test]
fn a_hung_quick_test_ends_within_the_deadline_and_leaves_nothing() {
    let dir = scratch("health", "deadline");
    let config = config(dir.path(), "lo");
    let pid_file = hanging_all_reduce(dir.path());
    let start = std::time::Instant::now();
    let out = health(
        dir.path(),
        &config,
        &["--quick-nccl", "--gpus", "2", "--deadline", "10s", "--json"],
    );
    let took = start.elapsed();
    // Exit 1, not the deadline's backstop (exit 3): the all_reduce's own limit, a quarter
    // under the deadline, ended it first; the earlier build waited 120 s.
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(took < std::time::Duration::from_secs(60), "took {took:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["failures"][0]["check"], "nccl", "{report}");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !is_running(pid),
        "the hung all_reduce_perf ({pid}) is still running"
    );
}

/// Security review S2: slurmd kills a health check past its time with SIGKILL, which health
/// cannot catch; its all_reduce, in a process group of its own, used to live on as a root
/// orphan holding the GPUs. Now it dies with health.
#[test]
fn a_killed_health_check_takes_its_all_reduce_with_it() {
    let dir = scratch("health", "killed");
    let config = config(dir.path(), "lo");
    let pid_file = hanging_all_reduce(dir.path());
    let mut cmd = gpudirect_without(&["GPUDIRECT_CONFIG", "NCCL_TESTS_DIR", "SLURMD_NODENAME"]);
    cmd.env("PATH", no_slurm_path(dir.path()))
        .env("GPUDIRECT_DB", dir.path().join("history.sqlite"))
        .args([
            "health",
            "--node",
            "hx",
            "--config",
            &config,
            "--quick-nccl",
            "--gpus",
            "2",
        ])
        .arg("--insecure-trust-below")
        .arg(dir.path())
        .arg("--nccl-tests-dir")
        .arg(dir.path().join("standin"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let start = std::time::Instant::now();
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
        {
            break pid;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "the all_reduce never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(is_running(pid));
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = std::time::Instant::now();
    while is_running(pid) && killed.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !is_running(pid),
        "the all_reduce ({pid}) outlived its killed health check"
    );
}

/// Security review S10: the `gpus` check asks Slurm for the node's gres; where it cannot
/// (no scontrol on PATH, no slurm.conf: slurmd's bare environment), the check is "could
/// not check", exit 3, naming the fix. On the earlier build it became a note and the node
/// passed, a node missing a GPU reported healthy.
#[test]
fn a_gpus_check_that_cannot_ask_slurm_is_not_a_pass() {
    let dir = scratch("health", "no-slurm");
    let path = dir.path().join("gpudirect.toml");
    std::fs::write(
        &path,
        "[profiles.here]\ndata_nics = [\"lo\"]\n\n[[node_set]]\nname = \"hx\"\nhosts = \"hx\"\nprofile = \"here\"\n",
    )
    .unwrap();
    let mut cmd = gpudirect_without(&["GPUDIRECT_CONFIG", "SLURMD_NODENAME", "SLURM_CONF"]);
    // No scontrol anywhere on PATH.
    cmd.env("PATH", dir.path())
        .args(["health", "--node", "hx", "--json", "--insecure-trust-below"])
        .arg(dir.path())
        .arg("--config")
        .arg(&path);
    let out = run(&mut cmd);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let why = report["could_not_check"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("gpus: Slurm did not say the node's gres"),
        "{report}"
    );
    assert!(
        why.contains("scontrol") && why.contains("skip_checks"),
        "{report}"
    );
}

/// Security review S6: as root (here the trusting rule of `--insecure-trust-below`), the
/// quick test judges only by a history root alone can change. A history folder others may
/// write is "could not check" (exit 3): nothing drained, nothing created there.
#[test]
fn the_quick_test_refuses_a_history_others_can_change() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("health", "untrusted-history");
    let config = config(dir.path(), "lo");
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let db = shared.join("history.sqlite");
    // health() points GPUDIRECT_DB at dir/history.sqlite; --db wins over it.
    let db_arg = db.display().to_string();
    let out = health(
        dir.path(),
        &config,
        &[
            "--db",
            &db_arg,
            "--quick-nccl",
            "--gpus",
            "2",
            "--drain",
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let why = report["could_not_check"].as_str().unwrap_or_default();
    assert!(
        why.contains("writable by group and others") && why.contains("root-only folder"),
        "{report}"
    );
    assert!(report["slurm"].is_null(), "nothing drained: {report}");
    assert!(!db.exists(), "nothing created in the shared folder");
}

/// Security review T6: under slurmd, a `scontrol` that cannot say the node's state (no
/// configuration, slurmctld down) kept the quick all_reduce running, on a node that may hold
/// jobs. Now it does not run, and the check could not be made (exit 3, nothing drained).
#[test]
fn the_quick_test_does_not_run_when_slurm_cannot_say_the_node_is_idle() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("health", "unanswered");
    let config = config(dir.path(), "lo");
    let pid_file = hanging_all_reduce(dir.path());
    let bin = no_slurm_path(dir.path());
    let scontrol = bin.join("scontrol");
    std::fs::write(
        &scontrol,
        "#!/bin/sh\necho 'scontrol: error: Could not establish a configuration source' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&scontrol, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = gpudirect_without(&["GPUDIRECT_CONFIG", "NCCL_TESTS_DIR"]);
    cmd.env("PATH", &bin)
        .env("SLURMD_NODENAME", "hx")
        .env("GPUDIRECT_DB", dir.path().join("history.sqlite"))
        .args(["health", "--node", "hx", "--config", &config])
        .args(["--quick-nccl", "--gpus", "2", "--deadline", "20s", "--json"])
        .arg("--insecure-trust-below")
        .arg(dir.path())
        .arg("--nccl-tests-dir")
        .arg(dir.path().join("standin"));
    let out = run(&mut cmd);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let why = report["could_not_check"].as_str().unwrap_or_default();
    assert!(
        why.contains("not run: Slurm could not say whether the node is idle")
            && why.contains("configuration source"),
        "{report}"
    );
    assert!(!pid_file.exists(), "the all_reduce ran: {report}");
}

/// vet's node checks run `gpudirect agent health`: health's JSON report, with the node's
/// GPU-to-NIC map and subnets that vet compares across nodes.
#[test]
fn the_health_agent_answers_in_json_with_the_nodes_wiring() {
    let dir = scratch("health", "agent");
    let config = config(dir.path(), "lo");
    let out = run(gpudirect_without(&["GPUDIRECT_CONFIG", "SLURMD_NODENAME"])
        .args(["agent", "health", "--node", "hx", "--config", &config])
        .arg("--insecure-trust-below")
        .arg(dir.path()));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["node"], "hx");
    assert_eq!(report["profile"], "here");
    assert_eq!(report["attempts"], 1, "{report}");
    assert_eq!(report["wiring"]["node"], "hx", "{report}");
    assert_eq!(report["wiring"]["profile"], "here", "{report}");
    // The plain command has no map.
    let plain = run(gpudirect_without(&["GPUDIRECT_CONFIG", "SLURMD_NODENAME"])
        .args(["health", "--json", "--node", "hx", "--config", &config])
        .arg("--insecure-trust-below")
        .arg(dir.path()));
    let report: Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(report.get("wiring").is_none(), "{report}");
    // vet's node checks run as the job's user: no NIC counters are read or kept there.
    let state = dir.path().join("counters");
    let agent = run(gpudirect_without(&["GPUDIRECT_CONFIG", "SLURMD_NODENAME"])
        .args(["agent", "health", "--node", "hx", "--config", &config])
        .arg("--counters-state")
        .arg(&state)
        .arg("--insecure-trust-below")
        .arg(dir.path()));
    let report: Value = serde_json::from_slice(&agent.stdout).unwrap();
    assert!(
        !report["checked"].to_string().contains("nic_counters"),
        "{report}"
    );
    assert!(!state.exists(), "nothing kept");
}

/// Issue #44: `nic_counters` on a copy of the recorded gVNIC tree (`gpudirect-core/tests/
/// sysfs/gvnic-counters`): a first run keeps the readings and passes; after eth1's
/// `rx_dropped` rises, the second names the NIC, the counter, the rise and the interval
/// in NHC's form, and its textfile has the rise.
#[test]
fn a_nic_whose_drop_counter_rose_since_the_last_run_fails_nic_counters() {
    let dir = scratch("health", "counters");
    let sys = dir.path().join("sys");
    let tree =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../gpudirect-core/tests/sysfs/gvnic-counters");
    let copied = run(std::process::Command::new("cp")
        .arg("-a")
        .arg(&tree)
        .arg(&sys));
    assert!(copied.status.success(), "{}", stderr(&copied));
    let config = dir.path().join("gpudirect.toml");
    std::fs::write(
        &config,
        "[nic_counters]\n[nic_counters.per_minute]\ndrops = 1000\n\n\
         [profiles.gve]\ndata_nics = [\"eth1\"]\n\n\
         [[node_set]]\nname = \"hx\"\nhosts = \"hx\"\nprofile = \"gve\"\nskip_checks = [\"gpus\"]\n",
    )
    .unwrap();
    let state = dir.path().join("state");
    let textfile = dir.path().join("textfile");
    std::fs::create_dir(&textfile).unwrap();
    let health = |extra: &[&str]| {
        run(gpudirect_without(&["GPUDIRECT_CONFIG", "SLURMD_NODENAME"])
            .args(["health", "--node", "hx", "--config"])
            .arg(&config)
            .arg("--sysfs")
            .arg(&sys)
            .arg("--counters-state")
            .arg(&state)
            .arg("--insecure-trust-below")
            .arg(dir.path())
            .arg("--textfile")
            .arg(&textfile)
            .args(extra))
    };
    let first = health(&["--json", "-v"]);
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}{}",
        stdout(&first),
        stderr(&first)
    );
    let report: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert!(
        report["checked"].to_string().contains("nic_counters"),
        "{report}"
    );
    assert!(
        report["notes"]
            .to_string()
            .contains("first reading of 16 counters on eth1"),
        "{report}"
    );
    assert!(state.join("nic-counters-hx.json").is_file());

    let dropped = sys.join("class/net/eth1/statistics/rx_dropped");
    std::fs::write(&dropped, "25118\n").unwrap();
    let second = health(&[]);
    assert_eq!(
        second.status.code(),
        Some(1),
        "{}{}",
        stdout(&second),
        stderr(&second)
    );
    let text = stdout(&second);
    assert!(
        text.starts_with("ERROR: gpudirect: Health check failed: nic_counters: eth1: rx_dropped rose by 25000 in ")
            && text.contains("(drops may rise by 1000 a minute) (the NIC drops packets"),
        "{text}"
    );
    let metrics = std::fs::read_to_string(textfile.join("gpudirect_health.prom")).unwrap();
    let (code, said) = crate::metrics::promtool(&metrics);
    assert_eq!(code, Some(0), "promtool: {said}\n{metrics}");
    assert_eq!(
        crate::metrics::sample(
            &metrics,
            "gpudirect_health_nic_error_rise{node=\"hx\",nic=\"eth1\",class=\"drops\"}"
        ),
        Some(25000.0)
    );
    assert_eq!(
        crate::metrics::sample(
            &metrics,
            "gpudirect_health_check_ok{node=\"hx\",check=\"nic_counters\"}"
        ),
        Some(0.0)
    );
    // The rise is behind it now: the next run passes.
    let third = health(&[]);
    assert_eq!(
        third.status.code(),
        Some(0),
        "{}{}",
        stdout(&third),
        stderr(&third)
    );
}
