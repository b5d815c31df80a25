//! `gpudirect report`: a self-contained HTML report with plots, from the history.
//!
//! Three questions, three plots (question 2 gets a second one when there are rail runs):
//!
//! 1. **Are these runs as fast as usual?** busbw against message size for the chosen runs,
//!    side by side on a log2 size axis (8 B .. 8 GiB), one line per run, with the baseline
//!    (the per-size median of recent `ok` runs of the same cluster, collective, node count
//!    and data type) drawn as a band of ± the tolerance.
//! 2. **Which node or link is slow?** A node x node heat map of the pairwise numbers that
//!    validation records with a run (`node_results` with a partner). Cells without data
//!    stay blank. [`heat_matrix`] builds it from plain `(node, partner, busbw)` triples,
//!    so a caller that has fresh pair results can draw it without the history.
//!    Rail runs (`gpudirect validate --test rails`, collective [`RAIL_COLLECTIVE`]) get a
//!    node x rail map of their own instead ([`rail_map`]): what each node sent on each
//!    data NIC, so a slow or dead NIC is one low or blank cell in its node's row.
//! 3. **Is a node getting slower?** A node's busbw over time (`node_history`), with each
//!    point that dropped below the median of the node's previous runs marked.
//!
//! The terminal gets [`terminal_table`]: one line per run with its verdict against its
//! baseline, by the rule of [`crate::baseline`] (the one `gpudirect compare` uses); the
//! baseline bands drawn in the plots are the report's own.
//!
//! # Layout
//! - this file: the data (pure types and functions: series, baselines, verdicts, the heat
//!   matrix, the rail map, drop detection, formatting) and [`gather`], the one function
//!   that reads the history;
//! - [`plots`]: drawing with `plotters` into SVG strings and PNG files;
//! - [`html`]: the HTML page, with every plot inlined (SVG) or embedded (base64 PNG), so
//!   that the one file can be mailed or attached to a ticket and still show everything.
//!
//! # Replays are labelled
//! A run whose output came from the nccl-tests stand-in (`env` holds
//! `GPUDIRECT_STANDIN_REPLAY`) repeats a recording; it measured nothing here. Every place
//! that shows such a run (legend, table, HTML) says [`REPLAY_LABEL`], and baselines are
//! built from replays only for replays, never mixed with measurements.
//!
//! # Drawing fresh pair results (validation)
//! ```no_run
//! use gpudirect::report::{heat_matrix, write_report, ReportData, ReportFormat};
//! # fn main() -> Result<(), gpudirect::report::ReportError> {
//! let pairs = [("gpu01", "gpu02", 41.8), ("gpu03", "gpu04", 29.0), ("gpu01", "gpu03", 30.2)];
//! let mut heat = heat_matrix(pairs);
//! heat.size_bytes = Some(1 << 30);
//! let data = ReportData { heat: Some(heat), tolerance_pct: 5.0, ..ReportData::default() };
//! let files = write_report(&data, std::path::Path::new("validate-report"), ReportFormat::Both)?;
//! println!("{}", files.html.display());
//! # Ok(()) }
//! ```
//!
//! # Odd data
//! NaN or missing busbw leaves a gap, a single point is drawn as a point, a heat map of
//! hundreds of nodes thins its labels, and zero runs is an error that says what to pass.

pub mod html;
pub mod plots;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Serialize;

pub use crate::baseline::{flag_drops, DROP_WINDOW};
use crate::baseline::{judge_against_baseline, median, CompareOptions};
use crate::history::{
    History, HistoryError, NodeResult, Placement, RunDetail, RunFilter, RunId, RunKey, RunStatus,
    REPLAY_ENV,
};
use crate::units::{format_rfc3339, human_size, now_unix, parse_rfc3339, short_time};
pub use crate::validate::rails::rail_of_role;
use crate::validate::rails::RAIL_COLLECTIVE;

/// What every replayed run is labelled with, wherever it is shown.
pub const REPLAY_LABEL: &str = "replay, not a measurement";

/// Everything that can go wrong while making a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The selection matched no run.
    #[error("no runs to report on: {what}; `gpudirect history` lists the ids, then pass --runs 3,5,9 or --last N")]
    NoRuns {
        /// What was asked for.
        what: String,
    },
    /// An option is out of range.
    #[error("invalid report option {option}: {reason}")]
    InvalidOption {
        /// The option, e.g. `--tolerance`.
        option: &'static str,
        /// Why.
        reason: String,
    },
    /// Reading the history failed.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// The plotting library failed (font, backend, encoder).
    #[error("drawing {plot} failed: {reason}")]
    Plot {
        /// Which plot.
        plot: &'static str,
        /// The library's message.
        reason: String,
    },
    /// Writing a file failed.
    #[error("cannot write {}: {source}; choose another folder for the report", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Which image files the report writes (the HTML is always written).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportFormat {
    /// PNG files; the HTML embeds them as base64.
    Png,
    /// SVG files; the HTML inlines them.
    Svg,
    /// Both; the HTML inlines the SVGs.
    #[default]
    Both,
}

impl ReportFormat {
    /// True when PNG files are written.
    pub fn png(self) -> bool {
        matches!(self, ReportFormat::Png | ReportFormat::Both)
    }
    /// True when SVG files are written.
    pub fn svg(self) -> bool {
        matches!(self, ReportFormat::Svg | ReportFormat::Both)
    }
}

impl FromStr for ReportFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "png" => Ok(ReportFormat::Png),
            "svg" => Ok(ReportFormat::Svg),
            "both" => Ok(ReportFormat::Both),
            _ => Err(format!("unknown format `{s}`: expected png, svg or both")),
        }
    }
}

/// One point of a busbw-vs-size curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SizePoint {
    /// Message size, bytes.
    pub size_bytes: u64,
    /// Out-of-place busbw, GB/s; `None` where the run printed no number (or NaN).
    pub busbw: Option<f64>,
}

/// A run as the report draws it: its out-of-place curve and what the legend says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSeries {
    /// Run id.
    pub run_id: RunId,
    /// Run time, RFC 3339 UTC.
    pub at: String,
    /// Cluster.
    pub cluster: Option<String>,
    /// Collective.
    pub collective: String,
    /// Environment variant.
    pub variant: Option<String>,
    /// Node count.
    pub node_count: Option<u32>,
    /// Total ranks.
    pub total_ranks: Option<u32>,
    /// Outcome as the checks judged it.
    pub status: RunStatus,
    /// The recording a stand-in replayed, when this run is a replay.
    pub replay: Option<String>,
    /// The data type drawn (a run with `-d all` has several; the first one is drawn).
    pub dtype: String,
    /// The node's line rate in GB/s recorded with the run (its profile's line_rate_gbit).
    pub line_rate_gbps: Option<f64>,
    /// One point per size, ascending.
    pub points: Vec<SizePoint>,
}

impl RunSeries {
    /// The key of the band drawn for this run: the verdict's key ([`crate::baseline`]),
    /// with the data type drawn and the replay marking.
    pub fn band_key(&self) -> BaselineKey {
        RunKey {
            collective: self.collective.clone(),
            cluster: self.cluster.clone(),
            node_count: self.node_count,
            total_ranks: self.total_ranks,
            variant: self.variant.clone(),
        }
        .band(&self.dtype, self.replay.is_some())
    }

    /// The curve of a stored run: out-of-place rows of the run's first data type and
    /// reduction op, one point per size (the median when the table repeats, `-N`).
    pub fn from_detail(detail: &RunDetail) -> RunSeries {
        let first = detail.rows.iter().find(|r| r.placement == Placement::Out);
        let (dtype, redop) = first
            .map(|r| (r.dtype.clone(), r.redop.clone()))
            .unwrap_or_default();
        let mut by_size: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for r in &detail.rows {
            if r.placement != Placement::Out || r.dtype != dtype || r.redop != redop {
                continue;
            }
            let values = by_size.entry(r.size_bytes).or_default();
            if let Some(b) = r.busbw.filter(|b| b.is_finite()) {
                values.push(b);
            }
        }
        let s = &detail.summary;
        RunSeries {
            run_id: s.id,
            at: s.at.clone(),
            cluster: s.cluster.clone(),
            collective: s.collective.clone(),
            variant: s.variant.clone(),
            node_count: s.node_count,
            total_ranks: s.total_ranks,
            status: s.status,
            replay: detail.provenance.env.get(REPLAY_ENV).cloned(),
            dtype,
            line_rate_gbps: s.line_rate_gbps,
            points: by_size
                .into_iter()
                .map(|(size_bytes, v)| SizePoint {
                    size_bytes,
                    busbw: median(&v),
                })
                .collect(),
        }
    }

    /// The legend text: run id, collective, variant, nodes, and the replay label.
    pub fn label(&self) -> String {
        let mut label = format!("run {} {}", self.run_id, self.collective);
        if let Some(v) = &self.variant {
            let _ = write!(label, " [{v}]");
        }
        if let Some(n) = self.node_count {
            let _ = write!(label, ", {n} node{}", if n == 1 { "" } else { "s" });
        }
        if self.status != RunStatus::Ok {
            let _ = write!(label, ", {}", self.status);
        }
        if self.replay.is_some() {
            let _ = write!(label, " ({REPLAY_LABEL})");
        }
        label
    }

    /// The largest size with a number, and that number.
    pub fn at_largest_size(&self) -> Option<(u64, f64)> {
        self.points
            .iter()
            .rev()
            .find_map(|p| p.busbw.map(|b| (p.size_bytes, b)))
    }
}

/// What a baseline band is the band of: the runs' comparability key ([`crate::baseline::Key`],
/// the one the verdict uses) with the data type drawn and the replay marking.
pub use crate::baseline::BandKey as BaselineKey;

/// The baseline band: per size, the median busbw of recent `ok` runs of one kind (the
/// verdict's key: same collective, cluster, node count, total ranks and variant; and the
/// same data type, replays only for replays).
/// The runs being reported on count too when they are among the newest: a median is not
/// moved much by one bad run, and a history of a few runs still gets a band.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineBand {
    /// What it is the baseline of.
    pub key: BaselineKey,
    /// The runs it was built from, newest first.
    pub run_ids: Vec<RunId>,
    /// Built from the reported runs themselves (the history had no other run of the
    /// kind).
    pub from_report: bool,
    /// `(size, median busbw)`, ascending by size.
    pub points: Vec<(u64, f64)>,
    /// Half-width of the band, percent of the median.
    pub tolerance_pct: f64,
}

impl BaselineBand {
    /// The legend text.
    pub fn label(&self) -> String {
        let k = &self.key.run;
        let mut label = format!(
            "baseline {}{}{}: median of {} {}ok run{} ±{}%",
            k.collective,
            k.variant
                .as_ref()
                .map(|v| format!(" [{v}]"))
                .unwrap_or_default(),
            k.node_count
                .map(|n| format!(", {n} node{}", if n == 1 { "" } else { "s" }))
                .unwrap_or_default(),
            self.run_ids.len(),
            if self.from_report { "shown " } else { "other " },
            if self.run_ids.len() == 1 { "" } else { "s" },
            self.tolerance_pct
        );
        if self.key.replay {
            let _ = write!(label, " ({REPLAY_LABEL})");
        }
        label
    }

    /// The median at one size, if the baseline has it.
    pub fn at(&self, size_bytes: u64) -> Option<f64> {
        self.points
            .iter()
            .find(|(s, _)| *s == size_bytes)
            .map(|(_, b)| *b)
    }
}

/// Per size, the median of the given runs' values (pure). Sizes where no run has a
/// finite value are left out.
pub fn baseline_points(runs: &[&[SizePoint]]) -> Vec<(u64, f64)> {
    let mut by_size: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for points in runs {
        for p in *points {
            if let Some(b) = p.busbw.filter(|b| b.is_finite()) {
                by_size.entry(p.size_bytes).or_default().push(b);
            }
        }
    }
    by_size
        .into_iter()
        .filter_map(|(s, v)| median(&v).map(|m| (s, m)))
        .collect()
}

pub use crate::baseline::RunVerdict;

/// A node x node matrix of pair bandwidths. Row and column `i` are `nodes[i]`;
/// `values[i][j]` is the busbw measured between `nodes[i]` and `nodes[j]` (symmetric),
/// `None` where that pair was not measured (and on the diagonal).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HeatMap {
    /// Nodes, in natural order (`gpu2` before `gpu10`).
    pub nodes: Vec<String>,
    /// `nodes.len()` rows of `nodes.len()` cells.
    pub values: Vec<Vec<Option<f64>>>,
    /// The message size the numbers were read at, if known.
    pub size_bytes: Option<u64>,
    /// Some numbers come from stand-in replays: the plot then says [`REPLAY_LABEL`].
    pub replay: bool,
}

impl HeatMap {
    /// Per node, the median of its pairs (`None` for a node without any), in `nodes` order.
    pub fn node_medians(&self) -> Vec<(String, Option<f64>)> {
        self.nodes
            .iter()
            .zip(&self.values)
            .map(|(n, row)| {
                let v: Vec<f64> = row.iter().flatten().copied().collect();
                (n.clone(), median(&v))
            })
            .collect()
    }

    /// The colour scale's 100%: the 90th percentile of all pairs (nearest rank). Not the
    /// median: on a small cluster with one slow node most pairs include it, and the slow
    /// pairs would look normal.
    pub fn reference(&self) -> Option<f64> {
        let mut v: Vec<f64> = self
            .values
            .iter()
            .flatten()
            .flatten()
            .copied()
            .filter(|x| x.is_finite())
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let rank = ((0.9 * v.len() as f64).ceil() as usize).clamp(1, v.len());
        Some(v[rank - 1])
    }

    /// The median of all pairs.
    pub fn overall_median(&self) -> Option<f64> {
        let v: Vec<f64> = self.values.iter().flatten().flatten().copied().collect();
        median(&v)
    }

    /// Up to `n` nodes, slowest first (by the median of their pairs); nodes without
    /// data are left out.
    pub fn slowest(&self, n: usize) -> Vec<String> {
        let mut m: Vec<(String, f64)> = self
            .node_medians()
            .into_iter()
            .filter_map(|(node, v)| v.map(|v| (node, v)))
            .collect();
        m.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| natural_cmp(&a.0, &b.0)));
        m.into_iter().take(n).map(|(node, _)| node).collect()
    }
}

/// Builds the heat matrix from `(node, partner, busbw)` triples (pure).
///
/// Both orders of a pair fill the same two cells; several numbers for one pair (both
/// ends reported it, or a second pass re-measured it) give their median. Non-finite
/// numbers and a node paired with itself are ignored; a node seen only there still gets
/// its (blank) row.
pub fn heat_matrix<'a, I>(triples: I) -> HeatMap
where
    I: IntoIterator<Item = (&'a str, &'a str, f64)>,
{
    let mut nodes: BTreeSet<&str> = BTreeSet::new();
    let mut pairs: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
    for (a, b, busbw) in triples {
        nodes.insert(a);
        nodes.insert(b);
        if a == b || !busbw.is_finite() {
            continue;
        }
        let key = if a < b { (a, b) } else { (b, a) };
        pairs.entry(key).or_default().push(busbw);
    }
    let mut nodes: Vec<&str> = nodes.into_iter().collect();
    nodes.sort_by(|a, b| natural_cmp(a, b));
    let index: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let n = nodes.len();
    let mut values = vec![vec![None; n]; n];
    for ((a, b), v) in pairs {
        if let (Some(&i), Some(&j), Some(m)) = (index.get(a), index.get(b), median(&v)) {
            values[i][j] = Some(m);
            values[j][i] = Some(m);
        }
    }
    HeatMap {
        nodes: nodes.into_iter().map(str::to_string).collect(),
        values,
        size_bytes: None,
        replay: false,
    }
}

/// The pair triples in stored node results, at one size: the largest size present
/// (results without a size count as that size). Results without a partner or a finite
/// busbw are skipped.
pub fn heat_triples(results: &[NodeResult]) -> (Vec<(String, String, f64)>, Option<u64>) {
    let usable = || {
        results
            .iter()
            .filter(|r| r.partner.is_some() && r.busbw.is_some_and(f64::is_finite))
    };
    let size = usable().filter_map(|r| r.size_bytes).max();
    let triples = usable()
        .filter(|r| r.size_bytes.is_none() || r.size_bytes == size)
        .filter_map(|r| Some((r.node.clone(), r.partner.clone()?, r.busbw?)))
        .collect();
    (triples, size)
}

/// A node x rail matrix: per node and data NIC ("rail"), what the node sent to its
/// partners over that rail (`gpudirect validate --test rails`). Row `i` is `nodes[i]`,
/// column `k` is `rails[k]`; `values[i][k]` is `None` where that node sent nothing
/// measured on that rail (its pairs there failed, or it was not paired there).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RailMap {
    /// Nodes, in natural order (`gpu2` before `gpu10`).
    pub nodes: Vec<String>,
    /// Rails (data NIC names), in natural order (`eth2` before `eth10`).
    pub rails: Vec<String>,
    /// `nodes.len()` rows of `rails.len()` cells, GB/s.
    pub values: Vec<Vec<Option<f64>>>,
    /// The message size the numbers were read at, if known.
    pub size_bytes: Option<u64>,
}

impl RailMap {
    /// The median of all measured cells, named under the colour scale (each column is
    /// drawn against its own rail's median, [`RailMap::rail_medians`]).
    ///
    /// Medians, not the pair map's 90th percentile: here every rail of every node is its
    /// own cell, so a slow or dead NIC spoils one cell in `nodes x rails` rather than most
    /// pairs of a small cluster, and the median is a healthy NIC that every other should
    /// match.
    pub fn reference(&self) -> Option<f64> {
        let v: Vec<f64> = self.values.iter().flatten().flatten().copied().collect();
        median(&v)
    }

    /// Per rail, the median of its measured cells (`None` for a rail with none): what the
    /// plot draws as 100% in that rail's column.
    pub fn rail_medians(&self) -> Vec<Option<f64>> {
        (0..self.rails.len())
            .map(|j| {
                let column: Vec<f64> = self
                    .values
                    .iter()
                    .filter_map(|row| row.get(j).copied().flatten())
                    .collect();
                median(&column)
            })
            .collect()
    }
}

/// Builds the node x rail matrix from the node results of rail runs (pure).
///
/// A cell is the median of what the node sent on that rail (roles `rail ethK send`) at
/// the largest size present (results without a size count as that size). A node or rail
/// seen only in results without a finite number (failed pairs, role `rail ethK`, or a
/// smaller size) still gets its row or column, blank: a dead NIC shows as a gap rather
/// than vanishing. Results whose role names no rail are ignored; `None` when no result
/// names one.
pub fn rail_map(results: &[NodeResult]) -> Option<RailMap> {
    let mut nodes: BTreeSet<&str> = BTreeSet::new();
    let mut rails: BTreeSet<&str> = BTreeSet::new();
    // (node, rail, busbw, size) of every number a node sent.
    let mut sent = Vec::new();
    for r in results {
        let Some((rail, is_send)) = r.role.as_deref().and_then(rail_of_role) else {
            continue;
        };
        nodes.insert(&r.node);
        rails.insert(rail);
        if let Some(busbw) = r.busbw.filter(|b| is_send && b.is_finite()) {
            sent.push((r.node.as_str(), rail, busbw, r.size_bytes));
        }
    }
    if nodes.is_empty() {
        return None;
    }
    let size = sent.iter().filter_map(|s| s.3).max();
    let mut cells: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
    for (node, rail, busbw, at) in sent {
        if at.is_none() || at == size {
            cells.entry((node, rail)).or_default().push(busbw);
        }
    }
    let mut nodes: Vec<&str> = nodes.into_iter().collect();
    nodes.sort_by(|a, b| natural_cmp(a, b));
    let mut rails: Vec<&str> = rails.into_iter().collect();
    rails.sort_by(|a, b| natural_cmp(a, b));
    let values = nodes
        .iter()
        .map(|node| {
            rails
                .iter()
                .map(|rail| cells.get(&(*node, *rail)).and_then(|v| median(v)))
                .collect()
        })
        .collect();
    Some(RailMap {
        nodes: nodes.into_iter().map(str::to_string).collect(),
        rails: rails.into_iter().map(str::to_string).collect(),
        values,
        size_bytes: size,
    })
}

/// One point of a node's busbw over time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrendPoint {
    /// Run id.
    pub run_id: RunId,
    /// Run time, RFC 3339 UTC.
    pub at: String,
    /// Run time, unix seconds.
    pub unix: i64,
    /// busbw, GB/s.
    pub busbw: f64,
    /// The run is a stand-in replay.
    pub replay: bool,
    /// Dropped below the median of the previous runs by more than the tolerance.
    pub drop: bool,
}

/// A node's numbers over time, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeTrend {
    /// The node.
    pub node: String,
    /// The message size its runs were read at.
    pub size_bytes: Option<u64>,
    /// From the runs that included the node.
    pub runs: Vec<TrendPoint>,
    /// From validation's per-node results (pairs), if any.
    pub checks: Vec<TrendPoint>,
}

/// Which runs to report on.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// These run ids, in this order.
    Runs(Vec<RunId>),
    /// The newest `n` runs, optionally of one collective.
    Last {
        /// How many.
        n: u32,
        /// Only this collective.
        collective: Option<String>,
    },
}

/// What [`gather`] reads and how it judges.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    /// The runs.
    pub selection: Selection,
    /// Nodes whose busbw over time to draw; empty: the slowest nodes of the heat map, else
    /// the nodes of the runs (at most [`ReportOptions::max_trend_nodes`]).
    pub nodes: Vec<String>,
    /// Size at which node trends are read; default: the largest size in the selected
    /// runs that included the node.
    pub size_bytes: Option<u64>,
    /// Band half-width and verdict threshold, percent.
    pub tolerance_pct: f64,
    /// How many recent ok runs a baseline is the median of.
    pub baseline_runs: u32,
    /// Most nodes drawn over time when none are named.
    pub max_trend_nodes: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            selection: Selection::Last {
                n: 5,
                collective: None,
            },
            nodes: Vec::new(),
            size_bytes: None,
            tolerance_pct: 5.0,
            baseline_runs: 10,
            max_trend_nodes: 8,
        }
    }
}

/// Everything a report shows; [`gather`] fills it from the history, and a caller with
/// its own numbers (e.g. validation) may fill it directly.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReportData {
    /// When the report was made, RFC 3339 UTC.
    pub generated_at: String,
    /// The history file, as shown in the report.
    pub history: Option<String>,
    /// The runs, in the order asked for.
    pub runs: Vec<RunSeries>,
    /// One baseline per kind of run present (and found).
    pub bands: Vec<BaselineBand>,
    /// One verdict per run, in `runs` order.
    pub verdicts: Vec<RunVerdict>,
    /// The pairwise heat map, when the runs recorded pairs.
    pub heat: Option<HeatMap>,
    /// The node x rail map, when the runs include rail runs (`validate --test rails`).
    pub rail_map: Option<RailMap>,
    /// Nodes over time.
    pub trends: Vec<NodeTrend>,
    /// The collective the trends were read for (`None`: all).
    pub trend_collective: Option<String>,
    /// Band half-width and verdict threshold, percent.
    pub tolerance_pct: f64,
    /// Things the reader should know (nodes left out, baselines not found, ...).
    pub notes: Vec<String>,
}

impl ReportData {
    /// True when any run shown (as a curve or a trend point) is a stand-in replay.
    pub fn has_replays(&self) -> bool {
        self.runs.iter().any(|r| r.replay.is_some())
            || self.heat.as_ref().is_some_and(|h| h.replay)
            || self
                .trends
                .iter()
                .any(|t| t.runs.iter().chain(&t.checks).any(|p| p.replay))
    }
}

/// Reads the selected runs, their baselines, pair results and node histories.
pub fn gather(history: &History, opts: &ReportOptions) -> Result<ReportData, ReportError> {
    check_options(opts)?;
    let ids = select_runs(history, opts)?;
    let mut data = ReportData {
        generated_at: format_rfc3339(now_unix()),
        history: Some(history.path().display().to_string()),
        tolerance_pct: opts.tolerance_pct,
        ..ReportData::default()
    };
    let run_nodes = read_runs(history, &ids, &mut data)?;
    add_baselines(history, opts, &mut data)?;
    add_verdicts(history, opts, &mut data)?;
    add_trends(history, opts, &run_nodes, &mut data)?;
    Ok(data)
}

/// Refuses a tolerance that is not a percentage and a baseline of no runs.
fn check_options(opts: &ReportOptions) -> Result<(), ReportError> {
    if !opts.tolerance_pct.is_finite() || opts.tolerance_pct < 0.0 {
        return Err(ReportError::InvalidOption {
            option: "--tolerance",
            reason: format!(
                "{} is not a percentage >= 0 (write 5 for 5 %)",
                opts.tolerance_pct
            ),
        });
    }
    if opts.baseline_runs == 0 {
        return Err(ReportError::InvalidOption {
            option: "--baseline-runs",
            reason: "0 runs make no baseline; use at least 1".into(),
        });
    }
    Ok(())
}

/// The runs the report is about: those named (each once), or the history's last `n`,
/// oldest first.
fn select_runs(history: &History, opts: &ReportOptions) -> Result<Vec<RunId>, ReportError> {
    Ok(match &opts.selection {
        Selection::Runs(ids) if ids.is_empty() => {
            return Err(ReportError::NoRuns {
                what: "--runs named none".into(),
            })
        }
        Selection::Runs(ids) => {
            let mut seen = BTreeSet::new();
            ids.iter().copied().filter(|id| seen.insert(*id)).collect()
        }
        Selection::Last { n, collective } => {
            let filter = RunFilter {
                collective: collective.clone(),
                limit: Some(*n),
                ..RunFilter::default()
            };
            let mut ids: Vec<RunId> = history.list_runs(&filter)?.iter().map(|r| r.id).collect();
            if ids.is_empty() {
                return Err(ReportError::NoRuns {
                    what: match collective {
                        Some(c) => format!("the history has no runs of {c}"),
                        None => "the history has no runs".into(),
                    },
                });
            }
            // Oldest first reads naturally in a legend and a table.
            ids.reverse();
            ids
        }
    })
}

/// Reads each run into `data`, with the heat map and the node x rail map from the pairs
/// recorded with them; returns each node of the runs, with the largest size measured in a
/// run that included it.
fn read_runs(
    history: &History,
    ids: &[RunId],
    data: &mut ReportData,
) -> Result<BTreeMap<String, Option<u64>>, ReportError> {
    let mut node_results = Vec::new();
    let mut rail_results = Vec::new();
    let mut pairs_replayed = false;
    // Each node of the runs, with the largest size measured in a run that included it.
    let mut run_nodes: BTreeMap<String, Option<u64>> = BTreeMap::new();
    for id in ids {
        let detail = history.get_run(*id)?;
        // A rail run's pairs are one NIC's host-memory traffic, not comparable with
        // nccl-tests pairs: they go to the node x rail map only.
        if detail.summary.collective == RAIL_COLLECTIVE {
            rail_results.extend(detail.node_results.iter().cloned());
        } else {
            node_results.extend(detail.node_results.iter().cloned());
        }
        let series = RunSeries::from_detail(&detail);
        pairs_replayed |= series.replay.is_some() && !detail.node_results.is_empty();
        let largest = series.at_largest_size().map(|(s, _)| s);
        for node in &detail.nodes {
            let entry = run_nodes.entry(node.clone()).or_default();
            *entry = (*entry).max(largest);
        }
        data.runs.push(series);
    }

    // The heat map, from pairs recorded with the runs.
    let (triples, size) = heat_triples(&node_results);
    if !triples.is_empty() {
        let mut heat = heat_matrix(triples.iter().map(|(a, b, v)| (a.as_str(), b.as_str(), *v)));
        heat.size_bytes = size;
        heat.replay = pairs_replayed;
        data.heat = Some(heat);
    }
    data.rail_map = rail_map(&rail_results);
    Ok(run_nodes)
}

/// A baseline band per kind of run, or a note that says why a kind has none.
fn add_baselines(
    history: &History,
    opts: &ReportOptions,
    data: &mut ReportData,
) -> Result<(), ReportError> {
    // Baselines, one per kind of run.
    let keys: BTreeSet<BaselineKey> = data.runs.iter().map(RunSeries::band_key).collect();
    for key in keys {
        match baseline_band(
            history,
            &key,
            &data.runs,
            opts.baseline_runs,
            opts.tolerance_pct,
        )? {
            Some(band) => data.bands.push(band),
            None => data.notes.push(format!(
                "no baseline for {} on {} (cluster {}, variant {}, {}): no other ok run of \
                     that kind in the history, and fewer than {MIN_SELF_BASELINE} in this report",
                key.run.collective,
                key.run.node_count.map_or("? nodes".into(), |n| format!(
                    "{n} node{}",
                    if n == 1 { "" } else { "s" }
                )),
                key.run.cluster.as_deref().unwrap_or("none"),
                key.run.variant.as_deref().unwrap_or("none"),
                if key.replay {
                    "replays"
                } else {
                    "measurements"
                },
            )),
        }
    }
    Ok(())
}

/// Each run's verdict against its baseline.
fn add_verdicts(
    history: &History,
    opts: &ReportOptions,
    data: &mut ReportData,
) -> Result<(), ReportError> {
    // Each run's verdict is `compare RUN --baseline`'s (crate::baseline): the bands above are
    // what the plots draw, not what decides.
    let compare = CompareOptions {
        tolerance_pct: opts.tolerance_pct,
        ..CompareOptions::default()
    };
    data.verdicts = data
        .runs
        .iter()
        .map(|r| {
            judge_against_baseline(
                history,
                r.run_id,
                r.status,
                r.at_largest_size(),
                opts.baseline_runs,
                compare,
            )
        })
        .collect::<Result<_, _>>()?;
    Ok(())
}

/// The nodes whose busbw over time is drawn: those named with `--node`, or else the
/// slowest in the heat map (or the first in name order), at most `max_trend_nodes`.
fn trend_nodes(
    opts: &ReportOptions,
    run_nodes: &BTreeMap<String, Option<u64>>,
    data: &mut ReportData,
) -> Vec<String> {
    let mut nodes = opts.nodes.clone();
    if nodes.is_empty() {
        let candidates: Vec<String> = match &data.heat {
            Some(heat) => heat.slowest(usize::MAX),
            None => {
                let mut n: Vec<String> = run_nodes.keys().cloned().collect();
                n.sort_by(|a, b| natural_cmp(a, b));
                n
            }
        };
        if candidates.len() > opts.max_trend_nodes {
            data.notes.push(format!(
                "busbw over time is drawn for {} of {} nodes ({}); name others with --node",
                opts.max_trend_nodes,
                candidates.len(),
                if data.heat.is_some() {
                    "the slowest in the heat map"
                } else {
                    "the first in name order"
                }
            ));
        }
        nodes = candidates.into_iter().take(opts.max_trend_nodes).collect();
    }
    nodes
}

/// Nodes over time: each trend node's runs (drops flagged) and pair checks.
fn add_trends(
    history: &History,
    opts: &ReportOptions,
    run_nodes: &BTreeMap<String, Option<u64>>,
    data: &mut ReportData,
) -> Result<(), ReportError> {
    let nodes = trend_nodes(opts, run_nodes, data);
    let collectives: BTreeSet<&str> = data.runs.iter().map(|r| r.collective.as_str()).collect();
    data.trend_collective = match (&opts.selection, collectives.len()) {
        (
            Selection::Last {
                collective: Some(c),
                ..
            },
            _,
        ) => Some(c.clone()),
        (_, 1) => collectives.iter().next().map(|c| c.to_string()),
        _ => None,
    };
    let largest_overall = data
        .runs
        .iter()
        .filter_map(|r| r.at_largest_size().map(|(s, _)| s))
        .max();
    let mut replay_cache: BTreeMap<RunId, bool> = BTreeMap::new();
    for node in nodes {
        let size = opts
            .size_bytes
            .or_else(|| run_nodes.get(&node).copied().flatten())
            .or(largest_overall);
        let h = history.node_history(&node, data.trend_collective.as_deref(), size)?;
        let mut runs = trend_points(
            history,
            &mut replay_cache,
            h.runs.iter().map(|p| (p.run_id, p.at.as_str(), p.busbw)),
        )?;
        let values: Vec<f64> = runs.iter().map(|p| p.busbw).collect();
        for (p, d) in runs
            .iter_mut()
            .zip(flag_drops(&values, DROP_WINDOW, opts.tolerance_pct))
        {
            p.drop = d;
        }
        let checks = trend_points(
            history,
            &mut replay_cache,
            h.checks
                .iter()
                .map(|c| (c.run_id, c.at.as_str(), c.result.busbw)),
        )?;
        data.trends.push(NodeTrend {
            node: h.node,
            size_bytes: size,
            runs,
            checks,
        });
    }
    Ok(())
}

/// A node's numbers, `(run, at, busbw)`, as trend points (none flagged a drop yet); a
/// number without a finite busbw is left out.
fn trend_points<'a>(
    history: &History,
    replay_cache: &mut BTreeMap<RunId, bool>,
    numbers: impl Iterator<Item = (RunId, &'a str, Option<f64>)>,
) -> Result<Vec<TrendPoint>, ReportError> {
    let mut points = Vec::new();
    for (run_id, at, busbw) in numbers {
        let Some(busbw) = busbw.filter(|b| b.is_finite()) else {
            continue;
        };
        points.push(TrendPoint {
            run_id,
            unix: parse_rfc3339(at).unwrap_or(0),
            at: at.to_string(),
            busbw,
            replay: is_replay(history, replay_cache, run_id)?,
            drop: false,
        });
    }
    Ok(points)
}

fn is_replay(
    history: &History,
    cache: &mut BTreeMap<RunId, bool>,
    id: RunId,
) -> Result<bool, ReportError> {
    if let Some(r) = cache.get(&id) {
        return Ok(*r);
    }
    let r = history.get_run(id)?.provenance.env.contains_key(REPLAY_ENV);
    cache.insert(id, r);
    Ok(r)
}

/// Fewest runs of the report itself that a baseline may be made of, when the history
/// has no other run of that kind: with three, no single run is its own median.
pub const MIN_SELF_BASELINE: usize = 3;

/// The newest `last_n` ok runs of one kind, and their per-size median.
///
/// Runs being reported on are left out, so that no run is judged against itself. When
/// the history has no other run of that kind, the reported runs of that kind make the
/// baseline if there are at least [`MIN_SELF_BASELINE`] of them (the band's label says
/// so); otherwise there is no baseline.
fn baseline_band(
    history: &History,
    key: &BaselineKey,
    reported: &[RunSeries],
    last_n: u32,
    tolerance_pct: f64,
) -> Result<Option<BaselineBand>, ReportError> {
    let filter = RunFilter {
        collective: Some(key.run.collective.clone()),
        status: Some(RunStatus::Ok),
        ..RunFilter::default()
    };
    let mut members = Vec::new();
    let mut from_report = false;
    for summary in history.list_runs(&filter)? {
        if members.len() >= last_n as usize {
            break;
        }
        if RunKey::of(&summary) != key.run || reported.iter().any(|r| r.run_id == summary.id) {
            continue;
        }
        let series = RunSeries::from_detail(&history.get_run(summary.id)?);
        if series.band_key() == *key {
            members.push(series);
        }
    }
    if members.is_empty() {
        let own: Vec<RunSeries> = reported
            .iter()
            .filter(|r| r.status == RunStatus::Ok && r.band_key() == *key)
            .take(last_n as usize)
            .cloned()
            .collect();
        if own.len() >= MIN_SELF_BASELINE {
            members = own;
            from_report = true;
        }
    }
    let points = baseline_points(
        &members
            .iter()
            .map(|m| m.points.as_slice())
            .collect::<Vec<_>>(),
    );
    if points.is_empty() {
        return Ok(None);
    }
    Ok(Some(BaselineBand {
        key: key.clone(),
        run_ids: members.iter().map(|m| m.run_id).collect(),
        from_report,
        points,
        tolerance_pct,
    }))
}

/// The compact terminal table: one line per run with its verdict (pure).
pub fn terminal_table(data: &ReportData) -> String {
    let header = [
        "run",
        "when",
        "collective",
        "variant",
        "nodes",
        "status",
        "size",
        "busbw",
        "baseline",
        "delta",
        "verdict",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for (run, v) in data.runs.iter().zip(&data.verdicts) {
        let mut verdict = v.verdict.clone();
        if run.replay.is_some() {
            let _ = write!(verdict, " ({REPLAY_LABEL})");
        }
        rows.push(vec![
            run.run_id.to_string(),
            short_time(&run.at),
            run.collective.clone(),
            run.variant.clone().unwrap_or_else(|| "-".into()),
            run.node_count.map_or("-".into(), |n| n.to_string()),
            run.status.to_string(),
            v.size_bytes.map_or("-".into(), human_size),
            v.busbw.map_or("-".into(), |b| format!("{b:.2}")),
            v.baseline.map_or("-".into(), |b| format!("{b:.2}")),
            v.delta_pct.map_or("-".into(), |d| format!("{d:+.1}%")),
            verdict,
        ]);
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    // Numbers right-aligned, words left-aligned; the last column is not padded.
    let right = [
        true, false, false, false, true, false, true, true, true, true, false,
    ];
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let pad = widths[i].saturating_sub(cell.chars().count());
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else if right[i] {
                l.push_str(&" ".repeat(pad));
                l.push_str(cell);
            } else {
                l.push_str(cell);
                l.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&header.map(String::from));
    for row in &rows {
        line(row);
    }
    let _ = writeln!(
        out,
        "busbw in GB/s at the largest size the run and its baseline share; verdict threshold ±{}%",
        data.tolerance_pct
    );
    for note in &data.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// The files a report wrote.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReportFiles {
    /// `DIR/index.html`.
    pub html: PathBuf,
    /// The PNG and SVG files, in the order written.
    pub images: Vec<PathBuf>,
}

/// Draws the plots, writes them and the HTML page into `dir` (created if needed).
pub fn write_report(
    data: &ReportData,
    dir: &Path,
    format: ReportFormat,
) -> Result<ReportFiles, ReportError> {
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReportError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(write_err(dir))?;
    let mut files = ReportFiles {
        html: dir.join("index.html"),
        images: Vec::new(),
    };
    let mut figures = Vec::new();
    for plot in plots::Plot::for_data(data) {
        let mut figure = html::Figure {
            plot,
            svg: None,
            png: None,
        };
        if format.svg() {
            let svg = plots::render_svg(plot, data)?;
            let path = dir.join(format!("{}.svg", plot.file_stem()));
            std::fs::write(&path, &svg).map_err(write_err(&path))?;
            files.images.push(path);
            figure.svg = Some(svg);
        }
        if format.png() {
            let path = dir.join(format!("{}.png", plot.file_stem()));
            plots::render_png(plot, data, &path)?;
            let bytes = std::fs::read(&path).map_err(write_err(&path))?;
            files.images.push(path);
            figure.png = Some(bytes);
        }
        figures.push(figure);
    }
    let page = html::page(data, &figures);
    std::fs::write(&files.html, page).map_err(write_err(&files.html))?;
    Ok(files)
}

/// Compares node names the way people number them: `gpu2` < `gpu10`.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for (x, y) in ca.iter().zip(&cb) {
        let ord = match (x, y) {
            ((true, x), (true, y)) => {
                let (tx, ty) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                tx.len()
                    .cmp(&ty.len())
                    .then_with(|| tx.cmp(ty))
                    .then_with(|| x.len().cmp(&y.len()))
            }
            ((_, x), (_, y)) => x.cmp(y),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    ca.len().cmp(&cb.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests;
