//! The readings kept between runs: `STATE_DIR/nic-counters-NODE.json`, one file per node
//! (nodes that share a folder, as the local cluster's do, keep theirs apart).
//!
//! The folder is made one folder at a time and never through another user's link (the
//! history's rule, security review T9); as root it must be root's alone with every folder
//! above it (the textfile's rule, T10). The file is read only when it is a regular file of
//! this user's that nobody else may write (never through a link: `O_NOFOLLOW`), and
//! written whole under a temporary name, mode 0600, then renamed over the old one: a run
//! killed midway leaves the last complete readings.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use gpudirect_core::resolve::{NodeProbe, PathKind};
use gpudirect_core::system::SystemProbe;

use super::Snapshot;

/// The state file's format; a file of another is started again.
pub const FORMAT: u32 = 1;

/// A state file larger than this is not ours (a node's is a few kB).
const MAX_STATE_BYTES: u64 = 1 << 20;

/// Why the readings cannot be kept or were not read back.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The node's name cannot be part of a file name.
    #[error("the node name {0:?} is not a plain name (letters, digits, `.`, `_`, `-`)")]
    NodeName(String),
    /// As root, the folder (or the nearest one above it) is not root's alone.
    #[error("the state folder {dir}: {problem} (make it and every folder above it root's, not writable by group or others)")]
    Untrusted {
        /// The folder.
        dir: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The folder could not be made.
    #[error("cannot make the state folder {}: {source}", path.display())]
    CreateDir {
        /// The folder at fault.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is there but not one to trust: it is neither read nor replaced.
    #[error("{}: not read and not replaced: {why}; remove it", path.display())]
    Refused {
        /// The file.
        path: PathBuf,
        /// What it is.
        why: String,
    },
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no readings of ours: they start again from this run.
    #[error("{}: {why}; the readings start again from this run", path.display())]
    Unusable {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// This run's readings could not be written.
    #[error("cannot keep the readings in {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A node's state file, its folder made and checked.
#[derive(Debug, Clone)]
pub struct Kept {
    path: PathBuf,
    /// Whether it may be written: not when it is there and was refused.
    writable: std::cell::Cell<bool>,
}

/// Whether `node` can name a file: a plain Slurm node name.
fn plain_node(node: &str) -> bool {
    !node.is_empty()
        && node.len() <= 128
        && !node.starts_with('.')
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Kept {
    /// `dir`'s file for `node`, the folder made if missing. With `trust` (root), the
    /// folder, or while it is missing the nearest one above it, must pass its rule first.
    pub fn open(dir: &Path, node: &str, trust: Option<&SystemProbe>) -> Result<Kept, StateError> {
        if !plain_node(node) {
            return Err(StateError::NodeName(node.to_string()));
        }
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let untrusted = |kind| {
            let problem = trust?.untrusted(&dir.display().to_string(), kind)?;
            Some(StateError::Untrusted {
                dir: dir.clone(),
                problem,
            })
        };
        // Code: a folder not there yet is judged by the nearest one above it.
        if let Some(e) = untrusted(PathKind::Code) {
            return Err(e);
        }
        let path = dir.join(format!("nic-counters-{node}.json"));
        crate::history::create_parent(&path).map_err(|e| match e {
            crate::history::HistoryError::CreateDir { path, source } => {
                StateError::CreateDir { path, source }
            }
            other => StateError::CreateDir {
                path: dir.clone(),
                source: std::io::Error::other(other.to_string()),
            },
        })?;
        if let Some(e) = untrusted(PathKind::Directory) {
            return Err(e);
        }
        Ok(Kept {
            path,
            writable: std::cell::Cell::new(true),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The previous run's readings; `None` when there are none yet. A file that is not
    /// this user's alone, or is a link, is refused and will not be replaced either.
    pub fn load(&self) -> Result<Option<Snapshot>, StateError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = &self.path;
        let flags = nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOFOLLOW;
        let refuse = |why: String| {
            self.writable.set(false);
            StateError::Refused {
                path: path.clone(),
                why,
            }
        };
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits())
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
                return Err(refuse("it is a symbolic link".into()))
            }
            Err(source) => {
                return Err(StateError::Read {
                    path: path.clone(),
                    source,
                })
            }
        };
        let read = |source| StateError::Read {
            path: path.clone(),
            source,
        };
        let meta = file.metadata().map_err(read)?;
        let me = nix::unistd::geteuid().as_raw();
        if !meta.is_file() {
            return Err(refuse("it is not a regular file".into()));
        }
        if meta.uid() != me {
            return Err(refuse(format!(
                "it belongs to uid {}, not to this user ({me})",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(refuse(format!(
                "others may write it (mode {:o})",
                meta.mode() & 0o7777
            )));
        }
        let mut bytes = Vec::new();
        file.take(MAX_STATE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        let unusable = |why: String| StateError::Unusable {
            path: path.clone(),
            why,
        };
        if bytes.len() as u64 > MAX_STATE_BYTES {
            return Err(unusable(format!("larger than {MAX_STATE_BYTES} bytes")));
        }
        let snapshot: Snapshot = serde_json::from_slice(&bytes)
            .map_err(|e| unusable(format!("not a state file of this version ({e})")))?;
        if snapshot.format != FORMAT {
            return Err(unusable(format!(
                "format {}, where this gpudirect writes {FORMAT}",
                snapshot.format
            )));
        }
        Ok(Some(snapshot))
    }

    /// Keeps `snapshot` for the next run: a temporary file in the folder, mode 0600,
    /// renamed over the old one. Nothing is written where [`Kept::load`] refused the file.
    pub fn save(&self, snapshot: &Snapshot) -> Result<(), StateError> {
        use std::os::unix::fs::PermissionsExt;
        if !self.writable.get() {
            return Ok(());
        }
        let write = |source| StateError::Write {
            path: self.path.clone(),
            source,
        };
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        let mut tmp = tempfile::Builder::new()
            .prefix(".nic-counters-")
            .tempfile_in(dir)
            .map_err(write)?;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(write)?;
        let text = serde_json::to_vec(snapshot).map_err(|e| write(std::io::Error::other(e)))?;
        tmp.write_all(&text).map_err(write)?;
        tmp.as_file().sync_all().map_err(write)?;
        // rename(2) replaces the name, never what a link there points at.
        tmp.persist(&self.path).map_err(|e| write(e.error))?;
        Ok(())
    }
}
