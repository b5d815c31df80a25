//! `gpudirect`: the launcher CLI. Parses the command line, sets up logging, runs one
//! subcommand (`commands/`) and turns how it ended into the exit code (`ExitStatus`). The
//! work itself lives in the `gpudirect` library (`src/lib.rs`).

// Commands print through the library's output/ (`outln!`, `noteln!`), never a print macro.
#![deny(clippy::print_stdout, clippy::print_stderr)]
// The commands use anyhow with context; the library does not (clippy.toml).
#![allow(clippy::disallowed_types, clippy::disallowed_macros)]

mod commands;

use std::io::{self, IsTerminal};
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::commands::{Cli, Ctx, ExitStatus};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    init_tracing(cli.verbose);
    let ctx = Ctx {
        db: cli.db,
        verbose: cli.verbose,
    };
    match commands::dispatch(cli.command, &ctx) {
        Ok(status) => status.into(),
        // `gpudirect history | head -1`: the reader left, which is not our failure.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            print_error_chain(&err);
            ExitStatus::CouldNotRun.into()
        }
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

/// Prints clap's message: `--help` and `--version` exit 0, a usage error is "could not
/// run" (3) like every other error before a command starts its work.
fn usage_error(err: &clap::Error) -> ExitCode {
    let printed = err.print();
    if !err.use_stderr() {
        return match printed {
            // `gpudirect --help | head -1` is still a success.
            Ok(()) => ExitCode::SUCCESS,
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(_) => ExitStatus::CouldNotRun.into(),
        };
    }
    ExitStatus::CouldNotRun.into()
}

/// The error and its causes, once, on stderr (a closed stderr is ignored: the exit code
/// still tells).
fn print_error_chain(err: &anyhow::Error) {
    use std::io::Write;
    let mut stderr = io::stderr().lock();
    let _ = writeln!(stderr, "error: {err}");
    for cause in err.chain().skip(1) {
        let _ = writeln!(stderr, "  caused by: {cause}");
    }
}

/// Whether the error is a write to a reader that went away, however it was wrapped:
/// serde_json keeps the `io::Error` of `to_writer` inside rather than as its source.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    let broken = |kind: Option<io::ErrorKind>| kind == Some(io::ErrorKind::BrokenPipe);
    err.chain().any(|cause| {
        broken(cause.downcast_ref::<io::Error>().map(io::Error::kind))
            || broken(
                cause
                    .downcast_ref::<serde_json::Error>()
                    .and_then(serde_json::Error::io_error_kind),
            )
    })
}
