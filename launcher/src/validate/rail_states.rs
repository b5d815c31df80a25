//! Before any rail traffic: which rail NICs of each node cannot carry a pair (down, missing,
//! or without an IPv4 address). Issue #45: a pair on such a NIC fails or hangs, its partner
//! is charged for it, and a cell is spent on what sysfs already says.
//!
//! Two halves, as in [`crate::validate::wiring`]:
//! - [`collect`] runs on every node (an srun step of `gpudirect agent rail-states`) and
//!   prints one [`NodeRailStates`] line;
//! - [`plan`] (pure) reads every node's line: each rail's pairs are planned over the nodes
//!   whose NIC is up there, and each (node, rail) left out is named `down` with the node's
//!   own reason. A node that did not answer keeps every rail: its pairs judge it.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::budget::Budget;
use crate::noteln;
use crate::slurm::{AgentStep, StepProfile};
use gpudirect_wire::rails::rail_state;

/// The key that marks a node's line among other output.
pub const LINE_KEY: &str = "gpudirect_rail_states";

/// One node's rail NICs that cannot carry traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRailStates {
    /// Always 1: marks the line.
    pub gpudirect_rail_states: u32,
    /// The node (Slurm's name).
    pub node: String,
    /// Each rail NIC that is down, missing or without an address, with why
    /// (`eth2 is down (operstate down)`); a NIC that is up is not listed.
    pub down: BTreeMap<String, String>,
}

/// This node's answer: each of `rails` checked under `sys_class_net` (`/sys/class/net`),
/// and against `addressed`, the interfaces that hold an IPv4 address (`None` when they
/// could not be listed, and then addresses are not checked). Addresses, not routes: a
/// cloud NIC with a /32 address has no connected route and still carries traffic.
pub fn collect(
    node: &str,
    rails: &[String],
    sys_class_net: &Path,
    addressed: Option<&BTreeSet<String>>,
) -> NodeRailStates {
    let down = rails
        .iter()
        .filter_map(|nic| {
            let why = match (rail_state(sys_class_net, nic), addressed) {
                (Err(why), _) => why,
                (Ok(()), Some(a)) if !a.contains(nic) => format!("{nic} has no IPv4 address"),
                (Ok(()), _) => return None,
            };
            Some((nic.clone(), why))
        })
        .collect();
    NodeRailStates {
        gpudirect_rail_states: 1,
        node: node.to_string(),
        down,
    }
}

/// The interfaces of this host that hold an IPv4 address (getifaddrs(3)).
pub fn ipv4_interfaces() -> Result<BTreeSet<String>, String> {
    let all = nix::ifaddrs::getifaddrs().map_err(|e| format!("getifaddrs: {e}"))?;
    Ok(all
        .filter(|a| {
            a.address
                .as_ref()
                .and_then(|s| s.as_sockaddr_in())
                .is_some()
        })
        .map(|a| a.interface_name)
        .collect())
}

/// The nodes' answers in srun's `--label` output, and the lines that could not be read.
pub fn read_lines(stdout: &str) -> (Vec<NodeRailStates>, Vec<String>) {
    crate::slurm::read_labelled_json(stdout, LINE_KEY)
}

/// How long the check may take: it reads sysfs and one file of /proc on each node.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(60);

/// Asks every node of `nodes` (one srun step of `gpudirect agent rail-states`) which of
/// `rails` cannot carry traffic there, and plans each rail's nodes from the answers. A step
/// that cannot start, or nodes that do not answer, leave those nodes on every rail (their
/// pairs judge them), said in a note by `tool`.
pub fn ask(tool: &str, nodes: &[String], rails: &[String], budget: &Budget) -> RailNodes {
    let args: Vec<OsString> = vec![
        "rail-states".into(),
        "--rails".into(),
        rails.join(",").into(),
    ];
    let step = AgentStep {
        timeout: budget.limit(ASK_TIMEOUT),
        ..AgentStep::per_node(nodes, StepProfile::Nothing, args)
    };
    let asked = step
        .job()
        .and_then(|job| crate::slurm::run_step(&job, read_lines, budget.flag()));
    let states = match asked {
        Ok(a) => a.answers,
        Err(e) => {
            noteln!("gpudirect {tool}: could not ask the nodes for their rail NICs' state ({e}): every node is paired on every rail");
            Vec::new()
        }
    };
    let silent: Vec<&str> = nodes
        .iter()
        .filter(|n| !states.iter().any(|s| &s.node == *n))
        .map(String::as_str)
        .collect();
    if !silent.is_empty() && silent.len() < nodes.len() {
        noteln!(
            "gpudirect {tool}: {} did not say its rail NICs' state: paired on every rail",
            gpudirect_core::hostlist::compress(&silent)
        );
    }
    let planned = plan(nodes, rails, &states);
    for ((node, r), why) in &planned.down {
        noteln!(
            "gpudirect {tool}: {node} {}: {why}: named down, left out of that rail's pairs",
            rails[*r]
        );
    }
    planned
}

/// Who takes part in each rail's pairs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RailNodes {
    /// Per rail (the plan's order): the nodes whose NIC there is up or unknown, in the
    /// allocation's order.
    pub per_rail: Vec<Vec<String>>,
    /// (node, rail index) left out, with the node's reason.
    pub down: BTreeMap<(String, usize), String>,
}

impl RailNodes {
    /// Every node on every rail: nothing is known to be down.
    pub fn all(nodes: &[String], rails: &[String]) -> Self {
        RailNodes {
            per_rail: rails.iter().map(|_| nodes.to_vec()).collect(),
            down: BTreeMap::new(),
        }
    }
}

/// Each rail's nodes: `nodes` less those whose answer in `states` says that rail's NIC is
/// down. Pure.
pub fn plan(nodes: &[String], rails: &[String], states: &[NodeRailStates]) -> RailNodes {
    let mut out = RailNodes::all(nodes, rails);
    for s in states.iter().filter(|s| nodes.contains(&s.node)) {
        for (r, rail) in rails.iter().enumerate() {
            if let Some(why) = s.down.get(rail) {
                out.per_rail[r].retain(|n| *n != s.node);
                out.down.insert((s.node.clone(), r), why.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../gpudirect-core/tests/sysfs/{name}"))
    }

    fn rails() -> Vec<String> {
        ["eth0", "eth1", "eth3"].map(String::from).to_vec()
    }

    /// The recorded a3-high node (every NIC up): with eth1 holding no IPv4 address it is
    /// named for that; the missing-nic tree (a3-high without eth3) names eth3 missing.
    #[test]
    fn recorded_nodes_name_a_nic_without_address_and_a_missing_one() {
        let addressed: BTreeSet<String> = ["eth0", "eth3"].map(String::from).into();
        let s = collect("n1", &rails(), &tree("a3-high/class/net"), Some(&addressed));
        assert_eq!(
            s.down.into_iter().collect::<Vec<_>>(),
            [("eth1".to_string(), "eth1 has no IPv4 address".to_string())]
        );
        let s = collect("n2", &rails(), &tree("missing-nic/class/net"), None);
        assert_eq!(
            s.down.into_iter().collect::<Vec<_>>(),
            [(
                "eth3".to_string(),
                "eth3 does not exist on this node".to_string()
            )]
        );
        // Addresses not listed: only sysfs decides.
        let s = collect("n1", &rails(), &tree("a3-high/class/net"), None);
        assert!(s.down.is_empty(), "{s:?}");
    }

    /// This host's own interfaces: loopback holds 127.0.0.1 wherever this runs.
    #[test]
    fn this_hosts_ipv4_interfaces_include_loopback() {
        let found = ipv4_interfaces().unwrap();
        assert!(found.contains("lo"), "{found:?}");
    }

    /// A NIC taken down (operstate down) is named down, and the line reads back from srun's
    /// labelled output.
    #[test]
    fn a_nic_that_is_down_is_named_and_read_back() {
        let sys = tempfile::tempdir().unwrap();
        for (nic, state) in [("eth1", "up"), ("eth2", "down")] {
            let dir = sys.path().join(nic);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("operstate"), format!("{state}\n")).unwrap();
        }
        let rails = ["eth1", "eth2"].map(String::from).to_vec();
        let s = collect("node3", &rails, sys.path(), None);
        assert_eq!(
            s.down.into_iter().collect::<Vec<_>>(),
            [(
                "eth2".to_string(),
                "eth2 is down (operstate down)".to_string()
            )]
        );
        let line = serde_json::to_string(&collect("node3", &rails, sys.path(), None)).unwrap();
        let (read, bad) = read_lines(&format!("0: {line}\nsrun: noise\n"));
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(read[0].node, "node3");
        assert!(read[0].down.contains_key("eth2"));
    }

    /// One node's eth1 down and another's eth3 missing: each leaves only that rail's pairs;
    /// a node that did not answer, and one not in the allocation, change nothing.
    #[test]
    fn a_nic_down_leaves_only_its_rail() {
        let nodes: Vec<String> = (1..=4).map(|i| format!("node{i}")).collect();
        let rails: Vec<String> = (1..=4).map(|i| format!("eth{i}")).collect();
        let state = |node: &str, nic: &str, why: &str| NodeRailStates {
            gpudirect_rail_states: 1,
            node: node.into(),
            down: [(nic.to_string(), why.to_string())].into(),
        };
        let states = [
            state("node2", "eth1", "eth1 is down (operstate down)"),
            state("node3", "eth3", "eth3 does not exist on this node"),
            state("node9", "eth2", "eth2 is down (operstate down)"),
        ];
        let p = plan(&nodes, &rails, &states);
        assert_eq!(p.per_rail[0], ["node1", "node3", "node4"]);
        assert_eq!(p.per_rail[1], nodes);
        assert_eq!(p.per_rail[2], ["node1", "node2", "node4"]);
        assert_eq!(p.per_rail[3], nodes);
        assert_eq!(p.down.len(), 2);
        assert_eq!(
            p.down[&("node2".to_string(), 0)],
            "eth1 is down (operstate down)"
        );
        assert_eq!(plan(&nodes, &rails, &[]), RailNodes::all(&nodes, &rails));
    }
}
