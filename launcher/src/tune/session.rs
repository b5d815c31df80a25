//! A tune's runs: [`Tuner`] runs the steps of each phase round by round through
//! `cell::exec`, within the budget, each recorded in place of a placeholder that
//! `--resume` finds ([`recorded_steps`]) when a tune was stopped. The command
//! (`commands/tune.rs`) sets up, plans the phases, judges and prints.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gpudirect_core::config::Profile;

use super::verdict::Sample;
use super::{busbw_by_size, busbw_by_size_from_rows};
use crate::cell::exec::{self, CellError, Executed, Spec};
use crate::cell::Evaluated;
use crate::checks::Expectations;
use crate::history::compare::median;
use crate::history::{History, LaunchKind, RunFilter, RunId, RunStatus};
use crate::launch::LaunchOptions;
use crate::matrix::{Cell, Matrix, Variant};
use crate::noteln;
use crate::output::Progress;
use crate::record::RunContext;
use crate::runner::INTERRUPTED;
use crate::tune::plan::{Setting, Step};

/// What stops a tune's runs.
#[derive(Debug, thiserror::Error)]
pub enum TuneRunError {
    /// A run could not be built, started or recorded.
    #[error(transparent)]
    Cell(#[from] CellError),
    /// `--resume` of a tune made with other flags.
    #[error("tune `{id}` was made with other flags (run {run} differs): give the flags it was started with, or start a new tune without --resume")]
    OtherFlags {
        /// The tune id.
        id: String,
        /// The run whose fingerprint differs.
        run: RunId,
    },
    /// A run whose step key does not read.
    #[error("run {run}: {STEP_KEY} `{key}` does not read")]
    BadStep {
        /// The run.
        run: RunId,
        /// Its step key.
        key: String,
    },
}

/// What a tune recorded before: its finished steps by key, and the placeholders (run ids)
/// of steps that were running when it stopped.
pub type Recorded = (BTreeMap<String, Finished>, BTreeMap<String, i64>);

/// The history key of a run's tune step (`collective:pN:rN:setting`), for `--resume`.
pub const STEP_KEY: &str = "GPUDIRECT_TUNE_STEP";
/// The history key of the fingerprint of the tune's flags: `--resume` refuses other flags.
pub const PLAN_KEY: &str = "GPUDIRECT_TUNE_PLAN";

/// Where the runs happen and with what.
pub struct Setup {
    /// How each run starts.
    pub launch: LaunchOptions,
    /// One cell's shape: nodes and GPUs per node.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// `CUDA_VISIBLE_DEVICES` for --gpus.
    pub devices: Option<String>,
    /// The mode every run applies, and its profile.
    pub mode: Option<String>,
    /// The profile of that mode.
    pub profile: Option<Profile>,
    /// The nodes the runs use (this host with --gpus).
    pub run_nodes: Vec<String>,
    /// The launcher recorded with each run.
    pub launch_kind: LaunchKind,
    /// What was measured, for the summary and the overlay.
    pub described: String,
    /// Variables of the launch itself that every run gets: Open MPI kept on the profile's
    /// control NIC ([`crate::launch::pin_launch`]).
    pub launch_env: BTreeMap<String, String>,
}

impl Setup {
    /// A run's environment: the launch's variables, `--gpus`' devices, then the setting's
    /// own (which win).
    pub fn step_env(&self, setting: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut env = self.launch_env.clone();
        if let Some(devices) = &self.devices {
            env.insert("CUDA_VISIBLE_DEVICES".into(), devices.clone());
        }
        env.extend(setting.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }
}

/// One finished step.
#[derive(Debug, Clone)]
pub struct Finished {
    /// How it ended.
    pub status: RunStatus,
    /// Its busbw by size, when it gave one.
    pub sample: Option<Sample>,
}

/// Everything a tune run needs while it runs.
pub struct Tuner<'a> {
    /// Where and how the runs happen.
    pub setup: &'a Setup,
    /// `--budget`: no round starts that would run past it.
    pub budget: Duration,
    /// Ask nccl-tests for a `-J` report (not `--no-json`).
    pub json_report: bool,
    /// `--cluster`.
    pub cluster: Option<String>,
    /// The sizes and limits every run has.
    pub matrix: Matrix,
    /// The tune's id: every run's label.
    pub tune_id: String,
    /// The fingerprint of the flags ([`PLAN_KEY`]).
    pub plan_print: String,
    /// Where the runs are recorded.
    pub history: History,
    /// Steps already recorded (from --resume): finished ones, and placeholders to redo.
    pub done: BTreeMap<String, Finished>,
    pub placeholders: BTreeMap<String, i64>,
    /// When the tune started (the budget counts from it).
    pub started: Instant,
    /// Seconds of each finished run, for the estimates.
    pub durations: Vec<f64>,
    /// Runs started so far (each `-J` report gets its own file).
    pub runs_started: usize,
    /// Why the budget stopped the tune, if it did.
    pub budget_note: Option<String>,
    /// The runs that failed, said.
    pub failures: Vec<String>,
    /// A run of the default itself failed.
    pub default_failed: bool,
}

impl Tuner<'_> {
    /// The median duration of a run so far.
    pub fn estimate(&self) -> Option<f64> {
        median(&self.durations)
    }

    /// Ctrl-C was pressed.
    pub fn interrupted(&self) -> bool {
        INTERRUPTED.load(Ordering::SeqCst)
    }

    /// Runs the steps of one phase (skipping those recorded), round by round within the
    /// budget; returns every sample of the phase.
    pub fn run_phase(&mut self, steps: &[Step], label: &str) -> Result<Vec<Sample>, TuneRunError> {
        let todo = steps
            .iter()
            .filter(|s| !self.done.contains_key(&s.key()))
            .count();
        let progress = Progress::new("gpudirect tune", todo);
        let rounds: u32 = steps.iter().map(|s| s.round).max().unwrap_or(0);
        let mut index = 0;
        'rounds: for round in 1..=rounds {
            let in_round: Vec<&Step> = steps.iter().filter(|s| s.round == round).collect();
            let to_run = in_round
                .iter()
                .filter(|s| !self.done.contains_key(&s.key()))
                .count();
            if to_run == 0 {
                continue;
            }
            let elapsed = self.started.elapsed().as_secs_f64();
            if let Some(per_run) = self.estimate() {
                let needed = per_run * to_run as f64;
                if elapsed + needed > self.budget.as_secs_f64() {
                    self.budget_note = Some(format!(
                        "budget {}: stopped before {label} round {round} (elapsed {}, the round needs ~{})",
                        seconds_text(self.budget.as_secs_f64()),
                        seconds_text(elapsed),
                        seconds_text(needed)
                    ));
                    break 'rounds;
                }
            }
            for step in in_round {
                if self.done.contains_key(&step.key()) {
                    continue;
                }
                if self.interrupted() {
                    break 'rounds;
                }
                let elapsed = self.started.elapsed().as_secs_f64();
                if elapsed >= self.budget.as_secs_f64() {
                    self.budget_note = Some(format!(
                        "budget {}: spent in {label} round {round} (elapsed {})",
                        seconds_text(self.budget.as_secs_f64()),
                        seconds_text(elapsed)
                    ));
                    break 'rounds;
                }
                index += 1;
                let finished = self.run_step(step, (index, todo), &progress)?;
                self.done.insert(step.key(), finished);
            }
        }
        progress.close();
        Ok(steps
            .iter()
            .filter_map(|s| self.done.get(&s.key()))
            .filter(|f| f.status == RunStatus::Ok)
            .filter_map(|f| f.sample.clone())
            .collect())
    }

    fn run_step(
        &mut self,
        step: &Step,
        (index, progress_total): (usize, usize),
        progress: &Progress,
    ) -> Result<Finished, TuneRunError> {
        self.runs_started += 1;
        let env = self.setup.step_env(&step.setting.0);
        let cell = Cell {
            index: self.runs_started,
            collective: step.collective.clone(),
            nodes: self.setup.nodes,
            gpus_per_node: self.setup.gpus_per_node,
            variant: Variant {
                name: step.setting.to_string(),
                gpudirect: self.setup.mode.clone(),
                env,
            },
        };
        let mut marks = BTreeMap::new();
        marks.insert(STEP_KEY.to_string(), step.key());
        marks.insert(PLAN_KEY.to_string(), self.plan_print.clone());
        let prepared = exec::prepare(Spec {
            cell: &cell,
            matrix: &self.matrix,
            launch: &self.setup.launch,
            json_report: self.json_report,
            expect: Expectations {
                transport: self
                    .setup
                    .profile
                    .as_ref()
                    .and_then(|p| p.transport.clone()),
                nodes: self.setup.nodes,
                sizes: self.matrix.expected_sizes(),
                // The NICs are run's check; tune compares settings of one profile.
                nics: Vec::new(),
                pasted: false,
            },
            context: RunContext {
                nodes: self.setup.run_nodes.clone(),
                launcher: self.setup.launch_kind,
                label: Some(self.tune_id.clone()),
                line_rate_gbps: self
                    .setup
                    .profile
                    .as_ref()
                    .and_then(Profile::node_line_rate_gbps),
                tool: crate::history::Tool::Tune,
                ..RunContext::for_job(self.cluster.as_deref())
            },
            marks,
        })
        .map_err(CellError::from)?;
        let command = prepared.command_line();
        let placeholder = match self.placeholders.remove(&step.key()) {
            Some(id) => id,
            None => {
                let mark = prepared.placeholder("started; the tune stopped before the run ended");
                self.history
                    .import_run(&mark, true)
                    .map_err(CellError::from)?
                    .run_id()
            }
        };
        let label = format!(
            "{} p{} r{} {}",
            step.collective, step.phase, step.round, step.setting
        );
        progress.start(index, &label, &command);
        let executed = prepared.execute().map_err(CellError::from)?;
        if let Err(e) = executed.replace(&mut self.history, placeholder) {
            noteln!("gpudirect tune: could not record {label}: {e}");
        }
        let Executed {
            finished,
            evaluated: Evaluated {
                parsed, verdict, ..
            },
            ..
        } = executed;
        let seconds = finished.elapsed.as_secs_f64();
        if verdict.status == RunStatus::Ok {
            self.durations.push(seconds);
        }
        let finding = verdict.findings.first().map(|f| f.message.clone());
        let busbw = busbw_by_size(&parsed);
        progress.finish(
            &format!(
                "[{index}/{}] {label}: {}{}{}",
                progress_total,
                verdict.status,
                parsed
                    .busbw_at_max_size()
                    .map(|b| format!(", busbw {b:.2} GB/s at max size"))
                    .unwrap_or_default(),
                finding
                    .as_ref()
                    .map(|f| format!(" ({f})"))
                    .unwrap_or_default()
            ),
            parsed.busbw_at_max_size(),
        );
        if verdict.status != RunStatus::Ok && verdict.status != RunStatus::Interrupted {
            self.failures.push(format!(
                "{label}: {}{}",
                verdict.status,
                finding
                    .as_ref()
                    .map(|f| format!(": {f}"))
                    .unwrap_or_default()
            ));
            if step.setting.is_default() {
                self.default_failed = true;
            }
        }
        Ok(Finished {
            status: verdict.status,
            sample: (!busbw.is_empty()).then(|| Sample {
                setting: step.setting.clone(),
                round: step.round,
                busbw,
            }),
        })
    }
}

/// `4.5s`, `12m30s`, `1h05m`.
pub fn seconds_text(seconds: f64) -> String {
    if seconds < 59.95 {
        return format!("{:.1}s", seconds.max(0.0));
    }
    let s = seconds.round() as u64;
    match s {
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The tune's steps recorded in the history under `id`: finished ones with their samples,
/// and placeholders (interrupted) by step key. Refuses a tune made with other flags.
pub fn recorded_steps(
    history: &History,
    id: &str,
    plan_print: &str,
) -> Result<Recorded, TuneRunError> {
    let runs = history
        .list_runs(&RunFilter {
            label: Some(id.to_string()),
            ..RunFilter::default()
        })
        .map_err(CellError::from)?;
    let mut done = BTreeMap::new();
    let mut placeholders = BTreeMap::new();
    for summary in runs {
        let detail = history.get_run(summary.id).map_err(CellError::from)?;
        let Some(key) = detail.provenance.env.get(STEP_KEY) else {
            continue;
        };
        if detail.provenance.env.get(PLAN_KEY).map(String::as_str) != Some(plan_print) {
            return Err(TuneRunError::OtherFlags {
                id: id.to_string(),
                run: summary.id,
            });
        }
        if summary.status == RunStatus::Interrupted {
            placeholders.insert(key.clone(), summary.id);
            continue;
        }
        let setting = key
            .splitn(4, ':')
            .nth(3)
            .and_then(Setting::parse_label)
            .ok_or_else(|| TuneRunError::BadStep {
                run: summary.id,
                key: key.clone(),
            })?;
        let round = key
            .split(':')
            .nth(2)
            .and_then(|r| r.strip_prefix('r'))
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        let busbw = busbw_by_size_from_rows(&detail.rows);
        done.insert(
            key.clone(),
            Finished {
                status: summary.status,
                sample: (!busbw.is_empty()).then_some(Sample {
                    setting,
                    round,
                    busbw,
                }),
            },
        );
    }
    Ok((done, placeholders))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_seconds_minutes_or_hours() {
        assert_eq!(seconds_text(4.54), "4.5s");
        assert_eq!(seconds_text(-1.0), "0.0s");
        assert_eq!(seconds_text(750.0), "12m30s");
        assert_eq!(seconds_text(3900.0), "1h05m");
    }
}
