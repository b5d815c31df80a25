//! [`drive`]: the loop every validation runs, once: ask the planner for a round, have the
//! caller run it, record the outcomes, hand the judged runs back to be stored. The
//! command's closures do the I/O (job steps, the history, the lines on stderr); the order
//! of the steps is here, so the simulator and the command go through the same one.

use std::time::Instant;

use super::judging::{JudgeError, Outcome, Round, Threshold, Validation};
use crate::budget::Budget;

/// Why [`drive`] stopped before the validation's end.
#[derive(Debug)]
pub enum SessionError<E> {
    /// The budget stopped it (Ctrl-C, or its deadline): the rounds before were recorded;
    /// a round its flag stopped midway is not (its steps were killed, not measured).
    Interrupted {
        /// Rounds recorded.
        rounds: usize,
    },
    /// The planner refused the outcomes (a wrong count, a bad busbw, too few figures).
    Judge(JudgeError),
    /// The caller's own error, from running or storing a round.
    Run(E),
}

/// A round once its outcomes are recorded: what the caller stores with each run.
#[derive(Debug)]
pub struct Judged<'a> {
    /// The round.
    pub round: &'a Round,
    /// The threshold after it (the first round sets it when there is no baseline).
    pub threshold: Option<&'a Threshold>,
    /// Whether the planner took the outcomes (when not, they are stored anyway and
    /// [`drive`] then stops with [`SessionError::Judge`]).
    pub recorded: bool,
}

/// Runs `validation` to its end. `run` runs a round's groups, all at once, and gives one
/// outcome per group in order, each with what the caller keeps of that run (`P`, its
/// record); `store` gets those back once the round is recorded, before the next round is
/// planned. `budget` is asked before each round, and read again after it.
pub fn drive<P, E>(
    validation: &mut Validation,
    budget: &Budget,
    mut run: impl FnMut(&Round) -> Result<Vec<(Outcome, P)>, E>,
    mut store: impl FnMut(Judged<'_>, Vec<(Outcome, P)>) -> Result<(), E>,
) -> Result<(), SessionError<E>> {
    while let Some(round) = validation.next_round() {
        let interrupted = || SessionError::Interrupted {
            rounds: validation.rounds_done(),
        };
        if !budget.may_start() {
            return Err(interrupted());
        }
        let start = Instant::now();
        let ran = run(&round).map_err(SessionError::Run)?;
        if budget.stopped() {
            return Err(interrupted());
        }
        budget.round_took(start.elapsed());
        let outcomes = ran.iter().map(|(o, _)| o.clone()).collect();
        let recorded = validation.record(&round, outcomes);
        let judged = Judged {
            round: &round,
            threshold: validation.threshold(),
            recorded: recorded.is_ok(),
        };
        store(judged, ran).map_err(SessionError::Run)?;
        recorded.map_err(SessionError::Judge)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::pairing::Mode;

    fn nodes(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node{i}")).collect()
    }

    #[test]
    fn a_slow_node_is_found_and_every_run_is_stored_once_with_its_class() {
        let threshold = Threshold::baseline(100.0, 0.10).unwrap();
        let mut v = Validation::new(nodes(8), Mode::Pairs, threshold).unwrap();
        let mut stored = Vec::new();
        let result: Result<(), SessionError<()>> = drive(
            &mut v,
            &Budget::unlimited(),
            |round| {
                Ok(round
                    .groups
                    .iter()
                    .map(|g| {
                        let busbw = if g.contains(&5) { 70.0 } else { 100.0 };
                        (Outcome::Busbw(busbw), g.clone())
                    })
                    .collect())
            },
            |judged, ran| {
                assert!(judged.recorded);
                let t = judged.threshold.expect("a threshold");
                for (outcome, group) in ran {
                    stored.push((judged.round.index, group, t.classify(&outcome)));
                }
                Ok(())
            },
        );
        assert!(result.is_ok());
        let report = v.report();
        assert_eq!(report.rounds, 3);
        assert_eq!(report.nodes[5].verdict.to_string(), "slow node");
        assert_eq!(stored.len(), v.measurements().len());
    }

    #[test]
    fn a_spent_budget_stops_before_the_next_round() {
        static FLAG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let threshold = Threshold::baseline(100.0, 0.10).unwrap();
        let mut v = Validation::new(nodes(4), Mode::Pairs, threshold).unwrap();
        let spent = Budget::until(Instant::now(), &FLAG);
        while !spent.stopped() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let result: Result<(), SessionError<()>> = drive(
            &mut v,
            &spent,
            |_| panic!("no round runs once cancelled"),
            |_, _: Vec<(Outcome, ())>| Ok(()),
        );
        assert!(matches!(
            result,
            Err(SessionError::Interrupted { rounds: 0 })
        ));
    }
}
