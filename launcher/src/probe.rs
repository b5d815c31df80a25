//! `gpudirect probe`: what each task of a step really sees, and where tasks and nodes
//! differ from each other and from the profile. "The settings did not reach the workers"
//! is answered here.
//!
//! Two halves: [`TaskReport::collect`] runs inside every task (launched by srun over the
//! allocation) and prints one JSON line (the line is `gpudirect-wire`'s, which
//! `gpudirect-mpi facts` prints too); [`analyse`] (pure) reads all the lines and names
//! every node or rank that differs.

use std::collections::{BTreeMap, BTreeSet};

use gpudirect_core::config::Mode;
use gpudirect_core::resolve::vars;
use gpudirect_wire::task_report::{TaskReport, LINE_KEY};
use serde::Serialize;

/// One thing that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// `error` (the job will not get what the profile says) or `warning`.
    pub level: &'static str,
    /// Node(s) concerned.
    pub nodes: String,
    /// What differs.
    pub message: String,
}

/// One variable in effect, where it comes from, on which tasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VariableLine {
    /// The variable.
    pub name: String,
    /// Its value, or `(per task)` where tasks differ.
    pub value: String,
    /// Where it comes from ([`gpudirect_wire::provenance::Source`], as text).
    pub source: String,
    /// How many tasks have it so.
    pub tasks: usize,
    /// On which nodes.
    pub nodes: String,
    /// Places that also set it and lose.
    pub shadowed: Vec<String>,
}

/// The whole picture.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// Tasks that answered.
    pub tasks: usize,
    /// Nodes that answered.
    pub nodes: Vec<String>,
    /// Every difference.
    pub findings: Vec<Finding>,
    /// Every NCCL variable in effect and where it comes from, tasks alike grouped.
    pub variables: Vec<VariableLine>,
}

/// Groups the tasks' provenance: one line per variable and source (values that differ by
/// task, like a NIC per GPU, shown as `(per task)`).
fn variable_lines(reports: &[TaskReport]) -> Vec<VariableLine> {
    type Group<'a> = (
        BTreeSet<&'a str>,
        BTreeSet<&'a str>,
        usize,
        BTreeSet<&'a String>,
    );
    let mut groups: BTreeMap<(&str, String), Group> = BTreeMap::new();
    for r in reports {
        for p in &r.provenance {
            let entry = groups
                .entry((p.name.as_str(), p.source.to_string()))
                .or_default();
            entry.0.insert(&p.value);
            entry.1.insert(&r.node);
            entry.2 += 1;
            entry.3.extend(p.shadowed.iter());
        }
    }
    groups
        .into_iter()
        .map(
            |((name, source), (values, nodes, tasks, shadowed))| VariableLine {
                name: name.to_string(),
                value: if values.len() == 1 {
                    values
                        .iter()
                        .next()
                        .map(|v| v.to_string())
                        .unwrap_or_default()
                } else {
                    "(per task)".into()
                },
                source,
                tasks,
                nodes: hostlist(&nodes),
                shadowed: shadowed.into_iter().cloned().collect(),
            },
        )
        .collect()
}

impl Analysis {
    /// Whether anything is an error.
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.level == "error")
    }
}

/// Reads the task reports out of `srun --label` output. srun cuts a labelled line every
/// 1024 bytes, so each task's fragments are joined again, in order, by label; each task
/// prints exactly one report. Unlabelled lines are read one by one.
pub fn read_reports(stdout: &str) -> (Vec<TaskReport>, Vec<String>) {
    let (mut reports, bad) = crate::slurm::read_labelled_json::<TaskReport>(stdout, LINE_KEY);
    reports.sort_by_key(|r| r.rank);
    (reports, bad)
}

fn hostlist(nodes: &BTreeSet<&str>) -> String {
    let v: Vec<&str> = nodes.iter().copied().collect();
    gpudirect_core::hostlist::compress(&v)
}

/// The nodes and ranks a finding is seen on.
type NodesAndRanks<'a> = (BTreeSet<&'a str>, Vec<u32>);

/// A finding's identity for grouping: (variable or `check`, user-kept, description).
type IssueKey = (String, bool, String);

/// Compares tasks with the profile and nodes with each other. `requested` is the
/// `--gpudirect` mode the probe's tasks were started with, if any.
pub fn analyse(
    reports: &[TaskReport],
    expected_tasks: Option<usize>,
    requested: Option<&str>,
) -> Analysis {
    let mut findings = Vec::new();
    let nodes: BTreeSet<&str> = reports.iter().map(|r| r.node.as_str()).collect();
    check_profile_applied(reports, requested, &mut findings);
    if let Some(n) = expected_tasks.filter(|&n| n != reports.len()) {
        findings.push(Finding {
            level: "error",
            nodes: hostlist(&nodes),
            message: format!("{} of {n} tasks answered", reports.len()),
        });
    }
    profile_mismatches(reports, &mut findings);
    transport_flags(reports, &mut findings);
    differing_variables(reports, &nodes, &mut findings);
    nic_differences(reports, &mut findings);
    Analysis {
        tasks: reports.len(),
        nodes: nodes.iter().map(|s| s.to_string()).collect(),
        findings,
        variables: variable_lines(reports),
    }
}

/// A finding for the tasks that got no profile when `--gpudirect` named one.
fn check_profile_applied(
    reports: &[TaskReport],
    requested: Option<&str>,
    findings: &mut Vec<Finding>,
) {
    // A profile asked for by name that a task did not get: the plugin applied nothing there
    // (it refused the config, is not loaded, or failed). `auto` may rightly give none.
    let requested = requested.map(Mode::from_word);
    if let Some(mode) = requested.as_ref().and_then(Mode::profile_name) {
        let bare: Vec<&TaskReport> = reports
            .iter()
            .filter(|r| !r.vars.contains_key(vars::PROFILE))
            .collect();
        if !bare.is_empty() {
            let bare_nodes: BTreeSet<&str> = bare.iter().map(|r| r.node.as_str()).collect();
            let ranks: Vec<u32> = bare.iter().map(|r| r.rank).collect();
            findings.push(Finding {
                level: "error",
                nodes: hostlist(&bare_nodes),
                message: format!(
                    "--gpudirect {mode} was asked for, but {} task(s), ranks {}, got no profile \
                     (no {}): the plugin applied nothing there. srun's output below says why \
                     (a config it refuses, the plugin not in plugstack.conf)",
                    ranks.len(),
                    compact_ranks(&ranks),
                    vars::PROFILE
                ),
            });
        }
    }
}

/// Findings against the profile, per task, grouped by variable (or check) and value.
fn profile_mismatches(reports: &[TaskReport], findings: &mut Vec<Finding>) {
    // Against the profile, per task (grouped by node and variable).
    let mut by_issue: BTreeMap<IssueKey, (BTreeSet<&str>, Vec<u32>)> = BTreeMap::new();
    for r in reports {
        for m in &r.mismatches {
            let what = match (&m.actual, &m.expected) {
                (None, Some(e)) => format!("{} missing (profile: {e})", m.name),
                (Some(a), Some(e)) => format!("{}={a} (profile: {e})", m.name),
                _ => m.name.clone(),
            };
            let entry = by_issue
                .entry((m.name.clone(), m.user_kept, what))
                .or_default();
            entry.0.insert(&r.node);
            entry.1.push(r.rank);
        }
        for f in &r.check_failures {
            let entry = by_issue
                .entry(("check".into(), false, f.clone()))
                .or_default();
            entry.0.insert(&r.node);
            entry.1.push(r.rank);
        }
    }
    for ((_, user_kept, what), (issue_nodes, ranks)) in by_issue {
        let suffix = if user_kept {
            " - the user's own value, kept"
        } else {
            ""
        };
        findings.push(Finding {
            level: if user_kept { "warning" } else { "error" },
            nodes: hostlist(&issue_nodes),
            message: format!(
                "{what} on {} task(s), ranks {}{suffix}",
                ranks.len(),
                compact_ranks(&ranks)
            ),
        });
    }
}

/// Findings for values from NCCL's config files or a container image that change the
/// transport.
fn transport_flags(reports: &[TaskReport], findings: &mut Vec<Finding>) {
    // Values from NCCL's config files or a container image that change the transport.
    let mut flags: BTreeMap<(&str, &str), NodesAndRanks> = BTreeMap::new();
    for r in reports {
        let level = if r.vars.contains_key(vars::PROFILE) {
            "error"
        } else {
            "warning"
        };
        for flag in r.provenance.iter().filter_map(|p| p.flag.as_deref()) {
            let entry = flags.entry((level, flag)).or_default();
            entry.0.insert(&r.node);
            entry.1.push(r.rank);
        }
        for note in &r.conf_notes {
            let entry = flags.entry(("warning", note)).or_default();
            entry.0.insert(&r.node);
            entry.1.push(r.rank);
        }
    }
    for ((level, message), (flag_nodes, ranks)) in flags {
        findings.push(Finding {
            level,
            nodes: hostlist(&flag_nodes),
            message: format!(
                "{message} on {} task(s), ranks {}",
                ranks.len(),
                compact_ranks(&ranks)
            ),
        });
    }
}

/// Findings for variables the profile does not explain that differ between tasks.
fn differing_variables(
    reports: &[TaskReport],
    nodes: &BTreeSet<&str>,
    findings: &mut Vec<Finding>,
) {
    // Variables present on some nodes only, or with node-dependent values, that the
    // profile does not explain (per-task ones like GPUDIRECT_NIC are expected to vary).
    let per_task = ["GPUDIRECT_NIC", "GPUDIRECT_CPUS", "CUDA_VISIBLE_DEVICES"];
    let names: BTreeSet<&String> = reports.iter().flat_map(|r| r.vars.keys()).collect();
    for name in names {
        if per_task.contains(&name.as_str()) {
            continue;
        }
        let mut values: BTreeMap<Option<&str>, BTreeSet<&str>> = BTreeMap::new();
        for r in reports {
            values
                .entry(r.vars.get(name).map(String::as_str))
                .or_default()
                .insert(&r.node);
        }
        if values.len() > 1 {
            let parts: Vec<String> = values
                .iter()
                .map(|(v, n)| {
                    format!(
                        "{}: {}",
                        v.map(|v| format!("`{v}`"))
                            .unwrap_or_else(|| "unset".into()),
                        hostlist(n)
                    )
                })
                .collect();
            findings.push(Finding {
                level: "warning",
                nodes: hostlist(nodes),
                message: format!("{name} differs between tasks: {}", parts.join("; ")),
            });
        }
    }
}

/// Findings for NICs missing from some nodes or differing in state, MTU or speed.
fn nic_differences(reports: &[TaskReport], findings: &mut Vec<Finding>) {
    // NICs across nodes: presence, state, MTU, speed.
    let mut per_nic: BTreeMap<&str, BTreeMap<String, BTreeSet<&str>>> = BTreeMap::new();
    let mut seen_nodes: BTreeSet<&str> = BTreeSet::new();
    for r in reports {
        if !seen_nodes.insert(&r.node) {
            continue;
        }
        for nic in &r.nics {
            let desc = format!(
                "{}, mtu {}, speed {}",
                nic.state,
                nic.mtu.map(|m| m.to_string()).unwrap_or_else(|| "?".into()),
                nic.speed_mbps
                    .map(|s| format!("{s} Mb/s"))
                    .unwrap_or_else(|| "n/a".into())
            );
            per_nic
                .entry(&nic.name)
                .or_default()
                .entry(desc)
                .or_default()
                .insert(&r.node);
        }
    }
    for (nic, descs) in per_nic {
        let present: BTreeSet<&str> = descs.values().flatten().copied().collect();
        let missing: BTreeSet<&str> = seen_nodes.difference(&present).copied().collect();
        if !missing.is_empty() {
            findings.push(Finding {
                level: "warning",
                nodes: hostlist(&missing),
                message: format!("NIC {nic} missing (present on {})", hostlist(&present)),
            });
        }
        if descs.len() > 1 {
            let parts: Vec<String> = descs
                .iter()
                .map(|(d, n)| format!("{d} on {}", hostlist(n)))
                .collect();
            findings.push(Finding {
                level: "warning",
                nodes: hostlist(&present),
                message: format!("NIC {nic} differs: {}", parts.join("; ")),
            });
        }
    }
}

fn compact_ranks(ranks: &[u32]) -> String {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    gpudirect_core::cpulist::CpuList::from_ids(sorted).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpudirect_wire::task_report::{Mismatch, NicInfo};

    fn report(
        node: &str,
        rank: u32,
        vars: &[(&str, &str)],
        nics: &[(&str, &str, u32)],
    ) -> TaskReport {
        TaskReport {
            gpudirect_probe: 1,
            node: node.into(),
            rank,
            local_rank: rank % 2,
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cpus: "0-1".into(),
            gpus: vec![],
            nics: nics
                .iter()
                .map(|(n, s, m)| NicInfo {
                    name: n.to_string(),
                    state: s.to_string(),
                    speed_mbps: None,
                    mtu: Some(*m),
                })
                .collect(),
            check_failures: vec![],
            mismatches: vec![],
            provenance: vec![],
            conf_notes: vec![],
        }
    }

    #[test]
    fn analysis_names_the_nodes_that_differ() {
        let good = [
            ("NCCL_NET", "GPUDirectTCPX_v7"),
            ("GPUDIRECT_PROFILE", "tcpx"),
        ];
        let nics = [("eth0", "up", 1500), ("eth1", "up", 1500)];
        let mut reports = vec![
            report("node1", 0, &good, &nics),
            report("node1", 1, &good, &nics),
            report(
                "node2",
                2,
                &good,
                &[("eth0", "up", 1500), ("eth1", "up", 9000)],
            ),
            report("node3", 3, &[], &[("eth0", "up", 1500)]),
        ];
        reports[3].mismatches.push(Mismatch {
            name: "NCCL_NET".into(),
            expected: Some("GPUDirectTCPX_v7".into()),
            actual: None,
            user_kept: false,
        });
        let a = analyse(&reports, Some(4), None);
        assert!(a.has_errors());
        let text: Vec<String> = a
            .findings
            .iter()
            .map(|f| format!("{} {}: {}", f.level, f.nodes, f.message))
            .collect();
        assert!(
            text.contains(
                &"error node3: NCCL_NET missing (profile: GPUDirectTCPX_v7) on 1 task(s), ranks 3"
                    .to_string()
            ),
            "{text:#?}"
        );
        assert!(
            text.iter().any(
                |t| t.starts_with("warning node[1-3]: NCCL_NET differs between tasks")
                    && t.contains("unset: node3")
            ),
            "{text:#?}"
        );
        assert!(
            text.contains(&"warning node3: NIC eth1 missing (present on node[1-2])".to_string()),
            "{text:#?}"
        );
        assert!(text.iter().any(|t| t.contains("NIC eth1 differs: up, mtu 1500, speed n/a on node1; up, mtu 9000, speed n/a on node2")), "{text:#?}");
        let short = analyse(&reports[..2], Some(4), None);
        assert_eq!(short.findings[0].message, "2 of 4 tasks answered");
        // Asked for tcpx: node3's task got no profile, the others did.
        let asked = analyse(&reports, Some(4), Some("tcpx"));
        assert_eq!(asked.findings[0].level, "error");
        assert_eq!(asked.findings[0].nodes, "node3");
        assert!(
            asked.findings[0].message.starts_with(
                "--gpudirect tcpx was asked for, but 1 task(s), ranks 3, got no profile"
            ),
            "{:?}",
            asked.findings[0]
        );
        // auto may rightly give none, and none gives none.
        for mode in ["auto", "none"] {
            let a = analyse(&reports, Some(4), Some(mode));
            assert!(!a
                .findings
                .iter()
                .any(|f| f.message.contains("was asked for")));
        }
    }

    #[test]
    fn reads_probe_lines_among_other_output() {
        let r = report("node1", 0, &[], &[]);
        let json = serde_json::to_string(&r).unwrap();
        let (a, b) = json.split_at(30);
        let text = format!("srun: warning\n 0: {a}\nnoise\n 0: {b}\n");
        let (reports, bad) = read_reports(&text);
        assert_eq!(reports, vec![r]);
        assert!(bad.is_empty());
        let (_, bad) = read_reports("{\"gpudirect_probe\": 1, broken");
        assert_eq!(bad.len(), 1);
    }

    #[test]
    fn a_transport_value_from_a_config_file_is_an_error_naming_the_file() {
        use gpudirect_wire::provenance::{Provenance, Source};
        let mut tasks: Vec<TaskReport> = (0..2)
            .map(|rank| report("node1", rank, &[(vars::PROFILE, "tcpx")], &[]))
            .collect();
        for (rank, task) in tasks.iter_mut().enumerate() {
            task.provenance = vec![
                Provenance {
                    name: "NCCL_NET".into(),
                    value: "Socket".into(),
                    source: Source::File {
                        path: "/tmp/n.conf".into(),
                        role: "NCCL_CONF_FILE".into(),
                        line: 1,
                    },
                    shadowed: vec![],
                    flag: Some("NCCL_NET=Socket from /tmp/n.conf:1 changes the transport".into()),
                },
                Provenance {
                    name: "GPUDIRECT_NIC_X".into(),
                    value: format!("eth{rank}"),
                    source: Source::Profile {
                        profile: "tcpx".into(),
                    },
                    shadowed: vec![],
                    flag: None,
                },
            ];
        }
        let analysis = analyse(&tasks, Some(2), None);
        let flagged: Vec<&Finding> = analysis
            .findings
            .iter()
            .filter(|f| f.message.contains("changes the transport"))
            .collect();
        assert_eq!(flagged.len(), 1, "{:?}", analysis.findings);
        assert_eq!(flagged[0].level, "error");
        assert!(flagged[0].message.ends_with("on 2 task(s), ranks 0-1"));
        let net = analysis
            .variables
            .iter()
            .find(|v| v.name == "NCCL_NET")
            .unwrap();
        assert_eq!((net.value.as_str(), net.tasks), ("Socket", 2));
        assert_eq!(net.source, "/tmp/n.conf:1 (NCCL_CONF_FILE)");
        let nic = analysis
            .variables
            .iter()
            .find(|v| v.name == "GPUDIRECT_NIC_X")
            .unwrap();
        assert_eq!(nic.value, "(per task)");
    }
}
