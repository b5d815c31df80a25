//! The plugin's `--gpudirect=MODE` path against the shipped `slurm-conf/gpudirect.toml`:
//! `Config::parse_mode` on arbitrary bytes (lossy UTF-8, as the plugin reads `optarg`, up
//! to 10 KB although the plugin refuses more than 64 bytes first), then `choose_mode`.
//!
//! Invariants:
//! - never panics;
//! - accepted modes are exactly `none`, `auto` and the profile names, and print back as
//!   written;
//! - a refusal's message, which reaches the user's terminal and the logs, is printable
//!   ASCII on one line and short (the mode is cut to 64 characters);
//! - `choose_mode` agrees with `parse_mode` on the trimmed text, for the option and for
//!   `SLURM_GPUDIRECT`, and the option wins over the environment.
#![no_main]

use std::sync::OnceLock;

use gpudirect_core::config::{parse_config, Config, Mode};
use gpudirect_core::resolve::{choose_mode, ModeSource};
use libfuzzer_sys::fuzz_target;

const SHIPPED: &str = include_str!("../../slurm-conf/gpudirect.toml");

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(
        || match parse_config(SHIPPED, "slurm-conf/gpudirect.toml") {
            Ok(config) => config,
            Err(e) => panic!("the shipped config does not parse: {e}"),
        },
    )
}

/// Fixed text of the message plus the profile list; the mode adds at most 64 + 3 bytes.
fn max_message_len(config: &Config) -> usize {
    200 + config.profile_names().join(", ").len()
}

fuzz_target!(|data: &[u8]| {
    if data.len() > 10 * 1024 {
        return;
    }
    let config = config();
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    match config.parse_mode(text) {
        Ok(mode) => {
            assert_eq!(
                mode.to_string(),
                text,
                "mode does not print back as written"
            );
            match &mode {
                Mode::None => assert_eq!(text, "none"),
                Mode::Auto => assert_eq!(text, "auto"),
                Mode::Profile(name) => assert!(config.profiles.contains_key(name)),
            }
        }
        Err(e) => {
            assert!(
                e.mode.len() <= 64 + 3,
                "mode not shortened: {} bytes",
                e.mode.len()
            );
            let message = e.to_string();
            assert!(
                message.bytes().all(|b| (0x20..0x7f).contains(&b)),
                "message is not printable ASCII: {message:?}"
            );
            assert!(
                message.len() <= max_message_len(config),
                "message of {} bytes",
                message.len()
            );
        }
    }

    let trimmed = text.trim();
    for node in ["a3h-0001", "fuzz-node-without-set"] {
        let by_option = choose_mode(config, node, Some(text), Some("none"));
        let by_env = choose_mode(config, node, None, Some(text));
        let nothing = choose_mode(config, node, None, None);
        if trimmed.is_empty() {
            // Blank text asks for nothing: the next source decides.
            assert_eq!(by_env, nothing);
            let by_option = by_option.expect("`none` from the environment is valid");
            assert_eq!(by_option.map(|c| c.source), Some(ModeSource::Environment));
            continue;
        }
        let parsed = config.parse_mode(trimmed);
        for (chosen, source) in [
            (by_option, ModeSource::Option),
            (by_env, ModeSource::Environment),
        ] {
            match (&parsed, chosen) {
                (Ok(mode), Ok(Some(chosen))) => {
                    assert_eq!(&chosen.mode, mode);
                    assert_eq!(chosen.source, source);
                }
                (Err(want), Err(got)) => assert_eq!(want, &got),
                (want, got) => panic!("parse_mode {want:?} but choose_mode {got:?}"),
            }
        }
    }
});
