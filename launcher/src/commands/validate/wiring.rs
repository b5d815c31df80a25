//! `gpudirect validate --test wiring`: one srun step over the allocation asks every node
//! for its GPU-to-NIC map and its NICs' subnets ([`gpudirect::validate::wiring::collect`]),
//! and names the nodes where GPU i is not on the rail the other nodes have it on.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use gpudirect::drain;
use gpudirect::history::History;
use gpudirect::noteln;
use gpudirect::outln;
use gpudirect::output::{emit_json, render_table, Align};
use gpudirect::runner::{Job, Outcome};
use gpudirect::slurm::{ask_nodes, AgentStep, Allocation, StepProfile};
use gpudirect::validate::actions::{self, Candidate, DrainPlan, NodeAction};
use gpudirect::validate::wiring::{analyse, read_reports, Analysis, NodeWiring};
use serde::Serialize;

use super::{Test, ValidateArgs};
use crate::commands::{Ctx, ExitStatus};

/// How long the nodes have to answer by default: each reads a few sysfs files.
const REPORT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Serialize)]
struct WiringReport<'a> {
    test: &'static str,
    reports: &'a [NodeWiring],
    analysis: &'a Analysis,
    /// What `--drain` did, node by node.
    #[serde(skip_serializing_if = "Option::is_none")]
    drains: Option<Vec<NodeAction>>,
}

/// The flags `--test wiring` refuses: it measures nothing, so the measuring ones do not
/// apply.
pub(super) fn check_flags(args: &ValidateArgs) -> Result<()> {
    let refused = [
        (args.per_rail, "--per-rail"),
        (args.rails.is_some(), "--rails"),
        (args.resume, "--resume"),
        (args.drains.retries > 0, "--retries"),
        (args.extra, "--extra"),
        (args.report.is_some(), "--report"),
        (args.floor.is_some(), "--floor"),
        (args.topology.is_some(), "--topology"),
    ];
    if let Some((_, flag)) = refused.iter().find(|(given, _)| *given) {
        bail!("--test wiring compares each node's GPU-to-NIC map and NIC subnets, it measures nothing: {flag} does not apply");
    }
    Ok(())
}

/// The allocation's nodes, refused when there are too few to compare.
pub(super) fn allocation_nodes() -> Result<Vec<String>> {
    Ok(Allocation::from_env()?
        .require_nodes(
            2,
            "gpudirect validate --test wiring compares the nodes of an allocation with each other (3 or more name the one that differs)",
            Some("judge saved reports with --reports FILE"),
        )?
        .to_vec())
}

/// The step that asks every node: one task per node, `gpudirect agent wiring`.
fn srun_job(args: &ValidateArgs, nodes: &[String]) -> Result<Job> {
    let mut agent: Vec<std::ffi::OsString> = vec!["wiring".into(), "--config".into()];
    agent.push(args.profile.config.path.clone().into());
    if let Some(mode) = &args.profile.gpudirect {
        agent.extend(["--gpudirect".into(), mode.into()]);
    }
    let step = AgentStep {
        timeout: args.timeout.unwrap_or(REPORT_TIMEOUT),
        ..AgentStep::per_node(nodes, StepProfile::Default, agent)
    };
    Ok(step.job()?)
}

/// The nodes' reports: from `--reports FILE`, else from an srun step over `nodes`.
fn gather(args: &ValidateArgs, nodes: &[String]) -> Result<(Vec<NodeWiring>, Vec<String>)> {
    if let Some(file) = &args.reports {
        let text = read_reports_file(file)?;
        let (reports, bad) = read_reports(&text);
        for line in &bad {
            noteln!(
                "gpudirect validate: {}: unreadable line: {line}",
                file.display()
            );
        }
        if reports.is_empty() {
            bail!(
                "{} holds no node's report (lines with \"{}\"): write it with `srun --label --ntasks-per-node=1 gpudirect agent wiring > FILE`",
                file.display(),
                gpudirect::validate::wiring::LINE_KEY
            );
        }
        let names = reports.iter().map(|r| r.node.clone()).collect();
        return Ok((reports, names));
    }
    let job = srun_job(args, nodes)?;
    noteln!(
        "gpudirect validate: asking {} nodes for their GPU-to-NIC map and NIC subnets",
        nodes.len()
    );
    let asked = ask_nodes(&job, read_reports, &AtomicBool::new(false))?;
    for line in &asked.unreadable {
        noteln!("gpudirect validate: unreadable node line: {line}");
    }
    let (reports, finished) = (asked.answers, asked.finished);
    let stderr = String::from_utf8_lossy(&finished.stderr);
    if matches!(finished.outcome, Outcome::TimedOut) {
        noteln!(
            "gpudirect validate: not every node answered within {}s",
            job.timeout.as_secs()
        );
    }
    if reports.len() < nodes.len() && !stderr.trim().is_empty() {
        noteln!("gpudirect validate: srun said: {}", stderr.trim_end());
    }
    Ok((reports, nodes.to_vec()))
}

/// A reports file, refused when it is not one (too large, not text).
fn read_reports_file(file: &Path) -> Result<String> {
    // A node's line is a few KB; 64 MiB is a hundred thousand nodes.
    const LIMIT: u64 = 64 << 20;
    let meta = std::fs::metadata(file)
        .with_context(|| format!("--reports {}: cannot read it", file.display()))?;
    if meta.len() > LIMIT {
        bail!(
            "--reports {}: {} bytes is no file of node reports (at most {LIMIT})",
            file.display(),
            meta.len()
        );
    }
    let bytes = std::fs::read(file)
        .with_context(|| format!("--reports {}: cannot read it", file.display()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The drains `--drain` asks for: every single node a finding names.
fn candidates(analysis: &Analysis) -> Vec<Candidate> {
    analysis
        .findings
        .iter()
        .filter(|f| analysis.nodes.contains(&f.node))
        .map(|f| Candidate {
            node: f.node.clone(),
            verdict: "off its rail".to_string(),
            evidence: vec![f.message.clone()],
            cause: gpudirect::quarantine::Cause::Nic,
            plan: DrainPlan::Drain {
                reason: drain::drain_reason(
                    drain::Tool::Validate,
                    &format!("wiring: {}", f.message),
                ),
            },
        })
        .collect()
}

fn print_text(reports: &[NodeWiring], analysis: &Analysis, exit: ExitStatus) -> Result<()> {
    let sources: std::collections::BTreeSet<&str> =
        reports.iter().map(|r| r.source.as_str()).collect();
    let sources: Vec<&str> = sources.into_iter().collect();
    outln!(
        "wiring of {} nodes ({}): map from {}",
        analysis.nodes.len(),
        gpudirect_core::hostlist::compress(&analysis.nodes),
        sources.join("; ")
    )?;
    let rows: Vec<Vec<String>> = analysis
        .rails
        .iter()
        .map(|r| {
            vec![
                format!("  {}", r.gpu),
                r.nics.join(","),
                r.subnet.clone().unwrap_or_else(|| "-".to_string()),
                format!("{}/{}", r.agreeing, r.nodes),
            ]
        })
        .collect();
    if !rows.is_empty() {
        outln!(
            "{}",
            render_table(
                &[
                    ("  GPU", Align::Left),
                    ("NIC", Align::Left),
                    ("RAIL (SUBNET)", Align::Left),
                    ("NODES THERE", Align::Right),
                ],
                &rows
            )
            .trim_end()
        )?;
    }
    for node in &analysis.missing {
        outln!("  {node}: no answer")?;
    }
    for f in &analysis.findings {
        outln!("  {}: {}", f.node, f.message)?;
    }
    for note in &analysis.notes {
        outln!("  note: {note}")?;
    }
    // Each node's notes, said once for all the nodes that say the same.
    let mut notes: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for r in reports {
        for note in &r.notes {
            notes.entry(note).or_default().push(&r.node);
        }
    }
    for (note, nodes) in notes {
        noteln!(
            "gpudirect validate: {}: {note}",
            gpudirect_core::hostlist::compress(&nodes)
        );
    }
    let named: Vec<&str> = analysis
        .findings
        .iter()
        .map(|f| f.node.as_str())
        .chain(analysis.missing.iter().map(String::as_str))
        .collect();
    outln!(
        "verdict: {:?} (exit {}): {}",
        analysis.health,
        exit.code(),
        match named.is_empty() {
            true => "every GPU is on the rail the other nodes have it on".to_string(),
            false => format!("look at {}", named.join(", ")),
        }
    )?;
    Ok(())
}

/// `gpudirect validate --test wiring`; `nodes` are the allocation's (empty with
/// `--reports`).
pub fn run(args: &ValidateArgs, ctx: &Ctx, nodes: &[String]) -> Result<ExitStatus> {
    debug_assert_eq!(args.test, Test::Wiring);
    check_flags(args)?;
    let (reports, expected) = gather(args, nodes)?;
    let analysis = analyse(&reports, &expected);
    let mut drains = None;
    if let Some(sanction) = super::drains::sanction(args)? {
        let db = ctx.db_path()?;
        let history = History::open(&db)?;
        let cluster = gpudirect::slurm::cluster_name(args.cluster.as_deref());
        let source = super::EvidenceSource {
            sanction: &sanction,
            on_drain: args.drains.on_drain.as_deref(),
            history: &history,
            cluster: cluster.as_deref(),
            collective: None,
            size_bytes: None,
            pairs: &[],
        };
        let candidates =
            drain::spare_when_every_node_is_bad(candidates(&analysis), analysis.nodes.len());
        drains = Some(super::drains::apply_drains(&candidates, &source));
    }
    let actions_failed = drains.as_deref().is_some_and(actions::any_error);
    let exit = ExitStatus::of_validation(analysis.health, actions_failed);
    if args.json {
        emit_json(&WiringReport {
            test: "wiring",
            reports: &reports,
            analysis: &analysis,
            drains,
        })?;
    } else {
        print_text(&reports, &analysis, exit)?;
    }
    Ok(exit)
}
