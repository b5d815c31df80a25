//! Issue #40: the reader on real inputs of the forms `rules` lists, one test per form
//! (`tests/fixtures/nccl-logs/published/`, whose README names each source and the facts
//! asserted here, written before the reader ran on them).

use std::collections::BTreeSet;

use super::*;
use crate::TransportClass;

fn published(name: &str) -> JobLog {
    let path = format!(
        "{}/../tests/fixtures/nccl-logs/published/{name}.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    read_str(&std::fs::read_to_string(path).unwrap())
}

fn kinds(log: &JobLog) -> Vec<(EventKind, Option<u32>)> {
    log.events.iter().map(|e| (e.kind, e.rank)).collect()
}

/// Rule T1: a log of torch's watchdog alone has trouble, with its ranks.
#[test]
fn a_torch_watchdog_only_log_is_trouble_by_rank() {
    let log = published("watchdog-only-basicsr-737");
    assert_eq!(log.nccl_lines, 0);
    let watchdogs: BTreeSet<Option<u32>> = log
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Watchdog)
        .map(|e| e.rank)
        .collect();
    assert_eq!(watchdogs, [Some(0), Some(1), Some(2)].into());
    assert!(
        log.events[0].text.contains("SeqNum=808"),
        "{:?}",
        log.events
    );
}

/// Rule L5: NCCL 2.0's WARN (no `NCCL` token, no pid) under a redacted host, and the
/// program's own failure line.
#[test]
fn nccl_2_0_lines_without_the_nccl_token() {
    let log = published("old-nccl-111-v20-socket-warn");
    assert_eq!(log.nccl_lines, 1);
    assert_eq!(log.processes.len(), 1);
    let p = &log.processes[0];
    assert_eq!(
        (p.host.as_deref(), p.device),
        (Some("*server name*"), Some(0))
    );
    assert_eq!(
        kinds(&log),
        [(EventKind::Warning, None), (EventKind::Error, None)]
    );
    assert_eq!(
        log.events[0].text,
        "Call to connect failed : Connection refused"
    );
    assert_eq!(log.events[0].place, None, "2.0 puts the place before WARN");
}

/// Rules L3 and L6: the bare version line behind Open MPI's tag is every process's version.
#[test]
fn the_bare_version_behind_a_launcher_tag() {
    let log = published("mpirun-tag-nccl-300-bare-version-lo");
    assert_eq!(log.processes.len(), 3);
    for p in &log.processes {
        assert_eq!(p.host.as_deref(), Some("5873af64cf59"));
        assert_eq!(
            (p.nccl_version.as_deref(), p.cuda_version.as_deref()),
            (Some("2.5.6"), Some("10.2"))
        );
        assert_eq!(p.nics.len(), 1);
        assert_eq!(
            (p.nics[0].net.as_str(), p.nics[0].nic.as_str()),
            ("Socket", "lo")
        );
    }
    let tags: Vec<Option<u32>> = log.processes.iter().map(|p| p.launcher_rank).collect();
    assert_eq!(tags, [Some(0), Some(3), Some(2)]);
}

/// Rules L6 and K3: NCCL 2.3's bare version and its one-line-per-device NIC list.
#[test]
fn nccl_2_3_version_and_nic_lines() {
    let log = published("old-nccl-179-v237-bare-version");
    let pids: BTreeSet<Option<u32>> = log.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [Some(46393), Some(46394), Some(46395)].into());
    for p in &log.processes {
        assert_eq!(p.nccl_version.as_deref(), Some("2.3.7"), "{p:?}");
    }
    let first = &log.processes[0];
    let nics: Vec<(u32, &str)> = first
        .nics
        .iter()
        .filter(|n| n.net == "IB")
        .map(|n| (n.device, n.nic.as_str()))
        .collect();
    assert_eq!(
        nics,
        [(0, "mlx5_1"), (1, "mlx5_3"), (2, "mlx5_0"), (3, "mlx5_2")]
    );
}

/// Rule L4: lines stripped of `host:pid:tid` are one process of an unknown host, read in
/// full: version, NIC, variables, 2.5's `Ring` lines.
#[test]
fn lines_without_host_pid_tid() {
    let log = published("stripped-nccl-392-v257-gdr-partial");
    assert_eq!(log.processes.len(), 1);
    let p = &log.processes[0];
    assert_eq!((p.host.as_deref(), p.device), (None, Some(0)));
    assert_eq!(p.nccl_version.as_deref(), Some("2.5.7"));
    assert_eq!(p.nics[0].nic, "mlx5_0");
    assert_eq!(
        p.env.get("NCCL_IB_GID_INDEX").map(String::as_str),
        Some("3")
    );
    let vias: BTreeSet<&str> = p.links.iter().map(|l| l.via.as_str()).collect();
    assert_eq!(vias, ["NET/IB/0", "P2P/IPC", "direct shared memory"].into());
    let ib = p.links.iter().find(|l| l.via == "NET/IB/0").unwrap();
    assert!(!ib.gdrdma);
    assert_eq!(ib.nic.as_deref(), Some("mlx5_0"));
}

/// Rule L3: mpirun's timestamp glued to its tag; the tag (7) is not the NCCL rank (0).
#[test]
fn a_timestamp_glued_to_mpiruns_tag() {
    let log = published("timestamp-mpirun-nccl-957-glued");
    assert_eq!(log.processes.len(), 1);
    let p = &log.processes[0];
    assert_eq!(
        (p.host.as_deref(), p.pid, p.device, p.launcher_rank),
        (Some("tomte249"), Some(86390), Some(7), Some(7))
    );
    assert_eq!(p.networks, ["IB"]);
    let c = &log.communicators[0];
    assert_eq!((c.id.as_str(), c.nranks), ("0x44177c7a6970c9fa", Some(2)));
    assert_eq!((c.ranks[0].rank, c.ranks[0].init), (0, InitState::Started));
}

/// Rule L3: Ray's nested tags; rule C3: nNodes is the node count.
#[test]
fn rays_nested_tags_and_nnodes() {
    let log = published("ray-fastsafetensors-36-nested-prefix");
    assert_eq!(log.processes.len(), 1);
    assert_eq!(log.processes[0].host.as_deref(), Some("spark2"));
    let c = &log.communicators[0];
    assert_eq!((c.nranks, c.nnodes), (Some(2), Some(2)));
    assert_eq!(c.ranks[0].rank, 1);
    assert_eq!(c.ranks[0].host.as_deref(), Some("spark2"));
}

/// Rule C2: NCCL 2.29+'s `[Rank N]` init lines make one communicator; rule L2: WARN lines
/// behind NCCL's own timestamp, which are RAS's and not the communicator's.
#[test]
fn rank_tagged_init_lines_and_timestamped_warnings() {
    let log = published("rank-init-nccl-2397-v230-timestamps");
    assert_eq!(log.communicators.len(), 1, "{:?}", log.communicators);
    let c = &log.communicators[0];
    assert_eq!((c.id.as_str(), c.nranks), ("0xef3a13f82ff54f6a", Some(4)));
    let ranks: Vec<(u32, Option<&str>, InitState)> = c
        .ranks
        .iter()
        .map(|r| (r.rank, r.host.as_deref(), r.init))
        .collect();
    assert_eq!(
        ranks,
        [
            (0, Some("ubuntu2"), InitState::Started),
            (2, Some("ubuntu4"), InitState::Started)
        ]
    );
    assert_eq!(log.events.len(), 4);
    for e in &log.events {
        assert_eq!(e.kind, EventKind::Warning);
        assert_eq!(e.text, "Call to bind failed: Address already in use");
        assert!(e.about_ras(), "{e:?}");
    }
    // Only the processes that hold a rank of the communicator give their lines one.
    let ranks: Vec<Option<u32>> = log.events.iter().map(|e| e.rank).collect();
    assert_eq!(ranks, [Some(0), None, None, Some(2)]);
    let hosts: BTreeSet<Option<&str>> = log.events.iter().map(|e| e.host.as_deref()).collect();
    assert_eq!(hosts, [Some("ubuntu2"), Some("ubuntu4")].into());
}

/// Rule L7: a redacted host is kept as written, tells no node apart, and its processes
/// are told apart by pid.
#[test]
fn a_redacted_host() {
    let log = published("redacted-nccl-952-cluster-name");
    let pids: Vec<(Option<&str>, Option<u32>)> = log
        .processes
        .iter()
        .map(|p| (p.host.as_deref(), p.pid))
        .collect();
    assert_eq!(
        pids,
        [
            (Some("<cluster_name>"), Some(920)),
            (Some("<cluster_name>"), Some(919)),
            (Some("<cluster_name>"), Some(922))
        ]
    );
    assert!(is_placeholder_host("<cluster_name>"));
    let socket = log.processes[1]
        .links
        .iter()
        .find(|l| l.via == "NET/Socket/0")
        .expect("rank 8's NET/Socket/0");
    assert_eq!(socket.channels, 4);
    assert_eq!(log.event_counts.get("error"), Some(&5));
    assert_eq!(log.event_counts.get("warning"), Some(&3));
    assert!(log.events.iter().any(|e| e
        .text
        .contains("Failed to execute operation Connect from rank 11")));
}

/// Rule K2: CollNet lines are the rank's own links to the collective network (SHARP here),
/// with their device and GDRDMA, in the communicator of their process.
#[test]
fn collnet_sharp_links() {
    let log = published("collnet-nccl-tests-311-sharp");
    assert_eq!(log.communicators.len(), 1);
    let c = &log.communicators[0];
    assert_eq!((c.nranks, c.nnodes, c.ranks.len()), (Some(8), Some(4), 8));
    let collnet: Vec<(u32, &str, Option<u32>, bool, u64)> = c
        .ranks
        .iter()
        .flat_map(|r| r.links.iter().map(move |l| (r.rank, l)))
        .filter(|(_, l)| l.class == TransportClass::CollNet)
        .map(|(rank, l)| {
            (
                rank,
                l.net.as_deref().unwrap_or(""),
                l.device,
                l.gdrdma,
                l.receive_channels,
            )
        })
        .collect();
    assert_eq!(
        collnet,
        [
            (0, "SHARP", Some(1), true, 1),
            (2, "SHARP", Some(5), true, 1),
            (4, "SHARP", Some(0), true, 1),
            (6, "SHARP", Some(1), true, 1)
        ]
    );
    assert!(c.uses_network());
}

/// Rule K1: NET links between ranks of one host run inside the node (the ranks' hosts come
/// from their own directed channel lines when no init line is in the excerpt).
#[test]
fn network_links_inside_one_node() {
    let log = published("ib-nccl-707-gdrdma-channels");
    let links: Vec<&Link> = log.processes.iter().flat_map(|p| &p.links).collect();
    assert!(!links.is_empty());
    for l in links {
        assert_eq!(l.class, TransportClass::Network, "{l:?}");
        assert!(l.gdrdma, "{l:?}");
        assert_eq!(l.inside_node(), Some(true), "{l:?}");
    }
}

/// Rule K1: GDRDMA is per direction: the sides are counted apart.
#[test]
fn gdrdma_by_direction() {
    let log = published("efa-aws-ofi-nccl-715-sagemaker-gdrdma");
    let efa: Vec<&Link> = log
        .processes
        .iter()
        .filter(|p| p.pid == Some(18061))
        .flat_map(|p| &p.links)
        .filter(|l| l.class == TransportClass::Network)
        .collect();
    assert_eq!(efa.len(), 1);
    assert_eq!(efa[0].via, "NET/AWS Libfabric/2/GDRDMA");
    assert_eq!((efa[0].send_channels, efa[0].receive_channels), (2, 1));
    let log = published("stripped-nccl-392-v257-gdr-partial");
    let ib = log.processes[0]
        .links
        .iter()
        .find(|l| l.via == "NET/IB/0")
        .unwrap();
    assert_eq!(
        (ib.send_channels, ib.receive_channels, ib.gdrdma),
        (0, 2, false)
    );
}

/// Rule K3: a virtual bridge or the loopback in a socket list is named for what it is.
#[test]
fn virtual_interfaces_in_the_socket_list() {
    let log = published("virbr-nccl-tests-131-socket-list");
    let nics: Vec<(&str, Option<&str>, Option<&str>)> = log
        .processes
        .iter()
        .flat_map(|p| &p.nics)
        .map(|n| (n.nic.as_str(), n.addr.as_deref(), n.note()))
        .collect();
    assert_eq!(
        nics,
        [
            ("eth0", Some("192.168.0.183"), None),
            (
                "virbr0",
                Some("192.168.122.1"),
                Some("a libvirt virtual bridge")
            )
        ]
    );
    let log = published("mpirun-tag-nccl-300-bare-version-lo");
    assert!(log.processes[0].nics[0]
        .note()
        .is_some_and(|n| n.starts_with("the loopback")));
}

/// Security review T7: the reader's kept text is bounded in bytes. The review's pattern
/// (processes with a 30 kB host name, each printing variables with 30 kB names) keeps
/// host names cut to 255 bytes and no such variable; a byte budget stops keeping process
/// facts and says so.
#[test]
fn kept_text_is_bounded_in_bytes() {
    let long = "h".repeat(30_000);
    let name = "N".repeat(30_000);
    let mut reader = JobLogReader::new(Limits::default());
    let mut line = 0;
    for p in 0..40 {
        for k in 0..16 {
            line += 1;
            let text =
                format!("{long}{p}:{p}:1 [0] NCCL INFO NCCL_{name}{k} set by environment to 1");
            reader.feed(0, line, &text);
        }
    }
    let log = reader.finish();
    assert_eq!(log.processes.len(), 40);
    for p in &log.processes {
        assert!(
            p.host.as_ref().is_some_and(|h| h.len() <= 255),
            "{:?}",
            p.host.as_ref().map(String::len)
        );
        assert!(p.env.is_empty(), "{} variables kept", p.env.len());
    }
    let mut reader = JobLogReader::new(Limits {
        max_kept_bytes: 4096,
        ..Limits::default()
    });
    for k in 0..1000 {
        let text = format!(
            "n1:1:1 [0] NCCL INFO NCCL_VAR_{k} set by environment to {}",
            "v".repeat(300)
        );
        reader.feed(0, k + 1, &text);
    }
    let log = reader.finish();
    let kept: usize = log.processes[0]
        .env
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    assert!(kept <= 4096 + 512, "{kept} bytes kept");
    assert!(
        log.dropped.iter().any(|d| d.contains("byte budget")),
        "{:?}",
        log.dropped
    );
}

/// Rule L3: an MPICH-style `[N] ` label before the host token is the launcher's rank.
#[test]
fn an_mpich_rank_label() {
    let log = published("hydra-rank-prefix-nccl-1232");
    let tags: Vec<(Option<&str>, Option<u32>, Option<u32>)> = log
        .processes
        .iter()
        .map(|p| (p.host.as_deref(), p.pid, p.launcher_rank))
        .collect();
    assert_eq!(
        tags,
        [
            (Some("node0"), Some(13571), Some(0)),
            (Some("node2"), Some(22555), Some(1)),
            (Some("node2"), Some(22556), Some(3))
        ]
    );
    for p in &log.processes {
        assert_eq!(
            p.env.get("NCCL_SOCKET_IFNAME").map(String::as_str),
            Some("en,eth,em,bond")
        );
    }
}

/// Rule L3 (Ray on Kubernetes, Ray Train): links inside a node; a channel line's trailing
/// `comm 0x.. nRanks N` is no part of its path.
#[test]
fn ray_worker_lines_on_kubernetes() {
    let log = published("ray-k8s-ray-59778-channel-comm");
    let p = &log.processes[0];
    assert_eq!(p.host.as_deref(), Some("k8s17"));
    let vias: Vec<&str> = p.links.iter().map(|l| l.via.as_str()).collect();
    assert_eq!(vias, ["P2P/IPC"]);
    assert_eq!(
        p.env.get("NCCL_NCHANNELS_PER_PEER").map(String::as_str),
        Some("16")
    );
    let log = published("ray-efa-p5-awsome-386-cumem");
    let p = &log.processes[0];
    assert_eq!(
        (p.host.as_deref(), p.device),
        (Some("ini-worker-ray-worker-p5"), Some(3))
    );
    assert_eq!(p.links.len(), 1);
    assert_eq!(
        (p.links[0].via.as_str(), p.links[0].channels),
        ("P2P/CUMEM", 8)
    );
    assert_eq!(p.links[0].class, TransportClass::IntraNode);
}

/// Rule T1: torch's warning that a hang is possible is no trouble.
#[test]
fn a_torch_warning_is_not_trouble() {
    let log = published("torch-warning-nccl-1646-v2251");
    assert!(log.events.is_empty(), "{:?}", log.events);
    let versions: Vec<&str> = log
        .processes
        .iter()
        .filter_map(|p| p.nccl_version.as_deref())
        .collect();
    assert_eq!(versions, ["2.25.1", "2.25.1"]);
}

/// Rules L6 and K3: soft-RoCE's rxe0 as the IB NIC, its WARN with its place, and the bare
/// version line among vLLM's lines (whose `nccl==2.20.5` is not NCCL's line).
#[test]
fn soft_roce_under_ray() {
    let log = published("soft-roce-ray-nccl-1297-rxe");
    assert_eq!(log.processes.len(), 1);
    let p = &log.processes[0];
    assert_eq!(p.nccl_version.as_deref(), Some("2.20.5"));
    assert_eq!(p.nics.len(), 1);
    assert_eq!(
        (p.nics[0].net.as_str(), p.nics[0].nic.as_str()),
        ("IB", "rxe0")
    );
    assert_eq!(p.env.get("NCCL_IB_HCA").map(String::as_str), Some("rxe0"));
    assert_eq!(log.events.len(), 1);
    assert_eq!(
        log.events[0].place.as_deref(),
        Some("transport/net_ib.cc:115")
    );
}

/// Rules L6 and K3 over more versions (2.4.8, 2.13, 2.14, 2.18, 2.19): bare version lines,
/// NIC lists, plugins, one-rank communicators, a log with an empty line after every line.
#[test]
fn versions_nics_and_plugins_across_releases() {
    let log = published("docker-hosts-nccl-983-v2134-ib");
    let first = &log.processes[0];
    assert_eq!(first.host.as_deref(), Some("4c217144f0b1"));
    assert_eq!(first.nccl_version.as_deref(), Some("2.13.4"));
    let nics: Vec<&str> = first.nics.iter().map(|n| n.nic.as_str()).collect();
    assert_eq!(nics, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
    assert_eq!(first.networks, ["IB"]);

    let log = published("one-rank-nccl-1038-v2183-roce");
    let c = &log.communicators[0];
    assert_eq!((c.id.as_str(), c.nranks), ("0xbd10cc2bcb56e132", Some(1)));
    let p = &log.processes[0];
    assert_eq!(p.env.get("NCCL_IB_HCA").map(String::as_str), Some("mlx5_0"));
    assert_eq!((p.nics[0].nic.as_str(), p.nics[0].note()), ("mlx5_0", None));

    let log = published("gcp-socket-nccl-1267-v2193");
    let p = &log.processes[0];
    assert_eq!(p.nccl_version.as_deref(), Some("2.19.3"));
    assert_eq!(p.networks, ["Socket"]);
    assert_eq!(p.nics.len(), 1);
    assert_eq!(
        (p.nics[0].net.as_str(), p.nics[0].nic.as_str()),
        ("Socket", "ens7")
    );

    let log = published("gcp-fastsocket-nccl-1267-v2143");
    let p = &log.processes[0];
    assert_eq!(p.nccl_version.as_deref(), Some("2.14.3"));
    assert!(p
        .plugins
        .iter()
        .any(|n| n.kind == "NET" && n.loaded && n.text.contains("FastSocket")));

    let log = published("blank-lines-nccl-262-v248-socket");
    let devices: BTreeSet<Option<u32>> = log.processes.iter().map(|p| p.device).collect();
    assert_eq!(devices, [Some(0), Some(1), Some(2), Some(3)].into());
    for p in &log.processes {
        assert_eq!(p.nccl_version.as_deref(), Some("2.4.8"));
    }
    assert_eq!(log.events.len(), 1);
    assert_eq!(log.events[0].text, "Failed to open libibverbs.so[.1]");
    assert_eq!(log.processes[0].nics[0].nic, "eth0");
}

/// Rules K3 and K5: the bootstrap's list (2.4 to 2.7 print every interface found, and use
/// only `[0]`) is no transport's NIC list: its virbr0, veth and link-local entries are not
/// read as NICs, while the IB transport's own list is, with each NIC's link layer.
#[test]
fn the_bootstraps_interface_list_is_not_a_nic_list() {
    let log = published("veth-linklocal-bootstrap-deit-28");
    assert_eq!(log.processes.len(), 1);
    let p = &log.processes[0];
    let nics: Vec<(&str, &str, Option<&str>, Option<&str>)> = p
        .nics
        .iter()
        .map(|n| (n.net.as_str(), n.nic.as_str(), n.layer.as_deref(), n.note()))
        .collect();
    assert_eq!(nics, [("IB", "mlx4_0", Some("RoCE"), None)]);
    assert_eq!(p.networks, ["IB"]);

    let log = published("linklocal-bootstrap-ray-11675-azure");
    assert_eq!(log.processes.len(), 3);
    for p in &log.processes {
        assert_eq!(p.host.as_deref(), Some("ray-default-worker-5ee698a00"));
        let nics: Vec<(&str, &str, Option<&str>)> = p
            .nics
            .iter()
            .map(|n| (n.net.as_str(), n.nic.as_str(), n.layer.as_deref()))
            .collect();
        assert_eq!(nics, [("IB", "mlx5_0", Some("IB"))]);
    }
}

/// Rule K3: the link layer of each entry of an RDMA NIC list (`IB/SHARP` kept whole, IB and
/// RoCE mixed in one line), none for a socket interface or a merged device.
#[test]
fn nic_link_layers_from_published_lists() {
    let log = published("ib-nccl-1737-torchrun-ibext-sharp");
    let layers: Vec<(&str, Option<&str>)> = log.processes[0]
        .nics
        .iter()
        .map(|n| (n.nic.as_str(), n.layer.as_deref()))
        .collect();
    assert!(layers.contains(&("mlx5_0", Some("IB/SHARP"))), "{layers:?}");
    assert!(layers.contains(&("mlx5_2", Some("RoCE"))), "{layers:?}");
    // NCCL 2.3's one line per device: `NET/IB: [0] mlx5_1:1/IB`.
    let log = published("old-nccl-179-v237-bare-version");
    let first = &log.processes[0].nics[0];
    assert_eq!(
        (first.nic.as_str(), first.layer.as_deref()),
        ("mlx5_1", Some("IB"))
    );
    let log = published("roce-nccl-tests-373-fused-nics");
    assert!(log.processes[0].nics.iter().all(|n| n.layer.is_none()));
    let log = published("virbr-nccl-tests-131-socket-list");
    assert!(log.processes[0].nics.iter().all(|n| n.layer.is_none()));
}

/// Rule C4: an excerpt that starts after Init START gives the channel counts printed before
/// Init COMPLETE to the communicator that COMPLETE names; 2.21+'s collnet count is the coll
/// count, and an nvls count above 0 is NVLS set up.
#[test]
fn channel_counts_before_complete_go_to_its_communicator() {
    let log = published("partial-comm-nccl-1781-counts-before-complete");
    assert_eq!(log.communicators.len(), 1);
    let c = &log.communicators[0];
    assert_eq!(c.id, "0x9eddd89fcffb8f13");
    assert_eq!(
        (c.coll_channels, c.collnet_channels, c.nvls_channels),
        (Some(24), Some(24), Some(0))
    );
    assert_eq!((c.nranks, c.ranks.len()), (Some(2), 1));

    let log = published("nvls-nccl-1814-four-of-64");
    assert_eq!(log.communicators.len(), 1);
    let c = &log.communicators[0];
    assert_eq!((c.nranks, c.ranks.len()), (Some(64), 4));
    assert_eq!((c.coll_channels, c.nvls_channels), (Some(16), Some(16)));
}

/// Rule K1: every link of the horovod excerpt is NET/Socket/0; rank 4's peers are rank 6 on
/// its own host and rank 2 on the other, so its link counts one of each.
#[test]
fn a_socket_link_with_peers_inside_and_outside_its_node() {
    let log = published("socket-horovod-3658-inside-and-between");
    let rank4 = log
        .processes
        .iter()
        .find(|p| p.pid == Some(1759))
        .expect("rank 4's process");
    let socket = rank4
        .links
        .iter()
        .find(|l| l.via == "NET/Socket/0")
        .expect("its socket link");
    assert_eq!((socket.peers_same_node, socket.peers_other_node), (1, 1));
}

/// Rule K6: the SHARP plugin's init line is the process's part of a SHARP group; the SHARP
/// library's own lines (`[node:0:174 - context.c:857][...] INFO ...`) are not NCCL lines.
#[test]
fn the_sharp_plugins_init_line_and_a_collnet_link() {
    let log = published("sharp-nccl-1219-tree-lock-failed");
    let sharp: Vec<(Option<u32>, &SharpInit)> = log
        .processes
        .iter()
        .filter_map(|p| Some((p.pid, p.sharp.as_ref()?)))
        .collect();
    assert_eq!(
        sharp,
        [(
            Some(174),
            &SharpInit {
                rank: 0,
                size: 4,
                device: "mlx5_4:1".into()
            }
        )]
    );
    let collnet: Vec<(&str, bool, u64)> = log
        .processes
        .iter()
        .flat_map(|p| &p.links)
        .filter(|l| l.class == TransportClass::CollNet)
        .map(|l| (l.via.as_str(), l.gdrdma, l.receive_channels))
        .collect();
    assert_eq!(collnet, [("COLLNET/SHARP/5/GDRDMA", true, 1)]);
    assert_eq!(log.processes.len(), 2, "{:?}", log.processes);
}

/// Rule C5: before 2.19 a rank's channel lines come before its Init COMPLETE with no START:
/// they are that rank's links; another process's lines, with no communicator line of its
/// own, stay outside; lines before an Init START stay outside (an earlier communicator).
#[test]
fn channel_lines_before_a_complete_without_start_are_its_ranks() {
    let log = published("ray-16979-links-before-complete");
    assert_eq!(log.communicators.len(), 1);
    let c = &log.communicators[0];
    assert_eq!((c.nranks, c.ranks.len()), (Some(4), 1));
    let links: Vec<(&str, u64, u32)> = c.ranks[0]
        .links
        .iter()
        .map(|l| (l.via.as_str(), l.channels, l.peers))
        .collect();
    assert_eq!((c.ranks[0].rank, links), (2, vec![("P2P/IPC", 2, 2)]));
    let loose: usize = log.processes.iter().map(|p| p.links.len()).sum();
    assert_eq!(loose, 4, "ranks 1 and 3: P2P/IPC and SHM each, outside");

    let log = published("efa-torchtitan-1570-rankprefix-k8s");
    assert!(log
        .communicators
        .iter()
        .all(|c| c.ranks.iter().all(|r| r.links.is_empty())));
}

/// Rule L8: records glued on one physical line (a terminal paste that lost its newlines,
/// each record padded to 158 columns) are read one by one: 7 processes of
/// VM-17-82-centos, each on the IBext device of its GPU with GDRDMA (the first record lost
/// its prefix and is not read; device 4's link was wrapped onto the next line after `via`,
/// so its process is read without it).
#[test]
fn records_glued_on_one_line_are_each_read() {
    let log = published("glued-records-deepep-106-ibext");
    let devices: BTreeSet<u32> = log.processes.iter().filter_map(|p| p.device).collect();
    assert_eq!(devices, [0, 1, 2, 3, 4, 6, 7].into());
    assert!(log
        .processes
        .iter()
        .all(|p| p.host.as_deref() == Some("VM-17-82-centos")));
    for p in log.processes.iter().filter(|p| p.device != Some(4)) {
        assert!(!p.links.is_empty(), "{:?}", p.pid);
        for l in &p.links {
            let dev = p.device.unwrap();
            assert_eq!(l.via, format!("NET/IBext/{dev}/GDRDMA"), "{l:?}");
            assert_eq!(
                (l.net.as_deref(), l.device),
                (Some("IBext"), Some(dev)),
                "{l:?}"
            );
            assert!(l.gdrdma, "{l:?}");
        }
    }
}

/// One pid whose lines name three devices (RCCL's rccl-tests driving three GPUs from one
/// process): three entries, one per device, of one pid (the summary says "1 process
/// driving 3 GPUs"); RCCL's banner is not an NCCL line.
#[test]
fn one_process_driving_three_gpus_is_one_pid() {
    let log = published("rccl-tests-163-mi50-one-process-three-gpus");
    let pids: BTreeSet<Option<u32>> = log.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [Some(58192)].into());
    assert_eq!(log.processes.len(), 3);
    assert!(log
        .processes
        .iter()
        .all(|p| p.host.as_deref() == Some("z292")));
    assert!(log
        .processes
        .iter()
        .any(|p| p.networks.iter().any(|n| n == "Socket")));
}
