//! Exporting result rows with their run's metadata, for spreadsheets and notebooks.
//!
//! One record per stored table row (per size, type, op, root and placement), newest run
//! first, rows in output order. CSV follows RFC 4180 (a field with a comma, quote, CR or
//! LF, or with spaces at either end, is quoted, quotes doubled; CRLF line ends are not
//! used: `\n` as every Unix tool expects). JSON is one object per line or one array.

use std::io::Write;
use std::str::FromStr;

use rusqlite::params_from_iter;
use rusqlite::types::Value;
use serde::Serialize;

use super::model::{LaunchKind, Placement, RunFilter, RunId, RunStatus};
use super::store::{filter_sql, History};
use super::HistoryError;
use crate::units::format_rfc3339;

/// Output format of [`History::export`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per line (JSON Lines).
    JsonLines,
    /// One JSON array of objects.
    JsonArray,
}

impl FromStr for ExportFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "csv" => Ok(ExportFormat::Csv),
            "jsonl" | "json-lines" | "ndjson" => Ok(ExportFormat::JsonLines),
            "json" => Ok(ExportFormat::JsonArray),
            _ => Err(format!(
                "unknown export format `{s}`: expected csv, json or jsonl"
            )),
        }
    }
}

/// One exported row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportRecord {
    /// Run id.
    pub run_id: RunId,
    /// Run time, RFC 3339 UTC.
    pub at: String,
    /// Cluster.
    pub cluster: Option<String>,
    /// Slurm job id.
    pub job_id: Option<String>,
    /// Compressed node list.
    pub nodelist: Option<String>,
    /// Node count.
    pub node_count: Option<u32>,
    /// GPUs per node.
    pub gpus_per_node: Option<u32>,
    /// Total ranks.
    pub total_ranks: Option<u32>,
    /// Collective.
    pub collective: String,
    /// Variant.
    pub variant: Option<String>,
    /// Launcher.
    pub launcher: LaunchKind,
    /// Run outcome.
    pub status: RunStatus,
    /// Detected transport.
    pub transport: Option<String>,
    /// nccl-tests version.
    pub nccl_tests_version: Option<String>,
    /// NCCL version.
    pub nccl_version: Option<String>,
    /// CUDA version.
    pub cuda_version: Option<String>,
    /// Size, bytes.
    pub size_bytes: i64,
    /// Element count.
    pub count: i64,
    /// Data type.
    pub dtype: String,
    /// Reduction op.
    pub redop: String,
    /// Root rank.
    pub root: Option<i64>,
    /// Placement.
    pub placement: Placement,
    /// Microseconds.
    pub time_us: Option<f64>,
    /// GB/s.
    pub algbw: Option<f64>,
    /// GB/s.
    pub busbw: Option<f64>,
    /// `#wrong`.
    pub wrong: Option<i64>,
}

/// CSV column names, in [`ExportRecord`] field order.
pub const CSV_HEADER: &[&str] = &[
    "run_id",
    "at",
    "cluster",
    "job_id",
    "nodelist",
    "node_count",
    "gpus_per_node",
    "total_ranks",
    "collective",
    "variant",
    "launcher",
    "status",
    "transport",
    "nccl_tests_version",
    "nccl_version",
    "cuda_version",
    "size_bytes",
    "count",
    "dtype",
    "redop",
    "root",
    "placement",
    "time_us",
    "algbw",
    "busbw",
    "wrong",
];

/// Quotes one CSV field when RFC 4180 (or a spreadsheet's trimming) needs it.
pub fn csv_field(value: &str) -> std::borrow::Cow<'_, str> {
    let needs =
        value.contains([',', '"', '\n', '\r']) || value.starts_with(' ') || value.ends_with(' ');
    if needs {
        format!("\"{}\"", value.replace('"', "\"\"")).into()
    } else {
        value.into()
    }
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or(String::new(), T::to_string)
}

impl ExportRecord {
    /// The record's fields as CSV text, in [`CSV_HEADER`] order (unquoted).
    pub fn csv_values(&self) -> Vec<String> {
        vec![
            self.run_id.to_string(),
            self.at.clone(),
            opt(&self.cluster),
            opt(&self.job_id),
            opt(&self.nodelist),
            opt(&self.node_count),
            opt(&self.gpus_per_node),
            opt(&self.total_ranks),
            self.collective.clone(),
            opt(&self.variant),
            self.launcher.to_string(),
            self.status.to_string(),
            opt(&self.transport),
            opt(&self.nccl_tests_version),
            opt(&self.nccl_version),
            opt(&self.cuda_version),
            self.size_bytes.to_string(),
            self.count.to_string(),
            self.dtype.clone(),
            self.redop.clone(),
            opt(&self.root),
            self.placement.to_string(),
            opt(&self.time_us),
            opt(&self.algbw),
            opt(&self.busbw),
            opt(&self.wrong),
        ]
    }
}

fn write_csv_line(out: &mut dyn Write, values: &[impl AsRef<str>]) -> std::io::Result<()> {
    let line: Vec<_> = values.iter().map(|v| csv_field(v.as_ref())).collect();
    writeln!(out, "{}", line.join(","))
}

impl History {
    /// Writes the rows of the runs matching `filter` (its `limit` counts runs, not rows)
    /// to `out`; returns how many records were written. Streams: memory use does not
    /// grow with the history.
    pub fn export(
        &self,
        filter: &RunFilter,
        format: ExportFormat,
        out: &mut dyn Write,
    ) -> Result<u64, HistoryError> {
        let (clause, mut values) = filter_sql(filter);
        values.push(Value::Integer(filter.limit.map_or(-1, i64::from)));
        let sql = format!(
            "WITH chosen AS (
                 SELECT runs.id, runs.at FROM runs WHERE {clause}
                 ORDER BY runs.at DESC, runs.id DESC LIMIT ?)
             SELECT r.id, r.at, r.cluster, r.job_id, r.nodelist, r.node_count, r.gpus_per_node,
                    r.total_ranks, r.collective, r.variant, r.launcher, r.status, r.transport,
                    r.nccl_tests_version, r.nccl_version, r.cuda_version,
                    x.size_bytes, x.count, x.dtype, x.redop, x.root, x.placement, x.time_us,
                    x.algbw, x.busbw, x.wrong
             FROM chosen c JOIN runs r ON r.id = c.id JOIN results x ON x.run_id = r.id
             ORDER BY c.at DESC, c.id DESC, x.seq"
        );
        let mut st = self.conn.prepare(&sql).map_err(self.err("exporting"))?;
        let mut rows = st
            .query(params_from_iter(values))
            .map_err(self.err("exporting"))?;
        if format == ExportFormat::Csv {
            write_csv_line(out, CSV_HEADER)?;
        }
        if format == ExportFormat::JsonArray {
            out.write_all(b"[")?;
        }
        let mut written = 0u64;
        while let Some(row) = rows.next().map_err(self.err("exporting"))? {
            let record = record_from_row(row).map_err(self.err("exporting"))?;
            match format {
                ExportFormat::Csv => write_csv_line(out, &record.csv_values())?,
                ExportFormat::JsonLines => {
                    serde_json::to_writer(&mut *out, &record)?;
                    out.write_all(b"\n")?;
                }
                ExportFormat::JsonArray => {
                    out.write_all(if written == 0 { b"\n" } else { b",\n" })?;
                    serde_json::to_writer(&mut *out, &record)?;
                }
            }
            written += 1;
        }
        if format == ExportFormat::JsonArray {
            out.write_all(b"\n]\n")?;
        }
        out.flush()?;
        Ok(written)
    }
}

fn record_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ExportRecord> {
    let text_enum = |idx: usize| -> rusqlite::Result<String> { r.get(idx) };
    let parse = |idx: usize, text: String| -> rusqlite::Error {
        rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, text.into())
    };
    Ok(ExportRecord {
        run_id: r.get(0)?,
        at: format_rfc3339(r.get(1)?),
        cluster: r.get(2)?,
        job_id: r.get(3)?,
        nodelist: r.get(4)?,
        node_count: r.get(5)?,
        gpus_per_node: r.get(6)?,
        total_ranks: r.get(7)?,
        collective: r.get(8)?,
        variant: r.get(9)?,
        launcher: text_enum(10)?.parse().map_err(|e| parse(10, e))?,
        status: text_enum(11)?.parse().map_err(|e| parse(11, e))?,
        transport: r.get(12)?,
        nccl_tests_version: r.get(13)?,
        nccl_version: r.get(14)?,
        cuda_version: r.get(15)?,
        size_bytes: r.get(16)?,
        count: r.get(17)?,
        dtype: r.get(18)?,
        redop: r.get(19)?,
        root: r.get(20)?,
        placement: text_enum(21)?.parse().map_err(|e| parse(21, e))?,
        time_us: r.get(22)?,
        algbw: r.get(23)?,
        busbw: r.get(24)?,
        wrong: r.get(25)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quoting() {
        assert_eq!(csv_field("all_reduce"), "all_reduce");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv_field(" padded"), "\" padded\"");
        assert_eq!(csv_field(""), "");
    }

    #[test]
    fn format_names() {
        assert_eq!("csv".parse::<ExportFormat>(), Ok(ExportFormat::Csv));
        assert_eq!("jsonl".parse::<ExportFormat>(), Ok(ExportFormat::JsonLines));
        assert_eq!("json".parse::<ExportFormat>(), Ok(ExportFormat::JsonArray));
        assert!("xml".parse::<ExportFormat>().unwrap_err().contains("csv"));
    }
}
