//! The verdicts of `gpudirect watch`, pure: per-rank Inspector samples in, per-communicator
//! findings out, each with its evidence.
//!
//! The rule for a **late rank** (a compute straggler: a slow data loader, a rank that
//! checkpoints, a throttled GPU) comes from how a collective is timed. Each rank's
//! `coll_exec_time_us` runs from the moment that rank started the collective to its end,
//! and no rank can finish before the last one has started. So the rank that arrives last
//! has the *shortest* time, and every other rank's time is longer by about how late it
//! was. Measured on the lent H200 (`tests/fixtures/nccl-inspector/late-rank1`): rank 1
//! sleeping 50 ms per step ran its 64 MiB AllReduce in 36 ms, rank 0 in 85 ms; in the
//! clean run both took 35 ms. A rank is named late when, over the collectives every rank
//! of the communicator reported (matched by sequence number), it is the fastest in at least
//! [`LATE_SHARE`] of them and the others' median time exceeds its own by at least
//! [`LATE_MIN_US`] and [`LATE_MIN_SHARE`] of its own. Its own collectives then ran at
//! the network's real speed, which the verdict states: the network is not what holds the
//! job.
//!
//! **Slower than the fabric**: a communicator's best busbw per collective and size (each
//! collective's fastest rank, whose time has no waiting in it), median over the samples,
//! against the history's baseline for that collective and size; below
//! `100 - tolerance` percent of it is a finding.
//!
//! **A rank that wrote nothing**: fewer ranks in the dumps than the communicator has.
//!
//! What this cannot say yet: *which connection* is slow. The Inspector records collectives
//! and kernel channels, not the network proxy's steps per peer, so a slow NIC shows here
//! only as a communicator slower than its baseline, on every rank alike
//! (docs/results/watch-feasibility.md).

use std::collections::{BTreeMap, HashSet};

use nccl_output::inspector::Sample;
use serde::Serialize;

/// The share of matched collectives in which one rank must be the fastest to be late.
pub const LATE_SHARE: f64 = 0.75;
/// The least lead, in microseconds, of the others' median time over the late rank's.
pub const LATE_MIN_US: f64 = 2000.0;
/// The least lead as a share of the late rank's own median time.
pub const LATE_MIN_SHARE: f64 = 0.2;
/// The fewest matched collectives that can name a late rank.
pub const MIN_MATCHED: usize = 5;

/// What the judge compares against, per collective (NCCL's name) and size.
#[derive(Debug, Clone, Default)]
pub struct Baselines {
    /// Median busbw of earlier measurements, GB/s, with where it came from.
    pub busbw: BTreeMap<(String, u64), (f64, String)>,
    /// How far below the baseline is still healthy, in percent.
    pub tolerance_pct: f64,
}

/// The judgement of one communicator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommVerdict {
    /// The communicator's hash.
    pub comm: String,
    /// Its name, where the application gave one.
    pub name: Option<String>,
    /// Its size.
    pub n_ranks: u32,
    /// The ranks that wrote samples, with their host.
    pub ranks: BTreeMap<u32, String>,
    /// What was seen per collective and size.
    pub groups: Vec<Group>,
    /// What is wrong; empty when nothing is.
    pub findings: Vec<Finding>,
    /// Whether any collective was matched across its ranks often enough
    /// ([`MIN_MATCHED`]) to judge: without, an empty `findings` says nothing.
    pub judged: bool,
}

/// One collective at one size in one communicator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// NCCL's name (`AllReduce`).
    pub coll: String,
    /// Message size, bytes.
    pub bytes: u64,
    /// Samples in the window, over all ranks.
    pub samples: usize,
    /// Collectives every reporting rank wrote (matched by sequence number).
    pub matched: usize,
    /// Median of each matched collective's fastest rank's time, microseconds.
    pub best_us: f64,
    /// Median of each matched collective's slowest rank's time, microseconds.
    pub worst_us: f64,
    /// Median busbw of each matched collective's fastest rank, GB/s.
    pub busbw_gbs: f64,
    /// The history's baseline for it, GB/s, where there is one.
    pub baseline_gbs: Option<f64>,
}

/// One thing wrong with a communicator.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// A rank starts its collectives late: the others wait for it.
    LateRank {
        /// The rank.
        rank: u32,
        /// Its host.
        host: String,
        /// The collective and size that showed it.
        coll: String,
        /// Bytes.
        bytes: u64,
        /// In how many matched collectives it was the fastest, of how many.
        fastest_in: usize,
        /// Matched collectives.
        matched: usize,
        /// Its median time, microseconds.
        own_us: f64,
        /// The other ranks' median time, microseconds.
        others_us: f64,
        /// How late it started, median over the collectives, microseconds: from the
        /// verbose start times where the dumps have them, else the others' lead.
        late_by_us: f64,
        /// Whether `late_by_us` comes from start times (`true`) or from the lead.
        from_start_times: bool,
        /// Its own busbw, GB/s: the network's speed when nobody waits.
        own_busbw_gbs: f64,
    },
    /// A communicator's collective runs slower than the history's baseline.
    SlowerThanBaseline {
        /// The collective.
        coll: String,
        /// Bytes.
        bytes: u64,
        /// Its best busbw here, GB/s.
        busbw_gbs: f64,
        /// The baseline, GB/s.
        baseline_gbs: f64,
        /// Where the baseline came from.
        baseline_from: String,
        /// busbw as a percentage of the baseline.
        percent: f64,
        /// Samples behind `busbw_gbs`.
        matched: usize,
    },
    /// Ranks of the communicator that wrote no sample in the window.
    Silent {
        /// Those ranks.
        ranks: Vec<u32>,
    },
}

/// Judges every communicator in `samples` (duplicates, the same rank's same collective
/// twice, counted once).
pub fn judge(samples: &[Sample], baselines: &Baselines) -> Vec<CommVerdict> {
    let mut by_comm: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    let mut seen = HashSet::new();
    for s in samples {
        if seen.insert((s.comm.as_str(), s.rank, s.coll.as_str(), s.sn)) {
            by_comm.entry(&s.comm).or_default().push(s);
        }
    }
    by_comm
        .into_iter()
        .map(|(comm, samples)| judge_comm(comm, &samples, baselines))
        .collect()
}

fn judge_comm(comm: &str, samples: &[&Sample], baselines: &Baselines) -> CommVerdict {
    let ranks: BTreeMap<u32, String> = samples.iter().map(|s| (s.rank, s.host.clone())).collect();
    let n_ranks = samples.iter().map(|s| s.n_ranks).max().unwrap_or(0);
    let name = samples
        .iter()
        .find_map(|s| s.comm_name.clone())
        .filter(|n| n != "unknown");
    let mut findings = Vec::new();
    let silent: Vec<u32> = (0..n_ranks).filter(|r| !ranks.contains_key(r)).collect();
    if !silent.is_empty() {
        findings.push(Finding::Silent { ranks: silent });
    }
    let mut by_group: BTreeMap<(&str, u64), Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_group.entry((&s.coll, s.bytes)).or_default().push(s);
    }
    let mut groups = Vec::new();
    for ((coll, bytes), group) in by_group {
        let matched = matched_collectives(&group, ranks.len());
        let mut summary = summarize(coll, bytes, group.len(), &matched);
        summary.baseline_gbs = baselines.busbw.get(&(coll.to_string(), bytes)).map(|b| b.0);
        if let Some(late) = late_rank(coll, bytes, &matched, &ranks) {
            findings.push(late);
        }
        if let Some(slow) = slower_than_baseline(&summary, baselines) {
            findings.push(slow);
        }
        groups.push(summary);
    }
    let judged = groups.iter().any(|g| g.matched >= MIN_MATCHED);
    CommVerdict {
        comm: comm.to_string(),
        name,
        n_ranks,
        ranks,
        groups,
        findings,
        judged,
    }
}

/// The collectives of one group that every reporting rank wrote, by sequence number, each
/// as its samples by rank.
fn matched_collectives<'a>(group: &[&'a Sample], nranks: usize) -> Vec<BTreeMap<u32, &'a Sample>> {
    let mut by_sn: BTreeMap<u64, BTreeMap<u32, &Sample>> = BTreeMap::new();
    for s in group {
        by_sn.entry(s.sn).or_default().insert(s.rank, s);
    }
    by_sn
        .into_values()
        .filter(|by_rank| nranks >= 2 && by_rank.len() == nranks)
        .collect()
}

fn summarize(coll: &str, bytes: u64, samples: usize, matched: &[BTreeMap<u32, &Sample>]) -> Group {
    let fastest =
        |m: &BTreeMap<u32, &Sample>| m.values().map(|s| s.exec_us).fold(f64::INFINITY, f64::min);
    let slowest = |m: &BTreeMap<u32, &Sample>| m.values().map(|s| s.exec_us).fold(0.0, f64::max);
    let best_busbw =
        |m: &BTreeMap<u32, &Sample>| m.values().map(|s| s.busbw_gbs).fold(0.0, f64::max);
    Group {
        coll: coll.to_string(),
        bytes,
        samples,
        matched: matched.len(),
        best_us: median(matched.iter().map(fastest)),
        worst_us: median(matched.iter().map(slowest)),
        busbw_gbs: median(matched.iter().map(best_busbw)),
        baseline_gbs: None,
    }
}

fn late_rank(
    coll: &str,
    bytes: u64,
    matched: &[BTreeMap<u32, &Sample>],
    ranks: &BTreeMap<u32, String>,
) -> Option<Finding> {
    if matched.len() < MIN_MATCHED {
        return None;
    }
    let mut fastest_count: BTreeMap<u32, usize> = BTreeMap::new();
    for m in matched {
        let fastest = m
            .values()
            .min_by(|a, b| a.exec_us.total_cmp(&b.exec_us))
            .map(|s| s.rank)?;
        *fastest_count.entry(fastest).or_default() += 1;
    }
    let (&rank, &count) = fastest_count.iter().max_by_key(|(_, &n)| n)?;
    if (count as f64) < LATE_SHARE * matched.len() as f64 {
        return None;
    }
    let own = |m: &BTreeMap<u32, &Sample>| m.get(&rank).map(|s| s.exec_us);
    let others = |m: &BTreeMap<u32, &Sample>| {
        median(m.values().filter(|s| s.rank != rank).map(|s| s.exec_us))
    };
    let own_us = median(matched.iter().filter_map(own));
    let others_us = median(matched.iter().map(others));
    let lead = others_us - own_us;
    if lead < LATE_MIN_US || lead < LATE_MIN_SHARE * own_us {
        return None;
    }
    let starts: Vec<f64> = matched
        .iter()
        .filter_map(|m| {
            let mine = m.get(&rank)?.start_us? as f64;
            let earliest = m
                .values()
                .filter(|s| s.rank != rank)
                .map(|s| s.start_us.map(|t| t as f64))
                .collect::<Option<Vec<f64>>>()?
                .into_iter()
                .fold(f64::INFINITY, f64::min);
            Some(mine - earliest)
        })
        .collect();
    let from_start_times = starts.len() * 2 >= matched.len();
    let late_by_us = if from_start_times {
        median(starts.into_iter())
    } else {
        lead
    };
    let own_busbw_gbs = median(
        matched
            .iter()
            .filter_map(|m| m.get(&rank).map(|s| s.busbw_gbs)),
    );
    Some(Finding::LateRank {
        rank,
        host: ranks.get(&rank).cloned().unwrap_or_default(),
        coll: coll.to_string(),
        bytes,
        fastest_in: count,
        matched: matched.len(),
        own_us,
        others_us,
        late_by_us,
        from_start_times,
        own_busbw_gbs,
    })
}

fn slower_than_baseline(group: &Group, baselines: &Baselines) -> Option<Finding> {
    let (baseline_gbs, from) = baselines.busbw.get(&(group.coll.clone(), group.bytes))?;
    if group.matched == 0 || *baseline_gbs <= 0.0 {
        return None;
    }
    let percent = 100.0 * group.busbw_gbs / baseline_gbs;
    (percent < 100.0 - baselines.tolerance_pct).then(|| Finding::SlowerThanBaseline {
        coll: group.coll.clone(),
        bytes: group.bytes,
        busbw_gbs: group.busbw_gbs,
        baseline_gbs: *baseline_gbs,
        baseline_from: from.clone(),
        percent,
        matched: group.matched,
    })
}

/// The median of finite values (the history's one rule, `baseline::median`); 0 for none.
fn median(values: impl Iterator<Item = f64>) -> f64 {
    crate::baseline::median(&values.collect::<Vec<f64>>()).unwrap_or(0.0)
}
