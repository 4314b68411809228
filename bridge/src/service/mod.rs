//! The running service: shared state, the poll and tick loops, and the one path every
//! input takes — apply to the fleet under its lock, then persist the change with its
//! events before anyone sees a newer one.

mod power;

pub use power::{PowerError, PowerReport};

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use chrono::{TimeDelta, Utc};
use tokio::sync::Notify;
use tracing::{debug, error, info, warn};

use crate::Joined as _;
use crate::alertmanager::{self, Answer, IngestError};
use crate::config::{Config, ConfigError, InventoryNode, Loaded};
use crate::core::labels::{Alert, AlertState, Signal};
use crate::core::policy::{Action, Pending};
use crate::core::settings::{CoreSettings, Settings};
use crate::core::{
    CoreError, EventKind, Fleet, Health, Listed, Node, NodeGroups, Outcome, PollAnswer,
    TELEMETRY_STALE, Time, Trust,
};
use crate::election::{Elected, NatsLease};
use crate::federation::Federation;
use crate::fleet_lock::FleetLock;
use crate::liveness::Liveness;
use crate::metrics::{ActionLabel, Metrics, OperationLabel, PathLabel, ReasonLabel, ResultLabel};
use crate::notify::{Durable, Notifier};
use crate::orchestrator::{self, Orchestrator, OrchestratorError, Report, most_urgent};
use crate::store::{Batch, EventPage, EventQuery, Opened, Store, StoreError};
use crate::streak;
use crate::view::{
    ClusterHealth, ClusterView, Halt, Key, NodeList, NodeQuery, NodeSummary, NodeView, Place,
    SeenAlert, Sort, SourceView, holds, page_token, worst_state,
};

/// How often time-driven rules (staleness, missed heartbeats, decay) are evaluated.
const TICK: Duration = Duration::from_secs(1);
/// Nodes a poll applies per hold of the fleet lock.
pub const POLL_SLICE: usize = 1024;
/// How often events past their retention are deleted.
const RETENTION_SWEEP: Duration = Duration::from_secs(3600);
/// How often the store's write-ahead log is copied into the database.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);
/// How often actions still pending (after a transient failure) are tried again.
const ACT_RETRY: Duration = Duration::from_secs(10);
/// How often the nodes' conditions, score and health are compared with what the
/// orchestrator shows (and at once after a change).
const PUBLISH: Duration = Duration::from_secs(10);
/// How often the orchestrator's inventory is taken in without a change to prompt it
/// (whatever the poll interval: a `kubectl uncordon` must be seen without polls).
const INVENTORY: Duration = Duration::from_secs(30);
/// How long after a request `GET /api/v1/alerts` keeps polls building its list.
const ALERTS_WANTED: Duration = Duration::from_secs(600);
/// How long a list fetched for `GET /api/v1/alerts` serves when no poll renews it.
const ALERTS_FRESH: Duration = Duration::from_secs(10);
/// How often a replica on a shared store looks for what the leader wrote.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// How long after a failed write the next is tried: the steps between keep their
/// changes in memory, with the failed one's (the tick steps every second).
const WRITE_RETRY: Duration = Duration::from_secs(1);

/// How long a replica elected but unable to take over (the last leader's
/// unfinished write could not be removed) waits before it tries again.
const TAKEOVER_RETRY: Duration = Duration::from_secs(2);
/// How often a loop with nothing to do still goes round, to show it is alive.
const IDLE_BEAT: Duration = Duration::from_secs(60);
/// What a reload read: the file, its configuration and its text.
type Read = Result<(PathBuf, (Loaded, String)), ConfigError>;

/// How long a poll waits for the orchestrator's inventory before it: half the
/// poll interval, between 1 s and 5 s.
fn inventory_wait(poll_interval: Duration) -> Duration {
    (poll_interval / 2).clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// Shared state of one hale process.
pub struct Hale {
    config: Arc<RwLock<Arc<Loaded>>>,
    fleet: Arc<FleetLock>,
    writer: Mutex<Writer>,
    pub metrics: Metrics,
    poll_now: Notify,
    first_poll_done: AtomicBool,
    /// The last poll could not read Alertmanager's status.
    status_unread: AtomicBool,
    client: RwLock<alertmanager::Client>,
    notifier: RwLock<Notifier>,
    /// The other hales whose clusters this one shows.
    federation: RwLock<Arc<Federation>>,
    /// A second connection for event reads and the retention sweep, so neither waits
    /// behind ingest's writer.
    maintenance: Mutex<Box<dyn Store>>,
    /// Whether the last size check found the store past 90 % of `maxBytes`.
    near_full: AtomicBool,
    /// While a poll is in flight: fingerprints webhook deliveries named meanwhile,
    /// whose word is newer than the answer the poll will bring.
    delivered_during_poll: Mutex<Option<BTreeSet<String>>>,
    /// When the poll's answer now on its way to the fleet arrived
    /// ([`crate::core::Trust::answer_waiting`]).
    answer_in_hand: Mutex<Option<Time>>,
    /// The wall and monotonic clocks at the last step, to tell a step of the wall
    /// clock from time passing.
    clock: Mutex<Option<(std::time::Instant, Time)>>,
    /// When the last step let the fleet go: a step that finds it long ago (the
    /// tick takes one every second) finds hale did not run meanwhile.
    stepped: Mutex<Option<std::time::Instant>>,
    orchestrator: Arc<dyn Orchestrator>,
    /// Nodes whose pending actions are being performed right now.
    acting: Mutex<BTreeSet<String>>,
    /// The inventory a poll stopped waiting for, still under way.
    inventory_task: tokio::sync::Mutex<Option<tokio::task::JoinHandle<bool>>>,
    /// The last failed try of each node's first pending action, while it is still
    /// to be tried again: what the node's view says holds it up (memory only).
    tried: Mutex<HashMap<String, Tried>>,
    /// Actions recorded done or refused, counted under the fleet lock: an inventory
    /// taken before one of them is older than the books and is not applied.
    actions_recorded: AtomicU64,
    /// The orchestrator's inventories failed in a row, to say when it answers again.
    inventory_failures: AtomicU64,
    /// Why the last inventory failed, while they fail: shown on an action no
    /// try has spoken for yet (a leader acts only once it has taken one in).
    inventory_error: Mutex<Option<String>>,
    act_now: Notify,
    publish_now: Notify,
    /// Whether each loop is making progress (`/healthz`).
    pub liveness: Arc<Liveness>,
    /// The receiver's alerts as the last poll read them, kept while someone asks
    /// (`GET /api/v1/alerts`).
    seen: Mutex<SeenAlerts>,
    /// Woken each time a poll has kept its list in `seen`.
    alerts_kept: Notify,
    /// One fetch at a time for `GET /api/v1/alerts` when no poll can answer it.
    fetching: tokio::sync::Mutex<()>,
    /// The blocking alerts as last read (the reboot flow's admission).
    facts: Mutex<crate::core::policy::Facts>,
    /// Whether they have been read since start.
    facts_read: AtomicBool,
    /// Read them again now (an operator asked for a reboot).
    facts_now: Notify,
    /// Whether other replicas share the store: then only the leader writes, after
    /// taking in what the previous one wrote, and the others follow the store.
    shared: bool,
    /// The leadership term whose state this replica took in from the shared store
    /// (`u64::MAX`: none yet).
    synced: AtomicU64,
    /// A takeover that failed is not tried again before this.
    takeover_after: Mutex<Option<Instant>>,
    /// Whether the shared store answered the last read or write.
    store_ok: AtomicBool,
    /// Webhooks delivered from the store's record of events.
    durable: Durable,
    /// Polls that failed or went untrusted in a row, said as a run.
    poll_streak: Mutex<streak::Streak>,
    /// Checkpoints that failed in a row, said as a run.
    upkeep_streak: Mutex<streak::Streak>,
    /// Nodes holding more condition types than they may, said as a run that
    /// never ends: at once, then once a minute.
    crowded_streak: Mutex<streak::Streak>,
    /// New nodes refused past `nodeIdentity.maxNodes`: said once a minute, as
    /// every poll names them again.
    refused_streak: Mutex<streak::Streak>,
}

/// The keys a reload from `current` to `next` changes that only a restart may.
fn restart_only(current: &Config, next: &Config) -> Vec<&'static str> {
    [
        ("listen", next.listen != current.listen),
        ("store", next.store != current.store),
        // The NATS store's stream, buckets and consumers are named by it.
        (
            "cluster",
            next.cluster != current.cluster && next.store.kind == crate::config::StoreKind::Nats,
        ),
        ("orchestrator", next.orchestrator != current.orchestrator),
        // Dropping the token opens every verb to whoever reaches the port: not by
        // a reload, which a file written halfway can trigger.
        (
            "apiTokenFile",
            current.api_token_file.is_some() && next.api_token_file.is_none(),
        ),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

/// The last poll's alerts for `GET /api/v1/alerts`: built by a poll only while asked
/// for within [`ALERTS_WANTED`], so an unread list costs nothing.
#[derive(Default)]
struct SeenAlerts {
    /// When it was read, and the JSON array of [`SeenAlert`]s — or why Alertmanager
    /// could not be read, answered as it is until the next poll: a request never
    /// asks a failing Alertmanager itself.
    alerts: Option<(Instant, Result<axum::body::Bytes, IngestError>)>,
    wanted_until: Option<Instant>,
}

/// Why a step taken for someone waiting on its answer did not go through.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Core(#[from] CoreError),
    #[error(transparent)]
    Input(#[from] IngestError),
    /// Taken in memory; the store did not write it (yet).
    #[error(
        "taken in, but not written to the store ({0}); send it again until it is answered as written"
    )]
    Unwritten(String),
}

/// A pending action's last try, failed and to be tried again.
struct Tried {
    /// The action's id among the node's.
    id: u64,
    error: String,
    at: Time,
    /// When, by the monotonic clock: the action rests `ACT_RETRY` from then.
    since: Instant,
}

/// The store and what it has not managed to write yet.
struct Writer {
    store: Box<dyn Store>,
    /// A step whose write failed; folded into the next write so nothing is lost.
    pending: Option<Outcome>,
    /// Writes that failed in a row, said as a run.
    failing: streak::Streak,
    /// After a write failed, the next is not tried before this, and why the last
    /// failed: each try writes all that is pending, so a try per step would cost
    /// each delivery the whole backlog while the store refuses.
    resting: Option<(std::time::Instant, String)>,
}

/// What a webhook delivery did, for the HTTP answer.
#[derive(Debug, serde::Serialize)]
pub struct WebhookResult {
    pub alerts: usize,
    pub trusted: bool,
    pub unmatched: u64,
    /// New nodes the delivery named beyond `nodeIdentity.maxNodes`, refused.
    pub refused: usize,
}

impl Hale {
    /// Open the store, load the fleet as it was, register the inventory.
    /// Must run inside a Tokio runtime (webhook delivery tasks start here).
    pub fn open(
        loaded: Loaded,
        orchestrator: Arc<dyn Orchestrator>,
    ) -> Result<Arc<Hale>, StoreError> {
        // The maintenance loop keeps the store up; writes under the fleet's locks
        // never do.
        let Opened {
            writer: store,
            upkeep: maintenance,
            lease,
            outbox,
        } = loaded.config.store.open(&loaded.config.cluster)?;
        let nats = matches!(loaded.config.store.kind, crate::config::StoreKind::Nats);
        let store_named = match (nats, &loaded.config.store.nats) {
            (true, Some(nats)) => crate::shown_urls(nats.urls.iter().map(String::as_str)),
            _ => loaded.config.store.path.display().to_string(),
        };
        if store.copying()? {
            let empty = if nats {
                crate::store::nats::Names::of(&loaded.config.cluster).to_empty()
            } else {
                format!("remove {store_named}")
            };
            return Err(StoreError::PartCopied {
                store: store_named,
                empty,
            });
        }
        // Replicas on a shared store elect their leader on it unless the
        // orchestrator elects one (the Kubernetes Lease stays for Kubernetes).
        let orchestrator: Arc<dyn Orchestrator> = match lease {
            Some(lease) if !orchestrator.elects() => Arc::new(Elected {
                inner: orchestrator,
                lease: NatsLease::start(lease, crate::orchestrator::identity()),
            }),
            _ => orchestrator,
        };
        let shared = store.shared();
        let durable = {
            let o = orchestrator.clone();
            Durable {
                outbox,
                leads: Arc::new(move || o.leads()),
                feeds: Arc::default(),
            }
        };
        let now = Utc::now();
        let mut fleet = store.load(now)?;
        fleet.trust.take_up();
        info!(nodes = fleet.nodes.len(), store = %store_named, "state loaded");
        let client = alertmanager::Client::new(&loaded.config.alertmanager);
        let metrics_config = Arc::new(RwLock::new(Arc::new(loaded)));
        let fleet = Arc::new(FleetLock::new(fleet));
        let metrics = Metrics::new(fleet.clone(), metrics_config.clone(), orchestrator.clone());
        let config = metrics_config;
        let loaded = config.read().expect("config lock").clone();
        let liveness = Arc::new(Liveness::default());
        let notifier = Notifier::start(
            &loaded.config.cluster,
            &loaded.webhooks,
            &metrics.webhooks,
            &liveness,
            &durable,
        );
        if let Some(max) = loaded.config.store.max_bytes {
            metrics.store_bytes_max.set(max as i64);
        }
        metrics.config_reload_successful.set(1);
        metrics.config_reload_success_at.set(Utc::now().timestamp());
        metrics
            .remediation_in_flight
            .set(fleet.lock().remediations_in_flight() as i64);
        let hale = Arc::new(Hale {
            metrics,
            config,
            fleet,
            writer: Mutex::new(Writer {
                store,
                pending: None,
                failing: streak::Streak::default(),
                resting: None,
            }),
            poll_now: Notify::new(),
            first_poll_done: AtomicBool::new(false),
            status_unread: AtomicBool::new(false),
            client: RwLock::new(client),
            notifier: RwLock::new(notifier),
            federation: RwLock::new(Arc::new(Federation::new(&loaded))),
            maintenance: Mutex::new(maintenance),
            near_full: AtomicBool::new(false),
            delivered_during_poll: Mutex::new(None),
            answer_in_hand: Mutex::new(None),
            clock: Mutex::new(None),
            stepped: Mutex::new(None),
            orchestrator,
            acting: Mutex::new(BTreeSet::new()),
            tried: Mutex::new(HashMap::new()),
            inventory_task: tokio::sync::Mutex::new(None),
            actions_recorded: AtomicU64::new(0),
            inventory_failures: AtomicU64::new(0),
            inventory_error: Mutex::new(None),
            act_now: Notify::new(),
            publish_now: Notify::new(),
            liveness,
            seen: Mutex::new(SeenAlerts::default()),
            alerts_kept: Notify::new(),
            fetching: tokio::sync::Mutex::new(()),
            facts: Mutex::new(Default::default()),
            facts_read: AtomicBool::new(false),
            facts_now: Notify::new(),
            shared,
            synced: AtomicU64::new(u64::MAX),
            takeover_after: Mutex::new(None),
            store_ok: AtomicBool::new(true),
            durable,
            poll_streak: Mutex::default(),
            upkeep_streak: Mutex::default(),
            crowded_streak: Mutex::default(),
            refused_streak: Mutex::default(),
        });
        hale.register_inventory();
        Ok(hale)
    }

    /// Register the configuration's static inventory (nodes already known stay
    /// as they are).
    fn register_inventory(&self) {
        let inventory: Vec<Listed> = self
            .config()
            .config
            .inventory
            .iter()
            .map(InventoryNode::listed)
            .collect();
        // Nothing automation queued in a pool that observes is done: a stop, or
        // another leader, may lie between the decision and now.
        self.apply(|fleet, cfg, now| {
            let mut out = fleet.register(cfg, now, &inventory);
            out.absorb(fleet.observe_withdraws(cfg, now));
            Ok(out)
        })
        .expect("registering cannot fail");
    }

    /// The federation members as configured now.
    pub fn federation(&self) -> Arc<Federation> {
        self.federation.read().expect("federation lock").clone()
    }

    pub fn config(&self) -> Arc<Loaded> {
        self.config.read().expect("config lock").clone()
    }

    fn lock_fleet(&self) -> MutexGuard<'_, Fleet> {
        self.fleet.lock()
    }

    /// Run `work`, which waits on the fleet or the writer lock, from async code. A
    /// poll's step holds the fleet lock and its write the writer lock for seconds
    /// at 100,000 nodes, and a runtime worker waiting on either serves nothing
    /// meanwhile — with one worker per core, two such waits stop every request and
    /// webhook — so `work` runs on a blocking thread.
    pub async fn off_runtime<T, F>(self: &Arc<Self>, work: F) -> T
    where
        F: FnOnce(&Self) -> T + Send + 'static,
        T: Send + 'static,
    {
        let this = self.clone();
        tokio::task::spawn_blocking(move || work(&this))
            .joined()
            .await
    }

    /// Run one step of the core and persist its outcome. The fleet lock is held until
    /// the writer lock is taken, so writes land in the order steps happened. The
    /// step's events move to the store; the outcome returned keeps the rest. A
    /// change the store did not take stays in memory, written with the next step.
    pub fn apply<F>(&self, step: F) -> Result<Outcome, CoreError>
    where
        F: FnOnce(&mut Fleet, &CoreSettings, Time) -> Result<Outcome, CoreError>,
    {
        self.step(step).map(|(outcome, _)| outcome)
    }

    /// [`Hale::apply`] for a step taken for someone waiting on its answer (an
    /// Alertmanager delivery, an operator's verb): a change the store did not
    /// take is an error, so that they send it again rather than take it as kept —
    /// a stop before the store takes it would lose it.
    pub fn apply_durable<F>(&self, step: F) -> Result<Outcome, StepError>
    where
        F: FnOnce(&mut Fleet, &CoreSettings, Time) -> Result<Outcome, CoreError>,
    {
        match self.step(step)? {
            (outcome, None) => Ok(outcome),
            (_, Some(why)) => Err(StepError::Unwritten(why)),
        }
    }

    /// [`Hale::apply`], and why the step's change is not in the store yet, if it
    /// is not.
    fn step<F>(&self, step: F) -> Result<(Outcome, Option<String>), CoreError>
    where
        F: FnOnce(&mut Fleet, &CoreSettings, Time) -> Result<Outcome, CoreError>,
    {
        // On a shared store only the leader that took in the store's state writes.
        // A step of the clock meanwhile is in what the next leader loads, not
        // this replica's to apply again when it leads.
        if !self.writes() {
            self.clock.lock().expect("clock lock").take();
            self.stepped.lock().expect("stepped lock").take();
            return Ok((Outcome::default(), None));
        }
        let mut fleet = self.lock_fleet();
        // Declared after the fleet's guard, so dropped before it: the time is taken
        // as the step lets the fleet go, however it returns.
        let _done = StepDone(&self.stepped);
        // Read under the fleet lock, which a reload holds while it swaps them.
        let cfg = self.config();
        let now = Utc::now();
        fleet.trust.answer_waiting = *self.answer_in_hand.lock().expect("answer lock");
        if let Some(gap) = self.did_not_run() {
            warn!(
                seconds = gap.as_secs(),
                "hale did not run for {} s (the process was stopped, or starved of CPU): what it did not watch is no evidence, so staleness and missed heartbeats wait for the next poll, as after a restart",
                gap.as_secs()
            );
            fleet.trust.watch_again(now);
        }
        let stepped = self.clock_stepped(now).map(|by| {
            warn!(
                by_seconds = by.num_seconds(),
                "the clock stepped {}: what hale recorded moves with it, so no window, hold, timeout or budget changes length",
                if by > TimeDelta::zero() { "forward" } else { "back" }
            );
            fleet.clock_stepped(by)
        });
        let shown = shown_trust(&fleet.trust);
        let was_stale = fleet.trust.stale;
        let mut outcome = match step(&mut fleet, &cfg.core, now) {
            Ok(outcome) => outcome,
            Err(e) => {
                // The shift stands in the fleet though the step was refused: it is
                // written with the next step, as a write that failed is.
                if let Some(mut moved) = stepped {
                    let mut writer = self.writer.lock().expect("writer lock");
                    let mut todo = writer.pending.take().unwrap_or_default();
                    todo.absorb(moved.take_writes());
                    writer.pending = Some(todo);
                }
                return Err(e);
            }
        };
        if let Some(moved) = stepped {
            outcome.absorb(moved);
        }
        // What the trust record says changed: written though nothing else did, so a
        // restart keeps a hold and followers show the source as it is.
        let trust_changed = shown_trust(&fleet.trust) != shown;
        if let Some(back) = outcome.clock_back {
            warn!(
                back_seconds = back.num_seconds(),
                "the clock went back: what hale recorded ahead of it (heartbeats, holds, flow steps, budgets) counts from now"
            );
        }
        if let Some(why) = &outcome.held {
            warn!(
                until = %fleet.trust.hold_until.map(|t| t.to_rfc3339()).unwrap_or_default(),
                "{why}: no condition ends because its alert is absent until then (holdAfterRestart)"
            );
        }
        if !outcome.refused.is_empty() {
            self.metrics
                .nodes_refused
                .inc_by(outcome.refused.len() as u64);
            let said = self
                .refused_streak
                .lock()
                .expect("refused streak lock")
                .failed("refused", std::time::Instant::now());
            if let Some(said) = said {
                let some: Vec<&str> = outcome.refused.iter().take(5).map(String::as_str).collect();
                warn!(
                    refused = outcome.refused.len(),
                    first = %some.join(", "),
                    max = cfg.config.node_identity.max_nodes,
                    steps_refusing = said.failures,
                    "alerts name more nodes than nodeIdentity.maxNodes allows: the new ones are refused (said once a minute; hale_nodes_refused_total counts each)"
                );
            }
        }
        let say_crowded = || {
            self.crowded_streak
                .lock()
                .expect("crowded streak lock")
                .failed("crowded", std::time::Instant::now())
                .is_some()
        };
        if !outcome.crowded.is_empty() && say_crowded() {
            let some: Vec<String> = outcome
                .crowded
                .iter()
                .take(5)
                .map(|(id, count)| format!("{id} ({count})"))
                .collect();
            warn!(
                nodes = outcome.crowded.len(),
                first = %some.join(", "),
                max = crate::core::MAX_CONDITIONS,
                "alerts raise more condition types on a node than it holds: the least telling are not taken (a rule naming hale_condition from a label of many values?)"
            );
        }
        self.count_remediations(&fleet, &outcome);
        let acting = outcome.dirty.iter().any(|id| {
            fleet
                .nodes
                .get(id)
                .is_some_and(|n| !n.policy.pending.is_empty())
        });
        let unchanged = !trust_changed
            && outcome.events.is_empty()
            && outcome.dirty.is_empty()
            && outcome.touched.is_empty()
            && outcome.removed.is_empty();
        let mut writer = self.writer.lock().expect("writer lock");
        // Even a step that changed nothing retries a write that failed before.
        if unchanged && writer.pending.is_none() {
            return Ok((outcome, None));
        }
        log_events(&outcome, was_stale);
        let mut todo = writer.pending.take().unwrap_or_default();
        todo.absorb(outcome.take_writes());
        // A leadership that lapsed while this step waited for the writer (behind
        // a write NATS did not answer): nothing more is sent, as another replica
        // may lead by now; the change is kept as one not written (see `follow`).
        if !self.writes() {
            writer.pending = Some(todo);
            return Ok((
                outcome,
                Some("this replica stopped leading before it could write it".into()),
            ));
        }
        if let Some((until, why)) = &writer.resting
            && std::time::Instant::now() < *until
        {
            let why = why.clone();
            writer.pending = Some(todo);
            return Ok((outcome, Some(why)));
        }
        let batch = Batch::of(&fleet, &todo);
        drop(fleet);
        let (nodes, events) = (batch.nodes.len(), batch.events.len());
        let mut unwritten = None;
        match writer.store.write(&batch) {
            Ok(_) => {
                self.store_ok.store(true, Ordering::Relaxed);
                writer.resting = None;
                if let Some(run) = writer.failing.succeeded(std::time::Instant::now()) {
                    info!(
                        failed_writes = run.failures,
                        for_s = run.for_s,
                        nodes,
                        events,
                        "the store writes again: what was kept in memory is written"
                    );
                }
                // The delivery tasks read the events from the store.
                if events > 0 {
                    self.notifier.read().expect("notifier lock").written();
                }
                if nodes > 0 {
                    self.publish_now.notify_one();
                }
                // Only a decision on disk is acted upon.
                if acting {
                    self.act_now.notify_one();
                }
            }
            // Another writer changed the ledger since this one loaded it (a
            // deposed leader's late write, or an acknowledgement lost on the way):
            // load the store again before writing or acting.
            Err(e @ StoreError::Conflict { .. }) => {
                error!(error = %e, "the shared store changed under this writer: loading it again before writing");
                self.metrics
                    .store_write_failures
                    .get_or_create(&ReasonLabel {
                        reason: e.metric_label().into(),
                    })
                    .inc();
                writer.pending = None;
                self.synced.store(u64::MAX, Ordering::Release);
                unwritten = Some(e.to_string());
            }
            Err(e) => {
                let now = std::time::Instant::now();
                if let Some(run) = writer.failing.failed(e.metric_label(), now) {
                    error!(error = %e, nodes, events, failed_writes = run.failures, for_s = run.for_s,
                        "store write failed; the change is kept in memory and retried with the next step at least a second later");
                }
                self.metrics
                    .store_write_failures
                    .get_or_create(&ReasonLabel {
                        reason: e.metric_label().into(),
                    })
                    .inc();
                unwritten = Some(e.to_string());
                writer.resting = Some((now + WRITE_RETRY, e.to_string()));
                writer.pending = Some(todo);
                if self.shared {
                    self.store_ok.store(false, Ordering::Relaxed);
                }
            }
        }
        self.check_size(writer.store.bytes_used(), writer.store.limit());
        Ok((outcome, unwritten))
    }

    /// Count the remediations a step finished, and those under way when it
    /// changed them.
    fn count_remediations(&self, fleet: &Fleet, outcome: &Outcome) {
        let mut changed = false;
        for e in &outcome.events {
            let (action, result) = match &e.kind {
                EventKind::RemediationSucceeded { action } => (action, "succeeded"),
                EventKind::RemediationFailed {
                    action, cancelled, ..
                } => (action, if *cancelled { "cancelled" } else { "failed" }),
                EventKind::RemediationStarted { .. } => {
                    changed = true;
                    continue;
                }
                _ => continue,
            };
            changed = true;
            self.metrics
                .remediations
                .get_or_create(&ActionLabel {
                    action: action.clone(),
                    result: result.into(),
                })
                .inc();
        }
        if changed {
            self.metrics
                .remediation_in_flight
                .set(fleet.remediations_in_flight() as i64);
        }
    }

    /// Export the store's size and warn once when it passes 90 % of `maxBytes` or
    /// of the most its server will hold (JetStream's limit for the account).
    fn check_size(&self, used: u64, limit: Option<u64>) {
        self.metrics.store_bytes_used.set(used as i64);
        // 0 is no budget, as `hale_store_bytes_max` shows none.
        let configured = self.config().config.store.max_bytes.filter(|m| *m > 0);
        let (max, which) = match (configured, limit) {
            (Some(c), Some(l)) if l < c => (l, "the NATS account's storage limit"),
            (Some(c), _) => (c, "store.maxBytes"),
            (None, Some(l)) => (l, "the NATS account's storage limit"),
            (None, None) => return,
        };
        self.metrics.store_bytes_max.set(max as i64);
        let near = used.saturating_mul(10) >= max.saturating_mul(9);
        if near && !self.near_full.swap(true, Ordering::Relaxed) {
            warn!(used, max, "the store is past 90% of {which}");
        } else if !near {
            self.near_full.store(false, Ordering::Relaxed);
        }
    }

    /// Fetch, parse and ingest one poll. Never clears anything unless the answer is
    /// trusted (the core decides).
    pub async fn poll_once(self: &Arc<Self>) {
        let start = Instant::now();
        let fetched = self.fetch_poll().await;
        self.apply_poll(fetched).await;
        self.metrics
            .poll_duration
            .observe(start.elapsed().as_secs_f64());
        self.first_poll_done.store(true, Ordering::Release);
    }

    /// Ask Alertmanager for its alerts. An answer that arrives is in hand until
    /// [`Hale::apply_poll`] has the core judge it: steps meanwhile do not take the
    /// source for silent ([`crate::core::Trust::answer_waiting`]).
    pub async fn fetch_poll(&self) -> Fetched {
        let start = Instant::now();
        let client = self.client.read().expect("client lock").clone();
        *self.delivered_during_poll.lock().expect("poll lock") = Some(BTreeSet::new());
        let answer = client.fetch().await;
        let took = start.elapsed();
        if answer.is_ok() {
            *self.answer_in_hand.lock().expect("answer lock") = Some(Utc::now());
        }
        Fetched { answer, took }
    }

    /// Parse and ingest what [`Hale::fetch_poll`] brought, off the async workers.
    pub async fn apply_poll(self: &Arc<Self>, fetched: Fetched) {
        let this = self.clone();
        let result =
            tokio::task::spawn_blocking(move || this.ingest_poll(fetched.answer, fetched.took))
                .await;
        if let Err(e) = result {
            error!(error = %e, "poll ingest task failed");
        }
    }

    /// Apply one poll's answer, which took `took` to arrive.
    fn ingest_poll(&self, fetched: Result<Answer, IngestError>, took: Duration) {
        let (body, answered, started) = match fetched {
            Ok(answer) => (answer.body, answer.date, answer.started),
            Err(e) => return self.poll_failed(e),
        };
        // Said when it starts failing and when it reads again, not every poll.
        let unread = started.as_ref().err();
        if self.status_unread.swap(unread.is_some(), Ordering::AcqRel) != unread.is_some() {
            match unread {
                Some(e) => warn!(
                    error = %e,
                    "cannot read Alertmanager's status: absences are held (nothing ends by going missing) until it can be read, since a restart of Alertmanager cannot be told without it"
                ),
                None => info!("Alertmanager's status reads again"),
            }
        }
        let alerts = match alertmanager::parse_v2(&body) {
            Ok(alerts) => alerts,
            Err(e) => {
                self.answer_judged();
                return self.poll_failed(e);
            }
        };
        // Applied a slice of nodes at a time, the fleet released between slices, so a
        // delivery waits for one slice, not for the whole fleet's poll. Each delivery
        // names its alerts in `delivered_during_poll` before it applies: the slices
        // after it treat them as newer than this answer.
        static NONE: BTreeSet<String> = BTreeSet::new();
        // Grouped before the fleet is locked: the one pass over every alert.
        let groups = NodeGroups::of(&alerts, &self.config().core.identity);
        let mut slices = None;
        let mut outcome = self
            .apply(|fleet, cfg, now| {
                self.answer_judged();
                fleet.trust.answer_waiting = None;
                let newer = self.delivered_during_poll.lock().expect("poll lock");
                let answer = PollAnswer {
                    alerts: &alerts,
                    answered: answered.unwrap_or(now),
                    started: started.as_ref().ok().copied(),
                    status_unread: started.is_err(),
                    took,
                    delivered: newer.as_ref().unwrap_or(&NONE),
                };
                let (begun, out) = fleet.poll_begin(cfg, now, &answer, groups);
                slices = Some(begun);
                Ok(out)
            })
            .expect("a poll cannot fail");
        // A step runs only while this replica writes: one that stopped leading
        // meanwhile (its lease lapsed during the fetch, or between slices) leaves
        // the answer to the next leader, whole.
        let Some(mut slices) = slices else {
            self.answer_judged();
            self.delivered_during_poll.lock().expect("poll lock").take();
            return;
        };
        while !slices.done() {
            if !self.writes() {
                self.delivered_during_poll.lock().expect("poll lock").take();
                warn!(
                    "stopped leading during a poll: the rest of its answer is left to the next leader"
                );
                return;
            }
            self.fleet.let_waiters_in();
            let out = self
                .apply(|fleet, cfg, now| {
                    let newer = self.delivered_during_poll.lock().expect("poll lock");
                    let newer = newer.as_ref().unwrap_or(&NONE);
                    Ok(fleet.poll_slice(cfg, now, &mut slices, &alerts, newer, POLL_SLICE))
                })
                .expect("a poll cannot fail");
            outcome.absorb(out);
        }
        let out = self
            .apply(|fleet, cfg, now| {
                // Taken under the fleet lock: a delivery that registers after this
                // applies after the poll; one before it came after every slice that
                // could meet its alerts, or was newer for them.
                self.delivered_during_poll.lock().expect("poll lock").take();
                Ok(fleet.poll_end(cfg, now, &slices))
            })
            .expect("a poll cannot fail");
        outcome.absorb(out);
        let now = std::time::Instant::now();
        let mut polls = self.poll_streak.lock().expect("poll streak lock");
        let result = if outcome.trusted {
            if let Some(run) = polls.succeeded(now) {
                info!(
                    failed_polls = run.failures,
                    for_s = run.for_s,
                    "Alertmanager answers again, the watchdog with it"
                );
            }
            "trusted"
        } else {
            if let Some(run) = polls.failed("untrusted", now) {
                warn!(
                    failed_polls = run.failures,
                    for_s = run.for_s,
                    "Alertmanager answered without the watchdog alert: nothing is cleared"
                );
            }
            "untrusted"
        };
        drop(polls);
        self.count_poll(result);
        self.count_ingest("poll", alerts.len(), outcome.unmatched);
        let wanted = self
            .seen
            .lock()
            .expect("seen lock")
            .wanted_until
            .is_some_and(|t| Instant::now() < t);
        let list = wanted.then(|| {
            let cfg = self.config();
            render_alerts(&alerts, &cfg, &self.unknown_nodes(&alerts, &cfg))
        });
        if let Some(l) = list {
            self.seen.lock().expect("seen lock").alerts = Some((Instant::now(), Ok(l)));
            self.alerts_kept.notify_waiters();
        } else {
            self.seen.lock().expect("seen lock").alerts = None;
        }
        drop(alerts);
        drop(body);
        release_freed_memory();
    }

    /// The answer in hand was judged by the core, or dropped: steps from now on
    /// go by what the fleet's trust says.
    fn answer_judged(&self) {
        self.answer_in_hand.lock().expect("answer lock").take();
    }

    /// The nodes `alerts` name that hale does not know and, without
    /// `createFromAlerts`, will not bring in: their alerts are unmatched. The fleet
    /// is looked at once, for the names alone.
    fn unknown_nodes<'a>(
        &self,
        alerts: &'a [Alert<'a>],
        cfg: &Loaded,
    ) -> std::collections::HashSet<&'a str> {
        if cfg.core.identity.create_from_alerts {
            return Default::default();
        }
        let mut named: std::collections::HashSet<&str> = alerts
            .iter()
            .filter_map(|a| a.node(&cfg.core.identity))
            .collect();
        let fleet = self.lock_fleet();
        named.retain(|n| !fleet.nodes.contains_key(*n));
        named
    }

    fn poll_failed(&self, e: IngestError) {
        self.delivered_during_poll.lock().expect("poll lock").take();
        // The last answer is no longer what Alertmanager holds: `GET
        // /api/v1/alerts` says it cannot be read rather than show it.
        self.seen.lock().expect("seen lock").alerts = Some((Instant::now(), Err(e.clone())));
        self.alerts_kept.notify_waiters();
        let run = self
            .poll_streak
            .lock()
            .expect("poll streak lock")
            .failed(e.metric_label(), std::time::Instant::now());
        if let Some(run) = run {
            warn!(
                error = %e,
                failed_polls = run.failures,
                for_s = run.for_s,
                "poll failed: nothing is cleared"
            );
        }
        self.count_poll(e.metric_label());
        let reason = e.to_string();
        self.apply(|fleet, cfg, now| Ok(fleet.poll_failed(cfg, now, reason)))
            .expect("a failed poll cannot fail");
    }

    fn count_poll(&self, result: &str) {
        self.metrics
            .polls
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }

    fn count_ingest(&self, path: &str, alerts: usize, unmatched: u64) {
        self.metrics
            .ingested
            .get_or_create(&PathLabel { path: path.into() })
            .inc_by(alerts as u64);
        self.metrics.unmatched.inc_by(unmatched);
    }

    /// Ingest one Alertmanager webhook body. A malformed body changes nothing.
    pub fn ingest_webhook(&self, body: &[u8]) -> Result<WebhookResult, StepError> {
        let delivery = alertmanager::parse_webhook(body)?;
        // hale reads only its receiver's alerts: a delivery for another is a route
        // pointed at hale by mistake, refused so Alertmanager's log says so.
        let want = &self.config().config.alertmanager.receiver;
        if let Some(got) = delivery.receiver.as_deref().filter(|got| got != want) {
            return Err(IngestError::Malformed {
                what: "Alertmanager webhook payload",
                reason: format!(
                    "it was sent for receiver {got:?}; hale reads only alertmanager.receiver {want:?}"
                ),
            }
            .into());
        }
        if let Some(newer) = self
            .delivered_during_poll
            .lock()
            .expect("poll lock")
            .as_mut()
        {
            newer.extend(delivery.alerts.iter().map(|a| a.fingerprint.to_string()));
        }
        let outcome =
            self.apply_durable(|fleet, cfg, now| Ok(fleet.webhook(cfg, now, &delivery.alerts)))?;
        if delivery.truncated > 0 {
            info!(
                truncated = delivery.truncated,
                "webhook delivery was truncated: polling now"
            );
            self.poll_now.notify_one();
        }
        self.count_ingest("webhook", delivery.alerts.len(), outcome.unmatched);
        Ok(WebhookResult {
            alerts: delivery.alerts.len(),
            trusted: outcome.trusted,
            unmatched: outcome.unmatched,
            refused: outcome.refused.len(),
        })
    }

    /// Alive: no lock poisoned by a panic, and every loop making progress
    /// ([`Liveness`]). Its error says what is wrong.
    pub fn alive(&self) -> Result<(), String> {
        if self.fleet.is_poisoned() || self.writer.is_poisoned() {
            return Err(
                "a panic poisoned the fleet's state: restart to reload it from the store".into(),
            );
        }
        self.liveness.check(Instant::now())
    }

    /// Ready once the first poll has been attempted (or at once when polling is
    /// off). On a shared store: while the store answers, and a follower at once (it
    /// serves what the leader wrote).
    pub fn ready(&self) -> bool {
        let polled = self.config().config.alertmanager.poll_interval.is_zero()
            || self.first_poll_done.load(Ordering::Acquire);
        if !self.shared {
            return polled;
        }
        self.store_ok.load(Ordering::Relaxed) && (polled || !self.orchestrator.leads())
    }

    /// The gauges read from the state at each scrape: readiness, and the trust the
    /// state rests on — this replica's own, or on a follower the leader's as it last
    /// wrote it — with whether a hold runs now (it lapses with no step to say so).
    pub fn refresh_gauges(&self) {
        self.metrics.ready.set(i64::from(self.ready()));
        let fleet = self.lock_fleet();
        let trust = &fleet.trust;
        self.metrics.source_up.set(i64::from(trust.source_up));
        self.metrics
            .holding
            .set(i64::from(trust.holding(Utc::now())));
        if let Some(t) = trust.last_trusted {
            self.metrics
                .last_trusted
                .set(t.timestamp_millis() as f64 / 1000.0);
        }
    }

    /// Whether this replica writes: always on a store of its own; on a shared
    /// one, the leader once it has taken in what the previous one wrote.
    fn writes(&self) -> bool {
        !self.shared
            || (self.orchestrator.leads()
                && self.synced.load(Ordering::Acquire) == self.orchestrator.term())
    }

    /// Whether other replicas share the store (and only the leader writes).
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// Keep this replica's view in step with a shared store: a follower reloads
    /// what the leader wrote whenever the store changed; a replica just elected
    /// takes the store's state in through its writer before it writes anything.
    pub async fn follow_loop(self: Arc<Self>) {
        if !self.shared {
            return;
        }
        let mut seen = None;
        loop {
            let this = self.clone();
            seen = tokio::task::spawn_blocking(move || this.follow(seen))
                .await
                .unwrap_or(None);
            tokio::time::sleep(FOLLOW_EVERY).await;
        }
    }

    /// One look at the shared store; the store revision now followed.
    fn follow(&self, seen: Option<u64>) -> Option<u64> {
        let now = Utc::now();
        if self.orchestrator.leads() {
            let term = self.orchestrator.term();
            if self.synced.load(Ordering::Acquire) == term {
                return seen;
            }
            if self
                .takeover_after
                .lock()
                .expect("takeover lock")
                .is_some_and(|t| Instant::now() < t)
            {
                return None;
            }
            let mut fleet = self.lock_fleet();
            let mut writer = self.writer.lock().expect("writer lock");
            match writer.store.load(now) {
                Ok(mut loaded) => {
                    match writer.store.void_unfinished() {
                        Ok(0) => {}
                        Ok(voided) => warn!(
                            voided,
                            "the last leader stopped in the middle of a write: the events it recorded without their state are removed"
                        ),
                        // Taking over now would leave the history holding events
                        // its state does not, for good: a step taken again past the
                        // duplicate window would record them twice.
                        Err(e) => {
                            self.store_ok.store(false, Ordering::Relaxed);
                            *self.takeover_after.lock().expect("takeover lock") =
                                Some(Instant::now() + TAKEOVER_RETRY);
                            warn!(
                                error = %e,
                                "elected, but the events of the last leader's unfinished write could not be removed: not writing or acting until they are (tried again every {} s)",
                                TAKEOVER_RETRY.as_secs()
                            );
                            return None;
                        }
                    }
                    loaded.trust.take_up();
                    // The configuration's inventory is this process's, not the
                    // store's; so are the actions its tasks are performing.
                    loaded.listed = std::mem::take(&mut fleet.listed);
                    loaded.under_way = std::mem::take(&mut fleet.under_way);
                    *fleet = loaded;
                    writer.resting = None;
                    if writer.pending.take().is_some() {
                        warn!(
                            "a change this replica could not write in its last term is dropped: it leads in a new term, which may follow another replica's, so the store's record stands"
                        );
                    }
                    self.synced.store(term, Ordering::Release);
                    self.store_ok.store(true, Ordering::Relaxed);
                    info!(
                        nodes = fleet.nodes.len(),
                        "took over: the shared store's state is loaded; this replica writes and acts"
                    );
                    drop(fleet);
                    // One replica's start changes no setting under the others; the
                    // leader's configuration is the store's (requests to NATS: the
                    // fleet, which reads wait on, is not held for them).
                    match writer.store.settle() {
                        Ok(changed) => {
                            for c in changed {
                                warn!("the leader's configuration changed the shared store: {c}");
                            }
                        }
                        Err(e) => {
                            warn!(error = %e, "could not make the shared store's settings this configuration's: the stream keeps its retention and copies as they were (tried again when a replica next takes the lead)")
                        }
                    }
                    drop(writer);
                    self.notifier.read().expect("notifier lock").lead();
                    // As at start: registering before this point wrote nothing.
                    self.register_inventory();
                    // Polling, at once; without polling (webhook only), never.
                    if !self.config().config.alertmanager.poll_interval.is_zero() {
                        self.poll_now.notify_one();
                    }
                    self.act_now.notify_one();
                }
                Err(e) => {
                    self.store_ok.store(false, Ordering::Relaxed);
                    warn!(error = %e, "elected, but the shared store cannot be read: not acting until it can");
                }
            }
            return None;
        }
        {
            let mut writer = self.writer.lock().expect("writer lock");
            if writer.pending.is_some() {
                // Until another replica is seen leading, this one may lead again in
                // the same term (see `election`): what it could not write stays
                // its record, kept and shown, and the store is not read over it —
                // nor once it leads again, which it may since `leads` was asked.
                if self.orchestrator.leader().is_none() || self.orchestrator.leads() {
                    return seen;
                }
                writer.pending = None;
                warn!(
                    "a change this replica could not write before it stopped leading is dropped: the leader's record stands"
                );
            }
        }
        let store = self.maintenance.lock().expect("maintenance lock");
        let revision = match store.revision() {
            Ok(r) => r,
            Err(e) => {
                if self.store_ok.swap(false, Ordering::Relaxed) {
                    warn!(error = %e, "the shared store does not answer: serving the state last read");
                }
                return seen;
            }
        };
        if seen == Some(revision) {
            self.store_ok.store(true, Ordering::Relaxed);
            return seen;
        }
        match store.load(now) {
            Ok(mut loaded) => {
                let mut fleet = self.lock_fleet();
                // Leading again in the same term since `leads` was asked, this
                // replica may have written already: its own state stands.
                if self.orchestrator.leads() {
                    return seen;
                }
                loaded.listed = std::mem::take(&mut fleet.listed);
                loaded.under_way = std::mem::take(&mut fleet.under_way);
                *fleet = loaded;
                drop(fleet);
                self.store_ok.store(true, Ordering::Relaxed);
                Some(revision)
            }
            Err(e) => {
                self.store_ok.store(false, Ordering::Relaxed);
                warn!(error = %e, "could not read the shared store: serving the state last read");
                seen
            }
        }
    }

    /// One page of `GET /api/v1/nodes`. Only the page is built under the fleet lock.
    /// In id order without a count, the listing walks on from the token and stops
    /// at a full page; any other order, or a count, looks at each node once and
    /// sorts only the page.
    pub fn nodes(&self, q: &NodeQuery) -> NodeList {
        let cfg = self.config();
        let cluster = &cfg.config.cluster;
        let mut list = NodeList {
            nodes: Vec::new(),
            next_page_token: None,
            total: q.count.then_some(0),
            unreachable: Vec::new(),
        };
        if q.cluster.as_ref().is_some_and(|c| c != cluster) {
            return list;
        }
        let fleet = self.lock_fleet();
        fn matching<'a>(
            n: &'a Node,
            core: &'a CoreSettings,
            q: &NodeQuery,
        ) -> Option<(&'a Settings, Health, &'a str)> {
            let settings = core.settings_for(&n.labels);
            let health = n.health(settings);
            let hostname = n.hostname.as_deref().unwrap_or(&n.id);
            let matched = q.status.is_none_or(|s| s == n.status)
                && q.pool.as_ref().is_none_or(|p| *p == settings.name)
                && q.health.is_none_or(|h| h == health)
                && q.search
                    .as_deref()
                    .is_none_or(|text| holds(&n.id, text) || holds(hostname, text));
            matched.then_some((settings, health, hostname))
        }
        let wanted = |n| matching(n, &cfg.core, q);
        let mut page: Vec<(&Node, &Settings, Key<'_>)> = Vec::new();
        if q.sort == Sort::default() && !q.count {
            let from = match &q.after {
                Some(place) => Bound::Excluded(place.id.clone()),
                None => Bound::Unbounded,
            };
            page = fleet
                .nodes
                .range((from, Bound::Unbounded))
                .filter_map(|(_, n)| Some((&**n, wanted(n)?.0, (0, "", n.id.as_str()))))
                .take(q.page_size + 1)
                .collect();
        } else {
            let after = q.after.as_ref().map(Place::key);
            let mut total = 0;
            for n in fleet.nodes.values() {
                let Some((settings, health, hostname)) = wanted(n) else {
                    continue;
                };
                total += 1;
                let key = q.sort.key(
                    &n.id,
                    hostname,
                    n.status,
                    health,
                    n.score.as_ref().map(|s| s.value),
                );
                let beyond =
                    after.is_none_or(|a| if q.sort.descending { key < a } else { key > a });
                if beyond {
                    page.push((n, settings, key));
                }
            }
            list.total = q.count.then_some(total);
            let order = |a: &(&Node, &Settings, Key<'_>), b: &(&Node, &Settings, Key<'_>)| {
                if q.sort.descending {
                    b.2.cmp(&a.2)
                } else {
                    a.2.cmp(&b.2)
                }
            };
            if page.len() > q.page_size + 1 {
                page.select_nth_unstable_by(q.page_size, order);
                page.truncate(q.page_size + 1);
            }
            page.sort_unstable_by(order);
        }
        let more = page.len() > q.page_size;
        page.truncate(q.page_size);
        list.next_page_token = page
            .last()
            .filter(|_| more)
            .map(|(_, _, key)| page_token(q.sort, &Place::of(*key)));
        list.nodes = page
            .iter()
            .map(|(n, settings, _)| NodeSummary::of(n, cluster, settings))
            .collect();
        list
    }

    pub fn node(&self, id: &str) -> Option<NodeView> {
        let cfg = self.config();
        let mut view = {
            let fleet = self.lock_fleet();
            let n = fleet.nodes.get(id)?;
            NodeView::of(
                n,
                &cfg.config.cluster,
                cfg.core.settings_for(&n.labels),
                Utc::now(),
            )
        };
        if let Some(tried) = self.tried.lock().expect("tried lock").get(id)
            && let Some(p) = view.pending.iter_mut().find(|p| p.id == tried.id)
        {
            p.last_error = Some(tried.error.clone());
            p.last_try = Some(tried.at);
        }
        if let Some(e) = self
            .inventory_error
            .lock()
            .expect("inventory error lock")
            .as_ref()
        {
            for p in view.pending.iter_mut().filter(|p| p.last_error.is_none()) {
                p.last_error = Some(format!(
                    "not tried yet: the orchestrator's inventory does not answer: {e}"
                ));
            }
        }
        Some(view)
    }

    /// This hale's own row of the overview: counts by health, the lowest score,
    /// the source's trust, halts and remediations, read in one pass.
    pub fn cluster(&self) -> ClusterView {
        let cfg = self.config();
        let (mut healthy, mut degraded, mut unknown) = (0, 0, 0);
        let (mut lowest, mut worst_degraded): (Option<u8>, Option<u8>) = (None, None);
        let mut halts = Vec::new();
        let nodes = {
            let fleet = self.lock_fleet();
            for n in fleet.nodes.values() {
                let score = n.score.as_ref().map(|s| s.value);
                let lower = |seen: Option<u8>| match (seen, score) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                lowest = lower(lowest);
                match n.health(cfg.core.settings_for(&n.labels)) {
                    Health::Healthy => healthy += 1,
                    Health::Degraded => {
                        degraded += 1;
                        worst_degraded = lower(worst_degraded);
                    }
                    Health::Unknown => unknown += 1,
                }
                // A halt the node recovered from, or one standing while hale cannot
                // see the node, is not what holds it back now.
                let live = n.policy.recovered_since.is_none() && !crate::core::policy::blind(n);
                if let Some(crate::core::policy::Conclusion::Halted { action, guardrail }) =
                    n.policy.conclusion.as_ref().filter(|_| live)
                {
                    halts.push(Halt {
                        node: n.id.clone(),
                        action: *action,
                        guardrail: *guardrail,
                    });
                }
            }
            fleet.nodes.len() as u64
        };
        let r = self.remediations();
        ClusterView {
            name: cfg.config.cluster.clone(),
            member: None,
            url: None,
            health: Some(ClusterHealth {
                state: worst_state(degraded, worst_degraded, unknown, nodes),
                nodes,
                healthy,
                degraded,
                unknown,
                lowest_score: lowest,
                source: self.source(),
                halts,
                remediations: crate::view::RemediationCounts {
                    queued: r.queued.len() as u64,
                    in_flight: r.in_flight.len() as u64,
                    fencing: r.fencing.len() as u64,
                    blocked: r.blocked,
                },
            }),
            error: None,
        }
    }

    /// The overview's rows: this cluster's, then (unless `local`) each federation
    /// member's, asked now.
    pub async fn clusters(self: &Arc<Self>, local: bool) -> Vec<ClusterView> {
        let this = self.clone();
        let own = tokio::task::spawn_blocking(move || this.cluster())
            .joined()
            .await;
        let mut rows = vec![own];
        if !local {
            rows.extend(self.federation().clusters().await);
        }
        rows
    }

    /// What hale sees: the receiver's alerts, each read through the label contract,
    /// rendered as the JSON array of `GET /api/v1/alerts` — from the last poll while
    /// polling (a request costs a copy; the first in a while asks for a poll and
    /// waits for it), else fetched at most once every [`ALERTS_FRESH`] however many
    /// ask; a failure to read it likewise.
    pub async fn alerts(self: &Arc<Self>) -> Result<axum::body::Bytes, IngestError> {
        let am = self.config().config.alertmanager.clone();
        // A poll's list serves until the next poll is overdue.
        let fresh = if am.poll_interval.is_zero() {
            ALERTS_FRESH
        } else {
            2 * am.poll_interval + am.timeout
        };
        let cached = || {
            let mut seen = self.seen.lock().expect("seen lock");
            seen.wanted_until = Some(Instant::now() + ALERTS_WANTED);
            seen.alerts
                .as_ref()
                .filter(|(at, _)| at.elapsed() <= fresh)
                .map(|(_, list)| list.clone())
        };
        if let Some(list) = cached() {
            return list;
        }
        // Polling, the list is the next poll's, kept now that it is wanted: the
        // alerts and the source's state then come from one answer. Only past the
        // poll's allowance (a follower, which leaves polling to the leader; a poll
        // stuck) is Alertmanager asked from here.
        if !am.poll_interval.is_zero() && self.writes() {
            let kept = self.alerts_kept.notified();
            tokio::pin!(kept);
            kept.as_mut().enable();
            self.poll_now.notify_one();
            let allowance = self.client.read().expect("client lock").allowance();
            if tokio::time::timeout(allowance + Duration::from_secs(5), kept)
                .await
                .is_ok()
                && let Some(list) = cached()
            {
                return list;
            }
        }
        let _one = self.fetching.lock().await;
        if let Some(list) = cached() {
            return list;
        }
        let client = self.client.read().expect("client lock").clone();
        let list = match client.fetch().await {
            Ok(answer) => {
                // Parsed off the runtime: 500,000 alerts take a second.
                let (cfg, this) = (self.config(), self.clone());
                tokio::task::spawn_blocking(move || {
                    alertmanager::parse_v2(&answer.body).map(|alerts| {
                        render_alerts(&alerts, &cfg, &this.unknown_nodes(&alerts, &cfg))
                    })
                })
                .joined()
                .await
            }
            Err(e) => Err(e),
        };
        self.seen.lock().expect("seen lock").alerts = Some((Instant::now(), list.clone()));
        list
    }

    /// Whether hale trusts its alert source right now, for `GET /api/v1/alerts`.
    pub fn source(&self) -> SourceView {
        let cfg = self.config();
        let trust = self.lock_fleet().trust.clone();
        let holding = trust.holding(Utc::now());
        SourceView {
            url: crate::shown_url(
                &reqwest::Url::parse(&cfg.config.alertmanager.url).expect("validated"),
            ),
            receiver: cfg.config.alertmanager.receiver.clone(),
            polling: !cfg.config.alertmanager.poll_interval.is_zero(),
            up: trust.source_up,
            stale: trust.stale,
            last_trusted: trust.last_trusted,
            last_error: trust.last_error.clone(),
            hold_until: trust.hold_until.filter(|_| holding),
            hold_reason: trust.hold_reason.filter(|_| holding),
        }
    }

    /// Poll every `pollInterval` and whenever a truncated webhook asks; with polling
    /// off, only when asked. The interval is read each round, so a reload applies.
    pub async fn poll_loop(self: Arc<Self>) {
        let beat = self.liveness.watch("poll", Duration::from_secs(600));
        let mut first = true;
        loop {
            let am = self.config().config.alertmanager.clone();
            let polling = !am.poll_interval.is_zero();
            let wait = if polling { am.poll_interval } else { IDLE_BEAT };
            // A poll may take its allowance; three missed rounds mean it is stuck.
            let allowance = self.client.read().expect("client lock").allowance();
            beat.beat_within(3 * (wait + allowance) + Duration::from_secs(60));
            if !first || !polling {
                let asked = tokio::select! {
                    _ = tokio::time::sleep(wait) => false,
                    _ = self.poll_now.notified() => true,
                };
                if !polling && !asked {
                    continue;
                }
            }
            first = false;
            // A follower on a shared store leaves polling to the leader.
            if !self.writes() {
                continue;
            }
            self.inventory_before_poll(am.poll_interval).await;
            self.poll_once().await;
        }
    }

    /// Take in the orchestrator's view before a poll, waiting for it
    /// [`inventory_wait`] at most: an orchestrator slow to answer (an API that
    /// hangs, a Slurm controller under load) must not hold ingest behind it, or
    /// every node would go stale while Alertmanager answers. One that takes
    /// longer goes on in the background, taken in when it comes; the poll, and the
    /// policy after it, go on with the last view.
    async fn inventory_before_poll(self: &Arc<Self>, poll_interval: Duration) {
        let mut slot = self.inventory_task.lock().await;
        let (mut task, new) = match slot.take() {
            Some(task) if !task.is_finished() => (task, false),
            _ => {
                let this = self.clone();
                (
                    tokio::spawn(async move { this.sync_inventory().await }),
                    true,
                )
            }
        };
        let wait = inventory_wait(poll_interval);
        if tokio::time::timeout(wait, &mut task).await.is_err() {
            // Said once for each inventory, however many polls it outlasts.
            if new {
                warn!(waited = ?wait, "the orchestrator's inventory is slow: polls go on with the last one, and take the new one in when it comes");
            }
            *slot = Some(task);
        }
    }

    /// Take in the orchestrator's view of the nodes before the poll the policy runs
    /// on. An orchestrator that keeps no inventory (`none`) has nothing to say; one
    /// that cannot answer leaves the last view standing. Returns whether the books
    /// now hold the orchestrator's view (or it keeps none).
    async fn sync_inventory(self: &Arc<Self>) -> bool {
        let taken = self.actions_recorded.load(Ordering::Acquire);
        let inventory = self.orchestrator.inventory().await;
        *self.inventory_error.lock().expect("inventory error lock") =
            inventory.as_ref().err().map(ToString::to_string);
        if inventory.is_ok() {
            let failed = self.inventory_failures.swap(0, Ordering::Relaxed);
            if failed > 0 {
                info!(failed, "the orchestrator's inventory answers again");
            }
        }
        match inventory {
            Ok(Some(observed)) => {
                let this = self.clone();
                let step = tokio::task::spawn_blocking(move || {
                    let mut applied = false;
                    let _ = this.apply(|fleet, cfg, now| {
                        // An action recorded meanwhile (under this same lock) makes
                        // the view older than the books: not applied.
                        if this.actions_recorded.load(Ordering::Acquire) != taken {
                            return Ok(Outcome::default());
                        }
                        applied = true;
                        Ok(fleet.observe(cfg, now, &observed))
                    });
                    applied
                })
                .await;
                step.unwrap_or_else(|e| {
                    error!(error = %e, "inventory task failed");
                    false
                })
            }
            Ok(None) => true,
            Err(e) => {
                let failed = self.inventory_failures.fetch_add(1, Ordering::Relaxed) + 1;
                warn!(error = %e, failed, "orchestrator inventory failed; the last one stands");
                false
            }
        }
    }

    /// A node's events, or `None` when hale has neither the node nor any history of it.
    pub fn events(
        &self,
        node_id: &str,
        query: &EventQuery,
    ) -> Result<Option<EventPage>, StoreError> {
        let store = self.maintenance.lock().expect("maintenance lock");
        let page = store.events(node_id, query)?;
        if page.events.is_empty()
            && !self.lock_fleet().nodes.contains_key(node_id)
            && !store.has_events(node_id)?
        {
            return Ok(None);
        }
        Ok(Some(page))
    }

    /// Store upkeep off the write path: checkpoint the write-ahead log every
    /// [`CHECKPOINT_EVERY`], and delete events past `store.eventRetentionDays` hourly,
    /// in small batches.
    pub async fn retention_loop(self: Arc<Self>) {
        let beat = self.liveness.watch("retention", 3 * RETENTION_SWEEP);
        let mut ticker = tokio::time::interval(CHECKPOINT_EVERY);
        let mut swept_at: Option<Instant> = None;
        loop {
            ticker.tick().await;
            let sweep = swept_at.is_none_or(|t| t.elapsed() >= RETENTION_SWEEP);
            if sweep {
                swept_at = Some(Instant::now());
            }
            let this = self.clone();
            let swept = tokio::task::spawn_blocking(move || {
                let mut store = this.maintenance.lock().expect("maintenance lock");
                match store.upkeep() {
                    // Measured here on every replica, a follower's too (only the
                    // leader writes).
                    Ok(()) => {
                        let ended = this
                            .upkeep_streak
                            .lock()
                            .expect("upkeep streak lock")
                            .succeeded(std::time::Instant::now());
                        if let Some(run) = ended {
                            info!(
                                failed = run.failures,
                                for_s = run.for_s,
                                "store upkeep (checkpoint) works again"
                            );
                        }
                        this.check_size(store.bytes_used(), store.limit())
                    }
                    Err(e) => {
                        let run = this
                            .upkeep_streak
                            .lock()
                            .expect("upkeep streak lock")
                            .failed(e.metric_label(), std::time::Instant::now());
                        if let Some(run) = run {
                            warn!(
                                error = %e,
                                failed = run.failures,
                                for_s = run.for_s,
                                "store upkeep (checkpoint) failed; the next one retries"
                            )
                        }
                    }
                }
                if !sweep {
                    return Ok(0);
                }
                let days = this.config().config.store.event_retention_days;
                let cutoff = Utc::now() - TimeDelta::days(i64::from(days));
                store.sweep(cutoff.timestamp_millis(), 5_000)
            })
            .await;
            beat.beat();
            match swept {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => info!(events = n, "retention sweep deleted old events"),
                Ok(Err(e)) => error!(error = %e, "retention sweep failed"),
                Err(e) => error!(error = %e, "retention sweep task failed"),
            }
        }
    }

    /// Re-read the configuration file. An invalid file changes nothing. Webhook
    /// endpoints, filters, penalties and policy settings apply to the next report;
    /// `listen` and `store` need a restart. Returns the new file's warnings.
    pub fn reload(&self) -> Result<Vec<String>, ConfigError> {
        let read = self
            .config()
            .source
            .clone()
            .map(|path| Config::load_text(&path).map(|read| (path, read)));
        self.take_reload(read)
    }

    /// [`Hale::reload`] for a SIGHUP or `POST /-/reload`: a file that does not
    /// answer (on a mount that hangs) is given up after [`crate::config::READ_WITHIN`], the reload
    /// refused and never applied later — it holds neither the caller nor a stop.
    pub async fn reload_bounded(self: &Arc<Self>) -> Result<Vec<String>, ConfigError> {
        let read = match self.config().source.clone() {
            None => None,
            Some(path) => {
                info!(config = %path.display(), "reloading the configuration");
                let at = path.clone();
                let reading = tokio::task::spawn_blocking(move || Config::load_text(&at)).joined();
                Some(
                    match tokio::time::timeout(crate::config::READ_WITHIN, reading).await {
                        Ok(read) => read.map(|read| (path, read)),
                        Err(_) => {
                            let mut e = ConfigError::unanswered(&path);
                            e.message.push_str("; nothing was reloaded");
                            Err(e)
                        }
                    },
                )
            }
        };
        self.off_runtime(move |h| h.take_reload(read)).await
    }

    /// Apply a reload's reading of the file (`None`: hale runs on built-in
    /// defaults), and say whether it was taken.
    fn take_reload(&self, read: Option<Read>) -> Result<Vec<String>, ConfigError> {
        let taken = self.reload_file(read);
        self.metrics
            .config_reload_successful
            .set(i64::from(taken.is_ok()));
        if taken.is_ok() {
            self.metrics
                .config_reload_success_at
                .set(Utc::now().timestamp());
        }
        taken
    }

    fn reload_file(&self, read: Option<Read>) -> Result<Vec<String>, ConfigError> {
        let current = self.config();
        let Some(read) = read else {
            info!("running on built-in defaults: nothing to reload");
            return Ok(Vec::new());
        };
        let (path, (next, text)) = read?;
        // What only a restart changes refuses the reload, so what runs is always one
        // file's configuration, never a mix of two.
        let needs_restart = restart_only(&current.config, &next.config);
        if !needs_restart.is_empty() {
            // On the NATS store the cluster names the stream, buckets and consumers.
            let why = if needs_restart.contains(&"cluster") {
                let names = crate::store::nats::Names::of(&current.config.cluster);
                format!(
                    " (on the NATS store it names the event stream {}, the buckets {}, {} and {} and the webhook consumers)",
                    names.stream, names.state, names.ledger, names.lease
                )
            } else {
                String::new()
            };
            return Err(ConfigError {
                file: path.display().to_string(),
                line: crate::config::locate(&text, needs_restart[0]),
                key: needs_restart.join(", "),
                message: format!("changes only with a restart{why}; nothing was reloaded"),
            });
        }
        let applied = changed_keys(&current, &next);
        let warnings: Vec<String> = next.warnings.iter().map(ToString::to_string).collect();
        for w in &warnings {
            warn!("{w}");
        }
        *self.client.write().expect("client lock") =
            alertmanager::Client::new(&next.config.alertmanager);
        *self.notifier.write().expect("notifier lock") = Notifier::start(
            &next.config.cluster,
            &next.webhooks,
            &self.metrics.webhooks,
            &self.liveness,
            &self.durable,
        );
        *self.federation.write().expect("federation lock") = Arc::new(Federation::new(&next));
        self.metrics
            .store_bytes_max
            .set(next.config.store.max_bytes.map_or(0, |m| m as i64));
        let inventory: Vec<Listed> = next
            .config
            .inventory
            .iter()
            .map(InventoryNode::listed)
            .collect();
        // A shorter interval is judged at once (staleness counts from it): the poll
        // loop, asleep for the old one, polls now.
        let (was, is) = (
            current.config.alertmanager.poll_interval,
            next.config.alertmanager.poll_interval,
        );
        let sooner = !is.is_zero() && (was.is_zero() || is < was);
        let mut fleet = self.lock_fleet();
        *self.config.write().expect("config lock") = Arc::new(next);
        fleet.reconfigured();
        if sooner {
            fleet.poll_interval_shortened(chrono::Utc::now());
        }
        drop(fleet);
        if sooner {
            self.poll_now.notify_one();
        }
        let registers = applied.contains(&"inventory");
        self.apply(|fleet, cfg, now| {
            let mut out = if registers {
                fleet.register(cfg, now, &inventory)
            } else {
                Outcome::default()
            };
            // A pool switched to observe: what automation queued there stops; a
            // limit lowered: what it can no longer take.
            out.absorb(fleet.observe_withdraws(cfg, now));
            out.absorb(fleet.limit_withdraws(cfg, now));
            Ok(out)
        })
        .expect("registering cannot fail");
        if applied.is_empty() {
            info!(config = %path.display(), "configuration reloaded: nothing changed");
        } else {
            info!(config = %path.display(), applied = %applied.join(", "), "configuration reloaded");
        }
        Ok(warnings)
    }

    /// Perform the actions the policy and the operators decided: at once when a step
    /// decides one, and again every `ACT_RETRY` for those a transient failure left
    /// pending (at start, those a previous process decided and did not confirm).
    ///
    /// Only the leader acts. A replica that becomes leader first takes in the
    /// cluster as the previous leader left it, so what that one already did is
    /// seen as done (and the orchestrator's verbs, asked again, change nothing).
    pub async fn act_loop(self: Arc<Self>) {
        let beat = self.liveness.watch("act", Duration::from_secs(300));
        let mut term = None;
        loop {
            beat.beat();
            // On a shared store: once the store's state is loaded, not before.
            let leads = self.orchestrator.leads() && self.writes();
            let now = self.orchestrator.term();
            if leads && term != Some(now) {
                // Term 0: no election, a single replica that always led.
                if now > 0 {
                    info!("leading: taking in the cluster before acting");
                }
                if self.sync_inventory().await {
                    term = Some(now);
                }
            }
            if leads && term == Some(now) {
                self.act_pending().await;
            }
            tokio::select! {
                () = self.act_now.notified() => {}
                () = tokio::time::sleep(self.next_retry()) => {}
            }
        }
    }

    /// How long until the first action resting after failed tries may be tried
    /// again (at most `ACT_RETRY`): a retry comes `ACT_RETRY` after its last try,
    /// not after the round of the loop that found it resting. A rest over (its
    /// action tried since, or withdrawn) counts for nothing.
    fn next_retry(&self) -> Duration {
        self.tried
            .lock()
            .expect("tried lock")
            .values()
            .filter_map(|t| ACT_RETRY.checked_sub(t.since.elapsed()))
            .min()
            .unwrap_or(ACT_RETRY)
            .max(Duration::from_millis(100))
    }

    /// Follow the orchestrator's inventory whatever the poll interval: at once when
    /// it says something changed (at most every second), else every [`INVENTORY`].
    /// A `kubectl uncordon` of a node hale cordoned is recorded, and its suppression
    /// window starts, without waiting for a poll — or with none at all.
    pub async fn inventory_loop(self: Arc<Self>) {
        let beat = self.liveness.watch("inventory", Duration::from_secs(300));
        let changed = self.orchestrator.changes();
        loop {
            beat.beat();
            tokio::select! {
                () = async {
                    match &changed {
                        Some(n) => n.notified().await,
                        None => std::future::pending().await,
                    }
                } => {}
                () = tokio::time::sleep(INVENTORY) => {}
            }
            self.sync_inventory().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Show every node's conditions, score and health where the orchestrator's users
    /// look (leader only; the orchestrator writes only what changed).
    pub async fn publish_loop(self: Arc<Self>) {
        let beat = self.liveness.watch("publish", Duration::from_secs(600));
        loop {
            beat.beat();
            tokio::select! {
                () = self.publish_now.notified() => {}
                () = tokio::time::sleep(PUBLISH) => {}
            }
            if !self.orchestrator.leads() || !self.orchestrator.publishes() {
                continue;
            }
            let reports = self.off_runtime(Self::reports).await;
            if let Err(e) = self.orchestrator.publish(&reports).await {
                warn!(error = %e, "publishing node health to the orchestrator failed; retried shortly");
            }
            // At most one round a second, however fast the changes come.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// What to publish: nothing until this process has had trusted input (a
    /// restarted hale knows its nodes, but not yet whether their alerts still fire)
    /// or has given up waiting for it (every node then reads as not seen).
    fn reports(&self) -> Vec<Report> {
        let cfg = self.config();
        let fleet = self.lock_fleet();
        let trust = &fleet.trust;
        let seen = trust
            .last_trusted
            .is_some_and(|t| t >= trust.watching_since);
        if !seen && !trust.stale {
            return Vec::new();
        }
        // A poll is the whole picture. Without polling, the picture is whole once
        // trusted input has run for staleAfter: by then Alertmanager has re-sent every
        // group, as it must the watchdog's.
        let am = &cfg.config.alertmanager;
        let now = Utc::now();
        let complete = !am.poll_interval.is_zero()
            || trust.trusted_since.is_some_and(|t| {
                t >= trust.watching_since
                    && (now - t).to_std().unwrap_or_default() >= am.stale_after()
            });
        fleet
            .nodes
            .values()
            .map(|n| Report {
                id: n.id.clone(),
                score: n.score.as_ref().map(|s| s.value),
                health: n.health(cfg.core.settings_for(&n.labels)),
                stale: trust.stale || n.conditions.contains_key(TELEMETRY_STALE),
                complete,
                notices: most_urgent(
                    n.conditions
                        .values()
                        .flat_map(|c| c.sources.values())
                        .filter(|s| !s.suppressed)
                        .filter_map(|s| s.notice.clone()),
                ),
                conditions: n.conditions.keys().cloned().collect(),
            })
            .collect()
    }

    /// Whether this replica may change the cluster; a follower names the leader.
    pub fn leading(&self) -> Result<(), String> {
        if self.orchestrator.leads() {
            if self.writes() {
                return Ok(());
            }
            return Err(
                "this replica was just elected and is taking in the shared store's state; try again shortly"
                    .into(),
            );
        }
        Err(match self.orchestrator.leader() {
            Some(leader) => {
                format!("this replica does not lead; send this to the leader, {leader}")
            }
            None => {
                "this replica does not lead and no leader is elected yet; try again shortly".into()
            }
        })
    }

    /// The next step tries its write at once, however recently one failed: the
    /// last step before exiting has no later one to leave it to.
    pub fn write_now(&self) {
        self.writer.lock().expect("writer lock").resting = None;
    }

    /// At shutdown: let another replica lead at once.
    pub async fn step_down(&self) {
        if let Err(e) = self.orchestrator.release().await {
            warn!(error = %e, "could not give up the leadership; it lapses on its own");
        }
    }

    /// One task per node with pending actions, doing them in the order decided (a
    /// cordon before the eviction that follows it). Nothing is performed while a
    /// decision is only in memory: a failed store write leaves it unacted upon.
    async fn act_pending(self: &Arc<Self>) {
        let nodes: BTreeSet<String> = self
            .off_runtime(|this| {
                if this.writer.lock().expect("writer lock").pending.is_some() {
                    return BTreeSet::new();
                }
                let fleet = this.lock_fleet();
                let tried = this.tried.lock().expect("tried lock");
                // An action whose tries just failed waits `ACT_RETRY`, however
                // often a poll or a verb wakes this: a failing orchestrator is not
                // asked again every second.
                let resting = |node: &str| {
                    let next = fleet.next_action(node);
                    tried.get(node).is_some_and(|t| {
                        next.is_some_and(|p| p.id == t.id) && t.since.elapsed() < ACT_RETRY
                    })
                };
                fleet
                    .pending()
                    .into_iter()
                    .map(|(node, _)| node)
                    .filter(|node| !resting(node))
                    .collect()
            })
            .await;
        for node in nodes {
            if !self
                .acting
                .lock()
                .expect("acting lock")
                .insert(node.clone())
            {
                continue;
            }
            let this = self.clone();
            tokio::spawn(async move {
                // Read afresh before each action: an operator's uncordon may have
                // withdrawn what was queued behind the one just done.
                loop {
                    if !this.orchestrator.leads() {
                        break;
                    }
                    let id = node.clone();
                    let next = this
                        .off_runtime(move |this| {
                            let mut fleet = this.lock_fleet();
                            fleet
                                .take_action(&id)
                                .map(|p| (p, fleet.ledger.move_counts()))
                        })
                        .await;
                    let Some((pending, moves)) = next else { break };
                    if !this.perform(&node, pending, &moves).await {
                        break;
                    }
                }
                this.acting.lock().expect("acting lock").remove(&node);
            });
        }
    }

    /// Perform one action, retrying transient failures with backoff; record the
    /// outcome. Returns whether the node's next action may follow.
    async fn perform(
        self: &Arc<Self>,
        node: &str,
        pending: Pending,
        moves: &std::collections::BTreeMap<String, u32>,
    ) -> bool {
        use backon::{ExponentialBuilder, Retryable};
        let orchestrator = self.orchestrator.clone();
        let action = &pending.action;
        let term = orchestrator.term();
        // Asked again only while still queued: an operator's uncordon withdraws a
        // cordon whose first try is still under way (an orchestrator slow to answer).
        let still_queued = || {
            let (id, at) = (node.to_string(), pending.id);
            self.off_runtime(move |this| {
                this.lock_fleet()
                    .nodes
                    .get(&id)
                    .is_some_and(|n| n.policy.pending.iter().any(|p| p.id == at))
            })
        };
        let mut tries = 0;
        let result = match action {
            // A power change is never retried blindly: the BMC confirms or the step fails.
            Action::Power { op, force } => self
                .perform_power(node, *op, *force, pending.id)
                .await
                .map(Some),
            _ => {
                (|| {
                    tries += 1;
                    let again = tries > 1;
                    let orchestrator = orchestrator.clone();
                    let still_queued = still_queued();
                    async move {
                        if again && !still_queued.await {
                            return Ok(None);
                        }
                        orchestrator::perform(orchestrator.as_ref(), node, action, moves)
                            .await
                            .map(Some)
                    }
                })
                .retry(
                    ExponentialBuilder::default()
                        .with_min_delay(Duration::from_millis(500))
                        .with_max_times(3)
                        .with_jitter(),
                )
                .when(OrchestratorError::is_retriable)
                // Each failed try is shown at once (`pending[].lastError`), not
                // only once the tries are spent.
                .notify(|e, _| self.tried_failed(node, pending.id, e))
                .await
            }
        };
        // On a shared store, a replica that stopped leading while the action was
        // under way (its lease lapsed: it did not run, or NATS did not answer)
        // neither records nor counts its outcome: the leader holds the action and
        // finds out for itself what came of it.
        if self.shared && !(self.writes() && self.orchestrator.term() == term) {
            let outcome = match &result {
                Ok(Some(_)) => "done".to_string(),
                Ok(None) => "withdrawn".to_string(),
                Err(e) => e.to_string(),
            };
            warn!(
                node,
                action = action.name(),
                outcome,
                "finished after this replica stopped leading: not recorded here; the leader holds the action"
            );
            self.tried.lock().expect("tried lock").remove(node);
            self.end_action(node, pending.id).await;
            return false;
        }
        let result = match result {
            Ok(Some(done)) => Ok(done),
            Ok(None) => {
                info!(
                    node,
                    action = action.name(),
                    "withdrawn meanwhile: not tried again"
                );
                self.end_action(node, pending.id).await;
                return true;
            }
            Err(e) => Err(e),
        };
        let name = action.name();
        let (label, next) = match &result {
            Ok(_) => ("done", true),
            Err(e) => ("failed", !e.is_retriable()),
        };
        match &result {
            Err(e) if e.is_retriable() => self.tried_failed(node, pending.id, e),
            _ => {
                self.tried.lock().expect("tried lock").remove(node);
            }
        }
        if let Err(e) = &result {
            self.metrics
                .orchestrator_failures
                .get_or_create(&OperationLabel {
                    operation: name.into(),
                    reason: e.metric_label().into(),
                })
                .inc();
        }
        self.metrics
            .policy_actions
            .get_or_create(&ActionLabel {
                action: name.into(),
                result: label.into(),
            })
            .inc();
        let this = self.clone();
        let node = node.to_string();
        let step = tokio::task::spawn_blocking(move || match result {
            Ok(done) => {
                info!(node, action = name, "done");
                this.apply(|fleet, cfg, now| {
                    this.actions_recorded.fetch_add(1, Ordering::AcqRel);
                    Ok(fleet.action_done(cfg, now, &node, &pending, &done))
                })
            }
            Err(e) if e.is_retriable() => {
                warn!(node, action = name, error = %e, "not done yet; tried again shortly");
                this.lock_fleet().end_action(&node, pending.id);
                Ok(Outcome::default())
            }
            Err(e) if e.class == orchestrator::Class::Unconfirmed => {
                error!(node, action = name, error = %e, "taken but never confirmed; not tried again");
                let why = e.to_string();
                this.apply(|fleet, cfg, now| {
                    this.actions_recorded.fetch_add(1, Ordering::AcqRel);
                    Ok(fleet.action_unconfirmed(cfg, now, &node, pending.id, &why))
                })
            }
            Err(e) => {
                error!(node, action = name, error = %e, "failed; not tried again");
                let why = e.to_string();
                this.apply(|fleet, cfg, now| {
                    this.actions_recorded.fetch_add(1, Ordering::AcqRel);
                    Ok(fleet.action_failed(cfg, now, &node, pending.id, &why))
                })
            }
        })
        .await;
        if let Err(e) = step {
            error!(error = %e, "recording an action failed");
        }
        next
    }

    /// The try of `node`'s action `id` is over with nothing to record.
    async fn end_action(self: &Arc<Self>, node: &str, id: u64) {
        let node = node.to_string();
        self.off_runtime(move |this| this.lock_fleet().end_action(&node, id))
            .await;
    }

    /// Keep why the try of `node`'s action `id` failed, for its view.
    fn tried_failed(&self, node: &str, id: u64, e: &OrchestratorError) {
        self.tried.lock().expect("tried lock").insert(
            node.to_string(),
            Tried {
                id,
                error: e.to_string(),
                at: Utc::now(),
                since: Instant::now(),
            },
        );
    }

    /// Evaluate the time-driven rules every second.
    pub async fn tick_loop(self: Arc<Self>) {
        let beat = self.liveness.watch("tick", Duration::from_secs(60));
        let mut ticker = tokio::time::interval(TICK);
        loop {
            ticker.tick().await;
            beat.beat();
            let this = self.clone();
            let facts = self.facts();
            let leads = self.orchestrator.leads();
            let done = tokio::task::spawn_blocking(move || {
                this.apply(|fleet, cfg, now| {
                    let mut out = fleet.tick(cfg, now);
                    // Only the leader remediates: a follower would queue what it may
                    // not perform.
                    if leads {
                        out.absorb(fleet.remediate(cfg, now, &facts));
                    }
                    Ok(out)
                })
            })
            .await;
            if let Err(e) = done {
                error!(error = %e, "tick task failed");
            }
        }
    }
}

/// A poll's answer as it arrived ([`Hale::fetch_poll`]), and how long it took.
pub struct Fetched {
    answer: Result<Answer, IngestError>,
    took: Duration,
}

/// How far the wall clock may move apart from the monotonic one between two
/// steps before it is taken as stepped (NTP slews by 0.05 % at most).
const CLOCK_STEP: TimeDelta = TimeDelta::seconds(2);

/// How long past the last step's end the next may start before hale is taken
/// not to have run meanwhile: the tick steps every second.
const DID_NOT_RUN: Duration = Duration::from_secs(5);

/// Takes the time a step lets the fleet go, when dropped.
struct StepDone<'a>(&'a Mutex<Option<std::time::Instant>>);

impl Drop for StepDone<'_> {
    fn drop(&mut self) {
        *self.0.lock().expect("stepped lock") = Some(std::time::Instant::now());
    }
}

impl Hale {
    /// How long no step ran before this one, when longer than [`DID_NOT_RUN`]
    /// (measured on the monotonic clock, which a stopped process's keeps running).
    fn did_not_run(&self) -> Option<Duration> {
        let last = (*self.stepped.lock().expect("stepped lock"))?;
        let gap = last.elapsed();
        (gap > DID_NOT_RUN).then_some(gap)
    }

    /// How far the wall clock stepped (back when negative) since this
    /// replica's last step, when it did by more than [`CLOCK_STEP`] beside the
    /// time that passed.
    fn clock_stepped(&self, now: Time) -> Option<TimeDelta> {
        let mono = std::time::Instant::now();
        let last = self
            .clock
            .lock()
            .expect("clock lock")
            .replace((mono, now))?;
        let passed = TimeDelta::from_std(mono - last.0).ok()?;
        let by = now - last.1 - passed;
        (by.abs() > CLOCK_STEP).then_some(by)
    }
}

/// Set glibc's allocator up for a process that parses a large answer every poll:
/// two arenas rather than eight per core, so memory one thread freed is not kept
/// apart for it, and every block from 1 MiB up (an answer, its parse, a `/metrics`
/// text) mapped on its own and unmapped when freed, rather than left in the heap.
/// Call before the first thread starts.
pub fn tune_allocator() {
    // SAFETY: mallopt only changes allocator parameters; called before any other
    // thread exists, it races with no allocation.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// A large poll leaves tens of MiB of freed buffers in the allocator's arenas;
/// hand them back to the OS so the service's footprint is its live state.
fn release_freed_memory() {
    // SAFETY: glibc's malloc_trim only releases free heap pages; it has no
    // preconditions and is safe to call from any thread at any time.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The JSON array of `GET /api/v1/alerts` for `alerts`; `unknown`: the nodes
/// they name that hale does not know and will not bring in.
fn render_alerts(
    alerts: &[Alert<'_>],
    cfg: &Loaded,
    unknown: &std::collections::HashSet<&str>,
) -> axum::body::Bytes {
    let seen: Vec<SeenAlert> = alerts.iter().map(|a| seen_alert(a, cfg, unknown)).collect();
    serde_json::to_vec(&seen).expect("alerts serialise").into()
}

fn seen_alert(a: &Alert<'_>, cfg: &Loaded, unknown: &std::collections::HashSet<&str>) -> SeenAlert {
    let node = a.node(&cfg.core.identity);
    let meaning = match a.signal() {
        Signal::Watchdog => "watchdog".to_string(),
        // Everything but the watchdog is about a node.
        _ if node.is_none() => format!(
            "ignored: names no node (none of {} holds a node's name)",
            cfg.core.identity.labels.join(", ")
        ),
        _ if node.is_some_and(|n| unknown.contains(n)) => format!(
            "ignored: names {}, a node the orchestrator does not list (nodeIdentity.createFromAlerts is off)",
            node.unwrap_or_default()
        ),
        Signal::Heartbeat { .. } => "heartbeat".to_string(),
        Signal::CollectorFailed { collector } => format!("collector_failed:{collector}"),
        Signal::Unavailable { signal } => format!("unavailable:{signal}"),
        Signal::JobFailure { job } => format!("job_failure:{job}"),
        ref s @ Signal::Condition if a.claims_own_condition(s) => format!(
            "ignored: {} is a condition hale raises itself",
            a.condition_type()
        ),
        Signal::Condition => format!("condition:{}", a.condition_type()),
    };
    SeenAlert {
        fingerprint: a.fingerprint.to_string(),
        alertname: a.alertname().to_string(),
        node: node.map(str::to_string),
        meaning,
        severity: a.severity(),
        state: match a.state {
            AlertState::Suppressed => "suppressed",
            _ => "active",
        }
        .into(),
        starts_at: a.started(),
        notes: a.notes(),
    }
}

/// Operators read these in the service log; the missed heartbeat is the warning the
/// design asks for (node and time of its last heartbeat). Staleness hits every node at
/// once, so it is one line, not one per node; a node new while hale was stale
/// already (a delivery naming it) is a debug line, not the warning again.
fn log_events(outcome: &Outcome, was_stale: bool) {
    let (mut stale, mut fresh) = (0usize, 0usize);
    for e in &outcome.events {
        match &e.kind {
            EventKind::HeartbeatMissed { last_heartbeat } => warn!(
                node = %e.node_id,
                last_heartbeat = %last_heartbeat.to_rfc3339(),
                "node stopped reporting"
            ),
            EventKind::ConditionRaised { condition, .. } if condition == TELEMETRY_STALE => {
                stale += 1
            }
            EventKind::ConditionCleared { condition, .. } if condition == TELEMETRY_STALE => {
                fresh += 1
            }
            kind => info!(
                node = %e.node_id,
                event = kind.name(),
                "{}",
                crate::core::labels::loggable(&e.message)
            ),
        }
    }
    if stale > 0 && was_stale {
        debug!(
            nodes = stale,
            "new while hale is stale: marked telemetry_stale"
        );
    } else if stale > 0 {
        warn!(
            nodes = stale,
            "no trusted alert data: every node marked telemetry_stale, nothing is cleared"
        );
    }
    if fresh > 0 {
        info!(
            nodes = fresh,
            "trusted alert data again: telemetry_stale cleared"
        );
    }
}

/// The top-level keys whose value differs between two loaded configurations
/// (secrets compared by what the files hold), for the reload's log line.
fn changed_keys(was: &Loaded, is: &Loaded) -> Vec<&'static str> {
    let (a, b) = (&was.config, &is.config);
    [
        ("cluster", a.cluster != b.cluster),
        (
            "apiTokenFile",
            a.api_token_file != b.api_token_file || was.api_token != is.api_token,
        ),
        ("alertmanager", a.alertmanager != b.alertmanager),
        ("nodeIdentity", a.node_identity != b.node_identity),
        ("nodeHealth", a.node_health != b.node_health),
        ("pools", a.pools != b.pools),
        (
            "nodeEventWebhooks",
            a.node_event_webhooks != b.node_event_webhooks || was.webhooks != is.webhooks,
        ),
        ("inventory", a.inventory != b.inventory),
        ("bmc", a.bmc != b.bmc || was.bmc != is.bmc),
        ("remediation", a.remediation != b.remediation),
        ("fencing", a.fencing != b.fencing),
        ("ui", a.ui != b.ui),
        (
            "federation",
            a.federation != b.federation || was.members != is.members,
        ),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

/// What of the trust record others read: whether the source is up, staleness, the
/// hold, the last error, and the last trusted input to the half minute (followers
/// export it; a dashboard plots its age).
fn shown_trust(t: &Trust) -> (bool, bool, Option<Time>, Option<String>, Option<i64>) {
    (
        t.source_up,
        t.stale,
        t.hold_until,
        t.last_error.clone(),
        t.last_trusted.map(|t| t.timestamp() / 30),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrator::NoOrchestrator;

    /// What only a restart changes: the cluster's name too where it names the
    /// NATS store's stream, buckets and consumers.
    #[test]
    fn a_reload_refuses_what_only_a_restart_changes() {
        let nats = "store: { kind: nats, nats: { urls: [nats://127.0.0.1:4222] } }\n";
        let table: &[(&str, &str, &[&str])] = &[
            ("cluster: a\n", "cluster: b\n", &[]),
            (
                "cluster: a\n",
                "cluster: a\nlisten: 127.0.0.1:1\n",
                &["listen"],
            ),
            (
                &format!("cluster: a\n{nats}"),
                &format!("cluster: b\n{nats}"),
                &["cluster"],
            ),
            (
                &format!("cluster: a\n{nats}"),
                &format!("cluster: a\n{nats}"),
                &[],
            ),
            (
                "cluster: a\n",
                "cluster: a\norchestrator: { kind: slurm }\n",
                &["orchestrator"],
            ),
            (
                "cluster: a\napiTokenFile: /etc/hale/token\n",
                "cluster: a\n",
                &["apiTokenFile"],
            ),
            (
                "cluster: a\n",
                "cluster: a\napiTokenFile: /etc/hale/token\n",
                &[],
            ),
            (
                "apiTokenFile: /etc/hale/token\n",
                "apiTokenFile: /etc/hale/other\n",
                &[],
            ),
        ];
        for (before, after, refused) in table {
            let before = Config::parse("before.yaml", before).unwrap();
            let after = Config::parse("after.yaml", after).unwrap();
            assert_eq!(restart_only(&before, &after), *refused, "{after:?}");
        }
    }

    /// A hale on `extra` and a store in `dir`, with no orchestrator.
    fn opened(dir: &std::path::Path, extra: &str) -> Arc<Hale> {
        let path = dir.join("hale.yaml");
        let store = format!("store: {{ path: {} }}\n", dir.join("data").display());
        std::fs::write(&path, format!("{store}{extra}")).unwrap();
        Hale::open(Config::load(Some(&path)).unwrap(), Arc::new(NoOrchestrator)).unwrap()
    }

    /// A delivery's answer counts the new nodes `nodeIdentity.maxNodes` refused,
    /// beside its alerts: the sender sees that some of them went nowhere.
    #[tokio::test]
    async fn a_webhook_answer_counts_the_nodes_refused() {
        let dir = tempfile::tempdir().unwrap();
        let hale = opened(
            dir.path(),
            "alertmanager: { pollInterval: 0, requireWatchdog: false }\nnodeIdentity: { maxNodes: 3 }\n",
        );
        let alert = |node: &str| {
            format!(
                r#"{{"status":"firing","labels":{{"alertname":"HaleNodeReporting","hale_signal":"heartbeat","node":"{node}"}},"annotations":{{}},"startsAt":"2026-12-01T00:00:00Z","fingerprint":"hb-{node}"}}"#
            )
        };
        let deliver = |nodes: &[&str]| {
            let alerts: Vec<String> = nodes.iter().map(|n| alert(n)).collect();
            let body = format!(
                r#"{{"version":"4","status":"firing","receiver":"hale","groupKey":"g","truncatedAlerts":0,"alerts":[{}]}}"#,
                alerts.join(",")
            );
            hale.ingest_webhook(body.as_bytes()).unwrap()
        };
        let first = deliver(&["n1", "n2"]);
        assert_eq!((first.alerts, first.refused), (2, 0));
        let more = deliver(&["n1", "n3", "n4", "n5"]);
        assert_eq!((more.alerts, more.unmatched, more.refused), (4, 0, 2));
        assert!(hale.node("n3").is_some() && hale.node("n4").is_none());
    }

    /// The overview lists the halts that hold a node back now: not one the node
    /// recovered from, nor one standing while hale cannot see the node — whose
    /// view says what holds its policy instead.
    #[tokio::test]
    async fn the_overview_lists_only_live_halts() {
        use crate::core::policy::{Conclusion, Guardrail, Verdict};
        let dir = tempfile::tempdir().unwrap();
        let hale = opened(
            dir.path(),
            "alertmanager: { pollInterval: 0, requireWatchdog: false }
",
        );
        let body = r#"{"version":"4","status":"firing","receiver":"hale","groupKey":"g","truncatedAlerts":0,"alerts":[
            {"status":"firing","labels":{"alertname":"SmartWarning","node":"n1"},"annotations":{},"startsAt":"2026-12-01T00:00:00Z","fingerprint":"a1"},
            {"status":"firing","labels":{"alertname":"SmartWarning","node":"n2"},"annotations":{},"startsAt":"2026-12-01T00:00:00Z","fingerprint":"a2"},
            {"status":"firing","labels":{"alertname":"NodeCollectorFailed","hale_signal":"collector_failed","node":"n3"},"annotations":{},"startsAt":"2026-12-01T00:00:00Z","fingerprint":"a3"}]}"#;
        hale.ingest_webhook(body.as_bytes()).unwrap();
        {
            let mut fleet = hale.lock_fleet();
            for id in ["n1", "n2", "n3"] {
                fleet.nodes.get_mut(id).unwrap().policy.conclusion = Some(Conclusion::Halted {
                    action: Verdict::Cordon,
                    guardrail: Guardrail::MaxUnavailable,
                });
            }
            fleet.nodes.get_mut("n2").unwrap().policy.recovered_since = Some(Utc::now());
        }
        let halts = hale.cluster().health.unwrap().halts;
        let nodes: Vec<&str> = halts.iter().map(|h| h.node.as_str()).collect();
        assert_eq!(nodes, ["n1"]);
        assert_eq!(
            hale.node("n3").unwrap().policy_held_by,
            ["collector_failed"]
        );
        assert!(hale.node("n1").unwrap().policy_held_by.is_empty());
        assert!(hale.node("n2").unwrap().policy_lifts_at.is_some());
    }

    /// The act loop sleeps until the first rest after failed tries ends, at most
    /// `ACT_RETRY`; a rest over (its action tried since, or withdrawn) wakes no
    /// one, or the loop would spin.
    #[tokio::test]
    async fn the_act_loop_wakes_when_a_rest_ends() {
        let dir = tempfile::tempdir().unwrap();
        let hale = opened(dir.path(), "");
        assert_eq!(hale.next_retry(), ACT_RETRY);
        let tried = |since| Tried {
            id: 1,
            error: "refused".into(),
            at: Utc::now(),
            since,
        };
        let ago = |secs| Instant::now() - Duration::from_secs(secs);
        hale.tried
            .lock()
            .unwrap()
            .insert("old".into(), tried(ago(20)));
        assert_eq!(
            hale.next_retry(),
            ACT_RETRY,
            "a rest over counts for nothing"
        );
        hale.tried
            .lock()
            .unwrap()
            .insert("new".into(), tried(ago(4)));
        let next = hale.next_retry();
        assert!(
            next > Duration::from_secs(5) && next <= Duration::from_secs(6),
            "{next:?}"
        );
    }

    /// What automation queued in a pool that then observes is never done: a reload
    /// to observe withdraws it, and so does a start with observe on a store that
    /// kept it (a stop between the decision and the action).
    #[tokio::test]
    async fn observe_withdraws_what_automation_queued_at_reload_and_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hale.yaml");
        let yaml = |mode: &str| {
            let mut y = format!(
                "alertmanager: {{ pollInterval: 0, requireWatchdog: false }}
store: {{ path: {} }}
pools: [{{ name: gpu, selector: {{ pool: gpu }}, nodeHealth: {{ mode: {mode} }} }}]
inventory:
",
                dir.path().display()
            );
            for i in 0..10 {
                y.push_str(&format!(
                    "  - {{ id: g{i}, labels: {{ pool: gpu }} }}
"
                ));
            }
            y
        };
        let open = |mode: &str| {
            std::fs::write(&path, yaml(mode)).unwrap();
            Hale::open(Config::load(Some(&path)).unwrap(), Arc::new(NoOrchestrator)).unwrap()
        };
        // A first score moves nothing: a warning first, then critical alerts.
        let sick = |hale: &Hale| {
            let alert = |name: &str, severity: &str| {
                format!(
                    r#"{{"status":"firing","labels":{{"alertname":"{name}","node":"g0","severity":"{severity}"}},"annotations":{{}},"startsAt":"2026-12-01T00:00:00Z","fingerprint":"{name}"}}"#
                )
            };
            let mut alerts = vec![alert("Early", "warning")];
            for more in [
                vec![],
                vec![
                    alert("DiskFailing", "critical"),
                    alert("EccFailing", "critical"),
                ],
            ] {
                alerts.extend(more);
                let body = format!(
                    r#"{{"version":"4","status":"firing","receiver":"hale","groupKey":"g","truncatedAlerts":0,"alerts":[{}]}}"#,
                    alerts.join(",")
                );
                hale.ingest_webhook(body.as_bytes()).unwrap();
            }
        };
        let queued = |hale: &Hale| hale.lock_fleet().pending().len();
        let halted = |hale: &Hale| {
            hale.events(
                "g0",
                &EventQuery {
                    types: vec!["POLICY_HALTED".into()],
                    page_size: 10,
                    ..EventQuery::default()
                },
            )
            .unwrap()
            .unwrap()
            .events
            .len()
        };
        // No act loop runs here: the cordon stays queued, as behind an
        // orchestrator that does not answer.
        let hale = open("cordon");
        sick(&hale);
        assert_eq!(queued(&hale), 1, "the cordon queued");
        std::fs::write(&path, yaml("observe")).unwrap();
        hale.reload().unwrap();
        assert_eq!(queued(&hale), 0, "withdrawn at the reload");
        assert_eq!(halted(&hale), 1);
        assert_eq!(hale.node("g0").unwrap().status, crate::core::Status::Ready);
        drop(hale);

        std::fs::write(&path, yaml("cordon")).unwrap();
        let hale = open("cordon");
        sick(&hale);
        assert_eq!(queued(&hale), 1);
        drop(hale);
        let hale = open("observe");
        assert_eq!(queued(&hale), 0, "withdrawn at the start");
        assert_eq!(halted(&hale), 2);
    }

    /// Every order pages through every match exactly once, in the order a plain
    /// sort of the whole listing gives; the count and the search agree.
    #[tokio::test]
    async fn every_sort_pages_through_each_match_once_in_order() {
        use crate::view::{Sort, SortKey, health_rank, page_after, status_rank};
        let dir = tempfile::tempdir().unwrap();
        let mut yaml = format!(
            "alertmanager: {{ pollInterval: 0, requireWatchdog: false }}\nstore: {{ path: {} }}\ninventory:\n",
            dir.path().display()
        );
        for i in 0..23 {
            yaml.push_str(&format!(
                "  - {{ id: n{i:02}, hostname: h{} }}\n",
                (i * 7) % 23
            ));
        }
        let loaded = Config::parse("hale.yaml", &yaml)
            .unwrap()
            .resolve("hale.yaml", &yaml)
            .unwrap();
        let hale = Hale::open(loaded, Arc::new(NoOrchestrator)).unwrap();
        // Scores 100, 95, 75 and 60 among unscored nodes, with ties.
        let alerts: Vec<String> = (0..16)
            .map(|i| {
                let severity = ["info", "warning", "critical"][i % 3];
                format!(
                    r#"{{"status":"firing","labels":{{"alertname":"A{i}","node":"n{:02}","severity":"{severity}"}},"annotations":{{}},"startsAt":"2026-12-01T00:00:00Z","fingerprint":"f{i}"}}"#,
                    i + 3
                )
            })
            .collect();
        let body = format!(
            r#"{{"version":"4","status":"firing","receiver":"hale","groupKey":"g","truncatedAlerts":0,"alerts":[{}]}}"#,
            alerts.join(",")
        );
        hale.ingest_webhook(body.as_bytes()).unwrap();
        let everything = hale.nodes(&NodeQuery {
            page_size: 1000,
            ..NodeQuery::default()
        });
        assert_eq!(everything.nodes.len(), 23);
        assert!(everything.nodes.iter().any(|n| n.score == Some(75)));
        for key in SortKey::ALL {
            for descending in [false, true] {
                let sort = Sort { key, descending };
                let mut want = everything.nodes.clone();
                want.sort_by(|a, b| {
                    let rank = |n: &NodeSummary| match key {
                        SortKey::Id => (0, String::new()),
                        SortKey::Hostname => (0, n.hostname.clone()),
                        SortKey::Status => (status_rank(n.status), String::new()),
                        SortKey::Health => (health_rank(n.health), String::new()),
                        SortKey::Score => (n.score.map_or(0, |s| u16::from(s) + 1), String::new()),
                    };
                    let order = (rank(a), &a.id).cmp(&(rank(b), &b.id));
                    if descending { order.reverse() } else { order }
                });
                let mut got = Vec::new();
                let mut after = None;
                loop {
                    let page = hale.nodes(&NodeQuery {
                        page_size: 4,
                        after: after.take(),
                        sort,
                        count: true,
                        ..NodeQuery::default()
                    });
                    assert_eq!(page.total, Some(23), "{sort:?}");
                    got.extend(page.nodes.into_iter().map(|n| n.id));
                    let Some(token) = page.next_page_token else {
                        break;
                    };
                    after = Some(page_after(sort, &token).expect("its own token"));
                    let other = Sort {
                        key,
                        descending: !descending,
                    };
                    assert_eq!(
                        page_after(other, &token),
                        None,
                        "a token belongs to its sort"
                    );
                }
                let want: Vec<String> = want.into_iter().map(|n| n.id).collect();
                assert_eq!(got, want, "{}", sort.name());
            }
        }
        let found = hale.nodes(&NodeQuery {
            page_size: 10,
            search: Some("h1".into()),
            count: true,
            ..NodeQuery::default()
        });
        // Hostnames h1, h10…h19 (11) hold "h1"; no id does.
        assert_eq!(found.total, Some(11));
        assert!(found.nodes.iter().all(|n| n.hostname.starts_with("h1")));
        assert!(found.next_page_token.is_some());
    }

    /// A flow an operator cancelled counts as cancelled, not as one that failed.
    #[tokio::test]
    async fn a_cancelled_flow_is_counted_apart_from_a_failed_one() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            "store: {{ path: {} }}\ninventory: [ {{ id: n1 }} ]",
            dir.path().display()
        );
        let loaded = Config::parse("hale.yaml", &yaml)
            .unwrap()
            .resolve("hale.yaml", &yaml)
            .unwrap();
        let hale = Hale::open(loaded, Arc::new(NoOrchestrator)).unwrap();
        hale.apply(|_, _, now| {
            let ended = |cancelled| crate::core::Event {
                node_id: "n1".into(),
                kind: EventKind::RemediationFailed {
                    action: "reboot".into(),
                    step: "drain".into(),
                    cancelled,
                },
                occurred_at: now,
                message: String::new(),
            };
            Ok(Outcome {
                events: vec![ended(true), ended(false), ended(true)],
                ..Outcome::default()
            })
        })
        .unwrap();
        let count = |result: &str| {
            hale.metrics
                .remediations
                .get_or_create(&ActionLabel {
                    action: "reboot".into(),
                    result: result.into(),
                })
                .get()
        };
        assert_eq!((count("cancelled"), count("failed")), (2, 1));
    }

    #[tokio::test]
    async fn a_panic_under_the_fleet_lock_makes_hale_unhealthy() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!("store: {{ path: {} }}", dir.path().display());
        let loaded = Config::parse("hale.yaml", &yaml)
            .unwrap()
            .resolve("hale.yaml", &yaml)
            .unwrap();
        let hale = Hale::open(loaded, Arc::new(NoOrchestrator)).unwrap();
        assert_eq!(hale.alive(), Ok(()));
        let h = hale.clone();
        let panicked = std::thread::spawn(move || {
            h.apply(|_, _, _| -> Result<Outcome, CoreError> { panic!("a bug in a step") })
        })
        .join();
        assert!(panicked.is_err());
        let e = hale.alive().unwrap_err();
        assert!(e.contains("poisoned"), "{e}");
    }

    /// A poll's step holds the fleet lock for seconds on a large fleet. The async
    /// paths that wait on it must wait off the runtime: on a runtime of one worker,
    /// another task still runs while each of them waits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn waiting_on_the_fleet_lock_leaves_the_runtime_serving() {
        use std::sync::mpsc::channel;
        type Waiter = fn(Arc<Hale>) -> futures::future::BoxFuture<'static, ()>;
        let waiters: [(&str, Waiter); 2] = [
            ("act", |h| Box::pin(async move { h.act_pending().await })),
            ("power status", |h| {
                Box::pin(async move {
                    let _ = h.power("n1", crate::bmc::Verb::Status, false).await;
                })
            }),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hale.yaml");
        let yaml = format!(
            "store: {{ path: {} }}\ninventory: [{{ id: n1 }}]\n",
            dir.path().display()
        );
        std::fs::write(&path, &yaml).unwrap();
        let loaded = Config::load(Some(&path)).unwrap();
        let hale = Hale::open(loaded, Arc::new(NoOrchestrator)).unwrap();
        for (name, waiter) in waiters {
            let (release, released) = channel::<()>();
            let (held, is_held) = channel::<()>();
            let h = hale.clone();
            let holder = std::thread::spawn(move || {
                let _fleet = h.lock_fleet();
                held.send(()).unwrap();
                released.recv().unwrap();
            });
            is_held.recv().unwrap();
            // The waiter runs on the only worker before the probe is spawned.
            let (started, has_started) = channel::<()>();
            let wait = waiter(hale.clone());
            let waiting = tokio::spawn(async move {
                started.send(()).unwrap();
                wait.await
            });
            has_started.recv().unwrap();
            let (ran, has_run) = channel::<()>();
            tokio::spawn(async move { ran.send(()).unwrap() });
            let served = has_run.recv_timeout(Duration::from_secs(10));
            release.send(()).unwrap();
            holder.join().unwrap();
            waiting.await.unwrap();
            assert!(
                served.is_ok(),
                "{name}: the runtime served nothing while it waited"
            );
        }
    }
}
