//! Failure lines: what nccl-tests, MPI and Slurm print when a run goes wrong.
//!
//! nccl-tests reports through `printf` macros in `common.h`/`common.cu`:
//! `" .. <host> pid <P>: Test failure <file>:<line>"` (every level of the unwinding),
//! `"<host>: Test timeout (<N>s) <file>:<line>"`, `"<host>: Test CUDA failure ..."`,
//! `"<host>: Test NCCL failure ..."`; usage errors go to stderr without a prefix.
//! Open MPI prints banners between dashed lines when a rank exits non-zero.

use serde::{Deserialize, Serialize};

/// What kind of failure a line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// ` .. host pid P: Test failure file:line` (unwinding of any error).
    TestFailure,
    /// `host: Test timeout (Ns) file:line` (`-T`, exit code 4).
    Timeout,
    /// `host: Test CUDA failure file:line 'msg'` (exit code 2).
    CudaFailure,
    /// `host: Test NCCL failure file:line 'msg'` (exit code 3).
    NcclFailure,
    /// `Invalid number of GPUs: N requested but only M were found.` (exit code 5).
    InvalidGpuCount,
    /// Bad arguments: `invalid sizes for 'minbytes' and 'maxbytes'`, `invalid option`,
    /// `Incompatible NCCL versions`, ... (exit code 6 or 255).
    InvalidArgument,
    /// `# Out of bounds values : N FAILED` (wrong results, exit code 7).
    OutOfBounds,
    /// `# Avg bus bandwidth : X FAILED` (below `NCCL_TESTS_MIN_BW`, exit code 7).
    BelowMinBandwidth,
    /// `# error: msg` or a JSON `errors` entry: NCCL's last error.
    ReportedError,
    /// An Open MPI abort banner (`mpirun has exited due to ...`, `Primary job terminated
    /// normally, but 1 process returned a non-zero exit code`, `MPI_ABORT was invoked`,
    /// `mpirun detected that one or more processes exited with non-zero status`).
    MpiAbort,
    /// `srun: error: ...` (a task exited non-zero, a node failed, a step timed out).
    SrunError,
}

/// One failure line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// What it reports.
    pub kind: FailureKind,
    /// The host named in the line, if any.
    pub host: Option<String>,
    /// The pid named in the line, if any.
    pub pid: Option<u32>,
    /// Source location in nccl-tests (`common.cu:1454`), if any.
    pub location: Option<String>,
    /// The `-T` limit for timeouts, in seconds.
    pub timeout_s: Option<u64>,
    /// Exit code, where the line (or its MPI banner) gives one.
    pub exit_code: Option<i32>,
    /// The line as printed (trimmed).
    pub text: String,
    /// 1-based line number (0 for JSON).
    pub line: usize,
}

impl Failure {
    pub(crate) fn new(kind: FailureKind, text: &str, line: usize) -> Self {
        Failure {
            kind,
            host: None,
            pid: None,
            location: None,
            timeout_s: None,
            exit_code: None,
            text: text.trim().to_string(),
            line,
        }
    }
}

/// Classify one line that is neither a `#` line, a table row nor an NCCL debug line.
/// Returns `None` for lines that report no failure.
pub(crate) fn classify_line(raw: &str, line: usize) -> Option<Failure> {
    let t = raw.trim();
    if t.is_empty() {
        return None;
    }
    if let Some(idx) = t.find(": Test failure ") {
        // " .. host pid P: Test failure file:line"
        let mut f = Failure::new(FailureKind::TestFailure, t, line);
        let head = t[..idx].trim_start_matches(['.', ' ']);
        let mut words = head.split_whitespace();
        f.host = words.next().map(str::to_string);
        if words.next() == Some("pid") {
            f.pid = words.next().and_then(|p| p.parse().ok());
        }
        f.location = t[idx + ": Test failure ".len()..]
            .split_whitespace()
            .next()
            .map(str::to_string);
        return Some(f);
    }
    for (needle, kind) in [
        (": Test timeout (", FailureKind::Timeout),
        (": Test CUDA failure ", FailureKind::CudaFailure),
        (": Test NCCL failure ", FailureKind::NcclFailure),
    ] {
        if let Some(idx) = t.find(needle) {
            let mut f = Failure::new(kind, t, line);
            f.host = Some(t[..idx].trim().to_string()).filter(|h| !h.is_empty());
            let rest = &t[idx + needle.len()..];
            if kind == FailureKind::Timeout {
                // "(600s) common.cu:523": the number is up to the 's)'.
                let secs: String = rest.chars().take_while(char::is_ascii_digit).collect();
                f.timeout_s = secs.parse().ok();
                f.location = rest
                    .split_once(')')
                    .and_then(|(_, r)| r.split_whitespace().next())
                    .map(str::to_string);
            } else {
                f.location = rest.split_whitespace().next().map(str::to_string);
            }
            return Some(f);
        }
    }
    if t.starts_with("Invalid number of GPUs") {
        return Some(Failure::new(FailureKind::InvalidGpuCount, t, line));
    }
    let lower = t.to_ascii_lowercase();
    if lower.starts_with("invalid sizes for")
        || lower.starts_with("invalid size specified")
        || lower.starts_with("invalid option")
        || lower.starts_with("incompatible nccl versions")
        || (lower.starts_with("option -") && lower.contains("requires"))
    {
        return Some(Failure::new(FailureKind::InvalidArgument, t, line));
    }
    // Open MPI pads some banner lines with double spaces: compare word by word.
    let words: Vec<&str> = t.split_whitespace().collect();
    let joined = words.join(" ");
    if joined.starts_with("mpirun has exited due to")
        || joined.starts_with("Primary job terminated normally, but")
        || joined.contains("MPI_ABORT was invoked")
        || joined.starts_with("mpirun detected that one or more processes exited")
        || joined.starts_with("mpirun noticed that process rank")
    {
        let mut f = Failure::new(FailureKind::MpiAbort, t, line);
        // "mpirun noticed that process rank 0 with PID 123 on node h1 exited on signal 9"
        if let Some(i) = words.iter().position(|w| *w == "node") {
            f.host = words.get(i + 1).map(|h| h.to_string());
        }
        if let Some(i) = words.iter().position(|w| *w == "PID") {
            f.pid = words.get(i + 1).and_then(|p| p.parse().ok());
        }
        return Some(f);
    }
    if let Some(rest) = t.strip_prefix("srun: error: ") {
        let mut f = Failure::new(FailureKind::SrunError, t, line);
        // "srun: error: node1: task 0: Exited with exit code 5"
        if let Some((host, tail)) = rest.split_once(": ") {
            if !host.contains(' ') {
                f.host = Some(host.to_string());
            }
            if let Some(code) = tail
                .rsplit("exit code ")
                .next()
                .filter(|_| tail.contains("exit code "))
            {
                f.exit_code = code.trim().parse().ok();
            }
        }
        return Some(f);
    }
    None
}

/// `  Exit code:    5` inside an Open MPI banner.
pub(crate) fn mpi_banner_exit_code(raw: &str) -> Option<i32> {
    raw.trim().strip_prefix("Exit code:")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_failure_line_gives_host_pid_location() {
        let f = classify_line(" .. vm pid 3473: Test failure common.cu:1454", 7).unwrap();
        assert_eq!(f.kind, FailureKind::TestFailure);
        assert_eq!(f.host.as_deref(), Some("vm"));
        assert_eq!(f.pid, Some(3473));
        assert_eq!(f.location.as_deref(), Some("common.cu:1454"));
        assert_eq!(f.line, 7);
    }

    #[test]
    fn timeout_line_gives_seconds() {
        let f = classify_line("a3h-001: Test timeout (30s) common.cu:523", 1).unwrap();
        assert_eq!(f.kind, FailureKind::Timeout);
        assert_eq!(f.host.as_deref(), Some("a3h-001"));
        assert_eq!(f.timeout_s, Some(30));
        assert_eq!(f.location.as_deref(), Some("common.cu:523"));
    }

    #[test]
    fn mpi_banner_with_double_space_is_recognised() {
        let f = classify_line(
            "Primary job  terminated normally, but 1 process returned",
            3,
        )
        .unwrap();
        assert_eq!(f.kind, FailureKind::MpiAbort);
        assert_eq!(mpi_banner_exit_code("  Exit code:    5"), Some(5));
    }

    #[test]
    fn srun_error_gives_host_and_code() {
        let f = classify_line("srun: error: node2: task 1: Exited with exit code 7", 9).unwrap();
        assert_eq!(f.kind, FailureKind::SrunError);
        assert_eq!(f.host.as_deref(), Some("node2"));
        assert_eq!(f.exit_code, Some(7));
    }

    #[test]
    fn ordinary_lines_are_not_failures() {
        assert!(classify_line(
            "Please check the number of processes and GPUs per process.",
            1
        )
        .is_none());
        assert!(classify_line("", 1).is_none());
    }
}
