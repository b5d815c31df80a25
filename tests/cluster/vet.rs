//! `gpudirect vet` on the real local cluster, as the test user: batch jobs of the shipped
//! template (slurm-conf/sbatch/vet-then-train.sbatch) whose first step vets the job's own
//! nodes with real MPI traffic per rail, one node's NIC slowed with tc, and whose training
//! step (a stand-in: `hostname` on every node it is given) runs on the good nodes only.
//! The tests need 7 nodes: the first brings the local cluster to 7 if it has fewer.

use std::path::{Path, PathBuf};
use std::sync::Once;

use cluster_tests::*;

const RAILS: &str = "eth1,eth2,eth3,eth4";
const NODES: usize = 7;

/// The cluster at 7 nodes (once per test binary): taken down and brought up again when it
/// has fewer.
fn seven_nodes() {
    static GROWN: Once = Once::new();
    GROWN.call_once(|| {
        let mut sinfo = slurm_command("sinfo");
        sinfo.args(["-h", "-N", "-o", "%N"]);
        let have = stdout(&run(&mut sinfo)).lines().count();
        if have < NODES {
            local_cluster_ok(&["down"]);
            local_cluster_ok(&["up", "--nodes", &NODES.to_string(), "--plugin", "built"]);
        }
    });
}

/// What a batch job of the template left: its output file, its folder, and Slurm's last
/// record of it.
struct Job {
    id: String,
    output: String,
    dir: PathBuf,
    /// The last `scontrol show job --oneliner` line of the job, at its end.
    record: String,
    /// Whether it ended COMPLETED with exit code 0 (after any requeue).
    ok: bool,
}

/// `sbatch -N NODES` of the template as the test user, with `NEED` and vet's extra
/// arguments; the training step is `hostname`. Waits for the job's end (through a requeue)
/// with [`wait_for_job`].
fn submit(tag: &str, nodes: u32, need: u32, vet_args: &str) -> Job {
    let dir = fresh_temp_dir(&format!("vet-{tag}"));
    let db = dir.join("history.sqlite");
    let template = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../slurm-conf/sbatch/vet-then-train.sbatch");
    let script = dir.join("job.sbatch");
    std::fs::copy(&template, &script).expect("copy the template");
    let mpi = workspace_bin("gpudirect-mpi");
    let vet = format!(
        "--test rails --rails {RAILS} --mpi-program {} {vet_args}",
        mpi.display()
    );
    let mut cmd = slurm_command("sbatch");
    cmd.arg("--parsable")
        .arg(format!("--job-name=vet-{tag}-{}", std::process::id()))
        .arg(format!("--nodes={nodes}"))
        .arg(format!("--output={}/job.out", dir.display()))
        .arg(&script)
        .env("GPUDIRECT", workspace_bin("gpudirect"))
        .env("GPUDIRECT_DB", &db)
        .env("GPUDIRECT_CONFIG", plugin_config())
        .env("NEED", need.to_string())
        .env("TRAIN", "hostname")
        .env("VET_DIR", dir.join("vet"))
        .env("VET_ARGS", vet)
        .current_dir(&dir);
    let submitted = run(&mut cmd);
    assert_ok(&submitted, "sbatch the vet template");
    let id = parsable_job_id(&submitted);
    let end = wait_for_job(id, std::time::Duration::from_secs(400));
    let output = std::fs::read_to_string(dir.join("job.out")).unwrap_or_default();
    let Some(end) = end else {
        panic!("job {id} did not end within 400 s:\n{output}");
    };
    Job {
        id: id.to_string(),
        output,
        dir,
        ok: end.ok(),
        record: end.record,
    }
}

/// The hosts the training stand-in printed (the lines that are one of the nodes' names).
fn trained_on(output: &str) -> Vec<String> {
    let mut hosts: Vec<String> = output
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.strip_prefix("node")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
        .collect();
    hosts.sort();
    hosts
}

/// vet.json of a job.
fn vet_report(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("vet/vet.json")).expect("vet.json");
    serde_json::from_str(&text).expect("vet.json is JSON")
}

/// The entries of vet.json's `nodes` that stand bad.
fn bad_nodes(report: &serde_json::Value) -> Vec<&serde_json::Value> {
    report["nodes"]
        .as_array()
        .expect("vet.json lists its nodes")
        .iter()
        .filter(|n| n["standing"] == "bad")
        .collect()
}

/// The value of `key` in Slurm's last record of `job`.
fn job_field(job: &Job, key: &str) -> String {
    record_field(&job.record, key)
}

/// Every node but `bad` of node1..node`n`.
fn all_but(n: usize, bad: &str) -> Vec<String> {
    let mut v: Vec<String> = (1..=n)
        .map(|i| format!("node{i}"))
        .filter(|x| x != bad)
        .collect();
    v.sort();
    v
}

#[test]
fn a_clean_allocation_is_all_good_in_one_round_and_trains_on_every_node() {
    let _guard = cluster();
    seven_nodes();
    let job = submit("clean", 6, 6, "--message-size 4M");
    assert!(job.ok, "{}\n{}", job.record, job.output);
    let report = vet_report(&job.dir);
    assert_eq!(report["decision"], "all_good", "{report:#}");
    assert_eq!(report["good"], 6, "{report:#}");
    // Six nodes make three disjoint pairs: the screen covers every node at once. On the
    // 2-core machine a healthy pair slowed by the others' noise is re-paired and cleared
    // (seen once in two clean runs on 8 nodes): that costs a round, never a node.
    let rounds = report["rounds"].as_u64().unwrap();
    assert!((1..=2).contains(&rounds), "{report:#}");
    assert_eq!(trained_on(&job.output), all_but(6, ""), "{}", job.output);
    // The vet is in the history, with its pair runs.
    let history =
        gpudirect::history::History::open_existing(&job.dir.join("history.sqlite")).unwrap();
    let vets = history.list_vets(None).unwrap();
    assert_eq!(vets.len(), 1);
    assert_eq!(vets[0].facts.job_id.as_deref(), Some(job.id.as_str()));
    assert_eq!(vets[0].facts.good, 6);
    assert_eq!(
        history.list_runs(&Default::default()).unwrap().len(),
        report["runs"].as_array().unwrap().len()
    );
}

#[test]
fn a_slow_nic_leaves_its_node_out_and_the_job_trains_on_the_other_five() {
    let _guard = cluster();
    seven_nodes();
    let _slow = Nic::set("node3", "eth3", &["slow", "50mbit"]);
    let job = submit("need5", 6, 5, "--message-size 4M --budget 150s");
    assert!(job.ok, "{}\n{}", job.record, job.output);
    let report = vet_report(&job.dir);
    assert_eq!(report["decision"], "go_on", "{report:#}");
    // The screen, then one re-pairing of the suspects names the slow node; on the 2-core
    // machine a healthy pair slowed by the others' noise can cost one re-pairing more.
    let rounds = report["rounds"].as_u64().unwrap();
    assert!((2..=3).contains(&rounds), "{report:#}");
    let bad: Vec<&str> = bad_nodes(&report)
        .iter()
        .map(|n| n["node"].as_str().unwrap())
        .collect();
    assert_eq!(bad, ["node3"], "{report:#}");
    let why = report["nodes"][2]["why"].to_string();
    assert!(why.contains("eth3"), "the slow rail is named: {why}");
    assert_eq!(
        trained_on(&job.output),
        all_but(6, "node3"),
        "{}",
        job.output
    );
    let env = std::fs::read_to_string(job.dir.join("vet/vet.env")).unwrap();
    assert!(env.contains("export GPUDIRECT_BAD_NODES=node3\n"), "{env}");
    assert!(env.contains("export GPUDIRECT_GOOD_COUNT=5\n"), "{env}");
    let hosts = std::fs::read_to_string(job.dir.join("vet/good.hosts")).unwrap();
    assert_eq!(hosts.lines().collect::<Vec<_>>(), all_but(6, "node3"));
}

/// Issue #31 in vet: node4's eth1 and eth2 swapped (each on the other's rail). Its node
/// checks pass on their own, but its map differs from the other nodes': it fails check
/// `wiring` in the first step, and the job trains on the other five.
#[test]
fn a_node_whose_nics_are_swapped_fails_wiring_and_the_job_trains_without_it() {
    let _guard = cluster();
    seven_nodes();
    let _swap = Nic::set("node4", "eth1", &["swap", "eth2"]);
    let job = submit("wiring", 6, 5, "--message-size 4M --budget 150s");
    assert!(job.ok, "{}\n{}", job.record, job.output);
    let report = vet_report(&job.dir);
    assert_eq!(report["decision"], "go_on", "{report:#}");
    let bad = bad_nodes(&report);
    assert_eq!(bad.len(), 1, "{report:#}");
    assert_eq!(bad[0]["node"], "node4", "{report:#}");
    let why = bad[0]["why"].to_string();
    assert!(
        why.contains("wiring: GPUs 0-1 (eth1) are on 10.213.2.0/24, where 5 of 6 nodes have them on 10.213.1.0/24"),
        "{why}"
    );
    assert_eq!(
        trained_on(&job.output),
        all_but(6, "node4"),
        "{}",
        job.output
    );
}

/// Issue #45 in vet: one node's eth1 down and another's eth3 slowed. Exactly those two
/// nodes stand bad, each for its own rail, and the job trains on the other four.
#[test]
fn a_nic_down_and_another_nodes_nic_slowed_leave_exactly_those_two_nodes_out() {
    let _guard = cluster();
    seven_nodes();
    let _down = Nic::set("node2", "eth1", &["down"]);
    let _slow = Nic::set("node4", "eth3", &["slow", "50mbit"]);
    let job = submit("down-and-slow", 6, 4, "--message-size 4M --budget 150s");
    assert!(job.ok, "{}\n{}", job.record, job.output);
    let report = vet_report(&job.dir);
    assert_eq!(report["decision"], "go_on", "{report:#}");
    let bad = bad_nodes(&report);
    let names: Vec<&str> = bad.iter().map(|n| n["node"].as_str().unwrap()).collect();
    assert_eq!(names, ["node2", "node4"], "{report:#}");
    let why2 = bad[0]["why"].to_string();
    assert!(why2.contains("eth1"), "node2's down NIC is named: {why2}");
    assert!(
        !why2.contains("eth3"),
        "node2 is not blamed for eth3: {why2}"
    );
    let why4 = bad[1]["why"].to_string();
    assert!(why4.contains("eth3"), "node4's slow NIC is named: {why4}");
    assert!(
        !why4.contains("eth1"),
        "node4 is not blamed for eth1: {why4}"
    );
    let mut good = all_but(6, "node2");
    good.retain(|n| n != "node4");
    assert_eq!(trained_on(&job.output), good, "{}", job.output);
}

#[test]
fn with_shrink_the_job_itself_is_shrunk_to_its_good_nodes() {
    let _guard = cluster();
    seven_nodes();
    let _slow = Nic::set("node3", "eth3", &["slow", "50mbit"]);
    let job = submit("shrink", 6, 5, "--message-size 4M --budget 150s --shrink");
    assert!(job.ok, "{}\n{}", job.record, job.output);
    let report = vet_report(&job.dir);
    assert_eq!(report["decision"], "shrink", "{report:#}");
    assert_eq!(job_field(&job, "NumNodes"), "5", "{report:#}");
    assert_eq!(job_field(&job, "NodeList"), "node[1-2,4-6]");
    // vet.env carries the resized job's variables, as Slurm's resize script sets them.
    let env = std::fs::read_to_string(job.dir.join("vet/vet.env")).unwrap();
    assert!(env.contains("export SLURM_NNODES=5\n"), "{env}");
    assert!(env.contains("SLURM_JOB_NODELIST='node[1-2,4-6]'"), "{env}");
    assert_eq!(
        trained_on(&job.output),
        all_but(6, "node3"),
        "{}",
        job.output
    );
}

#[test]
fn too_few_good_nodes_requeue_the_job_without_the_bad_one_and_it_runs_on_the_spare() {
    let _guard = cluster();
    seven_nodes();
    let slow = Nic::set("node2", "eth3", &["slow", "50mbit"]);
    let job = submit("requeue", 6, 6, "--message-size 4M --budget 150s");
    drop(slow);
    assert!(job.ok, "{}\n{}", job.record, job.output);
    // The first run held node2 (Slurm gives the lowest idle nodes), found it bad, and
    // requeued; the second ran without it, on the spare node7.
    assert!(
        job.output.contains("run 0, on node[1-6]"),
        "the first run: {}",
        job.output
    );
    assert!(job.output.contains("requeued"), "{}", job.output);
    assert!(
        job.output.contains("run 1, on node[1,3-7]"),
        "{}",
        job.output
    );
    assert_eq!(job_field(&job, "ExcNodeList"), "node2");
    assert_eq!(job_field(&job, "Restarts"), "1");
    assert_eq!(
        trained_on(&job.output),
        all_but(7, "node2"),
        "{}",
        job.output
    );
    let history =
        gpudirect::history::History::open_existing(&job.dir.join("history.sqlite")).unwrap();
    let decisions: Vec<String> = history
        .list_vets(None)
        .unwrap()
        .into_iter()
        .rev()
        .map(|v| format!("{}:{}", v.facts.decision, v.facts.bad_nodes))
        .collect();
    assert_eq!(decisions, ["requeue:node2", "all_good:"]);
}

#[test]
fn a_budget_too_short_hands_on_what_it_checked_and_names_the_rest() {
    let _guard = cluster();
    seven_nodes();
    // At 20 Mbit/s the slowed pair makes the screen take about 20 s (16 MiB messages, seen
    // 21 s with the node checks' 2 s before it): a 35 s budget lets the screen finish, and
    // the re-pairing of the suspects, as long again, would end past it.
    let _slow = Nic::set("node3", "eth3", &["slow", "20mbit"]);
    let job = submit("budget", 6, 4, "--budget 35s");
    assert!(job.ok, "{}\n{}", job.record, job.output);
    let report = vet_report(&job.dir);
    assert_eq!(report["rounds"], 1, "{report:#}");
    assert!(
        report["stopped"]
            .as_str()
            .is_some_and(|s| s.contains("budget")),
        "{report:#}"
    );
    let standing = |s: &str| -> Vec<String> {
        report["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["standing"] == s)
            .map(|n| n["node"].as_str().unwrap().to_string())
            .collect()
    };
    // node3 and its screen partner are suspects nobody re-paired: unchecked, not handed on.
    let unchecked = standing("unchecked");
    assert!(unchecked.contains(&"node3".to_string()), "{report:#}");
    assert_eq!(unchecked.len(), 2, "{report:#}");
    assert_eq!(standing("good").len(), 4, "{report:#}");
    assert_eq!(trained_on(&job.output), standing("good"), "{}", job.output);
    assert!(job.output.contains("stopped early"), "{}", job.output);
}
