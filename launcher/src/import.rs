//! `gpudirect import FILE...`: records existing nccl-tests outputs (text or `-J` JSON) as
//! runs in the history, judged by the same checks as `gpudirect run`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use gpudirect::checks::{judge, Expectations};
use gpudirect::history::{db_path_from_env, History, ImportOutcome, LaunchKind};
use gpudirect::nccl_output::{parse_with, ParseOptions};
use gpudirect::record::{new_run, RunContext};
use serde::Serialize;

use crate::cli::Globals;

/// Files larger than this are not nccl-tests outputs.
const MAX_FILE_BYTES: u64 = 256 << 20;

/// Arguments of `gpudirect import`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect import all_reduce.txt all_gather.json\n  \
    gpudirect import --cluster a3-prod --variant tcpx --exit-code 0 run-*.txt\n  \
    gpudirect --db /shared/history.sqlite import --json out.txt")]
pub struct ImportArgs {
    /// nccl-tests outputs: the text table (with any NCCL_DEBUG and mpirun lines) or a
    /// `-J` JSON report.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Cluster name to record (default: none).
    #[arg(long)]
    pub cluster: Option<String>,

    /// Environment variant name to record, e.g. `tcpx` or `none`.
    #[arg(long)]
    pub variant: Option<String>,

    /// The collective, for old outputs that do not name it (e.g. `all_reduce`).
    #[arg(long)]
    pub collective: Option<String>,

    /// The run's exit code, if you know it (checked like a live run's: 7 = wrong results).
    #[arg(long, allow_negative_numbers = true)]
    pub exit_code: Option<i32>,

    /// The network transport the run should have used (`GPUDirectTCPX`, `IB`, ...); a
    /// multi-node output whose channels used another is recorded as failed.
    #[arg(long, value_name = "NAME")]
    pub expect_transport: Option<String>,

    /// Record again even when the same output from the same file is already there.
    #[arg(long)]
    pub force: bool,

    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Imported {
    file: String,
    run_id: Option<i64>,
    duplicate: bool,
    status: Option<String>,
    collective: Option<String>,
    avg_busbw: Option<f64>,
    findings: Vec<String>,
    error: Option<String>,
}

fn import_one(history: &mut History, args: &ImportArgs, file: &Path) -> Result<Imported> {
    let path = file
        .canonicalize()
        .with_context(|| format!("cannot read `{}`", file.display()))?;
    let meta =
        std::fs::metadata(&path).with_context(|| format!("cannot read `{}`", file.display()))?;
    anyhow::ensure!(
        meta.is_file() && meta.len() <= MAX_FILE_BYTES,
        "`{}` is not a regular file of at most {MAX_FILE_BYTES} bytes",
        file.display()
    );
    let raw = std::fs::read(&path).with_context(|| format!("cannot read `{}`", file.display()))?;
    let parsed = parse_with(
        &raw,
        &ParseOptions {
            collective: args.collective.clone(),
        },
    );
    let nodes = {
        let mut hosts: Vec<&str> = parsed
            .ranks
            .iter()
            .filter_map(|r| r.host.as_deref())
            .collect();
        hosts.sort_unstable();
        hosts.dedup();
        u32::try_from(hosts.len()).unwrap_or(0)
    };
    let expect = Expectations {
        transport: args.expect_transport.clone(),
        nodes,
        sizes: Vec::new(),
    };
    let verdict = judge(&parsed, None, args.exit_code, &expect);
    let ctx = RunContext {
        cluster: args.cluster.clone(),
        launcher: LaunchKind::Import,
        variant: args.variant.clone(),
        source_path: Some(path.display().to_string()),
        exit_code: args.exit_code,
        collective: args.collective.clone(),
        started_at: meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_secs()).ok()),
        ..RunContext::default()
    };
    let run = new_run(&parsed, &raw, ctx, &verdict);
    let outcome = history.import_run(&run, args.force)?;
    Ok(Imported {
        file: file.display().to_string(),
        run_id: Some(outcome.run_id()),
        duplicate: matches!(outcome, ImportOutcome::Duplicate(_)),
        status: Some(run.status.to_string()),
        collective: Some(run.collective.clone()),
        avg_busbw: run.avg_busbw,
        findings: run.failures.clone(),
        error: None,
    })
}

/// `gpudirect import`.
pub fn run(args: &ImportArgs, globals: &Globals) -> Result<()> {
    let db = db_path_from_env(globals.db.as_deref())?;
    let mut history = History::open(&db)?;
    let mut results = Vec::new();
    for file in &args.files {
        let result = import_one(&mut history, args, file).unwrap_or_else(|e| Imported {
            file: file.display().to_string(),
            run_id: None,
            duplicate: false,
            status: None,
            collective: None,
            avg_busbw: None,
            findings: Vec::new(),
            error: Some(format!("{e:#}")),
        });
        results.push(result);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        for r in &results {
            match (&r.error, r.run_id) {
                (Some(e), _) => eprintln!("{}: error: {e}", r.file),
                (None, Some(id)) if r.duplicate => println!(
                    "{}: already recorded as run {id} (same output); --force to record again",
                    r.file
                ),
                (None, Some(id)) => {
                    let busbw = r
                        .avg_busbw
                        .map(|b| format!(", avg busbw {b:.2} GB/s"))
                        .unwrap_or_default();
                    println!(
                        "{}: recorded as run {id} ({}, {}{busbw})",
                        r.file,
                        r.collective.as_deref().unwrap_or("?"),
                        r.status.as_deref().unwrap_or("?")
                    );
                    for finding in &r.findings {
                        println!("    {finding}");
                    }
                }
                (None, None) => {}
            }
        }
        eprintln!("history: {}", db.display());
    }
    let failed = results.iter().filter(|r| r.error.is_some()).count();
    anyhow::ensure!(
        failed == 0,
        "{failed} of {} files could not be imported",
        results.len()
    );
    Ok(())
}
