//! What a line says besides NCCL's own text: the rank a launcher tagged it with, and
//! whether it reports a failure (a warning, an error, a timeout, a watchdog).

use serde::{Deserialize, Serialize};

/// The rank a launcher put in front of a line, if any:
/// - torchrun and torch's own logs: `[rank3]:` (also inside a longer prefix);
/// - `srun -l`: `3: ` at the start, padded with spaces (`  3: `);
/// - Open MPI's `--tag-output`: `[1,3]<stdout>:` or `<stderr>:`.
///
/// Pure; the line is looked at in its first 200 bytes only.
pub fn launcher_rank(line: &str) -> Option<u32> {
    let head = head(line, 200);
    // `[` by memchr, then a look at what follows: no substring search per line.
    for (i, _) in head.match_indices('[') {
        if let Some(rest) = head[i..].strip_prefix("[rank") {
            let digits = leading_digits(rest);
            if !digits.is_empty() && rest[digits.len()..].starts_with(']') {
                return digits.parse().ok();
            }
        }
    }
    let trimmed = head.trim_start();
    let digits = leading_digits(trimmed);
    if !digits.is_empty() && trimmed[digits.len()..].starts_with(": ") {
        return digits.parse().ok();
    }
    // MPICH's and Intel MPI's `-l` label, `[3] `, before a host token: not NCCL's own
    // `[dev]` (`[0] NCCL INFO`, 2.0's `[0] INFO`, a `[0] file.cc:12 WARN`).
    if let Some(rest) = trimmed.strip_prefix('[') {
        let digits = leading_digits(rest);
        if let Some(after) = rest[digits.len()..].strip_prefix("] ") {
            let next = after.split_whitespace().next().unwrap_or("");
            let nccls_own = ["NCCL", "INFO", "WARN"].contains(&next) || !next.contains(':');
            if !digits.is_empty() && !nccls_own {
                return digits.parse().ok();
            }
        }
    }
    // Open MPI's tag, also behind its `--timestamp-output` date.
    let end = head.find("]<stdout>").or_else(|| head.find("]<stderr>"))?;
    let open = head[..end].rfind('[')?;
    let (_, rank) = head[open + 1..end].split_once(',')?;
    rank.trim().parse().ok()
}

/// The ASCII digits `s` starts with.
fn leading_digits(s: &str) -> &str {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    &s[..n]
}

/// The first `max` bytes of `line`, cut at a character boundary.
fn head(line: &str, max: usize) -> &str {
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

/// `text` without terminal colour and cursor codes (`ESC[36m`, `ESC[0m`): a colour-coded
/// log (rule L3) reads as the plain one. Borrowed when there is none.
pub fn strip_ansi(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\x1b') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        // CSI: ESC [ parameters, ending in a letter; any other escape: one character.
        if chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() || c == '~' {
                    break;
                }
            }
        } else {
            chars.next();
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Whether a host name is one a poster put in place of the real one (rule L7):
/// `<cluster_name>`, `xxxx`, `***`, `REDACTED`, `hostname`. Such a name tells no node
/// from another.
pub fn is_placeholder_host(host: &str) -> bool {
    let h = host.trim();
    let lower = h.to_ascii_lowercase();
    (h.starts_with('<') && h.ends_with('>'))
        || (h.starts_with('*') && h.ends_with('*'))
        || (h.len() >= 2 && h.bytes().all(|b| b"xX*#?.-_".contains(&b)))
        || lower.contains("redacted")
        || matches!(lower.as_str(), "hostname" | "host" | "my-host" | "myhost")
}

/// `2.5.6+cuda10.2` of a bare `NCCL version 2.5.6+cuda10.2` line behind any prefix (rule
/// L6): NCCL up to 2.21 printed it without one of its own, so a launcher's tag is all that
/// can stand before it. Only a dotted version counts.
pub fn bare_version(text: &str) -> Option<&str> {
    let at = text.find("NCCL version ")?;
    let v = text[at + "NCCL version ".len()..]
        .split_whitespace()
        .next()?;
    let v = v.trim_end_matches([',', '.', ')']);
    let numbers = v.split('+').next()?;
    let dotted = numbers.split('.').count() >= 2
        && numbers
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    dotted.then_some(v)
}

/// NCCL 2.29's `[Rank 3] ` before an init line's function name (rule C2), removed.
pub fn strip_rank_tag(msg: &str) -> &str {
    let Some(rest) = msg.strip_prefix("[Rank ") else {
        return msg;
    };
    let digits = leading_digits(rest);
    match rest[digits.len()..].strip_prefix("] ") {
        Some(after) if !digits.is_empty() => after,
        _ => msg,
    }
}

/// A line of NCCL 2.0 to 2.2 (rule L5): `host [dev] file:line WARN msg` or `[dev] INFO
/// msg`, with no `NCCL` token and no pid. The host is what stands before `[dev]`, after any
/// launcher tag; `None` when nothing does.
pub(crate) fn old_form(line: &str) -> Option<crate::transport::DebugLine<'_>> {
    let (level, at) = [" WARN ", " INFO "]
        .iter()
        .find_map(|l| line.find(l).map(|i| (l.trim(), i)))?;
    let before = line[..at].trim_end();
    let message = line[at + 6..].trim();
    // WARN: `... [dev] file.cc:123`; INFO: `... [dev]`.
    let (before, _place) = if level == "WARN" {
        let (rest, place) = before.rsplit_once(' ')?;
        let (file, number) = place.rsplit_once(':')?;
        let source = [".h", ".cc", ".cu", ".cpp"]
            .iter()
            .any(|e| file.ends_with(e));
        if !source || number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        (rest.trim_end(), Some(place))
    } else {
        (before, None)
    };
    let open = before.rfind('[')?;
    let dev = before[open + 1..].strip_suffix(']')?;
    if dev.is_empty() || dev.len() > 3 || !dev.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let host = before[..open].trim();
    // A launcher's tag glued before the host (`[1,0]<stdout>:`, `[rank0]:`).
    let host = match host.rfind([']', '>']) {
        Some(i) if host[i + 1..].starts_with(':') => host[i + 2..].trim(),
        _ => host,
    };
    // An INFO line with text before `[dev]` is a program's log line (`2024-05-01 [1] INFO
    // step 3`) far more often than 2.0's: only the WARN form, with its source place, may
    // carry a host.
    if level == "INFO" && !host.is_empty() {
        return None;
    }
    Some(crate::transport::DebugLine {
        prefix: "",
        host: (!host.is_empty()).then_some(host),
        pid: None,
        device: dev.parse().ok(),
        level,
        message,
    })
}

/// What kind of trouble a line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// `NCCL WARN ...`.
    Warning,
    /// An NCCL error code or a communicator abort (`ncclSystemError`, `NCCL error`,
    /// `DistBackendError`, `communicator was aborted`).
    Error,
    /// A timeout (`timed out`, `Timeout`), from NCCL or from the program.
    Timeout,
    /// torch's watchdog: `Watchdog caught collective operation timeout`.
    Watchdog,
}

impl EventKind {
    /// The word the report uses.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Warning => "warning",
            EventKind::Error => "error",
            EventKind::Timeout => "timeout",
            EventKind::Watchdog => "watchdog",
        }
    }
}

/// The texts that make a line (NCCL's or the program's) an error.
const ERROR_MARKS: [&str; 13] = [
    "NCCL error",
    // nccl-tests' and NCCL's examples' check macros, and ncclGetErrorString's words for
    // ncclSystemError and ncclUnhandledCudaError, as a program prints them.
    "NCCL failure",
    "unhandled system error",
    "unhandled cuda error",
    "ncclInternalError",
    "ncclSystemError",
    "ncclUnhandledCudaError",
    "ncclRemoteError",
    "ncclInvalidUsage",
    "ncclInvalidArgument",
    "DistBackendError",
    "communicator was aborted",
    "NCCL communicator error",
];

/// Whether `text` reports trouble, and which kind: `nccl_level` is the NCCL level of an
/// NCCL line (`INFO`, `WARN`), `None` for the program's own lines. An INFO line is never
/// trouble (NCCL logs "timeout" settings at INFO). Pure.
pub fn classify_event(text: &str, nccl_level: Option<&str>) -> Option<EventKind> {
    if nccl_level.is_some_and(|l| l != "WARN") {
        // An error returned up NCCL's call chain (`init.cc:1358 -> 3`) is logged at INFO.
        return error_return(text).map(|_| EventKind::Error);
    }
    if text.contains("Watchdog caught collective operation timeout") {
        return Some(EventKind::Watchdog);
    }
    if text.contains("timed out") || text.contains("Timeout") || text.contains("timeout:") {
        // A program's line naming a timeout is one only when it also names NCCL or a
        // collective: "Timeout" alone is too common (a retry loop, an HTTP client).
        if nccl_level.is_some()
            || text.contains("NCCL")
            || text.contains("ProcessGroup")
            || text.contains("collective")
        {
            return Some(EventKind::Timeout);
        }
    }
    if ERROR_MARKS.iter().any(|m| text.contains(m)) {
        return Some(EventKind::Error);
    }
    nccl_level.map(|_| EventKind::Warning)
}

/// `init.cc:1358 -> 3`: the place an NCCL call returned an error code, and the code's name.
pub fn error_return(message: &str) -> Option<(&str, &'static str)> {
    // By the last `>` (memchr): most messages have none.
    let message = message.trim();
    let arrow = message.rfind('>')?;
    let place = message[..arrow].strip_suffix(" -")?;
    let code = message[arrow + 1..].strip_prefix(' ')?;
    let (file, line) = place.rsplit_once(':')?;
    let is_source = [".cc", ".cu", ".h", ".cpp"]
        .iter()
        .any(|e| file.ends_with(e));
    if !is_source || line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let name = match code.trim() {
        "1" => "ncclUnhandledCudaError",
        "2" => "ncclSystemError",
        "3" => "ncclInternalError",
        "4" => "ncclInvalidArgument",
        "5" => "ncclInvalidUsage",
        "6" => "ncclRemoteError",
        _ => return None,
    };
    Some((place, name))
}

/// The records of a physical line (rule L8): the line itself, or, where a `host:pid:tid
/// [dev] NCCL INFO|WARN|TRACE` prefix follows two or more spaces inside it, one piece per
/// such start (the padding left at the end of each piece). Cheap on an ordinary line: it
/// looks further only when ` NCCL ` occurs twice.
pub fn glued_records(line: &str) -> Vec<&str> {
    let mut nccl = line.match_indices(" NCCL ");
    if nccl.nth(1).is_none() {
        return vec![line];
    }
    let mut starts = vec![0];
    let bytes = line.as_bytes();
    let mut i = 0;
    while let Some(off) = line[i..].find("  ") {
        let gap = i + off;
        let mut start = gap;
        while start < bytes.len() && bytes[start] == b' ' {
            start += 1;
        }
        if start > gap && start < bytes.len() && is_record_start(&line[start..]) {
            starts.push(start);
        }
        i = start.max(gap + 1);
        if i >= line.len() {
            break;
        }
    }
    starts.push(line.len());
    starts.windows(2).map(|w| &line[w[0]..w[1]]).collect()
}

/// Whether `text` begins with `host:pid:tid [dev] NCCL INFO|WARN|TRACE` (or without the
/// device, `host:pid:tid NCCL ...`).
fn is_record_start(text: &str) -> bool {
    let mut words = text.split(' ');
    let Some(token) = words.next() else {
        return false;
    };
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mut parts = token.rsplitn(3, ':');
    let (tid, pid, host) = (parts.next(), parts.next(), parts.next());
    if !(tid.is_some_and(numeric)
        && pid.is_some_and(numeric)
        && host.is_some_and(|h| !h.is_empty()))
    {
        return false;
    }
    let mut next = words.next();
    if next.is_some_and(|w| w.starts_with('[') && w.ends_with(']')) {
        next = words.next();
    }
    next == Some("NCCL")
        && words
            .next()
            .is_some_and(|l| ["INFO", "WARN", "TRACE"].contains(&l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_of_each_launchers_tag() {
        for (line, rank) in [
            (
                "[rank3]:[W1201 10:00:00] ProcessGroupNCCL.cpp:1 ...",
                Some(3),
            ),
            (
                "[rank12]:node1:31378:31378 [0] NCCL INFO Using network IB",
                Some(12),
            ),
            (
                "  3: node4:100:100 [3] NCCL INFO NCCL version 2.21.5",
                Some(3),
            ),
            ("17: NCCL INFO x", Some(17)),
            ("[1,5]<stdout>:gpu-b:77:77 [5] NCCL INFO Channel", Some(5)),
            ("[1,0]<stderr>: warning", Some(0)),
            (
                "Wed Sep  6 17:26:52 2023[1,7]<stdout>:tomte249:1:1 [7] NCCL INFO x",
                Some(7),
            ),
            ("node1:31378:31378 [0] NCCL INFO NCCL version 2.28.9", None),
            (
                "[3] node2:22556:22556 [1] NCCL INFO cudaDriverVersion 11070",
                Some(3),
            ),
            ("[0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE", None),
            ("[1] INFO init.cu:413 -> 2", None),
            ("12:34:56 node1 hello", None),
            ("[rank]: nothing", None),
            ("[a,b]<stdout>: x", None),
        ] {
            assert_eq!(launcher_rank(line), rank, "{line}");
        }
    }

    #[test]
    fn colour_codes_placeholders_versions_and_old_forms() {
        assert_eq!(
            strip_ansi("\x1b[36m(RayWorker pid=1)\x1b[0m n1:1:1 [0] NCCL INFO x"),
            "(RayWorker pid=1) n1:1:1 [0] NCCL INFO x"
        );
        for h in ["<cluster_name>", "xxxx", "***", "REDACTED", "*server name*"] {
            assert!(is_placeholder_host(h), "{h}");
        }
        for h in ["node1", "gpu34", "64", "ip-10-0-0-1", "x1"] {
            assert!(!is_placeholder_host(h), "{h}");
        }
        assert_eq!(
            bare_version("[1,0]<stdout>:NCCL version 2.5.6+cuda10.2"),
            Some("2.5.6+cuda10.2")
        );
        assert_eq!(bare_version("vLLM is using nccl==2.21.5"), None);
        assert_eq!(bare_version("NCCL version of the day: high"), None);
        assert_eq!(
            strip_rank_tag("[Rank 3] ncclCommInitRank comm 0x1 rank 3"),
            "ncclCommInitRank comm 0x1 rank 3"
        );
        assert_eq!(strip_rank_tag("[Rank x] y"), "[Rank x] y");
        let d =
            old_form("*server name* [0] include/socket.h:185 WARN Call to connect failed").unwrap();
        assert_eq!(
            (d.host, d.device, d.level, d.message),
            (
                Some("*server name*"),
                Some(0),
                "WARN",
                "Call to connect failed"
            )
        );
        let d = old_form("[1] INFO init.cu:413 -> 2").unwrap();
        assert_eq!(
            (d.host, d.device, d.message),
            (None, Some(1), "init.cu:413 -> 2")
        );
        assert!(old_form("2019-02-11 09:47:49,051 46393 INFO     Wrapping").is_none());
        assert!(old_form("[2024] WARN something happened").is_none());
        assert!(old_form("2024-05-01 12:00 [1] INFO step 3 loss 0.2").is_none());
    }

    #[test]
    fn trouble_and_what_is_not() {
        let w = |t: &str, l: Option<&str>| classify_event(t, l);
        assert_eq!(
            w("[rank1]:[E1201 ...] [PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.", None),
            Some(EventKind::Watchdog)
        );
        assert_eq!(
            w(
                "NET/Socket : connect to 10.0.0.2<40000> failed : Connection refused",
                Some("WARN")
            ),
            Some(EventKind::Warning)
        );
        assert_eq!(
            w("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error", None),
            Some(EventKind::Error)
        );
        assert_eq!(
            w("Socket timeout: receive", Some("WARN")),
            Some(EventKind::Timeout)
        );
        assert_eq!(
            w("NCCL_IB_TIMEOUT set by environment to 22.", Some("INFO")),
            None
        );
        assert_eq!(w("requests: read timed out, retrying", None), None);
        assert_eq!(w("epoch 3 loss 0.12", None), None);
        assert_eq!(w("init.cc:1358 -> 3", Some("INFO")), Some(EventKind::Error));
        assert_eq!(
            error_return("transport/net_socket.cc:336 -> 2"),
            Some(("transport/net_socket.cc:336", "ncclSystemError"))
        );
        assert_eq!(error_return("Channel 00 : 0 -> 1"), None);
        assert_eq!(
            w("NCCL_IB_TIMEOUT set by environment to 22.", Some("INFO")),
            None
        );
    }
}
