//! One plain text table for every command: a header line, then one line per row, columns
//! separated by two spaces, no trailing spaces; widths count characters, not bytes.

/// How a column lines up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A plain text table: a header line, then one line per row, columns separated by two
/// spaces, no trailing spaces. Widths count characters, not bytes.
pub fn render_table(columns: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    // A cell may hold text from outside (a label, a host): escaped before it is measured.
    let rows: Vec<Vec<std::borrow::Cow<'_, str>>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| super::shown(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = columns.iter().map(|(h, _)| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, (cell, ((_, align), width))) in cells.zip(columns.iter().zip(&widths)).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            let pad = width.saturating_sub(cell.chars().count());
            match align {
                Align::Left => {
                    out.push_str(cell);
                    out.extend(std::iter::repeat_n(' ', pad));
                }
                Align::Right => {
                    out.extend(std::iter::repeat_n(' ', pad));
                    out.push_str(cell);
                }
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(&mut columns.iter().map(|(h, _)| *h));
    for row in &rows {
        out.push_str(&line(&mut row.iter().map(|cell| cell.as_ref())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_and_trims() {
        let t = render_table(
            &[
                ("ID", Align::Right),
                ("NAME", Align::Left),
                ("X", Align::Left),
            ],
            &[
                vec!["1".into(), "all_reduce".into(), "".into()],
                vec!["12".into(), "bc".into(), "é".into()],
            ],
        );
        assert_eq!(t, "ID  NAME        X\n 1  all_reduce\n12  bc          é\n");
    }
}
