//! `gpudirect probe`: launches itself on every task of the allocation and reports where
//! tasks and nodes differ from each other and from the profile.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use std::ffi::OsString;

use anyhow::Result;
use clap::Args;
use gpudirect::probe::{analyse, read_reports, Analysis};
use gpudirect::runner::{Job, Outcome};
use gpudirect::slurm::{ask_nodes, AgentStep, Allocation, StepProfile};
use gpudirect_wire::task_report::TaskReport;

use super::args::ProfileArgs;
use super::{Ctx, ExitStatus};
use gpudirect::noteln;
use gpudirect::outln;
use gpudirect::output::{emit_json, render_table, Align};
use gpudirect::units::duration_arg;

/// Arguments of `gpudirect probe`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    salloc -N4 --ntasks-per-node=8 gpudirect probe --gpudirect tcpx\n  \
    gpudirect probe --gpudirect auto --json > probe.json\n\n\
Each task reports its NCCL_*/FI_*/GPUDIRECT_* variables, LD_LIBRARY_PATH, CPU affinity, the\n\
node's GPUs and NICs (state, speed, MTU) and the profile's checks (library files, RxDM\n\
socket directory). The report names every node or rank that differs from the profile\n\
or from the others, and lists every NCCL_*/FI_* variable in effect with where it comes\n\
from: the profile, forced by the profile, the job's environment (or a container image's),\n\
or an NCCL config file (NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf, which NCCL\n\
reads at init; the environment wins over both). A value from a file or an image that\n\
changes the transport (NCCL_NET, NCCL_IB_DISABLE, NCCL_SOCKET_IFNAME, a net plugin, ...)\n\
is an error naming the file. Exit status: 0 consistent, 1 a task does not get what the\n\
profile says (or did not answer).")]
pub struct ProbeArgs {
    /// Nodes to probe (default: the whole allocation).
    #[arg(short = 'N', long)]
    pub nodes: Option<u32>,

    /// Tasks per node (default: the allocation's).
    #[arg(long)]
    pub ntasks_per_node: Option<u32>,

    /// The admin config and the --gpudirect mode.
    #[command(flatten)]
    pub profile: ProfileArgs,

    /// Give up on the tasks after this long (120, 120s, 2m).
    #[arg(long, value_name = "DURATION", default_value = "120", value_parser = duration_arg)]
    pub timeout: Duration,

    /// Gather the tasks' reports over MPI (`srun --mpi=pmix gpudirect-mpi facts`: rank 0
    /// collects and prints them) instead of each task printing its own; also proves that
    /// the step forms one MPI world.
    #[arg(long)]
    pub mpi: bool,

    /// With --mpi: the MPI program (default: gpudirect-mpi beside this executable).
    #[arg(
        long,
        env = "GPUDIRECT_MPI_PROGRAM",
        value_name = "PATH",
        requires = "mpi"
    )]
    pub mpi_program: Option<PathBuf>,

    /// Print the tasks' reports and the analysis as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The srun step that asks every task what it gets: `gpudirect agent probe` per task, or
/// with `--mpi` the MPI program's `facts`, gathered to rank 0.
fn srun_job(args: &ProbeArgs, nodes: &[String]) -> Result<Job> {
    let step = AgentStep {
        nodes: nodes.to_vec(),
        within_job: None,
        tasks_per_node: args.ntasks_per_node,
        profile: match &args.profile.gpudirect {
            Some(mode) => StepProfile::Mode(mode.clone()),
            None => StepProfile::Default,
        },
        args: agent_args(args),
        timeout: args.timeout,
        as_user: None,
    };
    if !args.mpi {
        return Ok(step.job()?);
    }
    let program = gpudirect::validate::rails::locate_mpi_program(args.mpi_program.as_deref())
        .map_err(anyhow::Error::msg)?;
    let config = args.profile.config.path.to_string_lossy();
    let mut facts = vec!["facts", "--config", &config];
    if let Some(mode) = &args.profile.gpudirect {
        facts.extend(["--gpudirect", mode]);
    }
    Ok(step.mpi_job(&program, &facts))
}

/// What follows `gpudirect agent` on every task.
fn agent_args(args: &ProbeArgs) -> Vec<OsString> {
    let mut agent: Vec<OsString> = vec!["probe".into(), "--config".into()];
    agent.push(args.profile.config.path.clone().into());
    if let Some(mode) = &args.profile.gpudirect {
        agent.extend(["--gpudirect".into(), mode.into()]);
    }
    agent
}

/// The text report: each node's tasks, the NCCL variables in effect and where they come
/// from, and the findings.
fn print_text(reports: &[TaskReport], analysis: &Analysis, stderr: &str) -> Result<()> {
    outln!(
        "{} tasks on {} nodes ({})",
        analysis.tasks,
        analysis.nodes.len(),
        gpudirect_core::hostlist::compress(&analysis.nodes)
    )?;
    let mut seen = std::collections::BTreeSet::new();
    for r in reports {
        if !seen.insert(&r.node) {
            continue;
        }
        let on_node: Vec<&TaskReport> = reports.iter().filter(|x| x.node == r.node).collect();
        let nics: Vec<String> = r
            .nics
            .iter()
            .map(|n| format!("{}:{}", n.name, n.state))
            .collect();
        outln!(
            "  {:<12} tasks {:<3} profile {:<10} gpus {:<2} nics {}",
            r.node,
            on_node.len(),
            r.vars
                .get("GPUDIRECT_PROFILE")
                .map(String::as_str)
                .unwrap_or("-"),
            r.gpus.len(),
            nics.join(" ")
        )?;
    }
    if !analysis.variables.is_empty() {
        outln!("NCCL variables in effect (the environment first, then NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf):")?;
        let rows: Vec<Vec<String>> = analysis
            .variables
            .iter()
            .map(|v| {
                vec![
                    format!("  {}", v.name),
                    v.value.clone(),
                    v.source.clone(),
                    format!("{} task(s) on {}", v.tasks, v.nodes),
                ]
            })
            .collect();
        outln!(
            "{}",
            render_table(
                &[
                    ("  VARIABLE", Align::Left),
                    ("VALUE", Align::Left),
                    ("FROM", Align::Left),
                    ("WHERE", Align::Left),
                ],
                &rows
            )
            .trim_end()
        )?;
        for v in analysis.variables.iter().filter(|v| !v.shadowed.is_empty()) {
            outln!("  {}: also {}", v.name, v.shadowed.join("; "))?;
        }
    }
    if analysis.findings.is_empty() {
        outln!("every task has what the profile gives, and the nodes agree")?;
    }
    for f in &analysis.findings {
        outln!("{}: {}: {}", f.level, f.nodes, f.message)?;
    }
    if !stderr.trim().is_empty() {
        noteln!("{}", stderr.trim_end());
    }
    Ok(())
}

/// `gpudirect probe`. Returns the exit status.
pub fn run(args: &ProbeArgs, _ctx: &Ctx) -> Result<ExitStatus> {
    let allocation = Allocation::from_env()?;
    let wanted = args.nodes.map_or(1, |n| n.max(1) as usize);
    let nodes = allocation.require_nodes(
        wanted,
        "gpudirect probe asks the tasks of an allocation",
        None,
    )?;
    // -N: the allocation's first N nodes, as srun itself would pick them.
    let nodes = &nodes[..args.nodes.map_or(nodes.len(), |_| wanted)];
    if let Some(Err(e)) = args.profile.choice() {
        noteln!("gpudirect probe: warning: {e}; tasks are compared with each other only");
    }
    let job = srun_job(args, nodes)?;
    let asked = ask_nodes(&job, read_reports, &AtomicBool::new(false))?;
    let (reports, finished) = (asked.answers, asked.finished);
    for line in &asked.unreadable {
        noteln!("gpudirect probe: unreadable task line: {line}");
    }
    let expected = std::env::var("SLURM_NTASKS")
        .ok()
        .and_then(|n| n.parse().ok());
    let expected = match (args.nodes, args.ntasks_per_node) {
        (Some(n), Some(t)) => Some((n * t) as usize),
        (None, None) => expected,
        _ => None,
    };
    let analysis = analyse(&reports, expected, args.profile.gpudirect.as_deref());
    let stderr = String::from_utf8_lossy(&finished.stderr);
    if args.json {
        let out =
            serde_json::json!({ "tasks": reports, "analysis": analysis, "srun_stderr": stderr });
        emit_json(&out)?;
    } else {
        print_text(&reports, &analysis, &stderr)?;
    }
    if matches!(finished.outcome, Outcome::TimedOut) {
        noteln!(
            "gpudirect probe: the tasks did not all answer within {}s",
            args.timeout.as_secs()
        );
        return Ok(ExitStatus::Problem);
    }
    Ok(if analysis.has_errors() || reports.is_empty() {
        ExitStatus::Problem
    } else {
        ExitStatus::Ok
    })
}
