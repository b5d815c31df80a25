//! `gpudirect report` end to end through the library: a history in a temp folder filled
//! from the recorded nccl-tests outputs, then the report written and its files checked
//! (PNG signature and size, SVG text, the HTML embedding them, replay labels).

use std::path::Path;

use gpudirect::checks::{judge, Expectations};
use gpudirect::history::{History, NewNodeResult, NewRun, RunId};
use gpudirect::nccl_output::parse;
use gpudirect::record::{new_run, RunContext, STANDIN_MARKER};
use gpudirect::report::{
    gather, heat_matrix, terminal_table, write_report, ReportData, ReportError, ReportFormat,
    ReportOptions, Selection, REPLAY_LABEL,
};
use gpudirect::validate::rails::record_of;
use gpudirect_wire::rails::RailMeasurement;

use crate::common;

fn fixture(rel: &str) -> Vec<u8> {
    let path = common::fixture(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A run as `gpudirect import` records it (parse, judge, map), at a chosen time.
fn run_from(raw: &[u8], variant: &str, at: i64, source: &str) -> NewRun {
    let parsed = parse(raw);
    let verdict = judge(&parsed, None, Some(0), &Expectations::default());
    let ctx = RunContext {
        variant: Some(variant.into()),
        started_at: Some(at),
        source_path: Some(source.into()),
        exit_code: Some(0),
        ..RunContext::default()
    };
    new_run(&parsed, raw, ctx, &verdict)
}

fn import(db: &mut History, rel: &str, variant: &str, at: i64) -> RunId {
    let run = run_from(&fixture(rel), variant, at, rel);
    db.import_run(&run, true).unwrap().run_id()
}

/// The same recording, as the nccl-tests stand-in prints it.
fn import_replay(db: &mut History, rel: &str, at: i64) -> RunId {
    let mut raw = format!("{STANDIN_MARKER}{rel} (recorded on 2xH200)\n").into_bytes();
    raw.extend(fixture(rel));
    let run = run_from(&raw, "nvlink", at, "standin");
    assert!(run.provenance.env.contains_key("GPUDIRECT_STANDIN_REPLAY"));
    db.import_run(&run, true).unwrap().run_id()
}

const T0: i64 = 1_795_000_000;

fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
    assert_eq!(&bytes[12..16], b"IHDR", "{}", path.display());
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

/// Asserts that the SVG of plot `stem` in `out` holds each of `texts`.
fn svg_with(out: &Path, stem: &str, texts: &[&str]) {
    let path = out.join(format!("{stem}.svg"));
    let svg = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for text in texts {
        assert!(svg.contains(text), "{stem}.svg lacks `{text}`");
    }
}

/// An empty history in `dir`.
fn new_history(dir: &Path) -> History {
    History::open(&dir.join("history.sqlite")).expect("create a history")
}

/// Report options that select exactly these runs, everything else as by default.
fn of_runs(ids: Vec<RunId>) -> ReportOptions {
    ReportOptions {
        selection: Selection::Runs(ids),
        ..ReportOptions::default()
    }
}

/// A history with clean and degraded all_reduce runs on one 2-GPU host, a replay, and a
/// pairwise validation run over six nodes where `n03` is slow.
fn history(dir: &Path) -> (History, Vec<RunId>) {
    let mut db = new_history(dir);
    let mut ids = Vec::new();
    for (i, rel) in [
        "h200x2-degraded/all_reduce_g2_clean.txt",
        "h200x2-nvlink/all_reduce_g2.txt",
        "h200x2-formats/cur_algo_ring.txt",
        "h200x2-degraded/all_reduce_g2_load_copy_gpu1.txt",
    ]
    .iter()
    .enumerate()
    {
        ids.push(import(&mut db, rel, "nvlink", T0 + 3600 * i as i64));
    }
    ids.push(import_replay(
        &mut db,
        "h200x2-nvlink/all_reduce_g2.txt",
        T0 + 5 * 3600,
    ));

    // Pairwise rounds over n01..n06 recorded with a real two-host output; n03 at 70 %.
    let mut pairs = run_from(
        &fixture("h200x2-twohost/all_reduce_2host_socket.txt"),
        "socket",
        T0 + 6 * 3600,
        "pairs",
    );
    let nodes: Vec<String> = (1..=6).map(|i| format!("n{i:02}")).collect();
    pairs.nodes = nodes.clone();
    pairs.node_count = Some(6);
    for a in 0..6 {
        for b in a + 1..6 {
            let slow = a == 2 || b == 2;
            pairs.node_results.push(NewNodeResult {
                node: nodes[a].clone(),
                role: Some("pair".into()),
                partner: Some(nodes[b].clone()),
                size_bytes: Some(1 << 30),
                busbw: Some(if slow { 2.3 } else { 3.3 }),
                verdict: Some(if slow { "slow" } else { "ok" }.into()),
            });
        }
    }
    ids.push(db.import_run(&pairs, true).unwrap().run_id());
    (db, ids)
}

#[test]
fn report_with_every_plot_in_both_formats() {
    let tmp = common::scratch("report", "both");
    let dir = tmp.path();
    let (db, ids) = history(dir);
    let opts = of_runs(ids.clone());
    let data = gather(&db, &opts).unwrap();
    assert_eq!(data.runs.len(), ids.len());
    let heat = data.heat.as_ref().expect("pairs make a heat map");
    assert_eq!(heat.nodes.len(), 6);
    assert_eq!(heat.slowest(1), ["n03"]);
    // The degraded run is a regression against the clean runs' baseline.
    assert_eq!(
        data.verdicts[3].verdict, "regression",
        "{:?}",
        data.verdicts[3]
    );
    // The same rule as `compare RUN --baseline`: the first run has no earlier run to be
    // judged against; the next clean one is ok against it.
    assert_eq!(
        data.verdicts[0].verdict, "no baseline",
        "{:?}",
        data.verdicts[0]
    );
    assert_eq!(data.verdicts[1].verdict, "ok", "{:?}", data.verdicts[1]);

    let out = dir.join("out");
    let files = write_report(&data, &out, ReportFormat::Both).unwrap();
    assert_eq!(files.html, out.join("index.html"));
    for stem in ["busbw", "heatmap", "node-trend"] {
        for ext in ["svg", "png"] {
            let p = out.join(format!("{stem}.{ext}"));
            assert!(files.images.contains(&p), "{} not listed", p.display());
            assert!(
                p.metadata().unwrap().len() > 1000,
                "{} is tiny",
                p.display()
            );
        }
    }
    assert_eq!(png_size(&out.join("busbw.png")), (1100, 650));
    let (w, h) = png_size(&out.join("heatmap.png"));
    assert!(w > 300 && h > 300, "{w}x{h}");

    svg_with(
        &out,
        "busbw",
        &[
            "message size (log2 scale)",
            "busbw (GB/s)",
            "8 B",
            "8 GiB",
            &format!("run {} all_reduce [nvlink], 1 node", ids[0]),
            "baseline all_reduce [nvlink], 1 node: median of 4 shown ok runs",
            &format!(
                "run {} all_reduce [nvlink], 1 node ({REPLAY_LABEL})",
                ids[4]
            ),
        ],
    );
    let heat_svg = std::fs::read_to_string(out.join("heatmap.svg")).unwrap();
    assert!(heat_svg.contains("n03") && heat_svg.contains("at 1 GiB"));
    let trend_svg = std::fs::read_to_string(out.join("node-trend.svg")).unwrap();
    assert!(
        trend_svg.contains("n03"),
        "the slowest node is followed over time"
    );

    let html = std::fs::read_to_string(&files.html).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg").count(), 3, "all three plots inlined");
    assert!(html.contains(REPLAY_LABEL));
    assert!(html.contains("regression"));
    assert!(html.contains("href=\"busbw.png\""));
    assert!(!html.contains("<?xml"));

    let table = terminal_table(&data);
    assert_eq!(
        table
            .lines()
            .filter(|l| l.contains("all_reduce") && !l.starts_with("note:"))
            .count(),
        ids.len()
    );
    assert!(table.contains(REPLAY_LABEL), "{table}");
    // The replay and the 6-node run have no other run of their kind: no baseline, said so.
    assert_eq!(data.verdicts[4].verdict, "no baseline");
    assert_eq!(table.matches("note: no baseline").count(), 2, "{table}");
}

#[test]
fn png_only_report_embeds_base64_and_last_n_selects_newest() {
    let tmp = common::scratch("report", "png");
    let dir = tmp.path();
    let (db, ids) = history(dir);
    let opts = ReportOptions {
        selection: Selection::Last {
            n: 2,
            collective: Some("all_reduce".into()),
        },
        ..ReportOptions::default()
    };
    let data = gather(&db, &opts).unwrap();
    let got: Vec<RunId> = data.runs.iter().map(|r| r.run_id).collect();
    assert_eq!(got, ids[ids.len() - 2..], "oldest first");
    let out = dir.join("out");
    let files = write_report(&data, &out, ReportFormat::Png).unwrap();
    assert!(files.images.iter().all(|p| p.extension().unwrap() == "png"));
    assert!(!out.join("busbw.svg").exists());
    let html = std::fs::read_to_string(&files.html).unwrap();
    assert!(
        html.contains("src=\"data:image/png;base64,iVBORw0KGgo"),
        "PNG embedded"
    );
    assert!(!html.contains("<svg"));
    assert!(
        html.contains(REPLAY_LABEL),
        "the replay is among the newest two"
    );
}

/// A run whose profile declared its NICs' line rate shows busbw also as a share of it in
/// the report's table (issue #18 item 5); one without shows `-`.
#[test]
fn the_verdict_table_gives_busbw_as_a_share_of_the_line_rate() {
    let tmp = common::scratch("report", "line-rate");
    let dir = tmp.path();
    let mut db = new_history(dir);
    let mut run = run_from(
        &fixture("h200x2-nvlink/all_reduce_g2.txt"),
        "nvlink",
        T0,
        "a",
    );
    run.line_rate_gbps = Some(400.0);
    let with = db.import_run(&run, true).unwrap().run_id();
    let without = import(
        &mut db,
        "h200x2-degraded/all_reduce_g2_clean.txt",
        "nvlink",
        T0 + 60,
    );
    let data = gather(&db, &of_runs(vec![with, without])).unwrap();
    let files = write_report(&data, &dir.join("out"), ReportFormat::Svg).unwrap();
    let html = std::fs::read_to_string(&files.html).unwrap();
    assert!(html.contains("<th>of line rate</th>"), "header");
    // 343.64 GB/s at 8 GiB of 400 GB/s.
    assert!(html.contains("<td class=\"num\">86%</td>"), "{html}");
}

#[test]
fn no_runs_is_a_clear_error() {
    let tmp = common::scratch("report", "empty");
    let dir = tmp.path();
    let db = new_history(dir);
    let opts = ReportOptions::default();
    let err = gather(&db, &opts).unwrap_err();
    assert!(matches!(err, ReportError::NoRuns { .. }), "{err}");
    assert!(err.to_string().contains("--runs"), "{err}");
    let none = of_runs(Vec::new());
    assert!(matches!(
        gather(&db, &none),
        Err(ReportError::NoRuns { .. })
    ));
    let missing = of_runs(vec![42]);
    let err = gather(&db, &missing).unwrap_err();
    assert!(err.to_string().contains("no run 42"), "{err}");
    let bad = ReportOptions {
        tolerance_pct: f64::NAN,
        ..ReportOptions::default()
    };
    assert!(gather(&db, &bad)
        .unwrap_err()
        .to_string()
        .contains("--tolerance"));
}

#[test]
fn odd_data_is_drawn_not_panicked_on() {
    let tmp = common::scratch("report", "odd");
    let dir = tmp.path();
    let mut db = new_history(dir);
    // NaN everywhere but one size, and a run of a single row.
    let mut nan = run_from(&fixture("h200x2-nvlink/all_reduce_g2.txt"), "x", T0, "nan");
    for (i, row) in nan.rows.iter_mut().enumerate() {
        if i != 40 {
            row.busbw = f64::NAN;
        }
    }
    let a = db.import_run(&nan, true).unwrap().run_id();
    let mut single = run_from(&fixture("h200x2-nvlink/all_reduce_g2.txt"), "x", T0, "one");
    single.rows.truncate(1);
    let b = db.import_run(&single, true).unwrap().run_id();
    let mut empty = run_from(&fixture("h200x2-nvlink/all_reduce_g2.txt"), "x", T0, "none");
    empty.rows.clear();
    let c = db.import_run(&empty, true).unwrap().run_id();
    for (k, ids) in [vec![a, b, c], vec![c], vec![b]].into_iter().enumerate() {
        let opts = of_runs(ids.clone());
        let data = gather(&db, &opts).unwrap();
        let out = dir.join(format!("out-{k}"));
        let files = write_report(&data, &out, ReportFormat::Both).unwrap();
        assert!(files.html.exists());
        png_size(&out.join("busbw.png"));
    }
}

#[test]
fn heat_map_of_500_nodes_thins_its_labels() {
    let tmp = common::scratch("report", "500");
    let dir = tmp.path();
    let names: Vec<String> = (0..500).map(|i| format!("gpu{i:03}")).collect();
    // Pairwise rounds' worth of pairs for a few partners each, one slow node.
    let mut triples = Vec::new();
    for i in 0..500 {
        for d in [1, 2, 250] {
            let j = (i + d) % 500;
            let v = if i == 123 || j == 123 { 28.0 } else { 40.0 };
            triples.push((names[i].as_str(), names[j].as_str(), v));
        }
    }
    let mut heat = heat_matrix(triples);
    heat.size_bytes = Some(1 << 30);
    let data = ReportData {
        heat: Some(heat),
        tolerance_pct: 5.0,
        ..ReportData::default()
    };
    let out = dir.join("out");
    let files = write_report(&data, &out, ReportFormat::Both).unwrap();
    assert_eq!(files.images.len(), 2, "only the heat map has data");
    let svg = std::fs::read_to_string(out.join("heatmap.svg")).unwrap();
    let labelled = names
        .iter()
        .filter(|n| svg.contains(&format!(">\n{n}\n<")) || svg.contains(&format!(">{n}<")))
        .count();
    assert!(
        labelled > 20 && labelled < 100,
        "{labelled} of 500 node labels drawn"
    );
    png_size(&out.join("heatmap.png"));
}

/// Rail runs as `validate --test rails` records them, on the pair map's own nodes: n01..n04
/// paired on eth1 and eth2, n03's eth2 sending at a tenth, and the pair n02-n04 on eth2
/// measuring nothing.
fn rail_runs(db: &mut History) -> Vec<RunId> {
    let mut ids = Vec::new();
    let pairs = [
        ["n01", "n02"],
        ["n03", "n04"],
        ["n01", "n03"],
        ["n02", "n04"],
    ];
    for (k, rail) in ["eth1", "eth2"].into_iter().enumerate() {
        for (i, pair) in pairs.iter().enumerate() {
            let base = NewRun {
                started_at: Some(T0 + 7 * 3600 + (k * 10 + i) as i64),
                ..NewRun::default()
            };
            let sent = |node: &str| {
                if rail == "eth2" && node == "n03" {
                    0.08
                } else {
                    0.8
                }
            };
            let m = RailMeasurement {
                gpudirect_rail: 1,
                rail: rail.into(),
                hosts: pair.map(String::from),
                size_bytes: 16 << 20,
                messages: 30,
                forward_gbps: sent(pair[0]),
                backward_gbps: sent(pair[1]),
                latency_us: 20.0,
            };
            let result = if rail == "eth2" && i == 3 {
                Err("n04: eth2 is down (operstate down)")
            } else {
                Ok(&m)
            };
            let run = record_of(base, rail, [pair[0], pair[1]], result);
            ids.push(db.import_run(&run, true).unwrap().run_id());
        }
    }
    ids
}

#[test]
fn rail_runs_get_their_own_node_x_rail_map() {
    let tmp = common::scratch("report", "rails");
    let dir = tmp.path();
    let (mut db, ids) = history(dir);
    let without_rails = gather(&db, &of_runs(ids.clone())).unwrap();
    assert_eq!(without_rails.rail_map, None);
    let rail_ids = rail_runs(&mut db);
    let only_rails = gather(&db, &of_runs(rail_ids.clone())).unwrap();
    assert_eq!(only_rails.heat, None, "rail pairs are no nccl-tests pairs");
    assert_eq!(only_rails.rail_map.as_ref().map(|m| m.nodes.len()), Some(4));
    let data = gather(&db, &of_runs([ids, rail_ids].concat())).unwrap();
    assert_eq!(
        data.heat, without_rails.heat,
        "rail results stay out of the pair heat map"
    );

    let map = data.rail_map.as_ref().expect("rail runs make a rail map");
    assert_eq!(map.nodes, ["n01", "n02", "n03", "n04"]);
    assert_eq!(map.rails, ["eth1", "eth2"]);
    assert_eq!(map.size_bytes, Some(16 << 20));
    assert_eq!(map.values[2], [Some(0.8), Some(0.08)], "n03's slow eth2");
    assert_eq!(map.values[3][1], Some(0.8), "n04 sent to n03 on eth2");
    assert_eq!(map.values[1][1], Some(0.8), "n02 sent to n01 on eth2");

    let out = dir.join("out");
    let files = write_report(&data, &out, ReportFormat::Both).unwrap();
    for ext in ["svg", "png"] {
        let p = out.join(format!("railmap.{ext}"));
        assert!(files.images.contains(&p), "{} not listed", p.display());
    }
    let (w, h) = png_size(&out.join("railmap.png"));
    assert!(w >= 640 && h > 300, "{w}x{h}");
    svg_with(
        &out,
        "railmap",
        &[
            "rail busbw sent at 16 MiB - 4 nodes x 2 rails",
            "eth2",
            "n03",
            "% of the rail&apos;s median",
        ],
    );
    let heat_svg = std::fs::read_to_string(out.join("heatmap.svg")).unwrap();
    assert!(!heat_svg.contains("eth2"));
    let html = std::fs::read_to_string(&files.html).unwrap();
    let heat_at = html
        .find("<section id=\"heatmap\">")
        .expect("heat map section");
    let rails_at = html
        .find("<section id=\"railmap\">")
        .expect("rail map section");
    assert!(heat_at < rails_at, "the rail map follows the heat map");
    assert!(html.contains("slow or dead NIC"));
}

/// The band the report draws rests on the runs its verdict does (design review P5, one
/// comparability key): an earlier run of another rank count is in neither, though it
/// shares the cluster, collective, node count, variant and data type.
#[test]
fn the_band_and_the_verdict_take_the_same_runs() {
    let tmp = common::scratch("report", "one-key");
    let mut db = new_history(tmp.path());
    let same = import(&mut db, "h200x2-nvlink/all_reduce_g2.txt", "nvlink", T0);
    let mut other = run_from(
        &fixture("h200x2-degraded/all_reduce_g2_clean.txt"),
        "nvlink",
        T0 + 60,
        "four-ranks",
    );
    other.total_ranks = Some(4);
    let other = db.import_run(&other, true).unwrap().run_id();
    let shown = import(
        &mut db,
        "h200x2-degraded/all_reduce_g2_load_copy_gpu1.txt",
        "nvlink",
        T0 + 120,
    );
    let data = gather(&db, &of_runs(vec![shown])).unwrap();
    assert_eq!(data.bands.len(), 1, "{:?}", data.bands);
    assert_eq!(data.bands[0].run_ids, [same], "not {other}");
    assert_eq!(data.verdicts.len(), 1);
    assert_eq!(data.verdicts[0].baseline_runs, [same]);
}
