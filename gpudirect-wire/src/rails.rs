//! The rail pair's contract: what `gpudirect-mpi pair` checks before MPI starts, how it
//! ends when it cannot measure (its exit statuses and its words), and the one line it
//! prints ([`RailMeasurement`]) that `gpudirect validate --test rails` reads back
//! ([`read_measurement`]).
//!
//! The MPI program runs inside a two-task job step, checks that its launch can form one
//! world ([`check_launch`]), that the MPI world is the step ([`check_world`]) and that its
//! end of the rail is up ([`rail_state`]), measures, and prints the line. The launcher's
//! side (the step it builds, the record, the verdicts) is `gpudirect::validate::rails`.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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

/// What rank 0 of `gpudirect-mpi pair` prints on stdout once MPI is initialised, before its
/// first message. The launcher stops a pair's step that has not printed it within a start-up
/// deadline shorter than the pair's timeout, and runs it once more: a launch can hang inside
/// MPI_Init, in a PMIx fence that never completes (measured on the local cluster's Slurm 24.11
/// with Open MPI 5.0: about one launch in two on some pairs of nodes, every one of them
/// started again fine).
pub const MPI_STARTED: &str = "gpudirect-mpi: MPI started";

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
