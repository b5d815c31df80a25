//! Hostfiles from an allocation (or a hostlist), in three pure stages: [`Request::resolve`]
//! decides where the node list and the slot counts come from (flags, else
//! `SLURM_JOB_NODELIST` and `SLURM_TASKS_PER_NODE`, as inside `salloc`/`sbatch`);
//! [`entries`] pairs each expanded node with its slot count and checks that they agree;
//! [`render`] writes one of four formats. `gpudirect hostfile` expands the list (built in,
//! or `scontrol`) and writes the file.

use clap::ValueEnum;
use gpudirect_core::hostlist::{self, HostlistError};

/// Environment variable Slurm sets to the allocation's compressed node list.
pub use crate::slurm::NODELIST_ENV;
/// Environment variable Slurm sets to the tasks per node, e.g. `8(x2),4`.
pub const TASKS_PER_NODE_ENV: &str = "SLURM_TASKS_PER_NODE";

/// The hostfile dialects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Open MPI: `host slots=N` per node.
    Openmpi,
    /// MPICH / Hydra: `host:N` per node.
    Mpich,
    /// One host name per line, slots ignored.
    Hosts,
    /// SLURM_HOSTFILE for `srun --distribution=arbitrary`: one line per task.
    Slurm,
}

/// Where a value came from, to name it in error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A command-line flag, e.g. `--nodelist`.
    Flag(&'static str),
    /// An environment variable, e.g. `SLURM_JOB_NODELIST`.
    Env(&'static str),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Flag(name) => write!(f, "{name}"),
            Origin::Env(name) => write!(f, "${name}"),
        }
    }
}

/// How many slots each node gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slots {
    /// The same count on every node.
    Uniform(u32),
    /// One count per node, in `SLURM_TASKS_PER_NODE` syntax, not yet parsed.
    PerNode {
        /// The text as given.
        text: String,
        /// Where it came from.
        origin: Origin,
    },
}

/// What the user asked for, with its sources, before any expansion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The hostlist expression.
    pub nodelist: String,
    /// Where `nodelist` came from.
    pub nodelist_origin: Origin,
    /// The slot counts.
    pub slots: Slots,
}

impl Request {
    /// Decide the node list and slots from `--nodelist` and `--slots`, falling back to the
    /// allocation's environment (`env` looks a variable up; `std::env::var` in production).
    pub fn resolve(
        nodelist: Option<&str>,
        slots: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, HostfileError> {
        let (nodelist, nodelist_origin) = match nodelist {
            Some(expr) => (expr.to_string(), Origin::Flag("--nodelist")),
            None => match env(NODELIST_ENV) {
                Some(expr) => (expr, Origin::Env(NODELIST_ENV)),
                None => return Err(HostfileError::NoNodelist),
            },
        };
        if nodelist.trim().is_empty() {
            return Err(HostfileError::EmptyNodelist(nodelist_origin));
        }
        let slots = match slots {
            Some(text) => parse_slots_flag(text)?,
            None if nodelist_origin == Origin::Env(NODELIST_ENV) => match env(TASKS_PER_NODE_ENV) {
                Some(text) => Slots::PerNode {
                    text,
                    origin: Origin::Env(TASKS_PER_NODE_ENV),
                },
                None => return Err(HostfileError::NoTasksPerNode),
            },
            None => Slots::Uniform(1),
        };
        Ok(Self {
            nodelist,
            nodelist_origin,
            slots,
        })
    }
}

/// `--slots`: a bare number applies to every node, anything else is a per-node list.
fn parse_slots_flag(text: &str) -> Result<Slots, HostfileError> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        let n: u32 = trimmed
            .parse()
            .map_err(|_| HostfileError::SlotsTooLarge(text.to_string()))?;
        return Ok(Slots::Uniform(n));
    }
    Ok(Slots::PerNode {
        text: text.to_string(),
        origin: Origin::Flag("--slots"),
    })
}

/// One line of a hostfile: a node and how many tasks it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The node's host name.
    pub host: String,
    /// Tasks (MPI ranks) on that node; at least 1.
    pub slots: u32,
}

/// Pair each host with its slot count; the counts must cover the nodes one for one.
pub fn entries(request: &Request, hosts: Vec<String>) -> Result<Vec<Entry>, HostfileError> {
    if hosts.is_empty() {
        return Err(HostfileError::NoNode {
            nodelist: request.nodelist.clone(),
            origin: request.nodelist_origin.clone(),
        });
    }
    let counts = match &request.slots {
        Slots::Uniform(n) => vec![*n; hosts.len()],
        Slots::PerNode { text, origin } => {
            let counts =
                hostlist::parse_tasks_per_node(text).map_err(|source| HostfileError::BadSlots {
                    origin: origin.clone(),
                    text: text.clone(),
                    source,
                })?;
            if counts.len() != hosts.len() {
                return Err(HostfileError::CountMismatch {
                    nodes: hosts.len(),
                    nodelist_origin: request.nodelist_origin.clone(),
                    nodelist: request.nodelist.clone(),
                    counts: counts.len(),
                    slots_origin: origin.clone(),
                    text: text.clone(),
                    first: counts.first().copied().unwrap_or(1),
                });
            }
            counts
        }
    };
    hosts
        .into_iter()
        .zip(counts)
        .map(|(host, slots)| {
            if slots == 0 {
                return Err(HostfileError::ZeroSlots(host));
            }
            Ok(Entry { host, slots })
        })
        .collect()
}

/// Refuse a `slurm`-format file (one line per task) of more than [`hostlist::MAX_HOSTS`]
/// lines: `--slots 4000000000` would otherwise try to build gigabytes of text.
pub fn check_size(format: Format, entries: &[Entry]) -> Result<(), HostfileError> {
    let tasks: u64 = entries.iter().map(|e| u64::from(e.slots)).sum();
    if format == Format::Slurm && tasks > hostlist::MAX_HOSTS as u64 {
        return Err(HostfileError::TooManyTasks(tasks));
    }
    Ok(())
}

/// Write `entries` in `format`; every line ends with a newline.
pub fn render(format: Format, entries: &[Entry]) -> String {
    let mut out = String::new();
    for e in entries {
        match format {
            Format::Openmpi => out.push_str(&format!("{} slots={}\n", e.host, e.slots)),
            Format::Mpich => out.push_str(&format!("{}:{}\n", e.host, e.slots)),
            Format::Hosts => {
                out.push_str(&e.host);
                out.push('\n');
            }
            Format::Slurm => {
                for _ in 0..e.slots {
                    out.push_str(&e.host);
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// What is wrong with a hostfile request; each message says how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum HostfileError {
    /// Neither `--nodelist` nor the allocation's variable.
    #[error(
        "no node list: {NODELIST_ENV} is not set; run inside an allocation (salloc, sbatch) \
         or pass --nodelist, e.g. --nodelist 'gpu[01-04]'"
    )]
    NoNodelist,
    /// An empty node list.
    #[error("the node list from {0} is empty: give at least one node, e.g. 'gpu[01-04]'")]
    EmptyNodelist(Origin),
    /// The node list came from the allocation but its task counts did not.
    #[error(
        "{TASKS_PER_NODE_ENV} is not set although {NODELIST_ENV} is: pass --slots N (or \
         --slots '8(x2),4') to say how many tasks each node runs"
    )]
    NoTasksPerNode,
    /// `--slots N` with N past `u32`.
    #[error("--slots `{0}` is too large: give a task count per node below 2^32")]
    SlotsTooLarge(String),
    /// The list expanded to no node.
    #[error("the node list `{nodelist}` from {origin} names no node")]
    NoNode {
        /// The list.
        nodelist: String,
        /// Where it came from.
        origin: Origin,
    },
    /// Slot counts that do not parse.
    #[error("invalid slot counts in {origin} `{text}`")]
    BadSlots {
        /// Where they came from.
        origin: Origin,
        /// The text.
        text: String,
        /// Why.
        source: HostlistError,
    },
    /// Not one count per node.
    #[error(
        "{nodes} node(s) in {nodelist_origin} `{nodelist}` but {counts} slot count(s) in \
         {slots_origin} `{text}`: give one count per node, e.g. --slots '{first}(x{nodes})', \
         or a single number for all nodes"
    )]
    CountMismatch {
        /// Nodes in the list.
        nodes: usize,
        /// Where the list came from.
        nodelist_origin: Origin,
        /// The list.
        nodelist: String,
        /// Counts given.
        counts: usize,
        /// Where the counts came from.
        slots_origin: Origin,
        /// The counts as written.
        text: String,
        /// The first count (for the example).
        first: u32,
    },
    /// A node with no task.
    #[error("node {0} gets 0 slots: every node in a hostfile needs at least 1")]
    ZeroSlots(String),
    /// A `slurm`-format file too long to write.
    #[error(
        "the slurm format writes one line per task and {0} tasks is more than {max}: check \
         --slots or $SLURM_TASKS_PER_NODE",
        max = hostlist::MAX_HOSTS
    )]
    TooManyTasks(u64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// `--nodelist` and `--slots`, as given.
    fn args<'a>(
        nodelist: Option<&'a str>,
        slots: Option<&'a str>,
    ) -> (Option<&'a str>, Option<&'a str>) {
        (nodelist, slots)
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn build(
        (nodelist, slots): &(Option<&str>, Option<&str>),
        env: &[(&str, &str)],
    ) -> Result<Vec<Entry>, HostfileError> {
        let request = Request::resolve(*nodelist, *slots, env_of(env))?;
        let hosts = hostlist::expand(&request.nodelist).expect("a valid hostlist");
        entries(&request, hosts)
    }

    fn e(host: &str, slots: u32) -> Entry {
        Entry {
            host: host.into(),
            slots,
        }
    }

    const ALLOC: &[(&str, &str)] = &[
        ("SLURM_JOB_NODELIST", "a3h-[0001-0003]"),
        ("SLURM_TASKS_PER_NODE", "8(x2),4"),
    ];

    #[test]
    fn allocation_environment_gives_nodes_and_slots() {
        let got = build(&args(None, None), ALLOC).unwrap();
        assert_eq!(got, [e("a3h-0001", 8), e("a3h-0002", 8), e("a3h-0003", 4)]);
    }

    #[test]
    fn flags_override_environment() {
        let got = build(&args(Some("gpu[1-2]"), Some("2")), ALLOC).unwrap();
        assert_eq!(got, [e("gpu1", 2), e("gpu2", 2)]);
        // --slots alone overrides the tasks per node of the allocation's node list.
        let got = build(&args(None, Some("1")), ALLOC).unwrap();
        assert_eq!(got.iter().map(|e| e.slots).sum::<u32>(), 3);
        // --nodelist without --slots does not borrow the allocation's counts.
        let got = build(&args(Some("x,y"), None), ALLOC).unwrap();
        assert_eq!(got, [e("x", 1), e("y", 1)]);
        let got = build(&args(Some("x,y"), Some("4,2")), &[]).unwrap();
        assert_eq!(got, [e("x", 4), e("y", 2)]);
    }

    #[test]
    fn missing_environment_says_how_to_fix() {
        let msg = build(&args(None, None), &[]).unwrap_err().to_string();
        assert!(msg.contains("SLURM_JOB_NODELIST is not set"), "{msg}");
        assert!(
            msg.contains("run inside an allocation") && msg.contains("--nodelist"),
            "{msg}"
        );
        let msg = build(&args(None, None), &[("SLURM_JOB_NODELIST", "n1")])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("SLURM_TASKS_PER_NODE is not set") && msg.contains("--slots"),
            "{msg}"
        );
        let msg = build(&args(Some(" "), None), &[]).unwrap_err().to_string();
        assert!(msg.contains("empty"), "{msg}");
    }

    #[test]
    fn count_mismatch_names_both_sources() {
        let env = [
            ("SLURM_JOB_NODELIST", "n[1-3]"),
            ("SLURM_TASKS_PER_NODE", "8(x2)"),
        ];
        let msg = build(&args(None, None), &env).unwrap_err().to_string();
        assert!(
            msg.contains("3 node(s) in $SLURM_JOB_NODELIST `n[1-3]`")
                && msg.contains("2 slot count(s) in $SLURM_TASKS_PER_NODE `8(x2)`"),
            "{msg}"
        );
        let msg = build(&args(Some("n1"), Some("1,1")), &[])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("--nodelist") && msg.contains("--slots"),
            "{msg}"
        );
    }

    #[test]
    fn bad_slots_and_zero_slots_are_refused() {
        let err = build(&args(Some("n1"), Some("8(x")), &[]).unwrap_err();
        let cause = std::error::Error::source(&err).map(ToString::to_string);
        assert!(err.to_string().contains("--slots `8(x`"), "{err}");
        assert!(
            cause.as_deref().is_some_and(|c| c.contains("byte 1")),
            "{cause:?}"
        );
        let msg = build(&args(Some("n1"), Some("0")), &[])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("n1 gets 0 slots"), "{msg}");
        let msg = build(&args(Some("n1"), Some("99999999999")), &[])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("too large"), "{msg}");
    }

    #[test]
    fn renders_every_format() {
        let entries = [e("gpu01", 2), e("gpu02", 1)];
        assert_eq!(
            render(Format::Openmpi, &entries),
            "gpu01 slots=2\ngpu02 slots=1\n"
        );
        assert_eq!(render(Format::Mpich, &entries), "gpu01:2\ngpu02:1\n");
        assert_eq!(render(Format::Hosts, &entries), "gpu01\ngpu02\n");
        assert_eq!(render(Format::Slurm, &entries), "gpu01\ngpu01\ngpu02\n");
        assert_eq!(render(Format::Openmpi, &[]), "");
        let huge = [e("n1", 600_000), e("n2", 600_000)];
        let msg = check_size(Format::Slurm, &huge).unwrap_err().to_string();
        assert!(msg.contains("1200000 tasks"), "{msg}");
        assert!(check_size(Format::Openmpi, &huge).is_ok());
        assert!(check_size(Format::Slurm, &entries).is_ok());
    }
}
