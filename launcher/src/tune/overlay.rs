//! `gpudirect tune --write FILE`: the winning settings as a profile overlay, a TOML
//! fragment the admin appends to the plugin's config. It declares a new profile that
//! `extends` the one the runs applied (or stands alone when they applied none), so the
//! tuned settings are opt-in (`--gpudirect=tcpx-tuned`) and the base stays as it was.

use std::fmt::Write as _;

use gpudirect_core::config::escape_controls;

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
    /// Where the overlay is written, for its install lines.
    pub file: &'a str,
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
    check_profile_name(name)
}

/// `name` when the config accepts it as a profile's name (as `profiles generate --name`
/// needs too), else why not.
pub fn check_profile_name(name: String) -> Result<String, String> {
    let valid = !name.is_empty()
        && name.len() <= MAX_PROFILE_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && !gpudirect_core::config::RESERVED_MODES.contains(&name.as_str());
    if valid {
        Ok(name)
    } else {
        Err(format!(
            "`{}` cannot name a profile (lowercase letters, digits, `-` and `_`, at most {MAX_PROFILE_NAME}, not none/auto): pass --name NAME",
            gpudirect_core::config::sanitize_for_message(&name)
        ))
    }
}

/// A TOML basic string: quotes and backslashes escaped, control characters as `\\uXXXX`.
pub(crate) fn quoted(text: &str) -> String {
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
    // A line break in quoted text would end its comment and start TOML: escaped.
    let left_out: Vec<String> = from.left_out.iter().map(|n| escape_controls(n)).collect();
    let (tune_id, written_at, measured, file) = (
        escape_controls(from.tune_id),
        escape_controls(from.written_at),
        escape_controls(from.measured),
        escape_controls(from.file),
    );
    let from = &Provenance {
        tune_id: &tune_id,
        written_at: &written_at,
        measured: &measured,
        left_out: &left_out,
        file: &file,
    };
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
        "# Install: check it, then append exactly the bytes checked (as root):\n\
         #   gpudirect profiles check --overlay {file}\n\
         #   gpudirect profiles install-overlay {file}\n\
         # then run with --gpudirect={name}; try it first with\n\
         #   gpudirect run --overlay {file} ...   (the base and the tuned settings, side by side)",
        // Quoted: a pasted line must never run more than the command (security review S7).
        file = crate::runner::shell_quote(from.file)
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

/// An overlay's profile as `gpudirect run --overlay` applies it without the plugin: the
/// base mode it extends (if any) and its variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayProfile {
    /// The profile's name.
    pub name: String,
    /// The profile it extends.
    pub extends: Option<String>,
    /// Its variables.
    pub env: std::collections::BTreeMap<String, String>,
}

/// Reads an overlay: exactly one profile, with `extends` (optional), `description` and an
/// `env` table of plain values. Anything more needs the plugin (install the overlay and
/// run the profile as a mode); `file` names it in errors.
pub fn read_overlay(text: &str, file: &str) -> Result<OverlayProfile, String> {
    let value: toml::Table =
        toml::from_str(text).map_err(|e| format!("{file}: {}", e.message().trim()))?;
    let fix = "an overlay from `gpudirect tune --write` holds one [profiles.NAME] with extends, description and env";
    let profiles = value
        .get("profiles")
        .and_then(toml::Value::as_table)
        .filter(|p| p.len() == 1 && value.len() == 1)
        .ok_or_else(|| format!("{file}: {fix}"))?;
    let Some((name, profile)) = profiles.iter().next() else {
        return Err(format!("{file}: {fix}"));
    };
    let profile = profile
        .as_table()
        .ok_or_else(|| format!("{file}: profiles.{name} is not a table ({fix})"))?;
    let mut overlay = OverlayProfile {
        name: name.clone(),
        extends: None,
        env: std::collections::BTreeMap::new(),
    };
    for (key, item) in profile {
        match (key.as_str(), item) {
            ("extends", toml::Value::String(base)) => overlay.extends = Some(base.clone()),
            ("description", toml::Value::String(_)) => {}
            ("env", toml::Value::Table(env)) => {
                for (variable, value) in env {
                    let Some(value) = value.as_str().filter(|v| !v.contains(['{', '}'])) else {
                        return Err(format!(
                            "{file}: profiles.{name}.env.{variable}: `gpudirect run --overlay` takes plain string values; install the overlay and run --variants {name} for placeholders"
                        ));
                    };
                    overlay.env.insert(variable.clone(), value.to_string());
                }
            }
            _ => {
                return Err(format!(
                    "{file}: profiles.{name}.{key}: `gpudirect run --overlay` applies extends and env only; install the overlay and run --variants {name}"
                ))
            }
        }
    }
    if overlay.env.is_empty() {
        return Err(format!(
            "{file}: profiles.{name} sets no variable (no env table)"
        ));
    }
    Ok(overlay)
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
                file: "t.toml",
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
                file: "t.toml",
            },
        );
        let value: toml::Value = toml::from_str(&alone).unwrap();
        assert!(value["profiles"]["tuned"].get("extends").is_none());
        // A line break in what the comments quote cannot start TOML of its own.
        let forged = overlay_text(
            "tuned",
            None,
            &choice,
            &Provenance {
                tune_id: "t1\n[profiles.tcpx.env]\nNCCL_NET = \"Socket\"",
                written_at: "x",
                measured: "y",
                left_out: &[],
                file: "t.toml",
            },
        );
        let value: toml::Value = toml::from_str(&forged).unwrap();
        assert!(value["profiles"].get("tcpx").is_none(), "{forged}");
        // What is written reads back as `run --overlay` applies it.
        let read = read_overlay(&text, "t.toml").unwrap();
        assert_eq!(read.name, "tcpx-tuned");
        assert_eq!(read.extends.as_deref(), Some("tcpx"));
        assert_eq!(
            read.env.get("NCCL_PROTO").map(String::as_str),
            Some("LL128")
        );
        assert_eq!(read_overlay(&alone, "t.toml").unwrap().extends, None);
    }

    #[test]
    fn overlays_that_need_the_plugin_are_refused_by_run() {
        for (text, says) in [
            ("[profiles.a]\nextends = \"b\"\n", "sets no variable"),
            ("[profiles.a.env]\nX = \"{nic}\"\n", "placeholders"),
            (
                "[profiles.a]\ndata_nics = [\"eth1\"]\n[profiles.a.env]\nX = \"1\"\n",
                "profiles.a.data_nics",
            ),
            (
                "[profiles.a.env]\nX = \"1\"\n[profiles.b.env]\nX = \"1\"\n",
                "one [profiles.NAME]",
            ),
            (
                "default_mode = \"a\"\n[profiles.a.env]\nX = \"1\"\n",
                "one [profiles.NAME]",
            ),
            ("[profiles.a\n", "t.toml: "),
        ] {
            let e = read_overlay(text, "t.toml").unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
