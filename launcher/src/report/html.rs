//! The report page: one HTML file that stands alone.
//!
//! Plots are inlined as SVG (or embedded as base64 PNG when only PNGs were drawn), the
//! styles are in the page, and nothing is loaded from elsewhere: the file can be mailed,
//! attached to a ticket or opened on an air-gapped cluster and still shows everything.
//! The PNG/SVG files next to it are for slides and wikis.

use std::fmt::Write as _;

use super::plots::Plot;
use super::{ReportData, REPLAY_LABEL};
use crate::output::line_share;
use crate::units::{human_size, short_time};

/// One plot as drawn: its SVG text and/or PNG bytes.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Which plot.
    pub plot: Plot,
    /// The SVG document, when drawn as SVG.
    pub svg: Option<String>,
    /// The PNG file's bytes, when drawn as PNG.
    pub png: Option<Vec<u8>>,
}

const STYLE: &str = "
body { font-family: sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
.meta { color: #666; margin-top: 0; }
.replay { background: #fff3cd; border: 2px solid #d39e00; padding: 0.7em 1em; margin: 1em 0; font-size: 1.05em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.regression td, tr.failed td, tr.wrong td, tr.timeout td { background: #fde2e1; }
tr.improvement td { background: #e3f4e1; }
.tag { background: #d39e00; color: #fff; border-radius: 3px; padding: 0 0.4em; font-size: 0.85em; white-space: nowrap; }
figure { margin: 1.5em 0; }
figure svg, figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { color: #555; font-size: 0.9em; margin-top: 0.4em; }
.notes li { color: #555; }
";

/// The whole page (pure).
pub fn page(data: &ReportData, figures: &[Figure]) -> String {
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.push_str("<title>gpudirect report</title>\n<style>");
    h.push_str(STYLE);
    h.push_str("</style>\n</head>\n<body>\n<h1>gpudirect report</h1>\n");
    let _ = write!(
        h,
        "<p class=\"meta\">Generated {} UTC",
        escape(&short_time(&data.generated_at))
    );
    if let Some(path) = &data.history {
        let _ = write!(h, " from the history <code>{}</code>", escape(path));
    }
    h.push_str(".</p>\n");
    if data.has_replays() {
        let _ = writeln!(
            h,
            "<div class=\"replay\"><strong>{REPLAY_LABEL}:</strong> runs marked \
             <span class=\"tag\">{REPLAY_LABEL}</span> were replayed by the nccl-tests \
             stand-in from recorded outputs. They show the tool at work; their numbers are \
             not a measurement of this cluster.</div>"
        );
    }
    verdict_table(&mut h, data);
    if !data.notes.is_empty() {
        h.push_str("<ul class=\"notes\">\n");
        for note in &data.notes {
            let _ = writeln!(h, "<li>{}</li>", escape(note));
        }
        h.push_str("</ul>\n");
    }
    for fig in figures {
        let _ = writeln!(
            h,
            "<section id=\"{}\">\n<h2>{}</h2>\n<figure>",
            fig.plot.file_stem(),
            escape(fig.plot.title())
        );
        if let Some(svg) = &fig.svg {
            h.push_str(strip_xml_declaration(svg));
            h.push('\n');
        } else if let Some(png) = &fig.png {
            let _ = writeln!(
                h,
                "<img alt=\"{}\" src=\"data:image/png;base64,{}\">",
                escape(fig.plot.title()),
                base64(png)
            );
        }
        let _ = writeln!(
            h,
            "<figcaption>{} Files: {}.</figcaption>\n</figure>\n</section>",
            escape(&caption(fig.plot, data)),
            files(fig)
        );
    }
    h.push_str("</body>\n</html>\n");
    h
}

fn files(fig: &Figure) -> String {
    let stem = fig.plot.file_stem();
    let mut names = Vec::new();
    if fig.svg.is_some() {
        names.push(format!("<a href=\"{stem}.svg\">{stem}.svg</a>"));
    }
    if fig.png.is_some() {
        names.push(format!("<a href=\"{stem}.png\">{stem}.png</a>"));
    }
    names.join(", ")
}

fn caption(plot: Plot, data: &ReportData) -> String {
    match plot {
        Plot::Busbw => format!(
            "One line per run (out-of-place busbw; gaps where a size has no number). Shaded \
             bands, tinted like the first run judged against them: the baseline, the \
             per-size median of the newest ok runs of the same cluster, collective, node \
             count, variant and data type (other runs when the history has them), ±{}%.",
            data.tolerance_pct
        ),
        Plot::HeatMap => "Each cell is the busbw measured between the node of its row and the \
             node of its column, coloured by its share of the 90th percentile pair. A row \
             that is red throughout is a slow node; a single red cell is a slow link."
            .to_string(),
        Plot::RailMap => "Each cell is the busbw the node of its row sent to its partners over \
             the data NIC (rail) of its column (gpudirect validate --test rails; the median of \
             its sends), coloured by its share of that rail's median, so that a slow or dead \
             NIC shows as a low or blank cell among its rail's. A rail slow on every node is \
             not a colour here: validate's verdicts compare the rails with each other."
            .to_string(),
        Plot::NodeTrend => format!(
            "busbw of each node's runs{}, oldest to newest; hollow circles are validation's \
             pair results. Red crosses: a run more than {}% below the median of that node's \
             previous {} runs.",
            data.trends
                .first()
                .and_then(|t| t.size_bytes)
                .filter(|s| data.trends.iter().all(|t| t.size_bytes == Some(*s)))
                .map(|s| format!(" at {}", human_size(s)))
                .unwrap_or_default(),
            data.tolerance_pct,
            super::DROP_WINDOW
        ),
    }
}

fn verdict_table(h: &mut String, data: &ReportData) {
    if data.runs.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Runs and verdicts</h2>\n<table>\n<tr><th>run</th><th>when (UTC)</th>\
        <th>collective</th><th>variant</th><th>nodes</th><th>status</th><th>size</th>\
        <th>busbw GB/s</th><th>of line rate</th><th>baseline GB/s</th><th>delta</th>\
        <th>verdict</th></tr>\n",
    );
    for (run, v) in data.runs.iter().zip(&data.verdicts) {
        let class = v.verdict.replace(' ', "-");
        let num = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}"));
        let _ = write!(
            h,
            "<tr class=\"{}\"><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td>{}",
            escape(&class),
            run.run_id,
            escape(&short_time(&run.at)),
            escape(&run.collective),
            escape(run.variant.as_deref().unwrap_or("-")),
            run.node_count.map_or("-".into(), |n| n.to_string()),
            escape(run.status.as_str()),
            v.size_bytes.map_or("-".into(), human_size),
            num(v.busbw),
            line_share(v.busbw, run.line_rate_gbps).unwrap_or_else(|| "-".into()),
            num(v.baseline),
            v.delta_pct.map_or("-".into(), |d| format!("{d:+.1}%")),
            escape(&v.verdict),
        );
        if let Some(recording) = &run.replay {
            let _ = write!(
                h,
                " <span class=\"tag\" title=\"replayed {}\">{REPLAY_LABEL}</span>",
                escape(recording)
            );
        }
        h.push_str("</td></tr>\n");
    }
    h.push_str("</table>\n");
    let _ = writeln!(
        h,
        "<p class=\"meta\">busbw at the largest size a run and its baseline share, and as a \
         share of the node's line rate where its profile declared one (line_rate_gbit); verdict \
         as <code>gpudirect compare RUN --baseline</code> gives it (earlier ok runs of its \
         kind, bandwidth-bound sizes decide), threshold ±{}%.</p>",
        data.tolerance_pct
    );
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// An SVG document as an element to inline: without a leading `<?xml ...?>` line.
fn strip_xml_declaration(svg: &str) -> &str {
    let s = svg.trim_start();
    match s
        .strip_prefix("<?xml")
        .and_then(|rest| rest.find("?>").map(|i| &rest[i + 2..]))
    {
        Some(rest) => rest.trim_start(),
        None => s,
    }
}

/// Standard base64 with padding (RFC 4648), for `data:` URLs.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * k)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, want) in cases {
            assert_eq!(base64(input.as_bytes()), want, "{input}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(escape("a<b & \"c\"'"), "a&lt;b &amp; &quot;c&quot;&#39;");
    }

    #[test]
    fn strips_only_the_declaration() {
        assert_eq!(
            strip_xml_declaration("<?xml version=\"1.0\"?>\n<svg/>"),
            "<svg/>"
        );
        assert_eq!(strip_xml_declaration("<svg/>"), "<svg/>");
    }
}
