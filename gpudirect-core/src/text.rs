//! Message helpers the plugin, the lint, the overlay and the launcher share: user text made
//! safe for one log line, and the line of a byte offset. Re-exported from
//! [`crate::config`], where they began.

/// Makes user text safe to print in one log line: printable ASCII, at most 64 chars.
pub fn sanitize_for_message(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if text.chars().count() > 64 {
        out.push_str("...");
    }
    out
}

/// Makes a message one log line: its lines joined with `; `, control characters (from
/// keys or values the admin wrote, e.g. `"a\nb"`) shown escaped. The plugin logs each
/// error as one line, and a line break would let text in the config forge log lines.
pub fn one_line(text: &str) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    escape_controls(&joined)
}

/// Whether `text` holds a control character (line break, tab, escape, ...): such text in a
/// path, file or node set name would break the one-line messages that show it.
pub(crate) fn has_control(text: &str) -> bool {
    text.chars().any(char::is_control)
}

/// Control characters written as escapes (`\n`, `\u{1b}`), everything else as is.
pub fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The 1-based line of byte `offset` in `text` (for a TOML error's span).
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
