//! `gpudirect export`: every result row of the chosen runs with its run's metadata, as
//! CSV, a JSON array or JSON Lines, for spreadsheets and notebooks.
//!
//! The records are the history's `ExportRecord` (`gpudirect::history::export`): the run's
//! columns, the table row, and last `replay_of`, naming the recording when a run came from
//! the nccl-tests stand-in, so that an export never passes a replay off as a measurement.
//! With `-o FILE` the file is written under a temporary name in the same folder and renamed
//! into place, so a reader never sees half an export and a failed export leaves any
//! earlier file as it was.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use gpudirect::history::{ExportFormat, History, RunFilter};

use super::args::FilterArgs;
use super::{Ctx, ExitStatus};
use gpudirect::output::note;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Comma-separated values (RFC 4180 quoting, `\n` line ends) with a header line.
    Csv,
    /// One JSON array of objects.
    Json,
    /// One JSON object per line (JSON Lines).
    Jsonl,
    /// OpenMetrics text for Prometheus: each node's last verdict and busbw per tool, with
    /// its baseline, and the newest vet's standing (docs/admin-guide.md, "Dashboards").
    Openmetrics,
}

/// Arguments of `gpudirect export`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect export --format csv -o runs.csv           # every run, every row\n  \
    gpudirect export --collective all_reduce --since 30d --format jsonl | jq .busbw\n  \
    gpudirect export --node gpu07 --status ok --format json -o gpu07.json\n  \
    gpudirect export --format openmetrics -o /var/lib/node_exporter/gpudirect.prom\n\n\
    One record per table row (size x placement), newest run first. Columns: run_id, at,\n\
    cluster, job_id, nodelist, node_count, gpus_per_node, total_ranks, collective, variant,\n\
    launcher, status, transport, nccl_tests_version, nccl_version, cuda_version, size_bytes,\n\
    count, dtype, redop, root, placement, time_us, algbw, busbw (GB/s), wrong, algorithm and\n\
    protocol (NCCL's, when the output logged them), replay_of (set when the run replayed a\n\
    recording: not a measurement).")]
pub struct ExportArgs {
    /// Which runs (all of them unless --limit is given).
    #[command(flatten)]
    pub filter: FilterArgs,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    pub format: Format,

    /// Same as `--format json` (every read command takes --json).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,

    /// Write to this file (atomically: temporary file, then rename) instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Writes the runs of `filter` (streamed: memory does not grow with the history). Returns
/// the number of records (for OpenMetrics, of samples).
fn write_export(
    history: &History,
    filter: &RunFilter,
    format: Format,
    out: &mut dyn Write,
) -> Result<u64> {
    let format = match format {
        Format::Csv => ExportFormat::Csv,
        Format::Json => ExportFormat::JsonArray,
        Format::Jsonl => ExportFormat::JsonLines,
        Format::Openmetrics => {
            let runs = history.list_runs(filter)?;
            let vets = history.list_vets(None)?;
            let mut metrics = gpudirect::metrics::history_metrics(&runs, &vets);
            gpudirect::metrics::add_rail_metrics(&mut metrics, &rail_figures(history, &runs)?);
            let cluster = gpudirect::slurm::cluster_name(None).unwrap_or_default();
            match gpudirect::slurm::drained_nodes() {
                Ok(drains) => {
                    gpudirect::metrics::add_drain_metrics(&mut metrics, &cluster, &drains);
                }
                Err(e) => note(&format!(
                    "gpudirect export: drains left out (gpudirect_node_drained): Slurm did not answer: {e}"
                )),
            }
            match gpudirect::quarantine::quarantined() {
                Ok(nodes) => {
                    gpudirect::metrics::add_quarantine_metrics(
                        &mut metrics,
                        &cluster,
                        &nodes,
                        gpudirect::units::now_unix(),
                    );
                }
                Err(e) => note(&format!(
                    "gpudirect export: quarantines left out (gpudirect_node_quarantined): Slurm did not answer: {e}"
                )),
            }
            let text = metrics.render();
            out.write_all(text.as_bytes())?;
            out.flush()?;
            return Ok(text.lines().filter(|l| !l.starts_with('#')).count() as u64);
        }
    };
    Ok(history.export(filter, format, out)?)
}

/// The per-rail figures of the `validate --test rails` runs among `runs` (newest first):
/// each node result that says what a node sent on a rail.
fn rail_figures(
    history: &History,
    runs: &[gpudirect::history::RunSummary],
) -> Result<Vec<gpudirect::metrics::RailFigure>> {
    let mut figures = Vec::new();
    for run in runs.iter().filter(|r| {
        r.replay_of.is_none() && r.variant.as_deref().is_some_and(|v| v.starts_with("rail:"))
    }) {
        let detail = history.get_run(run.id)?;
        for r in &detail.node_results {
            let Some((rail, true)) = r
                .role
                .as_deref()
                .and_then(gpudirect::validate::rails::rail_of_role)
            else {
                continue;
            };
            figures.push(gpudirect::metrics::RailFigure {
                cluster: run.cluster.clone().unwrap_or_default(),
                node: r.node.clone(),
                rail: rail.to_string(),
                gbps: r.busbw,
                verdict: r.verdict.clone(),
            });
        }
    }
    Ok(figures)
}

/// The temporary name beside `target`: same folder (so the rename is atomic), hidden,
/// and unique to this process.
fn temp_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map_or_else(|| "export".into(), |n| n.to_string_lossy().into_owned());
    target.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// `gpudirect export`.
pub fn run(args: &ExportArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let history = ctx.open_history()?;
    let filter = args.filter.to_filter(None);
    let format = if args.json { Format::Json } else { args.format };
    let Some(target) = &args.output else {
        let stdout = std::io::stdout();
        let mut out = BufWriter::new(stdout.lock());
        write_export(&history, &filter, format, &mut out)?;
        return Ok(ExitStatus::Ok);
    };
    let tmp = temp_path(target);
    let result = (|| -> Result<u64> {
        let file =
            File::create(&tmp).with_context(|| format!("cannot create `{}`", tmp.display()))?;
        let mut out = BufWriter::new(file);
        let n = write_export(&history, &filter, format, &mut out)?;
        let file = out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("writing `{}`", tmp.display()))?;
        file.sync_all()
            .with_context(|| format!("writing `{}`", tmp.display()))?;
        std::fs::rename(&tmp, target).with_context(|| {
            format!("cannot move `{}` to `{}`", tmp.display(), target.display())
        })?;
        Ok(n)
    })();
    match result {
        Ok(n) => {
            note(&format!("wrote {n} records to {}", target.display()));
            Ok(ExitStatus::Ok)
        }
        Err(e) => {
            // Best effort: the temporary file is ours and useless now.
            let _ = std::fs::remove_file(&tmp);
            Err(e.context(format!(
                "export to `{}` failed; nothing was replaced",
                target.display()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_file_sits_beside_the_target() {
        let t = temp_path(Path::new("/data/out/runs.csv"));
        assert_eq!(t.parent(), Some(Path::new("/data/out")));
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(".runs.csv.tmp-"), "{name}");
        let bare = temp_path(Path::new("runs.csv"));
        assert_eq!(bare.parent(), Some(Path::new("")));
    }
}
