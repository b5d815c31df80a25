//! Simulates `gpudirect validate` on clusters of 16 to 4096 nodes with injected bad nodes
//! and bad links, through the real pairing and judging code, and prints how many rounds it
//! took and how often it was wrong.
//!
//! `cargo bench -p gpudirect --bench validate_sim` prints markdown tables (the model and
//! the method are in `docs/validation.md` and `gpudirect::validate::simulate`). 100 seeded trials per
//! cell; `VALIDATE_SIM_TRIALS=N` changes that. The numbers are the same on every run.
//! The last tables judge without a baseline, against each validation's own first round
//! (`RoundRule`), beside the baseline on the same seeds.

use std::time::Instant;

use gpudirect::validate::judging::{DEFAULT_SPREAD_FACTOR, DEFAULT_TOLERANCE};
use gpudirect::validate::pairing::Mode;
use gpudirect::validate::simulate::{run_trials, LinkPlacement, Model, Scenario, Summary};

const SEED: u64 = 2026;
const SIZES: [usize; 5] = [16, 64, 256, 1024, 4096];
const FRACTIONS: [f64; 4] = [0.01, 0.05, 0.10, 0.25];
/// Sizes and fractions of the tables without a baseline (0 bad: false alarms alone).
const ROUND_SIZES: [usize; 4] = [16, 64, 256, 1024];
const ROUND_FRACTIONS: [f64; 4] = [0.0, 0.01, 0.10, 0.25];
fn header(first: &str) {
    println!(
        "| {first} | bad | bad nodes/trial | rounds mean | rounds max | trials >3 rounds | missed bad nodes | false alarms | unknown | links inj/tested/masked | confirmed | suspected only | missed links | false links | ms/trial |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
}

fn row(first: &str, s: &Scenario, sum: &Summary, ms: f64) {
    let t = sum.totals;
    let confirmed = t.links_tested - t.links_masked - t.links_suspected - t.links_missed;
    println!(
        "| {first} | {:.0}% | {} | {:.2} | {} | {} | {} / {} | {} ({:.3}%) | {} | {}/{}/{} | {} | {} | {} | {} | {:.2} |",
        s.bad_fraction * 100.0,
        s.bad_nodes(),
        sum.mean_rounds(),
        sum.rounds_max,
        sum.over_three,
        t.missed_nodes,
        t.bad_nodes,
        t.false_alarms,
        sum.false_alarm_pct(),
        t.unknown,
        t.bad_links,
        t.links_tested,
        t.links_masked,
        confirmed,
        t.links_suspected,
        t.links_missed,
        t.false_links,
        ms,
    );
}

fn run(s: &Scenario, trials: usize) -> (Summary, f64) {
    run_with(s, &Model::default(), trials)
}

fn run_with(s: &Scenario, model: &Model, trials: usize) -> (Summary, f64) {
    let start = Instant::now();
    let sum = match run_trials(s, model, trials, SEED) {
        Ok(sum) => sum,
        Err(e) => {
            eprintln!("validate_sim: scenario {s:?} could not run: {e}");
            std::process::exit(1);
        }
    };
    let ms = start.elapsed().as_secs_f64() * 1e3 / trials.max(1) as f64;
    (sum, ms)
}

fn grid(title: &str, trials: usize, make: impl Fn(usize, f64) -> Scenario) {
    println!("\n### {title}\n");
    header("N");
    for n in SIZES {
        for f in FRACTIONS {
            let s = make(n, f);
            let (sum, ms) = run(&s, trials);
            row(&n.to_string(), &s, &sum, ms);
        }
    }
}

fn main() {
    let trials = std::env::var("VALIDATE_SIM_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let model = Model::default();
    let total = Instant::now();
    println!(
        "validate_sim: {trials} seeded trials per row (seed {SEED}); model: node 1.0, bad node {}, bad link x{}, log-normal noise sigma {}; threshold: baseline 1.0, tolerance {DEFAULT_TOLERANCE}",
        model.bad_node_speed, model.bad_link_factor, model.noise_sigma
    );

    grid(
        "`pairs`, bad links uniform over all node pairs",
        trials,
        Scenario::new,
    );
    grid(
        "`pairs`, bad links on pairs of the first round (exercised by construction)",
        trials,
        |n, f| Scenario {
            links: LinkPlacement::ScreenPairs,
            ..Scenario::new(n, f)
        },
    );

    println!("\n### Tolerance, N = 1024, `pairs`, uniform links\n");
    header("tolerance");
    for tol in [0.05, 0.10, 0.15, 0.20] {
        for f in FRACTIONS {
            let s = Scenario {
                tolerance: tol,
                ..Scenario::new(1024, f)
            };
            let (sum, ms) = run(&s, trials);
            row(&format!("{tol:.2}"), &s, &sum, ms);
        }
    }

    println!("\n### Modes, N = 256, 10% bad, links on first-round pairs\n");
    header("mode");
    for mode in [
        Mode::Pairs,
        Mode::PairsAcross,
        Mode::Ring,
        Mode::Groups(4),
        Mode::All,
        Mode::Pairwise,
    ] {
        let s = Scenario {
            mode,
            links: LinkPlacement::ScreenPairs,
            ..Scenario::new(256, 0.10)
        };
        let (sum, ms) = run(&s, trials);
        row(&mode.to_string(), &s, &sum, ms);
    }
    round_relative(trials);
    vet(trials);
    println!("\ntotal {:.1} s", total.elapsed().as_secs_f64());
}

/// No baseline: judged against the first round, beside the baseline on the same seeds;
/// then the choice of k, and what the MAD term does on noisier rounds.
fn round_relative(trials: usize) {
    let reference = |s: &Scenario| match s.round_spread {
        None => "baseline".to_string(),
        Some(k) => format!("round, k={k}"),
    };
    println!(
        "\n### No baseline: the first round's median and MAD (k = {DEFAULT_SPREAD_FACTOR}), beside the baseline, `pairs`, uniform links\n"
    );
    header("N, threshold");
    for n in ROUND_SIZES {
        for f in ROUND_FRACTIONS {
            for s in [
                Scenario::new(n, f),
                Scenario::round_relative(n, f, DEFAULT_SPREAD_FACTOR),
            ] {
                let (sum, ms) = run(&s, trials);
                row(&format!("{n}, {}", reference(&s)), &s, &sum, ms);
            }
        }
    }

    println!("\n### No baseline: the spread factor k, `pairs`, uniform links\n");
    header("N, k");
    for n in [16, 64, 1024] {
        for k in [1.5, 2.0, 2.5, 3.0, 4.0] {
            for f in ROUND_FRACTIONS {
                let s = Scenario::round_relative(n, f, k);
                let (sum, ms) = run(&s, trials);
                row(&format!("{n}, {k}"), &s, &sum, ms);
            }
        }
    }

    println!(
        "\n### Noisier rounds, N = 256, `pairs`, uniform links: baseline 1.0 vs the round's own\n"
    );
    header("noise, threshold");
    for sigma in [0.05, 0.08, 0.10] {
        let model = Model {
            noise_sigma: sigma,
            ..Model::default()
        };
        for f in [0.0, 0.10] {
            for s in [
                Scenario::new(256, f),
                Scenario::round_relative(256, f, DEFAULT_SPREAD_FACTOR),
            ] {
                let (sum, ms) = run_with(&s, &model, trials);
                row(&format!("{sigma}, {}", reference(&s)), &s, &sum, ms);
            }
        }
    }
}

/// `gpudirect vet`'s rounds: the screen and one re-pairing (`with_followups(1)`), against
/// a baseline, and the wall time they would take with 30 s cells: the node checks (2 s,
/// measured on the local cluster), the screen's cell, and each follow-up round's cell
/// (`VET_SIM_FOLLOWUP_S`, default 30: a full cell; vet's follow-ups run the judged size
/// alone, docs/benchmarks.md says how long that took on the H200).
fn vet(trials: usize) {
    const CHECKS_S: f64 = 2.0;
    const CELL_S: f64 = 30.0;
    let followup_s: f64 = std::env::var("VET_SIM_FOLLOWUP_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CELL_S);
    println!(
        "\n### vet: one screen and one re-pairing, `pairs`, baseline; wall = {CHECKS_S} s checks + {CELL_S} s screen + {followup_s} s per follow-up round\n"
    );
    println!("| N | bad nodes | rounds mean | rounds max | bad handed on (judged healthy) | bad not named slow (unknown: unchecked) | healthy left out (flagged or unknown) | wall mean | wall max |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for n in [64, 512, 4096] {
        for (label, fraction) in [("0", 0.0), ("1", 1.0 / n as f64), ("1%", 0.01)] {
            let s = Scenario {
                followups: 1,
                links: LinkPlacement::Uniform,
                ..Scenario::new(n, fraction)
            };
            let (sum, _) = run(&s, trials);
            let t = sum.totals;
            let wall = |rounds: f64| CHECKS_S + CELL_S + (rounds - 1.0).max(0.0) * followup_s;
            println!(
                "| {n} | {label} ({}) | {:.2} | {} | {} / {} | {} | {} of {} | {:.0} s | {:.0} s |",
                s.bad_nodes(),
                sum.mean_rounds(),
                sum.rounds_max,
                t.bad_judged_healthy,
                t.bad_nodes,
                t.missed_nodes,
                t.false_alarms,
                t.healthy_nodes,
                wall(sum.mean_rounds()),
                wall(sum.rounds_max as f64),
            );
        }
    }
}
