//! Lints on a checked config, for `gpudirect profiles check`: what parses but is likely
//! wrong, and what a profile's node checks find on one machine.
//!
//! - Schema lints hold everywhere: RDMA device names where interfaces are expected (and
//!   the reverse), `{nic}` where it is empty or gives the wrong kind of name, node set NIC
//!   mappings that no profile uses. Always warnings: the plugin accepts such a config.
//! - Node lints run the profile's checks, as the plugin runs them on a node, against a
//!   [`NodeProbe`] (missing libraries, topology file, NICs). On the node they are errors;
//!   elsewhere they are warnings, since the machine running `check` need not be a node.
//!   A profile that `extends` another and fails the same check at the same (inherited)
//!   line is named in the base's finding instead of getting its own.
//!
//! Every finding names the line of the key it is about, from the lines the checked
//! [`Config`] keeps. This module reads nothing itself: the probe is the caller's.

use std::fmt;

use crate::config::{CheckKind, Config, ConfigError, NicClass, NicLocality, Profile};
use crate::resolve::{plan_node_with_locality, NodeProbe, Resolved, StepFacts};
use crate::system::LoadError;
use crate::template::Placeholder;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Worth a look; does not fail `check`.
    Warning,
    /// Fails `check` (exit 1).
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One lint finding, printed `FILE:LINE: SEVERITY: MESSAGE` (line 1 for the file as a
/// whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The config file.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// How bad.
    pub severity: Severity,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line per finding, whatever the parser's message looks like.
        let message: Vec<&str> = self
            .message
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        write!(
            f,
            "{}:{}: {}: {}",
            self.file,
            self.line,
            self.severity,
            message.join("; ")
        )
    }
}

/// The machine the node lints look at.
#[derive(Clone, Copy)]
pub struct Machine<'a> {
    /// The node's name.
    pub node: &'a str,
    /// This machine is `node`: only its node set's profile is checked, and a failure is an
    /// error. Otherwise every profile is checked, and a failure is a warning.
    pub on_node: bool,
    /// What the checks read.
    pub probe: &'a dyn NodeProbe,
}

/// The one finding for a config file that could not be used at all (`file` names it): an
/// error at the parser's line for a config error, else at line 1. Also for a file the
/// plugin would refuse ([`LoadError::Insecure`]): a property of the file, so an error
/// wherever `check` runs.
pub fn load_failure(file: &str, error: &LoadError) -> Finding {
    match error {
        LoadError::Config(e) => config_error(file, e),
        e => finding(file, 1, Severity::Error, e.to_string()),
    }
}

fn config_error(file: &str, e: &ConfigError) -> Finding {
    let message = match &e.key {
        Some(key) => format!("{key}: {}", e.message),
        None => e.message.clone(),
    };
    finding(file, e.line.unwrap_or(1), Severity::Error, message)
}

fn finding(file: &str, line: usize, severity: Severity, message: String) -> Finding {
    Finding {
        file: file.to_string(),
        line,
        severity,
        message,
    }
}

/// Every lint of `config` (schema lints, then node lints on `machine`), by line.
pub fn lint(config: &Config, machine: &Machine<'_>) -> Vec<Finding> {
    let mut findings = schema_findings(config);
    findings.extend(node_findings(config, machine));
    findings.sort_by_key(|f| f.line);
    findings
}

/// Lints that hold everywhere: they are about the config, not a node.
pub fn schema_findings(config: &Config) -> Vec<Finding> {
    let file = config.source.as_str();
    let warning = |line: usize, message: String| finding(file, line, Severity::Warning, message);
    let mut out = Vec::new();
    for p in config.profiles.values() {
        let data_nics_line = p.lines.data_nics.unwrap_or(p.lines.name);
        for nic in &p.data_nics {
            let looks_rdma = nic.starts_with("mlx") || nic.starts_with("rdmap");
            let looks_net = ["eth", "enp", "ens", "eno", "ib"]
                .iter()
                .any(|p| nic.starts_with(p));
            match p.data_nic_class {
                NicClass::Net if looks_rdma => out.push(warning(
                    data_nics_line,
                    format!(
                        "profiles.{}.data_nics: `{nic}` looks like an RDMA device, not an interface: set data_nic_class = \"infiniband\" (checked under /sys/class/infiniband)",
                        p.name
                    ),
                )),
                NicClass::Infiniband if looks_net && !looks_rdma => out.push(warning(
                    data_nics_line,
                    format!(
                        "profiles.{}.data_nics: `{nic}` looks like an interface name, but data_nic_class = \"infiniband\" wants RDMA device names (ibv_devices)",
                        p.name
                    ),
                )),
                _ => {}
            }
        }
        for var in &p.env {
            let uses_nic = var
                .value
                .placeholders()
                .any(|ph| matches!(ph, Placeholder::Nic));
            if var.name == "NCCL_IB_HCA" && uses_nic && p.data_nic_class == NicClass::Net {
                out.push(warning(
                    var.line,
                    format!(
                        "profiles.{}.env.NCCL_IB_HCA: {{nic}} gives interface names here, but NCCL_IB_HCA takes RDMA device names: set data_nic_class = \"infiniband\"",
                        p.name
                    ),
                ));
            }
            if uses_nic && p.gpu_nics.is_empty() && p.nic_locality == NicLocality::Config {
                out.push(warning(
                    var.line,
                    format!(
                        "profiles.{}.env.{}: {{nic}} is empty without gpu_nics or nic_locality = \"sysfs\"",
                        p.name, var.name
                    ),
                ));
            }
        }
    }
    for (index, set) in config.node_sets.iter().enumerate() {
        let Some(profile) = set.profile.as_ref().and_then(|p| config.profiles.get(p)) else {
            continue;
        };
        let declared: Vec<&String> = profile
            .control_nic
            .iter()
            .chain(profile.data_nics.iter())
            .collect();
        for logical in set.nic_names.keys() {
            if !declared.contains(&logical) {
                out.push(warning(
                    set.line,
                    format!(
                        "node_set[{index}] ({}).nic_names: `{logical}` is not a NIC of profile {} ({}): the mapping is never used",
                        set.name,
                        profile.name,
                        declared.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
    }
    out
}

/// The profiles' checks against `machine`, as the plugin runs them on a node.
pub fn node_findings(config: &Config, machine: &Machine<'_>) -> Vec<Finding> {
    let file = config.source.as_str();
    let Machine {
        node,
        on_node,
        probe,
    } = *machine;
    let severity = if on_node {
        Severity::Error
    } else {
        Severity::Warning
    };
    let set = if on_node {
        config.node_set_for(node)
    } else {
        None
    };
    // On a node, only what can apply there: its set's profile; else every profile.
    let profiles: Vec<&Profile> = match set.and_then(|s| s.profile.as_ref()) {
        Some(name) => config.profiles.get(name).into_iter().collect(),
        None => config.profiles.values().collect(),
    };
    let suffix = if on_node {
        format!(" on node {node}")
    } else {
        " (here; an error only with --on-node on the node)".to_string()
    };
    // Each problem as (profile, line, what is wrong), the profile's name put in front last.
    let mut found: Vec<(&Profile, usize, String)> = Vec::new();
    for profile in &profiles {
        let profile = *profile;
        let lines = &profile.lines;
        let skipped: Vec<CheckKind> = set.map(|s| s.skip_checks.clone()).unwrap_or_default();
        let resolved = Resolved {
            profile,
            node_set: set,
            ras: config.ras,
            watch: None,
        };
        let step = StepFacts {
            node: node.to_string(),
            nnodes: 1,
            local_size: 1,
            ..StepFacts::default()
        };
        let plan = plan_node_with_locality(resolved, step, probe, None);
        // One finding per check: eight missing NICs are one problem.
        for kind in CheckKind::ALL.into_iter().chain([CheckKind::Ownership]) {
            let failures: Vec<_> = plan.failures.iter().filter(|f| f.kind == kind).collect();
            let Some(first) = failures.first() else {
                continue;
            };
            let line = match kind {
                CheckKind::Nics => lines.data_nics,
                CheckKind::Libraries => lines.check_libraries,
                CheckKind::TopologyFile => lines.topology_file,
                // The socket directory exists only while a job runs: not a lint.
                CheckKind::RxdmSocketDir => continue,
                // Each problem names its key (library_dirs, topology_file, env.NAME).
                CheckKind::Ownership => lines.library_dirs.or(lines.topology_file),
                // gpudirect health's, never in a node plan.
                CheckKind::NicSpeed | CheckKind::Gpus | CheckKind::NicCounters => continue,
            };
            let problems: Vec<&str> = failures.iter().map(|f| f.problem.as_str()).collect();
            found.push((
                profile,
                line.unwrap_or(lines.name),
                format!(
                    "{}: {} ({}){suffix}",
                    kind.name(),
                    problems.join("; "),
                    first.fix
                ),
            ));
        }
        if !skipped.contains(&CheckKind::Libraries) {
            for dir in &profile.library_dirs {
                if !probe.dir_exists(dir) {
                    found.push((
                        profile,
                        lines.library_dirs.unwrap_or(lines.name),
                        format!("library_dirs: {dir} does not exist{suffix}"),
                    ));
                }
            }
        }
        // A topology file is exported whether or not the profile asks to check it.
        if let Some(topology) = &profile.topology_file {
            if !profile.checks.topology_file
                && !skipped.contains(&CheckKind::TopologyFile)
                && !probe.file_readable(topology)
            {
                found.push((
                    profile,
                    lines.topology_file.unwrap_or(lines.name),
                    format!("topology_file: {topology} is not readable{suffix}"),
                ));
            }
        }
    }
    // A profile that extends another fails what it inherits as its base does, at the base's
    // lines: one finding, for the base, naming both.
    let repeats = |p: &Profile, line: usize, what: &str| {
        p.extends.as_deref().is_some_and(|base| {
            found
                .iter()
                .any(|(q, l, w)| q.name == base && *l == line && w == what)
        })
    };
    found
        .iter()
        .filter(|(p, line, what)| !repeats(p, *line, what))
        .map(|(p, line, what)| {
            let also: Vec<&str> = found
                .iter()
                .filter(|(q, l, w)| {
                    q.extends.as_deref() == Some(p.name.as_str()) && l == line && w == what
                })
                .map(|(q, _, _)| q.name.as_str())
                .collect();
            let who = if also.is_empty() {
                format!("profile {}", p.name)
            } else {
                format!(
                    "profile {} (and {}, which extend{} it)",
                    p.name,
                    also.join(", "),
                    if also.len() == 1 { "s" } else { "" }
                )
            };
            finding(file, *line, severity, format!("{who}: {what}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_config;
    use crate::resolve::AssumeHealthy;

    /// A node where nothing is installed and no NIC exists.
    struct BareNode;

    impl NodeProbe for BareNode {
        fn nic_up(&self, _: &str) -> Option<bool> {
            None
        }
        fn file_exists(&self, _: &str) -> bool {
            false
        }
        fn file_readable(&self, _: &str) -> bool {
            false
        }
        fn dir_exists(&self, _: &str) -> bool {
            false
        }
    }

    fn config(text: &str) -> Config {
        match parse_config(text, "/etc/slurm/gpudirect.toml") {
            Ok(config) => config,
            Err(e) => panic!("{e}\n{text}"),
        }
    }

    fn off_node(config: &Config) -> Vec<Finding> {
        lint(
            config,
            &Machine {
                node: "login1",
                on_node: false,
                probe: &BareNode,
            },
        )
    }

    /// Whether one finding is at `line` with `severity` and a message that starts so.
    fn has(findings: &[Finding], line: usize, severity: Severity, start: &str) -> bool {
        findings
            .iter()
            .any(|f| f.line == line && f.severity == severity && f.message.starts_with(start))
    }

    /// Asserts that each `(line, start)` is a warning at that line whose message starts so.
    #[track_caller]
    fn assert_warnings(findings: &[Finding], expected: &[(usize, &str)]) {
        for &(line, start) in expected {
            assert!(
                has(findings, line, Severity::Warning, start),
                "no warning at line {line} starting {start:?}: {findings:#?}"
            );
        }
    }

    #[test]
    fn findings_print_one_line_with_file_line_and_severity() {
        let f = finding(
            "/etc/slurm/gpudirect.toml",
            3,
            Severity::Warning,
            "first\n  second\n".into(),
        );
        assert_eq!(
            f.to_string(),
            "/etc/slurm/gpudirect.toml:3: warning: first; second"
        );
    }

    #[test]
    fn a_config_error_is_one_finding_at_its_line_with_its_key() {
        let text = "[profiles.x]\n\ndata_nic_class = \"rdma\"\n";
        let Err(e) = parse_config(text, "g.toml") else {
            panic!("accepted");
        };
        let f = load_failure("g.toml", &LoadError::Config(e));
        assert_eq!((f.line, f.severity), (3, Severity::Error));
        assert!(f.message.starts_with("profiles.x.data_nic_class: `rdma`"));
        let io = LoadError::Invalid {
            path: "g.toml".into(),
            problem: "not a regular file".into(),
        };
        assert_eq!(
            load_failure("g.toml", &io).to_string(),
            "g.toml:1: error: g.toml: not a regular file"
        );
    }

    /// The lines come from the parser's spans, so a key written as a dotted key at the top
    /// (or in an inline table) gets its own line, not line 1 or its table's.
    #[test]
    fn dotted_keys_and_inline_tables_get_their_real_line() {
        let text = "\
# site config
profiles.ib.data_nics = [\"mlx5_0\"]
profiles.ib.gpu_nics = [\"mlx5_0\"]
profiles.ib.env.NCCL_IB_HCA = \"={nic}\"

profiles.x = { library_dirs = [\"/nonexistent/lib\"], checks = { libraries = [\"libnccl-net.so\"] } }
node_set = [
  { name = \"a\", hosts = \"n1\", profile = \"ib\" },
  { name = \"b\", hosts = \"n2\", profile = \"ib\", nic_names = { eth9 = \"enp1s0\" } },
]
";
        let config = config(text);
        assert_eq!(config.profiles["ib"].lines.name, 2);
        assert_eq!(config.profiles["ib"].env[0].line, 4);
        assert_eq!(config.node_sets[1].line, 9);
        let found = off_node(&config);
        assert_warnings(
            &found,
            &[
                (
                    2,
                    "profiles.ib.data_nics: `mlx5_0` looks like an RDMA device",
                ),
                (
                    4,
                    "profiles.ib.env.NCCL_IB_HCA: {nic} gives interface names",
                ),
                (6, "profile x: libraries: transport library libnccl-net.so"),
                (
                    6,
                    "profile x: library_dirs: /nonexistent/lib does not exist",
                ),
                (
                    9,
                    "node_set[1] (b).nic_names: `eth9` is not a NIC of profile ib",
                ),
            ],
        );
        assert_eq!(found.len(), 5, "{found:#?}");
        assert!(found.windows(2).all(|w| w[0].line <= w[1].line), "by line");
    }

    #[test]
    fn keys_in_tables_point_at_their_own_line() {
        let text = "\
[profiles.a]
description = \"x\"
library_dirs = [
  \"/nonexistent/lib\",
]
topology_file = \"/nonexistent/topo.xml\"
[profiles.a.checks]
libraries = [\"l.so\"]

[[node_set]]
name = \"n\"
hosts = \"n1\"
profile = \"a\"
nic_names = { eth0 = \"enp0s1\" }
";
        let found = off_node(&config(text));
        let lines: Vec<usize> = found.iter().map(|f| f.line).collect();
        assert_eq!(lines, [3, 6, 8, 10], "{found:#?}");
        assert_warnings(
            &found,
            &[
                (
                    3,
                    "profile a: library_dirs: /nonexistent/lib does not exist",
                ),
                (6, "profile a: topology_file: /nonexistent/topo.xml is not"),
                (8, "profile a: libraries: transport library l.so not found"),
                (10, "node_set[0] (n).nic_names: `eth0` is not a NIC"),
            ],
        );
    }

    #[test]
    fn on_the_node_only_its_profile_is_checked_and_failures_are_errors() {
        let text = "\
[profiles.a]
control_nic = \"eth0\"
[profiles.a.checks]
nics = true
[profiles.b]
library_dirs = [\"/nonexistent/lib\"]
[[node_set]]
name = \"gpu\"
hosts = \"gpu[1-2]\"
profile = \"a\"
";
        let config = config(text);
        let on = |probe: &dyn NodeProbe| {
            lint(
                &config,
                &Machine {
                    node: "gpu1",
                    on_node: true,
                    probe,
                },
            )
        };
        let found = on(&BareNode);
        assert_eq!(found.len(), 1, "{found:?}");
        // No data_nics: the profile's own line.
        assert_eq!((found[0].line, found[0].severity), (1, Severity::Error));
        assert!(found[0].message.ends_with(" on node gpu1"), "{found:?}");
        assert!(on(&AssumeHealthy).is_empty());
        // Off the node, both profiles, as warnings.
        let off = off_node(&config);
        assert_eq!(off.len(), 2, "{off:?}");
        assert!(off.iter().all(|f| f.severity == Severity::Warning));
    }

    /// A profile that extends another fails the checks it inherits where its base does:
    /// one finding names both; what it writes itself is its own.
    #[test]
    fn an_inherited_failure_is_one_finding_for_the_base() {
        let text = "\
[profiles.base]
library_dirs = [\"/nonexistent/lib\"]
[profiles.base.checks]
libraries = [\"l.so\"]
[profiles.tuned]
extends = \"base\"
[profiles.tuned.env]
NCCL_MIN_NCHANNELS = \"32\"
[profiles.other]
extends = \"base\"
library_dirs = [\"/nonexistent/other\"]
";
        let found = off_node(&config(text));
        let messages: Vec<(usize, &str)> =
            found.iter().map(|f| (f.line, f.message.as_str())).collect();
        assert_eq!(found.len(), 4, "{messages:#?}");
        assert_warnings(
            &found,
            &[
                (
                    2,
                    "profile base (and tuned, which extends it): library_dirs: /nonexistent/lib does not exist",
                ),
                (
                    4,
                    "profile base (and tuned, which extends it): libraries: transport library l.so not found in /nonexistent/lib",
                ),
                (
                    4,
                    "profile other: libraries: transport library l.so not found in /nonexistent/other",
                ),
                (
                    11,
                    "profile other: library_dirs: /nonexistent/other does not exist",
                ),
            ],
        );
        // On a node whose set uses the extending profile, it is the one checked.
        let text =
            format!("{text}[[node_set]]\nname = \"gpu\"\nhosts = \"gpu1\"\nprofile = \"tuned\"\n");
        let on = lint(
            &config(&text),
            &Machine {
                node: "gpu1",
                on_node: true,
                probe: &BareNode,
            },
        );
        assert_eq!(on.len(), 2, "{on:#?}");
        assert!(has(&on, 2, Severity::Error, "profile tuned: library_dirs:"));
    }
}
