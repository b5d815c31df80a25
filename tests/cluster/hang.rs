//! `gpudirect hang` on the local cluster, with NCCL's RAS played by `nccl-ras-standin`
//! (launcher/src/bin/nccl-ras-standin.rs), which answers with the answer recorded on the lent
//! H200 (tests/fixtures/nccl-ras/). Each job's tasks are stand-ins on two nodes, listening on
//! the job's own NCCL_RAS_ADDR; the test writes their real addresses and pids into the answer.

use std::path::Path;
use std::time::{Duration, Instant};

use cluster_tests::*;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Submits a 2-node job of RAS stand-ins on `port` (extra stand-in flags in `extra`) and
/// returns its id and the stand-ins' pids by task, once both listen.
fn standin_job(dir: &Path, port: u16, answer: &Path, extra: &str) -> (u32, [u32; 2]) {
    let standin = workspace_bin("nccl-ras-standin");
    let pids = dir.join(format!("pids-{port}"));
    std::fs::create_dir_all(&pids).unwrap();
    give_to_test_user(&pids);
    let wrap = format!(
        "srun -N2 --ntasks-per-node=1 {} --answer {} --pid-dir {} --seconds 90 {extra}",
        standin.display(),
        answer.display(),
        pids.display()
    );
    let out = run(slurm_command("sbatch")
        .args(["-N2", "-o", "/dev/null", "--wrap", &wrap])
        .env("NCCL_RAS_ADDR", format!("127.0.0.1:{port}")));
    assert_ok(&out, "sbatch the RAS stand-ins");
    let job = submitted(&out);
    let start = Instant::now();
    loop {
        let read = |t: u32| -> Option<u32> {
            std::fs::read_to_string(pids.join(format!("pid-{t}")))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        if let (Some(a), Some(b)) = (read(0), read(1)) {
            return (job, [a, b]);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "job {job}'s stand-ins did not start within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The recorded answer with the stand-ins' real hosts (each node's eth1) and pids.
/// The two nodes job `job` runs on, in order (Slurm gives whichever two are free).
fn job_nodes(job: u32) -> [String; 2] {
    let out = run(slurm_command("scontrol").args(["show", "job", &job.to_string(), "--oneliner"]));
    assert_ok(&out, "scontrol show job");
    let info = gpudirect::slurm::parse_job_line(&text(&out.stdout)).expect("a job line");
    let list = info.nodes.expect("a running job has nodes");
    let nodes = gpudirect_core::hostlist::expand(&list).expect("a hostlist");
    assert_eq!(nodes.len(), 2, "job {job} runs on {list}");
    [nodes[0].clone(), nodes[1].clone()]
}

/// A node's eth1 address on the local cluster: 10.213.1.N for nodeN.
fn eth1_of(node: &str) -> String {
    format!("10.213.1.{}", node.trim_start_matches("node"))
}

fn answer_for(pids: [u32; 2], nodes: &[String; 2]) -> String {
    let recorded = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/nccl-ras/status-json-rank1-stalled.txt"),
    )
    .unwrap();
    recorded
        .replace("\"10.9.1.1\"", &format!("\"{}\"", eth1_of(&nodes[0])))
        .replace("\"10.9.1.2\"", &format!("\"{}\"", eth1_of(&nodes[1])))
        .replace("\"pid\": 1559", &format!("\"pid\": {}", pids[0]))
        .replace("\"pid\": 1560", &format!("\"pid\": {}", pids[1]))
}

/// `hang` of `job`, again until its answer names `127.0.0.1:PORT` (until its step runs, the
/// agent finds no task and asks the default address), or 30 s; its exit must be 3.
fn hang_once_its_step_runs(job: u32, port: u16) -> String {
    hang_once_its_step_runs_as(Who::User, job, port)
}

/// [`hang_once_its_step_runs`], `hang` run by `who`.
fn hang_once_its_step_runs_as(who: Who, job: u32, port: u16) -> String {
    let start = Instant::now();
    let out = loop {
        let out = hang_as(who, job);
        if text(&out.stdout).contains(&format!("127.0.0.1:{port}"))
            || start.elapsed() > Duration::from_secs(30)
        {
            break out;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    stdout
}

fn hang(job: u32) -> std::process::Output {
    hang_as(Who::User, job)
}

fn hang_as(who: Who, job: u32) -> std::process::Output {
    run(
        slurm_command_as(who, workspace_bin("gpudirect").to_str().unwrap()).args([
            "hang",
            &job.to_string(),
            "--polls",
            "2",
            "--interval",
            "1s",
            "--timeout",
            "3s",
        ]),
    )
}

/// Two jobs on the same two nodes, each with its own RAS port: the stalled one names rank 1
/// with node2, task 1 and its pid; the other, whose counts advance, is no hang; a third job
/// whose port nobody listens on gets the reason and exit 3.
#[test]
fn hang_names_the_stalled_rank_and_each_job_sees_its_own_ras() {
    let _guard = cluster();
    let dir = fresh_temp_dir("hang");
    let base = 30_000 + (std::process::id() % 10_000) as u16 * 3 % 30_000;
    let stalled_answer = dir.join("stalled.txt");
    let moving_answer = dir.join("moving.txt");
    std::fs::write(&stalled_answer, "").unwrap();
    std::fs::write(&moving_answer, "").unwrap();
    let (stalled, pids) = standin_job(&dir, base, &stalled_answer, "");
    let (moving, moving_pids) = standin_job(&dir, base + 1, &moving_answer, "--advance AllReduce");
    // The recorded answer's hosts become the nodes each job got (node1 and node2 when the
    // cluster is idle; others when a previous test's job still holds them).
    let stalled_nodes = job_nodes(stalled);
    std::fs::write(&stalled_answer, answer_for(pids, &stalled_nodes)).unwrap();
    std::fs::write(&moving_answer, answer_for(moving_pids, &job_nodes(moving))).unwrap();

    let out = hang(stalled);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let want = format!(
        "rank 1 ({}, task 1, pid {}) is 1 AllReduce behind the other 1 and has not moved in 1 s",
        stalled_nodes[1], pids[1]
    );
    assert!(stdout.contains(&want), "want {want:?} in:\n{stdout}");
    assert!(
        stdout.contains("communicator 0x1ec60967e0c6312c (2 ranks, 2 answered; AllReduce 8-9)"),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).contains("2 time(s), 1 s apart"),
        "{}",
        text(&out.stderr)
    );

    let out = hang(moving);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("no hang: counts advance"), "{stdout}");

    let wrap = "srun -N1 sleep 60";
    let out = run(slurm_command("sbatch")
        .args(["-N1", "-o", "/dev/null", "--wrap", wrap])
        .env("NCCL_RAS_ADDR", format!("127.0.0.1:{}", base + 2)));
    assert_ok(&out, "sbatch a job without RAS");
    let quiet = submitted(&out);
    let stdout = hang_once_its_step_runs(quiet, base + 2);
    assert!(
        stdout.contains(&format!("127.0.0.1:{}: no NCCL RAS answers", base + 2))
            && stdout.contains("NCCL_RAS_ADDR"),
        "{stdout}"
    );
    for job in [stalled, moving, quiet] {
        let _ = run(slurm_command_as(Who::Root, "scancel").arg(job.to_string()));
    }
}

/// Security review T1, as two ordinary users: the other user's job holds a RAS port on
/// node1 first, and its process claims to be the user's job (`SLURM_JOB_ID` and
/// `NCCL_RAS_ADDR` in its environment name the user's job and port: a decoy); the test
/// user's job on node1 names the same port and has no RAS of its own. Neither the user's
/// `hang` nor root's may take the decoy's answer for the job's: the agent finds the job's
/// processes from `scontrol listpids`, sees that the socket on the port belongs to none of
/// them, and says the port is not the job's (exit 3, no diagnosis).
#[test]
fn hang_takes_no_answer_from_another_users_decoy_on_the_jobs_port() {
    let _guard = cluster();
    let dir = fresh_temp_dir("hang-squat");
    let port = 31_000 + (std::process::id() % 1_000) as u16;
    // The decoy takes the next job id, the user's job the one after it: the decoy claims it.
    let victim = next_job_id() + 1;
    let decoy = other_users_listener_on_node1(
        &dir,
        &format!("127.0.0.1:{port}"),
        &format!("env SLURM_JOB_ID={victim}"),
        90,
    );
    let out = run(slurm_command("sbatch")
        .args(["-N1", "-w", "node1", "--oversubscribe", "-o", "/dev/null"])
        .args(["--wrap", "srun -N1 sleep 90"])
        .env("NCCL_RAS_ADDR", format!("127.0.0.1:{port}")));
    assert_ok(&out, "sbatch the user's job");
    assert_eq!(
        submitted(&out),
        victim,
        "another job was submitted meanwhile"
    );
    for who in [Who::User, Who::Root] {
        let stdout = hang_once_its_step_runs_as(who, victim, port);
        assert!(
            stdout.contains(&format!("the port is not job {victim}'s")),
            "{who:?}: {stdout}"
        );
        assert!(
            !stdout.contains("communicator 0x"),
            "{who:?}: a diagnosis from the decoy: {stdout}"
        );
    }
    for job in [decoy, victim] {
        let _ = run(slurm_command_as(Who::Root, "scancel").arg(job.to_string()));
    }
}

/// A job of [`OTHER_USER`] on node1: a RAS stand-in listening on `addr` (its
/// `NCCL_RAS_ADDR`) for `seconds`, started through `prefix` (e.g. `env SLURM_JOB_ID=N`, a
/// decoy's claim); its id, once it listens. Its answer names node1 and node2, and must never
/// be read.
fn other_users_listener_on_node1(dir: &Path, addr: &str, prefix: &str, seconds: u32) -> u32 {
    let answer = dir.join("squatter.txt");
    std::fs::write(&answer, answer_for([1, 2], &job_nodes_default())).unwrap();
    let pids = dir.join("squatter-pids");
    std::fs::create_dir_all(&pids).unwrap();
    give_to(&pids, OTHER_USER);
    let wrap = format!(
        "srun -N1 -w node1 {prefix} {} --answer {} --pid-dir {} --seconds {seconds}",
        workspace_bin("nccl-ras-standin").display(),
        answer.display(),
        pids.display()
    );
    let out = run(slurm_command_as(Who::Other, "sbatch")
        .args(["-N1", "-w", "node1", "--oversubscribe", "-o", "/dev/null"])
        .args(["--wrap", &wrap])
        .env("NCCL_RAS_ADDR", addr));
    assert_ok(&out, "sbatch the other user's listener");
    let job = submitted(&out);
    let start = Instant::now();
    while !pids.join("pid-0").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the other user's listener (job {job}) did not listen within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    job
}

/// The id the next submitted job gets.
fn next_job_id() -> u32 {
    let config = run(slurm_command("scontrol").args(["show", "config"]));
    text(&config.stdout)
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("NEXT_JOB_ID")?
                .trim()
                .strip_prefix('=')
        })
        .and_then(|v| v.trim().parse().ok())
        .expect("scontrol show config names NEXT_JOB_ID")
}

/// The job id `sbatch` printed.
fn submitted(out: &std::process::Output) -> u32 {
    text(&out.stdout)
        .split_whitespace()
        .last()
        .and_then(|w| w.parse().ok())
        .expect("sbatch prints the job id")
}

/// The recorded answer's hosts as node1 and node2 (for a squatter's answer, whose content
/// does not matter: it must never be read).
fn job_nodes_default() -> [String; 2] {
    ["node1".to_string(), "node2".to_string()]
}

/// Security review T1, the pre-emption: before the test user's job starts, the other
/// user's job listens on node1 on the port `[ras]` gives that job (a socket that shares its port with
/// nobody). The job's tasks on node1 then listen on the next free port of the range, and
/// those on node2 on the job's own; each task's GPUDIRECT_RAS_ADDR names its own, which is
/// where `gpudirect hang` asks. Without the move the job's NCCL on node1 would run without
/// RAS.
#[test]
fn a_ras_port_another_user_took_first_moves_the_job_there_to_the_next_free_one() {
    let _guard = cluster();
    let dir = fresh_temp_dir("hang-preempt");
    // The squatter takes the next id; the user's job the one after it.
    let next = next_job_id();
    let ras = gpudirect_core::config::RasSettings::default();
    let candidates = ras.candidates(next + 1, 2);
    let (own, moved) = (&candidates[0], &candidates[1]);

    let squatter = other_users_listener_on_node1(&dir, own, "", 60);
    assert_eq!(squatter, next, "another job was submitted meanwhile");

    let (output, tasks) = srun_env(
        &[
            "-N2",
            "-w",
            "node1,node2",
            "--oversubscribe",
            "--gpudirect=tcpx",
        ],
        &[],
    );
    let _ = run(slurm_command_as(Who::Root, "scancel").arg(squatter.to_string()));
    assert_ok(&output, "the user's job");
    assert_eq!(tasks.len(), 2, "{}", text(&output.stderr));
    for env in tasks.values() {
        let node = env["SLURMD_NODENAME"].as_str();
        let want = if node == "node1" { moved } else { own };
        assert_eq!(env.get("NCCL_RAS_ADDR"), Some(want), "{node}: {env:?}");
        assert_eq!(env.get("GPUDIRECT_RAS_ADDR"), Some(want), "{node}: {env:?}");
    }
}
