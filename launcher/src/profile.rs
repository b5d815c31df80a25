//! What `--gpudirect MODE` means on a node, in one place: the admin config read once, the
//! mode parsed once through core's [`Config::parse_mode`], and the profile on each node
//! found by core's [`resolve_profile`], the plugin's own rule. Commands ask a [`Choice`]
//! for the profile ([`Choice::on`]) or for what it implies: the transport a run must use,
//! the NICs it may use, the node's line rate. Nothing outside this module and core matches
//! the words `none` and `auto`.

use std::borrow::Cow;
use std::path::Path;

use gpudirect_core::config::{sanitize_for_message, Config, Mode, NodeSet, Profile, UnknownMode};
use gpudirect_core::resolve::{resolve_profile, ResolveError, Resolved};
use gpudirect_core::system::{load_config, LoadError, Ownership};

/// Why a mode could not be turned into a profile.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The config could not be read.
    #[error("--gpudirect {mode}: {source}")]
    Config {
        /// The mode as given (control characters escaped).
        mode: String,
        /// Why.
        source: LoadError,
    },
    /// The mode names no profile of the config.
    #[error("--gpudirect {mode}: {source}")]
    Mode {
        /// The mode as given (control characters escaped).
        mode: String,
        /// Why.
        source: UnknownMode,
    },
    /// The mode gives the node no profile (`auto` on a node no node set covers).
    #[error("--gpudirect {mode}: {source}")]
    Resolve {
        /// The mode as given (control characters escaped).
        mode: String,
        /// Why.
        source: ResolveError,
    },
}

/// A `--gpudirect` mode and the config it is read against.
#[derive(Debug, Clone)]
pub struct Choice<'c> {
    /// The config; `None` for mode `none`, which needs none.
    config: Option<Cow<'c, Config>>,
    /// The mode, parsed.
    pub mode: Mode,
}

impl Choice<'static> {
    /// Reads the config at `path` (any owner: it only says what to expect) and parses
    /// `mode` against it. Mode `none` reads no config.
    pub fn load(path: &Path, mode: &str) -> Result<Choice<'static>, ProfileError> {
        if Mode::from_word(mode) == Mode::None {
            return Ok(Choice {
                config: None,
                mode: Mode::None,
            });
        }
        let config = load_config(path, Ownership::Any).map_err(|source| ProfileError::Config {
            mode: sanitize_for_message(mode),
            source,
        })?;
        Choice::parse(Cow::Owned(config), mode)
    }
}

impl<'c> Choice<'c> {
    /// `mode` parsed against a config already read.
    pub fn with(config: &'c Config, mode: &str) -> Result<Choice<'c>, ProfileError> {
        Choice::parse(Cow::Borrowed(config), mode)
    }

    fn parse(config: Cow<'c, Config>, mode: &str) -> Result<Choice<'c>, ProfileError> {
        let parsed = config
            .parse_mode(mode)
            .map_err(|source| ProfileError::Mode {
                mode: sanitize_for_message(mode),
                source,
            })?;
        Ok(Choice {
            config: Some(config),
            mode: parsed,
        })
    }

    /// The config, unless the mode is `none`.
    pub fn config(&self) -> Option<&Config> {
        self.config.as_deref()
    }

    /// The config, kept, unless the mode is `none`.
    pub fn into_config(self) -> Option<Config> {
        self.config.map(Cow::into_owned)
    }

    /// The profile the mode gives `node` (the plugin's rule): `None` for mode `none`; an
    /// error where `auto` finds no node set, or a node set without a profile.
    pub fn on(&self, node: &str) -> Result<Option<Resolved<'_>>, ProfileError> {
        let Some(config) = self.config() else {
            return Ok(None);
        };
        resolve_profile(config, node, &self.mode).map_err(|source| ProfileError::Resolve {
            mode: self.mode.to_string(),
            source,
        })
    }

    /// The profile on `node`, where there is one (`None` also where `auto` finds none; a
    /// named profile applies without a node).
    fn found(&self, node: Option<&str>) -> Option<Resolved<'_>> {
        // An empty name is in no node set: a named profile still resolves, `auto` does not.
        self.on(node.unwrap_or_default()).ok().flatten()
    }

    /// The transport a run between nodes must use, from the profile on `node`.
    pub fn transport(&self, node: Option<&str>) -> Option<String> {
        self.found(node)?.profile.transport.clone()
    }

    /// The NICs the profile on `node` lets its transport use ([`profile_nics`]).
    pub fn nics(&self, node: Option<&str>) -> Vec<String> {
        self.found(node)
            .map(|r| profile_nics(r.profile, r.node_set))
            .unwrap_or_default()
    }

    /// The control NIC of the profile on every one of `nodes`, as their node sets name it
    /// (`nic_names`), when they all agree; `None` where a node has no profile or none
    /// declares one, or two nodes name it differently.
    pub fn control_nic(&self, nodes: &[String]) -> Option<String> {
        let mut names = nodes.iter().map(|node| {
            let r = self.on(node).ok().flatten()?;
            let logical = r.profile.control_nic.as_ref()?;
            Some(
                r.node_set
                    .and_then(|s| s.nic_names.get(logical))
                    .unwrap_or(logical)
                    .clone(),
            )
        });
        let first = names.next()??;
        names.all(|n| n.as_ref() == Some(&first)).then_some(first)
    }

    /// The node's line rate (GB/s) the profile on `node` declares.
    pub fn line_rate(&self, node: Option<&str>) -> Option<f64> {
        self.found(node)?.profile.node_line_rate_gbps()
    }
}

impl From<&Mode> for crate::job_log::ProfileChoice {
    /// `gpudirect log`'s judge: a named profile for every rank, none, or each rank's node
    /// set's.
    fn from(mode: &Mode) -> Self {
        match mode {
            Mode::None => crate::job_log::ProfileChoice::None,
            Mode::Auto => crate::job_log::ProfileChoice::NodeSets,
            Mode::Profile(name) => crate::job_log::ProfileChoice::Named(name.clone()),
        }
    }
}

/// The choice a run's `--gpudirect` mode (a cell's, a pair's) makes in `config`, where both
/// are given and the mode is one of the config's.
pub fn of_run<'c>(config: Option<&'c Config>, mode: Option<&str>) -> Option<Choice<'c>> {
    Choice::with(config?, mode?).ok()
}

/// The NICs a profile lets its network transport use on a node of `node_set`: its data NICs
/// and the NICs `gpu_nics` maps GPUs to, as the node set names them (`nic_names`), which is
/// how NCCL prints them. Empty when the profile names none. Which GPU a rank had is not in
/// nccl-tests' output, so a task on another of these NICs than its GPU's passes here;
/// `gpudirect probe` shows each task's NIC.
pub fn profile_nics(profile: &Profile, node_set: Option<&NodeSet>) -> Vec<String> {
    let mut nics: Vec<String> = profile
        .data_nics
        .iter()
        .chain(&profile.gpu_nics)
        .map(|nic| {
            node_set
                .and_then(|s| s.nic_names.get(nic))
                .unwrap_or(nic)
                .clone()
        })
        .collect();
    nics.sort();
    nics.dedup();
    nics
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        gpudirect_core::config::parse_config(
            "[profiles.tcpx]\ntransport = \"GPUDirectTCPX\"\ndata_nics = [\"eth1\", \"eth2\"]\n\
             line_rate_gbit = 200\n\
             [[node_set]]\nname = \"a\"\nhosts = \"n[1-2]\"\nprofile = \"tcpx\"\n\
             [node_set.nic_names]\neth1 = \"enp6s0\"\n",
            "t",
        )
        .unwrap()
    }

    #[test]
    fn expected_transport_comes_from_the_profile() {
        let config = config();
        let transport = |mode: Option<&str>, config: Option<&Config>, node: Option<&str>| {
            of_run(config, mode)?.transport(node)
        };
        assert_eq!(
            transport(Some("tcpx"), Some(&config), None).as_deref(),
            Some("GPUDirectTCPX")
        );
        assert_eq!(
            transport(Some("auto"), Some(&config), Some("n1")).as_deref(),
            Some("GPUDirectTCPX")
        );
        assert_eq!(transport(Some("none"), Some(&config), None), None);
        assert_eq!(transport(None, Some(&config), None), None);
        assert_eq!(transport(Some("tcpx"), None, None), None);
        // auto off every node set, and a mode the config does not know: no expectation.
        assert_eq!(transport(Some("auto"), Some(&config), Some("m1")), None);
        assert_eq!(transport(Some("tcpz"), Some(&config), None), None);
    }

    /// The control NIC as the node sets name it, only where every node agrees.
    #[test]
    fn the_control_nic_is_named_where_every_node_agrees() {
        let config = gpudirect_core::config::parse_config(
            "[profiles.tcpx]\ncontrol_nic = \"eth0\"\ndata_nics = [\"eth1\"]\n\
             [profiles.bare]\ndata_nics = [\"eth1\"]\n\
             [[node_set]]\nname = \"a\"\nhosts = \"n[1-2]\"\nprofile = \"tcpx\"\n\
             [[node_set]]\nname = \"b\"\nhosts = \"m[1-2]\"\nprofile = \"tcpx\"\n\
             [node_set.nic_names]\neth0 = \"ens4\"\n",
            "t",
        )
        .unwrap();
        let nodes = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let tcpx = Choice::with(&config, "tcpx").unwrap();
        assert_eq!(
            tcpx.control_nic(&nodes(&["n1", "n2"])).as_deref(),
            Some("eth0")
        );
        assert_eq!(
            tcpx.control_nic(&nodes(&["m1", "m2"])).as_deref(),
            Some("ens4")
        );
        // Two names for it: none is right for every node.
        assert_eq!(tcpx.control_nic(&nodes(&["n1", "m1"])), None);
        assert_eq!(
            Choice::with(&config, "bare")
                .unwrap()
                .control_nic(&nodes(&["n1"])),
            None
        );
        assert_eq!(
            Choice::with(&config, "none")
                .unwrap()
                .control_nic(&nodes(&["n1"])),
            None
        );
        assert_eq!(tcpx.control_nic(&[]), None);
    }

    #[test]
    fn auto_and_the_profiles_name_mean_the_same_on_its_nodes() {
        let config = config();
        let auto = Choice::with(&config, "auto").unwrap();
        let named = Choice::with(&config, "tcpx").unwrap();
        for choice in [&auto, &named] {
            assert_eq!(choice.line_rate(Some("n1")), Some(50.0));
            assert_eq!(choice.nics(Some("n2")), ["enp6s0", "eth2"]);
            assert_eq!(choice.on("n1").unwrap().unwrap().profile.name, "tcpx");
        }
        // Off the node sets: the name still applies, auto is an error that says why.
        assert_eq!(named.line_rate(Some("m1")), Some(50.0));
        assert_eq!(named.nics(Some("m1")), ["eth1", "eth2"]);
        let e = auto.on("m1").unwrap_err().to_string();
        assert!(e.starts_with("--gpudirect auto: "), "{e}");
        assert!(e.contains("m1"), "{e}");
    }

    #[test]
    fn none_reads_no_config_and_an_unknown_mode_names_the_known_ones() {
        let missing = Path::new("/nonexistent/gpudirect.toml");
        let none = Choice::load(missing, "none").unwrap();
        assert_eq!(none.mode, Mode::None);
        assert!(none.config().is_none());
        assert!(none.on("n1").unwrap().is_none());
        let e = Choice::load(missing, "tcpx").unwrap_err().to_string();
        assert!(e.starts_with("--gpudirect tcpx: "), "{e}");
        let config = config();
        let e = Choice::with(&config, "tcpz").unwrap_err().to_string();
        assert_eq!(
            e,
            "--gpudirect tcpz: unknown --gpudirect mode `tcpz`: use `auto`, `none` or a profile (tcpx)"
        );
    }
}
