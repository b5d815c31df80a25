//! The reader over the logs recorded on the lent host (`tests/fixtures/nccl-logs/lent-host/`)
//! and over hand-written lines for the forms those logs lack.

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
