//! The embedded store: one SQLite file (WAL) under `store.path`. A change and the
//! events it caused are written in one transaction.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, ToSql, params, params_from_iter};
use tokio::sync::Notify;

use super::{
    Batch, EventPage, EventQuery, Fetched, Fut, Opened, Result, Store, StoreError, StoredEvent,
};
use crate::Joined as _;
use crate::core::policy::Moves;
use crate::core::{Event, Fleet, Node, Time, Trust, spread};

trait Op<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> Op<T> for rusqlite::Result<T> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|cause| match cause.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => StoreError::DiskFull { op, cause },
            _ => StoreError::Sqlite { op, cause },
        })
    }
}

/// The database file inside the store directory.
pub const FILE: &str = "hale.db";

/// How long the writer's restart of a long log waits for the readers under way.
const READERS_WAIT: Duration = Duration::from_millis(250);

/// How long a statement waits for another connection's lock.
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// The size the write-ahead log's file is cut back to when it starts over, and
/// past which the writer makes it start over ([`Sqlite::checkpoint`]).
const LOG_LIMIT: i64 = 64 << 20;

/// Rows one statement inserts (a first poll of 10,000 nodes writes 41,000 events;
/// a poll every 5 minutes writes every reporting node's report time).
const ROWS: usize = 256;

/// `rows` inserted by `head` followed by `row` once for each: [`ROWS`] rows to a
/// statement, the rest one at a time, each row's values from `bind`. A statement's
/// fixed cost (its set-up, and the read and write of the sequence table that
/// AUTOINCREMENT makes) is paid once for many rows: a first poll's events went in a
/// tenth faster so.
fn insert_rows<'r, R, const N: usize>(
    tx: &rusqlite::Transaction<'_>,
    (head, row): (&str, &str),
    rows: &'r [R],
    what: &'static str,
    bind: impl Fn(&'r R) -> [&'r dyn ToSql; N],
) -> Result<()> {
    let sql = |rows: usize| format!("{head}{}", vec![row; rows].join(", "));
    let mut chunks = rows.chunks_exact(ROWS);
    if rows.len() >= ROWS {
        let mut many = tx.prepare_cached(&sql(ROWS)).op(what)?;
        for chunk in chunks.by_ref() {
            many.execute(params_from_iter(chunk.iter().flat_map(&bind)))
                .op(what)?;
        }
    }
    let mut one = tx.prepare_cached(&sql(1)).op(what)?;
    for r in chunks.remainder() {
        one.execute(params_from_iter(bind(r))).op(what)?;
    }
    Ok(())
}

/// Where each run of `hale serve` began numbering events, and the prefix its
/// events' ids carry: a store restored from a copy numbers again from where the
/// copy stopped, and its next run's prefix keeps those ids apart from the ones
/// the lost numbers were given before (which webhook receivers have seen, and
/// drop as repeats). A store kept before runs were told apart has one, from 0.
#[derive(Debug, Clone, Default, PartialEq)]
struct Epochs(Vec<(i64, String)>);

impl Epochs {
    /// `conn`'s, or its instance's alone where it has none yet (a store no
    /// `hale serve` of this version wrote: read as it is, even read-only).
    fn read(conn: &Connection, instance: &str) -> Result<Epochs> {
        let kept: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'epochs')",
                [],
                |r| r.get(0),
            )
            .op("read the event epochs")?;
        if !kept {
            return Ok(Epochs(vec![(0, instance.to_string())]));
        }
        let mut stmt = conn
            .prepare_cached("SELECT first_seq, instance FROM epochs ORDER BY first_seq")
            .op("read the event epochs")?;
        let mut epochs: Vec<(i64, String)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .op("read the event epochs")?
            .collect::<rusqlite::Result<_>>()
            .op("read the event epochs")?;
        if epochs.first().is_none_or(|(first, _)| *first > 0) {
            epochs.insert(0, (0, instance.to_string()));
        }
        Ok(Epochs(epochs))
    }

    /// The id of event `seq`.
    fn id(&self, seq: i64) -> String {
        let at = self.0.partition_point(|(first, _)| *first <= seq);
        let instance = at
            .checked_sub(1)
            .and_then(|i| self.0.get(i))
            .map_or("", |(_, i)| i.as_str());
        event_id(instance, seq)
    }
}

fn event_id(instance: &str, seq: i64) -> String {
    format!("{instance}-{seq}")
}

/// A store instance id: unique enough to tell two stores' event ids apart.
fn new_instance_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in nanos
        .to_le_bytes()
        .into_iter()
        .chain(std::process::id().to_le_bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:08x}", h as u32)
}

pub struct Sqlite {
    conn: Connection,
    file: PathBuf,
    /// Distinguishes this store's event ids from another's (a wiped or new store).
    instance: String,
    /// The prefixes of its events' ids, by where each run began.
    epochs: Epochs,
    /// The store directory's lock, held by `hale serve`'s writer while it lives
    /// ([`Sqlite::open_pair`]); the OS lets it go when the process ends, however.
    held: Option<File>,
    /// Whose the lock is, as written into it.
    held_by: String,
    /// The file opened (device and inode), to tell one removed or replaced since.
    opened: Option<(u64, u64)>,
    /// The log has grown past [`LOG_LIMIT`]: the writer makes it start over after
    /// its next commit. Shared by the pair [`Sqlite::open_pair`] opens.
    log_long: Arc<AtomicBool>,
    /// Past this many frames the log is long.
    log_frames: i64,
}

/// The device and inode of the file at `path`, if there is one.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Where each run of `hale serve` began numbering events ([`Epochs`]): made by
/// the first run that numbers its own, so a store only read stays as it was.
const EPOCHS: &str = "CREATE TABLE IF NOT EXISTS epochs (
    first_seq INTEGER PRIMARY KEY,
    instance  TEXT NOT NULL
) WITHOUT ROWID";

/// The file `hale serve` locks in the store directory, holding its process id.
pub const LOCK: &str = "hale.lock";

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
CREATE TABLE IF NOT EXISTS restarts (
    owner TEXT PRIMARY KEY,
    count INTEGER NOT NULL,
    last  INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS events_by_node ON events (node_id, seq);
CREATE INDEX IF NOT EXISTS events_by_time ON events (occurred_at);
";

impl Sqlite {
    /// Open (creating if needed) `dir/hale.db`.
    pub fn open(dir: &Path) -> Result<Sqlite> {
        std::fs::create_dir_all(dir).map_err(|cause| StoreError::Create {
            path: dir.to_path_buf(),
            cause,
        })?;
        let file = dir.join(FILE);
        let conn = Connection::open(&file).op("open")?;
        // Larger pages for a new store: a first poll of 100,000 nodes writes a few
        // hundred MiB, and each page is one write to the log. (An existing store
        // keeps its own.)
        conn.pragma_update(None, "page_size", 16384)
            .op("set page size")?;
        // A new store gives back the pages retention frees ([`Sqlite::sweep`]);
        // like the page size, only a store made now takes it (asked of one that
        // exists, read-only, it is a write refused).
        let made: bool = conn
            .query_row("SELECT EXISTS (SELECT 1 FROM sqlite_master)", [], |r| {
                r.get(0)
            })
            .op("read the schema")?;
        if !made {
            conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
                .op("set auto vacuum")?;
        }
        conn.pragma_update(None, "journal_mode", "WAL")
            .op("enable WAL")?;
        // WAL + NORMAL: a committed transaction survives a process crash (kill -9);
        // only an OS crash may lose the last commits, never corrupt the file.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .op("set synchronous")?;
        conn.busy_timeout(BUSY_WAIT).op("set busy timeout")?;
        conn.pragma_update(None, "journal_size_limit", LOG_LIMIT)
            .op("limit the log")?;
        conn.execute_batch(SCHEMA).op("create schema")?;
        let instance: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'instance'", [], |r| {
                r.get(0)
            })
            .optional()
            .op("read store instance")?;
        let instance = match instance {
            Some(i) => i,
            None => {
                let i = new_instance_id();
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('instance', ?1)",
                    params![i],
                )
                .op("write store instance")?;
                i
            }
        };
        let page: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .op("read the page size")?;
        let epochs = Epochs::read(&conn, &instance)?;
        Ok(Sqlite {
            opened: file_id(&file),
            conn,
            file,
            instance,
            epochs,
            held: None,
            held_by: String::new(),
            log_long: Arc::default(),
            log_frames: LOG_LIMIT / page.max(512),
        })
    }

    /// Whether the file written is still the one at the store's path: one removed
    /// (or replaced) under a running hale takes every later write with it, and the
    /// next start finds none of them.
    fn still_there(&mut self) -> Result<()> {
        if file_id(&self.file) != self.opened {
            return Err(StoreError::Gone {
                path: self.file.clone(),
            });
        }
        self.still_locked()
    }

    /// Whether the lock file held is still the one at its path: one removed (an
    /// operator reading "in use by process N" may) lets a second `hale serve` lock
    /// a new one and write beside this one. Taken again when it is gone; refused
    /// when another process has taken it meanwhile.
    fn still_locked(&mut self) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let Some(held) = &self.held else {
            return Ok(());
        };
        let dir = self.file.parent().unwrap_or(Path::new("."));
        let ours = held.metadata().ok().map(|m| (m.dev(), m.ino()));
        if ours.is_some() && file_id(&dir.join(LOCK)) == ours {
            return Ok(());
        }
        // Said once it is taken again; while another process holds it, each
        // write fails with that, which the writer's failure streak says.
        self.held = Some(lock(dir, &self.held_by)?);
        tracing::error!(store = %dir.display(), "{LOCK} was removed or replaced under the running hale: the store's lock is taken again");
        Ok(())
    }

    /// [`Sqlite::write`]'s transaction, `bodies` the JSON of the batch's events.
    fn transact(
        &mut self,
        batch: &Batch<'_>,
        bodies: impl FnOnce() -> Vec<String>,
    ) -> Result<Vec<String>> {
        let epochs = self.epochs.clone();
        let tx = self.conn.transaction().op("begin")?;
        let mut ids = Vec::with_capacity(batch.events.len());
        {
            // Deletes first: a node removed and then re-created (by a retried batch)
            // must end up present.
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
            insert_rows(
                &tx,
                ("INSERT OR REPLACE INTO nodes (id, body) VALUES ", "(?, ?)"),
                &batch.nodes,
                "write node",
                |(id, body)| [id as &dyn ToSql, body],
            )?;
            insert_rows(
                &tx,
                (
                    "INSERT OR REPLACE INTO liveness (id, last_report, last_heartbeat) VALUES ",
                    "(?, ?, ?)",
                ),
                &batch.liveness,
                "write liveness",
                |l| [&l.id as &dyn ToSql, &l.last_report, &l.last_heartbeat],
            )?;
            let bodies = bodies();
            let rows: Vec<(&str, &str, i64, &str)> = batch
                .events
                .iter()
                .zip(&bodies)
                .map(|(e, body)| {
                    let at = e.occurred_at.timestamp_millis();
                    (e.node_id.as_str(), e.kind.name(), at, body.as_str())
                })
                .collect();
            insert_rows(
                &tx,
                (
                    "INSERT INTO events (node_id, type, occurred_at, body) VALUES ",
                    "(?, ?, ?, ?)",
                ),
                &rows,
                "write event",
                |(node, kind, at, body)| [node as &dyn ToSql, kind, at, body],
            )?;
            // One writer appending: the batch's events took consecutive sequence
            // numbers, the last of them the last.
            if !rows.is_empty() {
                let last = tx.last_insert_rowid();
                let first = last - rows.len() as i64 + 1;
                ids.extend((first..=last).map(|seq| epochs.id(seq)));
                // How far this version numbered: what an earlier one (a rollback)
                // numbers past it is told apart at the next start.
                tx.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('numbered', ?1)",
                    params![last.to_string()],
                )
                .op("write the event numbering")?;
            }
            tx.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('trust', ?1)",
                params![batch.trust],
            )
            .op("write trust")?;
            if let Some(ledger) = &batch.ledger {
                tx.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('ledger', ?1)",
                    params![ledger],
                )
                .op("write ledger")?;
            }
            let mut put = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO restarts (owner, count, last) VALUES (?1, ?2, ?3)",
                )
                .op("prepare restart write")?;
            let mut forget = tx
                .prepare_cached("DELETE FROM restarts WHERE owner = ?1")
                .op("prepare restart delete")?;
            for (owner, moves) in &batch.restarts {
                match moves {
                    Some(m) => put
                        .execute(params![
                            owner,
                            m.count,
                            m.last.map(|t| t.timestamp_millis())
                        ])
                        .op("write restarts")?,
                    None => forget.execute(params![owner]).op("forget restarts")?,
                };
            }
        }
        tx.commit().op("commit")?;
        self.restart_long_log();
        Ok(ids)
    }

    /// Make a long log start over: copy what the last checkpoint left (the
    /// frames written since) and cut the file to nothing, while this writer holds
    /// no transaction. Under steady writes a checkpoint on the other connection
    /// never sees the log's end, as a write always lands meanwhile, and the log
    /// would grow for as long as they keep coming. Readers under way are waited
    /// for [`READERS_WAIT`] at most (a page of events takes milliseconds, and one
    /// begun meanwhile reads the database, not the log): with one still reading,
    /// it is tried after the next checkpoint.
    fn restart_long_log(&mut self) {
        if !self.log_long.swap(false, Ordering::Relaxed) {
            return;
        }
        let restarted = self.conn.busy_timeout(READERS_WAIT).and_then(|()| {
            self.conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    r.get::<_, i64>(0)
                })
        });
        if let Err(e) = self.conn.busy_timeout(BUSY_WAIT) {
            tracing::warn!(error = %e, "cannot set the store's busy timeout again");
        }
        match restarted {
            Ok(0) => {}
            Ok(_) => tracing::debug!("the store's log was not restarted: a reader holds it"),
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {
                tracing::debug!("the store's log was not restarted: a checkpoint runs");
            }
            Err(e) => tracing::warn!(error = %e, "cannot restart the store's log"),
        }
    }

    /// Leave copying the write-ahead log into the database to [`Sqlite::checkpoint`]
    /// (another connection's, on a timer), so no write waits for it: SQLite otherwise
    /// runs it inside the commit that fills the log past 1,000 pages.
    pub fn defer_checkpoints(&self) -> Result<()> {
        self.conn
            .pragma_update(None, "wal_autocheckpoint", 0)
            .op("defer checkpoints")
    }

    /// Copy what the write-ahead log holds into the database without waiting for
    /// readers or blocking the writer; the log is reused from its start once all of
    /// it was copied, and kept under 64 MiB on disk.
    pub fn checkpoint(&self) -> Result<()> {
        let frames: i64 = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
            .op("checkpoint")?;
        if frames > self.log_frames {
            self.log_long.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Number this run's events under a prefix of its own, from the next sequence
    /// number on (see [`Epochs`]).
    fn begin_epoch(&mut self) -> Result<()> {
        let numbered: bool = self
            .conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence')",
                [],
                |r| r.get(0),
            )
            .op("read the event numbering")?;
        let next: i64 = if numbered {
            self.conn
                .query_row(
                    "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0) + 1",
                    [],
                    |r| r.get(0),
                )
                .op("read the event numbering")?
        } else {
            1
        };
        let meta = |key: &str| -> Result<Option<String>> {
            self.conn
                .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                    r.get(0)
                })
                .optional()
                .op("read the event numbering")
        };
        let numbered: Option<i64> = meta("numbered")?.and_then(|n| n.parse().ok());
        let own = meta("epoch")?.unwrap_or_default();
        let tx = self.conn.transaction().op("begin")?;
        tx.execute_batch(EPOCHS).op("create the event epochs")?;
        // The first run's prefix is the store's: ids given before runs were told
        // apart stay as they were.
        tx.execute(
            "INSERT OR IGNORE INTO epochs (first_seq, instance) VALUES (0, ?1)",
            params![self.instance],
        )
        .op("write the event epochs")?;
        // Events numbered past where this version's runs got to were an earlier
        // version's, run on the store meanwhile (a rollback): they keep the ids it
        // gave them. One that knew no prefixes gave the store's own, not the last
        // run's of this version (whose row, where that run recorded nothing, sits
        // where they begin: replaced); one that knew them began a row of its own
        // there, which stays.
        if let Some(n) = numbered.filter(|n| n + 1 < next) {
            let foreign: Option<i64> = tx
                .query_row(
                    "SELECT MIN(first_seq) FROM epochs WHERE first_seq > ?1 AND first_seq < ?2 AND instance NOT IN (?3, ?4)",
                    params![n, next, own, self.instance],
                    |r| r.get(0),
                )
                .op("read the event epochs")?;
            if foreign != Some(n + 1) {
                tx.execute(
                    "INSERT OR REPLACE INTO epochs (first_seq, instance) VALUES (?1, ?2)",
                    params![n + 1, self.instance],
                )
                .op("write the event epochs")?;
            }
        }
        let epoch = new_instance_id();
        tx.execute(
            "INSERT OR REPLACE INTO epochs (first_seq, instance) VALUES (?1, ?2)",
            params![next, epoch],
        )
        .op("write the event epochs")?;
        // Where this run begins, and under which prefix: a run that records
        // nothing still says how far this version's numbering got.
        tx.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('numbered', ?1), ('epoch', ?2)",
            params![(next - 1).to_string(), epoch],
        )
        .op("write the event numbering")?;
        tx.commit().op("commit")?;
        self.epochs = Epochs::read(&self.conn, &self.instance)?;
        Ok(())
    }

    /// `dir`'s store, held for `by` as `hale serve` holds it: refused while a hale
    /// (or a copy) has it.
    pub fn open_locked(dir: &Path, by: &str) -> Result<Sqlite> {
        let held = lock(dir, by)?;
        let mut store = Sqlite::open(dir)?;
        store.held = Some(held);
        store.held_by = by.to_string();
        Ok(store)
    }

    /// Whether the store takes writes. A read-only file opens, and fails only at
    /// the first write: a writer would serve and answer ready recording nothing.
    pub fn writable(&self) -> Result<()> {
        self.conn
            .execute("UPDATE meta SET value = value WHERE key = 'instance'", [])
            .map(|_| ())
            .map_err(|cause| StoreError::ReadOnly {
                path: self.file.clone(),
                cause,
            })
    }

    /// A writer and a handle for reads and upkeep on `dir`'s store, for `hale
    /// serve`: the writer leaves checkpoints to the other's [`Store::upkeep`].
    /// Only one may write a store: a second `hale serve` on the same directory
    /// is refused, naming the first.
    pub fn open_pair(dir: &Path) -> Result<Opened> {
        let mut writer = Sqlite::open_locked(dir, "hale serve")?;
        writer.writable()?;
        writer.begin_epoch()?;
        writer.defer_checkpoints()?;
        let mut upkeep = Sqlite::open(dir)?;
        upkeep.log_long = Arc::clone(&writer.log_long);
        Ok(Opened {
            writer: Box::new(writer),
            upkeep: Box::new(upkeep),
            lease: None,
            outbox: Arc::new(Outbox::new(dir)),
        })
    }
}

/// Take the store directory's lock for `by` (what holds it: `hale serve`), or say
/// who holds it.
fn lock(dir: &Path, by: &str) -> Result<File> {
    std::fs::create_dir_all(dir).map_err(|cause| StoreError::Create {
        path: dir.to_path_buf(),
        cause,
    })?;
    let path = dir.join(LOCK);
    let create = |cause| StoreError::LockFile {
        path: dir.to_path_buf(),
        cause,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(create)?;
    // SAFETY: flock only asks the kernel for a lock on a descriptor this function
    // owns for as long as the call lasts.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let cause = std::io::Error::last_os_error();
        // Some network and FUSE volumes take no locks: the store runs there as it
        // did before it had one, and says so.
        if matches!(
            cause.raw_os_error(),
            Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS)
        ) {
            tracing::warn!(store = %dir.display(), error = %cause,
                "this volume takes no file locks: nothing stops a second hale serve writing this store");
            return Ok(file);
        }
        if cause.kind() != std::io::ErrorKind::WouldBlock {
            return Err(create(cause));
        }
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        return Err(StoreError::InUse {
            path: dir.to_path_buf(),
            holder: match holder.trim() {
                "" => "its process id unknown".to_string(),
                held => format!("process {held}"),
            },
        });
    }
    file.set_len(0).map_err(create)?;
    // In a container every process is 1: the host (a pod's name) says which.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    write!(file, "{} on {} ({by})", std::process::id(), host.trim()).map_err(create)?;
    Ok(file)
}

impl Store for Sqlite {
    /// The fleet as last written, watching from `now`.
    fn load(&self, now: Time) -> Result<Fleet> {
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
            let node: Box<Node> =
                serde_json::from_str(&body).map_err(|cause| StoreError::Corrupt {
                    what: format!("node {id}"),
                    cause,
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
        match trust.map(|t| serde_json::from_str::<Trust>(&t)) {
            Some(Ok(trust)) => fleet.trust = trust.resumed(now),
            Some(Err(e)) => super::unreadable_trust(&e),
            None => {}
        }
        let ledger: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'ledger'", [], |r| {
                r.get(0)
            })
            .optional()
            .op("read ledger")?;
        if let Some(ledger) = ledger {
            fleet.ledger = serde_json::from_str(&ledger).map_err(|cause| StoreError::Corrupt {
                what: "the policy ledger".into(),
                cause,
            })?;
        }
        // Counts an older store kept inside the ledger become rows (rows stand).
        for (owner, m) in &fleet.ledger.moves {
            self.conn
                .execute(
                    "INSERT OR IGNORE INTO restarts (owner, count, last) VALUES (?1, ?2, NULL)",
                    params![owner, m.count],
                )
                .op("migrate restarts")?;
        }
        let mut stmt = self
            .conn
            .prepare("SELECT owner, count, last FROM restarts")
            .op("read restarts")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, u32>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                ))
            })
            .op("read restarts")?;
        for row in rows {
            let (owner, count, last) = row.op("read restarts")?;
            let last = last.and_then(chrono::DateTime::from_timestamp_millis);
            fleet.ledger.moves.insert(owner, Moves { count, last });
        }
        Ok(fleet)
    }

    /// Write one batch atomically; returns its events with the ids they were given.
    fn write(&mut self, batch: &Batch<'_>) -> Result<Vec<String>> {
        self.still_there()?;
        let bodies = |events: &[Event]| events.iter().map(super::json).collect::<Vec<_>>();
        // A large step's event bodies (a first poll of 10,000 nodes has 41,000) are
        // serialised on another core while its node records are written.
        std::thread::scope(|s| {
            let early = (batch.events.len() >= spread::PER_THREAD && spread::cores() > 1)
                .then(|| spread::spawn(s, || bodies(batch.events)))
                .flatten();
            self.transact(batch, || {
                early.map_or_else(|| bodies(batch.events), spread::joined)
            })
        })
    }

    /// Every node's events from `since` (Unix ms) on, in the order they were recorded.
    fn history(&self, since: i64) -> Result<Vec<Event>> {
        let mut stmt = self
            .conn
            .prepare("SELECT node_id, body FROM events WHERE occurred_at >= ?1 ORDER BY seq")
            .op("read history")?;
        let rows = stmt
            .query_map(params![since], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .op("read history")?;
        let mut events = Vec::new();
        for row in rows {
            let (node, body) = row.op("read history")?;
            events.push(
                serde_json::from_str(&body).map_err(|cause| StoreError::Corrupt {
                    what: format!("an event of node {node}"),
                    cause,
                })?,
            );
        }
        Ok(events)
    }

    /// One page of a node's events, oldest first (the newest page with `latest`).
    fn events(&self, node_id: &str, q: &EventQuery) -> Result<EventPage> {
        let mut sql = String::from("SELECT seq, body FROM events WHERE node_id = ?");
        let mut args: Vec<rusqlite::types::Value> = vec![node_id.to_string().into()];
        if let Some(after) = q.after {
            sql.push_str(" AND seq > ?");
            args.push(after.into());
        }
        if let Some(since) = q.since {
            sql.push_str(" AND occurred_at >= ?");
            args.push(since.into());
        }
        if let Some(until) = q.until {
            sql.push_str(" AND occurred_at < ?");
            args.push(until.into());
        }
        if !q.types.is_empty() {
            sql.push_str(" AND type IN (");
            sql.push_str(&vec!["?"; q.types.len()].join(", "));
            sql.push(')');
            args.extend(q.types.iter().map(|t| t.clone().into()));
        }
        let size = q.page_size.max(1);
        sql.push_str(if q.latest {
            " ORDER BY seq DESC LIMIT ?"
        } else {
            " ORDER BY seq LIMIT ?"
        });
        // One more than a page tells whether another page follows.
        args.push(((size + 1) as i64).into());
        let mut stmt = self.conn.prepare_cached(&sql).op("read events")?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .op("read events")?;
        let mut events = Vec::new();
        let mut last = None;
        let mut more = false;
        for row in rows {
            let (seq, body) = row.op("read events")?;
            if events.len() == size {
                more = true;
                break;
            }
            let event = serde_json::from_str(&body).map_err(|cause| StoreError::Corrupt {
                what: format!("an event of node {node_id}"),
                cause,
            })?;
            events.push(StoredEvent {
                id: self.epochs.id(seq),
                event,
            });
            last = Some(seq);
        }
        if q.latest {
            events.reverse();
            return Ok(EventPage { events, next: None });
        }
        Ok(EventPage {
            events,
            next: if more { last } else { None },
        })
    }

    /// Whether any event names this node (its record may be gone).
    fn has_events(&self, node_id: &str) -> Result<bool> {
        self.conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM events WHERE node_id = ?1)",
                params![node_id],
                |r| r.get(0),
            )
            .op("read events")
    }

    /// Delete events older than `cutoff` (unix ms), at most `batch` per transaction so a
    /// writer waits for one short batch at most. Returns how many went.
    fn sweep(&mut self, cutoff: i64, batch: usize) -> Result<usize> {
        let mut total = 0;
        loop {
            let n = self
                .conn
                .execute(
                    "DELETE FROM events WHERE seq IN \
                     (SELECT seq FROM events WHERE occurred_at < ?1 LIMIT ?2)",
                    params![cutoff, batch as i64],
                )
                .op("sweep events")?;
            total += n;
            if n < batch {
                break;
            }
        }
        // The pages freed go back to the file system, a thousand at a time so a
        // writer waits for one short transaction at most (a store made before
        // this keeps its pages for later events).
        if total == 0 {
            return Ok(0);
        }
        let free_pages = |conn: &Connection| -> Result<i64> {
            conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))
                .op("count free pages")
        };
        let mut free = free_pages(&self.conn)?;
        while free > 0 {
            // Each step of the pragma frees one page: stepped to its end.
            let mut vacuum = self
                .conn
                .prepare_cached("PRAGMA incremental_vacuum(1024)")
                .op("give back free pages")?;
            let mut steps = vacuum.query([]).op("give back free pages")?;
            while steps.next().op("give back free pages")?.is_some() {}
            drop(steps);
            drop(vacuum);
            // The log the freed pages went through is copied as it goes (the
            // timer's checkpoint waits for this).
            self.checkpoint()?;
            let left = free_pages(&self.conn)?;
            // A store made before auto-vacuum frees nothing: its pages stay.
            if left >= free {
                break;
            }
            free = left;
        }
        Ok(total)
    }

    /// Bytes the store occupies on disk (database plus write-ahead log).
    /// Every file of the store's directory: the database, its WAL and shared
    /// memory, and the webhook deliveries' own database beside it.
    fn bytes_used(&self) -> u64 {
        let dir = self.file.parent().unwrap_or(Path::new("."));
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.metadata().ok())
            .filter(std::fs::Metadata::is_file)
            .map(|m| m.len())
            .sum()
    }

    fn mark_copying(&mut self, copying: bool) -> Result<()> {
        let sql = if copying {
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('copying', '1')"
        } else {
            "DELETE FROM meta WHERE key = 'copying'"
        };
        self.conn.execute(sql, []).op("mark a copy")?;
        Ok(())
    }

    fn copying(&self) -> Result<bool> {
        self.conn
            .query_row("SELECT 1 FROM meta WHERE key = 'copying'", [], |_| Ok(()))
            .optional()
            .op("read the copy's mark")
            .map(|m| m.is_some())
    }

    fn upkeep(&self) -> Result<()> {
        self.checkpoint()
    }
}

/// The file beside the store's that holds each webhook endpoint's place in the
/// events: a place is written after every delivery, and never waits for the
/// store's writer (a first poll of 100,000 nodes holds it for seconds).
pub const PLACES: &str = "webhooks.db";

/// Outbound webhooks delivered from the events table. Each endpoint's place — the
/// sequence number of the last event it is done with — is kept in [`PLACES`], so a
/// restart, clean or not, resumes where the deliveries stopped.
pub struct Outbox {
    dir: PathBuf,
    wake: Arc<Notify>,
}

impl Outbox {
    pub fn new(dir: &Path) -> Outbox {
        Outbox {
            dir: dir.to_path_buf(),
            wake: Arc::new(Notify::new()),
        }
    }
}

/// One endpoint's feed: events read on one connection, its place written on another.
struct Feed {
    db: Arc<Mutex<FeedDb>>,
    wake: Arc<Notify>,
}

struct FeedDb {
    events: Connection,
    places: Connection,
    /// The prefixes of the events' ids: read once, as the run that opens a feed
    /// began its own before ([`Sqlite::open_pair`]).
    epochs: Epochs,
    key: String,
    /// ` AND type IN (?2, …)`, or empty for every type.
    types_sql: String,
    types: Vec<String>,
    backlog: usize,
    /// The last event handed out; the place stored is the last one acknowledged.
    handed: i64,
    /// While this replica follows: the newest event when it began to.
    following: Option<i64>,
    /// Events recorded while it followed, behind some of its own still waiting:
    /// `(after, to]`, oldest first, skipped once it leads and reaches them.
    followed: Vec<(i64, i64)>,
}

struct Pending {
    event: Option<StoredEvent>,
    seq: i64,
    db: Arc<Mutex<FeedDb>>,
}

/// Run blocking store work from async code.
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).joined().await
}

impl super::Outbox for Outbox {
    fn feed<'a>(
        &'a self,
        key: &'a str,
        since: Time,
        types: Option<&'a BTreeSet<String>>,
        backlog: usize,
    ) -> Fut<'a, Result<Box<dyn super::Feed>>> {
        let (dir, key) = (self.dir.clone(), key.to_string());
        let types: Option<Vec<String>> = types.map(|t| t.iter().cloned().collect());
        let since = since.timestamp_millis();
        Box::pin(async move {
            let db = off_runtime(move || FeedDb::open(&dir, key, types, since, backlog)).await?;
            Ok(Box::new(Feed {
                db: Arc::new(Mutex::new(db)),
                wake: self.wake.clone(),
            }) as Box<dyn super::Feed>)
        })
    }

    fn written(&self) {
        self.wake.notify_waiters();
    }

    fn retain<'a>(&'a self, keys: &'a [String]) -> Fut<'a, Result<usize>> {
        let (dir, keys) = (self.dir.clone(), keys.to_vec());
        Box::pin(off_runtime(move || {
            let path = dir.join(PLACES);
            if !path.exists() {
                return Ok(0);
            }
            let events = Connection::open(dir.join(FILE)).op("open the events for webhooks")?;
            let instance = instance_of(&events)?;
            let keys: Vec<String> = keys.iter().map(|k| place_key(&instance, k)).collect();
            let places = Connection::open(path).op("open the webhook places")?;
            places
                .pragma_update(None, "busy_timeout", 5000)
                .op("set busy timeout")?;
            let known: Vec<String> = places
                .prepare("SELECT key FROM places")
                .and_then(|mut q| q.query_map([], |r| r.get(0))?.collect())
                .op("read the webhook places")?;
            let mut forgotten = 0;
            for key in known.iter().filter(|k| !keys.contains(k)) {
                forgotten += places
                    .execute("DELETE FROM places WHERE key = ?1", params![key])
                    .op("forget a webhook place")?;
            }
            Ok(forgotten)
        }))
    }
}

/// The store's instance, which its event ids and webhook places carry.
fn instance_of(events: &Connection) -> Result<String> {
    events
        .query_row("SELECT value FROM meta WHERE key = 'instance'", [], |r| {
            r.get(0)
        })
        .op("read store instance")
}

/// The key a place is stored under: it belongs to this store (a store made anew
/// numbers its events from 1 again) and names the endpoint by a digest, as its
/// URL may hold credentials.
fn place_key(instance: &str, key: &str) -> String {
    use sha2::Digest as _;
    crate::hex(&sha2::Sha256::digest(format!("{instance}\n{key}")))
}

impl FeedDb {
    fn open(
        dir: &Path,
        key: String,
        types: Option<Vec<String>>,
        since: i64,
        backlog: usize,
    ) -> Result<FeedDb> {
        let events = Connection::open(dir.join(FILE)).op("open the events for webhooks")?;
        events
            .pragma_update(None, "busy_timeout", 5000)
            .op("set busy timeout")?;
        let instance = instance_of(&events)?;
        let places = Connection::open(dir.join(PLACES)).op("open the webhook places")?;
        places
            .pragma_update(None, "journal_mode", "WAL")
            .op("enable WAL")?;
        places
            .pragma_update(None, "synchronous", "NORMAL")
            .op("set synchronous")?;
        places
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS places (key TEXT PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID",
            )
            .op("create the webhook places")?;
        let key = place_key(&instance, &key);
        let placed: Option<i64> = places
            .query_row("SELECT seq FROM places WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()
            .op("read a webhook place")?;
        let types_sql = match &types {
            None => String::new(),
            // `events: []` takes none.
            Some(types) if types.is_empty() => " AND 0".into(),
            Some(types) => {
                let marks: Vec<String> = (0..types.len()).map(|i| format!("?{}", i + 2)).collect();
                format!(" AND type IN ({})", marks.join(", "))
            }
        };
        let types = types.unwrap_or_default();
        let epochs = Epochs::read(&events, &instance)?;
        let mut db = FeedDb {
            events,
            places,
            epochs,
            key,
            types_sql,
            types,
            backlog,
            handed: 0,
            following: None,
            followed: Vec::new(),
        };
        let (first, last): (Option<i64>, Option<i64>) = db
            .events
            .query_row(
                "SELECT (SELECT MIN(seq) FROM events WHERE occurred_at >= ?1), (SELECT MAX(seq) FROM events)",
                params![since],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .op("find where webhooks start")?;
        let last = last.unwrap_or(0);
        db.handed = match placed {
            // A place past the newest event (a store restored from before it):
            // from what is there now.
            Some(seq) if seq > last => {
                db.places
                    .execute(
                        "UPDATE places SET seq = ?2 WHERE key = ?1",
                        params![db.key, last],
                    )
                    .op("write a webhook place")?;
                last
            }
            Some(seq) => seq,
            // New: from the first event stored at `since` or later.
            None => {
                let start = first.map_or(last, |s| s - 1);
                db.place(start)?;
                start
            }
        };
        Ok(db)
    }

    /// Keep `seq` as the last event this endpoint is done with; a place only moves
    /// forward (a task of the configuration before a reload may finish after the
    /// next one moved on).
    fn place(&self, seq: i64) -> Result<()> {
        self.places
            .execute(
                "INSERT INTO places (key, seq) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET seq = max(seq, excluded.seq)",
                params![self.key, seq],
            )
            .op("write a webhook place")
            .map(drop)
    }

    /// The sequence number of the newest event stored (0: none).
    fn newest(&self) -> Result<i64> {
        self.events
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM events", [], |r| r.get(0))
            .op("read webhook deliveries")
    }

    /// This replica follows: what it records from now on is not its to deliver.
    /// What it recorded before, while it led (in this process or the one before a
    /// restart), still waits for it to lead again; if none does, its place moves
    /// past every event at once, else the ones recorded meanwhile are skipped
    /// when it reaches them.
    fn pass(&mut self) -> Result<()> {
        let last = self.newest()?;
        let from = *self.following.get_or_insert(last);
        if self.handed >= from {
            if last > self.handed {
                self.place(last)?;
                self.handed = last;
            }
        } else if last > from {
            match self.followed.last_mut() {
                Some((after, to)) if *after == from => *to = last,
                _ => self.followed.push((from, last)),
            }
        }
        Ok(())
    }

    /// The args of a query on events after `seq`, filtered by type.
    fn after(&self, seq: i64) -> Vec<rusqlite::types::Value> {
        std::iter::once(seq.into())
            .chain(self.types.iter().map(|t| t.clone().into()))
            .collect()
    }

    /// Skip what waits beyond the backlog, oldest first; then up to 8 events, how
    /// many were skipped, and how many more wait behind them.
    fn fetch(&mut self, db: &Arc<Mutex<FeedDb>>) -> Result<(Vec<Pending>, u64, u64)> {
        // Everything up to the newest event now stored is looked at, and no further:
        // with none the endpoint takes among them, its place moves past them all,
        // so a rare type is not looked for again among the same events.
        self.following = None;
        // Everything before was acknowledged when this was asked: past a stretch
        // recorded while following, the place moves to its end.
        while let Some(&(after, to)) = self.followed.first() {
            if self.handed < after {
                break;
            }
            if to > self.handed {
                self.place(to)?;
                self.handed = to;
            }
            self.followed.remove(0);
        }
        let newest = self.newest()?;
        let last = self
            .followed
            .first()
            .map_or(newest, |&(after, _)| after.min(newest));
        let n = self.types.len() + 2;
        let beyond: Option<i64> = self
            .events
            .prepare_cached(&format!(
                "SELECT seq FROM events WHERE seq > ?1{} AND seq <= ?{} ORDER BY seq DESC LIMIT 1 OFFSET ?{n}",
                self.types_sql,
                n + 1
            ))
            .and_then(|mut stmt| {
                let mut args = self.after(self.handed);
                args.push((self.backlog as i64).into());
                args.push(last.into());
                stmt.query_row(rusqlite::params_from_iter(args), |r| r.get(0))
                    .optional()
            })
            .op("read webhook deliveries")?;
        let mut overflowed = 0;
        if let Some(newest_skipped) = beyond {
            let mut args = self.after(self.handed);
            args.push(newest_skipped.into());
            let skipped: i64 = self
                .events
                .query_row(
                    &format!(
                        "SELECT COUNT(*) FROM events WHERE seq > ?1{} AND seq <= ?{n}",
                        self.types_sql
                    ),
                    rusqlite::params_from_iter(args),
                    |r| r.get(0),
                )
                .op("read webhook deliveries")?;
            self.place(newest_skipped)?;
            self.handed = newest_skipped;
            overflowed = skipped as u64;
        }
        let mut stmt = self
            .events
            .prepare_cached(&format!(
                "SELECT seq, body FROM events WHERE seq > ?1{} AND seq <= ?{n} ORDER BY seq LIMIT 8",
                self.types_sql
            ))
            .op("read webhook deliveries")?;
        let mut args = self.after(self.handed);
        args.push(last.into());
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .op("read webhook deliveries")?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, body) = row.op("read webhook deliveries")?;
            // An unreadable record cannot be delivered: it is acknowledged unsent.
            let event = serde_json::from_str::<Event>(&body)
                .ok()
                .map(|event| StoredEvent {
                    id: self.epochs.id(seq),
                    event,
                });
            out.push(Pending {
                event,
                seq,
                db: db.clone(),
            });
        }
        drop(stmt);
        match out.last() {
            Some(p) => self.handed = p.seq,
            // Everything before was acknowledged when this was asked.
            None if last > self.handed => {
                self.place(last)?;
                self.handed = last;
            }
            None => {}
        }
        let mut args = self.after(self.handed);
        args.push(last.into());
        let waiting: i64 = self
            .events
            .prepare_cached(&format!(
                "SELECT COUNT(*) FROM events WHERE seq > ?1{} AND seq <= ?{n}",
                self.types_sql
            ))
            .and_then(|mut stmt| stmt.query_row(rusqlite::params_from_iter(args), |r| r.get(0)))
            .op("read webhook deliveries")?;
        Ok((out, overflowed, waiting as u64))
    }
}

impl super::Feed for Feed {
    fn next(&mut self, wait: Duration) -> Fut<'_, Result<Fetched>> {
        Box::pin(async move {
            let until = tokio::time::Instant::now() + wait;
            loop {
                // Listening before looking: an event written meanwhile wakes it.
                let woken = self.wake.notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                let db = self.db.clone();
                let (events, overflowed, waiting) = off_runtime(move || {
                    let mut feed = db.lock().expect("webhook feed lock");
                    feed.fetch(&db)
                })
                .await?;
                if !events.is_empty() || overflowed > 0 {
                    return Ok(Fetched {
                        events: events
                            .into_iter()
                            .map(|p| Box::new(p) as Box<dyn super::Pending>)
                            .collect(),
                        overflowed,
                        waiting,
                    });
                }
                if tokio::time::timeout_at(until, woken).await.is_err() {
                    return Ok(Fetched::default());
                }
            }
        })
    }

    fn pass(&mut self) -> Fut<'_, Result<()>> {
        let db = self.db.clone();
        Box::pin(off_runtime(move || {
            db.lock().expect("webhook feed lock").pass()
        }))
    }
}

impl super::Pending for Pending {
    fn event(&self) -> Option<&StoredEvent> {
        self.event.as_ref()
    }

    fn ack(&self) -> Fut<'_, Result<()>> {
        let (db, seq) = (self.db.clone(), self.seq);
        Box::pin(off_runtime(move || {
            db.lock().expect("webhook feed lock").place(seq)
        }))
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::core::Outcome;
    use crate::store::suite;

    fn open(dir: &Path) -> Box<dyn Store> {
        Box::new(Sqlite::open(dir).unwrap())
    }

    #[test]
    fn a_batch_round_trips_and_removal_keeps_events() {
        suite::a_batch_round_trips_and_removal_keeps_events(&open);
    }

    #[test]
    fn a_copys_mark_is_kept_until_cleared() {
        suite::a_copys_mark_is_kept_until_cleared(&open);
    }

    /// What the store keeps on disk is every file of its directory: the webhook
    /// deliveries' database too, not only the events'.
    #[test]
    fn the_bytes_used_are_every_file_the_store_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let store = Sqlite::open(dir.path()).unwrap();
        let alone = store.bytes_used();
        assert!(alone > 0);
        std::fs::write(dir.path().join(PLACES), vec![0u8; 100_000]).unwrap();
        assert_eq!(store.bytes_used(), alone + 100_000);
    }

    /// A store file removed under the running writer fails every later write,
    /// saying so, rather than writing into a file the next start will not find.
    #[test]
    fn a_store_file_removed_under_the_writer_fails_its_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Sqlite::open(dir.path()).unwrap();
        let at = Utc::now();
        write(&mut store, &[event("n1", false, at)]);
        for f in ["hale.db", "hale.db-wal", "hale.db-shm"] {
            let _ = std::fs::remove_file(dir.path().join(f));
        }
        let batch = Batch {
            events: &[event("n1", false, at)],
            trust: "{}".into(),
            ..Batch::default()
        };
        let err = store.write(&batch).expect_err("its file is gone");
        assert_eq!(err.metric_label(), "gone");
        assert!(err.to_string().contains("removed or replaced"), "{err}");
        // A new file in its place is another store: still refused.
        drop(Sqlite::open(dir.path()).unwrap());
        assert!(matches!(store.write(&batch), Err(StoreError::Gone { .. })));
    }

    /// The lock file removed under the running writer: taken again at its next
    /// write, so a second writer is refused; one that took the lock meanwhile
    /// stops this writer's writes rather than writing beside it.
    #[test]
    fn a_lock_removed_under_the_writer_is_taken_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Sqlite::open_locked(dir.path(), "hale serve").unwrap();
        let at = Utc::now();
        let batch = Batch {
            events: &[event("n1", false, at)],
            trust: "{}".into(),
            ..Batch::default()
        };
        store.write(&batch).unwrap();
        std::fs::remove_file(dir.path().join(LOCK)).unwrap();
        let said = crate::captured(|| {
            store.write(&batch).expect("taken again");
        });
        assert!(said.contains("the store's lock is taken again"), "{said}");
        assert_eq!(said.lines().count(), 1, "{said}");
        let second = Sqlite::open_locked(dir.path(), "hale serve");
        assert!(
            matches!(second, Err(StoreError::InUse { .. })),
            "a second writer let in"
        );
        // Removed again, and a second writer is quicker: this one's writes stop,
        // each refused without a line of its own (the writer's failure streak
        // says them).
        std::fs::remove_file(dir.path().join(LOCK)).unwrap();
        let _second = Sqlite::open_locked(dir.path(), "hale serve").expect("the lock was free");
        let said = crate::captured(|| {
            for _ in 0..3 {
                let err = store.write(&batch).expect_err("two writers");
                assert_eq!(err.metric_label(), "in_use", "{err}");
            }
        });
        assert_eq!(said, "");
    }

    fn event(node: &str, missed: bool, at: Time) -> Event {
        Event {
            node_id: node.into(),
            kind: if missed {
                crate::core::EventKind::HeartbeatMissed { last_heartbeat: at }
            } else {
                crate::core::EventKind::NodeDecommissioned {
                    by: "operator".into(),
                }
            },
            occurred_at: at,
            message: node.into(),
        }
    }

    fn write(store: &mut Sqlite, events: &[Event]) {
        let batch = Batch {
            events,
            trust: "{}".into(),
            ..Batch::default()
        };
        store.write(&batch).unwrap();
    }

    async fn take(feed: &mut Box<dyn super::super::Feed>, wait: Duration) -> (Vec<String>, u64) {
        let fetched = feed.next(wait).await.unwrap();
        let mut messages = Vec::new();
        for p in &fetched.events {
            messages.push(p.event().unwrap().event.message.clone());
            p.ack().await.unwrap();
        }
        (messages, fetched.overflowed)
    }

    /// A store that cannot grow (its disk full; here its page limit) fails its
    /// writes as full, so `reason="full"` counts them.
    #[test]
    fn a_full_store_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Sqlite::open(dir.path()).unwrap();
        let pages: i64 = store
            .conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        store
            .conn
            .pragma_update(None, "max_page_count", pages + 2)
            .unwrap();
        let t0 = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let events: Vec<Event> = (0..2_000)
            .map(|i| event(&format!("n{i}"), false, t0))
            .collect();
        let e = store
            .write(&Batch {
                events: &events,
                ..Batch::default()
            })
            .unwrap_err();
        assert_eq!(e.metric_label(), "full", "{e}");
        assert!(e.to_string().contains("full"), "{e}");
    }

    /// A webhook feed hands out each event once, in order, and resumes after the
    /// last one acknowledged when opened again (a restart); a feed new to the
    /// store starts at its `since`; what waits beyond the backlog is skipped,
    /// oldest first, and counted; a type filter hands out only its types; a write
    /// wakes a feed waiting for one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn webhook_feeds_resume_after_their_place() {
        use crate::store::Outbox as _;
        let dir = tempfile::tempdir().unwrap();
        let mut store = Sqlite::open(dir.path()).unwrap();
        let t0 = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let events: Vec<Event> = (0..5)
            .map(|i| event(&format!("n{i}"), i % 2 == 1, t0))
            .collect();
        write(&mut store, &events);
        let outbox = Outbox::new(dir.path());
        let quick = Duration::from_millis(10);

        let mut feed = outbox.feed("a", t0, None, 100).await.unwrap();
        let fetched = feed.next(quick).await.unwrap();
        assert_eq!(fetched.events.len(), 5);
        let ids: Vec<&str> = fetched
            .events
            .iter()
            .map(|p| p.event().unwrap().id.as_str())
            .collect();
        assert!(ids[0].ends_with("-1") && ids[4].ends_with("-5"), "{ids:?}");
        fetched.events[0].ack().await.unwrap();
        fetched.events[1].ack().await.unwrap();
        drop(fetched);
        drop(feed);
        // Opened again, as after a restart: from the last acknowledged on.
        let mut feed = outbox.feed("a", t0, None, 100).await.unwrap();
        assert_eq!(
            take(&mut feed, quick).await,
            (vec!["n2".into(), "n3".into(), "n4".into()], 0)
        );
        assert_eq!(take(&mut feed, quick).await, (vec![], 0));

        // A new endpoint starts with what is stored from its start.
        let later = t0 + chrono::TimeDelta::hours(1);
        let mut new = outbox.feed("b", later, None, 100).await.unwrap();
        assert_eq!(take(&mut new, quick).await, (vec![], 0));
        write(&mut store, &[event("n5", false, later)]);
        assert_eq!(take(&mut new, quick).await, (vec!["n5".into()], 0));

        // A backlog of 2: the oldest four of six skipped and counted.
        let mut small = outbox.feed("c", t0, None, 2).await.unwrap();
        assert_eq!(
            take(&mut small, quick).await,
            (vec!["n4".into(), "n5".into()], 4)
        );
        // Only missed heartbeats.
        let missed = BTreeSet::from(["HEARTBEAT_MISSED".to_string()]);
        let mut only = outbox.feed("d", t0, Some(&missed), 100).await.unwrap();
        assert_eq!(
            take(&mut only, quick).await,
            (vec!["n1".into(), "n3".into()], 0)
        );
        // Nothing more it takes: its place moves past the six stored, so they are
        // not looked through again.
        assert_eq!(take(&mut only, quick).await, (vec![], 0));
        let instance: String = Connection::open(dir.path().join(FILE))
            .unwrap()
            .query_row("SELECT value FROM meta WHERE key = 'instance'", [], |r| {
                r.get(0)
            })
            .unwrap();
        let key = {
            use sha2::Digest as _;
            crate::hex(&sha2::Sha256::digest(format!("{instance}\nd")))
        };
        let place: i64 = Connection::open(dir.path().join(PLACES))
            .unwrap()
            .query_row("SELECT seq FROM places WHERE key = ?1", [key], |r| r.get(0))
            .unwrap();
        assert_eq!(place, 6);
        // `events: []` takes none.
        let none = BTreeSet::new();
        let mut empty = outbox.feed("e", t0, Some(&none), 100).await.unwrap();
        assert_eq!(take(&mut empty, quick).await, (vec![], 0));

        // A follower moves past what it records, delivering none of it.
        assert_eq!(take(&mut feed, quick).await, (vec!["n5".into()], 0));
        feed.pass().await.unwrap();
        write(&mut store, &[event("n6", false, later)]);
        feed.pass().await.unwrap();
        assert_eq!(take(&mut feed, quick).await, (vec![], 0));
        // Waiting for an event, woken by its write: the wait is far longer than
        // the test may take.
        let waiting = tokio::spawn(async move { take(&mut feed, Duration::from_secs(60)).await });
        // Time to look and find nothing, and wait.
        tokio::time::sleep(Duration::from_millis(200)).await;
        write(&mut store, &[event("n7", false, later)]);
        outbox.written();
        assert_eq!(waiting.await.unwrap(), (vec!["n7".into()], 0));
    }

    /// A feed says how many of the endpoint's events wait behind those it hands
    /// out: what the backlog gauge shows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn webhook_feeds_count_what_waits() {
        use crate::store::Outbox as _;
        let dir = tempfile::tempdir().unwrap();
        let mut store = Sqlite::open(dir.path()).unwrap();
        let t0 = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let events: Vec<Event> = (0..20)
            .map(|i| event(&format!("n{i}"), i % 2 == 1, t0))
            .collect();
        write(&mut store, &events);
        let outbox = Outbox::new(dir.path());
        let quick = Duration::from_millis(10);
        let mut counts = Vec::new();
        let mut feed = outbox.feed("all", t0, None, 100).await.unwrap();
        for _ in 0..4 {
            let fetched = feed.next(quick).await.unwrap();
            counts.push((fetched.events.len(), fetched.waiting));
            for p in &fetched.events {
                p.ack().await.unwrap();
            }
        }
        assert_eq!(counts, [(8, 12), (8, 4), (4, 0), (0, 0)]);
        // Only the endpoint's types count.
        let missed = BTreeSet::from(["HEARTBEAT_MISSED".to_string()]);
        let mut only = outbox.feed("missed", t0, Some(&missed), 100).await.unwrap();
        let fetched = only.next(quick).await.unwrap();
        assert_eq!((fetched.events.len(), fetched.waiting), (8, 2));
    }

    /// A replica that follows for a while — a restarted one before it wins the
    /// lease back — keeps what it recorded while it led for when it leads again,
    /// and skips only what it recorded while it followed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn webhook_feeds_keep_their_own_backlog_while_following() {
        use crate::store::Outbox as _;
        let dir = tempfile::tempdir().unwrap();
        let mut store = Sqlite::open(dir.path()).unwrap();
        let t0 = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let outbox = Outbox::new(dir.path());
        let quick = Duration::from_millis(50);
        let feed = outbox.feed("a", t0, None, 100).await.unwrap();
        // Led: two recorded, the receiver down, none delivered; then a restart.
        write(
            &mut store,
            &[event("led1", false, t0), event("led2", false, t0)],
        );
        drop(feed);
        let mut feed = outbox.feed("a", t0, None, 100).await.unwrap();
        feed.pass().await.unwrap();
        write(&mut store, &[event("followed1", false, t0)]);
        feed.pass().await.unwrap();
        write(&mut store, &[event("followed2", false, t0)]);
        feed.pass().await.unwrap();
        // Leading: its own backlog, then past what it recorded following.
        assert_eq!(
            take(&mut feed, quick).await,
            (vec!["led1".into(), "led2".into()], 0)
        );
        write(&mut store, &[event("led3", false, t0)]);
        assert_eq!(take(&mut feed, quick).await, (vec!["led3".into()], 0));
        // Following again with led4 waiting, then leading: the same.
        write(&mut store, &[event("led4", false, t0)]);
        feed.pass().await.unwrap();
        write(&mut store, &[event("followed3", false, t0)]);
        feed.pass().await.unwrap();
        write(&mut store, &[event("followed4", false, t0)]);
        feed.pass().await.unwrap();
        assert_eq!(take(&mut feed, quick).await, (vec!["led4".into()], 0));
        assert_eq!(take(&mut feed, quick).await, (vec![], 0));
        write(&mut store, &[event("led5", false, t0)]);
        assert_eq!(take(&mut feed, quick).await, (vec!["led5".into()], 0));
    }

    #[test]
    fn a_large_fleet_comes_back_whole() {
        suite::a_large_fleet_comes_back_whole(&open);
    }

    /// A record that does not read back stops the load with an error naming its
    /// node, wherever it lies; one whose body is not text is a read error.
    #[test]
    fn a_bad_record_fails_the_load_and_names_its_node() {
        let now = Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut fleet = Fleet::new(now);
        for i in 0..768 {
            let node = Node::new(&format!("n-{i:04}"));
            fleet.nodes.insert(node.id.clone(), Box::new(node));
        }
        let outcome = Outcome {
            dirty: fleet.nodes.keys().cloned().collect(),
            ..Outcome::default()
        };
        Sqlite::open(dir.path())
            .unwrap()
            .write(&Batch::of(&fleet, &outcome))
            .unwrap();
        let conn = Connection::open(dir.path().join(FILE)).unwrap();
        for bad in ["n-0000", "n-0700"] {
            conn.execute("UPDATE nodes SET body = '{\"id\": 7' WHERE id = ?1", [bad])
                .unwrap();
            match Sqlite::open(dir.path()).unwrap().load(now) {
                Err(StoreError::Corrupt { what, .. }) => assert_eq!(what, format!("node {bad}")),
                other => panic!("{bad}: {:?}", other.map(|f| f.nodes.len())),
            }
            let good = serde_json::to_string(&fleet.nodes[bad]).unwrap();
            conn.execute("UPDATE nodes SET body = ?1 WHERE id = ?2", [&good, bad])
                .unwrap();
        }
        conn.execute("UPDATE nodes SET body = x'00ff' WHERE id = 'n-0300'", [])
            .unwrap();
        match Sqlite::open(dir.path()).unwrap().load(now) {
            Err(StoreError::Sqlite { op, .. }) => assert_eq!(op, "read nodes"),
            other => panic!("a blob body: {:?}", other.map(|f| f.nodes.len())),
        }
        conn.execute("DELETE FROM nodes WHERE id = 'n-0300'", [])
            .unwrap();
        let loaded = Sqlite::open(dir.path()).unwrap().load(now).unwrap();
        assert_eq!(loaded.nodes.len(), 767);
    }

    /// A store has one writer: a second `hale serve` on its directory is refused,
    /// naming the process that holds it, and takes it once that one is gone.
    #[test]
    fn a_store_has_one_writer() {
        let dir = tempfile::tempdir().unwrap();
        let first = Sqlite::open_pair(dir.path()).unwrap();
        match Sqlite::open_pair(dir.path()) {
            Err(e @ StoreError::InUse { .. }) => {
                let said = e.to_string();
                assert!(
                    said.contains(&format!("process {}", std::process::id()))
                        && said.contains("(hale serve)"),
                    "{said}"
                );
                assert_eq!(e.metric_label(), "in_use");
            }
            other => panic!("a second writer: {:?}", other.err()),
        }
        // Readers of the store are not writers.
        Sqlite::open(dir.path()).unwrap().load(Utc::now()).unwrap();
        drop(first);
        Sqlite::open_pair(dir.path()).unwrap();
    }

    #[test]
    fn pages_cover_every_event_exactly_once() {
        suite::pages_cover_every_event_exactly_once(&open);
    }

    #[test]
    fn the_policy_ledger_outlives_its_writer() {
        suite::the_policy_ledger_outlives_its_writer(&open);
    }

    #[test]
    fn retention_sweep_deletes_only_what_is_old() {
        suite::retention_sweep_deletes_only_what_is_old(&open);
    }

    /// The pages retention frees go back to the file system, so the store's size
    /// (and `hale_store_bytes_used`) follows what it keeps, not the most it ever
    /// held.
    #[test]
    fn retention_gives_the_space_it_frees_back() {
        let t0 = Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut store = Sqlite::open(dir.path()).unwrap();
        let size = || std::fs::metadata(dir.path().join(FILE)).unwrap().len();
        suite::burst(&mut store, "a", 20_000, t0);
        store.checkpoint().unwrap();
        let full = size();
        let cutoff = (t0 + chrono::TimeDelta::days(1)).timestamp_millis();
        assert_eq!(store.sweep(cutoff, 5_000).unwrap(), 20_000);
        store.checkpoint().unwrap();
        assert!(size() * 4 < full, "{} of {full} bytes kept", size());
    }

    /// A store restored from a copy numbers its events again from where the copy
    /// stopped: the next run's ids carry a prefix of their own, so no id given to
    /// an event before the restore (which a webhook receiver has seen) names
    /// another after it; the ids the copy holds stay as they were, and so do ids
    /// given before runs were told apart.
    #[test]
    fn a_restored_store_never_gives_an_id_twice() {
        let t0 = Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let copy = tempfile::tempdir().unwrap();
        let run = |message: &str| -> Vec<String> {
            let mut opened = Sqlite::open_pair(dir.path()).unwrap();
            let events = [event("n1", false, t0), event("n2", false, t0)];
            let events: Vec<Event> = events
                .into_iter()
                .map(|e| Event {
                    message: message.into(),
                    ..e
                })
                .collect();
            let batch = Batch {
                events: &events,
                trust: "{}".into(),
                ..Batch::default()
            };
            opened.writer.write(&batch).unwrap()
        };
        let shown = |node: &str| -> Vec<(String, String)> {
            let store = Sqlite::open(dir.path()).unwrap();
            let query = EventQuery {
                page_size: 100,
                ..EventQuery::default()
            };
            let page = store.events(node, &query).unwrap();
            page.events
                .into_iter()
                .map(|e| (e.id, e.event.message))
                .collect()
        };
        let first = run("first");
        let backup = |from: &Path, to: &Path| {
            for f in ["hale.db", "hale.db-wal"] {
                let _ = std::fs::remove_file(to.join(f));
                if from.join(f).exists() {
                    std::fs::copy(from.join(f), to.join(f)).unwrap();
                }
            }
            let _ = std::fs::remove_file(to.join("hale.db-shm"));
        };
        backup(dir.path(), copy.path());
        let lost = run("lost");
        backup(copy.path(), dir.path());
        let after = run("after");
        let seq = |id: &str| id.rsplit_once('-').unwrap().1.to_string();
        assert_eq!(
            after.iter().map(|i| seq(i)).collect::<Vec<_>>(),
            lost.iter().map(|i| seq(i)).collect::<Vec<_>>(),
            "numbered again from where the copy stopped"
        );
        for id in &after {
            assert!(
                !lost.contains(id) && !first.contains(id),
                "{id} given twice"
            );
        }
        assert_eq!(
            shown("n1"),
            [
                (first[0].clone(), "first".to_string()),
                (after[0].clone(), "after".to_string())
            ]
        );
        // An earlier version run on the store meanwhile (a rollback) numbers on
        // under the store's own prefix, as it shows them: the next run of this
        // version keeps those ids, and its own before and after.
        let before = shown("n1");
        let store = Sqlite::open(dir.path()).unwrap();
        let instance = store.instance.clone();
        store
            .conn
            .execute(
                "INSERT INTO events (node_id, type, occurred_at, body) SELECT node_id, type, occurred_at, body FROM events WHERE node_id = 'n1' ORDER BY seq DESC LIMIT 1",
                [],
            )
            .unwrap();
        let rolled_back = store.conn.last_insert_rowid();
        drop(store);
        let again = run("again");
        let now = shown("n1");
        assert_eq!(now[..before.len()], before[..], "ids given before stay");
        assert_eq!(
            now[before.len()].0,
            format!("{instance}-{rolled_back}"),
            "as the earlier version gave it"
        );
        assert_eq!(now[before.len() + 1].0, again[0]);
        assert!(!again[0].starts_with(&format!("{instance}-")), "{again:?}");
        // The same after a run of this version that recorded nothing, and after an
        // earlier version that gave its runs prefixes of its own: its ids stay.
        let recorded_by_an_earlier = |prefix: Option<&str>| -> String {
            let store = Sqlite::open(dir.path()).unwrap();
            let next: i64 = store
                .conn
                .query_row("SELECT MAX(seq) + 1 FROM events", [], |r| r.get(0))
                .unwrap();
            if let Some(prefix) = prefix {
                store
                    .conn
                    .execute(
                        "INSERT OR REPLACE INTO epochs (first_seq, instance) VALUES (?1, ?2)",
                        params![next, prefix],
                    )
                    .unwrap();
            }
            store
                .conn
                .execute(
                    "INSERT INTO events (node_id, type, occurred_at, body) SELECT node_id, type, occurred_at, body FROM events WHERE node_id = 'n1' ORDER BY seq DESC LIMIT 1",
                    [],
                )
                .unwrap();
            format!("{}-{next}", prefix.unwrap_or(&instance))
        };
        let ids = || -> Vec<String> { shown("n1").into_iter().map(|(id, _)| id).collect() };
        let first = recorded_by_an_earlier(None);
        drop(Sqlite::open_pair(dir.path()).unwrap());
        let second = recorded_by_an_earlier(None);
        run("later");
        let later = ids();
        assert_eq!(
            later[later.len() - 3..later.len() - 1],
            [first, second],
            "{later:?}"
        );
        let aware = recorded_by_an_earlier(Some("0ld0ld00"));
        run("last");
        let last = ids();
        assert_eq!(last[last.len() - 2], aware, "{last:?}");
        // A store written before runs were told apart: its events keep the ids
        // its instance gave them.
        let store = Sqlite::open(dir.path()).unwrap();
        store.conn.execute("DROP TABLE epochs", []).unwrap();
        let old = shown("n1");
        assert!(
            old.iter()
                .all(|(id, _)| id.starts_with(&format!("{}-", store.instance))),
            "{old:?}"
        );
    }

    /// Writes that never stop leave every checkpoint short of the log's end (here
    /// a reader pins it, as a write landing meanwhile does): the writer makes a
    /// long log start over after its next commit, once no reader holds it.
    #[test]
    fn a_long_log_starts_over_under_steady_writes() {
        let wal = |dir: &Path| std::fs::metadata(dir.join("hale.db-wal")).unwrap().len();
        let t0 = Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut writer = Sqlite::open(dir.path()).unwrap();
        writer.defer_checkpoints().unwrap();
        let mut upkeep = Sqlite::open(dir.path()).unwrap();
        upkeep.log_long = Arc::clone(&writer.log_long);
        upkeep.log_frames = 10;
        let reader = Sqlite::open(dir.path()).unwrap();
        let read = |reader: &Sqlite| {
            reader.conn.execute_batch("BEGIN").unwrap();
            reader
                .conn
                .query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))
                .unwrap()
        };
        let mut written = 0;
        for round in 0..3 {
            suite::burst(&mut writer, "a", 2_000, t0);
            written += 2_000;
            assert_eq!(read(&reader), written);
            suite::burst(&mut writer, "a", 2_000, t0);
            written += 2_000;
            upkeep.checkpoint().unwrap();
            // Held by the reader: waited for a moment, then left for the next
            // checkpoint.
            suite::burst(&mut writer, "a", 10, t0);
            written += 10;
            assert!(wal(dir.path()) > 0, "round {round}: a reader holds the log");
            reader.conn.execute_batch("COMMIT").unwrap();
            upkeep.checkpoint().unwrap();
            suite::burst(&mut writer, "a", 10, t0);
            written += 10;
            assert_eq!(wal(dir.path()), 0, "round {round}: started over");
        }
        assert_eq!(
            read(&reader),
            written,
            "every event written is there to read"
        );
    }

    #[test]
    fn a_writer_that_defers_checkpoints_leaves_them_to_the_other_connection() {
        let size = |dir: &Path| std::fs::metadata(dir.join(FILE)).unwrap().len();
        let t0 = Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        // Past a 100-page threshold in one write (SQLite's default is 1,000).
        let big = 40_000;
        for defer in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let mut writer = Sqlite::open(dir.path()).unwrap();
            writer
                .conn
                .pragma_update(None, "wal_autocheckpoint", 100)
                .unwrap();
            let maintenance = Sqlite::open(dir.path()).unwrap();
            if defer {
                writer.defer_checkpoints().unwrap();
            }
            let empty = size(dir.path());
            suite::burst(&mut writer, "a", big, t0);
            let written = size(dir.path());
            assert_eq!(
                written > empty,
                !defer,
                "checkpointed in the commit: {written} > {empty}"
            );
            maintenance.checkpoint().unwrap();
            assert!(
                size(dir.path()) > empty,
                "checkpointed by the other connection"
            );
            let page = maintenance
                .events(
                    "a",
                    &EventQuery {
                        page_size: 1,
                        latest: true,
                        ..EventQuery::default()
                    },
                )
                .unwrap();
            assert_eq!(page.events[0].event.message, format!("event {}", big - 1));
        }
    }
}
