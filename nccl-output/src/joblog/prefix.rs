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
    if let Some(rest) = trimmed.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let (_, rank) = inside.split_once(',')?;
        if after.starts_with("<stdout>") || after.starts_with("<stderr>") {
            return rank.trim().parse().ok();
        }
    }
    None
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
const ERROR_MARKS: [&str; 10] = [
    "NCCL error",
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
            ("node1:31378:31378 [0] NCCL INFO NCCL version 2.28.9", None),
            ("12:34:56 node1 hello", None),
            ("[rank]: nothing", None),
            ("[a,b]<stdout>: x", None),
        ] {
            assert_eq!(launcher_rank(line), rank, "{line}");
        }
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
