//! Bus bandwidth: the factor per collective, and a re-check of printed numbers.
//!
//! nccl-tests reports `algbw = bytes / time` (GB = 1e9 bytes) and
//! `busbw = algbw x factor`, where the factor makes busbw comparable with the hardware's
//! link speed whatever the collective (see nccl-tests `doc/PERFORMANCE.md` and each
//! `*GetBw` function in `src/*.cu`):
//!
//! | collective | factor |
//! | --- | --- |
//! | all_reduce | 2(n-1)/n |
//! | all_gather, reduce_scatter, alltoall, alltoallv, scatter, gather | (n-1)/n |
//! | broadcast, reduce, sendrecv, hypercube | 1 |
//!
//! `alltoallv` and `hypercube` compute algbw their own way (the largest per-rank volume,
//! and `count x (n-1)` bytes), but their busbw is still algbw times the factor above, which
//! is all a re-check needs.

use serde::{Deserialize, Serialize};

use super::{ParsedOutput, PlacementKind, SourceFormat};

/// The busbw/algbw factor for `collective` (a collective or program name, e.g.
/// `all_reduce` or `all_reduce_perf_mpi`) on `nranks` ranks; `None` for an unknown
/// collective or zero ranks.
pub fn busbw_factor(collective: &str, nranks: u32) -> Option<f64> {
    if nranks == 0 {
        return None;
    }
    let n = f64::from(nranks);
    let name = super::normalize_collective(collective);
    match name.as_str() {
        "all_reduce" => Some(2.0 * (n - 1.0) / n),
        "all_gather" | "reduce_scatter" | "alltoall" | "alltoallv" | "scatter" | "gather" => {
            Some((n - 1.0) / n)
        }
        "broadcast" | "reduce" | "sendrecv" | "hypercube" => Some(1.0),
        _ => None,
    }
}

/// Half a unit of the last digit nccl-tests prints for a value in a 6-wide column
/// (`getFloatStr`: `%.2f`, then `%.1f`, then `%.0f`, then `%.0e` when wider).
pub fn printed_rounding(value: f64) -> f64 {
    let a = value.abs();
    if a < 999.995 {
        0.005
    } else if a < 9_999.95 {
        0.05
    } else if a < 999_999.5 {
        0.5
    } else {
        // `%.0e`: one significant digit.
        a * 0.5
    }
}

/// A row whose printed busbw is not algbw x factor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusBwMismatch {
    /// Index into [`ParsedOutput::rows`].
    pub row: usize,
    /// The row's line number.
    pub line: usize,
    /// Which placement.
    pub placement: PlacementKind,
    /// busbw as printed.
    pub printed: f64,
    /// algbw x factor.
    pub expected: f64,
    /// The largest difference printing could explain.
    pub tolerance: f64,
}

/// Re-compute busbw for every row and placement; returns the disagreements. Empty when
/// the collective or rank count is unknown (nothing to check against).
pub fn check_rows(out: &ParsedOutput) -> Vec<BusBwMismatch> {
    let mut bad = Vec::new();
    let (Some(coll), Some(n)) = (out.collective.as_deref(), out.nranks()) else {
        return bad;
    };
    let Some(factor) = busbw_factor(coll, n) else {
        return bad;
    };
    let json = out.format == Some(SourceFormat::Json);
    for (i, row) in out.rows.iter().enumerate() {
        for kind in [PlacementKind::OutOfPlace, PlacementKind::InPlace] {
            let Some(p) = row.placement(kind) else {
                continue;
            };
            let (Some(alg), Some(bus)) = (p.algbw_gbps, p.busbw_gbps) else {
                continue;
            };
            if !alg.is_finite() || !bus.is_finite() {
                continue;
            }
            let expected = alg * factor;
            let tolerance = if json {
                // `%lf`: six decimals, each side.
                5e-7 * (1.0 + factor) + 1e-9 * expected.abs()
            } else {
                printed_rounding(bus) + printed_rounding(alg) * factor + 1e-9
            };
            if (bus - expected).abs() > tolerance {
                bad.push(BusBwMismatch {
                    row: i,
                    line: row.line,
                    placement: kind,
                    printed: bus,
                    expected,
                    tolerance,
                });
            }
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_per_collective() {
        assert_eq!(busbw_factor("all_reduce", 8), Some(1.75));
        assert_eq!(busbw_factor("all_reduce_perf_mpi", 2), Some(1.0));
        assert_eq!(busbw_factor("all_gather", 4), Some(0.75));
        assert_eq!(busbw_factor("alltoallv", 2), Some(0.5));
        assert_eq!(busbw_factor("broadcast", 16), Some(1.0));
        assert_eq!(busbw_factor("hypercube", 4), Some(1.0));
        assert_eq!(busbw_factor("frobnicate", 4), None);
        assert_eq!(busbw_factor("all_reduce", 0), None);
    }

    #[test]
    fn rounding_follows_printed_width() {
        assert_eq!(printed_rounding(343.64), 0.005);
        assert_eq!(printed_rounding(1234.5), 0.05);
        assert_eq!(printed_rounding(12345.0), 0.5);
    }
}
