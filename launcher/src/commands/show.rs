//! `gpudirect show ID`: everything recorded about one run: where and when, versions,
//! command line, findings, environment and the whole table; `--raw` prints the output
//! exactly as it was captured, byte for byte.

use anyhow::{Context, Result};
use clap::Args;
use gpudirect::history::{Placement, ResultRow, RunDetail, RunId};

use super::{Ctx, ExitStatus};
use gpudirect::history::replay_of;
use gpudirect::output::{
    emit, emit_bytes, emit_json, gbps, line_share, node_result_cells, or_dash, render_table,
    shown_text, Align, NODE_RESULT_COLUMNS,
};
use gpudirect::units::human_size as format_size;

/// Arguments of `gpudirect show`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect show 12                  # detail and table of run 12\n  \
    gpudirect show 12 --raw > run12.txt  # the output as captured, unchanged\n  \
    gpudirect show 12 --json | jq '.rows[] | select(.placement == \"out\") | .busbw'\n\n\
    `gpudirect history` lists the run ids.")]
pub struct ShowArgs {
    /// The run's id, as `gpudirect history` lists it.
    #[arg(value_name = "ID")]
    pub id: RunId,

    /// Print the run as JSON (every field, every row).
    #[arg(long, conflicts_with = "raw")]
    pub json: bool,

    /// Print the stored raw output (nccl-tests' stdout and stderr) unchanged, nothing else.
    #[arg(long)]
    pub raw: bool,
}

/// `gpudirect show`.
pub fn run(args: &ShowArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let history = ctx.open_history()?;
    if args.raw {
        let (raw, _) = history.raw_output(args.id)?;
        emit_bytes(&raw).context("writing the raw output to stdout")?;
        return Ok(ExitStatus::Ok);
    }
    let detail = history.get_run(args.id)?;
    if args.json {
        // The summary's `replay_of` marks a stand-in replay in the JSON too.
        emit_json(&detail)?;
    } else {
        // Labels, hosts and the environment are whoever recorded the run's (T2).
        emit(&shown_text(&detail_text(&detail)))?;
    }
    Ok(ExitStatus::Ok)
}

/// One line of the table: a size with its out-of-place and in-place numbers.
#[derive(Debug, PartialEq)]
struct TableLine<'a> {
    first: &'a ResultRow,
    out_of_place: Option<&'a ResultRow>,
    in_place: Option<&'a ResultRow>,
}

/// Pairs stored rows back into nccl-tests' lines: an out-of-place row followed by the
/// in-place row of the same size, type, op and root makes one line. Pure.
fn pair_rows(rows: &[ResultRow]) -> Vec<TableLine<'_>> {
    let same = |a: &ResultRow, b: &ResultRow| {
        (a.size_bytes, a.count, &a.dtype, &a.redop, a.root)
            == (b.size_bytes, b.count, &b.dtype, &b.redop, b.root)
    };
    let mut lines = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let row = &rows[i];
        match (row.placement, rows.get(i + 1)) {
            (Placement::Out, Some(next)) if next.placement == Placement::In && same(row, next) => {
                lines.push(TableLine {
                    first: row,
                    out_of_place: Some(row),
                    in_place: Some(next),
                });
                i += 2;
            }
            (Placement::Out, _) => {
                lines.push(TableLine {
                    first: row,
                    out_of_place: Some(row),
                    in_place: None,
                });
                i += 1;
            }
            (Placement::In, _) => {
                lines.push(TableLine {
                    first: row,
                    out_of_place: None,
                    in_place: Some(row),
                });
                i += 1;
            }
        }
    }
    lines
}

fn placement_cells(row: Option<&ResultRow>) -> [String; 4] {
    match row {
        None => ["".into(), "".into(), "".into(), "".into()],
        Some(r) => [
            r.time_us.map_or("-".into(), |t| format!("{t:.2}")),
            gbps(r.algbw),
            gbps(r.busbw),
            r.wrong.map_or("N/A".into(), |w| w.to_string()),
        ],
    }
}

/// The run's header and its fields: when, where, how, versions, the raw output.
fn fields_text(d: &RunDetail) -> String {
    let s = &d.summary;
    let mut out = String::new();
    let mut field = |name: &str, value: String| {
        out.push_str(&format!("  {:<15}{value}\n", format!("{name}:")));
    };
    let mut head = format!(
        "run {}: {} {} ({})\n",
        s.id, s.collective, s.status, s.launcher
    );
    if let Some(recording) = s
        .replay_of
        .as_deref()
        .or_else(|| replay_of(&d.provenance.env))
    {
        head.push_str(&format!(
            "REPLAY: this run is the nccl-tests stand-in replaying the recording {recording}; \
             its numbers were measured elsewhere, not on the nodes named here\n"
        ));
    }
    field("when", {
        let mut w = s.at.clone();
        if let Some(end) = &s.finished_at {
            w.push_str(&format!(" (finished {end})"));
        }
        w.push_str(&format!(", recorded {}", s.imported_at));
        w
    });
    field("cluster", or_dash(s.cluster.as_deref()));
    field(
        "nodes",
        format!(
            "{} ({} node(s), {} GPU(s) per node, {} rank(s))",
            if d.nodes.is_empty() {
                "-".to_string()
            } else {
                d.nodes.join(", ")
            },
            s.node_count.map_or("?".into(), |n| n.to_string()),
            s.gpus_per_node.map_or("?".into(), |n| n.to_string()),
            s.total_ranks.map_or("?".into(), |n| n.to_string()),
        ),
    );
    if s.job_id.is_some() || s.step_id.is_some() {
        field(
            "slurm job",
            format!(
                "{} step {}",
                or_dash(s.job_id.as_deref()),
                or_dash(s.step_id.as_deref())
            ),
        );
    }
    field("variant", or_dash(s.variant.as_deref()));
    if let Some(label) = &s.label {
        field("label", label.clone());
    }
    field("transport", or_dash(s.transport.as_deref()));
    field(
        "busbw",
        format!(
            "avg {} GB/s, busbw {} GB/s at the largest size ({}){}",
            gbps(s.avg_busbw),
            gbps(s.busbw),
            s.max_size_bytes.map_or("-".into(), format_size),
            match (line_share(s.busbw, s.line_rate_gbps), s.line_rate_gbps) {
                (Some(share), Some(rate)) =>
                    format!(", {share} of the node's line rate ({rate:.1} GB/s)"),
                _ => String::new(),
            }
        ),
    );
    field(
        "exit code",
        s.exit_code.map_or("unknown".into(), |c| c.to_string()),
    );
    let rccl = d
        .provenance
        .nccl_version
        .as_deref()
        .is_some_and(|v| v.starts_with("RCCL "));
    // A value recorded with its own name (`RCCL 2.28.3`, `ROCm 7.12`) keeps it.
    let named = |name: &str, v: Option<&str>| match v {
        Some(v) if v.starts_with(|c: char| c.is_ascii_alphabetic()) => v.to_string(),
        v => format!("{name} {}", or_dash(v)),
    };
    field(
        "versions",
        format!(
            "{} {}, {}, {}{}, net plugin {}",
            // rccl-tests records its library with its name (`RCCL 2.28.3`, `ROCm 7.12`).
            if rccl { "rccl-tests" } else { "nccl-tests" },
            or_dash(d.provenance.nccl_tests_version.as_deref()),
            named("NCCL", d.provenance.nccl_version.as_deref()),
            named("CUDA", d.provenance.cuda_version.as_deref()),
            d.provenance
                .cuda_driver
                .map_or(String::new(), |v| format!(" (driver {v})")),
            or_dash(d.provenance.net_plugin.as_deref())
        ),
    );
    field("command", or_dash(d.provenance.command_line.as_deref()));
    field("binary", or_dash(d.provenance.binary_path.as_deref()));
    if let Some(src) = &s.source_path {
        field("imported from", src.clone());
    }
    field(
        "raw output",
        format!(
            "{} bytes, sha256 {}, parser v{} (`gpudirect show {} --raw`)",
            d.raw_output_bytes, s.output_sha256, d.parser_version, s.id
        ),
    );
    for note in &d.provenance.notes {
        field("note", note.clone());
    }
    head.push_str(&out);
    head
}

/// `gpudirect show ID`: the fields, the findings, the environment, the per-node results
/// and the result rows.
fn detail_text(d: &RunDetail) -> String {
    let mut text = fields_text(d);
    text.push_str("\nfindings:\n");
    if d.failures.is_empty() {
        text.push_str("  none\n");
    }
    for f in &d.failures {
        text.push_str(&format!("  - {f}\n"));
    }
    text.push_str("\nenvironment:\n");
    if d.provenance.env.is_empty() {
        text.push_str("  (none recorded)\n");
    }
    for (k, v) in &d.provenance.env {
        text.push_str(&format!("  {k}={v}\n"));
    }
    if !d.node_results.is_empty() {
        text.push_str("\nper-node results:\n");
        let mut columns = vec![("NODE", Align::Left)];
        columns.extend(NODE_RESULT_COLUMNS);
        let rows: Vec<Vec<String>> = d
            .node_results
            .iter()
            .map(|n| {
                let mut cells = vec![n.node.clone()];
                cells.extend(node_result_cells(n));
                cells
            })
            .collect();
        text.push_str(&render_table(&columns, &rows));
    }
    text.push_str(&results_text(d));
    text
}

/// The result rows, out-of-place and in-place side by side (with NCCL's algorithm and
/// protocol when the output had them).
fn results_text(d: &RunDetail) -> String {
    let mut text = String::new();
    text.push_str(&format!(
        "\nresults ({} rows; time in us, algbw and busbw in GB/s):\n",
        d.rows.len()
    ));
    // NCCL's choices, when its per-operation lines were in the output.
    let tuned = d.rows.iter().any(|r| r.algorithm.is_some());
    let mut columns = vec![
        ("SIZE", Align::Right),
        ("COUNT", Align::Right),
        ("TYPE", Align::Left),
        ("REDOP", Align::Left),
        ("ROOT", Align::Right),
        ("OUT TIME", Align::Right),
        ("ALGBW", Align::Right),
        ("BUSBW", Align::Right),
        ("#WRONG", Align::Right),
        ("IN TIME", Align::Right),
        ("ALGBW", Align::Right),
        ("BUSBW", Align::Right),
        ("#WRONG", Align::Right),
    ];
    if tuned {
        columns.extend([("ALGO", Align::Left), ("PROTO", Align::Left)]);
    }
    let rows: Vec<Vec<String>> = pair_rows(&d.rows)
        .iter()
        .map(|l| {
            let mut cells = vec![
                format_size(l.first.size_bytes),
                l.first.count.to_string(),
                l.first.dtype.clone(),
                l.first.redop.clone(),
                l.first.root.map_or("-".into(), |r| r.to_string()),
            ];
            cells.extend(placement_cells(l.out_of_place));
            cells.extend(placement_cells(l.in_place));
            if tuned {
                cells.push(or_dash(l.first.algorithm.as_deref()));
                cells.push(or_dash(l.first.protocol.as_deref()));
            }
            cells
        })
        .collect();
    text.push_str(&render_table(&columns, &rows));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(size: u64, placement: Placement, busbw: f64) -> ResultRow {
        ResultRow {
            size_bytes: size,
            count: size / 4,
            dtype: "float".into(),
            redop: "sum".into(),
            root: None,
            placement,
            time_us: Some(25.0),
            algbw: Some(busbw),
            busbw: Some(busbw),
            wrong: Some(0),
            algorithm: None,
            protocol: None,
        }
    }

    #[test]
    fn rows_pair_back_into_lines() {
        // 1 MiB and 2 MiB of h200x2-nvlink/all_reduce_g2.txt, then an in-place row alone
        // and an out-of-place row followed by an in-place row of another size.
        let rows = vec![
            row(1 << 20, Placement::Out, 39.91),
            row(1 << 20, Placement::In, 41.92),
            row(2 << 20, Placement::Out, 69.93),
            row(2 << 20, Placement::In, 70.72),
            row(4 << 20, Placement::In, 119.71),
            row(8 << 20, Placement::Out, 167.41),
            row(16 << 20, Placement::In, 217.64),
        ];
        let lines = pair_rows(&rows);
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0].in_place.and_then(|r| r.busbw), Some(41.92));
        assert_eq!(lines[1].out_of_place.and_then(|r| r.busbw), Some(69.93));
        assert!(lines[2].out_of_place.is_none());
        assert!(lines[3].in_place.is_none());
        assert_eq!(lines[4].first.size_bytes, 16 << 20);
    }

    #[test]
    fn unchecked_rows_print_na() {
        let mut r = row(8, Placement::Out, 0.0);
        r.wrong = None;
        r.time_us = None;
        assert_eq!(placement_cells(Some(&r)), ["-", "0.00", "0.00", "N/A"]);
        assert_eq!(placement_cells(None), ["", "", "", ""]);
    }
}
