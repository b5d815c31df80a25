//! Times hostlist expansion, compression and membership on 1k/10k/100k-node lists.
//!
//! `cargo bench -p gpudirect-core --bench hostlist` prints a markdown table. No harness crate:
//! each case is repeated, and the median and 95th percentile of the repeats are reported.

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

use gpudirect_core::hostlist::{compress, expand, HostlistPattern};

/// The expression shapes measured, each standing for exactly `n` hosts.
fn shapes(n: usize) -> Vec<(&'static str, String)> {
    // Runs of 3 numbers with a gap of 1: the worst common case for compression.
    let mut many = String::from("n[");
    let mut count = 0;
    let mut lo = 1;
    while count < n {
        let take = 3.min(n - count);
        if count > 0 {
            many.push(',');
        }
        if take == 1 {
            let _ = write!(many, "{lo}");
        } else {
            let _ = write!(many, "{lo}-{}", lo + take - 1);
        }
        count += take;
        lo += take + 1;
    }
    many.push(']');
    vec![
        ("one range", format!("a3h-[000001-{n:06}]")),
        ("many small ranges", many),
        ("two groups", format!("rack[1-{}]-node[001-100]", n / 100)),
    ]
}

fn time<T>(repeats: usize, mut f: impl FnMut() -> T) -> Vec<Duration> {
    (0..repeats)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed()
        })
        .collect()
}

fn summary(mut samples: Vec<Duration>, hosts: usize) -> String {
    samples.sort();
    let median = samples[samples.len() / 2];
    let p95 = samples[(samples.len() * 95 / 100).min(samples.len() - 1)];
    let rate = hosts as f64 / median.as_secs_f64();
    format!(
        "{:.3} | {:.3} | {:.1} M",
        median.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3,
        rate / 1e6
    )
}

fn main() {
    println!("| shape | hosts | operation | median ms | p95 ms | hosts/s |");
    println!("|---|---:|---|---:|---:|---:|");
    for n in [1_000, 10_000, 100_000] {
        let repeats = match n {
            1_000 => 200,
            10_000 => 50,
            _ => 15,
        };
        for (shape, expr) in shapes(n) {
            let hosts = expand(&expr).expect("benchmark expression is valid");
            assert_eq!(hosts.len(), n, "{shape}");
            let compressed = compress(&hosts);
            assert_eq!(expand(&compressed).expect("round trip"), hosts, "{shape}");
            let pattern = HostlistPattern::new(&expr).expect("valid");

            let t = time(repeats, || expand(black_box(&expr)));
            println!("| {shape} | {n} | expand | {} |", summary(t, n));
            let t = time(repeats, || compress(black_box(&hosts)));
            println!("| {shape} | {n} | compress | {} |", summary(t, n));
            let t = time(repeats, || {
                hosts.iter().filter(|h| pattern.matches(h)).count()
            });
            println!(
                "| {shape} | {n} | matches (each host) | {} |",
                summary(t, n)
            );
        }
    }
}
