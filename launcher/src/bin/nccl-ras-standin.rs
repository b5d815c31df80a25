//! `nccl-ras-standin`: a STAND-IN for the RAS service inside NCCL processes, for CPU tests
//! only. It answers the RAS protocol with a real answer recorded on the lent H200
//! (`tests/fixtures/nccl-ras/`), edited by the test; it knows nothing about any job.
//!
//! `nccl-ras-standin --answer FILE [--seconds N] [--advance NAME] [--pid-dir DIR]`
//! - listens where NCCL's RAS would: `NCCL_RAS_ADDR` (`host:port`), else 127.0.0.1:28028;
//! - per connection reads the client's three lines (`CLIENT PROTOCOL 2`, `SET FORMAT json`,
//!   `STATUS`), then sends FILE as it is now (read again every time, so a test may rewrite it)
//!   and closes: FILE holds the whole answer, `SERVER PROTOCOL 2` and `OK` included;
//! - `--advance AllReduce` adds K to every rank's `AllReduce` count in its K-th answer, so
//!   counts move between polls (a job that is not hung);
//! - `--pid-dir DIR` writes its pid to `DIR/pid-<SLURM_PROCID>` once it listens, so a test
//!   can put the pids of its ranks into FILE;
//! - exits after `--seconds` (default 120): a test that forgets it leaves nothing behind.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let mut answer = None;
    let mut seconds = 120u64;
    let mut advance: Option<String> = None;
    let mut pid_dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--answer" => answer = args.next(),
            "--seconds" => seconds = args.next().and_then(|s| s.parse().ok()).unwrap_or(120),
            "--advance" => advance = args.next(),
            "--pid-dir" => pid_dir = args.next(),
            other => {
                eprintln!("nccl-ras-standin: unknown argument {other:?} (see the source's header)");
                return ExitCode::from(2);
            }
        }
    }
    let Some(answer) = answer else {
        eprintln!("nccl-ras-standin: --answer FILE is required");
        return ExitCode::from(2);
    };
    let addr = std::env::var("NCCL_RAS_ADDR").unwrap_or_else(|_| "127.0.0.1:28028".into());
    let listener = match TcpListener::bind(&addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("nccl-ras-standin: cannot listen on {addr}: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(dir) = pid_dir {
        let rank = std::env::var("SLURM_PROCID").unwrap_or_else(|_| "0".into());
        let _ = std::fs::write(format!("{dir}/pid-{rank}"), std::process::id().to_string());
    }
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let _ = listener.set_nonblocking(true);
    let mut served = 0u64;
    while Instant::now() < deadline {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(_) => continue,
        };
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut reader = BufReader::new(&stream);
        let mut line = String::new();
        for _ in 0..3 {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
        }
        served += 1;
        let text = std::fs::read_to_string(&answer).unwrap_or_default();
        let text = match &advance {
            Some(name) => advanced(&text, name, served),
            None => text,
        };
        let _ = (&stream).write_all(text.as_bytes());
    }
    ExitCode::SUCCESS
}

/// The answer with `by` added to every rank's count `name` (the JSON after the two
/// protocol lines); the answer unchanged when it is not the recorded form.
fn advanced(text: &str, name: &str, by: u64) -> String {
    let Some(start) = text.find('{') else {
        return text.to_string();
    };
    let Ok(mut json) = serde_json::from_str::<serde_json::Value>(&text[start..]) else {
        return text.to_string();
    };
    if let Some(comms) = json["communicators"].as_array_mut() {
        for c in comms {
            if let Some(ranks) = c["ranks"].as_array_mut() {
                for r in ranks {
                    if let Some(n) = r["collective_counts"][name].as_u64() {
                        r["collective_counts"][name] = (n + by).into();
                    }
                }
            }
        }
    }
    format!("{}{}", &text[..start], json)
}
