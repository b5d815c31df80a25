//! `gpudirect profiles` end to end: the built binary on the shipped config (copied to a
//! temporary file) and on broken ones: exit codes, `FILE:LINE: LEVEL: MESSAGE` findings,
//! and the variables `explain` computes with the plugin's own code.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use crate::common::{
    self, assert_stderr_contains, assert_stdout_contains, ok, run, stderr, stdout,
};

const SHIPPED: &str = include_str!("../../../slurm-conf/gpudirect.toml");

fn sysfs_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../gpudirect-core/tests/sysfs")
        .join(name)
}

/// The binary with no config or log settings from the test runner's environment.
fn gpudirect() -> Command {
    common::gpudirect_without(&["GPUDIRECT_CONFIG", "GPUDIRECT_DB", "RUST_LOG"])
}

/// `text` as `gpudirect.toml` in a fresh directory in /tmp (world-writable above it: the
/// plugin would refuse it). The file lives as long as the directory.
fn write_config(name: &str, text: &str) -> (TempDir, PathBuf) {
    let dir = common::scratch("profiles", name);
    let file = dir.path().join("gpudirect.toml");
    fs::write(&file, text).expect("write config");
    (dir, file)
}

fn profiles(config: &Path, args: &[&str]) -> Command {
    let mut cmd = gpudirect();
    cmd.arg("profiles").args(args).arg("--config").arg(config);
    cmd
}

/// `gpudirect profiles generate ARGS` on the fixture tree `tree` and its `/proc`.
fn generate_on(config: &Path, tree: &str, args: &[&str]) -> Command {
    let mut cmd = profiles(config, &["generate"]);
    cmd.args(args)
        .arg("--sysfs")
        .arg(sysfs_fixture(tree))
        .arg("--proc")
        .arg(sysfs_fixture(&format!("{tree}.proc")));
    cmd
}

/// `gpudirect profiles check --overlay FILE`.
fn check_overlay(config: &Path, file: &Path) -> std::process::Output {
    let shown = file.display().to_string();
    run(&mut profiles(config, &["check", "--overlay", &shown]))
}

/// `gpudirect profiles explain ARGS` with the node's sysfs read from the fixture tree
/// `tree`; its stdout.
fn explain_on_sysfs(config: &Path, tree: &str, args: &[&str]) -> String {
    let mut cmd = profiles(config, &["explain"]);
    cmd.args(args).arg("--sysfs").arg(sysfs_fixture(tree));
    ok(&mut cmd)
}

#[test]
fn list_shows_every_shipped_profile_and_node_set() {
    let (_dir, config) = write_config("list", SHIPPED);
    let out = ok(&mut profiles(&config, &["list"]));
    for name in [
        "tcpx",
        "tcpxo",
        "gib",
        "gib-a4",
        "efa",
        "ib",
        "azure-ndv5",
        "socket",
        "a3-mega-slurm-image",
        "cpu",
    ] {
        assert!(out.contains(name), "{name} missing from:\n{out}");
    }
    let tcpx = out.lines().find(|l| l.starts_with("tcpx ")).unwrap();
    assert!(
        tcpx.contains("GPUDirectTCPX") && tcpx.contains("1+4"),
        "{tcpx}"
    );
    assert!(tcpx.contains("nics,libraries,rxdm_socket_dir"), "{tcpx}");

    let json: serde_json::Value =
        serde_json::from_str(&ok(&mut profiles(&config, &["list", "--json"]))).unwrap();
    let names: Vec<&str> = json["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "azure-ndv5",
            "efa",
            "gib",
            "gib-a4",
            "ib",
            "socket",
            "tcpx",
            "tcpxo"
        ]
    );
    let efa = &json["profiles"][1];
    assert_eq!(efa["transport"], "Libfabric");
    assert_eq!(efa["nics"], "sysfs");
    assert_eq!(json["node_sets"][4]["default_mode"], "none");
}

#[test]
fn reading_commands_warn_when_the_plugin_would_refuse_the_file() {
    let (_dir, config) = write_config("warn", SHIPPED);
    let out = run(&mut profiles(&config, &["list"]));
    assert!(out.status.success());
    assert_stderr_contains(&out, "the plugin would refuse this config");
}

#[test]
fn config_comes_from_gpudirect_config_then_the_default_path() {
    let (_dir, config) = write_config("env", SHIPPED);
    let out = ok(gpudirect()
        .args(["profiles", "show", "ib"])
        .env("GPUDIRECT_CONFIG", &config));
    assert!(out.contains("profile ib:"), "{out}");
    if !Path::new("/etc/slurm/gpudirect.toml").exists() {
        let out = run(gpudirect().args(["profiles", "list"]));
        assert_eq!(out.status.code(), Some(3));
        assert_stderr_contains(&out, "/etc/slurm/gpudirect.toml");
    }
}

#[test]
fn show_prints_templates_as_written_and_the_node_sets() {
    let (_dir, config) = write_config("show", SHIPPED);
    let out = ok(&mut profiles(&config, &["show", "tcpx"]));
    assert!(
        out.contains("forced    NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=/run/tcpx-{job_id}"),
        "{out}"
    );
    assert!(
        out.contains("keepable  NCCL_SOCKET_IFNAME={control_nic}"),
        "{out}"
    );
    assert!(
        out.contains("a3-high-slurm-image (a3h-[0001-1024])"),
        "{out}"
    );
    assert!(out.contains("eth1=enp6s0"), "{out}");
    let ib = ok(&mut profiles(&config, &["show", "ib", "--json"]));
    let ib: serde_json::Value = serde_json::from_str(&ib).unwrap();
    assert_eq!(ib["data_nic_class"], "infiniband");
    assert_eq!(ib["nic_locality"], "sysfs");
    assert_eq!(ib["env"][0]["name"], "NCCL_IB_HCA");
    assert_eq!(ib["env"][0]["value"], "={nic}");

    let out = run(&mut profiles(&config, &["show", "tcpz"]));
    assert_eq!(out.status.code(), Some(3));
    assert_stderr_contains(&out, "no profile `tcpz` (profiles: azure-ndv5, efa");
}

#[test]
fn check_in_tmp_reports_the_ownership_error_and_fails() {
    // The tcpx profile's library folder where no machine has one: the local cluster makes
    // /var/lib/tcpx/lib64 (root's quick test needs it), so the shipped path may exist here.
    let shipped = SHIPPED.replace("/var/lib/tcpx/lib64", MISSING_LIB);
    let (_dir, config) = write_config("own", &shipped);
    let out = run(&mut profiles(&config, &["check"]));
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    let first = text.lines().next().unwrap();
    // /tmp is world-writable (and, when not run as root, the file is not root's).
    assert!(
        first.starts_with(&format!("{}:1: error: ", config.display())),
        "{text}"
    );
    assert!(
        first.contains("refusing the config") && first.contains("chown root and chmod go-w"),
        "{first}"
    );
    // Off the node, a node's missing files are warnings with the key's line.
    let lib = text
        .lines()
        .find(|l| l.contains("profile tcpx: library_dirs"))
        .expect("tcpx library dir finding");
    let line_no = shipped
        .lines()
        .position(|l| l.starts_with(&format!("library_dirs = [\"{MISSING_LIB}\"]")))
        .unwrap()
        + 1;
    assert!(
        lib.starts_with(&format!("{}:{line_no}: warning: ", config.display())),
        "{lib}"
    );
    assert_stderr_contains(&out, "1 error(s)");
}

/// A library folder no machine has.
const MISSING_LIB: &str = "/nonexistent/gpudirect-test/tcpx/lib64";

/// Whether the plugin's ownership rule holds for `dir`: root-owned, not group- or
/// world-writable, all the way up.
fn secure(dir: &Path) -> bool {
    dir.ancestors()
        .all(|d| fs::metadata(d).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0))
}

#[test]
fn check_of_a_secure_clean_file_passes_or_names_the_insecure_directory() {
    // Under target/, not /tmp (world-writable): run as root, the rule can hold there.
    let tmp = tempfile::Builder::new()
        .prefix("profiles-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let dir = tmp.path();
    let file = dir.join("gpudirect.toml");
    fs::write(
        &file,
        "[profiles.plain]\ndescription = \"debug\"\n[profiles.plain.env]\nNCCL_DEBUG = \"INFO\"\n",
    )
    .unwrap();
    let out = run(&mut profiles(&file, &["check"]));
    if secure(dir) {
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        assert_eq!(stdout(&out), "");
        assert_stderr_contains(&out, "ok, 0 warning(s)");
    } else {
        assert_eq!(out.status.code(), Some(1));
        assert_stdout_contains(&out, ":1: error: ");
        assert_stdout_contains(&out, "refusing the config");
    }
}

/// A profile overlay as `gpudirect tune --write` makes it for `tcpx`.
const TUNED: &str = "# Written by `gpudirect tune` (run t1234) at 2026-11-30T22:00:00Z.
# Install: append to the plugin's config after checking it:
#   gpudirect profiles check --overlay THIS_FILE

[profiles.tcpx-tuned]
extends = \"tcpx\"
description = \"tcpx with NCCL_MIN_NCHANNELS=32 (gpudirect tune t1234, all_reduce ...)\"

[profiles.tcpx-tuned.env]
NCCL_MIN_NCHANNELS = \"32\"
";

/// `check --overlay FILE`: the config with FILE appended, as the admin would install it.
/// An overlay extending one of the config's profiles is accepted, and what the profile
/// would be is said; a problem in the overlay names the overlay's file and its own line.
#[test]
fn check_with_an_overlay_checks_the_config_it_would_make() {
    // Under target/, not /tmp: run as root, the config's ownership rule can hold there.
    let tmp = tempfile::Builder::new()
        .prefix("profiles-overlay-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let dir = tmp.path();
    let config = dir.join("gpudirect.toml");
    fs::write(&config, SHIPPED).unwrap();
    let overlay = dir.join("tcpx-tuned.toml");
    fs::write(&overlay, TUNED).unwrap();
    let shown = overlay.display().to_string();
    let check = |overlay: &str| run(&mut profiles(&config, &["check", "--overlay", overlay]));

    let out = check(&shown);
    let text = stdout(&out);
    let errors: Vec<&str> = text.lines().filter(|l| l.contains(": error: ")).collect();
    if secure(dir) {
        assert!(out.status.success(), "{text}{}", stderr(&out));
        assert_eq!(errors, Vec::<&str>::new());
    } else {
        // Not run as root: the config's ownership is the one error.
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert_eq!(errors.len(), 1, "{text}");
        assert!(errors[0].contains("refusing the config"), "{text}");
    }
    // The tuned profile's node checks are tcpx's, at tcpx's lines: nothing is the overlay's.
    assert!(!text.contains(&shown), "{text}");
    assert_stderr_contains(
        &out,
        &format!("{shown}:5: profile tcpx-tuned (extends tcpx): transport GPUDirectTCPX, NICs 1+4, checks nics,libraries,rxdm_socket_dir, library_dirs /var/lib/tcpx/lib64, forced NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX, pin_cpus, 21 variable(s): NCCL_MIN_NCHANNELS=32 (new)"),
    );
    assert_stderr_contains(&out, &format!("with {shown} appended: "));

    // Once appended, `show` gives it tcpx's keys and the new variable.
    let installed = dir.join("installed.toml");
    fs::write(&installed, format!("{SHIPPED}{TUNED}")).unwrap();
    let show = ok(&mut profiles(&installed, &["show", "tcpx-tuned"]));
    for needle in [
        "profile tcpx-tuned: tcpx with NCCL_MIN_NCHANNELS=32",
        "  extends         tcpx",
        "  transport       GPUDirectTCPX",
        "  data_nics       eth1, eth2, eth3, eth4 (net)",
        "    keepable  NCCL_MIN_NCHANNELS=32\n",
        "    forced    NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=/run/tcpx-{job_id}\n",
    ] {
        assert!(show.contains(needle), "{needle} missing from:\n{show}");
    }

    // A typo'd base: the overlay's file and line, and the profiles there are.
    let typo = dir.join("typo.toml");
    fs::write(
        &typo,
        TUNED.replace("extends = \"tcpx\"", "extends = \"tpcx\""),
    )
    .unwrap();
    let out = check(&typo.display().to_string());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        format!(
            "{}:6: error: profiles.tcpx-tuned.extends: no profile `tpcx` to extend (profiles: azure-ndv5, efa, gib, gib-a4, ib, socket, tcpx, tcpxo): fix the name or add [profiles.tpcx]\n",
            typo.display()
        )
    );
    assert_stderr_contains(&out, "1 error(s)");

    // An overlay that redefines one of the config's profiles.
    let clash = dir.join("clash.toml");
    fs::write(&clash, "\n[profiles.tcpx]\ntransport = \"Socket\"\n").unwrap();
    let out = check(&clash.display().to_string());
    assert_eq!(out.status.code(), Some(1));
    let line = SHIPPED
        .lines()
        .position(|l| l == "[profiles.tcpx]")
        .unwrap()
        + 1;
    assert_eq!(
        stdout(&out),
        format!(
            "{clash}:2: error: profiles.tcpx: {config}:{line} already declares profile `tcpx`, and an overlay may only add profiles: rename the profile in {clash}\n",
            clash = clash.display(),
            config = config.display()
        )
    );

    // An overlay that cannot be read.
    let missing = dir.join("missing.toml").display().to_string();
    let out = check(&missing);
    assert_eq!(out.status.code(), Some(1));
    assert_stdout_contains(
        &out,
        &format!("{missing}:1: error: cannot read the overlay: "),
    );
}

#[test]
fn check_reports_broken_configs_with_file_and_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("[profiles.x]\nstrict = tru\n", 2, "error: "),
        (
            "[profiles.x]\n\n[[node_set]]\nname = \"a\"\nhosts = \"n1\"\nprofile = \"zz\"\n",
            6,
            "error: node_set[0] (a).profile: no profile `zz`",
        ),
        (
            "[profiles.x]\npin_cpus = true\n",
            2,
            "error: profiles.x.pin_cpus: pinning needs gpu_nics",
        ),
        (
            "[profiles.x]\ndata_nic_class = \"rdma\"\n",
            2,
            "error: profiles.x.data_nic_class:",
        ),
    ];
    for (i, (text, line, needle)) in cases.iter().enumerate() {
        let (_dir, config) = write_config(&format!("broken{i}"), text);
        let out = run(&mut profiles(&config, &["check"]));
        assert_eq!(out.status.code(), Some(1), "{text}");
        let expected = format!("{}:{line}: {needle}", config.display());
        assert!(
            stdout(&out).starts_with(&expected),
            "{text}\nexpected {expected}\ngot {}",
            stdout(&out)
        );
        assert_eq!(
            stdout(&out).lines().count(),
            1,
            "a broken file gives one finding"
        );
    }
}

#[test]
fn check_lints_rdma_names_used_as_interfaces() {
    let text = "[profiles.ib]\ndata_nics = [\"mlx5_0\"]\ngpu_nics = [\"mlx5_0\"]\n[profiles.ib.env]\nNCCL_IB_HCA = \"={nic}\"\n";
    let (_dir, config) = write_config("hca", text);
    let out = stdout(&run(&mut profiles(&config, &["check"])));
    let file = config.display().to_string();
    assert!(
        out.contains(&format!(
            "{file}:2: warning: profiles.ib.data_nics: `mlx5_0` looks like an RDMA device"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("{file}:5: warning: profiles.ib.env.NCCL_IB_HCA:")),
        "{out}"
    );
}

#[test]
fn node_checks_are_warnings_off_the_node_and_errors_on_it() {
    let text = "[profiles.x]\nlibrary_dirs = [\"/nonexistent/gpudirect/lib\"]\n[profiles.x.checks]\nlibraries = [\"libnccl-net.so\"]\n";
    let (_dir, config) = write_config("onnode", text);
    let file = config.display().to_string();
    let off = stdout(&run(&mut profiles(&config, &["check"])));
    assert!(
        off.contains(&format!(
            "{file}:2: warning: profile x: library_dirs: /nonexistent/gpudirect/lib does not exist"
        )),
        "{off}"
    );
    assert!(
        off.contains(&format!(
            "{file}:4: warning: profile x: libraries: transport library libnccl-net.so not found"
        )),
        "{off}"
    );
    let on = run(&mut profiles(
        &config,
        &["check", "--on-node", "--node", "gpu7"],
    ));
    assert_eq!(on.status.code(), Some(1));
    let on = stdout(&on);
    assert!(
        on.contains(&format!("{file}:2: error: profile x: library_dirs: /nonexistent/gpudirect/lib does not exist on node gpu7")),
        "{on}"
    );
    assert!(on.contains(&format!("{file}:4: error: ")), "{on}");
}

#[test]
fn explain_gives_the_tasks_variables_nic_and_cpus() {
    let (_dir, config) = write_config("explain", SHIPPED);
    let out = ok(&mut profiles(
        &config,
        &[
            "explain",
            "--profile",
            "tcpx",
            "--node",
            "a3h-0001",
            "--local-rank",
            "3",
            "--job-id",
            "77",
            "--env",
            "NCCL_ALGO=Tree",
            "--env",
            "NCCL_SOCKET_IFNAME=eth9",
        ],
    ));
    assert!(
        out.starts_with("node a3h-0001 (node set a3-high-slurm-image): profile tcpx (mode tcpx, from --gpudirect)\n"),
        "{out}"
    );
    assert!(
        out.contains("task: rank 3, local rank 3 of 8, GPU 3, NIC enp12s0, CPUs 0-51,104-155\n"),
        "{out}"
    );
    assert!(
        out.contains("  forced    NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=/run/tcpx-77\n"),
        "{out}"
    );
    assert!(
        out.contains("  keepable  NCCL_NET=GPUDirectTCPX_v7\n"),
        "{out}"
    );
    assert!(
        out.contains("  plugin    LD_LIBRARY_PATH=/var/lib/tcpx/lib64\n"),
        "{out}"
    );
    assert!(
        out.contains("kept (the user's value): NCCL_ALGO, NCCL_SOCKET_IFNAME\n"),
        "the user's value wins over a keepable one: {out}"
    );
    assert!(!out.contains("NCCL_SOCKET_IFNAME=enp0s12"), "{out}");
    assert!(
        out.contains("checks the plugin runs on the node: nics, libraries, rxdm_socket_dir"),
        "{out}"
    );
}

/// `[watch]` with the connection profiler: explain says telemetry is on for tasks that ask,
/// which library NCCL loads with the Inspector behind it, and, for a task that asks, the
/// variables that do it.
#[test]
fn explain_says_what_job_telemetry_does_and_shows_its_variables_for_a_task_that_asks() {
    let text = format!(
        "{SHIPPED}\n[watch]\ninspector = \"/opt/insp/libnccl-profiler-inspector.so\"\nconnections = \"/opt/gdw/libgpudirect_watch_profiler.so\"\ndump_root = \"/local\"\n"
    );
    let (_dir, config) = write_config("explain-watch", &text);
    let base = [
        "explain",
        "--profile",
        "tcpx",
        "--node",
        "a3h-0001",
        "--job-id",
        "77",
    ];
    let quiet = ok(&mut profiles(&config, &base));
    assert!(
        quiet.contains(
            "job telemetry ([watch]): on for tasks that export GPUDIRECT_WATCH=1 (this one does not: \
             --env GPUDIRECT_WATCH=1 shows its variables); NCCL loads the connection profiler \
             /opt/gdw/libgpudirect_watch_profiler.so, the Inspector /opt/insp/libnccl-profiler-inspector.so \
             chained behind it; dumps in /local/gpudirect-watch-77 every 1000 ms\n"
        ),
        "{quiet}"
    );
    assert!(!quiet.contains("NCCL_PROFILER_PLUGIN"), "{quiet}");
    let mut asked: Vec<&str> = base.to_vec();
    asked.extend(["--env", "GPUDIRECT_WATCH=1"]);
    let out = ok(&mut profiles(&config, &asked));
    assert!(out.contains("(this one does)"), "{out}");
    for line in [
        "  plugin    NCCL_PROFILER_PLUGIN=/opt/gdw/libgpudirect_watch_profiler.so\n",
        "  plugin    GPUDIRECT_WATCH_CHAIN=/opt/insp/libnccl-profiler-inspector.so\n",
        "  plugin    GPUDIRECT_WATCH_DIR=/local/gpudirect-watch-77\n",
        "  plugin    NCCL_INSPECTOR_DUMP_DIR=/local/gpudirect-watch-77\n",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }

    // A profile that loads its own profiler: kept, and said; replaced where the admin says so.
    let own = text.replace(
        "[profiles.tcpx.env]\n",
        "[profiles.tcpx.env]\nNCCL_PROFILER_PLUGIN = \"/opt/comma/libnccl-profiler.so\"\n",
    );
    let (_dir, config) = write_config("explain-watch-own", &own);
    let out = ok(&mut profiles(&config, &asked));
    assert!(
        out.contains("[watch] off for profile tcpx: it loads its own profiler, /opt/comma/libnccl-profiler.so"),
        "{out}"
    );
    assert!(
        out.contains("  keepable  NCCL_PROFILER_PLUGIN=/opt/comma/libnccl-profiler.so\n"),
        "{out}"
    );
    let (_dir, config) = write_config(
        "explain-watch-replace",
        &format!("{own}replace_profiler = true\n"),
    );
    let out = ok(&mut profiles(&config, &asked));
    assert!(
        out.contains("chained behind it instead of the profile's own profiler /opt/comma/libnccl-profiler.so"),
        "{out}"
    );
    assert!(
        out.contains("  plugin    NCCL_PROFILER_PLUGIN=/opt/gdw/libgpudirect_watch_profiler.so\n")
            && !out.contains("NCCL_PROFILER_PLUGIN=/opt/comma"),
        "{out}"
    );
}

#[test]
fn explain_auto_reads_sysfs_locality_from_a_fixture_tree() {
    let (_dir, config) = write_config("sysfs", SHIPPED);
    let json = explain_on_sysfs(
        &config,
        "a3-mega",
        &[
            "--mode",
            "auto",
            "--node",
            "a3m-0001",
            "--local-rank",
            "5",
            "--json",
        ],
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["profile"], "tcpxo");
    assert_eq!(json["mode"], "auto");
    assert_eq!(json["node_set"], "a3-mega-slurm-image");
    assert_eq!(json["nic"], "enp135s0");
    assert_eq!(json["cpus"], "52-103,156-207");
    let notes = json["notes"].to_string();
    assert!(
        notes.contains("from sysfs: GPU 5 at 0000:85:00.0"),
        "{notes}"
    );

    let out = explain_on_sysfs(
        &config,
        "p5",
        &[
            "--profile",
            "efa",
            "--node",
            "p5-01",
            "--local-rank",
            "0",
            "--cuda-visible-devices",
            "7",
        ],
    );
    assert!(
        out.contains("GPU 7, NIC rdmap198s0,rdmap199s0,rdmap200s0,rdmap201s0, CPUs 48-95,144-191"),
        "{out}"
    );
    assert!(out.contains("  keepable  FI_PROVIDER=efa\n"), "{out}");
}

#[test]
fn explain_says_what_happens_without_a_profile_and_refuses_bad_input() {
    let (_dir, config) = write_config("noprofile", SHIPPED);
    let out = ok(&mut profiles(&config, &["explain", "--node", "cpu-007"]));
    assert!(out.contains("mode none (from node set cpu)"), "{out}");
    let out = ok(&mut profiles(&config, &["explain", "--node", "gpu-x"]));
    assert!(out.contains("leaves the step untouched"), "{out}");

    let out = run(&mut profiles(
        &config,
        &["explain", "--mode", "auto", "--node", "gpu-x"],
    ));
    assert_eq!(out.status.code(), Some(3));
    assert_stderr_contains(&out, "node gpu-x is in no node set");
    let out = run(&mut profiles(
        &config,
        &["explain", "--profile", "tcpz", "--node", "n"],
    ));
    assert_eq!(out.status.code(), Some(3));
    assert_stderr_contains(&out, "unknown --gpudirect mode `tcpz`");
    let out = run(&mut profiles(
        &config,
        &[
            "explain",
            "--profile",
            "tcpx",
            "--node",
            "n",
            "--local-rank",
            "8",
        ],
    ));
    assert_eq!(out.status.code(), Some(3));
    assert_stderr_contains(&out, "--local-rank 8 is not below --ntasks-per-node 8");
}

/// `install-overlay`'s config and overlay in a fresh folder the test vouches for
/// (`--insecure-trust-below`): the shipped config, then `config_tail` appended to it.
fn install_case(name: &str, config_tail: &str, overlay: &str) -> (TempDir, PathBuf, PathBuf) {
    let (dir, config) = write_config(name, &format!("{SHIPPED}{config_tail}"));
    let file = dir.path().join("tcpx-tuned.toml");
    fs::write(&file, overlay).unwrap();
    (dir, config, file)
}

fn install(dir: &Path, config: &Path, overlay: &Path) -> std::process::Output {
    let mut cmd = profiles(config, &["install-overlay"]);
    cmd.arg(overlay).arg("--insecure-trust-below").arg(dir);
    run(&mut cmd)
}

/// Security review S7: `install-overlay` appends exactly the bytes it checked, and only
/// when the config with them appended has no error; otherwise the config is unchanged.
#[test]
fn install_overlay_appends_exactly_what_it_checked() {
    let (dir, config, overlay) = install_case("install-ok", "", TUNED);
    let before = fs::read_to_string(&config).unwrap();
    let out = install(dir.path(), &config, &overlay);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_stderr_contains(&out, "installed: ");
    assert_eq!(
        fs::read_to_string(&config).unwrap(),
        format!("{before}{TUNED}")
    );
    // Installing it again would declare tcpx-tuned twice: refused, nothing appended.
    let again = install(dir.path(), &config, &overlay);
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert_stderr_contains(&again, "already declares profile `tcpx-tuned`");
    assert_stderr_contains(&again, "not installed");
    assert_eq!(
        fs::read_to_string(&config).unwrap(),
        format!("{before}{TUNED}")
    );
}

/// Security review S7 (a): a config whose last line has no line break, ending in a comment,
/// would swallow the overlay's first header under `cat >>`, its keys landing in the config's
/// last table. `check --overlay` now calls it an error (it was a warning), and
/// `install-overlay` refuses it, the config unchanged.
#[test]
fn a_config_without_a_final_line_break_is_an_error_and_is_not_installed_into() {
    let (dir, config, overlay) = install_case("install-newline", "# end", TUNED);
    let before = fs::read_to_string(&config).unwrap();
    let check = run(&mut profiles(
        &config,
        &["check", "--overlay", overlay.to_str().unwrap()],
    ));
    assert_eq!(check.status.code(), Some(1), "{}", stdout(&check));
    assert_stdout_contains(&check, "error: no line break at the end");
    let out = install(dir.path(), &config, &overlay);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_stderr_contains(&out, "no line break at the end");
    assert_eq!(fs::read_to_string(&config).unwrap(), before);
}

/// Whether `profiles check --overlay` found nothing wrong but the config's own place: a
/// config in a folder others can write (a checkout under /tmp) is refused, overlay or not.
fn only_the_configs_place_is_wrong(out: &std::process::Output) -> bool {
    stdout(out)
        .lines()
        .filter(|l| l.contains(": error: "))
        .all(|e| e.contains("refusing the config"))
}

/// Issue #31: `profiles generate` on every recorded tree writes a profile that `profiles
/// check --overlay` accepts with the shipped config. On A3 High it is the shipped tcpx
/// profile's own map and CPUs; with `--base tcpx` it is an overlay keeping tcpx's
/// transport; a tree with eth3 missing is refused as a tcpx base, naming eth3.
#[test]
fn generate_writes_profiles_that_check_accepts_and_refuses_a_base_the_node_cannot_serve() {
    let (dir, config) = write_config("generate", SHIPPED);
    for tree in [
        "a3-high",
        "a3-mega",
        "a3-ultra",
        "a4",
        "p5",
        "nd-h100-v5",
        "flat-vm",
        "missing-nic",
        "gpu-box",
    ] {
        let name = format!("gen-{tree}");
        let out_file = dir.path().join(format!("{tree}.toml"));
        let mut generate = generate_on(&config, tree, &["--name", &name, "--node", "n1"]);
        let out = run(generate.arg("-o").arg(&out_file));
        assert!(out.status.success(), "{tree}: {}", stderr(&out));
        let out = check_overlay(&config, &out_file);
        assert!(
            only_the_configs_place_is_wrong(&out),
            "{tree}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        assert_stderr_contains(&out, &format!("profile {name}: "));
        let text = fs::read_to_string(&out_file).unwrap();
        // A fallback is said on stderr and in the file.
        if ["nd-h100-v5", "flat-vm", "missing-nic", "gpu-box"].contains(&tree) {
            assert!(
                text.contains("# WARNING: ") && text.contains("share(s) no PCIe switch"),
                "{tree}:\n{text}"
            );
        } else {
            assert!(!text.contains("# WARNING"), "{tree}:\n{text}");
        }
    }
    let a3h = fs::read_to_string(dir.path().join("a3-high.toml")).unwrap();
    assert!(
        a3h.contains(
            r#"gpu_nics = ["eth1", "eth1", "eth2", "eth2", "eth3", "eth3", "eth4", "eth4"]"#
        ),
        "{a3h}"
    );
    assert!(
        a3h.contains(r#"eth3 = "52-103,156-207""#) && a3h.contains("control_nic = \"eth0\""),
        "{a3h}"
    );
    assert!(
        a3h.contains("# The control NIC: it has the default route"),
        "{a3h}"
    );

    let text = ok(&mut generate_on(
        &config,
        "a3-high",
        &["--base", "tcpx", "--name", "tcpx-here"],
    ));
    assert!(text.contains("extends = \"tcpx\""), "{text}");
    let file = dir.path().join("tcpx-here.toml");
    fs::write(&file, &text).unwrap();
    let out = check_overlay(&config, &file);
    assert!(
        only_the_configs_place_is_wrong(&out),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_stderr_contains(
        &out,
        "profile tcpx-here (extends tcpx): transport GPUDirectTCPX",
    );

    let out = run(&mut generate_on(
        &config,
        "missing-nic",
        &["--base", "tcpx"],
    ));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_stderr_contains(&out, "--base tcpx uses eth3 that this node does not have");
    assert!(stdout(&out).is_empty(), "nothing written: {}", stdout(&out));

    // A name the config would not take: refused before anything is read.
    let out = run(&mut generate_on(&config, "a3-high", &["--name", "a b"]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_stderr_contains(&out, "--name: `a b` cannot name a profile");

    // A tree with no GPU: refused with what it found.
    let empty = dir.path().display().to_string();
    let out = run(&mut profiles(&config, &["generate", "--sysfs", &empty]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_stderr_contains(&out, "cannot read PCI locality");
}

/// Issue #31: `--compare-nccl` against the topology NCCL dumped on the lent H200 host
/// (docs/results/gpu-box/call9/, from the run there with NCCL_TOPO_DUMP_FILE), with the
/// sysfs tree recorded there: they agree (exit 0, said in the file). The same dump with
/// the net renamed (a hand-made variant) differs: exit 1, named.
#[test]
fn generate_compares_its_map_with_the_topology_nccl_dumped() {
    let (dir, config) = write_config("compare", SHIPPED);
    let dump =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/results/gpu-box/call9/nccl-topo.xml");
    let generate = |dump: &Path| {
        let mut cmd = generate_on(&config, "gpu-box", &["--node", "gpubox"]);
        run(cmd.arg("--compare-nccl").arg(dump))
    };
    let out = generate(&dump);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_stdout_contains(
        &out,
        "GPU 0 (0000:00:06.0): agrees: the map gives eth0, NCCL finds eth0 nearest",
    );
    let renamed = dir.path().join("renamed.xml");
    fs::write(
        &renamed,
        fs::read_to_string(&dump)
            .unwrap()
            .replace("name=\"eth0\"", "name=\"eth9\""),
    )
    .unwrap();
    let out = generate(&renamed);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_stderr_contains(&out, "DIFFERS: the map gives eth0, NCCL finds eth9 nearest");
    let not_xml = dir.path().join("not.xml");
    fs::write(&not_xml, "hello").unwrap();
    let out = generate(&not_xml);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_stderr_contains(&out, "not an NCCL topology dump");
}

/// Issue #31: `--topo-xml` writes NCCL's topology format with each GPU and its NIC under one
/// virtual switch (A3 Mega: GPU 0000:04:00.0 with enp6s0's 0000:06:00.0, not with enp7s0's
/// 0000:07:00.0), which the reader of NCCL's own dumps accepts. NCCL loading such a file
/// on the lent host is docs/results/gpu-box/call10/.
#[test]
fn generate_writes_an_nccl_topology_file_that_pairs_each_gpu_with_its_nic() {
    let (dir, config) = write_config("topo-xml", SHIPPED);
    let xml = dir.path().join("topo.xml");
    ok(generate_on(&config, "a3-mega", &[])
        .arg("--topo-xml")
        .arg(&xml));
    let text = fs::read_to_string(&xml).unwrap();
    gpudirect::nccl_output::topo::parse_topo(&text).expect("NCCL's format");
    assert_eq!(text.matches("class=\"0x030200\"").count(), 8, "{text}");
    let block = |busid: &str| -> String {
        let at = text
            .find(&format!("busid=\"{busid}\""))
            .unwrap_or_else(|| panic!("{busid}:\n{text}"));
        let start = text[..at].rfind("ffff:ff:").unwrap();
        text[start..start + 10].to_string()
    };
    assert_eq!(block("0000:04:00.0"), block("0000:06:00.0"), "{text}");
    assert_ne!(block("0000:04:00.0"), block("0000:07:00.0"), "{text}");
    assert_eq!(block("0000:05:00.0"), block("0000:07:00.0"), "{text}");
    assert!(text.contains("<cpu numaid=\"1\" affinity=\""), "{text}");
}

/// Security review T11: `profiles generate --sysfs` on a hostile copy of a tree. A name
/// with newlines broke out of the `#` comments into TOML (here a `[profiles.g.env]` with
/// `NCCL_IB_DISABLE`), and a FIFO in place of a GPU's `class` hung the run.
#[test]
fn generate_on_a_hostile_tree_ends_and_writes_no_toml_from_a_name() {
    let (dir, config) = write_config("generate-hostile", SHIPPED);
    let tree = dir.path().join("flat-vm");
    for name in ["flat-vm", "flat-vm.proc"] {
        let status = Command::new("cp")
            .arg("-a")
            .arg(sysfs_fixture(name))
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success());
    }
    let rdma = tree.join("devices/pci0000:00/0000:00:09.0/infiniband");
    let hostile = "mlx5_1\n[profiles.g.env]\nNCCL_IB_DISABLE = \"1\"\n#";
    fs::rename(rdma.join("mlx5_1"), rdma.join(hostile)).unwrap();
    fs::remove_file(tree.join("class/infiniband/mlx5_1")).unwrap();
    std::os::unix::fs::symlink(
        format!("../../devices/pci0000:00/0000:00:09.0/infiniband/{hostile}"),
        tree.join(format!("class/infiniband/{hostile}")),
    )
    .unwrap();
    let class = tree.join("devices/pci0000:00/0000:00:04.0/class");
    fs::remove_file(&class).unwrap();
    nix::unistd::mkfifo(&class, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut cmd = Command::new("timeout");
    cmd.arg("30")
        .arg(crate::common::BIN)
        .args(["profiles", "generate", "--config"])
        .arg(&config)
        .args(["--name", "g", "--node", "n1", "--sysfs"])
        .arg(&tree)
        .arg("--proc")
        .arg(dir.path().join("flat-vm.proc"));
    let out = run(&mut cmd);
    assert_ne!(out.status.code(), Some(124), "the FIFO hung the run");
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    let value: toml::Value = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let profile = &value["profiles"]["g"];
    assert!(profile.get("env").is_none(), "a name wrote TOML: {text}");
    assert!(
        text.contains("mlx5_1\\x0a[profiles.g.env]"),
        "the name is shown escaped in its comment: {text}"
    );
}

/// `profiles check` reports every error of a config, as a linter does (issue #42): each on
/// its own line with its file, line, key and fix, the exit status 1 as for one error.
/// The shipped config with six mistakes in four tables, one of them a key serde refuses
/// (which used to hide the rest).
#[test]
fn check_reports_every_error_of_a_config_with_its_place() {
    let broken = format!(
        "{}\n[ras]\nport_base = 80\n\n[profiles.extra]\nlibrary_dirs = [\"lib64\"]\n[profiles.extra.env]\nlower = \"x\"\n\n[[node_set]]\nname = \"late\"\nhosts = \"late[1-\"\nprofile = \"nosuch\"\n",
        SHIPPED.replacen("[profiles.tcpx]\n", "[profiles.tcpx]\ndata_nic = [\"eth1\"]\n", 1)
    );
    let (_dir, config) = write_config("every-error", &broken);
    let line = |start: &str| {
        broken
            .lines()
            .position(|l| l.starts_with(start))
            .map(|i| i + 1)
            .unwrap()
    };
    let out = run(&mut profiles(&config, &["check"]));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let file = config.display();
    let want = [
        format!("{file}:{}: error: unknown field `data_nic`", line("data_nic =")),
        format!(
            "{file}:{}: error: ras.port_base: 80 is no port",
            line("port_base = 80")
        ),
        format!(
            "{file}:{}: error: profiles.extra.library_dirs: must be an absolute path",
            line("library_dirs = [\"lib64\"]")
        ),
        format!(
            "{file}:{}: error: profiles.extra.env.lower: a variable name is uppercase letters, digits and `_`",
            line("lower =")
        ),
        format!(
            "{file}:{}: error: node_set[",
            line("hosts = \"late[1-")
        ),
        format!("{file}:{}: error: node_set[", line("profile = \"nosuch\"")),
    ];
    for start in &want {
        assert!(
            text.lines().any(|l| l.starts_with(start.as_str())),
            "missing {start}:\n{text}"
        );
    }
    let errors = text.lines().filter(|l| l.contains(": error: ")).count();
    assert_eq!(errors, want.len(), "{text}");
    // The node set's two: its hosts and its profile, each with what to do.
    assert_stdout_contains(&out, ".profile: no profile `nosuch` (profiles: ");
    // In the file's order, and the count on stderr.
    let numbers: Vec<usize> = text
        .lines()
        .filter_map(|l| {
            l.strip_prefix(&format!("{file}:"))?
                .split(':')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] <= w[1]), "{text}");
    assert_stderr_contains(&out, &format!("{} error(s)", want.len()));
}

/// `check --overlay`: every error of the overlay, each at the overlay's own file and line
/// (issue #42).
#[test]
fn check_with_an_overlay_reports_each_of_its_errors_in_its_own_lines() {
    let dir = common::scratch("profiles", "overlay-errors");
    let config = dir.path().join("gpudirect.toml");
    fs::write(&config, SHIPPED).unwrap();
    let overlay = dir.path().join("two.toml");
    fs::write(
        &overlay,
        TUNED.replace(
            "[profiles.tcpx-tuned.env]\n",
            "[profiles.tcpx-tuned.env]\nLD_PRELOAD = \"/x.so\"\nnccl_min = \"1\"\n",
        ),
    )
    .unwrap();
    let out = check_overlay(&config, &overlay);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let shown = overlay.display().to_string();
    let own = fs::read_to_string(&overlay).unwrap();
    let line = |start: &str| own.lines().position(|l| l.starts_with(start)).unwrap() + 1;
    let errors: Vec<&str> = text.lines().filter(|l| l.contains(": error: ")).collect();
    assert_eq!(
        errors,
        [
            format!(
                "{shown}:{}: error: profiles.tcpx-tuned.env.LD_PRELOAD: the plugin sets no LD_* variable but LD_LIBRARY_PATH (from library_dirs, whose folders it checks): a library the tasks must load goes in a folder of library_dirs",
                line("LD_PRELOAD")
            ),
            format!(
                "{shown}:{}: error: profiles.tcpx-tuned.env.nccl_min: a variable name is uppercase letters, digits and `_`",
                line("nccl_min")
            ),
        ],
        "{text}"
    );
    assert_stderr_contains(&out, "2 error(s)");
}
