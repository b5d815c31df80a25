//! One nccl-tests output, from the bytes a cell printed to the record in the history: the
//! one pipeline that `run`, `validate` and `import` share.
//!
//! ```text
//! CellOutput (stdout + "\n" + stderr, and the -J report when there is one)
//!   -> parse (text with its debug lines; the JSON report's rows when the text had none)
//!   -> checks::judge (exit code, #wrong, rows, transport)
//!   -> record::new_run (+ how it ran: RunContext)
//!   -> Evaluated { parsed, verdict, record }, which the command stores and prints
//! ```
//!
//! [`exec`] is the tail around it that the commands share: prepare a cell, run it,
//! evaluate it, record it.
//!
//! Before this module each command had its own copy of these steps, and the copies had
//! drifted: `validate` joined stdout and stderr without a newline (a last stdout line
//! merged into the first stderr line) and never read the `-J` report. Whatever a command
//! adds (validate's per-node results, run's matrix marks) it adds to the record afterwards.

use std::path::Path;

pub mod exec;
pub mod start;

use crate::checks::{judge, Expectations, Verdict};
use crate::history::NewRun;
use crate::nccl_output::{parse_headerless, parse_with, ParseOptions, ParsedOutput};
use crate::record::{new_run, RunContext};
use crate::runner::{Finished, Outcome};

/// What one cell printed.
#[derive(Debug, Clone, Default)]
pub struct CellOutput {
    /// stdout, then a newline, then stderr (the newline only when both have bytes): the
    /// bytes recorded as the run's raw output and hashed for deduplication.
    pub raw: Vec<u8>,
    /// The `-J` JSON report, when the cell asked for one and it was written.
    pub json_report: Option<Vec<u8>>,
}

impl CellOutput {
    /// A finished process's output; `json_report` is where it was asked to write `-J`.
    pub fn from_finished(finished: &Finished, json_report: Option<&Path>) -> CellOutput {
        CellOutput {
            raw: join_streams(&finished.stdout, &finished.stderr),
            json_report: json_report.and_then(read_report),
        }
    }

    /// An output read from a file (`import`).
    pub fn from_file(raw: Vec<u8>) -> CellOutput {
        CellOutput {
            raw,
            json_report: None,
        }
    }
}

/// The most of a `-J` report read (nccl-tests writes a few KiB per size).
pub const MAX_REPORT_BYTES: u64 = 16 << 20;

/// A `-J` report's bytes: only a regular file at `path` itself (a symlink is not followed,
/// a FIFO does not block), at most [`MAX_REPORT_BYTES`] (a larger one is no report);
/// `None` otherwise, and the stdout table is read instead (security review S4: the work
/// folder is private, and the report is still read as if it were not).
pub fn read_report(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_REPORT_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_REPORT_BYTES).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// stdout, then stderr on a line of its own: a last stdout line without a newline must
/// not merge into the first stderr line.
pub fn join_streams(stdout: &[u8], stderr: &[u8]) -> Vec<u8> {
    let mut raw = stdout.to_vec();
    if !stderr.is_empty() {
        if !raw.is_empty() {
            raw.push(b'\n');
        }
        raw.extend_from_slice(stderr);
    }
    raw
}

/// How to read the output.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// The collective, when the caller knows it (a header that names none, a bare table).
    pub collective: Option<String>,
    /// Read rows before any column header with nccl-tests' standard layout (a table pasted
    /// without its header, which only `import` is given), with this rank count when the
    /// output shows none.
    pub headerless: Option<Option<u32>>,
}

/// How the cell ran, besides its output.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// How the process ended (`None` for an imported file).
    pub outcome: Option<Outcome>,
    /// The exit code when known without an outcome (`import --exit-code`).
    pub exit_code: Option<i32>,
    /// What the output must show to be ok.
    pub expect: Expectations,
    /// Where, when and how it ran, for the record.
    pub context: RunContext,
}

/// A cell's output read, judged and turned into a record.
#[derive(Debug, Clone)]
pub struct Evaluated {
    /// What the output says.
    pub parsed: ParsedOutput,
    /// The checks' verdict.
    pub verdict: Verdict,
    /// What goes into the history.
    pub record: NewRun,
}

/// Reads `output` as `reading` says: the text always (it carries NCCL's debug lines and
/// the launcher's banners), the JSON report's rows when the text had none.
pub fn parse(output: &CellOutput, reading: &Reading) -> ParsedOutput {
    let opts = ParseOptions {
        collective: reading.collective.clone(),
    };
    let mut parsed = match reading.headerless {
        Some(ranks) => parse_headerless(&output.raw, &opts, ranks),
        None => parse_with(&output.raw, &opts),
    };
    if let Some(json) = &output.json_report {
        let from_json = parse_with(json, &opts);
        if !from_json.rows.is_empty() && parsed.rows.is_empty() {
            parsed.rows = from_json.rows;
            parsed.avg_busbw = parsed.avg_busbw.or(from_json.avg_busbw);
        }
    }
    parsed
}

/// The whole pipeline: parse, judge, record.
pub fn evaluate(output: CellOutput, reading: &Reading, run: Run) -> Evaluated {
    let parsed = parse(&output, reading);
    judge_and_record(parsed, &output, run)
}

/// A cell that ran as a process (`run` and `validate`): its output and `-J` report read
/// with the collective it ran, judged on how the process ended. The record's exit code
/// and collective come from the same facts.
pub fn evaluate_finished(
    finished: &Finished,
    json_report: Option<&Path>,
    collective: &str,
    expect: Expectations,
    mut context: RunContext,
) -> Evaluated {
    context.exit_code = finished.outcome.exit_code();
    context.collective = Some(collective.to_string());
    evaluate(
        CellOutput::from_finished(finished, json_report),
        &Reading {
            collective: Some(collective.to_string()),
            headerless: None,
        },
        Run {
            outcome: Some(finished.outcome),
            exit_code: None,
            expect,
            context,
        },
    )
}

/// The pipeline after [`parse`], for a caller that looked at the parsed output first
/// (`import` refuses a bare table it cannot read before recording it).
pub fn judge_and_record(parsed: ParsedOutput, output: &CellOutput, run: Run) -> Evaluated {
    let verdict = judge(&parsed, run.outcome, run.exit_code, &run.expect);
    let record = new_run(&parsed, &output.raw, run.context, &verdict);
    Evaluated {
        parsed,
        verdict,
        record,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #[test]
    fn a_report_is_read_only_from_a_regular_file_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        std::fs::write(&real, b"{}").unwrap();
        assert_eq!(read_report(&real).as_deref(), Some(&b"{}"[..]));
        // A link planted where the report goes is not followed.
        let link = dir.path().join("cell-001.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(read_report(&link), None);
        // A FIFO is not waited on.
        let fifo = dir.path().join("cell-002.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(read_report(&fifo), None);
        assert_eq!(read_report(&dir.path().join("missing.json")), None);
    }

    use super::*;
    use crate::history::LaunchKind;

    #[test]
    fn streams_are_joined_on_their_own_lines() {
        assert_eq!(join_streams(b"a\n", b"b\n"), b"a\n\nb\n");
        assert_eq!(
            join_streams(b"# Avg bus bandwidth : 1", b"warn"),
            b"# Avg bus bandwidth : 1\nwarn"
        );
        assert_eq!(join_streams(b"", b"warn"), b"warn");
        assert_eq!(join_streams(b"out", b""), b"out");
    }

    /// Every recorded output under tests/fixtures/nccl-tests, by its name.
    pub(crate) fn fixture_paths() -> Vec<(String, std::path::PathBuf)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nccl-tests");
        let mut out = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "txt" || e == "json") {
                    let name = path.strip_prefix(&root).unwrap().display().to_string();
                    out.push((name, path));
                }
            }
        }
        out.sort();
        assert!(out.len() >= 10, "fixtures missing: {}", out.len());
        out
    }

    fn fixtures() -> Vec<(String, Vec<u8>)> {
        fixture_paths()
            .into_iter()
            .map(|(name, path)| {
                let raw = std::fs::read(&path).unwrap();
                (name, raw)
            })
            .collect()
    }

    /// What `import` makes of `raw`: a file, read as possibly headerless, with the
    /// collective given as run and validate know it (`import --collective NAME`: an output
    /// without a header names none), and `--exit-code 0` passed to the checks and the
    /// record.
    pub(crate) fn as_import(raw: &[u8], collective: &str) -> Evaluated {
        evaluate(
            CellOutput::from_file(raw.to_vec()),
            &Reading {
                collective: Some(collective.to_string()),
                headerless: Some(None),
            },
            Run {
                exit_code: Some(0),
                context: RunContext {
                    launcher: LaunchKind::Import,
                    exit_code: Some(0),
                    ..RunContext::default()
                },
                ..Run::default()
            },
        )
    }

    /// What a record says about the output itself, leaving out how and when it ran.
    pub(crate) fn output_facts(r: &NewRun) -> String {
        format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
            r.status,
            r.transport,
            r.avg_busbw,
            r.rows,
            r.failures,
            r.raw_output,
            r.provenance.nccl_version,
            r.total_ranks,
            r.collective,
            r.exit_code
        )
    }

    /// The three commands read a given output through this module with their own context
    /// (run: a finished process with its exit code; validate: the same, judged at the
    /// pair's size; import: a file), and record the same rows, status, transport and
    /// findings.
    #[test]
    fn run_validate_and_import_record_an_output_identically() {
        for (name, raw) in fixtures() {
            let finished = Finished {
                outcome: Outcome::Exited { code: 0 },
                stdout: raw.clone(),
                stdout_dropped: 0,
                stderr: Vec::new(),
                elapsed: std::time::Duration::from_secs(1),
            };
            // What run and validate call, each with its own context.
            let collective = crate::nccl_output::parse(&raw)
                .collective
                .unwrap_or_else(|| "all_reduce".into());
            let as_run = evaluate_finished(
                &finished,
                None,
                &collective,
                Expectations::default(),
                RunContext {
                    launcher: LaunchKind::Srun,
                    ..RunContext::default()
                },
            );
            let as_validate = evaluate_finished(
                &finished,
                None,
                &collective,
                Expectations::default(),
                RunContext {
                    launcher: LaunchKind::Local,
                    variant: Some("validate:pairs".into()),
                    nodes: vec!["gpu0".into(), "gpu1".into()],
                    ..RunContext::default()
                },
            );
            // What import calls.
            let as_import = as_import(&raw, &collective);
            let facts = output_facts(&as_run.record);
            assert_eq!(facts, output_facts(&as_validate.record), "{name}");
            assert_eq!(facts, output_facts(&as_import.record), "{name}");
            assert_eq!(
                as_run.record.raw_output, raw,
                "{name}: raw output kept as printed"
            );
        }
    }
}
