//! Whether an output shows that NCCL started: a launch that hangs before NCCL (srun's
//! PMIx wire-up, MPI_Init, an MPI_Bcast of the unique id that never arrives) prints no NCCL
//! line, or NCCL's first lines and never `Init COMPLETE`; a run NCCL took up prints
//! `Init COMPLETE` once its communicator is made, whatever fails after (issue #45).
//!
//! The forms of the init line, as recorded across NCCL versions (tests/fixtures, NCCL 2.4
//! to 2.28), all end in `- Init COMPLETE`:
//!
//! ```text
//! host:1:1 [0] NCCL INFO comm 0x5d rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE              (2.4-2.8)
//! host:1:1 [0] NCCL INFO comm 0x5d rank 0 nranks 2 cudaDev 0 busId 1c000 commId 0x3f - Init COMPLETE (2.9-2.18)
//! host:1:1 [0] NCCL INFO ncclCommInitRank comm 0x5d rank 0 nranks 2 ... - Init COMPLETE             (2.19-2.22)
//! host:1:1 [0] NCCL INFO ncclCommInitRankConfig comm 0x5d rank 0 nranks 2 ... - Init COMPLETE       (2.23 on)
//! ```
//!
//! Without `NCCL_DEBUG=INFO` NCCL prints no such line; nccl-tests prints its column header
//! (`#  size  count  type ...`) only after its communicators are made (the launcher's own
//! runs always ask for INFO, a caller's environment may turn it down), so that header
//! counts as a start too.

use serde::{Deserialize, Serialize};

use crate::transport::parse_debug_line;

/// What an output shows of NCCL's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StartSeen {
    /// NCCL debug lines (`host:pid:tid [dev] NCCL INFO|WARN ...`).
    pub nccl_lines: u64,
    /// `NCCL WARN` lines: NCCL ran and said what was wrong.
    pub warnings: u64,
    /// An `Init COMPLETE` line, or nccl-tests' column header, was seen.
    pub started: bool,
}

impl StartSeen {
    /// Never reached NCCL: no `Init COMPLETE` (nor nccl-tests' column header), and no
    /// warning of NCCL's own. A warning before the init completed (`Bootstrap : no socket
    /// interface found`) is NCCL naming a fault of the node or NIC, not a launch that hung.
    pub fn never_reached_nccl(&self) -> bool {
        !self.started && self.warnings == 0
    }
}

/// Whether `line` shows NCCL started: an `NCCL INFO ... Init COMPLETE` line, or
/// nccl-tests' column header (printed once its communicators are made). Checked on every
/// line while a cell starts, so it looks no further than it must.
pub fn line_shows_start(line: &str) -> bool {
    let line = line.trim_end();
    if line.ends_with("Init COMPLETE") {
        return parse_debug_line(line)
            .is_some_and(|d| d.level == "INFO" && d.message.ends_with("Init COMPLETE"));
    }
    is_column_header(line)
}

/// nccl-tests' column header: `#  size  count  type ...` (a launcher's `[1,0]<stdout>:` or
/// `0: ` tag may come first).
fn is_column_header(line: &str) -> bool {
    let Some((_, rest)) = line.split_once('#') else {
        return false;
    };
    let mut words = rest.split_whitespace();
    matches!((words.next(), words.next()), (Some("size"), Some("count")))
}

/// What `output` (stdout and stderr of a cell, any NCCL version) shows of NCCL's start.
pub fn start_seen(output: &[u8]) -> StartSeen {
    let text = String::from_utf8_lossy(output);
    let mut seen = StartSeen::default();
    for line in text.lines() {
        if let Some(d) = parse_debug_line(line) {
            seen.nccl_lines += 1;
            if d.level == "WARN" {
                seen.warnings += 1;
            }
        }
        if !seen.started && line_shows_start(line) {
            seen.started = true;
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_recorded_form_of_the_init_line_is_a_start() {
        for line in [
            "vm:1:1 [0] NCCL INFO comm 0x55d rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE",
            "a:1:1 [0] NCCL INFO comm 0xa1 rank 0 nranks 2 cudaDev 0 busId 1c000 - Init COMPLETE",
            "node1:9:9 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1c000 commId 0xab - Init COMPLETE",
            "[rank0]:n1:1:1 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1 commId 0xab - Init COMPLETE",
            "vm:1518:1529 [1] NCCL INFO ncclCommInitRankConfig comm 0x5f rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 1c000 commId 0x7e - Init COMPLETE ",
            "0: node1:9:9 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE",
        ] {
            assert!(line_shows_start(line), "{line}");
        }
    }

    #[test]
    fn the_column_header_is_a_start_and_the_lines_before_init_are_not() {
        assert!(line_shows_start(
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
        ));
        assert!(line_shows_start(
            "[1,0]<stdout>:#  size  count  type  redop  time  algbw  busbw  error"
        ));
        for line in [
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5",
            "#  Rank  0 Group  0 Pid  12 on node1 device  0 [0000:00:06] NVIDIA H200",
            "node1:9:9 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
            "node1:9:9 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init START",
            "# Init COMPLETE is what we wait for",
            "srun: error: node3: task 1: Killed",
        ] {
            assert!(!line_shows_start(line), "{line}");
        }
    }

    #[test]
    fn an_output_without_nccl_never_reached_it_and_a_warning_is_nccls_own_word() {
        let nothing = start_seen(b"srun: Job step creation temporarily disabled\n");
        assert_eq!(nothing, StartSeen::default());
        assert!(nothing.never_reached_nccl());
        let begun = start_seen(
            b"# nThread 1 nGpus 1\nnode1:9:9 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n",
        );
        assert_eq!((begun.nccl_lines, begun.started), (1, false));
        assert!(begun.never_reached_nccl());
        let warned = start_seen(
            b"node3:9:9 [0] NCCL INFO NCCL_SOCKET_IFNAME set to eth2\nnode3:9:9 [0] misc/socket.cc:1 NCCL WARN Bootstrap : no socket interface found\n",
        );
        assert_eq!((warned.nccl_lines, warned.warnings), (2, 1));
        assert!(!warned.never_reached_nccl());
    }

    /// Every recorded nccl-tests output that printed a table started, by either sign.
    #[test]
    fn every_recorded_table_shows_a_start() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nccl-tests");
        let mut dirs = vec![root];
        let mut checked = 0;
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "txt") {
                    let raw = std::fs::read(&path).unwrap();
                    if !crate::parse(&raw).rows.is_empty() {
                        assert!(start_seen(&raw).started, "{}", path.display());
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 40, "{checked}");
    }
}
