//! NCCL's RAS answers (`nccl_output::ras::parse_answer`): what a RAS server, or anything
//! listening on its port, sends to `CLIENT PROTOCOL 2`, `SET FORMAT json`, `STATUS`.
//!
//! Invariants:
//! - never panics, whatever the text;
//! - an error is one line of text for the user (no control characters), so `gpudirect hang`
//!   can print it after the address;
//! - a parsed status serializes back to JSON and parses again to the same status (the
//!   snapshot kept with a run is that JSON);
//! - a rank's total of collectives is the sum of its counts (no overflow panic).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nccl_output::ras::{parse_answer, Status};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match parse_answer(&text) {
        Err(e) => assert!(!e.chars().any(char::is_control), "not one line: {e:?}"),
        Ok(status) => {
            let json = serde_json::to_string(&status).expect("a status serializes");
            let again: Status = serde_json::from_str(&json).expect("and parses again");
            assert_eq!(again, status);
            for c in &status.communicators {
                for r in &c.ranks {
                    let _ = r.total();
                }
            }
        }
    }
});
