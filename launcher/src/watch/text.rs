//! `gpudirect watch`'s text: per communicator, its ranks and what each collective did,
//! then each finding with its evidence, or "nothing wrong" with the figures. Pure: the
//! command prints. Hosts and names come from the job's dumps, so every cell goes through
//! the table's sanitizer and every sentence through [`shown`].

use std::fmt::Write;

use super::judge::{CommVerdict, Finding, MIN_MATCHED};
use super::links::{Connections, SLOW_FACTOR};
use crate::output::{render_table, shown, Align};
use crate::units::human_size;

/// The whole text for `verdicts`, with the reader's `notes` first.
pub fn render(verdicts: &[CommVerdict], notes: &[String], files: usize) -> String {
    let mut out = String::new();
    for note in notes {
        let _ = writeln!(out, "note: {}", shown(note));
    }
    let samples: usize = verdicts
        .iter()
        .flat_map(|v| &v.groups)
        .map(|g| g.samples)
        .sum();
    let _ = writeln!(
        out,
        "{} communicator(s), {samples} collective samples from {files} dump file(s)",
        verdicts.len()
    );
    for v in verdicts {
        comm_text(&mut out, v);
    }
    out
}

fn comm_text(out: &mut String, v: &CommVerdict) {
    let name = v
        .name
        .as_deref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    let hosts: Vec<String> = v.ranks.iter().map(|(r, h)| format!("{r}:{h}")).collect();
    let _ = writeln!(
        out,
        "\ncommunicator {}{}: {} of {} ranks wrote samples [{}]",
        shown(&v.comm),
        shown(&name),
        v.ranks.len(),
        v.n_ranks,
        shown(&hosts.join(" "))
    );
    let rows: Vec<Vec<String>> = v
        .groups
        .iter()
        .map(|g| {
            let figure = |value: String| {
                if g.matched == 0 {
                    "-".to_string()
                } else {
                    value
                }
            };
            vec![
                g.coll.clone(),
                human_size(g.bytes),
                g.samples.to_string(),
                g.matched.to_string(),
                figure(format!("{:.1}", g.best_us / 1000.0)),
                figure(format!("{:.1}", g.worst_us / 1000.0)),
                figure(format!("{:.2}", g.busbw_gbs)),
                match g.baseline_gbs {
                    Some(b) if g.matched > 0 && b > 0.0 => {
                        format!("{:.0}% of {b:.2}", 100.0 * g.busbw_gbs / b)
                    }
                    _ => "-".to_string(),
                },
            ]
        })
        .collect();
    let columns = [
        ("collective", Align::Left),
        ("size", Align::Right),
        ("samples", Align::Right),
        ("matched", Align::Right),
        ("fastest ms", Align::Right),
        ("slowest ms", Align::Right),
        ("busbw GB/s", Align::Right),
        ("baseline", Align::Right),
    ];
    out.push_str(&render_table(&columns, &rows));
    if v.findings.is_empty() && !v.judged {
        let most = v.groups.iter().map(|g| g.matched).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "not judged: at most {most} collective(s) were seen by every rank, {MIN_MATCHED} needed \
             (a longer --window gives more: a slowed job completes few in a short one; NCCL 2.28's own Inspector \
             writes one per dump, the plugin built from NCCL 2.29 or later every one)"
        );
    } else if v.findings.is_empty() {
        let _ = writeln!(
            out,
            "nothing wrong: no rank is late (each collective's ranks finish together), and no collective is below its baseline"
        );
    }
    for f in &v.findings {
        let _ = writeln!(out, "{}", shown(&finding_text(f)));
    }
}

/// One finding as a sentence with its evidence.
pub fn finding_text(f: &Finding) -> String {
    match f {
        Finding::LateRank {
            rank,
            host,
            coll,
            bytes,
            fastest_in,
            matched,
            own_us,
            others_us,
            late_by_us,
            from_start_times,
            own_busbw_gbs,
        } => format!(
            "LATE: rank {rank} on {host} starts its collectives about {:.1} ms after the others ({}); \
             in {fastest_in} of {matched} matched {coll} of {} it was the fastest ({:.1} ms against the others' {:.1} ms), \
             so the others wait for it. Its own collectives ran at {own_busbw_gbs:.2} GB/s busbw: the network is not what \
             holds the job; look at what rank {rank} does between collectives (data loading, checkpoints, a slower GPU).",
            late_by_us / 1000.0,
            if *from_start_times { "from the ranks' start times" } else { "from the others' longer times" },
            human_size(*bytes),
            own_us / 1000.0,
            others_us / 1000.0,
        ),
        Finding::SlowerThanBaseline {
            coll,
            bytes,
            busbw_gbs,
            baseline_gbs,
            baseline_from,
            percent,
            matched,
        } => format!(
            "SLOW: {coll} of {} runs at {busbw_gbs:.2} GB/s busbw, {percent:.0}% of its baseline {baseline_gbs:.2} GB/s \
             ({baseline_from}; median of the fastest rank over {matched} collectives): the fabric under this job is slower \
             than it measured before",
            human_size(*bytes),
        ),
        Finding::Silent { ranks } => format!(
            "SILENT: rank(s) {} wrote no sample: their Inspector did not start (see their NCCL log for `NCCL Inspector`), \
             their dumps are elsewhere, or they have not completed a collective in the window",
            ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The connection profiler's verdicts, one block per communicator (empty without it).
pub fn render_connections(all: &[Connections]) -> String {
    let mut out = String::new();
    for c in all {
        let _ = writeln!(out, "\nconnections of communicator {}:", shown(&c.comm));
        if let Some(why) = &c.unjudged {
            let _ = writeln!(out, "not judged: {}", shown(why));
            continue;
        }
        let rows: Vec<Vec<String>> = c
            .pairs
            .iter()
            .map(|p| {
                vec![
                    format!("{} -> {}", p.from, p.to),
                    human_size(p.bytes),
                    format!("{:.0}", p.ns_per_kib),
                    format!("{:.1}x", p.times_reference),
                ]
            })
            .collect();
        let columns = [
            ("ranks", Align::Left),
            ("sent", Align::Right),
            ("net ns/KiB", Align::Right),
            ("of reference", Align::Right),
        ];
        out.push_str(&render_table(&columns, &rows));
        let _ = writeln!(out, "{}", shown(&connections_text(c)));
    }
    out
}

/// What one communicator's connections say, as a sentence with its evidence.
pub fn connections_text(c: &Connections) -> String {
    let evidence = format!(
        "send time on the network per KiB against the communicator's reference {:.0} ns/KiB \
         (the lower quartile of its {} pairs of ranks); slow from {SLOW_FACTOR}x",
        c.reference_ns_per_kib,
        c.pairs.len()
    );
    if let Some(k) = &c.culprit {
        let nic = k
            .nic
            .as_deref()
            .map_or_else(|| "its NIC".to_string(), |n| format!("its NIC {n}"));
        let ways = match (k.sends_slow, k.receives_slow) {
            (true, true) => "what it sends and what it receives",
            (true, false) => "what it sends",
            _ => "what it receives",
        };
        format!(
            "SLOW CONNECTION: rank {} on {}, {nic}: {ways} crosses the network at least {:.1}x slower than the \
             communicator's other connections, and every connection of it is slow ({evidence}). Check {} {} \
             (link speed, errors, cabling) or run gpudirect validate --per-rail on that node.",
            k.rank,
            k.host,
            k.times_reference,
            k.host,
            k.nic.as_deref().unwrap_or("NIC"),
        )
    } else if !c.slow_pairs.is_empty() {
        let pairs: Vec<String> = c
            .slow_pairs
            .iter()
            .map(|p| {
                format!(
                    "rank {} on {} -> rank {} on {} ({:.1}x)",
                    p.from,
                    p.from_host.as_deref().unwrap_or("?"),
                    p.to,
                    p.to_host.as_deref().unwrap_or("?"),
                    p.times_reference
                )
            })
            .collect();
        format!(
            "SLOW CONNECTION: {} ({evidence}). No one rank is common to them all with every one of its connections \
             slow: either end of each may be at fault (the sender's NIC going out or the receiver's coming in).",
            pairs.join(", ")
        )
    } else if let Some(w) = &c.waits_on_late {
        let pairs: Vec<String> = w
            .pairs
            .iter()
            .map(|p| {
                format!(
                    "from rank {} on {} at {:.1}x",
                    p.from,
                    p.from_host.as_deref().unwrap_or("?"),
                    p.times_reference
                )
            })
            .collect();
        let host = w.pairs.first().and_then(|p| p.to_host.as_deref());
        format!(
            "connections healthy: the sends into rank {} on {} ({}) are slow only because it starts its \
             collectives late (LATE above): its peers' data waits in the network until it takes it ({evidence})",
            w.rank,
            host.unwrap_or("?"),
            pairs.join(", "),
        )
    } else {
        format!("connections healthy: none at {SLOW_FACTOR}x its reference or more ({evidence})")
    }
}
