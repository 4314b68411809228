//! Outbound node-event webhooks (`nodeEventWebhooks`, DESIGN §10): each event as a
//! CloudEvents 1.0 structured-mode JSON, signed with HMAC-SHA256, delivered off the
//! ingest path: each endpoint's task reads the store's events after its place, so a
//! restart or the next leader resumes where it stopped; retried with backoff and
//! jitter. A slow or dead receiver costs waiting events and, past `queueSize`,
//! counted drops of the oldest — never ingest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use hmac::{Hmac, KeyInit, Mac};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Serialize;
use sha2::Sha256;
use tracing::{info, warn};

use crate::config::Webhook;
use crate::liveness::Liveness;
use crate::store::StoredEvent;
use crate::store::nats::ACK_WAIT;
use crate::store::{Outbox, Pending};

pub const CONTENT_TYPE: &str = "application/cloudevents+json; charset=utf-8";

/// Delivery counters, shared by every endpoint (and kept across reloads for the
/// endpoints a reload keeps).
#[derive(Debug, Default, Clone)]
pub struct WebhookMetrics {
    /// Final outcome per event: `delivered` or `failed`.
    pub deliveries: Counters,
    /// Attempts that did not succeed, by reason.
    pub attempt_failures: Counters,
    /// Events given up: `overflow` (queue full), `exhausted` (attempts used up),
    /// `rejected` (a 4xx that retrying cannot fix).
    pub dropped: Counters,
    /// Events waiting for delivery, per endpoint: 0 on a replica that does not
    /// lead.
    pub backlog: Family<Vec<(&'static str, String)>, Gauge>,
    /// The endpoints configured and the series made so far, so that a reload can
    /// take away those of the endpoints it drops.
    made: Arc<std::sync::Mutex<Made>>,
}

/// The endpoints the running configuration has, and each endpoint's series:
/// their family and the value of their second label (`status_<code>` is an open
/// set).
#[derive(Debug, Default)]
struct Made {
    configured: BTreeSet<String>,
    series: BTreeMap<String, BTreeSet<(Series, String)>>,
}

/// One family of an endpoint's counters: `endpoint` and one label more.
pub type Counters = Family<Vec<(&'static str, String)>, Counter>;

/// Which of [`WebhookMetrics`]' families a series is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Series {
    Deliveries,
    AttemptFailures,
    Dropped,
}

impl WebhookMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "hale_webhook_deliveries",
            "Node events by final delivery outcome, per endpoint",
            self.deliveries.clone(),
        );
        registry.register(
            "hale_webhook_attempt_failures",
            "Delivery attempts that failed, per endpoint and reason",
            self.attempt_failures.clone(),
        );
        registry.register(
            "hale_webhook_dropped",
            "Node events dropped, per endpoint and reason (overflow, exhausted, rejected)",
            self.dropped.clone(),
        );
        registry.register(
            "hale_webhook_backlog",
            "Node events waiting for delivery, per endpoint, the one under way included",
            self.backlog.clone(),
        );
    }

    /// The endpoints of the running configuration are `kept`: every series of
    /// another is taken away (a reload dropped it, or renamed it: a new secret
    /// changes an endpoint's digest), and what its delivery under way still counts
    /// is counted nowhere, so the series does not come back.
    fn keep_only(&self, kept: BTreeSet<String>) {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        made.series.retain(|endpoint, series| {
            if kept.contains(endpoint) {
                return true;
            }
            for (family, value) in series.iter() {
                let (family, key) = self.family(*family);
                family.remove(&labels(endpoint, key, value));
            }
            self.backlog.remove(&vec![("endpoint", endpoint.clone())]);
            false
        });
        made.configured = kept;
    }

    /// Create the zero series of an endpoint's fixed outcomes, so `rate()` and the
    /// dashboard see them before the first failure rather than only after it.
    fn init(&self, endpoint: &str) {
        for result in ["delivered", "failed"] {
            self.touch(Series::Deliveries, endpoint, result);
        }
        for reason in ["overflow", "exhausted", "rejected"] {
            self.touch(Series::Dropped, endpoint, reason);
        }
        // `status_<code>` is an open set: each appears with its first failure.
        for reason in ["timeout", "transport"] {
            self.touch(Series::AttemptFailures, endpoint, reason);
        }
        self.waiting(endpoint);
    }

    /// The backlog gauge of a configured endpoint (a detached one for an endpoint
    /// a reload dropped, so its series does not come back).
    fn waiting(&self, endpoint: &str) -> Gauge {
        let made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        if !made.configured.contains(endpoint) {
            return Gauge::default();
        }
        self.backlog
            .get_or_create(&vec![("endpoint", endpoint.to_string())])
            .clone()
    }

    fn family(&self, series: Series) -> (&Counters, &'static str) {
        match series {
            Series::Deliveries => (&self.deliveries, "result"),
            Series::AttemptFailures => (&self.attempt_failures, "reason"),
            Series::Dropped => (&self.dropped, "reason"),
        }
    }

    fn touch(&self, series: Series, endpoint: &str, value: &str) -> Counter {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        if !made.configured.contains(endpoint) {
            return Counter::default();
        }
        made.series
            .entry(endpoint.to_string())
            .or_default()
            .insert((series, value.to_string()));
        let (family, key) = self.family(series);
        family.get_or_create(&labels(endpoint, key, value)).clone()
    }
}

/// The labels of one endpoint's series.
fn labels(endpoint: &str, key: &'static str, value: &str) -> Vec<(&'static str, String)> {
    vec![("endpoint", endpoint.to_string()), (key, value.to_string())]
}

/// The CloudEvents 1.0 structured-mode envelope.
#[derive(Serialize)]
struct CloudEvent<'a> {
    specversion: &'static str,
    #[serde(rename = "type")]
    kind: String,
    source: String,
    id: &'a str,
    time: String,
    subject: &'a str,
    datacontenttype: &'static str,
    data: &'a StoredEvent,
}

/// One event ready to send: the same bytes go to every endpoint.
#[derive(Debug)]
pub struct Outgoing {
    pub id: String,
    pub kind: &'static str,
    pub body: Vec<u8>,
}

/// What a path segment of a URI must escape (RFC 3986: all but unreserved
/// characters and sub-delimiters; `%` itself included).
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// Build the envelope of `event` for cluster `cluster`.
pub fn envelope(cluster: &str, event: &StoredEvent) -> Outgoing {
    let kind = event.event.kind.name();
    let ce = CloudEvent {
        specversion: "1.0",
        kind: format!("dev.hale.node.{kind}"),
        // A URI-reference, as CloudEvents requires: the cluster's name is one
        // path segment, whatever it holds.
        source: format!(
            "/hale/clusters/{}",
            percent_encoding::utf8_percent_encode(cluster, SEGMENT)
        ),
        id: &event.id,
        time: event
            .event
            .occurred_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        subject: &event.event.node_id,
        datacontenttype: "application/json",
        data: event,
    };
    Outgoing {
        id: event.id.clone(),
        kind,
        body: serde_json::to_vec(&ce).expect("events serialise"),
    }
}

/// `sha256=<hex of HMAC-SHA256(secret, timestamp + "." + body)>`.
pub fn signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", crate::hex(&mac.finalize().into_bytes()))
}

/// Why one attempt failed.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error("HTTP {0}{hint}", hint = if (300..400).contains(.0) {
        " (redirects are not followed: set the url to where it leads)"
    } else {
        ""
    })]
    Status(u16),
    #[error("timed out")]
    Timeout,
    #[error("{0}")]
    Transport(String),
}

impl AttemptError {
    /// The one place that decides what is worth retrying: network trouble, 5xx, 408
    /// and 429. Any other answer will not change by asking again.
    fn is_retriable(&self) -> bool {
        match self {
            AttemptError::Status(code) => *code >= 500 || *code == 408 || *code == 429,
            AttemptError::Timeout | AttemptError::Transport(_) => true,
        }
    }

    fn metric_label(&self) -> String {
        match self {
            AttemptError::Status(code) => format!("status_{code}"),
            AttemptError::Timeout => "timeout".into(),
            AttemptError::Transport(_) => "transport".into(),
        }
    }
}

struct Endpoint {
    hook: Webhook,
    shown: String,
    http: reqwest::Client,
    metrics: WebhookMetrics,
}

impl Endpoint {
    /// One attempt, with a fresh timestamp and signature.
    async fn attempt(&self, event: &Outgoing) -> Result<(), AttemptError> {
        let timestamp = chrono::Utc::now().timestamp().to_string();
        let signature = signature(
            self.hook.secret.expose().as_bytes(),
            &timestamp,
            &event.body,
        );
        let result = self
            .http
            .post(self.hook.url.clone())
            .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
            .header("X-Hale-Event-Id", &event.id)
            .header("X-Hale-Timestamp", &timestamp)
            .header("X-Hale-Signature", signature)
            .body(event.body.clone())
            .send()
            .await;
        let error = match result {
            Ok(resp) if resp.status().is_success() => return Ok(()),
            Ok(resp) => AttemptError::Status(resp.status().as_u16()),
            Err(e) if e.is_timeout() => AttemptError::Timeout,
            Err(e) => AttemptError::Transport(format!(
                "{}{}",
                crate::error_chain(&e.without_url()),
                crate::proxy_note(&self.hook.url)
            )),
        };
        self.metrics
            .touch(Series::AttemptFailures, &self.shown, &error.metric_label())
            .inc();
        Err(error)
    }

    /// Deliver one event: retry what is retriable with exponential backoff and jitter
    /// (at least a second apart, so every attempt carries a new timestamp), up to
    /// `maxAttempts` attempts in all.
    async fn deliver(&self, event: &Outgoing) {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_secs(1))
            .with_max_delay(Duration::from_secs(60))
            .with_factor(2.0)
            .with_jitter()
            .with_max_times(self.hook.max_attempts.saturating_sub(1) as usize);
        let result = (|| self.attempt(event))
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .when(AttemptError::is_retriable)
            .await;
        let m = &self.metrics;
        match result {
            Ok(()) => {
                m.touch(Series::Deliveries, &self.shown, "delivered").inc();
            }
            Err(e) => {
                let why = if e.is_retriable() {
                    "exhausted"
                } else {
                    "rejected"
                };
                warn!(endpoint = %self.shown, event_id = %event.id, event = event.kind,
                    error = %e, reason = why, "webhook delivery failed; event dropped");
                m.touch(Series::Deliveries, &self.shown, "failed").inc();
                m.touch(Series::Dropped, &self.shown, why).inc();
            }
        }
    }
}

/// How often an idle delivery task shows it is alive.
const IDLE_BEAT: Duration = Duration::from_secs(60);

/// The endpoints of one configuration, each with its delivery task reading the
/// store's events. Dropping a `Notifier` (on reload) ends its tasks.
pub struct Notifier {
    outbox: Arc<dyn Outbox>,
    /// Dropped with the notifier: its delivery tasks end.
    _stop: tokio::sync::watch::Sender<()>,
    /// Forgets the feeds of endpoints this configuration does not have.
    forget: Forget,
}

/// The feeds of endpoints no longer configured are forgotten, once the last task
/// of each has finished the delivery under way: added back, an endpoint starts
/// afresh rather than with everything stored meanwhile.
#[derive(Clone)]
struct Forget {
    durable: Durable,
    /// The feeds of this configuration.
    keys: Vec<String>,
    /// Which configuration this is: only the newest forgets.
    generation: u64,
}

impl Forget {
    fn spawn(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            let feeds = &this.durable.feeds;
            for key in feeds.known().into_iter().filter(|k| !this.keys.contains(k)) {
                drop(feeds.of(&key).lock().await);
            }
            // A newer configuration forgets by its own list; on a shared store only
            // the leader, which delivers, forgets (a follower with another list
            // would take the leader's feeds from under it).
            let outbox = &this.durable.outbox;
            if feeds.generation.load(Ordering::Acquire) != this.generation
                || (outbox.shared() && !(this.durable.leads)())
            {
                return;
            }
            match outbox.retain(&this.keys).await {
                Ok(0) => {}
                Ok(n) => info!(
                    forgotten = n,
                    "the feeds of webhook endpoints no longer configured are forgotten"
                ),
                Err(e) => {
                    warn!(error = %e, "could not forget the feeds of webhook endpoints no longer configured")
                }
            }
        });
    }
}

/// Deliveries from the store's own record of events, by this replica while it
/// leads: a restart or the next leader resumes them.
#[derive(Clone)]
pub struct Durable {
    pub outbox: Arc<dyn Outbox>,
    pub leads: Arc<dyn Fn() -> bool + Send + Sync>,
    pub feeds: Arc<Feeds>,
}

/// One delivery task per feed at a time, across reloads: a new configuration's
/// task waits for the last one to finish the delivery under way and acknowledge
/// it; reading the feed before that, it would deliver that event again.
#[derive(Default)]
pub struct Feeds {
    locks: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Counts the configurations started: only the newest forgets feeds.
    generation: std::sync::atomic::AtomicU64,
}

impl Feeds {
    /// The feeds this process has delivered from.
    fn known(&self) -> Vec<String> {
        self.locks
            .lock()
            .expect("feeds lock")
            .keys()
            .cloned()
            .collect()
    }

    fn of(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .expect("feeds lock")
            .entry(key.to_string())
            .or_default()
            .clone()
    }
}

impl Notifier {
    /// Start a delivery task per endpoint, fed by the store. Needs a Tokio runtime.
    pub fn start(
        cluster: &str,
        hooks: &[Webhook],
        metrics: &WebhookMetrics,
        liveness: &Arc<Liveness>,
        durable: &Durable,
    ) -> Notifier {
        let (stop, stopped) = tokio::sync::watch::channel(());
        let keys: Vec<String> = hooks
            .iter()
            .enumerate()
            .map(|(i, h)| feed_key(i, h))
            .collect();
        let forget = Forget {
            durable: durable.clone(),
            keys: keys.clone(),
            generation: durable.feeds.generation.fetch_add(1, Ordering::AcqRel) + 1,
        };
        forget.spawn();
        metrics.keep_only(hooks.iter().map(Webhook::shown).collect());
        for (hook, key) in hooks.iter().zip(keys) {
            let endpoint = Endpoint {
                shown: hook.shown(),
                // A redirect could take the signed event to another host.
                http: crate::http_client()
                    .redirect(reqwest::redirect::Policy::none())
                    .timeout(hook.timeout)
                    .user_agent(crate::USER_AGENT)
                    .build()
                    .expect("client builds"),
                hook: hook.clone(),
                metrics: metrics.clone(),
            };
            metrics.init(&endpoint.shown);
            // One delivery takes at most every attempt and the backoff between.
            let allowed = (hook.timeout + Duration::from_secs(60)) * hook.max_attempts
                + Duration::from_secs(120);
            let beat = liveness.watch(format!("webhook delivery to {}", endpoint.shown), allowed);
            let task = DurableTask {
                endpoint,
                cluster: cluster.to_string(),
                durable: durable.clone(),
                key,
                since: chrono::Utc::now(),
            };
            tokio::spawn(task.run(stopped.clone(), beat));
        }
        Notifier {
            outbox: durable.outbox.clone(),
            _stop: stop,
            forget,
        }
    }

    /// This replica took the lead of a shared store: forget the feeds of the
    /// endpoints its configuration does not have (a follower does not).
    pub fn lead(&self) {
        self.forget.spawn();
    }

    /// Events were written: the delivery tasks look at once.
    pub fn written(&self) {
        self.outbox.written();
    }
}

/// One feed per endpoint as configured: its place in the list, its URL and the
/// events it takes.
fn feed_key(i: usize, hook: &Webhook) -> String {
    format!("{i}\n{}\n{:?}", hook.url, hook.events)
}

/// One endpoint's deliveries from its feed, while this replica leads.
struct DurableTask {
    endpoint: Endpoint,
    cluster: String,
    durable: Durable,
    /// Names the endpoint's feed.
    key: String,
    /// A feed new to the store starts with the events stored from then.
    since: chrono::DateTime<chrono::Utc>,
}

/// How often a full queue is said again while it drops.
const OVERFLOW_SAID: Duration = Duration::from_secs(60);

/// How long a feed waits for the next event per request.
const FETCH_WAIT: Duration = Duration::from_secs(5);

impl DurableTask {
    async fn run(self, mut stop: tokio::sync::watch::Receiver<()>, beat: crate::liveness::Beat) {
        let running = self.durable.feeds.of(&self.key);
        let _running = tokio::select! {
            held = running.lock_owned() => held,
            // Reloaded again before the last task let go.
            _ = stop.changed() => return,
        };
        let mut feed = None;
        let mut idle = tokio::time::Instant::now();
        let backlog = self.endpoint.metrics.waiting(&self.endpoint.shown);
        // Overflow is said at once, then at most once a minute with how many
        // since: a burst behind a slow receiver is one line, not one per read.
        let (mut said_full, mut unsaid) = (None::<tokio::time::Instant>, 0);
        loop {
            // Dropped on reload: the next configuration's task takes over.
            if stop.has_changed().is_err() {
                break;
            }
            let hook = &self.endpoint.hook;
            let opened = match feed.take() {
                Some(f) => Ok(f),
                None => {
                    self.durable
                        .outbox
                        .feed(&self.key, self.since, hook.events.as_ref(), hook.queue_size)
                        .await
                }
            };
            if !(self.durable.leads)() {
                // What this replica records meanwhile is not its to deliver.
                backlog.set(0);
                if let Ok(mut f) = opened {
                    if let Err(e) = f.pass().await {
                        warn!(endpoint = %self.endpoint.shown, error = %e,
                            "cannot move the webhook feed past what a follower recorded");
                    }
                    feed = Some(f);
                }
                beat.beat();
                let _ = tokio::time::timeout(Duration::from_secs(1), stop.changed()).await;
                continue;
            }
            let f = match opened {
                Ok(f) => feed.insert(f),
                Err(e) => {
                    warn!(endpoint = %self.endpoint.shown, error = %e,
                        "cannot open the webhook feed; retrying");
                    beat.beat();
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    continue;
                }
            };
            let fetched = match f.next(FETCH_WAIT).await {
                Ok(fetched) => fetched,
                Err(e) => {
                    warn!(endpoint = %self.endpoint.shown, error = %e,
                        "cannot read webhook deliveries; retrying");
                    feed = None;
                    beat.beat();
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            unsaid += fetched.overflowed;
            // Said at once, and what was dropped since once its minute is over,
            // whether or not more is dropped then.
            if unsaid > 0 && said_full.is_none_or(|at| at.elapsed() >= OVERFLOW_SAID) {
                warn!(endpoint = %self.endpoint.shown, dropped = unsaid,
                    queue_size = self.endpoint.hook.queue_size,
                    "webhook queue full; the oldest events waiting dropped");
                said_full = Some(tokio::time::Instant::now());
                unsaid = 0;
            }
            if fetched.overflowed > 0 {
                let m = &self.endpoint.metrics;
                m.touch(Series::Dropped, &self.endpoint.shown, "overflow")
                    .inc_by(fetched.overflowed);
            }
            backlog.set(
                i64::try_from(fetched.waiting + fetched.events.len() as u64).unwrap_or(i64::MAX),
            );
            if fetched.events.is_empty() && idle.elapsed() >= IDLE_BEAT {
                beat.beat();
                idle = tokio::time::Instant::now();
            }
            for pending in fetched.events {
                // Unacknowledged, it goes to the next leader (or the next
                // configuration's task); this task reads again from the place kept.
                if !(self.durable.leads)() || stop.has_changed().is_err() {
                    feed = None;
                    break;
                }
                self.deliver(pending.as_ref()).await;
                if let Err(e) = pending.ack().await {
                    warn!(endpoint = %self.endpoint.shown, error = %e,
                        "could not acknowledge a delivery; it may be delivered again");
                }
                backlog.dec();
                beat.beat();
                idle = tokio::time::Instant::now();
            }
        }
    }

    /// Deliver one event the endpoint takes, telling the feed it is still under
    /// way so it is not handed to another meanwhile.
    async fn deliver(&self, pending: &dyn Pending) {
        let Some(event) = pending.event() else {
            return;
        };
        let kind = event.event.kind.name();
        if self
            .endpoint
            .hook
            .events
            .as_ref()
            .is_some_and(|f| !f.contains(kind))
        {
            return;
        }
        let out = envelope(&self.cluster, event);
        let delivery = self.endpoint.deliver(&out);
        tokio::pin!(delivery);
        let mut progress = tokio::time::interval(ACK_WAIT / 3);
        progress.tick().await;
        loop {
            tokio::select! {
                () = &mut delivery => break,
                _ = progress.tick() => pending.progress().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Event, EventKind};

    /// A reload that drops an endpoint takes its series away, and the retries of
    /// the delivery it had under way do not bring them back.
    #[test]
    fn a_dropped_endpoint_keeps_no_series() {
        let m = WebhookMetrics::default();
        let (a, b) = ("http://a/…00000000".to_string(), "http://b".to_string());
        m.keep_only([a.clone(), b.clone()].into());
        m.init(&a);
        m.init(&b);
        m.touch(Series::AttemptFailures, &a, "status_500").inc();
        let has = |endpoint: &str, key, value: &str| {
            let family = match key {
                "result" => &m.deliveries,
                _ => &m.attempt_failures,
            };
            family.get(&labels(endpoint, key, value)).is_some()
        };
        let backlog = |endpoint: &str| {
            m.backlog
                .get(&vec![("endpoint", endpoint.to_string())])
                .map(|g| g.get())
        };
        m.waiting(&a).set(7);
        assert!(has(&a, "reason", "status_500") && has(&a, "result", "delivered"));
        assert_eq!((backlog(&a), backlog(&b)), (Some(7), Some(0)));
        m.keep_only([b.clone()].into());
        assert!(!has(&a, "reason", "status_500") && !has(&a, "result", "delivered"));
        assert!(!has(&a, "reason", "timeout"));
        assert_eq!(backlog(&a), None);
        m.touch(Series::AttemptFailures, &a, "status_500").inc();
        m.touch(Series::Deliveries, &a, "failed").inc();
        m.waiting(&a).set(3);
        assert!(!has(&a, "reason", "status_500") && !has(&a, "result", "failed"));
        assert_eq!(backlog(&a), None);
        // The kept endpoint's series carry on.
        m.touch(Series::Deliveries, &b, "delivered").inc();
        assert_eq!(
            m.deliveries
                .get_or_create(&labels(&b, "result", "delivered"))
                .get(),
            1
        );
    }

    #[test]
    fn signature_matches_a_known_vector() {
        // RFC 4231 test case 2 (key "Jefe", "what do ya want for nothing?") with the
        // timestamp and "." in front, as Python's hmac computes it.
        let sig = signature(b"Jefe", "1700000000", b"what do ya want for nothing?");
        assert_eq!(
            sig,
            "sha256=1cdd0650c8be1cb0974b1788d458b1e781206cfef59b85faafc582d2e182c57e"
        );
    }

    #[test]
    fn envelope_is_cloudevents_structured_mode() {
        let event = StoredEvent {
            id: "abc-7".into(),
            event: Event {
                node_id: "gpu-14".into(),
                kind: EventKind::ScoreChanged {
                    score: 55,
                    previous_score: 90,
                    scored_by: "cluster".into(),
                },
                occurred_at: chrono::DateTime::from_timestamp(1_786_000_000, 0).unwrap(),
                message: "score 90 -> 55".into(),
            },
        };
        let out = envelope("lab", &event);
        let v: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
        assert_eq!(v["specversion"], "1.0");
        assert_eq!(v["type"], "dev.hale.node.SCORE_CHANGED");
        assert_eq!(v["source"], "/hale/clusters/lab");
        let odd = envelope("dc 1\"><img src=x>/50%", &event);
        let v: serde_json::Value = serde_json::from_slice(&odd.body).unwrap();
        assert_eq!(
            v["source"],
            "/hale/clusters/dc%201%22%3E%3Cimg%20src=x%3E%2F50%25"
        );
        assert_eq!(v["id"], "abc-7");
        assert_eq!(v["subject"], "gpu-14");
        assert_eq!(v["datacontenttype"], "application/json");
        assert_eq!(v["data"], serde_json::to_value(&event).unwrap());
        assert_eq!(v["data"]["id"], "abc-7");
        assert_eq!(v["data"]["score"], 55);
        assert_eq!(out.kind, "SCORE_CHANGED");
    }

    #[test]
    fn retry_classification() {
        for (e, retry) in [
            (AttemptError::Status(500), true),
            (AttemptError::Status(503), true),
            (AttemptError::Status(408), true),
            (AttemptError::Status(429), true),
            (AttemptError::Status(400), false),
            (AttemptError::Status(401), false),
            (AttemptError::Status(404), false),
            (AttemptError::Timeout, true),
            (AttemptError::Transport("refused".into()), true),
        ] {
            assert_eq!(e.is_retriable(), retry, "{e}");
        }
    }
}
