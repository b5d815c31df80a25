//! The node checks of `gpudirect health` that are functions of what was read: a NIC's
//! speed against the profile's line rate, the driver's GPUs against Slurm's gres, and the
//! quick all_reduce against the history's median. Each gives a [`Failed`] that says what
//! was found and what to do; `commands/health.rs` reads sysfs, Slurm and the history, and
//! prints.

use gpudirect_core::config::{CheckKind, NicClass};
use serde::Serialize;

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failed {
    /// The check's name (`nics`, `nic_speed`, `gpus`, ...).
    pub check: &'static str,
    /// What was found.
    pub problem: String,
    /// What to do.
    pub fix: String,
}

/// `nccl` (`--quick-nccl`): what the run found, against the baseline (`None`: no earlier
/// run of its kind). Pure.
pub fn nccl_failure(
    gpus: u32,
    size: &str,
    busbw: Option<f64>,
    run_problems: &[String],
    baseline: Option<(f64, usize)>,
    tolerance_pct: f64,
) -> Option<Failed> {
    let check = "nccl";
    if !run_problems.is_empty() {
        return Some(Failed {
            check,
            problem: format!("all_reduce over {gpus} GPUs failed: {}", run_problems.join("; ")),
            fix: "run it by hand with NCCL_DEBUG=INFO and read the first error; `nvidia-smi` for a lost GPU".into(),
        });
    }
    // Over one GPU an all_reduce has no peer and its busbw is 0 by definition (found on
    // the one-GPU bed: every run was "0.00 GB/s" against a median of 0.00).
    if gpus <= 1 {
        return None;
    }
    let Some(busbw) = busbw else {
        return Some(Failed {
            check,
            problem: format!("all_reduce over {gpus} GPUs printed no busbw at {size}"),
            fix: "check the nccl-tests build and the --nccl-tests-dir".into(),
        });
    };
    let (median, runs) = baseline?;
    (busbw < median * (1.0 - tolerance_pct / 100.0)).then(|| Failed {
        check,
        problem: format!(
            "all_reduce over {gpus} GPUs: {busbw:.2} GB/s at {size}, {:.0}% of the median of {runs} earlier runs ({median:.2})",
            busbw / median * 100.0
        ),
        fix: "a slow GPU or NVLink: `nvidia-smi topo -m`, `nvidia-smi -q -d CLOCK,PERFORMANCE`, and the kernel log for Xid errors".into(),
    })
}

/// `nic_speed` for one data NIC: `speed` is what sysfs says (Mbit/s for a netdev, the RDMA
/// port's `rate` text such as `400 Gb/sec (4X NDR)`). Pure.
pub fn speed_failure(
    nic: &str,
    class: NicClass,
    declared_gbit: u32,
    speed: Option<&str>,
) -> Option<Failed> {
    let gbit = speed.and_then(|text| {
        let text = text.trim();
        match class {
            // Mbit/s; -1 (or nothing) when the link is down or unknown.
            NicClass::Net => text
                .parse::<i64>()
                .ok()
                .filter(|m| *m > 0)
                .map(|m| m as f64 / 1000.0),
            NicClass::Infiniband => text.split_whitespace().next()?.parse::<f64>().ok(),
        }
    });
    match gbit {
        Some(g) if g + 1e-9 >= f64::from(declared_gbit) => None,
        Some(g) => Some(Failed {
            check: CheckKind::NicSpeed.name(),
            problem: format!("{nic} at {g} Gbit/s, the profile declares {declared_gbit}"),
            fix: format!(
                "check the cable and the link partner (`ethtool {nic}`), or fix line_rate_gbit"
            ),
        }),
        None => Some(Failed {
            check: CheckKind::NicSpeed.name(),
            problem: format!("{nic} reports no link speed"),
            fix: format!("check that the link is up (`ethtool {nic}`)"),
        }),
    }
}

/// `gpus`: the driver's GPUs against Slurm's gres count. Pure.
pub fn gpu_failure(expected: u32, seen: Option<u32>) -> Option<Failed> {
    match seen {
        Some(n) if n >= expected => None,
        Some(n) => Some(Failed {
            check: CheckKind::Gpus.name(),
            problem: format!("{n} of {expected} GPUs seen by the NVIDIA driver"),
            fix: "a GPU fell off the bus: check `nvidia-smi` and the kernel log (Xid), then reboot or repair the node".into(),
        }),
        None => Some(Failed {
            check: CheckKind::Gpus.name(),
            problem: format!("no NVIDIA driver (Slurm gives the node {expected} GPUs)"),
            fix: "load the driver (`nvidia-smi`), or skip_checks = [\"gpus\"] for nodes without one".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds_below_the_line_rate_fail_and_name_the_nic() {
        assert_eq!(
            speed_failure("eth1", NicClass::Net, 200, Some("200000\n")),
            None
        );
        let slow = speed_failure("eth3", NicClass::Net, 200, Some("100000")).unwrap();
        assert_eq!(slow.check, "nic_speed");
        assert_eq!(slow.problem, "eth3 at 100 Gbit/s, the profile declares 200");
        let down = speed_failure("eth3", NicClass::Net, 200, Some("-1")).unwrap();
        assert!(down.problem.contains("no link speed"), "{}", down.problem);
        assert!(speed_failure("eth3", NicClass::Net, 10, None).is_some());
        assert_eq!(
            speed_failure(
                "mlx5_0",
                NicClass::Infiniband,
                400,
                Some("400 Gb/sec (4X NDR)")
            ),
            None
        );
        let ib = speed_failure(
            "mlx5_0",
            NicClass::Infiniband,
            400,
            Some("200 Gb/sec (4X HDR)"),
        );
        assert!(ib.unwrap().problem.starts_with("mlx5_0 at 200 Gbit/s"));
    }

    #[test]
    fn the_quick_all_reduce_fails_only_below_the_tolerance() {
        let base = Some((345.0, 5));
        assert_eq!(nccl_failure(8, "1 GiB", Some(320.0), &[], base, 10.0), None);
        let slow = nccl_failure(8, "1 GiB", Some(160.0), &[], base, 10.0).unwrap();
        assert_eq!(
            slow.problem,
            "all_reduce over 8 GPUs: 160.00 GB/s at 1 GiB, 46% of the median of 5 earlier runs (345.00)"
        );
        // No baseline: nothing to judge by, not a failure.
        assert_eq!(nccl_failure(8, "1 GiB", Some(1.0), &[], None, 10.0), None);
        let failed = nccl_failure(8, "1 GiB", None, &["exit code 3".into()], base, 10.0);
        assert!(failed.unwrap().problem.contains("failed: exit code 3"));
        assert!(nccl_failure(8, "1 GiB", None, &[], base, 10.0).is_some());
        // One GPU: busbw is 0 by definition; a run that went through is no failure, whatever
        // the baseline, and one that failed still is.
        assert_eq!(nccl_failure(1, "1 GiB", Some(0.0), &[], base, 10.0), None);
        assert_eq!(nccl_failure(1, "1 GiB", None, &[], base, 10.0), None);
        assert!(nccl_failure(1, "1 GiB", None, &["exit code 3".into()], None, 10.0).is_some());
    }

    #[test]
    fn missing_gpus_fail_with_the_count() {
        assert_eq!(gpu_failure(8, Some(8)), None);
        assert_eq!(
            gpu_failure(8, Some(7)).unwrap().problem,
            "7 of 8 GPUs seen by the NVIDIA driver"
        );
        assert!(gpu_failure(8, None).unwrap().fix.contains("skip_checks"));
    }
}
