//! One cell run end to end, the tail that `run`, `tune`, `validate` and `health` share:
//!
//! ```text
//! Spec { cell, matrix, launch, expect, context, marks }
//!   -> prepare   (launch::prepare: the command line; the run's env, variant and GPUs)
//!   -> Prepared  (a placeholder record can be written now: --resume finds it)
//!   -> execute   (runner::run, then cell::evaluate_finished)
//!   -> Executed  -> record() or replace(placeholder)
//! ```
//!
//! Before this module each command built its own `RunContext` around
//! `evaluate_finished`, and the copies differed: `validate` left the `--gpudirect` mode
//! out of a run's env, which `run` and `tune` put in. Now the env of every recorded run
//! is the variant's variables, then the command's marks, then `GPUDIRECT_MODE` when the
//! variant has a mode. What a command adds after the run (validate's per-node results) it
//! adds to `Executed::evaluated.record` before recording it.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

use super::start::{classify, Start, Starting, COULD_NOT_START, WHAT_TO_CHECK};
use super::{evaluate_finished, Evaluated};
use crate::checks::{Expectations, Finding};
use crate::history::{History, HistoryError, NewRun, RunId, RunProvenance, RunStatus};
use crate::launch::{self, LaunchError, LaunchOptions};
use crate::matrix::{Cell, Matrix};
use crate::nccl_output::line_shows_start;
use crate::record::RunContext;
use crate::runner::{self, Finished, StartError, INTERRUPTED};
use crate::units::now_unix;

/// Why a cell could not be run or recorded: its command, its start, or the history. The
/// one error of the loops around [`execute`](Prepared::execute) (run's cells, tune's
/// steps, health's quick test).
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    /// Its command could not be built.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// It could not be started.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The history refused its record (or its placeholder).
    #[error(transparent)]
    History(#[from] HistoryError),
}

/// The env variable a recorded run carries its `--gpudirect` mode in.
pub const MODE_ENV: &str = "GPUDIRECT_MODE";

/// What a command asks for one cell.
#[derive(Debug)]
pub struct Spec<'a> {
    /// The cell: collective, nodes, GPUs, variant.
    pub cell: &'a Cell,
    /// The sizes and limits it runs with.
    pub matrix: &'a Matrix,
    /// How it is started.
    pub launch: &'a LaunchOptions,
    /// Ask nccl-tests for a `-J` report.
    pub json_report: bool,
    /// What the output must show to be ok.
    pub expect: Expectations,
    /// What the command knows of where and how it runs (cluster, job, nodes, launcher,
    /// label, line rate); the times, the command line, the binary, the collective, the
    /// exit code and the env are filled here. A variant or GPU count given is kept (else
    /// the cell's).
    pub context: RunContext,
    /// The command's marks in the run's env (matrix id and cell, tune step), also on the
    /// placeholder.
    pub marks: BTreeMap<String, String>,
}

/// A cell ready to start.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The job, its `-J` file and its binary.
    pub launch: launch::Prepared,
    collective: String,
    expect: Expectations,
    context: RunContext,
    marks: BTreeMap<String, String>,
}

/// The command line of `spec`'s cell, and the run's context completed.
pub fn prepare(spec: Spec<'_>) -> Result<Prepared, LaunchError> {
    let launched = launch::prepare(spec.cell, spec.matrix, spec.launch, spec.json_report)?;
    Ok(Prepared::new(
        launched,
        spec.cell,
        spec.expect,
        spec.context,
        spec.marks,
    ))
}

impl Prepared {
    /// A cell whose job is already built: the env is the variant's variables, the marks,
    /// then [`MODE_ENV`] when the variant has a mode.
    pub fn new(
        launched: launch::Prepared,
        cell: &Cell,
        expect: Expectations,
        mut context: RunContext,
        marks: BTreeMap<String, String>,
    ) -> Prepared {
        let mut env = std::mem::take(&mut context.env);
        env.extend(cell.variant.env.clone());
        env.extend(marks.clone());
        if let Some(mode) = &cell.variant.gpudirect {
            env.insert(MODE_ENV.into(), mode.clone());
        }
        context.env = env;
        context
            .variant
            .get_or_insert_with(|| cell.variant.name.clone());
        context.gpus_per_node.get_or_insert(cell.gpus_per_node);
        context.command_line = Some(launched.job.command_line());
        context.binary_path = Some(launched.binary.display().to_string());
        Prepared {
            launch: launched,
            collective: cell.collective.clone(),
            expect,
            context,
            marks,
        }
    }

    /// The command line, as shown and recorded.
    pub fn command_line(&self) -> String {
        self.launch.job.command_line()
    }

    /// The record written before the cell starts, marked interrupted (`why` says so): if
    /// the launcher is killed, it stays, and `--resume` runs the cell again.
    pub fn placeholder(&self, why: &str) -> NewRun {
        NewRun {
            collective: self.collective.clone(),
            variant: self.context.variant.clone(),
            label: self.context.label.clone(),
            started_at: Some(now_unix()),
            status: RunStatus::Interrupted,
            failures: vec![why.to_string()],
            provenance: RunProvenance {
                command_line: Some(self.command_line()),
                env: self.marks.clone(),
                ..RunProvenance::default()
            },
            launcher: self.context.launcher,
            tool: self.context.tool,
            ..NewRun::default()
        }
    }

    /// Runs the cell (Ctrl-C stops it: [`INTERRUPTED`]) and evaluates what it printed.
    pub fn execute(self) -> Result<Executed, StartError> {
        self.execute_until(&INTERRUPTED)
    }

    /// [`Prepared::execute`], stopped when `cancel` is raised. A job step (srun inside an
    /// allocation) that runs past its limit is asked first what NCCL's RAS says
    /// ([`ras_snapshot`]); the verdict is kept in the run's notes, which `show` prints.
    ///
    /// A try stopped before it reached NCCL (its start-up deadline, or its timeout: see
    /// [`super::start`]) is a launch failure: the cell runs once more as a step of its own,
    /// and if that does not reach NCCL either, its record and verdict say "could not start"
    /// first ([`Executed::starting`]) and the caller charges it to no node (issue #45).
    /// A cell without a start-up deadline (health's quick test: one local process, no
    /// launch to fail) is judged on its one try, as before.
    pub fn execute_until(self, cancel: &AtomicBool) -> Result<Executed, StartError> {
        let first = self.try_once(cancel)?;
        let Start::NotReached(first_why) = self.reached(&first.finished) else {
            return Ok(self.evaluate(first, Starting::First));
        };
        if self.launch.startup_timeout.is_none() {
            return Ok(self.evaluate(first, Starting::First));
        }
        if cancel.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(self.evaluate(first, Starting::First));
        }
        crate::noteln!(
            "gpudirect: {}: did not reach NCCL ({first_why}): running it once more as a step of its own",
            self.shown_where()
        );
        let second = self.try_once(cancel)?;
        let starting = match self.reached(&second.finished) {
            Start::Reached => Starting::Second { first: first_why },
            Start::NotReached(why) => {
                crate::noteln!(
                    "gpudirect: {}: {COULD_NOT_START} ({why}, twice): charged to no node; {WHAT_TO_CHECK}",
                    self.shown_where()
                );
                Starting::CouldNotStart {
                    first: first_why,
                    second: why,
                }
            }
        };
        Ok(self.evaluate(second, starting))
    }

    /// Where the cell runs, for the lines on stderr: its nodes, else its command line.
    fn shown_where(&self) -> String {
        match self.context.nodes.is_empty() {
            true => self.command_line(),
            false => self.context.nodes.join("+"),
        }
    }

    /// Whether a try reached NCCL ([`super::start::classify`]).
    fn reached(&self, finished: &Finished) -> Start {
        classify(
            finished.outcome,
            &super::join_streams(&finished.stdout, &finished.stderr),
            self.launch.startup_timeout,
            self.launch.job.timeout,
        )
    }

    /// One try: the job run to its end, its start-up deadline (when it has one), its
    /// timeout (RAS asked first, for a job step) or `cancel`.
    fn try_once(&self, cancel: &AtomicBool) -> Result<Try, StartError> {
        let started = now_unix();
        let job_id = (self.launch.job.program == "srun")
            .then(|| crate::slurm::env_var("SLURM_JOB_ID"))
            .flatten()
            .and_then(|j| j.parse::<u32>().ok());
        let mut snapshot: Option<Vec<String>> = None;
        let mut at_deadline = || {
            if let Some(job) = job_id {
                snapshot = Some(ras_snapshot(job));
            }
        };
        let finished = match self.launch.startup_timeout {
            Some(within) => runner::run_watched(
                &self.launch.job,
                cancel,
                &mut at_deadline,
                runner::StartWatch {
                    within,
                    started: line_shows_start,
                },
            )?,
            None => runner::run_with(&self.launch.job, cancel, &mut at_deadline)?,
        };
        Ok(Try {
            finished,
            snapshot: snapshot.unwrap_or_default(),
            started,
            ended: now_unix(),
        })
    }

    /// The last try read, judged and made a record, with how the tries went.
    fn evaluate(self, last: Try, starting: Starting) -> Executed {
        let mut context = self.context;
        context.started_at = Some(last.started);
        context.finished_at = Some(last.ended);
        let mut evaluated = evaluate_finished(
            &last.finished,
            self.launch.json_path.as_deref(),
            &self.collective,
            self.expect,
            context,
        );
        if let Some(why) = starting.could_not_start() {
            let message = format!(
                "{COULD_NOT_START}: {why} (tried twice, each a step of its own): {WHAT_TO_CHECK}"
            );
            evaluated.record.failures.insert(0, message.clone());
            evaluated.verdict.findings.insert(
                0,
                Finding {
                    check: "start",
                    message,
                },
            );
        }
        evaluated.record.provenance.notes.extend(starting.note());
        evaluated.record.provenance.notes.extend(last.snapshot);
        Executed {
            finished: last.finished,
            evaluated,
            starting,
        }
    }
}

/// One try of a cell: the process, RAS's notes when it was asked, and its times.
struct Try {
    finished: Finished,
    snapshot: Vec<String>,
    started: i64,
    ended: i64,
}

/// How a RAS snapshot note begins (`show` prints notes as they are).
pub const RAS_NOTE: &str = "RAS before the timeout kill";

/// What NCCL's RAS says about job `job` now: `gpudirect hang JOB --json` (this same binary),
/// two polls 2 s apart, one note per communicator, or one saying why there is none. Bounded
/// to 45 s whatever happens.
pub fn ras_snapshot(job: u32) -> Vec<String> {
    let Ok(exe) = std::env::current_exe() else {
        return vec![format!(
            "{RAS_NOTE}: not asked (the gpudirect executable is not found)"
        )];
    };
    let hang = runner::Job {
        program: exe.into_os_string(),
        args: [
            "hang",
            &job.to_string(),
            "--polls",
            "2",
            "--interval",
            "2s",
            "--timeout",
            "3s",
            "--json",
        ]
        .into_iter()
        .map(Into::into)
        .collect(),
        env: Vec::new(),
        cwd: None,
        timeout: std::time::Duration::from_secs(45),
        grace: std::time::Duration::from_secs(2),
        user: None,
    };
    let finished = match runner::run(&hang, &AtomicBool::new(false)) {
        Ok(f) => f,
        Err(e) => return vec![format!("{RAS_NOTE}: not asked ({e})")],
    };
    ras_notes(
        &String::from_utf8_lossy(&finished.stdout),
        &String::from_utf8_lossy(&finished.stderr),
    )
}

/// The notes of a `gpudirect hang --json` answer (pure).
pub fn ras_notes(stdout: &str, stderr: &str) -> Vec<String> {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(stdout.trim()) else {
        let why = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no answer");
        return vec![format!("{RAS_NOTE}: no RAS snapshot ({})", why.trim())];
    };
    let mut notes: Vec<String> = json["communicators"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{RAS_NOTE}: communicator {} ({} ranks): {}",
                c["hash"].as_str().unwrap_or("?"),
                c["size"].as_u64().unwrap_or(0),
                c["message"].as_str().unwrap_or("?")
            )
        })
        .collect();
    if notes.is_empty() {
        let why = json["unanswered"]
            .as_object()
            .and_then(|m| {
                m.iter()
                    .next()
                    .map(|(n, w)| format!("{n}: {}", w.as_str().unwrap_or("?")))
            })
            .unwrap_or_else(|| "RAS knows no communicator".into());
        notes.push(format!("{RAS_NOTE}: no communicator ({why})"));
    }
    notes
}

/// A cell that ran: how the process ended, and its output read, judged and made a record.
#[derive(Debug)]
pub struct Executed {
    /// The process.
    pub finished: Finished,
    /// The parsed output, the checks' verdict and the record.
    pub evaluated: Evaluated,
    /// How its tries went: whether it reached NCCL, and at which try (issue #45).
    pub starting: Starting,
}

impl Executed {
    /// Stores the record as a new run (also when the same output was recorded before).
    pub fn record(&self, history: &mut History) -> Result<RunId, HistoryError> {
        Ok(history.import_run(&self.evaluated.record, true)?.run_id())
    }

    /// Stores the record in place of the cell's placeholder.
    pub fn replace(
        &self,
        history: &mut History,
        placeholder: RunId,
    ) -> Result<RunId, HistoryError> {
        history.replace_run(placeholder, &self.evaluated.record)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_hang_answer_becomes_one_note_per_communicator_or_the_reason() {
        let json = r#"{"job":"7","communicators":[{"hash":"0x1e","size":2,"message":"rank 1 (node2, task 1, pid 9) is 1 AllReduce behind"}],"unanswered":{}}"#;
        assert_eq!(
            ras_notes(json, ""),
            ["RAS before the timeout kill: communicator 0x1e (2 ranks): rank 1 (node2, task 1, pid 9) is 1 AllReduce behind"]
        );
        let none = r#"{"job":"7","communicators":[],"unanswered":{"node1":"127.0.0.1:28028: no NCCL RAS answers"}}"#;
        assert_eq!(
            ras_notes(none, ""),
            ["RAS before the timeout kill: no communicator (node1: 127.0.0.1:28028: no NCCL RAS answers)"]
        );
        assert_eq!(
            ras_notes("", "error: job 7 is COMPLETING, not RUNNING\n"),
            ["RAS before the timeout kill: no RAS snapshot (error: job 7 is COMPLETING, not RUNNING)"]
        );
    }
    use crate::cell::tests::{as_import, fixture_paths, output_facts};
    use crate::history::LaunchKind;
    use crate::matrix::Variant;
    use crate::runner::Job;

    /// A job that prints `path` as a cell prints its output.
    fn printing(path: &std::path::Path) -> launch::Prepared {
        launch::Prepared {
            job: Job {
                program: "cat".into(),
                args: vec![path.as_os_str().to_owned()],
                env: Vec::new(),
                cwd: None,
                timeout: Duration::from_secs(30),
                grace: Duration::from_secs(1),
                user: None,
            },
            json_path: None,
            binary: PathBuf::from("/opt/nccl-tests/build/all_reduce_perf"),
            startup_timeout: Some(Duration::from_secs(30)),
        }
    }

    fn cell(collective: &str, variant: Variant) -> Cell {
        Cell {
            index: 1,
            collective: collective.into(),
            nodes: 2,
            gpus_per_node: 8,
            variant,
        }
    }

    /// A job running `script` under sh, with a start-up deadline of 300 ms.
    fn hanging(script: &str) -> launch::Prepared {
        launch::Prepared {
            job: Job {
                program: "sh".into(),
                args: vec!["-c".into(), script.into()],
                env: Vec::new(),
                cwd: None,
                timeout: Duration::from_secs(30),
                grace: Duration::from_millis(200),
                user: None,
            },
            json_path: None,
            binary: PathBuf::from("/opt/nccl-tests/build/all_reduce_perf"),
            startup_timeout: Some(Duration::from_millis(300)),
        }
    }

    fn on_a_pair(job: launch::Prepared) -> Prepared {
        let plain = Variant {
            name: "validate:pairs".into(),
            gpudirect: None,
            env: BTreeMap::new(),
        };
        Prepared::new(
            job,
            &cell("all_reduce", plain),
            Expectations::default(),
            RunContext {
                nodes: vec!["node3".into(), "node4".into()],
                ..RunContext::default()
            },
            BTreeMap::new(),
        )
    }

    /// Issue #45: a cell that prints no NCCL line is stopped at its start-up deadline, run
    /// once more, and then says "could not start" first, in its verdict and its record.
    #[test]
    fn a_cell_that_never_reaches_nccl_is_tried_twice_then_could_not_start() {
        let dir = tempfile::tempdir().unwrap();
        let tries = dir.path().join("tries");
        let script = format!("echo try >> {}; sleep 30", tries.display());
        let executed = on_a_pair(hanging(&script))
            .execute_until(&AtomicBool::new(false))
            .unwrap();
        assert_eq!(std::fs::read_to_string(&tries).unwrap(), "try\ntry\n");
        assert_eq!(executed.finished.outcome, runner::Outcome::NotStarted);
        assert!(
            executed.finished.elapsed < Duration::from_secs(5),
            "{:?}",
            executed.finished.elapsed
        );
        assert_eq!(
            executed.starting.could_not_start(),
            Some("no NCCL line within its 300 ms start-up deadline")
        );
        let record = &executed.evaluated.record;
        assert!(
            record.failures[0].starts_with(
                "could not start: no NCCL line within its 300 ms start-up deadline (tried twice"
            ),
            "{:?}",
            record.failures
        );
        assert_eq!(executed.evaluated.verdict.findings[0].check, "start");
        assert!(record
            .provenance
            .notes
            .iter()
            .any(|n| n.starts_with("could not start: twice")));
    }

    /// Without a start-up deadline (health's quick test) a cell that hangs is tried once and
    /// stopped at its timeout, as before.
    #[test]
    fn without_a_start_up_deadline_a_hang_is_tried_once_and_timed_out() {
        let dir = tempfile::tempdir().unwrap();
        let tries = dir.path().join("tries");
        let mut job = hanging(&format!("echo try >> {}; sleep 30", tries.display()));
        job.startup_timeout = None;
        job.job.timeout = Duration::from_millis(300);
        let executed = on_a_pair(job)
            .execute_until(&AtomicBool::new(false))
            .unwrap();
        assert_eq!(std::fs::read_to_string(&tries).unwrap(), "try\n");
        assert_eq!(executed.finished.outcome, runner::Outcome::TimedOut);
        assert_eq!(executed.starting, Starting::First);
        assert_eq!(executed.evaluated.verdict.status, RunStatus::Timeout);
    }

    /// A first try that hangs before NCCL and a second that runs: judged on the second,
    /// with a note of the first.
    #[test]
    fn a_second_try_that_starts_is_judged_as_usual() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("tried");
        let (_, fixture) = fixture_paths()
            .into_iter()
            .find(|(name, _)| name == "h200x2-nvlink/all_reduce_g2.txt")
            .unwrap();
        let script = format!(
            "if [ -e {m} ]; then cat {f}; else touch {m}; sleep 30; fi",
            m = marker.display(),
            f = fixture.display()
        );
        let executed = on_a_pair(hanging(&script))
            .execute_until(&AtomicBool::new(false))
            .unwrap();
        assert!(
            matches!(&executed.starting, Starting::Second { first } if first.starts_with("no NCCL line")),
            "{:?}",
            executed.starting
        );
        assert_eq!(
            executed.finished.outcome,
            runner::Outcome::Exited { code: 0 }
        );
        let record = &executed.evaluated.record;
        assert!(!record
            .failures
            .iter()
            .any(|f| f.starts_with("could not start")));
        assert!(record
            .provenance
            .notes
            .iter()
            .any(|n| n.starts_with("the first try did not reach NCCL")));
    }

    /// Each command's own spec (run: matrix marks; tune: a label and a setting; validate:
    /// a pair's nodes and its GPUs; health: one local node) through the one tail: the
    /// same output gives the same rows, status, transport and findings as `import`.
    #[test]
    fn run_tune_validate_and_health_record_an_output_identically() {
        let plain = Variant {
            name: "default".into(),
            gpudirect: None,
            env: BTreeMap::new(),
        };
        let tcpx = Variant {
            name: "tcpx".into(),
            gpudirect: Some("tcpx".into()),
            env: [("NCCL_ALGO".to_string(), "Ring".to_string())].into(),
        };
        for (name, path) in fixture_paths() {
            let raw = std::fs::read(&path).unwrap();
            let collective = crate::nccl_output::parse(&raw)
                .collective
                .unwrap_or_else(|| "all_reduce".into());
            let specs: [(&str, Variant, RunContext, BTreeMap<String, String>); 4] = [
                (
                    "run",
                    tcpx.clone(),
                    RunContext {
                        launcher: LaunchKind::Srun,
                        ..RunContext::default()
                    },
                    [("GPUDIRECT_MATRIX".to_string(), "m1".to_string())].into(),
                ),
                (
                    "tune",
                    tcpx.clone(),
                    RunContext {
                        launcher: LaunchKind::Srun,
                        label: Some("t1".into()),
                        ..RunContext::default()
                    },
                    [("GPUDIRECT_TUNE_STEP".to_string(), "s1".to_string())].into(),
                ),
                (
                    "validate",
                    plain.clone(),
                    RunContext {
                        launcher: LaunchKind::Local,
                        nodes: vec!["gpu0".into(), "gpu1".into()],
                        gpus_per_node: Some(1),
                        variant: Some("validate:pairs".into()),
                        ..RunContext::default()
                    },
                    BTreeMap::new(),
                ),
                (
                    "health",
                    plain.clone(),
                    RunContext {
                        launcher: LaunchKind::Local,
                        nodes: vec!["node1".into()],
                        ..RunContext::default()
                    },
                    BTreeMap::new(),
                ),
            ];
            let as_import = as_import(&raw, &collective);
            let want = output_facts(&as_import.record);
            for (command, variant, context, marks) in specs {
                let c = cell(&collective, variant.clone());
                let prepared = Prepared::new(
                    printing(&path),
                    &c,
                    Expectations::default(),
                    context,
                    marks.clone(),
                );
                let placeholder = prepared.placeholder("started");
                assert_eq!(
                    placeholder.provenance.env, marks,
                    "{command}: the placeholder's marks"
                );
                // Its own flag: the runner's tests raise INTERRUPTED.
                let executed = prepared.execute_until(&AtomicBool::new(false)).unwrap();
                let record = &executed.evaluated.record;
                assert_eq!(output_facts(record), want, "{command}: {name}");
                assert_eq!(record.raw_output, raw, "{command}: {name}");
                // One rule for the env: the variant's variables, the marks, the mode.
                let mut env = variant.env.clone();
                env.extend(marks);
                if let Some(mode) = &variant.gpudirect {
                    env.insert(MODE_ENV.into(), mode.clone());
                }
                assert_eq!(record.provenance.env, env, "{command}: {name}");
            }
        }
    }
}
