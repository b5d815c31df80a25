//! `gpudirect log`'s verdict: a job's NCCL log ([`nccl_output::joblog`]) held against the
//! profile its nodes run. Pure: the command reads the files and prints.
//!
//! For each communicator whose links left the node, and each of its ranks:
//! - **the transport**: every `NET/<name>` link must be the profile's `transport`
//!   (`GPUDirectTCPX_v7` is `GPUDirectTCPX`; `gIB` is not `IB`);
//! - **the NIC**: where the profile maps GPUs to NICs (`gpu_nics`, renamed by the node's
//!   node set), the rank's network links must use its GPU's NIC alone; the GPU is the
//!   node's own number (`nvmlDev`), never `cudaDev` (an index into the task's
//!   `CUDA_VISIBLE_DEVICES`). Without `gpu_nics`, the links must stay on the data NICs;
//! - **its init**: a rank that started a communicator's init and never completed it.
//!
//! Besides: NCCL errors, timeouts and torch's watchdog, in NCCL's lines or the program's.
//! What the log cannot judge (no link left the node, no GPU number, NICs from sysfs, no
//! profile) is said, never guessed.

pub mod input;
pub mod text;

use std::collections::{BTreeMap, BTreeSet};

use gpudirect_core::config::{Config, NicLocality, Profile};
use gpudirect_core::hostlist;
use nccl_output::joblog::{
    error_return, CommRank, Communicator, Event, EventKind, InitState, JobLog, Link,
};
use nccl_output::transport::same_transport;
use nccl_output::TransportClass;
use serde::Serialize;

/// Which profile a log is judged by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileChoice {
    /// `--gpudirect NAME`: this profile for every rank.
    Named(String),
    /// `--gpudirect none`: no profile; nothing to judge the paths by.
    None,
    /// The profile of each rank's node set in the config (`--gpudirect auto`, the default).
    NodeSets,
}

/// What kind of thing a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A link over another transport than the profile's.
    Transport,
    /// A link over another NIC than the one the profile gives the rank's GPU.
    Nic,
    /// A network link without GPUDirect RDMA where the profile expects it (`gdr = true`).
    Gdr,
    /// An init that started and never completed.
    Init,
    /// An NCCL error, a timeout, a watchdog line.
    Trouble,
    /// CollNet given up for the point-to-point network (rule K6).
    #[serde(rename = "collnet")]
    CollNet,
}

/// One thing found wrong, with the ranks and nodes it concerns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What it is about.
    pub kind: FindingKind,
    /// The communicator (`commId`), when it concerns one.
    pub communicator: Option<String>,
    /// The ranks (in that communicator; for trouble, as tagged).
    pub ranks: Vec<u32>,
    /// Their nodes, sorted.
    pub hosts: Vec<String>,
    /// The sentence for the user.
    pub message: String,
}

/// The verdict on a log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Judgement {
    /// The profiles the ranks were judged by, by name (what each expects, in words).
    pub profiles: BTreeMap<String, String>,
    /// What is wrong.
    pub findings: Vec<Finding>,
    /// What the log could not judge, and why.
    pub unjudged: Vec<String>,
}

impl Judgement {
    /// Whether anything was found wrong.
    pub fn has_findings(&self) -> bool {
        !self.findings.is_empty()
    }
}

/// A hostlist of `hosts` (`node[5,9,12]`).
fn hostlist_of<'a>(hosts: impl IntoIterator<Item = &'a str>) -> String {
    let set: BTreeSet<&str> = hosts.into_iter().collect();
    let list: Vec<&str> = set.into_iter().collect();
    hostlist::compress(&list)
}

/// `ranks 0-3,8` / `rank 5`.
fn rank_list(ranks: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let start = ranks[i];
        let mut end = start;
        while i + 1 < ranks.len() && ranks[i + 1] == end + 1 {
            end += 1;
            i += 1;
        }
        parts.push(if end > start {
            format!("{start}-{end}")
        } else {
            start.to_string()
        });
        i += 1;
    }
    let word = if ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{word} {}", parts.join(","))
}

/// The profile rank `rank` is judged by, or why there is none.
fn profile_for<'c>(
    config: &'c Config,
    choice: &ProfileChoice,
    host: Option<&str>,
) -> Result<&'c Profile, String> {
    let name = match choice {
        ProfileChoice::None => return Err("--gpudirect none: no profile to judge by".into()),
        ProfileChoice::Named(name) => name.as_str(),
        ProfileChoice::NodeSets => {
            let Some(host) = host else {
                return Err("its lines carry no host name, so no node set applies".into());
            };
            match config.node_set_for(host).and_then(|s| s.profile.as_deref()) {
                Some(name) => name,
                None => {
                    return Err(format!(
                        "no node set with a profile covers {host}: pass --gpudirect MODE"
                    ))
                }
            }
        }
    };
    config
        .profiles
        .get(name)
        .ok_or_else(|| format!("the config has no profile {name}"))
}

/// What a profile expects, in words (`NET/Socket; GPU i -> eth1, eth2, ...`).
fn expectation(profile: &Profile) -> String {
    let transport = profile
        .transport
        .as_deref()
        .map_or("no transport named".to_string(), |t| format!("NET/{t}"));
    let nics = match profile.nic_locality {
        NicLocality::Sysfs => "each GPU's NIC from the node's sysfs".to_string(),
        NicLocality::Config if !profile.gpu_nics.is_empty() => {
            format!("GPU i -> {}", profile.gpu_nics.join(", "))
        }
        NicLocality::Config if !profile.data_nics.is_empty() => {
            format!("data NICs {}", profile.data_nics.join(", "))
        }
        NicLocality::Config => "no NICs named".to_string(),
    };
    let gdr = match profile.gdr {
        Some(true) => "; GPUDirect RDMA",
        Some(false) | None => "",
    };
    format!("{transport}; {nics}{gdr}")
}

/// The NIC name `logical` has on `host` (its node set's `nic_names`).
fn renamed(config: &Config, host: Option<&str>, logical: &str) -> String {
    host.and_then(|h| config.node_set_for(h))
        .and_then(|s| s.nic_names.get(logical))
        .cloned()
        .unwrap_or_else(|| logical.to_string())
}

/// The network transports and NICs one rank's links used.
fn network_use(rank: &CommRank) -> (BTreeSet<&str>, BTreeSet<&str>) {
    let mut nets = BTreeSet::new();
    let mut nics = BTreeSet::new();
    for l in &rank.links {
        if l.class == TransportClass::Network {
            if let Some(n) = l.net.as_deref() {
                nets.insert(n);
            }
            if let Some(nic) = l.nic.as_deref() {
                nics.insert(nic);
            }
        }
    }
    (nets, nics)
}

/// Judges `log` by the profiles `choice` picks from `config`.
pub fn judge(log: &JobLog, config: Option<&Config>, choice: &ProfileChoice) -> Judgement {
    let mut j = Judgement::default();
    if log.communicators.is_empty() {
        j.unjudged.push(
            "no communicator: the log has no communicator's init lines (run the job with \
             NCCL_DEBUG=INFO; NCCL_DEBUG_SUBSYS, if set, must include INIT and NET)"
                .into(),
        );
    }
    // Without a profile the paths are only read; inits and trouble are judged anyway.
    let by = match (config, choice) {
        (_, ProfileChoice::None) => {
            j.unjudged
                .push("--gpudirect none: the paths are read, not judged against a profile".into());
            None
        }
        (None, _) => {
            j.unjudged.push(
                "no config was read: the paths are not judged against a profile (pass \
                 --config FILE, or --gpudirect MODE with it)"
                    .into(),
            );
            None
        }
        (Some(config), choice) => Some((config, choice)),
    };
    // The process entries that logged trouble of their own.
    // RAS's own warnings (its client port, 2.24+) say nothing of a communicator's init.
    let troubled: BTreeSet<usize> = log
        .events
        .iter()
        .filter(|e| !e.about_ras())
        .filter_map(|e| e.process)
        .collect();
    for comm in &log.communicators {
        judge_comm(comm, by, &troubled, &mut j);
    }
    if let Some((config, choice)) = by {
        judge_loose(log, config, choice, &mut j);
        if !any_network_link(log) {
            judge_networks(log, config, choice, &mut j);
        }
    }
    trouble(log, &mut j);
    j
}

/// `communicator 0x.. (256 ranks, 32 nodes)`.
fn comm_name(comm: &Communicator) -> String {
    let ranks = comm.nranks.unwrap_or(comm.ranks.len() as u32);
    let nodes = comm.nnodes.unwrap_or(comm.hosts().len() as u32);
    format!(
        "communicator {} ({ranks} rank{}, {nodes} node{})",
        comm.id,
        if ranks == 1 { "" } else { "s" },
        if nodes == 1 { "" } else { "s" }
    )
}

fn judge_comm(
    comm: &Communicator,
    by: Option<(&Config, &ProfileChoice)>,
    troubled: &BTreeSet<usize>,
    j: &mut Judgement,
) {
    let name = comm_name(comm);
    let logged = comm.ranks.len() as u32;
    if let Some(n) = comm.nranks.filter(|&n| n > logged) {
        j.unjudged.push(format!(
            "{name}: {logged} of its {n} ranks are in the log (give every rank's output)"
        ));
    }
    // Started and never completed, with trouble from the same process: a finding whatever
    // the profile. Without trouble the log may just be cut there (an excerpt, a job still
    // initialising): said, not found.
    let (stuck, cut): (Vec<&CommRank>, Vec<&CommRank>) = comm
        .ranks
        .iter()
        .filter(|r| r.init == InitState::Started)
        .partition(|r| troubled.contains(&r.process));
    if !cut.is_empty() {
        j.unjudged.push(format!(
            "{name}: {} started its init and the log ends before it completed (no warning \
             from those ranks: cut short, or still initialising)",
            rank_list(&cut.iter().map(|r| r.rank).collect::<Vec<_>>())
        ));
    }
    if !stuck.is_empty() {
        let ranks: Vec<u32> = stuck.iter().map(|r| r.rank).collect();
        let hosts = hostlist_of(stuck.iter().filter_map(|r| r.host.as_deref()));
        j.findings.push(Finding {
            kind: FindingKind::Init,
            communicator: Some(comm.id.clone()),
            hosts: split_hosts(&stuck),
            message: format!(
                "{name}: {} on {hosts} started its init and never completed it, with \
                 warnings (below)",
                rank_list(&ranks)
            ),
            ranks,
        });
    }
    let Some((config, choice)) = by else {
        return;
    };
    if !comm.uses_network() {
        if comm.nranks.unwrap_or(logged) > 1 {
            j.unjudged.push(format!(
                "{name}: no link left the node in the log (all P2P/SHM, or its channels were \
                 never connected): nothing to judge the network path by"
            ));
        }
        return;
    }
    // (used transports, expected) -> ranks; (used NICs, expected NIC, gpu) -> ranks.
    let mut off_transport: BTreeMap<OffTransport, Vec<&CommRank>> = BTreeMap::new();
    let mut off_nic: BTreeMap<(String, String), Vec<&CommRank>> = BTreeMap::new();
    let mut off_gdr: BTreeMap<(String, String), Vec<&CommRank>> = BTreeMap::new();
    let mut why_not: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for rank in &comm.ranks {
        let (nets, nics) = network_use(rank);
        if nets.is_empty() {
            continue;
        }
        let (profile, off) = match transport_check(config, choice, rank.host.as_deref(), &nets, j) {
            Ok(checked) => checked,
            Err(why) => {
                why_not.entry(why).or_default().push(rank.rank);
                continue;
            }
        };
        if let Some(key) = off {
            off_transport.entry(key).or_default().push(rank);
        }
        if let Some(without) = gdr_verdict(profile, &rank.links) {
            off_gdr
                .entry((without, profile.name.clone()))
                .or_default()
                .push(rank);
        }
        match nic_verdict(config, profile, rank, &nics) {
            Ok(None) => {}
            Ok(Some(key)) => off_nic.entry(key).or_default().push(rank),
            Err(why) => why_not.entry(why).or_default().push(rank.rank),
        }
    }
    // One finding per group of ranks: `say` words it from the ranks' list and hosts.
    let mut push = |kind: FindingKind, ranks: &[&CommRank], say: &dyn Fn(&str, &str) -> String| {
        let list: Vec<u32> = ranks.iter().map(|r| r.rank).collect();
        let hosts = hostlist_of(ranks.iter().filter_map(|r| r.host.as_deref()));
        j.findings.push(Finding {
            kind,
            communicator: Some(comm.id.clone()),
            hosts: split_hosts(ranks),
            message: say(&rank_list(&list), &hosts),
            ranks: list,
        });
    };
    for ((used, profile, transport), ranks) in off_transport {
        push(FindingKind::Transport, &ranks, &|ranks, hosts| {
            format!(
                "{name} used {used} on {hosts} ({ranks}): the profile {profile}'s transport \
                 {transport} did not carry its traffic there"
            )
        });
    }
    for ((without, profile), ranks) in off_gdr {
        push(FindingKind::Gdr, &ranks, &|ranks, hosts| {
            format!(
                "{name}: {ranks} on {hosts}: {without}: the profile {profile} expects \
                 GPUDirect RDMA (gdr = true)"
            )
        });
    }
    for ((used, expected), ranks) in off_nic {
        push(FindingKind::Nic, &ranks, &|ranks, hosts| {
            format!("{name}: {ranks} on {hosts} used {used}: {expected}")
        });
    }
    for (why, ranks) in why_not {
        j.unjudged
            .push(format!("{name}: {} not judged: {why}", rank_list(&ranks)));
    }
}

/// The channel lines outside every communicator (an excerpt without the init lines): their
/// transport against each host's profile. Their GPU is unknown, so their NIC is not judged.
fn judge_loose(log: &JobLog, config: &Config, choice: &ProfileChoice, j: &mut Judgement) {
    let mut off: BTreeMap<OffTransport, BTreeSet<&str>> = BTreeMap::new();
    let mut off_gdr: BTreeMap<(String, String), BTreeSet<&str>> = BTreeMap::new();
    // Each host's links and profile, for GDR: one verdict per host, its processes together.
    let mut by_host: BTreeMap<&str, (&Profile, Vec<&Link>)> = BTreeMap::new();
    let mut any = false;
    for p in &log.processes {
        let nets: BTreeSet<&str> = p
            .links
            .iter()
            .filter(|l| l.class == TransportClass::Network)
            .filter_map(|l| l.net.as_deref())
            .collect();
        if nets.is_empty() {
            continue;
        }
        any = true;
        let host = p.host.as_deref().unwrap_or("?");
        if let Ok((profile, key)) = transport_check(config, choice, p.host.as_deref(), &nets, j) {
            if let Some(key) = key {
                off.entry(key).or_default().insert(host);
            }
            by_host
                .entry(host)
                .or_insert((profile, Vec::new()))
                .1
                .extend(&p.links);
        }
    }
    for (host, (profile, links)) in by_host {
        if let Some(without) = gdr_verdict(profile, links) {
            off_gdr
                .entry((without, profile.name.clone()))
                .or_default()
                .insert(host);
        }
    }
    for ((without, profile), hosts) in off_gdr {
        j.findings
            .push(host_finding(FindingKind::Gdr, &hosts, |on| {
                format!(
                "channel lines outside any communicator's init on {on}: {without}: the profile \
                 {profile} expects GPUDirect RDMA (gdr = true)"
            )
            }));
    }
    for ((used, profile, transport), hosts) in off {
        j.findings
            .push(host_finding(FindingKind::Transport, &hosts, |on| {
                format!(
                    "channel lines outside any communicator's init used {used} on {on}: the \
                 profile {profile}'s transport {transport} did not carry their traffic there"
                )
            }));
    }
    if any {
        j.unjudged.push(
            "channel lines outside any communicator's init (the log starts after it): their \
             GPU is not in the log, so their NIC is not judged"
                .into(),
        );
    }
}

/// Where `profile` expects GPUDirect RDMA (`gdr = true`), which of `links` between nodes
/// (or whose nodes the log does not tell) go without it, in words: `NET/IB/3 without
/// GPUDirect RDMA (send and receive)`. `None` when all have it, or nothing is expected.
fn gdr_verdict<'a>(profile: &Profile, links: impl IntoIterator<Item = &'a Link>) -> Option<String> {
    if profile.gdr != Some(true) {
        return None;
    }
    // Per path: (with GDRDMA, send lines, receive lines).
    let mut paths: BTreeMap<&str, (bool, u64, u64)> = BTreeMap::new();
    for l in links {
        if l.class == TransportClass::Network && l.inside_node() != Some(true) {
            let e = paths.entry(l.via.as_str()).or_insert((l.gdrdma, 0, 0));
            e.1 += l.send_channels;
            e.2 += l.receive_channels;
        }
    }
    let without: Vec<String> = paths
        .iter()
        .filter(|(_, (gdr, ..))| !gdr)
        .map(|(via, (_, send, receive))| {
            let sides = match (*send > 0, *receive > 0) {
                (true, true) => " (send and receive)",
                (true, false) => " (send)",
                (false, true) => " (receive)",
                (false, false) => "",
            };
            format!("{via}{sides}")
        })
        .collect();
    if without.is_empty() {
        return None;
    }
    let of = if without.len() < paths.len() {
        format!(" ({} of {} network paths)", without.len(), paths.len())
    } else {
        String::new()
    };
    Some(format!("{} without GPUDirect RDMA{of}", without.join(", ")))
}

/// A finding about hosts, not a communicator's ranks: `say` words it from their hostlist.
fn host_finding(
    kind: FindingKind,
    hosts: &BTreeSet<&str>,
    say: impl FnOnce(&str) -> String,
) -> Finding {
    Finding {
        kind,
        communicator: None,
        ranks: Vec::new(),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        message: say(&hostlist_of(hosts.iter().copied())),
    }
}

/// Whether any channel line of the log, in a communicator or outside, left a node.
pub fn any_network_link(log: &JobLog) -> bool {
    let network = |l: &Link| matches!(l.class, TransportClass::Network | TransportClass::CollNet);
    log.communicators
        .iter()
        .flat_map(|c| &c.ranks)
        .flat_map(|r| &r.links)
        .chain(log.processes.iter().flat_map(|p| &p.links))
        .any(network)
}

/// A log without channel lines, only `Using network X` (a grep, rule K4): each process's
/// net plugin against its profile's transport. What a channel carried is not in it: said.
fn judge_networks(log: &JobLog, config: &Config, choice: &ProfileChoice, j: &mut Judgement) {
    let mut off: BTreeMap<OffTransport, (BTreeSet<&str>, usize)> = BTreeMap::new();
    let mut any = false;
    for p in &log.processes {
        let nets: BTreeSet<&str> = p.networks.iter().map(String::as_str).collect();
        if nets.is_empty() {
            continue;
        }
        any = true;
        if let Ok((_, Some(key))) = transport_check(config, choice, p.host.as_deref(), &nets, j) {
            let e = off.entry(key).or_default();
            e.0.insert(p.host.as_deref().unwrap_or("?"));
            e.1 += 1;
        }
    }
    for ((used, profile, transport), (hosts, processes)) in off {
        j.findings
            .push(host_finding(FindingKind::Transport, &hosts, |on| {
                format!(
                "{processes} process{} on {on} loaded the net plugin {} (`Using network`): the \
                 profile {profile}'s transport is {transport}",
                if processes == 1 { "" } else { "es" },
                used.replace("NET/", "")
            )
            }));
    }
    if any {
        j.unjudged.push(
            "no channel line in the log, only `Using network` lines: they name the net plugin \
             each process loaded, not what carried its traffic"
                .into(),
        );
    }
}

/// Network transports used that are not the profile's: (`NET/Socket and NET/IB`, the
/// profile's name, its transport).
type OffTransport = (String, String, String);

/// The profile a rank (or a process) on `host` is judged by, noted in `j.profiles`, and,
/// when its network links took another transport than the profile's, which ones (`Err`: why
/// no profile applies).
fn transport_check<'c>(
    config: &'c Config,
    choice: &ProfileChoice,
    host: Option<&str>,
    nets: &BTreeSet<&str>,
    j: &mut Judgement,
) -> Result<(&'c Profile, Option<OffTransport>), String> {
    let profile = profile_for(config, choice, host)?;
    j.profiles
        .entry(profile.name.clone())
        .or_insert_with(|| expectation(profile));
    let off = profile.transport.as_ref().and_then(|expected| {
        nets.iter().any(|n| !same_transport(n, expected)).then(|| {
            let used: Vec<String> = nets.iter().map(|n| format!("NET/{n}")).collect();
            (used.join(" and "), profile.name.clone(), expected.clone())
        })
    });
    Ok((profile, off))
}

/// The hosts of `ranks`, sorted and distinct.
fn split_hosts(ranks: &[&CommRank]) -> Vec<String> {
    let set: BTreeSet<&str> = ranks.iter().filter_map(|r| r.host.as_deref()).collect();
    set.into_iter().map(str::to_string).collect()
}

/// Whether `rank`'s network NICs are the one its profile gives its GPU: `Ok(None)` yes,
/// `Ok(Some((used, expected)))` no (both in words), `Err(why)` when it cannot be told.
fn nic_verdict(
    config: &Config,
    profile: &Profile,
    rank: &CommRank,
    used: &BTreeSet<&str>,
) -> Result<Option<(String, String)>, String> {
    if profile.nic_locality == NicLocality::Sysfs {
        return Err(format!(
            "profile {} takes each GPU's NIC from the node's sysfs (nic_locality = \"sysfs\"), \
             which the log does not show: `gpudirect probe` says which NIC each task got",
            profile.name
        ));
    }
    if used.is_empty() {
        return Err(
            "its links name device numbers its process never listed (no `NET/... : \
                    Using [N]nic` line)"
                .into(),
        );
    }
    let host = rank.host.as_deref();
    let used_words = used.iter().copied().collect::<Vec<_>>().join(", ");
    if !profile.gpu_nics.is_empty() {
        let Some(gpu) = rank.nvml_dev else {
            return Err(
                "the log gives only cudaDev (an index into the task's CUDA_VISIBLE_DEVICES), \
                 not the node's GPU number (NCCL 2.18+ prints nvmlDev)"
                    .into(),
            );
        };
        let Some(logical) = profile.gpu_nics.get(gpu as usize) else {
            return Err(format!(
                "GPU {gpu} is beyond the {} entries of profile {}'s gpu_nics",
                profile.gpu_nics.len(),
                profile.name
            ));
        };
        let expected = renamed(config, host, logical);
        if used.len() == 1 && used.contains(expected.as_str()) {
            return Ok(None);
        }
        let alone = if used.contains(expected.as_str()) {
            " alone"
        } else {
            ""
        };
        return Ok(Some((
            used_words,
            format!(
                "the profile {} maps its GPU {gpu} to {expected}{alone}",
                profile.name
            ),
        )));
    }
    if profile.data_nics.is_empty() {
        return Ok(None);
    }
    let data: Vec<String> = profile
        .data_nics
        .iter()
        .map(|n| renamed(config, host, n))
        .collect();
    let outside: Vec<&str> = used
        .iter()
        .copied()
        .filter(|u| !data.iter().any(|d| d == u))
        .collect();
    if outside.is_empty() {
        return Ok(None);
    }
    Ok(Some((
        used_words,
        format!(
            "{} {} not among the data NICs of profile {} ({})",
            outside.join(", "),
            if outside.len() == 1 { "is" } else { "are" },
            profile.name,
            data.join(", ")
        ),
    )))
}

/// Rule K6: NCCL gave CollNet up and went on over the point-to-point network (`Cannot
/// initialize CollNet, using point-to-point network instead`, `transport.cc` 2.11 to 2.30,
/// printed by each node's local rank 0; `init.cc` ignores the CollNet setup's result). The
/// error returns from `transport.cc` and `init.cc` that precede it in the same input are
/// that setup failing, not the job: (the last such warning, those error lines).
fn collnet_fallback(log: &JobLog) -> Option<(&Event, Vec<&Event>)> {
    let warning = log
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Warning)
        .rfind(|e| e.text.contains("Cannot initialize CollNet"))?;
    let setup = log
        .events
        .iter()
        .filter(|e| {
            e.kind == EventKind::Error
                && e.source == warning.source
                && e.line < warning.line
                && collnet_setup_return(&e.text)
        })
        .collect();
    Some((warning, setup))
}

/// Whether an error line is an error return (`transport.cc:291 -> 2`, as the reader keeps
/// it, with the code's name after it) from `transport.cc` or `init.cc`.
fn collnet_setup_return(text: &str) -> bool {
    let Some((place, code)) = text.split_once(" -> ") else {
        return false;
    };
    let code = code.split_whitespace().next().unwrap_or("");
    error_return(&format!("{place} -> {code}")).is_some()
        && place.rsplit_once(':').is_some_and(|(file, _)| {
            let file = file.rsplit('/').next().unwrap_or(file);
            file == "transport.cc" || file == "init.cc"
        })
}

/// Errors, timeouts and watchdog lines as findings, one per kind, naming ranks and nodes; a
/// CollNet fallback as its own finding, its setup's error returns in it (rule K6).
fn trouble(log: &JobLog, j: &mut Judgement) {
    let fallback = collnet_fallback(log);
    let setup: Vec<&Event> = fallback.as_ref().map_or(Vec::new(), |f| f.1.clone());
    if let Some((warning, _)) = &fallback {
        let hosts: BTreeSet<&str> = std::iter::once(warning)
            .chain(&setup)
            .filter_map(|e| e.host.as_deref())
            .collect();
        let returns = if setup.is_empty() {
            String::new()
        } else {
            let on: BTreeSet<&str> = setup.iter().filter_map(|e| e.host.as_deref()).collect();
            format!(
                "; the {} error return{} before it{} are that setup failing, not the job",
                setup.len(),
                if setup.len() == 1 { "" } else { "s" },
                if on.is_empty() {
                    String::new()
                } else {
                    format!(" (on {})", hostlist_of(on.iter().copied()))
                }
            )
        };
        j.findings.push(Finding {
            kind: FindingKind::CollNet,
            communicator: None,
            ranks: Vec::new(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            message: format!(
                "CollNet was given up on {} (line {} of input {}: {}): collectives run over the \
                 point-to-point network, without SHARP{returns}",
                warning.host.as_deref().unwrap_or("a node"),
                warning.line,
                warning.source + 1,
                warning.text
            ),
        });
    }
    for kind in [EventKind::Watchdog, EventKind::Timeout, EventKind::Error] {
        let events: Vec<_> = log
            .events
            .iter()
            .filter(|e| e.kind == kind && !setup.iter().any(|s| std::ptr::eq(*s, *e)))
            .collect();
        let Some(first) = events.first() else {
            continue;
        };
        let total = log
            .event_counts
            .get(kind.as_str())
            .copied()
            .unwrap_or(0)
            .saturating_sub(if kind == EventKind::Error {
                setup.len() as u64
            } else {
                0
            });
        let ranks: BTreeSet<u32> = events.iter().filter_map(|e| e.rank).collect();
        let hosts: BTreeSet<&str> = events.iter().filter_map(|e| e.host.as_deref()).collect();
        let ranks: Vec<u32> = ranks.into_iter().collect();
        let who = match (ranks.is_empty(), hosts.is_empty()) {
            (true, true) => "rank and node not in the log".to_string(),
            (false, true) => rank_list(&ranks),
            (true, false) => format!("on {}", hostlist_of(hosts.iter().copied())),
            (false, false) => format!(
                "{} on {}",
                rank_list(&ranks),
                hostlist_of(hosts.iter().copied())
            ),
        };
        j.findings.push(Finding {
            kind: FindingKind::Trouble,
            communicator: None,
            ranks,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            message: format!(
                "{total} {} line{} ({who}); the first, line {} of input {}: {}",
                kind.as_str(),
                if total == 1 { "" } else { "s" },
                first.line,
                first.source + 1,
                first.text
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_output::joblog::read_str;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/nccl-logs");

    fn config() -> Config {
        let text = "[profiles.bed]\ntransport = \"Socket\"\ndata_nics = [\"eth1\", \"eth2\"]\n\
                    gpu_nics = [\"eth1\", \"eth2\"]\n\
                    [profiles.ib]\ntransport = \"IB\"\ndata_nics = [\"mlx5_0\"]\n\
                    gpu_nics = [\"mlx5_0\"]\ndata_nic_class = \"infiniband\"\n\
                    [profiles.sys]\ntransport = \"Socket\"\nnic_locality = \"sysfs\"\n\
                    data_nics = [\"eth1\"]\n\
                    gpu_nics = [\"eth1\"]\n\
                    [[node_set]]\nname = \"nodes\"\nhosts = \"node[1-9]\"\nprofile = \"bed\"\n";
        gpudirect_core::config::parse_config(text, "test.toml").unwrap()
    }

    fn log(rel: &str) -> JobLog {
        read_str(&std::fs::read_to_string(format!("{FIXTURES}/{rel}")).unwrap())
    }

    #[test]
    fn the_profiles_nic_and_transport_pass() {
        let log = log("lent-host/torch-srun-gpudirect-box-eth1-shaped.txt");
        let j = judge(&log, Some(&config()), &ProfileChoice::NodeSets);
        assert!(!j.has_findings(), "{j:#?}");
        assert!(j.unjudged.is_empty(), "{j:#?}");
        assert_eq!(
            j.profiles.get("bed").map(String::as_str),
            Some("NET/Socket; GPU i -> eth1, eth2")
        );
    }

    #[test]
    fn a_rank_on_two_nics_is_named_with_its_gpus_nic() {
        let log = log("lent-host/torch-srun-gpudirect-none-eth0-eth1-shaped.txt");
        let j = judge(&log, Some(&config()), &ProfileChoice::NodeSets);
        assert_eq!(j.findings.len(), 1, "{j:#?}");
        let f = &j.findings[0];
        assert_eq!(
            (f.kind, f.ranks.as_slice()),
            (FindingKind::Nic, &[0, 1][..])
        );
        assert_eq!(
            f.message,
            "communicator 0x470b5de4999c140a (2 ranks, 2 nodes): ranks 0-1 on node[1-2] used \
             eth0, eth1: the profile bed maps its GPU 0 to eth1 alone"
        );
    }

    #[test]
    fn another_transport_than_the_profiles_is_named_with_its_nodes() {
        let log = log("lent-host/torch-srun-gpudirect-box-eth1-shaped.txt");
        let j = judge(&log, Some(&config()), &ProfileChoice::Named("ib".into()));
        let kinds: Vec<FindingKind> = j.findings.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, [FindingKind::Transport, FindingKind::Nic], "{j:#?}");
        assert_eq!(
            j.findings[0].message,
            "communicator 0xd4ebc1f95cb89a5b (2 ranks, 2 nodes) used NET/Socket on node[1-2] \
             (ranks 0-1): the profile ib's transport IB did not carry its traffic there"
        );
    }

    #[test]
    fn what_cannot_be_judged_says_why() {
        let log = log("lent-host/torch-srun-gpudirect-box-eth1-shaped.txt");
        let j = judge(&log, Some(&config()), &ProfileChoice::Named("sys".into()));
        assert!(!j.has_findings(), "{j:#?}");
        assert!(j.unjudged[0].contains("nic_locality = \"sysfs\""), "{j:#?}");
        let j = judge(&log, None, &ProfileChoice::NodeSets);
        assert!(j.unjudged[0].contains("no config was read"), "{j:#?}");
        let j = judge(&log, Some(&config()), &ProfileChoice::None);
        assert!(j.unjudged[0].contains("--gpudirect none"), "{j:#?}");
        let empty = read_str("epoch 1 loss 0.3\n");
        let j = judge(&empty, Some(&config()), &ProfileChoice::NodeSets);
        assert!(j.unjudged[0].contains("NCCL_DEBUG=INFO"), "{j:#?}");
    }

    #[test]
    fn an_init_that_never_completed_and_a_watchdog_are_findings() {
        let log = read_str(
            "[rank0]:n1:1:1 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1 commId 0xab - Init START\n\
             [rank1]:n2:2:2 [0] NCCL INFO ncclCommInitRank comm 0x2 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1 commId 0xab - Init START\n\
             [rank0]:n1:1:1 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1 commId 0xab - Init COMPLETE\n\
             [rank1]:n2:2:9 [0] NCCL WARN socketProgress: Connection closed by remote peer\n\
             [rank0]:[E1201 10:00:00] [PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.\n",
        );
        let j = judge(&log, Some(&config()), &ProfileChoice::NodeSets);
        let got: Vec<(FindingKind, Vec<u32>, Vec<String>)> = j
            .findings
            .iter()
            .map(|f| (f.kind, f.ranks.clone(), f.hosts.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (FindingKind::Init, vec![1], vec!["n2".to_string()]),
                (FindingKind::Trouble, vec![0], vec!["n1".to_string()]),
            ],
            "{j:#?}"
        );
        assert!(j.findings[1]
            .message
            .starts_with("1 watchdog line (rank 0 on n1)"));
    }

    /// Issue #40 form 5: a profile with `gdr = true` finds network links without GDRDMA
    /// (nccl#1412: "I don't see GDRDMA being enabled on those IB NICs"), and not links that
    /// have it (nccl#707); without the key nothing is judged of it.
    #[test]
    fn gdr_is_judged_where_the_profile_expects_it() {
        let text = "[profiles.ib]\ntransport = \"IB\"\ndata_nic_class = \"infiniband\"\n\
                    data_nics = [\"mlx5_0\"]\ngdr = true\n\
                    [profiles.ib-any]\nextends = \"ib\"\ngdr = false\n";
        let config = gpudirect_core::config::parse_config(text, "t.toml").unwrap();
        let ib = ProfileChoice::Named("ib".into());
        let without = log("published/ib-nccl-1412-channels-no-gdrdma.txt");
        let j = judge(&without, Some(&config), &ib);
        let gdr: Vec<&Finding> = j
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::Gdr)
            .collect();
        assert_eq!(gdr.len(), 1, "{j:#?}");
        assert_eq!(gdr[0].hosts, ["swat1-04"]);
        assert!(
            gdr[0]
                .message
                .contains("NET/IB/3 (send and receive) without GPUDirect RDMA"),
            "{}",
            gdr[0].message
        );
        let with = log("published/ib-nccl-707-gdrdma-channels.txt");
        let j = judge(&with, Some(&config), &ib);
        assert!(
            !j.findings.iter().any(|f| f.kind == FindingKind::Gdr),
            "{j:#?}"
        );
        let j = judge(
            &without,
            Some(&config),
            &ProfileChoice::Named("ib-any".into()),
        );
        assert!(
            !j.findings.iter().any(|f| f.kind == FindingKind::Gdr),
            "{j:#?}"
        );
    }

    #[test]
    fn rank_lists_read_as_ranges() {
        assert_eq!(rank_list(&[0, 1, 2, 5, 7, 8]), "ranks 0-2,5,7-8");
        assert_eq!(rank_list(&[4]), "rank 4");
    }
}
