//! What an output does not say, inferred from its rows where only one answer fits.
//!
//! A table pasted without nccl-tests' header names neither the collective nor the rank
//! count, and output of nccl-tests before 2.17 does not name the collective. Both can
//! often be read back from the rows themselves:
//!
//! - **The collective family from the columns.** nccl-tests prints a reduction (`sum`,
//!   `max`, ...) only for the reducing collectives and `none` for the others (hypercube
//!   leaves it blank), and a root of `-1` for collectives without one. So `redop sum, root
//!   -1` is all_reduce or reduce_scatter, `redop none, root 0` is broadcast, scatter or
//!   gather, and so on ([`FAMILIES`]).
//! - **The rank count from busbw / algbw.** nccl-tests prints `busbw = algbw x factor`,
//!   and the factor depends on the rank count: `2(n-1)/n` for all_reduce, `(n-1)/n` for
//!   all_gather and its kin, 1 for broadcast and sendrecv ([`crate::busbw`]). Every row
//!   whose bandwidths are printed with enough digits narrows `n`; it is inferred when
//!   exactly one count fits every row within the printing's rounding. The same arithmetic
//!   tells all_reduce (factor 1 to 2) from reduce_scatter (under 1).
//!
//! An inference is recorded as such ([`Inference`]) and shown with its basis; where more
//! than one answer fits, the inference says which and what to pass instead.

use serde::{Deserialize, Serialize};

use super::busbw::{busbw_factor, printed_rounding};
use super::{ParsedOutput, SourceFormat};

/// Which fact was inferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InferredFact {
    /// The collective (`all_reduce`, ...).
    Collective,
    /// The number of ranks in the communicator.
    Ranks,
}

/// A fact the output did not state, inferred from its rows, or why it could not be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inference {
    /// What it is about.
    pub fact: InferredFact,
    /// The value, as text (`all_reduce`, `8`); `None` when no single value fits.
    pub value: Option<String>,
    /// How it was inferred, or which values fit and what to pass instead.
    pub basis: String,
}

/// Whether a collective prints a reduction in the `redop` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redop {
    /// `sum`, `prod`, `max`, `min`, `avg`, `premulsum`.
    Reduces,
    /// `none`.
    None,
    /// The column is empty (hypercube).
    Blank,
}

/// Every collective nccl-tests has a busbw factor for, with what its rows show: the
/// `redop` column, and whether `root` is a rank (`true`) or `-1`. (alltoallv prints like
/// alltoall and has its factor: it is left out so that `none, -1` rows do not name it
/// beside alltoall every time.)
/// Each family: its name, what its rows print in `redop`, whether they have a root, and
/// whether nccl-tests checks its in-place results (`#wrong` a number, not `N/A`; `None`
/// where no recording says). The recordings in `tests/fixtures/nccl-tests/h200x2-nvlink/`
/// show sendrecv with `sum` and in-place `N/A`, alltoall with `none` and in-place `N/A`.
const FAMILIES: [(&str, Redop, bool, Option<bool>); 10] = [
    ("all_reduce", Redop::Reduces, false, Some(true)),
    ("reduce_scatter", Redop::Reduces, false, Some(true)),
    ("reduce", Redop::Reduces, true, Some(true)),
    ("all_gather", Redop::None, false, Some(true)),
    ("alltoall", Redop::None, false, Some(false)),
    ("sendrecv", Redop::Reduces, false, Some(false)),
    ("broadcast", Redop::None, true, Some(true)),
    ("scatter", Redop::None, true, None),
    ("gather", Redop::None, true, None),
    ("hypercube", Redop::Blank, false, None),
];

const MAX_RANKS: u32 = 1 << 20;

/// Candidate counts tried per collective; a ratio too coarse to narrow `n` below this is
/// reported as not inferable.
const MAX_CANDIDATES: u32 = 4096;

/// What a collective's factor allows, given the rows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fit {
    /// No rank count explains every row.
    No,
    /// Every rank count does: the factor is 1 whatever `n`.
    AnyCount,
    /// The rows carry no usable bandwidth (all zero).
    NoEvidence,
    /// These counts, ascending.
    Counts(Vec<u32>),
    /// Only counts of at least this many: busbw/algbw is so close to the factor's limit
    /// that two decimals cannot tell (reduce_scatter on tens of thousands of ranks looks
    /// like a factor of 1).
    AtLeast(u32),
}

/// A row's `(algbw, busbw)` with algbw above zero.
type Sample = (f64, f64);

/// Samples an inference checks at most: the ones with the largest algbw, which carry the
/// most digits (the others narrow nothing they do not), distinct. Bounds the work on a
/// table of any length to [`MAX_CANDIDATES`] x this per collective.
const MAX_SAMPLES: usize = 64;

fn samples(out: &ParsedOutput) -> Vec<Sample> {
    let mut all: Vec<Sample> = out
        .rows
        .iter()
        .flat_map(|r| [r.out_of_place.as_ref(), r.in_place.as_ref()])
        .flatten()
        .filter_map(|p| Some((p.algbw_gbps?, p.busbw_gbps?)))
        .filter(|(a, b)| a.is_finite() && b.is_finite() && *a > 0.0 && *b >= 0.0)
        .collect();
    all.sort_by(|x, y| y.0.total_cmp(&x.0).then(y.1.total_cmp(&x.1)));
    all.dedup();
    all.truncate(MAX_SAMPLES);
    all
}

/// Whether `busbw = algbw x factor` holds within what printing both can explain.
fn fits(factor: f64, (alg, bus): Sample) -> bool {
    let tolerance = printed_rounding(bus) + printed_rounding(alg) * factor + 1e-9;
    (bus - alg * factor).abs() <= tolerance
}

/// The rank counts of `collective` that explain every sample (`known`: the one count to
/// check, when the output shows it).
fn fit(collective: &str, samples: &[Sample], known: Option<u32>) -> Fit {
    let fits_all =
        |n: u32| busbw_factor(collective, n).is_some_and(|f| samples.iter().all(|&s| fits(f, s)));
    if let Some(n) = known {
        return if fits_all(n) {
            Fit::Counts(vec![n])
        } else {
            Fit::No
        };
    }
    // (At 2 ranks all_reduce's factor is 1 too: 3 tells the families apart.)
    if busbw_factor(collective, 3) == Some(1.0) {
        return if fits_all(2) { Fit::AnyCount } else { Fit::No };
    }
    // The sample printed with the most digits narrows n most: the largest algbw (each
    // value has two decimals, so a larger one has the smaller relative error).
    let Some(&(alg, bus)) = samples.iter().max_by(|a, b| a.0.total_cmp(&b.0)) else {
        return Fit::NoEvidence;
    };
    if alg < 0.1 {
        return Fit::NoEvidence;
    }
    let ratio_range = (
        ((bus - printed_rounding(bus)) / (alg + printed_rounding(alg))).max(0.0),
        (bus + printed_rounding(bus)) / (alg - printed_rounding(alg)).max(1e-9),
    );
    // factor(n) grows with n toward its limit (2, or 1): n from the ratio's two ends.
    let limit = busbw_factor(collective, MAX_RANKS).unwrap_or(1.0).round();
    let n_for = |ratio: f64| {
        if ratio >= limit {
            f64::from(MAX_RANKS)
        } else {
            (limit / (limit - ratio)).clamp(1.0, f64::from(MAX_RANKS))
        }
    };
    let lo = n_for(ratio_range.0).floor().max(1.0) as u32;
    let hi = n_for(ratio_range.1).ceil() as u32;
    if hi.saturating_sub(lo) > MAX_CANDIDATES {
        return Fit::AtLeast(lo);
    }
    let counts: Vec<u32> = (lo..=hi).filter(|&n| fits_all(n)).collect();
    if counts.is_empty() {
        Fit::No
    } else {
        Fit::Counts(counts)
    }
}

/// The rows' `redop` kind and whether they have a root, where every row agrees and the
/// column exists.
fn columns(out: &ParsedOutput) -> (Option<Redop>, Option<bool>) {
    let has_column = |name: &str| {
        out.format == Some(SourceFormat::Json)
            || out
                .tables
                .iter()
                .any(|t| t.columns.iter().any(|c| c == name))
    };
    let agree = |kinds: Vec<Option<Redop>>| -> Option<Redop> {
        let first = *kinds.first()?;
        kinds.iter().all(|k| *k == first).then_some(first)?
    };
    let redop = has_column("redop")
        .then(|| {
            agree(
                out.rows
                    .iter()
                    .map(|r| {
                        Some(match r.redop.as_deref() {
                            None | Some("") => Redop::Blank,
                            Some("none") => Redop::None,
                            Some(_) => Redop::Reduces,
                        })
                    })
                    .collect(),
            )
        })
        .flatten();
    let rooted = has_column("root")
        .then(|| {
            let roots: Vec<bool> = out
                .rows
                .iter()
                .filter_map(|r| r.root.map(|root| root >= 0))
                .collect();
            let first = *roots.first()?;
            (roots.len() == out.rows.len() && roots.iter().all(|r| *r == first)).then_some(first)
        })
        .flatten();
    (redop, rooted)
}

/// Whether the rows' in-place results were checked: `Some(false)` when every row has an
/// out-of-place `#wrong` count and an in-place `N/A` (sendrecv, alltoall), `Some(true)`
/// when both are counts, `None` otherwise (`-c 0`, no in-place block, rows that differ).
fn in_place_checked(out: &ParsedOutput) -> Option<bool> {
    let mut seen = None;
    for r in &out.rows {
        let (Some(oop), Some(ip)) = (&r.out_of_place, &r.in_place) else {
            return None;
        };
        oop.wrong?;
        let checked = ip.wrong.is_some();
        if *seen.get_or_insert(checked) != checked {
            return None;
        }
    }
    seen
}

fn describe_columns(redop: Option<Redop>, rooted: Option<bool>) -> String {
    let redop = match redop {
        Some(Redop::Reduces) => "a reduction in `redop`",
        Some(Redop::None) => "`redop` none",
        Some(Redop::Blank) => "`redop` blank",
        None => "no single kind of `redop`",
    };
    let root = match rooted {
        Some(true) => "a root rank",
        Some(false) => "root -1",
        None => "no `root` column",
    };
    format!("{redop}, {root}")
}

fn or_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// Infers the collective and the rank count where `out` lacks them, and records each
/// inference (or why none could be made) in [`ParsedOutput::inferences`]. A fact the
/// output or the caller already gave is left alone, and only checked against the rows
/// when the other is being inferred.
pub(crate) fn infer_missing(out: &mut ParsedOutput) {
    if out.rows.is_empty() {
        return;
    }
    ranks_beyond_listed(out);
    let known_ranks = out.nranks();
    let need_collective = out.collective.is_none();
    let need_ranks = known_ranks.is_none();
    if !need_collective && !need_ranks {
        return;
    }
    let samples = samples(out);
    let (redop, rooted) = columns(out);
    let in_place = in_place_checked(out);
    let given = out.collective.clone();
    let candidates: Vec<&str> = match &given {
        Some(c) => vec![c.as_str()],
        None => FAMILIES
            .iter()
            .filter(|(_, r, root, checked)| {
                redop.is_none_or(|k| k == *r)
                    && rooted.is_none_or(|k| k == *root)
                    && in_place.is_none_or(|k| checked.is_none_or(|c| c == k))
            })
            .map(|(name, ..)| *name)
            .collect(),
    };
    let mut fitted: Vec<(&str, Fit)> = candidates
        .iter()
        .map(|c| (*c, fit(c, &samples, known_ranks)))
        .filter(|(_, f)| *f != Fit::No)
        .collect();
    // A collective that fits only on tens of thousands of ranks gives way to one that
    // fits a definite count.
    let definite = |f: &Fit| matches!(f, Fit::Counts(_) | Fit::AnyCount);
    let implausible: Vec<String> = if fitted.iter().any(|(_, f)| definite(f)) {
        let far = fitted
            .iter()
            .filter_map(|(c, f)| match f {
                Fit::AtLeast(n) => Some(format!("{c} would need {n} ranks or more")),
                _ => None,
            })
            .collect();
        fitted.retain(|(_, f)| !matches!(f, Fit::AtLeast(_)));
        far
    } else {
        Vec::new()
    };
    if need_collective {
        infer_collective(out, &fitted, &implausible, redop, rooted);
    }
    if need_ranks {
        infer_ranks(out, &fitted);
    }
}

/// The collective: the one candidate `fitted` leaves (set in `out`), or why none could
/// be told; `implausible` names the candidates that would need too many ranks.
fn infer_collective(
    out: &mut ParsedOutput,
    fitted: &[(&str, Fit)],
    implausible: &[String],
    redop: Option<Redop>,
    rooted: Option<bool>,
) {
    let seen = describe_columns(redop, rooted);
    let names: Vec<&str> = fitted.iter().map(|(c, _)| *c).collect();
    let inference = match names.as_slice() {
        [one] => {
            out.collective = Some((*one).to_string());
            Inference {
                fact: InferredFact::Collective,
                value: Some((*one).to_string()),
                basis: format!(
                    "the rows show {seen}, and only {one}'s busbw factor fits their busbw/algbw{}",
                    if implausible.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", implausible.join("; "))
                    }
                ),
            }
        }
        [] => Inference {
            fact: InferredFact::Collective,
            value: None,
            basis: format!(
                "no collective fits rows with {seen} and these busbw/algbw ratios: pass --collective"
            ),
        },
        many => Inference {
            fact: InferredFact::Collective,
            value: None,
            basis: format!(
                "rows with {seen} fit {}: pass --collective",
                or_list(many)
            ),
        },
    };
    out.inferences.push(inference);
}

/// The rank count: the one count every collective left in `fitted` agrees on (set in
/// `out`), or why none could be told.
fn infer_ranks(out: &mut ParsedOutput, fitted: &[(&str, Fit)]) {
    // One count that every remaining candidate agrees on is the answer even when the
    // collective is not known (all_gather and alltoall share their factor).
    let mut counts: Vec<u32> = Vec::new();
    let mut any = false;
    let mut no_evidence = false;
    let mut at_least: Option<u32> = None;
    for (_, f) in fitted {
        match f {
            Fit::Counts(c) => {
                for n in c {
                    if !counts.contains(n) {
                        counts.push(*n);
                    }
                }
            }
            Fit::AnyCount => any = true,
            Fit::NoEvidence => no_evidence = true,
            Fit::AtLeast(n) => at_least = Some(at_least.map_or(*n, |m| m.min(*n))),
            Fit::No => {}
        }
    }
    counts.sort_unstable();
    let factor_text = |n: u32| {
        let c = out.collective.as_deref().unwrap_or(fitted[0].0);
        busbw_factor(c, n).map_or(String::new(), |f| format!(" (busbw = algbw x {f:.4})"))
    };
    let inference = match (counts.as_slice(), any, no_evidence || at_least.is_some()) {
        ([n], false, false) => {
            out.inferred_ranks = Some(*n);
            Inference {
                fact: InferredFact::Ranks,
                value: Some(n.to_string()),
                basis: format!(
                    "only {n} ranks fit busbw/algbw in every row{}",
                    factor_text(*n)
                ),
            }
        }
        (_, true, _) => Inference {
            fact: InferredFact::Ranks,
            value: None,
            basis: "busbw equals algbw for this collective whatever the rank count: pass --ranks"
                .into(),
        },
        ([], false, true) => Inference {
            fact: InferredFact::Ranks,
            value: None,
            basis: match at_least {
                Some(n) => {
                    format!("busbw/algbw fits any count of {n} ranks or more: pass --ranks")
                }
                None => {
                    "the rows' bandwidths are too small to tell the rank count: pass --ranks".into()
                }
            },
        },
        ([], false, false) => Inference {
            fact: InferredFact::Ranks,
            value: None,
            basis: "no rank count fits busbw/algbw in every row: pass --ranks and --collective"
                .into(),
        },
        (many, _, _) => Inference {
            fact: InferredFact::Ranks,
            value: None,
            basis: format!(
                "busbw/algbw fits {} to {} ranks: pass --ranks",
                many[0],
                many[many.len() - 1]
            ),
        },
    };
    out.inferences.push(inference);
}

/// Rank lines pasted for some ranks only (`# Rank 0` .. `# Rank 99` of a 1,440-rank run):
/// when the listed count does not fit the rows' busbw/algbw and exactly one larger count
/// does, that count is the run's, with a note (issue #33). NCCL's own `nRanks`, when
/// logged, is never second-guessed.
fn ranks_beyond_listed(out: &mut ParsedOutput) {
    if out.format != Some(SourceFormat::Text) || out.ranks.is_empty() || out.debug.n_ranks.is_some()
    {
        return;
    }
    let (Some(collective), Some(listed)) = (out.collective.clone(), out.nranks()) else {
        return;
    };
    let samples = samples(out);
    if fit(&collective, &samples, Some(listed)) != Fit::No {
        return;
    }
    let Fit::Counts(counts) = fit(&collective, &samples, None) else {
        return;
    };
    let [n] = counts[..] else {
        return;
    };
    if n <= listed {
        return;
    }
    let factor = busbw_factor(&collective, n).unwrap_or(0.0);
    out.ranks_beyond_listed = Some(n);
    out.inferences.push(Inference {
        fact: InferredFact::Ranks,
        value: Some(n.to_string()),
        basis: format!(
            "inferred {n} ranks: the output lists {listed} rank line(s), but only {n} ranks fit \
             busbw/algbw in every row (busbw = algbw x {factor:.4}): the paste shows some of the ranks"
        ),
    });
}
