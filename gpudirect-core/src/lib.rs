//! The pure model shared by the SPANK plugin and the `gpudirect` launcher.
//!
//! Nothing in this crate does I/O beyond what its callers hand it, except `system` (reading
//! the config, probing the node) and `marks` (what slurmstepd remembers between steps): the
//! admin TOML arrives as text, node facts (NICs, CPUs, sysfs locality) arrive as data.
//! That keeps every rule (profile resolution, templates, precedence, pinning, hostlists)
//! unit-testable and lets `gpudirect profiles explain` show exactly what the plugin
//! computes.

// No function over 150 lines outside tests (clippy.toml's threshold counts code lines),
// as in the binary's commands (issue #42); a test's table of cases may run longer.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod config;
pub mod cpulist;
pub mod derive;
pub mod hostlist;
pub mod lint;
pub mod locality;
pub mod marks;
pub mod overlay;
pub mod resolve;
pub mod system;
pub mod template;
pub mod text;

/// Helpers for this crate's unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    /// A fresh empty directory for one test, in the system temp folder; removed when
    /// dropped, so also when the test fails.
    pub fn temp_dir(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("gpudirect-core-{tag}-"))
            .tempdir()
            .expect("create a test directory")
    }
}
