//! Marks that let slurmstepd skip reading the config for steps that do not use the plugin.
//!
//! Reading the admin's config is most of what the plugin costs a job step: about 0.3 ms of
//! a 28 ms `srun -N1 true` on the bench machine (docs/benchmarks.md), paid by every step on
//! every node, including the many that never ask for a mode. Such a step is left untouched
//! when the config is valid and gives the node no default mode, and that verdict depends
//! only on the exact version of the config file, the plugin's code and the node. So once a
//! full read on a node reaches it, slurmstepd leaves an empty file whose name says exactly
//! that, and later steps on that node that ask for no mode skip the read while the
//! config's [`FileStamp`] still matches. The plugin's code is named by a build id (a hash
//! of its sources, made at build time), so marks of another build never count. Writing a
//! mark removes the node's older ones, and no mark is written into a directory that
//! already holds [`MAX_MARKS`] files.
//!
//! What does not change: errors are never remembered (a broken config is read and reported
//! at every step); the ownership checks of the config and its directories run at every
//! step; a step that asks for a mode always reads the config.
//!
//! Where: slurmstepd looks marks up and writes them in the remote `init_post_opt`, where it
//! still runs as root. `user_init` runs with the job user's effective credentials (Slurm
//! drops them before calling it), so there the directory could be neither trusted nor
//! written, and an ordinary user's steps never got a mark (security review F1).
//!
//! Trust: the directory, [`MARKS_DIR`], comes from the shipped tmpfiles.d entry
//! (`slurm-conf/tmpfiles.d/gpudirect-slurm.conf`); the plugin never creates it. It must be
//! a real directory owned by root and writable by root only, and a mark a regular file
//! owned by root; anything else is ignored and never written into, and the plugin then
//! reads the config every time. Deleting a mark or the directory's contents at any time is
//! safe: the next step reads the config again and writes a new mark.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::system::{safe_from_others, FileStamp};

/// Where slurmstepd keeps the marks (a tmpfs on most systems: gone at reboot).
pub const MARKS_DIR: &str = "/run/gpudirect-slurm";

/// A config changed less than this many seconds ago is not marked. File times come from a
/// coarse clock (a few ms): a change landing in the same tick as the version that was
/// read, with the same size, would keep the stamp. Older than this, any later change gets
/// a later time, so the stamp names one content (git's "racy clean" problem).
pub const SETTLE_SECS: i64 = 2;

/// Longest node name a mark is written for (Slurm's own limit is lower).
const MAX_NODE_LEN: usize = 64;

/// A marks directory holding this many files gets no more (each node keeps one mark).
pub const MAX_MARKS: usize = 1024;

/// The marks directory of one node, once trusted.
#[derive(Debug)]
pub struct UntouchedMarks {
    dir: PathBuf,
    owner: u32,
}

impl UntouchedMarks {
    /// The marks under `dir`. `None` when it is missing or cannot be trusted (not a
    /// directory, not owned by root, writable by others): the plugin then reads the config
    /// at every step.
    pub fn open(dir: &Path) -> Option<Self> {
        Self::open_owned_by(dir, 0)
    }

    /// [`UntouchedMarks::open`] with another owner than root (for tests run unprivileged).
    pub fn open_owned_by(dir: &Path, owner: u32) -> Option<Self> {
        // Never created here: a directory made by whichever process came first would be
        // as trustworthy as that process; the tmpfiles.d entry makes it at boot.
        let meta = std::fs::symlink_metadata(dir).ok()?;
        let trusted = meta.is_dir() && safe_from_others(&meta, &[owner]).is_ok();
        trusted.then(|| UntouchedMarks {
            dir: dir.to_path_buf(),
            owner,
        })
    }

    /// Whether a full read already found that `config` (this version), read by the plugin
    /// build `build`, leaves steps on `node` that ask for no mode untouched.
    pub fn contains(&self, node: &str, config: &FileStamp, build: &str) -> bool {
        let Some(name) = mark_name(node, config, build) else {
            return false;
        };
        match std::fs::symlink_metadata(self.dir.join(name)) {
            Ok(meta) => meta.is_file() && meta.uid() == self.owner,
            Err(_) => false,
        }
    }

    /// Records that verdict, after a full read found it, and removes the node's older
    /// marks. Does nothing for a config changed in the last [`SETTLE_SECS`], an odd node
    /// name or build id, or a full directory; an error is only a lost shortcut.
    pub fn record(&self, node: &str, config: &FileStamp, build: &str) -> std::io::Result<()> {
        let Some(name) = mark_name(node, config, build) else {
            return Ok(());
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        if config.ctime.0 > now.saturating_sub(SETTLE_SECS) {
            return Ok(());
        }
        let mut existing = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            existing.push(entry?.file_name());
            if existing.len() >= MAX_MARKS {
                return Ok(());
            }
        }
        let created = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(self.dir.join(&name));
        match created {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        // The node's marks for other config versions or builds will never match again.
        let own = format!("{MARK}@{node}@");
        for old in existing {
            let old = old.to_string_lossy();
            if old.starts_with(&own) && *old != name {
                let _ = std::fs::remove_file(self.dir.join(&*old));
            }
        }
        Ok(())
    }
}

/// What every mark's name starts with.
const MARK: &str = "untouched";

/// A mark's file name in the marks directory, `untouched@<node>@<config stamp>@<build>`,
/// or `None` for a node name that is not a plain Slurm node name (letters, digits, `.`,
/// `_`, `-`) or a build id that is not 1 to 64 letters and digits.
pub fn mark_name(node: &str, config: &FileStamp, build: &str) -> Option<String> {
    let plain_build =
        (1..=64).contains(&build.len()) && build.bytes().all(|b| b.is_ascii_alphanumeric());
    Some(format!("{}{build}", mark_prefix(node, config)?)).filter(|_| plain_build)
}

/// The part of a mark's name before the build id: `untouched@<node>@<config stamp>@`.
pub fn mark_prefix(node: &str, config: &FileStamp) -> Option<String> {
    let plain = !node.is_empty()
        && node.len() <= MAX_NODE_LEN
        && !node.starts_with('.')
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    plain.then(|| format!("{MARK}@{node}@{}@", stamp(config)))
}

fn stamp(s: &FileStamp) -> String {
    format!(
        "{:x}.{:x}.{:x}.{}.{}.{}.{}",
        s.dev, s.ino, s.size, s.mtime.0, s.mtime.1, s.ctime.0, s.ctime.1
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn euid() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    fn scratch(name: &str) -> tempfile::TempDir {
        crate::test_support::temp_dir(&format!("marks-{name}"))
    }

    fn settled(size: u64) -> FileStamp {
        FileStamp {
            dev: 2049,
            ino: 77,
            size,
            mtime: (1_700_000_000, 5),
            ctime: (1_700_000_000, 7),
        }
    }

    #[test]
    fn a_recorded_mark_is_found_for_that_node_config_and_build_only() {
        let tmp = scratch("found");
        let root = tmp.path();
        assert!(
            UntouchedMarks::open_owned_by(&root.join("m"), euid()).is_none(),
            "a missing directory is not created"
        );
        std::fs::create_dir(root.join("m")).unwrap();
        std::fs::set_permissions(root.join("m"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let marks = UntouchedMarks::open_owned_by(&root.join("m"), euid()).expect("trusted");
        let (config, build) = (settled(100), "0123abcd");
        assert!(!marks.contains("node1", &config, build));
        marks.record("node1", &config, build).unwrap();
        marks.record("node1", &config, build).unwrap(); // twice is fine
        assert!(marks.contains("node1", &config, build));
        assert!(!marks.contains("node2", &config, build));
        assert!(
            !marks.contains("node1", &settled(101), build),
            "config changed"
        );
        assert!(
            !marks.contains("node1", &config, "0123abce"),
            "plugin rebuilt"
        );
        let mark = std::fs::read_dir(root.join("m"))
            .unwrap()
            .next()
            .expect("one mark")
            .unwrap();
        let mode = mark.metadata().unwrap().permissions().mode();
        assert_eq!(mode & 0o022, 0, "a mark has no group/other write");
    }

    #[test]
    fn a_new_mark_replaces_the_nodes_older_ones_only() {
        let tmp = scratch("prune");
        let root = tmp.path();
        let marks = UntouchedMarks::open_owned_by(root, euid()).unwrap();
        marks.record("node1", &settled(100), "aa").unwrap();
        marks.record("node1-gpu", &settled(100), "aa").unwrap();
        marks.record("node2", &settled(100), "aa").unwrap();
        marks.record("node1", &settled(200), "aa").unwrap();
        assert!(!marks.contains("node1", &settled(100), "aa"), "pruned");
        assert!(marks.contains("node1", &settled(200), "aa"));
        assert!(
            marks.contains("node1-gpu", &settled(100), "aa"),
            "another node"
        );
        assert!(marks.contains("node2", &settled(100), "aa"));
        assert_eq!(std::fs::read_dir(root).unwrap().count(), 3);
    }

    #[test]
    fn a_full_directory_gets_no_more_marks() {
        let tmp = scratch("full");
        let root = tmp.path();
        for i in 0..MAX_MARKS {
            std::fs::write(root.join(format!("other-{i}")), "").unwrap();
        }
        let marks = UntouchedMarks::open_owned_by(root, euid()).unwrap();
        marks.record("node1", &settled(1), "aa").unwrap();
        assert!(!marks.contains("node1", &settled(1), "aa"));
    }

    #[test]
    fn a_config_changed_just_now_is_not_marked() {
        let tmp = scratch("racy");
        let root = tmp.path();
        let marks = UntouchedMarks::open_owned_by(root, euid()).unwrap();
        let now = i64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs(),
        )
        .unwrap();
        let fresh = FileStamp {
            ctime: (now, 0),
            ..settled(100)
        };
        marks.record("node1", &fresh, "aa").unwrap();
        assert!(!marks.contains("node1", &fresh, "aa"));
    }

    #[test]
    fn untrusted_directories_and_marks_are_ignored() {
        let tmp = scratch("untrusted");
        let root = tmp.path();
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            UntouchedMarks::open_owned_by(root, euid()).is_none(),
            "world-writable"
        );
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(
            UntouchedMarks::open_owned_by(root, euid() + 1).is_none(),
            "someone else's"
        );
        let file = root.join("file");
        std::fs::write(&file, "").unwrap();
        assert!(
            UntouchedMarks::open_owned_by(&file, euid()).is_none(),
            "not a dir"
        );
        let link = root.join("link");
        std::os::unix::fs::symlink(root, &link).unwrap();
        assert!(
            UntouchedMarks::open_owned_by(&link, euid()).is_none(),
            "a symlink"
        );

        // A mark that is a symlink, or not owned by the trusted owner, does not count.
        let marks = UntouchedMarks::open_owned_by(root, euid()).unwrap();
        let config = settled(1);
        let name = mark_name("node1", &config, "aa").unwrap();
        std::os::unix::fs::symlink(&file, root.join(&name)).unwrap();
        assert!(!marks.contains("node1", &config, "aa"));
        assert!(
            marks.record("node1", &config, "aa").is_ok(),
            "exists: left alone"
        );
        assert!(!marks.contains("node1", &config, "aa"));
        let other_owner = UntouchedMarks {
            dir: root.to_path_buf(),
            owner: euid() + 1,
        };
        std::fs::remove_file(root.join(&name)).unwrap();
        marks.record("node1", &config, "aa").unwrap();
        assert!(!other_owner.contains("node1", &config, "aa"));
    }

    #[test]
    fn odd_node_names_and_build_ids_get_no_mark() {
        let c = settled(1);
        for node in [
            "",
            "../etc",
            "a/b",
            ".hidden",
            "a b",
            "a@b",
            &"n".repeat(65),
            "nöde",
        ] {
            assert_eq!(mark_name(node, &c, "aa"), None, "{node:?}");
        }
        for build in ["", "a/b", "a@b", &"f".repeat(65)] {
            assert_eq!(mark_name("node1", &c, build), None, "{build:?}");
        }
        assert_eq!(
            mark_name("gpu-a3.node_1", &c, "00ff").unwrap(),
            "untouched@gpu-a3.node_1@801.4d.1.1700000000.5.1700000000.7@00ff"
        );
    }
}
