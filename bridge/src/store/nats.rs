//! The shared store (`store.kind: nats`): NATS JetStream, one history for every
//! replica. Events go to one stream per cluster (`HALE_EVENTS_<cluster>`), one
//! subject per node (`hale.events.<cluster>.<node>`), so a node's history pages
//! without reading the fleet's; the stream's max age is the retention. Node state,
//! report times and the trust record live in the `hale-<cluster>-state` KV bucket;
//! the policy ledger (replacement budget, restart counts and, inside each node's
//! record, its pending actions with their ids) in `hale-<cluster>-ledger`, written
//! by compare-and-set so a second writer is refused, never merged.
//!
//! A batch publishes its events first, then its state, then its mark: the
//! write's anchor and the last stream sequence its events took. Each event
//! carries a JetStream message id drawn from the write's anchor (the one after
//! the stored mark), its node and its type, and from the node's event before it
//! in the write: a batch retried after a failure publishes the same ids, which
//! the stream's duplicate window drops, so an event is neither lost nor recorded
//! twice. A large write to a stream of several copies sends its events as
//! atomic batches ([`ATOMIC_FROM`]): each stored whole or not at all, one that
//! JetStream refuses (ids it has seen) sent again event by event. A write its
//! process never finished (stopped between the events and the
//! mark) may have left events whose state was never written: the next leader, on
//! taking the lead, removes every event past the mark's sequence of a node whose
//! record that write did not put or remove (each record, and each delete, says
//! which write made it), and
//! anchors its own writes anew, so each node's history says what its state
//! says. One mark per write,
//! written once every record is: a mark per node (as kept before) was a second
//! message for each node with events.
//!
//! The port is synchronous (a step writes under its locks); the client lives on a
//! runtime of its own, which every call hands its work to and waits for.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, stream};
use async_nats::{HeaderMap, HeaderValue, header};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{
    Batch, EventPage, EventQuery, Fetched, Fut, Opened, Result, Store, StoreError, StoredEvent,
};
use crate::core::policy::Moves;
use crate::core::{Event, Fleet, Node, Time, Trust};
use crate::hex;

/// How long one request to JetStream may take before the write fails (and is
/// retried with the next one).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long writes wait, from the first that met no connection, for the client to
/// find a server again: a connection attempt's timeout, and a little.
const RECONNECT_GRACE: Duration = Duration::from_secs(6);
/// How long JetStream remembers a message id: longer than any retry of a failed
/// write or a failover, so a step taken again publishes nothing twice.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);
/// The most one call on the store may take, whatever it reads or writes.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Publishes in flight at once in a batch: a whole step of 1,000 events at once, as
/// bare JetStream publishes them (512 held every step back by half a round trip).
const IN_FLIGHT: usize = 1024;
/// Writes of at least this many events, to a stream kept in more than one copy,
/// go as JetStream atomic batches (2.12+): a batch's messages are replicated and
/// acknowledged as one, where each event was one. Fewer go one by one, as on a
/// stream of one copy: a batch's commit costs a few milliseconds of its own,
/// more than replicating 256 events one by one saves (`bench stores`).
const ATOMIC_FROM: usize = 256;
/// The most messages JetStream takes in one atomic batch.
const ATOMIC_MOST: usize = 1000;
/// A node record's message carries a subject and headers beside it.
const RECORD_HEADROOM: usize = 4096;

/// `store.nats`: the JetStream the shared store lives in.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NatsConfig {
    /// Servers to connect to (`nats://` or `tls://`); any one reachable will do.
    pub urls: Vec<String>,
    /// A NATS credentials file (user JWT and NKey seed).
    #[serde(default, deserialize_with = "crate::core::settings::de_present")]
    pub creds_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "crate::core::settings::de_present")]
    pub tls: Option<NatsTls>,
    /// Copies JetStream keeps of the event stream and the KV buckets: 1, 3 or 5.
    #[serde(default = "default_nats_replicas")]
    pub replicas: usize,
    /// Where the orchestrator elects no leader (all but Kubernetes): how long a
    /// silent leader keeps the NATS lease; it renews every third of it.
    #[serde(
        default = "default_lease_duration",
        deserialize_with = "crate::core::settings::de_duration"
    )]
    pub lease_duration: Duration,
}

/// Longer than a JetStream stream's leader election after a server is lost (its
/// Raft followers wait 4–9 s before they campaign), so a leader keeps renewing
/// through it: two thirds of 20 s is 13 s.
fn default_lease_duration() -> Duration {
    Duration::from_secs(20)
}

fn default_nats_replicas() -> usize {
    3
}

/// `store.nats.tls`: the CA that signs the servers' certificates and, for mutual
/// TLS, this client's own.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NatsTls {
    #[serde(default, deserialize_with = "crate::core::settings::de_present")]
    pub ca_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "crate::core::settings::de_present")]
    pub cert_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "crate::core::settings::de_present")]
    pub key_file: Option<PathBuf>,
}

impl NatsConfig {
    /// Every file the connection reads, with its key under `store.nats`.
    pub fn files(&self) -> impl Iterator<Item = (&'static str, &PathBuf)> {
        let tls = self.tls.as_ref();
        [
            ("credsFile", self.creds_file.as_ref()),
            ("tls.caFile", tls.and_then(|t| t.ca_file.as_ref())),
            ("tls.certFile", tls.and_then(|t| t.cert_file.as_ref())),
            ("tls.keyFile", tls.and_then(|t| t.key_file.as_ref())),
        ]
        .into_iter()
        .filter_map(|(k, p)| Some((k, p?)))
    }

    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.urls.is_empty() {
            return Err(("urls".into(), "must name at least one NATS server".into()));
        }
        let mut userinfo = None;
        for (i, u) in self.urls.iter().enumerate() {
            match reqwest::Url::parse(u) {
                Ok(url) if matches!(url.scheme(), "nats" | "tls") && url.host().is_some() => {
                    // A server, nothing more: the client ignores a path or query.
                    if !matches!(url.path(), "" | "/")
                        || url.query().is_some()
                        || url.fragment().is_some()
                    {
                        return Err((
                            format!("urls[{i}]"),
                            "names a path or query: a NATS URL is a server, like nats://nats-0:4222"
                                .into(),
                        ));
                    }
                    // One connection's credentials: every server of the cluster
                    // takes the same.
                    let given = (
                        url.username().to_string(),
                        url.password().map(str::to_string),
                    );
                    if *userinfo.get_or_insert_with(|| given.clone()) != given {
                        return Err((
                            format!("urls[{i}]"),
                            "names other credentials than the first URL (or none where it names some): the client logs in to every server with one".into(),
                        ));
                    }
                }
                _ => {
                    return Err((
                        format!("urls[{i}]"),
                        "is not a nats:// or tls:// server URL".into(),
                    ));
                }
            }
        }
        if self.lease_duration < Duration::from_secs(3) {
            return Err((
                "leaseDuration".into(),
                "must be at least 3s (a third of it is the margin for a renewal in flight)".into(),
            ));
        }
        if ![1, 3, 5].contains(&self.replicas) {
            return Err((
                "replicas".into(),
                "must be 1, 3 or 5 (JetStream keeps an odd number of copies)".into(),
            ));
        }
        if self.creds_file.is_some() && userinfo.is_some_and(|(user, _)| !user.is_empty()) {
            return Err((
                "credsFile".into(),
                "beside credentials in the URLs: the client logs in with one or the other; keep one".into(),
            ));
        }
        let tls = self.tls.as_ref();
        if tls.is_some_and(|t| t.cert_file.is_some() != t.key_file.is_some()) {
            return Err((
                "tls".into(),
                "certFile and keyFile go together (a client certificate needs its key)".into(),
            ));
        }
        Ok(())
    }
}

/// `s` made safe for a subject token or KV key: ASCII letters, digits, `-` and `_`
/// kept, every other byte `=XX`. Reversible, so two node ids never share a subject.
pub fn key(s: &str) -> String {
    escape(s, '=', true)
}

/// `s` made safe for a stream or bucket name (letters, digits, `-`; others `_XX`).
pub fn name(s: &str) -> String {
    escape(s, '_', false)
}

fn escape(s: &str, esc: char, keep_underscore: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || (keep_underscore && b == b'_') {
            out.push(b as char);
        } else {
            out.push_str(&format!("{esc}{b:02X}"));
        }
    }
    out
}

fn unkey(k: &str) -> Option<String> {
    let mut out = Vec::with_capacity(k.len());
    let mut bytes = k.bytes();
    while let Some(b) = bytes.next() {
        if b == b'=' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

fn nats(op: &'static str) -> impl FnOnce(Box<dyn std::error::Error + Send + Sync>) -> StoreError {
    move |e| {
        let cause = explained(e.to_string());
        // JetStream's "insufficient resources" (10023), "resource limits exceeded
        // for account" (10002: the account's max_file) and the stream's limits: the
        // store is full, which must be said, not retried quietly.
        if cause.contains("replicas > 1 not supported in non-clustered mode") {
            StoreError::Nats {
                op: REFUSED_REPLICAS,
                cause,
            }
        } else if cause.contains("insufficient resources")
            || cause.contains("resource limits exceeded")
            || cause.contains("maximum bytes")
            || cause.contains("storage limit")
        {
            StoreError::Full { op, cause }
        } else {
            StoreError::Nats { op, cause }
        }
    }
}

/// A NATS client's error as hale says it: said once (the client's errors may
/// repeat their cause after themselves), with what its words leave out.
pub(crate) fn explained(text: String) -> String {
    let half = text.len().saturating_sub(2) / 2;
    let mut cause = match text.split_at_checked(half) {
        Some((first, rest)) if rest.strip_prefix(": ") == Some(first) => first.to_string(),
        _ => text,
    };
    // The client's words for a JetStream API nobody answers.
    if cause.contains("requested JetStream resource does not exist") {
        cause.push_str(
            " (no JetStream answers on these servers: is it enabled? `nats-server -js`, or `jetstream {}` in its configuration and the account's)",
        );
    }
    // The client's words for a request to a stream no server answered for.
    if cause.contains("no stream found for given subject") {
        cause.push_str(
            " (no JetStream server answered for the stream: it may be electing a leader, out of space, or gone)",
        );
    }
    if cause.contains("no suitable peers for placement") {
        cause.push_str(
            " (`replicas` asks for more copies than the cluster has JetStream servers up: at most the servers)",
        );
    }
    cause
}

trait Op<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Op<T> for std::result::Result<T, E> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|e| nats(op)(Box::new(e)))
    }
}

/// Whether `path` holds NATS credentials as `hale serve` reads them (a user JWT
/// and its seed); the error names the file and what is wrong, never its text.
pub fn check_creds(path: &std::path::Path) -> std::result::Result<(), String> {
    let text = crate::read_small_text(path)?;
    async_nats::ConnectOptions::with_credentials(&text)
        .map(drop)
        .map_err(|e| format!("{} is not a NATS credentials file: {e}", path.display()))
}

/// Connect to the servers `cfg` names, with its credentials and TLS.
pub async fn connect(cfg: &NatsConfig) -> Result<async_nats::Client> {
    let mut options = async_nats::ConnectOptions::new()
        .name("hale")
        .connection_timeout(REQUEST_TIMEOUT)
        .request_timeout(Some(REQUEST_TIMEOUT));
    if let Some(creds) = &cfg.creds_file {
        let unread = |cause| StoreError::Nats {
            op: "read store.nats.credsFile",
            cause,
        };
        let text = crate::read_small_text(creds).map_err(unread)?;
        options = options
            .credentials(&text)
            .map_err(|e| unread(format!("{}: {e}", creds.display())))?;
    }
    if let Some(tls) = &cfg.tls {
        options = options.require_tls(true);
        if let Some(ca) = &tls.ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
    }
    let (addrs, userinfo) = servers(&cfg.urls)?;
    options = match userinfo {
        Some((user, Some(pass))) => options.user_and_password(user, pass),
        Some((token, None)) => options.token(token),
        None => options,
    };
    options.connect(addrs).await.map_err(|e| {
        // Refused credentials or a TLS failure are the configuration's, which
        // waiting does not cure: said apart from a server not there yet.
        let op = match e.kind() {
            async_nats::ConnectErrorKind::AuthorizationViolation
            | async_nats::ConnectErrorKind::Authentication
            | async_nats::ConnectErrorKind::Tls => REFUSED_CONNECT,
            _ if tls_refused(&e) => REFUSED_CONNECT,
            _ => "connect",
        };
        let hint = if tls_refused(&e) {
            " (the TLS handshake failed: a server that speaks no TLS, or a certificate store.nats.tls.caFile does not sign)"
        } else {
            ""
        };
        StoreError::Nats {
            op,
            cause: format!(
                "{}: {e}{hint}",
                crate::shown_urls(cfg.urls.iter().map(String::as_str))
            ),
        }
    })
}

/// Whether a connection failed in its TLS handshake: a certificate its CA does
/// not sign, a `tls://` server that speaks no TLS. The client counts these as I/O
/// (rustls's error inside an `io::Error`), though no wait cures them.
fn tls_refused(e: &async_nats::ConnectError) -> bool {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let inner = c
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref);
        if c.is::<async_nats::rustls::Error>()
            || inner.is_some_and(|i| i.is::<async_nats::rustls::Error>())
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// A user and password, or a token (no password), written into a URL.
type UserInfo = (String, Option<String>);

/// The servers of `urls`, and the credentials written into them (`user:password@`
/// or `token@`), which go to NATS as the client's options: the client sends none
/// it finds in a URL, and logs the URLs it tries. So the addresses carry none.
fn servers(urls: &[String]) -> Result<(Vec<async_nats::ServerAddr>, Option<UserInfo>)> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let mut userinfo = None;
    let mut addrs = Vec::new();
    for u in urls {
        let mut url = reqwest::Url::parse(u).op("read store.nats.urls")?;
        if !url.username().is_empty() {
            userinfo.get_or_insert((decode(url.username()), url.password().map(decode)));
            // A URL with a host always takes these.
            let _ = url.set_username("");
            let _ = url.set_password(None);
        }
        addrs.push(url.as_str().parse().op("read store.nats.urls")?);
    }
    Ok((addrs, userinfo))
}

/// The operation named by copies a single NATS server cannot keep: waiting does
/// not cure it.
pub const REFUSED_REPLICAS: &str = "open the store (refused: store.nats.replicas asks for more copies than one server keeps; a server outside a cluster keeps 1)";

/// The operation named by a connection NATS refused (credentials, TLS).
pub const REFUSED_CONNECT: &str = "connect (refused: check the credentials, store.nats.credsFile or the URLs' user:password@, and tls)";

/// The names one cluster's store uses in JetStream.
#[derive(Debug, Clone)]
pub struct Names {
    pub stream: String,
    /// Events of a node are published to `<subjects>.<key(node)>`.
    pub subjects: String,
    pub state: String,
    pub ledger: String,
    pub lease: String,
}

impl Names {
    pub fn of(cluster: &str) -> Names {
        let c = name(cluster);
        Names {
            stream: format!("HALE_EVENTS_{c}"),
            subjects: format!("hale.events.{}", key(cluster)),
            state: format!("hale-{c}-state"),
            ledger: format!("hale-{c}-ledger"),
            lease: format!("hale-{c}-lease"),
        }
    }

    /// What to delete to empty the store, said to an operator.
    pub fn to_empty(&self) -> String {
        format!(
            "delete the stream {} and the key-value buckets {}, {} and {}",
            self.stream, self.state, self.ledger, self.lease
        )
    }
}

/// The key of the lease bucket the leader holds, naming it.
pub const LEASE_KEY: &str = "leader";

/// What a leader election on the store's NATS needs.
#[derive(Clone)]
pub struct Lease {
    /// One key, gone `duration` after its holder last wrote it.
    pub bucket: kv::Store,
    pub duration: Duration,
    /// The client's runtime, which the election runs on.
    pub runtime: tokio::runtime::Handle,
}

/// How long a webhook consumer waits for an event handed out to be acknowledged
/// before it hands it out again: to the next leader, when the one delivering it
/// died. A delivery still under way says so every third of it.
pub const ACK_WAIT: Duration = Duration::from_secs(10);

/// Outbound webhooks delivered from the event stream: one durable consumer per
/// endpoint, so the next leader resumes where the last one stopped (an event it
/// delivered but did not acknowledge goes again, with the same id). The stream is
/// the queue: nothing is skipped for a backlog.
#[derive(Clone)]
pub struct Outbox {
    events: stream::Stream,
    subjects: String,
    instance: String,
}

/// An endpoint's consumer.
struct Feed {
    consumer: consumer::Consumer<consumer::pull::Config>,
    instance: String,
}

/// An event handed out for delivery, acknowledged once delivered (or given up).
struct Pending {
    event: Option<StoredEvent>,
    message: jetstream::Message,
}

impl super::Outbox for Outbox {
    fn feed<'a>(
        &'a self,
        key: &'a str,
        since: Time,
        _: Option<&'a BTreeSet<String>>,
        _: usize,
    ) -> Fut<'a, Result<Box<dyn super::Feed>>> {
        Box::pin(async move {
            let name = consumer_name(key);
            let consumer = self
                .events
                .get_or_create_consumer(
                    &name,
                    consumer::pull::Config {
                        durable_name: Some(name.clone()),
                        description: Some("hale: webhook deliveries to one endpoint".into()),
                        filter_subject: format!("{}.>", self.subjects),
                        deliver_policy: consumer::DeliverPolicy::ByStartTime { start_time: since },
                        ack_policy: consumer::AckPolicy::Explicit,
                        ack_wait: ACK_WAIT,
                        // One at a time, in order.
                        max_ack_pending: 1,
                        ..Default::default()
                    },
                )
                .await
                .op("open a webhook consumer")?;
            Ok(Box::new(Feed {
                consumer,
                instance: self.instance.clone(),
            }) as Box<dyn super::Feed>)
        })
    }

    fn shared(&self) -> bool {
        true
    }

    fn retain<'a>(&'a self, keys: &'a [String]) -> Fut<'a, Result<usize>> {
        Box::pin(async move {
            let kept: Vec<String> = keys.iter().map(|k| consumer_name(k)).collect();
            let mut names = self.events.consumer_names();
            let mut gone = Vec::new();
            while let Some(name) = names.next().await {
                let name = name.op("list the webhook consumers")?;
                if name.starts_with(CONSUMER_PREFIX) && !kept.contains(&name) {
                    gone.push(name);
                }
            }
            for name in &gone {
                self.events
                    .delete_consumer(name)
                    .await
                    .op("delete a webhook consumer")?;
            }
            Ok(gone.len())
        })
    }
}

/// Webhook consumers' names begin so.
const CONSUMER_PREFIX: &str = "hale-webhook-";

/// The durable consumer of the endpoint `key` names.
fn consumer_name(key: &str) -> String {
    format!("{CONSUMER_PREFIX}{}", hex(&Sha256::digest(key)[..8]))
}

impl super::Feed for Feed {
    fn next(&mut self, wait: Duration) -> Fut<'_, Result<Fetched>> {
        Box::pin(async move {
            // A batch waits up to `wait` for an event (a fetch would answer at once),
            // and answers with the first: one is handed out at a time (in order), so
            // a batch asking for more would wait out `wait` for one that cannot come
            // before this one is acknowledged.
            let mut batch = self
                .consumer
                .batch()
                .max_messages(1)
                .expires(wait)
                .messages()
                .await
                .op("read webhook deliveries")?;
            let mut out = Fetched::default();
            while let Some(m) = batch.next().await {
                let message = m.map_err(nats("read a webhook delivery"))?;
                let info = message.info().ok();
                // Every event behind it, those the endpoint's types leave out
                // included: they are read and passed over as the feed reaches them.
                out.waiting = info.as_ref().map_or(0, |i| i.pending);
                let seq = info.map(|i| i.stream_sequence);
                // An unreadable record cannot be delivered: it is acknowledged unsent.
                let event = seq.and_then(|seq| {
                    let event = serde_json::from_slice::<Event>(&message.payload).ok()?;
                    Some(StoredEvent {
                        id: format!("{}-{seq}", self.instance),
                        event,
                    })
                });
                out.events.push(Box::new(Pending { event, message }));
            }
            Ok(out)
        })
    }
}

impl super::Pending for Pending {
    fn event(&self) -> Option<&StoredEvent> {
        self.event.as_ref()
    }

    /// Confirmed by the server, so it is not handed out again.
    fn ack(&self) -> Fut<'_, Result<()>> {
        Box::pin(async move {
            self.message
                .double_ack()
                .await
                .map_err(|e| StoreError::Nats {
                    op: "acknowledge a webhook delivery",
                    cause: e.to_string(),
                })
        })
    }

    fn progress(&self) -> Fut<'_, ()> {
        Box::pin(async move {
            let _ = self.message.ack_with(jetstream::AckKind::Progress).await;
        })
    }
}

/// The runtime the client lives on; shut down without waiting when the last
/// handle goes (a handle may be dropped inside another runtime).
struct Runtime(Option<tokio::runtime::Runtime>);

/// What opening a store found: the context, the event stream, the state, ledger
/// and lease buckets, their names, and the store's instance.
type Found = (
    jetstream::Context,
    jetstream::stream::Stream,
    kv::Store,
    kv::Store,
    kv::Store,
    Names,
    String,
);

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// What the handles on one store share.
struct Shared {
    /// Held for its drop, which stops the client.
    _runtime: Runtime,
    handle: tokio::runtime::Handle,
    js: jetstream::Context,
    events: stream::Stream,
    state: kv::Store,
    ledger: kv::Store,
    /// The leader's lease: one key, gone a lease time after its last renewal.
    lease: kv::Store,
    lease_duration: Duration,
    names: Names,
    /// Distinguishes this store's event ids from another's.
    instance: String,
    /// Bytes used as last measured by upkeep (a size check per write would cost
    /// three requests).
    bytes: AtomicU64,
    /// The most JetStream will hold for this account (0: no limit known).
    limit: AtomicU64,
    /// The largest node record a message holds: the server's `max_payload`, less
    /// room for the subject and headers.
    record_limit: usize,
    /// Opened as it is, to be read ([`Nats::open_existing`]): loading it cleans
    /// nothing up either.
    as_is: bool,
    /// Whether a large write's events go as atomic batches ([`ATOMIC_FROM`]): the
    /// stream takes them (JetStream 2.12+) and keeps more than one copy.
    atomic: bool,
    /// The settings this replica's configuration asks of the store, made the
    /// store's when it leads (`None`: opened as it is).
    wanted: Option<Wanted>,
}

/// What a replica's configuration asks of the shared store's stream and buckets.
#[derive(Debug, Clone, Copy)]
struct Wanted {
    /// The event stream's max age (`eventRetentionDays`).
    retention: Duration,
    /// Copies of the stream and buckets (`store.nats.replicas`).
    replicas: usize,
}

/// The settings of stream `name`, `None` when there is none.
async fn settings_of(js: &jetstream::Context, name: &str) -> Result<Option<stream::Config>> {
    match js.get_stream(name).await {
        Ok(s) => Ok(Some(s.cached_info().config.clone())),
        Err(e)
            if matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(j)
                if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND) =>
        {
            Ok(None)
        }
        Err(e) => Err(nats("read a stream's settings")(Box::new(e))),
    }
}

pub struct Nats {
    shared: Arc<Shared>,
    /// The anchor of the last write with events, as loaded or written: the next
    /// write's message ids are drawn from the one after it.
    mark: Mutex<String>,
    /// Each node's record as loaded: the anchor of the write that put it.
    written: Mutex<HashMap<String, String>>,
    /// Revisions of the ledger's keys as this writer last loaded or wrote them.
    revisions: Mutex<HashMap<String, u64>>,
    /// Since when a write has found the client holding no connection.
    disconnected: Mutex<Option<std::time::Instant>>,
}

impl Nats {
    /// Connect and open (creating when missing) `cluster`'s stream and buckets,
    /// their settings made `cfg`'s and `retention_days`'.
    pub fn open(cfg: &NatsConfig, cluster: &str, retention_days: u32) -> Result<Nats> {
        Nats::open_as(cfg, cluster, Some(retention_days)).map_err(|e| match e {
            // A connection's error names the servers already.
            StoreError::Nats { op, cause } if !op.starts_with("connect") => StoreError::Nats {
                op,
                cause: format!(
                    "{}: {cause}",
                    crate::shown_urls(cfg.urls.iter().map(String::as_str))
                ),
            },
            e => e,
        })
    }

    /// Open `cluster`'s stream and buckets as they are, changing none of their
    /// settings: to read a store another hale runs on (`hale store copy --from`).
    pub fn open_existing(cfg: &NatsConfig, cluster: &str) -> Result<Nats> {
        Nats::open_as(cfg, cluster, None)
    }

    /// `retention_days`: create or update the stream and buckets so; `None`: open
    /// them as they are, and fail where one is missing.
    fn open_as(cfg: &NatsConfig, cluster: &str, retention_days: Option<u32>) -> Result<Nats> {
        // Wrapped at once: an error below drops it, maybe inside another runtime.
        let runtime = Runtime(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("hale-nats")
                .enable_all()
                .build()
                .map_err(|e| StoreError::Nats {
                    op: "start the client",
                    cause: e.to_string(),
                })?,
        ));
        let handle = runtime.0.as_ref().expect("just built").handle().clone();
        let lease_duration = cfg.lease_duration;
        let cfg = cfg.clone();
        let names = Names::of(cluster);
        let Some(retention_days) = retention_days else {
            let cluster = cluster.to_string();
            let opened = run(&handle, async move {
                let client = connect(&cfg).await?;
                let mut js = jetstream::new(client);
                js.set_timeout(REQUEST_TIMEOUT);
                let missing = |what: &str, name: &str| StoreError::Nats {
                    op: "open the store",
                    cause: format!(
                        "{what} {name} does not exist: no hale store of cluster {cluster} is there"
                    ),
                };
                let not_found = |e: &jetstream::context::GetStreamError| {
                    matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(e)
                        if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
                };
                let events = match js.get_stream(&names.stream).await {
                    Ok(s) => s,
                    Err(e) if not_found(&e) => {
                        return Err(missing("the event stream", &names.stream));
                    }
                    Err(e) => return Err(nats("open the event stream")(Box::new(e))),
                };
                let mut buckets = Vec::with_capacity(3);
                for name in [&names.state, &names.ledger, &names.lease] {
                    match js.get_stream(format!("KV_{name}")).await {
                        Err(e) if not_found(&e) => {
                            return Err(missing("the key-value bucket", name));
                        }
                        _ => buckets.push(
                            js.get_key_value(name.as_str())
                                .await
                                .op("open a key-value bucket")?,
                        ),
                    }
                }
                let lease = buckets.pop().expect("three");
                let ledger = buckets.pop().expect("three");
                let state = buckets.pop().expect("three");
                let instance = state
                    .get("instance")
                    .await
                    .op("read the store instance")?
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                Ok::<_, StoreError>((js, events, state, ledger, lease, names, instance))
            })??;
            return Nats::opened(runtime, handle, lease_duration, opened, None);
        };
        let retention = Duration::from_secs(u64::from(retention_days) * 86_400);
        let wanted = Wanted {
            retention,
            replicas: cfg.replicas,
        };
        let (opened, lease_duration) = run(&handle, async move {
            let client = connect(&cfg).await?;
            let mut js = jetstream::new(client);
            js.set_timeout(REQUEST_TIMEOUT);
            // What an operator tunes — the retention, the copies, the lease — stays
            // as the store has it: one replica's start changes nothing under the
            // others. The leader makes the first two its configuration's when it
            // takes the lead (`settle`); the lease, never (every replica must time
            // it alike).
            let kept = settings_of(&js, &names.stream).await?;
            let events = js
                .create_or_update_stream(stream::Config {
                    name: names.stream.clone(),
                    subjects: vec![format!("{}.>", names.subjects)],
                    max_age: kept.as_ref().map_or(retention, |c| c.max_age),
                    num_replicas: kept.as_ref().map_or(cfg.replicas, |c| c.num_replicas),
                    duplicate_window: DUPLICATE_WINDOW.min(retention),
                    allow_direct: true,
                    // Ignored by a server before 2.12, which has no atomic batches.
                    allow_atomic_publish: true,
                    storage: stream::StorageType::File,
                    description: Some("hale: node events, one subject per node".into()),
                    ..stream::Config::default()
                })
                .await
                .op("create the event stream")?;
            let events = js
                .get_stream(&events.config.name)
                .await
                .op("open the event stream")?;
            let bucket = |bucket: &str, what: &str, kept: &Option<stream::Config>| kv::Config {
                bucket: bucket.to_string(),
                description: format!("hale: {what}"),
                history: 1,
                num_replicas: kept.as_ref().map_or(cfg.replicas, |c| c.num_replicas),
                storage: stream::StorageType::File,
                ..kv::Config::default()
            };
            let kept = settings_of(&js, &format!("KV_{}", names.state)).await?;
            let state = js
                .create_or_update_key_value(bucket(&names.state, "node state and trust", &kept))
                .await
                .op("create the state bucket")?;
            let kept = settings_of(&js, &format!("KV_{}", names.ledger)).await?;
            let ledger = js
                .create_or_update_key_value(bucket(&names.ledger, "the policy ledger", &kept))
                .await
                .op("create the ledger bucket")?;
            let kept = settings_of(&js, &format!("KV_{}", names.lease)).await?;
            let lease_duration = kept.as_ref().map_or(cfg.lease_duration, |c| c.max_age);
            if lease_duration != cfg.lease_duration {
                tracing::warn!(
                    configured = ?cfg.lease_duration,
                    used = ?lease_duration,
                    bucket = %names.lease,
                    "store.nats.leaseDuration differs from the lease the store's replicas keep: this replica uses theirs (replicas timing one lease differently would lead at once); to change it, stop every replica, delete the bucket, and start them with the new value"
                );
            }
            let lease = js
                .create_or_update_key_value(kv::Config {
                    max_age: lease_duration,
                    ..bucket(&names.lease, "the leader's lease", &kept)
                })
                .await
                .op("create the lease bucket")?;
            let instance = match state.create("instance", new_instance().into()).await {
                Ok(_) => None,
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => None,
                Err(e) => return Err(nats("write the store instance")(Box::new(e))),
            };
            let instance = match instance {
                Some(i) => i,
                None => state
                    .get("instance")
                    .await
                    .op("read the store instance")?
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default(),
            };
            Ok::<_, StoreError>((
                (js, events, state, ledger, lease, names, instance),
                lease_duration,
            ))
        })??;
        Nats::opened(runtime, handle, lease_duration, opened, Some(wanted))
    }

    /// The store on what opening it found; `wanted`: the settings the configuration
    /// asks of it, `None` for a store opened as it is, to be read.
    fn opened(
        runtime: Runtime,
        handle: tokio::runtime::Handle,
        lease_duration: Duration,
        opened: Found,
        wanted: Option<Wanted>,
    ) -> Result<Nats> {
        let (js, events, state, ledger, lease, names, instance) = opened;
        let record_limit = js
            .client()
            .server_info()
            .max_payload
            .saturating_sub(RECORD_HEADROOM);
        let config = &events.cached_info().config;
        let atomic = config.allow_atomic_publish && config.num_replicas > 1;
        let nats = Nats {
            shared: Arc::new(Shared {
                _runtime: runtime,
                handle,
                js,
                events,
                state,
                ledger,
                lease,
                lease_duration,
                names,
                instance,
                bytes: AtomicU64::new(0),
                limit: AtomicU64::new(0),
                record_limit,
                as_is: wanted.is_none(),
                atomic,
                wanted,
            }),
            mark: Mutex::default(),
            written: Mutex::default(),
            revisions: Mutex::default(),
            disconnected: Mutex::default(),
        };
        nats.upkeep()?;
        Ok(nats)
    }

    /// `body`, or, when it is more than a message holds, the record cut down to fit
    /// ([`Node::fitted`]): written whole, it would be refused, and every later write
    /// would wait behind it. `None`: not even that fits, and this record is not
    /// written (said as an error); the others are.
    fn fitted(&self, id: &str, body: &str) -> Option<String> {
        let limit = self.shared.record_limit;
        if body.len() <= limit {
            return Some(body.to_string());
        }
        let fitted = serde_json::from_str::<Node>(body)
            .ok()
            .and_then(|node| node.fitted(limit, |n| super::json(n).len()));
        let sources = |n: &Node| {
            n.conditions
                .values()
                .map(|c| c.sources.len())
                .sum::<usize>()
        };
        match fitted {
            Some(node) => {
                let kept = super::json(&node);
                tracing::warn!(
                    node = id,
                    bytes = body.len(),
                    limit,
                    sources_kept = sources(&node),
                    "a node record is more than a NATS message holds: written with its conditions' most severe alerts only (the next poll names the rest again)"
                );
                Some(kept)
            }
            None => {
                tracing::error!(
                    node = id,
                    bytes = body.len(),
                    limit,
                    "a node record is more than a NATS message holds even with one alert per condition: its change is not written (the other records are); raise the NATS server's max_payload"
                );
                None
            }
        }
    }

    /// A writer and a handle for reads and upkeep, on one connection.
    pub fn open_pair(cfg: &NatsConfig, cluster: &str, retention_days: u32) -> Result<Opened> {
        let writer = Nats::open(cfg, cluster, retention_days)?;
        let lease = writer.lease();
        let outbox = writer.outbox();
        let upkeep = Nats {
            shared: writer.shared.clone(),
            mark: Mutex::default(),
            written: Mutex::default(),
            revisions: Mutex::default(),
            disconnected: Mutex::default(),
        };
        Ok(Opened {
            writer: Box::new(writer),
            upkeep: Box::new(upkeep),
            lease: Some(lease),
            outbox: Arc::new(outbox),
        })
    }

    /// Refuse a read at once while the client holds no connection: each of its
    /// requests would wait out its timeout, one after the other.
    fn connected(&self, op: &'static str) -> Result<()> {
        match self.shared.js.client().connection_state() {
            async_nats::connection::State::Connected => Ok(()),
            _ => Err(StoreError::Nats {
                op,
                cause: "not connected to any NATS server".into(),
            }),
        }
    }

    /// Refuse a write while the client holds no connection and has found none
    /// within [`RECONNECT_GRACE`] of the first write that met it without one. The
    /// grace is a reconnection's (to another server of the cluster, one that is
    /// gone tried first costing a connection timeout), so a failover delays a
    /// write as before; past it — every server gone — each write fails at once,
    /// where its publishes would each wait out their timeout while the step
    /// behind it held the fleet, which every read waits for.
    fn connected_soon(&self, op: &'static str) -> Result<()> {
        let mut since = self.disconnected.lock().expect("disconnected lock");
        if self.connected(op).is_ok() {
            *since = None;
            return Ok(());
        }
        let deadline = *since.get_or_insert_with(std::time::Instant::now) + RECONNECT_GRACE;
        drop(since);
        while self.connected(op).is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let connected = self.connected(op);
        if connected.is_ok() {
            *self.disconnected.lock().expect("disconnected lock") = None;
        }
        connected
    }

    /// Durable webhook delivery from the event stream.
    pub fn outbox(&self) -> Outbox {
        Outbox {
            events: self.shared.events.clone(),
            subjects: self.shared.names.subjects.clone(),
            instance: self.shared.instance.clone(),
        }
    }

    /// The lease bucket, for a leader election on it.
    pub fn lease(&self) -> Lease {
        Lease {
            bucket: self.shared.lease.clone(),
            duration: self.shared.lease_duration,
            runtime: self.shared.handle.clone(),
        }
    }

    fn run<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> Result<T> {
        run(&self.shared.handle, f)
    }

    /// Write the mark alone (no write's records with it), and keep it.
    fn put_mark(&self, mark: String) -> Result<()> {
        let shared = self.shared.clone();
        let value = Bytes::from(mark.clone());
        self.run(async move {
            publish_kv(&shared.js, &shared.state, "mark", Some(value), None, None)
                .await?
                .await
                .op("write node state")
                .map(drop)
        })??;
        *self.mark.lock().expect("mark lock") = mark;
        Ok(())
    }
}

/// Run `f` on the client's runtime and wait for it: the port is synchronous and may
/// be called from inside another runtime, where blocking on a future would panic.
fn run<T: Send + 'static>(
    handle: &tokio::runtime::Handle,
    f: impl Future<Output = T> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(f.await);
    });
    wait_for(&rx)
}

/// The answer of a call on the client's runtime.
fn wait_for<T>(rx: &std::sync::mpsc::Receiver<T>) -> Result<T> {
    // Every request has its own timeout; this bounds a read of many (a load).
    rx.recv_timeout(CALL_TIMEOUT).map_err(|e| StoreError::Nats {
        op: "wait for the client",
        cause: match e {
            std::sync::mpsc::RecvTimeoutError::Timeout => {
                format!("no answer within {}s", CALL_TIMEOUT.as_secs())
            }
            std::sync::mpsc::RecvTimeoutError::Disconnected => "its runtime stopped".into(),
        },
    })
}

fn new_instance() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let digest = Sha256::digest(format!("{nanos}-{}", std::process::id()));
    hex(&digest[..4])
}

/// The anchor of the write after the one `mark` anchored: a node's first event
/// in a write is drawn from it, each later one from the one before.
fn next_anchor(mark: &str) -> String {
    hex(&Sha256::digest(format!("{mark}\nnext"))[..12])
}

/// The mark of a write anchored at `anchor` whose events took stream sequences
/// up to `last`.
fn marked(anchor: &str, last: Option<u64>) -> String {
    match last {
        Some(last) => format!("{anchor} {last}"),
        None => anchor.to_string(),
    }
}

/// Whether a JetStream error says the message is not there: deleted already
/// (by a removal cut short), or aged out — "sequence N not found", "no message
/// found".
fn gone(e: &dyn std::fmt::Display) -> bool {
    let e = e.to_string();
    e.contains("not found") || e.contains("no message found")
}

/// What a mark says between it and the last stream sequence of a removal of an
/// unfinished write's events begun and not yet done (see
/// [`Nats::void_unfinished`]); ` voided ` once it is done.
const VOID: &str = " void ";

/// The last stream sequence the writes up to `mark` took, where it says (marks
/// written by earlier versions do not).
fn covered(mark: &str) -> Option<u64> {
    mark.rsplit_once(' ')?.1.parse().ok()
}

/// The message id of an event: the node's previous event id in its write (or
/// the write's anchor) and the event's type, so a step taken again from the same
/// state publishes the same ids.
fn message_id(previous: &str, event: &Event) -> String {
    let digest = Sha256::digest(format!(
        "{previous}\n{}\n{}",
        event.node_id,
        event.kind.name()
    ));
    hex(&digest[..12])
}

fn corrupt(what: impl Into<String>) -> impl FnOnce(serde_json::Error) -> StoreError {
    let what = what.into();
    move |cause| StoreError::Corrupt { what, cause }
}

/// A key of a bucket as last written.
struct Entry {
    key: String,
    value: Bytes,
    revision: u64,
    /// The anchor of the write that put it ([`WRITE`]), where it says.
    write: Option<String>,
    /// Its last write deleted it (the marker's revision is the one to write
    /// against).
    deleted: bool,
}

/// The header a node record carries: the anchor of the write that put it, so a
/// write cut short can be told apart node by node (see [`Nats::void_unfinished`]).
const WRITE: &str = "Hale-Write";

/// Every key of a bucket with its value and revision, read through an ordered
/// consumer on the bucket's stream (last message per key).
async fn entries(bucket: &kv::Store) -> Result<Vec<Entry>> {
    let info = bucket.stream.get_info().await.op("read a bucket")?;
    if info.state.messages == 0 {
        return Ok(Vec::new());
    }
    let consumer = bucket
        .stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: format!("{}>", bucket.prefix),
            deliver_policy: consumer::DeliverPolicy::LastPerSubject,
            ..Default::default()
        })
        .await
        .op("read a bucket")?;
    let name = consumer.cached_info().name.clone();
    let read = read_entries(consumer, &bucket.prefix).await;
    let _ = bucket.stream.delete_consumer(&name).await;
    // Keys are never purged but once (an upgrade's old marks): a read that found
    // fewer than the bucket held before it began ended early, and a state loaded
    // from it would lack nodes.
    let read = read?;
    let keys = read
        .iter()
        .map(|e| e.key.as_str())
        .collect::<BTreeSet<_>>()
        .len() as u64;
    if keys < info.state.subjects_count {
        return Err(StoreError::Nats {
            op: "read a bucket",
            cause: format!(
                "read {keys} of the {} keys it holds: the read ended early (a server catching up?); read again",
                info.state.subjects_count
            ),
        });
    }
    Ok(read)
}

async fn read_entries(
    consumer: consumer::Consumer<consumer::pull::OrderedConfig>,
    prefix: &str,
) -> Result<Vec<Entry>> {
    let mut messages = consumer.messages().await.op("read a bucket")?;
    let mut out = Vec::new();
    while let Some(m) = messages.next().await {
        let m = m.op("read a bucket")?;
        let info = m.info().map_err(|e| StoreError::Nats {
            op: "read a bucket",
            cause: e.to_string(),
        })?;
        let (revision, pending) = (info.stream_sequence, info.pending);
        let deleted = m
            .headers
            .as_ref()
            .and_then(|h| h.get("KV-Operation"))
            .is_some_and(|op| op.as_str() != "PUT");
        if let Some(key) = m.subject.strip_prefix(prefix) {
            let write = m
                .headers
                .as_ref()
                .and_then(|h| h.get(WRITE))
                .map(|w| w.as_str().to_string());
            out.push(Entry {
                key: key.to_string(),
                value: m.payload.clone(),
                revision,
                write,
                deleted,
            });
        }
        if pending == 0 {
            break;
        }
    }
    Ok(out)
}

/// Publish `value` to `key` of `bucket` (a put, or with `expect` a compare-and-set
/// against that revision, 0 meaning "absent"; `None` value: a delete marker),
/// saying which write (its anchor) made it where `write` names one; the ack
/// future.
async fn publish_kv(
    js: &jetstream::Context,
    bucket: &kv::Store,
    key: &str,
    value: Option<Bytes>,
    expect: Option<u64>,
    write: Option<&str>,
) -> Result<jetstream::context::PublishAckFuture> {
    let subject = format!("{}{key}", bucket.prefix);
    let mut headers = HeaderMap::new();
    if let Some(write) = write {
        headers.insert(WRITE, write);
    }
    if value.is_none() {
        headers.insert("KV-Operation", "DEL");
    }
    let value = value.unwrap_or_default();
    if let Some(rev) = expect {
        headers.insert(
            header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
            HeaderValue::from(rev),
        );
    }
    js.publish_with_headers(subject, headers, value)
        .await
        .op("publish")
}

/// An event on its way to the stream: subject, message id, body.
type Message = (String, String, Bytes);

/// Publish one event with its message id; the ack future.
async fn publish_event(
    js: &jetstream::Context,
    (subject, id, body): &Message,
) -> Result<jetstream::context::PublishAckFuture> {
    let mut headers = HeaderMap::new();
    headers.insert(header::NATS_MESSAGE_ID, id.as_str());
    js.publish_with_headers(subject.clone(), headers, body.clone())
        .await
        .op("publish an event")
}

/// A new atomic batch's id: never one a batch before it had, even one retried
/// with the same events (JetStream keeps an unfinished batch for 10 s).
fn batch_id(first: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hex(&Sha256::digest(format!("{first}-{nanos}-{}", std::process::id()))[..12])
}

/// Publish the `seq`th message of atomic batch `batch`: without an
/// acknowledgement, but for the commit's, whose future is returned.
async fn publish_batched(
    js: &jetstream::Context,
    batch: &str,
    seq: usize,
    commit: bool,
    (subject, id, body): &Message,
) -> Result<Option<jetstream::context::PublishAckFuture>> {
    let mut headers = HeaderMap::new();
    headers.insert(header::NATS_MESSAGE_ID, id.as_str());
    headers.insert("Nats-Batch-Id", batch);
    headers.insert("Nats-Batch-Sequence", HeaderValue::from(seq));
    if !commit {
        return js
            .client()
            .publish_with_headers(subject.clone(), headers, body.clone())
            .await
            .op("publish an event")
            .map(|()| None);
    }
    headers.insert("Nats-Batch-Commit", "1");
    js.publish_with_headers(subject.clone(), headers, body.clone())
        .await
        .op("publish an event")
        .map(Some)
}

/// The stream sequences of an atomic batch's messages, from its commit's
/// acknowledgement. A batch JetStream refused stored none of them (a message id
/// it has seen already — a write retried after its commit was stored —, a batch
/// too large for the server's limit, atomic batches turned off): its events go
/// one by one, as on a stream without batches, each id stored once.
async fn committed(
    js: &jetstream::Context,
    commit: jetstream::context::PublishAckFuture,
    chunk: &[Message],
) -> Result<Vec<u64>> {
    let n = chunk.len() as u64;
    match commit.await {
        Ok(ack) if ack.sequence >= n => Ok((ack.sequence + 1 - n..=ack.sequence).collect()),
        Ok(ack) => Err(StoreError::Nats {
            op: "store an event",
            cause: format!(
                "an atomic batch of {n} acknowledged at sequence {}",
                ack.sequence
            ),
        }),
        Err(e) if refused_batch(&e) => {
            tracing::debug!(error = %e, events = n, "JetStream refused an atomic batch: publishing its events one by one");
            let mut pending = Vec::with_capacity(chunk.len());
            for message in chunk {
                pending.push(publish_event(js, message).await?);
            }
            let mut seqs = Vec::with_capacity(chunk.len());
            for p in pending {
                seqs.push(p.await.op("store an event")?.sequence);
            }
            Ok(seqs)
        }
        Err(e) => Err(nats("store an event")(Box::new(e))),
    }
}

/// Whether an atomic batch's commit was answered with JetStream's refusal (an
/// API error), not lost on the way (a timeout, a connection gone).
fn refused_batch(e: &jetstream::context::PublishError) -> bool {
    e.kind() == jetstream::context::PublishErrorKind::Other
        && std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<jetstream::Error>())
            .is_some()
}

impl Store for Nats {
    fn load(&self, now: Time) -> Result<Fleet> {
        let shared = self.shared.clone();
        let (state, ledger) = self.run(async move {
            Ok::<_, StoreError>((
                entries(&shared.state).await?,
                entries(&shared.ledger).await?,
            ))
        })??;
        let mut fleet = Fleet::new(now);
        let mut live = Vec::new();
        let mut mark = String::new();
        let mut written = HashMap::new();
        let mut per_node_marks = false;
        for e in &state {
            // A node a write removed: gone, but what removed it is known.
            if e.deleted {
                if let (Some(id), Some(w)) = (e.key.strip_prefix("node."), &e.write) {
                    written.insert(unkey(id).unwrap_or_else(|| id.to_string()), w.clone());
                }
                continue;
            }
            if let Some(id) = e.key.strip_prefix("node.") {
                let id = unkey(id).unwrap_or_else(|| id.to_string());
                let node: Box<Node> =
                    serde_json::from_slice(&e.value).map_err(corrupt(format!("node {id}")))?;
                if let Some(w) = &e.write {
                    written.insert(node.id.clone(), w.clone());
                }
                fleet.nodes.insert(node.id.clone(), node);
            } else if let Some(id) = e.key.strip_prefix("live.") {
                live.push((unkey(id), e));
            } else if e.key == "mark" {
                mark = String::from_utf8_lossy(&e.value).into_owned();
            } else if e.key.starts_with("mark.") {
                per_node_marks = true;
            } else if e.key == "trust" {
                match serde_json::from_slice::<Trust>(&e.value) {
                    Ok(trust) => fleet.trust = trust.resumed(now),
                    Err(e) => super::unreadable_trust(&e),
                }
            }
        }
        for (id, e) in live {
            let Some(node) = id.and_then(|id| fleet.nodes.get_mut(&id)) else {
                continue;
            };
            let (report, heartbeat): (Option<i64>, Option<i64>) =
                serde_json::from_slice(&e.value).map_err(corrupt("a node's report times"))?;
            let later = |stored: Option<Time>, row: Option<i64>| {
                stored.max(row.and_then(chrono::DateTime::from_timestamp_millis))
            };
            node.last_report = later(node.last_report, report);
            if let Some(h) = node.heartbeat.as_mut() {
                h.last = later(Some(h.last), heartbeat).unwrap_or(h.last);
            }
        }
        *self.mark.lock().expect("mark lock") = mark;
        *self.written.lock().expect("written lock") = written;
        // A mark per node, as earlier versions kept them: no longer read.
        if per_node_marks && !self.shared.as_is {
            let shared = self.shared.clone();
            self.run(async move {
                let filter = format!("{}mark.>", shared.state.prefix);
                shared.state.stream.purge().filter(filter).await
            })?
            .op("remove the old marks")?;
        }
        *self.revisions.lock().expect("revisions lock") =
            ledger.iter().map(|e| (e.key.clone(), e.revision)).collect();
        for e in ledger.iter().filter(|e| !e.deleted) {
            if e.key == "budget" {
                fleet.ledger =
                    serde_json::from_slice(&e.value).map_err(corrupt("the policy ledger"))?;
            }
        }
        for e in ledger.iter().filter(|e| !e.deleted) {
            if let Some(owner) = e.key.strip_prefix("restart.").and_then(unkey) {
                let (count, last): (u32, Option<i64>) = serde_json::from_slice(&e.value)
                    .map_err(corrupt(format!("the restart count of {owner}")))?;
                let last = last.and_then(chrono::DateTime::from_timestamp_millis);
                fleet.ledger.moves.insert(owner, Moves { count, last });
            }
        }
        Ok(fleet)
    }

    fn write(&mut self, batch: &Batch<'_>) -> Result<Vec<String>> {
        self.connected_soon("write")?;
        // Ids first, from the mark as it stands: a retry draws the same ones.
        let anchor =
            (!batch.events.is_empty()).then(|| next_anchor(&self.mark.lock().expect("mark lock")));
        let mut puts: Vec<(String, Bytes)> = Vec::new();
        for (id, body) in &batch.nodes {
            let Some(body) = self.fitted(id, body) else {
                continue;
            };
            puts.push((format!("node.{}", key(id)), Bytes::from(body)));
        }
        for l in &batch.liveness {
            let v = serde_json::to_vec(&(l.last_report, l.last_heartbeat)).expect("serialises");
            puts.push((format!("live.{}", key(&l.id)), Bytes::from(v)));
        }
        puts.push(("trust".into(), Bytes::from(batch.trust.clone())));
        let mut cas: Vec<(String, Option<Bytes>)> = Vec::new();
        if let Some(ledger) = &batch.ledger {
            cas.push(("budget".into(), Some(Bytes::from(ledger.clone()))));
        }
        for (owner, moves) in &batch.restarts {
            let v = moves.map(|m| {
                let v = (m.count, m.last.map(|t| t.timestamp_millis()));
                Bytes::from(serde_json::to_vec(&v).expect("serialises"))
            });
            cas.push((format!("restart.{}", key(owner)), v));
        }
        let removed: Vec<String> = batch.removed.iter().map(|id| key(id)).collect();
        let revisions: Vec<Option<u64>> = {
            let known = self.revisions.lock().expect("revisions lock");
            cas.iter().map(|(k, _)| known.get(k).copied()).collect()
        };
        let shared = self.shared.clone();
        let mark = anchor.clone();
        let written_by = anchor.clone();
        // The events are made ready here while the client's runtime publishes those
        // ready before them: the two overlap, on two threads.
        let (feed, mut fed) = tokio::sync::mpsc::unbounded_channel::<(String, String, Bytes)>();
        let count = batch.events.len();
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        self.shared.handle.spawn(async move {
            let written = async move {
                let js = &shared.js;
                // Events first: a crash after them repeats their ids, not their records.
                // At most IN_FLIGHT unacknowledged: the client lets 5,000 be, and a
                // publish past them waits for an acknowledgement nobody reads yet.
                let mut acks = Vec::with_capacity(count);
                let subject = |node: &str| format!("{}.{}", shared.names.subjects, key(node));
                if shared.atomic && count >= ATOMIC_FROM {
                    let mut chunk = Vec::with_capacity(ATOMIC_MOST);
                    let mut batch = String::new();
                    while let Some((node, id, body)) = fed.recv().await {
                        if chunk.is_empty() {
                            batch = batch_id(&id);
                        }
                        let commit =
                            chunk.len() + 1 == ATOMIC_MOST || acks.len() + chunk.len() + 1 == count;
                        let message = (subject(&node), id, body);
                        let ack =
                            publish_batched(js, &batch, chunk.len() + 1, commit, &message).await?;
                        chunk.push(message);
                        if let Some(ack) = ack {
                            acks.extend(committed(js, ack, &chunk).await?);
                            chunk.clear();
                        }
                    }
                } else {
                    let mut pending = std::collections::VecDeque::with_capacity(IN_FLIGHT);
                    while let Some((node, id, body)) = fed.recv().await {
                        if pending.len() == IN_FLIGHT {
                            let oldest: jetstream::context::PublishAckFuture =
                                pending.pop_front().expect("full");
                            acks.push(oldest.await.op("store an event")?.sequence);
                        }
                        pending.push_back(publish_event(js, &(subject(&node), id, body)).await?);
                    }
                    for p in pending {
                        acks.push(p.await.op("store an event")?.sequence);
                    }
                }
                let mark = mark.map(|anchor| marked(&anchor, acks.iter().max().copied()));
                // Deletes before puts: a node removed and re-created ends up present.
                // The record's delete says its write, as a put does: a node removed
                // by a write cut short keeps the events that say so.
                let state = &shared.state;
                let write = written_by.as_deref();
                for id in &removed {
                    for k in [format!("node.{id}"), format!("live.{id}")] {
                        let by = if k.starts_with("node.") { write } else { None };
                        publish_kv(js, state, &k, None, None, by)
                            .await?
                            .await
                            .op("delete a node")?;
                    }
                }
                let results: Vec<Result<()>> = futures::stream::iter(puts)
                    .map(|(k, v)| async move {
                        publish_kv(js, state, &k, Some(v), None, write)
                            .await?
                            .await
                            .op("write node state")
                            .map(|_| ())
                    })
                    .buffer_unordered(IN_FLIGHT)
                    .collect()
                    .await;
                results.into_iter().collect::<Result<Vec<()>>>()?;
                // The mark once every record of the step is written: a step taken
                // again from a state only partly written draws this write's ids again.
                if let Some(mark) = &mark {
                    publish_kv(
                        js,
                        state,
                        "mark",
                        Some(Bytes::from(mark.clone())),
                        None,
                        None,
                    )
                    .await?
                    .await
                    .op("write node state")?;
                }
                // The ledger last, each key against the revision this writer knows: a
                // rival writer's change is a conflict, never overwritten.
                let mut written = Vec::new();
                for ((k, v), rev) in cas.into_iter().zip(revisions) {
                    let expect = rev.unwrap_or(0);
                    // Forgetting a key never written is nothing to do; a delete is a
                    // marker whose revision the next write of the key compares with.
                    if v.is_none() && rev.is_none() {
                        continue;
                    }
                    let outcome = match publish_kv(js, &shared.ledger, &k, v, Some(expect), None)
                        .await?
                        .await
                    {
                        Ok(ack) => Ok(ack.sequence),
                        Err(e) => Err(e.to_string()),
                    };
                    match outcome {
                        Ok(rev) => written.push((k, rev)),
                        Err(cause) if cause.contains("wrong last sequence") => {
                            return Ok((acks, mark, Err((written, k))));
                        }
                        Err(cause) => {
                            return Err(StoreError::Nats {
                                op: "write the policy ledger",
                                cause,
                            });
                        }
                    }
                }
                Ok::<_, StoreError>((acks, mark, Ok(written)))
            };
            let _ = answer.send(written.await);
        });
        let mut last: HashMap<&str, String> = HashMap::new();
        for e in batch.events {
            let previous = last
                .get(e.node_id.as_str())
                .or(anchor.as_ref())
                .map_or("", String::as_str);
            let id = message_id(previous, e);
            last.insert(&e.node_id, id.clone());
            let body = super::json(e);
            // Refused once the publisher has stopped on an error: it answers that.
            if feed
                .send((e.node_id.clone(), id, Bytes::from(body)))
                .is_err()
            {
                break;
            }
        }
        drop(feed);
        let (acks, mark, written) = wait_for(&answered)??;
        let instance = &self.shared.instance;
        let ids = acks
            .into_iter()
            .map(|seq| format!("{instance}-{seq}"))
            .collect();
        let (written, conflict) = match written {
            Ok(w) => (w, None),
            Err((w, k)) => (w, Some(k)),
        };
        // Revisions written stand even when a later key failed: a retry compares
        // against them.
        let mut known = self.revisions.lock().expect("revisions lock");
        known.extend(written);
        drop(known);
        if let Some(k) = conflict {
            return Err(StoreError::Conflict {
                what: format!("the policy ledger's {k}"),
            });
        }
        if let Some(mark) = mark {
            *self.mark.lock().expect("mark lock") = mark;
        }
        Ok(ids)
    }

    fn history(&self, since: i64) -> Result<Vec<Event>> {
        let shared = self.shared.clone();
        let start = chrono::DateTime::from_timestamp_millis(since).unwrap_or_default();
        let read = self.run(async move { history_from(&shared, start).await })??;
        read.into_iter()
            .map(|(_, body)| serde_json::from_slice(&body).map_err(corrupt("an event")))
            .collect()
    }

    fn events(&self, node_id: &str, q: &EventQuery) -> Result<EventPage> {
        let shared = self.shared.clone();
        let subject = format!("{}.{}", shared.names.subjects, key(node_id));
        let q = q.clone();
        let instance = shared.instance.clone();
        self.connected("read events")?;
        let page = self.run(async move { page(&shared, &subject, &q).await })??;
        let events = page
            .events
            .into_iter()
            .map(|(seq, event)| StoredEvent {
                id: format!("{instance}-{seq}"),
                event,
            })
            .collect();
        Ok(EventPage {
            events,
            next: page.next,
        })
    }

    fn has_events(&self, node_id: &str) -> Result<bool> {
        self.connected("read events")?;
        let shared = self.shared.clone();
        let subject = format!("{}.{}", shared.names.subjects, key(node_id));
        self.run(async move {
            last_seq(&shared.events, &subject)
                .await
                .map(|s| s.is_some())
        })?
    }

    /// The stream drops events past its max age itself.
    fn sweep(&mut self, _cutoff: i64, _batch: usize) -> Result<usize> {
        Ok(0)
    }

    /// Measure the bytes used and JetStream's limit for this account.
    fn upkeep(&self) -> Result<()> {
        // Not while the client holds no connection: its four requests would each
        // wait out their timeout, holding the store's reads (a node's history)
        // behind them for twenty seconds.
        self.connected("store upkeep")?;
        let shared = self.shared.clone();
        let (bytes, limit) = self.run(async move {
            let mut bytes = shared
                .events
                .get_info()
                .await
                .op("read the event stream")?
                .state
                .bytes;
            for bucket in [&shared.state, &shared.ledger] {
                bytes += bucket
                    .stream
                    .get_info()
                    .await
                    .op("read a bucket")?
                    .state
                    .bytes;
            }
            let account = shared.js.query_account().await.op("read the account")?;
            let limit = account
                .limits
                .max_storage
                .filter(|m| *m > 0)
                .map_or(0, |m| m as u64);
            Ok::<_, StoreError>((bytes, limit))
        })??;
        self.shared.bytes.store(bytes, Ordering::Relaxed);
        self.shared.limit.store(limit, Ordering::Relaxed);
        Ok(())
    }

    fn bytes_used(&self) -> u64 {
        self.shared.bytes.load(Ordering::Relaxed)
    }

    fn void_unfinished(&mut self) -> Result<u64> {
        let mark = self.mark.lock().expect("mark lock").clone();
        // A removal begun and cut short (the stream without a leader, NATS gone)
        // is taken up again from the mark it began from, over the same range: no
        // write came after it, as none comes before the removal is done.
        let (base, begun) = match mark.split_once(VOID) {
            Some((base, last)) => (base.to_string(), last.parse::<u64>().ok()),
            None => (mark, None),
        };
        let Some(covered) = covered(&base) else {
            return Ok(0);
        };
        // The unfinished write was anchored after the mark: a node whose record
        // it did write keeps its events (its state has them); the others' go.
        let unfinished = next_anchor(&base);
        let kept: BTreeSet<String> = self
            .written
            .lock()
            .expect("written lock")
            .iter()
            .filter(|(_, w)| **w == unfinished)
            .map(|(id, _)| key(id))
            .collect();
        let last = match begun {
            Some(last) => last,
            None => {
                let shared = self.shared.clone();
                let last = self.run(async move {
                    let info = shared.events.get_info().await.op("read the event stream")?;
                    Ok::<_, StoreError>(info.state.last_sequence)
                })??;
                if last <= covered {
                    return Ok(0);
                }
                // Anchored anew, and kept, before anything goes: a step taken
                // again publishes under ids of its own (the duplicate window
                // would take them for the removed ones'), and the range is kept
                // for a removal cut short to be taken up again.
                self.put_mark(format!("{base}{VOID}{last}"))?;
                last
            }
        };
        let shared = self.shared.clone();
        let voided = self.run(async move {
            let failed = |cause: String| StoreError::Nats {
                op: "remove an unfinished write's events",
                cause,
            };
            let stream = &shared.events;
            let prefix = format!("{}.", shared.names.subjects);
            let (prefix, kept) = (&prefix, &kept);
            // The events past the mark of nodes whose records, as loaded, that
            // write did not reach (each read from the stream's leader).
            let found: Vec<Option<(u64, String)>> = futures::stream::iter(covered + 1..=last)
                .map(|seq| async move {
                    let message = match stream.get_raw_message(seq).await {
                        Ok(m) => m,
                        Err(e) if gone(&e) => return Ok(None),
                        Err(e) => return Err(e.to_string()),
                    };
                    Ok(message
                        .subject
                        .strip_prefix(prefix.as_str())
                        .filter(|n| !kept.contains(*n))
                        .map(|n| (seq, n.to_string())))
                })
                .buffer_unordered(IN_FLIGHT)
                .try_collect()
                .await
                .map_err(failed)?;
            let candidates: Vec<(u64, String)> = found.into_iter().flatten().collect();
            // Each such node's record read again, from the bucket's leader: a load
            // that read a copy behind (a server just back, catching up) must not
            // remove events a record it did reach holds.
            let nodes: BTreeSet<String> = candidates.iter().map(|(_, n)| n.clone()).collect();
            let state = &shared.state;
            let unfinished = &unfinished;
            let reached: Vec<Option<String>> = futures::stream::iter(nodes)
                .map(|node| async move {
                    let subject = format!("{}node.{node}", state.prefix);
                    match state.stream.get_last_raw_message_by_subject(&subject).await {
                        Ok(m) => {
                            let write = m.headers.get(WRITE).map(|w| w.as_str().to_string());
                            Ok((write.as_deref() == Some(unfinished.as_str())).then_some(node))
                        }
                        Err(e) if gone(&e) => Ok(None),
                        Err(e) => Err(e.to_string()),
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .try_collect()
                .await
                .map_err(failed)?;
            let reached: BTreeSet<String> = reached.into_iter().flatten().collect();
            let doomed: Vec<u64> = candidates
                .into_iter()
                .filter(|(_, n)| !reached.contains(n))
                .map(|(seq, _)| seq)
                .collect();
            let gone: Vec<bool> = futures::stream::iter(doomed)
                .map(|seq| async move {
                    match stream.delete_message(seq).await {
                        Ok(deleted) => Ok(deleted),
                        Err(e) if gone(&e) => Ok(false),
                        Err(e) => Err(e.to_string()),
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .try_collect()
                .await
                .map_err(failed)?;
            Ok::<_, StoreError>(gone.into_iter().filter(|g| *g).count() as u64)
        })??;
        // Done: a leader after this one, even before this one's first write,
        // removes nothing this one kept.
        self.put_mark(format!("{base} voided {last}"))?;
        Ok(voided)
    }

    fn settle(&mut self) -> Result<Vec<String>> {
        let Some(wanted) = self.shared.wanted else {
            return Ok(Vec::new());
        };
        let shared = self.shared.clone();
        self.run(async move {
            let (js, names) = (&shared.js, &shared.names);
            let days = |d: Duration| format!("{}d", d.as_secs() / 86_400);
            let mut changed = Vec::new();
            if let Some(mut config) = settings_of(js, &names.stream).await?
                && (config.max_age != wanted.retention || config.num_replicas != wanted.replicas)
            {
                let mut what = Vec::new();
                if config.max_age != wanted.retention {
                    what.push(format!(
                        "max age {} -> {} (eventRetentionDays)",
                        days(config.max_age),
                        days(wanted.retention)
                    ));
                }
                if config.num_replicas != wanted.replicas {
                    what.push(format!(
                        "copies {} -> {} (store.nats.replicas)",
                        config.num_replicas, wanted.replicas
                    ));
                }
                changed.push(format!(
                    "the event stream {}: {}",
                    names.stream,
                    what.join(", ")
                ));
                config.max_age = wanted.retention;
                config.num_replicas = wanted.replicas;
                js.update_stream(config)
                    .await
                    .op("apply the configuration's settings to the store")?;
            }
            for bucket in [&names.state, &names.ledger, &names.lease] {
                if let Some(mut config) = settings_of(js, &format!("KV_{bucket}")).await?
                    && config.num_replicas != wanted.replicas
                {
                    changed.push(format!(
                        "the bucket {bucket}: copies {} -> {} (store.nats.replicas)",
                        config.num_replicas, wanted.replicas
                    ));
                    config.num_replicas = wanted.replicas;
                    js.update_stream(config)
                        .await
                        .op("apply the configuration's settings to the store")?;
                }
            }
            Ok::<_, StoreError>(changed)
        })?
    }

    fn limit(&self) -> Option<u64> {
        Some(self.shared.limit.load(Ordering::Relaxed)).filter(|l| *l > 0)
    }

    fn shared(&self) -> bool {
        true
    }

    fn leader(&self) -> Result<Option<String>> {
        let shared = self.shared.clone();
        self.run(async move {
            // The key lives a lease after its holder last wrote it: there, someone leads.
            Ok(shared
                .lease
                .get(LEASE_KEY)
                .await
                .op("read the lease")?
                .map(|v| String::from_utf8_lossy(&v).into_owned()))
        })?
    }

    fn mark_copying(&mut self, copying: bool) -> Result<()> {
        let shared = self.shared.clone();
        self.run(async move {
            if copying {
                shared
                    .state
                    .put("copying", Bytes::from_static(b"1"))
                    .await
                    .op("mark a copy")?;
            } else {
                shared.state.delete("copying").await.op("mark a copy")?;
            }
            Ok(())
        })?
    }

    fn copying(&self) -> Result<bool> {
        let shared = self.shared.clone();
        self.run(async move {
            Ok(shared
                .state
                .get("copying")
                .await
                .op("read the copy's mark")?
                .is_some())
        })?
    }

    fn revision(&self) -> Result<u64> {
        let shared = self.shared.clone();
        self.run(async move {
            let mut sum = 0;
            for bucket in [&shared.state, &shared.ledger] {
                // Fresh: a bucket's `status()` answers from a cache.
                sum += bucket
                    .stream
                    .get_info()
                    .await
                    .op("read a bucket")?
                    .state
                    .last_sequence;
            }
            Ok(sum)
        })?
    }
}

/// The sequence of the last message on `subject`, if any.
async fn last_seq(events: &stream::Stream, subject: &str) -> Result<Option<(u64, Time)>> {
    match events.direct_get_last_for_subject(subject).await {
        Ok(m) => Ok(Some((m.sequence, m.time))),
        Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => Ok(None),
        Err(e) => Err(nats("read the last event")(Box::new(e))),
    }
}

/// Every event stored from `start` on, up to the last one there now:
/// (sequence, payload) in order, through an ordered consumer (deleted once read).
async fn history_from(shared: &Shared, start: Time) -> Result<Vec<(u64, Bytes)>> {
    let info = shared.events.get_info().await.op("read the event stream")?;
    let (last, last_time) = (info.state.last_sequence, info.state.last_timestamp);
    // Nothing stored, or nothing since: a consumer would wait for a new one.
    if info.state.messages == 0 || start > last_time {
        return Ok(Vec::new());
    }
    let consumer = shared
        .events
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: format!("{}.>", shared.names.subjects),
            deliver_policy: consumer::DeliverPolicy::ByStartTime { start_time: start },
            ..Default::default()
        })
        .await
        .op("read events")?;
    let name = consumer.cached_info().name.clone();
    let read = read_ordered(consumer, last).await;
    let _ = shared.events.delete_consumer(&name).await;
    read
}

/// Read an ordered consumer's messages up to sequence `last`.
async fn read_ordered(
    consumer: consumer::Consumer<consumer::pull::OrderedConfig>,
    last: u64,
) -> Result<Vec<(u64, Bytes)>> {
    let mut messages = consumer.messages().await.op("read events")?;
    let mut out = Vec::new();
    while let Some(m) = messages.next().await {
        let m = m.op("read an event")?;
        let (seq, pending) = {
            let info = m.info().map_err(|e| StoreError::Nats {
                op: "read an event",
                cause: e.to_string(),
            })?;
            (info.stream_sequence, info.pending)
        };
        if seq > last {
            break;
        }
        out.push((seq, m.message.payload.clone()));
        if pending == 0 || seq == last {
            break;
        }
    }
    Ok(out)
}

struct Page {
    events: Vec<(u64, Event)>,
    next: Option<i64>,
}

fn matches(q: &EventQuery, e: &Event) -> bool {
    let at = e.occurred_at.timestamp_millis();
    q.since.is_none_or(|s| at >= s)
        && q.until.is_none_or(|u| at < u)
        && (q.types.is_empty() || q.types.iter().any(|t| t == e.kind.name()))
}

fn decode(read: Vec<(u64, Bytes)>, q: &EventQuery) -> Result<Vec<(u64, Event)>> {
    let mut out = Vec::new();
    for (seq, body) in read {
        let e: Event = serde_json::from_slice(&body).map_err(corrupt("an event"))?;
        if matches(q, &e) {
            out.push((seq, e));
        }
    }
    Ok(out)
}

/// Where a batched direct get starts.
enum From {
    Seq(u64),
    Time(Time),
}

/// Most messages one batched direct get asks for.
const BATCH: usize = 1000;

/// Up to `batch` messages of `subject` from `from`, by a batched direct get
/// (JetStream 2.11+): one request, answered by any replica, no consumer made.
/// Returns (sequence, payload) in order and whether more match after them.
async fn direct_batch(
    shared: &Shared,
    subject: &str,
    from: &From,
    batch: usize,
) -> Result<(Vec<(u64, Bytes)>, bool)> {
    let client = shared.js.client();
    let inbox = client.new_inbox();
    let mut replies = client.subscribe(inbox.clone()).await.op("read events")?;
    let mut request = serde_json::json!({"next_by_subj": subject, "batch": batch});
    match from {
        From::Seq(seq) => request["seq"] = (*seq).into(),
        From::Time(t) => {
            request["start_time"] = t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true).into();
        }
    }
    client
        .publish_with_reply(
            format!("$JS.API.DIRECT.GET.{}", shared.names.stream),
            inbox,
            Bytes::from(request.to_string()),
        )
        .await
        .op("read events")?;
    let header = |m: &async_nats::Message, name: &str| -> Option<u64> {
        m.headers.as_ref()?.get(name)?.as_str().parse().ok()
    };
    let mut out = Vec::with_capacity(batch.min(BATCH));
    loop {
        let Ok(reply) = tokio::time::timeout(REQUEST_TIMEOUT, replies.next()).await else {
            return Err(StoreError::Nats {
                op: "read events",
                cause: "JetStream did not answer in time".into(),
            });
        };
        let Some(m) = reply else {
            return Err(StoreError::Nats {
                op: "read events",
                cause: "the connection closed".into(),
            });
        };
        match m.status.map(|s| s.as_u16()) {
            // End of batch: how many more match says whether to go on.
            Some(204) => {
                let more = header(&m, "Nats-Num-Pending").unwrap_or(0) > 0;
                return Ok((out, more));
            }
            Some(404) => return Ok((out, false)),
            Some(code) => {
                return Err(StoreError::Nats {
                    op: "read events",
                    cause: format!(
                        "JetStream answered {code} {}",
                        m.description.clone().unwrap_or_default()
                    ),
                });
            }
            None => {
                let seq = header(&m, "Nats-Sequence").ok_or_else(|| StoreError::Nats {
                    op: "read events",
                    cause: "a direct get answer without its sequence".into(),
                })?;
                out.push((seq, m.payload.clone()));
            }
        }
    }
}

/// One page of `subject`'s events, oldest first; the newest page with `latest`.
async fn page(shared: &Shared, subject: &str, q: &EventQuery) -> Result<Page> {
    let size = q.page_size.max(1);
    if q.latest {
        let Some((last, _)) = last_seq(&shared.events, subject).await? else {
            return Ok(Page {
                events: Vec::new(),
                next: None,
            });
        };
        // Read back from the end in growing steps until a page's worth matches
        // or the stream's start is reached.
        let mut span = (size as u64).saturating_mul(4);
        loop {
            let start = last.saturating_sub(span).max(1);
            let mut matched = Vec::new();
            let mut from = From::Seq(start);
            loop {
                let (read, more) = direct_batch(shared, subject, &from, BATCH).await?;
                let next = read.last().map(|(seq, _)| seq + 1);
                matched.extend(decode(read, q)?);
                // Only the newest `size` are kept.
                let keep = matched.len().saturating_sub(size);
                matched.drain(..keep);
                match next {
                    Some(seq) if more => from = From::Seq(seq),
                    _ => break,
                }
            }
            if matched.len() >= size || start == 1 {
                return Ok(Page {
                    events: matched,
                    next: None,
                });
            }
            span = span.saturating_mul(4);
        }
    }
    let mut from = match (q.after, q.since) {
        (Some(after), _) => From::Seq(after as u64 + 1),
        (None, Some(since)) => {
            From::Time(chrono::DateTime::from_timestamp_millis(since).unwrap_or_default())
        }
        (None, None) => From::Seq(1),
    };
    // Filters are applied as read: keep reading until a page and one more match.
    let mut events = Vec::new();
    loop {
        let (read, more) = direct_batch(shared, subject, &from, size + 1).await?;
        let next = read.last().map(|(seq, _)| seq + 1);
        events.extend(decode(read, q)?);
        match next {
            Some(seq) if more && events.len() <= size => from = From::Seq(seq),
            _ => break,
        }
    }
    let next = (events.len() > size).then(|| {
        events.truncate(size);
        events.last().map(|(seq, _)| *seq as i64)
    });
    Ok(Page {
        events,
        next: next.flatten(),
    })
}

#[cfg(test)]
pub mod server {
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};

    pub struct Server {
        pub url: String,
        child: Child,
        _dir: tempfile::TempDir,
    }

    pub fn binary() -> PathBuf {
        let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/nats-server");
        if venv.is_file() {
            return venv;
        }
        std::env::var_os("PATH")
            .and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|p| p.join("nats-server"))
                    .find(|p| p.is_file())
            })
            .expect("nats-server: run tests/run.sh, which installs it into .venv")
    }

    impl Server {
        pub fn start() -> Server {
            Server::start_with("")
        }

        /// With `config` as the server's configuration file (the flags for
        /// JetStream, the address and the store directory come on top).
        pub fn start_with(config: &str) -> Server {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("nats.conf");
            std::fs::write(&file, config).unwrap();
            // The server picks its port and writes it down: one picked here and
            // let go could be taken by another test's server before this one binds.
            let mut child = Command::new(binary())
                .arg("-c")
                .arg(&file)
                .args(["-js", "-a", "127.0.0.1", "-p", "-1", "--ports_file_dir"])
                .arg(dir.path())
                .arg("-sd")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start nats-server");
            // `<program>_<pid>.ports`, the only such file in its directory.
            let ports = || {
                std::fs::read_dir(dir.path())
                    .ok()?
                    .flatten()
                    .map(|e| e.path())
                    .find(|p| p.extension().is_some_and(|x| x == "ports"))
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let url = loop {
                let client = ports()
                    .and_then(|p| std::fs::read(p).ok())
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    .and_then(|p| p["nats"][0].as_str().map(str::to_string));
                if let Some(url) = client {
                    break url;
                }
                if std::time::Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("nats-server did not listen");
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            };
            Server {
                url,
                child,
                _dir: dir,
            }
        }

        pub fn config(&self) -> crate::store::nats::NatsConfig {
            crate::store::nats::NatsConfig {
                urls: vec![self.url.clone()],
                creds_file: None,
                tls: None,
                replicas: 1,
                lease_duration: std::time::Duration::from_secs(3),
            }
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::store::suite;

    /// Each place is a cluster of its own on one server.
    fn suite_on(server: &server::Server) -> impl Fn(&Path) -> Box<dyn Store> + '_ {
        move |dir: &Path| {
            let cluster = dir.file_name().unwrap().to_string_lossy().into_owned();
            Box::new(Nats::open(&server.config(), &cluster, 90).unwrap()) as Box<dyn Store>
        }
    }

    /// `hale serve` and the CLI open the store inside their own runtime: a NATS
    /// nobody answers on is an error that says so, not a panic as the client's
    /// runtime is dropped there.
    #[tokio::test(flavor = "multi_thread")]
    async fn an_unreachable_nats_is_an_error_inside_a_runtime() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cfg = NatsConfig {
            urls: vec![format!("nats://127.0.0.1:{port}")],
            creds_file: None,
            tls: None,
            replicas: 1,
            lease_duration: Duration::from_secs(20),
        };
        let err = Nats::open(&cfg, "c", 1)
            .err()
            .expect("nothing listens there");
        assert!(
            matches!(err, StoreError::Nats { op: "connect", .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains(&cfg.urls[0]),
            "names the server: {err}"
        );
    }

    /// Three copies asked of one server outside a cluster can never be kept:
    /// refused at once (`hale serve` does not wait 90 s for it), and said so.
    #[test]
    fn copies_a_lone_server_cannot_keep_are_refused_as_such() {
        let server = server::Server::start_with("");
        let mut cfg = server.config();
        cfg.replicas = 3;
        let err = Nats::open(&cfg, "c", 1).err().expect("one server keeps 1");
        assert!(
            matches!(
                err,
                StoreError::Nats {
                    op: REFUSED_REPLICAS,
                    ..
                }
            ),
            "{err}"
        );
    }

    /// Credentials a server refuses are said apart from a server not there: `hale
    /// serve` waits for the one, not the other.
    #[test]
    fn refused_credentials_are_not_an_unreachable_server() {
        let server = server::Server::start_with("authorization { token: s3cret }");
        let err = Nats::open(&server.config(), "c", 1)
            .err()
            .expect("no token given");
        assert_refused(&err);
    }

    /// A connection the server refused for good, which `hale serve` does not wait on.
    fn assert_refused(err: &StoreError) {
        assert!(
            matches!(
                err,
                StoreError::Nats {
                    op: REFUSED_CONNECT,
                    ..
                }
            ),
            "{err}"
        );
    }

    /// A server that speaks no TLS to a client that asks for it fails in the
    /// handshake, which no wait cures: refused at once, as credentials are.
    #[test]
    fn a_tls_handshake_that_fails_is_refused_at_once() {
        let server = server::Server::start();
        let none = NatsTls {
            ca_file: None,
            cert_file: None,
            key_file: None,
        };
        for tls in [None, Some(none)] {
            let mut cfg = server.config();
            cfg.urls = vec![cfg.urls[0].replacen("nats://", "tls://", 1)];
            cfg.tls = tls;
            let err = Nats::open(&cfg, "c", 1).err().expect("no TLS there");
            assert!(
                err.to_string().contains("the TLS handshake failed"),
                "{err}"
            );
            assert_refused(&err);
        }
    }

    /// Credentials written into a URL log in (the client sends none it finds in a
    /// URL), and the addresses it is given, which it logs, carry none.
    #[test]
    fn credentials_in_a_url_log_in_and_leave_the_addresses() {
        let server = server::Server::start_with(
            "authorization { users: [ { user: hale, password: \"p@ss:w/rd\" } ] }",
        );
        let mut cfg = server.config();
        let at = cfg.urls[0].replacen("nats://", "nats://hale:p%40ss%3Aw%2Frd@", 1);
        cfg.urls = vec![at.clone()];
        let (addrs, userinfo) = servers(&cfg.urls).unwrap();
        assert_eq!(
            userinfo,
            Some(("hale".to_string(), Some("p@ss:w/rd".to_string())))
        );
        let shown = format!("{addrs:?}");
        assert!(
            !shown.contains("40ss") && !shown.contains("hale"),
            "{shown}"
        );
        Nats::open(&cfg, "c", 1).expect("logged in with the URL's credentials");
        // One set for the cluster: another URL naming others is refused.
        cfg.urls = vec![
            at.clone(),
            server.url.replacen("nats://", "nats://other:x@", 1),
        ];
        assert_eq!(cfg.validate().unwrap_err().0, "urls[1]");
        cfg.urls = vec![at, server.url.clone()];
        assert_eq!(
            cfg.validate().unwrap_err().0,
            "urls[1]",
            "none where the first names some"
        );
    }

    /// A node record over the server's `max_payload` is written cut down to its
    /// conditions' most severe alerts, and the records beside it are written too:
    /// whole, it was refused, retried ahead of every later write, for ever.
    #[test]
    fn a_record_over_a_message_is_written_cut_down() {
        let server = server::Server::start_with("max_payload: 65536");
        let now = chrono::Utc::now();
        let text = "z".repeat(1000);
        let sources: serde_json::Map<String, serde_json::Value> = (0..200)
            .map(|i| {
                let severity = if i == 150 { "critical" } else { "warning" };
                let source = serde_json::json!({
                    "reason": "SmartWarning", "severity": severity,
                    "message": format!("{i} {text}"), "fault_class": "DISK",
                });
                (format!("{i:016x}"), source)
            })
            .collect();
        let big: Node = serde_json::from_value(serde_json::json!({
            "id": "n1",
            "conditions": {"disk_degraded": {
                "reason": "SmartWarning", "severity": "critical", "message": "m",
                "first_seen": now.to_rfc3339(), "last_seen": now.to_rfc3339(),
                "observations": 1, "sticky": false, "fault_class": "DISK",
                "sources": sources,
            }},
        }))
        .unwrap();
        assert!(crate::store::json(&big).len() > 200 * 1024);
        let mut fleet = Fleet::new(now);
        for node in [big, Node::new("n2")] {
            fleet.nodes.insert(node.id.clone(), Box::new(node));
        }
        let outcome = crate::core::Outcome {
            dirty: fleet.nodes.keys().cloned().collect(),
            ..crate::core::Outcome::default()
        };
        let mut store = Nats::open(&server.config(), "big", 90).unwrap();
        store
            .write(&super::super::Batch::of(&fleet, &outcome))
            .unwrap();

        let loaded = store.load(now).unwrap();
        assert!(loaded.nodes.contains_key("n2"));
        let cond = &loaded.nodes["n1"].conditions["disk_degraded"];
        assert!(
            (1..200).contains(&cond.sources.len()),
            "{}",
            cond.sources.len()
        );
        assert_eq!(
            cond.sources[format!("{:016x}", 150).as_str()].severity,
            crate::core::Severity::Critical
        );
        assert!(crate::store::json(&loaded.nodes["n1"]).len() <= 65536);
    }

    /// A user's credentials as `nsc` writes them (a syntactically whole JWT and
    /// a user seed), and one whose seed is cut short: the second is refused by
    /// `check-config` as `serve` would refuse it, naming the file, not the text.
    #[test]
    fn a_credentials_file_is_read_as_serve_reads_it() {
        let creds = |seed: &str| {
            format!(
                "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
            )
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hale.creds");
        std::fs::write(&file, creds(CREDS_SEED)).unwrap();
        check_creds(&file).unwrap();
        std::fs::write(&file, creds(&CREDS_SEED[..21])).unwrap();
        let e = check_creds(&file).unwrap_err();
        assert!(e.contains("is not a NATS credentials file"), "{e}");
        assert!(!e.contains(&CREDS_SEED[..21]), "{e}");
        let e = check_creds(&dir.path().join("absent")).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
    }

    /// A user seed (`S`eed of a `U`ser), made for these tests.
    const CREDS_SEED: &str = "SUAAAAICAMCAKBQHBAEQUCYMBUHA6EARCIJRIFIWC4MBSGQ3DQOR4H776Y";

    #[test]
    fn a_copys_mark_is_kept_until_cleared() {
        let server = server::Server::start();
        suite::a_copys_mark_is_kept_until_cleared(&suite_on(&server));
    }

    #[test]
    fn a_batch_round_trips_and_removal_keeps_events() {
        let server = server::Server::start();
        suite::a_batch_round_trips_and_removal_keeps_events(&suite_on(&server));
    }

    #[test]
    fn a_large_fleet_comes_back_whole() {
        let server = server::Server::start();
        suite::a_large_fleet_comes_back_whole(&suite_on(&server));
    }

    #[test]
    fn pages_cover_every_event_exactly_once() {
        let server = server::Server::start();
        suite::pages_cover_every_event_exactly_once(&suite_on(&server));
    }

    #[test]
    fn the_policy_ledger_outlives_its_writer() {
        let server = server::Server::start();
        suite::the_policy_ledger_outlives_its_writer(&suite_on(&server));
    }

    fn decommissioned(node: &str, at: Time, message: &str) -> Event {
        Event {
            node_id: node.into(),
            kind: crate::core::EventKind::NodeDecommissioned {
                by: "operator".into(),
            },
            occurred_at: at,
            message: message.into(),
        }
    }

    fn batch_of<'e>(events: &'e [Event], ledger: Option<&str>) -> Batch<'e> {
        Batch {
            events,
            trust: serde_json::to_string(&Fleet::new(chrono::Utc::now()).trust).unwrap(),
            ledger: ledger.map(str::to_string),
            ..Batch::default()
        }
    }

    /// A store in which a write stopped between its events and its mark: after a
    /// first event (n1's "first"), "unfinished" events of n1 to n4 published as
    /// a write publishes them, under the ids the next write draws; n3's record
    /// was written before the process stopped, and n4's removed; no mark.
    fn cut_short(server: &server::Server, now: Time) -> Nats {
        let mut store = Nats::open(&server.config(), "c", 90).unwrap();
        store.load(now).unwrap();
        store
            .write(&batch_of(&[decommissioned("n1", now, "first")], None))
            .unwrap();
        let anchor = next_anchor(&store.mark.lock().unwrap());
        let shared = store.shared.clone();
        store
            .run(async move {
                // n3's record was written before the process stopped, and n4's
                // removed.
                let record = Bytes::from(serde_json::to_vec(&Node::new("n3")).unwrap());
                for (node, value) in [("n3", Some(record)), ("n4", None)] {
                    let k = format!("node.{}", key(node));
                    publish_kv(&shared.js, &shared.state, &k, value, None, Some(&anchor))
                        .await
                        .unwrap()
                        .await
                        .unwrap();
                }
                for node in ["n1", "n2", "n3", "n4"] {
                    let e = decommissioned(node, now, "unfinished");
                    let mut headers = HeaderMap::new();
                    headers.insert(header::NATS_MESSAGE_ID, message_id(&anchor, &e).as_str());
                    let subject = format!("{}.{}", shared.names.subjects, key(node));
                    let body = Bytes::from(crate::store::json(&e));
                    shared
                        .js
                        .publish_with_headers(subject, headers, body)
                        .await
                        .unwrap()
                        .await
                        .unwrap();
                }
            })
            .unwrap();
        store
    }

    fn said(store: &Nats) -> Vec<String> {
        let history = store.history(0).unwrap();
        history.into_iter().map(|e| e.message).collect()
    }

    /// A write whose process stopped between its events and its mark left events
    /// the state never took: the next leader removes them, and the step taken
    /// again records its own — not dropped as repeats of the removed ones' ids.
    /// A node whose record the write did put keeps its events: its state has them.
    #[test]
    fn an_unfinished_writes_events_are_removed_by_the_next_leader() {
        let server = server::Server::start();
        let now = chrono::Utc::now();
        let store = cut_short(&server, now);
        assert_eq!(
            said(&store),
            [
                "first",
                "unfinished",
                "unfinished",
                "unfinished",
                "unfinished"
            ]
        );
        let mut next = Nats::open(&server.config(), "c", 90).unwrap();
        next.load(now).unwrap();
        assert_eq!(next.void_unfinished().unwrap(), 2);
        assert_eq!(next.void_unfinished().unwrap(), 0, "once");
        assert_eq!(said(&next), ["first", "unfinished", "unfinished"]);
        let history = next.history(0).unwrap();
        assert_eq!(
            [history[1].node_id.as_str(), history[2].node_id.as_str()],
            ["n3", "n4"],
            "the nodes whose records were written or removed"
        );
        // A leader after this one, before it wrote anything: what it kept stays.
        let mut third = Nats::open(&server.config(), "c", 90).unwrap();
        third.load(now).unwrap();
        assert_eq!(third.void_unfinished().unwrap(), 0);
        assert_eq!(said(&third), ["first", "unfinished", "unfinished"]);
        let again = [
            decommissioned("n1", now, "again"),
            decommissioned("n2", now, "again"),
        ];
        let mut batch = batch_of(&again, None);
        batch.removed = vec!["n2".into()];
        next.write(&batch).unwrap();
        assert_eq!(
            said(&next),
            ["first", "unfinished", "unfinished", "again", "again"]
        );
        // A write's remove says which write it was, as its puts do.
        let shared = next.shared.clone();
        let entries = next
            .run(async move { entries(&shared.state).await })
            .unwrap()
            .unwrap();
        let removed = entries
            .iter()
            .find(|e| e.key == format!("node.{}", key("n2")))
            .unwrap();
        assert!(removed.deleted);
        let mark = next.mark.lock().unwrap().clone();
        let anchor = mark.split(' ').next().unwrap();
        assert_eq!(removed.write.as_deref(), Some(anchor));
        // The mark says how far the writes went: nothing past it to remove.
        let mut after = Nats::open(&server.config(), "c", 90).unwrap();
        after.load(now).unwrap();
        assert_eq!(after.void_unfinished().unwrap(), 0);
    }

    /// A client error is said once, with what its words leave out: a cause the
    /// client repeats after itself, a stream no server answered for, a placement
    /// past the servers up.
    #[test]
    fn client_errors_are_said_once_and_explained() {
        let peers = "jetstream error: no suitable peers for placement (code 400, error code 10005)";
        let placement = " (`replicas` asks for more copies than the cluster has JetStream servers up: at most the servers)";
        let stream = "failed getting entry: no stream found for given subject";
        let table: &[(String, String)] = &[
            (format!("{peers}: {peers}"), format!("{peers}{placement}")),
            (peers.to_string(), format!("{peers}{placement}")),
            (
                stream.to_string(),
                format!(
                    "{stream} (no JetStream server answered for the stream: it may be electing a leader, out of space, or gone)"
                ),
            ),
            ("timed out: timed out".into(), "timed out".into()),
            ("a: b".into(), "a: b".into()),
            ("é: é".into(), "é".into()),
        ];
        for (text, said) in table {
            assert_eq!(&explained(text.clone()), said);
        }
    }

    /// A removal cut short — its range marked, its deletes refused (the stream
    /// without a leader, NATS full or gone) — is taken up again by the next try,
    /// of this leader or another: the same events go, those kept stay, and once
    /// it is done a leader after it removes nothing.
    #[test]
    fn a_removal_cut_short_is_taken_up_again() {
        let server = server::Server::start();
        let now = chrono::Utc::now();
        let store = cut_short(&server, now);
        let mark = store.mark.lock().unwrap().clone();
        let last = store.history(0).unwrap().len() as u64;
        store.put_mark(format!("{mark}{VOID}{last}")).unwrap();
        // n1's unfinished event (the second message) removed before it stopped.
        let shared = store.shared.clone();
        let deleted = store
            .run(async move { shared.events.delete_message(2).await.unwrap() })
            .unwrap();
        assert!(deleted);
        assert_eq!(said(&store).len(), 4, "begun: one removed");

        let mut next = Nats::open(&server.config(), "c", 90).unwrap();
        next.load(now).unwrap();
        assert_eq!(next.void_unfinished().unwrap(), 1, "the rest: n2's");
        assert_eq!(said(&next), ["first", "unfinished", "unfinished"]);
        let done = next.mark.lock().unwrap().clone();
        assert_eq!(done, format!("{mark} voided {last}"));
        assert_eq!(next.void_unfinished().unwrap(), 0, "once");
        let mut third = Nats::open(&server.config(), "c", 90).unwrap();
        third.load(now).unwrap();
        assert_eq!(third.void_unfinished().unwrap(), 0);
        assert_eq!(said(&third), ["first", "unfinished", "unfinished"]);
    }

    /// A record the unfinished write reached, read by the next leader's load
    /// from a copy behind (a server just back, catching up), is read again from
    /// the bucket's leader before its node's events go: they stay.
    #[test]
    fn a_record_the_load_missed_keeps_its_events() {
        let server = server::Server::start();
        let now = chrono::Utc::now();
        let store = cut_short(&server, now);
        let anchor = next_anchor(&store.mark.lock().unwrap());
        let mut next = Nats::open(&server.config(), "c", 90).unwrap();
        next.load(now).unwrap();
        // n2's record, by the unfinished write, lands after the load read the bucket.
        let shared = next.shared.clone();
        next.run(async move {
            let record = Bytes::from(serde_json::to_vec(&Node::new("n2")).unwrap());
            let k = format!("node.{}", key("n2"));
            publish_kv(
                &shared.js,
                &shared.state,
                &k,
                Some(record),
                None,
                Some(&anchor),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        })
        .unwrap();
        assert_eq!(next.void_unfinished().unwrap(), 1, "n1's alone");
        let history = next.history(0).unwrap();
        let nodes: Vec<&str> = history.iter().map(|e| e.node_id.as_str()).collect();
        assert_eq!(nodes, ["n1", "n2", "n3", "n4"]);
    }

    /// With every server gone a write fails, saying so, once the client has found
    /// none for a reconnection's grace: waiting out each publish's timeout held the
    /// step behind it, and with it every read.
    #[test]
    fn a_write_with_no_server_left_fails_as_not_connected() {
        let server = server::Server::start();
        let now = chrono::Utc::now();
        let mut store = Nats::open(&server.config(), "c", 90).unwrap();
        store.load(now).unwrap();
        let events = [decommissioned("n1", now, "gone")];
        store.write(&batch_of(&events, None)).unwrap();
        drop(server);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while store.connected("probe").is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "the client never saw the server go"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The first waits a reconnection's grace; the next, past it, not again.
        for _ in 0..2 {
            let err = store.write(&batch_of(&events, None)).unwrap_err();
            assert!(
                err.to_string().contains("not connected to any NATS server"),
                "{err}"
            );
        }
    }

    /// The consumers of endpoints no longer configured are deleted, the others
    /// kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn feeds_of_endpoints_gone_are_forgotten() {
        use crate::store::Outbox as _;
        let server = server::Server::start();
        let now = chrono::Utc::now();
        let store = Nats::open(&server.config(), "c", 90).unwrap();
        let outbox = store.outbox();
        for key in ["a", "b"] {
            outbox.feed(key, now, None, 100).await.unwrap();
        }
        let keep = ["a".to_string()];
        assert_eq!(outbox.retain(&keep).await.unwrap(), 1);
        assert_eq!(outbox.retain(&keep).await.unwrap(), 0, "b is gone, a kept");
        let mut names = outbox.events.consumer_names();
        let mut left = Vec::new();
        while let Some(name) = names.next().await {
            left.push(name.unwrap());
        }
        assert_eq!(left, [consumer_name("a")]);
    }

    /// A webhook feed hands events out in order, each as soon as it is there — not
    /// once the wait for more ran out — and the next once it is acknowledged,
    /// saying how many wait behind it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_webhook_feed_hands_out_each_event_at_once() {
        use crate::store::Outbox as _;
        let server = server::Server::start();
        let now = chrono::Utc::now();
        let mut store = Nats::open(&server.config(), "c", 90).unwrap();
        store.load(now).unwrap();
        let events: Vec<Event> = (0..3)
            .map(|i| decommissioned(&format!("n{i}"), now, "gone"))
            .collect();
        store.write(&batch_of(&events, None)).unwrap();
        let outbox = store.outbox();
        let since = now - chrono::TimeDelta::minutes(1);
        let mut feed = outbox.feed("a", since, None, 100).await.unwrap();
        let mut delivered = Vec::new();
        let mut waiting = Vec::new();
        while delivered.len() < 3 {
            // Were the feed to wait out its wait, this would give up first.
            let fetched = tokio::time::timeout(
                Duration::from_secs(60),
                feed.next(Duration::from_secs(3600)),
            )
            .await
            .expect("handed out at once")
            .unwrap();
            waiting.push(fetched.waiting);
            for p in &fetched.events {
                delivered.push(p.event().unwrap().event.node_id.clone());
                p.ack().await.unwrap();
            }
        }
        assert_eq!(delivered, ["n0", "n1", "n2"]);
        assert_eq!(waiting, [2, 1, 0]);
    }

    /// A leader that published a step's events and died before its state was
    /// written: the next one, loading the state as it stood, takes the step again
    /// and its event is dropped as the same message; a later event is not.
    #[test]
    fn a_step_taken_again_after_a_crash_is_recorded_once() {
        let server = server::Server::start();
        let now = chrono::Utc::now();
        let mut first = Nats::open(&server.config(), "c", 90).unwrap();
        first.load(now).unwrap();
        let mut second = Nats::open(&server.config(), "c", 90).unwrap();
        second.load(now).unwrap();
        let a = first
            .write(&batch_of(&[decommissioned("n1", now, "first")], None))
            .unwrap();
        let later = now + chrono::TimeDelta::seconds(2);
        let b = second
            .write(&batch_of(&[decommissioned("n1", later, "again")], None))
            .unwrap();
        assert_eq!(a[0], b[0], "the same record, by the same id");
        let c = second
            .write(&batch_of(&[decommissioned("n1", later, "next")], None))
            .unwrap();
        assert_ne!(c[0], a[0]);
        let all = EventQuery {
            page_size: 10,
            ..EventQuery::default()
        };
        let page = first.events("n1", &all).unwrap();
        let messages: Vec<&str> = page
            .events
            .iter()
            .map(|e| e.event.message.as_str())
            .collect();
        assert_eq!(messages, ["first", "next"]);
    }

    /// A large write's events as atomic batches, as on a stream of three copies,
    /// here on one server's single copy.
    fn batched(mut store: Nats) -> Nats {
        let shared = Arc::get_mut(&mut store.shared).expect("just opened");
        assert!(shared.events.cached_info().config.allow_atomic_publish);
        shared.atomic = true;
        store
    }

    /// `n` events over three nodes, in order per node.
    fn many(n: usize, now: Time, tag: &str) -> Vec<Event> {
        (0..n)
            .map(|i| decommissioned(&format!("n{}", i % 3), now, &format!("{tag} {i}")))
            .collect()
    }

    /// A write of 1,500 events goes as two atomic batches (1,000 and 500), one of
    /// 100 event by event: every event stored once, each id the one its page
    /// names, each node's in order.
    #[test]
    fn a_large_write_is_stored_whole_as_atomic_batches() {
        let server = server::Server::start();
        let now = chrono::Utc::now();
        let mut store = batched(Nats::open(&server.config(), "c", 90).unwrap());
        store.load(now).unwrap();
        let events = many(1500, now, "e");
        let ids = store.write(&batch_of(&events, None)).unwrap();
        assert_eq!(ids.len(), 1500);
        let again = store.write(&batch_of(&many(100, now, "f"), None)).unwrap();
        assert_eq!(again.len(), 100);
        for node in 0..3 {
            let page = store
                .events(
                    &format!("n{node}"),
                    &EventQuery {
                        page_size: 1000,
                        ..EventQuery::default()
                    },
                )
                .unwrap();
            let got: Vec<(&str, &str)> = page
                .events
                .iter()
                .map(|e| (e.id.as_str(), e.event.message.as_str()))
                .collect();
            let written: Vec<(&str, String)> = ids
                .iter()
                .zip(&events)
                .chain(again.iter().zip(&many(100, now, "f")))
                .filter(|(_, e)| e.node_id == format!("n{node}"))
                .map(|(id, e)| (id.as_str(), e.message.clone()))
                .collect();
            let written: Vec<(&str, &str)> =
                written.iter().map(|(id, m)| (*id, m.as_str())).collect();
            assert_eq!(got, written, "node n{node}");
        }
        // JetStream keeps a batched message's batch id: the large write went as
        // batches, the small one event by event.
        let batch = |id: &str| {
            let shared = store.shared.clone();
            let seq: u64 = id.rsplit('-').next().unwrap().parse().unwrap();
            let stored = store
                .run(async move { shared.events.direct_get(seq).await })
                .unwrap()
                .unwrap();
            stored
                .headers
                .get("Nats-Batch-Id")
                .map(|v| v.as_str().to_string())
        };
        let (first, last) = (batch(&ids[0]), batch(&ids[1499]));
        assert!(
            first.is_some() && last.is_some() && first != last,
            "{first:?} {last:?}"
        );
        assert_eq!(batch(&again[0]), None);
    }

    /// A large write taken again after its batches were stored (its commit's
    /// acknowledgement lost, a new leader): JetStream refuses a batch holding ids
    /// it has seen, and the events, sent one by one, are each recorded once.
    #[test]
    fn a_large_write_taken_again_is_recorded_once() {
        let server = server::Server::start();
        let now = chrono::Utc::now();
        let mut first = batched(Nats::open(&server.config(), "c", 90).unwrap());
        first.load(now).unwrap();
        let mut second = batched(Nats::open(&server.config(), "c", 90).unwrap());
        second.load(now).unwrap();
        let a = first.write(&batch_of(&many(1200, now, "e"), None)).unwrap();
        let b = second
            .write(&batch_of(&many(1200, now, "e"), None))
            .unwrap();
        assert_eq!(a, b, "the same records, by the same ids");
        let info = server.config();
        let reader = Nats::open(&info, "c", 90).unwrap();
        let page = reader
            .events(
                "n0",
                &EventQuery {
                    page_size: 1000,
                    ..EventQuery::default()
                },
            )
            .unwrap();
        assert_eq!(page.events.len(), 400);
    }

    /// Earlier versions kept a mark per node: the first load removes them.
    #[test]
    fn marks_kept_per_node_are_removed() {
        let server = server::Server::start();
        let now = chrono::Utc::now();
        let store = Nats::open(&server.config(), "c", 90).unwrap();
        let shared = store.shared.clone();
        let count = move |shared: Arc<Shared>| async move {
            let info = shared.state.stream.get_info().await.unwrap();
            info.state.messages
        };
        let before = store.run(count(shared.clone())).unwrap();
        store
            .run({
                let shared = shared.clone();
                async move {
                    for node in ["n1", "n2"] {
                        let k = format!("mark.{}", key(node));
                        shared.state.put(k, "0123".into()).await.unwrap();
                    }
                }
            })
            .unwrap();
        assert_eq!(store.run(count(shared.clone())).unwrap(), before + 2);
        store.load(now).unwrap();
        assert_eq!(store.run(count(shared)).unwrap(), before);
    }

    #[test]
    fn a_rival_writer_of_the_ledger_is_refused() {
        let server = server::Server::start();
        let now = chrono::Utc::now();
        let mut a = Nats::open(&server.config(), "c", 90).unwrap();
        a.load(now).unwrap();
        let mut b = Nats::open(&server.config(), "c", 90).unwrap();
        b.load(now).unwrap();
        let ledger = serde_json::to_string(&Fleet::new(now).ledger).unwrap();
        a.write(&batch_of(&[], Some(&ledger))).unwrap();
        a.write(&batch_of(&[], Some(&ledger))).unwrap();
        let refused = b.write(&batch_of(&[], Some(&ledger))).unwrap_err();
        assert!(matches!(refused, StoreError::Conflict { .. }), "{refused}");
        // Having loaded what the other wrote, it may write.
        b.load(now).unwrap();
        b.write(&batch_of(&[], Some(&ledger))).unwrap();
        let refused = a.write(&batch_of(&[], Some(&ledger))).unwrap_err();
        assert!(matches!(refused, StoreError::Conflict { .. }), "{refused}");
    }

    #[test]
    fn retention_is_the_streams_max_age() {
        let server = server::Server::start();
        let store = Nats::open(&server.config(), "c", 7).unwrap();
        let shared = store.shared.clone();
        let info = store
            .run(async move { shared.events.get_info().await.unwrap() })
            .unwrap();
        assert_eq!(info.config.max_age, Duration::from_secs(7 * 86_400));
        assert_eq!(info.config.subjects, ["hale.events.c.>"]);
    }

    /// Writes past the account's storage limit count as a full store, as the
    /// README promises (`reason="full"`), not as a NATS failure.
    #[test]
    fn the_accounts_storage_limit_is_a_full_store() {
        let server = server::Server::start_with(
            "accounts { A: { jetstream: { max_file: 1MB, max_mem: 1MB }, users: [{ user: a, password: a }] } }\nno_auth_user: a\n",
        );
        let now = chrono::Utc::now();
        let mut store = Nats::open(&server.config(), "c", 90).unwrap();
        store.load(now).unwrap();
        let text = "x".repeat(4000);
        let full = (0..100).find_map(|i| {
            let events: Vec<Event> = (0..50)
                .map(|j| decommissioned(&format!("n{i}-{j}"), now, &text))
                .collect();
            store.write(&batch_of(&events, None)).err()
        });
        assert!(matches!(full, Some(StoreError::Full { .. })), "{full:?}");
    }

    /// A second replica's start with other settings changes none of the store's:
    /// its lease is the one the store keeps, and its retention becomes the
    /// store's only when it leads and settles it.
    #[test]
    fn a_replicas_start_changes_no_setting_under_the_others() {
        let server = server::Server::start();
        let first = Nats::open(&server.config(), "c", 90).unwrap();
        let max_age = |store: &Nats| {
            let shared = store.shared.clone();
            store
                .run(async move { shared.events.get_info().await.unwrap().config.max_age })
                .unwrap()
        };
        let other = NatsConfig {
            lease_duration: Duration::from_secs(9),
            ..server.config()
        };
        let mut second = Nats::open(&other, "c", 30).unwrap();
        assert_eq!(max_age(&first), Duration::from_secs(90 * 86_400));
        assert_eq!(second.lease().duration, first.lease().duration, "one lease");
        let lease_age = {
            let shared = second.shared.clone();
            second
                .run(async move { shared.lease.stream.get_info().await.unwrap().config.max_age })
                .unwrap()
        };
        assert_eq!(lease_age, server.config().lease_duration, "the bucket kept");
        let changed = second.settle().unwrap();
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert!(changed[0].contains("max age 90d -> 30d"), "{changed:?}");
        assert_eq!(max_age(&first), Duration::from_secs(30 * 86_400));
        assert!(second.settle().unwrap().is_empty(), "settled once");
    }

    #[test]
    fn keys_are_subject_safe_and_reversible() {
        for id in [
            "n1",
            "rack1/n:3",
            "n1.example.com",
            "a b*>",
            "ünï",
            "x=41",
            "_-",
        ] {
            let k = key(id);
            assert!(
                k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_=".contains(&b)),
                "{k}"
            );
            assert_eq!(unkey(&k).as_deref(), Some(id));
        }
        assert_ne!(key("a.b"), key("a=2Eb"));
        assert!(
            name("prod.eu/1")
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
        );
    }

    #[test]
    fn a_step_taken_again_draws_the_same_message_id() {
        let now = chrono::Utc::now();
        let e = |kind| Event {
            node_id: "n1".into(),
            kind,
            occurred_at: now,
            message: String::new(),
        };
        let a = e(crate::core::EventKind::NodeDecommissioned { by: "x".into() });
        let mut later = a.clone();
        later.occurred_at = now + chrono::TimeDelta::seconds(3);
        later.message = "said differently".into();
        assert_eq!(message_id("m0", &a), message_id("m0", &later));
        assert_ne!(message_id("m0", &a), message_id("m1", &a));
        assert_ne!(
            message_id("", &a),
            message_id(
                "",
                &Event {
                    node_id: "n2".into(),
                    ..a.clone()
                }
            )
        );
    }
}
