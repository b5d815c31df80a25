//! `nccl-tests-standin`: a STAND-IN for the GPU-only nccl-tests `*_perf` binaries, for CPU
//! tests only. It replays a real output recorded on 2xH200 (`tests/fixtures/nccl-tests/`),
//! exit code included; it measures nothing.
//!
//! Install it under the real names (`all_reduce_perf -> nccl-tests-standin`) in a folder and
//! point `--nccl-tests-dir` at it. On each call it:
//! - takes the collective from its own name (`all_reduce_perf`, `all_reduce_perf_mpi`);
//! - finds the recording whose command has the same flags and values (the `-J` path may
//!   differ) and whose recorded environment (`NCCL_ALGO=Ring`, `NCCL_P2P_DISABLE=1`, ...)
//!   the caller's environment satisfies, preferring the one that matches most; `NCCL_DEBUG`
//!   only breaks ties, since the launcher always asks for it;
//! - fails with exit code 6 (nccl-tests' "invalid usage") and a message listing what was
//!   recorded when nothing matches: a test can never get output for a command it did not
//!   give;
//! - on rank 0 (`SLURM_PROCID`, `OMPI_COMM_WORLD_RANK` or `PMIX_RANK`; none means 0) prints
//!   a `# nccl-tests STAND-IN` line naming the recording, then the recording, and writes
//!   its JSON twin to the `-J` path; other ranks print nothing, as real ranks do.
//!
//! Test hooks (never set in production): `STANDIN_RECORDING=<file>` forces a recording;
//! `STANDIN_HANG_RANKS=0,3` makes those ranks sleep forever (a hung rank);
//! `STANDIN_HANG_COLLECTIVES=all_gather` makes every rank of those collectives hang;
//! `STANDIN_NO_START_NODES=node3` makes every rank of a step that runs on one of those nodes
//! sleep forever before printing anything: a STAND-IN for a launch that hangs before NCCL
//! starts (srun's PMIx wire-up, MPI_Init; issue #45), which the launcher must call "could
//! not start", not a slow or failed node (the step's nodes: `SLURM_STEP_NODELIST`); an
//! entry `node3:eth2` does so only with NCCL held to eth2, as `STANDIN_SLOW_RAILS` reads it;
//! `STANDIN_SLOW_NODES=node2` replays `h200x2-degraded/all_reduce_g2_load_matmul_gpu1.txt`
//! (a GPU slowed by a competing load, about 47% of the clean busbw) when the command matches
//! it and the step runs on one of those nodes: one slow node slows the whole collective,
//! as it does for real. `STANDIN_SLOW_GPUS=2` does the same when CUDA_VISIBLE_DEVICES
//! names GPU 2 (`gpudirect validate --gpus`). `STANDIN_SLOW_RAILS=node3:eth2` does the same
//! when the step runs on node3 with NCCL held to eth2 alone (`NCCL_SOCKET_IFNAME`,
//! `NCCL_GPUDIRECTTCPX_SOCKET_IFNAME` or `NCCL_IB_HCA` is `eth2`: `validate --per-rail`).
//! `STANDIN_CYCLE_DIR=<dir>`: where several recordings fit equally well (the rounds `_r1`,
//! `_r2`, `_r3` of one setting), replay them in turn, keeping a counter per group in that
//! folder, so that repeated runs show the recorded run-to-run noise (`gpudirect tune`);
//! unset, the first one is always replayed. `STANDIN_SECONDS=0.5` sleeps that long before
//! replaying, for tests of time budgets.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The marker the launcher looks for to record a run as a replay, not a measurement.
const MARKER: &str = "# nccl-tests STAND-IN";

/// nccl-tests' exit code for invalid usage.
const EXIT_USAGE: u8 = 6;

struct Recording {
    file: String,
    exit_code: u8,
    env: BTreeMap<String, String>,
    binary: String,
    args: Vec<String>,
}

fn fixtures_dir() -> PathBuf {
    std::env::var_os("STANDIN_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nccl-tests")
        })
}

/// Reads manifest.tsv: `file  exit_code  env  command`.
fn read_manifest(dir: &Path) -> Result<Vec<Recording>, String> {
    let path = dir.join("manifest.tsv");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut recordings = Vec::new();
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split('\t').collect();
        let [file, exit_code, env, command] = fields[..] else {
            continue;
        };
        // Only text outputs are replayed; the JSON twin is found by name.
        if !file.ends_with(".txt") {
            continue;
        }
        let Some((binary, args)) = perf_command(command) else {
            continue;
        };
        recordings.push(Recording {
            file: file.to_string(),
            exit_code: exit_code.parse().unwrap_or(1),
            env: env_requirements(env),
            binary,
            args,
        });
    }
    Ok(recordings)
}

/// The `*_perf` binary and its arguments in a recorded command line (after any mpirun
/// and wrapper words), without a trailing `(comment)`.
fn perf_command(command: &str) -> Option<(String, Vec<String>)> {
    let command = command.split("  (").next().unwrap_or(command);
    let words: Vec<&str> = command.split_whitespace().collect();
    let at = words.iter().position(|w| collective_of(w).is_some())?;
    let binary = collective_of(words[at])?;
    Some((
        binary,
        words[at + 1..].iter().map(|w| w.to_string()).collect(),
    ))
}

/// `all_reduce_perf_mpi` or `/x/all_reduce_perf` -> `all_reduce`.
fn collective_of(word: &str) -> Option<String> {
    let base = word.rsplit('/').next().unwrap_or(word);
    let stem = base.strip_suffix("_mpi").unwrap_or(base);
    stem.strip_suffix("_perf").map(str::to_string)
}

/// `NCCL_ALGO=Ring NCCL_PROTO=Simple` -> the variables; prose in the column is ignored, and
/// so is what follows `;` (notes on per-rank settings the recording's wrapper made).
fn env_requirements(env: &str) -> BTreeMap<String, String> {
    let env = env.split(';').next().unwrap_or_default();
    env.split(char::is_whitespace)
        .filter_map(|word| word.split_once('='))
        .filter(|(k, _)| {
            !k.is_empty()
                && k.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        })
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect()
}

/// Flags and values, with `-J`'s path left out, in a canonical order.
fn canonical_args(args: &[String]) -> (Vec<(String, String)>, Option<String>) {
    let mut pairs = Vec::new();
    let mut json = None;
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        let value = match iter.peek() {
            Some(v) if !v.starts_with('-') || v.parse::<f64>().is_ok() => iter.next().cloned(),
            _ => None,
        };
        if arg == "-J" {
            json = value;
        } else {
            pairs.push((arg.clone(), value.unwrap_or_default()));
        }
    }
    pairs.sort();
    (pairs, json)
}

fn is_debug_var(name: &str) -> bool {
    name == "NCCL_DEBUG" || name == "NCCL_DEBUG_SUBSYS"
}

/// How well a recording's environment fits ours: `None` when it needs a variable we lack.
fn env_score(recording: &Recording, env: &dyn Fn(&str) -> Option<String>) -> Option<usize> {
    let mut score = 0;
    for (name, value) in &recording.env {
        let ours = env(name);
        if ours.as_deref() == Some(value.as_str()) {
            score += if is_debug_var(name) { 1 } else { 10 };
        } else if !is_debug_var(name) {
            return None;
        }
    }
    Some(score)
}

fn rank() -> u32 {
    ["SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(0)
}

fn host() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// The nodes of this step (of the job outside a step; this host outside Slurm).
fn step_nodes() -> Vec<String> {
    std::env::var("SLURM_STEP_NODELIST")
        .or_else(|_| std::env::var("SLURM_JOB_NODELIST"))
        .ok()
        .and_then(|list| gpudirect_core::hostlist::expand(&list).ok())
        .unwrap_or_else(|| vec![host()])
}

/// Whether this step runs on a node listed in the variable `var` (`node2,node3`).
fn step_on_a_node_of(var: &str) -> bool {
    let Ok(listed) = std::env::var(var) else {
        return false;
    };
    let step_nodes = step_nodes();
    listed
        .split(',')
        .map(str::trim)
        .any(|s| step_nodes.iter().any(|n| n == s))
}

/// Whether this step runs on a node of `var` (`node:nic,...`: `STANDIN_SLOW_RAILS`,
/// `STANDIN_NO_START_NODES`) with NCCL held to that node's NIC.
fn step_on_a_rail_of(var: &str) -> bool {
    let Ok(slow) = std::env::var(var) else {
        return false;
    };
    let held_to = |nic: &str| {
        [
            "NCCL_SOCKET_IFNAME",
            "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME",
            "NCCL_IB_HCA",
        ]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|value| value == nic))
    };
    let step_nodes = step_nodes();
    slow.split(',')
        .filter_map(|s| s.trim().split_once(':'))
        .any(|(node, nic)| held_to(nic) && step_nodes.iter().any(|n| n == node))
}

/// Whether the comma-separated lists in two variables share an item.
fn in_both_lists(a: &str, b: &str) -> bool {
    let Ok(first) = std::env::var(a) else {
        return false;
    };
    first.split(',').any(|item| in_list(b, item.trim()))
}

fn in_list(var: &str, item: &str) -> bool {
    std::env::var(var)
        .map(|list| list.split(',').any(|x| x.trim() == item))
        .unwrap_or(false)
}

/// `dir/name_r2.txt` -> `dir/name`: the recording without its round.
fn round_stem(file: &str) -> &str {
    let stem = file.strip_suffix(".txt").unwrap_or(file);
    match stem.rsplit_once("_r") {
        Some((base, round)) if !round.is_empty() && round.bytes().all(|b| b.is_ascii_digit()) => {
            base
        }
        _ => stem,
    }
}

/// The turn of this call among `equals` (0 the first time), counted in a file of `dir`
/// named after the group; rank 0 counts, other ranks read, so one multi-rank run is one
/// turn.
fn next_turn(dir: &Path, collective: &str, equals: &[&Recording]) -> usize {
    let group = equals
        .first()
        .map(|r| r.file.replace(['/', '.'], "_"))
        .unwrap_or_default();
    let counter = dir.join(format!("{collective}-{group}.turn"));
    let turn = std::fs::read_to_string(&counter)
        .ok()
        .and_then(|t| t.trim().parse::<usize>().ok())
        .unwrap_or(0);
    if rank() == 0 {
        let _ = std::fs::write(&counter, (turn + 1).to_string());
    }
    turn
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let me = argv.first().cloned().unwrap_or_default();
    // Before anything, as a launch stuck in PMIx or MPI_Init never reaches the program.
    if step_on_a_node_of("STANDIN_NO_START_NODES") || step_on_a_rail_of("STANDIN_NO_START_NODES") {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    let Some(collective) = collective_of(&me) else {
        eprintln!("nccl-tests stand-in: install me as <collective>_perf (I was called as {me})");
        return ExitCode::from(EXIT_USAGE);
    };
    let dir = fixtures_dir();
    let recordings = match read_manifest(&dir) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nccl-tests stand-in: {e} (set STANDIN_FIXTURES)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let (wanted, json_path) = canonical_args(&argv[1..]);
    let env = |name: &str| std::env::var(name).ok();
    let forced = std::env::var("STANDIN_RECORDING").ok();
    let slow = step_on_a_node_of("STANDIN_SLOW_NODES")
        || step_on_a_rail_of("STANDIN_SLOW_RAILS")
        || in_both_lists("STANDIN_SLOW_GPUS", "CUDA_VISIBLE_DEVICES");
    let chosen = recordings
        .iter()
        .filter(|r| r.binary == collective && canonical_args(&r.args).0 == wanted)
        .filter(|r| forced.as_deref().is_none_or(|f| r.file == f))
        .filter(|r| {
            r.file
                .starts_with("h200x2-degraded/all_reduce_g2_load_matmul_gpu1")
                == slow
        })
        .filter_map(|r| env_score(r, &env).map(|s| (s, r)))
        .collect::<Vec<_>>();
    let best = chosen.iter().map(|(s, _)| *s).max();
    let mut equals: Vec<&Recording> = chosen
        .iter()
        .filter(|(s, _)| Some(*s) == best)
        .map(|(_, r)| *r)
        .collect();
    equals.sort_by(|a, b| a.file.cmp(&b.file));
    // Only the rounds of one recording cycle: a combination of settings that several
    // recordings satisfy alike replays the rounds of the first, not a mix.
    if let Some(stem) = equals.first().map(|r| round_stem(&r.file).to_string()) {
        equals.retain(|r| round_stem(&r.file) == stem);
    }
    let recording = match std::env::var_os("STANDIN_CYCLE_DIR") {
        Some(dir) if equals.len() > 1 => {
            let turn = next_turn(Path::new(&dir), &collective, &equals);
            equals.get(turn % equals.len()).copied()
        }
        _ => equals.first().copied(),
    };
    let Some(recording) = recording else {
        let recorded: Vec<String> = recordings
            .iter()
            .filter(|r| r.binary == collective)
            .map(|r| format!("  {}_perf {}   ({})", r.binary, r.args.join(" "), r.file))
            .collect();
        eprintln!(
            "nccl-tests stand-in: no recording of `{}_perf {}` with this environment; recorded:\n{}",
            collective,
            argv[1..].join(" "),
            recorded.join("\n")
        );
        return ExitCode::from(EXIT_USAGE);
    };
    if let Some(seconds) = std::env::var("STANDIN_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
    {
        std::thread::sleep(std::time::Duration::from_secs_f64(seconds.min(3600.0)));
    }
    let me_rank = rank();
    if in_list("STANDIN_HANG_RANKS", &me_rank.to_string())
        || in_list("STANDIN_HANG_COLLECTIVES", &collective)
    {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    if me_rank == 0 {
        let text = match std::fs::read_to_string(dir.join(&recording.file)) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("nccl-tests stand-in: cannot read {}: {e}", recording.file);
                return ExitCode::from(EXIT_USAGE);
            }
        };
        println!(
            "{MARKER} replaying {} (recorded on 2xH200; not a measurement of this machine)",
            recording.file
        );
        print!("{text}");
        if let Some(path) = json_path {
            let twin = dir.join(recording.file.replace(".txt", ".json"));
            if twin.is_file() {
                if let Err(e) = std::fs::copy(&twin, &path) {
                    eprintln!("nccl-tests stand-in: cannot write {path}: {e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            }
        }
    }
    ExitCode::from(recording.exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn reads_recorded_commands() {
        let (bin, args) = perf_command(
            "mpirun --allow-run-as-root -np 2 -x NCCL_DEBUG=INFO ./all_reduce_perf_mpi -b 8 -e 4G -f 2 -g 1 -J x.json",
        )
        .unwrap();
        assert_eq!(bin, "all_reduce");
        assert_eq!(args, strings("-b 8 -e 4G -f 2 -g 1 -J x.json"));
        assert_eq!(
            perf_command("all_reduce_perf -b 8 -e 256M -f 2 -g 2  (nccl-tests 2.11.0)")
                .unwrap()
                .1,
            strings("-b 8 -e 256M -f 2 -g 2")
        );
    }

    #[test]
    fn arguments_match_in_any_order_and_ignore_the_json_path() {
        let a = canonical_args(&strings("-b 8 -e 4G -J /tmp/a.json -f 2 -g 1"));
        let b = canonical_args(&strings("-g 1 -f 2 -e 4G -b 8 -J other.json"));
        assert_eq!(a.0, b.0);
        assert_eq!(a.1.as_deref(), Some("/tmp/a.json"));
        assert_ne!(a.0, canonical_args(&strings("-b 8 -e 8G -f 2 -g 1")).0);
    }

    #[test]
    fn environment_requirements_choose_the_recording() {
        let rec = |env: &str| Recording {
            file: String::new(),
            exit_code: 0,
            env: env_requirements(env),
            binary: "all_reduce".into(),
            args: vec![],
        };
        let ring = rec("NCCL_ALGO=Ring NCCL_PROTO=Simple");
        let debug =
            rec("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET; per rank: own hostname a3h-00N");
        let plain = rec("");
        let none = |_: &str| None;
        let ring_env = |n: &str| match n {
            "NCCL_ALGO" => Some("Ring".to_string()),
            "NCCL_PROTO" => Some("Simple".to_string()),
            _ => None,
        };
        assert_eq!(env_score(&ring, &none), None);
        assert_eq!(env_score(&ring, &ring_env), Some(20));
        assert_eq!(
            env_score(&debug, &none),
            Some(0),
            "debug variables are optional"
        );
        assert_eq!(env_score(&plain, &none), Some(0));
        assert_eq!(debug.env.len(), 2, "{:?}", debug.env);
        assert!(!debug.env.contains_key("NCCL_HOSTID"));
    }

    #[test]
    fn rounds_of_one_recording_share_a_stem() {
        assert_eq!(
            round_stem("h200x2-tuning/all_reduce_g2_tree_r3.txt"),
            "h200x2-tuning/all_reduce_g2_tree"
        );
        assert_eq!(round_stem("a/all_reduce_run.txt"), "a/all_reduce_run");
        assert_ne!(
            round_stem("h200x2-tuning/all_reduce_g2_tree_r1.txt"),
            round_stem("h200x2-tuning/all_reduce_g2_ch32_r1.txt")
        );
    }

    #[test]
    fn the_manifest_in_the_repository_reads() {
        let recordings = read_manifest(&fixtures_dir()).unwrap();
        assert!(recordings.len() >= 40, "{}", recordings.len());
        assert!(recordings.iter().any(|r| r.exit_code == 255));
    }
}
