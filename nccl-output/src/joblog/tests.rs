//! The reader over the logs recorded on the lent host (`tests/fixtures/nccl-logs/lent-host/`)
//! and over hand-written lines for the forms those logs lack.

use std::collections::BTreeSet;

use super::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/nccl-logs");

fn fixture(rel: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{rel}")).unwrap()
}

/// Several inputs, as `gpudirect log a b` reads them.
fn read_all(texts: &[String]) -> JobLog {
    let mut reader = JobLogReader::new(Limits::default());
    for (source, text) in texts.iter().enumerate() {
        for (i, line) in text.lines().enumerate() {
            reader.feed(source, i as u64 + 1, line);
        }
    }
    reader.finish()
}

/// A rank's links: (via, NIC).
type Links = Vec<(String, Option<String>)>;

/// (host, rank, links) of a communicator's ranks.
fn links(c: &Communicator) -> Vec<(String, u32, Links)> {
    c.ranks
        .iter()
        .map(|r| {
            (
                r.host.clone().unwrap_or_default(),
                r.rank,
                r.links
                    .iter()
                    .map(|l| (l.via.clone(), l.nic.clone()))
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn the_profiles_nic_under_srun_gpudirect() {
    let log = read_str(&fixture(
        "lent-host/torch-srun-gpudirect-box-eth1-shaped.txt",
    ));
    assert_eq!(log.communicators.len(), 1, "{:?}", log.communicators);
    let c = &log.communicators[0];
    assert_eq!(c.id, "0xd4ebc1f95cb89a5b");
    assert!(c.id_from_log);
    assert_eq!((c.nranks, c.nnodes), (Some(2), Some(2)));
    assert_eq!(c.hosts(), ["node1", "node2"]);
    let socket0 = vec![("NET/Socket/0".to_string(), Some("eth1".to_string()))];
    assert_eq!(
        links(c),
        [
            ("node1".to_string(), 0, socket0.clone()),
            ("node2".to_string(), 1, socket0)
        ]
    );
    for r in &c.ranks {
        assert_eq!(r.init, InitState::Destroyed, "{r:?}");
        assert_eq!((r.cuda_dev, r.nvml_dev), (Some(0), Some(0)));
        assert_eq!(r.gdr, Some(false));
        assert_eq!(r.links[0].channels, 4, "2 channels, send and receive");
        assert_eq!(r.links[0].peers, 1);
    }
    assert_eq!(c.coll_channels, Some(2));
    let p = &log.processes[c.ranks[0].process];
    assert_eq!(p.nccl_version.as_deref(), Some("2.28.9"));
    assert_eq!(p.cuda_version.as_deref(), Some("13.0"));
    assert_eq!(p.networks, ["Socket"]);
    assert_eq!(
        p.env.get("NCCL_SOCKET_IFNAME").map(String::as_str),
        Some("eth1")
    );
    let net = p.plugins.iter().find(|n| n.kind == "NET").unwrap();
    assert!(
        !net.loaded && net.text.contains("libnccl-net.so"),
        "{net:?}"
    );
    assert!(log.events.is_empty(), "{:?}", log.events);
}

#[test]
fn without_the_profile_nccl_spreads_over_both_nics() {
    let log = read_str(&fixture(
        "lent-host/torch-srun-gpudirect-none-eth0-eth1-shaped.txt",
    ));
    let c = &log.communicators[0];
    assert_eq!(c.id, "0x470b5de4999c140a");
    for (host, _, used) in links(c) {
        let nics: Links = ["0", "1"]
            .iter()
            .zip(["eth0", "eth1"])
            .map(|(d, n)| (format!("NET/Socket/{d}"), Some(n.to_string())))
            .collect();
        assert_eq!(used, nics, "{host}");
    }
    assert_eq!(c.coll_channels, Some(4));
    assert_eq!(c.collnet_channels, Some(4));
    assert_eq!(c.nvls_channels, Some(0));
}

#[test]
fn one_file_per_rank_makes_one_communicator() {
    let log = read_all(&[
        fixture("lent-host/torch-allreduce-2node-socket-rank0.txt"),
        fixture("lent-host/torch-allreduce-2node-socket-rank1.txt"),
    ]);
    assert_eq!(log.communicators.len(), 1);
    let c = &log.communicators[0];
    assert_eq!(c.ranks.len(), 2);
    assert_eq!(c.hosts(), ["node1", "node2"]);
    let sources: Vec<usize> = c
        .ranks
        .iter()
        .map(|r| log.processes[r.process].source)
        .collect();
    assert_eq!(
        sources,
        [0, 1],
        "rank 0 from the first file, rank 1 from the second"
    );
    for (_, _, used) in links(c) {
        assert_eq!(
            used,
            [("NET/Socket/0".to_string(), Some("eth1".to_string()))]
        );
    }
}

#[test]
fn nccl_tests_under_mpirun_over_lo() {
    let log = read_str(&fixture("lent-host/nccl-tests-2node-one-gpu-lo.txt"));
    let c = &log.communicators[0];
    assert_eq!(c.nranks, Some(2));
    assert_eq!(c.hosts(), ["gdnode0", "gdnode1"]);
    for (host, _, used) in links(c) {
        assert!(
            used.iter()
                .all(|(via, nic)| via.starts_with("NET/Socket/") && nic.as_deref() == Some("lo")),
            "{host}: {used:?}"
        );
    }
}

#[test]
fn older_logs_without_comm_id_are_matched_by_size_and_order() {
    // NCCL 2.14-style lines: no commId, no Init START; two 2-rank communicators per process.
    let log = read_str(
        "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>\n\
         b:2:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.2<0>\n\
         a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/1/GDRDMA\n\
         a:1:1 [0] NCCL INFO comm 0xa1 rank 0 nranks 2 cudaDev 0 busId 1c000 - Init COMPLETE\n\
         b:2:2 [0] NCCL INFO comm 0xb1 rank 1 nranks 2 cudaDev 0 busId 1c000 - Init COMPLETE\n\
         a:1:1 [0] NCCL INFO comm 0xa2 rank 0 nranks 2 cudaDev 0 busId 1c000 - Init COMPLETE\n\
         a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0(1)/GDRDMA\n\
         b:2:2 [0] NCCL INFO comm 0xb2 rank 1 nranks 2 cudaDev 0 busId 1c000 - Init COMPLETE\n",
    );
    let ids: Vec<&str> = log.communicators.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["size-2-#1", "size-2-#2"]);
    assert!(log
        .communicators
        .iter()
        .all(|c| !c.id_from_log && c.ranks.len() == 2));
    // The first channel line came before any comm line: it has no communicator to go to.
    let second = &log.communicators[1].ranks[0].links;
    assert_eq!(second.len(), 1);
    assert_eq!(
        (second[0].device, second[0].nic.as_deref(), second[0].gdrdma),
        (Some(0), Some("mlx5_0"), true)
    );
}

#[test]
fn trouble_with_its_rank_and_host() {
    let log = read_all(&[
        "[rank0]:n1:10:10 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n\
         [rank1]:n2:11:11 [0] NCCL INFO comm 0x2 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n\
         [rank1]:n2:11:20 [0] NCCL WARN NET/Socket : recv: Connection reset by peer\n\
         [rank0]:[E1201 10:00:00.000] [PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.\n\
         epoch 1 loss 0.5\n"
            .to_string(),
    ]);
    let got: Vec<(EventKind, Option<&str>, Option<u32>)> = log
        .events
        .iter()
        .map(|e| (e.kind, e.host.as_deref(), e.rank))
        .collect();
    assert_eq!(
        got,
        [
            (EventKind::Warning, Some("n2"), Some(1)),
            (EventKind::Watchdog, Some("n1"), Some(0)),
        ]
    );
    assert_eq!(log.event_counts.get("watchdog"), Some(&1));
    assert_eq!(log.processes[0].launcher_rank, Some(0));
}

#[test]
fn limits_bound_what_is_kept_and_say_so() {
    let mut reader = JobLogReader::new(Limits {
        max_communicators: 2,
        max_events: 1,
        ..Limits::default()
    });
    for i in 0..5u64 {
        reader.feed(
            0,
            i + 1,
            &format!("h:1:1 [0] NCCL INFO comm 0x{i} rank 0 nranks 4 commId 0xc{i} - Init START"),
        );
        reader.feed(0, i + 1, "h:1:1 [0] NCCL WARN something failed");
    }
    let log = reader.finish();
    assert_eq!(log.communicators.len(), 2);
    assert_eq!(log.events.len(), 1);
    assert_eq!(log.event_counts.get("warning"), Some(&5));
    assert!(
        log.dropped.iter().any(|d| d.starts_with("3 communicators")),
        "{:?}",
        log.dropped
    );
}

// ---- Published logs of others (`tests/fixtures/nccl-logs/published/`, README.md names
// each source and lists the facts below, checked by hand against the text).

fn published(name: &str) -> JobLog {
    read_str(&fixture(&format!("published/{name}.txt")))
}

fn set<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> BTreeSet<String> {
    items.into_iter().map(Into::into).collect()
}

/// Every `via` seen on `host`, in communicators and outside them.
fn vias_on(log: &JobLog, host: &str) -> BTreeSet<String> {
    let in_comms = log
        .communicators
        .iter()
        .flat_map(|c| &c.ranks)
        .filter(|r| r.host.as_deref() == Some(host))
        .flat_map(|r| &r.links);
    let loose = log
        .processes
        .iter()
        .filter(|p| p.host.as_deref() == Some(host))
        .flat_map(|p| &p.links);
    in_comms.chain(loose).map(|l| l.via.clone()).collect()
}

/// The NICs `host`'s processes listed for `net`.
fn nics_on(log: &JobLog, host: &str, net: &str) -> BTreeSet<String> {
    log.processes
        .iter()
        .filter(|p| p.host.as_deref() == Some(host))
        .flat_map(|p| &p.nics)
        .filter(|n| n.net == net)
        .map(|n| n.nic.clone())
        .collect()
}

fn hosts(log: &JobLog) -> BTreeSet<String> {
    log.processes
        .iter()
        .filter_map(|p| p.host.clone())
        .collect()
}

fn networks(log: &JobLog) -> BTreeSet<String> {
    log.processes
        .iter()
        .flat_map(|p| p.networks.iter().cloned())
        .collect()
}

/// (kind, host, rank) of every trouble line.
fn trouble(log: &JobLog) -> Vec<(EventKind, Option<String>, Option<u32>)> {
    log.events
        .iter()
        .map(|e| (e.kind, e.host.clone(), e.rank))
        .collect()
}

#[test]
fn published_infiniband_logs() {
    let log = published("ib-nv-peer-memory-56-nccl247");
    assert_eq!(hosts(&log), set(["master_node", "secondary_node"]));
    assert_eq!(nics_on(&log, "master_node", "IB"), set(["mlx5_0"]));
    // NCCL 2.4 lists its socket NIC beside IB: a list, not a fallback.
    assert_eq!(nics_on(&log, "secondary_node", "Socket"), set(["ib0"]));
    assert!(log.processes.iter().all(|p| p.links.is_empty()));
    let master = log
        .processes
        .iter()
        .find(|p| p.host.as_deref() == Some("master_node"));
    assert_eq!(master.unwrap().nccl_version.as_deref(), Some("2.4.7"));
    assert_eq!(
        master
            .unwrap()
            .env
            .get("NCCL_IB_DISABLE")
            .map(String::as_str),
        Some("0")
    );

    let log = published("ib-nccl-707-gdrdma-channels");
    assert_eq!(
        vias_on(&log, "10-90-43-152"),
        set([
            "NET/IB/0/GDRDMA",
            "NET/IB/2/GDRDMA",
            "NET/IB/4/GDRDMA",
            "NET/IB/5/GDRDMA"
        ])
    );
    let log = published("ib-nccl-1412-channels-no-gdrdma");
    assert_eq!(
        vias_on(&log, "swat1-04"),
        set(["NET/IB/3", "P2P/direct pointer/read"])
    );

    let log = published("ib-nccl-1737-torchrun-ibext-sharp");
    let c = &log.communicators[0];
    assert_eq!(
        (c.id.as_str(), c.nranks, c.nnodes),
        ("0xb458bb774b113b3a", Some(2), Some(2))
    );
    assert_eq!(c.ranks[0].init, InitState::Started);
    assert_eq!(
        nics_on(&log, "gh-3714u06", "IB"),
        set(["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_2"])
    );
    assert_eq!(networks(&log), set(["IBext_v8"]));
    assert_eq!(log.processes[0].nccl_version.as_deref(), Some("2.21.5"));

    // DeepSpeed's pdsh puts `gpu1505: ` before NCCL's own `gpu1505:22060:...`.
    let log = published("ib-transformers-22363-deepspeed-pdsh");
    assert_eq!(hosts(&log), set(["gpu1504", "gpu1505"]));
    for host in ["gpu1504", "gpu1505"] {
        assert_eq!(vias_on(&log, host), set(["NET/IB/1"]), "{host}");
    }
}

#[test]
fn published_roce_logs() {
    let log = published("roce-nccl-tests-185-dgxh100");
    for host in ["dgxh100-3", "dgxh100-4"] {
        assert_eq!(
            nics_on(&log, host, "IB"),
            set(["mlx5_10", "mlx5_11"]),
            "{host}"
        );
    }
    assert_eq!(networks(&log), set(["IB"]));
    // A host named `64` is a host, not srun -l's task 64.
    let log = published("roce-nccl-997-numeric-hostname");
    assert_eq!(hosts(&log), set(["64"]));
    let bonds: BTreeSet<String> = (0..9).map(|i| format!("mlx5_bond_{i}")).collect();
    assert_eq!(nics_on(&log, "64", "IB"), bonds);
    assert!(log.processes.iter().all(|p| p.launcher_rank.is_none()));
    // Merged NICs: NET device 1 is mlx5_0 and mlx5_1 together.
    let log = published("roce-nccl-tests-373-fused-nics");
    assert_eq!(
        nics_on(&log, "bigo", "IB"),
        set(["mlx5_2+mlx5_3", "mlx5_0+mlx5_1"])
    );
    let c = &log.communicators[0];
    assert_eq!((c.id.as_str(), c.nranks), ("0x9ca74fa6e40df7f4", Some(3)));
    let links = &c.ranks[0].links;
    assert_eq!(c.ranks[0].rank, 2);
    assert_eq!(links.len(), 1);
    assert_eq!(
        (
            links[0].via.as_str(),
            links[0].nic.as_deref(),
            links[0].channels
        ),
        ("NET/IBext_v8/1", Some("mlx5_0+mlx5_1"), 3)
    );
    assert_eq!(
        log.processes[0]
            .env
            .get("NCCL_P2P_LEVEL")
            .map(String::as_str),
        Some("LOC")
    );
}

#[test]
fn published_efa_logs() {
    let log = published("efa-nccl-1597-libfabric-p5en");
    assert_eq!(hosts(&log), set(["8h200-2", "8h200-3"]));
    assert_eq!(networks(&log), set(["Libfabric"]));

    // mpirun's `[1,N]<stdout>:` tags, NCCL 2.4's `Ring` lines.
    let log = published("efa-aws-ofi-nccl-24-mpirun-warn");
    assert!(vias_on(&log, "ip-172-32-36-209").contains("P2P/IPC"));
    for host in ["ip-172-32-38-1", "ip-172-32-34-121", "ip-172-32-45-165"] {
        assert!(
            vias_on(&log, host).contains("NET/AWS Libfabric/0"),
            "{host}"
        );
    }
    assert_eq!(
        trouble(&log),
        [
            // `include/net.h:24 -> 2`, after "No NIC info for dev 0".
            (EventKind::Error, Some("ip-172-32-36-209".into()), Some(31)),
            (
                EventKind::Warning,
                Some("ip-172-32-45-165".into()),
                Some(23)
            ),
        ]
    );

    let log = published("efa-aws-ofi-nccl-715-sagemaker-gdrdma");
    let vias = vias_on(&log, "algo-1");
    assert!(vias.contains("NET/AWS Libfabric/2/GDRDMA") && vias.contains("P2P/CUMEM/read"));

    let log = published("efa-torchtitan-1570-rankprefix-k8s");
    let c = &log.communicators[0];
    assert_eq!(c.id, "0xbb118fbd103cc510");
    assert_eq!(c.ranks[0].host.as_deref(), Some("costa-671b-5-worker-1"));
    assert_eq!(log.processes[0].launcher_rank, Some(0));
    assert_eq!(networks(&log), set(["Libfabric"]));
    // The channels before the new communicator's init belong to one not in the excerpt.
    assert_eq!(
        set(log.processes[0].links.iter().map(|l| l.via.clone())),
        set(["P2P/CUMEM"])
    );
    assert_eq!(log.processes[0].links[0].channels, 5);
}

#[test]
fn published_fallbacks_to_socket() {
    // EFA's plugin fails, NCCL falls back to its socket transport.
    let log = published("efa-fallback-aws-k8s-tester-454-mpirun-pod");
    let pod = "bert-mpi-training-worker-0";
    assert_eq!(nics_on(&log, pod, "Socket"), set(["eth0"]));
    assert_eq!(networks(&log), set(["Socket"]));
    let warned: Vec<_> = trouble(&log);
    assert_eq!(warned.len(), 2);
    assert!(warned
        .iter()
        .all(|w| w == &(EventKind::Warning, Some(pod.into()), Some(0))));

    let log = published("efa-fallback-aws-ofi-nccl-889-cloudwatch");
    let host = "ip-10-36-29-253";
    assert_eq!(hosts(&log), set([host]));
    assert_eq!(nics_on(&log, host, "Socket"), set(["eth0"]));
    assert_eq!(log.event_counts.get("warning"), Some(&4));
    assert!(log
        .processes
        .iter()
        .any(|p| p.env.get("NCCL_SOCKET_IFNAME").map(String::as_str) == Some("eth0")));

    let log = published("socket-nccl-226-init");
    assert_eq!(hosts(&log).len(), 17);
    let on_ens3 = hosts(&log)
        .into_iter()
        .filter(|h| nics_on(&log, h, "Socket") == set(["ens3"]))
        .count();
    assert_eq!(on_ens3, 7);

    let log = published("socket-nccl-226-rings");
    let on_socket: Vec<String> = hosts(&log)
        .into_iter()
        .filter(|h| vias_on(&log, h) == set(["NET/Socket/0"]))
        .collect();
    assert_eq!(on_socket.len(), 10, "{on_socket:?}");
    let c = &log.communicators[0];
    assert_eq!(
        (c.id.as_str(), c.nranks, c.ranks.len()),
        ("size-64-#1", Some(64), 2)
    );

    // IBext loaded, found no device: NET/Socket over eth0, P2P inside the node.
    let log = published("socket-gke-hypercomputer-lab06-rank0");
    let c = &log.communicators[0];
    assert_eq!(
        (c.id.as_str(), c.nranks, c.nnodes),
        ("0x19e57876c4cebd96", Some(16), Some(2))
    );
    let r = &c.ranks[0];
    assert_eq!(
        (r.rank, r.local_ranks, r.init),
        (0, Some(8), InitState::Aborted)
    );
    let links: BTreeSet<(String, Option<String>)> = r
        .links
        .iter()
        .map(|l| (l.via.clone(), l.nic.clone()))
        .collect();
    assert_eq!(
        links,
        [
            ("NET/Socket/0".to_string(), Some("eth0".to_string())),
            ("P2P/CUMEM".to_string(), None)
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(c.coll_channels, Some(16));
    let p = &log.processes[r.process];
    assert_eq!(p.nccl_version.as_deref(), Some("2.22.3"));
    assert_eq!(
        p.env.get("NCCL_SOCKET_IFNAME").map(String::as_str),
        Some("eth0")
    );
}

#[test]
fn published_failures_and_timeouts() {
    // A connect abort that ends the init with ncclInternalError.
    let log = published("socket-failed-nccl-tests-166");
    assert_eq!(log.event_counts.get("warning"), Some(&4));
    assert!(
        log.events.iter().any(|e| e.kind == EventKind::Error
            && e.text.starts_with("init.cc:1358 -> 3 (ncclInternalError)")),
        "{:?}",
        log.events
    );
    assert_eq!(vias_on(&log, "ubuntu"), set(["SHM/direct/direct"]));

    let log = published("timeout-nccl-1610-watchdog");
    let watchdogs: Vec<Option<u32>> = log
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Watchdog)
        .map(|e| e.rank)
        .collect();
    assert_eq!(
        watchdogs,
        [Some(13), Some(15)],
        "torchrun's rank, not the group's"
    );

    let log = published("timeout-nccl-1610-proxy-abort");
    assert!(log
        .events
        .iter()
        .any(|e| e.kind == EventKind::Timeout && e.rank == Some(14)));
    let aborted: Vec<InitState> = log
        .communicators
        .iter()
        .flat_map(|c| &c.ranks)
        .map(|r| r.init)
        .collect();
    assert_eq!(aborted, [InitState::Aborted]);

    // The profile asked for gIB, which is not there: an invalid usage up the init.
    let log = published("gib-gpu-recipes-5-network-not-found");
    assert!(log
        .events
        .iter()
        .any(|e| e.kind == EventKind::Warning && e.text.contains("network gIB not found")));
    assert!(log
        .events
        .iter()
        .any(|e| e.kind == EventKind::Error && e.text.contains("(ncclInvalidUsage)")));
}

#[test]
fn published_tcpx_and_tcpxo_logs() {
    let log = published("tcpx-hypercomputer-lab18-transport");
    assert_eq!(networks(&log), set(["GPUDirectTCPX_v7"]));
    assert!(hosts(&log).is_empty(), "posted without host:pid:tid");
    let log = published("tcpxo-hypercomputer-lab22-fastrak");
    assert_eq!(networks(&log), set(["FasTrak"]));
    assert_eq!(hosts(&log), set(["tcpxo-wb-0", "tcpxo-wb-1"]));
    assert_eq!(log.processes.len(), 16);
}

/// Issue #40, a TCPXO run's own channel lines (facts in the published README, written
/// before the reader ran): rank 0 on tcpxo-wb-0 sends to and receives from rank 8 over the
/// FasTrak plugin's device 0 with GPUDirect RDMA both ways, two channels each way, and
/// reaches rank 7 over P2P/CUMEM; one process, no trouble.
#[test]
fn published_tcpxo_channel_lines_say_fastrak_with_gdr_both_ways() {
    let log = published("tcpxo-fastrak-hypercomputer-lab23-channels");
    assert_eq!(hosts(&log), set(["tcpxo-wb-0"]));
    assert_eq!(log.processes.len(), 1);
    assert!(log.events.is_empty(), "{:?}", log.events);
    assert_eq!(
        vias_on(&log, "tcpxo-wb-0"),
        set(["NET/FasTrak/0/GDRDMA", "P2P/CUMEM"])
    );
    let net = log.processes[0]
        .links
        .iter()
        .find(|l| l.net.is_some())
        .expect("a network link");
    assert_eq!(net.net.as_deref(), Some("FasTrak"));
    assert_eq!(net.device, Some(0));
    assert!(net.gdrdma);
    assert_eq!((net.send_channels, net.receive_channels), (2, 2));
}

/// The NCCL lines of every recorded nccl-tests output read the same through both readers:
/// the paths `gpudirect log` finds (in communicators and outside) are those `import` finds.
#[test]
fn the_nccl_tests_fixtures_paths_are_those_the_output_parser_reads() {
    let root = std::path::Path::new(FIXTURES).join("../nccl-tests");
    let mut checked = 0;
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let parsed = crate::parse(text.as_bytes());
            let debug = &parsed.debug;
            if debug.transports.is_empty() {
                continue;
            }
            let expected: BTreeSet<String> =
                debug.transports.iter().map(|t| t.via.clone()).collect();
            let log = read_str(&text);
            let in_comms = log
                .communicators
                .iter()
                .flat_map(|c| &c.ranks)
                .flat_map(|r| &r.links);
            let loose = log.processes.iter().flat_map(|p| &p.links);
            let got: BTreeSet<String> = in_comms.chain(loose).map(|l| l.via.clone()).collect();
            assert_eq!(got, expected, "{}", path.display());
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} fixtures with channel lines");
}

/// Blank lines are counted and never parsed (security review T7: a gzip bomb of newlines);
/// the lines around them read as without them.
#[test]
fn blank_lines_are_counted_and_change_nothing() {
    let lines = [
        "n1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 commId 0xa - Init START",
        "",
        "  \t ",
        "\u{1b}[0m",
        "n2:2:2 [0] NCCL INFO comm 0x2 rank 1 nranks 2 commId 0xa - Init START",
    ];
    let with = read_all(&[lines.join("\n")]);
    let without = read_all(&[[lines[0], lines[4]].join("\n")]);
    assert_eq!(with.lines, 5);
    assert_eq!(with.nccl_lines, 2);
    assert_eq!(with.communicators, without.communicators);
    assert_eq!(with.processes, without.processes);
}

#[test]
fn glued_records_split_only_at_a_prefix_after_padding() {
    use super::prefix::glued_records;
    let one = "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC";
    assert_eq!(glued_records(one), vec![one]);
    let two = "h:1:2 [0] NCCL INFO a     h:1:3 [1] NCCL WARN b";
    assert_eq!(
        glued_records(two),
        vec!["h:1:2 [0] NCCL INFO a     ", "h:1:3 [1] NCCL WARN b"]
    );
    // A quoted prefix after one space, or words that are no prefix after padding, stay.
    let quoted = "h:1:2 [0] NCCL INFO saw h:1:3 [1] NCCL INFO x";
    assert_eq!(glued_records(quoted), vec![quoted]);
    let padded = "h:1:2 [0] NCCL INFO a    host NCCL INFO b";
    assert_eq!(glued_records(padded), vec![padded]);
}
