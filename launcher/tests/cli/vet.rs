//! `gpudirect vet` outside a cluster: its output folder (security review T3), with a stand-in
//! `srun` that answers the node checks for one node.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use crate::common::{gpudirect_without, run, scratch, stderr};

/// A stand-in `srun` in `dir/bin`: node1's health answer, as srun's `--label` prints it.
fn stand_in_srun(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let srun = bin.join("srun");
    std::fs::write(
        &srun,
        "#!/bin/sh\necho '0: {\"node\":\"node1\",\"failures\":[],\"attempts\":1}'\n",
    )
    .expect("write srun");
    std::fs::set_permissions(&srun, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    bin
}

/// `gpudirect vet` as job 4242 on node1, run in `cwd`, its history in `dir`.
fn vet(dir: &Path, cwd: &Path) -> Command {
    let mut cmd = gpudirect_without(&["GPUDIRECT_DB", "SLURM_HOSTFILE", "GPUDIRECT_CONFIG"]);
    let path = format!("{}:/usr/bin:/bin", stand_in_srun(dir).display());
    cmd.current_dir(cwd)
        .env("PATH", path)
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_JOB_NODELIST", "node1")
        .args(["--db"])
        .arg(dir.join("h.sqlite"))
        .args(["vet", "--budget", "10s"]);
    cmd
}

#[test]
fn vet_refuses_an_output_folder_someone_else_could_change() {
    let dir = scratch("vet", "planted");
    let cwd = dir.path().join("shared");
    std::fs::create_dir(&cwd).expect("mkdir");
    // Another user's planted folder: here one anyone may write (mode 0777).
    let planted = cwd.join("gpudirect-vet-4242");
    std::fs::create_dir(&planted).expect("plant");
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = run(&mut vet(dir.path(), &cwd));
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(3),
        "vet took the planted folder: {err}"
    );
    assert!(err.contains("gpudirect-vet-4242"), "{err}");
    assert!(err.contains("mode 777"), "{err}");
    assert!(
        std::fs::read_dir(&planted).expect("read").next().is_none(),
        "vet wrote into the planted folder"
    );

    // Run as root (as an admin's vet --drain): another user's folder, even a private one.
    if nix::unistd::geteuid().is_root() {
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::os::unix::fs::chown(&planted, Some(65534), None).expect("chown");
        let out = run(&mut vet(dir.path(), &cwd));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(err.contains("owned by uid 65534"), "{err}");
    }

    // A folder whose parent others can rename entries in (group-writable, not sticky).
    std::fs::remove_dir(&planted).expect("rmdir");
    std::fs::set_permissions(&cwd, std::fs::Permissions::from_mode(0o770)).expect("chmod");
    let out = run(&mut vet(dir.path(), &cwd));
    let err = stderr(&out);
    assert!(
        !out.status.success(),
        "vet wrote under a group-writable folder: {err}"
    );
    assert!(err.contains("has no sticky bit"), "{err}");
    assert!(!planted.join("vet.env").exists());
}

#[test]
fn vet_makes_its_output_folder_private_and_reuses_only_its_own() {
    let dir = scratch("vet", "fresh");
    let cwd = dir.path().join("work");
    std::fs::create_dir(&cwd).expect("mkdir");
    std::fs::set_permissions(&cwd, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = run(&mut vet(dir.path(), &cwd));
    assert!(out.status.success(), "{}", stderr(&out));
    let folder = cwd.join("gpudirect-vet-4242");
    let meta = std::fs::symlink_metadata(&folder).expect("folder");
    assert!(meta.is_dir());
    assert_eq!(meta.mode() & 0o7777, 0o700);
    assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw());
    let env = std::fs::read_to_string(folder.join("vet.env")).expect("vet.env");
    assert!(env.contains("export GPUDIRECT_GOOD_NODES=node1"), "{env}");
    // The same job again (a requeued run): its own private folder is taken.
    let out = run(&mut vet(dir.path(), &cwd));
    assert!(out.status.success(), "{}", stderr(&out));
}
