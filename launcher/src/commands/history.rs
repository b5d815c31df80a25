//! `gpudirect history`: the recorded runs as a compact table, newest first; with
//! `--node HOST`, that node's busbw over time and whether it is trending down.
//!
//! # The downward trend (`--node`)
//! A node's points are grouped by what makes numbers comparable: collective, variant,
//! node count, message size and data type. Only measurements count: runs with status
//! `ok` that are not stand-in replays. In each group, with the points oldest first, the
//! trend is **downward** when each of the last [`TREND_RECENT`] points is below the median
//! of all the earlier ones by more than the tolerance (percent, `--tolerance`, default 5).
//! At least [`TREND_MIN_EARLIER`] earlier points are needed, so one slow outlier or a
//! short history never raises the flag. The rule is [`trend`], in `gpudirect::baseline`.
//!
//! [`TREND_RECENT`]: gpudirect::baseline::TREND_RECENT
//! [`TREND_MIN_EARLIER`]: gpudirect::baseline::TREND_MIN_EARLIER

use std::collections::{HashMap, HashSet};

use anyhow::Result;
use clap::Args;
use gpudirect::history::{History, NodeHistory, RunId, RunSummary};
use gpudirect::listing::{group_trends, node_text, replays, runs_table, NodeReport, Point};
use gpudirect::outln;
use serde::Serialize;

use gpudirect::baseline::{cluster_and_fabric, last_good_per_fabric, TREND_DEFAULT_TOLERANCE_PCT};

use super::args::FilterArgs;
use super::{Ctx, ExitStatus};
use gpudirect::noteln;
use gpudirect::output::{emit, emit_json, render_table, replay_footnote, shown, shown_text, Align};
use gpudirect::setup::RunSetup;
use gpudirect::units::{human_size as format_size, percent_arg, short_time, size_arg};

/// One line of `history --versions`: a cluster and fabric's last version set that met its
/// baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VersionSet {
    /// Cluster name (`-` when runs were recorded without one).
    pub cluster: String,
    /// The transport NCCL used, else the variant, else `-`.
    pub fabric: String,
    /// The run that met its baseline.
    pub run_id: RunId,
    /// Its time, RFC 3339 UTC.
    pub at: String,
    /// Its collective.
    pub collective: String,
    /// `(what, version)` as the output named them.
    pub versions: Vec<(String, String)>,
    /// Why it counts: `first run of its kind`, or its busbw against the baseline's.
    pub basis: String,
}

fn versions_view(
    history: &History,
    runs: &[RunSummary],
    tolerance_pct: f64,
    json: bool,
) -> Result<ExitStatus> {
    let mut sets = Vec::new();
    for (run, basis) in last_good_per_fabric(runs, tolerance_pct) {
        let setup = RunSetup::of(&history.get_run(run.id)?);
        let (cluster, fabric) = cluster_and_fabric(run);
        sets.push(VersionSet {
            cluster,
            fabric,
            run_id: run.id,
            at: run.at.clone(),
            collective: run.collective.clone(),
            versions: setup
                .versions
                .iter()
                .map(|(w, v)| ((*w).to_string(), v.clone()))
                .collect(),
            basis,
        });
    }
    if json {
        emit_json(&sets)?;
        return Ok(ExitStatus::Ok);
    }
    if sets.is_empty() {
        noteln!(
            "no ok run matches these filters (history: {})",
            history.path().display()
        );
        return Ok(ExitStatus::Ok);
    }
    let columns = [
        ("CLUSTER", Align::Left),
        ("FABRIC", Align::Left),
        ("RUN", Align::Right),
        ("WHEN (UTC)", Align::Left),
        ("COLLECTIVE", Align::Left),
        ("VERSIONS", Align::Left),
        ("MET ITS BASELINE", Align::Left),
    ];
    let rows: Vec<Vec<String>> = sets
        .iter()
        .map(|s| {
            let versions = if s.versions.is_empty() {
                "- (the output named none)".to_string()
            } else {
                s.versions
                    .iter()
                    .map(|(w, v)| format!("{w} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            vec![
                s.cluster.clone(),
                s.fabric.clone(),
                s.run_id.to_string(),
                short_time(&s.at),
                s.collective.clone(),
                versions,
                s.basis.clone(),
            ]
        })
        .collect();
    emit(&render_table(&columns, &rows))?;
    Ok(ExitStatus::Ok)
}

/// Runs listed when `--limit` is not given.
pub const DEFAULT_LIMIT: u32 = 20;

/// Arguments of `gpudirect history`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect history                                  # the 20 newest runs\n  \
    gpudirect history --collective all_reduce --since 7d --limit 0\n  \
    gpudirect history --cluster a3-prod --variant tcpx --status failed\n  \
    gpudirect history --node gpu07 --size 1G           # gpu07's busbw at 1 GiB over time, with trend\n  \
    gpudirect history --versions                       # last versions that met their baseline, per fabric\n  \
    gpudirect history --json | jq '.[0].avg_busbw'\n\n\
    A run marked `(replay)` came from the nccl-tests stand-in: its numbers are a recording,\n\
    not a measurement. With --node, runs are grouped by collective, variant, node count, size\n\
    and type; a group's trend is downward when each of its last 3 ok measurements (replays\n\
    left out) is below the median of at least 3 earlier ones by more than --tolerance %.")]
pub struct HistoryArgs {
    /// Which runs.
    #[command(flatten)]
    pub filter: FilterArgs,

    /// With --node: read each run's busbw at this size (K/M/G are powers of 1024, as in
    /// nccl-tests' -b/-e); default: each run's largest size.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, requires = "node")]
    pub size: Option<u64>,

    /// With --node: how far (percent) below the earlier median the last 3 points must be
    /// to call the trend downward. With --versions: how far below its baseline a run may
    /// be and still meet it. Default 5.
    #[arg(long, value_name = "PCT", value_parser = percent_arg)]
    pub tolerance: Option<f64>,

    /// For each cluster and fabric (the transport NCCL used, else the variant), the last
    /// set of versions (nccl-tests, NCCL, CUDA, driver, net plugin) whose run met its
    /// baseline: busbw at the largest size within --tolerance % of the median of up to 5
    /// earlier ok runs of the same kind (the first run of a kind is its own baseline).
    /// The filters choose which runs count.
    #[arg(long, conflicts_with = "node")]
    pub versions: bool,

    /// List the recorded vets of jobs' nodes (`gpudirect vet`), newest first: each job's
    /// good and bad nodes and what it decided (--limit applies; with --json, each vet).
    #[arg(long, conflicts_with_all = ["node", "versions"])]
    pub vets: bool,

    /// Print JSON instead of a table: an array of runs, or with --node one object with the
    /// node's points, validation numbers and trends.
    #[arg(long)]
    pub json: bool,
}

/// `history --vets`: one line per vet, newest first.
fn vets_view(history: &History, limit: Option<u32>, json: bool) -> Result<ExitStatus> {
    let vets = history.list_vets(limit)?;
    if json {
        emit_json(&vets)?;
        return Ok(ExitStatus::Ok);
    }
    if vets.is_empty() {
        outln!(
            "no vets recorded in {} (gpudirect vet records one per job it vets)",
            history.path().display()
        )?;
        return Ok(ExitStatus::Ok);
    }
    outln!("ID  WHEN (UTC)        CLUSTER   JOB       TEST   GOOD/ALL  NEED  DECISION  BAD NODES")?;
    for (id, v) in vets.iter().map(|v| (v.id, &v.facts)) {
        outln!(
            "{:<3} {:<17} {:<9} {:<9} {:<6} {:<9} {:<5} {:<9} {}",
            id,
            gpudirect::units::format_rfc3339(v.at)
                .replace('T', " ")
                .chars()
                .take(16)
                .collect::<String>(),
            shown(v.cluster.as_deref().unwrap_or("-")),
            shown(v.job_id.as_deref().unwrap_or("-")),
            v.test,
            format!("{}/{}", v.good, v.allocated),
            v.need,
            shown(&v.decision),
            if v.bad_nodes.is_empty() {
                "-".into()
            } else {
                shown(&v.bad_nodes)
            }
        )?;
    }
    Ok(ExitStatus::Ok)
}

/// `gpudirect history`.
pub fn run(args: &HistoryArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let tolerance = args.tolerance.unwrap_or(TREND_DEFAULT_TOLERANCE_PCT);
    anyhow::ensure!(
        tolerance.is_finite() && tolerance >= 0.0,
        "--tolerance {tolerance}: write a percentage >= 0, e.g. 5"
    );
    anyhow::ensure!(
        args.tolerance.is_none() || args.filter.node.is_some() || args.versions,
        "--tolerance applies to --node or --versions: add one of them"
    );
    let history = ctx.open_history()?;
    if args.vets {
        return vets_view(
            &history,
            args.filter.limit.or(Some(DEFAULT_LIMIT)),
            args.json,
        );
    }
    if args.versions {
        // Every matching run: a baseline needs the earlier ones.
        let mut filter = args.filter.to_filter(None);
        filter.limit = None;
        let runs = history.list_runs(&filter)?;
        return versions_view(&history, &runs, tolerance, args.json);
    }
    let filter = args.filter.to_filter(Some(DEFAULT_LIMIT));
    let runs = history.list_runs(&filter)?;
    let replayed = replays(&runs);
    if let Some(node) = &args.filter.node {
        node_view(&history, args, node, &runs, &replayed, tolerance)?;
        return Ok(ExitStatus::Ok);
    }
    if args.json {
        // Each summary carries `replay_of` (null for measurements).
        emit_json(&runs)?;
        return Ok(ExitStatus::Ok);
    }
    if runs.is_empty() {
        noteln!(
            "no runs match these filters (history: {})",
            history.path().display()
        );
        return Ok(ExitStatus::Ok);
    }
    let mut text = runs_table(&runs, &replayed);
    text.push_str(&replay_footnote(
        replayed.iter().map(|(id, r)| (*id, r.as_str())),
    ));
    emit(&shown_text(&text))?;
    if filter
        .limit
        .is_some_and(|l| runs.len() as u64 >= u64::from(l))
    {
        noteln!("(the {} newest; --limit 0 lists all)", runs.len());
    }
    Ok(ExitStatus::Ok)
}

fn node_view(
    history: &History,
    args: &HistoryArgs,
    node: &str,
    runs: &[RunSummary],
    replayed: &HashMap<RunId, String>,
    tolerance: f64,
) -> Result<()> {
    let NodeHistory {
        node: _,
        runs: points,
        checks,
    } = history.node_history(node, args.filter.collective.as_deref(), args.size)?;
    // The listing applied every filter (and the limit); keep the node's points of those runs.
    let chosen: HashSet<RunId> = runs.iter().map(|r| r.id).collect();
    let launchers: HashMap<RunId, &str> =
        runs.iter().map(|r| (r.id, r.launcher.as_str())).collect();
    let points: Vec<Point> = points
        .into_iter()
        .filter(|p| chosen.contains(&p.run_id))
        .map(|point| Point {
            launcher: launchers
                .get(&point.run_id)
                .copied()
                .unwrap_or("-")
                .to_string(),
            replay_of: replayed.get(&point.run_id).cloned(),
            point,
        })
        .collect();
    let checks: Vec<_> = checks
        .into_iter()
        .filter(|c| chosen.contains(&c.run_id))
        .collect();
    let trends = group_trends(&points, tolerance);
    let report = NodeReport {
        node: node.to_string(),
        size_bytes: args.size,
        tolerance_pct: tolerance,
        runs: points,
        checks,
        trends,
    };
    if args.json {
        emit_json(&report)?;
        return Ok(());
    }
    if report.runs.is_empty() && report.checks.is_empty() {
        noteln!(
            "node {node} is in no recorded run matching these filters{}; `gpudirect history` \
             lists runs with their nodes (history: {})",
            args.size
                .map(|s| format!(" with a row at {}", format_size(s)))
                .unwrap_or_default(),
            history.path().display()
        );
        return Ok(());
    }
    emit(&shown_text(&node_text(&report)))?;
    Ok(())
}
