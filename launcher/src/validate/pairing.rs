//! Which nodes test together, round by round: the pairing modes of `gpudirect validate`.
//!
//! A validation runs in *rounds*. A round is a list of disjoint *groups* of node indices;
//! every group of a round runs at the same time as its own job step (`srun --exact
//! --nodelist=a,b ...`), so a round costs one nccl-tests run of wall time whatever the node
//! count. Nothing here runs anything: these are pure functions from a node order to rounds.
//!
//! The modes ([`Mode`]):
//!
//! - `pairs`: one round of disjoint pairs covering every node. With placement blocks (see
//!   [`Layout`]) it pairs inside each block first and pairs the blocks' leftovers with each
//!   other. An odd node count leaves one node out ([`Schedule::leftover`]); it is tested
//!   later with a node that already passed ([`fill_rounds`]).
//! - `pairs-across`: one round of disjoint pairs where each node's partner is, whenever the
//!   block sizes allow it, in another block (node `i` of the topology order with node
//!   `i + N/2`), to test the links between blocks.
//! - `pairwise`: the circle method, `N-1` rounds of `N/2` disjoint pairs in which every pair
//!   of nodes meets exactly once (odd `N`: one node sits out each round).
//! - `groups:K`: one round of disjoint groups of `K` nodes in topology order (a smaller
//!   last group, or a leftover when one node remains).
//! - `ring`: each node with its neighbour in topology order, in two rounds of disjoint pairs
//!   for an even count, `(0,1),(2,3),...` then `(1,2),(3,4),...,(N-1,0)`, and three for an
//!   odd one (the closing pair `(N-1,0)` gets its own round).
//! - `all`: one group of every node.
//!
//! After these *screen* rounds the judging ([`crate::validate::judging`]) asks for follow-up rounds:
//! every suspect with a partner that passed ([`fill_rounds`]), or suspected links again.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;

/// The groups of one round: disjoint lists of node indices.
pub type RoundGroups = Vec<Vec<usize>>;

/// Errors in a mode name or a topology file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PairingError {
    /// The mode name is none of the known ones.
    #[error(
        "unknown pairing mode {0:?}: use pairs, pairs-across, pairwise, groups:K (K >= 2), ring or all"
    )]
    UnknownMode(String),
    /// `groups:K` with a K that is not a whole number of at least 2.
    #[error(
        "pairing mode {0:?}: K in groups:K must be a whole number of at least 2, e.g. groups:4"
    )]
    BadGroupSize(String),
    /// A topology line that is not `node block`.
    #[error(
        "topology line {line}: {why} in {text:?}; each line is `NODE BLOCK` (# starts a comment)"
    )]
    TopologyLine {
        /// 1-based line number.
        line: usize,
        /// The line as written.
        text: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Nodes of the allocation that the topology does not place.
    #[error("the topology gives no block for {0}: add a `NODE BLOCK` line for each")]
    MissingBlock(String),
}

/// How nodes are grouped into rounds. `FromStr`/`Display` use the CLI spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One round of disjoint pairs, inside placement blocks first.
    Pairs,
    /// One round of disjoint pairs, each across two blocks where the sizes allow.
    PairsAcross,
    /// Every pair once: `N-1` rounds (circle method).
    Pairwise,
    /// One round of disjoint groups of this many nodes.
    Groups(usize),
    /// Each node with its topology neighbour, two or three rounds.
    Ring,
    /// One group of every node.
    All,
}

impl FromStr for Mode {
    type Err = PairingError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "pairs" => Ok(Mode::Pairs),
            "pairs-across" => Ok(Mode::PairsAcross),
            "pairwise" => Ok(Mode::Pairwise),
            "ring" => Ok(Mode::Ring),
            "all" => Ok(Mode::All),
            other => match other.strip_prefix("groups:") {
                Some(k) => match k.trim().parse::<usize>() {
                    Ok(k) if k >= 2 => Ok(Mode::Groups(k)),
                    _ => Err(PairingError::BadGroupSize(s.to_string())),
                },
                None => Err(PairingError::UnknownMode(s.to_string())),
            },
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Pairs => f.write_str("pairs"),
            Mode::PairsAcross => f.write_str("pairs-across"),
            Mode::Pairwise => f.write_str("pairwise"),
            Mode::Groups(k) => write!(f, "groups:{k}"),
            Mode::Ring => f.write_str("ring"),
            Mode::All => f.write_str("all"),
        }
    }
}

/// The nodes in topology order, with the placement block of each.
///
/// Node indices are positions in the allocation's node list; the order is the one the
/// modes walk (blocks in order of first appearance, nodes of a block in allocation order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    order: Vec<usize>,
    block: Vec<usize>,
    block_names: Vec<String>,
}

impl Layout {
    /// `n` nodes in allocation order, all in one block.
    pub fn flat(n: usize) -> Self {
        Layout {
            order: (0..n).collect(),
            block: vec![0; n],
            block_names: vec![String::new()],
        }
    }

    /// Orders `nodes` by their block in `blocks` (node name -> block name).
    ///
    /// Errors name every node that has no block.
    pub fn from_blocks(
        nodes: &[String],
        blocks: &BTreeMap<String, String>,
    ) -> Result<Self, PairingError> {
        let missing: Vec<&str> = nodes
            .iter()
            .filter(|n| !blocks.contains_key(n.as_str()))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(PairingError::MissingBlock(missing.join(", ")));
        }
        let mut ids: HashMap<&str, usize> = HashMap::new();
        let mut block_names = Vec::new();
        let mut block = Vec::with_capacity(nodes.len());
        for name in nodes {
            let b = blocks.get(name.as_str()).map(String::as_str).unwrap_or("");
            let next = ids.len();
            let id = *ids.entry(b).or_insert_with(|| {
                block_names.push(b.to_string());
                next
            });
            block.push(id);
        }
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        // Stable: nodes of one block keep their allocation order.
        order.sort_by_key(|&i| block[i]);
        Ok(Layout {
            order,
            block,
            block_names,
        })
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Node indices in topology order.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The block name of node `i` (empty for a flat layout or an index out of range).
    pub fn block_of(&self, i: usize) -> &str {
        self.block
            .get(i)
            .and_then(|&b| self.block_names.get(b))
            .map(String::as_str)
            .unwrap_or("")
    }

    fn block_id(&self, i: usize) -> usize {
        self.block.get(i).copied().unwrap_or(0)
    }
}

/// Parses a topology file: one `NODE BLOCK` per line, `#` starts a comment, blank lines
/// are skipped. A node given twice is an error (which block would it be in?).
pub fn parse_topology(text: &str) -> Result<BTreeMap<String, String>, PairingError> {
    let mut map = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |why| PairingError::TopologyLine {
            line: i + 1,
            text: raw.to_string(),
            why,
        };
        let mut words = line.split_whitespace();
        let (Some(node), Some(block)) = (words.next(), words.next()) else {
            return Err(err("missing the block"));
        };
        if words.next().is_some() {
            return Err(err("more than two words"));
        }
        if map.insert(node.to_string(), block.to_string()).is_some() {
            return Err(err("node given twice"));
        }
    }
    Ok(map)
}

/// The screen rounds of a mode, and the nodes they leave out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Rounds of disjoint groups, in the order to run them.
    pub rounds: Vec<RoundGroups>,
    /// Nodes in no group (the odd one of `pairs`, a lone last node of `groups:K`); they
    /// are tested later with a node that passed ([`fill_rounds`]).
    pub leftover: Vec<usize>,
}

/// The screen rounds of `mode` over the nodes of `layout`.
pub fn schedule(mode: Mode, layout: &Layout) -> Schedule {
    let order = layout.order();
    let n = order.len();
    let mut leftover = Vec::new();
    let rounds = match mode {
        Mode::Pairs => {
            let (round, rest) = pairs_within_blocks(layout);
            leftover.extend(rest);
            vec![round]
        }
        Mode::PairsAcross => {
            let half = n / 2;
            let round = (0..half).map(|i| vec![order[i], order[i + half]]).collect();
            if n % 2 == 1 {
                leftover.push(order[n - 1]);
            }
            vec![round]
        }
        Mode::Pairwise => circle(order),
        Mode::Groups(k) => {
            let k = k.max(2);
            let mut round = Vec::new();
            for chunk in order.chunks(k) {
                if chunk.len() >= 2 {
                    round.push(chunk.to_vec());
                } else {
                    leftover.extend_from_slice(chunk);
                }
            }
            vec![round]
        }
        Mode::Ring => ring(order),
        Mode::All => {
            if n >= 2 {
                vec![vec![order.to_vec()]]
            } else {
                leftover.extend_from_slice(order);
                vec![Vec::new()]
            }
        }
    };
    let rounds: Vec<RoundGroups> = rounds.into_iter().filter(|r| !r.is_empty()).collect();
    if rounds.is_empty() && leftover.is_empty() {
        leftover.extend_from_slice(order);
    }
    Schedule { rounds, leftover }
}

/// Consecutive pairs inside each block, then the blocks' odd nodes paired with each other.
fn pairs_within_blocks(layout: &Layout) -> (RoundGroups, Vec<usize>) {
    let order = layout.order();
    let mut round = Vec::with_capacity(order.len() / 2);
    let mut odd = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let block = layout.block_id(order[start]);
        let mut end = start;
        while end < order.len() && layout.block_id(order[end]) == block {
            end += 1;
        }
        let run = &order[start..end];
        for pair in run.chunks(2) {
            match pair {
                [a, b] => round.push(vec![*a, *b]),
                [a] => odd.push(*a),
                _ => {}
            }
        }
        start = end;
    }
    let mut leftover = Vec::new();
    for pair in odd.chunks(2) {
        match pair {
            [a, b] => round.push(vec![*a, *b]),
            [a] => leftover.push(*a),
            _ => {}
        }
    }
    (round, leftover)
}

/// Circle method: fix the first slot, rotate the rest; a `None` slot is the bye.
fn circle(order: &[usize]) -> Vec<RoundGroups> {
    let mut slots: Vec<Option<usize>> = order.iter().copied().map(Some).collect();
    if slots.len() % 2 == 1 {
        slots.push(None);
    }
    let m = slots.len();
    if m < 2 {
        return Vec::new();
    }
    let mut rounds = Vec::with_capacity(m - 1);
    for _ in 0..m - 1 {
        let round = (0..m / 2)
            .filter_map(|i| match (slots[i], slots[m - 1 - i]) {
                (Some(a), Some(b)) => Some(vec![a, b]),
                _ => None,
            })
            .collect();
        rounds.push(round);
        // Rotate every slot but the first by one.
        slots[1..].rotate_right(1);
    }
    rounds
}

fn ring(order: &[usize]) -> Vec<RoundGroups> {
    let n = order.len();
    if n < 2 {
        return Vec::new();
    }
    if n == 2 {
        return vec![vec![vec![order[0], order[1]]]];
    }
    let edges = |from: usize, to: usize| -> RoundGroups {
        (from..to)
            .step_by(2)
            .filter(|&i| i + 1 < to)
            .map(|i| vec![order[i], order[i + 1]])
            .collect()
    };
    if n.is_multiple_of(2) {
        let first = edges(0, n);
        let mut second = edges(1, n);
        second.push(vec![order[n - 1], order[0]]);
        vec![first, second]
    } else {
        vec![
            edges(0, n - 1),
            edges(1, n),
            vec![vec![order[n - 1], order[0]]],
        ]
    }
}

/// How far [`fill_rounds`] looks past the next free partner for one `needy` has not met.
const LOOKAHEAD: usize = 16;

/// Follow-up rounds: the `fixed` groups (re-tests) and each node of `needy` paired with a
/// node of `passed`.
///
/// Within a round every node is in at most one group, so each needy node gets its own
/// passed partner; when there are more needy nodes than free passed ones, the rest go into
/// further rounds (partners are reused across rounds, never within one). A partner that
/// `met(needy, partner)` says was already tested with that node is avoided when another is
/// free (the answer would tell nothing new), taken when it is the only one left. Fixed
/// groups go into the first round where all their nodes are free. A needy node that also
/// appears in `passed` is never paired with itself. The work per needy node is bounded, so
/// the whole call is linear in the number of nodes. Returns no rounds for a needy node
/// when `passed` is empty; pair such nodes with [`pair_among`].
pub fn fill_rounds(
    needy: &[usize],
    passed: &[usize],
    fixed: &[Vec<usize>],
    met: impl Fn(usize, usize) -> bool,
) -> Vec<RoundGroups> {
    let n = needy
        .iter()
        .chain(passed)
        .chain(fixed.iter().flatten())
        .copied()
        .max()
        .map_or(0, |m| m + 1);
    let mut rounds: Vec<FillRound> = Vec::new();
    for group in fixed {
        let r = (0..)
            .find(|&r| r >= rounds.len() || group.iter().all(|&x| !rounds[r].busy[x]))
            .unwrap_or(0);
        if r >= rounds.len() {
            rounds.push(FillRound::new(n, passed));
        }
        rounds[r].take_group(group.clone());
    }
    if !passed.is_empty() {
        // Enough rounds for every needy node even when each partner can serve one per round.
        let needed = needy.len().div_ceil(passed.len()) + 1;
        for &x in needy {
            let mut placed = false;
            // First choice: a partner not met yet, in the earliest round where one is free.
            for r in 0..needed.max(rounds.len()) {
                if r >= rounds.len() {
                    rounds.push(FillRound::new(n, passed));
                }
                if rounds[r].busy[x] {
                    continue;
                }
                if let Some(p) = rounds[r].pick(|p| p != x && !met(x, p)) {
                    rounds[r].take_group(vec![x, p]);
                    placed = true;
                    break;
                }
            }
            if placed {
                continue;
            }
            // Every free partner was met before (or is `x`): take any; a fresh round has
            // every passed node free, so if that fails `x` is the only passed node.
            for r in 0..=rounds.len() {
                if r == rounds.len() {
                    rounds.push(FillRound::new(n, passed));
                }
                if rounds[r].busy[x] {
                    continue;
                }
                if let Some(p) = rounds[r].pick(|p| p != x) {
                    rounds[r].take_group(vec![x, p]);
                    break;
                }
            }
        }
    }
    rounds
        .into_iter()
        .map(|r| r.groups)
        .filter(|g| !g.is_empty())
        .collect()
}

struct FillRound {
    groups: RoundGroups,
    busy: Vec<bool>,
    free: VecDeque<usize>,
}

impl FillRound {
    fn new(n: usize, passed: &[usize]) -> Self {
        FillRound {
            groups: Vec::new(),
            busy: vec![false; n],
            free: passed.iter().copied().collect(),
        }
    }

    fn take_group(&mut self, group: Vec<usize>) {
        for &x in &group {
            self.busy[x] = true;
        }
        self.groups.push(group);
    }

    /// The first free partner within the lookahead that `ok` accepts, removed from the pool.
    fn pick(&mut self, ok: impl Fn(usize) -> bool) -> Option<usize> {
        // Drop partners taken by fixed groups or other needy nodes from the front.
        while self.free.front().is_some_and(|&p| self.busy[p]) {
            self.free.pop_front();
        }
        let limit = self.free.len().min(LOOKAHEAD);
        let pos = (0..limit).find(|&i| {
            let p = self.free[i];
            !self.busy[p] && ok(p)
        })?;
        self.free.remove(pos)
    }
}

/// One round of disjoint pairs among `nodes` themselves, for when no node has passed yet
/// (everything was slow, or `all` was slow as one group). Pairs that `met` are avoided
/// when an unmet partner is free within a short lookahead; an odd node out is left out.
pub fn pair_among(nodes: &[usize], met: impl Fn(usize, usize) -> bool) -> RoundGroups {
    let mut rest: VecDeque<usize> = nodes.iter().copied().collect();
    let mut round = Vec::new();
    while let Some(x) = rest.pop_front() {
        if rest.is_empty() {
            break;
        }
        let limit = rest.len().min(LOOKAHEAD);
        let pos = (0..limit).find(|&i| !met(x, rest[i])).unwrap_or(0);
        if let Some(y) = rest.remove(pos) {
            round.push(vec![x, y]);
        }
    }
    round
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const MODES: [Mode; 7] = [
        Mode::Pairs,
        Mode::PairsAcross,
        Mode::Pairwise,
        Mode::Groups(3),
        Mode::Groups(4),
        Mode::Ring,
        Mode::All,
    ];

    fn assert_disjoint(rounds: &[RoundGroups], n: usize, what: &str) {
        for (r, round) in rounds.iter().enumerate() {
            let mut seen = HashSet::new();
            for g in round {
                assert!(g.len() >= 2, "{what}: round {r} has a group of {}", g.len());
                for &x in g {
                    assert!(x < n, "{what}: node {x} out of range");
                    assert!(seen.insert(x), "{what}: node {x} twice in round {r}");
                }
            }
        }
    }

    #[test]
    fn every_mode_has_disjoint_groups_and_covers_every_node() {
        for n in 1..=41 {
            for mode in MODES {
                let s = schedule(mode, &Layout::flat(n));
                assert_disjoint(&s.rounds, n, &format!("{mode} n={n}"));
                let covered: HashSet<usize> = s
                    .rounds
                    .iter()
                    .flatten()
                    .flatten()
                    .chain(&s.leftover)
                    .copied()
                    .collect();
                assert_eq!(covered.len(), n, "{mode} n={n} misses nodes");
                assert!(s.leftover.len() <= 1, "{mode} n={n}: {:?}", s.leftover);
            }
        }
    }

    #[test]
    fn pairwise_meets_every_pair_exactly_once() {
        for n in 2..=40 {
            let s = schedule(Mode::Pairwise, &Layout::flat(n));
            let rounds_expected = if n % 2 == 0 { n - 1 } else { n };
            assert_eq!(s.rounds.len(), rounds_expected, "n={n}");
            let mut met = HashMap::new();
            for g in s.rounds.iter().flatten() {
                let key = (g[0].min(g[1]), g[0].max(g[1]));
                *met.entry(key).or_insert(0) += 1;
            }
            assert_eq!(met.len(), n * (n - 1) / 2, "n={n}");
            assert!(met.values().all(|&c| c == 1), "n={n}: a pair met twice");
            for round in &s.rounds {
                assert_eq!(round.len(), n / 2, "n={n}");
            }
        }
    }

    #[test]
    fn ring_pairs_every_neighbour() {
        for n in 2..=21 {
            let s = schedule(Mode::Ring, &Layout::flat(n));
            let edges: HashSet<(usize, usize)> = s
                .rounds
                .iter()
                .flatten()
                .map(|g| (g[0].min(g[1]), g[0].max(g[1])))
                .collect();
            for i in 0..n {
                let j = (i + 1) % n;
                if i != j {
                    assert!(edges.contains(&(i.min(j), i.max(j))), "n={n} edge {i}-{j}");
                }
            }
            let want_rounds = match n {
                2 => 1,
                _ if n % 2 == 0 => 2,
                _ => 3,
            };
            assert_eq!(s.rounds.len(), want_rounds, "n={n}");
        }
        let s = schedule(Mode::Ring, &Layout::flat(6));
        assert_eq!(
            s.rounds,
            vec![
                vec![vec![0, 1], vec![2, 3], vec![4, 5]],
                vec![vec![1, 2], vec![3, 4], vec![5, 0]]
            ]
        );
    }

    fn blocks(spec: &[(&str, &str)]) -> (Vec<String>, BTreeMap<String, String>) {
        let nodes = spec.iter().map(|(n, _)| n.to_string()).collect();
        let map = spec
            .iter()
            .map(|(n, b)| (n.to_string(), b.to_string()))
            .collect();
        (nodes, map)
    }

    #[test]
    fn pairs_stay_inside_blocks_first_and_across_crosses_them() {
        // Allocation order interleaves racks; the layout groups them.
        let (nodes, map) = blocks(&[
            ("a1", "r1"),
            ("b1", "r2"),
            ("a2", "r1"),
            ("b2", "r2"),
            ("a3", "r1"),
            ("b3", "r2"),
            ("c1", "r3"),
        ]);
        let layout = Layout::from_blocks(&nodes, &map).unwrap();
        assert_eq!(layout.order(), &[0, 2, 4, 1, 3, 5, 6]);
        assert_eq!(layout.block_of(1), "r2");
        let s = schedule(Mode::Pairs, &layout);
        // r1: a1-a2, r2: b1-b2; leftovers a3, b3 cross; c1 left for the fill round.
        assert_eq!(s.rounds, vec![vec![vec![0, 2], vec![1, 3], vec![4, 5]]]);
        assert_eq!(s.leftover, vec![6]);

        let across = schedule(Mode::PairsAcross, &layout);
        for g in &across.rounds[0] {
            assert_ne!(layout.block_of(g[0]), layout.block_of(g[1]), "{g:?}");
        }
        assert_eq!(across.leftover, vec![6]);
    }

    #[test]
    fn topology_errors_name_the_line_and_the_node() {
        let map = parse_topology("# rack map\nn1 r1\n\nn2   r2 # spare\n").unwrap();
        assert_eq!(map.get("n2").map(String::as_str), Some("r2"));
        let err = parse_topology("n1 r1\nn2\n").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        let err = parse_topology("n1 r1\nn1 r2\n").unwrap_err();
        assert!(err.to_string().contains("twice"), "{err}");
        let (nodes, map) = blocks(&[("n1", "r1")]);
        let more = [nodes, vec!["n9".to_string()]].concat();
        let err = Layout::from_blocks(&more, &map).unwrap_err();
        assert_eq!(err, PairingError::MissingBlock("n9".into()));
    }

    #[test]
    fn mode_names_round_trip_and_bad_ones_say_what_works() {
        for mode in MODES {
            assert_eq!(mode.to_string().parse::<Mode>(), Ok(mode));
        }
        assert!(matches!(
            "groups:1".parse::<Mode>(),
            Err(PairingError::BadGroupSize(_))
        ));
        assert!(matches!(
            "groups:x".parse::<Mode>(),
            Err(PairingError::BadGroupSize(_))
        ));
        let err = "pair".parse::<Mode>().unwrap_err().to_string();
        assert!(err.contains("pairwise"), "{err}");
    }

    #[test]
    fn fill_gives_each_needy_node_its_own_unmet_partner() {
        let met: HashSet<(usize, usize)> = [(0, 4), (1, 5)].into_iter().collect();
        let met_fn = |a: usize, b: usize| met.contains(&(a.min(b), a.max(b)));
        let rounds = fill_rounds(&[0, 1], &[4, 5, 6], &[], met_fn);
        assert_eq!(rounds, vec![vec![vec![0, 5], vec![1, 4]]]);

        // More needy nodes than passed ones: several rounds, every round disjoint.
        let needy: Vec<usize> = (0..7).collect();
        let rounds = fill_rounds(&needy, &[7, 8, 9], &[vec![8, 9]], |_, _| false);
        assert_disjoint(&rounds, 10, "overflow");
        let placed: Vec<usize> = rounds
            .iter()
            .flatten()
            .filter(|g| g[0] < 7)
            .map(|g| g[0])
            .collect();
        assert_eq!(placed.len(), 7);
        assert_eq!(rounds.len(), 3, "{rounds:?}");
        assert!(rounds[0].contains(&vec![8, 9]));

        // No passed node: nothing can be filled.
        assert!(fill_rounds(&[1, 2], &[], &[], |_, _| false).is_empty());
        // The needy node is itself the only passed one: never paired with itself.
        assert!(fill_rounds(&[3], &[3], &[], |_, _| false).is_empty());
    }

    #[test]
    fn pair_among_avoids_old_partners() {
        let met = |a: usize, b: usize| a / 2 == b / 2;
        let round = pair_among(&[0, 1, 2, 3, 4], met);
        assert_disjoint(std::slice::from_ref(&round), 5, "among");
        assert_eq!(round.len(), 2);
        for g in &round {
            assert_ne!(g[0] / 2, g[1] / 2, "{g:?}");
        }
    }
}
