//! `gpudirect hostfile`: turn an allocation (or a hostlist) into a hostfile.
//!
//! The work has three stages, each a function: [`Request::resolve`] decides where the node
//! list and the slot counts come from (flags, else `SLURM_JOB_NODELIST` and
//! `SLURM_TASKS_PER_NODE`, as inside `salloc`/`sbatch`); [`entries`] pairs each expanded node
//! with its slot count and checks that they agree; [`render`] writes one of four formats.
//! Only [`run`] touches the environment, `scontrol` and the output file.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use gpudirect_core::hostlist;

use super::{Ctx, ExitStatus};
use gpudirect::output::emit;

/// Environment variable Slurm sets to the allocation's compressed node list.
pub use gpudirect::slurm::NODELIST_ENV;
/// Environment variable Slurm sets to the tasks per node, e.g. `8(x2),4`.
pub const TASKS_PER_NODE_ENV: &str = "SLURM_TASKS_PER_NODE";

/// The hostfile dialects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Open MPI: `host slots=N` per node.
    Openmpi,
    /// MPICH / Hydra: `host:N` per node.
    Mpich,
    /// One host name per line, slots ignored.
    Hosts,
    /// SLURM_HOSTFILE for `srun --distribution=arbitrary`: one line per task.
    Slurm,
}

/// Arguments of `gpudirect hostfile`.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:\n  \
    # inside salloc/sbatch (uses SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE):\n  \
    gpudirect hostfile > hostfile && mpirun --hostfile hostfile ./all_reduce_perf_mpi\n  \
    gpudirect hostfile --format slurm -o tasks.txt   # for SLURM_HOSTFILE=tasks.txt srun -m arbitrary\n  \
    # anywhere:\n  \
    gpudirect hostfile --nodelist 'gpu[01-04]' --slots 8 --format mpich\n  \
    gpudirect hostfile --nodelist 'a3h-[0001-0003]' --slots '8(x2),4'")]
pub struct HostfileArgs {
    /// Nodes as a Slurm hostlist, e.g. `gpu[01-04]` or `rack[1-2]-node[01-08],login`.
    ///
    /// Default: $SLURM_JOB_NODELIST (set inside an allocation).
    #[arg(long, value_name = "EXPR")]
    pub nodelist: Option<String>,

    /// Slots (tasks) per node: one number for every node (`8`), or one count per node in
    /// SLURM_TASKS_PER_NODE syntax (`8(x2),4` = 8, 8, 4).
    ///
    /// Default: $SLURM_TASKS_PER_NODE when the node list comes from $SLURM_JOB_NODELIST,
    /// otherwise 1.
    #[arg(long, value_name = "N|LIST")]
    pub slots: Option<String>,

    /// Output dialect: openmpi (`host slots=N`), mpich (`host:N`), hosts (one name per
    /// line), slurm (one line per task, for SLURM_HOSTFILE).
    #[arg(long, value_enum, default_value_t = Format::Openmpi)]
    pub format: Format,

    /// Write to FILE instead of stdout. The file is replaced atomically (written beside it,
    /// then renamed), so a failure never leaves half a hostfile.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Expand the node list with `scontrol show hostnames EXPR` (Slurm's own parser)
    /// instead of the built-in one. Needs Slurm's scontrol on PATH.
    #[arg(long)]
    pub via_scontrol: bool,
}

/// Where a value came from, to name it in error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A command-line flag, e.g. `--nodelist`.
    Flag(&'static str),
    /// An environment variable, e.g. `SLURM_JOB_NODELIST`.
    Env(&'static str),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Flag(name) => write!(f, "{name}"),
            Origin::Env(name) => write!(f, "${name}"),
        }
    }
}

/// How many slots each node gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slots {
    /// The same count on every node.
    Uniform(u32),
    /// One count per node, in `SLURM_TASKS_PER_NODE` syntax, not yet parsed.
    PerNode {
        /// The text as given.
        text: String,
        /// Where it came from.
        origin: Origin,
    },
}

/// What the user asked for, with its sources, before any expansion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The hostlist expression.
    pub nodelist: String,
    /// Where `nodelist` came from.
    pub nodelist_origin: Origin,
    /// The slot counts.
    pub slots: Slots,
}

impl Request {
    /// Decide the node list and slots from the flags, falling back to the allocation's
    /// environment (`env` looks a variable up; `std::env::var` in production).
    pub fn resolve(args: &HostfileArgs, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let (nodelist, nodelist_origin) = match &args.nodelist {
            Some(expr) => (expr.clone(), Origin::Flag("--nodelist")),
            None => match env(NODELIST_ENV) {
                Some(expr) => (expr, Origin::Env(NODELIST_ENV)),
                None => bail!(
                    "no node list: {NODELIST_ENV} is not set; run inside an allocation \
                     (salloc, sbatch) or pass --nodelist, e.g. --nodelist 'gpu[01-04]'"
                ),
            },
        };
        if nodelist.trim().is_empty() {
            bail!("the node list from {nodelist_origin} is empty: give at least one node, e.g. 'gpu[01-04]'");
        }
        let slots = match &args.slots {
            Some(text) => parse_slots_flag(text)?,
            None if nodelist_origin == Origin::Env(NODELIST_ENV) => match env(TASKS_PER_NODE_ENV) {
                Some(text) => Slots::PerNode {
                    text,
                    origin: Origin::Env(TASKS_PER_NODE_ENV),
                },
                None => bail!(
                    "{TASKS_PER_NODE_ENV} is not set although {NODELIST_ENV} is: \
                     pass --slots N (or --slots '8(x2),4') to say how many tasks each node runs"
                ),
            },
            None => Slots::Uniform(1),
        };
        Ok(Self {
            nodelist,
            nodelist_origin,
            slots,
        })
    }
}

/// `--slots`: a bare number applies to every node, anything else is a per-node list.
fn parse_slots_flag(text: &str) -> Result<Slots> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        let n: u32 = trimmed.parse().with_context(|| {
            format!("--slots `{text}` is too large: give a task count per node below 2^32")
        })?;
        return Ok(Slots::Uniform(n));
    }
    Ok(Slots::PerNode {
        text: text.to_string(),
        origin: Origin::Flag("--slots"),
    })
}

/// One line of a hostfile: a node and how many tasks it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The node's host name.
    pub host: String,
    /// Tasks (MPI ranks) on that node; at least 1.
    pub slots: u32,
}

/// Pair each host with its slot count; the counts must cover the nodes one for one.
pub fn entries(request: &Request, hosts: Vec<String>) -> Result<Vec<Entry>> {
    if hosts.is_empty() {
        bail!(
            "the node list `{}` from {} names no node",
            request.nodelist,
            request.nodelist_origin
        );
    }
    let counts = match &request.slots {
        Slots::Uniform(n) => vec![*n; hosts.len()],
        Slots::PerNode { text, origin } => {
            let counts = hostlist::parse_tasks_per_node(text)
                .with_context(|| format!("invalid slot counts in {origin} `{text}`"))?;
            if counts.len() != hosts.len() {
                bail!(
                    "{} node(s) in {} `{}` but {} slot count(s) in {origin} `{text}`: give one \
                     count per node, e.g. --slots '{}(x{})', or a single number for all nodes",
                    hosts.len(),
                    request.nodelist_origin,
                    request.nodelist,
                    counts.len(),
                    counts.first().copied().unwrap_or(1),
                    hosts.len()
                );
            }
            counts
        }
    };
    hosts
        .into_iter()
        .zip(counts)
        .map(|(host, slots)| {
            if slots == 0 {
                bail!("node {host} gets 0 slots: every node in a hostfile needs at least 1");
            }
            Ok(Entry { host, slots })
        })
        .collect()
}

/// Refuse a `slurm`-format file (one line per task) of more than [`hostlist::MAX_HOSTS`]
/// lines: `--slots 4000000000` would otherwise try to build gigabytes of text.
pub fn check_size(format: Format, entries: &[Entry]) -> Result<()> {
    let tasks: u64 = entries.iter().map(|e| u64::from(e.slots)).sum();
    if format == Format::Slurm && tasks > hostlist::MAX_HOSTS as u64 {
        bail!(
            "the slurm format writes one line per task and {tasks} tasks is more than {}: \
             check --slots or $SLURM_TASKS_PER_NODE",
            hostlist::MAX_HOSTS
        );
    }
    Ok(())
}

/// Write `entries` in `format`; every line ends with a newline.
pub fn render(format: Format, entries: &[Entry]) -> String {
    let mut out = String::new();
    for e in entries {
        match format {
            Format::Openmpi => out.push_str(&format!("{} slots={}\n", e.host, e.slots)),
            Format::Mpich => out.push_str(&format!("{}:{}\n", e.host, e.slots)),
            Format::Hosts => {
                out.push_str(&e.host);
                out.push('\n');
            }
            Format::Slurm => {
                for _ in 0..e.slots {
                    out.push_str(&e.host);
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// Write `contents` to `path` through a temporary file in the same directory and a rename,
/// so readers see the old file or the whole new one, never a part.
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<()> {
    let file_name = path
        .file_name()
        .with_context(|| format!("output path `{}` does not name a file", path.display()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp_name = OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| -> Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("cannot create `{}`", tmp.display()))?;
        file.write_all(contents)
            .and_then(|()| file.sync_all())
            .with_context(|| format!("cannot write `{}`", tmp.display()))?;
        fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename `{}` to `{}`", tmp.display(), path.display()))
    })();
    if result.is_err() {
        // Best effort: the error that matters is the one already in `result`.
        let _ = fs::remove_file(&tmp);
    }
    result.with_context(|| format!("could not write the hostfile to `{}`", path.display()))
}

/// `gpudirect hostfile`.
pub fn run(args: &HostfileArgs, _ctx: &Ctx) -> Result<ExitStatus> {
    let request = Request::resolve(args, |name| std::env::var(name).ok())?;
    tracing::debug!(?request, "hostfile request");
    let hosts = if args.via_scontrol {
        // Slurm 22.05's parser guesses at malformed input (`n[3-` gives `n]`): check the
        // expression's shape ourselves first, then let scontrol expand it.
        hostlist::count(&request.nodelist).with_context(|| {
            format!(
                "invalid node list in {} `{}` (not passed to scontrol)",
                request.nodelist_origin, request.nodelist
            )
        })?;
        gpudirect::slurm::show_hostnames(&request.nodelist)?
    } else {
        hostlist::expand(&request.nodelist).with_context(|| {
            format!(
                "invalid node list in {} `{}`",
                request.nodelist_origin, request.nodelist
            )
        })?
    };
    let entries = entries(&request, hosts)?;
    check_size(args.format, &entries)?;
    let text = render(args.format, &entries);
    match &args.output {
        Some(path) => write_atomically(path, text.as_bytes())?,
        None => emit(&text).context("cannot write the hostfile to stdout")?,
    }
    Ok(ExitStatus::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn args(nodelist: Option<&str>, slots: Option<&str>) -> HostfileArgs {
        HostfileArgs {
            nodelist: nodelist.map(str::to_string),
            slots: slots.map(str::to_string),
            format: Format::Openmpi,
            output: None,
            via_scontrol: false,
        }
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn build(args: &HostfileArgs, env: &[(&str, &str)]) -> Result<Vec<Entry>> {
        let request = Request::resolve(args, env_of(env))?;
        let hosts = hostlist::expand(&request.nodelist)?;
        entries(&request, hosts)
    }

    fn e(host: &str, slots: u32) -> Entry {
        Entry {
            host: host.into(),
            slots,
        }
    }

    const ALLOC: &[(&str, &str)] = &[
        ("SLURM_JOB_NODELIST", "a3h-[0001-0003]"),
        ("SLURM_TASKS_PER_NODE", "8(x2),4"),
    ];

    #[test]
    fn allocation_environment_gives_nodes_and_slots() {
        let got = build(&args(None, None), ALLOC).unwrap();
        assert_eq!(got, [e("a3h-0001", 8), e("a3h-0002", 8), e("a3h-0003", 4)]);
    }

    #[test]
    fn flags_override_environment() {
        let got = build(&args(Some("gpu[1-2]"), Some("2")), ALLOC).unwrap();
        assert_eq!(got, [e("gpu1", 2), e("gpu2", 2)]);
        // --slots alone overrides the tasks per node of the allocation's node list.
        let got = build(&args(None, Some("1")), ALLOC).unwrap();
        assert_eq!(got.iter().map(|e| e.slots).sum::<u32>(), 3);
        // --nodelist without --slots does not borrow the allocation's counts.
        let got = build(&args(Some("x,y"), None), ALLOC).unwrap();
        assert_eq!(got, [e("x", 1), e("y", 1)]);
        let got = build(&args(Some("x,y"), Some("4,2")), &[]).unwrap();
        assert_eq!(got, [e("x", 4), e("y", 2)]);
    }

    #[test]
    fn missing_environment_says_how_to_fix() {
        let msg = build(&args(None, None), &[]).unwrap_err().to_string();
        assert!(msg.contains("SLURM_JOB_NODELIST is not set"), "{msg}");
        assert!(
            msg.contains("run inside an allocation") && msg.contains("--nodelist"),
            "{msg}"
        );
        let msg = build(&args(None, None), &[("SLURM_JOB_NODELIST", "n1")])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("SLURM_TASKS_PER_NODE is not set") && msg.contains("--slots"),
            "{msg}"
        );
        let msg = build(&args(Some(" "), None), &[]).unwrap_err().to_string();
        assert!(msg.contains("empty"), "{msg}");
    }

    #[test]
    fn count_mismatch_names_both_sources() {
        let env = [
            ("SLURM_JOB_NODELIST", "n[1-3]"),
            ("SLURM_TASKS_PER_NODE", "8(x2)"),
        ];
        let msg = build(&args(None, None), &env).unwrap_err().to_string();
        assert!(
            msg.contains("3 node(s) in $SLURM_JOB_NODELIST `n[1-3]`")
                && msg.contains("2 slot count(s) in $SLURM_TASKS_PER_NODE `8(x2)`"),
            "{msg}"
        );
        let msg = build(&args(Some("n1"), Some("1,1")), &[])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("--nodelist") && msg.contains("--slots"),
            "{msg}"
        );
    }

    #[test]
    fn bad_slots_and_zero_slots_are_refused() {
        let err = build(&args(Some("n1"), Some("8(x")), &[]).unwrap_err();
        let chain = format!("{err:#}");
        assert!(
            chain.contains("--slots `8(x`") && chain.contains("byte 1"),
            "{chain}"
        );
        let msg = build(&args(Some("n1"), Some("0")), &[])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("n1 gets 0 slots"), "{msg}");
        let msg = build(&args(Some("n1"), Some("99999999999")), &[])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("too large"), "{msg}");
    }

    #[test]
    fn renders_every_format() {
        let entries = [e("gpu01", 2), e("gpu02", 1)];
        assert_eq!(
            render(Format::Openmpi, &entries),
            "gpu01 slots=2\ngpu02 slots=1\n"
        );
        assert_eq!(render(Format::Mpich, &entries), "gpu01:2\ngpu02:1\n");
        assert_eq!(render(Format::Hosts, &entries), "gpu01\ngpu02\n");
        assert_eq!(render(Format::Slurm, &entries), "gpu01\ngpu01\ngpu02\n");
        assert_eq!(render(Format::Openmpi, &[]), "");
        let huge = [e("n1", 600_000), e("n2", 600_000)];
        let msg = check_size(Format::Slurm, &huge).unwrap_err().to_string();
        assert!(msg.contains("1200000 tasks"), "{msg}");
        assert!(check_size(Format::Openmpi, &huge).is_ok());
        assert!(check_size(Format::Slurm, &entries).is_ok());
    }

    #[test]
    fn atomic_write_replaces_and_cleans_up() {
        let tmp = tempfile::Builder::new()
            .prefix("gpudirect-hostfile-unit-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let path = dir.join("hosts");
        write_atomically(&path, b"old\n").unwrap();
        write_atomically(&path, b"new\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
        let names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [OsString::from("hosts")]);
        // A directory in the way: the rename fails, the temporary file is removed.
        let blocked = dir.join("sub");
        fs::create_dir_all(blocked.join("x")).unwrap();
        assert!(write_atomically(&blocked, b"data").is_err());
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, [OsString::from("hosts"), OsString::from("sub")]);
        assert!(write_atomically(&dir.join("missing/hosts"), b"x").is_err());
    }
}
