//! `--quarantine` carried out for `health`, `validate` and `vet`: each candidate the
//! command would drain is quarantined instead ([`put`]), said on stderr with the tool's tag
//! and kept as a [`NodeAction`] for `--json` and reports, as [`crate::drain::apply_drains`]
//! does for drains.

use serde::Serialize;

use super::{put, Cause, Entry, Put, Settings};
use crate::drain::{hand_over_evidence, Candidate, DrainPlan, NodeAction, Tool};
use crate::noteln;
use crate::output::with_sources;

/// Quarantines the candidates whose plan is to drain them, runs `on_drain` with
/// `evidence(candidate, entry)` for each newly quarantined one, and says what happened to
/// each.
pub fn apply<E: Serialize>(
    tool: Tool,
    settings: &Settings,
    candidates: &[Candidate],
    on_drain: Option<&str>,
    evidence: impl Fn(&Candidate, &str) -> E,
) -> Vec<NodeAction> {
    let mut actions = Vec::new();
    for c in candidates {
        let node = c.node.as_str();
        let mut action = match &c.plan {
            DrainPlan::Spare { why } => NodeAction::new(
                node,
                "not_quarantined",
                None,
                format!("{node} not quarantined ({}): {why}", c.verdict),
            ),
            DrainPlan::Drain { .. } => {
                let problem = match c.evidence.first() {
                    Some(first) => format!("{}, {first}", c.verdict),
                    None => c.verdict.clone(),
                };
                let entry = Entry::new(tool, c.cause, &problem);
                quarantined_action(node, settings, &entry, put(settings, node, &entry))
            }
        };
        noteln!("{} {}", tool.tag(), action.message);
        if let (Some(command), "quarantined") = (on_drain, action.outcome) {
            let entry = action.reason.clone().unwrap_or_default();
            hand_over_evidence(
                tool,
                command,
                &evidence(c, &entry),
                "quarantined",
                &mut action,
            );
        }
        actions.push(action);
    }
    actions
}

/// What a quarantine of `node` came to, in words (pure).
pub fn quarantined_action(
    node: &str,
    settings: &Settings,
    entry: &Entry,
    done: Result<Put, super::QuarantineError>,
) -> NodeAction {
    let reservation = &settings.reservation;
    match done {
        Ok(Put::Quarantined { .. }) => NodeAction::new(
            node,
            "quarantined",
            Some(entry.render()),
            format!(
                "quarantined {node} in reservation {reservation} (users' jobs no longer start there; `gpudirect sweep` tests it): {}",
                entry.problem
            ),
        ),
        Ok(Put::AlreadyQuarantined { entry: had }) => NodeAction::new(
            node,
            "already_quarantined",
            Some(had.clone()),
            format!("{node} is already quarantined (\"{had}\"): left as it is"),
        ),
        Ok(Put::NotTheNodes) => NodeAction::new(
            node,
            "not_quarantined",
            None,
            format!(
                "{node} not quarantined: {} is a fault of the config or profile, not of the node (fix the config; a wrong config would otherwise empty the cluster)",
                entry.problem
            ),
        ),
        Ok(Put::Drained { reason }) => NodeAction::new(
            node,
            "already_drained",
            reason.clone(),
            format!(
                "{node} left as it is: drained already (\"{}\")",
                reason.as_deref().unwrap_or("(no reason)")
            ),
        ),
        Err(e) => NodeAction::error(
            node,
            format!("could not quarantine {node}: {}", with_sources(&e)),
        ),
    }
}

/// The cause of a failed check of `health` or of vet's node checks, by the check's name
/// (`nics`, `gpus`, `libraries`, ...; `nccl` is the quick all_reduce): a NIC's, the
/// config's, or else the node's. Pure.
pub fn cause_of_check(check: &str) -> Cause {
    use gpudirect_core::config::CheckKind;
    let kind = CheckKind::ALL
        .into_iter()
        .chain([CheckKind::Ownership])
        .find(|k| k.name() == check);
    match kind {
        Some(CheckKind::Nics | CheckKind::NicSpeed | CheckKind::NicCounters) => Cause::Nic,
        Some(
            CheckKind::Libraries
            | CheckKind::TopologyFile
            | CheckKind::RxdmSocketDir
            | CheckKind::Ownership,
        ) => Cause::Config,
        Some(CheckKind::Gpus) | None => Cause::Node,
    }
}
