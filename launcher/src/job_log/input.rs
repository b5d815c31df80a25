//! The inputs of `gpudirect log`: files or stdin, plain or gzip, fed line by line to one
//! [`JobLogReader`] in bounded memory.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

#[cfg(doc)]
use nccl_output::joblog::Limits;
use nccl_output::joblog::{for_each_line_within, JobLogReader, LineStats, ReadError};
use serde::Serialize;

/// The first two bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// One input, as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InputRead {
    /// The file, or `stdin`.
    pub name: String,
    /// Whether it was gzip data.
    pub gzip: bool,
    /// Lines read.
    pub lines: u64,
    /// Bytes read (after decompression).
    pub bytes: u64,
    /// Lines cut to the reader's line limit.
    pub long_lines: u64,
    /// Bytes of those lines past the limit: read, not judged.
    pub skipped_bytes: u64,
    /// Whether reading stopped at the reader's byte limit ([`Limits::max_input_bytes`]),
    /// the rest of the input unread.
    pub cut_at_limit: bool,
    /// Whether reading stopped at the reader's line limit ([`Limits::max_lines`]).
    pub cut_at_lines: bool,
    /// Bytes of a plain file left unread by either limit (unknown for gzip data and stdin).
    pub unread_bytes: Option<u64>,
}

impl InputRead {
    /// What the limits cut, for the user: the limit, its flag, and what was left unread;
    /// nothing when the whole input was read and judged.
    pub fn cuts(&self, max_line: usize) -> Vec<String> {
        let mut said = Vec::new();
        let unread = match self.unread_bytes {
            Some(n) => format!("{n} more bytes of the file were not read"),
            None if self.gzip => "the rest of its decompressed text was not read".into(),
            None => "the rest was not read".into(),
        };
        if self.cut_at_limit {
            said.push(format!(
                "{}: only its first {} bytes{} were read (the --max-bytes budget); {unread}: \
                 raise --max-bytes to read more",
                self.name,
                self.bytes,
                if self.gzip {
                    " after decompression"
                } else {
                    ""
                }
            ));
        }
        if self.cut_at_lines {
            said.push(format!(
                "{}: only its first {} lines were read (the --max-lines budget); {unread}: \
                 raise --max-lines to read more",
                self.name, self.lines
            ));
        }
        if self.long_lines > 0 {
            said.push(format!(
                "{}: {} line(s) longer than {} KiB were cut there: {} bytes past the cut were \
                 skipped, not judged",
                self.name,
                self.long_lines,
                max_line / 1024,
                self.skipped_bytes
            ));
        }
        said
    }
}

/// Why an input could not be read: its name and the reason, for the user.
#[derive(Debug, thiserror::Error)]
#[error("{name}: {reason}")]
pub struct InputError {
    /// The file, or `-`.
    pub name: String,
    /// What went wrong, and what to do.
    pub reason: String,
}

/// Where an input comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A file.
    File(PathBuf),
    /// Standard input.
    Stdin,
}

impl Input {
    /// `-` is stdin; anything else a file.
    pub fn from_arg(path: &Path) -> Input {
        if path.as_os_str() == "-" {
            Input::Stdin
        } else {
            Input::File(path.to_path_buf())
        }
    }

    /// The name messages use.
    pub fn name(&self) -> String {
        match self {
            Input::File(p) => p.display().to_string(),
            Input::Stdin => "stdin".into(),
        }
    }
}

/// Reads `input` into `reader` as its input number `source`.
pub fn read_input(
    input: &Input,
    source: usize,
    reader: &mut JobLogReader,
) -> Result<InputRead, InputError> {
    let name = input.name();
    let fail = |reason: String| InputError {
        name: name.clone(),
        reason,
    };
    let (raw, file_bytes): (Box<dyn Read>, Option<u64>) = match input {
        Input::Stdin => (Box::new(std::io::stdin().lock()), None),
        Input::File(path) => {
            let file = File::open(path).map_err(|e| fail(format!("cannot open it: {e}")))?;
            let meta = file
                .metadata()
                .map_err(|e| fail(format!("cannot read it: {e}")))?;
            if meta.is_dir() {
                return Err(fail("a directory: give the log files in it".into()));
            }
            // A regular file's size tells what a limit left unread (not a FIFO's).
            (Box::new(file), meta.is_file().then_some(meta.len()))
        }
    };
    let read = read_from(raw, source, reader).map_err(|(gzip, e)| {
        fail(match e {
            ReadError::Io(io) if gzip => format!("cannot decompress it (gzip): {io}"),
            other => other.to_string(),
        })
    })?;
    let stats = read.stats;
    let cut_at_limit = read.more_past_budget;
    let cut = cut_at_limit || stats.stopped_at_max_lines;
    Ok(InputRead {
        name: name.clone(),
        gzip: read.gzip,
        lines: stats.lines,
        bytes: stats.bytes,
        long_lines: stats.long_lines,
        skipped_bytes: stats.skipped_bytes,
        cut_at_limit,
        cut_at_lines: stats.stopped_at_max_lines,
        unread_bytes: file_bytes
            .filter(|_| cut && !read.gzip)
            .map(|len| len.saturating_sub(stats.bytes)),
    })
}

/// What [`read_from`] found.
struct ReadOutcome {
    gzip: bool,
    stats: LineStats,
    /// The byte budget was spent and the input went on past it.
    more_past_budget: bool,
}

/// Reads `raw` within the reader's byte and line budgets, decompressing it when it starts as
/// gzip does; says whether it did, and whether input was left past the byte budget.
fn read_from(
    raw: Box<dyn Read>,
    source: usize,
    reader: &mut JobLogReader,
) -> Result<ReadOutcome, (bool, ReadError)> {
    let mut buffered = BufReader::with_capacity(256 * 1024, raw);
    let head = buffered.fill_buf().map_err(|e| (false, ReadError::Io(e)))?;
    let gzip = head.starts_with(&GZIP_MAGIC);
    let limits = reader.limits();
    // Bytes after decompression: a gzip bomb costs this much reading, then stops (T7).
    let budget = limits.max_input_bytes;
    let mut feed = |n: u64, line: &str| reader.feed(source, n, line);
    let io = |e| (gzip, ReadError::Io(e));
    let (stats, more_past_budget) = if gzip {
        // Concatenated members too (a log rotated and gzipped in parts, then cat'ed).
        let decoder = flate2::read::MultiGzDecoder::new(buffered).take(budget);
        let mut lines = BufReader::with_capacity(256 * 1024, decoder);
        let stats = for_each_line_within(&mut lines, limits.max_line, limits.max_lines, &mut feed)
            .map_err(|e| (gzip, e))?;
        let mut rest = lines.into_inner();
        let more = rest.limit() == 0 && rest.get_mut().read(&mut [0u8; 1]).map_err(io)? > 0;
        (stats, more)
    } else {
        let mut lines = buffered.take(budget);
        let stats = for_each_line_within(&mut lines, limits.max_line, limits.max_lines, &mut feed)
            .map_err(|e| (gzip, e))?;
        let more = lines.limit() == 0 && !lines.get_mut().fill_buf().map_err(io)?.is_empty();
        (stats, more)
    };
    Ok(ReadOutcome {
        gzip,
        stats,
        more_past_budget,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_output::joblog::Limits;
    use std::io::Write;

    #[test]
    fn plain_and_gzip_inputs_read_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let text = "n1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 commId 0xa - Init START\n\
                    n2:2:2 [0] NCCL INFO comm 0x2 rank 1 nranks 2 commId 0xa - Init START\n";
        let plain = dir.path().join("job.log");
        std::fs::write(&plain, text).unwrap();
        let gz = dir.path().join("job.log.gz");
        let mut enc =
            flate2::write::GzEncoder::new(File::create(&gz).unwrap(), flate2::Compression::fast());
        enc.write_all(text.as_bytes()).unwrap();
        enc.finish().unwrap();
        for (path, gzip) in [(plain, false), (gz, true)] {
            let mut reader = JobLogReader::new(Limits::default());
            let read = read_input(&Input::File(path), 0, &mut reader).unwrap();
            assert_eq!((read.gzip, read.lines), (gzip, 2));
            let log = reader.finish();
            assert_eq!(log.communicators.len(), 1);
            assert_eq!(log.communicators[0].ranks.len(), 2);
        }
    }

    #[test]
    fn bad_inputs_name_the_file_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let mut reader = JobLogReader::new(Limits::default());
        let missing = dir.path().join("absent.log");
        let err = read_input(&Input::File(missing), 0, &mut reader).unwrap_err();
        assert!(
            err.to_string().contains("absent.log: cannot open it"),
            "{err}"
        );
        let err = read_input(&Input::File(dir.path().into()), 0, &mut reader).unwrap_err();
        assert!(err.to_string().contains("a directory"), "{err}");
        let binary = dir.path().join("core");
        std::fs::write(&binary, b"\x7fELF\x02\x01\x01\x00\x00").unwrap();
        let err = read_input(&Input::File(binary), 0, &mut reader).unwrap_err();
        assert!(err.to_string().contains("not a text log"), "{err}");
        // A gzip cut short (a log copied while it was written).
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&b"n1:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n".repeat(200))
            .unwrap();
        let whole = enc.finish().unwrap();
        let cut = dir.path().join("cut.log.gz");
        std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
        let err = read_input(&Input::File(cut), 0, &mut reader).unwrap_err();
        assert!(
            err.to_string().contains("cut.log.gz: cannot decompress it"),
            "{err}"
        );
        // gzip magic with garbage behind it.
        let broken = dir.path().join("broken.gz");
        std::fs::write(&broken, b"\x1f\x8b\x08\x00garbage-not-deflate").unwrap();
        let err = read_input(&Input::File(broken), 0, &mut reader).unwrap_err();
        assert!(err.to_string().contains("cannot decompress it"), "{err}");
    }
}
