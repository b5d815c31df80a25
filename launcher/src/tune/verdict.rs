//! Which settings beat the default, per size band, by more than the run-to-run noise.
//!
//! A run's figure in a band is the mean out-of-place busbw over the band's sizes. Over the
//! rounds, a setting has a median and a spread (largest minus smallest). A candidate
//! **wins** a band when its median beats the default's by more than the two spreads
//! together and by at least `--min-gain`; it **loses** when the default's median beats its
//! own by more than the two spreads; otherwise it is within the noise. With three rounds
//! the spread is the whole range seen, so a win means even the candidate's worst round is
//! close to or above the default's best. Fewer than [`Rule::min_rounds`] finished runs on
//! either side: not judged.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::plan::Setting;
use crate::history::compare::median;
use crate::units::human_size;

/// A range of message sizes, `[min, max)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Band {
    /// Smallest size in the band.
    pub min: u64,
    /// First size above the band; `None`: no upper end.
    pub max: Option<u64>,
}

impl Band {
    /// Whether `size` is in the band.
    pub fn contains(&self, size: u64) -> bool {
        size >= self.min && self.max.is_none_or(|m| size < m)
    }

    /// `< 1 MiB`, `1 MiB - 64 MiB`, `>= 64 MiB`.
    pub fn label(&self) -> String {
        match (self.min, self.max) {
            (0, None) => "all sizes".to_string(),
            (0, Some(max)) => format!("< {}", human_size(max)),
            (min, None) => format!(">= {}", human_size(min)),
            (min, Some(max)) => format!("{} - {}", human_size(min), human_size(max)),
        }
    }
}

/// The bands that `boundaries` cut the sizes into (sorted, repeats ignored).
pub fn bands(boundaries: &[u64]) -> Vec<Band> {
    let mut cuts: Vec<u64> = boundaries.iter().copied().filter(|&b| b > 0).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut bands = Vec::new();
    let mut min = 0;
    for cut in cuts {
        bands.push(Band {
            min,
            max: Some(cut),
        });
        min = cut;
    }
    bands.push(Band { min, max: None });
    bands
}

/// One finished run: its setting, round, and busbw (GB/s) by size.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// What it set.
    pub setting: Setting,
    /// Its round.
    pub round: u32,
    /// Out-of-place busbw by message size.
    pub busbw: BTreeMap<u64, f64>,
}

impl Sample {
    /// The mean busbw over the sizes in `band` that are also in `common` (the sizes every
    /// run of the phase has: a run that lost its largest sizes must not look slower for
    /// it); `None` when there are none.
    fn in_band(&self, band: &Band, common: &BTreeSet<u64>) -> Option<f64> {
        let values: Vec<f64> = self
            .busbw
            .iter()
            .filter(|(size, _)| band.contains(**size) && common.contains(size))
            .map(|(_, b)| *b)
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }
}

/// A setting's figures in one band over its rounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stats {
    /// Median busbw, GB/s.
    pub median: f64,
    /// Largest minus smallest, GB/s.
    pub spread: f64,
    /// Runs that count.
    pub runs: usize,
}

impl Stats {
    fn of(values: &[f64]) -> Option<Stats> {
        if values.is_empty() {
            return None;
        }
        let (lowest, highest) = values
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            });
        Some(Stats {
            median: median(values)?,
            spread: highest - lowest,
            runs: values.len(),
        })
    }
}

/// How the noise rule judges.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rule {
    /// Finished runs each side needs to be judged (3: the "at least three times").
    pub min_rounds: usize,
    /// A win must also gain at least this much, percent of the default's median.
    pub min_gain_pct: f64,
}

/// A candidate's call in one band.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Call {
    /// Better than the default by more than the noise and `--min-gain`.
    Wins,
    /// Inside the noise, or above it by less than `--min-gain`.
    Within,
    /// Worse than the default by more than the noise.
    Loses,
    /// Too few finished runs on one side (the reason).
    NotJudged(String),
}

/// One candidate in one band.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// What it set.
    #[serde(serialize_with = "as_label")]
    pub setting: Setting,
    /// Its figures; `None` when it has no finished run.
    pub stats: Option<Stats>,
    /// Median against the default's, percent.
    pub gain_pct: Option<f64>,
    /// The call.
    pub call: Call,
}

fn as_label<S: serde::Serializer>(setting: &Setting, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&setting.to_string())
}

/// One band of one phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BandResult {
    /// The band.
    pub band: Band,
    /// `band.label()`, for JSON readers.
    pub label: String,
    /// The default's figures.
    pub default: Option<Stats>,
    /// Every candidate, in the phase's order.
    pub candidates: Vec<Candidate>,
}

impl BandResult {
    /// The winner with the highest median, if any won.
    pub fn best(&self) -> Option<&Candidate> {
        self.candidates
            .iter()
            .filter(|c| c.call == Call::Wins)
            .max_by(|a, b| {
                let m = |c: &Candidate| c.stats.map_or(f64::MIN, |s| s.median);
                m(a).total_cmp(&m(b))
            })
    }

    /// The candidate with the highest median that did not win (for "best inside the
    /// noise"), if any was judged.
    pub fn closest(&self) -> Option<&Candidate> {
        self.candidates
            .iter()
            .filter(|c| c.call == Call::Within)
            .max_by(|a, b| {
                let g = |c: &Candidate| c.gain_pct.unwrap_or(f64::MIN);
                g(a).total_cmp(&g(b))
            })
    }
}

/// Judges every candidate of a phase against the default in every band that has sizes.
/// `settings` gives the order (the default among them is skipped as a candidate).
pub fn judge(
    samples: &[Sample],
    settings: &[Setting],
    bands: &[Band],
    rule: &Rule,
) -> Vec<BandResult> {
    let default = Setting::default_setting();
    let mut common: Option<BTreeSet<u64>> = None;
    for sample in samples {
        let sizes: BTreeSet<u64> = sample.busbw.keys().copied().collect();
        common = Some(match common {
            None => sizes,
            Some(c) => c.intersection(&sizes).copied().collect(),
        });
    }
    let common = common.unwrap_or_default();
    let figures = |setting: &Setting, band: &Band| -> Vec<f64> {
        samples
            .iter()
            .filter(|s| &s.setting == setting)
            .filter_map(|s| s.in_band(band, &common))
            .collect()
    };
    let mut results = Vec::new();
    for band in bands {
        if !common.iter().any(|&size| band.contains(size)) {
            continue;
        }
        let default_values = figures(&default, band);
        let default_stats = Stats::of(&default_values);
        let candidates = settings
            .iter()
            .filter(|s| !s.is_default())
            .map(|setting| {
                let stats = Stats::of(&figures(setting, band));
                let gain_pct = match (stats, default_stats) {
                    (Some(c), Some(d)) if d.median > 0.0 => {
                        Some(100.0 * (c.median - d.median) / d.median)
                    }
                    _ => None,
                };
                let call = call(stats, default_stats, gain_pct, rule);
                Candidate {
                    setting: setting.clone(),
                    stats,
                    gain_pct,
                    call,
                }
            })
            .collect();
        results.push(BandResult {
            band: *band,
            label: band.label(),
            default: default_stats,
            candidates,
        });
    }
    results
}

fn call(
    candidate: Option<Stats>,
    default: Option<Stats>,
    gain_pct: Option<f64>,
    rule: &Rule,
) -> Call {
    let runs = |s: Option<Stats>| s.map_or(0, |s| s.runs);
    if runs(default) < rule.min_rounds || runs(candidate) < rule.min_rounds {
        return Call::NotJudged(format!(
            "{} and {} finished run(s), {} needed each",
            runs(candidate),
            runs(default),
            rule.min_rounds
        ));
    }
    let (Some(c), Some(d), Some(gain_pct)) = (candidate, default, gain_pct) else {
        return Call::NotJudged("no busbw".into());
    };
    let noise = c.spread + d.spread;
    let difference = c.median - d.median;
    if difference > noise && gain_pct >= rule.min_gain_pct {
        Call::Wins
    } else if -difference > noise {
        Call::Loses
    } else {
        Call::Within
    }
}

/// One phase of one collective, judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseResult {
    /// The collective.
    pub collective: String,
    /// 1 or 2.
    pub phase: u8,
    /// Per band.
    pub bands: Vec<BandResult>,
}

/// Phase 1's winners, one value per variable, for phase 2 to combine: per variable the
/// value that won the most bands (ties: the larger best gain), the variables ordered by
/// their best gain, largest first.
pub fn winners_to_combine(result: &PhaseResult) -> Vec<(String, String)> {
    // variable -> (value, bands won, best gain)
    let mut by_variable: BTreeMap<String, (String, usize, f64)> = BTreeMap::new();
    let mut per_setting: BTreeMap<&Setting, (usize, f64)> = BTreeMap::new();
    for band in &result.bands {
        for c in band.candidates.iter().filter(|c| c.call == Call::Wins) {
            let entry = per_setting.entry(&c.setting).or_insert((0, f64::MIN));
            entry.0 += 1;
            entry.1 = entry.1.max(c.gain_pct.unwrap_or(0.0));
        }
    }
    for (setting, (wins, gain)) in per_setting {
        // Phase 1 settings hold one variable each.
        let Some((name, value)) = setting.0.iter().next() else {
            continue;
        };
        let better = by_variable
            .get(name)
            .is_none_or(|(_, w, g)| wins > *w || (wins == *w && gain > *g));
        if better {
            by_variable.insert(name.clone(), (value.clone(), wins, gain));
        }
    }
    let mut winners: Vec<(String, String, f64)> = by_variable
        .into_iter()
        .map(|(name, (value, _, gain))| (name, value, gain))
        .collect();
    winners.sort_by(|a, b| b.2.total_cmp(&a.2));
    winners.into_iter().map(|(n, v, _)| (n, v)).collect()
}

/// The setting `--write` keeps: one that wins a band somewhere and loses none, in every
/// collective tuned. Variables apply at every size, so a band winner that loses another
/// band is not written; among those left, the largest mean gain over all bands wins.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    /// The setting.
    #[serde(serialize_with = "as_label")]
    pub setting: Setting,
    /// Mean gain over every band of every collective, percent.
    pub mean_gain_pct: f64,
    /// Where it won: (collective, band label, gain percent).
    pub wins: Vec<(String, String, f64)>,
}

/// The size-independent choice over `results` (every phase of every collective in
/// `collectives`), and one note per band winner left out, saying why.
pub fn size_independent_choice(
    results: &[PhaseResult],
    collectives: &[String],
) -> (Option<Choice>, Vec<String>) {
    let mut settings: Vec<&Setting> = Vec::new();
    for r in results {
        for band in &r.bands {
            for c in &band.candidates {
                if !settings.contains(&&c.setting) {
                    settings.push(&c.setting);
                }
            }
        }
    }
    let mut notes = Vec::new();
    let mut best: Option<Choice> = None;
    for setting in settings {
        let mut wins = Vec::new();
        let mut losses = Vec::new();
        let mut gains = Vec::new();
        let mut unmeasured = Vec::new();
        for collective in collectives {
            let calls: Vec<(&BandResult, &Candidate)> = results
                .iter()
                .filter(|r| &r.collective == collective)
                .flat_map(|r| r.bands.iter())
                .filter_map(|b| {
                    b.candidates
                        .iter()
                        .find(|c| &c.setting == setting)
                        .map(|c| (b, c))
                })
                .collect();
            if calls.is_empty() {
                unmeasured.push(collective.clone());
            }
            for (band, c) in calls {
                let gain = c.gain_pct.unwrap_or(0.0);
                match &c.call {
                    Call::Wins => wins.push((collective.clone(), band.label.clone(), gain)),
                    Call::Loses => {
                        losses.push(format!("{collective} {} ({gain:+.1}%)", band.label))
                    }
                    Call::NotJudged(_) => unmeasured.push(format!("{collective} {}", band.label)),
                    Call::Within => {}
                }
                gains.push(gain);
            }
        }
        if wins.is_empty() {
            continue;
        }
        let won: Vec<String> = wins
            .iter()
            .map(|(c, b, g)| format!("{c} {b} ({g:+.1}%)"))
            .collect();
        if !losses.is_empty() {
            notes.push(format!(
                "{setting} wins {} but loses {}: not written (a variable applies at every size)",
                won.join(", "),
                losses.join(", ")
            ));
            continue;
        }
        if !unmeasured.is_empty() {
            notes.push(format!(
                "{setting} wins {} but was not judged for {}: not written",
                won.join(", "),
                unmeasured.join(", ")
            ));
            continue;
        }
        let mean = gains.iter().sum::<f64>() / gains.len().max(1) as f64;
        let better = best.as_ref().is_none_or(|b| {
            mean > b.mean_gain_pct
                || (mean == b.mean_gain_pct && setting.0.len() < b.setting.0.len())
        });
        if better {
            best = Some(Choice {
                setting: setting.clone(),
                mean_gain_pct: mean,
                wins,
            });
        }
    }
    (best, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    fn sample(setting: &str, round: u32, busbw: &[(u64, f64)]) -> Sample {
        Sample {
            setting: Setting::parse_label(setting).unwrap(),
            round,
            busbw: busbw.iter().copied().collect(),
        }
    }

    fn rule() -> Rule {
        Rule {
            min_rounds: 3,
            min_gain_pct: 1.0,
        }
    }

    fn settings(labels: &[&str]) -> Vec<Setting> {
        labels
            .iter()
            .map(|l| Setting::parse_label(l).unwrap())
            .collect()
    }

    #[test]
    fn bands_cut_at_the_boundaries_and_name_themselves() {
        let b = bands(&[64 * M, M, M]);
        assert_eq!(b.len(), 3);
        assert_eq!(b[0].label(), "< 1 MiB");
        assert_eq!(b[1].label(), "1 MiB - 64 MiB");
        assert_eq!(b[2].label(), ">= 64 MiB");
        assert!(b[1].contains(M) && !b[1].contains(64 * M) && b[2].contains(64 * M));
        assert_eq!(bands(&[])[0].label(), "all sizes");
    }

    /// Three rounds of the default and of a candidate at one size.
    fn rounds(default: [f64; 3], candidate: [f64; 3]) -> Vec<Sample> {
        let mut s = Vec::new();
        for r in 0..3 {
            s.push(sample("default", r as u32 + 1, &[(M, default[r])]));
            s.push(sample("X=1", r as u32 + 1, &[(M, candidate[r])]));
        }
        s
    }

    fn call_of(samples: &[Sample]) -> Call {
        judge(
            samples,
            &settings(&["default", "X=1"]),
            &bands(&[]),
            &rule(),
        )[0]
        .candidates[0]
            .call
            .clone()
    }

    #[test]
    fn a_candidate_inside_the_noise_never_wins() {
        // +3% on the median, but the rounds overlap: noise 4 + 4 > 3.
        assert_eq!(
            call_of(&rounds([100.0, 96.0, 100.0], [103.0, 99.0, 103.0])),
            Call::Within
        );
        // The same gain with tight rounds wins.
        assert_eq!(
            call_of(&rounds([100.0, 100.2, 99.9], [103.0, 103.1, 102.9])),
            Call::Wins
        );
        // Tight rounds and a real gain below --min-gain: within.
        assert_eq!(
            call_of(&rounds([100.0, 100.0, 100.0], [100.5, 100.5, 100.5])),
            Call::Within
        );
        // Worse beyond the noise: loses.
        assert_eq!(
            call_of(&rounds([100.0, 100.0, 100.0], [90.0, 90.5, 90.2])),
            Call::Loses
        );
        // One wild round on the candidate's side widens its spread: no win.
        assert_eq!(
            call_of(&rounds([100.0, 100.0, 100.0], [104.0, 104.0, 90.0])),
            Call::Within
        );
    }

    #[test]
    fn a_run_that_lost_its_largest_sizes_is_judged_on_the_sizes_all_runs_have() {
        let mut s = Vec::new();
        for r in 1..=3 {
            s.push(sample("default", r, &[(M, 100.0), (2 * M, 200.0)]));
            s.push(sample("X=1", r, &[(M, 110.0), (2 * M, 220.0)]));
        }
        // One candidate run printed only the smaller size (`Reducing maxBytes`): averaged
        // over what each run has, that run (110) would look far slower than the others
        // (165) and its spread would hide a 10% gain at the size every run measured.
        s[5] = sample("X=1", 3, &[(M, 110.0)]);
        assert_eq!(call_of(&s), Call::Wins);
    }

    #[test]
    fn fewer_than_three_runs_are_not_judged() {
        let mut s = rounds([100.0, 100.0, 100.0], [110.0, 110.0, 110.0]);
        s.pop();
        assert!(matches!(call_of(&s), Call::NotJudged(why) if why.contains("2 and 3")));
    }

    #[test]
    fn the_recorded_h200_sweep_is_judged_per_band() {
        // Out-of-place busbw of h200x2-tuning (3 rounds), 1 MiB to 4 GiB by 4.
        let sizes = [M, 4 * M, 16 * M, 64 * M, 256 * M, 1024 * M, 4096 * M];
        let rows: [(&str, [[f64; 7]; 3]); 3] = [
            (
                "default",
                [
                    [39., 118., 212., 269., 300., 328., 345.],
                    [39., 116., 213., 270., 301., 330., 347.],
                    [38., 115., 212., 270., 300., 332., 345.],
                ],
            ),
            (
                "NCCL_ALGO=Tree",
                [
                    [40., 98., 176., 273., 311., 342., 355.],
                    [36., 99., 187., 273., 310., 343., 353.],
                    [42., 99., 188., 272., 311., 342., 355.],
                ],
            ),
            (
                "NCCL_MIN_NCHANNELS=32",
                [
                    [43., 119., 221., 284., 313., 343., 355.],
                    [49., 119., 224., 283., 315., 342., 357.],
                    [53., 118., 223., 283., 314., 341., 356.],
                ],
            ),
        ];
        let mut samples = Vec::new();
        for (label, runs) in rows {
            for (r, values) in runs.iter().enumerate() {
                let busbw: Vec<(u64, f64)> = sizes.iter().copied().zip(*values).collect();
                samples.push(sample(label, r as u32 + 1, &busbw));
            }
        }
        let order = settings(&["default", "NCCL_ALGO=Tree", "NCCL_MIN_NCHANNELS=32"]);
        let result = PhaseResult {
            collective: "all_reduce".into(),
            phase: 1,
            bands: judge(&samples, &order, &bands(&[M, 64 * M]), &rule()),
        };
        assert_eq!(result.bands.len(), 2, "no size below 1 MiB");
        let (mid, large) = (&result.bands[0], &result.bands[1]);
        assert_eq!(mid.candidates[0].call, Call::Loses, "Tree at 1-64 MiB");
        assert_eq!(large.candidates[0].call, Call::Wins, "Tree at >= 64 MiB");
        assert_eq!(
            large.best().unwrap().setting.to_string(),
            "NCCL_MIN_NCHANNELS=32"
        );
        let gain = large.candidates[0].gain_pct.unwrap();
        assert!((2.0..4.0).contains(&gain), "Tree's gain {gain}");
        assert_eq!(
            winners_to_combine(&result),
            [
                ("NCCL_MIN_NCHANNELS".to_string(), "32".to_string()),
                ("NCCL_ALGO".to_string(), "Tree".to_string())
            ]
        );
        let (choice, notes) = size_independent_choice(&[result], &["all_reduce".into()]);
        let choice = choice.unwrap();
        assert_eq!(choice.setting.to_string(), "NCCL_MIN_NCHANNELS=32");
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("NCCL_ALGO=Tree wins") && n.contains("loses")),
            "{notes:?}"
        );
        // A collective it was never measured for keeps it out of the overlay.
        let result = PhaseResult {
            collective: "all_reduce".into(),
            phase: 1,
            bands: judge(&samples, &order, &bands(&[M, 64 * M]), &rule()),
        };
        let (choice, notes) =
            size_independent_choice(&[result], &["all_reduce".into(), "all_gather".into()]);
        assert_eq!(choice, None);
        assert!(notes.iter().any(|n| n.contains("all_gather")), "{notes:?}");
    }
}
