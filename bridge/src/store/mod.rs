//! The store port: where node state, the trust record, the policy ledger and the
//! event history live. A store kind is one module behind [`Store`], opened by its
//! arm in `config` (`store.kind`); `sqlite.rs` is the embedded default. A change
//! and the events it caused are written together, so a crash leaves neither
//! without the other.

pub mod nats;
pub mod sqlite;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use crate::core::policy::Moves;
use crate::core::{Event, Fleet, Outcome, Time, spread};

pub use nats::Nats;
pub use sqlite::Sqlite;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    // The cause is said in the message, not chained as a source, so a chain
    // printed whole (`error: …`) does not say it twice.
    #[error("store {path}: cannot create the directory: {cause}")]
    Create {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error(
        "store {path}: cannot be written (its lock file hale.lock: {cause}): every change is recorded there; give this user write access to the directory"
    )]
    LockFile {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error(
        "store {path}: in use by {holder}: a store has one writer; stop that one first, or give this one a store.path of its own"
    )]
    InUse { path: PathBuf, holder: String },
    #[error(
        "store {path}: cannot be written ({cause}): every change is recorded there; give this user write access to the file and its directory"
    )]
    ReadOnly {
        path: PathBuf,
        cause: rusqlite::Error,
    },
    #[error(
        "store {path}: the file was removed or replaced under the running hale: nothing recorded since can be kept there; restart hale to open what is at that path now (what it holds only in memory is lost)"
    )]
    Gone { path: PathBuf },
    #[error("store: {op}: {cause}")]
    Sqlite {
        op: &'static str,
        cause: rusqlite::Error,
    },
    #[error("store: {what} has an unreadable record: {cause}")]
    Corrupt {
        what: String,
        cause: serde_json::Error,
    },
    #[error(
        "store: {op}: the disk under the store is full ({cause}): free space there, or shorten store.eventRetentionDays"
    )]
    DiskFull {
        op: &'static str,
        cause: rusqlite::Error,
    },
    #[error("store: {op}: {cause}")]
    Nats { op: &'static str, cause: String },
    #[error(
        "store {store}: holds part of a `hale store copy` that did not finish: {empty} and copy again"
    )]
    PartCopied { store: String, empty: String },
    #[error(
        "store: {op}: JetStream has no room or too few servers ({cause}): raise the server's max_file_store or the account's limit, shorten store.eventRetentionDays, or check that store.nats.replicas is no more than the servers in the cluster"
    )]
    Full { op: &'static str, cause: String },
    #[error(
        "store: {what} was changed by another writer since this one loaded it: nothing written over it; the store is loaded again before the next write"
    )]
    Conflict { what: String },
}

impl StoreError {
    /// Low-cardinality label for failure counters.
    /// Every value [`StoreError::metric_label`] returns.
    pub const METRIC_LABELS: [&'static str; 8] = [
        "create", "in_use", "gone", "sqlite", "corrupt", "nats", "full", "conflict",
    ];

    pub fn metric_label(&self) -> &'static str {
        match self {
            StoreError::Create { .. }
            | StoreError::LockFile { .. }
            | StoreError::ReadOnly { .. } => "create",
            StoreError::InUse { .. } => "in_use",
            StoreError::Gone { .. } => "gone",
            StoreError::Sqlite { .. } => "sqlite",
            StoreError::Corrupt { .. } | StoreError::PartCopied { .. } => "corrupt",
            StoreError::Nats { .. } => "nats",
            StoreError::Full { .. } | StoreError::DiskFull { .. } => "full",
            StoreError::Conflict { .. } => "conflict",
        }
    }
}

/// Everything one step asks the store to write, serialised while the fleet was locked;
/// its events borrowed from the step's outcome, never copied.
#[derive(Debug, Default)]
pub struct Batch<'e> {
    /// (node id, JSON record) for every node whose evidence changed.
    pub nodes: Vec<(String, String)>,
    /// Report and heartbeat times of nodes that only reported: a small row each, so a
    /// steady poll of a large fleet does not rewrite every node record.
    pub liveness: Vec<Liveness>,
    pub removed: Vec<String>,
    pub events: &'e [Event],
    /// JSON of the trust record.
    pub trust: String,
    /// JSON of the replacement budget, when it changed.
    pub ledger: Option<String>,
    /// Workload owners' restart counts that changed (`None`: forgotten).
    pub restarts: Vec<(String, Option<Moves>)>,
}

impl<'e> Batch<'e> {
    /// The writes `outcome` calls for, read from `fleet` after the step.
    pub fn of(fleet: &Fleet, outcome: &'e Outcome) -> Batch<'e> {
        let dirty: Vec<&crate::core::Node> = outcome
            .dirty
            .iter()
            .filter_map(|id| fleet.nodes.get(id))
            .map(|n| &**n)
            .collect();
        // 10,000 records (30 MiB) take 74 ms on one core, while the fleet is locked.
        let nodes = spread::map(&dirty, |n| (n.id.clone(), json(n)));
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
            events: &outcome.events,
            trust: json(&fleet.trust),
            ledger: outcome.ledger.then(|| json(&fleet.ledger)),
            restarts: outcome
                .moved
                .iter()
                .map(|owner| (owner.clone(), fleet.ledger.moves.get(owner).copied()))
                .collect(),
        }
    }
}

/// A record as JSON, as `serde_json` writes it, written by sonic-rs: its
/// vectorised string escaping serialises the node records of a first poll in a
/// quarter fewer instructions. The text is the same byte for byte (tested), so
/// what is stored does not depend on which of them wrote it.
///
/// Each is written into its thread's one buffer and copied out at its length: a
/// string grown from empty moves a few times on the way to its size (a node record
/// is ~3 KiB), each time into memory new to the process, which the kernel then
/// zeroes; 41,000 event bodies took three times as long so.
pub(crate) fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    thread_local! {
        static BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    }
    // Taken out while in use: a record serialised within another's gets a new one.
    let mut buffer = BUFFER.take();
    buffer.clear();
    sonic_rs::to_writer(&mut buffer, value).expect("records serialise");
    let text = String::from_utf8(buffer.clone()).expect("JSON is UTF-8");
    // A rare large record (a node with thousands of conditions) is not held on to.
    if buffer.capacity() <= BUFFER_KEPT {
        BUFFER.set(buffer);
    }
    text
}

/// The most a thread's JSON buffer keeps between records.
const BUFFER_KEPT: usize = 64 << 10;

/// The times a report moves, in unix milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Liveness {
    pub id: String,
    pub last_report: Option<i64>,
    pub last_heartbeat: Option<i64>,
}

/// An event as stored and as the API and webhooks render it: with its id.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredEvent {
    pub id: String,
    #[serde(flatten)]
    pub event: Event,
}

/// Which events of a node to read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventQuery {
    /// Inclusive, unix milliseconds.
    pub since: Option<i64>,
    /// Exclusive, unix milliseconds.
    pub until: Option<i64>,
    /// Event type names; empty means all.
    pub types: Vec<String>,
    pub page_size: usize,
    /// Continue after this position (from a previous page's token).
    pub after: Option<i64>,
    /// The newest page instead of the oldest; no continuation.
    pub latest: bool,
}

/// One page of events, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct EventPage {
    pub events: Vec<StoredEvent>,
    /// Position to continue after, when more events match.
    pub next: Option<i64>,
}

/// A trust record that does not read is not worth refusing to start over — it
/// is rebuilt from the next answers — but is said: its hold and staleness are lost.
fn unreadable_trust(e: &serde_json::Error) {
    tracing::warn!(
        error = %e,
        "the stored trust record is unreadable: starting from a new one (staleness counts from now, no hold is carried over)"
    );
}

/// What a store kind does. `hale serve` holds two handles on one store: the
/// writer, on the path of every step, and one for the reads and upkeep that
/// should not wait for it ([`Opened`]).
pub trait Store: Send {
    /// The fleet as last written, watching from `now`.
    fn load(&self, now: Time) -> Result<Fleet>;
    /// Write one step's changes and events together; the ids the events were
    /// stored under, in their order.
    fn write(&mut self, batch: &Batch<'_>) -> Result<Vec<String>>;
    /// Every event since `since` (unix ms), oldest first: the backtest's input.
    fn history(&self, since: i64) -> Result<Vec<Event>>;
    /// One page of a node's events.
    fn events(&self, node_id: &str, q: &EventQuery) -> Result<EventPage>;
    /// Whether any event names `node_id`.
    fn has_events(&self, node_id: &str) -> Result<bool>;
    /// Delete events older than `cutoff` (unix ms), at most `batch` at a time so a
    /// writer waits for one short batch at most. Returns how many went.
    fn sweep(&mut self, cutoff: i64, batch: usize) -> Result<usize>;
    /// Upkeep on a timer, off the write path.
    fn upkeep(&self) -> Result<()>;
    /// Bytes the store occupies.
    fn bytes_used(&self) -> u64;

    /// Make a shared store's settings (retention, copies) this replica's
    /// configuration's, as the leader does on taking the lead; what changed, to
    /// be said. A store of one replica's own has none to settle.
    fn settle(&mut self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
    /// Remove the events of a write its process never finished (it stopped after
    /// the events and before the state that goes with them), as the leader does on
    /// taking the lead, before its first write: how many went. A store that writes
    /// a step in one transaction has none.
    fn void_unfinished(&mut self) -> Result<u64> {
        Ok(0)
    }
    /// The most the store's server will hold, where it says (JetStream's account
    /// limit), as of the last upkeep.
    fn limit(&self) -> Option<u64> {
        None
    }
    /// Whether other replicas share this store: then only the leader writes, and
    /// the others follow what it wrote.
    fn shared(&self) -> bool {
        false
    }
    /// The replica that leads on this store now, where the store keeps the lease
    /// (a shared one): a copy of a store being written is refused. A store of one
    /// replica's own is locked by it instead.
    fn leader(&self) -> Result<Option<String>> {
        Ok(None)
    }
    /// A number that changes whenever the state is written, so a follower reloads
    /// only when there is something new.
    fn revision(&self) -> Result<u64> {
        Ok(0)
    }
    /// Mark the store as holding part of a copy, or clear the mark: `hale store
    /// copy` sets it before it writes anything and clears it once all is written.
    fn mark_copying(&mut self, copying: bool) -> Result<()>;
    /// Whether a copy into this store began and did not finish: served, it would
    /// lack nodes or events and say nothing of it.
    fn copying(&self) -> Result<bool>;
}

/// A store opened for `hale serve`: the writer and the handle for reads and upkeep.
pub struct Opened {
    pub writer: Box<dyn Store>,
    pub upkeep: Box<dyn Store>,
    /// A store shared by replicas offers a lease to elect their leader by, for an
    /// orchestrator that elects none.
    pub lease: Option<nats::Lease>,
    /// Webhooks are delivered from the store's own record of events, so a restart
    /// (or the next leader) resumes the deliveries where they stopped.
    pub outbox: Arc<dyn Outbox>,
}

/// A boxed future, for the async parts of the outbox port.
pub type Fut<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Outbound webhook deliveries read from the store's events: one feed per endpoint
/// that resumes after the last event it acknowledged.
pub trait Outbox: Send + Sync {
    /// The feed of the endpoint `key` names. One this store has never seen starts
    /// with the events stored from `since` (when its delivery task began).
    /// `types`: only events of these types (all when `None`); `backlog`: at most
    /// this many wait, the oldest beyond them skipped and counted, where the
    /// store keeps a place of its own (a shared stream is the queue itself).
    fn feed<'a>(
        &'a self,
        key: &'a str,
        since: Time,
        types: Option<&'a BTreeSet<String>>,
        backlog: usize,
    ) -> Fut<'a, Result<Box<dyn Feed>>>;
    /// Events were written: feeds waiting for them look at once.
    fn written(&self) {}
    /// Forget the feed of every endpoint but `keys` (those configured now): one
    /// removed and later added back starts afresh, as a new one does, rather
    /// than being sent what was stored meanwhile. How many were forgotten.
    fn retain<'a>(&'a self, keys: &'a [String]) -> Fut<'a, Result<usize>>;
    /// Whether every replica reads these feeds (only the leader changes them).
    fn shared(&self) -> bool {
        false
    }
}

/// One endpoint's feed.
pub trait Feed: Send + Sync {
    /// The next events to deliver, in order, waiting up to `wait` for one.
    fn next(&mut self, wait: std::time::Duration) -> Fut<'_, Result<Fetched>>;
    /// This replica does not lead, and delivers none of it: on a store of its own,
    /// the place moves to the newest event (the leader delivers them from its own
    /// record); a shared feed is the leader's to move.
    fn pass(&mut self) -> Fut<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// What a feed handed out: events to deliver, each acknowledged once delivered or
/// given up, how many waiting events it skipped past its backlog, and how many
/// more wait behind those handed out.
#[derive(Default)]
pub struct Fetched {
    pub events: Vec<Box<dyn Pending>>,
    pub overflowed: u64,
    pub waiting: u64,
}

/// An event handed out for delivery.
pub trait Pending: Send + Sync {
    /// `None`: its record cannot be read; it is acknowledged unsent.
    fn event(&self) -> Option<&StoredEvent>;
    /// Done with it: it is not handed out again.
    fn ack(&self) -> Fut<'_, Result<()>>;
    /// Still delivering: not to be handed to another deliverer yet.
    fn progress(&self) -> Fut<'_, ()> {
        Box::pin(async {})
    }
}

/// What every store kind must do, run by each kind's tests against a real
/// instance of it.
#[cfg(test)]
pub(crate) mod suite {
    use std::collections::BTreeSet;
    use std::path::Path;

    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::core::{EventKind, Node};

    /// Opens the store kind under test at a place (a fresh temporary directory
    /// per test; opened again at the same place, the same store).
    pub type Open<'a> = &'a dyn Fn(&Path) -> Box<dyn Store>;

    pub fn a_batch_round_trips_and_removal_keeps_events(open: Open) {
        let dir = tempfile::tempdir().unwrap();
        let now = Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        let mut fleet = Fleet::new(now);
        let mut node = Node::new("rack1/n:3");
        node.last_report = Some(now);
        fleet.nodes.insert(node.id.clone(), Box::new(node));
        fleet.trust.last_trusted = Some(now);
        fleet.trust.source_up = true;
        let event = Event {
            node_id: "rack1/n:3".into(),
            kind: EventKind::NodeDecommissioned {
                by: "operator".into(),
            },
            occurred_at: now,
            message: "m".into(),
        };
        let outcome = Outcome {
            events: vec![event.clone()],
            dirty: BTreeSet::from(["rack1/n:3".to_string()]),
            ..Outcome::default()
        };
        let mut store = open(dir.path());
        store.write(&Batch::of(&fleet, &outcome)).unwrap();
        drop(store);

        let store = open(dir.path());
        let later = now + chrono::TimeDelta::hours(1);
        let loaded = store.load(later).unwrap();
        assert_eq!(loaded.nodes, fleet.nodes);
        assert_eq!(loaded.trust.last_trusted, Some(now));
        assert_eq!(loaded.trust.watching_since, later);
        // As the writer last saw the source: a follower shows it; one that asks
        // the source itself takes the record up.
        assert!(loaded.trust.source_up);
        let all = EventQuery {
            page_size: 100,
            ..EventQuery::default()
        };
        let page = store.events("rack1/n:3", &all).unwrap();
        assert_eq!(page.events.len(), 1);
        assert_eq!(page.events[0].event, event);
        assert!(store.has_events("rack1/n:3").unwrap());
        assert!(store.bytes_used() > 0);

        let mut store = store;
        let gone = Outcome {
            removed: vec!["rack1/n:3".into()],
            ..Outcome::default()
        };
        store.write(&Batch::of(&Fleet::new(now), &gone)).unwrap();
        assert!(store.load(now).unwrap().nodes.is_empty());
        let page = store.events("rack1/n:3", &all).unwrap();
        assert_eq!(page.events[0].event, event, "events outlive the node");
    }

    /// The replacement budget and the restart counts a writer recorded are what
    /// the next writer (a new leader, a restarted hale) loads: the budget spent
    /// stays spent.
    /// A fleet of thousands comes back whole, with the step's events: each node
    /// under its own id, as written, and every event once. A first poll of such a
    /// fleet writes thousands of events in one step (more than the NATS client lets
    /// wait for an acknowledgement at once).
    pub fn a_large_fleet_comes_back_whole(open: Open) {
        let dir = tempfile::tempdir().unwrap();
        let now = Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        let mut fleet = Fleet::new(now);
        let mut events = Vec::new();
        for i in 0..5_000 {
            let mut node = Node::new(&format!("rack{}/n-{i:04}", i % 7));
            node.last_report = Some(now - chrono::TimeDelta::seconds(i));
            node.hostname = Some(format!("host-{i}"));
            for score in [90, 80] {
                events.push(Event {
                    node_id: node.id.clone(),
                    kind: EventKind::ScoreChanged {
                        score,
                        previous_score: 100,
                        scored_by: "cluster".into(),
                    },
                    occurred_at: now,
                    message: format!("scored {score}"),
                });
            }
            fleet.nodes.insert(node.id.clone(), Box::new(node));
        }
        let outcome = Outcome {
            dirty: fleet.nodes.keys().cloned().collect(),
            events,
            ..Outcome::default()
        };
        let ids = open(dir.path())
            .write(&Batch::of(&fleet, &outcome))
            .unwrap();
        assert_eq!(open(dir.path()).history(0).unwrap(), outcome.events);
        // The ids the write gave are the ones each node's history shows (SQLite
        // writes 256 rows a statement: these nodes' events straddle the first seam
        // and the last, and are among the 16 written one at a time).
        assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), ids.len());
        let store = open(dir.path());
        for i in [0, 127, 128, 4991, 4992, 4999] {
            let page = store
                .events(
                    &outcome.events[2 * i].node_id,
                    &EventQuery {
                        page_size: 10,
                        ..EventQuery::default()
                    },
                )
                .unwrap();
            let shown: Vec<_> = page.events.iter().map(|e| &e.id).collect();
            assert_eq!(shown, [&ids[2 * i], &ids[2 * i + 1]], "node {i}");
        }
        let loaded = open(dir.path()).load(now).unwrap();
        assert_eq!(loaded.nodes.len(), fleet.nodes.len());
        for (id, node) in &fleet.nodes {
            let back = &loaded.nodes[id];
            assert_eq!(back.id, *id);
            assert_eq!(back.hostname, node.hostname);
            assert_eq!(back.last_report, node.last_report);
        }
        // Every node reported and nothing else changed: their report times alone
        // are written, and come back.
        for node in fleet.nodes.values_mut() {
            node.last_report = Some(now + chrono::TimeDelta::seconds(30));
        }
        let reported = Outcome {
            touched: fleet.nodes.keys().cloned().collect(),
            ..Outcome::default()
        };
        let batch = Batch::of(&fleet, &reported);
        assert_eq!((batch.nodes.len(), batch.liveness.len()), (0, 5_000));
        open(dir.path()).write(&batch).unwrap();
        let loaded = open(dir.path()).load(now).unwrap();
        for (id, node) in &fleet.nodes {
            assert_eq!(loaded.nodes[id].last_report, node.last_report, "{id}");
        }
    }

    pub fn the_policy_ledger_outlives_its_writer(open: Open) {
        let dir = tempfile::tempdir().unwrap();
        let now = Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        let mut fleet = Fleet::new(now);
        let spent: Vec<crate::core::Time> = (0..3)
            .map(|i| now - chrono::TimeDelta::minutes(10 * i))
            .collect();
        fleet
            .ledger
            .replacements
            .insert("gpu".into(), spent.clone());
        for (owner, count) in [("ml/trainer", 2), ("ml/old", 1)] {
            fleet.ledger.moves.insert(
                owner.into(),
                Moves {
                    count,
                    last: Some(now),
                },
            );
        }
        let outcome = Outcome {
            ledger: true,
            moved: BTreeSet::from(["ml/trainer".to_string(), "ml/old".to_string()]),
            ..Outcome::default()
        };
        let mut first = open(dir.path());
        first.load(now).unwrap();
        first.write(&Batch::of(&fleet, &outcome)).unwrap();
        // An owner forgotten by a later step.
        fleet.ledger.moves.remove("ml/old");
        let forgot = Outcome {
            moved: BTreeSet::from(["ml/old".to_string()]),
            ..Outcome::default()
        };
        first.write(&Batch::of(&fleet, &forgot)).unwrap();
        drop(first);

        let mut second = open(dir.path());
        let mut next = second.load(now).unwrap();
        assert_eq!(next.ledger.replacements["gpu"], spent);
        assert_eq!(next.ledger.moves.len(), 1, "{:?}", next.ledger.moves);
        assert_eq!(next.ledger.moves["ml/trainer"].count, 2);
        // The forgotten owner moved again, by the next writer.
        next.ledger.moves.insert(
            "ml/old".into(),
            Moves {
                count: 1,
                last: Some(now),
            },
        );
        second.write(&Batch::of(&next, &forgot)).unwrap();
        drop(second);
        let last = open(dir.path()).load(now).unwrap();
        assert_eq!(last.ledger.moves["ml/old"].count, 1);
    }

    /// A copy's mark outlives its writer until the copy clears it.
    pub fn a_copys_mark_is_kept_until_cleared(open: Open) {
        let dir = tempfile::tempdir().unwrap();
        assert!(!open(dir.path()).copying().unwrap());
        open(dir.path()).mark_copying(true).unwrap();
        let mut store = open(dir.path());
        assert!(store.copying().unwrap());
        assert!(store.load(Utc::now()).unwrap().nodes.is_empty());
        store.mark_copying(false).unwrap();
        assert!(!open(dir.path()).copying().unwrap());
    }

    pub fn burst(store: &mut dyn Store, node: &str, n: usize, start: crate::core::Time) {
        let events: Vec<Event> = (0..n)
            .map(|i| Event {
                node_id: node.into(),
                kind: if i % 3 == 0 {
                    EventKind::ScoreChanged {
                        score: (i % 100) as u8,
                        previous_score: 100,
                        scored_by: "cluster".into(),
                    }
                } else {
                    EventKind::NodeDecommissioned {
                        by: "operator".into(),
                    }
                },
                occurred_at: start + chrono::TimeDelta::seconds(i as i64),
                message: format!("event {i}"),
            })
            .collect();
        let fleet = Fleet::new(start);
        let batch = Batch {
            events: &events,
            trust: serde_json::to_string(&fleet.trust).unwrap(),
            ..Batch::default()
        };
        store.write(&batch).unwrap();
    }

    pub fn pages_cover_every_event_exactly_once(open: Open) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let t0 = Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        burst(store.as_mut(), "a", 250, t0);
        burst(store.as_mut(), "b", 10, t0);
        type Case = (
            usize,
            Vec<&'static str>,
            Option<i64>,
            Option<i64>,
            Vec<usize>,
        );
        // (page size, types, since offset s, until offset s, expected event numbers)
        let cases: Vec<Case> = vec![
            (7, vec![], None, None, (0..250).collect()),
            (100, vec![], None, None, (0..250).collect()),
            (250, vec![], None, None, (0..250).collect()),
            (
                9,
                vec!["SCORE_CHANGED"],
                None,
                None,
                (0..250).step_by(3).collect(),
            ),
            (10, vec![], Some(100), Some(120), (100..120).collect()),
            (
                4,
                vec!["SCORE_CHANGED", "NODE_DECOMMISSIONED"],
                Some(245),
                None,
                (245..250).collect(),
            ),
        ];
        let at = |s: i64| (t0 + chrono::TimeDelta::seconds(s)).timestamp_millis();
        for (size, types, since, until, want) in cases {
            let mut q = EventQuery {
                page_size: size,
                types: types.iter().map(|t| t.to_string()).collect(),
                since: since.map(at),
                until: until.map(at),
                ..EventQuery::default()
            };
            let mut seen = Vec::new();
            let mut pages = 0;
            loop {
                let page = store.events("a", &q).unwrap();
                assert!(page.events.len() <= size);
                pages += 1;
                seen.extend(page.events.iter().map(|e| e.event.message.clone()));
                match page.next {
                    Some(next) => q.after = Some(next),
                    None => break,
                }
            }
            let want: Vec<String> = want.iter().map(|i| format!("event {i}")).collect();
            assert_eq!(seen, want, "size {size} types {types:?}");
            assert_eq!(
                pages,
                want.len().div_ceil(size).max(1),
                "no empty trailing page"
            );
        }
        let latest = store
            .events(
                "a",
                &EventQuery {
                    page_size: 5,
                    latest: true,
                    ..EventQuery::default()
                },
            )
            .unwrap();
        let got: Vec<&str> = latest
            .events
            .iter()
            .map(|e| e.event.message.as_str())
            .collect();
        assert_eq!(
            got,
            [
                "event 245",
                "event 246",
                "event 247",
                "event 248",
                "event 249"
            ]
        );
        assert_eq!(latest.next, None);
        let ids: BTreeSet<_> = latest.events.iter().map(|e| &e.id).collect();
        assert_eq!(ids.len(), 5, "ids are unique");
    }

    pub fn retention_sweep_deletes_only_what_is_old(open: Open) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let t0 = Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        burst(store.as_mut(), "a", 120, t0);
        let cutoff = (t0 + chrono::TimeDelta::seconds(50)).timestamp_millis();
        assert_eq!(store.sweep(cutoff, 7).unwrap(), 50);
        assert_eq!(store.sweep(cutoff, 7).unwrap(), 0);
        let page = store
            .events(
                "a",
                &EventQuery {
                    page_size: 1000,
                    ..EventQuery::default()
                },
            )
            .unwrap();
        assert_eq!(page.events.len(), 70);
        assert_eq!(page.events[0].event.message, "event 50");
    }
}

#[cfg(test)]
mod tests {
    use super::json;
    use crate::core::{Event, EventKind, Node};

    /// Every character, escaped or not, as serde_json writes it.
    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let every: Vec<char> = (0..=0x10FFFF).filter_map(char::from_u32).collect();
        for chunk in every.chunks(97) {
            let text: String = chunk.iter().collect();
            assert_eq!(json(&text), serde_json::to_string(&text).unwrap());
        }
        for odd in [
            "",
            "\"",
            "\\",
            "\u{7f}",
            "a\u{0}b",
            "\u{2028}\u{2029}",
            "</script>",
        ] {
            assert_eq!(json(odd), serde_json::to_string(odd).unwrap(), "{odd:?}");
        }
    }

    /// A node record and events with every kind of field, odd text in each string.
    #[test]
    fn records_are_written_as_serde_json_writes_them() {
        let odd = "GPU \"0\" \\ tab\there\nnew line \u{1} é ✓ 🚀 \u{202e}";
        let record = serde_json::json!({
            "id": odd,
            "labels": {"pool": odd, "zone": "a"},
            "status": "Cordoned",
            "conditions": {
                "gpu_xid_errors": {
                    "reason": odd, "severity": "critical", "message": odd,
                    "charged_message": odd,
                    "first_seen": "2026-12-02T02:10:13.931986420Z",
                    "last_seen": "2026-12-02T02:10:14Z",
                    "observations": 3, "sticky": true, "fault_class": odd,
                    "priority": 2, "remediation": "reboot",
                    "sources": {
                        "6d02471be1099d08": {
                            "reason": odd, "severity": "info", "message": odd,
                            "suppressed": true, "sticky": true, "fault_class": odd,
                            "expires": "2026-12-02T02:15:13.8Z",
                            "since": "2026-12-02T02:10:13.931986Z",
                            "notice": {"alertname": odd, "priority": -4, "message": odd}
                        }
                    }
                }
            },
            "heartbeat": {"last": "2026-12-02T02:10:13.931Z", "interval": 30},
            "unavailable": {"ecc": odd},
            "failures": {"total": 7, "last": "2026-12-02T02:10:13Z",
                         "by_reason": {odd: 7}, "counted_alerts": [odd]},
            "score": {"value": 40, "breakdown": [{"reason": odd, "points": 60}],
                      "scored_by": odd},
            "last_report": "2026-12-02T02:10:13.931986420Z",
            "known_from": "alerts",
            "known_since": "2026-12-02T02:10:13.931986420Z",
            "policy": {"scoredReports": 2, "allocations": 1, "lastAction": 0}
        });
        let node: Node = serde_json::from_value(record).unwrap();
        assert_eq!(node.id, odd, "the record is read whole");
        assert_eq!(json(&node), serde_json::to_string(&node).unwrap());
        // Names held inline (the condition type, the fingerprint) and on the heap
        // (`odd`, past 24 bytes) read back as they were written.
        let back: Node = serde_json::from_str(&json(&node)).unwrap();
        assert_eq!(back, node);
        assert_eq!(back.conditions["gpu_xid_errors"].reason, odd);

        let at = chrono::DateTime::parse_from_rfc3339("2026-12-02T02:10:13.5Z")
            .unwrap()
            .to_utc();
        let kinds = [
            EventKind::ScoreChanged {
                score: 40,
                previous_score: 100,
                scored_by: odd.into(),
            },
            EventKind::JobFailureAttributed {
                job: odd.into(),
                reason: odd.into(),
                total: u64::MAX,
                failed_at: Some(at),
            },
            EventKind::NodeDecommissioned { by: odd.into() },
            EventKind::ConditionRaised {
                condition: odd.into(),
                reason: odd.into(),
                severity: crate::core::Severity::Critical,
                fault_class: Some(odd.into()),
                suppressed: true,
            },
            EventKind::ConditionRaised {
                condition: "c".into(),
                reason: "r".into(),
                severity: crate::core::Severity::Info,
                fault_class: None,
                suppressed: false,
            },
            EventKind::ConditionUpdated {
                condition: odd.into(),
                reason: odd.into(),
                severity: crate::core::Severity::Warning,
                reasons: vec![odd.into(), String::new()],
                alerts: 2,
                suppressed: true,
            },
            EventKind::HeartbeatMissed { last_heartbeat: at },
            EventKind::PolicyActed {
                action: odd.into(),
                policy_mode: "act".into(),
                scored_by: odd.into(),
                score: Some(0),
                waiting_on: Some(3),
            },
            EventKind::NodeDrained {
                by: odd.into(),
                active: true,
                reason: odd.into(),
                moved: 4,
                blocked: 0,
                stopping: 1,
                failed: 0,
            },
            EventKind::NodeReplaced {},
        ];
        for kind in kinds {
            let event = Event {
                node_id: odd.into(),
                kind,
                occurred_at: at,
                message: odd.into(),
            };
            assert_eq!(json(&event), serde_json::to_string(&event).unwrap());
        }
    }
}
