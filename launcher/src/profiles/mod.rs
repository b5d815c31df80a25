//! `gpudirect profiles`' domain: the views of the config ([`view`]: `list`, `show`) and its
//! lint ([`check`]: `check`, and what `install-overlay` checks before it appends). The
//! command (`commands/profiles.rs`) parses the flags and prints.

pub mod check;
pub mod generate;
pub mod view;
