//! [`drive`]: the loop every validation runs, once: ask the planner for a round, have the
//! caller run it, record the outcomes, hand the judged runs back to be stored. The
//! command's closures do the I/O (job steps, the history, the lines on stderr); the order
//! of the steps is here, so the simulator and the command go through the same one.

use std::sync::atomic::{AtomicBool, Ordering};

use super::judging::{JudgeError, Outcome, Round, Threshold, Validation};

/// Why [`drive`] stopped before the validation's end.
#[derive(Debug)]
pub enum SessionError<E> {
    /// `cancel` was set (Ctrl-C): the rounds before were recorded.
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
/// planned. `cancel` is read before each round.
pub fn drive<P, E>(
    validation: &mut Validation,
    cancel: &AtomicBool,
    mut run: impl FnMut(&Round) -> Result<Vec<(Outcome, P)>, E>,
    mut store: impl FnMut(Judged<'_>, Vec<(Outcome, P)>) -> Result<(), E>,
) -> Result<(), SessionError<E>> {
    while let Some(round) = validation.next_round() {
        if cancel.load(Ordering::SeqCst) {
            return Err(SessionError::Interrupted {
                rounds: validation.rounds_done(),
            });
        }
        let ran = run(&round).map_err(SessionError::Run)?;
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
            &AtomicBool::new(false),
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
    fn a_set_cancel_flag_stops_before_the_next_round() {
        let threshold = Threshold::baseline(100.0, 0.10).unwrap();
        let mut v = Validation::new(nodes(4), Mode::Pairs, threshold).unwrap();
        let result: Result<(), SessionError<()>> = drive(
            &mut v,
            &AtomicBool::new(true),
            |_| panic!("no round runs once cancelled"),
            |_, _: Vec<(Outcome, ())>| Ok(()),
        );
        assert!(matches!(
            result,
            Err(SessionError::Interrupted { rounds: 0 })
        ));
    }
}
