//! The command line as written: clap definitions only, no work.
//!
//! Adding a subcommand: add a variant to [`Command`] whose payload is the `Args` struct of a
//! new module (one module per subcommand, e.g. `import.rs` with `ImportArgs` and
//! `pub fn run(args: &ImportArgs, globals: &Globals) -> anyhow::Result<()>`), then one arm
//! in `dispatch` in `main.rs`.

use std::path::PathBuf;

use clap::{ArgAction, Parser, Subcommand};

use crate::hostfile::HostfileArgs;
use crate::import::ImportArgs;

/// Runs, checks and records nccl-tests on Slurm allocations.
#[derive(Debug, Parser)]
#[command(
    name = "gpudirect",
    version,
    propagate_version = true,
    after_help = "Examples:\n  \
        gpudirect hostfile                      # inside salloc/sbatch: Open MPI hostfile on stdout\n  \
        gpudirect hostfile --format mpich -o hosts.txt\n  \
        gpudirect hostfile --nodelist 'gpu[01-04]' --slots 8\n  \
        gpudirect -v hostfile --via-scontrol    # expand with Slurm's own scontrol"
)]
pub struct Cli {
    /// SQLite history file. Default: $XDG_DATA_HOME/gpudirect/history.sqlite.
    ///
    /// Accepted before or after the subcommand.
    #[arg(long, global = true, env = "GPUDIRECT_DB", value_name = "PATH")]
    pub db: Option<PathBuf>,

    /// Log more on stderr: -v info (commands run), -vv debug, -vvv trace.
    ///
    /// Without -v, RUST_LOG is honoured when set; otherwise only warnings are shown.
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands; each payload is defined next to its implementation.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a hostfile (Open MPI, MPICH, plain or SLURM_HOSTFILE) for an allocation.
    Hostfile(HostfileArgs),
    /// Record existing nccl-tests outputs (text or -J JSON) in the history.
    Import(ImportArgs),
}

/// Options every subcommand receives, whether it uses them or not.
#[derive(Debug, Clone, Default)]
#[allow(
    dead_code,
    reason = "verbose is for subcommands that print progress detail"
)]
pub struct Globals {
    /// `--db` / `GPUDIRECT_DB`, unresolved: `None` means "use the default location".
    pub db: Option<PathBuf>,
    /// How many `-v` were given.
    pub verbose: u8,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn db_is_global_before_or_after_the_subcommand() {
        let before = Cli::try_parse_from(["gpudirect", "--db", "/x.db", "hostfile"]).unwrap();
        let after = Cli::try_parse_from(["gpudirect", "hostfile", "--db", "/x.db"]).unwrap();
        assert_eq!(before.db, Some(PathBuf::from("/x.db")));
        assert_eq!(after.db, Some(PathBuf::from("/x.db")));
        let verbose = Cli::try_parse_from(["gpudirect", "hostfile", "-vv"]).unwrap();
        assert_eq!(verbose.verbose, 2);
    }
}
