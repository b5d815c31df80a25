//! `gpudirect hostfile` end to end: the built binary, its exit code, stdout, stderr, files.
//!
//! `--via-scontrol` against a real Slurm is left to the local-cluster tests; here it is only
//! checked that a missing scontrol gives a clear error naming the command.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::common::{self, assert_stderr_contains, ok, run, stderr, stdout};

/// The binary with no allocation in its environment, whatever the test runner has.
fn gpudirect() -> Command {
    common::gpudirect_without(&[
        "SLURM_JOB_NODELIST",
        "SLURM_TASKS_PER_NODE",
        "GPUDIRECT_DB",
        "RUST_LOG",
    ])
}

fn fails(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        !out.status.success(),
        "should fail, printed: {}",
        stdout(&out)
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty(), "nothing on stdout on failure");
    stderr(&out)
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn allocation_environment_default_format_is_openmpi() {
    let out = ok(gpudirect()
        .args(["hostfile"])
        .env("SLURM_JOB_NODELIST", "a3h-[0001-0003]")
        .env("SLURM_TASKS_PER_NODE", "8(x2),4"));
    assert_eq!(
        out,
        "a3h-0001 slots=8\na3h-0002 slots=8\na3h-0003 slots=4\n"
    );
}

#[test]
fn every_format() {
    let base = [
        "hostfile",
        "--nodelist",
        "gpu[1-2]-ib",
        "--slots",
        "2,1",
        "--format",
    ];
    let cases = [
        ("openmpi", "gpu1-ib slots=2\ngpu2-ib slots=1\n"),
        ("mpich", "gpu1-ib:2\ngpu2-ib:1\n"),
        ("hosts", "gpu1-ib\ngpu2-ib\n"),
        ("slurm", "gpu1-ib\ngpu1-ib\ngpu2-ib\n"),
    ];
    for (format, expected) in cases {
        assert_eq!(ok(gpudirect().args(base).arg(format)), expected, "{format}");
    }
    // A usage error: exit code 3 (could not run), the allowed values listed.
    let out = run(gpudirect().args(base).arg("json"));
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.contains("invalid value 'json'") && err.contains("openmpi, mpich, hosts, slurm"),
        "{err}"
    );
}

#[test]
fn flags_override_environment() {
    let out = ok(gpudirect()
        .args([
            "hostfile",
            "--nodelist",
            "n[098-101]",
            "--slots",
            "4",
            "--format",
            "mpich",
        ])
        .env("SLURM_JOB_NODELIST", "other[1-2]")
        .env("SLURM_TASKS_PER_NODE", "8(x2)"));
    assert_eq!(out, "n098:4\nn099:4\nn100:4\nn101:4\n");
    // --nodelist alone: one slot per node, the allocation's counts are not borrowed.
    let out = ok(gpudirect()
        .args(["hostfile", "--nodelist", "x,y", "--format", "mpich"])
        .env("SLURM_TASKS_PER_NODE", "8(x3)"));
    assert_eq!(out, "x:1\ny:1\n");
}

#[test]
fn output_file_is_written_whole_with_no_leftovers() {
    let tmp = common::scratch("hostfile", "output");
    let dir = tmp.path();
    let path = dir.join("hostfile");
    fs::write(&path, "stale\n").expect("seed");
    let out = ok(gpudirect()
        .args(["hostfile", "--nodelist", "n[1-2]", "--slots", "8(x2)", "-o"])
        .arg(&path));
    assert_eq!(out, "", "nothing on stdout with -o");
    let only_the_hostfile = || {
        assert_eq!(
            fs::read_to_string(&path).expect("read"),
            "n1 slots=8\nn2 slots=8\n"
        );
        assert_eq!(names_in(dir), ["hostfile"]);
    };
    only_the_hostfile();
    // A failure leaves the old file untouched and no temporary file behind.
    let err = fails(
        gpudirect()
            .args(["hostfile", "--nodelist", "n[2-1]", "-o"])
            .arg(&path),
    );
    assert!(err.contains("reversed range"), "{err}");
    only_the_hostfile();
    let err = fails(
        gpudirect()
            .args(["hostfile", "--nodelist", "n1", "-o"])
            .arg(dir.join("missing").join("hostfile")),
    );
    assert!(
        err.contains("could not write the hostfile") && err.contains("caused by:"),
        "{err}"
    );
}

#[test]
fn missing_allocation_says_what_to_do() {
    let err = fails(gpudirect().arg("hostfile"));
    assert!(
        err.starts_with("error: no node list: SLURM_JOB_NODELIST is not set"),
        "{err}"
    );
    assert!(
        err.contains("run inside an allocation") && err.contains("--nodelist"),
        "{err}"
    );
    let err = fails(
        gpudirect()
            .arg("hostfile")
            .env("SLURM_JOB_NODELIST", "n[1-2]"),
    );
    assert!(
        err.contains("SLURM_TASKS_PER_NODE is not set") && err.contains("--slots"),
        "{err}"
    );
}

#[test]
fn count_mismatch_is_refused() {
    let err = fails(
        gpudirect()
            .arg("hostfile")
            .env("SLURM_JOB_NODELIST", "n[1-3]")
            .env("SLURM_TASKS_PER_NODE", "8(x2)"),
    );
    assert!(
        err.contains("3 node(s) in $SLURM_JOB_NODELIST `n[1-3]` but 2 slot count(s) in $SLURM_TASKS_PER_NODE `8(x2)`"),
        "{err}"
    );
}

#[test]
fn bad_hostlist_shows_offset_in_the_cause_chain() {
    let err = fails(gpudirect().args(["hostfile", "--nodelist", "gpu[01-04,]"]));
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "error: invalid node list in --nodelist `gpu[01-04,]`",
            "  caused by: empty range at byte 10: write a number or a range such as `1` or `1-4` between the brackets and commas",
        ]
    );
    let err = fails(gpudirect().args(["hostfile", "--nodelist", "n[1-99999999999]"]));
    assert!(
        err.contains("99999999999 hosts, more than the limit"),
        "{err}"
    );
    let err = fails(gpudirect().args(["hostfile", "--nodelist", "n1", "--slots", "8(x"]));
    assert!(
        err.contains("--slots `8(x`") && err.contains("byte 1"),
        "{err}"
    );
}

#[test]
fn db_flag_is_global_and_read_from_env() {
    let expected = "n1 slots=1\n";
    assert_eq!(
        ok(gpudirect().args(["--db", "/tmp/x.sqlite", "hostfile", "--nodelist", "n1"])),
        expected
    );
    assert_eq!(
        ok(gpudirect().args(["hostfile", "--nodelist", "n1", "--db", "/tmp/x.sqlite"])),
        expected
    );
    assert_eq!(
        ok(gpudirect()
            .args(["hostfile", "--nodelist", "n1"])
            .env("GPUDIRECT_DB", "/tmp/x.sqlite")),
        expected
    );
}

#[test]
fn help_teaches_with_examples() {
    let help = ok(gpudirect().args(["hostfile", "--help"]));
    assert!(
        help.contains("Examples:") && help.contains("--slots '8(x2),4'"),
        "{help}"
    );
    assert!(
        help.contains("SLURM_TASKS_PER_NODE") && help.contains("--via-scontrol"),
        "{help}"
    );
    let help = ok(gpudirect().arg("--help"));
    assert!(
        help.contains("hostfile") && help.contains("GPUDIRECT_DB"),
        "{help}"
    );
}

/// `--version` names the Slurm the build was made for (launcher/build.rs reads the headers),
/// as the plugin of the same package is built against them.
#[test]
fn version_names_the_slurm_it_was_built_for() {
    let version = ok(gpudirect().arg("--version"));
    let header = std::fs::read_to_string("/usr/include/slurm/slurm_version.h").unwrap_or_default();
    let want = if header.contains("SLURM_VERSION_NUMBER") {
        "(built for Slurm "
    } else {
        "(built for an unknown Slurm: no slurm_version.h at build time)"
    };
    assert!(
        version.starts_with("gpudirect 0.") && version.contains(want),
        "{version}"
    );
}

#[test]
fn verbose_logs_go_to_stderr_only() {
    let out = run(gpudirect().args(["-vv", "hostfile", "--nodelist", "n1"]));
    assert!(out.status.success());
    assert_eq!(stdout(&out), "n1 slots=1\n");
    assert_stderr_contains(&out, "hostfile request");
}

#[test]
fn via_scontrol_without_scontrol_names_the_command() {
    let err = fails(
        gpudirect()
            .args(["hostfile", "--via-scontrol", "--nodelist", "n[1-2]"])
            .env("PATH", "/nonexistent"),
    );
    assert!(
        err.contains("could not start `scontrol show hostnames 'n[1-2]'`")
            && err.contains("on PATH"),
        "{err}"
    );
}
