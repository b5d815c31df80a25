//! Text from outside (a RAS answer, an NCCL log, a history another user wrote) as it may
//! reach a terminal: control characters and the characters that hide or reorder text shown
//! as escapes, so that an escape sequence in a host name or a label cannot set the
//! terminal's title, write its clipboard or erase the lines before it (security review T2).
//! JSON output escapes by itself and does not come here.

use std::borrow::Cow;

/// Whether `c` is not shown as itself: the C0 controls, DEL, the C1 controls, and the
/// format characters that reorder or hide text (bidirectional marks, embeddings, overrides
/// and isolates; zero-width spaces and joiners; the word joiner and invisible operators;
/// the byte-order mark; interlinear annotations).
pub fn hides_text(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
        )
}

/// One field (a host, a label, a hash) for the terminal: every character [`hides_text`]
/// names written as an escape: `\x1b` for an ASCII control or DEL, `\u{9b}` for the rest.
/// Text without one comes back as it is. Pure.
pub fn shown(text: &str) -> Cow<'_, str> {
    escape(text, |_| false)
}

/// [`shown`] for a block of lines: its newlines kept, everything else escaped. Pure.
pub fn shown_text(text: &str) -> Cow<'_, str> {
    escape(text, |c| c == '\n')
}

fn escape(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| hides_text(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if keep(c) || !hides_text(c) => out.push(c),
            c if c.is_ascii() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_not_sent() {
        // An OSC 0 title, an SGR colour and an erase-line, as the review's RAS answer had.
        let host = "node\x1b]0;PWNED\x07\x1b[31;1m\x1b[2K";
        assert_eq!(shown(host), "node\\x1b]0;PWNED\\x07\\x1b[31;1m\\x1b[2K");
        assert_eq!(
            shown("a\u{9b}2Jb\u{202e}c\u{200b}d\x7f"),
            "a\\u{9b}2Jb\\u{202e}c\\u{200b}d\\x7f"
        );
        assert_eq!(shown("one\ntwo\tthree"), "one\\x0atwo\\x09three");
        assert_eq!(shown_text("one\ntwo\x1b[2K\n"), "one\ntwo\\x1b[2K\n");
        // Ordinary text, non-ASCII included, is untouched and not copied.
        assert!(matches!(shown("gpu-node-01 · 東京"), Cow::Borrowed(_)));
        for text in [host, "x\u{85}y"] {
            assert!(!shown(text).bytes().any(|b| b < 0x20 || b == 0x7f));
            assert!(!shown(text).chars().any(hides_text));
        }
    }
}
