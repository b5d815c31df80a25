//! `gpudirect import FILE...`: records existing nccl-tests outputs (text or `-J` JSON) as
//! runs in the history, judged by the same checks as `gpudirect run`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use gpudirect::checks::{header_sizes, ran_alone, Expectations};
use gpudirect::history::{History, ImportOutcome, LaunchKind};
use gpudirect::nccl_output::{busbw_factor, ParsedOutput, ASSUMED_LAYOUT_NOTE};
use gpudirect::record::inference_notes;
use gpudirect::record::RunContext;
use serde::Serialize;

use super::{Ctx, ExitStatus};
use gpudirect::cell::{self, CellOutput, Evaluated, Reading};
use gpudirect::noteln;
use gpudirect::outln;
use gpudirect::output::emit_json;

/// Files larger than this are not nccl-tests outputs.
const MAX_FILE_BYTES: u64 = 256 << 20;

/// Arguments of `gpudirect import`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect import all_reduce.txt all_gather.json\n  \
    gpudirect import --cluster a3-prod --variant tcpx --exit-code 0 run-*.txt\n  \
    gpudirect import --label baseline-2026-11 all_reduce.txt\n  \
    gpudirect import --collective all_reduce --ranks 16 pasted-table.txt   # rows only\n  \
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

    /// A name to record with the run(s), e.g. `baseline-2026-11`: `gpudirect history
    /// --label NAME` lists them and `gpudirect compare RUN --baseline-label NAME` compares
    /// with the newest of them.
    #[arg(long, value_name = "NAME", value_parser = parse_label)]
    pub label: Option<String>,

    /// The collective, for outputs that do not name it (e.g. `all_reduce`): nccl-tests
    /// before 2.17, and bare tables.
    #[arg(long)]
    pub collective: Option<String>,

    /// The number of ranks (GPUs in the communicator), for outputs that do not show it:
    /// a bare table pasted without nccl-tests' header. Each row's busbw is checked
    /// against its algbw with it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks: Option<u32>,

    /// What each node's data NICs carry together, in Gbit/s (e.g. 800 for A3's 4 x 200):
    /// `show`, `compare` and the report then give busbw also as a share of it. Runs made
    /// with a --gpudirect profile that declares line_rate_gbit get it from the profile.
    #[arg(long, value_name = "GBIT", value_parser = clap::value_parser!(u32).range(1..))]
    pub line_rate_gbit: Option<u32>,

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
    /// How the output was read, when that matters (a bare table's assumed layout).
    notes: Vec<String>,
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
    let raw = readable_text(raw)?;
    if let Some(what) = nccl_output::other_program(&String::from_utf8_lossy(&raw)) {
        anyhow::bail!(
            "this is {what}; gpudirect import reads the output of nccl-tests' *_perf programs (or rccl-tests'): nothing recorded"
        );
    }
    let reading = Reading {
        collective: args.collective.clone(),
        headerless: Some(args.ranks),
    };
    let output = CellOutput::from_file(raw);
    let parsed = cell::parse(&output, &reading);
    // Text with no part of nccl-tests' output at all is no failed run: nothing to record.
    anyhow::ensure!(
        !parsed.rows.is_empty()
            || parsed.has_preamble()
            || parsed.avg_busbw.is_some()
            || parsed.out_of_bounds.is_some()
            || !parsed.failures.is_empty(),
        "this holds no nccl-tests header, table, summary or failure (other text only): not an nccl-tests output; nothing recorded"
    );
    check_bare_table(&parsed)?;
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
        // What the output's own header asked for: a paste cut short misses the tail.
        sizes: header_sizes(&parsed),
        nics: Vec::new(),
        pasted: true,
    };
    let context = RunContext {
        cluster: args.cluster.clone(),
        launcher: LaunchKind::Import,
        variant: args.variant.clone(),
        label: args.label.clone(),
        source_path: Some(path.display().to_string()),
        exit_code: args.exit_code,
        collective: args.collective.clone(),
        line_rate_gbps: args.line_rate_gbit.map(|g| f64::from(g) / 8.0),
        started_at: meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_secs()).ok()),
        tool: gpudirect::history::Tool::Import,
        ..RunContext::default()
    };
    let Evaluated {
        parsed,
        record: run,
        ..
    } = cell::judge_and_record(
        parsed,
        &output,
        cell::Run {
            outcome: None,
            exit_code: args.exit_code,
            expect,
            context,
        },
    );
    let outcome = history.import_run(&run, args.force)?;
    Ok(Imported {
        file: file.display().to_string(),
        run_id: Some(outcome.run_id()),
        duplicate: matches!(outcome, ImportOutcome::Duplicate(_)),
        status: Some(run.status.to_string()),
        collective: Some(run.collective.clone()),
        avg_busbw: run.avg_busbw,
        findings: run.failures.clone(),
        notes: parsed
            .notes
            .iter()
            .filter(|n| n.as_str() == ASSUMED_LAYOUT_NOTE)
            .cloned()
            .chain(inference_notes(&parsed))
            .collect(),
        error: None,
    })
}

/// The file's text: gzip data decompressed (at most [`MAX_FILE_BYTES`]); an empty file, a
/// gzip stream cut short and binary data refused, naming what they are (issue #40).
fn readable_text(raw: Vec<u8>) -> Result<Vec<u8>> {
    use std::io::Read;
    anyhow::ensure!(
        raw.iter().any(|b| !b.is_ascii_whitespace()),
        "this file is empty: not an nccl-tests output; nothing recorded"
    );
    let text = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut out)
            .map_err(|e| {
                anyhow::anyhow!(
                    "this is gzip data that cannot be decompressed ({e}: cut short or damaged): nothing recorded; give the whole file, or its text"
                )
            })?;
        anyhow::ensure!(
            out.len() as u64 <= MAX_FILE_BYTES,
            "this gzip data decompresses to more than {MAX_FILE_BYTES} bytes: not an nccl-tests output; nothing recorded"
        );
        out
    } else {
        raw
    };
    if let Some(at) = text.iter().take(64 * 1024).position(|&b| b == 0) {
        anyhow::bail!(
            "this is binary data (a NUL byte at offset {at}), not an nccl-tests output (text or -J JSON); nothing recorded"
        );
    }
    Ok(text)
}

/// Checks a table without nccl-tests' header: it imports only when the collective and
/// the rank count are known (from `--collective` and `--ranks`), and only when every
/// row's busbw is its algbw times the factor they give, so that a wrong `--ranks` is
/// caught rather than recorded. Outputs with a header pass untouched. Pure.
pub fn check_bare_table(parsed: &ParsedOutput) -> Result<()> {
    if parsed.has_preamble() || parsed.rows.is_empty() {
        return Ok(());
    }
    // Interleaved rows of one-rank worlds (busbw 0.00 everywhere, sizes going back): no
    // collective or rank count to ask for, the run itself is the problem.
    if let Some(evidence) = parsed.ran_alone_evidence() {
        anyhow::bail!("this output has no header, and {}", ran_alone(&evidence));
    }
    // Where nothing was given, the parser inferred what only one answer fits; where it
    // could not, its reason names what to pass.
    let missing: Vec<&str> = parsed
        .inferences
        .iter()
        .filter(|i| i.value.is_none())
        .map(|i| i.basis.as_str())
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "this output has no header, and {}",
        missing.join("; ")
    );
    let mut unknown = Vec::new();
    if parsed.collective.is_none() {
        unknown.push("--collective (e.g. all_reduce)");
    }
    if parsed.nranks().is_none() {
        unknown.push("--ranks (the number of ranks)");
    }
    anyhow::ensure!(
        unknown.is_empty(),
        "this output has no header: pass {}",
        unknown.join(" and ")
    );
    let bad = parsed.busbw_mismatches();
    if let Some(first) = bad.first() {
        let collective = parsed.collective.as_deref().unwrap_or("?");
        let ranks = parsed.nranks().unwrap_or(0);
        let factor = busbw_factor(collective, ranks).map_or("?".into(), |f| format!("{f:.4}"));
        let size = parsed.rows.get(first.row).map_or(0, |r| r.size_bytes);
        anyhow::bail!(
            "this table's busbw does not fit {collective} on {ranks} ranks: at line {} \
             (size {size} B) busbw is {:.2} but algbw x {factor} is {:.2}, and {} value(s) of {} rows \
             disagree; check --collective and --ranks",
            first.line,
            first.printed,
            first.expected,
            bad.len(),
            parsed.rows.len()
        );
    }
    Ok(())
}

fn parse_label(s: &str) -> Result<String, String> {
    let label = s.trim();
    if label.is_empty() {
        return Err("an empty label: write a name, e.g. baseline-2026-11".into());
    }
    if label.chars().any(char::is_control) {
        return Err(format!(
            "`{}`: a label cannot contain control characters (tabs, newlines)",
            label.escape_default()
        ));
    }
    Ok(label.to_string())
}

/// `gpudirect import`.
pub fn run(args: &ImportArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let db = ctx.db_path()?;
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
            notes: Vec::new(),
            error: Some(format!("{e:#}")),
        });
        results.push(result);
    }
    if args.json {
        emit_json(&results)?;
    } else {
        for r in &results {
            match (&r.error, r.run_id) {
                (Some(e), _) => noteln!("{}: error: {e}", r.file),
                (None, Some(id)) if r.duplicate => outln!(
                    "{}: already recorded as run {id} (same output); --force to record again",
                    r.file
                )?,
                (None, Some(id)) => {
                    let busbw = r
                        .avg_busbw
                        .map(|b| format!(", avg busbw {b:.2} GB/s"))
                        .unwrap_or_default();
                    outln!(
                        "{}: recorded as run {id} ({}, {}{busbw})",
                        r.file,
                        r.collective.as_deref().unwrap_or("?"),
                        r.status.as_deref().unwrap_or("?")
                    )?;
                    for note in &r.notes {
                        outln!("    note: {note}")?;
                    }
                    for finding in &r.findings {
                        outln!("    {finding}")?;
                    }
                }
                (None, None) => {}
            }
        }
        noteln!("history: {}", db.display());
    }
    let failed = results.iter().filter(|r| r.error.is_some()).count();
    anyhow::ensure!(
        failed == 0,
        "{failed} of {} files could not be imported",
        results.len()
    );
    Ok(ExitStatus::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpudirect::nccl_output::{parse, parse_headerless, ParseOptions};

    fn fixture(rel: &str) -> Vec<u8> {
        std::fs::read(format!(
            "{}/../tests/fixtures/nccl-tests/{rel}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    #[test]
    fn labels_are_trimmed_and_checked() {
        assert_eq!(parse_label("  weekly "), Ok("weekly".into()));
        assert!(parse_label("   ").unwrap_err().contains("empty label"));
        assert!(parse_label("a\tb")
            .unwrap_err()
            .contains("control characters"));
    }

    /// Issue #33: rows of several one-rank worlds, interleaved, with no header (sizes
    /// repeat out of order, busbw 0.00 everywhere) are judged "every rank ran alone", with
    /// the fix, before any question about the collective or the rank count.
    #[test]
    fn interleaved_one_rank_worlds_without_a_header_say_every_rank_ran_alone() {
        let row = |size: u64, p: u64| {
            let time = 10.0 + p as f64 * 0.3;
            let algbw = size as f64 / time / 1000.0;
            format!(
                "{size:>12}  {:>12}     float     sum      -1  {time:8.2}  {algbw:6.2}    0.00      0  {time:8.2}  {algbw:6.2}    0.00      0\n",
                size / 4
            )
        };
        // Four processes, each printing 1 KiB..64 KiB; their lines mixed.
        let mut rows = String::new();
        for (size, p) in [
            (1024, 0),
            (1024, 1),
            (4096, 0),
            (2048, 2),
            (1024, 3),
            (65536, 1),
        ] {
            rows += &row(size, p);
        }
        let opts = ParseOptions::default();
        let err = check_bare_table(&parse_headerless(rows.as_bytes(), &opts, None))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("this output has no header, and the sizes go back")
                && err.contains("every process ran the test alone")
                && err.contains("Fix: build nccl-tests with MPI=1"),
            "{err}"
        );
    }

    #[test]
    fn outputs_with_a_header_pass_and_bare_tables_need_both_names() {
        let full = fixture("h200x2-nvlink/all_gather_g2.txt");
        assert!(check_bare_table(&parse(&full)).is_ok());
        let text = String::from_utf8(full).unwrap();
        let rows: String = text
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|w| w.parse::<u64>().is_ok())
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let opts = |c: Option<&str>| ParseOptions {
            collective: c.map(str::to_string),
        };
        let err = |c: Option<&str>, r: Option<u32>| {
            check_bare_table(&parse_headerless(rows.as_bytes(), &opts(c), r))
                .unwrap_err()
                .to_string()
        };
        // all_gather's rows (redop none, root -1, busbw = algbw / 2) fit all_gather and
        // alltoall on 2 ranks; their in-place results are checked (`#wrong` 0), which
        // alltoall's never are (`N/A`): all_gather, and the rank count, are inferred.
        let both = parse_headerless(rows.as_bytes(), &opts(None), None);
        assert!(check_bare_table(&both).is_ok());
        assert_eq!(
            (both.collective.as_deref(), both.nranks()),
            (Some("all_gather"), Some(2))
        );
        // With the data check off (`N/A` in both placements) the collective must be given.
        let unchecked = rows
            .replace("       0  ", "     N/A  ")
            .replace("       0\n", "     N/A\n");
        let err_unchecked =
            check_bare_table(&parse_headerless(unchecked.as_bytes(), &opts(None), None))
                .unwrap_err()
                .to_string();
        assert_eq!(
            err_unchecked,
            "this output has no header, and rows with `redop` none, root -1 fit all_gather \
             or alltoall: pass --collective"
        );
        let inferred = parse_headerless(rows.as_bytes(), &opts(Some("all_gather")), None);
        assert!(check_bare_table(&inferred).is_ok());
        assert_eq!(inferred.nranks(), Some(2));
        assert_eq!(
            inference_notes(&inferred),
            ["inferred 2 ranks: only 2 ranks fit busbw/algbw in every row (busbw = algbw x 0.5000)"]
        );
        // all_gather on 2 ranks: busbw = algbw / 2. Called all_reduce, busbw would be algbw.
        let wrong = err(Some("all_reduce"), Some(2));
        assert!(
            wrong.contains("does not fit all_reduce on 2 ranks"),
            "{wrong}"
        );
        assert!(wrong.contains("check --collective and --ranks"), "{wrong}");
        let good = parse_headerless(rows.as_bytes(), &opts(Some("all_gather")), Some(2));
        assert!(check_bare_table(&good).is_ok());
        // Nothing to judge: an empty or garbage file is left to the checks, not refused here.
        assert!(check_bare_table(&parse_headerless(b"hello\n", &opts(None), None)).is_ok());
    }
}
