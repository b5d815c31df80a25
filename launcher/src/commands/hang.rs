//! `gpudirect hang JOBID[.STEP]`: which rank a hung job waits for, from NCCL's RAS on the
//! job's own nodes (`gpudirect::hang` has the how).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use gpudirect::hang::{self, assemble, read_agent_lines, unanswered, JobStep};
use gpudirect::output::{emit_json, shown};
use gpudirect::ras::{self, Verdict};
use gpudirect::slurm::{self, ask_nodes_capped, AgentStep, StepProfile};
use gpudirect::{noteln, outln};

use super::args::RasPollArgs;
use super::{Ctx, ExitStatus};

/// Ask NCCL's RAS on every node of a running job which rank the others wait for.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect hang 4242              # the job's communicators: laggards, stalls, dead ranks\n  \
    gpudirect hang 4242.0 --polls 5  # step 0 only, 5 polls 5 s apart\n  \
    gpudirect hang 4242 --json       # the same as JSON, for a script or a ticket\n\n\
    Run it as the job's user (or root, whose step then runs as the job's user: Slurm starts \
    no step of root's inside a user's job) from a login node: it starts one task per node of \
    the job with `srun --overlap --jobid`, which reads the job's RAS address (NCCL_RAS_ADDR of \
    its processes, else 127.0.0.1:28028) and asks NCCL's RAS there --polls times, --interval \
    apart. A rank whose count of collectives is behind the others' and does not move is the \
    one they wait for; all ranks on the same count with none moving is a fabric or GPU \
    stall. Needs NCCL 2.24 or later with RAS on (the default).\n\n\
    Exit status: 0 no hang (counts advance); 1 a hang or broken communicator found; 3 no \
    RAS answered (the message says why) or the job is not running.")]
pub struct HangArgs {
    /// The job (`4242`) or one of its steps (`4242.0`).
    #[arg(value_name = "JOBID[.STEP]")]
    pub job: JobStep,

    /// How RAS is asked on each node.
    #[command(flatten)]
    pub ras: RasPollArgs,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `gpudirect hang`.
pub fn run(args: &HangArgs, _ctx: &Ctx) -> Result<ExitStatus> {
    let info = slurm::job_info(args.job.job)
        .with_context(|| format!("gpudirect hang: cannot look up job {}", args.job.job))?;
    if info.state != "RUNNING" {
        bail!(
            "job {} is {}, not RUNNING: only a running job has NCCL processes to ask",
            args.job.job,
            info.state
        );
    }
    let Some(nodes) = info.nodes.clone() else {
        bail!("job {} has no nodes yet", args.job.job);
    };
    let (expected, most) = hang::poll_duration(args.ras.polls, args.ras.interval, args.ras.timeout);
    noteln!(
        "gpudirect hang: asking NCCL's RAS of job {} on {nodes} {} time(s), {} s apart (about {} s, up to {} s if RAS is slow to answer)",
        args.job,
        args.ras.polls,
        args.ras.interval.as_secs_f64(),
        expected.as_secs_f64(),
        most.as_secs_f64()
    );
    let job_nodes = gpudirect_core::hostlist::expand(&nodes).with_context(|| {
        format!(
            "job {}: its node list `{nodes}` is not a hostlist",
            args.job.job
        )
    })?;
    let agent = [
        "hang".to_string(),
        args.job.to_string(),
        "--polls".to_string(),
        args.ras.polls.to_string(),
        "--interval".to_string(),
        format!("{}ms", args.ras.interval.as_millis()),
        "--timeout".to_string(),
        format!("{}ms", args.ras.timeout.as_millis()),
    ];
    let step = AgentStep {
        within_job: Some(args.job.job),
        timeout: most + Duration::from_secs(60),
        as_user: info.step_user(nix::unistd::geteuid().as_raw()),
        // Nothing of ours in the job's environment: the agent only reads.
        ..AgentStep::per_node(
            &job_nodes,
            StepProfile::Nothing,
            agent.into_iter().map(Into::into).collect(),
        )
    };
    let job = step.job()?;
    // Bounded: every agent's answers are (hang::AGENT_ANSWER_BUDGET), and so is what is
    // read of all of them (security review T8).
    let cap = hang::CALLER_BYTES_PER_NODE
        .saturating_mul(job_nodes.len())
        .min(hang::CALLER_BYTES_MAX);
    let asked = ask_nodes_capped(&job, read_agent_lines, &AtomicBool::new(false), cap)?;
    if asked.finished.stdout_dropped > 0 {
        noteln!(
            "gpudirect hang: the agents wrote more than {cap} bytes ({} per node of the job); the {} bytes after that were not read, so the nodes whose lines they held are left out",
            hang::CALLER_BYTES_PER_NODE,
            asked.finished.stdout_dropped
        );
    }
    for line in &asked.unreadable {
        let start: String = line.chars().take(200).collect();
        let more = line.len() - start.len();
        let cut = if more > 0 {
            format!(" ... ({more} bytes more)")
        } else {
            String::new()
        };
        noteln!(
            "gpudirect hang: unreadable agent line: {}{cut}",
            shown(&start)
        );
    }
    let reports = asked.answers;
    let silent = unanswered(&reports);
    let (table, snapshots) = assemble(&reports);
    // An answer naming processes that are not the job's is not the job's RAS (T1): no
    // diagnosis is drawn from it.
    let foreign = hang::foreign_ranks(&reports, &snapshots);
    if !foreign.is_empty() {
        return say_not_the_jobs(args, &nodes, &foreign, &reports);
    }
    let diagnosis = ras::diagnose(&snapshots, &table);
    let status = if snapshots.is_empty() {
        ExitStatus::CouldNotRun
    } else if diagnosis.iter().any(|c| {
        matches!(
            c.verdict,
            Verdict::Laggards | Verdict::AllStalled | Verdict::Broken
        )
    }) {
        ExitStatus::Problem
    } else {
        ExitStatus::Ok
    };
    if args.json {
        emit_json(&serde_json::json!({
            "job": args.job.to_string(),
            "nodes": nodes,
            "communicators": diagnosis,
            "unanswered": silent,
            "agents": reports,
        }))?;
        return Ok(status);
    }
    // Everything below comes from the nodes and their RAS answers: shown escaped (T2).
    for (node, why) in &silent {
        outln!("{}", shown(&format!("{node}: {why}")))?;
    }
    if snapshots.is_empty() {
        outln!(
            "no RAS answered on any node of job {}: see the reasons above (NCCL 2.24 or later \
             with RAS on, the job's NCCL_RAS_ADDR)",
            args.job
        )?;
        return Ok(status);
    }
    if diagnosis.is_empty() {
        outln!("RAS answered but knows no communicator: the job has not created one yet")?;
        return Ok(status);
    }
    for c in &diagnosis {
        let counts: Vec<String> = c
            .counts
            .iter()
            .filter(|(_, &(_, hi))| hi > 0)
            .map(|(t, &(lo, hi))| {
                if lo == hi {
                    format!("{t} {hi}")
                } else {
                    format!("{t} {lo}-{hi}")
                }
            })
            .collect();
        let line = format!(
            "communicator {} ({} ranks, {} answered{}): {}",
            c.hash,
            c.size,
            c.ranks_seen,
            if counts.is_empty() {
                String::new()
            } else {
                format!("; {}", counts.join(", "))
            },
            c.message
        );
        outln!("{}", shown(&line))?;
    }
    Ok(status)
}

/// An answer that names processes that are not job J's (security review T1): said, with
/// each such rank, and no diagnosis (exit 3).
fn say_not_the_jobs(
    args: &HangArgs,
    nodes: &str,
    foreign: &[hang::ForeignRank],
    reports: &[hang::AgentReport],
) -> Result<ExitStatus> {
    if args.json {
        emit_json(&serde_json::json!({
            "job": args.job.to_string(),
            "nodes": nodes,
            "communicators": [],
            "not_the_jobs": foreign,
            "agents": reports,
        }))?;
        return Ok(ExitStatus::CouldNotRun);
    }
    for f in foreign {
        outln!(
            "{}",
            shown(&format!(
                "the RAS answer places rank {} of communicator {} on {} as pid {}, which is not one of job {}'s processes there (Slurm's listpids)",
                f.rank, f.communicator, f.node, f.pid, args.job
            ))
        )?;
    }
    outln!(
        "the service that answered on job {}'s RAS port is not the job's own: no diagnosis (another user's process may hold the port; docs/admin-guide.md, [ras])",
        args.job
    )?;
    Ok(ExitStatus::CouldNotRun)
}
