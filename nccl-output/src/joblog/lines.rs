//! Lines of a log, read in bounded memory: a line longer than the limit is cut there and the
//! rest of it skipped (counted), so a 10 GB line costs the limit, not 10 GB.

use std::io::BufRead;

/// How much of the input is looked at for binary data: a text log has no NUL byte.
const BINARY_WINDOW: u64 = 64 * 1024;

/// What reading found besides the lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineStats {
    /// Lines read.
    pub lines: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Lines longer than the limit (cut to it).
    pub long_lines: u64,
    /// Bytes of those lines past the limit: read, never held, not judged.
    pub skipped_bytes: u64,
    /// Whether reading stopped at the line budget (`max_lines` of
    /// [`for_each_line_within`]), the rest of the input unread.
    pub stopped_at_max_lines: bool,
}

/// Why a log could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The input could not be read.
    Io(std::io::Error),
    /// A NUL byte near the start: a binary file, not a log.
    Binary {
        /// Its offset.
        offset: u64,
    },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "cannot read it: {e}"),
            ReadError::Binary { offset } => write!(
                f,
                "binary data (a NUL byte at offset {offset}), not a text log: give the job's \
                 stdout/stderr file (a .gz file is read as such)"
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// Calls `each(line_number, text)` for every line of `input` (1-based; `\n` or `\r\n`
/// ends a line; invalid UTF-8 is replaced), each cut to `max` bytes.
pub fn for_each_line(
    input: &mut impl BufRead,
    max: usize,
    each: impl FnMut(u64, &str),
) -> Result<LineStats, ReadError> {
    for_each_line_within(input, max, u64::MAX, each)
}

/// [`for_each_line`] for at most `max_lines` lines: reading stops after that many, the
/// rest of `input` unread ([`LineStats::stopped_at_max_lines`]; security review T7: a gzip
/// bomb of empty lines costs a call per line).
pub fn for_each_line_within(
    input: &mut impl BufRead,
    max: usize,
    max_lines: u64,
    mut each: impl FnMut(u64, &str),
) -> Result<LineStats, ReadError> {
    let mut stats = LineStats::default();
    if max_lines == 0 {
        stats.stopped_at_max_lines = !input.fill_buf().map_err(ReadError::Io)?.is_empty();
        return Ok(stats);
    }
    // A line that spans two reads of the buffer is gathered here; one inside a read (most
    // lines) is handed on from the buffer itself, uncopied.
    let mut pending: Vec<u8> = Vec::with_capacity(256);
    let mut cut = false;
    loop {
        let chunk = match input.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(e)),
        };
        if chunk.is_empty() {
            break;
        }
        if stats.bytes < BINARY_WINDOW {
            let window = (BINARY_WINDOW - stats.bytes).min(chunk.len() as u64) as usize;
            if let Some(i) = chunk[..window].iter().position(|&b| b == 0) {
                return Err(ReadError::Binary {
                    offset: stats.bytes + i as u64,
                });
            }
        }
        let mut used = 0;
        while let Some(i) = find_newline(&chunk[used..]) {
            let piece = &chunk[used..used + i];
            if pending.is_empty() && !cut {
                let whole = piece.len() <= max;
                stats.skipped_bytes += piece.len().saturating_sub(max) as u64;
                emit(
                    &piece[..piece.len().min(max)],
                    !whole,
                    &mut stats,
                    &mut each,
                );
            } else {
                let room = max.saturating_sub(pending.len());
                cut |= piece.len() > room;
                stats.skipped_bytes += piece.len().saturating_sub(room) as u64;
                pending.extend_from_slice(&piece[..piece.len().min(room)]);
                emit(&pending, cut, &mut stats, &mut each);
                pending.clear();
                cut = false;
            }
            used += i + 1;
            if stats.lines >= max_lines {
                // The line budget: what follows this line is left unread.
                stats.bytes += used as u64;
                input.consume(used);
                stats.stopped_at_max_lines = !input.fill_buf().map_err(ReadError::Io)?.is_empty();
                return Ok(stats);
            }
        }
        // The rest of the read: the start of a line that ends in a later one.
        let piece = &chunk[used..];
        let room = max.saturating_sub(pending.len());
        cut |= piece.len() > room;
        stats.skipped_bytes += piece.len().saturating_sub(room) as u64;
        pending.extend_from_slice(&piece[..piece.len().min(room)]);
        let consumed = chunk.len();
        stats.bytes += consumed as u64;
        input.consume(consumed);
    }
    if !pending.is_empty() || cut {
        emit(&pending, cut, &mut stats, &mut each);
    }
    Ok(stats)
}

/// The first `\n` in `bytes`, eight bytes at a time (std's memchr is not public).
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const NEWLINES: u64 = ONES * b'\n' as u64;
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let w = u64::from_le_bytes(word.try_into().unwrap_or([0; 8])) ^ NEWLINES;
        // A zero byte in `w` is a newline in `word`.
        if (w.wrapping_sub(ONES) & !w & HIGHS) != 0 {
            return word.iter().position(|&b| b == b'\n').map(|i| at + i);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| at + i)
}

fn emit(line: &[u8], cut: bool, stats: &mut LineStats, each: &mut impl FnMut(u64, &str)) {
    stats.lines += 1;
    if cut {
        stats.long_lines += 1;
    }
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    match std::str::from_utf8(line) {
        Ok(text) => each(stats.lines, text),
        Err(_) => each(stats.lines, &String::from_utf8_lossy(line)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> (Vec<(u64, String)>, LineStats) {
        let mut seen = Vec::new();
        let stats = for_each_line(
            &mut std::io::BufReader::with_capacity(7, input),
            max,
            |n, l| seen.push((n, l.to_string())),
        )
        .unwrap();
        (seen, stats)
    }

    #[test]
    fn lines_crlf_and_a_last_line_without_a_break() {
        let (seen, stats) = lines(b"one\r\ntwo\n\nthree", 100);
        let texts: Vec<&str> = seen.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(texts, ["one", "two", "", "three"]);
        assert_eq!(seen[3].0, 4);
        assert_eq!(stats.lines, 4);
        assert_eq!(stats.bytes, 15);
    }

    #[test]
    fn a_long_line_is_cut_and_counted_and_the_next_one_is_whole() {
        let mut input = vec![b'x'; 10_000];
        input.extend_from_slice(b"\nshort\n");
        let (seen, stats) = lines(&input, 16);
        assert_eq!(seen[0].1, "x".repeat(16));
        assert_eq!(seen[1].1, "short");
        assert_eq!(stats.long_lines, 1);
    }

    /// Security review T7: the bytes of a long line past the limit are counted (said), in
    /// one read and across reads, and never held.
    #[test]
    fn the_bytes_cut_from_long_lines_are_counted() {
        let mut input = vec![b'y'; 100];
        input.push(b'\n');
        input.extend_from_slice(&[b'z'; 30]);
        input.extend_from_slice(b"\nok\n");
        // Reads of 7 bytes: both long lines span reads.
        let (seen, stats) = lines(&input, 16);
        assert_eq!(seen[2].1, "ok");
        assert_eq!((stats.long_lines, stats.skipped_bytes), (2, 84 + 14));
        // One read holding all: the uncopied path.
        let stats = for_each_line(&mut &input[..], 16, |_, l| assert!(l.len() <= 16)).unwrap();
        assert_eq!(stats.skipped_bytes, 98);
    }

    /// Security review T7: the line budget stops reading after that many lines, says so, and
    /// leaves the rest unread; an input of exactly that many lines is not said to be cut.
    #[test]
    fn the_line_budget_stops_reading_and_says_so() {
        let input = b"a\nb\nc\nd\n";
        let mut seen = Vec::new();
        let stats = for_each_line_within(&mut &input[..], 100, 2, |_, l| {
            seen.push(l.to_string());
        })
        .unwrap();
        assert_eq!(seen, ["a", "b"]);
        assert!(stats.stopped_at_max_lines);
        assert_eq!((stats.lines, stats.bytes), (2, 4));
        let stats = for_each_line_within(&mut &input[..], 100, 4, |_, _| {}).unwrap();
        assert!(!stats.stopped_at_max_lines);
        assert_eq!(stats.lines, 4);
        let stats = for_each_line_within(
            &mut std::io::BufReader::with_capacity(3, &input[..]),
            100,
            3,
            |_, _| {},
        )
        .unwrap();
        assert!(stats.stopped_at_max_lines);
        assert_eq!((stats.lines, stats.bytes), (3, 6));
    }

    #[test]
    fn the_newline_search_finds_the_first_one_wherever_it_is() {
        for len in 0..40 {
            for at in 0..len {
                let mut bytes = vec![b'x'; len];
                bytes[at] = b'\n';
                if at + 3 < len {
                    bytes[at + 3] = b'\n';
                }
                assert_eq!(find_newline(&bytes), Some(at), "{len} {at}");
            }
            assert_eq!(
                find_newline(&vec![0x8a; len]),
                None,
                "{len}: no false match"
            );
        }
    }

    #[test]
    fn binary_input_is_refused_with_its_offset() {
        let err = for_each_line(&mut &b"text\n\x00\x01\x02"[..], 100, |_, _| {}).unwrap_err();
        assert!(matches!(err, ReadError::Binary { offset: 5 }), "{err}");
        assert!(err.to_string().contains("not a text log"));
        // Invalid UTF-8 is no binary file: it is replaced.
        let (seen, _) = lines(b"caf\xe9\n", 100);
        assert_eq!(seen[0].1, "caf\u{fffd}");
    }
}
