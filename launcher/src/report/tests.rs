//! Unit tests of the report's pure parts, on recorded nccl-tests outputs where numbers
//! matter.

use super::*;
use crate::checks::{judge, Expectations};
use crate::nccl_output::parse;
use crate::record::{new_run, RunContext};

fn fixture_points(rel: &str) -> Vec<SizePoint> {
    let path = format!(
        "{}/../tests/fixtures/nccl-tests/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    let raw = std::fs::read(&path).unwrap();
    let parsed = parse(&raw);
    let verdict = judge(&parsed, None, Some(0), &Expectations::default());
    let run = new_run(&parsed, &raw, RunContext::default(), &verdict);
    run.rows
        .iter()
        .filter(|r| r.placement == Placement::Out)
        .map(|r| SizePoint {
            size_bytes: r.size_bytes,
            busbw: Some(r.busbw).filter(|b| b.is_finite()),
        })
        .collect()
}

fn series(id: RunId, points: Vec<SizePoint>) -> RunSeries {
    RunSeries {
        run_id: id,
        at: "2026-11-29T22:10:07Z".into(),
        cluster: None,
        collective: "all_reduce".into(),
        variant: Some("nvlink".into()),
        node_count: Some(1),
        total_ranks: Some(2),
        status: RunStatus::Ok,
        replay: None,
        dtype: "float".into(),
        line_rate_gbps: None,
        points,
    }
}

#[test]
fn baseline_is_the_per_size_median_and_skips_missing_values() {
    let a = [
        SizePoint {
            size_bytes: 8,
            busbw: Some(1.0),
        },
        SizePoint {
            size_bytes: 16,
            busbw: None,
        },
    ];
    let b = [SizePoint {
        size_bytes: 8,
        busbw: Some(3.0),
    }];
    let c = [SizePoint {
        size_bytes: 8,
        busbw: Some(f64::NAN),
    }];
    assert_eq!(baseline_points(&[&a, &b, &c]), vec![(8, 2.0)]);
    assert!(baseline_points(&[]).is_empty());
}

#[test]
fn heat_matrix_is_symmetric_natural_ordered_and_blank_where_unmeasured() {
    let triples = [
        ("gpu10", "gpu2", 40.0),
        ("gpu2", "gpu10", 44.0), // the other end of the same pair: median 42
        ("gpu1", "gpu2", 50.0),
        ("gpu1", "gpu1", 99.0), // a node with itself: ignored
        ("gpu3", "gpu1", f64::NAN),
    ];
    let h = heat_matrix(triples);
    assert_eq!(h.nodes, ["gpu1", "gpu2", "gpu3", "gpu10"]);
    let at = |a: usize, b: usize| h.values[a][b];
    assert_eq!(at(1, 3), Some(42.0));
    assert_eq!(at(3, 1), Some(42.0));
    assert_eq!(at(0, 1), Some(50.0));
    assert_eq!(at(0, 0), None);
    assert_eq!(at(2, 0), None, "NaN leaves the cell blank");
    assert_eq!(h.slowest(1), ["gpu10"]);
    assert_eq!(h.node_medians()[2], ("gpu3".to_string(), None));
    assert_eq!(heat_matrix(std::iter::empty()).nodes.len(), 0);
}

#[test]
fn heat_matrix_of_500_nodes() {
    let names: Vec<String> = (0..500).map(|i| format!("n{i:03}")).collect();
    let triples: Vec<(&str, &str, f64)> = (0..500)
        .step_by(2)
        .map(|i| {
            (
                names[i].as_str(),
                names[i + 1].as_str(),
                40.0 + i as f64 * 0.01,
            )
        })
        .collect();
    let h = heat_matrix(triples);
    assert_eq!(h.nodes.len(), 500);
    assert_eq!(h.values.len(), 500);
    assert_eq!(h.values[0][1], Some(40.0));
    assert_eq!(h.values.iter().flatten().flatten().count(), 500);
}

#[test]
fn heat_triples_take_pairs_at_the_largest_size() {
    let r = |node: &str, partner: Option<&str>, size: Option<u64>, busbw: Option<f64>| NodeResult {
        node: node.into(),
        role: Some("pair".into()),
        partner: partner.map(Into::into),
        size_bytes: size,
        busbw,
        verdict: None,
    };
    let results = [
        r("a", Some("b"), Some(1 << 20), Some(10.0)),
        r("a", Some("b"), Some(1 << 30), Some(40.0)),
        r("c", None, Some(1 << 30), Some(41.0)),
        r("c", Some("d"), None, Some(39.0)),
        r("e", Some("f"), Some(1 << 30), Some(f64::NAN)),
    ];
    let (triples, size) = heat_triples(&results);
    assert_eq!(size, Some(1 << 30));
    assert_eq!(
        triples,
        [
            ("a".to_string(), "b".to_string(), 40.0),
            ("c".to_string(), "d".to_string(), 39.0)
        ]
    );
}

#[test]
fn rail_map_is_what_each_node_sent_per_rail_at_the_largest_size() {
    let r = |node: &str, role: &str, size: Option<u64>, busbw: Option<f64>| NodeResult {
        node: node.into(),
        role: Some(role.into()),
        partner: Some("other".into()),
        size_bytes: size,
        busbw,
        verdict: None,
    };
    const MIB16: u64 = 16 << 20;
    let results = [
        r("n10", "rail eth2 send", Some(MIB16), Some(0.80)),
        r("n2", "rail eth2 send", Some(MIB16), Some(0.70)),
        r("n2", "rail eth2 send", Some(MIB16), Some(0.90)), // a second partner: median 0.8
        r("n2", "rail eth10 send", Some(MIB16), Some(0.02)), // a slow NIC
        r("n2", "rail eth2 send", Some(1 << 20), Some(5.0)), // a smaller size: not drawn
        r("n10", "rail eth10 send", Some(1 << 20), Some(0.75)), // only there: blank
        // A pair on eth10 that measured nothing: n3 gets a row, blank.
        r("n3", "rail eth10", None, None),
        r("n2", "rail eth2 send", Some(MIB16), Some(f64::NAN)),
        // Not a rail result: ignored.
        r("n1", "pair", Some(MIB16), Some(40.0)),
    ];
    let map = rail_map(&results).expect("rail results make a map");
    assert_eq!(map.nodes, ["n2", "n3", "n10"]);
    assert_eq!(map.rails, ["eth2", "eth10"]);
    assert_eq!(map.size_bytes, Some(MIB16));
    assert_eq!(
        map.values,
        [
            vec![Some(0.8), Some(0.02)],
            vec![None, None],
            vec![Some(0.8), None],
        ]
    );
    assert_eq!(map.reference(), Some(0.8));
    assert_eq!(rail_map(&results[8..]), None, "no rail, no map");
    assert_eq!(rail_of_role("rail eth2 send"), Some(("eth2", true)));
    assert_eq!(rail_of_role("rail eth2"), Some(("eth2", false)));
    assert_eq!(rail_of_role("rail "), None);
    assert_eq!(rail_of_role("pair"), None);
}

#[test]
fn natural_order_of_node_names() {
    let mut v = vec!["gpu10", "gpu2", "gpu1", "a3h-002", "a3h-010", "gpu02", ""];
    v.sort_by(|a, b| natural_cmp(a, b));
    assert_eq!(
        v,
        ["", "a3h-002", "a3h-010", "gpu1", "gpu2", "gpu02", "gpu10"]
    );
    assert_eq!(natural_cmp("nodé2", "nodé10"), Ordering::Less);
}

#[test]
fn labels_and_table_carry_the_replay_label() {
    let mut run = series(7, fixture_points("h200x2-nvlink/all_reduce_g2.txt"));
    run.replay = Some("h200x2-nvlink/all_reduce_g2.txt".into());
    assert!(run.label().contains(REPLAY_LABEL), "{}", run.label());
    assert!(run.label().starts_with("run 7 all_reduce [nvlink], 1 node"));
    let data = ReportData {
        verdicts: vec![crate::baseline::run_verdict(
            run.run_id,
            run.status,
            run.at_largest_size(),
            None,
        )],
        runs: vec![run],
        tolerance_pct: 5.0,
        notes: vec!["no baseline".into()],
        ..ReportData::default()
    };
    assert!(data.has_replays());
    let table = terminal_table(&data);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("run  when"), "{table}");
    assert!(
        lines[1].contains("8 GiB") && lines[1].contains(REPLAY_LABEL),
        "{table}"
    );
    assert!(lines[1].contains("no baseline"), "{table}");
    assert!(table.contains("note: no baseline"), "{table}");
    // Columns line up: the header's `size` column ends where the row's size ends.
    let col_end = |l: &str, word: &str| l.find(word).map(|i| i + word.len());
    assert_eq!(
        col_end(lines[0], "size"),
        col_end(lines[1], "8 GiB"),
        "{table}"
    );
}

#[test]
fn terminal_table_of_nothing_is_just_the_header() {
    let t = terminal_table(&ReportData::default());
    assert_eq!(t.lines().count(), 2, "{t}");
}

#[test]
fn format_names() {
    assert_eq!("png".parse::<ReportFormat>(), Ok(ReportFormat::Png));
    assert_eq!("both".parse::<ReportFormat>(), Ok(ReportFormat::Both));
    assert!("jpeg"
        .parse::<ReportFormat>()
        .unwrap_err()
        .contains("png, svg or both"));
    assert!(ReportFormat::Both.png() && ReportFormat::Both.svg());
    assert!(!ReportFormat::Svg.png());
}
