//! [`derive`] on every fixture tree of `gpudirect-core/tests/sysfs/`, against the vendor's
//! map in `expected.toml` there (README.md there names each source).

use super::*;

fn sysfs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sysfs")
}

fn facts(tree: &str) -> NodeFacts {
    let proc_dir = sysfs_dir().join(format!("{tree}.proc"));
    NodeFacts::read(
        &sysfs_dir().join(tree),
        proc_dir.is_dir().then_some(proc_dir.as_path()),
    )
    .unwrap_or_else(|e| panic!("{tree}: {e}"))
}

fn strings(v: &toml::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_tree_gives_its_vendors_map() {
    let text = fs::read_to_string(sysfs_dir().join("expected.toml")).unwrap();
    let expected: toml::Table = text.parse().unwrap();
    assert!(expected.len() >= 8, "{} trees", expected.len());
    for (tree, want) in &expected {
        let got = derive(&facts(tree)).unwrap_or_else(|e| panic!("{tree}: {e}"));
        let class = match want["nic_class"].as_str().unwrap() {
            "net" => NicClass::Net,
            _ => NicClass::Infiniband,
        };
        assert_eq!(got.nic_class, class, "{tree}");
        assert_eq!(
            got.control_nic.as_ref().map(|(n, _)| n.as_str()),
            want["control_nic"].as_str(),
            "{tree}: {:?}",
            got.control_nic
        );
        assert_eq!(got.data_nics, strings(&want["data_nics"]), "{tree}");
        let pcis: Vec<String> = got.gpus.iter().map(|g| g.pci.clone()).collect();
        assert_eq!(pcis, strings(&want["gpus"]), "{tree}");
        let map: Vec<Vec<String>> = got.gpus.iter().map(|g| g.nics.clone()).collect();
        let want_map: Vec<Vec<String>> = want["gpu_nics"]
            .as_array()
            .unwrap()
            .iter()
            .map(strings)
            .collect();
        assert_eq!(map, want_map, "{tree}");
        // A fallback is said; a map the switches decide is not.
        let fallback = want["expect"].as_str() == Some("fallback");
        let said = got
            .warnings
            .iter()
            .any(|w| w.contains("share(s) no PCIe switch"));
        assert_eq!(said, fallback, "{tree}: {:?}", got.warnings);
        let rate = want.get("line_rate_gbps").and_then(|r| r.as_float());
        assert_eq!(
            got.line_rate_gbit,
            rate.map(|r| (r * 8.0).round() as u32),
            "{tree}"
        );
        // Each data NIC's CPUs are its NUMA node's; none where the platform gives none.
        let numa = want.get("nic_numa").and_then(|t| t.as_table()).unwrap();
        let cpus = want["numa_cpus"].as_table().unwrap();
        for (nic, node) in numa {
            let node = node.as_integer().unwrap();
            let got_cpus = got.nic_cpus.get(nic).map(ToString::to_string);
            let want_cpus = cpus
                .get(&node.to_string())
                .and_then(|c| c.as_str())
                .filter(|_| node >= 0);
            assert_eq!(got_cpus.as_deref(), want_cpus, "{tree}: {nic}");
        }
    }
}

#[test]
fn no_gpu_or_no_data_nic_is_refused_with_what_was_found() {
    let mut f = facts("a3-high");
    f.locality.gpus.clear();
    let e = derive(&f).unwrap_err().to_string();
    assert!(e.contains("no NVIDIA GPU") && e.contains("eth1"), "{e}");
    let mut f = facts("a3-high");
    f.locality.nics.clear();
    let e = derive(&f).unwrap_err().to_string();
    assert!(
        e.contains("no data NIC") && e.contains("found no NIC"),
        "{e}"
    );
    // The control NIC alone carries the data, said.
    let mut f = facts("a3-high");
    f.locality.nics.retain(|n| n.netdevs == ["eth0"]);
    let d = derive(&f).unwrap();
    assert_eq!(d.data_nics, ["eth0"]);
    assert!(
        d.warnings[0].contains("the control NIC is the only NIC"),
        "{:?}",
        d.warnings
    );
}

#[test]
fn the_default_route_is_read_from_proc() {
    let text =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                eth1\t00C0A80A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
    assert_eq!(default_route(text).as_deref(), Some("eth0"));
    assert_eq!(default_route("Iface\tDestination\n"), None);
}

#[test]
fn each_interfaces_connected_subnets_are_read_from_proc() {
    // As the local cluster's node2 prints it: eth1 on 10.213.1.0/24, eth0 with the default
    // route via 10.213.0.254 and its own /24, a host route via a gateway (not a subnet), a
    // route that is down, and a garbled line.
    let text =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
        eth0\t00000000\tFE00D50A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
        eth0\t0000D50A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
        eth1\t0001D50A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
        eth2\t0A0A0A0A\tFE02D50A\t0007\t0\t0\t0\tFFFFFFFF\t0\t0\t0\n\
        eth3\t0003D50A\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
        eth4\tzzzz\n";
    let subnets = connected_subnets(text);
    assert_eq!(subnets["eth0"], ["10.213.0.0/24"]);
    assert_eq!(subnets["eth1"], ["10.213.1.0/24"]);
    assert!(!subnets.contains_key("eth2"), "{subnets:?}");
    assert!(!subnets.contains_key("eth3"), "{subnets:?}");
    assert!(!subnets.contains_key("eth4"), "{subnets:?}");
    // The fixture trees' control NIC: 10.128.0.0/20.
    let a3 = std::fs::read_to_string(sysfs_dir().join("a3-mega.proc/net/route")).unwrap();
    assert_eq!(connected_subnets(&a3)["enp0s12"], ["10.128.0.0/20"]);
}
