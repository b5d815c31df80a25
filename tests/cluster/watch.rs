//! `gpudirect watch JOBID` on the local cluster. The job's tasks are STAND-INs for ranks of
//! a training job: each copies the file one rank wrote on a lent GPU host (an NCCL Inspector
//! dump or the connection profiler's timings, from tests/fixtures/nccl-inspector: see
//! [`Recorded`]; a replay, no NCCL here) into the dump folder the plugin made for the job,
//! then waits. Everything
//! else is real: the plugin's `[watch]`, `srun --jobid` into the running job, the agent, and
//! a second ordinary user (gdtestuser2) who may neither watch the job nor read its folder.

use std::path::Path;
use std::time::{Duration, Instant};

use cluster_tests::*;

#[test]
fn watch_names_the_late_rank_of_a_running_job_from_its_nodes_folders() {
    let _guard = cluster();
    let (_swap, inspector) = watch_config(1000);
    // Task i copies rank i's recorded dump (node<i+1>-pid*.log) into its folder.
    let (job, _cancel) = stand_in_ranks(LATE2, r#"cp "$src" "$d"/"#);
    let folder = format!("/tmp/gpudirect-watch-{job}");

    let bin = workspace_bin("gpudirect");
    let watch = |who: Who| {
        run(slurm_command_as(who, bin.to_str().unwrap())
            .args(["watch", &job.to_string(), "--window", "1h"])
            .env("GPUDIRECT_CONFIG", plugin_config()))
    };
    // As the job's user. (Root is refused a step inside another user's job by this
    // cluster's Slurm 22.05, "Access/permission denied": root reads a node's folder with
    // `--dumps` instead, which the CLI tests cover.)
    let out = watch(Who::User);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}\n{}", stderr(&out));
    assert!(text.contains("3 of 3 ranks wrote samples"), "{text}");
    assert!(text.contains("LATE: rank 2 on node3"), "{text}");

    // Another user can neither watch the job nor read its folder (0700, the job user's).
    let out = watch(Who::Other);
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("you may watch only your own jobs"),
        "{}",
        stderr(&out)
    );
    let listed = run(slurm_command_as(Who::Other, "ls").arg(&folder));
    assert!(
        !listed.status.success(),
        "gdtestuser2 listed {folder}: {}",
        stdout(&listed)
    );
    let out = run(
        slurm_command_as(Who::Other, bin.to_str().unwrap()).args(["watch", "--dumps", &folder])
    );
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );

    // A folder others may enter is not the job's to trust: not read, and nothing to judge.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = watch(Who::User);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("not to the job's user"),
        "{}",
        stderr(&out)
    );

    // The folder goes with the job: slurmd's Epilog (the shipped wrapper, `gpudirect
    // epilog`) removes it on the node when the job ends.
    assert_ok(
        &run(slurm_command("scancel").arg(job.to_string())),
        "scancel the stand-in ranks",
    );
    let start = Instant::now();
    while Path::new(&folder).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{folder} is still there 60 s after the job was cancelled: the Epilog did not remove it (see {}/log/epilog-node1.log)",
            state_dir().display()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    std::fs::remove_file(&inspector).unwrap();
}

/// Bad dumps through the real agent step: a rank whose dump was cut mid-record, one whose
/// file is 1 GiB (sparse, the recorded dump at its end) and one that never wrote. Each is
/// said with its outcome, and the job is still judged from what could be read.
#[test]
fn watch_says_what_it_made_of_a_cut_a_huge_and_a_missing_dump() {
    let _guard = cluster();
    let (_swap, inspector) = watch_config(1000);
    // Rank 0: the first half of its dump, a record cut mid-way, then its last five records
    // (a writer that died mid-record and a second that went on: a cut record that is the
    // file's last, without its newline, is a write in progress, left for the next read).
    // Rank 1: 1 GiB of nothing, then its dump. Rank 2: nothing at all.
    let (job, _cancel) = stand_in_ranks(
        LATE2,
        r#"case $SLURM_PROCID in
         0) { head -c $(($(wc -c <"$src") / 2)) "$src"; echo; tail -n 5 "$src"; } >"$d/node1-pid1.log" ;;
         1) truncate -s 1G "$d/node2-pid2.log" && cat "$src" >>"$d/node2-pid2.log" ;;
         esac"#,
    );

    let out = run(slurm_command(workspace_bin("gpudirect").to_str().unwrap())
        .args(["watch", &job.to_string(), "--window", "1h"])
        .env("GPUDIRECT_CONFIG", plugin_config()));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}\n{}", stderr(&out));
    assert!(
        text.contains("node2-pid2.log: 1073") && text.contains("its newest 16777216 read"),
        "the 1 GiB file is read from its newest 16 MiB, and said so:\n{text}"
    );
    assert!(
        text.contains("node1-pid1.log: 1 line(s) not read")
            && text.contains("not an Inspector record"),
        "the cut record is said:\n{text}"
    );
    assert!(text.contains("SILENT"), "rank 2 wrote nothing:\n{text}");
    std::fs::remove_file(&inspector).unwrap();
}

/// The slow NIC through the real agent step: four STAND-IN ranks put the connection
/// profiler's `.links` files recorded on the lent H100 (node3's eth1 slowed both ways) in the
/// job's folder; the user's `watch JOB` names rank 2, node3 and its eth1.
#[test]
fn watch_names_the_slow_nic_of_a_running_job_from_its_connection_timings() {
    let _guard = cluster();
    let (_swap, inspector) = watch_config(1000);
    let (job, _cancel) = stand_in_ranks(SLOW_BOTH, r#"cp "$src" "$d"/"#);
    let out = run(slurm_command(workspace_bin("gpudirect").to_str().unwrap())
        .args(["watch", &job.to_string(), "--window", "6s"])
        .env("GPUDIRECT_CONFIG", plugin_config()));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}\n{}", stderr(&out));
    assert!(
        text.contains("SLOW CONNECTION: rank 2 on node3, its NIC eth1"),
        "{text}"
    );
    std::fs::remove_file(&inspector).unwrap();
}

/// The other verdicts through the real agent step, from STAND-IN ranks replaying recordings:
/// two ranks' clean Inspector dumps (the lent H200) say nothing is wrong, exit 0; four
/// ranks' clean connection timings (the lent H100, call B) say the connections are healthy;
/// and the timings of a job whose rank 2 was late by 50 ms a step (call B) keep its
/// connections healthy, for a late rank is not the network's fault.
#[test]
fn watch_says_nothing_is_wrong_of_clean_dumps_and_keeps_a_late_ranks_connections_healthy() {
    let _guard = cluster();
    let (_swap, inspector) = watch_config(1000);
    let watch = |job: u32| {
        let out = run(slurm_command(workspace_bin("gpudirect").to_str().unwrap())
            .args(["watch", &job.to_string(), "--window", "1h"])
            .env("GPUDIRECT_CONFIG", plugin_config()));
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{text}\n{}", stderr(&out));
        text
    };
    {
        let (job, _cancel) = stand_in_ranks(CLEAN, r#"cp "$src" "$d"/"#);
        let text = watch(job);
        assert!(text.contains("2 of 2 ranks wrote samples"), "{text}");
        assert!(text.contains("nothing wrong: no rank is late"), "{text}");
    }
    for recorded in [LINKS_CLEAN, LINKS_LATE2] {
        let (job, _cancel) = stand_in_ranks(recorded, r#"cp "$src" "$d"/"#);
        let text = watch(job);
        assert!(text.contains("connections healthy"), "{text}");
        assert!(!text.contains("SLOW"), "{text}");
    }
    std::fs::remove_file(&inspector).unwrap();
}

/// Recorded ranks: the fixture folder under tests/fixtures/nccl-inspector, how many ranks
/// it holds, and the kind of file each rank wrote (`node<rank+1>-pid*.<kind>`).
struct Recorded(&'static str, u32, &'static str);
/// Three ranks' Inspector dumps, rank 2 50 ms late (the lent H200).
const LATE2: Recorded = Recorded("three-ranks-late2", 3, "log");
/// Four ranks' connection timings, node3's eth1 slowed both ways (the lent H100, call B).
const SLOW_BOTH: Recorded = Recorded("links-node3-eth1-slow-both", 4, "links");
/// Two ranks' Inspector dumps of a clean job (the lent H200).
const CLEAN: Recorded = Recorded("clean", 2, "log");
/// Four ranks' connection timings of a clean job (the lent H100, call B).
const LINKS_CLEAN: Recorded = Recorded("links-clean", 4, "links");
/// Four ranks' connection timings of a job whose rank 2 was 50 ms late a step (call B).
const LINKS_LATE2: Recorded = Recorded("links-late-rank2", 4, "links");

/// STAND-IN ranks of a job on node1 that asked for telemetry, one per recorded rank, each
/// running `task` (shell, with `$d` its dump folder and `$src` the file its rank wrote on
/// the GPU host), then waiting 90 s. Returns once every rank has run its task: the job and
/// its cancel-on-drop.
fn stand_in_ranks(recorded: Recorded, task: &str) -> (u32, Cancel) {
    let Recorded(fixture, ranks, kind) = recorded;
    let dumps = shared_dir().join(format!("inspector-{fixture}"));
    share(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/nccl-inspector")
            .join(fixture),
        &dumps,
    );
    let script = format!(
        "d=\"$NCCL_INSPECTOR_DUMP_DIR\"; src=$(ls {}/node$((SLURM_PROCID + 1))-pid*.{kind}); {task}; touch \"$d/.rank$SLURM_PROCID\"; sleep 90",
        dumps.display()
    );
    assert!(!script.contains('\''), "the task goes inside single quotes");
    let wrap = format!("srun -n{ranks} sh -c '{script}'");
    let out = run(slurm_command("sbatch")
        .args([
            "--parsable",
            "-N1",
            &format!("-n{ranks}"),
            "-w",
            "node1",
            "--gpudirect=tcpx",
            "-o",
            "/dev/null",
        ])
        .args(["--wrap", &wrap])
        .env("GPUDIRECT_WATCH", "1"));
    assert_ok(&out, "sbatch the stand-in ranks");
    let job: u32 = parsable_job_id(&out);
    let cancel = Cancel(job);
    let folder = format!("/tmp/gpudirect-watch-{job}");
    let start = Instant::now();
    while (0..ranks).any(|rank| !Path::new(&format!("{folder}/.rank{rank}")).exists()) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{folder}: the stand-in ranks never got ready"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    (job, cancel)
}

/// Cancels the job when dropped, also when the test fails.
struct Cancel(u32);

impl Drop for Cancel {
    fn drop(&mut self) {
        let _ = slurm_command_as(Who::Root, "scancel")
            .arg(self.0.to_string())
            .output();
        let _ = std::fs::remove_dir_all(format!("/tmp/gpudirect-watch-{}", self.0));
    }
}
