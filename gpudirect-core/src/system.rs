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
use crate::resolve::{NodeProbe, PathKind};

/// Where a real install keeps the admin config: the launcher's `--config` default, the MPI
/// program's, and the packages' (`packaging/`).
pub const DEFAULT_CONFIG: &str = "/etc/slurm/gpudirect.toml";

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
    /// As [`RootOnly`](Self::RootOnly), with `owner` trusted beside root and no directory
    /// above `below` checked: for tests run in a temporary folder (as
    /// [`SystemProbe::trusting`]); `gpudirect health --insecure-trust-below`.
    TrustingBelow {
        /// Trusted besides root.
        owner: u32,
        /// Directories above this one are not checked.
        below: &'static Path,
    },
}

impl Ownership {
    /// The rule for a command that acts on what the config says: as root, only a config
    /// that root alone can change ([`RootOnly`](Self::RootOnly), as the plugin requires);
    /// as anyone else, any ([`Any`](Self::Any)): they act with their own rights.
    pub fn for_caller() -> Ownership {
        if nix::unistd::geteuid().is_root() {
            Ownership::RootOnly
        } else {
            Ownership::Any
        }
    }

    /// Who may own what is trusted, and below which directory ancestors are checked;
    /// `None` for [`Any`](Self::Any).
    fn rule(self) -> Option<(Vec<u32>, &'static Path)> {
        match self {
            Ownership::RootOnly => Some((vec![0], Path::new("/"))),
            Ownership::Any => None,
            Ownership::TrustingBelow { owner, below } => Some((vec![0, owner], below)),
        }
    }
}

fn insecure(path: &Path, problem: String) -> LoadError {
    LoadError::Insecure {
        path: path.display().to_string(),
        problem,
    }
}

/// Why a file or directory is not safe from other users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untrusted {
    /// Owned by this uid, none of the allowed owners.
    Owner(u32),
    /// Writable by group or others: its permission bits (`mode & 0o7777`).
    Writable(u32),
}

/// Makes `path` as this process's user with mode 0700, or accepts it when it is already
/// there as a folder of this user's that nobody else may enter (mode `0o077` bits clear);
/// anything else is refused with the reason. A job's telemetry folder (`[watch]`) goes
/// through this in its tasks: whoever made the folder first decides who reads the dumps,
/// and a link, another user's folder or one others may enter must not be written to.
pub fn ensure_private_dir(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", path.display())),
    }
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let uid = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() {
        Err(format!(
            "{} is there and is no folder (a link or a file)",
            path.display()
        ))
    } else if meta.uid() != uid {
        Err(format!(
            "{} belongs to uid {}, not to this job's user ({uid})",
            path.display(),
            meta.uid()
        ))
    } else if meta.mode() & 0o077 != 0 {
        Err(format!(
            "{} may be entered by others (mode {:o}): remove it or chmod 700",
            path.display(),
            meta.mode() & 0o7777
        ))
    } else {
        Ok(())
    }
}

/// The one rule for what the plugin trusts (the config, the paths a profile names, the
/// marks): owned by one of `owners` (root in production) and not writable by group or
/// others. Each caller says it in its own words.
pub fn safe_from_others(meta: &std::fs::Metadata, owners: &[u32]) -> Result<(), Untrusted> {
    if !owners.contains(&meta.uid()) {
        return Err(Untrusted::Owner(meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Untrusted::Writable(meta.mode() & 0o7777));
    }
    Ok(())
}

fn check_owner(path: &Path, meta: &std::fs::Metadata, owners: &[u32]) -> Result<(), LoadError> {
    safe_from_others(meta, owners).map_err(|problem| match problem {
        Untrusted::Owner(uid) => insecure(path, format!("owned by uid {uid}")),
        Untrusted::Writable(mode) => insecure(path, format!("mode {mode:o} lets others write it")),
    })
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
    let rule = ownership.rule();
    if let Some((owners, below)) = &rule {
        for dir in real.ancestors().skip(1).filter(|d| d.starts_with(below)) {
            let meta = std::fs::metadata(dir).map_err(io)?;
            check_owner(dir, &meta, owners)?;
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
    if let Some((owners, _)) = &rule {
        check_owner(&real, &meta, owners)?;
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
    let (text, stamp) = read_config_text(path, ownership)?;
    Ok((parse_config(&text, &path.display().to_string())?, stamp))
}

/// The config's text, read with the same checks as [`load_config`], unparsed, and the stamp
/// of the version read.
pub fn read_config_text(
    path: &Path,
    ownership: Ownership,
) -> Result<(String, FileStamp), LoadError> {
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
    Ok((text, FileStamp::of(&meta)))
}

/// This node's Slurm name: `SLURMD_NODENAME` (slurmd sets it for slurmstepd, the
/// prolog and the health check), else [`short_hostname`].
pub fn slurm_node_name() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(short_hostname)
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

/// Whether this process could listen on `addr` (`IPv4:port`) as NCCL's RAS client socket
/// does (`SO_REUSEADDR` and `SO_REUSEPORT`, NCCL's src/ras/client_support.cc): `false` when
/// another user's socket holds the port (Linux shares a port between `SO_REUSEPORT` sockets
/// of one user only) or a socket without `SO_REUSEPORT` does; a socket of the job's own
/// user that NCCL made (an earlier step's rank) leaves it free. The probe socket is closed
/// at once. An address of another form, or a socket that cannot be made, counts as free:
/// NCCL then says what it makes of it.
pub fn ras_port_free(addr: &str) -> bool {
    use nix::sys::socket::{
        bind, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
    };
    use std::os::fd::AsRawFd;
    let Ok(at) = addr.parse::<std::net::SocketAddrV4>() else {
        return true;
    };
    let Ok(fd) = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    ) else {
        return true;
    };
    let _ = setsockopt(&fd, sockopt::ReuseAddr, &true);
    let _ = setsockopt(&fd, sockopt::ReusePort, &true);
    bind(fd.as_raw_fd(), &SockaddrIn::from(at)).is_ok()
}

/// Reads the node from `/sys/class/net` and the filesystem. Probes never block (files are
/// opened with `O_NONBLOCK`, so a FIFO cannot hang slurmstepd) and trust a path only when
/// root alone can change it and every directory above it (security review F4, F5).
#[derive(Debug, Clone)]
pub struct SystemProbe {
    /// Who besides root may own a trusted path: root itself, except in tests.
    owner: u32,
    /// Directories above this one are not checked: `/`, except in tests.
    checked_below: PathBuf,
}

impl Default for SystemProbe {
    fn default() -> Self {
        SystemProbe {
            owner: 0,
            checked_below: PathBuf::from("/"),
        }
    }
}

/// An open flag of `open(2)` for [`std::os::unix::fs::OpenOptionsExt::custom_flags`].
fn flag(flag: nix::fcntl::OFlag) -> i32 {
    flag.bits()
}

impl SystemProbe {
    /// A probe that also trusts paths owned by `owner` and checks no directory above
    /// `checked_below`, for tests run unprivileged in a temporary directory (whose parent,
    /// `/tmp`, anyone can write).
    pub fn trusting(owner: u32, checked_below: &Path) -> Self {
        SystemProbe {
            owner,
            checked_below: checked_below.to_path_buf(),
        }
    }

    /// What is wrong with who may change the file or directory `meta` describes.
    fn owner_problem(&self, meta: &std::fs::Metadata) -> Option<String> {
        match safe_from_others(meta, &[0, self.owner]).err()? {
            Untrusted::Owner(uid) => Some(format!("owned by uid {uid}, not root")),
            Untrusted::Writable(mode) => {
                let writers = match (mode & 0o020 != 0, mode & 0o002 != 0) {
                    (true, true) => "group and others",
                    (true, false) => "group",
                    _ => "others",
                };
                Some(format!("writable by {writers} (mode {mode:o})"))
            }
        }
    }

    /// Opens `path` without following a symlink and without blocking, and returns what
    /// the descriptor is (never what the name now points at).
    fn stat_open(path: &Path, kind: PathKind) -> std::io::Result<std::fs::Metadata> {
        use nix::fcntl::OFlag;
        use std::os::unix::fs::OpenOptionsExt;
        let mut flags = flag(OFlag::O_NONBLOCK) | flag(OFlag::O_NOFOLLOW);
        if kind == PathKind::Directory {
            flags |= flag(OFlag::O_DIRECTORY);
        }
        // std adds O_CLOEXEC.
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(path)?
            .metadata()
    }
}

/// What `meta` describes, for messages.
fn kind_name(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

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
        // O_NONBLOCK: a FIFO here must not hang the step (security review F5).
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flag(nix::fcntl::OFlag::O_NONBLOCK))
            .open(path)
            .and_then(|f| f.metadata())
            .map(|m| m.is_file())
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
                entries.flatten().take(1024).any(|e| {
                    // A socket another user made is not the daemon's (review F4).
                    e.metadata()
                        .map(|m| m.file_type().is_socket() && self.owner_problem(&m).is_none())
                        .unwrap_or(false)
                })
            })
            .unwrap_or(false)
    }

    fn untrusted(&self, path: &str, kind: PathKind) -> Option<String> {
        let written = Path::new(path);
        if !written.is_absolute() {
            return Some(format!("{path} is not an absolute path"));
        }
        // An [env] path is the profile's code or data only when it is a regular file (a
        // net or tuner plugin, a file NCCL reads); a directory such as TMPDIR=/tmp, or a
        // device, is not something the profile vouches for. stat: never opened.
        if kind == PathKind::Any && !std::fs::metadata(written).is_ok_and(|m| m.is_file()) {
            return None;
        }
        // Code: a directory is checked as one; a path that does not exist yet, by the
        // nearest folder above it that does (and every folder above that).
        if kind == PathKind::Code {
            return match std::fs::metadata(written) {
                Ok(m) if m.is_file() => self.untrusted(path, PathKind::File),
                Ok(m) if m.is_dir() => self.untrusted(path, PathKind::Directory),
                Ok(_) => Some(format!("{path} is neither a file nor a directory")),
                Err(_) => {
                    let existing = written.ancestors().skip(1).find(|d| d.is_dir())?;
                    self.untrusted(&existing.display().to_string(), PathKind::Directory)
                        .map(|problem| format!("{path} does not exist, and {problem}"))
                }
            };
        }
        let real = match written.canonicalize() {
            Ok(real) => real,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => return Some(format!("{path} cannot be resolved: {e}")),
        };
        // The directories of the path as written (which hold its symlinks) and of the
        // real one: with all of them root-only, nobody else can swap what is opened next.
        let dirs = written.ancestors().skip(1).chain(real.ancestors().skip(1));
        for dir in dirs.filter(|d| d.starts_with(&self.checked_below)) {
            let problem = match std::fs::metadata(dir) {
                Ok(meta) => self.owner_problem(&meta),
                Err(e) => Some(format!("cannot be read: {e}")),
            };
            if let Some(problem) = problem {
                return Some(format!(
                    "{path}: the directory {} above it is {problem}",
                    dir.display()
                ));
            }
        }
        let meta = match kind {
            // Never opened: stat cannot block on a FIFO or open a device.
            PathKind::Any | PathKind::Code => std::fs::metadata(&real),
            PathKind::File | PathKind::Directory => Self::stat_open(&real, kind),
        };
        let meta = match meta {
            Ok(meta) => meta,
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOTDIR) => {
                return Some(format!("{path} is not a directory"))
            }
            Err(e) => return Some(format!("{path} cannot be opened: {e}")),
        };
        if kind == PathKind::File && !meta.is_file() {
            return Some(format!(
                "{path} is {}, not a regular file",
                kind_name(&meta)
            ));
        }
        if kind == PathKind::Directory && !meta.is_dir() {
            return Some(format!("{path} is {}, not a directory", kind_name(&meta)));
        }
        self.owner_problem(&meta)
            .map(|problem| format!("{path} is {problem}"))
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
    use crate::config::parse_config;
    use crate::resolve::{plan_node, Resolved, StepFacts};
    use crate::test_support::temp_dir;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::mpsc;
    use std::time::Duration;

    fn euid() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    /// A port held by a socket without SO_REUSEPORT is not free; one held by this user's
    /// SO_REUSEPORT listener (as NCCL's RAS holds it for an earlier step) is; a port let go
    /// is free again. (Another user's SO_REUSEPORT socket is refused by the kernel too:
    /// the cluster test of the squatter shows it.)
    #[test]
    fn a_ras_port_is_free_unless_a_socket_not_sharing_it_holds_it() {
        let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = plain.local_addr().unwrap().to_string();
        assert!(!ras_port_free(&addr), "{addr} held without SO_REUSEPORT");
        drop(plain);
        assert!(ras_port_free(&addr), "{addr} let go");

        use nix::sys::socket::{
            bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
            SockaddrIn,
        };
        use std::os::fd::AsRawFd;
        let shared = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .unwrap();
        setsockopt(&shared, sockopt::ReuseAddr, &true).unwrap();
        setsockopt(&shared, sockopt::ReusePort, &true).unwrap();
        let at: std::net::SocketAddrV4 = addr.parse().unwrap();
        bind(shared.as_raw_fd(), &SockaddrIn::from(at)).unwrap();
        listen(&shared, Backlog::new(4).unwrap()).unwrap();
        assert!(
            ras_port_free(&addr),
            "{addr} held by this user's SO_REUSEPORT listener"
        );
        assert!(ras_port_free("not an address"));
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// The check failures of profile `p` of `text` on a node, as the plugin sees them with
    /// `probe`, computed on another thread: a probe that blocks fails the test after 10 s
    /// instead of hanging it.
    fn failures_within_10s(text: String, probe: SystemProbe) -> Vec<String> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let config = parse_config(&text, "t.toml").unwrap();
            let resolved = Resolved {
                profile: &config.profiles["p"],
                node_set: None,
                ras: config.ras,
                watch: None,
            };
            let plan = plan_node(resolved, StepFacts::default(), &probe);
            let _ = tx.send(plan.failures.iter().map(ToString::to_string).collect());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the node checks blocked (a probe opened a FIFO without O_NONBLOCK?)")
    }

    /// Security review F4 (Appendix B item 4): a library directory, topology file or `[env]`
    /// path that someone other than root can change is refused, naming the path and the fix.
    #[test]
    fn profile_paths_others_can_change_are_refused() {
        let tmp = temp_dir("owner");
        let root = tmp.path();
        let lib = root.join("lib");
        std::fs::create_dir(&lib).unwrap();
        std::fs::write(lib.join("libnccl-net.so"), "").unwrap();
        let topo = root.join("topo.xml");
        std::fs::write(&topo, "<system/>").unwrap();
        let tuner = root.join("tuner.txtpb");
        std::fs::write(&tuner, "").unwrap();
        for p in [&lib, &topo, &tuner] {
            chmod(p, 0o755);
        }
        let text = format!(
            "[profiles.p]\nlibrary_dirs = [\"{}\"]\ntopology_file = \"{}\"\n\
             checks.libraries = [\"libnccl-net.so\"]\n\
             [profiles.p.env]\nNCCL_TUNER_CONFIG_PATH = \"{}\"\nNCCL_DEBUG_FILE = \"/nonexistent/%h\"\n",
            lib.display(),
            topo.display(),
            tuner.display()
        );
        let trusted = || SystemProbe::trusting(euid(), root);
        assert_eq!(
            failures_within_10s(text.clone(), trusted()),
            Vec::<String>::new()
        );

        chmod(&lib, 0o2775);
        let failures = failures_within_10s(text.clone(), trusted());
        let expected = format!(
            "library_dirs: {} is writable by group (mode 2775)",
            lib.display()
        );
        assert!(
            failures.iter().any(|f| f.contains(&expected)),
            "{failures:?}"
        );
        assert!(
            failures.iter().any(|f| f.contains("chmod go-w")),
            "{failures:?}"
        );
        chmod(&lib, 0o755);

        chmod(&topo, 0o646);
        chmod(&tuner, 0o666);
        let failures = failures_within_10s(text.clone(), trusted());
        let topo_msg = format!("topology_file: {} is writable by others", topo.display());
        let tuner_msg = format!(
            "env.NCCL_TUNER_CONFIG_PATH: {} is writable by group and others (mode 666)",
            tuner.display()
        );
        assert!(
            failures.iter().any(|f| f.contains(&topo_msg)),
            "{failures:?}"
        );
        assert!(
            failures.iter().any(|f| f.contains(&tuner_msg)),
            "{failures:?}"
        );
        chmod(&topo, 0o644);
        chmod(&tuner, 0o644);

        // A file listed inside a value, however it is written (`a:`, ` a`, `x,a`), is checked
        // like a bare one (security review S5: such values went unchecked).
        chmod(&tuner, 0o666);
        for listed in [
            format!("{}:", tuner.display()),
            format!(" {}", tuner.display()),
            format!("/nonexistent/a.so,{}", tuner.display()),
        ] {
            let text =
                format!("[profiles.p]\n[profiles.p.env]\nNCCL_TUNER_CONFIG_PATH = \"{listed}\"\n");
            let failures = failures_within_10s(text, trusted());
            assert!(
                failures.iter().any(|f| f.contains(&tuner_msg)),
                "{listed:?}: {failures:?}"
            );
        }
        chmod(&tuner, 0o644);

        // A variable that loads code (a plugin, Python's path): a folder others may write,
        // and a path not there yet in such a folder, are refused too (security review S5:
        // only existing regular files were checked).
        let open = root.join("open");
        std::fs::create_dir(&open).unwrap();
        chmod(&open, 0o777);
        for (var, value, expect) in [
            (
                "PYTHONPATH",
                open.display().to_string(),
                format!("{} is writable by group and others", open.display()),
            ),
            (
                "NCCL_NET_PLUGIN",
                format!("{}/missing.so", open.display()),
                "does not exist, and".to_string(),
            ),
            (
                "NCCL_TUNER_PLUGIN",
                format!("{}/x.so:", open.display()),
                "does not exist, and".to_string(),
            ),
            // Code loaded through names no pattern matches (security review T4): each is
            // checked whatever its name, a missing file by the folder above it.
            (
                "CUDA_INJECTION64_PATH",
                format!("{}/inject.so", open.display()),
                "does not exist, and".to_string(),
            ),
            (
                "BASH_ENV",
                format!("{}/env.sh", open.display()),
                "does not exist, and".to_string(),
            ),
            (
                "NCCL_CONF_FILE",
                format!("{}/nccl.conf", open.display()),
                "does not exist, and".to_string(),
            ),
            (
                "OPENSSL_CONF",
                format!("{}/openssl.cnf", open.display()),
                "does not exist, and".to_string(),
            ),
            (
                "GCONV_PATH",
                open.display().to_string(),
                format!("{} is writable by group and others", open.display()),
            ),
            (
                "PERL5LIB",
                format!("/usr/share/perl5:{}", open.display()),
                format!("{} is writable by group and others", open.display()),
            ),
        ] {
            let case = format!("[profiles.p]\n[profiles.p.env]\n{var} = \"{value}\"\n");
            let failures = failures_within_10s(case, trusted());
            assert!(
                failures
                    .iter()
                    .any(|f| f.contains(&format!("env.{var}:")) && f.contains(&expect)),
                "{var}={value:?}: {failures:?}"
            );
        }
        // A library folder not there yet under a folder others may write (security review
        // T5: it was skipped, so whoever made it first chose the libraries).
        let missing_lib = format!(
            "[profiles.p]\nlibrary_dirs = [\"{}/lib64\"]\n",
            open.display()
        );
        let failures = failures_within_10s(missing_lib, trusted());
        assert!(
            failures
                .iter()
                .any(|f| f.contains("library_dirs:") && f.contains("does not exist, and")),
            "{failures:?}"
        );
        // A variable that loads no code may name a folder others write (NCCL_DEBUG_FILE).
        let debug_file = format!(
            "[profiles.p]\n[profiles.p.env]\nNCCL_DEBUG_FILE = \"{}/nccl.%h\"\n",
            open.display()
        );
        assert_eq!(
            failures_within_10s(debug_file, trusted()),
            Vec::<String>::new()
        );
        chmod(&open, 0o755);

        // A directory above: the library directory's parent.
        chmod(root, 0o777);
        let failures = failures_within_10s(text.clone(), trusted());
        chmod(root, 0o700);
        assert!(
            failures.iter().any(|f| f.contains(&format!(
                "library_dirs: {}: the directory {} above it is writable by group and others",
                lib.display(),
                root.display()
            ))),
            "{failures:?}"
        );

        // Owned by another user than root (and than the trusted test user).
        let probe = if euid() == 0 {
            let other = Some(nix::unistd::Uid::from_raw(12345));
            nix::unistd::chown(&lib, other, None).unwrap();
            trusted()
        } else {
            SystemProbe::trusting(euid() + 1, root)
        };
        let failures = failures_within_10s(text, probe);
        assert!(
            failures
                .iter()
                .any(|f| f.contains("library_dirs:") && f.contains("owned by uid")),
            "{failures:?}"
        );
    }

    /// Security review F5: a FIFO at `topology_file` fails the check at once, naming it,
    /// where a blocking `open` would hang slurmstepd.
    #[test]
    fn a_fifo_topology_file_fails_fast_instead_of_hanging() {
        let tmp = temp_dir("fifo");
        let root = tmp.path();
        let fifo = root.join("topo.xml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let text = format!(
            "[profiles.p]\ntopology_file = \"{}\"\nchecks.topology_file = true\n",
            fifo.display()
        );
        let failures = failures_within_10s(text, SystemProbe::trusting(euid(), root));
        let named = format!("{} is a FIFO, not a regular file", fifo.display());
        assert!(failures.iter().any(|f| f.contains(&named)), "{failures:?}");
        // It fails the ownership check, so the readability check never opens it (S9).
        assert!(
            !failures.iter().any(|f| f.contains("is not readable")),
            "{failures:?}"
        );
    }

    /// A library directory or RxDM directory must be a directory, and a symlink to a file
    /// in a directory others can write is refused for that directory.
    #[test]
    fn probes_see_through_symlinks_and_want_the_right_kind() {
        let tmp = temp_dir("kind");
        let root = tmp.path();
        let file = root.join("f");
        std::fs::write(&file, "").unwrap();
        chmod(&file, 0o644);
        let probe = SystemProbe::trusting(euid(), root);
        let f = file.to_str().unwrap();
        assert_eq!(probe.untrusted(f, PathKind::File), None);
        let not_dir = probe.untrusted(f, PathKind::Directory).unwrap_or_default();
        assert!(not_dir.contains("not a directory"), "{not_dir}");
        let open = root.join("open");
        std::fs::create_dir(&open).unwrap();
        chmod(&open, 0o777);
        let target = open.join("t");
        std::fs::write(&target, "").unwrap();
        chmod(&target, 0o644);
        let link = root.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let problem = probe
            .untrusted(link.to_str().unwrap(), PathKind::File)
            .unwrap_or_default();
        assert!(problem.contains(&open.display().to_string()), "{problem}");
        assert_eq!(
            probe.untrusted(&format!("{}/missing", root.display()), PathKind::File),
            None
        );
        assert!(probe.untrusted("relative", PathKind::Any).is_some());
        // An [env] value that is a directory others can write (TMPDIR=/tmp) is not code.
        assert_eq!(
            SystemProbe::default().untrusted("/tmp", PathKind::Any),
            None
        );
    }

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
        let probe = SystemProbe::trusting(euid(), dir);
        assert!(probe.dir_exists(d));
        assert!(
            !probe.dir_has_socket(d),
            "an empty directory is not a running daemon"
        );
        std::fs::write(dir.join("not-a-socket"), "").unwrap();
        assert!(!probe.dir_has_socket(d));
        let _listener = std::os::unix::net::UnixListener::bind(dir.join("rxdm.sock")).unwrap();
        assert!(probe.dir_has_socket(d));
        // Another user's socket is not the daemon's (security review F4); root's always is.
        if euid() != 0 {
            assert!(!SystemProbe::trusting(euid() + 1, dir).dir_has_socket(d));
        }
    }

    #[test]
    fn probe_sees_loopback() {
        let probe = SystemProbe::default();
        assert!(probe.nic_up("lo").is_some());
        assert_eq!(probe.nic_up("no-such-nic0"), None);
        assert_eq!(probe.nic_up("../etc"), None);
        assert!(current_affinity().is_some_and(|c| !c.is_empty()));
    }

    #[test]
    fn a_private_dir_is_made_or_accepted_only_when_it_is_ours_alone() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("gpudirect-watch-77");
        ensure_private_dir(&dir).unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o700);
        ensure_private_dir(&dir).unwrap();

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(ensure_private_dir(&dir)
            .unwrap_err()
            .contains("may be entered by others"));

        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path(), &link).unwrap();
        assert!(ensure_private_dir(&link).unwrap_err().contains("no folder"));

        if nix::unistd::geteuid().is_root() {
            let theirs = tmp.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
            nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
            assert!(ensure_private_dir(&theirs)
                .unwrap_err()
                .contains("belongs to uid 65534"));
        }
    }
}
