//! `gpudirect compare A B`, `gpudirect compare RUN --baseline [N]` and `gpudirect compare
//! RUN --baseline-label NAME`: per-size busbw of a candidate run against a reference run, a
//! baseline (the per-size median of earlier good runs of the same kind) or a named
//! baseline (the newest ok run with that label), each size judged against a tolerance, a
//! verdict per size band (small: latency-bound, large: bandwidth-bound) and one overall
//! verdict, the large band's. The exit status is 1 when the overall verdict is a
//! regression, so that a CI job or a prolog can gate on it. The judging itself is
//! `gpudirect::history::compare`.

use anyhow::{Context, Result};
use clap::Args;
use gpudirect::history::{CompareOptions, History, Reference, RunId, RunSummary, Verdict};

use super::{Ctx, ExitStatus};
use gpudirect::output::compare::{notes, report_text, Report};
use gpudirect::output::{emit, emit_json, note};
use gpudirect::setup::{setup_differences, RunSetup};
use gpudirect::units::{percent_arg, size_arg};

/// Earlier runs a baseline is made of when `--baseline` has no number (as clap reads it).
pub const DEFAULT_BASELINE_RUNS: &str = "5";

/// Arguments of `gpudirect compare`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect compare 12 15                     # run 15 judged against run 12\n  \
    gpudirect compare 15 --baseline             # against the median of the 5 earlier ok runs like it\n  \
    gpudirect compare 15 --baseline 10 --tolerance 3 --min-size 64M\n  \
    gpudirect compare 15 --baseline-label before-upgrade   # against the newest ok run so labelled\n  \
    gpudirect compare 12 15 --json | jq '.bands, .overall'\n\n\
    Each size's verdict: regression when the candidate's busbw is lower than the reference's\n\
    by more than --tolerance %, improvement when higher by more, ok within, missing when one\n\
    side has no value. Sizes below --band-split (default 1M) are the small, latency-bound\n\
    band; the others the large, bandwidth-bound band. A band regresses if any of its sizes\n\
    does. Overall: the large band's verdict (the small band's when the table has no large\n\
    size), because small-message busbw moves by tens of percent between healthy runs.\n\n\
    Exit status: 1 when the overall verdict is regression; 0 otherwise, including improvement\n\
    and missing; 3 when it could not compare (no such run, no baseline), which stderr names.")]
pub struct CompareArgs {
    /// Run ids: REFERENCE then CANDIDATE (e.g. last week's run, then today's); with
    /// --baseline only the CANDIDATE.
    #[arg(value_name = "RUN", required = true, num_args = 1..=2)]
    pub runs: Vec<RunId>,

    /// Compare RUN with the per-size median of up to N earlier ok runs of the same
    /// collective, cluster, node count, rank count and variant (N defaults to 5).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = DEFAULT_BASELINE_RUNS,
          conflicts_with = "baseline_label")]
    pub baseline: Option<u32>,

    /// Compare RUN with the named baseline: the newest ok run recorded with this label
    /// (`gpudirect import --label NAME`), other than RUN itself.
    #[arg(long, value_name = "NAME")]
    pub baseline_label: Option<String>,

    /// Allowed change in percent before a size counts as a regression or improvement.
    #[arg(long, value_name = "PCT", default_value = "5", value_parser = percent_arg)]
    pub tolerance: f64,

    /// Leave out sizes below this entirely (K/M/G are powers of 1024); 0 keeps every size.
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = size_arg)]
    pub min_size: u64,

    /// Where the small (latency-bound) band ends and the large (bandwidth-bound) band,
    /// which decides the overall verdict, starts (K/M/G are powers of 1024).
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = size_arg)]
    pub band_split: u64,

    /// Print the comparison as JSON (rows, counts, overall verdict, notes).
    #[arg(long)]
    pub json: bool,
}

/// What the command decided to compare, from the arguments as written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Plan {
    Runs { reference: RunId, candidate: RunId },
    Baseline { candidate: RunId, last_n: u32 },
    Label { candidate: RunId, label: String },
}

fn plan(args: &CompareArgs) -> Result<Plan> {
    if let Some(label) = &args.baseline_label {
        return match args.runs.as_slice() {
            [candidate] => Ok(Plan::Label {
                candidate: *candidate,
                label: label.clone(),
            }),
            _ => anyhow::bail!(
                "--baseline-label compares one run with the run so labelled: give one run id \
                 (e.g. `gpudirect compare 15 --baseline-label {label}`), not {}",
                args.runs.len()
            ),
        };
    }
    match (args.baseline, args.runs.as_slice()) {
        (Some(0), _) => anyhow::bail!("--baseline 0: a baseline needs at least 1 earlier run"),
        (Some(last_n), [candidate]) => Ok(Plan::Baseline {
            candidate: *candidate,
            last_n,
        }),
        (Some(_), _) => anyhow::bail!(
            "--baseline compares one run with earlier ones: give one run id \
             (e.g. `gpudirect compare 15 --baseline`), not {}",
            args.runs.len()
        ),
        (None, [reference, candidate]) => Ok(Plan::Runs {
            reference: *reference,
            candidate: *candidate,
        }),
        (None, _) => anyhow::bail!(
            "give two run ids, REFERENCE then CANDIDATE (e.g. `gpudirect compare 12 15`), \
             or one with --baseline or --baseline-label NAME"
        ),
    }
}

/// Notes where the reference runs ran other software than the candidate (versions, or
/// the algorithms NCCL chose: `gpudirect::setup`).
fn setup_notes(history: &History, reference: &[RunId], candidate: RunId) -> Result<Vec<String>> {
    let reference = reference
        .iter()
        .map(|id| Ok((*id, RunSetup::of(&history.get_run(*id)?))))
        .collect::<Result<Vec<_>>>()?;
    let candidate_setup = RunSetup::of(&history.get_run(candidate)?);
    Ok(setup_differences(&reference, (candidate, &candidate_setup)))
}

fn summary(history: &History, id: RunId) -> Result<RunSummary> {
    Ok(history.get_run(id)?.summary)
}

/// `gpudirect compare`.
pub fn run(args: &CompareArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let plan = plan(args)?;
    let options = CompareOptions {
        tolerance_pct: args.tolerance,
        min_size_bytes: args.min_size,
        band_split_bytes: args.band_split,
    };
    let history = ctx.open_history()?;
    let comparison = match plan {
        Plan::Runs {
            reference,
            candidate,
        } => history.compare_runs(reference, candidate, options)?,
        Plan::Baseline { candidate, last_n } => history
            .compare_to_baseline(candidate, last_n, options)
            .context("comparing with a baseline")?,
        Plan::Label { candidate, label } => history
            .compare_to_label(candidate, &label, options)
            .with_context(|| format!("comparing with the run labelled `{label}`"))?,
    };
    let reference_ids = match &comparison.reference {
        Reference::Run { run_id } | Reference::Labeled { run_id, .. } => vec![*run_id],
        Reference::Baseline { run_ids } => run_ids.clone(),
    };
    let reference = reference_ids
        .iter()
        .map(|id| summary(&history, *id))
        .collect::<Result<Vec<_>>>()?;
    let candidate = summary(&history, comparison.candidate)?;
    let mut all_notes = notes(&reference, &candidate);
    all_notes.extend(setup_notes(&history, &reference_ids, comparison.candidate)?);
    let report = Report {
        notes: all_notes,
        comparison,
    };
    if args.json {
        emit_json(&report)?;
    } else {
        emit(&report_text(&report, &reference, &candidate))?;
    }
    let result = &report.comparison.result;
    if result.overall == Verdict::Regression {
        // The band that decided: the large one, unless it had nothing compared.
        let decided = result
            .bands
            .iter()
            .rev()
            .find(|b| b.verdict == Verdict::Regression);
        let (band, counts) = decided.map_or(("", result.counts), |b| (b.band.as_str(), b.counts));
        note(&format!(
            "regression: run {} is slower than the reference by more than {} % in {} of {} \
             compared rows (size x placement) of the {band} band",
            report.comparison.candidate,
            result.options.tolerance_pct,
            counts.regression,
            counts.ok + counts.regression + counts.improvement
        ));
        return Ok(ExitStatus::Problem);
    }
    Ok(ExitStatus::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        args: CompareArgs,
    }

    fn parse(argv: &[&str]) -> Result<Plan> {
        let mut full = vec!["compare"];
        full.extend_from_slice(argv);
        let w = Wrap::try_parse_from(full)?;
        plan(&w.args)
    }

    #[test]
    fn arguments_become_a_plan() {
        assert_eq!(
            parse(&["3", "7"]).unwrap(),
            Plan::Runs {
                reference: 3,
                candidate: 7
            }
        );
        assert_eq!(
            parse(&["7", "--baseline"]).unwrap(),
            Plan::Baseline {
                candidate: 7,
                last_n: 5
            }
        );
        assert_eq!(
            parse(&["7", "--baseline", "3"]).unwrap(),
            Plan::Baseline {
                candidate: 7,
                last_n: 3
            }
        );
        let one = parse(&["7"]).unwrap_err().to_string();
        assert!(one.contains("two run ids"), "{one}");
        let two = parse(&["3", "7", "--baseline"]).unwrap_err().to_string();
        assert!(two.contains("one run id"), "{two}");
        assert!(parse(&["7", "--baseline", "0"]).is_err());
        let w = Wrap::try_parse_from(["compare", "1", "2"]).unwrap();
        assert_eq!(w.args.min_size, 0);
        assert_eq!(w.args.band_split, 1 << 20);
        assert_eq!(
            parse(&["7", "--baseline-label", "before-upgrade"]).unwrap(),
            Plan::Label {
                candidate: 7,
                label: "before-upgrade".into()
            }
        );
        let two = parse(&["3", "7", "--baseline-label", "x"])
            .unwrap_err()
            .to_string();
        assert!(two.contains("one run id"), "{two}");
        // --baseline and --baseline-label name two different references.
        assert!(
            Wrap::try_parse_from(["compare", "7", "--baseline", "--baseline-label", "x"]).is_err()
        );
        let w = Wrap::try_parse_from(["compare", "1", "2", "--band-split", "64K"]).unwrap();
        assert_eq!(w.args.band_split, 64 << 10);
        assert_eq!(w.args.tolerance, 5.0);
    }

    fn summary(id: RunId, collective: &str, nodes: u32) -> RunSummary {
        RunSummary {
            id,
            at: "2026-11-29T22:32:58Z".into(),
            started_at: None,
            finished_at: None,
            imported_at: "2026-11-29T22:39:48Z".into(),
            cluster: None,
            job_id: None,
            step_id: None,
            nodelist: Some("vm".into()),
            node_count: Some(nodes),
            gpus_per_node: Some(2),
            total_ranks: Some(2 * nodes),
            collective: collective.into(),
            variant: None,
            launcher: gpudirect::history::LaunchKind::Import,
            tool: gpudirect::history::Tool::Import,
            status: gpudirect::history::RunStatus::Ok,
            exit_code: Some(0),
            transport: None,
            avg_busbw: Some(109.175),
            busbw: Some(343.64),
            max_size_bytes: Some(8 << 30),
            row_count: 62,
            source_path: None,
            output_sha256: String::new(),
            label: None,
            replay_of: None,
            line_rate_gbps: None,
        }
    }

    #[test]
    fn notes_name_replays_and_mismatched_runs() {
        let same = notes(&[summary(1, "all_reduce", 1)], &summary(2, "all_reduce", 1));
        assert!(same.is_empty(), "{same:?}");
        let replayed = RunSummary {
            replay_of: Some("h200x2-nvlink/all_reduce_g2.txt".into()),
            ..summary(1, "all_reduce", 1)
        };
        let n = notes(&[replayed], &summary(2, "all_gather", 2));
        assert_eq!(n.len(), 3, "{n:?}");
        assert!(n[0].starts_with("run 1 is a stand-in replay of h200x2-nvlink/all_reduce_g2.txt"));
        assert!(
            n[1].contains("all_reduce but run 2 is all_gather"),
            "{}",
            n[1]
        );
        assert!(
            n[2].contains("1 node(s), 2 rank(s) and run 2 on 2 node(s), 4 rank(s)"),
            "{}",
            n[2]
        );
    }
}
