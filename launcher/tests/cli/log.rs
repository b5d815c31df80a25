//! `gpudirect log` end to end: the jobs recorded on the lent host under `srun --gpudirect`
//! (tests/fixtures/nccl-logs/lent-host/), judged by the local cluster's GPU config, from
//! files, stdin and gzip, in text and JSON, and its errors.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;

use serde_json::Value;

use crate::common::{gpudirect_without, run, scratch, stderr, stdout};

fn log_fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/nccl-logs")
        .join(rel)
}

/// The config of the local cluster on a GPU host: the shipped profiles, its node set
/// (node[1-16] -> socket-bed) and socket-bed, the shipped socket profile (GPU i -> eth1..4).
fn bed_config(dir: &std::path::Path) -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut text = std::fs::read_to_string(repo.join("slurm-conf/gpudirect.toml")).unwrap();
    text += &std::fs::read_to_string(repo.join("slurm-conf/local-cluster-gpus.toml")).unwrap();
    text += "\n[profiles.socket-bed]\nextends = \"socket\"\n";
    let path = dir.join("gpudirect.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn log_cmd(config: &std::path::Path) -> std::process::Command {
    let mut cmd = gpudirect_without(&["GPUDIRECT_CONFIG"]);
    cmd.arg("log").arg("--config").arg(config);
    cmd
}

#[test]
fn the_profiles_nic_passes_and_a_users_own_nic_is_named() {
    let dir = scratch("log", "bed");
    let config = bed_config(dir.path());
    // srun --gpudirect=socket-bed: the plugin's NCCL_SOCKET_IFNAME=eth1, GPU 0's NIC.
    let out = run(log_cmd(&config)
        .args(["--gpudirect", "socket-bed"])
        .arg(log_fixture("lent-host/torch-srun-gpudirect-socket-bed.txt")));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(
        text.contains("2 ranks on 2 nodes (node[1-2]): NET/Socket over eth1; GDR off"),
        "{text}"
    );
    assert!(
        text.contains("as the profile expects (socket-bed: NET/Socket"),
        "{text}"
    );

    // The user's NCCL_SOCKET_IFNAME=eth0 won: both ranks named, by the node set (auto).
    let out = run(log_cmd(&config).arg(log_fixture(
        "lent-host/torch-srun-gpudirect-socket-bed-user-eth0.txt",
    )));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(
        text.contains(
            "FINDING: communicator 0x2eb2c9644781e5c9 (2 ranks, 2 nodes): ranks 0-1 on node[1-2] \
             used eth0: the profile socket-bed maps its GPU 0 to eth1\n"
        ),
        "{text}"
    );
    assert!(text.ends_with("1 finding (exit 1)\n"), "{text}");
}

#[test]
fn another_transport_than_the_profiles_is_a_finding() {
    let dir = scratch("log", "tcpx");
    let config = bed_config(dir.path());
    let out = run(log_cmd(&config)
        .args(["--gpudirect", "tcpx", "--json"])
        .arg(log_fixture("lent-host/torch-srun-gpudirect-socket-bed.txt")));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = report["verdict"]["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{report}");
    assert_eq!(findings[0]["kind"], "transport");
    assert_eq!(findings[0]["hosts"], serde_json::json!(["node1", "node2"]));
    assert!(findings[0]["message"]
        .as_str()
        .unwrap()
        .contains("the profile tcpx's transport GPUDirectTCPX did not carry its traffic there"));
    assert_eq!(report["exit"], 1);
    assert_eq!(
        report["log"]["communicators"][0]["ranks"][1]["links"][0]["nic"],
        "eth1"
    );
}

#[test]
fn per_rank_files_stdin_and_gzip_read_the_same() {
    let dir = scratch("log", "inputs");
    let config = bed_config(dir.path());
    let ranks = [
        log_fixture("lent-host/torch-allreduce-2node-socket-rank0.txt"),
        log_fixture("lent-host/torch-allreduce-2node-socket-rank1.txt"),
    ];
    let from_files = run(log_cmd(&config)
        .args(["--gpudirect", "socket", "-v"])
        .args(&ranks));
    let text = stdout(&from_files);
    assert_eq!(
        from_files.status.code(),
        Some(0),
        "{text}{}",
        stderr(&from_files)
    );
    assert!(
        text.contains("  rank 0    node1 pid 1432 GPU 0 (cudaDev 0): NET/Socket/0=eth1 x4"),
        "{text}"
    );
    assert!(
        text.contains("set by environment: NCCL_SOCKET_IFNAME=eth1 (2 processes)"),
        "{text}"
    );

    // Both files through stdin, gzipped: the same communicators and verdict.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    for r in &ranks {
        gz.write_all(&std::fs::read(r).unwrap()).unwrap();
    }
    let bytes = gz.finish().unwrap();
    let mut child = log_cmd(&config)
        .args(["--gpudirect", "socket", "-v", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    let from_stdin = child.wait_with_output().unwrap();
    assert_eq!(from_stdin.status.code(), Some(0), "{}", stderr(&from_stdin));
    assert_eq!(stdout(&from_stdin), text, "stdin, gzip: the same text");
}

#[test]
fn bad_inputs_exit_3_with_the_file_and_the_fix() {
    let dir = scratch("log", "bad");
    let config = bed_config(dir.path());
    let plain = dir.path().join("train.log");
    std::fs::write(&plain, "epoch 1 loss 0.5\nepoch 2 loss 0.4\n").unwrap();
    let binary = dir.path().join("core");
    std::fs::write(&binary, b"\x7fELF\x02\x01\x01\x00\x00\x00").unwrap();
    for (arg, words) in [
        (plain.clone(), "no NCCL line in"),
        (binary, "not a text log"),
        (dir.path().join("absent.log"), "absent.log: cannot open it"),
    ] {
        let out = run(log_cmd(&config).arg(&arg));
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(words), "{err}");
    }
    let out = run(log_cmd(&config).args(["--gpudirect", "nosuch"]).arg(&plain));
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("use `auto`, `none` or a profile"),
        "{}",
        stderr(&out)
    );
}

/// Issue #40, rule T1: a log of torch's watchdog lines alone is a job with findings (exit
/// 1), not a log without NCCL lines (exit 3); a log with neither still is.
#[test]
fn a_watchdog_only_log_is_a_finding_and_an_empty_one_an_error() {
    let dir = scratch("log", "watchdog");
    let config = bed_config(dir.path());
    let out = run(log_cmd(&config)
        .args(["--gpudirect", "none"])
        .arg(log_fixture("published/watchdog-only-basicsr-737.txt")));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(
        text.contains("FINDING: 3 watchdog lines (ranks 0-2)"),
        "{text}"
    );
    let plain = dir.path().join("plain.log");
    std::fs::write(&plain, "epoch 1 loss 0.3\nepoch 2 loss 0.2\n").unwrap();
    let out = run(log_cmd(&config).args(["--gpudirect", "none"]).arg(&plain));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("no NCCL line"), "{}", stderr(&out));
}

/// Issue #40, the third held-out batch: one pid driving three GPUs is one process (RCCL's
/// rccl-tests); records glued on one line of a terminal paste are each read (rule L8), and
/// their IBext links pass `ib`.
#[test]
fn one_process_of_three_gpus_and_glued_records_are_said_as_they_are() {
    let dir = scratch("log", "batch3");
    let config = bed_config(dir.path());
    let summary = |name: &str, mode: &str| {
        let out = run(log_cmd(&config)
            .args(["--gpudirect", mode])
            .arg(log_fixture(&format!("published/{name}.txt"))));
        let text = stdout(&out);
        (
            out.status.code(),
            text.lines().last().unwrap_or("").to_string(),
            text,
        )
    };
    let (code, last, text) = summary("rccl-tests-163-mi50-one-process-three-gpus", "none");
    assert_eq!(code, Some(0), "{text}");
    assert!(
        last.starts_with("gpudirect log: 0 communicators, 1 process driving 3 GPUs on 1 node"),
        "{last}"
    );
    let (code, last, text) = summary("glued-records-deepep-106-ibext", "none");
    assert_eq!(code, Some(0), "{text}");
    assert!(last.contains("7 processes on 1 node"), "{last}");
    assert!(
        text.contains("NET/IBext over devices 0, 1, 2, 3, 6, 7; GPUDirect RDMA"),
        "{text}"
    );
}

/// Issue #40, the text per communicator: CollNet with its devices and GDR; a NET path
/// between ranks of one node said to run inside it; a virtual bridge in the socket list
/// named; a redacted host counted as no node.
#[test]
fn the_text_says_link_classes_collnet_and_odd_interfaces() {
    let dir = scratch("log", "classes");
    let config = bed_config(dir.path());
    let text_of = |name: &str| {
        let out = run(log_cmd(&config)
            .args(["--gpudirect", "none"])
            .arg(log_fixture(&format!("published/{name}.txt"))));
        stdout(&out)
    };
    let collnet = text_of("collnet-nccl-tests-311-sharp");
    assert!(
        collnet.contains(
            "8 ranks on 4 nodes (gpu[34,36,40-41]): COLLNET/SHARP over devices 0, 1, 5; \
             GPUDirect RDMA"
        ),
        "{collnet}"
    );
    let inside = text_of("ib-nccl-707-gdrdma-channels");
    assert!(
        inside.contains(
            "10-90-43-152, outside any communicator's init lines: NET/IB over devices 0, 2, \
             4, 5 (GPUDirect RDMA) inside nodes"
        ),
        "{inside}"
    );
    let virbr = text_of("virbr-nccl-tests-131-socket-list");
    assert!(
        virbr.contains(
            "note: Meowth: NET/Socket lists virbr0 (192.168.122.1): a libvirt virtual bridge"
        ),
        "{virbr}"
    );
    let redacted = text_of("redacted-nccl-952-cluster-name");
    assert!(
        redacted.contains("0 communicators, 3 processes (host names redacted): 1 finding"),
        "{redacted}"
    );
    let receive_only = text_of("stripped-nccl-392-v257-gdr-partial");
    assert!(
        receive_only.contains("NET/IB over mlx5_0; P2P/IPC, direct shared memory inside nodes"),
        "{receive_only}"
    );
}

/// Issue #40 form 9: a grep of `Using network FasTrak` lines (16 processes, 2 hosts) names
/// the plugin by default, and is judged against the profile's transport: another profile's
/// transport is a finding, its own is not.
#[test]
fn a_using_network_grep_is_named_and_judged() {
    let dir = scratch("log", "grep");
    let config = bed_config(dir.path());
    let grep = log_fixture("published/tcpxo-hypercomputer-lab22-fastrak.txt");
    let out = run(log_cmd(&config).args(["--gpudirect", "none"]).arg(&grep));
    assert!(
        stdout(&out).contains(
            "net plugin FasTrak (Using network, no channel line): 16 processes on tcpxo-wb-[0-1]"
        ),
        "{}",
        stdout(&out)
    );
    let out = run(log_cmd(&config).args(["--gpudirect", "tcpx"]).arg(&grep));
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(
            "FINDING: 16 processes on tcpxo-wb-[0-1] loaded the net plugin FasTrak (`Using \
             network`): the profile tcpx's transport is GPUDirectTCPX"
        ),
        "{}",
        stdout(&out)
    );
    let out = run(log_cmd(&config).args(["--gpudirect", "tcpxo"]).arg(&grep));
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// Security review T7: --max-bytes stops reading an input (after decompression) and says
/// where; the lines before the cut are read.
#[test]
fn max_bytes_cuts_an_input_and_says_so() {
    let dir = scratch("log", "maxbytes");
    let config = bed_config(dir.path());
    let out = run(log_cmd(&config)
        .args(["--gpudirect", "none", "--max-bytes", "2000"])
        .arg(log_fixture("lent-host/torch-srun-gpudirect-socket-bed.txt")));
    assert!(
        stderr(&out).contains(
            "only its first 2000 bytes were read (the --max-bytes budget); 5336 more bytes of \
             the file were not read: raise --max-bytes to read more"
        ),
        "{}",
        stderr(&out)
    );
    // Said in the report too, not only on stderr.
    assert!(
        stdout(&out).contains("note: ") && stdout(&out).contains("the --max-bytes budget"),
        "{}",
        stdout(&out)
    );
}

/// Security review T7: an input of exactly --max-bytes bytes is read whole, and not said to
/// be cut (the budget was reached, but nothing lay past it).
#[test]
fn an_input_of_exactly_the_byte_budget_is_not_said_cut() {
    let dir = scratch("log", "exact");
    let config = bed_config(dir.path());
    let log = log_fixture("lent-host/torch-srun-gpudirect-socket-bed.txt");
    let size = std::fs::metadata(&log).unwrap().len().to_string();
    let out = run(log_cmd(&config)
        .args(["--gpudirect", "none", "--max-bytes", &size])
        .arg(&log));
    assert!(!stderr(&out).contains("--max-bytes"), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Security review T7: a gzip bomb (200 MiB of NCCL lines, 1.5 MB compressed) stops
/// at the decompressed budget, naming the budget and the flag that raises it, in the text
/// report and in the JSON; the lines before the cut are judged.
#[test]
fn a_gzip_bomb_stops_at_the_byte_budget_and_says_how_to_raise_it() {
    let dir = scratch("log", "bomb");
    let config = bed_config(dir.path());
    let bomb = dir.path().join("bomb.log.gz");
    let line = b"n1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n";
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&bomb).unwrap(),
        flate2::Compression::fast(),
    );
    let block = line.repeat(1 << 14);
    for _ in 0..(200 << 20) / block.len() {
        gz.write_all(&block).unwrap();
    }
    gz.finish().unwrap();
    let budget = (8u64 << 20).to_string();
    let out = run(log_cmd(&config)
        .args(["--gpudirect", "none", "--max-bytes", &budget])
        .arg(&bomb));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        said.contains(&format!(
            "only its first {budget} bytes after decompression were read (the --max-bytes \
             budget); the rest of its decompressed text was not read: raise --max-bytes"
        )),
        "{said}"
    );
    let out = run(log_cmd(&config)
        .args(["--gpudirect", "none", "--json", "--max-bytes", &budget])
        .arg(&bomb));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let input = &report["inputs"][0];
    assert_eq!(input["cut_at_limit"], true, "{input}");
    assert_eq!(input["bytes"].as_u64(), Some(8 << 20), "{input}");
    assert_eq!(input["gzip"], true, "{input}");
    assert_eq!(input["unread_bytes"], Value::Null, "{input}");
}

/// Security review T7: a line longer than the line limit (64 KiB) is cut there and the bytes
/// skipped are said; --max-lines stops reading after that many lines, said with the bytes
/// of the file left unread; the lines before are judged.
#[test]
fn a_long_line_and_the_line_budget_are_said_with_what_they_skipped() {
    let dir = scratch("log", "longline");
    let config = bed_config(dir.path());
    let fixture = log_fixture("lent-host/torch-srun-gpudirect-socket-bed.txt");
    let mut text = "x".repeat(3 << 20);
    text.push('\n');
    text += &std::fs::read_to_string(&fixture).unwrap();
    let file = dir.path().join("long.log");
    std::fs::write(&file, &text).unwrap();
    let out = run(log_cmd(&config).args(["--gpudirect", "none"]).arg(&file));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        said.contains(&format!(
            "1 line(s) longer than 64 KiB were cut there: {} bytes past the cut were skipped, \
             not judged",
            (3 << 20) - 64 * 1024
        )),
        "{said}"
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(stdout(&out).contains("2 processes"), "{said}");

    let out = run(log_cmd(&config)
        .args(["--gpudirect", "none", "--max-lines", "11"])
        .arg(&file));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    let kept: usize = text.split_inclusive('\n').take(11).map(str::len).sum();
    assert!(
        said.contains(&format!(
            "only its first 11 lines were read (the --max-lines budget); {} more bytes of the \
             file were not read: raise --max-lines to read more",
            text.len() - kept
        )),
        "{said}"
    );
}

/// Issue #40, a TCPXO run's own channel lines (a published log): FasTrak with GPUDirect
/// RDMA is what the shipped tcpxo profile expects; against ib it is another transport.
#[test]
fn tcpxo_channel_lines_pass_the_tcpxo_profile_and_not_ib() {
    let dir = scratch("log", "tcpxo");
    let config = bed_config(dir.path());
    let log = log_fixture("published/tcpxo-fastrak-hypercomputer-lab23-channels.txt");
    let out = run(log_cmd(&config).args(["--gpudirect", "tcpxo"]).arg(&log));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(
        text.contains("NET/FasTrak over device 0; GPUDirect RDMA")
            && text.contains("as the profile expects (tcpxo: NET/FasTrak"),
        "{text}"
    );
    let out = run(log_cmd(&config).args(["--gpudirect", "ib"]).arg(&log));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(
        text.contains("used NET/FasTrak on tcpxo-wb-0: the profile ib's transport IB did not"),
        "{text}"
    );
}

/// Issue #40 form 4, published logs whose bootstrap lists veth, virbr0 and link-local
/// interfaces (rule K5: the bootstrap's list, not a transport's): the text names the NICs the
/// IB transport lists, with their link layer, and says nothing of the bootstrap's entries.
#[test]
fn the_bootstraps_virtual_interfaces_are_not_said_and_the_listed_nics_are() {
    let dir = scratch("log", "bootstrap");
    let config = bed_config(dir.path());
    let text_of = |name: &str| {
        let out = run(log_cmd(&config)
            .args(["--gpudirect", "none"])
            .arg(log_fixture(&format!("published/{name}.txt"))));
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    let deit = text_of("veth-linklocal-bootstrap-deit-28");
    assert!(
        deit.contains("NET/IB lists mlx4_0 (RoCE) (no channel line): 1 process on gpu-dev006"),
        "{deit}"
    );
    let ray = text_of("linklocal-bootstrap-ray-11675-azure");
    assert!(
        ray.contains(
            "NET/IB lists mlx5_0 (IB) (no channel line): 3 processes on \
             ray-default-worker-5ee698a00"
        ),
        "{ray}"
    );
    for text in [&deit, &ray] {
        assert!(
            !text.contains("veth") && !text.contains("link-local") && !text.contains("virbr"),
            "{text}"
        );
    }
}

/// Issue #40, inputs first met in the held-out check (docs/results/log-heldout-40.md): a
/// transport's other names are the profile's transport (aws-ofi-nccl 1.1's `AWS
/// Libfabric` under efa, HPC-X's `IBext_v8` under ib), so only GPUDirect RDMA is judged
/// there; a socket link inside and between nodes is said as both; a communicator partly in
/// the log says how many of its ranks are, with NVLS and its channel counts.
#[test]
fn other_names_of_a_transport_partial_communicators_and_nvls() {
    let dir = scratch("log", "heldout");
    let config = bed_config(dir.path());
    let judged = |name: &str, profile: &str| {
        let out = run(log_cmd(&config)
            .args(["--gpudirect", profile])
            .arg(log_fixture(&format!("published/{name}.txt"))));
        (out.status.code(), stdout(&out))
    };
    let (code, text) = judged("efa-aws-ofi-nccl-64-aws-libfabric-no-gdr", "efa");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("NET/AWS Libfabric/0 (send) without GPUDirect RDMA")
            && text.matches("FINDING").count() == 1,
        "{text}"
    );
    let (code, text) = judged("ibext-nccl-1453-mpich-label-gdrdma", "ib");
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("NET/IBext_v8 over device 7; GPUDirect RDMA")
            && text.contains("as the profile expects (ib"),
        "{text}"
    );
    let (code, text) = judged("ibext-nccl-1814-no-gdrdma", "ib");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("without GPUDirect RDMA: the profile ib expects")
            && !text.contains("did not carry"),
        "{text}"
    );
    let (_, text) = judged("socket-horovod-3658-inside-and-between", "none");
    assert!(
        text.contains(
            "ip-172-31-12-129, outside any communicator's init lines: NET/Socket over device \
             0; NET/Socket over device 0 inside nodes"
        ),
        "{text}"
    );
    let (_, text) = judged("nvls-nccl-1814-four-of-64", "none");
    assert!(
        text.contains(
            "communicator 0x5ae77eb5ea4ec1ee: 64 ranks, 4 in the log on 1 node by host name \
             (hostname-test): no channel connected in the log; 16 channels; NVLS on 16 channels"
        ),
        "{text}"
    );
    let (_, text) = judged("partial-comm-nccl-1781-counts-before-complete", "none");
    assert!(
        text.contains(
            "communicator 0x9eddd89fcffb8f13: 2 ranks, 1 in the log on 1 node by host name \
             (nccl-tests-gdr-2-worker-1): no channel connected in the log; 24 channels"
        ) && !text.contains("NVLS"),
        "{text}"
    );
}

/// Issue #40 form 4, CollNet/SHARP in published logs (rule K6): the SHARP plugin's init line
/// is said with its device; NCCL giving CollNet up for the point-to-point network is its own
/// finding, and the setup's error returns before it are not called a failed job.
#[test]
fn sharp_joined_and_collnet_given_up() {
    let dir = scratch("log", "sharp");
    let config = bed_config(dir.path());
    let text_of = |name: &str| {
        let out = run(log_cmd(&config)
            .args(["--gpudirect", "none"])
            .arg(log_fixture(&format!("published/{name}.txt"))));
        (out.status.code(), stdout(&out))
    };
    let (code, text) = text_of("sharp-nccl-1219-tree-lock-failed");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("node, outside any communicator's init lines: COLLNET/SHARP over device 5; GPUDirect RDMA")
            && text.contains("SHARP group joined on node: mlx5_4:1 (SHARP rank 0 of 4)")
            && text.contains("SHARP group create: Streaming Tree lock failed (-18)"),
        "{text}"
    );
    let (code, text) = text_of("sharp-nccl-1050-collnet-fallback");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(
            "FINDING: CollNet was given up on ib-vm-41 (line 15 of input 1: Cannot initialize \
             CollNet, using point-to-point network instead): collectives run over the \
             point-to-point network, without SHARP; the 7 error returns before it (on \
             ib-vm-[40-41,52]) are that setup failing, not the job"
        ) && !text.contains("error lines"),
        "{text}"
    );
}
