//! `gpudirect vet`: a job's own nodes checked before it trains, and the good ones handed
//! on. The command (`commands/vet.rs`) runs, in a time [`Budget`](crate::budget::Budget):
//! 1. the node checks of `gpudirect health` on every node at once, one srun step
//!    ([`node_checks`]);
//! 2. validation rounds over the nodes that passed ([`pairs`]): nccl-tests pairs
//!    ([`crate::validate::pairs`]) or MPI rail pairs ([`crate::validate::rail_runs`]);
//! 3. each node's [`Standing`] from both ([`standings`]), what the job does with them
//!    ([`decide`]), and the files the next step reads ([`outputs`]).
//!
//! A node is good only when it passed the checks and its pairs were judged healthy; bad
//! when a check failed, the checks gave no answer for it, or its pairs were judged slow,
//! failed or on a bad link; unchecked when the budget ended before it was judged.

pub mod node_checks;
pub mod outputs;
pub mod pairs;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::validate::judging::Verdict;

/// Where a node stands after the vet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Passed the checks, and its pairs were healthy.
    Good,
    /// A check failed, or its pairs were not healthy.
    Bad,
    /// Not judged within the budget.
    Unchecked,
}

/// One node's standing and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeVet {
    /// The node.
    pub node: String,
    /// Where it stands.
    pub standing: Standing,
    /// Why (each failed check, each slow pair, or what was left undone).
    pub why: Vec<String>,
}

/// What the node checks said of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// Every check passed.
    Passed,
    /// These checks failed (`check: problem (fix)` each).
    Failed(Vec<String>),
    /// The node gave no answer (its step task failed or printed nothing readable).
    NoAnswer(String),
    /// The budget ended before the checks did.
    NotRun,
}

/// What the validation rounds said of one node: its verdict (the worst over its rails for
/// `--test rails`) and the evidence, in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Paired {
    /// The verdict.
    pub verdict: Verdict,
    /// The evidence.
    pub evidence: Vec<String>,
}

/// Each node's standing from its checks and its pairs (pure). `pairs` is `None` when no
/// round could run (fewer than two nodes passed the checks): a node that passed the checks
/// is then good on them alone; `stopped` says why a node that passed the checks was not
/// judged by its pairs (the budget ended, or Ctrl-C).
pub fn standings(
    nodes: &[String],
    checks: &BTreeMap<String, Checked>,
    pairs: Option<&BTreeMap<String, Paired>>,
    stopped: Option<&str>,
) -> Vec<NodeVet> {
    nodes
        .iter()
        .map(|node| {
            let (standing, why) = match checks.get(node) {
                None | Some(Checked::NotRun) => (
                    Standing::Unchecked,
                    vec![format!(
                        "node checks not finished ({})",
                        stopped.unwrap_or("the budget ended")
                    )],
                ),
                Some(Checked::Failed(failures)) => (Standing::Bad, failures.clone()),
                Some(Checked::NoAnswer(what)) => (
                    Standing::Bad,
                    vec![format!("the node checks gave no answer: {what}")],
                ),
                Some(Checked::Passed) => match pairs {
                    None => (
                        Standing::Good,
                        vec!["node checks passed; no partner to pair with".to_string()],
                    ),
                    Some(pairs) => match pairs.get(node) {
                        Some(p) => paired_standing(p),
                        None => (
                            Standing::Unchecked,
                            vec![format!(
                                "node checks passed, pairs not judged ({})",
                                stopped.unwrap_or("not measured")
                            )],
                        ),
                    },
                },
            };
            NodeVet {
                node: node.clone(),
                standing,
                why,
            }
        })
        .collect()
}

/// A node that passed its checks, by its pairs' verdict.
fn paired_standing(p: &Paired) -> (Standing, Vec<String>) {
    let why = |lead: String| {
        std::iter::once(lead)
            .chain(p.evidence.iter().cloned())
            .collect::<Vec<_>>()
    };
    match &p.verdict {
        Verdict::Healthy => (Standing::Good, Vec::new()),
        Verdict::Unknown => (
            Standing::Unchecked,
            why("pairs gave no verdict".to_string()),
        ),
        // A launch that hung says nothing of the node (issue #45).
        Verdict::CouldNotStart => (
            Standing::Unchecked,
            why("its pairs could not start (the launch hung before NCCL)".to_string()),
        ),
        bad => (Standing::Bad, why(bad.to_string())),
    }
}

/// The worst of a node's verdicts over its rails, with the rail named in the evidence:
/// failed or down, then slow, then a bad link, then unknown, then healthy (pure).
pub fn worst_over_rails(per_rail: &[(String, Verdict, Vec<String>)]) -> Option<Paired> {
    let rank = |v: &Verdict| match v {
        Verdict::Failed | Verdict::Down => 0,
        Verdict::SlowNode => 1,
        Verdict::BadLink { .. } => 2,
        Verdict::Unknown | Verdict::CouldNotStart => 3,
        Verdict::Healthy => 4,
    };
    let worst = per_rail.iter().min_by_key(|(_, v, _)| rank(v))?;
    let evidence = per_rail
        .iter()
        .filter(|(_, v, _)| *v != Verdict::Healthy)
        .map(|(rail, v, e)| match e.is_empty() {
            true => format!("{rail}: {v}"),
            false => format!("{rail}: {v} ({})", e.join("; ")),
        })
        .collect();
    Some(Paired {
        verdict: worst.1.clone(),
        evidence,
    })
}

/// What the job does once its nodes are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Every node is good: nothing to change.
    AllGood,
    /// At least `--need` nodes are good: the next step runs on them (the allocation stays).
    GoOn,
    /// At least `--need` nodes are good and the job was shrunk to them (`--shrink`).
    Shrink,
    /// Too few good nodes: the job is requeued with the others excluded (`--requeue`).
    Requeue,
    /// Too few good nodes, and no `--requeue`: vet exits with its own code (4).
    TooFew,
}

impl Decision {
    /// Its name in records and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::AllGood => "all_good",
            Decision::GoOn => "go_on",
            Decision::Shrink => "shrink",
            Decision::Requeue => "requeue",
            Decision::TooFew => "too_few",
        }
    }
}

/// What the job does with `good` good nodes of `allocated`, needing `need` (pure).
pub fn decide(allocated: usize, good: usize, need: usize, shrink: bool, requeue: bool) -> Decision {
    match (good >= allocated, good >= need) {
        (true, _) => Decision::AllGood,
        (false, true) if shrink => Decision::Shrink,
        (false, true) => Decision::GoOn,
        (false, false) if requeue => Decision::Requeue,
        (false, false) => Decision::TooFew,
    }
}

/// The nodes of `vets` that stand as `standing`, in order.
pub fn nodes_that_are(vets: &[NodeVet], standing: Standing) -> Vec<String> {
    vets.iter()
        .filter(|v| v.standing == standing)
        .map(|v| v.node.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("node{i}")).collect()
    }

    #[test]
    fn a_node_is_good_only_with_passed_checks_and_healthy_pairs() {
        let nodes = names(5);
        let checks: BTreeMap<String, Checked> = [
            ("node1", Checked::Passed),
            ("node2", Checked::Failed(vec!["nics: eth3 is down".into()])),
            ("node3", Checked::NoAnswer("srun: task 2 exited 1".into())),
            ("node4", Checked::Passed),
            ("node5", Checked::Passed),
        ]
        .into_iter()
        .map(|(n, c)| (n.to_string(), c))
        .collect();
        let pairs: BTreeMap<String, Paired> =
            [("node1", Verdict::Healthy), ("node4", Verdict::SlowNode)]
                .into_iter()
                .map(|(n, v)| {
                    (
                        n.to_string(),
                        Paired {
                            verdict: v,
                            evidence: vec!["slow with node1".into()],
                        },
                    )
                })
                .collect();
        let vets = standings(&nodes, &checks, Some(&pairs), Some("the budget ended"));
        let standing: Vec<Standing> = vets.iter().map(|v| v.standing).collect();
        assert_eq!(
            standing,
            [
                Standing::Good,
                Standing::Bad,
                Standing::Bad,
                Standing::Bad,
                Standing::Unchecked
            ]
        );
        assert_eq!(vets[1].why, ["nics: eth3 is down"]);
        assert!(vets[2].why[0].contains("no answer"), "{:?}", vets[2].why);
        assert_eq!(vets[3].why, ["slow node", "slow with node1"]);
        assert!(vets[4].why[0].contains("budget"), "{:?}", vets[4].why);
        assert_eq!(
            nodes_that_are(&vets, Standing::Bad),
            ["node2", "node3", "node4"]
        );
    }

    #[test]
    fn without_pairs_the_checks_decide() {
        let nodes = names(2);
        let checks: BTreeMap<String, Checked> = [
            ("node1".to_string(), Checked::Passed),
            ("node2".to_string(), Checked::NotRun),
        ]
        .into();
        let vets = standings(&nodes, &checks, None, None);
        assert_eq!(vets[0].standing, Standing::Good);
        assert_eq!(vets[1].standing, Standing::Unchecked);
    }

    #[test]
    fn the_worst_rail_names_the_node_and_its_rail() {
        let per_rail = vec![
            ("eth1".to_string(), Verdict::Healthy, vec![]),
            (
                "eth3".to_string(),
                Verdict::SlowNode,
                vec!["0.01 GB/s".to_string()],
            ),
            ("eth4".to_string(), Verdict::Unknown, vec![]),
        ];
        let worst = worst_over_rails(&per_rail).unwrap();
        assert_eq!(worst.verdict, Verdict::SlowNode);
        assert_eq!(
            worst.evidence,
            ["eth3: slow node (0.01 GB/s)", "eth4: unknown"]
        );
        assert_eq!(worst_over_rails(&[]), None);
    }

    #[test]
    fn one_screen_and_one_re_pairing_name_a_slow_node() {
        use crate::budget::Budget;
        use crate::validate::judging::{Outcome, Threshold, Validation};
        use crate::validate::pairing::Mode;
        use crate::validate::session::drive;
        for slow in 0..6 {
            let threshold = Threshold::baseline(100.0, 0.10).unwrap();
            let mut v = Validation::new(names(6), Mode::Pairs, threshold)
                .unwrap()
                .with_followups(1);
            let result: Result<(), crate::validate::session::SessionError<()>> = drive(
                &mut v,
                &Budget::unlimited(),
                |round| {
                    Ok(round
                        .groups
                        .iter()
                        .map(|g| {
                            let busbw = if g.contains(&slow) { 40.0 } else { 100.0 };
                            (Outcome::Busbw(busbw), ())
                        })
                        .collect())
                },
                |_, _| Ok(()),
            );
            assert!(result.is_ok());
            let report = v.report();
            assert_eq!(report.rounds, 2, "slow node{}", slow + 1);
            for n in &report.nodes {
                let want = if n.index == slow {
                    Verdict::SlowNode
                } else {
                    Verdict::Healthy
                };
                assert_eq!(n.verdict, want, "slow node{}: {report:?}", slow + 1);
            }
        }
    }

    #[test]
    fn the_decision_follows_need_shrink_and_requeue() {
        assert_eq!(decide(6, 6, 6, true, true), Decision::AllGood);
        assert_eq!(decide(6, 5, 5, false, false), Decision::GoOn);
        assert_eq!(decide(6, 5, 5, true, true), Decision::Shrink);
        assert_eq!(decide(6, 5, 6, true, true), Decision::Requeue);
        assert_eq!(decide(6, 5, 6, true, false), Decision::TooFew);
        assert_eq!(decide(6, 0, 1, false, false), Decision::TooFew);
    }
}
