//! The history and a node's health as OpenMetrics text, for Prometheus and node_exporter's
//! textfile collector (issue #32). Pure: the history is read by the caller.
//!
//! Names follow the OpenMetrics conventions: `gpudirect_` first, base units last
//! (`_seconds`, `_bytes_per_second`), a `# HELP`, `# TYPE` and, with a unit, `# UNIT` line
//! per family, and `# EOF` at the end. Every value is a gauge: the last verdict or figure.
//! Labels: `cluster`, `node`, `tool` (`health`, `validate`, `vet`, `run`), `collective`,
//! `rail`, `check`, `profile`.
//!
//! | family | labels | value |
//! |---|---|---|
//! | `gpudirect_node_check_ok` | cluster, node, tool | 1 when the node's last run by the tool was ok |
//! | `gpudirect_node_check_timestamp_seconds` | cluster, node, tool | when that run was |
//! | `gpudirect_node_busbw_bytes_per_second` | cluster, node, tool, collective | its busbw (largest size) |
//! | `gpudirect_node_baseline_busbw_bytes_per_second` | cluster, node, tool, collective | the median of up to 10 earlier ok runs of the same kind (`baseline::Key`) |
//! | `gpudirect_node_vet_good` | cluster, node | 1 good, 0 bad in the newest vet that named the node |
//! | `gpudirect_rail_busbw_bytes_per_second` | cluster, node, rail | what the node last sent on the rail (`validate --test rails`) |
//! | `gpudirect_rail_ok` | cluster, node, rail | 1 when that pair passed, 0 slow or failed |
//! | `gpudirect_node_drained` | cluster, node, tool | 1 while Slurm has the node drained with the tool's tag |
//! | `gpudirect_health_ok` | node, profile | `health --textfile`: 1 passed, 0 failed |
//! | `gpudirect_health_check_ok` | node, check | each check of that run |
//! | `gpudirect_health_timestamp_seconds`, `gpudirect_health_duration_seconds` | node | when, how long |

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::baseline::{median, Key};
use crate::history::{RunStatus, RunSummary, Tool, VetSummary};
use crate::output::shown::{hides_text, shown};
use crate::units::parse_rfc3339;

/// Earlier runs a node's baseline is the median of.
const BASELINE_RUNS: usize = 10;

/// A label value as OpenMetrics quotes it: `\`, `"` and line breaks escaped. Other control
/// and hiding characters are written as [`shown`] writes them (`\x01`), not dropped: two
/// names that differ only by one stay two series (security review T12).
fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if hides_text(c) => {
                let mut one = [0u8; 4];
                for e in shown(c.encode_utf8(&mut one)).chars() {
                    match e {
                        '\\' => out.push_str("\\\\"),
                        e => out.push(e),
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `{a="x",b="y"}`.
fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", quoted(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// One metric family: its `# HELP`, `# TYPE gauge`, `# UNIT` (if any) and samples.
#[derive(Debug, Default)]
struct Family {
    help: &'static str,
    unit: Option<&'static str>,
    samples: Vec<(String, f64)>,
}

/// Families by name, written in name order.
#[derive(Debug, Default)]
pub struct Exposition {
    families: BTreeMap<&'static str, Family>,
}

impl Exposition {
    fn family(
        &mut self,
        name: &'static str,
        help: &'static str,
        unit: Option<&'static str>,
    ) -> &mut Family {
        self.families.entry(name).or_insert_with(|| Family {
            help,
            unit,
            samples: Vec::new(),
        })
    }

    fn gauge(
        &mut self,
        (name, help, unit): (&'static str, &'static str, Option<&'static str>),
        labels_: &[(&str, &str)],
        value: f64,
    ) {
        if value.is_finite() {
            self.family(name, help, unit)
                .samples
                .push((labels(labels_), value));
        }
    }

    /// The text, `# EOF` last.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, f) in &self.families {
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} gauge");
            if let Some(unit) = f.unit {
                let _ = writeln!(out, "# UNIT {name} {unit}");
            }
            for (labels_, value) in &f.samples {
                let _ = writeln!(out, "{name}{labels_} {value}");
            }
        }
        out.push_str("# EOF\n");
        out
    }
}

const CHECK_OK: (&str, &str, Option<&str>) = (
    "gpudirect_node_check_ok",
    "Whether the node's last run by this tool was ok (1) or not (0).",
    None,
);
const CHECK_AT: (&str, &str, Option<&str>) = (
    "gpudirect_node_check_timestamp_seconds",
    "When the node's last run by this tool was, unix time.",
    Some("seconds"),
);
const BUSBW: (&str, &str, Option<&str>) = (
    "gpudirect_node_busbw_bytes_per_second",
    "The busbw of the node's last ok run of this collective by this tool, at its largest size.",
    Some("bytes_per_second"),
);
const BASELINE: (&str, &str, Option<&str>) = (
    "gpudirect_node_baseline_busbw_bytes_per_second",
    "The median busbw of up to 10 earlier ok runs of the same kind as the node's last one.",
    Some("bytes_per_second"),
);
const VET_GOOD: (&str, &str, Option<&str>) = (
    "gpudirect_node_vet_good",
    "Whether the newest vet that named the node found it good (1) or bad (0).",
    None,
);

const RAIL_BUSBW: (&str, &str, Option<&str>) = (
    "gpudirect_rail_busbw_bytes_per_second",
    "What the node last sent on this rail (data NIC) in a validate --test rails pair.",
    Some("bytes_per_second"),
);
const RAIL_OK: (&str, &str, Option<&str>) = (
    "gpudirect_rail_ok",
    "Whether the node's last rail pair on this rail passed (1) or was slow or failed (0).",
    None,
);
const QUARANTINED: (&str, &str, Option<&str>) = (
    "gpudirect_node_quarantined",
    "1 for a node in the quarantine reservation (its comment carries the tool's entry), by tool and cause (node, nic); absent when it is not.",
    None,
);
const SWEEPS_PASSED: (&str, &str, Option<&str>) = (
    "gpudirect_quarantine_sweeps_passed",
    "Sweeps a quarantined node passed in a row (it returns at [quarantine] passes_to_return).",
    None,
);
const SWEEPS_FAILED: (&str, &str, Option<&str>) = (
    "gpudirect_quarantine_sweeps_failed",
    "Sweeps a quarantined node failed in a row (it is drained at [quarantine] failures_to_drain).",
    None,
);
const QUARANTINE_AGE: (&str, &str, Option<&str>) = (
    "gpudirect_quarantine_age_seconds",
    "Seconds since a quarantined node was quarantined (its comment's `since`); absent for an entry written before the tool kept the time.",
    Some("seconds"),
);
const DRAINED: (&str, &str, Option<&str>) = (
    "gpudirect_node_drained",
    "1 for a node drained (now, in Slurm) with this tool's tag; absent when it is not.",
    None,
);

/// One node's figure on one rail: a node result of a `validate --test rails` run.
#[derive(Debug, Clone, PartialEq)]
pub struct RailFigure {
    /// The run's cluster.
    pub cluster: String,
    /// The node.
    pub node: String,
    /// The rail (data NIC).
    pub rail: String,
    /// What it sent, GB/s (none when the pair measured nothing).
    pub gbps: Option<f64>,
    /// The pair's class: `pass`, `slow`, `failed` (`retried` attempts are skipped).
    pub verdict: Option<String>,
}

/// Adds each (cluster, node, rail)'s newest figure and verdict; `figures` newest first.
pub fn add_rail_metrics(x: &mut Exposition, figures: &[RailFigure]) {
    let mut seen: std::collections::BTreeSet<(&str, &str, &str)> = Default::default();
    for f in figures {
        if f.verdict.as_deref() == Some("retried") || !seen.insert((&f.cluster, &f.node, &f.rail)) {
            continue;
        }
        let l = [
            ("cluster", f.cluster.as_str()),
            ("node", f.node.as_str()),
            ("rail", f.rail.as_str()),
        ];
        if let Some(gbps) = f.gbps {
            x.gauge(RAIL_BUSBW, &l, gbps * 1e9);
        }
        if let Some(v) = &f.verdict {
            x.gauge(RAIL_OK, &l, f64::from(u8::from(v == "pass")));
        }
    }
}

/// Adds one sample per node drained now with one of our tools' tags: `drains` holds
/// (node, `scontrol show node`'s reason) of the drained nodes.
pub fn add_drain_metrics(x: &mut Exposition, cluster: &str, drains: &[(String, Option<String>)]) {
    use crate::drain::{is_ours, Tool};
    for (node, reason) in drains {
        for (tool, name) in [
            (Tool::Health, "health"),
            (Tool::Validate, "validate"),
            (Tool::Vet, "vet"),
        ] {
            if is_ours(tool, reason.as_deref()) {
                x.gauge(
                    DRAINED,
                    &[
                        ("cluster", cluster),
                        ("node", node.as_str()),
                        ("tool", name),
                    ],
                    1.0,
                );
            }
        }
    }
}

/// Adds, per quarantined node (from the node comments, [`crate::quarantine::quarantined`]),
/// [`QUARANTINED`] with its tool and cause, its sweeps passed and failed in a row, and how
/// long it has been quarantined at `now` (Unix seconds), where its entry says since when.
pub fn add_quarantine_metrics(
    x: &mut Exposition,
    cluster: &str,
    quarantined: &[(String, crate::quarantine::Entry)],
    now: i64,
) {
    for (node, entry) in quarantined {
        let labels = [("cluster", cluster), ("node", node.as_str())];
        x.gauge(
            QUARANTINED,
            &[
                labels[0],
                labels[1],
                ("tool", entry.tool.name()),
                ("cause", entry.cause.word()),
            ],
            1.0,
        );
        x.gauge(SWEEPS_PASSED, &labels, f64::from(entry.passed));
        x.gauge(SWEEPS_FAILED, &labels, f64::from(entry.failed));
        if let Some(since) = entry.since {
            x.gauge(QUARANTINE_AGE, &labels, (now - since).max(0) as f64);
        }
    }
}

/// The `tool` label of a run: the command that recorded it (the history's `tool` column),
/// `run` and `tune` both `run`, as the admin guide lists the labels. An imported run was
/// recorded elsewhere: its variant says by what (`--variant health`, `validate:pairs`).
pub fn tool_of(run: &RunSummary) -> &'static str {
    let tool = match run.tool {
        Tool::Import => Tool::of_variant(run.variant.as_deref()),
        tool => tool,
    };
    match tool {
        Tool::Health => "health",
        Tool::Validate => "validate",
        Tool::Vet => "vet",
        Tool::Run | Tool::Tune | Tool::Import => "run",
    }
}

/// The metrics of `runs` (newest first, as `History::list_runs` gives them) and `vets`
/// (newest first). Stand-in replays are left out: they measured nothing.
pub fn history_metrics(runs: &[RunSummary], vets: &[VetSummary]) -> Exposition {
    let mut x = Exposition::default();
    let measured: Vec<&RunSummary> = runs.iter().filter(|r| r.replay_of.is_none()).collect();
    // The busbw of ok runs by comparability key, newest first, for the baselines.
    let mut by_key: BTreeMap<Key, Vec<(i64, f64)>> = BTreeMap::new();
    for r in &measured {
        if let (RunStatus::Ok, Some(b)) = (r.status, r.busbw) {
            by_key.entry(Key::of(r)).or_default().push((r.id, b));
        }
    }
    let mut seen_check: std::collections::BTreeSet<(String, String, &str)> = Default::default();
    let mut seen_busbw: std::collections::BTreeSet<(String, String, &str, String)> =
        Default::default();
    for r in &measured {
        let cluster = r.cluster.clone().unwrap_or_default();
        let tool = tool_of(r);
        let at = parse_rfc3339(&r.at).ok();
        for node in nodes_of(r) {
            if seen_check.insert((cluster.clone(), node.clone(), tool)) {
                let l = [
                    ("cluster", cluster.as_str()),
                    ("node", node.as_str()),
                    ("tool", tool),
                ];
                x.gauge(CHECK_OK, &l, f64::from(u8::from(r.status == RunStatus::Ok)));
                if let Some(at) = at {
                    x.gauge(CHECK_AT, &l, at as f64);
                }
            }
            let (RunStatus::Ok, Some(busbw)) = (r.status, r.busbw) else {
                continue;
            };
            if !seen_busbw.insert((cluster.clone(), node.clone(), tool, r.collective.clone())) {
                continue;
            }
            let l = [
                ("cluster", cluster.as_str()),
                ("node", node.as_str()),
                ("tool", tool),
                ("collective", r.collective.as_str()),
            ];
            x.gauge(BUSBW, &l, busbw * 1e9);
            let earlier: Vec<f64> = by_key
                .get(&Key::of(r))
                .map(|v| {
                    v.iter()
                        .filter(|(id, _)| *id < r.id)
                        .take(BASELINE_RUNS)
                        .map(|(_, b)| *b)
                        .collect()
                })
                .unwrap_or_default();
            if let Some(m) = median(&earlier) {
                x.gauge(BASELINE, &l, m * 1e9);
            }
        }
    }
    let mut seen_vet: std::collections::BTreeSet<(String, String)> = Default::default();
    for v in vets.iter().map(|v| &v.facts) {
        let cluster = v.cluster.clone().unwrap_or_default();
        for (list, good) in [(&v.good_nodes, 1.0), (&v.bad_nodes, 0.0)] {
            for node in expand(list) {
                if seen_vet.insert((cluster.clone(), node.clone())) {
                    x.gauge(
                        VET_GOOD,
                        &[("cluster", cluster.as_str()), ("node", node.as_str())],
                        good,
                    );
                }
            }
        }
    }
    x
}

/// A hostlist's nodes; a list that does not expand is taken as one name.
fn expand(list: &str) -> Vec<String> {
    if list.trim().is_empty() {
        return Vec::new();
    }
    gpudirect_core::hostlist::expand_with_limit(list, 100_000)
        .unwrap_or_else(|_| vec![list.to_string()])
}

fn nodes_of(r: &RunSummary) -> Vec<String> {
    r.nodelist.as_deref().map(expand).unwrap_or_default()
}

/// One `gpudirect health` run, for `health --textfile`.
#[derive(Debug, Clone)]
pub struct HealthRun<'a> {
    /// The node.
    pub node: &'a str,
    /// Its profile, if any.
    pub profile: Option<&'a str>,
    /// Every check that ran, and whether it passed.
    pub checks: Vec<(&'a str, bool)>,
    /// When it ran, unix seconds.
    pub at: i64,
    /// How long it took.
    pub seconds: f64,
    /// The quick all_reduce's busbw, GB/s, when it ran.
    pub busbw: Option<f64>,
    /// A check could not run (exit 3): the node is neither called healthy nor not.
    pub could_not_check: bool,
    /// What `nic_counters` measured, when it ran.
    pub nic_counters: Option<&'a crate::nic_counters::Measured>,
}

/// `health --textfile`'s metrics of one run.
pub fn health_metrics(run: &HealthRun<'_>) -> Exposition {
    let mut x = Exposition::default();
    let ok = run.checks.iter().all(|(_, passed)| *passed);
    let profile = run.profile.unwrap_or("");
    // A check that could not run says nothing of the node: no verdict, said as such.
    if !run.could_not_check || !ok {
        x.gauge(
            (
                "gpudirect_health_ok",
                "Whether the node passed its last health check (1) or not (0).",
                None,
            ),
            &[("node", run.node), ("profile", profile)],
            f64::from(u8::from(ok)),
        );
    }
    x.gauge(
        (
            "gpudirect_health_could_not_check",
            "Whether a check of the node's last health check could not run (1): no verdict.",
            None,
        ),
        &[("node", run.node)],
        f64::from(u8::from(run.could_not_check)),
    );
    for (check, passed) in &run.checks {
        x.gauge(
            (
                "gpudirect_health_check_ok",
                "Whether this check of the node's last health check passed (1) or not (0).",
                None,
            ),
            &[("node", run.node), ("check", check)],
            f64::from(u8::from(*passed)),
        );
    }
    let node = [("node", run.node)];
    x.gauge(
        (
            "gpudirect_health_timestamp_seconds",
            "When the node's last health check ran, unix time.",
            Some("seconds"),
        ),
        &node,
        run.at as f64,
    );
    x.gauge(
        (
            "gpudirect_health_duration_seconds",
            "How long the node's last health check took.",
            Some("seconds"),
        ),
        &node,
        run.seconds,
    );
    if let Some(b) = run.busbw {
        x.gauge(
            (
                "gpudirect_health_busbw_bytes_per_second",
                "The busbw of the quick all_reduce of the node's last health check.",
                Some("bytes_per_second"),
            ),
            &node,
            b * 1e9,
        );
    }
    if let Some(measured) = run.nic_counters {
        add_counter_metrics(&mut x, run.node, measured);
    }
    x
}

/// `nic_counters`' figures: per data NIC and class of counter, how much its error counters
/// rose since the previous health check, and that interval (left out on a first run, which
/// has nothing to compare with).
fn add_counter_metrics(x: &mut Exposition, node: &str, measured: &crate::nic_counters::Measured) {
    let Some(seconds) = measured.interval_seconds else {
        return;
    };
    x.gauge(
        (
            "gpudirect_health_nic_errors_interval_seconds",
            "The time between the node's last two readings of its NICs' error counters.",
            Some("seconds"),
        ),
        &[("node", node)],
        seconds,
    );
    for r in &measured.rises {
        x.gauge(
            (
                "gpudirect_health_nic_error_rise",
                "How much a data NIC's error counters of a class (link, physical, errors, drops, retransmits) rose between the node's last two health checks.",
                None,
            ),
            &[("node", node), ("nic", &r.nic), ("class", r.class)],
            r.rise as f64,
        );
    }
}

const WATCH_BUSBW: (&str, &str, Option<&str>) = (
    "gpudirect_watch_busbw_bytes_per_second",
    "A running job's busbw per collective and size: the median of each collective's fastest rank (gpudirect watch).",
    Some("bytes_per_second"),
);
const WATCH_WAIT: (&str, &str, Option<&str>) = (
    "gpudirect_watch_slowest_rank_seconds",
    "The median time of each collective's slowest rank: its lead over the fastest is waiting.",
    Some("seconds"),
);
const WATCH_LATE: (&str, &str, Option<&str>) = (
    "gpudirect_watch_late_rank_seconds",
    "How late a rank named LATE starts its collectives, by communicator and rank.",
    Some("seconds"),
);
const WATCH_CONNECTION: (&str, &str, Option<&str>) = (
    "gpudirect_watch_connection_slowdown_ratio",
    "Send time on the network per byte of each pair of ranks, as a multiple of its communicator's reference (the lower quartile of its pairs); 3 or more is slow.",
    None,
);
const WATCH_SLOW_RANK: (&str, &str, Option<&str>) = (
    "gpudirect_watch_slow_connection_rank",
    "A rank whose every connection is slow (SLOW CONNECTION), with its host and NIC: the smallest slowdown of its connections.",
    None,
);
const WATCH_FINDINGS: (&str, &str, Option<&str>) = (
    "gpudirect_watch_findings",
    "Findings (late rank, slower than baseline, silent ranks) per communicator; 0: nothing wrong.",
    None,
);

/// `gpudirect watch --textfile`: one job's verdicts as metrics, labelled by `job` (the job
/// id, or `dumps` for folders given by hand) and communicator.
pub fn watch_metrics(
    job: &str,
    verdicts: &[crate::watch::judge::CommVerdict],
    connections: &[crate::watch::links::Connections],
) -> Exposition {
    use crate::watch::judge::Finding;
    let mut x = Exposition::default();
    for c in connections {
        for p in &c.pairs {
            let (from, to) = (p.from.to_string(), p.to.to_string());
            let l = [
                ("job", job),
                ("comm", c.comm.as_str()),
                ("from_rank", &from),
                ("to_rank", &to),
            ];
            x.gauge(WATCH_CONNECTION, &l, p.times_reference);
        }
        if let Some(k) = &c.culprit {
            let rank = k.rank.to_string();
            let l = [
                ("job", job),
                ("comm", c.comm.as_str()),
                ("rank", &rank),
                ("host", k.host.as_str()),
                ("nic", k.nic.as_deref().unwrap_or("")),
            ];
            x.gauge(WATCH_SLOW_RANK, &l, k.times_reference);
        }
    }
    for v in verdicts {
        let comm = v.comm.as_str();
        if v.judged {
            x.gauge(
                WATCH_FINDINGS,
                &[("job", job), ("comm", comm)],
                v.findings.len() as f64,
            );
        }
        for g in v.groups.iter().filter(|g| g.matched > 0) {
            let size = g.bytes.to_string();
            let l = [
                ("job", job),
                ("comm", comm),
                ("collective", &g.coll),
                ("size_bytes", &size),
            ];
            x.gauge(WATCH_BUSBW, &l, g.busbw_gbs * 1e9);
            x.gauge(WATCH_WAIT, &l, g.worst_us / 1e6);
        }
        for f in &v.findings {
            if let Finding::LateRank {
                rank,
                host,
                late_by_us,
                ..
            } = f
            {
                let rank = rank.to_string();
                let l = [
                    ("job", job),
                    ("comm", comm),
                    ("rank", &rank),
                    ("host", host),
                ];
                x.gauge(WATCH_LATE, &l, late_by_us / 1e6);
            }
        }
    }
    x
}

/// Writes `text` to `dir/name` as node_exporter's textfile collector wants it: through a
/// temporary file in the same folder, renamed into place, so that the collector never
/// reads half a file; mode 0644.
pub fn write_textfile(dir: &std::path::Path, name: &str, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .tempfile_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rails_newest_figure_and_our_drains_by_tool() {
        let fig = |node: &str, rail: &str, gbps: Option<f64>, verdict: &str| RailFigure {
            cluster: "c1".into(),
            node: node.into(),
            rail: rail.into(),
            gbps,
            verdict: Some(verdict.into()),
        };
        let mut x = Exposition::default();
        add_rail_metrics(
            &mut x,
            &[
                fig("node3", "eth2", Some(0.12), "slow"),
                fig("node3", "eth2", Some(1.1), "pass"),
                fig("node3", "eth1", None, "retried"),
                fig("node3", "eth1", None, "failed"),
            ],
        );
        add_drain_metrics(
            &mut x,
            "c1",
            &[
                (
                    "node2".into(),
                    Some("gpudirect health: eth3 is down".into()),
                ),
                ("node4".into(), Some("gpudirect: slow node".into())),
                ("node5".into(), Some("bad DIMM".into())),
            ],
        );
        let mut entry = crate::quarantine::Entry::new(
            crate::drain::Tool::Validate,
            crate::quarantine::Cause::Nic,
            "eth3 slow",
        );
        entry.failed = 2;
        let mut older = entry.clone();
        entry.since = Some(1_000);
        older.since = None;
        add_quarantine_metrics(
            &mut x,
            "c1",
            &[("node6".into(), entry), ("node7".into(), older)],
            4_600,
        );
        let text = x.render();
        assert!(
            !text.contains("gpudirect_quarantine_age_seconds{cluster=\"c1\",node=\"node7\"}"),
            "no age without a since: {text}"
        );
        for line in [
            "gpudirect_node_quarantined{cluster=\"c1\",node=\"node6\",tool=\"validate\",cause=\"nic\"} 1\n",
            "gpudirect_quarantine_sweeps_passed{cluster=\"c1\",node=\"node6\"} 0\n",
            "gpudirect_quarantine_sweeps_failed{cluster=\"c1\",node=\"node6\"} 2\n",
            "gpudirect_quarantine_age_seconds{cluster=\"c1\",node=\"node6\"} 3600\n",
        ] {
            assert!(text.contains(line), "{line}{text}");
        }
        let l = r#"{cluster="c1",node="node3",rail="eth2"}"#;
        assert!(
            text.contains(&format!(
                "gpudirect_rail_busbw_bytes_per_second{l} 120000000\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("gpudirect_rail_ok{l} 0\n")),
            "the newest, slow: {text}"
        );
        let l = r#"{cluster="c1",node="node3",rail="eth1"}"#;
        assert!(
            text.contains(&format!("gpudirect_rail_ok{l} 0\n")),
            "failed, not the retried attempt: {text}"
        );
        assert!(
            !text.contains(&format!("gpudirect_rail_busbw_bytes_per_second{l}")),
            "{text}"
        );
        assert!(
            text.contains(r#"gpudirect_node_drained{cluster="c1",node="node2",tool="health"} 1"#),
            "{text}"
        );
        // The tag of earlier versions counts as validate's.
        assert!(
            text.contains(r#"gpudirect_node_drained{cluster="c1",node="node4",tool="validate"} 1"#),
            "{text}"
        );
        assert!(
            !text.contains(r#"node="node5""#),
            "an admin's drain is not ours: {text}"
        );
    }

    /// Design review 2026-12-04, P5: vet records its pairs under validate's variants
    /// (`validate:pairs`, `rail:eth1`); the history's `tool` column, not the variant, says
    /// they are vet's. A run recorded before the column keeps the variant's word, and an
    /// imported one the word of the variant it was imported with.
    #[test]
    fn vets_runs_count_as_vets() {
        let dir = tempfile::tempdir().unwrap();
        let mut history = crate::history::History::open(&dir.path().join("h.sqlite")).unwrap();
        let run = |variant: &str, tool: Tool, node: &str| crate::history::NewRun {
            collective: "all_reduce".into(),
            cluster: Some("c1".into()),
            variant: Some(variant.into()),
            nodes: vec![node.into()],
            nodelist: Some(node.into()),
            tool,
            rows: vec![crate::history::NewRow {
                size_bytes: 1 << 30,
                count: 1 << 28,
                dtype: "float".into(),
                redop: "sum".into(),
                root: None,
                placement: crate::history::Placement::Out,
                time_us: 1.0,
                algbw: 100.0,
                busbw: 100.0,
                wrong: Some(0),
                algorithm: None,
                protocol: None,
            }],
            ..Default::default()
        };
        for (variant, tool, node) in [
            ("validate:pairs", Tool::Vet, "node1"),
            ("rail:eth1", Tool::Vet, "node2"),
            ("validate:pairs", Tool::Validate, "node3"),
            ("health", Tool::Import, "node4"),
        ] {
            history.import_run(&run(variant, tool, node), true).unwrap();
        }
        let runs = history
            .list_runs(&crate::history::RunFilter::default())
            .unwrap();
        let text = history_metrics(&runs, &[]).render();
        for (node, tool) in [
            ("node1", "vet"),
            ("node2", "vet"),
            ("node3", "validate"),
            ("node4", "health"),
        ] {
            let l = format!(r#"{{cluster="c1",node="{node}",tool="{tool}"}}"#);
            assert!(
                text.contains(&format!("gpudirect_node_check_ok{l} 1")),
                "{node}: {text}"
            );
        }
        assert!(!text.contains(r#"node="node1",tool="validate""#), "{text}");
    }

    #[test]
    fn names_that_differ_only_by_a_control_character_stay_apart() {
        assert_eq!(quoted("a3h-001"), "\"a3h-001\"");
        assert_eq!(quoted("a3h-001\u{1}"), "\"a3h-001\\\\x01\"");
        assert_eq!(quoted("a\u{202e}b"), "\"a\\\\u{202e}b\"");
        assert_eq!(quoted("two\nlines"), "\"two\\nlines\"");
        assert_ne!(quoted("a3h-001"), quoted("a3h-001\u{1}"));
    }

    #[test]
    fn labels_are_quoted_and_the_text_ends_with_eof() {
        let run = HealthRun {
            node: "node\"2",
            profile: Some("tcpx"),
            checks: vec![("nics", true), ("gpus", false)],
            at: 1_796_000_000,
            seconds: 0.25,
            busbw: Some(343.64),
            could_not_check: false,
            nic_counters: None,
        };
        let text = health_metrics(&run).render();
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(
            text.contains("gpudirect_health_ok{node=\"node\\\"2\",profile=\"tcpx\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("gpudirect_health_check_ok{node=\"node\\\"2\",check=\"gpus\"} 0\n"));
        assert!(text.contains("# UNIT gpudirect_health_busbw_bytes_per_second bytes_per_second\n"));
        assert!(text.contains(
            "gpudirect_health_busbw_bytes_per_second{node=\"node\\\"2\"} 343640000000\n"
        ));
    }

    #[test]
    fn nic_counter_rises_are_gauges_per_nic_and_class_after_a_first_run() {
        use crate::nic_counters::{ClassRise, Measured};
        let measured = Measured {
            interval_seconds: Some(300.0),
            rises: vec![
                ClassRise {
                    nic: "eth1".into(),
                    class: "drops",
                    rise: 5003,
                },
                ClassRise {
                    nic: "eth1".into(),
                    class: "link",
                    rise: 0,
                },
            ],
        };
        let run = |m| HealthRun {
            node: "node1",
            profile: Some("tcpx"),
            checks: vec![("nic_counters", false)],
            at: 1_796_000_000,
            seconds: 0.01,
            busbw: None,
            could_not_check: false,
            nic_counters: m,
        };
        let text = health_metrics(&run(Some(&measured))).render();
        assert!(text.contains(
            "gpudirect_health_nic_error_rise{node=\"node1\",nic=\"eth1\",class=\"drops\"} 5003\n"
        ), "{text}");
        assert!(text.contains(
            "gpudirect_health_nic_error_rise{node=\"node1\",nic=\"eth1\",class=\"link\"} 0\n"
        ));
        assert!(text.contains("gpudirect_health_nic_errors_interval_seconds{node=\"node1\"} 300\n"));
        // A first run has nothing to compare with: no figure rather than a zero.
        let first = Measured::default();
        let text = health_metrics(&run(Some(&first))).render();
        assert!(!text.contains("gpudirect_health_nic_error"), "{text}");
    }

    #[test]
    fn a_textfile_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        write_textfile(dir.path(), "gpudirect.prom", "a 1\n# EOF\n").unwrap();
        write_textfile(dir.path(), "gpudirect.prom", "a 2\n# EOF\n").unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["gpudirect.prom"], "no temporary file left");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("gpudirect.prom")).unwrap(),
            "a 2\n# EOF\n"
        );
    }

    /// Issue #32: node_exporter reads the file while health rewrites it; it must only ever
    /// see a whole file. A writer rewrites it in a loop with texts of different lengths
    /// (a partial write of the long one would read as a prefix of it), a reader reads it
    /// as fast as it can, and every read must be one of the texts, whole.
    #[test]
    fn a_reader_never_sees_a_partial_textfile_while_it_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpudirect_health.prom");
        let long: String = (0..2000)
            .map(|i| format!("gpudirect_x{{i=\"{i}\"}} {i}\n"))
            .collect();
        let texts = [
            format!("{long}# EOF\n"),
            "gpudirect_x 1\n# EOF\n".to_string(),
        ];
        write_textfile(dir.path(), "gpudirect_health.prom", &texts[0]).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (dir, texts, stop) = (dir.path().to_path_buf(), texts.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    write_textfile(&dir, "gpudirect_health.prom", &texts[n % 2]).unwrap();
                    n += 1;
                }
                n
            })
        };
        let mut reads = 0;
        let start = std::time::Instant::now();
        while reads < 3000 || start.elapsed() < std::time::Duration::from_millis(200) {
            let seen = std::fs::read_to_string(&path).unwrap();
            assert!(
                texts.contains(&seen),
                "a partial file, {} bytes",
                seen.len()
            );
            reads += 1;
            if start.elapsed() > std::time::Duration::from_secs(20) {
                break;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let writes = writer.join().unwrap();
        assert!(
            writes > 10,
            "the writer rewrote the file while it was read ({writes} writes)"
        );
    }

    /// The shipped Grafana dashboard (docs/grafana-dashboard.json) is JSON, and every
    /// metric its queries name is one this module writes: a renamed family breaks this.
    #[test]
    fn the_shipped_dashboard_queries_only_metrics_we_write() {
        let text = include_str!("../../docs/grafana-dashboard.json");
        let doc: serde_json::Value = serde_json::from_str(text).expect("the dashboard is JSON");
        let ours = include_str!("metrics.rs");
        let mut named = 0;
        for panel in doc["panels"].as_array().expect("panels") {
            for target in panel["targets"].as_array().expect("targets") {
                let expr = target["expr"].as_str().expect("an expr");
                for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    if word.starts_with("gpudirect_") {
                        named += 1;
                        assert!(
                            ours.contains(&format!("\"{word}\"")),
                            "{word} is not written here"
                        );
                    }
                }
            }
        }
        assert!(named >= 8, "{named}");
    }
}
