//! `gpudirect report`: a self-contained HTML report with plots, and a verdict table on
//! the terminal. The work is in [`gpudirect::report`]; this module reads the arguments.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{ArgGroup, Args};
use gpudirect::history::History;
use gpudirect::report::{
    gather, terminal_table, write_report, ReportFormat, ReportOptions, Selection,
};
use gpudirect::units::{percent_arg, size_arg};

use super::{Ctx, ExitStatus};
use gpudirect::outln;
use gpudirect::output::{emit, emit_json};

/// Arguments of `gpudirect report`.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("which").required(true).args(["runs", "last"])),
    after_help = "Examples:\n  \
        gpudirect report --runs 3,5,9 -o report\n  \
        gpudirect report --last 10 --collective all_reduce --format png\n  \
        gpudirect report --runs 12 --node gpu07 --node gpu08 --size 1G\n\n\
        Writes DIR/index.html (plots inlined, so the one file stands alone) and the plots \
        as busbw.svg/.png, heatmap.svg/.png (when the runs recorded pairs), \
        railmap.svg/.png (when they include `validate --test rails` runs) and \
        node-trend.svg/.png."
)]
pub struct ReportArgs {
    /// Run ids to report on, comma-separated (`gpudirect history` lists them).
    #[arg(long, value_delimiter = ',', value_name = "ID,...")]
    pub runs: Vec<i64>,

    /// Report on the newest N runs instead.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub last: Option<u32>,

    /// With --last: only runs of this collective, e.g. `all_reduce`.
    #[arg(long, conflicts_with = "runs")]
    pub collective: Option<String>,

    /// Folder for index.html and the plot files (created if missing).
    #[arg(short, long, value_name = "DIR", default_value = "gpudirect-report")]
    pub output: PathBuf,

    /// Plot files to write: png, svg or both. The HTML inlines SVG when there is one,
    /// else embeds the PNG.
    #[arg(long, value_name = "FORMAT", default_value = "both", value_parser = clap::builder::ValueParser::new(parse_format))]
    pub format: ReportFormat,

    /// A node whose busbw over time to draw (repeat for more). Default: the slowest
    /// nodes of the pair heat map, else the runs' nodes (at most 8).
    #[arg(long = "node", value_name = "NODE")]
    pub nodes: Vec<String>,

    /// Message size at which nodes are followed over time, e.g. 1G. Default: the
    /// largest size in the runs.
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub size: Option<u64>,

    /// Allowed deviation from the baseline, percent (the band's half-width).
    #[arg(long, value_name = "PCT", default_value = "5", value_parser = percent_arg)]
    pub tolerance: f64,

    /// How many recent ok runs each baseline is the median of.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub baseline_runs: u32,

    /// Print the report's data as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn parse_format(text: &str) -> Result<ReportFormat, String> {
    text.parse()
}

/// The checked options of a report (pure).
pub fn options(args: &ReportArgs) -> ReportOptions {
    let selection = match args.last {
        Some(n) => Selection::Last {
            n,
            collective: args.collective.clone(),
        },
        None => Selection::Runs(args.runs.clone()),
    };
    ReportOptions {
        selection,
        nodes: args.nodes.clone(),
        size_bytes: args.size,
        tolerance_pct: args.tolerance,
        baseline_runs: args.baseline_runs,
        ..ReportOptions::default()
    }
}

/// `gpudirect report`.
pub fn run(args: &ReportArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let db = ctx.db_path()?;
    let history = History::open_existing(&db)?;
    let data = gather(&history, &options(args))?;
    let files = write_report(&data, &args.output, args.format)
        .with_context(|| format!("writing the report into {}", args.output.display()))?;
    if args.json {
        emit_json(&serde_json::json!({ "report": data, "files": files }))?;
    } else {
        emit(&terminal_table(&data))?;
        outln!(
            "report: {} ({} plot file{})",
            files.html.display(),
            files.images.len(),
            if files.images.len() == 1 { "" } else { "s" }
        )?;
    }
    Ok(ExitStatus::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ReportArgs,
    }

    fn parse(argv: &[&str]) -> Result<ReportArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("report").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn runs_or_last_and_their_options() {
        let a = parse(&["--runs", "3,5,9", "--format", "png", "-o", "out"]).unwrap();
        assert_eq!(options(&a).selection, Selection::Runs(vec![3, 5, 9]));
        assert_eq!(a.format, ReportFormat::Png);
        assert_eq!(a.output, PathBuf::from("out"));

        let a = parse(&["--last", "4", "--collective", "all_reduce", "--size", "1G"]).unwrap();
        assert_eq!(
            options(&a).selection,
            Selection::Last {
                n: 4,
                collective: Some("all_reduce".into())
            }
        );
        assert_eq!(options(&a).size_bytes, Some(1 << 30));
        assert_eq!(a.format, ReportFormat::Both);
    }

    #[test]
    fn bad_combinations_are_refused() {
        assert!(parse(&[]).is_err(), "one of --runs/--last is required");
        assert!(parse(&["--runs", "1", "--last", "2"]).is_err());
        assert!(parse(&["--runs", "1", "--collective", "all_reduce"]).is_err());
        assert!(parse(&["--last", "0"]).is_err());
        assert!(parse(&["--runs", "1", "--format", "jpeg"]).is_err());
        assert!(parse(&["--runs", "x"]).is_err());
    }
}
