//! The command line as written: clap definitions only, no work.
//!
//! Adding a subcommand: add a variant to [`Command`] whose payload is the `Args` struct of a
//! new module (one module per subcommand, e.g. `import.rs` with `ImportArgs` and
//! `pub fn run(args: &ImportArgs, globals: &Globals) -> anyhow::Result<()>`), then one arm
//! in `dispatch` in `main.rs`.

use std::path::PathBuf;

use clap::{ArgAction, Parser, Subcommand};

use crate::history_cmd::compare::CompareArgs;
use crate::history_cmd::export::ExportArgs;
use crate::history_cmd::list::HistoryArgs;
use crate::history_cmd::show::ShowArgs;
use crate::hostfile::HostfileArgs;
use crate::import::ImportArgs;
use crate::probe_cmd::ProbeArgs;
use crate::run_cmd::RunArgs;

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
    /// Run the nccl-tests matrix (collectives x node counts x GPUs x variants), check every
    /// cell (exit code, #wrong, rows, transport used) and record it in the history.
    Run(Box<RunArgs>),
    /// Show what every task of the allocation really gets (variables, CPUs, GPUs, NICs)
    /// and name the nodes and ranks that differ from the profile or from each other.
    Probe(ProbeArgs),
    /// Write an HTML report with plots (busbw by size against the baseline, the pair heat
    /// map, nodes over time) and print a verdict table.
    Report(crate::report_cmd::ReportArgs),
    /// Validate every node and link: concurrent rounds of pairs, suspects re-paired with
    /// good nodes, slow nodes and bad links named (exit 0 healthy, 1 degraded, 2 failed).
    Validate(crate::validate_cmd::ValidateArgs),
    /// Admin tools for the plugin's config: list, show, check, explain.
    Profiles(crate::profiles::ProfilesArgs),
    /// List recorded runs, or one node's busbw over time (--node) with its trend.
    History(HistoryArgs),
    /// Show one run: where, when, versions, findings, environment, every row (--raw: the output).
    Show(ShowArgs),
    /// Compare a run with another or with a baseline, size by size; exit 1 on a regression.
    Compare(CompareArgs),
    /// Export result rows with their run's metadata as CSV, JSON or JSON Lines.
    Export(ExportArgs),
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

/// The CLI reference (`docs/cli.md`), rendered from the clap definitions: every
/// subcommand's `--help`. A test keeps the file in step with the code.
#[cfg(test)]
pub fn cli_reference() -> String {
    use clap::CommandFactory;
    // Fixed width, and no environment values: the file must not depend on who renders it.
    let stable = |c: clap::Command| c.term_width(100).mut_args(|a| a.hide_env_values(true));
    let mut root = stable(Cli::command());
    let mut out = String::from(
        "# `gpudirect` command reference\n\nGenerated from the code by `GPUDIRECT_BLESS=1 cargo test -p gpudirect cli_reference`;\na test fails when this file and `--help` disagree.\n\n",
    );
    out.push_str(&format!(
        "## gpudirect\n\n```text\n{}\n```\n",
        root.render_long_help()
    ));
    let names: Vec<String> = root
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    for name in names {
        let Some(sub) = root.find_subcommand_mut(&name) else {
            continue;
        };
        let mut sub = sub
            .clone()
            .term_width(100)
            .bin_name(format!("gpudirect {name}"));
        out.push_str(&format!(
            "\n## gpudirect {name}\n\n```text\n{}\n```\n",
            sub.render_long_help()
        ));
        let nested: Vec<String> = sub
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .filter(|n| n != "help")
            .collect();
        for inner in nested {
            if let Some(s) = sub.find_subcommand_mut(&inner) {
                let mut s = s
                    .clone()
                    .term_width(100)
                    .bin_name(format!("gpudirect {name} {inner}"));
                out.push_str(&format!(
                    "\n### gpudirect {name} {inner}\n\n```text\n{}\n```\n",
                    s.render_long_help()
                ));
            }
        }
    }
    // `[env: NAME=value]` shows the renderer's environment: keep the name only.
    out.lines()
        .map(|line| match (line.find("[env: "), line.rfind(']')) {
            (Some(start), Some(end)) if end > start => {
                let inner = &line[start + 6..end];
                let name = inner.split('=').next().unwrap_or(inner);
                format!("{}[env: {name}]{}\n", &line[..start], &line[end + 1..])
            }
            _ => format!("{line}\n"),
        })
        .collect()
}

#[cfg(test)]
mod reference_tests {
    #[test]
    fn cli_reference_is_up_to_date() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
        let want = super::cli_reference();
        if std::env::var_os("GPUDIRECT_BLESS").is_some() {
            std::fs::write(&path, &want).expect("write docs/cli.md");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/cli.md is stale: run GPUDIRECT_BLESS=1 cargo test -p gpudirect cli_reference"
        );
    }
}
