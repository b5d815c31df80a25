//! `gpudirect`: the launcher CLI. Parses arguments and dispatches; the work lives in modules,
//! one per subcommand (`hostfile`, ...), each with its pure logic unit-tested beside it.

mod cli;
mod history_cmd;
mod hostfile;
mod import;
mod probe_cmd;
mod profiles;
mod report_cmd;
mod run_cmd;
mod validate_cmd;

use std::io::{self, IsTerminal};
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command, Globals};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    init_tracing(cli.verbose);
    let globals = Globals {
        db: cli.db,
        verbose: cli.verbose,
    };
    match dispatch(cli.command, &globals) {
        Ok(code) => ExitCode::from(code),
        // `gpudirect hostfile | head -1`: the reader left, which is not our failure.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            print_error_chain(&err);
            ExitCode::FAILURE
        }
    }
}

/// One arm per subcommand; each calls that module's `run`. The value is the exit status
/// (most commands: 0; `run` and `compare` say more through it).
fn dispatch(command: Command, globals: &Globals) -> anyhow::Result<u8> {
    let ok = |()| 0;
    match command {
        Command::Hostfile(args) => hostfile::run(&args, globals).map(ok),
        Command::Import(args) => import::run(&args, globals).map(ok),
        Command::Probe(args) => probe_cmd::run(&args, globals),
        Command::Run(args) => {
            run_cmd::run(&args, globals).map(|code| u8::try_from(code).unwrap_or(1))
        }
        Command::Profiles(args) => profiles::run(&args, globals).map(ok),
        Command::Report(args) => report_cmd::run(&args, globals).map(ok),
        // A health check reads validate's status: 1 is "degraded", so a validation that
        // could not run at all (no allocation, bad options) says 3, not the usual 1.
        Command::Validate(args) => validate_cmd::run(&args, globals).or_else(|err| {
            print_error_chain(&err);
            Ok(3)
        }),
        Command::History(args) => history_cmd::list::run(&args, globals).map(ok),
        Command::Show(args) => history_cmd::show::run(&args, globals).map(ok),
        Command::Compare(args) => history_cmd::compare::run(&args, globals).map(ok),
        Command::Export(args) => history_cmd::export::run(&args, globals).map(ok),
    }
}

/// Logs go to stderr so that stdout stays clean for hostfiles and `--json` output.
fn init_tracing(verbose: u8) {
    let filter = match verbose {
        0 => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        1 => EnvFilter::new("info"),
        2 => EnvFilter::new("debug"),
        _ => EnvFilter::new("trace"),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal())
        .with_target(false)
        .init();
}

/// Prints clap's message and exits as clap would (0 for --help/--version, 2 for a usage
/// error), except for `validate`, whose statuses a health check reads: there 2 means
/// "runs failed", so a usage error says 3, "could not run".
fn usage_error(err: &clap::Error) -> ExitCode {
    let _ = err.print();
    if !err.use_stderr() {
        return ExitCode::SUCCESS;
    }
    let subcommand = <Cli as clap::CommandFactory>::command()
        .ignore_errors(true)
        .try_get_matches()
        .ok()
        .and_then(|m| m.subcommand_name().map(str::to_string));
    ExitCode::from(if subcommand.as_deref() == Some("validate") {
        3
    } else {
        2
    })
}

fn print_error_chain(err: &anyhow::Error) {
    eprintln!("error: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}
