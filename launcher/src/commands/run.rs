//! `gpudirect run`: runs the nccl-tests matrix, checks every cell, records each in the
//! history, and says whether everything passed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use gpudirect::history::{History, LaunchKind, RunStatus};
use gpudirect::matrix::{variants_from_flags, Cell, Matrix, Variant};
use gpudirect::profile::Choice;
use gpudirect::runner::{self, INTERRUPTED};
use gpudirect::slurm::{env_set, Allocation};
use gpudirect::tune::overlay::read_overlay;
use gpudirect::units::size_arg;
use gpudirect_core::config::{Config, Mode};
use gpudirect_core::system::{load_config, Ownership};

use gpudirect::launch::{find_binary, prepare, LaunchOptions, Launcher};
use gpudirect::units::now_unix;

use super::args::NcclTestsArgs;
use super::{Ctx, ExitStatus};
use gpudirect::matrix_run::{
    cell_key, estimate_seconds, recorded_cells, run_cells, CellPlan, CellResult, MATRIX_KEY,
};
use gpudirect::noteln;
use gpudirect::outln;
use gpudirect::output::{emit_json, gbps};

/// Arguments of `gpudirect run`.
#[derive(Debug, Args, Clone)]
#[command(after_help = "Examples:\n  \
    salloc -N4 --ntasks-per-node=8 \\\n    \
      gpudirect run -c all_reduce,all_gather -N 2,4 -G 8 --variants tcpx,none -b 8 -e 8G\n  \
    gpudirect run --matrix weekly.toml --submit        # one salloc per node count\n  \
    gpudirect run --launcher local -G 8 -c all_reduce  # one host, no Slurm\n  \
    gpudirect run --dry-run --matrix weekly.toml       # the plan, nothing runs\n  \
    gpudirect run --overlay tcpx-tuned.toml -N 2 -G 8  # tcpx against gpudirect tune's overlay\n\n\
Variants: `--variants tcpx,none` runs each cell with --gpudirect=tcpx and with\n\
--gpudirect=none; `--variant NAME:MODE:VAR=V,VAR=V` adds one with a mode (empty for no\n\
--gpudirect) and extra variables, e.g. `--variant ring:tcpx:NCCL_ALGO=Ring` or\n\
`--variant socket::NCCL_P2P_DISABLE=1,NCCL_SHM_DISABLE=1`.\n\n\
Every cell runs with NCCL_DEBUG=INFO so the transport NCCL used is known; a cell whose\n\
profile names a transport (tcpx: GPUDirectTCPX) fails when its inter-node channels used\n\
another (e.g. NET/Socket). Exit status: 0 all cells passed, 2 a cell failed a check (or did\n\
not run), 3 could not run, 130 interrupted.")]
pub struct RunArgs {
    /// A matrix file (TOML); flags below then only fill what it leaves out.
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<PathBuf>,

    /// Collectives, comma-separated (all_reduce, all_gather, reduce_scatter, alltoall, ...).
    #[arg(short = 'c', long, value_delimiter = ',', default_value = "all_reduce")]
    pub collectives: Vec<String>,

    /// Node counts, comma-separated. Default: every node of the allocation (1 outside one).
    #[arg(short = 'N', long, value_delimiter = ',')]
    pub nodes: Vec<u32>,

    /// GPUs (ranks) per node, comma-separated. Default: SLURM_NTASKS_PER_NODE, else 1.
    #[arg(short = 'G', long, value_delimiter = ',')]
    pub gpus_per_node: Vec<u32>,

    /// Smallest message size: bytes, or K/M/G/T (powers of 1024): 8, 64K, 8G, "8 GiB".
    #[arg(short = 'b', long, value_name = "SIZE", default_value = "8", value_parser = size_arg)]
    pub min_bytes: u64,

    /// Largest message size (the same forms as -b).
    #[arg(short = 'e', long, value_name = "SIZE", default_value = "8G", value_parser = size_arg)]
    pub max_bytes: u64,

    /// Size factor between steps.
    #[arg(short = 'f', long, default_value_t = 2)]
    pub factor: u64,

    /// Environment variants by --gpudirect mode, comma-separated (`tcpx,none`).
    /// Default: one variant, untouched.
    #[arg(long, value_delimiter = ',')]
    pub variants: Vec<String>,

    /// One variant with extra variables, repeatable: `NAME:MODE:VAR=V,VAR=V`
    /// (empty MODE: no --gpudirect), e.g. `--variant ring:tcpx:NCCL_ALGO=Ring`.
    #[arg(long = "variant", value_name = "NAME:MODE:VARS")]
    pub variant: Vec<String>,

    /// A profile overlay written by `gpudirect tune --write`: adds a variant named after
    /// its profile, with the mode it extends and its variables (no need to install it).
    /// Without other variants the base runs too, so one command compares the two.
    #[arg(long, value_name = "FILE")]
    pub overlay: Option<PathBuf>,

    /// GPUs each srun/mpirun process drives (nccl-tests -g); ranks per node = G / this.
    #[arg(long, default_value_t = 1)]
    pub gpus_per_process: u32,

    /// How ranks start. Default: srun inside an allocation, local outside.
    #[arg(long, value_enum)]
    pub launcher: Option<Launcher>,

    /// Name this matrix run (default: generated and printed); every cell's record carries it.
    #[arg(long, value_name = "ID")]
    pub matrix_id: Option<String>,

    /// Finish the matrix run ID: skip the cells it already recorded, run the rest (also a
    /// cell that was running when the launcher was killed, whose record says interrupted).
    #[arg(long, value_name = "ID", conflicts_with = "matrix_id")]
    pub resume: Option<String>,

    /// Stop at the first cell that fails a check.
    #[arg(long)]
    pub fail_fast: bool,

    /// Print the plan (cells, commands, expected duration) and run nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Outside an allocation: make one (salloc) per node count, run that part of the matrix
    /// in it, and wait; each part records into the same history.
    #[arg(long)]
    pub submit: bool,

    /// Run only the cells with this node count (used by --submit for each allocation).
    #[arg(long, hide = true)]
    pub only_nodes: Option<u32>,

    /// Where nccl-tests is and how its runs are limited and recorded.
    #[command(flatten)]
    pub nccl: NcclTestsArgs,

    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,

    /// Extra nccl-tests arguments for every cell, after `--` (e.g. `-- -n 50 -w 10`).
    #[arg(last = true, value_name = "NCCL_TESTS_ARGS")]
    pub extra: Vec<String>,
}

/// The matrix from the file or the flags.
fn build_matrix(args: &RunArgs, allocation: &Allocation) -> Result<Matrix> {
    let mut matrix = match &args.matrix {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read the matrix file `{}`", file.display()))?;
            Matrix::from_toml(&text, &file.display().to_string())?
        }
        None => {
            let nodes = if args.nodes.is_empty() {
                vec![u32::try_from(allocation.nodes.len().max(1)).unwrap_or(1)]
            } else {
                args.nodes.clone()
            };
            let gpus = if args.gpus_per_node.is_empty() {
                vec![allocation.tasks_per_node.unwrap_or(1)]
            } else {
                args.gpus_per_node.clone()
            };
            let matrix = Matrix {
                collectives: args.collectives.clone(),
                nodes,
                gpus_per_node: gpus,
                min_bytes: args.min_bytes,
                max_bytes: args.max_bytes,
                factor: args.factor,
                timeout: args.nccl.timeout,
                extra_args: Vec::new(),
                variants: variants_from_flags(
                    &args
                        .variants
                        .iter()
                        .chain(&args.variant)
                        .cloned()
                        .collect::<Vec<_>>(),
                )?,
            };
            matrix.check()?;
            matrix
        }
    };
    if let Some(file) = &args.overlay {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the overlay `{}`", file.display()))?;
        let overlay =
            read_overlay(&text, &file.display().to_string()).map_err(anyhow::Error::msg)?;
        let no_variants_given =
            args.matrix.is_none() && args.variants.is_empty() && args.variant.is_empty();
        if no_variants_given {
            matrix.variants = vec![Variant {
                name: overlay.extends.clone().unwrap_or_else(|| "default".into()),
                gpudirect: overlay.extends.clone(),
                env: BTreeMap::new(),
            }];
        }
        if matrix.variants.iter().any(|v| v.name == overlay.name) {
            bail!(
                "{}: a variant is already named `{}`: rename the other variant",
                file.display(),
                overlay.name
            );
        }
        matrix.variants.push(Variant {
            name: overlay.name,
            gpudirect: overlay.extends,
            env: overlay.env,
        });
    }
    matrix.extra_args.extend(args.extra.iter().cloned());
    if let Some(n) = args.only_nodes {
        matrix.nodes.retain(|&x| x == n);
    }
    Ok(matrix)
}

/// The config is not on this host at all (a login node without it): its transports go
/// unchecked, with a warning. Any other error is one the plugin would meet as well.
fn config_absent(e: &gpudirect_core::system::LoadError) -> bool {
    matches!(e, gpudirect_core::system::LoadError::Io { source, .. }
        if source.kind() == std::io::ErrorKind::NotFound)
}

fn submit(args: &RunArgs, matrix: &Matrix) -> Result<ExitStatus> {
    let exe = std::env::current_exe().context("cannot find the gpudirect executable")?;
    let passthrough: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--submit")
        .collect();
    let mut worst = ExitStatus::Ok;
    for &n in &matrix.nodes {
        let mut cmd = std::process::Command::new("salloc");
        cmd.arg(format!("--nodes={n}")).arg("--quiet").arg(&exe);
        cmd.args(&passthrough).arg(format!("--only-nodes={n}"));
        let shown = format!(
            "salloc --nodes={n} --quiet gpudirect {} --only-nodes={n}",
            passthrough.join(" ")
        );
        noteln!("gpudirect run: allocation for N={n}: {shown}");
        tracing::info!(command = %shown, "running");
        if args.dry_run {
            continue;
        }
        let status = cmd
            .status()
            .with_context(|| format!("could not start `{shown}`: is Slurm's salloc on PATH?"))?;
        let code = status.code().unwrap_or(1);
        if code != 0 {
            noteln!("gpudirect run: allocation for N={n} ended with exit status {code}");
        }
        // The inner `gpudirect run` ends Ok, Failed or Interrupted; any other code is
        // salloc's own failure.
        worst = worst.max(match ExitStatus::from_code(code) {
            Some(s @ (ExitStatus::Ok | ExitStatus::Failed | ExitStatus::Interrupted)) => s,
            _ => ExitStatus::CouldNotRun,
        });
    }
    Ok(worst)
}

/// The launcher (`--launcher`, else srun in an allocation and local outside one) and the
/// nodes it runs on; refused where it cannot run, warned where `--gpudirect` cannot reach.
fn launcher_and_nodes(
    args: &RunArgs,
    matrix: &Matrix,
    nodes: Vec<String>,
    in_allocation: bool,
) -> Result<(Launcher, Vec<String>)> {
    let launcher = args.launcher.unwrap_or(if in_allocation {
        Launcher::Srun
    } else {
        Launcher::Local
    });
    if launcher == Launcher::Srun && !in_allocation {
        bail!("--launcher srun needs an allocation: run inside salloc/sbatch, or add --submit");
    }
    // mpirun without Slurm: the ranks of a one-node cell run on this host.
    let nodes = if launcher == Launcher::Mpirun && !in_allocation {
        vec!["localhost".to_string()]
    } else {
        nodes
    };
    if launcher != Launcher::Srun
        && matrix.variants.iter().any(|v| {
            v.gpudirect
                .as_deref()
                .is_some_and(|m| Mode::from_word(m) != Mode::None)
        })
    {
        noteln!(
            "gpudirect run: warning: --launcher {launcher:?} starts no srun step of its own, so \
             --gpudirect modes reach the ranks only through SLURM_GPUDIRECT (mpirun inside an \
             allocation); with local, only the variants' variables apply"
        );
    }
    Ok((launcher, nodes))
}

/// The nccl-tests folder, with every collective's binary in it, and a matrix that fits
/// the allocation: checked before anything runs or is recorded.
fn check_matrix(
    args: &RunArgs,
    matrix: &Matrix,
    nodes: &[String],
    in_allocation: bool,
) -> Result<PathBuf> {
    let Some(dir) = args.nccl.nccl_tests_dir.clone() else {
        bail!("where are the nccl-tests binaries? pass --nccl-tests-dir DIR or set NCCL_TESTS_DIR");
    };
    // Every collective's binary is there before anything runs or is recorded: a wrong
    // folder is a bad option (exit 3), not a matrix of failed cells.
    for collective in &matrix.collectives {
        find_binary(&dir, collective)?;
    }
    if in_allocation {
        let most = matrix.nodes.iter().max().copied().unwrap_or(1) as usize;
        if most > nodes.len() {
            bail!(
                "the matrix asks for {most} nodes but the allocation has {} ({}): use -N or a larger allocation",
                nodes.len(),
                gpudirect_core::hostlist::compress(nodes)
            );
        }
    }
    Ok(dir)
}

/// The admin config the variants' transports are checked against; `None` (said when a
/// variant has a mode) where it is not on this host; an error where it is but the plugin
/// would refuse it.
fn read_config(args: &RunArgs, matrix: &Matrix) -> Result<Option<Config>> {
    match load_config(&args.nccl.config.path, Ownership::Any) {
        Ok(c) => Ok(Some(c)),
        Err(e) => {
            let profile_modes: Vec<&str> = matrix
                .variants
                .iter()
                .filter_map(|v| v.gpudirect.as_deref())
                .filter(|m| Mode::from_word(m) != Mode::None)
                .collect();
            if let (Some(mode), false) = (profile_modes.first(), config_absent(&e)) {
                // The plugin reads this very file on every node: it refuses it too, and the
                // cells would run with nothing applied yet pass (found on the GPU bed).
                bail!(
                    "{e}\nthe plugin reads this config on every node and would refuse it too: \
                     --gpudirect {mode} would apply nothing. Fix it first (`gpudirect profiles \
                     check --config {}`)",
                    args.nccl.config.path.display()
                );
            }
            if !profile_modes.is_empty() {
                noteln!("gpudirect run: warning: {e}; transports of --gpudirect variants are not checked");
            }
            Ok(None)
        }
    }
}

/// Each variant's launch kept on its profile's control NIC, where the profile names one on
/// every node (validate's rule, [`gpudirect::launch::pin_launch`]); the variant's own
/// environment and the user's win.
fn pin_variants(matrix: &mut Matrix, config: Option<&Config>, nodes: &[String]) {
    let Some(config) = config else { return };
    for variant in &mut matrix.variants {
        let control = variant
            .gpudirect
            .as_deref()
            .and_then(|mode| Choice::with(config, mode).ok())
            .and_then(|choice| choice.control_nic(nodes));
        gpudirect::launch::pin_launch(&mut variant.env, control.as_deref(), "run", env_set);
    }
}

/// `--dry-run`: the plan, each cell's command line and its expected time from the
/// history.
fn dry_run(
    args: &RunArgs,
    matrix: &Matrix,
    opts: &LaunchOptions,
    cells: &[Cell],
    db: &std::path::Path,
    launcher: Launcher,
) -> Result<()> {
    let history = History::open_existing(db).ok();
    outln!(
        "{} cells, launcher {:?}, timeout {}s each:",
        cells.len(),
        launcher,
        matrix.timeout.as_secs()
    )?;
    let mut total = 0.0;
    let mut known = 0;
    for cell in cells {
        let prepared = prepare(cell, matrix, opts, !args.nccl.no_json)?;
        let estimate = estimate_seconds(history.as_ref(), cell);
        if let Some(s) = estimate {
            total += s;
            known += 1;
        }
        outln!(
            "  {:>3}. {:<40} expected {}\n       {}",
            cell.index,
            cell.label(),
            estimate
                .map(|s| format!("~{s:.0}s (history)"))
                .unwrap_or_else(|| "unknown (no history)".into()),
            prepared.job.command_line()
        )?;
    }
    outln!(
        "expected duration: ~{:.0}s for {known} cells with history; at most {}s per cell without",
        total,
        matrix.timeout.as_secs()
    )?;
    Ok(())
}

/// The matrix run's id (`--resume ID`, `--matrix-id`, else a new one, said), the cells
/// still to run, and the placeholders of cells that were running when it stopped.
fn start_matrix(
    args: &RunArgs,
    history: &History,
    db: &std::path::Path,
    cells: Vec<Cell>,
) -> Result<(String, Vec<Cell>, BTreeMap<String, i64>)> {
    let matrix_id = args
        .resume
        .clone()
        .or_else(|| args.matrix_id.clone())
        .unwrap_or_else(|| format!("m{}-{}", now_unix(), std::process::id()));
    let (done, placeholders) = match &args.resume {
        Some(id) => recorded_cells(history, id)?,
        None => (Vec::new(), BTreeMap::new()),
    };
    if args.resume.is_some() {
        if done.is_empty() && placeholders.is_empty() {
            bail!("no cell of matrix run `{matrix_id}` is in {}: check the id (gpudirect show ID lists it under {MATRIX_KEY})", db.display());
        }
        noteln!(
            "gpudirect run: resuming {matrix_id}: {} of {} cells already recorded",
            done.len(),
            cells.len()
        );
    } else {
        noteln!(
            "gpudirect run: matrix run {matrix_id} (finish it later with --resume {matrix_id})"
        );
    }
    let cells: Vec<Cell> = cells
        .into_iter()
        .filter(|c| !done.contains(&cell_key(c)))
        .collect();
    Ok((matrix_id, cells, placeholders))
}

/// `gpudirect run`: every cell ok is [`ExitStatus::Ok`], any cell not ok (or not run) is
/// [`ExitStatus::Failed`].
pub fn run(args: &RunArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let wall = Instant::now();
    let allocation = Allocation::from_env()?;
    let in_allocation = allocation.job_id.is_some();
    let mut matrix = build_matrix(args, &allocation)?;
    let nodes = allocation.nodes;
    if args.submit {
        if in_allocation {
            bail!("--submit makes its own allocations: run it outside salloc/sbatch");
        }
        return submit(args, &matrix);
    }
    let (launcher, nodes) = launcher_and_nodes(args, &matrix, nodes, in_allocation)?;
    let dir = check_matrix(args, &matrix, &nodes, in_allocation)?;
    let config = read_config(args, &matrix)?;
    if launcher != Launcher::Local {
        pin_variants(&mut matrix, config.as_ref(), &nodes);
    }
    // Removed when `work` drops, as at every return below.
    let work = gpudirect::launch::work_dir("gpudirect-run-")
        .context("cannot create a work folder in $TMPDIR (set TMPDIR to a folder of yours)")?;
    let work_dir = work.path().to_path_buf();
    // SAFETY: geteuid has no preconditions.
    let as_root = nix::unistd::geteuid().is_root();
    let opts = LaunchOptions {
        launcher,
        nccl_tests_dir: dir,
        mpi: (launcher == Launcher::Srun).then(|| args.nccl.mpi.clone()),
        nodes: nodes.clone(),
        work_dir: Some(work_dir.clone()),
        timeout: matrix.timeout,
        grace: args.nccl.grace,
        as_root,
        gpus_per_process: args.gpus_per_process,
        exact: false,
        startup_timeout: Some(args.nccl.startup.startup_timeout),
    };
    let cells = matrix.plan();
    let db = ctx.db_path()?;
    if args.dry_run {
        dry_run(args, &matrix, &opts, &cells, &db, launcher)?;
        let _ = std::fs::remove_dir_all(&work_dir);
        return Ok(ExitStatus::Ok);
    }
    let mut history = History::open(&db)?;
    let (matrix_id, cells, mut placeholders) = start_matrix(args, &history, &db, cells)?;
    let launch_kind = match launcher {
        Launcher::Srun => LaunchKind::Srun,
        Launcher::Mpirun => LaunchKind::Mpirun,
        Launcher::Local => LaunchKind::Local,
    };
    let plan = CellPlan {
        json_report: !args.nccl.no_json,
        cluster: args.nccl.cluster.as_deref(),
        matrix: &matrix,
        opts: &opts,
        config: config.as_ref(),
        nodes: &nodes,
        in_allocation,
        launch_kind,
        matrix_id: &matrix_id,
    };
    runner::install_interrupt_handler();
    let results = run_cells(
        &plan,
        &cells,
        &mut history,
        &mut placeholders,
        args.fail_fast,
    )?;
    let _ = std::fs::remove_dir_all(&work_dir);
    print_summary(&results, cells.len(), args.json, &db)?;
    // What the launcher itself cost: everything but the time its children ran.
    let wall = wall.elapsed().as_secs_f64();
    let in_children: f64 = results.iter().map(|r| r.seconds).sum();
    noteln!(
        "gpudirect run: wall {wall:.2}s, in the launched commands {in_children:.2}s, launcher overhead {:.3}s ({:.2}%)",
        wall - in_children,
        100.0 * (wall - in_children) / wall.max(1e-9)
    );
    let interrupted = INTERRUPTED.load(Ordering::SeqCst);
    Ok(if interrupted {
        ExitStatus::Interrupted
    } else if results.iter().all(|r| r.status == RunStatus::Ok) && results.len() == cells.len() {
        ExitStatus::Ok
    } else {
        ExitStatus::Failed
    })
}

fn print_summary(
    results: &[CellResult],
    planned: usize,
    json: bool,
    db: &std::path::Path,
) -> Result<()> {
    if json {
        emit_json(results)?;
        return Ok(());
    }
    outln!(
        "\n{:>4}  {:<38} {:<11} {:>12} {:>14}  {:<14} {:>6}",
        "cell",
        "collective/nodes/gpus/variant",
        "status",
        "avg busbw",
        "busbw@max",
        "transport",
        "run"
    )?;
    for r in results {
        outln!(
            "{:>4}  {:<38} {:<11} {:>12} {:>14}  {:<14} {:>6}",
            r.cell,
            r.label,
            r.status_word(),
            gbps(r.avg_busbw),
            gbps(r.busbw_at_max_size),
            r.transport.as_deref().unwrap_or("-"),
            r.run_id
                .map(|i| i.to_string())
                .unwrap_or_else(|| "-".into())
        )?;
        for f in &r.findings {
            outln!("        {f}")?;
        }
    }
    let ok = results.iter().filter(|r| r.status == RunStatus::Ok).count();
    outln!(
        "\n{ok} of {planned} cells passed; {} ran. History: {}",
        results.len(),
        db.display()
    )?;
    if results.iter().any(|r| r.replay) {
        outln!("NOTE: these outputs were replayed by the nccl-tests STAND-IN (recorded on 2xH200): they are not measurements of this machine.")?;
    }
    if let (Some(first), Some(last)) = (
        results.iter().find_map(|r| r.run_id),
        results.iter().rev().find_map(|r| r.run_id),
    ) {
        outln!("Details: gpudirect show {first} .. gpudirect show {last}; compare runs with gpudirect compare A B")?;
    }
    Ok(())
}
