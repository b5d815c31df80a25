//! Which NICs are the rails of `--test rails` and `--per-rail`, and the variable that holds
//! NCCL to one of them ([`rail_plan`]): `--rails`, else the data NICs of the profile the
//! nodes get (`--gpudirect`, else their node set's), as the node set names them.

use std::path::PathBuf;

use crate::profile::{Choice, ProfileError};
use gpudirect_core::config::{Mode, NicClass};
use gpudirect_core::template::Placeholder;

/// The rails, and the variable that holds NCCL to one NIC (`validate --per-rail`).
#[derive(Debug)]
pub struct RailPlan {
    /// The NICs, as the nodes name them.
    pub rails: Vec<String>,
    /// `--rail-variable`, else the profile's variable set from `{data_nics}` (e.g.
    /// `NCCL_GPUDIRECTTCPX_SOCKET_IFNAME`), else `NCCL_IB_HCA` for RDMA devices and
    /// `NCCL_SOCKET_IFNAME` for interfaces.
    pub variable: String,
    /// The rails are RDMA devices (`data_nic_class = "infiniband"`).
    pub rdma: bool,
}

/// Where the rails come from: the flags of `validate` and `vet`.
pub struct RailRequest<'a> {
    /// `--rails`: the NICs, comma-separated.
    pub rails: Option<&'a str>,
    /// `--gpudirect`: the mode whose profile's data NICs are the rails.
    pub mode: Option<&'a str>,
    /// `--config`: where that profile is.
    pub config: &'a std::path::Path,
    /// `--rail-variable`.
    pub rail_variable: Option<&'a str>,
}

/// What [`rail_plan`] asks when neither `--rails` nor `--gpudirect` says.
const RAILS_ASKED: &str = "which NICs are the rails? pass --rails eth1,eth2,... or --gpudirect MODE (its profile's data_nics)";

/// Why the rails cannot be told.
#[derive(Debug, thiserror::Error)]
pub enum RailError {
    /// `--rails` lists no NIC.
    #[error("--rails {list:?} names no NIC: write e.g. --rails eth1,eth2,eth3,eth4")]
    EmptyList {
        /// The `--rails` given.
        list: String,
    },
    /// Without `--gpudirect`, the config could not be read.
    #[error("{RAILS_ASKED}: {error}")]
    NoConfig {
        /// Why.
        error: Box<ProfileError>,
    },
    /// Without `--gpudirect`, the first node's node set gives no profile with data NICs.
    #[error("{RAILS_ASKED}: {first_node}'s node set in {} gives no profile with data_nics", config.display())]
    NoNodeSetRails {
        /// The node asked about.
        first_node: String,
        /// The config.
        config: PathBuf,
    },
    /// The config of `--gpudirect`'s profile is in error.
    #[error("{error}: the rails come from the profile in {}; or pass --rails", config.display())]
    Config {
        /// Its error.
        error: Box<ProfileError>,
        /// The config.
        config: PathBuf,
    },
    /// The profile could not be told.
    #[error(transparent)]
    Profile(Box<ProfileError>),
    /// The mode sets no profile on the node.
    #[error("--gpudirect {mode} sets no profile: pass --rails")]
    NoProfile {
        /// The mode.
        mode: String,
    },
    /// The profile has no data NICs.
    #[error("the profile of --gpudirect {mode} has no data_nics: pass --rails")]
    NoDataNics {
        /// The mode.
        mode: String,
    },
    /// The profile forces the variable that would hold a pair to one rail.
    #[error("the profile of --gpudirect {mode} forces {variable} (its data NICs), so a pair cannot be held to one rail through it: pass --rail-variable")]
    ForcedVariable {
        /// The mode.
        mode: String,
        /// The variable.
        variable: String,
    },
}

// Boxed: a ProfileError is large, and most rail errors carry none.
impl From<ProfileError> for RailError {
    fn from(error: ProfileError) -> Self {
        RailError::Profile(Box::new(error))
    }
}

/// The rails: `--rails`, else the data NICs of the `--gpudirect` profile for the first node
/// (its node set's real names), from `--config`; without `--gpudirect`, of the profile the
/// first node's node set gives it.
pub fn rail_plan(args: &RailRequest, first_node: &str) -> Result<RailPlan, RailError> {
    let fallback = |rdma: bool| {
        args.rail_variable.map(str::to_string).unwrap_or_else(|| {
            if rdma {
                "NCCL_IB_HCA"
            } else {
                "NCCL_SOCKET_IFNAME"
            }
            .to_string()
        })
    };
    if let Some(list) = args.rails {
        let rails: Vec<String> = list
            .split(',')
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect();
        if rails.is_empty() {
            return Err(RailError::EmptyList {
                list: list.to_string(),
            });
        }
        return Ok(RailPlan {
            rails,
            variable: fallback(false),
            rdma: false,
        });
    }
    // Without --gpudirect, the nodes' own profile: their node set's in the config (auto).
    let Some(mode) = args.mode else {
        let auto = Choice::load(args.config, &Mode::Auto.to_string()).map_err(|error| {
            RailError::NoConfig {
                error: Box::new(error),
            }
        })?;
        let found = auto.on(first_node).ok().flatten();
        if found.is_none_or(|r| r.profile.data_nics.is_empty()) {
            return Err(RailError::NoNodeSetRails {
                first_node: first_node.to_string(),
                config: args.config.to_path_buf(),
            });
        }
        return profile_rails(&auto, first_node, args.rail_variable, fallback);
    };
    let choice = Choice::load(args.config, mode).map_err(|e| match e {
        ProfileError::Config { .. } => RailError::Config {
            error: Box::new(e),
            config: args.config.to_path_buf(),
        },
        e => e.into(),
    })?;
    profile_rails(&choice, first_node, args.rail_variable, fallback)
}

/// The rails of the profile `choice` gives `first_node`: its data NICs as the node set
/// names them, and the variable that holds NCCL to one of them.
fn profile_rails(
    choice: &Choice,
    first_node: &str,
    rail_variable: Option<&str>,
    fallback: impl Fn(bool) -> String,
) -> Result<RailPlan, RailError> {
    let mode = &choice.mode;
    let resolved = choice.on(first_node)?.ok_or_else(|| RailError::NoProfile {
        mode: mode.to_string(),
    })?;
    let profile = resolved.profile;
    let rename = |nic: &String| {
        resolved
            .node_set
            .and_then(|s| s.nic_names.get(nic))
            .cloned()
            .unwrap_or_else(|| nic.clone())
    };
    let rails: Vec<String> = profile.data_nics.iter().map(rename).collect();
    if rails.is_empty() {
        return Err(RailError::NoDataNics {
            mode: mode.to_string(),
        });
    }
    let rdma = profile.data_nic_class == NicClass::Infiniband;
    // The variable the profile fills with its data NICs is the one that restricts NCCL to
    // them; one it forces would replace the rail set per pair, so it cannot be used.
    let from_data_nics = profile.env.iter().find(|v| {
        v.value
            .placeholders()
            .any(|p| matches!(p, Placeholder::DataNics))
    });
    let variable = match (&rail_variable, from_data_nics) {
        (Some(v), _) => v.to_string(),
        (None, Some(v)) if v.forced => {
            return Err(RailError::ForcedVariable {
                mode: mode.to_string(),
                variable: v.name.clone(),
            })
        }
        (None, Some(v)) => v.name.clone(),
        (None, None) => fallback(rdma),
    };
    Ok(RailPlan {
        rails,
        variable,
        rdma,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #33: with neither --rails nor --gpudirect, the rails are the data NICs of the
    /// profile the nodes' node set gives them (here tcpx's, renamed by the node set); a node
    /// no node set covers still asks.
    #[test]
    fn the_rails_come_from_the_nodes_own_profile() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("gpudirect.toml");
        std::fs::write(
            &config,
            "[profiles.tcpx]\ntransport = \"GPUDirectTCPX\"\ndata_nics = [\"eth1\", \"eth2\"]\n\
             [[node_set]]\nname = \"a3\"\nhosts = \"node[1-3]\"\nprofile = \"tcpx\"\n\
             nic_names = { eth2 = \"enp12s0\" }\n",
        )
        .unwrap();
        let request = RailRequest {
            rails: None,
            mode: None,
            config: &config,
            rail_variable: None,
        };
        let plan = rail_plan(&request, "node1").unwrap();
        assert_eq!(plan.rails, ["eth1", "enp12s0"]);
        let err = rail_plan(&request, "other7").unwrap_err().to_string();
        assert!(
            err.starts_with("which NICs are the rails?") && err.contains("other7's node set"),
            "{err}"
        );
    }
}
