//! Arguments that more than one subcommand takes, defined once and flattened into each.

use clap::Args;
use gpudirect::history::{RunFilter, RunStatus};
use gpudirect::units::since_arg;

/// Which runs a listing or an export covers (the same flags on both).
#[derive(Debug, Clone, Default, Args)]
pub struct FilterArgs {
    /// Only runs of this collective, e.g. `all_reduce` (no `_perf` suffix).
    #[arg(long, value_name = "NAME")]
    pub collective: Option<String>,

    /// Only runs recorded with this cluster name.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,

    /// Only runs that included this node (for `history`: also switches to that node's
    /// busbw over time).
    #[arg(long, value_name = "HOST")]
    pub node: Option<String>,

    /// Only runs of this environment variant, e.g. `tcpx` or `socket`.
    #[arg(long, value_name = "NAME")]
    pub variant: Option<String>,

    /// Only runs recorded with this label (`gpudirect import --label NAME`), exactly.
    #[arg(long, value_name = "NAME")]
    pub label: Option<String>,

    /// Only runs that ended so: ok, wrong, timeout, failed or interrupted.
    #[arg(long, value_name = "STATUS")]
    pub status: Option<RunStatus>,

    /// Only runs at or after this time: an age (`90m`, `36h`, `7d`, `2w`) or an RFC 3339
    /// time or date (`2026-11-29`, `2026-11-29T22:10:07Z`).
    #[arg(long, value_name = "WHEN", value_parser = since_arg)]
    pub since: Option<i64>,

    /// At most this many runs, the newest; 0 means all.
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
}

impl FilterArgs {
    /// The history's filter; `default_limit` applies when `--limit` was not given.
    pub fn to_filter(&self, default_limit: Option<u32>) -> RunFilter {
        RunFilter {
            collective: self.collective.clone(),
            cluster: self.cluster.clone(),
            node: self.node.clone(),
            variant: self.variant.clone(),
            label: self.label.clone(),
            status: self.status,
            since: self.since,
            limit: match self.limit {
                Some(0) => None,
                Some(n) => Some(n),
                None => default_limit,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_map_limits() {
        let f = FilterArgs {
            collective: Some("all_reduce".into()),
            ..FilterArgs::default()
        };
        assert_eq!(f.to_filter(Some(20)).limit, Some(20));
        assert_eq!(
            f.to_filter(Some(20)).collective.as_deref(),
            Some("all_reduce")
        );
        let all = FilterArgs {
            limit: Some(0),
            ..FilterArgs::default()
        };
        assert_eq!(all.to_filter(Some(20)).limit, None);
        let three = FilterArgs {
            limit: Some(3),
            ..FilterArgs::default()
        };
        assert_eq!(three.to_filter(None).limit, Some(3));
    }
}
