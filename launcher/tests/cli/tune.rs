//! `gpudirect tune --gpus`: this host's GPUs, no Slurm. The nccl-tests binary is the
//! stand-in, replaying the 2xH200 sweep of `h200x2-tuning/` (7 settings x 3 rounds, each
//! round replayed in turn with STANDIN_CYCLE_DIR so the recorded noise is there); what is
//! tested is the plan, the interleaving, the noise rule, the budget, the overlay and
//! resume around it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::common::{gpudirect_without, run, scratch, stderr, stdout};

/// The knobs the recordings cover (the default's NCCL_ALGO is Ring on this machine).
const RECORDED_KNOBS: [&str; 8] = [
    "--knob",
    "NCCL_ALGO=Ring,Tree",
    "--knob",
    "NCCL_PROTO=Simple,LL128",
    "--knob",
    "NCCL_MIN_NCHANNELS=32",
    "--knob",
    "NCCL_BUFFSIZE=8388608",
];

/// A scratch folder whose `all_reduce_perf` is the stand-in, with its turn counters and
/// the history.
struct Standin {
    dir: TempDir,
}

impl Standin {
    fn new(name: &str) -> Standin {
        let dir = scratch("tune", name);
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_nccl-tests-standin"),
            dir.path().join("all_reduce_perf"),
        )
        .expect("link the stand-in");
        std::fs::create_dir(dir.path().join("turns")).expect("turns folder");
        Standin { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `gpudirect tune --gpus 0,1` with the recorded sizes and iterations; `args` go
    /// before the nccl-tests arguments.
    fn tune(&self, args: &[&str]) -> Command {
        let mut cmd = gpudirect_without(&[
            "SLURM_JOB_NODELIST",
            "SLURM_JOB_ID",
            "CUDA_VISIBLE_DEVICES",
            "GPUDIRECT_CLUSTER",
            "STANDIN_SECONDS",
            "NCCL_ALGO",
            "NCCL_PROTO",
            "NCCL_MIN_NCHANNELS",
            "NCCL_BUFFSIZE",
        ]);
        cmd.env("GPUDIRECT_DB", self.path("history.sqlite"))
            .env("STANDIN_CYCLE_DIR", self.path("turns"))
            .args(["tune", "--gpus", "0,1", "-b", "1M", "-e", "4G", "-f", "4"])
            .arg("--nccl-tests-dir")
            .arg(self.dir.path())
            .args(args)
            .args(["--", "-c", "1", "-n", "20", "-w", "5"]);
        cmd
    }

    /// `gpudirect history --label ID --json`, oldest first: (variant, status) per run.
    fn runs_of(&self, id: &str) -> Vec<(String, String)> {
        let out = run(gpudirect_without(&["GPUDIRECT_DB"])
            .env("GPUDIRECT_DB", self.path("history.sqlite"))
            .args(["history", "--label", id, "--limit", "0", "--json"]));
        assert!(out.status.success(), "{}", stderr(&out));
        let runs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let mut rows: Vec<(i64, String, String)> = runs
            .as_array()
            .expect("a list")
            .iter()
            .map(|r| {
                (
                    r["id"].as_i64().unwrap_or_default(),
                    r["variant"].as_str().unwrap_or_default().to_string(),
                    r["status"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        rows.sort();
        rows.into_iter().map(|(_, v, s)| (v, s)).collect()
    }
}

/// The line of `setting` in `band` in the per-candidate list of a phase's output.
fn call_line<'a>(out: &'a str, phase: &str, band: &str, setting: &str) -> &'a str {
    let start = out
        .find(&format!("all_reduce {phase} ("))
        .unwrap_or_else(|| panic!("no {phase} in:\n{out}"));
    out[start..]
        .lines()
        .find(|l| {
            let l = l.trim_start();
            l.starts_with(band) && l[band.len()..].split_whitespace().next() == Some(setting)
        })
        .unwrap_or_else(|| panic!("no line for {setting} in {band} of {phase}:\n{out}"))
}

#[test]
fn the_sweep_finds_the_recorded_winner_and_writes_an_overlay_profiles_check_accepts() {
    let standin = Standin::new("sweep");
    let overlay = standin.path("tuned.toml");
    let mut args: Vec<&str> = RECORDED_KNOBS.to_vec();
    let overlay_arg = overlay.display().to_string();
    args.extend(["--tune-id", "sweep1", "--write", &overlay_arg]);
    let out = run(&mut standin.tune(&args));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));

    // Phase 1: 7 settings x 3 rounds, interleaved with the order rotated each round.
    let runs = standin.runs_of("sweep1");
    let phase_one: Vec<&str> = runs[..21].iter().map(|(v, _)| v.as_str()).collect();
    assert!(runs.iter().all(|(_, s)| s == "ok"), "{runs:?}");
    let settings = [
        "default",
        "NCCL_ALGO=Ring",
        "NCCL_ALGO=Tree",
        "NCCL_PROTO=Simple",
        "NCCL_PROTO=LL128",
        "NCCL_MIN_NCHANNELS=32",
        "NCCL_BUFFSIZE=8388608",
    ];
    for round in phase_one.chunks(7) {
        let mut sorted = round.to_vec();
        sorted.sort_unstable();
        let mut expected = settings.to_vec();
        expected.sort_unstable();
        assert_eq!(sorted, expected, "every setting once per round");
    }
    // 7 settings, 3 rounds: each round starts 3 settings later than the last.
    assert_eq!(phase_one[0], "default");
    assert_eq!(phase_one[7], "NCCL_PROTO=Simple", "round 2 starts 3 later");
    assert_eq!(
        phase_one[14], "NCCL_BUFFSIZE=8388608",
        "round 3 starts 6 later"
    );

    // The noise rule on the recorded rounds: Ring (NCCL's own choice here) is inside the
    // noise everywhere; Tree wins the large sizes and loses the middle ones; 32 channels
    // win both bands.
    let mid = "1 MiB - 64 MiB";
    let large = ">= 64 MiB";
    for band in [mid, large] {
        assert!(
            call_line(&text, "phase 1", band, "NCCL_ALGO=Ring").ends_with("within the noise"),
            "{text}"
        );
        assert!(
            call_line(&text, "phase 1", band, "NCCL_MIN_NCHANNELS=32").ends_with("wins"),
            "{text}"
        );
    }
    assert!(call_line(&text, "phase 1", mid, "NCCL_ALGO=Tree").ends_with("loses"));
    assert!(call_line(&text, "phase 1", large, "NCCL_ALGO=Tree").ends_with("wins"));
    assert!(
        text.contains("all_reduce phase 2 ("),
        "two winners combine:\n{text}"
    );
    assert_eq!(
        runs.len(),
        27,
        "phase 2: the default and one pair, 3 rounds"
    );

    // The overlay holds the size-independent winner only, and says why Tree is not in it.
    let written = std::fs::read_to_string(&overlay).expect("the overlay");
    assert!(
        written.contains("[profiles.tuned.env]\nNCCL_MIN_NCHANNELS = \"32\"\n"),
        "{written}"
    );
    assert!(!written.contains("NCCL_ALGO = "), "{written}");
    assert!(
        written.contains("# Left out: NCCL_ALGO=Tree wins"),
        "{written}"
    );

    // `profiles check --overlay` accepts it on the shipped config: no finding in the
    // overlay, and the profile it adds is named with its variable.
    let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../slurm-conf/gpudirect.toml");
    let out = run(gpudirect_without(&["GPUDIRECT_CONFIG"])
        .args(["profiles", "check", "--overlay"])
        .arg(&overlay)
        .arg("--config")
        .arg(&shipped));
    assert!(
        !stdout(&out).contains(&overlay_arg),
        "no finding in the overlay:\n{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains(&format!("{overlay_arg}:"))
            && stderr(&out).contains("profile tuned")
            && stderr(&out).contains("1 variable(s): NCCL_MIN_NCHANNELS=32"),
        "{}",
        stderr(&out)
    );
    // The one error allowed is about the checkout's config file itself: in a folder
    // others can write (a clone under /tmp) the plugin would refuse it, overlay or not.
    let errors: Vec<String> = stdout(&out)
        .lines()
        .filter(|l| l.contains(": error: "))
        .map(str::to_string)
        .collect();
    assert!(
        errors.iter().all(|e| e.contains("refusing the config")),
        "{errors:?}"
    );

    // And `gpudirect run --overlay` applies it beside the default.
    let out = run(
        gpudirect_without(&["SLURM_JOB_ID", "SLURM_JOB_NODELIST", "NCCL_MIN_NCHANNELS"])
            .env("GPUDIRECT_DB", standin.path("history.sqlite"))
            .env("CUDA_VISIBLE_DEVICES", "0,1")
            .args([
                "run",
                "--launcher",
                "local",
                "-G",
                "2",
                "-b",
                "1M",
                "-e",
                "4G",
                "-f",
                "4",
            ])
            .arg("--nccl-tests-dir")
            .arg(standin.dir.path())
            .arg("--overlay")
            .arg(&overlay)
            .args(["--", "-c", "1", "-n", "20", "-w", "5"]),
    );
    let summary = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{summary}{}", stderr(&out));
    let busbw_at_max = |variant: &str| -> f64 {
        summary
            .lines()
            .find(|l| l.contains(&format!(" {variant} ")))
            .and_then(|l| l.split_whitespace().nth(6))
            .and_then(|b| b.parse().ok())
            .unwrap_or_else(|| panic!("no busbw for {variant}:\n{summary}"))
    };
    assert!(
        busbw_at_max("tuned") > busbw_at_max("default") + 5.0,
        "{summary}"
    );
}

#[test]
fn dry_run_prints_the_plan_with_the_built_in_knobs_and_runs_nothing() {
    let standin = Standin::new("dry");
    let out = run(&mut standin.tune(&["--dry-run", "--budget", "20m"]));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    // all_reduce, no profile: ALGO (2), PROTO (2), MIN_NCHANNELS (2), BUFFSIZE (2) + default.
    assert!(
        text.contains("phase 1: 9 setting(s) x 3 rounds = 27 runs"),
        "{text}"
    );
    for setting in [
        "NCCL_ALGO=Tree",
        "NCCL_MIN_NCHANNELS=16",
        "NCCL_BUFFSIZE=2097152",
    ] {
        assert!(text.contains(setting), "{setting}: {text}");
    }
    assert!(text.contains("one run: "), "{text}");
    assert!(text.contains("-g 2"), "{text}");
    assert!(
        !standin.path("history.sqlite").exists(),
        "a dry run records nothing"
    );
}

/// Waits for the child, at most `limit`.
fn wait_at_most(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(start.elapsed() < limit, "still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_budget_is_respected_and_reported() {
    let standin = Standin::new("budget");
    // Each replay takes 0.4 s: a round of 3 settings ~1.3 s, 3 rounds ~3.9 s > 3 s.
    let started = Instant::now();
    let out = run(standin
        .tune(&[
            "--knob",
            "NCCL_ALGO=Ring,Tree",
            "--budget",
            "3s",
            "--tune-id",
            "b1",
        ])
        .env("STANDIN_SECONDS", "0.4"));
    let took = started.elapsed();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let runs = standin.runs_of("b1");
    assert!(
        (3..9).contains(&runs.len()),
        "stopped before the last round: {runs:?}"
    );
    assert!(
        text.contains("budget 3.0s: stopped before all_reduce phase 1 round"),
        "{text}"
    );
    assert!(text.contains("not judged"), "{text}");
    assert!(
        took < Duration::from_millis(3000 + 2000),
        "a round that would not fit did not start: {took:?}"
    );
}

#[test]
fn ctrl_c_keeps_the_finished_runs_and_resume_completes_the_tune() {
    let standin = Standin::new("resume");
    let knobs = ["--knob", "NCCL_ALGO=Ring,Tree", "--tune-id", "r1"];
    let mut child = standin
        .tune(&knobs)
        .env("STANDIN_SECONDS", "0.3")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tune");
    // Let a few runs finish, then Ctrl-C (SIGINT to the launcher alone, as a terminal's
    // would reach the process group; the runner forwards it to its child).
    wait_for_runs(&standin.path("history.sqlite"), &standin, "r1", 3);
    let signal = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(signal.success());
    let status = wait_at_most(&mut child, Duration::from_secs(30));
    let output = child.wait_with_output().expect("output");
    assert_eq!(status.code(), Some(130), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("continue with --resume r1"),
        "{}",
        stderr(&output)
    );
    let kept = standin.runs_of("r1");
    let finished = kept.iter().filter(|(_, s)| s == "ok").count();
    assert!((3..9).contains(&finished), "{kept:?}");

    let mut resume: Vec<&str> = knobs[..2].to_vec();
    resume.extend(["--resume", "r1"]);
    let out = run(&mut standin.tune(&resume));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("resuming r1: {finished} run(s) already recorded")),
        "{}",
        stderr(&out)
    );
    let all = standin.runs_of("r1");
    assert_eq!(
        all.iter().filter(|(_, s)| s == "ok").count(),
        9,
        "every step once: {all:?}"
    );
    assert!(
        all.iter().all(|(_, s)| s == "ok"),
        "the interrupted run was redone in its place: {all:?}"
    );
    // Other flags are another search: refused, naming the fix.
    let out = run(&mut standin.tune(&["--knob", "NCCL_ALGO=Tree", "--resume", "r1"]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("made with other flags"),
        "{}",
        stderr(&out)
    );
}

/// Polls the history until tune `id` has `n` finished runs.
fn wait_for_runs(db: &Path, standin: &Standin, id: &str, n: usize) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if db.exists()
            && standin
                .runs_of(id)
                .iter()
                .filter(|(_, s)| s == "ok")
                .count()
                >= n
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("tune {id} did not record {n} runs in 30 s");
}

#[test]
fn bad_knobs_and_sweep_files_are_refused_with_the_fix() {
    let standin = Standin::new("bad");
    let out = run(&mut standin.tune(&["--knob", "NCCL_ALGO"]));
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("write VARIABLE=VALUE,VALUE"),
        "{}",
        stderr(&out)
    );
    let sweep = standin.path("sweep.toml");
    std::fs::write(&sweep, "[knobs]\nNCCL_ALGO = \"Tree\"\n").unwrap();
    let out = run(&mut standin.tune(&["--sweep", &sweep.display().to_string()]));
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("sweep.toml:2"), "{}", stderr(&out));
    let out = run(&mut standin.tune(&["--rounds", "2"]));
    assert_eq!(out.status.code(), Some(3), "at least three rounds");
}

/// Issue #33: on one GPU every setting's busbw is 0 (a world of one rank moves nothing
/// between GPUs): tune refuses before it runs anything, and says what it needs.
#[test]
fn one_gpu_is_refused_before_anything_runs() {
    let standin = Standin::new("one-gpu");
    let mut cmd =
        gpudirect_without(&["SLURM_JOB_NODELIST", "SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES"]);
    cmd.env("GPUDIRECT_DB", standin.path("history.sqlite"))
        .args([
            "tune",
            "--gpus",
            "0",
            "-c",
            "all_reduce",
            "--nccl-tests-dir",
        ])
        .arg(standin.dir.path());
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("make one rank, whose busbw is 0") && err.contains("--gpus 0,1"),
        "{err}"
    );
    assert!(
        !standin.path("history.sqlite").exists(),
        "nothing ran, nothing was recorded"
    );
}
