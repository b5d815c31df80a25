//! The `gpudirect` launcher against the real local cluster.

use std::path::Path;

use cluster_tests::*;

mod bed;
mod black_holes;
mod hang;
mod health;
mod rails;
mod tune;
mod watch;

/// The arguments of `gpudirect run` of the nccl-tests stand-in in `standin_dir` on 2 nodes,
/// for `collectives` from 8 B to `max_size`, then `extra`.
fn standin_run<'a>(
    standin_dir: &'a str,
    collectives: &'a str,
    max_size: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "-c",
        collectives,
        "-N",
        "2",
        "-b",
        "8",
        "-e",
        max_size,
        "--nccl-tests-dir",
        standin_dir,
    ];
    args.extend_from_slice(extra);
    args
}

/// Every run in the history at `db` as `collective: status`, sorted.
fn collectives_and_statuses(db: &Path) -> Vec<String> {
    let history = gpudirect::history::History::open_existing(db).expect("open the history");
    let mut runs: Vec<String> = history
        .list_runs(&Default::default())
        .expect("list runs")
        .iter()
        .map(|r| format!("{}: {}", r.collective, r.status))
        .collect();
    runs.sort();
    runs
}

/// `gpudirect run` of the stand-in in `standin` (see [`standin_run`]) in a fresh allocation
/// of 2 nodes, with the history at `db` and `env` added to its environment.
fn standin_matrix(
    db: &Path,
    standin: &Path,
    collectives: &str,
    max_size: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let dir = standin.to_str().expect("a UTF-8 temp path");
    gpudirect_in_allocation(2, db, &standin_run(dir, collectives, max_size, extra), env)
}

#[test]
fn hostfile_inside_a_real_allocation() {
    let _guard = cluster();
    let gpudirect = workspace_bin("gpudirect");
    let mut cmd = slurm_command("salloc");
    // Named: a node another test just returned may still be completing or re-registering.
    cmd.args(["-N3", "-w", "node[1-3]", "--ntasks-per-node=2", "--quiet"])
        .arg(&gpudirect)
        .args(["hostfile", "--format", "openmpi"]);
    let output = run(&mut cmd);
    assert_ok(&output, "salloc gpudirect hostfile");
    assert_eq!(
        stdout(&output),
        "node1 slots=2\nnode2 slots=2\nnode3 slots=2\n"
    );
}

#[test]
fn hostfile_via_the_real_scontrol() {
    let _guard = cluster();
    let gpudirect = workspace_bin("gpudirect");
    let mut cmd = slurm_command(gpudirect.to_str().unwrap());
    cmd.args([
        "hostfile",
        "--nodelist",
        "node[1-3],gpu[08-10]",
        "--via-scontrol",
        "--format",
        "hosts",
    ]);
    let output = run(&mut cmd);
    assert_ok(&output, "gpudirect hostfile --via-scontrol");
    assert_eq!(
        stdout(&output),
        "node1\nnode2\nnode3\ngpu08\ngpu09\ngpu10\n"
    );
    let mut bad = slurm_command(gpudirect.to_str().unwrap());
    bad.args(["hostfile", "--nodelist", "node[3-", "--via-scontrol"]);
    let output = run(&mut bad);
    assert!(!output.status.success(), "a bad hostlist was accepted");
    assert!(
        stderr(&output).contains("invalid node list")
            && stderr(&output).contains("not passed to scontrol"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn run_checks_the_transport_of_every_cell_and_records_it() {
    let _guard = cluster();
    let (standin, db) = standin_and_db("run");
    let output = standin_matrix(
        &db,
        &standin,
        "all_reduce,all_gather",
        "1G",
        &["--variants", "tcpx,none", "--mpi", "none"],
        &[],
    );
    let out = stdout(&output);
    assert_eq!(
        output.status.code(),
        Some(2),
        "a tcpx cell over sockets must fail the run:\n{out}\n{}",
        stderr(&output)
    );
    let line = |label: &str| {
        out.lines()
            .find(|l| l.contains(label))
            .unwrap_or_else(|| panic!("no summary line for {label}:\n{out}"))
            .to_string()
    };
    assert!(line("all_reduce N=2 G=1 tcpx").contains("failed"), "{out}");
    assert!(line("all_reduce N=2 G=1 none").contains(" ok "), "{out}");
    assert!(line("all_gather N=2 G=1 none").contains(" ok "), "{out}");
    assert!(out.contains("expected NET/GPUDirectTCPX between nodes, but NCCL used Socket: the fast transport did not load"), "{out}");
    assert!(out.contains("2 of 4 cells passed"), "{out}");
    assert!(out.contains("not measurements of this machine"), "{out}");
    // Every cell is in the history, as a replay, with the nodes it ran on.
    let history = gpudirect::history::History::open_existing(&db).expect("history written");
    let runs = history.list_runs(&Default::default()).expect("list runs");
    assert_eq!(runs.len(), 4);
    for summary in &runs {
        let detail = history.get_run(summary.id).expect("run detail");
        assert_eq!(
            summary.nodelist.as_deref(),
            Some("node[1-2]"),
            "where the step ran"
        );
        assert_eq!(summary.launcher, gpudirect::history::LaunchKind::Srun);
        assert!(
            detail
                .provenance
                .env
                .contains_key("GPUDIRECT_STANDIN_REPLAY"),
            "replays are marked"
        );
        let expected = if summary.variant.as_deref() == Some("tcpx") {
            "failed"
        } else {
            "ok"
        };
        assert_eq!(summary.status.to_string(), expected, "{summary:?}");
        assert!(detail.rows.len() > 20);
        // Issue #45: tcpx names a control NIC (eth0), so its cells keep Open MPI's own
        // traffic there; `none` has no profile and pins nothing.
        let pinned = if summary.variant.as_deref() == Some("tcpx") {
            Some("eth0")
        } else {
            None
        };
        for name in ["OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"] {
            assert_eq!(
                detail.provenance.env.get(name).map(String::as_str),
                pinned,
                "{name} in {summary:?}: {:?}",
                detail.provenance.env
            );
        }
    }
    assert!(
        stderr(&output)
            .contains("gpudirect run: Open MPI's own TCP traffic kept on the control NIC eth0"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_hung_rank_times_out_the_cell_kills_the_step_and_the_matrix_goes_on() {
    let _guard = cluster();
    let (standin, db) = standin_and_db("hang");
    let started = std::time::Instant::now();
    let output = standin_matrix(
        &db,
        &standin,
        "all_reduce,all_gather",
        "1G",
        // The grace lets srun, stopped with SIGTERM, print which task it killed on which
        // node ("srun: error: node2: task 1: Killed"): with 2 s it was often SIGKILLed
        // first, while still "Waiting up to 7 seconds for job step to finish".
        &["--mpi", "none", "--timeout", "3s", "--grace", "8s"],
        &[("STANDIN_HANG_RANKS", "1")],
    );
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(2), "{out}\n{}", stderr(&output));
    assert_eq!(
        out.matches(" timeout ").count(),
        2,
        "both cells time out, the second still runs:\n{out}"
    );
    assert!(out.contains("ran past its timeout"), "{out}");
    assert!(out.contains("node2"), "the hung node is named:\n{out}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let strays = run(std::process::Command::new("pgrep").args(["-f", "gd-standin-hang"]));
    assert!(
        !strays.status.success(),
        "stray stand-in processes: {}",
        stdout(&strays)
    );
    // Slurm ends a step a few seconds after its srun is killed: none may stay after that.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let steps = loop {
        let mut squeue = slurm_command("squeue");
        squeue.args(["-h", "-s"]);
        let steps = stdout(&run(&mut squeue)).trim().to_string();
        if steps.is_empty() || std::time::Instant::now() > deadline {
            break steps;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert_eq!(steps, "", "job steps left behind");
    // Before each kill NCCL's RAS was asked (`gpudirect hang`); the stand-in has none, and
    // each timed-out run says so in its notes, which `show` prints.
    let history = gpudirect::history::History::open_existing(&db).expect("open the history");
    for summary in history.list_runs(&Default::default()).expect("list runs") {
        let detail = history.get_run(summary.id).expect("a run");
        assert!(
            detail
                .provenance
                .notes
                .iter()
                .any(|n| n.starts_with("RAS before the timeout kill: ")
                    && n.contains("no NCCL RAS answers")),
            "run {}: {:?}",
            summary.id,
            detail.provenance.notes
        );
    }
}

#[test]
fn probe_shows_the_profile_on_every_task_of_three_nodes() {
    let _guard = cluster();
    let db = temp_db("probe");
    let output = gpudirect_in_allocation_with(
        &["-N3", "-w", "node[1-3]", "--ntasks-per-node=2"],
        &db,
        &["probe", "--gpudirect", "tcpx", "--json"],
        &[],
    );
    assert_ok(&output, "gpudirect probe --gpudirect tcpx");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("probe --json");
    let tasks = report["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 6);
    for task in tasks {
        assert_eq!(task["vars"]["GPUDIRECT_PROFILE"], "tcpx", "{task}");
        assert_eq!(task["vars"]["NCCL_NET"], "GPUDirectTCPX_v7");
        assert_eq!(
            task["mismatches"].as_array().map(Vec::len),
            Some(0),
            "{task}"
        );
        let nics: Vec<&str> = task["nics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap())
            .collect();
        assert_eq!(nics, ["eth0", "eth1", "eth2", "eth3", "eth4"]);
    }
    assert_eq!(
        report["analysis"]["findings"].as_array().map(Vec::len),
        Some(0),
        "{}",
        report["analysis"]
    );
}

#[test]
fn probe_names_the_node_whose_tasks_did_not_get_the_profile() {
    let _guard = cluster();
    let db = temp_db("probe-bad");
    let down = ip_in_node("node2", &["link", "set", "eth3", "mtu", "1400"]);
    assert_ok(&down, "set an odd MTU on node2");
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            ip_in_node("node2", &["link", "set", "eth3", "mtu", "1500"]);
            ip_in_node("node3", &["link", "set", "eth1", "up"]);
        }
    }
    let _restore = Restore;
    assert_ok(
        &ip_in_node("node3", &["link", "set", "eth1", "down"]),
        "eth1 down on node3",
    );
    let output = gpudirect_in_allocation(
        3,
        &db,
        &[
            "probe",
            "--gpudirect",
            "tcpx",
            "--nodes",
            "3",
            "--ntasks-per-node",
            "1",
        ],
        &[],
    );
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{out}\n{}", stderr(&output));
    assert!(
        out.contains("error: node3: GPUDIRECT_PROFILE missing (profile: tcpx)"),
        "{out}"
    );
    assert!(
        out.contains("NIC eth3 differs: up, mtu 1400") && out.contains("on node2"),
        "{out}"
    );
    assert!(
        out.contains("NIC eth1 differs: down") && out.contains("on node3"),
        "{out}"
    );
}

#[test]
fn probe_names_an_nccl_config_file_that_changes_the_transport() {
    let _guard = cluster();
    let db = temp_db("probe-conf");
    let dir = fresh_temp_dir("probe-conf");
    // NCCL reads this at init (NCCL_CONF_FILE), after the environment: NCCL_NET loses to
    // the profile's value, but NCCL_NET_PLUGIN, which tcpx leaves unset, takes effect.
    let conf = dir.join("nccl.conf");
    std::fs::write(
        &conf,
        "# site defaults\nNCCL_NET=Socket\nNCCL_NET_PLUGIN=none\nNCCL_DEBUG_FILE=/tmp/nccl.%h.%p\n",
    )
    .expect("write the NCCL config file");
    let conf_text = conf.to_str().expect("UTF-8 temp path");
    let output = gpudirect_in_allocation_with(
        &["-N2", "-w", "node[1-2]"],
        &db,
        &["probe", "--gpudirect", "tcpx"],
        &[("NCCL_CONF_FILE", conf_text)],
    );
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{out}\n{}", stderr(&output));
    assert!(
        out.contains(&format!(
            "error: node[1-2]: NCCL_NET_PLUGIN=none from {conf_text}:3 (NCCL_CONF_FILE) changes the transport (profile tcpx leaves it unset): remove it from {conf_text} on 2 task(s)"
        )),
        "{out}"
    );
    let line = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}:\n{out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        line("NCCL_NET").starts_with("NCCL_NET GPUDirectTCPX_v7 profile tcpx "),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "NCCL_NET: also {conf_text}:2 sets `Socket`: ignored, the environment wins"
        )),
        "{out}"
    );
    assert!(
        line("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX").contains("forced by profile tcpx"),
        "{out}"
    );
    assert!(
        line("NCCL_DEBUG_FILE").contains(&format!("{conf_text}:4")),
        "{out}"
    );
    assert!(
        !out.contains("error: node[1-2]: NCCL_NET="),
        "the profile's value wins: {out}"
    );

    // The same as JSON, per task.
    let output = gpudirect_in_allocation_with(
        &["-N1", "-w", "node1"],
        &db,
        &["probe", "--gpudirect", "tcpx", "--json"],
        &[("NCCL_CONF_FILE", conf_text)],
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("probe --json");
    let provenance = report["tasks"][0]["provenance"]
        .as_array()
        .expect("provenance");
    let plugin = provenance
        .iter()
        .find(|p| p["name"] == "NCCL_NET_PLUGIN")
        .expect("NCCL_NET_PLUGIN");
    assert_eq!(plugin["source"]["kind"], "file");
    assert_eq!(plugin["source"]["path"], conf_text);
    assert!(plugin["flag"]
        .as_str()
        .is_some_and(|f| f.contains("changes the transport")));
}

#[test]
fn run_through_mpirun_inside_the_allocation() {
    let _guard = cluster();
    let (standin, db) = standin_and_db("mpirun");
    let output = standin_matrix(
        &db,
        &standin,
        "all_reduce",
        "1G",
        &["--launcher", "mpirun", "--variants", "none"],
        &[],
    );
    let out = stdout(&output);
    assert_ok(&output, "gpudirect run --launcher mpirun");
    assert!(
        out.contains("all_reduce N=2 G=1 none") && out.contains(" ok "),
        "{out}"
    );
    let history = gpudirect::history::History::open_existing(&db).unwrap();
    let runs = history.list_runs(&Default::default()).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].launcher, gpudirect::history::LaunchKind::Mpirun);
    let detail = history.get_run(runs[0].id).unwrap();
    assert!(
        detail
            .provenance
            .command_line
            .as_deref()
            .unwrap_or("")
            .starts_with("mpirun -np 2 --hostfile"),
        "{:?}",
        detail.provenance.command_line
    );
}

#[test]
fn validate_names_the_slow_node_in_three_rounds_records_it_and_drains_it() {
    let _guard = cluster();
    let (standin, db) = standin_and_db("validate");
    let report_dir = db.parent().unwrap().join("report");
    let _resume = ResumeNodesOnDrop;
    // --drain is an admin's action (scontrol update): this validation runs as root.
    let output = gpudirect_in_allocation_as(
        Who::Root,
        &["-N3", "-w", "node[1-3]"],
        &db,
        &[
            &["validate"][..],
            &VALIDATE_STANDIN_ARGS,
            &[
                "--drain",
                "--report",
                report_dir.to_str().unwrap(),
                "--json",
            ],
            &["--nccl-tests-dir", standin.to_str().unwrap()],
        ]
        .concat(),
        &[("STANDIN_SLOW_NODES", "node3")],
    );
    assert_eq!(
        output.status.code(),
        Some(1),
        "degraded:\n{}\n{}",
        stdout(&output),
        stderr(&output)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("validate --json");
    assert!(report["rounds"].as_u64().unwrap() <= 3, "{report}");
    let verdicts: Vec<(String, String)> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap().to_string(),
                n["verdict"]["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            ("node1".into(), "healthy".into()),
            ("node2".into(), "healthy".into()),
            ("node3".into(), "slow_node".into())
        ]
    );
    assert_stderr_contains(&output, "drained node3 (Slurm shows");
    let drains = report["drains"].as_array().expect("drains in --json");
    assert_eq!(drains.len(), 1, "{report}");
    assert_eq!(drains[0]["node"], "node3");
    assert_eq!(drains[0]["outcome"], "drained");
    assert!(
        drains[0]["state"].as_str().unwrap().contains("DRAIN"),
        "the state read back: {report}"
    );
    // The reason starts with the tag, so that --resume (and `gpudirect health`) know it.
    let state = sinfo_state("node3");
    assert!(
        state.starts_with("drain") && state.contains("|gpudirect validate: slow node"),
        "{state}"
    );
    let history = gpudirect::history::History::open_existing(&db).unwrap();
    let runs = history.list_runs(&Default::default()).unwrap();
    assert_eq!(
        runs.len() as u64,
        report["rounds"].as_u64().unwrap(),
        "one pair per round on 3 nodes"
    );
    let node3 = history
        .node_history("node3", None, None)
        .expect("node history");
    assert!(!node3.runs.is_empty(), "node3 runs are in its history");
    assert!(report_dir.join("index.html").is_file());
}

/// Issue #45: in one allocation of node[1-4], every step on node3 hangs before NCCL prints
/// anything (the stand-in's hook `STANDIN_NO_START_NODES=node3`, a launch stuck in srun's
/// wire-up or MPI_Init). Each such pair is cut at the 5 s start-up deadline, run once more as
/// a step of its own, and reported: node3 "could not start", the other nodes healthy (each
/// re-paired and judged on its other pairs), degraded (exit 1), and no step left behind.
#[test]
fn validate_says_could_not_start_of_a_node_whose_steps_hang_before_nccl() {
    let _guard = cluster();
    let (standin, db) = standin_and_db("no-start");
    let started = std::time::Instant::now();
    let output = gpudirect_in_allocation(
        4,
        &db,
        &[
            &["validate"][..],
            &VALIDATE_STANDIN_ARGS,
            &["--startup-timeout", "5s", "--json"],
            &["--nccl-tests-dir", standin.to_str().unwrap()],
        ]
        .concat(),
        &[("STANDIN_NO_START_NODES", "node3")],
    );
    let took = started.elapsed();
    assert_eq!(
        output.status.code(),
        Some(1),
        "degraded:\n{}\n{}",
        stdout(&output),
        stderr(&output)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("validate --json");
    let verdicts: Vec<(String, String)> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap().to_string(),
                n["verdict"]["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let allocated: Vec<&str> = verdicts.iter().map(|(n, _)| n.as_str()).collect();
    assert!(allocated.contains(&"node3"), "{report}");
    for (node, verdict) in &verdicts {
        let want = if node == "node3" {
            "could_not_start"
        } else {
            "healthy"
        };
        assert_eq!(verdict, want, "{node}: {report}");
    }
    assert_stderr_contains(&output, "running it once more as a step of its own");
    assert_stderr_contains(&output, "could not start (no NCCL line within its 5 s");
    // Cut at the start-up deadline, not the 10 min timeout.
    assert!(took < std::time::Duration::from_secs(240), "{took:?}");
    let mut squeue = slurm_command("squeue");
    squeue.args(["-h", "-s"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let steps = loop {
        let steps = stdout(&run(&mut squeue)).trim().to_string();
        if steps.is_empty() || std::time::Instant::now() > deadline {
            break steps;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert_eq!(steps, "", "job steps left behind");
}

/// Issue #17's done-when: in one allocation of 3 nodes with node3 slow, `validate --drain
/// --retries 2` re-tests node3 twice and drains exactly it (the state read back, the reason
/// tagged); an admin then drains node2 for a reason of their own; with the fault gone,
/// `validate --resume` re-tests node3 with node1 (the one node not drained) and returns it,
/// and leaves node2 drained.
#[test]
fn validate_drains_a_slow_node_after_retries_and_resume_returns_it_but_not_an_admin_drain() {
    let _guard = cluster();
    let _resume = ResumeNodesOnDrop;
    let (standin, db) = standin_and_db("drain-resume");
    let dir = db.parent().unwrap().to_path_buf();
    let validate = |extra: &[&str]| {
        let args = [
            &["validate"][..],
            &VALIDATE_STANDIN_ARGS,
            &["--json", "--nccl-tests-dir", standin.to_str().unwrap()],
            extra,
        ]
        .concat();
        Step::gpudirect(&db, &args)
    };
    const ADMIN_REASON: &str = "bad DIMM, ticket 4411";
    let steps = [
        validate(&["--drain", "--retries", "2"]).env("STANDIN_SLOW_NODES", "node3"),
        Step::new("sinfo", &["-h", "-n", "node3", "-o", "%T|%E"]),
        Step::new(
            "scontrol",
            &[
                "update",
                "nodename=node2",
                "state=drain",
                &format!("reason={ADMIN_REASON}"),
            ],
        ),
        validate(&["--resume"]),
    ];
    // Draining and resuming are an admin's actions (scontrol update): root.
    let (output, steps) =
        steps_in_one_allocation_as(Who::Root, &["-N3", "-w", "node[1-3]"], &dir, &steps);
    assert_ok(&output, "the allocation");
    let [drain, sinfo, admin, resume] = &steps[..] else {
        panic!("{steps:?}")
    };

    // 1. --drain --retries 2: node3 judged slow, slow in both re-tests, drained.
    drain.assert_code(1, "validate --drain --retries 2 is degraded");
    let report: serde_json::Value = serde_json::from_str(&drain.stdout).expect("--json");
    let retests = report["retests"].as_array().expect("retests");
    assert_eq!(retests.len(), 1, "{report}");
    assert_eq!(retests[0]["node"], "node3");
    assert_eq!(retests[0]["runs"].as_array().unwrap().len(), 2, "{report}");
    assert_eq!(retests[0]["bad_every_time"], true, "{report}");
    assert_eq!(report["rounds"], 5, "3 rounds, then 2 re-tests: {report}");
    let drains = report["drains"].as_array().expect("drains");
    assert_eq!(drains.len(), 1, "exactly node3: {report}");
    assert_eq!(drains[0]["node"], "node3");
    assert_eq!(drains[0]["outcome"], "drained");
    assert!(
        drains[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("gpudirect validate: slow node"),
        "{report}"
    );
    assert!(
        drains[0]["reason"]
            .as_str()
            .unwrap()
            .contains("2/2 re-tests bad"),
        "{report}"
    );
    assert!(drains[0]["state"].as_str().unwrap().contains("DRAIN"));
    assert!(
        drain.stderr.contains("drained node3 (Slurm shows"),
        "{}",
        drain.stderr
    );
    // The re-tests are in the history with the other pairs.
    let history = gpudirect::history::History::open_existing(&db).unwrap();
    let node3 = history.node_history("node3", None, None).unwrap();
    // Slow re-tests: the drain step's (the resume step's re-test passed).
    let retest_runs = node3
        .checks
        .iter()
        .filter(|c| {
            c.result
                .role
                .as_deref()
                .is_some_and(|r| r.starts_with("retest"))
                && c.result.verdict.as_deref() == Some("slow")
        })
        .count();
    assert_eq!(retest_runs, 2, "{:?}", node3.checks);
    drop(history);

    // 2. Slurm shows it drained (draining while the allocation holds it), tagged.
    sinfo.assert_code(0, "sinfo");
    assert!(
        sinfo.stdout.starts_with("drain")
            && sinfo.stdout.contains("|gpudirect validate: slow node"),
        "{}",
        sinfo.stdout
    );
    admin.assert_code(0, "the admin's drain of node2");

    // 3. --resume without the fault: node3 re-tested with node1 and returned; node2 left.
    resume.assert_code(0, "validate --resume finds every node healthy");
    let report: serde_json::Value = serde_json::from_str(&resume.stdout).expect("--json");
    let resumes = report["resumes"].as_array().expect("resumes");
    let outcome = |node: &str| {
        resumes
            .iter()
            .find(|r| r["node"] == node)
            .unwrap_or_else(|| panic!("no {node} in {report}"))
            .clone()
    };
    assert_eq!(resumes.len(), 2, "the two drained nodes: {report}");
    let node3 = outcome("node3");
    assert_eq!(node3["outcome"], "resumed", "{report}");
    assert!(
        !node3["state"].as_str().unwrap().contains("DRAIN"),
        "{report}"
    );
    let retests = report["retests"].as_array().unwrap();
    assert_eq!(retests.len(), 1, "{report}");
    assert_eq!(
        retests[0]["runs"][0]["partner"], "node1",
        "never a drained partner: {report}"
    );
    let node2 = outcome("node2");
    assert_eq!(node2["outcome"], "admin_drain", "{report}");
    assert_eq!(node2["reason"], ADMIN_REASON);
    assert!(
        resume.stderr.contains(&format!(
            "node2 left drained: drained by an admin for \"{ADMIN_REASON}\""
        )),
        "{}",
        resume.stderr
    );

    // After the allocation: node3 is back in service (no drain, no reason), node2 still
    // drained for the admin. Slurm 22.05 may go on showing a node resumed inside an
    // allocation as `mixed` for a while after the allocation ends (its queue is empty and
    // the next registration shows it idle): in service either way.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let in_service = |state: &str| {
        (state.starts_with("idle") || state.starts_with("mixed")) && state.ends_with("|none")
    };
    let mut node3 = sinfo_state("node3");
    while !in_service(&node3) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(500));
        node3 = sinfo_state("node3");
    }
    let mut squeue = slurm_command("squeue");
    squeue.args(["-a", "-h", "-o", "%i %T %N %j %u"]);
    let queue = stdout(&run(&mut squeue));
    assert!(in_service(&node3), "{node3}; the queue: {queue}");
    assert!(queue.trim().is_empty(), "nothing runs on it: {queue}");
    let node2 = sinfo_state("node2");
    assert!(
        node2.starts_with("drain") && node2.ends_with(&format!("|{ADMIN_REASON}")),
        "{node2}"
    );
}

#[test]
fn a_killed_run_keeps_finished_cells_marks_the_interrupted_one_and_resumes() {
    let _guard = cluster();
    let (standin, db) = standin_and_db("resume");
    let dir = standin.to_str().unwrap();
    let args = |extra: &[&'static str]| {
        let mut args = vec!["--mpi", "none"];
        args.extend_from_slice(extra);
        standin_run(dir, "all_reduce,all_gather,reduce_scatter", "4G", &args)
    };
    // The second cell hangs; kill -9 the launcher while it waits for it.
    let mut cmd = slurm_command("salloc");
    cmd.args(["-N2", "--quiet"])
        .arg(workspace_bin("gpudirect"))
        .arg("--db")
        .arg(&db)
        .args(args(&["--matrix-id", "killed-1"]))
        .env("GPUDIRECT_CONFIG", plugin_config())
        .env("STANDIN_HANG_COLLECTIVES", "all_gather")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut salloc = cmd.spawn().expect("start salloc");
    let pattern = format!("gpudirect --db {} run", db.display());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let history = gpudirect::history::History::open_existing(&db).ok();
        let placeholders = history
            .and_then(|h| h.list_runs(&Default::default()).ok())
            .map(|runs| runs.iter().filter(|r| r.collective == "all_gather").count())
            .unwrap_or(0);
        if placeholders > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the hanging cell never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let killed = run(std::process::Command::new("pkill").args(["-9", "-f", &pattern]));
    assert_ok(&killed, "kill -9 gpudirect run");
    let _ = salloc.wait();
    let mut scancel = slurm_command("scancel");
    scancel.args(["-u", TEST_USER]);
    run(&mut scancel);

    let history = gpudirect::history::History::open_existing(&db)
        .expect("the history opens cleanly after kill -9");
    let runs = history.list_runs(&Default::default()).unwrap();
    let by_collective = |c: &str| {
        runs.iter()
            .filter(|r| r.collective == c)
            .map(|r| r.status.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        by_collective("all_reduce"),
        ["ok"],
        "the finished cell is there"
    );
    assert_eq!(
        by_collective("all_gather"),
        ["interrupted"],
        "the killed cell is marked"
    );
    assert!(by_collective("reduce_scatter").is_empty());
    drop(history);

    let output = gpudirect_in_allocation(2, &db, &args(&["--resume", "killed-1"]), &[]);
    assert_ok(&output, "gpudirect run --resume");
    assert_stderr_contains(&output, "resuming killed-1: 1 of 3 cells already recorded");
    assert_stdout_contains(&output, "2 of 2 cells passed");
    assert_eq!(
        collectives_and_statuses(&db),
        ["all_gather: ok", "all_reduce: ok", "reduce_scatter: ok"],
        "each cell once: the placeholder was replaced"
    );
}

#[test]
fn submit_makes_one_allocation_per_node_count_and_records_each() {
    let _guard = cluster();
    let (standin, db) = standin_and_db("submit");
    let mut cmd = slurm_command(workspace_bin("gpudirect").to_str().unwrap());
    cmd.arg("--db")
        .arg(&db)
        .args([
            "run",
            "--submit",
            "-c",
            "all_reduce",
            "-N",
            "1,2",
            "-b",
            "8",
            "-e",
            "1G",
        ])
        .args(["--variants", "none", "--mpi", "none", "--nccl-tests-dir"])
        .arg(&standin)
        .env("GPUDIRECT_CONFIG", plugin_config());
    let output = run(&mut cmd);
    assert_ok(&output, "gpudirect run --submit");
    let err = stderr(&output);
    assert!(
        err.contains("allocation for N=1: salloc --nodes=1")
            && err.contains("allocation for N=2: salloc --nodes=2"),
        "{err}"
    );
    let history = gpudirect::history::History::open_existing(&db).unwrap();
    let mut counts: Vec<Option<u32>> = history
        .list_runs(&Default::default())
        .unwrap()
        .iter()
        .map(|r| r.node_count)
        .collect();
    counts.sort();
    assert_eq!(counts, [Some(1), Some(2)]);
}

#[test]
fn ctrl_c_stops_the_running_step_and_keeps_what_finished() {
    let _guard = cluster();
    let (standin, db) = standin_and_db("sigint");
    let mut cmd = slurm_command("salloc");
    cmd.args(["-N2", "--quiet"])
        .arg(workspace_bin("gpudirect"))
        .arg("--db")
        .arg(&db)
        .args([
            "run",
            "-c",
            "all_reduce,all_gather,reduce_scatter",
            "-N",
            "2",
            "-b",
            "8",
            "-e",
            "4G",
        ])
        .args(["--mpi", "none", "--nccl-tests-dir"])
        .arg(&standin)
        .env("GPUDIRECT_CONFIG", plugin_config())
        .env("STANDIN_HANG_COLLECTIVES", "all_gather")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("start salloc");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while
        run(std::process::Command::new("pgrep").args(["-f", "gd-standin-sigint.*all_gather_perf"]))
            .stdout
            .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the hanging cell never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let pattern = format!("gpudirect --db {} run", db.display());
    assert_ok(
        &run(std::process::Command::new("pkill").args(["-INT", "-f", &pattern])),
        "SIGINT gpudirect run",
    );
    let output = child.wait_with_output().expect("salloc ends");
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}\n{}",
        stdout(&output),
        stderr(&output)
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let strays = run(std::process::Command::new("pgrep").args(["-f", "gd-standin-sigint"]));
    assert!(strays.stdout.is_empty(), "stray ranks: {}", stdout(&strays));
    assert_eq!(
        collectives_and_statuses(&db),
        ["all_gather: interrupted", "all_reduce: ok"]
    );
}

#[test]
fn the_sbatch_templates_run() {
    let _guard = cluster();
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(300);
    // sbatch reads the script as the user: from the shared folder, not the checkout.
    let templates = shared_dir().join("sbatch");
    share(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/sbatch"),
        &templates,
    );
    let dir = fresh_temp_dir("templates");
    let bin_dir = workspace_bin("gpudirect").parent().unwrap().to_path_buf();
    let path = format!(
        "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        bin_dir.display()
    );

    let train_out = dir.join("train.out");
    let mut train = slurm_command("sbatch");
    train
        .args(["--parsable", "-N2", "-o"])
        .arg(&train_out)
        .arg(templates.join("train.sbatch"))
        .args([
            "sh",
            "-c",
            "echo rank $SLURM_PROCID $NCCL_NET $GPUDIRECT_NIC",
        ]);
    let end = submit_and_wait(&mut train, LIMIT, "sbatch train.sbatch");
    assert!(end.ok(), "train.sbatch: {}", end.record);
    let text = std::fs::read_to_string(&train_out).unwrap();
    assert_eq!(
        text.matches("profile=tcpx NCCL_NET=GPUDirectTCPX_v7")
            .count(),
        2,
        "{text}"
    );
    assert_eq!(
        text.matches(" GPUDirectTCPX_v7 eth").count(),
        16,
        "every rank: {text}"
    );

    let weekly_out = dir.join("weekly.out");
    let standin = standin_dir("weekly");
    let mut weekly = slurm_command("sbatch");
    weekly
        .args(["--parsable", "-N3", "-o"])
        .arg(&weekly_out)
        .arg(templates.join("weekly-validation.sbatch"))
        .current_dir(&dir)
        .env("PATH", &path)
        .env("NCCL_TESTS_DIR", &standin)
        .env("GPUDIRECT_DB", dir.join("history.sqlite"))
        .env("GPUDIRECT_CONFIG", plugin_config())
        .env("COLLECTIVES", "all_reduce")
        .env("GPUS_PER_NODE", "2")
        .env("GPUS_PER_PROCESS", "2")
        .env("GPUDIRECT_MODE", "none")
        .env("MPI", "none")
        .env("FLOOR", "300")
        .env("REPORT_DIR", dir.join("report"));
    let end = submit_and_wait(&mut weekly, LIMIT, "sbatch weekly-validation.sbatch");
    let text = std::fs::read_to_string(&weekly_out).unwrap_or_default();
    assert!(
        end.ok(),
        "sbatch weekly-validation.sbatch: {}\n{text}",
        end.record
    );
    assert!(
        text.contains("2 of 2 cells passed") && text.contains("gpudirect run exited 0"),
        "{text}"
    );
    assert!(text.contains("verdict: Healthy (exit 0)"), "{text}");
    assert!(dir.join("report/index.html").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_slurmd_killed_mid_matrix_fails_the_cells_on_its_node_only() {
    let _guard = cluster();
    struct RestartNodes;
    impl Drop for RestartNodes {
        fn drop(&mut self) {
            local_cluster(&["up"]);
        }
    }
    let _restart = RestartNodes;
    let (standin, db) = standin_and_db("slurmd");
    // The allocation's second node loses its slurmd (node2 on an idle cluster; another
    // when a previous test's job still holds the first nodes).
    let script = format!(
        "second=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | sed -n 2p) && echo \"killed: $second\" >&2 && kill -9 $(cat {run}/slurmd-$second.pid) && exec {gd} --db {db} run -c all_reduce,all_gather -N 1,2 -b 8 -e 1G --variants none --mpi none --timeout 60s --nccl-tests-dir {dir}",
        run = state_dir().join("run").display(),
        gd = workspace_bin("gpudirect").display(),
        db = db.display(),
        dir = standin.display()
    );
    // Killing slurmd is fault injection, which needs root; the launcher's side is the same
    // whoever runs it.
    let mut cmd = slurm_command_as(Who::Root, "salloc");
    cmd.args(["-N3", "--quiet", "bash", "-c", &script]);
    let output = run(&mut cmd);
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(2), "{out}\n{}", stderr(&output));
    let killed = stderr(&output)
        .lines()
        .find_map(|l| l.strip_prefix("killed: "))
        .expect("the script says which slurmd it killed")
        .to_string();
    let history = gpudirect::history::History::open_existing(&db).unwrap();
    for summary in history.list_runs(&Default::default()).unwrap() {
        let detail = history.get_run(summary.id).unwrap();
        if summary.node_count == Some(1) {
            assert_eq!(
                summary.status.to_string(),
                "ok",
                "the first node alone is unaffected: {summary:?}"
            );
        } else {
            assert_eq!(summary.status.to_string(), "failed");
            assert!(
                detail.failures.iter().any(|f| f.contains(&killed)),
                "the node is named: {:?}",
                detail.failures
            );
        }
    }
    assert!(out.contains("2 of 4 cells passed"), "{out}");
}
