//! `gpudirect vet`'s rows: one per vet of a job's nodes ([`History::record_vet`]), listed
//! newest first by `gpudirect history --vets` ([`History::list_vets`]).

use rusqlite::params;
use serde::Serialize;

use super::error::HistoryError;
use super::store::{Columns, History};

/// What a vet found and decided: recorded with its report ([`NewVet`]) and listed back
/// ([`VetSummary`]), declared once for both.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VetFacts {
    /// When it ran, unix seconds.
    pub at: i64,
    /// The cluster.
    pub cluster: Option<String>,
    /// The job whose nodes it vetted.
    pub job_id: Option<String>,
    /// `nccl` or `rails`.
    pub test: String,
    /// Nodes the job held.
    pub allocated: usize,
    /// Good nodes.
    pub good: usize,
    /// Bad nodes.
    pub bad: usize,
    /// Nodes it could not judge within its budget.
    pub unchecked: usize,
    /// Good nodes the job needed.
    pub need: usize,
    /// What it decided (`all_good`, `go_on`, `shrink`, `requeue`, `too_few`).
    pub decision: String,
    /// The good nodes, as a hostlist.
    pub good_nodes: String,
    /// The bad nodes, as a hostlist.
    pub bad_nodes: String,
}

/// The columns of [`VetFacts`], in the order [`VetFacts::read`] reads them.
const FACT_COLUMNS: &str =
    "at, cluster, job_id, test, allocated, good, bad, unchecked, need, decision, good_nodes, bad_nodes";

impl VetFacts {
    /// The facts of a query's [`FACT_COLUMNS`], read from where `c` stands.
    fn read(c: &mut Columns<'_, '_>) -> rusqlite::Result<VetFacts> {
        Ok(VetFacts {
            at: c.get()?,
            cluster: c.get()?,
            job_id: c.get()?,
            test: c.get()?,
            allocated: c.get()?,
            good: c.get()?,
            bad: c.get()?,
            unchecked: c.get()?,
            need: c.get()?,
            decision: c.get()?,
            good_nodes: c.get()?,
            bad_nodes: c.get()?,
        })
    }
}

/// A vet to record.
#[derive(Debug, Clone)]
pub struct NewVet {
    /// What it found and decided.
    pub facts: VetFacts,
    /// The whole report.
    pub report_json: String,
}

/// A recorded vet, as `history --vets` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VetSummary {
    /// Its id.
    pub id: i64,
    /// What it found and decided.
    #[serde(flatten)]
    pub facts: VetFacts,
}

impl History {
    /// Records a vet; returns its id.
    pub fn record_vet(&mut self, vet: &NewVet) -> Result<i64, HistoryError> {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let f = &vet.facts;
        self.conn
            .execute(
                &format!(
                    "INSERT INTO vets ({FACT_COLUMNS}, report_json) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
                ),
                params![
                    f.at,
                    f.cluster,
                    f.job_id,
                    f.test,
                    count(f.allocated),
                    count(f.good),
                    count(f.bad),
                    count(f.unchecked),
                    count(f.need),
                    f.decision,
                    f.good_nodes,
                    f.bad_nodes,
                    vet.report_json,
                ],
            )
            .map_err(self.err("recording a vet"))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The newest `limit` vets (all without one), newest first.
    pub fn list_vets(&self, limit: Option<u32>) -> Result<Vec<VetSummary>, HistoryError> {
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT id, {FACT_COLUMNS} FROM vets ORDER BY at DESC, id DESC LIMIT ?1"
            ))
            .map_err(self.err("listing vets"))?;
        let rows = st
            .query_map(params![limit.map_or(-1, i64::from)], |r| {
                let c = &mut Columns::new(r);
                Ok(VetSummary {
                    id: c.get()?,
                    facts: VetFacts::read(c)?,
                })
            })
            .map_err(self.err("listing vets"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.err("listing vets"))
    }

    /// The report of vet `id`, as recorded (JSON).
    pub fn vet_report(&self, id: i64) -> Result<Option<String>, HistoryError> {
        let mut st = self
            .conn
            .prepare("SELECT report_json FROM vets WHERE id = ?1")
            .map_err(self.err("reading a vet"))?;
        let mut rows = st
            .query_map(params![id], |r| r.get(0))
            .map_err(self.err("reading a vet"))?;
        rows.next().transpose().map_err(self.err("reading a vet"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vet_is_recorded_and_listed_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::open(&dir.path().join("h.db")).unwrap();
        let vet = |at: i64, bad: &str| NewVet {
            facts: VetFacts {
                at,
                cluster: Some("c".into()),
                job_id: Some("7".into()),
                test: "rails".into(),
                allocated: 6,
                good: 5,
                bad: 1,
                unchecked: 0,
                need: 5,
                decision: "go_on".into(),
                good_nodes: "node[1-2,4-6]".into(),
                bad_nodes: bad.into(),
            },
            report_json: "{}".into(),
        };
        let first = h.record_vet(&vet(100, "node3")).unwrap();
        let second = h.record_vet(&vet(200, "node4")).unwrap();
        let listed = h.list_vets(None).unwrap();
        assert_eq!(
            listed.iter().map(|v| v.id).collect::<Vec<_>>(),
            [second, first]
        );
        assert_eq!(listed[1].facts.bad_nodes, "node3");
        assert_eq!(listed[1].facts, vet(100, "node3").facts);
        assert_eq!(h.list_vets(Some(1)).unwrap().len(), 1);
        assert_eq!(h.vet_report(first).unwrap().as_deref(), Some("{}"));
        assert_eq!(h.vet_report(999).unwrap(), None);
    }
}
