//! `gpudirect sweep`'s decisions (pure): whether the queue wants the nodes, which nodes a
//! sweep tests, what each quarantined node's result does to it.
//!
//! A sweep tests the quarantined nodes together with healthy idle partners in one
//! allocation inside the quarantine reservation (its `flex` flag lets it take nodes outside
//! it), by `gpudirect validate --quarantine`; a healthy idle node found bad there is
//! quarantined by validate itself. A quarantined node judged healthy passes, one judged slow
//! or failed fails; anything else (no verdict, could not start) changes nothing.

use std::collections::BTreeMap;

use super::{Entry, Settings};

/// The reasons of a pending job that mean it waits for nodes: a sweep then takes none.
/// (Slurm's own words; a job held, waiting on a dependency, a begin time or a limit does
/// not want nodes now.)
pub const WANTS_NODES: [&str; 4] = ["Resources", "Priority", "ReqNodeNotAvail", "Nodes_required"];

/// The first pending job of `squeue -h -t PD -o "%i %r"` output that waits for nodes, as
/// `job 42 (Resources)` (pure).
pub fn queue_wants_nodes(squeue: &str) -> Option<String> {
    squeue.lines().find_map(|line| {
        let (job, reason) = line.trim().split_once(' ')?;
        let reason = reason.trim();
        WANTS_NODES
            .iter()
            .any(|w| reason.starts_with(w))
            .then(|| format!("job {job} ({reason})"))
    })
}

/// The nodes a sweep can use, from `sinfo -h -N -o "%N %T"` (pure): idle ones, also those
/// idle in a maintenance reservation (`maint`, `reserved`); never one drained, down, busy
/// or not responding (`*`).
pub fn idle_nodes(sinfo: &str) -> Vec<String> {
    let mut nodes: Vec<String> = sinfo
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (node, state) = (words.next()?, words.next()?);
            ["idle", "maint", "reserved"]
                .contains(&state)
                .then(|| node.to_string())
        })
        .collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

/// What a sweep adds to validate's arguments (the admin's, after `--`) when they choose no
/// test themselves (pure): where a suspect was quarantined for one of its NICs, `--per-rail`,
/// each rail of the profile tested on its own (a pair test over every NIC at once can pass
/// while one NIC is slow), with `--gpudirect auto` (the nodes' own profile, whose data NICs
/// are the rails) unless the admin names a mode or the rails. Nothing for a node's own
/// fault, or when the admin chose `--test` or `--per-rail`.
pub fn chosen_test(
    admin: &[String],
    entries: &[(String, Entry)],
    suspects: &[String],
) -> Vec<String> {
    let given = |flag: &str| {
        admin
            .iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
    };
    let for_a_nic = entries
        .iter()
        .any(|(node, entry)| entry.cause == super::Cause::Nic && suspects.contains(node));
    if !for_a_nic || given("--test") || given("--per-rail") {
        return Vec::new();
    }
    let mut added = vec!["--per-rail".to_string()];
    if !given("--gpudirect") && !given("--rails") {
        added.extend(["--gpudirect".to_string(), "auto".to_string()]);
    }
    added
}

/// Which nodes one sweep tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Quarantined nodes, idle, to be re-tested.
    pub suspects: Vec<String>,
    /// Healthy idle nodes to pair them with (and to sweep themselves).
    pub partners: Vec<String>,
}

impl Plan {
    /// Every node of the allocation.
    pub fn nodes(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .suspects
            .iter()
            .chain(&self.partners)
            .cloned()
            .collect();
        all.sort();
        all
    }
}

/// Nodes validate needs to tell a slow node from its partner: two partners besides a
/// suspect (a pair alone cannot say which side is slow).
pub const MIN_NODES: usize = 3;

/// The quarantined nodes a sweep tests (pure): the idle ones, at most `max_suspects`.
pub fn suspects(quarantined: &[String], idle: &[String], max_suspects: usize) -> Vec<String> {
    quarantined
        .iter()
        .filter(|n| idle.contains(n))
        .take(max_suspects)
        .cloned()
        .collect()
}

/// The sweep's nodes (pure): up to `max_suspects` quarantined nodes that are idle, and up
/// to `partners` healthy idle ones (at least enough for [`MIN_NODES`]); `None` when too
/// few nodes are idle, with why.
///
/// The partners rotate: they are taken from the healthy idle nodes, in turn, `wanted` at a
/// time, the turn being `rotation` (the sweeps the suspects have had, [`rotation`]), so that one suspect meets other
/// partners sweep after sweep, and a partner that is itself subtly slow cannot keep a
/// healthy suspect in quarantine, nor the same partners clear a slow one every time.
pub fn plan(
    quarantined: &[String],
    idle: &[String],
    max_suspects: usize,
    partners: usize,
    rotation: usize,
) -> Result<Plan, String> {
    let suspects = suspects(quarantined, idle, max_suspects);
    let healthy: Vec<&String> = idle.iter().filter(|n| !quarantined.contains(n)).collect();
    let wanted = partners.max(MIN_NODES.saturating_sub(suspects.len()));
    let start = if healthy.is_empty() {
        0
    } else {
        rotation.wrapping_mul(wanted) % healthy.len()
    };
    let mut partners: Vec<String> = healthy
        .iter()
        .cycle()
        .skip(start)
        .take(wanted.min(healthy.len()))
        .map(|n| (*n).clone())
        .collect();
    partners.sort();
    if suspects.len() + partners.len() < MIN_NODES {
        return Err(format!(
            "too few idle nodes to test: {} quarantined and idle, {} healthy and idle; a sweep needs {MIN_NODES} nodes",
            suspects.len(),
            partners.len()
        ));
    }
    Ok(Plan { suspects, partners })
}

/// The partners' rotation for a sweep of `suspects` (pure): the sweeps they have had so
/// far (passes and failures in a row, summed over them), which each counted sweep moves on.
pub fn rotation(entries: &[(String, Entry)], suspects: &[String]) -> usize {
    entries
        .iter()
        .filter(|(node, _)| suspects.contains(node))
        .map(|(_, e)| (e.passed + e.failed) as usize)
        .sum()
}

/// What a sweep's result does to a quarantined node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Passed `passes_to_return` sweeps in a row: back to service.
    Return,
    /// Failed `failures_to_drain` sweeps in a row: drained, with the evidence.
    Drain,
    /// Stays quarantined, its count written.
    Keep,
    /// No verdict this time (could not start, unknown): nothing changes.
    Unchanged,
}

/// The node's entry after a sweep judged it `verdict` (validate's verdict kind), and what
/// follows (pure). A pass clears the failures in a row and a failure the passes.
pub fn after_sweep(entry: &Entry, verdict: Option<&str>, settings: &Settings) -> (Entry, Next) {
    let mut next = entry.clone();
    match verdict {
        Some("healthy") => {
            next.passed += 1;
            next.failed = 0;
            let done = next.passed >= settings.passes_to_return;
            (next, if done { Next::Return } else { Next::Keep })
        }
        Some("slow_node" | "failed" | "down") => {
            next.failed += 1;
            next.passed = 0;
            let done = next.failed >= settings.failures_to_drain;
            (next, if done { Next::Drain } else { Next::Keep })
        }
        _ => (next, Next::Unchanged),
    }
}

/// Each node's verdict kind in `validate --json`'s report (pure): its `nodes` verdicts, or
/// for a report of rails (`--test rails`, `--per-rail`) each node's worst unit: `healthy`
/// when every rail of it is, else its first unit that is not (a NIC slow or down fails its
/// node's sweep: the quarantine was for that NIC).
pub fn verdicts(report: &serde_json::Value) -> BTreeMap<String, String> {
    let kinds = |list: &serde_json::Value| -> Vec<(String, String)> {
        list.as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|n| {
                        Some((
                            n["node"].as_str()?.to_string(),
                            n["verdict"]["kind"].as_str()?.to_string(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    // A rails report lists its nodes by name alone, beside its units.
    if !report["units"].is_array() {
        return kinds(&report["nodes"]).into_iter().collect();
    }
    let mut worst: BTreeMap<String, String> = BTreeMap::new();
    for (node, kind) in kinds(&report["units"]) {
        let seen = worst.entry(node).or_insert_with(|| "healthy".to_string());
        if seen == "healthy" {
            *seen = kind;
        }
    }
    worst
}
