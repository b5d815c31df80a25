//! `gpudirect log`'s text: one line per communicator, the findings, and with `-v` each
//! rank, the plugins, the variables and every trouble line. Pure: lines, the command prints.

use std::collections::{BTreeMap, BTreeSet};

use nccl_output::joblog::{is_placeholder_host, CommRank, Communicator, InitState, JobLog, Link};
use nccl_output::TransportClass;

use super::{hostlist_of, Judgement};
use crate::units::human_size;

/// Trouble lines shown without `-v`.
const TROUBLE_SHOWN: usize = 5;

/// The paths a communicator's links took, in words: `NET/Socket over eth1; P2P/CUMEM
/// inside nodes`.
pub fn paths(comm: &Communicator) -> String {
    paths_of(comm.ranks.iter().flat_map(|r| &r.links))
}

/// [`paths`] of any links: the network transports with their NICs (links between nodes,
/// or whose nodes the log does not tell), GPUDirect RDMA on them (per direction when the
/// two sides differ), CollNet, then what runs inside nodes (P2P, SHM, and a NET path
/// between two ranks of one node).
fn paths_of<'a>(links: impl IntoIterator<Item = &'a Link>) -> String {
    let mut net: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut inside_net: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut inside: BTreeSet<String> = BTreeSet::new();
    let mut gdr = GdrSides::default();
    let mut inside_gdr = GdrSides::default();
    for l in links {
        match (l.class, &l.net) {
            (TransportClass::Network | TransportClass::CollNet, Some(name)) => {
                let head = if l.class == TransportClass::CollNet {
                    "COLLNET"
                } else {
                    "NET"
                };
                let nic = l
                    .nic
                    .clone()
                    .or_else(|| l.device.map(|d| format!("device {d}")));
                // A NET path with peers on its own node and on others (one rank's ring
                // and tree neighbours) runs both inside and between nodes: said in both.
                let network = l.class == TransportClass::Network;
                let within = network && l.peers_same_node > 0;
                let between = !network || l.inside_node() != Some(true);
                for (on, map, sides) in [
                    (between, &mut net, &mut gdr),
                    (within, &mut inside_net, &mut inside_gdr),
                ] {
                    if !on {
                        continue;
                    }
                    sides.add(l);
                    let e = map.entry(format!("{head}/{name}")).or_default();
                    if let Some(nic) = &nic {
                        e.insert(nic.clone());
                    }
                }
            }
            // Inside the node (P2P, SHM, NVLS), and anything else after `via`.
            _ => {
                inside.insert(l.via.clone());
            }
        }
    }
    let mut parts: Vec<String> = net.into_iter().map(over).collect();
    if let Some(words) = gdr.words() {
        parts.push(words);
    }
    // A NET path inside a node first: P2P and SHM were not used there.
    let mut within: Vec<String> = inside_net.into_iter().map(over).collect();
    if let (false, Some(words)) = (within.is_empty(), inside_gdr.words()) {
        let last = within.len() - 1;
        within[last] += &format!(" ({words})");
    }
    within.extend(inside);
    if !within.is_empty() {
        parts.push(format!("{} inside nodes", within.join(", ")));
    }
    if parts.is_empty() {
        "no channel connected in the log".into()
    } else {
        parts.join("; ")
    }
}

/// `NET/IB over mlx5_0, mlx5_1` (devices without a listed name: `device 3`).
fn over((name, nics): (String, BTreeSet<String>)) -> String {
    if nics.is_empty() {
        return name;
    }
    let (devices, names): (Vec<String>, Vec<String>) =
        nics.into_iter().partition(|n| n.starts_with("device "));
    let mut all = names;
    match devices.len() {
        0 => {}
        1 => all.extend(devices),
        _ => all.push(format!(
            "devices {}",
            devices
                .iter()
                .map(|d| d.trim_start_matches("device "))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
    format!("{name} over {}", all.join(", "))
}

/// Network links with and without GPUDirect RDMA, by side (rule K1: each direction of a
/// connection decides it apart).
#[derive(Debug, Default)]
struct GdrSides {
    /// (with, without) over `[send]` lines.
    send: (u64, u64),
    /// (with, without) over `[receive]` lines.
    receive: (u64, u64),
    /// (with, without) over links with no side (CollNet lines have one; NET lines too).
    links: (u64, u64),
}

impl GdrSides {
    fn add(&mut self, l: &Link) {
        let bump = |pair: &mut (u64, u64), n: u64| match l.gdrdma {
            true => pair.0 += n,
            false => pair.1 += n,
        };
        bump(&mut self.send, l.send_channels);
        bump(&mut self.receive, l.receive_channels);
        bump(&mut self.links, 1);
    }

    /// `GPUDirect RDMA`, `GPUDirect RDMA on receive only`, `GPUDirect RDMA on 3 of 8
    /// links`, or nothing when no network link has it.
    fn words(&self) -> Option<String> {
        let (with, without) = self.links;
        if with == 0 {
            return None;
        }
        if without == 0 {
            return Some("GPUDirect RDMA".into());
        }
        let only = |(w, wo): (u64, u64)| w > 0 && wo == 0;
        let none = |(w, wo): (u64, u64)| w == 0 && wo > 0;
        if only(self.receive) && none(self.send) {
            return Some("GPUDirect RDMA on receive only, not on send".into());
        }
        if only(self.send) && none(self.receive) {
            return Some("GPUDirect RDMA on send only, not on receive".into());
        }
        Some(format!(
            "GPUDirect RDMA on {with} of {} links",
            with + without
        ))
    }
}

/// `GDR off` / `GDR on` / `GDR on for 3 of 8 ranks`, from the `Connected all rings` lines.
fn gdr(comm: &Communicator) -> Option<String> {
    let flags: Vec<bool> = comm.ranks.iter().filter_map(|r| r.gdr).collect();
    let on = flags.iter().filter(|f| **f).count();
    match (flags.len(), on) {
        (0, _) => None,
        (_, 0) => Some("GDR off".into()),
        (n, on) if on == n => Some("GDR on".into()),
        (n, on) => Some(format!("GDR on for {on} of {n} ranks")),
    }
}

/// The one line of a communicator.
pub fn comm_line(comm: &Communicator) -> String {
    let ranks = comm.nranks.unwrap_or(comm.ranks.len() as u32);
    let hosts = comm.hosts();
    let plural = |n: u32| if n == 1 { "" } else { "s" };
    let mut line = format!("communicator {}: {ranks} rank{}", comm.id, plural(ranks));
    // Without nNodes, the nodes below are those of the ranks the log holds: say how many.
    let logged = comm.ranks.len() as u32;
    if comm.nnodes.is_none() && logged < ranks {
        line += &format!(", {logged} in the log");
    }
    // The node count says where it comes from when NCCL did not print it (rule L7).
    line += &match (comm.nnodes, comm.hosts_redacted()) {
        (Some(n), _) => format!(" on {n} node{}", plural(n)),
        (None, true) if hosts.is_empty() => " on ? nodes (host names redacted, no nNodes)".into(),
        (None, true) => format!(
            " on {} or more nodes (some host names redacted, no nNodes)",
            hosts.len()
        ),
        (None, false) => format!(
            " on {} node{} by host name",
            hosts.len(),
            plural(hosts.len() as u32)
        ),
    };
    if !hosts.is_empty() {
        line += &format!(" ({})", hostlist_of(hosts.iter().copied()));
    }
    line += &format!(": {}", paths(comm));
    if let Some(g) = gdr(comm) {
        line += &format!("; {g}");
    }
    if let Some(c) = comm.coll_channels {
        line += &format!("; {c} channel{}", if c == 1 { "" } else { "s" });
    }
    // Rule C4: NVLS set up (NVSwitch multicast); the collnet count says nothing from 2.21.
    if let Some(n) = comm.nvls_channels.filter(|n| *n > 0) {
        line += &format!("; NVLS on {n} channel{}", if n == 1 { "" } else { "s" });
    }
    if !comm.id_from_log {
        line += " (no commId in the log: matched by size and order)";
    }
    line
}

/// One rank's line (`-v`).
fn rank_line(log: &JobLog, r: &CommRank) -> String {
    let p = log.processes.get(r.process);
    let host = r.host.as_deref().unwrap_or("?");
    let pid = p
        .and_then(|p| p.pid)
        .map_or(String::new(), |p| format!(" pid {p}"));
    let gpu = match (r.nvml_dev, r.cuda_dev) {
        (Some(g), c) => format!(
            " GPU {g}{}",
            c.map_or(String::new(), |c| format!(" (cudaDev {c})"))
        ),
        (None, Some(c)) => format!(" cudaDev {c}"),
        (None, None) => String::new(),
    };
    let links: Vec<String> = r
        .links
        .iter()
        .map(|l| {
            let nic = l.nic.as_deref().map_or(String::new(), |n| format!("={n}"));
            format!("{}{nic} x{}", l.via, l.channels)
        })
        .collect();
    let init = match r.init {
        InitState::Seen => "",
        InitState::Started => "; init started, never completed",
        InitState::Complete => "; init complete",
        InitState::Destroyed => "; destroyed",
        InitState::Aborted => "; aborted",
    };
    format!(
        "  rank {:<4} {host}{pid}{gpu}: {}{init}",
        r.rank,
        if links.is_empty() {
            "no channel line".to_string()
        } else {
            links.join(", ")
        }
    )
}

/// `net plugin FasTrak (Using network): 16 processes on tcpxo-wb-[0-1]`, one line per
/// plugin, for a log whose channel lines say nothing (a grep of `Using network`, rule K4).
fn plugin_lines(log: &JobLog) -> Vec<String> {
    let mut by: BTreeMap<&str, (BTreeSet<&str>, usize)> = BTreeMap::new();
    for p in &log.processes {
        for n in &p.networks {
            let e = by.entry(n.as_str()).or_default();
            e.1 += 1;
            if let Some(h) = p.host.as_deref() {
                e.0.insert(h);
            }
        }
    }
    by.into_iter()
        .map(|(net, (hosts, n))| {
            let on = if hosts.is_empty() {
                String::new()
            } else {
                format!(" on {}", hostlist_of(hosts.iter().copied()))
            };
            format!(
                "net plugin {net} (Using network, no channel line): {n} process{}{on}",
                if n == 1 { "" } else { "es" }
            )
        })
        .collect()
}

/// `NET/IB lists mlx5_0 (IB) (no channel line): 3 processes on node1`, one line per transport
/// and list, for a log whose channel lines say nothing: the NICs each transport found (rule
/// K3), which is not what carried traffic: up to 2.4.7 NCCL initialised the socket
/// transport first whatever it then used (`init.cc`), so a socket list beside an IB one is
/// no fallback. The bootstrap's own list (`Bootstrap : Using [0]...`, rule K5) is not a
/// transport's and is not read.
fn nic_list_lines(log: &JobLog) -> Vec<String> {
    let mut by: BTreeMap<(String, String), (BTreeSet<&str>, usize)> = BTreeMap::new();
    for p in &log.processes {
        let mut per_net: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for n in &p.nics {
            let named = match &n.layer {
                Some(layer) => format!("{} ({layer})", n.nic),
                None => n.nic.clone(),
            };
            per_net.entry(n.net.as_str()).or_default().push(named);
        }
        for (net, nics) in per_net {
            let e = by.entry((net.to_string(), nics.join(", "))).or_default();
            e.1 += 1;
            if let Some(h) = p.host.as_deref() {
                e.0.insert(h);
            }
        }
    }
    by.into_iter()
        .map(|((net, nics), (hosts, n))| {
            let on = if hosts.is_empty() {
                String::new()
            } else {
                format!(" on {}", hostlist_of(hosts.iter().copied()))
            };
            format!(
                "NET/{net} lists {nics} (no channel line): {n} process{}{on}",
                if n == 1 { "" } else { "es" }
            )
        })
        .collect()
}

/// `SHARP group joined on node: mlx5_4:1 (SHARP rank 0 of 4)`, one line per host (rule K6):
/// the SHARP plugin set up this process's part of CollNet's group, which says nothing yet of
/// whether CollNet carried anything.
fn sharp_lines(log: &JobLog) -> Vec<String> {
    let mut by: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for p in &log.processes {
        if let Some(s) = &p.sharp {
            by.entry(p.host.as_deref().unwrap_or("?"))
                .or_default()
                .insert(format!(
                    "{} (SHARP rank {} of {})",
                    s.device, s.rank, s.size
                ));
        }
    }
    by.into_iter()
        .map(|(host, joined)| {
            format!(
                "SHARP group joined on {host}: {}",
                joined.into_iter().collect::<Vec<_>>().join(", ")
            )
        })
        .collect()
}

/// `note: Meowth: NET/Socket lists virbr0 (192.168.122.1): a libvirt virtual bridge`, once
/// per host and interface (rule K3).
fn nic_notes(log: &JobLog) -> Vec<String> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for p in &log.processes {
        for n in &p.nics {
            if let Some(what) = n.note() {
                let addr = n
                    .addr
                    .as_deref()
                    .map_or(String::new(), |a| format!(" ({a})"));
                seen.insert(format!(
                    "note: {}: NET/{} lists {}{addr}: {what}",
                    p.host.as_deref().unwrap_or("?"),
                    n.net,
                    n.nic
                ));
            }
        }
    }
    seen.into_iter().collect()
}

/// Versions, plugins and variables over all processes, with how many processes said each.
fn process_lines(log: &JobLog) -> Vec<String> {
    let mut out = Vec::new();
    let count = |items: Vec<String>| -> String {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for i in items {
            *by.entry(i).or_default() += 1;
        }
        by.into_iter()
            .map(|(k, n)| format!("{k} ({n} process{})", if n == 1 { "" } else { "es" }))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let versions: Vec<String> = log
        .processes
        .iter()
        .filter_map(|p| {
            let v = p.nccl_version.as_deref()?;
            Some(match &p.cuda_version {
                Some(c) => format!("{v}+cuda{c}"),
                None => v.to_string(),
            })
        })
        .collect();
    if !versions.is_empty() {
        out.push(format!("NCCL {}", count(versions)));
    }
    let nets: Vec<String> = log
        .processes
        .iter()
        .flat_map(|p| p.networks.iter().cloned())
        .collect();
    if !nets.is_empty() {
        out.push(format!(
            "net plugin loaded (Using network): {}",
            count(nets)
        ));
    }
    let plugins: Vec<String> = log
        .processes
        .iter()
        .flat_map(|p| &p.plugins)
        .map(|n| format!("{}: {}", n.kind, n.text))
        .collect();
    if !plugins.is_empty() {
        out.push(format!("plugin loaders: {}", count(plugins)));
    }
    let env: Vec<String> = log
        .processes
        .iter()
        .flat_map(|p| p.env.iter().map(|(k, v)| format!("{k}={v}")))
        .collect();
    if !env.is_empty() {
        out.push(format!("set by environment: {}", count(env)));
    }
    out
}

/// The whole text: communicators, then with `verbose` their ranks and tuning, the
/// processes and every trouble line; then the findings and what was not judged.
pub fn render(log: &JobLog, judgement: &Judgement, verbose: bool) -> Vec<String> {
    let mut out = Vec::new();
    for comm in &log.communicators {
        out.push(comm_line(comm));
        if verbose {
            out.extend(comm.ranks.iter().map(|r| rank_line(log, r)));
            for t in &comm.tuning {
                out.push(format!(
                    "  {} {}: {}/{} x{}",
                    t.op.as_deref().unwrap_or("operation"),
                    human_size(t.bytes),
                    t.algorithm,
                    t.protocol,
                    t.count
                ));
            }
        }
    }
    // Channel lines no communicator took, by host.
    let mut loose: BTreeMap<&str, Vec<&Link>> = BTreeMap::new();
    for p in &log.processes {
        if !p.links.is_empty() {
            loose
                .entry(p.host.as_deref().unwrap_or("?"))
                .or_default()
                .extend(&p.links);
        }
    }
    // Hosts whose paths read the same share a line.
    let mut by_paths: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (host, links) in loose {
        by_paths.entry(paths_of(links)).or_default().push(host);
    }
    for (paths, hosts) in by_paths {
        out.push(format!(
            "{}, outside any communicator's init lines: {paths}",
            hostlist_of(hosts)
        ));
    }
    if !super::any_network_link(log) {
        out.extend(plugin_lines(log));
        out.extend(nic_list_lines(log));
    }
    out.extend(sharp_lines(log));
    out.extend(nic_notes(log));
    if verbose {
        out.extend(process_lines(log));
    }
    let shown = if verbose {
        log.events.len()
    } else {
        TROUBLE_SHOWN
    };
    for e in log.events.iter().take(shown) {
        let who = match (e.rank, e.host.as_deref()) {
            (Some(r), Some(h)) => format!("rank {r} on {h}"),
            (Some(r), None) => format!("rank {r}"),
            (None, Some(h)) => h.to_string(),
            (None, None) => "rank ?".into(),
        };
        out.push(format!(
            "{} ({who}, input {} line {}): {}",
            e.kind.as_str(),
            e.source + 1,
            e.line,
            e.text
        ));
    }
    let total: u64 = log.event_counts.values().sum();
    if total > shown.min(log.events.len()) as u64 {
        out.push(format!(
            "... {} more trouble line(s){}",
            total - shown.min(log.events.len()) as u64,
            if verbose { "" } else { " (-v shows them)" }
        ));
    }
    for f in &judgement.findings {
        out.push(format!("FINDING: {}", f.message));
    }
    for u in &judgement.unjudged {
        out.push(format!("not judged: {u}"));
    }
    for d in &log.dropped {
        out.push(format!("note: {d}"));
    }
    out
}

/// The last line: what was read, and the verdict with its exit status.
pub fn summary(log: &JobLog, judgement: &Judgement, status_code: u8) -> String {
    let comms = log.communicators.len();
    let ranks = log.processes.len();
    let hosts: BTreeSet<&str> = log
        .processes
        .iter()
        .filter_map(|p| p.host.as_deref())
        .filter(|h| !is_placeholder_host(h))
        .collect();
    let redacted = log
        .processes
        .iter()
        .any(|p| p.host.as_deref().is_some_and(is_placeholder_host));
    let on = match (hosts.len(), redacted) {
        (0, true) => " (host names redacted)".to_string(),
        (n, true) => format!(" on {n} or more nodes (some host names redacted)"),
        (n, false) => format!(" on {n} node{}", if n == 1 { "" } else { "s" }),
    };
    // An entry is one (process, GPU); a process that drives several GPUs (single-process
    // multi-GPU NCCL, or old RCCL) is said as one process with its GPUs.
    let processes = log
        .processes
        .iter()
        .map(|p| match p.pid {
            Some(pid) => (p.source, p.host.clone(), Some(pid), None, None),
            None => (p.source, p.host.clone(), None, p.device, p.launcher_rank),
        })
        .collect::<BTreeSet<_>>()
        .len()
        .min(ranks);
    let gpus = if processes < ranks {
        format!(" driving {ranks} GPUs")
    } else {
        String::new()
    };
    let read = format!(
        "{comms} communicator{}, {processes} process{}{gpus}{on}",
        if comms == 1 { "" } else { "s" },
        if processes == 1 { "" } else { "es" },
    );
    let verdict = match (judgement.findings.len(), judgement.profiles.is_empty()) {
        (0, true) => "nothing judged against a profile".to_string(),
        (0, false) => format!(
            "as the profile expects ({})",
            judgement
                .profiles
                .iter()
                .map(|(name, what)| format!("{name}: {what}"))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        (n, _) => format!("{n} finding{}", if n == 1 { "" } else { "s" }),
    };
    format!("gpudirect log: {read}: {verdict} (exit {status_code})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_output::joblog::read_str;

    /// Rule K1 on hand-made lines (no published log was found with it): GDRDMA on the
    /// receive side only is said as such; a link-local address in a socket list is noted.
    #[test]
    fn gdr_on_one_side_and_a_link_local_address() {
        let log = read_str(
            "n1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1 commId 0xa - Init START\n\
             n1:1:1 [0] NCCL INFO NET/Socket : Using [0]ib1:fe80::1%ib1<0>\n\
             n1:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n\
             n1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n",
        );
        let line = comm_line(&log.communicators[0]);
        assert!(
            line.contains("GPUDirect RDMA on receive only, not on send"),
            "{line}"
        );
        assert_eq!(
            nic_notes(&log),
            ["note: n1: NET/Socket lists ib1 (fe80::1%ib1): a link-local IPv6 address: valid on one link only"]
        );
    }
}
