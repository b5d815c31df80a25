//! The text form: `#` header lines, a two-line column header, rows, a `#` footer, with
//! NCCL debug lines, launcher prefixes and failure banners anywhere in between.
//!
//! Columns are identified by the names in the header (`size`, `count`, `type`, `redop`,
//! `root`, then per placement `time`/`cputime`, `algbw`, `busbw`, `#wrong`/`error`,
//! `i_*`, and `timestamp`), and which block is out-of-place or in-place by the group line
//! above the names. A row is matched to the columns in order when it has one value per
//! column; otherwise each value goes to the column whose name ends where the value ends
//! (nccl-tests right-aligns both with the same widths), found by a small alignment so that
//! blank cells (hypercube's empty `redop`, a blank out-of-place block) are skipped.

use super::failure::{classify_line, mpi_banner_exit_code, Failure, FailureKind};
use super::transport::{parse_debug_line, DebugCollector};
use super::{
    AvgBusBw, Diagnostic, MinBwCheck, OutOfBounds, ParsedOutput, Placement, PlacementKind,
    RankInfo, RunParams, SourceFormat, Step, StepKind, TableHeader, TimeKind,
};

/// Which field of a placement a column fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Time,
    Algbw,
    Busbw,
    Wrong,
    Error,
    Extra,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Size,
    Count,
    Type,
    Redop,
    Root,
    Place(PlacementKind, Field),
    RowExtra,
}

#[derive(Debug, Clone)]
struct Col {
    name: String,
    end: usize,
    role: Role,
}

#[derive(Debug, Clone)]
struct Layout {
    cols: Vec<Col>,
    table: usize,
}

/// A whitespace-separated token with its byte span in the line.
#[derive(Debug, Clone, Copy)]
struct Tok<'a> {
    start: usize,
    end: usize,
    text: &'a str,
}

fn tokenize(line: &str) -> Vec<Tok<'_>> {
    let mut toks = Vec::new();
    let mut start: Option<usize> = None;
    for (i, c) in line.char_indices() {
        if c.is_whitespace() {
            if let Some(s) = start.take() {
                toks.push(Tok {
                    start: s,
                    end: i,
                    text: &line[s..i],
                });
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        toks.push(Tok {
            start: s,
            end: line.len(),
            text: &line[s..],
        });
    }
    toks
}

/// Remove what launchers put before each line: Open MPI's `--tag-output`
/// (`[1,0]<stdout>:`) and srun's `--label` (`0: `).
fn strip_launcher_prefix(line: &str) -> &str {
    if line.starts_with('[') {
        if let Some(i) = line.find(">:") {
            if line[..i].contains("]<std") {
                let rest = &line[i + 2..];
                return rest.strip_prefix(' ').unwrap_or(rest);
            }
        }
    }
    let trimmed = line.trim_start();
    let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && trimmed[digits..].starts_with(": ") {
        return &trimmed[digits + 2..];
    }
    line
}

#[derive(Default)]
struct TextParser {
    out: ParsedOutput,
    layout: Option<Layout>,
    /// Placement labels of the last group line, in order of position.
    pending_groups: Vec<PlacementKind>,
    debug: DebugCollector,
    last_mpi_abort: Option<usize>,
}

pub(crate) fn parse_text_str(input: &str) -> ParsedOutput {
    let mut p = TextParser::default();
    p.out.format = Some(SourceFormat::Text);
    for (i, raw) in input.split('\n').enumerate() {
        p.line(raw, i + 1);
    }
    p.finish()
}

impl TextParser {
    fn diag(&mut self, line: usize, reason: impl Into<String>) {
        self.out.diagnostics.push(Diagnostic {
            line,
            reason: reason.into(),
        });
    }

    fn finish(mut self) -> ParsedOutput {
        self.out.debug = self.debug.finish();
        self.out
    }

    fn line(&mut self, raw: &str, n: usize) {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        let line = strip_launcher_prefix(raw);
        if let Some(d) = parse_debug_line(line) {
            self.debug.add(&d, n);
            // A row glued to a debug line by interleaved output: keep the row part.
            if let Some(first) = d.prefix.split_whitespace().next() {
                if first.parse::<u64>().is_ok() && self.layout.is_some() {
                    self.row(d.prefix, n);
                }
            }
            return;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return;
        }
        if trimmed.starts_with('#') {
            self.comment(line, n);
            return;
        }
        let toks = tokenize(line);
        let first_is_uint = toks
            .first()
            .is_some_and(|t| !t.text.is_empty() && t.text.bytes().all(|b| b.is_ascii_digit()));
        if first_is_uint && toks.len() >= 4 {
            if self.layout.is_some() {
                self.row(line, n);
            } else {
                self.diag(n, "a table row before any column header; ignored");
            }
            return;
        }
        if let Some(code) = mpi_banner_exit_code(line) {
            if let Some(i) = self.last_mpi_abort {
                if let Some(f) = self.out.failures.get_mut(i) {
                    f.exit_code = f.exit_code.or(Some(code));
                }
            }
            return;
        }
        if let Some(f) = classify_line(line, n) {
            if f.kind == FailureKind::MpiAbort {
                self.last_mpi_abort = Some(self.out.failures.len());
            }
            self.out.failures.push(f);
        }
    }

    fn comment(&mut self, line: &str, n: usize) {
        let hash = line.find('#').unwrap_or(0);
        let body = line[hash + 1..].trim();
        if body.is_empty() {
            return;
        }
        if let Some(rest) = body.strip_prefix("nccl-tests version ") {
            self.version_line(rest);
        } else if let Some(rest) = body.strip_prefix("Collective test starting:") {
            let prog = rest.trim();
            if !prog.is_empty() {
                self.out.program = Some(prog.to_string());
                self.out.collective = Some(super::normalize_collective(prog));
            }
        } else if let Some(rest) = body.strip_prefix("Collective test concluded:") {
            let prog = rest.trim();
            if self.out.program.is_none() && !prog.is_empty() {
                self.out.program = Some(prog.to_string());
                self.out.collective = Some(super::normalize_collective(prog));
            }
        } else if body.starts_with("nThread ") {
            self.params_line(body, n);
        } else if body == "Using devices" {
        } else if body.starts_with("Rank ") {
            self.rank_line(body, n);
        } else if body.contains("out-of-place") || body.contains("in-place") {
            self.pending_groups = group_labels(body);
        } else if is_names_line(line) {
            self.header(line, n);
        } else if body.contains("(B)") || body.contains("(elements)") {
            // Units line under the names: nothing to keep.
        } else if let Some(rest) = body.strip_prefix("Out of bounds values") {
            self.out_of_bounds(rest, n);
        } else if let Some(rest) = body.strip_prefix("Avg bus bandwidth") {
            self.avg_busbw(rest, n);
        } else if let Some(path) = body.strip_prefix("Writing JSON output to ") {
            self.out.json_output_path = Some(path.trim().to_string());
        } else if let Some(err) = body.strip_prefix("error:") {
            let err = err.trim().to_string();
            let mut f = Failure::new(FailureKind::ReportedError, line, n);
            f.text = body.to_string();
            self.out.failures.push(f);
            self.out.reported_errors.push(err);
        } else {
            self.out.notes.push(body.to_string());
        }
    }

    fn version_line(&mut self, rest: &str) {
        let mut words = rest.split_whitespace();
        if let Some(v) = words.next() {
            self.out.nccl_tests_version = Some(v.to_string());
        }
        for w in words {
            if let Some((k, v)) = w.split_once('=') {
                match k {
                    "nccl-headers" => self.out.nccl_headers_version = v.parse().ok(),
                    "nccl-library" => self.out.nccl_library_version = v.parse().ok(),
                    _ => {}
                }
            }
        }
    }

    fn params_line(&mut self, body: &str, n: usize) {
        let mut params = RunParams::default();
        let mut key: Vec<&str> = Vec::new();
        for word in body.split_whitespace() {
            let is_value = word.starts_with(|c: char| c.is_ascii_digit())
                || (word.starts_with('-') && word[1..].starts_with(|c: char| c.is_ascii_digit()));
            if !is_value {
                key.push(word.trim_end_matches(':'));
                continue;
            }
            let k = key.join(" ");
            key.clear();
            if let Err(reason) = set_param(&mut params, &k, word) {
                self.diag(n, reason);
            }
        }
        if !key.is_empty() {
            params.other.insert(key.join(" "), String::new());
        }
        self.out.params = Some(params);
    }

    fn rank_line(&mut self, body: &str, n: usize) {
        // "Rank  0 Group  0 Pid   1355 on         vm device  0 [0000:00:06] NVIDIA H200"
        let (kv, tail) = match body.find('[') {
            Some(i) => (&body[..i], Some(&body[i..])),
            None => (body, None),
        };
        let words: Vec<&str> = kv.split_whitespace().collect();
        let after = |key: &str| -> Option<&str> {
            let i = words.iter().position(|w| *w == key)?;
            words.get(i + 1).copied()
        };
        let Some(rank) = after("Rank").and_then(|r| r.parse::<u32>().ok()) else {
            self.diag(n, "a `# Rank` line without a readable rank number; ignored");
            return;
        };
        let mut info = RankInfo {
            rank,
            group: after("Group").and_then(|v| v.parse().ok()),
            pid: after("Pid").and_then(|v| v.parse().ok()),
            host: after("on").map(str::to_string),
            device: after("device").and_then(|v| v.parse().ok()),
            bus_id: None,
            gpu_name: None,
            line: n,
        };
        if let Some(tail) = tail {
            match tail.find(']') {
                Some(j) => {
                    info.bus_id = Some(tail[1..j].trim().to_string());
                    let name = tail[j + 1..].trim();
                    if !name.is_empty() {
                        info.gpu_name = Some(name.to_string());
                    }
                }
                None => info.bus_id = Some(tail[1..].trim().to_string()),
            }
        }
        self.out.ranks.push(info);
    }

    fn header(&mut self, line: &str, n: usize) {
        let mut toks = tokenize(line);
        // The comment marker: "#" alone, or glued to the first name ("#size").
        if let Some(first) = toks.first_mut() {
            if first.text == "#" {
                toks.remove(0);
            } else if first.text.starts_with('#') && first.text != "#wrong" {
                first.start += 1;
                first.text = &first.text[1..];
            }
        }
        let labels = std::mem::take(&mut self.pending_groups);
        let mut cols = Vec::with_capacity(toks.len());
        let mut placement: Option<PlacementKind> = None;
        let mut used: Vec<PlacementKind> = Vec::new();
        let mut time_kind = TimeKind::Latency;
        for t in &toks {
            let name = t.text;
            let role = match name {
                "size" if placement.is_none() => Role::Size,
                "count" if placement.is_none() => Role::Count,
                "type" if placement.is_none() => Role::Type,
                "redop" if placement.is_none() => Role::Redop,
                "root" if placement.is_none() => Role::Root,
                "timestamp" => Role::RowExtra,
                "time" | "cputime" => {
                    if name == "cputime" {
                        time_kind = TimeKind::CpuTime;
                    }
                    let idx = used.len();
                    let mut kind = labels.get(idx).copied().unwrap_or(if idx == 0 {
                        PlacementKind::OutOfPlace
                    } else {
                        PlacementKind::InPlace
                    });
                    if used.contains(&kind) {
                        kind = match kind {
                            PlacementKind::OutOfPlace => PlacementKind::InPlace,
                            PlacementKind::InPlace => PlacementKind::OutOfPlace,
                        };
                    }
                    if used.contains(&kind) {
                        self.diag(
                            n,
                            format!(
                                "a third `{name}` column in the header; read as an extra column"
                            ),
                        );
                        placement = None;
                        cols.push(Col {
                            name: name.to_string(),
                            end: t.end,
                            role: Role::RowExtra,
                        });
                        continue;
                    }
                    used.push(kind);
                    placement = Some(kind);
                    Role::Place(kind, Field::Time)
                }
                _ => match placement {
                    Some(k) => Role::Place(
                        k,
                        match name {
                            "algbw" => Field::Algbw,
                            "busbw" => Field::Busbw,
                            "#wrong" => Field::Wrong,
                            "error" => Field::Error,
                            _ => Field::Extra,
                        },
                    ),
                    None => Role::RowExtra,
                },
            };
            cols.push(Col {
                name: name.to_string(),
                end: t.end,
                role,
            });
        }
        let table = self.out.tables.len();
        self.out.tables.push(TableHeader {
            line: n,
            columns: cols.iter().map(|c| c.name.clone()).collect(),
            time_kind,
        });
        self.layout = Some(Layout { cols, table });
    }

    fn out_of_bounds(&mut self, rest: &str, n: usize) {
        let rest = rest.trim_start().trim_start_matches(':');
        let mut words = rest.split_whitespace();
        let count = words.next().and_then(|c| c.parse::<u64>().ok());
        let status = words.next();
        let Some(count) = count else {
            self.diag(n, "`Out of bounds values` without a readable count");
            return;
        };
        let ok = status != Some("FAILED") && count == 0;
        if !ok {
            self.out
                .failures
                .push(Failure::new(FailureKind::OutOfBounds, rest_line(rest), n));
        }
        self.out.out_of_bounds = Some(OutOfBounds { count, ok, line: n });
    }

    fn avg_busbw(&mut self, rest: &str, n: usize) {
        let rest = rest.trim_start().trim_start_matches(':');
        let mut words = rest.split_whitespace();
        let value = match words.next().map(parse_f64) {
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                self.diag(n, format!("average bus bandwidth: {e}"));
                None
            }
            None => None,
        };
        let min_bw_check = match words.next() {
            Some("FAILED") => MinBwCheck::Failed,
            Some("OK") => MinBwCheck::Passed,
            _ => MinBwCheck::Unchecked,
        };
        if min_bw_check == MinBwCheck::Failed {
            self.out.failures.push(Failure::new(
                FailureKind::BelowMinBandwidth,
                &format!("Avg bus bandwidth : {}", rest.trim()),
                n,
            ));
        }
        self.out.avg_busbw = Some(AvgBusBw {
            value,
            min_bw_check,
            line: n,
        });
    }

    fn row(&mut self, line: &str, n: usize) {
        let Some(layout) = self.layout.as_ref() else {
            return;
        };
        let toks = merge_timestamp(line, tokenize(line), layout);
        let ncols = layout.cols.len();
        let cells: Vec<Option<&str>> = if toks.len() == ncols {
            toks.iter().map(|t| Some(t.text)).collect()
        } else if toks.len() < ncols {
            align(&toks, &layout.cols)
        } else {
            let reason = format!(
                "a row with {} values under a header of {} columns; ignored",
                toks.len(),
                ncols
            );
            self.diag(n, reason);
            return;
        };
        let mut row = super::Row {
            line: n,
            table: layout.table,
            ..Default::default()
        };
        let mut size: Option<u64> = None;
        let mut problems: Vec<String> = Vec::new();
        let mut oop = Placement::default();
        let mut inp = Placement::default();
        let (mut has_oop, mut has_inp) = (false, false);
        for (col, cell) in layout.cols.iter().zip(cells) {
            let Some(cell) = cell else { continue };
            match col.role {
                Role::Size => match parse_u64(cell) {
                    Ok(v) => size = Some(v),
                    Err(e) => problems.push(format!("size: {e}")),
                },
                Role::Count => match parse_u64(cell) {
                    Ok(v) => row.count = Some(v),
                    Err(e) => problems.push(format!("count: {e}")),
                },
                Role::Type => row.dtype = Some(cell.to_string()),
                Role::Redop => row.redop = Some(cell.to_string()),
                Role::Root => match cell.parse::<i64>() {
                    Ok(v) => row.root = Some(v),
                    Err(_) => problems.push(format!("root: `{}` is not an integer", clip(cell))),
                },
                Role::RowExtra => {
                    row.extra.insert(col.name.clone(), cell_value(cell));
                }
                Role::Place(kind, field) => {
                    let p = match kind {
                        PlacementKind::OutOfPlace => {
                            has_oop = true;
                            &mut oop
                        }
                        PlacementKind::InPlace => {
                            has_inp = true;
                            &mut inp
                        }
                    };
                    if let Err(e) = fill(p, field, &col.name, cell) {
                        problems.push(format!("{} `{}`: {e}", col.name, clip(cell)));
                    }
                }
            }
        }
        for p in problems {
            self.diag(n, p);
        }
        let Some(size) = size else {
            self.diag(n, "a row without a readable size; ignored");
            return;
        };
        row.size_bytes = size;
        row.out_of_place = has_oop.then_some(oop);
        row.in_place = has_inp.then_some(inp);
        self.out.rows.push(row);
    }
}

fn rest_line(rest: &str) -> &str {
    rest.trim()
}

fn clip(s: &str) -> String {
    s.chars().take(40).collect()
}

fn group_labels(body: &str) -> Vec<PlacementKind> {
    let mut found: Vec<(usize, PlacementKind)> = Vec::new();
    for (needle, kind) in [
        ("out-of-place", PlacementKind::OutOfPlace),
        ("in-place", PlacementKind::InPlace),
    ] {
        let mut from = 0;
        while let Some(i) = body[from..].find(needle) {
            found.push((from + i, kind));
            from += i + needle.len();
        }
    }
    found.sort_by_key(|(pos, _)| *pos);
    found.into_iter().map(|(_, k)| k).collect()
}

fn is_names_line(line: &str) -> bool {
    let mut size = false;
    let mut time = false;
    for w in line.split_whitespace() {
        match w.trim_start_matches('#') {
            "size" => size = true,
            "time" | "cputime" => time = true,
            _ => {}
        }
    }
    size && time
}

/// A `-S 1` timestamp (`2026-11-29 21:02:56`) is one column printed as two tokens:
/// glue them back together when the header has a `timestamp` column.
fn merge_timestamp<'a>(line: &'a str, mut toks: Vec<Tok<'a>>, layout: &Layout) -> Vec<Tok<'a>> {
    let has_ts = layout.cols.iter().any(|c| c.name == "timestamp");
    if !has_ts || toks.len() < 2 {
        return toks;
    }
    let k = toks.len();
    let (d, t) = (toks[k - 2], toks[k - 1]);
    let looks_date = d.text.len() >= 8
        && d.text.bytes().filter(|b| *b == b'-').count() == 2
        && d.text.bytes().all(|b| b.is_ascii_digit() || b == b'-');
    let looks_time =
        t.text.contains(':') && t.text.bytes().all(|b| b.is_ascii_digit() || b == b':');
    if looks_date && looks_time {
        if let Some(text) = line.get(d.start..t.end) {
            toks.truncate(k - 2);
            toks.push(Tok {
                start: d.start,
                end: t.end,
                text,
            });
        }
    }
    toks
}

/// Assign tokens to columns, in order, so that each token's end is as close as possible
/// to its column name's end; skipped columns get `None`.
fn align<'a>(toks: &[Tok<'a>], cols: &[Col]) -> Vec<Option<&'a str>> {
    let (t, c) = (toks.len(), cols.len());
    // cost[i][j]: best total distance placing the first i tokens in the first j columns.
    let inf = usize::MAX / 4;
    let mut cost = vec![vec![inf; c + 1]; t + 1];
    let mut took = vec![vec![false; c + 1]; t + 1];
    for j in 0..=c {
        cost[0][j] = 0;
    }
    for i in 1..=t {
        for j in i..=c {
            let skip = cost[i][j - 1];
            let d = toks[i - 1].end.abs_diff(cols[j - 1].end);
            let take = cost[i - 1][j - 1].saturating_add(d);
            if take <= skip {
                cost[i][j] = take;
                took[i][j] = true;
            } else {
                cost[i][j] = skip;
            }
        }
    }
    let mut cells = vec![None; c];
    let (mut i, mut j) = (t, c);
    while i > 0 && j > 0 {
        if took[i][j] {
            cells[j - 1] = Some(toks[i - 1].text);
            i -= 1;
        }
        j -= 1;
    }
    cells
}

fn set_param(p: &mut RunParams, key: &str, value: &str) -> Result<(), String> {
    fn num<T: std::str::FromStr>(key: &str, v: &str) -> Result<Option<T>, String> {
        v.parse::<T>()
            .map(Some)
            .map_err(|_| format!("`{key}` value `{}` is not a number in range", clip(v)))
    }
    match key {
        "nThread" => p.n_threads = num(key, value)?,
        "nGpus" => p.n_gpus = num(key, value)?,
        "minBytes" => p.min_bytes = num(key, value)?,
        "maxBytes" => p.max_bytes = num(key, value)?,
        "warmup iters" => p.warmup_iters = num(key, value)?,
        "iters" => p.iters = num(key, value)?,
        "agg iters" => p.agg_iters = num(key, value)?,
        "validation" => p.validation = num(key, value)?,
        "graph" => p.graph = num(key, value)?,
        "unalign" => p.unalign = num(key, value)?,
        "step" => {
            let (v, kind) = match value.split_once('(') {
                Some((v, k)) => (v, k.trim_end_matches(')')),
                None => (value, ""),
            };
            let v: u64 = v
                .parse()
                .map_err(|_| format!("`step` value `{}` is not a number in range", clip(value)))?;
            let kind = match kind {
                "factor" => StepKind::Factor,
                "bytes" | "increment" => StepKind::Increment,
                other => StepKind::Other(other.to_string()),
            };
            p.step = Some(Step { value: v, kind });
        }
        _ => {
            p.other.insert(key.to_string(), value.to_string());
        }
    }
    Ok(())
}

/// Parse a printed float. `N/A` and `nan` read as `None`; a finite-looking number that
/// overflows `f64` is an error.
pub(crate) fn parse_f64(s: &str) -> Result<Option<f64>, String> {
    if s.eq_ignore_ascii_case("N/A") {
        return Ok(None);
    }
    match s.parse::<f64>() {
        Ok(v) if v.is_nan() => Ok(None),
        Ok(v) if v.is_infinite() && !s.to_ascii_lowercase().contains("inf") => {
            Err(format!("`{}` overflows a 64-bit float", clip(s)))
        }
        Ok(v) => Ok(Some(v)),
        Err(_) => Err(format!("`{}` is not a number", clip(s))),
    }
}

pub(crate) fn parse_u64(s: &str) -> Result<u64, String> {
    s.parse::<u64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => format!("`{}` is larger than 2^64-1", clip(s)),
        _ => format!("`{}` is not a non-negative integer", clip(s)),
    })
}

/// `#wrong` is printed with `%g`, so `1e+06` is a count too.
pub(crate) fn wrong_count(v: f64) -> Result<u64, String> {
    if !v.is_finite() || v < 0.0 || v.fract() != 0.0 {
        return Err(format!("{v} is not a count"));
    }
    // 2^64 as f64; anything at or above it does not fit.
    if v >= 18_446_744_073_709_551_616.0 {
        return Err(format!("{v} is larger than 2^64-1"));
    }
    // In range and integral: the conversion is exact enough and cannot saturate.
    Ok(v as u64)
}

fn fill(p: &mut Placement, field: Field, name: &str, cell: &str) -> Result<(), String> {
    match field {
        Field::Time => p.time_us = parse_f64(cell)?,
        Field::Algbw => p.algbw_gbps = parse_f64(cell)?,
        Field::Busbw => p.busbw_gbps = parse_f64(cell)?,
        Field::Wrong => {
            p.wrong = match parse_f64(cell)? {
                Some(v) => Some(wrong_count(v)?),
                None => None,
            }
        }
        Field::Error => p.max_error = parse_f64(cell)?,
        Field::Extra => {
            p.extra.insert(name.to_string(), cell_value(cell));
        }
    }
    Ok(())
}

/// A cell of an unknown column: a JSON number when it reads as a finite float, else the
/// text.
fn cell_value(cell: &str) -> serde_json::Value {
    match cell.parse::<f64>() {
        Ok(v) if v.is_finite() => serde_json::Number::from_f64(v)
            .map(serde_json::Value::Number)
            .unwrap_or_else(|| serde_json::Value::String(cell.to_string())),
        _ => serde_json::Value::String(cell.to_string()),
    }
}
