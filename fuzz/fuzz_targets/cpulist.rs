//! Linux CPU lists (`8-21,112-125`): parse, format, intersect.
//!
//! Invariants:
//! - `CpuList::parse` never panics, and refuses ids above `MAX_CPU_ID`;
//! - `Display` writes the compact sysfs form (digits, `-`, `,` only; ranges ascending and
//!   disjoint) that parses back to the same set;
//! - `from_ids(ids())` and `intersection` with itself give the same set.
#![no_main]

use gpudirect_core::cpulist::{CpuList, MAX_CPU_ID};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A full 0-65535 range costs a few milliseconds; bound the number of elements so that
    // executions stay fast (real lists have a handful).
    if data.len() > 512 {
        return;
    }
    let s = String::from_utf8_lossy(data);
    match CpuList::parse(&s) {
        Ok(list) => {
            let text = list.to_string();
            assert!(
                text.bytes()
                    .all(|b| b.is_ascii_digit() || b == b'-' || b == b','),
                "{text:?}"
            );
            let ids: Vec<u32> = list.ids().collect();
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "ids not strictly ascending"
            );
            assert!(ids.iter().all(|&id| id <= MAX_CPU_ID));
            assert_eq!(list.is_empty(), ids.is_empty());
            assert_eq!(
                CpuList::parse(&text).as_ref(),
                Ok(&list),
                "{s:?} -> {text:?}"
            );
            assert_eq!(CpuList::from_ids(ids.iter().copied()), list);
            assert_eq!(list.intersection(&list), list);
            // The compact form has one element per maximal run: no two touch.
            let mut last_end: Option<u32> = None;
            for element in text.split(',').filter(|e| !e.is_empty()) {
                let (lo, hi) = match element.split_once('-') {
                    Some((a, b)) => (a.parse::<u32>().unwrap(), b.parse::<u32>().unwrap()),
                    None => {
                        let id = element.parse::<u32>().unwrap();
                        (id, id)
                    }
                };
                assert!(lo <= hi);
                if let Some(end) = last_end {
                    assert!(lo > end + 1, "{text:?}: ranges touch or overlap");
                }
                last_end = Some(hi);
            }
        }
        Err(e) => {
            let message = e.to_string();
            assert!(!message.is_empty());
        }
    }
});
