//! `gpudirect agent`: the hidden per-node half of the commands that ask every node
//! something. The command on the login or batch node builds one srun step with
//! [`gpudirect::slurm::AgentStep`] (`gpudirect agent ARM ...` on each node, one task per
//! node, `--label`ed), runs it and reads the answers with [`gpudirect::slurm::ask_nodes`];
//! here, on the node, each arm prints exactly one JSON line with its own marker key, which
//! the asking side's reader ([`gpudirect::slurm::read_labelled_json`]) finds.
//!
//! | Arm | Asked by | Prints |
//! |---|---|---|
//! | `probe` | `gpudirect probe` (one per task) | [`gpudirect_wire::task_report::TaskReport`] |
//! | `hang JOB` | `gpudirect hang` (inside the hung job) | [`gpudirect::hang::AgentReport`] |
//! | `health` | `gpudirect vet`'s node checks | `gpudirect health --json`, with the wiring map |
//! | `wiring` | `gpudirect validate --test wiring` | [`gpudirect::validate::wiring::NodeWiring`] |
//! | `rail-states --rails NICS` | `validate --test rails`, `vet --test rails` | [`gpudirect::validate::rail_states::NodeRailStates`] |
//! | `watch JOB --uid U` | `gpudirect watch JOBID` | [`gpudirect::watch::NodeDumps`] |
//!
//! Adding a per-node feature:
//! 1. the node's work and its answer (a `Serialize`/`Deserialize` struct with a marker key
//!    of its own, e.g. `"gpudirect_watch": 1`) in the library, with a reader built on
//!    `read_labelled_json`;
//! 2. one arm of [`Agent`] here with its flags, printing that answer as one line;
//! 3. on the asking side, `AgentStep::per_node(nodes, profile, args)` with the arm's name
//!    and flags, `.job()`, then `ask_nodes(&job, reader, stop)`.
//!
//! `health` is the one arm that runs another command's code (`commands/health.rs`): the
//! node checks live there, and vet's agent is `gpudirect health --json` with the map.

use anyhow::Result;
use clap::{Args, Subcommand};
use gpudirect::hang::{self, JobStep};
use gpudirect::output::emit;
use gpudirect::units::duration_arg;
use gpudirect::watch;
use gpudirect_core::system::{load_config, slurm_node_name, Ownership};
use gpudirect_wire::task_report::TaskReport;
use std::time::Duration;

use super::args::{ConfigArg, NodeReportArgs, RasPollArgs};
use super::health::HealthArgs;
use super::{Ctx, ExitStatus};

/// Arguments of the hidden `gpudirect agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// What to answer.
    #[command(subcommand)]
    pub agent: Agent,
}

/// The per-node agents, one arm each.
#[derive(Debug, Subcommand)]
pub enum Agent {
    /// This task's variables, CPUs, GPUs and NICs (`gpudirect probe`).
    Probe(ProbeAgent),
    /// NCCL's RAS of a job, asked on this node (`gpudirect hang`).
    Hang(HangAgent),
    /// The node's health checks with its GPU-to-NIC map (`gpudirect vet`).
    Health(Box<HealthArgs>),
    /// The node's GPU-to-NIC map and NIC subnets (`gpudirect validate --test wiring`).
    Wiring(WiringAgent),
    /// Which rail NICs are down, missing or without an address here (`--test rails`).
    RailStates(RailStatesAgent),
    /// A running job's NCCL Inspector dumps on this node (`gpudirect watch JOBID`).
    Watch(WatchAgent),
}

/// `gpudirect agent watch`.
#[derive(Debug, Args)]
pub struct WatchAgent {
    /// The job whose dump folder (`[watch]` of the config) to read.
    #[arg(value_name = "JOBID")]
    pub job: u32,

    /// The job's user: the folder must be theirs alone.
    #[arg(long, value_name = "UID")]
    pub uid: u32,

    /// Samples dumped within this long before the newest are sent.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration_arg)]
    pub window: Duration,

    /// The admin config its `[watch]` table comes from.
    #[command(flatten)]
    pub config: ConfigArg,
}

/// `gpudirect agent probe`.
#[derive(Debug, Args)]
pub struct ProbeAgent {
    /// The admin config the expected environment comes from.
    #[command(flatten)]
    pub config: ConfigArg,

    /// The --gpudirect mode the step was started with.
    #[arg(long, value_name = "MODE")]
    pub gpudirect: Option<String>,
}

/// `gpudirect agent hang`.
#[derive(Debug, Args)]
pub struct HangAgent {
    /// The job (`4242`) or one of its steps (`4242.0`).
    #[arg(value_name = "JOBID[.STEP]")]
    pub job: JobStep,

    /// How RAS is asked.
    #[command(flatten)]
    pub ras: RasPollArgs,
}

/// `gpudirect agent wiring`.
#[derive(Debug, Args)]
pub struct WiringAgent {
    /// The admin config the profile's map comes from.
    #[command(flatten)]
    pub config: ConfigArg,

    /// The --gpudirect mode whose profile maps the GPUs (default: the node set's).
    #[arg(long, value_name = "MODE")]
    pub gpudirect: Option<String>,

    /// Where the report reads from.
    #[command(flatten)]
    pub roots: NodeReportArgs,
}

/// `gpudirect agent rail-states`.
#[derive(Debug, Args)]
pub struct RailStatesAgent {
    /// The rail NICs, comma-separated.
    #[arg(long, value_name = "NICS", value_delimiter = ',', required = true)]
    pub rails: Vec<String>,

    /// Where the report reads from.
    #[command(flatten)]
    pub roots: NodeReportArgs,
}

/// `gpudirect agent ARM`: this node's (or task's) answer, one JSON line on stdout.
pub fn run(args: AgentArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let line = match args.agent {
        Agent::Probe(a) => {
            let loaded = load_config(&a.config.path, Ownership::Any);
            let report = TaskReport::collect(loaded.as_ref().ok(), a.gpudirect.as_deref());
            serde_json::to_string(&report)? + "\n"
        }
        Agent::Hang(a) => {
            // srun sets SLURMD_NODENAME: the name the job's node list uses.
            let report = hang::agent(
                a.job,
                slurm_node_name(),
                a.ras.polls,
                a.ras.interval,
                a.ras.timeout,
            );
            serde_json::to_string(&report)? + "\n"
        }
        Agent::Health(mut a) => {
            a.json = true;
            return super::health::check(&a, ctx, true);
        }
        Agent::Wiring(a) => a
            .roots
            .report_line(&a.config.path, a.gpudirect.as_deref())?,
        Agent::RailStates(a) => {
            use gpudirect::validate::rail_states::{collect, ipv4_interfaces};
            let sysfs = a.roots.sysfs.unwrap_or_else(|| "/sys".into());
            let node = a.roots.node.unwrap_or_else(slurm_node_name);
            // Addresses that cannot be listed are not checked; up/down still is.
            let addressed = ipv4_interfaces().ok();
            let report = collect(
                &node,
                &a.rails,
                &sysfs.join("class/net"),
                addressed.as_ref(),
            );
            serde_json::to_string(&report)? + "\n"
        }
        Agent::Watch(a) => {
            let config = load_config(&a.config.path, Ownership::Any)?;
            let Some(settings) = &config.watch else {
                anyhow::bail!(
                    "{}: no [watch] table: job telemetry is not configured (docs/admin-guide.md, \"Turning on job telemetry\")",
                    a.config.path.display()
                );
            };
            let folder = std::path::PathBuf::from(settings.dump_dir(a.job));
            let dumps = watch::node_dumps(&folder, a.uid, slurm_node_name(), a.window);
            serde_json::to_string(&dumps)? + "\n"
        }
    };
    emit(&line)?;
    Ok(ExitStatus::Ok)
}
