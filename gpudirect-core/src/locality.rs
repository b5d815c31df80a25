//! PCI locality from sysfs: which NIC sits under the same PCIe switch as each GPU, and
//! which CPUs are near that NIC.
//!
//! GPUDirect RDMA (and TCPX's GPU-RXQ) is fast only when a GPU sends through the NIC behind
//! its own PCIe switch; a GPU paired with a NIC on the other socket crosses the CPU
//! interconnect and loses most of its bandwidth. Instead of copying a table of
//! `gpu_nics` into every profile, a profile can say `nic_locality = "sysfs"` and let the
//! plugin read the layout of the node it runs on:
//!
//! - every PCI function appears as `/sys/bus/pci/devices/<bdf>`, a symlink to
//!   `../../../devices/pci0000:00/<root port>/<switch ports>.../<bdf>`: the link's path
//!   *is* the chain of upstream bridges;
//! - a GPU is an NVIDIA function (`vendor` 0x10de) of class 3D or VGA controller
//!   (`class` 0x0302xx or 0x0300xx; NVSwitches, also 0x10de, are bridges and are skipped),
//!   numbered in PCI bus order. That is CUDA's `CUDA_DEVICE_ORDER=PCI_BUS_ID` order and
//!   nvidia-smi's (hence Slurm's GRES) numbering; CUDA's default `FASTEST_FIRST` gives the
//!   same order on nodes of identical GPUs in practice, but only `PCI_BUS_ID` promises
//!   it. GPU `i` here is device `i` of `CUDA_VISIBLE_DEVICES`;
//! - a NIC is any function with a `net/<ifname>` (a virtio NIC's `virtioN/net/<ifname>`)
//!   or `infiniband/<hca>` child; its
//!   `numa_node` names `/sys/devices/system/node/node<N>/cpulist`;
//! - a GPU's NICs are those whose chain shares the longest prefix with the GPU's chain
//!   (their nearest common upstream bridge is the lowest), provided they share at least
//!   one PCI bridge: a NIC reachable only through the host bridge is not "near".
//!
//! Reading ([`Locality::read`]) is the only I/O; [`Locality::from_devices`] and
//! [`Locality::links`] are pure and tested on data. The plugin reads the map once per node
//! (in `user_init`) and hands it to [`crate::resolve::plan_node_with_locality`].
//!
//! - GPUs whose nearest NICs are the same set split them in blocks, in PCI order
//!   ([`share_out`]): two GPUs and two NICs under one switch (A3 Mega, A3 Ultra, A4) give
//!   GPU 0 the first NIC and GPU 1 the second; two GPUs and one NIC (A3 High) share it.
//!
//! Fixture trees of A3 High, A3 Mega, A3 Ultra, A4, p5 and ND H100 v5, built from published
//! layouts (each source in their README), plus a flat VM and a node with a NIC missing, live
//! in `gpudirect-core/tests/sysfs/`, built by `make-fixtures.sh` there; `expected.toml`
//! holds each vendor's map.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::config::NicClass;
use crate::cpulist::CpuList;

/// More PCI functions than this is not a machine but a loop or a hostile tree.
pub const MAX_PCI_FUNCTIONS: usize = 4096;

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: u32 = 0x10de;

/// Why the sysfs tree could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LocalityError {
    /// A directory or file the reader needs could not be read.
    #[error("{path}: cannot read PCI locality: {source}")]
    Io {
        /// What was being read.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The tree has more PCI functions than [`MAX_PCI_FUNCTIONS`].
    #[error("{path}: more than {MAX_PCI_FUNCTIONS} PCI functions; is this a sysfs tree?")]
    TooMany {
        /// The directory.
        path: String,
    },
}

/// One PCI function as sysfs shows it: the raw facts the map is built from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciFunction {
    /// Its address, `0000:04:00.0` (lowercase).
    pub bdf: String,
    /// The chain above it: host bridge (`pci0000:00`) first, then each bridge down to
    /// its parent.
    pub upstream: Vec<String>,
    /// `vendor`.
    pub vendor: u32,
    /// `class` (24 bits: class, subclass, programming interface).
    pub class: u32,
    /// `numa_node`, when the platform reports one (sysfs says -1 when not).
    pub numa_node: Option<u32>,
    /// Names under `net/`.
    pub netdevs: Vec<String>,
    /// Names under `infiniband/` (RDMA devices: mlx5_0, EFA's rdmap79s0, ...).
    pub rdma_devices: Vec<String>,
}

impl PciFunction {
    /// Whether this function is a CUDA GPU.
    pub fn is_gpu(&self) -> bool {
        self.vendor == NVIDIA_VENDOR && matches!(self.class >> 8, 0x0302 | 0x0300)
    }

    /// Whether this function carries a network or RDMA device.
    pub fn is_nic(&self) -> bool {
        !self.is_gpu() && (!self.netdevs.is_empty() || !self.rdma_devices.is_empty())
    }

    /// Its names in the namespace a profile uses for data NICs.
    pub fn names(&self, class: NicClass) -> &[String] {
        match class {
            NicClass::Net => &self.netdevs,
            NicClass::Infiniband => &self.rdma_devices,
        }
    }
}

/// A node's GPUs and NICs with their PCI placement and NUMA CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Locality {
    /// GPUs in CUDA order (PCI bus order).
    pub gpus: Vec<PciFunction>,
    /// NICs in PCI bus order.
    pub nics: Vec<PciFunction>,
    /// Each NUMA node's CPUs.
    pub node_cpus: BTreeMap<u32, CpuList>,
}

/// What the map says about one GPU, in the terms a profile uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuLink {
    /// CUDA index.
    pub gpu: usize,
    /// The GPU's PCI address.
    pub pci: String,
    /// Names of the nearest NICs (under the same switch), in PCI order; empty if none is.
    pub nics: Vec<String>,
    /// NUMA node of the first of those NICs, else of the GPU.
    pub numa_node: Option<u32>,
    /// That NUMA node's CPUs.
    pub cpus: Option<CpuList>,
}

impl Locality {
    /// Reads the map under a sysfs root (`/sys`, or a fixture tree).
    pub fn read(sysfs_root: &Path) -> Result<Locality, LocalityError> {
        let devices_dir = sysfs_root.join("bus/pci/devices");
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| LocalityError::Io { path, source }
        };
        let mut functions = Vec::new();
        for entry in fs::read_dir(&devices_dir).map_err(io(&devices_dir))? {
            let entry = entry.map_err(io(&devices_dir))?;
            if functions.len() >= MAX_PCI_FUNCTIONS {
                return Err(LocalityError::TooMany {
                    path: devices_dir.display().to_string(),
                });
            }
            let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
            if !is_bdf(&name) {
                continue;
            }
            let link = fs::read_link(entry.path()).map_err(io(&entry.path()))?;
            let Some(upstream) = upstream_chain(&link, &name) else {
                continue;
            };
            let dir = entry.path();
            functions.push(PciFunction {
                bdf: name,
                upstream,
                vendor: read_hex(&dir.join("vendor")).unwrap_or(0),
                class: read_hex(&dir.join("class")).unwrap_or(0),
                numa_node: read_trimmed(&dir.join("numa_node"))
                    .and_then(|n| n.parse::<i64>().ok())
                    .and_then(|n| u32::try_from(n).ok()),
                netdevs: netdev_names(&dir),
                rdma_devices: child_names(&dir.join("infiniband")),
            });
        }
        let numa_nodes: BTreeSet<u32> = functions
            .iter()
            .filter(|f| f.is_gpu() || f.is_nic())
            .filter_map(|f| f.numa_node)
            .collect();
        let mut node_cpus = BTreeMap::new();
        for node in numa_nodes {
            let file: PathBuf = sysfs_root.join(format!("devices/system/node/node{node}/cpulist"));
            // A node without a readable cpulist only loses pinning, not the NIC map.
            if let Some(cpus) = read_trimmed(&file).and_then(|t| CpuList::parse(&t).ok()) {
                node_cpus.insert(node, cpus);
            }
        }
        Ok(Locality::from_devices(functions, node_cpus))
    }

    /// Builds the map from the raw facts: GPUs and NICs kept, each in PCI bus order.
    pub fn from_devices(
        functions: Vec<PciFunction>,
        node_cpus: BTreeMap<u32, CpuList>,
    ) -> Locality {
        let (mut gpus, mut nics): (Vec<_>, Vec<_>) = functions
            .into_iter()
            .filter(|f| f.is_gpu() || f.is_nic())
            .partition(PciFunction::is_gpu);
        // Canonical BDFs (fixed-width lowercase hex) sort as their numbers do.
        gpus.sort_by(|a, b| a.bdf.cmp(&b.bdf));
        nics.sort_by(|a, b| a.bdf.cmp(&b.bdf));
        Locality {
            gpus,
            nics,
            node_cpus,
        }
    }

    /// For each GPU, the nearest NICs of `class` whose name `allowed` accepts (a profile's
    /// declared data NICs; the control NIC is thereby left out), and their CPUs.
    pub fn links(&self, class: NicClass, allowed: &dyn Fn(&str) -> bool) -> Vec<GpuLink> {
        let candidates: Vec<(&PciFunction, Vec<&String>)> = self
            .nics
            .iter()
            .map(|nic| {
                (
                    nic,
                    nic.names(class).iter().filter(|n| allowed(n)).collect(),
                )
            })
            .filter(|(_, names): &(_, Vec<&String>)| !names.is_empty())
            .collect();
        // Each GPU's nearest NICs: those under its lowest shared bridge. Depth 1 is the
        // host bridge alone: not a shared switch.
        let nics: Vec<&PciFunction> = candidates.iter().map(|(nic, _)| *nic).collect();
        let nearest: Vec<Vec<usize>> = self
            .gpus
            .iter()
            .map(|gpu| under_switch(gpu, &nics))
            .collect();
        self.gpus
            .iter()
            .enumerate()
            .map(|(index, gpu)| {
                let near: Vec<&(&PciFunction, Vec<&String>)> =
                    share_out(&nearest, index, |set| set)
                        .into_iter()
                        .map(|i| &candidates[i])
                        .collect();
                let nics: Vec<String> = near
                    .iter()
                    .flat_map(|(_, names)| names.iter().map(|n| (*n).clone()))
                    .collect();
                let numa_node = near
                    .first()
                    .and_then(|(nic, _)| nic.numa_node)
                    .or(gpu.numa_node);
                GpuLink {
                    gpu: index,
                    pci: gpu.bdf.clone(),
                    nics,
                    numa_node,
                    cpus: numa_node.and_then(|n| self.node_cpus.get(&n).cloned()),
                }
            })
            .collect()
    }
}

/// GPU `gpu`'s share of its nearest NICs. GPUs whose nearest NICs are the same set (two
/// GPUs and two NICs under one switch, as on A3 Mega, A3 Ultra and A4) split them in blocks,
/// in PCI order: GPU k of m takes NICs k*n/m up to (k+1)*n/m of the n, or NIC k*n/m when
/// there are fewer NICs than GPUs (A3 High's two GPUs a NIC). One GPU with four EFA devices
/// keeps all four. This is the vendors' map on every published layout
/// (gpudirect-core/tests/sysfs/expected.toml), where "every NIC under the switch" would give
/// each GPU both of a pair.
pub(crate) fn share_out<K: PartialEq>(
    picks: &[K],
    gpu: usize,
    set_of: impl Fn(&K) -> &Vec<usize>,
) -> Vec<usize> {
    let mine = set_of(&picks[gpu]);
    if mine.is_empty() {
        return Vec::new();
    }
    // The peers: GPUs whose pick is the same (same NICs; for the generator, also the same
    // level).
    let peers: Vec<usize> = (0..picks.len())
        .filter(|&g| picks[g] == picks[gpu])
        .collect();
    let (m, n) = (peers.len(), mine.len());
    let k = peers.iter().position(|&g| g == gpu).unwrap_or(0);
    if n >= m {
        mine[k * n / m..(k + 1) * n / m].to_vec()
    } else {
        vec![mine[k * n / m]]
    }
}

/// The indices of the `nics` under `gpu`'s lowest shared PCIe switch: those whose chain
/// shares the most bridges with the GPU's, if that is more than the host bridge alone
/// (depth 1 is not a shared switch). Empty when none is.
pub(crate) fn under_switch(gpu: &PciFunction, nics: &[&PciFunction]) -> Vec<usize> {
    let shared = |nic: &PciFunction| common_prefix(&gpu.upstream, &nic.upstream);
    match nics.iter().map(|nic| shared(nic)).max().filter(|&d| d >= 2) {
        Some(depth) => (0..nics.len())
            .filter(|&i| shared(nics[i]) == depth)
            .collect(),
        None => Vec::new(),
    }
}

pub(crate) fn common_prefix(a: &[String], b: &[String]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// `DDDD:BB:DD.F`, lowercase hex.
fn is_bdf(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter().enumerate().all(|(i, c)| {
            matches!(i, 4 | 7 | 10) || c.is_ascii_digit() || (b'a'..=b'f').contains(c)
        })
}

/// The bridges above `bdf` from its `/sys/bus/pci/devices` link target
/// (`../../../devices/pci0000:00/0000:00:01.0/.../<bdf>`).
fn upstream_chain(link: &Path, bdf: &str) -> Option<Vec<String>> {
    let parts: Vec<String> = link
        .components()
        .filter_map(|c| c.as_os_str().to_str().map(str::to_ascii_lowercase))
        .collect();
    let start = parts.iter().position(|p| p.starts_with("pci"))?;
    let chain = &parts[start..];
    let (last, upstream) = chain.split_last()?;
    (last == bdf).then(|| upstream.to_vec())
}

fn read_trimmed(path: &Path) -> Option<String> {
    // sysfs attributes are a few bytes; a large file here is not sysfs.
    read_at_most(path, 4096)
}

/// A small file's text, trimmed; `None` when it cannot be read, is not a regular file, or
/// is longer than `limit`. Opened without blocking (a FIFO in a copied tree cannot hang
/// it) and read to at most `limit + 1` bytes (a link to `/dev/zero` cannot fill memory;
/// security review T11).
pub fn read_at_most(path: &Path, limit: usize) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    (text.len() <= limit).then(|| text.trim().to_string())
}

fn read_hex(path: &Path) -> Option<u32> {
    let text = read_trimmed(path)?;
    u32::from_str_radix(text.trim_start_matches("0x"), 16).ok()
}

/// A function's network interfaces: under `net/`, or under `virtioN/net/` for a virtio NIC
/// (a VM's, whose interface belongs to the virtio device on the PCI function).
fn netdev_names(dir: &Path) -> Vec<String> {
    let mut names = child_names(&dir.join("net"));
    for child in child_names(dir) {
        if child.starts_with("virtio") && child[6..].bytes().all(|b| b.is_ascii_digit()) {
            names.extend(child_names(&dir.join(&child).join("net")));
        }
    }
    names.sort();
    names.dedup();
    names
}

fn child_names(dir: &Path) -> Vec<String> {
    names_in(dir, 64)
}

/// The names in `dir` (at most `limit` of them), sorted; none when it cannot be read.
pub fn names_in(dir: &Path, limit: usize) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .take(limit)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The fixture trees committed under `gpudirect-core/tests/sysfs/`.
#[cfg(test)]
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sysfs")
        .join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(_: &str) -> bool {
        true
    }

    fn nic_of(links: &[GpuLink]) -> Vec<String> {
        links.iter().map(|l| l.nics.join(",")).collect()
    }

    /// Security review T11: a FIFO hung the read, and a link to /dev/zero was read to 1 GB
    /// before the limit was looked at.
    #[test]
    fn a_small_read_refuses_fifos_devices_and_long_files_at_once() {
        let tmp = crate::test_support::temp_dir("read-at-most");
        let fifo = tmp.path().join("class");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let zero = tmp.path().join("vendor");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let long = tmp.path().join("long");
        fs::write(&long, vec![b'1'; 10_000]).unwrap();
        let short = tmp.path().join("short");
        fs::write(&short, "0x10de\n").unwrap();
        let start = std::time::Instant::now();
        assert_eq!(read_at_most(&fifo, 4096), None);
        assert_eq!(read_at_most(&zero, 4096), None);
        assert_eq!(read_at_most(&long, 4096), None);
        assert_eq!(read_at_most(&short, 4096).as_deref(), Some("0x10de"));
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn a3_high_pairs_two_gpus_per_nic_as_the_rxq_configurator_does() {
        let map = Locality::read(&fixture("a3-high")).unwrap();
        let gpus: Vec<&str> = map.gpus.iter().map(|g| g.bdf.as_str()).collect();
        assert_eq!(
            gpus,
            [
                "0000:04:00.0",
                "0000:05:00.0",
                "0000:0a:00.0",
                "0000:0b:00.0",
                "0000:84:00.0",
                "0000:85:00.0",
                "0000:8a:00.0",
                "0000:8b:00.0"
            ],
            "the NVSwitch (class 0x0680) is not a GPU"
        );
        assert_eq!(map.nics.len(), 5, "eth0..eth4");
        let data = |n: &str| n != "eth0";
        let links = map.links(NicClass::Net, &data);
        assert_eq!(
            nic_of(&links),
            ["eth1", "eth1", "eth2", "eth2", "eth3", "eth3", "eth4", "eth4"]
        );
        assert_eq!(links[5].pci, "0000:85:00.0");
        assert_eq!(links[0].numa_node, Some(0));
        assert_eq!(links[7].numa_node, Some(1));
        assert_eq!(links[0].cpus.as_ref().unwrap().to_string(), "0-51,104-155");
        assert_eq!(
            links[6].cpus.as_ref().unwrap().to_string(),
            "52-103,156-207"
        );
    }

    #[test]
    fn control_nic_on_the_root_complex_is_never_near() {
        let map = Locality::read(&fixture("a3-high")).unwrap();
        let only_control = |n: &str| n == "eth0";
        let links = map.links(NicClass::Net, &only_control);
        assert!(links.iter().all(|l| l.nics.is_empty()), "{links:?}");
        // CPUs then come from the GPU's own NUMA node.
        assert_eq!(links[4].numa_node, Some(1));
    }

    #[test]
    fn a3_mega_gives_each_gpu_its_own_nic() {
        let map = Locality::read(&fixture("a3-mega")).unwrap();
        let links = map.links(NicClass::Net, &|n: &str| n != "enp0s12");
        assert_eq!(
            nic_of(&links),
            [
                "enp6s0", "enp7s0", "enp13s0", "enp14s0", "enp134s0", "enp135s0", "enp141s0",
                "enp142s0"
            ]
        );
        // In the RDMA namespace these NICs have no names: nothing is near.
        assert!(map
            .links(NicClass::Infiniband, &any)
            .iter()
            .all(|l| l.nics.is_empty()));
    }

    #[test]
    fn p5_gives_each_gpu_four_efa_devices() {
        let map = Locality::read(&fixture("p5")).unwrap();
        assert_eq!(map.gpus.len(), 8);
        assert_eq!(map.nics.len(), 33, "32 EFA + the ENA control NIC");
        let links = map.links(NicClass::Infiniband, &any);
        assert_eq!(
            links[0].nics,
            ["rdmap79s0", "rdmap80s0", "rdmap81s0", "rdmap82s0"]
        );
        assert_eq!(links[0].pci, "0000:53:00.0");
        assert_eq!(links[7].pci, "0000:ca:00.0");
        assert_eq!(
            links[7].nics,
            ["rdmap198s0", "rdmap199s0", "rdmap200s0", "rdmap201s0"]
        );
        let all: BTreeSet<&String> = links.iter().flat_map(|l| &l.nics).collect();
        assert_eq!(all.len(), 32, "every EFA device belongs to exactly one GPU");
        assert_eq!(links[3].numa_node, Some(0));
        assert_eq!(links[4].cpus.as_ref().unwrap().to_string(), "48-95,144-191");
        // EFA has no netdev: in the net namespace only eth0 exists, and it is not near.
        assert!(map
            .links(NicClass::Net, &any)
            .iter()
            .all(|l| l.nics.is_empty()));
    }

    #[test]
    fn pure_map_from_data_prefers_the_deepest_shared_bridge() {
        let chain = |s: &str| s.split('/').map(str::to_string).collect::<Vec<_>>();
        let gpu = PciFunction {
            bdf: "0000:04:00.0".into(),
            upstream: chain("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0"),
            vendor: NVIDIA_VENDOR,
            class: 0x030000,
            numa_node: None,
            ..Default::default()
        };
        let nic = |bdf: &str, up: &str, name: &str| PciFunction {
            bdf: bdf.into(),
            upstream: chain(up),
            vendor: 0x15b3,
            class: 0x020700,
            numa_node: Some(3),
            rdma_devices: vec![name.into()],
            ..Default::default()
        };
        let map = Locality::from_devices(
            vec![
                nic("0000:09:00.0", "pci0000:00/0000:00:01.0", "mlx5_1"),
                nic(
                    "0000:05:00.0",
                    "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
                    "mlx5_0",
                ),
                gpu,
            ],
            BTreeMap::from([(3, CpuList::parse("0-3").unwrap())]),
        );
        let links = map.links(NicClass::Infiniband, &any);
        assert_eq!(links[0].nics, ["mlx5_0"]);
        assert_eq!(links[0].cpus.as_ref().unwrap().to_string(), "0-3");
        let only_far = map.links(NicClass::Infiniband, &|n: &str| n == "mlx5_1");
        assert_eq!(only_far[0].nics, ["mlx5_1"], "shares the root port");
    }

    #[test]
    fn reader_parses_links_and_ignores_foreign_names() {
        assert_eq!(
            upstream_chain(
                Path::new("../../../devices/pci0000:00/0000:00:01.0/0000:04:00.0"),
                "0000:04:00.0"
            ),
            Some(vec!["pci0000:00".to_string(), "0000:00:01.0".to_string()])
        );
        assert_eq!(
            upstream_chain(Path::new("../../../devices/pci0000:00/x"), "0000:04:00.0"),
            None
        );
        assert!(is_bdf("0000:8a:00.0"));
        assert!(!is_bdf("0000:8a:00"));
        assert!(!is_bdf("../etc/passwd"));
        let err = Locality::read(Path::new("/nonexistent-sysfs")).unwrap_err();
        assert!(
            err.to_string()
                .contains("/nonexistent-sysfs/bus/pci/devices"),
            "{err}"
        );
    }

    #[test]
    fn reads_this_machine_without_error() {
        // Whatever this machine has (often no GPU): reading /sys must not fail or panic.
        if Path::new("/sys/bus/pci/devices").is_dir() {
            let map = Locality::read(Path::new("/sys")).unwrap();
            assert!(map.links(NicClass::Net, &any).len() == map.gpus.len());
        }
    }
}
