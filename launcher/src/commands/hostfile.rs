//! `gpudirect hostfile`: turn an allocation (or a hostlist) into a hostfile. The request,
//! the entries and the formats are [`gpudirect::hostfile`]'s; only [`run`] touches the
//! environment, `scontrol` and the output file.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use gpudirect::hostfile::{check_size, entries, render, Format, Request};
use gpudirect_core::hostlist;

use super::{Ctx, ExitStatus};
use gpudirect::output::emit;

/// Arguments of `gpudirect hostfile`.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:\n  \
    # inside salloc/sbatch (uses SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE):\n  \
    gpudirect hostfile > hostfile && mpirun --hostfile hostfile ./all_reduce_perf_mpi\n  \
    gpudirect hostfile --format slurm -o tasks.txt   # for SLURM_HOSTFILE=tasks.txt srun -m arbitrary\n  \
    # anywhere:\n  \
    gpudirect hostfile --nodelist 'gpu[01-04]' --slots 8 --format mpich\n  \
    gpudirect hostfile --nodelist 'a3h-[0001-0003]' --slots '8(x2),4'")]
pub struct HostfileArgs {
    /// Nodes as a Slurm hostlist, e.g. `gpu[01-04]` or `rack[1-2]-node[01-08],login`.
    ///
    /// Default: $SLURM_JOB_NODELIST (set inside an allocation).
    #[arg(long, value_name = "EXPR")]
    pub nodelist: Option<String>,

    /// Slots (tasks) per node: one number for every node (`8`), or one count per node in
    /// SLURM_TASKS_PER_NODE syntax (`8(x2),4` = 8, 8, 4).
    ///
    /// Default: $SLURM_TASKS_PER_NODE when the node list comes from $SLURM_JOB_NODELIST,
    /// otherwise 1.
    #[arg(long, value_name = "N|LIST")]
    pub slots: Option<String>,

    /// Output dialect: openmpi (`host slots=N`), mpich (`host:N`), hosts (one name per
    /// line), slurm (one line per task, for SLURM_HOSTFILE).
    #[arg(long, value_enum, default_value_t = Format::Openmpi)]
    pub format: Format,

    /// Write to FILE instead of stdout. The file is replaced atomically (written beside it,
    /// then renamed), so a failure never leaves half a hostfile.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Expand the node list with `scontrol show hostnames EXPR` (Slurm's own parser)
    /// instead of the built-in one. Needs Slurm's scontrol on PATH.
    #[arg(long)]
    pub via_scontrol: bool,
}

/// Write `contents` to `path` through a temporary file in the same directory and a rename,
/// so readers see the old file or the whole new one, never a part.
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<()> {
    let file_name = path
        .file_name()
        .with_context(|| format!("output path `{}` does not name a file", path.display()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp_name = OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| -> Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("cannot create `{}`", tmp.display()))?;
        file.write_all(contents)
            .and_then(|()| file.sync_all())
            .with_context(|| format!("cannot write `{}`", tmp.display()))?;
        fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename `{}` to `{}`", tmp.display(), path.display()))
    })();
    if result.is_err() {
        // Best effort: the error that matters is the one already in `result`.
        let _ = fs::remove_file(&tmp);
    }
    result.with_context(|| format!("could not write the hostfile to `{}`", path.display()))
}

/// `gpudirect hostfile`.
pub fn run(args: &HostfileArgs, _ctx: &Ctx) -> Result<ExitStatus> {
    let request = Request::resolve(args.nodelist.as_deref(), args.slots.as_deref(), |name| {
        std::env::var(name).ok()
    })?;
    tracing::debug!(?request, "hostfile request");
    let hosts = if args.via_scontrol {
        // Slurm 22.05's parser guesses at malformed input (`n[3-` gives `n]`): check the
        // expression's shape ourselves first, then let scontrol expand it.
        hostlist::count(&request.nodelist).with_context(|| {
            format!(
                "invalid node list in {} `{}` (not passed to scontrol)",
                request.nodelist_origin, request.nodelist
            )
        })?;
        gpudirect::slurm::show_hostnames(&request.nodelist)?
    } else {
        hostlist::expand(&request.nodelist).with_context(|| {
            format!(
                "invalid node list in {} `{}`",
                request.nodelist_origin, request.nodelist
            )
        })?
    };
    let entries = entries(&request, hosts)?;
    check_size(args.format, &entries)?;
    let text = render(args.format, &entries);
    match &args.output {
        Some(path) => write_atomically(path, text.as_bytes())?,
        None => emit(&text).context("cannot write the hostfile to stdout")?,
    }
    Ok(ExitStatus::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_cleans_up() {
        let tmp = tempfile::Builder::new()
            .prefix("gpudirect-hostfile-unit-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let path = dir.join("hosts");
        write_atomically(&path, b"old\n").unwrap();
        write_atomically(&path, b"new\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
        let names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [OsString::from("hosts")]);
        // A directory in the way: the rename fails, the temporary file is removed.
        let blocked = dir.join("sub");
        fs::create_dir_all(blocked.join("x")).unwrap();
        assert!(write_atomically(&blocked, b"data").is_err());
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, [OsString::from("hosts"), OsString::from("sub")]);
        assert!(write_atomically(&dir.join("missing/hosts"), b"x").is_err());
    }
}
