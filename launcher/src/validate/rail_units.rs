//! The verdicts of `--test rails` per (node, rail): one validation per rail, read together
//! into a [`Unit`] per node and rail ([`units_of`]), the run's health over every rail
//! ([`combined_health`], [`with_down`]), and the nodes to drain with the rails named in the
//! reason ([`drain_candidates`]). Pure: the rail runs ([`super::rail_runs`]) hand in the
//! validations and what each node sent.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::compare::median;
use crate::validate::actions::{Candidate, DrainPlan};
use crate::validate::judging::{Class, Health, Report, Threshold, Validation, Verdict};

/// One (node, rail) in the report.
#[derive(Debug, Serialize)]
pub struct Unit {
    /// The node.
    pub node: String,
    /// The rail (its NIC).
    pub rail: String,
    /// The node's verdict on that rail.
    pub verdict: Verdict,
    /// Median of what this node sent on this rail, GB/s, over the pairs it was in (the
    /// direction a NIC's egress limits; a pair's own figure is its slower direction); for
    /// nccl-tests per rail, the median busbw of its pairs, and of a healthy node's passing
    /// pairs alone (a pair slowed by its partner says nothing of this node: on the lent H100
    /// node1's eth3 read 0.385 GB/s, under the 0.4 floor, from 0.04 with the slow node2 and
    /// 0.73 with node3).
    pub send_gbps: Option<f64>,
    /// The rail's reference: median of its passing pairs (the whole run's when none passed).
    pub rail_gbps: Option<f64>,
    /// Why, in words.
    pub evidence: Vec<String>,
}

/// Every (node, rail) with its verdict and figures; a (node, rail) in `down` (its NIC
/// there seen down before any traffic) is [`Verdict::Down`] with that reason, whatever
/// its rail's pairs gave.
pub fn units_of(
    nodes: &[String],
    rails: &[String],
    validations: &[Validation],
    reports: &[Report],
    sent: &BTreeMap<(String, usize), Vec<f64>>,
    down: &BTreeMap<(String, usize), String>,
) -> Vec<Unit> {
    let mut units = Vec::new();
    for node in nodes {
        for (r, ((rail, v), report)) in rails.iter().zip(validations).zip(reports).enumerate() {
            if let Some(why) = down.get(&(node.clone(), r)) {
                units.push(Unit {
                    node: node.clone(),
                    rail: rail.clone(),
                    verdict: Verdict::Down,
                    send_gbps: None,
                    rail_gbps: None,
                    evidence: vec![format!("{why}: left out of the rail's pairs")],
                });
                continue;
            }
            // Each rail pairs its own nodes (those whose NIC is up there).
            let Some(i) = v.nodes().iter().position(|n| n == node) else {
                continue;
            };
            let node_report = &report.nodes[i];
            // What the node sent, where the test knows; else the median of its pairs (of a
            // healthy node, its passing ones where it has any).
            let healthy = node_report.verdict == Verdict::Healthy;
            let of_pairs = |passing_only: bool| {
                let figures: Vec<f64> = v
                    .measurements()
                    .iter()
                    .filter(|m| m.nodes.contains(&i))
                    .filter(|m| !passing_only || m.class == Class::Pass)
                    .filter_map(|m| m.outcome.busbw())
                    .collect();
                median(&figures)
            };
            let mine = sent
                .get(&(node.clone(), r))
                .and_then(|values| median(values))
                .or_else(|| healthy.then(|| of_pairs(true)).flatten())
                .or_else(|| of_pairs(false));
            let passing: Vec<f64> = v
                .measurements()
                .iter()
                .filter(|m| m.class == Class::Pass)
                .filter_map(|m| m.outcome.busbw())
                .collect();
            units.push(Unit {
                node: node.clone(),
                rail: rail.clone(),
                verdict: node_report.verdict.clone(),
                send_gbps: mine,
                rail_gbps: median(&passing).or(v.threshold().and_then(Threshold::reference)),
                evidence: node_report
                    .evidence
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            });
        }
    }
    units
}

/// The worst of the rails' health: could not run only when no rail ran.
pub fn combined_health(all: impl Iterator<Item = Health>) -> Health {
    let all: Vec<Health> = all.collect();
    if all.iter().all(|h| *h == Health::CouldNotRun) {
        Health::CouldNotRun
    } else if all.contains(&Health::Failed) {
        Health::Failed
    } else if all
        .iter()
        .any(|h| matches!(h, Health::Degraded | Health::CouldNotRun))
    {
        Health::Degraded
    } else {
        Health::Healthy
    }
}

/// The rails' health with the NICs seen down before traffic: a NIC down fails the run as
/// a failed pair would, since the node cannot use that rail.
pub fn with_down(health: Health, down: &BTreeMap<(String, usize), String>) -> Health {
    match health {
        Health::Healthy | Health::Degraded | Health::CouldNotRun if !down.is_empty() => {
            Health::Failed
        }
        h => h,
    }
}

/// Each node with a slow, failed or down rail, to drain with the rails named in the reason
/// (`gpudirect validate: eth2 slow node`). Pure.
pub fn drain_candidates(units: &[Unit]) -> Vec<Candidate> {
    let mut by_node: std::collections::BTreeMap<&str, Vec<&Unit>> = Default::default();
    for u in units {
        if matches!(
            u.verdict,
            Verdict::SlowNode | Verdict::Failed | Verdict::Down
        ) {
            by_node.entry(&u.node).or_default().push(u);
        }
    }
    by_node
        .into_iter()
        .map(|(node, bad)| {
            let rails: Vec<String> = bad
                .iter()
                .map(|u| format!("{} {}", u.rail, u.verdict))
                .collect();
            Candidate {
                node: node.to_string(),
                verdict: rails.join(", "),
                evidence: bad
                    .iter()
                    .flat_map(|u| u.evidence.iter().map(move |e| format!("{}: {e}", u.rail)))
                    .collect(),
                cause: crate::quarantine::Cause::Nic,
                plan: DrainPlan::Drain {
                    reason: crate::drain::drain_reason(
                        crate::drain::Tool::Validate,
                        &rails.join(", "),
                    ),
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #45: rail eth1 was paired without node2 (its NIC down), eth2 over all four;
    /// node2 is `down` on eth1 with its reason, healthy on eth2, and the run fails.
    #[test]
    fn a_rail_left_by_a_down_nic_names_it_down_and_judges_its_other_rails() {
        let all: Vec<String> = (1..=4).map(|i| format!("node{i}")).collect();
        let rails = ["eth1", "eth2"].map(String::from).to_vec();
        let threshold = Threshold::floor(1.0).unwrap();
        let judged = |nodes: Vec<String>| {
            let mut v = Validation::new(
                nodes,
                crate::validate::pairing::Mode::Pairs,
                threshold.clone(),
            )
            .unwrap();
            while let Some(round) = v.next_round() {
                let outcomes = round
                    .groups
                    .iter()
                    .map(|_| crate::validate::judging::Outcome::Busbw(5.0))
                    .collect();
                v.record(&round, outcomes).unwrap();
            }
            v
        };
        let without_2: Vec<String> = all.iter().filter(|n| *n != "node2").cloned().collect();
        let validations = [judged(without_2), judged(all.clone())];
        let reports: Vec<Report> = validations.iter().map(Validation::report).collect();
        let down: BTreeMap<(String, usize), String> = [(
            ("node2".to_string(), 0),
            "eth1 is down (operstate down)".to_string(),
        )]
        .into();
        let units = units_of(
            &all,
            &rails,
            &validations,
            &reports,
            &BTreeMap::new(),
            &down,
        );
        assert_eq!(units.len(), 8);
        let of = |node: &str, rail: &str| {
            units
                .iter()
                .find(|u| u.node == node && u.rail == rail)
                .unwrap()
        };
        assert_eq!(of("node2", "eth1").verdict, Verdict::Down);
        assert_eq!(
            of("node2", "eth1").evidence,
            ["eth1 is down (operstate down): left out of the rail's pairs"]
        );
        assert_eq!(of("node2", "eth2").verdict, Verdict::Healthy);
        assert_eq!(of("node3", "eth1").verdict, Verdict::Healthy);
        let bad: Vec<&Unit> = units
            .iter()
            .filter(|u| u.verdict != Verdict::Healthy)
            .collect();
        assert_eq!(bad.len(), 1, "{bad:?}");
        let healthy = combined_health(reports.iter().map(crate::validate::judging::health));
        assert_eq!(healthy, Health::Healthy);
        assert_eq!(with_down(healthy, &down), Health::Failed);
        assert_eq!(with_down(healthy, &BTreeMap::new()), Health::Healthy);
        let drained = drain_candidates(&units);
        assert_eq!(drained.len(), 1);
        assert_eq!(drained[0].verdict, "eth1 down");
    }

    /// The lent H100's two-fault run: node1's eth3 read 0.385 GB/s "healthy" under a 0.4
    /// floor, the median of 0.04 (with the slow node2) and 0.73. A healthy node's figure is
    /// its passing pairs'; the slow node's is every pair's.
    #[test]
    fn a_healthy_nodes_figure_leaves_out_the_pairs_its_slow_partner_slowed() {
        let nodes: Vec<String> = (1..=4).map(|i| format!("node{i}")).collect();
        let mut v = Validation::new(
            nodes.clone(),
            crate::validate::pairing::Mode::Pairs,
            Threshold::floor(0.4).unwrap(),
        )
        .unwrap();
        while let Some(round) = v.next_round() {
            let outcomes = round
                .groups
                .iter()
                .map(|g| {
                    let slowed = g.contains(&1);
                    crate::validate::judging::Outcome::Busbw(if slowed { 0.04 } else { 0.75 })
                })
                .collect();
            v.record(&round, outcomes).unwrap();
        }
        let reports = [v.report()];
        let rails = ["eth3".to_string()];
        let units = units_of(
            &nodes,
            &rails,
            std::slice::from_ref(&v),
            &reports,
            &BTreeMap::new(),
            &BTreeMap::new(),
        );
        let of = |node: &str| units.iter().find(|u| u.node == node).unwrap();
        assert_eq!(of("node2").verdict, Verdict::SlowNode);
        assert_eq!(of("node2").send_gbps, Some(0.04));
        for healthy in ["node1", "node3", "node4"] {
            assert_eq!(of(healthy).verdict, Verdict::Healthy, "{healthy}");
            assert_eq!(of(healthy).send_gbps, Some(0.75), "{healthy}");
        }
        // node1 met node2 in the screen, then a healthy partner: it ran a slowed pair too.
        let node1_pairs = v
            .measurements()
            .iter()
            .filter(|m| m.nodes.contains(&0))
            .count();
        assert!(node1_pairs >= 2, "{node1_pairs}");
    }

    #[test]
    fn rails_combine_to_the_worst_and_a_bad_rail_drains_its_node_naming_it() {
        use Health::*;
        assert_eq!(combined_health([Healthy, Healthy].into_iter()), Healthy);
        assert_eq!(
            combined_health([Healthy, CouldNotRun].into_iter()),
            Degraded
        );
        assert_eq!(
            combined_health([CouldNotRun, CouldNotRun].into_iter()),
            CouldNotRun
        );
        assert_eq!(combined_health([Degraded, Failed].into_iter()), Failed);
        let unit = |node: &str, rail: &str, verdict: Verdict| Unit {
            node: node.into(),
            rail: rail.into(),
            verdict,
            send_gbps: None,
            rail_gbps: None,
            evidence: vec!["slow in every pairing (3/3)".into()],
        };
        let units = [
            unit("n1", "eth1", Verdict::Healthy),
            unit("n2", "eth1", Verdict::SlowNode),
            unit("n2", "eth2", Verdict::Failed),
            unit("n3", "eth2", Verdict::Healthy),
        ];
        let candidates = drain_candidates(&units);
        assert_eq!(candidates.len(), 1);
        assert_eq!(candidates[0].node, "n2");
        assert_eq!(candidates[0].verdict, "eth1 slow node, eth2 failed");
        assert_eq!(
            candidates[0].evidence[0],
            "eth1: slow in every pairing (3/3)"
        );
        assert!(
            matches!(&candidates[0].plan, DrainPlan::Drain { reason } if reason.starts_with("gpudirect validate: eth1 slow node"))
        );
    }
}
