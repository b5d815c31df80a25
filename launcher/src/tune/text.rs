//! `gpudirect tune`'s result: what `--json` prints, and its text (the rule, a table per
//! phase and band, each candidate's call, the winner). Pure: the command prints.

use std::fmt::Write;

use serde::Serialize;

use super::session::seconds_text;
use super::verdict::{self, Call, Choice, PhaseResult, Rule};
use crate::output::{render_table, Align};

/// What `--json` prints and what the tables show.
#[derive(Debug, Serialize)]
pub struct TuneResult {
    pub tune_id: String,
    pub measured: String,
    pub rule: Rule,
    pub budget_seconds: f64,
    pub elapsed_seconds: f64,
    pub runs: usize,
    pub budget_note: Option<String>,
    pub notes: Vec<String>,
    pub phases: Vec<PhaseResult>,
    pub choice: Option<Choice>,
    pub left_out: Vec<String>,
    pub failures: Vec<String>,
    pub overlay: Option<String>,
}

pub fn stats_text(stats: Option<verdict::Stats>) -> String {
    stats
        .map(|s| format!("{:.2} ({:.2})", s.median, s.spread))
        .unwrap_or_else(|| "-".into())
}

pub fn result_text(result: &TuneResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out,
        "\ntune {}: {}\nrule: a setting wins a band when its median busbw beats the default's by more than both spreads together and by at least {}%; {} runs each side",
        result.tune_id,
        result.measured,
        result.rule.min_gain_pct,
        result.rule.min_rounds
    );
    for phase in &result.phases {
        let _ = writeln!(
            out,
            "\n{} phase {} (median busbw GB/s, spread in brackets):",
            phase.collective, phase.phase
        );
        let mut rows = Vec::new();
        for band in &phase.bands {
            let (best, stats, gain) = match band.best() {
                Some(c) => (
                    c.setting.to_string(),
                    stats_text(c.stats),
                    c.gain_pct.map(|g| format!("{g:+.1}%")).unwrap_or_default(),
                ),
                None => (
                    "default (nothing beat the noise)".into(),
                    "-".into(),
                    "-".into(),
                ),
            };
            let runs = band.default.map_or(0, |s| s.runs);
            rows.push(vec![
                band.label.clone(),
                stats_text(band.default),
                best,
                stats,
                gain,
                runs.to_string(),
            ]);
        }
        let _ = writeln!(
            out,
            "{}",
            render_table(
                &[
                    ("BAND", Align::Left),
                    ("DEFAULT", Align::Right),
                    ("BEST", Align::Left),
                    ("BEST BUSBW", Align::Right),
                    ("GAIN", Align::Right),
                    ("RUNS", Align::Right),
                ],
                &rows,
            )
            .trim_end()
        );
        for band in &phase.bands {
            for c in &band.candidates {
                let gain = c
                    .gain_pct
                    .map(|g| format!("{g:+.1}%"))
                    .unwrap_or_else(|| "-".into());
                let call = match &c.call {
                    Call::Wins => "wins".to_string(),
                    Call::Within => "within the noise".to_string(),
                    Call::Loses => "loses".to_string(),
                    Call::NotJudged(why) => format!("not judged: {why}"),
                };
                let _ = writeln!(
                    out,
                    "  {:<16} {:<40} {:>16} {:>8}  {call}",
                    band.label,
                    c.setting.to_string(),
                    stats_text(c.stats),
                    gain
                );
            }
        }
    }
    if result.phases.is_empty() {
        let _ = writeln!(out, "\nno phase finished: nothing judged");
    }
    let _ = writeln!(
        out,
        "\nruns: {} recorded (gpudirect history --label {}); time {} of the {} budget",
        result.runs,
        result.tune_id,
        seconds_text(result.elapsed_seconds),
        seconds_text(result.budget_seconds)
    );
    if let Some(note) = &result.budget_note {
        let _ = writeln!(out, "{note}: settings with fewer than {} runs are not judged; raise --budget and continue with --resume {}", result.rule.min_rounds, result.tune_id);
    }
    for failure in &result.failures {
        let _ = writeln!(out, "failed run: {failure}");
    }
    let _ = match &result.choice {
        Some(choice) => writeln!(
            out,
            "size-independent winner: {} (mean gain {:+.1}% over the bands){}",
            choice.setting,
            choice.mean_gain_pct,
            result
                .overlay
                .as_ref()
                .map(|f| format!("; written to {f}"))
                .unwrap_or_default()
        ),
        None => writeln!(out, "size-independent winner: none (the default stays)"),
    };
    for note in &result.left_out {
        let _ = writeln!(out, "  {note}");
    }
    out
}
