//! vet's pairs over the nodes that passed the node checks, within the budget: nccl-tests
//! pairs through [`crate::validate::pairs`] (one screen, one re-pairing at the judged size
//! alone) or MPI rail pairs through [`crate::validate::rail_runs`]; each node's verdict.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::{worst_over_rails, Paired};
use crate::budget::Budget;
use crate::checks::expected_sizes;
use crate::history::{History, HistoryError, NewRun, RunProvenance};
use crate::launch::{find_binary, pin_launch, LaunchError, LaunchOptions, Launcher};
use crate::matrix::{Matrix, Variant};
use crate::profile::Choice;
use crate::slurm::{env_set, env_var};
use crate::validate::judging::{JudgeError, Threshold, Validation, DEFAULT_TOLERANCE};
use crate::validate::pairing::Mode;
use crate::validate::pairs::{
    pair_reference, pinned_algorithm, run_rounds, PairsError, Recorded, ReferenceError,
    ReferenceRequest, RoundContext, Units, DEFAULT_ALGO,
};
use crate::validate::rail_plan::{rail_plan, RailError, RailRequest};
use crate::validate::rail_runs::{validate_rails, RailRunError, RailsPlan};
use crate::validate::rail_states;
use crate::validate::rail_units::units_of;
use crate::validate::rails::{locate_mpi_program, PairLaunch, PairSpec};
use crate::{noteln, slurm};
use gpudirect_core::system::{load_config, Ownership};

/// What vet's pairs are asked to measure, from its flags.
#[derive(Debug, Clone)]
pub struct PairsRequest {
    /// nccl-tests or MPI per rail.
    pub test: Test,
    /// `--rails`.
    pub rails: Option<String>,
    /// `--gpudirect`.
    pub gpudirect: Option<String>,
    /// The admin config.
    pub config: PathBuf,
    /// The rail pairs' message size.
    pub message_size: u64,
    /// The MPI program of the rail pairs.
    pub mpi_program: Option<PathBuf>,
    /// srun's `--mpi`.
    pub mpi: String,
    /// How each rail pair starts (read by a rails test only).
    pub rails_launch: PairLaunch,
    /// A fixed floor, GB/s.
    pub floor: Option<f64>,
    /// Percent below the reference a pair may be.
    pub tolerance: Option<f64>,
    /// The cluster recorded.
    pub cluster: Option<String>,
    /// The nccl-tests collective.
    pub collective: String,
    /// Smallest size of the nccl-tests pairs.
    pub min_bytes: u64,
    /// Largest size, the one judged.
    pub max_bytes: u64,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// GPUs per nccl-tests process.
    pub gpus_per_process: u32,
    /// The nccl-tests folder.
    pub nccl_tests_dir: Option<PathBuf>,
    /// How long a pair may take to reach NCCL (`--startup-timeout`).
    pub startup_timeout: Duration,
}

/// What the pairs measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Test {
    /// nccl-tests pairs between the nodes' GPUs.
    Nccl,
    /// MPI pairs over each rail (data NIC), no GPU needed.
    Rails,
}

impl Test {
    pub fn as_str(self) -> &'static str {
        match self {
            Test::Nccl => "nccl",
            Test::Rails => "rails",
        }
    }
}

/// What the pairs judged: each node's verdict, the rounds run, the threshold, the runs.
pub struct PairsDone {
    /// Each node that the pairs judged, with its verdict and evidence.
    pub paired: BTreeMap<String, Paired>,
    /// Rounds run to their end.
    pub rounds: usize,
    /// The line the pairs were judged by, in words.
    pub threshold: Option<String>,
    /// The pair runs recorded.
    pub run_ids: Vec<i64>,
}

/// Why vet's pairs could not run.
#[derive(Debug, thiserror::Error)]
pub enum VetPairsError {
    /// The rails could not be told.
    #[error(transparent)]
    Rails(#[from] RailError),
    /// The rails are RDMA devices, which MPI cannot bind to.
    #[error("--test rails binds MPI to IP interfaces; the profile's rails are RDMA devices: pass --rails with their IP interfaces")]
    RdmaRails,
    /// The MPI program was not found.
    #[error("{0}")]
    MpiProgram(String),
    /// The rail pairs failed.
    #[error(transparent)]
    RailRuns(#[from] RailRunError),
    /// No nccl-tests folder was given.
    #[error("pass --nccl-tests-dir DIR or set NCCL_TESTS_DIR")]
    NoNcclTests,
    /// The nccl-tests binary was not found.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The baseline of pairs could not be read.
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    /// The validation could not be set up.
    #[error(transparent)]
    Judge(#[from] JudgeError),
    /// The folder for the pairs' reports could not be created.
    #[error("cannot create a folder for the pairs' JSON reports")]
    WorkDir(#[source] std::io::Error),
    /// The history could not be opened.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// The pairs failed.
    #[error(transparent)]
    Pairs(#[from] PairsError),
}

/// The pairs of `--test`: over `nodes` (those that passed the checks), within `budget`.
pub fn run_pairs(
    req: &PairsRequest,
    nodes: &[String],
    budget: &Budget,
    history: &mut History,
) -> Result<PairsDone, VetPairsError> {
    match req.test {
        Test::Rails => rail_pairs(req, nodes, budget, history),
        Test::Nccl => nccl_pairs(req, nodes, budget, history),
    }
}

/// The control NIC of `--gpudirect`'s profile on every one of `nodes`, where they agree:
/// the launch's own Open MPI traffic stays there (issue #45).
fn control_nic(req: &PairsRequest, nodes: &[String]) -> Option<String> {
    let mode = req.gpudirect.as_deref()?;
    Choice::load(&req.config, mode).ok()?.control_nic(nodes)
}

/// MPI pairs per rail (validate --test rails' rounds); a node's verdict is its worst rail.
fn rail_pairs(
    req: &PairsRequest,
    nodes: &[String],
    budget: &Budget,
    history: &mut History,
) -> Result<PairsDone, VetPairsError> {
    let plan = rail_plan(
        &RailRequest {
            rails: req.rails.as_deref(),
            mode: req.gpudirect.as_deref(),
            config: &req.config,
            rail_variable: None,
        },
        &nodes[0],
    )?;
    if plan.rdma {
        return Err(VetPairsError::RdmaRails);
    }
    let spec = PairSpec {
        program: locate_mpi_program(req.mpi_program.as_deref())
            .map_err(VetPairsError::MpiProgram)?,
        launch: req.rails_launch.clone(),
        size_bytes: req.message_size,
        seconds: 0.5,
        timeout: Duration::from_secs(60),
        oob_nic: crate::launch::oob_pin(control_nic(req, nodes), env_set),
    };
    let base = NewRun {
        cluster: slurm::cluster_name(req.cluster.as_deref()),
        job_id: slurm::job_id(),
        gpus_per_node: Some(0),
        launcher: spec.launch.kind(),
        provenance: RunProvenance {
            binary_path: Some(spec.program.display().to_string()),
            ..RunProvenance::default()
        },
        tool: crate::history::Tool::Vet,
        ..NewRun::default()
    };
    noteln!(
        "gpudirect vet: rails {} over {} node(s), every rail at once, pairs through {}",
        plan.rails.join(","),
        nodes.len(),
        spec.launch.kind()
    );
    // Before any traffic: a NIC down, missing or without an address leaves its rail's pairs.
    let on_rails = rail_states::ask("vet", nodes, &plan.rails, budget);
    let run = validate_rails(
        &RailsPlan {
            spec: &spec,
            rails: &plan.rails,
            nodes,
            on_rails: &on_rails,
            mode: Mode::Pairs,
            floor: req.floor,
            tolerance: req.tolerance.unwrap_or(75.0) / 100.0,
            base: &base,
            budget,
            followups: Some(FOLLOWUPS),
        },
        history,
    )?;
    let reports: Vec<_> = run.validations.iter().map(Validation::report).collect();
    let units = units_of(
        nodes,
        &plan.rails,
        &run.validations,
        &reports,
        &run.sent,
        &on_rails.down,
    );
    let mut per_node: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for u in units {
        per_node
            .entry(u.node.clone())
            .or_default()
            .push((u.rail, u.verdict, u.evidence));
    }
    let paired = per_node
        .into_iter()
        .filter_map(|(node, rails)| Some((node, worst_over_rails(&rails)?)))
        .collect();
    Ok(PairsDone {
        paired,
        rounds: run.rounds,
        threshold: (!run.validations.is_empty()).then(|| match &run.threshold {
            Threshold::Baseline { tolerance, .. } => format!(
                "{:.3} GB/s ({:.0}% below the first round's median)",
                run.threshold.limit(),
                tolerance * 100.0
            ),
            t => format!("{:.3} GB/s ({})", t.limit(), t.explain()),
        }),
        run_ids: run.run_ids,
    })
}

/// nccl-tests pairs (validate's rounds), judged against the history's baseline of pairs
/// like these, else the first round's own median.
fn nccl_pairs(
    req: &PairsRequest,
    nodes: &[String],
    budget: &Budget,
    history: &mut History,
) -> Result<PairsDone, VetPairsError> {
    let Some(dir) = req.nccl_tests_dir.clone() else {
        return Err(VetPairsError::NoNcclTests);
    };
    find_binary(&dir, &req.collective)?;
    let cluster = slurm::cluster_name(req.cluster.as_deref());
    let (reference, _) = pair_reference(
        history,
        &ReferenceRequest {
            collective: &req.collective,
            cluster: &cluster,
            ranks_per_pair: 2 * req.gpus_per_node,
            variant: PAIR_VARIANT,
            max_bytes: req.max_bytes,
            floor: req.floor,
            tolerance: req.tolerance.unwrap_or(DEFAULT_TOLERANCE * 100.0) / 100.0,
            baseline_runs: 10,
        },
    )?;
    // One screen, one re-pairing of the suspects: what fits a job's start.
    let mut validation =
        Validation::new(nodes.to_vec(), Mode::Pairs, reference)?.with_followups(FOLLOWUPS);
    let mut variant = Variant {
        name: PAIR_VARIANT.to_string(),
        gpudirect: req.gpudirect.clone(),
        env: BTreeMap::new(),
    };
    // validate's rule, with its default: pairs are compared on one algorithm.
    if let (Some(algo), _) = pinned_algorithm(DEFAULT_ALGO, env_var("NCCL_ALGO").as_deref()) {
        variant.env.insert("NCCL_ALGO".into(), algo);
    }
    // The transport NCCL used is read from its channel lines, which NCCL prints at INFO.
    if req.gpudirect.is_some() && env_var("NCCL_DEBUG").is_none() {
        variant.env.insert("NCCL_DEBUG".into(), "INFO".into());
    }
    // validate's rule: the launch's own MPI traffic on the profile's control NIC.
    let control = control_nic(req, nodes);
    pin_launch(&mut variant.env, control.as_deref(), "vet", env_set);
    let timeout = Duration::from_secs(120);
    let matrix = Matrix {
        collectives: vec![req.collective.clone()],
        nodes: vec![2],
        gpus_per_node: vec![req.gpus_per_node],
        min_bytes: req.min_bytes,
        max_bytes: req.max_bytes,
        factor: 2,
        timeout,
        extra_args: Vec::new(),
        variants: vec![variant.clone()],
    };
    let work = tempfile::Builder::new()
        .prefix("gpudirect-vet-")
        .tempdir()
        .map_err(VetPairsError::WorkDir)?;
    let launch = LaunchOptions {
        launcher: Launcher::Srun,
        nccl_tests_dir: dir,
        mpi: Some(req.mpi.clone()),
        nodes: Vec::new(),
        work_dir: Some(work.path().to_path_buf()),
        timeout,
        grace: Duration::from_secs(5),
        as_root: nix::unistd::geteuid().is_root(),
        gpus_per_process: req.gpus_per_process,
        exact: true,
        startup_timeout: Some(req.startup_timeout),
    };
    let config = load_config(&req.config, Ownership::Any).ok();
    let sizes = expected_sizes(req.min_bytes, req.max_bytes, Some(2), None);
    // The re-pairings read the judged size alone: they run it alone.
    let followup_matrix = Matrix {
        min_bytes: req.max_bytes,
        ..matrix.clone()
    };
    let followup_sizes = [req.max_bytes];
    let rc = RoundContext {
        tool: crate::history::Tool::Vet,
        collective: &req.collective,
        gpus_per_node: req.gpus_per_node,
        gpus_per_unit: 1,
        units: &Units::Nodes,
        launch: &launch,
        matrix: &matrix,
        sizes: &sizes,
        cluster: &cluster,
        max: req.max_bytes,
        line_rate_gbps: None,
        config: config.as_ref().filter(|_| req.gpudirect.is_some()),
        budget,
        followup: Some((&followup_matrix, &followup_sizes)),
    };
    let scratch = History::open(history.path())?;
    let mut rec = Recorded {
        history: scratch,
        run_ids: Vec::new(),
        pairs: Vec::new(),
        cells_started: 0,
    };
    match run_rounds(&rc, &mut validation, &variant, &mut rec) {
        Ok(()) | Err(PairsError::Interrupted { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let report = validation.report();
    let paired = report
        .nodes
        .iter()
        .filter(|n| n.rounds > 0)
        .map(|n| {
            let paired = Paired {
                verdict: n.verdict.clone(),
                evidence: n.evidence.iter().map(ToString::to_string).collect(),
            };
            (n.node.clone(), paired)
        })
        .collect();
    Ok(PairsDone {
        paired,
        rounds: validation.rounds_done(),
        threshold: validation
            .threshold()
            .map(|t| format!("{:.2} GB/s ({})", t.limit(), t.explain())),
        run_ids: rec.run_ids,
    })
}

/// Follow-up passes after the screen: one re-pairing of the suspects with nodes that
/// passed, which names a slow node (slow with two partners, one of them fast elsewhere).
pub const FOLLOWUPS: usize = 1;

/// The variant vet's nccl-tests pairs are recorded (and their baseline found) under:
/// validate's, so that both build one baseline.
pub const PAIR_VARIANT: &str = "validate:pairs";
