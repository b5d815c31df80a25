//! A job's NCCL log, read by communicator: which ranks each communicator had, on which
//! nodes, and the transport and NIC each rank's connections really took.
//!
//! The input is whatever a training job printed with `NCCL_DEBUG=INFO` (or `WARN`): one
//! file for the whole job (srun's, torchrun's) or one per rank, the program's own lines in
//! between, any launcher's tag in front (`[rank3]:`, `3: `, `[1,3]<stdout>:`, timestamps,
//! pod names). It is read line by line ([`JobLogReader::feed`]) in bounded memory
//! ([`Limits`]), so a log of any size costs what its communicators and ranks cost.
//!
//! What NCCL prints that this reads, per process (`host:pid:tid [dev] NCCL INFO ...`):
//!
//! ```text
//! NCCL version 2.28.9+cuda13.0                                  -> versions
//! NET/Socket : Using [0]eth0:10.77.0.1<0> [1]eth1:10.77.1.1<0> -> the NICs by device number
//! Using network Socket                                          -> the net plugin loaded
//! NET/Plugin: Could not find: libnccl-net.so                    -> plugins (net, tuner, ...)
//! NCCL_SOCKET_IFNAME set by environment to eth1                 -> variables
//! ncclCommInitRankConfig comm 0x3bc3 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60
//!     commId 0x470b5de4999c140a - Init START                    -> a rank of communicator 0x470b..
//! comm 0x3bc3 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 -> its nodes, local ranks
//! 4 coll channels, 4 collnet channels, 0 nvls channels, ...    -> channels
//! Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0        -> a link: NET/Socket, device 0 = eth0
//! Connected all rings, use ring PXN 0 GDR 0                     -> GPUDirect RDMA off
//! AllReduce: 268435456 Bytes -> Algo 1 proto 2 time 1234.5      -> algorithm, protocol (TUNING)
//! ```
//!
//! A communicator is named by its `commId`, which every rank prints. NCCL before 2.18 has
//! none: each process's communicators of one size are then matched by their order of
//! creation (its second 8-rank communicator with every other process's second), which is
//! said in [`Communicator::id_from_log`]. A channel line names no communicator: it belongs
//! to the one its process set up last whose size fits its ranks (NCCL connects a
//! communicator's channels during or right after its init, or at its first collective).
//!
//! Trouble is collected with the rank and node it came from: `NCCL WARN` lines, NCCL error
//! codes, timeouts and torch's watchdog, in NCCL's lines and the program's ([`Event`]).
//!
//! Every form of line read, with the NCCL version it comes from, is in [`rules`].

mod lines;
mod prefix;
pub mod rules;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

pub use lines::{for_each_line, for_each_line_within, LineStats, ReadError};
pub use prefix::{
    bare_version, classify_event, error_return, is_placeholder_host, launcher_rank, strip_ansi,
    strip_rank_tag, EventKind,
};

use crate::transport::{
    classify_via, count_tuning, parse_debug_line, parse_nic_line, parse_tuning, split_version,
    TransportClass, TuningChoice,
};

/// What the reader keeps at most, whatever the log's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one line (the rest is skipped).
    pub max_line: usize,
    /// Processes (host and pid).
    pub max_processes: usize,
    /// Communicators.
    pub max_communicators: usize,
    /// Ranks over all communicators.
    pub max_ranks: usize,
    /// Trouble lines kept (all are counted).
    pub max_events: usize,
    /// Bytes of text kept over all processes (host names, variables, plugin notes, NIC
    /// names, paths): past it, what a process says is no longer kept (counted, said).
    pub max_kept_bytes: usize,
    /// Bytes read from one input (after decompression): the rest is not read, and that is
    /// said (security review T7: a gzip bomb costs this much reading, no more).
    pub max_input_bytes: u64,
    /// Lines read from one input at most: the rest is not read, and that is said (a gzip
    /// bomb of empty lines costs a call per line).
    pub max_lines: u64,
}

/// Bytes of a host name kept (a DNS name has at most 253).
const MAX_HOST_BYTES: usize = 255;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: 64 * 1024,
            max_processes: 1 << 17,
            max_communicators: 1 << 14,
            max_ranks: 1 << 20,
            max_events: 2000,
            max_kept_bytes: 64 << 20,
            max_input_bytes: 64 << 30,
            max_lines: 1 << 30,
        }
    }
}

/// A job's log, read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobLog {
    /// Lines read, over all inputs.
    pub lines: u64,
    /// NCCL's own lines among them.
    pub nccl_lines: u64,
    /// The processes that logged NCCL lines, in order of their first line.
    pub processes: Vec<Process>,
    /// The communicators, largest first (then in order of their first line).
    pub communicators: Vec<Communicator>,
    /// Trouble: warnings, errors, timeouts, watchdog lines (the first [`Limits::max_events`]).
    pub events: Vec<Event>,
    /// Trouble lines of each kind, all counted.
    pub event_counts: BTreeMap<String, u64>,
    /// What was not kept because a limit was reached, in words.
    pub dropped: Vec<String>,
}

/// One process that logged NCCL lines (one entry per GPU it drives).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Process {
    /// The host name of its `host:pid:tid` token.
    pub host: Option<String>,
    /// Its pid.
    pub pid: Option<u32>,
    /// The CUDA device of its lines (`[0]`): a process driving several GPUs is one entry
    /// per device.
    pub device: Option<u32>,
    /// The input (0-based, in the order given) its first line came from.
    pub source: usize,
    /// The rank a launcher tagged its lines with (`[rank3]:`, `3: `), if any.
    pub launcher_rank: Option<u32>,
    /// `2.28.9` of `NCCL version 2.28.9+cuda13.0`.
    pub nccl_version: Option<String>,
    /// `13.0` of the same line.
    pub cuda_version: Option<String>,
    /// `cudaDriverVersion 13000`.
    pub cuda_driver: Option<u32>,
    /// `Using network X`: the net plugins it loaded, in order.
    pub networks: Vec<String>,
    /// The SHARP plugin's `SHARP rank R/N initialized on mlx5_4:1` (rule K6): this process
    /// joined a SHARP group of N (the CollNet ranks, one per node) on that device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharp: Option<SharpInit>,
    /// The NICs each network transport said it uses, with their device numbers.
    pub nics: Vec<NicEntry>,
    /// What its plugin loaders said (`NET/Plugin: Could not find: libnccl-net.so`).
    pub plugins: Vec<PluginNote>,
    /// Variables NCCL said were set by the environment.
    pub env: BTreeMap<String, String>,
    /// Its channel lines that no communicator of the log takes: an excerpt that starts
    /// after the init lines, or NCCL before 2.18 printing connections first.
    pub links: Vec<Link>,
}

/// The SHARP plugin's own init line (nccl-rdma-sharp-plugins, `sharp_plugin.c`: `Sharp rank
/// %d/%d initialized on %s` from 2020, `SHARP rank ...` from 2022).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharpInit {
    /// Its rank in the SHARP group.
    pub rank: u32,
    /// The group's size.
    pub size: u32,
    /// The device and port (`mlx5_4:1`).
    pub device: String,
}

/// `SHARP rank 0/4 initialized on mlx5_4:1` (or `Sharp rank ...`) -> its parts.
fn sharp_init(msg: &str) -> Option<SharpInit> {
    let rest = msg
        .strip_prefix("SHARP rank ")
        .or_else(|| msg.strip_prefix("Sharp rank "))?;
    let (ranks, device) = rest.split_once(" initialized on ")?;
    let (rank, size) = ranks.split_once('/')?;
    Some(SharpInit {
        rank: rank.trim().parse().ok()?,
        size: size.trim().parse().ok()?,
        device: clip(device.split_whitespace().next()?, 64),
    })
}

/// One NIC of a `NET/<net> : Using [N]name...` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicEntry {
    /// The transport (`Socket`, `IB`, `GPUDirectTCPX`).
    pub net: String,
    /// The device number channel lines use (`via NET/Socket/1`).
    pub device: u32,
    /// The interface or RDMA device (`eth1`, `mlx5_0`).
    pub nic: String,
    /// Its address as listed (`10.0.0.1`, `fe80::1%ib1`), for the socket transport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// Its link layer as an RDMA transport lists it (`IB`, `RoCE`, `IB/SHARP` from
    /// `[0]mlx5_0:1/IB/SHARP`); `None` for a socket interface or a merged device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<String>,
}

impl NicEntry {
    /// What is odd about it for traffic between nodes (rule K3): a container's or VM's
    /// virtual interface, the loopback, a link-local IPv6 address. `None` for a NIC.
    pub fn note(&self) -> Option<&'static str> {
        let n = self.nic.as_str();
        let link_local = self
            .addr
            .as_deref()
            .is_some_and(|a| a.to_ascii_lowercase().starts_with("fe80:"));
        if n == "lo" || n.starts_with("lo:") {
            Some("the loopback interface: it reaches no other node")
        } else if n.starts_with("veth") {
            Some("one end of a container's virtual ethernet pair")
        } else if n.starts_with("docker") || n.starts_with("br-") {
            Some("a Docker bridge")
        } else if n.starts_with("virbr") {
            Some("a libvirt virtual bridge")
        } else if ["cni", "flannel", "cali", "vxlan", "cilium", "weave"]
            .iter()
            .any(|p| n.starts_with(p))
        {
            Some("a container network's virtual interface")
        } else if link_local {
            Some("a link-local IPv6 address: valid on one link only")
        } else {
            None
        }
    }
}

/// The `[N]` entries of a NIC line (`NET/Socket : Using [0]eth0:10.0.0.1<0> [1]ib1:...`), each
/// as its device number and the text after its `]` to the end of the line: the caller takes
/// its own token from it. A merged device's group (`[0]={[0] mlx5_2:1/RoCE, [1] ...}`)
/// numbers ports, not devices, and is skipped whole.
fn nic_entries(msg: &str) -> impl Iterator<Item = (u32, &str)> {
    let mut rest = msg;
    std::iter::from_fn(move || loop {
        let open = rest.find('[')?;
        let after = &rest[open + 1..];
        let close = after.find(']')?;
        let entry = &after[close + 1..];
        rest = entry;
        if let Some(group) = entry.strip_prefix("={") {
            rest = group.find('}').map_or("", |end| &group[end..]);
            continue;
        }
        if let Ok(index) = after[..close].parse::<u32>() {
            return Some((index, entry));
        }
    })
}

/// The address of each `[N]name:addr<port>` entry of a NIC line (`NET/Socket : Using
/// [0]eth0:10.0.0.1<0> [1]ib1:fe80::1%ib1<0>`), by device number.
fn nic_addresses(msg: &str) -> Vec<(u32, String)> {
    nic_entries(msg)
        .filter_map(|(index, entry)| {
            let entry = entry.split(' ').next().unwrap_or("");
            let (_, addr) = entry.split_once(':')?;
            let addr = addr.split('<').next().unwrap_or(addr);
            (!addr.is_empty() && !addr.contains('/')).then(|| (index, addr.to_string()))
        })
        .collect()
}

/// The link layer of each `[N]name:port/LAYER` entry of an RDMA transport's NIC line
/// (`NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/IB/SHARP [RO]; OOB ...`), by device
/// number: `RoCE`, `IB/SHARP`. Socket entries (`[0]eth0:10.0.0.1<0>`) have none.
fn nic_layers(msg: &str) -> Vec<(u32, String)> {
    nic_entries(msg)
        .filter_map(|(index, entry)| {
            // 2.3 writes `NET/IB: [0] mlx5_1:1/IB`, a space after the number.
            let token = entry
                .trim_start()
                .split([' ', ';', ','])
                .next()
                .unwrap_or("");
            let (_, layer) = token.split_once('/')?;
            (!layer.is_empty() && !token.contains('<')).then(|| (index, layer.to_string()))
        })
        .collect()
}

/// What one plugin loader said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginNote {
    /// `NET`, `TUNER`, `PROFILER`, `ENV`.
    pub kind: String,
    /// Whether it loaded one (false for "Could not find").
    pub loaded: bool,
    /// NCCL's words.
    pub text: String,
}

/// One communicator.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Communicator {
    /// Its `commId` (`0x470b5de4999c140a`), or `size-N-#K` when the log has none.
    pub id: String,
    /// Whether [`id`](Self::id) is NCCL's own `commId` (false: matched by size and order).
    pub id_from_log: bool,
    /// `nranks` as logged.
    pub nranks: Option<u32>,
    /// `nNodes` as logged.
    pub nnodes: Option<u32>,
    /// The ranks that logged their part, by rank.
    pub ranks: Vec<CommRank>,
    /// `N coll channels` (else the number of ring channels listed).
    pub coll_channels: Option<u32>,
    /// `N nvls channels`.
    pub nvls_channels: Option<u32>,
    /// `N collnet channels`.
    pub collnet_channels: Option<u32>,
    /// `N p2p channels`.
    pub p2p_channels: Option<u32>,
    /// The algorithm and protocol per operation and size (`NCCL_DEBUG_SUBSYS=TUNING`).
    pub tuning: Vec<TuningChoice>,
}

impl Communicator {
    /// The hosts of its ranks, sorted and distinct.
    pub fn hosts(&self) -> Vec<&str> {
        let set: BTreeSet<&str> = self
            .ranks
            .iter()
            .filter_map(|r| r.host.as_deref())
            .filter(|h| !is_placeholder_host(h))
            .collect();
        set.into_iter().collect()
    }

    /// Whether any of its ranks' host names is a placeholder (`<cluster_name>`, `xxxx`).
    pub fn hosts_redacted(&self) -> bool {
        self.ranks
            .iter()
            .any(|r| r.host.as_deref().is_some_and(is_placeholder_host))
    }

    /// Whether any of its links left the node (NET or CollNet).
    pub fn uses_network(&self) -> bool {
        self.ranks
            .iter()
            .flat_map(|r| &r.links)
            .any(|l| matches!(l.class, TransportClass::Network | TransportClass::CollNet))
    }
}

/// How far a rank's part of a communicator got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitState {
    /// Only its summary line was seen.
    #[default]
    Seen,
    /// `Init START`, no `Init COMPLETE`.
    Started,
    /// `Init COMPLETE`.
    Complete,
    /// `Destroy COMPLETE`.
    Destroyed,
    /// `Abort COMPLETE`.
    Aborted,
}

/// One rank of one communicator.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CommRank {
    /// Its rank in the communicator.
    pub rank: u32,
    /// Its process, an index into [`JobLog::processes`].
    pub process: usize,
    /// Its host.
    pub host: Option<String>,
    /// `cudaDev`: an index into the process's `CUDA_VISIBLE_DEVICES`.
    pub cuda_dev: Option<u32>,
    /// `nvmlDev`: the node's own GPU number.
    pub nvml_dev: Option<u32>,
    /// `busId`.
    pub bus_id: Option<String>,
    /// `localRank` and `localRanks`.
    pub local_rank: Option<u32>,
    /// Ranks of the communicator on its node.
    pub local_ranks: Option<u32>,
    /// How far its init got.
    pub init: InitState,
    /// `GDR 1`/`GDR 0` of its `Connected all rings` line.
    pub gdr: Option<bool>,
    /// Its connections, one entry per distinct `via`.
    pub links: Vec<Link>,
}

/// The connections of one rank over one path (`via` text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// The text after `via`: `NET/Socket/0`, `NET/IB/1/GDRDMA`, `P2P/CUMEM`.
    pub via: String,
    /// Its class.
    pub class: TransportClass,
    /// The network transport of a `NET/<name>/...` (or `COLLNET/...`) path.
    pub net: Option<String>,
    /// Its device number (`NET/Socket/1` -> 1).
    pub device: Option<u32>,
    /// The NIC that device number is, from the process's `NET/<net> : Using` line.
    pub nic: Option<String>,
    /// GPUDirect RDMA (`/GDRDMA`).
    pub gdrdma: bool,
    /// Channel lines.
    pub channels: u64,
    /// Of them, `[send]` lines (the sender's side).
    #[serde(default)]
    pub send_channels: u64,
    /// Of them, `[receive]` lines (the receiver's side).
    #[serde(default)]
    pub receive_channels: u64,
    /// Distinct peer ranks (counted up to [`MAX_PEERS`]).
    pub peers: u32,
    /// Of them, those whose host is known and the rank's own: a `NET` link with such
    /// peers runs inside the node.
    #[serde(default)]
    pub peers_same_node: u32,
    /// Of them, those whose host is known and another.
    #[serde(default)]
    pub peers_other_node: u32,
}

impl Link {
    /// Where it runs, as far as its peers' hosts tell: `Some(true)` inside the node only,
    /// `Some(false)` between nodes only, `None` unknown or both.
    pub fn inside_node(&self) -> Option<bool> {
        match (self.peers_same_node, self.peers_other_node) {
            (0, 0) => None,
            (_, 0) => Some(true),
            (0, _) => Some(false),
            _ => None,
        }
    }
}

/// Peers counted per link: enough to tell a ring from an all-to-all.
pub const MAX_PEERS: usize = 64;

/// A trouble line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// What kind.
    pub kind: EventKind,
    /// The host, when known (NCCL's token, or the rank's host).
    pub host: Option<String>,
    /// The rank, when known (a launcher's tag, or the process's rank).
    pub rank: Option<u32>,
    /// The process entry whose NCCL line it is (an index into [`JobLog::processes`]).
    pub process: Option<usize>,
    /// The input it came from (0-based).
    pub source: usize,
    /// Its line number in that input.
    pub line: u64,
    /// The text (NCCL's message, or the program's line), cut to 400 characters.
    pub text: String,
    /// The source place of a WARN (`proxy.cc:1519`), when the line names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<String>,
}

impl Event {
    /// Whether it is about NCCL's RAS service (`ras/...`, 2.24+: its client port, its
    /// peers), not about a communicator's init or traffic.
    pub fn about_ras(&self) -> bool {
        self.place.as_deref().is_some_and(|p| p.starts_with("ras/"))
    }
}

/// `proxy.cc:1519` of `host:pid:tid [0] proxy.cc:1519 NCCL WARN ...`: the word before the
/// level, when it is a source place.
fn warn_place(text: &str) -> Option<String> {
    let at = text.find(" NCCL WARN")?;
    let place = text[..at].split_whitespace().next_back()?;
    let (file, line) = place.rsplit_once(':')?;
    (!file.is_empty() && !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()))
        .then(|| place.to_string())
}

/// What the reader keeps per process while reading.
#[derive(Debug, Default)]
struct ProcState {
    /// Its communicators by comm pointer.
    comms: HashMap<String, usize>,
    /// Its communicators in the order it set them up, with its rank in each.
    recent: Vec<(usize, u32)>,
    /// Its `N coll channels, ...` counts (coll, nvls, collnet, p2p) read before any of its
    /// communicators: an excerpt that starts after the Init START line, whose COMPLETE line
    /// (printed after the counts) then takes them.
    pending_counts: Option<[Option<u32>; 4]>,
    /// How many size-N communicators without a commId it set up (for matching).
    unnamed: HashMap<u32, u32>,
    /// Its channel lines outside any communicator.
    loose: Vec<LinkCount>,
    /// Its own ranks, as its directed channel lines outside any communicator show them
    /// (the sender of a `[send]`, the receiver of a `[receive]`).
    loose_ranks: BTreeSet<u32>,
    /// The own rank of every channel line outside any communicator, undirected ones too
    /// (their first rank: NCCL prints P2P and SHM lines on the sender's side).
    loose_owns: BTreeSet<u32>,
}

/// Which side of a connection a channel line is (rule K1): `[send]` lines come from the
/// sender, `[receive]` lines from the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Send,
    Receive,
    /// No `[send]`/`[receive]` (P2P, SHM).
    Either,
}

/// Channel lines over one path while reading.
#[derive(Debug, Default)]
struct LinkCount {
    via: String,
    channels: u64,
    send: u64,
    receive: u64,
    /// Distinct peers (up to [`MAX_PEERS`]); CollNet lines have none.
    peers: BTreeSet<u32>,
}

/// Counts one more channel line over `via` to `peer` in `links` (at most 64 paths).
fn count_link(links: &mut Vec<LinkCount>, via: &str, side: Side, peer: Option<u32>) {
    let i = match links.iter().position(|l| l.via == via) {
        Some(i) => i,
        None if links.len() < 64 => {
            links.push(LinkCount {
                via: via.to_string(),
                ..LinkCount::default()
            });
            links.len() - 1
        }
        None => return,
    };
    let link = &mut links[i];
    link.channels += 1;
    match side {
        Side::Send => link.send += 1,
        Side::Receive => link.receive += 1,
        Side::Either => {}
    }
    if let Some(peer) = peer.filter(|_| link.peers.len() < MAX_PEERS) {
        link.peers.insert(peer);
    }
}

/// A communicator while reading: its ranks in a map.
#[derive(Debug, Default)]
struct CommBuild {
    comm: Communicator,
    ranks: BTreeMap<u32, RankBuild>,
}

#[derive(Debug, Default)]
struct RankBuild {
    rank: CommRank,
    links: Vec<LinkCount>,
}

/// Reads a job's log line by line; [`finish`](Self::finish) gives the [`JobLog`].
#[derive(Debug, Default)]
pub struct JobLogReader {
    limits: Limits,
    log: JobLog,
    /// The process entries by a hash of (host, or input when there is none; pid; device):
    /// a process that drives two GPUs, as nccl-tests `-g 2`, holds one rank per device.
    /// Hashed, so that no key string is built for every line; each entry is compared.
    procs: HashMap<u64, Vec<usize>>,
    hasher: std::hash::RandomState,
    states: Vec<ProcState>,
    comms: Vec<CommBuild>,
    comm_ids: HashMap<String, usize>,
    unnamed: HashMap<(u32, u32), usize>,
    ranks_kept: usize,
    /// The bare `NCCL version 2.4.7+cuda10.0` line of each input (`2.4.7+cuda10.0`).
    bare_versions: HashMap<usize, String>,
    /// Limits reached, by what was dropped.
    dropped: BTreeMap<&'static str, u64>,
    /// Bytes of text kept so far ([`Limits::max_kept_bytes`]).
    kept_bytes: usize,
}

/// The word after `key` in `words`.
fn after<'a>(words: &[&'a str], key: &str) -> Option<&'a str> {
    let i = words.iter().position(|w| *w == key)?;
    words.get(i + 1).copied()
}

fn number(words: &[&str], key: &str) -> Option<u32> {
    after(words, key)?.parse().ok()
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn clip_bytes(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// `text` cut to `max` characters.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

impl JobLogReader {
    /// A reader that keeps at most what `limits` allow.
    pub fn new(limits: Limits) -> Self {
        JobLogReader {
            limits,
            ..JobLogReader::default()
        }
    }

    /// The limits it reads with.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Reads one line of input `source` (0-based), line number `line`.
    pub fn feed(&mut self, source: usize, line: u64, text: &str) {
        self.log.lines += 1;
        // A blank line says nothing: counted, not parsed (security review T7: a gzip bomb
        // of newlines took 190 ns a line through every parser, 3 minutes a GiB).
        if text.bytes().all(|b| b.is_ascii_whitespace()) {
            return;
        }
        let text = strip_ansi(text);
        for record in prefix::glued_records(&text) {
            self.feed_record(source, line, record);
        }
    }

    /// One record of a line (rule L8: a line may hold several).
    fn feed_record(&mut self, source: usize, line: u64, text: &str) {
        let raw = text;
        let tagged = launcher_rank(text);
        let Some(d) = parse_debug_line(text).or_else(|| prefix::old_form(text)) else {
            // NCCL up to 2.21 printed its version line bare (rule L6), behind whatever
            // tag a launcher adds: it goes to the processes of this input that name none
            // (at the end).
            if let Some(v) = bare_version(text) {
                self.bare_versions
                    .entry(source)
                    .or_insert_with(|| v.to_string());
                return;
            }
            if let Some(kind) = classify_event(text, None) {
                self.event(kind, (None, None), tagged, (source, line), text);
            }
            return;
        };
        self.log.nccl_lines += 1;
        let Some(p) = self.process(source, d.host, d.pid, d.device) else {
            return;
        };
        if tagged.is_some() && self.log.processes[p].launcher_rank.is_none() {
            self.log.processes[p].launcher_rank = tagged;
        }
        if let Some(kind) = classify_event(d.message, Some(d.level)) {
            let host = self.log.processes[p].host.clone();
            let rank = tagged.or(self.log.processes[p].launcher_rank);
            // An error return says its code's name: `init.cc:1358 -> 3 (ncclInternalError)`.
            let text = match error_return(d.message) {
                Some((_, name)) => format!("{} ({name})", d.message.trim()),
                None => d.message.to_string(),
            };
            self.event(kind, (Some(p), host), rank, (source, line), &text);
            if d.level == "WARN" {
                if let Some(e) = self.log.events.last_mut().filter(|e| e.line == line) {
                    e.place = warn_place(raw);
                }
            }
            return;
        }
        if d.level == "INFO" {
            self.info(p, d.message);
        }
    }

    fn process(
        &mut self,
        source: usize,
        host: Option<&str>,
        pid: Option<u32>,
        device: Option<u32>,
    ) -> Option<usize> {
        use std::hash::BuildHasher;
        // Cut before it is looked up, so that every line of one long name finds its entry.
        let host = host.map(|h| {
            let mut end = h.len().min(MAX_HOST_BYTES);
            while !h.is_char_boundary(end) {
                end -= 1;
            }
            &h[..end]
        });
        // A redacted host (rule L7) names no node: its lines are one process by pid and
        // device, whatever placeholder each carries.
        let placeholder = host.is_some_and(is_placeholder_host);
        let key = match host {
            Some(_) if placeholder => self.hasher.hash_one((2u8, pid, device)),
            Some(h) => self.hasher.hash_one((0u8, h, pid, device)),
            None => self.hasher.hash_one((1u8, source, pid, device)),
        };
        let processes = &self.log.processes;
        let same = |&&i: &&usize| {
            let p = &processes[i];
            p.pid == pid
                && p.device == device
                && match host {
                    Some(_) if placeholder => p.host.as_deref().is_some_and(is_placeholder_host),
                    Some(h) => p.host.as_deref().is_some_and(|known| glued_to(h, known)),
                    None => p.host.is_none() && p.source == source,
                }
        };
        if let Some(&i) = self.procs.get(&key).and_then(|v| v.iter().find(same)) {
            return Some(i);
        }
        // A line of the program's output glued to NCCL's (`-1vm:1399:1399 [0] NCCL INFO`,
        // a table row cut short): the host is a known one, of the same pid and device,
        // behind the row's last characters. Looked for once per such host.
        if let Some(h) = host {
            let glued = self.log.processes.iter().position(|p| {
                p.pid == pid
                    && p.device == device
                    && p.host
                        .as_deref()
                        .is_some_and(|known| known.len() < h.len() && glued_to(h, known))
            });
            if let Some(i) = glued {
                self.procs.entry(key).or_default().push(i);
                return Some(i);
            }
        }
        if self.log.processes.len() >= self.limits.max_processes {
            *self.dropped.entry("processes").or_default() += 1;
            return None;
        }
        let i = self.log.processes.len();
        self.log.processes.push(Process {
            host: host.map(str::to_string),
            pid,
            device,
            source,
            ..Process::default()
        });
        self.states.push(ProcState::default());
        self.procs.entry(key).or_default().push(i);
        Some(i)
    }

    /// Records a trouble line: `who` is its process entry and host, `at` its input and line.
    fn event(
        &mut self,
        kind: EventKind,
        who: (Option<usize>, Option<String>),
        rank: Option<u32>,
        at: (usize, u64),
        text: &str,
    ) {
        let ((process, host), (source, line)) = (who, at);
        *self
            .log
            .event_counts
            .entry(kind.as_str().to_string())
            .or_default() += 1;
        if self.log.events.len() >= self.limits.max_events {
            *self.dropped.entry("trouble lines").or_default() += 1;
            return;
        }
        self.log.events.push(Event {
            kind,
            host,
            rank,
            process,
            source,
            line,
            text: clip(text.trim(), 400),
            place: None,
        });
    }

    /// One `NCCL INFO` message of process `p`.
    fn info(&mut self, p: usize, msg: &str) {
        let msg = strip_rank_tag(msg);
        if self.process_fact(p, msg) {
            return;
        }
        if (msg.starts_with("comm 0x") || msg.starts_with("ncclComm")) && msg.contains(" rank ") {
            self.comm_line(p, msg);
        } else if (msg.starts_with("CollNet ") || msg.starts_with("Coll "))
            && msg.contains(" via COLLNET/")
        {
            self.collnet_line(p, msg);
        } else if (msg.starts_with("Channel ") || msg.starts_with("Ring ")) && msg.contains(" via ")
        {
            // `Ring 00 : 35 -> 34 [send] via NET/Socket/0`: NCCL 2.4's form.
            self.channel_line(p, msg);
        } else if let Some(rest) = msg.strip_prefix("Connected all rings") {
            // ", use ring PXN 0 GDR 0"
            let words: Vec<&str> = rest.split_whitespace().collect();
            if let Some(gdr) = number(&words, "GDR") {
                if let Some(r) = self.current_rank(p) {
                    r.rank.gdr = Some(gdr != 0);
                }
            }
        } else if msg.as_bytes().first().is_some_and(u8::is_ascii_digit)
            && msg.contains(" coll channels, ")
        {
            let counts = channel_counts(msg);
            let counts = ["coll", "nvls", "collnet", "p2p"].map(|k| counts.get(k).copied());
            match self.states[p].recent.last() {
                Some(&(c, _)) => set_channel_counts(&mut self.comms[c].comm, counts),
                None => self.states[p].pending_counts = Some(counts),
            }
        } else if let Some(choice) = Some(msg)
            .filter(|m| m.contains(" Bytes -> "))
            .and_then(parse_tuning)
        {
            if let Some(&(c, _)) = self.states[p].recent.last() {
                count_tuning(&mut self.comms[c].comm.tuning, choice, 256);
            }
        }
    }

    /// What process `p` says of itself (version, driver, net plugin, NICs, loaders,
    /// variables), kept within the byte budget; false when `msg` is none of these.
    fn process_fact(&mut self, p: usize, msg: &str) -> bool {
        let room = self.kept_bytes < self.limits.max_kept_bytes;
        let mut added = 0;
        let mut refused = false;
        let proc = &mut self.log.processes[p];
        if let Some(v) = msg.strip_prefix("NCCL version ") {
            let (version, cuda) = split_version(v.split_whitespace().next().unwrap_or(""));
            if proc.nccl_version.is_none() && !version.is_empty() {
                proc.nccl_version = Some(version.to_string());
                proc.cuda_version = cuda.map(str::to_string);
            }
        } else if let Some(v) = msg.strip_prefix("cudaDriverVersion ") {
            proc.cuda_driver = proc.cuda_driver.or(v.trim().parse().ok());
        } else if let Some(sharp) = sharp_init(msg) {
            proc.sharp = proc.sharp.take().or(Some(sharp));
        } else if let Some(name) = msg.strip_prefix("Using network ") {
            let name = name.trim();
            if !proc.networks.iter().any(|n| n == name) && proc.networks.len() < 8 {
                refused |= !room;
                if room {
                    added += name.len().min(200);
                    proc.networks.push(clip(name, 200));
                }
            }
        } else if let Some((net, nics)) = parse_nic_line(msg) {
            let addrs = nic_addresses(msg);
            let layers = nic_layers(msg);
            for (device, nic) in nics {
                let known = proc.nics.iter().any(|e| e.net == net && e.device == device);
                refused |= !known && !room;
                if !known && room && proc.nics.len() < 64 {
                    added += nic.len() + net.len();
                    let addr = addrs
                        .iter()
                        .find(|(d, _)| *d == device)
                        .map(|a| a.1.clone());
                    let layer = layers
                        .iter()
                        .find(|(d, _)| *d == device)
                        .map(|l| clip(&l.1, 16));
                    proc.nics.push(NicEntry {
                        net: net.to_string(),
                        device,
                        nic,
                        addr,
                        layer,
                    });
                }
            }
        } else if let Some((kind, rest)) = plugin_message(msg) {
            let plain = !kind.is_empty() && kind.bytes().all(|b| b.is_ascii_uppercase());
            let text = rest.trim_start_matches([':', ' ']).trim();
            if plain && !text.starts_with("Closing") {
                let note = PluginNote {
                    kind: kind.to_string(),
                    loaded: !text.contains("Could not find") && !text.contains("Failed"),
                    text: clip(text, 200),
                };
                if !proc.plugins.contains(&note) && proc.plugins.len() < 16 {
                    refused |= !room;
                    if room {
                        added += note.text.len();
                        proc.plugins.push(note);
                    }
                }
            }
        } else if let Some((name, value)) = env_setting(msg) {
            let name = name.trim();
            // NCCL's names are short: a longer one is no variable of NCCL's.
            if proc.env.len() < 256 && !name.contains(' ') && name.len() <= 128 {
                refused |= !room;
                if room {
                    let value = clip(value.trim().trim_end_matches('.'), 400);
                    added += name.len() + value.len();
                    proc.env.insert(name.to_string(), value);
                }
            }
        } else {
            return false;
        }
        self.kept_bytes += added;
        if refused {
            *self
                .dropped
                .entry("process facts (byte budget)")
                .or_default() += 1;
        }
        true
    }

    /// The rank process `p` has in the communicator it set up last.
    fn current_rank(&mut self, p: usize) -> Option<&mut RankBuild> {
        let &(c, rank) = self.states[p].recent.last()?;
        self.comms[c].ranks.get_mut(&rank)
    }

    /// `ncclCommInitRank... comm 0xP rank R nranks N ... commId 0xC - Init START`, and the
    /// other lines that name a comm pointer, a rank and a size.
    fn comm_line(&mut self, p: usize, msg: &str) {
        let words: Vec<&str> = msg.split_whitespace().collect();
        // A pointer or id is `0x` and at most 16 hex digits: a longer word is no NCCL's.
        let short = |w: &&str| w.starts_with("0x") && w.len() <= 18;
        let Some(ptr) = after(&words, "comm").filter(short) else {
            return;
        };
        let Some(rank) = number(&words, "rank") else {
            return;
        };
        let nranks = number(&words, "nranks").or_else(|| number(&words, "nRanks"));
        let comm_id = after(&words, "commId").filter(short);
        let Some(c) = self.comm_of(p, ptr, nranks, comm_id) else {
            return;
        };
        let kept = self.ranks_kept;
        let build = &mut self.comms[c];
        if !build.ranks.contains_key(&rank) {
            if kept >= self.limits.max_ranks {
                *self.dropped.entry("ranks").or_default() += 1;
                return;
            }
            self.ranks_kept += 1;
        }
        let comm = &mut build.comm;
        comm.nranks = comm.nranks.or(nranks);
        comm.nnodes = number(&words, "nNodes").or(comm.nnodes);
        let r = build.ranks.entry(rank).or_insert_with(|| RankBuild {
            rank: CommRank {
                rank,
                process: p,
                host: self.log.processes[p].host.clone(),
                ..CommRank::default()
            },
            links: Vec::new(),
        });
        let r = &mut r.rank;
        r.cuda_dev = number(&words, "cudaDev").or(r.cuda_dev);
        r.nvml_dev = number(&words, "nvmlDev").or(r.nvml_dev);
        r.bus_id = after(&words, "busId")
            .map(str::to_string)
            .or(r.bus_id.take());
        r.local_rank = number(&words, "localRank").or(r.local_rank);
        r.local_ranks = number(&words, "localRanks").or(r.local_ranks);
        let state = if msg.ends_with("Init START") {
            Some(InitState::Started)
        } else if msg.ends_with("Init COMPLETE") {
            Some(InitState::Complete)
        } else if msg.ends_with("Destroy COMPLETE") {
            Some(InitState::Destroyed)
        } else if msg.ends_with("Abort COMPLETE") {
            Some(InitState::Aborted)
        } else {
            None
        };
        // A COMPLETE with no START before it (NCCL up to 2.18 prints none; an excerpt may
        // cut it): the rank's connection lines came before it (rule C5).
        let completes_unstarted = state == Some(InitState::Complete) && r.init == InitState::Seen;
        if let Some(state) = state {
            // Never back: a summary line after COMPLETE does not undo it.
            if state as u8 > r.init as u8 {
                r.init = state;
            }
        }
        let recent = &mut self.states[p].recent;
        if recent.last() != Some(&(c, rank)) {
            recent.retain(|e| *e != (c, rank));
            recent.push((c, rank));
        }
        if let Some(counts) = self.states[p].pending_counts.take() {
            set_channel_counts(&mut self.comms[c].comm, counts);
        }
        if completes_unstarted {
            self.adopt_loose(p, c, rank);
        }
    }

    /// Rule C5: a rank prints its connection lines during init, before its `Init COMPLETE`
    /// (and no `Init START` up to 2.18): the channel lines a process printed before the
    /// COMPLETE of its first communicator, with no START seen, all from that
    /// communicator's rank, are that rank's links. Lines before an `Init START` belong to
    /// an earlier communicator the excerpt does not show, and stay outside.
    fn adopt_loose(&mut self, p: usize, c: usize, rank: u32) {
        let state = &mut self.states[p];
        let mine = state.loose_owns.len() == 1 && state.loose_owns.contains(&rank);
        if state.recent.len() != 1 || state.loose.is_empty() || !mine {
            return;
        }
        let loose = std::mem::take(&mut state.loose);
        state.loose_owns.clear();
        state.loose_ranks.clear();
        let Some(r) = self.comms[c].ranks.get_mut(&rank) else {
            return;
        };
        for l in loose {
            match r.links.iter().position(|k| k.via == l.via) {
                Some(i) => {
                    let k = &mut r.links[i];
                    k.channels += l.channels;
                    k.send += l.send;
                    k.receive += l.receive;
                    for peer in l.peers {
                        if k.peers.len() < MAX_PEERS {
                            k.peers.insert(peer);
                        }
                    }
                }
                None if r.links.len() < 64 => r.links.push(l),
                None => {}
            }
        }
    }

    /// The communicator comm pointer `ptr` of process `p` belongs to, created if new.
    fn comm_of(
        &mut self,
        p: usize,
        ptr: &str,
        nranks: Option<u32>,
        comm_id: Option<&str>,
    ) -> Option<usize> {
        if let Some(id) = comm_id {
            let c = match self.comm_ids.get(id) {
                Some(&c) => c,
                None => {
                    let c = self.new_comm(id.to_string(), true)?;
                    self.comm_ids.insert(id.to_string(), c);
                    c
                }
            };
            self.states[p].comms.insert(ptr.to_string(), c);
            return Some(c);
        }
        if let Some(&c) = self.states[p].comms.get(ptr) {
            return Some(c);
        }
        // No commId (NCCL before 2.18): this process's k-th communicator of this size is
        // every process's k-th.
        let size = nranks?;
        let ordinal = {
            let n = self.states[p].unnamed.entry(size).or_default();
            *n += 1;
            *n
        };
        let c = match self.unnamed.get(&(size, ordinal)) {
            Some(&c) => c,
            None => {
                let c = self.new_comm(format!("size-{size}-#{ordinal}"), false)?;
                self.unnamed.insert((size, ordinal), c);
                c
            }
        };
        self.states[p].comms.insert(ptr.to_string(), c);
        Some(c)
    }

    fn new_comm(&mut self, id: String, id_from_log: bool) -> Option<usize> {
        if self.comms.len() >= self.limits.max_communicators {
            *self.dropped.entry("communicators").or_default() += 1;
            return None;
        }
        self.comms.push(CommBuild {
            comm: Communicator {
                id,
                id_from_log,
                ..Communicator::default()
            },
            ranks: BTreeMap::new(),
        });
        Some(self.comms.len() - 1)
    }

    /// `Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0` of process `p`.
    fn channel_line(&mut self, p: usize, msg: &str) {
        let Some((head, via)) = msg.split_once(" via ") else {
            return;
        };
        let Some((_, ends)) = head.split_once(" : ") else {
            return;
        };
        let Some((from, to)) = ends.split_once(" -> ") else {
            return;
        };
        // `1[0]` (rank and device), or NCCL 2.4's bare `34`, before any `[send]`.
        let rank_of = |s: &str| -> Option<u32> { s.trim().split(['[', ' ']).next()?.parse().ok() };
        let (Some(from), Some(to)) = (rank_of(from), rank_of(to)) else {
            return;
        };
        // A trailing "comm 0x..." (some versions) names the communicator.
        let (via, named) = match via.split_once(" comm 0x") {
            Some((v, rest)) => (v, rest.split_whitespace().next().map(|w| format!("0x{w}"))),
            None => (via, None),
        };
        let via = clip_bytes(via.trim(), 256);
        let via = via.as_str();
        if via.is_empty() {
            return;
        }
        let highest = from.max(to);
        let state = &self.states[p];
        let fits = |&(c, _): &(usize, u32)| self.comms[c].comm.nranks.is_none_or(|n| highest < n);
        let target = named
            .and_then(|ptr| state.comms.get(&ptr).copied())
            .and_then(|c| state.recent.iter().rev().find(|e| e.0 == c).copied())
            .or_else(|| state.recent.iter().rev().find(|e| fits(e)).copied());
        let side = if head.contains("[receive]") {
            Side::Receive
        } else if head.contains("[send]") {
            Side::Send
        } else {
            Side::Either
        };
        let Some((c, own)) = target else {
            // Which end is this process's own: the sender's side of a send, the
            // receiver's of a receive; without a direction, the first.
            let (own, peer) = if side == Side::Receive {
                (to, from)
            } else {
                (from, to)
            };
            let state = &mut self.states[p];
            if side != Side::Either && state.loose_ranks.len() < 64 {
                state.loose_ranks.insert(own);
            }
            if state.loose_owns.len() < 64 {
                state.loose_owns.insert(own);
            }
            count_link(&mut state.loose, via, side, Some(peer));
            return;
        };
        let peer = if from == own { to } else { from };
        if let Some(r) = self.comms[c].ranks.get_mut(&own) {
            count_link(&mut r.links, via, side, Some(peer));
        }
    }

    /// `CollNet 00/0 : 3 [receive] via COLLNET/SHARP/1/GDRDMA` of process `p` (rule K2):
    /// rank 3's own connection to the collective network, no peer. 2.6-2.7 write `Coll`.
    fn collnet_line(&mut self, p: usize, msg: &str) {
        let Some((head, via)) = msg.split_once(" via ") else {
            return;
        };
        let Some((_, ends)) = head.split_once(" : ") else {
            return;
        };
        let Some(own) = ends
            .split_whitespace()
            .next()
            .and_then(|r| r.parse::<u32>().ok())
        else {
            return;
        };
        let side = if head.contains("[receive]") {
            Side::Receive
        } else {
            Side::Send
        };
        let via = clip_bytes(via.split(" comm 0x").next().unwrap_or(via).trim(), 256);
        let via = via.as_str();
        let state = &self.states[p];
        let fits =
            |&(c, r): &(usize, u32)| r == own && self.comms[c].comm.nranks.is_none_or(|n| own < n);
        match state.recent.iter().rev().find(|e| fits(e)).copied() {
            Some((c, own)) => {
                if let Some(r) = self.comms[c].ranks.get_mut(&own) {
                    count_link(&mut r.links, via, side, None);
                }
            }
            None => count_link(&mut self.states[p].loose, via, side, None),
        }
    }

    /// Everything read, with each link's NIC and each event's rank and host resolved.
    pub fn finish(mut self) -> JobLog {
        let mut comms: Vec<Communicator> = Vec::with_capacity(self.comms.len());
        for build in std::mem::take(&mut self.comms) {
            let mut comm = build.comm;
            // Each rank's host, to tell a link inside a node from one between nodes.
            let hosts: HashMap<u32, Option<&str>> = build
                .ranks
                .iter()
                .map(|(&r, b)| {
                    (
                        r,
                        b.rank.host.as_deref().filter(|h| !is_placeholder_host(h)),
                    )
                })
                .collect();
            let mut ranks = Vec::with_capacity(build.ranks.len());
            for r in build.ranks.values() {
                let mut rank = r.rank.clone();
                let nics = self.nics_of(rank.process);
                let own = hosts.get(&rank.rank).copied().flatten();
                rank.links = r
                    .links
                    .iter()
                    .map(|l| link(l, nics, own, |peer| hosts.get(&peer).copied().flatten()))
                    .collect();
                ranks.push(rank);
            }
            comm.ranks = ranks;
            comms.push(comm);
        }
        for proc in &mut self.log.processes {
            if let (None, Some(v)) = (&proc.nccl_version, self.bare_versions.get(&proc.source)) {
                let (version, cuda) = split_version(v);
                proc.nccl_version = Some(version.to_string());
                proc.cuda_version = cuda.map(str::to_string);
            }
        }
        let loose_hosts = self.loose_hosts();
        for p in 0..self.log.processes.len() {
            let loose = std::mem::take(&mut self.states[p].loose);
            let own = self.log.processes[p]
                .host
                .as_deref()
                .filter(|h| !is_placeholder_host(h));
            let links = loose
                .iter()
                .map(|l| {
                    link(l, self.nics_of(p), own, |peer| {
                        loose_hosts.get(&peer).map(String::as_str)
                    })
                })
                .collect();
            self.log.processes[p].links = links;
        }
        // Largest first; a stable sort keeps the order of first appearance among equals.
        comms.sort_by_key(|c| std::cmp::Reverse(c.nranks.unwrap_or(c.ranks.len() as u32)));
        self.log.communicators = comms;
        self.resolve_events();
        self.log.dropped = self
            .dropped
            .iter()
            .map(|(what, n)| format!("{n} {what} past the reader's limit were not kept"))
            .collect();
        self.log
    }

    /// The host of each rank that channel lines outside any communicator show, where every
    /// such line agrees (a rank seen on two hosts belongs to two communicators: none).
    fn loose_hosts(&self) -> HashMap<u32, String> {
        let mut seen: HashMap<u32, Option<&str>> = HashMap::new();
        for (p, state) in self.states.iter().enumerate() {
            let Some(host) = self.log.processes[p]
                .host
                .as_deref()
                .filter(|h| !is_placeholder_host(h))
            else {
                continue;
            };
            for &r in &state.loose_ranks {
                let e = seen.entry(r).or_insert(Some(host));
                if *e != Some(host) {
                    *e = None;
                }
            }
        }
        seen.into_iter()
            .filter_map(|(r, h)| Some((r, h?.to_string())))
            .collect()
    }

    /// The NICs process entry `p` listed, else those its process listed under another
    /// device (NCCL lists them once per process), else those another process of its host
    /// listed (NCCL numbers a node's devices the same way in every process).
    fn nics_of(&self, p: usize) -> &[NicEntry] {
        let me = &self.log.processes[p];
        if !me.nics.is_empty() || me.host.is_none() {
            return &me.nics;
        }
        let listed = |o: &&Process| o.host == me.host && !o.nics.is_empty();
        let same_process = self
            .log
            .processes
            .iter()
            .filter(listed)
            .find(|o| o.pid == me.pid);
        same_process
            .or_else(|| self.log.processes.iter().find(listed))
            .map_or(&me.nics[..], |o| &o.nics[..])
    }

    /// Gives each event the host and rank its tags or its process allow: a rank's host
    /// from the largest communicator (torch's world), a host's rank likewise.
    fn resolve_events(&mut self) {
        let world = self.log.communicators.first();
        let host_of_rank: HashMap<u32, String> = world
            .map(|c| {
                c.ranks
                    .iter()
                    .filter_map(|r| Some((r.rank, r.host.clone()?)))
                    .collect()
            })
            .unwrap_or_default();
        // The only process of an input (one file per rank) owns that input's lines.
        let mut per_source: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, p) in self.log.processes.iter().enumerate() {
            per_source.entry(p.source).or_default().push(i);
        }
        let world_rank_of = |process: usize| -> Option<u32> {
            world?
                .ranks
                .iter()
                .find(|r| r.process == process)
                .map(|r| r.rank)
        };
        for e in &mut self.log.events {
            if e.host.is_none() {
                if let Some(r) = e.rank {
                    e.host = host_of_rank.get(&r).cloned();
                } else if let Some([only]) = per_source.get(&e.source).map(Vec::as_slice) {
                    e.host = self.log.processes[*only].host.clone();
                    e.rank = self.log.processes[*only]
                        .launcher_rank
                        .or_else(|| world_rank_of(*only));
                }
            }
            // A process's own line is its rank's or none: another process of the same
            // host is no witness.
            if e.rank.is_none() {
                if let Some(p) = e.process {
                    e.rank = world_rank_of(p);
                    continue;
                }
                if let Some(host) = &e.host {
                    let on_host: Vec<u32> = world
                        .map(|c| {
                            c.ranks
                                .iter()
                                .filter(|r| r.host.as_ref() == Some(host))
                                .map(|r| r.rank)
                                .collect()
                        })
                        .unwrap_or_default();
                    if let [only] = on_host.as_slice() {
                        e.rank = Some(*only);
                    }
                }
            }
        }
    }
}

/// `NCCL_P2P_DISABLE set by environment to 1.` -> (`NCCL_P2P_DISABLE`, `1.`); NCCL 2.2x
/// also writes `NCCL_SOCKET_IFNAME set to eth1`. Only a message whose first word is a
/// variable's name (capitals, digits, `_`) is searched.
fn env_setting(msg: &str) -> Option<(&str, &str)> {
    let first = msg.split(' ').next()?;
    let is_name = !first.is_empty()
        && first
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !is_name {
        return None;
    }
    let rest = &msg[first.len()..];
    let value = rest.strip_prefix(" set by environment to ").or_else(|| {
        rest.strip_prefix(" set to ")
            .filter(|_| first.starts_with("NCCL_"))
    })?;
    Some((first, value))
}

/// `NET/Plugin: Could not find ...` -> (`NET`, `: Could not find ...`): the loader's kind
/// is the message's first word, before `/Plugin`.
fn plugin_message(msg: &str) -> Option<(&str, &str)> {
    let slash = msg.find('/')?;
    let rest = msg[slash..].strip_prefix("/Plugin")?;
    Some((&msg[..slash], rest))
}

/// Whether `seen` is the host `known`: the same, or `known` behind a table row's last
/// characters (`-1vm` for `vm`).
fn glued_to(seen: &str, known: &str) -> bool {
    seen == known
        || seen.strip_suffix(known).is_some_and(|row| {
            row.bytes()
                .all(|b| b.is_ascii_digit() || b"-.+ ".contains(&b))
        })
}

/// A communicator's channel counts (coll, nvls, collnet, p2p), each kept where the line
/// has none.
fn set_channel_counts(comm: &mut Communicator, [coll, nvls, collnet, p2p]: [Option<u32>; 4]) {
    comm.coll_channels = coll.or(comm.coll_channels);
    comm.nvls_channels = nvls.or(comm.nvls_channels);
    comm.collnet_channels = collnet.or(comm.collnet_channels);
    comm.p2p_channels = p2p.or(comm.p2p_channels);
}

/// `4 coll channels, 4 collnet channels, 0 nvls channels, 4 p2p channels, 2 p2p channels
/// per peer` -> {coll: 4, collnet: 4, nvls: 0, p2p: 4}.
fn channel_counts(msg: &str) -> HashMap<&str, u32> {
    let mut counts = HashMap::new();
    for part in msg.split(',') {
        let words: Vec<&str> = part.split_whitespace().collect();
        if let [n, kind, "channels"] = words.as_slice() {
            if let Ok(n) = n.parse() {
                counts.entry(*kind).or_insert(n);
            }
        }
    }
    counts
}

/// A finished [`Link`]: its class, transport, device and NIC, and where its peers are:
/// `own` is the rank's host, `host_of` a peer's (both `None` when unknown or redacted).
fn link<'h>(
    count: &LinkCount,
    nics: &[NicEntry],
    own: Option<&str>,
    host_of: impl Fn(u32) -> Option<&'h str>,
) -> Link {
    let via = count.via.as_str();
    let (class, net) = classify_via(via);
    let (mut same, mut other) = (0, 0);
    if let Some(own) = own {
        for &peer in &count.peers {
            match host_of(peer) {
                Some(h) if h == own => same += 1,
                Some(_) => other += 1,
                None => {}
            }
        }
    }
    let device = via
        .split('/')
        .nth(2)
        .and_then(|d| d.split('(').next())
        .and_then(|d| d.trim().parse().ok());
    // The list of the same transport, else of the one it extends: HPC-X's `IBext_v8`
    // and the TCPX plugins' versioned names use the devices `NET/IB` and the like listed.
    let nic = match (&net, device) {
        (Some(net), Some(device)) => {
            let of = |same: bool| {
                nics.iter().find(|e| {
                    e.device == device
                        && if same {
                            e.net.eq_ignore_ascii_case(net)
                        } else {
                            net.to_ascii_lowercase()
                                .starts_with(&e.net.to_ascii_lowercase())
                        }
                })
            };
            of(true).or_else(|| of(false)).map(|e| e.nic.clone())
        }
        _ => None,
    };
    Link {
        via: via.to_string(),
        class,
        net,
        device,
        nic,
        gdrdma: via.contains("GDRDMA"),
        channels: count.channels,
        send_channels: count.send,
        receive_channels: count.receive,
        peers: count.peers.len() as u32,
        peers_same_node: same,
        peers_other_node: other,
    }
}

/// Reads a whole log held in memory (tests, the fuzz target): one input.
pub fn read_str(text: &str) -> JobLog {
    let mut reader = JobLogReader::new(Limits::default());
    for (i, line) in text.lines().enumerate() {
        reader.feed(0, i as u64 + 1, line);
    }
    reader.finish()
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_forms;
