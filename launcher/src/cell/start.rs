//! Whether a cell reached NCCL, from how it ended and what it printed (pure; issue #45).
//!
//! A cell stopped (at its start-up deadline or its timeout) before NCCL showed it started
//! never reached NCCL: srun's PMIx wire-up, MPI_Init or the broadcast of NCCL's unique id
//! hung, which says nothing of the nodes' GPUs or NICs. Seen on the local cluster with one
//! NIC down: Open MPI's own TCP traffic wandered over the data rails and 6 of 12 steps
//! hung before NCCL, each charged to the rail under test as a failure. Such a cell is a
//! launch failure: [`super::exec`] runs it once more as its own step, and if that does not
//! start either it is reported as "could not start", never as slow or failed.
//!
//! ```text
//! how it ended      what it printed (nccl_output::start_seen)        start
//! exited, killed    anything                                           reached (judged as usual)
//! interrupted       anything                                           reached (Ctrl-C is no verdict)
//! not started /     Init COMPLETE or nccl-tests' column header         reached (a hang after NCCL
//!   timed out                                                            started: the node's fault)
//!                   an NCCL WARN (NCCL ran and said what was wrong)    reached (judged as failed)
//!                   no NCCL line, or NCCL lines and no Init COMPLETE   NOT reached: a launch failure
//! ```

use std::time::Duration;

use crate::nccl_output::start_seen;
use crate::runner::Outcome;
use crate::units::human_duration;

/// What to check when a cell could not start, said with every such verdict.
pub const WHAT_TO_CHECK: &str = "check the launch, not the fabric: srun --mpi=pmix \
    (PMIx) or MPI, and that Open MPI's and PMIx's own TCP traffic stays on the control NIC \
    (see `gpudirect validate --help`, --startup-timeout)";

/// The word for a cell that never reached NCCL, in text, `--json` and the history.
pub const COULD_NOT_START: &str = "could not start";

/// Whether one try of a cell reached NCCL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// It reached NCCL, or ended by itself: judged as usual.
    Reached,
    /// It was stopped before NCCL started: why, in words.
    NotReached(String),
}

/// How the tries of a cell went ([`super::exec`]: one more try after one that did not
/// reach NCCL).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Starting {
    /// The first try reached NCCL (or ended by itself).
    #[default]
    First,
    /// The first try did not reach NCCL; the second, a step of its own, did.
    Second {
        /// Why the first did not.
        first: String,
    },
    /// Neither try reached NCCL: the cell could not start.
    CouldNotStart {
        /// Why the first did not.
        first: String,
        /// Why the second did not.
        second: String,
    },
}

impl Starting {
    /// Why the cell could not start (the last try's reason), when it could not.
    pub fn could_not_start(&self) -> Option<&str> {
        match self {
            Starting::CouldNotStart { second, .. } => Some(second),
            _ => None,
        }
    }

    /// The note a recorded run carries about its tries, if any (`show` prints notes).
    pub fn note(&self) -> Option<String> {
        match self {
            Starting::First => None,
            Starting::Second { first } => Some(format!(
                "the first try did not reach NCCL ({first}); this is the second try, a step of its own"
            )),
            Starting::CouldNotStart { first, second } => Some(format!(
                "{COULD_NOT_START}: twice, each a step of its own ({first}; then {second}): a launch failure, not a fault of its nodes; {WHAT_TO_CHECK}"
            )),
        }
    }
}

/// Whether a try that ended with `outcome`, having printed `output`, reached NCCL;
/// `startup` and `timeout` are its two deadlines, named in the reason.
pub fn classify(
    outcome: Outcome,
    output: &[u8],
    startup: Option<Duration>,
    timeout: Duration,
) -> Start {
    let deadline = match outcome {
        Outcome::NotStarted => format!(
            "its {} start-up deadline",
            human_duration(startup.unwrap_or(timeout))
        ),
        Outcome::TimedOut => format!("its {} timeout", human_duration(timeout)),
        Outcome::Exited { .. } | Outcome::Signaled { .. } | Outcome::Interrupted => {
            return Start::Reached;
        }
    };
    let seen = start_seen(output);
    if !seen.never_reached_nccl() {
        return Start::Reached;
    }
    Start::NotReached(match seen.nccl_lines {
        0 => format!("no NCCL line within {deadline}"),
        n => format!("NCCL began ({n} lines) but no `Init COMPLETE` within {deadline}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);
    const TEN_MIN: Duration = Duration::from_secs(600);

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/nccl-tests")
                .join(name),
        )
        .unwrap()
    }

    #[test]
    fn a_cell_stopped_before_any_nccl_line_never_reached_it() {
        let srun = b"srun: job 7 queued and waiting for resources\nsrun: job 7 has been allocated resources\n";
        assert_eq!(
            classify(Outcome::NotStarted, srun, Some(MIN), TEN_MIN),
            Start::NotReached("no NCCL line within its 1 min 0 s start-up deadline".into())
        );
        assert_eq!(
            classify(Outcome::TimedOut, b"", Some(MIN), TEN_MIN),
            Start::NotReached("no NCCL line within its 10 min 0 s timeout".into())
        );
    }

    #[test]
    fn nccl_lines_without_init_complete_never_reached_it() {
        let begun = b"# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824\n\
            node3:40:40 [0] NCCL INFO Bootstrap : Using eth0:10.77.0.3<0>\n\
            node3:40:40 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so)\n";
        assert_eq!(
            classify(Outcome::TimedOut, begun, Some(MIN), TEN_MIN),
            Start::NotReached(
                "NCCL began (2 lines) but no `Init COMPLETE` within its 10 min 0 s timeout".into()
            )
        );
    }

    /// A hang after NCCL started (a stalled rank) and NCCL's own warning are the nodes'
    /// business: judged as before, never retried.
    #[test]
    fn a_hang_after_the_init_and_a_warning_of_nccls_are_not_launch_failures() {
        // Recorded with NCCL_DEBUG=INFO: `Init COMPLETE` and the table.
        let started = fixture("h200x2-mpirun/all_reduce_mpi_np2_debug.txt");
        assert_eq!(
            classify(Outcome::TimedOut, &started, Some(MIN), TEN_MIN),
            Start::Reached
        );
        // Recorded without it: the table's column header alone.
        let plain = fixture("h200x2-nvlink/all_reduce_g2.txt");
        assert_eq!(
            classify(Outcome::NotStarted, &plain, Some(MIN), TEN_MIN),
            Start::Reached
        );
        let warned = b"node3:9:9 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth2\n\
            node3:9:9 [0] misc/socket.cc:484 NCCL WARN Bootstrap : no socket interface found\n";
        assert_eq!(
            classify(Outcome::TimedOut, warned, Some(MIN), TEN_MIN),
            Start::Reached
        );
    }

    #[test]
    fn a_cell_that_ended_by_itself_or_by_ctrl_c_is_judged_as_usual() {
        for outcome in [
            Outcome::Exited { code: 1 },
            Outcome::Signaled { signal: 9 },
            Outcome::Interrupted,
        ] {
            assert_eq!(
                classify(outcome, b"srun: error: PMIx failed", Some(MIN), TEN_MIN),
                Start::Reached,
                "{outcome}"
            );
        }
    }

    #[test]
    fn the_note_says_what_happened_and_what_to_check() {
        assert_eq!(Starting::First.note(), None);
        assert_eq!(Starting::First.could_not_start(), None);
        let twice = Starting::CouldNotStart {
            first: "no NCCL line within its 1 min 0 s start-up deadline".into(),
            second: "no NCCL line within its 1 min 0 s start-up deadline".into(),
        };
        assert_eq!(
            twice.could_not_start(),
            Some("no NCCL line within its 1 min 0 s start-up deadline")
        );
        let note = twice.note().unwrap();
        assert!(note.starts_with("could not start: twice"), "{note}");
        assert!(note.contains("srun --mpi=pmix"), "{note}");
        let json = serde_json::to_value(&twice).unwrap();
        assert_eq!(json["kind"], "could_not_start");
    }
}
