//! Quarantine (issue #44): a suspect node is kept from users' jobs without being drained,
//! so that the tool's own checks (`gpudirect sweep`) can still run on it and return it.
//!
//! How, in Slurm terms:
//! - One reservation the tool owns (`[quarantine] reservation`, default
//!   `gpudirect-quarantine`), made with `flags=maint,ignore_jobs,flex` for the config's
//!   `users` only: users' jobs no longer start on its nodes (a running job is left to end),
//!   and a job of its users may take nodes inside and outside it (a quarantined node paired
//!   with a healthy one).
//! - The evidence is in each node's `Comment`, as the last part after an admin's own text
//!   (`ADMIN TEXT | gpudirect quarantine (validate, nic, since T): node2 eth3 slow ...`), which is
//!   kept as it was. Slurm 22.05 has no reservation comment, so the node comments are the
//!   record, and the source of truth: the reservation's node list is always set to exactly
//!   the nodes whose comment carries [`TAG`] ([`reconcile`]).
//! - The list is written whole (22.05 refuses `nodes+=`), so two runs at once may race; each
//!   writer sets the list from the comments, reads it back and tries again when its own node
//!   is not as it should be, and every later run puts right what a race left.
//! - A cause of class `config` (a library folder missing, the topology file unreadable,
//!   ownership) is the profile's fault, not the node's: nothing is quarantined for it
//!   ([`Put::NotTheNodes`]), or a wrong config would empty the cluster.
//! - Like drains ([`crate::drain`]): a node is returned by the tool that quarantined it,
//!   or by `sweep` (which returns any of ours after passes in a row); a drained node is left
//!   alone.

mod actions;
pub mod black_holes;
mod calls;
pub mod sweep;
#[cfg(test)]
mod tests;

use std::time::Duration;

use serde::Serialize;

pub use actions::{apply, cause_of_check, quarantined_action};
pub use calls::{
    create_reservation, delete_reservation, node_comment, node_comments, node_states,
    parse_node_comments, parse_reservation_nodes, pending_jobs, reservation_nodes,
    set_node_comment, set_reservation_nodes,
};
pub use gpudirect_core::config::QuarantineSettings as Settings;

use crate::drain::Tool;
use crate::output::shown::hides_text;
use crate::slurm::{self, SlurmError};

/// How our part of a node's comment starts.
pub const TAG: &str = "gpudirect quarantine (";

/// What sits between an admin's comment and ours.
const SEPARATOR: &str = " | ";

/// Longest problem text kept in a comment.
const MAX_PROBLEM: usize = 200;

/// How many times a change of the reservation is written and read back before it is an
/// error (another run may write the list at the same time).
const TRIES: u32 = 4;

/// Why a node is suspect: which part is at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The node itself (slow in every pairing, GPUs missing, runs failing).
    Node,
    /// One of its NICs (down, slow, its error counters rising).
    Nic,
    /// The config or profile (a library folder, the topology file, ownership): not the
    /// node's fault, never quarantined.
    Config,
}

impl Cause {
    /// The word in comments and messages.
    pub fn word(self) -> &'static str {
        match self {
            Cause::Node => "node",
            Cause::Nic => "nic",
            Cause::Config => "config",
        }
    }

    fn from_word(word: &str) -> Option<Cause> {
        [Cause::Node, Cause::Nic, Cause::Config]
            .into_iter()
            .find(|c| c.word() == word)
    }
}

/// Our part of a node's comment: who quarantined it, why, and its sweeps since.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The tool that quarantined it.
    pub tool: Tool,
    /// The class of the fault.
    pub cause: Cause,
    /// Sweeps passed in a row since.
    pub passed: u32,
    /// Sweeps failed in a row since.
    pub failed: u32,
    /// When it was quarantined (Unix seconds), set by [`put`]; `None` in an entry written
    /// before the tool kept it.
    pub since: Option<i64>,
    /// What was found, on one line.
    pub problem: String,
}

impl Entry {
    /// An entry for a node `tool` just found bad: `problem` on one line (characters that
    /// hide text and `|` become spaces and `/`), cut to [`MAX_PROBLEM`] characters. Pure.
    pub fn new(tool: Tool, cause: Cause, problem: &str) -> Entry {
        let one_line: String = problem
            .chars()
            .map(|c| match c {
                '|' => '/',
                c if hides_text(c) => ' ',
                c => c,
            })
            .collect();
        let mut problem = one_line.split_whitespace().collect::<Vec<_>>().join(" ");
        if problem.chars().count() > MAX_PROBLEM {
            problem = problem.chars().take(MAX_PROBLEM - 3).collect::<String>() + "...";
        }
        Entry {
            tool,
            cause,
            passed: 0,
            failed: 0,
            since: None,
            problem,
        }
    }

    /// `gpudirect quarantine (validate, nic, passed 1, since 1796500000): node2 eth3 slow`.
    /// Pure.
    pub fn render(&self) -> String {
        let mut meta = vec![self.tool.name().to_string(), self.cause.word().to_string()];
        if self.passed > 0 {
            meta.push(format!("passed {}", self.passed));
        }
        if self.failed > 0 {
            meta.push(format!("failed {}", self.failed));
        }
        if let Some(since) = self.since {
            meta.push(format!("since {since}"));
        }
        format!("{TAG}{}): {}", meta.join(", "), self.problem)
    }

    /// Reads what [`Entry::render`] wrote (pure); `None` for any other text.
    pub fn parse(text: &str) -> Option<Entry> {
        let rest = text.trim().strip_prefix(TAG)?;
        let (meta, problem) = rest.split_once("): ")?;
        let mut words = meta.split(", ");
        let tool = Tool::from_name(words.next()?)?;
        let cause = Cause::from_word(words.next()?)?;
        let (mut passed, mut failed, mut since) = (0, 0, None);
        for word in words {
            match word.split_once(' ')? {
                ("passed", n) => passed = n.parse().ok()?,
                ("failed", n) => failed = n.parse().ok()?,
                ("since", t) => since = Some(t.parse().ok()?),
                _ => return None,
            }
        }
        Some(Entry {
            tool,
            cause,
            passed,
            failed,
            since,
            problem: problem.to_string(),
        })
    }
}

/// A node's comment taken apart (pure): the admin's own text, and our entry (always the
/// last part).
pub fn split_comment(comment: Option<&str>) -> (Option<String>, Option<Entry>) {
    let Some(comment) = comment.map(str::trim).filter(|c| !c.is_empty()) else {
        return (None, None);
    };
    let Some(at) = comment.find(TAG) else {
        return (Some(comment.to_string()), None);
    };
    let Some(entry) = Entry::parse(&comment[at..]) else {
        return (Some(comment.to_string()), None);
    };
    let admin = comment[..at].trim_end();
    let admin = admin.strip_suffix(SEPARATOR.trim()).unwrap_or(admin).trim();
    ((!admin.is_empty()).then(|| admin.to_string()), Some(entry))
}

/// The comment made of an admin's text and our entry (pure); empty when both are none.
pub fn join_comment(admin: Option<&str>, ours: Option<&Entry>) -> String {
    match (admin, ours) {
        (Some(a), Some(e)) => format!("{a}{SEPARATOR}{}", e.render()),
        (None, Some(e)) => e.render(),
        (Some(a), None) => a.to_string(),
        (None, None) => String::new(),
    }
}

/// What the reservation should become so that it holds exactly `wanted` (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// It holds them already (or there is none and none is wanted).
    Nothing,
    /// Make it, with these nodes.
    Create(Vec<String>),
    /// Set its node list to these.
    SetNodes(Vec<String>),
    /// Delete it: no node is quarantined (Slurm keeps no reservation of no nodes).
    Delete,
}

/// The change that makes a reservation now holding `current` (`None`: there is none) hold
/// `wanted` (pure; order does not matter).
pub fn change_for(current: Option<&[String]>, wanted: &[String]) -> Change {
    let mut wanted = wanted.to_vec();
    wanted.sort();
    wanted.dedup();
    match current {
        None if wanted.is_empty() => Change::Nothing,
        None => Change::Create(wanted),
        Some(_) if wanted.is_empty() => Change::Delete,
        Some(now) => {
            let mut now = now.to_vec();
            now.sort();
            now.dedup();
            if now == wanted {
                Change::Nothing
            } else {
                Change::SetNodes(wanted)
            }
        }
    }
}

/// Why the quarantine could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum QuarantineError {
    /// Slurm could not be asked, or refused.
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    /// The change was written but Slurm does not show it.
    #[error("{node} is {} reservation {reservation} after {TRIES} tries (another run changing it at once, or this user is no Slurm operator: reservations are made by root, SlurmUser or an admin)", if *.wanted_in { "still not in" } else { "still in" })]
    DidNotTake {
        /// The node.
        node: String,
        /// The reservation.
        reservation: String,
        /// Whether it should be in.
        wanted_in: bool,
    },
}

/// The quarantined nodes (whose comment carries our entry), with their entries.
pub fn quarantined() -> Result<Vec<(String, Entry)>, QuarantineError> {
    Ok(node_comments()?
        .into_iter()
        .filter_map(|(node, comment)| Some((node, split_comment(comment.as_deref()).1?)))
        .collect())
}

/// Sets the reservation to exactly the quarantined nodes; returns them with their entries.
pub fn reconcile(settings: &Settings) -> Result<Vec<(String, Entry)>, QuarantineError> {
    let entries = quarantined()?;
    let wanted: Vec<String> = entries.iter().map(|(node, _)| node.clone()).collect();
    let current = reservation_nodes(&settings.reservation)?;
    match change_for(current.as_deref(), &wanted) {
        Change::Nothing => {}
        Change::Create(nodes) => {
            create_reservation(&settings.reservation, &nodes, &settings.users)?
        }
        Change::SetNodes(nodes) => set_reservation_nodes(&settings.reservation, &nodes)?,
        Change::Delete => delete_reservation(&settings.reservation)?,
    }
    Ok(entries)
}

/// Reconciles until `node` is in the reservation (`wanted_in`) or out of it, reading it
/// back each time: a run writing the list at the same moment may have undone ours.
fn settle(settings: &Settings, node: &str, wanted_in: bool) -> Result<(), QuarantineError> {
    for attempt in 0..TRIES {
        // A create that lost a race to another run's create fails: the next try updates.
        let tried = reconcile(settings);
        let now = reservation_nodes(&settings.reservation)?.unwrap_or_default();
        if now.iter().any(|n| n == node) == wanted_in {
            return Ok(());
        }
        if attempt + 1 == TRIES {
            tried?;
        }
        std::thread::sleep(Duration::from_millis(200 + 150 * u64::from(attempt)));
    }
    Err(QuarantineError::DidNotTake {
        node: node.to_string(),
        reservation: settings.reservation.clone(),
        wanted_in,
    })
}

/// What [`put`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Put {
    /// Quarantined now: its comment carries the entry and the reservation holds it.
    Quarantined {
        /// The node's comment now.
        comment: String,
    },
    /// Already quarantined: its first entry is kept (the first problem found stays
    /// visible), and the reservation is checked to hold it.
    AlreadyQuarantined {
        /// The entry it has.
        entry: String,
    },
    /// A config fault: not the node's, nothing done.
    NotTheNodes,
    /// Drained (by anyone): no user job lands there anyway; left as it is.
    Drained {
        /// The drain's reason.
        reason: Option<String>,
    },
}

/// The `[quarantine]` settings of the config at `path` (defaults where it has none). As
/// root, only a config root alone can change is taken, as the plugin does: its `users`
/// decide who may run jobs on quarantined nodes.
pub fn settings_from(
    path: &std::path::Path,
) -> Result<Settings, gpudirect_core::system::LoadError> {
    use gpudirect_core::system::{load_config, Ownership};
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    Ok(load_config(&path, Ownership::for_caller())?.quarantine)
}

/// Quarantines `node` with `entry` (see the module's rules).
pub fn put(settings: &Settings, node: &str, entry: &Entry) -> Result<Put, QuarantineError> {
    if entry.cause == Cause::Config {
        return Ok(Put::NotTheNodes);
    }
    let state = slurm::node_state(node)?;
    if state.drained() {
        return Ok(Put::Drained {
            reason: state.reason,
        });
    }
    let (admin, ours) = split_comment(node_comment(node)?.as_deref());
    let outcome = match ours {
        Some(kept) => Put::AlreadyQuarantined {
            entry: kept.render(),
        },
        None => {
            let dated = Entry {
                since: Some(crate::units::now_unix()),
                ..entry.clone()
            };
            let comment = join_comment(admin.as_deref(), Some(&dated));
            set_node_comment(node, &comment)?;
            Put::Quarantined { comment }
        }
    };
    settle(settings, node, true)?;
    Ok(outcome)
}

/// What [`release`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Released {
    /// Out of the quarantine: our entry removed from its comment, the admin's text kept.
    Released {
        /// The entry it had.
        entry: String,
    },
    /// Not quarantined.
    NotQuarantined,
    /// Quarantined by another tool: left as it is.
    OtherTool {
        /// The entry it has.
        entry: String,
    },
}

/// Returns `node` from the quarantine when `by` quarantined it (`None`: whoever did, as
/// `sweep` does).
pub fn release(
    settings: &Settings,
    node: &str,
    by: Option<Tool>,
) -> Result<Released, QuarantineError> {
    let (admin, ours) = split_comment(node_comment(node)?.as_deref());
    let Some(entry) = ours else {
        return Ok(Released::NotQuarantined);
    };
    if by.is_some_and(|tool| tool != entry.tool) {
        return Ok(Released::OtherTool {
            entry: entry.render(),
        });
    }
    set_node_comment(node, &join_comment(admin.as_deref(), None))?;
    settle(settings, node, false)?;
    Ok(Released::Released {
        entry: entry.render(),
    })
}

/// Writes `node`'s entry anew (a sweep's count of passes and failures), the admin's text
/// kept; the reservation is not touched.
pub fn update_entry(node: &str, entry: &Entry) -> Result<(), QuarantineError> {
    let (admin, _) = split_comment(node_comment(node)?.as_deref());
    set_node_comment(node, &join_comment(admin.as_deref(), Some(entry)))?;
    Ok(())
}
