//! [`Evidence`]: why a node got its verdict, one typed fact each. The text is its
//! `Display` (`slow in every pairing (3/3), 70% of baseline, with node1, node4, node6`),
//! and that text is what `--json`, the `--on-drain` file and a drain reason carry, so
//! their shape is unchanged; code that needs the facts matches on the variant.

use std::fmt;

use serde::{Serialize, Serializer};

/// One fact behind a node's verdict. Names are node names (`node1, node2, 3 more` where a
/// list is long); a `level` is the busbw against the threshold, as the threshold writes it
/// (`70% of baseline`, `30.0 GB/s, floor 50.0`).
#[derive(Debug, Clone, PartialEq)]
pub enum Evidence {
    /// The node was bad (slow or failed) in `bad` of its `runs` pairings.
    BadInPairings {
        /// Its runs failed rather than ran slow.
        failed: bool,
        /// Bad runs.
        bad: usize,
        /// All its runs.
        runs: usize,
        /// The median of its slow runs against the threshold (not for a failure).
        level: Option<String>,
        /// The partners it was bad with.
        partners: String,
    },
    /// The first failure of its runs, as the runner said it.
    FirstFailure(String),
    /// No pair passed anywhere, so the partners may be at fault too.
    NoPairPassed,
    /// It passed in a group of this many units.
    PassedInGroup(usize),
    /// Bad runs with a partner (or a group) that passed when run again.
    PassedWhenRunAgain {
        /// Bad runs.
        bad: usize,
        /// The partner, or `a group of N`.
        with: String,
    },
    /// Bad with a partner only because that partner is bad.
    BadPartner {
        /// The runs failed rather than ran slow.
        failed: bool,
        /// The bad partner.
        partner: String,
    },
    /// Slow every time with one fast partner, fine with others: the link between them.
    LinkOnly {
        /// This node.
        node: String,
        /// The partner.
        partner: String,
        /// The link's median against the threshold, or `failed`.
        level: String,
        /// Bad runs on the link.
        bad: usize,
        /// All runs on the link.
        runs: usize,
    },
    /// One bad run with a fast partner, never repeated.
    OneBadRun {
        /// The partner.
        partner: String,
        /// The run against the threshold, when it gave a busbw.
        level: Option<String>,
    },
    /// Bad in some runs with a fast partner and good in others.
    LinkToWatch {
        /// Bad runs.
        bad: usize,
        /// All runs with that partner.
        runs: usize,
        /// The partner.
        partner: String,
        /// The bad runs' median against the threshold, when they gave a busbw.
        level: Option<String>,
    },
    /// Slow with a partner that could not be judged.
    SlowWithUnjudged(String),
    /// Slow in a group that has a slow node.
    SlowInGroupWithSlowNode(String),
    /// A group slow in `runs` runs though each member passed elsewhere.
    GroupSlow {
        /// The group's members.
        names: String,
        /// Bad runs of the group.
        runs: usize,
    },
    /// One slow run in a group, not repeated.
    OneSlowRunInGroup(String),
    /// The partners it passed with.
    PassedWith(String),
    /// It never ran.
    NotMeasured,
    /// Runs it was in never reached NCCL, each tried twice (issue #45): how many, and why
    /// the first did not.
    CouldNotStart {
        /// Runs that could not start.
        runs: usize,
        /// The partners of those runs.
        partners: String,
        /// Why the first could not.
        why: String,
    },
    /// Slow with a partner that passed elsewhere, and no second partner to confirm.
    NoSecondPartner(String),
    /// Every run failed, and no partner passed to compare with.
    FailedEveryRun {
        /// Bad runs.
        bad: usize,
        /// All runs.
        runs: usize,
    },
    /// Every run was bad, and no partner passed to compare with.
    BadEveryRun {
        /// Bad runs.
        bad: usize,
        /// All runs.
        runs: usize,
    },
    /// Why a node stayed unknown once the rounds ended.
    Unchecked(Unchecked),
}

/// Why a node stayed unknown (unchecked) once the rounds ended (issue #45).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unchecked {
    /// The budget (or an interrupt) stopped the rounds first.
    RoundsStopped,
    /// The follow-up rounds ran out while partners that passed were still to meet.
    FollowupsEnded {
        /// The follow-up rounds allowed.
        rounds: usize,
        /// The partners that passed and that it did not meet.
        unmet: String,
    },
    /// No pair passed anywhere: no partner was known to be healthy.
    NoPartnerPassed,
    /// It met every partner that passed.
    NoPartnerLeft,
}

impl fmt::Display for Unchecked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unchecked::RoundsStopped => f.write_str(
                "unchecked: the budget stopped the rounds before it met a partner that passed (a longer --budget/--deadline checks it)",
            ),
            Unchecked::FollowupsEnded { rounds, unmet } => write!(
                f,
                "unchecked: the {rounds} follow-up round(s) ended before it met {unmet}, which passed"
            ),
            Unchecked::NoPartnerPassed => f.write_str(
                "unchecked: no pair passed anywhere, so no partner was known to be healthy",
            ),
            Unchecked::NoPartnerLeft => f.write_str(
                "unchecked: it met every partner that passed, and no run with them settled it",
            ),
        }
    }
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = |failed: bool| if failed { "failed" } else { "slow" };
        let level_in_parens = |level: &Option<String>| {
            level
                .as_ref()
                .map(|l| format!(" ({l})"))
                .unwrap_or_default()
        };
        match self {
            Evidence::BadInPairings {
                failed,
                bad,
                runs,
                level,
                partners,
            } => {
                let word = word(*failed);
                if bad == runs {
                    write!(f, "{word} in every pairing ({bad}/{runs})")?;
                } else {
                    write!(f, "{word} in {bad} of {runs} pairings")?;
                }
                if let Some(level) = level {
                    write!(f, ", {level}")?;
                }
                write!(f, ", with {partners}")
            }
            Evidence::FirstFailure(why) => write!(f, "first failure: {why}"),
            Evidence::NoPairPassed => {
                f.write_str("no pair passed anywhere: the partners may be at fault too")
            }
            Evidence::PassedInGroup(n) => write!(f, "passed in a group of {n}"),
            Evidence::PassedWhenRunAgain { bad, with } => {
                write!(f, "{bad} bad run(s) with {with}, passed when run again")
            }
            Evidence::BadPartner { failed, partner } => write!(
                f,
                "{} with {partner} only because of that node (bad partner)",
                word(*failed)
            ),
            Evidence::LinkOnly {
                node,
                partner,
                level,
                bad,
                runs,
            } => write!(f, "link {node}-{partner} only: {level} in {bad} of {runs} runs"),
            Evidence::OneBadRun { partner, level } => write!(
                f,
                "one bad run with {partner}{}, not repeated",
                level_in_parens(level)
            ),
            Evidence::LinkToWatch {
                bad,
                runs,
                partner,
                level,
            } => write!(
                f,
                "bad in {bad} of {runs} runs with {partner}{}: a link to watch",
                level_in_parens(level)
            ),
            Evidence::SlowWithUnjudged(partner) => {
                write!(f, "slow with {partner}, which could not be judged")
            }
            Evidence::SlowInGroupWithSlowNode(names) => {
                write!(f, "slow in group {names}, which has a slow node")
            }
            Evidence::GroupSlow { names, runs } => write!(
                f,
                "group {names} slow in {runs} runs though each member passed elsewhere: a link or switch among them"
            ),
            Evidence::OneSlowRunInGroup(names) => {
                write!(f, "one slow run in group {names}, not repeated")
            }
            Evidence::PassedWith(names) => write!(f, "passed with {names}"),
            Evidence::NotMeasured => f.write_str("not measured"),
            Evidence::CouldNotStart {
                runs,
                partners,
                why,
            } => write!(
                f,
                "could not start in {runs} run(s), with {partners} ({why}; tried twice each): the launch failed, not charged to the node; check srun --mpi=pmix / MPI and the control NIC"
            ),
            Evidence::NoSecondPartner(names) => write!(
                f,
                "slow with {names}, which passed elsewhere, but no second partner to confirm"
            ),
            Evidence::FailedEveryRun { bad, runs } => write!(
                f,
                "failed in every run ({bad}/{runs}), and no partner of it passed to compare with"
            ),
            Evidence::BadEveryRun { bad, runs } => write!(
                f,
                "bad in every run ({bad}/{runs}), and no partner of it passed to compare with"
            ),
            Evidence::Unchecked(why) => why.fmt(f),
        }
    }
}

/// As its text: `--json` and the `--on-drain` file keep the shape they had.
impl Serialize for Evidence {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_fact_reads_as_the_sentence_it_was_and_serializes_as_it() {
        let slow = Evidence::BadInPairings {
            failed: false,
            bad: 3,
            runs: 3,
            level: Some("70% of baseline".into()),
            partners: "node1, node4".into(),
        };
        assert_eq!(
            slow.to_string(),
            "slow in every pairing (3/3), 70% of baseline, with node1, node4"
        );
        let failed = Evidence::BadInPairings {
            failed: true,
            bad: 2,
            runs: 3,
            level: None,
            partners: "node1".into(),
        };
        assert_eq!(failed.to_string(), "failed in 2 of 3 pairings, with node1");
        let watch = Evidence::LinkToWatch {
            bad: 1,
            runs: 3,
            partner: "node2".into(),
            level: Some("80% of baseline".into()),
        };
        assert_eq!(
            watch.to_string(),
            "bad in 1 of 3 runs with node2 (80% of baseline): a link to watch"
        );
        assert_eq!(
            serde_json::to_value(&slow).unwrap(),
            serde_json::json!(slow.to_string())
        );
    }
}
