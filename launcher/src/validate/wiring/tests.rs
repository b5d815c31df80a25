use super::*;

use std::path::PathBuf;

/// A node as the local cluster's tcpx nodes report: GPUs 0-7 on eth1,eth1,eth2,eth2,...;
/// `subnet[k]` is ethK's third octet (rail k is 10.213.k.0/24).
fn node(name: &str, third_octets: [u8; 5]) -> NodeWiring {
    let nics = [
        "eth1", "eth1", "eth2", "eth2", "eth3", "eth3", "eth4", "eth4",
    ];
    NodeWiring {
        gpudirect_wiring: 1,
        node: name.to_string(),
        profile: Some("tcpx".into()),
        source: "profile tcpx's gpu_nics".into(),
        gpus: nics
            .iter()
            .enumerate()
            .map(|(i, n)| GpuWire {
                gpu: i as u32,
                nics: vec![n.to_string()],
            })
            .collect(),
        nics: (1..=4)
            .map(|k| NicNet {
                name: format!("eth{k}"),
                present: true,
                state: Some("up".into()),
                subnets: vec![format!("10.213.{}.0/24", third_octets[k])],
            })
            .collect(),
        notes: Vec::new(),
    }
}

const WIRED: [u8; 5] = [0, 1, 2, 3, 4];

fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("node{i}")).collect()
}

#[test]
fn every_node_on_the_same_rails_is_healthy() {
    let reports: Vec<NodeWiring> = names(4).iter().map(|n| node(n, WIRED)).collect();
    let a = analyse(&reports, &names(4));
    assert_eq!(a.health, Health::Healthy, "{a:?}");
    assert!(a.findings.is_empty());
    assert_eq!(a.rails.len(), 8);
    assert_eq!(a.rails[2].subnet.as_deref(), Some("10.213.2.0/24"));
    assert_eq!(a.rails[2].nics, ["eth2"]);
    assert_eq!((a.rails[2].agreeing, a.rails[2].nodes), (4, 4));
}

#[test]
fn a_node_with_two_nics_swapped_is_named_with_its_gpus_and_nics() {
    let mut reports: Vec<NodeWiring> = names(4).iter().map(|n| node(n, WIRED)).collect();
    // node2's eth1 and eth2 carry each other's addresses (renamed, or cabled crosswise).
    reports[1] = node("node2", [0, 2, 1, 3, 4]);
    let a = analyse(&reports, &names(4));
    assert_eq!(a.health, Health::Degraded);
    assert_eq!(a.findings.len(), 1, "{:?}", a.findings);
    let f = &a.findings[0];
    assert_eq!(f.node, "node2");
    assert_eq!(f.gpus, [0, 1, 2, 3]);
    assert_eq!(f.nics, ["eth1", "eth2"]);
    assert!(
        f.message.contains(
            "GPUs 0-1 (eth1) are on 10.213.2.0/24, where 3 of 4 nodes have them on 10.213.1.0/24"
        ),
        "{}",
        f.message
    );
    assert!(
        f.message
            .contains("eth1 is on 10.213.2.0/24, the subnet eth2 has on the other nodes"),
        "{}",
        f.message
    );
    assert!(f.message.ends_with("cabled to another rail's switch"));
    // The rails are still the majority's.
    assert_eq!(a.rails[0].subnet.as_deref(), Some("10.213.1.0/24"));
    assert_eq!(a.rails[0].agreeing, 3);
}

#[test]
fn two_nodes_that_differ_are_both_named_since_neither_is_the_majority() {
    let reports = vec![node("node1", WIRED), node("node2", [0, 2, 1, 3, 4])];
    let a = analyse(&reports, &names(2));
    assert_eq!(a.health, Health::Degraded);
    let f = a.findings.iter().find(|f| f.gpus == [0]).unwrap();
    assert_eq!(f.node, "node[1-2]");
    assert!(
        f.message.contains("no subnet most nodes share"),
        "{}",
        f.message
    );
    assert!(a.notes.iter().any(|n| n.contains("validate 3 or more")));
}

#[test]
fn a_missing_node_a_down_nic_and_another_gpu_count_are_named() {
    let mut reports: Vec<NodeWiring> = names(3).iter().map(|n| node(n, WIRED)).collect();
    reports[0].nics[2].state = Some("down".into());
    reports[1].gpus.truncate(4);
    reports[1].nics.truncate(2);
    let expected = names(4);
    let a = analyse(&reports, &expected);
    assert_eq!(a.missing, ["node4"]);
    assert_eq!(a.health, Health::Failed);
    let of = |n: &str| &a.findings.iter().find(|f| f.node == n).unwrap().message;
    assert!(of("node1").contains("eth3 is down"), "{}", of("node1"));
    assert!(
        of("node2").contains("maps 4 GPUs, where most nodes map 8"),
        "{}",
        of("node2")
    );
}

#[test]
fn a_nic_that_is_missing_or_has_no_address_is_named() {
    let mut reports: Vec<NodeWiring> = names(3).iter().map(|n| node(n, WIRED)).collect();
    reports[2].nics[3].present = false;
    reports[2].nics[3].subnets.clear();
    reports[2].nics[3].state = None;
    reports[1].nics[0].subnets.clear();
    let a = analyse(&reports, &names(3));
    let of = |n: &str| &a.findings.iter().find(|f| f.node == n).unwrap().message;
    assert!(of("node3").contains("eth4 is missing"), "{}", of("node3"));
    assert!(
        of("node2").contains("GPU 0's eth1 has no IPv4 subnet"),
        "{}",
        of("node2")
    );
    assert_eq!(a.health, Health::Degraded);
}

#[test]
fn nics_on_one_subnet_check_nothing_and_say_so() {
    let reports: Vec<NodeWiring> = names(3).iter().map(|n| node(n, [0; 5])).collect();
    let a = analyse(&reports, &names(3));
    assert!(a.findings.is_empty());
    assert!(
        a.notes
            .iter()
            .any(|n| n.contains("rails cannot be told apart by subnet")),
        "{:?}",
        a.notes
    );
}

#[test]
fn no_report_could_not_run() {
    assert_eq!(analyse(&[], &names(2)).health, Health::CouldNotRun);
}

fn sysfs(tree: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../gpudirect-core/tests/sysfs")
        .join(tree)
}

/// A /proc for a fixture tree: its driver's GPU list, and a route file that puts each of
/// `nics` on its own /24 (10.0.K.0/24 for the K-th) after the control NIC's.
fn proc_with_routes(tree: &str, control: &str, nics: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let gpus = dir.path().join("driver/nvidia/gpus");
    std::fs::create_dir_all(&gpus).unwrap();
    for gpu in std::fs::read_dir(sysfs(&format!("{tree}.proc")).join("driver/nvidia/gpus"))
        .unwrap()
        .flatten()
    {
        std::fs::create_dir(gpus.join(gpu.file_name())).unwrap();
    }
    let mut route = String::from(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n",
    );
    route.push_str(&format!(
        "{control}\t00000000\t0100800A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    ));
    for (k, nic) in nics.iter().enumerate() {
        route.push_str(&format!(
            "{nic}\t00{:02X}000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
            k + 1
        ));
    }
    std::fs::create_dir_all(dir.path().join("net")).unwrap();
    std::fs::write(dir.path().join("net/route"), route).unwrap();
    dir
}

const A3_MEGA_NICS: [&str; 8] = [
    "enp6s0", "enp7s0", "enp13s0", "enp14s0", "enp134s0", "enp135s0", "enp141s0", "enp142s0",
];

#[test]
fn an_a3_mega_node_reports_the_plugins_map_and_each_nics_subnet() {
    let config = gpudirect_core::config::parse_config(
        include_str!("../../../../slurm-conf/gpudirect.toml"),
        "slurm-conf/gpudirect.toml",
    )
    .unwrap();
    let proc_root = proc_with_routes("a3-mega", "enp0s12", &A3_MEGA_NICS);
    let roots = Roots {
        sysfs: &sysfs("a3-mega"),
        proc_root: proc_root.path(),
    };
    // a3m-0001 is in the node set that names the slurm image's NICs: tcpxo, sysfs locality.
    let r = collect(Ok(&config), None, "a3m-0001", roots);
    assert_eq!(r.profile.as_deref(), Some("tcpxo"));
    assert_eq!(
        r.source, "profile tcpxo, each GPU's NIC from sysfs",
        "{r:?}"
    );
    let map: Vec<Vec<String>> = r.gpus.iter().map(|g| g.nics.clone()).collect();
    let expected: Vec<Vec<String>> = A3_MEGA_NICS.iter().map(|n| vec![n.to_string()]).collect();
    assert_eq!(map, expected);
    assert_eq!(r.nics.len(), 8);
    let nic = r.nics.iter().find(|n| n.name == "enp13s0").unwrap();
    assert!(nic.present);
    assert_eq!(nic.subnets, ["10.0.3.0/24"]);
    // No profile (mode none): the PCI tree's map, the same here.
    let bare = collect(Ok(&config), Some("none"), "a3m-0001", roots);
    assert_eq!(bare.profile, None);
    assert_eq!(bare.source, "the PCI tree (no profile)");
    let map: Vec<Vec<String>> = bare.gpus.iter().map(|g| g.nics.clone()).collect();
    assert_eq!(map, expected);
    // Three such nodes, one with enp6s0 and enp7s0 on each other's subnets: named.
    let swapped = {
        let mut nics = A3_MEGA_NICS;
        nics.swap(0, 1);
        proc_with_routes("a3-mega", "enp0s12", &nics)
    };
    let odd = collect(
        Ok(&config),
        None,
        "a3m-0002",
        Roots {
            sysfs: roots.sysfs,
            proc_root: swapped.path(),
        },
    );
    let third = collect(Ok(&config), None, "a3m-0003", roots);
    let a = analyse(
        &[r, odd, third],
        &["a3m-0001".into(), "a3m-0002".into(), "a3m-0003".into()],
    );
    assert_eq!(a.findings.len(), 1, "{:?}", a.findings);
    assert_eq!(a.findings[0].node, "a3m-0002");
    assert_eq!(a.findings[0].gpus, [0, 1]);
    assert_eq!(a.findings[0].nics, ["enp6s0", "enp7s0"]);
}

#[test]
fn an_a3_ultra_nodes_rdma_devices_are_on_their_interfaces_subnets() {
    let config = gpudirect_core::config::parse_config(
        include_str!("../../../../slurm-conf/gpudirect.toml"),
        "slurm-conf/gpudirect.toml",
    )
    .unwrap();
    let interfaces: Vec<String> = (0..8).map(|i| format!("gpu{i}rdma0")).collect();
    let names: Vec<&str> = interfaces.iter().map(String::as_str).collect();
    let proc_root = proc_with_routes("a3-ultra", "eth0", &names);
    let roots = Roots {
        sysfs: &sysfs("a3-ultra"),
        proc_root: proc_root.path(),
    };
    let r = collect(Ok(&config), Some("gib"), "a3u-0001", roots);
    assert_eq!(r.source, "profile gib, each GPU's NIC from sysfs", "{r:?}");
    let map: Vec<Vec<String>> = r.gpus.iter().map(|g| g.nics.clone()).collect();
    let expected: Vec<Vec<String>> = (0..8).map(|i| vec![format!("mlx5_{i}")]).collect();
    assert_eq!(map, expected);
    // mlx5_K's interface is gpuKrdma0, on the K+1-th subnet.
    for (k, nic) in r.nics.iter().enumerate() {
        assert!(nic.present, "{nic:?}");
        assert_eq!(nic.subnets, [format!("10.0.{}.0/24", k + 1)], "{nic:?}");
    }
}

#[test]
fn a_node_without_gpus_maps_the_profiles_gpu_nics_and_says_so() {
    let config = gpudirect_core::config::parse_config(
        include_str!("../../../../slurm-conf/gpudirect.toml"),
        "slurm-conf/gpudirect.toml",
    )
    .unwrap();
    let empty = tempfile::tempdir().unwrap();
    let roots = Roots {
        sysfs: empty.path(),
        proc_root: empty.path(),
    };
    let r = collect(Ok(&config), Some("tcpx"), "node1", roots);
    assert_eq!(r.source, "profile tcpx's gpu_nics");
    assert_eq!(r.gpus.len(), 8);
    assert_eq!(r.gpus[7].nics, ["eth4"]);
    assert!(r
        .notes
        .iter()
        .any(|n| n.contains("as many GPUs as profile tcpx's gpu_nics maps")));
    assert!(r
        .notes
        .iter()
        .any(|n| n.contains("no NIC's subnet is known")));
    assert!(r.nics.iter().all(|n| !n.present && n.subnets.is_empty()));
    // Without a config and without a PCI tree: no map, and why.
    let none = collect(Err("no such file".into()), None, "node1", roots);
    assert!(none.gpus.is_empty());
    assert!(
        none.notes
            .iter()
            .any(|n| n.starts_with("no GPU-to-NIC map:")),
        "{:?}",
        none.notes
    );
}

#[test]
fn reports_are_read_back_from_srun_label_output() {
    let line = serde_json::to_string(&node("node3", WIRED)).unwrap();
    let (a, b) = line.split_at(300);
    let text = format!("srun: warning: something\n2: {a}\n2: {b}\n");
    let (reports, bad) = read_reports(&text);
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(reports, [node("node3", WIRED)]);
}

/// A NIC taken down (`ip link set eth2 down`, as `local-cluster nic node3 eth2 down` does)
/// loses its connected route, so its GPUs have no subnet: the finding says it is down and
/// does not suggest renaming or miscabling, which a swap (above) still does.
#[test]
fn a_nic_that_is_down_is_said_to_be_down_not_miscabled() {
    let mut reports: Vec<NodeWiring> = names(4).iter().map(|n| node(n, WIRED)).collect();
    reports[2].nics[1].state = Some("down".into());
    reports[2].nics[1].subnets.clear();
    let a = analyse(&reports, &names(4));
    assert_eq!(a.findings.len(), 1, "{:?}", a.findings);
    let f = &a.findings[0];
    assert_eq!(f.node, "node3");
    assert_eq!(f.gpus, [2, 3]);
    assert_eq!(f.nics, ["eth2"]);
    assert!(f.message.contains("eth2 is down"), "{}", f.message);
    assert!(!f.message.contains("renamed"), "{}", f.message);
    assert!(
        f.message.ends_with(
            "a NIC down or missing, not one on another rail: bring it back up (its link, \
             cable, switch port) and validate again"
        ),
        "{}",
        f.message
    );
}
