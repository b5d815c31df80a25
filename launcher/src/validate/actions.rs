//! What `validate --drain`, `--retries`, `--resume` and `--on-drain` decide, from a
//! validation's report: which nodes to drain (with what tagged reason) or spare, which
//! drained nodes to return, what the `--on-drain` evidence file says, and how each node's
//! outcome is kept for `--json`. Pure and tested here; [`crate::drain`] carries the plans
//! out and keeps its rules (every drain tagged `gpudirect validate:` and confirmed by
//! reading the state back, only our own drains resumed).

use serde::Serialize;

use crate::drain;
pub use crate::drain::{any_error, Candidate, DrainPlan, HistoryPoint, NodeAction, ResumePlan};
use crate::history::RunId;
use crate::slurm::NodeState;
use crate::units::format_rfc3339;
use crate::validate::judging::{NodeReport, Report, RetestReport, Verdict};

/// What the evidence file names as the tool that drained.
pub const TOOL: &str = "gpudirect validate";

/// One pair run of the validation as recorded in the history (for the evidence).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairRun {
    /// Round number, 1-based.
    pub round: usize,
    /// A re-test (`--retries`, `--resume`) rather than a round of the verdicts.
    pub retest: bool,
    /// The nodes of the run.
    pub nodes: Vec<String>,
    /// Busbw at the judged size, GB/s.
    pub busbw: Option<f64>,
    /// `pass`, `slow` or `failed` against the threshold.
    pub verdict: Option<String>,
    /// The run's id in the history (none when it could not be recorded).
    pub run_id: Option<RunId>,
}

/// The nodes judged slow or failed and what `--drain` does with each: drained with a
/// tagged reason, unless it was re-tested (`--retries`) and was not bad in every re-test.
/// Pure.
pub fn drain_plan(report: &Report) -> Vec<Candidate> {
    report
        .nodes
        .iter()
        .filter(|n| matches!(n.verdict, Verdict::SlowNode | Verdict::Failed))
        .map(|n| {
            let retest = report.retests.iter().find(|r| r.index == n.index);
            let plan = match retest {
                Some(r) if !r.bad_every_time => DrainPlan::Spare { why: r.summary() },
                _ => DrainPlan::Drain {
                    reason: reason_for(n, retest),
                },
            };
            Candidate {
                node: n.node.clone(),
                verdict: n.verdict.to_string(),
                evidence: n.evidence.iter().map(ToString::to_string).collect(),
                cause: crate::quarantine::Cause::Node,
                plan,
            }
        })
        .collect()
}

/// What `validate --extra` writes to each node's Extra ([`crate::node_extra`]): 0 for a
/// node `--drain` would drain (slow or failed, not spared by a re-test), 1 for one judged
/// healthy, spared or with a bad link only (the node itself is fast); a node of unknown
/// verdict, or whose pairs could not start, is left as it is. The busbw is the median of the node's pair runs at the judged
/// size. Pure.
pub fn extra_verdicts(
    report: &Report,
    pairs: &[PairRun],
    at: i64,
) -> Vec<(String, crate::node_extra::Verdict)> {
    let to_drain: Vec<String> = drain_plan(report)
        .into_iter()
        .filter(|c| matches!(c.plan, DrainPlan::Drain { .. }))
        .map(|c| c.node)
        .collect();
    report
        .nodes
        .iter()
        .filter(|n| !matches!(n.verdict, Verdict::Unknown | Verdict::CouldNotStart))
        .map(|n| {
            let figures: Vec<f64> = pairs
                .iter()
                .filter(|p| !p.retest && p.nodes.contains(&n.node))
                .filter_map(|p| p.busbw)
                .collect();
            let verdict = crate::node_extra::Verdict {
                tool: drain::Tool::Validate,
                ok: !to_drain.contains(&n.node),
                busbw_gbps: crate::baseline::median(&figures),
                at,
            };
            (n.node.clone(), verdict)
        })
        .collect()
}

/// `gpudirect validate: slow node, slow in every pairing (2/2), 47% of baseline, with node1, node2;
/// 2/2 re-tests bad`. Pure.
fn reason_for(n: &NodeReport, retest: Option<&RetestReport>) -> String {
    let mut problem = n.verdict.to_string();
    if let Some(first) = n.evidence.first() {
        problem = format!("{problem}, {first}");
    }
    if let Some(r) = retest.filter(|r| !r.runs.is_empty()) {
        problem = format!("{problem}; {}/{} re-tests bad", r.runs.len(), r.wanted);
    }
    drain::drain_reason(drain::Tool::Validate, &problem)
}

/// For each drained node (its state read before the validation), whether `--resume`
/// returns it: only a node drained with gpudirect's tag, judged healthy, that passed a
/// re-test with a node that is not drained. Pure.
pub fn resume_plan(report: &Report, drained: &[(String, NodeState)]) -> Vec<ResumePlan> {
    drained
        .iter()
        .map(|(node, state)| {
            if !drain::is_ours(drain::Tool::Validate, state.reason.as_deref()) {
                return ResumePlan::Admin;
            }
            let Some(n) = report.nodes.iter().find(|n| &n.node == node) else {
                return ResumePlan::Stay {
                    why: "it was not validated".into(),
                };
            };
            let retest = report.retests.iter().find(|r| r.index == n.index);
            match (&n.verdict, retest) {
                (Verdict::Healthy, Some(r)) if r.passed.is_some() => {
                    let with = r
                        .passed
                        .and_then(|k| r.runs.get(k - 1))
                        .map(|run| format!(" with {}", run.partner))
                        .unwrap_or_default();
                    ResumePlan::Resume {
                        why: format!("healthy, and {}{with}", r.summary()),
                    }
                }
                (Verdict::Healthy, Some(r)) => ResumePlan::Stay {
                    why: format!("healthy in the rounds, but {}", r.summary()),
                },
                (Verdict::Healthy, None) => ResumePlan::Stay {
                    why: "healthy in the rounds, but not re-tested with a node that is not drained"
                        .into(),
                },
                (verdict, _) => ResumePlan::Stay {
                    why: match n.evidence.first() {
                        Some(e) => format!("{verdict}: {e}"),
                        None => verdict.to_string(),
                    },
                },
            }
        })
        .collect()
}

/// A pair run of the node, in the evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairEvidence {
    /// The other node.
    pub partner: String,
    /// Busbw, GB/s.
    pub busbw: Option<f64>,
    /// `pass`, `slow`, `failed`.
    pub verdict: Option<String>,
    /// Its run in the history.
    pub run_id: Option<RunId>,
    /// Round, 1-based.
    pub round: usize,
    /// A re-test.
    pub retest: bool,
}

/// What validate adds to the evidence file: the node's pair runs in this validation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairsEvidence {
    /// Its pair runs in this validation.
    pub pairs: Vec<PairEvidence>,
}

/// validate's `--on-drain` evidence file.
pub type EvidenceFile = drain::EvidenceFile<PairsEvidence>;

/// The evidence for `c`, drained with `reason`: its pairs of `pairs`, and `history` (the
/// node's last runs, [`HistoryPoint::last_of`]). Pure.
pub fn evidence(
    c: &Candidate,
    reason: &str,
    pairs: &[PairRun],
    history: Vec<HistoryPoint>,
    cluster: Option<&str>,
    at: i64,
) -> EvidenceFile {
    let pairs = pairs
        .iter()
        .filter(|p| p.nodes.contains(&c.node))
        .map(|p| PairEvidence {
            partner: p
                .nodes
                .iter()
                .filter(|n| **n != c.node)
                .cloned()
                .collect::<Vec<_>>()
                .join(","),
            busbw: p.busbw,
            verdict: p.verdict.clone(),
            run_id: p.run_id,
            round: p.round,
            retest: p.retest,
        })
        .collect();
    EvidenceFile {
        node: c.node.clone(),
        reason: reason.to_string(),
        verdict: c.verdict.clone(),
        evidence: c.evidence.clone(),
        history,
        cluster: cluster.map(str::to_string),
        tool: TOOL,
        at: format_rfc3339(at),
        details: PairsEvidence { pairs },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::RunStatus;
    use crate::validate::judging::{Outcome, Retests, Threshold, Validation};
    use crate::validate::pairing::Mode;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("node{i}")).collect()
    }

    /// A 3-node validation (node3 at index 2) with `busbw(run number, group)`.
    fn validate(
        retests: Retests,
        busbw: impl Fn(usize, &[usize]) -> f64,
    ) -> crate::validate::judging::Report {
        let mut v = Validation::new(names(3), Mode::Pairs, Threshold::floor(300.0).unwrap())
            .unwrap()
            .with_retests(retests);
        let mut runs = 0;
        while let Some(round) = v.next_round() {
            let outcomes = round
                .groups
                .iter()
                .map(|g| {
                    runs += 1;
                    Outcome::Busbw(busbw(runs, g))
                })
                .collect();
            v.record(&round, outcomes).unwrap();
        }
        v.report()
    }

    fn retries(n: usize) -> Retests {
        Retests {
            judged: n,
            ..Retests::default()
        }
    }

    fn slow_node3(_: usize, g: &[usize]) -> f64 {
        if g.contains(&2) {
            180.0
        } else {
            380.0
        }
    }

    #[test]
    fn a_node_slow_in_every_retest_is_drained_with_a_tagged_reason() {
        let report = validate(retries(2), slow_node3);
        let plan = drain_plan(&report);
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].node, "node3");
        let DrainPlan::Drain { reason } = &plan[0].plan else {
            panic!("{plan:?}")
        };
        assert_eq!(
            reason,
            "gpudirect validate: slow node, slow in every pairing (2/2), 180.0 GB/s, floor 300.0, with node1, node2; 2/2 re-tests bad"
        );
        assert!(drain::is_ours(drain::Tool::Validate, Some(reason)));

        // Without --retries: drained on the verdict alone, no re-test in the reason.
        let plan = drain_plan(&validate(retries(0), slow_node3));
        let DrainPlan::Drain { reason } = &plan[0].plan else {
            panic!("{plan:?}")
        };
        assert!(reason.starts_with("gpudirect validate: slow node, slow in every pairing (2/2)"));
        assert!(!reason.contains("re-test"), "{reason}");
    }

    #[test]
    fn a_node_that_passes_a_retest_is_not_drained() {
        // node3 is slow in its two rounds and its first re-test, then fine: one noisy
        // stretch drains nothing.
        let report = validate(retries(2), |run, g| {
            if g.contains(&2) && run <= 4 {
                180.0
            } else {
                380.0
            }
        });
        assert_eq!(report.nodes[2].verdict, Verdict::SlowNode);
        let plan = drain_plan(&report);
        assert_eq!(
            plan[0].plan,
            DrainPlan::Spare {
                why: "passed re-test 2 of 2".into()
            }
        );
        // Healthy nodes are never candidates.
        assert!(drain_plan(&validate(retries(2), |_, _| 380.0)).is_empty());
    }

    fn drained(reason: &str) -> NodeState {
        NodeState {
            states: vec!["IDLE".into(), "DRAIN".into()],
            reason: Some(reason.into()),
            gpus: None,
        }
    }

    #[test]
    fn resume_returns_only_our_drains_that_pass_a_retest() {
        // node3 drained by gpudirect, node2 by an admin; the fault is gone.
        let resume = Retests {
            judged: 0,
            given: vec![2],
            given_times: 1,
            not_partners: vec![1, 2],
        };
        let report = validate(resume.clone(), |_, _| 380.0);
        assert_eq!(report.retests.len(), 1);
        assert_eq!(report.retests[0].runs[0].partner, "node1");
        let states = [
            ("node2".to_string(), drained("bad DIMM, ticket 4411")),
            ("node3".to_string(), drained("gpudirect: slow node")),
        ];
        let plans = resume_plan(&report, &states);
        assert_eq!(plans[0], ResumePlan::Admin);
        assert_eq!(
            plans[1],
            ResumePlan::Resume {
                why: "healthy, and passed re-test 1 of 1 with node1".into()
            }
        );

        // Still slow: stays drained, with the verdict's evidence.
        let report = validate(resume, slow_node3);
        let plans = resume_plan(&report, &states[1..]);
        let ResumePlan::Stay { why } = &plans[0] else {
            panic!("{plans:?}")
        };
        assert!(
            why.starts_with("slow node: slow in every pairing (2/2)"),
            "{why}"
        );

        // Healthy, but never re-tested (no --resume re-tests asked): stays.
        let report = validate(retries(0), |_, _| 380.0);
        let plans = resume_plan(&report, &states[1..]);
        assert!(
            matches!(&plans[0], ResumePlan::Stay { why } if why.contains("not re-tested")),
            "{plans:?}"
        );
    }

    #[test]
    fn the_evidence_file_has_the_documented_shape() {
        let report = validate(retries(1), slow_node3);
        let c = &drain_plan(&report)[0];
        let pairs = vec![
            PairRun {
                round: 1,
                retest: false,
                nodes: vec!["node1".into(), "node2".into()],
                busbw: Some(380.0),
                verdict: Some("pass".into()),
                run_id: Some(1),
            },
            PairRun {
                round: 2,
                retest: false,
                nodes: vec!["node3".into(), "node1".into()],
                busbw: Some(180.0),
                verdict: Some("slow".into()),
                run_id: Some(2),
            },
            PairRun {
                round: 4,
                retest: true,
                nodes: vec!["node2".into(), "node3".into()],
                busbw: None,
                verdict: Some("failed".into()),
                run_id: None,
            },
        ];
        let history = HistoryPoint::last_of(
            (1..=12)
                .map(|id| crate::history::NodeRunPoint {
                    run_id: id,
                    at: format_rfc3339(1_700_000_000 + id),
                    collective: "all_reduce".into(),
                    cluster: Some("local".into()),
                    variant: None,
                    status: RunStatus::Ok,
                    node_count: Some(2),
                    size_bytes: 1 << 30,
                    dtype: "float".into(),
                    busbw: Some(180.0),
                })
                .collect(),
        );
        let ev = evidence(
            c,
            "gpudirect: slow node",
            &pairs,
            history,
            Some("local"),
            1_700_000_000,
        );
        let json = serde_json::to_value(&ev).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for key in [
            "node", "reason", "verdict", "evidence", "pairs", "history", "cluster", "tool", "at",
        ] {
            assert!(keys.contains(&key), "{key} in {json}");
        }
        assert_eq!(json["node"], "node3");
        assert_eq!(json["tool"], "gpudirect validate");
        assert_eq!(json["verdict"], "slow node");
        assert_eq!(json["at"], "2023-11-14T22:13:20Z");
        assert_eq!(json["pairs"].as_array().unwrap().len(), 2, "{json}");
        assert_eq!(json["pairs"][0]["partner"], "node1");
        assert_eq!(json["pairs"][0]["busbw"], 180.0);
        assert_eq!(json["pairs"][0]["run_id"], 2);
        assert_eq!(json["pairs"][1]["retest"], true);
        assert!(json["pairs"][1]["run_id"].is_null());
        let history = json["history"].as_array().unwrap();
        assert_eq!(history.len(), drain::EVIDENCE_RUNS, "the last runs only");
        assert_eq!(history[0]["run_id"], 3);
        assert_eq!(history[9]["status"], "ok");
        assert!(json["evidence"][0]
            .as_str()
            .unwrap()
            .starts_with("slow in every pairing"));
    }

    #[test]
    fn actions_that_went_wrong_are_errors() {
        let ok = NodeAction::new("node3", "drained", None, "drained node3".into());
        let bad = NodeAction::error("node2", "could not drain node2: denied".into());
        assert!(!any_error(std::slice::from_ref(&ok)));
        assert!(any_error(&[ok, bad.clone()]));
        let json = serde_json::to_value(&bad).unwrap();
        assert_eq!(json["outcome"], "error");
        assert_eq!(json["error"], "could not drain node2: denied");
        assert!(json.get("evidence_file").is_none());
    }
}
