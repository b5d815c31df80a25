//! Draining and returning nodes, the way `gpudirect health` and `validate` share.
//!
//! Rules (issue #17), so that this tool never fights an admin:
//! - Every drain this tool sets has a reason that starts with [`DRAIN_TAG`]
//!   (`gpudirect: eth3 down`), short and on one line, so `sinfo -R` says what is wrong.
//! - A node is only returned to service ([`resume_if_ours`]) when it is drained with that
//!   tag: a node an admin drained for another reason stays drained, whatever the checks say.
//! - A drain is confirmed: after `scontrol update ... state=drain` the node's state is read
//!   back, and a drain that did not take is an error, not a log line.
//! - `--on-drain CMD` ([`run_on_drain`]) hands the evidence to the admin's repair process:
//!   a JSON file whose path is the command's last argument (and `GPUDIRECT_EVIDENCE`).

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::history::{NodeRunPoint, RunId, RunStatus};
use crate::runner::{self, Job, Outcome};
use crate::slurm::{self, NodeState};

/// How every reason this tool drains with starts.
pub const DRAIN_TAG: &str = "gpudirect:";

/// Longest reason set (Slurm keeps more, but `sinfo -R` shows about this much).
const MAX_REASON: usize = 120;

/// How long an `--on-drain` command may run.
pub const ON_DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The reason for a drain: the tag, then `problem` on one line (control characters and
/// line breaks become spaces), cut to [`MAX_REASON`] characters. Pure.
pub fn drain_reason(problem: &str) -> String {
    let one_line: String = problem
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let words = one_line.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut reason = format!("{DRAIN_TAG} {words}");
    if reason.chars().count() > MAX_REASON {
        reason = reason.chars().take(MAX_REASON - 3).collect::<String>() + "...";
    }
    reason
}

/// Whether a drain reason is one this tool set. Pure.
pub fn is_ours(reason: Option<&str>) -> bool {
    reason.is_some_and(|r| r.trim_start().starts_with(DRAIN_TAG))
}

/// What [`drain_confirmed`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Drained {
    /// Drained now, and the state read back shows it.
    Drained {
        /// The state words read back, e.g. `IDLE+DRAIN`.
        state: String,
    },
    /// Already drained with this tool's tag: left as it was (its reason kept, so the
    /// first problem found stays visible).
    AlreadyOurs {
        /// The reason it has.
        reason: String,
    },
    /// Already drained by someone else: left alone.
    AdminDrain {
        /// The admin's reason.
        reason: Option<String>,
    },
}

/// Drains `node` with `reason` (made by [`drain_reason`]) unless it is drained already,
/// then reads its state back: an error when the drain did not take.
pub fn drain_confirmed(node: &str, reason: &str) -> Result<Drained> {
    let before = slurm::node_state(node)?;
    if before.drained() {
        return Ok(if is_ours(before.reason.as_deref()) {
            Drained::AlreadyOurs {
                reason: before.reason.unwrap_or_default(),
            }
        } else {
            Drained::AdminDrain {
                reason: before.reason,
            }
        });
    }
    slurm::drain(node, reason)?;
    let after = slurm::node_state(node)?;
    if !after.drained() {
        bail!(
            "drained {node}, but Slurm shows it {}: is this user a Slurm operator (SlurmUser or root)?",
            after.states.join("+")
        );
    }
    Ok(Drained::Drained {
        state: after.states.join("+"),
    })
}

/// What [`resume_if_ours`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Resumed {
    /// It was drained by this tool and is back in service.
    Resumed {
        /// The reason it had.
        reason: String,
    },
    /// It was not drained: nothing to do.
    NotDrained,
    /// Drained by someone else (another reason): left drained.
    AdminDrain {
        /// The admin's reason.
        reason: Option<String>,
    },
}

/// The decision [`resume_if_ours`] takes for a node in `state`. Pure.
pub fn resume_decision(state: &NodeState) -> Resumed {
    if !state.drained() {
        Resumed::NotDrained
    } else if is_ours(state.reason.as_deref()) {
        Resumed::Resumed {
            reason: state.reason.clone().unwrap_or_default(),
        }
    } else {
        Resumed::AdminDrain {
            reason: state.reason.clone(),
        }
    }
}

/// Returns `node` to service when this tool drained it; leaves every other drain alone.
pub fn resume_if_ours(node: &str) -> Result<Resumed> {
    let decision = resume_decision(&slurm::node_state(node)?);
    if matches!(decision, Resumed::Resumed { .. }) {
        slurm::resume(node)?;
    }
    Ok(decision)
}

/// The runs of the node an `--on-drain` evidence file lists: its last ones.
pub const EVIDENCE_RUNS: usize = 10;

/// A recent run of the node in the history, in the evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryPoint {
    /// Run id.
    pub run_id: RunId,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// Its busbw at the size read, GB/s.
    pub busbw: Option<f64>,
    /// How it ended.
    pub status: RunStatus,
}

impl HistoryPoint {
    /// The last [`EVIDENCE_RUNS`] of a node's runs (oldest first, as
    /// `History::node_history` gives them), oldest first.
    pub fn last_of(runs: Vec<NodeRunPoint>) -> Vec<HistoryPoint> {
        let skip = runs.len().saturating_sub(EVIDENCE_RUNS);
        runs.into_iter()
            .skip(skip)
            .map(|r| HistoryPoint {
                run_id: r.run_id,
                at: r.at,
                busbw: r.busbw,
                status: r.status,
            })
            .collect()
    }
}

/// The `--on-drain` evidence file, one shape for `health` and `validate`: the node, the
/// reason set, the verdict and why, the node's last runs, the cluster, the tool and the
/// time; then what the tool adds (`details`, flattened: validate's pair runs, health's
/// profile, failed checks and checks run).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvidenceFile<D> {
    /// The drained node.
    pub node: String,
    /// The reason set (`gpudirect: ...`).
    pub reason: String,
    /// The verdict: `slow node` or `failed` (validate), `failed` (health).
    pub verdict: String,
    /// Why, in words, one fact a line.
    pub evidence: Vec<String>,
    /// Its last runs in the history, oldest first.
    pub history: Vec<HistoryPoint>,
    /// The cluster.
    pub cluster: Option<String>,
    /// `gpudirect validate` or `gpudirect health`.
    pub tool: &'static str,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// What the tool adds.
    #[serde(flatten)]
    pub details: D,
}

/// Runs the admin's `--on-drain` command with the evidence: written to a JSON file (kept
/// for the repair process, mode 0600) whose path is the command's last argument and
/// `GPUDIRECT_EVIDENCE`. `command` is split on whitespace, never given to a shell. Returns
/// the file's path.
pub fn run_on_drain(command: &str, evidence: &impl Serialize) -> Result<PathBuf> {
    let mut words = command.split_whitespace();
    let Some(program) = words.next() else {
        bail!("--on-drain is empty: give the command to run, e.g. /usr/local/sbin/file-repair");
    };
    let mut file = tempfile::Builder::new()
        .prefix("gpudirect-evidence-")
        .suffix(".json")
        .tempfile()
        .context("cannot create the evidence file for --on-drain")?;
    serde_json::to_writer_pretty(&mut file, evidence)?;
    file.write_all(b"\n")?;
    let (_, path) = file.keep().context("cannot keep the evidence file")?;
    let mut args: Vec<OsString> = words.map(OsString::from).collect();
    args.push(path.clone().into_os_string());
    let job = Job {
        program: program.into(),
        args,
        env: vec![("GPUDIRECT_EVIDENCE".into(), path.clone().into_os_string())],
        cwd: None,
        timeout: ON_DRAIN_TIMEOUT,
        grace: Duration::from_secs(5),
    };
    let shown = job.command_line();
    tracing::info!(command = %shown, "running the --on-drain command");
    let finished = runner::run(&job, &AtomicBool::new(false))
        .map_err(|e| anyhow::anyhow!("--on-drain: cannot start `{shown}`: {}", e.source))?;
    if finished.outcome != (Outcome::Exited { code: 0 }) {
        let stderr = String::from_utf8_lossy(&finished.stderr);
        let said = match stderr.trim() {
            "" => "(nothing on stderr)".to_string(),
            text => format!("stderr: {}", text.lines().collect::<Vec<_>>().join("; ")),
        };
        let how = match finished.outcome {
            Outcome::TimedOut => format!("no end within {}s", ON_DRAIN_TIMEOUT.as_secs()),
            other => other.to_string(),
        };
        bail!(
            "--on-drain: `{shown}` failed ({how}); {said}; the evidence is in {}",
            path.display()
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_tagged_one_line_and_short() {
        assert_eq!(drain_reason("eth3 down"), "gpudirect: eth3 down");
        assert_eq!(
            drain_reason("a\nforged\tline  here"),
            "gpudirect: a forged line here"
        );
        let long = drain_reason(&"x".repeat(500));
        assert_eq!(long.chars().count(), MAX_REASON);
        assert!(long.ends_with("..."));
        assert!(is_ours(Some("gpudirect: eth3 down")));
        assert!(!is_ours(Some("disk replacement, ticket 4411")));
        assert!(!is_ours(None));
    }

    #[test]
    fn only_our_drains_are_resumed() {
        let state = |states: &[&str], reason: Option<&str>| NodeState {
            states: states.iter().map(|s| s.to_string()).collect(),
            reason: reason.map(str::to_string),
            gpus: None,
        };
        assert_eq!(
            resume_decision(&state(&["IDLE", "DRAIN"], Some("gpudirect: eth3 down"))),
            Resumed::Resumed {
                reason: "gpudirect: eth3 down".into()
            }
        );
        assert_eq!(
            resume_decision(&state(&["IDLE", "DRAIN"], Some("bad DIMM"))),
            Resumed::AdminDrain {
                reason: Some("bad DIMM".into())
            }
        );
        assert_eq!(
            resume_decision(&state(&["IDLE"], None)),
            Resumed::NotDrained
        );
        assert!(matches!(
            resume_decision(&state(&["MIXED", "DRAINING"], Some("gpudirect: slow"))),
            Resumed::Resumed { .. }
        ));
    }

    #[test]
    fn the_on_drain_command_gets_the_evidence_file() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy.json");
        let script = dir.path().join("repair.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n[ \"$GPUDIRECT_EVIDENCE\" = \"$2\" ] || exit 9\ncp \"$2\" {}\n",
                copy.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let evidence = serde_json::json!({"node": "node2", "check": "nics"});
        let path = run_on_drain(&format!("{} --ticket", script.display()), &evidence).unwrap();
        let got: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&copy).unwrap()).unwrap();
        assert_eq!(got, evidence);
        std::fs::remove_file(path).unwrap();
        let err = run_on_drain("/bin/false", &evidence)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--on-drain: `/bin/false")
                && err.contains("failed (exit code 1); (nothing on stderr); the evidence is in "),
            "{err}"
        );
        assert!(run_on_drain("  ", &evidence)
            .unwrap_err()
            .to_string()
            .contains("empty"));
    }
}
