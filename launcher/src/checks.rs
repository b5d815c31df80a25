//! Judging one nccl-tests run: its exit code, `#wrong`, out-of-bounds, missing rows, and
//! the transport NCCL really used against the one expected. Pure: the same verdict for an
//! imported file and for a cell the runner just ran.

use serde::Serialize;

use crate::history::RunStatus;
use crate::nccl_output::{FailureKind, MinBwCheck, ParsedOutput, StepKind, TransportMatch};
use crate::runner::Outcome;

/// What a run is expected to show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expectations {
    /// The `NET/<name>` transport inter-node channels must use (a profile's `transport`),
    /// when the run spans several nodes.
    pub transport: Option<String>,
    /// Nodes the run spans; one node has no network path to check.
    pub nodes: u32,
    /// Message sizes the table must contain, when known (from `-b/-e/-f`).
    pub sizes: Vec<u64>,
    /// The NICs the expected transport may use (its `NET/<name> : Using [N]nic` lines), as the
    /// nodes name them ([`crate::profile::profile_nics`]); empty leaves the NICs unchecked.
    pub nics: Vec<String>,
    /// The output is a paste someone made (`import`), not a run's whole output: rows left
    /// out of it, where the run's own summary is there, are said rather than failed.
    pub pasted: bool,
}

/// One thing found wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Which check.
    pub check: &'static str,
    /// What was found, for the user.
    pub message: String,
}

/// The verdict on a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// ok / wrong / timeout / failed / interrupted.
    pub status: RunStatus,
    /// Every finding; empty when ok.
    pub findings: Vec<Finding>,
    /// The network transport seen in channel lines, if any.
    pub transport: Option<String>,
}

/// What an nccl-tests exit code means (its testResult_t values, as its sources define them).
pub fn exit_code_meaning(code: i32) -> &'static str {
    match code {
        0 => "success",
        1 => "internal error",
        2 => "CUDA error",
        3 => "NCCL error",
        4 => "timeout (-T)",
        5 => "not implemented or too few GPUs",
        6 => "invalid usage",
        7 => "wrong results or below NCCL_TESTS_MIN_BW",
        255 => "invalid -b/-e sizes",
        _ => "unknown exit code",
    }
}

/// The message sizes nccl-tests runs for `-b min -e max -f factor` (or `-i step`).
pub fn expected_sizes(min: u64, max: u64, factor: Option<u64>, step: Option<u64>) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut size = min;
    // Bounded: a factor of 1 or a step of 0 would never end.
    while size <= max && sizes.len() < 4096 {
        sizes.push(size);
        size = match (factor, step) {
            (Some(f), _) if f > 1 => size.saturating_mul(f),
            (_, Some(s)) if s > 0 => size.saturating_add(s),
            _ => break,
        };
        if size == u64::MAX {
            break;
        }
    }
    sizes
}

/// What "every rank ran alone" means and how to fix it, after the `evidence` for it.
pub fn ran_alone(evidence: &str) -> String {
    format!(
        "{evidence}: every process ran the test alone, in a world of its own (its own GPUs only), so no figure \
         measures the links between them. Fix: build nccl-tests with MPI=1 and launch it with \
         `srun --mpi=pmix` (or mpirun inside the allocation); `gpudirect-mpi check` tells \
         which launch works"
    )
}

/// The sizes an output's own header asked for (`minBytes`, `maxBytes`, `step:`), for an
/// imported file, whose command line is not known: empty without a header.
pub fn header_sizes(parsed: &ParsedOutput) -> Vec<u64> {
    let Some(p) = &parsed.params else {
        return Vec::new();
    };
    let (Some(min), Some(max)) = (p.min_bytes, p.max_bytes) else {
        return Vec::new();
    };
    let (factor, step) = match &p.step {
        Some(s) if s.kind == StepKind::Factor => (Some(s.value), None),
        Some(s) if s.kind == StepKind::Increment => (None, Some(s.value)),
        _ => return Vec::new(),
    };
    expected_sizes(min, max, factor, step)
}

/// Judges a run. `outcome` is `None` for an imported file (the exit code, if known, is in
/// `exit_code`).
pub fn judge(
    parsed: &ParsedOutput,
    outcome: Option<Outcome>,
    exit_code: Option<i32>,
    expect: &Expectations,
) -> Verdict {
    let mut tally = Tally::default();
    let code = judge_exit(&mut tally, outcome, exit_code);
    // nccl-tests ends a run whose results were wrong or too slow with exit code 7 and a
    // `Test failure` line: that line is the consequence, and the run is `wrong`.
    let min_bw_failed = parsed
        .avg_busbw
        .as_ref()
        .is_some_and(|a| a.min_bw_check == MinBwCheck::Failed);
    judge_failures(&mut tally, parsed, code == Some(7) || min_bw_failed);
    judge_results(&mut tally, parsed, min_bw_failed);
    judge_worlds(&mut tally, parsed);
    judge_rows(&mut tally, parsed, expect);
    judge_transport(&mut tally, parsed, expect);
    Verdict {
        status: tally.status,
        findings: tally.findings,
        transport: parsed.network_transport().map(str::to_string),
    }
}

/// How the process ended (timeout, Ctrl-C, signal) and a non-zero exit code; returns the
/// exit code, from `exit_code` or else the outcome.
fn judge_exit(tally: &mut Tally, outcome: Option<Outcome>, exit_code: Option<i32>) -> Option<i32> {
    match outcome {
        Some(Outcome::TimedOut) => {
            tally.add(
                RunStatus::Timeout,
                "timeout",
                "ran past its timeout: the process group was stopped",
            );
        }
        Some(Outcome::NotStarted) => {
            // Its own status would need a new history column value; the finding names it,
            // and the callers (`cell::exec`) put "could not start" first.
            tally.add(
                RunStatus::Timeout,
                "start",
                "showed no sign of NCCL within its start-up deadline: the process group was stopped",
            );
        }
        Some(Outcome::Interrupted) => {
            tally.add(
                RunStatus::Interrupted,
                "interrupted",
                "interrupted (Ctrl-C) before it finished",
            );
        }
        Some(Outcome::Signaled { signal }) => {
            tally.add(
                RunStatus::Failed,
                "exit",
                format!("killed by signal {signal}"),
            );
        }
        Some(Outcome::Exited { .. }) | None => {}
    }
    let code = exit_code.or_else(|| outcome.and_then(Outcome::exit_code));
    if let Some(code) = code.filter(|&c| c != 0) {
        let kind = if code == 7 {
            RunStatus::Wrong
        } else if code == 4 {
            RunStatus::Timeout
        } else {
            RunStatus::Failed
        };
        tally.add(
            kind,
            "exit",
            format!("exit code {code}: {}", exit_code_meaning(code)),
        );
    }
    code
}

/// The failure lines nccl-tests printed; a `Test failure` after a wrong-results exit
/// (`wrong_exit`) is that exit's consequence, so the run is `wrong`.
fn judge_failures(tally: &mut Tally, parsed: &ParsedOutput, wrong_exit: bool) {
    for failure in &parsed.failures {
        let kind = match failure.kind {
            FailureKind::BelowMinBandwidth | FailureKind::OutOfBounds => RunStatus::Wrong,
            FailureKind::TestFailure if wrong_exit => RunStatus::Wrong,
            FailureKind::Timeout => RunStatus::Timeout,
            _ => RunStatus::Failed,
        };
        tally.add(
            kind,
            "failure",
            match &failure.host {
                Some(host) => format!("{host}: {}", failure.text),
                None => failure.text.clone(),
            },
        );
    }
}

/// Wrong results: `#wrong` rows, out-of-bounds values, a bandwidth below NCCL_TESTS_MIN_BW.
fn judge_results(tally: &mut Tally, parsed: &ParsedOutput, min_bw_failed: bool) {
    let wrong: Vec<u64> = parsed.wrong_rows().map(|r| r.size_bytes).collect();
    if !wrong.is_empty() {
        tally.add(
            RunStatus::Wrong,
            "wrong",
            format!(
                "#wrong > 0 at {} size(s), first {} B",
                wrong.len(),
                wrong[0]
            ),
        );
    }
    if let Some(oob) = &parsed.out_of_bounds {
        if !oob.ok {
            tally.add(
                RunStatus::Wrong,
                "out_of_bounds",
                format!("{} out-of-bounds values", oob.count),
            );
        }
    }
    if min_bw_failed {
        tally.add(
            RunStatus::Wrong,
            "min_bw",
            "average bus bandwidth below NCCL_TESTS_MIN_BW",
        );
    }
}

/// Ranks that ran alone, or several runs' rows interleaved in one output.
fn judge_worlds(tally: &mut Tally, parsed: &ParsedOutput) {
    if let Some(evidence) = parsed.ran_alone_evidence() {
        tally.add(RunStatus::Failed, "worlds", ran_alone(&evidence));
    }
    if let Some((runs, ranks)) = parsed.separate_worlds() {
        tally.add(
            RunStatus::Failed,
            "worlds",
            format!(
                "the output holds {runs} separate runs (the test's header printed {runs} times, \
                 {ranks} ranks each): their rows interleave, so no figure belongs to one run; \
                 give each run its own output file (srun -o, or one log per job)"
            ),
        );
    }
}

/// Rows: none at all, or sizes the command line or header asks for that the table lacks.
fn judge_rows(tally: &mut Tally, parsed: &ParsedOutput, expect: &Expectations) {
    let largest_row = parsed.rows.iter().map(|r| r.size_bytes).max().unwrap_or(0);
    if parsed.rows.is_empty() {
        tally.add(RunStatus::Failed, "rows", "no result rows in the output");
    } else if expect.sizes.is_empty() && parsed.has_preamble() && parsed.avg_busbw.is_none() {
        // A header without its size range (a paste that starts below `# nThread`) and no
        // summary: whether rows are missing cannot be told, so it is said, not judged.
        tally.add(
            RunStatus::Ok,
            "rows",
            format!(
                "no summary line (`# Avg bus bandwidth`) after the last row ({largest_row} B): \
                 the output may be cut short, and without its `minBytes`/`maxBytes` line the \
                 missing sizes cannot be told: not known to be a complete run"
            ),
        );
    } else if let Some(message) = elided_rows(parsed, expect) {
        tally.add(RunStatus::Ok, "rows", message);
    } else if !expect.sizes.is_empty() {
        // nccl-tests rounds each size down to whole, 16-byte-aligned per-rank chunks: a
        // small size may vanish (all_gather on 2 ranks starts at 32 B) and a large one may
        // print a little smaller (1008 B for 1 KiB on 3 ranks). Only sizes well above the
        // rounding must appear, within 10%, and nearer to that size than to the one before
        // it: with a linear step (`-i`) the sizes lie closer than 10% apart, and the last row
        // of an output cut short would otherwise stand for every size after it.
        let ranks = u64::from(parsed.nranks().unwrap_or(1).max(1));
        // Sizes above a `# Reducing maxBytes` were never run: nccl-tests said so.
        let largest_run = parsed.reduced_max_bytes.unwrap_or(u64::MAX);
        let mut sizes = expect.sizes.clone();
        sizes.sort_unstable();
        let missing: Vec<u64> = sizes
            .iter()
            .enumerate()
            .filter(|&(_, &s)| s >= 256 * ranks && s <= largest_run)
            .filter(|&(i, &s)| {
                let previous = if i == 0 { 0 } else { sizes[i - 1] };
                let nearer = previous + (s - previous) / 2;
                !parsed.rows.iter().any(|r| {
                    r.size_bytes <= s
                        && r.size_bytes > nearer
                        && r.size_bytes.saturating_mul(10) >= s.saturating_mul(9)
                })
            })
            .map(|(_, &s)| s)
            .collect();
        let tail_cut = !missing.is_empty() && missing.iter().all(|&s| s > largest_row);
        if tail_cut && parsed.avg_busbw.is_none() {
            // A pasted or copied output that stops before the run did (no summary line).
            tally.add(
                RunStatus::Failed,
                "rows",
                format!(
                    "the output is cut short: its rows stop at {} B, the {} larger size(s) \
                     its header asks for (up to {} B) are missing, and it has no summary line \
                     (`# Avg bus bandwidth`): not a complete run",
                    largest_row,
                    missing.len(),
                    missing[missing.len() - 1]
                ),
            );
        } else if !missing.is_empty() && expect.pasted && parsed.avg_busbw.is_some() {
            // The run printed its summary, so it completed; the paste left rows out (an
            // author's `...`, a README excerpt from 8 MiB on).
            tally.add(
                RunStatus::Ok,
                "rows",
                format!(
                    "the run completed (its summary line is there), but the paste leaves out \
                     {} of the sizes its header asks for, first {} B: its average busbw is \
                     the run's own, over rows not all shown",
                    missing.len(),
                    missing[0]
                ),
            );
        } else if !missing.is_empty() {
            tally.add(
                RunStatus::Failed,
                "rows",
                format!(
                    "{} expected sizes missing from the table, first {} B",
                    missing.len(),
                    missing[0]
                ),
            );
        }
    }
}

/// Issue #40 form 7 where the header's sizes are not in the paste: an author's cut marker
/// (`...`) between the table's start and the run's own summary says rows were left out of
/// the paste, and the summary says the run completed. Pastes only: a live run's output
/// has no author.
fn elided_rows(parsed: &ParsedOutput, expect: &Expectations) -> Option<String> {
    let summary = parsed.avg_busbw.as_ref()?.line;
    if !expect.pasted || !expect.sizes.is_empty() {
        return None;
    }
    let table_start = parsed
        .tables
        .iter()
        .map(|t| t.line)
        .chain(parsed.rows.iter().map(|r| r.line))
        .min()?;
    let cuts: Vec<String> = parsed
        .cut_at_lines
        .iter()
        .filter(|&&n| n > table_start && n < summary)
        .map(ToString::to_string)
        .collect();
    if cuts.is_empty() {
        return None;
    }
    let sizes = parsed.rows.iter().map(|r| r.size_bytes);
    let (first, last) = (sizes.clone().min()?, sizes.max()?);
    Some(format!(
        "the run completed (its summary line is there), but the paste leaves rows out (cut \
         at line{} {}): it shows {} row(s), {first} B to {last} B, and its average busbw is \
         the run's own, over rows not all shown",
        if cuts.len() > 1 { "s" } else { "" },
        cuts.join(", "),
        parsed.rows.len()
    ))
}

/// The transport between nodes against the expected one, and the NICs it used.
fn judge_transport(tally: &mut Tally, parsed: &ParsedOutput, expect: &Expectations) {
    if let (Some(expected), true) = (&expect.transport, expect.nodes > 1) {
        let problem = match parsed.transport_match(expected) {
            TransportMatch::Used => None,
            TransportMatch::Other { seen } => Some(format!(
                "expected NET/{expected} between nodes, but NCCL used {}: the fast transport did not load",
                seen.join(", ")
            )),
            TransportMatch::Mixed { seen } => Some(format!(
                "expected NET/{expected} between nodes, but some channels used others ({})",
                seen.join(", ")
            )),
            TransportMatch::NoEvidence => Some(format!(
                "expected NET/{expected} between nodes, but the output has no NCCL channel lines to prove it (run with NCCL_DEBUG=INFO)"
            )),
        };
        if let Some(message) = problem {
            tally.add(RunStatus::Failed, "transport", message);
        } else if let Some(message) = stray_nics(parsed, expected, &expect.nics) {
            tally.add(RunStatus::Failed, "transport", message);
        }
    }
}

/// The NICs the expected transport said it used that the profile does not give it, e.g.
/// `NET/Socket used eth2 on node[1-2], but the profile's NIC is eth1`. `None` when every
/// NIC is allowed, none is expected, or NCCL named none (older versions print no such line).
fn stray_nics(parsed: &ParsedOutput, transport: &str, allowed: &[String]) -> Option<String> {
    if allowed.is_empty() {
        return None;
    }
    let stray: Vec<String> = parsed
        .debug
        .nics_of(transport)
        .into_iter()
        .filter(|n| !allowed.contains(&n.nic))
        .map(|n| {
            if n.hosts.is_empty() {
                n.nic.clone()
            } else {
                format!(
                    "{} on {}",
                    n.nic,
                    gpudirect_core::hostlist::compress(&n.hosts)
                )
            }
        })
        .collect();
    if stray.is_empty() {
        return None;
    }
    let (noun, list) = match allowed {
        [one] => ("NIC is", one.clone()),
        many => ("NICs are", many.join(", ")),
    };
    Some(format!(
        "NET/{transport} used {}, but the profile's {noun} {list}: a variable set before the \
         plugin (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) or an NCCL config file chose the NIC; \
         `gpudirect probe` shows where each variable came from",
        stray.join("; ")
    ))
}

/// The findings of [`judge`] so far, and the worst status they add up to.
#[derive(Default)]
struct Tally {
    status: RunStatus,
    findings: Vec<Finding>,
}

impl Tally {
    /// Records a finding that makes the run at least `status`.
    fn add(&mut self, status: RunStatus, check: &'static str, message: impl Into<String>) {
        // failed/timeout/interrupted outrank wrong, which outranks ok.
        let rank = |s: RunStatus| match s {
            RunStatus::Ok => 0,
            RunStatus::Wrong => 1,
            RunStatus::Failed => 2,
            RunStatus::Timeout => 3,
            RunStatus::Interrupted => 4,
        };
        if rank(status) > rank(self.status) {
            self.status = status;
        }
        self.findings.push(Finding {
            check,
            message: message.into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl_output::{parse, parse_with, ParseOptions};

    fn fixture(name: &str) -> ParsedOutput {
        let path = format!(
            "{}/../tests/fixtures/nccl-tests/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        parse(&std::fs::read(path).unwrap())
    }

    /// Expectations of a run on two nodes over `NET/<transport>`, sizes unchecked.
    fn two_nodes_over(transport: &str) -> Expectations {
        Expectations {
            transport: Some(transport.into()),
            nodes: 2,
            sizes: vec![],
            nics: vec![],
            pasted: false,
        }
    }

    /// Expectations of exactly these sizes, nothing else.
    fn sizes(sizes: Vec<u64>) -> Expectations {
        Expectations {
            sizes,
            ..Default::default()
        }
    }

    /// The verdict on a fixture whose run exited with `code`, with no expectations.
    fn judge_exit(name: &str, code: i32) -> Verdict {
        judge(&fixture(name), None, Some(code), &Expectations::default())
    }

    #[test]
    fn a_clean_run_is_ok() {
        let parsed = fixture("h200x2-nvlink/all_reduce_g2.txt");
        let expect = sizes(expected_sizes(8, 8 << 30, Some(2), None));
        let v = judge(&parsed, Some(Outcome::Exited { code: 0 }), None, &expect);
        assert_eq!(v.status, RunStatus::Ok, "{:?}", v.findings);
        assert_eq!(expect.sizes.len(), 31);
    }

    /// Issue #33: a pasted output cut short (its header asks for sizes up to 8 GiB, the
    /// rows stop at 1 GiB, no summary line) is imported as what it is, never as a complete
    /// ok run; the whole output stays ok.
    #[test]
    fn an_output_cut_short_is_not_a_complete_run() {
        let text = std::fs::read_to_string(format!(
            "{}/../tests/fixtures/nccl-tests/h200x2-nvlink/all_reduce_g2.txt",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let cut: String = text
            .lines()
            .take_while(|l| !l.starts_with("# Out of bounds"))
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .and_then(|w| w.parse::<u64>().ok())
                    .is_none_or(|size| size <= 1 << 30)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let parsed = parse(cut.as_bytes());
        assert_eq!(header_sizes(&parsed).len(), 31);
        let v = judge(&parsed, None, None, &sizes(header_sizes(&parsed)));
        assert_eq!(v.status, RunStatus::Failed, "{:?}", v.findings);
        assert!(
            v.findings[0].message.starts_with(
                "the output is cut short: its rows stop at 1073741824 B, the 3 larger size(s)"
            ),
            "{:?}",
            v.findings
        );
        let whole = parse(text.as_bytes());
        let v = judge(&whole, None, None, &sizes(header_sizes(&whole)));
        assert_eq!(v.status, RunStatus::Ok, "{:?}", v.findings);
    }

    /// A linear step (`-i 128M`) puts sizes from 2 GiB on closer than 10% apart: a complete
    /// table (sizes rounded down a little by the ranks' alignment) is whole, and one cut at
    /// 2.75 GiB misses the two sizes after it, not none (nccl-tests#350's gather, published).
    #[test]
    fn sizes_of_a_linear_step_are_each_their_own_row() {
        let step = 128u64 << 20;
        let table = |last: u64, summary: bool| {
            let mut text = format!(
                "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {step}(bytes) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
                 #  Rank  0 Group  0 Pid 1 on a device  0 [0x01] GPU\n\
                 #  Rank  1 Group  0 Pid 2 on b device  0 [0x01] GPU\n\
                 #                                                              out-of-place                       in-place\n\
                 #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n",
                16 * step,
                24 * step
            );
            for k in 16..=last {
                // Two ranks: each size a little under the asked one (whole 16-byte chunks).
                let size = k * step - 32;
                text.push_str(&format!(
                    "{size} {} float sum -1 1000.0 100.00 100.00 0 1000.0 100.00 100.00 0\n",
                    size / 4
                ));
            }
            if summary {
                text.push_str("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 100.00\n");
            }
            parse(text.as_bytes())
        };
        let whole = table(24, true);
        assert_eq!(header_sizes(&whole).len(), 9);
        let v = judge(&whole, None, None, &sizes(header_sizes(&whole)));
        assert_eq!(v.status, RunStatus::Ok, "{:?}", v.findings);
        let cut = table(22, false);
        let v = judge(&cut, None, None, &sizes(header_sizes(&cut)));
        assert_eq!(v.status, RunStatus::Failed, "{:?}", v.findings);
        assert!(
            v.findings[0].message.contains(&format!(
                "the 2 larger size(s) its header asks for (up to {} B)",
                24 * step
            )),
            "{:?}",
            v.findings
        );
    }

    /// Issue #18 item 3: two processes that each ran the whole test alone (nccl-tests
    /// without MPI=1 under `srun -n2`) print two headers and two tables; every figure is a
    /// world of one, and the run fails with the fix.
    #[test]
    fn ranks_that_each_ran_alone_fail_the_run_with_the_fix() {
        let one = std::fs::read_to_string(format!(
            "{}/../tests/fixtures/nccl-tests/h200x2-nvlink/all_reduce_g2.txt",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let twice = parse(format!("{one}{one}").as_bytes());
        let v = judge(
            &twice,
            Some(Outcome::Exited { code: 0 }),
            None,
            &Expectations::default(),
        );
        assert_eq!(v.status, RunStatus::Failed, "{:?}", v.findings);
        let worlds = v.findings.iter().find(|f| f.check == "worlds").unwrap();
        assert!(
            worlds.message.contains("printed 2 times")
                && worlds.message.contains("MPI=1")
                && worlds.message.contains("srun --mpi=pmix"),
            "{}",
            worlds.message
        );
        let once = parse(one.as_bytes());
        assert!(judge(&once, None, Some(0), &Expectations::default())
            .findings
            .iter()
            .all(|f| f.check != "worlds"));
    }

    /// Issue #18 item 1: the forms users paste, each judged end to end (parse, then the
    /// checks): the rows read, the status and the findings. A form with no result row is
    /// never `ok`.
    #[test]
    fn the_forms_found_in_the_wild_get_their_rows_status_and_findings() {
        const HEADER: &str = "\
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_reduce_perf_mpi
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#  Rank  0 Group  0 Pid   2101 on      node1 device  0 [0000:18:00] NVIDIA H200
#  Rank  1 Group  0 Pid   2202 on      node2 device  0 [0000:18:00] NVIDIA H200
";
        const NAMES: &str = "\
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
";
        const ROWS: [&str; 3] = [
            "     1048576        262144     float     sum      -1    60.10   17.45   17.45       0    59.80   17.53   17.53       0\n",
            "     2097152        524288     float     sum      -1    90.00   23.30   23.30       0    91.00   23.05   23.05       0\n",
            "     4194304       1048576     float     sum      -1   150.00   27.96   27.96       0   151.00   27.78   27.78       0\n",
        ];
        const FOOTER: &str = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 22.85\n#\n# Collective test concluded: all_reduce_perf_mpi\n";
        let rows = ROWS.concat();
        let full = format!("{HEADER}{NAMES}{rows}{FOOTER}");
        let ucx = "[1732986000.123456] [node1:2101:0]        ucp_context.c:1123 UCX  WARN  network device 'mlx5_0:1' is not available, please use one or more of: 'eth0'(tcp), 'lo'(tcp)\n";
        let mpi_help = "\
--------------------------------------------------------------------------
WARNING: There was an error initializing an OpenFabrics device.

  Local host:   node1
  Local device: mlx5_0
--------------------------------------------------------------------------
";
        let nccl_info =
            "node1:2101:2101 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n";
        let expected = expected_sizes(1 << 20, 4 << 20, Some(2), None);
        struct Form {
            name: &'static str,
            text: String,
            rows: usize,
            status: RunStatus,
            checks: &'static [&'static str],
        }
        let ok = |name, text| Form {
            name,
            text,
            rows: 3,
            status: RunStatus::Ok,
            checks: &[],
        };
        let forms = [
            ok("as printed", full.clone()),
            ok("indented", full.lines().map(|l| format!("    {l}\n")).collect()),
            ok(
                "other programs' lines between header and rows",
                format!("{HEADER}{ucx}{mpi_help}{NAMES}{nccl_info}{ucx}{rows}{FOOTER}"),
            ),
            Form {
                name: "nccl-tests lowered maxBytes",
                text: format!(
                    "{HEADER}# Reducing maxBytes to 2097152 due to memory limitation\n{NAMES}{}{}{FOOTER}",
                    ROWS[0], ROWS[1]
                ),
                rows: 2,
                status: RunStatus::Ok,
                checks: &[],
            },
            Form {
                name: "a document's truncation marker",
                text: format!("{HEADER}{NAMES}{}[...]\n{}{FOOTER}", ROWS[0], ROWS[2]),
                rows: 2,
                status: RunStatus::Failed,
                checks: &["rows"],
            },
            Form {
                name: "a failure that printed no table",
                text: format!(
                    "{HEADER}node1:2101:2101 [0] NCCL WARN NET/Socket : connect to 10.0.0.2<43211> failed : Connection refused\nnode1: Test NCCL failure common.cu:1279 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '\n .. node1 pid 2101: Test failure common.cu:1094\n"
                ),
                rows: 0,
                status: RunStatus::Failed,
                checks: &["failure", "rows"],
            },
            Form {
                name: "a header and nothing else",
                text: HEADER.to_string(),
                rows: 0,
                status: RunStatus::Failed,
                checks: &["rows"],
            },
            Form {
                name: "each rank alone, headers lost",
                text: format!(
                    "{NAMES}{}",
                    ROWS.iter()
                        .flat_map(|r| [r, r])
                        .map(|r| r.replace("17.45       0", " 0.00       0")
                            .replace("17.53       0", " 0.00       0")
                            .replace("23.30       0", " 0.00       0")
                            .replace("23.05       0", " 0.00       0")
                            .replace("27.96       0", " 0.00       0")
                            .replace("27.78       0", " 0.00       0"))
                        .collect::<String>()
                ),
                rows: 6,
                status: RunStatus::Failed,
                checks: &["worlds"],
            },
        ];
        for form in forms {
            let parsed = parse_with(
                form.text.as_bytes(),
                &ParseOptions {
                    collective: Some("all_reduce".into()),
                },
            );
            assert_eq!(
                parsed.rows.len(),
                form.rows,
                "{}: {:?}",
                form.name,
                parsed.diagnostics
            );
            let v = judge(
                &parsed,
                Some(Outcome::Exited { code: 0 }),
                None,
                &sizes(expected.clone()),
            );
            assert_eq!(v.status, form.status, "{}: {:?}", form.name, v.findings);
            let checks: Vec<&str> = v.findings.iter().map(|f| f.check).collect();
            for check in form.checks {
                assert!(checks.contains(check), "{}: {:?}", form.name, v.findings);
            }
            if form.checks.is_empty() {
                assert!(checks.is_empty(), "{}: {:?}", form.name, v.findings);
            }
            assert!(
                !parsed.rows.is_empty() || v.status != RunStatus::Ok,
                "{}",
                form.name
            );
            // The cut is said where it is, whatever the rows around it.
            assert_eq!(
                !parsed.cut_at_lines.is_empty(),
                form.name.contains("truncation"),
                "{}",
                form.name
            );
        }
    }

    /// Issue #18: every recorded and handmade fixture judged as `import` judges it, with
    /// the exit code it was recorded with: a run that exited 0 is `ok` with no finding,
    /// every other is not, and no run without result rows is `ok`.
    #[test]
    fn every_fixture_is_judged_by_its_exit_code_and_rows() {
        let root = format!("{}/../tests/fixtures", env!("CARGO_MANIFEST_DIR"));
        let manifest = std::fs::read_to_string(format!("{root}/nccl-tests/manifest.tsv")).unwrap();
        let mut judged = 0;
        for line in manifest.lines().skip(1) {
            let fields: Vec<&str> = line.split('\t').collect();
            let (file, code) = (fields[0], fields[1].parse::<i32>().unwrap());
            let program = fields[3].split_whitespace().next().unwrap_or("");
            let parsed = parse_with(
                &std::fs::read(format!("{root}/nccl-tests/{file}")).unwrap(),
                &ParseOptions {
                    collective: Some(program.to_string()),
                },
            );
            let v = judge(&parsed, None, Some(code), &Expectations::default());
            if code == 0 {
                assert_eq!(v.status, RunStatus::Ok, "{file}: {:?}", v.findings);
                assert!(v.findings.is_empty(), "{file}: {:?}", v.findings);
            } else {
                assert_ne!(v.status, RunStatus::Ok, "{file}");
            }
            assert!(
                !parsed.rows.is_empty() || v.status != RunStatus::Ok,
                "{file}"
            );
            judged += 1;
        }
        // The handmade outputs: what each must come to (tests/fixtures/nccl-tests-handmade/README.md).
        for (file, code, status) in [
            ("v2.19_all_reduce_I1_S1_g8.txt", 0, RunStatus::Ok),
            ("v2.19_all_reduce_mpi_timeout.txt", 4, RunStatus::Timeout),
            ("v2.19_all_reduce_mpi_truncated.json", 1, RunStatus::Failed),
            ("v2.19_all_reduce_tuning_split_rows.txt", 0, RunStatus::Ok),
            ("v2.19_reduce_scatter_wrong.txt", 7, RunStatus::Wrong),
            ("v2.19_sendrecv_blank_out_of_place.txt", 0, RunStatus::Ok),
            (
                "v2.21_all_gather_mpi_interleaved_tcpx_N2.txt",
                0,
                RunStatus::Ok,
            ),
            ("v2.21_all_gather_mpi_tagged_tcpx_N2.txt", 0, RunStatus::Ok),
        ] {
            let parsed =
                parse(&std::fs::read(format!("{root}/nccl-tests-handmade/{file}")).unwrap());
            let v = judge(&parsed, None, Some(code), &Expectations::default());
            assert_eq!(v.status, status, "{file}: {:?}", v.findings);
            assert!(
                !parsed.rows.is_empty() || v.status != RunStatus::Ok,
                "{file}"
            );
            judged += 1;
        }
        assert!(judged >= 67, "{judged}");
    }

    #[test]
    fn socket_instead_of_tcpx_fails_loudly() {
        let parsed = fixture("h200x2-twohost/all_reduce_2host_socket.txt");
        let expect = two_nodes_over("GPUDirectTCPX");
        let v = judge(&parsed, Some(Outcome::Exited { code: 0 }), None, &expect);
        assert_eq!(v.status, RunStatus::Failed);
        assert_eq!(v.transport.as_deref(), Some("Socket"));
        let msg = &v.findings[0].message;
        assert!(
            msg.contains("expected NET/GPUDirectTCPX")
                && msg.contains("Socket")
                && msg.contains("did not load"),
            "{msg}"
        );
        let socket_ok = two_nodes_over("Socket");
        assert_eq!(
            judge(&parsed, None, Some(0), &socket_ok).status,
            RunStatus::Ok
        );
    }

    #[test]
    fn a_nic_the_profile_does_not_give_fails_the_run_naming_both() {
        // Recorded on the local cluster on the lent H200 (srun --gpudirect=socket-bed): NCCL
        // said `NET/Socket : Using [0]eth1:...` on node1 and node2.
        let parsed = fixture("gpu-box/all_reduce_srun_socket_bed_n2.txt");
        let mut expect = two_nodes_over("Socket");
        expect.nics = ["eth1", "eth2", "eth3", "eth4"].map(String::from).to_vec();
        assert_eq!(judge(&parsed, None, Some(0), &expect).status, RunStatus::Ok);
        expect.nics = vec!["eth2".into()];
        let v = judge(&parsed, None, Some(0), &expect);
        assert_eq!(v.status, RunStatus::Failed);
        assert_eq!(v.findings.len(), 1, "{:?}", v.findings);
        let message = &v.findings[0].message;
        assert!(
            message.starts_with("NET/Socket used eth1 on node[1-2], but the profile's NIC is eth2"),
            "{message}"
        );
        // Another transport is named as such, not as a NIC.
        let v = judge(&parsed, None, Some(0), &two_nodes_over("IB"));
        assert!(
            v.findings[0].message.contains("expected NET/IB"),
            "{:?}",
            v.findings
        );
    }

    #[test]
    fn no_debug_lines_is_no_proof() {
        let parsed = fixture("h200x2-mpirun/all_reduce_mpi_np2.txt");
        let expect = two_nodes_over("IB");
        let v = judge(&parsed, None, Some(0), &expect);
        assert_eq!(v.status, RunStatus::Failed);
        assert!(v.findings[0].message.contains("NCCL_DEBUG=INFO"));
    }

    #[test]
    fn failures_exit_codes_and_missing_rows() {
        let v = judge_exit("h200x2-nvlink/all_reduce_g4_toomany.txt", 5);
        assert_eq!(v.status, RunStatus::Failed);
        assert!(v
            .findings
            .iter()
            .any(|f| f.message == "exit code 5: not implemented or too few GPUs"));
        let v = judge_exit("h200x2-formats/cur_all_reduce_minbw_fail.txt", 7);
        assert_eq!(v.status, RunStatus::Wrong);
        assert!(v.findings.iter().any(|f| f.check == "min_bw"));
        let v = judge_exit("h200x2-formats/cur_all_reduce_badsize.txt", 255);
        assert_eq!(v.status, RunStatus::Failed);
        let parsed = fixture("h200x2-nvlink/all_reduce_g2.txt");
        let more = sizes(expected_sizes(8, 16 << 30, Some(2), None));
        let v = judge(&parsed, None, Some(0), &more);
        assert_eq!(v.status, RunStatus::Failed);
        assert_eq!(
            v.findings[0].message,
            "1 expected sizes missing from the table, first 17179869184 B"
        );
        let twohost = fixture("h200x2-twohost/all_gather_2host_socket.txt");
        let sizes = sizes(expected_sizes(8, 1 << 30, Some(2), None));
        assert_eq!(
            judge(&twohost, None, Some(0), &sizes).status,
            RunStatus::Ok,
            "small sizes may vanish"
        );
    }

    #[test]
    fn timeouts_and_interrupts_are_their_own_outcomes() {
        let parsed = fixture("h200x2-nvlink/all_reduce_g2.txt");
        for (outcome, status) in [
            (Outcome::TimedOut, RunStatus::Timeout),
            (Outcome::Interrupted, RunStatus::Interrupted),
        ] {
            let v = judge(&parsed, Some(outcome), None, &Expectations::default());
            assert_eq!(v.status, status);
        }
    }

    /// Issue #40 form 7: a paste of a complete run (its summary is there) that leaves out
    /// the rows below 8 MiB, as a README excerpt does, is a completed run with rows missing
    /// from the paste, not a failed run; the same table from a live run still fails.
    #[test]
    fn a_paste_with_its_summary_and_rows_left_out_completed() {
        let path = format!(
            "{}/../tests/fixtures/nccl-tests/h200x2-formats/cur_algo_ring.txt",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(path).unwrap();
        let excerpt: String = text
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .and_then(|w| w.parse::<u64>().ok())
                    .is_none_or(|size| size >= 8 << 20)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let parsed = parse(excerpt.as_bytes());
        assert!(parsed.avg_busbw.is_some());
        let asked = crate::checks::header_sizes(&parsed);
        let paste = Expectations {
            sizes: asked.clone(),
            pasted: true,
            ..Default::default()
        };
        let v = judge(&parsed, None, Some(0), &paste);
        assert_eq!(v.status, RunStatus::Ok, "{:?}", v.findings);
        assert!(
            v.findings[0]
                .message
                .contains("the paste leaves out 14 of the sizes"),
            "{:?}",
            v.findings
        );
        let live = Expectations {
            sizes: asked,
            ..Default::default()
        };
        assert_eq!(
            judge(&parsed, None, Some(0), &live).status,
            RunStatus::Failed
        );
    }

    #[test]
    fn size_lists() {
        assert_eq!(expected_sizes(8, 64, Some(2), None), [8, 16, 32, 64]);
        assert_eq!(expected_sizes(1, 3, None, Some(1)), [1, 2, 3]);
        assert_eq!(expected_sizes(8, 64, Some(1), None), [8]);
        assert_eq!(expected_sizes(1, u64::MAX, Some(2), None).len(), 64);
    }
}
