//! `gpudirect validate`: is every node and link as fast as it should be, and if not, which?
//! Rounds of disjoint pairs (or groups) run at the same time, as job steps over the
//! allocation's nodes or, with `--gpus`, as local processes over this host's GPU groups;
//! the pure planner in [`gpudirect::judging`] picks each next round from the results so far.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use gpudirect::checks::{expected_sizes, Expectations};
use gpudirect::history::{History, LaunchKind, NewNodeResult, RunStatus};
use gpudirect::judging::{
    health, Health, Outcome as PairOutcome, Reference, Retests, RoundRule, Stage, Threshold,
    Validation,
};
use gpudirect::launch::{find_binary, prepare, LaunchOptions, Launcher};
use gpudirect::matrix::{Cell, Matrix, Variant};
use gpudirect::pairing::{parse_topology, Mode};
use gpudirect::record::RunContext;
use gpudirect::report::{gather, write_report, ReportFormat, ReportOptions, Selection};
use gpudirect::runner::{self, INTERRUPTED};
use gpudirect::units::{duration_arg, nccl_size as format_size, percent_arg, size_arg};

use gpudirect::launch::env_var;
use gpudirect::units::now_unix;
use gpudirect_core::system::{load_config, short_hostname, Ownership};

mod drains;
mod rails;

pub use drains::NodeAction;
use drains::{EvidenceSource, PairRun};

use super::args::{gpu_device, parse_gpu_list, visible_gpus};
use super::{Ctx, ExitStatus};
use gpudirect::cell::{self, Evaluated};
use gpudirect::outln;
use gpudirect::output::{emit_json, line_share};
use gpudirect::setup::{setup_differences, RunSetup};

/// How far below the baseline an nccl-tests pair may be, percent, by default.
const DEFAULT_TOLERANCE: f64 = 10.0;

/// An nccl-tests pair's time limit by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// What validate measures between the units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Test {
    /// nccl-tests between the nodes' GPUs (or this host's, with --gpus).
    Nccl,
    /// Host-memory traffic over MPI, one data NIC (rail) at a time: units are (node, rail).
    Rails,
}

/// Arguments of `gpudirect validate`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    salloc -N16 gpudirect validate --floor 60 -e 1G          # pairs, fixed busbw floor\n  \
    gpudirect validate --tolerance 10 --report validate/     # baseline from the history\n  \
    gpudirect validate --mode pairwise --drain               # every pair; drain bad nodes\n  \
    gpudirect validate --floor 60 --drain --retries 2        # re-test twice before draining\n  \
    gpudirect validate --floor 60 --resume                   # return our drained nodes that pass\n  \
    gpudirect validate --gpus 0-7 --floor 300 -e 8G          # this host's GPUs, no Slurm\n\n\
Round 1 runs disjoint pairs at the same time (one job step each); a node is suspect when\n\
its pairs are slow, and is re-paired with nodes that passed (round 2) and confirmed\n\
(round 3), separating a slow node from a bad link. Every pair run goes into the history\n\
with its nodes. With --gpus the units are GPU groups of this host (gpu0, gpu1, ... or\n\
gpu0-1, ... with --gpus-per-unit 2) and each pair is one local nccl-tests process driving\n\
both groups' GPUs (CUDA_VISIBLE_DEVICES, -g). Exit status: 0 healthy, 1 degraded (slow\n\
nodes or links), 2 failed (runs failed; or a drain, a resume or the --on-drain command\n\
did not work), 3 could not run (nothing measured, bad options).\n\n\
Drains: --drain sets reasons that start with `gpudirect:` and reads the state back; a node\n\
drained by an admin for another reason is left alone. --retries N re-tests each node found\n\
slow or failed N more times, each with a node that passed (a new partner where there is\n\
one), and drains only a node bad in every re-test. --resume validates the whole allocation\n\
as usual, and re-tests each node drained with the `gpudirect:` tag with a node that is not\n\
drained (once, or up to N times with --retries N); one judged healthy that passes is\n\
returned to service (scontrol update state=resume). It never resumes another drain. Slurm\n\
gives no new job a drained node: --resume works in an allocation that held the nodes when\n\
they were drained (steps still run on them).")]
pub struct ValidateArgs {
    /// What to measure: nccl-tests on the GPUs, or each rail (data NIC) of each node with
    /// real MPI traffic (`gpudirect-mpi`, no GPU needed).
    #[arg(long, value_enum, default_value_t = Test::Nccl)]
    pub test: Test,

    /// With --test rails: the NICs to test, e.g. `eth1,eth2,eth3,eth4` (default: the data
    /// NICs of the --gpudirect profile).
    #[arg(long, value_name = "LIST")]
    pub rails: Option<String>,

    /// Run the nccl-tests validation once per rail (the --rails, or the data NICs of the
    /// --gpudirect profile), NCCL held to that rail's NIC; units are (node, rail).
    #[arg(long, conflicts_with = "gpus")]
    pub per_rail: bool,

    /// With --per-rail: the variable that holds NCCL to one NIC (default: the profile's
    /// variable set from {data_nics}, e.g. NCCL_GPUDIRECTTCPX_SOCKET_IFNAME; else NCCL_IB_HCA
    /// for RDMA devices, NCCL_SOCKET_IFNAME for interfaces).
    #[arg(long, value_name = "VAR", requires = "per_rail")]
    pub rail_variable: Option<String>,

    /// With --test rails: the message size of the bandwidth runs.
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = size_arg)]
    pub message_size: u64,

    /// With --test rails: the MPI program (default: gpudirect-mpi beside this executable).
    #[arg(long, env = "GPUDIRECT_MPI_PROGRAM", value_name = "PATH")]
    pub mpi_program: Option<PathBuf>,

    /// The admin config the --gpudirect profile (and with --test rails its data NICs) comes
    /// from.
    #[arg(
        long,
        env = "GPUDIRECT_CONFIG",
        default_value = super::profiles::DEFAULT_CONFIG
    )]
    pub config: PathBuf,

    /// Pairing: pairs, pairs-across, pairwise, groups:K, ring, all.
    #[arg(long, default_value = "pairs")]
    pub mode: String,

    /// A file of `NODE BLOCK` lines (rack/block of each node) for placement-aware pairing.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,

    /// Validate this host's GPUs instead of the allocation's nodes: their indices, e.g.
    /// `0-7` or `0,2,4,6`. No Slurm needed; -G and --gpus-per-process do not apply.
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,

    /// With --gpus: GPUs per unit (2 pairs up NVLink neighbours as one unit).
    #[arg(long, default_value_t = 1, requires = "gpus", value_name = "N")]
    pub gpus_per_unit: u32,

    /// The collective each pair runs.
    #[arg(short = 'c', long, default_value = "all_reduce")]
    pub collective: String,

    /// Smallest message size: bytes, or K/M/G/T (powers of 1024): 8, 64K, 1G, "1 GiB".
    #[arg(short = 'b', long, value_name = "SIZE", default_value = "8", value_parser = size_arg)]
    pub min_bytes: u64,

    /// Largest message size (the same forms as -b); busbw is judged here.
    #[arg(short = 'e', long, value_name = "SIZE", default_value = "1G", value_parser = size_arg)]
    pub max_bytes: u64,

    /// Size factor.
    #[arg(short = 'f', long, default_value_t = 2)]
    pub factor: u64,

    /// GPUs per node.
    #[arg(short = 'G', long, default_value_t = 1, conflicts_with = "gpus")]
    pub gpus_per_node: u32,

    /// GPUs each process drives (nccl-tests -g).
    #[arg(long, default_value_t = 1, conflicts_with = "gpus")]
    pub gpus_per_process: u32,

    /// Fixed busbw floor in GB/s at the largest size; without it, the median of recent good
    /// 2-node runs of this cluster in the history (measurements, not replays); with no
    /// history either, the median and MAD of the first round's own pairs (4 or more).
    #[arg(long, value_name = "GBPS")]
    pub floor: Option<f64>,

    /// How far below the baseline a pair may be before it is slow, percent (10 or 10%).
    /// Default 10 for nccl-tests (with no baseline, the smallest margin below the first
    /// round's median); 75 for --test rails, whose reference is the median of its first
    /// round.
    #[arg(long, value_name = "PCT", value_parser = percent_arg)]
    pub tolerance: Option<f64>,

    /// How many recent good runs the baseline is the median of.
    #[arg(long, default_value_t = 10)]
    pub baseline_runs: u32,

    /// The --gpudirect mode for every pair step.
    #[arg(long)]
    pub gpudirect: Option<String>,

    /// NCCL_ALGO for every nccl-tests run of the validation. Default Ring: which algorithm
    /// NCCL picks for two nodes changes with the size and the version (Tree at some sizes
    /// inflates a pair's busbw), so pairs are compared on one. `default` leaves the choice
    /// to NCCL; an NCCL_ALGO already in the environment is kept.
    #[arg(long, value_name = "ALGO", default_value = DEFAULT_ALGO)]
    pub algo: String,

    /// srun's --mpi plugin.
    #[arg(long, default_value = "pmix", conflicts_with = "gpus")]
    pub mpi: String,

    /// Folder with the nccl-tests binaries.
    #[arg(long, env = "NCCL_TESTS_DIR", value_name = "DIR")]
    pub nccl_tests_dir: Option<PathBuf>,

    /// Per-run time limit (90, 90s, 10m, 1h). Default 10m for nccl-tests, 1m for a rail
    /// pair (which takes seconds: a pair past it is failed as hung and re-tested).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub timeout: Option<Duration>,

    /// Cluster name recorded with each run.
    #[arg(long, env = "GPUDIRECT_CLUSTER")]
    pub cluster: Option<String>,

    /// Drain the nodes found slow or failed (`scontrol update ... state=drain`, reason
    /// `gpudirect: ...`), each confirmed by reading its state back; a node drained by an
    /// admin is left alone.
    #[arg(long)]
    pub drain: bool,

    /// Re-test each node found slow or failed N more times before --drain drains it, each
    /// time with a node that passed (one it has not met, where there is one); a node that
    /// passes a re-test is not drained. With --resume: up to N re-tests of each drained node.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub retries: usize,

    /// Re-test the allocation's nodes drained by gpudirect (reason `gpudirect: ...`), each
    /// with a node that is not drained, and return to service those judged healthy that
    /// pass. The whole allocation is validated; other drains are never resumed.
    #[arg(long)]
    pub resume: bool,

    /// With --drain: a command run after each node is newly drained, with the path of a JSON
    /// file of the evidence as its last argument (and in GPUDIRECT_EVIDENCE), e.g. to file a
    /// repair request. Split on whitespace, not run by a shell; a failure is reported, the
    /// drain stays.
    #[arg(long, value_name = "CMD", requires = "drain")]
    pub on_drain: Option<String>,

    /// Also write the HTML report (heat map, busbw) to this folder.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// NCCL_ALGO validate's nccl-tests runs get unless told otherwise (`--algo`).
pub const DEFAULT_ALGO: &str = "Ring";

/// The NCCL_ALGO validate sets, if any, and the line that says so: `--algo default` sets
/// none; an NCCL_ALGO in validate's own environment reaches the runs anyway and is kept.
/// Pure.
fn pinned_algorithm(algo: &str, from_env: Option<&str>) -> (Option<String>, String) {
    match (algo, from_env) {
        (_, Some(user)) => (
            None,
            format!("NCCL_ALGO={user} from the environment is kept for every run"),
        ),
        ("default", None) => (
            None,
            "NCCL chooses the algorithm (--algo default): two-node figures may differ by it".into(),
        ),
        (algo, None) => (
            Some(algo.to_string()),
            format!(
                "every run with NCCL_ALGO={algo}, so that pairs are compared on one algorithm \
                 (--algo default lets NCCL choose)"
            ),
        ),
    }
}

/// What validate pairs.
enum Units {
    /// The allocation's nodes; each group runs as one srun step.
    Nodes,
    /// This host's GPU groups by unit name (CUDA_VISIBLE_DEVICES entries); each group runs
    /// as one local process.
    Gpus(BTreeMap<String, Vec<String>>),
}

impl Units {
    fn from_args(args: &ValidateArgs) -> Result<(Units, Vec<String>)> {
        let Some(list) = &args.gpus else {
            let Some(list) = env_var("SLURM_JOB_NODELIST") else {
                bail!("gpudirect validate runs over an allocation: use it inside salloc or sbatch (or pass --gpus to validate this host's GPUs)");
            };
            let nodes = gpudirect_core::hostlist::expand(&list)
                .with_context(|| format!("SLURM_JOB_NODELIST `{list}` is not a hostlist"))?;
            if nodes.len() < 2 {
                bail!(
                    "validation pairs nodes: the allocation has {} node(s), it needs 2 or more",
                    nodes.len()
                );
            }
            return Ok((Units::Nodes, nodes));
        };
        if args.drain || args.resume {
            bail!("--drain drains Slurm nodes and --resume returns them; with --gpus the units are GPUs of this host");
        }
        if args.gpudirect.is_some() {
            bail!(
                "--gpudirect applies to srun steps; with --gpus the pairs run here without Slurm"
            );
        }
        let visible = visible_gpus();
        if let Some((_, source)) = visible.as_ref().filter(|(_, s)| s.starts_with("CUDA_")) {
            eprintln!("gpudirect validate: {source} is set: --gpus {list} indexes it");
        }
        let units = gpu_units(list, args.gpus_per_unit, visible.as_ref())?;
        if units.len() < 2 {
            bail!(
                "validation pairs units: --gpus {list} makes {} unit(s) of {} GPU(s), it needs 2 or more",
                units.len(),
                args.gpus_per_unit
            );
        }
        let names = units.iter().map(|(name, _)| name.clone()).collect();
        Ok((Units::Gpus(units.into_iter().collect()), names))
    }
}

/// A unit: its name and the CUDA_VISIBLE_DEVICES entries of its GPUs.
type GpuUnit = (String, Vec<String>);

/// Splits the GPUs of `list`, in the order written, into units of `per_unit`, named by
/// their indices: `gpu3`, or `gpu2-3` (consecutive) and `gpu0.4` (not) for several.
/// `visible` is what the indices refer to ([`visible_gpus`]).
fn gpu_units(
    list: &str,
    per_unit: u32,
    visible: Option<&(Vec<String>, String)>,
) -> Result<Vec<GpuUnit>> {
    let ids = parse_gpu_list(list)?;
    if per_unit == 0 || !ids.len().is_multiple_of(per_unit as usize) {
        bail!(
            "--gpus {list} names {} GPU(s), which do not split into units of {per_unit} (--gpus-per-unit)",
            ids.len()
        );
    }
    let device = |id: u32| gpu_device(list, id, visible);
    ids.chunks(per_unit as usize)
        .map(|chunk| {
            let name = match chunk {
                [one] => format!("gpu{one}"),
                [first, .., last] if chunk.windows(2).all(|w| w[1] == w[0] + 1) => {
                    format!("gpu{first}-{last}")
                }
                _ => format!(
                    "gpu{}",
                    chunk
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(".")
                ),
            };
            let devices = chunk.iter().map(|&id| device(id)).collect::<Result<_>>()?;
            Ok((name, devices))
        })
        .collect()
}

/// What every round of an nccl-tests validation shares.
struct RoundContext<'a> {
    args: &'a ValidateArgs,
    units: &'a Units,
    launch: &'a LaunchOptions,
    matrix: &'a Matrix,
    sizes: &'a [u64],
    cluster: &'a Option<String>,
    binary: &'a std::path::Path,
    max: u64,
    /// The node's line rate (GB/s) from the --gpudirect profile, recorded with each run.
    line_rate_gbps: Option<f64>,
}

/// Runs `validation`'s rounds to the end with `variant` (its environment reaches every
/// pair), recording every pair run; `cells_started` numbers the pairs' -J reports across
/// calls.
fn run_rounds(
    rc: &RoundContext,
    validation: &mut Validation,
    variant: &Variant,
    history: &mut History,
    run_ids: &mut Vec<i64>,
    pairs: &mut Vec<PairRun>,
    cells_started: &mut usize,
) -> Result<()> {
    let RoundContext {
        args,
        units,
        launch,
        matrix,
        sizes,
        cluster,
        binary,
        max,
        line_rate_gbps,
    } = *rc;
    while let Some(round) = validation.next_round() {
        if INTERRUPTED.load(Ordering::SeqCst) {
            bail!(
                "interrupted: {} round(s) were recorded",
                validation.rounds_done()
            );
        }
        let groups = round.named_groups(validation.nodes());
        eprintln!(
            "gpudirect validate: round {} ({:?}): {} group(s) at once",
            round.index + 1,
            round.stage,
            groups.len()
        );
        // One job step per group, all at once; each thread runs one and returns its result.
        let jobs = groups
            .iter()
            .map(|group| {
                let group: Vec<String> = group.iter().map(|s| s.to_string()).collect();
                let mut cell = Cell {
                    index: {
                        *cells_started += 1;
                        *cells_started
                    },
                    collective: args.collective.clone(),
                    nodes: group.len() as u32,
                    gpus_per_node: args.gpus_per_node,
                    variant: variant.clone(),
                };
                let mut opts = LaunchOptions {
                    nodes: group.clone(),
                    ..launch.clone()
                };
                if let Units::Gpus(gpus) = &units {
                    // One process here drives every GPU of the group.
                    let ids: Vec<String> = group
                        .iter()
                        .flat_map(|unit| gpus.get(unit).into_iter().flatten())
                        .cloned()
                        .collect();
                    cell.nodes = 1;
                    cell.gpus_per_node = ids.len() as u32;
                    cell.variant
                        .env
                        .insert("CUDA_VISIBLE_DEVICES".into(), ids.join(","));
                    opts.launcher = Launcher::Local;
                    opts.nodes = Vec::new();
                }
                prepare(&cell, matrix, &opts, true).map(|p| (group, cell, p.job, p.json_path))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(group, cell, job, json_path)| {
                std::thread::spawn(move || {
                    let started = now_unix();
                    let finished = runner::run(&job, &INTERRUPTED);
                    (group, cell, job, json_path, started, finished)
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        // (group, its history record, busbw, outcome) of each run, stored once judged.
        let mut finished_runs = Vec::new();
        for handle in handles {
            let Ok((group, cell, job, json_path, started, finished)) = handle.join() else {
                bail!("a pair's runner thread panicked");
            };
            let finished = finished?;
            let expect = Expectations {
                transport: None,
                nodes: cell.nodes,
                sizes: sizes.to_vec(),
                nics: Vec::new(),
            };
            let context = RunContext {
                started_at: Some(started),
                finished_at: Some(now_unix()),
                cluster: cluster.clone(),
                job_id: env_var("SLURM_JOB_ID"),
                nodes: group.clone(),
                gpus_per_node: Some(match units {
                    Units::Nodes => args.gpus_per_node,
                    Units::Gpus(_) => args.gpus_per_unit,
                }),
                launcher: match units {
                    Units::Nodes => LaunchKind::Srun,
                    Units::Gpus(_) => LaunchKind::Local,
                },
                command_line: Some(job.command_line()),
                binary_path: Some(binary.display().to_string()),
                variant: Some(variant.name.clone()),
                // What the pair ran with (CUDA_VISIBLE_DEVICES with --gpus).
                env: cell.variant.env.clone(),
                line_rate_gbps,
                ..RunContext::default()
            };
            let Evaluated {
                parsed,
                verdict,
                record,
            } = cell::evaluate_finished(
                &finished,
                json_path.as_deref(),
                &args.collective,
                expect,
                context,
            );
            // The pair's figure: the busbw of the run, by the one rule every command uses.
            let busbw = parsed.busbw_at_max_size();
            let outcome = match (verdict.status, busbw) {
                (RunStatus::Ok, Some(b)) => PairOutcome::Busbw(b),
                _ => PairOutcome::Failed(
                    verdict
                        .findings
                        .first()
                        .map(|f| f.message.clone())
                        .unwrap_or_else(|| "no busbw at the largest size".into()),
                ),
            };
            finished_runs.push((group, record, busbw, outcome.clone()));
            outcomes.push(outcome);
        }
        // Recorded before the runs are classified: without a baseline, the first round
        // sets the line the runs are judged by (and they are stored with that verdict).
        let recorded = validation.record(&round, outcomes);
        let threshold = validation.threshold().cloned();
        if let (Ok(()), 0, Some(t @ Threshold::RoundMedian { .. })) =
            (&recorded, round.index, &threshold)
        {
            eprintln!(
                "gpudirect validate: threshold {:.2} GB/s ({})",
                t.limit(),
                t.explain()
            );
        }
        let retest = round.stage == Stage::Retest;
        for (group, mut record, busbw, outcome) in finished_runs {
            let class = threshold
                .as_ref()
                .map(|t| format!("{:?}", t.classify(&outcome)).to_lowercase());
            let role = match retest {
                true => format!("retest, round {}", round.index + 1),
                false => format!("round {}", round.index + 1),
            };
            for node in &group {
                for partner in group.iter().filter(|p| *p != node) {
                    record.node_results.push(NewNodeResult {
                        node: node.clone(),
                        role: Some(role.clone()),
                        partner: Some(partner.clone()),
                        size_bytes: Some(max),
                        busbw,
                        verdict: class.clone(),
                    });
                }
            }
            let run_id = match history.import_run(&record, true) {
                Ok(o) => {
                    run_ids.push(o.run_id());
                    Some(o.run_id())
                }
                Err(e) => {
                    eprintln!(
                        "gpudirect validate: could not record {}: {e}",
                        group.join(",")
                    );
                    None
                }
            };
            pairs.push(PairRun {
                round: round.index + 1,
                retest,
                nodes: group.clone(),
                busbw,
                verdict: class.clone(),
                run_id,
            });
            eprintln!(
                "gpudirect validate:   {}: {}",
                group.join("+"),
                match (&outcome, &class) {
                    (PairOutcome::Busbw(b), class) => format!(
                        "{b:.2} GB/s{} ({})",
                        line_share(Some(*b), line_rate_gbps)
                            .map(|share| format!(", {share} of line rate"))
                            .unwrap_or_default(),
                        class.as_deref().unwrap_or("not judged")
                    ),
                    (PairOutcome::Failed(why), _) => format!("failed: {why}"),
                }
            );
        }
        recorded?;
    }
    Ok(())
}

/// The node's line rate (GB/s) from the profile `--gpudirect` names, when the config
/// declares one; `None` otherwise (no mode, `none`/`auto`, an unreadable config).
fn profile_line_rate(args: &ValidateArgs) -> Option<f64> {
    let mode = args
        .gpudirect
        .as_deref()
        .filter(|m| !matches!(*m, "none" | "auto"))?;
    let config = load_config(&args.config, Ownership::Any).ok()?;
    config.profiles.get(mode)?.node_line_rate_gbps()
}

/// The health exit status, raised to 2 (failed) when a drain, a resume or an `--on-drain`
/// command did not work (a validation that could not run stays 3). Pure.
fn exit_status(status: Health, actions_failed: bool) -> ExitStatus {
    match (status, actions_failed) {
        (Health::CouldNotRun, _) => ExitStatus::CouldNotRun,
        (Health::Failed, _) | (_, true) => ExitStatus::Failed,
        (Health::Healthy, false) => ExitStatus::Ok,
        (Health::Degraded, false) => ExitStatus::Problem,
    }
}

/// The drained nodes of the allocation (`--resume`), read before anything runs, and said.
fn drained_nodes(nodes: &[String]) -> Result<Vec<(String, gpudirect::slurm::NodeState)>> {
    let mut drained = Vec::new();
    for node in nodes {
        let state = gpudirect::slurm::node_state(node)
            .with_context(|| format!("--resume: cannot read the state of {node}"))?;
        if state.drained() {
            let reason = state.reason.as_deref().unwrap_or("(no reason)");
            eprintln!(
                "gpudirect validate: --resume: {node} is drained (\"{reason}\"): {}",
                if gpudirect::drain::is_ours(state.reason.as_deref()) {
                    "by gpudirect, re-tested with a node that is not drained"
                } else {
                    "by an admin, never resumed here and never a partner in a re-test"
                }
            );
            drained.push((node.clone(), state));
        }
    }
    if drained.is_empty() {
        eprintln!("gpudirect validate: --resume: no node of the allocation is drained");
    }
    Ok(drained)
}

/// The HTML report of a validation's runs in `dir`. The verdict stands whatever happens to
/// the report: a failure is said, not returned.
fn write_validation_report(
    history: &History,
    run_ids: &[i64],
    dir: &std::path::Path,
    notes: &[String],
) {
    let options = ReportOptions {
        selection: Selection::Runs(run_ids.to_vec()),
        ..ReportOptions::default()
    };
    let written = gather(history, &options).and_then(|mut data| {
        // What the pairs were judged against, and why the baseline may mislead, at the top.
        data.notes.splice(0..0, notes.iter().cloned());
        write_report(&data, dir, ReportFormat::Both)
    });
    match written {
        Ok(files) => eprintln!(
            "gpudirect validate: report written to {}",
            files.html.display()
        ),
        Err(e) => eprintln!("gpudirect validate: no report: {e}"),
    }
}

/// `gpudirect validate`. Returns the health exit status.
pub fn run(args: &ValidateArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let (units, nodes) = Units::from_args(args)?;
    if let Some(dir) = &args.report {
        // Found out now, before any pair runs, not after the verdict.
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--report {}: cannot create the folder", dir.display()))?;
    }
    if args.per_rail && args.test == Test::Rails {
        bail!("--per-rail runs nccl-tests once per rail; --test rails already measures each rail (with MPI): use one of them");
    }
    if args.retries > 0 && !args.drain && !args.resume {
        bail!("--retries N re-tests nodes before --drain drains them (or before --resume returns them): add --drain or --resume");
    }
    if (args.retries > 0 || args.resume) && (args.per_rail || args.test == Test::Rails) {
        bail!("--retries and --resume re-test whole nodes with nccl-tests; they do not apply to --per-rail or --test rails yet");
    }
    if args.test == Test::Rails {
        if !matches!(units, Units::Nodes) {
            bail!("--test rails measures the NICs of Slurm nodes; --gpus validates this host's GPUs with nccl-tests");
        }
        return rails::run(args, ctx, nodes);
    }
    let mode: Mode = args
        .mode
        .parse()
        .map_err(|e| anyhow::anyhow!("--mode: {e}"))?;
    let Some(dir) = args.nccl_tests_dir.clone() else {
        bail!("where are the nccl-tests binaries? pass --nccl-tests-dir DIR or set NCCL_TESTS_DIR");
    };
    let binary = find_binary(&dir, &args.collective)?;
    let (min, max) = (args.min_bytes, args.max_bytes);
    let timeout = args.timeout.unwrap_or(DEFAULT_TIMEOUT);
    // GPU units are recorded as the nodes of runs on a "cluster" named after this host
    // (even inside an allocation), so `gpudirect history --node gpu3` and the baseline
    // work per host as they do per node, never mixed with another host's gpu3.
    let cluster = match units {
        Units::Nodes => args
            .cluster
            .clone()
            .or_else(|| env_var("SLURM_CLUSTER_NAME")),
        Units::Gpus(_) => Some(args.cluster.clone().unwrap_or_else(short_hostname)),
    };

    let db = ctx.db_path()?;
    let mut history = History::open(&db)?;
    let tolerance = args.tolerance.unwrap_or(DEFAULT_TOLERANCE) / 100.0;
    // The runs the baseline is made of: their versions and algorithms are compared with
    // the pairs' once these ran.
    let mut baseline_runs: Vec<i64> = Vec::new();
    let reference: Reference = match args.floor {
        Some(floor) => Threshold::floor(floor)?.into(),
        None => {
            // Of 2-node (2-unit) runs: what a pair measures, and what every round but a
            // `groups`/`all` screen runs.
            let baseline = history.baseline(
                cluster.as_deref(),
                &args.collective,
                2,
                max,
                args.baseline_runs,
            )?;
            match baseline {
                Some(b) => {
                    baseline_runs = b.samples.iter().map(|(id, _)| *id).collect();
                    Threshold::baseline(b.median_busbw, tolerance)?.into()
                }
                None => {
                    eprintln!(
                        "gpudirect validate: no baseline for {} at {} in {}: judging the units against their own first round (its median and MAD); pass --floor GBPS, or record good runs, to judge against a fixed line",
                        args.collective,
                        format_size(max),
                        db.display()
                    );
                    RoundRule::new(tolerance).into()
                }
            }
        }
    };
    let validation = match &args.topology {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read the topology file {}", file.display()))?;
            let blocks: BTreeMap<String, String> =
                parse_topology(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            Validation::with_blocks(nodes.clone(), mode, reference, &blocks)?
        }
        None => Validation::new(nodes.clone(), mode, reference)?,
    };
    // --resume: the drained nodes, read before anything runs.
    let drained = match args.resume {
        true => drained_nodes(&nodes)?,
        false => Vec::new(),
    };
    let index = |node: &String| nodes.iter().position(|n| n == node);
    let mut validation = validation.with_retests(Retests {
        judged: if args.drain { args.retries } else { 0 },
        given: drained
            .iter()
            .filter(|(_, s)| gpudirect::drain::is_ours(s.reason.as_deref()))
            .filter_map(|(n, _)| index(n))
            .collect(),
        given_times: args.retries.max(1),
        not_partners: drained.iter().filter_map(|(n, _)| index(n)).collect(),
    });

    // With --per-rail: the rails and the variable, found out before anything runs.
    let per_rail = match args.per_rail {
        true => {
            let plan = rails::rail_plan(args, &nodes[0])?;
            Some((plan.variable, plan.rails))
        }
        false => None,
    };
    runner::install_interrupt_handler();
    let sizes = expected_sizes(min, max, Some(args.factor), None);
    // Each group is one cell of a one-cell matrix, launched like `gpudirect run` launches.
    let mut variant = Variant {
        name: format!("validate:{}", args.mode),
        gpudirect: args.gpudirect.clone(),
        env: BTreeMap::new(),
    };
    let (algo, said) = pinned_algorithm(&args.algo, env_var("NCCL_ALGO").as_deref());
    eprintln!("gpudirect validate: {said}");
    if let Some(algo) = algo {
        variant.env.insert("NCCL_ALGO".into(), algo);
    }
    let line_rate_gbps = profile_line_rate(args);
    let matrix = Matrix {
        collectives: vec![args.collective.clone()],
        nodes: vec![2],
        gpus_per_node: vec![args.gpus_per_node],
        min_bytes: min,
        max_bytes: max,
        factor: args.factor,
        timeout,
        extra_args: Vec::new(),
        variants: vec![variant.clone()],
    };
    // SAFETY: geteuid has no preconditions.
    let as_root = nix::unistd::geteuid().is_root();
    // The pairs' -J reports; removed when validate ends, however it ends.
    let work = tempfile::Builder::new()
        .prefix("gpudirect-validate-")
        .tempdir()
        .context("cannot create a folder for the pairs' JSON reports")?;
    let work_dir = work.path().to_path_buf();
    let launch = LaunchOptions {
        launcher: Launcher::Srun,
        nccl_tests_dir: dir.clone(),
        mpi: Some(args.mpi.clone()),
        nodes: Vec::new(),
        work_dir: Some(work_dir.clone()),
        timeout,
        grace: Duration::from_secs(10),
        as_root,
        gpus_per_process: args.gpus_per_process,
        exact: true,
    };
    let mut run_ids = Vec::new();
    let mut pairs = Vec::new();
    // Each pair's -J report gets its own file: cells are numbered across rounds.
    let mut cells_started = 0usize;
    let rounds = RoundContext {
        args,
        units: &units,
        launch: &launch,
        matrix: &matrix,
        sizes: &sizes,
        cluster: &cluster,
        binary: &binary,
        max,
        line_rate_gbps,
    };
    if let Some((variable, rails)) = &per_rail {
        // One validation per rail, NCCL held to that NIC through the profile's variable.
        let mut validations = Vec::new();
        for rail in rails {
            let mut on_rail = validation.clone();
            let mut variant = variant.clone();
            variant.name = format!("{}:rail:{rail}", variant.name);
            variant.env.insert(variable.clone(), rail.clone());
            eprintln!("gpudirect validate: rail {rail} ({variable}={rail})");
            run_rounds(
                &rounds,
                &mut on_rail,
                &variant,
                &mut history,
                &mut run_ids,
                &mut pairs,
                &mut cells_started,
            )?;
            validations.push(on_rail);
        }
        let rounds = validations.iter().map(Validation::rounds_done).sum();
        return rails::conclude(
            args,
            rails::Verdicts {
                test: "nccl-per-rail",
                history: &history,
                db: &db,
                nodes: &nodes,
                rails,
                validations: &validations,
                sent: &BTreeMap::new(),
                run_ids: &run_ids,
                size_bytes: max,
                rounds,
            },
        );
    }
    run_rounds(
        &rounds,
        &mut validation,
        &variant,
        &mut history,
        &mut run_ids,
        &mut pairs,
        &mut cells_started,
    )?;
    let report = validation.report();
    let status = health(&report);
    // Drains, then returns, before the report is printed: their outcomes are part of it.
    let source = EvidenceSource {
        on_drain: args.on_drain.as_deref(),
        history: &history,
        cluster: cluster.as_deref(),
        collective: Some(&args.collective),
        size_bytes: Some(max),
        pairs: &pairs,
    };
    let drain_actions = match args.drain {
        true => drains::apply_drains(&drains::drain_plan(&report), &source),
        false => Vec::new(),
    };
    let resume_actions = match args.resume {
        true => drains::apply_resumes(&drained, &drains::resume_plan(&report, &drained)),
        false => Vec::new(),
    };
    let actions_failed = drains::any_error(&drain_actions) || drains::any_error(&resume_actions);
    let exit = exit_status(status, actions_failed);
    let notes = match run_ids.first() {
        Some(first) if !baseline_runs.is_empty() => {
            let setups = baseline_runs
                .iter()
                .map(|id| Ok((*id, RunSetup::of(&history.get_run(*id)?))))
                .collect::<Result<Vec<_>>>()?;
            let pair = RunSetup::of(&history.get_run(*first)?);
            setup_differences(&setups, (*first, &pair))
        }
        _ => Vec::new(),
    };
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        if let Some(object) = value.as_object_mut() {
            object.insert("notes".into(), serde_json::to_value(&notes)?);
            object.insert(
                "line_rate_gbps".into(),
                serde_json::to_value(line_rate_gbps)?,
            );
            if args.drain {
                object.insert("drains".into(), serde_json::to_value(&drain_actions)?);
            }
            if args.resume {
                object.insert("resumes".into(), serde_json::to_value(&resume_actions)?);
            }
        }
        emit_json(&value)?;
    } else {
        outln!(
            "validation: {} {}, mode {}, {} round(s), {}",
            report.nodes.len(),
            match units {
                Units::Nodes => "nodes".to_string(),
                Units::Gpus(_) => format!("GPU units of {}", short_hostname()),
            },
            report.mode,
            report.rounds,
            match validation.threshold() {
                Some(t) => format!(
                    "threshold {:.2} GB/s at {} ({}){}",
                    t.limit(),
                    format_size(max),
                    t.explain(),
                    line_share(Some(t.limit()), line_rate_gbps)
                        .map(|share| format!(", {share} of the node's line rate"))
                        .unwrap_or_default()
                ),
                None => "no threshold: nothing was judged".to_string(),
            }
        )?;
        for n in &report.nodes {
            outln!(
                "  {:<12} {:<24} {}",
                n.node,
                n.verdict.to_string(),
                n.evidence.join("; ")
            )?;
        }
        for l in &report.links {
            outln!(
                "  link {}-{}: slow in {} runs, {:.2} GB/s",
                l.names[0],
                l.names[1],
                l.slow_runs,
                l.median_busbw
            )?;
        }
        for r in &report.retests {
            let runs: Vec<String> = r
                .runs
                .iter()
                .map(|run| match &run.outcome {
                    PairOutcome::Busbw(b) => format!(
                        "with {} {b:.2} GB/s ({})",
                        run.partner,
                        format!("{:?}", run.class).to_lowercase()
                    ),
                    PairOutcome::Failed(why) => format!("with {} failed: {why}", run.partner),
                })
                .collect();
            outln!(
                "  re-test {:<8} {}: {}",
                r.node,
                r.summary(),
                if runs.is_empty() {
                    "no run".to_string()
                } else {
                    runs.join("; ")
                }
            )?;
        }
        for a in drain_actions.iter().chain(&resume_actions) {
            outln!("  {}", a.message)?;
            if let Some(e) = a.error.as_ref().filter(|_| a.outcome != "error") {
                outln!("  {e}")?;
            }
        }
        for note in &notes {
            outln!("note: {note}")?;
        }
        outln!(
            "verdict: {status:?} (exit {}{}); runs {:?} in {}",
            match exit {
                ExitStatus::Ok => 0,
                ExitStatus::Problem => 1,
                ExitStatus::Failed => 2,
                ExitStatus::CouldNotRun => 3,
                ExitStatus::Interrupted => 130,
            },
            if actions_failed {
                ": a drain, a resume or --on-drain did not work"
            } else {
                ""
            },
            run_ids,
            db.display()
        )?;
    }
    if let Some(dir) = &args.report {
        let mut report_notes: Vec<String> = validation
            .threshold()
            .map(|t| {
                format!(
                    "validation threshold {:.2} GB/s at {} ({})",
                    t.limit(),
                    format_size(max),
                    t.explain()
                )
            })
            .into_iter()
            .collect();
        report_notes.extend(notes.iter().cloned());
        write_validation_report(&history, &run_ids, dir, &report_notes);
    }
    Ok(exit)
}
