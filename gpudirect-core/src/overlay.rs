//! A config with profile overlays appended: the text the plugin reads once an admin has run
//! `cat OVERLAY >> /etc/slurm/gpudirect.toml`, and which file each of its lines came from.
//!
//! `gpudirect tune --write` writes an overlay: a TOML fragment that declares one new profile,
//! usually one that `extends` a profile of the config. Appending it is safe when the whole
//! text checks and the overlay declares only new profiles. The second is checked here, not
//! left to the TOML parser: TOML lets a later `[profiles.tcpx.env]` add to a `tcpx` that
//! the config declares without an `[env]` table, which would change the config's profile
//! instead of adding one.
//!
//! Lines in messages about the whole text are mapped back with [`Overlaid::locate`], so an
//! error in an overlay names the overlay's file and its own line.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

use crate::config::{config_errors, parse_config, Config, ConfigError};
use crate::text::{escape_controls, line_of, one_line};

/// One file's lines in the whole text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    /// The file, as messages name it.
    source: String,
    /// The whole text's line (from 1) where the file's first line is.
    first_line: usize,
}

/// A profile declared by one of the parts: where its name is first written.
#[derive(Debug, Clone)]
struct Declared {
    source: String,
    line: usize,
}

/// A file that does not end with a line break, and is followed by an overlay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unterminated {
    /// The file.
    pub source: String,
    /// Its last line (from 1).
    pub line: usize,
    /// The overlay that follows it.
    pub next: String,
}

/// The config's text with overlays appended, and where each line came from.
#[derive(Debug, Clone)]
pub struct Overlaid {
    text: String,
    parts: Vec<Part>,
    /// Profiles declared so far, by name.
    declared: BTreeMap<String, Declared>,
    unterminated: Vec<Unterminated>,
}

/// Just the profile names of a text, with their spans; everything else is skipped.
#[derive(Deserialize)]
struct ProfileNames {
    #[serde(default)]
    profiles: BTreeMap<Spanned<String>, IgnoredAny>,
}

/// What an overlay may hold on its own: `[profiles.NAME]` tables and nothing else. A key
/// before its first header would, once appended, land in whatever table the config ends
/// with (an existing profile's `[env]`), and a `[[node_set]]` or `default_mode` would change
/// what the config's nodes get: both are refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OverlayOnly {
    #[serde(default)]
    profiles: BTreeMap<Spanned<String>, IgnoredAny>,
}

impl Overlaid {
    /// The config's own text; `source` names it in messages.
    pub fn new(text: &str, source: &str) -> Self {
        let mut overlaid = Overlaid {
            text: String::new(),
            parts: Vec::new(),
            declared: BTreeMap::new(),
            unterminated: Vec::new(),
        };
        overlaid.push(text, source);
        // A config that is not TOML declares nothing here: [`Overlaid::parse`] reports it.
        if let Ok(names) = profile_names(text) {
            overlaid.declare(names, source, text);
        }
        overlaid
    }

    /// Appends an overlay (`source` names it in messages). It must be TOML on its own and
    /// declare no profile the config or an earlier overlay declares; the error names the
    /// overlay's file and line.
    pub fn append(&mut self, text: &str, source: &str) -> Result<(), ConfigError> {
        let names = toml::from_str::<OverlayOnly>(text)
            .map(|o| o.profiles)
            .map_err(|e| ConfigError {
                file: source.to_string(),
                line: e.span().map(|s| line_of(text, s.start)),
                key: None,
                message: format!(
                    "{} (an overlay holds only [profiles.NAME] tables: no key before the first header, no node_set or default_mode)",
                    one_line(e.message())
                ),
            })?;
        for name in names.keys() {
            if let Some(earlier) = self.declared.get(name.get_ref()) {
                return Err(ConfigError {
                    file: source.to_string(),
                    line: Some(line_of(text, name.span().start)),
                    key: Some(escape_controls(&format!("profiles.{}", name.get_ref()))),
                    message: escape_controls(&format!(
                        "{}:{} already declares profile `{}`, and an overlay may only add profiles: rename the profile in {source}",
                        earlier.source,
                        earlier.line,
                        name.get_ref()
                    )),
                });
            }
        }
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            if let Some(last) = self.parts.last() {
                self.unterminated.push(Unterminated {
                    source: last.source.clone(),
                    line: line_of(&self.text, self.text.len()) - last.first_line + 1,
                    next: source.to_string(),
                });
            }
            // What the admin gets once they end the file with a line break, as they must.
            self.text.push('\n');
        }
        self.push(text, source);
        self.declare(names, source, text);
        Ok(())
    }

    fn push(&mut self, text: &str, source: &str) {
        self.parts.push(Part {
            source: source.to_string(),
            first_line: line_of(&self.text, self.text.len()),
        });
        self.text.push_str(text);
    }

    fn declare(&mut self, names: BTreeMap<Spanned<String>, IgnoredAny>, source: &str, text: &str) {
        for name in names.into_keys() {
            let line = line_of(text, name.span().start);
            self.declared.insert(
                name.into_inner(),
                Declared {
                    source: source.to_string(),
                    line,
                },
            );
        }
    }

    /// The whole text: the config, then each overlay.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Files followed by an overlay that do not end with a line break: `cat OVERLAY >>`
    /// would join their last line to the overlay's first. The whole text has a line break
    /// there, as the file will have once it is fixed.
    pub fn unterminated(&self) -> &[Unterminated] {
        &self.unterminated
    }

    /// The file and its own line (from 1) of line `line` of the whole text.
    pub fn locate(&self, line: usize) -> (&str, usize) {
        let index = self
            .parts
            .partition_point(|p| p.first_line <= line)
            .saturating_sub(1);
        match self.parts.get(index) {
            Some(part) if line >= part.first_line => {
                (part.source.as_str(), line - part.first_line + 1)
            }
            _ => ("", line),
        }
    }

    /// A message about the whole text, made to name the file and line it is about.
    pub fn relocate(&self, mut error: ConfigError) -> ConfigError {
        if let Some(line) = error.line {
            let (source, own) = self.locate(line);
            if !source.is_empty() {
                error.file = source.to_string();
                error.line = Some(own);
            }
        }
        error
    }

    /// Parses and checks the whole text as the plugin would, with the config's name as the
    /// source (as the installed file is); an error names the file and line it is in.
    pub fn parse(&self) -> Result<Config, ConfigError> {
        let source = self.parts.first().map_or("", |p| p.source.as_str());
        parse_config(&self.text, source).map_err(|e| self.relocate(e))
    }

    /// [`Overlaid::parse`] with every error of the whole text ([`config_errors`]), each
    /// naming the file and line it is in; the first is `parse`'s.
    pub fn parse_all(&self) -> Result<Config, Vec<ConfigError>> {
        let source = self.parts.first().map_or("", |p| p.source.as_str());
        config_errors(&self.text, source)
            .map_err(|all| all.into_iter().map(|e| self.relocate(e)).collect())
    }
}

fn profile_names(text: &str) -> Result<BTreeMap<Spanned<String>, IgnoredAny>, toml::de::Error> {
    toml::from_str::<ProfileNames>(text).map(|n| n.profiles)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "[profiles.tcpx]\ntransport = \"GPUDirectTCPX\"\ndata_nics = [\"eth1\"]\n[profiles.tcpx.env]\nNCCL_NET = \"GPUDirectTCPX_v7\"\n";

    const TUNED: &str = "# tuned\n[profiles.tcpx-tuned]\nextends = \"tcpx\"\n\n[profiles.tcpx-tuned.env]\nNCCL_MIN_NCHANNELS = \"32\"\n";

    fn overlaid(overlays: &[(&str, &str)]) -> Result<Overlaid, ConfigError> {
        let mut whole = Overlaid::new(CONFIG, "/etc/slurm/gpudirect.toml");
        for (text, source) in overlays {
            whole.append(text, source)?;
        }
        Ok(whole)
    }

    #[test]
    fn an_overlay_extending_a_profile_parses_and_its_lines_map_back() {
        let whole = overlaid(&[(TUNED, "tuned.toml")]).unwrap();
        assert_eq!(whole.text(), format!("{CONFIG}{TUNED}"));
        let config = whole.parse().unwrap();
        assert_eq!(config.source, "/etc/slurm/gpudirect.toml");
        let tuned = &config.profiles["tcpx-tuned"];
        assert_eq!(tuned.transport.as_deref(), Some("GPUDirectTCPX"));
        assert_eq!(whole.locate(tuned.lines.name), ("tuned.toml", 2));
        let new = tuned.env.iter().find(|v| v.name == "NCCL_MIN_NCHANNELS");
        assert_eq!(whole.locate(new.unwrap().line), ("tuned.toml", 6));
        // An inherited key is the config's.
        let data_nics = tuned.lines.data_nics.unwrap();
        assert_eq!(whole.locate(data_nics), ("/etc/slurm/gpudirect.toml", 3));
        assert!(whole.unterminated().is_empty());
    }

    #[test]
    fn an_overlay_that_would_change_the_config_rather_than_add_a_profile_is_refused() {
        // Appended after a config that ends inside [profiles.tcpx.env], a bare key would
        // join tcpx's variables; a node set or a default mode would change the nodes.
        for (overlay, says) in [
            (
                "NCCL_IB_HCA = \"mlx5_9\"\n[profiles.x.env]\nA = \"1\"\n",
                "NCCL_IB_HCA",
            ),
            (
                "[[node_set]]\nname = \"n\"\nhosts = \"a\"\nprofile = \"x\"\n",
                "node_set",
            ),
            ("default_mode = \"auto\"\n", "default_mode"),
        ] {
            let e = overlaid(&[(overlay, "bad.toml")]).unwrap_err();
            assert_eq!(e.file, "bad.toml", "{e}");
            assert!(e.message.contains(says), "{e}");
            assert!(e.message.contains("only [profiles.NAME] tables"), "{e}");
        }
    }

    #[test]
    fn an_error_in_an_overlay_names_the_overlay_and_its_line() {
        let typo = TUNED.replace("extends = \"tcpx\"", "extends = \"tpcx\"");
        let whole = overlaid(&[
            (TUNED, "a.toml"),
            (&typo.replace("tcpx-tuned", "b"), "b.toml"),
        ])
        .unwrap();
        let e = whole.parse().unwrap_err();
        assert_eq!(e.file, "b.toml");
        assert_eq!(e.line, Some(3));
        assert_eq!(e.key.as_deref(), Some("profiles.b.extends"));
        assert!(e.message.contains("no profile `tpcx` to extend"), "{e}");
        // A TOML error of the overlay alone is found before appending.
        let e = overlaid(&[("\n[profiles.x\n", "broken.toml")]).unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("broken.toml", Some(2)));
    }

    #[test]
    fn an_overlay_may_not_touch_a_profile_that_exists() {
        for (text, line) in [
            ("[profiles.tcpx]\ntransport = \"X\"\n", 1),
            // TOML alone would take this: it adds checks to the config's tcpx.
            ("\n\n[profiles.tcpx.checks]\nnics = true\n", 3),
            ("profiles.tcpx.strict = true\n", 1),
        ] {
            let e = overlaid(&[(text, "tuned.toml")]).unwrap_err();
            assert_eq!(e.file, "tuned.toml", "{text}");
            assert_eq!(e.line, Some(line), "{text}");
            assert_eq!(e.key.as_deref(), Some("profiles.tcpx"), "{text}");
            assert_eq!(
                e.message,
                "/etc/slurm/gpudirect.toml:1 already declares profile `tcpx`, and an overlay may only add profiles: rename the profile in tuned.toml"
            );
        }
        let e = overlaid(&[(TUNED, "a.toml"), (TUNED, "b.toml")]).unwrap_err();
        assert_eq!(e.file, "b.toml");
        assert!(
            e.message
                .starts_with("a.toml:2 already declares profile `tcpx-tuned`"),
            "{e}"
        );
    }

    #[test]
    fn a_file_without_a_final_line_break_is_reported() {
        let config = CONFIG.trim_end();
        let mut whole = Overlaid::new(config, "g.toml");
        whole.append(TUNED, "tuned.toml").unwrap();
        assert_eq!(
            whole.unterminated(),
            [Unterminated {
                source: "g.toml".into(),
                line: 5,
                next: "tuned.toml".into()
            }]
        );
        let config = whole.parse().unwrap();
        assert_eq!(
            whole.locate(config.profiles["tcpx-tuned"].lines.name),
            ("tuned.toml", 2)
        );
    }

    #[test]
    fn without_overlays_lines_are_the_configs() {
        let whole = Overlaid::new(CONFIG, "g.toml");
        assert_eq!(whole.locate(4), ("g.toml", 4));
        let e = Overlaid::new("[profiles.x]\nstrict = tru\n", "g.toml")
            .parse()
            .unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("g.toml", Some(2)));
    }
}
