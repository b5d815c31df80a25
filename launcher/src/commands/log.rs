//! `gpudirect log FILE...`: which transport and NIC each communicator of a job really used,
//! from its NCCL log, judged against the profile (`gpudirect::job_log` reads and judges).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use gpudirect::job_log::input::{read_input, Input, InputRead};
use gpudirect::job_log::{judge, text, ProfileChoice};
use gpudirect::nccl_output::joblog::{JobLogReader, Limits};
use gpudirect::output::{emit_json, shown_text};
use gpudirect::profile::Choice;
use gpudirect::{noteln, outln};
use gpudirect_core::config::Mode;

use super::args::ConfigArg;
use super::{Ctx, ExitStatus};

/// Read a job's NCCL log: each communicator's ranks, nodes, transport and NICs, judged
/// against the profile.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect log slurm-4242.out                  # one file for the whole job (srun's)\n  \
    gpudirect log rank*.log --gpudirect tcpx      # one file per rank, judged by profile tcpx\n  \
    zcat job.log.gz | gpudirect log -             # stdin (a .gz file is also read as is)\n  \
    gpudirect log -v slurm-4242.out               # each rank's links, plugins, variables\n\n\
    Run the job with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS, if you set it, including INIT \
    and NET): NCCL then prints, per rank, the NICs it may use (`NET/Socket : Using [0]eth1`) \
    and the path of each channel (`via NET/IB/0/GDRDMA`). Lines may carry torchrun's \
    `[rankN]:`, srun -l's `N: `, mpirun's tags and timestamps, between the program's own \
    lines.\n\n\
    The verdict: every link that leaves a node uses the profile's transport, and each \
    rank's GPU its own NIC (the profile's gpu_nics, by the node's GPU number). Without \
    --gpudirect each rank is judged by its node's node set in the config. NCCL errors, \
    timeouts and torch's watchdog lines are findings too, with their ranks and nodes.\n\n\
    Exit status: 0 nothing wrong (what could not be judged is said); 1 a finding; 3 no \
    input could be read, or no NCCL line in it.")]
pub struct LogArgs {
    /// The job's output: one file, or one per rank. `-`, or no file, reads stdin. Gzip
    /// data is decompressed.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// The profile to judge by: a profile's name, `none` (no verdict, only the reading), or
    /// `auto` (each rank's node set's profile in the config).
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub gpudirect: String,

    #[command(flatten)]
    pub config: ConfigArg,

    /// Print the reading and the verdict as JSON.
    #[arg(long)]
    pub json: bool,

    /// Bytes read from each input at most, after decompression (a gzip bomb stops there);
    /// what is cut is said.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 30)]
    pub max_bytes: u64,

    /// Lines read from each input at most; what is cut is said.
    #[arg(long, value_name = "LINES", default_value_t = 1 << 30)]
    pub max_lines: u64,
}

/// `gpudirect log`.
pub fn run(args: &LogArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let inputs: Vec<Input> = match args.files.is_empty() {
        true => vec![Input::Stdin],
        false => args.files.iter().map(|f| Input::from_arg(f)).collect(),
    };
    // The config only says what to expect (Choice reads it with no ownership rule), and a
    // relative --config is the user's own draft.
    let path = std::path::absolute(&args.config.path).unwrap_or(args.config.path.clone());
    let (choice, config) = match Choice::load(&path, &args.gpudirect) {
        Ok(choice) => (ProfileChoice::from(&choice.mode), choice.into_config()),
        // Each rank's node set's profile, from a config that cannot say: only the reading.
        Err(e) if Mode::from_word(&args.gpudirect) == Mode::Auto => {
            noteln!("gpudirect log: no verdict against a profile: {e}");
            (ProfileChoice::NodeSets, None)
        }
        Err(e) => return Err(e.into()),
    };
    let mut reader = JobLogReader::new(Limits {
        max_input_bytes: args.max_bytes,
        max_lines: args.max_lines,
        ..Limits::default()
    });
    let mut read: Vec<InputRead> = Vec::with_capacity(inputs.len());
    // What the budgets cut (security review T7): on stderr as it happens, and in the report.
    let mut cuts: Vec<String> = Vec::new();
    for (source, input) in inputs.iter().enumerate() {
        let done = read_input(input, source, &mut reader)?;
        for cut in done.cuts(reader.limits().max_line) {
            noteln!("gpudirect log: {cut}");
            cuts.push(cut);
        }
        read.push(done);
    }
    let mut log = reader.finish();
    log.dropped.extend(cuts);
    // A log of only torch's watchdog and NCCL error lines is a job with trouble (rule T1).
    if log.nccl_lines == 0 && log.events.is_empty() {
        let names: Vec<&str> = read.iter().map(|r| r.name.as_str()).collect();
        anyhow::bail!(
            "no NCCL line in {} ({} lines read): run the job with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS, if set, must include INIT and NET), or give its stdout/stderr",
            names.join(", "),
            log.lines
        );
    }
    let judgement = judge(&log, config.as_ref(), &choice);
    let status = match judgement.has_findings() {
        true => ExitStatus::Problem,
        false => ExitStatus::Ok,
    };
    if args.json {
        emit_json(&serde_json::json!({
            "inputs": read,
            "log": log,
            "verdict": judgement,
            "exit": status.code(),
        }))?;
        return Ok(status);
    }
    // The log's text is its writer's: escape sequences in it are shown, not sent (T2).
    for line in text::render(&log, &judgement, ctx.verbose > 0) {
        outln!("{}", shown_text(&line))?;
    }
    outln!(
        "{}",
        shown_text(&text::summary(&log, &judgement, status.code()))
    )?;
    Ok(status)
}
