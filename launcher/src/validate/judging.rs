//! Judging a validation: which node or link is slow, found in as few rounds as possible.
//!
//! [`Validation`] is a planner the caller drives, the same way for the real command and for
//! the simulator ([`crate::validate::simulate`]):
//!
//! ```
//! use gpudirect::validate::judging::{Outcome, Threshold, Validation};
//! use gpudirect::validate::pairing::Mode;
//!
//! let nodes: Vec<String> = (0..8).map(|i| format!("node{i}")).collect();
//! let threshold = Threshold::baseline(100.0, 0.10)?;
//! let mut v = Validation::new(nodes, Mode::Pairs, threshold)?;
//! while let Some(round) = v.next_round() {
//!     // Run every group of the round at the same time (one job step each) and give back
//!     // one outcome per group, in order. Here node 5 is slow.
//!     let outcomes = round
//!         .groups
//!         .iter()
//!         .map(|g| Outcome::Busbw(if g.contains(&5) { 70.0 } else { 100.0 }))
//!         .collect();
//!     v.record(&round, outcomes)?;
//! }
//! let report = v.report();
//! assert_eq!(report.rounds, 3);
//! assert_eq!(report.nodes[5].verdict.to_string(), "slow node");
//! # Ok::<(), gpudirect::validate::judging::JudgeError>(())
//! ```
//!
//! ## The method
//!
//! 1. **Screen**: the rounds of the pairing mode ([`crate::validate::pairing::schedule`]); for `pairs`
//!    one round of disjoint pairs. A group is *slow* when its busbw is below the
//!    [`Threshold`], *failed* when the run failed, else it *passes*.
//! 2. A node that passed with anyone is *fast*: a pair's busbw is capped by its slower
//!    member, so a pass vouches for both. A node is a **slow node** when it was slow with at
//!    least two distinct fast partners and with more than twice as many as it passed with:
//!    one pass outweighs two slow runs (a slow run may come from the partner, the link or
//!    noise), yet a slow node that passed once by luck in a long mode such as `pairwise`
//!    is still caught. Everything else that is not fast is a *suspect*.
//! 3. **Follow-up passes** (two by default, [`DEFAULT_FOLLOWUPS`]): every suspect gets a
//!    fast partner it has not met (distinct partners in one concurrent round, more rounds
//!    only when suspects outnumber fast nodes), and a slow pair of two fast nodes is run
//!    again. The first pass (*recheck*) pairs each suspect with a node that passed; the
//!    second (*confirm*) gives one more partner to suspects still open and to slow nodes
//!    resting on exactly two partners, and re-runs the suspected links (a link is re-run
//!    while passes remain, up to three runs, so a long mode such as `pairwise` that found
//!    it in its screen needs two more slow runs to confirm it).
//! 4. **Verdicts**: a slow pair of two fast nodes slow in two runs and passing in none is a
//!    **bad link**; a slow pair with a slow node in it is explained by that node (the other
//!    one had a *bad partner*); a single slow run never repeated is noted, not judged.
//!
//! 5. **Re-tests** (none by default, [`Validation::with_retests`]): after the verdicts, given
//!    nodes (those judged slow or failed, before `validate --drain` drains them; drained
//!    nodes, before `validate --resume` returns them) are run again with a fast partner they
//!    have not met, up to N times each, a node leaving at its first pass. These runs are
//!    kept apart ([`Report::retests`]): the verdicts rest on the rounds before them, and
//!    what to do with a verdict the re-tests contradict is the caller's call.
//!
//! With `pairs` and fewer than a quarter of the nodes bad this takes at most 3 rounds
//! (fewer when nothing is ambiguous), instead of `N-1` for `pairwise`.
//! `docs/validation.md` gives the simulated miss and false-alarm rates.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;

use serde::Serialize;

use crate::history::compare::median;
use crate::validate::pairing::{self, Layout, Mode, PairingError, RoundGroups};

/// Default tolerance below the baseline: a pair is slow under 90% of it.
///
/// With 5% run-to-run noise a healthy pair lands under 90% in about 2% of runs (the
/// follow-up rounds clear those) and a node at 70% of normal lands over it in about one run
/// in four million.
pub const DEFAULT_TOLERANCE: f64 = 0.10;

/// Default number of follow-up passes after the screen rounds (recheck, confirm).
pub const DEFAULT_FOLLOWUPS: usize = 2;

/// k of the round-relative rule ([`RoundRule`]): the margin below the round's median is
/// at least k robust standard deviations (k x 1.4826 x MAD).
///
/// Chosen with the simulator (`docs/validation.md`, "Outliers without history"; 1.5, 2,
/// 2.5, 3 and 4 tried at 5% noise, 100 trials per cell): 2 is the largest k that missed no
/// bad node at 1% and 10% bad on 16 to 1024 nodes. 2.5 already missed 1 of 100 and 4 of
/// 200 on 16 nodes (8 pairs give a loose MAD, and a loose MAD widens the line past a node
/// at 70%), 3 missed 5 and 9, 4 missed at every size. What a larger k buys is fewer false
/// links (0.025% of healthy nodes at 1024 nodes and 0% bad with k = 2, none with 3), and the goal's
/// bound of 1% is met at 2 everywhere (at most 0.33%). At k = 2 the line on a round as
/// quiet as the model is the tolerance (10%, twice the 5% noise), as with a baseline; on
/// a noisier round it is twice the round's spread, so a healthy run still dips under it
/// about as often as under a baseline less 10% at 5% noise: the rate the follow-up rounds
/// are built to clear.
pub const DEFAULT_SPREAD_FACTOR: f64 = 2.0;

/// Fewest busbw figures the first round must give for [`RoundRule`] to judge: with 3 or
/// fewer, one slow pair moves the median and the MAD is one of two or three numbers.
pub const MIN_ROUND_FIGURES: usize = 4;

/// The MAD of a normal sample times this is its standard deviation (1 / 0.6745).
const MAD_TO_SIGMA: f64 = 1.4826;

/// Errors in the inputs of a validation. None of them is a slow node: those are verdicts.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum JudgeError {
    /// Fewer than two nodes: nothing to pair.
    #[error("validation needs at least 2 nodes, got {0}; allocate more nodes")]
    TooFewNodes(usize),
    /// A node name given twice.
    #[error("node {0:?} is listed twice; give each node once")]
    DuplicateNode(String),
    /// An empty node name.
    #[error("node {0} has an empty name")]
    EmptyName(usize),
    /// A threshold that cannot judge anything.
    #[error("threshold: {0}")]
    BadThreshold(String),
    /// Results for a round other than the one in progress.
    #[error(
        "results for round {got}, but the round in progress is {expected:?}; record the round that next_round() returned"
    )]
    WrongRound {
        /// The round index given.
        got: usize,
        /// The round in progress, if any.
        expected: Option<usize>,
    },
    /// Not one result per group.
    #[error("round {round}: {got} results for {want} groups; give one result per group, in order")]
    WrongCount {
        /// Round index.
        round: usize,
        /// Results given.
        got: usize,
        /// Groups in the round.
        want: usize,
    },
    /// A busbw that is not a number >= 0.
    #[error("round {round}, group {group}: busbw {value} is not a finite number >= 0; report a failed run as Outcome::Failed")]
    BadBusbw {
        /// Round index.
        round: usize,
        /// Group index within the round.
        group: usize,
        /// The value given.
        value: f64,
    },
    /// No baseline, and the first round has too few groups to judge against itself.
    #[error(
        "there is no baseline to judge by, and judging the units against their own first round needs at least {min} groups in it; {mode} on {units} units gives {groups}: pass a floor (--floor GBPS), or record good runs first for a baseline (gpudirect run -N 2 ...)"
    )]
    TooFewGroupsToCompare {
        /// The pairing mode.
        mode: String,
        /// Units validated.
        units: usize,
        /// Groups in the first round.
        groups: usize,
        /// [`MIN_ROUND_FIGURES`].
        min: usize,
    },
    /// No baseline, and too few runs of the first round finished to judge against it.
    #[error(
        "there is no baseline to judge by, and only {figures} of the first round's {groups} runs gave a busbw (the others failed); judging against the round needs at least {min}: fix the failures, or pass a floor (--floor GBPS)"
    )]
    TooFewFigures {
        /// Runs of the first round that gave a busbw.
        figures: usize,
        /// Runs in the first round.
        groups: usize,
        /// [`MIN_ROUND_FIGURES`].
        min: usize,
    },
    /// A bad topology for the layout.
    #[error(transparent)]
    Pairing(#[from] PairingError),
}

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

    fn check(&self) -> Result<(), JudgeError> {
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
            Outcome::Busbw(v) if *v < self.limit() => Class::Slow,
            Outcome::Busbw(_) => Class::Pass,
        }
    }

    /// "41% of baseline", "30.1 GB/s, floor 40.0" or "62% of the round's median (median
    /// 100.0, MAD 2.1)".
    fn describe(&self, busbw: f64) -> String {
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
fn round_line(median: f64, mad: f64, tolerance: f64, spread_factor: f64) -> f64 {
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

    fn check(&self) -> Result<(), JudgeError> {
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

/// What one group's run gave.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The run finished and its checks passed: busbw in GB/s at the judged size.
    Busbw(f64),
    /// The run failed (exit code, timeout, `#wrong`, wrong transport): why.
    Failed(String),
}

impl Outcome {
    /// The busbw of a run that finished, `None` for a failed one.
    pub fn busbw(&self) -> Option<f64> {
        match self {
            Outcome::Busbw(b) => Some(*b),
            Outcome::Failed(_) => None,
        }
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
}

/// Why a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The pairing mode's own rounds.
    Screen,
    /// First follow-up: each suspect with a node that passed.
    Recheck,
    /// Later follow-ups: third partners, suspected links again.
    Confirm,
    /// After the verdicts: given nodes again with fast partners ([`Retests`]).
    Retest,
}

/// One round: groups of node indices to run at the same time, one job step each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Round {
    /// 0-based round number; [`Validation::record`] checks it.
    pub index: usize,
    /// Why this round runs.
    pub stage: Stage,
    /// Disjoint groups of node indices (indices into the node list given to `new`).
    pub groups: RoundGroups,
}

impl Round {
    /// The groups as node names, e.g. for `srun --nodelist=a,b`.
    pub fn named_groups<'a>(&self, nodes: &'a [String]) -> Vec<Vec<&'a str>> {
        self.groups
            .iter()
            .map(|g| {
                g.iter()
                    .filter_map(|&i| nodes.get(i).map(String::as_str))
                    .collect()
            })
            .collect()
    }
}

/// One group's run as recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measurement {
    /// Round index.
    pub round: usize,
    /// Node indices of the group.
    pub nodes: Vec<usize>,
    /// What the run gave.
    pub outcome: Outcome,
    /// The outcome against the threshold.
    pub class: Class,
}

/// The verdict on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// Passed, and every slow run it was in is explained or was not repeated.
    Healthy,
    /// Slow with most partners that passed elsewhere.
    SlowNode,
    /// Runs with it failed with most partners.
    Failed,
    /// Fast, but slow every time with these partners (also fast): the links between.
    BadLink {
        /// The partners' names.
        partners: Vec<String>,
    },
    /// Not enough evidence (not measured, one unconfirmed slow run, or no partner passed).
    Unknown,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Healthy => f.write_str("healthy"),
            Verdict::SlowNode => f.write_str("slow node"),
            Verdict::Failed => f.write_str("failed"),
            Verdict::BadLink { partners } => write!(f, "bad link with {}", partners.join(", ")),
            Verdict::Unknown => f.write_str("unknown"),
        }
    }
}

/// One node's line in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeReport {
    /// Node name.
    pub node: String,
    /// Index in the node list.
    pub index: usize,
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in words: `slow in every pairing (3/3), 70% of baseline`.
    pub evidence: Vec<String>,
    /// Rounds this node ran in.
    pub rounds: usize,
    /// Median busbw of its slow runs (slow node) or of the bad link's runs, if any.
    pub slow_busbw: Option<f64>,
}

/// A confirmed bad link.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkReport {
    /// Node indices, lower first.
    pub nodes: [usize; 2],
    /// Node names, in the same order.
    pub names: [String; 2],
    /// Slow runs of this pair.
    pub slow_runs: usize,
    /// Median busbw of those runs.
    pub median_busbw: f64,
}

/// The outcome of a validation (complete or, while rounds remain, so far).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Pairing mode of the screen rounds.
    pub mode: String,
    /// The threshold used (none while a round-relative one waits for its first round).
    pub threshold: Option<Threshold>,
    /// Rounds run.
    pub rounds: usize,
    /// False while rounds remain to run.
    pub complete: bool,
    /// One entry per node, in the node list's order.
    pub nodes: Vec<NodeReport>,
    /// Confirmed bad links: two fast nodes slow together in two runs, passing in none.
    pub links: Vec<LinkReport>,
    /// Suspected links: two fast nodes slow together in one run that could not be
    /// repeated within the rounds allowed (a bad link, or a noisy run).
    pub suspect_links: Vec<LinkReport>,
    /// The re-tests ([`Validation::with_retests`]), one per node that was to be re-tested,
    /// in node order; empty when none were asked for.
    pub retests: Vec<RetestReport>,
}

/// Which nodes get re-tested after the verdicts, and how often ([`Validation::with_retests`]).
///
/// A node judged slow or failed gets `judged` re-tests; a node of `given` whose verdict is
/// neither gets `given_times`. Each re-test pairs it with a fast node that is not itself
/// re-tested and not in `not_partners`, one it has not met where there is one; a node's
/// re-tests stop at its first pass. Indices past the node list are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retests {
    /// Re-tests of each node judged slow or failed (`validate --drain --retries N`).
    pub judged: usize,
    /// Nodes to re-test whatever the screen found, unless judged slow or failed (the
    /// drained nodes `validate --resume` would return).
    pub given: Vec<usize>,
    /// Re-tests of each node of `given`.
    pub given_times: usize,
    /// Nodes never taken as a partner in a re-test (drained nodes).
    pub not_partners: Vec<usize>,
}

/// One re-test run of a node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetestRun {
    /// Round index.
    pub round: usize,
    /// The fast node it ran with.
    pub partner: String,
    /// What the run gave.
    pub outcome: Outcome,
    /// The outcome against the threshold.
    pub class: Class,
}

/// A node's re-tests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetestReport {
    /// Node name.
    pub node: String,
    /// Index in the node list.
    pub index: usize,
    /// Re-tests asked for.
    pub wanted: usize,
    /// The runs, in order (fewer than `wanted` when one passed, or no partner was left).
    pub runs: Vec<RetestRun>,
    /// The re-test (1-based) that passed; re-tests stop at the first pass.
    pub passed: Option<usize>,
    /// Every one of the `wanted` re-tests ran, and none passed.
    pub bad_every_time: bool,
}

impl RetestReport {
    fn new(node: String, index: usize, wanted: usize, runs: Vec<RetestRun>) -> Self {
        let passed = runs
            .iter()
            .position(|r| r.class == Class::Pass)
            .map(|i| i + 1);
        let bad_every_time = passed.is_none() && runs.len() >= wanted;
        RetestReport {
            node,
            index,
            wanted,
            runs,
            passed,
            bad_every_time,
        }
    }

    /// `passed re-test 2 of 3`, `slow or failed in 3 of 3 re-tests`, `1 of 2 re-tests run
    /// (no partner left)`.
    pub fn summary(&self) -> String {
        match self.passed {
            Some(k) => format!("passed re-test {k} of {}", self.wanted),
            None if self.bad_every_time => {
                format!(
                    "slow or failed in {} of {} re-tests",
                    self.runs.len(),
                    self.wanted
                )
            }
            None => format!(
                "{} of {} re-tests run (no fast partner left)",
                self.runs.len(),
                self.wanted
            ),
        }
    }
}

/// Health-check result; the command turns it into its exit status
/// (`ExitStatus::of_validation` in the binary, the one mapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Every node healthy.
    Healthy,
    /// Slow nodes, bad links or nodes that could not be judged.
    Degraded,
    /// A node whose runs failed.
    Failed,
    /// Nothing could be measured.
    CouldNotRun,
}

/// The health-check reading of a report: could not run when nothing was measured, failed
/// when any node failed, degraded when any node is slow, on a bad link or unknown (slow
/// runs that could not be pinned on one node: two units slow together, say), else healthy.
pub fn health(report: &Report) -> Health {
    let v = || report.nodes.iter().map(|n| &n.verdict);
    if report.nodes.iter().all(|n| n.rounds == 0) {
        Health::CouldNotRun
    } else if v().any(|x| *x == Verdict::Failed) {
        Health::Failed
    } else if v().all(|x| *x == Verdict::Healthy) {
        Health::Healthy
    } else {
        Health::Degraded
    }
}

/// All runs of one distinct group (sorted members).
#[derive(Debug, Clone)]
struct GroupStat {
    members: Vec<usize>,
    pass: usize,
    slow: usize,
    failed: usize,
    bad_values: Vec<f64>,
    first_failure: Option<String>,
}

impl GroupStat {
    fn bad_runs(&self) -> usize {
        self.slow + self.failed
    }

    /// More bad runs than passing ones (a tie is noise: the group did pass).
    fn is_bad(&self) -> bool {
        self.bad_runs() > self.pass
    }

    fn other(&self, x: usize) -> Option<usize> {
        match self.members.as_slice() {
            [a, b] if *a == x => Some(*b),
            [a, b] if *b == x => Some(*a),
            _ => None,
        }
    }
}

/// What the evidence says so far.
struct Assessment {
    fast: Vec<bool>,
    bad: Vec<bool>,
    /// Distinct fast partners (or passing groups) each node passed with.
    pass_partners: Vec<usize>,
    /// Distinct fast partners each node was slow or failed with.
    bad_partners: Vec<usize>,
    any_fast: bool,
}

/// The planner and judge of one validation; see the module docs for the method.
#[derive(Debug, Clone)]
pub struct Validation {
    nodes: Vec<String>,
    mode: Mode,
    /// None until the first round is recorded when judging against it.
    threshold: Option<Threshold>,
    /// The rule that sets `threshold` from the first round, when there is no baseline.
    round_rule: Option<RoundRule>,
    max_followups: usize,
    queue: VecDeque<(Stage, RoundGroups)>,
    pending: Option<Round>,
    rounds_done: usize,
    followups_started: usize,
    finished: bool,
    measurements: Vec<Measurement>,
    stats: Vec<GroupStat>,
    stat_index: HashMap<Vec<usize>, usize>,
    node_stats: Vec<Vec<usize>>,
    node_rounds: Vec<usize>,
    met: HashSet<(usize, usize)>,
    /// The re-tests asked for.
    retests: Retests,
    /// Set once the follow-ups are planned to the end: each node to re-test, the
    /// re-tests it gets and its runs so far.
    retest_runs: Option<BTreeMap<usize, (usize, Vec<RetestRun>)>>,
    /// Re-test passes planned so far.
    retest_passes: usize,
}

impl Validation {
    /// A validation of `nodes` (in allocation order) with `mode`'s screen rounds, judged
    /// against a [`Threshold`] or, with a [`RoundRule`], against its own first round.
    pub fn new(
        nodes: Vec<String>,
        mode: Mode,
        reference: impl Into<Reference>,
    ) -> Result<Self, JudgeError> {
        let layout = Layout::flat(nodes.len());
        Self::with_layout(nodes, mode, reference.into(), layout)
    }

    /// As [`Validation::new`], with nodes ordered by placement block (node -> block) so
    /// that `pairs` tests inside blocks and `pairs-across` across them.
    pub fn with_blocks(
        nodes: Vec<String>,
        mode: Mode,
        reference: impl Into<Reference>,
        blocks: &BTreeMap<String, String>,
    ) -> Result<Self, JudgeError> {
        let layout = Layout::from_blocks(&nodes, blocks)?;
        Self::with_layout(nodes, mode, reference.into(), layout)
    }

    fn with_layout(
        nodes: Vec<String>,
        mode: Mode,
        reference: Reference,
        layout: Layout,
    ) -> Result<Self, JudgeError> {
        let (threshold, round_rule) = match reference {
            Reference::Given(t) => {
                t.check()?;
                (Some(t), None)
            }
            Reference::FirstRound(rule) => {
                rule.check()?;
                (None, Some(rule))
            }
        };
        if nodes.len() < 2 {
            return Err(JudgeError::TooFewNodes(nodes.len()));
        }
        let mut seen = HashSet::new();
        for (i, name) in nodes.iter().enumerate() {
            if name.is_empty() {
                return Err(JudgeError::EmptyName(i));
            }
            if !seen.insert(name.as_str()) {
                return Err(JudgeError::DuplicateNode(name.clone()));
            }
        }
        let screen = pairing::schedule(mode, &layout);
        let n = nodes.len();
        let first_groups = screen.rounds.first().map_or(0, Vec::len);
        if round_rule.is_some() && first_groups < MIN_ROUND_FIGURES {
            // Said before anything runs: the first round could not set a line.
            return Err(JudgeError::TooFewGroupsToCompare {
                mode: mode.to_string(),
                units: n,
                groups: first_groups,
                min: MIN_ROUND_FIGURES,
            });
        }
        Ok(Validation {
            nodes,
            mode,
            threshold,
            round_rule,
            max_followups: DEFAULT_FOLLOWUPS,
            queue: screen
                .rounds
                .into_iter()
                .map(|r| (Stage::Screen, r))
                .collect(),
            pending: None,
            rounds_done: 0,
            followups_started: 0,
            finished: false,
            measurements: Vec::new(),
            stats: Vec::new(),
            stat_index: HashMap::new(),
            node_stats: vec![Vec::new(); n],
            node_rounds: vec![0; n],
            met: HashSet::new(),
            retests: Retests::default(),
            retest_runs: None,
            retest_passes: 0,
        })
    }

    /// Sets how many follow-up passes may run after the screen rounds (default 2; 0 judges
    /// on the screen alone). Each pass is one round unless suspects outnumber fast nodes.
    pub fn with_followups(mut self, passes: usize) -> Self {
        self.max_followups = passes;
        self
    }

    /// Re-tests after the verdicts ([`Retests`]; none by default): extra rounds of stage
    /// [`Stage::Retest`], reported in [`Report::retests`] and kept out of the verdicts.
    pub fn with_retests(mut self, retests: Retests) -> Self {
        self.retests = retests;
        self
    }

    /// The threshold runs are judged against; None while a validation judged against its
    /// own first round ([`RoundRule`]) waits for that round.
    pub fn threshold(&self) -> Option<&Threshold> {
        self.threshold.as_ref()
    }

    /// The nodes, in the order indices refer to.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Every run recorded so far, in order (for the per-node history); re-test runs are in
    /// [`Report::retests`].
    pub fn measurements(&self) -> &[Measurement] {
        &self.measurements
    }

    /// Rounds recorded so far.
    pub fn rounds_done(&self) -> usize {
        self.rounds_done
    }

    /// The next round to run, or None when the validation is complete.
    ///
    /// A round returned and not yet recorded is returned again, so a caller that lost it
    /// can ask again. Follow-up rounds are planned from the evidence when the earlier ones
    /// are all recorded.
    pub fn next_round(&mut self) -> Option<Round> {
        if let Some(p) = &self.pending {
            return Some(p.clone());
        }
        loop {
            if let Some((stage, groups)) = self.queue.pop_front() {
                let round = Round {
                    index: self.rounds_done,
                    stage,
                    groups,
                };
                self.pending = Some(round.clone());
                return Some(round);
            }
            if self.finished {
                return None;
            }
            if self.retest_runs.is_none() && self.followups_started < self.max_followups {
                let rounds = self.plan_followup(&self.assess());
                self.followups_started += 1;
                if !rounds.is_empty() {
                    let stage = if self.followups_started == 1 {
                        Stage::Recheck
                    } else {
                        Stage::Confirm
                    };
                    self.queue.extend(rounds.into_iter().map(|g| (stage, g)));
                    continue;
                }
                // Nothing left to follow up: the verdicts are in.
                self.followups_started = self.max_followups;
            }
            if self.retest_runs.is_none() {
                self.retest_runs = Some(self.retest_targets());
            }
            let rounds = self.plan_retest();
            self.retest_passes += 1;
            if rounds.is_empty() {
                self.finished = true;
                return None;
            }
            self.queue
                .extend(rounds.into_iter().map(|g| (Stage::Retest, g)));
        }
    }

    /// The nodes to re-test once the verdicts are in, with how many re-tests each gets.
    fn retest_targets(&self) -> BTreeMap<usize, (usize, Vec<RetestRun>)> {
        let r = &self.retests;
        if r.judged == 0 && (r.given.is_empty() || r.given_times == 0) {
            return BTreeMap::new();
        }
        let a = self.assess();
        (0..self.nodes.len())
            .filter_map(|x| {
                let bad = matches!(
                    self.judge_node(x, &a).0.verdict,
                    Verdict::SlowNode | Verdict::Failed
                );
                let wanted = match (bad, r.given.contains(&x)) {
                    (true, _) => r.judged,
                    (false, true) => r.given_times,
                    (false, false) => 0,
                };
                (wanted > 0).then(|| (x, (wanted, Vec::new())))
            })
            .collect()
    }

    /// The rounds of the next re-test pass: every node still to re-test (none passed, fewer
    /// runs than asked) with a fast partner, one it has not met where there is one.
    fn plan_retest(&self) -> Vec<RoundGroups> {
        let Some(targets) = &self.retest_runs else {
            return Vec::new();
        };
        let needy: Vec<usize> = targets
            .iter()
            .filter(|(_, (wanted, runs))| {
                runs.len() < *wanted && runs.iter().all(|r| r.class != Class::Pass)
            })
            .map(|(&x, _)| x)
            .collect();
        if needy.is_empty() {
            return Vec::new();
        }
        let a = self.assess();
        let mut pool: Vec<usize> = (0..self.nodes.len())
            .filter(|&p| {
                a.fast[p] && !targets.contains_key(&p) && !self.retests.not_partners.contains(&p)
            })
            .collect();
        if pool.is_empty() {
            return Vec::new();
        }
        // Once every partner was met, each pass starts with another one.
        let turn = self.retest_passes % pool.len();
        pool.rotate_left(turn);
        pairing::fill_rounds(&needy, &pool, &[], |x, y| self.met(x, y))
    }

    /// Records the outcomes of `round`, one per group in the round's order.
    pub fn record(&mut self, round: &Round, outcomes: Vec<Outcome>) -> Result<(), JudgeError> {
        let expected = self.pending.as_ref().map(|p| p.index);
        let Some(pending) = self.pending.take_if(|p| p.index == round.index) else {
            return Err(JudgeError::WrongRound {
                got: round.index,
                expected,
            });
        };
        let check = || {
            if outcomes.len() != pending.groups.len() {
                return Err(JudgeError::WrongCount {
                    round: pending.index,
                    got: outcomes.len(),
                    want: pending.groups.len(),
                });
            }
            for (group, o) in outcomes.iter().enumerate() {
                if let Outcome::Busbw(v) = o {
                    if !(v.is_finite() && *v >= 0.0) {
                        return Err(JudgeError::BadBusbw {
                            round: pending.index,
                            group,
                            value: *v,
                        });
                    }
                }
            }
            Ok(())
        };
        let threshold = match (check(), &self.threshold, &self.round_rule) {
            (Err(e), _, _) => Err(e),
            (Ok(()), Some(t), _) => Ok(t.clone()),
            (Ok(()), None, Some(rule)) => rule.threshold(&outcomes),
            (Ok(()), None, None) => Err(JudgeError::BadThreshold(
                "no threshold and no rule to compute one; give a floor or a baseline".into(),
            )),
        };
        let threshold = match threshold {
            Ok(t) => t,
            Err(e) => {
                self.pending = Some(pending);
                return Err(e);
            }
        };
        self.threshold = Some(threshold.clone());
        for (group, outcome) in pending.groups.into_iter().zip(outcomes) {
            if pending.stage == Stage::Retest {
                self.add_retest(pending.index, &group, outcome, &threshold);
            } else {
                self.add(pending.index, group, outcome, &threshold);
            }
        }
        self.rounds_done += 1;
        Ok(())
    }

    fn add(&mut self, round: usize, group: Vec<usize>, outcome: Outcome, threshold: &Threshold) {
        let class = threshold.classify(&outcome);
        let mut key = group.clone();
        key.sort_unstable();
        if let [a, b] = key.as_slice() {
            self.met.insert((*a, *b));
        }
        let idx = match self.stat_index.get(&key) {
            Some(&i) => i,
            None => {
                let i = self.stats.len();
                for &m in &key {
                    self.node_stats[m].push(i);
                }
                self.stats.push(GroupStat {
                    members: key.clone(),
                    pass: 0,
                    slow: 0,
                    failed: 0,
                    bad_values: Vec::new(),
                    first_failure: None,
                });
                self.stat_index.insert(key, i);
                i
            }
        };
        let stat = &mut self.stats[idx];
        match (&outcome, class) {
            (_, Class::Pass) => stat.pass += 1,
            (Outcome::Busbw(v), Class::Slow) => {
                stat.slow += 1;
                stat.bad_values.push(*v);
            }
            (Outcome::Failed(why), _) => {
                stat.failed += 1;
                stat.first_failure.get_or_insert_with(|| why.clone());
            }
            (Outcome::Busbw(_), Class::Failed) => stat.failed += 1,
        }
        for &m in &group {
            self.node_rounds[m] += 1;
        }
        self.measurements.push(Measurement {
            round,
            nodes: group,
            outcome,
            class,
        });
    }

    /// A re-test run: to its node's re-tests, not to the evidence the verdicts rest on.
    fn add_retest(&mut self, round: usize, group: &[usize], outcome: Outcome, t: &Threshold) {
        let class = t.classify(&outcome);
        if let [a, b] = group {
            self.met.insert(((*a).min(*b), (*a).max(*b)));
        }
        let Some(targets) = self.retest_runs.as_mut() else {
            return;
        };
        let Some(&x) = group.iter().find(|m| targets.contains_key(m)) else {
            return;
        };
        let partner = group
            .iter()
            .find(|&&m| m != x)
            .and_then(|&m| self.nodes.get(m))
            .cloned()
            .unwrap_or_default();
        if let Some((_, runs)) = targets.get_mut(&x) {
            runs.push(RetestRun {
                round,
                partner,
                outcome,
                class,
            });
        }
    }

    fn met(&self, a: usize, b: usize) -> bool {
        self.met.contains(&(a.min(b), a.max(b)))
    }

    /// Per node: distinct fast partners passed with (a passing larger group counts as
    /// one), distinct fast partners slow or failed with.
    fn partner_counts(&self, fast: &[bool]) -> (Vec<usize>, Vec<usize>) {
        let n = self.nodes.len();
        let (mut pass, mut bad) = (vec![0; n], vec![0; n]);
        for s in &self.stats {
            if let [a, b] = s.members.as_slice() {
                for (x, y) in [(*a, *b), (*b, *a)] {
                    if fast[y] {
                        if s.is_bad() {
                            bad[x] += 1;
                        } else {
                            pass[x] += 1;
                        }
                    }
                }
            } else if !s.is_bad() {
                for &m in &s.members {
                    pass[m] += 1;
                }
            }
        }
        (pass, bad)
    }

    fn assess(&self) -> Assessment {
        let n = self.nodes.len();
        let mut fast0 = vec![false; n];
        for s in self.stats.iter().filter(|s| s.pass > 0) {
            for &m in &s.members {
                fast0[m] = true;
            }
        }
        let mut fast = fast0.clone();
        let mut bad = vec![false; n];
        let (mut pass_partners, mut bad_partners) = (vec![0; n], vec![0; n]);
        // Twice: a slow node that passed once by luck is demoted in the first pass and no
        // longer vouches for its partners in the second.
        for _ in 0..2 {
            (pass_partners, bad_partners) = self.partner_counts(&fast);
            for x in 0..n {
                // A pass outweighs two slow runs: it shows the node at full speed, while a
                // slow run can come from the partner, the link or noise.
                bad[x] = bad_partners[x] >= 2 && bad_partners[x] > 2 * pass_partners[x];
                fast[x] = fast0[x] && !bad[x];
            }
        }
        let any_fast = fast.iter().any(|&f| f);
        if !any_fast {
            // Nothing passed anywhere: a node bad with two different partners is called
            // bad, with a note that its partners were no better.
            for (x, b) in bad.iter_mut().enumerate() {
                let stats = &self.node_stats[x];
                let pairs = stats
                    .iter()
                    .filter(|&&i| self.stats[i].members.len() == 2)
                    .count();
                *b = pairs >= 2 && stats.iter().all(|&i| self.stats[i].is_bad());
            }
        }
        Assessment {
            fast,
            bad,
            pass_partners,
            bad_partners,
            any_fast,
        }
    }

    /// The rounds of the next follow-up pass: suspects with fast partners, suspected links
    /// (and slow groups of fast nodes) once more.
    fn plan_followup(&self, a: &Assessment) -> Vec<RoundGroups> {
        let n = self.nodes.len();
        // Suspects, and slow nodes resting on exactly two partners: one more partner turns
        // a coincidence (a bad partner or link plus one noisy run) into a pass.
        let needy: Vec<usize> = (0..n)
            .filter(|&x| {
                (!a.bad[x] && !a.fast[x])
                    || (a.bad[x] && a.any_fast && a.bad_partners[x] == 2 && a.pass_partners[x] == 0)
            })
            .collect();
        let retests: Vec<Vec<usize>> = self
            .stats
            .iter()
            .filter(|s| {
                // Once to confirm; and a third time while passes remain (modes whose screen
                // already re-ran the pair), since a healthy pair is slow twice by noise
                // about q^2 of the time and long modes run many pairs.
                s.is_bad()
                    && s.pass == 0
                    && s.bad_runs() < 3
                    && s.members.iter().all(|&m| a.fast[m])
            })
            .map(|s| s.members.clone())
            .collect();
        if !a.any_fast {
            let round = pairing::pair_among(&needy, |x, y| self.met(x, y));
            return if round.is_empty() {
                Vec::new()
            } else {
                vec![round]
            };
        }
        let pool: Vec<usize> = (0..n).filter(|&x| a.fast[x]).collect();
        pairing::fill_rounds(&needy, &pool, &retests, |x, y| self.met(x, y))
    }

    fn names(&self, idx: &[usize]) -> String {
        const SHOWN: usize = 4;
        let mut s: Vec<&str> = idx
            .iter()
            .take(SHOWN)
            .filter_map(|&i| self.nodes.get(i).map(String::as_str))
            .collect();
        let more = idx.len().saturating_sub(SHOWN);
        let extra = format!("{more} more");
        if more > 0 {
            s.push(&extra);
        }
        s.join(", ")
    }

    fn link(&self, x: usize, y: usize, s: &GroupStat) -> LinkReport {
        LinkReport {
            nodes: [x, y],
            names: [self.name(x).to_string(), self.name(y).to_string()],
            slow_runs: s.bad_runs(),
            median_busbw: median(&s.bad_values).unwrap_or(0.0),
        }
    }

    fn name(&self, i: usize) -> &str {
        self.nodes.get(i).map(String::as_str).unwrap_or("?")
    }

    /// The verdicts so far (complete once [`Validation::next_round`] returned None).
    pub fn report(&self) -> Report {
        let a = self.assess();
        let mut nodes = Vec::with_capacity(self.nodes.len());
        let (mut links, mut suspect_links) = (Vec::new(), Vec::new());
        for x in 0..self.nodes.len() {
            let (node, found) = self.judge_node(x, &a);
            for (link, confirmed) in found {
                if confirmed {
                    links.push(link);
                } else {
                    suspect_links.push(link);
                }
            }
            nodes.push(node);
        }
        Report {
            mode: self.mode.to_string(),
            threshold: self.threshold.clone(),
            rounds: self.rounds_done,
            complete: self.finished && self.pending.is_none() && self.queue.is_empty(),
            nodes,
            links,
            suspect_links,
            retests: self
                .retest_runs
                .iter()
                .flatten()
                .map(|(&x, (wanted, runs))| {
                    RetestReport::new(self.name(x).to_string(), x, *wanted, runs.clone())
                })
                .collect(),
        }
    }

    /// One node's verdict, and the links (confirmed or suspected) where it is the lower
    /// index.
    fn judge_node(&self, x: usize, a: &Assessment) -> (NodeReport, Vec<(LinkReport, bool)>) {
        let mine: Vec<&GroupStat> = self.node_stats[x].iter().map(|&i| &self.stats[i]).collect();
        // Nothing is judged before the first round is recorded, and it sets the threshold.
        let describe = |v: f64| {
            self.threshold
                .as_ref()
                .map_or_else(|| format!("{v:.1} GB/s"), |t| t.describe(v))
        };
        let runs: usize = mine.iter().map(|s| s.pass + s.bad_runs()).sum();
        let bad_runs: usize = mine.iter().map(|s| s.bad_runs()).sum();
        let failed_runs: usize = mine.iter().map(|s| s.failed).sum();
        let mut evidence = Vec::new();
        let mut links = Vec::new();
        let mut slow_busbw = None;
        let verdict = if a.bad[x] {
            let values: Vec<f64> = mine
                .iter()
                .flat_map(|s| s.bad_values.iter().copied())
                .collect();
            slow_busbw = median(&values);
            let partners: Vec<usize> = mine
                .iter()
                .filter(|s| s.is_bad())
                .filter_map(|s| s.other(x))
                .collect();
            let failed = failed_runs * 2 > bad_runs;
            let word = if failed { "failed" } else { "slow" };
            let share = if bad_runs == runs {
                format!("{word} in every pairing ({bad_runs}/{runs})")
            } else {
                format!("{word} in {bad_runs} of {runs} pairings")
            };
            let level = match (failed, slow_busbw) {
                (false, Some(v)) => format!(", {}", describe(v)),
                _ => String::new(),
            };
            evidence.push(format!("{share}{level}, with {}", self.names(&partners)));
            if failed {
                if let Some(why) = mine.iter().find_map(|s| s.first_failure.as_deref()) {
                    evidence.push(format!("first failure: {why}"));
                }
            }
            if !a.any_fast {
                evidence.push("no pair passed anywhere: the partners may be at fault too".into());
            }
            if failed {
                Verdict::Failed
            } else {
                Verdict::SlowNode
            }
        } else if a.fast[x] {
            let mut passed_with = Vec::new();
            let mut group_issue = false;
            let mut link_partners = Vec::new();
            for s in &mine {
                let y = s.other(x);
                if !s.is_bad() {
                    match y {
                        Some(y) => passed_with.push(y),
                        None => evidence.push(format!("passed in a group of {}", s.members.len())),
                    }
                    if s.bad_runs() > 0 {
                        let with = y.map_or_else(
                            || format!("a group of {}", s.members.len()),
                            |y| self.name(y).to_string(),
                        );
                        evidence.push(format!(
                            "{} bad run(s) with {with}, passed when run again",
                            s.bad_runs()
                        ));
                    }
                    continue;
                }
                match y {
                    Some(y) if a.bad[y] => {
                        let what = if s.failed > s.slow { "failed" } else { "slow" };
                        evidence.push(format!(
                            "{what} with {} only because of that node (bad partner)",
                            self.name(y)
                        ));
                    }
                    Some(y) if a.fast[y] && s.pass == 0 && s.bad_runs() >= 2 => {
                        let m = median(&s.bad_values);
                        let level = m.map(describe).unwrap_or_else(|| "failed".into());
                        evidence.push(format!(
                            "link {}-{} only: {level} in {} of {} runs",
                            self.name(x),
                            self.name(y),
                            s.bad_runs(),
                            s.bad_runs() + s.pass
                        ));
                        slow_busbw = slow_busbw.or(m);
                        link_partners.push(y);
                        if x < y {
                            links.push((self.link(x, y, s), true));
                        }
                    }
                    Some(y) if a.fast[y] => {
                        let level = median(&s.bad_values)
                            .map(|v| format!(" ({})", describe(v)))
                            .unwrap_or_default();
                        evidence.push(if s.pass == 0 {
                            format!("one bad run with {}{level}, not repeated", self.name(y))
                        } else {
                            format!(
                                "bad in {} of {} runs with {}{level}: a link to watch",
                                s.bad_runs(),
                                s.bad_runs() + s.pass,
                                self.name(y)
                            )
                        });
                        if x < y {
                            links.push((self.link(x, y, s), false));
                        }
                    }
                    Some(y) => evidence.push(format!(
                        "slow with {}, which could not be judged",
                        self.name(y)
                    )),
                    None => {
                        let names = self.names(&s.members);
                        if s.members.iter().any(|&m| a.bad[m]) {
                            evidence.push(format!("slow in group {names}, which has a slow node"));
                        } else if s.bad_runs() >= 2 && s.members.iter().all(|&m| a.fast[m]) {
                            group_issue = true;
                            evidence.push(format!(
                                "group {names} slow in {} runs though each member passed elsewhere: a link or switch among them",
                                s.bad_runs()
                            ));
                        } else {
                            evidence.push(format!("one slow run in group {names}, not repeated"));
                        }
                    }
                }
            }
            if !passed_with.is_empty() {
                evidence.insert(0, format!("passed with {}", self.names(&passed_with)));
            }
            if !link_partners.is_empty() {
                Verdict::BadLink {
                    partners: link_partners
                        .iter()
                        .map(|&y| self.name(y).to_string())
                        .collect(),
                }
            } else if group_issue {
                Verdict::Unknown
            } else {
                Verdict::Healthy
            }
        } else {
            let mut unjudged = Verdict::Unknown;
            if runs == 0 {
                evidence.push("not measured".into());
            } else if a.bad_partners[x] == 1 {
                let p: Vec<usize> = mine
                    .iter()
                    .filter_map(|s| s.other(x))
                    .filter(|&y| a.fast[y])
                    .collect();
                evidence.push(format!(
                    "slow with {}, which passed elsewhere, but no second partner to confirm",
                    self.names(&p)
                ));
            } else if failed_runs * 2 > bad_runs {
                // Runs that never worked are a failure, whoever is at fault.
                evidence.push(format!(
                    "failed in every run ({bad_runs}/{runs}), and no partner of it passed to compare with"
                ));
                if let Some(why) = mine.iter().find_map(|s| s.first_failure.as_deref()) {
                    evidence.push(format!("first failure: {why}"));
                }
                unjudged = Verdict::Failed;
            } else {
                evidence.push(format!(
                    "bad in every run ({bad_runs}/{runs}), and no partner of it passed to compare with"
                ));
            }
            unjudged
        };
        (
            NodeReport {
                node: self.name(x).to_string(),
                index: x,
                verdict,
                evidence,
                rounds: self.node_rounds[x],
                slow_busbw,
            },
            links,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node{i}")).collect()
    }

    /// Asserts that a line of the node's evidence contains `text`.
    #[track_caller]
    fn assert_evidence(node: &NodeReport, text: &str) {
        assert!(
            node.evidence.iter().any(|e| e.contains(text)),
            "no {text:?} in {:?}",
            node.evidence
        );
    }

    /// Runs a validation to the end with `busbw(group)` as every run's outcome.
    fn drive(mut v: Validation, busbw: impl Fn(&[usize]) -> Outcome) -> (Report, Vec<Round>) {
        let mut rounds = Vec::new();
        while let Some(round) = v.next_round() {
            let outcomes = round.groups.iter().map(|g| busbw(g)).collect();
            v.record(&round, outcomes).unwrap();
            rounds.push(round);
            assert!(rounds.len() < 50, "runaway validation");
        }
        (v.report(), rounds)
    }

    fn base() -> Threshold {
        Threshold::baseline(100.0, DEFAULT_TOLERANCE).unwrap()
    }

    fn verdicts(r: &Report) -> Vec<String> {
        r.nodes.iter().map(|n| n.verdict.to_string()).collect()
    }

    #[test]
    fn all_healthy_takes_one_round() {
        let v = Validation::new(names(8), Mode::Pairs, base()).unwrap();
        let (r, rounds) = drive(v, |_| Outcome::Busbw(98.0));
        assert_eq!(rounds.len(), 1);
        assert_eq!(r.rounds, 1);
        assert!(r.complete);
        assert!(r.nodes.iter().all(|n| n.verdict == Verdict::Healthy));
        assert!(
            r.nodes[0].evidence[0].starts_with("passed with node1"),
            "{:?}",
            r.nodes[0]
        );
        assert_eq!(health(&r), Health::Healthy);
    }

    #[test]
    fn one_slow_node_in_eight_is_named_and_confirmed_in_three_rounds() {
        let v = Validation::new(names(8), Mode::Pairs, base()).unwrap();
        let (r, rounds) = drive(v, |g| {
            Outcome::Busbw(if g.contains(&5) { 41.0 } else { 100.0 })
        });
        assert_eq!(rounds.len(), 3);
        assert_eq!(rounds[1].stage, Stage::Recheck);
        assert_eq!(rounds[2].groups.len(), 1, "only node 5 is confirmed");
        // Node 5's first partner (4) and node 5 each meet a node that passed.
        assert_eq!(rounds[1].groups.len(), 2);
        let five = &r.nodes[5];
        assert_eq!(five.verdict, Verdict::SlowNode);
        assert!(
            five.evidence[0].starts_with("slow in every pairing (3/3), 41% of baseline"),
            "{:?}",
            five.evidence
        );
        assert_eq!(five.slow_busbw, Some(41.0));
        assert_eq!(r.nodes[4].verdict, Verdict::Healthy);
        assert_evidence(&r.nodes[4], "node5 only because");
        for (i, n) in r.nodes.iter().enumerate() {
            if i != 5 {
                assert_eq!(n.verdict, Verdict::Healthy, "{n:?}");
            }
        }
        assert_eq!(health(&r), Health::Degraded);
        assert_eq!(health(&r), Health::Degraded);
    }

    #[test]
    fn one_bad_link_is_told_from_a_bad_node() {
        let v = Validation::new(names(8), Mode::Pairs, base()).unwrap();
        let bad_link = |g: &[usize]| g.len() == 2 && g.contains(&2) && g.contains(&3);
        let (r, rounds) = drive(v, |g| Outcome::Busbw(if bad_link(g) { 60.0 } else { 99.0 }));
        assert_eq!(rounds.len(), 3);
        assert_eq!(rounds[2].stage, Stage::Confirm);
        assert_eq!(rounds[2].groups, vec![vec![2, 3]]);
        assert_eq!(
            r.nodes[2].verdict,
            Verdict::BadLink {
                partners: vec!["node3".into()]
            }
        );
        assert_eq!(r.nodes[2].verdict.to_string(), "bad link with node3");
        assert!(
            r.nodes[3]
                .evidence
                .iter()
                .any(|e| e.starts_with("link node3-node2 only: 60% of baseline in 2 of 2 runs")),
            "{:?}",
            r.nodes[3].evidence
        );
        assert_eq!(r.links.len(), 1);
        assert_eq!(r.links[0].nodes, [2, 3]);
        assert_eq!(r.links[0].median_busbw, 60.0);
        let others = r.nodes.iter().filter(|n| n.index != 2 && n.index != 3);
        assert!(others.clone().all(|n| n.verdict == Verdict::Healthy));
        assert_eq!(health(&r), Health::Degraded);
    }

    #[test]
    fn a_slow_run_not_repeated_is_noise() {
        // Pair 0-1 is slow once (noise), then fine on every later run.
        let seen = std::cell::Cell::new(false);
        let v = Validation::new(names(6), Mode::Pairs, base()).unwrap();
        let (r, rounds) = drive(v, |g| {
            if g == [0, 1] && !seen.replace(true) {
                Outcome::Busbw(85.0)
            } else {
                Outcome::Busbw(101.0)
            }
        });
        assert_eq!(rounds.len(), 3, "{rounds:?}");
        assert!(r.nodes.iter().all(|n| n.verdict == Verdict::Healthy));
        assert!(r.links.is_empty() && r.suspect_links.is_empty());
        assert_evidence(&r.nodes[0], "passed when run again");
        assert_eq!(health(&r), Health::Healthy);
    }

    #[test]
    fn long_modes_run_a_suspected_link_a_third_time() {
        // Pairwise: pair 0-1 is slow in its screen run and the first re-run, then passes.
        let runs = std::cell::Cell::new(0);
        let v = Validation::new(names(6), Mode::Pairwise, base()).unwrap();
        let (r, rounds) = drive(v, |g| {
            if g == [0, 1] && runs.replace(runs.get() + 1) < 2 {
                Outcome::Busbw(80.0)
            } else {
                Outcome::Busbw(100.0)
            }
        });
        assert_eq!(rounds.len(), 5 + 2);
        assert_eq!(runs.get(), 3);
        assert!(r.links.is_empty());
        assert_eq!(r.suspect_links.len(), 1);
        assert_eq!(r.nodes[0].verdict, Verdict::Healthy);
        assert_evidence(&r.nodes[0], "bad in 2 of 3 runs with node1");

        // A real bad link stays slow: confirmed in 3 of 3 runs.
        let v = Validation::new(names(6), Mode::Pairwise, base()).unwrap();
        let (r, _) = drive(v, |g| {
            Outcome::Busbw(if g == [0, 1] { 60.0 } else { 100.0 })
        });
        assert_eq!(r.links.len(), 1);
        assert_evidence(&r.nodes[1], "in 3 of 3 runs");
    }

    #[test]
    fn three_nodes_name_whichever_is_slow_in_three_rounds() {
        // The local test cluster: 3 nodes, the stand-in slower on one of them.
        for slow in 0..3 {
            let v = Validation::new(names(3), Mode::Pairs, base()).unwrap();
            let (r, rounds) = drive(v, |g| {
                Outcome::Busbw(if g.contains(&slow) { 60.0 } else { 100.0 })
            });
            assert_eq!(rounds.len(), 3, "slow {slow}: {rounds:?}");
            for n in &r.nodes {
                let want = if n.index == slow {
                    Verdict::SlowNode
                } else {
                    Verdict::Healthy
                };
                assert_eq!(n.verdict, want, "slow {slow}: {n:?}");
            }
            assert!(r.nodes[slow].evidence[0]
                .starts_with("slow in every pairing (2/2), 60% of baseline"));
        }
    }

    #[test]
    fn odd_count_pairs_the_leftover_with_a_node_that_passed() {
        let v = Validation::new(names(7), Mode::Pairs, base()).unwrap();
        let (r, rounds) = drive(v, |_| Outcome::Busbw(100.0));
        assert_eq!(rounds.len(), 2);
        assert_eq!(rounds[1].groups.len(), 1);
        assert_eq!(rounds[1].groups[0][0], 6);
        assert!(rounds[1].groups[0][1] < 6);
        assert!(r.nodes.iter().all(|n| n.verdict == Verdict::Healthy));

        // The leftover is the slow one: two partners that passed elsewhere confirm it.
        let v = Validation::new(names(7), Mode::Pairs, base()).unwrap();
        let (r, rounds) = drive(v, |g| {
            Outcome::Busbw(if g.contains(&6) { 70.0 } else { 100.0 })
        });
        assert_eq!(rounds.len(), 3);
        assert_eq!(r.nodes[6].verdict, Verdict::SlowNode);
        assert!(r.nodes[..6].iter().all(|n| n.verdict == Verdict::Healthy));
    }

    #[test]
    fn everything_failed_is_failed_with_a_note() {
        let v = Validation::new(names(8), Mode::Pairs, base()).unwrap();
        let (r, rounds) = drive(v, |_| Outcome::Failed("exit code 1".into()));
        assert_eq!(rounds.len(), 2);
        for n in &r.nodes {
            assert_eq!(n.verdict, Verdict::Failed, "{n:?}");
            assert!(
                n.evidence[0].starts_with("failed in every pairing (2/2)"),
                "{:?}",
                n.evidence
            );
            assert_evidence(n, "no pair passed anywhere");
            assert!(n.evidence.iter().any(|e| e == "first failure: exit code 1"));
        }
        assert_eq!(health(&r), Health::Failed);
    }

    #[test]
    fn two_slow_nodes_paired_together_get_a_third_partner() {
        let v = Validation::new(names(8), Mode::Pairs, base()).unwrap();
        let (r, rounds) = drive(v, |g| {
            Outcome::Busbw(if g.contains(&0) || g.contains(&1) {
                70.0
            } else {
                100.0
            })
        });
        assert_eq!(rounds.len(), 3);
        assert_eq!(r.nodes[0].verdict, Verdict::SlowNode);
        assert_eq!(r.nodes[1].verdict, Verdict::SlowNode);
        assert!(r.nodes[0].evidence[0].starts_with("slow in every pairing (3/3), 70% of baseline"));
        assert!(r.nodes[2..].iter().all(|n| n.verdict == Verdict::Healthy));
    }

    #[test]
    fn failed_partner_is_a_bad_partner_not_a_fault() {
        let v = Validation::new(names(4), Mode::Pairs, Threshold::floor(50.0).unwrap()).unwrap();
        let (r, _) = drive(v, |g| {
            if g.contains(&1) {
                Outcome::Failed("timed out".into())
            } else {
                Outcome::Busbw(80.0)
            }
        });
        assert_eq!(r.nodes[1].verdict, Verdict::Failed);
        assert_eq!(r.nodes[0].verdict, Verdict::Healthy);
        assert!(r.nodes[0]
            .evidence
            .iter()
            .any(|e| e.starts_with("failed with node1")));
        assert_eq!(health(&r), Health::Failed);
    }

    #[test]
    fn floor_threshold_describes_in_gbps() {
        let v = Validation::new(names(4), Mode::Pairs, Threshold::floor(50.0).unwrap()).unwrap();
        let (r, _) = drive(v, |g| {
            Outcome::Busbw(if g.contains(&3) { 30.0 } else { 80.0 })
        });
        assert!(
            r.nodes[3].evidence[0].contains("30.0 GB/s, floor 50.0"),
            "{:?}",
            r.nodes[3].evidence
        );
    }

    #[test]
    fn pairwise_and_ring_name_a_slow_node_in_their_screen_rounds() {
        // Ring's two neighbours are confirmed by a third partner.
        for (mode, want_rounds) in [(Mode::Pairwise, 7), (Mode::Ring, 3)] {
            let v = Validation::new(names(8), mode, base()).unwrap();
            let (r, rounds) = drive(v, |g| {
                Outcome::Busbw(if g.contains(&3) { 70.0 } else { 100.0 })
            });
            assert_eq!(rounds.len(), want_rounds, "{mode}");
            assert_eq!(r.nodes[3].verdict, Verdict::SlowNode, "{mode}");
            assert_eq!(
                verdicts(&r).iter().filter(|v| *v == "healthy").count(),
                7,
                "{mode}"
            );
        }
    }

    #[test]
    fn all_and_groups_narrow_down_with_pairs() {
        for mode in [Mode::All, Mode::Groups(4)] {
            let v = Validation::new(names(8), mode, base())
                .unwrap()
                .with_followups(3);
            let (r, rounds) = drive(v, |g| {
                Outcome::Busbw(if g.contains(&6) { 70.0 } else { 100.0 })
            });
            assert!(rounds.len() <= 4, "{mode}: {rounds:?}");
            assert_eq!(
                r.nodes[6].verdict,
                Verdict::SlowNode,
                "{mode}: {:?}",
                r.nodes[6]
            );
            assert_eq!(
                verdicts(&r).iter().filter(|v| *v == "healthy").count(),
                7,
                "{mode}: {:?}",
                r.nodes
            );
        }
    }

    #[test]
    fn blocks_order_the_pairs() {
        let nodes = names(4);
        let blocks: BTreeMap<String, String> = [
            ("node0", "a"),
            ("node1", "b"),
            ("node2", "a"),
            ("node3", "b"),
        ]
        .into_iter()
        .map(|(n, b)| (n.to_string(), b.to_string()))
        .collect();
        let mut v = Validation::with_blocks(nodes.clone(), Mode::Pairs, base(), &blocks).unwrap();
        let round = v.next_round().unwrap();
        assert_eq!(round.groups, vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(round.named_groups(&nodes)[1], vec!["node1", "node3"]);
    }

    #[test]
    fn bad_inputs_are_errors_that_say_how_to_fix_them() {
        assert_eq!(
            Validation::new(names(1), Mode::Pairs, base()).unwrap_err(),
            JudgeError::TooFewNodes(1)
        );
        let dup = vec!["a".to_string(), "a".to_string()];
        assert!(matches!(
            Validation::new(dup, Mode::Pairs, base()),
            Err(JudgeError::DuplicateNode(_))
        ));
        assert!(Threshold::baseline(100.0, 1.5).is_err());
        assert!(Threshold::floor(f64::NAN).is_err());
        assert!(Threshold::from_history(&[], 0.1)
            .unwrap_err()
            .to_string()
            .contains("floor"));
        assert_eq!(
            Threshold::from_history(&[90.0, 100.0, f64::NAN, 110.0], 0.1).unwrap(),
            Threshold::Baseline {
                median: 100.0,
                tolerance: 0.1
            }
        );

        let mut v = Validation::new(names(4), Mode::Pairs, base()).unwrap();
        let round = v.next_round().unwrap();
        let err = v.record(&round, vec![Outcome::Busbw(1.0)]).unwrap_err();
        assert_eq!(
            err,
            JudgeError::WrongCount {
                round: 0,
                got: 1,
                want: 2
            }
        );
        let err = v
            .record(
                &round,
                vec![Outcome::Busbw(1.0), Outcome::Busbw(f64::INFINITY)],
            )
            .unwrap_err();
        assert!(err.to_string().contains("Outcome::Failed"), "{err}");
        // A failed record keeps the round in progress: the same round comes back.
        assert_eq!(v.next_round(), Some(round.clone()));
        let wrong = Round {
            index: 7,
            ..round.clone()
        };
        assert!(matches!(
            v.record(&wrong, vec![]),
            Err(JudgeError::WrongRound {
                got: 7,
                expected: Some(0)
            })
        ));
        v.record(&round, vec![Outcome::Busbw(100.0), Outcome::Busbw(100.0)])
            .unwrap();
        assert_eq!(v.next_round(), None);
        assert!(matches!(
            v.record(&round, vec![]),
            Err(JudgeError::WrongRound { expected: None, .. })
        ));
    }

    #[test]
    fn health_of_an_empty_or_unjudged_report_is_could_not_run() {
        let v = Validation::new(names(4), Mode::Pairs, base()).unwrap();
        let r = v.report();
        assert!(!r.complete);
        assert!(r.nodes.iter().all(|n| n.verdict == Verdict::Unknown));
        assert_eq!(health(&r), Health::CouldNotRun);
    }

    /// Found on two real H200s, one slowed by a competing load: the only pair is slow in
    /// every round and no partner passed, so neither GPU can be blamed; that is a degraded
    /// system, not one where validation could not run.
    #[test]
    fn two_units_slow_together_are_unknown_but_degraded() {
        let v = Validation::new(names(2), Mode::Pairs, base()).unwrap();
        let (r, rounds) = drive(v, |_| Outcome::Busbw(45.0));
        assert_eq!(
            rounds.len(),
            3,
            "screen, recheck, confirm: the slowness repeats"
        );
        assert!(r.nodes.iter().all(|n| n.verdict == Verdict::Unknown));
        assert!(r.nodes[0].evidence[0].contains("no partner of it passed"));
        assert_eq!(health(&r), Health::Degraded);
    }

    /// Two units whose every run failed (a wrong binary, say) are failed, not degraded.
    #[test]
    fn two_units_failing_together_are_failed() {
        let v = Validation::new(names(2), Mode::Pairs, base()).unwrap();
        let (r, _) = drive(v, |_| Outcome::Failed("exit code 6".into()));
        assert!(
            r.nodes.iter().all(|n| n.verdict == Verdict::Failed),
            "{r:?}"
        );
        assert!(r.nodes[0].evidence[1].contains("exit code 6"), "{r:?}");
        assert_eq!(health(&r), Health::Failed);
    }

    /// No baseline: the first round's own pairs, with the default rule.
    fn own_round() -> RoundRule {
        RoundRule::new(DEFAULT_TOLERANCE)
    }

    /// A pair's busbw, 98 to 102 by its first node (first round: median 100, MAD 1).
    fn around_100(g: &[usize]) -> f64 {
        100.0 + (g[0] % 5) as f64 - 2.0
    }

    #[test]
    fn own_round_flags_a_clearly_slow_pair_among_many_healthy_ones() {
        let v = Validation::new(names(32), Mode::Pairs, own_round()).unwrap();
        assert_eq!(v.threshold(), None, "no line before the first round");
        let (r, rounds) = drive(v, |g| {
            let b = around_100(g);
            Outcome::Busbw(if g.contains(&5) { 0.7 * b } else { b })
        });
        assert_eq!(rounds.len(), 3);
        assert_eq!(r.nodes[5].verdict, Verdict::SlowNode);
        assert_evidence(&r.nodes[5], "of the round's median (median 100.0, MAD 1.0)");
        for n in r.nodes.iter().filter(|n| n.index != 5) {
            assert_eq!(n.verdict, Verdict::Healthy, "{n:?}");
        }
        let Some(Threshold::RoundMedian {
            figures, kept, mad, ..
        }) = r.threshold
        else {
            panic!("{:?}", r.threshold)
        };
        // The slow pair is under the line, so the median and MAD are of the other 15.
        assert_eq!((figures, kept), (16, 15));
        assert!(mad <= 2.0, "{mad}");
        assert_eq!(health(&r), Health::Degraded);
    }

    #[test]
    fn own_round_never_flags_a_healthy_noisy_round_of_the_model() {
        use crate::validate::simulate::{run_trials, Model, Rng, Scenario};
        // The line of 500 healthy first rounds of 32 pairs at the model's 5% noise: never
        // within the tolerance of the median (a run 10% under it is noise), never so wide
        // that a node at 70% of the median passes (0.7 x e^(3 x 0.05) = 0.81).
        let mut rng = Rng::new(18);
        for _ in 0..500 {
            let round: Vec<Outcome> = (0..32)
                .map(|_| Outcome::Busbw((0.05 * rng.normal()).exp()))
                .collect();
            let t = own_round().threshold(&round).unwrap();
            let m = t.reference().unwrap();
            assert!(t.limit() <= 0.9 * m + 1e-12, "{t:?}");
            assert!(t.limit() > 0.82 * m, "{t:?}");
        }
        // 50 validations of 64 healthy nodes: no node is called slow, failed or unknown.
        // The one thing noise can make is a false link, a healthy pair slow on both of
        // its runs (2% x 2% of pairs, as with a baseline): both its nodes count.
        let s = Scenario::round_relative(64, 0.0, DEFAULT_SPREAD_FACTOR);
        let sum = run_trials(&s, &Model::default(), 50, 18).unwrap();
        let t = sum.totals;
        assert_eq!(t.healthy_nodes, 50 * 64);
        assert_eq!(t.unknown, 0, "{sum:?}");
        assert_eq!(t.false_alarms, 2 * t.false_links, "{sum:?}");
        assert!(t.false_links <= 2, "{sum:?}");
    }

    #[test]
    fn a_quiet_round_does_not_flag_a_pair_just_under_its_median() {
        // Every pair at 100 but one at 95: MAD 0, yet 5% under is within the tolerance.
        let outcomes: Vec<Outcome> = (0..8)
            .map(|i| Outcome::Busbw(if i == 3 { 95.0 } else { 100.0 }))
            .collect();
        let t = own_round().threshold(&outcomes).unwrap();
        assert_eq!(t.limit(), 90.0);
        assert_eq!(t.classify(&Outcome::Busbw(95.0)), Class::Pass);
        assert_eq!(t.classify(&Outcome::Busbw(89.0)), Class::Slow);
    }

    #[test]
    fn a_noisy_round_widens_its_line_by_its_spread() {
        // ±15% around 100: twice the robust spread is more than the 10% tolerance.
        let values = [85.0, 88.0, 92.0, 96.0, 100.0, 104.0, 108.0, 112.0, 115.0];
        let outcomes: Vec<Outcome> = values.iter().map(|&v| Outcome::Busbw(v)).collect();
        let t = own_round().threshold(&outcomes).unwrap();
        // Median 100, MAD 8: 100 - 2 x 1.4826 x 8.
        assert!(
            (t.limit() - (100.0 - 2.0 * 1.4826 * 8.0)).abs() < 1e-9,
            "{t:?}"
        );
        assert!(values.iter().all(|&v| v >= t.limit()), "{t:?}");
    }

    #[test]
    fn a_quarter_of_slow_pairs_does_not_widen_the_line_over_them() {
        // 44% of the pairs slow, as with a quarter of the nodes bad: the MAD of all pairs
        // measures the gap between the two groups and would put the line under them.
        // The healthy pairs spread about 5% around 100, the slow about 5% around 70.
        let healthy = [
            92.0, 94.0, 95.0, 96.0, 98.0, 99.0, 100.0, 100.0, 101.0, 102.0, 104.0, 105.0, 106.0,
            108.0,
        ];
        let slow = [
            66.0, 67.0, 68.0, 69.0, 70.0, 70.0, 71.0, 72.0, 73.0, 74.0, 75.0,
        ];
        let outcomes: Vec<Outcome> = healthy
            .iter()
            .chain(&slow)
            .map(|&v| Outcome::Busbw(v))
            .collect();
        let all: Vec<f64> = outcomes.iter().filter_map(Outcome::busbw).collect();
        let m = median(&all).unwrap();
        let deviations: Vec<f64> = all.iter().map(|v| (v - m).abs()).collect();
        let naive = round_line(m, median(&deviations).unwrap(), 0.10, DEFAULT_SPREAD_FACTOR);
        assert!(
            naive < 66.0,
            "the MAD of every pair would pass them all: {naive}"
        );

        let t = own_round().threshold(&outcomes).unwrap();
        let Threshold::RoundMedian { median, kept, .. } = t else {
            panic!("{t:?}")
        };
        assert_eq!((median, kept), (100.0, 14));
        // Median 100 and MAD 4 of the healthy: 100 - 2 x 1.4826 x 4.
        assert!((t.limit() - 88.1392).abs() < 1e-9, "{t:?}");
        assert!(healthy.iter().all(|&v| v >= t.limit()));
        assert!(slow.iter().all(|&v| v < t.limit()));
    }

    #[test]
    fn too_few_pairs_without_a_baseline_is_a_clear_error() {
        for (nodes, mode, groups) in [(3, Mode::Pairs, 1), (7, Mode::Pairs, 3), (8, Mode::All, 1)] {
            let err = Validation::new(names(nodes), mode, own_round()).unwrap_err();
            assert_eq!(
                err,
                JudgeError::TooFewGroupsToCompare {
                    mode: mode.to_string(),
                    units: nodes,
                    groups,
                    min: MIN_ROUND_FIGURES
                }
            );
            let text = err.to_string();
            assert!(
                text.starts_with("there is no baseline to judge by"),
                "{text}"
            );
            assert!(text.contains("--floor GBPS"), "{text}");
            assert!(text.contains("record good runs first"), "{text}");
        }
        // Enough pairs, but most of the first round failed: said when it is recorded, and
        // the round stays in progress.
        let mut v = Validation::new(names(8), Mode::Pairs, own_round()).unwrap();
        let round = v.next_round().unwrap();
        let mut outcomes = vec![Outcome::Failed("exit code 1".into()); 2];
        outcomes.extend([Outcome::Busbw(100.0), Outcome::Busbw(99.0)]);
        let err = v.record(&round, outcomes).unwrap_err();
        assert_eq!(
            err,
            JudgeError::TooFewFigures {
                figures: 2,
                groups: 4,
                min: 4
            }
        );
        assert!(err.to_string().contains("the others failed"), "{err}");
        assert_eq!(v.next_round(), Some(round));
    }

    #[test]
    fn the_round_threshold_says_what_it_is() {
        let t = Threshold::RoundMedian {
            median: 100.0,
            mad: 2.1,
            tolerance: 0.10,
            spread_factor: 2.0,
            figures: 8,
            kept: 7,
        };
        assert_eq!(
            t.describe(62.0),
            "62% of the round's median (median 100.0, MAD 2.1)"
        );
        assert_eq!(t.limit(), 90.0);
        assert_eq!(t.reference(), Some(100.0));
        let text = t.explain();
        assert!(
            text.starts_with("no baseline: judged against the first round's own 8 runs"),
            "{text}"
        );
        assert!(
            text.contains("median 100.00 GB/s (7 runs at or above the line)"),
            "{text}"
        );
        assert!(text.contains("10% and 2 x 1.4826 x MAD 2.10"), "{text}");
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["kind"], "round_median");
        assert_eq!(
            Threshold::floor(40.0).unwrap().describe(30.1),
            "30.1 GB/s, floor 40.0"
        );
        assert_eq!(base().describe(41.0), "41% of baseline");
        assert!(RoundRule {
            tolerance: 1.0,
            spread_factor: 2.0
        }
        .threshold(&[])
        .is_err());
    }

    fn retries(n: usize) -> Retests {
        Retests {
            judged: n,
            ..Retests::default()
        }
    }

    #[test]
    fn retests_run_a_slow_node_again_with_new_partners_and_stop_at_a_pass() {
        // The local cluster: 3 nodes, node 2 slow every time.
        let v = Validation::new(names(3), Mode::Pairs, base())
            .unwrap()
            .with_retests(retries(2));
        let (r, rounds) = drive(v, |g| {
            Outcome::Busbw(if g.contains(&2) { 47.0 } else { 100.0 })
        });
        assert_eq!(rounds.len(), 5, "{rounds:?}");
        assert!(rounds[3..].iter().all(|r| r.stage == Stage::Retest));
        assert!(rounds[3..]
            .iter()
            .all(|r| r.groups.len() == 1 && r.groups[0][0] == 2));
        // The verdicts rest on the first three rounds: node 2 is slow in 2 of 2 pairings.
        assert_eq!(r.nodes[2].verdict, Verdict::SlowNode);
        assert_evidence(&r.nodes[2], "slow in every pairing (2/2)");
        assert_eq!(r.nodes[2].rounds, 2);
        assert_eq!(r.retests.len(), 1);
        let t = &r.retests[0];
        assert_eq!((t.node.as_str(), t.wanted, t.runs.len()), ("node2", 2, 2));
        assert!(t.bad_every_time && t.passed.is_none());
        assert!(t.runs.iter().all(|run| run.class == Class::Slow));
        // Both fast nodes take a turn.
        let partners: HashSet<&str> = t.runs.iter().map(|run| run.partner.as_str()).collect();
        assert_eq!(partners.len(), 2, "{t:?}");
        assert_eq!(t.summary(), "slow or failed in 2 of 2 re-tests");
        assert_eq!(health(&r), Health::Degraded);

        // A node slow only while something else ran on it passes its second re-test and
        // is not re-tested again.
        let runs = std::cell::Cell::new(0);
        let v = Validation::new(names(3), Mode::Pairs, base())
            .unwrap()
            .with_retests(retries(3));
        let (r, rounds) = drive(v, |g| {
            if g.contains(&2) {
                runs.set(runs.get() + 1);
                Outcome::Busbw(if runs.get() <= 3 { 47.0 } else { 100.0 })
            } else {
                Outcome::Busbw(100.0)
            }
        });
        assert_eq!(rounds.len(), 5, "{rounds:?}");
        let t = &r.retests[0];
        assert_eq!(t.passed, Some(2));
        assert!(!t.bad_every_time);
        assert_eq!(t.summary(), "passed re-test 2 of 3");
    }

    #[test]
    fn no_retests_without_a_bad_node_and_none_by_default() {
        let v = Validation::new(names(8), Mode::Pairs, base())
            .unwrap()
            .with_retests(retries(2));
        let (r, rounds) = drive(v, |_| Outcome::Busbw(100.0));
        assert_eq!(rounds.len(), 1);
        assert!(r.retests.is_empty());
        assert!(r.complete);
        let v = Validation::new(names(8), Mode::Pairs, base()).unwrap();
        let (r, rounds) = drive(v, |g| {
            Outcome::Busbw(if g.contains(&5) { 41.0 } else { 100.0 })
        });
        assert_eq!(rounds.len(), 3);
        assert!(r.retests.is_empty());
        assert!(serde_json::to_value(&r).unwrap()["retests"]
            .as_array()
            .unwrap()
            .is_empty());
    }

    #[test]
    fn given_nodes_are_retested_with_partners_that_are_not_excluded() {
        // Nodes 2 and 3 are drained: 3 by us (to re-test), 2 by an admin (never a partner).
        let v = Validation::new(names(6), Mode::Pairs, base())
            .unwrap()
            .with_retests(Retests {
                judged: 0,
                given: vec![3],
                given_times: 1,
                not_partners: vec![2, 3],
            });
        let (r, rounds) = drive(v, |_| Outcome::Busbw(100.0));
        assert_eq!(rounds.len(), 2, "{rounds:?}");
        assert_eq!(rounds[1].stage, Stage::Retest);
        let [x, p] = rounds[1].groups[0][..] else {
            panic!("{rounds:?}")
        };
        assert_eq!(x, 3);
        assert!(p != 2 && p != 3, "{rounds:?}");
        assert_eq!(r.retests.len(), 1);
        assert_eq!(r.retests[0].passed, Some(1));
        assert_eq!(r.retests[0].summary(), "passed re-test 1 of 1");

        // A given node judged slow gets the judged count (none here): not re-tested.
        let v = Validation::new(names(6), Mode::Pairs, base())
            .unwrap()
            .with_retests(Retests {
                judged: 0,
                given: vec![3],
                given_times: 1,
                not_partners: vec![3],
            });
        let (r, _) = drive(v, |g| {
            Outcome::Busbw(if g.contains(&3) { 50.0 } else { 100.0 })
        });
        assert_eq!(r.nodes[3].verdict, Verdict::SlowNode);
        assert!(r.retests.is_empty(), "{:?}", r.retests);
    }

    #[test]
    fn a_retest_without_a_fast_partner_is_not_bad_every_time() {
        // Two units slow together: nobody passed, so there is no partner to re-test with.
        let v = Validation::new(names(2), Mode::Pairs, base())
            .unwrap()
            .with_retests(retries(2));
        let (r, _) = drive(v, |_| Outcome::Failed("exit code 6".into()));
        assert!(r.nodes.iter().all(|n| n.verdict == Verdict::Failed));
        assert_eq!(r.retests.len(), 2);
        for t in &r.retests {
            assert!(t.runs.is_empty() && !t.bad_every_time, "{t:?}");
            assert_eq!(t.summary(), "0 of 2 re-tests run (no fast partner left)");
        }
    }

    #[test]
    fn report_serializes_for_json_output() {
        let v = Validation::new(names(4), Mode::Pairs, base()).unwrap();
        let (r, _) = drive(v, |g| {
            Outcome::Busbw(if g.contains(&0) { 50.0 } else { 100.0 })
        });
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["nodes"][0]["verdict"]["kind"], "slow_node");
        assert_eq!(json["threshold"]["kind"], "baseline");
    }
}
