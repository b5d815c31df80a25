//! `gpudirect health`'s `nic_counters` check: the data NICs' error counters, read from
//! sysfs at each run, kept until the next, and a counter that rose faster than the admin's
//! limit (`[nic_counters.per_minute]`, per class of counter) named with its NIC.
//!
//! ```text
//! read::read_nics (sysfs)                      state::load (the previous run's readings)
//!   class/net/NIC/statistics/*, carrier_changes   STATE_DIR/nic-counters-NODE.json
//!   the RDMA ports of NIC (or NIC itself, an          │
//!   RDMA device): ports/P/counters/*, hw_counters/*   │
//!        │                                            │
//!        └────────────────► judge (pure) ◄────────────┘
//!                 each counter's rise against its class's limit per minute
//!                 ─► Failed (NIC, counter, rise, interval, fix), notes, rises per class
//!                 state::save (this run's readings: temporary file, rename, mode 0600)
//! ```
//!
//! The names are the kernel's (Documentation/ABI/stable/sysfs-class-infiniband,
//! Documentation/ABI/testing/sysfs-class-net-statistics; `port_rcv_constraint_errors` is
//! spelled as `drivers/infiniband/core/sysfs.c` makes the file, not as the ABI text has
//! it). A counter a driver does not have is not read; one that cannot be read, or holds
//! no number, is a note and never a failure. A counter that went backwards (a reboot, a
//! driver reload, a cleared counter) starts again from its new value. The first run has
//! nothing to compare with and finds nothing.
//!
//! An InfiniBand port's error counters are narrow (4 to 16 bits) and stop at their
//! largest value rather than wrap: one stopped there cannot rise any more, and a note
//! says so.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gpudirect_core::config::{CounterClass, NicClass, NicCounterSettings};
use gpudirect_core::system::SystemProbe;
use serde::{Deserialize, Serialize};

use crate::health::Failed;

pub mod read;
pub mod state;
#[cfg(test)]
mod tests;

/// The check's name (`CheckKind::NicCounters`).
const CHECK: &str = "nic_counters";

/// A netdev's counters (`class/net/NIC/statistics/NAME`) this check reads, and their
/// classes. `rx_errors` and `tx_errors` are the sums of the kinds after them.
pub const NET_STATISTICS: [(&str, CounterClass); 15] = [
    ("rx_crc_errors", CounterClass::Physical),
    ("rx_frame_errors", CounterClass::Physical),
    ("rx_errors", CounterClass::Errors),
    ("rx_length_errors", CounterClass::Errors),
    ("rx_over_errors", CounterClass::Errors),
    ("rx_fifo_errors", CounterClass::Errors),
    ("tx_errors", CounterClass::Errors),
    ("tx_aborted_errors", CounterClass::Errors),
    ("tx_carrier_errors", CounterClass::Errors),
    ("tx_fifo_errors", CounterClass::Errors),
    ("tx_heartbeat_errors", CounterClass::Errors),
    ("tx_window_errors", CounterClass::Errors),
    ("rx_dropped", CounterClass::Drops),
    ("rx_missed_errors", CounterClass::Drops),
    ("tx_dropped", CounterClass::Drops),
];

/// How many times the netdev's carrier went up or down (`class/net/NIC/carrier_changes`).
pub const CARRIER_CHANGES: &str = "carrier_changes";

/// An RDMA port's error counters (`ports/P/counters/NAME`), their classes and their widths
/// in bits (the PortCounters attribute's: each stops at `2^bits - 1`).
pub const PORT_COUNTERS: [(&str, CounterClass, u32); 12] = [
    ("link_downed", CounterClass::Link, 8),
    ("link_error_recovery", CounterClass::Link, 8),
    ("symbol_error", CounterClass::Physical, 16),
    ("local_link_integrity_errors", CounterClass::Physical, 4),
    ("excessive_buffer_overrun_errors", CounterClass::Physical, 4),
    (
        "port_rcv_remote_physical_errors",
        CounterClass::Physical,
        16,
    ),
    ("port_rcv_errors", CounterClass::Errors, 16),
    ("port_rcv_switch_relay_errors", CounterClass::Errors, 16),
    ("port_xmit_constraint_errors", CounterClass::Errors, 8),
    ("port_rcv_constraint_errors", CounterClass::Errors, 8),
    ("port_xmit_discards", CounterClass::Drops, 16),
    ("VL15_dropped", CounterClass::Drops, 16),
];

/// An RDMA port's driver counters (`ports/P/hw_counters/NAME`, mlx5's) that say packets
/// were lost on the path: a retransmit timeout, a NAK for a sequence error, a packet out
/// of order. The others there count traffic or the application's own errors.
pub const PORT_HW_COUNTERS: [(&str, CounterClass); 4] = [
    ("local_ack_timeout_err", CounterClass::Retransmits),
    ("packet_seq_err", CounterClass::Retransmits),
    ("implied_nak_seq_err", CounterClass::Retransmits),
    ("out_of_sequence", CounterClass::Retransmits),
];

/// One counter as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// The profile's data NIC it belongs to (its real name on this node).
    pub nic: String,
    /// The RDMA port it was read on (`mlx5_0 port 1`); `None` for the netdev's own.
    pub port: Option<String>,
    /// The counter's file name (`rx_dropped`, `symbol_error`).
    pub name: String,
    /// Its path below the sysfs root, which names it in the state file.
    pub key: String,
    /// Its class, whose limit it is judged by.
    pub class: CounterClass,
    /// Its width in bits where the counter stops at its largest value (an RDMA port's).
    pub bits: Option<u32>,
    /// What the kernel wrote.
    pub value: u64,
}

impl Reading {
    /// The counter in words: `rx_dropped`, `mlx5_0 port 1 symbol_error`.
    pub fn shown(&self) -> String {
        match &self.port {
            Some(port) => format!("{port} {}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A counter that was there but could not be read as a count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    /// Its path below the sysfs root.
    pub key: String,
    /// Why.
    pub why: String,
}

/// One run's readings, as kept in the state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// [`state::FORMAT`].
    pub format: u32,
    /// The node they were read on.
    pub node: String,
    /// When, unix milliseconds.
    pub taken_at_ms: u64,
    /// Each counter's value, by its path below the sysfs root.
    pub counters: BTreeMap<String, u64>,
}

impl Snapshot {
    /// The snapshot of `readings`, read on `node` at `taken_at_ms`.
    pub fn of(node: &str, taken_at_ms: u64, readings: &[Reading]) -> Snapshot {
        Snapshot {
            format: state::FORMAT,
            node: node.to_string(),
            taken_at_ms,
            counters: readings.iter().map(|r| (r.key.clone(), r.value)).collect(),
        }
    }
}

/// How much one NIC's counters of one class rose since the previous run (for metrics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassRise {
    /// The NIC.
    pub nic: String,
    /// The class (`CounterClass::name`).
    pub class: &'static str,
    /// The sum of its counters' rises.
    pub rise: u64,
}

/// What the check found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judgement {
    /// Counters that rose faster than their limit.
    pub failures: Vec<Failed>,
    /// What could not be read or kept, and counters that can count no more: always said.
    pub notes: Vec<String>,
    /// What the check did that is no problem (a first reading, a reset): said with `-v`.
    pub details: Vec<String>,
    /// Per NIC and class, how much its counters rose since the previous run; empty on a
    /// first run.
    pub rises: Vec<ClassRise>,
    /// The time since the previous run, when there was one to compare with.
    pub interval: Option<Duration>,
}

/// What health's report and metrics carry of a run of the check.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Measured {
    /// Seconds since the previous run; `None` on a first run.
    pub interval_seconds: Option<f64>,
    /// Per NIC and class, how much its counters rose in that time.
    pub rises: Vec<ClassRise>,
}

impl Judgement {
    /// The figures of this judgement.
    pub fn measured(&self) -> Measured {
        Measured {
            interval_seconds: self.interval.map(|d| d.as_secs_f64()),
            rises: self.rises.clone(),
        }
    }
}

/// Whether a rise of `rise` over `elapsed_ms` is faster than `per_minute`. An interval
/// under a minute is allowed a minute's rise: two runs seconds apart (`--retries`, a node
/// that registers just after a check) must not turn one count into a rate of hundreds.
pub fn too_fast(rise: u64, elapsed_ms: u64, per_minute: u64) -> bool {
    u128::from(rise) * 60_000 > u128::from(per_minute) * u128::from(elapsed_ms.max(60_000))
}

/// The class in words, for a finding.
fn class_words(class: CounterClass) -> &'static str {
    match class {
        CounterClass::Link => "link losses",
        CounterClass::Physical => "physical errors",
        CounterClass::Errors => "packet errors",
        CounterClass::Drops => "drops",
        CounterClass::Retransmits => "RDMA retransmits",
    }
}

/// What to do about the rise of reading `r`: the tool that says more is `ethtool -S` for a
/// netdev's counter, `perfquery -x` for an RDMA port's.
fn fix(r: &Reading) -> String {
    let nic = &r.nic;
    let more = match &r.port {
        Some(port) => format!("`perfquery -x` on {port}"),
        None => format!("`ethtool -S {nic}`"),
    };
    let what = match r.class {
        CounterClass::Link => format!(
            "the link went down or retrained: check the cable, the transceiver and the switch port ({more}, `ibstat`, `ethtool {nic}`) and the kernel log"
        ),
        CounterClass::Physical => "bit errors on the wire: reseat or replace the cable or transceiver, then watch the counter; if it still rises, the switch port or the NIC".to_string(),
        CounterClass::Errors => format!(
            "damaged packets: check the cable and the link partner; {more} names the error"
        ),
        CounterClass::Drops => format!(
            "the NIC drops packets (receive side behind, or a congested fabric): {more} says where, the switch's counters say more"
        ),
        CounterClass::Retransmits => "packets are lost on the RDMA path: check the fabric's congestion control (ECN, PFC) and the link partner".to_string(),
    };
    format!(
        "{what}; or raise nic_counters.per_minute.{} if this rate is normal here",
        r.class.name()
    )
}

/// The finding for a counter that rose by `rise` in `elapsed`.
fn finding(r: &Reading, rise: u64, elapsed: Duration, limit: u64) -> Failed {
    let allowed = match limit {
        0 => format!("any rise of {} is a finding", class_words(r.class)),
        n => format!("{} may rise by {n} a minute", class_words(r.class)),
    };
    Failed {
        check: CHECK,
        problem: format!(
            "{}: {} rose by {rise} in {} ({allowed})",
            r.nic,
            r.shown(),
            crate::units::human_duration(elapsed)
        ),
        fix: fix(r),
    }
}

/// A note for each counter stopped at the largest value its width holds.
fn saturated(readings: &[Reading]) -> Vec<String> {
    readings
        .iter()
        .filter_map(|r| {
            let bits = r.bits.filter(|b| *b < 64)?;
            (r.value == (1u64 << bits) - 1).then(|| {
                format!(
                    "{CHECK}: {}: {} is at {}, the most its {bits} bits hold, and counts no more: clear the port's counters (`perfquery -R`) to judge it again",
                    r.nic,
                    r.shown(),
                    r.value
                )
            })
        })
        .collect()
}

/// Judges this run's `readings`, taken on `node` at `now_ms`, against `previous` (the
/// state file's, `None` when there is none) with the limits of `settings`. Pure.
pub fn judge(
    previous: Option<&Snapshot>,
    node: &str,
    now_ms: u64,
    readings: &[Reading],
    settings: &NicCounterSettings,
) -> Judgement {
    let mut j = Judgement {
        notes: saturated(readings),
        ..Judgement::default()
    };
    let nics: Vec<&str> = {
        let mut n: Vec<&str> = readings.iter().map(|r| r.nic.as_str()).collect();
        n.dedup();
        n
    };
    let restart = |why: String| format!("{CHECK}: {why}: rises are judged from the next run");
    let Some(previous) = previous else {
        j.details.push(restart(format!(
            "first reading of {} counters on {}",
            readings.len(),
            nics.join(", ")
        )));
        return j;
    };
    if previous.node != node {
        j.details.push(restart(format!(
            "the kept readings are node {}'s, not {node}'s",
            previous.node
        )));
        return j;
    }
    let Some(elapsed_ms) = now_ms
        .checked_sub(previous.taken_at_ms)
        .filter(|ms| *ms > 0)
    else {
        j.details.push(restart(
            "the clock is at or before the kept readings' time".into(),
        ));
        return j;
    };
    let elapsed = Duration::from_millis(elapsed_ms);
    j.interval = Some(elapsed);
    let mut sums: BTreeMap<(&str, CounterClass), u64> = BTreeMap::new();
    for r in readings {
        let Some(&before) = previous.counters.get(&r.key) else {
            continue;
        };
        if r.value < before {
            j.details.push(format!(
                "{CHECK}: {}: {} went back from {before} to {} (a reboot, a driver reload or a cleared counter): it counts again from there",
                r.nic,
                r.shown(),
                r.value
            ));
            continue;
        }
        let rise = r.value - before;
        let sum = sums.entry((r.nic.as_str(), r.class)).or_default();
        *sum = sum.saturating_add(rise);
        let limit = settings.limit(r.class);
        if rise > 0 && too_fast(rise, elapsed_ms, limit) {
            j.failures.push(finding(r, rise, elapsed, limit));
        }
    }
    j.rises = sums
        .into_iter()
        .map(|((nic, class), rise)| ClassRise {
            nic: nic.to_string(),
            class: class.name(),
            rise,
        })
        .collect();
    j
}

/// What one run of the check needs.
#[derive(Debug, Clone)]
pub struct Check<'a> {
    /// The sysfs root (`/sys`; tests give a fixture tree).
    pub sysfs: &'a Path,
    /// This node.
    pub node: &'a str,
    /// The profile's data NICs, by their real names here.
    pub nics: &'a [String],
    /// What those names are.
    pub class: NicClass,
    /// The limits.
    pub settings: &'a NicCounterSettings,
    /// The folder of the state files (`--counters-state`, else the config's).
    pub state_dir: &'a Path,
    /// As root: the rule the state folder must pass (root's alone); `None` for any user's.
    pub trust: Option<&'a SystemProbe>,
    /// Now, unix milliseconds.
    pub now_ms: u64,
}

/// Reads the counters, judges them against the kept ones and keeps them for the next run.
/// Whatever cannot be read or kept is a note: the check then judges what it can.
pub fn check(c: &Check<'_>) -> Judgement {
    let (readings, unread) = read::read_nics(c.sysfs, c.nics, c.class);
    let unread_notes = unread.iter().map(|u| {
        format!(
            "{CHECK}: cannot read {}: {}; not judged",
            c.sysfs.join(&u.key).display(),
            u.why
        )
    });
    let now = Snapshot::of(c.node, c.now_ms, &readings);
    let kept = state::Kept::open(c.state_dir, c.node, c.trust);
    let (previous, mut notes) = match &kept {
        Ok(kept) => match kept.load() {
            Ok(previous) => (previous, Vec::new()),
            Err(e) => (None, vec![format!("{CHECK}: {e}")]),
        },
        Err(e) => (
            None,
            vec![format!(
                "{CHECK}: no readings kept ({e}): rises cannot be judged; give --counters-state a folder of this user's"
            )],
        ),
    };
    let mut j = judge(previous.as_ref(), c.node, c.now_ms, &readings, c.settings);
    notes.extend(unread_notes);
    if let Ok(kept) = &kept {
        if let Err(e) = kept.save(&now) {
            notes.push(format!("{CHECK}: {e}"));
        }
    }
    notes.append(&mut j.notes);
    j.notes = notes;
    j
}
