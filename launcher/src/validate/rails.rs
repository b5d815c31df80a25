//! Rails: real host-memory traffic between two nodes over one data NIC at a time, so that a
//! slow or dead NIC is named (`node2 eth3`) instead of a whole node. This module is one
//! pair's MPI step and what becomes of it: the step ([`pair_job`]), the retry rule
//! ([`worth_a_retry`]), the reason a pair failed ([`failure_reason`]) and its history
//! record ([`record_of`]).
//!
//! Two halves, like [`crate::probe`]:
//! - the MPI program (`gpudirect-mpi`, crate `mpi-program`) runs inside a two-task job step,
//!   checks that the MPI world is the step and that its end of the rail is up, measures,
//!   and prints one line: that contract is `gpudirect-wire`'s ([`gpudirect_wire::rails`]),
//!   which the MPI program links instead of the launcher;
//! - `gpudirect validate --test rails` builds the steps ([`pair_job`]), reads the line back
//!   ([`gpudirect_wire::rails::read_measurement`]) and judges per rail with
//!   [`crate::validate::judging`]; [`super::rail_plan`] says which NICs are the rails,
//!   [`super::rail_units`] gives the verdicts per (node, rail).
//!
//! The transport is bound to the rail through the MPI library's own settings
//! ([`transport_env`]): Open MPI's TCP transport with `btl_tcp_if_include`. On InfiniBand,
//! RoCE or EFA the same binding is UCX's `UCX_NET_DEVICES=mlx5_0:1` or libfabric's
//! `FI_PROVIDER=efa` with `FI_EFA_IFACE`/the device name (docs/validation.md).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::history::{LaunchKind, NewNodeResult, NewRow, NewRun, Placement, RunStatus};
use crate::launch::{mpirun_forward, MPIRUN_ROOT_CONSENT};
use crate::runner::{Job, Outcome, StartWatch};
use gpudirect_wire::rails::{RailMeasurement, EXIT_NO_CONNECTION, MPI_STARTED, NO_CONNECTION};

/// How long a pair's step may take to show that MPI started ([`MPI_STARTED`]); a step still
/// silent then is stopped and run once more ([`worth_a_retry`]), not held to its whole
/// timeout. Two tasks' srun launch and MPI_Init take about 1 s on the local cluster.
pub const MPI_START_DEADLINE: Duration = Duration::from_secs(20);

/// The start-up watch of a pair's step whose time limit is `timeout`.
pub fn mpi_start_watch(timeout: Duration) -> StartWatch {
    StartWatch {
        within: MPI_START_DEADLINE.min(timeout),
        started: |line| line.trim_end() == MPI_STARTED,
    }
}

/// What a pair's outcome says where the MPI program said nothing itself: a step (of time
/// limit `timeout`) stopped at its start-up deadline is named for where it hung, with the
/// deadline [`mpi_start_watch`] gave it.
pub fn outcome_said(outcome: &Outcome, timeout: Duration) -> String {
    match outcome {
        Outcome::NotStarted => format!(
            "MPI did not start within {} s (hung in MPI_Init, e.g. a PMIx fence)",
            mpi_start_watch(timeout).within.as_secs()
        ),
        other => other.to_string(),
    }
}

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

/// How srun says a task died of a signal that is a crash (Slurm's words for the signal,
/// `srun: error: node6: task 1: Segmentation fault`, ` (core dumped)` after it where a core
/// was written); not `Terminated` or `Killed`, which is srun tearing the step down.
const CRASHES: [&str; 5] = [
    "Segmentation fault",
    "Aborted",
    "Bus error",
    "Illegal instruction",
    "Floating point exception",
];

/// Whether a pair's step should run once more: it did not connect in time (its stderr
/// says [`NO_CONNECTION`], or, when the step was torn down before that line reached srun,
/// srun says a task exited with [`EXIT_NO_CONNECTION`]; srun's own exit status is that of
/// whichever task ended first), it ran past its time limit without saying why, or a task
/// crashed ([`CRASHES`]: seen once on the local cluster, the MPI program dead of a
/// segmentation fault 0.45 s after its launch, beside three healthy steps of the same
/// nodes), or MPI did not start by its start-up deadline ([`mpi_start_watch`]): none of
/// these says anything of the rail.
pub fn worth_a_retry(outcome: &Outcome, stderr: &str) -> bool {
    let exited_unconnected = format!("Exited with exit code {EXIT_NO_CONNECTION}");
    let srun_says = |l: &str| {
        let said = l.trim_end().trim_end_matches(" (core dumped)");
        l.starts_with("srun: error:")
            && (said.ends_with(&exited_unconnected)
                || (said.contains(": task ") && CRASHES.iter().any(|c| said.ends_with(c))))
    };
    matches!(outcome, Outcome::TimedOut | Outcome::NotStarted)
        || stderr.contains(NO_CONNECTION)
        || stderr.lines().any(srun_says)
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

/// How a pair's two tasks start.
#[derive(Debug, Clone, PartialEq)]
pub enum PairLaunch {
    /// One job step, `srun --mpi=PLUGIN` (`pmix`): Slurm's PMIx server wires the world.
    Srun {
        /// srun's `--mpi` plugin.
        mpi: String,
    },
    /// Open MPI's `mpirun` inside the allocation: it starts its daemons on the two nodes
    /// with srun (`--overlap`, so the pairs of every rail still run at once) and wires the
    /// world with its own PMIx server. Slurm's `mpi/pmix` plugin is not involved, so a pair
    /// on part of the allocation does not meet its job/step index mix-up
    /// (docs/local-cluster.md, "Open MPI on 24.11").
    Mpirun {
        /// The launcher runs as root (an admin's `--quarantine` or `--drain`): mpirun
        /// refuses root without its consent variables ([`MPIRUN_ROOT_CONSENT`]).
        as_root: bool,
    },
}

impl PairLaunch {
    /// What the history records as the pairs' launcher.
    pub fn kind(&self) -> LaunchKind {
        match self {
            PairLaunch::Srun { .. } => LaunchKind::Srun,
            PairLaunch::Mpirun { .. } => LaunchKind::Mpirun,
        }
    }
}

/// Whether `mpirun` on PATH is Open MPI's (`mpirun --version` names it: "mpirun (Open MPI)
/// 4.1.4", "mpirun (Open MPI) 5.0.7"), the one [`PairLaunch::Mpirun`]'s flags are written
/// for; `false` when there is none, it is another MPI's, or it did not answer in 10 s.
pub fn mpirun_is_open_mpis() -> bool {
    let job = Job {
        program: "mpirun".into(),
        args: vec!["--version".into()],
        env: Vec::new(),
        cwd: None,
        timeout: Duration::from_secs(10),
        grace: Duration::from_secs(1),
        user: None,
    };
    let never = std::sync::atomic::AtomicBool::new(false);
    crate::runner::run(&job, &never).is_ok_and(|done| {
        done.outcome == Outcome::Exited { code: 0 } && says_open_mpi(&done.stdout)
    })
}

/// Whether `mpirun --version`'s output is Open MPI's.
fn says_open_mpi(version: &[u8]) -> bool {
    String::from_utf8_lossy(version)
        .lines()
        .next()
        .is_some_and(|first| first.contains("(Open MPI)"))
}

/// How one pair is measured.
#[derive(Debug, Clone, PartialEq)]
pub struct PairSpec {
    /// The MPI program.
    pub program: PathBuf,
    /// How its two tasks start.
    pub launch: PairLaunch,
    /// Message size.
    pub size_bytes: u64,
    /// About how long to send each way.
    pub seconds: f64,
    /// The step's time limit.
    pub timeout: Duration,
    /// Where Open MPI's out-of-band channel stays (issue #45): the profile's control NIC,
    /// unless the user set `OMPI_MCA_oob_tcp_if_include` or its exclude twin
    /// ([`crate::launch::oob_pin`]); `None` leaves it to Open MPI.
    pub oob_nic: Option<String>,
}

/// The job step measuring `pair` on `rail`: one task on each node, the transport bound to
/// the rail, and the step ended when either task fails. `--overlap`: the pairs of every
/// rail run at the same time on the same nodes, whatever CPUs the allocation holds (with
/// `--exact`, an allocation of one CPU per node, salloc's default, ran them one by one).
/// With [`PairLaunch::Mpirun`] the same, through mpirun: its daemons' srun gets
/// `--overlap` from `plm_slurm_args`, and the transport's variables reach the tasks with
/// `-x`.
pub fn pair_job(spec: &PairSpec, rail: &str, pair: [&str; 2]) -> Job {
    fn os(text: impl Into<OsString>) -> OsString {
        text.into()
    }
    let mut env = transport_env(rail);
    if let Some(nic) = &spec.oob_nic {
        env.push(("OMPI_MCA_oob_tcp_if_include".into(), nic.clone()));
    }
    let (program, mut args) = match &spec.launch {
        PairLaunch::Srun { mpi } => (
            "srun",
            vec![
                os("--nodes=2"),
                os("--ntasks=2"),
                os("--ntasks-per-node=1"),
                os(format!("--nodelist={},{}", pair[0], pair[1])),
                os("--overlap"),
                os("--kill-on-bad-exit=1"),
                os(format!("--mpi={mpi}")),
            ],
        ),
        PairLaunch::Mpirun { as_root } => {
            let mut args = vec![
                os("-n"),
                os("2"),
                os("--host"),
                os(format!("{}:1,{}:1", pair[0], pair[1])),
                os("--map-by"),
                os("node"),
                os("--bind-to"),
                os("none"),
            ];
            args.extend(mpirun_forward(env.iter().map(|(name, _)| name.as_str())));
            // Open MPI 5's daemons (PRRTE) and 4.1's (ORTE) read their srun's extra
            // arguments under these names.
            for name in ["PRTE_MCA_plm_slurm_args", "OMPI_MCA_plm_slurm_args"] {
                env.push((name.into(), "--overlap".into()));
            }
            if *as_root {
                env.extend(MPIRUN_ROOT_CONSENT.map(|(k, v)| (k.to_string(), v.to_string())));
            }
            ("mpirun", args)
        }
    };
    args.extend([
        spec.program.clone().into_os_string(),
        os("pair"),
        os("--rail"),
        os(rail),
        os("--size"),
        os(spec.size_bytes.to_string()),
        os("--seconds"),
        os(spec.seconds.to_string()),
    ]);
    Job {
        program: program.into(),
        args,
        env: env.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
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
    run.provenance
        .env
        .insert("GPUDIRECT_RAIL".into(), rail.into());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_step_is_bound_to_its_rail() {
        let spec = PairSpec {
            program: "/opt/gpudirect-mpi".into(),
            launch: PairLaunch::Srun { mpi: "pmix".into() },
            size_bytes: 1 << 24,
            seconds: 0.5,
            timeout: Duration::from_secs(60),
            oob_nic: None,
        };
        let job = pair_job(&spec, "eth3", ["node1", "node4"]);
        let line = job.command_line();
        assert!(line.contains("--nodelist=node1,node4"), "{line}");
        assert!(line.contains("--mpi=pmix"), "{line}");
        assert!(line.contains("pair --rail eth3"), "{line}");
        let has =
            |job: &Job, key: &str, value: &str| job.env.iter().any(|(k, v)| k == key && v == value);
        assert!(has(&job, "OMPI_MCA_btl_tcp_if_include", "eth3"));
        assert!(!job
            .env
            .iter()
            .any(|(k, _)| k == "OMPI_MCA_oob_tcp_if_include"));
        // Issue #45: the out-of-band channel on the control NIC, the data on the rail.
        let pinned = PairSpec {
            oob_nic: crate::launch::oob_pin(Some("eth0".into()), |_| false),
            ..spec.clone()
        };
        let job = pair_job(&pinned, "eth3", ["node1", "node4"]);
        assert!(has(&job, "OMPI_MCA_oob_tcp_if_include", "eth0"));
        assert!(has(&job, "OMPI_MCA_btl_tcp_if_include", "eth3"));
        // The user's own choice wins.
        assert_eq!(
            crate::launch::oob_pin(Some("eth0".into()), |k| k == "OMPI_MCA_oob_tcp_if_exclude"),
            None
        );
    }

    #[test]
    fn a_pair_through_mpirun_places_one_rank_per_node_and_forwards_the_binding() {
        let spec = PairSpec {
            program: PathBuf::from("/opt/gpudirect/bin/gpudirect-mpi"),
            launch: PairLaunch::Mpirun { as_root: false },
            size_bytes: 1 << 24,
            seconds: 0.5,
            timeout: Duration::from_secs(60),
            oob_nic: Some("eth0".into()),
        };
        let job = pair_job(&spec, "eth3", ["node2", "node4"]);
        assert_eq!(job.program, OsString::from("mpirun"));
        let line = job.command_line();
        assert!(
            line.contains("-n 2 --host node2:1,node4:1 --map-by node --bind-to none"),
            "{line}"
        );
        // Every variable of the binding is forwarded to the ranks by name, none lost.
        for name in [
            "OMPI_MCA_pml",
            "OMPI_MCA_btl",
            "OMPI_MCA_btl_tcp_if_include",
            "OMPI_MCA_oob_tcp_if_include",
        ] {
            assert!(line.contains(&format!("-x {name} ")), "{name}: {line}");
            assert!(job.env.iter().any(|(k, _)| k == name), "{name}");
        }
        assert!(line.ends_with("gpudirect-mpi pair --rail eth3 --size 16777216 --seconds 0.5"));
        assert!(!line.contains("--mpi="), "{line}");
        // The daemons' srun overlaps the other pairs' steps, as srun's own step does.
        let overlap = |key: &str| job.env.iter().any(|(k, v)| k == key && v == "--overlap");
        assert!(overlap("PRTE_MCA_plm_slurm_args") && overlap("OMPI_MCA_plm_slurm_args"));
        assert!(line.starts_with("mpirun -n 2 "), "{line}");
        let consent = |job: &Job| {
            MPIRUN_ROOT_CONSENT
                .iter()
                .all(|(k, v)| job.env.iter().any(|(a, b)| a == k && b == v))
        };
        assert!(!consent(&job));
        // An admin's run as root: mpirun is told it may.
        let root = PairSpec {
            launch: PairLaunch::Mpirun { as_root: true },
            ..spec
        };
        let job = pair_job(&root, "eth3", ["node2", "node4"]);
        assert!(consent(&job), "{:?}", job.env);
        assert!(job.command_line().starts_with("mpirun -n 2 "));
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

    /// Seen on the local cluster's Slurm 24.11 with Open MPI 5.0: a step hung in MPI_Init's
    /// PMIx fence prints nothing; it is stopped at the start-up deadline, said as such, and
    /// run once more. The watch is the program's own line, and never longer than the step.
    #[test]
    fn a_pair_whose_mpi_did_not_start_is_cut_early_said_and_worth_a_retry() {
        const MINUTE: Duration = Duration::from_secs(60);
        let watch = mpi_start_watch(MINUTE);
        assert_eq!(watch.within, MPI_START_DEADLINE);
        assert!((watch.started)(MPI_STARTED));
        assert!((watch.started)(&format!("{MPI_STARTED}\r")));
        assert!(!(watch.started)(r#"{"gpudirect_rail":1,"rail":"eth1"}"#));
        assert!(!(watch.started)(
            "srun: job 5 queued and waiting for resources"
        ));
        assert_eq!(
            mpi_start_watch(Duration::from_secs(5)).within,
            Duration::from_secs(5)
        );
        let fence = "slurmstepd-node4: error:  mpi/pmix_v5: pmixp_coll_ring_reset_if_to: node4 [1]: pmixp_coll_ring.c:737: 0x7f1d340830b0: collective timeout seq=1\n";
        assert!(worth_a_retry(&Outcome::NotStarted, fence));
        assert_eq!(
            failure_reason(fence, &outcome_said(&Outcome::NotStarted, MINUTE)),
            "MPI did not start within 20 s (hung in MPI_Init, e.g. a PMIx fence): \
             slurmstepd-node4: error:  mpi/pmix_v5: pmixp_coll_ring_reset_if_to: node4 [1]: \
             pmixp_coll_ring.c:737: 0x7f1d340830b0: collective timeout seq=1"
        );
        assert!(outcome_said(&Outcome::NotStarted, Duration::from_secs(5))
            .starts_with("MPI did not start within 5 s "));
        assert_eq!(
            outcome_said(&Outcome::TimedOut, MINUTE),
            Outcome::TimedOut.to_string()
        );
    }

    #[test]
    fn a_pair_that_did_not_connect_or_hung_is_worth_a_retry() {
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
        // Seen on the local cluster (vet, 2026-12-06): the program crashed at its start.
        let crashed = "srun: error: node6: task 1: Segmentation fault\nsrun: launch/slurm: _step_signal: Terminating StepId=158.12\nsrun: error: node1: task 0: Terminated\nsrun: Force Terminated StepId=158.12\n";
        assert!(worth_a_retry(&Outcome::Exited { code: 143 }, crashed));
        let dumped = "srun: error: node6: task 1: Aborted (core dumped)\n";
        assert!(worth_a_retry(&Outcome::Exited { code: 134 }, dumped));
        let torn_only =
            "srun: error: node1: task 0: Terminated\nsrun: Force Terminated StepId=1.2\n";
        assert!(!worth_a_retry(&Outcome::Exited { code: 143 }, torn_only));
    }

    /// `mpirun --version` as Open MPI 4.1 (Debian 12) and 5.0 print it, and as MPICH's
    /// Hydra does (whose flags differ: never picked by `auto`).
    #[test]
    fn only_open_mpis_mpirun_is_taken_for_its_own() {
        assert!(says_open_mpi(
            b"mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
        ));
        assert!(says_open_mpi(
            b"mpirun (Open MPI) 5.0.7\n\nReport bugs to https://www.open-mpi.org/community/help/\n"
        ));
        assert!(!says_open_mpi(
            b"HYDRA build details:\n    Version:                                 4.0.2\n"
        ));
        assert!(!says_open_mpi(b""));
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

    #[test]
    fn a_rail_role_reads_back_as_its_rail() {
        for (rail, sent) in [("eth2", true), ("eth10", false), ("enp6s0", true)] {
            assert_eq!(rail_of_role(&rail_role(rail, sent)), Some((rail, sent)));
        }
        assert_eq!(rail_of_role("pair"), None);
        assert_eq!(rail_of_role("rail "), None);
    }
}
