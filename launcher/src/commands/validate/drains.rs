//! `validate --drain`, `--retries`, `--resume` and `--on-drain` in Slurm: the plans of
//! [`gpudirect::validate::actions`] carried out through [`gpudirect::drain`].
//!
//! Each node's outcome is said on stderr as it happens and kept as a [`NodeAction`] for
//! `--json`; a drain or resume that did not take, or an `--on-drain` command that failed,
//! is an error there and raises the exit status to 2 (never silent).

use gpudirect::drain::{self, Drained, Resumed};
use gpudirect::history::History;
use gpudirect::noteln;
use gpudirect::slurm::{self, NodeState};
use gpudirect::units::now_unix;
use gpudirect::validate::actions::{
    evidence, Candidate, DrainPlan, HistoryPoint, NodeAction, PairRun, ResumePlan,
};

/// What the evidence needs besides the node.
pub(super) struct EvidenceSource<'a> {
    /// `--on-drain CMD`.
    pub on_drain: Option<&'a str>,
    /// The history the runs are in.
    pub history: &'a History,
    /// The cluster.
    pub cluster: Option<&'a str>,
    /// The collective and size of the node's history to read (None: all).
    pub collective: Option<&'a str>,
    /// The size read.
    pub size_bytes: Option<u64>,
    /// The validation's pair runs.
    pub pairs: &'a [PairRun],
}

fn say(action: NodeAction) -> NodeAction {
    noteln!("gpudirect validate: {}", action.message);
    action
}

/// Drains the candidates that are to be drained (confirmed by reading the state back),
/// runs `--on-drain` for each newly drained one, and says what happened to each.
pub(super) fn apply_drains(candidates: &[Candidate], src: &EvidenceSource) -> Vec<NodeAction> {
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
        let action = match drain::drain_confirmed(drain::Tool::Validate, node, reason) {
            Ok(Drained::Drained { state }) => {
                let mut a = say(NodeAction {
                    state: Some(state.clone()),
                    ..NodeAction::new(
                        node,
                        "drained",
                        Some(reason.clone()),
                        format!("drained {node} (Slurm shows {state}): {reason}"),
                    )
                });
                if let Some(cmd) = src.on_drain {
                    run_on_drain(cmd, c, reason, src, &mut a);
                }
                a
            }
            Ok(Drained::AlreadyOurs { reason }) => say(NodeAction::new(
                node,
                "already_drained",
                Some(reason.clone()),
                format!("{node} is already drained by gpudirect (\"{reason}\"): left as it is"),
            )),
            Ok(Drained::AdminDrain { reason }) => say(NodeAction::new(
                node,
                "admin_drain",
                reason.clone(),
                format!(
                    "{node} left alone: drained by an admin for \"{}\"",
                    reason.as_deref().unwrap_or("(no reason)")
                ),
            )),
            Err(e) => say(NodeAction::error(
                node,
                format!("could not drain {node}: {e:#}"),
            )),
        };
        actions.push(action);
    }
    actions
}

/// Runs `--on-drain` for a node just drained; a failure is said and kept in `action`
/// (the drain stays).
fn run_on_drain(
    cmd: &str,
    c: &Candidate,
    reason: &str,
    src: &EvidenceSource,
    action: &mut NodeAction,
) {
    let history = match src
        .history
        .node_history(&c.node, src.collective, src.size_bytes)
    {
        Ok(h) => HistoryPoint::last_of(h.runs),
        Err(e) => {
            noteln!(
                "gpudirect validate: the evidence for {} has no history: {e}",
                c.node
            );
            Vec::new()
        }
    };
    let ev = evidence(c, reason, src.pairs, history, src.cluster, now_unix());
    match drain::run_on_drain(cmd, &ev) {
        Ok(path) => {
            noteln!(
                "gpudirect validate: --on-drain ran for {} with the evidence in {}",
                c.node,
                path.display()
            );
            action.evidence_file = Some(path);
        }
        Err(e) => {
            let message = format!("{e:#} ({} stays drained)", c.node);
            noteln!("gpudirect validate: {message}");
            action.error = Some(message);
        }
    }
}

/// Returns to service the drained nodes `plans` says to (the state read back), leaves
/// the others drained, and says what happened to each.
pub(super) fn apply_resumes(
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
            ResumePlan::Resume { why } => resume(node, why),
        };
        actions.push(say(action));
    }
    actions
}

fn resume(node: &str, why: &str) -> NodeAction {
    match drain::resume_if_ours(drain::Tool::Validate, node) {
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
        Err(e) => NodeAction::error(node, format!("could not resume {node}: {e:#}")),
    }
}
