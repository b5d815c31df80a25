//! `gpudirect watch`: what slows a running job, from the NCCL Inspector's dumps. The reading
//! and the verdicts are [`gpudirect::watch`]; this module reads the arguments, fills the
//! baselines from the history and prints.

use std::path::PathBuf;
use std::time::Duration;

use std::ffi::OsString;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Args};
use gpudirect::history::RunKey;
use gpudirect::nccl_output::inspector::Sample;
use gpudirect::outln;
use gpudirect::output::{emit, emit_json};
use gpudirect::runner::INTERRUPTED;
use gpudirect::slurm::{self, ask_nodes_capped, AgentStep, StepProfile};
use gpudirect::units::{duration_arg, percent_arg};
use gpudirect::watch::judge::{judge, Baselines, CommVerdict, Finding};
use gpudirect::watch::links::{self, Connections};
use gpudirect::watch::{in_window, read_agent_lines, read_folder, text, window_us, Collected};
use serde::Serialize;

use super::args::ConfigArg;
use super::{Ctx, ExitStatus};

/// Arguments of `gpudirect watch`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("source").required(true).args(["job", "dumps"])),
    after_help = "Examples:\n  \
    gpudirect watch 4242                                   # the job's nodes, through Slurm\n  \
    gpudirect watch 4242 --json --window 2m\n  \
    gpudirect watch 4242 --follow 10s                      # redrawn every 10 s, as top\n  \
    gpudirect watch 4242 --textfile /var/lib/node_exporter # OpenMetrics for Prometheus\n  \
    gpudirect watch --dumps /tmp/nccl-inspector-4242       # one node's dump folder\n  \
    gpudirect watch --dumps node1/ --dumps node2/ --json   # folders gathered from several nodes\n  \
    gpudirect watch --dumps DIR --baseline-variant tcpx    # also against the history's runs\n\n\
    With JOBID, one step inside the job (one task per node, as you: Slurm creates steps\n\
    only in your own jobs; the local cluster's Slurm 22.05 refused root too, so an admin\n\
    reads a node's folder with --dumps there) reads each node's folder from the config's\n\
    [watch] table (<dump_root>/gpudirect-watch-JOBID), which the plugin made for a job\n\
    that exported GPUDIRECT_WATCH=1. Without [watch], the job writes the dumps itself:\n  \
    NCCL_PROFILER_PLUGIN=/path/libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1\n  \
    NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000 NCCL_INSPECTOR_DUMP_DIR=DIR\n\
    (make DIR before the job starts: ranks that race to create it lose their dumps).\n\
    scripts/build-inspector builds the plugin from an NCCL source tree.\n\n\
    Verdicts, per communicator: LATE (a rank the others wait for: it is the fastest in most\n\
    collectives, since it arrives last), SLOW (below the history's baseline for that\n\
    collective and size), SILENT (ranks that wrote nothing), or nothing wrong.\n\
    Exit status: 0 nothing wrong, 1 a finding, 3 nothing could be read or too few\n\
    collectives to judge.")]
pub struct WatchArgs {
    /// The running job to watch: its nodes' dump folders are read through Slurm.
    #[arg(value_name = "JOBID")]
    pub job: Option<u32>,

    /// A folder of Inspector dumps (`<host>-pid<PID>.log`) instead; repeat for several nodes'.
    #[arg(long = "dumps", value_name = "DIR", conflicts_with = "job")]
    pub dumps: Vec<PathBuf>,

    /// The admin config whose `[watch]` table names the job's folders (with JOBID).
    #[command(flatten)]
    pub config: ConfigArg,

    /// Judge the samples dumped within this long before the newest one. A connection's
    /// time per byte is judged over the whole window, so a fault that began inside it is
    /// named once it fills about three quarters of it (a link 10x slower for 3/4 of the
    /// window is 3x slower over all of it): 20 s names a NIC slowed now within about 15 s,
    /// plus the dump interval and the agents' step; 60 s would take some 45 s.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = duration_arg)]
    pub window: Duration,

    /// Compare each collective's busbw with the history's runs of this variant (the
    /// profile a `gpudirect run` used, or `validate:pairs`) on as many nodes and ranks.
    #[arg(long, value_name = "VARIANT")]
    pub baseline_variant: Option<String>,

    /// With --baseline-variant: the cluster the baseline runs were recorded on (else
    /// $SLURM_CLUSTER_NAME), as `run` and `validate` record it.
    #[arg(long, value_name = "NAME", env = "GPUDIRECT_CLUSTER")]
    pub cluster: Option<String>,

    /// How far below the baseline is still healthy, percent.
    #[arg(long, value_name = "PCT", default_value = "10", value_parser = percent_arg)]
    pub tolerance: f64,

    /// Print the verdicts as JSON.
    #[arg(long)]
    pub json: bool,

    /// Judge again every DURATION, the table redrawn in place on a terminal (JSON lines
    /// with --json), until Ctrl-C (exit 130) or --rounds.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub follow: Option<Duration>,

    /// With --follow: stop after N rounds, exiting with the last round's status.
    #[arg(long, value_name = "N", requires = "follow", value_parser = clap::value_parser!(u64).range(1..))]
    pub rounds: Option<u64>,

    /// Also write the verdicts as OpenMetrics for node_exporter's textfile collector:
    /// DIR/gpudirect_watch_job_JOBID.prom (gpudirect_watch_dumps.prom with --dumps).
    #[arg(long, value_name = "DIR")]
    pub textfile: Option<PathBuf>,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Report<'a> {
    files: usize,
    notes: &'a [String],
    communicators: &'a [CommVerdict],
    /// The connection profiler's verdicts (empty where it did not run).
    connections: &'a [Connections],
}

/// `gpudirect watch`.
pub fn run(args: &WatchArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let Some(every) = args.follow else {
        return once(args, ctx);
    };
    // Ctrl-C ends the loop between two rounds, not in the middle of printing one.
    gpudirect::runner::install_interrupt_handler();
    let tty = std::io::stdout().is_terminal();
    let mut status = ExitStatus::CouldNotRun;
    for round in 1.. {
        if tty {
            // Home and clear: the table is redrawn in place, as top does.
            emit("\x1b[H\x1b[2J")?;
        }
        if !args.json {
            outln!(
                "gpudirect watch: round {round}, every {} s (Ctrl-C stops)",
                every.as_secs_f64()
            )?;
        }
        status = match once(args, ctx) {
            Ok(status) => status,
            // The reader went away (`| head`): nothing more to show.
            Err(e)
                if e.chain().any(|c| {
                    c.downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                }) =>
            {
                return Err(e)
            }
            Err(e) => {
                gpudirect::noteln!("gpudirect watch: {e:#}");
                ExitStatus::CouldNotRun
            }
        };
        if args.rounds.is_some_and(|n| round >= n) {
            break;
        }
        let until = std::time::Instant::now() + every;
        while std::time::Instant::now() < until {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Ok(ExitStatus::Interrupted);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(status)
}

/// One round: read, judge, print; its exit status.
fn once(args: &WatchArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let mut collected = Collected::default();
    let (place, mut rank_links) = match args.job {
        Some(job) => {
            let rank_links = ask_the_jobs_nodes(job, args, &mut collected)?;
            (format!("job {job}'s nodes"), rank_links)
        }
        None => {
            for dir in &args.dumps {
                if let Err(why) = read_folder(dir, &mut collected) {
                    bail!("{why}");
                }
            }
            let place = args
                .dumps
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            (
                place,
                links::windowed(&collected.link_lines, window_us(args.window)),
            )
        }
    };
    // One rank's lines read by two agents (nodes that share a folder) count once.
    let mut seen = std::collections::BTreeSet::new();
    rank_links.retain(|r| seen.insert((r.host.clone(), r.pid, r.comm.clone())));
    let mut connections = links::judge(&rank_links);
    if collected.samples.is_empty() && connections.is_empty() {
        for note in &collected.notes {
            gpudirect::noteln!("note: {}", gpudirect::output::shown(note));
        }
        bail!(
            "no Inspector sample in {} file(s) under {place}: is the job running with \
             NCCL_INSPECTOR_ENABLE=1 and a dump interval, and has it completed a collective \
             of at least 8 KiB (NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES)?",
            collected.files,
        );
    }
    let samples = in_window(std::mem::take(&mut collected.samples), args.window);
    let baselines = baselines(args, ctx, &samples)?;
    let verdicts = judge(&samples, &baselines);
    // Sends into a late rank wait on it: the late rank is the finding, not the network.
    let late: Vec<(&str, i32)> = verdicts
        .iter()
        .flat_map(|v| {
            v.findings.iter().filter_map(move |f| match f {
                Finding::LateRank { rank, .. } => {
                    i32::try_from(*rank).ok().map(|r| (v.comm.as_str(), r))
                }
                _ => None,
            })
        })
        .collect();
    links::excuse_late_ranks(&mut connections, &late);
    if let Some(dir) = &args.textfile {
        let job = args.job.map_or("dumps".to_string(), |j| j.to_string());
        let name = match args.job {
            Some(j) => format!("gpudirect_watch_job_{j}.prom"),
            None => "gpudirect_watch_dumps.prom".to_string(),
        };
        let text = gpudirect::metrics::watch_metrics(&job, &verdicts, &connections).render();
        gpudirect::metrics::write_textfile(dir, &name, &text)
            .with_context(|| format!("--textfile: writing {name} into {}", dir.display()))?;
    }
    let report = Report {
        files: collected.files,
        notes: &collected.notes,
        communicators: &verdicts,
        connections: &connections,
    };
    if args.json && args.follow.is_some() {
        // One document a line while following (JSON lines), so a reader can take each.
        outln!("{}", serde_json::to_string(&report)?)?;
    } else if args.json {
        emit_json(&report)?;
    } else {
        emit(&text::render(&verdicts, &collected.notes, collected.files))?;
        emit(&text::render_connections(&connections))?;
        if args.baseline_variant.is_none() {
            outln!("(no baseline compared: --baseline-variant VARIANT compares with the history)")?;
        }
    }
    let slow_connection = connections
        .iter()
        .any(|c| c.culprit.is_some() || !c.slow_pairs.is_empty());
    Ok(
        if slow_connection || verdicts.iter().any(|v| !v.findings.is_empty()) {
            ExitStatus::Problem
        } else if verdicts.iter().any(|v| v.judged)
            || connections.iter().any(|c| c.unjudged.is_none())
        {
            ExitStatus::Ok
        } else {
            ExitStatus::CouldNotRun
        },
    )
}

/// One step inside `job`, one task per node, each reading its node's dump folder
/// (`gpudirect agent watch`); their samples and notes into `collected`, each rank's
/// connections over the window returned.
fn ask_the_jobs_nodes(
    job: u32,
    args: &WatchArgs,
    collected: &mut Collected,
) -> Result<Vec<links::RankLinks>> {
    let info = slurm::job_info(job)
        .with_context(|| format!("gpudirect watch: cannot look up job {job}"))?;
    if info.state != "RUNNING" {
        bail!(
            "job {job} is {}, not RUNNING: only a running job writes dumps",
            info.state
        );
    }
    let (Some(nodes), Some(uid)) = (info.nodes.clone(), info.user_id) else {
        bail!("job {job}: scontrol names no nodes or no user for it");
    };
    let me = nix::unistd::geteuid().as_raw();
    if me != 0 && me != uid {
        // Slurm would refuse the agent step anyway; say why before asking it.
        bail!(
            "job {job} is uid {uid}'s, not yours (uid {me}): you may watch only your own jobs \
             (root may watch any, and reads a node's folder with --dumps)"
        );
    }
    let job_nodes = gpudirect_core::hostlist::expand(&nodes)
        .with_context(|| format!("job {job}: its node list `{nodes}` is not a hostlist"))?;
    let agent: Vec<OsString> = vec![
        "watch".into(),
        job.to_string().into(),
        "--uid".into(),
        uid.to_string().into(),
        "--window".into(),
        format!("{}ms", args.window.as_millis()).into(),
        "--config".into(),
        args.config.path.clone().into(),
    ];
    let step = AgentStep {
        within_job: Some(job),
        as_user: info.step_user(nix::unistd::geteuid().as_raw()),
        // Nothing of ours in the job's environment: the agent only reads.
        ..AgentStep::per_node(&job_nodes, StepProfile::Nothing, agent)
    };
    let cap = (64usize << 20).saturating_mul(job_nodes.len()).min(1 << 30);
    let asked = ask_nodes_capped(&step.job()?, read_agent_lines, &AtomicBool::new(false), cap)?;
    for line in &asked.unreadable {
        let start: String = line.chars().take(200).collect();
        collected
            .notes
            .push(format!("an agent's line could not be read: {start}"));
    }
    let answered: Vec<&str> = asked.answers.iter().map(|d| d.node.as_str()).collect();
    for node in job_nodes.iter().filter(|n| !answered.contains(&n.as_str())) {
        collected
            .notes
            .push(format!("{node}: no answer from its agent"));
    }
    let mut rank_links = Vec::new();
    for dumps in asked.answers {
        collected.files += dumps.files;
        collected.notes.extend(dumps.notes);
        collected.samples.extend(dumps.samples);
        rank_links.extend(dumps.links);
    }
    Ok(rank_links)
}

/// The history's median busbw for each (collective, size) the samples hold, on runs of
/// `--baseline-variant` with the communicator's node and rank counts.
fn baselines(args: &WatchArgs, ctx: &Ctx, samples: &[Sample]) -> Result<Baselines> {
    let mut baselines = Baselines {
        tolerance_pct: args.tolerance,
        ..Baselines::default()
    };
    let Some(variant) = &args.baseline_variant else {
        return Ok(baselines);
    };
    let history = ctx.open_history()?;
    for s in samples {
        let key = (s.coll.clone(), s.bytes);
        if baselines.busbw.contains_key(&key) {
            continue;
        }
        let Some(collective) = nccl_tests_name(&s.coll) else {
            continue;
        };
        let run_key = RunKey {
            collective: collective.to_string(),
            cluster: slurm::cluster_name(args.cluster.as_deref()),
            node_count: Some(s.n_nodes),
            total_ranks: Some(s.n_ranks),
            variant: Some(variant.clone()),
        };
        let size = nccl_tests_size(&s.coll, s.bytes, s.n_ranks);
        if let Some(found) = history.baseline(&run_key, size, 10)? {
            let at = if size == s.bytes {
                String::new()
            } else {
                format!(" at nccl-tests' size {size} B")
            };
            let from = format!(
                "median of {} {collective} run(s) of variant {variant} on {} node(s){at}",
                found.samples.len(),
                s.n_nodes
            );
            baselines.busbw.insert(key, (found.median_busbw, from));
        }
    }
    Ok(baselines)
}

/// The size nccl-tests records for a collective whose Inspector sample says `bytes`. The
/// Inspector gives each rank's own part (its `coll_msg_size_bytes` is NCCL's count times the
/// type's size, and it multiplies by the rank count itself for the busbw of an AllGather or
/// a ReduceScatter, `inspectorComputeOpBw`); nccl-tests names those two by the whole buffer.
/// In the recorded dumps (`tests/fixtures/nccl-inspector/clean`) an AllGather of 16 MiB per
/// rank over 2 ranks says 16777216 bytes, its algbw over 32 MiB: nccl-tests' 32 MiB row.
fn nccl_tests_size(coll: &str, bytes: u64, n_ranks: u32) -> u64 {
    match coll {
        "AllGather" | "ReduceScatter" => bytes.saturating_mul(u64::from(n_ranks)),
        _ => bytes,
    }
}

/// nccl-tests' name of an NCCL collective (`AllReduce` -> `all_reduce`).
fn nccl_tests_name(coll: &str) -> Option<&'static str> {
    Some(match coll {
        "AllReduce" => "all_reduce",
        "AllGather" => "all_gather",
        "ReduceScatter" => "reduce_scatter",
        "Broadcast" => "broadcast",
        "Reduce" => "reduce",
        "AllToAll" => "alltoall",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allgather_is_looked_up_at_nccl_tests_whole_buffer_size() {
        assert_eq!(nccl_tests_size("AllGather", 16 << 20, 4), 64 << 20);
        assert_eq!(nccl_tests_size("ReduceScatter", 1 << 20, 8), 8 << 20);
        assert_eq!(nccl_tests_size("AllReduce", 64 << 20, 4), 64 << 20);
        assert_eq!(nccl_tests_size("Broadcast", 4 << 20, 4), 4 << 20);
    }
}
