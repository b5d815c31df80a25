//! Rails: real host-memory traffic between two nodes over one data NIC at a time, so that a
//! slow or dead NIC is named (`node2 eth3`) instead of a whole node.
//!
//! Two halves, like [`crate::probe`]:
//! - the MPI program (`gpudirect-mpi`, crate `mpi-program`) runs inside a two-task job step,
//!   checks that the MPI world is the step ([`check_world`]) and that its end of the rail is
//!   up ([`rail_state`]), measures, and prints one [`RailMeasurement`] line;
//! - `gpudirect validate --test rails` builds the steps ([`pair_job`]), reads the line back
//!   ([`read_measurement`]) and judges per rail with [`crate::validate::judging`].
//!
//! The transport is bound to the rail through the MPI library's own settings
//! ([`transport_env`]): Open MPI's TCP transport with `btl_tcp_if_include`. On InfiniBand,
//! RoCE or EFA the same binding is UCX's `UCX_NET_DEVICES=mlx5_0:1` or libfabric's
//! `FI_PROVIDER=efa` with `FI_EFA_IFACE`/the device name (docs/validation.md).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::history::compare::median;
use crate::history::{NewNodeResult, NewRow, NewRun, Placement, RunStatus};
use crate::profile::{Choice, ProfileError};
use crate::runner::Job;
use crate::validate::actions::{Candidate, DrainPlan};
use crate::validate::judging::{Class, Health, Report, Threshold, Validation, Verdict};
use gpudirect_core::config::{Mode, NicClass};
use gpudirect_core::template::Placeholder;

/// The collective name rail runs are recorded under: host-memory point-to-point over MPI,
/// a kind of its own that no nccl-tests run shares (and never a replay).
pub const RAIL_COLLECTIVE: &str = "mpi_p2p";

/// The variant a rail run is recorded under: `rail:eth2`.
pub fn rail_variant(rail: &str) -> String {
    format!("rail:{rail}")
}

/// The role of a rail run's node result: `rail eth2 send` for what the node sent on the
/// rail, `rail eth2` for a pair that measured nothing. [`rail_of_role`] reads it back: the
/// two are the one place the text is written and read.
pub fn rail_role(rail: &str, sent: bool) -> String {
    if sent {
        format!("rail {rail} send")
    } else {
        format!("rail {rail}")
    }
}

/// The rail a rail run's node result is about, and whether its number is what the node
/// sent ([`rail_role`]): `rail eth2 send` gives `("eth2", true)`, `rail eth2` gives
/// `("eth2", false)`; any other role gives `None`.
pub fn rail_of_role(role: &str) -> Option<(&str, bool)> {
    let rest = role.strip_prefix("rail ")?;
    let (rail, sent) = match rest.strip_suffix(" send") {
        Some(rail) => (rail, true),
        None => (rest, false),
    };
    (!rail.is_empty() && !rail.contains(' ')).then_some((rail, sent))
}

/// The key that marks a measurement line among other output.
pub const LINE_KEY: &str = "gpudirect_rail";

/// Exit status of the MPI program when the MPI world is not the Slurm step.
pub const EXIT_WORLD_MISMATCH: i32 = 5;

/// Exit status of the MPI program when its end of the rail is down or absent.
pub const EXIT_RAIL_DOWN: i32 = 6;

/// Exit status of the MPI program when the two tasks did not connect over the rail within
/// [`CONNECT_TIMEOUT`].
pub const EXIT_NO_CONNECTION: i32 = 7;

/// How long the two tasks may take to exchange their first message over the rail.
///
/// Open MPI 4.1's TCP transport sometimes never finishes the handshake of a connection it
/// made (the socket is established, neither side's MPI call returns): measured on the
/// local cluster, about 3 of 32 pairs running at once on 2 cores. The MPI program gives up
/// after this long with [`EXIT_NO_CONNECTION`], and the launcher runs such a pair once
/// more before it counts as failed.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the MPI program says when the tasks did not connect in time (before ` over RAIL`).
pub const NO_CONNECTION: &str = "no MPI connection to the partner";

/// Whether a pair's step should run once more: it did not connect in time (its stderr
/// says [`NO_CONNECTION`], or, when the step was torn down before that line reached srun,
/// srun says a task exited with [`EXIT_NO_CONNECTION`]; srun's own exit status is that of
/// whichever task ended first), or it ran past its time limit without saying why.
pub fn worth_a_retry(outcome: &crate::runner::Outcome, stderr: &str) -> bool {
    let exited_unconnected = format!("Exited with exit code {EXIT_NO_CONNECTION}");
    *outcome == crate::runner::Outcome::TimedOut
        || stderr.contains(NO_CONNECTION)
        || stderr
            .lines()
            .any(|l| l.starts_with("srun: error:") && l.trim_end().ends_with(&exited_unconnected))
}
/// One pair's figures on one rail, printed by rank 0 of the pair's step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RailMeasurement {
    /// Always 1: marks the line.
    pub gpudirect_rail: u32,
    /// The NIC the transport was bound to.
    pub rail: String,
    /// Host names of rank 0 and rank 1.
    pub hosts: [String; 2],
    /// Message size.
    pub size_bytes: u64,
    /// Messages sent each way.
    pub messages: u32,
    /// Bandwidth from rank 0 to rank 1, GB/s (10^9 bytes per second).
    pub forward_gbps: f64,
    /// Bandwidth from rank 1 to rank 0, GB/s.
    pub backward_gbps: f64,
    /// Half the round trip of an 8-byte message, median of the ping-pongs, microseconds.
    pub latency_us: f64,
}

impl RailMeasurement {
    /// The pair's figure: the slower direction. A NIC shaped or broken on one side shows
    /// in the direction it sends, so the minimum names it whichever rank it is.
    pub fn gbps(&self) -> f64 {
        self.forward_gbps.min(self.backward_gbps)
    }
}

/// The last measurement line in a step's stdout (srun `--label` prefixes allowed).
pub fn read_measurement(stdout: &str) -> Option<RailMeasurement> {
    stdout.lines().rev().find_map(|line| {
        let start = line.find('{')?;
        let json = &line[start..];
        json.contains(LINE_KEY)
            .then(|| serde_json::from_str(json).ok())
            .flatten()
    })
}

/// What the MPI program reads of its launch before it starts MPI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepEnv {
    /// `SLURM_NTASKS` of a job step.
    pub ntasks: Option<u32>,
    /// `SLURM_PROCID`.
    pub procid: Option<u32>,
    /// Set when the process was started by `mpirun` (`OMPI_COMM_WORLD_SIZE` present before
    /// MPI starts), whose world is mpirun's, not a Slurm step's.
    pub under_mpirun: bool,
    /// Set when Slurm handed the task a process-management interface (`PMIX_RANK`, or
    /// `PMI_RANK`/`PMI_FD` of PMI-1/2): without one, each task can only be a world alone.
    pub has_pmi: bool,
}

impl StepEnv {
    /// Reads the variables of this process (`SLURM_STEP_ID` must be set for the Slurm ones
    /// to count: an allocation's own `SLURM_NTASKS` says nothing about a step).
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var(name).ok();
        let in_step = var("SLURM_STEP_ID").is_some();
        let number = |name: &str| var(name).and_then(|v| v.trim().parse().ok());
        StepEnv {
            ntasks: in_step.then(|| number("SLURM_NTASKS")).flatten(),
            procid: in_step.then(|| number("SLURM_PROCID")).flatten(),
            under_mpirun: var("OMPI_COMM_WORLD_SIZE").is_some(),
            has_pmi: ["PMIX_RANK", "PMI_RANK", "PMI_FD"]
                .iter()
                .any(|v| var(v).is_some()),
        }
    }
}

/// Before MPI starts: a step of several tasks that gave them no process-management
/// interface (`srun --mpi=none`, the default unless slurm.conf sets `MpiDefault`) cannot
/// form one world; Open MPI would abort inside its start with a page of text, so this says
/// it in one line first.
pub fn check_launch(env: &StepEnv) -> Result<(), String> {
    match env.ntasks {
        Some(n) if n > 1 && !env.has_pmi && !env.under_mpirun => Err(format!(
            "the MPI world cannot be this Slurm step: srun gave its {n} tasks no PMIx (was it \
             run without --mpi=pmix, or with --mpi=none?), so each task would start an MPI world \
             of its own. {FIX}"
        )),
        _ => Ok(()),
    }
}

/// How to launch an MPI program so that its world is the step.
const FIX: &str = "Fix: launch with `srun --mpi=pmix` (`srun --mpi=list` shows what this Slurm \
                   offers; MpiDefault=pmix in slurm.conf makes it the default), or with mpirun \
                   inside the allocation";

/// Checks that the MPI world is the Slurm step: as many ranks as the step has tasks, and
/// each rank its task's number. The classic failure is one world per task (srun without
/// `--mpi=pmix`, or a program built without MPI), which this names with the fix.
pub fn check_world(env: &StepEnv, world_size: u32, rank: u32) -> Result<(), String> {
    if env.under_mpirun {
        return Ok(());
    }
    let (Some(ntasks), Some(procid)) = (env.ntasks, env.procid) else {
        return Ok(());
    };
    if world_size == ntasks && rank == procid {
        return Ok(());
    }
    let how = if world_size == 1 && ntasks > 1 {
        format!("each of the step's {ntasks} tasks started an MPI world of its own")
    } else {
        format!("task {procid} of {ntasks} is rank {rank} of an MPI world of {world_size}")
    };
    Err(format!(
        "the MPI world is not this Slurm step: {how}. {FIX}"
    ))
}

/// Whether `nic` is present and up under `sys_class_net` (`/sys/class/net`): `Err` says
/// which and how, e.g. `eth2 is down (operstate down)`.
pub fn rail_state(sys_class_net: &Path, nic: &str) -> Result<(), String> {
    let dir = sys_class_net.join(nic);
    if !dir.exists() {
        return Err(format!("{nic} does not exist on this node"));
    }
    let state = std::fs::read_to_string(dir.join("operstate"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let carrier = std::fs::read_to_string(dir.join("carrier"))
        .map(|s| s.trim() == "1")
        .unwrap_or(false);
    match state.as_str() {
        // veths and some drivers report `unknown` while passing traffic; the carrier says.
        "up" => Ok(()),
        "unknown" if carrier => Ok(()),
        _ => Err(format!("{nic} is down (operstate {state})")),
    }
}

/// The environment that binds Open MPI's traffic to `rail`: the ob1 messaging layer over
/// TCP (and `self`), on that interface only.
pub fn transport_env(rail: &str) -> Vec<(String, String)> {
    vec![
        ("OMPI_MCA_pml".into(), "ob1".into()),
        ("OMPI_MCA_btl".into(), "tcp,self".into()),
        ("OMPI_MCA_btl_tcp_if_include".into(), rail.into()),
    ]
}

/// The MPI program: `explicit` (`--mpi-program`, `GPUDIRECT_MPI_PROGRAM`), else
/// `gpudirect-mpi` beside the running executable. `Err` says how to get it.
pub fn locate_mpi_program(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find the gpudirect executable: {e}"))?
            .with_file_name("gpudirect-mpi"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "the MPI program {} does not exist: build it with `cargo build --release -p gpudirect-mpi` (needs an MPI library, e.g. Debian's libopenmpi-dev) or pass --mpi-program PATH",
            path.display()
        ))
    }
}

/// How one pair is measured.
#[derive(Debug, Clone, PartialEq)]
pub struct PairSpec {
    /// The MPI program.
    pub program: PathBuf,
    /// srun's `--mpi` plugin.
    pub mpi: String,
    /// Message size.
    pub size_bytes: u64,
    /// About how long to send each way.
    pub seconds: f64,
    /// The step's time limit.
    pub timeout: Duration,
}

/// The job step measuring `pair` on `rail`: one task on each node, the transport bound to
/// the rail, and the step ended when either task fails. `--overlap`: the pairs of every
/// rail run at the same time on the same nodes, whatever CPUs the allocation holds (with
/// `--exact`, an allocation of one CPU per node, salloc's default, ran them one by one).
pub fn pair_job(spec: &PairSpec, rail: &str, pair: [&str; 2]) -> Job {
    fn os(text: impl Into<OsString>) -> OsString {
        text.into()
    }
    let args = vec![
        os("--nodes=2"),
        os("--ntasks=2"),
        os("--ntasks-per-node=1"),
        os(format!("--nodelist={},{}", pair[0], pair[1])),
        os("--overlap"),
        os("--kill-on-bad-exit=1"),
        os(format!("--mpi={}", spec.mpi)),
        spec.program.clone().into_os_string(),
        os("pair"),
        os("--rail"),
        os(rail),
        os("--size"),
        os(spec.size_bytes.to_string()),
        os("--seconds"),
        os(spec.seconds.to_string()),
    ];
    Job {
        program: "srun".into(),
        args,
        env: transport_env(rail)
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
        cwd: None,
        timeout: spec.timeout,
        grace: Duration::from_secs(5),
        user: None,
    }
}

/// A pair's step as a history record: one row at the message size with the slower
/// direction's figure, and one per-node result per direction (the node is the sender, so a
/// node's numbers on a rail are what its NIC sent). `base` carries the when and where; its
/// status, rows and node results are set here; the node results' verdicts are the
/// caller's, once the pair is judged.
pub fn record_of(
    base: NewRun,
    rail: &str,
    pair: [&str; 2],
    result: Result<&RailMeasurement, &str>,
) -> NewRun {
    let mut run = NewRun {
        collective: RAIL_COLLECTIVE.into(),
        variant: Some(rail_variant(rail)),
        nodes: pair.iter().map(|n| n.to_string()).collect(),
        nodelist: Some(gpudirect_core::hostlist::compress(&pair)),
        node_count: Some(2),
        ..base
    };
    run.env.insert("GPUDIRECT_RAIL".into(), rail.into());
    match result {
        Ok(m) => {
            let gbps = m.gbps();
            run.status = RunStatus::Ok;
            run.rows = vec![NewRow {
                size_bytes: m.size_bytes,
                count: m.size_bytes,
                dtype: "byte".into(),
                redop: "none".into(),
                root: None,
                placement: Placement::Out,
                time_us: m.size_bytes as f64 / (gbps * 1e3),
                algbw: gbps,
                busbw: gbps,
                wrong: None,
                algorithm: None,
                protocol: None,
            }];
            run.avg_busbw = Some(gbps);
            let directions = [
                (&m.hosts[0], &m.hosts[1], m.forward_gbps),
                (&m.hosts[1], &m.hosts[0], m.backward_gbps),
            ];
            run.node_results = directions
                .into_iter()
                .map(|(node, partner, figure)| NewNodeResult {
                    node: node.clone(),
                    role: Some(rail_role(rail, true)),
                    partner: Some(partner.clone()),
                    size_bytes: Some(m.size_bytes),
                    busbw: Some(figure),
                    verdict: None,
                })
                .collect();
        }
        Err(why) => {
            run.status = RunStatus::Failed;
            run.failures = vec![why.to_string()];
            run.node_results = pair
                .iter()
                .map(|node| NewNodeResult {
                    node: node.to_string(),
                    role: Some(rail_role(rail, false)),
                    partner: pair.iter().find(|p| *p != node).map(|p| p.to_string()),
                    verdict: None,
                    ..NewNodeResult::default()
                })
                .collect();
        }
    }
    run
}

/// Why a pair's step gave no figure, in one line: the MPI program's own message where it
/// printed one (`gpudirect-mpi: node3: eth2 is down`), else the tail of stderr.
pub fn failure_reason(stderr: &str, outcome: &str) -> String {
    let own = stderr
        .lines()
        .map(|l| {
            // srun --label style prefixes (`1: `) before the program's name.
            l.find("gpudirect-mpi:").map_or(l, |i| &l[i..])
        })
        .find(|l| l.starts_with("gpudirect-mpi:"));
    match own {
        Some(line) => line.trim_start_matches("gpudirect-mpi:").trim().to_string(),
        None => {
            let tail = stderr.lines().rev().find(|l| !l.trim().is_empty());
            match tail {
                Some(t) => format!("{outcome}: {}", t.trim()),
                None => outcome.to_string(),
            }
        }
    }
}

// The verdicts per (node, rail): one validation per rail, read together.

/// One (node, rail) in the report.
#[derive(Debug, Serialize)]
pub struct Unit {
    /// The node.
    pub node: String,
    /// The rail (its NIC).
    pub rail: String,
    /// The node's verdict on that rail.
    pub verdict: Verdict,
    /// Median of what this node sent on this rail, GB/s, over the pairs it was in (the
    /// direction a NIC's egress limits; a pair's own figure is its slower direction); for
    /// nccl-tests per rail, the median busbw of its pairs.
    pub send_gbps: Option<f64>,
    /// The rail's reference: median of its passing pairs (the whole run's when none passed).
    pub rail_gbps: Option<f64>,
    /// Why, in words.
    pub evidence: Vec<String>,
}

/// Every (node, rail) with its verdict and figures; a (node, rail) in `down` (its NIC
/// there seen down before any traffic) is [`Verdict::Down`] with that reason, whatever
/// its rail's pairs gave.
pub fn units_of(
    nodes: &[String],
    rails: &[String],
    validations: &[Validation],
    reports: &[Report],
    sent: &BTreeMap<(String, usize), Vec<f64>>,
    down: &BTreeMap<(String, usize), String>,
) -> Vec<Unit> {
    let mut units = Vec::new();
    for node in nodes {
        for (r, ((rail, v), report)) in rails.iter().zip(validations).zip(reports).enumerate() {
            if let Some(why) = down.get(&(node.clone(), r)) {
                units.push(Unit {
                    node: node.clone(),
                    rail: rail.clone(),
                    verdict: Verdict::Down,
                    send_gbps: None,
                    rail_gbps: None,
                    evidence: vec![format!("{why}: left out of the rail's pairs")],
                });
                continue;
            }
            // Each rail pairs its own nodes (those whose NIC is up there).
            let Some(i) = v.nodes().iter().position(|n| n == node) else {
                continue;
            };
            // What the node sent, where the test knows; else the median of its pairs.
            let pairs: Vec<f64> = v
                .measurements()
                .iter()
                .filter(|m| m.nodes.contains(&i))
                .filter_map(|m| m.outcome.busbw())
                .collect();
            let mine = sent
                .get(&(node.clone(), r))
                .and_then(|values| median(values))
                .or_else(|| median(&pairs));
            let passing: Vec<f64> = v
                .measurements()
                .iter()
                .filter(|m| m.class == Class::Pass)
                .filter_map(|m| m.outcome.busbw())
                .collect();
            let node_report = &report.nodes[i];
            units.push(Unit {
                node: node.clone(),
                rail: rail.clone(),
                verdict: node_report.verdict.clone(),
                send_gbps: mine,
                rail_gbps: median(&passing).or(v.threshold().and_then(Threshold::reference)),
                evidence: node_report
                    .evidence
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            });
        }
    }
    units
}

/// The worst of the rails' health: could not run only when no rail ran.
pub fn combined_health(all: impl Iterator<Item = Health>) -> Health {
    let all: Vec<Health> = all.collect();
    if all.iter().all(|h| *h == Health::CouldNotRun) {
        Health::CouldNotRun
    } else if all.contains(&Health::Failed) {
        Health::Failed
    } else if all
        .iter()
        .any(|h| matches!(h, Health::Degraded | Health::CouldNotRun))
    {
        Health::Degraded
    } else {
        Health::Healthy
    }
}

/// The rails' health with the NICs seen down before traffic: a NIC down fails the run as
/// a failed pair would, since the node cannot use that rail.
pub fn with_down(health: Health, down: &BTreeMap<(String, usize), String>) -> Health {
    match health {
        Health::Healthy | Health::Degraded | Health::CouldNotRun if !down.is_empty() => {
            Health::Failed
        }
        h => h,
    }
}

/// Each node with a slow, failed or down rail, to drain with the rails named in the reason
/// (`gpudirect validate: eth2 slow node`). Pure.
pub fn drain_candidates(units: &[Unit]) -> Vec<Candidate> {
    let mut by_node: std::collections::BTreeMap<&str, Vec<&Unit>> = Default::default();
    for u in units {
        if matches!(
            u.verdict,
            Verdict::SlowNode | Verdict::Failed | Verdict::Down
        ) {
            by_node.entry(&u.node).or_default().push(u);
        }
    }
    by_node
        .into_iter()
        .map(|(node, bad)| {
            let rails: Vec<String> = bad
                .iter()
                .map(|u| format!("{} {}", u.rail, u.verdict))
                .collect();
            Candidate {
                node: node.to_string(),
                verdict: rails.join(", "),
                evidence: bad
                    .iter()
                    .flat_map(|u| u.evidence.iter().map(move |e| format!("{}: {e}", u.rail)))
                    .collect(),
                cause: crate::quarantine::Cause::Nic,
                plan: DrainPlan::Drain {
                    reason: crate::drain::drain_reason(
                        crate::drain::Tool::Validate,
                        &rails.join(", "),
                    ),
                },
            }
        })
        .collect()
}

/// The rails, and the variable that holds NCCL to one NIC (`validate --per-rail`).
#[derive(Debug)]
pub struct RailPlan {
    /// The NICs, as the nodes name them.
    pub rails: Vec<String>,
    /// `--rail-variable`, else the profile's variable set from `{data_nics}` (e.g.
    /// `NCCL_GPUDIRECTTCPX_SOCKET_IFNAME`), else `NCCL_IB_HCA` for RDMA devices and
    /// `NCCL_SOCKET_IFNAME` for interfaces.
    pub variable: String,
    /// The rails are RDMA devices (`data_nic_class = "infiniband"`).
    pub rdma: bool,
}

/// Where the rails come from: the flags of `validate` and `vet`.
pub struct RailRequest<'a> {
    /// `--rails`: the NICs, comma-separated.
    pub rails: Option<&'a str>,
    /// `--gpudirect`: the mode whose profile's data NICs are the rails.
    pub mode: Option<&'a str>,
    /// `--config`: where that profile is.
    pub config: &'a std::path::Path,
    /// `--rail-variable`.
    pub rail_variable: Option<&'a str>,
}

/// What [`rail_plan`] asks when neither `--rails` nor `--gpudirect` says.
const RAILS_ASKED: &str = "which NICs are the rails? pass --rails eth1,eth2,... or --gpudirect MODE (its profile's data_nics)";

/// Why the rails cannot be told.
#[derive(Debug, thiserror::Error)]
pub enum RailError {
    /// `--rails` lists no NIC.
    #[error("--rails {list:?} names no NIC: write e.g. --rails eth1,eth2,eth3,eth4")]
    EmptyList {
        /// The `--rails` given.
        list: String,
    },
    /// Without `--gpudirect`, the config could not be read.
    #[error("{RAILS_ASKED}: {error}")]
    NoConfig {
        /// Why.
        error: Box<ProfileError>,
    },
    /// Without `--gpudirect`, the first node's node set gives no profile with data NICs.
    #[error("{RAILS_ASKED}: {first_node}'s node set in {} gives no profile with data_nics", config.display())]
    NoNodeSetRails {
        /// The node asked about.
        first_node: String,
        /// The config.
        config: PathBuf,
    },
    /// The config of `--gpudirect`'s profile is in error.
    #[error("{error}: the rails come from the profile in {}; or pass --rails", config.display())]
    Config {
        /// Its error.
        error: Box<ProfileError>,
        /// The config.
        config: PathBuf,
    },
    /// The profile could not be told.
    #[error(transparent)]
    Profile(Box<ProfileError>),
    /// The mode sets no profile on the node.
    #[error("--gpudirect {mode} sets no profile: pass --rails")]
    NoProfile {
        /// The mode.
        mode: String,
    },
    /// The profile has no data NICs.
    #[error("the profile of --gpudirect {mode} has no data_nics: pass --rails")]
    NoDataNics {
        /// The mode.
        mode: String,
    },
    /// The profile forces the variable that would hold a pair to one rail.
    #[error("the profile of --gpudirect {mode} forces {variable} (its data NICs), so a pair cannot be held to one rail through it: pass --rail-variable")]
    ForcedVariable {
        /// The mode.
        mode: String,
        /// The variable.
        variable: String,
    },
}

// Boxed: a ProfileError is large, and most rail errors carry none.
impl From<ProfileError> for RailError {
    fn from(error: ProfileError) -> Self {
        RailError::Profile(Box::new(error))
    }
}

/// The rails: `--rails`, else the data NICs of the `--gpudirect` profile for the first node
/// (its node set's real names), from `--config`; without `--gpudirect`, of the profile the
/// first node's node set gives it.
pub fn rail_plan(args: &RailRequest, first_node: &str) -> Result<RailPlan, RailError> {
    let fallback = |rdma: bool| {
        args.rail_variable.map(str::to_string).unwrap_or_else(|| {
            if rdma {
                "NCCL_IB_HCA"
            } else {
                "NCCL_SOCKET_IFNAME"
            }
            .to_string()
        })
    };
    if let Some(list) = args.rails {
        let rails: Vec<String> = list
            .split(',')
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect();
        if rails.is_empty() {
            return Err(RailError::EmptyList {
                list: list.to_string(),
            });
        }
        return Ok(RailPlan {
            rails,
            variable: fallback(false),
            rdma: false,
        });
    }
    // Without --gpudirect, the nodes' own profile: their node set's in the config (auto).
    let Some(mode) = args.mode else {
        let auto = Choice::load(args.config, &Mode::Auto.to_string()).map_err(|error| {
            RailError::NoConfig {
                error: Box::new(error),
            }
        })?;
        let found = auto.on(first_node).ok().flatten();
        if found.is_none_or(|r| r.profile.data_nics.is_empty()) {
            return Err(RailError::NoNodeSetRails {
                first_node: first_node.to_string(),
                config: args.config.to_path_buf(),
            });
        }
        return profile_rails(&auto, first_node, args.rail_variable, fallback);
    };
    let choice = Choice::load(args.config, mode).map_err(|e| match e {
        ProfileError::Config { .. } => RailError::Config {
            error: Box::new(e),
            config: args.config.to_path_buf(),
        },
        e => e.into(),
    })?;
    profile_rails(&choice, first_node, args.rail_variable, fallback)
}

/// The rails of the profile `choice` gives `first_node`: its data NICs as the node set
/// names them, and the variable that holds NCCL to one of them.
fn profile_rails(
    choice: &Choice,
    first_node: &str,
    rail_variable: Option<&str>,
    fallback: impl Fn(bool) -> String,
) -> Result<RailPlan, RailError> {
    let mode = &choice.mode;
    let resolved = choice.on(first_node)?.ok_or_else(|| RailError::NoProfile {
        mode: mode.to_string(),
    })?;
    let profile = resolved.profile;
    let rename = |nic: &String| {
        resolved
            .node_set
            .and_then(|s| s.nic_names.get(nic))
            .cloned()
            .unwrap_or_else(|| nic.clone())
    };
    let rails: Vec<String> = profile.data_nics.iter().map(rename).collect();
    if rails.is_empty() {
        return Err(RailError::NoDataNics {
            mode: mode.to_string(),
        });
    }
    let rdma = profile.data_nic_class == NicClass::Infiniband;
    // The variable the profile fills with its data NICs is the one that restricts NCCL to
    // them; one it forces would replace the rail set per pair, so it cannot be used.
    let from_data_nics = profile.env.iter().find(|v| {
        v.value
            .placeholders()
            .any(|p| matches!(p, Placeholder::DataNics))
    });
    let variable = match (&rail_variable, from_data_nics) {
        (Some(v), _) => v.to_string(),
        (None, Some(v)) if v.forced => {
            return Err(RailError::ForcedVariable {
                mode: mode.to_string(),
                variable: v.name.clone(),
            })
        }
        (None, Some(v)) => v.name.clone(),
        (None, None) => fallback(rdma),
    };
    Ok(RailPlan {
        rails,
        variable,
        rdma,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #33: with neither --rails nor --gpudirect, the rails are the data NICs of the
    /// profile the nodes' node set gives them (here tcpx's, renamed by the node set); a node
    /// no node set covers still asks.
    #[test]
    fn the_rails_come_from_the_nodes_own_profile() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("gpudirect.toml");
        std::fs::write(
            &config,
            "[profiles.tcpx]\ntransport = \"GPUDirectTCPX\"\ndata_nics = [\"eth1\", \"eth2\"]\n\
             [[node_set]]\nname = \"a3\"\nhosts = \"node[1-3]\"\nprofile = \"tcpx\"\n\
             nic_names = { eth2 = \"enp12s0\" }\n",
        )
        .unwrap();
        let request = RailRequest {
            rails: None,
            mode: None,
            config: &config,
            rail_variable: None,
        };
        let plan = rail_plan(&request, "node1").unwrap();
        assert_eq!(plan.rails, ["eth1", "enp12s0"]);
        let err = rail_plan(&request, "other7").unwrap_err().to_string();
        assert!(
            err.starts_with("which NICs are the rails?") && err.contains("other7's node set"),
            "{err}"
        );
    }

    fn step(ntasks: u32, procid: u32) -> StepEnv {
        StepEnv {
            ntasks: Some(ntasks),
            procid: Some(procid),
            under_mpirun: false,
            has_pmi: true,
        }
    }

    #[test]
    fn a_step_without_pmix_is_refused_before_mpi_starts() {
        assert_eq!(check_launch(&step(2, 0)), Ok(()));
        let bare = StepEnv {
            has_pmi: false,
            ..step(2, 0)
        };
        let err = check_launch(&bare).unwrap_err();
        assert!(err.contains("no PMIx"), "{err}");
        assert!(err.contains("srun --mpi=pmix"), "{err}");
        // One task alone is a world of one either way.
        let alone = StepEnv {
            has_pmi: false,
            ..step(1, 0)
        };
        assert_eq!(check_launch(&alone), Ok(()));
    }

    #[test]
    fn the_world_must_be_the_step() {
        assert_eq!(check_world(&step(2, 1), 2, 1), Ok(()));
        let err = check_world(&step(2, 1), 1, 0).unwrap_err();
        assert!(
            err.contains("each of the step's 2 tasks started an MPI world of its own"),
            "{err}"
        );
        assert!(err.contains("srun --mpi=pmix"), "{err}");
        let err = check_world(&step(4, 3), 4, 2).unwrap_err();
        assert!(err.contains("task 3 of 4 is rank 2"), "{err}");
        // Outside a step, or under mpirun, there is nothing to compare with.
        assert_eq!(check_world(&StepEnv::default(), 1, 0), Ok(()));
        let mpirun = StepEnv {
            under_mpirun: true,
            ..step(8, 0)
        };
        assert_eq!(check_world(&mpirun, 2, 1), Ok(()));
    }

    #[test]
    fn a_rail_is_up_absent_or_down() {
        let sys = tempfile::tempdir().expect("temp dir");
        let nic = |name: &str, state: &str, carrier: &str| {
            let dir = sys.path().join(name);
            std::fs::create_dir_all(&dir).expect("nic dir");
            std::fs::write(dir.join("operstate"), format!("{state}\n")).expect("operstate");
            std::fs::write(dir.join("carrier"), format!("{carrier}\n")).expect("carrier");
        };
        nic("eth1", "up", "1");
        nic("eth2", "down", "0");
        nic("eth3", "unknown", "1");
        nic("eth4", "unknown", "0");
        assert_eq!(rail_state(sys.path(), "eth1"), Ok(()));
        assert_eq!(
            rail_state(sys.path(), "eth2"),
            Err("eth2 is down (operstate down)".into())
        );
        assert_eq!(rail_state(sys.path(), "eth3"), Ok(()));
        assert!(rail_state(sys.path(), "eth4").is_err());
        assert_eq!(
            rail_state(sys.path(), "eth9"),
            Err("eth9 does not exist on this node".into())
        );
    }

    #[test]
    fn the_measurement_line_is_found_among_other_output() {
        let m = RailMeasurement {
            gpudirect_rail: 1,
            rail: "eth2".into(),
            hosts: ["node1".into(), "node2".into()],
            size_bytes: 16 << 20,
            messages: 40,
            forward_gbps: 2.1,
            backward_gbps: 0.05,
            latency_us: 30.5,
        };
        let line = serde_json::to_string(&m).expect("json");
        let stdout = format!("0: some banner\n0: {line}\n1: trailing noise\n");
        let read = read_measurement(&stdout).expect("found");
        assert_eq!(read, m);
        assert_eq!(read.gbps(), 0.05);
        assert_eq!(read_measurement("no line here\n{\"other\": 1}\n"), None);
    }

    #[test]
    fn a_pair_step_is_bound_to_its_rail() {
        let spec = PairSpec {
            program: "/opt/gpudirect-mpi".into(),
            mpi: "pmix".into(),
            size_bytes: 1 << 24,
            seconds: 0.5,
            timeout: Duration::from_secs(60),
        };
        let job = pair_job(&spec, "eth3", ["node1", "node4"]);
        let line = job.command_line();
        assert!(line.contains("--nodelist=node1,node4"), "{line}");
        assert!(line.contains("--mpi=pmix"), "{line}");
        assert!(line.contains("pair --rail eth3"), "{line}");
        assert!(job
            .env
            .iter()
            .any(|(k, v)| k == "OMPI_MCA_btl_tcp_if_include" && v == "eth3"));
    }

    #[test]
    fn a_pair_is_recorded_as_a_rail_measurement_with_one_result_per_direction() {
        let m = RailMeasurement {
            gpudirect_rail: 1,
            rail: "eth3".into(),
            hosts: ["node2".into(), "node1".into()],
            size_bytes: 16 << 20,
            messages: 3,
            forward_gbps: 0.024,
            backward_gbps: 2.1,
            latency_us: 9.0,
        };
        let run = record_of(NewRun::default(), "eth3", ["node1", "node2"], Ok(&m));
        assert_eq!(run.collective, RAIL_COLLECTIVE);
        assert_eq!(run.variant.as_deref(), Some("rail:eth3"));
        assert_eq!(run.nodelist.as_deref(), Some("node[1-2]"));
        assert_eq!(run.status, RunStatus::Ok);
        assert_eq!(run.rows.len(), 1);
        assert_eq!(run.rows[0].busbw, 0.024, "the slower direction");
        let sent: Vec<(&str, Option<f64>)> = run
            .node_results
            .iter()
            .map(|r| (r.node.as_str(), r.busbw))
            .collect();
        assert_eq!(sent, [("node2", Some(0.024)), ("node1", Some(2.1))]);
        assert!(run
            .node_results
            .iter()
            .all(|r| r.role.as_deref() == Some("rail eth3 send")));

        let failed = record_of(
            NewRun::default(),
            "eth2",
            ["node3", "node4"],
            Err("node3: eth2 is down (operstate down)"),
        );
        assert_eq!(failed.status, RunStatus::Failed);
        assert_eq!(failed.failures, ["node3: eth2 is down (operstate down)"]);
        assert!(failed.rows.is_empty());
        assert_eq!(failed.node_results[0].partner.as_deref(), Some("node4"));
        assert!(failed.node_results.iter().all(|r| r.busbw.is_none()));
    }

    #[test]
    fn a_pair_that_did_not_connect_or_hung_is_worth_a_retry() {
        use crate::runner::Outcome;
        let stderr = format!("gpudirect-mpi: node3: {NO_CONNECTION} over eth2 within 10s\n");
        assert!(worth_a_retry(&Outcome::Exited { code: 143 }, &stderr));
        assert!(worth_a_retry(&Outcome::TimedOut, ""));
        let down = "gpudirect-mpi: node3: eth2 is down (operstate down)\n";
        assert!(!worth_a_retry(&Outcome::Exited { code: 6 }, down));
        // Seen on the local cluster: the program's line lost when srun tore the step down.
        let torn = "srun: error: node3: task 0: Exited with exit code 7\nsrun: error: node4: task 1: Terminated\n";
        assert!(worth_a_retry(&Outcome::Exited { code: 143 }, torn));
        let other = "srun: error: node3: task 0: Exited with exit code 17\n";
        assert!(!worth_a_retry(&Outcome::Exited { code: 17 }, other));
    }

    #[test]
    fn the_failure_names_the_programs_own_message() {
        let stderr = "1: gpudirect-mpi: node3: eth2 is down (operstate down)\nsrun: error: node3: task 1: Exited with exit code 6\n";
        assert_eq!(
            failure_reason(stderr, "exit code 6"),
            "node3: eth2 is down (operstate down)"
        );
        assert_eq!(
            failure_reason("srun: error: timeout\n", "timed out"),
            "timed out: srun: error: timeout"
        );
        assert_eq!(failure_reason("", "timed out"), "timed out");
    }

    /// Issue #45: rail eth1 was paired without node2 (its NIC down), eth2 over all four;
    /// node2 is `down` on eth1 with its reason, healthy on eth2, and the run fails.
    #[test]
    fn a_rail_left_by_a_down_nic_names_it_down_and_judges_its_other_rails() {
        let all: Vec<String> = (1..=4).map(|i| format!("node{i}")).collect();
        let rails = ["eth1", "eth2"].map(String::from).to_vec();
        let threshold = Threshold::floor(1.0).unwrap();
        let judged = |nodes: Vec<String>| {
            let mut v = Validation::new(
                nodes,
                crate::validate::pairing::Mode::Pairs,
                threshold.clone(),
            )
            .unwrap();
            while let Some(round) = v.next_round() {
                let outcomes = round
                    .groups
                    .iter()
                    .map(|_| crate::validate::judging::Outcome::Busbw(5.0))
                    .collect();
                v.record(&round, outcomes).unwrap();
            }
            v
        };
        let without_2: Vec<String> = all.iter().filter(|n| *n != "node2").cloned().collect();
        let validations = [judged(without_2), judged(all.clone())];
        let reports: Vec<Report> = validations.iter().map(Validation::report).collect();
        let down: BTreeMap<(String, usize), String> = [(
            ("node2".to_string(), 0),
            "eth1 is down (operstate down)".to_string(),
        )]
        .into();
        let units = units_of(
            &all,
            &rails,
            &validations,
            &reports,
            &BTreeMap::new(),
            &down,
        );
        assert_eq!(units.len(), 8);
        let of = |node: &str, rail: &str| {
            units
                .iter()
                .find(|u| u.node == node && u.rail == rail)
                .unwrap()
        };
        assert_eq!(of("node2", "eth1").verdict, Verdict::Down);
        assert_eq!(
            of("node2", "eth1").evidence,
            ["eth1 is down (operstate down): left out of the rail's pairs"]
        );
        assert_eq!(of("node2", "eth2").verdict, Verdict::Healthy);
        assert_eq!(of("node3", "eth1").verdict, Verdict::Healthy);
        let bad: Vec<&Unit> = units
            .iter()
            .filter(|u| u.verdict != Verdict::Healthy)
            .collect();
        assert_eq!(bad.len(), 1, "{bad:?}");
        let healthy = combined_health(reports.iter().map(crate::validate::judging::health));
        assert_eq!(healthy, Health::Healthy);
        assert_eq!(with_down(healthy, &down), Health::Failed);
        assert_eq!(with_down(healthy, &BTreeMap::new()), Health::Healthy);
        let drained = drain_candidates(&units);
        assert_eq!(drained.len(), 1);
        assert_eq!(drained[0].verdict, "eth1 down");
    }

    #[test]
    fn rails_combine_to_the_worst_and_a_bad_rail_drains_its_node_naming_it() {
        use Health::*;
        assert_eq!(combined_health([Healthy, Healthy].into_iter()), Healthy);
        assert_eq!(
            combined_health([Healthy, CouldNotRun].into_iter()),
            Degraded
        );
        assert_eq!(
            combined_health([CouldNotRun, CouldNotRun].into_iter()),
            CouldNotRun
        );
        assert_eq!(combined_health([Degraded, Failed].into_iter()), Failed);
        let unit = |node: &str, rail: &str, verdict: Verdict| Unit {
            node: node.into(),
            rail: rail.into(),
            verdict,
            send_gbps: None,
            rail_gbps: None,
            evidence: vec!["slow in every pairing (3/3)".into()],
        };
        let units = [
            unit("n1", "eth1", Verdict::Healthy),
            unit("n2", "eth1", Verdict::SlowNode),
            unit("n2", "eth2", Verdict::Failed),
            unit("n3", "eth2", Verdict::Healthy),
        ];
        let candidates = drain_candidates(&units);
        assert_eq!(candidates.len(), 1);
        assert_eq!(candidates[0].node, "n2");
        assert_eq!(candidates[0].verdict, "eth1 slow node, eth2 failed");
        assert_eq!(
            candidates[0].evidence[0],
            "eth1: slow in every pairing (3/3)"
        );
        assert!(
            matches!(&candidates[0].plan, DrainPlan::Drain { reason } if reason.starts_with("gpudirect validate: eth1 slow node"))
        );
    }

    #[test]
    fn a_rail_role_reads_back_as_its_rail() {
        for (rail, sent) in [("eth2", true), ("eth10", false), ("enp6s0", true)] {
            assert_eq!(rail_of_role(&rail_role(rail, sent)), Some((rail, sent)));
        }
        assert_eq!(rail_of_role("pair"), None);
        assert_eq!(rail_of_role("rail "), None);
    }
}
