//! `gpudirect epilog`: what slurmd's Epilog runs on each node when a job ends, through the
//! shipped wrapper (`slurm-conf/epilog`): removes what gpudirect-slurm left there for the
//! job, today its telemetry folder (`[watch]`).

use anyhow::Result;
use clap::Args;
use gpudirect::watch::{remove_job_folder, Cleanup};
use gpudirect::{noteln, outln};
use gpudirect_core::system::{load_config, Ownership};

use super::args::ConfigArg;
use super::{Ctx, ExitStatus};

/// Arguments of `gpudirect epilog`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    Epilog=/usr/lib/gpudirect-slurm/epilog        # slurm.conf: the shipped wrapper runs this\n  \
    gpudirect epilog --job 4242 --uid 1001          # by hand, for a job that ended\n\n\
    slurmd runs its Epilog as root on every node of a job that ended, with SLURM_JOB_ID and\n\
    SLURM_JOB_UID set. This removes the job's telemetry folder, <dump_root>/gpudirect-watch-JOBID\n\
    of the config's [watch] table, which the plugin made for a job that asked for telemetry:\n\
    only a real folder that belongs to the job's user, its contents without following links.\n\
    A link or another user's folder in its place is left and named. Without [watch] it does\n\
    nothing. Exit status: 0 removed or nothing to do, 1 something left (named), 3 could not\n\
    run (no job, an unreadable config). The wrapper exits 0 whatever this says, since slurmd\n\
    drains a node whose Epilog fails, and logs what it said.")]
pub struct EpilogArgs {
    /// The admin config (as root: only one that root owns and nobody else can write).
    #[command(flatten)]
    pub config: ConfigArg,

    /// The job that ended (slurmd gives its Epilog SLURM_JOB_ID).
    #[arg(long, value_name = "JOBID", env = "SLURM_JOB_ID")]
    pub job: Option<u32>,

    /// Its user's uid: only a folder of theirs is removed (slurmd gives SLURM_JOB_UID).
    #[arg(long, value_name = "UID", env = "SLURM_JOB_UID")]
    pub uid: Option<u32>,
}

/// `gpudirect epilog`.
pub fn run(args: &EpilogArgs, _ctx: &Ctx) -> Result<ExitStatus> {
    let (Some(job), Some(uid)) = (args.job, args.uid) else {
        noteln!(
            "gpudirect epilog: no job: slurmd gives its Epilog SLURM_JOB_ID and SLURM_JOB_UID; by hand, pass --job JOBID --uid UID"
        );
        return Ok(ExitStatus::CouldNotRun);
    };
    // As root it removes things: the config that says where must be root's alone.
    let config = match load_config(&args.config.path, Ownership::for_caller()) {
        Ok(config) => config,
        Err(e) => {
            noteln!("gpudirect epilog: job {job}: {e}: its telemetry folder, if any, is left");
            return Ok(ExitStatus::CouldNotRun);
        }
    };
    let Some(watch) = &config.watch else {
        return Ok(ExitStatus::Ok);
    };
    let folder = watch.dump_dir(job);
    Ok(
        match remove_job_folder(std::path::Path::new(&folder), uid) {
            Cleanup::Removed => {
                outln!("job {job}: removed its telemetry folder {folder}")?;
                ExitStatus::Ok
            }
            Cleanup::Absent => ExitStatus::Ok,
            Cleanup::Kept(why) => {
                noteln!("gpudirect epilog: job {job}: {why}");
                ExitStatus::Problem
            }
        },
    )
}
