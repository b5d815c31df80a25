//! A simulated cluster that drives the real [`Validation`] planner, to measure how many
//! rounds it takes and how often it is wrong, without a GPU.
//!
//! ## The model
//!
//! Fixed parameters from the design notes, not tuned to pass ([`Model::default`]):
//!
//! - Every node has a speed: 1.0 when healthy, 0.7 when bad ([`Model::bad_node_speed`]).
//! - A *bad link* between two nodes multiplies their pair's busbw by 0.6
//!   ([`Model::bad_link_factor`]); a link is a property of the pair, whatever else either
//!   node does.
//! - A group's busbw, each time it runs, is
//!   `min(speed of its members) x min(link factor of its pairs) x noise`, where the noise is
//!   log-normal, `exp(0.05 * Z)` with `Z` standard normal (drawn by Box-Muller): 5%
//!   run-to-run noise, a new draw for every run. The baseline is 1.0 (the median of a
//!   healthy pair's runs), so the threshold is `Threshold::baseline(1.0, tolerance)`; or,
//!   with [`Scenario::round_spread`], there is no baseline and the validation judges its
//!   runs against its own first round ([`RoundRule`]), as `gpudirect validate` does with no
//!   history and no `--floor`.
//! - A scenario with bad fraction `f` on `N` nodes has `round(f x N)` bad nodes (at least
//!   one), chosen uniformly, and half as many bad links (rounded down).
//!   [`LinkPlacement::Uniform`] puts each link on a pair of distinct nodes chosen
//!   uniformly among all `N(N-1)/2`, so most are on pairs no 3-round plan ever runs;
//!   [`LinkPlacement::ScreenPairs`] puts them on pairs of the first screen round, to
//!   measure whether a link that *is* exercised is told apart from a slow node.
//!
//! Every trial is seeded, so the numbers are the same on every machine.

use std::collections::{HashMap, HashSet};

use crate::validate::judging::{
    JudgeError, Outcome, Reference, RoundRule, Threshold, Validation, Verdict, DEFAULT_FOLLOWUPS,
    DEFAULT_TOLERANCE,
};
use crate::validate::pairing::{self, Layout, Mode};

/// A small seeded generator (SplitMix64): fast, and good enough for a simulation.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator from a seed; equal seeds give equal streams.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1]: never 0, so its logarithm is finite.
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Standard normal, by the Box-Muller transform.
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// The node-speed model's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Model {
    /// Speed of a bad node (a healthy one is 1.0).
    pub bad_node_speed: f64,
    /// Factor on a pair's busbw when the link between them is bad.
    pub bad_link_factor: f64,
    /// Sigma of the log-normal run-to-run noise.
    pub noise_sigma: f64,
}

impl Default for Model {
    /// The design notes' values: 0.7, 0.6, 5%.
    fn default() -> Self {
        Model {
            bad_node_speed: 0.7,
            bad_link_factor: 0.6,
            noise_sigma: 0.05,
        }
    }
}

/// Where the bad links go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkPlacement {
    /// On pairs chosen uniformly among all pairs of nodes.
    Uniform,
    /// On pairs of the first screen round (tests that an exercised link is recognised).
    ScreenPairs,
}

/// One simulated setting: cluster size, how much is broken, how it is validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scenario {
    /// Node count.
    pub nodes: usize,
    /// Fraction of bad nodes (0..=1).
    pub bad_fraction: f64,
    /// Pairing mode of the screen rounds.
    pub mode: Mode,
    /// Threshold tolerance below the baseline of 1.0.
    pub tolerance: f64,
    /// Where bad links go.
    pub links: LinkPlacement,
    /// Follow-up passes allowed.
    pub followups: usize,
    /// None: judged against the baseline 1.0 less the tolerance. Some(k): no baseline,
    /// judged against the first round's median and MAD with k ([`RoundRule`]; the
    /// tolerance is then its smallest margin).
    pub round_spread: Option<f64>,
}

impl Scenario {
    /// `pairs`, the default tolerance and follow-ups, uniform links.
    pub fn new(nodes: usize, bad_fraction: f64) -> Self {
        Scenario {
            nodes,
            bad_fraction,
            mode: Mode::Pairs,
            tolerance: DEFAULT_TOLERANCE,
            links: LinkPlacement::Uniform,
            followups: DEFAULT_FOLLOWUPS,
            round_spread: None,
        }
    }

    /// As [`Scenario::new`], with no baseline: judged against the first round ([`RoundRule`]
    /// with spread factor `k`).
    pub fn round_relative(nodes: usize, bad_fraction: f64, k: f64) -> Self {
        Scenario {
            round_spread: Some(k),
            ..Scenario::new(nodes, bad_fraction)
        }
    }

    /// `round(fraction x nodes)`, at least 1 when the fraction is above 0, at most all.
    pub fn bad_nodes(&self) -> usize {
        if self.bad_fraction <= 0.0 {
            return 0;
        }
        let k = (self.bad_fraction * self.nodes as f64).round() as usize;
        k.clamp(1, self.nodes)
    }

    /// Half the bad nodes, rounded down.
    pub fn bad_links(&self) -> usize {
        self.bad_nodes() / 2
    }
}

/// One drawn cluster: node speeds and bad links.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    /// Speed per node.
    pub speed: Vec<f64>,
    /// Bad links (lower index first) and their factor.
    pub bad_links: HashMap<(usize, usize), f64>,
}

fn key(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

impl Cluster {
    /// Draws bad nodes and links for `scenario`.
    pub fn draw(scenario: &Scenario, model: &Model, rng: &mut Rng) -> Cluster {
        let n = scenario.nodes;
        let mut speed = vec![1.0; n];
        // Partial Fisher-Yates: the first k of a shuffled index list are the bad nodes.
        let mut idx: Vec<usize> = (0..n).collect();
        for i in 0..scenario.bad_nodes().min(n) {
            let j = i + rng.below(n - i);
            idx.swap(i, j);
            speed[idx[i]] = model.bad_node_speed;
        }
        let want = scenario.bad_links();
        let mut bad_links = HashMap::new();
        match scenario.links {
            LinkPlacement::Uniform => {
                let all_pairs = n * n.saturating_sub(1) / 2;
                while bad_links.len() < want.min(all_pairs) {
                    let (a, b) = (rng.below(n), rng.below(n));
                    if a != b {
                        bad_links.insert(key(a, b), model.bad_link_factor);
                    }
                }
            }
            LinkPlacement::ScreenPairs => {
                let screen = pairing::schedule(scenario.mode, &Layout::flat(n));
                let mut pairs: Vec<(usize, usize)> = screen
                    .rounds
                    .first()
                    .into_iter()
                    .flatten()
                    .filter(|g| g.len() == 2)
                    .map(|g| key(g[0], g[1]))
                    .collect();
                for i in 0..want.min(pairs.len()) {
                    let j = i + rng.below(pairs.len() - i);
                    pairs.swap(i, j);
                    bad_links.insert(pairs[i], model.bad_link_factor);
                }
            }
        }
        Cluster { speed, bad_links }
    }

    /// One run of `group`: slowest member x worst link among its pairs x noise.
    pub fn busbw(&self, group: &[usize], model: &Model, rng: &mut Rng) -> f64 {
        let slowest = group
            .iter()
            .filter_map(|&i| self.speed.get(i))
            .copied()
            .fold(f64::INFINITY, f64::min);
        let link = match group {
            [a, b] => self.bad_links.get(&key(*a, *b)).copied().unwrap_or(1.0),
            _ => {
                // Large groups: look the (few) bad links up rather than every pair.
                let members: HashSet<usize> = group.iter().copied().collect();
                self.bad_links
                    .iter()
                    .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                    .map(|(_, f)| *f)
                    .fold(1.0, f64::min)
            }
        };
        slowest * link * (model.noise_sigma * rng.normal()).exp()
    }

    /// True when node `i` is bad.
    pub fn is_bad(&self, i: usize) -> bool {
        self.speed.get(i).is_some_and(|&s| s < 1.0)
    }
}

/// Declares a struct of counts (`usize` fields) that adds up field by field (`+=`), so a
/// count added to the struct is summed with the others without a second list to keep.
macro_rules! counts {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$doc:meta])* pub $field:ident,)* }) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$doc])* pub $field: usize,)*
        }

        impl std::ops::AddAssign<&$name> for $name {
            fn add_assign(&mut self, other: &$name) {
                $(self.$field += other.$field;)*
            }
        }
    };
}

counts! {
    /// What one trial got right and wrong.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct Trial {
        /// Rounds used.
        pub rounds,
        /// Bad nodes injected.
        pub bad_nodes,
        /// Bad nodes not called slow (or failed).
        pub missed_nodes,
        /// Bad nodes judged healthy: what `gpudirect vet` would hand on (an unknown one it
        /// leaves out as unchecked).
        pub bad_judged_healthy,
        /// Healthy nodes.
        pub healthy_nodes,
        /// Healthy nodes flagged: slow, failed, unknown, or on a bad link that is not one.
        pub false_alarms,
        /// Nodes left unknown (healthy or not).
        pub unknown,
        /// Bad links injected.
        pub bad_links,
        /// Bad links whose pair ran at least once.
        pub links_tested,
        /// Tested bad links touching a bad node (reported as the slow node).
        pub links_masked,
        /// Tested bad links between healthy nodes reported only as suspected (one slow run
        /// that the rounds allowed could not repeat).
        pub links_suspected,
        /// Tested bad links between healthy nodes neither confirmed nor suspected.
        pub links_missed,
        /// Links reported that are not bad.
        pub false_links,
    }
}

/// Runs one seeded trial of `scenario` through [`Validation`] and scores its report.
pub fn run_trial(scenario: &Scenario, model: &Model, seed: u64) -> Result<Trial, JudgeError> {
    let mut rng = Rng::new(seed);
    let cluster = Cluster::draw(scenario, model, &mut rng);
    let names: Vec<String> = (0..scenario.nodes).map(|i| format!("node{i}")).collect();
    let reference: Reference = match scenario.round_spread {
        None => Threshold::baseline(1.0, scenario.tolerance)?.into(),
        Some(k) => RoundRule {
            tolerance: scenario.tolerance,
            spread_factor: k,
        }
        .into(),
    };
    let mut v =
        Validation::new(names, scenario.mode, reference)?.with_followups(scenario.followups);
    while let Some(round) = v.next_round() {
        let outcomes = round
            .groups
            .iter()
            .map(|g| Outcome::Busbw(cluster.busbw(g, model, &mut rng)))
            .collect();
        v.record(&round, outcomes)?;
    }
    let report = v.report();

    let reported: HashSet<(usize, usize)> = report
        .links
        .iter()
        .map(|l| key(l.nodes[0], l.nodes[1]))
        .collect();
    let suspected: HashSet<(usize, usize)> = report
        .suspect_links
        .iter()
        .map(|l| key(l.nodes[0], l.nodes[1]))
        .collect();
    let mut t = Trial {
        rounds: report.rounds,
        bad_links: cluster.bad_links.len(),
        false_links: reported
            .iter()
            .filter(|l| !cluster.bad_links.contains_key(l))
            .count(),
        ..Trial::default()
    };
    for node in &report.nodes {
        let x = node.index;
        if node.verdict == Verdict::Unknown {
            t.unknown += 1;
        }
        if cluster.is_bad(x) {
            t.bad_nodes += 1;
            if !matches!(node.verdict, Verdict::SlowNode | Verdict::Failed) {
                t.missed_nodes += 1;
            }
            if node.verdict == Verdict::Healthy {
                t.bad_judged_healthy += 1;
            }
        } else {
            t.healthy_nodes += 1;
            let flagged = match node.verdict {
                Verdict::Healthy => false,
                Verdict::BadLink { .. } => reported
                    .iter()
                    .any(|l| (l.0 == x || l.1 == x) && !cluster.bad_links.contains_key(l)),
                _ => true,
            };
            if flagged {
                t.false_alarms += 1;
            }
        }
    }
    // Which bad links ran: pairs directly, or both ends inside one larger group.
    let mut pairs_run = HashSet::new();
    let mut big_groups: Vec<Vec<usize>> = vec![Vec::new(); scenario.nodes];
    for (i, m) in v.measurements().iter().enumerate() {
        if let [a, b] = m.nodes.as_slice() {
            pairs_run.insert(key(*a, *b));
        } else {
            for &x in &m.nodes {
                big_groups[x].push(i);
            }
        }
    }
    for &(a, b) in cluster.bad_links.keys() {
        let tested =
            pairs_run.contains(&(a, b)) || big_groups[a].iter().any(|g| big_groups[b].contains(g));
        if !tested {
            continue;
        }
        t.links_tested += 1;
        if cluster.is_bad(a) || cluster.is_bad(b) {
            t.links_masked += 1;
        } else if suspected.contains(&(a, b)) {
            t.links_suspected += 1;
        } else if !reported.contains(&(a, b)) {
            t.links_missed += 1;
        }
    }
    Ok(t)
}

/// Totals over the trials of one scenario.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Trials run.
    pub trials: usize,
    /// Sum of rounds.
    pub rounds_total: usize,
    /// Most rounds in one trial.
    pub rounds_max: usize,
    /// Trials that took more than 3 rounds.
    pub over_three: usize,
    /// Sums of the per-trial counts.
    pub totals: Trial,
}

impl Summary {
    /// Mean rounds per trial.
    pub fn mean_rounds(&self) -> f64 {
        self.rounds_total as f64 / self.trials.max(1) as f64
    }

    /// Healthy nodes flagged, as a percentage of healthy node-trials.
    pub fn false_alarm_pct(&self) -> f64 {
        100.0 * self.totals.false_alarms as f64 / self.totals.healthy_nodes.max(1) as f64
    }
}

/// Runs `trials` seeded trials of `scenario`; trial `i` uses a seed derived from `seed`,
/// the node count, the fraction and `i`, so each cell of a table has its own stream.
pub fn run_trials(
    scenario: &Scenario,
    model: &Model,
    trials: usize,
    seed: u64,
) -> Result<Summary, JudgeError> {
    let mut mix =
        Rng::new(seed ^ (scenario.nodes as u64).rotate_left(32) ^ scenario.bad_fraction.to_bits());
    let mut s = Summary {
        trials,
        ..Summary::default()
    };
    for _ in 0..trials {
        let t = run_trial(scenario, model, mix.next_u64())?;
        s.rounds_total += t.rounds;
        s.rounds_max = s.rounds_max.max(t.rounds);
        s.over_three += usize::from(t.rounds > 3);
        s.totals += &t;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_seeded_and_its_normal_has_the_right_spread() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        assert_eq!(a.next_u64(), b.next_u64());
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| a.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
        // About 0.27% of a normal lies beyond 3 sigma.
        let tail = xs.iter().filter(|x| x.abs() > 3.0).count() as f64 / n as f64;
        assert!((0.0015..0.004).contains(&tail), "tail {tail}");
        assert!((0..1000).all(|_| a.below(7) < 7));
    }

    #[test]
    fn cluster_has_the_asked_bad_nodes_and_links() {
        let model = Model::default();
        let mut rng = Rng::new(7);
        let s = Scenario::new(64, 0.25);
        let c = Cluster::draw(&s, &model, &mut rng);
        assert_eq!(c.speed.iter().filter(|&&v| v == 0.7).count(), 16);
        assert_eq!(c.bad_links.len(), 8);
        let screen = Scenario {
            links: LinkPlacement::ScreenPairs,
            ..s
        };
        let c = Cluster::draw(&screen, &model, &mut rng);
        // Flat `pairs` runs (0,1),(2,3),...: every link sits on one of them.
        assert!(c.bad_links.keys().all(|&(a, b)| a % 2 == 0 && b == a + 1));
        assert_eq!(Scenario::new(16, 0.01).bad_nodes(), 1);
        assert_eq!(Scenario::new(16, 0.0).bad_nodes(), 0);
    }

    #[test]
    fn busbw_is_the_slowest_member_times_the_link_times_noise() {
        let model = Model {
            noise_sigma: 0.0,
            ..Model::default()
        };
        let mut speed = vec![1.0; 4];
        speed[3] = 0.7;
        let c = Cluster {
            speed,
            bad_links: [((0, 1), 0.6)].into_iter().collect(),
        };
        let mut rng = Rng::new(1);
        assert_eq!(c.busbw(&[1, 0], &model, &mut rng), 0.6);
        assert_eq!(c.busbw(&[2, 3], &model, &mut rng), 0.7);
        assert_eq!(c.busbw(&[0, 2], &model, &mut rng), 1.0);
        assert!((c.busbw(&[0, 1, 3], &model, &mut rng) - 0.42).abs() < 1e-12);
    }

    #[test]
    fn sixty_four_nodes_five_percent_bad_in_three_rounds_without_misses() {
        let s = Scenario::new(64, 0.05);
        let sum = run_trials(&s, &Model::default(), 20, 2026).unwrap();
        assert_eq!(sum.trials, 20);
        assert!(sum.rounds_max <= 3, "{sum:?}");
        assert_eq!(sum.totals.missed_nodes, 0, "{sum:?}");
        assert_eq!(sum.totals.bad_nodes, 20 * 3);
        assert!(sum.false_alarm_pct() < 1.0, "{sum:?}");
    }

    #[test]
    fn without_a_baseline_sixty_four_nodes_ten_percent_bad_are_found() {
        let s = Scenario::round_relative(64, 0.10, crate::validate::judging::DEFAULT_SPREAD_FACTOR);
        let sum = run_trials(&s, &Model::default(), 20, 2026).unwrap();
        assert!(sum.rounds_max <= 3, "{sum:?}");
        assert_eq!(sum.totals.bad_nodes, 20 * 6);
        assert_eq!(sum.totals.missed_nodes, 0, "{sum:?}");
        assert!(sum.false_alarm_pct() < 1.0, "{sum:?}");
    }

    #[test]
    fn links_on_screen_pairs_are_found() {
        let s = Scenario {
            links: LinkPlacement::ScreenPairs,
            ..Scenario::new(64, 0.10)
        };
        let sum = run_trials(&s, &Model::default(), 20, 99).unwrap();
        let t = sum.totals;
        assert_eq!(t.links_tested, t.bad_links, "{sum:?}");
        assert_eq!(t.links_missed, 0, "{sum:?}");
        // Most are confirmed; a few rest on one run when a node also had a noisy run.
        assert!(
            t.links_suspected * 5 < t.links_tested - t.links_masked,
            "{sum:?}"
        );
        assert!(t.false_links <= 1, "{sum:?}");
        assert!(t.links_masked < t.links_tested, "{sum:?}");
    }
}
