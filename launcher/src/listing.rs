//! What `gpudirect history` shows: the runs as a table, and a node's busbw over time
//! with each group's trend (the rule is [`crate::baseline::trend`]). Pure: the command reads
//! the history and prints.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::baseline::{trend, Trend};
use crate::history::{NodeCheckPoint, NodeRunPoint, RunId, RunStatus, RunSummary};
use crate::output::{
    gbps, node_result_cells, or_dash, render_table, replay_footnote, Align, NODE_RESULT_COLUMNS,
};
use crate::units::{human_size as format_size, short_time};

/// A point of a node's history, with its run's launcher and replay marking.
#[derive(Debug, Serialize)]
pub struct Point {
    #[serde(flatten)]
    pub point: NodeRunPoint,
    pub launcher: String,
    pub replay_of: Option<String>,
}

/// The key of a group of comparable points.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct GroupKey {
    pub collective: String,
    pub variant: Option<String>,
    pub node_count: Option<u32>,
    pub size_bytes: u64,
    pub dtype: String,
}

#[derive(Debug, Serialize)]
pub struct GroupTrend {
    #[serde(flatten)]
    pub key: GroupKey,
    /// Runs judged, oldest first.
    pub run_ids: Vec<RunId>,
    #[serde(flatten)]
    pub trend: Trend,
}

#[derive(Debug, Serialize)]
pub struct NodeReport {
    pub node: String,
    pub size_bytes: Option<u64>,
    pub tolerance_pct: f64,
    pub runs: Vec<Point>,
    pub checks: Vec<NodeCheckPoint>,
    pub trends: Vec<GroupTrend>,
}

/// The listed runs' replay markings, by id. The listing query reads them (one query for
/// the whole list, not one per run).
pub fn replays(runs: &[RunSummary]) -> HashMap<RunId, String> {
    runs.iter()
        .filter_map(|r| Some((r.id, r.replay_of.clone()?)))
        .collect()
}

pub fn launcher_cell(launcher: &str, replay: bool) -> String {
    if replay {
        format!("{launcher} (replay)")
    } else {
        launcher.to_string()
    }
}

pub fn runs_table(runs: &[RunSummary], replayed: &HashMap<RunId, String>) -> String {
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
pub fn group_trends(points: &[Point], tolerance_pct: f64) -> Vec<GroupTrend> {
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

pub fn node_text(report: &NodeReport) -> String {
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
