//! `gpudirect tune --write FILE`: the winning settings as a profile overlay, a TOML
//! fragment the admin appends to the plugin's config. It declares a new profile that
//! `extends` the one the runs applied (or stands alone when they applied none), so the
//! tuned settings are opt-in (`--gpudirect=tcpx-tuned`) and the base stays as it was.

use std::fmt::Write as _;

use super::verdict::Choice;

/// What the overlay says about where it came from.
#[derive(Debug, Clone)]
pub struct Provenance<'a> {
    /// The tune run's id.
    pub tune_id: &'a str,
    /// When it was written, RFC 3339.
    pub written_at: &'a str,
    /// What was measured: collectives, ranks, sizes, rounds.
    pub measured: &'a str,
    /// Band winners left out, and why.
    pub left_out: &'a [String],
}

/// The longest profile name the config accepts.
const MAX_PROFILE_NAME: usize = 32;

/// The overlay profile's name: `--name`, else `BASE-tuned`, else `tuned`; checked as the
/// config checks profile names.
pub fn profile_name(requested: Option<&str>, base: Option<&str>) -> Result<String, String> {
    let name = match (requested, base) {
        (Some(n), _) => n.to_string(),
        (None, Some(b)) => format!("{b}-tuned"),
        (None, None) => "tuned".to_string(),
    };
    let valid = !name.is_empty()
        && name.len() <= MAX_PROFILE_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name != "none"
        && name != "auto";
    if valid {
        Ok(name)
    } else {
        Err(format!(
            "`{}` cannot name a profile (lowercase letters, digits, `-` and `_`, at most {MAX_PROFILE_NAME}, not none/auto): pass --name NAME",
            gpudirect_core::config::sanitize_for_message(&name)
        ))
    }
}

/// A TOML basic string (the text is printable ASCII: knob values are checked so).
fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The overlay's text: comments on what was measured and how to install it, then the
/// profile.
pub fn overlay_text(name: &str, base: Option<&str>, choice: &Choice, from: &Provenance) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# Written by `gpudirect tune` (run {}) at {}.",
        from.tune_id, from.written_at
    );
    let _ = writeln!(text, "# Measured: {}.", from.measured);
    let _ = writeln!(
        text,
        "# {} won with a mean gain of {:+.1}% over the bands:",
        choice.setting, choice.mean_gain_pct
    );
    for (collective, band, gain) in &choice.wins {
        let _ = writeln!(text, "#   {collective} {band}: {gain:+.1}%");
    }
    let _ = writeln!(
        text,
        "# Only a setting that won somewhere and lost nowhere is written: variables apply at\n\
         # every message size, and the sizes above are all that was measured."
    );
    for note in from.left_out {
        let _ = writeln!(text, "# Left out: {note}");
    }
    let _ = writeln!(
        text,
        "# Install: append to the plugin's config after checking it:\n\
         #   gpudirect profiles check --overlay THIS_FILE\n\
         #   cat THIS_FILE >> /etc/slurm/gpudirect.toml\n\
         # then run with --gpudirect={name}; try it first with\n\
         #   gpudirect run --overlay THIS_FILE ...   (the base and the tuned settings, side by side)"
    );
    let _ = writeln!(text, "\n[profiles.{name}]");
    if let Some(base) = base {
        let _ = writeln!(text, "extends = {}", quoted(base));
    }
    let description = match base {
        Some(b) => format!(
            "{b} with {} (gpudirect tune {})",
            choice.setting, from.tune_id
        ),
        None => format!("{} (gpudirect tune {})", choice.setting, from.tune_id),
    };
    let _ = writeln!(text, "description = {}", quoted(&description));
    let _ = writeln!(text, "\n[profiles.{name}.env]");
    for (variable, value) in &choice.setting.0 {
        let _ = writeln!(text, "{variable} = {}", quoted(value));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::plan::Setting;

    #[test]
    fn names_come_from_the_base_and_are_checked() {
        assert_eq!(profile_name(None, Some("tcpx")).unwrap(), "tcpx-tuned");
        assert_eq!(profile_name(None, None).unwrap(), "tuned");
        assert_eq!(profile_name(Some("fast"), Some("tcpx")).unwrap(), "fast");
        assert!(profile_name(Some("Fast"), None)
            .unwrap_err()
            .contains("--name"));
        assert!(profile_name(Some("none"), None).is_err());
        assert!(profile_name(None, Some(&"x".repeat(30))).is_err());
    }

    #[test]
    fn the_overlay_declares_an_extending_profile_with_the_winning_variables() {
        let choice = Choice {
            setting: Setting::parse_label("NCCL_MIN_NCHANNELS=32+NCCL_PROTO=LL128").unwrap(),
            mean_gain_pct: 4.25,
            wins: vec![("all_reduce".into(), ">= 64 MiB".into(), 4.0)],
        };
        let left_out = vec!["NCCL_ALGO=Tree wins ... but loses ...".to_string()];
        let text = overlay_text(
            "tcpx-tuned",
            Some("tcpx"),
            &choice,
            &Provenance {
                tune_id: "t1",
                written_at: "2026-11-30T22:00:00Z",
                measured: "all_reduce",
                left_out: &left_out,
            },
        );
        let value: toml::Value = toml::from_str(&text).unwrap();
        let profile = &value["profiles"]["tcpx-tuned"];
        assert_eq!(profile["extends"].as_str(), Some("tcpx"));
        assert_eq!(profile["env"]["NCCL_MIN_NCHANNELS"].as_str(), Some("32"));
        assert_eq!(profile["env"]["NCCL_PROTO"].as_str(), Some("LL128"));
        assert!(text.contains("# Left out: NCCL_ALGO=Tree"), "{text}");
        let alone = overlay_text(
            "tuned",
            None,
            &choice,
            &Provenance {
                tune_id: "t1",
                written_at: "x",
                measured: "y",
                left_out: &[],
            },
        );
        let value: toml::Value = toml::from_str(&alone).unwrap();
        assert!(value["profiles"]["tuned"].get("extends").is_none());
    }
}
