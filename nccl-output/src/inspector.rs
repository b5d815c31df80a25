//! NCCL Inspector dumps: what the Inspector profiler plugin (NCCL's
//! `plugins/profiler/inspector`, `ext-profiler/inspector` in 2.28) writes for every rank of
//! a running job, read into typed collective samples. The judging (`gpudirect watch`) is the
//! launcher's; this part is pure and bounded, beside the other NCCL outputs.
//!
//! The file (`<dump dir>/<hostname>-pid<PID>.log`, one per process) is JSON lines, one
//! object per completed collective the dump thread wrote (the Inspector's `inspector.cc`,
//! output format `v4.0` in every version read here):
//!
//! ```text
//! {"header":{"id":"0x6623f56d6bf717","comm_name":"unknown","rank":1,"n_ranks":2,"nnodes":2},
//!  "metadata":{"inspector_output_format_version":"v4.0",...,"dump_timestamp_us":...,
//!              "hostname":"node2","pid":708},
//!  "coll_perf":{"coll":"AllReduce","coll_sn":0,"coll_msg_size_bytes":67108864,
//!               "coll_exec_time_us":40774,"coll_timing_source":"kernel_gpu",
//!               "coll_algobw_gbs":1.64,"coll_busbw_gbs":1.64,
//!               "event_trace_ts":{"coll_start_ts":...,"kernel_events":[...]}}}   (verbose)
//! ```
//!
//! Rules, each from the Inspector's source and checked on dumps recorded on the lent H200
//! with NCCL 2.28.9 (`tests/fixtures/nccl-inspector/`):
//! - **Which collective.** `header.id` is the communicator's hash, the same in every rank's
//!   file; `coll_sn` counts that communicator's collectives in every rank alike, so
//!   `(id, coll_sn)` is one collective seen from each rank.
//! - **How many samples.** The source of 2.29 and later (built against NCCL 2.28.9 here)
//!   writes every completed collective from a ring of `NCCL_INSPECTOR_DUMP_COLL_RING_SIZE`
//!   (1024) entries at each dump; 2.28's own Inspector wrote only the newest one per
//!   communicator and dump, without `comm_name`. Both read the same; the second gives few
//!   samples to match across ranks.
//! - **Only collectives.** Objects without `coll_perf` (P2P records, `p2p_perf`) are counted,
//!   not read.
//! - **Verbose.** With `NCCL_INSPECTOR_DUMP_VERBOSE=1`, `event_trace_ts.coll_start_ts` is
//!   when the rank's host thread started the collective (microseconds of the host clock),
//!   and `kernel_events[].kernel_start_ts`/`kernel_stop_ts` its channels' GPU kernels.
//! - **Bounded.** A line longer than [`Limits::line_bytes`] is skipped with a diagnostic, and
//!   at most [`Limits::samples`] samples are kept (the newest, since a file only grows);
//!   nothing in the input can make this panic.

use serde::{Deserialize, Serialize};

/// What a reader keeps of one file at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest line read (a verbose record of 32 channels is about 4 KiB).
    pub line_bytes: usize,
    /// The most samples kept; the oldest are dropped first.
    pub samples: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            line_bytes: 1 << 20,
            samples: 100_000,
        }
    }
}

/// One completed collective as one rank saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The communicator's hash (`0x6623f56d6bf717`), the same in every rank.
    pub comm: String,
    /// The communicator's name where the application gave one (`unknown` otherwise).
    pub comm_name: Option<String>,
    /// The rank in the communicator.
    pub rank: u32,
    /// The communicator's size.
    pub n_ranks: u32,
    /// Its node count as NCCL counted it.
    pub n_nodes: u32,
    /// The host the rank ran on (the process's host name).
    pub host: String,
    /// The rank's process.
    pub pid: u32,
    /// NCCL's name of the collective (`AllReduce`, `AllGather`, ...).
    pub coll: String,
    /// The communicator's sequence number of this collective.
    pub sn: u64,
    /// Message size in bytes.
    pub bytes: u64,
    /// Time from the collective's start to its end on this rank, in microseconds.
    pub exec_us: f64,
    /// `kernel_gpu`, `kernel_cpu` or `collective_cpu`: what timed it.
    pub timing: Option<String>,
    /// Bus bandwidth, GB/s.
    pub busbw_gbs: f64,
    /// When the rank's host thread started it (verbose dumps only), host clock, microseconds.
    pub start_us: Option<u64>,
    /// When the dump that held it was written, microseconds.
    pub dumped_us: u64,
}

/// One file read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Dump {
    /// The collective samples, oldest first.
    pub samples: Vec<Sample>,
    /// Records that are not collectives (P2P), counted.
    pub other_records: u64,
    /// Samples dropped beyond [`Limits::samples`] (the oldest).
    pub dropped: u64,
    /// Lines that could not be read, with their number (1-based) and why.
    pub diagnostics: Vec<(u64, String)>,
    /// The format versions seen (`v4.0`).
    pub formats: Vec<String>,
}

impl Dump {
    /// The NCCL Inspector's output format versions this reader was built from.
    pub const KNOWN_FORMATS: [&'static str; 1] = ["v4.0"];
}

#[derive(Deserialize)]
struct RawRecord {
    header: RawHeader,
    #[serde(default)]
    metadata: RawMeta,
    #[serde(default)]
    coll_perf: Option<RawColl>,
}

#[derive(Deserialize)]
struct RawHeader {
    id: String,
    #[serde(default)]
    comm_name: Option<String>,
    rank: u32,
    n_ranks: u32,
    #[serde(default)]
    nnodes: u32,
}

#[derive(Deserialize, Default)]
struct RawMeta {
    #[serde(default)]
    inspector_output_format_version: Option<String>,
    #[serde(default)]
    dump_timestamp_us: u64,
    #[serde(default)]
    hostname: String,
    #[serde(default)]
    pid: u32,
}

#[derive(Deserialize)]
struct RawColl {
    coll: String,
    coll_sn: u64,
    coll_msg_size_bytes: u64,
    coll_exec_time_us: f64,
    #[serde(default)]
    coll_timing_source: Option<String>,
    #[serde(default)]
    coll_busbw_gbs: f64,
    #[serde(default)]
    event_trace_ts: Option<RawTrace>,
}

#[derive(Deserialize)]
struct RawTrace {
    #[serde(default)]
    coll_start_ts: Option<u64>,
}

/// Reads one dump file's bytes. Lines that are not Inspector records become diagnostics;
/// a line cut by a dump still being written (the last one, without its newline) is left
/// for the next read, not reported.
pub fn parse_dump(bytes: &[u8], limits: Limits) -> Dump {
    let mut dump = Dump::default();
    let mut samples = std::collections::VecDeque::new();
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => &bytes[..=end],
        None => &[][..],
    };
    for (index, line) in complete.split(|&b| b == b'\n').enumerate() {
        let number = index as u64 + 1;
        let line = trim_ascii(line);
        if line.is_empty() {
            continue;
        }
        if line.len() > limits.line_bytes {
            dump.diagnostics.push((
                number,
                format!(
                    "a line of {} bytes, over the {} read: skipped",
                    line.len(),
                    limits.line_bytes
                ),
            ));
            continue;
        }
        match serde_json::from_slice::<RawRecord>(line) {
            Ok(raw) => {
                if let Some(format) = &raw.metadata.inspector_output_format_version {
                    if !dump.formats.contains(format) {
                        dump.formats.push(format.clone());
                    }
                }
                match sample_of(raw) {
                    Some(sample) => {
                        samples.push_back(sample);
                        if samples.len() > limits.samples {
                            samples.pop_front();
                            dump.dropped += 1;
                        }
                    }
                    None => dump.other_records += 1,
                }
            }
            Err(err) => dump
                .diagnostics
                .push((number, format!("not an Inspector record ({err}): skipped"))),
        }
    }
    dump.samples = samples.into();
    dump
}

fn sample_of(raw: RawRecord) -> Option<Sample> {
    let coll = raw.coll_perf?;
    if !coll.coll_exec_time_us.is_finite() || coll.coll_exec_time_us < 0.0 {
        return None;
    }
    Some(Sample {
        comm: raw.header.id,
        comm_name: raw.header.comm_name,
        rank: raw.header.rank,
        n_ranks: raw.header.n_ranks,
        n_nodes: raw.header.nnodes,
        host: raw.metadata.hostname,
        pid: raw.metadata.pid,
        coll: coll.coll,
        sn: coll.coll_sn,
        bytes: coll.coll_msg_size_bytes,
        exec_us: coll.coll_exec_time_us,
        timing: coll.coll_timing_source,
        busbw_gbs: if coll.coll_busbw_gbs.is_finite() {
            coll.coll_busbw_gbs
        } else {
            0.0
        },
        start_us: coll.event_trace_ts.and_then(|t| t.coll_start_ts),
        dumped_us: raw.metadata.dump_timestamp_us,
    })
}

fn trim_ascii(line: &[u8]) -> &[u8] {
    let start = line
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(line.len());
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &line[start..end.max(start)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(rel: &str) -> Vec<u8> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/nccl-inspector")
            .join(rel);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn a_verbose_dump_of_the_lent_host_reads_every_collective_with_its_start() {
        let dump = parse_dump(&fixture("clean/node1-pid1193.log"), Limits::default());
        assert!(dump.diagnostics.is_empty(), "{:?}", dump.diagnostics);
        assert_eq!(dump.formats, vec!["v4.0".to_string()]);
        assert_eq!(dump.samples.len(), 78);
        let first = &dump.samples[0];
        assert_eq!(first.host, "node1");
        assert_eq!(first.n_ranks, 2);
        assert_eq!(first.n_nodes, 2);
        assert!(first.start_us.is_some());
        let all_reduces = dump
            .samples
            .iter()
            .filter(|s| s.coll == "AllReduce" && s.bytes == 64 << 20)
            .count();
        assert_eq!(all_reduces, 39);
        assert!(dump.samples.iter().all(|s| s.comm == first.comm));
    }

    #[test]
    fn a_plain_dump_has_no_start_and_2_28s_own_inspector_reads_the_same() {
        let plain = parse_dump(&fixture("not-verbose/node1-pid1323.log"), Limits::default());
        assert!(plain.samples.len() > 100);
        assert!(plain.samples.iter().all(|s| s.start_us.is_none()));
        let old = parse_dump(
            &fixture("inspector-2.28.9/node1-pid1522.log"),
            Limits::default(),
        );
        assert_eq!(old.samples.len(), 1);
        assert_eq!(old.samples[0].comm_name, None);
        assert_eq!(old.samples[0].coll, "AllGather");
    }

    #[test]
    fn a_cut_last_line_waits_and_junk_lines_are_named_by_number() {
        let mut bytes = fixture("late-rank1/node2-pid1126.log");
        let whole = parse_dump(&bytes, Limits::default()).samples.len();
        bytes.truncate(bytes.len() - 40);
        let cut = parse_dump(&bytes, Limits::default());
        assert_eq!(cut.samples.len(), whole - 1);
        assert!(cut.diagnostics.is_empty());
        let mut junk = b"not json\n".to_vec();
        junk.extend_from_slice(&fixture("inspector-2.28.9/node1-pid1522.log"));
        junk.extend_from_slice(b"{\"header\":{}}\n");
        let read = parse_dump(&junk, Limits::default());
        assert_eq!(read.samples.len(), 1);
        let lines: Vec<u64> = read.diagnostics.iter().map(|d| d.0).collect();
        assert_eq!(lines, vec![1, 3]);
    }

    #[test]
    fn limits_hold_lines_and_samples() {
        let bytes = fixture("clean/node2-pid1192.log");
        let small = parse_dump(
            &bytes,
            Limits {
                line_bytes: 100,
                samples: 10,
            },
        );
        assert!(small.samples.is_empty());
        assert_eq!(small.diagnostics.len(), 78);
        let few = parse_dump(
            &bytes,
            Limits {
                line_bytes: 1 << 20,
                samples: 10,
            },
        );
        assert_eq!(few.samples.len(), 10);
        assert_eq!(few.dropped, 68);
        let all = parse_dump(&bytes, Limits::default());
        assert_eq!(few.samples[..], all.samples[68..], "the newest are kept");
    }
}
