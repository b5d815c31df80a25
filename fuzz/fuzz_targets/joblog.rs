//! A job's NCCL log (`nccl_output::joblog`): whatever bytes, read line by line in bounded
//! memory, as `gpudirect log` reads a file.
//!
//! Invariants:
//! - never panics, whatever the text (a line longer than the limit is cut, not kept);
//! - what it keeps stays within its limits (small ones here, so that the fuzzer reaches them),
//!   its kept text within the byte budget and host names within 255 bytes;
//! - every rank of a communicator points at a process that exists, and a link's NIC is one
//!   its process (or another of its host) listed;
//! - the result serializes to JSON and back to the same value (`gpudirect log --json`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nccl_output::joblog::{for_each_line, JobLog, JobLogReader, Limits};

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_line: 512,
        max_processes: 16,
        max_communicators: 8,
        max_ranks: 64,
        max_events: 8,
        max_kept_bytes: 4096,
        max_input_bytes: u64::MAX,
        max_lines: u64::MAX,
    };
    let mut reader = JobLogReader::new(limits);
    // Two inputs from one buffer: the first half as input 0, the rest as input 1.
    let (first, second) = data.split_at(data.len() / 2);
    for (source, mut part) in [first, second].into_iter().enumerate() {
        let _ = for_each_line(&mut part, limits.max_line, |n, line| {
            // Cut to the limit in bytes; each invalid byte becomes one U+FFFD (3 bytes).
            assert!(line.len() <= 3 * limits.max_line);
            reader.feed(source, n, line)
        });
    }
    let log = reader.finish();
    assert!(log.processes.len() <= limits.max_processes);
    assert!(log.communicators.len() <= limits.max_communicators);
    assert!(log.events.len() <= limits.max_events);
    let ranks: usize = log.communicators.iter().map(|c| c.ranks.len()).sum();
    assert!(ranks <= limits.max_ranks);
    // Kept text stays within the byte budget, overshot by one fact at most (T7).
    let kept: usize = log
        .processes
        .iter()
        .map(|p| {
            p.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
                + p.plugins.iter().map(|n| n.text.len()).sum::<usize>()
                + p.networks.iter().map(String::len).sum::<usize>()
        })
        .sum();
    assert!(kept <= limits.max_kept_bytes + 2048, "{kept} bytes kept");
    for p in &log.processes {
        assert!(p.host.as_ref().is_none_or(|h| h.len() <= 255));
    }
    for c in &log.communicators {
        for r in &c.ranks {
            assert!(r.process < log.processes.len());
            for l in &r.links {
                if let Some(nic) = &l.nic {
                    let host = &log.processes[r.process].host;
                    assert!(log
                        .processes
                        .iter()
                        .filter(|p| &p.host == host)
                        .any(|p| p.nics.iter().any(|n| &n.nic == nic)));
                }
            }
        }
    }
    let json = serde_json::to_string(&log).expect("a log serializes");
    let again: JobLog = serde_json::from_str(&json).expect("and parses again");
    assert_eq!(again, log);
});
