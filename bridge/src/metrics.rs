//! `/metrics`: hale's own health (source, polls, ingest, store) as ordinary
//! prometheus-client metrics, and the node series rendered from the fleet at scrape
//! time — so a decommissioned node's series vanish with it and an unscored node never
//! has a score series.

use std::borrow::Cow;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::alertmanager::IngestError;
use crate::config::Loaded;
use crate::core::policy::Action;
use crate::core::settings::Settings;
use crate::core::{Health, KNOWN_CONDITIONS, Node};
use crate::fleet_lock::FleetLock;
use crate::label_value;
use crate::notify::WebhookMetrics;
use crate::orchestrator::{Orchestrator, OrchestratorError};
use crate::store::StoreError;

/// `hale_build_info`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
    pub commit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    pub path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabel {
    pub operation: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BmcLabel {
    pub kind: String,
    pub operation: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BmcOperationLabel {
    pub kind: String,
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    pub action: String,
    pub result: String,
}

/// hale's own metrics.
#[derive(Debug)]
pub struct Metrics {
    pub source_up: Gauge,
    pub last_trusted: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub poll_duration: Histogram,
    pub polls: Family<ResultLabel, Counter>,
    pub ingested: Family<PathLabel, Counter>,
    pub unmatched: Counter,
    pub webhook_requests: Family<CodeLabel, Counter>,
    pub store_bytes_used: Gauge,
    pub store_bytes_max: Gauge,
    pub config_reload_successful: Gauge,
    pub config_reload_success_at: Gauge,
    pub webhooks: WebhookMetrics,
    pub store_write_failures: Family<ReasonLabel, Counter>,
    pub policy_actions: Family<ActionLabel, Counter>,
    pub nodes_refused: Counter,
    pub orchestrator_failures: Family<OperationLabel, Counter>,
    pub holding: Gauge,
    pub remediations: Family<ActionLabel, Counter>,
    pub remediation_in_flight: Gauge,
    pub bmc: Arc<BmcMetrics>,
    leader: Gauge,
    pub ready: Gauge,
    nodes: NodeSeries,
    /// The last exposition's length: the next one is allocated at once.
    rendered: AtomicUsize,
    /// The nodes whose series the last render wrote.
    rendered_nodes: AtomicUsize,
    registry: Registry,
}

/// Every BMC request, by kind, operation and result, and how long it took.
#[derive(Debug)]
pub struct BmcMetrics {
    pub requests: Family<BmcLabel, Counter>,
    pub duration: Family<BmcOperationLabel, Histogram>,
}

impl crate::bmc::Observer for BmcMetrics {
    fn request(&self, kind: &'static str, operation: &'static str, result: &str, secs: f64) {
        self.requests
            .get_or_create(&BmcLabel {
                kind: kind.into(),
                operation: operation.into(),
                result: result.into(),
            })
            .inc();
        self.duration
            .get_or_create(&BmcOperationLabel {
                kind: kind.into(),
                operation: operation.into(),
            })
            .observe(secs);
    }
}

impl Metrics {
    /// Register everything; the node series are read from `fleet` at each scrape.
    pub fn new(
        fleet: Arc<FleetLock>,
        config: Arc<RwLock<Arc<Loaded>>>,
        orchestrator: Arc<dyn Orchestrator>,
    ) -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            source_up: Gauge::default(),
            last_trusted: Gauge::default(),
            poll_duration: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            polls: Family::default(),
            ingested: Family::default(),
            unmatched: Counter::default(),
            webhook_requests: Family::default(),
            store_bytes_used: Gauge::default(),
            store_bytes_max: Gauge::default(),
            config_reload_successful: Gauge::default(),
            config_reload_success_at: Gauge::default(),
            webhooks: WebhookMetrics::default(),
            store_write_failures: Family::default(),
            policy_actions: Family::default(),
            nodes_refused: Counter::default(),
            orchestrator_failures: Family::default(),
            holding: Gauge::default(),
            remediations: Family::default(),
            remediation_in_flight: Gauge::default(),
            bmc: Arc::new(BmcMetrics {
                requests: Family::default(),
                duration: Family::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.05, 2.0, 12))
                }),
            }),
            leader: Gauge::default(),
            ready: Gauge::default(),
            nodes: NodeSeries {
                fleet,
                config,
                orchestrator,
            },
            rendered: AtomicUsize::new(0),
            rendered_nodes: AtomicUsize::new(0),
            registry: Registry::default(),
        };
        registry.register(
            "hale_alert_source_up",
            "1 while Alertmanager answers and its answer is trusted (holds the watchdog)",
            m.source_up.clone(),
        );
        registry.register(
            "hale_alert_source_last_trusted_timestamp_seconds",
            "Unix time of the last trusted input from Alertmanager",
            m.last_trusted.clone(),
        );
        registry.register(
            "hale_alertmanager_poll_duration_seconds",
            "Time to fetch, parse and ingest one Alertmanager poll",
            m.poll_duration.clone(),
        );
        registry.register(
            "hale_alertmanager_polls",
            "Alertmanager polls by result (trusted, untrusted, or the error kind)",
            m.polls.clone(),
        );
        registry.register(
            "hale_alerts_ingested",
            "Alerts ingested, by path (poll or webhook)",
            m.ingested.clone(),
        );
        registry.register(
            "hale_alerts_unmatched",
            "Alerts that named no node (by the nodeIdentity labels) and were ignored",
            m.unmatched.clone(),
        );
        registry.register(
            "hale_alertmanager_webhook_requests",
            "Alertmanager webhook deliveries received, by HTTP status answered",
            m.webhook_requests.clone(),
        );
        registry.register(
            "hale_store_bytes_used",
            "Bytes the store occupies on disk",
            m.store_bytes_used.clone(),
        );
        registry.register(
            "hale_store_bytes_max",
            "store.maxBytes, the store's disk budget (0 when none is configured)",
            m.store_bytes_max.clone(),
        );
        registry.register(
            "hale_config_last_reload_successful",
            "1 when the last reload (SIGHUP, POST /-/reload) took the file, or none was tried; 0 when it was refused and the running configuration is no longer the file's",
            m.config_reload_successful.clone(),
        );
        registry.register(
            "hale_config_last_reload_success_timestamp_seconds",
            "When the configuration file was last taken, at start or by a reload",
            m.config_reload_success_at.clone(),
        );
        m.webhooks.register(&mut registry);
        registry.register(
            "hale_store_write_failures",
            "Store writes that failed (state is kept in memory and retried)",
            m.store_write_failures.clone(),
        );
        registry.register(
            "hale_policy_actions",
            "Actions performed through the orchestrator (policy and operators), by result",
            m.policy_actions.clone(),
        );
        registry.register(
            "hale_nodes_refused",
            "New nodes alerts named beyond nodeIdentity.maxNodes, refused (counted per input)",
            m.nodes_refused.clone(),
        );
        registry.register(
            "hale_orchestrator_failures",
            "Orchestrator operations that failed, by operation and reason (transient, refused, unconfirmed)",
            m.orchestrator_failures.clone(),
        );
        registry.register(
            "hale_alert_source_holding",
            "1 while absences are held after a restart of the pipeline (holdAfterRestart)",
            m.holding.clone(),
        );
        registry.register(
            "hale_remediations",
            "Remediations finished, by action (reboot, fence) and result (succeeded, failed, cancelled)",
            m.remediations.clone(),
        );
        registry.register(
            "hale_remediation_in_flight",
            "Reboot flows admitted and not finished",
            m.remediation_in_flight.clone(),
        );
        registry.register(
            "hale_bmc_requests",
            "Requests to BMCs, by kind (redfish, ipmi), operation and result",
            m.bmc.requests.clone(),
        );
        registry.register(
            "hale_bmc_request_duration_seconds",
            "Time one BMC request took, by kind and operation",
            m.bmc.duration.clone(),
        );
        registry.register(
            "hale_leader",
            "1 while this replica leads: only the leader acts and publishes node series",
            m.leader.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                commit: env!("HALE_COMMIT").into(),
            })
            .set(1);
        registry.register(
            "hale_build_info",
            "1, labelled with the version and the commit this hale was built from",
            build,
        );
        registry.register(
            "hale_ready",
            "1 while /readyz answers 200: the state is loaded, the first poll was made and a shared store answers",
            m.ready.clone(),
        );
        // Zero series for the fixed label values, so `rate()` sees the first event.
        let polled = ["trusted", "untrusted"]
            .into_iter()
            .chain(IngestError::METRIC_LABELS);
        for result in polled {
            drop(m.polls.get_or_create(&ResultLabel {
                result: result.into(),
            }));
        }
        for path in ["poll", "webhook"] {
            drop(m.ingested.get_or_create(&PathLabel { path: path.into() }));
        }
        for action in Action::NAMES {
            for result in ["done", "failed"] {
                drop(m.policy_actions.get_or_create(&ActionLabel {
                    action: action.into(),
                    result: result.into(),
                }));
            }
        }
        // A poll-only hale has taken no delivery: its dashboard panel reads 0.
        drop(
            m.webhook_requests
                .get_or_create(&CodeLabel { code: "200".into() }),
        );
        for operation in Action::NAMES {
            for reason in OrchestratorError::METRIC_LABELS {
                drop(m.orchestrator_failures.get_or_create(&OperationLabel {
                    operation: operation.into(),
                    reason: reason.into(),
                }));
            }
        }
        for action in ["reboot", "fence"] {
            for result in ["succeeded", "failed", "cancelled"] {
                drop(m.remediations.get_or_create(&ActionLabel {
                    action: action.into(),
                    result: result.into(),
                }));
            }
        }
        for reason in StoreError::METRIC_LABELS {
            drop(m.store_write_failures.get_or_create(&ReasonLabel {
                reason: reason.into(),
            }));
        }
        Metrics { registry, ..m }
    }

    /// The Prometheus text exposition: hale's own metrics, then the node series when
    /// this replica leads.
    /// The bytes the next render will take, about: the last one's, or more where
    /// the fleet grew since (or none was rendered yet), at the last render's bytes
    /// a node — [`NODE_BYTES`] before the first.
    pub fn size_hint(&self) -> usize {
        let last = self.rendered.load(Ordering::Relaxed);
        if !self.nodes.orchestrator.leads() {
            return last;
        }
        let nodes = self.nodes.fleet.lock().nodes.len();
        let per_node = match self.rendered_nodes.load(Ordering::Relaxed) {
            0 => NODE_BYTES,
            n => last / n,
        };
        last.max(nodes * per_node)
    }

    pub fn render(&self) -> String {
        let mut out = String::with_capacity(self.rendered.load(Ordering::Relaxed) * 9 / 8);
        let leads = self.nodes.orchestrator.leads();
        self.leader.set(i64::from(leads));
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        let nodes = if leads { self.nodes.write(&mut out) } else { 0 };
        self.rendered.store(out.len(), Ordering::Relaxed);
        self.rendered_nodes.store(nodes, Ordering::Relaxed);
        out
    }
}

/// What one node's series say, copied out of the fleet.
struct Series {
    id: String,
    score: Option<u8>,
    health: Health,
    /// (condition type, value) for every series the node has: none before it
    /// reports, then every known type, every type it carries or carried lately.
    conditions: Vec<(Cow<'static, str>, u8)>,
    failures: u64,
    /// The thresholds of its own settings (pool or cluster) its score is below.
    below: Vec<&'static str>,
}

impl Series {
    fn of(node: &Node, settings: &Settings) -> Series {
        let mut conditions = Vec::new();
        if node.last_report.is_some() {
            let value = |ctype: &str| {
                node.conditions
                    .get(ctype)
                    .filter(|c| !c.suppressed())
                    .map_or(0, |c| c.severity.level())
            };
            conditions.extend(
                KNOWN_CONDITIONS
                    .iter()
                    .map(|t| (Cow::Borrowed(*t), value(t))),
            );
            let mut extra: Vec<&str> = node
                .seen_types
                .keys()
                .map(String::as_str)
                .chain(node.conditions.keys().map(|t| t.as_str()))
                .filter(|t| !KNOWN_CONDITIONS.contains(t))
                .collect();
            extra.sort_unstable();
            extra.dedup();
            conditions.extend(
                extra
                    .into_iter()
                    .map(|t| (Cow::Owned(t.to_string()), value(t))),
            );
            conditions.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        let below = node
            .score
            .as_ref()
            .map(|s| {
                [
                    ("cordonBelow", settings.cordon_below),
                    ("drainBelow", settings.drain_below),
                ]
                .into_iter()
                .filter(|(_, at)| u32::from(s.value) < *at)
                .map(|(threshold, _)| threshold)
                .collect()
            })
            .unwrap_or_default();
        Series {
            id: node.id.clone(),
            score: node.score.as_ref().map(|s| s.value),
            below,
            health: node.health(settings),
            conditions,
            failures: node.failures.total,
        }
    }
}

/// Node series, read from the fleet at scrape time; the leader's only, so two
/// replicas never publish two series for one node. Written straight into the
/// exposition rather than through prometheus-client's encoder and its trait call
/// per label: 100,000 nodes are 1.7 million samples, and a 10,000-node scrape took
/// 38 ms instead of 62 (the bench).
struct NodeSeries {
    fleet: Arc<FleetLock>,
    config: Arc<RwLock<Arc<Loaded>>>,
    orchestrator: Arc<dyn Orchestrator>,
}

impl std::fmt::Debug for NodeSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeSeries")
    }
}

/// A node's series in `/metrics`, about, before one was rendered: its score,
/// health and condition series with short ids (1.2 KiB measured at 8,691 nodes).
const NODE_BYTES: usize = 1280;

/// Nodes copied per hold of the fleet lock by a scrape.
const COPY_SLICE: usize = 2048;

impl NodeSeries {
    /// Every node's series, copied under the lock and a slice of nodes at a time
    /// with the lock released between slices: a scrape of 100,000 nodes holds ingest
    /// up for one slice's copy at most, not for the fleet's or the text.
    fn copy(&self, config: &Loaded) -> Vec<Series> {
        let mut nodes: Vec<Series> = Vec::new();
        loop {
            let fleet = self.fleet.lock();
            let after = nodes.last().map(|s| s.id.as_str());
            let slice = fleet
                .nodes
                .range::<str, _>((
                    after.map_or(Bound::Unbounded, Bound::Excluded),
                    Bound::Unbounded,
                ))
                .take(COPY_SLICE)
                .map(|(_, n)| Series::of(n, config.core.settings_for(&n.labels)))
                .collect::<Vec<_>>();
            drop(fleet);
            let whole = slice.len() < COPY_SLICE;
            nodes.extend(slice);
            if whole {
                return nodes;
            }
            self.fleet.let_waiters_in();
        }
    }

    /// Write every node's series; how many nodes they were.
    fn write(&self, out: &mut String) -> usize {
        let config = self.config.read().expect("config lock").clone();
        let nodes = self.copy(&config);
        let cluster = label_value(&config.config.cluster);
        let ids: Vec<Cow<'_, str>> = nodes.iter().map(|n| label_value(&n.id)).collect();
        let score = "hale_node_reliability_score";
        family(
            out,
            score,
            "Reliability score 0-100; absent while the node is unscored",
            "gauge",
        );
        for (node, id) in nodes.iter().zip(&ids) {
            if let Some(s) = node.score {
                sample(out, score, id, &cluster, None, u64::from(s));
            }
        }
        let below = "hale_node_below_threshold";
        family(
            out,
            below,
            "1 while the node's score is below that threshold of its own settings (its pool's, else the cluster's); absent otherwise",
            "gauge",
        );
        for (node, id) in nodes.iter().zip(&ids) {
            for threshold in &node.below {
                sample(out, below, id, &cluster, Some(("threshold", threshold)), 1);
            }
        }
        let health = "hale_node_health_state";
        family(
            out,
            health,
            "1 for the node's current health state, 0 for the others",
            "gauge",
        );
        for (node, id) in nodes.iter().zip(&ids) {
            for state in Health::ALL {
                let value = u64::from(state == node.health);
                sample(
                    out,
                    health,
                    id,
                    &cluster,
                    Some(("state", state.as_str())),
                    value,
                );
            }
        }
        let conditions = "hale_node_condition";
        family(
            out,
            conditions,
            "Condition severity: 0 clear, 1 info, 2 warning, 3 critical (suppressed reads 0)",
            "gauge",
        );
        for (node, id) in nodes.iter().zip(&ids) {
            for (ctype, value) in &node.conditions {
                let label = Some(("condition", ctype.as_ref()));
                sample(out, conditions, id, &cluster, label, u64::from(*value));
            }
        }
        let failures = "hale_node_attributed_job_failures_total";
        family(
            out,
            failures,
            "Job failures attributed to the node (never reset)",
            "counter",
        );
        for (node, id) in nodes.iter().zip(&ids) {
            sample(out, failures, id, &cluster, None, node.failures);
        }
        nodes.len()
    }
}

/// A family's `# HELP` and `# TYPE` lines (hale's help texts need no escaping).
fn family(out: &mut String, name: &str, help: &str, kind: &str) {
    for (line, end) in [("# HELP ", help), ("# TYPE ", kind)] {
        out.push_str(line);
        out.push_str(name);
        out.push(' ');
        out.push_str(end);
        out.push('\n');
    }
}

/// One sample of a node: `name{node_id="…",cluster="…"[,label="…"]} value`, `id`
/// and `cluster` already escaped ([`label_value`]); the extra label's value is
/// escaped here (a condition type comes from alerts).
fn sample(
    out: &mut String,
    name: &str,
    id: &str,
    cluster: &str,
    label: Option<(&str, &str)>,
    value: u64,
) {
    out.push_str(name);
    out.push_str("{node_id=\"");
    out.push_str(id);
    out.push_str("\",cluster=\"");
    out.push_str(cluster);
    out.push('"');
    if let Some((key, v)) = label {
        out.push(',');
        out.push_str(key);
        out.push_str("=\"");
        out.push_str(&label_value(v));
        out.push('"');
    }
    out.push_str("} ");
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::config::Config;
    use crate::core::Fleet;
    use crate::orchestrator::NoOrchestrator;

    /// The node families of a scrape, comments included, for a fleet of four: one
    /// healthy, one with two critical conditions and a type outside the known ones
    /// (below cordonBelow), one whose id needs escaping, and one never reported.
    fn node_families() -> String {
        let yaml = "alertmanager: { pollInterval: 0, requireWatchdog: false }\n";
        let loaded = Config::parse("hale.yaml", yaml)
            .unwrap()
            .resolve("hale.yaml", yaml)
            .unwrap();
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let alert = |node: &str, name: &str, labels: &str, fp: &str| {
            format!(
                r#"{{"labels":{{"alertname":"{name}","node":"{node}"{labels}}},"annotations":{{}},"fingerprint":"{fp}","startsAt":"2026-12-01T11:00:00Z","endsAt":"2026-12-01T13:00:00Z","updatedAt":"2026-12-01T11:00:00Z","receivers":[{{"name":"hale"}}],"status":{{"state":"active","silencedBy":[],"inhibitedBy":[]}}}}"#
            )
        };
        let body = format!(
            "[{}]",
            [
                alert("ok-1", "NodeUp", r#","hale_signal":"heartbeat""#, "a1"),
                alert(
                    "bad-2",
                    "Mce",
                    r#","hale_condition":"machine_check_errors","severity":"critical""#,
                    "a2"
                ),
                alert(
                    "bad-2",
                    "Xid",
                    r#","hale_condition":"gpu_xid_errors","severity":"critical""#,
                    "a5"
                ),
                alert(
                    "bad-2",
                    "Odd",
                    r#","hale_condition":"zz_custom","severity":"warning""#,
                    "a3"
                ),
                alert(
                    r#"q\"uo\\te"#,
                    "NodeUp",
                    r#","hale_signal":"heartbeat""#,
                    "a4"
                ),
            ]
            .join(",")
        );
        let alerts = crate::alertmanager::parse_v2(body.as_bytes()).unwrap();
        let mut fleet = Fleet::new(now);
        fleet.poll(&loaded.core, now, &alerts);
        fleet
            .nodes
            .insert("never".into(), Box::new(Node::new("never")));
        let metrics = Metrics::new(
            Arc::new(FleetLock::new(fleet)),
            Arc::new(RwLock::new(Arc::new(loaded))),
            Arc::new(NoOrchestrator),
        );
        metrics
            .render()
            .lines()
            .filter(|l| l.contains("hale_node_") || l.starts_with("hale_leader"))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// Written by hand for speed, the node families read exactly as prometheus-client
    /// wrote them: names, help, types, label order, escaping, the counter's `_total`.
    #[test]
    fn node_series_are_the_exposition_as_before() {
        let expected = r#"hale_leader 1
# HELP hale_node_reliability_score Reliability score 0-100; absent while the node is unscored
# TYPE hale_node_reliability_score gauge
hale_node_reliability_score{node_id="bad-2",cluster="default"} 45
hale_node_reliability_score{node_id="ok-1",cluster="default"} 100
hale_node_reliability_score{node_id="q\"uo\\te",cluster="default"} 100
# HELP hale_node_below_threshold 1 while the node's score is below that threshold of its own settings (its pool's, else the cluster's); absent otherwise
# TYPE hale_node_below_threshold gauge
hale_node_below_threshold{node_id="bad-2",cluster="default",threshold="cordonBelow"} 1
# HELP hale_node_health_state 1 for the node's current health state, 0 for the others
# TYPE hale_node_health_state gauge
hale_node_health_state{node_id="bad-2",cluster="default",state="Healthy"} 0
hale_node_health_state{node_id="bad-2",cluster="default",state="Degraded"} 1
hale_node_health_state{node_id="bad-2",cluster="default",state="Unknown"} 0
hale_node_health_state{node_id="never",cluster="default",state="Healthy"} 0
hale_node_health_state{node_id="never",cluster="default",state="Degraded"} 0
hale_node_health_state{node_id="never",cluster="default",state="Unknown"} 1
hale_node_health_state{node_id="ok-1",cluster="default",state="Healthy"} 1
hale_node_health_state{node_id="ok-1",cluster="default",state="Degraded"} 0
hale_node_health_state{node_id="ok-1",cluster="default",state="Unknown"} 0
hale_node_health_state{node_id="q\"uo\\te",cluster="default",state="Healthy"} 1
hale_node_health_state{node_id="q\"uo\\te",cluster="default",state="Degraded"} 0
hale_node_health_state{node_id="q\"uo\\te",cluster="default",state="Unknown"} 0
# HELP hale_node_condition Condition severity: 0 clear, 1 info, 2 warning, 3 critical (suppressed reads 0)
# TYPE hale_node_condition gauge
hale_node_condition{node_id="bad-2",cluster="default",condition="collector_failed"} 0
hale_node_condition{node_id="bad-2",cluster="default",condition="disk_degraded"} 0
hale_node_condition{node_id="bad-2",cluster="default",condition="gpu_ecc_errors"} 0
hale_node_condition{node_id="bad-2",cluster="default",condition="gpu_throttling"} 0
hale_node_condition{node_id="bad-2",cluster="default",condition="gpu_xid_errors"} 3
hale_node_condition{node_id="bad-2",cluster="default",condition="heartbeat_missed"} 0
hale_node_condition{node_id="bad-2",cluster="default",condition="machine_check_errors"} 3
hale_node_condition{node_id="bad-2",cluster="default",condition="memory_errors"} 0
hale_node_condition{node_id="bad-2",cluster="default",condition="telemetry_stale"} 0
hale_node_condition{node_id="bad-2",cluster="default",condition="zz_custom"} 2
hale_node_condition{node_id="ok-1",cluster="default",condition="collector_failed"} 0
hale_node_condition{node_id="ok-1",cluster="default",condition="disk_degraded"} 0
hale_node_condition{node_id="ok-1",cluster="default",condition="gpu_ecc_errors"} 0
hale_node_condition{node_id="ok-1",cluster="default",condition="gpu_throttling"} 0
hale_node_condition{node_id="ok-1",cluster="default",condition="gpu_xid_errors"} 0
hale_node_condition{node_id="ok-1",cluster="default",condition="heartbeat_missed"} 0
hale_node_condition{node_id="ok-1",cluster="default",condition="machine_check_errors"} 0
hale_node_condition{node_id="ok-1",cluster="default",condition="memory_errors"} 0
hale_node_condition{node_id="ok-1",cluster="default",condition="telemetry_stale"} 0
hale_node_condition{node_id="q\"uo\\te",cluster="default",condition="collector_failed"} 0
hale_node_condition{node_id="q\"uo\\te",cluster="default",condition="disk_degraded"} 0
hale_node_condition{node_id="q\"uo\\te",cluster="default",condition="gpu_ecc_errors"} 0
hale_node_condition{node_id="q\"uo\\te",cluster="default",condition="gpu_throttling"} 0
hale_node_condition{node_id="q\"uo\\te",cluster="default",condition="gpu_xid_errors"} 0
hale_node_condition{node_id="q\"uo\\te",cluster="default",condition="heartbeat_missed"} 0
hale_node_condition{node_id="q\"uo\\te",cluster="default",condition="machine_check_errors"} 0
hale_node_condition{node_id="q\"uo\\te",cluster="default",condition="memory_errors"} 0
hale_node_condition{node_id="q\"uo\\te",cluster="default",condition="telemetry_stale"} 0
# HELP hale_node_attributed_job_failures_total Job failures attributed to the node (never reset)
# TYPE hale_node_attributed_job_failures_total counter
hale_node_attributed_job_failures_total{node_id="bad-2",cluster="default"} 0
hale_node_attributed_job_failures_total{node_id="never",cluster="default"} 0
hale_node_attributed_job_failures_total{node_id="ok-1",cluster="default"} 0
hale_node_attributed_job_failures_total{node_id="q\"uo\\te",cluster="default"} 0
"#;
        assert_eq!(node_families(), expected);
    }

    #[test]
    fn label_values_are_escaped_as_the_text_format_reads_them() {
        let cases = [
            ("gpu-01", "gpu-01"),
            ("", ""),
            (r#"a"b"#, r#"a\"b"#),
            (r"a\b", r"a\\b"),
            ("a\nb", r"a\nb"),
            ("ü\\\"", r#"ü\\\""#),
        ];
        for (value, written) in cases {
            assert_eq!(label_value(value), written, "{value:?}");
        }
    }
}
