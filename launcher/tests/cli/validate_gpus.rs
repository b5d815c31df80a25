//! `gpudirect validate --gpus`: this host's GPU groups as the units, no Slurm. The nccl-tests
//! binary is the stand-in (replays of real 2xH200 recordings, a GPU slowed by a competing
//! load for the slow one); what is tested is the pairing, launching and judging around it.

use std::path::PathBuf;
use std::process::Command;

use tempfile::TempDir;

use crate::common::{assert_stderr_contains, gpudirect_without, run, scratch, stderr, stdout};

/// A scratch folder whose `all_reduce_perf` is the stand-in, and where validate writes
/// its history.
struct Standin {
    dir: TempDir,
}

impl Standin {
    fn new(name: &str) -> Standin {
        let dir = scratch("validate-gpus", name);
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_nccl-tests-standin"),
            dir.path().join("all_reduce_perf"),
        )
        .expect("link the stand-in");
        Standin { dir }
    }

    /// The history file validate writes.
    fn db(&self) -> PathBuf {
        self.dir.path().join("history.sqlite")
    }

    fn validate(&self, args: &[&str]) -> Command {
        let mut cmd = gpudirect_without(&[
            "SLURM_JOB_NODELIST",
            "SLURM_JOB_ID",
            "STANDIN_SLOW_NODES",
            "STANDIN_SLOW_GPUS",
            "CUDA_VISIBLE_DEVICES",
            "GPUDIRECT_CLUSTER",
        ]);
        cmd.env("GPUDIRECT_DB", self.db())
            .args(["validate", "--floor", "300", "-b", "8", "-e", "8G"])
            .arg("--nccl-tests-dir")
            .arg(self.dir.path())
            .args(args);
        cmd
    }
}

/// The verdict line of one unit in the summary.
fn verdict_of<'a>(summary: &'a str, unit: &str) -> &'a str {
    summary
        .lines()
        .find(|l| l.split_whitespace().next() == Some(unit))
        .unwrap_or_else(|| panic!("no line for {unit} in:\n{summary}"))
}

#[test]
fn a_slowed_gpu_is_named_and_nothing_else() {
    let standin = Standin::new("slow");
    let out = run(standin
        .validate(&["--gpus", "0-7"])
        .env("STANDIN_SLOW_GPUS", "5"));
    let summary = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "degraded\n{summary}{}",
        stderr(&out)
    );
    assert!(
        summary.starts_with("validation: 8 GPU units of "),
        "{summary}"
    );
    assert!(
        verdict_of(&summary, "gpu5").contains("slow node"),
        "{summary}"
    );
    for healthy in ["gpu0", "gpu1", "gpu2", "gpu3", "gpu4", "gpu6", "gpu7"] {
        assert!(
            verdict_of(&summary, healthy).contains("healthy"),
            "{healthy}\n{summary}"
        );
    }
    // Every pair ran here on its own two GPUs; round 1 ran four of them at once (the
    // scenario of issue 8 on an 8-GPU host).
    let log = stderr(&out);
    assert!(
        log.contains("round 1 (Screen): 4 group(s) at once"),
        "{log}"
    );
    assert!(log.contains("gpu4+gpu5: 162.91 GB/s (slow)"), "{log}");

    // The units are the runs' nodes: the per-node history shows gpu5 slow in every round.
    let db = standin.db();
    let mut history = gpudirect_without(&["GPUDIRECT_DB"]);
    history
        .arg("--db")
        .arg(&db)
        .args(["history", "--node", "gpu5"]);
    let out = run(&mut history);
    let shown = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    for round in ["round 1", "round 2", "round 3"] {
        let line = shown.lines().find(|l| l.contains(round));
        assert!(
            line.is_some_and(|l| l.ends_with("slow")),
            "{round}\n{shown}"
        );
    }
}

#[test]
fn clean_gpus_pass_in_one_round() {
    let standin = Standin::new("clean");
    let out = run(&mut standin.validate(&["--gpus", "0,1,2,3"]));
    let summary = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}{}", stderr(&out));
    assert!(summary.contains(", 1 round(s),"), "{summary}");
    assert_eq!(summary.matches(" healthy ").count(), 4, "{summary}");
    // Pairs run on one algorithm (issue #18), recorded with each run, and said.
    assert_stderr_contains(&out, "every run with NCCL_ALGO=Ring");
    let show = run(gpudirect_without(&["GPUDIRECT_DB"])
        .arg("--db")
        .arg(standin.db())
        .args(["show", "1", "--json"]));
    let shown: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["env"]["NCCL_ALGO"], "Ring", "{shown}");
    // `--algo default` leaves it to NCCL; the user's own NCCL_ALGO is kept.
    let out = run(&mut standin.validate(&["--gpus", "0,1", "--algo", "default"]));
    assert_stderr_contains(&out, "NCCL chooses the algorithm (--algo default)");
    let out = run(standin
        .validate(&["--gpus", "0,1"])
        .env("NCCL_ALGO", "Tree"));
    assert_stderr_contains(&out, "NCCL_ALGO=Tree from the environment is kept");
    // The report says what the pairs were judged against.
    let report = standin.dir.path().join("report");
    let out = run(&mut standin.validate(&["--gpus", "0,1", "--report", report.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let html = std::fs::read_to_string(report.join("index.html")).unwrap();
    assert!(
        html.contains("validation threshold 300.00 GB/s at 8G"),
        "{}",
        &html[..html.len().min(3000)]
    );
}

#[test]
fn units_of_two_gpus_are_named_by_their_range() {
    // Units of 2 make pairs of 4 GPUs (-g 4), which nothing recorded: every pair fails,
    // and the failure names the units, which is what this checks. The list's order is
    // kept: 0,4,1,5 makes the units 0+4 and 1+5.
    let out =
        run(&mut Standin::new("order").validate(&["--gpus", "0,4,1,5", "--gpus-per-unit", "2"]));
    let summary = stdout(&out);
    assert!(
        summary.contains("gpu0.4") && summary.contains("gpu1.5"),
        "{summary}"
    );
    let out = run(&mut Standin::new("units").validate(&["--gpus", "0-7", "--gpus-per-unit", "2"]));
    let summary = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{summary}{}", stderr(&out));
    for unit in ["gpu0-1", "gpu2-3", "gpu4-5", "gpu6-7"] {
        assert!(
            verdict_of(&summary, unit).contains("failed"),
            "{unit}\n{summary}"
        );
    }
}

/// Inside a job that was given GPUs 4-7, `--gpus 0-3` means those four, as device 0
/// means the first visible GPU to any CUDA program: never someone else's GPUs 0-3.
#[test]
fn gpu_indices_follow_an_inherited_cuda_visible_devices() {
    let out = run(Standin::new("visible")
        .validate(&["--gpus", "0-3"])
        .env("CUDA_VISIBLE_DEVICES", "4,5,6,7")
        .env("STANDIN_SLOW_GPUS", "6"));
    let summary = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{summary}{}", stderr(&out));
    assert!(
        verdict_of(&summary, "gpu2").contains("slow node"),
        "{summary}"
    );
    assert_stderr_contains(
        &out,
        "CUDA_VISIBLE_DEVICES=4,5,6,7 is set: --gpus 0-3 indexes it",
    );
    let out = run(Standin::new("visible")
        .validate(&["--gpus", "0-4"])
        .env("CUDA_VISIBLE_DEVICES", "4,5,6,7"));
    assert_eq!(out.status.code(), Some(3));
    assert_stderr_contains(
        &out,
        "there is no GPU 4: 4 visible (CUDA_VISIBLE_DEVICES=4,5,6,7)",
    );
}

#[test]
fn bad_gpu_lists_and_options_are_refused_with_the_fix() {
    let cases: [(&[&str], &str); 12] = [
        (
            &["--gpus", "0-x"],
            "--gpus 0-x: `0-x` is not a GPU index or range",
        ),
        (&["--gpus", "3-1"], "range `3-1` runs backwards"),
        (&["--gpus", "0,1,1"], "GPU 1 is named twice"),
        (&["--gpus", "0-3", "-G", "8"], "cannot be used with"),
        (
            &["--gpus", "0-3", "--report", "/proc/no/such"],
            "--report /proc/no/such: cannot create",
        ),
        (
            &["--gpus", "0"],
            "makes 1 unit(s) of 1 GPU(s), it needs 2 or more",
        ),
        (
            &["--gpus", "0-2", "--gpus-per-unit", "2"],
            "do not split into units of 2",
        ),
        (&["--gpus", "0-3", "--drain"], "--drain drains Slurm nodes"),
        (&["--gpus", "0-3", "--resume"], "--resume returns them"),
        (
            &["--gpus", "0-3", "--retries", "2"],
            "--retries N re-tests nodes before --drain drains them",
        ),
        (&["--gpus", "0-3", "--on-drain", "/bin/true"], "--drain"),
        (
            &["--gpus", "0-3", "--gpudirect", "tcpx"],
            "--gpudirect applies to srun steps",
        ),
    ];
    for (args, expected) in cases {
        let out = run(&mut Standin::new("bad").validate(args));
        assert_eq!(out.status.code(), Some(3), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(expected),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // A usage error is "could not run" (3) for every command: 2 means "runs failed".
    let out = run(&mut Standin::new("usage").validate(&["--no-such-flag"]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let out = run(gpudirect_without(&[]).args(["history", "--no-such-flag"]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // The old fraction form of --tolerance is refused, not read as 0.1 %.
    let out = run(&mut Standin::new("fraction").validate(&["--gpus", "0,1", "--tolerance", "0.1"]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_stderr_contains(&out, "write 10 for 10 %");

    // Without --gpus and outside an allocation, the error says both ways.
    let out = run(&mut Standin::new("no-alloc").validate(&[]));
    assert_stderr_contains(&out, "or pass --gpus to validate this host's GPUs");
}
