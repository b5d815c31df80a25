//! What the `NCCL_DEBUG=INFO` lines say: versions, the network plugin, and the transports
//! the channels really used.
//!
//! A debug line looks like `host:pid:tid [dev] NCCL INFO message`. Two kinds of messages
//! matter for "did traffic take the fast path":
//!
//! - `Using network Socket` (or `IB`, `GPUDirectTCPX_v7`, `gIB`, `AWS Libfabric`): the
//!   network plugin NCCL *loaded*. Every process logs it at init, even when all traffic
//!   stays on NVLink, so it is not evidence of the path.
//! - `Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0` (or `via P2P/CUMEM`,
//!   `via P2P/direct pointer`, `via SHM/direct/direct`, `via NET/IB/0/GDRDMA`): the path
//!   one channel's connection took. Inside a node these name P2P or SHM; between nodes
//!   they name `NET/<plugin>`. [`NcclDebugInfo::network_transport`] reads this.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a channel's connection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportClass {
    /// Inside a node: `P2P/...` (NVLink or PCIe), `SHM/...` (host memory).
    IntraNode,
    /// Between nodes through a network plugin: `NET/<name>/...`.
    Network,
    /// In-network reduction (`COLLNET/...`, SHARP and the like): also off the node, but
    /// not the point-to-point network path, so kept apart.
    CollNet,
    /// Anything else after `via`.
    Other,
}

/// One distinct `via X` seen in channel lines, with how often and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportUse {
    /// The text after `via`, e.g. `P2P/CUMEM`, `NET/Socket/0`, `NET/IB/0/GDRDMA`.
    pub via: String,
    /// Its class.
    pub class: TransportClass,
    /// For `NET/<name>/...` and `COLLNET/<name>/...`: the name (`Socket`, `IB`, `gIB`,
    /// `GPUDirectTCPX`, `AWS Libfabric`, ...).
    pub net_name: Option<String>,
    /// Number of channel lines.
    pub count: u64,
    /// Hosts that logged it (sorted, distinct).
    pub hosts: Vec<String>,
    /// 1-based line number of the first occurrence.
    pub first_line: usize,
}

/// One distinct `Using network X`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkUse {
    /// The plugin name as logged.
    pub name: String,
    /// Number of lines (one per communicator per rank).
    pub count: u64,
    /// Hosts that logged it.
    pub hosts: Vec<String>,
}

/// A variable NCCL reported as set by the environment
/// (`NCCL_P2P_DISABLE set by environment to 1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvSetting {
    /// Variable name.
    pub name: String,
    /// Value as logged.
    pub value: String,
    /// Hosts that logged it: a host missing here did not get the variable.
    pub hosts: Vec<String>,
}

/// An `NCCL WARN` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebugWarning {
    /// Host of the process that logged it.
    pub host: Option<String>,
    /// The message after `NCCL WARN`.
    pub message: String,
    /// 1-based line number.
    pub line: usize,
}

/// The algorithm and protocol NCCL chose for operations of one size, from its
/// per-operation lines (`NCCL_DEBUG_SUBSYS=TUNING`, or `COLL` in older versions):
/// `AllReduce: 4294967296 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..23}` (NCCL
/// 2.19 and later) or `AllGather: 37756928 Bytes -> Algo 1 proto 2 time 2860.208008`
/// (earlier, numbers: see [`algorithm_name`] and [`protocol_name`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TuningChoice {
    /// NCCL's name of the operation (`AllReduce`, `AllGather`, ...), when the line gave it.
    pub op: Option<String>,
    /// The operation's size in bytes as NCCL counts it: the whole buffer for all_reduce,
    /// one rank's part for all_gather and reduce_scatter.
    pub bytes: u64,
    /// `RING`, `TREE`, `NVLS`, `COLLNET_DIRECT`, `PAT`, ... (upper case).
    pub algorithm: String,
    /// `SIMPLE`, `LL`, `LL128` (upper case).
    pub protocol: String,
    /// How many lines said so.
    pub count: u64,
}

/// NCCL's algorithm number in the per-operation lines before 2.19 (`Algo 1`): 0 and 1
/// are Tree and Ring in every version; later numbers changed meaning between versions
/// (CollNet, NVLS, PAT were added), so they are kept as numbers.
pub fn algorithm_name(code: &str) -> String {
    match code {
        "0" => "TREE".to_string(),
        "1" => "RING".to_string(),
        c if c.bytes().all(|b| b.is_ascii_digit()) => format!("ALGO{c}"),
        c => c.to_ascii_uppercase(),
    }
}

/// NCCL's protocol number in the per-operation lines before 2.19 (`proto 2`): the same in
/// every version.
pub fn protocol_name(code: &str) -> String {
    match code {
        "0" => "LL".to_string(),
        "1" => "LL128".to_string(),
        "2" => "SIMPLE".to_string(),
        c => c.to_ascii_uppercase(),
    }
}

/// Reads one per-operation line's message: `[Op: ]N Bytes -> Algo A proto P ...`.
pub(crate) fn parse_tuning(msg: &str) -> Option<(Option<&str>, u64, String, String)> {
    let (head, tail) = msg.split_once(" Bytes -> Algo ")?;
    let (op, bytes) = match head.rsplit_once(':') {
        Some((op, bytes)) => (Some(op.trim()), bytes),
        None => (None, head),
    };
    let bytes = bytes.trim().parse().ok()?;
    let mut words = tail.split_whitespace();
    let algorithm = words.next()?;
    if words.next()? != "proto" {
        return None;
    }
    let protocol = words.next()?;
    let op = op.filter(|o| !o.is_empty() && o.bytes().all(|b| b.is_ascii_alphanumeric()));
    Some((
        op,
        bytes,
        algorithm_name(algorithm),
        protocol_name(protocol),
    ))
}

/// A network plugin's own version, as it logged it at init.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginVersion {
    /// The plugin's name: `FasTrak`, `aws-ofi-nccl`, `GPUDirectTCPX_v7`, ...
    pub name: String,
    /// Its version as logged: `1.0.17`, `1.7.4-aws`, or the NCCL API version (`v7`) where
    /// that is all the line gives.
    pub version: String,
}

/// Reads a plugin's version line: `Initializing network FasTrak, version: 1.0.17`
/// (TCPXO), `NET/OFI Initializing aws-ofi-nccl 1.7.4-aws` (EFA), `NET/Plugin: Loaded net
/// plugin GPUDirectTCPX_v7 (v7)` and `NET/Plugin: Loaded net plugin NAME (v8)` (any).
fn parse_plugin_version(msg: &str) -> Option<PluginVersion> {
    let pair = |name: &str, version: &str| {
        let (name, version) = (name.trim(), version.trim());
        (!name.is_empty() && !version.is_empty()).then(|| PluginVersion {
            name: name.to_string(),
            version: version.to_string(),
        })
    };
    if let Some(rest) = msg.strip_prefix("Initializing network ") {
        let (name, version) = rest.split_once(", version:")?;
        return pair(name, version);
    }
    if let Some(rest) = msg.strip_prefix("NET/OFI Initializing ") {
        let (name, version) = rest.trim().split_once(' ')?;
        return pair(name, version.split_whitespace().next()?);
    }
    let rest = msg
        .strip_prefix("NET/Plugin: Loaded net plugin ")
        .or_else(|| msg.strip_prefix("NET/Plugin : Loaded net plugin "))?;
    let (name, version) = rest.trim().rsplit_once(" (")?;
    pair(name, version.trim_end_matches(')'))
}

/// Everything gathered from the NCCL debug lines of one output.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NcclDebugInfo {
    /// Number of NCCL debug lines.
    pub lines: u64,
    /// `2.28.9` from `NCCL version 2.28.9+cuda13.0`.
    pub nccl_version: Option<String>,
    /// `13.0` from the same line.
    pub cuda_version: Option<String>,
    /// `cudaDriverVersion 13000`.
    pub cuda_driver_version: Option<u32>,
    /// `Using network X` lines: the network plugin loaded, not the path.
    pub networks: Vec<NetworkUse>,
    /// `Initialized NET plugin X`.
    pub net_plugins_initialized: Vec<String>,
    /// `Failed to initialize NET plugin X`.
    pub net_plugins_failed: Vec<String>,
    /// Distinct `via X` of the channel lines.
    pub transports: Vec<TransportUse>,
    /// Largest `nNodes` logged by a communicator.
    pub n_nodes: Option<u32>,
    /// Largest `nRanks` logged by a communicator.
    pub n_ranks: Option<u32>,
    /// Variables NCCL said came from the environment.
    pub env: Vec<EnvSetting>,
    /// `NCCL WARN` lines.
    pub warnings: Vec<DebugWarning>,
    /// Hosts that logged anything, sorted.
    pub hosts: Vec<String>,
    /// Algorithm and protocol per operation size, in order of first appearance (empty
    /// without `NCCL_DEBUG_SUBSYS=TUNING`).
    #[serde(default)]
    pub tuning: Vec<TuningChoice>,
    /// Network plugins' own versions, as they logged them.
    #[serde(default)]
    pub plugin_versions: Vec<PluginVersion>,
    /// The NICs each network transport said it uses (`NET/Socket : Using [0]eth1:10.0.0.1<0>`,
    /// `NET/IB : Using [0]mlx5_0:1/RoCE`), by transport and NIC.
    #[serde(default)]
    pub nics: Vec<NicUse>,
}

/// One NIC a network transport said it uses, from its `NET/<name> : Using [N]<nic>...` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicUse {
    /// The transport's name as in `NET/<name>` (`Socket`, `IB`, ...).
    pub net: String,
    /// The interface or device name (`eth1`, `mlx5_0`).
    pub nic: String,
    /// Hosts whose processes said so (sorted, distinct).
    pub hosts: Vec<String>,
}

/// `NET/Socket : Using [0]eth1:10.0.0.1<0> [1]eth2:...` -> (`Socket`, [(0, `eth1`), (1, `eth2`)]):
/// each NIC with the device number channel lines name it by (`via NET/Socket/1`). Only
/// `[N]name` entries count: `NET/IB : Using [RO]; OOB eth0:...` (IB found no device and
/// names only its out-of-band interface) gives none. A merged device (NCCL_IB_MERGE_NICS,
/// `[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}`) is named by its parts: `mlx5_2+mlx5_3`.
pub(crate) fn parse_nic_line(msg: &str) -> Option<(&str, Vec<(u32, String)>)> {
    let rest = msg.strip_prefix("NET/")?;
    // NCCL 2.3 prints one line per device, `NET/IB: [0] mlx5_1:1/IB` (rule K3).
    let (net, mut list) = match rest.split_once(" : Using ") {
        Some(parts) => parts,
        None => rest
            .split_once(": [")
            .map(|(net, _)| (net, &rest[net.len() + 2..]))?,
    };
    let net = net.trim();
    if net.is_empty() || net.contains(' ') {
        return None;
    }
    let name_of = |s: &str| -> String {
        s.trim_start()
            .split([':', ' ', ',', '}'])
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let mut nics = Vec::new();
    while let Some(open) = list.find('[') {
        let after = &list[open + 1..];
        let Some(close) = after.find(']') else { break };
        let tail = &after[close + 1..];
        let Ok(index) = after[..close].parse::<u32>() else {
            // `[RO]` and the like.
            list = tail;
            continue;
        };
        if let Some(group) = tail.strip_prefix("={") {
            let end = group.find('}').unwrap_or(group.len());
            let parts: Vec<String> = group[..end]
                .split(',')
                .map(|part| {
                    let part = part.trim();
                    let part = part.split_once("] ").map_or(part, |(_, name)| name);
                    name_of(part)
                })
                .filter(|n| !n.is_empty())
                .collect();
            if !parts.is_empty() {
                nics.push((index, parts.join("+")));
            }
            list = &group[end.min(group.len())..];
        } else {
            let name = name_of(tail);
            if !name.is_empty() {
                nics.push((index, name));
            }
            list = tail;
        }
    }
    (!nics.is_empty()).then_some((net, nics))
}

/// Whether the network name `seen` in a channel line (`GPUDirectTCPX_v7`) is the transport
/// `expected` (`GPUDirectTCPX`, or `NET/GPUDirectTCPX`): the same name without regard to
/// case, or that name with a version suffix (`_v7`, `-v2`, ` 1.2`), so `IB` is not `gIB`.
pub fn net_name_matches(seen: &str, expected: &str) -> bool {
    let exp = expected.trim();
    let exp = exp
        .strip_prefix("NET/")
        .or_else(|| exp.strip_prefix("net/"))
        .unwrap_or(exp)
        .to_ascii_lowercase();
    let seen = seen.to_ascii_lowercase();
    seen == exp || (seen.starts_with(&exp) && seen[exp.len()..].starts_with(['_', '-', ' ']))
}

/// The names one network transport goes by across builds, lower case: HPC-X's SHARP plugin
/// (nccl-rdma-sharp-plugins) registers its copy of NCCL's IB verbs transport as `IBext`
/// (`IBext_v8`, ...), over the same HCAs as `IB`; aws-ofi-nccl called itself `AWS
/// Libfabric` up to 1.11 and `Libfabric` from 1.12, and answers to `OFI` as NCCL_NET.
const SAME_TRANSPORT: [&[&str]; 2] = [&["ib", "ibext"], &["libfabric", "aws libfabric", "ofi"]];

/// Whether the network `seen` in a log's channel lines is the transport `expected` that a
/// profile names, as a reader of a job's log judges it: [`net_name_matches`], or another
/// name of the same transport ([`SAME_TRANSPORT`]: `IBext_v8` is `IB`, `AWS Libfabric` is
/// `Libfabric`). A job run under the profile sets NCCL_NET to the profile's own name, so
/// the other names come from jobs run without it (HPC-X images, older EFA installers).
pub fn same_transport(seen: &str, expected: &str) -> bool {
    if net_name_matches(seen, expected) {
        return true;
    }
    let exp = expected.trim();
    let exp = exp
        .strip_prefix("NET/")
        .or_else(|| exp.strip_prefix("net/"))
        .unwrap_or(exp)
        .to_ascii_lowercase();
    SAME_TRANSPORT
        .iter()
        .filter(|names| names.contains(&exp.as_str()))
        .flat_map(|names| names.iter())
        .any(|name| net_name_matches(seen, name))
}

/// Answer of [`NcclDebugInfo::transport_match`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum TransportMatch {
    /// Channel lines show the expected transport, and no other of its class.
    Used,
    /// Channel lines of the expected class exist, but name other transports (the fast
    /// plugin did not carry the traffic). `seen` lists what they named.
    Other {
        /// The transports seen in that class (net names, or `via` texts inside a node).
        seen: Vec<String>,
    },
    /// Both the expected and other transports of that class were used.
    Mixed {
        /// All transports seen in that class.
        seen: Vec<String>,
    },
    /// No channel line of that class: no evidence either way (run without
    /// `NCCL_DEBUG=INFO`, or the traffic never left the node).
    NoEvidence,
}

/// One parsed `host:pid:tid [dev] NCCL LEVEL message` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DebugLine<'a> {
    /// Whatever came before the `host:pid:tid` token, untrimmed (normally empty; a row
    /// fragment when outputs interleaved within a line).
    pub prefix: &'a str,
    pub host: Option<&'a str>,
    /// The process id of the `host:pid:tid` token, when it has one.
    pub pid: Option<u32>,
    /// The device in brackets after the token (`[0]`: the CUDA device), when logged.
    pub device: Option<u32>,
    pub level: &'a str,
    pub message: &'a str,
}

/// Recognise an NCCL debug line. Tolerates anything before the `host:pid:tid` token
/// (timestamps, launcher prefixes).
pub(crate) fn parse_debug_line(line: &str) -> Option<DebugLine<'_>> {
    const LEVELS: [&str; 5] = ["INFO", "WARN", "TRACE", "ABORT", "VERSION"];
    // " NCCL " by memchr on 'N', then a look around: a substring search per line costs more
    // than the rest of the line's parse.
    let idx = line
        .match_indices('N')
        .map(|(i, _)| i)
        .find(|&i| i > 0 && line.as_bytes()[i - 1] == b' ' && line[i..].starts_with("NCCL "))?
        - 1;
    let after = &line[idx + " NCCL ".len()..];
    let level = LEVELS.iter().find(|l| after.starts_with(**l))?;
    let message = after[level.len()..].trim();
    let before = line[..idx].trim_end();
    // before = "... host:pid:tid [dev]", and on WARN lines "... host:pid:tid [dev] file.cc:123".
    // The token is the last one whose two last `:` parts are numbers.
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let is_token = |t: &str| {
        let mut parts = t.rsplitn(3, ':');
        let (tid, pid, host) = (parts.next(), parts.next(), parts.next());
        tid.is_some_and(numeric) && pid.is_some_and(numeric) && host.is_some()
    };
    let device_of =
        |w: &str| -> Option<u32> { w.strip_prefix('[')?.strip_suffix(']')?.parse().ok() };
    // The last three words at most (token, [dev], file.cc:123), scanned from the end
    // without collecting: this runs for every line of a log.
    let mut words = before
        .split_whitespace()
        .rev()
        .take(3)
        .map(|w| (w.as_ptr() as usize - before.as_ptr() as usize, w));
    let mut after: Option<&str> = None;
    let found = words.find_map(|(at, w)| {
        if is_token(w) {
            Some((at, w, after))
        } else {
            after = Some(w);
            None
        }
    });
    let (prefix, host, pid, device) = match found {
        Some((at, token, next)) => {
            let mut parts = token.rsplitn(3, ':');
            let (_, pid, host) = (parts.next(), parts.next(), parts.next());
            // A launcher's tag glued to the token (`[rank0]:node1`, `[1,0]<stdout>:node1`) is
            // no part of the host name, which holds none of these characters.
            // Only a tag's end followed by `:` is cut, so that a redacted
            // `<cluster_name>` stays the host it stands for.
            let host = host
                .map(|h| match h.rfind("]:").or_else(|| h.rfind(">:")) {
                    Some(i) => &h[i + 2..],
                    None => h,
                })
                .filter(|h| !h.is_empty());
            let device = next.and_then(device_of);
            (
                &before[..at],
                host,
                pid.and_then(|p| p.parse().ok()),
                device,
            )
        }
        None => {
            // No host token: "[dev]" alone may still end the text before " NCCL ".
            let (rest, device) = match before.rfind(" [") {
                Some(i) if before.ends_with(']') => {
                    (&before[..i], before[i + 2..before.len() - 1].parse().ok())
                }
                _ => (before, device_of(before.trim())),
            };
            let last = rest.split_whitespace().next_back().unwrap_or("");
            (rest.strip_suffix(last).unwrap_or(rest), None, None, device)
        }
    };
    Some(DebugLine {
        prefix,
        host,
        pid,
        device,
        level,
        message,
    })
}

/// Classify the text after `via`.
pub fn classify_via(via: &str) -> (TransportClass, Option<String>) {
    let mut segs = via.split('/');
    let head = segs.next().unwrap_or("").trim();
    let name = segs
        .next()
        .map(|s| {
            // "IB/0(1)" style suffixes stay in the later segments; trim parenthesised bits.
            s.split('(').next().unwrap_or(s).trim().to_string()
        })
        .filter(|s| !s.is_empty());
    match head.to_ascii_uppercase().as_str() {
        "P2P" | "SHM" | "NVLS" => (TransportClass::IntraNode, None),
        "NET" => (TransportClass::Network, name),
        "COLLNET" => (TransportClass::CollNet, name),
        _ => (TransportClass::Other, None),
    }
}

/// `2.28.9+cuda13.0` -> (`2.28.9`, `13.0`).
pub(crate) fn split_version(v: &str) -> (&str, Option<&str>) {
    match v.split_once('+') {
        Some((a, b)) => (a, b.strip_prefix("cuda")),
        None => (v, None),
    }
}

/// Counts one more per-operation line's `choice` (from [`parse_tuning`]) in `tuning`, a new
/// entry while fewer than `max` are kept: one entry per size and choice, so a log of
/// millions of lines has at most some hundred distinct ones.
pub(crate) fn count_tuning(
    tuning: &mut Vec<TuningChoice>,
    (op, bytes, algorithm, protocol): (Option<&str>, u64, String, String),
    max: usize,
) {
    let op = op.map(str::to_string);
    let same = |t: &&mut TuningChoice| {
        (&t.op, t.bytes, &t.algorithm, &t.protocol) == (&op, bytes, &algorithm, &protocol)
    };
    if let Some(t) = tuning.iter_mut().find(same) {
        t.count = t.count.saturating_add(1);
    } else if tuning.len() < max {
        tuning.push(TuningChoice {
            op,
            bytes,
            algorithm,
            protocol,
            count: 1,
        });
    }
}

/// Distinct (operation, size, algorithm, protocol) choices kept per output.
const MAX_TUNING_CHOICES: usize = 4096;

/// Accumulates [`NcclDebugInfo`] line by line.
#[derive(Debug, Default)]
pub(crate) struct DebugCollector {
    info: NcclDebugInfo,
    transports: BTreeMap<String, TransportUse>,
    networks: BTreeMap<String, NetworkUse>,
    env: BTreeMap<(String, String), EnvSetting>,
    nics: BTreeMap<(String, String), NicUse>,
}

/// Distinct (transport, NIC) pairs kept per output: a node has some dozen NICs at most.
const MAX_NICS: usize = 256;

fn add_host(hosts: &mut Vec<String>, host: Option<&str>) {
    if let Some(h) = host {
        if let Err(pos) = hosts.binary_search_by(|x| x.as_str().cmp(h)) {
            hosts.insert(pos, h.to_string());
        }
    }
}

fn push_unique(v: &mut Vec<String>, s: &str) {
    if !v.iter().any(|x| x == s) {
        v.push(s.to_string());
    }
}

impl DebugCollector {
    /// Feed one recognised debug line.
    pub fn add(&mut self, d: &DebugLine<'_>, line: usize) {
        let info = &mut self.info;
        info.lines = info.lines.saturating_add(1);
        add_host(&mut info.hosts, d.host);
        let msg = d.message;
        if d.level == "WARN" {
            info.warnings.push(DebugWarning {
                host: d.host.map(str::to_string),
                message: msg.to_string(),
                line,
            });
            return;
        }
        if let Some(v) = msg.strip_prefix("NCCL version ") {
            let (ver, cuda) = split_version(v.split_whitespace().next().unwrap_or(""));
            if info.nccl_version.is_none() && !ver.is_empty() {
                info.nccl_version = Some(ver.to_string());
            }
            if info.cuda_version.is_none() {
                info.cuda_version = cuda.map(str::to_string);
            }
        } else if let Some(v) = msg.strip_prefix("cudaDriverVersion ") {
            info.cuda_driver_version = info.cuda_driver_version.or(v.trim().parse().ok());
        } else if let Some(choice) = parse_tuning(msg) {
            count_tuning(&mut info.tuning, choice, MAX_TUNING_CHOICES);
        } else if let Some(version) = parse_plugin_version(msg) {
            if !info.plugin_versions.contains(&version) {
                info.plugin_versions.push(version);
            }
        } else if let Some(name) = msg.strip_prefix("Using network ") {
            let name = name.trim();
            let e = self
                .networks
                .entry(name.to_string())
                .or_insert_with(|| NetworkUse {
                    name: name.to_string(),
                    count: 0,
                    hosts: Vec::new(),
                });
            e.count = e.count.saturating_add(1);
            add_host(&mut e.hosts, d.host);
        } else if let Some((net, nics)) = parse_nic_line(msg) {
            for (_, nic) in nics {
                let key = (net.to_string(), nic.clone());
                if !self.nics.contains_key(&key) && self.nics.len() >= MAX_NICS {
                    continue;
                }
                let e = self.nics.entry(key).or_insert_with(|| NicUse {
                    net: net.to_string(),
                    nic,
                    hosts: Vec::new(),
                });
                add_host(&mut e.hosts, d.host);
            }
        } else if let Some(name) = msg.strip_prefix("Initialized NET plugin ") {
            push_unique(&mut info.net_plugins_initialized, name.trim());
        } else if let Some(name) = msg.strip_prefix("Failed to initialize NET plugin ") {
            push_unique(&mut info.net_plugins_failed, name.trim());
        } else if let Some((_, via)) = msg.split_once(" via ").filter(|_| msg.contains(" -> ")) {
            let via = via.trim();
            let (class, net_name) = classify_via(via);
            let e = self
                .transports
                .entry(via.to_string())
                .or_insert_with(|| TransportUse {
                    via: via.to_string(),
                    class,
                    net_name,
                    count: 0,
                    hosts: Vec::new(),
                    first_line: line,
                });
            e.count = e.count.saturating_add(1);
            add_host(&mut e.hosts, d.host);
        } else if let Some((name, value)) = msg.split_once(" set by environment to ") {
            let name = name.trim();
            let value = value.trim().trim_end_matches('.');
            let e = self
                .env
                .entry((name.to_string(), value.to_string()))
                .or_insert_with(|| EnvSetting {
                    name: name.to_string(),
                    value: value.to_string(),
                    hosts: Vec::new(),
                });
            add_host(&mut e.hosts, d.host);
        } else if msg.starts_with("comm ") && msg.contains(" nNodes ") {
            // "comm 0x.. rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0"
            let words: Vec<&str> = msg.split_whitespace().collect();
            let after = |key: &str| -> Option<u32> {
                let i = words.iter().position(|w| *w == key)?;
                words.get(i + 1)?.parse().ok()
            };
            if let Some(n) = after("nNodes") {
                info.n_nodes = Some(info.n_nodes.map_or(n, |m| m.max(n)));
            }
            if let Some(n) = after("nRanks") {
                info.n_ranks = Some(info.n_ranks.map_or(n, |m| m.max(n)));
            }
        }
    }

    /// Finish: move the maps into the result.
    pub fn finish(mut self) -> NcclDebugInfo {
        let mut transports: Vec<TransportUse> = self.transports.into_values().collect();
        transports.sort_by_key(|t| t.first_line);
        self.info.transports = transports;
        self.info.networks = self.networks.into_values().collect();
        self.info.env = self.env.into_values().collect();
        self.info.nics = self.nics.into_values().collect();
        self.info
    }
}

impl NcclDebugInfo {
    /// The NICs that transport `net` (a profile's `transport`, e.g. `Socket`) said it uses;
    /// names compare without regard to case.
    pub fn nics_of(&self, net: &str) -> Vec<&NicUse> {
        self.nics
            .iter()
            .filter(|n| n.net.eq_ignore_ascii_case(net))
            .collect()
    }

    /// The network transport the channel lines used: the `NET/<name>` seen most often
    /// (`Socket`, `IB`, `GPUDirectTCPX`, `gIB`, `AWS Libfabric`, ...). `None` when no
    /// channel went over the network (single node, or no `NCCL_DEBUG=INFO`).
    pub fn network_transport(&self) -> Option<&str> {
        let mut by_name: BTreeMap<&str, u64> = BTreeMap::new();
        for t in &self.transports {
            if t.class == TransportClass::Network {
                if let Some(n) = t.net_name.as_deref() {
                    *by_name.entry(n).or_default() += t.count;
                }
            }
        }
        // Most lines wins; ties go to the first name in sorted order (deterministic).
        let mut best: Option<(&str, u64)> = None;
        for (name, count) in by_name {
            if best.is_none_or(|(_, c)| count > c) {
                best = Some((name, count));
            }
        }
        best.map(|(n, _)| n)
    }

    /// Number of channel lines per class.
    pub fn class_counts(&self) -> BTreeMap<TransportClass, u64> {
        let mut m = BTreeMap::new();
        for t in &self.transports {
            *m.entry(t.class).or_insert(0u64) += t.count;
        }
        m
    }

    /// The network plugin(s) loaded (`Using network X`), most frequent first.
    pub fn network_plugin(&self) -> Option<&str> {
        self.networks
            .iter()
            .max_by_key(|n| n.count)
            .map(|n| n.name.as_str())
    }

    /// Decide whether the expected transport carried the traffic.
    ///
    /// `expected` is a network name (`IB`, `Socket`, `GPUDirectTCPX`, `gIB`, optionally
    /// written `NET/IB`), compared case-insensitively with the channel lines' `NET/<name>`;
    /// a name matches when it equals the expected one or extends it with a version suffix
    /// (`GPUDirectTCPX_v7` for `GPUDirectTCPX`), so `IB` does not match `gIB`. An expected
    /// `P2P` or `SHM` (or `P2P/CUMEM`, ...) is compared as a prefix of the intra-node
    /// `via` texts instead.
    pub fn transport_match(&self, expected: &str) -> TransportMatch {
        let exp = expected.trim();
        let exp = exp
            .strip_prefix("NET/")
            .or_else(|| exp.strip_prefix("net/"))
            .unwrap_or(exp);
        let exp_l = exp.to_ascii_lowercase();
        let intra =
            exp_l.starts_with("p2p") || exp_l.starts_with("shm") || exp_l.starts_with("nvls");
        let mut seen: Vec<String> = Vec::new();
        let mut hit = false;
        let mut miss = false;
        for t in &self.transports {
            let (name, matches) = if intra {
                if t.class != TransportClass::IntraNode {
                    continue;
                }
                let v = t.via.to_ascii_lowercase();
                (t.via.clone(), v.starts_with(&exp_l))
            } else {
                if t.class != TransportClass::Network {
                    continue;
                }
                let Some(n) = t.net_name.as_deref() else {
                    continue;
                };
                (n.to_string(), net_name_matches(n, exp))
            };
            if matches {
                hit = true;
            } else {
                miss = true;
            }
            push_unique(&mut seen, &name);
        }
        match (hit, miss) {
            (true, false) => TransportMatch::Used,
            (true, true) => TransportMatch::Mixed { seen },
            (false, true) => TransportMatch::Other { seen },
            (false, false) => TransportMatch::NoEvidence,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(lines: &[&str]) -> NcclDebugInfo {
        let mut c = DebugCollector::default();
        for (i, l) in lines.iter().enumerate() {
            if let Some(d) = parse_debug_line(l) {
                c.add(&d, i + 1);
            }
        }
        c.finish()
    }

    /// The other names of one transport count as it in a log's verdict; a different
    /// transport whose name contains it (`gIB`) does not.
    #[test]
    fn same_transport_by_its_other_names() {
        assert!(same_transport("IBext_v8", "IB"));
        assert!(same_transport("IBext", "NET/IB"));
        assert!(same_transport("AWS Libfabric", "Libfabric"));
        assert!(same_transport("Libfabric", "AWS Libfabric"));
        assert!(same_transport("GPUDirectTCPX_v7", "GPUDirectTCPX"));
        assert!(!same_transport("gIB", "IB"));
        assert!(!same_transport("IB", "gIB"));
        assert!(!same_transport("Socket", "IB"));
        assert!(!same_transport("IBext_v8", "Libfabric"));
        // The live-run match stays the profile's own name.
        assert!(!net_name_matches("IBext_v8", "IB"));
    }

    #[test]
    fn parses_debug_prefix() {
        let d = parse_debug_line("vm:1518:1529 [0] NCCL INFO Using network Socket").unwrap();
        assert_eq!(d.host, Some("vm"));
        assert_eq!(d.level, "INFO");
        assert_eq!(d.message, "Using network Socket");
        assert!(parse_debug_line("# nThread 1 nGpus 2").is_none());
    }

    #[test]
    fn classifies_vias() {
        assert_eq!(classify_via("P2P/CUMEM").0, TransportClass::IntraNode);
        assert_eq!(
            classify_via("P2P/direct pointer").0,
            TransportClass::IntraNode
        );
        assert_eq!(
            classify_via("SHM/direct/direct").0,
            TransportClass::IntraNode
        );
        assert_eq!(
            classify_via("NET/Socket/0"),
            (TransportClass::Network, Some("Socket".into()))
        );
        assert_eq!(classify_via("NET/IB/0(1)/GDRDMA").1.as_deref(), Some("IB"));
        assert_eq!(
            classify_via("NET/AWS Libfabric/0/GDRDMA").1.as_deref(),
            Some("AWS Libfabric")
        );
        assert_eq!(classify_via("COLLNET/IB/0").0, TransportClass::CollNet);
    }

    #[test]
    fn plugin_loaded_is_not_the_path() {
        // Single node over NVLink: the Socket plugin is loaded, but no channel uses it.
        let info = collect(&[
            "vm:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0",
            "vm:1:1 [0] NCCL INFO Using network Socket",
            "vm:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
        ]);
        assert_eq!(info.network_plugin(), Some("Socket"));
        assert_eq!(info.network_transport(), None);
        assert_eq!(info.transport_match("IB"), TransportMatch::NoEvidence);
        assert_eq!(info.transport_match("P2P"), TransportMatch::Used);
        assert_eq!(info.nccl_version.as_deref(), Some("2.28.9"));
        assert_eq!(info.cuda_version.as_deref(), Some("13.0"));
    }

    #[test]
    fn tcpx_expected_but_socket_used_is_other() {
        let info = collect(&[
            "a3h-001:7:7 [0] NCCL INFO Using network GPUDirectTCPX_v7",
            "a3h-001:7:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0",
            "a3h-002:7:7 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/1",
        ]);
        assert_eq!(info.network_transport(), Some("Socket"));
        assert_eq!(
            info.transport_match("GPUDirectTCPX"),
            TransportMatch::Other {
                seen: vec!["Socket".into()]
            }
        );
        assert_eq!(info.transports.len(), 2);
        assert_eq!(
            info.hosts,
            vec!["a3h-001".to_string(), "a3h-002".to_string()]
        );
    }

    #[test]
    fn version_suffix_matches_but_gib_is_not_ib() {
        let info = collect(&[
            "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/GPUDirectTCPX_v7/0",
            "h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/gIB/0/GDRDMA",
        ]);
        assert_eq!(
            info.transport_match("NET/GPUDirectTCPX"),
            TransportMatch::Mixed {
                seen: vec!["GPUDirectTCPX_v7".into(), "gIB".into()]
            }
        );
        assert!(matches!(
            info.transport_match("IB"),
            TransportMatch::Other { .. }
        ));
    }

    #[test]
    fn nics_each_transport_uses_by_host() {
        let info = collect(&[
            "node1:696:696 [0] NCCL INFO NET/IB : Using [RO]; OOB eth1:10.213.1.1<0>",
            "node1:696:696 [0] NCCL INFO NET/Socket : Using [0]eth1:10.213.1.1<0>",
            "node2:697:697 [0] NCCL INFO NET/Socket : Using [0]eth0:10.77.0.2<0> [1]eth1:10.77.1.2<0>",
            "a3u:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.2<0>",
            "a3h:1:1 [0] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'",
        ]);
        let socket: Vec<(&str, &[String])> = info
            .nics_of("socket")
            .iter()
            .map(|n| (n.nic.as_str(), n.hosts.as_slice()))
            .collect();
        assert_eq!(
            socket,
            [
                ("eth0", &["node2".to_string()][..]),
                ("eth1", &["node1".to_string(), "node2".to_string()][..])
            ]
        );
        let ib: Vec<&str> = info.nics_of("IB").iter().map(|n| n.nic.as_str()).collect();
        assert_eq!(
            ib,
            ["mlx5_0", "mlx5_1"],
            "[RO] and the OOB interface are no NICs"
        );
    }

    #[test]
    fn env_and_nodes_and_warnings() {
        let info = collect(&[
            "vm:2:2 [1] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.",
            "vm:2:2 [1] NCCL INFO comm 0x55 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
            "vm:2:2 [1] NCCL WARN NET/Socket : message truncated",
        ]);
        assert_eq!(info.env[0].name, "NCCL_P2P_DISABLE");
        assert_eq!(info.env[0].value, "1");
        assert_eq!(info.n_nodes, Some(2));
        assert_eq!(info.n_ranks, Some(2));
        assert_eq!(info.warnings.len(), 1);
    }
}
