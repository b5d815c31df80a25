//! Outputs of other programs that look like nccl-tests' table: `import` refuses them,
//! naming what they are, instead of reading their numbers as a collective's (issue #33).
//!
//! Each rule needs a line only that program prints, so that an nccl-tests output with NCCL's
//! debug lines (which may mention MSCCL++ or perftest) is never taken for one:
//! - perftest (`ib_send_bw`, `ib_write_bw`, ...): its banner `Send BW Test` (`RDMA_Write BW
//!   Test`, `Send Lat Test`, ...) and its `#bytes #iterations` column header;
//! - NCCL 1's test programs (`all_reduce_test`, `all_gather_test`): a column header of
//!   `bytes N type ... res`, where nccl-tests 2 has `size count type ... #wrong`;
//! - MSCCL++'s `mscclpp-test`: its `# Initializing MSCCL++` line, or its first header line,
//!   which ends in `kernel num: N`;
//! - a PyTorch all_reduce benchmark's summary: `The average bandwidth of all_reduce with a
//!   4.0GB payload (5 trials, 2 ranks):`;
//! - the OSU micro-benchmarks (`osu_allreduce`, `osu_bw`, their NCCL builds): a banner
//!   `# OSU MPI-CUDA Reduce Latency Test v7.3` and a `# Size ...` column header.

/// Lines looked at: the programs print their signature near the top.
const LINES: usize = 400;

/// What program wrote `text`, when it is one of the look-alikes above (pure).
pub fn other_program(text: &str) -> Option<&'static str> {
    let lines: Vec<&str> = text.lines().take(LINES).collect();
    let any = |f: &dyn Fn(&str) -> bool| lines.iter().any(|l| f(l));
    let perftest_banner = any(&|l| {
        let t = l.trim();
        (t.ends_with(" BW Test") || t.ends_with(" Lat Test")) && t.split_whitespace().count() <= 3
    });
    let perftest_header = any(&|l| l.contains("#bytes") && l.contains("#iterations"));
    if perftest_banner && perftest_header {
        return Some(
            "a perftest output (ib_send_bw, ib_write_bw, ...): it measures one RDMA link between two hosts, not an NCCL collective",
        );
    }
    let nccl1_header = any(&|l| {
        let words: Vec<&str> = l
            .split_whitespace()
            .filter(|w| *w != "#")
            .map(|w| w.trim_start_matches('#'))
            .collect();
        words.first() == Some(&"bytes")
            && words.get(1) == Some(&"N")
            && words.get(2) == Some(&"type")
            && words.contains(&"res")
    });
    if nccl1_header {
        return Some(
            "the output of NCCL 1's test programs (all_reduce_test, all_gather_test, ...): columns bytes, N, type, ..., res, not nccl-tests' size, count, type, ..., #wrong",
        );
    }
    let mscclpp = any(&|l| {
        let t = l.trim();
        t == "# Initializing MSCCL++" || (t.starts_with("# minBytes") && t.contains("kernel num:"))
    });
    if mscclpp {
        return Some(
            "an mscclpp-test output (MSCCL++'s benchmark, its own library rather than NCCL; its table puts in-place first)",
        );
    }
    if any(&|l| l.contains("The average bandwidth of ") && l.contains(" payload (")) {
        return Some(
            "the summary of a PyTorch collective benchmark (one algbw and busbw, no nccl-tests table)",
        );
    }
    let osu_banner = any(&|l| l.trim_start().starts_with("# OSU ") && l.contains(" Test"));
    let osu_header = any(&|l| l.trim_start().starts_with("# Size"));
    if osu_banner && osu_header {
        return Some(
            "an OSU micro-benchmark output (osu_allreduce, osu_bw, ...): latency or bandwidth per message size, not nccl-tests' algbw and busbw",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_tests_headers_are_not_taken_for_another_program() {
        let text = "# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807\n\
                    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
                    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n\
                    node1:1:1 [0] NCCL INFO MSCCL++ is not enabled\n";
        assert_eq!(other_program(text), None);
    }

    #[test]
    fn a_perftest_banner_alone_is_not_enough() {
        assert_eq!(other_program("                    Send BW Test\n"), None);
        assert!(other_program(
            "                    Send BW Test\n #bytes     #iterations    BW peak[Gb/sec]\n"
        )
        .is_some_and(|w| w.starts_with("a perftest output")));
    }
}
