//! The plugin's state in one process (srun, sbatch, salloc or one slurmstepd), as one
//! struct in one static, the way pyxis keeps its `plugin_context`; and the plugstack.conf
//! arguments it starts from.
//!
//! A static, not the plugin struct, because the option callback is a plain C function
//! that Slurm calls outside slurm-spank's guard, and per-node plans borrow the config for
//! the process's lifetime. Each field is set at most once (or, for the option, replaced
//! whole under its lock), so no callback sees a half-written state.

use std::path::Path;
use std::sync::{Mutex, OnceLock};

use gpudirect_core::config::{declares_profile, sanitize_for_message, Config, RESERVED_MODES};
use gpudirect_core::system::{load_config, read_config_text, Ownership};

/// This process's state. The only instance is [`STATE`].
pub(crate) struct State {
    /// The config's path from plugstack.conf (or why there is none), set in `init`.
    config_path: OnceLock<Result<String, String>>,
    /// The config, read at most once per process: in slurmstepd in `user_init`; in srun,
    /// sbatch and salloc only when a mode was asked for, so that a step without
    /// `--gpudirect` does not pay for reading it.
    config: OnceLock<Result<Config, String>>,
    /// The config's text, unparsed (srun, sbatch, salloc: [`State::mode_declared`]).
    config_text: OnceLock<Result<String, String>>,
    /// The `--gpudirect` value Slurm handed to the option callback, if any.
    option: Mutex<Option<String>>,
    /// slurmstepd: `init_post_opt` (as root) found this step, which asks for no mode, left
    /// untouched by the config on this node, so `user_init` need not read it.
    untouched_by_mark: OnceLock<()>,
}

/// The state of this process.
pub(crate) static STATE: State = State::new();

impl State {
    const fn new() -> Self {
        State {
            config_path: OnceLock::new(),
            config: OnceLock::new(),
            config_text: OnceLock::new(),
            option: Mutex::new(None),
            untouched_by_mark: OnceLock::new(),
        }
    }

    /// Records that this step is left untouched on this node (see the field).
    pub(crate) fn set_untouched_by_mark(&self) {
        let _ = self.untouched_by_mark.set(());
    }

    /// Whether `init_post_opt` left this step untouched on this node.
    pub(crate) fn untouched_by_mark(&self) -> bool {
        self.untouched_by_mark.get().is_some()
    }

    /// Keeps the config path from plugstack.conf (the first call wins).
    pub(crate) fn set_config_path(&self, path: Result<String, String>) {
        let _ = self.config_path.set(path);
    }

    /// The config path from plugstack.conf; `None` before `init` ran.
    pub(crate) fn config_path(&self) -> Option<&Result<String, String>> {
        self.config_path.get()
    }

    /// The config, read on the first call (unless [`State::keep_config`] gave it).
    pub(crate) fn config(&self) -> Result<&Config, String> {
        let loaded = self.config.get_or_init(|| match self.config_path.get() {
            Some(Ok(path)) => {
                load_config(Path::new(path), Ownership::RootOnly).map_err(|e| e.to_string())
            }
            Some(Err(e)) => Err(e.clone()),
            None => Err("the config path is unknown (plugin init did not run)".into()),
        });
        loaded.as_ref().map_err(Clone::clone)
    }

    /// Whether `mode` is `auto`, `none`, or a profile the config's text declares
    /// ([`declares_profile`]: a scan, not a parse). srun, sbatch and salloc accept a mode on
    /// `true`; on `false`, or when the file cannot be read, they parse it ([`State::config`])
    /// for the exact answer and message.
    pub(crate) fn mode_declared(&self, mode: &str) -> bool {
        if RESERVED_MODES.contains(&mode) {
            return true;
        }
        let text = self
            .config_text
            .get_or_init(|| match self.config_path.get() {
                Some(Ok(path)) => read_config_text(Path::new(path), Ownership::RootOnly)
                    .map(|(text, _)| text)
                    .map_err(|e| e.to_string()),
                Some(Err(e)) => Err(e.clone()),
                None => Err("the config path is unknown (plugin init did not run)".into()),
            });
        text.as_ref().is_ok_and(|text| declares_profile(text, mode))
    }

    /// Keeps a config already read (slurmstepd's `init_post_opt`), so that [`State::config`]
    /// does not read the file again; a config read earlier stays.
    pub(crate) fn keep_config(&self, config: Config) {
        let _ = self.config.set(Ok(config));
    }

    /// Keeps the `--gpudirect` value; false if the lock is poisoned.
    pub(crate) fn set_option(&self, value: String) -> bool {
        match self.option.lock() {
            Ok(mut slot) => {
                *slot = Some(value);
                true
            }
            Err(_) => false,
        }
    }

    /// The `--gpudirect` value, if one was given.
    pub(crate) fn option(&self) -> Option<String> {
        self.option.lock().ok().and_then(|v| v.clone())
    }
}

/// The config path from the plugin's arguments in plugstack.conf: `config=/abs/path`,
/// and nothing else.
pub(crate) fn config_path_from_args(args: &[&str]) -> Result<String, String> {
    let mut path = None;
    for arg in args {
        match arg.split_once('=') {
            Some(("config", value)) if value.starts_with('/') => path = Some(value.to_string()),
            Some(("config", _)) => {
                return Err("plugstack.conf: config= needs an absolute path".into())
            }
            _ => {
                return Err(format!(
                    "plugstack.conf: unknown argument `{}` (the plugin takes config=/etc/slurm/gpudirect.toml)",
                    sanitize_for_message(arg)
                ))
            }
        }
    }
    path.ok_or_else(|| {
        "plugstack.conf: add config=/etc/slurm/gpudirect.toml after spank_gpudirect.so".into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_arguments() {
        assert_eq!(
            config_path_from_args(&["config=/etc/slurm/gpudirect.toml"]),
            Ok("/etc/slurm/gpudirect.toml".into())
        );
        let refused =
            |args: &[&str], why: &str| config_path_from_args(args).is_err_and(|e| e.contains(why));
        assert!(refused(&[], "add config="));
        assert!(refused(&["config=rel.toml"], "absolute"));
        assert!(refused(&["conf=/x"], "unknown argument"));
    }

    #[test]
    fn the_config_is_not_read_before_init_names_it() {
        let state = State::new();
        assert!(state
            .config()
            .is_err_and(|e| e.contains("plugin init did not run")));
        assert!(!state.untouched_by_mark());
    }

    #[test]
    fn a_bad_plugstack_line_is_what_reading_the_config_reports() {
        let state = State::new();
        state.set_config_path(config_path_from_args(&["config=rel.toml"]));
        assert!(state.config().is_err_and(|e| e.contains("absolute")));
    }

    #[test]
    fn a_kept_config_is_not_read_again() {
        let state = State::new();
        // No config path: a read would fail, so the config must be the kept one.
        let config = gpudirect_core::config::parse_config("[profiles.a]\n", "test").unwrap();
        state.keep_config(config);
        assert!(state.config().is_ok_and(|c| c.profiles.contains_key("a")));
    }

    #[test]
    fn an_untouched_step_stays_untouched() {
        let state = State::new();
        state.set_untouched_by_mark();
        state.set_untouched_by_mark();
        assert!(state.untouched_by_mark());
    }

    #[test]
    fn the_option_is_kept_whole() {
        let state = State::new();
        assert_eq!(state.option(), None);
        assert!(state.set_option("tcpx".into()));
        assert!(state.set_option("none".into()));
        assert_eq!(state.option().as_deref(), Some("none"));
    }
}
