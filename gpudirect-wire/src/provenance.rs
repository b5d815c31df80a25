//! Where each NCCL variable a task runs with comes from: the profile, forced by the
//! profile, the job's environment (the user's, or a container image's), or an NCCL
//! config file, which NCCL reads when it initialises.
//!
//! NCCL's rule (`initEnv` in NCCL's `src/misc/param.cc`, 2.18 and later): it reads
//! `$NCCL_CONF_FILE` when that is set and not empty, else `~/.nccl.conf` (the home of the
//! process's uid in the password database, not `$HOME`), then `/etc/nccl.conf`, and sets
//! each `NAME=VALUE` line with `setenv(NAME, VALUE, 0)`: a variable already in the
//! environment is never replaced, and the first file to set a variable wins over a later
//! one. Lines starting with `#`, and lines without `=`, are skipped; neither name nor value
//! is trimmed.
//!
//! A value from a file nobody looks at, or from an image, is how a job ends up on the
//! wrong transport without anyone having set anything: [`TRANSPORT_VARIABLES`] are the
//! ones that choose it, and such a value is flagged.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use gpudirect_core::resolve::TRANSPORT_VARIABLES;
use serde::{Deserialize, Serialize};

/// The largest config file read (NCCL reads any size; ours are a few lines).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Whether `name` is a variable whose provenance is reported: NCCL's own and the
/// transport plugins' (`NCCL_GPUDIRECTTCPX_*`, `NCCL_FASTRAK_*`, libfabric's `FI_*`).
pub fn is_reported(name: &str) -> bool {
    name.starts_with("NCCL_") || name.starts_with("FI_")
}

/// Which config file NCCL read, and why it read that one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfFile {
    /// The path.
    pub path: String,
    /// `NCCL_CONF_FILE`, `~/.nccl.conf` or `/etc/nccl.conf`.
    pub role: String,
    /// Its `NAME=VALUE` lines in order: name, value, 1-based line.
    pub entries: Vec<(String, String, usize)>,
}

/// Reads NCCL config text as NCCL does.
pub fn parse_conf(text: &str) -> Vec<(String, String, usize)> {
    text.split('\n')
        .enumerate()
        .filter(|(_, line)| !line.starts_with('#'))
        .filter_map(|(i, line)| {
            let (name, value) = line.split_once('=')?;
            Some((name.to_string(), value.to_string(), i + 1))
        })
        .collect()
}

/// The files NCCL would read for this process, in the order it reads them: `nccl_conf_file`
/// (the value of `NCCL_CONF_FILE`) or `home/.nccl.conf`, then `/etc/nccl.conf`. Files that
/// do not exist are left out; one that is not a regular file or cannot be read is kept
/// with no entries and a note.
pub fn conf_files(
    nccl_conf_file: Option<&str>,
    home: Option<&Path>,
    etc: &Path,
) -> (Vec<ConfFile>, Vec<String>) {
    let mut candidates: Vec<(PathBuf, &str)> = Vec::new();
    match nccl_conf_file.filter(|f| !f.is_empty()) {
        Some(file) => candidates.push((PathBuf::from(file), "NCCL_CONF_FILE")),
        None => {
            if let Some(home) = home {
                candidates.push((home.join(".nccl.conf"), "~/.nccl.conf"));
            }
        }
    }
    candidates.push((etc.to_path_buf(), "/etc/nccl.conf"));
    let mut files = Vec::new();
    let mut notes = Vec::new();
    for (path, role) in candidates {
        match read_regular(&path) {
            Ok(Some(text)) => files.push(ConfFile {
                path: path.display().to_string(),
                role: role.to_string(),
                entries: parse_conf(&text),
            }),
            Ok(None) => {}
            Err(e) => notes.push(format!("{} ({role}): {e}", path.display())),
        }
    }
    (files, notes)
}

/// A regular file's text, at most [`MAX_FILE_BYTES`]; `None` when it does not exist.
/// Opened without blocking, so a FIFO there cannot hang the task.
fn read_regular(path: &Path) -> Result<Option<String>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read: {e}")),
    };
    let meta = file.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    // `NCCL_CONF_FILE=/dev/null` is the usual way to skip `~/.nccl.conf`: read as empty.
    if std::os::unix::fs::FileTypeExt::is_char_device(&meta.file_type())
        && path == Path::new("/dev/null")
    {
        return Ok(Some(String::new()));
    }
    if !meta.is_file() {
        return Err("not a regular file: NCCL would block or fail reading it".into());
    }
    if meta.len() > MAX_FILE_BYTES {
        // Said, never parsed in part: a line past the limit, which NCCL applies, would be
        // missing from what probe shows (security review S13).
        return Err(format!(
            "{} bytes, more than the {} KiB probe reads: not shown (NCCL still applies it all)",
            meta.len(),
            MAX_FILE_BYTES / 1024
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// Where a value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Source {
    /// The plugin set it from the profile.
    Profile {
        /// The profile.
        profile: String,
    },
    /// The plugin set it from the profile, replacing any other value (`forced`).
    Forced {
        /// The profile.
        profile: String,
    },
    /// In the job's environment before the plugin ran: the user's (or, for a task in a
    /// container, possibly the image's).
    Environment {
        /// Whether the task runs in a container (the image may have set it).
        in_container: bool,
    },
    /// Not in the environment: NCCL takes it from this file when it initialises.
    File {
        /// The file.
        path: String,
        /// Why NCCL read it (`NCCL_CONF_FILE`, `~/.nccl.conf`, `/etc/nccl.conf`).
        role: String,
        /// Its line.
        line: usize,
    },
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Profile { profile } => write!(f, "profile {profile}"),
            Source::Forced { profile } => write!(f, "forced by profile {profile}"),
            Source::Environment {
                in_container: false,
            } => f.write_str("the job's environment"),
            Source::Environment { in_container: true } => {
                f.write_str("the job's environment or the container image")
            }
            Source::File { path, role, line } => {
                if role == path {
                    write!(f, "{path}:{line}")
                } else {
                    write!(f, "{path}:{line} ({role})")
                }
            }
        }
    }
}

/// One variable in effect in a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The variable.
    pub name: String,
    /// The value NCCL will see.
    pub value: String,
    /// Where it comes from.
    pub source: Source,
    /// Other places that set it, which lose (`/etc/nccl.conf:3 sets Socket: ignored`).
    pub shadowed: Vec<String>,
    /// Why it matters, when it does: a value from a file or an image that changes the
    /// transport.
    pub flag: Option<String>,
}

/// What a task knows about its variables.
#[derive(Debug, Clone, Default)]
pub struct TaskVariables {
    /// Its reported variables ([`is_reported`]) and their values.
    pub env: BTreeMap<String, String>,
    /// Names the plugin set (`GPUDIRECT_SET`).
    pub set_by_plugin: BTreeSet<String>,
    /// The profile the plugin applied (`GPUDIRECT_PROFILE`), and the variables it sets and
    /// forces.
    pub profile: Option<String>,
    /// The profile's variables (all, forced or not).
    pub profile_sets: BTreeSet<String>,
    /// The profile's forced variables.
    pub profile_forces: BTreeSet<String>,
    /// What the plugin's plan gives each variable of the profile, when known: a value the
    /// plugin set that differs now was replaced after it (by a container's environment).
    pub planned: BTreeMap<String, String>,
    /// Whether the task runs inside a container.
    pub in_container: bool,
}

/// Every reported variable in effect in a task, where it comes from, and a flag on the
/// values that change the transport without the profile saying so.
pub fn provenance(task: &TaskVariables, files: &[ConfFile]) -> Vec<Provenance> {
    let mut out: BTreeMap<String, Provenance> = BTreeMap::new();
    for (name, value) in task.env.iter().filter(|(n, _)| is_reported(n)) {
        let replaced_since = task
            .planned
            .get(name)
            .is_some_and(|planned| planned != value);
        let by_plugin = task.set_by_plugin.contains(name) && !replaced_since;
        let source = match (&task.profile, by_plugin) {
            (Some(profile), true) if task.profile_forces.contains(name) => Source::Forced {
                profile: profile.clone(),
            },
            (Some(profile), true) => Source::Profile {
                profile: profile.clone(),
            },
            _ => Source::Environment {
                in_container: task.in_container,
            },
        };
        out.insert(
            name.clone(),
            Provenance {
                name: name.clone(),
                value: value.clone(),
                source,
                shadowed: Vec::new(),
                flag: None,
            },
        );
    }
    for file in files {
        for (name, value, line) in &file.entries {
            if !is_reported(name) {
                continue;
            }
            let here = format!("{}:{line}", file.path);
            match out.get_mut(name) {
                Some(existing) => existing.shadowed.push(format!(
                    "{here} sets `{value}`: ignored, {} wins",
                    match existing.source {
                        Source::File { .. } => "the file read first",
                        _ => "the environment",
                    }
                )),
                None => {
                    out.insert(
                        name.clone(),
                        Provenance {
                            name: name.clone(),
                            value: value.clone(),
                            source: Source::File {
                                path: file.path.clone(),
                                role: file.role.clone(),
                                line: *line,
                            },
                            shadowed: Vec::new(),
                            flag: None,
                        },
                    );
                }
            }
        }
    }
    for p in out.values_mut() {
        if !TRANSPORT_VARIABLES.contains(&p.name.as_str()) {
            continue;
        }
        let from_outside = match &p.source {
            Source::File { .. } => true,
            Source::Environment { in_container } => *in_container,
            _ => false,
        };
        if !from_outside {
            continue;
        }
        let profile_note = match &task.profile {
            Some(profile) if task.profile_sets.contains(&p.name) => {
                format!("profile {profile} sets another value")
            }
            Some(profile) => format!("profile {profile} leaves it unset"),
            None => "no profile applied".into(),
        };
        let fix = match &p.source {
            Source::File { path, .. } => format!("remove it from {path}"),
            _ => "unset it in the image or the job (or force the profile's value)".into(),
        };
        p.flag = Some(format!(
            "{}={} from {} changes the transport ({profile_note}): {fix}",
            p.name, p.value, p.source
        ));
    }
    out.into_values().collect()
}

/// Whether this task runs in Slurm's own job container (`srun --container` sets
/// `SLURM_CONTAINER`). Variables a container runtime sets (`container`, `ENROOT_*`) are not
/// evidence: srun copies them from wherever it was started, so a user's own value would
/// pass for an image's. Marker files like `/.dockerenv` are not either: the node itself may
/// run in a container (the machine these tests run on does). A task that pyxis moved into
/// a container is therefore not recognised here; the plugin recognises it (its `/`
/// changed between `user_init` and `task_init`) and warns on the task's stderr.
pub fn in_container(env: &dyn Fn(&str) -> Option<String>) -> bool {
    env("SLURM_CONTAINER").is_some_and(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_conf_file_past_the_read_limit_is_said_not_parsed_in_part() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("nccl.conf");
        let mut text = "#".repeat(MAX_FILE_BYTES as usize);
        text.push_str("\nNCCL_NET=Socket\n");
        std::fs::write(&big, &text).unwrap();
        let err = read_regular(&big).unwrap_err();
        assert!(err.contains("more than the 1024 KiB probe reads"), "{err}");
        let small = dir.path().join("small.conf");
        std::fs::write(&small, "NCCL_NET=Socket\n").unwrap();
        assert_eq!(
            read_regular(&small).unwrap().as_deref(),
            Some("NCCL_NET=Socket\n")
        );
    }

    use super::*;

    #[test]
    fn config_text_is_read_as_nccl_reads_it() {
        let entries =
            parse_conf("NCCL_NET=Socket\n#NCCL_ALGO=Tree\nno equals\nNCCL_DEBUG= INFO \nX=a=b");
        assert_eq!(
            entries,
            [
                ("NCCL_NET".into(), "Socket".into(), 1),
                ("NCCL_DEBUG".into(), " INFO ".into(), 4),
                ("X".into(), "a=b".into(), 5),
            ]
        );
    }

    #[test]
    fn nccl_conf_file_replaces_the_home_file_and_etc_is_read_last() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(home.join(".nccl.conf"), "NCCL_ALGO=Tree\n").unwrap();
        let etc = dir.path().join("nccl.conf");
        std::fs::write(&etc, "NCCL_NET=Socket\n").unwrap();
        let own = dir.path().join("own.conf");
        std::fs::write(&own, "NCCL_PROTO=LL\n").unwrap();

        let (files, notes) = conf_files(None, Some(&home), &etc);
        assert!(notes.is_empty());
        let roles: Vec<&str> = files.iter().map(|f| f.role.as_str()).collect();
        assert_eq!(roles, ["~/.nccl.conf", "/etc/nccl.conf"]);
        let (files, _) = conf_files(Some(own.to_str().unwrap()), Some(&home), &etc);
        let roles: Vec<&str> = files.iter().map(|f| f.role.as_str()).collect();
        assert_eq!(roles, ["NCCL_CONF_FILE", "/etc/nccl.conf"]);
        // An empty NCCL_CONF_FILE is unset, as for NCCL.
        let (files, _) = conf_files(Some(""), Some(&home), &etc);
        assert_eq!(files[0].role, "~/.nccl.conf");
        // Missing files are left out.
        let (files, notes) = conf_files(None, None, &dir.path().join("none"));
        assert!(files.is_empty() && notes.is_empty());
        // NCCL_CONF_FILE=/dev/null skips the home file quietly.
        let (files, notes) = conf_files(Some("/dev/null"), Some(&home), &dir.path().join("none"));
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(files[0].role, "NCCL_CONF_FILE");
        assert!(files[0].entries.is_empty());
    }

    #[test]
    fn a_fifo_in_place_of_a_config_file_does_not_hang() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (files, notes) = conf_files(Some(fifo.to_str().unwrap()), None, &dir.path().join("x"));
        assert!(files.is_empty());
        assert!(notes[0].contains("not a regular file"), "{notes:?}");
    }

    fn file(path: &str, role: &str, text: &str) -> ConfFile {
        ConfFile {
            path: path.into(),
            role: role.into(),
            entries: parse_conf(text),
        }
    }

    #[test]
    fn each_value_has_one_source_and_the_losers_are_named() {
        let env: BTreeMap<String, String> = [
            ("NCCL_ALGO", "Ring"),
            ("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", "/run/tcpx"),
            ("NCCL_DEBUG", "INFO"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let task = TaskVariables {
            env,
            set_by_plugin: ["NCCL_ALGO", "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            profile: Some("tcpx".into()),
            profile_sets: [
                "NCCL_ALGO",
                "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX",
                "NCCL_SOCKET_IFNAME",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            profile_forces: ["NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX".to_string()]
                .into_iter()
                .collect(),
            ..TaskVariables::default()
        };
        let files = [
            file(
                "/home/u/.nccl.conf",
                "~/.nccl.conf",
                "NCCL_NET=Socket\nNCCL_ALGO=Tree\n",
            ),
            file(
                "/etc/nccl.conf",
                "/etc/nccl.conf",
                "NCCL_NET=IB\nNCCL_BUFFSIZE=1048576\n",
            ),
        ];
        let all = provenance(&task, &files);
        let get = |n: &str| all.iter().find(|p| p.name == n).unwrap();
        assert_eq!(get("NCCL_ALGO").source.to_string(), "profile tcpx");
        assert_eq!(
            get("NCCL_ALGO").shadowed,
            ["/home/u/.nccl.conf:2 sets `Tree`: ignored, the environment wins"]
        );
        assert_eq!(
            get("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX")
                .source
                .to_string(),
            "forced by profile tcpx"
        );
        assert_eq!(
            get("NCCL_DEBUG").source.to_string(),
            "the job's environment"
        );
        let net = get("NCCL_NET");
        assert_eq!(net.value, "Socket", "the first file read wins");
        assert_eq!(
            net.source.to_string(),
            "/home/u/.nccl.conf:1 (~/.nccl.conf)"
        );
        assert_eq!(
            net.shadowed,
            ["/etc/nccl.conf:1 sets `IB`: ignored, the file read first wins"]
        );
        let flag = net.flag.as_deref().unwrap();
        assert!(
            flag.contains("changes the transport (profile tcpx leaves it unset): remove it from /home/u/.nccl.conf"),
            "{flag}"
        );
        assert_eq!(get("NCCL_BUFFSIZE").flag, None, "not a transport variable");
        assert_eq!(get("NCCL_ALGO").flag, None, "the profile's own value");
    }

    #[test]
    fn an_image_value_that_changes_the_transport_is_flagged_in_a_container_only() {
        let env: BTreeMap<String, String> =
            [("NCCL_SOCKET_IFNAME".to_string(), "eth0".to_string())].into();
        let mut task = TaskVariables {
            env,
            profile: Some("tcpx".into()),
            profile_sets: ["NCCL_SOCKET_IFNAME".to_string()].into(),
            ..TaskVariables::default()
        };
        assert_eq!(
            provenance(&task, &[])[0].flag,
            None,
            "the user's own choice"
        );
        task.in_container = true;
        // The plugin set it, but the image's environment replaced the value afterwards.
        task.set_by_plugin = ["NCCL_SOCKET_IFNAME".to_string()].into();
        task.planned = [("NCCL_SOCKET_IFNAME".to_string(), "eth1".to_string())].into();
        let p = &provenance(&task, &[])[0];
        assert_eq!(
            p.source.to_string(),
            "the job's environment or the container image"
        );
        assert!(
            p.flag
                .as_deref()
                .unwrap()
                .contains("profile tcpx sets another value"),
            "{p:?}"
        );
    }
}
