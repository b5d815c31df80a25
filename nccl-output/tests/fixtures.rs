//! The nccl-tests output parser against every recorded fixture (`tests/fixtures/nccl-tests/`,
//! iterated through its `manifest.tsv`), the hand-written older and unusual formats
//! (`tests/fixtures/nccl-tests-handmade/`), and damaged inputs that must never panic.

use std::path::{Path, PathBuf};

use nccl_output::{
    busbw_factor, FailureKind, MinBwCheck, ParseOptions, ParsedOutput, PlacementKind, SourceFormat,
    TimeKind, TransportClass, TransportMatch,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn recorded(rel: &str) -> ParsedOutput {
    let path = fixtures().join("nccl-tests").join(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    nccl_output::parse(&bytes)
}

fn handmade(name: &str) -> ParsedOutput {
    let path = fixtures().join("nccl-tests-handmade").join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    nccl_output::parse(&bytes)
}

struct Entry {
    file: String,
    exit_code: i32,
    env: String,
    command: String,
}

fn manifest() -> Vec<Entry> {
    let text = std::fs::read_to_string(fixtures().join("nccl-tests/manifest.tsv")).unwrap();
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Entry {
                file: f[0].to_string(),
                exit_code: f[1].parse().unwrap(),
                env: f[2].to_string(),
                command: f[3].to_string(),
            }
        })
        .collect()
}

/// Expected row count from the command: sizes from -b to -e by factor -f (defaults 2).
fn expected_sizes(command: &str) -> Option<usize> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let arg = |flag: &str| {
        words
            .iter()
            .position(|w| *w == flag)
            .and_then(|i| words.get(i + 1))
            .copied()
    };
    let bytes = |s: &str| -> Option<u64> {
        let (num, mult) = match s.chars().last()? {
            'K' => (&s[..s.len() - 1], 1u64 << 10),
            'M' => (&s[..s.len() - 1], 1 << 20),
            'G' => (&s[..s.len() - 1], 1 << 30),
            _ => (s, 1),
        };
        Some(num.parse::<u64>().ok()? * mult)
    };
    let (b, e) = (bytes(arg("-b")?)?, bytes(arg("-e")?)?);
    let f: u64 = arg("-f").map_or(Some(2), |f| f.parse().ok())?;
    let mut n = 0;
    let mut s = b;
    while s <= e {
        n += 1;
        s *= f;
    }
    Some(n)
}

#[test]
fn every_recorded_fixture_parses_plausibly() {
    let entries = manifest();
    assert!(
        entries.len() >= 59,
        "manifest lists {} files",
        entries.len()
    );
    for e in &entries {
        let out = recorded(&e.file);
        let is_json = e.file.ends_with(".json");
        assert_eq!(
            out.format,
            Some(if is_json {
                SourceFormat::Json
            } else {
                SourceFormat::Text
            }),
            "{}",
            e.file
        );
        assert!(
            out.diagnostics.is_empty(),
            "{}: {:?}",
            e.file,
            out.diagnostics
        );
        if e.exit_code == 0 {
            let avg = out
                .avg_busbw
                .as_ref()
                .unwrap_or_else(|| panic!("{}: no avg busbw", e.file));
            assert!(avg.value.is_some_and(|v| v > 0.0), "{}", e.file);
            assert_eq!(avg.min_bw_check, MinBwCheck::Unchecked, "{}", e.file);
            assert!(out.failures.is_empty(), "{}: {:?}", e.file, out.failures);
            assert!(out.completed(), "{}", e.file);
            assert_eq!(
                out.out_of_bounds.as_ref().map(|o| (o.count, o.ok)),
                Some((0, true))
            );
            // One row per size, except where flags multiply rows.
            // -d all -o all: 12 data types x 6 reduction ops per size.
            let per_size = if e.command.contains("-d all -o all") {
                72
            } else {
                1
            };
            if let Some(n) = expected_sizes(&e.command) {
                // alltoallv/scatter/gather/hypercube round 8 B down to 0 B (still a row).
                assert_eq!(out.rows.len(), n * per_size, "{}", e.file);
            }
            assert!(out.wrong_rows().next().is_none(), "{}", e.file);
            // Printed busbw agrees with algbw x factor wherever the collective is known.
            if out.collective.is_some() {
                assert!(out.nranks().is_some(), "{}", e.file);
                assert!(
                    out.busbw_mismatches().is_empty(),
                    "{}: {:?}",
                    e.file,
                    out.busbw_mismatches()
                );
            }
        } else {
            assert!(!out.completed(), "{}", e.file);
            assert!(!out.failures.is_empty(), "{}", e.file);
        }
        if !e.command.contains("(nccl-tests 2.1") && !e.file.ends_with("badsize.txt") {
            assert!(out.collective.is_some(), "{}", e.file);
        }
        // Every bit survives a serde round trip (the history stores these).
        let json = serde_json::to_string(&out).unwrap();
        let back: ParsedOutput = serde_json::from_str(&json).unwrap();
        assert_eq!(back, out, "{}", e.file);
        // Debug-enabled runs carry transport evidence.
        let debug_run = e.env.contains("NCCL_DEBUG=INFO") || e.command.contains("NCCL_DEBUG=INFO");
        if debug_run && !is_json {
            // Channel lines come with INIT; a run that logged only TUNING has NCCL's choice
            // per operation instead.
            if e.env.contains("NCCL_DEBUG_SUBSYS=TUNING") {
                assert!(!out.debug.tuning.is_empty(), "{}", e.file);
                assert!(
                    out.rows
                        .iter()
                        .all(|r| out.tuning_for(r.size_bytes).is_some()),
                    "{}",
                    e.file
                );
            } else {
                assert!(!out.debug.transports.is_empty(), "{}", e.file);
            }
            assert_eq!(
                out.debug.nccl_version.as_deref(),
                Some("2.28.9"),
                "{}",
                e.file
            );
            assert_eq!(
                out.debug.cuda_version.as_deref(),
                Some("13.0"),
                "{}",
                e.file
            );
        }
    }
}

#[test]
fn known_values_from_the_nvlink_runs() {
    let out = recorded("h200x2-nvlink/all_reduce_g2.txt");
    assert_eq!(out.nccl_tests_version.as_deref(), Some("2.19.6"));
    assert_eq!(out.nccl_headers_version, Some(22809));
    assert_eq!(out.nccl_library_version, Some(22809));
    assert_eq!(out.collective.as_deref(), Some("all_reduce"));
    assert_eq!(out.json_output_path.as_deref(), Some("all_reduce_g2.json"));
    let p = out.params.as_ref().unwrap();
    assert_eq!(
        (p.n_threads, p.n_gpus, p.warmup_iters, p.iters),
        (Some(1), Some(2), Some(5), Some(20))
    );
    assert_eq!(p.max_bytes, Some(8 << 30));
    assert_eq!(out.ranks.len(), 2);
    assert_eq!(out.ranks[1].bus_id.as_deref(), Some("0000:00:07"));
    assert_eq!(out.ranks[1].gpu_name.as_deref(), Some("NVIDIA H200"));
    assert_eq!(out.ranks[1].host.as_deref(), Some("vm"));
    assert_eq!(out.ranks[1].pid, Some(1355));
    let last = out.rows.last().unwrap();
    assert_eq!(last.size_bytes, 8 << 30);
    assert_eq!(last.out_of_place.as_ref().unwrap().busbw_gbps, Some(343.64));
    assert_eq!(last.in_place.as_ref().unwrap().busbw_gbps, Some(343.09));
    assert_eq!(out.busbw_at_max_size(), Some(343.64));
    assert_eq!(out.avg_busbw.as_ref().unwrap().value, Some(109.175));

    let ring = recorded("h200x2-formats/cur_algo_ring.txt");
    let tree = recorded("h200x2-formats/cur_algo_tree.txt");
    let oop = |o: &ParsedOutput| {
        o.rows
            .last()
            .unwrap()
            .out_of_place
            .as_ref()
            .unwrap()
            .busbw_gbps
    };
    assert_eq!(oop(&ring), Some(346.05));
    assert_eq!(oop(&tree), Some(353.88));

    let socket = recorded("h200x2-nvlink/all_reduce_g2_socket.txt");
    let at_1g = socket
        .rows
        .iter()
        .find(|r| r.size_bytes == 1 << 30)
        .unwrap();
    assert_eq!(at_1g.in_place.as_ref().unwrap().busbw_gbps, Some(3.28));
}

#[test]
fn json_and_text_of_the_same_run_agree() {
    let pairs: Vec<String> = manifest()
        .into_iter()
        .filter(|e| e.file.ends_with(".json"))
        .map(|e| e.file.trim_end_matches(".json").to_string())
        .collect();
    assert!(pairs.len() >= 15);
    for stem in pairs {
        let t = recorded(&format!("{stem}.txt"));
        let j = recorded(&format!("{stem}.json"));
        assert_eq!(t.collective, j.collective, "{stem}");
        assert_eq!(t.program, j.program, "{stem}");
        assert_eq!(t.nranks(), j.nranks(), "{stem}");
        assert_eq!(t.nccl_library_version, j.nccl_library_version, "{stem}");
        assert_eq!(t.rows.len(), j.rows.len(), "{stem}");
        let (tp, jp) = (t.params.as_ref().unwrap(), j.params.as_ref().unwrap());
        assert_eq!(
            (tp.min_bytes, tp.max_bytes, &tp.step),
            (jp.min_bytes, jp.max_bytes, &jp.step),
            "{stem}"
        );
        for (a, b) in t.rows.iter().zip(&j.rows) {
            assert_eq!(
                (a.size_bytes, a.count, &a.dtype, &a.redop, a.root),
                (b.size_bytes, b.count, &b.dtype, &b.redop, b.root),
                "{stem}"
            );
            for kind in [PlacementKind::OutOfPlace, PlacementKind::InPlace] {
                let (pa, pb) = (a.placement(kind).unwrap(), b.placement(kind).unwrap());
                assert_eq!(pa.wrong, pb.wrong, "{stem} {}", a.size_bytes);
                let (x, y) = (pa.busbw_gbps.unwrap(), pb.busbw_gbps.unwrap());
                assert!(
                    (x - y).abs() <= nccl_output::busbw::printed_rounding(y) + 1e-9,
                    "{stem} {}: {x} vs {y}",
                    a.size_bytes
                );
                let (x, y) = (pa.time_us.unwrap(), pb.time_us.unwrap());
                assert!(
                    (x - y).abs() <= 0.5 + 1e-9,
                    "{stem} {}: {x} vs {y}",
                    a.size_bytes
                );
            }
        }
        let (x, y) = (
            t.avg_busbw.unwrap().value.unwrap(),
            j.avg_busbw.unwrap().value.unwrap(),
        );
        assert!((x - y).abs() / y < 1e-5, "{stem}: {x} vs {y}");
    }
}

#[test]
fn transport_evidence_in_debug_runs() {
    // NVLink, one process: the Socket plugin is loaded but the channels use P2P.
    let nv = recorded("h200x2-nvlink/all_reduce_g2_debug.txt");
    assert_eq!(nv.debug.network_plugin(), Some("Socket"));
    assert_eq!(nv.network_transport(), None);
    assert_eq!(nv.transport_match("P2P"), TransportMatch::Used);
    assert_eq!(nv.transport_match("IB"), TransportMatch::NoEvidence);
    assert!(nv.debug.net_plugins_failed.contains(&"IB".to_string()));
    assert!(nv
        .debug
        .net_plugins_initialized
        .contains(&"Socket".to_string()));
    assert_eq!(nv.debug.n_nodes, Some(1));
    assert_eq!(nv.debug.cuda_driver_version, Some(13000));
    let mpi = recorded("h200x2-mpirun/all_reduce_mpi_np2_debug.txt");
    assert_eq!(mpi.debug.transports[0].via, "P2P/CUMEM");
    assert_eq!(
        mpi.debug.class_counts().get(&TransportClass::IntraNode),
        Some(&48)
    );

    // Socket transport, single host and two "hosts".
    for f in [
        "h200x2-nvlink/all_reduce_g2_socket.txt",
        "h200x2-mpirun/all_reduce_mpi_np2_socket.txt",
        "h200x2-twohost/all_reduce_2host_socket.txt",
        "h200x2-twohost/all_gather_2host_socket.txt",
    ] {
        let out = recorded(f);
        assert_eq!(out.network_transport(), Some("Socket"), "{f}");
        assert_eq!(out.transport_match("Socket"), TransportMatch::Used, "{f}");
        assert_eq!(
            out.transport_match("GPUDirectTCPX"),
            TransportMatch::Other {
                seen: vec!["Socket".into()]
            },
            "{f}"
        );
        assert!(
            out.debug.env.iter().any(|v| v.name == "NCCL_P2P_DISABLE") || f.contains("twohost"),
            "{f}"
        );
    }
    let two = recorded("h200x2-twohost/all_reduce_2host_socket.txt");
    assert_eq!(two.debug.n_nodes, Some(2));
    assert_eq!(
        two.debug.hosts,
        vec!["a3h-001".to_string(), "a3h-002".to_string()]
    );
    assert_eq!(two.ranks[1].host.as_deref(), Some("a3h-002"));
    // Debug lines sat between the header and the rows; none became a row.
    assert_eq!(two.rows.len(), 28);
}

/// The kinds of an output's failure lines, in output order.
fn failure_kinds(out: &ParsedOutput) -> Vec<FailureKind> {
    out.failures.iter().map(|f| f.kind).collect()
}

#[test]
fn failure_kinds_of_failed_runs() {
    let g4 = recorded("h200x2-nvlink/all_reduce_g4_toomany.txt");
    assert_eq!(
        failure_kinds(&g4),
        vec![FailureKind::InvalidGpuCount, FailureKind::TestFailure]
    );
    assert_eq!(g4.failures[0].line, 6);
    assert_eq!(g4.failures[1].host.as_deref(), Some("vm"));
    assert_eq!(g4.failures[1].pid, Some(1621));
    assert!(g4.rows.is_empty() && g4.avg_busbw.is_none());

    let mpi = recorded("h200x2-mpirun/all_reduce_mpi_np2_g2_fail.txt");
    assert_eq!(
        failure_kinds(&mpi),
        vec![
            FailureKind::InvalidGpuCount,
            FailureKind::TestFailure,
            FailureKind::MpiAbort,
            FailureKind::MpiAbort
        ]
    );
    assert_eq!(mpi.failures[3].exit_code, Some(5));

    let bad = recorded("h200x2-formats/cur_all_reduce_badsize.txt");
    assert_eq!(bad.failures.len(), 1);
    assert_eq!(bad.failures[0].kind, FailureKind::InvalidArgument);
    assert!(bad.failures[0].text.contains("8589934592 > 1024"));

    let minbw = recorded("h200x2-formats/cur_all_reduce_minbw_fail.txt");
    let avg = minbw.avg_busbw.as_ref().unwrap();
    assert_eq!(
        (avg.value, avg.min_bw_check),
        (Some(283.841), MinBwCheck::Failed)
    );
    assert_eq!(minbw.failures[0].kind, FailureKind::BelowMinBandwidth);
    assert_eq!(minbw.failures[1].kind, FailureKind::TestFailure);
    assert_eq!(minbw.rows.len(), 3);
}

#[test]
fn older_and_unusual_recorded_formats() {
    let v211 = recorded("h200x2-formats/v2.11.0_all_reduce_g2.txt");
    assert_eq!(v211.nccl_tests_version, None);
    assert_eq!(v211.collective, None);
    assert_eq!(v211.ranks[0].group, None);
    assert_eq!(v211.ranks[0].bus_id.as_deref(), Some("0x00"));
    assert_eq!(v211.params.as_ref().unwrap().agg_iters, None);
    let r = &v211.rows[25];
    assert_eq!((r.size_bytes, r.root), (268435456, None));
    assert_eq!(r.out_of_place.as_ref().unwrap().max_error, Some(0.0));
    assert_eq!(r.out_of_place.as_ref().unwrap().wrong, None);
    // The caller names the collective for outputs that do not; busbw then checks out.
    let v211 = nccl_output::parse_with(
        &std::fs::read(fixtures().join("nccl-tests/h200x2-formats/v2.11.0_all_reduce_g2.txt"))
            .unwrap(),
        &ParseOptions {
            collective: Some("all_reduce_perf".into()),
        },
    );
    assert_eq!(v211.collective.as_deref(), Some("all_reduce"));
    assert!(v211.busbw_mismatches().is_empty());

    let v213 = recorded("h200x2-formats/v2.13.8_all_reduce_g2.txt");
    assert_eq!(v213.ranks[1].group, Some(0));
    assert_eq!(v213.rows[0].root, Some(-1));

    let c0 = recorded("h200x2-formats/v2.16.2_all_gather_g2_c0.txt");
    assert!(c0
        .rows
        .iter()
        .all(|r| r.out_of_place.as_ref().unwrap().wrong.is_none()));
    assert_eq!(c0.params.as_ref().unwrap().validation, Some(0));

    let cs = recorded("h200x2-formats/cur_all_reduce_C1_S1.txt");
    assert_eq!(cs.tables[0].time_kind, TimeKind::CpuTime);
    assert_eq!(cs.rows[0].extra["timestamp"], "2026-11-29 21:02:56");
    assert_eq!(
        cs.rows[0].out_of_place.as_ref().unwrap().time_us,
        Some(11.80)
    );

    let hc = recorded("h200x2-formats/cur_hypercube.txt");
    assert!(hc
        .rows
        .iter()
        .all(|r| r.redop.is_none() && r.root == Some(-1)));
    assert_eq!(
        hc.rows[12].in_place.as_ref().unwrap().busbw_gbps,
        Some(269.77)
    );

    let da = recorded("h200x2-formats/cur_all_reduce_dall_oall.txt");
    let types: std::collections::BTreeSet<_> =
        da.rows.iter().filter_map(|r| r.dtype.clone()).collect();
    let ops: std::collections::BTreeSet<_> =
        da.rows.iter().filter_map(|r| r.redop.clone()).collect();
    assert!(
        types.contains("bfloat16") && types.contains("f8e5m2") && types.len() >= 10,
        "{types:?}"
    );
    assert_eq!(ops.len(), 6, "{ops:?}");

    let v2 = recorded("h200x2-formats/cur_alltoallv.txt");
    assert_eq!(v2.rows[0].size_bytes, 0);
    assert!(v2
        .rows
        .iter()
        .all(|r| r.in_place.as_ref().unwrap().wrong.is_none()));
    assert!(v2
        .rows
        .iter()
        .all(|r| r.out_of_place.as_ref().unwrap().wrong == Some(0)));

    let z = recorded("h200x2-formats/cur_all_reduce_z1_m4.txt");
    assert_eq!(z.params.as_ref().unwrap().agg_iters, Some(4));
    assert_eq!(z.notes.len(), 1);

    let json = recorded("h200x2-nvlink/alltoall_g2.json");
    // One process with -g 2: JSON lists one device line, but the run had 2 ranks.
    assert_eq!((json.ranks.len(), json.nranks()), (1, Some(2)));
    assert_eq!(
        json.json_meta.as_ref().unwrap().args[0],
        "./build/alltoall_perf"
    );
    assert_eq!(busbw_factor("alltoall", 2), Some(0.5));
}

#[test]
fn handmade_per_iteration_and_timestamp_columns() {
    let out = handmade("v2.19_all_reduce_I1_S1_g8.txt");
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
    assert_eq!(out.rows.len(), 3);
    assert_eq!(out.nranks(), Some(8));
    let r = &out.rows[1];
    let oop = r.out_of_place.as_ref().unwrap();
    let ip = r.in_place.as_ref().unwrap();
    assert_eq!(oop.busbw_gbps, Some(95.28));
    assert_eq!(oop.extra["i_max"], 50.08);
    assert_eq!(ip.extra["i_cv%"], 5.2);
    assert_eq!(ip.busbw_gbps, Some(94.33));
    assert_eq!(r.extra["timestamp"], "2026-11-29 22:01:11");
    assert!(
        out.busbw_mismatches().is_empty(),
        "{:?}",
        out.busbw_mismatches()
    );
    assert!(out.notes[0].starts_with("Per-Iteration Report"));
}

#[test]
fn handmade_tagged_and_interleaved_mpirun_output() {
    for f in [
        "v2.21_all_gather_mpi_tagged_tcpx_N2.txt",
        "v2.21_all_gather_mpi_interleaved_tcpx_N2.txt",
    ] {
        let out = handmade(f);
        assert!(out.diagnostics.is_empty(), "{f}: {:?}", out.diagnostics);
        // -N 2: the two sizes twice, in one table.
        let sizes: Vec<u64> = out.rows.iter().map(|r| r.size_bytes).collect();
        assert_eq!(sizes, vec![33554432, 67108864, 33554432, 67108864], "{f}");
        assert_eq!(out.tables.len(), 1);
        let r = &out.rows[2];
        assert_eq!(r.in_place.as_ref().unwrap().busbw_gbps, Some(8.15), "{f}");
        assert_eq!(r.in_place.as_ref().unwrap().wrong, Some(0), "{f}");
        assert_eq!(out.network_transport(), Some("GPUDirectTCPX"), "{f}");
        assert_eq!(out.debug.network_plugin(), Some("GPUDirectTCPX_v7"));
        assert_eq!(
            out.transport_match("GPUDirectTCPX"),
            TransportMatch::Used,
            "{f}"
        );
        assert_eq!(
            out.transport_match("NET/gIB"),
            TransportMatch::Other {
                seen: vec!["GPUDirectTCPX".into()]
            }
        );
        let tcpx = out.debug.transports.iter().map(|t| t.count).sum::<u64>();
        assert_eq!(tcpx, 5, "{f}");
        assert_eq!(
            out.debug.hosts,
            vec!["a3h-001".to_string(), "a3h-002".to_string()],
            "{f}"
        );
        assert_eq!(out.debug.nccl_version.as_deref(), Some("2.21.5"));
        assert_eq!(out.debug.n_nodes, Some(2));
        assert_eq!(out.debug.env[0].name, "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME");
        assert!(out.busbw_mismatches().is_empty(), "{f}");
        assert!(out.completed());
    }
}

/// Each row's size and its out-of-place and in-place busbw.
fn size_and_busbw(out: &ParsedOutput) -> Vec<(u64, Option<f64>, Option<f64>)> {
    out.rows
        .iter()
        .map(|r| {
            (
                r.size_bytes,
                r.out_of_place.as_ref().and_then(|p| p.busbw_gbps),
                r.in_place.as_ref().and_then(|p| p.busbw_gbps),
            )
        })
        .collect()
}

/// `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING`: NCCL prints a line per operation inside
/// the table, and nccl-tests prints each row in three pieces (sizes, out-of-place,
/// in-place), so every row is cut twice, the first operation's line glued to each piece,
/// and large times print as bare integers (`12127`). Measured on 2 x H200 (issue #18).
#[test]
fn handmade_rows_cut_in_three_by_per_operation_lines() {
    let out = handmade("v2.19_all_reduce_tuning_split_rows.txt");
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
    assert_eq!(
        size_and_busbw(&out),
        vec![
            (2147483648, Some(345.78), Some(346.08)),
            (4294967296, Some(354.17), Some(354.96))
        ]
    );
    assert_eq!(out.rows[1].in_place.as_ref().unwrap().wrong, Some(0));
    assert!(
        out.busbw_mismatches().is_empty(),
        "{:?}",
        out.busbw_mismatches()
    );
    assert!(out.completed());
    // The per-operation lines name NCCL's choice for each size.
    for row in &out.rows {
        assert_eq!(
            out.tuning_for(row.size_bytes),
            Some(("RING".to_string(), "SIMPLE".to_string())),
            "size {}",
            row.size_bytes
        );
    }
    assert_eq!(out.tuning_for(8), None);
}

/// NCCL before 2.19 wrote its choice as numbers and without the channel range; NCCL counts
/// one rank's part for all_gather. Plugins log their own versions in their own words.
#[test]
fn older_per_operation_lines_and_plugin_versions() {
    let text = "\
# nccl-tests version 2.13.8 nccl-headers=21805 nccl-library=21805
# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#  Rank  0 Group  0 Pid   2101 on      node1 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   2102 on      node2 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
node1:2101:2101 [0] NCCL INFO NET/Plugin: Loaded net plugin GPUDirectTCPX_v7 (v7)
node1:2101:2101 [0] NCCL INFO Initializing network FasTrak, version: 1.0.17
node1:2101:2101 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.7.4-aws
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
node1:2101:2101 [0] NCCL INFO AllGather: 524288 Bytes -> Algo 1 proto 2 time 31.120001
     1048576        131072     float    none      -1    60.10   17.45    8.72       0    59.80   17.53    8.77       0
node1:2101:2101 [0] NCCL INFO AllGather: 1048576 Bytes -> Algo 0 proto 0 time 50.5
node1:2101:2101 [0] NCCL INFO AllGather: 1048576 Bytes -> Algo 1 proto 2 time 50.5
     2097152        262144     float    none      -1    90.00   23.30   11.65       0    91.00   23.05   11.52       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 10.17
";
    let out = nccl_output::parse(text.as_bytes());
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
    assert_eq!(out.rows.len(), 2);
    assert_eq!(
        out.tuning_for(1048576),
        Some(("RING".to_string(), "SIMPLE".to_string()))
    );
    assert_eq!(
        out.tuning_for(2097152),
        Some(("TREE+RING".to_string(), "LL+SIMPLE".to_string()))
    );
    let versions: Vec<(&str, &str)> = out
        .debug
        .plugin_versions
        .iter()
        .map(|v| (v.name.as_str(), v.version.as_str()))
        .collect();
    assert_eq!(
        versions,
        [
            ("GPUDirectTCPX_v7", "v7"),
            ("FasTrak", "1.0.17"),
            ("aws-ofi-nccl", "1.7.4-aws")
        ]
    );
}

/// One small table in the forms users paste (issue #18): as printed; `#wrong` as `N/A`
/// (`-c 0`); behind mpirun's `--tag-output`, srun's `--label`, a log collector's prefix on
/// every line (`pod-7f9c `); and with the `#` of its header and summary lines lost.
#[test]
fn the_forms_users_paste_give_the_same_rows() {
    let base = "\
# nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 0 graph: 0
#
#  Rank  0 Group  0 Pid   2101 on      node1 device  0 [0000:18:00] NVIDIA H200
#  Rank  1 Group  0 Pid   2101 on      node1 device  1 [0000:2a:00] NVIDIA H200
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    10.50    0.00    0.00     N/A    10.20    0.00    0.00     N/A
     1048576        262144     float     sum      -1    20.97   50.00   50.00     N/A    20.90   50.17   50.17     N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 25.04
#
";
    let per_line =
        |f: &dyn Fn(&str) -> String| base.lines().map(|l| f(l) + "\n").collect::<String>();
    let forms = [
        ("as printed", base.to_string()),
        (
            "mpirun --tag-output",
            per_line(&|l| format!("[1,0]<stdout>:{l}")),
        ),
        ("srun --label", per_line(&|l| format!("0: {l}"))),
        (
            "a collector's prefix",
            per_line(&|l| format!("pod-7f9c {l}")),
        ),
        (
            "a prefix before srun's label",
            per_line(&|l| format!("pod-7f9c 0: {l}")),
        ),
        // Seen in published logs (issue #33): a job runner's prefix before mpirun's tag,
        // and a README quoting a tagged output indented by spaces.
        (
            "a runner's prefix before mpirun's tag",
            per_line(&|l| format!("(head, rank=0, pid=4242) [1,0]<stdout>:{l}")),
        ),
        (
            "an indented, tagged table",
            per_line(&|l| format!("    [1,0]<stdout>:{l}")),
        ),
        (
            "Kubernetes --timestamps",
            per_line(&|l| format!("2026-11-30T10:00:01.123456789Z {l}")),
        ),
        ("CRLF line endings", per_line(&|l| format!("{l}\r"))),
        // `-G 1` (CUDA graphs) and `-z 1` (blocking) change only the header's words.
        (
            "-G 1 and -z 1",
            base.replace("graph: 0", "graph: 1 blocking: 1"),
        ),
        (
            "a test runner's prefix",
            per_line(&|l| format!("[test_allreduce] {l}")),
        ),
        (
            "header and summary without #",
            per_line(&|l| match l.strip_prefix('#') {
                Some(rest) if !rest.trim().is_empty() => rest.to_string(),
                _ => l.to_string(),
            }),
        ),
    ];
    for (form, text) in forms {
        let out = nccl_output::parse(text.as_bytes());
        assert!(out.diagnostics.is_empty(), "{form}: {:?}", out.diagnostics);
        assert_eq!(
            size_and_busbw(&out),
            vec![
                (8, Some(0.0), Some(0.0)),
                (1048576, Some(50.0), Some(50.17))
            ],
            "{form}"
        );
        assert_eq!(out.nranks(), Some(2), "{form}");
        assert!(out.completed(), "{form}: the summary lines were not read");
        assert_eq!(
            out.params.as_ref().and_then(|p| p.max_bytes),
            Some(16),
            "{form}: the header was not read"
        );
        if form == "-G 1 and -z 1" {
            let params = out.params.as_ref().unwrap();
            assert_eq!(params.graph, Some(1));
            assert_eq!(
                params.other.get("blocking").map(String::as_str),
                Some("1"),
                "{params:?}"
            );
        }
    }
}

#[test]
fn handmade_timeout_wrong_results_and_blank_block() {
    let t = handmade("v2.19_all_reduce_mpi_timeout.txt");
    assert_eq!(
        failure_kinds(&t),
        vec![
            FailureKind::Timeout,
            FailureKind::TestFailure,
            FailureKind::TestFailure,
            FailureKind::MpiAbort,
            FailureKind::MpiAbort,
            FailureKind::SrunError
        ]
    );
    assert_eq!(t.failures[0].timeout_s, Some(30));
    assert_eq!(t.failures[0].host.as_deref(), Some("node-02"));
    assert_eq!(t.failures[4].host.as_deref(), Some("node-02"));
    assert_eq!(t.failures[4].pid, Some(6230));
    assert_eq!(t.failures[5].exit_code, Some(4));
    assert_eq!(t.rows.len(), 1);
    assert!(!t.completed());

    let w = handmade("v2.19_reduce_scatter_wrong.txt");
    assert!(w.diagnostics.is_empty(), "{:?}", w.diagnostics);
    let wrong: Vec<(Option<u64>, Option<u64>)> = w
        .rows
        .iter()
        .map(|r| {
            (
                r.out_of_place.as_ref().unwrap().wrong,
                r.in_place.as_ref().unwrap().wrong,
            )
        })
        .collect();
    assert_eq!(
        wrong,
        vec![
            (Some(0), Some(0)),
            (Some(12), Some(0)),
            (Some(16777200), Some(1048580))
        ]
    );
    assert_eq!(w.wrong_rows().count(), 2);
    assert_eq!(
        w.out_of_bounds.as_ref().map(|o| (o.count, o.ok)),
        Some((3, false))
    );
    assert_eq!(
        w.avg_busbw.as_ref().unwrap().min_bw_check,
        MinBwCheck::Passed
    );
    assert_eq!(w.failures[0].kind, FailureKind::OutOfBounds);

    let b = handmade("v2.19_sendrecv_blank_out_of_place.txt");
    assert!(b.diagnostics.is_empty(), "{:?}", b.diagnostics);
    assert_eq!(b.rows.len(), 2);
    for r in &b.rows {
        assert!(r.out_of_place.is_none());
        let ip = r.in_place.as_ref().unwrap();
        assert!(ip.time_us.is_some() && ip.wrong == Some(0));
    }
    assert_eq!(b.rows[1].in_place.as_ref().unwrap().time_us, Some(13.0));
}

#[test]
fn handmade_truncated_json() {
    let out = handmade("v2.19_all_reduce_mpi_truncated.json");
    let meta = out.json_meta.as_ref().unwrap();
    assert!(meta.truncated);
    assert_eq!(meta.end_time, None);
    assert_eq!(out.rows.len(), 5);
    // The bare `inf` busbw is read, reported, and not kept as a number.
    let first = out.rows[0].out_of_place.as_ref().unwrap();
    assert_eq!((first.busbw_gbps, first.algbw_gbps), (None, Some(0.000681)));
    assert_eq!(out.diagnostics.len(), 2, "{:?}", out.diagnostics);
    assert!(out
        .diagnostics
        .iter()
        .any(|d| d.reason.contains("infinite")));
    assert!(out.avg_busbw.is_none());
    assert!(!out.completed());
    assert_eq!(out.collective.as_deref(), Some("all_reduce"));
}

/// Deterministic pseudo-random numbers (64-bit LCG, Knuth's MMIX constants).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn all_fixture_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["nccl-tests", "nccl-tests-handmade"] {
        let root = fixtures().join(dir);
        let mut stack = vec![root];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if matches!(p.extension().and_then(|x| x.to_str()), Some("txt" | "json")) {
                    files.push(p);
                }
            }
        }
    }
    files.sort();
    files
}

#[test]
fn never_panics_on_truncated_or_mutated_fixtures() {
    let files = all_fixture_files();
    assert!(files.len() >= 66, "{}", files.len());
    let mut rng = Lcg(0x5eed);
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        // Truncations at many offsets, including inside multi-byte sequences of mutated data.
        let step = (bytes.len() / 40).max(1);
        for cut in (0..bytes.len()).step_by(step) {
            let _ = nccl_output::parse(&bytes[..cut]);
        }
        // Random byte mutations: flips, digits, separators, high bytes.
        for _ in 0..40 {
            let mut m = bytes.clone();
            let n = 1 + (rng.next() % 8) as usize;
            for _ in 0..n {
                if m.is_empty() {
                    break;
                }
                let i = (rng.next() as usize) % m.len();
                m[i] = match rng.next() % 6 {
                    0 => (rng.next() & 0xff) as u8,
                    1 => b"0123456789"[(rng.next() % 10) as usize],
                    2 => b' ',
                    3 => b'\n',
                    4 => b"{}[]\",:#"[(rng.next() % 8) as usize],
                    _ => 0xC3,
                };
            }
            let out = nccl_output::parse(&m);
            let _ = out.busbw_mismatches();
            let _ = out.network_transport();
            let _ = out.nranks();
            let _ = serde_json::to_string(&out).unwrap();
        }
    }
}

#[test]
fn huge_numbers_become_diagnostics() {
    let base =
        std::fs::read_to_string(fixtures().join("nccl-tests/h200x2-nvlink/all_reduce_g2.txt"))
            .unwrap();
    let big = base.replacen(
        "           8             2     float",
        "99999999999999999999999             2     float",
        1,
    );
    let out = nccl_output::parse(big.as_bytes());
    assert_eq!(out.rows.len(), 30);
    assert!(
        out.diagnostics
            .iter()
            .any(|d| d.line == 13 && d.reason.contains("larger than 2^64-1")),
        "{:?}",
        out.diagnostics
    );
    let huge_float = base.replacen("19.05", "1e999", 1);
    let out = nccl_output::parse(huge_float.as_bytes());
    assert!(
        out.diagnostics
            .iter()
            .any(|d| d.reason.contains("overflows")),
        "{:?}",
        out.diagnostics
    );
    assert_eq!(out.rows.len(), 31);
}

#[test]
fn adversarial_shapes_stay_fast_and_quiet() {
    let start = std::time::Instant::now();
    // A names line with 20 000 columns and rows of 10 000 values.
    let mut text = String::from("#");
    for _ in 0..10_000 {
        text.push_str(" size time");
    }
    text.push('\n');
    for _ in 0..20 {
        text.push_str(&"1 ".repeat(10_000));
        text.push('\n');
    }
    let out = nccl_output::parse(text.as_bytes());
    assert_eq!(out.tables.len(), 1);
    // One for the header's surplus time columns, one per row that does not fit.
    assert_eq!(out.diagnostics.len(), 21, "{:?}", &out.diagnostics[..2]);
    // Deep JSON nesting and a long run of closings.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(50_000));
    let out = nccl_output::parse(format!("{{\"results\": {deep}").as_bytes());
    assert!(out.rows.is_empty() && !out.diagnostics.is_empty());
    let out = nccl_output::parse(format!("{{\"a\": [{}", "[], ".repeat(200_000)).as_bytes());
    assert!(out.json_meta.unwrap().truncated);
    // Many debug lines from hosts the rank lines never named.
    let dbg =
        "   12  3 x9h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via NET/IB/0\n".repeat(50_000);
    let out = nccl_output::parse(dbg.as_bytes());
    assert_eq!(out.debug.transports[0].count, 50_000);
    // A bare table of 100 000 rows the inference cannot narrow (all_reduce-like rows
    // whose busbw is all but 2 x algbw fit thousands of rank counts).
    let rows = "     1048576        262144     float     sum      -1    10.00  100.00  199.99       0    10.00  100.00  199.99       0\n"
        .repeat(100_000);
    let out = nccl_output::parse_headerless(rows.as_bytes(), &ParseOptions::default(), None);
    assert_eq!(out.rows.len(), 100_000);
    assert!(out
        .inferences
        .iter()
        .all(|i| i.fact != nccl_output::InferredFact::Ranks || i.value.is_none()));
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
}

#[test]
fn several_independent_runs_are_flagged() {
    let one =
        std::fs::read_to_string(fixtures().join("nccl-tests/h200x2-nvlink/all_reduce_g2.txt"))
            .unwrap();
    let out = nccl_output::parse(format!("{one}{one}").as_bytes());
    assert_eq!(out.tables.len(), 2);
    assert_eq!(out.rows.len(), 62);
    assert_eq!(out.rows[61].table, 1);
    assert_eq!(out.diagnostics.len(), 1);
    assert!(out.diagnostics[0].reason.contains("independently"));
    assert!(out.ranks_ran_alone());
    assert!(!nccl_output::parse(one.as_bytes()).ranks_ran_alone());
}

/// A bare table (issue #18): the collective and the rank count are inferred from the
/// columns and busbw/algbw where only one fits, and said to be inferred; where several
/// fit, the inference says which and what to pass.
#[test]
fn bare_tables_infer_what_fits_and_say_what_does_not() {
    use nccl_output::{parse_headerless, InferredFact};
    let row = |size: u64, dtype: &str, redop: &str, root: i64, alg: f64, bus: f64| {
        format!(
            "{size:>12} {:>13} {dtype:>9} {redop:>7} {root:>7} {:>8.2} {alg:>7.2} {bus:>7.2} {:>7} {:>8.2} {alg:>7.2} {bus:>7.2} {:>7}\n",
            size / 4,
            size as f64 / alg / 1e3,
            0,
            size as f64 / alg / 1e3,
            0
        )
    };
    let table = |rows: &[(u64, f64)], redop: &str, root: i64, factor: f64| {
        rows.iter()
            .map(|&(size, alg)| {
                row(
                    size,
                    "float",
                    redop,
                    root,
                    alg,
                    (alg * factor * 100.0).round() / 100.0,
                )
            })
            .collect::<String>()
    };
    let facts = |out: &nccl_output::ParsedOutput| -> Vec<(InferredFact, Option<String>)> {
        out.inferences
            .iter()
            .map(|i| (i.fact, i.value.clone()))
            .collect()
    };
    let sizes = [(1 << 20, 41.37), (1 << 26, 187.21), (1 << 30, 356.64)];
    let opts = ParseOptions::default();

    // all_reduce on 8 ranks: redop sum, root -1, factor 1.75.
    let out = parse_headerless(table(&sizes, "sum", -1, 1.75).as_bytes(), &opts, None);
    assert_eq!(
        facts(&out),
        [
            (InferredFact::Collective, Some("all_reduce".into())),
            (InferredFact::Ranks, Some("8".into()))
        ],
        "{:?}",
        out.inferences
    );
    assert_eq!(
        (out.collective.as_deref(), out.nranks()),
        (Some("all_reduce"), Some(8))
    );
    assert!(out.busbw_mismatches().is_empty());
    assert!(
        out.inferences[1].basis.contains("1.75"),
        "{}",
        out.inferences[1].basis
    );

    // reduce_scatter on 16: the same columns, a factor under 1.
    let out = parse_headerless(
        table(&sizes, "sum", -1, 15.0 / 16.0).as_bytes(),
        &opts,
        None,
    );
    assert_eq!(
        facts(&out),
        [
            (InferredFact::Collective, Some("reduce_scatter".into())),
            (InferredFact::Ranks, Some("16".into()))
        ]
    );

    // all_gather or alltoall: the rank count is the same for both. Their in-place results
    // tell them apart: all_gather's are checked (`#wrong` 0), alltoall's are `N/A`.
    let checked = table(&sizes, "none", -1, 0.75);
    let out = parse_headerless(checked.as_bytes(), &opts, None);
    assert_eq!(
        facts(&out),
        [
            (InferredFact::Collective, Some("all_gather".into())),
            (InferredFact::Ranks, Some("4".into()))
        ]
    );
    let in_place_na: String = checked
        .lines()
        .map(|l| {
            format!(
                "{}     N/A\n",
                l.trim_end().strip_suffix('0').unwrap_or(l).trim_end()
            )
        })
        .collect();
    let out = parse_headerless(in_place_na.as_bytes(), &opts, None);
    assert_eq!(
        out.collective.as_deref(),
        Some("alltoall"),
        "{:?}",
        out.inferences
    );
    // With the data check off (`-c 0`: `N/A` in both placements), both still fit.
    let unchecked = in_place_na.replace("       0 ", "     N/A ");
    let out = parse_headerless(unchecked.as_bytes(), &opts, None);
    assert_eq!(
        facts(&out),
        [
            (InferredFact::Collective, None),
            (InferredFact::Ranks, Some("4".into()))
        ],
        "{unchecked}"
    );
    let basis = &out.inferences[0].basis;
    assert!(
        basis.contains("all_gather or alltoall") && basis.contains("--collective"),
        "{basis}"
    );

    // broadcast: the factor is 1 whatever the count; the caller's collective is kept.
    let given = ParseOptions {
        collective: Some("broadcast".into()),
    };
    let out = parse_headerless(table(&sizes, "none", 0, 1.0).as_bytes(), &given, None);
    assert_eq!(facts(&out), [(InferredFact::Ranks, None)]);
    assert!(out.inferences[0].basis.contains("--ranks"));
    assert_eq!(out.nranks(), None);

    // A given rank count is used, not inferred; the collective is still inferred from it.
    let out = parse_headerless(table(&sizes, "sum", -1, 1.75).as_bytes(), &opts, Some(8));
    assert_eq!(
        facts(&out),
        [(InferredFact::Collective, Some("all_reduce".into()))]
    );

    // Bandwidths too small to narrow n: no guess.
    let tiny = table(&[(8, 0.0), (16, 0.0)], "sum", -1, 1.75);
    let out = parse_headerless(tiny.as_bytes(), &given_all_reduce(), None);
    assert_eq!(facts(&out), [(InferredFact::Ranks, None)]);
    assert!(out.inferences[0].basis.contains("too small"));

    // An output with a header is left as it is.
    let out = nccl_output::parse_headerless(
        &std::fs::read(fixtures().join("nccl-tests/h200x2-formats/v2.13.8_all_reduce_g2.txt"))
            .unwrap(),
        &opts,
        None,
    );
    assert_eq!(out.nranks(), Some(2));
    assert!(out
        .inferences
        .iter()
        .all(|i| i.fact == InferredFact::Collective));
}

fn given_all_reduce() -> ParseOptions {
    ParseOptions {
        collective: Some("all_reduce".into()),
    }
}

/// all_reduce on 2 ranks prints busbw = algbw: reduce_scatter would fit only on tens of
/// thousands of ranks, so all_reduce on 2 is inferred, and the basis says why.
#[test]
fn a_two_rank_all_reduce_table_is_not_taken_for_a_huge_reduce_scatter() {
    let text =
        std::fs::read_to_string(fixtures().join("nccl-tests/h200x2-nvlink/all_reduce_g2.txt"))
            .unwrap();
    let rows = table_rows(&text);
    let out = nccl_output::parse_headerless(rows.as_bytes(), &ParseOptions::default(), None);
    assert_eq!(
        (out.collective.as_deref(), out.nranks()),
        (Some("all_reduce"), Some(2)),
        "{:?}",
        out.inferences
    );
    assert!(
        out.inferences[0]
            .basis
            .contains("reduce_scatter would need"),
        "{:?}",
        out.inferences
    );
    assert!(out.busbw_mismatches().is_empty());
}

/// The 2xH200 tuning recordings (issue #19's material, `h200x2-tuning/`): NCCL's choice
/// per size follows the forced settings, and the default is Ring with LL at 1 MiB.
#[test]
fn the_tuning_recordings_name_nccls_choice_per_size() {
    let choice = |name: &str, size: u64| {
        recorded(&format!("h200x2-tuning/all_reduce_g2_{name}_r1.txt")).tuning_for(size)
    };
    let pair = |a: &str, p: &str| Some((a.to_string(), p.to_string()));
    assert_eq!(choice("default", 1 << 20), pair("RING", "LL"));
    assert_eq!(choice("default", 4 << 30), pair("RING", "SIMPLE"));
    assert_eq!(choice("tree", 1 << 20), pair("TREE", "SIMPLE"));
    assert_eq!(choice("tree", 4 << 30), pair("TREE", "SIMPLE"));
    assert_eq!(choice("ll128", 1 << 30), pair("RING", "LL128"));
    assert_eq!(choice("ring", 4 << 30), pair("RING", "SIMPLE"));
}

/// Issue #33: the rank lines of a paste may list some ranks only; the rows' busbw/algbw
/// then give the run's rank count (here 2 of the recording, with rank 1's line left out).
#[test]
fn a_paste_listing_some_ranks_takes_the_count_the_bandwidths_give() {
    let text =
        std::fs::read_to_string(fixtures().join("nccl-tests/h200x2-nvlink/all_reduce_g2.txt"))
            .unwrap();
    let whole = nccl_output::parse_headerless(text.as_bytes(), &Default::default(), None);
    assert_eq!(whole.nranks(), Some(2));
    assert!(whole.inferences.is_empty(), "{:?}", whole.inferences);
    let some: String = text
        .lines()
        .filter(|l| !l.starts_with("#  Rank  1"))
        .map(|l| format!("{l}\n"))
        .collect();
    let out = nccl_output::parse_headerless(some.as_bytes(), &Default::default(), None);
    assert_eq!(out.ranks.len(), 1);
    assert_eq!(out.nranks(), Some(2));
    assert!(
        out.inferences[0]
            .basis
            .starts_with("inferred 2 ranks: the output lists 1 rank line(s), but only 2 ranks fit"),
        "{:?}",
        out.inferences
    );
}

/// Issue #33: sendrecv's rows (redop `sum`, root -1, busbw = algbw, in-place `#wrong`
/// `N/A`) are sendrecv, not all_reduce on 2 ranks (whose factor is 1 too, but whose
/// in-place results nccl-tests checks). The recording's rows, without their header.
#[test]
fn bare_sendrecv_rows_are_sendrecv() {
    let text = std::fs::read_to_string(fixtures().join("nccl-tests/h200x2-nvlink/sendrecv_g2.txt"))
        .unwrap();
    let rows = table_rows(&text);
    let out = nccl_output::parse_headerless(rows.as_bytes(), &Default::default(), Some(2));
    assert_eq!(
        out.collective.as_deref(),
        Some("sendrecv"),
        "{:?}",
        out.inferences
    );
    assert!(out.busbw_mismatches().is_empty());
}

/// Issue #33: rccl-tests (AMD's fork) prints the same table under its own header lines
/// (`# rccl-tests version ... rccl-headers=...`, `RCCL version : ...`, `HIP version`,
/// `ROCm version`, as in ROCm/rocm-systems#3415; older builds `rccl-tests: Version ...`,
/// as in ROCm/container-toolkit#77): the rows read the same, with its versions.
#[test]
fn rccl_tests_outputs_read_like_nccl_tests_with_their_versions() {
    let text =
        std::fs::read_to_string(fixtures().join("nccl-tests/h200x2-nvlink/all_reduce_g2.txt"))
            .unwrap();
    let nccl = nccl_output::parse(text.as_bytes());
    let mut rccl = String::new();
    for line in text.lines() {
        match line {
            l if l.starts_with("# nccl-tests version") => rccl.push_str(
                "# rccl-tests version 2.17.9-develop:f220897c9b rccl-headers=22803 rccl-library=22803\n",
            ),
            l if l.starts_with("#  Rank  1") => {
                rccl.push_str(&format!("{l}\n"));
                rccl.push_str(
                    "RCCL version : 2.28.3-gfx942-rccl:a188cf2\nHIP version  : 7.12.60430-713bdeef5b\n\
                     ROCm version : 7.12.0.2-9999-713bdeef5b\nHostname     : mi300-01\n",
                );
            }
            l => rccl.push_str(&format!("{l}\n")),
        }
    }
    let out = nccl_output::parse(rccl.as_bytes());
    assert_eq!(size_and_busbw(&out), size_and_busbw(&nccl));
    assert_eq!(out.library.as_deref(), Some("RCCL"));
    assert_eq!(out.rccl_version.as_deref(), Some("2.28.3"));
    assert_eq!(
        out.rocm_version.as_deref(),
        Some("7.12.0.2-9999-713bdeef5b")
    );
    assert_eq!(out.hip_version.as_deref(), Some("7.12.60430-713bdeef5b"));
    assert_eq!(
        out.nccl_tests_version.as_deref(),
        Some("2.17.9-develop:f220897c9b")
    );
    assert_eq!(out.nccl_library_version, Some(22803));
    assert!(out.completed());
    // The older form names only its build.
    let old = rccl.replace(
        "# rccl-tests version 2.17.9-develop:f220897c9b rccl-headers=22803 rccl-library=22803\n",
        "rccl-tests: Version develop:5272cd1\n",
    );
    let out = nccl_output::parse(old.as_bytes());
    assert_eq!(
        (out.library.as_deref(), out.nccl_tests_version.as_deref()),
        (Some("RCCL"), Some("develop:5272cd1"))
    );
}

/// The rows of a recorded table alone (the lines that start with a size): a bare table.
fn table_rows(text: &str) -> String {
    text.lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u64>().is_ok())
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Issue #33: the look-alike programs `import` refuses are told by lines only they print;
/// no nccl-tests or rccl-tests output of the fixtures (recorded here, by hand, or published
/// by others) is taken for one, and each published look-alike is.
#[test]
fn other_programs_are_told_from_every_nccl_tests_fixture() {
    let mut checked = 0;
    for dir in ["nccl-tests", "nccl-tests-handmade", "nccl-tests-published"] {
        let mut stack = vec![fixtures().join(dir)];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if name.ends_with(".md") || name.ends_with(".tsv") {
                    continue;
                }
                let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
                let seen = nccl_output::other_program(&text);
                if name.starts_with("not-nccl-tests-") {
                    assert!(seen.is_some(), "{name} was not recognised");
                } else {
                    assert_eq!(seen, None, "{}", path.display());
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 60, "{checked} files");
}

/// Two multi-process runs appended to one log are two runs; a process that ran `-g 2`
/// alone, twice, is the ran-alone fault (issue #33).
#[test]
fn appended_mpi_runs_are_separate_worlds_and_lone_processes_are_not() {
    let read =
        |rel: &str| std::fs::read_to_string(fixtures().join("nccl-tests").join(rel)).unwrap();
    let mpi = read("h200x2-mpirun/all_reduce_mpi_np2.txt");
    // The second job's processes have their own pids.
    let second = mpi
        .replace("Pid   2171", "Pid   3171")
        .replace("Pid   2172", "Pid   3172");
    let twice = nccl_output::parse(format!("{mpi}{second}").as_bytes());
    assert_eq!(twice.separate_worlds(), Some((2, 2)));
    assert_eq!(twice.ran_alone_evidence(), None);
    let alone = read("h200x2-nvlink/all_reduce_g2.txt");
    let twice = nccl_output::parse(format!("{alone}{alone}").as_bytes());
    assert_eq!(twice.separate_worlds(), None);
    assert!(twice.ran_alone_evidence().is_some());
    assert_eq!(nccl_output::parse(mpi.as_bytes()).separate_worlds(), None);
}
