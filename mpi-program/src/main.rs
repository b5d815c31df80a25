//! `gpudirect-mpi`: the part of gpudirect that speaks MPI, started by `srun --mpi=pmix` (or
//! mpirun) inside an allocation. Every subcommand first checks that the MPI world is the
//! Slurm step ([`gpudirect_wire::rails::check_world`]).
//!
//! - `check`: the world check alone.
//! - `facts`: each task's facts ([`gpudirect_wire::task_report::TaskReport`]) gathered to rank 0 over
//!   MPI and printed there, one line per task (`gpudirect probe --mpi`).
//! - `pair --rail NIC`: two tasks on two nodes measure host-memory bandwidth each way and
//!   latency over that NIC; rank 0 prints one [`gpudirect_wire::rails::RailMeasurement`] line.
//!   The launcher binds the transport to the NIC (`gpudirect::validate::rails::transport_env`).
//!
//! What this program checks, prints and exits with is the contract in `gpudirect-wire`,
//! which both sides link: this program links it, not the launcher.
//!
//! Messages for the person go to stderr and start with `gpudirect-mpi:`, which the launcher
//! quotes as the reason a pair failed.

// A binary: anyhow with context, which the libraries may not use (clippy.toml).
#![allow(clippy::disallowed_types, clippy::disallowed_macros)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Parser, Subcommand};
use gpudirect_core::system::{load_config, slurm_node_name, Ownership};
use gpudirect_wire::rails::{
    check_launch, check_world, rail_state, RailMeasurement, StepEnv, CONNECT_TIMEOUT,
    EXIT_NO_CONNECTION, EXIT_RAIL_DOWN, EXIT_WORLD_MISMATCH, MPI_STARTED, NO_CONNECTION,
};
use gpudirect_wire::task_report::TaskReport;
use gpudirect_wire::units::size_arg;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

/// The MPI side of gpudirect (launched by `gpudirect probe --mpi` and `gpudirect validate
/// --test rails`; it can be run by hand with `srun --mpi=pmix gpudirect-mpi ...`).
#[derive(Debug, Parser)]
#[command(name = "gpudirect-mpi", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check that the MPI world is this Slurm step (one world, every task a rank).
    Check,
    /// Gather every task's facts to rank 0 over MPI and print them there, one JSON line each.
    Facts {
        /// The admin config the profile comes from.
        #[arg(
            long,
            env = "GPUDIRECT_CONFIG",
            default_value = gpudirect_core::system::DEFAULT_CONFIG
        )]
        config: PathBuf,
        /// The --gpudirect mode the tasks are checked against.
        #[arg(long)]
        gpudirect: Option<String>,
    },
    /// Measure bandwidth each way and latency between the two tasks over one NIC.
    Pair {
        /// The NIC the transport is bound to (checked up before MPI starts).
        #[arg(long)]
        rail: String,
        /// Message size (8, 64K, 16M, "1 GiB").
        #[arg(long, default_value = "16M", value_parser = size_arg)]
        size: u64,
        /// About how long each direction sends, in seconds (at least 2 messages are sent).
        #[arg(long, default_value_t = 0.5)]
        seconds: f64,
    },
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("gpudirect-mpi: {}: {message}", slurm_node_name());
    // srun ends the step as soon as a task fails (--kill-on-bad-exit), and the line above
    // can be lost on the way to srun when the step is torn down at once (seen on the local
    // cluster): give it a moment to arrive, since it is the reason the launcher reports.
    std::thread::sleep(std::time::Duration::from_millis(300));
    ExitCode::from(code)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before MPI starts: a dead rail is named by the node that has it, and MPI never tries
    // to reach the partner over it.
    if let Command::Pair { rail, .. } = &cli.command {
        if let Err(why) = rail_state(std::path::Path::new("/sys/class/net"), rail) {
            return fail(EXIT_RAIL_DOWN as u8, &why);
        }
    }
    let step = StepEnv::from_process();
    if let Err(why) = check_launch(&step) {
        return fail(EXIT_WORLD_MISMATCH as u8, &why);
    }
    let Some(universe) = mpi::initialize() else {
        return fail(3, "MPI was already initialised");
    };
    let world = universe.world();
    let (size, rank) = (world.size() as u32, world.rank() as u32);
    if let Err(why) = check_world(&step, size, rank) {
        return fail(EXIT_WORLD_MISMATCH as u8, &why);
    }
    let result = match cli.command {
        Command::Check => {
            if rank == 0 {
                println!("gpudirect-mpi: the MPI world is this step: {size} rank(s)");
            }
            Ok(())
        }
        Command::Facts { config, gpudirect } => facts(&world, &config, gpudirect.as_deref()),
        Command::Pair {
            rail,
            size: bytes,
            seconds,
        } => {
            if rank == 0 {
                // The launcher's start-up deadline waits for this line (MPI_STARTED).
                println!("{MPI_STARTED}");
            }
            pair(&world, &rail, bytes, seconds)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, &format!("{e:#}")),
    }
}

/// Every rank's report, gathered to rank 0 and printed there in rank order.
fn facts(
    world: &SimpleCommunicator,
    config: &std::path::Path,
    mode: Option<&str>,
) -> anyhow::Result<()> {
    let config = load_config(config, Ownership::Any).ok();
    let report = TaskReport::collect(config.as_ref(), mode);
    let line = serde_json::to_vec(&report)?;
    if world.rank() == 0 {
        println!("{}", String::from_utf8_lossy(&line));
        for r in 1..world.size() {
            let (bytes, _) = world.process_at_rank(r).receive_vec::<u8>();
            println!("{}", String::from_utf8_lossy(&bytes));
        }
    } else {
        world.process_at_rank(0).send(&line[..]);
    }
    Ok(())
}

/// Ping-pongs of an 8-byte message after a warm-up (which also opens the connections).
const PING_PONGS: usize = 200;
const WARM_UP: usize = 20;
/// The most messages one direction sends, however fast the rail.
const MAX_MESSAGES: u32 = 10_000;

fn pair(world: &SimpleCommunicator, rail: &str, size: u64, seconds: f64) -> anyhow::Result<()> {
    if world.size() != 2 {
        anyhow::bail!(
            "`pair` measures between exactly 2 tasks, this world has {}: srun -N2 --ntasks-per-node=1",
            world.size()
        );
    }
    let me = world.rank();
    let other = world.process_at_rank(1 - me);
    let size = usize::try_from(size)?;

    // The first message opens the connection over the rail; see CONNECT_TIMEOUT for why it
    // is watched.
    let connected = Arc::new(AtomicBool::new(false));
    let watched = connected.clone();
    let rail_name = rail.to_string();
    std::thread::spawn(move || {
        std::thread::sleep(CONNECT_TIMEOUT);
        if !watched.load(Ordering::SeqCst) {
            eprintln!(
                "gpudirect-mpi: {}: {NO_CONNECTION} over {rail_name} within {}s",
                slurm_node_name(),
                CONNECT_TIMEOUT.as_secs()
            );
            // As in fail(): a moment for the line to reach srun before the step is torn down.
            std::thread::sleep(std::time::Duration::from_millis(300));
            // Not exit(): the main thread is inside MPI, whose exit handlers could wait on it.
            // SAFETY: _exit ends the process at once; nothing of ours is left half-written
            // (stderr is unbuffered).
            unsafe { libc::_exit(EXIT_NO_CONNECTION) }
        }
    });

    // Host names, so that the line says which node was which rank.
    let mine = slurm_node_name().into_bytes();
    let theirs = if me == 0 {
        other.send(&mine[..]);
        other.receive_vec::<u8>().0
    } else {
        let (v, _) = other.receive_vec::<u8>();
        other.send(&mine[..]);
        v
    };
    let theirs = String::from_utf8_lossy(&theirs).into_owned();
    connected.store(true, Ordering::SeqCst);

    let latency_us = latency(world);
    let mut buffer = vec![0x5au8; size];
    let (forward, messages) = one_way(world, 0, &mut buffer, seconds);
    let (backward, _) = one_way(world, 1, &mut buffer, seconds);
    // Rank 1 timed the backward direction: rank 0 needs its figure.
    let backward = if me == 1 {
        other.send(&backward);
        backward
    } else {
        let (b, _) = other.receive::<f64>();
        b
    };
    if me == 0 {
        let line = RailMeasurement {
            gpudirect_rail: 1,
            rail: rail.to_string(),
            hosts: [String::from_utf8_lossy(&mine).into_owned(), theirs],
            size_bytes: size as u64,
            messages,
            forward_gbps: forward,
            backward_gbps: backward,
            latency_us: latency_us.unwrap_or(f64::NAN),
        };
        println!("{}", serde_json::to_string(&line)?);
    }
    Ok(())
}

/// Median half round trip of an 8-byte ping-pong, in microseconds (rank 0's reading).
fn latency(world: &SimpleCommunicator) -> Option<f64> {
    let me = world.rank();
    let other = world.process_at_rank(1 - me);
    let ping = [0u64];
    let mut pong = [0u64];
    let mut halves = Vec::with_capacity(PING_PONGS);
    for i in 0..WARM_UP + PING_PONGS {
        let t0 = mpi::time();
        if me == 0 {
            other.send(&ping[..]);
            other.receive_into(&mut pong[..]);
        } else {
            other.receive_into(&mut pong[..]);
            other.send(&ping[..]);
        }
        if i >= WARM_UP {
            halves.push((mpi::time() - t0) * 1e6 / 2.0);
        }
    }
    halves.sort_by(f64::total_cmp);
    halves.get(halves.len() / 2).copied()
}

/// `sender` sends messages of `buffer`'s size to the other rank for about `seconds` (at
/// least 2), and the receiver answers the last with a one-byte ack. Returns the sender's
/// reading of the bandwidth in GB/s (0 on the receiver) and the number of messages.
fn one_way(world: &SimpleCommunicator, sender: i32, buffer: &mut [u8], seconds: f64) -> (f64, u32) {
    let me = world.rank();
    let other = world.process_at_rank(1 - me);
    let ack = [1u8];
    let mut got_ack = [0u8];
    // One timed message sets the count for the rest, so a slow rail takes seconds, not
    // minutes, and a fast one is measured over enough messages.
    let messages: u32 = if me == sender {
        let t0 = mpi::time();
        other.send(&buffer[..]);
        other.receive_into(&mut got_ack[..]);
        let once = (mpi::time() - t0).max(1e-6);
        let count = ((seconds / once) as u32).clamp(2, MAX_MESSAGES);
        other.send(&count);
        count
    } else {
        other.receive_into(&mut buffer[..]);
        other.send(&ack[..]);
        other.receive::<u32>().0
    };
    world.barrier();
    if me == sender {
        let t0 = mpi::time();
        for _ in 0..messages {
            other.send(&buffer[..]);
        }
        other.receive_into(&mut got_ack[..]);
        let elapsed = (mpi::time() - t0).max(1e-9);
        let bytes = buffer.len() as f64 * f64::from(messages);
        (bytes / elapsed / 1e9, messages)
    } else {
        for _ in 0..messages {
            other.receive_into(&mut buffer[..]);
        }
        other.send(&ack[..]);
        (0.0, messages)
    }
}
