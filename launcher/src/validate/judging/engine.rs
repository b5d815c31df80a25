//! [`Validation`]: the planner a caller drives round by round (screen, follow-ups,
//! re-tests), what it concludes from the runs so far, and its verdicts on nodes and links.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use super::*;
use crate::history::compare::median;
use crate::validate::pairing::{self, Layout, Mode};

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
    /// Per node, the runs it was in that could not start: the group and why (issue #45).
    /// No evidence about anyone, kept apart from `stats`.
    not_started: Vec<Vec<(Vec<usize>, String)>>,
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
            not_started: vec![Vec::new(); n],
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
        if let Outcome::CouldNotStart(why) = &outcome {
            // A launch that hung says nothing of the group: no pass, no bad run. The pair
            // counts as met, so that the next partner is another one.
            for &m in &group {
                self.not_started[m].push((group.clone(), why.clone()));
            }
            self.measurements.push(Measurement {
                round,
                nodes: group,
                outcome,
                class,
            });
            return;
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
            (Outcome::Busbw(_), Class::Failed | Class::CouldNotStart) => stat.failed += 1,
            // Kept apart above.
            (Outcome::CouldNotStart(_), _) => {}
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
            // No run passed yet, so no node is proven slow: where some runs were only slow
            // (not failed), the nodes that look bad meet new partners too, after the
            // suspects, so that two healthy nodes still meet (two slow nodes of four made
            // every early pair slow; issue #45).
            let some_slow = self.stats.iter().any(|s| !s.bad_values.is_empty());
            let mut order = needy.clone();
            if some_slow {
                order.extend((0..n).filter(|x| !needy.contains(x)));
            }
            let round = pairing::pair_among(&order, |x, y| self.met(x, y));
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
            complete: self.complete(),
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

    /// Every round planned was recorded and none is left (not so when the budget stopped
    /// the rounds).
    fn complete(&self) -> bool {
        self.finished && self.pending.is_none() && self.queue.is_empty()
    }

    /// Why `x` is still unknown now that the rounds ended (issue #45): they were stopped
    /// first; or the follow-up rounds ran out while partners that passed were still to
    /// meet; or no partner that passed was left to meet (none passed anywhere, or it met
    /// them all).
    fn why_unchecked(&self, x: usize, a: &Assessment) -> Unchecked {
        if !self.complete() {
            return Unchecked::RoundsStopped;
        }
        if !a.any_fast {
            return Unchecked::NoPartnerPassed;
        }
        let unmet: Vec<usize> = (0..self.nodes.len())
            .filter(|&y| {
                y != x && a.fast[y] && !self.met(x, y) && !self.retests.not_partners.contains(&y)
            })
            .collect();
        if unmet.is_empty() {
            Unchecked::NoPartnerLeft
        } else {
            Unchecked::FollowupsEnded {
                rounds: self.max_followups,
                unmet: self.names(&unmet),
            }
        }
    }

    /// One node's verdict, and the links (confirmed or suspected) where it is the lower
    /// index.
    fn judge_node(&self, x: usize, a: &Assessment) -> (NodeReport, Vec<(LinkReport, bool)>) {
        let mine: Vec<&GroupStat> = self.node_stats[x].iter().map(|&i| &self.stats[i]).collect();
        let mut evidence = Vec::new();
        let mut links = Vec::new();
        let (verdict, slow_busbw) = if a.bad[x] {
            self.judge_bad_node(x, a, &mine, &mut evidence)
        } else if a.fast[x] {
            self.judge_fast_node(x, a, &mine, &mut evidence, &mut links)
        } else {
            (self.judge_unsure_node(x, a, &mine, &mut evidence), None)
        };
        let verdict = self.with_runs_not_started(x, verdict, &mut evidence);
        // A whole group slow among fast nodes says its own why.
        let group_slow = evidence
            .iter()
            .any(|e| matches!(e, Evidence::GroupSlow { .. }));
        if verdict == Verdict::Unknown && !group_slow {
            evidence.push(Evidence::Unchecked(self.why_unchecked(x, a)));
        }
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

    /// The runs of `x` that could not start, said in its evidence; a node with no other
    /// run could not start (rather than "not measured"): nothing is known of it, and it is
    /// charged with nothing (issue #45).
    fn with_runs_not_started(
        &self,
        x: usize,
        verdict: Verdict,
        evidence: &mut Vec<Evidence>,
    ) -> Verdict {
        let runs = &self.not_started[x];
        let Some((_, why)) = runs.first() else {
            return verdict;
        };
        let mut partners: Vec<usize> = runs
            .iter()
            .flat_map(|(group, _)| group.iter().copied().filter(|&m| m != x))
            .collect();
        partners.sort_unstable();
        partners.dedup();
        evidence.retain(|e| *e != Evidence::NotMeasured);
        evidence.push(Evidence::CouldNotStart {
            runs: runs.len(),
            partners: self.names(&partners),
            why: why.clone(),
        });
        match verdict {
            Verdict::Unknown if self.node_rounds[x] == 0 => Verdict::CouldNotStart,
            v => v,
        }
    }

    /// A busbw for the user: against the threshold, once there is one.
    fn describe_busbw(&self, v: f64) -> String {
        // Nothing is judged before the first round is recorded, and it sets the threshold.
        self.threshold
            .as_ref()
            .map_or_else(|| format!("{v:.1} GB/s"), |t| t.describe(v))
    }

    /// A node judged bad: failed (most of its bad runs failed) or slow, with its median
    /// busbw in the bad runs.
    fn judge_bad_node(
        &self,
        x: usize,
        a: &Assessment,
        mine: &[&GroupStat],
        evidence: &mut Vec<Evidence>,
    ) -> (Verdict, Option<f64>) {
        let describe = |v: f64| self.describe_busbw(v);
        let (runs, bad_runs, failed_runs) = run_counts(mine);
        let values: Vec<f64> = mine
            .iter()
            .flat_map(|s| s.bad_values.iter().copied())
            .collect();
        let slow_busbw = median(&values);
        let partners: Vec<usize> = mine
            .iter()
            .filter(|s| s.is_bad())
            .filter_map(|s| s.other(x))
            .collect();
        let failed = failed_runs * 2 > bad_runs;
        evidence.push(Evidence::BadInPairings {
            failed,
            bad: bad_runs,
            runs,
            level: slow_busbw.filter(|_| !failed).map(describe),
            partners: self.names(&partners),
        });
        if failed {
            if let Some(why) = mine.iter().find_map(|s| s.first_failure.as_deref()) {
                evidence.push(Evidence::FirstFailure(why.to_string()));
            }
        }
        if !a.any_fast {
            evidence.push(Evidence::NoPairPassed);
        }
        let verdict = if failed {
            Verdict::Failed
        } else {
            Verdict::SlowNode
        };
        (verdict, slow_busbw)
    }

    /// A node judged fast: healthy, or a bad link with the partners it is slow with
    /// (`links` gets each link where it is the lower index), or unknown when a whole group
    /// of fast nodes is slow.
    fn judge_fast_node(
        &self,
        x: usize,
        a: &Assessment,
        mine: &[&GroupStat],
        evidence: &mut Vec<Evidence>,
        links: &mut Vec<(LinkReport, bool)>,
    ) -> (Verdict, Option<f64>) {
        let describe = |v: f64| self.describe_busbw(v);
        let mut slow_busbw = None;
        let mut passed_with = Vec::new();
        let mut group_issue = false;
        let mut link_partners = Vec::new();
        for s in mine {
            let y = s.other(x);
            if !s.is_bad() {
                match y {
                    Some(y) => passed_with.push(y),
                    None => evidence.push(Evidence::PassedInGroup(s.members.len())),
                }
                if s.bad_runs() > 0 {
                    let with = y.map_or_else(
                        || format!("a group of {}", s.members.len()),
                        |y| self.name(y).to_string(),
                    );
                    evidence.push(Evidence::PassedWhenRunAgain {
                        bad: s.bad_runs(),
                        with,
                    });
                }
                continue;
            }
            match y {
                Some(y) if a.bad[y] => {
                    evidence.push(Evidence::BadPartner {
                        failed: s.failed > s.slow,
                        partner: self.name(y).to_string(),
                    });
                }
                Some(y) if a.fast[y] && s.pass == 0 && s.bad_runs() >= 2 => {
                    let m = median(&s.bad_values);
                    let level = m.map(describe).unwrap_or_else(|| "failed".into());
                    evidence.push(Evidence::LinkOnly {
                        node: self.name(x).to_string(),
                        partner: self.name(y).to_string(),
                        level,
                        bad: s.bad_runs(),
                        runs: s.bad_runs() + s.pass,
                    });
                    slow_busbw = slow_busbw.or(m);
                    link_partners.push(y);
                    if x < y {
                        links.push((self.link(x, y, s), true));
                    }
                }
                Some(y) if a.fast[y] => {
                    let level = median(&s.bad_values).map(describe);
                    let partner = self.name(y).to_string();
                    evidence.push(if s.pass == 0 {
                        Evidence::OneBadRun { partner, level }
                    } else {
                        Evidence::LinkToWatch {
                            bad: s.bad_runs(),
                            runs: s.bad_runs() + s.pass,
                            partner,
                            level,
                        }
                    });
                    if x < y {
                        links.push((self.link(x, y, s), false));
                    }
                }
                Some(y) => evidence.push(Evidence::SlowWithUnjudged(self.name(y).to_string())),
                None => {
                    let names = self.names(&s.members);
                    if s.members.iter().any(|&m| a.bad[m]) {
                        evidence.push(Evidence::SlowInGroupWithSlowNode(names));
                    } else if s.bad_runs() >= 2 && s.members.iter().all(|&m| a.fast[m]) {
                        group_issue = true;
                        evidence.push(Evidence::GroupSlow {
                            names,
                            runs: s.bad_runs(),
                        });
                    } else {
                        evidence.push(Evidence::OneSlowRunInGroup(names));
                    }
                }
            }
        }
        if !passed_with.is_empty() {
            evidence.insert(0, Evidence::PassedWith(self.names(&passed_with)));
        }
        let verdict = if !link_partners.is_empty() {
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
        };
        (verdict, slow_busbw)
    }

    /// A node neither judged bad nor fast: unknown (not measured, one partner only, bad in
    /// every run), or failed when its runs never worked.
    fn judge_unsure_node(
        &self,
        x: usize,
        a: &Assessment,
        mine: &[&GroupStat],
        evidence: &mut Vec<Evidence>,
    ) -> Verdict {
        let (runs, bad_runs, failed_runs) = run_counts(mine);
        let mut unjudged = Verdict::Unknown;
        if runs == 0 {
            evidence.push(Evidence::NotMeasured);
        } else if a.bad_partners[x] == 1 {
            let p: Vec<usize> = mine
                .iter()
                .filter_map(|s| s.other(x))
                .filter(|&y| a.fast[y])
                .collect();
            evidence.push(Evidence::NoSecondPartner(self.names(&p)));
        } else if failed_runs * 2 > bad_runs {
            // Runs that never worked are a failure, whoever is at fault.
            evidence.push(Evidence::FailedEveryRun {
                bad: bad_runs,
                runs,
            });
            if let Some(why) = mine.iter().find_map(|s| s.first_failure.as_deref()) {
                evidence.push(Evidence::FirstFailure(why.to_string()));
            }
            unjudged = Verdict::Failed;
        } else {
            evidence.push(Evidence::BadEveryRun {
                bad: bad_runs,
                runs,
            });
        }
        unjudged
    }
}

/// A node's runs: all of them, the bad ones and the failed ones.
fn run_counts(mine: &[&GroupStat]) -> (usize, usize, usize) {
    let runs: usize = mine.iter().map(|s| s.pass + s.bad_runs()).sum();
    let bad_runs: usize = mine.iter().map(|s| s.bad_runs()).sum();
    let failed_runs: usize = mine.iter().map(|s| s.failed).sum();
    (runs, bad_runs, failed_runs)
}
