//! NCCL's RAS service (NCCL 2.24 and later): the client, the status it answers, and what a few
//! snapshots taken over a short window say about a hang.
//!
//! Every NCCL process runs a RAS thread that listens on `NCCL_RAS_ADDR` (default
//! `localhost:28028`) and knows, through the RAS network between the job's processes, every
//! communicator's ranks: host, pid, state and the count of collectives each issued. The
//! protocol is text over TCP, measured on the lent H200 (DESIGN.md, "Measured here"):
//!
//! ```text
//! client: CLIENT PROTOCOL 2        server: SERVER PROTOCOL 2
//! client: SET FORMAT json          server: OK
//! client: STATUS                   server: { ...one JSON document... }, then it closes
//! ```
//!
//! A hang shows as counts that stop moving: the rank whose count is lower than the others'
//! and does not move is the one they wait for (it is stuck outside NCCL, in host code or a
//! data loader, or on its GPU); when every rank has the same count and none moves, they all
//! wait inside one collective, which is a fabric or GPU stall.
//!
//! Bad answers are errors, never a hang: every connection has a deadline, reads are bounded
//! ([`MAX_ANSWER_BYTES`]), and an unknown protocol version or an answer that is not the
//! documented JSON is named. The answer's parser is `nccl_output::ras` (pure, fuzzed).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde::Serialize;

pub use crate::nccl_output::ras::{
    parse_answer, Communicator, MissingRank, Rank, RankStatus, Status, PROTOCOL,
};

/// NCCL's default RAS port (`NCCL_RAS_ADDR` unset).
pub const DEFAULT_PORT: u16 = 28028;
/// The largest answer read: a status of 4,096 ranks is about 2 MB.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// What went wrong talking to a RAS server, with the address and the fix.
#[derive(Debug, thiserror::Error)]
pub enum RasError {
    /// Nothing listens there.
    #[error("{addr}: no NCCL RAS answers ({source}): the job's NCCL is older than 2.24, RAS is off (NCCL_RAS_ENABLE=0), the job uses another NCCL_RAS_ADDR, or no NCCL process runs on this node")]
    Connect {
        /// The address tried.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The server did not answer in time.
    #[error("{addr}: the RAS server did not answer within {seconds:.1} s ({during}): the process may be stopped (SIGSTOP) or the node overloaded; try again with a longer --timeout")]
    Timeout {
        /// The address.
        addr: SocketAddr,
        /// What the client waited for.
        during: &'static str,
        /// The deadline.
        seconds: f64,
    },
    /// More than the limit ([`MAX_ANSWER_BYTES`], or what is left of a budget).
    #[error("{addr}: the RAS answer is larger than {limit} bytes: not read further")]
    TooLarge {
        /// The address.
        addr: SocketAddr,
        /// The limit.
        limit: usize,
    },
    /// An answer that is not the protocol's.
    #[error("{addr}: not an NCCL RAS answer: {problem}")]
    Protocol {
        /// The address.
        addr: SocketAddr,
        /// What was wrong.
        problem: String,
    },
    /// A reading or writing error after the connection was made.
    #[error("{addr}: {source}")]
    Io {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// Asks the RAS server at `addr` for its status, within `timeout` for the whole exchange.
pub fn query(addr: SocketAddr, timeout: Duration) -> Result<Status, RasError> {
    query_at_most(addr, timeout, MAX_ANSWER_BYTES).map(|(status, _)| status)
}

/// [`query`], reading at most `limit` bytes of answer ([`RasError::TooLarge`] past it);
/// also returns how many bytes the answer had.
pub fn query_at_most(
    addr: SocketAddr,
    timeout: Duration,
    limit: usize,
) -> Result<(Status, usize), RasError> {
    let start = Instant::now();
    let seconds = timeout.as_secs_f64();
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|source| {
        if source.kind() == std::io::ErrorKind::TimedOut {
            RasError::Timeout {
                addr,
                during: "connecting",
                seconds,
            }
        } else {
            RasError::Connect { addr, source }
        }
    })?;
    let io = |source: std::io::Error| RasError::Io { addr, source };
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    // Every command at once: the server answers them in order (measured).
    stream
        .write_all(format!("CLIENT PROTOCOL {PROTOCOL}\nSET FORMAT json\nSTATUS\n").as_bytes())
        .map_err(io)?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            // A server that sent a whole document but keeps the connection open is fine.
            if let Ok(status) = parse_answer(&String::from_utf8_lossy(&answer)) {
                return Ok((status, answer.len()));
            }
            return Err(RasError::Timeout {
                addr,
                during: "reading the status",
                seconds,
            });
        }
        stream.set_read_timeout(Some(left)).map_err(io)?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if answer.len() + n > limit {
                    return Err(RasError::TooLarge { addr, limit });
                }
                answer.extend_from_slice(&buf[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        }
    }
    let read = answer.len();
    let text = String::from_utf8(answer).map_err(|e| RasError::Protocol {
        addr,
        problem: format!("not text (byte {})", e.utf8_error().valid_up_to()),
    })?;
    parse_answer(&text)
        .map(|status| (status, read))
        .map_err(|problem| RasError::Protocol { addr, problem })
}

/// Where a rank runs in Slurm's terms: its node, and its task when the pid is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Place {
    /// The Slurm node whose address is the rank's host.
    pub node: Option<String>,
    /// The step's task id (`SLURM_PROCID`) of the rank's process.
    pub task: Option<u32>,
}

/// Maps RAS's (host IP, pid) to Slurm's node and task.
pub trait Locate {
    /// The place of the process `pid` on `host`.
    fn locate(&self, host: &str, pid: u32) -> Place;
}

/// A table: node by address, task by (node, pid).
#[derive(Debug, Clone, Default)]
pub struct PlaceTable {
    /// Node names by IP address (every address of every node of the job).
    pub nodes: BTreeMap<String, String>,
    /// Task ids by (node, pid).
    pub tasks: BTreeMap<(String, u32), u32>,
}

impl Locate for PlaceTable {
    fn locate(&self, host: &str, pid: u32) -> Place {
        let node = self.nodes.get(host).cloned();
        let task = node
            .as_ref()
            .and_then(|n| self.tasks.get(&(n.clone(), pid)).copied());
        Place { node, task }
    }
}

/// One status answer taken at `at` seconds into the watch.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Seconds since the first snapshot.
    pub at: f64,
    /// The answer.
    pub status: Status,
}

/// What the snapshots say about one communicator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommunicatorReport {
    /// Its hash.
    pub hash: String,
    /// Its size.
    pub size: u32,
    /// Ranks RAS reached in the last snapshot.
    pub ranks_seen: u32,
    /// Ranks it could not reach, with their place when known.
    pub missing: Vec<RankPlace>,
    /// Ranks that report an asynchronous error or an abort.
    pub errors: Vec<RankError>,
    /// Collectives issued, by type: the lowest and highest count over the ranks.
    pub counts: BTreeMap<String, (u64, u64)>,
    /// Ranks behind the others in the last snapshot, lowest first.
    pub laggards: Vec<Laggard>,
    /// Whether any rank's count moved between the first and the last snapshot.
    pub moving: bool,
    /// Seconds between the first and the last snapshot.
    pub window: f64,
    /// The verdict, in words.
    pub verdict: Verdict,
    /// The verdict as a sentence for the user.
    pub message: String,
}

/// A rank and where it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankPlace {
    /// Its rank.
    pub rank: Option<u32>,
    /// Its host (IP) as RAS gives it.
    pub host: Option<String>,
    /// Its pid.
    pub pid: Option<u32>,
    /// Its Slurm node and task.
    pub place: Place,
}

/// A rank in error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankError {
    /// The rank and its place.
    pub who: RankPlace,
    /// What it reports.
    pub problem: String,
}

/// A rank behind the others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Laggard {
    /// The rank and its place.
    pub who: RankPlace,
    /// The collective type it is behind in (NCCL's name), and by how many.
    pub behind_in: String,
    /// How many of that type it is behind the most advanced rank.
    pub behind_by: u64,
    /// Whether its own count moved during the window.
    pub moved: bool,
}

/// The verdict on one communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Counts advance.
    Progressing,
    /// Some ranks are behind and do not move: the others wait for them.
    Laggards,
    /// Every rank has the same counts and none moves.
    AllStalled,
    /// Ranks are missing or in error.
    Broken,
    /// One snapshot only: nothing can say whether counts move.
    Unknown,
}

/// How a rank is named in a sentence: `rank 5 (node3, task 5, pid 1234)`.
fn describe(who: &RankPlace) -> String {
    let mut parts = Vec::new();
    match (&who.place.node, &who.host) {
        (Some(node), _) => parts.push(node.clone()),
        (None, Some(host)) => parts.push(format!("host {host}")),
        (None, None) => {}
    }
    if let Some(task) = who.place.task {
        parts.push(format!("task {task}"));
    }
    if let Some(pid) = who.pid {
        parts.push(format!("pid {pid}"));
    }
    let rank = who
        .rank
        .map_or_else(|| "a rank".to_string(), |r| format!("rank {r}"));
    if parts.is_empty() {
        rank
    } else {
        format!("{rank} ({})", parts.join(", "))
    }
}

/// Judges every communicator seen in the snapshots (first to last). The snapshots of one
/// job, from any of its nodes: RAS answers for the whole communicator from any of them.
pub fn diagnose(snapshots: &[Snapshot], locate: &dyn Locate) -> Vec<CommunicatorReport> {
    let Some(last) = snapshots.last() else {
        return Vec::new();
    };
    let first = &snapshots[0];
    let window = last.at - first.at;
    let mut hashes: BTreeSet<&str> = BTreeSet::new();
    for s in snapshots {
        for c in &s.status.communicators {
            hashes.insert(&c.hash);
        }
    }
    hashes
        .into_iter()
        .filter_map(|hash| judge_communicator(snapshots, hash, window, locate))
        .collect()
}

/// The communicator `hash` as snapshot `s` saw it.
fn find_communicator(s: &Snapshot, hash: &str) -> Option<Communicator> {
    s.status
        .communicators
        .iter()
        .find(|c| c.hash == hash)
        .cloned()
}

/// Where a rank runs: its node (and task, with a pid) as `locate` finds them.
fn rank_place(
    locate: &dyn Locate,
    rank: Option<u32>,
    host: Option<&str>,
    pid: Option<u32>,
) -> RankPlace {
    RankPlace {
        rank,
        host: host.map(str::to_string),
        pid,
        place: match (host, pid) {
            (Some(h), Some(p)) => locate.locate(h, p),
            (Some(h), None) => Place {
                node: locate.locate(h, 0).node,
                task: None,
            },
            _ => Place {
                node: None,
                task: None,
            },
        },
    }
}

/// One communicator's report, from its last answer and how its counts moved since its
/// first; `None` when no snapshot holds it.
fn judge_communicator(
    snapshots: &[Snapshot],
    hash: &str,
    window: f64,
    locate: &dyn Locate,
) -> Option<CommunicatorReport> {
    let now = snapshots
        .iter()
        .rev()
        .find_map(|s| find_communicator(s, hash))?;
    let before = snapshots.iter().find_map(|s| find_communicator(s, hash));
    let earlier: BTreeMap<u32, u64> = before
        .as_ref()
        .map(|c| c.ranks.iter().map(|r| (r.rank, r.total())).collect())
        .unwrap_or_default();
    let missing: Vec<RankPlace> = now
        .missing_ranks
        .iter()
        .map(|m| rank_place(locate, m.rank, m.host.as_deref(), m.pid))
        .collect();
    let errors = rank_errors(&now, locate);
    let counts = count_spans(&now);
    let moved = |r: &Rank| earlier.get(&r.rank).is_some_and(|&e| r.total() > e);
    let moving = snapshots.len() > 1 && now.ranks.iter().any(moved);
    let mut laggards: Vec<Laggard> = now
        .ranks
        .iter()
        .filter_map(|r| {
            // The first type (in NCCL's order of the answer's keys) where it is behind.
            let (t, by) = counts.iter().find_map(|(t, &(_, hi))| {
                let mine = r.collective_counts.get(t).copied().unwrap_or(0);
                (mine < hi).then(|| (t.clone(), hi - mine))
            })?;
            Some(Laggard {
                who: rank_place(locate, Some(r.rank), Some(&r.host), Some(r.pid)),
                behind_in: t,
                behind_by: by,
                moved: moved(r),
            })
        })
        .collect();
    laggards.sort_by_key(|l| (std::cmp::Reverse(l.behind_by), l.who.rank));
    let mut report = CommunicatorReport {
        hash: hash.to_string(),
        size: now.size,
        ranks_seen: u32::try_from(now.ranks.len()).unwrap_or(u32::MAX),
        missing,
        errors,
        counts,
        laggards,
        moving,
        window,
        // Set below, from the rest of the report.
        verdict: Verdict::Unknown,
        message: String::new(),
    };
    (report.verdict, report.message) = verdict_of(&report, snapshots.len(), &now, locate);
    Some(report)
}

/// The ranks that report an asynchronous NCCL error or an aborted communicator.
fn rank_errors(now: &Communicator, locate: &dyn Locate) -> Vec<RankError> {
    let mut errors = Vec::new();
    for r in &now.ranks {
        let s = &r.status;
        let mut problems = Vec::new();
        if s.async_error != 0 {
            problems.push(format!("asynchronous NCCL error {}", s.async_error));
        }
        if s.abort_flag {
            problems.push("its communicator was aborted".to_string());
        }
        if !problems.is_empty() {
            errors.push(RankError {
                who: rank_place(locate, Some(r.rank), Some(&r.host), Some(r.pid)),
                problem: problems.join(", "),
            });
        }
    }
    errors
}

/// Each collective type's lowest and highest count across the ranks.
fn count_spans(now: &Communicator) -> BTreeMap<String, (u64, u64)> {
    let types: BTreeSet<&String> = now
        .ranks
        .iter()
        .flat_map(|r| r.collective_counts.keys())
        .collect();
    let mut counts = BTreeMap::new();
    for t in types {
        let values = now
            .ranks
            .iter()
            .map(|r| r.collective_counts.get(t).copied().unwrap_or(0));
        let lo = values.clone().min().unwrap_or(0);
        let hi = values.max().unwrap_or(0);
        counts.insert(t.clone(), (lo, hi));
    }
    counts
}

/// The verdict and its message: broken (ranks missing or in error), unknown (one
/// snapshot), laggards (some ranks behind and not moving), all stalled, or progressing.
fn verdict_of(
    report: &CommunicatorReport,
    snapshot_count: usize,
    now: &Communicator,
    locate: &dyn Locate,
) -> (Verdict, String) {
    let CommunicatorReport {
        missing,
        errors,
        counts,
        laggards,
        ..
    } = report;
    let (ranks_seen, moving, window) = (report.ranks_seen, report.moving, report.window);
    let still = |secs: f64| format!("{secs:.0} s");
    if !missing.is_empty() || !errors.is_empty() {
        let mut parts: Vec<String> = missing
            .iter()
            .map(|m| {
                format!(
                    "{} did not answer (its process died or its host is unreachable)",
                    describe(m)
                )
            })
            .collect();
        parts.extend(
            errors
                .iter()
                .map(|e| format!("{} reports {}", describe(&e.who), e.problem)),
        );
        (Verdict::Broken, parts.join("; "))
    } else if snapshot_count < 2 {
        (
            Verdict::Unknown,
            "one snapshot only: poll again to tell slow from stuck".to_string(),
        )
    } else if !laggards.is_empty() && laggards.iter().all(|l| !l.moved) {
        let others = ranks_seen.saturating_sub(u32::try_from(laggards.len()).unwrap_or(0));
        let named: Vec<String> = laggards
            .iter()
            .take(8)
            .map(|l| {
                format!(
                    "{} is {} {} behind",
                    describe(&l.who),
                    l.behind_by,
                    l.behind_in
                )
            })
            .collect();
        let more = laggards.len().saturating_sub(8);
        let more = if more > 0 {
            format!(" (and {more} more)")
        } else {
            String::new()
        };
        let message = if laggards.len() == 1 {
            format!(
                "{}{more} the other {others} and has not moved in {}: it is stuck outside NCCL \
                 (host code, data loader) or on its GPU",
                named.join("; "),
                still(window)
            )
        } else {
            // Said of every rank named, not only of the last one in the list.
            format!(
                "{}{more}: these {} ranks are behind the other {others} and none of them has \
                 moved in {}: each is stuck outside NCCL (host code, data loader) or on its GPU",
                named.join("; "),
                laggards.len(),
                still(window)
            )
        };
        (Verdict::Laggards, message)
    } else if !moving {
        let (kind, count) = counts
            .iter()
            .max_by_key(|(_, &(_, hi))| hi)
            .map_or(("collective".to_string(), 0), |(t, &(_, hi))| {
                (t.clone(), hi)
            });
        let hosts: BTreeSet<String> = now
            .ranks
            .iter()
            .map(|r| {
                locate
                    .locate(&r.host, r.pid)
                    .node
                    .unwrap_or_else(|| r.host.clone())
            })
            .collect();
        let hosts: Vec<String> = hosts.into_iter().collect();
        (
            Verdict::AllStalled,
            format!(
                "all {ranks_seen} ranks are inside {kind} #{} and none moved in {}: a fabric or \
                 GPU stall: run `gpudirect health` on {}",
                count + 1,
                still(window),
                gpudirect_core::hostlist::compress(&hosts)
            ),
        )
    } else {
        (
            Verdict::Progressing,
            format!("no hang: counts advance (over {})", still(window)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/../tests/fixtures/nccl-ras/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(path).unwrap()
    }

    fn table() -> PlaceTable {
        let mut t = PlaceTable::default();
        t.nodes.insert("10.9.1.1".into(), "node1".into());
        t.nodes.insert("10.9.1.2".into(), "node2".into());
        t.tasks.insert(("node1".into(), 1559), 0);
        t.tasks.insert(("node2".into(), 1560), 1);
        t
    }

    /// The stalled recording, taken twice 10 s apart with nothing moved: rank 1 is named with
    /// its node, task and pid.
    #[test]
    fn a_rank_behind_that_does_not_move_is_named() {
        let s = parse_answer(&fixture("status-json-rank1-stalled.txt")).unwrap();
        let snaps = [
            Snapshot {
                at: 0.0,
                status: s.clone(),
            },
            Snapshot {
                at: 10.0,
                status: s,
            },
        ];
        let r = &diagnose(&snaps, &table())[0];
        assert_eq!(r.verdict, Verdict::Laggards);
        assert_eq!(
            r.message,
            "rank 1 (node2, task 1, pid 1560) is 1 AllReduce behind the other 1 and has not \
             moved in 10 s: it is stuck outside NCCL (host code, data loader) or on its GPU"
        );
        assert_eq!(r.counts["AllReduce"], (8, 9));
    }

    /// Two ranks behind and still (the recorded stalled answer with two more ranks on node1,
    /// one of them behind): the sentence says of both that they did not move, not only of
    /// the last one named.
    #[test]
    fn two_ranks_behind_are_each_said_to_be_still() {
        let mut s = parse_answer(&fixture("status-json-rank1-stalled.txt")).unwrap();
        let comm = &mut s.communicators[0];
        let mut r2 = comm.ranks[0].clone();
        r2.rank = 2;
        r2.pid = 1561;
        let mut r3 = comm.ranks[1].clone();
        r3.rank = 3;
        r3.pid = 1562;
        r3.host = comm.ranks[0].host.clone();
        comm.ranks.extend([r2, r3]);
        comm.size = 4;
        let mut t = table();
        t.tasks.insert(("node1".into(), 1561), 2);
        t.tasks.insert(("node1".into(), 1562), 3);
        let snaps = [
            Snapshot {
                at: 0.0,
                status: s.clone(),
            },
            Snapshot {
                at: 10.0,
                status: s,
            },
        ];
        let r = &diagnose(&snaps, &t)[0];
        assert_eq!(r.verdict, Verdict::Laggards);
        assert_eq!(
            r.message,
            "rank 1 (node2, task 1, pid 1560) is 1 AllReduce behind; rank 3 (node1, task 3, pid \
             1562) is 1 AllReduce behind: these 2 ranks are behind the other 2 and none of them \
             has moved in 10 s: each is stuck outside NCCL (host code, data loader) or on its GPU"
        );
    }

    #[test]
    fn counts_that_advance_are_no_hang_and_equal_still_counts_are_a_stall() {
        let s = parse_answer(&fixture("status-json-rank1-stalled.txt")).unwrap();
        let mut later = s.clone();
        for r in &mut later.communicators[0].ranks {
            *r.collective_counts.get_mut("AllReduce").unwrap() += 5;
        }
        let snaps = [
            Snapshot {
                at: 0.0,
                status: s.clone(),
            },
            Snapshot {
                at: 3.0,
                status: later,
            },
        ];
        let r = &diagnose(&snaps, &table())[0];
        assert_eq!(r.verdict, Verdict::Progressing);
        assert_eq!(r.message, "no hang: counts advance (over 3 s)");

        let mut equal = s;
        for r in &mut equal.communicators[0].ranks {
            r.collective_counts.insert("AllReduce".into(), 9);
        }
        let snaps = [
            Snapshot {
                at: 0.0,
                status: equal.clone(),
            },
            Snapshot {
                at: 10.0,
                status: equal,
            },
        ];
        let r = &diagnose(&snaps, &table())[0];
        assert_eq!(r.verdict, Verdict::AllStalled);
        assert_eq!(
            r.message,
            "all 2 ranks are inside AllReduce #10 and none moved in 10 s: a fabric or GPU \
             stall: run `gpudirect health` on node[1-2]"
        );
    }

    #[test]
    fn missing_ranks_and_errors_are_broken() {
        let mut s = parse_answer(&fixture("status-json-healthy.txt")).unwrap();
        s.communicators[0].missing_ranks.push(MissingRank {
            rank: Some(1),
            host: Some("10.9.1.2".into()),
            pid: None,
        });
        s.communicators[0].ranks[0].status.async_error = 6;
        let snaps = [Snapshot { at: 0.0, status: s }];
        let r = &diagnose(&snaps, &table())[0];
        assert_eq!(r.verdict, Verdict::Broken);
        assert!(
            r.message.contains("rank 1 (node2) did not answer")
                && r.message.contains("reports asynchronous NCCL error 6"),
            "{}",
            r.message
        );
    }

    /// A real socket: a closed port, a server that never answers, one that sends too much,
    /// and one that replays a recorded answer.
    #[test]
    fn the_client_is_bounded_in_time_and_size() {
        use std::net::TcpListener;
        // Port 1 (tcpmux) has no listener on any machine this runs on; a port freed by
        // a dropped listener may be taken by another test's meanwhile.
        let closed: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let e = query(closed, Duration::from_secs(2)).unwrap_err();
        assert!(matches!(e, RasError::Connect { .. }), "{e}");
        assert!(e.to_string().contains("NCCL_RAS_ADDR"), "{e}");

        let serve = |reply: Vec<u8>, hold: Duration| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            std::thread::spawn(move || {
                if let Ok((mut s, _)) = l.accept() {
                    // Read the client's three commands first, as NCCL does: unread bytes
                    // at close would reset the connection.
                    let mut got = Vec::new();
                    let mut buf = [0u8; 256];
                    while got.iter().filter(|&&b| b == b'\n').count() < 3 {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = s.write_all(&reply);
                    std::thread::sleep(hold);
                }
            });
            addr
        };
        let silent = serve(Vec::new(), Duration::from_secs(3));
        let t0 = Instant::now();
        let e = query(silent, Duration::from_millis(500)).unwrap_err();
        assert!(matches!(e, RasError::Timeout { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(2));

        let huge = serve(vec![b'x'; MAX_ANSWER_BYTES + 70_000], Duration::ZERO);
        let e = query(huge, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, RasError::TooLarge { .. }), "{e}");

        let recorded = fixture("status-json-rank1-stalled.txt").into_bytes();
        let good = serve(recorded.clone(), Duration::ZERO);
        let s = query(good, Duration::from_secs(5)).unwrap();
        assert_eq!(s.communicators[0].ranks.len(), 2);
        // A whole document and then silence (no close) is still an answer.
        let open = serve(recorded, Duration::from_secs(5));
        let s = query(open, Duration::from_secs(2)).unwrap();
        assert_eq!(s.communicators[0].size, 2);
    }
}
