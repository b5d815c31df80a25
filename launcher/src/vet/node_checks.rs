//! vet's first step: `gpudirect agent health` (the node's `gpudirect health --json` with
//! its GPU-to-NIC map) on every node of the job at once, one task per node in one srun
//! step ([`crate::slurm::AgentStep`]), each node's answer read from srun's `--label` output.
//! The nodes' GPU-to-NIC maps and NIC subnets are then compared
//! ([`crate::validate::wiring::analyse`], as `validate --test wiring` does): a node whose
//! GPU i is off the rail the other nodes have it on fails check `wiring`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::Checked;
use crate::budget::Budget;
use crate::runner::{Finished, Job};
use crate::slurm::{AgentStep, SlurmError, StepProfile};

/// How long the node checks may take at most (within the budget): they read sysfs.
pub const CHECKS_TIMEOUT: Duration = Duration::from_secs(60);

/// What vet reads of one node's `gpudirect health --json`.
#[derive(Debug, Deserialize)]
struct HealthAnswer {
    node: String,
    #[serde(default)]
    failures: Vec<Failure>,
    #[serde(default)]
    could_not_check: Option<String>,
    /// The node's map and subnets (`--wiring`; absent from an older gpudirect's answer).
    #[serde(default)]
    wiring: Option<crate::validate::wiring::NodeWiring>,
}

#[derive(Debug, Deserialize)]
struct Failure {
    check: String,
    problem: String,
    #[serde(default)]
    fix: String,
}

/// A key every health report holds, which marks its lines in srun's output.
const LINE_KEY: &str = "\"attempts\"";

/// The step: one `gpudirect agent health` per node of `nodes`, through srun.
pub fn checks_job(
    config: &Path,
    profile: Option<&str>,
    nodes: &[String],
    timeout: Duration,
) -> Result<Job, SlurmError> {
    let mut args: Vec<OsString> = vec!["health".into(), "--config".into(), config.into()];
    if let Some(p) = profile {
        args.extend([OsString::from("--profile"), OsString::from(p)]);
    }
    AgentStep {
        timeout,
        ..AgentStep::per_node(nodes, StepProfile::Default, args)
    }
    .job()
}

/// Runs the checks within `budget`; each node's answer. A node with no readable answer is
/// [`Checked::NoAnswer`], unless the budget stopped the step first ([`Checked::NotRun`]).
pub fn run_checks(
    job: &Job,
    nodes: &[String],
    budget: &Budget,
) -> Result<BTreeMap<String, Checked>, SlurmError> {
    // Silence is a finding here, not an error: run_step, not ask_nodes.
    let asked = crate::slurm::run_step(job, read_answers, budget.flag())?;
    Ok(judge(
        asked.answers,
        &asked.finished,
        nodes,
        budget.stopped(),
    ))
}

/// The health answers in srun's output.
fn read_answers(stdout: &str) -> (Vec<HealthAnswer>, Vec<String>) {
    crate::slurm::read_labelled_json::<HealthAnswer>(stdout, LINE_KEY)
}

/// Each node's answer from the finished step (pure): its failures, or that it gave none.
pub fn read_checks(
    finished: &Finished,
    nodes: &[String],
    stopped: bool,
) -> BTreeMap<String, Checked> {
    let (answers, _unreadable) = read_answers(&String::from_utf8_lossy(&finished.stdout));
    judge(answers, finished, nodes, stopped)
}

/// Each node's answer from what it said and how the step ended (pure).
fn judge(
    answers: Vec<HealthAnswer>,
    finished: &Finished,
    nodes: &[String],
    stopped: bool,
) -> BTreeMap<String, Checked> {
    let mut checked: BTreeMap<String, Checked> = BTreeMap::new();
    let wirings: Vec<_> = answers.iter().filter_map(|a| a.wiring.clone()).collect();
    for a in answers {
        let result = match (a.failures.is_empty(), a.could_not_check) {
            (true, None) => Checked::Passed,
            (true, Some(why)) => Checked::NoAnswer(format!("it could not check: {why}")),
            (false, _) => Checked::Failed(
                a.failures
                    .iter()
                    .map(|f| match f.fix.is_empty() {
                        true => format!("{}: {}", f.check, f.problem),
                        false => format!("{}: {} ({})", f.check, f.problem, f.fix),
                    })
                    .collect(),
            ),
        };
        checked.insert(a.node, result);
    }
    add_wiring(&mut checked, &wirings);
    let stderr = String::from_utf8_lossy(&finished.stderr);
    let said = last_words(&stderr).unwrap_or_else(|| finished.outcome.to_string());
    for node in nodes {
        checked
            .entry(node.clone())
            .or_insert_with(|| match stopped {
                true => Checked::NotRun,
                false => Checked::NoAnswer(said.clone()),
            });
    }
    checked
}

/// Fails check `wiring` on each node the comparison of the nodes' maps names alone (a
/// finding that names several nodes, where no majority tells which is off, fails none;
/// nor does one about a node whose map is missing: its checks say more).
fn add_wiring(
    checked: &mut BTreeMap<String, Checked>,
    wirings: &[crate::validate::wiring::NodeWiring],
) {
    let nodes: Vec<String> = wirings.iter().map(|w| w.node.clone()).collect();
    let analysis = crate::validate::wiring::analyse(wirings, &nodes);
    for f in analysis
        .findings
        .iter()
        .filter(|f| f.gpus.len() + f.nics.len() > 0)
    {
        let problem = format!("wiring: {}", f.message);
        match checked.get_mut(&f.node) {
            Some(Checked::Failed(list)) => list.push(problem),
            Some(c @ Checked::Passed) => *c = Checked::Failed(vec![problem]),
            _ => {}
        }
    }
}

/// The last line srun or a task said on stderr, shortened.
fn last_words(stderr: &str) -> Option<String> {
    let line = stderr.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    Some(line.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::Outcome;

    fn finished(stdout: &str, stderr: &str, code: i32) -> Finished {
        Finished {
            outcome: Outcome::Exited { code },
            stdout: stdout.as_bytes().to_vec(),
            stdout_dropped: 0,
            stderr: stderr.as_bytes().to_vec(),
            elapsed: Duration::from_secs(1),
        }
    }

    fn nodes() -> Vec<String> {
        ["node1", "node2", "node3"].map(String::from).to_vec()
    }

    #[test]
    fn every_node_gets_its_answer_or_says_it_gave_none() {
        let stdout = "0: {\"node\":\"node1\",\"failures\":[],\"attempts\":1}\n\
                      1: {\"node\":\"node2\",\"failures\":[{\"check\":\"nics\",\"problem\":\"eth3 is down\",\"fix\":\"ip link set eth3 up\"}],\"attempts\":1}\n";
        let stderr = "srun: error: node3: task 2: Exited with exit code 1\n";
        let got = read_checks(&finished(stdout, stderr, 1), &nodes(), false);
        assert_eq!(got["node1"], Checked::Passed);
        assert_eq!(
            got["node2"],
            Checked::Failed(vec!["nics: eth3 is down (ip link set eth3 up)".into()])
        );
        assert_eq!(
            got["node3"],
            Checked::NoAnswer("srun: error: node3: task 2: Exited with exit code 1".into())
        );
        let stopped = read_checks(&finished("", "", 0), &nodes(), true);
        assert!(stopped.values().all(|c| *c == Checked::NotRun));
    }

    /// A health answer with a wiring report: GPUs 0-1 on eth1, 2-3 on eth2; `octets` are
    /// eth1's and eth2's subnets' third octet.
    fn answer(label: usize, node: &str, octets: [u8; 2]) -> String {
        use crate::validate::wiring::{GpuWire, NicNet, NodeWiring};
        let wiring = NodeWiring {
            gpudirect_wiring: 1,
            node: node.into(),
            profile: Some("tcpx".into()),
            source: "profile tcpx's gpu_nics".into(),
            gpus: (0..4)
                .map(|g| GpuWire {
                    gpu: g,
                    nics: vec![format!("eth{}", g / 2 + 1)],
                })
                .collect(),
            nics: (0..2)
                .map(|k| NicNet {
                    name: format!("eth{}", k + 1),
                    present: true,
                    state: Some("up".into()),
                    subnets: vec![format!("10.213.{}.0/24", octets[k])],
                })
                .collect(),
            notes: Vec::new(),
        };
        format!(
            "{label}: {}\n",
            serde_json::json!({"node": node, "failures": [], "attempts": 1, "wiring": wiring})
        )
    }

    #[test]
    fn a_node_whose_nics_are_on_each_others_rails_fails_check_wiring() {
        let stdout = [
            answer(0, "node1", [1, 2]),
            answer(1, "node2", [2, 1]),
            answer(2, "node3", [1, 2]),
        ]
        .concat();
        let got = read_checks(&finished(&stdout, "", 0), &nodes(), false);
        assert_eq!(got["node1"], Checked::Passed);
        assert_eq!(got["node3"], Checked::Passed);
        let Checked::Failed(problems) = &got["node2"] else {
            panic!("{got:?}");
        };
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("wiring: GPUs 0-1 (eth1) are on 10.213.2.0/24, where 2 of 3 nodes have them on 10.213.1.0/24"),
            "{problems:?}"
        );
        // Two nodes that differ: neither is named, nothing fails.
        let two = [answer(0, "node1", [1, 2]), answer(1, "node2", [2, 1])].concat();
        let nodes2 = ["node1", "node2"].map(String::from).to_vec();
        let got = read_checks(&finished(&two, "", 0), &nodes2, false);
        assert!(got.values().all(|c| *c == Checked::Passed), "{got:?}");
    }

    #[test]
    fn the_step_runs_health_once_per_node_with_the_profile() {
        let nodes = nodes();
        let job = checks_job(
            Path::new("/etc/slurm/gpudirect.toml"),
            Some("tcpx"),
            &nodes,
            Duration::from_secs(5),
        )
        .unwrap();
        let line = job.command_line();
        assert!(line.starts_with("srun "), "{line}");
        assert!(line.contains(" --overlap "), "{line}");
        assert!(line.contains(" --mpi=none "), "{line}");
        assert!(line.contains("--nodelist=node[1-3]"), "{line}");
        assert!(line.contains("--ntasks-per-node=1"), "{line}");
        assert!(!line.contains("--gpudirect"), "{line}");
        let exe = std::env::current_exe().unwrap();
        assert!(
            line.ends_with(&format!(
                "{} agent health --config /etc/slurm/gpudirect.toml --profile tcpx",
                exe.display()
            )),
            "{line}"
        );
    }
}
