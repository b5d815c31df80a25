//! Comparing two bandwidth series: pure logic, no SQL.
//!
//! A series is a list of `(RowKey, busbw)` points. The reference is an older run or a
//! baseline (median of recent good runs); the candidate is the run being judged. Points
//! are matched on size, data type, reduction op, root and placement; repeated keys (e.g.
//! `-N 3` repeats the table) collapse to their median first.
//!
//! Per matched key: `delta_pct = (candidate - reference) / reference * 100`; the verdict
//! is `regression` below `-tolerance`, `improvement` above `+tolerance`, `ok` within,
//! and `missing` when either side has no value.
//!
//! # Size bands
//! Keys fall in two bands split at [`CompareOptions::band_split_bytes`] (1 MiB by
//! default): **small** sizes, below it, are latency-bound (their time is a few
//! microseconds of launch and synchronisation, whatever the link); **large** ones are
//! bandwidth-bound (they measure the link). A band's verdict: `regression` if any of its
//! keys regressed; else `missing` if none could be compared; else `improvement` if any
//! improved; else `ok`.
//!
//! The **overall** verdict is the large band's, or the small band's when the large band
//! has nothing compared (a table that stops below the split). Small sizes do not decide it
//! because their busbw moves by tens of percent between healthy runs: two healthy
//! recordings of all_reduce on 2 H200 (`h200x2-nvlink/all_reduce_g2.txt`,
//! `h200x2-degraded/all_reduce_g2_clean.txt`) print 0.82 and 0.59 GB/s at 16 KiB, but agree
//! within 3 % from 1 MiB up. Their verdict is reported beside it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{HistoryError, Placement};

/// What a point is measured at; two series are matched on all of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct RowKey {
    /// Message size, bytes.
    pub size_bytes: u64,
    /// Out-of-place or in-place (ordered so that out-of-place comes first).
    pub placement: Placement,
    /// Data type.
    pub dtype: String,
    /// Reduction op.
    pub redop: String,
    /// Root rank, if the collective has one.
    pub root: Option<i64>,
}

/// Verdict for one key or for the whole comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Within tolerance.
    Ok,
    /// Slower than the reference by more than the tolerance.
    Regression,
    /// Faster than the reference by more than the tolerance.
    Improvement,
    /// One side has no value (overall: nothing could be compared).
    Missing,
}

impl Verdict {
    /// Lowercase name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
            Verdict::Missing => "missing",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The default split between the small (latency-bound) and large (bandwidth-bound)
/// bands: 1 MiB.
pub const DEFAULT_BAND_SPLIT_BYTES: u64 = 1 << 20;

/// How strict a comparison is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CompareOptions {
    /// Allowed change in percent before a key is a regression or improvement.
    pub tolerance_pct: f64,
    /// Keys below this size are left out entirely (0 keeps every size).
    pub min_size_bytes: u64,
    /// Sizes below this are the small, latency-bound band; the others the large,
    /// bandwidth-bound band, which decides the overall verdict (see the module docs).
    pub band_split_bytes: u64,
}

impl Default for CompareOptions {
    /// 5 % tolerance, every size, bands split at 1 MiB.
    fn default() -> Self {
        CompareOptions {
            tolerance_pct: 5.0,
            min_size_bytes: 0,
            band_split_bytes: DEFAULT_BAND_SPLIT_BYTES,
        }
    }
}

/// A size band of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Band {
    /// Below the split: latency-bound.
    Small,
    /// At or above the split: bandwidth-bound.
    Large,
}

impl Band {
    /// The band of a size, for a split.
    pub fn of(size_bytes: u64, split_bytes: u64) -> Band {
        if size_bytes < split_bytes {
            Band::Small
        } else {
            Band::Large
        }
    }

    /// Lowercase name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Band::Small => "small",
            Band::Large => "large",
        }
    }

    /// What bounds the band's numbers, for people.
    pub fn bound_by(self) -> &'static str {
        match self {
            Band::Small => "latency-bound",
            Band::Large => "bandwidth-bound",
        }
    }
}

/// One band's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BandResult {
    /// Which band.
    pub band: Band,
    /// Sizes in the band are at least this, bytes.
    pub from_bytes: u64,
    /// Sizes in the band are below this, bytes (`None`: no upper bound).
    pub below_bytes: Option<u64>,
    /// Verdict counts of its keys.
    pub counts: Counts,
    /// The band's verdict (`missing` when it has no compared key).
    pub verdict: Verdict,
}

impl CompareOptions {
    /// Checks the options once, before any data is read.
    pub fn validate(&self) -> Result<(), HistoryError> {
        if !self.tolerance_pct.is_finite() || self.tolerance_pct < 0.0 {
            return Err(HistoryError::InvalidOption {
                option: "tolerance",
                reason: format!(
                    "{} is not a percentage >= 0 (write 5 for 5 %)",
                    self.tolerance_pct
                ),
            });
        }
        Ok(())
    }
}

/// One matched key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareRow {
    /// What was compared.
    #[serde(flatten)]
    pub key: RowKey,
    /// Its size band.
    pub band: Band,
    /// Reference busbw, GB/s.
    pub reference_busbw: Option<f64>,
    /// Candidate busbw, GB/s.
    pub candidate_busbw: Option<f64>,
    /// Change in percent of the reference; None when missing or the reference is 0.
    pub delta_pct: Option<f64>,
    /// Verdict for this key.
    pub verdict: Verdict,
}

/// How many keys got each verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Within tolerance.
    pub ok: u32,
    /// Regressed.
    pub regression: u32,
    /// Improved.
    pub improvement: u32,
    /// On one side only.
    pub missing: u32,
}

/// The comparison of two series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesComparison {
    /// Options used.
    pub options: CompareOptions,
    /// One row per key, ordered by size, then out-of-place before in-place.
    pub rows: Vec<CompareRow>,
    /// Verdict counts, all bands together.
    pub counts: Counts,
    /// Per band: small (latency-bound) then large (bandwidth-bound), always both.
    pub bands: Vec<BandResult>,
    /// Overall verdict: the large band's, else the small band's (see the module docs).
    pub overall: Verdict,
}

impl Counts {
    fn add(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Ok => self.ok += 1,
            Verdict::Regression => self.regression += 1,
            Verdict::Improvement => self.improvement += 1,
            Verdict::Missing => self.missing += 1,
        }
    }

    /// The verdict of a group of keys with these counts: regression if any regressed,
    /// else missing if none was compared, else improvement if any improved, else ok.
    pub fn verdict(&self) -> Verdict {
        if self.regression > 0 {
            Verdict::Regression
        } else if self.ok + self.improvement == 0 {
            Verdict::Missing
        } else if self.improvement > 0 {
            Verdict::Improvement
        } else {
            Verdict::Ok
        }
    }
}

/// Median of values (mean of the middle two for an even count); None when empty.
/// Non-finite values are ignored.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// Collapses a series to one value per key (the median of its finite values). Keys whose
/// values are all missing stay, with `None`.
pub fn collapse(points: &[(RowKey, Option<f64>)]) -> BTreeMap<RowKey, Option<f64>> {
    let mut by_key: BTreeMap<RowKey, Vec<f64>> = BTreeMap::new();
    for (key, value) in points {
        let entry = by_key.entry(key.clone()).or_default();
        if let Some(v) = value {
            entry.push(*v);
        }
    }
    by_key.into_iter().map(|(k, v)| (k, median(&v))).collect()
}

fn judge(reference: Option<f64>, candidate: Option<f64>, tol: f64) -> (Option<f64>, Verdict) {
    match (reference, candidate) {
        (Some(r), Some(c)) if r > 0.0 => {
            let delta = (c - r) / r * 100.0;
            let verdict = if delta < -tol {
                Verdict::Regression
            } else if delta > tol {
                Verdict::Improvement
            } else {
                Verdict::Ok
            };
            (Some(delta), verdict)
        }
        // A zero reference (tiny sizes print 0.00) gives no percentage.
        (Some(_), Some(c)) if c > 0.0 => (None, Verdict::Improvement),
        (Some(_), Some(_)) => (None, Verdict::Ok),
        _ => (None, Verdict::Missing),
    }
}

/// Compares a candidate series with a reference series.
pub fn compare_series(
    reference: &[(RowKey, Option<f64>)],
    candidate: &[(RowKey, Option<f64>)],
    options: CompareOptions,
) -> Result<SeriesComparison, HistoryError> {
    options.validate()?;
    let keep = |points: &[(RowKey, Option<f64>)]| {
        let kept: Vec<_> = points
            .iter()
            .filter(|(k, _)| k.size_bytes >= options.min_size_bytes)
            .cloned()
            .collect();
        collapse(&kept)
    };
    let reference = keep(reference);
    let candidate = keep(candidate);
    let mut keys: Vec<&RowKey> = reference.keys().chain(candidate.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut counts = Counts::default();
    let (mut small, mut large) = (Counts::default(), Counts::default());
    let mut rows = Vec::with_capacity(keys.len());
    for key in keys {
        let r = reference.get(key).copied().flatten();
        let c = candidate.get(key).copied().flatten();
        let (delta_pct, verdict) = judge(r, c, options.tolerance_pct);
        let band = Band::of(key.size_bytes, options.band_split_bytes);
        counts.add(verdict);
        match band {
            Band::Small => small.add(verdict),
            Band::Large => large.add(verdict),
        }
        rows.push(CompareRow {
            key: key.clone(),
            band,
            reference_busbw: r,
            candidate_busbw: c,
            delta_pct,
            verdict,
        });
    }
    let split = options.band_split_bytes;
    let bands = vec![
        BandResult {
            band: Band::Small,
            from_bytes: options.min_size_bytes.min(split),
            below_bytes: Some(split),
            counts: small,
            verdict: small.verdict(),
        },
        BandResult {
            band: Band::Large,
            from_bytes: split.max(options.min_size_bytes),
            below_bytes: None,
            counts: large,
            verdict: large.verdict(),
        },
    ];
    // Nothing compared in the large band (a table that stops below the split): the
    // small band is all there is to judge.
    let overall = match large.verdict() {
        Verdict::Missing => small.verdict(),
        v => v,
    };
    Ok(SeriesComparison {
        options,
        rows,
        counts,
        bands,
        overall,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(size: u64, placement: Placement) -> RowKey {
        RowKey {
            size_bytes: size,
            placement,
            dtype: "float".into(),
            redop: "sum".into(),
            root: None,
        }
    }

    // Out-of-place busbw of tests/fixtures/nccl-tests/h200x2-nvlink/all_reduce_g2.txt
    // (NVLink) and all_reduce_g2_socket.txt (socket transport) at 256 MiB .. 1 GiB.
    const NVLINK: [(u64, f64); 3] = [
        (268_435_456, 297.96),
        (536_870_912, 313.57),
        (1_073_741_824, 321.81),
    ];
    const SOCKET: [(u64, f64); 3] = [
        (268_435_456, 2.78),
        (536_870_912, 3.08),
        (1_073_741_824, 3.17),
    ];

    fn series(points: &[(u64, f64)]) -> Vec<(RowKey, Option<f64>)> {
        points
            .iter()
            .map(|&(s, b)| (key(s, Placement::Out), Some(b)))
            .collect()
    }

    #[test]
    fn socket_fallback_is_a_regression_at_every_size() {
        let compare = |reference: &[(u64, f64)], candidate: &[(u64, f64)]| {
            compare_series(
                &series(reference),
                &series(candidate),
                CompareOptions::default(),
            )
            .unwrap()
        };
        let c = compare(&NVLINK, &SOCKET);
        assert_eq!(c.overall, Verdict::Regression);
        assert_eq!(c.counts.regression, 3);
        let d = c.rows[0].delta_pct.unwrap();
        assert!((d - (2.78 - 297.96) / 297.96 * 100.0).abs() < 1e-9);
        // And the other way round, an improvement.
        assert_eq!(compare(&SOCKET, &NVLINK).overall, Verdict::Improvement);
    }

    #[test]
    fn tolerance_bounds_are_inclusive() {
        let r = series(&[(1 << 20, 100.0), (2 << 20, 100.0), (4 << 20, 100.0)]);
        let c = series(&[(1 << 20, 95.0), (2 << 20, 105.0), (4 << 20, 94.9)]);
        let out = compare_series(
            &r,
            &c,
            CompareOptions {
                tolerance_pct: 5.0,
                min_size_bytes: 0,
                ..CompareOptions::default()
            },
        )
        .unwrap();
        let verdicts: Vec<_> = out.rows.iter().map(|r| r.verdict).collect();
        assert_eq!(verdicts, [Verdict::Ok, Verdict::Ok, Verdict::Regression]);
    }

    #[test]
    fn missing_keys_and_min_size() {
        let r = series(&[(8, 0.0), (1 << 20, 50.0), (2 << 20, 60.0)]);
        let c = series(&[(8, 0.0), (1 << 20, 50.5)]);
        let out = compare_series(&r, &c, CompareOptions::default()).unwrap();
        assert_eq!(
            out.counts,
            Counts {
                ok: 2,
                regression: 0,
                improvement: 0,
                missing: 1
            }
        );
        assert_eq!(out.overall, Verdict::Ok);
        assert_eq!(out.rows[2].candidate_busbw, None);
        let out = compare_series(
            &r,
            &c,
            CompareOptions {
                tolerance_pct: 5.0,
                min_size_bytes: 1024,
                ..CompareOptions::default()
            },
        )
        .unwrap();
        assert_eq!(out.rows.len(), 2);
        let none =
            compare_series(&r, &series(&[(4 << 20, 1.0)]), CompareOptions::default()).unwrap();
        assert_eq!(none.overall, Verdict::Missing);
    }

    #[test]
    fn placements_are_matched_separately_and_repeats_collapse() {
        let r = vec![
            (key(1 << 20, Placement::Out), Some(100.0)),
            (key(1 << 20, Placement::In), Some(100.0)),
        ];
        let c = vec![
            (key(1 << 20, Placement::In), Some(50.0)),
            (key(1 << 20, Placement::Out), Some(99.0)),
            (key(1 << 20, Placement::Out), Some(10.0)),
            (key(1 << 20, Placement::Out), Some(101.0)),
        ];
        let out = compare_series(&r, &c, CompareOptions::default()).unwrap();
        assert_eq!(out.rows[0].key.placement, Placement::Out);
        assert_eq!(out.rows[0].candidate_busbw, Some(99.0));
        assert_eq!(out.rows[0].verdict, Verdict::Ok);
        assert_eq!(out.rows[1].verdict, Verdict::Regression);
    }

    #[test]
    fn zero_reference_and_bad_options() {
        let out = compare_series(
            &series(&[(8, 0.0)]),
            &series(&[(8, 0.01)]),
            CompareOptions::default(),
        )
        .unwrap();
        assert_eq!(
            (out.rows[0].delta_pct, out.rows[0].verdict),
            (None, Verdict::Improvement)
        );
        for tol in [-1.0, f64::NAN, f64::INFINITY] {
            let err = compare_series(
                &[],
                &[],
                CompareOptions {
                    tolerance_pct: tol,
                    min_size_bytes: 0,
                    ..CompareOptions::default()
                },
            )
            .unwrap_err();
            assert!(err.to_string().contains("tolerance"), "{err}");
        }
    }

    #[test]
    fn bands_split_latency_from_bandwidth_and_the_large_band_decides() {
        // Out-of-place busbw of two healthy recordings of all_reduce on 2 H200
        // (h200x2-nvlink/all_reduce_g2.txt, h200x2-degraded/all_reduce_g2_clean.txt):
        // 16 KiB and 32 KiB move by 28 % and 5.4 %; 1 MiB and up agree within 5 %.
        let a = series(&[
            (16384, 0.82),
            (32768, 1.66),
            (1 << 20, 39.91),
            (1 << 30, 321.81),
        ]);
        let b = series(&[
            (16384, 0.59),
            (32768, 1.57),
            (1 << 20, 41.17),
            (1 << 30, 326.94),
        ]);
        let out = compare_series(&a, &b, CompareOptions::default()).unwrap();
        let bands: Vec<_> = out.bands.iter().map(|b| (b.band, b.verdict)).collect();
        assert_eq!(
            bands,
            [
                (Band::Small, Verdict::Regression),
                (Band::Large, Verdict::Ok)
            ]
        );
        assert_eq!(out.overall, Verdict::Ok);
        assert_eq!(out.bands[0].counts.regression, 2);
        assert_eq!(out.bands[0].below_bytes, Some(1 << 20));
        assert_eq!(out.bands[1].from_bytes, 1 << 20);
        assert_eq!(out.rows[1].band, Band::Small);
        assert_eq!(out.rows[2].band, Band::Large);
        // Moving the split below 16 KiB makes that size bandwidth-bound, and it decides.
        let low = compare_series(
            &a,
            &b,
            CompareOptions {
                band_split_bytes: 1024,
                ..CompareOptions::default()
            },
        )
        .unwrap();
        assert_eq!(low.bands[0].verdict, Verdict::Missing);
        assert_eq!(low.overall, Verdict::Regression);
        // A table that stops below the split is judged by its small band.
        let small_only = compare_series(
            &series(&[(16384, 0.82)]),
            &series(&[(16384, 0.59)]),
            CompareOptions::default(),
        )
        .unwrap();
        assert_eq!(small_only.bands[1].verdict, Verdict::Missing);
        assert_eq!(small_only.overall, Verdict::Regression);
        // The socket fallback regresses the large band whatever the small one says.
        let fallback = compare_series(
            &series(&NVLINK),
            &series(&SOCKET),
            CompareOptions::default(),
        )
        .unwrap();
        assert_eq!(fallback.bands[1].verdict, Verdict::Regression);
        assert_eq!(fallback.bands[0].verdict, Verdict::Missing);
    }

    #[test]
    fn median_of_odd_even_and_nan() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
    }
}
