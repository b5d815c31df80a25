//! The `-J file.json` form (nccl-tests 2.17+, report `version` 3 in 2.19).
//!
//! Shape, as nccl-tests writes it (`src/util.cu`):
//!
//! ```text
//! { "version": 3, "start_time": "...", "args": [...], "env": [...], "nccl_version": 22809,
//!   "config": { "nthreads", "ngpus", "minimum_bytes", "maximum_bytes",
//!               "step_factor" | "step_bytes", "warmup_iters", "iterations",
//!               "aggregated_iterations", "validation", "graph", ...,
//!               "devices": [ {rank, group, pid, hostname, device, device_hex, device_info} ] },
//!   "results": [ { "size", "count", "type", "redop", "root": "    -1",
//!                  "out_of_place": {"time" | "cpu_time", "alg_bw", "bus_bw", "nwrong"} | null,
//!                  "in_place": {...}, "out_of_place_per_iter": {...}, ... } ],
//!   "out_of_bounds": {"count", "okay": "true"},
//!   "average_bus_bandwidth": {"bandwidth", "okay": "unchecked" | "true" | "false"},
//!   "errors": [...], "end_time": "..." }
//! ```
//!
//! Quirks handled: booleans are the strings `"true"`/`"false"`; NaN is the string `"nan"`
//! and infinity is written bare (`inf`, invalid JSON); `devices` holds one entry per
//! *process* (the first rank line of each), so a one-process `-g 2` run lists one device;
//! a killed run leaves the file cut short. Every field is optional; unknown fields are kept
//! as extras.

use serde_json::{Map, Value};

use super::failure::{Failure, FailureKind};
use super::text::wrong_count;
use super::{
    AvgBusBw, Diagnostic, JsonMeta, MinBwCheck, OutOfBounds, ParsedOutput, Placement, RankInfo,
    Row, RunParams, SourceFormat, Step, StepKind, TableHeader, TimeKind,
};

pub(crate) fn parse_json_str(input: &str) -> ParsedOutput {
    let mut out = ParsedOutput {
        format: Some(SourceFormat::Json),
        ..Default::default()
    };
    let mut truncated = false;
    let value = match serde_json::from_str::<Value>(input) {
        Ok(v) => v,
        Err(first) => {
            let fixed = quote_bare_non_finite(input);
            match serde_json::from_str::<Value>(&fixed) {
                Ok(v) => v,
                Err(_) => match salvage(&fixed) {
                    Some((v, upto)) => {
                        truncated = true;
                        out.diagnostics.push(Diagnostic {
                            line: first.line(),
                            reason: format!(
                                "the JSON is incomplete ({first}); read the first {upto} bytes"
                            ),
                        });
                        v
                    }
                    None => {
                        out.diagnostics.push(Diagnostic {
                            line: first.line(),
                            reason: format!("not readable as JSON: {first}"),
                        });
                        return out;
                    }
                },
            }
        }
    };
    let Value::Object(top) = value else {
        out.diagnostics.push(Diagnostic {
            line: 0,
            reason: "the JSON is not an object; expected an nccl-tests `-J` report".into(),
        });
        return out;
    };
    let mut r = Reader { out };
    r.top(&top, truncated);
    r.out
}

struct Reader {
    out: ParsedOutput,
}

fn as_str(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn as_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
        Value::Number(n) => n.as_i64().map(|i| i != 0),
        _ => None,
    }
}

/// The JSON text of a value, without quotes for strings.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Reader {
    fn diag(&mut self, reason: String) {
        self.out.diagnostics.push(Diagnostic { line: 0, reason });
    }

    /// A non-negative integer: JSON integer, integral float, or numeric string.
    fn u64_of(&mut self, field: &str, v: &Value) -> Option<u64> {
        let r = match v {
            Value::Null => return None,
            Value::Number(n) => match n.as_u64() {
                Some(u) => Ok(u),
                None => n
                    .as_f64()
                    .ok_or_else(|| format!("{n} is not a number"))
                    .and_then(wrong_count),
            },
            Value::String(s) => super::text::parse_u64(s.trim()),
            other => Err(format!("{} is not a number", clip(&other.to_string()))),
        };
        match r {
            Ok(u) => Some(u),
            Err(e) => {
                self.diag(format!("`{field}`: {e}"));
                None
            }
        }
    }

    fn u32_of(&mut self, field: &str, v: &Value) -> Option<u32> {
        let u = self.u64_of(field, v)?;
        match u32::try_from(u) {
            Ok(x) => Some(x),
            Err(_) => {
                self.diag(format!("`{field}`: {u} is larger than 2^32-1"));
                None
            }
        }
    }

    fn f64_of(&mut self, field: &str, v: &Value) -> Option<f64> {
        let r = match v {
            Value::Null => return None,
            Value::Number(n) => n.as_f64().ok_or_else(|| format!("{n} is not a float")),
            Value::String(s) => match super::text::parse_f64(s.trim()) {
                Ok(None) => return None,
                Ok(Some(f)) => Ok(f),
                Err(e) => Err(e),
            },
            other => Err(format!("{} is not a number", clip(&other.to_string()))),
        };
        match r {
            Ok(f) if f.is_nan() => None,
            Ok(f) => Some(f),
            Err(e) => {
                self.diag(format!("`{field}`: {e}"));
                None
            }
        }
    }

    fn top(&mut self, top: &Map<String, Value>, truncated: bool) {
        let mut meta = JsonMeta {
            truncated,
            ..Default::default()
        };
        if let Some(v) = top.get("version") {
            meta.version = v.as_i64();
        }
        meta.start_time = top.get("start_time").and_then(as_str);
        meta.end_time = top.get("end_time").and_then(as_str);
        if let Some(Value::Array(a)) = top.get("args") {
            meta.args = a.iter().filter_map(as_str).collect();
        }
        if let Some(Value::Array(a)) = top.get("env") {
            meta.env = a.iter().filter_map(as_str).collect();
        }
        if let Some(prog) = meta.args.first() {
            let base = prog.rsplit('/').next().unwrap_or(prog);
            if !base.is_empty() {
                self.out.program = Some(base.to_string());
                self.out.collective = Some(super::normalize_collective(base));
            }
        }
        if let Some(v) = top.get("nccl_version") {
            self.out.nccl_library_version = self.u32_of("nccl_version", v);
        }
        self.out.json_meta = Some(meta);

        match top.get("config") {
            Some(Value::Object(cfg)) => self.config(cfg),
            Some(_) => self.diag("`config` is not an object".into()),
            None => {}
        }
        let mut time_kind = TimeKind::Latency;
        match top.get("results") {
            Some(Value::Array(results)) => {
                for (i, r) in results.iter().enumerate() {
                    match r {
                        Value::Object(o) => {
                            if let Some(row) = self.result(o, &mut time_kind) {
                                self.out.rows.push(row);
                            }
                        }
                        _ => self.diag(format!("`results[{i}]` is not an object")),
                    }
                }
                let place = |t: &'static str| [t, "algbw", "busbw", "#wrong"];
                let t = match time_kind {
                    TimeKind::Latency => "time",
                    TimeKind::CpuTime => "cputime",
                };
                let mut columns: Vec<String> = ["size", "count", "type", "redop", "root"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                columns.extend(place(t).iter().map(|s| s.to_string()));
                columns.extend(place(t).iter().map(|s| s.to_string()));
                self.out.tables.push(TableHeader {
                    line: 0,
                    columns,
                    time_kind,
                });
            }
            Some(_) => self.diag("`results` is not a list".into()),
            None => {}
        }
        if let Some(Value::Object(o)) = top.get("out_of_bounds") {
            let count = o
                .get("count")
                .and_then(|v| self.u64_of("out_of_bounds.count", v));
            let ok = o.get("okay").and_then(as_bool);
            if let Some(count) = count {
                let ok = ok.unwrap_or(count == 0);
                if !ok {
                    self.out.failures.push(Failure::new(
                        FailureKind::OutOfBounds,
                        &format!("out_of_bounds: {count} values"),
                        0,
                    ));
                }
                self.out.out_of_bounds = Some(OutOfBounds { count, ok, line: 0 });
            }
        }
        if let Some(Value::Object(o)) = top.get("average_bus_bandwidth") {
            let value = o
                .get("bandwidth")
                .and_then(|v| self.f64_of("average_bus_bandwidth.bandwidth", v));
            let min_bw_check = match o.get("okay") {
                Some(Value::String(s)) if s == "unchecked" => MinBwCheck::Unchecked,
                Some(v) => match as_bool(v) {
                    Some(true) => MinBwCheck::Passed,
                    Some(false) => MinBwCheck::Failed,
                    None => MinBwCheck::Unchecked,
                },
                None => MinBwCheck::Unchecked,
            };
            if min_bw_check == MinBwCheck::Failed {
                self.out.failures.push(Failure::new(
                    FailureKind::BelowMinBandwidth,
                    &format!(
                        "average_bus_bandwidth: {} below NCCL_TESTS_MIN_BW",
                        value.map_or("?".to_string(), |v| v.to_string())
                    ),
                    0,
                ));
            }
            self.out.avg_busbw = Some(AvgBusBw {
                value,
                min_bw_check,
                line: 0,
            });
        }
        if let Some(Value::Array(errs)) = top.get("errors") {
            for e in errs.iter().filter_map(as_str) {
                let e = e.trim();
                if e.is_empty() {
                    continue;
                }
                self.out
                    .failures
                    .push(Failure::new(FailureKind::ReportedError, e, 0));
                self.out.reported_errors.push(e.to_string());
            }
        }
    }

    fn config(&mut self, cfg: &Map<String, Value>) {
        let mut p = RunParams::default();
        for (k, v) in cfg {
            match k.as_str() {
                "nthreads" => p.n_threads = self.u32_of(k, v),
                "ngpus" => p.n_gpus = self.u32_of(k, v),
                "minimum_bytes" => p.min_bytes = self.u64_of(k, v),
                "maximum_bytes" => p.max_bytes = self.u64_of(k, v),
                "step_factor" => {
                    p.step = self.u64_of(k, v).map(|value| Step {
                        value,
                        kind: StepKind::Factor,
                    })
                }
                "step_bytes" => {
                    p.step = self.u64_of(k, v).map(|value| Step {
                        value,
                        kind: StepKind::Increment,
                    })
                }
                "warmup_iters" => p.warmup_iters = self.u32_of(k, v),
                "iterations" => p.iters = self.u32_of(k, v),
                "aggregated_iterations" => p.agg_iters = self.u32_of(k, v),
                "validation" => p.validation = self.u32_of(k, v),
                "graph" => p.graph = self.u32_of(k, v),
                "unalign" => p.unalign = self.u32_of(k, v),
                "devices" => match v {
                    Value::Array(devs) => {
                        for d in devs {
                            if let Value::Object(d) = d {
                                self.device(d);
                            }
                        }
                    }
                    _ => self.diag("`config.devices` is not a list".into()),
                },
                _ => {
                    p.other.insert(k.clone(), plain(v));
                }
            }
        }
        self.out.params = Some(p);
    }

    fn device(&mut self, d: &Map<String, Value>) {
        let Some(rank) = d.get("rank").and_then(|v| self.u32_of("devices.rank", v)) else {
            self.diag("a `config.devices` entry without a rank; ignored".into());
            return;
        };
        let info = RankInfo {
            rank,
            group: d.get("group").and_then(|v| self.u32_of("devices.group", v)),
            pid: d.get("pid").and_then(|v| self.u32_of("devices.pid", v)),
            host: d.get("hostname").and_then(as_str),
            device: d
                .get("device")
                .and_then(|v| self.u32_of("devices.device", v)),
            bus_id: d.get("device_hex").and_then(as_str),
            gpu_name: d.get("device_info").and_then(as_str),
            line: 0,
        };
        self.out.ranks.push(info);
    }

    fn result(&mut self, o: &Map<String, Value>, time_kind: &mut TimeKind) -> Option<Row> {
        let Some(size) = o.get("size").and_then(|v| self.u64_of("results.size", v)) else {
            self.diag("a result without a readable `size`; ignored".into());
            return None;
        };
        let mut row = Row {
            size_bytes: size,
            ..Default::default()
        };
        for (k, v) in o {
            match k.as_str() {
                "size" => {}
                "count" => row.count = self.u64_of("results.count", v),
                "type" => row.dtype = as_str(v).filter(|s| !s.trim().is_empty()),
                "redop" => {
                    row.redop = as_str(v)
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                }
                "root" => {
                    row.root = match v {
                        Value::Number(n) => n.as_i64(),
                        Value::String(s) => s.trim().parse().ok(),
                        _ => None,
                    }
                }
                "out_of_place" | "in_place" => {
                    let p = match v {
                        Value::Object(po) => Some(self.placement(po, time_kind)),
                        _ => None,
                    };
                    if k == "out_of_place" {
                        row.out_of_place = p.or(row.out_of_place.take());
                    } else {
                        row.in_place = p.or(row.in_place.take());
                    }
                }
                "out_of_place_per_iter" | "in_place_per_iter" => {
                    let target = if k == "out_of_place_per_iter" {
                        row.out_of_place.get_or_insert_with(Placement::default)
                    } else {
                        row.in_place.get_or_insert_with(Placement::default)
                    };
                    target.extra.insert("per_iter".into(), v.clone());
                }
                _ => {
                    row.extra.insert(k.clone(), v.clone());
                }
            }
        }
        Some(row)
    }

    fn placement(&mut self, o: &Map<String, Value>, time_kind: &mut TimeKind) -> Placement {
        let mut p = Placement::default();
        for (k, v) in o {
            match k.as_str() {
                "time" => p.time_us = self.f64_of("time", v),
                "cpu_time" => {
                    *time_kind = TimeKind::CpuTime;
                    p.time_us = self.f64_of("cpu_time", v);
                }
                "alg_bw" => p.algbw_gbps = self.f64_of("alg_bw", v),
                "bus_bw" => p.busbw_gbps = self.f64_of("bus_bw", v),
                "nwrong" => {
                    p.wrong = match self.f64_of("nwrong", v) {
                        Some(f) => match wrong_count(f) {
                            Ok(u) => Some(u),
                            Err(e) => {
                                self.diag(format!("`nwrong`: {e}"));
                                None
                            }
                        },
                        None => None,
                    }
                }
                _ => {
                    p.extra.insert(k.clone(), v.clone());
                }
            }
        }
        p
    }
}

fn clip(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Where a byte scanner stands relative to JSON strings. Fed every byte in order, it says
/// which bytes belong to a string (its quotes included), where brackets and bare words
/// mean nothing.
#[derive(Default)]
struct JsonStrings {
    in_str: bool,
    esc: bool,
}

impl JsonStrings {
    /// Feeds byte `c`; true when it belongs to a string.
    fn in_string(&mut self, c: u8) -> bool {
        if self.in_str {
            if self.esc {
                self.esc = false;
            } else if c == b'\\' {
                self.esc = true;
            } else if c == b'"' {
                self.in_str = false;
            }
            true
        } else {
            self.in_str = c == b'"';
            self.in_str
        }
    }
}

/// nccl-tests prints infinities with `%lf`, which writes bare `inf`/`-inf` (and on some
/// libcs `nan`): quote them so the document parses.
fn quote_bare_non_finite(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len() + 16);
    let mut strings = JsonStrings::default();
    let mut last = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if strings.in_string(c) {
            i += 1;
            continue;
        }
        let word_start = i;
        let neg = c == b'-';
        let j = if neg { i + 1 } else { i };
        let rest = &b[j..];
        let len = if rest.len() >= 8 && rest[..8].eq_ignore_ascii_case(b"infinity") {
            8
        } else if rest.len() >= 3
            && (rest[..3].eq_ignore_ascii_case(b"inf") || rest[..3].eq_ignore_ascii_case(b"nan"))
        {
            3
        } else {
            0
        };
        if len > 0 {
            let end = j + len;
            // Both ends are ASCII, so these are char boundaries.
            out.push_str(&s[last..word_start]);
            out.push('"');
            out.push_str(&s[word_start..end]);
            out.push('"');
            last = end;
            i = end;
            continue;
        }
        i += 1;
    }
    out.push_str(&s[last..]);
    out
}

/// Read a JSON document cut short: find the last place where a container closed, cut
/// there, and close the containers still open. Returns the value and the bytes used.
fn salvage(s: &str) -> Option<(Value, usize)> {
    const MAX_DEPTH: usize = 256;
    const KEEP: usize = 8;
    let b = s.as_bytes();
    let mut stack: Vec<u8> = Vec::new();
    let mut strings = JsonStrings::default();
    // Ring of the last KEEP cut points: (cut position, closers needed).
    let mut cuts: Vec<(usize, Vec<u8>)> = Vec::with_capacity(KEEP);
    for (i, &c) in b.iter().enumerate() {
        if strings.in_string(c) {
            continue;
        }
        match c {
            b'{' | b'[' => {
                if stack.len() >= MAX_DEPTH {
                    return None;
                }
                stack.push(c);
            }
            b'}' | b']' => {
                stack.pop();
                if stack.is_empty() {
                    // A complete document ended here; anything after it is the problem.
                    cuts.clear();
                }
                if cuts.len() == KEEP {
                    cuts.remove(0);
                }
                cuts.push((i + 1, stack.clone()));
            }
            _ => {}
        }
    }
    // Prefer the shallowest cut (a whole result rather than half of one), latest first.
    cuts.sort_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(&a.0)));
    for (cut, open) in cuts {
        let mut doc = String::with_capacity(cut + open.len());
        doc.push_str(s.get(..cut)?);
        for o in open.iter().rev() {
            doc.push(if *o == b'{' { '}' } else { ']' });
        }
        if let Ok(v) = serde_json::from_str::<Value>(&doc) {
            return Some((v, cut));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_bare_infinity_outside_strings() {
        let s = r#"{"a": inf, "b": -inf, "c": "inf", "d": nan}"#;
        let q = quote_bare_non_finite(s);
        assert_eq!(q, r#"{"a": "inf", "b": "-inf", "c": "inf", "d": "nan"}"#);
        let v: Value = serde_json::from_str(&q).unwrap();
        assert_eq!(v["b"], "-inf");
    }

    #[test]
    fn salvages_a_cut_report() {
        let s = r#"{"version": 3, "results": [{"size": 8, "out_of_place": {"time": 1.0}}, {"size": 16, "out_of"#;
        let (v, upto) = salvage(s).unwrap();
        assert_eq!(v["results"].as_array().unwrap().len(), 1);
        assert!(upto < s.len());
        let out = parse_json_str(s);
        assert_eq!(out.rows.len(), 1);
        assert!(out.json_meta.unwrap().truncated);
        assert_eq!(out.diagnostics.len(), 1);
    }

    #[test]
    fn tolerates_missing_and_odd_fields() {
        let s = r#"{"results": [{"size": "1024", "root": 0, "in_place": {"bus_bw": "nan", "nwrong": null, "new": 1}}, {"count": 3}],
                    "average_bus_bandwidth": {"bandwidth": 1.5, "okay": false}, "errors": ["", "boom"]}"#;
        let out = parse_json_str(s);
        assert_eq!(out.rows.len(), 1);
        let r = &out.rows[0];
        assert_eq!(r.size_bytes, 1024);
        assert_eq!(r.root, Some(0));
        let ip = r.in_place.as_ref().unwrap();
        assert_eq!(ip.busbw_gbps, None);
        assert_eq!(ip.extra["new"], 1);
        assert_eq!(
            out.avg_busbw.as_ref().unwrap().min_bw_check,
            MinBwCheck::Failed
        );
        assert_eq!(out.reported_errors, vec!["boom".to_string()]);
        assert_eq!(out.failures.len(), 2);
        assert_eq!(out.diagnostics.len(), 1, "{:?}", out.diagnostics);
    }

    #[test]
    fn huge_numbers_are_diagnostics() {
        let s = r#"{"results": [{"size": 1e400}, {"size": 99999999999999999999999, "count": -5}]}"#;
        let out = parse_json_str(s);
        // 1e400 is not representable; serde_json rejects it, so nothing is read.
        assert!(out.rows.is_empty());
        assert!(!out.diagnostics.is_empty());
    }
}
