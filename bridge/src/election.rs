//! Leader election where the orchestrator has none (`store.kind: nats` without
//! Kubernetes): one key in the store's lease bucket, whose max age is the lease
//! time. A replica takes the key with `create` (refused while it exists) and
//! renews it every third of the lease with `update` against the revision it last
//! wrote (refused once anyone else wrote it); a holder that stops renewing leaves
//! the key to expire a lease time after its last write, and another, looking every
//! second, creates it: a dead leader is replaced within the lease and a second.
//!
//! The rule is the Kubernetes Lease's: the holder counts itself leader only until
//! two thirds of the lease after it *sent* the renewal that succeeded, while the key
//! lives a whole lease after the server stored it. A holder cut off from NATS stops
//! acting a third of a lease before anyone else can start. Only a write whose
//! answer came extends a leadership: a key read naming this replica (a write whose
//! answer was lost) gives the revision to renew against, nothing more.
//!
//! A term is a chain of writes, each against the revision of the one before; a
//! leadership that lapsed (NATS hung or full, renewals unanswered) and comes back
//! through its own chain is the same term, as no other replica can have written
//! the key between: what it took in and could not write yet is still the record.
//! A create starts a new term, and so does a chain a lost create may have broken.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use tracing::{info, warn};

use crate::core::policy::Done;
use crate::orchestrator::{Fut, Observed, Orchestrator, Report, Workload};
use crate::store::nats::{LEASE_KEY as KEY, Lease};

/// One replica's standing in the election.
pub struct NatsLease {
    identity: String,
    state: Mutex<State>,
    lease: Lease,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[derive(Default)]
struct State {
    /// Leader until then; `None`: not the leader.
    until: Option<Instant>,
    /// Counts the times this replica became leader.
    term: u64,
    /// The holder the key last named.
    holder: Option<String>,
    /// The key's revision as this replica last wrote it.
    revision: Option<u64>,
    /// `revision` continues, write after write each against the one before, the
    /// chain of the current term: while it does, no other replica can have
    /// written the key, so a leadership that lapsed (renewals unanswered) and
    /// comes back through it is the same term.
    chained: bool,
    /// A create was sent and its answer has not come.
    create_unanswered: bool,
    /// A lease after the store last answered about the key: past it, who held
    /// it then says nothing of who leads now.
    answered_until: Option<Instant>,
}

impl NatsLease {
    /// Start electing on `lease`'s runtime.
    pub fn start(lease: Lease, identity: String) -> Arc<NatsLease> {
        let me = Arc::new(NatsLease {
            identity,
            state: Mutex::default(),
            lease,
            task: Mutex::new(None),
        });
        info!(identity = %me.identity, bucket = %me.lease.bucket.name,
            "electing a leader on the NATS store's lease");
        let task = me.lease.runtime.spawn(run(me.clone()));
        *me.task.lock().expect("task lock") = Some(task);
        me
    }

    pub fn leads(&self) -> bool {
        let s = self.state.lock().expect("lease lock");
        s.until.is_some_and(|t| Instant::now() < t)
    }

    pub fn term(&self) -> u64 {
        self.state.lock().expect("lease lock").term
    }

    /// The replica that held the key when last seen; never this one once its
    /// leadership lapsed (cut off from NATS, it cannot tell who leads now), nor
    /// any once the store has not answered for a lease (its lease ran out too).
    pub fn holder(&self) -> Option<String> {
        let s = self.state.lock().expect("lease lock");
        let now = Instant::now();
        let lapsed = s.until.is_none_or(|t| t <= now);
        let unanswered = s.answered_until.is_some_and(|t| t <= now);
        if unanswered {
            return None;
        }
        s.holder
            .clone()
            .filter(|h| !(lapsed && *h == self.identity))
    }

    /// Stop electing and give the key up, so another replica leads at once.
    pub async fn release(&self) {
        let task = self.task.lock().expect("task lock").take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
        let revision = {
            let mut s = self.state.lock().expect("lease lock");
            s.until = None;
            s.revision.take()
        };
        if let Some(rev) = revision {
            let bucket = self.lease.bucket.clone();
            let gone = self
                .lease
                .runtime
                .spawn(async move { bucket.delete_expect_revision(KEY, Some(rev)).await });
            match tokio::time::timeout(Duration::from_secs(2), gone).await {
                Ok(Ok(Ok(()))) => info!("gave the NATS lease up"),
                _ => warn!("could not give the NATS lease up; it expires on its own"),
            }
        }
    }
}

/// What one round found.
enum Round {
    /// This replica's conditional write of the key landed, at this revision:
    /// `created` a new chain of writes, or renewed its own.
    Held {
        revision: u64,
        created: bool,
    },
    /// The key names this replica at this revision, read rather than written: a
    /// write whose answer was lost landed. It extends nothing (when that write
    /// landed is not known, and the read may come from a copy behind); the next
    /// renewal, against it, does.
    Landed(u64),
    Other(Option<String>),
}

async fn attempt(me: &NatsLease) -> Result<Round, String> {
    let bucket = &me.lease.bucket;
    let mine = me.state.lock().expect("lease lock").revision;
    if let Some(rev) = mine {
        match bucket.update(KEY, me.identity.clone().into(), rev).await {
            Ok(revision) => {
                return Ok(Round::Held {
                    revision,
                    created: false,
                });
            }
            // Someone wrote the key since, or this replica's own write landed
            // and its answer was lost: the key says which.
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    match bucket.entry(KEY).await.map_err(|e| e.to_string())? {
        // This process's own (the identity names the process), past the revision
        // it last knew: a read at or before it is a copy behind.
        Some(e) if e.operation == kv::Operation::Put && e.value == me.identity.as_bytes() => {
            if mine.is_none_or(|r| e.revision > r) {
                Ok(Round::Landed(e.revision))
            } else {
                Err("the key as read is behind what this replica wrote: asking again".into())
            }
        }
        Some(e) if e.operation == kv::Operation::Put => Ok(Round::Other(Some(
            String::from_utf8_lossy(&e.value).into_owned(),
        ))),
        _ => {
            // Until its answer comes, a create may have landed: what the key then
            // shows may start a chain of its own, not continue the last.
            me.state.lock().expect("lease lock").create_unanswered = true;
            match bucket.create(KEY, me.identity.clone().into()).await {
                Ok(revision) => Ok(Round::Held {
                    revision,
                    created: true,
                }),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(Round::Other(None)),
                Err(e) => Err(e.to_string()),
            }
        }
    }
}

/// How often a replica that does not hold the key looks for it gone: the key
/// expires a lease after its last write, and whoever creates it next leads, so a
/// look every second brings a new leader at most a second after the expiry.
const WATCH: Duration = Duration::from_secs(1);

async fn run(me: Arc<NatsLease>) {
    let duration = me.lease.duration;
    me.state.lock().expect("lease lock").answered_until = Some(Instant::now() + duration);
    loop {
        let sent = Instant::now();
        let round = tokio::time::timeout(duration / 3, attempt(&me)).await;
        {
            let mut s = me.state.lock().expect("lease lock");
            if matches!(round, Ok(Ok(_))) {
                s.answered_until = Some(Instant::now() + duration);
            }
            match round {
                Ok(Ok(Round::Held { revision, created })) => {
                    let lapsed = s.until.is_none_or(|t| t <= Instant::now());
                    if lapsed && !created && s.chained && s.term > 0 {
                        // The same term goes on: what this replica holds, written
                        // or not yet, is still the record.
                        info!(identity = %me.identity,
                            "leading again: no other replica held the lease meanwhile");
                    } else if lapsed || created {
                        s.term += 1;
                        info!(identity = %me.identity, "leading: this replica acts");
                    }
                    s.until = Some(sent + duration * 2 / 3);
                    s.revision = Some(revision);
                    s.holder = Some(me.identity.clone());
                    s.chained = true;
                    if created {
                        s.create_unanswered = false;
                    }
                }
                Ok(Ok(Round::Landed(revision))) => {
                    s.revision = Some(revision);
                    s.chained &= !s.create_unanswered;
                    s.create_unanswered = false;
                }
                Ok(Ok(Round::Other(holder))) => {
                    match s.until.take() {
                        Some(t) if Instant::now() < t => {
                            warn!("the NATS lease is held by another replica: stepping down");
                        }
                        // Lapsed with no round between to say so: this replica did
                        // not run (stopped, starved of CPU), or NATS answered late.
                        Some(_) => warn!(identity = %me.identity,
                            "no longer leading: the NATS lease lapsed before this replica renewed it, and another replica holds it now; this replica stopped acting at its deadline"),
                        None => {}
                    }
                    s.revision = None;
                    s.chained = false;
                    if holder.is_some() {
                        s.holder = holder;
                    }
                }
                // Leadership, if held, lapses at its deadline unless a renewal lands.
                Ok(Err(e)) => warn!(error = %crate::store::nats::explained(e),
                    "could not read or renew the NATS lease"),
                Err(_) => warn!("NATS did not answer about the lease in time"),
            }
            // A term whose renewals went unanswered ended at its deadline: said once.
            if s.until.is_some_and(|t| t <= Instant::now()) {
                s.until = None;
                warn!(identity = %me.identity,
                    "no longer leading: the NATS lease was not renewed in time; this replica stopped acting at its deadline");
            }
        }
        // The leader renews every third of the lease; the others, and a holder
        // whose leadership lapsed, try again sooner.
        let holding = me.leads();
        tokio::time::sleep(if holding {
            duration / 3
        } else {
            WATCH.min(duration / 3)
        })
        .await;
    }
}

/// An orchestrator whose leadership comes from the NATS lease.
pub struct Elected {
    pub inner: Arc<dyn Orchestrator>,
    pub lease: Arc<NatsLease>,
}

impl Orchestrator for Elected {
    fn leads(&self) -> bool {
        self.lease.leads()
    }
    fn term(&self) -> u64 {
        self.lease.term()
    }
    fn leader(&self) -> Option<String> {
        self.lease.holder()
    }
    fn elects(&self) -> bool {
        true
    }
    fn changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.inner.changes()
    }
    fn restart_hint(&self) -> &'static str {
        self.inner.restart_hint()
    }
    fn publishes(&self) -> bool {
        self.inner.publishes()
    }
    fn publish<'a>(&'a self, reports: &'a [Report]) -> Fut<'a, ()> {
        self.inner.publish(reports)
    }
    fn inventory(&self) -> Fut<'_, Option<Vec<Observed>>> {
        self.inner.inventory()
    }
    fn cordon<'a>(&'a self, node: &'a str, by: &'a str, reason: &'a str) -> Fut<'a, ()> {
        self.inner.cordon(node, by, reason)
    }
    fn uncordon<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        self.inner.uncordon(node)
    }
    fn gate<'a>(&'a self, node: &'a str, on: bool) -> Fut<'a, ()> {
        self.inner.gate(node, on)
    }
    fn drain<'a>(&'a self, node: &'a str, active: bool) -> Fut<'a, Done> {
        self.inner.drain(node, active)
    }
    fn workloads<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<Workload>> {
        self.inner.workloads(node)
    }
    fn evict<'a>(
        &'a self,
        node: &'a str,
        fault: &'a str,
        moved: &'a [&'a Workload],
        failed: &'a [&'a Workload],
        message: &'a str,
    ) -> Fut<'a, Vec<String>> {
        self.inner.evict(node, fault, moved, failed, message)
    }
    fn terminate<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        self.inner.terminate(node)
    }
    fn release_work<'a>(&'a self, node: &'a str, on: bool) -> Fut<'a, ()> {
        self.inner.release_work(node, on)
    }
    fn fails_work(&self) -> bool {
        self.inner.fails_work()
    }
    fn can_reboot(&self) -> bool {
        self.inner.can_reboot()
    }
    fn reboot<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        self.inner.reboot(node)
    }
    fn bmc_address(&self, node: &str) -> Option<String> {
        self.inner.bmc_address(node)
    }
    fn release(&self) -> Fut<'_, ()> {
        Box::pin(async move {
            self.lease.release().await;
            self.inner.release().await
        })
    }
}
