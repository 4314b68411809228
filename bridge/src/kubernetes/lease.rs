//! Leader election on a `coordination.k8s.io/v1` Lease, with the semantics of
//! client-go's election: get, create or replace under the Lease's resourceVersion (a
//! 409 means someone else wrote first), take over only a Lease seen unchanged for a
//! whole lease duration on this process's own clock, renew every third of it.
//!
//! The property hale needs is that a replica which loses the Lease stops acting
//! before another can start. A takeover needs the Lease unchanged for `duration`
//! after the holder's last renewal reached the API server, while the holder counts
//! itself leader only until two thirds of `duration` after it *sent* that renewal.
//! Every write the adapter makes runs under that deadline ([`Leadership::deadline`]):
//! one not answered by then is abandoned, so the last third is the margin for a
//! request already on the wire. A Lease deleted under a holder is waited out the
//! same way before it is created again.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tracing::{debug, info, warn};

/// What `observed` records while the Lease does not exist.
const ABSENT: &str = "";

/// One replica's standing in the election.
pub struct Leadership {
    pub identity: String,
    state: Mutex<State>,
    /// Writes to the cluster in flight, which a release waits for.
    writing: AtomicUsize,
}

#[derive(Default)]
struct State {
    /// Leader until then; `None`: not the leader.
    until: Option<Instant>,
    /// Counts the times this replica became leader.
    term: u64,
    /// The holder the Lease last named.
    holder: Option<String>,
    /// The Lease's resourceVersion as last seen ([`ABSENT`] while it does not
    /// exist), and when that was first seen; `None` before the first look.
    observed: Option<(String, Instant)>,
}

/// Held while a write is in flight.
pub struct Writing<'a>(&'a AtomicUsize);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Leadership {
    pub fn new(identity: String) -> Leadership {
        Leadership {
            identity,
            state: Mutex::default(),
            writing: AtomicUsize::new(0),
        }
    }

    /// Until when this replica leads; `None`: it does not.
    pub fn deadline(&self) -> Option<Instant> {
        self.state
            .lock()
            .expect("lease lock")
            .until
            .filter(|t| Instant::now() < *t)
    }

    pub fn leads(&self) -> bool {
        self.deadline().is_some()
    }

    /// How many times this replica became leader: a change means a new term.
    pub fn term(&self) -> u64 {
        self.state.lock().expect("lease lock").term
    }

    /// Who holds the Lease, as last seen; never this replica once its leadership
    /// lapsed (cut off from the API server, it cannot tell who leads now).
    pub fn holder(&self) -> Option<String> {
        let s = self.state.lock().expect("lease lock");
        let lapsed = s.until.is_none_or(|t| t <= Instant::now());
        s.holder
            .clone()
            .filter(|h| !(lapsed && *h == self.identity))
    }

    /// Count a write in flight until the guard drops.
    pub fn writing(&self) -> Writing<'_> {
        self.writing.fetch_add(1, Ordering::AcqRel);
        Writing(&self.writing)
    }

    /// Stop leading now; returns until when it would have led.
    fn step_down(&self) -> Option<Instant> {
        self.state.lock().expect("lease lock").until.take()
    }
}

fn micro_now() -> MicroTime {
    let now = chrono::Utc::now();
    MicroTime(
        k8s_openapi::jiff::Timestamp::from_microsecond(now.timestamp_micros())
            .expect("a chrono time is in range"),
    )
}

/// How soon a round that met a conflict reads the Lease again.
const CONFLICT_RETRY: Duration = Duration::from_millis(200);

/// How soon a round that failed (an error, no answer in time) tries again.
fn failed_retry(duration: Duration) -> Duration {
    (duration / 10).max(CONFLICT_RETRY)
}

/// Keep trying to hold `name` for as long as the task runs.
pub async fn run(api: Api<Lease>, name: String, duration: Duration, me: &Leadership) {
    // Rounded up: the Lease must not promise others less than this replica waits.
    let seconds = duration.as_secs_f64().ceil().max(1.0) as i32;
    let renew_deadline = duration * 2 / 3;
    loop {
        // A term whose renewals failed ended at its deadline: said once.
        {
            let mut s = me.state.lock().expect("lease lock");
            if s.until.is_some_and(|t| t <= Instant::now()) {
                s.until = None;
                warn!(
                    lease = name,
                    identity = me.identity,
                    "no longer leading: the Lease was not renewed in time; this replica stopped acting at its deadline"
                );
            }
        }
        let sent = Instant::now();
        // A hung request must not hold the loop: the next round starts afresh.
        let round =
            tokio::time::timeout(duration / 3, attempt(&api, &name, seconds, duration, me)).await;
        match round {
            Ok(Ok(Round::Held)) => {
                let mut s = me.state.lock().expect("lease lock");
                if s.until.is_none_or(|t| t <= Instant::now()) {
                    s.term += 1;
                    info!(
                        lease = name,
                        identity = me.identity,
                        "leading: this replica acts"
                    );
                }
                s.until = Some(sent + renew_deadline);
                s.holder = Some(me.identity.clone());
            }
            Ok(Ok(Round::Other)) => {
                if me.step_down().is_some_and(|t| Instant::now() < t) {
                    warn!(
                        lease = name,
                        "the Lease is held by another replica: stepping down"
                    );
                }
            }
            // Someone wrote the Lease between this replica's read and its write (its
            // own earlier write, or a rival's): nothing is known until the next
            // read. Leadership, if held, lapses at its deadline unless that read
            // renews it.
            Ok(Ok(Round::Conflict)) => {
                debug!(
                    lease = name,
                    "the Lease changed between reading and renewing it; reading it again"
                );
                tokio::time::sleep(CONFLICT_RETRY).await;
                continue;
            }
            // Leadership lapses on its own at its deadline unless a try before it
            // renews: tried again soon, as client-go retries within its renew
            // deadline — one 500 while etcd changes leader must not end a term.
            Ok(Err(e)) => {
                warn!(lease = name, error = %super::said(&e), "could not read or renew the Lease; trying again");
                tokio::time::sleep(failed_retry(duration)).await;
                continue;
            }
            Err(_) => {
                warn!(
                    lease = name,
                    "the API server did not answer about the Lease in time; trying again"
                );
                tokio::time::sleep(failed_retry(duration)).await;
                continue;
            }
        }
        tokio::time::sleep(duration / 3).await;
    }
}

/// Whether a Lease last seen as `version` has been so for `held_for`, starting the
/// clock when the version is new to this replica.
fn unchanged_for(me: &Leadership, version: &str, held_for: Duration) -> bool {
    let mut s = me.state.lock().expect("lease lock");
    match &s.observed {
        Some((v, at)) if v == version => at.elapsed() >= held_for,
        _ => {
            s.observed = Some((version.to_string(), Instant::now()));
            false
        }
    }
}

/// What one round found.
#[derive(Debug, PartialEq)]
enum Round {
    /// This replica holds the Lease.
    Held,
    /// Another does (or it is not this replica's to take yet).
    Other,
    /// The write met a newer version: read again.
    Conflict,
}

/// One round: whether this replica holds the Lease afterwards.
async fn attempt(
    api: &Api<Lease>,
    name: &str,
    seconds: i32,
    duration: Duration,
    me: &Leadership,
) -> kube::Result<Round> {
    let Some(mut lease) = api.get_opt(name).await? else {
        // Deleted under a holder that may still think it leads: wait it out. Only
        // a replica that never saw the Lease (the first start) creates it at once.
        let first_look = me.state.lock().expect("lease lock").observed.is_none();
        if !first_look && !unchanged_for(me, ABSENT, duration) {
            return Ok(Round::Other);
        }
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(me.identity.clone()),
                lease_duration_seconds: Some(seconds),
                acquire_time: Some(micro_now()),
                renew_time: Some(micro_now()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Round::Held),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Conflict),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let version = lease.metadata.resource_version.clone().unwrap_or_default();
    me.state.lock().expect("lease lock").holder = holder.clone();
    // The holder's own duration if it says one, else ours.
    let held_for = spec
        .lease_duration_seconds
        .map_or(duration, |d| Duration::from_secs(d.max(0) as u64));
    let expired = unchanged_for(me, &version, held_for);
    let mine = holder.as_deref() == Some(me.identity.as_str());
    if holder.is_some() && !mine && !expired {
        return Ok(Round::Other);
    }
    let mut spec = spec;
    if !mine {
        spec.holder_identity = Some(me.identity.clone());
        spec.acquire_time = Some(micro_now());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        info!(
            lease = name,
            previous = holder.as_deref().unwrap_or("nobody"),
            "taking over the Lease"
        );
    }
    spec.renew_time = Some(micro_now());
    spec.lease_duration_seconds = Some(seconds);
    lease.spec = Some(spec);
    match api.replace(name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(Round::Held),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Conflict),
        Err(e) => Err(e),
    }
}

/// Give the Lease up at shutdown so the next leader need not wait out the duration:
/// stop leading, let the writes in flight finish (no later than the deadline they
/// run under), then clear the holder. The caller has stopped the renewal loop.
pub async fn release(api: &Api<Lease>, name: &str, me: &Leadership) {
    let Some(until) = me.step_down() else {
        return;
    };
    while me.writing.load(Ordering::Acquire) > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let Ok(Some(mut lease)) = api.get_opt(name).await else {
        return;
    };
    let Some(spec) = lease.spec.as_mut() else {
        return;
    };
    if spec.holder_identity.as_deref() != Some(me.identity.as_str()) {
        return;
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(micro_now());
    match api.replace(name, &PostParams::default(), &lease).await {
        Ok(_) => info!(lease = name, "Lease released"),
        Err(e) => {
            warn!(lease = name, error = %super::said(&e), "could not release the Lease; it expires on its own")
        }
    }
}
