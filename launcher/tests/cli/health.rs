//! `gpudirect health` without Slurm: the node checks against a config of this host, and
//! `--quick-nccl` with the nccl-tests stand-in (replays of real 2xH200 recordings; a GPU
//! slowed by a competing load for the slow one) judged against the history.

use std::path::Path;

use serde_json::Value;

use crate::common::{gpudirect_without, run, scratch, stderr, stdout};

/// A config whose node set `hx` has a profile with one data NIC, `lo` (which exists and
/// is up here): its checks pass on any machine.
fn config(dir: &Path, nic: &str) -> String {
    let path = dir.join("gpudirect.toml");
    std::fs::write(
        &path,
        format!(
            "[profiles.here]\ndata_nics = [\"{nic}\"]\n[profiles.here.checks]\nnics = true\n\n\
             [[node_set]]\nname = \"hx\"\nhosts = \"hx\"\nprofile = \"here\"\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
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
    cmd.env("PATH", "/usr/bin:/bin")
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
        .arg(config(dir.path(), "lo")));
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
    cmd.env("PATH", "/usr/bin:/bin")
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
             [[node_set]]\nname = \"hx\"\nhosts = \"hx\"\nprofile = \"here\"\n",
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
