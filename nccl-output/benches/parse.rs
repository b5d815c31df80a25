//! Parser throughput on the recorded fixtures: `cargo bench -p nccl-output --bench parse`.
//! Prints MB/s per form (text, text with NCCL debug lines, JSON); no external harness.

use std::path::Path;
use std::time::Instant;

fn main() {
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
