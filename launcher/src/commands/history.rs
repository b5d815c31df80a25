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

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::Result;
use clap::Args;
use gpudirect::history::{History, NodeHistory, NodeRunPoint, RunId, RunStatus, RunSummary};
use gpudirect::outln;
use serde::Serialize;

use gpudirect::baseline::{
    cluster_and_fabric, last_good_per_fabric, trend, Trend, TREND_DEFAULT_TOLERANCE_PCT,
};

use super::args::FilterArgs;
use super::{Ctx, ExitStatus};
use gpudirect::noteln;
use gpudirect::output::{
    emit, emit_json, gbps, node_result_cells, or_dash, render_table, replay_footnote, Align,
    NODE_RESULT_COLUMNS,
};
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
    for v in &vets {
        outln!(
            "{:<3} {:<17} {:<9} {:<9} {:<6} {:<9} {:<5} {:<9} {}",
            v.id,
            gpudirect::units::format_rfc3339(v.at)
                .replace('T', " ")
                .chars()
                .take(16)
                .collect::<String>(),
            v.cluster.as_deref().unwrap_or("-"),
            v.job_id.as_deref().unwrap_or("-"),
            v.test,
            format!("{}/{}", v.good, v.allocated),
            v.need,
            v.decision,
            if v.bad_nodes.is_empty() {
                "-"
            } else {
                &v.bad_nodes
            }
        )?;
    }
    Ok(ExitStatus::Ok)
}

/// A point of a node's history, with its run's launcher and replay marking.
#[derive(Debug, Serialize)]
struct Point {
    #[serde(flatten)]
    point: NodeRunPoint,
    launcher: String,
    replay_of: Option<String>,
}

/// The key of a group of comparable points.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
struct GroupKey {
    collective: String,
    variant: Option<String>,
    node_count: Option<u32>,
    size_bytes: u64,
    dtype: String,
}

#[derive(Debug, Serialize)]
struct GroupTrend {
    #[serde(flatten)]
    key: GroupKey,
    /// Runs judged, oldest first.
    run_ids: Vec<RunId>,
    #[serde(flatten)]
    trend: Trend,
}

#[derive(Debug, Serialize)]
struct NodeReport {
    node: String,
    size_bytes: Option<u64>,
    tolerance_pct: f64,
    runs: Vec<Point>,
    checks: Vec<gpudirect::history::NodeCheckPoint>,
    trends: Vec<GroupTrend>,
}

/// The listed runs' replay markings, by id. The listing query reads them (one query for
/// the whole list, not one per run).
fn replays(runs: &[RunSummary]) -> HashMap<RunId, String> {
    runs.iter()
        .filter_map(|r| Some((r.id, r.replay_of.clone()?)))
        .collect()
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
    emit(&text)?;
    if filter
        .limit
        .is_some_and(|l| runs.len() as u64 >= u64::from(l))
    {
        noteln!("(the {} newest; --limit 0 lists all)", runs.len());
    }
    Ok(ExitStatus::Ok)
}

fn launcher_cell(launcher: &str, replay: bool) -> String {
    if replay {
        format!("{launcher} (replay)")
    } else {
        launcher.to_string()
    }
}

fn runs_table(runs: &[RunSummary], replayed: &HashMap<RunId, String>) -> String {
    // A LABEL column only when some listed run has one: most histories have none.
    let labels = runs.iter().any(|r| r.label.is_some());
    let mut columns = vec![
        ("ID", Align::Right),
        ("WHEN (UTC)", Align::Left),
        ("CLUSTER", Align::Left),
        ("N", Align::Right),
        ("NODES", Align::Left),
        ("COLLECTIVE", Align::Left),
        ("VARIANT", Align::Left),
        ("STATUS", Align::Left),
        ("TRANSPORT", Align::Left),
        ("AVG BUSBW", Align::Right),
        ("BUSBW", Align::Right),
        ("MAX SIZE", Align::Right),
        ("LAUNCHER", Align::Left),
    ];
    if labels {
        columns.push(("LABEL", Align::Left));
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let mut cells = vec![
                r.id.to_string(),
                short_time(&r.at),
                or_dash(r.cluster.as_deref()),
                r.node_count.map_or("-".into(), |n| n.to_string()),
                or_dash(r.nodelist.as_deref()),
                r.collective.clone(),
                or_dash(r.variant.as_deref()),
                r.status.to_string(),
                or_dash(r.transport.as_deref()),
                gbps(r.avg_busbw),
                gbps(r.busbw),
                r.max_size_bytes.map_or("-".into(), format_size),
                launcher_cell(r.launcher.as_str(), replayed.contains_key(&r.id)),
            ];
            if labels {
                cells.push(or_dash(r.label.as_deref()));
            }
            cells
        })
        .collect();
    let mut out = render_table(&columns, &rows);
    out.push_str("busbw in GB/s (1e9 bytes/s); BUSBW = out-of-place busbw at the largest size\n");
    out
}

/// Groups the measured points (ok, not replays) and judges each group's trend.
fn group_trends(points: &[Point], tolerance_pct: f64) -> Vec<GroupTrend> {
    let mut groups: BTreeMap<GroupKey, Vec<(RunId, f64)>> = BTreeMap::new();
    for p in points {
        let (Some(busbw), RunStatus::Ok, None) = (p.point.busbw, p.point.status, &p.replay_of)
        else {
            continue;
        };
        let key = GroupKey {
            collective: p.point.collective.clone(),
            variant: p.point.variant.clone(),
            node_count: p.point.node_count,
            size_bytes: p.point.size_bytes,
            dtype: p.point.dtype.clone(),
        };
        groups.entry(key).or_default().push((p.point.run_id, busbw));
    }
    groups
        .into_iter()
        .map(|(key, pts)| {
            let values: Vec<f64> = pts.iter().map(|p| p.1).collect();
            GroupTrend {
                key,
                run_ids: pts.iter().map(|p| p.0).collect(),
                trend: trend(&values, tolerance_pct),
            }
        })
        .collect()
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
    emit(&node_text(&report))?;
    Ok(())
}

fn node_text(report: &NodeReport) -> String {
    let mut out = format!(
        "node {}: out-of-place busbw {}, oldest first\n",
        report.node,
        report
            .size_bytes
            .map_or("at each run's largest size".into(), |s| format!(
                "at {}",
                format_size(s)
            ))
    );
    let columns = [
        ("RUN", Align::Right),
        ("WHEN (UTC)", Align::Left),
        ("COLLECTIVE", Align::Left),
        ("VARIANT", Align::Left),
        ("N", Align::Right),
        ("STATUS", Align::Left),
        ("SIZE", Align::Right),
        ("TYPE", Align::Left),
        ("BUSBW", Align::Right),
        ("LAUNCHER", Align::Left),
    ];
    let rows: Vec<Vec<String>> = report
        .runs
        .iter()
        .map(|p| {
            vec![
                p.point.run_id.to_string(),
                short_time(&p.point.at),
                p.point.collective.clone(),
                or_dash(p.point.variant.as_deref()),
                p.point.node_count.map_or("-".into(), |n| n.to_string()),
                p.point.status.to_string(),
                format_size(p.point.size_bytes),
                p.point.dtype.clone(),
                gbps(p.point.busbw),
                launcher_cell(&p.launcher, p.replay_of.is_some()),
            ]
        })
        .collect();
    out.push_str(&render_table(&columns, &rows));
    let replays = report
        .runs
        .iter()
        .filter_map(|p| Some((p.point.run_id, p.replay_of.as_deref()?)));
    let footnote = replay_footnote(replays);
    if !footnote.is_empty() {
        out.push_str(&footnote);
        out.push_str("replays are left out of the trend\n");
    }
    if !report.checks.is_empty() {
        out.push_str("\nvalidation results:\n");
        let mut columns = vec![
            ("RUN", Align::Right),
            ("WHEN (UTC)", Align::Left),
            ("COLLECTIVE", Align::Left),
        ];
        columns.extend(NODE_RESULT_COLUMNS);
        let rows: Vec<Vec<String>> = report
            .checks
            .iter()
            .map(|c| {
                let mut cells = vec![
                    c.run_id.to_string(),
                    short_time(&c.at),
                    c.collective.clone(),
                ];
                cells.extend(node_result_cells(&c.result));
                cells
            })
            .collect();
        out.push_str(&render_table(&columns, &rows));
    }
    out.push('\n');
    if report.trends.is_empty() {
        out.push_str("trend: no ok measurements to judge\n");
    }
    for g in &report.trends {
        let what = format!(
            "{} {} {}, variant {}, {} node(s)",
            g.key.collective,
            format_size(g.key.size_bytes),
            g.key.dtype,
            g.key.variant.as_deref().unwrap_or("-"),
            g.key.node_count.map_or("?".into(), |n| n.to_string()),
        );
        let verdict = match &g.trend {
            Trend::TooFew { points, needed } => {
                format!("not judged ({points} ok measurement(s), {needed} needed)")
            }
            Trend::Steady { earlier_median } => format!(
                "steady (earlier median {earlier_median:.2} GB/s, tolerance {}%)",
                report.tolerance_pct
            ),
            Trend::Downward {
                earlier_median,
                drops_pct,
            } => {
                let drops: Vec<String> = drops_pct.iter().map(|d| format!("{d:.1}%")).collect();
                format!(
                    "DOWNWARD: the last {} runs are {} below the earlier median {earlier_median:.2} GB/s (tolerance {}%)",
                    drops_pct.len(),
                    drops.join(", "),
                    report.tolerance_pct
                )
            }
        };
        out.push_str(&format!("trend {what}: {verdict}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Out-of-place busbw at 8 GiB of h200x2-nvlink/all_reduce_g2.txt (343.64) and
    // h200x2-degraded/all_reduce_g2_clean.txt (346.51), tests/fixtures/nccl-tests/.
    const HEALTHY: [f64; 5] = [343.64, 346.51, 343.64, 346.51, 343.64];

    #[test]
    fn groups_leave_out_replays_and_failed_runs() {
        let point = |id: RunId, busbw: f64, status: RunStatus, replay: bool| Point {
            point: NodeRunPoint {
                run_id: id,
                at: format!("2026-11-2{id}T00:00:00Z"),
                collective: "all_reduce".into(),
                cluster: None,
                variant: None,
                status,
                node_count: Some(1),
                size_bytes: 8 << 30,
                dtype: "float".into(),
                busbw: Some(busbw),
            },
            launcher: "import".into(),
            replay_of: replay.then(|| "h200x2-nvlink/all_reduce_g2.txt".into()),
        };
        let mut points: Vec<Point> = HEALTHY
            .iter()
            .enumerate()
            .map(|(i, b)| point(i as RunId + 1, *b, RunStatus::Ok, false))
            .collect();
        points.push(point(6, 100.0, RunStatus::Ok, false));
        points.push(point(7, 100.0, RunStatus::Ok, true));
        points.push(point(8, 100.0, RunStatus::Failed, false));
        points.push(point(9, 100.0, RunStatus::Ok, false));
        let groups = group_trends(&points, 5.0);
        assert_eq!(groups.len(), 1);
        // 7 (replay) and 8 (failed) are not measurements of the node's health.
        assert_eq!(groups[0].run_ids, [1, 2, 3, 4, 5, 6, 9]);
        // Only two low points among the measurements: not yet a trend.
        assert!(matches!(groups[0].trend, Trend::Steady { .. }));
    }
}
