//! Hostlist expressions (`node[01-04],gpu[1-2]-ib`): parse, expand, count, match, compress.
//!
//! Invariants checked on every input (lossy UTF-8, as the plugin reads environment bytes):
//! - `expand_with_limit(s, LIMIT)` never panics; an error's offset lies inside the input and
//!   its message is one line;
//! - `HostlistPattern::new` accepts exactly what expansion accepts (expansion may only add
//!   `TooManyHosts`), and `count` is the expanded length, or above the limit when refused;
//! - every expanded host `matches` the pattern;
//! - `compress` then `expand` gives back the same list, in order (for names free of the
//!   characters `compress` documents as not round-tripping);
//! - `compress_sorted` then `expand` gives back the same names as a multiset.
#![no_main]

use gpudirect_core::hostlist::{
    compress, compress_sorted, count, expand_with_limit, HostlistError, HostlistPattern,
};
use libfuzzer_sys::fuzz_target;

/// Big enough for every shape of expression, small enough to keep executions fast.
const LIMIT: usize = 10_000;

fn check_error(s: &str, e: &HostlistError) {
    if let Some(offset) = e.offset() {
        assert!(
            offset <= s.len(),
            "offset {offset} beyond input of {} bytes: {e:?}",
            s.len()
        );
    }
    let message = e.to_string();
    assert!(
        !message.is_empty() && !message.contains('\n'),
        "message not one line: {message:?}"
    );
}

/// Names `compress` writes unchanged (see its docs): they cannot round-trip.
fn round_trips(host: &str) -> bool {
    !host.is_empty()
        && !host
            .bytes()
            .any(|b| matches!(b, b'[' | b']' | b',') || b.is_ascii_whitespace())
}

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let s = s.as_ref();
    let pattern = HostlistPattern::new(s);
    let counted = count(s);
    match expand_with_limit(s, LIMIT) {
        Ok(hosts) => {
            let pattern = pattern.expect("expansion succeeded, so the pattern must parse");
            assert_eq!(
                counted,
                Ok(hosts.len() as u128),
                "count disagrees with expansion of {s:?}"
            );
            assert_eq!(pattern.host_count(), hosts.len() as u128);
            assert_eq!(pattern.is_empty(), hosts.is_empty());
            for host in &hosts {
                assert!(
                    pattern.matches(host),
                    "{s:?} expands to {host:?} but does not match it"
                );
            }
            if hosts.iter().all(|h| round_trips(h)) {
                let compressed = compress(&hosts);
                let again = expand_with_limit(&compressed, LIMIT)
                    .unwrap_or_else(|e| panic!("compress({s:?}) = {compressed:?} fails: {e}"));
                assert_eq!(
                    again, hosts,
                    "compress round trip of {s:?} via {compressed:?}"
                );

                let sorted = compress_sorted(&hosts);
                let mut again = expand_with_limit(&sorted, LIMIT)
                    .unwrap_or_else(|e| panic!("compress_sorted({s:?}) = {sorted:?} fails: {e}"));
                let mut want = hosts.clone();
                again.sort_unstable();
                want.sort_unstable();
                assert_eq!(
                    again, want,
                    "compress_sorted round trip of {s:?} via {sorted:?}"
                );
            }
        }
        Err(e) => {
            check_error(s, &e);
            match &e {
                HostlistError::TooManyHosts { count: n, limit } => {
                    assert_eq!(*limit, LIMIT);
                    assert!(*n > LIMIT as u128);
                    let pattern = pattern.expect("only the limit refused it: it must parse");
                    assert_eq!(pattern.host_count(), *n);
                    assert_eq!(counted, Ok(*n));
                }
                other => {
                    assert_eq!(
                        pattern.as_ref().err(),
                        Some(other),
                        "pattern and expansion disagree on {s:?}"
                    );
                    assert_eq!(counted.as_ref().err(), Some(other));
                }
            }
        }
    }
});
