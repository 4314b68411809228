//! Configuration: the YAML file of DESIGN §15, its defaults (all in this file) and
//! `validate()`. `hale serve` and `hale check-config` both go through [`Config::load`],
//! so a file that passes the check is a file the service accepts.

mod federation;
mod remediation;

pub use federation::{FederationConfig, Member, MemberConfig, UiConfig};
pub use remediation::{AlertMatch, Blocking, FencingConfig, RemediationConfig};

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::core::settings::{
    CoreSettings, Identity, Mode, Pool, Settings, Source, de_duration, de_opt_duration, de_present,
};
use crate::core::{BLIND_CONDITIONS, EVENT_TYPES, Listed};

/// A configuration error that names the file, the line (when known) and the key.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigError {
    pub file: String,
    pub line: Option<u64>,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        // `-`: no key to name (the file itself cannot be read, or is not a mapping).
        if self.key != "-" {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The most events a webhook endpoint's queue may hold (`queueSize`).
const MAX_QUEUE_SIZE: usize = 10_000_000;

/// The most YAML nodes (scalars, sequences, mappings) a configuration may hold.
const MAX_YAML_NODES: usize = 10_000_000;

/// The whole configuration file. Every key is optional; omitted keys take the defaults
/// of DESIGN §5 and §15.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Config {
    /// Name of the cluster this hale instance serves; carried on every node and metric.
    pub cluster: String,
    /// Address the HTTP API, webhook receiver and `/metrics` listen on.
    pub listen: String,
    /// File holding the bearer token required by mutating endpoints and the webhook
    /// receiver. Without it those endpoints are open (fine on loopback, not beyond);
    /// written empty it is refused, never read as no token.
    #[serde(deserialize_with = "de_present")]
    pub api_token_file: Option<PathBuf>,
    /// Where alerts come from.
    pub alertmanager: AlertmanagerConfig,
    /// Which alert labels name the node an alert is about.
    pub node_identity: NodeIdentity,
    /// Cluster-wide health and policy settings (DESIGN §5).
    pub node_health: NodeHealthOverrides,
    /// Pools select nodes by label; their `nodeHealth` replaces the cluster's key by key.
    pub pools: Vec<PoolConfig>,
    /// Where node state and the event history are kept.
    pub store: StoreConfig,
    /// Endpoints that receive node events as signed CloudEvents.
    pub node_event_webhooks: Vec<WebhookConfig>,
    /// The orchestrator hale acts through: `none` (observe and record) or `kubernetes`.
    pub orchestrator: OrchestratorConfig,
    /// Nodes known before they report (bare metal without an orchestrator).
    pub inventory: Vec<InventoryNode>,
    /// What every node's BMC shares (DESIGN §8).
    pub bmc: crate::bmc::config::BmcConfig,
    /// The reboot flow (DESIGN §8).
    pub remediation: RemediationConfig,
    /// Fencing silent nodes; off without this section (written empty it is
    /// refused: `fencing: {}` is on with the defaults).
    #[serde(deserialize_with = "de_present")]
    pub fencing: Option<FencingConfig>,
    /// The web UI at `/`.
    pub ui: UiConfig,
    /// Other hales whose clusters this one shows beside its own.
    pub federation: FederationConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            cluster: "default".into(),
            listen: "127.0.0.1:9470".into(),
            api_token_file: None,
            alertmanager: AlertmanagerConfig::default(),
            node_identity: NodeIdentity::default(),
            node_health: NodeHealthOverrides::default(),
            pools: Vec::new(),
            store: StoreConfig::default(),
            node_event_webhooks: Vec::new(),
            orchestrator: OrchestratorConfig::default(),
            inventory: Vec::new(),
            bmc: crate::bmc::config::BmcConfig::default(),
            remediation: RemediationConfig::default(),
            fencing: None,
            ui: UiConfig::default(),
            federation: FederationConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct AlertmanagerConfig {
    /// Base URL of Alertmanager (its v2 API is read under `/api/v2`).
    pub url: String,
    /// The receiver whose alerts hale reads; alerts routed elsewhere are ignored.
    pub receiver: String,
    /// How often the full picture is polled. `0` turns polling off (webhook only).
    #[serde(deserialize_with = "de_duration")]
    pub poll_interval: Duration,
    /// Whether a poll counts as trusted only when it contains the watchdog alert.
    pub require_watchdog: bool,
    /// How long without trusted input before every node is marked `telemetry_stale`.
    /// Defaults to three poll intervals (90 s when polling is off).
    #[serde(deserialize_with = "de_opt_duration")]
    pub stale_after: Option<Duration>,
    /// How long one poll may take to arrive whole (500,000 alerts take a 2-core
    /// Alertmanager about 20 s to serve). Stretched to three times the last answer's
    /// time when that is longer, so a growing fleet is not cut off at it.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Largest webhook body accepted, in bytes; larger bodies get 413.
    pub max_webhook_bytes: usize,
    /// Largest poll answer read, in bytes: one past it fails the poll
    /// (`too_large`), so an answer without end costs that much memory at most.
    pub max_answer_bytes: usize,
    /// After Alertmanager restarts (it keeps no alerts) or the watchdog comes back
    /// from a gap (Prometheus restarted: its `for:` alerts return only once their
    /// `for` has elapsed again), an alert's absence ends nothing for this long.
    /// Longer than the longest `for:` of the alerts routed to hale.
    #[serde(deserialize_with = "de_duration")]
    pub hold_after_restart: Duration,
    /// An https Alertmanager's certificate is checked against these CAs (PEM)
    /// alone, not the system's.
    #[serde(deserialize_with = "de_present")]
    pub ca_file: Option<PathBuf>,
    /// Alertmanager's own `basic_auth_users` (its `--web.config.file`).
    #[serde(deserialize_with = "de_present")]
    pub basic_auth: Option<BasicAuth>,
    /// A bearer token, for a proxy in front of Alertmanager (kube-rbac-proxy,
    /// oauth2-proxy). Read at every request, as a projected token rotates.
    #[serde(deserialize_with = "de_present")]
    pub bearer_token_file: Option<PathBuf>,
}

/// A user and the file holding its password, read at every request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BasicAuth {
    pub username: String,
    pub password_file: PathBuf,
}

impl Default for AlertmanagerConfig {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:9093".into(),
            receiver: "hale".into(),
            poll_interval: Duration::from_secs(30),
            require_watchdog: true,
            stale_after: None,
            timeout: Duration::from_secs(60),
            max_webhook_bytes: 4 << 20,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            hold_after_restart: DEFAULT_HOLD_AFTER_RESTART,
            ca_file: None,
            basic_auth: None,
            bearer_token_file: None,
        }
    }
}

/// Nearly three times the answer for 100,000 nodes and 500,000 alerts (370 MiB).
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 1 << 30;

/// Longer than the longest `for:` of the alerts shipped in `alerts/` (15m).
pub const DEFAULT_HOLD_AFTER_RESTART: Duration = Duration::from_secs(20 * 60);

impl AlertmanagerConfig {
    /// The effective `staleAfter`.
    pub fn stale_after(&self) -> Duration {
        self.stale_after.unwrap_or(if self.poll_interval.is_zero() {
            Duration::from_secs(90)
        } else {
            self.poll_interval * 3
        })
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct NodeIdentity {
    /// Labels tried in order; the first present names the node.
    pub labels: Vec<String>,
    /// Strip a trailing `:port` so exporters of one host meet on one node.
    pub strip_port: bool,
    /// A node known only from alerts (neither in `inventory` nor the orchestrator's)
    /// that no alert has named for this long is retired; its history stays.
    #[serde(deserialize_with = "de_duration")]
    pub forget_after: Duration,
    /// Nodes alerts may bring in at most; beyond it their alerts are refused and
    /// counted (`hale_nodes_refused_total`). Inventory and orchestrator nodes are
    /// never refused.
    pub max_nodes: usize,
    /// Whether an alert naming a node nobody listed creates it. Default: yes with
    /// `orchestrator: none`; with an orchestrator its nodes are the fleet, and such
    /// alerts are counted as unmatched.
    pub create_from_alerts: Option<bool>,
}

impl Default for NodeIdentity {
    fn default() -> Self {
        Self {
            labels: vec!["node".into(), "instance".into()],
            strip_port: true,
            forget_after: Duration::from_secs(7 * 86_400),
            max_nodes: 100_000,
            create_from_alerts: None,
        }
    }
}

/// `nodeHealth` as written in the file: every key optional, so a pool can override
/// just the keys it names.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeHealthOverrides {
    /// Consecutive missed reports before a node is recorded as no longer reporting.
    #[serde(default, deserialize_with = "de_present")]
    pub heartbeat_miss_threshold: Option<u32>,
    /// Reporting interval assumed when a heartbeat alert carries no `hale_report_interval`.
    #[serde(default, deserialize_with = "de_present")]
    pub report_interval_seconds: Option<u64>,
    /// `observe | cordon | drain | replace`.
    #[serde(default, deserialize_with = "de_present")]
    pub mode: Option<Mode>,
    /// Cordon below this score.
    #[serde(default, deserialize_with = "de_present")]
    pub cordon_below: Option<u32>,
    /// Drain (passively) and gate scheduling below this score.
    #[serde(default, deserialize_with = "de_present")]
    pub drain_below: Option<u32>,
    /// A scored node at or below this is Degraded.
    #[serde(default, deserialize_with = "de_present")]
    pub degraded_at_or_below: Option<u32>,
    /// Guardrail: never take more than this share of a pool out of service.
    #[serde(default, deserialize_with = "de_present")]
    pub max_unavailable_percent: Option<u32>,
    /// Guardrail: leave a node alone this long after a manual uncordon.
    #[serde(default, deserialize_with = "de_present")]
    pub cordon_suppression_minutes: Option<u64>,
    /// Guardrail: replacements per pool in a rolling hour.
    #[serde(default, deserialize_with = "de_present")]
    pub max_replacements_per_hour: Option<u32>,
    /// Fault classes that evict work regardless of mode.
    #[serde(default, deserialize_with = "de_present")]
    pub evict_on_fault_classes: Option<Vec<String>>,
    /// A workload moved more than this many times is failed instead.
    #[serde(default, deserialize_with = "de_present")]
    pub max_eviction_restarts: Option<u32>,
    /// Points per attributed job failure, before decay.
    #[serde(default, deserialize_with = "de_present")]
    pub failure_tally_penalty: Option<f64>,
    /// Half-life of the failure deduction, from the most recent failure.
    #[serde(default, deserialize_with = "de_present")]
    pub failure_tally_half_life_hours: Option<f64>,
    /// Points by reason; merged over the built-in table of DESIGN §4.
    #[serde(default, deserialize_with = "de_present")]
    pub penalties: Option<BTreeMap<String, u32>>,
    /// Points for reasons missing from the table, by severity.
    #[serde(default, deserialize_with = "de_present")]
    pub default_penalty: Option<DefaultPenaltyOverrides>,
}

/// `defaultPenalty` as written: each severity optional, so a pool (or the cluster,
/// over the built-in table) changes only those it names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultPenaltyOverrides {
    #[serde(default, deserialize_with = "de_present")]
    pub info: Option<u32>,
    #[serde(default, deserialize_with = "de_present")]
    pub warning: Option<u32>,
    #[serde(default, deserialize_with = "de_present")]
    pub critical: Option<u32>,
}

/// These settings with `overrides` applied key by key, under a new name.
fn overridden(base: &Settings, name: &str, o: &NodeHealthOverrides) -> Settings {
    let mut s = base.clone();
    s.name = name.to_string();
    if let Some(v) = o.heartbeat_miss_threshold {
        s.heartbeat_miss_threshold = v;
    }
    if let Some(v) = o.report_interval_seconds {
        s.report_interval = Duration::from_secs(v);
    }
    if let Some(v) = o.mode {
        s.mode = v;
    }
    if let Some(v) = o.cordon_below {
        s.cordon_below = v;
    }
    if let Some(v) = o.drain_below {
        s.drain_below = v;
    }
    if let Some(v) = o.degraded_at_or_below {
        s.degraded_at_or_below = v;
    }
    if let Some(v) = o.max_unavailable_percent {
        s.max_unavailable_percent = v;
    }
    if let Some(v) = o.cordon_suppression_minutes {
        s.cordon_suppression = Duration::from_secs(v * 60);
    }
    if let Some(v) = o.max_replacements_per_hour {
        s.max_replacements_per_hour = v;
    }
    if let Some(v) = &o.evict_on_fault_classes {
        s.evict_on_fault_classes = v.iter().map(|c| c.to_ascii_uppercase()).collect();
    }
    if let Some(v) = o.max_eviction_restarts {
        s.max_eviction_restarts = v;
    }
    if let Some(v) = o.failure_tally_penalty {
        s.failure_tally_penalty = v;
    }
    if let Some(v) = o.failure_tally_half_life_hours {
        s.failure_tally_half_life_hours = v;
    }
    if let Some(v) = &o.penalties {
        s.penalties.extend(v.iter().map(|(k, p)| (k.clone(), *p)));
    }
    if let Some(d) = o.default_penalty {
        let mine = &mut s.default_penalty;
        for (set, to) in [
            (&mut mine.info, d.info),
            (&mut mine.warning, d.warning),
            (&mut mine.critical, d.critical),
        ] {
            if let Some(v) = to {
                *set = v;
            }
        }
    }
    s
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PoolConfig {
    /// Pool name, recorded as `scoredBy` on its nodes' scores.
    pub name: String,
    /// Node labels a node must all carry to belong to the pool. First match wins.
    pub selector: BTreeMap<String, String>,
    /// Settings replacing the cluster's, key by key.
    #[serde(default)]
    pub node_health: NodeHealthOverrides,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    Sqlite,
    Nats,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct StoreConfig {
    /// `sqlite` (embedded, the default) or `nats` (JetStream, shared by replicas).
    pub kind: StoreKind,
    /// Directory of the embedded store; created when missing.
    pub path: PathBuf,
    /// The JetStream servers of `kind: nats`.
    pub nats: Option<crate::store::nats::NatsConfig>,
    /// Events older than this are deleted by a background sweep.
    pub event_retention_days: u32,
    /// The disk budget of the store, in bytes. hale does not delete history to meet
    /// it: it exports it (`hale_store_bytes_max`) and warns past 90 %, so an alert can
    /// fire before the disk fills. 0 is none.
    pub max_bytes: Option<u64>,
}

impl StoreConfig {
    /// Open the store this names for `cluster`, for `hale serve`. A NATS store
    /// not there yet — NATS starting beside hale, JetStream still electing its
    /// leaders or placing its streams (too few servers yet: `Full`) — is waited
    /// for, a new try begun up to [`STORE_START_WAIT`] after the first, each
    /// failure logged with its cause. Files NATS's settings name that cannot be
    /// read, credentials or TLS NATS refused, and more copies than a lone server
    /// keeps fail at once, as do SQLite's errors: waiting does not cure them.
    pub fn open(&self, cluster: &str) -> Result<crate::store::Opened, crate::store::StoreError> {
        use crate::store::StoreError;
        let deadline = std::time::Instant::now() + STORE_START_WAIT;
        let mut pause = Duration::from_secs(1);
        loop {
            match self.open_once(cluster) {
                Err(e @ (StoreError::Nats { op, .. } | StoreError::Full { op, .. }))
                    if !op.starts_with("read store.nats")
                        && op != crate::store::nats::REFUSED_CONNECT
                        && op != crate::store::nats::REFUSED_REPLICAS
                        && std::time::Instant::now() + pause < deadline =>
                {
                    tracing::warn!(error = %e, retry_in = ?pause, "the store cannot be opened yet: trying again");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
                opened => return opened,
            }
        }
    }

    /// Adding a store kind is its module in `store/` and its arm here.
    fn open_once(&self, cluster: &str) -> Result<crate::store::Opened, crate::store::StoreError> {
        match (self.kind, &self.nats) {
            (StoreKind::Sqlite, _) => crate::store::Sqlite::open_pair(&self.path),
            (StoreKind::Nats, Some(nats)) => {
                crate::store::Nats::open_pair(nats, cluster, self.event_retention_days)
            }
            (StoreKind::Nats, None) => unreachable!("validated: kind nats names its servers"),
        }
    }
}

/// How long after its first try `hale serve` begins its last to open a NATS
/// store: a try (each of its requests bounded by the client's timeout) and the
/// orchestrator's connection before it mostly end within the Helm chart's
/// startup probe (180 s).
pub const STORE_START_WAIT: Duration = Duration::from_secs(90);

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            kind: StoreKind::Sqlite,
            path: PathBuf::from("./hale-data"),
            nats: None,
            event_retention_days: 90,
            max_bytes: None,
        }
    }
}

/// One `nodeEventWebhooks` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookConfig {
    /// Where events are POSTed (CloudEvents 1.0, structured mode).
    pub url: String,
    /// File holding the HMAC-SHA256 signing secret.
    pub secret_file: PathBuf,
    /// Event types to send; omitted sends every type. Left empty (`events:`) it
    /// is refused, as `[]` is: an empty filter is never read as every type.
    #[serde(default, deserialize_with = "de_present")]
    pub events: Option<Vec<String>>,
    /// Attempts per event, the first included, before it is dropped.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Events waiting for this endpoint; beyond it new events are dropped and counted.
    #[serde(default = "default_queue_size")]
    pub queue_size: usize,
    /// Timeout of one attempt.
    #[serde(default = "default_webhook_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
}

fn default_max_attempts() -> u32 {
    5
}

fn default_queue_size() -> usize {
    1000
}

fn default_webhook_timeout() -> Duration {
    Duration::from_secs(10)
}

/// A secret read from a file. It prints as `***` so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A validated webhook endpoint with its secret read. Its `Debug` shows the URL
/// without credentials.
#[derive(Clone, PartialEq)]
pub struct Webhook {
    pub url: reqwest::Url,
    pub secret: Secret,
    /// `None`: every event type.
    pub events: Option<BTreeSet<String>>,
    pub max_attempts: u32,
    pub queue_size: usize,
    pub timeout: Duration,
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.shown())
            .field("events", &self.events)
            .field("max_attempts", &self.max_attempts)
            .field("queue_size", &self.queue_size)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Webhook {
    /// The URL as it may appear in logs and metric labels ([`crate::shown_endpoint`]):
    /// no credentials, no query, no path.
    pub fn shown(&self) -> String {
        crate::shown_endpoint(&self.url, self.secret.expose().as_bytes())
    }
}

/// The orchestrator kinds besides `none`, each `Variant => "kind", module`: the
/// module holds the kind's `Config` (its own keys, `validate`, `connect`) and its
/// adapter. Adding a kind is its module and one line here.
macro_rules! orchestrator_kinds {
    ($($variant:ident => $name:literal, $module:ident;)*) => {
        /// `orchestrator`: which kind hale acts through, each with its own keys.
        #[derive(Debug, Clone, PartialEq, Default)]
        pub enum OrchestratorConfig {
            /// hale keeps its own bookkeeping of node statuses and moves no work.
            #[default]
            None,
            $($variant(Box<crate::$module::Config>),)*
        }

        /// The `kind` of an `orchestrator` section.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
        enum OrchestratorKind {
            #[default]
            #[serde(rename = "none")]
            None,
            $(#[serde(rename = $name)] $variant,)*
        }

        impl<'de> Deserialize<'de> for OrchestratorConfig {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                match KIND.get() {
                    OrchestratorKind::None => {
                        NoneConfig::deserialize(d).map(|_| OrchestratorConfig::None)
                    }
                    $(OrchestratorKind::$variant => crate::$module::Config::deserialize(d)
                        .map(|c| OrchestratorConfig::$variant(Box::new(c))),)*
                }
            }
        }

        impl OrchestratorConfig {
            /// `none`, `kubernetes`, …
            pub fn kind(&self) -> &'static str {
                match self {
                    OrchestratorConfig::None => "none",
                    $(OrchestratorConfig::$variant(_) => $name,)*
                }
            }

            /// The kind's own checks; the error is (key under `orchestrator`, message).
            fn validate(&self) -> Result<(), (String, String)> {
                match self {
                    OrchestratorConfig::None => Ok(()),
                    $(OrchestratorConfig::$variant(c) => c.validate(),)*
                }
            }

            /// The files the kind reads, by key under `orchestrator`.
            fn files(&self) -> Vec<(&'static str, &std::path::PathBuf)> {
                match self {
                    OrchestratorConfig::None => Vec::new(),
                    $(OrchestratorConfig::$variant(c) => c.files(),)*
                }
            }

            /// The orchestrator this section describes, connected.
            pub async fn connect(
                &self,
            ) -> Result<std::sync::Arc<dyn crate::orchestrator::Orchestrator>, String> {
                match self {
                    OrchestratorConfig::None => {
                        Ok(std::sync::Arc::new(crate::orchestrator::NoOrchestrator))
                    }
                    $(OrchestratorConfig::$variant(c) => c
                        .connect()
                        .await
                        .map_err(|e| format!("connecting to {}: {e}", $name)),)*
                }
            }
        }
    };
}

orchestrator_kinds! {
    Kubernetes => "kubernetes", kubernetes;
    Fuzzball => "fuzzball", fuzzball;
    Slurm => "slurm", slurm;
}

/// `orchestrator: { kind: none }` takes no other key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoneConfig {
    #[serde(rename = "kind")]
    _kind: OrchestratorKind,
}

thread_local! {
    /// The kind [`Config::parse`]'s first pass found, for the second to read the
    /// section as. Read through the kind's own struct, every key keeps its line.
    static KIND: std::cell::Cell<OrchestratorKind> = const { std::cell::Cell::new(OrchestratorKind::None) };
}

/// What the file wrote of the keys a warning between two keys may blame, read
/// again only when such a warning is due (a key left out is its default).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Written {
    #[serde(default)]
    remediation: Option<WrittenRemediation>,
    #[serde(default)]
    node_identity: Option<WrittenIdentity>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenRemediation {
    #[serde(default)]
    return_timeout: Option<serde::de::IgnoredAny>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenIdentity {
    #[serde(default)]
    forget_after: Option<serde::de::IgnoredAny>,
}

impl Written {
    fn read(source: &str) -> Written {
        serde_saphyr::from_str_with_options(source, yaml_options()).unwrap_or_default()
    }
}

/// The YAML reader's limits for a configuration: the parser's default budget
/// (250,000 YAML nodes) is under a static inventory of 100,000 nodes with labels;
/// aliases stay bounded as before.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: MAX_YAML_NODES,
            max_events: 2 * MAX_YAML_NODES,
            // One anchor (`&gpu`) named by every entry of an inventory is
            // fine; the alias replay limit still stops an alias bomb.
            enforce_alias_anchor_ratio: false,
        },
    }
}

/// The first pass of [`Config::parse`]: only the orchestrator's kind.
#[derive(Deserialize)]
struct KindProbe {
    #[serde(default)]
    orchestrator: Option<KindOnly>,
}

#[derive(Deserialize)]
struct KindOnly {
    #[serde(default)]
    kind: OrchestratorKind,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InventoryNode {
    /// Node id as alerts name it (after port stripping).
    pub id: String,
    /// Hostname shown in listings; defaults to the id.
    #[serde(default)]
    pub hostname: Option<String>,
    /// Labels used by pool selectors.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The node's BMC (DESIGN §8).
    #[serde(default)]
    pub bmc: Option<crate::bmc::config::NodeBmc>,
}

impl InventoryNode {
    /// The node as the core registers it.
    pub fn listed(&self) -> Listed {
        Listed {
            id: self.id.clone(),
            hostname: self.hostname.clone(),
            labels: self.labels.clone(),
        }
    }
}

/// A loaded, validated configuration and where it came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// What the decision core decides with, resolved from the file.
    pub core: CoreSettings,
    /// The API token, read from `apiTokenFile`.
    pub api_token: Option<Secret>,
    /// `nodeEventWebhooks`, validated, secrets read.
    pub webhooks: Vec<Webhook>,
    /// Every node's way to its BMC, credentials read.
    pub bmc: crate::bmc::config::Directory,
    /// The alerts that hold the reboot flow back, asked of Alertmanager.
    pub blocking: remediation::Blocking,
    /// `federation.members`, checked, tokens read.
    pub members: Vec<Member>,
    /// Settings that are legal but probably not what was meant, each naming its
    /// key as an error would.
    pub warnings: Vec<ConfigError>,
    /// The file this came from (`None`: built-in defaults), for reloads.
    pub source: Option<PathBuf>,
}

/// A token or signing secret: the file's text without surrounding white space (a
/// trailing newline or none); an empty file is refused.
fn read_secret(path: &Path) -> Result<Secret, String> {
    crate::secret_text(path).map(Secret)
}

/// A bearer token from its file ([`crate::token_text`]).
fn read_token(path: &Path) -> Result<Secret, String> {
    crate::token_text(path).map(Secret)
}

/// The most a configuration file may hold (an inventory of 100,000 labelled
/// nodes is about 10 MiB).
const MAX_CONFIG_BYTES: u64 = 64 << 20;

/// How long a start, a check or a reload waits for the configuration file and
/// the files it names.
pub const READ_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

impl ConfigError {
    /// `path`, or a file it names, did not answer within [`READ_WITHIN`].
    pub fn unanswered(path: &Path) -> ConfigError {
        ConfigError {
            file: path.display().to_string(),
            line: None,
            key: "-".into(),
            message: format!(
                "reading it and the files it names took longer than {} s (a mount that does not answer?)",
                READ_WITHIN.as_secs()
            ),
        }
    }
}

impl Config {
    /// Read, parse and validate `path`; `None` means the built-in defaults.
    pub fn load(path: Option<&Path>) -> Result<Loaded, ConfigError> {
        let Some(path) = path else {
            return Config::default().resolve("<defaults>", "");
        };
        Ok(Self::load_text(path)?.0)
    }

    /// [`Config::load`], given up after [`READ_WITHIN`]: a file on a mount that
    /// does not answer (a secret, a CA) stops a start or a check with an error
    /// naming the file, not a wait without end. The read left behind ends with
    /// the process.
    pub fn load_bounded(path: Option<&Path>) -> Result<Loaded, ConfigError> {
        let Some(path) = path.map(Path::to_path_buf) else {
            return Config::load(None);
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let reading = path.clone();
        std::thread::spawn(move || {
            let _ = tx.send(Config::load(Some(&reading)));
        });
        rx.recv_timeout(READ_WITHIN)
            .unwrap_or_else(|_| Err(ConfigError::unanswered(&path)))
    }

    /// As [`Config::load`] reads `path`, with the text it read, to name a line in
    /// it later (a reload refused for a key that needs a restart).
    pub fn load_text(path: &Path) -> Result<(Loaded, String), ConfigError> {
        use std::io::Read as _;
        let file = path.display().to_string();
        let refused = |line, message| ConfigError {
            file: file.clone(),
            line,
            key: "-".into(),
            message,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| refused(None, format!("cannot read: {e}")))?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(refused(
                None,
                format!(
                    "holds more than {} MiB: no configuration is that large (a device, a log?)",
                    MAX_CONFIG_BYTES >> 20
                ),
            ));
        }
        let source = String::from_utf8(bytes).map_err(|e| {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = valid.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
            let column =
                valid.len() - valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
            refused(
                Some(line),
                format!("byte {column} of the line is not UTF-8: a configuration is UTF-8 text"),
            )
        })?;
        // An empty file is a file written halfway far more often than a wish for
        // every default, which `{}` says.
        if source
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            return Err(ConfigError {
                file,
                line: None,
                key: "-".into(),
                message: "holds no configuration (empty, or comments only): nothing was loaded; write `{}` for every default".into(),
            });
        }
        let mut loaded = Self::parse(&file, &source)?.resolve(&file, &source)?;
        loaded.source = Some(path.to_path_buf());
        Ok((loaded, source))
    }

    /// Parse YAML text; errors carry the file, line and offending key.
    pub fn parse(file: &str, source: &str) -> Result<Config, ConfigError> {
        if source.trim().is_empty() {
            return Ok(Config::default());
        }
        let located = |e: serde_saphyr::Error| {
            let at = e.location().filter(|l| l.line() > 0);
            let line = at.map(|l| l.line());
            // Text that is not well-formed YAML has no keys to read a path from:
            // the line is named, and what the parser found there.
            let malformed = matches!(
                e.without_snippet(),
                serde_saphyr::Error::ExternalMessage { source, .. }
                    if matches!(**source, serde_saphyr::ExternalMessageSource::Parser(_))
            );
            let mut key = at
                .filter(|_| !malformed)
                .and_then(|l| path_at(source, l.line() as usize, l.column() as usize))
                .unwrap_or_else(|| "-".into());
            let message = e.to_string();
            // Some errors point at the mapping rather than the key they name.
            let named = |what: &str| {
                message
                    .split_once(what)
                    .and_then(|(_, rest)| rest.split_once('`'))
                    .map(|(field, _)| field.to_string())
            };
            if let Some(field) = named("unknown field `")
                && !key.ends_with(field.as_str())
            {
                key = if key == "-" {
                    field
                } else {
                    format!("{key}.{field}")
                };
            } else if let Some(field) = named("missing field `") {
                // Said at a key inside a flow mapping (the path read there is the
                // mapping's), at a flow mapping's own `{` (an empty one, `window:
                // {}`: the path read there is its key's), or at a block mapping's
                // last key, whose sibling the missing one is.
                let at_mapping = at.is_some_and(|l| {
                    let Some(text) = l
                        .line()
                        .checked_sub(1)
                        .and_then(|n| source.lines().nth(n as usize))
                    else {
                        return false;
                    };
                    let column = l.column().saturating_sub(1) as usize;
                    let before: String = text.chars().take(column).collect();
                    text.chars().nth(column) == Some('{') || before.trim_end().ends_with(['{', ','])
                });
                key = match key.rsplit_once('.') {
                    _ if key == "-" => field,
                    _ if at_mapping || key.ends_with(']') => format!("{key}.{field}"),
                    Some((mapping, _)) => format!("{mapping}.{field}"),
                    None => field,
                };
            }
            // A key left empty inside a flow mapping (`{ timeZone: }`) is said at
            // its `:`, where the path read is the mapping's: the key is the word
            // before it.
            let empty = message.contains("cannot deserialize null")
                || message.contains("unknown variant `~`");
            if empty
                && let Some(l) = at
                && let Some(text) = source.lines().nth(l.line().saturating_sub(1) as usize)
            {
                let column = l.column().saturating_sub(1) as usize;
                let before: Vec<char> = text.chars().take(column).collect();
                let word: String = before
                    .iter()
                    .rev()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == '_' || **c == '-')
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                if text.chars().nth(column) == Some(':') && !word.is_empty() {
                    if key == "-" {
                        key = word;
                    } else if !key.ends_with(&format!(".{word}")) && key != word {
                        key = format!("{key}.{word}");
                    }
                }
            }
            // The parser says where again ("error: line 2 column 9: …"); the
            // file and line lead the message already.
            let first = message.lines().next().unwrap_or_default();
            let said = first.strip_prefix("error: ").unwrap_or(first);
            // The parser's advice to its own caller is not the user's to follow.
            let said = said
                .split_once(", set DuplicateKeyPolicy")
                .map_or(said, |(what, _)| what);
            let said = said
                .strip_prefix("line ")
                .and_then(|rest| rest.split_once(": "))
                .filter(|(at, _)| at.contains("column"))
                .map_or(said, |(_, what)| what);
            let said = if said.starts_with("budget breached")
                && ["Nodes", "Events", "ScalarBytes"]
                    .iter()
                    .any(|k| said.contains(k))
            {
                key = "-".into();
                "too large: more than 10,000,000 YAML nodes (keys, values, entries); an inventory that size belongs in an orchestrator"
            } else if said.starts_with("budget breached") {
                key = "-".into();
                "refused by the YAML reader's limits on aliases and nesting (more than a configuration needs)"
            } else if said.contains("multiple YAML documents") {
                // Said of the file, where its second document begins.
                key = "-".into();
                "a configuration is one YAML document; this file holds more (`---`)"
            } else if said.starts_with("cannot deserialize null") && key == "fencing" {
                "empty: `fencing: {}` turns fencing on with its defaults; leave the key out for none"
            } else if said.starts_with("cannot deserialize null") {
                // serde's advice to the program ("use Option<…>") is not the user's.
                "empty: give it a value (a key with a default may be left out)"
            } else if said == "invalid u32" && key == "fencing.maxPercent" {
                "expected a whole number from 1 to 100"
            } else if said == "invalid u32"
                && (key.contains(".penalties.")
                    || key
                        .rsplit('.')
                        .next()
                        .is_some_and(|k| SCORE_KEYS.contains(&k)))
            {
                "expected a whole number from 0 to 100"
            } else if let Some(plain) = plain(said) {
                plain
            } else {
                said
            };
            let message = match said
                .strip_prefix("missing field `")
                .and_then(|rest| rest.strip_suffix('`'))
            {
                Some(field) => format!("`{field}` is required here"),
                // A kind left empty (`kind:`) reads as the name `~`.
                None => match said
                    .strip_prefix("unknown variant `")
                    .and_then(|rest| rest.split_once("`, expected "))
                    .filter(|(name, _)| {
                        name.trim().is_empty() || *name == "~" || name.eq_ignore_ascii_case("null")
                    }) {
                    Some((_, names)) => format!("empty: give it {names}"),
                    None => said.to_string(),
                },
            };
            ConfigError {
                file: file.into(),
                line,
                key,
                message,
            }
        };
        let kind = serde_saphyr::from_str_with_options::<KindProbe>(source, yaml_options())
            .map_err(located)?
            .orchestrator
            .map(|o| o.kind)
            .unwrap_or_default();
        KIND.set(kind);
        serde_saphyr::from_str_with_options::<Config>(source, yaml_options()).map_err(located)
    }

    /// Validate what serde cannot check and resolve per-pool settings.
    pub fn resolve(self, file: &str, source: &str) -> Result<Loaded, ConfigError> {
        let err = |key: &str, message: String| ConfigError {
            file: file.into(),
            line: locate(source, key),
            key: key.into(),
            message,
        };
        if self.cluster.trim().is_empty()
            || self.cluster.trim() != self.cluster
            || self.cluster == "*"
            || crate::core::labels::unprintable(&self.cluster)
        {
            return Err(err(
                "cluster",
                "must be a name: not empty, no spaces around it, no control, invisible or direction-changing characters, not `*` (every cluster)"
                    .into(),
            ));
        }
        let Ok(listen) = self.listen.parse::<SocketAddr>() else {
            return Err(err(
                "listen",
                format!(
                    "`{}` is not an address like 127.0.0.1:9470 or [::1]:9470",
                    self.listen
                ),
            ));
        };
        let am = &self.alertmanager;
        let url = match reqwest::Url::parse(&am.url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u,
            _ => {
                return Err(err(
                    "alertmanager.url",
                    format!(
                        "`{}` is not an http(s) URL{}",
                        crate::shown_address(&am.url),
                        crate::bracket_hint(&am.url)
                    ),
                ));
            }
        };
        if am.ca_file.is_some() && url.scheme() == "http" {
            return Err(err(
                "alertmanager.caFile",
                "is for an https Alertmanager; alertmanager.url is http".into(),
            ));
        }
        let in_url = !url.username().is_empty() || url.password().is_some();
        match (&am.basic_auth, &am.bearer_token_file) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "alertmanager.bearerTokenFile",
                    "and alertmanager.basicAuth both given: a request carries one".into(),
                ));
            }
            (Some(_), None) | (None, Some(_)) if in_url => {
                let key = if am.basic_auth.is_some() {
                    "alertmanager.basicAuth"
                } else {
                    "alertmanager.bearerTokenFile"
                };
                return Err(err(
                    key,
                    "given while alertmanager.url holds credentials too: keep the credentials in one place (the files)".into(),
                ));
            }
            (Some(auth), None)
                if auth.username.is_empty()
                    || auth.username.contains(':')
                    || auth.username.chars().any(char::is_control) =>
            {
                return Err(err(
                    "alertmanager.basicAuth.username",
                    "must be a name without `:` or control characters (basic auth sends `user:password`)"
                        .into(),
                ));
            }
            _ => {}
        }
        if am.receiver.trim().is_empty() {
            return Err(err("alertmanager.receiver", "must not be empty".into()));
        }
        if am.stale_after().is_zero() {
            return Err(err("alertmanager.staleAfter", "must be positive".into()));
        }
        if !am.poll_interval.is_zero() && am.stale_after() < am.poll_interval {
            return Err(err(
                "alertmanager.staleAfter",
                "must be at least pollInterval, or every gap between polls is stale".into(),
            ));
        }
        if !am.poll_interval.is_zero() && am.poll_interval < Duration::from_secs(1) {
            return Err(err(
                "alertmanager.pollInterval",
                "must be at least 1s (or 0: webhook only): each poll asks Alertmanager for every alert".into(),
            ));
        }
        if am.timeout.is_zero() {
            return Err(err("alertmanager.timeout", "must be positive".into()));
        }
        if am.max_webhook_bytes < 1024 {
            return Err(err(
                "alertmanager.maxWebhookBytes",
                "must be at least 1024".into(),
            ));
        }
        if am.max_answer_bytes < 1 << 20 {
            return Err(err(
                "alertmanager.maxAnswerBytes",
                "must be at least 1048576 (1 MiB)".into(),
            ));
        }
        if self.node_identity.labels.is_empty() {
            return Err(err("nodeIdentity.labels", "name at least one label".into()));
        }
        for (i, label) in self.node_identity.labels.iter().enumerate() {
            if label.trim().is_empty() {
                return Err(err(
                    &format!("nodeIdentity.labels[{i}]"),
                    "an empty label names no node".into(),
                ));
            }
            if let Some(why) = unmatchable("label name", label) {
                return Err(err(&format!("nodeIdentity.labels[{i}]"), why));
            }
        }
        if self.node_identity.forget_after.is_zero() {
            return Err(err("nodeIdentity.forgetAfter", "must be positive".into()));
        }
        if self.node_identity.max_nodes == 0 {
            return Err(err("nodeIdentity.maxNodes", "must be at least 1".into()));
        }
        let cluster_settings = overridden(&Settings::default(), "cluster", &self.node_health);
        // Legal, but probably not what was meant: said by check-config and at start.
        let mut odd: Vec<(String, String)> = Vec::new();
        if self.api_token_file.is_none() && !listen.ip().to_canonical().is_loopback() {
            odd.push((
                "listen".into(),
                format!(
                    "{listen}: no apiTokenFile, and listening beyond loopback: whoever reaches this port can post alerts and cordon, drain or power nodes"
                ),
            ));
        }
        let am = &self.alertmanager;
        // The parser reads the scheme in any case (`HTTP://` is http).
        let parsed = reqwest::Url::parse(&am.url).ok();
        if let Some(url) = parsed.filter(|u| u.scheme() == "http") {
            let in_url = !url.username().is_empty() || url.password().is_some();
            let key = match (&am.basic_auth, &am.bearer_token_file) {
                (Some(_), _) => Some("alertmanager.basicAuth"),
                (None, Some(_)) => Some("alertmanager.bearerTokenFile"),
                (None, None) if in_url => Some("alertmanager.url"),
                (None, None) => None,
            };
            if let Some(key) = key {
                let what = match key {
                    "alertmanager.url" if url.password().is_some() => "its credentials are",
                    "alertmanager.url" => "its user is",
                    _ => "is",
                };
                odd.push((
                    key.into(),
                    format!("{what} sent in the clear: alertmanager.url is http"),
                ));
            }
        }
        if self.bmc.cipher_suite == 0 {
            odd.push((
                "bmc.cipherSuite".into(),
                "0: IPMI's cipher suite zero authenticates nothing, and a BMC that takes it lets anyone in with any password; use 17 (or 3 where the BMC has no better)".into(),
            ));
        }
        // A node (and a job failure) is kept as long as an alert names it again
        // within forgetAfter: a poll names every firing alert; without polling,
        // Alertmanager sends a firing group again each repeat_interval (4h by
        // default).
        let (named_again, by) = if am.poll_interval.is_zero() {
            (
                Duration::from_secs(4 * 3600),
                "Alertmanager's default repeat_interval (4h), the most a firing alert goes unsent with pollInterval 0".to_string(),
            )
        } else {
            (
                am.poll_interval * 3,
                format!("three polls ({}s)", (am.poll_interval * 3).as_secs()),
            )
        };
        if self.node_identity.forget_after < named_again {
            let wrote = Written::read(source)
                .node_identity
                .is_some_and(|n| n.forget_after.is_some());
            let forget = self.node_identity.forget_after.as_secs_f64();
            let then = "a node known from alerts alone may be retired while its alerts still fire, and a job failure older than it is not counted";
            odd.push(if wrote || am.poll_interval.is_zero() {
                (
                    "nodeIdentity.forgetAfter".into(),
                    format!(
                        "{forget}s{} is less than {by}: {then}",
                        if wrote { "" } else { " (the default)" }
                    ),
                )
            } else {
                (
                    "alertmanager.pollInterval".into(),
                    format!(
                        "{by} is more than nodeIdentity.forgetAfter ({forget}s, the default): {then}"
                    ),
                )
            });
        }
        let labels = &self.node_identity.labels;
        for (i, label) in labels.iter().enumerate() {
            if labels[..i].contains(label) {
                odd.push((
                    format!("nodeIdentity.labels[{i}]"),
                    format!("`{label}` is named twice: the second is never read"),
                ));
            }
        }
        check_settings(
            &cluster_settings,
            "nodeHealth",
            &self.node_health,
            None,
            &mut odd,
        )
        .map_err(|(k, m)| err(&k, m))?;

        let mut names = BTreeSet::new();
        let mut pools = Vec::new();
        for (i, pool) in self.pools.iter().enumerate() {
            let at = format!("pools[{i}]");
            if pool.name.trim().is_empty()
                || pool.name.trim() != pool.name
                || pool.name == "cluster"
                || pool.name == "*"
                || crate::core::labels::unprintable(&pool.name)
            {
                return Err(err(
                    &format!("{at}.name"),
                    "must be a name: not empty, no spaces around it, no control, invisible or direction-changing characters, not `cluster` (nodes in no pool) nor `*`"
                        .into(),
                ));
            }
            if !names.insert(pool.name.clone()) {
                return Err(err(
                    &format!("{at}.name"),
                    format!("pool `{}` is defined twice", pool.name),
                ));
            }
            if pool.selector.is_empty() {
                return Err(err(
                    &format!("{at}.selector"),
                    "an empty selector would take every node; name at least one label".into(),
                ));
            }
            labels_match(&pool.selector).map_err(|why| err(&format!("{at}.selector"), why))?;
            let earlier = self.pools[..i].iter().map(|p| &p.selector);
            if let Some((j, what)) = shadowed(earlier, &pool.selector) {
                odd.push((
                    format!("{at}.selector"),
                    format!(
                        "pool `{}` {what}: a node takes the first pool it matches, so this one takes none",
                        self.pools[j].name
                    ),
                ));
            }
            let s = overridden(&cluster_settings, &pool.name, &pool.node_health);
            check_settings(
                &s,
                &format!("{at}.nodeHealth"),
                &pool.node_health,
                Some(&self.node_health),
                &mut odd,
            )
            .map_err(|(k, m)| err(&k, m))?;
            pools.push(Pool {
                selector: pool.selector.clone(),
                settings: s,
            });
        }
        let mut ids = BTreeSet::new();
        for (i, node) in self.inventory.iter().enumerate() {
            if node.id.trim().is_empty() || matches!(node.id.trim(), "." | "..") {
                return Err(err(
                    &format!("inventory[{i}].id"),
                    "must not be empty, `.` or `..` (a URL path cannot name those)".into(),
                ));
            }
            if node.id.len() > crate::core::labels::MAX_NODE_ID {
                return Err(err(
                    &format!("inventory[{i}].id"),
                    format!(
                        "is {} bytes long; a node id is at most {}: no alert names a node so",
                        node.id.len(),
                        crate::core::labels::MAX_NODE_ID
                    ),
                ));
            }
            if crate::core::labels::unprintable(&node.id) {
                return Err(err(
                    &format!("inventory[{i}].id"),
                    format!(
                        "{:?} holds a control, invisible or direction-changing character: no alert names a node so",
                        node.id
                    ),
                ));
            }
            labels_match(&node.labels)
                .map_err(|why| err(&format!("inventory[{i}].labels"), why))?;
            if node.id.trim() != node.id {
                return Err(err(
                    &format!("inventory[{i}].id"),
                    format!(
                        "{:?} has spaces around it: no alert names a node so",
                        node.id
                    ),
                ));
            }
            if !ids.insert(node.id.as_str()) {
                return Err(err(
                    &format!("inventory[{i}].id"),
                    format!("node `{}` is listed twice", node.id),
                ));
            }
        }
        let (remediation, blocking) = self
            .remediation
            .resolve()
            .map_err(|(key, message)| err(&format!("remediation.{key}"), message))?;
        // As pools: a node takes the first node type it matches.
        let types = &self.remediation.node_types;
        for (i, t) in types.iter().enumerate() {
            labels_match(&t.selector)
                .map_err(|why| err(&format!("remediation.nodeTypes[{i}].selector"), why))?;
            let earlier = types[..i].iter().map(|e| &e.selector);
            if let Some((j, what)) = shadowed(earlier, &t.selector) {
                let name = types[j]
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("nodeTypes[{j}]"));
                odd.push((
                    format!("remediation.nodeTypes[{i}].selector"),
                    format!(
                        "node type `{name}` {what}: a node takes the first node type it matches, so this one takes none"
                    ),
                ));
            }
        }
        // A rebooted node must be seen gone before `returnTimeout` runs out: by a
        // missed heartbeat (or, with an orchestrator, by going not ready), which no
        // node shows sooner than 15 s. How much longer depends on each node's
        // heartbeat interval, which its alerts carry (`hale_report_interval`): the
        // runbook's business, not the loader's.
        let seen_gone = cluster_settings.miss_after(Duration::ZERO);
        if remediation.return_timeout <= seen_gone {
            return Err(err(
                "remediation.returnTimeout",
                format!(
                    "must exceed {}s, the least time hale needs to see a rebooted node \
                     gone (a missed heartbeat): every reboot would fail its return step",
                    seen_gone.as_secs()
                ),
            ));
        }
        // Nodes whose alerts carry no interval of their own are seen gone only
        // once their configured heartbeat is missed — said where a reboot can
        // happen at all (a BMC, an orchestrator, the flow configured), and of the
        // key the file wrote: returnTimeout, else the heartbeat's.
        let written = std::cell::OnceCell::new();
        let written = || written.get_or_init(|| Written::read(source));
        let machines = self.bmc.credentials_file.is_some()
            || self.bmc.address_template.is_some()
            || self.inventory.iter().any(|n| n.bmc.is_some())
            || self.orchestrator != OrchestratorConfig::None;
        let blocks = std::iter::once(("nodeHealth".to_string(), &self.node_health)).chain(
            self.pools
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("pools[{i}].nodeHealth"), &p.node_health)),
        );
        for (s, (at, block)) in std::iter::once(&cluster_settings)
            .chain(pools.iter().map(|p: &Pool| &p.settings))
            .zip(blocks)
        {
            let missed = s.miss_after(s.report_interval);
            if remediation.return_timeout <= missed && (machines || written().remediation.is_some())
            {
                let wrote_return = written()
                    .remediation
                    .as_ref()
                    .is_some_and(|r| r.return_timeout.is_some());
                let wrote = |at: &str, w: &NodeHealthOverrides| {
                    if w.report_interval_seconds.is_some() {
                        Some(format!("{at}.reportIntervalSeconds"))
                    } else {
                        w.heartbeat_miss_threshold
                            .map(|_| format!("{at}.heartbeatMissThreshold"))
                    }
                };
                let key = Some("remediation.returnTimeout".to_string())
                    .filter(|_| wrote_return)
                    .or_else(|| wrote(&at, block))
                    .or_else(|| wrote("nodeHealth", &self.node_health))
                    .unwrap_or_else(|| "remediation.returnTimeout".into());
                let who = if s.name == "cluster" {
                    "the cluster".to_string()
                } else {
                    format!("pool {}", s.name)
                };
                let (r, m) = (remediation.return_timeout.as_secs(), missed.as_secs());
                let message = if key == "remediation.returnTimeout" {
                    format!("{r}s is not more than the {m}s {who} needs to miss a heartbeat")
                } else {
                    let default = if wrote_return { "" } else { ", the default" };
                    format!(
                        "{who} needs {m}s to miss a heartbeat, not less than remediation.returnTimeout ({r}s{default})"
                    )
                };
                odd.push((
                    key,
                    format!(
                        "{message} (reportIntervalSeconds × heartbeatMissThreshold): a reboot of a node whose alerts carry no hale_report_interval would fail its return step"
                    ),
                ));
                break;
            }
        }
        let fencing = self
            .fencing
            .as_ref()
            .map(|f| f.resolve(self.orchestrator != OrchestratorConfig::None))
            .transpose()
            .map_err(|(key, message)| err(&format!("fencing.{key}"), message))?;
        // Every file the configuration names is read before any is refused, so one run
        // names every file that is missing, unreadable or (a secret) empty.
        let tokens = self
            .api_token_file
            .iter()
            .map(|p| ("apiTokenFile".to_string(), p))
            .chain(
                self.alertmanager
                    .bearer_token_file
                    .iter()
                    .map(|p| ("alertmanager.bearerTokenFile".to_string(), p)),
            )
            .chain(self.federation.token_files())
            .map(|(key, path)| (key, read_token(path)));
        let mut secrets: BTreeMap<String, Result<Secret, String>> = self
            .node_event_webhooks
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let key = format!("nodeEventWebhooks[{i}].secretFile");
                (key, read_secret(&w.secret_file))
            })
            .chain(self.alertmanager.basic_auth.iter().map(|b| {
                let key = "alertmanager.basicAuth.passwordFile".to_string();
                (key, read_secret(&b.password_file))
            }))
            .chain(tokens)
            .collect();
        let files_read = self
            .bmc
            .credentials_file
            .iter()
            .map(|p| ("bmc.credentialsFile".to_string(), p))
            .chain(
                self.bmc
                    .ca_file
                    .iter()
                    .map(|p| ("bmc.caFile".to_string(), p)),
            )
            .chain(
                self.store
                    .nats
                    .iter()
                    .filter(|_| self.store.kind == StoreKind::Nats)
                    .flat_map(crate::store::nats::NatsConfig::files)
                    .map(|(k, p)| (format!("store.nats.{k}"), p)),
            )
            .chain(self.federation.ca_files())
            .chain(
                self.alertmanager
                    .ca_file
                    .iter()
                    .map(|p| ("alertmanager.caFile".to_string(), p)),
            )
            .chain(
                self.orchestrator
                    .files()
                    .into_iter()
                    .map(|(k, p)| (format!("orchestrator.{k}"), p)),
            )
            .chain(self.inventory.iter().enumerate().flat_map(|(i, n)| {
                let bmc = n.bmc.as_ref();
                let credentials = bmc.and_then(|b| b.credentials_file.as_ref());
                let ca = bmc.and_then(|b| b.ca_file.as_ref());
                credentials
                    .map(|p| (format!("inventory[{i}].bmc.credentialsFile"), p))
                    .into_iter()
                    .chain(ca.map(|p| (format!("inventory[{i}].bmc.caFile"), p)))
            }))
            .map(|(key, path)| {
                // Only BMC credentials may be a directory (holding `username` and
                // `password`).
                let directory = key.ends_with("credentialsFile")
                    && std::fs::metadata(path).is_ok_and(|m| m.is_dir());
                let unreadable = if path.as_os_str().is_empty() {
                    Some("must name a file".to_string())
                } else if directory {
                    None
                } else {
                    crate::small_file(path).err()
                };
                (key, unreadable)
            })
            .collect::<Vec<_>>();
        let mut unreadable: Vec<ConfigError> = secrets
            .iter()
            .map(|(key, read)| (key.clone(), read.as_ref().err().cloned()))
            .chain(files_read)
            .filter_map(|(key, problem)| Some(err(&key, problem?)))
            .collect();
        // In the file's order, as one reads it top to bottom.
        unreadable.sort_by_key(|e| e.line.unwrap_or(u64::MAX));
        let mut unreadable = unreadable.into_iter();
        if let Some(mut first) = unreadable.next() {
            for more in unreadable {
                first.message.push_str(&format!("\n{more}"));
            }
            return Err(first);
        }
        if let Some(ca) = &self.alertmanager.ca_file {
            crate::certificates(ca).map_err(|e| err("alertmanager.caFile", e))?;
        }
        if self.store.kind == StoreKind::Nats
            && let Some(creds) = self.store.nats.as_ref().and_then(|n| n.creds_file.as_ref())
        {
            crate::store::nats::check_creds(creds).map_err(|e| err("store.nats.credsFile", e))?;
        }
        self.orchestrator
            .validate()
            .map_err(|(key, message)| err(&format!("orchestrator.{key}"), message))?;
        let listed: Vec<(String, &crate::bmc::config::NodeBmc)> = self
            .inventory
            .iter()
            .filter_map(|n| Some((n.id.clone(), n.bmc.as_ref()?)))
            .collect();
        let bmc = crate::bmc::config::Directory::resolve(&self.bmc, &listed).map_err(
            |(key, message)| {
                // Inventory keys count every node, not only those with a BMC.
                let key = match key.strip_prefix("inventory[") {
                    Some(rest) => {
                        let (i, tail) = rest.split_once(']').expect("written so");
                        let i: usize = i.parse().expect("an index");
                        let at = self
                            .inventory
                            .iter()
                            .position(|n| n.id == listed[i].0)
                            .expect("listed from the inventory");
                        format!("inventory[{at}]{tail}")
                    }
                    None => key,
                };
                err(&key, message)
            },
        )?;
        let mut secret = |key: &str| {
            secrets
                .remove(key)
                .expect("read above")
                .expect("checked above")
        };
        let api_token = self.api_token_file.as_ref().map(|_| secret("apiTokenFile"));
        if self.ui.require_token && api_token.is_none() {
            return Err(err(
                "ui.requireToken",
                "needs apiTokenFile: that token is what a reader signs in with".into(),
            ));
        }
        self.federation
            .validate(&self.cluster)
            .map_err(|(key, message)| err(&format!("federation.{key}"), message))?;
        let members = self.federation.members(&mut secret);
        if self.store.path.as_os_str().is_empty() {
            return Err(err(
                "store.path",
                "must name the store's directory (default ./hale-data)".into(),
            ));
        }
        match (self.store.kind, &self.store.nats) {
            (StoreKind::Nats, None) => {
                return Err(err(
                    "store.nats",
                    "kind nats needs its servers: store.nats.urls".into(),
                ));
            }
            // Checked whatever the kind (DESIGN's own example keeps the servers
            // beside `kind: sqlite`, ready for a switch); used only by kind nats.
            (_, Some(nats)) => nats
                .validate()
                .map_err(|(key, message)| err(&format!("store.nats.{key}"), message))?,
            (StoreKind::Sqlite, None) => {}
        }
        if self.store.kind == StoreKind::Nats {
            // JetStream names a stream or bucket in at most 255 bytes; a KV
            // bucket's stream is `KV_<bucket>`.
            let names = crate::store::nats::Names::of(&self.cluster);
            let longest = [
                names.stream.len(),
                3 + names.state.len(),
                3 + names.ledger.len(),
                3 + names.lease.len(),
            ]
            .into_iter()
            .max()
            .unwrap_or_default();
            if longest > 255 {
                return Err(err(
                    "cluster",
                    format!(
                        "too long for the NATS store: its JetStream names would be {longest} bytes, and JetStream takes at most 255 (each byte but letters, digits and `-` counts three)"
                    ),
                ));
            }
        }
        let path = &self.store.path;
        if let Some(note) = crate::unexpanded(path) {
            return Err(err(
                "store.path",
                format!("{} would be made as written{note}", path.display()),
            ));
        }
        if path.symlink_metadata().is_ok() && !path.exists() {
            return Err(err(
                "store.path",
                format!(
                    "{} is a symbolic link to nothing: it must name the store's directory",
                    path.display()
                ),
            ));
        }
        if path.exists() && !path.is_dir() {
            let what = if path.is_file() {
                "a file"
            } else {
                "not a directory"
            };
            return Err(err(
                "store.path",
                format!(
                    "{} is {what}: it must name the store's directory",
                    path.display()
                ),
            ));
        }
        // The directory is made at start, under the nearest one that exists.
        if let Some(above) = path.ancestors().skip(1).find(|a| a.exists())
            && !above.is_dir()
        {
            return Err(err(
                "store.path",
                format!(
                    "{} is inside {}, which is not a directory: the store's directory cannot be made there",
                    path.display(),
                    above.display()
                ),
            ));
        }
        if !(1..=36_500).contains(&self.store.event_retention_days) {
            return Err(err(
                "store.eventRetentionDays",
                "must be 1..=36500 (history is what makes a score legible)".into(),
            ));
        }
        let mut webhooks = Vec::new();
        for (i, w) in self.node_event_webhooks.iter().enumerate() {
            let at = format!("nodeEventWebhooks[{i}]");
            let url = match reqwest::Url::parse(&w.url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => u,
                _ => {
                    return Err(err(
                        &format!("{at}.url"),
                        format!("is not an http(s) URL{}", crate::bracket_hint(&w.url)),
                    ));
                }
            };
            // Two entries for one URL would send it every event twice, under one
            // name in metrics and logs; a fragment is never sent, so it tells
            // none apart. (The URL is not repeated: it may hold a secret.)
            let sent = |u: &reqwest::Url| {
                let mut u = u.clone();
                u.set_fragment(None);
                u
            };
            if let Some(j) = webhooks
                .iter()
                .position(|h: &Webhook| sent(&h.url) == sent(&url))
            {
                return Err(err(
                    &format!("{at}.url"),
                    format!(
                        "is nodeEventWebhooks[{j}]'s URL too: an endpoint takes one entry, with every event type it wants in its `events`"
                    ),
                ));
            }
            let signing = secret(&format!("{at}.secretFile"));
            let events = match &w.events {
                None => None,
                Some(types) if types.is_empty() => {
                    return Err(err(
                        &format!("{at}.events"),
                        "is empty, so this endpoint would receive nothing: leave the key out for every type, or name the types".into(),
                    ));
                }
                Some(types) => {
                    let mut set = BTreeSet::new();
                    for (j, t) in types.iter().enumerate() {
                        let upper = t.to_ascii_uppercase();
                        if !EVENT_TYPES.contains(&upper.as_str()) {
                            return Err(err(
                                &format!("{at}.events[{j}]"),
                                format!("`{t}` is not an event type ({})", EVENT_TYPES.join(", ")),
                            ));
                        }
                        set.insert(upper);
                    }
                    Some(set)
                }
            };
            if w.max_attempts == 0 {
                return Err(err(
                    &format!("{at}.maxAttempts"),
                    "must be at least 1".into(),
                ));
            }
            if !(1..=MAX_QUEUE_SIZE).contains(&w.queue_size) {
                return Err(err(
                    &format!("{at}.queueSize"),
                    format!("must be 1..={MAX_QUEUE_SIZE}"),
                ));
            }
            if w.timeout.is_zero() {
                return Err(err(&format!("{at}.timeout"), "must be positive".into()));
            }
            webhooks.push(Webhook {
                url,
                secret: signing,
                events,
                max_attempts: w.max_attempts,
                queue_size: w.queue_size,
                timeout: w.timeout,
            });
        }
        let am = &self.alertmanager;
        let id = &self.node_identity;
        if id.create_from_alerts == Some(false)
            && self.orchestrator == OrchestratorConfig::None
            && self.inventory.is_empty()
        {
            odd.push((
                "nodeIdentity.createFromAlerts".into(),
                "false, with orchestrator none and no inventory: no node comes in beyond those the store holds".into(),
            ));
        }
        // Kubernetes moves a fenced node's pods (its out-of-service taint); `none`
        // has no work to move; the others keep it on the machine until they see it
        // gone themselves.
        if self.fencing.is_some()
            && !matches!(
                self.orchestrator,
                OrchestratorConfig::None | OrchestratorConfig::Kubernetes(_)
            )
        {
            odd.push((
                "fencing".into(),
                format!(
                    "with orchestrator {}: a fenced node is powered off and on, but its work is not released to run elsewhere (only kubernetes does that)",
                    self.orchestrator.kind()
                ),
            ));
        }
        if let OrchestratorConfig::Kubernetes(k) = &self.orchestrator
            && k.kubeconfig.is_none()
            && !crate::kubernetes::ambient_cluster()
        {
            odd.push((
                "orchestrator.kubeconfig".into(),
                "not set, and this machine has no KUBECONFIG, ~/.kube/config or in-cluster service account: `hale serve` here would stop at start".into(),
            ));
        }
        let core = CoreSettings {
            cluster: cluster_settings,
            pools,
            identity: Identity {
                labels: id.labels.clone(),
                strip_port: id.strip_port,
                forget_after: id.forget_after,
                max_nodes: id.max_nodes,
                create_from_alerts: id
                    .create_from_alerts
                    .unwrap_or(self.orchestrator == OrchestratorConfig::None),
            },
            source: Source {
                polling: !am.poll_interval.is_zero(),
                require_watchdog: am.require_watchdog,
                stale_after: am.stale_after(),
                hold_after_restart: am.hold_after_restart,
            },
            remediation,
            fencing,
        };
        let warnings = odd.into_iter().map(|(k, m)| err(&k, m)).collect();
        Ok(Loaded {
            config: self,
            core,
            api_token,
            webhooks,
            bmc,
            blocking,
            members,
            warnings,
            source: None,
        })
    }
}

/// Why `name`, a label's name or value as the configuration writes it, matches
/// no label: white space around it, which labels are read without.
pub(crate) fn unmatchable(what: &str, name: &str) -> Option<String> {
    (name.trim() != name).then(|| {
        format!(
            "white space around the {what}: labels are read without it, so {name:?} would match none (write {:?})",
            name.trim()
        )
    })
}

/// Whether labels as the file writes them (a selector's, an inventory node's)
/// can match: each named, no white space around a name or a value (an empty
/// value is a label's value like any other).
fn labels_match(labels: &BTreeMap<String, String>) -> Result<(), String> {
    for (name, value) in labels {
        if name.trim().is_empty() {
            return Err("a label with no name matches nothing".into());
        }
        if let Some(why) = unmatchable("label name", name)
            .or_else(|| unmatchable(&format!("value of {}", name.trim()), value))
        {
            return Err(why);
        }
    }
    Ok(())
}

/// The first of the `earlier` selectors (of pools, of node types: a node takes the
/// first it matches) that matches every node `selector` does — each of its labels
/// asked for by `selector` too — with how it does.
fn shadowed<'a>(
    earlier: impl Iterator<Item = &'a BTreeMap<String, String>>,
    selector: &BTreeMap<String, String>,
) -> Option<(usize, &'static str)> {
    let (j, first) = earlier
        .enumerate()
        .find(|(_, e)| e.iter().all(|(k, v)| selector.get(k) == Some(v)))?;
    let what = if first == selector {
        "has the same selector"
    } else {
        "asks for part of this selector, so it matches every node this one does"
    };
    Some((j, what))
}

/// The settings read on the score's scale, 0..=100, in the order
/// [`check_settings`] reads them.
const SCORE_KEYS: [&str; 4] = [
    "cordonBelow",
    "drainBelow",
    "degradedAtOrBelow",
    "maxUnavailablePercent",
];

/// The YAML reader's words for a value of the wrong shape, said as a user
/// reads them (the reader names Rust's types and its own parse states).
fn plain(said: &str) -> Option<&'static str> {
    Some(match said {
        "invalid u8" => "expected a whole number from 0 to 255",
        // The key's own range is checked once it reads (`must be 1..=100`).
        "invalid u32" => "expected a whole number from 0 to 4294967295",
        "invalid u64" | "invalid usize" => "expected a whole number from 0 to 18446744073709551615",
        "invalid floating point" => "expected a number",
        "invalid boolean" => "expected true or false",
        "expected string scalar" => "expected one value, not a list or a mapping",
        "expected mapping start" => "expected a mapping (`key: value` entries)",
        "expected sequence start" => "expected a list (`- item` entries or `[a, b]`)",
        "externally tagged enum expected scalar or mapping" => "expected one name, not a list",
        "unexpected value for unit enum variant" => "expected the name alone, with no value",
        _ => return None,
    })
}

/// Range and consistency checks for one resolved settings block; the error is
/// (key, message).
///
/// `written`: the block as the file has it; `inherited`: for a pool, the cluster's
/// `nodeHealth` it takes the rest from. A rule between two keys blames the one the
/// block wrote and says where the other's value came from.
fn check_settings(
    s: &Settings,
    at: &str,
    written: &NodeHealthOverrides,
    inherited: Option<&NodeHealthOverrides>,
    odd: &mut Vec<(String, String)>,
) -> Result<(), (String, String)> {
    let fail = |key: &str, message: String| Err((format!("{at}.{key}"), message));
    // Where a value the block did not write came from.
    let origin = |here: bool, cluster: bool| match (here, inherited) {
        (true, _) => "",
        (false, Some(_)) if cluster => " (from nodeHealth)",
        _ => " (the default)",
    };
    let values = [
        s.cordon_below,
        s.drain_below,
        s.degraded_at_or_below,
        s.max_unavailable_percent,
    ];
    for (key, value) in SCORE_KEYS.into_iter().zip(values) {
        if value > 100 {
            return fail(key, format!("{value} is outside 0..=100"));
        }
    }
    if s.drain_below > s.cordon_below {
        let cluster = inherited.unwrap_or(&NodeHealthOverrides::default()).clone();
        let why = "drain is the stronger step and must trigger lower";
        return if written.drain_below.is_some() || written.cordon_below.is_none() {
            fail(
                "drainBelow",
                format!(
                    "{} is above cordonBelow {}{}: {why}",
                    s.drain_below,
                    s.cordon_below,
                    origin(
                        written.cordon_below.is_some(),
                        cluster.cordon_below.is_some()
                    )
                ),
            )
        } else {
            fail(
                "cordonBelow",
                format!(
                    "{} is below drainBelow {}{}: {why}",
                    s.cordon_below,
                    s.drain_below,
                    origin(false, cluster.drain_below.is_some())
                ),
            )
        };
    }
    if s.cordon_below > s.degraded_at_or_below + 1
        && (written.degraded_at_or_below.is_some() || written.cordon_below.is_some())
    {
        let cluster = inherited.unwrap_or(&NodeHealthOverrides::default()).clone();
        let key = if written.degraded_at_or_below.is_some() {
            "degradedAtOrBelow"
        } else {
            "cordonBelow"
        };
        odd.push((
            format!("{at}.{key}"),
            format!(
                "degradedAtOrBelow {}{} is under cordonBelow {}{} less one: a node scoring {} is cordoned while it shows Healthy",
                s.degraded_at_or_below,
                origin(
                    written.degraded_at_or_below.is_some(),
                    cluster.degraded_at_or_below.is_some()
                ),
                s.cordon_below,
                origin(
                    written.cordon_below.is_some(),
                    cluster.cordon_below.is_some()
                ),
                s.cordon_below - 1
            ),
        ));
    }
    if s.evict_on_fault_classes.iter().any(String::is_empty) {
        return fail(
            "evictOnFaultClasses",
            "an empty class names no fault".into(),
        );
    }
    for (i, class) in written.evict_on_fault_classes.iter().flatten().enumerate() {
        if let Some(why) = unmatchable("class", class) {
            return fail(&format!("evictOnFaultClasses[{i}]"), why);
        }
    }
    // hale's own conditions for what it cannot see: nothing acts on a node that
    // has one, so a class naming one never evicts.
    for (i, class) in written.evict_on_fault_classes.iter().flatten().enumerate() {
        if BLIND_CONDITIONS
            .iter()
            .any(|b| b.eq_ignore_ascii_case(class))
        {
            odd.push((
                format!("{at}.evictOnFaultClasses[{i}]"),
                format!(
                    "{class} is hale's own condition for a node it cannot see, and nothing acts on such a node: this class never evicts"
                ),
            ));
        }
    }
    if s.heartbeat_miss_threshold == 0 {
        return fail("heartbeatMissThreshold", "must be at least 1".into());
    }
    if s.report_interval.is_zero() {
        return fail("reportIntervalSeconds", "must be at least 1".into());
    }
    if !(s.failure_tally_penalty >= 0.0 && s.failure_tally_penalty <= 100.0) {
        return fail("failureTallyPenalty", "must be within 0..=100".into());
    }
    if !(s.failure_tally_half_life_hours > 0.0 && s.failure_tally_half_life_hours.is_finite()) {
        return fail("failureTallyHalfLifeHours", "must be positive".into());
    }
    for (reason, points) in &s.penalties {
        if reason.trim().is_empty() {
            return fail("penalties", "a penalty names no reason".into());
        }
        if reason.trim() != reason {
            return fail(
                &format!("penalties.{reason}"),
                format!(
                    "white space around the reason: alerts' labels are read without it, so {reason:?} would price none (write {:?})",
                    reason.trim()
                ),
            );
        }
        if *points > 100 {
            return fail(
                &format!("penalties.{reason}"),
                format!("{points} is outside 0..=100"),
            );
        }
        if BLIND_CONDITIONS
            .iter()
            .any(|b| b.eq_ignore_ascii_case(reason))
        {
            return fail(
                &format!("penalties.{reason}"),
                "this signal means hale cannot see the node; it never costs points".into(),
            );
        }
    }
    let d = s.default_penalty;
    for (severity, points) in [
        ("info", d.info),
        ("warning", d.warning),
        ("critical", d.critical),
    ] {
        if points > 100 {
            return fail(
                &format!("defaultPenalty.{severity}"),
                format!("{points} is outside 0..=100"),
            );
        }
    }
    Ok(())
}

/// One line of block YAML as [`path_at`] reads it: where a `- ` item starts, and
/// where the key starts and what it is.
struct BlockLine<'s> {
    dash: Option<usize>,
    indent: usize,
    key: Option<&'s str>,
}

fn block_line(line: &str) -> Option<BlockLine<'_>> {
    let indent = line.len() - line.trim_start().len();
    let mut rest = &line[indent..];
    if rest.is_empty() || rest.starts_with('#') {
        return None;
    }
    let mut dash = None;
    let mut at = indent;
    while let Some(after) = rest
        .strip_prefix("- ")
        .or_else(|| (rest == "-").then_some(""))
    {
        dash.get_or_insert(at);
        let skipped = rest.len() - after.trim_start().len();
        at += skipped;
        rest = after.trim_start();
    }
    let key = rest
        .split_once(':')
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty() && !k.starts_with(['{', '[', '"', '\'']));
    Some(BlockLine {
        dash,
        indent: at,
        key,
    })
}

/// The dotted path (`pools[1].nodeHealth.penalties.SmartFailing`) of the key whose
/// value sits at `line` and `column` (1-based) of YAML text: enclosing block keys
/// and list items by indentation, then the flow mappings and sequences open on the
/// line before that column.
fn path_at(source: &str, line: usize, column: usize) -> Option<String> {
    let lines: Vec<&str> = source.lines().collect();
    let text = *lines.get(line.checked_sub(1)?)?;
    let here = block_line(text)?;
    // Block ancestry, innermost first.
    let mut outer: Vec<String> = Vec::new();
    let mut depth = here.dash.unwrap_or(here.indent);
    if here.dash.is_some() {
        outer.push(format!("[{}]", list_index(&lines, line - 1)));
    }
    for i in (0..line - 1).rev() {
        let Some(b) = block_line(lines[i]) else {
            continue;
        };
        match b.dash {
            Some(d) if d < depth => {
                outer.push(format!("[{}]", list_index(&lines, i)));
                depth = d;
            }
            _ if b.indent < depth && b.dash.is_none() => {
                outer.push(b.key?.to_string());
                depth = b.indent;
            }
            _ => {}
        }
        if depth == 0 {
            break;
        }
    }
    // Flow nesting on the line itself, up to the column.
    let upto: String = text
        .chars()
        .take(column.saturating_sub(1))
        .skip(here.indent)
        .collect();
    let mut flow: Vec<String> = Vec::new();
    let mut key: Option<String> = None;
    let mut word = String::new();
    let mut quoted: Option<char> = None;
    let mut index: Vec<Option<usize>> = Vec::new();
    for c in upto.chars() {
        if let Some(q) = quoted {
            if c == q {
                quoted = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => quoted = Some(c),
            ':' => {
                key = Some(word.trim().to_string());
                word.clear();
            }
            '{' => {
                flow.push(key.take().unwrap_or_default());
                index.push(None);
                word.clear();
            }
            '[' => {
                flow.push(format!("{}[0]", key.take().unwrap_or_default()));
                index.push(Some(0));
                word.clear();
            }
            ',' => {
                if let Some(Some(i)) = index.last_mut() {
                    *i += 1;
                    let top = flow.last_mut().expect("pushed with its index");
                    let name = top.rsplit_once('[').map_or("", |(n, _)| n).to_string();
                    *top = format!("{name}[{i}]");
                }
                key = None;
                word.clear();
            }
            '}' | ']' => {
                flow.pop();
                index.pop();
                key = None;
                word.clear();
            }
            '#' => break,
            _ => word.push(c),
        }
    }
    // At the line's own key (an unknown one, say), before its colon.
    if key.is_none() && flow.is_empty() {
        key = here.key.map(str::to_string);
    }
    let mut path = String::new();
    for part in outer.iter().rev().chain(&flow).chain(key.iter()) {
        if part.is_empty() {
            continue;
        }
        if !path.is_empty() && !part.starts_with('[') {
            path.push('.');
        }
        path.push_str(part);
    }
    (!path.is_empty()).then_some(path)
}

/// Which item of its list the `- ` line `at` (0-based) is: the items at its indent
/// above it, back to the list's key.
fn list_index(lines: &[&str], at: usize) -> usize {
    let Some(dash) = block_line(lines[at]).and_then(|b| b.dash) else {
        return 0;
    };
    let mut n = 0;
    for line in lines[..at].iter().rev() {
        let Some(b) = block_line(line) else { continue };
        match b.dash {
            Some(d) if d == dash => n += 1,
            Some(d) if d < dash => break,
            None if b.indent <= dash => break,
            _ => {}
        }
    }
    n
}

/// The line of a dotted key path (`pools[1].nodeHealth.drainBelow`) in block or
/// flow YAML. Each segment is looked for inside the block of the one before — a
/// block key indented deeper than it (at the top level, not indented at all), or
/// a flow mapping's key on one of its lines — so a key of the same name in another
/// block is never taken for it; when a segment is not written (a key the check
/// found missing), the line of the deepest one that is.
pub(crate) fn locate(source: &str, path: &str) -> Option<u64> {
    let lines: Vec<&str> = source.lines().collect();
    // The block to search (its lines), and the column its keys must be deeper than.
    let (mut from, mut end, mut parent): (usize, usize, Option<usize>) = (0, lines.len(), None);
    let mut found = None;
    for segment in path.split('.') {
        let (name, index) = match segment.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (segment, None),
        };
        let flow = [
            format!("{{ {name}:"),
            format!(", {name}:"),
            format!("{{{name}:"),
        ];
        let hit = (from..end).find(|&i| {
            let block = block_line(lines[i]).is_some_and(|b| {
                b.key == Some(name)
                    && parent.map_or(b.indent == 0 && b.dash.is_none(), |p| b.indent > p)
            });
            block || (parent.is_some() && flow.iter().any(|f| lines[i].contains(f.as_str())))
        });
        let Some(hit) = hit else { break };
        found = Some(hit);
        let indent = block_line(lines[hit]).map_or(0, |b| b.indent);
        (from, end, parent) = (hit, block_end(&lines, hit, indent), Some(indent));
        if let Some(index) = index {
            // The index-th item of the block sequence under the key; each item's
            // block ends at the next item.
            let first = (hit + 1..end).find_map(|i| block_line(lines[i])?.dash);
            let item = first.and_then(|dash| {
                (hit + 1..end)
                    .filter(|&i| block_line(lines[i]).is_some_and(|b| b.dash == Some(dash)))
                    .nth(index)
                    .map(|i| (i, dash))
            });
            let Some((i, dash)) = item else { break };
            found = Some(i);
            (from, end, parent) = (i, block_end(&lines, i, dash + 1), Some(dash));
        }
    }
    found.map(|i| i as u64 + 1)
}

/// Where the block of the key on line `at`, at `column`, ends: the first line after
/// it no deeper (a sequence's dash at the key's own column belongs to the key). For
/// a sequence item pass its dash's column + 1: the next item ends it.
fn block_end(lines: &[&str], at: usize, column: usize) -> usize {
    (at + 1..lines.len())
        .find(|&i| {
            block_line(lines[i]).is_some_and(|b| match b.dash {
                Some(d) => d < column,
                None => b.indent <= column,
            })
        })
        .unwrap_or(lines.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Severity;
    use crate::core::settings::parse_duration;

    fn load(text: &str) -> Result<Loaded, ConfigError> {
        Config::parse("hale.yaml", text)?.resolve("hale.yaml", text)
    }

    /// A static inventory past the YAML parser's default budget (250,000 nodes) is
    /// read: 40,000 entries with labels hold about 360,000.
    #[test]
    fn a_large_inventory_is_read() {
        let mut text = String::from("inventory:\n");
        for i in 0..40_000 {
            text.push_str(&format!(
                "  - {{ id: node-{i}, labels: {{ pool: gpu, rack: r{} }} }}\n",
                i % 50
            ));
        }
        assert_eq!(load(&text).unwrap().config.inventory.len(), 40_000);
        // One anchor every entry names.
        let mut text = String::from("inventory:\n  - { id: node-0, labels: &gpu { pool: gpu } }\n");
        for i in 1..500 {
            text.push_str(&format!("  - {{ id: node-{i}, labels: *gpu }}\n"));
        }
        assert_eq!(load(&text).unwrap().config.inventory.len(), 500);
    }

    #[test]
    fn empty_file_is_the_defaults() {
        let l = load("").unwrap();
        assert_eq!(l.config.listen, "127.0.0.1:9470");
        assert_eq!(l.config.alertmanager.url, "http://127.0.0.1:9093");
        assert_eq!(l.config.alertmanager.receiver, "hale");
        assert_eq!(l.config.alertmanager.stale_after(), Duration::from_secs(90));
        assert_eq!(l.config.store.path, PathBuf::from("./hale-data"));
        assert_eq!(l.core.cluster, Settings::default());
        assert_eq!(l.core.cluster.mode, Mode::Observe);
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let e = load("cluster: a\nnodeHealth:\n  cordonBelow: 50\n  cordnBelow: 40\n").unwrap_err();
        assert_eq!(e.file, "hale.yaml");
        assert_eq!(e.line, Some(4), "{e}");
        assert_eq!(e.key, "nodeHealth.cordnBelow");
        assert!(e.message.contains("unknown field"), "{e}");
    }

    /// Legal settings that are probably not what was meant load, each said as a
    /// warning naming its key and line.
    #[test]
    fn odd_settings_load_with_a_warning() {
        for (text, key) in [
            (
                "nodeIdentity: { createFromAlerts: false }",
                "nodeIdentity.createFromAlerts",
            ),
            (
                "nodeHealth: { degradedAtOrBelow: 40 }",
                "nodeHealth.degradedAtOrBelow",
            ),
            ("nodeHealth: { cordonBelow: 97 }", "nodeHealth.cordonBelow"),
            (
                "pools:\n  - { name: a, selector: {p: a}, nodeHealth: { cordonBelow: 97 } }",
                "pools[0].nodeHealth.cordonBelow",
            ),
            (
                "pools:\n  - { name: a, selector: {p: a} }\n  - { name: b, selector: {p: a} }",
                "pools[1].selector",
            ),
            (
                "pools:\n  - { name: a, selector: {p: a} }\n  - { name: b, selector: {p: a, r: b} }",
                "pools[1].selector",
            ),
            (
                "remediation:\n  nodeTypes:\n    - { name: gpu, selector: {p: gpu} }\n    - { name: gpu-r1, selector: {p: gpu, rack: r1}, maxPerDomain: 2 }",
                "remediation.nodeTypes[1].selector",
            ),
            (
                "remediation:\n  nodeTypes:\n    - { selector: {p: gpu} }\n    - { name: b, selector: {p: gpu} }",
                "remediation.nodeTypes[1].selector",
            ),
            (
                "nodeIdentity: { labels: [node, node] }",
                "nodeIdentity.labels[1]",
            ),
            (
                "orchestrator: { kind: slurm }\nfencing: { after: 30s }",
                "fencing",
            ),
            (
                "nodeHealth:\n  evictOnFaultClasses: [GPU_ECC_ERRORS, heartbeat_missed]",
                "nodeHealth.evictOnFaultClasses[1]",
            ),
            (
                "pools:\n  - { name: a, selector: {p: a}, nodeHealth: { evictOnFaultClasses: [COLLECTOR_FAILED] } }",
                "pools[0].nodeHealth.evictOnFaultClasses[0]",
            ),
            // A reboot is seen only once a heartbeat is missed (3 × 30 s).
            (
                "remediation: { returnTimeout: 60s }",
                "remediation.returnTimeout",
            ),
            (
                "remediation: { returnTimeout: 20m }\npools:\n  - { name: a, selector: {p: a}, nodeHealth: { reportIntervalSeconds: 600 } }",
                "remediation.returnTimeout",
            ),
            // Blamed on the key the file wrote, where a reboot can happen.
            (
                "orchestrator: { kind: slurm }\nnodeHealth:\n  reportIntervalSeconds: 600\n",
                "nodeHealth.reportIntervalSeconds",
            ),
            (
                "orchestrator: { kind: slurm }\npools:\n  - name: a\n    selector: {p: a}\n    nodeHealth:\n      heartbeatMissThreshold: 50\n",
                "pools[0].nodeHealth.heartbeatMissThreshold",
            ),
            // Written as its default, it is still what the file wrote; a
            // remediation block of defaults is the flow configured.
            (
                "remediation: { returnTimeout: 15m }\nnodeHealth: { reportIntervalSeconds: 900 }",
                "remediation.returnTimeout",
            ),
            (
                "remediation: {}\nnodeHealth:\n  reportIntervalSeconds: 900\n",
                "nodeHealth.reportIntervalSeconds",
            ),
            (
                "alertmanager: { pollInterval: 3d }",
                "alertmanager.pollInterval",
            ),
            ("listen: 0.0.0.0:9470", "listen"),
            ("bmc: { cipherSuite: 0 }", "bmc.cipherSuite"),
            (
                "nodeIdentity: { forgetAfter: 1m }",
                "nodeIdentity.forgetAfter",
            ),
            (
                "alertmanager: { pollInterval: 0 }\nnodeIdentity: { forgetAfter: 1h }",
                "nodeIdentity.forgetAfter",
            ),
        ] {
            let l = load(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let keys: Vec<&str> = l.warnings.iter().map(|w| w.key.as_str()).collect();
            assert_eq!(keys, [key], "{text}");
            assert!(l.warnings[0].line.is_some(), "{text}");
        }
        // No reboot can happen: no BMC, no orchestrator, no remediation block.
        for quiet in [
            "nodeHealth:\n  reportIntervalSeconds: 600\n",
            "alertmanager: { pollInterval: 0 }\nnodeIdentity: { forgetAfter: 4h }",
            "listen: '[::1]:9470'",
            "listen: '[::ffff:127.0.0.1]:9470'",
        ] {
            assert!(load(quiet).unwrap().warnings.is_empty(), "{quiet}");
        }
        // The narrowest first: each takes its own nodes.
        let narrow_first = "remediation:\n  nodeTypes:\n    - { selector: {p: gpu, rack: r1} }\n    - { selector: {p: gpu} }\n    - { selector: {p: cpu} }";
        assert!(load(narrow_first).unwrap().warnings.is_empty());
        // Credentials for an http Alertmanager travel in the clear.
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "t0k3n\n").unwrap();
        for (url, warned) in [
            ("http://am:9093", true),
            ("Http://am:9093", true),
            ("https://am:9093", false),
        ] {
            let l = load(&format!(
                "alertmanager:\n  url: {url}\n  bearerTokenFile: {}\n",
                token.display()
            ))
            .unwrap();
            let keys: Vec<&str> = l.warnings.iter().map(|w| w.key.as_str()).collect();
            let want: &[&str] = if warned {
                &["alertmanager.bearerTokenFile"]
            } else {
                &[]
            };
            assert_eq!(keys, want, "{url}");
        }
        for (url, warned) in [
            ("http://hale:pw@am:9093", true),
            ("HTTP://hale:pw@am:9093", true),
            ("http://:pw@am:9093", true),
            ("http://hale@am:9093", true),
            ("https://hale:pw@am:9093", false),
        ] {
            let l = load(&format!("alertmanager:\n  url: {url}\n")).unwrap();
            let keys: Vec<&str> = l.warnings.iter().map(|w| w.key.as_str()).collect();
            let want: &[&str] = if warned { &["alertmanager.url"] } else { &[] };
            assert_eq!(keys, want, "{url}");
            assert!(
                l.warnings.iter().all(|w| !w.message.contains("pw")),
                "{url}"
            );
        }
        // The defaults say nothing, nor does a pair that agrees, nor pools from
        // the narrowest to the widest.
        assert!(load("").unwrap().warnings.is_empty());
        assert!(
            load(
                "pools:\n  - { name: b, selector: {p: a, r: b} }\n  - { name: a, selector: {p: a} }"
            )
            .unwrap()
            .warnings
            .is_empty()
        );
        assert!(
            load("nodeHealth: { degradedAtOrBelow: 40, cordonBelow: 41, drainBelow: 30 }")
                .unwrap()
                .warnings
                .is_empty()
        );
    }

    /// A credential written into an address by mistake is never echoed back.
    #[test]
    fn a_bad_address_is_shown_without_its_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("c");
        std::fs::write(&c, "root:calvin").unwrap();
        let t = dir.path().join("t");
        std::fs::write(&t, "token").unwrap();
        for (text, key) in [
            (
                "alertmanager: { url: 'http://am:S3cret@127.0.0.1:419933' }",
                "alertmanager.url",
            ),
            (
                "inventory: [ { id: a, bmc: { address: 'ipmi://admin:S3cret@10.1.0.14:99999', credentialsFile: c } } ]",
                "inventory[0].bmc.address",
            ),
            (
                "bmc: { credentialsFile: c, addressTemplate: 'ipmi://admin:S3cret@{hostname}:623' }",
                "bmc.addressTemplate",
            ),
            (
                "orchestrator: { kind: fuzzball, url: 'https://fb:S3cret@127.0.0.1:999999/v4?token=S3cret', tokenFile: t, cli: /bin/true }",
                "orchestrator.url",
            ),
        ] {
            let text = text
                .replace("File: c", &format!("File: '{}'", c.display()))
                .replace("tokenFile: t", &format!("tokenFile: '{}'", t.display()));
            let e = load(&text).unwrap_err();
            assert_eq!(e.key, key, "{e}");
            let said = e.to_string();
            assert!(!said.contains("S3cret"), "{said}");
            assert!(
                said.contains("is not") || said.contains("carries no credentials"),
                "{said}"
            );
        }
        // A Fuzzball url that parses, with credentials in it: refused, not sent as
        // Basic (which the API does not read) nor shown.
        for url in [
            "https://fb:S3cret@fz.example/v4",
            "https://fz.example/v4?token=S3cret",
        ] {
            let e = load(&format!(
                "orchestrator: {{ kind: fuzzball, url: '{url}', cli: /bin/true }}"
            ))
            .unwrap_err();
            assert_eq!(e.key, "orchestrator.url", "{e}");
            assert!(e.to_string().contains("orchestrator.tokenFile"), "{e}");
            assert!(!e.to_string().contains("S3cret"), "{e}");
        }
        assert_eq!(
            crate::shown_address("https://u:p@w@host:1/a/b?x=y#z"),
            "https://host:1/a/b"
        );
        assert_eq!(crate::shown_address("u:p@host:623"), "host:623");
        assert_eq!(crate::shown_address("ipmi://host:623"), "ipmi://host:623");
    }

    #[test]
    fn wrong_type_names_the_key() {
        let e = load("alertmanager:\n  pollInterval: soon\n").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(2), "alertmanager.pollInterval"),
            "{e}"
        );
    }

    #[test]
    fn a_value_of_the_wrong_shape_is_said_in_the_users_words() {
        for (yaml, key, said) in [
            (
                "nodeHealth: { cordonBelow: -1 }",
                "nodeHealth.cordonBelow",
                "expected a whole number from 0 to 100",
            ),
            (
                "nodeHealth: { cordonBelow: 60.5 }",
                "nodeHealth.cordonBelow",
                "expected a whole number from 0 to 100",
            ),
            (
                "pools: [{ name: g, selector: { pool: g }, nodeHealth: { degradedAtOrBelow: -1 } }]",
                "pools[0].nodeHealth.degradedAtOrBelow",
                "expected a whole number from 0 to 100",
            ),
            (
                "nodeHealth: { penalties: { SmartFailing: -1 } }",
                "nodeHealth.penalties.SmartFailing",
                "expected a whole number from 0 to 100",
            ),
            (
                "fencing: { maxPercent: -1 }",
                "fencing.maxPercent",
                "expected a whole number from 1 to 100",
            ),
            (
                "bmc: { cipherSuite: 300 }",
                "bmc.cipherSuite",
                "expected a whole number from 0 to 255",
            ),
            (
                "alertmanager: { maxAnswerBytes: -5 }",
                "alertmanager.maxAnswerBytes",
                "expected a whole number from 0 to 18446744073709551615",
            ),
            (
                "nodeHealth: { heartbeatMissThreshold: 4294967296 }",
                "nodeHealth.heartbeatMissThreshold",
                "expected a whole number from 0 to 4294967295",
            ),
            (
                "store: { kind: }",
                "store.kind",
                "empty: give it one of sqlite, nats",
            ),
            (
                "store: { kind: '' }",
                "store.kind",
                "empty: give it one of sqlite, nats",
            ),
            (
                "store: { kind: null }",
                "store.kind",
                "empty: give it one of sqlite, nats",
            ),
            (
                "orchestrator:\n  kind:\n",
                "orchestrator.kind",
                "empty: give it one of none, kubernetes, fuzzball, slurm",
            ),
            (
                "nodeHealth: { failureTallyPenalty: lots }",
                "nodeHealth.failureTallyPenalty",
                "expected a number",
            ),
            (
                "alertmanager: { requireWatchdog: 3 }",
                "alertmanager.requireWatchdog",
                "expected true or false",
            ),
            (
                "cluster: [a]",
                "cluster",
                "expected one value, not a list or a mapping",
            ),
            (
                "orchestrator: slurm",
                "orchestrator",
                "expected a mapping (`key: value` entries)",
            ),
            (
                "pools: { name: x }",
                "pools",
                "expected a list (`- item` entries or `[a, b]`)",
            ),
            (
                "nodeHealth: { mode: [observe] }",
                "nodeHealth.mode",
                "expected one name, not a list",
            ),
            (
                "nodeHealth: { mode: { cordon: 1 } }",
                "nodeHealth.mode.cordon",
                "expected the name alone, with no value",
            ),
            (
                "alertmanager: { pollInterval: 1.5s }",
                "alertmanager.pollInterval",
                "`1.5s` is not a duration: use whole numbers, like 1500ms or 1m30s",
            ),
            (
                "alertmanager: { pollInterval: 5 s }",
                "alertmanager.pollInterval",
                "`5 s` is not a duration: write it with no spaces, like 30s or 1m30s",
            ),
        ] {
            let e = load(&format!("{yaml}\n")).unwrap_err();
            assert_eq!((e.key.as_str(), e.message.as_str()), (key, said), "{yaml}");
        }
    }

    #[test]
    fn validation_errors_name_the_line_of_the_key() {
        let text = "cluster: a\npools:\n  - name: gpu\n    selector: { pool: gpu }\n  - name: cpu\n    selector: { pool: cpu }\n    nodeHealth:\n      cordonBelow: 40\n      drainBelow: 50\n";
        let e = load(text).unwrap_err();
        assert_eq!(e.key, "pools[1].nodeHealth.drainBelow");
        assert_eq!(e.line, Some(9), "{e}");
        assert!(
            e.to_string()
                .starts_with("hale.yaml:9: pools[1].nodeHealth.drainBelow:")
        );
    }

    /// The warning for a cordon below Degraded says where each value came from.
    #[test]
    fn a_cordon_above_degraded_says_where_each_value_came_from() {
        for (text, says) in [
            (
                "nodeHealth: { degradedAtOrBelow: 70, cordonBelow: 75 }",
                "degradedAtOrBelow 70 is under cordonBelow 75 less one",
            ),
            (
                "nodeHealth: { degradedAtOrBelow: 50 }",
                "degradedAtOrBelow 50 is under cordonBelow 60 (the default) less one",
            ),
            (
                "nodeHealth: { degradedAtOrBelow: 70 }\npools:\n  - { name: a, selector: {p: a}, nodeHealth: { cordonBelow: 75 } }",
                "degradedAtOrBelow 70 (from nodeHealth) is under cordonBelow 75 less one",
            ),
            (
                "pools:\n  - { name: a, selector: {p: a}, nodeHealth: { cordonBelow: 97 } }",
                "degradedAtOrBelow 95 (the default) is under cordonBelow 97 less one",
            ),
        ] {
            let l = load(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let said: Vec<&str> = l.warnings.iter().map(|w| w.message.as_str()).collect();
            assert!(
                said.len() == 1 && said[0].starts_with(says),
                "{text}: {said:?}"
            );
        }
    }

    #[test]
    fn a_rule_between_two_keys_blames_the_one_written() {
        for (text, line, key, says) in [
            (
                "nodeHealth: { cordonBelow: 30 }",
                1,
                "nodeHealth.cordonBelow",
                "30 is below drainBelow 45 (the default)",
            ),
            (
                "nodeHealth:\n  drainBelow: 70\n",
                2,
                "nodeHealth.drainBelow",
                "70 is above cordonBelow 60 (the default)",
            ),
            (
                "nodeHealth: { cordonBelow: 50 }\npools:\n  - name: gpu\n    selector: { pool: gpu }\n    nodeHealth: { drainBelow: 55 }\n",
                5,
                "pools[0].nodeHealth.drainBelow",
                "55 is above cordonBelow 50 (from nodeHealth)",
            ),
            (
                "pools:\n  - name: gpu\n    selector: { pool: gpu }\n    nodeHealth:\n      cordonBelow: 40\n",
                5,
                "pools[0].nodeHealth.cordonBelow",
                "40 is below drainBelow 45 (the default)",
            ),
        ] {
            let e = load(text).expect_err(text);
            assert_eq!((e.line, e.key.as_str()), (Some(line), key), "{text}: {e}");
            assert!(e.message.starts_with(says), "{text}: {e}");
        }
        let e = load("inventory: [{ id: ' gpu-1' }]").unwrap_err();
        assert_eq!(e.key, "inventory[0].id");
        let e = load(&format!("inventory: [{{ id: {} }}]", "n".repeat(254))).unwrap_err();
        assert_eq!(e.key, "inventory[0].id");
        assert!(e.message.contains("at most 253"), "{e}");
        load(&format!("inventory: [{{ id: {} }}]", "n".repeat(253))).unwrap();
    }

    /// A key named in two places is found where it is the key at fault: the
    /// top-level block after a pool's of the same name, a missing key as the
    /// sibling of the mapping's last, a section that lacks a key at its own line.
    #[test]
    fn errors_name_the_key_at_fault_among_keys_of_the_same_name() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        // The node's credentials read; the cluster's, under the same key, do not.
        std::fs::create_dir(dir.path().join("a")).unwrap();
        for (text, line, key) in [
            (
                "pools:\n  - name: gpu\n    selector: { pool: gpu }\n    nodeHealth:\n      cordonBelow: 70\nnodeHealth:\n  cordonBelow: 150\n".to_string(),
                Some(7),
                "nodeHealth.cordonBelow",
            ),
            (
                format!("inventory:\n  - id: n1\n    bmc: {{ address: 10.0.0.1, credentialsFile: {d}/a }}\nbmc:\n  credentialsFile: {d}/b\n"),
                Some(5),
                "bmc.credentialsFile",
            ),
            (
                "inventory:\n  - id: n1\n    bmc: { insecure: true }\n".into(),
                Some(3),
                "inventory[0].bmc.address",
            ),
            (
                "inventory:\n  - id: n1\n    bmc:\n      insecure: true\n".into(),
                Some(4),
                "inventory[0].bmc.address",
            ),
            (
                "inventory:\n  - hostname: h\n    labels:\n      a: b\n".into(),
                Some(3),
                "inventory[0].id",
            ),
            (
                "inventory: [{hostname: h, labels: {a: b}}]\n".into(),
                Some(1),
                "inventory[0].id",
            ),
            (
                "nodeEventWebhooks:\n  - url: http://127.0.0.1:1/a\n    queueSize: 10\n".into(),
                Some(3),
                "nodeEventWebhooks[0].secretFile",
            ),
            ("cluster: a\nstore: { kind: nats }\n".into(), Some(2), "store.nats"),
            ("cluster: a\n---\ncluster: b\n".into(), Some(3), "-"),
        ] {
            let e = load(&text).expect_err(&text);
            assert_eq!((e.line, e.key.as_str()), (line, key), "{text}: {e}");
        }
        let e = load("cluster: a\n---\ncluster: b\n").unwrap_err();
        assert!(e.message.contains("one YAML document"), "{e}");
        for text in [
            "listen:\n",
            "alertmanager:\n  staleAfter:\n",
            "nodeEventWebhooks:\n  - { url: http://127.0.0.1:1/a, secretFile: s, events: }\n",
        ] {
            let e = load(text).unwrap_err();
            assert!(
                e.message.starts_with("empty: give it a value") && !e.message.contains("Option"),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn range_and_reference_checks() {
        for (text, key) in [
            ("nodeHealth: { cordonBelow: 101 }", "nodeHealth.cordonBelow"),
            (
                "nodeHealth: { heartbeatMissThreshold: 0 }",
                "nodeHealth.heartbeatMissThreshold",
            ),
            (
                "nodeHealth: { failureTallyHalfLifeHours: 0 }",
                "nodeHealth.failureTallyHalfLifeHours",
            ),
            (
                "nodeHealth: { penalties: { heartbeat_missed: 5 } }",
                "nodeHealth.penalties.heartbeat_missed",
            ),
            ("listen: nowhere", "listen"),
            ("alertmanager: { url: 'ftp://x' }", "alertmanager.url"),
            (
                "alertmanager: { pollInterval: 30s, staleAfter: 10s }",
                "alertmanager.staleAfter",
            ),
            ("pools: [{ name: a, selector: {} }]", "pools[0].selector"),
            (
                "pools: [{ name: a, selector: {p: a} }, { name: a, selector: {p: b} }]",
                "pools[1].name",
            ),
            ("inventory: [{ id: n1 }, { id: n1 }]", "inventory[1].id"),
            ("inventory: [{ id: \"n\\u200b1\" }]", "inventory[0].id"),
            ("inventory: [{ id: \"a\\u202eb\" }]", "inventory[0].id"),
            ("cluster: \"dc\\u202e1\"", "cluster"),
            ("apiTokenFile: /nonexistent/token", "apiTokenFile"),
            (
                "orchestrator: { kind: kubernetes, kubeconfig: /nonexistent/kubeconfig }",
                "orchestrator.kubeconfig",
            ),
            (
                "orchestrator: { kind: kubernetes, conditionPrefix: \"Alert Manager \" }",
                "orchestrator.conditionPrefix",
            ),
            (
                "orchestrator: { kind: kubernetes, lease: { duration: 1s } }",
                "orchestrator.lease.duration",
            ),
            (
                "orchestrator: { kind: kubernetes, lease: { name: Hale } }",
                "orchestrator.lease.name",
            ),
            (
                "orchestrator: { kind: kubernetes, lease: { name: hale- } }",
                "orchestrator.lease.name",
            ),
            (
                "orchestrator: { kind: kubernetes, lease: { name: hale..x } }",
                "orchestrator.lease.name",
            ),
            (
                "orchestrator: { kind: kubernetes, lease: { namespace: ops.hale } }",
                "orchestrator.lease.namespace",
            ),
            (
                "orchestrator: { kind: kubernetes, lease: { namespace: \"\" } }",
                "orchestrator.lease.namespace",
            ),
            (
                "orchestrator: { kind: kubernetes, evictionTimeout: 0s }",
                "orchestrator.evictionTimeout",
            ),
            (
                "orchestrator: { conditionPrefix: Hale }",
                "orchestrator.conditionPrefix",
            ),
            (
                "orchestrator:\n  kind: none\n  kubeconfig: /etc/k\n",
                "orchestrator.kubeconfig",
            ),
            (
                "orchestrator:\n  kind: kubernetes\n  kubecnfig: /etc/k\n",
                "orchestrator.kubecnfig",
            ),
            ("orchestrator: { kind: slurmish }", "orchestrator.kind"),
            (
                "store: { eventRetentionDays: 0 }",
                "store.eventRetentionDays",
            ),
            ("store: { path: '' }", "store.path"),
            ("store: { path: ~/hale-data }", "store.path"),
            ("store: { path: '$HOME/hale-data' }", "store.path"),
            (
                "alertmanager: { pollInterval: 1ms }",
                "alertmanager.pollInterval",
            ),
            (
                "alertmanager: { maxAnswerBytes: 65536 }",
                "alertmanager.maxAnswerBytes",
            ),
            (
                "orchestrator: { kind: fuzzball, url: 'https://f.example/v4', cli: /nonexistent/fuzzball }",
                "orchestrator.cli",
            ),
            (
                "orchestrator: { kind: fuzzball, url: 'https://f.example/v4', cli: no-such-fuzzball-cli }",
                "orchestrator.cli",
            ),
            (
                "nodeIdentity: { labels: [node, ''] }",
                "nodeIdentity.labels[1]",
            ),
            (
                "nodeHealth: { evictOnFaultClasses: [''] }",
                "nodeHealth.evictOnFaultClasses",
            ),
            (
                "nodeHealth: { penalties: { '': 10 } }",
                "nodeHealth.penalties",
            ),
            (
                "nodeHealth: { penalties: { ' SmartFailing ': 3 } }",
                "nodeHealth.penalties. SmartFailing ",
            ),
            (
                "nodeHealth: { penalties: { HEARTBEAT_MISSED: 3 } }",
                "nodeHealth.penalties.HEARTBEAT_MISSED",
            ),
            // White space around a label's name or value matches no label.
            (
                "nodeHealth: { evictOnFaultClasses: [gpu, ' gpu_ecc_errors'] }",
                "nodeHealth.evictOnFaultClasses[1]",
            ),
            (
                "nodeIdentity: { labels: [' node', node] }",
                "nodeIdentity.labels[0]",
            ),
            (
                "pools: [{ name: a, selector: { pool: ' a' } }]",
                "pools[0].selector",
            ),
            (
                "pools: [{ name: a, selector: { ' pool': a } }]",
                "pools[0].selector",
            ),
            (
                "pools: [{ name: a, selector: { '': a } }]",
                "pools[0].selector",
            ),
            (
                "remediation: { nodeTypes: [{ name: g, selector: { 'gpu ': 'yes' } }] }",
                "remediation.nodeTypes[0].selector",
            ),
            (
                "remediation: { failureDomainLabel: ' rack' }",
                "remediation.failureDomainLabel",
            ),
            (
                "inventory: [{ id: a1, labels: { pool: ' gpu' } }]",
                "inventory[0].labels",
            ),
            (
                "inventory: [{ id: a1, labels: { ' pool': gpu } }]",
                "inventory[0].labels",
            ),
            ("store: { kind: nats }", "store.nats"),
            (
                "store: { kind: nats, nats: { urls: [] } }",
                "store.nats.urls",
            ),
            (
                "store: { kind: nats, nats: { urls: ['nats://a:4222', 'http://b'] } }",
                "store.nats.urls[1]",
            ),
            (
                "store: { kind: nats, nats: { urls: ['nats://a:4222'], replicas: 2 } }",
                "store.nats.replicas",
            ),
            (
                "store: { kind: nats, nats: { urls: ['nats://a:4222/some/path?x=1'] } }",
                "store.nats.urls[0]",
            ),
            (
                "store: { kind: nats, nats: { urls: ['nats://a:4222'], leaseDuration: 2s } }",
                "store.nats.leaseDuration",
            ),
            (
                "store: { kind: nats, nats: { urls: ['nats://a:4222'], credsFile: '' } }",
                "store.nats.credsFile",
            ),
            ("apiTokenFile: ''", "apiTokenFile"),
            ("bmc: { credentialsFile: '' }", "bmc.credentialsFile"),
            (
                "remediation: { returnTimeout: 1s }",
                "remediation.returnTimeout",
            ),
            (
                "remediation: { returnTimeout: 15s }",
                "remediation.returnTimeout",
            ),
            (
                "remediation: { blockingAlerts: ['alertname=~\"(\"'] }",
                "remediation.blockingAlerts[0]",
            ),
            (
                "nodeEventWebhooks: [{ url: 'http://x', secretFile: /nonexistent }]",
                "nodeEventWebhooks[0].secretFile",
            ),
        ] {
            let e = load(text).expect_err(text);
            assert_eq!(e.key, key, "{text}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let readable = dir.path().join("secret");
        std::fs::write(&readable, "s3cret\n").unwrap();
        let half = format!(
            "store: {{ kind: nats, nats: {{ urls: ['tls://a:4222'], tls: {{ certFile: {} }} }} }}",
            readable.display()
        );
        assert_eq!(load(&half).unwrap_err().key, "store.nats.tls");
        let e = load(&format!(
            "nodeEventWebhooks: [{{ url: 'x', secretFile: {} }}]",
            readable.display()
        ))
        .unwrap_err();
        assert_eq!(e.key, "nodeEventWebhooks[0].url", "{e}");
        let lease =
            "orchestrator: { kind: kubernetes, lease: { name: hale.ops-1, namespace: ops-2 } }";
        load(lease).expect(lease);
    }

    #[test]
    fn pools_override_key_by_key() {
        let l = load(
            "nodeHealth: { cordonBelow: 70, penalties: { SmartFailing: 30 } }\npools:\n  - name: gpu\n    selector: { pool: gpu }\n    nodeHealth: { mode: cordon, drainBelow: 50, penalties: { GpuThrottling: 2 } }\n",
        )
        .unwrap();
        let gpu = l
            .core
            .settings_for(&BTreeMap::from([("pool".into(), "gpu".into())]));
        assert_eq!(gpu.name, "gpu");
        assert_eq!(gpu.mode, Mode::Cordon);
        assert_eq!((gpu.cordon_below, gpu.drain_below), (70, 50));
        assert_eq!(gpu.penalty("SmartFailing", Severity::Critical), 30);
        assert_eq!(gpu.penalty("GpuThrottling", Severity::Warning), 2);
        let other = l.core.settings_for(&BTreeMap::new());
        assert_eq!(other.name, "cluster");
        assert_eq!(other.penalty("GpuThrottling", Severity::Warning), 10);
        assert_eq!(other.penalty("SomethingNew", Severity::Critical), 25);

        // defaultPenalty too, severity by severity: the cluster's critical stays
        // under a pool that names only warning.
        let l = load(
            "nodeHealth: { defaultPenalty: { critical: 50 } }
pools:
  - name: gpu
    selector: { pool: gpu }
    nodeHealth: { defaultPenalty: { warning: 20 } }
",
        )
        .unwrap();
        let gpu = l
            .core
            .settings_for(&BTreeMap::from([("pool".into(), "gpu".into())]));
        assert_eq!(gpu.penalty("SomethingNew", Severity::Critical), 50);
        assert_eq!(gpu.penalty("SomethingNew", Severity::Warning), 20);
        assert_eq!(gpu.penalty("SomethingNew", Severity::Info), 0);
        let other = l.core.settings_for(&BTreeMap::new());
        assert_eq!(other.penalty("SomethingNew", Severity::Critical), 50);
        assert_eq!(other.penalty("SomethingNew", Severity::Warning), 5);
        // Out of range: the severity's key and its line.
        let e = load(
            "nodeHealth:
  defaultPenalty:
    warning: 5
    critical: 250
",
        )
        .unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.line),
            ("nodeHealth.defaultPenalty.critical", Some(4)),
            "{e}"
        );
    }

    #[test]
    fn webhooks_read_their_secret_and_check_event_types() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s3cret\n").unwrap();
        let text = format!(
            "nodeEventWebhooks:\n  - url: https://user:pw@hooks.example/hale?k=v\n    secretFile: {}\n    events: [score_changed, POLICY_ACTED]\n",
            secret.display()
        );
        let l = load(&text).unwrap();
        let w = &l.webhooks[0];
        assert_eq!(w.secret.expose(), "s3cret");
        assert_eq!(
            format!("{w:?}").matches("s3cret").count(),
            0,
            "secrets never print"
        );
        let shown = w.shown();
        let digest = shown
            .strip_prefix("https://hooks.example/…")
            .unwrap_or_default();
        assert!(
            digest.len() == 8 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
            "{shown}"
        );
        assert_eq!(
            format!("{w:?}").matches("/hale").count(),
            0,
            "nor does the path"
        );
        // A chat service's secret is in the path: never shown, only its digest.
        let slack = text.replace(
            "user:pw@hooks.example/hale?k=v",
            "hooks.slack.com/services/T00/B00/XYZSECRET",
        );
        let shown = load(&slack).unwrap().webhooks[0].shown();
        assert!(shown.starts_with("https://hooks.slack.com/…"), "{shown}");
        assert!(
            !shown.contains("XYZSECRET") && !shown.contains("services"),
            "{shown}"
        );
        // Endpoints that differ only in their query or credentials are named
        // apart; one with no path, query or credentials by its origin alone.
        let named = |url: &str| {
            let text = text.replace("https://user:pw@hooks.example/hale?k=v", url);
            load(&text).unwrap().webhooks[0].shown()
        };
        let names = [
            named("https://hooks.example/hale"),
            named("https://hooks.example/hale?token=QSECRET"),
            named("https://hooks.example/hale?token=OTHER"),
            named("https://u:QSECRET@hooks.example/hale"),
            named("https://hooks.example/?token=QSECRET"),
        ];
        assert_eq!(
            names.iter().collect::<BTreeSet<_>>().len(),
            names.len(),
            "{names:?}"
        );
        assert!(names.iter().all(|n| !n.contains("QSECRET")), "{names:?}");
        assert_eq!(named("https://hooks.example/"), "https://hooks.example");
        assert_eq!(
            w.events.as_ref().unwrap().iter().collect::<Vec<_>>(),
            ["POLICY_ACTED", "SCORE_CHANGED"]
        );
        assert_eq!((w.max_attempts, w.queue_size), (5, 1000));
        let bad = text.replace("POLICY_ACTED", "POLICY_ACTD");
        let e = load(&bad).unwrap_err();
        assert_eq!(e.key, "nodeEventWebhooks[0].events[1]");
        assert_eq!(e.line, Some(4), "{e}");
        // In block style the item's own line is named.
        let block = text.replace(
            "    events: [score_changed, POLICY_ACTED]\n",
            "    events:\n      - score_changed\n      - NOPE\n",
        );
        let e = load(&block).unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.line),
            ("nodeEventWebhooks[0].events[1]", Some(6)),
            "{e}"
        );
        let none = text.replace("[score_changed, POLICY_ACTED]", "[]");
        let e = load(&none).unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.line),
            ("nodeEventWebhooks[0].events", Some(4))
        );
        assert!(e.message.contains("would receive nothing"), "{e}");
        // The same URL twice is one endpoint sent everything twice: refused, at
        // the second entry's URL, without repeating it.
        let entry = text.split_once('\n').unwrap().1;
        let twice = format!("{text}{}", entry.replace("score_changed, ", ""));
        let e = load(&twice).unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.line),
            ("nodeEventWebhooks[1].url", Some(5)),
            "{e}"
        );
        assert!(e.message.contains("nodeEventWebhooks[0]'s URL too"), "{e}");
        assert!(!e.to_string().contains("pw@"), "{e}");
        let apart = twice.replacen("hale?k=v", "hale?k=w", 1);
        assert_eq!(load(&apart).unwrap().webhooks.len(), 2);
        let fragment = twice.replacen("hale?k=v", "hale?k=v#dup", 1);
        let e = load(&fragment).unwrap_err();
        assert_eq!(e.key, "nodeEventWebhooks[1].url", "{e}");
    }

    #[test]
    fn servers_beside_an_sqlite_store_are_checked_and_left_unused() {
        let l = load(
            "store:\n  kind: sqlite\n  path: ./hale-data\n  nats: { urls: [nats://127.0.0.1:4222], replicas: 3 }\n  eventRetentionDays: 90\n",
        )
        .unwrap();
        assert_eq!(l.config.store.kind, StoreKind::Sqlite);
        let e = load("store: { kind: sqlite, nats: { urls: ['http://b'] } }").unwrap_err();
        assert_eq!(e.key, "store.nats.urls[0]", "{e}");
        // Its files are read only by kind nats.
        load("store: { kind: sqlite, nats: { urls: ['nats://a:4222'], credsFile: /nonexistent } }")
            .unwrap();
        let e = load(
            "store: { kind: nats, nats: { urls: ['nats://a:4222'], credsFile: /nonexistent } }",
        )
        .unwrap_err();
        assert_eq!(e.key, "store.nats.credsFile", "{e}");
    }

    #[test]
    fn a_nats_store_takes_its_servers_and_defaults() {
        let l = load(
            "store: { kind: nats, nats: { urls: ['nats://a:4222', 'tls://b:4222'] }, eventRetentionDays: 7 }",
        )
        .unwrap();
        let nats = l.config.store.nats.as_ref().unwrap();
        assert_eq!(l.config.store.kind, StoreKind::Nats);
        assert_eq!(nats.urls, ["nats://a:4222", "tls://b:4222"]);
        assert_eq!(nats.replicas, 3);
        assert_eq!(nats.lease_duration, Duration::from_secs(20));
        assert_eq!(l.config.store.event_retention_days, 7);
    }

    /// What `serve` would refuse on connecting, check-config refuses: a
    /// directory where a file is meant, a kubeconfig that is none or lacks the
    /// context asked for.
    #[test]
    fn a_file_with_no_configuration_is_refused_and_braces_are_every_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hale.yaml");
        for text in ["", "\n  \n", "# all commented out\n# apiTokenFile: x\n"] {
            std::fs::write(&file, text).unwrap();
            let e = Config::load(Some(&file)).unwrap_err();
            assert!(
                e.message.contains("holds no configuration"),
                "{text:?}: {e}"
            );
        }
        std::fs::write(&file, "{}\n").unwrap();
        let loaded = Config::load(Some(&file)).unwrap();
        assert_eq!(loaded.config, Config::default());
    }

    #[test]
    fn an_orchestrators_files_are_checked_as_serve_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let kubeconfig = dir.path().join("kubeconfig");
        let good = "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://k:6443'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: prod, context: {cluster: c, user: u}}]\n";
        std::fs::write(&kubeconfig, good).unwrap();
        let kube = |extra: &str| {
            load(&format!(
                "orchestrator: {{ kind: kubernetes, kubeconfig: {d}/kubeconfig{extra} }}"
            ))
        };
        kube(", context: prod").unwrap();
        let e = kube(", context: nope").unwrap_err();
        assert_eq!(e.key, "orchestrator.context", "{e}");
        assert!(
            e.message.contains("no context `nope` (it has: prod)"),
            "{e}"
        );
        // No context named and none current: nothing says which to use.
        let e = kube("").unwrap_err();
        assert_eq!(e.key, "orchestrator.context", "{e}");
        std::fs::write(
            &kubeconfig,
            good.replace("kind: Config\n", "kind: Config\ncurrent-context: prod\n"),
        )
        .unwrap();
        kube("").unwrap();
        // The files the context's cluster and user name are held to what hale's
        // own are; another context's are the client's to meet only if used.
        for (from, to, field) in [
            (
                "{server: 'https://k:6443'}",
                "{server: 'https://k:6443', certificate-authority: /dev/zero}",
                "certificate-authority",
            ),
            ("{token: t}", "{tokenFile: /dev/zero}", "tokenFile"),
            (
                "{token: t}",
                "{client-certificate: /dev/urandom, client-key: /dev/zero}",
                "client-certificate",
            ),
        ] {
            let text = good.replace("kind: Config\n", "kind: Config\ncurrent-context: prod\n");
            std::fs::write(&kubeconfig, text.replace(from, to)).unwrap();
            let e = kube("").unwrap_err();
            assert_eq!(e.key, "orchestrator.kubeconfig", "{e}");
            assert!(
                e.message.contains(&format!("its {field}: /dev/"))
                    && e.message.contains("is not a regular file"),
                "{e}"
            );
        }
        let other = good
            .replace("kind: Config\n", "kind: Config\ncurrent-context: prod\n")
            .replace(
                "{server: 'https://k:6443'}}]",
                "{server: 'https://k:6443'}}, {name: o, cluster: {server: 'https://o:6443', certificate-authority: /dev/zero}}]",
            );
        std::fs::write(&kubeconfig, other).unwrap();
        kube("").unwrap();
        std::fs::write(&kubeconfig, "clusters: [[[").unwrap();
        let e = kube("").unwrap_err();
        assert_eq!(e.key, "orchestrator.kubeconfig", "{e}");
        assert!(e.message.contains("is no kubeconfig"), "{e}");
        // The parser quotes the lines around its fault: a kubeconfig's are secrets.
        std::fs::write(
            &kubeconfig,
            "users:\n- name: u\n  user:\n    token: S3CRET-TOKEN\n  bad: [x\ncontexts:\n",
        )
        .unwrap();
        let e = kube("").unwrap_err();
        assert!(
            e.message.contains("line 6") && !e.message.contains("S3CRET"),
            "{e}"
        );
        for text in [
            format!("orchestrator: {{ kind: kubernetes, kubeconfig: {d} }}"),
            format!("orchestrator: {{ kind: slurm, slurmConf: {d} }}"),
        ] {
            let e = load(&text).unwrap_err();
            assert!(e.key.starts_with("orchestrator."), "{e}");
            assert!(e.message.contains("is a directory, not a file"), "{e}");
        }
        // BMC credentials may be a directory (of username and password).
        std::fs::write(dir.path().join("username"), "admin").unwrap();
        std::fs::write(dir.path().join("password"), "pw").unwrap();
        load(&format!("bmc: {{ credentialsFile: {d} }}")).unwrap();
    }

    /// A file that is not UTF-8 names the line and byte; one without end (a
    /// device named by mistake) is read no further than any configuration goes.
    #[test]
    fn a_configuration_is_utf8_text_of_bounded_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hale.yaml");
        std::fs::write(&path, b"listen: 127.0.0.1:9470\nmode: obs\xffrve\n").unwrap();
        let e = Config::load(Some(&path)).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert!(
            e.message.contains("byte 10 of the line is not UTF-8"),
            "{e}"
        );
        let e = Config::load(Some(Path::new("/dev/zero"))).unwrap_err();
        assert!(e.message.contains("holds more than 64 MiB"), "{e}");
    }

    /// A secret's, credentials' or certificate's path set to a device, a pipe or
    /// a file larger than any of them is refused at once, naming its key: read,
    /// `/dev/zero` took memory until none was left, and a pipe with no writer
    /// held a start for the 30 s of [`READ_WITHIN`].
    #[test]
    fn a_device_a_pipe_or_a_huge_file_is_no_secret() {
        let dir = tempfile::tempdir().unwrap();
        let pipe = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&pipe)
            .status()
            .unwrap();
        assert!(made.success());
        let huge = dir.path().join("huge");
        let file = std::fs::File::create(&huge).unwrap();
        file.set_len(crate::MAX_SMALL_FILE + 1).unwrap();
        for (key, text, said) in [
            (
                "apiTokenFile",
                "apiTokenFile: /dev/zero".to_string(),
                "is not a regular file",
            ),
            (
                "apiTokenFile",
                format!("apiTokenFile: {}", pipe.display()),
                "is not a regular file",
            ),
            (
                "apiTokenFile",
                format!("apiTokenFile: {}", huge.display()),
                "holds more than 4 MiB",
            ),
            (
                "nodeEventWebhooks[0].secretFile",
                "nodeEventWebhooks:\n  - url: http://127.0.0.1:1/a\n    secretFile: /dev/urandom"
                    .to_string(),
                "is not a regular file",
            ),
            (
                "alertmanager.caFile",
                "alertmanager: { url: https://127.0.0.1:1, caFile: /dev/zero }".to_string(),
                "is not a regular file",
            ),
            (
                "bmc.credentialsFile",
                format!("bmc: {{ credentialsFile: {} }}", pipe.display()),
                "is not a regular file",
            ),
        ] {
            let started = std::time::Instant::now();
            let e = load(&text).unwrap_err();
            assert_eq!(e.key, key, "{e}");
            assert!(e.message.contains(said), "{e}");
            assert!(started.elapsed() < std::time::Duration::from_secs(5), "{e}");
        }
    }

    /// A path a shell would expand is taken as written, and said to be: a store
    /// under `~` would be a directory named `~` where hale runs.
    #[test]
    fn paths_are_not_expanded_and_say_so() {
        let e = load("apiTokenFile: ~/token\n").unwrap_err();
        assert_eq!(e.key, "apiTokenFile", "{e}");
        assert!(e.message.contains("does not expand `~`"), "{e}");
        let e = load("store: { path: ~/hale-data }\n").unwrap_err();
        assert!(
            e.message
                .starts_with("~/hale-data would be made as written")
                && e.message.contains("does not expand `~`"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let unusual = dir.path().join("~data");
        let l = load(&format!("store: {{ path: {} }}\n", unusual.display())).unwrap();
        assert_eq!(l.config.store.path, unusual);
    }

    #[test]
    fn every_unreadable_file_is_named_in_one_run() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        // Named in the file's order, whatever kind of file each is.
        let text = format!(
            "bmc: {{ caFile: {}/ca.pem }}\napiTokenFile: {}/token\nnodeEventWebhooks:\n  - url: http://127.0.0.1:1/a\n    secretFile: {}/secret\n  - url: http://127.0.0.1:1/b\n    secretFile: {}\n",
            dir.path().display(),
            dir.path().display(),
            dir.path().display(),
            empty.display()
        );
        let e = load(&text).unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("bmc.caFile", Some(1)), "{e}");
        let shown = e.to_string();
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines.len(), 4, "{shown}");
        assert!(
            lines[0].starts_with("hale.yaml:1: bmc.caFile: cannot read"),
            "{shown}"
        );
        assert!(
            lines[1].starts_with("hale.yaml:2: apiTokenFile: cannot read"),
            "{shown}"
        );
        assert!(
            lines[2].starts_with("hale.yaml:5: nodeEventWebhooks[0].secretFile: cannot read"),
            "{shown}"
        );
        assert!(
            lines[3].starts_with("hale.yaml:7: nodeEventWebhooks[1].secretFile:")
                && lines[3].ends_with("is empty"),
            "{shown}"
        );
        // A token written with or without its trailing newline reads the same.
        for token in ["t0k3n", "t0k3n\n", " t0k3n\r\n", "\u{feff}t0k3n\n"] {
            std::fs::write(dir.path().join("token"), token).unwrap();
            let l = load(&format!("apiTokenFile: {}/token\n", dir.path().display())).unwrap();
            assert_eq!(l.api_token.as_ref().unwrap().expose(), "t0k3n");
        }
        // A token is one word: two lines, or a space inside, could never match.
        for token in ["line1\nline2\n", "t0k 3n", "t0k\t3n"] {
            std::fs::write(dir.path().join("token"), token).unwrap();
            let e = load(&format!("apiTokenFile: {}/token\n", dir.path().display())).unwrap_err();
            assert_eq!((e.key.as_str(), e.line), ("apiTokenFile", Some(1)), "{e}");
            assert!(e.message.contains("a token is one word"), "{e}");
            let fuzzball = format!(
                "orchestrator:\n  kind: fuzzball\n  url: https://f.example/v4\n  tokenFile: {}/token\n",
                dir.path().display()
            );
            let e = load(&fuzzball).unwrap_err();
            assert_eq!(e.key, "orchestrator.tokenFile", "{e}");
            assert!(e.message.contains("a token is one word"), "{e}");
        }
        // A password or a signing secret is one line: a second would become part
        // of it.
        std::fs::write(dir.path().join("secret"), "line1\nline2\n").unwrap();
        for (config, key) in [
            (
                "alertmanager: { url: http://am:9093, basicAuth: { username: u, passwordFile: SECRET } }\n",
                "alertmanager.basicAuth.passwordFile",
            ),
            (
                "nodeEventWebhooks: [{ url: https://hook.example/x, secretFile: SECRET }]\n",
                "nodeEventWebhooks[0].secretFile",
            ),
        ] {
            let secret = dir.path().join("secret");
            let e = load(&config.replace("SECRET", &secret.display().to_string())).unwrap_err();
            assert_eq!(e.key, key, "{e}");
            assert!(e.message.contains("a secret is one line"), "{e}");
            assert!(!e.message.contains("line2"), "{e}");
        }
        // Nor could a character beyond ASCII, in an HTTP header.
        for token in ["p\u{e4}ss", "t0k\u{200b}3n"] {
            std::fs::write(dir.path().join("token"), token).unwrap();
            let e = load(&format!("apiTokenFile: {}/token\n", dir.path().display())).unwrap_err();
            assert_eq!((e.key.as_str(), e.line), ("apiTokenFile", Some(1)), "{e}");
            assert!(e.message.contains("beyond ASCII"), "{e}");
        }
        // The orchestrator's files are among them, whatever its kind.
        let d = dir.path().join("missing");
        let d = d.display();
        for (orchestrator, keys) in [
            (
                format!("  kind: kubernetes\n  kubeconfig: {d}/kubeconfig\n"),
                vec!["orchestrator.kubeconfig"],
            ),
            (
                format!(
                    "  kind: fuzzball\n  url: https://f.example/v4\n  tokenFile: {d}/t\n  caFile: {d}/ca.pem\n"
                ),
                vec!["orchestrator.tokenFile", "orchestrator.caFile"],
            ),
            (
                format!("  kind: slurm\n  slurmConf: {d}/slurm.conf\n"),
                vec!["orchestrator.slurmConf"],
            ),
        ] {
            let text = format!("apiTokenFile: {d}/token\norchestrator:\n{orchestrator}");
            let shown = load(&text).unwrap_err().to_string();
            let lines: Vec<&str> = shown.lines().collect();
            assert_eq!(lines.len(), 1 + keys.len(), "{shown}");
            assert!(lines[0].contains("apiTokenFile: cannot read"), "{shown}");
            for (line, key) in lines[1..].iter().zip(keys) {
                assert!(line.contains(&format!("{key}: cannot read")), "{shown}");
            }
        }
    }

    #[test]
    fn ui_and_federation_keys_are_checked_and_name_the_key_at_fault() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "west-t0k3n\n").unwrap();
        let pem = dir.path().join("not-a-ca.pem");
        std::fs::write(&pem, "hello\n").unwrap();
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nothing"), &dangling).unwrap();
        let l = load(&format!(
            "cluster: east\nfederation:\n  timeout: 2s\n  members:\n    - {{ name: west, url: 'https://west:9470', tokenFile: {} }}\n    - {{ name: north, url: 'http://north:9470/' }}\n",
            token.display()
        ))
        .unwrap();
        assert_eq!(l.config.federation.timeout, Duration::from_secs(2));
        let names: Vec<&str> = l.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["west", "north"]);
        assert_eq!(l.members[0].token.as_ref().unwrap().expose(), "west-t0k3n");
        assert!(l.members[1].token.is_none());
        assert!(!load("").unwrap().config.ui.require_token);
        for (text, line, key, says) in [
            (
                "ui:\n  requireToken: true\n".to_string(),
                2,
                "ui.requireToken",
                "needs apiTokenFile",
            ),
            (
                "cluster: east\nfederation:\n  members:\n    - { name: east, url: 'http://e:1' }\n".into(),
                4,
                "federation.members[0].name",
                "this hale's own cluster",
            ),
            (
                "federation:\n  members:\n    - { name: a, url: 'http://a:1' }\n    - { name: a, url: 'http://b:1' }\n".into(),
                4,
                "federation.members[1].name",
                "listed twice",
            ),
            (
                "federation:\n  members:\n    - { name: ' a', url: 'http://a:1' }\n".into(),
                3,
                "federation.members[0].name",
                "without spaces",
            ),
            (
                "federation:\n  members:\n    - { name: a, url: 'http://user:pw@a:1' }\n".into(),
                3,
                "federation.members[0].url",
                "without credentials",
            ),
            (
                "federation:\n  members:\n    - { name: a, url: 'ftp://a' }\n".into(),
                3,
                "federation.members[0].url",
                "http(s) URL",
            ),
            (
                format!(
                    "federation:\n  members:\n    - {{ name: a, url: 'http://a:1', caFile: {} }}\n",
                    pem.display()
                ),
                3,
                "federation.members[0].caFile",
                "https member",
            ),
            (
                format!(
                    "federation:\n  members:\n    - {{ name: a, url: 'https://a:1', caFile: {} }}\n",
                    pem.display()
                ),
                3,
                "federation.members[0].caFile",
                "no PEM certificate",
            ),
            (
                "federation:\n  members:\n    - { name: a, url: 'http://a:1', tokenFile: /nonexistent/t }\n".into(),
                3,
                "federation.members[0].tokenFile",
                "cannot read",
            ),
            (
                "federation:\n  members:\n    - { name: '*', url: 'http://a:1' }\n".into(),
                3,
                "federation.members[0].name",
                "every cluster",
            ),
            (
                "cluster: '*'\n".into(),
                1,
                "cluster",
                "not `*`",
            ),
            (
                "cluster: ' east'\n".into(),
                1,
                "cluster",
                "no spaces around it",
            ),
            // A pool is named as a cluster is: its name comes back in the API.
            (
                "pools:\n  - { name: ' gpu', selector: { p: a } }\n".into(),
                2,
                "pools[0].name",
                "no spaces around it",
            ),
            (
                "pools:\n  - { name: \"g\\npu\", selector: { p: a } }\n".into(),
                2,
                "pools[0].name",
                "no control",
            ),
            (
                "pools:\n  - { name: '*', selector: { p: a } }\n".into(),
                2,
                "pools[0].name",
                "nor `*`",
            ),
            (
                format!(
                    "cluster: {}\nstore:\n  kind: nats\n  nats: {{ urls: [nats://n:4222] }}\n",
                    "b".repeat(243)
                ),
                1,
                "cluster",
                "JetStream takes at most 255",
            ),
            // Settings that contradict each other, or have nothing to apply to.
            (
                "store:\n  nats:\n    urls: ['nats://hale:pw@n:4222']\n    credsFile: /etc/passwd\n".into(),
                4,
                "store.nats.credsFile",
                "keep one",
            ),
            (
                "orchestrator:\n  kind: fuzzball\n  url: http://fuzzball.example/v4\n  caFile: /etc/passwd\n".into(),
                4,
                "orchestrator.caFile",
                "not https",
            ),
            (
                "store:\n  path: /etc/passwd\n".into(),
                2,
                "store.path",
                "is a file",
            ),
            (
                "alertmanager:\n  url: 'http://::1:9093'\n".into(),
                2,
                "alertmanager.url",
                "an IPv6 address goes in brackets, as in http://[::1]:9093",
            ),
            (
                "listen: '::1:9470'\n".into(),
                1,
                "listen",
                "like 127.0.0.1:9470 or [::1]:9470",
            ),
            (
                "store:\n  path: /dev/null\n".into(),
                2,
                "store.path",
                "/dev/null is not a directory",
            ),
            (
                "store:\n  path: /etc/passwd/data\n".into(),
                2,
                "store.path",
                "is inside /etc/passwd, which is not a directory",
            ),
            (
                format!("store:\n  path: {}\n", dangling.display()),
                2,
                "store.path",
                "is a symbolic link to nothing",
            ),
            (
                format!("nodeEventWebhooks:\n  - {{ url: 'https://x.example/h', secretFile: {}, queueSize: 9223372036854775808 }}\n", token.display()),
                2,
                "nodeEventWebhooks[0].queueSize",
                "must be 1..=10000000",
            ),
            (
                "federation:\n  timeout: 2m\n".into(),
                2,
                "federation.timeout",
                "between 1ms and 60s",
            ),
            (
                "federation:\n  members:\n    - { name: a }\n".into(),
                3,
                "federation.members[0].url",
                "`url` is required here",
            ),
            // An empty flow mapping is its key's: the missing one is inside it.
            (
                "remediation:\n  window: {}\n".into(),
                2,
                "remediation.window.start",
                "`start` is required here",
            ),
            (
                "remediation: { drainTimeout: 10m, window: { days: [mon] } }\n".into(),
                1,
                "remediation.window.start",
                "`start` is required here",
            ),
            (
                "remediation:\n  window:\n    start: '09:00'\n    end: '10:00'\n    timeZone:\n"
                    .into(),
                5,
                "remediation.window.timeZone",
                "empty: give it a value",
            ),
            (
                "remediation:\n  window: { start: '24:00', end: '10:00' }\n".into(),
                2,
                "remediation.window.start",
                "24:00 only ends a window",
            ),
            // A window left empty is refused: not read as no window at all.
            (
                "remediation:\n  window:\n".into(),
                2,
                "remediation.window",
                "empty: give it a value",
            ),
            // A safeguard written empty is refused: never read as left out, which
            // turns it off (fencing, the API token) or falls back to another
            // (ambient credentials, the system's CAs).
            (
                "fencing:\n".into(),
                1,
                "fencing",
                "empty: `fencing: {}` turns fencing on with its defaults",
            ),
            ("fencing: ~\n".into(), 1, "fencing", "empty: `fencing: {}`"),
            // Left empty inside a flow mapping: the key, not its mapping.
            (
                "remediation:\n  window: { start: '09:00', end: '17:00', timeZone: }\n".into(),
                2,
                "remediation.window.timeZone",
                "empty: give it a value",
            ),
            (
                "nodeHealth: { mode: , cordonBelow: 50 }\n".into(),
                1,
                "nodeHealth.mode",
                "empty: give it a value",
            ),
            (
                "fencing: { after: , maxPercent: 10 }\n".into(),
                1,
                "fencing.after",
                "empty: give it a value",
            ),
            (
                "remediation: { window: {timeZone: , start: '09:00', end: '17:00'} }\n".into(),
                1,
                "remediation.window.timeZone",
                "empty: give it a value",
            ),
            (
                "cluster: a\napiTokenFile:\n".into(),
                2,
                "apiTokenFile",
                "empty: give it a value",
            ),
            (
                "alertmanager:\n  url: https://am:9093\n  caFile:\n".into(),
                3,
                "alertmanager.caFile",
                "empty: give it a value",
            ),
            (
                "bmc:\n  credentialsFile: null\n".into(),
                2,
                "bmc.credentialsFile",
                "empty: give it a value",
            ),
            (
                "orchestrator:\n  kind: kubernetes\n  kubeconfig:\n".into(),
                3,
                "orchestrator.kubeconfig",
                "empty: give it a value",
            ),
            // A setting written empty is refused as other keys are, not read as
            // its default (`mode:` is not `observe` by a slip).
            (
                "nodeHealth:\n  mode:\n".into(),
                2,
                "nodeHealth.mode",
                "empty: give it a value",
            ),
            (
                "pools:\n  - name: a\n    selector: { p: a }\n    nodeHealth:\n      cordonBelow: ~\n".into(),
                5,
                "pools[0].nodeHealth.cordonBelow",
                "empty: give it a value",
            ),
            (
                "orchestrator:\n  kind: slurm\n  slurmConf:\n".into(),
                3,
                "orchestrator.slurmConf",
                "empty: give it a value",
            ),
            (
                "orchestrator:\n  kind: fuzzball\n  url: https://f.example/v4\n  caFile:\n".into(),
                4,
                "orchestrator.caFile",
                "empty: give it a value",
            ),
            (
                "store:\n  nats:\n    urls: [nats://n:4222]\n    tls:\n".into(),
                4,
                "store.nats.tls",
                "empty: give it a value",
            ),
            // `days:` left empty is refused, as `[]` is; left out, every day.
            (
                "remediation:\n  window:\n    days:\n    start: '09:00'\n    end: '17:00'\n".into(),
                3,
                "remediation.window.days",
                "empty: give it a value",
            ),
        ] {
            let e = load(&text).unwrap_err();
            assert_eq!((e.key.as_str(), e.line), (key, Some(line)), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn alertmanager_credentials_and_ca_are_checked_and_name_the_key_at_fault() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        std::fs::write(dir.path().join("password"), "s3cret\n").unwrap();
        std::fs::write(dir.path().join("token"), "t0k3n\n").unwrap();
        std::fs::write(dir.path().join("empty"), "\n").unwrap();
        std::fs::write(dir.path().join("not-a-ca.pem"), "hello\n").unwrap();
        let l = load(&format!(
            "alertmanager:\n  url: https://am:9093\n  basicAuth: {{ username: hale, passwordFile: {d}/password }}\n"
        ))
        .unwrap();
        let basic = l.config.alertmanager.basic_auth.unwrap();
        assert_eq!(basic.username, "hale");
        let l = load(&format!(
            "alertmanager:\n  url: http://am:9093\n  bearerTokenFile: {d}/token\n"
        ))
        .unwrap();
        assert!(l.config.alertmanager.bearer_token_file.is_some());
        for (text, line, key, says) in [
            (
                format!("alertmanager:\n  url: http://am:9093\n  caFile: {d}/not-a-ca.pem\n"),
                3,
                "alertmanager.caFile",
                "https Alertmanager",
            ),
            (
                format!("alertmanager:\n  url: https://am:9093\n  caFile: {d}/not-a-ca.pem\n"),
                3,
                "alertmanager.caFile",
                "no PEM certificate",
            ),
            (
                format!(
                    "alertmanager:\n  basicAuth: {{ username: hale, passwordFile: {d}/password }}\n  bearerTokenFile: {d}/token\n"
                ),
                3,
                "alertmanager.bearerTokenFile",
                "a request carries one",
            ),
            (
                format!(
                    "alertmanager:\n  url: http://u:p@am:9093\n  basicAuth: {{ username: hale, passwordFile: {d}/password }}\n"
                ),
                3,
                "alertmanager.basicAuth",
                "holds credentials too",
            ),
            (
                format!(
                    "alertmanager:\n  basicAuth:\n    username: 'ha:le'\n    passwordFile: {d}/password\n"
                ),
                3,
                "alertmanager.basicAuth.username",
                "without `:`",
            ),
            (
                format!(
                    "alertmanager:\n  basicAuth: {{ username: hale, passwordFile: {d}/empty }}\n"
                ),
                2,
                "alertmanager.basicAuth.passwordFile",
                "is empty",
            ),
            (
                "alertmanager:\n  bearerTokenFile: /nonexistent/t\n".into(),
                2,
                "alertmanager.bearerTokenFile",
                "cannot read",
            ),
            (
                "alertmanager:\n  basicAuth: { username: hale }\n".into(),
                2,
                "alertmanager.basicAuth.passwordFile",
                "`passwordFile` is required here",
            ),
        ] {
            let e = load(&text).unwrap_err();
            assert_eq!((e.key.as_str(), e.line), (key, Some(line)), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn text_that_is_not_yaml_is_named_by_its_line_alone() {
        for (text, line) in [
            (
                "inventory:\n  - id: a\nnodeHealth:\n  mode: observe\n  - id: b\n",
                5,
            ),
            (
                "alertmanager:\n  url: http://a:9093\n    pollInterval: 5s\n",
                3,
            ),
        ] {
            let e = load(text).unwrap_err();
            assert_eq!((e.key.as_str(), e.line), ("-", Some(line)), "{text}: {e}");
            assert!(
                e.to_string().starts_with(&format!("hale.yaml:{line}: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn errors_name_the_whole_path_of_the_key_at_fault() {
        for (text, line, key) in [
            (
                "nodeHealth: { penalties: { SmartFailing: -5 } }",
                1,
                "nodeHealth.penalties.SmartFailing",
            ),
            (
                "nodeHealth:\n  penalties: { SmartFailing: -5 }\n",
                2,
                "nodeHealth.penalties.SmartFailing",
            ),
            (
                "pools: [{ name: a, selector: {p: a} }, { name: b, selector: {p: b}, nodeHealth: { cordonBelow: x } }]",
                1,
                "pools[1].nodeHealth.cordonBelow",
            ),
            (
                "pools:\n  - name: a\n    selector: { p: a }\n  - name: b\n    selector: { p: b }\n    nodeHealth:\n      drainBelow: many\n",
                7,
                "pools[1].nodeHealth.drainBelow",
            ),
            (
                "alertmanager: { pollInterval: 30s, staleAfter: 'soon' }",
                1,
                "alertmanager.staleAfter",
            ),
            (
                "cluster: a\nnodeHealth:\n  cordnBelow: 40\n",
                3,
                "nodeHealth.cordnBelow",
            ),
            // Each orchestrator kind takes its own keys, and only those.
            (
                "orchestrator:\n  kind: fuzzball\n  url: 'ftp://fz/v4'\n",
                3,
                "orchestrator.url",
            ),
            (
                "orchestrator:\n  kind: fuzzball\n  url: https://fz/v4\n  conditionPrefix: X\n",
                4,
                "orchestrator.conditionPrefix",
            ),
            (
                "orchestrator:\n  kind: kubernetes\n  cli: /usr/bin/fuzzball\n",
                3,
                "orchestrator.cli",
            ),
            (
                "orchestrator:\n  kind: fuzzball\n  url: https://fz/v4\n  tokenFile: /nonexistent/token\n",
                4,
                "orchestrator.tokenFile",
            ),
            (
                "orchestrator:\n  kind: fuzzball\n  url: https://fz/v4\n  nodeName: fqdn\n",
                4,
                "orchestrator.nodeName",
            ),
            (
                "orchestrator:\n  kind: slurm\n  url: https://fz/v4\n",
                3,
                "orchestrator.url",
            ),
            (
                "orchestrator:\n  kind: slurm\n  slurmConf: /nonexistent/slurm.conf\n",
                3,
                "orchestrator.slurmConf",
            ),
        ] {
            let e = load(text).expect_err(text);
            assert_eq!((e.line, e.key.as_str()), (Some(line), key), "{text}: {e}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("3x").is_err());
        assert!(parse_duration("-5s").is_err());
        assert!(parse_duration("36500d").is_ok());
        assert!(parse_duration("100000000d").is_err());
        // As Prometheus writes them: several units in one.
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse_duration("1s500ms"), Ok(Duration::from_millis(1500)));
        for bad in [
            "1m30", "m30s", "", "1m-30s", "30 s", "30s1m", "1m1m", "2d1w",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_duration("100000d"),
            Err("`100000d` is longer than a century".into())
        );
        assert_eq!(
            parse_duration("99999999999999999999s"),
            Err("`99999999999999999999s` is longer than a century".into())
        );
        assert!(parse_duration("99999999999999999999999s").is_err());
    }
}
