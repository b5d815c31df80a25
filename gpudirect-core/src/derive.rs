//! A profile's NIC facts derived from the node itself (issue #31, `gpudirect profiles
//! generate`): which NICs carry data and which one is the control NIC, which NIC each GPU
//! should use, the CPUs near each NIC, and the line rate. Each choice keeps the reason it
//! was made, for the comment the generator writes beside it.
//!
//! [`NodeFacts::read`] reads sysfs (and, when given, `/proc`); [`derive`] is pure and is
//! tested on the fixture trees of `gpudirect-core/tests/sysfs/` against `expected.toml`
//! there, each vendor's own map.
//!
//! The GPU-to-NIC map goes level by level, and says which level decided:
//! 1. the NICs under the GPU's lowest shared PCIe switch ([`crate::locality`]'s rule);
//! 2. else those on its root complex (the same host bridge);
//! 3. else those on its NUMA node;
//! 4. else every data NIC (a VM whose PCI tree shows no locality).
//!
//! GPUs that find the same NICs at the same level split them in blocks, in PCI order (GPU k
//! of m takes the k-th n/m of the n NICs, or NIC k*n/m when there are fewer NICs).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::config::NicClass;
use crate::cpulist::CpuList;
use crate::locality::{
    names_in, read_at_most, share_out, under_switch, Locality, LocalityError, PciFunction,
};

/// Why no profile can be derived from a node.
#[derive(Debug, thiserror::Error)]
pub enum DeriveError {
    /// The PCI tree could not be read.
    #[error(transparent)]
    Locality(#[from] LocalityError),
    /// No GPU in the PCI tree.
    #[error("{root}: no NVIDIA GPU in the PCI tree (looked for vendor 0x10de, class 0x0302 or 0x0300, under bus/pci/devices; found {functions} PCI functions{nics}): is this the node's sysfs, and is the GPU passed through to this VM?")]
    NoGpu {
        /// The sysfs root.
        root: String,
        /// How many PCI functions there were.
        functions: usize,
        /// The NICs found, said.
        nics: String,
    },
    /// No NIC left for data once the control NIC is set aside.
    #[error("{root}: {gpus} GPU(s) but no data NIC: found {found}; a profile needs data NICs (PCI functions with a netdev under net/ or an RDMA device under infiniband/)")]
    NoDataNic {
        /// The sysfs root.
        root: String,
        /// GPUs found.
        gpus: usize,
        /// What NICs were found.
        found: String,
    },
}

/// One network interface of `/sys/class/net`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netdev {
    /// Its name.
    pub name: String,
    /// `speed`, Mb/s (absent or -1 when the driver does not say).
    pub speed_mbit: Option<u64>,
    /// The PCI function it belongs to, when it is one.
    pub pci: Option<String>,
}

/// One RDMA device of a PCI function.
#[derive(Debug, Clone, PartialEq)]
pub struct RdmaDevice {
    /// Its name (`mlx5_0`, `rdmap79s0`).
    pub name: String,
    /// Port 1's `rate`, Gbit/s.
    pub rate_gbit: Option<f64>,
    /// Port 1's `link_layer` (`InfiniBand`, `Ethernet`; EFA says `Unknown`).
    pub link_layer: Option<String>,
    /// Its PCI function.
    pub pci: String,
}

/// What the node shows: its PCI locality, its interfaces and RDMA devices, its default
/// route and the GPUs the NVIDIA driver lists.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    /// Where sysfs was read.
    pub root: PathBuf,
    /// GPUs, NICs and NUMA CPUs.
    pub locality: Locality,
    /// PCI functions seen in all.
    pub functions: usize,
    /// `/sys/class/net`, virtual and loopback interfaces left out, by name.
    pub netdevs: Vec<Netdev>,
    /// RDMA devices of the NICs, by name.
    pub rdma: Vec<RdmaDevice>,
    /// The interface of the default route (`/proc/net/route`), when /proc was read.
    pub default_route: Option<String>,
    /// The GPUs `/proc/driver/nvidia/gpus` lists (PCI addresses), when it was read.
    pub driver_gpus: Option<Vec<String>>,
    /// Each GPU's and NIC's PCI link, by address, as NCCL's topology file names them.
    pub links: BTreeMap<String, PciLink>,
}

/// A PCI function's identity and link, as sysfs gives them (`device`,
/// `current_link_speed`, `current_link_width`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciLink {
    /// `device`, e.g. `0x2335`.
    pub device: Option<String>,
    /// `current_link_speed`, e.g. `32.0 GT/s PCIe`.
    pub speed: Option<String>,
    /// `current_link_width`, e.g. `16`.
    pub width: Option<String>,
}

impl NodeFacts {
    /// Reads sysfs at `sysfs` and, when given, `/proc` at `proc_root`.
    pub fn read(sysfs: &Path, proc_root: Option<&Path>) -> Result<NodeFacts, DeriveError> {
        let locality = Locality::read(sysfs)?;
        let functions = fs::read_dir(sysfs.join("bus/pci/devices"))
            .map(|d| d.count())
            .unwrap_or(0);
        let mut netdevs = Vec::new();
        for name in dir_names(&sysfs.join("class/net")) {
            let link = fs::read_link(sysfs.join("class/net").join(&name)).unwrap_or_default();
            let target = link.to_string_lossy().to_string();
            if name == "lo" || target.contains("/virtual/") {
                continue;
            }
            let pci = locality
                .nics
                .iter()
                .find(|f| f.netdevs.contains(&name))
                .map(|f| f.bdf.clone());
            let speed_mbit = read_trimmed(&sysfs.join("class/net").join(&name).join("speed"))
                .and_then(|s| s.parse::<i64>().ok())
                .and_then(|s| u64::try_from(s).ok())
                .filter(|&s| s > 0);
            netdevs.push(Netdev {
                name,
                speed_mbit,
                pci,
            });
        }
        // Interfaces of NIC functions that /sys/class/net does not list (a partial tree).
        for f in &locality.nics {
            for n in &f.netdevs {
                if !netdevs.iter().any(|d| &d.name == n) {
                    let dir = sysfs
                        .join("bus/pci/devices")
                        .join(&f.bdf)
                        .join("net")
                        .join(n);
                    netdevs.push(Netdev {
                        name: n.clone(),
                        speed_mbit: read_trimmed(&dir.join("speed"))
                            .and_then(|s| s.parse::<u64>().ok())
                            .filter(|&s| s > 0),
                        pci: Some(f.bdf.clone()),
                    });
                }
            }
        }
        let mut rdma = Vec::new();
        for f in &locality.nics {
            for name in &f.rdma_devices {
                let port = sysfs
                    .join("bus/pci/devices")
                    .join(&f.bdf)
                    .join("infiniband")
                    .join(name)
                    .join("ports/1");
                rdma.push(RdmaDevice {
                    name: name.clone(),
                    rate_gbit: read_trimmed(&port.join("rate")).and_then(|r| parse_rate(&r)),
                    link_layer: read_trimmed(&port.join("link_layer")),
                    pci: f.bdf.clone(),
                });
            }
        }
        let (default_route, driver_gpus) = match proc_root {
            Some(p) => (
                read_trimmed(&p.join("net/route")).and_then(|t| default_route(&t)),
                Some(driver_gpus(&p.join("driver/nvidia/gpus")).unwrap_or_default()),
            ),
            None => (None, None),
        };
        let mut links = BTreeMap::new();
        for f in locality.gpus.iter().chain(&locality.nics) {
            let dir = sysfs.join("bus/pci/devices").join(&f.bdf);
            links.insert(
                f.bdf.clone(),
                PciLink {
                    device: read_trimmed(&dir.join("device")),
                    speed: read_trimmed(&dir.join("current_link_speed")),
                    width: read_trimmed(&dir.join("current_link_width")),
                },
            );
        }
        Ok(NodeFacts {
            links,
            root: sysfs.to_path_buf(),
            locality,
            functions,
            netdevs,
            rdma,
            default_route,
            driver_gpus,
        })
    }
}

/// `400 Gb/sec (4X NDR)` as Gbit/s.
fn parse_rate(text: &str) -> Option<f64> {
    let (value, rest) = text.split_once(' ')?;
    rest.starts_with("Gb/sec")
        .then(|| value.parse().ok())
        .flatten()
}

/// The interface of the default route in `/proc/net/route` text (destination and mask 0).
pub fn default_route(text: &str) -> Option<String> {
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 8 && f[1] == "00000000" && f[7] == "00000000").then(|| f[0].to_string())
    })
}

/// Each interface's directly connected IPv4 subnets in `/proc/net/route` text (routes up,
/// without a gateway, to a network other than the default), as `a.b.c.d/len`, sorted, by
/// interface. The kernel prints each address and mask as the hex of its in-memory bytes, so
/// `0000800A` is 10.128.0.0.
pub fn connected_subnets(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let hex = |s: &str| u32::from_str_radix(s, 16).ok();
        let (Some(dest), Some(gateway), Some(flags), Some(mask)) =
            (hex(f[1]), hex(f[2]), hex(f[3]), hex(f[7]))
        else {
            continue;
        };
        // RTF_UP and not RTF_GATEWAY; the default route (mask 0) is no subnet.
        if flags & 1 == 0 || flags & 2 != 0 || gateway != 0 || mask == 0 {
            continue;
        }
        let [a, b, c, d] = dest.to_le_bytes();
        let subnet = format!("{a}.{b}.{c}.{d}/{}", mask.count_ones());
        let list = out.entry(f[0].to_string()).or_default();
        if !list.contains(&subnet) {
            list.push(subnet);
        }
    }
    for list in out.values_mut() {
        list.sort();
    }
    out
}

/// Which level of the PCI tree decided a GPU's NICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Under the GPU's lowest shared PCIe switch.
    Switch,
    /// On the GPU's root complex (host bridge), no switch shared.
    RootComplex,
    /// On the GPU's NUMA node, nothing shared in the PCI tree.
    Numa,
    /// Nothing tells: every data NIC.
    Any,
}

impl Level {
    /// In words, for the comment.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Switch => "under its PCIe switch",
            Level::RootComplex => "on its root complex (no NIC under its switch)",
            Level::Numa => "on its NUMA node (nothing shared in the PCI tree)",
            Level::Any => "in PCI order (the PCI tree and NUMA nodes tell nothing)",
        }
    }
}

/// One GPU's part of the map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuChoice {
    /// Its PCI address.
    pub pci: String,
    /// The NICs it uses (one, or several under its switch: p5's four EFA devices).
    pub nics: Vec<String>,
    /// The level that decided.
    pub level: Level,
    /// The NICs it tied with at that level, when it shared them with other GPUs.
    pub tied_with: Vec<String>,
    /// Its NUMA node.
    pub numa_node: Option<u32>,
}

/// What [`derive`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    /// What data NICs are named by: interfaces, or RDMA devices.
    pub nic_class: NicClass,
    /// The control NIC, and why; `None` when nothing tells (a warning says so).
    pub control_nic: Option<(String, String)>,
    /// Data NICs, in PCI order.
    pub data_nics: Vec<String>,
    /// Each GPU, in CUDA (PCI) order.
    pub gpus: Vec<GpuChoice>,
    /// Each data NIC's NUMA CPUs, where the platform gives a NUMA node.
    pub nic_cpus: BTreeMap<String, CpuList>,
    /// The slowest data NIC's rate, Gbit/s, when every one says.
    pub line_rate_gbit: Option<u32>,
    /// What the generator must say it could not tell, or chose without evidence.
    pub warnings: Vec<String>,
}

/// The data NICs' PCI functions with their names in `class`, in PCI order.
fn data_functions<'a>(
    facts: &'a NodeFacts,
    class: NicClass,
    control_pci: Option<&str>,
) -> Vec<(&'a PciFunction, Vec<String>)> {
    facts
        .locality
        .nics
        .iter()
        .filter(|f| Some(f.bdf.as_str()) != control_pci)
        .map(|f| (f, f.names(class).to_vec()))
        .filter(|(_, names)| !names.is_empty())
        .collect()
}

/// Derives the profile's NIC facts from `facts` (pure).
pub fn derive(facts: &NodeFacts) -> Result<Derived, DeriveError> {
    let loc = &facts.locality;
    let root = facts.root.display().to_string();
    if loc.gpus.is_empty() {
        return Err(DeriveError::NoGpu {
            root,
            functions: facts.functions,
            nics: format!(", {}", said_nics(loc)),
        });
    }
    let mut warnings = Vec::new();
    // RDMA devices on any NIC: the data NICs are named by them (NCCL_IB_HCA, EFA's).
    let nic_class = if loc.nics.iter().any(|f| !f.rdma_devices.is_empty()) {
        NicClass::Infiniband
    } else {
        NicClass::Net
    };
    let control_nic = choose_control(facts, nic_class);
    let control_pci = control_nic
        .as_ref()
        .and_then(|(name, _)| facts.netdevs.iter().find(|d| &d.name == name))
        .and_then(|d| d.pci.clone());
    let data = data_nic_functions(facts, nic_class, control_pci.as_deref(), &mut warnings);
    if data.is_empty() {
        return Err(DeriveError::NoDataNic {
            root,
            gpus: loc.gpus.len(),
            found: said_nics(loc),
        });
    }
    if control_nic.is_none() {
        warnings.push(
            "no control NIC could be told (no default route read, and no slower or GPU-less interface): set control_nic by hand".into(),
        );
    }
    let picks = gpu_picks(loc, &data);
    let gpus = gpu_choices(loc, &picks, &data);
    warnings.extend(fallback_warnings(&gpus));
    let data_nics: Vec<String> = data.iter().flat_map(|(_, n)| n.iter().cloned()).collect();
    let nic_cpus = nic_cpus_of(loc, &data);
    let line_rate_gbit = line_rate(facts, nic_class, &data_nics);
    warnings.extend(driver_mismatch(facts, &gpus));
    Ok(Derived {
        nic_class,
        control_nic,
        data_nics,
        gpus,
        nic_cpus,
        line_rate_gbit,
        warnings,
    })
}

/// The NICs found, for an error that says none would do: `no NIC` or each function's
/// address and names.
fn said_nics(loc: &Locality) -> String {
    let names: Vec<String> = loc
        .nics
        .iter()
        .map(|f| {
            format!(
                "{} ({})",
                f.bdf,
                [f.netdevs.clone(), f.rdma_devices.clone()]
                    .concat()
                    .join(", ")
            )
        })
        .collect();
    if names.is_empty() {
        "no NIC".to_string()
    } else {
        names.join("; ")
    }
}

/// The data NICs' functions and their names: every NIC but the control NIC's (unless that
/// is an RDMA NIC, which carries data too), or the control NIC itself when it is the only
/// one (a warning says so).
fn data_nic_functions<'a>(
    facts: &'a NodeFacts,
    nic_class: NicClass,
    control_pci: Option<&str>,
    warnings: &mut Vec<String>,
) -> Vec<(&'a PciFunction, Vec<String>)> {
    let loc = &facts.locality;
    // An RDMA NIC that also carries the control interface still carries data.
    let keep_control_fn = nic_class == NicClass::Infiniband
        && control_pci
            .and_then(|p| loc.nics.iter().find(|f| f.bdf == p))
            .is_some_and(|f| !f.rdma_devices.is_empty());
    let excluded = if keep_control_fn { None } else { control_pci };
    let mut data = data_functions(facts, nic_class, excluded);
    // A workstation or a small VM: the control NIC is the only one, and carries the data too.
    if data.is_empty() && excluded.is_some() && nic_class == NicClass::Net {
        data = data_functions(facts, nic_class, None);
        if !data.is_empty() {
            warnings.push(format!(
                "the control NIC is the only NIC: it carries the data too (NCCL's Socket transport over {})",
                data.iter().flat_map(|(_, n)| n.iter().cloned()).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    data
}

/// Each GPU's candidate data NICs (indices into `data`) and the level that found them:
/// under its PCIe switch, else its root complex, else its NUMA node, else any.
fn gpu_picks(loc: &Locality, data: &[(&PciFunction, Vec<String>)]) -> Vec<(Level, Vec<usize>)> {
    let functions: Vec<&PciFunction> = data.iter().map(|(f, _)| *f).collect();
    loc.gpus
        .iter()
        .map(|gpu| {
            let near = under_switch(gpu, &functions);
            if !near.is_empty() {
                return (Level::Switch, near);
            }
            let same_root: Vec<usize> = (0..data.len())
                .filter(|&i| {
                    data[i].0.upstream.first() == gpu.upstream.first() && gpu.upstream.len() > 1
                })
                .collect();
            if !same_root.is_empty() {
                return (Level::RootComplex, same_root);
            }
            let same_numa: Vec<usize> = (0..data.len())
                .filter(|&i| gpu.numa_node.is_some() && data[i].0.numa_node == gpu.numa_node)
                .collect();
            if !same_numa.is_empty() {
                return (Level::Numa, same_numa);
            }
            (Level::Any, (0..data.len()).collect())
        })
        .collect()
}

/// Each GPU's NICs: its share of its candidates when GPUs tie for them, with the tie named.
fn gpu_choices(
    loc: &Locality,
    picks: &[(Level, Vec<usize>)],
    data: &[(&PciFunction, Vec<String>)],
) -> Vec<GpuChoice> {
    let mut gpus = Vec::new();
    for (g, gpu) in loc.gpus.iter().enumerate() {
        let (level, set) = &picks[g];
        let peers = picks.iter().filter(|p| *p == &picks[g]).count();
        let mine = share_out(picks, g, |(_, set)| set);
        let names = |idx: &[usize]| -> Vec<String> {
            idx.iter()
                .flat_map(|&i| data[i].1.iter().cloned())
                .collect()
        };
        gpus.push(GpuChoice {
            pci: gpu.bdf.clone(),
            nics: names(&mine),
            level: *level,
            tied_with: if peers > 1 && set.len() > 1 {
                names(set)
            } else {
                Vec::new()
            },
            numa_node: gpu.numa_node,
        });
    }
    gpus
}

/// A warning per level other than a shared PCIe switch that chose some GPU's NICs.
fn fallback_warnings(gpus: &[GpuChoice]) -> Vec<String> {
    let mut warnings = Vec::new();
    let fallback: BTreeSet<Level> = gpus
        .iter()
        .map(|g| g.level)
        .filter(|l| *l != Level::Switch)
        .collect();
    for level in fallback {
        let which: Vec<String> = gpus
            .iter()
            .enumerate()
            .filter(|(_, g)| g.level == level)
            .map(|(i, g)| format!("GPU {i} ({})", g.pci))
            .collect();
        warnings.push(format!(
            "{} share(s) no PCIe switch with a data NIC: NICs chosen {}; check the map against the vendor's: NCCL reads the same tree: give it the map with --topo-xml and NCCL_TOPO_FILE",
            which.join(", "),
            level.as_str()
        ));
    }
    warnings
}

/// Each data NIC's CPUs: those of its NUMA node, where known.
fn nic_cpus_of(loc: &Locality, data: &[(&PciFunction, Vec<String>)]) -> BTreeMap<String, CpuList> {
    let mut nic_cpus = BTreeMap::new();
    for (f, names) in data {
        if let Some(cpus) = f.numa_node.and_then(|n| loc.node_cpus.get(&n)) {
            for name in names {
                nic_cpus.insert(name.clone(), cpus.clone());
            }
        }
    }
    nic_cpus
}

/// The slowest data NIC's line rate in Gbit/s, when every data NIC's is known.
fn line_rate(facts: &NodeFacts, nic_class: NicClass, data_nics: &[String]) -> Option<u32> {
    let rates: Vec<Option<f64>> = data_nics
        .iter()
        .map(|name| match nic_class {
            NicClass::Infiniband => facts
                .rdma
                .iter()
                .find(|r| &r.name == name)
                .and_then(|r| r.rate_gbit),
            NicClass::Net => facts
                .netdevs
                .iter()
                .find(|d| &d.name == name)
                .and_then(|d| d.speed_mbit)
                .map(|m| m as f64 / 1000.0),
        })
        .collect();
    if rates.iter().all(Option::is_some) {
        rates
            .iter()
            .flatten()
            .copied()
            .reduce(f64::min)
            .map(|r| r.round() as u32)
    } else {
        None
    }
}

/// A warning when the NVIDIA driver lists other GPUs than the PCI tree shows.
fn driver_mismatch(facts: &NodeFacts, gpus: &[GpuChoice]) -> Option<String> {
    let driver = facts.driver_gpus.as_ref()?;
    let sysfs: BTreeSet<&str> = gpus.iter().map(|g| g.pci.as_str()).collect();
    let listed: BTreeSet<&str> = driver.iter().map(String::as_str).collect();
    (!driver.is_empty() && sysfs != listed).then(|| {
        format!(
            "the NVIDIA driver lists GPUs {} but the PCI tree shows {}",
            listed.into_iter().collect::<Vec<_>>().join(", "),
            sysfs.into_iter().collect::<Vec<_>>().join(", ")
        )
    })
}
/// The control NIC: the default route's interface; else the one interface that is not on
/// a data NIC's function (the only netdev of an RDMA node); else the slowest interface.
fn choose_control(facts: &NodeFacts, class: NicClass) -> Option<(String, String)> {
    if let Some(iface) = &facts.default_route {
        if facts.netdevs.iter().any(|d| &d.name == iface) {
            return Some((
                iface.clone(),
                "it has the default route (/proc/net/route)".into(),
            ));
        }
    }
    if class == NicClass::Infiniband {
        let rdma_fns: BTreeSet<&str> = facts.rdma.iter().map(|r| r.pci.as_str()).collect();
        let plain: Vec<&Netdev> = facts
            .netdevs
            .iter()
            .filter(|d| d.pci.as_deref().is_none_or(|p| !rdma_fns.contains(p)))
            .collect();
        if let [only] = plain.as_slice() {
            return Some((
                only.name.clone(),
                "the only interface not on an RDMA NIC".into(),
            ));
        }
    }
    let with_speed: Vec<(&Netdev, u64)> = facts
        .netdevs
        .iter()
        .filter_map(|d| d.speed_mbit.map(|s| (d, s)))
        .collect();
    let slowest = with_speed.iter().map(|(_, s)| *s).min()?;
    let fastest = with_speed.iter().map(|(_, s)| *s).max()?;
    let at_slowest: Vec<&&Netdev> = with_speed
        .iter()
        .filter(|(_, s)| *s == slowest)
        .map(|(d, _)| d)
        .collect();
    match at_slowest.as_slice() {
        [only] if slowest < fastest => Some((
            only.name.clone(),
            format!("the slowest interface ({slowest} Mb/s; the others up to {fastest})"),
        )),
        _ => None,
    }
}

/// A sysfs attribute or /proc file: some kilobytes (a /proc/net/route of many routes).
fn read_trimmed(path: &Path) -> Option<String> {
    read_at_most(path, 64 * 1024)
}

/// A folder's entries: a host may have hundreds of interfaces (one per container).
fn dir_names(dir: &Path) -> Vec<String> {
    names_in(dir, 1024)
}

/// The GPUs the NVIDIA driver lists in `dir` (`/proc/driver/nvidia/gpus`, one folder per
/// GPU, named by its PCI address): their names, sorted; `None` without the driver (the
/// folder cannot be read). The one reader of the driver's list: health's `gpus` check,
/// `validate --gpus`, probe and wiring count with it.
pub fn driver_gpus(dir: &Path) -> Option<Vec<String>> {
    std::fs::read_dir(dir).ok()?;
    Some(dir_names(dir))
}

#[cfg(test)]
mod tests;
