//! `gpudirect compare`'s report: the comparison with what makes it mean less, and its text
//! (the reference, the per-size table, the verdict per band). Pure: the command prints.

use serde::Serialize;

use crate::history::{BandResult, CompareRow, Comparison, Reference, RunSummary};
use crate::output::{gbps, line_share, render_table, Align};
use crate::units::human_size as format_size;

#[derive(Debug, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub comparison: Comparison,
    /// Things that make the comparison mean less (replays, different collectives, ...).
    pub notes: Vec<String>,
}

/// Why a comparison says less than it seems to. Pure.
pub fn notes(reference: &[RunSummary], candidate: &RunSummary) -> Vec<String> {
    let mut notes = Vec::new();
    for summary in reference.iter().chain(std::iter::once(candidate)) {
        if let Some(recording) = &summary.replay_of {
            notes.push(format!(
                "run {} is a stand-in replay of {recording}, not a measurement",
                summary.id
            ));
        }
    }
    let c = candidate;
    for r in reference {
        if r.collective != c.collective {
            notes.push(format!(
                "run {} is {} but run {} is {}: their busbw measure different things",
                r.id, r.collective, c.id, c.collective
            ));
        }
        if r.node_count != c.node_count || r.total_ranks != c.total_ranks {
            let shape = |s: &RunSummary| {
                format!(
                    "{} node(s), {} rank(s)",
                    s.node_count.map_or("?".into(), |n| n.to_string()),
                    s.total_ranks.map_or("?".into(), |n| n.to_string())
                )
            };
            notes.push(format!(
                "run {} ran on {} and run {} on {}",
                r.id,
                shape(r),
                c.id,
                shape(c)
            ));
        }
    }
    notes
}

pub fn describe(s: &RunSummary) -> String {
    format!(
        "{} {} on {} ({}, {}, {})",
        s.collective,
        s.status,
        s.nodelist.as_deref().unwrap_or("?"),
        s.at,
        s.variant
            .as_deref()
            .map_or("no variant".into(), |v| format!("variant {v}")),
        s.transport.as_deref().unwrap_or("transport unknown"),
    )
}

pub fn delta_cell(row: &CompareRow) -> String {
    row.delta_pct.map_or("-".into(), |d| format!("{d:+.1}%"))
}

pub fn band_line(b: &BandResult) -> String {
    let range = match b.below_bytes {
        Some(below) => format!("below {}", format_size(below)),
        None => format!("{} and up", format_size(b.from_bytes)),
    };
    let c = &b.counts;
    if c.ok + c.regression + c.improvement + c.missing == 0 {
        return format!(
            "band {} ({range}, {}): no sizes compared\n",
            b.band.as_str(),
            b.band.bound_by()
        );
    }
    format!(
        "band {} ({range}, {}): {} ({} ok, {} regression, {} improvement, {} missing)\n",
        b.band.as_str(),
        b.band.bound_by(),
        b.verdict.as_str().to_uppercase(),
        c.ok,
        c.regression,
        c.improvement,
        c.missing
    )
}

pub fn report_text(report: &Report, reference: &[RunSummary], candidate: &RunSummary) -> String {
    let c = &report.comparison;
    let r = &c.result;
    let mut out = String::new();
    match &c.reference {
        Reference::Run { run_id } => {
            let line = reference.first().map_or(String::new(), describe);
            out.push_str(&format!("reference: run {run_id}: {line}\n"));
        }
        Reference::Labeled { label, run_id } => {
            let line = reference.first().map_or(String::new(), describe);
            out.push_str(&format!(
                "reference: run {run_id}, the newest ok run labelled `{label}`: {line}\n"
            ));
        }
        Reference::Baseline { run_ids } => {
            let ids: Vec<String> = run_ids.iter().map(ToString::to_string).collect();
            out.push_str(&format!(
                "reference: baseline, per-size median of run(s) {}\n",
                ids.join(", ")
            ));
        }
    }
    out.push_str(&format!(
        "candidate: run {}: {}\n",
        c.candidate,
        describe(candidate)
    ));
    out.push_str(&format!(
        "tolerance {} %, sizes from {}, bands split at {} (busbw in GB/s)\n\n",
        r.options.tolerance_pct,
        format_size(r.options.min_size_bytes),
        format_size(r.options.band_split_bytes)
    ));
    let show_root = r
        .rows
        .iter()
        .any(|row| row.key.root.is_some_and(|x| x >= 0));
    let mut columns = vec![
        ("SIZE", Align::Right),
        ("BAND", Align::Left),
        ("PLACE", Align::Left),
        ("TYPE", Align::Left),
        ("REDOP", Align::Left),
    ];
    if show_root {
        columns.push(("ROOT", Align::Right));
    }
    columns.extend([
        ("REF BUSBW", Align::Right),
        ("CAND BUSBW", Align::Right),
        ("DELTA", Align::Right),
        ("VERDICT", Align::Left),
    ]);
    // The candidate's busbw as a share of its node's line rate, where its profile gave one.
    let line_rate = candidate.line_rate_gbps;
    if line_rate.is_some() {
        columns.push(("OF LINE RATE", Align::Right));
    }
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| {
            let mut cells = vec![
                format_size(row.key.size_bytes),
                row.band.as_str().to_string(),
                row.key.placement.to_string(),
                row.key.dtype.clone(),
                row.key.redop.clone(),
            ];
            if show_root {
                cells.push(row.key.root.map_or("-".into(), |x| x.to_string()));
            }
            cells.extend([
                gbps(row.reference_busbw),
                gbps(row.candidate_busbw),
                delta_cell(row),
                row.verdict.to_string(),
            ]);
            if line_rate.is_some() {
                cells
                    .push(line_share(row.candidate_busbw, line_rate).unwrap_or_else(|| "-".into()));
            }
            cells
        })
        .collect();
    out.push_str(&render_table(&columns, &rows));
    out.push('\n');
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    for band in &r.bands {
        out.push_str(&band_line(band));
    }
    out.push_str(&format!(
        "overall: {} ({} ok, {} regression, {} improvement, {} missing in all bands)\n",
        r.overall.as_str().to_uppercase(),
        r.counts.ok,
        r.counts.regression,
        r.counts.improvement,
        r.counts.missing
    ));
    out
}
