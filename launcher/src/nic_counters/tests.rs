//! The check on the recorded trees of `gpudirect-core/tests/sysfs/` (`cx7-counters`,
//! `gvnic-counters`, each with its `-later` reading five minutes on), and on small trees
//! made here for what a machine rarely shows: a reset, a counter that cannot be read, one
//! that holds no number, the largest value a counter can hold.

use std::path::{Path, PathBuf};

use gpudirect_core::config::{CounterClass, NicClass, NicCounterSettings};

use super::read::{rdma_devices_of, read_nics, read_value, Value};
use super::state::{Kept, StateError};
use super::*;

/// Five minutes, the recorded trees' interval.
const FIVE_MINUTES_MS: u64 = 300_000;
/// When the first reading was taken (any time: only the interval counts).
const T0: u64 = 1_796_000_000_000;

fn tree(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../gpudirect-core/tests/sysfs/{name}"))
}

fn nics(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// The failures of judging `later` against `first` (both read with `class`), five minutes
/// apart, with `settings`.
fn judged(
    first: &str,
    later: &str,
    names: &[&str],
    class: NicClass,
    settings: &NicCounterSettings,
) -> Judgement {
    let (before, unread) = read_nics(&tree(first), &nics(names), class);
    assert!(unread.is_empty(), "{unread:?}");
    let (after, unread) = read_nics(&tree(later), &nics(names), class);
    assert!(unread.is_empty(), "{unread:?}");
    let previous = Snapshot::of("a3u-0001", T0, &before);
    judge(
        Some(&previous),
        "a3u-0001",
        T0 + FIVE_MINUTES_MS,
        &after,
        settings,
    )
}

fn problems(j: &Judgement) -> Vec<&str> {
    j.failures.iter().map(|f| f.problem.as_str()).collect()
}

#[test]
fn a_connectx7_whose_link_flapped_is_named_with_its_port_and_counters() {
    assert_eq!(
        rdma_devices_of(&tree("cx7-counters"), "gpu1rdma0"),
        ["mlx5_1"]
    );
    let j = judged(
        "cx7-counters",
        "cx7-counters-later",
        &["gpu0rdma0", "gpu1rdma0"],
        NicClass::Net,
        &NicCounterSettings::default(),
    );
    assert_eq!(
        problems(&j),
        [
            "gpu1rdma0: carrier_changes rose by 2 in 5 min 0 s (any rise of link losses is a finding)",
            "gpu1rdma0: mlx5_1 port 1 link_downed rose by 1 in 5 min 0 s (any rise of link losses is a finding)",
            "gpu1rdma0: mlx5_1 port 1 symbol_error rose by 3 in 5 min 0 s (any rise of physical errors is a finding)",
        ]
    );
    assert!(j.failures.iter().all(|f| f.check == "nic_counters"));
    assert!(
        j.failures[2].fix.contains("cable") && j.failures[2].fix.contains("per_minute.physical"),
        "{}",
        j.failures[2].fix
    );
    // 40 discards and 12 packets out of order in five minutes: under 100 a minute.
    let rise = |nic: &str, class: &str| {
        j.rises
            .iter()
            .find(|r| r.nic == nic && r.class == class)
            .map(|r| r.rise)
    };
    assert_eq!(rise("gpu1rdma0", "drops"), Some(40));
    assert_eq!(rise("gpu1rdma0", "retransmits"), Some(12));
    assert_eq!(rise("gpu0rdma0", "physical"), Some(0));
    assert_eq!(j.interval, Some(Duration::from_secs(300)));
    assert!(j.notes.is_empty() && j.details.is_empty(), "{j:?}");
}

#[test]
fn an_rdma_profile_reads_only_the_devices_ports() {
    let (readings, unread) = read_nics(
        &tree("cx7-counters-later"),
        &nics(&["mlx5_1"]),
        NicClass::Infiniband,
    );
    assert!(unread.is_empty());
    assert_eq!(readings.len(), PORT_COUNTERS.len() + PORT_HW_COUNTERS.len());
    assert!(readings
        .iter()
        .all(|r| r.nic == "mlx5_1" && r.port.as_deref() == Some("mlx5_1 port 1")));
    let j = judged(
        "cx7-counters",
        "cx7-counters-later",
        &["mlx5_1"],
        NicClass::Infiniband,
        &NicCounterSettings::default(),
    );
    assert_eq!(j.failures.len(), 2, "{:?}", problems(&j));
    assert!(problems(&j)[1].starts_with("mlx5_1: mlx5_1 port 1 symbol_error rose by 3"));
}

#[test]
fn a_gvnic_dropping_packets_is_named_and_the_admins_limit_holds() {
    assert!(rdma_devices_of(&tree("gvnic-counters"), "eth1").is_empty());
    let (readings, _) = read_nics(&tree("gvnic-counters"), &nics(&["eth1"]), NicClass::Net);
    assert_eq!(readings.len(), NET_STATISTICS.len() + 1, "statistics only");
    let j = judged(
        "gvnic-counters",
        "gvnic-counters-later",
        &["eth1"],
        NicClass::Net,
        &NicCounterSettings::default(),
    );
    assert_eq!(
        problems(&j),
        ["eth1: rx_dropped rose by 5000 in 5 min 0 s (drops may rise by 100 a minute)"]
    );
    assert!(j.failures[0].fix.contains("ethtool -S eth1"));
    // The admin allows 2000 a minute: 1000 a minute passes.
    let mut lenient = NicCounterSettings::default();
    lenient.per_minute.insert(CounterClass::Drops, 2000);
    let j = judged(
        "gvnic-counters",
        "gvnic-counters-later",
        &["eth1"],
        NicClass::Net,
        &lenient,
    );
    assert!(j.failures.is_empty(), "{:?}", problems(&j));
    assert_eq!(
        j.rises.iter().find(|r| r.class == "drops").map(|r| r.rise),
        Some(5003)
    );
}

#[test]
fn a_first_run_another_nodes_state_and_a_clock_gone_back_find_nothing() {
    let (after, _) = read_nics(
        &tree("gvnic-counters-later"),
        &nics(&["eth1"]),
        NicClass::Net,
    );
    let (before, _) = read_nics(&tree("gvnic-counters"), &nics(&["eth1"]), NicClass::Net);
    let settings = NicCounterSettings::default();
    let first = judge(None, "n1", T0, &after, &settings);
    assert!(first.failures.is_empty() && first.rises.is_empty());
    assert_eq!(
        first.details,
        ["nic_counters: first reading of 16 counters on eth1: rises are judged from the next run"]
    );
    let other = Snapshot::of("n2", T0, &before);
    let j = judge(Some(&other), "n1", T0 + FIVE_MINUTES_MS, &after, &settings);
    assert!(j.failures.is_empty());
    assert!(
        j.details[0].contains("node n2's, not n1's"),
        "{:?}",
        j.details
    );
    let ahead = Snapshot::of("n1", T0 + FIVE_MINUTES_MS, &before);
    let j = judge(Some(&ahead), "n1", T0, &after, &settings);
    assert!(j.failures.is_empty());
    assert!(j.details[0].contains("clock"), "{:?}", j.details);
}

#[test]
fn a_counter_that_went_back_starts_again_silently() {
    let (before, _) = read_nics(
        &tree("gvnic-counters-later"),
        &nics(&["eth1"]),
        NicClass::Net,
    );
    let (after, _) = read_nics(&tree("gvnic-counters"), &nics(&["eth1"]), NicClass::Net);
    let previous = Snapshot::of("n1", T0, &before);
    let j = judge(
        Some(&previous),
        "n1",
        T0 + FIVE_MINUTES_MS,
        &after,
        &NicCounterSettings::default(),
    );
    assert!(j.failures.is_empty(), "{:?}", problems(&j));
    assert!(j.notes.is_empty(), "a reset is no problem: {:?}", j.notes);
    assert!(
        j.details.iter().any(|d| d
            == "nic_counters: eth1: rx_dropped went back from 5118 to 118 (a reboot, a driver reload or a cleared counter): it counts again from there"),
        "{:?}",
        j.details
    );
}

#[test]
fn a_rise_is_judged_per_minute_with_a_minutes_allowance_at_least() {
    assert!(too_fast(1, 1_000, 0));
    assert!(!too_fast(0, 1_000, 0));
    assert!(!too_fast(100, 1_000, 100), "seconds apart: a minute's rise");
    assert!(too_fast(101, 1_000, 100));
    assert!(!too_fast(500, FIVE_MINUTES_MS, 100));
    assert!(too_fast(501, FIVE_MINUTES_MS, 100));
    // The largest values compare without overflow.
    assert!(!too_fast(u64::MAX, u64::MAX, u64::MAX));
    assert!(too_fast(u64::MAX, 60_000, u64::MAX - 1));
    assert!(!too_fast(u64::MAX, 1, u64::MAX));
}

/// A tree of one netdev, `eth1`, with the statistics given as file contents (or `None` for
/// a FIFO in its place).
fn small_tree(dir: &Path, files: &[(&str, Option<&str>)]) -> PathBuf {
    let stats = dir.join("sys/class/net/eth1/statistics");
    std::fs::create_dir_all(&stats).unwrap();
    for (name, text) in files {
        match text {
            Some(text) => std::fs::write(stats.join(name), text).unwrap(),
            None => nix::unistd::mkfifo(&stats.join(name), nix::sys::stat::Mode::S_IRWXU).unwrap(),
        }
    }
    dir.join("sys")
}

#[test]
fn unreadable_and_garbled_counters_are_notes_and_huge_ones_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let max = u64::MAX.to_string();
    let sys = small_tree(
        tmp.path(),
        &[
            ("rx_dropped", None),
            ("rx_errors", Some("garbage\n")),
            ("tx_errors", Some("18446744073709551616\n")),
            ("rx_crc_errors", Some("\u{1b}[2J7\n")),
            ("tx_dropped", Some(&format!("{max}\n"))),
            ("rx_missed_errors", Some("")),
        ],
    );
    assert_eq!(
        read_value(&sys.join("class/net/eth1/statistics/rx_dropped")),
        Value::Unreadable("not a regular file".into()),
        "a FIFO is refused at once, never waited on"
    );
    assert_eq!(
        read_value(&sys.join("class/net/eth1/statistics/tx_packets")),
        Value::Absent
    );
    let (readings, unread) = read_nics(&sys, &nics(&["eth1", "eth9"]), NicClass::Net);
    let why: Vec<String> = unread
        .iter()
        .map(|u| format!("{}: {}", u.key, u.why))
        .collect();
    assert_eq!(
        why,
        [
            "class/net/eth1/statistics/rx_crc_errors: it holds `?[2J7`, not a count",
            "class/net/eth1/statistics/rx_errors: it holds `garbage`, not a count",
            "class/net/eth1/statistics/tx_errors: it holds `18446744073709551616`, not a count",
            "class/net/eth1/statistics/rx_dropped: not a regular file",
            "class/net/eth1/statistics/rx_missed_errors: it holds ``, not a count",
            "class/net/eth9: no such NIC",
        ]
    );
    assert_eq!(readings.len(), 1);
    assert_eq!(readings[0].value, u64::MAX);
    // From 0 to the largest value in one second: a rise, judged, no overflow.
    let mut zero = Snapshot::of("n1", T0, &readings);
    zero.counters.insert(readings[0].key.clone(), 0);
    let settings = NicCounterSettings::default();
    let j = judge(Some(&zero), "n1", T0 + 1_000, &readings, &settings);
    assert_eq!(
        problems(&j),
        ["eth1: tx_dropped rose by 18446744073709551615 in 1 s (drops may rise by 100 a minute)"]
    );
    // And back: a reset.
    let top = Snapshot::of("n1", T0, &readings);
    let mut low = readings.clone();
    low[0].value = 0;
    let j = judge(Some(&top), "n1", T0 + 1_000, &low, &settings);
    assert!(j.failures.is_empty() && j.details[0].contains("went back"));
}

#[test]
fn an_rdma_counter_stopped_at_its_widths_end_is_said() {
    let reading = |name: &str, bits, value| Reading {
        nic: "gpu0rdma0".into(),
        port: Some("mlx5_0 port 1".into()),
        name: name.into(),
        key: format!("class/infiniband/mlx5_0/ports/1/counters/{name}"),
        class: CounterClass::Physical,
        bits: Some(bits),
        value,
    };
    let readings = [
        reading("symbol_error", 16, 65535),
        reading("local_link_integrity_errors", 4, 14),
    ];
    let j = judge(None, "n1", T0, &readings, &NicCounterSettings::default());
    assert_eq!(
        j.notes,
        ["nic_counters: gpu0rdma0: mlx5_0 port 1 symbol_error is at 65535, the most its 16 bits hold, and counts no more: clear the port's counters (`perfquery -R`) to judge it again"]
    );
}

/// A check of the gVNIC tree at `sysfs`, its state in `state`.
fn run_check(sysfs: &Path, state: &Path, now_ms: u64) -> Judgement {
    let settings = NicCounterSettings::default();
    let nics = nics(&["eth1"]);
    check(&Check {
        sysfs,
        node: "n1",
        nics: &nics,
        class: NicClass::Net,
        settings: &settings,
        state_dir: state,
        trust: None,
        now_ms,
    })
}

#[test]
fn the_readings_are_kept_between_runs_in_a_private_file() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state/below");
    let first = run_check(&tree("gvnic-counters"), &state, T0);
    assert!(
        first.failures.is_empty() && first.notes.is_empty(),
        "{first:?}"
    );
    let file = state.join("nic-counters-n1.json");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let later = run_check(&tree("gvnic-counters-later"), &state, T0 + FIVE_MINUTES_MS);
    assert_eq!(later.failures.len(), 1, "{later:?}");
    assert!(later.failures[0]
        .problem
        .starts_with("eth1: rx_dropped rose by 5000"));
    // The later readings are kept: the same tree again finds nothing.
    let again = run_check(
        &tree("gvnic-counters-later"),
        &state,
        T0 + 2 * FIVE_MINUTES_MS,
    );
    assert!(again.failures.is_empty(), "{again:?}");
    let names: Vec<String> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["nic-counters-n1.json"], "no temporary file left");
    // A damaged file starts the readings again, and is replaced.
    std::fs::write(&file, "{\"format\": 1, \"node\": ").unwrap();
    let damaged = run_check(
        &tree("gvnic-counters-later"),
        &state,
        T0 + 3 * FIVE_MINUTES_MS,
    );
    assert!(damaged.failures.is_empty());
    assert!(
        damaged.notes[0].contains("the readings start again from this run"),
        "{:?}",
        damaged.notes
    );
    let kept: Snapshot = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(kept.taken_at_ms, T0 + 3 * FIVE_MINUTES_MS);
}

#[test]
fn a_state_file_that_is_a_link_or_others_can_write_is_neither_read_nor_replaced() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let target = tmp.path().join("elsewhere.json");
    std::fs::write(&target, "precious").unwrap();
    let file = state.join("nic-counters-n1.json");
    std::os::unix::fs::symlink(&target, &file).unwrap();
    let j = run_check(&tree("gvnic-counters"), &state, T0);
    assert!(
        j.notes[0].contains("not read and not replaced: it is a symbolic link"),
        "{:?}",
        j.notes
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
    assert!(std::fs::symlink_metadata(&file).unwrap().is_symlink());
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, "{}").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let kept = Kept::open(&state, "n1", None).unwrap();
    let refused = kept.load().unwrap_err();
    assert!(
        matches!(&refused, StateError::Refused { why, .. } if why.contains("others may write it (mode 666)")),
        "{refused}"
    );
    kept.save(&Snapshot::of("n1", T0, &[])).unwrap();
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "{}",
        "not replaced"
    );
    // Another user's file: only root can make one to test with.
    if nix::unistd::geteuid().is_root() {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
        let refused = Kept::open(&state, "n1", None).unwrap().load().unwrap_err();
        assert!(
            refused.to_string().contains("belongs to uid 65534"),
            "{refused}"
        );
    }
}

#[test]
fn as_root_the_state_folder_must_be_roots_alone_and_the_node_a_plain_name() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let me = nix::unistd::geteuid().as_raw();
    let probe = SystemProbe::trusting(me, tmp.path());
    // The folder itself, and a folder to be made below it.
    for dir in [open.clone(), open.join("gpudirect")] {
        let e = Kept::open(&dir, "n1", Some(&probe)).unwrap_err();
        assert!(
            matches!(e, StateError::Untrusted { .. }) && e.to_string().contains("writable by"),
            "{e}"
        );
    }
    assert!(!open.join("gpudirect").exists(), "nothing made under it");
    let private = tmp.path().join("private/gpudirect");
    let kept = Kept::open(&private, "n1", Some(&probe)).unwrap();
    assert_eq!(kept.path(), private.join("nic-counters-n1.json"));
    for node in ["../n1", "", ".hidden", "n1/x"] {
        assert!(matches!(
            Kept::open(&private, node, None),
            Err(StateError::NodeName(_))
        ));
    }
}
