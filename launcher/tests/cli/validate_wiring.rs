//! `gpudirect validate --test wiring` without a cluster: each "node" is the recorded A3 Mega
//! sysfs tree of `gpudirect-core/tests/sysfs/` with a /proc of its own whose route table puts
//! each data NIC on its own subnet; one node has two NICs on each other's subnets. The
//! reports `gpudirect agent wiring` prints are judged with `--reports FILE`, as an admin judges
//! reports gathered by hand.

use std::path::{Path, PathBuf};

use crate::common::{gpudirect_without, ok, run, scratch, stderr, stdout};

const NICS: [&str; 8] = [
    "enp6s0", "enp7s0", "enp13s0", "enp14s0", "enp134s0", "enp135s0", "enp141s0", "enp142s0",
];

fn tree() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../gpudirect-core/tests/sysfs/a3-mega")
}

/// A /proc with the tree's GPUs and a route table: the K-th of `nics` on 10.0.K.0/24.
fn proc_dir(at: &Path, nics: &[&str]) {
    let gpus = at.join("driver/nvidia/gpus");
    std::fs::create_dir_all(&gpus).unwrap();
    let recorded = tree().with_extension("proc").join("driver/nvidia/gpus");
    for gpu in std::fs::read_dir(recorded).unwrap().flatten() {
        std::fs::create_dir(gpus.join(gpu.file_name())).unwrap();
    }
    let mut route = String::from(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
         enp0s12\t00000000\t0100800A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n",
    );
    for (k, nic) in nics.iter().enumerate() {
        route.push_str(&format!(
            "{nic}\t00{:02X}000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
            k + 1
        ));
    }
    std::fs::create_dir_all(at.join("net")).unwrap();
    std::fs::write(at.join("net/route"), route).unwrap();
}

/// One node's report line as the step's agent prints it (`gpudirect agent wiring`), from the
/// recorded tree and a `/proc` made for the test.
fn node_report(node: &str, proc_root: &Path) -> String {
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../slurm-conf/gpudirect.toml");
    ok(gpudirect_without(&["GPUDIRECT_CONFIG"])
        .args(["agent", "wiring", "--node", node])
        .arg("--sysfs")
        .arg(tree())
        .arg("--proc")
        .arg(proc_root)
        .arg("--config")
        .arg(config))
}

#[test]
fn saved_node_reports_name_the_node_whose_nics_are_on_each_others_rails() {
    let dir = scratch("validate-wiring", "reports");
    let wired = dir.path().join("proc-wired");
    proc_dir(&wired, &NICS);
    let crossed = dir.path().join("proc-crossed");
    let mut swapped = NICS;
    swapped.swap(2, 3);
    proc_dir(&crossed, &swapped);
    let mut lines = String::new();
    for (node, proc_root) in [
        ("a3m-0001", &wired),
        ("a3m-0002", &wired),
        ("a3m-0003", &crossed),
        ("a3m-0004", &wired),
    ] {
        let line = node_report(node, proc_root);
        assert_eq!(line.lines().count(), 1, "one line per node: {line}");
        lines.push_str(&line);
    }
    let file = dir.path().join("reports.txt");
    std::fs::write(&file, format!("srun: some warning\n{lines}")).unwrap();

    let out = run(gpudirect_without(&["SLURM_JOB_NODELIST"])
        .args(["validate", "--test", "wiring", "--reports"])
        .arg(&file));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}\n{}", stderr(&out));
    assert!(
        text.contains("wiring of 4 nodes (a3m-[0001-0004]): map from profile tcpxo, each GPU's NIC from sysfs"),
        "{text}"
    );
    assert!(
        text.contains("a3m-0003: GPU 2 (enp13s0) is on 10.0.4.0/24, where 3 of 4 nodes have it on 10.0.3.0/24"),
        "{text}"
    );
    assert!(
        text.contains("enp13s0 is on 10.0.4.0/24, the subnet enp14s0 has on the other nodes"),
        "{text}"
    );
    assert!(
        text.contains("verdict: Degraded (exit 1): look at a3m-0003"),
        "{text}"
    );
    // The same reports as JSON: the finding's GPUs and NICs.
    let out = run(gpudirect_without(&["SLURM_JOB_NODELIST"])
        .args(["validate", "--test", "wiring", "--json", "--reports"])
        .arg(&file));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = report["analysis"]["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{report:#}");
    assert_eq!(findings[0]["gpus"], serde_json::json!([2, 3]));
    assert_eq!(
        findings[0]["nics"],
        serde_json::json!(["enp13s0", "enp14s0"])
    );

    // Without the odd node every node agrees.
    let healthy: String = lines
        .lines()
        .filter(|l| !l.contains("a3m-0003"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, healthy).unwrap();
    let out = run(gpudirect_without(&["SLURM_JOB_NODELIST"])
        .args(["validate", "--test", "wiring", "--reports"])
        .arg(&file));
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("every GPU is on the rail the other nodes have it on"));
}

#[test]
fn a_file_without_reports_and_flags_that_do_not_apply_are_refused_with_why() {
    let dir = scratch("validate-wiring", "refused");
    let file = dir.path().join("empty.txt");
    std::fs::write(&file, "srun: error: nothing ran\n").unwrap();
    let out = run(gpudirect_without(&[])
        .args(["validate", "--test", "wiring", "--reports"])
        .arg(&file));
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("holds no node's report"),
        "{}",
        stderr(&out)
    );
    let out = run(gpudirect_without(&[])
        .args(["validate", "--test", "wiring", "--floor", "10", "--reports"])
        .arg(&file));
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("it measures nothing: --floor does not apply"),
        "{}",
        stderr(&out)
    );
    // Outside an allocation, and in one of one node: what to do instead.
    let out =
        run(gpudirect_without(&["SLURM_JOB_NODELIST"]).args(["validate", "--test", "wiring"]));
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out)
            .contains("run it inside salloc or sbatch, or judge saved reports with --reports FILE"),
        "{}",
        stderr(&out)
    );
    let out = run(gpudirect_without(&[])
        .env("SLURM_JOB_NODELIST", "node1")
        .args(["validate", "--test", "wiring"]));
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("the allocation has 1 node(s), it needs 2 or more"));
    let out = run(gpudirect_without(&[])
        .args(["validate", "--reports"])
        .arg(&file));
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("--reports is for --test wiring"));
}
