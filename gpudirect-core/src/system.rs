//! The only part of this crate that touches the machine: reading the admin config with
//! sshd-style ownership checks, and the [`NodeProbe`] that reads sysfs. Both the plugin
//! and `gpudirect profiles` use these, so the launcher reports what the plugin would see.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::config::{parse_config, Config, ConfigError};
use crate::cpulist::CpuList;
use crate::resolve::NodeProbe;

/// A config larger than this is not an admin's profile file.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Why the config file was not read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file or a directory above it could be changed by someone other than root.
    #[error("{path}: refusing the config: {problem} (it must be owned by root and writable by root only, as must every directory above it: chown root and chmod go-w)")]
    Insecure {
        /// The file or directory at fault.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The file could not be read.
    #[error("{path}: cannot read the config: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Too large, not a regular file, not UTF-8.
    #[error("{path}: {problem}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// The text is not a valid config.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// How strictly to check who may change the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Root must own the file and every directory above it, none writable by others
    /// (what the plugin, running as root, requires).
    RootOnly,
    /// No ownership check (the launcher linting a draft).
    Any,
}

fn insecure(path: &Path, problem: String) -> LoadError {
    LoadError::Insecure {
        path: path.display().to_string(),
        problem,
    }
}

fn check_owner(path: &Path, meta: &std::fs::Metadata) -> Result<(), LoadError> {
    if meta.uid() != 0 {
        return Err(insecure(path, format!("owned by uid {}", meta.uid())));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(insecure(
            path,
            format!("mode {:o} lets others write it", meta.mode() & 0o7777),
        ));
    }
    Ok(())
}

/// One version of a file, as the kernel identifies it: writing the file, renaming another
/// over it, chmod and chown all change its stamp (the change time, `ctime`, cannot be set by
/// hand). [`crate::marks`] keys what it remembers on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    /// Device and inode: which file.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Last modification, seconds and nanoseconds.
    pub mtime: (i64, i64),
    /// Last change of content or metadata, seconds and nanoseconds.
    pub ctime: (i64, i64),
}

impl FileStamp {
    /// The stamp of the file these metadata describe.
    pub fn of(meta: &std::fs::Metadata) -> Self {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// Opens the config at `path` after checking who may change it (the file and every
/// directory above it), and that it is a regular file of a sane size.
fn open_config(path: &Path, ownership: Ownership) -> Result<(File, std::fs::Metadata), LoadError> {
    let display = path.display().to_string();
    let io = |source| LoadError::Io {
        path: display.clone(),
        source,
    };
    if !path.is_absolute() {
        return Err(LoadError::Invalid {
            path: display,
            problem: "the config path must be absolute".into(),
        });
    }
    // Resolve symlinks first, then check every directory of the real path.
    let real: PathBuf = path.canonicalize().map_err(io)?;
    if ownership == Ownership::RootOnly {
        for dir in real.ancestors().skip(1) {
            let meta = std::fs::metadata(dir).map_err(io)?;
            check_owner(dir, &meta)?;
        }
    }
    let file = File::open(&real).map_err(io)?;
    // Check the file we opened, not the name, so a swap after the check cannot win.
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(LoadError::Invalid {
            path: display,
            problem: "not a regular file".into(),
        });
    }
    if ownership == Ownership::RootOnly {
        check_owner(&real, &meta)?;
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(LoadError::Invalid {
            path: display,
            problem: format!("larger than {MAX_CONFIG_BYTES} bytes"),
        });
    }
    Ok((file, meta))
}

/// Every check of [`load_config`] but reading the text: who may change the file, that it is
/// a regular file of a sane size. Returns the stamp of the version now in place.
pub fn check_config_file(path: &Path, ownership: Ownership) -> Result<FileStamp, LoadError> {
    open_config(path, ownership).map(|(_, meta)| FileStamp::of(&meta))
}

/// Reads and checks the admin config at `path`.
pub fn load_config(path: &Path, ownership: Ownership) -> Result<Config, LoadError> {
    load_config_stamped(path, ownership).map(|(config, _)| config)
}

/// [`load_config`], also returning the stamp of the very file version that was read.
pub fn load_config_stamped(
    path: &Path,
    ownership: Ownership,
) -> Result<(Config, FileStamp), LoadError> {
    let display = path.display().to_string();
    let (file, meta) = open_config(path, ownership)?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| LoadError::Io {
            path: display.clone(),
            source,
        })?;
    let text = String::from_utf8(bytes).map_err(|e| LoadError::Invalid {
        path: display.clone(),
        problem: format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()),
    })?;
    Ok((parse_config(&text, &display)?, FileStamp::of(&meta)))
}

/// This machine's host name up to the first dot (`gethostname`), or `localhost` when it
/// cannot be read.
pub fn short_hostname() -> String {
    match nix::unistd::gethostname() {
        Ok(host) => {
            let host = host.to_string_lossy();
            host.split('.').next().unwrap_or_default().to_string()
        }
        Err(_) => "localhost".into(),
    }
}

/// Reads the node from `/sys/class/net` and the filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemProbe;

impl NodeProbe for SystemProbe {
    fn nic_up(&self, name: &str) -> Option<bool> {
        // Names come from the admin's config and were checked to be plain names.
        if name.contains('/') || name.starts_with('.') {
            return None;
        }
        let dir = Path::new("/sys/class/net").join(name);
        if !dir.exists() {
            return None;
        }
        let state = std::fs::read_to_string(dir.join("operstate")).unwrap_or_default();
        // Virtual NICs (veth, bridges) may report "unknown" while carrying traffic;
        // the IFF_UP flag is the admin's intent.
        let flags = std::fs::read_to_string(dir.join("flags")).unwrap_or_default();
        let flag_up = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16)
            .map(|f| f & 1 == 1)
            .unwrap_or(false);
        Some(state.trim() == "up" || (state.trim() == "unknown" && flag_up))
    }

    fn file_exists(&self, path: &str) -> bool {
        Path::new(path).is_file()
    }

    fn file_readable(&self, path: &str) -> bool {
        File::open(path)
            .map(|f| f.metadata().map(|m| m.is_file()).unwrap_or(false))
            .unwrap_or(false)
    }

    fn dir_exists(&self, path: &str) -> bool {
        Path::new(path).is_dir()
    }

    fn dir_has_socket(&self, path: &str) -> bool {
        use std::os::unix::fs::FileTypeExt;
        // Bounded: a socket directory holds a handful of entries.
        std::fs::read_dir(path)
            .map(|entries| {
                entries
                    .flatten()
                    .take(1024)
                    .any(|e| e.file_type().map(|t| t.is_socket()).unwrap_or(false))
            })
            .unwrap_or(false)
    }

    fn rdma_port_active(&self, name: &str) -> Option<bool> {
        rdma_port_active_under(Path::new("/sys"), name)
    }
}

/// Whether the RDMA device `name` under a sysfs root exists (`None` if not) and has an
/// active port (`ports/<n>/state` reads `4: ACTIVE`).
pub fn rdma_port_active_under(sysfs_root: &Path, name: &str) -> Option<bool> {
    // Names come from the admin's config and were checked to be plain names.
    if name.contains('/') || name.starts_with('.') || name.is_empty() {
        return None;
    }
    let ports = sysfs_root.join("class/infiniband").join(name).join("ports");
    let entries = std::fs::read_dir(&ports).ok()?;
    let active = entries.filter_map(Result::ok).take(64).any(|port| {
        std::fs::read_to_string(port.path().join("state"))
            .map(|state| state.contains("ACTIVE"))
            .unwrap_or(false)
    });
    Some(active)
}

/// The CPUs this process may run on.
pub fn current_affinity() -> Option<CpuList> {
    let set = sched_getaffinity(Pid::from_raw(0)).ok()?;
    let ids = (0..CpuSet::count()).filter(|&i| set.is_set(i).unwrap_or(false));
    Some(CpuList::from_ids(ids.filter_map(|i| u32::try_from(i).ok())))
}

/// Pins this process to `cpus`. Ids beyond what a CPU set holds (`CPU_SETSIZE`) are
/// skipped.
pub fn set_affinity(cpus: &CpuList) -> std::io::Result<()> {
    let mut set = CpuSet::new();
    for id in cpus.ids() {
        // Only an id past the set's size fails, and it is skipped as documented.
        let _ = set.set(id as usize);
    }
    sched_setaffinity(Pid::from_raw(0), &set).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::temp_dir;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn refuses_world_writable_and_accepts_lint_mode() {
        let tmp = temp_dir("perm");
        let dir = tmp.path();
        let file = dir.join("gpudirect.toml");
        std::fs::write(&file, "[profiles.a]\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        // /tmp itself is world-writable, so RootOnly refuses for that reason or the file's.
        let err = load_config(&file, Ownership::RootOnly).unwrap_err();
        assert!(matches!(err, LoadError::Insecure { .. }), "{err}");
        assert!(err.to_string().contains("chmod go-w"), "{err}");
        let config = load_config(&file, Ownership::Any).unwrap();
        assert!(config.profiles.contains_key("a"));
    }

    #[test]
    fn rejects_relative_missing_and_non_utf8() {
        assert!(matches!(
            load_config(Path::new("rel.toml"), Ownership::Any),
            Err(LoadError::Invalid { .. })
        ));
        assert!(matches!(
            load_config(Path::new("/nonexistent/x.toml"), Ownership::Any),
            Err(LoadError::Io { .. })
        ));
        let tmp = temp_dir("utf8");
        let dir = tmp.path();
        let file = dir.join("bad.toml");
        std::fs::write(&file, b"a = \"\xff\"").unwrap();
        let err = load_config(&file, Ownership::Any).unwrap_err();
        assert!(err.to_string().contains("not UTF-8"), "{err}");
    }

    #[test]
    fn rdma_ports_are_read_from_sysfs_class_infiniband() {
        let tmp = temp_dir("rdma");
        let root = tmp.path();
        let port = root.join("class/infiniband/mlx5_0/ports/1");
        std::fs::create_dir_all(&port).unwrap();
        std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        let down = root.join("class/infiniband/mlx5_1/ports/1");
        std::fs::create_dir_all(&down).unwrap();
        std::fs::write(down.join("state"), "1: DOWN\n").unwrap();
        assert_eq!(rdma_port_active_under(root, "mlx5_0"), Some(true));
        assert_eq!(rdma_port_active_under(root, "mlx5_1"), Some(false));
        assert_eq!(rdma_port_active_under(root, "mlx5_9"), None);
        assert_eq!(rdma_port_active_under(root, "../mlx5_0"), None);
    }

    #[test]
    fn socket_directories_need_a_listening_socket() {
        let tmp = temp_dir("rxdm");
        let dir = tmp.path();
        let d = dir.to_str().unwrap();
        assert!(SystemProbe.dir_exists(d));
        assert!(
            !SystemProbe.dir_has_socket(d),
            "an empty directory is not a running daemon"
        );
        std::fs::write(dir.join("not-a-socket"), "").unwrap();
        assert!(!SystemProbe.dir_has_socket(d));
        let _listener = std::os::unix::net::UnixListener::bind(dir.join("rxdm.sock")).unwrap();
        assert!(SystemProbe.dir_has_socket(d));
    }

    #[test]
    fn probe_sees_loopback() {
        assert!(SystemProbe.nic_up("lo").is_some());
        assert_eq!(SystemProbe.nic_up("no-such-nic0"), None);
        assert_eq!(SystemProbe.nic_up("../etc"), None);
        assert!(current_affinity().is_some_and(|c| !c.is_empty()));
    }
}
