//! `SLURM_TASKS_PER_NODE` (`8(x4),4`): parse with a limit on the number of nodes.
//!
//! Invariants:
//! - never panics; an error's offset lies inside the input, its message is one line;
//! - on success the list is non-empty, within the limit, and writing it back in Slurm's
//!   form (`N(xK)` for runs) parses to the same list;
//! - the limit is exact: the same input with `limit = len` parses, with `len - 1` it is
//!   refused with `TooManyHosts`.
#![no_main]

use gpudirect_core::hostlist::{parse_tasks_per_node_with_limit, HostlistError};
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 10_000;

/// Writes counts the way Slurm does: consecutive equal counts as `N(xK)`.
fn write_slurm(counts: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let n = counts[i];
        let run = counts[i..].iter().take_while(|&&c| c == n).count();
        parts.push(if run == 1 {
            n.to_string()
        } else {
            format!("{n}(x{run})")
        });
        i += run;
    }
    parts.join(",")
}

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let s = s.as_ref();
    match parse_tasks_per_node_with_limit(s, LIMIT) {
        Ok(counts) => {
            assert!(!counts.is_empty(), "{s:?} parsed to an empty list");
            assert!(counts.len() <= LIMIT);
            let written = write_slurm(&counts);
            assert_eq!(
                parse_tasks_per_node_with_limit(&written, LIMIT).as_ref(),
                Ok(&counts),
                "{s:?} -> {written:?} does not round-trip"
            );
            assert_eq!(
                parse_tasks_per_node_with_limit(s, counts.len()).as_ref(),
                Ok(&counts)
            );
            let below = parse_tasks_per_node_with_limit(s, counts.len() - 1);
            assert!(
                matches!(below, Err(HostlistError::TooManyHosts { .. })),
                "{s:?} ({} nodes) with limit {}: {below:?}",
                counts.len(),
                counts.len() - 1
            );
        }
        Err(e) => {
            if let Some(offset) = e.offset() {
                assert!(
                    offset <= s.len(),
                    "offset {offset} beyond {} bytes: {e:?}",
                    s.len()
                );
            }
            let message = e.to_string();
            assert!(!message.contains('\n'), "message not one line: {message:?}");
        }
    }
});
