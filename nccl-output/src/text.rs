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

/// Whether a piece of a row cut by a debug line starts a row: a size and a count (integers),
/// then a word that is not a number (the data type).
fn starts_new_row(piece: &str) -> bool {
    let is_uint = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mut toks = piece.split_whitespace();
    matches!(
        (toks.next(), toks.next(), toks.next()),
        (Some(size), Some(count), Some(kind))
            if is_uint(size) && is_uint(count) && kind.parse::<f64>().is_err()
    )
}

/// Remove what launchers put before each line, stacked in any order and indented (as a
/// README quotes a log): Open MPI's `--tag-output` (`[1,0]<stdout>:`), srun's `--label`
/// (`0: `), a job runner's `(head, rank=0, pid=4242)` or `(pid=77, ip=10.0.0.2)`. A line
/// with none of them is returned as it is: a row's own leading spaces are its alignment.
fn strip_launcher_prefix(line: &str) -> &str {
    let mut rest = line;
    // A few layers at most: two launchers' tags, each perhaps after an indent.
    for _ in 0..4 {
        let t = rest.trim_start();
        let stripped = strip_mpi_tag(t)
            .or_else(|| strip_runner_tag(t))
            .or_else(|| strip_srun_label(t));
        match stripped {
            Some(after) => rest = after,
            None => break,
        }
    }
    rest
}

/// `[1,0]<stdout>:` (and `<stderr>`), with the one space after it.
fn strip_mpi_tag(t: &str) -> Option<&str> {
    let i = t.strip_prefix('[')?.find(">:")? + 1;
    if !t[..i].contains("]<std") {
        return None;
    }
    let rest = &t[i + 2..];
    Some(rest.strip_prefix(' ').unwrap_or(rest))
}

/// `0: ` (srun --label).
fn strip_srun_label(t: &str) -> Option<&str> {
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 0)
        .then(|| t[digits..].strip_prefix(": "))
        .flatten()
}

/// `(head, rank=0, pid=4242) ` or `(pid=77, ip=10.0.0.2) `: a job runner's prefix (Ray's
/// form), within its first 120 characters and naming a pid, rank or ip.
fn strip_runner_tag(t: &str) -> Option<&str> {
    let inside = t.strip_prefix('(')?;
    let close = inside.find(')').filter(|&c| c < 120)?;
    let tag = &inside[..close];
    if !["pid=", "rank=", "ip="].iter().any(|k| tag.contains(k)) {
        return None;
    }
    let rest = &inside[close + 1..];
    Some(rest.strip_prefix(' ').unwrap_or(rest))
}

/// Whether a line is what a document or a chat message puts where it left lines out:
/// `...`, `…`, `[...]`, `<snip>`, `(truncated)`, `# ... 20 lines omitted ...`: a few
/// words at most, made of dots, `snip`, `truncated`, `omitted`, `lines` and numbers; a
/// rule of dashes or `=` around them is decoration (`-----some output truncated-----`, the
/// AWS DLAMI guide's marker).
fn is_cut_marker(trimmed: &str) -> bool {
    let body = trimmed
        .trim_start_matches('#')
        .trim()
        .trim_matches(|c| c == '-' || c == '=')
        .trim();
    if body.is_empty() || body.len() > 60 {
        return false;
    }
    let words: Vec<String> = body
        .split(|c: char| c.is_whitespace() || "[]()<>{}:,".contains(c))
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let is_dots =
        |w: &str| w.chars().all(|c| c == '.' || c == '…') && (w.contains('…') || w.len() >= 3);
    let marker = |w: &str| {
        is_dots(w)
            || matches!(
                w,
                "snip"
                    | "snipped"
                    | "truncated"
                    | "omitted"
                    | "output"
                    | "some"
                    | "lines"
                    | "rows"
                    | "more"
            )
            || w.bytes().all(|b| b.is_ascii_digit())
    };
    let named = words
        .iter()
        .any(|w| is_dots(w) || matches!(w.as_str(), "snip" | "snipped" | "truncated" | "omitted"));
    !words.is_empty() && words.len() <= 6 && named && words.iter().all(|w| marker(w))
}

/// Headers wider than this are not aligned value by value (the alignment is quadratic);
/// real headers have at most 24 columns.
const MAX_ALIGN_COLUMNS: usize = 128;

/// The column header current nccl-tests (2.13 and later, without `-C`/`-S`) prints, with
/// its real widths: what a table pasted without its header is read with when the caller
/// asks for it ([`parse_text_assuming_layout`]).
pub(crate) const STANDARD_HEADER: &str =
    "#       size         count      type   redop    root     \
    time   algbw   busbw  #wrong     time   algbw   busbw  #wrong";

/// The nccl-tests program a command line runs: a word ending in `_perf` or `_perf_mpi`
/// (after any path) followed by an option (`./build/broadcast_perf -b 8 -e 2G`). A build
/// log's `Linking ... all_reduce_perf` has no option after the name.
fn command_program(line: &str) -> Option<&str> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words.windows(2).find_map(|w| {
        let base = w[0].rsplit('/').next().unwrap_or(w[0]);
        let is_prog = (base.ends_with("_perf") || base.ends_with("_perf_mpi")) && base.len() > 5;
        (is_prog && w[1].starts_with('-')).then_some(base)
    })
}

#[derive(Default)]
struct TextParser {
    out: ParsedOutput,
    /// Read rows that come before any column header with [`STANDARD_HEADER`].
    assume_layout: bool,
    layout: Option<Layout>,
    /// Placement labels of the last group line, in order of position.
    pending_groups: Vec<PlacementKind>,
    debug: DebugCollector,
    last_mpi_abort: Option<usize>,
    /// The nccl-tests programs a command line in the output runs (`./build/broadcast_perf
    /// -b 8 ...`): the collective of an output that does not name it otherwise.
    command_programs: std::collections::BTreeSet<String>,
    /// Hosts named in `# Rank` lines.
    hosts: Vec<String>,
    /// A row's first part cut off by an interleaved debug line, with its line number.
    fragment: Option<(String, usize)>,
    /// What a log collector put before every line (`pod-7f9c 2024-05-01T12:00:00Z `), as
    /// learned from the first nccl-tests header line behind it: its length in bytes and its
    /// number of words ([`TextParser::strip_learned_prefix`]).
    line_prefix: Option<(usize, usize)>,
}

/// How the header lines of nccl-tests start (after the `#`): a line that holds one of these
/// behind other text tells what that text is, a prefix on every line.
const HEADER_MARKERS: [&str; 5] = [
    "# nccl-tests version",
    "# rccl-tests version",
    "# Collective test starting",
    "# nThread ",
    "#  Rank ",
];

/// Header and summary lines as some documents and log collectors show them, without their
/// `#`: read as if it were there (`Rank` lines only with their `Group` and `Pid`).
const HEADER_WORDS: [&str; 8] = [
    "nccl-tests version",
    "Collective test starting",
    "Collective test concluded",
    "nThread ",
    "Using devices",
    "Out of bounds values",
    "Avg bus bandwidth",
    "Reducing maxBytes to ",
];

pub(crate) fn parse_text_str(input: &str) -> ParsedOutput {
    parse_text_inner(input, false)
}

/// [`parse_text_str`], but rows before any column header are read with the standard
/// layout ([`STANDARD_HEADER`]) instead of being ignored, and a note says so
/// ([`super::ASSUMED_LAYOUT_NOTE`]).
pub(crate) fn parse_text_assuming_layout(input: &str) -> ParsedOutput {
    parse_text_inner(input, true)
}

fn parse_text_inner(input: &str, assume_layout: bool) -> ParsedOutput {
    let mut p = TextParser {
        assume_layout,
        ..TextParser::default()
    };
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

    fn flush_fragment(&mut self) {
        if let Some((frag, at)) = self.fragment.take() {
            self.row(&frag, at);
        }
    }

    /// Whether `line` has exactly one value per column of the current table.
    fn is_complete_row(&self, line: &str) -> bool {
        let Some(layout) = self.layout.as_ref() else {
            return false;
        };
        merge_timestamp(line, tokenize(line), layout).len() == layout.cols.len()
    }

    fn finish(mut self) -> ParsedOutput {
        self.flush_fragment();
        // nccl-tests before 2.17 prints no `Collective test starting` line (before 2.0 no
        // `redop` for broadcast either): the command line pasted with it names the program.
        if self.out.collective.is_none() && self.command_programs.len() == 1 {
            if let Some(prog) = self.command_programs.pop_first() {
                self.out.notes.push(format!(
                    "the collective is that of the program on the command line: {prog}"
                ));
                self.out.collective = Some(super::normalize_collective(&prog));
                self.out.program = Some(prog);
            }
        }
        self.out.debug = self.debug.finish();
        self.out
    }

    /// Learns a prefix from a header line that has text before its `#` (and no prefix is
    /// known yet); removes the known prefix from `line` where that line has one of the same
    /// length and word count.
    fn strip_learned_prefix<'a>(&mut self, line: &'a str) -> &'a str {
        if self.line_prefix.is_none() && self.layout.is_none() {
            let at = HEADER_MARKERS.iter().filter_map(|m| line.find(m)).min();
            if let Some(at) = at.filter(|&at| !line[..at].trim().is_empty()) {
                self.line_prefix = Some((at, tokenize(&line[..at]).len()));
            }
        }
        let Some((len, words)) = self.line_prefix else {
            return line;
        };
        let bytes = line.as_bytes();
        let cut_between_words = line.is_char_boundary(len)
            && len < bytes.len()
            && (bytes[len - 1].is_ascii_whitespace() || bytes[len].is_ascii_whitespace());
        if cut_between_words && tokenize(&line[..len]).len() == words {
            &line[len..]
        } else {
            line
        }
    }

    fn line(&mut self, raw: &str, n: usize) {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        let line = strip_launcher_prefix(raw);
        let line = self.strip_learned_prefix(line);
        let line = strip_launcher_prefix(line);
        if let Some(mut d) = parse_debug_line(line) {
            // Interleaved output can glue the start of a row to another process's debug
            // line ("...  15.97    7.9" + "vm2:12:12 [0] NCCL INFO ..."); the rest of the
            // row then follows on the next line. With NCCL's per-operation lines
            // (`NCCL_DEBUG_SUBSYS=TUNING`) one process cuts its own row in three: nccl-tests
            // prints the size columns, the out-of-place figures and the in-place figures
            // separately, and the operations' lines come between them, the first glued to
            // each piece. A known host name tells where a piece ends when nothing separates
            // it from the host.
            let mut fragment = d.prefix.to_string();
            let starts_like_row = fragment
                .split_whitespace()
                .next()
                .is_some_and(|t| t.bytes().all(|b| b.is_ascii_digit()));
            // A piece that starts with a size, a count and a type's name starts a row; any
            // other piece while a row is pending continues it (a large time prints as a
            // bare integer, `  12127`, so a leading integer alone does not tell).
            let new_row = starts_new_row(&fragment) || (self.fragment.is_none() && starts_like_row);
            let continues_row = !new_row && self.fragment.is_some() && !fragment.trim().is_empty();
            if let Some(h) = d.host.filter(|_| starts_like_row || continues_row) {
                if !self.hosts.iter().any(|k| k == h) {
                    if let Some(k) = self
                        .hosts
                        .iter()
                        .filter(|k| h.len() > k.len() && h.ends_with(k.as_str()))
                        .max_by_key(|k| k.len())
                    {
                        fragment.push_str(&h[..h.len() - k.len()]);
                        d.host = Some(&h[h.len() - k.len()..]);
                    }
                }
            }
            self.debug.add(&d, n);
            if continues_row {
                if let Some((pending, _)) = self.fragment.as_mut() {
                    pending.push_str(&fragment);
                }
            } else if new_row && self.layout.is_some() {
                self.flush_fragment();
                self.fragment = Some((fragment, n));
            }
            return;
        }
        if let Some((frag, at)) = self.fragment.take() {
            let joined = format!("{frag}{line}");
            if self.is_complete_row(&joined) {
                self.row(&joined, at);
                return;
            }
            self.row(&frag, at);
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return;
        }
        if self.rccl_line(trimmed) {
            return;
        }
        // NCCL_DEBUG=VERSION prints the version bare, without the `host:pid:tid [d] NCCL
        // INFO` of its other lines: `NCCL version 2.18.3+cuda12.2` (often behind srun -l).
        if trimmed.starts_with("NCCL version ") {
            let bare = crate::transport::DebugLine {
                prefix: "",
                host: None,
                pid: None,
                device: None,
                level: "VERSION",
                message: trimmed,
            };
            self.debug.add(&bare, n);
            return;
        }
        if is_cut_marker(trimmed) {
            self.out.cut_at_lines.push(n);
            self.diag(
                n,
                format!("the output was cut here (`{trimmed}`): rows may be missing"),
            );
            return;
        }
        if trimmed.starts_with('#')
            || HEADER_WORDS.iter().any(|w| trimmed.starts_with(w))
            || (trimmed.starts_with("Rank ")
                && trimmed.contains(" Group ")
                && trimmed.contains(" Pid "))
            || (is_names_line(trimmed) && trimmed.starts_with("size"))
        {
            self.comment(line, n);
            return;
        }
        let toks = tokenize(line);
        let first_is_uint = toks
            .first()
            .is_some_and(|t| !t.text.is_empty() && t.text.bytes().all(|b| b.is_ascii_digit()));
        if first_is_uint && toks.len() >= 4 {
            if self.layout.is_none() && self.assume_layout {
                self.out.notes.push(super::ASSUMED_LAYOUT_NOTE.to_string());
                self.header(STANDARD_HEADER, n);
            }
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
        if let Some(prog) = command_program(line) {
            if self.command_programs.len() < 4 {
                self.command_programs.insert(prog.to_string());
            }
        }
        if let Some(f) = classify_line(line, n) {
            if f.kind == FailureKind::MpiAbort {
                self.last_mpi_abort = Some(self.out.failures.len());
            }
            self.out.failures.push(f);
        }
    }

    fn comment(&mut self, line: &str, n: usize) {
        let body = line.find('#').map_or(line, |h| &line[h + 1..]).trim();
        if body.is_empty() {
            return;
        }
        if let Some(rest) = body.strip_prefix("nccl-tests version ") {
            self.version_line(rest);
        } else if let Some(rest) = body.strip_prefix("rccl-tests version ") {
            self.out.library = Some("RCCL".into());
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
        } else if let Some(rest) = body.strip_prefix("Reducing maxBytes to ") {
            // "Reducing maxBytes to 11453246122 due to memory limitation"
            self.out.reduced_max_bytes =
                rest.split_whitespace().next().and_then(|v| v.parse().ok());
            self.out.notes.push(body.to_string());
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

    /// rccl-tests' (AMD's nccl-tests) lines without a `#`: `RCCL version : 2.28.3-...`,
    /// `HIP version  : ...`, `ROCm version : ...`, and older builds' `rccl-tests: Version
    /// develop:5272cd1`. Whether the line was one of them.
    fn rccl_line(&mut self, trimmed: &str) -> bool {
        let field = |key: &str| -> Option<String> {
            let rest = trimmed.strip_prefix(key)?.trim_start().strip_prefix(':')?;
            let v = rest.split_whitespace().next()?;
            Some(v.to_string())
        };
        let out = &mut self.out;
        if let Some(v) = field("RCCL version") {
            out.library = Some("RCCL".into());
            // `2.28.3-gfx942-rccl:a188cf2`: the version is what comes before the build's tags.
            out.rccl_version = Some(v.split('-').next().unwrap_or(&v).to_string());
        } else if let Some(v) = field("HIP version") {
            out.hip_version = Some(v);
        } else if let Some(v) = field("ROCm version") {
            out.rocm_version = Some(v);
        } else if let Some(v) = trimmed.strip_prefix("rccl-tests: Version ") {
            out.library = Some("RCCL".into());
            out.nccl_tests_version = out
                .nccl_tests_version
                .clone()
                .or_else(|| Some(v.trim().to_string()));
        } else {
            return false;
        }
        true
    }

    fn version_line(&mut self, rest: &str) {
        let mut words = rest.split_whitespace();
        if let Some(v) = words.next() {
            self.out.nccl_tests_version = Some(v.to_string());
        }
        for w in words {
            if let Some((k, v)) = w.split_once('=') {
                match k {
                    "nccl-headers" | "rccl-headers" => {
                        self.out.nccl_headers_version = v.parse().ok()
                    }
                    "nccl-library" | "rccl-library" => {
                        self.out.nccl_library_version = v.parse().ok()
                    }
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
        self.out.parameter_lines += 1;
        if self.out.parameter_lines == 2 {
            // The fact the checks fail a run for (ParsedOutput::ranks_ran_alone), said
            // where it shows; every nccl-tests version prints this line, once per job.
            self.diag(
                n,
                "a second parameter line (`# nThread ...`): several processes ran the test \
                 independently (a non-MPI binary launched as several tasks?), so the tables \
                 below are not one run",
            );
        }
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
        if let Some(h) = &info.host {
            if !self.hosts.contains(h) {
                self.hosts.push(h.clone());
            }
        }
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
        let mut extra_time_seen = false;
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
                        if !extra_time_seen {
                            extra_time_seen = true;
                            self.diag(
                                n,
                                format!(
                                    "more than two `{name}` columns in the header; the extra \
                                     ones are read as extra columns"
                                ),
                            );
                        }
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
            self.out.failures.push(Failure::new(
                FailureKind::OutOfBounds,
                &format!("Out of bounds values : {}", rest.trim()),
                n,
            ));
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
        } else if toks.len() < ncols && ncols <= MAX_ALIGN_COLUMNS {
            align(&toks, &layout.cols)
        } else {
            let reason = format!(
                "a row with {} values does not fit a header of {} columns; ignored",
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
    cost[0].fill(0);
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
        // An infinite time or bandwidth is not a measurement (and JSON cannot store it).
        Ok(v) if v.is_infinite() && !s.to_ascii_lowercase().contains("inf") => {
            Err(format!("`{}` overflows a 64-bit float", clip(s)))
        }
        Ok(v) if v.is_infinite() => Err(format!("`{}` is infinite", clip(s))),
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

#[cfg(test)]
mod tests {
    use super::*;

    // Header and rows as nccl-tests 2.19.6 prints them (from the recorded hypercube run).
    const HYPERCUBE: &str = "\
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong 
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         
         512            64     float              -1    31.67    0.01    0.01       0    17.07    0.01    0.01       0
";

    #[test]
    fn a_bare_nccl_version_line_behind_an_srun_label_is_read() {
        // As NCCL_DEBUG=VERSION prints it under `srun -l` (a published Slurm log).
        let out = parse_text_str(
            " 0: NCCL version 2.18.3+cuda12.2\n 0: # nThread 1 nGpus 1 minBytes 8 maxBytes 8\n",
        );
        assert_eq!(out.debug.nccl_version.as_deref(), Some("2.18.3"));
        assert_eq!(out.debug.cuda_version.as_deref(), Some("12.2"));
    }

    #[test]
    fn cut_markers_are_told_from_other_lines() {
        for marker in [
            "...",
            "…",
            "[...]",
            "<snip>",
            "(truncated)",
            "# ... 20 lines omitted ...",
            "[output truncated]",
            "   ....",
            "-----------------------------some output truncated-----------------------------------",
        ] {
            assert!(is_cut_marker(marker.trim()), "{marker}");
        }
        for other in [
            "..",
            "# Out of bounds values : 0 OK",
            "1024 256 float sum -1",
            "loading...",
            "Done.",
            "# Using devices",
            "#",
            "3 lines",
            "----------------------------------------",
            "--- some text ---",
        ] {
            assert!(!is_cut_marker(other.trim()), "{other}");
        }
    }

    #[test]
    fn empty_redop_is_skipped_by_alignment() {
        let out = parse_text_str(HYPERCUBE);
        assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
        let r = &out.rows[0];
        assert_eq!(r.size_bytes, 512);
        assert_eq!(r.dtype.as_deref(), Some("float"));
        assert_eq!(r.redop, None);
        assert_eq!(r.root, Some(-1));
        assert_eq!(r.out_of_place.as_ref().unwrap().time_us, Some(31.67));
        assert_eq!(r.in_place.as_ref().unwrap().time_us, Some(17.07));
    }

    #[test]
    fn group_line_decides_which_block_is_in_place() {
        // A header whose groups are swapped must be read by the labels, not the order.
        let text = HYPERCUBE.replace(
            "out-of-place                       in-place",
            "in-place                       out-of-place",
        );
        let out = parse_text_str(&text);
        let r = &out.rows[0];
        assert_eq!(r.in_place.as_ref().unwrap().time_us, Some(31.67));
        assert_eq!(r.out_of_place.as_ref().unwrap().time_us, Some(17.07));
    }

    #[test]
    fn launcher_prefixes_are_removed() {
        assert_eq!(
            strip_launcher_prefix("[1,0]<stdout>:# nThread 1"),
            "# nThread 1"
        );
        assert_eq!(strip_launcher_prefix("[1,12]<stderr>: oops"), "oops");
        assert_eq!(strip_launcher_prefix("  3: # Rank  3"), "# Rank  3");
        let row = "           8             2     float";
        assert_eq!(strip_launcher_prefix(row), row);
    }

    #[test]
    fn params_keep_unknown_keys_and_step_kinds() {
        let out = parse_text_str(
            "# nThread 2 nGpus 4 minBytes 1024 maxBytes 4096 step: 1024(bytes) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 3 unalign: 0 future knob: 7 flag\n",
        );
        let p = out.params.unwrap();
        assert_eq!(
            (p.n_threads, p.n_gpus, p.graph),
            (Some(2), Some(4), Some(3))
        );
        assert_eq!(
            p.step,
            Some(Step {
                value: 1024,
                kind: StepKind::Increment
            })
        );
        assert_eq!(p.other.get("future knob").map(String::as_str), Some("7"));
        assert_eq!(p.other.get("flag").map(String::as_str), Some(""));
    }

    #[test]
    fn bad_numbers_are_diagnosed_not_fatal() {
        let text = format!(
            "{HYPERCUBE}         abc            64     float    sum      -1    x    0.01    0.01       0    17.07    0.01    0.01       0\n\
             1024  64  float  sum  -1  1.0  2.0  3.0  -4  1.0  2.0  3.0  0\n"
        );
        let out = parse_text_str(&text);
        assert_eq!(out.rows.len(), 2, "{:?}", out.rows);
        assert_eq!(out.rows[1].out_of_place.as_ref().unwrap().wrong, None);
        assert_eq!(out.diagnostics.len(), 1, "{:?}", out.diagnostics);
        assert!(out.diagnostics[0].reason.contains("#wrong"));
        assert_eq!(out.diagnostics[0].line, 6);
    }

    #[test]
    fn wrong_counts_accept_g_format_only_for_integers() {
        assert_eq!(wrong_count(1e6), Ok(1_000_000));
        assert!(wrong_count(-1.0).is_err());
        assert!(wrong_count(0.5).is_err());
        assert!(wrong_count(1e30).is_err());
        assert_eq!(parse_f64("N/A"), Ok(None));
        assert!(parse_f64("1e999").is_err());
        assert!(parse_u64("99999999999999999999")
            .unwrap_err()
            .contains("2^64"));
    }

    #[test]
    fn rows_before_a_header_and_overlong_rows_are_diagnosed() {
        let out = parse_text_str("   8   2  float  sum  -1  1.0 2.0 3.0 0\n");
        assert!(out.rows.is_empty());
        assert_eq!(out.diagnostics.len(), 1);
        let text = format!("{HYPERCUBE}  8 2 float sum -1 1 2 3 0 1 2 3 0 9 9 9\n");
        let out = parse_text_str(&text);
        assert_eq!(out.rows.len(), 1);
        assert!(out.diagnostics[0].reason.contains("does not fit"));
    }
}
