//! `gpudirect validate`: is every node and link as fast as it should be, and if not, which?
//! Rounds of disjoint pairs (or groups) run at the same time, as job steps over the
//! allocation's nodes or, with `--gpus`, as local processes over this host's GPU groups;
//! the pure planner in [`gpudirect::validate::judging`] picks each next round from the results so far.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use gpudirect::checks::expected_sizes;
use gpudirect::history::History;
use gpudirect::launch::{find_binary, LaunchOptions, Launcher};
use gpudirect::matrix::{Matrix, Variant};
use gpudirect::report::{gather, write_report, ReportFormat, ReportOptions, Selection};
use gpudirect::runner;
use gpudirect::units::{duration_arg, nccl_size as format_size, percent_arg, size_arg};
use gpudirect::validate::judging::{
    health, Health, Outcome as PairOutcome, Reference, Retests, Threshold, Validation,
};
use gpudirect::validate::pairing::{parse_topology, Mode};

use gpudirect::slurm::{env_set, env_var, Allocation};
use gpudirect_core::system::short_hostname;

mod drains;
mod rails;
mod wiring;

use drains::EvidenceSource;
use gpudirect::drain::Sanction;
use gpudirect::validate::actions::{self, NodeAction, PairRun};
use gpudirect::validate::pairs::{
    pair_reference, pinned_algorithm, run_rounds, Recorded, ReferenceRequest, RoundContext, Units,
    DEFAULT_ALGO,
};

use super::args::{DrainArgs, ProfileArgs, RailPairArgs, StartupArgs};
use super::{Ctx, ExitStatus};
use gpudirect::noteln;
use gpudirect::outln;
use gpudirect::output::{emit_json, line_share};
use gpudirect::setup::{setup_differences, RunSetup};
use gpudirect::validate::gpus::{gpu_units, visible_gpus};

/// How far below the baseline an nccl-tests pair may be, percent, by default: the
/// planner's own default (the one the simulator measured), as a percentage.
const DEFAULT_TOLERANCE: f64 = gpudirect::validate::judging::DEFAULT_TOLERANCE * 100.0;

/// An nccl-tests pair's time limit by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// What validate measures between the units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Test {
    /// nccl-tests between the nodes' GPUs (or this host's, with --gpus).
    Nccl,
    /// Host-memory traffic over MPI, one data NIC (rail) at a time: units are (node, rail).
    Rails,
    /// No traffic: each node's GPU-to-NIC map and its NICs' subnets; names the nodes where
    /// GPU i is not on the rail (subnet) the other nodes have it on.
    Wiring,
}

/// Arguments of `gpudirect validate`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    salloc -N16 gpudirect validate --floor 60 -e 1G          # pairs, fixed busbw floor\n  \
    gpudirect validate --tolerance 10 --report validate/     # baseline from the history\n  \
    gpudirect validate --mode pairwise --drain               # every pair; drain bad nodes\n  \
    gpudirect validate --floor 60 --drain --retries 2        # re-test twice before draining\n  \
    gpudirect validate --floor 60 --resume                   # return our drained nodes that pass\n  \
    gpudirect validate --gpus 0-7 --floor 300 -e 8G          # this host's GPUs, no Slurm\n  \
    gpudirect validate --test wiring                         # GPU i on rail i on every node?\n\n\
Round 1 runs disjoint pairs at the same time (one job step each); a node is suspect when\n\
its pairs are slow, and is re-paired with nodes that passed (round 2) and confirmed\n\
(round 3), separating a slow node from a bad link. Every pair run goes into the history\n\
with its nodes. With --gpus the units are GPU groups of this host (gpu0, gpu1, ... or\n\
gpu0-1, ... with --gpus-per-unit 2) and each pair is one local nccl-tests process driving\n\
both groups' GPUs (CUDA_VISIBLE_DEVICES, -g). Exit status: 0 healthy, 1 degraded (slow\n\
nodes or links), 2 failed (runs failed; or a drain, a resume or the --on-drain command\n\
did not work), 3 could not run (nothing measured, bad options).\n\n\
A pair that shows no sign of NCCL by --startup-timeout (60s) is a launch that hung, not a\n\
slow or failed node: it is run once more as a step of its own, and if it hangs again its\n\
nodes get `could not start` for it (a node with no other run: verdict `could not start`,\n\
never drained; its partners are re-paired and judged on their other runs). Check srun\n\
--mpi=pmix and that Open MPI and PMIx use the control NIC, then validate again. The pairs\n\
themselves set OMPI_MCA_btl_tcp_if_include and OMPI_MCA_oob_tcp_if_include to the\n\
profile's control NIC (where every node names it alike and you set neither they nor\n\
their _exclude twins): with a data NIC down, Open MPI's own TCP otherwise crosses the\n\
rails, and steps hung before NCCL on the lent GPU host. --test rails keeps the out-of-band\n\
channel there too (OMPI_MCA_oob_tcp_if_include), its data on the rail under test.\n\n\
--test wiring moves no data: one task per node reports the NIC its profile gives each GPU\n\
(the plugin's own rules, sysfs locality included; without a profile, the PCI tree's map)\n\
and each of those NICs' IPv4 subnets (/proc/net/route). GPU i's rail is the subnet most\n\
nodes have it on; a node where it is elsewhere, or where a NIC has another NIC's subnet\n\
(renamed, or cabled to another rail's switch), is named, and --drain drains it. Exit 1\n\
when a node is named, 2 when one did not answer. --reports FILE judges saved reports.\n\n\
Drains: --drain sets reasons that start with `gpudirect validate:` and reads the state back; a node\n\
drained by an admin for another reason is left alone. --retries N re-tests each node found\n\
slow or failed N more times, each with a node that passed (a new partner where there is\n\
one), and drains only a node bad in every re-test. --resume validates the whole allocation\n\
as usual, and re-tests each node drained with the `gpudirect validate:` tag (or the older `gpudirect:`) with a node that is not\n\
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
    /// NICs of the --gpudirect profile, else of the profile the nodes' node set gives them).
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

    /// How each rail pair runs.
    #[command(flatten)]
    pub rail_pairs: RailPairArgs,

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
    /// pair runs of this cluster in the history with the same variant (`validate:MODE`) and
    /// GPU count (measurements, not replays); with no history either, the median and MAD of
    /// the first round's own pairs (4 or more).
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

    /// The admin config and the --gpudirect mode.
    #[command(flatten)]
    pub profile: ProfileArgs,

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

    /// How long an nccl-tests pair may take to reach NCCL.
    #[command(flatten)]
    pub startup: StartupArgs,

    /// Cluster name recorded with each run.
    #[arg(long, env = "GPUDIRECT_CLUSTER")]
    pub cluster: Option<String>,

    /// Drains of the nodes found slow or failed.
    #[command(flatten)]
    pub drains: DrainArgs,

    /// Re-test the allocation's nodes drained by gpudirect validate (reason `gpudirect validate: ...`, or the older `gpudirect: ...`), each
    /// with a node that is not drained, and return to service those judged healthy that
    /// pass. The whole allocation is validated; other drains are never resumed.
    #[arg(long)]
    pub resume: bool,

    /// Also write the HTML report (heat map, busbw) to this folder.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,

    /// Also put each node's verdict in its Extra in Slurm (`gpudirect_validate_ok`,
    /// `gpudirect_ok`, `gpudirect_busbw`, `gpudirect_at`; the admin's own keys are kept):
    /// 0 for a node --drain would drain, 1 for a healthy one. Jobs then avoid bad nodes with
    /// `sbatch --extra "gpudirect_ok=1"` (SchedulerParameters=extra_constraints; not in
    /// Slurm 22.05). Run as root or SlurmUser.
    #[arg(long)]
    pub extra: bool,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,

    /// With --test wiring: judge the node reports in FILE (lines that `srun --label
    /// --ntasks-per-node=1 gpudirect agent wiring` printed, or one such line per node)
    /// instead of asking the allocation's nodes.
    #[arg(long, value_name = "FILE")]
    pub reports: Option<PathBuf>,
}

/// The variant validate's pair runs are recorded (and their baseline found) under.
fn variant_name(args: &ValidateArgs) -> String {
    format!("validate:{}", args.mode)
}

/// What validate pairs: the allocation's nodes, or with `--gpus` this host's GPU units.
fn units_from_args(args: &ValidateArgs) -> Result<(Units, Vec<String>)> {
    let Some(list) = &args.gpus else {
        let nodes = Allocation::from_env()?
            .require_nodes(
                2,
                "gpudirect validate pairs the nodes of an allocation",
                Some("pass --gpus to validate this host's GPUs"),
            )?
            .to_vec();
        return Ok((Units::Nodes, nodes));
    };
    if args.drains.acts() || args.resume || args.extra {
        bail!("--drain drains Slurm nodes, --quarantine reserves them, --resume returns them and --extra marks them; with --gpus the units are GPUs of this host");
    }
    if args.profile.gpudirect.is_some() {
        bail!("--gpudirect applies to srun steps; with --gpus the pairs run here without Slurm");
    }
    let visible = visible_gpus();
    if let Some((_, source)) = visible.as_ref().filter(|(_, s)| s.starts_with("CUDA_")) {
        noteln!("gpudirect validate: {source} is set: --gpus {list} indexes it");
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

/// The node's line rate (GB/s) from the profile `--gpudirect` gives the first node (by
/// name, or with `auto` its node set's), when the config declares one; `None` otherwise
/// (no mode, `none`, a config that cannot say, which is said).
fn profile_line_rate(args: &ValidateArgs, first: Option<&str>) -> Option<f64> {
    match args.profile.choice()? {
        Ok(choice) => choice.line_rate(first),
        Err(e) => {
            noteln!("gpudirect validate: no line rate to judge against: {e}");
            None
        }
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
            noteln!(
                "gpudirect validate: --resume: {node} is drained (\"{reason}\"): {}",
                if gpudirect::drain::is_ours(
                    gpudirect::drain::Tool::Validate,
                    state.reason.as_deref()
                ) {
                    "by gpudirect, re-tested with a node that is not drained"
                } else {
                    "by an admin, never resumed here and never a partner in a re-test"
                }
            );
            drained.push((node.clone(), state));
        }
    }
    if drained.is_empty() {
        noteln!("gpudirect validate: --resume: no node of the allocation is drained");
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
        Ok(files) => noteln!(
            "gpudirect validate: report written to {}",
            files.html.display()
        ),
        Err(e) => noteln!("gpudirect validate: no report: {e}"),
    }
}

/// The flag combinations validate refuses, before anything runs.
fn check_flags(args: &ValidateArgs, units: &Units) -> Result<()> {
    if args.per_rail && args.test == Test::Rails {
        bail!("--per-rail runs nccl-tests once per rail; --test rails already measures each rail (with MPI): use one of them");
    }
    if args.drains.retries > 0 && !args.drains.acts() && !args.resume {
        bail!("--retries N re-tests nodes before --drain drains them (or before --resume returns them): add --drain or --resume");
    }
    if (args.drains.retries > 0 || args.resume) && (args.per_rail || args.test == Test::Rails) {
        bail!("--retries and --resume re-test whole nodes with nccl-tests; they do not apply to --per-rail or --test rails yet");
    }
    if args.extra && (args.per_rail || args.test == Test::Rails) {
        bail!("--extra writes each node's verdict of the nccl-tests pairs; --per-rail and --test rails judge NICs, not nodes: run validate without them for --extra");
    }
    if args.test == Test::Rails && !matches!(units, Units::Nodes) {
        bail!("--test rails measures the NICs of Slurm nodes; --gpus validates this host's GPUs with nccl-tests");
    }
    Ok(())
}

/// The line pairs are judged by: `--floor`, else the history's baseline of pair runs like
/// these (`baseline::Key`), else the first round's own (a [`RoundRule`]); with the runs a
/// baseline is made of (their versions are compared with the pairs' once these ran).
fn choose_reference(
    args: &ValidateArgs,
    history: &History,
    db: &std::path::Path,
    units: &Units,
    cluster: &Option<String>,
) -> Result<(Reference, Vec<i64>)> {
    let variant = variant_name(args);
    let req = ReferenceRequest {
        collective: &args.collective,
        cluster,
        // Of 2-node (2-unit) pair runs like these: the same variant (mode and algorithm)
        // and as many GPUs. What every round but a `groups`/`all` screen runs.
        ranks_per_pair: 2 * match units {
            Units::Nodes => args.gpus_per_node,
            Units::Gpus(_) => args.gpus_per_unit,
        },
        variant: &variant,
        max_bytes: args.max_bytes,
        floor: args.floor,
        tolerance: args.tolerance.unwrap_or(DEFAULT_TOLERANCE) / 100.0,
        baseline_runs: args.baseline_runs,
    };
    // The runs the baseline is made of: their versions and algorithms are compared with
    // the pairs' once these ran.
    let (reference, baseline_runs) = pair_reference(history, &req)?;
    if matches!(reference, Reference::FirstRound(_)) {
        noteln!(
            "gpudirect validate: no baseline for {} at {} in {}: judging the units against their own first round (its median and MAD); pass --floor GBPS, or record good runs, to judge against a fixed line",
            args.collective,
            format_size(args.max_bytes),
            db.display()
        );
    }
    Ok((reference, baseline_runs))
}

/// The planner: the nodes, the mode, the topology's blocks, and the re-tests of
/// `--retries` and `--resume` (with the allocation's drained nodes, read here, before
/// anything runs).
fn plan(
    args: &ValidateArgs,
    nodes: &[String],
    mode: Mode,
    reference: Reference,
) -> Result<(Validation, Vec<(String, gpudirect::slurm::NodeState)>)> {
    let validation = match &args.topology {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read the topology file {}", file.display()))?;
            let blocks: BTreeMap<String, String> =
                parse_topology(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            Validation::with_blocks(nodes.to_vec(), mode, reference, &blocks)?
        }
        None => Validation::new(nodes.to_vec(), mode, reference)?,
    };
    // --resume: the drained nodes, read before anything runs.
    let drained = match args.resume {
        true => drained_nodes(nodes)?,
        false => Vec::new(),
    };
    let index = |node: &String| nodes.iter().position(|n| n == node);
    let validation = validation.with_retests(Retests {
        judged: if args.drains.acts() {
            args.drains.retries as usize
        } else {
            0
        },
        given: drained
            .iter()
            .filter(|(_, s)| {
                gpudirect::drain::is_ours(gpudirect::drain::Tool::Validate, s.reason.as_deref())
            })
            .filter_map(|(n, _)| index(n))
            .collect(),
        given_times: (args.drains.retries as usize).max(1),
        not_partners: drained.iter().filter_map(|(n, _)| index(n)).collect(),
    });

    Ok((validation, drained))
}

/// The variant every pair runs with: `validate:MODE`, the `--gpudirect` mode, and the
/// NCCL_ALGO of `--algo` (said on stderr).
fn pair_variant(args: &ValidateArgs, nodes: &[String]) -> Variant {
    let mut variant = Variant {
        name: variant_name(args),
        gpudirect: args.profile.gpudirect.clone(),
        env: BTreeMap::new(),
    };
    let (algo, said) = pinned_algorithm(&args.algo, env_var("NCCL_ALGO").as_deref());
    noteln!("gpudirect validate: {said}");
    if let Some(algo) = algo {
        variant.env.insert("NCCL_ALGO".into(), algo);
    }
    // The launch's own MPI traffic on the profile's control NIC, off the rails under test.
    let control = args.profile.control_nic(nodes);
    gpudirect::launch::pin_launch(&mut variant.env, control.as_deref(), "validate", env_set);
    variant
}

/// What a finished nccl-tests validation hands to [`conclude`].
struct Run<'a> {
    units: &'a Units,
    history: &'a History,
    db: &'a std::path::Path,
    cluster: Option<&'a str>,
    max: u64,
    line_rate_gbps: Option<f64>,
    run_ids: &'a [i64],
    pairs: &'a [PairRun],
    baseline_runs: &'a [i64],
    drained: &'a [(String, gpudirect::slurm::NodeState)],
}

/// The verdicts: drains and returns (before the report is printed: their outcomes are part
/// of it), the notes on the baseline's setup, the report (text or JSON), the HTML report,
/// and the exit status.
fn conclude(args: &ValidateArgs, validation: &Validation, r: Run<'_>) -> Result<ExitStatus> {
    let Run {
        units,
        history,
        db,
        cluster,
        max,
        line_rate_gbps,
        run_ids,
        pairs,
        baseline_runs,
        drained,
    } = r;
    let report = validation.report();
    let status = health(&report);
    // Drains, then returns, before the report is printed: their outcomes are part of it.
    let sanction = drains::sanction(args)?;
    let source = EvidenceSource {
        sanction: sanction.as_ref().unwrap_or(&Sanction::Drain),
        on_drain: args.drains.on_drain.as_deref(),
        history,
        cluster,
        collective: Some(&args.collective),
        size_bytes: Some(max),
        pairs,
    };
    let drain_actions = match sanction {
        Some(_) => drains::apply_drains(
            &gpudirect::drain::spare_when_every_node_is_bad(
                actions::drain_plan(&report),
                report.nodes.len(),
            ),
            &source,
        ),
        None => Vec::new(),
    };
    let resume_actions = match args.resume {
        true => drains::apply_resumes(drained, &actions::resume_plan(&report, drained)),
        false => Vec::new(),
    };
    let extra = match args.extra {
        true => gpudirect::node_extra::apply_all(&actions::extra_verdicts(
            &report,
            pairs,
            gpudirect::units::now_unix(),
        )),
        false => (Vec::new(), true),
    };
    for line in &extra.0 {
        noteln!("gpudirect validate: --extra: {line}");
    }
    let actions_failed =
        actions::any_error(&drain_actions) || actions::any_error(&resume_actions) || !extra.1;
    let exit = ExitStatus::of_validation(status, actions_failed);
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
            if args.drains.acts() {
                object.insert("drains".into(), serde_json::to_value(&drain_actions)?);
            }
            if args.resume {
                object.insert("resumes".into(), serde_json::to_value(&resume_actions)?);
            }
            if args.extra {
                object.insert("extra".into(), serde_json::to_value(&extra.0)?);
            }
        }
        emit_json(&value)?;
    } else {
        print_text(&Text {
            report: &report,
            threshold: validation.threshold(),
            units,
            max,
            line_rate_gbps,
            notes: &notes,
            actions: [&drain_actions, &resume_actions],
            status,
            exit,
            actions_failed,
            run_ids,
            db,
        })?;
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
        write_validation_report(history, run_ids, dir, &report_notes);
    }
    Ok(exit)
}

/// What the text report of an nccl-tests validation shows.
struct Text<'a> {
    report: &'a gpudirect::validate::judging::Report,
    threshold: Option<&'a Threshold>,
    units: &'a Units,
    max: u64,
    line_rate_gbps: Option<f64>,
    notes: &'a [String],
    /// The drains, then the returns.
    actions: [&'a [NodeAction]; 2],
    status: Health,
    exit: ExitStatus,
    actions_failed: bool,
    run_ids: &'a [i64],
    db: &'a std::path::Path,
}

/// The text report: the run, each unit with its evidence, the bad links, the re-tests,
/// what was drained or returned, the notes, and the verdict line with its exit code.
fn print_text(t: &Text<'_>) -> Result<()> {
    let Text {
        report,
        threshold,
        units,
        max,
        line_rate_gbps,
        notes,
        actions: [drain_actions, resume_actions],
        status,
        exit,
        actions_failed,
        run_ids,
        db,
    } = *t;
    outln!(
        "validation: {} {}, mode {}, {} round(s), {}",
        report.nodes.len(),
        match units {
            Units::Nodes => "nodes".to_string(),
            Units::Gpus(_) => format!("GPU units of {}", short_hostname()),
        },
        report.mode,
        report.rounds,
        match threshold {
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
            n.evidence
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
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
                PairOutcome::Busbw(b) => {
                    format!("with {} {b:.2} GB/s ({})", run.partner, run.class)
                }
                PairOutcome::Failed(why) => format!("with {} failed: {why}", run.partner),
                PairOutcome::CouldNotStart(why) => {
                    format!("with {} could not start: {why}", run.partner)
                }
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
    for a in drain_actions.iter().chain(resume_actions) {
        outln!("  {}", a.message)?;
        if let Some(e) = a.error.as_ref().filter(|_| a.outcome != "error") {
            outln!("  {e}")?;
        }
    }
    for note in notes {
        outln!("note: {note}")?;
    }
    outln!(
        "verdict: {status:?} (exit {}{}); runs {:?} in {}",
        exit.code(),
        if actions_failed {
            ": a drain, a resume or --on-drain did not work"
        } else {
            ""
        },
        run_ids,
        db.display()
    )?;
    Ok(())
}

/// `gpudirect validate`. Returns the health exit status.
pub fn run(args: &ValidateArgs, ctx: &Ctx) -> Result<ExitStatus> {
    if args.test == Test::Wiring {
        return run_wiring(args, ctx);
    }
    if args.reports.is_some() {
        bail!("--reports is for --test wiring");
    }
    let (units, nodes) = units_from_args(args)?;
    if let Some(dir) = &args.report {
        // Found out now, before any pair runs, not after the verdict.
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--report {}: cannot create the folder", dir.display()))?;
    }
    check_flags(args, &units)?;
    if args.test == Test::Rails {
        return rails::run(args, ctx, nodes);
    }
    let mode: Mode = args
        .mode
        .parse()
        .map_err(|e| anyhow::anyhow!("--mode: {e}"))?;
    let Some(dir) = args.nccl_tests_dir.clone() else {
        bail!("where are the nccl-tests binaries? pass --nccl-tests-dir DIR or set NCCL_TESTS_DIR");
    };
    // Found now, before any pair runs.
    find_binary(&dir, &args.collective)?;
    let (min, max) = (args.min_bytes, args.max_bytes);
    let timeout = args.timeout.unwrap_or(DEFAULT_TIMEOUT);
    // GPU units are recorded as the nodes of runs on a "cluster" named after this host
    // (even inside an allocation), so `gpudirect history --node gpu3` and the baseline
    // work per host as they do per node, never mixed with another host's gpu3.
    let cluster = match units {
        Units::Nodes => gpudirect::slurm::cluster_name(args.cluster.as_deref()),
        Units::Gpus(_) => Some(args.cluster.clone().unwrap_or_else(short_hostname)),
    };

    let db = ctx.db_path()?;
    let history = History::open(&db)?;
    let (reference, baseline_runs) = choose_reference(args, &history, &db, &units, &cluster)?;
    let (mut validation, drained) = plan(args, &nodes, mode, reference.clone())?;

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
    let variant = pair_variant(args, &nodes);
    let line_rate_gbps = profile_line_rate(args, nodes.first().map(String::as_str));
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
    // The pairs' -J reports; removed when validate ends, however it ends.
    let work = tempfile::Builder::new()
        .prefix("gpudirect-validate-")
        .tempdir()
        .context("cannot create a folder for the pairs' JSON reports")?;
    let work_dir = work.path().to_path_buf();
    let launch = pair_launch(args, &dir, &work_dir, timeout);
    let mut rec = Recorded {
        history,
        run_ids: Vec::new(),
        pairs: Vec::new(),
        cells_started: 0,
    };
    let budget = gpudirect::budget::Budget::unlimited();
    let rounds = RoundContext {
        tool: gpudirect::history::Tool::Validate,
        collective: &args.collective,
        gpus_per_node: args.gpus_per_node,
        gpus_per_unit: args.gpus_per_unit,
        units: &units,
        launch: &launch,
        matrix: &matrix,
        sizes: &sizes,
        cluster: &cluster,
        max,
        line_rate_gbps,
        // Not held to the profile's transport (which needs NCCL_DEBUG=INFO's channel
        // lines): validate judges speed; vet and run check the transport.
        config: None,
        budget: &budget,
        followup: None,
    };
    if let Some((variable, rails)) = &per_rail {
        // Before any traffic: a NIC down, missing or without an address leaves its rail's
        // pairs (issue #45), as in `--test rails`. GPU units share one host's NICs: its
        // rails are not asked per unit.
        let on_rails = match units {
            Units::Nodes => {
                gpudirect::validate::rail_states::ask("validate", &nodes, rails, &budget)
            }
            Units::Gpus(_) => gpudirect::validate::rail_states::RailNodes::all(&nodes, rails),
        };
        let rail_nodes = gpudirect::validate::rail_runs::paired_nodes(&nodes, rails, &on_rails);
        // One validation per rail, NCCL held to that NIC through the profile's variable.
        let mut validations = Vec::new();
        for (rail, paired) in rails.iter().zip(&rail_nodes) {
            let mut on_rail = if *paired == nodes {
                validation.clone()
            } else {
                plan(args, paired, mode, reference.clone())?.0
            };
            let mut variant = variant.clone();
            variant.name = format!("{}:rail:{rail}", variant.name);
            variant.env.insert(variable.clone(), rail.clone());
            noteln!("gpudirect validate: rail {rail} ({variable}={rail})");
            run_rounds(&rounds, &mut on_rail, &variant, &mut rec)?;
            validations.push(on_rail);
        }
        let rounds = validations.iter().map(Validation::rounds_done).sum();
        return rails::conclude(
            args,
            rails::Verdicts {
                test: "nccl-per-rail",
                history: &rec.history,
                db: &db,
                nodes: &nodes,
                rails,
                validations: &validations,
                sent: &BTreeMap::new(),
                down: &on_rails.down,
                run_ids: &rec.run_ids,
                size_bytes: max,
                rounds,
            },
        );
    }
    run_rounds(&rounds, &mut validation, &variant, &mut rec)?;
    conclude(
        args,
        &validation,
        Run {
            units: &units,
            history: &rec.history,
            db: &db,
            cluster: cluster.as_deref(),
            max,
            line_rate_gbps,
            run_ids: &rec.run_ids,
            pairs: &rec.pairs,
            baseline_runs: &baseline_runs,
            drained: &drained,
        },
    )
}

/// `--test wiring`: the nodes' reports (`--reports`) or the allocation's nodes asked.
fn run_wiring(args: &ValidateArgs, ctx: &Ctx) -> Result<ExitStatus> {
    if args.gpus.is_some() {
        bail!("--test wiring compares Slurm nodes' GPU-to-NIC maps; --gpus validates this host's GPUs with nccl-tests");
    }
    if args.reports.is_some() {
        return wiring::run(args, ctx, &[]);
    }
    wiring::run(args, ctx, &wiring::allocation_nodes()?)
}

/// How each pair is launched: srun, exactly the GPUs asked, with the pairs' `-J` reports
/// in `work_dir`.
fn pair_launch(
    args: &ValidateArgs,
    dir: &std::path::Path,
    work_dir: &std::path::Path,
    timeout: Duration,
) -> LaunchOptions {
    // SAFETY: geteuid has no preconditions.
    let as_root = nix::unistd::geteuid().is_root();
    LaunchOptions {
        launcher: Launcher::Srun,
        nccl_tests_dir: dir.to_path_buf(),
        mpi: Some(args.mpi.clone()),
        nodes: Vec::new(),
        work_dir: Some(work_dir.to_path_buf()),
        timeout,
        grace: Duration::from_secs(10),
        as_root,
        gpus_per_process: args.gpus_per_process,
        exact: true,
        startup_timeout: Some(args.startup.startup_timeout),
    }
}
