//! `gpudirect hang JOBID[.STEP]`: which rank a hung job waits for, from NCCL's RAS.
//!
//! ```text
//! gpudirect hang 4242 ──srun --overlap --jobid 4242 -N <its nodes> gpudirect agent hang 4242──┐
//!   on every node, inside the job (its network namespace, its user):                        │
//!     the job's processes (/proc/*/environ: SLURM_JOB_ID, SLURM_PROCID, NCCL_RAS_ADDR)       │
//!     the node's IPv4 addresses (/proc/net/fib_trie)                                          │
//!     N polls of the job's RAS address, `interval` apart (ras::query)                         │
//!   one JSON line per node (AgentReport) ─────────────────────────────────────────────────────┘
//! back here: addresses -> nodes, (node, pid) -> task (PlaceTable); poll k of every node ->
//! one snapshot (communicators merged by hash); ras::diagnose -> one verdict per communicator
//! ```
//!
//! RAS answers for whole communicators from any of its processes, so one node's answers are
//! enough to judge; every node's are read so that each rank's host and pid map to a node
//! and a task.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::ras::{self, PlaceTable, Snapshot, Status};

/// Marks an agent's line in srun's output.
pub const LINE_KEY: &str = "\"gpudirect_hang\":";

/// What one agent reads from RAS over all its polls, at most (security review T8: five
/// polls of a 16 MiB answer held 1.1 GB and made a 232 MB line). Every parsed answer is
/// kept until the report goes to the caller in one line, so this bounds both: a parsed
/// answer of minimal ranks takes about 13 times its bytes. A status of 4,096 ranks is about
/// 2 MB: 8 polls of it fit.
pub const AGENT_ANSWER_BUDGET: usize = 16 << 20;

/// The most bytes of agents' output the caller reads, per node of the job: one agent's
/// line, whose answers are bounded by [`AGENT_ANSWER_BUDGET`] (its JSON is about as long as
/// the answers were, measured 232 MB for 5 polls of 16.6 MB), with room to spare.
pub const CALLER_BYTES_PER_NODE: usize = 64 << 20;

/// The most bytes of agents' output the caller reads in all, however many nodes.
pub const CALLER_BYTES_MAX: usize = 1 << 30;

/// The environ of one process is read up to this size.
const MAX_ENVIRON: u64 = 1 << 20;

/// A process of the job on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobProcess {
    /// Its pid (in the node's pid namespace, which RAS reports too).
    pub pid: u32,
    /// `SLURM_PROCID`: its task in its step.
    pub task: Option<u32>,
    /// `SLURM_STEP_ID`.
    pub step: Option<u32>,
    /// `NCCL_RAS_ADDR`, when set.
    pub ras_addr: Option<String>,
}

/// One poll of one RAS address.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Poll {
    /// Seconds since the agent's first poll.
    pub at: f64,
    /// The answer, or the error in words.
    pub status: Option<Status>,
    /// Why there is no answer.
    pub error: Option<String>,
}

/// What the agent on one node found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentReport {
    /// Format version of this line.
    pub gpudirect_hang: u32,
    /// The node (`SLURMD_NODENAME`, else its host name).
    pub node: String,
    /// Its IPv4 addresses.
    pub addrs: Vec<String>,
    /// The job's processes there.
    pub processes: Vec<JobProcess>,
    /// Every pid Slurm lists for the job there (`scontrol listpids`; empty from an agent
    /// of an earlier version, or when Slurm could not say): what a RAS answer's ranks on
    /// this node are checked against ([`foreign_ranks`]).
    #[serde(default)]
    pub job_pids: Vec<u32>,
    /// The RAS address asked.
    pub ras_addr: String,
    /// The polls, in order.
    pub polls: Vec<Poll>,
}

/// `JOBID` or `JOBID.STEP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobStep {
    /// The job.
    pub job: u32,
    /// The step, when given.
    pub step: Option<u32>,
}

impl std::str::FromStr for JobStep {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (job, step) = match s.split_once('.') {
            Some((j, st)) => (j, Some(st)),
            None => (s, None),
        };
        let job = job.parse().map_err(|_| {
            format!("{s:?} is not a job id: write JOBID or JOBID.STEP, e.g. 4242 or 4242.0")
        })?;
        let step = step
            .map(|st| {
                st.parse().map_err(|_| {
                    format!("{s:?}: the step {st:?} is not a number (JOBID.STEP, e.g. 4242.0)")
                })
            })
            .transpose()?;
        Ok(JobStep { job, step })
    }
}

impl std::fmt::Display for JobStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.step {
            Some(s) => write!(f, "{}.{s}", self.job),
            None => write!(f, "{}", self.job),
        }
    }
}

/// `NCCL_RAS_ADDR` as NCCL takes it (`host:port`, `localhost:28028`, `[::1]:28028`), else
/// the default, resolved to a socket address.
pub fn ras_addr(value: Option<&str>) -> Result<SocketAddr, String> {
    let text = value.map(str::trim).filter(|v| !v.is_empty()).map_or_else(
        || format!("127.0.0.1:{}", ras::DEFAULT_PORT),
        str::to_string,
    );
    let with_port = if text
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        text.clone()
    } else {
        format!("{text}:{}", ras::DEFAULT_PORT)
    };
    // One resolution; an IPv4 address first (NCCL's default binds 127.0.0.1).
    let addrs: Vec<SocketAddr> = with_port
        .to_socket_addrs()
        .map(Iterator::collect)
        .unwrap_or_default();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| {
            format!("NCCL_RAS_ADDR={text} is not an address this node can reach (write host:port)")
        })
}

/// The variable named `name` in an environ block (`NAME=value\0...`).
fn environ_var<'a>(environ: &'a [u8], name: &str) -> Option<&'a str> {
    environ.split(|&b| b == 0).find_map(|entry| {
        let rest = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        std::str::from_utf8(rest).ok()
    })
}

/// The processes of job `job` (step `step`, when given) on node `node` under `proc_root`
/// (`/proc`) whose environ this user may read, but those of step `own_step` (the agent's).
/// A task whose `SLURMD_NODENAME` names another node is left out (nodes that share one pid
/// namespace, as the local cluster's do).
pub fn job_processes(
    proc_root: &std::path::Path,
    job: JobStep,
    node: &str,
    own_step: Option<u32>,
) -> Vec<JobProcess> {
    use std::io::Read;
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let job_id = job.job.to_string();
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let mut environ = Vec::new();
        let read = std::fs::File::open(entry.path().join("environ"))
            .and_then(|f| f.take(MAX_ENVIRON).read_to_end(&mut environ));
        if read.is_err() || environ_var(&environ, "SLURM_JOB_ID") != Some(job_id.as_str()) {
            continue;
        }
        let number = |name: &str| environ_var(&environ, name).and_then(|v| v.parse().ok());
        let step: Option<u32> = number("SLURM_STEP_ID");
        if (job.step.is_some() && step != job.step) || (own_step.is_some() && step == own_step) {
            continue;
        }
        if environ_var(&environ, "SLURMD_NODENAME").is_some_and(|n| n != node) {
            continue;
        }
        // Only the step's tasks: srun and slurmstepd's own helpers have no SLURM_PROCID.
        let Some(task) = number("SLURM_PROCID") else {
            continue;
        };
        found.push(JobProcess {
            pid,
            task: Some(task),
            step,
            ras_addr: environ_var(&environ, "NCCL_RAS_ADDR").map(str::to_string),
        });
    }
    found.sort_by_key(|p| p.pid);
    found
}

/// The node's local IPv4 addresses, from `/proc/net/fib_trie` (`|-- A.B.C.D` followed by
/// `/32 host LOCAL`), loopback left out.
pub fn local_addrs(fib_trie: &str) -> Vec<String> {
    let mut addrs = Vec::new();
    let mut last: Option<&str> = None;
    for line in fib_trie.lines() {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("|-- ") {
            last = Some(a.trim());
        } else if t.contains("host LOCAL") {
            if let Some(a) = last.take() {
                if !a.starts_with("127.") && !addrs.iter().any(|x| x == a) {
                    addrs.push(a.to_string());
                }
            }
        }
    }
    addrs.sort();
    addrs
}

/// The socket inodes listening on `port` in the text of `/proc/net/tcp` or `tcp6` (pure):
/// rows in state `0A` (LISTEN) whose local address ends in the port (hex).
pub fn listening_inodes(tcp: &str, port: u16) -> Vec<u64> {
    tcp.lines()
        .skip(1)
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let (_, hex_port) = words.get(1)?.rsplit_once(':')?;
            let listening = *words.get(3)? == "0A";
            let inode: u64 = words.get(9)?.parse().ok()?;
            (listening && u16::from_str_radix(hex_port, 16).ok()? == port && inode > 0)
                .then_some(inode)
        })
        .collect()
}

/// The socket inode a `/proc/PID/fd` link names (`socket:[187569]`), if it is a socket.
pub fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The socket inodes `pid` holds open, read from `proc_root/PID/fd` (those this user may
/// read: the job's own, or any as root).
pub fn socket_inodes(proc_root: &std::path::Path, pid: u32) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| socket_inode(&std::fs::read_link(fd.path()).ok()?.to_string_lossy()))
        .collect()
}

/// Why the RAS listening on `addr`'s port is not job `job`'s, if it is not (security review
/// T1): some socket listening on that port in this network namespace (`tcp`: the texts of
/// `/proc/net/tcp` and `tcp6`) is held by none of `pids`, the processes Slurm lists for the
/// job here. Another user holding the port first leaves the job's NCCL without RAS and would
/// answer for it; another job on the same port would answer with its own communicators.
/// Nothing listening is no problem here: asking then says the job's RAS did not start.
pub fn foreign_listener(
    proc_root: &std::path::Path,
    tcp: &[String],
    addr: SocketAddr,
    job: u32,
    pids: &[u32],
) -> Option<String> {
    let inodes: Vec<u64> = tcp
        .iter()
        .flat_map(|text| listening_inodes(text, addr.port()))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let held: Vec<u64> = pids
        .iter()
        .flat_map(|&pid| socket_inodes(proc_root, pid))
        .collect();
    let foreign = inodes.iter().filter(|i| !held.contains(i)).count();
    (foreign > 0).then(|| {
        format!(
            "{addr}: the port is not job {job}'s: {foreign} of the {} socket(s) listening on port {} belong to no process Slurm lists for the job on this node (another user's or another job's), so its RAS was not asked",
            inodes.len(),
            addr.port()
        )
    })
}

/// The agent's work on one node: find the job's processes and RAS address, poll it.
pub fn agent(
    job: JobStep,
    node: String,
    polls: u32,
    interval: Duration,
    timeout: Duration,
) -> AgentReport {
    let own_step: Option<u32> = std::env::var("SLURM_STEP_ID")
        .ok()
        .and_then(|s| s.parse().ok());
    let proc_root = std::path::Path::new("/proc");
    let addrs = std::fs::read_to_string("/proc/net/fib_trie")
        .map(|t| local_addrs(&t))
        .unwrap_or_default();
    let not_asked = |node: String, addrs: Vec<String>, why: String| AgentReport {
        gpudirect_hang: 1,
        node,
        addrs,
        processes: Vec::new(),
        job_pids: Vec::new(),
        ras_addr: String::new(),
        polls: vec![Poll {
            at: 0.0,
            status: None,
            error: Some(why),
        }],
    };
    // The job's processes are those Slurm lists for it here, never those that only say so
    // in their environment (security review T1: root's agent took a decoy's address).
    let pids: Vec<u32> = match crate::slurm::job_pids(job.job, &node) {
        Ok(listed) => listed
            .into_iter()
            .filter(|(_, step)| own_step.is_none_or(|own| *step != own.to_string()))
            .map(|(pid, _)| pid)
            .collect(),
        Err(e) => {
            let why = format!(
                "Slurm could not list job {}'s processes on this node ({e}): its RAS was not asked",
                job.job
            );
            return not_asked(node, addrs, why);
        }
    };
    let mut processes = job_processes(proc_root, job, &node, own_step);
    processes.retain(|p| pids.contains(&p.pid));
    // The job's own address (the plugin gives every job its own); the first process's.
    let value = processes.iter().find_map(|p| p.ras_addr.clone());
    let mut report = AgentReport {
        gpudirect_hang: 1,
        node,
        addrs,
        processes,
        job_pids: pids.clone(),
        ras_addr: value
            .clone()
            .unwrap_or_else(|| format!("127.0.0.1:{}", ras::DEFAULT_PORT)),
        polls: Vec::new(),
    };
    let checked = ras_addr(value.as_deref()).and_then(|addr| {
        // Only this node's own service is the job's to ask here (T13).
        let own = addr.ip().is_loopback() || report.addrs.contains(&addr.ip().to_string());
        if !own {
            return Err(format!(
                "{addr} is not an address of this node: the job's RAS is asked only where its processes run"
            ));
        }
        let tcp: Vec<String> = ["net/tcp", "net/tcp6"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(proc_root.join(f)).ok())
            .collect();
        match foreign_listener(proc_root, &tcp, addr, job.job, &pids) {
            Some(why) => Err(why),
            None => Ok(addr),
        }
    });
    let addr = match checked {
        Ok(a) => a,
        Err(e) => {
            report.polls.push(Poll {
                at: 0.0,
                status: None,
                error: Some(e),
            });
            return report;
        }
    };
    report.polls = poll_ras(addr, polls, interval, timeout, AGENT_ANSWER_BUDGET);
    report
}

/// How long `polls` polls `interval` apart take (the sleeps between them: a healthy RAS
/// answers in milliseconds), and the most they can take when every query runs to `timeout`.
pub fn poll_duration(polls: u32, interval: Duration, timeout: Duration) -> (Duration, Duration) {
    let polls = polls.max(1);
    let sleeps = interval.saturating_mul(polls - 1);
    (sleeps, sleeps.saturating_add(timeout.saturating_mul(polls)))
}

/// `polls` polls of the RAS server at `addr`, `interval` apart, reading at most `budget`
/// bytes of answers in all: the poll whose answer would pass it is an error saying so, and
/// the last.
pub fn poll_ras(
    addr: SocketAddr,
    polls: u32,
    interval: Duration,
    timeout: Duration,
    budget: usize,
) -> Vec<Poll> {
    let start = Instant::now();
    let mut read = 0usize;
    let mut done = Vec::new();
    for i in 0..polls.max(1) {
        if i > 0 {
            std::thread::sleep(interval);
        }
        let at = start.elapsed().as_secs_f64();
        let left = budget.saturating_sub(read);
        let limit = left.min(ras::MAX_ANSWER_BYTES);
        let (status, error, last) = match ras::query_at_most(addr, timeout, limit) {
            Ok((s, n)) => {
                read += n;
                (Some(s), None, false)
            }
            Err(ras::RasError::TooLarge { .. }) if limit < ras::MAX_ANSWER_BYTES => (
                None,
                Some(format!(
                    "{addr}: this answer would pass the agent's budget of {budget} bytes for all its polls ({read} read before it): polling stopped, the answers so far are kept"
                )),
                true,
            ),
            Err(e) => (None, Some(e.to_string()), false),
        };
        done.push(Poll { at, status, error });
        if last {
            break;
        }
    }
    done
}

/// The agents' reports in srun's `--label` output (a long line of one task may be cut by
/// another's, so each task's pieces are joined by label first), and what could not be read.
pub fn read_agent_lines(stdout: &str) -> (Vec<AgentReport>, Vec<String>) {
    let (mut reports, bad) = crate::slurm::read_labelled_json::<AgentReport>(stdout, LINE_KEY);
    reports.sort_by(|a, b| a.node.cmp(&b.node));
    (reports, bad)
}

/// The place table and the snapshots the agents' reports make: poll k of every node is one
/// snapshot (each communicator from the first node that had it), at the earliest node's time.
pub fn assemble(reports: &[AgentReport]) -> (PlaceTable, Vec<Snapshot>) {
    let mut table = PlaceTable::default();
    for r in reports {
        for a in &r.addrs {
            table.nodes.insert(a.clone(), r.node.clone());
        }
        for p in &r.processes {
            if let Some(task) = p.task {
                table.tasks.insert((r.node.clone(), p.pid), task);
            }
        }
    }
    let polls = reports.iter().map(|r| r.polls.len()).max().unwrap_or(0);
    let mut snapshots = Vec::new();
    for k in 0..polls {
        let mut merged: Option<Status> = None;
        let mut at: Option<f64> = None;
        for r in reports {
            let Some(poll) = r.polls.get(k) else { continue };
            let Some(status) = &poll.status else { continue };
            at = Some(at.map_or(poll.at, |a: f64| a.min(poll.at)));
            match &mut merged {
                None => merged = Some(status.clone()),
                Some(m) => {
                    for c in &status.communicators {
                        if !m.communicators.iter().any(|x| x.hash == c.hash) {
                            m.communicators.push(c.clone());
                        }
                    }
                }
            }
        }
        if let (Some(status), Some(at)) = (merged, at) {
            snapshots.push(Snapshot { at, status });
        }
    }
    (table, snapshots)
}

/// A rank of a RAS answer that says it runs on one of the job's nodes as a process that
/// is not one of the job's there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ForeignRank {
    /// The node its host address belongs to.
    pub node: String,
    /// The pid the answer gives.
    pub pid: u32,
    /// Its rank.
    pub rank: u32,
    /// The communicator.
    pub communicator: String,
}

/// The ranks of the answers placed on a node of the job (by the node's addresses) whose
/// pid is not among the pids Slurm lists for the job there (security review T1: a RAS
/// answer naming other processes is not the job's, whoever answered on its port). Nodes
/// whose agent could not list the job's pids are not judged. Pure.
pub fn foreign_ranks(reports: &[AgentReport], snapshots: &[Snapshot]) -> Vec<ForeignRank> {
    let mut found: Vec<ForeignRank> = Vec::new();
    for snapshot in snapshots {
        for c in &snapshot.status.communicators {
            for r in &c.ranks {
                let Some(node) = reports.iter().find(|n| n.addrs.contains(&r.host)) else {
                    continue;
                };
                if node.job_pids.is_empty() || node.job_pids.contains(&r.pid) {
                    continue;
                }
                let f = ForeignRank {
                    node: node.node.clone(),
                    pid: r.pid,
                    rank: r.rank,
                    communicator: c.hash.clone(),
                };
                if !found.contains(&f) {
                    found.push(f);
                }
            }
        }
    }
    found
}

/// The errors of nodes none of whose polls was answered, by node.
pub fn unanswered(reports: &[AgentReport]) -> BTreeMap<String, String> {
    reports
        .iter()
        .filter(|r| r.polls.iter().all(|p| p.status.is_none()))
        .map(|r| {
            let why = r
                .polls
                .iter()
                .find_map(|p| p.error.clone())
                .unwrap_or_else(|| "no poll ran".into());
            (r.node.clone(), why)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ras::Verdict;

    fn proc_net(name: &str) -> String {
        std::fs::read_to_string(format!(
            "{}/../tests/fixtures/proc-net/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    /// Security review T1, on this host's recorded /proc/net/tcp{,6}: which socket listens
    /// on a port, and whether one of the job's processes holds it.
    /// The defaults (3 polls 5 s apart, 5 s a query) take 10 s, as measured on the GPU host
    /// (10.1 s), and at most 25 s; one poll takes no sleep at all.
    #[test]
    fn polls_take_the_sleeps_between_them() {
        let s = Duration::from_secs;
        assert_eq!(poll_duration(3, s(5), s(5)), (s(10), s(25)));
        assert_eq!(poll_duration(1, s(5), s(5)), (s(0), s(5)));
        assert_eq!(poll_duration(2, s(2), s(5)), (s(2), s(12)));
    }

    #[test]
    fn a_ras_port_is_the_jobs_only_when_a_job_process_holds_its_socket() {
        let (tcp, tcp6) = (proc_net("tcp"), proc_net("tcp6"));
        assert_eq!(listening_inodes(&tcp, 28142), vec![187569]);
        assert_eq!(listening_inodes(&tcp6, 28143), vec![187570]);
        assert_eq!(listening_inodes(&tcp, 2024), vec![121]);
        assert!(listening_inodes(&tcp, 28143).is_empty());
        assert_eq!(socket_inode("socket:[187569]"), Some(187569));
        assert_eq!(socket_inode("pipe:[188489]"), None);

        // A /proc with the listener's fds as recorded (pid 23462), and a decoy's.
        let tmp = tempfile::tempdir().unwrap();
        for (pid, fd, link) in [
            (23462, "3", "socket:[187569]"),
            (23462, "4", "socket:[187570]"),
            (23462, "251", "pipe:[188489]"),
            (4242, "3", "socket:[999]"),
        ] {
            let dir = tmp.path().join(pid.to_string()).join("fd");
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(link, dir.join(fd)).unwrap();
        }
        assert_eq!(socket_inodes(tmp.path(), 23462).len(), 2);
        let both = [tcp.clone(), tcp6.clone()];
        let addr: SocketAddr = "127.0.0.1:28142".parse().unwrap();
        assert_eq!(
            foreign_listener(tmp.path(), &both, addr, 77, &[23462]),
            None
        );
        let why = foreign_listener(tmp.path(), &both, addr, 77, &[4242]).unwrap();
        assert!(
            why.contains("the port is not job 77's") && why.contains("was not asked"),
            "{why}"
        );
        // Nobody listening: asking says the RAS did not start.
        let quiet: SocketAddr = "127.0.0.1:28999".parse().unwrap();
        assert_eq!(foreign_listener(tmp.path(), &both, quiet, 77, &[]), None);
    }

    /// A RAS server on loopback that answers every connection with `reply`.
    fn serve_every_time(reply: Vec<u8>) -> SocketAddr {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                // The client's three commands first, as NCCL reads them.
                let mut got = Vec::new();
                let mut buf = [0u8; 256];
                while got.iter().filter(|&&b| b == b'\n').count() < 3 {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s.write_all(&reply);
            }
        });
        addr
    }

    /// Security review T8: the agent kept every poll's answer, whatever their sum. Now its
    /// polls stop at the budget, and the poll that would pass it says so.
    #[test]
    fn the_agent_reads_at_most_its_budget_of_answers() {
        let answer = std::fs::read(format!(
            "{}/../tests/fixtures/nccl-ras/status-json-rank1-stalled.txt",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let addr = serve_every_time(answer.clone());
        let budget = answer.len() * 5 / 2;
        let polls = poll_ras(addr, 5, Duration::ZERO, Duration::from_secs(5), budget);
        assert_eq!(polls.len(), 3, "{polls:?}");
        assert!(polls[..2].iter().all(|p| p.status.is_some()), "{polls:?}");
        let why = polls[2].error.as_deref().unwrap_or_default();
        assert!(
            why.contains(&format!("the agent's budget of {budget} bytes"))
                && why.contains("polling stopped"),
            "{why}"
        );
        // Within the budget, every poll is made.
        let all = poll_ras(
            addr,
            3,
            Duration::ZERO,
            Duration::from_secs(5),
            answer.len() * 3,
        );
        assert_eq!(all.len(), 3);
        assert!(all.iter().all(|p| p.status.is_some()), "{all:?}");
    }

    #[test]
    fn job_steps_and_addresses_parse_or_say_how_to_write_them() {
        assert_eq!(
            "4242".parse(),
            Ok(JobStep {
                job: 4242,
                step: None
            })
        );
        assert_eq!(
            "4242.3".parse(),
            Ok(JobStep {
                job: 4242,
                step: Some(3)
            })
        );
        assert!("x"
            .parse::<JobStep>()
            .unwrap_err()
            .contains("JOBID or JOBID.STEP"));
        assert!("1.y"
            .parse::<JobStep>()
            .unwrap_err()
            .contains("the step \"y\""));
        assert_eq!(ras_addr(None).unwrap().to_string(), "127.0.0.1:28028");
        assert_eq!(ras_addr(Some("127.0.0.1:31234")).unwrap().port(), 31234);
        assert_eq!(ras_addr(Some("localhost")).unwrap().port(), 28028);
        assert!(ras_addr(Some("no such host name.invalid:1")).is_err());
    }

    #[test]
    fn environ_and_fib_trie_are_read() {
        let env = b"PATH=/bin\0SLURM_JOB_ID=77\0SLURM_PROCID=3\0NCCL_RAS_ADDR=127.0.0.1:30000\0";
        assert_eq!(environ_var(env, "SLURM_JOB_ID"), Some("77"));
        assert_eq!(environ_var(env, "SLURM_JOB"), None);
        assert_eq!(environ_var(env, "NCCL_RAS_ADDR"), Some("127.0.0.1:30000"));
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 10.213.1.2\n        /32 host LOCAL\n     |-- 10.213.1.255\n        /32 link BROADCAST\n     |-- 127.0.0.1\n        /32 host LOCAL\nLocal:\n     |-- 10.213.0.2\n        /32 host LOCAL\n     |-- 10.213.1.2\n        /32 host LOCAL\n";
        assert_eq!(local_addrs(trie), ["10.213.0.2", "10.213.1.2"]);
    }

    /// Two nodes' agents, each with the recorded stalled answer twice: the places come from
    /// their addresses and processes, and rank 1 is named with node2's task 1.
    #[test]
    fn agents_reports_make_one_diagnosis_with_places() {
        let text = std::fs::read_to_string(format!(
            "{}/../tests/fixtures/nccl-ras/status-json-rank1-stalled.txt",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let status = ras::parse_answer(&text).unwrap();
        let agent = |node: &str, addr: &str, pid: u32, task: u32| AgentReport {
            gpudirect_hang: 1,
            node: node.into(),
            addrs: vec![addr.into()],
            processes: vec![JobProcess {
                pid,
                task: Some(task),
                step: Some(0),
                ras_addr: None,
            }],
            job_pids: vec![pid, pid + 100],
            ras_addr: "127.0.0.1:28028".into(),
            polls: vec![
                Poll {
                    at: 0.0,
                    status: Some(status.clone()),
                    error: None,
                },
                Poll {
                    at: 5.0,
                    status: Some(status.clone()),
                    error: None,
                },
            ],
        };
        let reports = [
            agent("node1", "10.9.1.1", 1559, 0),
            agent("node2", "10.9.1.2", 1560, 1),
        ];
        // srun --label output with node2's line cut in two by node1's.
        let two = serde_json::to_string(&reports[1]).unwrap();
        let one = serde_json::to_string(&reports[0]).unwrap();
        let (a, b) = two.split_at(40);
        let out = format!("1: {a}\n0: {one}\n1: {b}\nnoise\n");
        let (read, bad) = read_agent_lines(&out);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(
            read.iter().map(|r| r.node.as_str()).collect::<Vec<_>>(),
            ["node1", "node2"]
        );
        let (table, snaps) = assemble(&reports);
        assert_eq!(snaps.len(), 2);
        let report = &ras::diagnose(&snaps, &table)[0];
        assert_eq!(report.verdict, Verdict::Laggards);
        assert!(
            report
                .message
                .starts_with("rank 1 (node2, task 1, pid 1560) is 1 AllReduce behind"),
            "{}",
            report.message
        );
        assert!(unanswered(&reports).is_empty());
        // Every rank of the recorded answer is one of the job's processes on its node.
        assert_eq!(foreign_ranks(&reports, &snaps), []);
        // An answer whose rank 1 on node2 is some other process (a squatter's service
        // inventing a diagnosis): named, and the diagnosis is not to be given (T1).
        let mut other = reports.clone();
        other[1].job_pids = vec![4242];
        assert_eq!(
            foreign_ranks(&other, &snaps),
            [ForeignRank {
                node: "node2".into(),
                pid: 1560,
                rank: 1,
                communicator: snaps[0].status.communicators[0].hash.clone(),
            }]
        );
        // A node whose agent could not list the job's pids is not judged.
        other[1].job_pids.clear();
        assert_eq!(foreign_ranks(&other, &snaps), []);
    }
}
