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

/// `vet --drain` drains the node that failed its checks through the one drain path
/// (`gpudirect::drain`): what it did is said in words, the state read back, not as the
/// `Debug` form of a Rust value (design review 2026-12-04, P3). `scontrol` here keeps
/// node2's state in a file: drained once `update ... state=drain` ran.
#[test]
fn vet_drain_says_what_it_did_in_words() {
    let dir = scratch("vet", "drain");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let script = |name: &str, text: String| {
        std::fs::write(bin.join(name), text).expect("write");
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    };
    script(
        "srun",
        "#!/bin/sh\n\
         echo '0: {\"node\":\"node1\",\"failures\":[],\"attempts\":1}'\n\
         echo '1: {\"node\":\"node2\",\"failures\":[{\"check\":\"nics\",\"problem\":\"eth3 is down\",\"fix\":\"ip link set eth3 up\"}],\"attempts\":1}'\n"
            .into(),
    );
    let state = dir.path().join("node2.drained");
    script(
        "scontrol",
        format!(
            "#!/bin/sh\n\
             case \"$1 $2\" in\n\
             'update nodename=node2') echo \"$4\" > {state} ;;\n\
             'show node') if [ -f {state} ]; then echo \"NodeName=$3 State=IDLE+DRAIN Reason=$(cut -d= -f2- {state})\"; \
             else echo \"NodeName=$3 State=IDLE\"; fi ;;\n\
             *) exit 1 ;;\n\
             esac\n",
            state = state.display()
        ),
    );
    let cwd = dir.path().join("work");
    std::fs::create_dir(&cwd).expect("mkdir");
    let mut cmd = gpudirect_without(&["GPUDIRECT_DB", "SLURM_HOSTFILE", "GPUDIRECT_CONFIG"]);
    cmd.current_dir(&cwd)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_JOB_NODELIST", "node[1-2]")
        .arg("--db")
        .arg(dir.path().join("h.sqlite"))
        .args(["vet", "--budget", "10s", "--need", "1", "--drain", "--json"])
        .arg("--nccl-tests-dir")
        .arg(dir.path());
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let actions: Vec<&str> = report["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(
        actions.contains(
            &"drained node2 (Slurm shows IDLE+DRAIN): gpudirect vet: nics: eth3 is down (ip link set eth3 up)"
        ),
        "{actions:?}"
    );
    assert!(!actions.iter().any(|a| a.contains('{')), "{actions:?}");
    assert!(
        stderr(&out).contains("gpudirect vet: drained node2 (Slurm shows IDLE+DRAIN)"),
        "{}",
        stderr(&out)
    );
}
