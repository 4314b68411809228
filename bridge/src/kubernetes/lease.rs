//! Leader election on a `coordination.k8s.io/v1` Lease, with the semantics of
//! client-go's election: get, create or replace under the Lease's resourceVersion (a
//! 409 means someone else wrote first), take over only a Lease seen unchanged for a
//! whole lease duration on this process's own clock, renew every third of it.
//!
//! The property hale needs is that a replica which loses the Lease stops acting
//! before another can start. A takeover needs the Lease unchanged for `duration`
//! after the holder's last renewal reached the API server, while the holder counts
//! itself leader only until two thirds of `duration` after it *sent* that renewal.
//! Every write the adapter makes checks [`Leadership::leads`] first, so the last third
//! is the margin for a request already in flight.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tracing::{info, warn};

/// One replica's standing in the election.
pub struct Leadership {
    pub identity: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Leader until then; `None`: not the leader.
    until: Option<Instant>,
    /// The holder the Lease last named.
    holder: Option<String>,
    /// The Lease's resourceVersion as last seen, and when it was first seen.
    observed: Option<(String, Instant)>,
}

impl Leadership {
    pub fn new(identity: String) -> Leadership {
        Leadership {
            identity,
            state: Mutex::default(),
        }
    }

    /// Whether this replica holds the Lease right now.
    pub fn leads(&self) -> bool {
        self.state
            .lock()
            .expect("lease lock")
            .until
            .is_some_and(|t| Instant::now() < t)
    }

    /// Who holds the Lease, as last seen.
    pub fn holder(&self) -> Option<String> {
        self.state.lock().expect("lease lock").holder.clone()
    }

    fn step_down(&self) {
        self.state.lock().expect("lease lock").until = None;
    }
}

fn micro_now() -> MicroTime {
    let now = chrono::Utc::now();
    MicroTime(
        k8s_openapi::jiff::Timestamp::from_microsecond(now.timestamp_micros())
            .expect("a chrono time is in range"),
    )
}

/// Keep trying to hold `name` in `namespace` for as long as the process runs.
pub async fn run(api: Api<Lease>, name: String, duration: Duration, me: &Leadership) {
    let seconds = duration.as_secs().max(1) as i32;
    let renew_deadline = duration * 2 / 3;
    loop {
        let sent = Instant::now();
        match attempt(&api, &name, seconds, duration, me).await {
            Ok(true) => {
                let mut s = me.state.lock().expect("lease lock");
                if s.until.is_none_or(|t| t <= sent) {
                    info!(
                        lease = name,
                        identity = me.identity,
                        "leading: this replica acts"
                    );
                }
                s.until = Some(sent + renew_deadline);
                s.holder = Some(me.identity.clone());
            }
            Ok(false) => {
                if me.leads() {
                    warn!(
                        lease = name,
                        "the Lease is held by another replica: stepping down"
                    );
                }
                me.step_down();
            }
            Err(e) => {
                // Leadership lapses on its own at its deadline; nothing else to do.
                warn!(lease = name, error = %e, "could not read or renew the Lease");
            }
        }
        tokio::time::sleep(duration / 3).await;
    }
}

/// One round: whether this replica holds the Lease afterwards.
async fn attempt(
    api: &Api<Lease>,
    name: &str,
    seconds: i32,
    duration: Duration,
    me: &Leadership,
) -> kube::Result<bool> {
    let Some(mut lease) = api.get_opt(name).await? else {
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
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let version = lease.metadata.resource_version.clone().unwrap_or_default();
    let expired = {
        let mut s = me.state.lock().expect("lease lock");
        s.holder = holder.clone();
        let seen_at = match &s.observed {
            Some((v, at)) if *v == version => *at,
            _ => {
                s.observed = Some((version, Instant::now()));
                Instant::now()
            }
        };
        // The holder's own duration if it says one, else ours.
        let held_for = spec
            .lease_duration_seconds
            .map_or(duration, |d| Duration::from_secs(d.max(0) as u64));
        seen_at.elapsed() >= held_for
    };
    let mine = holder.as_deref() == Some(me.identity.as_str());
    if holder.is_some() && !mine && !expired {
        return Ok(false);
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
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Give the Lease up at shutdown, after this replica stopped acting, so the next
/// leader need not wait out the duration.
pub async fn release(api: &Api<Lease>, name: &str, me: &Leadership) {
    me.step_down();
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
            warn!(lease = name, error = %e, "could not release the Lease; it expires on its own")
        }
    }
}
