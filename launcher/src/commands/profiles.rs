//! `gpudirect profiles`: the admin's view of the config the SPANK plugin reads.
//!
//! - `list`: profiles (transport, NICs, checks) and node sets;
//! - `show NAME`: one profile as the plugin parsed it, and the node sets that use it;
//! - `check`: lint: parse errors with file:line, the plugin's ownership rule, and the
//!   node-specific checks (libraries, topology file, NICs), which are errors only with
//!   `--on-node` (run on that node) and warnings elsewhere; with `--overlay FILE`, of the
//!   config with the overlay appended (what `gpudirect tune --write` makes), before the
//!   admin appends it;
//! - `explain`: the exact variables, NIC, CPUs and skipped checks the plugin would give
//!   one task.
//!
//! Everything here calls `gpudirect_core` (config, resolve, system, locality): the same
//! code the plugin runs, so what an admin sees is what a job gets.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use gpudirect_core::config::{CheckKind, Config, ConfigError, Mode, NicLocality, NodeSet, Profile};
use gpudirect_core::lint::{self, Finding, Machine, Severity};
use gpudirect_core::overlay::Overlaid;
use gpudirect_core::system::{
    check_config_file, load_config, read_config_text, short_hostname, LoadError, Ownership,
    SystemProbe,
};
use gpudirect_core::template::{Placeholder, Template};

use super::{Ctx, ExitStatus};

mod install;
use gpudirect::explain::{explain_task, Request};
use gpudirect::noteln;
use gpudirect::output::{emit, note};

/// `gpudirect profiles`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect profiles list\n  \
    gpudirect profiles show tcpx\n  \
    gpudirect profiles check --config ./gpudirect.toml\n  \
    gpudirect profiles check --on-node            # on a GPU node: its files and NICs\n  \
    gpudirect profiles check --overlay tcpx-tuned.toml   # what installing it would give\n  \
    gpudirect profiles install-overlay tcpx-tuned.toml   # as root: append it, exactly as checked\n  \
    gpudirect profiles explain --profile tcpx --node a3h-0001 --local-rank 3\n  \
    gpudirect profiles explain --mode auto --node a3m-0001 --local-rank 5 --sysfs /sys")]
pub struct ProfilesArgs {
    /// The admin config: --config, else $GPUDIRECT_CONFIG, else /etc/slurm/gpudirect.toml.
    #[arg(
        long,
        global = true,
        env = "GPUDIRECT_CONFIG",
        value_name = "FILE",
        default_value = gpudirect_core::system::DEFAULT_CONFIG
    )]
    pub config: PathBuf,

    /// What to do.
    #[command(subcommand)]
    pub command: ProfilesCommand,
}

/// The `profiles` subcommands.
#[derive(Debug, Subcommand)]
pub enum ProfilesCommand {
    /// List profiles (transport, NICs, checks) and node sets.
    List(ListArgs),
    /// Show one profile as the plugin sees it, and the node sets that use it.
    Show(ShowArgs),
    /// Lint the config; exit 1 on any error. One line per finding: FILE:LINE: LEVEL: MESSAGE.
    Check(CheckArgs),
    /// Show what the plugin gives one task: variables, NIC, CPUs, checks.
    Explain(ExplainArgs),
    /// Append a profile overlay (`gpudirect tune --write`) to the config exactly as checked:
    /// read once, checked with the config under a lock, appended, read back and checked
    /// again (as root, by the plugin's rules). Exit 1, the config unchanged, on any error.
    InstallOverlay(install::InstallArgs),
}

/// `profiles list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `profiles show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The profile.
    pub name: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `profiles check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Run on the node itself: its missing files and NICs are errors (else warnings).
    #[arg(long)]
    pub on_node: bool,
    /// The node's Slurm name, for its node set. Default: this host's short name.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Check the config with FILE's text appended, as after `cat FILE >> CONFIG`
    /// (repeatable, appended in order): a profile overlay from `gpudirect tune --write`.
    /// A problem in FILE is reported with FILE's name and line; FILE may only add
    /// profiles. FILE need not be root's: it is only read.
    #[arg(long = "overlay", value_name = "FILE")]
    pub overlays: Vec<PathBuf>,
}

/// `profiles explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The profile, as `--gpudirect=NAME` names it.
    #[arg(long, value_name = "NAME", conflicts_with = "mode")]
    pub profile: Option<String>,
    /// A mode as `--gpudirect` takes it: a profile, `auto` (the node set's) or `none`.
    /// Without --profile or --mode: SLURM_GPUDIRECT, then the node set's and config's
    /// default, as for a step without the option.
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// SLURM_GPUDIRECT as the submitting environment had it.
    #[arg(long, value_name = "MODE")]
    pub slurm_gpudirect: Option<String>,
    /// The node's Slurm name (picks the node set: NIC names, skipped checks, `auto`).
    #[arg(long, value_name = "NODE")]
    pub node: String,
    /// The task's rank on the node.
    #[arg(long, default_value_t = 0, value_name = "R")]
    pub local_rank: u32,
    /// The task's global rank. Default: the local rank.
    #[arg(long, value_name = "N")]
    pub rank: Option<u32>,
    /// Tasks of the step on the node ({local_size}).
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub ntasks_per_node: u32,
    /// Nodes in the step ({nnodes}).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub nnodes: u32,
    /// Slurm job id ({job_id}).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub job_id: u32,
    /// Slurm step id ({step_id}).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub step_id: u32,
    /// The task's CUDA_VISIBLE_DEVICES, if Slurm sets one.
    #[arg(long, value_name = "LIST")]
    pub cuda_visible_devices: Option<String>,
    /// A variable already in the task's environment (repeatable): kept unless forced.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Read PCI locality from this sysfs root (/sys on the node, or a fixture tree) for
    /// profiles with nic_locality = "sysfs". Default: /sys with --on-node, else none.
    #[arg(long, value_name = "DIR")]
    pub sysfs: Option<PathBuf>,
    /// Probe this machine for the profile's checks, as the plugin does on the node.
    #[arg(long)]
    pub on_node: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `gpudirect profiles ...`.
pub fn run(args: &ProfilesArgs, _ctx: &Ctx) -> Result<ExitStatus> {
    let path = absolute(&args.config)?;
    let shown = match &args.command {
        ProfilesCommand::List(list) => {
            let config = load_for_reading(&path)?;
            print_out(&if list.json {
                pretty(&list_json(&config))?
            } else {
                list_text(&config)
            })
        }
        ProfilesCommand::Show(show) => {
            let config = load_for_reading(&path)?;
            let profile = config.profiles.get(&show.name).with_context(|| {
                format!(
                    "{}: no profile `{}` (profiles: {})",
                    path.display(),
                    show.name,
                    config.profile_names().join(", ")
                )
            })?;
            print_out(&if show.json {
                pretty(&profile_json(&config, profile))?
            } else {
                show_text(&config, profile)
            })
        }
        ProfilesCommand::Check(check) => {
            let node = check.node.clone().unwrap_or_else(short_hostname);
            let outcome = check_config(&path, &check.overlays, check.on_node, &node);
            let mut out = String::new();
            for finding in &outcome.findings {
                out.push_str(&finding.to_string());
                out.push('\n');
            }
            print_out(&out)?;
            for added in &outcome.added {
                note(added);
            }
            let errors = outcome
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Error)
                .count();
            let warnings = outcome.findings.len() - errors;
            let checked = match check.overlays.as_slice() {
                [] => path.display().to_string(),
                overlays => format!(
                    "{} with {} appended",
                    path.display(),
                    overlays
                        .iter()
                        .map(|o| o.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            if errors > 0 {
                note(&format!(
                    "{checked}: {errors} error(s), {warnings} warning(s)"
                ));
                return Ok(ExitStatus::Problem);
            }
            note(&format!("{checked}: ok, {warnings} warning(s)"));
            Ok(())
        }
        ProfilesCommand::InstallOverlay(install) => return install::run(&path, install),
        ProfilesCommand::Explain(explain) => {
            let config = load_for_reading(&path)?;
            let report = explain_task(&config, &request(explain))?;
            print_out(&if explain.json {
                pretty(&report.to_json())?
            } else {
                report.to_string()
            })
        }
    };
    shown.map(|()| ExitStatus::Ok)
}

fn print_out(text: &str) -> Result<()> {
    Ok(emit(text)?)
}

fn pretty(value: &Value) -> Result<String> {
    Ok(serde_json::to_string_pretty(value)? + "\n")
}

/// The plugin needs an absolute path; a relative `--config` is taken from here.
fn absolute(path: &Path) -> Result<PathBuf> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    let cwd = std::env::current_dir().context("cannot resolve a relative --config")?;
    Ok(cwd.join(path))
}

/// Reads the config for display. The ownership rule is the plugin's business: a file
/// it would refuse is still shown, with a warning on stderr.
fn load_for_reading(path: &Path) -> Result<Config> {
    let config = load_config(path, Ownership::Any)
        .with_context(|| format!("cannot use the admin config {}", path.display()))?;
    if let Err(e @ LoadError::Insecure { .. }) = load_config(path, Ownership::RootOnly) {
        noteln!("warning: the plugin would refuse this config: {e}");
    }
    Ok(config)
}

// ---------------------------------------------------------------------------------------
// list / show

/// A template as the admin wrote it (placeholders back in braces).
pub fn template_text(template: &Template) -> String {
    template.expand(|p| match p {
        Placeholder::JobId => "{job_id}".into(),
        Placeholder::StepId => "{step_id}".into(),
        Placeholder::Node => "{node}".into(),
        Placeholder::Rank => "{rank}".into(),
        Placeholder::LocalRank => "{local_rank}".into(),
        Placeholder::LocalSize => "{local_size}".into(),
        Placeholder::NNodes => "{nnodes}".into(),
        Placeholder::Gpu => "{gpu}".into(),
        Placeholder::Nic => "{nic}".into(),
        Placeholder::ControlNic => "{control_nic}".into(),
        Placeholder::DataNics => "{data_nics}".into(),
        Placeholder::Cpus => "{cpus}".into(),
        Placeholder::NicNamed(name) => format!("{{nic:{name}}}"),
    })
}

fn check_names(profile: &Profile) -> Vec<&'static str> {
    profile
        .checks
        .required()
        .into_iter()
        .map(CheckKind::name)
        .collect()
}

/// "4", "1+4" (control + data), or "sysfs" when the NICs are found on the node.
fn nic_count(profile: &Profile) -> String {
    let data = if profile.data_nics.is_empty() && profile.nic_locality == NicLocality::Sysfs {
        "sysfs".to_string()
    } else {
        profile.data_nics.len().to_string()
    };
    match &profile.control_nic {
        Some(_) => format!("1+{data}"),
        None => data,
    }
}

fn mode_text(mode: &Option<Mode>) -> String {
    mode.as_ref().map_or("-".into(), ToString::to_string)
}

/// Node sets whose `auto` or default picks this profile.
fn sets_using<'c>(config: &'c Config, name: &str) -> Vec<&'c NodeSet> {
    config
        .node_sets
        .iter()
        .filter(|s| {
            s.profile.as_deref() == Some(name)
                || s.default_mode == Some(Mode::Profile(name.to_string()))
        })
        .collect()
}

fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn list_text(config: &Config) -> String {
    let mut rows = vec![vec![
        "PROFILE".to_string(),
        "TRANSPORT".into(),
        "NICS".into(),
        "CHECKS".into(),
        "DESCRIPTION".into(),
    ]];
    for profile in config.profiles.values() {
        let checks = check_names(profile);
        rows.push(vec![
            profile.name.clone(),
            profile.transport.clone().unwrap_or_else(|| "-".into()),
            nic_count(profile),
            if checks.is_empty() {
                "-".into()
            } else {
                checks.join(",")
            },
            profile.description.clone(),
        ]);
    }
    let mut out = table(&rows);
    out.push('\n');
    let mut rows = vec![vec![
        "NODE SET".to_string(),
        "HOSTS".into(),
        "PROFILE".into(),
        "DEFAULT".into(),
        "SKIPPED CHECKS".into(),
    ]];
    for set in &config.node_sets {
        let skipped: Vec<&str> = set.skip_checks.iter().map(|k| k.name()).collect();
        rows.push(vec![
            set.name.clone(),
            set.hosts_expr.clone(),
            set.profile.clone().unwrap_or_else(|| "-".into()),
            mode_text(&set.default_mode),
            if skipped.is_empty() {
                "-".into()
            } else {
                skipped.join(",")
            },
        ]);
    }
    out.push_str(&table(&rows));
    out.push_str(&format!(
        "\nconfig {} (default mode: {})\n",
        config.source,
        mode_text(&config.default_mode)
    ));
    out
}

fn node_set_json(set: &NodeSet) -> Value {
    json!({
        "name": set.name,
        "hosts": set.hosts_expr,
        "profile": set.profile,
        "default_mode": set.default_mode.as_ref().map(ToString::to_string),
        "skip_checks": set.skip_checks.iter().map(|k| k.name()).collect::<Vec<_>>(),
        "nic_names": set.nic_names,
    })
}

fn list_json(config: &Config) -> Value {
    let profiles: Vec<Value> = config
        .profiles
        .values()
        .map(|p| {
            json!({
                "name": p.name,
                "description": p.description,
                "transport": p.transport,
                "nics": nic_count(p),
                "data_nics": p.data_nics.len(),
                "checks": check_names(p),
            })
        })
        .collect();
    json!({
        "config": config.source,
        "default_mode": config.default_mode.as_ref().map(ToString::to_string),
        "profiles": profiles,
        "node_sets": config.node_sets.iter().map(node_set_json).collect::<Vec<_>>(),
    })
}

fn profile_json(config: &Config, p: &Profile) -> Value {
    json!({
        "name": p.name,
        "extends": p.extends,
        "description": p.description,
        "strict": p.strict,
        "transport": p.transport,
        "control_nic": p.control_nic,
        "data_nics": p.data_nics,
        "data_nic_class": p.data_nic_class.name(),
        "nic_locality": p.nic_locality.name(),
        "gpu_nics": p.gpu_nics,
        "nic_cpus": p.nic_cpus.iter().map(|(k, v)| (k.clone(), v.to_string())).collect::<std::collections::BTreeMap<_, _>>(),
        "pin_cpus": p.pin_cpus,
        "line_rate_gbit": p.line_rate_gbit,
        "node_line_rate_gbps": p.node_line_rate_gbps(),
        "library_dirs": p.library_dirs,
        "topology_file": p.topology_file,
        "env": p.env.iter().map(|v| json!({
            "name": v.name, "value": template_text(&v.value), "forced": v.forced,
        })).collect::<Vec<_>>(),
        "checks": {
            "nics": p.checks.nics,
            "libraries": p.checks.libraries,
            "topology_file": p.checks.topology_file,
            "rxdm_socket_dir": p.checks.rxdm_socket_dir.as_ref().map(template_text),
        },
        "node_sets": sets_using(config, &p.name).into_iter().map(node_set_json).collect::<Vec<_>>(),
    })
}

fn show_text(config: &Config, p: &Profile) -> String {
    let or_dash = |v: Option<&str>| v.unwrap_or("-").to_string();
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    let mut out = format!("profile {}: {}\n", p.name, p.description);
    let mut field = |k: &str, v: String| out.push_str(&format!("  {k:<15} {v}\n"));
    if let Some(base) = &p.extends {
        field("extends", format!("{base} (its keys, merged with these)"));
    }
    field("transport", or_dash(p.transport.as_deref()));
    field("strict", p.strict.to_string());
    field("control_nic", or_dash(p.control_nic.as_deref()));
    field(
        "data_nics",
        format!("{} ({})", list(&p.data_nics), p.data_nic_class.name()),
    );
    field("nic_locality", p.nic_locality.name().to_string());
    field("gpu_nics", list(&p.gpu_nics));
    let cpus: Vec<String> = p.nic_cpus.iter().map(|(k, v)| format!("{k}={v}")).collect();
    field("nic_cpus", list(&cpus));
    field("pin_cpus", p.pin_cpus.to_string());
    if let Some(node) = p.node_line_rate_gbps() {
        let rates: Vec<String> = p
            .line_rate_gbit
            .iter()
            .map(|(nic, g)| format!("{nic} {g}"))
            .collect();
        field(
            "line rate",
            format!("{node:.1} GB/s per node (Gbit/s: {})", rates.join(", ")),
        );
    }
    field("library_dirs", list(&p.library_dirs));
    field("topology_file", or_dash(p.topology_file.as_deref()));
    let checks = check_names(p);
    field(
        "checks",
        if checks.is_empty() {
            "-".into()
        } else {
            checks.join(", ")
        },
    );
    if !p.checks.libraries.is_empty() {
        field("  libraries", p.checks.libraries.join(", "));
    }
    if let Some(dir) = &p.checks.rxdm_socket_dir {
        field("  rxdm_socket", template_text(dir));
    }
    out.push_str("  env (forced: replaces the user's value; else the user's value is kept):\n");
    for var in &p.env {
        let tag = if var.forced { "forced" } else { "keepable" };
        out.push_str(&format!(
            "    {tag:<9} {}={}\n",
            var.name,
            template_text(&var.value)
        ));
    }
    if let Some(file) = &p.topology_file {
        out.push_str(&format!("    {:<9} NCCL_TOPO_FILE={file}\n", "keepable"));
    }
    let sets = sets_using(config, &p.name);
    if sets.is_empty() {
        out.push_str("  node sets: none (used only when asked for by name)\n");
    } else {
        out.push_str("  node sets:\n");
        for set in sets {
            let names: Vec<String> = set
                .nic_names
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let skipped: Vec<&str> = set.skip_checks.iter().map(|k| k.name()).collect();
            out.push_str(&format!(
                "    {} ({}): default {}, skips {}, NIC names {}\n",
                set.name,
                set.hosts_expr,
                mode_text(&set.default_mode),
                if skipped.is_empty() {
                    "-".into()
                } else {
                    skipped.join(",")
                },
                if names.is_empty() {
                    "as in the profile".into()
                } else {
                    names.join(" ")
                }
            ));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// check

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
        let loaded = load_config(path, Ownership::Any)
            .map(|config| (config, None))
            .map_err(|e| lint::load_failure(&file, &e));
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
    loaded: Result<(Config, Option<Overlaid>), Finding>,
    overlays: &[String],
    rights: Ownership,
    (on_node, node): (bool, &str),
) -> CheckOutcome {
    let file = path.display().to_string();
    let (config, overlaid) = match loaded {
        Ok(loaded) => loaded,
        Err(finding) => {
            return CheckOutcome {
                findings: vec![finding],
                added: Vec::new(),
            }
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
    // The config's findings first, then each overlay's, each by line.
    let order = |f: &Finding| {
        std::iter::once(file.clone())
            .chain(overlays.iter().cloned())
            .position(|source| source == f.file)
    };
    findings.sort_by_key(|f| (order(f), f.line));
    CheckOutcome {
        added: added_profiles(&config, &overlaid, &file),
        findings,
    }
}

/// The config's text (from `path`) with each overlay's `(name, text)` appended, parsed and
/// checked. The error, as a finding, names the file it is in: an overlay that is not
/// TOML, that touches a profile declared before it, or a check that fails in its text.
fn overlaid_config(
    path: &Path,
    text: &str,
    overlays: &[(String, String)],
) -> Result<(Config, Overlaid), Finding> {
    let file = path.display().to_string();
    let mut overlaid = Overlaid::new(text, &file);
    for (name, text) in overlays {
        overlaid.append(text, name).map_err(config_finding)?;
    }
    let config = overlaid.parse().map_err(config_finding)?;
    Ok((config, overlaid))
}

fn config_finding(error: ConfigError) -> Finding {
    let file = error.file.clone();
    lint::load_failure(&file, &LoadError::Config(error))
}

/// An overlay's text, read as the config is (a regular UTF-8 file of a sane size) but
/// whoever owns it; the error says why not, for a finding naming the file.
fn read_overlay(path: &Path) -> Result<String, String> {
    let full = absolute(path).map_err(|e| format!("cannot read the overlay: {e:#}"))?;
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

// ---------------------------------------------------------------------------------------
// explain

/// `profiles explain`'s flags as the library's request (ripgrep's low -> high arguments).
/// Pure.
fn request(args: &ExplainArgs) -> Request {
    Request {
        profile: args.profile.clone(),
        mode: args.mode.clone(),
        slurm_gpudirect: args.slurm_gpudirect.clone(),
        node: args.node.clone(),
        local_rank: args.local_rank,
        rank: args.rank,
        ntasks_per_node: args.ntasks_per_node,
        nnodes: args.nnodes,
        job_id: args.job_id,
        step_id: args.step_id,
        cuda_visible_devices: args.cuda_visible_devices.clone(),
        env: args.env.clone(),
        sysfs: args.sysfs.clone(),
        on_node: args.on_node,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpudirect_core::config::parse_config;

    const SHIPPED: &str = include_str!("../../../slurm-conf/gpudirect.toml");

    fn shipped() -> Config {
        parse_config(SHIPPED, "gpudirect.toml").unwrap()
    }

    fn explain(args: &[&str]) -> gpudirect::explain::Explanation {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            args: ExplainArgs,
        }
        let mut argv = vec!["explain"];
        argv.extend_from_slice(args);
        let wrap = Wrap::try_parse_from(argv).unwrap();
        explain_task(&shipped(), &request(&wrap.args)).unwrap()
    }

    #[test]
    fn template_text_round_trips_the_shipped_values() {
        let config = shipped();
        let tcpx = &config.profiles["tcpx"];
        let tx = tcpx
            .env
            .iter()
            .find(|v| v.name == "NCCL_GPUDIRECTTCPX_TX_BINDINGS")
            .unwrap();
        assert!(SHIPPED.contains(&template_text(&tx.value)));
        assert_eq!(
            template_text(tcpx.checks.rxdm_socket_dir.as_ref().unwrap()),
            "/run/tcpx-{job_id}"
        );
    }

    #[test]
    fn explain_uses_the_node_sets_names_and_marks_forced_variables() {
        let e = explain(&[
            "--profile",
            "tcpx",
            "--node",
            "a3h-0001",
            "--local-rank",
            "2",
            "--job-id",
            "42",
        ]);
        let task = e.task.as_ref().unwrap();
        assert_eq!(task.nic.as_deref(), Some("enp12s0"));
        let find = |name: &str| {
            task.set
                .iter()
                .zip(&e.origins)
                .find(|((n, _), _)| n == name)
                .map(|((_, v), o)| (v.clone(), *o))
        };
        assert_eq!(
            find("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"),
            Some(("/run/tcpx-42".into(), "forced"))
        );
        assert_eq!(
            find("NCCL_SOCKET_IFNAME"),
            Some(("enp0s12".into(), "keepable"))
        );
        assert_eq!(find("GPUDIRECT_NIC"), Some(("enp12s0".into(), "plugin")));
        assert_eq!(e.checks_run, ["nics", "libraries", "rxdm_socket_dir"]);
    }

    #[test]
    fn explain_auto_on_cpu_nodes_is_none_and_elsewhere_untouched() {
        let e = explain(&["--mode", "auto", "--node", "a3m-0001", "--local-rank", "7"]);
        assert_eq!(e.profile.as_deref(), Some("tcpxo"));
        assert_eq!(
            e.mode,
            Some(("auto".to_string(), "--gpudirect".to_string()))
        );
        // Without --sysfs the fallback table applies, with the node set's names.
        assert_eq!(e.task.as_ref().unwrap().nic.as_deref(), Some("enp142s0"));
        let e = explain(&["--node", "cpu-001"]);
        assert!(e.none_removes, "the cpu node set's default is none");
        let e = explain(&["--node", "somewhere"]);
        assert!(e.mode.is_none());
        assert!(e.to_string().contains("untouched"));
    }
}
