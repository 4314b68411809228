//! The embedded store: one SQLite file (WAL) under `store.path` holding node state, the
//! trust record and the event history. A change and the events it caused are written in
//! one transaction, so a crash leaves neither without the other.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

use crate::core::{Event, Fleet, Node, Outcome, Time, Trust};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: cannot create the directory: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("store: {op}: {source}")]
    Sqlite {
        op: &'static str,
        source: rusqlite::Error,
    },
    #[error("store: node {node} has an unreadable record: {source}")]
    Corrupt {
        node: String,
        source: serde_json::Error,
    },
}

impl StoreError {
    /// Low-cardinality label for failure counters.
    pub fn metric_label(&self) -> &'static str {
        match self {
            StoreError::Create { .. } => "create",
            StoreError::Sqlite { .. } => "sqlite",
            StoreError::Corrupt { .. } => "corrupt",
        }
    }
}

trait Op<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> Op<T> for rusqlite::Result<T> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|source| StoreError::Sqlite { op, source })
    }
}

/// Everything one step asks the store to write, serialised while the fleet was locked.
#[derive(Debug, Default)]
pub struct Batch {
    /// (node id, JSON record) for every node whose evidence changed.
    pub nodes: Vec<(String, String)>,
    /// Report and heartbeat times of nodes that only reported: a small row each, so a
    /// steady poll of a large fleet does not rewrite every node record.
    pub liveness: Vec<Liveness>,
    pub removed: Vec<String>,
    pub events: Vec<Event>,
    /// JSON of the trust record.
    pub trust: String,
}

impl Batch {
    /// The writes `outcome` calls for, read from `fleet` after the step.
    pub fn of(fleet: &Fleet, outcome: &Outcome) -> Batch {
        let nodes = outcome
            .dirty
            .iter()
            .filter_map(|id| fleet.nodes.get(id))
            .map(|n| {
                (
                    n.id.clone(),
                    serde_json::to_string(n).expect("nodes serialise"),
                )
            })
            .collect();
        let liveness = outcome
            .touched
            .iter()
            .filter(|id| !outcome.dirty.contains(*id))
            .filter_map(|id| fleet.nodes.get(id))
            .map(|n| Liveness {
                id: n.id.clone(),
                last_report: n.last_report.map(|t| t.timestamp_millis()),
                last_heartbeat: n.heartbeat.as_ref().map(|h| h.last.timestamp_millis()),
            })
            .collect();
        Batch {
            nodes,
            liveness,
            removed: outcome.removed.clone(),
            events: outcome.events.clone(),
            trust: serde_json::to_string(&fleet.trust).expect("trust serialises"),
        }
    }
}

/// The times a report moves, in unix milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Liveness {
    pub id: String,
    pub last_report: Option<i64>,
    pub last_heartbeat: Option<i64>,
}

pub struct Store {
    conn: Connection,
    file: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS nodes (
    id   TEXT PRIMARY KEY,
    body TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS liveness (
    id             TEXT PRIMARY KEY,
    last_report    INTEGER,
    last_heartbeat INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id     TEXT NOT NULL,
    type        TEXT NOT NULL,
    occurred_at INTEGER NOT NULL,
    body        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_node ON events (node_id, seq);
";

impl Store {
    /// Open (creating if needed) `dir/hale.db`.
    pub fn open(dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Create {
            path: dir.to_path_buf(),
            source,
        })?;
        let file = dir.join("hale.db");
        let conn = Connection::open(&file).op("open")?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .op("enable WAL")?;
        // WAL + NORMAL: a committed transaction survives a process crash (kill -9);
        // only an OS crash may lose the last commits, never corrupt the file.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .op("set synchronous")?;
        conn.pragma_update(None, "busy_timeout", 5000)
            .op("set busy timeout")?;
        conn.execute_batch(SCHEMA).op("create schema")?;
        Ok(Store { conn, file })
    }

    /// The fleet as last written, watching from `now`.
    pub fn load(&self, now: Time) -> Result<Fleet> {
        let mut fleet = Fleet::new(now);
        let mut stmt = self
            .conn
            .prepare("SELECT id, body FROM nodes")
            .op("read nodes")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .op("read nodes")?;
        for row in rows {
            let (id, body) = row.op("read nodes")?;
            let node: Node = serde_json::from_str(&body).map_err(|source| StoreError::Corrupt {
                node: id.clone(),
                source,
            })?;
            fleet.nodes.insert(id, node);
        }
        let mut stmt = self
            .conn
            .prepare("SELECT id, last_report, last_heartbeat FROM liveness")
            .op("read liveness")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                ))
            })
            .op("read liveness")?;
        for row in rows {
            let (id, report, heartbeat) = row.op("read liveness")?;
            let Some(node) = fleet.nodes.get_mut(&id) else {
                continue;
            };
            let later = |stored: Option<Time>, row: Option<i64>| {
                let row = row.and_then(chrono::DateTime::from_timestamp_millis);
                stored.max(row)
            };
            node.last_report = later(node.last_report, report);
            if let Some(h) = node.heartbeat.as_mut() {
                h.last = later(Some(h.last), heartbeat).unwrap_or(h.last);
            }
        }
        let trust: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'trust'", [], |r| {
                r.get(0)
            })
            .optional()
            .op("read trust")?;
        if let Some(Ok(trust)) = trust.map(|t| serde_json::from_str::<Trust>(&t)) {
            fleet.trust = Trust {
                watching_since: now,
                ..trust
            };
        }
        Ok(fleet)
    }

    /// Write one batch atomically.
    pub fn write(&mut self, batch: &Batch) -> Result<()> {
        let tx = self.conn.transaction().op("begin")?;
        {
            let mut put = tx
                .prepare_cached("INSERT OR REPLACE INTO nodes (id, body) VALUES (?1, ?2)")
                .op("prepare node write")?;
            for (id, body) in &batch.nodes {
                put.execute(params![id, body]).op("write node")?;
            }
            let mut live = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO liveness (id, last_report, last_heartbeat) VALUES (?1, ?2, ?3)",
                )
                .op("prepare liveness write")?;
            for l in &batch.liveness {
                live.execute(params![l.id, l.last_report, l.last_heartbeat])
                    .op("write liveness")?;
            }
            let mut del = tx
                .prepare_cached("DELETE FROM nodes WHERE id = ?1")
                .op("prepare node delete")?;
            let mut del_live = tx
                .prepare_cached("DELETE FROM liveness WHERE id = ?1")
                .op("prepare liveness delete")?;
            for id in &batch.removed {
                del.execute(params![id]).op("delete node")?;
                del_live.execute(params![id]).op("delete liveness")?;
            }
            let mut add = tx
                .prepare_cached(
                    "INSERT INTO events (node_id, type, occurred_at, body) VALUES (?1, ?2, ?3, ?4)",
                )
                .op("prepare event write")?;
            for e in &batch.events {
                let body = serde_json::to_string(e).expect("events serialise");
                add.execute(params![
                    e.node_id,
                    e.kind.name(),
                    e.occurred_at.timestamp_millis(),
                    body
                ])
                .op("write event")?;
            }
            tx.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('trust', ?1)",
                params![batch.trust],
            )
            .op("write trust")?;
        }
        tx.commit().op("commit")
    }

    /// Events of one node, oldest first.
    pub fn events(&self, node_id: &str) -> Result<Vec<Event>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT body FROM events WHERE node_id = ?1 ORDER BY seq")
            .op("read events")?;
        let rows = stmt
            .query_map(params![node_id], |r| r.get::<_, String>(0))
            .op("read events")?;
        let mut out = Vec::new();
        for body in rows {
            let body = body.op("read events")?;
            out.push(
                serde_json::from_str(&body).map_err(|source| StoreError::Corrupt {
                    node: node_id.into(),
                    source,
                })?,
            );
        }
        Ok(out)
    }

    /// Bytes the store occupies on disk (database plus write-ahead log).
    pub fn bytes_used(&self) -> u64 {
        let size = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let wal = PathBuf::from(format!("{}-wal", self.file.display()));
        size(self.file.clone()) + size(wal)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::core::EventKind;

    #[test]
    fn a_batch_round_trips_and_removal_keeps_events() {
        let dir = tempfile::tempdir().unwrap();
        let now = Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        let mut fleet = Fleet::new(now);
        let mut node = Node::new("rack1/n:3");
        node.last_report = Some(now);
        fleet.nodes.insert(node.id.clone(), node);
        fleet.trust.last_trusted = Some(now);
        let event = Event {
            node_id: "rack1/n:3".into(),
            kind: EventKind::NodeDecommissioned {},
            occurred_at: now,
            message: "m".into(),
        };
        let outcome = Outcome {
            events: vec![event.clone()],
            dirty: BTreeSet::from(["rack1/n:3".to_string()]),
            ..Outcome::default()
        };
        let mut store = Store::open(dir.path()).unwrap();
        store.write(&Batch::of(&fleet, &outcome)).unwrap();
        drop(store);

        let store = Store::open(dir.path()).unwrap();
        let later = now + chrono::TimeDelta::hours(1);
        let loaded = store.load(later).unwrap();
        assert_eq!(loaded.nodes, fleet.nodes);
        assert_eq!(loaded.trust.last_trusted, Some(now));
        assert_eq!(loaded.trust.watching_since, later);
        assert_eq!(store.events("rack1/n:3").unwrap(), vec![event.clone()]);
        assert!(store.bytes_used() > 0);

        let mut store = store;
        let gone = Outcome {
            removed: vec!["rack1/n:3".into()],
            ..Outcome::default()
        };
        store.write(&Batch::of(&Fleet::new(now), &gone)).unwrap();
        assert!(store.load(now).unwrap().nodes.is_empty());
        assert_eq!(
            store.events("rack1/n:3").unwrap(),
            vec![event],
            "events outlive the node"
        );
    }
}
