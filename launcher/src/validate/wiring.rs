//! `gpudirect validate --test wiring`: does GPU i sit on the same rail on every node?
//!
//! NCCL's rail-optimised rings and trees assume that GPU i of every node talks through a NIC
//! on rail i, the same switch and subnet everywhere, and never checks it (NVIDIA/nccl #1755).
//! A node whose NICs were renamed, or cabled to another rail's switch, still passes every
//! per-node check and then slows every job it is in.
//!
//! Two halves, as in `probe`:
//! - [`collect`] runs once on every node (an srun step of `gpudirect agent wiring`): the NIC each GPU gets, by the plugin's own rules (the profile the node
//!   resolves to, with sysfs locality where the profile asks for it; without a profile, the
//!   map [`gpudirect_core::derive`] reads from the PCI tree), and each of those NICs'
//!   connected IPv4 subnets from `/proc/net/route`. It prints one JSON line.
//! - [`analyse`] (pure) reads every node's line: for each GPU index, the subnet most nodes
//!   have it on is its rail, and every node where it is elsewhere is named; for each NIC
//!   name, the same with its subnet (a renamed NIC has another NIC's subnet).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::profile::{Choice, ProfileError};
use gpudirect_core::config::{Config, Mode, NicClass};
use gpudirect_core::cpulist::CpuList;
use gpudirect_core::derive::{connected_subnets, derive, NodeFacts};
use gpudirect_core::locality::{read_at_most, Locality};
use gpudirect_core::resolve::{
    plan_node_with_locality, plan_task, AssumeHealthy, StepFacts, TaskFacts,
};
use serde::{Deserialize, Serialize};

use super::judging::Health;

/// The key that marks a node's wiring line among other output.
pub const LINE_KEY: &str = "gpudirect_wiring";

/// GPUs a node reports at most (a garbled sysfs must not make a report of millions).
const MAX_GPUS: usize = 64;

/// One GPU and the NICs it uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuWire {
    /// The GPU's index on the node (CUDA's order, PCI order).
    pub gpu: u32,
    /// Its data NICs as the node names them (one for a profile's task; several where the
    /// PCI tree gives a GPU several, as on p5).
    pub nics: Vec<String>,
}

/// One NIC of the map and the networks it is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicNet {
    /// Its name on the node (an interface, or an RDMA device).
    pub name: String,
    /// Whether the node has it (`/sys/class/net/NAME` or `/sys/class/infiniband/NAME`).
    pub present: bool,
    /// `operstate` of the interface (of an RDMA device's interface), when there is one.
    pub state: Option<String>,
    /// Its connected IPv4 subnets (`a.b.c.d/len`, sorted); an RDMA device's are its
    /// interface's.
    pub subnets: Vec<String>,
}

/// What one node reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeWiring {
    /// Always 1: marks the line.
    pub gpudirect_wiring: u32,
    /// The Slurm node name.
    pub node: String,
    /// The profile the map comes from, if one applies to the node.
    pub profile: Option<String>,
    /// Where the map comes from, in words (`profile tcpx's gpu_nics`, ...).
    pub source: String,
    /// Each GPU's NICs, by GPU index.
    pub gpus: Vec<GpuWire>,
    /// The NICs of the map.
    pub nics: Vec<NicNet>,
    /// What the node could not tell.
    pub notes: Vec<String>,
}

impl NicNet {
    /// Its subnets as one key (`a/24+b/24`); `None` without any.
    fn subnet(&self) -> Option<String> {
        (!self.subnets.is_empty()).then(|| self.subnets.join("+"))
    }
}

impl NodeWiring {
    fn nic(&self, name: &str) -> Option<&NicNet> {
        self.nics.iter().find(|n| n.name == name)
    }

    /// The rail GPU `gpu` is on here: the subnets of its NICs, or why there are none.
    fn rail_of(&self, gpu: u32) -> Option<RailKey> {
        let wire = self.gpus.iter().find(|g| g.gpu == gpu)?;
        if wire.nics.is_empty() {
            return Some(RailKey::NoNic);
        }
        let subnets: BTreeSet<&String> = wire
            .nics
            .iter()
            .filter_map(|n| self.nic(n))
            .flat_map(|n| &n.subnets)
            .collect();
        Some(match subnets.is_empty() {
            true => RailKey::NoSubnet,
            false => RailKey::Subnets(subnets.into_iter().cloned().collect()),
        })
    }
}

/// Where a node's sysfs and /proc are (the real ones, or a recorded tree).
#[derive(Debug, Clone, Copy)]
pub struct Roots<'a> {
    /// sysfs, `/sys` on a node.
    pub sysfs: &'a Path,
    /// `/proc` on a node.
    pub proc_root: &'a Path,
}

/// This node's report: the map of the profile `mode` (else the node's own, `auto`) from
/// `config`, or the PCI tree's map when no profile applies; every NIC's subnets.
pub fn collect(
    config: Result<&Config, String>,
    mode: Option<&str>,
    node: &str,
    roots: Roots,
) -> NodeWiring {
    let mut report = NodeWiring {
        gpudirect_wiring: 1,
        node: node.to_string(),
        profile: None,
        source: String::new(),
        gpus: Vec::new(),
        nics: Vec::new(),
        notes: Vec::new(),
    };
    let profile_map = match config {
        Ok(config) => profile_map(config, mode, node, roots, &mut report),
        Err(e) => {
            report
                .notes
                .push(format!("no config ({e}): the map is the PCI tree's"));
            None
        }
    };
    // The NIC class, and the PCI tree the map was read with (an RDMA device's interfaces
    // are its PCI function's).
    let (class, locality) = match profile_map {
        Some(found) => found,
        None => match pci_map(roots, &mut report) {
            Some(found) => found,
            None => return report,
        },
    };
    let routes = std::fs::read_to_string(roots.proc_root.join("net/route"))
        .map(|text| connected_subnets(&text))
        .unwrap_or_else(|e| {
            report.notes.push(format!(
                "cannot read {}: {e}: no NIC's subnet is known",
                roots.proc_root.join("net/route").display()
            ));
            BTreeMap::new()
        });
    let names: BTreeSet<String> = report.gpus.iter().flat_map(|g| g.nics.clone()).collect();
    report.nics = names
        .into_iter()
        .map(|name| nic_net(roots.sysfs, &routes, class, locality.as_ref(), name))
        .collect();
    report
}

/// The map of the profile that applies to `node`, by the plugin's rules; `None` (and the
/// PCI tree decides) when no profile applies. Returns the profile's NIC class and the PCI
/// tree, when it could be read.
fn profile_map(
    config: &Config,
    mode: Option<&str>,
    node: &str,
    roots: Roots,
    report: &mut NodeWiring,
) -> Option<(NicClass, Option<Locality>)> {
    // Without --gpudirect, the node set's (auto).
    let auto = Mode::Auto.to_string();
    let choice = match Choice::with(config, mode.unwrap_or(&auto)) {
        Ok(choice) => choice,
        Err(e) => {
            report.notes.push(e.to_string());
            return None;
        }
    };
    let resolved = match choice.on(node) {
        Ok(Some(resolved)) => resolved,
        Ok(None) => {
            report.notes.push(format!(
                "no profile applies to {node} ({}): the map is the PCI tree's",
                mode.map_or("its node set gives none".to_string(), |m| format!(
                    "--gpudirect {m}"
                ))
            ));
            return None;
        }
        Err(ProfileError::Resolve { source, .. }) => {
            report
                .notes
                .push(format!("{source}: the map is the PCI tree's"));
            return None;
        }
        Err(e) => {
            report.notes.push(format!("{e}: the map is the PCI tree's"));
            return None;
        }
    };
    let profile = resolved.profile;
    report.profile = Some(profile.name.clone());
    let locality = Locality::read(roots.sysfs).ok();
    // The node's GPUs: the driver's list, else the PCI tree's, else as many as the profile
    // maps (a node without GPUs, such as the local cluster's).
    let driver = crate::health::driver_gpu_count(&roots.proc_root.join("driver/nvidia/gpus"))
        .map_or(0, |n| n as usize);
    let seen = locality.as_ref().map_or(0, |l| l.gpus.len());
    let count = match (driver, seen) {
        (0, 0) => {
            report.notes.push(format!(
                "no GPU in {} or {}: as many GPUs as profile {}'s gpu_nics maps",
                roots.proc_root.join("driver/nvidia/gpus").display(),
                roots.sysfs.join("bus/pci/devices").display(),
                profile.name
            ));
            profile.gpu_nics.len()
        }
        (0, n) | (n, _) => n,
    }
    .min(MAX_GPUS);
    let step = StepFacts {
        node: node.to_string(),
        nnodes: 1,
        local_size: count as u32,
        ..StepFacts::default()
    };
    let plan = plan_node_with_locality(resolved, step, &AssumeHealthy, locality.as_ref());
    report.source = match plan.links {
        Some(_) => format!("profile {}, each GPU's NIC from sysfs", profile.name),
        None => format!("profile {}'s gpu_nics", profile.name),
    };
    report.notes.extend(plan.notes.iter().cloned());
    let all: Vec<String> = (0..count).map(|i| i.to_string()).collect();
    for gpu in 0..count {
        let facts = TaskFacts {
            rank: gpu as u32,
            local_rank: gpu as u32,
            cuda_visible_devices: Some(gpu.to_string()),
            step_gpus: Some(all.join(",")),
            allowed_cpus: None,
        };
        let task = plan_task(&plan, &facts, &|_| None);
        if task.nic.is_none() {
            if let Some(why) = task.notes.first() {
                report.notes.push(format!("GPU {gpu}: {why}"));
            }
        }
        report.gpus.push(GpuWire {
            gpu: gpu as u32,
            nics: task.nic.into_iter().collect(),
        });
    }
    Some((profile.data_nic_class, locality))
}

/// The PCI tree's map ([`derive`]), when no profile applies, with the tree. `None` (with a
/// note) when the tree tells none.
fn pci_map(roots: Roots, report: &mut NodeWiring) -> Option<(NicClass, Option<Locality>)> {
    let derived = NodeFacts::read(roots.sysfs, Some(roots.proc_root))
        .map_err(|e| e.to_string())
        .and_then(|facts| {
            let d = derive(&facts).map_err(|e| e.to_string())?;
            Ok((d, facts.locality))
        });
    match derived {
        Ok((d, locality)) => {
            report.source = "the PCI tree (no profile)".to_string();
            report.gpus = d
                .gpus
                .iter()
                .take(MAX_GPUS)
                .enumerate()
                .map(|(i, g)| GpuWire {
                    gpu: i as u32,
                    nics: g.nics.clone(),
                })
                .collect();
            Some((d.nic_class, Some(locality)))
        }
        Err(e) => {
            report.source = "none".to_string();
            report.notes.push(format!("no GPU-to-NIC map: {e}"));
            None
        }
    }
}

/// A NIC's presence, state and subnets; an RDMA device's through its PCI function's
/// interfaces, as `locality` found them.
fn nic_net(
    sysfs: &Path,
    routes: &BTreeMap<String, Vec<String>>,
    class: NicClass,
    locality: Option<&Locality>,
    name: String,
) -> NicNet {
    let netdev = sysfs.join("class/net").join(&name);
    let rdma = sysfs.join("class/infiniband").join(&name);
    let interfaces = match (class, netdev.exists()) {
        (_, true) => vec![name.clone()],
        (NicClass::Infiniband, false) => locality
            .and_then(|l| l.nics.iter().find(|f| f.rdma_devices.contains(&name)))
            .map(|f| f.netdevs.clone())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let mut subnets: Vec<String> = interfaces
        .iter()
        .flat_map(|i| routes.get(i).cloned().unwrap_or_default())
        .collect();
    subnets.sort();
    subnets.dedup();
    NicNet {
        present: netdev.exists() || rdma.exists(),
        state: interfaces
            .first()
            .and_then(|i| read_at_most(&sysfs.join("class/net").join(i).join("operstate"), 64)),
        subnets,
        name,
    }
}

/// Reads the nodes' lines out of srun's output (or a file of them).
pub fn read_reports(text: &str) -> (Vec<NodeWiring>, Vec<String>) {
    let (mut reports, bad) = crate::slurm::read_labelled_json::<NodeWiring>(text, LINE_KEY);
    reports.sort_by(|a, b| a.node.cmp(&b.node));
    (reports, bad)
}

/// The rail a GPU is on, on one node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum RailKey {
    /// The subnets of its NICs.
    Subnets(Vec<String>),
    /// Its NICs have no IPv4 subnet.
    NoSubnet,
    /// The profile gives it no NIC.
    NoNic,
}

impl RailKey {
    fn subnets(&self) -> Option<String> {
        match self {
            RailKey::Subnets(s) => Some(s.join("+")),
            _ => None,
        }
    }
}

/// One GPU index's rail, as most nodes have it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rail {
    /// The GPU index.
    pub gpu: u32,
    /// The NICs most nodes give it.
    pub nics: Vec<String>,
    /// The subnet(s) most nodes have it on; `None` when no subnet is shared by most.
    pub subnet: Option<String>,
    /// Nodes that have it there.
    pub agreeing: usize,
    /// Nodes that map this GPU.
    pub nodes: usize,
}

/// A node whose wiring differs from the other nodes'.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The node (or the nodes, as a hostlist, where no majority names one).
    pub node: String,
    /// The GPU indices on another rail there.
    pub gpus: Vec<u32>,
    /// The NICs that differ there.
    pub nics: Vec<String>,
    /// What differs, in words.
    pub message: String,
}

/// What the nodes' reports say together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    /// Nodes that answered.
    pub nodes: Vec<String>,
    /// Nodes expected that did not answer.
    pub missing: Vec<String>,
    /// Each GPU index's rail.
    pub rails: Vec<Rail>,
    /// The nodes that differ.
    pub findings: Vec<Finding>,
    /// What could not be checked, and why.
    pub notes: Vec<String>,
    /// Healthy: every node agrees. Degraded: a node differs. Failed: a node did not
    /// answer. Could not run: no node answered.
    pub health: Health,
}

/// The value most of `votes` (node -> value) have, when one value has more votes than any
/// other; with its count.
fn majority<V: Ord + Clone>(votes: &BTreeMap<&str, V>) -> Option<(V, usize)> {
    let mut counts: BTreeMap<&V, usize> = BTreeMap::new();
    for v in votes.values() {
        *counts.entry(v).or_default() += 1;
    }
    let best = counts.values().copied().max()?;
    let mut top = counts.iter().filter(|(_, &c)| c == best);
    let (value, count) = top.next()?;
    top.next().is_none().then(|| ((*value).clone(), *count))
}

/// What one node does differently, gathered before it is put in words.
#[derive(Default)]
struct NodeDiff {
    gpus: BTreeSet<u32>,
    nics: BTreeSet<String>,
    /// GPUs off their rail: (NICs, subnet here, usual subnet, nodes agreeing, nodes) -> GPUs.
    off_rail: BTreeMap<(String, String, String, usize, usize), Vec<u32>>,
    /// A NIC here has another subnet than the same name has elsewhere.
    nic_moved: bool,
    /// A NIC here is down or missing.
    nic_gone: bool,
    parts: Vec<String>,
}

impl NodeDiff {
    /// In words: the GPUs off their rail first, grouped, then the rest.
    fn message(&self) -> String {
        let mut parts: Vec<String> = self
            .off_rail
            .iter()
            .map(|((nics, here, usual, count, total), gpus)| {
                let (what, them) = match gpus.len() {
                    1 => (format!("GPU {} ({nics}) is", gpus[0]), "it"),
                    // Ranges, as CPU lists are written: `0-1,4`.
                    _ => (
                        format!(
                            "GPUs {} ({nics}) are",
                            CpuList::from_ids(gpus.iter().copied())
                        ),
                        "them",
                    ),
                };
                format!("{what} on {here}, where {count} of {total} nodes have {them} on {usual}")
            })
            .collect();
        parts.extend(self.parts.iter().cloned());
        parts.join("; ")
    }
}

/// Each GPU index's rail: the subnet most nodes have it on. A node where it is elsewhere,
/// or has no NIC or subnet, goes into `diffs`; GPU indices no majority decides are
/// `findings` naming every node, or `notes` when no node has a subnet there.
fn gpu_rails(
    mapped: &[&NodeWiring],
    diffs: &mut BTreeMap<String, NodeDiff>,
    findings: &mut Vec<Finding>,
    notes: &mut Vec<String>,
) -> Vec<Rail> {
    let mut rails = Vec::new();
    let highest = mapped
        .iter()
        .flat_map(|r| r.gpus.iter().map(|g| g.gpu))
        .max();
    // Each GPU index: its rail on each node, and the nodes where it is elsewhere.
    for gpu in highest.map_or(0..0, |h| 0..h + 1) {
        let on: BTreeMap<&str, RailKey> = mapped
            .iter()
            .filter_map(|r| r.rail_of(gpu).map(|k| (r.node.as_str(), k)))
            .collect();
        let nics_on: BTreeMap<&str, Vec<String>> = mapped
            .iter()
            .filter_map(|r| {
                let w = r.gpus.iter().find(|g| g.gpu == gpu)?;
                Some((r.node.as_str(), w.nics.clone()))
            })
            .collect();
        let usual_nics = majority(&nics_on).map(|(n, _)| n).unwrap_or_default();
        let with_subnet: BTreeMap<&str, RailKey> = on
            .iter()
            .filter(|(_, k)| matches!(k, RailKey::Subnets(_)))
            .map(|(n, k)| (*n, k.clone()))
            .collect();
        for (node, key) in on.iter().filter(|(_, k)| !matches!(k, RailKey::Subnets(_))) {
            let nics = &nics_on[node];
            let part = match key {
                RailKey::NoNic => format!("GPU {gpu} has no NIC"),
                _ => format!("GPU {gpu}'s {} has no IPv4 subnet", nics.join(",")),
            };
            // Said once per GPU index when no node has a subnet there (below).
            if !with_subnet.is_empty() || matches!(key, RailKey::NoNic) {
                let d = diffs.entry(node.to_string()).or_default();
                d.gpus.insert(gpu);
                d.parts.push(part);
            }
        }
        let agreed = majority(&with_subnet);
        rails.push(Rail {
            gpu,
            nics: usual_nics,
            subnet: agreed.as_ref().and_then(|(k, _)| k.subnets()),
            agreeing: agreed.as_ref().map_or(0, |(_, c)| *c),
            nodes: on.len(),
        });
        match &agreed {
            None if with_subnet.len() > 1 => {
                let groups: Vec<String> = with_subnet
                    .iter()
                    .map(|(n, k)| format!("{n} {}", k.subnets().unwrap_or_default()))
                    .collect();
                let names: Vec<&str> = with_subnet.keys().copied().collect();
                findings.push(Finding {
                    node: gpudirect_core::hostlist::compress(&names),
                    gpus: vec![gpu],
                    nics: Vec::new(),
                    message: format!(
                        "GPU {gpu} is on no subnet most nodes share ({}): validate more nodes together to tell which is off its rail",
                        groups.join(", ")
                    ),
                });
            }
            None if with_subnet.is_empty() && !on.is_empty() => notes.push(format!(
                "GPU {gpu}'s NIC has no IPv4 subnet on any node: its rail cannot be checked by subnet"
            )),
            None => {}
            Some((usual, count)) => {
                for (node, key) in with_subnet.iter().filter(|(_, k)| *k != usual) {
                    let d = diffs.entry(node.to_string()).or_default();
                    d.gpus.insert(gpu);
                    let group = (
                        nics_on[node].join(","),
                        key.subnets().unwrap_or_default(),
                        usual.subnets().unwrap_or_default(),
                        *count,
                        on.len(),
                    );
                    d.off_rail.entry(group).or_default().push(gpu);
                }
            }
        }
    }
    rails
}

/// Each NIC name's subnet, as most nodes have it; a node where that NIC has another
/// subnet (a renamed NIC has another NIC's), is missing or is down goes into `diffs`.
fn nic_subnets(mapped: &[&NodeWiring], diffs: &mut BTreeMap<String, NodeDiff>) {
    let names: BTreeSet<&str> = mapped
        .iter()
        .flat_map(|r| r.nics.iter().map(|n| n.name.as_str()))
        .collect();
    let mut usual_subnet: BTreeMap<&str, String> = BTreeMap::new();
    for name in &names {
        let subnets: BTreeMap<&str, String> = mapped
            .iter()
            .filter_map(|r| Some((r.node.as_str(), r.nic(name)?.subnet()?)))
            .collect();
        if let Some((usual, _)) = majority(&subnets) {
            usual_subnet.insert(name, usual);
        }
    }
    for name in &names {
        for r in mapped {
            let Some(nic) = r.nic(name) else { continue };
            let d = diffs.entry(r.node.clone()).or_default();
            if !nic.present {
                d.nics.insert(name.to_string());
                d.nic_gone = true;
                d.parts.push(format!("{name} is missing"));
                continue;
            }
            if nic.state.as_deref().is_some_and(|s| s == "down") {
                d.nics.insert(name.to_string());
                d.nic_gone = true;
                d.parts.push(format!("{name} is down"));
            }
            let (Some(here), Some(usual)) = (nic.subnet(), usual_subnet.get(name)) else {
                continue;
            };
            if &here != usual {
                let owner = usual_subnet
                    .iter()
                    .find(|(other, s)| **s == here && other != &name)
                    .map(|(other, _)| format!(", the subnet {other} has on the other nodes"))
                    .unwrap_or_default();
                d.nics.insert(name.to_string());
                d.nic_moved = true;
                d.parts
                    .push(format!("{name} is on {here}{owner} (elsewhere {usual})"));
            }
        }
    }
}

/// Compares the nodes' reports; `expected` are the nodes that should have answered.
pub fn analyse(reports: &[NodeWiring], expected: &[String]) -> Analysis {
    let nodes: Vec<String> = reports.iter().map(|r| r.node.clone()).collect();
    let missing: Vec<String> = expected
        .iter()
        .filter(|n| !nodes.contains(n))
        .cloned()
        .collect();
    let mut diffs: BTreeMap<String, NodeDiff> = BTreeMap::new();
    let mut findings = Vec::new();
    let mut notes = Vec::new();
    for r in reports.iter().filter(|r| r.gpus.is_empty()) {
        diffs.entry(r.node.clone()).or_default().parts.push(format!(
            "no GPU-to-NIC map ({})",
            r.notes.last().map_or("no reason given", String::as_str)
        ));
    }
    let mapped: Vec<&NodeWiring> = reports.iter().filter(|r| !r.gpus.is_empty()).collect();
    // The number of GPUs mapped: a node with another count is named.
    let counts: BTreeMap<&str, usize> = mapped
        .iter()
        .map(|r| (r.node.as_str(), r.gpus.len()))
        .collect();
    if let Some((usual, _)) = majority(&counts) {
        for (node, n) in counts.iter().filter(|(_, &n)| n != usual) {
            diffs
                .entry(node.to_string())
                .or_default()
                .parts
                .push(format!("maps {n} GPUs, where most nodes map {usual}"));
        }
    }
    let rails = gpu_rails(&mapped, &mut diffs, &mut findings, &mut notes);
    nic_subnets(&mapped, &mut diffs);
    for (node, d) in diffs
        .into_iter()
        .filter(|(_, d)| !d.parts.is_empty() || !d.off_rail.is_empty())
    {
        let message = d.message();
        // Renaming or miscabling moves an address to another rail; a NIC down or missing
        // (its GPUs then have no subnet) moves nothing and is said as what it is.
        let crossed = d.nic_moved || !d.off_rail.is_empty();
        let gone = d.nic_gone;
        let gpus: Vec<u32> = d.gpus.into_iter().collect();
        let nics: Vec<String> = d.nics.into_iter().collect();
        let hint = match (gpus.is_empty(), nics.is_empty()) {
            (false, false) if crossed => ": NICs renamed, or cabled to another rail's switch",
            _ if gone => {
                ": a NIC down or missing, not one on another rail: bring it back up (its link, \
                 cable, switch port) and validate again"
            }
            _ => "",
        };
        findings.push(Finding {
            node,
            message: format!("{message}{hint}"),
            gpus,
            nics,
        });
    }
    findings.sort_by(|a, b| a.node.cmp(&b.node));
    // Rails told apart by subnet at all: a node whose data NICs all share one subnet checks
    // nothing.
    let shared: Vec<&str> = mapped
        .iter()
        .filter(|r| {
            let nics: BTreeSet<&String> = r.gpus.iter().flat_map(|g| &g.nics).collect();
            let subnets: BTreeSet<&String> = r.nics.iter().flat_map(|n| &n.subnets).collect();
            nics.len() > 1 && subnets.len() == 1
        })
        .map(|r| r.node.as_str())
        .collect();
    if !shared.is_empty() {
        notes.push(format!(
            "on {} every data NIC is on one subnet: the rails cannot be told apart by subnet there",
            gpudirect_core::hostlist::compress(&shared)
        ));
    }
    if mapped.len() == 2 && !findings.is_empty() {
        notes.push(
            "2 nodes: where they differ neither is the majority; validate 3 or more to name the node off its rail"
                .to_string(),
        );
    }
    let health = if reports.is_empty() {
        Health::CouldNotRun
    } else if !missing.is_empty() {
        Health::Failed
    } else if !findings.is_empty() {
        Health::Degraded
    } else {
        Health::Healthy
    };
    Analysis {
        nodes,
        missing,
        rails,
        findings,
        notes,
        health,
    }
}

#[cfg(test)]
mod tests;
