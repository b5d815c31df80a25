//! Everything the launcher asks Slurm: the allocation it runs in (the `SLURM_*` variables)
//! and the `scontrol` calls, each logged before it runs and run through [`crate::runner`]
//! with a time limit, so that a hung slurmctld cannot hang a command. A pure function
//! turns each call's result into a typed answer or an error that names the command, how
//! it ended and what it printed (hyperqueue's habit), with unit tests beside it.
//!
//! `salloc` for `run --submit` is the one exception: it runs the user's own `gpudirect`
//! inside the allocation, whose progress must reach the terminal as it happens, so it
//! inherits stdout and stderr (`commands/run.rs`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::runner::{self, Finished, Job, Outcome};

/// How long one `scontrol` call may take: a healthy slurmctld answers in milliseconds.
pub const SCONTROL_TIMEOUT: Duration = Duration::from_secs(30);

/// The variable that holds the allocation's nodes.
pub const NODELIST_ENV: &str = "SLURM_JOB_NODELIST";

/// A Slurm call that did not give an answer.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The program could not be started.
    #[error("could not start `{command}`: {source}; is Slurm installed and scontrol on PATH?")]
    Start {
        /// The command line.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// It ran and failed, or printed nothing usable.
    #[error("`{command}` {what} ({how}); {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// What went wrong.
        what: &'static str,
        /// How it ended.
        how: String,
        /// What it said on stderr, or that it said nothing.
        stderr: String,
    },
    /// The launcher cannot find its own executable to start on the nodes.
    #[error("cannot find the gpudirect executable to start on the nodes: {0}")]
    NoExecutable(std::io::Error),
    /// Not inside an allocation, where the command needs one.
    #[error("{why}: run it inside salloc or sbatch{instead}")]
    NoAllocation {
        /// What the command does with the allocation.
        why: String,
        /// `, or` what to do instead, or nothing.
        instead: String,
    },
    /// The allocation has fewer nodes than the command needs.
    #[error("{why}: the allocation has {have} node(s), it needs {need} or more")]
    TooFewNodes {
        /// What the command does with the nodes.
        why: String,
        /// How many it has.
        have: usize,
        /// How many it needs.
        need: usize,
    },
    /// An agent step ended without any node's answer.
    #[error("no node answered: `{command}` ended with {how}; {stderr}")]
    NoNodeAnswered {
        /// The srun command line.
        command: String,
        /// How it ended.
        how: String,
        /// What it said on stderr, or that it said nothing.
        stderr: String,
    },
    /// `SLURM_JOB_NODELIST` is not a hostlist.
    #[error("{NODELIST_ENV} `{list}` is not a hostlist: {source}")]
    BadNodelist {
        /// The value.
        list: String,
        /// Why.
        source: gpudirect_core::hostlist::HostlistError,
    },
}

/// A variable of our environment, when set and not empty: Slurm sets some of its `SLURM_*`
/// empty, which means unset.
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Whether our environment sets `name` ([`env_var`]): the user's choice that the launch's
/// pinning leaves alone ([`crate::launch::pin_launch`]).
pub fn env_set(name: &str) -> bool {
    env_var(name).is_some()
}

/// The cluster a run is recorded under: `explicit` (`--cluster`, `GPUDIRECT_CLUSTER`),
/// else `$SLURM_CLUSTER_NAME`.
pub fn cluster_name(explicit: Option<&str>) -> Option<String> {
    explicit
        .map(str::to_string)
        .or_else(|| env_var("SLURM_CLUSTER_NAME"))
}

/// The job this runs in, `$SLURM_JOB_ID`.
pub fn job_id() -> Option<String> {
    env_var("SLURM_JOB_ID")
}

/// The nodes of the allocation this process runs in (empty outside one).
pub fn allocation_nodes() -> Result<Vec<String>, SlurmError> {
    match env_var(NODELIST_ENV) {
        Some(list) => gpudirect_core::hostlist::expand(&list)
            .map_err(|source| SlurmError::BadNodelist { list, source }),
        None => Ok(Vec::new()),
    }
}

/// The allocation this process runs in, read once from Slurm's variables: what every
/// command that works over "the allocation's nodes" starts from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocation {
    /// `$SLURM_JOB_ID`; `None` outside a job.
    pub job_id: Option<String>,
    /// `$SLURM_JOB_NODELIST`, expanded; empty outside an allocation.
    pub nodes: Vec<String>,
    /// `$SLURM_NTASKS_PER_NODE`, when it is set and a number.
    pub tasks_per_node: Option<u32>,
}

impl Allocation {
    /// Reads the allocation from the environment; an error only for a node list that is
    /// not a hostlist.
    pub fn from_env() -> Result<Allocation, SlurmError> {
        Ok(Allocation {
            job_id: env_var("SLURM_JOB_ID"),
            nodes: allocation_nodes()?,
            tasks_per_node: env_var("SLURM_NTASKS_PER_NODE").and_then(|v| v.parse().ok()),
        })
    }

    /// The allocation's nodes, refused with the one text for "no allocation" or "too few
    /// nodes" when there are fewer than `n`. `why` says what the command does with them
    /// ("gpudirect validate pairs the nodes of an allocation"); `instead`, what to do
    /// outside an allocation, if anything ("pass --gpus to validate this host's GPUs").
    pub fn require_nodes(
        &self,
        n: usize,
        why: &str,
        instead: Option<&str>,
    ) -> Result<&[String], SlurmError> {
        if self.nodes.is_empty() {
            return Err(SlurmError::NoAllocation {
                why: why.to_string(),
                instead: instead.map(|i| format!(", or {i}")).unwrap_or_default(),
            });
        }
        if self.nodes.len() < n {
            return Err(SlurmError::TooFewNodes {
                why: why.to_string(),
                have: self.nodes.len(),
                need: n,
            });
        }
        Ok(&self.nodes)
    }

    /// The job id, refused as [`Allocation::require_nodes`] refuses no allocation.
    pub fn require_job(&self, why: &str) -> Result<&str, SlurmError> {
        self.job_id
            .as_deref()
            .ok_or_else(|| SlurmError::NoAllocation {
                why: why.to_string(),
                instead: String::new(),
            })
    }
}

/// What a per-node agent's step gets from the plugin: the agents that only read the node
/// must not get a profile, probe must get the one it checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepProfile {
    /// No `--gpudirect`: the plugin's default for the nodes.
    Default,
    /// `--gpudirect=none`: nothing of ours in the step's environment.
    Nothing,
    /// `--gpudirect=MODE`.
    Mode(String),
}

/// One srun step that starts `gpudirect agent ARGS` on every node of `nodes` (the one way
/// the launcher asks nodes; `commands/agent.rs` is the other end): each task's lines
/// whole by `--label`, no task's failure ending the others (`--kill-on-bad-exit=0`),
/// beside whatever the allocation runs (`--overlap`), no MPI, on exactly `nodes`.
#[derive(Debug, Clone)]
pub struct AgentStep {
    /// The nodes to ask.
    pub nodes: Vec<String>,
    /// The job to run in (`--jobid`, for a job the launcher does not run in); `None`: the
    /// one it runs in.
    pub within_job: Option<u32>,
    /// Tasks per node: `Some(1)` for a node agent; `None` leaves srun the allocation's own
    /// (probe asks every task).
    pub tasks_per_node: Option<u32>,
    /// What the plugin gives the step.
    pub profile: StepProfile,
    /// The agent and its arguments: what follows `gpudirect agent`.
    pub args: Vec<OsString>,
    /// The step's time limit.
    pub timeout: Duration,
    /// Start it as this (uid, gid): [`JobInfo::step_user`] for a step inside a job.
    pub as_user: Option<(u32, u32)>,
}

impl AgentStep {
    /// A step of one task per node of `nodes`, `gpudirect agent ARGS`.
    pub fn per_node(nodes: &[String], profile: StepProfile, args: Vec<OsString>) -> AgentStep {
        AgentStep {
            nodes: nodes.to_vec(),
            within_job: None,
            tasks_per_node: Some(1),
            profile,
            args,
            timeout: Duration::from_secs(120),
            as_user: None,
        }
    }

    /// The srun job that runs the agent, this executable on every node.
    pub fn job(&self) -> Result<Job, SlurmError> {
        let exe = std::env::current_exe().map_err(SlurmError::NoExecutable)?;
        let mut args = self.srun_flags("none");
        // --label keeps each task's lines whole (srun cuts and interleaves long lines).
        args.insert(0, "--label".into());
        args.extend([exe.into_os_string(), "agent".into()]);
        args.extend(self.args.iter().cloned());
        Ok(self.srun(args))
    }

    /// The same step running `program ARGS` as one MPI world (`--mpi=pmix`) instead of
    /// the agent; without `--label`, as rank 0 alone prints one whole line per task.
    pub fn mpi_job(&self, program: &std::path::Path, args: &[&str]) -> Job {
        let mut srun = self.srun_flags("pmix");
        srun.push(program.into());
        srun.extend(args.iter().map(OsString::from));
        self.srun(srun)
    }

    fn srun_flags(&self, mpi: &str) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--kill-on-bad-exit=0".into(),
            "--overlap".into(),
            format!("--mpi={mpi}").into(),
        ];
        if let Some(job) = self.within_job {
            args.push(format!("--jobid={job}").into());
        }
        args.push(format!("--nodes={}", self.nodes.len()).into());
        if let Some(per_node) = self.tasks_per_node {
            args.push(format!("--ntasks={}", self.nodes.len() * per_node as usize).into());
            args.push(format!("--ntasks-per-node={per_node}").into());
        }
        args.push(
            format!(
                "--nodelist={}",
                gpudirect_core::hostlist::compress(&self.nodes)
            )
            .into(),
        );
        match &self.profile {
            StepProfile::Default => {}
            StepProfile::Nothing => args.push("--gpudirect=none".into()),
            StepProfile::Mode(mode) => args.push(format!("--gpudirect={mode}").into()),
        }
        args
    }

    fn srun(&self, args: Vec<OsString>) -> Job {
        Job {
            program: "srun".into(),
            args,
            env: Vec::new(),
            // Our folder may be out of the other user's reach (root's home); slurmstepd
            // would say so on every node before falling back to /tmp.
            cwd: self.as_user.map(|_| PathBuf::from("/")),
            timeout: self.timeout,
            grace: Duration::from_secs(5),
            user: self.as_user,
        }
    }
}

/// What the nodes of an agent step answered.
#[derive(Debug)]
pub struct Answers<T> {
    /// Each readable answer.
    pub answers: Vec<T>,
    /// The marked lines that did not parse (shortened).
    pub unreadable: Vec<String>,
    /// How the step ended, with all it printed.
    pub finished: Finished,
}

/// Runs an agent step until it ends, its time limit, or `stop`, and reads the answers
/// with `read` (the agent's own reader: [`read_labelled_json`] with its line key). An error
/// when srun cannot start, or when no node answered at all.
pub fn ask_nodes<T>(
    job: &Job,
    read: impl Fn(&str) -> (Vec<T>, Vec<String>),
    stop: &AtomicBool,
) -> Result<Answers<T>, SlurmError> {
    ask_nodes_capped(job, read, stop, usize::MAX)
}

/// [`ask_nodes`], keeping at most `cap` bytes of the step's stdout: the rest is read and
/// dropped, and the answers' `finished.stdout_dropped` says how much
/// ([`runner::run_capped`]).
pub fn ask_nodes_capped<T>(
    job: &Job,
    read: impl Fn(&str) -> (Vec<T>, Vec<String>),
    stop: &AtomicBool,
    cap: usize,
) -> Result<Answers<T>, SlurmError> {
    let answers = run_step_capped(job, read, stop, cap)?;
    if answers.answers.is_empty() {
        return Err(SlurmError::NoNodeAnswered {
            command: job.command_line(),
            how: answers.finished.outcome.to_string(),
            stderr: stderr_of(&answers.finished),
        });
    }
    Ok(answers)
}

/// [`ask_nodes`] for a caller that judges silence itself (vet: a node that does not
/// answer is a finding, not an error): no answer at all is no error.
pub fn run_step<T>(
    job: &Job,
    read: impl Fn(&str) -> (Vec<T>, Vec<String>),
    stop: &AtomicBool,
) -> Result<Answers<T>, SlurmError> {
    run_step_capped(job, read, stop, usize::MAX)
}

fn run_step_capped<T>(
    job: &Job,
    read: impl Fn(&str) -> (Vec<T>, Vec<String>),
    stop: &AtomicBool,
    cap: usize,
) -> Result<Answers<T>, SlurmError> {
    let shown = job.command_line();
    tracing::info!(command = %shown, "running");
    let finished = runner::run_capped(job, stop, cap).map_err(|e| SlurmError::Start {
        command: shown,
        source: e.source,
    })?;
    let (answers, unreadable) = read(&String::from_utf8_lossy(&finished.stdout));
    Ok(Answers {
        answers,
        unreadable,
        finished,
    })
}

/// `scontrol show hostnames EXPR`: Slurm's own expansion of a hostlist.
pub fn show_hostnames(expr: &str) -> Result<Vec<String>, SlurmError> {
    let job = scontrol(["show", "hostnames", expr]);
    let shown = format!("scontrol show hostnames '{expr}'");
    let finished = call(&job, &shown)?;
    hostnames_outcome(&shown, &finished)
}

/// `scontrol update nodename=NODE state=drain reason=REASON`.
pub fn drain(node: &str, reason: &str) -> Result<(), SlurmError> {
    let job = scontrol([
        "update",
        &format!("nodename={node}"),
        "state=drain",
        &format!("reason={reason}"),
    ]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)
}

/// `scontrol update nodename=NODE state=resume`.
pub fn resume(node: &str) -> Result<(), SlurmError> {
    let job = scontrol(["update", &format!("nodename={node}"), "state=resume"]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)
}

/// `scontrol update JobId=JOB NodeList=NODES` (a running job shrunk to `nodes`, which any
/// user may do to a job of theirs), run in `dir`, where scontrol writes the
/// `slurm_job_JOB_resize.sh` that resets the job's variables. Returns what that script
/// sets (`Some`) and unsets (`None`), in its order.
pub fn shrink_job(
    job: &str,
    nodes: &str,
    dir: &std::path::Path,
) -> Result<Vec<(String, Option<String>)>, SlurmError> {
    let mut call_job = scontrol([
        "update",
        &format!("JobId={job}"),
        &format!("NodeList={nodes}"),
    ]);
    call_job.cwd = Some(dir.to_path_buf());
    let shown = call_job.command_line();
    let finished = call(&call_job, &shown)?;
    succeeded(&shown, &finished)?;
    let script = dir.join(format!("slurm_job_{job}_resize.sh"));
    let text = std::fs::read_to_string(&script).map_err(|e| SlurmError::Failed {
        command: shown,
        what: "wrote no resize script",
        how: format!("{}: {e}", script.display()),
        stderr: stderr_of(&finished),
    })?;
    Ok(parse_resize_script(&text))
}

/// The variables a `slurm_job_JOB_resize.sh` sets (`export K="V"`) and unsets (`unset K`),
/// in its order; other lines are left out (pure).
pub fn parse_resize_script(text: &str) -> Vec<(String, Option<String>)> {
    let name_ok =
        |k: &str| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            if let Some(name) = line.strip_prefix("unset ") {
                let name = name.trim();
                return name_ok(name).then(|| (name.to_string(), None));
            }
            let (name, value) = line.strip_prefix("export ")?.split_once('=')?;
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            name_ok(name).then(|| (name.to_string(), Some(value.to_string())))
        })
        .collect()
}

/// `scontrol requeue JOB`: a batch job back to pending (its steps are ended; it starts
/// again, anew, once its old credentials expire).
pub fn requeue_job(job: &str) -> Result<(), SlurmError> {
    let call_job = scontrol(["requeue", job]);
    let shown = call_job.command_line();
    let finished = call(&call_job, &shown)?;
    succeeded(&shown, &finished)
}

/// `scontrol update JobId=JOB ExcNodeList=NODES`: which Slurm takes only while the job is
/// pending (as it is at once after [`requeue_job`]).
pub fn exclude_nodes(job: &str, nodes: &str) -> Result<(), SlurmError> {
    let call_job = scontrol([
        "update",
        &format!("JobId={job}"),
        &format!("ExcNodeList={nodes}"),
    ]);
    let shown = call_job.command_line();
    let finished = call(&call_job, &shown)?;
    succeeded(&shown, &finished)
}

/// `scontrol update JobId=JOB Comment=TEXT` (or `AdminComment=`, which only an operator
/// may set).
pub fn set_job_comment(job: &str, admin: bool, text: &str) -> Result<(), SlurmError> {
    let key = if admin { "AdminComment" } else { "Comment" };
    let call_job = scontrol(["update", &format!("JobId={job}"), &format!("{key}={text}")]);
    let shown = call_job.command_line();
    let finished = call(&call_job, &shown)?;
    succeeded(&shown, &finished)
}

/// What `scontrol show node` says about a node's availability.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeState {
    /// The state words, e.g. `["IDLE", "DRAIN"]` for `State=IDLE+DRAIN`.
    pub states: Vec<String>,
    /// `Reason=`, without the `[user@time]` Slurm appends; `None` when there is none.
    pub reason: Option<String>,
    /// GPUs in `Gres=` (`gpu:8`, `gpu:h100:8`, summed over types); `None` without GPU gres.
    pub gpus: Option<u32>,
}

impl NodeState {
    /// Whether the node is drained or draining (`DRAIN` in its state).
    pub fn drained(&self) -> bool {
        self.states.iter().any(|s| s.starts_with("DRAIN"))
    }
}

/// `scontrol show node NODE --oneliner`.
pub fn node_state(node: &str) -> Result<NodeState, SlurmError> {
    let job = scontrol(["show", "node", node, "--oneliner"]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)?;
    parse_node_line(&String::from_utf8_lossy(&finished.stdout)).ok_or_else(|| SlurmError::Failed {
        command: shown,
        what: "printed no State=",
        how: how(finished.outcome),
        stderr: stderr_of(&finished),
    })
}

/// Every drained or draining node with its reason (`scontrol show node --oneliner`).
pub fn drained_nodes() -> Result<Vec<(String, Option<String>)>, SlurmError> {
    let job = scontrol(["show", "node", "--oneliner"]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)?;
    Ok(parse_drained(&String::from_utf8_lossy(&finished.stdout)))
}

/// The drained nodes of `scontrol show node --oneliner` output, one node a line (pure).
pub fn parse_drained(text: &str) -> Vec<(String, Option<String>)> {
    text.lines()
        .filter_map(|line| {
            let name = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("NodeName="))?;
            let state = parse_node_line(line)?;
            state.drained().then(|| (name.to_string(), state.reason))
        })
        .collect()
}

/// Reads one `scontrol show node -o` line (pure). `Reason=` comes last on the line and
/// may hold spaces; the other fields are `key=value` words.
pub fn parse_node_line(line: &str) -> Option<NodeState> {
    let (fields, reason) = match line.find(" Reason=") {
        Some(i) => (&line[..i], Some(line[i + " Reason=".len()..].trim())),
        None => (line, None),
    };
    let value = |key: &str| {
        fields
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    };
    let states = value("State")?
        .split('+')
        .map(|s| s.trim_end_matches('*').to_string())
        .collect();
    // "gpudirect: eth3 down [root@2026-11-30T19:30:01]": Slurm's own suffix goes.
    let reason = reason.map(|r| match r.rfind(" [") {
        Some(i) if r.ends_with(']') => r[..i].trim().to_string(),
        _ => r.to_string(),
    });
    let gpus = value("Gres").and_then(|gres| {
        let counts: Vec<u32> = gres
            .split(',')
            .filter(|g| g.starts_with("gpu"))
            .filter_map(|g| g.split('(').next()?.rsplit(':').next()?.parse().ok())
            .collect();
        (!counts.is_empty()).then(|| counts.iter().sum())
    });
    Some(NodeState {
        states,
        reason: reason.filter(|r| !r.is_empty() && r != "(null)"),
        gpus,
    })
}

/// A job as `scontrol show job` gives it: its state and its nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// `RUNNING`, `PENDING`, ...
    pub state: String,
    /// Its nodes as a hostlist (`node[1-4]`), `None` before it has any.
    pub nodes: Option<String>,
    /// How many nodes.
    pub node_count: Option<u32>,
    /// The nodes it must not get (`ExcNodeList`), as a hostlist.
    pub excluded: Option<String>,
    /// Its user's uid (`UserId=name(1001)`).
    pub user_id: Option<u32>,
    /// Its group's gid (`GroupId=name(1001)`).
    pub group_id: Option<u32>,
}

impl JobInfo {
    /// Who must start a step inside this job when we are `our_uid`: the job's user (uid,
    /// gid) when we are root and the job is another user's, else `None` (ourselves). Slurm
    /// refuses root's own step in a user's job ("Access/permission denied", seen on 22.05),
    /// and the job's user is all an agent that reads the job's processes needs.
    pub fn step_user(&self, our_uid: u32) -> Option<(u32, u32)> {
        match (self.user_id, self.group_id) {
            (Some(uid), Some(gid)) if our_uid == 0 && uid != 0 => Some((uid, gid)),
            _ => None,
        }
    }
}

/// `scontrol show job JOB --oneliner`.
pub fn job_info(job: u32) -> Result<JobInfo, SlurmError> {
    let id = job.to_string();
    let shown = format!("scontrol show job {id} --oneliner");
    let finished = call(&scontrol(["show", "job", &id, "--oneliner"]), &shown)?;
    succeeded(&shown, &finished)?;
    parse_job_line(&String::from_utf8_lossy(&finished.stdout)).ok_or_else(|| SlurmError::Failed {
        command: shown,
        what: "printed no job",
        how: how(finished.outcome),
        stderr: stderr_of(&finished),
    })
}

/// The fields [`JobInfo`] needs from one `scontrol show job --oneliner` line (pure).
pub fn parse_job_line(line: &str) -> Option<JobInfo> {
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    };
    let state = field("JobState")?;
    Some(JobInfo {
        state,
        nodes: field("NodeList").filter(|n| !n.is_empty() && n != "(null)"),
        node_count: field("NumNodes").and_then(|n| n.split('-').next()?.parse().ok()),
        excluded: field("ExcNodeList").filter(|n| !n.is_empty() && n != "(null)"),
        user_id: field("UserId").and_then(|u| id_in_parens(&u)),
        group_id: field("GroupId").and_then(|g| id_in_parens(&g)),
    })
}

/// The number in `name(1001)`.
fn id_in_parens(field: &str) -> Option<u32> {
    let (_, id) = field.rsplit_once('(')?;
    id.strip_suffix(')')?.parse().ok()
}

/// What `scontrol show config` says about node Extra constraints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraSupport {
    /// `SLURM_VERSION`, e.g. `24.11.5`.
    pub version: String,
    /// Whether `SchedulerParameters` holds `extra_constraints`.
    pub extra_constraints: bool,
}

/// `scontrol show config`, read for [`ExtraSupport`].
pub fn extra_support() -> Result<ExtraSupport, SlurmError> {
    let job = scontrol(["show", "config"]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)?;
    parse_extra_support(&String::from_utf8_lossy(&finished.stdout)).ok_or_else(|| {
        SlurmError::Failed {
            command: shown,
            what: "printed no SLURM_VERSION",
            how: how(finished.outcome),
            stderr: stderr_of(&finished),
        }
    })
}

/// Reads `SLURM_VERSION` and `SchedulerParameters` from `scontrol show config` (pure).
/// Lines are `Name<spaces>= value`.
pub fn parse_extra_support(text: &str) -> Option<ExtraSupport> {
    let value = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let version = value("SLURM_VERSION")?;
    let extra_constraints = value("SchedulerParameters")
        .is_some_and(|p| p.split(',').any(|w| w.trim() == "extra_constraints"));
    Some(ExtraSupport {
        version,
        extra_constraints,
    })
}

/// A node's `Extra` (`scontrol --json show node NODE`): `None` when it has none.
pub fn node_extra(node: &str) -> Result<Option<String>, SlurmError> {
    let job = scontrol(["--json", "show", "node", node]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)?;
    parse_node_extra(&String::from_utf8_lossy(&finished.stdout), node).map_err(|what| {
        SlurmError::Failed {
            command: shown,
            what,
            how: how(finished.outcome),
            stderr: stderr_of(&finished),
        }
    })
}

/// The `extra` of node `node` in `scontrol --json show node` output (pure): `None` when it
/// is empty or absent.
pub fn parse_node_extra(json: &str, node: &str) -> Result<Option<String>, &'static str> {
    let doc: serde_json::Value =
        serde_json::from_str(json).map_err(|_| "printed no JSON document")?;
    let nodes = doc
        .get("nodes")
        .and_then(|n| n.as_array())
        .ok_or("printed no `nodes` list")?;
    let found = nodes
        .iter()
        .find(|n| n.get("name").and_then(|v| v.as_str()) == Some(node))
        .ok_or("did not list the node")?;
    Ok(found
        .get("extra")
        .and_then(|v| v.as_str())
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string))
}

/// `scontrol update nodename=NODE extra=JSON`.
pub fn set_node_extra(node: &str, extra: &str) -> Result<(), SlurmError> {
    let job = scontrol([
        "update",
        &format!("nodename={node}"),
        &format!("extra={extra}"),
    ]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)
}

/// `scontrol listpids JOB NODE` on this node: the processes slurmstepd tracks for the job
/// here, as (pid, step) (`batch`, `extern` or a number), from Slurm's view, never from what
/// a process says of itself. NODE names this node's slurmd where one host runs several.
pub fn job_pids(job: u32, node: &str) -> Result<Vec<(u32, String)>, SlurmError> {
    let id = job.to_string();
    let shown = format!("scontrol listpids {id} {node}");
    let finished = call(&scontrol(["listpids", &id, node]), &shown)?;
    succeeded(&shown, &finished)?;
    Ok(parse_listpids(
        &String::from_utf8_lossy(&finished.stdout),
        job,
    ))
}

/// The rows of `scontrol listpids` output for job `job` (pure): under the header
/// `PID JOBID STEPID LOCALID GLOBALID`, one process a line; other lines are left out.
pub fn parse_listpids(text: &str, job: u32) -> Vec<(u32, String)> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let pid: u32 = words.next()?.parse().ok()?;
            let of: u32 = words.next()?.parse().ok()?;
            let step = words.next()?;
            (of == job && pid > 0).then(|| (pid, step.to_string()))
        })
        .collect()
}

pub(crate) fn scontrol<const N: usize>(args: [&str; N]) -> Job {
    Job {
        program: "scontrol".into(),
        args: args.iter().map(OsString::from).collect(),
        env: Vec::new(),
        cwd: None,
        timeout: SCONTROL_TIMEOUT,
        grace: Duration::from_secs(2),
        user: None,
    }
}

pub(crate) fn call(job: &Job, shown: &str) -> Result<Finished, SlurmError> {
    tracing::info!(command = %shown, "running");
    // Never cancelled from outside: the time limit bounds it.
    runner::run(job, &AtomicBool::new(false)).map_err(|e| SlurmError::Start {
        command: shown.to_string(),
        source: e.source,
    })
}

pub(crate) fn how(outcome: Outcome) -> String {
    match outcome {
        Outcome::Exited { code } => format!("exit status: {code}"),
        Outcome::Signaled { signal } => format!("killed by signal {signal}"),
        Outcome::TimedOut => format!("no answer within {}s", SCONTROL_TIMEOUT.as_secs()),
        Outcome::Interrupted => "interrupted".into(),
        Outcome::NotStarted => "not started in time".into(),
    }
}

pub(crate) fn stderr_of(finished: &Finished) -> String {
    let text = String::from_utf8_lossy(&finished.stderr);
    match text.trim() {
        "" => "(nothing on stderr)".into(),
        t => format!("stderr: {t}"),
    }
}

/// A call that must exit 0 (pure).
pub fn succeeded(shown: &str, finished: &Finished) -> Result<(), SlurmError> {
    if finished.outcome == (Outcome::Exited { code: 0 }) {
        return Ok(());
    }
    Err(SlurmError::Failed {
        command: shown.to_string(),
        what: "failed",
        how: how(finished.outcome),
        stderr: stderr_of(finished),
    })
}

/// Judges a finished `scontrol show hostnames` (pure): the host names, or an error.
/// Slurm 22.05 exits 0 on an invalid hostlist, printing `Invalid hostlist: ...` on stderr
/// and nothing on stdout, so an empty stdout is a failure too.
pub fn hostnames_outcome(shown: &str, finished: &Finished) -> Result<Vec<String>, SlurmError> {
    succeeded(shown, finished)?;
    let hosts: Vec<String> = String::from_utf8_lossy(&finished.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if hosts.is_empty() {
        return Err(SlurmError::Failed {
            command: shown.to_string(),
            what: "printed no host names",
            how: how(finished.outcome),
            stderr: stderr_of(finished),
        });
    }
    Ok(hosts)
}

/// The JSON documents marked by `key` that tasks printed in `srun --label` output, and the
/// marked texts that did not parse (shortened). srun cuts a labelled line every 1024 bytes
/// and interleaves tasks, so each task's fragments are joined again, in order, by label;
/// unlabelled lines are read one by one. A document starts at the first `{` of its text.
pub fn read_labelled_json<T: serde::de::DeserializeOwned>(
    stdout: &str,
    key: &str,
) -> (Vec<T>, Vec<String>) {
    let mut by_label: std::collections::BTreeMap<u32, String> = Default::default();
    let mut unlabelled = Vec::new();
    for line in stdout.lines() {
        let labelled = line
            .split_once(": ")
            .and_then(|(label, rest)| label.trim().parse::<u32>().ok().map(|n| (n, rest)));
        match labelled {
            Some((n, rest)) => by_label.entry(n).or_default().push_str(rest),
            None => unlabelled.push(line.to_string()),
        }
    }
    let mut read = Vec::new();
    let mut bad = Vec::new();
    for text in by_label
        .into_values()
        .chain(unlabelled)
        .filter(|t| t.contains(key))
    {
        let json = text.find('{').map_or(text.as_str(), |i| &text[i..]);
        match serde_json::from_str::<T>(json.trim()) {
            Ok(r) => read.push(r),
            Err(e) => bad.push(format!("{e}: {}", &text[..text.len().min(80)])),
        }
    }
    (read, bad)
}

#[cfg(test)]
mod tests {

    #[test]
    fn listpids_rows_name_the_jobs_processes_and_steps() {
        // In the layout scontrol prints (as Slurm's documentation shows it): the batch step, a
        // task's process and a child of it (no local id), and another job's row.
        let text = "PID      JOBID    STEPID   LOCALID GLOBALID\n\
                    4000     77       batch    0       0\n\
                    4100     77       0        0       0\n\
                    4101     77       0        -       -\n\
                    5000     78       0        0       0\n";
        assert_eq!(
            parse_listpids(text, 77),
            vec![
                (4000, "batch".to_string()),
                (4100, "0".to_string()),
                (4101, "0".to_string())
            ]
        );
        let none =
            "PID      JOBID    STEPID   LOCALID GLOBALID\nNo job steps exist on this node.\n";
        assert!(parse_listpids(none, 77).is_empty());
    }
    use super::*;

    fn allocation(nodes: &[&str]) -> Allocation {
        Allocation {
            job_id: Some("42".into()),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            tasks_per_node: None,
        }
    }

    #[test]
    fn commands_refuse_no_allocation_and_too_few_nodes_in_one_text() {
        let why = "gpudirect validate pairs the nodes of an allocation";
        let none = Allocation::default();
        let e = none.require_nodes(2, why, Some("pass --gpus")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "gpudirect validate pairs the nodes of an allocation: run it inside salloc or sbatch, or pass --gpus"
        );
        assert!(none.require_job(why).is_err());
        let one = allocation(&["node1"]);
        let e = one.require_nodes(2, why, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "gpudirect validate pairs the nodes of an allocation: the allocation has 1 node(s), it needs 2 or more"
        );
        let two = allocation(&["node1", "node2"]);
        assert_eq!(two.require_nodes(2, why, None).unwrap(), ["node1", "node2"]);
        assert_eq!(two.require_job(why).unwrap(), "42");
    }

    #[test]
    fn every_agent_step_is_labelled_overlapping_without_mpi_on_exactly_its_nodes() {
        let nodes: Vec<String> = ["node1", "node2", "node4"].map(String::from).to_vec();
        let step = AgentStep::per_node(&nodes, StepProfile::Default, vec!["wiring".into()]);
        let line = step.job().unwrap().command_line();
        let exe = std::env::current_exe().unwrap();
        assert_eq!(
            line,
            format!(
                "srun --label --kill-on-bad-exit=0 --overlap --mpi=none --nodes=3 --ntasks=3 \
                 --ntasks-per-node=1 '--nodelist=node[1-2,4]' {} agent wiring",
                exe.display()
            )
        );
        // hang's: inside another job, nothing of ours in its environment.
        let hang = AgentStep {
            within_job: Some(4242),
            ..AgentStep::per_node(&nodes, StepProfile::Nothing, vec!["hang".into()])
        };
        let line = hang.job().unwrap().command_line();
        assert!(line.contains(" --jobid=4242 "), "{line}");
        assert!(line.contains(" --gpudirect=none "), "{line}");
        // probe's: every task of the allocation, the profile it checks, or one MPI world.
        let probe = AgentStep {
            tasks_per_node: None,
            ..AgentStep::per_node(&nodes, StepProfile::Mode("tcpx".into()), vec![])
        };
        let line = probe.job().unwrap().command_line();
        assert!(!line.contains("--ntasks"), "{line}");
        assert!(line.contains(" --gpudirect=tcpx "), "{line}");
        let mpi = probe
            .mpi_job(std::path::Path::new("/opt/gpudirect-mpi"), &["facts"])
            .command_line();
        assert!(
            mpi.starts_with("srun --kill-on-bad-exit=0 --overlap --mpi=pmix "),
            "{mpi}"
        );
        assert!(
            mpi.ends_with(" --gpudirect=tcpx /opt/gpudirect-mpi facts"),
            "{mpi}"
        );
    }

    #[test]
    fn a_step_no_node_answered_is_one_error_naming_the_step_and_what_srun_said() {
        let job = Job {
            program: "sh".into(),
            args: vec![
                "-c".into(),
                "echo 'srun: error: no nodes' >&2; exit 1".into(),
            ],
            env: Vec::new(),
            cwd: None,
            timeout: Duration::from_secs(10),
            grace: Duration::from_secs(1),
            user: None,
        };
        let read = |s: &str| read_labelled_json::<serde_json::Value>(s, "gpudirect_x");
        let e = ask_nodes(&job, read, &AtomicBool::new(false)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no node answered: `sh -c 'echo '\\''srun: error: no nodes'\\'' >&2; exit 1'` ended with exit code 1; stderr: srun: error: no nodes"
        );
        // The same step read by a caller that judges silence itself: no error.
        let asked = run_step(&job, read, &AtomicBool::new(false)).unwrap();
        assert!(asked.answers.is_empty());
        let job = Job {
            args: vec!["-c".into(), "echo '0: {\"gpudirect_x\": 1}'".into()],
            ..job
        };
        let asked = ask_nodes(&job, read, &AtomicBool::new(false)).unwrap();
        assert_eq!(asked.answers, [serde_json::json!({"gpudirect_x": 1})]);
    }

    #[test]
    fn the_drained_nodes_and_their_reasons_are_read_from_every_nodes_line() {
        let text = "NodeName=node1 Arch=x86_64 State=IDLE ThreadsPerCore=1\n\
                    NodeName=node2 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Reason=gpudirect health: eth3 is down [root@2026-12-02T00:10:00]\n\
                    NodeName=node3 State=MIXED+DRAIN Reason=bad DIMM [root@2026-12-02T00:11:00]\n";
        assert_eq!(
            parse_drained(text),
            [
                (
                    "node2".to_string(),
                    Some("gpudirect health: eth3 is down".to_string())
                ),
                ("node3".to_string(), Some("bad DIMM".to_string())),
            ]
        );
        assert!(parse_drained("").is_empty());
    }

    #[test]
    fn show_config_says_the_version_and_whether_extra_constraints_are_on() {
        let on = "Configuration data as of 2026-12-02T00:10:00\nSchedulerParameters     = bf_interval=30,extra_constraints\nSLURM_VERSION           = 24.11.5\n";
        assert_eq!(
            parse_extra_support(on),
            Some(ExtraSupport {
                version: "24.11.5".into(),
                extra_constraints: true
            })
        );
        let off = "SchedulerParameters     = (null)\nSLURM_VERSION           = 22.05.8\n";
        assert_eq!(
            parse_extra_support(off).map(|s| s.extra_constraints),
            Some(false)
        );
        // A look-alike word is not the parameter.
        let near = "SchedulerParameters = extra_constraints_x\nSLURM_VERSION = 26.05.5\n";
        assert_eq!(
            parse_extra_support(near).map(|s| s.extra_constraints),
            Some(false)
        );
        assert_eq!(parse_extra_support("nothing here"), None);
    }

    #[test]
    fn a_nodes_extra_is_read_from_scontrols_json() {
        // As scontrol 24.11 prints it (trimmed to the fields read).
        let doc =
            r#"{"nodes":[{"name":"node3","extra":"{\"admin_rack\":\"r7\",\"gpudirect_ok\":1}"}]}"#;
        assert_eq!(
            parse_node_extra(doc, "node3"),
            Ok(Some(r#"{"admin_rack":"r7","gpudirect_ok":1}"#.to_string()))
        );
        assert_eq!(
            parse_node_extra(r#"{"nodes":[{"name":"node3","extra":""}]}"#, "node3"),
            Ok(None)
        );
        assert_eq!(
            parse_node_extra(r#"{"nodes":[{"name":"node3"}]}"#, "node3"),
            Ok(None)
        );
        assert!(parse_node_extra(r#"{"nodes":[{"name":"node4"}]}"#, "node3").is_err());
        assert!(parse_node_extra("Extra=x", "node3").is_err());
    }

    #[test]
    fn a_resize_script_gives_what_it_sets_and_unsets() {
        // As scontrol 22.05 and 24.11 write it.
        let text = "export SLURM_NODELIST=\"node[1-2,4-6]\"\nexport SLURM_JOB_NODELIST=\"node[1-2,4-6]\"\n\
                    export SLURM_NNODES=5\nexport SLURM_JOB_CPUS_PER_NODE=\"1(x5)\"\nunset SLURM_NPROCS\n\
                    # a comment\nexport BAD-NAME=1\n";
        assert_eq!(
            parse_resize_script(text),
            [
                (
                    "SLURM_NODELIST".to_string(),
                    Some("node[1-2,4-6]".to_string())
                ),
                ("SLURM_JOB_NODELIST".into(), Some("node[1-2,4-6]".into())),
                ("SLURM_NNODES".into(), Some("5".into())),
                ("SLURM_JOB_CPUS_PER_NODE".into(), Some("1(x5)".into())),
                ("SLURM_NPROCS".into(), None),
            ]
        );
    }

    #[test]
    fn a_job_line_gives_state_and_nodes() {
        let line = "JobId=12 JobName=train UserId=gdtestuser(1001) GroupId=gdtestuser(1002) \
                    JobState=RUNNING Reason=None \
                    NodeList=node[1-4] BatchHost=node1 NumNodes=4 NumCPUs=4 ReqNodeList=(null)";
        let j = parse_job_line(line).unwrap();
        assert_eq!(j.state, "RUNNING");
        assert_eq!(j.nodes.as_deref(), Some("node[1-4]"));
        assert_eq!(j.node_count, Some(4));
        assert_eq!((j.user_id, j.group_id), (Some(1001), Some(1002)));
        let pending =
            parse_job_line("JobId=13 JobState=PENDING NodeList=(null) NumNodes=2-2").unwrap();
        assert_eq!((pending.nodes, pending.node_count), (None, Some(2)));
        assert_eq!(pending.user_id, None);
        assert_eq!(
            parse_job_line("slurm_load_jobs error: Invalid job id specified"),
            None
        );
    }

    #[test]
    fn root_starts_a_step_in_another_users_job_as_that_user() {
        let job = |uid, gid| JobInfo {
            state: "RUNNING".into(),
            nodes: None,
            node_count: None,
            excluded: None,
            user_id: uid,
            group_id: gid,
        };
        assert_eq!(job(Some(1001), Some(1002)).step_user(0), Some((1001, 1002)));
        // The job's own user, or root's own job: no change.
        assert_eq!(job(Some(1001), Some(1002)).step_user(1001), None);
        assert_eq!(job(Some(0), Some(0)).step_user(0), None);
        // Unknown ids: nothing guessed.
        assert_eq!(job(Some(1001), None).step_user(0), None);
        let step = AgentStep {
            within_job: Some(7),
            as_user: Some((1001, 1002)),
            ..AgentStep::per_node(&["node1".into()], StepProfile::Nothing, vec![])
        };
        let srun = step.job().unwrap();
        assert_eq!(srun.user, Some((1001, 1002)));
        assert_eq!(srun.cwd.as_deref(), Some(std::path::Path::new("/")));
    }

    fn finished(outcome: Outcome, stdout: &[u8], stderr: &[u8]) -> Finished {
        Finished {
            outcome,
            stdout: stdout.to_vec(),
            stdout_dropped: 0,
            stderr: stderr.to_vec(),
            elapsed: Duration::from_millis(5),
        }
    }

    #[test]
    fn hostnames_and_their_failures() {
        let ok = Outcome::Exited { code: 0 };
        assert_eq!(
            hostnames_outcome("cmd", &finished(ok, b"n1\nn2\n", b"")).unwrap(),
            ["n1", "n2"]
        );
        let msg = hostnames_outcome(
            "scontrol show hostnames 'n[1-2]'",
            &finished(
                Outcome::Exited { code: 1 },
                b"",
                b"scontrol: fatal: Could not establish a configuration source\n",
            ),
        )
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("`scontrol show hostnames 'n[1-2]'` failed")
                && msg.contains("exit status: 1")
                && msg.contains("Could not establish a configuration source"),
            "{msg}"
        );
        // Slurm 22.05 exits 0 on a bad hostlist but prints nothing on stdout.
        let msg = hostnames_outcome("cmd", &finished(ok, b"", b"Invalid hostlist: a[3-1]\n"))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("no host names") && msg.contains("Invalid hostlist: a[3-1]"),
            "{msg}"
        );
        let msg = hostnames_outcome("cmd", &finished(Outcome::Signaled { signal: 9 }, b"", b""))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("signal 9") && msg.contains("nothing on stderr"),
            "{msg}"
        );
        let msg = hostnames_outcome("cmd", &finished(Outcome::TimedOut, b"", b""))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("no answer within 30s"), "{msg}");
    }

    #[test]
    fn node_lines_give_state_reason_and_gpus() {
        let drained = "NodeName=node2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 Gres=gpu:8(S:0) NodeAddr=10.213.0.2 State=IDLE+DRAIN ThreadsPerCore=1 Partitions=local Reason=gpudirect: eth3 down [root@2026-11-30T19:30:01]\n";
        let s = parse_node_line(drained).unwrap();
        assert_eq!(s.states, ["IDLE", "DRAIN"]);
        assert!(s.drained());
        assert_eq!(s.reason.as_deref(), Some("gpudirect: eth3 down"));
        assert_eq!(s.gpus, Some(8));
        let idle = parse_node_line(
            "NodeName=n1 Gres=gpu:h100:4,gpu:a100:2,nic:1 State=IDLE* Partitions=p",
        )
        .unwrap();
        assert_eq!(
            (
                idle.states.as_slice(),
                idle.drained(),
                idle.reason,
                idle.gpus
            ),
            (&["IDLE".to_string()][..], false, None, Some(6))
        );
        let none = parse_node_line("NodeName=n1 Gres=(null) State=MIXED Reason=(null)").unwrap();
        assert_eq!((none.gpus, none.reason), (None, None));
        assert!(parse_node_line("Node n9 not found").is_none());
    }

    #[test]
    fn a_missing_scontrol_names_the_command() {
        let job = Job {
            program: "/nonexistent/scontrol".into(),
            ..scontrol(["show", "hostnames", "n1"])
        };
        let err = call(&job, "scontrol show hostnames 'n1'")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("could not start `scontrol show hostnames 'n1'`")
                && err.contains("on PATH"),
            "{err}"
        );
    }
}
