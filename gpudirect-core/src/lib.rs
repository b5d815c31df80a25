//! The pure model shared by the SPANK plugin and the `gpudirect` launcher.
//!
//! Nothing in this crate does I/O beyond what its callers hand it, except `system` (reading
//! the config, probing the node) and `marks` (what slurmstepd remembers between steps): the
//! admin TOML arrives as text, node facts (NICs, CPUs, sysfs locality) arrive as data.
//! That keeps every rule (profile resolution, templates, precedence, pinning, hostlists)
//! unit-testable and lets `gpudirect profiles explain` show exactly what the plugin
//! computes.

pub mod config;
pub mod cpulist;
pub mod hostlist;
pub mod lint;
pub mod locality;
pub mod marks;
pub mod resolve;
pub mod system;
pub mod template;

/// Helpers for this crate's unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::path::PathBuf;

    /// A fresh empty directory for one test, in the system temp folder.
    pub fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gpudirect-core-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a test directory");
        dir
    }
}
