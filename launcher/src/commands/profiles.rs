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
use serde_json::Value;

use gpudirect_core::config::Config;
use gpudirect_core::lint::Severity;
use gpudirect_core::system::{load_config, short_hostname, LoadError, Ownership};

use super::{Ctx, ExitStatus};

mod install;
use gpudirect::explain::{explain_task, Request};
use gpudirect::noteln;
use gpudirect::output::{emit, note};
use gpudirect::profiles::check::{check_config, check_texts, read_overlay};
use gpudirect::profiles::view::{list_json, list_text, profile_json, show_text};

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
    /// Lint the config (every error, not only the first); exit 1 on any error. One line per
    /// finding, in the file's order: FILE:LINE: LEVEL: MESSAGE.
    Check(CheckArgs),
    /// Show what the plugin gives one task: variables, NIC, CPUs, checks.
    Explain(ExplainArgs),
    /// Write a profile from this node's sysfs: data and control NICs, each GPU's NIC by PCI
    /// distance (switch, then root complex, then NUMA node), the NICs' CPUs and the line
    /// rate, each with a comment saying why. With --base, an overlay that keeps that
    /// profile's transport and replaces only the NIC facts.
    Generate(GenerateArgs),
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

/// `profiles generate`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect profiles generate > node.toml                 # on a GPU node: its /sys and /proc\n  \
    gpudirect profiles generate --base tcpx --name tcpx-here -o tcpx-here.toml\n  \
    gpudirect profiles generate --sysfs ./a3-high --proc ./a3-high.proc   # a recorded tree\n  \
    gpudirect profiles check --overlay node.toml\n\n\
    Exit 0 with the profile on stdout (warnings on stderr and as comments: a GPU with no NIC\n\
    under its switch, no control NIC); exit 3 when the tree has no GPU or no data NIC, or\n\
    when --base names NICs the node lacks.")]
pub struct GenerateArgs {
    /// The sysfs tree to read (a recorded copy for another node).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// The /proc to read the default route (net/route) and the driver's GPUs from.
    /// Default: /proc when --sysfs is /sys, else none (the control NIC is then told by speed).
    #[arg(long = "proc", value_name = "DIR")]
    pub proc_dir: Option<PathBuf>,
    /// The new profile's name.
    #[arg(long, value_name = "NAME", default_value = "generated")]
    pub name: String,
    /// Write an overlay that extends this profile of the config (its transport, variables
    /// and checks kept; the NIC facts this node's).
    #[arg(long, visible_alias = "extends", value_name = "PROFILE")]
    pub base: Option<String>,
    /// The node named in the profile's description. Default: this host's short name.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Write to FILE (replaced whole) instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Compare the map with the topology NCCL dumped on this node (a run with
    /// NCCL_TOPO_DUMP_FILE=DUMP): each GPU's NICs must be among those NCCL finds nearest.
    /// The comparison goes to stderr and into the profile's comments; exit 1 if any differ.
    #[arg(long, value_name = "DUMP")]
    pub compare_nccl: Option<PathBuf>,
    /// Also write an NCCL topology file (NCCL_TOPO_FILE) that puts each GPU next to its
    /// NICs under a virtual PCIe switch: for a VM whose PCI tree hides the real one.
    #[arg(long, value_name = "FILE")]
    pub topo_xml: Option<PathBuf>,
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
    /// Tasks of the step on the node ({local_size}). Default: as many as the profile maps
    /// GPUs (`gpu_nics`), else 8.
    #[arg(long, value_name = "N")]
    pub ntasks_per_node: Option<u32>,
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
        ProfilesCommand::Generate(generate) => return run_generate(&path, generate),
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

/// `profiles generate`: the node's facts, the base checked, the profile written.
fn run_generate(config_path: &Path, args: &GenerateArgs) -> Result<ExitStatus> {
    use gpudirect_core::derive::{derive, NodeFacts};
    let proc_dir = match (&args.proc_dir, args.sysfs == Path::new("/sys")) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => Some(PathBuf::from("/proc")),
        (None, false) => None,
    };
    gpudirect::tune::overlay::check_profile_name(args.name.clone())
        .map_err(|e| anyhow::anyhow!("gpudirect profiles generate: --name: {e}"))?;
    let facts = NodeFacts::read(&args.sysfs, proc_dir.as_deref())
        .map_err(|e| anyhow::anyhow!("gpudirect profiles generate: {e}"))?;
    let derived =
        derive(&facts).map_err(|e| anyhow::anyhow!("gpudirect profiles generate: {e}"))?;
    if let Some(base) = &args.base {
        let config = load_for_reading(config_path)?;
        gpudirect::profiles::generate::check_base(&config, base, &derived)
            .map_err(|e| anyhow::anyhow!("gpudirect profiles generate: {e:#}"))?;
    }
    for w in &derived.warnings {
        note(&format!("gpudirect profiles generate: warning: {w}"));
    }
    let mut agrees = true;
    let mut compared = Vec::new();
    if let Some(dump_path) = &args.compare_nccl {
        let text = std::fs::read_to_string(dump_path)
            .with_context(|| format!("--compare-nccl {}", dump_path.display()))?;
        let dump = gpudirect::nccl_output::topo::parse_topo(&text)
            .map_err(|e| anyhow::anyhow!("--compare-nccl {}: {e}", dump_path.display()))?;
        let (lines, all) = gpudirect::profiles::generate::compare_with_nccl(&derived, &dump);
        agrees = all;
        for line in &lines {
            note(&format!(
                "gpudirect profiles generate: NCCL's topology ({}): {line}",
                dump_path.display()
            ));
        }
        compared = lines
            .into_iter()
            .map(|l| format!("# NCCL's topology ({}): {l}", dump_path.display()))
            .collect();
    }
    let node = args.node.clone().unwrap_or_else(short_hostname);
    let source = args.sysfs.display().to_string();
    let mut text = gpudirect::profiles::generate::render(
        &derived,
        &gpudirect::profiles::generate::Request {
            name: &args.name,
            base: args.base.as_deref(),
            source: &source,
            node: &node,
        },
    );
    if !compared.is_empty() {
        text = format!("{}\n{text}", compared.join("\n"));
    }
    if let Some(file) = &args.topo_xml {
        let xml = gpudirect::profiles::generate::topo_xml(&derived, &facts);
        write_replacing(file, &xml)?;
        note(&format!(
            "gpudirect profiles generate: wrote NCCL's topology file {} (set NCCL_TOPO_FILE to it, or the profile's topology_file)",
            file.display()
        ));
    }
    match &args.output {
        Some(file) => {
            write_replacing(file, &text)?;
            note(&format!(
                "gpudirect profiles generate: wrote profile {} to {}",
                args.name,
                file.display()
            ));
        }
        None => print_out(&text)?,
    }
    Ok(if agrees {
        ExitStatus::Ok
    } else {
        ExitStatus::Problem
    })
}

/// Writes `text` to `file` whole ([`gpudirect::output::replace_file`]).
fn write_replacing(file: &Path, text: &str) -> Result<()> {
    gpudirect::output::replace_file(file, text.as_bytes())
        .with_context(|| format!("cannot write {}", file.display()))
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

    /// Issue #33: a node whose profile maps one GPU has one task by default (`local rank
    /// 0 of 1`, not `of 8`); --ntasks-per-node still says otherwise.
    #[test]
    fn explain_counts_the_tasks_the_profile_maps() {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            args: ExplainArgs,
        }
        let config = parse_config(
            "[profiles.box]\ntransport = \"Socket\"\ndata_nics = [\"eth1\"]\ngpu_nics = [\"eth1\"]\n\
             [[node_set]]\nname = \"box\"\nhosts = \"node1\"\nprofile = \"box\"\n",
            "gpudirect.toml",
        )
        .unwrap();
        let text = |extra: &[&str]| {
            let mut argv = vec!["explain", "--profile", "box", "--node", "node1"];
            argv.extend_from_slice(extra);
            let wrap = Wrap::try_parse_from(argv).unwrap();
            explain_task(&config, &request(&wrap.args))
                .unwrap()
                .to_string()
        };
        assert!(text(&[]).contains("local rank 0 of 1,"), "{}", text(&[]));
        assert!(text(&["--ntasks-per-node", "4"]).contains("local rank 0 of 4,"));
        let wrap = Wrap::try_parse_from([
            "explain",
            "--profile",
            "box",
            "--node",
            "node1",
            "--local-rank",
            "3",
        ])
        .unwrap();
        let err = explain_task(&config, &request(&wrap.args))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--local-rank 3 is not below --ntasks-per-node 1"),
            "{err}"
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
