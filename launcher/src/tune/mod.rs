//! `gpudirect tune`'s logic, pure and tested here but for [`session`], which runs the
//! steps and records them; the command (`commands/tune.rs`) sets up and prints.
//!
//! - [`knobs`]: the variables and values to try (built in per collective and fabric, a
//!   sweep file, or flags), fitted to the profile the runs apply.
//! - [`plan`]: the settings of each phase (single knobs, then combinations of winners),
//!   interleaved rounds, and the step names `--resume` finds in the history.
//! - [`verdict`]: per size band, which settings beat the default by more than the noise,
//!   and the one setting `--write` may keep.
//! - [`overlay`]: that setting as a profile overlay for the plugin's config.
//! - [`session`]: the runs of the phases through `cell::exec`, within the budget, and what
//!   `--resume` finds of a stopped tune.

pub mod knobs;
pub mod overlay;
pub mod plan;
pub mod session;
pub mod text;
pub mod verdict;

use std::collections::BTreeMap;

use crate::history::{Placement, ResultRow};
use crate::nccl_output::ParsedOutput;

/// Out-of-place busbw by size from a parsed output (in-place where out-of-place is
/// missing), the figure every band is judged on.
pub fn busbw_by_size(parsed: &ParsedOutput) -> BTreeMap<u64, f64> {
    let mut by_size = BTreeMap::new();
    for row in &parsed.rows {
        let busbw = row
            .out_of_place
            .as_ref()
            .and_then(|p| p.busbw_gbps)
            .or_else(|| row.in_place.as_ref().and_then(|p| p.busbw_gbps));
        if let Some(b) = busbw.filter(|b| b.is_finite()) {
            by_size.entry(row.size_bytes).or_insert(b);
        }
    }
    by_size
}

/// The same from a recorded run's rows (for `--resume`).
pub fn busbw_by_size_from_rows(rows: &[ResultRow]) -> BTreeMap<u64, f64> {
    let mut by_size = BTreeMap::new();
    for placement in [Placement::Out, Placement::In] {
        for row in rows.iter().filter(|r| r.placement == placement) {
            if let Some(b) = row.busbw.filter(|b| b.is_finite()) {
                by_size.entry(row.size_bytes).or_insert(b);
            }
        }
    }
    by_size
}
