//! Arguments that more than one subcommand takes, defined once and flattened into each.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use gpudirect::history::{RunFilter, RunStatus};
use gpudirect::profile::{Choice, ProfileError};
use gpudirect::units::{duration_arg, since_arg, size_arg};
use gpudirect::validate::rails::PairLaunch;
use gpudirect_core::system::DEFAULT_CONFIG;

/// How each rail pair of `--test rails` runs (validate and vet alike).
#[derive(Debug, Clone, Args)]
pub struct RailPairArgs {
    /// With --test rails: the message size of the bandwidth runs.
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = size_arg)]
    pub message_size: u64,

    /// With --test rails: the MPI program (default: gpudirect-mpi beside this executable).
    #[arg(long, env = "GPUDIRECT_MPI_PROGRAM", value_name = "PATH")]
    pub mpi_program: Option<PathBuf>,

    /// With --test rails: how each pair's two tasks start: `mpirun` (Open MPI's, inside the
    /// allocation, with its own PMIx server), `srun` (one job step, srun --mpi=MPI), or
    /// `auto`: mpirun where the mpirun on PATH is Open MPI's, else srun. Slurm's mpi/pmix
    /// mixes a node's place in the job with its place in the step, so srun's pairs on part
    /// of an allocation can hang or break (seen on 22.05 and 24.11): a healthy NIC then
    /// fails its pairs. mpirun goes around it.
    #[arg(
        long,
        value_enum,
        value_name = "HOW",
        env = "GPUDIRECT_RAILS_LAUNCHER",
        default_value_t = RailsLauncher::Auto
    )]
    pub rails_launcher: RailsLauncher,
}

/// `--rails-launcher`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RailsLauncher {
    /// mpirun where the mpirun on PATH is Open MPI's, else srun.
    Auto,
    /// srun --mpi=MPI, one job step per pair.
    Srun,
    /// Open MPI's mpirun inside the allocation.
    Mpirun,
}

impl RailPairArgs {
    /// How a pair starts, `mpi` being srun's `--mpi` plugin. `auto` asks `mpirun --version`
    /// once, here.
    pub fn launch(&self, mpi: &str) -> PairLaunch {
        let mpirun = match self.rails_launcher {
            RailsLauncher::Auto => gpudirect::validate::rails::mpirun_is_open_mpis(),
            RailsLauncher::Srun => false,
            RailsLauncher::Mpirun => true,
        };
        if mpirun {
            PairLaunch::Mpirun {
                as_root: nix::unistd::geteuid().is_root(),
            }
        } else {
            PairLaunch::Srun { mpi: mpi.into() }
        }
    }
}

/// Which runs a listing or an export covers (the same flags on both).
#[derive(Debug, Clone, Default, Args)]
pub struct FilterArgs {
    /// Only runs of this collective, e.g. `all_reduce` (no `_perf` suffix).
    #[arg(long, value_name = "NAME")]
    pub collective: Option<String>,

    /// Only runs recorded with this cluster name.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,

    /// Only runs that included this node (for `history`: also switches to that node's
    /// busbw over time).
    #[arg(long, value_name = "HOST")]
    pub node: Option<String>,

    /// Only runs of this environment variant, e.g. `tcpx` or `socket`.
    #[arg(long, value_name = "NAME")]
    pub variant: Option<String>,

    /// Only runs recorded with this label (`gpudirect import --label NAME`), exactly.
    #[arg(long, value_name = "NAME")]
    pub label: Option<String>,

    /// Only runs that ended so: ok, wrong, timeout, failed or interrupted.
    #[arg(long, value_name = "STATUS")]
    pub status: Option<RunStatus>,

    /// Only runs at or after this time: an age (`90m`, `36h`, `7d`, `2w`) or an RFC 3339
    /// time or date (`2026-11-29`, `2026-11-29T22:10:07Z`).
    #[arg(long, value_name = "WHEN", value_parser = since_arg)]
    pub since: Option<i64>,

    /// At most this many runs, the newest; 0 means all.
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
}

impl FilterArgs {
    /// The history's filter; `default_limit` applies when `--limit` was not given.
    pub fn to_filter(&self, default_limit: Option<u32>) -> RunFilter {
        RunFilter {
            collective: self.collective.clone(),
            cluster: self.cluster.clone(),
            node: self.node.clone(),
            variant: self.variant.clone(),
            label: self.label.clone(),
            status: self.status,
            since: self.since,
            limit: match self.limit {
                Some(0) => None,
                Some(n) => Some(n),
                None => default_limit,
            },
        }
    }
}

/// `--config`: the admin config, the same flag on every command that reads it.
#[derive(Debug, Clone, Args)]
pub struct ConfigArg {
    /// The admin config: --config, else $GPUDIRECT_CONFIG, else /etc/slurm/gpudirect.toml.
    #[arg(
        id = "config",
        long = "config",
        env = "GPUDIRECT_CONFIG",
        value_name = "FILE",
        default_value = DEFAULT_CONFIG
    )]
    pub path: PathBuf,
}

/// `--config` and `--gpudirect MODE`: the admin config and the mode read against it
/// ([`gpudirect::profile::Choice`]), the same flags on every command that starts steps with
/// a profile or checks what one gives.
#[derive(Debug, Clone, Args)]
pub struct ProfileArgs {
    /// The admin config.
    #[command(flatten)]
    pub config: ConfigArg,

    /// The --gpudirect mode the steps run with and are checked against: a profile's name,
    /// `auto` (each node's node set's profile) or `none`. Default: the plugin's.
    #[arg(long, value_name = "MODE")]
    pub gpudirect: Option<String>,
}

impl ProfileArgs {
    /// The mode read against the config (which is read once, here), when one was given.
    pub fn choice(&self) -> Option<Result<Choice<'static>, ProfileError>> {
        let mode = self.gpudirect.as_deref()?;
        Some(Choice::load(&self.config.path, mode))
    }

    /// The control NIC the mode's profile names on every one of `nodes`
    /// ([`Choice::control_nic`]); `None` without a mode, or where the config or mode does
    /// not read (the command says that error itself where it matters).
    pub fn control_nic(&self, nodes: &[String]) -> Option<String> {
        self.choice()?.ok()?.control_nic(nodes)
    }
}

/// `--polls`, `--interval`, `--timeout`: how NCCL's RAS is asked on a node, the same on
/// `gpudirect hang` and on its agent (`gpudirect agent hang`), which gets them passed on.
#[derive(Debug, Clone, Args)]
pub struct RasPollArgs {
    /// How many times each node asks RAS.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub polls: u32,

    /// Time between polls: counts that do not move over it are a hang.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration_arg)]
    pub interval: Duration,

    /// Time limit of each RAS query.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration_arg)]
    pub timeout: Duration,
}

/// `--drain`, `--retries` and `--on-drain`: what `health` and `validate` do in Slurm about
/// a node they find bad.
#[derive(Debug, Clone, Args)]
pub struct DrainArgs {
    /// Drain a node found bad in Slurm (`scontrol update ... state=drain`, reason
    /// `gpudirect health: ...` or `gpudirect validate: ...`), confirmed by reading its state
    /// back; a node drained by an admin, or by the other tool, is left alone. `health` also
    /// returns to service a node that health drained once every check passes.
    #[arg(long, group = "sanction")]
    pub drain: bool,

    /// Quarantine a node found bad instead of draining it: into the one reservation the
    /// tool owns (config `[quarantine]`, default `gpudirect-quarantine`), so users' jobs no
    /// longer start there while `gpudirect sweep` can still test it and return it; the
    /// evidence goes in the node's comment, classed node, nic or config (a config fault is
    /// not the node's: nothing is quarantined for it). Needs a Slurm operator (root).
    #[arg(long, group = "sanction")]
    pub quarantine: bool,

    /// Look N more times before calling a node bad: `health` checks again a second apart
    /// (a flapping link drains nothing until it stays down); `validate` re-tests it with a
    /// node that passed (with --resume: re-tests each drained node up to N times).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub retries: u32,

    /// With --drain or --quarantine: after a node is newly drained or quarantined, run this command (split on whitespace,
    /// no shell) with a JSON file of the evidence as its last argument and in
    /// $GPUDIRECT_EVIDENCE, e.g. to file a repair request (docs/admin-guide.md); a failure
    /// is reported, the drain stays.
    #[arg(long, value_name = "CMD", requires = "sanction")]
    pub on_drain: Option<String>,
}

impl DrainArgs {
    /// Whether a node found bad is drained or quarantined (`--drain` or `--quarantine`).
    pub fn acts(&self) -> bool {
        self.drain || self.quarantine
    }
}

/// How nccl-tests runs are started, limited and recorded: the same flags on `run` and
/// `tune`.
#[derive(Debug, Clone, Args)]
pub struct NcclTestsArgs {
    /// Folder with the nccl-tests binaries (all_reduce_perf, ...).
    #[arg(long, env = "NCCL_TESTS_DIR", value_name = "DIR")]
    pub nccl_tests_dir: Option<PathBuf>,

    /// srun's --mpi plugin for MPI builds of nccl-tests (`none` for non-MPI builds).
    #[arg(long, default_value = "pmix")]
    pub mpi: String,

    /// Time limit of each nccl-tests run (90, 90s, 10m, 1h): its whole process group is
    /// stopped after it. A job step is first asked what NCCL's RAS says (`gpudirect hang`,
    /// up to 45 s more); `gpudirect show` prints it with the run.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = duration_arg)]
    pub timeout: Duration,

    /// Time between SIGTERM and SIGKILL when stopping a run.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration_arg)]
    pub grace: Duration,

    /// Do not ask nccl-tests for a -J JSON report (for builds older than late 2025).
    #[arg(long)]
    pub no_json: bool,

    /// Cluster name recorded with each run.
    #[arg(long, env = "GPUDIRECT_CLUSTER")]
    pub cluster: Option<String>,

    /// The admin config: the transport each profile must use, and its variables.
    #[command(flatten)]
    pub config: ConfigArg,

    /// How long a run may take to reach NCCL.
    #[command(flatten)]
    pub startup: StartupArgs,
}

/// `--startup-timeout`: how long an nccl-tests run may take to reach NCCL, the same on
/// `run`, `tune`, `validate` and `vet` (issue #45).
#[derive(Debug, Clone, Args)]
pub struct StartupArgs {
    /// How long each nccl-tests run may take to reach NCCL (90, 90s, 2m): its first
    /// `Init COMPLETE`, or nccl-tests' column header. A run that has not by then is stopped
    /// (a run that did reaches its --timeout as before). A run that never reached NCCL is a
    /// launch failure, not its nodes' fault: it runs once more as its own step, and if that
    /// hangs too it is reported "could not start" and never counted slow or failed against
    /// a node or rail. When you see it, check the launch, not the fabric: `srun --mpi=pmix`
    /// (is PMIx working: `srun --mpi=list`; `gpudirect-mpi check`), and that Open MPI and
    /// PMIx talk over the control NIC (OMPI_MCA_oob_tcp_if_include,
    /// OMPI_MCA_btl_tcp_if_include, PMIX_MCA_ptl_tcp_if_include = the profile's
    /// socket_ifname). With --gpudirect, the runs set the first two to the profile's control
    /// NIC themselves where every node names it alike and neither you nor the variant set
    /// them or their _exclude twins (said on stderr, kept in each run's environment in the
    /// history). Raise it for very large jobs whose NCCL init takes longer.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration_arg)]
    pub startup_timeout: Duration,
}

/// Where one node's wiring report reads from (`gpudirect agent wiring`): a recorded tree in
/// tests, the node's own `/sys` and `/proc` otherwise.
#[derive(Debug, Clone, Args)]
pub struct NodeReportArgs {
    /// Read sysfs here (a recorded tree) instead of /sys.
    #[arg(long, value_name = "DIR", hide = true)]
    pub sysfs: Option<PathBuf>,

    /// Read /proc here instead of /proc.
    #[arg(long = "proc", value_name = "DIR", hide = true)]
    pub proc_root: Option<PathBuf>,

    /// The node's name (default: this node's Slurm name).
    #[arg(long, value_name = "NAME", hide = true)]
    pub node: Option<String>,
}

impl NodeReportArgs {
    /// This node's wiring report from `config` and the `--gpudirect` mode, one JSON line.
    pub fn report_line(&self, config: &Path, mode: Option<&str>) -> Result<String> {
        use gpudirect::validate::wiring::{collect, Roots};
        use gpudirect_core::system::{load_config, slurm_node_name, Ownership};
        let loaded = load_config(config, Ownership::Any).map_err(|e| e.to_string());
        let sysfs = self.sysfs.clone().unwrap_or_else(|| PathBuf::from("/sys"));
        let proc_root = self
            .proc_root
            .clone()
            .unwrap_or_else(|| PathBuf::from("/proc"));
        let node = self.node.clone().unwrap_or_else(slurm_node_name);
        let report = collect(
            loaded.as_ref().map_err(Clone::clone),
            mode,
            &node,
            Roots {
                sysfs: &sysfs,
                proc_root: &proc_root,
            },
        );
        let mut line = serde_json::to_string(&report)?;
        line.push('\n');
        Ok(line)
    }
}

/// The rule of the hidden `--insecure-trust-below DIR` (tests, which run in /tmp): root's
/// ownership rule, with the owner of DIR trusted beside root and no folder above DIR
/// checked ([`Ownership::TrustingBelow`], [`SystemProbe::trusting`]). Whoever can add the
/// flag to a root command is already root.
///
/// [`Ownership::TrustingBelow`]: gpudirect_core::system::Ownership::TrustingBelow
/// [`SystemProbe::trusting`]: gpudirect_core::system::SystemProbe::trusting
pub fn trusting_below(dir: &Path) -> Result<(u32, &'static Path)> {
    use std::os::unix::fs::MetadataExt;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("--insecure-trust-below {}", dir.display()))?;
    let owner = std::fs::metadata(&dir)
        .with_context(|| format!("--insecure-trust-below {}", dir.display()))?
        .uid();
    // Leaked once per command: the rule lives as long as the process.
    Ok((owner, Box::leak(dir.into_boxed_path())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_map_limits() {
        let f = FilterArgs {
            collective: Some("all_reduce".into()),
            ..FilterArgs::default()
        };
        assert_eq!(f.to_filter(Some(20)).limit, Some(20));
        assert_eq!(
            f.to_filter(Some(20)).collective.as_deref(),
            Some("all_reduce")
        );
        let all = FilterArgs {
            limit: Some(0),
            ..FilterArgs::default()
        };
        assert_eq!(all.to_filter(Some(20)).limit, None);
        let three = FilterArgs {
            limit: Some(3),
            ..FilterArgs::default()
        };
        assert_eq!(three.to_filter(None).limit, Some(3));
    }
}
