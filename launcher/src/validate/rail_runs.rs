//! `validate --test rails`'s runs: every (rail, pair) of a wave at once, one
//! `gpudirect-mpi pair` step each through the runner, a pair that did not connect run once
//! more; each stored classed against the threshold ([`Recorder`]); the screen, whose
//! median sets the threshold, and the waves after it until no rail has a round left or the
//! budget stops them ([`validate_rails`]). The commands (validate, vet) plan the rails,
//! conclude and print.

use std::collections::BTreeMap;
use std::time::Instant;

use super::judging::{median_busbw, JudgeError, Outcome, Round, Threshold, Validation};
use super::pairing::Mode;
use super::rail_states::RailNodes;
use super::rails::{
    failure_reason, mpi_start_watch, outcome_said, pair_job, record_of, worth_a_retry, PairSpec,
};
use crate::budget::Budget;
use crate::history::{History, NewRun, RunProvenance};
use crate::noteln;
use crate::runner::{self, StartError};
use crate::units::now_unix;
use gpudirect_wire::rails::read_measurement;

/// Why the rail runs stopped.
#[derive(Debug, thiserror::Error)]
pub enum RailRunError {
    /// A pair could not be started.
    #[error(transparent)]
    Start(#[from] StartError),
    /// A pair's thread panicked.
    #[error("a pair's runner thread panicked")]
    Panicked,
    /// No pairs to run (fewer than two nodes).
    #[error("no pairs to run: a rails validation needs 2 nodes or more")]
    NoPairs,
    /// The planner refused the outcomes.
    #[error(transparent)]
    Judge(#[from] JudgeError),
}

/// One pair's step, as it ended.
pub struct PairRun {
    /// The rail's index.
    pub rail: usize,
    /// The pair's nodes.
    pub pair: [String; 2],
    /// What it gave.
    pub outcome: Outcome,
    /// Its record (node results' verdicts set once judged).
    pub record: NewRun,
    /// What each node sent, GB/s (empty when the pair failed).
    pub sent: Vec<(String, f64)>,
    /// Whether the step did not connect or hung ([`worth_a_retry`]).
    pub flaky: bool,
    /// Earlier attempts that were run again ([`worth_a_retry`]); recorded as they were.
    pub retried: Vec<NewRun>,
}

/// The steps of one rail's round: (rail, the pair's two nodes) per group.
pub fn pair_jobs(rail: usize, round: &Round, nodes: &[String]) -> Vec<(usize, [String; 2])> {
    round
        .named_groups(nodes)
        .into_iter()
        .map(|g| (rail, [g[0].to_string(), g[1].to_string()]))
        .collect()
}

/// The outcomes of `rail`'s pairs among `runs`, in the order they ran: one per group of
/// the round that planned them.
pub fn outcomes_on(runs: &[PairRun], rail: usize) -> Vec<Outcome> {
    runs.iter()
        .filter(|p| p.rail == rail)
        .map(|p| p.outcome.clone())
        .collect()
}

/// What every wave of rail pairs runs with: the pairs' command, the rails, the record
/// each run starts from, and the budget that may stop it.
#[derive(Debug, Clone, Copy)]
pub struct WaveContext<'a> {
    /// How a pair runs.
    pub spec: &'a PairSpec,
    /// The rails (NIC names), by index.
    pub rails: &'a [String],
    /// The record each pair run starts from.
    pub base: &'a NewRun,
    /// The stop signal and deadline.
    pub budget: &'a Budget,
}

/// Runs every (rail, pair) at once, one step each; a pair that did not connect in time
/// (or hung) runs once more, with the others that did, before its outcome counts.
pub fn run_wave(
    on: WaveContext<'_>,
    jobs: Vec<(usize, [String; 2])>,
) -> Result<Vec<PairRun>, RailRunError> {
    let budget = on.budget;
    let mut runs = run_steps(on, jobs)?;
    let again: Vec<(usize, [String; 2])> = runs
        .iter()
        .filter(|p| p.flaky)
        .map(|p| (p.rail, p.pair.clone()))
        .collect();
    if again.is_empty() || budget.stopped() {
        return Ok(runs);
    }
    noteln!(
        "gpudirect validate: {} pair(s) did not connect or hung: running them once more",
        again.len()
    );
    for second in run_steps(on, again)? {
        if let Some(first) = runs
            .iter_mut()
            .find(|p| p.rail == second.rail && p.pair == second.pair)
        {
            let earlier = std::mem::replace(first, second);
            first.retried.push(earlier.record);
        }
    }
    Ok(runs)
}

/// Runs every (rail, pair) at once, one step each.
fn run_steps(
    on: WaveContext<'_>,
    jobs: Vec<(usize, [String; 2])>,
) -> Result<Vec<PairRun>, RailRunError> {
    let WaveContext {
        spec,
        rails,
        base,
        budget,
    } = on;
    let handles: Vec<_> = jobs
        .into_iter()
        .map(|(rail, pair)| {
            let mut job = pair_job(spec, &rails[rail], [&pair[0], &pair[1]]);
            job.timeout = budget.limit(job.timeout);
            let flag = budget.flag();
            std::thread::spawn(move || {
                let started = now_unix();
                let watch = mpi_start_watch(job.timeout);
                let finished = runner::run_watched(&job, flag, &mut || {}, watch);
                (rail, pair, job, started, finished)
            })
        })
        .collect();
    let mut runs = Vec::new();
    for handle in handles {
        let Ok((rail, pair, job, started, finished)) = handle.join() else {
            return Err(RailRunError::Panicked);
        };
        let finished = finished?;
        let stdout = String::from_utf8_lossy(&finished.stdout);
        let stderr = String::from_utf8_lossy(&finished.stderr);
        let measured = read_measurement(&stdout).filter(|m| m.gbps().is_finite());
        let outcome = match &measured {
            Some(m) => Outcome::Busbw(m.gbps()),
            None => {
                let why = failure_reason(&stderr, &outcome_said(&finished.outcome, job.timeout));
                // MPI never started: its launch hung, which says nothing of the rail or the
                // nodes (judged as could not start, as a cell that never reached NCCL is).
                if finished.outcome == runner::Outcome::NotStarted {
                    Outcome::CouldNotStart(why)
                } else {
                    Outcome::Failed(why)
                }
            }
        };
        let mut raw = finished.stdout.clone();
        raw.extend_from_slice(&finished.stderr);
        let base = NewRun {
            started_at: Some(started),
            finished_at: Some(now_unix()),
            provenance: RunProvenance {
                command_line: Some(job.command_line()),
                ..base.provenance.clone()
            },
            exit_code: finished.outcome.exit_code(),
            raw_output: raw,
            ..base.clone()
        };
        let result = match (&measured, &outcome) {
            (Some(m), _) => Ok(m),
            (None, Outcome::Failed(why) | Outcome::CouldNotStart(why)) => Err(why.as_str()),
            (None, Outcome::Busbw(_)) => Err("no measurement line"),
        };
        let record = record_of(base, &rails[rail], [&pair[0], &pair[1]], result);
        runs.push(PairRun {
            rail,
            pair,
            outcome,
            record,
            sent: measured
                .as_ref()
                .map(|m| {
                    vec![
                        (m.hosts[0].clone(), m.forward_gbps),
                        (m.hosts[1].clone(), m.backward_gbps),
                    ]
                })
                .unwrap_or_default(),
            flaky: worth_a_retry(&finished.outcome, &stderr),
            retried: Vec::new(),
        });
    }
    Ok(runs)
}

/// Stores each pair run of a wave, classed against the threshold, and keeps what each node
/// sent on each rail.
pub struct Recorder<'a> {
    /// The rails, by index.
    pub rails: &'a [String],
    /// What each node sent on each rail, over every pair it was in.
    pub sent: BTreeMap<(String, usize), Vec<f64>>,
    /// The runs recorded.
    pub run_ids: Vec<i64>,
}

impl Recorder<'_> {
    /// Stores `runs` classed against `threshold` and keeps what each node sent.
    pub fn record(&mut self, history: &mut History, runs: &[PairRun], threshold: &Threshold) {
        for p in runs {
            for (node, gbps) in &p.sent {
                self.sent
                    .entry((node.clone(), p.rail))
                    .or_default()
                    .push(*gbps);
            }
            let class = threshold.classify(&p.outcome).as_str();
            let mut rec = p.record.clone();
            for r in &mut rec.node_results {
                r.verdict = Some(class.to_string());
            }
            let retried = p.retried.iter().map(|earlier| {
                let mut earlier = earlier.clone();
                for r in &mut earlier.node_results {
                    r.verdict = Some("retried".into());
                }
                earlier
            });
            for rec in retried.chain([rec]) {
                match history.import_run(&rec, true) {
                    Ok(o) => self.run_ids.push(o.run_id()),
                    Err(e) => noteln!(
                        "gpudirect validate: could not record {} {}: {e}",
                        p.pair.join("+"),
                        self.rails[p.rail]
                    ),
                }
            }
            noteln!(
                "gpudirect validate:   {} {}: {}",
                self.rails[p.rail],
                p.pair.join("+"),
                match &p.outcome {
                    Outcome::Busbw(b) => format!("{b:.3} GB/s ({class})"),
                    Outcome::Failed(why) => format!("failed: {why}"),
                    Outcome::CouldNotStart(why) => format!("could not start: {why}"),
                }
            );
        }
    }
}

/// What a rails validation is asked to do.
pub struct RailsPlan<'a> {
    /// How each pair runs.
    pub spec: &'a PairSpec,
    /// The rails, by index.
    pub rails: &'a [String],
    /// The nodes.
    pub nodes: &'a [String],
    /// Each rail's nodes: those whose NIC there is not known to be down
    /// ([`super::rail_states::plan`]).
    pub on_rails: &'a RailNodes,
    /// The pairing (pairs, pairs-across, pairwise or ring).
    pub mode: Mode,
    /// `--floor`: a fixed line in GB/s instead of the screen's median.
    pub floor: Option<f64>,
    /// How far below the screen's median a pair may be (a fraction).
    pub tolerance: f64,
    /// What every record starts from (cluster, job, binary).
    pub base: &'a NewRun,
    /// When the waves stop.
    pub budget: &'a Budget,
    /// Follow-up passes after the screen (`None`: the planner's default).
    pub followups: Option<usize>,
}

/// What a rails validation measured: one validation per rail (all with `threshold`),
/// what each node sent on each rail, the runs recorded and the waves run.
pub struct RailsRun {
    /// One per rail, in the plan's order.
    pub validations: Vec<Validation>,
    /// The line every rail was judged by (the screen's median less the tolerance, or the
    /// floor; a placeholder that judges nothing when the screen did not finish).
    pub threshold: Threshold,
    /// What each node sent on each rail.
    pub sent: BTreeMap<(String, usize), Vec<f64>>,
    /// The runs recorded.
    pub run_ids: Vec<i64>,
    /// Waves run to their end.
    pub rounds: usize,
    /// The budget stopped it (Ctrl-C or its deadline) before every rail was done; a wave
    /// it stopped midway is neither recorded nor judged.
    pub interrupted: bool,
}

/// Each rail's nodes to pair: those of `on_rails`; a rail where fewer than two are left is
/// paired over every node as before the check (its pairs then fail on the NIC, quickly:
/// the MPI program checks its end first), since no pair can be planned otherwise.
pub fn paired_nodes(nodes: &[String], rails: &[String], on_rails: &RailNodes) -> Vec<Vec<String>> {
    (0..rails.len())
        .map(|r| match on_rails.per_rail.get(r) {
            Some(n) if n.len() >= 2 => n.clone(),
            _ => nodes.to_vec(),
        })
        .collect()
}

/// The rails validation: the screen of every rail at once (its median sets the
/// threshold, unless a floor does), then every rail's next round in one wave, until no
/// rail has one left or the budget stops them.
pub fn validate_rails(plan: &RailsPlan, history: &mut History) -> Result<RailsRun, RailRunError> {
    let RailsPlan {
        spec,
        rails,
        nodes,
        on_rails,
        mode,
        floor,
        tolerance,
        base,
        budget,
        followups,
    } = *plan;
    let placeholder = Threshold::floor(f64::MIN_POSITIVE)?;
    let rail_nodes = paired_nodes(nodes, rails, on_rails);
    let firsts: Vec<Round> = rail_nodes
        .iter()
        .map(|n| {
            Validation::new(n.clone(), mode, placeholder.clone())?
                .next_round()
                .ok_or(RailRunError::NoPairs)
        })
        .collect::<Result<_, _>>()?;
    let mut recorder = Recorder {
        rails,
        sent: BTreeMap::new(),
        run_ids: Vec::new(),
    };
    let unjudged = |threshold: Threshold, recorder: Recorder<'_>, rounds| {
        Ok(RailsRun {
            validations: Vec::new(),
            threshold,
            sent: recorder.sent,
            run_ids: recorder.run_ids,
            rounds,
            interrupted: true,
        })
    };
    if !budget.may_start() {
        return unjudged(placeholder, recorder, 0);
    }
    let jobs: Vec<(usize, [String; 2])> = (0..rails.len())
        .flat_map(|r| pair_jobs(r, &firsts[r], &rail_nodes[r]))
        .collect();
    noteln!(
        "gpudirect validate: round 1 (Screen): {} pair(s) on {} rail(s) at once",
        jobs.len(),
        rails.len()
    );
    let start = Instant::now();
    let on = WaveContext {
        spec,
        rails,
        base,
        budget,
    };
    let screen = run_wave(on, jobs)?;
    if budget.stopped() {
        return unjudged(placeholder, recorder, 0);
    }
    budget.round_took(start.elapsed());
    // The median of all the screen's pairs, so that one slow rail or node cannot move it far.
    let threshold = match (floor, median_busbw(screen.iter().map(|p| &p.outcome))) {
        (Some(floor), _) => Threshold::floor(floor)?,
        (None, Some(m)) if m > 0.0 => Threshold::baseline(m, tolerance)?,
        _ => placeholder,
    };
    let mut validations: Vec<Validation> = rail_nodes
        .iter()
        .map(|n| {
            let v = Validation::new(n.clone(), mode, threshold.clone())?;
            Ok::<_, JudgeError>(match followups {
                Some(passes) => v.with_followups(passes),
                None => v,
            })
        })
        .collect::<Result<_, _>>()?;
    recorder.record(history, &screen, &threshold);
    for (r, v) in validations.iter_mut().enumerate() {
        let round = v.next_round().ok_or(RailRunError::NoPairs)?;
        v.record(&round, outcomes_on(&screen, r))?;
    }
    let mut rounds = 1;
    let mut interrupted = false;
    loop {
        let wave: Vec<(usize, Round)> = validations
            .iter_mut()
            .enumerate()
            .filter_map(|(r, v)| v.next_round().map(|round| (r, round)))
            .collect();
        if wave.is_empty() {
            break;
        }
        if !budget.may_start() {
            interrupted = true;
            break;
        }
        let jobs: Vec<(usize, [String; 2])> = wave
            .iter()
            .flat_map(|(r, round)| pair_jobs(*r, round, &rail_nodes[*r]))
            .collect();
        noteln!(
            "gpudirect validate: round {}: {} pair(s) on {} rail(s) at once",
            rounds + 1,
            jobs.len(),
            wave.len()
        );
        let start = Instant::now();
        let runs = run_wave(on, jobs)?;
        if budget.stopped() {
            interrupted = true;
            break;
        }
        budget.round_took(start.elapsed());
        rounds += 1;
        recorder.record(history, &runs, &threshold);
        for (r, round) in &wave {
            validations[*r].record(round, outcomes_on(&runs, *r))?;
        }
    }
    Ok(RailsRun {
        validations,
        threshold,
        sent: recorder.sent,
        run_ids: recorder.run_ids,
        rounds,
        interrupted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::pairing::Mode;

    /// A rail pairs the nodes whose NIC is up there; one left with a single node is paired
    /// over every node, as no pair could be planned otherwise.
    #[test]
    fn each_rail_pairs_the_nodes_whose_nic_is_up_there() {
        let nodes: Vec<String> = (1..=3).map(|i| format!("n{i}")).collect();
        let rails: Vec<String> = (1..=3).map(|i| format!("eth{i}")).collect();
        let on = RailNodes {
            per_rail: vec![
                nodes.clone(),
                vec!["n1".into(), "n3".into()],
                vec!["n2".into()],
            ],
            down: BTreeMap::new(),
        };
        let paired = paired_nodes(&nodes, &rails, &on);
        assert_eq!(paired[0], nodes);
        assert_eq!(paired[1], ["n1", "n3"]);
        assert_eq!(paired[2], nodes);
    }

    #[test]
    fn a_rounds_pairs_become_steps_and_outcomes_come_back_per_rail() {
        let nodes: Vec<String> = (1..=4).map(|i| format!("n{i}")).collect();
        let threshold = Threshold::floor(1.0).unwrap();
        let round = Validation::new(nodes.clone(), Mode::Pairs, threshold)
            .unwrap()
            .next_round()
            .unwrap();
        let jobs = pair_jobs(1, &round, &nodes);
        assert_eq!(jobs.len(), 2);
        assert!(jobs
            .iter()
            .all(|(rail, pair)| *rail == 1 && pair[0] != pair[1]));
        let run = |rail: usize, gbps: f64| PairRun {
            rail,
            pair: ["n1".into(), "n2".into()],
            outcome: Outcome::Busbw(gbps),
            record: NewRun::default(),
            sent: Vec::new(),
            flaky: false,
            retried: Vec::new(),
        };
        let runs = [run(0, 1.0), run(1, 2.0), run(0, 3.0)];
        assert_eq!(
            outcomes_on(&runs, 0),
            [Outcome::Busbw(1.0), Outcome::Busbw(3.0)]
        );
        assert_eq!(outcomes_on(&runs, 1), [Outcome::Busbw(2.0)]);
    }
}
