//! Exporting result rows with their run's metadata, for spreadsheets and notebooks.
//!
//! One record per stored table row (per size, type, op, root and placement), newest run
//! first, rows in output order. CSV (through the `csv` crate: [`write_csv_record`]) follows
//! RFC 4180 (a field with a comma, quote, CR or LF is quoted, quotes doubled; CRLF line
//! ends are not used: `\n` as every Unix tool expects), with a header line named after
//! [`ExportRecord`]'s fields. JSON is one object per line or one array.

use std::io::Write;
use std::str::FromStr;

use rusqlite::params_from_iter;
use rusqlite::types::Value;
use serde::Serialize;

use super::model::{LaunchKind, ResultRow, RunFilter, RunId, RunStatus};
use super::store::{
    filter_sql, result_row_from, summary_columns, summary_from_row, Columns, History,
    RESULT_COLUMNS,
};
use super::HistoryError;

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

/// One exported row: its run's columns, the table row itself (the history's
/// [`ResultRow`], the same fields `gpudirect show --json` gives), and last the replay
/// marking, so that an export never passes a stand-in's replay off as a measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportRecord {
    /// The run's columns.
    #[serde(flatten)]
    pub run: ExportRun,
    /// The table row.
    #[serde(flatten)]
    pub row: ResultRow,
    /// The last column.
    #[serde(flatten)]
    pub replay: ReplayMark,
}

/// The run's columns of an [`ExportRecord`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ExportRun {
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
}

/// The replay marking of an [`ExportRecord`] (its own struct: csv cannot write a flattened
/// struct, so a CSV line is the tuple of the three parts).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplayMark {
    /// The recording replayed, when the run came from the nccl-tests stand-in
    /// ([`super::RunSummary::replay_of`]).
    pub replay_of: Option<String>,
}

impl ExportRecord {
    /// A record with every field empty or zero. Only its field names matter: csv takes a
    /// header's column names from a value, and an export with no rows still has a header.
    pub fn blank() -> ExportRecord {
        ExportRecord {
            run: ExportRun::default(),
            row: ResultRow::default(),
            replay: ReplayMark::default(),
        }
    }

    /// The record as csv writes it: a tuple of its parts (csv cannot write a flattened
    /// struct).
    pub fn csv(&self) -> (&ExportRun, &ResultRow, &ReplayMark) {
        (&self.run, &self.row, &self.replay)
    }
}

/// Writes the CSV header line of records shaped like `sample`: their field names, in
/// order (csv names columns only from a value; see [`ExportRecord::blank`]).
///
/// A record is any `Serialize` struct, or a tuple of structs for extra columns, so the
/// header cannot drift from the fields.
pub fn write_csv_header(out: &mut dyn Write, sample: &impl Serialize) -> std::io::Result<()> {
    let mut probe = csv::Writer::from_writer(Vec::new());
    probe.serialize(sample)?;
    let text = probe.into_inner().map_err(|e| e.into_error())?;
    // Field names are identifiers, never quoted: the header ends at the first newline.
    let end = text
        .iter()
        .position(|&b| b == b'\n')
        .map_or(text.len(), |i| i + 1);
    out.write_all(&text[..end])
}

/// Writes one record as one CSV line, through the `csv` crate: a field with a comma,
/// quote, CR or LF is quoted and its quotes doubled (RFC 4180); `None` and an empty string
/// are both an empty field; numbers are as serde gives them (floats through `ryu`, as in
/// the JSON export: `0.0`, `343.09`).
pub fn write_csv_record(out: &mut dyn Write, record: &impl Serialize) -> std::io::Result<()> {
    // A writer per record: csv's writer owns its stream, and `out` is shared with the
    // callers' other formats. It costs one 8 KiB buffer, small next to reading the row.
    let mut wtr = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(out);
    wtr.serialize(record).map_err(|e| {
        if !e.is_io_error() {
            return std::io::Error::other(e);
        }
        // The stream's own error as it was (a closed pipe stays a closed pipe).
        match e.into_kind() {
            csv::ErrorKind::Io(io) => io,
            other => std::io::Error::other(format!("{other:?}")),
        }
    })?;
    wtr.flush()
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
        // The runs' columns are the listing's own (`summary_columns`, read by
        // `summary_from_row`), taken once per run (MATERIALIZED: its per-run subqueries are
        // not repeated for each of the run's rows), then the versions only the export has.
        let columns = summary_columns();
        let sql = format!(
            "WITH chosen AS MATERIALIZED (
                 SELECT {columns}, runs.nccl_tests_version, runs.nccl_version, runs.cuda_version
                 FROM runs WHERE {clause} ORDER BY runs.at DESC, runs.id DESC LIMIT ?)
             SELECT chosen.*, {RESULT_COLUMNS}
             FROM chosen JOIN results x ON x.run_id = chosen.id
             ORDER BY chosen.at DESC, chosen.id DESC, x.seq"
        );
        let mut st = self.conn.prepare(&sql).map_err(self.err("exporting"))?;
        let mut rows = st
            .query(params_from_iter(values))
            .map_err(self.err("exporting"))?;
        let mut writer = RecordWriter::start(out, format)?;
        let mut run = None;
        while let Some(row) = rows.next().map_err(self.err("exporting"))? {
            let record = record_from_row(row, &mut run).map_err(self.err("exporting"))?;
            writer.write(&record)?;
        }
        Ok(writer.finish()?)
    }
}

/// A stream of [`ExportRecord`]s in one [`ExportFormat`]: the CSV header line, or the JSON
/// array's brackets and commas, around the records ([`History::export`]'s).
pub struct RecordWriter<'a> {
    out: &'a mut dyn Write,
    format: ExportFormat,
    written: u64,
}

impl<'a> RecordWriter<'a> {
    /// Starts the stream: the CSV header (see [`write_csv_header`]), or the JSON array's `[`.
    pub fn start(out: &'a mut dyn Write, format: ExportFormat) -> std::io::Result<Self> {
        match format {
            ExportFormat::Csv => write_csv_header(out, &ExportRecord::blank().csv())?,
            ExportFormat::JsonArray => out.write_all(b"[")?,
            ExportFormat::JsonLines => {}
        }
        Ok(RecordWriter {
            out,
            format,
            written: 0,
        })
    }

    /// Writes one record: as a CSV line ([`ExportRecord::csv`]: csv cannot write a
    /// flattened struct), else as one JSON object.
    pub fn write(&mut self, record: &ExportRecord) -> std::io::Result<()> {
        let out = &mut *self.out;
        match self.format {
            ExportFormat::Csv => write_csv_record(out, &record.csv())?,
            ExportFormat::JsonLines => {
                serde_json::to_writer(&mut *out, record)?;
                out.write_all(b"\n")?;
            }
            ExportFormat::JsonArray => {
                out.write_all(if self.written == 0 { b"\n" } else { b",\n" })?;
                serde_json::to_writer(&mut *out, record)?;
            }
        }
        self.written += 1;
        Ok(())
    }

    /// Ends the stream (the JSON array's `]`) and flushes it; returns how many records
    /// were written.
    pub fn finish(self) -> std::io::Result<u64> {
        if self.format == ExportFormat::JsonArray {
            self.out.write_all(b"\n]\n")?;
        }
        self.out.flush()?;
        Ok(self.written)
    }
}

/// The run's part of its records: read from the first of its rows, and kept while the
/// rest come (a run's rows come together), so that each row reads only its own columns.
struct RunPart {
    run: ExportRun,
    replay: ReplayMark,
    /// Where the row's [`RESULT_COLUMNS`] start.
    rows_from: usize,
}

/// The run part of the export query's row: the listing's run columns and the three
/// versions.
fn run_part(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunPart> {
    let c = &mut Columns::new(r);
    let run = summary_from_row(c)?;
    Ok(RunPart {
        run: ExportRun {
            run_id: run.id,
            at: run.at,
            cluster: run.cluster,
            job_id: run.job_id,
            nodelist: run.nodelist,
            node_count: run.node_count,
            gpus_per_node: run.gpus_per_node,
            total_ranks: run.total_ranks,
            collective: run.collective,
            variant: run.variant,
            launcher: run.launcher,
            status: run.status,
            transport: run.transport,
            nccl_tests_version: c.get()?,
            nccl_version: c.get()?,
            cuda_version: c.get()?,
        },
        replay: ReplayMark {
            replay_of: run.replay_of,
        },
        rows_from: c.position(),
    })
}

/// One record of the export's query; `last` is the run part of the previous one.
fn record_from_row(
    r: &rusqlite::Row<'_>,
    last: &mut Option<RunPart>,
) -> rusqlite::Result<ExportRecord> {
    let id: RunId = r.get(0)?;
    let part = match last.take() {
        Some(part) if part.run.run_id == id => part,
        _ => run_part(r)?,
    };
    let record = ExportRecord {
        run: part.run.clone(),
        replay: part.replay.clone(),
        row: result_row_from(&mut Columns::starting_at(r, part.rows_from))?,
    };
    *last = Some(part);
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Placement;

    const HEADER: &str = "run_id,at,cluster,job_id,nodelist,node_count,gpus_per_node,\
        total_ranks,collective,variant,launcher,status,transport,nccl_tests_version,\
        nccl_version,cuda_version,size_bytes,count,dtype,redop,root,placement,time_us,algbw,\
        busbw,wrong,algorithm,protocol,replay_of";

    fn odd_record() -> ExportRecord {
        ExportRecord {
            run: ExportRun {
                run_id: 7,
                at: "2026-11-30T04:53:20Z".into(),
                cluster: Some("lab, \"east\"".into()),
                // An empty string and None are the same empty field.
                job_id: Some(String::new()),
                nodelist: Some("two\nlines".into()),
                node_count: Some(2),
                collective: "all_reduce".into(),
                // RFC 4180 keeps spaces as part of the field: no quotes needed.
                variant: Some(" padded ".into()),
                transport: Some("cr\rhere".into()),
                ..ExportRun::default()
            },
            row: ResultRow {
                size_bytes: 8,
                count: 2,
                dtype: "float".into(),
                redop: "sum".into(),
                root: Some(-1),
                placement: Placement::In,
                time_us: Some(28.78),
                algbw: Some(0.0),
                busbw: Some(343.09),
                wrong: Some(0),
                algorithm: Some("RING".into()),
                protocol: None,
            },
            replay: ReplayMark {
                replay_of: Some("h200x2-nvlink/all_reduce_g2.txt".into()),
            },
        }
    }

    #[test]
    fn csv_header_quoting_and_empty_fields() {
        let mut out = Vec::new();
        write_csv_header(&mut out, &ExportRecord::blank().csv()).unwrap();
        write_csv_record(&mut out, &odd_record().csv()).unwrap();
        write_csv_record(&mut out, &ExportRecord::blank().csv()).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "{HEADER}\n\
                 7,2026-11-30T04:53:20Z,\"lab, \"\"east\"\"\",,\"two\nlines\",2,,,all_reduce, padded ,\
                 import,ok,\"cr\rhere\",,,,8,2,float,sum,-1,in,28.78,0.0,343.09,0,RING,,\
                 h200x2-nvlink/all_reduce_g2.txt\n\
                 0,,,,,,,,,,import,ok,,,,,0,0,,,,out,,,,,,,\n"
            )
        );
    }

    #[test]
    fn json_and_csv_name_the_same_columns() {
        let mut csv = Vec::new();
        write_csv_header(&mut csv, &ExportRecord::blank().csv()).unwrap();
        let json = serde_json::to_value(odd_record()).unwrap();
        let keys: std::collections::BTreeSet<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, HEADER.split(',').collect());
        assert_eq!(String::from_utf8(csv).unwrap(), format!("{HEADER}\n"));
    }

    #[test]
    fn format_names() {
        assert_eq!("csv".parse::<ExportFormat>(), Ok(ExportFormat::Csv));
        assert_eq!("jsonl".parse::<ExportFormat>(), Ok(ExportFormat::JsonLines));
        assert_eq!("json".parse::<ExportFormat>(), Ok(ExportFormat::JsonArray));
        assert!("xml".parse::<ExportFormat>().unwrap_err().contains("csv"));
    }
}
