//! Parser throughput on the recorded fixtures: `cargo bench -p nccl-output --bench parse`.
//! Prints MB/s per form (text, text with NCCL debug lines, JSON), then the job-log reader's
//! (`joblog`, what `gpudirect log` reads with) on the recorded and published logs and on a
//! synthetic 512-rank job of about 100 MB; no external harness.

use std::path::Path;
use std::time::Instant;

fn main() {
    parse_outputs();
    read_job_logs();
}

/// MB/s of `f` over `inputs` for about a second, with what the last round returned.
fn throughput(inputs: &[Vec<u8>], mut f: impl FnMut(&[u8]) -> usize) -> (f64, usize) {
    let bytes: usize = inputs.iter().map(Vec::len).sum();
    let (mut rounds, mut last) = (0usize, 0usize);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < 1.0 || rounds == 0 {
        last = inputs.iter().map(|i| f(i)).sum();
        rounds += 1;
    }
    let mb = (bytes * rounds) as f64 / 1e6;
    (mb / start.elapsed().as_secs_f64(), last)
}

/// One job log through the reader, as `gpudirect log` reads a file: communicators found.
fn read_log(bytes: &[u8]) -> usize {
    use nccl_output::joblog::{for_each_line, JobLogReader, Limits};
    let mut reader = JobLogReader::new(Limits::default());
    let mut input = bytes;
    for_each_line(&mut input, reader.limits().max_line, |n, l| {
        reader.feed(0, n, l)
    })
    .expect("a text log");
    reader.finish().communicators.len()
}

fn read_job_logs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nccl-logs");
    let mut recorded = Vec::new();
    for dir in ["lent-host", "published"] {
        for entry in std::fs::read_dir(root.join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "txt") {
                recorded.extend(std::fs::read(path));
            }
        }
    }
    let (mbs, comms) = throughput(&recorded, read_log);
    println!(
        "{:>10}: {mbs:8.1} MB/s ({} bytes in {} recorded and published logs, {comms} communicators)",
        "joblog",
        recorded.iter().map(Vec::len).sum::<usize>(),
        recorded.len()
    );
    // A 512-rank job: the recorded 2-rank srun log's lines for 256 node pairs, each pair
    // its own hosts and pids, in one world communicator, repeated to about 100 MB.
    let one = std::fs::read_to_string(root.join("lent-host/torch-srun-gpudirect-socket-bed.txt"))
        .unwrap_or_default();
    let mut big = String::new();
    let mut pair = 0u32;
    while big.len() < 100_000_000 && !one.is_empty() {
        let (a, b) = (pair * 2, pair * 2 + 1);
        for line in one.lines() {
            let line = line
                .replace("node1:", &format!("n{a}:"))
                .replace("node2:", &format!("n{b}:"))
                .replace(" rank 0 ", &format!(" rank {a} "))
                .replace(" rank 1 ", &format!(" rank {b} "))
                .replace("nranks 2", "nranks 512")
                .replace("nRanks 2", "nRanks 512");
            big.push_str(&line);
            big.push('\n');
        }
        pair = (pair + 1) % 256;
    }
    let (mbs, comms) = throughput(&[big.clone().into_bytes()], read_log);
    println!(
        "{:>10}: {mbs:8.1} MB/s ({} bytes, 512 ranks on 512 hosts, {comms} communicator)",
        "joblog-512",
        big.len()
    );
}

fn parse_outputs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nccl-tests");
    let groups: [(&str, &[&str]); 3] = [
        (
            "text",
            &[
                "h200x2-nvlink/all_reduce_g2.txt",
                "h200x2-formats/cur_all_reduce_dall_oall.txt",
            ],
        ),
        (
            "text+debug",
            &[
                "h200x2-nvlink/all_reduce_g2_debug.txt",
                "h200x2-twohost/all_reduce_2host_socket.txt",
            ],
        ),
        (
            "json",
            &[
                "h200x2-nvlink/all_reduce_g2.json",
                "h200x2-mpirun/all_gather_mpi_np2.json",
            ],
        ),
    ];
    for (name, files) in groups {
        let inputs: Vec<Vec<u8>> = files
            .iter()
            .filter_map(|f| std::fs::read(root.join(f)).ok())
            .collect();
        let bytes: usize = inputs.iter().map(Vec::len).sum();
        if bytes == 0 {
            println!("{name:>10}: fixtures missing");
            continue;
        }
        let mut rows = 0usize;
        let mut rounds = 0usize;
        let start = Instant::now();
        while start.elapsed().as_secs_f64() < 1.0 {
            for i in &inputs {
                rows += nccl_output::parse(i).rows.len();
            }
            rounds += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        let mb = (bytes * rounds) as f64 / 1e6;
        println!(
            "{name:>10}: {:8.1} MB/s ({rounds} rounds of {bytes} bytes, {} rows each)",
            mb / secs,
            rows / rounds.max(1)
        );
    }
}
