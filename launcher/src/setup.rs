//! What NCCL ran with, as far as a run's output said: the versions (nccl-tests, NCCL,
//! CUDA, the driver, the network plugin) and the algorithm and protocol NCCL chose per
//! size. Two runs that differ here measure different software, so a busbw change between
//! them is not (only) the fabric's: `compare` and `validate` say so beside their verdicts,
//! and `history --versions` lists the last set that met its baseline.

use std::collections::BTreeMap;

use crate::history::{Placement, RunDetail, RunId};
use crate::units::human_size;

/// One run's setup.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSetup {
    /// `(what, value)` for each version the output named, in a fixed order.
    pub versions: Vec<(&'static str, String)>,
    /// `RING/SIMPLE` per size, from NCCL's per-operation lines (empty without them).
    pub algorithms: BTreeMap<u64, String>,
}

impl RunSetup {
    /// The setup recorded with a run.
    pub fn of(detail: &RunDetail) -> RunSetup {
        let mut versions = Vec::new();
        let mut add = |what: &'static str, value: Option<String>| {
            if let Some(v) = value.filter(|v| !v.is_empty()) {
                versions.push((what, v));
            }
        };
        add("nccl-tests", detail.provenance.nccl_tests_version.clone());
        add("NCCL", detail.provenance.nccl_version.clone());
        add("CUDA", detail.provenance.cuda_version.clone());
        add(
            "CUDA driver",
            detail.provenance.cuda_driver.map(|v| v.to_string()),
        );
        add("net plugin", detail.provenance.net_plugin.clone());
        let algorithms = detail
            .rows
            .iter()
            .filter(|r| r.placement == Placement::Out)
            .filter_map(|r| {
                let algorithm = r.algorithm.as_deref()?;
                let protocol = r.protocol.as_deref().unwrap_or("?");
                Some((r.size_bytes, format!("{algorithm}/{protocol}")))
            })
            .collect();
        RunSetup {
            versions,
            algorithms,
        }
    }

    /// The value of one version, if the output named it.
    pub fn version(&self, what: &str) -> Option<&str> {
        self.versions
            .iter()
            .find(|(w, _)| *w == what)
            .map(|(_, v)| v.as_str())
    }

    /// The versions as one line: `NCCL 2.28.3, CUDA 12.9, net plugin Socket`.
    pub fn versions_line(&self) -> String {
        if self.versions.is_empty() {
            return "no versions in the output".into();
        }
        self.versions
            .iter()
            .map(|(what, v)| format!("{what} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn ids(runs: &[RunId]) -> String {
    let list = runs
        .iter()
        .map(RunId::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if runs.len() == 1 {
        format!("run {list}")
    } else {
        format!("runs {list}")
    }
}

/// Where the reference runs' setup differs from the candidate's: one note per version
/// that differs (where both sides named it), and one for algorithms NCCL chose
/// differently at the same size. Empty when nothing known differs. Pure.
pub fn setup_differences(
    reference: &[(RunId, RunSetup)],
    candidate: (RunId, &RunSetup),
) -> Vec<String> {
    let (cand_id, cand) = candidate;
    let mut notes = Vec::new();
    for (what, cand_value) in &cand.versions {
        // Reference values that differ, with the runs that had each.
        let mut differing: BTreeMap<&str, Vec<RunId>> = BTreeMap::new();
        for (id, setup) in reference {
            if let Some(v) = setup.version(what).filter(|v| v != cand_value) {
                differing.entry(v).or_default().push(*id);
            }
        }
        if differing.is_empty() {
            continue;
        }
        let others = differing
            .iter()
            .map(|(v, runs)| format!("{} had {v}", ids(runs)))
            .collect::<Vec<_>>()
            .join(", ");
        notes.push(format!(
            "{what} differs: run {cand_id} ran {cand_value}, {others}: the busbw change may be the software's, not the fabric's"
        ));
    }
    for (id, setup) in reference {
        let differs: Vec<(u64, &String, &String)> = cand
            .algorithms
            .iter()
            .filter_map(|(size, c)| {
                let r = setup.algorithms.get(size)?;
                (r != c).then_some((*size, r, c))
            })
            .collect();
        if let Some((size, r, c)) = differs.first() {
            notes.push(format!(
                "NCCL chose other algorithms: at {} run {id} ran {r} and run {cand_id} {c} ({} of {} sizes differ); pin NCCL_ALGO/NCCL_PROTO to compare the fabric alone",
                human_size(*size),
                differs.len(),
                cand.algorithms.len()
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(nccl: &str, plugin: Option<&str>, algorithms: &[(u64, &str)]) -> RunSetup {
        let mut versions = vec![("NCCL", nccl.to_string())];
        if let Some(p) = plugin {
            versions.push(("net plugin", p.to_string()));
        }
        RunSetup {
            versions,
            algorithms: algorithms
                .iter()
                .map(|(s, a)| (*s, (*a).to_string()))
                .collect(),
        }
    }

    #[test]
    fn differing_versions_and_algorithms_are_named_once_each() {
        let cand = setup(
            "2.28.3",
            Some("gIB"),
            &[(1 << 30, "TREE/SIMPLE"), (1 << 20, "RING/LL")],
        );
        let same = setup("2.28.3", Some("gIB"), &[(1 << 30, "TREE/SIMPLE")]);
        assert!(setup_differences(&[(1, same.clone())], (5, &cand)).is_empty());

        let older = setup(
            "2.27.1",
            None,
            &[(1 << 30, "RING/SIMPLE"), (1 << 20, "RING/LL")],
        );
        let notes = setup_differences(&[(1, older.clone()), (2, older), (3, same)], (5, &cand));
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[0].starts_with("NCCL differs: run 5 ran 2.28.3, runs 1, 2 had 2.27.1"),
            "{}",
            notes[0]
        );
        // A version one side did not name is not a difference.
        assert!(notes.iter().all(|n| !n.contains("net plugin")), "{notes:?}");
        assert!(
            notes[1].contains(
                "at 1 GiB run 1 ran RING/SIMPLE and run 5 TREE/SIMPLE (1 of 2 sizes differ)"
            ),
            "{}",
            notes[1]
        );
    }
}
