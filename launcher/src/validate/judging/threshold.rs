//! The line a group's busbw must reach: a floor, a baseline less a tolerance, or (with
//! neither) a line from the first round's own median and spread; and a run against it.

use serde::Serialize;

use super::{JudgeError, Outcome, DEFAULT_SPREAD_FACTOR, MAD_TO_SIGMA, MIN_ROUND_FIGURES};
use crate::history::compare::median;

/// The line a group's busbw must reach (GB/s, at the size being judged).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Threshold {
    /// A fixed floor from the config.
    Floor {
        /// Slow below this busbw.
        busbw: f64,
    },
    /// The baseline from history (median of recent good runs) less a tolerance.
    Baseline {
        /// Median busbw of the recent good runs.
        median: f64,
        /// Fraction below the median that is still fine (0.10: slow under 90%).
        tolerance: f64,
    },
    /// No baseline: the median of the first round's own groups less a margin, the larger
    /// of the tolerance and `spread_factor` robust standard deviations ([`RoundRule`]).
    RoundMedian {
        /// Median busbw of the first round's groups at or above the line.
        median: f64,
        /// Their median absolute deviation from that median.
        mad: f64,
        /// Smallest margin, as a fraction of the median (0.10: never slow above 90%).
        tolerance: f64,
        /// k: the margin is at least k x 1.4826 x MAD.
        spread_factor: f64,
        /// Busbw figures the first round gave.
        figures: usize,
        /// Of those, the ones at or above the line (the median and MAD are theirs).
        kept: usize,
    },
}

impl Threshold {
    /// A fixed floor; must be a finite number above 0.
    pub fn floor(busbw: f64) -> Result<Self, JudgeError> {
        let t = Threshold::Floor { busbw };
        t.check()?;
        Ok(t)
    }

    /// A baseline and tolerance; the median must be above 0, the tolerance in [0, 1).
    pub fn baseline(median: f64, tolerance: f64) -> Result<Self, JudgeError> {
        let t = Threshold::Baseline { median, tolerance };
        t.check()?;
        Ok(t)
    }

    /// The baseline as the median of earlier good busbw values (non-finite and
    /// non-positive values are ignored).
    pub fn from_history(values: &[f64], tolerance: f64) -> Result<Self, JudgeError> {
        let good: Vec<f64> = values
            .iter()
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        let m = median(&good).ok_or_else(|| {
            JudgeError::BadThreshold(
                "no earlier good run to take a baseline from; give a floor instead".into(),
            )
        })?;
        Threshold::baseline(m, tolerance)
    }

    pub(super) fn check(&self) -> Result<(), JudgeError> {
        match *self {
            Threshold::Floor { busbw } if !(busbw.is_finite() && busbw > 0.0) => Err(
                JudgeError::BadThreshold(format!("floor {busbw} must be a number above 0 (GB/s)")),
            ),
            Threshold::Baseline { median, .. } if !(median.is_finite() && median > 0.0) => {
                Err(JudgeError::BadThreshold(format!(
                    "baseline {median} must be a number above 0 (GB/s)"
                )))
            }
            Threshold::Baseline { tolerance, .. } | Threshold::RoundMedian { tolerance, .. }
                if !(0.0..1.0).contains(&tolerance) =>
            {
                Err(JudgeError::BadThreshold(format!(
                    "tolerance {tolerance} must be in [0, 1), e.g. 0.10 for 10% below the baseline"
                )))
            }
            Threshold::RoundMedian { median, .. } if !(median.is_finite() && median > 0.0) => {
                Err(JudgeError::BadThreshold(format!(
                    "the round's median {median} must be a number above 0 (GB/s)"
                )))
            }
            Threshold::RoundMedian {
                mad, spread_factor, ..
            } if !(mad.is_finite()
                && mad >= 0.0
                && spread_factor.is_finite()
                && spread_factor >= 0.0) =>
            {
                Err(JudgeError::BadThreshold(format!(
                    "MAD {mad} and spread factor {spread_factor} must be numbers >= 0"
                )))
            }
            _ => Ok(()),
        }
    }

    /// The busbw under which a group is slow.
    pub fn limit(&self) -> f64 {
        match *self {
            Threshold::Floor { busbw } => busbw,
            Threshold::Baseline { median, tolerance } => median * (1.0 - tolerance),
            Threshold::RoundMedian {
                median,
                mad,
                tolerance,
                spread_factor,
                ..
            } => round_line(median, mad, tolerance, spread_factor),
        }
    }

    /// The baseline (or the round's median) that percentages are taken of, if there is one.
    pub fn reference(&self) -> Option<f64> {
        match *self {
            Threshold::Floor { .. } => None,
            Threshold::Baseline { median, .. } | Threshold::RoundMedian { median, .. } => {
                Some(median)
            }
        }
    }

    /// Pass, slow or failed.
    pub fn classify(&self, outcome: &Outcome) -> Class {
        match outcome {
            Outcome::Failed(_) => Class::Failed,
            Outcome::CouldNotStart(_) => Class::CouldNotStart,
            Outcome::Busbw(v) if *v < self.limit() => Class::Slow,
            Outcome::Busbw(_) => Class::Pass,
        }
    }

    /// "41% of baseline", "30.1 GB/s, floor 40.0" or "62% of the round's median (median
    /// 100.0, MAD 2.1)".
    pub(super) fn describe(&self, busbw: f64) -> String {
        match *self {
            Threshold::Floor { busbw: floor } => format!("{busbw:.1} GB/s, floor {floor:.1}"),
            Threshold::Baseline { median, .. } => {
                format!("{:.0}% of baseline", 100.0 * busbw / median)
            }
            Threshold::RoundMedian { median, mad, .. } => format!(
                "{:.0}% of the round's median (median {median:.1}, MAD {mad:.1})",
                100.0 * busbw / median
            ),
        }
    }

    /// Where the line comes from, for the summary of a validation: `a fixed floor
    /// (--floor)`, `10% below the baseline of 100.00 GB/s from the history`, or `no
    /// baseline: the first round's own 8 runs, ...`.
    pub fn explain(&self) -> String {
        match *self {
            Threshold::Floor { .. } => "a fixed floor (--floor)".to_string(),
            Threshold::Baseline { median, tolerance } => format!(
                "{:.0}% below the baseline of {median:.2} GB/s from the history",
                tolerance * 100.0
            ),
            Threshold::RoundMedian {
                median,
                mad,
                tolerance,
                spread_factor,
                figures,
                kept,
            } => format!(
                "no baseline: judged against the first round's own {figures} runs: their median \
                 {median:.2} GB/s ({kept} runs at or above the line) less the larger of {:.0}% \
                 and {spread_factor} x 1.4826 x MAD {mad:.2}",
                tolerance * 100.0
            ),
        }
    }
}

/// The line of [`Threshold::RoundMedian`]: `median - max(tolerance x median, k x 1.4826 x
/// MAD)` (0 or below when the spread is as wide as the median: nothing is slow then).
pub(super) fn round_line(median: f64, mad: f64, tolerance: f64, spread_factor: f64) -> f64 {
    median - (tolerance * median).max(spread_factor * MAD_TO_SIGMA * mad)
}

/// The median busbw of `outcomes` that finished (failed runs have none), e.g. of all runs
/// of a first round: the reference of `validate --test rails`, and where [`RoundRule`]
/// starts.
pub fn median_busbw<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Option<f64> {
    let figures: Vec<f64> = outcomes.into_iter().filter_map(Outcome::busbw).collect();
    median(&figures)
}

/// Judging without a baseline: each run against the median and the median absolute
/// deviation (MAD) of the validation's own first round, the groups that ran together.
///
/// The line is `median - max(tolerance x median, k x 1.4826 x MAD)`: 1.4826 x MAD is a
/// standard deviation that a few outliers cannot inflate, k ([`DEFAULT_SPREAD_FACTOR`])
/// says how many of them a healthy run may fall below the median, and the tolerance is the
/// smallest margin, so that a quiet round (MAD near 0) does not make a run 1% under the
/// median slow.
///
/// The median and MAD are those of the runs at or above the line, found by iterating from
/// the tolerance alone: start at `median x (1 - tolerance)` of all runs, take the median
/// and MAD of the runs at or above it, compute the line again, until it keeps the same
/// runs. Slow runs only pull down (a pair is as fast as its slower member), so the runs
/// well under the median are the ones to leave out: with a quarter of the nodes bad, 44% of
/// the pairs are slow, and the MAD of all of them measures the gap between the two groups,
/// not the noise (it would put the line under the slow pairs); without them it is the
/// noise again, while a round that is merely noisy gets its wider line back in one or two
/// steps. At most [`RoundRule::MAX_STEPS`] steps.
///
/// Limits: the rule needs [`MIN_ROUND_FIGURES`] runs in the first round, and a majority of
/// them healthy; when half or more of the runs are slow, the median is a slow run and
/// the slow look normal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundRule {
    /// Smallest margin below the median, a fraction in [0, 1).
    pub tolerance: f64,
    /// k: the margin is at least k x 1.4826 x MAD.
    pub spread_factor: f64,
}

impl RoundRule {
    /// Most steps of the iteration (each keeps more or fewer runs than the last; it stops
    /// when one keeps the same).
    pub const MAX_STEPS: usize = 20;

    /// The rule with `tolerance` and [`DEFAULT_SPREAD_FACTOR`].
    pub fn new(tolerance: f64) -> Self {
        RoundRule {
            tolerance,
            spread_factor: DEFAULT_SPREAD_FACTOR,
        }
    }

    pub(super) fn check(&self) -> Result<(), JudgeError> {
        if !(0.0..1.0).contains(&self.tolerance) {
            return Err(JudgeError::BadThreshold(format!(
                "tolerance {} must be in [0, 1), e.g. 0.10 for 10% below the round's median",
                self.tolerance
            )));
        }
        if !(self.spread_factor.is_finite() && self.spread_factor >= 0.0) {
            return Err(JudgeError::BadThreshold(format!(
                "spread factor {} must be a number >= 0",
                self.spread_factor
            )));
        }
        Ok(())
    }

    /// The threshold from the first round's outcomes (failed runs are left out).
    pub fn threshold(&self, outcomes: &[Outcome]) -> Result<Threshold, JudgeError> {
        self.check()?;
        let figures: Vec<f64> = outcomes
            .iter()
            .filter_map(Outcome::busbw)
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        let too_few = || JudgeError::TooFewFigures {
            figures: figures.len(),
            groups: outcomes.len(),
            min: MIN_ROUND_FIGURES,
        };
        if figures.len() < MIN_ROUND_FIGURES {
            return Err(too_few());
        }
        let all = median(&figures).ok_or_else(too_few)?;
        let mut line = all * (1.0 - self.tolerance);
        let (mut center, mut mad, mut kept) = (all, 0.0, figures.len());
        for _ in 0..Self::MAX_STEPS {
            let above: Vec<f64> = figures.iter().copied().filter(|v| *v >= line).collect();
            // The median itself is always kept, so this is never empty.
            let Some(m) = median(&above) else { break };
            let deviations: Vec<f64> = above.iter().map(|v| (v - m).abs()).collect();
            (center, mad, kept) = (m, median(&deviations).unwrap_or(0.0), above.len());
            let next = round_line(center, mad, self.tolerance, self.spread_factor);
            let same = figures.iter().filter(|v| **v >= next).count() == kept;
            line = next;
            if same {
                break;
            }
        }
        let t = Threshold::RoundMedian {
            median: center,
            mad,
            tolerance: self.tolerance,
            spread_factor: self.spread_factor,
            figures: figures.len(),
            kept,
        };
        t.check()?;
        Ok(t)
    }
}

/// Where a validation's threshold comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Reference {
    /// Known before anything runs: a floor, or a baseline from the history.
    Given(Threshold),
    /// Computed from the first round's own runs when it is recorded (no baseline).
    FirstRound(RoundRule),
}

impl From<Threshold> for Reference {
    fn from(t: Threshold) -> Self {
        Reference::Given(t)
    }
}

impl From<RoundRule> for Reference {
    fn from(rule: RoundRule) -> Self {
        Reference::FirstRound(rule)
    }
}

/// A run against the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// At or above the threshold.
    Pass,
    /// Below the threshold.
    Slow,
    /// The run failed.
    Failed,
    /// The run never reached NCCL (a launch failure): no evidence either way.
    CouldNotStart,
}

impl Class {
    /// Its name, as `--json` writes it and as a pair run's node results store it:
    /// `pass`, `slow`, `failed`, `could_not_start` (one spelling; not a `Debug` string
    /// lower-cased).
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Pass => "pass",
            Class::Slow => "slow",
            Class::Failed => "failed",
            Class::CouldNotStart => "could_not_start",
        }
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
