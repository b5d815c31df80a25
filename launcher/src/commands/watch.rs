//! `gpudirect watch`: what slows a running job, from the NCCL Inspector's dumps. The reading
//! and the verdicts are [`gpudirect::watch`]; this module reads the arguments, fills the
//! baselines from the history and prints.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use gpudirect::history::RunKey;
use gpudirect::nccl_output::inspector::Sample;
use gpudirect::outln;
use gpudirect::output::{emit, emit_json};
use gpudirect::units::{duration_arg, percent_arg};
use gpudirect::watch::judge::{judge, Baselines, CommVerdict};
use gpudirect::watch::{in_window, read_folder, text, Collected};
use serde::Serialize;

use super::{Ctx, ExitStatus};

/// Arguments of `gpudirect watch`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect watch --dumps /tmp/nccl-inspector-4242       # one node's dump folder\n  \
    gpudirect watch --dumps node1/ --dumps node2/ --json   # folders gathered from several nodes\n  \
    gpudirect watch --dumps DIR --baseline-variant tcpx    # also against the history's runs\n\n\
    The job writes the dumps: run it with NCCL's Inspector profiler plugin\n  \
    NCCL_PROFILER_PLUGIN=/path/libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1\n  \
    NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000 NCCL_INSPECTOR_DUMP_DIR=DIR\n\
    (make DIR before the job starts: ranks that race to create it lose their dumps).\n\
    scripts/build-inspector builds the plugin from an NCCL source tree.\n\n\
    Verdicts, per communicator: LATE (a rank the others wait for: it is the fastest in most\n\
    collectives, since it arrives last), SLOW (below the history's baseline for that\n\
    collective and size), SILENT (ranks that wrote nothing), or nothing wrong.\n\
    Exit status: 0 nothing wrong, 1 a finding, 3 nothing could be read or too few\n\
    collectives to judge.")]
pub struct WatchArgs {
    /// A folder of Inspector dumps (`<host>-pid<PID>.log`); repeat for several nodes'.
    #[arg(long = "dumps", value_name = "DIR", required = true)]
    pub dumps: Vec<PathBuf>,

    /// Judge the samples dumped within this long before the newest one.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration_arg)]
    pub window: Duration,

    /// Compare each collective's busbw with the history's runs of this variant (the
    /// profile a `gpudirect run` used, or `validate:pairs`) on as many nodes and ranks.
    #[arg(long, value_name = "VARIANT")]
    pub baseline_variant: Option<String>,

    /// With --baseline-variant: the cluster the baseline runs were recorded on.
    #[arg(long, value_name = "NAME", env = "SLURM_CLUSTER_NAME")]
    pub cluster: Option<String>,

    /// How far below the baseline is still healthy, percent.
    #[arg(long, value_name = "PCT", default_value = "10", value_parser = percent_arg)]
    pub tolerance: f64,

    /// Print the verdicts as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Report<'a> {
    files: usize,
    notes: &'a [String],
    communicators: &'a [CommVerdict],
}

/// `gpudirect watch`.
pub fn run(args: &WatchArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let mut collected = Collected::default();
    for dir in &args.dumps {
        if let Err(why) = read_folder(dir, &mut collected) {
            bail!("{why}");
        }
    }
    if collected.samples.is_empty() {
        for note in &collected.notes {
            gpudirect::noteln!("note: {}", gpudirect::output::shown(note));
        }
        bail!(
            "no Inspector sample in {} file(s) under {}: is the job running with \
             NCCL_INSPECTOR_ENABLE=1 and a dump interval, and has it completed a collective \
             of at least 8 KiB (NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES)?",
            collected.files,
            args.dumps
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let samples = in_window(std::mem::take(&mut collected.samples), args.window);
    let baselines = baselines(args, ctx, &samples)?;
    let verdicts = judge(&samples, &baselines);
    if args.json {
        emit_json(&Report {
            files: collected.files,
            notes: &collected.notes,
            communicators: &verdicts,
        })?;
    } else {
        emit(&text::render(&verdicts, &collected.notes, collected.files))?;
        if args.baseline_variant.is_none() {
            outln!("(no baseline compared: --baseline-variant VARIANT compares with the history)")?;
        }
    }
    Ok(if verdicts.iter().any(|v| !v.findings.is_empty()) {
        ExitStatus::Problem
    } else if verdicts.iter().any(|v| v.judged) {
        ExitStatus::Ok
    } else {
        ExitStatus::CouldNotRun
    })
}

/// The history's median busbw for each (collective, size) the samples hold, on runs of
/// `--baseline-variant` with the communicator's node and rank counts.
fn baselines(args: &WatchArgs, ctx: &Ctx, samples: &[Sample]) -> Result<Baselines> {
    let mut baselines = Baselines {
        tolerance_pct: args.tolerance,
        ..Baselines::default()
    };
    let Some(variant) = &args.baseline_variant else {
        return Ok(baselines);
    };
    let history = ctx.open_history()?;
    for s in samples {
        let key = (s.coll.clone(), s.bytes);
        if baselines.busbw.contains_key(&key) {
            continue;
        }
        let Some(collective) = nccl_tests_name(&s.coll) else {
            continue;
        };
        let run_key = RunKey {
            collective: collective.to_string(),
            cluster: args.cluster.clone(),
            node_count: Some(s.n_nodes),
            total_ranks: Some(s.n_ranks),
            variant: Some(variant.clone()),
        };
        if let Some(found) = history.baseline(&run_key, s.bytes, 10)? {
            let from = format!(
                "median of {} {collective} run(s) of variant {variant} on {} node(s)",
                found.samples.len(),
                s.n_nodes
            );
            baselines.busbw.insert(key, (found.median_busbw, from));
        }
    }
    Ok(baselines)
}

/// nccl-tests' name of an NCCL collective (`AllReduce` -> `all_reduce`).
fn nccl_tests_name(coll: &str) -> Option<&'static str> {
    Some(match coll {
        "AllReduce" => "all_reduce",
        "AllGather" => "all_gather",
        "ReduceScatter" => "reduce_scatter",
        "Broadcast" => "broadcast",
        "Reduce" => "reduce",
        "AllToAll" => "alltoall",
        _ => return None,
    })
}
