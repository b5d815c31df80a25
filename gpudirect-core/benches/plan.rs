//! What the plugin computes per step and per task, timed: `cargo bench -p gpudirect-core
//! --bench plan`. Reading the config (once per srun and per slurmstepd), planning a node
//! (once per step per node) and planning a task (once per task). Prints a table.

use std::time::Instant;

use gpudirect_core::config::parse_config;
use gpudirect_core::resolve::{
    plan_node, plan_task, resolve_profile, AssumeHealthy, StepFacts, TaskFacts,
};

fn time<F: FnMut()>(n: u32, mut f: F) -> (f64, f64) {
    let mut samples = Vec::new();
    for _ in 0..15 {
        let start = Instant::now();
        for _ in 0..n {
            f();
        }
        samples.push(start.elapsed().as_secs_f64() * 1e6 / f64::from(n));
    }
    samples.sort_by(f64::total_cmp);
    (
        samples[samples.len() / 2],
        samples[samples.len() * 95 / 100],
    )
}

fn main() {
    let text = format!(
        "{}{}",
        include_str!("../../slurm-conf/gpudirect.toml"),
        include_str!("../../slurm-conf/local-cluster.toml")
    );
    let config = parse_config(&text, "bench").expect("shipped config parses");
    let mode = config.parse_mode("tcpx").expect("tcpx");
    let step = StepFacts {
        job_id: 4242,
        step_id: 0,
        node: "node2".into(),
        nnodes: 2,
        local_size: 8,
    };
    let resolved = resolve_profile(&config, "node2", &mode)
        .expect("resolves")
        .expect("a profile");
    let node = plan_node(resolved, step.clone(), &AssumeHealthy);
    let env = |_: &str| None;

    println!("| what | median | p95 |");
    println!("|---|---|---|");
    let (m, p) = time(200, || {
        std::hint::black_box(parse_config(&text, "bench").ok());
    });
    println!(
        "| parse the shipped config ({} bytes) | {m:.1} us | {p:.1} us |",
        text.len()
    );
    let (m, p) = time(20_000, || {
        std::hint::black_box(plan_node(resolved, step.clone(), &AssumeHealthy));
    });
    println!("| plan a node (tcpx, checks against a probe) | {m:.2} us | {p:.2} us |");
    let (m, p) = time(20_000, || {
        let task = TaskFacts {
            rank: 11,
            local_rank: 3,
            cuda_visible_devices: None,
            step_gpus: None,
            allowed_cpus: None,
        };
        std::hint::black_box(plan_task(&node, &task, &env));
    });
    println!("| plan a task (20 variables, NIC, CPUs) | {m:.2} us | {p:.2} us |");
}
