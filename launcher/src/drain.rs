//! Draining and returning nodes: the one place drains are carried out, for `health`
//! ([`drain_node`]), `validate` (its plans: [`apply_drains`], [`apply_resumes`]) and `vet
//! --drain` ([`apply_drains`]). Each caller hands in what it found (the candidates, the
//! evidence for `--on-drain`); what was done comes back as [`NodeAction`]s, in words.
//!
//! Rules (issue #17), so that this tool never fights an admin, nor itself:
//! - Every drain has a reason that starts with its tool's tag ([`Tool::tag`]:
//!   `gpudirect health: eth3 down`, `gpudirect validate: slow node ...`), short and on one
//!   line, so `sinfo -R` says what is wrong and who said it.
//! - A node is only returned to service ([`resume_if_ours`]) by the tool whose tag its drain
//!   has: a node an admin drained stays drained, and so does one the other tool drained
//!   (health, which runs every interval, never resumes what validate found; security
//!   review S3). A drain with the tag of versions before 0.2, `gpudirect:`, counts as
//!   validate's: `validate --resume` returns it, health leaves it.
//! - A drain is confirmed: after `scontrol update ... state=drain` the node's state is read
//!   back, and a drain that did not take is an error, not a log line.
//! - `--on-drain CMD` ([`run_on_drain`]) hands the evidence to the admin's repair process:
//!   a JSON file whose path is the command's last argument (and `GPUDIRECT_EVIDENCE`).

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::Serialize;

use crate::history::{NodeRunPoint, RunId, RunStatus};
use crate::noteln;
use crate::output::shown::hides_text;
use crate::output::with_sources;
use crate::runner::{self, Job, Outcome};
use crate::slurm::{self, NodeState};

/// The tag of drains made before each tool had its own (counted as validate's).
pub const LEGACY_TAG: &str = "gpudirect:";

/// Which of this project's tools drains or resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    /// `gpudirect health` (slurmd's HealthCheckProgram).
    Health,
    /// `gpudirect validate`.
    Validate,
    /// `gpudirect vet --drain`.
    Vet,
}

impl Tool {
    /// How every reason this tool drains with starts.
    pub fn tag(self) -> &'static str {
        match self {
            Tool::Health => "gpudirect health:",
            Tool::Validate => "gpudirect validate:",
            Tool::Vet => "gpudirect vet:",
        }
    }

    /// The tool's name, as in its command (`health`).
    pub fn name(self) -> &'static str {
        match self {
            Tool::Health => "health",
            Tool::Validate => "validate",
            Tool::Vet => "vet",
        }
    }

    /// The tool named `name` ([`Tool::name`]).
    pub fn from_name(name: &str) -> Option<Tool> {
        [Tool::Health, Tool::Validate, Tool::Vet]
            .into_iter()
            .find(|t| t.name() == name)
    }
}

/// Longest reason set (Slurm keeps more, but `sinfo -R` shows about this much).
const MAX_REASON: usize = 120;

/// How long an `--on-drain` command may run.
pub const ON_DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The reason for a drain by `tool`: its tag, then `problem` on one line (what
/// [`hides_text`] names: controls, line breaks, bidirectional and zero-width formatting
/// characters, become spaces), cut to
/// [`MAX_REASON`] characters. Pure.
pub fn drain_reason(tool: Tool, problem: &str) -> String {
    let one_line: String = problem
        .chars()
        .map(|c| if hides_text(c) { ' ' } else { c })
        .collect();
    let words = one_line.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut reason = format!("{} {words}", tool.tag());
    if reason.chars().count() > MAX_REASON {
        reason = reason.chars().take(MAX_REASON - 3).collect::<String>() + "...";
    }
    reason
}

/// Whether a drain reason is one `tool` set. Pure.
pub fn is_ours(tool: Tool, reason: Option<&str>) -> bool {
    reason.is_some_and(|r| {
        let r = r.trim_start();
        r.starts_with(tool.tag())
            || (tool == Tool::Validate
                && r.starts_with(LEGACY_TAG)
                && !r.starts_with(Tool::Health.tag()))
    })
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

/// Why a drain, a resume or the `--on-drain` command did not go through.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// Slurm could not be asked, or refused.
    #[error(transparent)]
    Slurm(#[from] slurm::SlurmError),
    /// The drain was sent, but Slurm does not show the node drained.
    #[error("drained {node}, but Slurm shows it {state}: is this user a Slurm operator (SlurmUser or root)?")]
    DidNotTake {
        /// The node.
        node: String,
        /// Its state words read back.
        state: String,
    },
    /// `--on-drain` names no command.
    #[error("--on-drain is empty: give the command to run, e.g. /usr/local/sbin/file-repair")]
    EmptyCommand,
    /// The evidence file could not be created.
    #[error("cannot create the evidence file for --on-drain")]
    CreateEvidence(#[source] std::io::Error),
    /// The evidence could not be written as JSON.
    #[error(transparent)]
    EvidenceJson(#[from] serde_json::Error),
    /// The evidence file could not be written.
    #[error(transparent)]
    WriteEvidence(#[from] std::io::Error),
    /// The evidence file could not be kept.
    #[error("cannot keep the evidence file")]
    KeepEvidence(#[source] tempfile::PersistError),
    /// The `--on-drain` command could not be started.
    #[error("--on-drain: cannot start `{command}`: {why}")]
    Start {
        /// The command line.
        command: String,
        /// Why.
        why: String,
    },
    /// The `--on-drain` command failed.
    #[error("--on-drain: `{command}` failed ({how}); {said}; the evidence is in {}", path.display())]
    Failed {
        /// The command line.
        command: String,
        /// How it ended.
        how: String,
        /// What it said on stderr.
        said: String,
        /// The evidence file, kept.
        path: PathBuf,
    },
}

/// Drains `node` with `reason` (made by [`drain_reason`] for `tool`) unless it is drained
/// already, then reads its state back: an error when the drain did not take.
pub fn drain_confirmed(tool: Tool, node: &str, reason: &str) -> Result<Drained, DrainError> {
    let before = slurm::node_state(node)?;
    if before.drained() {
        return Ok(if is_ours(tool, before.reason.as_deref()) {
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
        return Err(DrainError::DidNotTake {
            node: node.to_string(),
            state: after.states.join("+"),
        });
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

/// The decision [`resume_if_ours`] takes for `tool` and a node in `state`. Pure.
pub fn resume_decision(tool: Tool, state: &NodeState) -> Resumed {
    if !state.drained() {
        Resumed::NotDrained
    } else if is_ours(tool, state.reason.as_deref()) {
        Resumed::Resumed {
            reason: state.reason.clone().unwrap_or_default(),
        }
    } else {
        Resumed::AdminDrain {
            reason: state.reason.clone(),
        }
    }
}

/// Returns `node` to service when `tool` drained it; leaves every other drain alone.
pub fn resume_if_ours(tool: Tool, node: &str) -> Result<Resumed, DrainError> {
    let decision = resume_decision(tool, &slurm::node_state(node)?);
    if matches!(decision, Resumed::Resumed { .. }) {
        slurm::resume(node)?;
    }
    Ok(decision)
}

/// What a command does in Slurm with a node it finds bad: drain it, or quarantine it
/// ([`crate::quarantine`]: `--quarantine`, or `--drain` where the config's `[quarantine]`
/// has `instead_of_drain = true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sanction {
    /// `scontrol update ... state=drain` with a tagged reason.
    Drain,
    /// Into the quarantine reservation, the evidence in the node's comment.
    Quarantine(crate::quarantine::Settings),
}

impl Sanction {
    /// What `--drain` and `--quarantine` ask for, with the config's settings (`None`:
    /// neither was given).
    pub fn chosen(
        drain: bool,
        quarantine: bool,
        settings: &crate::quarantine::Settings,
    ) -> Option<Sanction> {
        match (drain, quarantine) {
            (_, true) => Some(Sanction::Quarantine(settings.clone())),
            (true, false) if settings.instead_of_drain => {
                Some(Sanction::Quarantine(settings.clone()))
            }
            (true, false) => Some(Sanction::Drain),
            (false, false) => None,
        }
    }

    /// Carries out the plans: [`apply_drains`] or [`crate::quarantine::apply`].
    pub fn apply<E: Serialize>(
        &self,
        tool: Tool,
        candidates: &[Candidate],
        on_drain: Option<&str>,
        evidence: impl Fn(&Candidate, &str) -> E,
    ) -> Vec<NodeAction> {
        match self {
            Sanction::Drain => apply_drains(tool, candidates, on_drain, evidence),
            Sanction::Quarantine(settings) => {
                crate::quarantine::apply(tool, settings, candidates, on_drain, evidence)
            }
        }
    }
}

/// Spares every candidate when every one of the `judged` nodes (two or more) would be
/// drained or quarantined: a fault of every node at once is the launch's, the config's or
/// the fabric's, not the nodes' (measured: a cluster whose MPI library was missing had every
/// rail pair fail, and all four nodes were quarantined). Pure.
pub fn spare_when_every_node_is_bad(
    mut candidates: Vec<Candidate>,
    judged: usize,
) -> Vec<Candidate> {
    let sanctioned = candidates
        .iter()
        .filter(|c| matches!(c.plan, DrainPlan::Drain { .. }))
        .count();
    if judged >= 2 && sanctioned >= judged {
        for c in &mut candidates {
            c.plan = DrainPlan::Spare {
                why: format!(
                    "every one of the {judged} nodes was found bad at once: that is the launch, the config or the fabric, not the nodes (fix it and validate again)"
                ),
            };
        }
    }
    candidates
}

/// What `--drain` does with a node judged slow or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainPlan {
    /// Drain it with this reason (tagged).
    Drain {
        /// From [`drain_reason`].
        reason: String,
    },
    /// Leave it in service: it passed a re-test, or could not be re-tested.
    Spare {
        /// `passed re-test 1 of 2`.
        why: String,
    },
}

/// A node `--drain` considers, and what it will do.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The node.
    pub node: String,
    /// Its verdict, in words (`slow node`).
    pub verdict: String,
    /// The verdict's evidence.
    pub evidence: Vec<String>,
    /// Which part is at fault (what `--quarantine` records, and whether it quarantines).
    pub cause: crate::quarantine::Cause,
    /// Drain or spare.
    pub plan: DrainPlan,
}

/// What `--resume` does with a drained node of the allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumePlan {
    /// Drained by gpudirect and healthy now: return it to service.
    Resume {
        /// Why it is healthy (its re-test).
        why: String,
    },
    /// Drained by gpudirect and not shown healthy: it stays drained.
    Stay {
        /// Why.
        why: String,
    },
    /// Drained by someone else: never resumed by this tool.
    Admin,
}

/// What happened to one node (`--json`'s `drains` and `resumes`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeAction {
    /// The node.
    pub node: String,
    /// `drained`, `already_drained`, `admin_drain`, `not_drained`, `resumed`,
    /// `stays_drained` or `error`.
    pub outcome: &'static str,
    /// The drain reason set, or the one the node has.
    pub reason: Option<String>,
    /// The state read back from Slurm after the change (`IDLE+DRAIN`).
    pub state: Option<String>,
    /// What was said, in words.
    pub message: String,
    /// The `--on-drain` evidence file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_file: Option<PathBuf>,
    /// What went wrong: a drain or resume that did not take, a failed `--on-drain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl NodeAction {
    /// An action with nothing read back yet.
    pub fn new(node: &str, outcome: &'static str, reason: Option<String>, message: String) -> Self {
        NodeAction {
            node: node.to_string(),
            outcome,
            reason,
            state: None,
            message,
            evidence_file: None,
            error: None,
        }
    }

    /// An action that went wrong: `message` is also its error.
    pub fn error(node: &str, message: String) -> Self {
        NodeAction {
            error: Some(message.clone()),
            ..NodeAction::new(node, "error", None, message)
        }
    }
}

/// Whether any action went wrong (the exit status is then at least 2).
pub fn any_error(actions: &[NodeAction]) -> bool {
    actions.iter().any(|a| a.error.is_some())
}

/// Drains `node` for `tool` with `reason` ([`drain_confirmed`]) and, when it is newly
/// drained and `on_drain` is given, runs that command with the evidence `evidence` makes
/// ([`run_on_drain`]). Returns the drain's outcome and the command's (`None`: it did not
/// run); a failed command leaves the node drained.
pub fn drain_node<E: Serialize>(
    tool: Tool,
    node: &str,
    reason: &str,
    on_drain: Option<&str>,
    evidence: impl FnOnce() -> E,
) -> Result<(Drained, Option<Result<PathBuf, DrainError>>), DrainError> {
    let drained = drain_confirmed(tool, node, reason)?;
    let ran = match (&drained, on_drain) {
        (Drained::Drained { .. }, Some(command)) => Some(run_on_drain(command, &evidence())),
        _ => None,
    };
    Ok((drained, ran))
}

/// Carries out `tool`'s drain plans: drains the candidates that are to be drained
/// (confirmed by reading the state back), runs `on_drain` with `evidence(candidate,
/// reason)` for each newly drained one, and says on stderr, with the tool's tag, what
/// happened to each; what it said is kept as a [`NodeAction`] for `--json` and reports.
pub fn apply_drains<E: Serialize>(
    tool: Tool,
    candidates: &[Candidate],
    on_drain: Option<&str>,
    evidence: impl Fn(&Candidate, &str) -> E,
) -> Vec<NodeAction> {
    let say = |action: NodeAction| {
        noteln!("{} {}", tool.tag(), action.message);
        action
    };
    let mut actions = Vec::new();
    for c in candidates {
        let node = c.node.as_str();
        let reason = match &c.plan {
            DrainPlan::Spare { why } => {
                actions.push(say(NodeAction::new(
                    node,
                    "not_drained",
                    None,
                    format!("{node} not drained ({}): {why}", c.verdict),
                )));
                continue;
            }
            DrainPlan::Drain { reason } => reason,
        };
        let done = drain_confirmed(tool, node, reason);
        let mut action = say(drained_action(node, reason, &done));
        if let (Ok(Drained::Drained { .. }), Some(command)) = (&done, on_drain) {
            hand_over_evidence(tool, command, &evidence(c, reason), "drained", &mut action);
        }
        actions.push(action);
    }
    actions
}

/// Runs the admin's `--on-drain` command for a node just taken out of service (`stays`:
/// `drained` or `quarantined`) with its evidence, and writes what came of it into `action`
/// (the evidence file, or the error), said on stderr either way.
pub fn hand_over_evidence(
    tool: Tool,
    command: &str,
    evidence: &impl Serialize,
    stays: &str,
    action: &mut NodeAction,
) {
    let node = &action.node;
    match run_on_drain(command, evidence) {
        Ok(path) => {
            noteln!(
                "{} --on-drain ran for {node} with the evidence in {}",
                tool.tag(),
                path.display()
            );
            action.evidence_file = Some(path);
        }
        Err(e) => {
            let message = format!("{} ({node} stays {stays})", with_sources(&e));
            noteln!("{} {message}", tool.tag());
            action.error = Some(message);
        }
    }
}

/// What a drain of `node` with `reason` came to, in words (pure): the state read back, a
/// drain already there (ours, or an admin's), or the error.
pub fn drained_action(node: &str, reason: &str, done: &Result<Drained, DrainError>) -> NodeAction {
    match done {
        Ok(Drained::Drained { state }) => NodeAction {
            state: Some(state.clone()),
            ..NodeAction::new(
                node,
                "drained",
                Some(reason.to_string()),
                format!("drained {node} (Slurm shows {state}): {reason}"),
            )
        },
        Ok(Drained::AlreadyOurs { reason }) => NodeAction::new(
            node,
            "already_drained",
            Some(reason.clone()),
            format!("{node} is already drained by gpudirect (\"{reason}\"): left as it is"),
        ),
        Ok(Drained::AdminDrain { reason }) => NodeAction::new(
            node,
            "admin_drain",
            reason.clone(),
            format!(
                "{node} left alone: drained by an admin for \"{}\"",
                reason.as_deref().unwrap_or("(no reason)")
            ),
        ),
        Err(e) => NodeAction::error(node, format!("could not drain {node}: {}", with_sources(e))),
    }
}

/// Returns to service the drained nodes `plans` says to (for `tool`, the state read back),
/// leaves the others drained, and says what happened to each.
pub fn apply_resumes(
    tool: Tool,
    drained: &[(String, NodeState)],
    plans: &[ResumePlan],
) -> Vec<NodeAction> {
    let mut actions = Vec::new();
    for ((node, state), plan) in drained.iter().zip(plans) {
        let node = node.as_str();
        let had = state.reason.clone();
        let had_text = had.as_deref().unwrap_or("(no reason)").to_string();
        let action = match plan {
            ResumePlan::Admin => NodeAction::new(
                node,
                "admin_drain",
                had,
                format!("{node} left drained: drained by an admin for \"{had_text}\""),
            ),
            ResumePlan::Stay { why } => NodeAction::new(
                node,
                "stays_drained",
                had,
                format!("{node} stays drained (\"{had_text}\"): {why}"),
            ),
            ResumePlan::Resume { why } => resume(tool, node, why),
        };
        noteln!("{} {}", tool.tag(), action.message);
        actions.push(action);
    }
    actions
}

fn resume(tool: Tool, node: &str, why: &str) -> NodeAction {
    match resume_if_ours(tool, node) {
        Ok(Resumed::Resumed { reason }) => match slurm::node_state(node) {
            Ok(after) if !after.drained() => {
                let state = after.states.join("+");
                NodeAction {
                    state: Some(state.clone()),
                    ..NodeAction::new(
                        node,
                        "resumed",
                        Some(reason.clone()),
                        format!(
                            "returned {node} to service (Slurm shows {state}): {why}; it was drained for \"{reason}\""
                        ),
                    )
                }
            }
            Ok(after) => NodeAction::error(
                node,
                format!(
                    "resumed {node}, but Slurm still shows it {}: is this user a Slurm operator (SlurmUser or root)?",
                    after.states.join("+")
                ),
            ),
            Err(e) => NodeAction::error(
                node,
                format!("resumed {node}, but could not read its state back: {e}"),
            ),
        },
        Ok(Resumed::NotDrained) => NodeAction::new(
            node,
            "not_drained",
            None,
            format!("{node} is no longer drained: nothing to resume"),
        ),
        Ok(Resumed::AdminDrain { reason }) => NodeAction::new(
            node,
            "admin_drain",
            reason.clone(),
            format!(
                "{node} left drained: drained by an admin for \"{}\" meanwhile",
                reason.as_deref().unwrap_or("(no reason)")
            ),
        ),
        Err(e) => NodeAction::error(
            node,
            format!("could not resume {node}: {}", with_sources(&e)),
        ),
    }
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
    /// The reason set (`gpudirect health: ...`, `gpudirect validate: ...`).
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
pub fn run_on_drain(command: &str, evidence: &impl Serialize) -> Result<PathBuf, DrainError> {
    let mut words = command.split_whitespace();
    let Some(program) = words.next() else {
        return Err(DrainError::EmptyCommand);
    };
    let mut file = tempfile::Builder::new()
        .prefix("gpudirect-evidence-")
        .suffix(".json")
        .tempfile()
        .map_err(DrainError::CreateEvidence)?;
    serde_json::to_writer_pretty(&mut file, evidence)?;
    file.write_all(b"\n")?;
    let (_, path) = file.keep().map_err(DrainError::KeepEvidence)?;
    let mut args: Vec<OsString> = words.map(OsString::from).collect();
    args.push(path.clone().into_os_string());
    let job = Job {
        program: program.into(),
        args,
        env: vec![("GPUDIRECT_EVIDENCE".into(), path.clone().into_os_string())],
        cwd: None,
        timeout: ON_DRAIN_TIMEOUT,
        grace: Duration::from_secs(5),
        user: None,
    };
    let shown = job.command_line();
    tracing::info!(command = %shown, "running the --on-drain command");
    let finished = runner::run(&job, &AtomicBool::new(false)).map_err(|e| DrainError::Start {
        command: shown.clone(),
        why: e.source.to_string(),
    })?;
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
        return Err(DrainError::Failed {
            command: shown,
            how,
            said,
            path,
        });
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_bad_at_once_sanctions_none() {
        let c = |node: &str| Candidate {
            node: node.into(),
            verdict: "failed".into(),
            evidence: vec![],
            cause: crate::quarantine::Cause::Node,
            plan: DrainPlan::Drain {
                reason: "gpudirect validate: failed".into(),
            },
        };
        // Two of four: drained as planned.
        let some = spare_when_every_node_is_bad(vec![c("node1"), c("node2")], 4);
        assert!(some
            .iter()
            .all(|c| matches!(c.plan, DrainPlan::Drain { .. })));
        // Four of four: none, said why.
        let all =
            spare_when_every_node_is_bad(vec![c("node1"), c("node2"), c("node3"), c("node4")], 4);
        for c in &all {
            let DrainPlan::Spare { why } = &c.plan else {
                panic!("{c:?}")
            };
            assert!(why.contains("every one of the 4 nodes"), "{why}");
        }
        // One node alone judged bad is its own.
        let one = spare_when_every_node_is_bad(vec![c("node1")], 1);
        assert!(matches!(one[0].plan, DrainPlan::Drain { .. }));
    }

    #[test]
    fn reasons_are_tagged_one_line_and_short() {
        assert_eq!(
            drain_reason(Tool::Health, "eth3 down"),
            "gpudirect health: eth3 down"
        );
        assert_eq!(
            drain_reason(Tool::Validate, "a\nforged\tline  here"),
            "gpudirect validate: a forged line here"
        );
        // A right-to-left override would show `sinfo -R` another text (review S13).
        assert_eq!(
            drain_reason(Tool::Health, "eth3 \u{202E}nwod\u{2066}x\u{2069}"),
            "gpudirect health: eth3 nwod x"
        );
        let long = drain_reason(Tool::Validate, &"x".repeat(500));
        assert_eq!(long.chars().count(), MAX_REASON);
        assert!(long.ends_with("..."));
        assert!(!is_ours(
            Tool::Health,
            Some("disk replacement, ticket 4411")
        ));
        assert!(!is_ours(Tool::Validate, None));
    }

    /// Each tool returns only its own drains: health, every interval, never resumes what
    /// validate found, nor validate health's (review S3); the old shared tag is validate's.
    #[test]
    fn each_tool_owns_only_its_own_tag() {
        let health = Some("gpudirect health: NIC eth3 is down");
        let validate = Some("gpudirect validate: slow node, 7% of baseline");
        let legacy = Some("gpudirect: slow node");
        assert!(is_ours(Tool::Health, health) && !is_ours(Tool::Validate, health));
        assert!(is_ours(Tool::Validate, validate) && !is_ours(Tool::Health, validate));
        assert!(is_ours(Tool::Validate, legacy) && !is_ours(Tool::Health, legacy));
    }

    #[test]
    fn only_our_drains_are_resumed() {
        let state = |states: &[&str], reason: Option<&str>| NodeState {
            states: states.iter().map(|s| s.to_string()).collect(),
            reason: reason.map(str::to_string),
            gpus: None,
        };
        let mine = "gpudirect health: eth3 down";
        assert_eq!(
            resume_decision(Tool::Health, &state(&["IDLE", "DRAIN"], Some(mine))),
            Resumed::Resumed {
                reason: mine.into()
            }
        );
        assert_eq!(
            resume_decision(Tool::Health, &state(&["IDLE", "DRAIN"], Some("bad DIMM"))),
            Resumed::AdminDrain {
                reason: Some("bad DIMM".into())
            }
        );
        let validates = "gpudirect validate: slow node";
        assert_eq!(
            resume_decision(Tool::Health, &state(&["IDLE", "DRAIN"], Some(validates))),
            Resumed::AdminDrain {
                reason: Some(validates.into())
            },
            "health leaves validate's drain"
        );
        assert_eq!(
            resume_decision(Tool::Health, &state(&["IDLE"], None)),
            Resumed::NotDrained
        );
        assert!(matches!(
            resume_decision(
                Tool::Validate,
                &state(&["MIXED", "DRAINING"], Some("gpudirect validate: slow"))
            ),
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
