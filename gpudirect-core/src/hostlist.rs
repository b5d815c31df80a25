//! Slurm hostlist expressions: parse, expand, compress and match them without expanding.
//!
//! Slurm writes node sets compactly (`SLURM_JOB_NODELIST=a3h-[0001-0064]`) and the launcher,
//! the admin config's node sets and the SPANK plugin all need to read them. The grammar:
//!
//! - a list of *elements* separated by `,` (or whitespace, as Slurm also accepts) at the top
//!   level; a comma inside brackets separates ranges, not elements;
//! - an element is literal text with any number of bracket groups, e.g. `node[01-04]`,
//!   `rack[1-2]-node[01-04]` (cartesian product, first group outermost, as Slurm orders it),
//!   `gpu[1-4]-ib` (literal suffix after the group);
//! - a group holds comma-separated numbers and ranges `lo-hi`; the zero-pad width of a range
//!   is the length of its `lo` as written (`node[098-101]` gives `node098`..`node101`,
//!   `[8-11]` gives `8`, `9`, `10`, `11`, `[1-010]` gives `1`..`10`), as in Slurm.
//!
//! Everything here is bounded and never panics on input: the number of hosts an expression
//! stands for is computed from the parsed ranges *before* anything is allocated, so
//! `a[1-99999999999]` is refused at once ([`HostlistError::TooManyHosts`]) instead of
//! exhausting memory, and numbers beyond `u64` are an error.
//!
//! ```
//! use gpudirect_core::hostlist::{compress, expand, HostlistPattern};
//!
//! let hosts = expand("rack[1-2]-node[01-02]").unwrap();
//! assert_eq!(hosts, ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]);
//! assert_eq!(compress(&["n1", "n2", "n3", "n7"]), "n[1-3,7]");
//!
//! // Membership without expansion: cheap even for very large node sets.
//! let set = HostlistPattern::new("a3h-[0001-4096]").unwrap();
//! assert!(set.matches("a3h-0042"));
//! assert!(!set.matches("a3h-42"));
//! ```
//!
//! Deliberate differences from Slurm 22.05's own parser, all stricter or wider in a way a
//! user can see: an unclosed `[`, an empty element (`a,,b`) and a range without its upper
//! bound (`n[1-]`) are errors here (Slurm silently guesses); literal text after a group
//! (`gpu[1-4]-ib`) is accepted (Slurm 22.05 refuses it, newer releases accept it).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::str::FromStr;

use thiserror::Error;

/// Default bound on the number of hosts one expression may expand to.
///
/// Larger than any real cluster, small enough that an expansion fits in memory. Slurm itself
/// refuses single ranges above about a million hosts too.
pub const MAX_HOSTS: usize = 1_000_000;

/// Why a hostlist (or `SLURM_TASKS_PER_NODE`) expression was refused.
///
/// Every variant that points into the input carries the byte offset (0-based) of the problem;
/// the message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HostlistError {
    /// A `[` with no matching `]`.
    #[error("unclosed '[' at byte {offset}: every '[' needs a matching ']' (e.g. `node[1-4]`)")]
    UnclosedBracket {
        /// Offset of the `[`.
        offset: usize,
    },
    /// A `]` with no `[` before it.
    #[error(
        "unexpected ']' at byte {offset} with no '[' before it: remove it or add the missing '['"
    )]
    UnopenedBracket {
        /// Offset of the `]`.
        offset: usize,
    },
    /// A `[` inside a bracket group.
    #[error(
        "nested '[' at byte {offset}: brackets cannot be nested; put groups side by side \
         instead (e.g. `rack[1-2]-node[1-4]`)"
    )]
    NestedBracket {
        /// Offset of the inner `[`.
        offset: usize,
    },
    /// `[]`, or an empty item in a group such as `[1,,2]` or `[1,]`.
    #[error(
        "empty range at byte {offset}: write a number or a range such as `1` or `1-4` \
         between the brackets and commas"
    )]
    EmptyRange {
        /// Offset where the number was expected.
        offset: usize,
    },
    /// A range with only one side, such as `[1-]` or `[-4]`.
    #[error("range at byte {offset} is missing a number on one side of '-': write both ends, e.g. `1-4`")]
    MissingBound {
        /// Offset where the missing number was expected.
        offset: usize,
    },
    /// A range whose first number exceeds its second, such as `a[3-1]`.
    #[error("reversed range `{lo}-{hi}` at byte {offset}: the first number must not exceed the second; write `{hi}-{lo}`")]
    ReversedRange {
        /// Offset of the range.
        offset: usize,
        /// The lower bound as written.
        lo: String,
        /// The upper bound as written.
        hi: String,
    },
    /// A character other than a digit, `-` or `,` inside brackets.
    #[error(
        "unexpected {found:?} at byte {offset} inside brackets: only digits, one '-' per \
         range and ',' are allowed there (e.g. `node[01-04,08]`)"
    )]
    NonDigit {
        /// Offset of the character.
        offset: usize,
        /// The character found.
        found: char,
    },
    /// An empty element between top-level commas, such as `a,,b`, `,a` or `a,`.
    #[error("empty element at byte {offset}: remove the extra comma (hosts are separated by a single ',')")]
    EmptyElement {
        /// Offset of the comma (or of the end of the input) where a host was expected.
        offset: usize,
    },
    /// A number that does not fit in 64 bits (Slurm's own limit is lower still).
    #[error(
        "number at byte {offset} is too large (over {}): use a smaller number",
        u64::MAX
    )]
    NumberOverflow {
        /// Offset of the number.
        offset: usize,
    },
    /// The expression stands for more hosts than the limit. Raised before anything is allocated.
    #[error(
        "expression expands to {} hosts, more than the limit of {limit}: check the ranges \
         for a typo, or split the list",
        count_text(.count)
    )]
    TooManyHosts {
        /// How many hosts the expression stands for (`u128::MAX` means "even more").
        count: u128,
        /// The limit in force.
        limit: usize,
    },
    /// A malformed `SLURM_TASKS_PER_NODE` value.
    #[error(
        "invalid tasks-per-node list at byte {offset}: {reason}; expected counts such as `8(x4),4`"
    )]
    InvalidTasksPerNode {
        /// Offset of the problem.
        offset: usize,
        /// What was wrong.
        reason: &'static str,
    },
}

impl HostlistError {
    /// The byte offset in the input that the error points at, if it points at one.
    pub fn offset(&self) -> Option<usize> {
        match self {
            Self::UnclosedBracket { offset }
            | Self::UnopenedBracket { offset }
            | Self::NestedBracket { offset }
            | Self::EmptyRange { offset }
            | Self::MissingBound { offset }
            | Self::ReversedRange { offset, .. }
            | Self::NonDigit { offset, .. }
            | Self::EmptyElement { offset }
            | Self::NumberOverflow { offset }
            | Self::InvalidTasksPerNode { offset, .. } => Some(*offset),
            Self::TooManyHosts { .. } => None,
        }
    }
}

fn count_text(count: &u128) -> String {
    if *count == u128::MAX {
        format!("more than {}", u128::MAX - 1)
    } else {
        count.to_string()
    }
}

/// One `lo-hi` range of a bracket group; `width` is the minimum digit count (zero padding).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn len(&self) -> u128 {
        u128::from(self.hi - self.lo) + 1
    }

    /// Whether `digits` (all ASCII digits, value `v`) is how this range writes `v`.
    fn renders(&self, v: u64, digits: &str) -> bool {
        v >= self.lo && v <= self.hi && digits.len() == self.width.max(natural_len(v))
    }
}

/// A bracket group and the literal text that follows it up to the next group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    /// As written: the expansion order.
    ranges: Vec<Range>,
    /// The same ranges sorted by `lo`, with the running maximum of `hi`, so that membership
    /// is a binary search even for groups of thousands of ranges (`n[1,3,5,...]`).
    sorted: Vec<Range>,
    max_hi: Vec<u64>,
    tail: String,
}

impl Group {
    fn new(ranges: Vec<Range>) -> Self {
        let mut sorted = ranges.clone();
        sorted.sort_by_key(|r| r.lo);
        let max_hi = sorted
            .iter()
            .scan(0u64, |m, r| {
                *m = (*m).max(r.hi);
                Some(*m)
            })
            .collect();
        Self {
            ranges,
            sorted,
            max_hi,
            tail: String::new(),
        }
    }

    /// Whether some range of the group writes `v` as `digits`.
    fn contains(&self, v: u64, digits: &str) -> bool {
        let end = self.sorted.partition_point(|r| r.lo <= v);
        // Walk back over the ranges starting at or before `v` while one may still reach it;
        // overlapping ranges (`[1-9,01-09]`) are all candidates, disjoint ones give one step.
        for j in (0..end).rev() {
            if self.max_hi[j] < v {
                break;
            }
            if self.sorted[j].renders(v, digits) {
                return true;
            }
        }
        false
    }
}

/// One top-level element: `head` then the groups, e.g. `rack` `[1-2]` `-node` `[01-04]` ``.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Element {
    head: String,
    groups: Vec<Group>,
}

impl Element {
    /// Hosts this element stands for; saturates at `u128::MAX`.
    fn count(&self) -> u128 {
        self.groups.iter().fold(1u128, |acc, g| {
            let n = g
                .ranges
                .iter()
                .fold(0u128, |s, r| s.saturating_add(r.len()));
            acc.saturating_mul(n)
        })
    }

    fn expand_into(&self, out: &mut Vec<String>) {
        if self.groups.is_empty() {
            out.push(self.head.clone());
            return;
        }
        // Odometer over the groups: (index of the current range, current value) per group,
        // the last group turning fastest, which is Slurm's order.
        let mut pos: Vec<(usize, u64)> = self.groups.iter().map(|g| (0, g.ranges[0].lo)).collect();
        let mut buf = String::new();
        loop {
            buf.clear();
            buf.push_str(&self.head);
            for (g, &(ri, v)) in self.groups.iter().zip(&pos) {
                let _ = write!(buf, "{:0w$}", v, w = g.ranges[ri].width);
                buf.push_str(&g.tail);
            }
            out.push(buf.clone());
            let mut gi = self.groups.len();
            loop {
                if gi == 0 {
                    return;
                }
                gi -= 1;
                let ranges = &self.groups[gi].ranges;
                let (ri, v) = &mut pos[gi];
                if *v < ranges[*ri].hi {
                    *v += 1;
                    break;
                }
                if *ri + 1 < ranges.len() {
                    *ri += 1;
                    *v = ranges[*ri].lo;
                    break;
                }
                *ri = 0;
                *v = ranges[0].lo;
            }
        }
    }

    fn matches(&self, host: &str) -> bool {
        host.strip_prefix(self.head.as_str())
            .is_some_and(|rest| match_groups(rest, &self.groups))
    }
}

/// Match `s` against `groups`. A group's number may be followed by a tail that starts with
/// digits (`n[1-3]0`), so every split of the digit run is tried; hostnames are short, so
/// this backtracking stays cheap.
fn match_groups(s: &str, groups: &[Group]) -> bool {
    let Some((group, rest_groups)) = groups.split_first() else {
        return s.is_empty();
    };
    let run = s.bytes().take_while(u8::is_ascii_digit).count();
    for k in 1..=run {
        let digits = &s[..k];
        let Some(v) = parse_u64(digits) else {
            break; // longer prefixes overflow too
        };
        if !group.contains(v, digits) {
            continue;
        }
        if let Some(rest) = s[k..].strip_prefix(group.tail.as_str()) {
            if match_groups(rest, rest_groups) {
                return true;
            }
        }
    }
    false
}

fn natural_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 10 {
        v /= 10;
        n += 1;
    }
    n
}

/// Parse ASCII digits into a `u64`; `None` on overflow or a non-digit.
fn parse_u64(digits: &str) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.bytes().try_fold(0u64, |acc, b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// Split the expression into element spans `[start, end)`, validating brackets and commas.
fn split_elements(expr: &str) -> Result<Vec<(usize, usize)>, HostlistError> {
    let bytes = expr.as_bytes();
    let mut spans = Vec::new();
    let mut start: Option<usize> = None;
    let mut open: Option<usize> = None;
    // Whether an element was seen since the last top-level comma (or the beginning).
    let mut seen_element = false;
    let mut seen_comma = false;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' => {
                if open.is_some() {
                    return Err(HostlistError::NestedBracket { offset: i });
                }
                open = Some(i);
                start.get_or_insert(i);
            }
            b']' => {
                if open.is_none() {
                    return Err(HostlistError::UnopenedBracket { offset: i });
                }
                open = None;
            }
            _ if open.is_some() => {}
            b',' => {
                if let Some(s) = start.take() {
                    spans.push((s, i));
                    seen_element = true;
                }
                if !seen_element {
                    return Err(HostlistError::EmptyElement { offset: i });
                }
                seen_element = false;
                seen_comma = true;
            }
            b' ' | b'\t' | b'\n' | b'\r' => {
                if let Some(s) = start.take() {
                    spans.push((s, i));
                    seen_element = true;
                }
            }
            _ => {
                start.get_or_insert(i);
            }
        }
    }
    if let Some(offset) = open {
        return Err(HostlistError::UnclosedBracket { offset });
    }
    if let Some(s) = start {
        spans.push((s, bytes.len()));
        seen_element = true;
    }
    if seen_comma && !seen_element {
        return Err(HostlistError::EmptyElement {
            offset: bytes.len(),
        });
    }
    Ok(spans)
}

/// Parse the ASCII digits in `expr[start..end]`, reporting offsets into `expr`.
fn parse_number(expr: &str, start: usize, end: usize) -> Result<u64, HostlistError> {
    let text = &expr[start..end];
    if let Some(pos) = text.bytes().position(|b| !b.is_ascii_digit()) {
        let found = text[pos..].chars().next().unwrap_or('?');
        return Err(HostlistError::NonDigit {
            offset: start + pos,
            found,
        });
    }
    parse_u64(text).ok_or(HostlistError::NumberOverflow { offset: start })
}

/// Parse the inside of a bracket group, `expr[start..end]` (without the brackets).
fn parse_ranges(expr: &str, start: usize, end: usize) -> Result<Vec<Range>, HostlistError> {
    let mut ranges = Vec::new();
    let mut item_start = start;
    let inner = &expr[start..end];
    for piece in inner.split(',') {
        let item_end = item_start + piece.len();
        if piece.is_empty() {
            return Err(HostlistError::EmptyRange { offset: item_start });
        }
        let (lo_end, hi_start) = match piece.find('-') {
            Some(d) => (item_start + d, Some(item_start + d + 1)),
            None => (item_end, None),
        };
        if lo_end == item_start {
            return Err(HostlistError::MissingBound { offset: item_start });
        }
        let lo = parse_number(expr, item_start, lo_end)?;
        let hi = match hi_start {
            Some(h) if h == item_end => return Err(HostlistError::MissingBound { offset: h }),
            Some(h) => parse_number(expr, h, item_end)?,
            None => lo,
        };
        if lo > hi {
            return Err(HostlistError::ReversedRange {
                offset: item_start,
                lo: expr[item_start..lo_end].to_string(),
                hi: expr[lo_end + 1..item_end].to_string(),
            });
        }
        ranges.push(Range {
            lo,
            hi,
            width: lo_end - item_start,
        });
        item_start = item_end + 1;
    }
    Ok(ranges)
}

fn parse_element(expr: &str, start: usize, end: usize) -> Result<Element, HostlistError> {
    let mut element = Element {
        head: String::new(),
        groups: Vec::new(),
    };
    let mut lit_start = start;
    let mut i = start;
    let bytes = expr.as_bytes();
    while i < end {
        if bytes[i] != b'[' {
            i += 1;
            continue;
        }
        let literal = &expr[lit_start..i];
        match element.groups.last_mut() {
            Some(g) => g.tail.push_str(literal),
            None => element.head.push_str(literal),
        }
        // `split_elements` guarantees a matching `]` inside this element.
        let close = expr[i..end]
            .find(']')
            .map(|p| i + p)
            .ok_or(HostlistError::UnclosedBracket { offset: i })?;
        if close == i + 1 {
            return Err(HostlistError::EmptyRange { offset: close });
        }
        let ranges = parse_ranges(expr, i + 1, close)?;
        element.groups.push(Group::new(ranges));
        i = close + 1;
        lit_start = i;
    }
    let literal = &expr[lit_start..end];
    match element.groups.last_mut() {
        Some(g) => g.tail.push_str(literal),
        None => element.head.push_str(literal),
    }
    Ok(element)
}

/// A parsed hostlist expression: count, expand or test membership without expanding.
///
/// Compile once, then [`matches`](Self::matches) costs a scan of the host name and the
/// ranges of each group, whatever the number of hosts the expression stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostlistPattern {
    elements: Vec<Element>,
}

impl HostlistPattern {
    /// Parse `expr`. No size limit applies: a pattern is never expanded by this call.
    pub fn new(expr: &str) -> Result<Self, HostlistError> {
        let elements = split_elements(expr)?
            .into_iter()
            .map(|(s, e)| parse_element(expr, s, e))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { elements })
    }

    /// Whether `host` is one of the hosts the expression stands for (exact, padding included:
    /// `n[01-04]` matches `n02`, not `n2`).
    pub fn matches(&self, host: &str) -> bool {
        self.elements.iter().any(|e| e.matches(host))
    }

    /// How many hosts the expression stands for, duplicates included; `u128::MAX` if even more.
    pub fn host_count(&self) -> u128 {
        self.elements
            .iter()
            .fold(0u128, |acc, e| acc.saturating_add(e.count()))
    }

    /// Whether the expression stands for no host at all (an empty or blank string).
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// Expand into host names in Slurm's order, refusing more than `limit` hosts before
    /// allocating anything.
    pub fn expand_with_limit(&self, limit: usize) -> Result<Vec<String>, HostlistError> {
        let count = self.host_count();
        if count > limit as u128 {
            return Err(HostlistError::TooManyHosts { count, limit });
        }
        // Fits in usize: bounded by `limit`.
        let mut out = Vec::with_capacity(count as usize);
        for element in &self.elements {
            element.expand_into(&mut out);
        }
        Ok(out)
    }
}

impl FromStr for HostlistPattern {
    type Err = HostlistError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

/// Expand a hostlist expression into host names, in Slurm's order, duplicates kept.
///
/// Refuses expressions of more than [`MAX_HOSTS`] hosts; see [`expand_with_limit`].
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    expand_with_limit(expr, MAX_HOSTS)
}

/// [`expand`] with an explicit bound on the number of hosts.
pub fn expand_with_limit(expr: &str, limit: usize) -> Result<Vec<String>, HostlistError> {
    HostlistPattern::new(expr)?.expand_with_limit(limit)
}

/// How many hosts `expr` stands for, without expanding it (`u128::MAX` if even more).
pub fn count(expr: &str) -> Result<u128, HostlistError> {
    Ok(HostlistPattern::new(expr)?.host_count())
}

/// Whether `host` belongs to the node set `expr`, without expanding it.
///
/// Parses `expr` each call: compile a [`HostlistPattern`] once when testing many hosts.
pub fn contains(expr: &str, host: &str) -> Result<bool, HostlistError> {
    Ok(HostlistPattern::new(expr)?.matches(host))
}

/// A host name cut around its last run of digits: `gpu12-ib` -> (`gpu`, `12`, 12, `-ib`).
///
/// `None` for names without digits, with a number beyond `u64`, or with characters that
/// would be read as hostlist syntax (such names can only be written out as they are).
fn split_last_number(host: &str) -> Option<(&str, &str, u64, &str)> {
    if host
        .bytes()
        .any(|b| matches!(b, b'[' | b']' | b',' | b' ' | b'\t' | b'\n' | b'\r'))
    {
        return None;
    }
    let bytes = host.as_bytes();
    let end = bytes.iter().rposition(u8::is_ascii_digit)? + 1;
    let start = bytes[..end]
        .iter()
        .rposition(|b| !b.is_ascii_digit())
        .map_or(0, |p| p + 1);
    let digits = &host[start..end];
    let value = parse_u64(digits)?;
    Some((&host[..start], digits, value, &host[end..]))
}

/// Consecutive numbers of one family, written with one pad width.
#[derive(Debug, Clone, Copy)]
struct Run {
    lo: u64,
    hi: u64,
    width: usize,
}

/// Append `(value, digits)` to `runs`, extending the last run when `value` follows it and is
/// written the way that run writes its numbers (so expansion gives back the same text).
fn push_number(runs: &mut Vec<Run>, value: u64, digits: &str) {
    if let Some(last) = runs.last_mut() {
        if last.hi.checked_add(1) == Some(value)
            && digits.len() == last.width.max(natural_len(value))
        {
            last.hi = value;
            return;
        }
    }
    runs.push(Run {
        lo: value,
        hi: value,
        width: digits.len(),
    });
}

fn write_family(out: &mut String, prefix: &str, suffix: &str, runs: &[Run]) {
    if !out.is_empty() {
        out.push(',');
    }
    out.push_str(prefix);
    let single = runs.len() == 1 && runs[0].lo == runs[0].hi;
    if !single {
        out.push('[');
    }
    for (i, r) in runs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{:0w$}", r.lo, w = r.width);
        if r.hi != r.lo {
            let _ = write!(out, "-{:0w$}", r.hi, w = r.width);
        }
    }
    if !single {
        out.push(']');
    }
    out.push_str(suffix);
}

fn write_plain(out: &mut String, host: &str) {
    if !out.is_empty() {
        out.push(',');
    }
    out.push_str(host);
}

/// Compress host names into a hostlist expression, keeping their order exactly, as
/// `scontrol show hostlist` does: `n1,n2,n3,n7` -> `n[1-3,7]`, `n1,n3,n2` -> `n[1,3,2]`.
///
/// Neighbouring names that differ only in their last number (same prefix and suffix:
/// `gpu1-ib,gpu2-ib` -> `gpu[1-2]-ib`) share one bracket group, and consecutive numbers
/// written with the same zero padding become ranges (`n08,n09,n10` -> `n[08-10]`).
/// Names without digits stay as they are. Runs in linear time.
///
/// Guarantee: `expand(&compress(&hosts)) == hosts` for any list of names free of `[`, `]`,
/// `,` and whitespace (names with those characters are written unchanged and cannot
/// round-trip). Use [`compress_sorted`] for the shortest form when order does not matter.
pub fn compress<S: AsRef<str>>(hosts: &[S]) -> String {
    let mut out = String::new();
    // The family being built: (prefix, suffix, runs).
    let mut current: Option<(&str, &str, Vec<Run>)> = None;
    for host in hosts {
        let host = host.as_ref();
        match split_last_number(host) {
            Some((prefix, digits, value, suffix)) => {
                if let Some((p, s, runs)) = current.as_mut() {
                    if *p == prefix && *s == suffix {
                        push_number(runs, value, digits);
                        continue;
                    }
                }
                if let Some((p, s, runs)) = current.take() {
                    write_family(&mut out, p, s, &runs);
                }
                let mut runs = Vec::new();
                push_number(&mut runs, value, digits);
                current = Some((prefix, suffix, runs));
            }
            None => {
                if let Some((p, s, runs)) = current.take() {
                    write_family(&mut out, p, s, &runs);
                }
                write_plain(&mut out, host);
            }
        }
    }
    if let Some((p, s, runs)) = current {
        write_family(&mut out, p, s, &runs);
    }
    out
}

/// The shortest expression for a set of hosts, like `scontrol show hostlistsorted`:
/// names are grouped by prefix and suffix around their last number, groups keep the order
/// in which they first appear, numbers are sorted inside each group. Duplicates are kept
/// (as Slurm keeps them). `n3,a1,n1,n2` -> `n[1-3],a1`. Linear apart from the sort.
///
/// The expansion holds the same names (as a multiset), not necessarily in the same order.
pub fn compress_sorted<S: AsRef<str>>(hosts: &[S]) -> String {
    enum Family<'a> {
        Numbered(&'a str, &'a str, Vec<(u64, &'a str)>),
        Plain(&'a str, usize),
    }
    let mut families: Vec<Family<'_>> = Vec::new();
    let mut index: HashMap<(bool, &str, &str), usize> = HashMap::new();
    for host in hosts {
        let host = host.as_ref();
        match split_last_number(host) {
            Some((prefix, digits, value, suffix)) => {
                let i = *index.entry((true, prefix, suffix)).or_insert_with(|| {
                    families.push(Family::Numbered(prefix, suffix, Vec::new()));
                    families.len() - 1
                });
                if let Family::Numbered(_, _, items) = &mut families[i] {
                    items.push((value, digits));
                }
            }
            None => {
                let i = *index.entry((false, host, "")).or_insert_with(|| {
                    families.push(Family::Plain(host, 0));
                    families.len() - 1
                });
                if let Family::Plain(_, n) = &mut families[i] {
                    *n += 1;
                }
            }
        }
    }
    let mut out = String::new();
    for family in &mut families {
        match family {
            Family::Numbered(prefix, suffix, items) => {
                items.sort_unstable_by_key(|&(v, d)| (v, d.len()));
                let mut runs = Vec::new();
                for &(v, d) in items.iter() {
                    push_number(&mut runs, v, d);
                }
                write_family(&mut out, prefix, suffix, &runs);
            }
            Family::Plain(host, n) => {
                for _ in 0..*n {
                    write_plain(&mut out, host);
                }
            }
        }
    }
    out
}

/// Parse Slurm's `SLURM_TASKS_PER_NODE` syntax: `8(x4),4` -> `[8, 8, 8, 8, 4]`.
///
/// Refuses lists longer than [`MAX_HOSTS`] entries before allocating them; see
/// [`parse_tasks_per_node_with_limit`].
pub fn parse_tasks_per_node(s: &str) -> Result<Vec<u32>, HostlistError> {
    parse_tasks_per_node_with_limit(s, MAX_HOSTS)
}

/// [`parse_tasks_per_node`] with an explicit bound on the number of entries (nodes).
pub fn parse_tasks_per_node_with_limit(s: &str, limit: usize) -> Result<Vec<u32>, HostlistError> {
    let invalid = |offset, reason| HostlistError::InvalidTasksPerNode { offset, reason };
    // First pass: validate and count, so a huge repeat is refused before allocating.
    let mut items: Vec<(u32, u64)> = Vec::new();
    let mut total: u128 = 0;
    let mut offset = 0;
    if s.trim().is_empty() {
        return Err(invalid(0, "the list is empty"));
    }
    for piece in s.split(',') {
        let piece_start = offset;
        offset += piece.len() + 1;
        let (count_text, repeat_text) = match piece.find('(') {
            Some(p) => (&piece[..p], Some((piece_start + p, &piece[p..]))),
            None => (piece, None),
        };
        if count_text.is_empty() {
            return Err(invalid(piece_start, "a task count is missing"));
        }
        let tasks =
            parse_number(s, piece_start, piece_start + count_text.len()).map_err(|e| match e {
                HostlistError::NonDigit { offset, .. } => {
                    invalid(offset, "only digits, `(xN)` and ',' are allowed")
                }
                other => other,
            })?;
        let tasks = u32::try_from(tasks).map_err(|_| HostlistError::NumberOverflow {
            offset: piece_start,
        })?;
        let repeat = match repeat_text {
            None => 1,
            Some((at, text)) => {
                let inner = text
                    .strip_prefix("(x")
                    .and_then(|t| t.strip_suffix(')'))
                    .ok_or_else(|| {
                        invalid(at, "a repeat must be written `(xN)` right after the count")
                    })?;
                let n = parse_u64(inner).ok_or_else(|| {
                    if !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_digit()) {
                        HostlistError::NumberOverflow { offset: at + 2 }
                    } else {
                        invalid(at + 2, "the repeat count in `(xN)` must be a number")
                    }
                })?;
                if n == 0 {
                    return Err(invalid(at + 2, "a repeat count of 0 is meaningless"));
                }
                n
            }
        };
        total = total.saturating_add(u128::from(repeat));
        if total > limit as u128 {
            return Err(HostlistError::TooManyHosts {
                count: total,
                limit,
            });
        }
        items.push((tasks, repeat));
    }
    // Bounded by `limit` above.
    let mut out = Vec::with_capacity(total as usize);
    for (tasks, repeat) in items {
        out.extend(std::iter::repeat_n(tasks, repeat as usize));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn ex(expr: &str) -> Vec<String> {
        expand(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    #[test]
    fn expands_like_slurm() {
        // Expected values checked against `scontrol show hostnames` (Slurm 22.05).
        assert_eq!(
            ex("node[098-101]"),
            ["node098", "node099", "node100", "node101"]
        );
        assert_eq!(ex("n[8-11]"), ["n8", "n9", "n10", "n11"]);
        assert_eq!(ex("n[01-3]"), ["n01", "n02", "n03"]);
        assert_eq!(ex("n[1-010]").len(), 10);
        assert_eq!(ex("n[1-010]")[9], "n10");
        assert_eq!(ex("n[1-2,01]"), ["n1", "n2", "n01"]);
        assert_eq!(ex("n[5]"), ["n5"]);
        assert_eq!(ex("[1-2]"), ["1", "2"]);
        assert_eq!(ex("n[0-2]"), ["n0", "n1", "n2"]);
        assert_eq!(ex("a b"), ["a", "b"]);
        assert_eq!(ex("a[1-2],b3"), ["a1", "a2", "b3"]);
        assert_eq!(ex("n[1-2][3-4]"), ["n13", "n14", "n23", "n24"]);
        assert_eq!(
            ex("rack[1-2]-node[01-02]"),
            [
                "rack1-node01",
                "rack1-node02",
                "rack2-node01",
                "rack2-node02"
            ]
        );
    }

    #[test]
    fn expands_lists_suffixes_and_top_level_commas() {
        assert_eq!(
            ex("n[1-3,7,10-12]"),
            ["n1", "n2", "n3", "n7", "n10", "n11", "n12"]
        );
        assert_eq!(
            ex("gpu[1-4]-ib"),
            ["gpu1-ib", "gpu2-ib", "gpu3-ib", "gpu4-ib"]
        );
        assert_eq!(ex("a[1-2],b3,c[5-6]"), ["a1", "a2", "b3", "c5", "c6"]);
        assert_eq!(ex("a3h-[0001-0003]"), ["a3h-0001", "a3h-0002", "a3h-0003"]);
        assert_eq!(ex("login"), ["login"]);
        assert_eq!(ex("a, b ,c"), ["a", "b", "c"]);
        assert_eq!(ex(""), Vec::<String>::new());
        assert_eq!(ex("  "), Vec::<String>::new());
        assert_eq!(ex("n[1-2],n1"), ["n1", "n2", "n1"]);
        assert_eq!(ex("r[1-2]x[1,3]y"), ["r1x1y", "r1x3y", "r2x1y", "r2x3y"]);
        assert_eq!(ex("héte[1-2]"), ["héte1", "héte2"]);
    }

    #[test]
    fn errors_carry_offset_and_kind() {
        use HostlistError as E;
        let err = |s: &str| expand(s).expect_err(s);
        assert_eq!(err("n[1-2"), E::UnclosedBracket { offset: 1 });
        assert_eq!(err("n1-2]"), E::UnopenedBracket { offset: 4 });
        assert_eq!(err("n[1-[2]]"), E::NestedBracket { offset: 4 });
        assert_eq!(err("n[]"), E::EmptyRange { offset: 2 });
        assert_eq!(err("a[1,,2]"), E::EmptyRange { offset: 4 });
        assert_eq!(err("a[1,]"), E::EmptyRange { offset: 4 });
        assert_eq!(err("a[1-]"), E::MissingBound { offset: 4 });
        assert_eq!(err("a[-3]"), E::MissingBound { offset: 2 });
        assert_eq!(
            err("x,a[3-1]"),
            E::ReversedRange {
                offset: 4,
                lo: "3".into(),
                hi: "1".into()
            }
        );
        assert_eq!(
            err("a[1-x]"),
            E::NonDigit {
                offset: 4,
                found: 'x'
            }
        );
        assert_eq!(
            err("a[1-2-3]"),
            E::NonDigit {
                offset: 5,
                found: '-'
            }
        );
        assert_eq!(
            err("a[1 ,2]"),
            E::NonDigit {
                offset: 3,
                found: ' '
            }
        );
        assert_eq!(
            err("a[é]"),
            E::NonDigit {
                offset: 2,
                found: 'é'
            }
        );
        assert_eq!(err("a,,b"), E::EmptyElement { offset: 2 });
        assert_eq!(err(",a"), E::EmptyElement { offset: 0 });
        assert_eq!(err("a,"), E::EmptyElement { offset: 2 });
        assert_eq!(err("a, ,b"), E::EmptyElement { offset: 3 });
        assert_eq!(err(","), E::EmptyElement { offset: 0 });
        assert_eq!(
            err("n[1-99999999999999999999]"),
            E::NumberOverflow { offset: 4 }
        );
        assert_eq!(
            err("n[18446744073709551616]"),
            E::NumberOverflow { offset: 2 }
        );
        // u64::MAX itself is a number; the range is just too big.
        assert!(matches!(
            err("n[0-18446744073709551615]"),
            E::TooManyHosts { count, .. } if count == 1u128 << 64
        ));
    }

    #[test]
    fn error_messages_say_where_and_how_to_fix() {
        let msg = expand("a[3-1]").unwrap_err().to_string();
        assert!(msg.contains("byte 2") && msg.contains("`1-3`"), "{msg}");
        let msg = expand("n[1-2").unwrap_err().to_string();
        assert!(msg.contains("byte 1") && msg.contains("']'"), "{msg}");
        assert_eq!(expand("a,,b").unwrap_err().offset(), Some(2));
        assert_eq!(expand("a[1-9999999]").unwrap_err().offset(), None);
    }

    #[test]
    fn size_bound_is_checked_before_allocating() {
        // Would need terabytes if expanded: must fail at once.
        let e = expand("a[1-99999999999]").unwrap_err();
        assert_eq!(
            e,
            HostlistError::TooManyHosts {
                count: 99_999_999_999,
                limit: MAX_HOSTS
            }
        );
        assert!(e.to_string().contains("99999999999 hosts"), "{e}");
        // Products overflowing u128 saturate instead of wrapping.
        let huge = "a[0-18446744073709551615][0-18446744073709551615][0-9]";
        let e = expand(huge).unwrap_err();
        assert_eq!(
            e,
            HostlistError::TooManyHosts {
                count: u128::MAX,
                limit: MAX_HOSTS
            }
        );
        assert!(e.to_string().contains("more than"), "{e}");
        assert_eq!(expand_with_limit("n[1-4]", 4).unwrap().len(), 4);
        assert!(expand_with_limit("n[1-4],m", 4).is_err());
        assert_eq!(expand("n[1-1000000]").unwrap().len(), 1_000_000);
        assert!(expand("n[0-1000000]").is_err());
        assert_eq!(count("a[1-99999999999],b").unwrap(), 100_000_000_000);
    }

    #[test]
    fn compress_matches_scontrol_show_hostlist() {
        // Expected values from `scontrol show hostlist` (Slurm 22.05), except the suffix
        // grouping which Slurm 22.05 does not do.
        assert_eq!(compress(&["n1", "n3", "n2"]), "n[1,3,2]");
        assert_eq!(compress(&["n08", "n09", "n10", "n11"]), "n[08-11]");
        assert_eq!(compress(&["n1", "n01"]), "n[1,01]");
        assert_eq!(compress(&["a1", "b1", "a2"]), "a1,b1,a2");
        assert_eq!(compress(&["n9", "n10"]), "n[9-10]");
        assert_eq!(compress(&["n1", "n1"]), "n[1,1]");
        assert_eq!(compress(&["x", "y", "z"]), "x,y,z");
        assert_eq!(
            compress(&["n1-ib", "n2-ib", "n01", "n001", "n002"]),
            "n[1-2]-ib,n[01,001-002]"
        );
        assert_eq!(
            compress(&["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]),
            "rack1-node[1-2],rack2-node[1-2]"
        );
        assert_eq!(compress(&["n1", "n2", "n3", "n7"]), "n[1-3,7]");
        assert_eq!(compress(&["gpu1-ib", "gpu2-ib", "gpu3-ib"]), "gpu[1-3]-ib");
        assert_eq!(
            compress(&["node098", "node099", "node100", "node101"]),
            "node[098-101]"
        );
        assert_eq!(compress(&["n5"]), "n5");
        assert_eq!(compress::<&str>(&[]), "");
        // A name that is hostlist syntax itself is written unchanged.
        assert_eq!(compress(&["a[1]", "n1", "n2"]), "a[1],n[1-2]");
        // Numbers beyond u64 are kept as literal text.
        assert_eq!(
            compress(&["n99999999999999999999999", "n1"]),
            "n99999999999999999999999,n1"
        );
    }

    #[test]
    fn compress_sorted_matches_hostlistsorted_for_typical_input() {
        assert_eq!(compress_sorted(&["n1", "n3", "n2"]), "n[1-3]");
        assert_eq!(compress_sorted(&["a1", "b1", "a2"]), "a[1-2],b1");
        assert_eq!(compress_sorted(&["n3", "a1", "n1", "n2"]), "n[1-3],a1");
        assert_eq!(compress_sorted(&["n1", "n1"]), "n[1,1]");
        assert_eq!(compress_sorted(&["x", "n2", "x", "n1"]), "x,x,n[1-2]");
        assert_eq!(
            compress_sorted(&["a1b", "a1c", "a2b", "a2c"]),
            "a[1-2]b,a[1-2]c"
        );
    }

    #[test]
    fn round_trips_on_listed_cases() {
        let cases = [
            "node[098-101]",
            "n[1-3,7,10-12]",
            "rack[1-2]-node[01-04]",
            "gpu[1-4]-ib",
            "a[1-2],b3,c[5-6]",
            "n[8-11]",
            "n[1-010],m[007-012]x",
            "a3h-[0001-4096]",
            "login,n[1-2],login2",
            "n[1-2][3-4]",
            "a[1-2]b,a[1-2]c",
            "n[0-0009]",
            "n[18446744073709551610-18446744073709551615]",
        ];
        for case in cases {
            assert_round_trips(case, &ex(case));
        }
    }

    /// What `compress` writes of `hosts` (the expansion of `expr`) expands to `hosts`
    /// again, order kept, whatever the order; so does the sorted unique list (the brief's
    /// property); `compress_sorted` gives back the same hosts, in its own order.
    #[track_caller]
    fn assert_round_trips(expr: &str, hosts: &[String]) {
        assert_eq!(ex(&compress(hosts)), hosts, "{expr}");
        let mut sorted = hosts.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(ex(&compress(&sorted)), sorted, "{expr} sorted");
        let mut grouped = ex(&compress_sorted(hosts));
        grouped.sort();
        let mut all = hosts.to_vec();
        all.sort();
        assert_eq!(grouped, all, "{expr} compress_sorted");
    }

    /// Seeded linear congruential generator: reproducible "random" cases without a crate.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len() as u64) as usize]
        }
    }

    /// A random hostlist expression from realistic pieces.
    fn random_expr(rng: &mut Lcg) -> String {
        let prefixes = ["n", "node", "a3h-", "gpu", "rack", "x1y", ""];
        let suffixes = ["", "", "-ib", ".ib", "z"];
        let mut expr = String::new();
        for e in 0..1 + rng.below(3) {
            if e > 0 {
                expr.push(',');
            }
            expr.push_str(rng.pick(&prefixes));
            for g in 0..1 + rng.below(2) {
                if g > 0 {
                    expr.push_str(rng.pick(&["-", "-node", "x"]));
                }
                expr.push('[');
                for r in 0..1 + rng.below(3) {
                    if r > 0 {
                        expr.push(',');
                    }
                    let width = 1 + rng.below(4) as usize;
                    let lo = rng.below(120);
                    let hi = lo + rng.below(15);
                    let _ = write!(expr, "{lo:0width$}-{hi}");
                }
                expr.push(']');
            }
            expr.push_str(rng.pick(&suffixes));
        }
        expr
    }

    #[test]
    fn property_round_trip_and_membership() {
        let mut rng = Lcg(0x5eed_2026);
        for _ in 0..400 {
            let expr = random_expr(&mut rng);
            let hosts = ex(&expr);
            assert_round_trips(&expr, &hosts);
            // Membership: every member matches, near misses do not.
            let pattern = HostlistPattern::new(&expr).unwrap();
            assert_eq!(pattern.host_count(), hosts.len() as u128);
            let set: HashSet<&str> = hosts.iter().map(String::as_str).collect();
            for h in &hosts {
                assert!(pattern.matches(h), "{expr} should match {h}");
                for probe in [
                    format!("{h}0"),
                    format!("0{h}"),
                    format!("{h}-ib"),
                    h[1..].to_string(),
                ] {
                    assert_eq!(
                        pattern.matches(&probe),
                        set.contains(probe.as_str()),
                        "{expr} vs {probe}"
                    );
                }
            }
        }
    }

    #[test]
    fn property_compress_random_host_lists() {
        let mut rng = Lcg(42);
        let prefixes = ["n", "gpu", "a3h-", "r1-n", ""];
        let suffixes = ["", "-ib", "x"];
        for _ in 0..300 {
            let mut hosts = Vec::new();
            for _ in 0..rng.below(40) {
                let width = rng.below(4) as usize;
                let v = rng.below(30);
                let mut h = String::from(rng.pick(&prefixes));
                let _ = write!(h, "{v:0width$}");
                h.push_str(rng.pick(&suffixes));
                if rng.below(10) == 0 {
                    h = String::from(rng.pick(&["login", "head"]));
                }
                hosts.push(h);
            }
            assert_eq!(ex(&compress(&hosts)), hosts, "{hosts:?}");
            let mut sorted = ex(&compress_sorted(&hosts));
            sorted.sort();
            hosts.sort();
            assert_eq!(sorted, hosts);
        }
    }

    #[test]
    fn pattern_matches_without_expanding() {
        let p = HostlistPattern::new("a3h-[0001-4096]").unwrap();
        assert!(p.matches("a3h-0001") && p.matches("a3h-4096") && p.matches("a3h-0100"));
        assert!(!p.matches("a3h-0000") && !p.matches("a3h-4097") && !p.matches("a3h-100"));
        assert!(!p.matches("a3h-") && !p.matches("a3h-0001x") && !p.matches(""));
        // Far too many hosts to expand, yet matching is instant.
        let big = HostlistPattern::new("n[1-99999999999]").unwrap();
        assert!(big.matches("n12345678901") && !big.matches("n0"));
        assert_eq!(big.host_count(), 99_999_999_999);
        // Digits after a group belong to the tail when the group's padding says so.
        let p = HostlistPattern::new("n[1-3]0").unwrap();
        assert!(p.matches("n10") && p.matches("n30") && !p.matches("n40") && !p.matches("n1"));
        let p = HostlistPattern::new("n[8-11]").unwrap();
        assert!(p.matches("n8") && p.matches("n10") && !p.matches("n08"));
        let p: HostlistPattern = "login,gpu[1-2]-ib".parse().unwrap();
        assert!(p.matches("login") && p.matches("gpu2-ib") && !p.matches("gpu2"));
        assert!(contains("n[1-4]", "n3").unwrap());
        assert!(!contains("n[1-4]", "n5").unwrap());
        assert!(contains("n[1-4", "n3").is_err());
        assert!(HostlistPattern::new("").unwrap().is_empty());
        assert!(!HostlistPattern::new("").unwrap().matches(""));
        // Overlapping and unsorted ranges with different paddings.
        let p = HostlistPattern::new("n[20-30,1-9,01-05,7]").unwrap();
        for h in ["n20", "n30", "n1", "n9", "n01", "n05", "n7", "n25"] {
            assert!(p.matches(h), "{h}");
        }
        for h in ["n0", "n06", "n10", "n19", "n31", "n00", "n020"] {
            assert!(!p.matches(h), "{h}");
        }
        // A number too long for u64 never matches and never panics.
        assert!(!p.matches("gpu999999999999999999999999-ib"));
    }

    #[test]
    fn tasks_per_node() {
        assert_eq!(parse_tasks_per_node("8(x4),4").unwrap(), [8, 8, 8, 8, 4]);
        assert_eq!(parse_tasks_per_node("2").unwrap(), [2]);
        assert_eq!(parse_tasks_per_node("1,2(x2),3").unwrap(), [1, 2, 2, 3]);
        use HostlistError as E;
        let err = |s: &str| parse_tasks_per_node(s).expect_err(s);
        // Malformed text, and the byte offset the error points at.
        for (text, at) in [
            ("", 0),
            ("8,,4", 2),
            ("8(4)", 1),
            ("8(x)", 3),
            ("8(x0)", 3),
            ("4,a", 2),
            ("(x2)", 0),
        ] {
            assert!(
                matches!(err(text), E::InvalidTasksPerNode { offset, .. } if offset == at),
                "{text:?}: {:?}",
                err(text)
            );
        }
        assert_eq!(err("4294967296"), E::NumberOverflow { offset: 0 });
        assert_eq!(
            err("1(x99999999999999999999)"),
            E::NumberOverflow { offset: 3 }
        );
        assert_eq!(
            err("8(x99999999999)"),
            E::TooManyHosts {
                count: 99_999_999_999,
                limit: MAX_HOSTS
            }
        );
        assert_eq!(
            parse_tasks_per_node_with_limit("1(x3)", 3).unwrap().len(),
            3
        );
        assert!(parse_tasks_per_node_with_limit("1(x3),1", 3).is_err());
        let msg = err("8(x4),,4").to_string();
        assert!(msg.contains("byte 6") && msg.contains("8(x4),4"), "{msg}");
    }
}
