//! `profiles check`: the lint of the config (with overlays appended, as `tune --write` makes
//! them and `install-overlay` appends them), by the plugin's own code.

use std::path::{Path, PathBuf};

use gpudirect_core::config::{config_errors, Config, ConfigError};
use gpudirect_core::lint::{self, Finding, Machine, Severity};
use gpudirect_core::overlay::Overlaid;
use gpudirect_core::system::{
    check_config_file, read_config_text, LoadError, Ownership, SystemProbe,
};

use super::view::{check_names, nic_count, template_text};

/// What `profiles check` found.
#[derive(Debug, Clone, Default)]
pub struct CheckOutcome {
    /// The findings: the config's by line, then each overlay's.
    pub findings: Vec<Finding>,
    /// One line for each profile an overlay adds, saying what it would be once appended.
    pub added: Vec<String>,
}

/// Lints the config at `path` ([`gpudirect_core::lint`]) with each of `overlays` appended
/// ([`Overlaid`]; none: the config alone). `on_node`: this machine is `node`, so its
/// missing files and NICs are errors; elsewhere they are warnings. A finding in an
/// overlay's text names the overlay and its own line.
pub fn check_config(path: &Path, overlays: &[PathBuf], on_node: bool, node: &str) -> CheckOutcome {
    let file = path.display().to_string();
    if overlays.is_empty() {
        let loaded = read_config_text(path, Ownership::Any)
            .map_err(|e| vec![lint::load_failure(&file, &e)])
            .and_then(|(text, _)| {
                config_errors(&text, &file)
                    .map(|config| (config, None))
                    .map_err(|all| all.into_iter().map(config_finding).collect())
            });
        return check_loaded(path, loaded, &[], Ownership::RootOnly, (on_node, node));
    }
    let texts = read_config_text(path, Ownership::Any)
        .map_err(|e| lint::load_failure(&file, &e))
        .and_then(|(text, _)| {
            let overlays = overlays
                .iter()
                .map(|o| {
                    let name = o.display().to_string();
                    read_overlay(o)
                        .map(|text| (name.clone(), text))
                        .map_err(|message| Finding {
                            file: name,
                            line: 1,
                            severity: Severity::Error,
                            message,
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((text, overlays))
        });
    match texts {
        Ok((text, overlays)) => {
            check_texts(path, &text, &overlays, Ownership::RootOnly, (on_node, node))
        }
        Err(finding) => CheckOutcome {
            findings: vec![finding],
            added: Vec::new(),
        },
    }
}

/// [`check_config`] of texts already read: the config's (`path` names it and is checked
/// for who may change it) with each overlay's `(name, text)` appended. What
/// `install-overlay` checks: the very bytes it then appends. `rights`: the rule the
/// config file must meet (the plugin's, `RootOnly`; tests widen it).
pub fn check_texts(
    path: &Path,
    config_text: &str,
    overlays: &[(String, String)],
    rights: Ownership,
    (on_node, node): (bool, &str),
) -> CheckOutcome {
    let loaded = overlaid_config(path, config_text, overlays)
        .map(|(config, overlaid)| (config, Some(overlaid)));
    let names: Vec<String> = overlays.iter().map(|(n, _)| n.clone()).collect();
    check_loaded(path, loaded, &names, rights, (on_node, node))
}

/// The lint of a loaded config (with the overlays it was appended with, named in order).
fn check_loaded(
    path: &Path,
    loaded: Result<(Config, Option<Overlaid>), Vec<Finding>>,
    overlays: &[String],
    rights: Ownership,
    (on_node, node): (bool, &str),
) -> CheckOutcome {
    let file = path.display().to_string();
    // The config's findings first, then each overlay's, each by line.
    let order = |f: &Finding| {
        let source = std::iter::once(&file)
            .chain(overlays)
            .position(|source| *source == f.file);
        (source, f.line)
    };
    let (config, overlaid) = match loaded {
        Ok(loaded) => loaded,
        Err(mut findings) => {
            findings.sort_by_key(order);
            return CheckOutcome {
                findings,
                added: Vec::new(),
            };
        }
    };
    let mut findings = Vec::new();
    // The plugin runs as root and refuses a config others could change: always an error,
    // wherever `check` runs, since it is a property of the file. (Overlays are only read
    // here; once appended, they are the config's text.)
    if let Err(e @ LoadError::Insecure { .. }) = check_config_file(path, rights) {
        findings.push(lint::load_failure(&file, &e));
    }
    let machine = Machine {
        node,
        on_node,
        probe: &SystemProbe::default(),
    };
    findings.extend(lint::lint(&config, &machine));
    findings.sort_by_key(|f| f.line);
    let Some(overlaid) = overlaid else {
        return CheckOutcome {
            findings,
            added: Vec::new(),
        };
    };
    for finding in &mut findings {
        let (source, line) = overlaid.locate(finding.line);
        if !source.is_empty() {
            finding.file = source.to_string();
            finding.line = line;
        }
    }
    for gap in overlaid.unterminated() {
        findings.push(Finding {
            file: gap.source.clone(),
            line: gap.line,
            // An error (security review S7): `cat >>` would join the overlay's first line
            // to this one, and what is installed would not be what was checked.
            severity: Severity::Error,
            message: format!(
                "no line break at the end: appended after it, {}'s first line would join this one; end the file with one (echo >> {})",
                gap.next, gap.source
            ),
        });
    }
    findings.sort_by_key(order);
    CheckOutcome {
        added: added_profiles(&config, &overlaid, &file),
        findings,
    }
}

/// The config's text (from `path`) with each overlay's `(name, text)` appended, parsed and
/// checked. The errors, as findings, name the file each is in: an overlay that is not
/// TOML, that touches a profile declared before it (either stops the check there), or
/// every check that fails in the texts.
fn overlaid_config(
    path: &Path,
    text: &str,
    overlays: &[(String, String)],
) -> Result<(Config, Overlaid), Vec<Finding>> {
    let file = path.display().to_string();
    let mut overlaid = Overlaid::new(text, &file);
    for (name, text) in overlays {
        overlaid
            .append(text, name)
            .map_err(|e| vec![config_finding(e)])?;
    }
    let config = overlaid
        .parse_all()
        .map_err(|all| all.into_iter().map(config_finding).collect::<Vec<_>>())?;
    Ok((config, overlaid))
}

fn config_finding(error: ConfigError) -> Finding {
    let file = error.file.clone();
    lint::load_failure(&file, &LoadError::Config(error))
}

/// An overlay's text, read as the config is (a regular UTF-8 file of a sane size) but
/// whoever owns it; the error says why not, for a finding naming the file.
pub fn read_overlay(path: &Path) -> Result<String, String> {
    let full = std::path::absolute(path).map_err(|e| format!("cannot read the overlay: {e}"))?;
    match read_config_text(&full, Ownership::Any) {
        Ok((text, _)) => Ok(text),
        Err(LoadError::Io { source, .. }) => Err(format!("cannot read the overlay: {source}")),
        Err(LoadError::Invalid { problem, .. }) => {
            Err(format!("cannot use the overlay: {problem}"))
        }
        Err(other) => Err(other.to_string()),
    }
}

/// For each profile an overlay declares: where, what it extends, and what it is once
/// appended (transport, NICs, checks), with the variables the overlay writes and the
/// values they replace.
fn added_profiles(config: &Config, overlaid: &Overlaid, file: &str) -> Vec<String> {
    let mut out = Vec::new();
    for profile in config.profiles.values() {
        let (source, line) = overlaid.locate(profile.lines.name);
        if source.is_empty() || source == file {
            continue;
        }
        let base = profile
            .extends
            .as_ref()
            .and_then(|b| config.profiles.get(b));
        let written: Vec<String> = profile
            .env
            .iter()
            .filter(|var| overlaid.locate(var.line).0 == source)
            .map(|var| {
                let value = template_text(&var.value);
                let was = base
                    .and_then(|b| b.env.iter().find(|v| v.name == var.name))
                    .map(|v| template_text(&v.value));
                match (base, was) {
                    (Some(b), Some(was)) => format!("{}={value} ({}: {was})", var.name, b.name),
                    (Some(_), None) => format!("{}={value} (new)", var.name),
                    (None, _) => format!("{}={value}", var.name),
                }
            })
            .collect();
        let checks = check_names(profile);
        // What else the profile does once appended, beyond [env] (security review S7(c)):
        // every key that changes what a task loads or where it runs.
        let mut does = Vec::new();
        if !profile.library_dirs.is_empty() {
            does.push(format!("library_dirs {}", profile.library_dirs.join(",")));
        }
        if let Some(file) = &profile.topology_file {
            does.push(format!("topology_file {file}"));
        }
        let forced: Vec<&str> = profile
            .env
            .iter()
            .filter(|v| v.forced)
            .map(|v| v.name.as_str())
            .collect();
        if !forced.is_empty() {
            does.push(format!("forced {}", forced.join(",")));
        }
        if profile.strict {
            does.push("strict".into());
        }
        if profile.pin_cpus {
            does.push("pin_cpus".into());
        }
        out.push(format!(
            "{source}:{line}: profile {}{}: transport {}, NICs {}, checks {}, {}{} variable(s){}",
            profile.name,
            profile
                .extends
                .as_ref()
                .map_or(String::new(), |b| format!(" (extends {b})")),
            profile.transport.as_deref().unwrap_or("-"),
            nic_count(profile),
            if checks.is_empty() {
                "-".into()
            } else {
                checks.join(",")
            },
            does.iter().map(|d| format!("{d}, ")).collect::<String>(),
            profile.env.len(),
            if written.is_empty() {
                String::new()
            } else {
                format!(": {}", written.join(", "))
            }
        ));
    }
    out
}
