//! The command line: [`Cli`] as written, one module per subcommand (its `Args` and its
//! `run`), the context every command gets ([`Ctx`]) and the one exit-status contract
//! ([`ExitStatus`]).
//!
//! Adding a subcommand: a module here with `pub struct FooArgs` (clap derive, a doc comment
//! on every argument and examples in `after_help`) and
//! `pub fn run(args: &FooArgs, ctx: &Ctx) -> anyhow::Result<ExitStatus>`, then a variant of
//! [`Command`] and one arm in [`dispatch`]. Subcommands import from this module and from the
//! `gpudirect` library, never from each other; what two of them share lives in [`args`] or in
//! the library.

// Commands are thin: no function here is over 150 lines (clippy.toml), so that what a
// command does reads as flags, a loop over the library and printing.
#![warn(clippy::too_many_lines)]

pub mod agent;
pub mod args;
pub mod compare;
pub mod epilog;
pub mod export;
pub mod generate;
pub mod hang;
pub mod health;
pub mod history;
pub mod hostfile;
pub mod import;
pub mod log;
pub mod probe;
pub mod profiles;
pub mod report;
pub mod run;
pub mod show;
pub mod sweep;
pub mod tune;
pub mod validate;
pub mod vet;
pub mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{ArgAction, Parser, Subcommand};
use gpudirect::history::{db_path_from_env, locate_db, History, HistoryError};
use gpudirect::validate::judging::Health;

/// Runs, checks and records nccl-tests on Slurm allocations.
#[derive(Debug, Parser)]
#[command(
    name = "gpudirect",
    // `gpudirect 0.1.0 (built for Slurm 22.05.8)`: launcher/build.rs reads the headers.
    version = concat!(env!("CARGO_PKG_VERSION"), " (built for ", env!("GPUDIRECT_BUILT_FOR"), ")"),
    propagate_version = true,
    after_help = "Examples:\n  \
        gpudirect hostfile                       # inside salloc/sbatch: Open MPI hostfile on stdout\n  \
        gpudirect run -c all_reduce -N 2 -G 8    # the nccl-tests matrix, checked and recorded\n  \
        gpudirect probe --gpudirect tcpx         # did the settings reach every task?\n  \
        gpudirect validate --report out/         # which node or link is slow?\n  \
        gpudirect history                        # recorded runs, newest first\n  \
        gpudirect compare 41 --baseline          # as fast as before?\n  \
        gpudirect profiles explain tcpx --node a3-0001 --local-rank 3\n\n\
        Exit status (every command): 0 ok; 1 ran and found a problem (degraded node, \
        regression, differing task, config error); 2 runs failed; 3 could not run (bad \
        option or input, no allocation, no history); 4 too few good nodes (vet); 130 interrupted."
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

/// The subcommands; each payload is defined in its own module.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a hostfile (Open MPI, MPICH, plain or SLURM_HOSTFILE) for an allocation.
    Hostfile(hostfile::HostfileArgs),
    /// Record existing nccl-tests outputs (text or -J JSON) in the history.
    Import(import::ImportArgs),
    /// Run the nccl-tests matrix (collectives x node counts x GPUs x variants), check every
    /// cell (exit code, #wrong, rows, transport used) and record it in the history.
    Run(Box<run::RunArgs>),
    /// Show what every task of the allocation really gets (variables, CPUs, GPUs, NICs)
    /// and name the nodes and ranks that differ from the profile or from each other.
    Probe(probe::ProbeArgs),
    /// Which rank a hung job waits for: NCCL's RAS asked on every node of the job, a few
    /// times, each rank mapped to its node and task.
    Hang(hang::HangArgs),
    /// Read a job's NCCL log: which transport and NIC each communicator really used, per
    /// rank and node, against the profile; NCCL errors, timeouts and watchdog lines.
    Log(log::LogArgs),
    /// Write an HTML report with plots (busbw by size against the baseline, the pair heat
    /// map, the node x rail map of rail runs, nodes over time) and print a verdict table.
    Report(report::ReportArgs),
    /// Validate every node and link: concurrent rounds of pairs, suspects re-paired with
    /// good nodes, slow nodes and bad links named (exit 0 healthy, 1 degraded, 2 failed).
    Validate(Box<validate::ValidateArgs>),
    /// Vet the job's own nodes before it trains (node checks, then pairs, in a time
    /// budget): hand the good ones to the next step, shrink or requeue (exit 4: too few).
    Vet(Box<vet::VetArgs>),
    /// Check this node as its profile requires (NICs, speeds, libraries, GPUs), fit to be
    /// Slurm's HealthCheckProgram: drain it on a failure, return it when it passes.
    Health(health::HealthArgs),
    /// Find the NCCL settings that make this fabric fastest: sweep knobs against the default
    /// in interleaved rounds, judge per size band by the noise, write the winner as a
    /// profile overlay (--write).
    Tune(Box<tune::TuneArgs>),
    /// Admin tools for the plugin's config: list, show, check, explain.
    Profiles(profiles::ProfilesArgs),
    /// List recorded runs, or one node's busbw over time (--node) with its trend.
    History(history::HistoryArgs),
    /// Show one run: where, when, versions, findings, environment, every row (--raw: the output).
    Show(show::ShowArgs),
    /// Compare a run with another or with a baseline, size by size; exit 1 on a regression.
    Compare(compare::CompareArgs),
    /// Export result rows with their run's metadata as CSV, JSON or JSON Lines.
    Export(export::ExportArgs),
    /// What slows a running job: its NCCL Inspector dumps judged per communicator (a late
    /// rank, a collective below its baseline, a rank that wrote nothing).
    Watch(watch::WatchArgs),
    /// The admin's periodic sweep (scrontab, as root): test the quarantined nodes with
    /// healthy idle partners, return those that pass, drain those that keep failing.
    Sweep(Box<sweep::SweepArgs>),
    /// What slurmd's Epilog runs when a job ends (the shipped wrapper): removes the job's
    /// telemetry folder from the node.
    Epilog(epilog::EpilogArgs),
    /// Write man pages or shell completions (for packages: scripts/package).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
    /// The per-node half of probe, hang, vet and validate --test wiring, which srun starts
    /// on each node ([`agent`]).
    #[command(hide = true)]
    Agent(agent::AgentArgs),
}

/// What every command gets besides its own arguments.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    /// `--db` / `GPUDIRECT_DB`, unresolved: `None` means "use the default location".
    pub db: Option<PathBuf>,
    /// `-v` given this many times (also read by `log` for its details).
    pub verbose: u8,
}

impl Ctx {
    /// The history file to write to, its folder created (commands that record runs).
    pub fn db_path(&self) -> Result<PathBuf> {
        Ok(db_path_from_env(self.db.as_deref())?)
    }

    /// Opens the history for reading. Unlike recording, nothing is created: a missing file
    /// (often a typo in `--db`) is an error that says how a history comes to exist.
    pub fn open_history(&self) -> Result<History> {
        let path = locate_db(self.db.as_deref())?;
        match History::open_existing(&path) {
            Ok(h) => Ok(h),
            Err(HistoryError::Missing { path }) => anyhow::bail!(
                "no history at {}: nothing was recorded there yet; record runs with \
                 `gpudirect import FILE...` (existing nccl-tests outputs) or `gpudirect run`, \
                 or point --db / GPUDIRECT_DB at an existing history",
                path.display()
            ),
            Err(e) => Err(e).context("opening the history"),
        }
    }
}

/// How a command ended: the one meaning of each exit code, for every command (written in
/// `gpudirect --help` and docs/cli.md). Health checks and scripts read it. Ordered from
/// best to worst, so `max` of two is the worse (an interruption outranks everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExitStatus {
    /// 0: the command did its work and found nothing wrong.
    Ok,
    /// 1: it ran and found a problem: a degraded node or link (`validate`), a regression
    /// (`compare`), a task that differs (`probe`), an error in the config (`profiles check`).
    Problem,
    /// 2: runs it started failed (`run`: a cell failed; `validate`: pairs failed).
    Failed,
    /// 3: it could not do its work: a bad option or input, no allocation, no history.
    CouldNotRun,
    /// 4: `vet` found fewer good nodes than the job needs (`--need`); with `--requeue` the
    /// job was requeued with its bad nodes excluded.
    TooFewNodes,
    /// 130: stopped by Ctrl-C (SIGINT) or SIGTERM; what finished was kept.
    Interrupted,
}

impl ExitStatus {
    /// Every status, best first.
    pub const ALL: [ExitStatus; 6] = [
        ExitStatus::Ok,
        ExitStatus::Problem,
        ExitStatus::Failed,
        ExitStatus::CouldNotRun,
        ExitStatus::TooFewNodes,
        ExitStatus::Interrupted,
    ];

    /// The process exit code: the only place a status becomes a number. `main` exits with
    /// it, and a verdict line that names the code prints it (never a code of its own).
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Ok => 0,
            ExitStatus::Problem => 1,
            ExitStatus::Failed => 2,
            ExitStatus::CouldNotRun => 3,
            ExitStatus::TooFewNodes => 4,
            ExitStatus::Interrupted => 130,
        }
    }

    /// The status a `gpudirect` child exited with (`run --submit`'s inner runs), read back
    /// through [`code`](Self::code); `None` for a code no status has.
    pub fn from_code(code: i32) -> Option<ExitStatus> {
        Self::ALL.into_iter().find(|s| i32::from(s.code()) == code)
    }

    /// A validation's status: its health, raised to [`Failed`](Self::Failed) when a drain,
    /// a resume or an `--on-drain` command did not work (one that could not run stays
    /// [`CouldNotRun`](Self::CouldNotRun)). Pure.
    pub fn of_validation(health: Health, actions_failed: bool) -> ExitStatus {
        match (health, actions_failed) {
            (Health::CouldNotRun, _) => ExitStatus::CouldNotRun,
            (Health::Failed, _) | (_, true) => ExitStatus::Failed,
            (Health::Healthy, false) => ExitStatus::Ok,
            (Health::Degraded, false) => ExitStatus::Problem,
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> ExitCode {
        ExitCode::from(status.code())
    }
}

/// One arm per subcommand; each calls that module's `run`.
pub fn dispatch(command: Command, ctx: &Ctx) -> Result<ExitStatus> {
    match command {
        Command::Hostfile(args) => hostfile::run(&args, ctx),
        Command::Import(args) => import::run(&args, ctx),
        Command::Probe(args) => probe::run(&args, ctx),
        Command::Hang(args) => hang::run(&args, ctx),
        Command::Log(args) => log::run(&args, ctx),
        Command::Run(args) => run::run(&args, ctx),
        Command::Health(args) => health::run(&args, ctx),
        Command::Profiles(args) => profiles::run(&args, ctx),
        Command::Report(args) => report::run(&args, ctx),
        Command::Validate(args) => validate::run(&args, ctx),
        Command::Vet(args) => vet::run(&args, ctx),
        Command::Tune(args) => tune::run(&args, ctx),
        Command::History(args) => history::run(&args, ctx),
        Command::Show(args) => show::run(&args, ctx),
        Command::Compare(args) => compare::run(&args, ctx),
        Command::Export(args) => export::run(&args, ctx),
        Command::Watch(args) => watch::run(&args, ctx),
        Command::Sweep(args) => sweep::run(&args, ctx),
        Command::Epilog(args) => epilog::run(&args, ctx),
        Command::Generate(args) => generate::run(&args),
        Command::Agent(args) => agent::run(args, ctx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_status_has_one_code_and_reads_back() {
        let codes: Vec<u8> = ExitStatus::ALL.iter().map(|s| s.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 130]);
        for status in ExitStatus::ALL {
            assert_eq!(ExitStatus::from_code(status.code().into()), Some(status));
        }
        assert_eq!(ExitStatus::from_code(5), None);
        assert_eq!(ExitStatus::from_code(-1), None);
    }

    #[test]
    fn a_failed_action_raises_a_validation_to_failed_but_not_one_that_could_not_run() {
        use ExitStatus::*;
        assert_eq!(ExitStatus::of_validation(Health::Healthy, false), Ok);
        assert_eq!(ExitStatus::of_validation(Health::Degraded, false), Problem);
        assert_eq!(ExitStatus::of_validation(Health::Degraded, true), Failed);
        assert_eq!(ExitStatus::of_validation(Health::Healthy, true), Failed);
        assert_eq!(ExitStatus::of_validation(Health::Failed, false), Failed);
        assert_eq!(
            ExitStatus::of_validation(Health::CouldNotRun, true),
            CouldNotRun
        );
    }

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

/// The rules every command follows, at the top of `docs/cli.md`.
#[cfg(test)]
const RULES: &str = "\
## Rules every command follows

- **Exit status.** 0: done, nothing wrong. 1: it ran and found a problem (a degraded node or
  link in `validate`, a regression in `compare`, a task that differs in `probe`, an error in
  `profiles check`). 2: runs it started failed (`run`: a cell failed; `validate`: pairs
  failed). 3: it could not do its work (a bad option or input, no allocation, no history);
  stderr says why. 4: `vet` found fewer good nodes than the job needs (`--need`; with
  `--requeue` the job was requeued without its bad nodes). 130: interrupted (Ctrl-C or
  SIGTERM); what finished was kept. The code a
  line of output names (`verdict: Degraded (exit 1)`) is the code the command exits with:
  one mapping serves both. In `validate` (every `--test`, `--per-rail`, `--gpus`), a drain,
  a resume or an `--on-drain` command that did not work makes the status 2, and the verdict
  line says so.
- **Sizes** (`-b`, `-e`, `--size`, `--min-size`, `--band-split`, `min_bytes`/`max_bytes` in a
  matrix file) are bytes in powers of 1024, as nccl-tests reads them: `8`, `64K`, `8G`,
  `8GiB`, `8 GiB` and `8589934592` are all accepted; `GB` is refused (it reads as 10^9).
- **Durations** (`--timeout`, `--grace`, `timeout` in a matrix file) are seconds (`90`) or a
  number with a unit: `90s`, `10m`, `1h30m`, `7d`, `2w`.
- **Times** (`--since`) are an age in the same form as durations, or an RFC 3339 time or date
  (`2026-11-29`, `2026-11-29T22:10:07Z`, any offset).
- **Tolerances** (`--tolerance`) are percent in every command: `5` or `5%`. A value between
  0 and 1 without `%` is refused, since it is almost always an old fraction (`0.1` for 10 %).
  `validate`'s default for nccl-tests pairs, 10 %, is the planner's own default, the one
  the simulator measures (docs/validation.md).
- **A recorded run** is recorded the same way by `run`, `tune`, `validate` and
  `health --quick-nccl` (one path, `cell::exec`): the same output gives the same rows,
  status, transport and findings; its env holds the variant's variables, the command's
  marks and `GPUDIRECT_MODE` when a `--gpudirect` mode applied; its cluster is `--cluster`
  (or `GPUDIRECT_CLUSTER`), else `$SLURM_CLUSTER_NAME`, and its job `$SLURM_JOB_ID`.
- **Could not start.** A cell of `run`, `tune`, `validate` or `vet` that shows no sign of
  NCCL (no `Init COMPLETE`, nor nccl-tests' column header) by its `--startup-timeout`
  (default 60 s), or by its `--timeout`, never reached NCCL: its launch hung (srun's PMIx
  wire-up, MPI_Init, Open MPI or PMIx talking over a data NIC), which says nothing of its
  nodes. It is stopped then and run once more as a step of its own; if that does not start
  either, it is reported `could not start`: the first finding of its record (whose status
  is `timeout`, the history's word for a stopped run), `could_not_start` as its class in a
  pair's node results and as a node's verdict in `validate` and `vet` (`--json`: `\"kind\":
  \"could_not_start\"`). It is never counted slow or failed against a node or a rail: such
  a node is not drained, not marked in Slurm's Extra, and `vet` leaves it unchecked. What
  to do: check the launch, not the fabric: that `srun --mpi=pmix` works (`srun --mpi=list`,
  `gpudirect-mpi check`), and that Open MPI's and PMIx's own TCP traffic stays on the
  control NIC (Open MPI's `oob_tcp_if_include` and `btl_tcp_if_include`, PMIx's
  `ptl_tcp_if_include`: the profile's `socket_ifname`); then run it again. An NCCL `WARN`
  before the init completed (`Bootstrap : no socket interface found`) is NCCL's word on the
  node, and is judged a failure as before.
- **Comparable runs.** A baseline is made only of earlier `ok` runs with the same
  collective, cluster, node count, total ranks (GPUs) and variant, measurements with
  measurements (a stand-in replay is compared only with replays): in `compare --baseline`,
  `report` (its verdict, and the band it draws, per data type), `validate` (its pair runs: variant `validate:MODE`) and `health --quick-nccl`
  (variant `health`, one node, its GPUs). A run of another variant or GPU count is never in
  it.
- **Drains** carry their tool's tag, `gpudirect health:` or `gpudirect validate:`, and each
  tool returns to service only its own: health never resumes what validate drained, nor
  validate health's, and neither an admin's. The older shared tag `gpudirect:` counts as
  validate's. Control and bidirectional-formatting characters never reach a reason.
- **The `--on-drain` evidence file** has one shape in `health` and `validate`: `node`,
  `reason`, `verdict`, `evidence`, `history` (the node's last 10 runs), `cluster`, `tool`,
  `at`, then what the tool adds (validate: `pairs`; health: `profile`, `failures`,
  `checked`).
- **The busbw of a run** is its out-of-place busbw at its largest size (the in-place figure
  where a run has no out-of-place one), in every command.
- **Output.** Data goes to stdout, notes and progress to stderr; a closed stdout
  (`gpudirect history | head -1`) ends a command quietly with exit 0, as ripgrep does (a
  health check that reads `validate`'s status must keep its stdout open).

";

/// Appends the `--help` of each subcommand of `parent` (which runs as `parent_name`) under
/// a `heading` (`##`), then, `depth` levels down, that of their own subcommands one heading
/// level lower.
#[cfg(test)]
fn push_subcommand_help(
    out: &mut String,
    parent: &clap::Command,
    parent_name: &str,
    heading: &str,
    depth: usize,
) {
    for sub in parent
        .get_subcommands()
        .filter(|s| s.get_name() != "help" && !s.is_hide_set())
    {
        let name = format!("{parent_name} {}", sub.get_name());
        let mut sub = sub.clone().term_width(100).bin_name(&name);
        out.push_str(&format!(
            "\n{heading} {name}\n\n```text\n{}\n```\n",
            sub.render_long_help()
        ));
        if depth > 0 {
            push_subcommand_help(out, &sub, &name, &format!("{heading}#"), depth - 1);
        }
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
    out.push_str(RULES);
    out.push_str(&format!(
        "## gpudirect\n\n```text\n{}\n```\n",
        root.render_long_help()
    ));
    push_subcommand_help(&mut out, &root, "gpudirect", "##", 1);
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
