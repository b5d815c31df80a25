//! Which connection is slow: the connection profiler's lines (`watch-profiler/`, one
//! `<host>-pid<PID>.links` file per rank) read, taken over the window, and judged.
//!
//! Each line holds one communicator's totals per connection (peer, channel, direction)
//! since it began: proxy operations, steps, bytes, and nanoseconds on the network. Two lines
//! of one rank, the newest and the last one at least a window older, give what the rank's
//! connections carried in the window and how long the network took for it ([`windowed`]).
//!
//! **The rule** ([`judge`]). A send step's network time runs from the moment NCCL's proxy
//! hands it to the network (its data ready, its peer with room) to the moment the network
//! says it is done; a rank starved by a slow neighbour waits *before* that (in NCCL's
//! `SendGPUWait`), not in it. So a connection's send time per byte is its own: a slow NIC
//! makes the sends that cross it slow, and no other. Per communicator, each ordered pair of
//! ranks (sender, receiver), its channels summed, gets its send time per byte; the reference
//! is the lower quartile over the pairs (a quarter of the pairs or more may be slow and
//! still leave it healthy); a pair at [`SLOW_FACTOR`] times the reference or more is slow.
//! The slow pairs' common endpoint is what is named:
//! - a rank in every slow pair, and every one of its pairs slow: that rank's node and NIC
//!   (a NIC slow both ways shows as the rank's sends and receives, one way as its sends);
//! - else each slow pair, with both ends, as a connection: one slow pair alone cannot say
//!   which end of it is slow.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A pair at this many times the communicator's reference send time per byte is slow.
pub const SLOW_FACTOR: f64 = 3.0;
/// The fewest bytes a pair must have sent in the window to be judged.
pub const MIN_PAIR_BYTES: u64 = 1 << 20;
/// The fewest judged pairs a communicator needs for a reference.
pub const MIN_PAIRS: usize = 3;
/// The most lines of one file that are kept (the newest).
pub const MAX_LINES_PER_FILE: usize = 20_000;

/// One line of a `.links` file, as the profiler writes it.
#[derive(Debug, Clone, Deserialize)]
pub struct Line {
    pub v: u32,
    pub ts_us: u64,
    pub host: String,
    pub pid: u32,
    /// The NIC the rank was given (the profiler reads its environment), where one is named.
    #[serde(default)]
    pub nic: Option<String>,
    pub comm: String,
    #[serde(default)]
    pub name: String,
    pub rank: i32,
    pub nranks: i32,
    #[serde(default)]
    pub nnodes: i32,
    /// `[peer, channel, "s"|"r", ops, steps, bytes, net_ns]`.
    pub links: Vec<(i32, u8, String, u64, u64, u64, u64)>,
    #[serde(default)]
    pub left_out: usize,
}

/// Reads a `.links` file's lines: the newest [`MAX_LINES_PER_FILE`], each a JSON object;
/// a line that is not one (cut by a write in progress, or not the profiler's) is counted.
pub fn parse(bytes: &[u8]) -> (Vec<Line>, usize) {
    let mut lines = Vec::new();
    let mut bad = 0;
    for raw in bytes.split(|&b| b == b'\n') {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Line>(raw) {
            Ok(line) if line.v == 1 => lines.push(line),
            _ => bad += 1,
        }
    }
    if lines.len() > MAX_LINES_PER_FILE {
        lines.drain(..lines.len() - MAX_LINES_PER_FILE);
    }
    (lines, bad)
}

/// One connection's traffic in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkDelta {
    pub peer: i32,
    pub channel: u8,
    pub send: bool,
    pub ops: u64,
    pub bytes: u64,
    pub net_ns: u64,
}

/// One rank's connections over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankLinks {
    pub host: String,
    pub pid: u32,
    pub comm: String,
    pub rank: i32,
    pub nranks: i32,
    /// The span of the two lines differenced, microseconds since the epoch.
    pub from_us: u64,
    pub to_us: u64,
    /// The NIC the rank's NCCL was given, where its line says.
    #[serde(default)]
    pub nic: Option<String>,
    pub links: Vec<LinkDelta>,
}

/// Each (host, pid, communicator)'s traffic over `window`: its newest line less its last
/// line at least `window` older (or, where the communicator is younger, its whole life).
pub fn windowed(lines: &[Line], window_us: u64) -> Vec<RankLinks> {
    let mut by: BTreeMap<(&str, u32, &str), Vec<&Line>> = BTreeMap::new();
    for l in lines {
        by.entry((l.host.as_str(), l.pid, l.comm.as_str()))
            .or_default()
            .push(l);
    }
    let mut out = Vec::new();
    for ((host, pid, comm), mut ls) in by {
        ls.sort_by_key(|l| l.ts_us);
        let Some(newest) = ls.last() else { continue };
        let from = newest.ts_us.saturating_sub(window_us);
        let base = ls.iter().rev().find(|l| l.ts_us <= from);
        let totals = |l: &Line| -> BTreeMap<(i32, u8, bool), (u64, u64, u64)> {
            l.links
                .iter()
                .map(|(peer, ch, dir, ops, _steps, bytes, ns)| {
                    ((*peer, *ch, dir == "s"), (*ops, *bytes, *ns))
                })
                .collect()
        };
        let before = base.map(|b| totals(b)).unwrap_or_default();
        let links = totals(newest)
            .into_iter()
            .filter_map(|(k, (ops, bytes, ns))| {
                let (o0, b0, n0) = before.get(&k).copied().unwrap_or_default();
                let d = LinkDelta {
                    peer: k.0,
                    channel: k.1,
                    send: k.2,
                    ops: ops.saturating_sub(o0),
                    bytes: bytes.saturating_sub(b0),
                    net_ns: ns.saturating_sub(n0),
                };
                (d.ops > 0).then_some(d)
            })
            .collect();
        out.push(RankLinks {
            host: host.to_string(),
            pid,
            comm: comm.to_string(),
            rank: newest.rank,
            nranks: newest.nranks,
            from_us: base.map_or(ls[0].ts_us, |b| b.ts_us),
            to_us: newest.ts_us,
            nic: newest.nic.clone(),
            links,
        });
    }
    out
}

/// One ordered pair of ranks in the window, its channels summed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pair {
    pub from: i32,
    pub to: i32,
    /// The sender's and the receiver's host, where their lines were read.
    pub from_host: Option<String>,
    pub to_host: Option<String>,
    pub bytes: u64,
    pub net_ns: u64,
    /// Nanoseconds on the network per KiB sent.
    pub ns_per_kib: f64,
    /// How many times the communicator's reference.
    pub times_reference: f64,
}

/// What the connections of one communicator say.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Connections {
    pub comm: String,
    /// Every judged pair, slowest first.
    pub pairs: Vec<Pair>,
    /// The reference send time, ns per KiB (the lower quartile over the pairs).
    pub reference_ns_per_kib: f64,
    /// The slow pairs' common endpoint, where there is one.
    pub culprit: Option<Culprit>,
    /// The slow pairs, where no single endpoint explains them.
    pub slow_pairs: Vec<Pair>,
    /// Why nothing could be judged (too few pairs or bytes), where so.
    pub unjudged: Option<String>,
    /// Where every slow pair is a send into one rank that the Inspector names late: those
    /// pairs, taken out of `culprit` and `slow_pairs` ([`excuse_late_ranks`]).
    pub waits_on_late: Option<WaitsOnLate>,
}

/// Sends slow only because their receiver is late.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitsOnLate {
    /// The late rank (the Inspector's LATE verdict).
    pub rank: i32,
    /// The sends into it at [`SLOW_FACTOR`] times the reference or more.
    pub pairs: Vec<Pair>,
}

/// Whether the profiler's communicator id and the Inspector's hash name one communicator:
/// the same value, or the Inspector's the profiler's shifted right by 8 bits (NCCL 2.28.9
/// on the lent H100: the Inspector printed `0xd33e1183e00d4e` where the profiler was given
/// `0xd33e1183e00d4edb`, and likewise in the second job of call B).
pub fn same_communicator(profiler: &str, inspector: &str) -> bool {
    let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok();
    match (hex(profiler), hex(inspector)) {
        (Some(p), Some(i)) => p == i || p >> 8 == i,
        _ => false,
    }
}

/// A rank that starts its collectives late holds up the sends into it: its peers' data
/// sits in the network until it takes it (call B, rank 2 late by 50 ms: the sends into it
/// at 2.6x the reference, near the 3x rule). Where every slow pair of a communicator is a
/// send into a rank that `late` names for the same communicator (the Inspector's hash and
/// the rank), those pairs are moved into [`Connections::waits_on_late`]: the late rank is
/// the finding, not the network. A late rank whose own sends are slow too is not excused.
pub fn excuse_late_ranks(connections: &mut [Connections], late: &[(&str, i32)]) {
    for c in connections.iter_mut() {
        if c.culprit.is_none() && c.slow_pairs.is_empty() {
            continue;
        }
        let slow: Vec<Pair> = c
            .pairs
            .iter()
            .filter(|p| p.times_reference >= SLOW_FACTOR)
            .cloned()
            .collect();
        let Some(rank) = late
            .iter()
            .filter(|(comm, _)| same_communicator(&c.comm, comm))
            .map(|(_, rank)| *rank)
            .find(|rank| !slow.is_empty() && slow.iter().all(|p| p.to == *rank))
        else {
            continue;
        };
        c.culprit = None;
        c.slow_pairs.clear();
        c.waits_on_late = Some(WaitsOnLate { rank, pairs: slow });
    }
}

/// The rank, node and NIC that the slow connections have in common.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Culprit {
    pub rank: i32,
    pub host: String,
    pub nic: Option<String>,
    /// Its sends slow, its receives slow, or both.
    pub sends_slow: bool,
    pub receives_slow: bool,
    /// How many times the reference its slow pairs ran at (the smallest of them).
    pub times_reference: f64,
}

/// Judges each communicator's connections (module doc: the rule).
pub fn judge(ranks: &[RankLinks]) -> Vec<Connections> {
    let mut by_comm: BTreeMap<&str, Vec<&RankLinks>> = BTreeMap::new();
    for r in ranks {
        by_comm.entry(r.comm.as_str()).or_default().push(r);
    }
    by_comm
        .into_iter()
        .map(|(comm, rs)| judge_comm(comm, &rs))
        .collect()
}

fn judge_comm(comm: &str, ranks: &[&RankLinks]) -> Connections {
    let mut sums: BTreeMap<(i32, i32), (u64, u64)> = BTreeMap::new();
    for r in ranks {
        for l in r.links.iter().filter(|l| l.send && l.peer != r.rank) {
            let e = sums.entry((r.rank, l.peer)).or_default();
            e.0 = e.0.saturating_add(l.bytes);
            e.1 = e.1.saturating_add(l.net_ns);
        }
    }
    let mut pairs: Vec<Pair> = sums
        .into_iter()
        .filter(|(_, (bytes, _))| *bytes >= MIN_PAIR_BYTES)
        .map(|((from, to), (bytes, net_ns))| Pair {
            from,
            to,
            from_host: host_of(ranks, from),
            to_host: host_of(ranks, to),
            bytes,
            net_ns,
            ns_per_kib: net_ns as f64 * 1024.0 / bytes as f64,
            times_reference: 0.0,
        })
        .collect();
    let mut out = Connections {
        comm: comm.to_string(),
        pairs: Vec::new(),
        reference_ns_per_kib: 0.0,
        culprit: None,
        slow_pairs: Vec::new(),
        unjudged: None,
        waits_on_late: None,
    };
    if pairs.len() < MIN_PAIRS {
        out.unjudged = Some(format!(
            "{} pair(s) of ranks sent {} MiB or more in the window; {MIN_PAIRS} are needed to compare",
            pairs.len(),
            MIN_PAIR_BYTES >> 20
        ));
        out.pairs = pairs;
        return out;
    }
    let mut times: Vec<f64> = pairs.iter().map(|p| p.ns_per_kib).collect();
    times.sort_by(f64::total_cmp);
    let reference = times[(times.len() - 1) / 4].max(f64::MIN_POSITIVE);
    for p in &mut pairs {
        p.times_reference = p.ns_per_kib / reference;
    }
    pairs.sort_by(|a, b| b.times_reference.total_cmp(&a.times_reference));
    out.reference_ns_per_kib = reference;
    let slow: Vec<Pair> = pairs
        .iter()
        .filter(|p| p.times_reference >= SLOW_FACTOR)
        .cloned()
        .collect();
    out.pairs = pairs;
    if slow.is_empty() {
        return out;
    }
    out.culprit = common_endpoint(&slow, &out.pairs, ranks);
    if out.culprit.is_none() {
        out.slow_pairs = slow;
    }
    out
}

fn host_of(ranks: &[&RankLinks], rank: i32) -> Option<String> {
    ranks
        .iter()
        .find(|r| r.rank == rank)
        .map(|r| r.host.clone())
}

/// The rank in every slow pair whose judged pairs are all slow; with two such ranks (one
/// slow pair between them alone), none.
fn common_endpoint(slow: &[Pair], all: &[Pair], ranks: &[&RankLinks]) -> Option<Culprit> {
    let candidates: Vec<i32> = {
        let first = &slow[0];
        [first.from, first.to]
            .into_iter()
            .filter(|r| slow.iter().all(|p| p.from == *r || p.to == *r))
            .filter(|r| {
                all.iter()
                    .filter(|p| p.from == *r || p.to == *r)
                    .all(|p| p.times_reference >= SLOW_FACTOR)
            })
            .collect()
    };
    let [rank] = candidates[..] else {
        return None;
    };
    // The candidate is in every slow pair: they are all its own.
    let who = ranks.iter().find(|r| r.rank == rank);
    Some(Culprit {
        rank,
        host: who.map_or_else(|| "?".to_string(), |r| r.host.clone()),
        nic: who.and_then(|r| r.nic.clone()),
        sends_slow: slow.iter().any(|p| p.from == rank),
        receives_slow: slow.iter().any(|p| p.to == rank),
        times_reference: slow
            .iter()
            .map(|p| p.times_reference)
            .fold(f64::INFINITY, f64::min),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(r: i32, host: &str, sends: &[(i32, u64, u64)]) -> RankLinks {
        RankLinks {
            host: host.into(),
            pid: 1,
            comm: "0x1".into(),
            rank: r,
            nranks: 4,
            from_us: 0,
            to_us: 10,
            nic: Some("eth1".into()),
            links: sends
                .iter()
                .map(|&(peer, bytes, net_ns)| LinkDelta {
                    peer,
                    channel: 0,
                    send: true,
                    ops: 1,
                    bytes,
                    net_ns,
                })
                .collect(),
        }
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_nic_slow_both_ways_is_the_rank_common_to_its_two_slow_connections() {
        // A ring 0 -> 1 -> 2 -> 3 -> 0; node3 (rank 2) slow both ways: 1->2 and 2->3 slow.
        let ranks = [
            rank(0, "node1", &[(1, 64 * MIB, 10_000_000)]),
            rank(1, "node2", &[(2, 64 * MIB, 80_000_000)]),
            rank(2, "node3", &[(3, 64 * MIB, 90_000_000)]),
            rank(3, "node4", &[(0, 64 * MIB, 11_000_000)]),
        ];
        let c = &judge(&ranks)[0];
        let culprit = c.culprit.as_ref().unwrap();
        assert_eq!((culprit.rank, culprit.host.as_str()), (2, "node3"));
        assert!(culprit.sends_slow && culprit.receives_slow);
        assert!(culprit.times_reference > 7.0);
    }

    /// Rank 2 late: the send into it (1 -> 2) over 3x, its own send (2 -> 3) healthy. With
    /// the Inspector's LATE for rank 2 in the same communicator it is no slow connection;
    /// for another communicator, or another rank, it stays one.
    #[test]
    fn the_sends_into_a_late_rank_are_its_lateness_not_a_slow_connection() {
        let ranks = [
            rank(0, "node1", &[(1, 64 * MIB, 10_000_000)]),
            rank(1, "node2", &[(2, 64 * MIB, 40_000_000)]),
            rank(2, "node3", &[(3, 64 * MIB, 10_500_000)]),
            rank(3, "node4", &[(0, 64 * MIB, 11_000_000)]),
        ];
        let judged = judge(&ranks);
        assert_eq!(judged[0].slow_pairs.len(), 1);
        for other in [[("0x2", 2)], [("0x1", 3)]] {
            let mut c = judged.clone();
            excuse_late_ranks(&mut c, &other);
            assert_eq!(c, judged, "{other:?}");
        }
        let mut c = judged.clone();
        excuse_late_ranks(&mut c, &[("0x1", 2)]);
        assert!(c[0].slow_pairs.is_empty() && c[0].culprit.is_none());
        let w = c[0].waits_on_late.as_ref().unwrap();
        assert_eq!((w.rank, w.pairs.len(), w.pairs[0].from), (2, 1, 1));
        let text = crate::watch::text::connections_text(&c[0]);
        assert!(
            text.starts_with("connections healthy: the sends into rank 2 on node3 (from rank 1 on node2 at 4.0x) are slow only because it starts"),
            "{text}"
        );

        // A late rank whose own sends are slow as well is not excused: its NIC may be slow.
        let ranks = [
            rank(0, "node1", &[(1, 64 * MIB, 10_000_000)]),
            rank(1, "node2", &[(2, 64 * MIB, 40_000_000)]),
            rank(2, "node3", &[(3, 64 * MIB, 40_500_000)]),
            rank(3, "node4", &[(0, 64 * MIB, 11_000_000)]),
        ];
        let judged = judge(&ranks);
        assert!(judged[0].culprit.is_some());
        let mut c = judged.clone();
        excuse_late_ranks(&mut c, &[("0x1", 2)]);
        assert_eq!(c, judged);
    }

    #[test]
    fn the_inspectors_hash_is_the_profilers_id_without_its_last_byte() {
        // Call B on the lent H100 (NCCL 2.28.9), both jobs.
        assert!(same_communicator("0xd33e1183e00d4edb", "0xd33e1183e00d4e"));
        assert!(same_communicator("0x74a7624c086dcdf4", "0x74a7624c086dcd"));
        assert!(same_communicator("0x1", "0x1"));
        assert!(!same_communicator("0xd33e1183e00d4edb", "0xd33e1183e00d4f"));
        assert!(!same_communicator("0xd33e1183e00d4edb", "not hex"));
    }

    #[test]
    fn one_slow_connection_alone_is_named_as_a_connection_not_as_one_of_its_ends() {
        let ranks = [
            rank(0, "node1", &[(1, 64 * MIB, 10_000_000)]),
            rank(1, "node2", &[(2, 64 * MIB, 10_500_000)]),
            rank(2, "node3", &[(3, 64 * MIB, 90_000_000)]),
            rank(3, "node4", &[(0, 64 * MIB, 11_000_000)]),
        ];
        let c = &judge(&ranks)[0];
        assert!(c.culprit.is_none());
        assert_eq!(
            c.slow_pairs
                .iter()
                .map(|p| (p.from, p.to))
                .collect::<Vec<_>>(),
            vec![(2, 3)]
        );
    }

    #[test]
    fn a_rank_whose_every_send_is_slow_to_several_peers_is_named_by_its_sends() {
        // Rank 2 sends to 0, 1 and 3 (a tree or an all-to-all): all slow; the others fast.
        let ranks = [
            rank(
                0,
                "node1",
                &[(1, 8 * MIB, 1_000_000), (3, 8 * MIB, 1_100_000)],
            ),
            rank(
                1,
                "node2",
                &[(0, 8 * MIB, 1_000_000), (3, 8 * MIB, 900_000)],
            ),
            rank(
                2,
                "node3",
                &[
                    (0, 8 * MIB, 9_000_000),
                    (1, 8 * MIB, 9_500_000),
                    (3, 8 * MIB, 8_000_000),
                ],
            ),
            rank(3, "node4", &[(0, 8 * MIB, 1_000_000)]),
        ];
        let culprit = judge(&ranks)[0].culprit.clone().unwrap();
        assert_eq!(culprit.rank, 2);
        assert!(culprit.sends_slow && !culprit.receives_slow);
    }

    #[test]
    fn healthy_connections_and_too_little_traffic_say_so() {
        let ranks = [
            rank(0, "node1", &[(1, 64 * MIB, 10_000_000)]),
            rank(1, "node2", &[(2, 64 * MIB, 12_000_000)]),
            rank(2, "node3", &[(3, 64 * MIB, 14_000_000)]),
            rank(3, "node4", &[(0, 64 * MIB, 11_000_000)]),
        ];
        let c = &judge(&ranks)[0];
        assert!(c.culprit.is_none() && c.slow_pairs.is_empty() && c.unjudged.is_none());
        assert_eq!(c.pairs.len(), 4);
        let few = [rank(0, "node1", &[(1, MIB / 2, 10)])];
        assert!(judge(&few)[0]
            .unjudged
            .as_deref()
            .unwrap()
            .contains("0 pair(s)"));
    }

    #[test]
    fn the_window_is_the_newest_line_less_the_last_one_a_window_older() {
        let text = concat!(
            "{\"v\":1,\"ts_us\":1000000,\"host\":\"node3\",\"pid\":7,\"comm\":\"0x1\",\"name\":\"\",\"rank\":2,\"nranks\":4,\"nnodes\":4,\"links\":[[3,0,\"s\",1,8,100,50]],\"left_out\":0}\n",
            "{\"v\":1,\"ts_us\":5000000,\"host\":\"node3\",\"pid\":7,\"comm\":\"0x1\",\"name\":\"\",\"rank\":2,\"nranks\":4,\"nnodes\":4,\"links\":[[3,0,\"s\",5,40,900,450],[1,0,\"r\",2,9,70,20]],\"left_out\":0}\n",
            "{\"v\":1,\"ts_us\":9000000,\"host\":\"node3\",\"pid\":7,\"comm\":\"0x1\",\"name\":\"\",\"rank\":2,\"nranks\":4,\"nnodes\":4,\"links\":[[3,0,\"s\",9,72,2900,3450],[1,0,\"r\",2,9,70,20]],\"left_out\":0}\n",
            "{\"v\":1,\"ts_us\":9500000,\"host\":\"node3\",\"pid\":7,\"comm\":\"0x1\",\"rank\":2,\"nranks\":4,\"links\":[[3,0,\"s\",9\n",
            "not json\n",
        );
        let (lines, bad) = parse(text.as_bytes());
        assert_eq!((lines.len(), bad), (3, 2));
        let w = windowed(&lines, 4_000_000);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].from_us, w[0].to_us), (5_000_000, 9_000_000));
        // The receive carried nothing new in the window: left out.
        assert_eq!(
            w[0].links,
            vec![LinkDelta {
                peer: 3,
                channel: 0,
                send: true,
                ops: 4,
                bytes: 2000,
                net_ns: 3000
            }]
        );
        // A window longer than the communicator's life: all of it.
        let all = windowed(&lines, 60_000_000);
        assert_eq!(all[0].links[1].bytes, 2900);
        assert_eq!(all[0].from_us, 1_000_000);
    }
}
