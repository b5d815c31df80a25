//! The search: which settings run, in which order, and how a finished step is named in the
//! history so that `--resume` knows it.
//!
//! Phase 1 tries one knob value at a time against the default; phase 2 tries combinations
//! of the phase-1 winners. Every phase runs in rounds, and each round runs every setting of
//! the phase once, the default included, in an order rotated by a third of the settings
//! per round (with three rounds): a setting that runs early in one round runs late in
//! another, so drift over time (thermals, a neighbour's job) widens its spread instead of
//! passing for a gain.

use std::collections::BTreeMap;
use std::fmt;

use super::knobs::Knob;

/// The variables one run sets on top of the default; empty is the default itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Setting(pub BTreeMap<String, String>);

impl Setting {
    /// The default: nothing on top.
    pub fn default_setting() -> Setting {
        Setting(BTreeMap::new())
    }

    /// One variable.
    pub fn one(name: &str, value: &str) -> Setting {
        Setting(BTreeMap::from([(name.to_string(), value.to_string())]))
    }

    /// Whether this is the default.
    pub fn is_default(&self) -> bool {
        self.0.is_empty()
    }

    /// Reads a label written by [`fmt::Display`] (`default`, `A=1+B=2`).
    pub fn parse_label(label: &str) -> Option<Setting> {
        if label == "default" {
            return Some(Setting::default_setting());
        }
        label
            .split('+')
            .map(|pair| {
                pair.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect::<Option<BTreeMap<_, _>>>()
            .map(Setting)
    }
}

/// `default`, or the variables joined by `+` (`NCCL_ALGO=Tree+NCCL_MIN_NCHANNELS=32`): the
/// run's variant name in the history.
impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("default");
        }
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&parts.join("+"))
    }
}

/// One nccl-tests run of the search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The collective.
    pub collective: String,
    /// 1 (single knobs) or 2 (combinations).
    pub phase: u8,
    /// 1-based round.
    pub round: u32,
    /// What the run sets on top of the default.
    pub setting: Setting,
}

impl Step {
    /// The step's name in the history (`all_reduce:p1:r2:NCCL_ALGO=Tree`), unique within a
    /// tune run.
    pub fn key(&self) -> String {
        format!(
            "{}:p{}:r{}:{}",
            self.collective, self.phase, self.round, self.setting
        )
    }
}

/// Phase 1's settings: the default, then each value of each knob alone.
pub fn single_settings(knobs: &[Knob]) -> Vec<Setting> {
    let mut settings = vec![Setting::default_setting()];
    for knob in knobs {
        for value in &knob.values {
            settings.push(Setting::one(&knob.name, value));
        }
    }
    settings
}

/// The most combinations phase 2 tries: every winner together first, then pairs.
pub const MAX_COMBINATIONS: usize = 6;

/// Phase 2's settings: the default, then combinations of the winners (one value per
/// variable, in the order given: the best first), all of them together first, then the
/// pairs, at most [`MAX_COMBINATIONS`]. Empty when fewer than two variables won: there is
/// nothing to combine.
pub fn combined_settings(winners: &[(String, String)]) -> Vec<Setting> {
    let mut unique: Vec<&(String, String)> = Vec::new();
    for winner in winners {
        if !unique.iter().any(|(name, _)| *name == winner.0) {
            unique.push(winner);
        }
    }
    if unique.len() < 2 {
        return Vec::new();
    }
    let mut combos: Vec<Setting> = Vec::new();
    if unique.len() > 2 {
        combos.push(Setting(unique.iter().map(|&p| p.clone()).collect()));
    }
    for (i, a) in unique.iter().enumerate() {
        for b in &unique[i + 1..] {
            combos.push(Setting(BTreeMap::from([(*a).clone(), (*b).clone()])));
        }
    }
    combos.truncate(MAX_COMBINATIONS);
    let mut settings = vec![Setting::default_setting()];
    settings.extend(combos);
    settings
}

/// The steps of one phase: `rounds` rounds of every setting, each round's order rotated
/// by `n / rounds` places (rounded up) from the last, so that a setting runs early in one
/// round, late in another: drift within a round (GPUs warming up) then widens its spread
/// instead of passing for a gain.
pub fn interleaved(collective: &str, phase: u8, settings: &[Setting], rounds: u32) -> Vec<Step> {
    let n = settings.len();
    let stride = n.div_ceil(rounds.max(1) as usize).max(1);
    let mut steps = Vec::with_capacity(n * rounds as usize);
    for round in 0..rounds {
        for i in 0..n {
            let setting = &settings[(i + round as usize * stride) % n.max(1)];
            steps.push(Step {
                collective: collective.to_string(),
                phase,
                round: round + 1,
                setting: setting.clone(),
            });
        }
    }
    steps
}

/// A short fingerprint of what a tune run measures (FNV-1a over the words given), stored
/// with every step so that `--resume` with other flags is refused instead of mixing two
/// searches.
pub fn fingerprint(words: &[String]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for word in words {
        for byte in word.bytes().chain([0u8]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_back() {
        for label in [
            "default",
            "NCCL_ALGO=Tree",
            "NCCL_ALGO=Tree+NCCL_PROTO=LL128",
        ] {
            assert_eq!(
                Setting::parse_label(label).unwrap().to_string(),
                label,
                "{label}"
            );
        }
        assert_eq!(Setting::parse_label("NCCL_ALGO"), None);
    }

    #[test]
    fn phase_one_tries_each_value_alone_after_the_default() {
        let knobs = vec![
            Knob {
                name: "NCCL_ALGO".into(),
                values: vec!["Tree".into()],
            },
            Knob {
                name: "NCCL_PROTO".into(),
                values: vec!["Simple".into(), "LL128".into()],
            },
        ];
        let labels: Vec<String> = single_settings(&knobs)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            labels,
            [
                "default",
                "NCCL_ALGO=Tree",
                "NCCL_PROTO=Simple",
                "NCCL_PROTO=LL128"
            ]
        );
    }

    #[test]
    fn rounds_interleave_every_setting_and_rotate_the_order() {
        let settings = single_settings(&[Knob {
            name: "A".into(),
            values: vec!["1".into(), "2".into()],
        }]);
        let steps = interleaved("all_reduce", 1, &settings, 3);
        assert_eq!(steps.len(), 9);
        let order: Vec<String> = steps.iter().map(|s| s.setting.to_string()).collect();
        assert_eq!(
            order,
            ["default", "A=1", "A=2", "A=1", "A=2", "default", "A=2", "default", "A=1"]
        );
        // Nine settings, three rounds: each moves by three places a round, so the fifth
        // runs 5th, 2nd and 8th.
        let nine = single_settings(&[Knob {
            name: "B".into(),
            values: (1..=8).map(|v| v.to_string()).collect(),
        }]);
        let nine_steps = interleaved("all_reduce", 1, &nine, 3);
        let places: Vec<usize> = (1..=3)
            .map(|round| {
                nine_steps
                    .iter()
                    .filter(|s| s.round == round)
                    .position(|s| s.setting.to_string() == "B=4")
                    .unwrap()
            })
            .collect();
        assert_eq!(places, [4, 1, 7]);
        // Each round holds every setting once.
        for round in 1..=3 {
            let mut in_round: Vec<String> = steps
                .iter()
                .filter(|s| s.round == round)
                .map(|s| s.setting.to_string())
                .collect();
            in_round.sort();
            assert_eq!(in_round, ["A=1", "A=2", "default"], "round {round}");
        }
        assert_eq!(steps[4].key(), "all_reduce:p1:r2:A=2");
    }

    #[test]
    fn phase_two_combines_the_winners_without_the_full_product() {
        assert!(combined_settings(&[("A".into(), "1".into())]).is_empty());
        let two = combined_settings(&[("A".into(), "1".into()), ("B".into(), "2".into())]);
        let labels: Vec<String> = two.iter().map(ToString::to_string).collect();
        assert_eq!(labels, ["default", "A=1+B=2"]);
        let winners: Vec<(String, String)> = ["A", "B", "C", "D", "E"]
            .iter()
            .map(|n| (n.to_string(), "1".to_string()))
            .collect();
        let many = combined_settings(&winners);
        assert_eq!(many.len(), 1 + MAX_COMBINATIONS);
        assert_eq!(many[1].0.len(), 5, "all winners together first");
        assert!(many[2..].iter().all(|s| s.0.len() == 2));
        // The same variable twice keeps the first (best) value.
        let dup = combined_settings(&[
            ("A".into(), "1".into()),
            ("A".into(), "2".into()),
            ("B".into(), "1".into()),
        ]);
        assert_eq!(dup[1].to_string(), "A=1+B=1");
    }

    #[test]
    fn fingerprints_differ_when_the_search_does() {
        let a = fingerprint(&["all_reduce".into(), "-b 1M".into()]);
        assert_eq!(a, fingerprint(&["all_reduce".into(), "-b 1M".into()]));
        assert_ne!(a, fingerprint(&["all_reduce".into(), "-b 4M".into()]));
        assert_ne!(
            fingerprint(&["ab".into(), "c".into()]),
            fingerprint(&["a".into(), "bc".into()])
        );
    }
}
