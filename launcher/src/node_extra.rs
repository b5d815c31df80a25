//! Slurm's node `Extra` (issue #32): each tool's last verdict on a node, as JSON keys that
//! jobs select on with `sbatch --extra "gpudirect_ok=1"` where slurm.conf has
//! `SchedulerParameters=extra_constraints` (docs/admin-guide.md, "Letting jobs choose
//! healthy nodes").
//!
//! The keys, beside whatever else the admin keeps there (kept as it was):
//! - `gpudirect_health_ok`, `gpudirect_validate_ok`, `gpudirect_vet_ok`: 1 or 0, that
//!   tool's last verdict on the node;
//! - `gpudirect_ok`: 1 when every tool key present is 1. This is what jobs select on. As
//!   with drains, a pass by one tool never clears another's finding: health passes a slow
//!   node, and validate's 0 stays until validate passes it again;
//! - `gpudirect_busbw`: GB/s, one decimal, the last busbw a tool measured on the node;
//! - `gpudirect_at`: unix seconds of the last write.
//!
//! Slurm's docs warn that the more often Extra changes, the less accurately backfill plans.
//! So a changed verdict is written at once, and otherwise the keys are refreshed at most
//! every [`REFRESH_SECONDS`]. The time of the last write is the node's own `gpudirect_at`:
//! there is no state file.
//!
//! [`plan`] is pure and tested on data; [`apply`] reads, writes and reads back through
//! [`crate::slurm`].

use serde_json::{Map, Number, Value};

use crate::drain::Tool;
use crate::output::with_sources;
use crate::slurm::{self, ExtraSupport, SlurmError};

/// The key jobs select on.
pub const KEY_OK: &str = "gpudirect_ok";
/// The last busbw measured, GB/s.
pub const KEY_BUSBW: &str = "gpudirect_busbw";
/// When the keys were last written, unix seconds.
pub const KEY_AT: &str = "gpudirect_at";
/// Every tool's own verdict key.
const TOOL_KEYS: [&str; 3] = [
    "gpudirect_health_ok",
    "gpudirect_validate_ok",
    "gpudirect_vet_ok",
];

/// How long an unchanged verdict waits before its figures are written again.
pub const REFRESH_SECONDS: i64 = 600;

/// Longest Extra read or written: Slurm keeps more, but ours is a few keys.
const MAX_EXTRA: usize = 4096;

/// The verdict key of `tool`.
pub fn tool_key(tool: Tool) -> &'static str {
    match tool {
        Tool::Health => TOOL_KEYS[0],
        Tool::Validate => TOOL_KEYS[1],
        Tool::Vet => TOOL_KEYS[2],
    }
}

/// One tool's verdict on one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Who judged.
    pub tool: Tool,
    /// Whether the node passed.
    pub ok: bool,
    /// The busbw measured on it, GB/s, when the tool measured one.
    pub busbw_gbps: Option<f64>,
    /// Now, unix seconds.
    pub at: i64,
}

/// What [`plan`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Write this Extra, for this reason.
    Write {
        /// The whole new Extra.
        extra: String,
        /// Why now (`verdict changed`, `first write`, `refresh`).
        why: &'static str,
    },
    /// Leave it: the verdict is what the node already says, written this long ago.
    Keep {
        /// Seconds since the last write.
        written_ago: i64,
    },
}

/// Why a node's Extra cannot take our keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtraError {
    /// It holds something other than a JSON object: it is the admin's, left alone.
    #[error("its Extra is not a JSON object (`{0}`): gpudirect leaves it as it is; make it a JSON object (or clear it) to use --extra")]
    NotAnObject(String),
    /// It is longer than [`MAX_EXTRA`].
    #[error("its Extra is {0} bytes, more than {MAX_EXTRA}: gpudirect leaves it as it is")]
    TooLong(usize),
}

/// Why `--extra` cannot be used with this Slurm, or `None` when it can (pure).
pub fn unsupported(support: &ExtraSupport) -> Option<String> {
    if support.extra_constraints {
        return None;
    }
    let major: u32 = support
        .version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    Some(if major < 23 {
        format!(
            "Slurm {} cannot select nodes on their Extra (no SchedulerParameters=extra_constraints in this version; Slurm 24.11 and 26.05 have it): node Extra not written",
            support.version
        )
    } else {
        format!(
            "slurm.conf's SchedulerParameters lack extra_constraints, so jobs cannot select on a node's Extra (Slurm {}): add it and run `scontrol reconfigure`; node Extra not written",
            support.version
        )
    })
}

/// A node's Extra as a JSON object: empty when it has none (pure).
fn object_of(current: Option<&str>) -> Result<Map<String, Value>, ExtraError> {
    let Some(text) = current
        .map(str::trim)
        .filter(|t| !t.is_empty() && *t != "(null)")
    else {
        return Ok(Map::new());
    };
    if text.len() > MAX_EXTRA {
        return Err(ExtraError::TooLong(text.len()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        _ => {
            let shown: String = text.chars().take(60).collect();
            Err(ExtraError::NotAnObject(shown))
        }
    }
}

/// Whether a key holds 1 (a JSON number or `true`).
fn is_one(v: &Value) -> bool {
    v.as_f64() == Some(1.0) || v.as_bool() == Some(true)
}

/// The new Extra for `verdict` on a node whose Extra is `current`, or why it stays (pure).
pub fn plan(current: Option<&str>, verdict: &Verdict) -> Result<Plan, ExtraError> {
    let old = object_of(current)?;
    let mut new = old.clone();
    let key = tool_key(verdict.tool);
    new.insert(key.into(), Value::from(u8::from(verdict.ok)));
    if let Some(b) = verdict.busbw_gbps.filter(|b| b.is_finite() && *b >= 0.0) {
        if let Some(n) = Number::from_f64((b * 10.0).round() / 10.0) {
            new.insert(KEY_BUSBW.into(), Value::Number(n));
        }
    }
    let all_ok = TOOL_KEYS.iter().filter_map(|k| new.get(*k)).all(is_one);
    new.insert(KEY_OK.into(), Value::from(u8::from(all_ok)));
    new.insert(KEY_AT.into(), Value::from(verdict.at));
    let written = |why| Plan::Write {
        extra: Value::Object(new.clone()).to_string(),
        why,
    };
    let changed = |k: &str| old.get(k) != new.get(k);
    let Some(last) = old.get(KEY_AT).and_then(Value::as_i64) else {
        return Ok(written("first write"));
    };
    if changed(key) || changed(KEY_OK) {
        return Ok(written("verdict changed"));
    }
    let ago = verdict.at - last;
    if ago >= REFRESH_SECONDS {
        return Ok(written("refresh"));
    }
    Ok(Plan::Keep { written_ago: ago })
}

/// What [`apply`] did to a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Written, and read back the same.
    Written {
        /// The node's Extra now.
        extra: String,
        /// Why it was written now.
        why: &'static str,
    },
    /// Left as it was (rate limit).
    Kept {
        /// Seconds since our last write.
        written_ago: i64,
    },
}

impl Outcome {
    /// One line for the tool's report.
    pub fn describe(&self, node: &str) -> String {
        match self {
            Outcome::Written { extra, why } => format!("{node}: Extra set ({why}): {extra}"),
            Outcome::Kept { written_ago } => format!(
                "{node}: Extra unchanged (same verdict, written {written_ago}s ago; refreshed every {REFRESH_SECONDS}s)"
            ),
        }
    }
}

/// Why writing a node's Extra failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Its Extra could not be read.
    #[error("{node}: cannot read its Extra")]
    Read {
        /// The node.
        node: String,
        /// What scontrol said.
        source: SlurmError,
    },
    /// Its Extra cannot take our keys.
    #[error("{node}: {error}")]
    Refused {
        /// The node.
        node: String,
        /// Why.
        error: ExtraError,
    },
    /// Its Extra could not be set.
    #[error("{node}: cannot set its Extra (run as root or SlurmUser)")]
    Set {
        /// The node.
        node: String,
        /// What scontrol said.
        source: SlurmError,
    },
    /// Its Extra could not be read back after the write.
    #[error("{node}: cannot read its Extra back")]
    ReadBack {
        /// The node.
        node: String,
        /// What scontrol said.
        source: SlurmError,
    },
    /// The Extra read back is not the one written.
    #[error("{node}: its Extra did not take: set {extra}, read back {back}")]
    DidNotTake {
        /// The node.
        node: String,
        /// What was written.
        extra: String,
        /// What was read back (`nothing` for none).
        back: String,
    },
}

/// Reads `node`'s Extra, writes `verdict` into it when [`plan`] says so, and reads it back:
/// an update that did not take is an error.
pub fn apply(node: &str, verdict: &Verdict) -> Result<Outcome, ApplyError> {
    let current = slurm::node_extra(node).map_err(|source| ApplyError::Read {
        node: node.to_string(),
        source,
    })?;
    match plan(current.as_deref(), verdict).map_err(|error| ApplyError::Refused {
        node: node.to_string(),
        error,
    })? {
        Plan::Keep { written_ago } => Ok(Outcome::Kept { written_ago }),
        Plan::Write { extra, why } => {
            slurm::set_node_extra(node, &extra).map_err(|source| ApplyError::Set {
                node: node.to_string(),
                source,
            })?;
            let back = slurm::node_extra(node).map_err(|source| ApplyError::ReadBack {
                node: node.to_string(),
                source,
            })?;
            let same = back
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
                == serde_json::from_str::<Value>(&extra).ok();
            if !same {
                return Err(ApplyError::DidNotTake {
                    node: node.to_string(),
                    extra,
                    back: back.as_deref().unwrap_or("nothing").to_string(),
                });
            }
            Ok(Outcome::Written { extra, why })
        }
    }
}

/// `--extra` for `verdicts` (node, verdict): checks once that this Slurm can use it, then
/// applies each. Returns one line per node (or the one reason nothing was written) and
/// whether every write that was due took.
pub fn apply_all(verdicts: &[(String, Verdict)]) -> (Vec<String>, bool) {
    let support = match slurm::extra_support() {
        Ok(s) => s,
        Err(e) => return (vec![format!("node Extra not written: {e}")], false),
    };
    if let Some(why) = unsupported(&support) {
        return (vec![why], true);
    }
    let mut lines = Vec::new();
    let mut all_took = true;
    for (node, verdict) in verdicts {
        match apply(node, verdict) {
            Ok(outcome) => lines.push(outcome.describe(node)),
            Err(e) => {
                all_took = false;
                lines.push(with_sources(&e));
            }
        }
    }
    (lines, all_took)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(tool: Tool, ok: bool, at: i64) -> Verdict {
        Verdict {
            tool,
            ok,
            busbw_gbps: None,
            at,
        }
    }

    fn written(p: Plan) -> Map<String, Value> {
        match p {
            Plan::Write { extra, .. } => match serde_json::from_str(&extra) {
                Ok(Value::Object(m)) => m,
                other => panic!("not an object: {other:?}"),
            },
            Plan::Keep { .. } => panic!("kept"),
        }
    }

    #[test]
    fn the_admins_keys_survive_and_ours_are_added() {
        let m = written(
            plan(
                Some(r#"{"rack":"r7","weight":3}"#),
                &Verdict {
                    busbw_gbps: Some(312.44),
                    ..verdict(Tool::Health, true, 1000)
                },
            )
            .unwrap(),
        );
        assert_eq!(m["rack"], "r7");
        assert_eq!(m["weight"], 3);
        assert_eq!(m["gpudirect_health_ok"], 1);
        assert_eq!(m["gpudirect_ok"], 1);
        assert_eq!(m["gpudirect_busbw"], 312.4);
        assert_eq!(m["gpudirect_at"], 1000);
    }

    #[test]
    fn no_extra_or_nulls_start_empty() {
        for current in [None, Some(""), Some("(null)"), Some("  ")] {
            let m = written(plan(current, &verdict(Tool::Vet, false, 5)).unwrap());
            assert_eq!(m["gpudirect_ok"], 0, "{current:?}");
            assert_eq!(m.len(), 3, "{m:?}");
        }
    }

    #[test]
    fn extra_that_is_not_an_object_is_left_alone() {
        for bad in ["rack7", "[1,2]", "{\"a\":", "12"] {
            let e = plan(Some(bad), &verdict(Tool::Health, true, 5)).unwrap_err();
            assert!(matches!(e, ExtraError::NotAnObject(_)), "{bad}: {e}");
            assert!(e.to_string().contains("leaves it as it is"), "{e}");
        }
        let long = format!("{{\"a\":\"{}\"}}", "x".repeat(MAX_EXTRA));
        assert!(matches!(
            plan(Some(&long), &verdict(Tool::Health, true, 5)),
            Err(ExtraError::TooLong(_))
        ));
    }

    #[test]
    fn a_pass_by_health_does_not_clear_validates_finding() {
        let after_validate = r#"{"gpudirect_validate_ok":0,"gpudirect_ok":0,"gpudirect_at":100}"#;
        let m = written(plan(Some(after_validate), &verdict(Tool::Health, true, 200)).unwrap());
        assert_eq!(m["gpudirect_health_ok"], 1);
        assert_eq!(m["gpudirect_validate_ok"], 0);
        assert_eq!(m["gpudirect_ok"], 0, "still bad: validate's 0 stands");
        // Validate passing it again clears it.
        let now = serde_json::to_string(&m).unwrap();
        let m = written(plan(Some(&now), &verdict(Tool::Validate, true, 300)).unwrap());
        assert_eq!(m["gpudirect_ok"], 1);
    }

    #[test]
    fn the_same_verdict_is_written_again_only_after_the_refresh_time() {
        let first = written(plan(None, &verdict(Tool::Health, true, 1000)).unwrap());
        let text = serde_json::to_string(&first).unwrap();
        assert_eq!(
            plan(Some(&text), &verdict(Tool::Health, true, 1000 + 30)).unwrap(),
            Plan::Keep { written_ago: 30 }
        );
        assert!(matches!(
            plan(
                Some(&text),
                &verdict(Tool::Health, true, 1000 + REFRESH_SECONDS)
            )
            .unwrap(),
            Plan::Write { why: "refresh", .. }
        ));
        // A changed verdict goes at once.
        assert!(matches!(
            plan(Some(&text), &verdict(Tool::Health, false, 1001)).unwrap(),
            Plan::Write {
                why: "verdict changed",
                ..
            }
        ));
    }

    #[test]
    fn slurm_versions_without_extra_constraints_are_named() {
        let s = |version: &str, on: bool| ExtraSupport {
            version: version.into(),
            extra_constraints: on,
        };
        assert_eq!(unsupported(&s("24.11.5", true)), None);
        let old = unsupported(&s("22.05.8", false)).unwrap();
        assert!(old.contains("Slurm 22.05.8 cannot select nodes"), "{old}");
        let off = unsupported(&s("26.05.5", false)).unwrap();
        assert!(
            off.contains("add it and run `scontrol reconfigure`"),
            "{off}"
        );
    }
}
