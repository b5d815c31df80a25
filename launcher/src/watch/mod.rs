//! `gpudirect watch`: what slows a running job, from the NCCL Inspector's dumps.
//!
//! ```text
//! dump folders (one per node, <host>-pid<PID>.log per rank)
//!   └─ read_folder: regular files only, each file's newest bytes within a budget,
//!      a folder others can write named, not trusted silently
//!        └─ nccl_output::inspector::parse_dump: per-rank collective samples
//!             └─ in_window: the newest `window` of samples
//!                  └─ judge::judge: per communicator, late rank / slower than baseline /
//!                     silent ranks, each with its evidence
//!                       └─ text::render or --json
//! ```
//!
//! The reading and the judging are apart so that the CPU tests replay dumps recorded on the
//! lent GPU host (`tests/fixtures/nccl-inspector/`, a stand-in for a live job, named so)
//! through the same code a live job's dumps go through.

pub mod judge;
pub mod links;
pub mod text;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nccl_output::inspector::{parse_dump, Limits, Sample};
use serde::{Deserialize, Serialize};

/// The newest bytes read of one dump file: the Inspector appends every collective, so a
/// long job's file grows without end, and the newest part is what `watch` judges.
pub const FILE_BUDGET: u64 = 16 << 20;
/// The most files read from one folder (one per rank of the node, with room for restarts).
pub const MAX_FILES: usize = 256;

/// What was read from the dump folders, with what could not be.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Collected {
    /// Every sample read.
    pub samples: Vec<Sample>,
    /// Files read.
    pub files: usize,
    /// What the reader says about the folders and files (cut, skipped, untrusted).
    pub notes: Vec<String>,
    /// The connection profiler's lines (`.links` files), where it ran.
    #[serde(skip)]
    pub link_lines: Vec<links::Line>,
}

/// Reads every `*.log` dump under `dir` (not below). Symbolic links, folders and other
/// non-regular files are skipped and named; a file over [`FILE_BUDGET`] is read from its
/// newest part; a folder that a user other than its owner can write is named (anyone could
/// have written its dumps).
pub fn read_folder(dir: &Path, into: &mut Collected) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("{}: {e}: give the job's dump folder", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "{}: not a folder (a symbolic link or a file): give the dump folder itself",
            dir.display()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        into.notes.push(format!(
            "{}: others can write this folder (mode {:o}): its dumps may not be the job's",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log" || x == "links"))
        .collect();
    names.sort();
    if names.len() > MAX_FILES {
        into.notes.push(format!(
            "{}: {} dump files, the first {MAX_FILES} by name read",
            dir.display(),
            names.len()
        ));
        names.truncate(MAX_FILES);
    }
    for path in names {
        match read_file(&path) {
            Ok((bytes, note)) if path.extension().is_some_and(|x| x == "links") => {
                into.notes.extend(note);
                let (lines, bad) = links::parse(&bytes);
                if bad > 0 {
                    into.notes.push(format!(
                        "{}: {bad} line(s) not the connection profiler's (cut by a write in progress?)",
                        path.display()
                    ));
                }
                into.files += 1;
                into.link_lines.extend(lines);
            }
            Ok((bytes, note)) => {
                into.notes.extend(note);
                let dump = parse_dump(&bytes, Limits::default());
                if let Some((line, why)) = dump.diagnostics.first() {
                    into.notes.push(format!(
                        "{}: {} line(s) not read, the first (line {line}): {why}",
                        path.display(),
                        dump.diagnostics.len()
                    ));
                }
                into.files += 1;
                into.samples.extend(dump.samples);
            }
            Err(why) => into.notes.push(why),
        }
    }
    Ok(())
}

/// One file's newest [`FILE_BUDGET`] bytes, from a line start; never follows a link and
/// never blocks on a FIFO (non-regular files are refused before they are opened).
fn read_file(path: &Path) -> Result<(Vec<u8>, Option<String>), String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file: skipped", path.display()));
    }
    let mut file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = meta.len();
    let start = len.saturating_sub(FILE_BUDGET);
    let mut note = None;
    if start > 0 {
        file.seek(SeekFrom::Start(start))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        note = Some(format!(
            "{}: {len} bytes, its newest {FILE_BUDGET} read",
            path.display()
        ));
    }
    let mut bytes = Vec::new();
    file.take(FILE_BUDGET)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if start > 0 {
        // The first line is cut: start after it.
        let skip = bytes
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| i + 1);
        bytes.drain(..skip);
    }
    Ok((bytes, note))
}

/// The marker key of an agent's line (`gpudirect agent watch`).
pub const LINE_KEY: &str = "\"gpudirect_watch\":";
/// The most samples one node's agent sends (the newest): at about 300 bytes each, 15 MB.
pub const AGENT_SAMPLES: usize = 50_000;

/// What `gpudirect agent watch` found on one node: the job's dump folder read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeDumps {
    /// Format version of this line.
    pub gpudirect_watch: u32,
    /// The node (`SLURMD_NODENAME`, else its host name).
    pub node: String,
    /// The folder read.
    pub folder: String,
    /// Files read.
    pub files: usize,
    /// What the reader says (the folder missing or not the job's user's, files cut).
    pub notes: Vec<String>,
    /// Samples within the window, at most [`AGENT_SAMPLES`], the newest.
    pub samples: Vec<Sample>,
    /// Each rank's connections over the window, where the connection profiler ran.
    #[serde(default)]
    pub links: Vec<links::RankLinks>,
}

/// The agent's work on one node: `folder` is read only when it is a folder (not a link)
/// of the job's user alone (`job_uid`, mode without group/other bits): the dumps of a
/// folder anyone else made or may enter are not the job's to trust.
pub fn node_dumps(folder: &Path, job_uid: u32, node: String, window: Duration) -> NodeDumps {
    let mut collected = Collected::default();
    match std::fs::symlink_metadata(folder) {
        Err(e) => collected.notes.push(format!(
            "{node}: {}: {e}: the job wrote no dumps here (did it export GPUDIRECT_WATCH=1, or is [watch] always on?)",
            folder.display()
        )),
        Ok(meta) if !meta.is_dir() => collected
            .notes
            .push(format!("{node}: {} is no folder: not read", folder.display())),
        Ok(meta) if meta.uid() != job_uid || meta.mode() & 0o077 != 0 => collected.notes.push(format!(
            "{node}: {} belongs to uid {} with mode {:o}, not to the job's user ({job_uid}) alone: not read",
            folder.display(),
            meta.uid(),
            meta.mode() & 0o7777
        )),
        Ok(_) => {
            if let Err(why) = read_folder(folder, &mut collected) {
                collected.notes.push(format!("{node}: {why}"));
            }
        }
    }
    let mut samples = in_window(std::mem::take(&mut collected.samples), window);
    if samples.len() > AGENT_SAMPLES {
        samples.sort_by_key(|s| s.dumped_us);
        let cut = samples.len() - AGENT_SAMPLES;
        collected.notes.push(format!(
            "{node}: {} samples in the window, the newest {AGENT_SAMPLES} sent",
            samples.len()
        ));
        samples.drain(..cut);
    }
    let links = links::windowed(&collected.link_lines, window_us(window));
    NodeDumps {
        gpudirect_watch: 1,
        node,
        folder: folder.display().to_string(),
        files: collected.files,
        notes: collected.notes,
        samples,
        links,
    }
}

/// The agents' lines in an `srun --label` output, by node.
pub fn read_agent_lines(stdout: &str) -> (Vec<NodeDumps>, Vec<String>) {
    let (mut dumps, bad) = crate::slurm::read_labelled_json::<NodeDumps>(stdout, LINE_KEY);
    dumps.sort_by(|a, b| a.node.cmp(&b.node));
    (dumps, bad)
}

/// A window in microseconds.
pub fn window_us(window: Duration) -> u64 {
    u64::try_from(window.as_micros()).unwrap_or(u64::MAX)
}

/// The samples dumped within `window` of the newest dump, the others dropped: a verdict on
/// what the job does now, not on how it started.
pub fn in_window(samples: Vec<Sample>, window: Duration) -> Vec<Sample> {
    let newest = samples.iter().map(|s| s.dumped_us).max().unwrap_or(0);
    let from = newest.saturating_sub(window_us(window));
    samples
        .into_iter()
        .filter(|s| s.dumped_us >= from)
        .collect()
}

/// What became of a job's telemetry folder when the job ended ([`remove_job_folder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup {
    /// The folder and everything in it are gone.
    Removed,
    /// There was no folder: the job did not ask for telemetry on this node.
    Absent,
    /// Left where it is, and why.
    Kept(String),
}

/// Removes a job's dump folder at the job's end (`gpudirect epilog`, as root): only a real
/// folder that belongs to the job's user, since the folder's place is shared (`/tmp` by
/// default) and anyone may have put something of that name there. A link or a file is left
/// (removing it would remove what it is not); what is inside goes without following links
/// (std's `remove_dir_all` opens each level with `O_NOFOLLOW` relative to the one above, so a
/// link the user plants inside, even while it runs, takes nothing else with it).
pub fn remove_job_folder(folder: &Path, job_uid: u32) -> Cleanup {
    let meta = match std::fs::symlink_metadata(folder) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Cleanup::Absent,
        Err(e) => return Cleanup::Kept(format!("cannot read {}: {e}", folder.display())),
    };
    if !meta.is_dir() {
        return Cleanup::Kept(format!(
            "{} is a link or a file, not the folder the plugin makes: left as it is",
            folder.display()
        ));
    }
    if meta.uid() != job_uid {
        return Cleanup::Kept(format!(
            "{} belongs to uid {}, not to the job's user ({job_uid}): left as it is",
            folder.display(),
            meta.uid()
        ));
    }
    match std::fs::remove_dir_all(folder) {
        Ok(()) => Cleanup::Removed,
        Err(e) => Cleanup::Kept(format!("cannot remove {}: {e}", folder.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::judge::{judge, Baselines, Finding};
    use super::*;

    /// The dumps recorded on the lent H200 (a stand-in for a live job's folder).
    fn recorded(name: &str) -> Collected {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/nccl-inspector")
            .join(name);
        let mut collected = Collected::default();
        read_folder(&dir, &mut collected).unwrap_or_else(|e| panic!("{e}"));
        collected
    }

    #[test]
    fn the_clean_job_has_no_finding() {
        let c = recorded("clean");
        assert_eq!(c.files, 2);
        let verdicts = judge(&c.samples, &Baselines::default());
        assert_eq!(verdicts.len(), 1);
        assert!(
            verdicts[0].findings.is_empty(),
            "{:?}",
            verdicts[0].findings
        );
        let all_reduce = &verdicts[0].groups[1];
        assert_eq!(
            (all_reduce.coll.as_str(), all_reduce.bytes),
            ("AllReduce", 64 << 20)
        );
        assert!(all_reduce.matched >= 39);
    }

    #[test]
    fn the_rank_that_slept_50_ms_is_named_late_with_the_network_healthy() {
        let c = recorded("late-rank1");
        let verdicts = judge(&c.samples, &Baselines::default());
        let late: Vec<&Finding> = verdicts[0]
            .findings
            .iter()
            .filter(|f| matches!(f, Finding::LateRank { .. }))
            .collect();
        assert_eq!(late.len(), 1, "{:?}", verdicts[0].findings);
        let Finding::LateRank {
            rank,
            host,
            late_by_us,
            from_start_times,
            coll,
            ..
        } = late[0]
        else {
            unreachable!()
        };
        assert_eq!(
            (*rank, host.as_str(), coll.as_str()),
            (1, "node2", "AllReduce")
        );
        assert!(*from_start_times);
        assert!((40_000.0..60_000.0).contains(late_by_us), "{late_by_us}");
    }

    /// Recorded after the rule was written, as a check on an input it was not built from:
    /// three ranks, rank 2 sleeping 50 ms per step.
    #[test]
    fn of_three_ranks_the_one_that_slept_is_named_late() {
        let c = recorded("three-ranks-late2");
        assert_eq!(c.files, 3);
        let verdicts = judge(&c.samples, &Baselines::default());
        let named: Vec<(u32, &str)> = verdicts[0]
            .findings
            .iter()
            .filter_map(|f| match f {
                Finding::LateRank { rank, host, .. } => Some((*rank, host.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(named, vec![(2, "node3")], "{:?}", verdicts[0].findings);
    }

    #[test]
    fn a_baseline_the_clean_job_falls_short_of_is_a_finding_and_one_it_meets_is_not() {
        let c = recorded("clean");
        let ar = judge(&c.samples, &Baselines::default())[0].groups[1].busbw_gbs;
        let mut baselines = Baselines {
            tolerance_pct: 10.0,
            ..Baselines::default()
        };
        let key = ("AllReduce".to_string(), 64 << 20);
        baselines
            .busbw
            .insert(key.clone(), (ar * 2.0, "a test figure".into()));
        let slow = judge(&c.samples, &baselines);
        assert!(matches!(
            slow[0].findings[..],
            [Finding::SlowerThanBaseline { percent, .. }] if (49.0..51.0).contains(&percent)
        ));
        baselines
            .busbw
            .insert(key, (ar * 1.05, "a test figure".into()));
        assert!(judge(&c.samples, &baselines)[0].findings.is_empty());
    }

    #[test]
    fn a_rank_that_never_wrote_is_named_silent() {
        let c = recorded("one-rank-wrote");
        let verdicts = judge(&c.samples, &Baselines::default());
        assert_eq!(
            verdicts[0].findings,
            vec![Finding::Silent { ranks: vec![0] }]
        );
        assert_eq!(verdicts[0].groups[0].matched, 0);
    }

    #[test]
    fn links_fifos_and_cut_files_are_not_followed_blocked_on_or_misread() {
        let tmp = std::env::temp_dir().join(format!("gpudirect-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/nccl-inspector/late-rank1/node1-pid1125.log");
        std::os::unix::fs::symlink(&src, tmp.join("link.log")).unwrap();
        nix::unistd::mkfifo(&tmp.join("fifo.log"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let mut bytes = std::fs::read(&src).unwrap();
        bytes.truncate(bytes.len() / 2);
        std::fs::write(tmp.join("cut.log"), &bytes).unwrap();
        let mut c = Collected::default();
        read_folder(&tmp, &mut c).unwrap();
        assert_eq!(c.files, 1);
        assert!(!c.samples.is_empty());
        let skipped = c
            .notes
            .iter()
            .filter(|n| n.contains("not a regular file"))
            .count();
        assert_eq!(skipped, 2, "{:?}", c.notes);
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn the_agent_reads_only_a_folder_of_the_jobs_user_alone() {
        use std::os::unix::fs::PermissionsExt;
        let tmp =
            std::env::temp_dir().join(format!("gpudirect-watch-agent-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/nccl-inspector/late-rank1/node2-pid1126.log");
        std::fs::copy(&src, tmp.join("node2-pid1126.log")).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700)).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let window = Duration::from_secs(3600);
        let read = node_dumps(&tmp, me, "node2".into(), window);
        assert_eq!(
            (read.files, read.samples.len()),
            (1, 80),
            "{:?}",
            read.notes
        );
        let line = serde_json::to_string(&read).unwrap();
        let (back, bad) = read_agent_lines(&format!("0: {line}\n"));
        assert!(bad.is_empty());
        assert_eq!(back[0].samples, read.samples);

        let other = node_dumps(&tmp, me + 1, "node2".into(), window);
        assert!(other.samples.is_empty());
        assert!(
            other.notes[0].contains("not to the job's user"),
            "{:?}",
            other.notes
        );
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(node_dumps(&tmp, me, "node2".into(), window)
            .samples
            .is_empty());
        let missing = node_dumps(&tmp.join("nope"), me, "node2".into(), window);
        assert!(missing.notes[0].contains("the job wrote no dumps here"));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn the_window_keeps_the_newest_dumps() {
        let c = recorded("not-verbose");
        let newest = c.samples.iter().map(|s| s.dumped_us).max().unwrap();
        let kept = in_window(c.samples.clone(), Duration::from_millis(1));
        assert!(!kept.is_empty() && kept.len() < c.samples.len());
        assert!(kept.iter().all(|s| s.dumped_us + 1000 >= newest));
    }

    #[test]
    fn a_jobs_folder_goes_only_when_it_is_a_folder_of_the_jobs_user() {
        use std::os::unix::fs::symlink;
        let tmp = std::env::temp_dir().join(format!("gd-epilog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("job/inner")).unwrap();
        let outside = tmp.join("outside");
        std::fs::write(&outside, "kept").unwrap();
        // A link inside the folder: it goes, what it points at stays.
        symlink(&outside, tmp.join("job/inner/link")).unwrap();
        let me = nix::unistd::geteuid().as_raw();

        assert!(matches!(
            remove_job_folder(&tmp.join("job"), me + 1),
            Cleanup::Kept(why) if why.contains("not to the job's user")
        ));
        assert!(tmp.join("job/inner").is_dir());
        assert_eq!(remove_job_folder(&tmp.join("job"), me), Cleanup::Removed);
        assert!(!tmp.join("job").exists());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "kept");
        assert_eq!(remove_job_folder(&tmp.join("job"), me), Cleanup::Absent);

        // A link in the folder's place is left, and so is what it points at.
        symlink(tmp.join("elsewhere"), tmp.join("planted")).unwrap();
        std::fs::create_dir(tmp.join("elsewhere")).unwrap();
        assert!(matches!(
            remove_job_folder(&tmp.join("planted"), me),
            Cleanup::Kept(why) if why.contains("a link or a file")
        ));
        assert!(tmp.join("elsewhere").is_dir());
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
