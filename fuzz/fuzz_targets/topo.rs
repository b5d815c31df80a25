//! NCCL's topology dump (`nccl_output::topo::parse_topo`), read by `gpudirect profiles
//! generate --compare-nccl DUMP`: whatever file the admin points it at.
//!
//! Invariants:
//! - never panics, whatever the text;
//! - an error's Display is one line;
//! - an accepted text holds `<system`;
//! - every GPU's PCI path is lowercase, and its nearest nets are nets of the dump, one entry
//!   per GPU in the dump's order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nccl_output::topo::parse_topo;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match parse_topo(&text) {
        Err(e) => {
            let said = e.to_string();
            assert!(!said.contains('\n'), "not one line: {said:?}");
        }
        Ok(dump) => {
            assert!(text.contains("<system"));
            for placed in dump.gpus.iter().chain(&dump.nets) {
                for busid in &placed.pci_path {
                    assert_eq!(busid, &busid.to_ascii_lowercase(), "{placed:?}");
                }
            }
            let nearest = dump.nearest_nets();
            assert_eq!(nearest.len(), dump.gpus.len());
            for ((gpu, nets), placed) in nearest.iter().zip(&dump.gpus) {
                assert_eq!(gpu, &placed.id);
                for net in nets {
                    assert!(dump.nets.iter().any(|n| &n.id == net), "{net} is no net");
                }
            }
        }
    }
});
