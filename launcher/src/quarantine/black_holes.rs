//! Black holes (issue #44): a node that fails every job within seconds keeps its queue
//! draining into it, since the scheduler sees it idle again at once. Found from Slurm's
//! accounting: the allocations that ended in a window ([`SACCT_FORMAT`], one line each),
//! judged per node by [`suspects`] with a [`Rule`]. Pure apart from [`ended_jobs`], which
//! asks `sacct`.
//!
//! The rule, per node: at least `min_jobs` allocations on it failed (`FAILED`, `NODE_FAIL`,
//! `BOOT_FAIL`) within `short` of their start, of at least `min_users` users, and they are
//! at least `min_share` of its allocations. A node whose every such failure was an
//! allocation shared with a suspect of more failures is that suspect's partner, not a
//! black hole. A job's own error (a bad script fails everywhere) is kept out by the share
//! and by the users: one user's broken job fails on every node it lands on, and those
//! nodes also run other users' jobs that pass.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use crate::slurm::{call, scontrol, succeeded, SlurmError};

/// The fields `sacct` is asked for, in this order (`--parsable2`: `|` between them).
pub const SACCT_FORMAT: &str = "JobID,User,NodeList,State,ExitCode,ElapsedRaw";

/// Most nodes one allocation's hostlist is expanded to (a bound on bad input).
const MAX_NODES: usize = 100_000;

/// The states that count as a failed allocation (a user's cancel, a time limit and an
/// out-of-memory kill are the job's).
const FAILED_STATES: [&str; 3] = ["FAILED", "NODE_FAIL", "BOOT_FAIL"];

/// One allocation that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd {
    /// Slurm's job id.
    pub job: String,
    /// Its user.
    pub user: String,
    /// The nodes it ran on.
    pub nodes: Vec<String>,
    /// Its state's first word (`FAILED`; `CANCELLED by 0` is `CANCELLED`).
    pub state: String,
    /// Seconds it ran.
    pub elapsed: u64,
}

impl JobEnd {
    /// Failed within `short` of its start.
    fn failed_fast(&self, short: Duration) -> bool {
        FAILED_STATES.contains(&self.state.as_str()) && self.elapsed <= short.as_secs()
    }
}

/// A line of sacct's answer that is not what [`SACCT_FORMAT`] asks for.
#[derive(Debug, thiserror::Error)]
#[error("sacct line {line}: {why} (`{text}`); the answer should be {SACCT_FORMAT}, `|` between")]
pub struct SacctLineError {
    /// 1-based.
    pub line: usize,
    /// What is wrong.
    pub why: &'static str,
    /// The line, cut to 200 characters.
    pub text: String,
}

/// Reads sacct's `--parsable2 --noheader` answer (pure). Allocations that never got a node
/// (`None assigned`, pending ones cancelled) are left out.
pub fn parse_sacct(text: &str) -> Result<Vec<JobEnd>, SacctLineError> {
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why| SacctLineError {
            line: i + 1,
            why,
            text: line.chars().take(200).collect(),
        };
        let fields: Vec<&str> = line.split('|').collect();
        let [job, user, nodelist, state, _exit, elapsed] = fields[..] else {
            return Err(bad("not 6 fields"));
        };
        if nodelist.is_empty() || nodelist == "None assigned" {
            continue;
        }
        let nodes = gpudirect_core::hostlist::expand_with_limit(nodelist, MAX_NODES)
            .map_err(|_| bad("its NodeList is not a hostlist"))?;
        let elapsed = elapsed
            .trim()
            .parse()
            .map_err(|_| bad("its ElapsedRaw is not a number of seconds"))?;
        jobs.push(JobEnd {
            job: job.to_string(),
            user: user.to_string(),
            nodes,
            state: state
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string(),
            elapsed,
        });
    }
    Ok(jobs)
}

/// When a node is a black hole.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// A failure counts when the allocation ended this soon after its start.
    pub short: Duration,
    /// Fewest fast failures.
    pub min_jobs: usize,
    /// Fewest distinct users among them.
    pub min_users: usize,
    /// Least share of the node's allocations they are (0 to 1).
    pub min_share: f64,
}

impl Default for Rule {
    fn default() -> Rule {
        Rule {
            short: Duration::from_secs(60),
            min_jobs: 3,
            min_users: 2,
            min_share: 0.8,
        }
    }
}

/// A node the rule names, with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suspect {
    /// The node.
    pub node: String,
    /// Allocations that failed fast on it.
    pub failed: usize,
    /// All its allocations in the window.
    pub jobs: usize,
    /// The users of the failed ones.
    pub users: Vec<String>,
    /// The failed ones' ids (the first 5).
    pub examples: Vec<String>,
}

impl Suspect {
    /// One line for the quarantine's comment and the sweep's log.
    pub fn problem(&self, rule: &Rule, window: Duration) -> String {
        format!(
            "black hole: {} of its {} jobs in the last {} s failed within {} s, of {} users ({}); jobs {} (sacct)",
            self.failed,
            self.jobs,
            window.as_secs(),
            rule.short.as_secs(),
            self.users.len(),
            self.users.join(", "),
            self.examples.join(", ")
        )
    }
}

/// The nodes `jobs` show to be black holes under `rule` (pure), most failures first.
pub fn suspects(jobs: &[JobEnd], rule: &Rule) -> Vec<Suspect> {
    #[derive(Default)]
    struct Tally<'a> {
        jobs: usize,
        failed: Vec<&'a JobEnd>,
    }
    let mut per_node: BTreeMap<&str, Tally> = BTreeMap::new();
    for job in jobs {
        for node in &job.nodes {
            let tally = per_node.entry(node.as_str()).or_default();
            tally.jobs += 1;
            if job.failed_fast(rule.short) {
                tally.failed.push(job);
            }
        }
    }
    let candidates: BTreeMap<&str, &Tally> = per_node
        .iter()
        .filter(|(_, t)| {
            let users: BTreeSet<&str> = t.failed.iter().map(|j| j.user.as_str()).collect();
            t.failed.len() >= rule.min_jobs
                && users.len() >= rule.min_users
                && t.failed.len() as f64 >= rule.min_share * t.jobs as f64
        })
        .map(|(n, t)| (*n, t))
        .collect();
    // A partner: every fast failure of it shared with a candidate that failed more.
    let partner = |node: &str, tally: &Tally| {
        tally.failed.iter().all(|job| {
            job.nodes.iter().any(|other| {
                other != node
                    && candidates
                        .get(other.as_str())
                        .is_some_and(|t| t.failed.len() > tally.failed.len())
            })
        })
    };
    let mut found: Vec<Suspect> = candidates
        .iter()
        .filter(|(node, tally)| !partner(node, tally))
        .map(|(node, tally)| Suspect {
            node: node.to_string(),
            failed: tally.failed.len(),
            jobs: tally.jobs,
            users: tally
                .failed
                .iter()
                .map(|j| j.user.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            examples: tally.failed.iter().take(5).map(|j| j.job.clone()).collect(),
        })
        .collect();
    found.sort_by(|a, b| b.failed.cmp(&a.failed).then(a.node.cmp(&b.node)));
    found
}

/// The allocations of every user that ended in the last `window`, from `sacct` (the
/// cluster's accounting must be on: slurmdbd).
pub fn ended_jobs(window: Duration) -> Result<String, SlurmError> {
    let mut job = scontrol([]);
    job.program = "sacct".into();
    job.args = vec![
        "--allusers".into(),
        "--allocations".into(),
        "--noheader".into(),
        "--parsable2".into(),
        format!("--starttime=now-{}seconds", window.as_secs()).into(),
        "--endtime=now".into(),
        format!("--format={SACCT_FORMAT}").into(),
    ];
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)?;
    Ok(String::from_utf8_lossy(&finished.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/../tests/fixtures/sacct/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(path).unwrap()
    }

    fn job(id: &str, user: &str, nodes: &[&str], state: &str, elapsed: u64) -> JobEnd {
        JobEnd {
            job: id.into(),
            user: user.into(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            state: state.into(),
            elapsed,
        }
    }

    /// Real sacct (22.05): node3 failed every job of two users within 2 s; node2 shared two
    /// of those failures and passed five; node5's two failures were the jobs' own (exit 2)
    /// and it passed two.
    #[test]
    fn the_node_that_fails_every_users_jobs_fast_is_the_one_named() {
        let jobs = parse_sacct(&fixture("22.05-black-hole-node3.txt")).unwrap();
        assert_eq!(jobs.len(), 20);
        assert_eq!(jobs[5].nodes, ["node2", "node3"]);
        let found = suspects(&jobs, &Rule::default());
        assert_eq!(found.len(), 1, "{found:?}");
        let node3 = &found[0];
        assert_eq!(node3.node, "node3");
        assert_eq!((node3.failed, node3.jobs), (9, 9));
        assert_eq!(node3.users, ["gdtestuser", "gdtestuser2"]);
        let said = node3.problem(&Rule::default(), Duration::from_secs(3600));
        assert!(
            said.starts_with("black hole: 9 of its 9 jobs in the last 3600 s failed within 60 s, of 2 users (gdtestuser, gdtestuser2); jobs 616, 618, 619, 620, 621"),
            "{said}"
        );
    }

    /// One user's broken job fails everywhere: not a node's fault. Slow failures, a cancel
    /// and a time limit are not fast failures either.
    #[test]
    fn one_users_failures_and_slow_or_cancelled_jobs_name_no_node() {
        let mut jobs: Vec<JobEnd> = (0..5)
            .map(|i| job(&i.to_string(), "alice", &["n1"], "FAILED", 1))
            .collect();
        jobs.extend((5..10).map(|i| job(&i.to_string(), "bob", &["n2"], "FAILED", 3600)));
        jobs.extend((10..15).map(|i| job(&i.to_string(), "carol", &["n3"], "CANCELLED", 1)));
        jobs.push(job("15", "dan", &["n3"], "TIMEOUT", 1));
        assert_eq!(suspects(&jobs, &Rule::default()), []);
        // With a second user failing fast on n1, n1 is named.
        jobs.extend((16..18).map(|i| job(&i.to_string(), "erin", &["n1"], "NODE_FAIL", 5)));
        let found = suspects(&jobs, &Rule::default());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].node, "n1");
    }

    /// The partner of a black hole in two-node jobs fails as often, but only with it.
    #[test]
    fn a_partner_that_failed_only_beside_a_worse_node_is_not_named() {
        let mut jobs = vec![
            job("1", "a", &["bad", "ok"], "FAILED", 1),
            job("2", "b", &["bad", "ok"], "FAILED", 1),
            job("3", "c", &["bad", "ok"], "FAILED", 1),
        ];
        jobs.push(job("4", "d", &["bad"], "FAILED", 1));
        let found = suspects(&jobs, &Rule::default());
        assert_eq!(
            found.iter().map(|s| s.node.as_str()).collect::<Vec<_>>(),
            ["bad"]
        );
    }

    #[test]
    fn a_line_not_of_the_format_is_an_error_naming_it() {
        let e = parse_sacct("1|a|n1|FAILED|1:0|0\n2|b|n[1-|FAILED|1:0|0\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().contains("NodeList is not a hostlist"), "{e}");
        let e = parse_sacct("1|a|n1|FAILED\n").unwrap_err();
        assert!(e.to_string().contains("not 6 fields"), "{e}");
        let e = parse_sacct("1|a|n1|FAILED|1:0|soon\n").unwrap_err();
        assert!(e.to_string().contains("ElapsedRaw"), "{e}");
        // Never given a node: left out.
        assert_eq!(
            parse_sacct("7|a|None assigned|CANCELLED by 0|0:0|0\n").unwrap(),
            []
        );
    }
}
