//! `gpudirect profiles generate`: a profile written from the node itself (issue #31), in
//! the config's own TOML, each choice with a comment saying why. The facts and choices are
//! [`gpudirect_core::derive`]'s; this module writes them, alone or as an overlay that
//! `extends` a base profile (keeping its transport, variables and checks, replacing only
//! the NIC facts), and refuses a base whose NICs the node does not have.

use std::fmt::Write as _;

use gpudirect_core::config::{Config, NicClass};
use gpudirect_core::derive::Derived;

// Names from a --sysfs tree go into `#` comments: a newline in one would end the comment
// and write TOML (security review T11), so every one is shown escaped.
use crate::output::shown;
use crate::tune::overlay::quoted;

/// What to write.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The new profile's name.
    pub name: &'a str,
    /// The profile it extends, if any.
    pub base: Option<&'a str>,
    /// Where the facts came from (`/sys`), for the header comment.
    pub source: &'a str,
    /// The node, for the description.
    pub node: &'a str,
}

fn list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| quoted(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// Why a base profile cannot be extended with this node's NIC facts.
#[derive(Debug, thiserror::Error)]
pub enum BaseError {
    /// The config has no profile of that name.
    #[error("--base {base}: no such profile in the config (profiles: {profiles})")]
    NoSuchProfile {
        /// The `--base` given.
        base: String,
        /// The config's profiles, comma-separated.
        profiles: String,
    },
    /// The base extends another profile itself.
    #[error("--base {base}: it extends another profile itself, and a profile extends one level only: use that profile as the base")]
    ExtendsAnother {
        /// The `--base` given.
        base: String,
    },
    /// The base names its data NICs in another class than the node's.
    #[error("--base {base} names its data NICs as {base_class} ({base_nics}), but this node's are {node_class} ({node_nics})")]
    OtherClass {
        /// The `--base` given.
        base: String,
        /// How the base names its NICs (`interfaces`, `RDMA devices`).
        base_class: &'static str,
        /// The base's data NICs, comma-separated.
        base_nics: String,
        /// How the node's NICs are named.
        node_class: &'static str,
        /// The node's data NICs, comma-separated.
        node_nics: String,
    },
    /// The base uses NICs the node does not have.
    #[error("--base {base} uses {missing} that this node does not have (its data NICs: {node_nics}): a NIC is missing or named otherwise here (a node set's nic_names renames them; check the node's links)")]
    MissingNics {
        /// The `--base` given.
        base: String,
        /// The NICs the node lacks, comma-separated.
        missing: String,
        /// The node's data NICs, comma-separated.
        node_nics: String,
    },
}

/// Refuses a base profile that names NICs the node lacks, or names them in another class.
pub fn check_base(config: &Config, base: &str, derived: &Derived) -> Result<(), BaseError> {
    let Some(profile) = config.profiles.get(base) else {
        return Err(BaseError::NoSuchProfile {
            base: base.to_string(),
            profiles: config.profile_names().join(", "),
        });
    };
    if profile.extends.is_some() {
        return Err(BaseError::ExtendsAnother {
            base: base.to_string(),
        });
    }
    if profile.data_nic_class != derived.nic_class && !profile.data_nics.is_empty() {
        return Err(BaseError::OtherClass {
            base: base.to_string(),
            base_class: class_word(profile.data_nic_class),
            base_nics: profile.data_nics.join(", "),
            node_class: class_word(derived.nic_class),
            node_nics: derived.data_nics.join(", "),
        });
    }
    let missing: Vec<&String> = profile
        .data_nics
        .iter()
        .chain(profile.gpu_nics.iter())
        .filter(|n| !derived.data_nics.contains(n))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !missing.is_empty() {
        return Err(BaseError::MissingNics {
            base: base.to_string(),
            missing: missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            node_nics: derived.data_nics.join(", "),
        });
    }
    Ok(())
}

fn class_word(c: NicClass) -> &'static str {
    match c {
        NicClass::Net => "interfaces",
        NicClass::Infiniband => "RDMA devices",
    }
}

/// The profile as TOML text (pure).
pub fn render(derived: &Derived, req: &Request<'_>) -> String {
    let mut t = String::new();
    let key = format!("profiles.{}", req.name);
    let _ = writeln!(
        t,
        "# Written by `gpudirect profiles generate` from {} on {}. Check it with",
        shown(req.source),
        shown(req.node)
    );
    let _ = writeln!(t, "# `gpudirect profiles check --overlay FILE`, then install it with `gpudirect profiles install-overlay FILE`.");
    for w in &derived.warnings {
        let _ = writeln!(t, "# WARNING: {}", shown(w));
    }
    let _ = writeln!(t, "[{key}]");
    if let Some(base) = req.base {
        let _ = writeln!(
            t,
            "# {}'s transport, variables and checks; this node's NIC facts.",
            shown(base)
        );
        let _ = writeln!(t, "extends = {}", quoted(base));
    }
    let _ = writeln!(
        t,
        "description = {}",
        quoted(&format!(
            "{} GPU(s) and {} data NIC(s) as {} shows them on {}",
            derived.gpus.len(),
            derived.data_nics.len(),
            req.source,
            req.node
        ))
    );
    match &derived.control_nic {
        Some((nic, why)) => {
            let _ = writeln!(t, "# The control NIC: {}.", shown(why));
            let _ = writeln!(t, "control_nic = {}", quoted(nic));
        }
        None => {
            let _ = writeln!(t, "# The control NIC could not be told: set it.");
            let _ = writeln!(t, "# control_nic = \"eth0\"");
        }
    }
    if derived.nic_class == NicClass::Infiniband {
        let _ = writeln!(
            t,
            "# The NICs carry RDMA devices: the data NICs are named by them."
        );
        let _ = writeln!(t, "data_nic_class = \"infiniband\"");
    }
    let control_carries_data = derived
        .control_nic
        .as_ref()
        .is_some_and(|(c, _)| derived.data_nics.contains(c));
    if control_carries_data {
        let _ = writeln!(
            t,
            "# The control NIC is the only NIC: it carries the data too."
        );
    } else {
        let _ = writeln!(t, "# Every NIC but the control NIC, in PCI order.");
    }
    let _ = writeln!(t, "data_nics = {}", list(&derived.data_nics));
    if let Some(rate) = derived.line_rate_gbit {
        let _ = writeln!(
            t,
            "# The slowest data NIC's rate (sysfs speed or port rate), Gbit/s."
        );
        let _ = writeln!(t, "line_rate_gbit = {rate}");
    }
    let several = derived.gpus.iter().any(|g| g.nics.len() > 1);
    let _ = writeln!(
        t,
        "# GPU i (PCI order, as CUDA_DEVICE_ORDER=PCI_BUS_ID, nvidia-smi and Slurm's gres):"
    );
    for (i, g) in derived.gpus.iter().enumerate() {
        let mut line = format!(
            "#   GPU {i} {}: {} {}",
            shown(&g.pci),
            shown(&g.nics.join(", ")),
            g.level.as_str()
        );
        if !g.tied_with.is_empty() {
            let _ = write!(
                line,
                "; tied with the other GPUs there over {}: split in PCI order",
                shown(&g.tied_with.join(", "))
            );
        }
        let _ = writeln!(t, "{line}");
    }
    if several {
        let _ = writeln!(t, "# Some GPUs have several NICs under their switch: nic_locality = \"sysfs\" gives each task all");
        let _ = writeln!(t, "# of its GPU's at run time; gpu_nics names the first, for a node whose sysfs cannot be read.");
        let _ = writeln!(t, "nic_locality = \"sysfs\"");
    }
    let firsts: Vec<String> = derived
        .gpus
        .iter()
        .map(|g| g.nics.first().cloned().unwrap_or_default())
        .collect();
    let _ = writeln!(t, "gpu_nics = {}", list(&firsts));
    let pinned = firsts.iter().all(|n| derived.nic_cpus.contains_key(n));
    if pinned {
        let _ = writeln!(t, "# Each task runs on the CPUs of its NIC's NUMA node.");
        let _ = writeln!(t, "pin_cpus = true");
    }
    if !derived.nic_cpus.is_empty() {
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "# Each data NIC's NUMA node's CPUs (devices/system/node/nodeN/cpulist)."
        );
        let _ = writeln!(t, "[{key}.nic_cpus]");
        for (nic, cpus) in &derived.nic_cpus {
            let _ = writeln!(t, "{} = {}", bare_or_quoted(nic), quoted(&cpus.to_string()));
        }
    } else {
        let _ = writeln!(
            t,
            "# No NUMA node is given for the data NICs: no CPUs to pin to."
        );
    }
    t
}

/// A TOML key: bare when it can be.
fn bare_or_quoted(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        quoted(k)
    }
}

/// How the map compares with NCCL's own topology dump (`--compare-nccl`): one line per GPU,
/// and whether every GPU agrees. A GPU agrees when its NICs are among those NCCL finds
/// nearest it (NCCL lists every NIC of a tie; the map splits ties), or when neither finds
/// one (pure).
pub fn compare_with_nccl(
    derived: &Derived,
    dump: &nccl_output::topo::TopoDump,
) -> (Vec<String>, bool) {
    let nccl = dump.nearest_nets();
    let mut lines = Vec::new();
    let mut all = true;
    for (i, g) in derived.gpus.iter().enumerate() {
        let Some((_, near)) = nccl
            .iter()
            .find(|(busid, _)| busid.eq_ignore_ascii_case(&g.pci))
        else {
            all = false;
            lines.push(format!(
                "GPU {i} ({}): not in NCCL's dump (is it visible to the run that wrote it?)",
                g.pci
            ));
            continue;
        };
        let agrees = if g.nics.is_empty() {
            near.is_empty()
        } else {
            g.nics.iter().all(|n| near.contains(n))
        };
        all &= agrees;
        lines.push(format!(
            "GPU {i} ({}): {}: the map gives {}, NCCL finds {} nearest",
            g.pci,
            if agrees { "agrees" } else { "DIFFERS" },
            if g.nics.is_empty() {
                "none".to_string()
            } else {
                g.nics.join(", ")
            },
            if near.is_empty() {
                "none".to_string()
            } else {
                near.join(", ")
            }
        ));
    }
    for (busid, _) in &nccl {
        if !derived
            .gpus
            .iter()
            .any(|g| g.pci.eq_ignore_ascii_case(busid))
        {
            all = false;
            lines.push(format!(
                "NCCL's dump has GPU {busid}, which this tree does not show"
            ));
        }
    }
    (lines, all)
}

/// A cpulist as NCCL's topology file writes a CPU's `affinity`: the 32-bit words of its mask,
/// most significant first, comma-separated (sysfs's `cpumap`).
fn affinity(cpus: &gpudirect_core::cpulist::CpuList) -> String {
    let words = cpus.ids().max().map_or(1, |m| m as usize / 32 + 1);
    let mut mask = vec![0u32; words];
    for id in cpus.ids() {
        mask[id as usize / 32] |= 1 << (id % 32);
    }
    mask.iter()
        .rev()
        .map(|w| format!("{w:08x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// An NCCL topology file (`NCCL_TOPO_FILE`, the format NCCL writes with
/// `NCCL_TOPO_DUMP_FILE`) that states the map: one `<cpu>` per NUMA node, and under it one
/// virtual PCIe switch (`ffff:ff:NN.0`, as cloud providers' files do) per group of GPUs
/// that share NICs, holding those GPUs and their NICs. NCCL then sees each GPU next to its
/// NIC even in a VM whose PCI tree is flat. Attributes NCCL reads from sysfs itself (a
/// CPU's arch and model, a net's speed) are left out (pure).
pub fn topo_xml(derived: &Derived, facts: &gpudirect_core::derive::NodeFacts) -> String {
    use std::collections::BTreeMap;
    let loc = &facts.locality;
    let function = |name: &str| {
        loc.nics
            .iter()
            .find(|f| f.netdevs.iter().chain(&f.rdma_devices).any(|n| n == name))
    };
    let pci_line = |indent: &str, bdf: &str, class: u32, vendor: u32| {
        let link = facts.links.get(bdf).cloned().unwrap_or_default();
        let mut line = format!(
            "{indent}<pci busid=\"{bdf}\" class=\"0x{class:06x}\" vendor=\"0x{vendor:04x}\""
        );
        if let Some(d) = &link.device {
            let _ = write!(line, " device=\"{d}\"");
        }
        let _ = write!(
            line,
            " link_speed=\"{}\" link_width=\"{}\"/>",
            link.speed.as_deref().unwrap_or("32.0 GT/s PCIe"),
            link.width.as_deref().unwrap_or("16")
        );
        line
    };
    // Groups: GPUs with the same NICs, each under one NUMA node (the GPU's, else its NIC's).
    // In PCI order of their first GPU, so that the file reads as the map does.
    // (NUMA node, NICs) and the GPUs of that group.
    type Group = ((i64, Vec<String>), Vec<usize>);
    let mut groups: Vec<Group> = Vec::new();
    for (i, g) in derived.gpus.iter().enumerate() {
        let numa = g
            .numa_node
            .or_else(|| {
                g.nics
                    .first()
                    .and_then(|n| function(n))
                    .and_then(|f| f.numa_node)
            })
            .map_or(-1, i64::from);
        let key = (numa, g.nics.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    let mut placed: Vec<String> = Vec::new();
    let mut by_numa: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (k, ((numa, nics), gpus)) in groups.iter().enumerate() {
        let mut lines = vec![format!(
            "    <pci busid=\"ffff:ff:{:02x}.0\" class=\"0x060400\" vendor=\"0xffff\" device=\"0xffff\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">",
            k + 1
        )];
        for &g in gpus {
            lines.push(pci_line("      ", &derived.gpus[g].pci, 0x030200, 0x10de));
        }
        for nic in nics {
            if let Some(f) = function(nic) {
                if !placed.contains(&f.bdf) {
                    placed.push(f.bdf.clone());
                    lines.push(pci_line("      ", &f.bdf, f.class, f.vendor));
                }
            }
        }
        lines.push("    </pci>".into());
        by_numa.entry(*numa).or_default().extend(lines);
    }
    let mut t = String::from("<system version=\"1\">\n");
    for (numa, lines) in &by_numa {
        let mut cpu = format!("  <cpu numaid=\"{numa}\"");
        if let Some(cpus) = u32::try_from(*numa)
            .ok()
            .and_then(|n| loc.node_cpus.get(&n))
        {
            let _ = write!(cpu, " affinity=\"{}\"", affinity(cpus));
        }
        cpu.push('>');
        t.push_str(&cpu);
        t.push('\n');
        for l in lines {
            t.push_str(l);
            t.push('\n');
        }
        t.push_str("  </cpu>\n");
    }
    t.push_str("</system>\n");
    t
}
