//! The nccl-tests output parser (`nccl_output::parse`, the `nccl-output` crate): text tables
//! of every version, `-J` JSON (whole or truncated), with NCCL debug and launcher lines mixed
//! in.
//!
//! Invariants (the parser's documented promises, checked cheaply):
//! - never panics, whatever the bytes;
//! - the form is sniffed as documented: JSON when the first non-blank byte after any BOM
//!   is `{`, nothing for blank input, else text;
//! - every row's size (and count) is a number that was in the input: its decimal digits
//!   appear in the text (JSON may also write it with an exponent or `\u` escapes, where
//!   this check is skipped);
//! - text rows and diagnostics point at a line of the input, and a text row at a table
//!   header printed before it; JSON rows have line 0;
//! - measured times and bandwidths are finite (`nan` and `N/A` read as none, infinities are
//!   refused), and the result serializes to JSON (the history stores it that way);
//! - the derived queries (ranks, transport, busbw re-check, algorithms per size, ...) do
//!   not panic, nor does the import path's inference (`parse_headerless`), whose
//!   unanswered inferences name the option to pass.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nccl_output::{parse, parse_headerless, ParseOptions, Placement, SourceFormat};

fn finite(p: &Placement) -> bool {
    [p.time_us, p.algbw_gbps, p.busbw_gbps, p.max_error]
        .into_iter()
        .flatten()
        .all(f64::is_finite)
}

/// Whether JSON text may write a number without its decimal digits (`1e3`, `"\u0038"`).
fn json_may_rewrite_numbers(text: &str) -> bool {
    text.contains("\\u")
        || text
            .as_bytes()
            .windows(2)
            .any(|w| (w[0].is_ascii_digit() || w[0] == b'.') && matches!(w[1], b'e' | b'E'))
}

fuzz_target!(|data: &[u8]| {
    let out = parse(data);

    let text = String::from_utf8_lossy(data);
    let body = text.trim_start_matches('\u{feff}');
    let want = if body.trim_start().starts_with('{') {
        Some(SourceFormat::Json)
    } else if body.trim().is_empty() {
        None
    } else {
        Some(SourceFormat::Text)
    };
    assert_eq!(out.format, want, "form sniffed wrongly");

    let lines = body.matches('\n').count() + 1;
    let check_digits = match out.format {
        Some(SourceFormat::Json) => !json_may_rewrite_numbers(body),
        _ => true,
    };
    for row in &out.rows {
        if check_digits {
            let size = row.size_bytes.to_string();
            assert!(body.contains(&size), "row size {size} is not in the input");
            if let Some(count) = row.count {
                assert!(
                    body.contains(&count.to_string()),
                    "row count {count} is not in the input"
                );
            }
        }
        match out.format {
            Some(SourceFormat::Text) => {
                assert!(
                    row.line >= 1 && row.line <= lines,
                    "row line {} of {lines}",
                    row.line
                );
                let header = out.tables.get(row.table);
                assert!(
                    header.is_some_and(|h| h.line < row.line),
                    "row at line {} belongs to table {} of {:?}",
                    row.line,
                    row.table,
                    out.tables.iter().map(|t| t.line).collect::<Vec<_>>()
                );
            }
            _ => assert_eq!(row.line, 0, "a JSON row with a line number"),
        }
        for p in [&row.out_of_place, &row.in_place].into_iter().flatten() {
            assert!(finite(p), "non-finite measurement in {p:?}");
        }
    }
    for d in &out.diagnostics {
        assert!(
            d.line <= lines,
            "diagnostic at line {} of {lines}: {}",
            d.line,
            d.reason
        );
    }
    if let Some(avg) = &out.avg_busbw {
        assert!(
            avg.value.is_none_or(f64::is_finite),
            "average busbw {:?}",
            avg.value
        );
        assert!(avg.line <= lines);
    }

    // The derived queries the launcher runs on every output.
    let _ = out.nranks();
    let _ = out.network_transport();
    let _ = out.transport_match("IB");
    let _ = out.transport_match("GPUDirectTCPX");
    let _ = out.busbw_mismatches();
    let _ = out.wrong_rows().count();
    let _ = out.completed();
    let _ = out.ran_alone_evidence();
    for row in &out.rows {
        let _ = out.tuning_for(row.size_bytes);
    }
    assert!(out.busbw_at_max_size().is_none() || !out.rows.is_empty());
    // The import path: a bare table's collective and rank count inferred from its rows.
    // An inferred value is one the rows fit; a given rank count is never overridden.
    let bare = parse_headerless(data, &ParseOptions::default(), None);
    for i in &bare.inferences {
        assert!(
            i.value.is_some() || i.basis.contains("--"),
            "an inference without a value names no option: {}",
            i.basis
        );
    }
    if bare.inferred_ranks.is_some() {
        assert!(
            bare.given_ranks.is_none(),
            "inferred over a given rank count"
        );
    }
    if let Err(e) = serde_json::to_string(&out) {
        panic!("the parsed output does not serialize: {e}");
    }
});
