//! What vet hands to the job's next step, in one folder (`--out DIR`):
//! - `good.hosts`: the good nodes, one per line (a hostfile; also `SLURM_HOSTFILE`);
//! - `exclude`: the nodes not to use (bad and unchecked), one hostlist, for `srun --exclude`;
//! - `vet.env`: `export` lines to `source`: `GPUDIRECT_GOOD_NODES`, `GPUDIRECT_BAD_NODES`,
//!   `GPUDIRECT_UNCHECKED_NODES`, their counts, `GPUDIRECT_EXCLUDE`, `SLURM_HOSTFILE`, and
//!   after `--shrink` the variables Slurm resets for a resized job;
//! - `vet.json`: the whole report.
//!
//! Each file is written whole to a temporary name and renamed, so a reader never sees half.
//!
//! The folder is the caller's alone (security review T3): vet makes it fresh with mode 0700,
//! or takes an existing one only when the caller owns it with no access for group or others,
//! and only where nobody else can rename it or a folder above it. Whoever `source`s
//! `vet.env` then runs what vet wrote, never what another user put there.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::{nodes_that_are, NodeVet, Standing};
use crate::runner::shell_quote;
use gpudirect_core::hostlist::compress;

/// The files vet wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Written {
    /// `good.hosts`.
    pub hostfile: PathBuf,
    /// `exclude`.
    pub exclude: PathBuf,
    /// `vet.env`.
    pub env: PathBuf,
    /// `vet.json`.
    pub json: PathBuf,
}

/// The `vet.env` lines (pure): the node lists and counts, `SLURM_HOSTFILE`, then the
/// resized job's variables (`unset` for those Slurm unsets).
pub fn env_lines(
    vets: &[NodeVet],
    hostfile: &Path,
    resized: &[(String, Option<String>)],
) -> Vec<String> {
    let list = |s: Standing| compress(&nodes_that_are(vets, s));
    let count = |s: Standing| vets.iter().filter(|v| v.standing == s).count();
    let excluded: Vec<String> = vets
        .iter()
        .filter(|v| v.standing != Standing::Good)
        .map(|v| v.node.clone())
        .collect();
    let mut lines = vec![
        ("GPUDIRECT_GOOD_NODES".to_string(), list(Standing::Good)),
        (
            "GPUDIRECT_GOOD_COUNT".into(),
            count(Standing::Good).to_string(),
        ),
        ("GPUDIRECT_BAD_NODES".into(), list(Standing::Bad)),
        (
            "GPUDIRECT_BAD_COUNT".into(),
            count(Standing::Bad).to_string(),
        ),
        (
            "GPUDIRECT_UNCHECKED_NODES".into(),
            list(Standing::Unchecked),
        ),
        (
            "GPUDIRECT_UNCHECKED_COUNT".into(),
            count(Standing::Unchecked).to_string(),
        ),
        ("GPUDIRECT_EXCLUDE".into(), compress(&excluded)),
        ("SLURM_HOSTFILE".into(), hostfile.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| format!("export {k}={}", shell_quote(&v)))
    .collect::<Vec<_>>();
    for (name, value) in resized {
        lines.push(match value {
            Some(v) => format!("export {name}={}", shell_quote(v)),
            None => format!("unset {name}"),
        });
    }
    lines
}

/// Why vet will not write into a folder.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    /// The folder, or one above it, can be changed by another user.
    #[error("{dir}: {problem}; vet writes vet.env, which is sourced, only into a folder that is yours alone: remove or rename it, or name a new folder with --out (vet makes it with mode 0700)")]
    Unsafe {
        /// The folder given.
        dir: PathBuf,
        /// What is wrong, and where.
        problem: String,
    },
    /// The folder could not be made or read.
    #[error("{dir}: {source}")]
    Io {
        /// The folder given.
        dir: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Makes `dir` for vet's files, or checks the one there (before the vet runs, so a folder
/// it must refuse costs no time): made fresh with mode 0700 (`mkdir` fails on an existing
/// name, so a folder planted first is never taken as new), or, when it exists, a real
/// folder (not a symlink) owned by the effective uid with mode 0700. Every folder above it
/// must be one that nobody but root and the caller can rename entries in: owned by one of
/// them, and not writable by group or others unless sticky (as /tmp). Missing folders
/// above it are made first. Returns its absolute path.
pub fn private_dir(dir: &Path) -> Result<PathBuf, OutDirError> {
    let io = |source| OutDirError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    let unsafe_dir = |problem: String| OutDirError::Unsafe {
        dir: dir.to_path_buf(),
        problem,
    };
    let absolute = std::path::absolute(dir).map_err(io)?;
    let parent = absolute.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent).map_err(io)?;
    let me = nix::unistd::geteuid().as_raw();
    match std::fs::DirBuilder::new().mode(0o700).create(&absolute) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(&absolute).map_err(io)?;
            if let Some(problem) = not_private(&meta, me) {
                return Err(unsafe_dir(problem));
            }
        }
        Err(e) => return Err(io(e)),
    }
    // The real folders above it: a symlink on the way is judged by where it leads, and
    // the folder holding the link by its own rule below.
    let real_parent = parent.canonicalize().map_err(io)?;
    for above in parent.ancestors().chain(real_parent.ancestors()) {
        let meta = std::fs::metadata(above).map_err(io)?;
        if let Some(problem) = others_can_rename_in(&meta, me) {
            return Err(unsafe_dir(format!(
                "the folder {} above it {problem}, so another user could put their own folder in its place",
                above.display()
            )));
        }
    }
    Ok(absolute)
}

/// What makes an existing output folder not the caller's alone.
fn not_private(meta: &std::fs::Metadata, me: u32) -> Option<String> {
    if meta.file_type().is_symlink() {
        return Some("is a symbolic link".into());
    }
    if !meta.is_dir() {
        return Some("exists and is not a folder".into());
    }
    if meta.uid() != me {
        return Some(format!(
            "already exists, owned by uid {}, not you (uid {me})",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    (mode & 0o077 != 0).then(|| format!("already exists with mode {mode:o}, not 700"))
}

/// Whether someone other than root and `me` can rename entries of this folder.
fn others_can_rename_in(meta: &std::fs::Metadata, me: u32) -> Option<String> {
    let mode = meta.mode() & 0o7777;
    if meta.uid() != 0 && meta.uid() != me {
        return Some(format!("is owned by uid {}", meta.uid()));
    }
    let sticky = mode & 0o1000 != 0;
    (mode & 0o022 != 0 && !sticky)
        .then(|| format!("is writable by group or others (mode {mode:o}) and has no sticky bit"))
}

/// Writes the four files into `dir`, a folder [`private_dir`] made or checked.
pub fn write(
    dir: &Path,
    vets: &[NodeVet],
    resized: &[(String, Option<String>)],
    report: &serde_json::Value,
) -> std::io::Result<Written> {
    let dir = private_dir(dir).map_err(std::io::Error::other)?;
    let written = Written {
        hostfile: dir.join("good.hosts"),
        exclude: dir.join("exclude"),
        env: dir.join("vet.env"),
        json: dir.join("vet.json"),
    };
    let good = nodes_that_are(vets, Standing::Good);
    let mut hosts = good.join("\n");
    if !hosts.is_empty() {
        hosts.push('\n');
    }
    crate::output::replace_file(&written.hostfile, hosts.as_bytes())?;
    let excluded: Vec<String> = vets
        .iter()
        .filter(|v| v.standing != Standing::Good)
        .map(|v| v.node.clone())
        .collect();
    crate::output::replace_file(
        &written.exclude,
        format!("{}\n", compress(&excluded)).as_bytes(),
    )?;
    let mut env = String::from("# Written by gpudirect vet: source it in the job's next step.\n");
    for line in env_lines(vets, &written.hostfile, resized) {
        env.push_str(&line);
        env.push('\n');
    }
    crate::output::replace_file(&written.env, env.as_bytes())?;
    let mut json = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    json.push(b'\n');
    crate::output::replace_file(&written.json, &json)?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vets() -> Vec<NodeVet> {
        let v = |n: &str, standing| NodeVet {
            node: n.into(),
            standing,
            why: Vec::new(),
        };
        vec![
            v("node1", Standing::Good),
            v("node2", Standing::Good),
            v("node3", Standing::Bad),
            v("node4", Standing::Good),
            v("node5", Standing::Unchecked),
        ]
    }

    #[test]
    fn the_env_file_lists_each_standing_and_the_resized_job() {
        let lines = env_lines(
            &vets(),
            Path::new("/tmp/v/good.hosts"),
            &[
                ("SLURM_NNODES".into(), Some("3".into())),
                ("SLURM_NPROCS".into(), None),
            ],
        );
        assert_eq!(
            lines,
            [
                "export GPUDIRECT_GOOD_NODES='node[1-2,4]'",
                "export GPUDIRECT_GOOD_COUNT=3",
                "export GPUDIRECT_BAD_NODES=node3",
                "export GPUDIRECT_BAD_COUNT=1",
                "export GPUDIRECT_UNCHECKED_NODES=node5",
                "export GPUDIRECT_UNCHECKED_COUNT=1",
                "export GPUDIRECT_EXCLUDE='node[3,5]'",
                "export SLURM_HOSTFILE=/tmp/v/good.hosts",
                "export SLURM_NNODES=3",
                "unset SLURM_NPROCS",
            ]
        );
    }

    #[test]
    fn the_files_hold_the_good_nodes_and_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("vet");
        let w = write(&out, &vets(), &[], &serde_json::json!({"ok": true})).unwrap();
        assert_eq!(
            std::fs::read_to_string(&w.hostfile).unwrap(),
            "node1\nnode2\nnode4\n"
        );
        assert_eq!(std::fs::read_to_string(&w.exclude).unwrap(), "node[3,5]\n");
        let env = std::fs::read_to_string(&w.env).unwrap();
        assert!(env.contains("export GPUDIRECT_GOOD_COUNT=3\n"), "{env}");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&w.json).unwrap()).unwrap();
        assert_eq!(json["ok"], true);
    }
}
