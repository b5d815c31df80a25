//! Runs one external command (srun, mpirun, an nccl-tests binary) the way a matrix needs:
//! in its own process group, with stdout and stderr drained at the same time (a full pipe
//! can never block it), a deadline after which the whole group gets SIGTERM, a grace
//! period, then SIGKILL, and a cancel flag (Ctrl-C) that does the same. "Timed out" and
//! "interrupted" are outcomes of their own, not generic failures. A [`StartWatch`] adds an
//! earlier deadline for the command to show it started (a line of its output), after which
//! the group is stopped the same way with [`Outcome::NotStarted`] (issue #45: a launch that
//! hangs before NCCL is cut at its start-up deadline, not at the cell's whole timeout).

use nix::sys::signal::{killpg, sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the runner looks at the child, the deadline and the cancel flag.
const POLL: Duration = Duration::from_millis(20);

/// What to run.
#[derive(Debug, Clone)]
pub struct Job {
    /// The program (looked up on PATH when it has no `/`).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables added to the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory, if not ours.
    pub cwd: Option<PathBuf>,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Time between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Run as this (uid, gid) instead of ours, without our supplementary groups: root
    /// starting a step inside another user's job ([`crate::slurm::JobInfo::step_user`]).
    pub user: Option<(u32, u32)>,
}

impl Job {
    /// The command line, shell-quoted where needed, for logs and records.
    pub fn command_line(&self) -> String {
        std::iter::once(&self.program)
            .chain(self.args.iter())
            .map(|a| shell_quote(&a.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Quotes a word for display as a shell would need it.
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=,:+@%".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// It exited by itself with this code.
    Exited {
        /// The exit code.
        code: i32,
    },
    /// A signal we did not send ended it.
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// It ran past its deadline and was stopped.
    TimedOut,
    /// The cancel flag was raised (Ctrl-C) and it was stopped.
    Interrupted,
    /// Its [`StartWatch`] saw no line showing it started within the start-up deadline, and
    /// it was stopped.
    NotStarted,
}

impl Outcome {
    /// The exit code, when it exited by itself.
    pub fn exit_code(self) -> Option<i32> {
        match self {
            Outcome::Exited { code } => Some(code),
            _ => None,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Exited { code } => write!(f, "exit code {code}"),
            Outcome::Signaled { signal } => write!(f, "killed by signal {signal}"),
            Outcome::TimedOut => f.write_str("timed out"),
            Outcome::Interrupted => f.write_str("interrupted"),
            Outcome::NotStarted => f.write_str("not started within its start-up deadline"),
        }
    }
}

/// A finished command.
#[derive(Debug, Clone)]
pub struct Finished {
    /// How it ended.
    pub outcome: Outcome,
    /// What it wrote to stdout (all of it, unless [`run_capped`] cut it).
    pub stdout: Vec<u8>,
    /// Bytes of stdout past [`run_capped`]'s cap: read and dropped.
    pub stdout_dropped: u64,
    /// Everything it wrote to stderr.
    pub stderr: Vec<u8>,
    /// Wall-clock time.
    pub elapsed: Duration,
}

/// The command could not be started.
#[derive(Debug, thiserror::Error)]
#[error("could not start `{command}`: {source}")]
pub struct StartError {
    /// The command line.
    pub command: String,
    /// The cause.
    pub source: std::io::Error,
}

/// A deadline for a command to show that it started: a line of its stdout or stderr for
/// which `started` holds must come within `within` of the start, or the whole group is
/// stopped as at its timeout, and the outcome is [`Outcome::NotStarted`].
#[derive(Debug, Clone, Copy)]
pub struct StartWatch {
    /// How long the command may take to print its start line.
    pub within: Duration,
    /// Whether a line (without its newline) shows the start.
    pub started: fn(&str) -> bool,
}

/// The longest line a [`StartWatch`] looks at; the rest of a longer one is not read.
const MAX_WATCHED_LINE: usize = 64 << 10;

/// What a stream's reader looks for: a line that shows the start, and the flag it raises
/// then (shared by stdout's and stderr's readers).
type Watcher = (fn(&str) -> bool, Arc<AtomicBool>);

/// Looks at each line of a stream until one shows the start, then at nothing more.
struct LineWatch {
    watch: Option<Watcher>,
    line: Vec<u8>,
}

impl LineWatch {
    fn feed(&mut self, bytes: &[u8]) {
        let Some((started, seen)) = &self.watch else {
            return;
        };
        if seen.load(Ordering::SeqCst) {
            // The other stream saw it: nothing more to look for.
            self.watch = None;
            self.line = Vec::new();
            return;
        }
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let room = MAX_WATCHED_LINE.saturating_sub(self.line.len());
            self.line.extend_from_slice(&piece[..piece.len().min(room)]);
            if piece.ends_with(b"\n") {
                if started(String::from_utf8_lossy(&self.line).trim_end()) {
                    seen.store(true, Ordering::SeqCst);
                    self.watch = None;
                    self.line = Vec::new();
                    return;
                }
                self.line.clear();
            }
        }
    }
}

/// Reads `pipe` to its end, keeping the first `cap` bytes; the rest is read (so the writer
/// never blocks) and counted, not kept. `watch` is shown every line as it comes.
fn drain_capped(
    mut pipe: impl Read + Send + 'static,
    cap: usize,
    watch: Option<Watcher>,
) -> JoinHandle<(Vec<u8>, u64)> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut dropped = 0u64;
        let mut lines = LineWatch {
            watch,
            line: Vec::new(),
        };
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            let n = match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // A read error ends the stream; what was read is kept.
                Err(_) => break,
            };
            let bytes = &chunk[..n];
            lines.feed(bytes);
            let room = cap.saturating_sub(kept.len()).min(n);
            kept.extend_from_slice(&bytes[..room]);
            dropped += (n - room) as u64;
        }
        (kept, dropped)
    })
}

fn signal_group(child: &Child, signal: Signal) {
    // The child leads its own group (process_group(0)), so its pid names the group. A
    // group already gone (ESRCH) is what we wanted.
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

/// Runs `job` to the end, its deadline, or `cancel`.
pub fn run(job: &Job, cancel: &AtomicBool) -> Result<Finished, StartError> {
    run_with(job, cancel, &mut || {})
}

/// [`run`], keeping at most `cap` bytes of stdout: the rest is read and dropped, and
/// [`Finished::stdout_dropped`] says how much (output from many nodes, bounded).
pub fn run_capped(job: &Job, cancel: &AtomicBool, cap: usize) -> Result<Finished, StartError> {
    run_inner(job, cancel, &mut || {}, cap, None)
}

/// [`run_with`], stopped early with [`Outcome::NotStarted`] when no line of its output shows
/// the start (`watch`) within `watch.within`.
pub fn run_watched(
    job: &Job,
    cancel: &AtomicBool,
    at_deadline: &mut dyn FnMut(),
    watch: StartWatch,
) -> Result<Finished, StartError> {
    run_inner(job, cancel, at_deadline, usize::MAX, Some(watch))
}

/// [`run`], calling `at_deadline` once when the job passes its deadline, while it still
/// runs and before its group is stopped: what a hung job can still tell (NCCL's RAS) is
/// asked then. The call's own time comes before the SIGTERM; output keeps being drained.
pub fn run_with(
    job: &Job,
    cancel: &AtomicBool,
    at_deadline: &mut dyn FnMut(),
) -> Result<Finished, StartError> {
    run_inner(job, cancel, at_deadline, usize::MAX, None)
}

fn run_inner(
    job: &Job,
    cancel: &AtomicBool,
    at_deadline: &mut dyn FnMut(),
    stdout_cap: usize,
    watch: Option<StartWatch>,
) -> Result<Finished, StartError> {
    let start = Instant::now();
    let mut command = Command::new(&job.program);
    command
        .args(&job.args)
        .envs(job.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = &job.cwd {
        command.current_dir(dir);
    }
    if let Some((uid, gid)) = job.user {
        // std drops the supplementary groups when root sets a uid.
        command.uid(uid).gid(gid);
    }
    // The child is told when we die: a gpudirect killed outright (slurmd's SIGKILL of a
    // health check past its time, security review S2) leaves no program of its own
    // running, in a process group nobody signals. SIGTERM, not SIGKILL: srun then ends its
    // step as on Ctrl-C, and the allocation's nodes are free at once. The thread that
    // spawns is the one that waits, so the signal (sent when that thread ends) never
    // comes early.
    // SAFETY: prctl is async-signal-safe and touches only the new process.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)
        });
    }
    let mut child = command.spawn().map_err(|source| StartError {
        command: job.command_line(),
        source,
    })?;
    let seen = Arc::new(AtomicBool::new(false));
    let watching = || watch.map(|w| (w.started, Arc::clone(&seen)));
    let stdout = child
        .stdout
        .take()
        .map(|pipe| drain_capped(pipe, stdout_cap, watching()));
    let stderr = child
        .stderr
        .take()
        .map(|pipe| drain_capped(pipe, usize::MAX, watching()));

    let mut stopping: Option<(Outcome, Instant)> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(_) => break None,
        }
        let now = Instant::now();
        match stopping {
            None => {
                let why = if cancel.load(Ordering::SeqCst) {
                    Some(Outcome::Interrupted)
                } else if now.duration_since(start) >= job.timeout {
                    Some(Outcome::TimedOut)
                } else if watch.is_some_and(|w| {
                    now.duration_since(start) >= w.within && !seen.load(Ordering::SeqCst)
                }) {
                    Some(Outcome::NotStarted)
                } else {
                    None
                };
                if let Some(why) = why {
                    if why == Outcome::TimedOut {
                        at_deadline();
                    }
                    tracing::warn!(command = %job.command_line(), outcome = ?why, "stopping the process group (SIGTERM)");
                    signal_group(&child, Signal::SIGTERM);
                    stopping = Some((why, now));
                }
            }
            Some((_, since)) if now.duration_since(since) >= job.grace => {
                signal_group(&child, Signal::SIGKILL);
            }
            Some(_) => {}
        }
        std::thread::sleep(POLL);
    };
    // The leader is gone; anything left in its group goes too, so no stray process keeps
    // our pipes (and the drain threads) open.
    signal_group(&child, Signal::SIGKILL);
    let (stdout, stdout_dropped) = stdout.and_then(|h| h.join().ok()).unwrap_or_default();
    let (stderr, _) = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    let outcome = match (stopping, status) {
        (Some((why, _)), _) => why,
        // Ctrl-C reaches the whole foreground group: the child (srun) may end of it before
        // we look at the flag. The cell was still interrupted, not failed.
        (None, _) if cancel.load(Ordering::SeqCst) => Outcome::Interrupted,
        (None, Some(status)) => match (status.code(), status.signal()) {
            (Some(code), _) => Outcome::Exited { code },
            (None, Some(signal)) => Outcome::Signaled { signal },
            (None, None) => Outcome::Signaled { signal: 0 },
        },
        (None, None) => Outcome::Signaled { signal: 0 },
    };
    Ok(Finished {
        outcome,
        stdout,
        stdout_dropped,
        stderr,
        elapsed: start.elapsed(),
    })
}

/// Raised by SIGINT/SIGTERM once [`install_interrupt_handler`] ran.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: std::ffi::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Whether process `pid` is still running: it exists and is not a zombie (what a test,
/// or a check that its children are gone, asks after a kill).
pub fn is_running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name, which is in parentheses and may hold spaces.
        !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
}

/// Makes Ctrl-C (and SIGTERM) raise [`INTERRUPTED`] instead of killing us, so the caller
/// can stop its running command, keep what finished, and exit cleanly.
pub fn install_interrupt_handler() {
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        // sigaction cannot fail for these two signals and a valid action.
        let _ = unsafe { sigaction(signal, &action) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout_ms: u64) -> Job {
        Job {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![("GD_TEST".into(), "42".into())],
            cwd: None,
            timeout: Duration::from_millis(timeout_ms),
            grace: Duration::from_millis(200),
            user: None,
        }
    }

    #[test]
    fn after_the_handler_is_installed_sigterm_raises_the_flag_instead_of_killing_us() {
        // No other test in this binary uses INTERRUPTED, so the flag is ours to look at.
        install_interrupt_handler();
        nix::sys::signal::raise(Signal::SIGTERM).expect("raise SIGTERM");
        assert!(INTERRUPTED.load(Ordering::SeqCst));
        INTERRUPTED.store(false, Ordering::SeqCst);
    }

    #[test]
    fn a_capped_run_keeps_the_first_bytes_and_counts_the_rest() {
        let done = run_capped(
            &sh("head -c 300000 /dev/zero; echo err >&2", 10_000),
            &AtomicBool::new(false),
            1000,
        )
        .unwrap();
        assert_eq!(done.outcome, Outcome::Exited { code: 0 });
        assert_eq!(done.stdout.len(), 1000);
        assert_eq!(done.stdout_dropped, 299_000);
        assert_eq!(done.stderr, b"err\n");
        let all = run(
            &sh("head -c 300000 /dev/zero", 10_000),
            &AtomicBool::new(false),
        )
        .unwrap();
        assert_eq!((all.stdout.len(), all.stdout_dropped), (300_000, 0));
    }

    #[test]
    fn captures_both_streams_and_the_exit_code() {
        let done = run(
            &sh("echo out $GD_TEST; echo err >&2; exit 7", 5000),
            &AtomicBool::new(false),
        )
        .unwrap();
        assert_eq!(done.outcome, Outcome::Exited { code: 7 });
        assert_eq!(done.stdout, b"out 42\n");
        assert_eq!(done.stderr, b"err\n");
    }

    #[test]
    fn a_full_pipe_does_not_block() {
        let done = run(
            &sh(
                "head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2",
                20_000,
            ),
            &AtomicBool::new(false),
        )
        .unwrap();
        assert_eq!(done.outcome, Outcome::Exited { code: 0 });
        assert_eq!(
            (done.stdout.len(), done.stderr.len()),
            (3_000_000, 3_000_000)
        );
    }

    #[test]
    fn timeout_kills_the_whole_group_even_when_term_is_ignored() {
        // The marker is only written if the test fails; the folder goes either way.
        let tmp = tempfile::Builder::new()
            .prefix("gd-runner-")
            .tempdir()
            .unwrap();
        let marker = tmp.path().join("survived");
        let script = format!(
            "trap '' TERM; (trap '' TERM; sleep 30; touch {}) & sleep 30",
            marker.display()
        );
        let done = run(&sh(&script, 300), &AtomicBool::new(false)).unwrap();
        assert_eq!(done.outcome, Outcome::TimedOut);
        assert!(done.elapsed < Duration::from_secs(5), "{:?}", done.elapsed);
        std::thread::sleep(Duration::from_millis(300));
        assert!(!marker.exists(), "the background child survived");
    }

    /// The deadline hook runs once, while the job still runs (its output so far is still
    /// being read), and never for a job that ends in time or is cancelled.
    #[test]
    fn the_deadline_hook_runs_once_before_the_kill_and_only_then() {
        let mut calls = 0;
        let done = run_with(
            &sh("echo started; sleep 30", 300),
            &AtomicBool::new(false),
            &mut || calls += 1,
        )
        .unwrap();
        assert_eq!((done.outcome, calls), (Outcome::TimedOut, 1));
        assert_eq!(String::from_utf8_lossy(&done.stdout), "started\n");
        let mut calls = 0;
        let done = run_with(&sh("true", 10_000), &AtomicBool::new(false), &mut || {
            calls += 1
        })
        .unwrap();
        assert_eq!((done.outcome, calls), (Outcome::Exited { code: 0 }, 0));
        let done = run_with(&sh("sleep 30", 60_000), &AtomicBool::new(true), &mut || {
            calls += 1
        })
        .unwrap();
        assert_eq!((done.outcome, calls), (Outcome::Interrupted, 0));
    }

    fn starts_with_go(line: &str) -> bool {
        line.starts_with("go")
    }

    /// A command that never prints its start line is stopped at the start-up deadline,
    /// long before its timeout; one that prints it (on either stream, after other lines)
    /// runs to its end.
    #[test]
    fn a_start_watch_stops_a_command_that_never_starts_and_only_that() {
        let watch = StartWatch {
            within: Duration::from_millis(300),
            started: starts_with_go,
        };
        let done = run_watched(
            &sh("echo waiting; sleep 30", 60_000),
            &AtomicBool::new(false),
            &mut || {},
            watch,
        )
        .unwrap();
        assert_eq!(done.outcome, Outcome::NotStarted);
        assert!(done.elapsed < Duration::from_secs(5), "{:?}", done.elapsed);
        assert_eq!(String::from_utf8_lossy(&done.stdout), "waiting\n");
        for script in [
            "echo waiting; echo go; sleep 0.6; echo done",
            "echo waiting; echo going >&2; sleep 0.6; echo done",
        ] {
            let done = run_watched(
                &sh(script, 60_000),
                &AtomicBool::new(false),
                &mut || {},
                watch,
            )
            .unwrap();
            assert_eq!(done.outcome, Outcome::Exited { code: 0 }, "{script}");
            assert!(String::from_utf8_lossy(&done.stdout).ends_with("done\n"));
        }
    }

    #[test]
    fn cancel_flag_interrupts() {
        let cancel = AtomicBool::new(true);
        let done = run(&sh("sleep 30", 60_000), &cancel).unwrap();
        assert_eq!(done.outcome, Outcome::Interrupted);
    }

    #[test]
    fn a_child_ending_of_the_same_ctrl_c_is_interrupted_not_failed() {
        // The flag is up while the child exits with an error of its own (srun killed by the
        // same Ctrl-C): whichever the runner sees first, the outcome is `Interrupted`.
        let done = run(&sh("exit 3", 10_000), &AtomicBool::new(true)).unwrap();
        assert_eq!(done.outcome, Outcome::Interrupted);
    }

    #[test]
    fn start_errors_name_the_command() {
        let job = Job {
            program: "/nonexistent/all_reduce_perf".into(),
            ..sh("", 1000)
        };
        let err = run(&job, &AtomicBool::new(false)).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("could not start `/nonexistent/all_reduce_perf -c ''`"),
            "{err}"
        );
    }

    #[test]
    fn quoting_for_display() {
        assert_eq!(shell_quote("-b"), "-b");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
