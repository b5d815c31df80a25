//! NCCL's RAS answers (NCCL 2.24 and later): what its RAS service says to `CLIENT PROTOCOL
//! 2`, `SET FORMAT json`, `STATUS`, read into typed communicators and ranks. The client that
//! asks and the diagnosis of a hang are the launcher's (`gpudirect::ras`); this part is pure,
//! here beside the other NCCL outputs, so that its fuzz target (`fuzz/fuzz_targets/ras.rs`)
//! builds without the launcher.
//!
//! ```text
//! SERVER PROTOCOL 2                        -> the version, refused unless 2
//! OK                                       -> SET FORMAT json accepted
//! { "nccl_version": "2.28.9", ...          -> Status
//!   "communicators": [ { "hash", "size", "ranks": [ { "rank", "host", "pid",
//!      "status": {...}, "collective_counts": { "AllReduce": 9, ... } } ],
//!      "missing_ranks": [...] } ] }
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The RAS protocol version this parser reads.
pub const PROTOCOL: u32 = 2;

/// One `STATUS` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// `2.28.9`.
    #[serde(default)]
    pub nccl_version: Option<String>,
    /// The server's local time as it printed it.
    #[serde(default)]
    pub timestamp: Option<String>,
    /// Every communicator the server knows.
    #[serde(default)]
    pub communicators: Vec<Communicator>,
}

/// One communicator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Communicator {
    /// `0x1ec60967e0c6312c`: the same in every process of the communicator.
    pub hash: String,
    /// Its number of ranks.
    pub size: u32,
    /// The ranks RAS reached.
    #[serde(default)]
    pub ranks: Vec<Rank>,
    /// The ranks it did not reach (dead processes, unreachable hosts).
    #[serde(default)]
    pub missing_ranks: Vec<MissingRank>,
}

/// One rank of a communicator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rank {
    /// Its rank in the communicator.
    pub rank: u32,
    /// Its host, as an IP address (`10.9.1.2`).
    pub host: String,
    /// Its process.
    pub pid: u32,
    /// Its CUDA device in the process.
    #[serde(default)]
    pub cuda_dev: Option<i64>,
    /// Init state, errors and flags.
    #[serde(default)]
    pub status: RankStatus,
    /// Collectives issued so far, by NCCL's name (`AllReduce`, `AllGather`, ...).
    #[serde(default)]
    pub collective_counts: BTreeMap<String, u64>,
}

impl Rank {
    /// Every collective it issued (saturating: counts come from the network).
    pub fn total(&self) -> u64 {
        self.collective_counts
            .values()
            .fold(0u64, |sum, &n| sum.saturating_add(n))
    }
}

/// A rank's state flags.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankStatus {
    /// 0 once the communicator is initialised.
    #[serde(default)]
    pub init_state: i64,
    /// An asynchronous NCCL error (an `ncclResult_t`), 0 when none.
    #[serde(default)]
    pub async_error: i64,
    /// `ncclCommFinalize` was called.
    #[serde(default)]
    pub finalize_called: bool,
    /// The communicator is being destroyed.
    #[serde(default)]
    pub destroy_flag: bool,
    /// The communicator was aborted.
    #[serde(default)]
    pub abort_flag: bool,
}

/// A rank RAS could not reach. NCCL prints what it knows of it; only the rank is sure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MissingRank {
    /// Its rank in the communicator.
    #[serde(default)]
    pub rank: Option<u32>,
    /// Its host, when known.
    #[serde(default)]
    pub host: Option<String>,
    /// Its process, when known.
    #[serde(default)]
    pub pid: Option<u32>,
}

/// Reads one whole answer to `CLIENT PROTOCOL 2`, `SET FORMAT json`, `STATUS` (the server's
/// lines first, then the JSON document) and returns the status. Pure.
pub fn parse_answer(text: &str) -> Result<Status, String> {
    let mut rest = text;
    let mut line = |what: &str| -> Result<&str, String> {
        let (first, after) = rest.split_once('\n').ok_or_else(|| {
            format!(
                "the answer ends before {what} ({} bytes in all)",
                text.len()
            )
        })?;
        rest = after;
        Ok(first.trim_end_matches('\r'))
    };
    let hello = line("the server's protocol line")?;
    let version = hello.strip_prefix("SERVER PROTOCOL ").ok_or_else(|| {
        format!(
            "it begins with {:?}, not `SERVER PROTOCOL N`",
            shorten(hello)
        )
    })?;
    let version: u32 = version
        .trim()
        .parse()
        .map_err(|_| format!("protocol version {:?} is not a number", shorten(version)))?;
    if version != PROTOCOL {
        return Err(format!(
            "the server speaks RAS protocol {version}, this client protocol {PROTOCOL}: a newer \
             or older NCCL; query it by hand (`nc localhost PORT`, then `CLIENT PROTOCOL \
             {version}` and `STATUS`)"
        ));
    }
    let ok = line("the answer to SET FORMAT json")?;
    if ok.trim() != "OK" {
        return Err(format!(
            "SET FORMAT json was answered {:?}, not OK",
            shorten(ok)
        ));
    }
    let json = rest.trim();
    if json.is_empty() {
        return Err("the server sent no status after STATUS".into());
    }
    serde_json::from_str(json).map_err(|e| format!("its status is not the JSON NCCL writes: {e}"))
}

fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(60).collect();
    if s.chars().count() > 60 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/../tests/fixtures/nccl-ras/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn reads_the_recorded_answers() {
        let s = parse_answer(&fixture("status-json-rank1-stalled.txt")).unwrap();
        assert_eq!(s.nccl_version.as_deref(), Some("2.28.9"));
        let c = &s.communicators[0];
        assert_eq!(
            (c.hash.as_str(), c.size, c.ranks.len()),
            ("0x1ec60967e0c6312c", 2, 2)
        );
        assert_eq!(c.ranks[0].collective_counts["AllReduce"], 9);
        assert_eq!(c.ranks[1].collective_counts["AllReduce"], 8);
        assert_eq!(
            (c.ranks[1].host.as_str(), c.ranks[1].pid),
            ("10.9.1.2", 1560)
        );
        let healthy = parse_answer(&fixture("status-json-healthy.txt")).unwrap();
        assert_eq!(healthy.communicators.len(), 1);
    }

    #[test]
    fn bad_answers_are_named() {
        let cases = [
            ("", "ends before the server's protocol line"),
            ("HTTP/1.1 400 Bad Request\n", "not `SERVER PROTOCOL N`"),
            (
                "SERVER PROTOCOL 3\nOK\n{}",
                "protocol 3, this client protocol 2",
            ),
            ("SERVER PROTOCOL x\n", "is not a number"),
            (
                "SERVER PROTOCOL 2\nERROR unknown\n{}",
                "was answered \"ERROR unknown\"",
            ),
            ("SERVER PROTOCOL 2\nOK\n", "no status after STATUS"),
            (
                "SERVER PROTOCOL 2\nOK\n{\"communicators\": 7}",
                "not the JSON NCCL writes",
            ),
            (
                "SERVER PROTOCOL 2\nOK\n\u{0}\u{1}garbage",
                "not the JSON NCCL writes",
            ),
        ];
        for (text, want) in cases {
            let e = parse_answer(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
