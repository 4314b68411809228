//! `/metrics`: hale's own health (source, polls, ingest, store) as ordinary
//! prometheus-client metrics, and the node series rendered from the fleet at scrape
//! time — so a decommissioned node's series vanish with it and an unscored node never
//! has a score series.

use std::borrow::Cow;
use std::ops::Bound;
use std::sync::{Arc, Mutex, RwLock};

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::alertmanager::IngestError;
use crate::config::Loaded;
use crate::core::policy::Action;
use crate::core::settings::Settings;
use crate::core::{Fleet, Health, KNOWN_CONDITIONS, Node};
use crate::notify::WebhookMetrics;
use crate::orchestrator::{Orchestrator, OrchestratorError};
use crate::store::StoreError;

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
    pub webhooks: WebhookMetrics,
    pub store_write_failures: Family<ReasonLabel, Counter>,
    pub policy_actions: Family<ActionLabel, Counter>,
    pub nodes_refused: Counter,
    pub orchestrator_failures: Family<OperationLabel, Counter>,
    pub holding: Gauge,
    pub remediations: Family<ActionLabel, Counter>,
    pub remediation_in_flight: Gauge,
    pub bmc: Arc<BmcMetrics>,
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
    /// Register everything, including the node collector over `fleet`.
    pub fn new(
        fleet: Arc<Mutex<Fleet>>,
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
            "Orchestrator operations that failed, by operation and reason (transient, refused)",
            m.orchestrator_failures.clone(),
        );
        registry.register(
            "hale_alert_source_holding",
            "1 while absences are held after a restart of the pipeline (holdAfterRestart)",
            m.holding.clone(),
        );
        registry.register(
            "hale_remediations",
            "Remediations finished, by action (reboot, fence) and result (succeeded, failed)",
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
        registry.register_collector(Box::new(NodeCollector {
            fleet,
            config,
            orchestrator,
        }));
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
        for operation in Action::NAMES {
            for reason in OrchestratorError::METRIC_LABELS {
                drop(m.orchestrator_failures.get_or_create(&OperationLabel {
                    operation: operation.into(),
                    reason: reason.into(),
                }));
            }
        }
        for action in ["reboot", "fence"] {
            for result in ["succeeded", "failed"] {
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

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
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
            let mut extra: Vec<&String> = node
                .seen_types
                .keys()
                .chain(node.conditions.keys())
                .filter(|t| !KNOWN_CONDITIONS.contains(&t.as_str()))
                .collect();
            extra.sort_unstable();
            extra.dedup();
            conditions.extend(extra.into_iter().map(|t| (Cow::Owned(t.clone()), value(t))));
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
/// replicas never publish two series for one node.
struct NodeCollector {
    fleet: Arc<Mutex<Fleet>>,
    config: Arc<RwLock<Arc<Loaded>>>,
    orchestrator: Arc<dyn Orchestrator>,
}

impl std::fmt::Debug for NodeCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeCollector")
    }
}

/// Nodes copied per hold of the fleet lock by a scrape.
const COPY_SLICE: usize = 2048;

impl prometheus_client::collector::Collector for NodeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let leads = self.orchestrator.leads();
        let leader = encoder.encode_descriptor(
            "hale_leader",
            "1 while this replica leads: only the leader acts and publishes node series",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::from(leads)).encode(leader)?;
        if !leads {
            return Ok(());
        }
        let config = self.config.read().expect("config lock").clone();
        let cluster = config.config.cluster.as_str();
        // Copied under the lock, rendered after it, and copied a slice of nodes at a
        // time with the lock released between slices: a scrape of 100,000 nodes holds
        // ingest up for one slice's copy at most, not for the fleet's or the text.
        let mut nodes: Vec<Series> = Vec::new();
        loop {
            let fleet = self.fleet.lock().expect("fleet lock");
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
                break;
            }
        }

        let mut score = encoder.encode_descriptor(
            "hale_node_reliability_score",
            "Reliability score 0-100; absent while the node is unscored",
            None,
            MetricType::Gauge,
        )?;
        for node in &nodes {
            if let Some(s) = node.score {
                let labels = [("node_id", node.id.as_str()), ("cluster", cluster)];
                ConstGauge::new(i64::from(s)).encode(score.encode_family(&labels)?)?;
            }
        }

        let mut below = encoder.encode_descriptor(
            "hale_node_below_threshold",
            "1 while the node's score is below that threshold of its own settings (its pool's, else the cluster's); absent otherwise",
            None,
            MetricType::Gauge,
        )?;
        for node in &nodes {
            for threshold in &node.below {
                let labels = [
                    ("node_id", node.id.as_str()),
                    ("cluster", cluster),
                    ("threshold", threshold),
                ];
                ConstGauge::new(1).encode(below.encode_family(&labels)?)?;
            }
        }

        let mut health = encoder.encode_descriptor(
            "hale_node_health_state",
            "1 for the node's current health state, 0 for the others",
            None,
            MetricType::Gauge,
        )?;
        for node in &nodes {
            for state in Health::ALL {
                let labels = [
                    ("node_id", node.id.as_str()),
                    ("cluster", cluster),
                    ("state", state.as_str()),
                ];
                ConstGauge::new(i64::from(state == node.health))
                    .encode(health.encode_family(&labels)?)?;
            }
        }

        let mut conditions = encoder.encode_descriptor(
            "hale_node_condition",
            "Condition severity: 0 clear, 1 info, 2 warning, 3 critical (suppressed reads 0)",
            None,
            MetricType::Gauge,
        )?;
        for node in &nodes {
            for (ctype, value) in &node.conditions {
                let labels = [
                    ("node_id", node.id.as_str()),
                    ("cluster", cluster),
                    ("condition", ctype.as_ref()),
                ];
                ConstGauge::new(i64::from(*value)).encode(conditions.encode_family(&labels)?)?;
            }
        }

        let mut failures = encoder.encode_descriptor(
            "hale_node_attributed_job_failures",
            "Job failures attributed to the node (never reset)",
            None,
            MetricType::Counter,
        )?;
        for node in &nodes {
            let labels = [("node_id", node.id.as_str()), ("cluster", cluster)];
            ConstCounter::new(node.failures).encode(failures.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
