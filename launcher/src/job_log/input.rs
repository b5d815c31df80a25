//! The inputs of `gpudirect log`: files or stdin, plain or gzip, fed line by line to one
//! [`JobLogReader`] in bounded memory.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

#[cfg(doc)]
use nccl_output::joblog::Limits;
use nccl_output::joblog::{for_each_line, JobLogReader, LineStats, ReadError};
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
    /// Whether reading stopped at the reader's byte limit ([`Limits::max_input_bytes`]),
    /// the rest of the input unread.
    pub cut_at_limit: bool,
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
    let reader_max = reader.limits().max_input_bytes;
    let fail = |reason: String| InputError {
        name: name.clone(),
        reason,
    };
    let raw: Box<dyn Read> = match input {
        Input::Stdin => Box::new(std::io::stdin().lock()),
        Input::File(path) => {
            let file = File::open(path).map_err(|e| fail(format!("cannot open it: {e}")))?;
            let meta = file
                .metadata()
                .map_err(|e| fail(format!("cannot read it: {e}")))?;
            if meta.is_dir() {
                return Err(fail("a directory: give the log files in it".into()));
            }
            Box::new(file)
        }
    };
    read_from(raw, source, reader)
        .map_err(|(gzip, e)| {
            fail(match e {
                ReadError::Io(io) if gzip => format!("cannot decompress it (gzip): {io}"),
                other => other.to_string(),
            })
        })
        .map(|(gzip, stats)| InputRead {
            name: name.clone(),
            gzip,
            lines: stats.lines,
            bytes: stats.bytes,
            long_lines: stats.long_lines,
            cut_at_limit: stats.bytes >= reader_max,
        })
}

/// Reads `raw`, decompressing it when it starts as gzip does; says whether it did.
fn read_from(
    raw: Box<dyn Read>,
    source: usize,
    reader: &mut JobLogReader,
) -> Result<(bool, LineStats), (bool, ReadError)> {
    let mut buffered = BufReader::with_capacity(256 * 1024, raw);
    let head = buffered.fill_buf().map_err(|e| (false, ReadError::Io(e)))?;
    let gzip = head.starts_with(&GZIP_MAGIC);
    let max = reader.limits().max_line;
    // Bytes after decompression: a gzip bomb costs this much reading, then stops (T7).
    let budget = reader.limits().max_input_bytes;
    let mut feed = |n: u64, line: &str| reader.feed(source, n, line);
    let stats = if gzip {
        // Concatenated members too (a log rotated and gzipped in parts, then cat'ed).
        let decoder = flate2::read::MultiGzDecoder::new(buffered).take(budget);
        for_each_line(
            &mut BufReader::with_capacity(256 * 1024, decoder),
            max,
            &mut feed,
        )
    } else {
        for_each_line(&mut buffered.take(budget), max, &mut feed)
    };
    stats.map(|s| (gzip, s)).map_err(|e| (gzip, e))
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
