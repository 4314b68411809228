//! `orchestrator.kind: kubernetes` (DESIGN §13), through `kube` and `k8s-openapi`.
//! The inventory comes from a watch on Nodes (a reflector, never a list per cycle);
//! cordons are `spec.unschedulable` with annotations saying who and why; the gate is
//! the `hale.dev/low-score:NoSchedule` taint; hale's conditions, score and health are
//! published on the Node (`conditions`); drains and fault evictions go through the
//! Eviction API and replacement deletes the node's Machine or NodeClaim (`pods`);
//! only the replica holding the Lease writes anything (`lease`). Node writes are
//! JSON merge patches, the taint list and annotations under the node's
//! `resourceVersion` so a concurrent change is a conflict to retry, never a lost
//! update, and the status conditions a strategic merge by type, which leaves every
//! other owner's conditions alone.

mod conditions;
mod config;
mod lease;
mod pods;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tracing::{debug, info, warn};

pub use conditions::{HEALTH, SCORE, condition_type};
pub use config::{Config, LeaseConfig, ambient_cluster};
use lease::Leadership;
pub use pods::{ON_NODE_FAULT, RESTART};

use crate::core::Status;
use crate::core::policy::{Actor, Done};
use crate::orchestrator::{Fut, Observed, Orchestrator, OrchestratorError, Report, Workload};

/// Annotation: who took the node out of service.
pub const CORDONED_BY: &str = "hale.dev/cordoned-by";
/// Annotation: why.
pub const CORDON_REASON: &str = "hale.dev/cordon-reason";
/// The scheduling gate's taint key (effect `NoSchedule`).
pub const GATE_TAINT: &str = "hale.dev/low-score";
/// Set on a fenced node while it is off (DESIGN §8).
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";
/// A node's BMC, as Metal3 writes addresses (DESIGN §8).
pub const BMC_ADDRESS: &str = "hale.dev/bmc-address";
/// How long the first list of Nodes may take before `serve` gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a shutdown waits to hand the Lease over before leaving it to expire.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one read (a GET or a LIST that is no watch) may take: kube bounds no
/// read by itself, and one a dropped connection leaves hanging would hold the
/// inventory, and the poll behind it, until TCP gave up — a quarter of an hour.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the cordon a node left when uncordoned outside hale is shown beside
/// it: inventories come every second or so, so a replica has long taken it in (or
/// a newer view) by then.
const BEFORE_KEPT: Duration = Duration::from_secs(600);
/// Node writes in flight at once when publishing or counting pods.
const CONCURRENCY: usize = 8;

/// Why hale could not start following the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("orchestrator.kubeconfig {path}: {reason}", path = path.display())]
    Kubeconfig {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error(
        "orchestrator.kubeconfig is not set, and no KUBECONFIG, ~/.kube/config or in-cluster service account is usable: {0}"
    )]
    Infer(String),
    #[error("the Kubernetes client: {0}")]
    Client(String),
    #[error("the API server did not list the Nodes within {0}s{last}", last = .1.as_ref().map(|e| format!(" (the last try: {e})")).unwrap_or_default())]
    NoNodes(u64, Option<String>),
}

/// What the adapter needs from the configuration, fixed at start.
struct Settings {
    style: conditions::Style,
    eviction_timeout: Duration,
}

pub struct Kubernetes {
    client: kube::Client,
    nodes: Api<Node>,
    store: Store<Node>,
    /// What the API server answered to hale's last write of each node: while the
    /// watch (or a relist) shows an older version, a cordon just made must not read
    /// as an uncordon made by someone else.
    written: Mutex<HashMap<String, Node>>,
    settings: Settings,
    leadership: Arc<Leadership>,
    lease: Api<Lease>,
    lease_name: String,
    /// The election's renewal loop, stopped before the Lease is released.
    election: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Woken by every change the watch brings.
    changed: Arc<tokio::sync::Notify>,
    /// The cordon each node left when last uncordoned outside hale, as the watch
    /// brought it, and when: a poll's inventory may come only after the cordon and
    /// the uncordon behind it, and it shows both for [`BEFORE_KEPT`].
    before: Arc<Mutex<HashMap<String, (Observed, Instant)>>>,
    /// Cordoned nodes whose pods could not be counted at the last try: said once
    /// when that starts, not at every inventory.
    uncounted: Mutex<std::collections::HashSet<String>>,
}

impl Kubernetes {
    /// Connect (kubeconfig path and context, else in-cluster), start the watch on
    /// Nodes and the leader election, and wait for the first full list of Nodes.
    pub async fn connect(cfg: &Config) -> Result<Arc<Kubernetes>, ConnectError> {
        crate::init_tls();
        let options = KubeConfigOptions {
            context: cfg.context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match &cfg.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path).map_err(|e| ConnectError::Kubeconfig {
                    path: path.clone(),
                    reason: config::first_line(&e),
                })?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| ConnectError::Kubeconfig {
                        path: path.clone(),
                        reason: config::first_line(&e),
                    })?
            }
            None => kube::Config::infer()
                .await
                .map_err(|e| ConnectError::Infer(config::first_line(&e)))?,
        };
        // kube retries a 429 up to 15 times on its own (five minutes against a
        // PodDisruptionBudget); hale's callers retry with their own limits instead.
        config.default_retry = false;
        config.headers.push((
            axum::http::header::USER_AGENT,
            axum::http::HeaderValue::from_static(crate::USER_AGENT),
        ));
        remember_credentials(&config.auth_info);
        let client = kube::Client::try_from(config).map_err(|e| ConnectError::Client(said(&e)))?;
        let nodes: Api<Node> = Api::all(client.clone());
        let (store, writer) = reflector::store();
        // Relists read from etcd, not a lagging cache that could undo a write.
        let config = watcher::Config::default().list_semantic(watcher::ListSemantic::MostRecent);
        let before: Arc<Mutex<HashMap<String, (Observed, Instant)>>> = Arc::default();
        let stream = watcher(nodes.clone(), config)
            .default_backoff()
            // Before the store takes the change in: it still holds the state left.
            .inspect({
                let (store, before) = (store.clone(), before.clone());
                move |event| {
                    if let Ok(event) = event {
                        note_change(&store, &before, event);
                    }
                }
            })
            .reflect(writer);
        let changed = Arc::new(tokio::sync::Notify::new());
        let notify = changed.clone();
        let last_error: Arc<Mutex<Option<String>>> = Arc::default();
        let noted = last_error.clone();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            // The same failure again (an RBAC 403 at every retry) said once a
            // minute with how many, a new one at once.
            let mut failing = crate::streak::Streak::default();
            while let Some(event) = stream.next().await {
                match event {
                    // Additions, changes, deletions, and a relist complete.
                    Ok(
                        watcher::Event::Apply(_)
                        | watcher::Event::Delete(_)
                        | watcher::Event::InitDone,
                    ) => {
                        failing.succeeded(Instant::now());
                        notify.notify_one();
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let error = said(&e);
                        *noted.lock().expect("watch error lock") = Some(error.clone());
                        if let Some(run) = failing.failed(&error, Instant::now()) {
                            warn!(error = %error, failures = run.failures, for_s = run.for_s,
                                "watch on Nodes interrupted; resuming");
                        }
                    }
                }
            }
        });
        // A cluster that never answers fails the start, rather than hanging it.
        tokio::time::timeout(CONNECT_TIMEOUT, store.wait_until_ready())
            .await
            .map_err(|_| {
                let last = last_error.lock().expect("watch error lock").clone();
                ConnectError::NoNodes(CONNECT_TIMEOUT.as_secs(), last)
            })?
            .map_err(|e| ConnectError::Client(said(&e)))?;
        info!(nodes = store.state().len(), "watching Kubernetes Nodes");
        let namespace = cfg
            .lease
            .namespace
            .clone()
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or_else(|| "default".into());
        let lease: Api<Lease> = Api::namespaced(client.clone(), &namespace);
        let leadership = Arc::new(Leadership::new(crate::orchestrator::identity()));
        info!(lease = %cfg.lease.name, namespace, identity = %leadership.identity,
            "joining the leader election");
        let election = tokio::spawn({
            let (api, name, duration, me) = (
                lease.clone(),
                cfg.lease.name.clone(),
                cfg.lease.duration,
                leadership.clone(),
            );
            async move { lease::run(api, name, duration, &me).await }
        });
        Ok(Arc::new(Kubernetes {
            client,
            nodes,
            store,
            written: Mutex::default(),
            settings: Settings {
                style: conditions::Style {
                    prefix: cfg.condition_prefix.clone(),
                    linger: cfg.condition_linger,
                    heartbeat: cfg.condition_heartbeat,
                },
                eviction_timeout: cfg.eviction_timeout,
            },
            leadership,
            lease,
            lease_name: cfg.lease.name.clone(),
            election: Mutex::new(Some(election)),
            changed,
            before,
            uncounted: Mutex::default(),
        }))
    }

    /// Run one write to the cluster as the leader: refused while this replica does
    /// not hold the Lease, abandoned if not answered before its leadership ends.
    async fn lead<T>(
        &self,
        write: impl Future<Output = kube::Result<T>>,
    ) -> crate::orchestrator::Result<kube::Result<T>> {
        // Counted before the deadline is read: a release waiting for the writes in
        // flight cannot slip in between.
        let _writing = self.leadership.writing();
        let Some(until) = self.leadership.deadline() else {
            return Err(OrchestratorError::transient(format!(
                "this replica does not hold the Lease (leader: {})",
                self.leadership.holder().as_deref().unwrap_or("none yet")
            )));
        };
        tokio::time::timeout_at(until.into(), write)
            .await
            .map_err(|_| {
                OrchestratorError::transient("the leadership ended before the API server answered")
            })
    }

    fn remember(&self, node: &str, updated: Node) {
        self.written
            .lock()
            .expect("written lock")
            .insert(node.to_string(), updated);
    }

    async fn merge(&self, node: &str, patch: serde_json::Value) -> crate::orchestrator::Result<()> {
        let updated = self
            .lead(
                self.nodes
                    .patch(node, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await?
            .map_err(classify)?;
        self.remember(node, updated);
        Ok(())
    }

    /// The newer of the watch's view of a node and hale's own last write of it.
    fn newest(&self, node: Node, written: &HashMap<String, Node>) -> Node {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        match written.get(name) {
            Some(mine) if version(mine) > version(&node) => mine.clone(),
            _ => node,
        }
    }

    /// Every node as hale last knew it, with the version the watch has brought
    /// of it. Own writes the watch has caught up with (or whose node is gone) are
    /// forgotten here, so the overlay stays small.
    fn current(&self) -> Vec<(Node, u64)> {
        let mut written = self.written.lock().expect("written lock");
        let state = self.store.state();
        let nodes: Vec<(Node, u64)> = state
            .iter()
            .map(|node| (self.newest(Node::clone(node), &written), version(node)))
            .collect();
        let watched: HashMap<&str, u64> = state
            .iter()
            .map(|n| (n.metadata.name.as_deref().unwrap_or_default(), version(n)))
            .collect();
        written.retain(|name, mine| {
            watched
                .get(name.as_str())
                .is_some_and(|v| version(mine) > *v)
        });
        nodes
    }

    /// One node as hale last knew it; `None`: not (or no longer) in the cluster.
    /// Whether the node is Ready as hale last saw it (unknown nodes are not).
    fn ready(&self, name: &str) -> bool {
        self.node_now(name).is_some_and(|n| ready(&n))
    }

    fn node_now(&self, name: &str) -> Option<Node> {
        let node = self.store.get(&ObjectRef::new(name))?;
        let written = self.written.lock().expect("written lock");
        Some(self.newest(Node::clone(&node), &written))
    }

    /// Set or remove one taint. Read fresh and written under its resourceVersion:
    /// a taint added by someone else meanwhile is a 409 and a retry, not a loss.
    async fn taint(
        &self,
        node: &str,
        taint: (&str, &str, &str),
        on: bool,
    ) -> crate::orchestrator::Result<()> {
        let current = bounded(self.nodes.get(node)).await?;
        let Some(taints) = with_taint(&current, taint, on) else {
            return Ok(());
        };
        let patch = json!({
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "spec": {"taints": taints},
        });
        self.merge(node, patch).await
    }

    /// `node` as the policy sees it: on a cordoned one, the pods a replacement
    /// waits for; the version the watch brought (not that of a write of this
    /// replica's the watch has yet to bring: the changes before it would read as
    /// older than what was taken); the cordon it left, if any.
    async fn observe(&self, node: Node, watched: u64, before: Option<Observed>) -> Observed {
        let mut o = observed(&node);
        if o.status == Status::Cordoned {
            // Not counted this time, the last count stands (a replacement waits on
            // it) and the rest of the inventory is not lost with it.
            let counted = self.occupancy(&o.id, true).await;
            let mut uncounted = self.uncounted.lock().expect("uncounted lock");
            match counted {
                Ok(n) => {
                    o.allocations = Some(n);
                    if uncounted.remove(&o.id) {
                        info!(node = %o.id, "the pods of a cordoned node are counted again");
                    }
                }
                Err(e) if uncounted.insert(o.id.clone()) => {
                    warn!(node = %o.id, error = %said(&e), "could not count the pods of a cordoned node; its last count stands until they can be");
                }
                Err(e) => {
                    debug!(node = %o.id, error = %said(&e), "could not count the pods of a cordoned node")
                }
            }
        }
        o.version = Some(watched).filter(|v| *v > 0);
        o.before = before.map(Box::new);
        o
    }

    /// Bring one node's conditions and annotations to `report`.
    async fn publish_one(&self, report: &Report) -> Result<(), (String, OrchestratorError)> {
        self.publish_node(report)
            .await
            .map_err(|e| (report.id.clone(), e))
    }

    async fn publish_node(&self, report: &Report) -> crate::orchestrator::Result<()> {
        let Some(node) = self.node_now(&report.id) else {
            return Ok(());
        };
        let now = chrono::Utc::now();
        if let Some(patch) = conditions::status_patch(&node, report, &self.settings.style, now) {
            let updated = self
                .lead(self.nodes.patch_status(
                    &report.id,
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                ))
                .await?
                .map_err(classify)?;
            self.remember(&report.id, updated);
        }
        let node = self.node_now(&report.id).unwrap_or(node);
        if let Some(patch) =
            conditions::annotations(&node, report, &[CORDONED_BY, CORDON_REASON, pods::EVICTED])
        {
            self.merge(&report.id, patch).await?;
        }
        Ok(())
    }
}

/// A node's resourceVersion as a number (opaque to clients, but an etcd revision on
/// every API server; an unreadable one counts as oldest).
fn version(node: &Node) -> u64 {
    readable_version(node).unwrap_or(0)
}

fn readable_version(node: &Node) -> Option<u64> {
    node.metadata.resource_version.as_deref()?.parse().ok()
}

/// Keep the cordon a node leaves when the watch brings its uncordon outside hale,
/// for the inventory to show before the state it is in. Outside hale: hale's own
/// uncordon takes its record of who and why off the node in the same write, where
/// `kubectl uncordon` leaves it. A node deleted, or a new machine under its name,
/// takes the record along.
fn note_change(
    store: &Store<Node>,
    before: &Mutex<HashMap<String, (Observed, Instant)>>,
    event: &watcher::Event<Node>,
) {
    match event {
        watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
            let Some(old) = store.get(&ObjectRef::from_obj(node)) else {
                return;
            };
            let name = node.metadata.name.clone().unwrap_or_default();
            if old.metadata.uid != node.metadata.uid {
                before.lock().expect("before lock").remove(&name);
                return;
            }
            let cordoned = |n: &Node| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
            let recorded = node
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(CORDONED_BY));
            if cordoned(&old) && !cordoned(node) && recorded {
                before
                    .lock()
                    .expect("before lock")
                    .insert(name, (observed(&old), Instant::now()));
            }
        }
        watcher::Event::Delete(node) => {
            if let Some(name) = &node.metadata.name {
                before.lock().expect("before lock").remove(name);
            }
        }
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

/// Conflicts, throttling, server errors and the network are worth retrying; the
/// rest (forbidden, not found, invalid) is not.
/// `read`, bounded by [`READ_TIMEOUT`]; an answer that does not come is a
/// transient failure, tried again as one.
async fn bounded<T>(
    read: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> std::result::Result<T, OrchestratorError> {
    within(READ_TIMEOUT, read).await
}

async fn within<T>(
    limit: Duration,
    read: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> std::result::Result<T, OrchestratorError> {
    match tokio::time::timeout(limit, read).await {
        Ok(answer) => answer.map_err(classify),
        Err(_) => Err(OrchestratorError::transient(format!(
            "the API server did not answer within {}s",
            limit.as_secs_f64()
        ))),
    }
}

fn classify(e: kube::Error) -> OrchestratorError {
    match &e {
        kube::Error::Api(status) if matches!(status.code, 409 | 429) || status.code >= 500 => {
            OrchestratorError::transient(said(&e))
        }
        kube::Error::Api(_) => OrchestratorError::refused(said(&e)),
        _ => OrchestratorError::transient(said(&e)),
    }
}

/// An error as said in a log line or an error: what the API server (or a proxy
/// before it) answered may echo the request's credentials, blanked here.
fn said(e: &dyn std::fmt::Display) -> String {
    let mut known = CREDENTIALS.read().expect("credentials lock").clone();
    // A token file (a service account's) is rotated under the running hale:
    // read again for what it holds now.
    for file in TOKEN_FILES.read().expect("token files lock").iter() {
        if let Ok(token) = crate::read_small_text(std::path::Path::new(file)) {
            known.add(token.trim());
        }
    }
    known.scrub(&e.to_string())
}

/// The credentials of every kubeconfig this process connected with (a reload
/// may connect with another), blanked in whatever an API server's answer says.
static CREDENTIALS: std::sync::RwLock<crate::redact::Secrets> =
    std::sync::RwLock::new(crate::redact::Secrets::new());

/// The token files among them, read again at each error.
static TOKEN_FILES: std::sync::RwLock<Vec<String>> = std::sync::RwLock::new(Vec::new());

/// What `auth` authenticates with, remembered in [`CREDENTIALS`]: a token (or
/// the one its file holds now), a user's password. (kube writes them out only
/// when serialized.)
fn remember_credentials(auth: &kube::config::AuthInfo) {
    let Ok(auth) = serde_json::to_value(auth) else {
        return;
    };
    let text = |key: &str| auth.get(key).and_then(serde_json::Value::as_str);
    let mut known = CREDENTIALS.write().expect("credentials lock");
    if let Some(token) = text("token") {
        known.add(token);
    }
    if let Some(file) = text("tokenFile") {
        let mut files = TOKEN_FILES.write().expect("token files lock");
        if !files.iter().any(|f| f == file) {
            files.push(file.to_string());
        }
    }
    match (text("username"), text("password")) {
        (Some(user), Some(password)) => known.add_basic(user, password),
        (None, Some(password)) => known.add(password),
        _ => {}
    }
}

/// Whether the node's kubelet says it is Ready.
fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// A Node as hale's policy sees it.
pub fn observed(node: &Node) -> Observed {
    let meta = &node.metadata;
    let labels: BTreeMap<String, String> = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    let unschedulable = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let ready = ready(node);
    let status = if unschedulable {
        Status::Cordoned
    } else if ready {
        Status::Ready
    } else {
        Status::NotReady
    };
    let owned_by_claim = meta
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "NodeClaim" && o.api_version.starts_with("karpenter.sh/"));
    let cordoned_by = match annotations.get(CORDONED_BY).map(String::as_str) {
        Some("hale") if unschedulable => Some(Actor::Hale),
        Some("operator") if unschedulable => Some(Actor::Operator),
        _ => None,
    };
    let tainted = |key: &str| {
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == key))
    };
    Observed {
        not_ready: !ready,
        released: tainted(OUT_OF_SERVICE_TAINT),
        orchestrator_health: None,
        version: readable_version(node),
        before: None,
        id: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone(),
        hostname: labels.get("kubernetes.io/hostname").cloned(),
        status,
        provisioned: owned_by_claim || annotations.contains_key(pods::CAPI_MACHINE),
        labels,
        allocations: None,
        gated: Some(tainted(GATE_TAINT)),
        evicted: annotations
            .get(pods::EVICTED)
            .filter(|_| unschedulable)
            .cloned(),
        cordoned_by: cordoned_by.map(|by| {
            let reason = annotations.get(CORDON_REASON).cloned().unwrap_or_default();
            (by, reason)
        }),
    }
}

/// The node's taints with `taint` present (`on`) or absent; `None` when nothing
/// changes. Other taints are left as they are.
fn with_taint(node: &Node, taint: (&str, &str, &str), on: bool) -> Option<Vec<Taint>> {
    let (key, value, effect) = taint;
    let mut taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let has = taints.iter().any(|t| t.key == key);
    if has == on {
        return None;
    }
    if on {
        taints.push(Taint {
            key: key.into(),
            effect: effect.into(),
            value: Some(value.into()),
            time_added: None,
        });
    } else {
        taints.retain(|t| t.key != key);
    }
    Some(taints)
}

/// The scheduling gate.
const GATE: (&str, &str, &str) = (GATE_TAINT, "true", "NoSchedule");
/// Kubernetes' own taint for a node shut down for good: its pods are deleted and
/// their volumes detached, so StatefulSets move (non-graceful node shutdown).
const OUT_OF_SERVICE: (&str, &str, &str) = (OUT_OF_SERVICE_TAINT, "nodeshutdown", "NoExecute");

/// Whether the node is cordoned by someone other than hale's policy: `kubectl
/// cordon` (no annotation), or an operator through hale.
fn foreign_cordon(node: &Node) -> bool {
    let unschedulable = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let by = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CORDONED_BY))
        .map(String::as_str);
    unschedulable && by != Some(Actor::Hale.as_str())
}

/// Whether the node is already cordoned by `by` for `reason` (`None`: uncordoned
/// with no record of hale's left on it).
fn cordoned_as(node: &Node, by: Option<(&str, &str)>) -> bool {
    let unschedulable = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let annotations = node.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    match by {
        Some((by, reason)) => {
            unschedulable && get(CORDONED_BY) == Some(by) && get(CORDON_REASON) == Some(reason)
        }
        None => {
            !unschedulable
                && [CORDONED_BY, CORDON_REASON, pods::EVICTED]
                    .iter()
                    .all(|k| get(k).is_none())
        }
    }
}

impl Orchestrator for Kubernetes {
    fn leads(&self) -> bool {
        self.leadership.leads()
    }

    fn leader(&self) -> Option<String> {
        self.leadership.holder()
    }

    fn elects(&self) -> bool {
        true
    }

    fn restart_hint(&self) -> &'static str {
        "Annotate the pod or its controller hale.dev/restart=on-node-fault for work that is safe to run again from the beginning"
    }

    fn changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        Some(self.changed.clone())
    }

    /// Nodes from the watch; on cordoned ones, the pods a replacement waits for.
    fn inventory(&self) -> Fut<'_, Option<Vec<Observed>>> {
        Box::pin(async move {
            // A node on its way out (deleted, or its owner deleted by hale) is no
            // longer in the fleet hale schedules for.
            let nodes = self.current();
            // Read with the nodes, so each is no newer than the node it goes with;
            // a node deleted while the watch was away (no deletion seen) drops its,
            // and one an inventory has long shown is dropped.
            let before: HashMap<String, Observed> = {
                let names: HashSet<&str> = nodes
                    .iter()
                    .filter_map(|(n, _)| n.metadata.name.as_deref())
                    .collect();
                let mut kept = self.before.lock().expect("before lock");
                kept.retain(|name, (_, at)| {
                    names.contains(name.as_str()) && at.elapsed() < BEFORE_KEPT
                });
                kept.iter()
                    .map(|(name, (o, _))| (name.clone(), o.clone()))
                    .collect()
            };
            let staying = nodes.into_iter().filter(|(n, _)| {
                n.metadata.deletion_timestamp.is_none()
                    && !n
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(pods::REPLACED_AT))
            });
            let counted = futures::stream::iter(staying.map(|(n, watched)| {
                let left = n
                    .metadata
                    .name
                    .as_ref()
                    .and_then(|k| before.get(k))
                    .cloned();
                self.observe(n, watched, left)
            }))
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
            Ok(Some(counted))
        })
    }

    fn publish<'a>(&'a self, reports: &'a [Report]) -> Fut<'a, ()> {
        Box::pin(async move {
            if !self.leads() {
                return Ok(());
            }
            // Collected before awaiting: the stream then holds futures, not a closure.
            let writes: Vec<_> = reports.iter().map(|r| self.publish_one(r)).collect();
            let results = futures::stream::iter(writes)
                .buffer_unordered(CONCURRENCY)
                .collect::<Vec<_>>()
                .await;
            let failed: Vec<(String, OrchestratorError)> =
                results.into_iter().filter_map(Result::err).collect();
            for (node, e) in &failed {
                debug!(node, error = %said(&e), "publishing to the Node failed; the next round retries");
            }
            match failed.into_iter().next() {
                Some((node, e)) => Err(OrchestratorError::transient(format!("node {node}: {e}"))),
                None => Ok(()),
            }
        })
    }

    fn cordon<'a>(&'a self, node: &'a str, by: &'a str, reason: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            if self
                .node_now(node)
                .is_some_and(|n| cordoned_as(&n, Some((by, reason))))
            {
                return Ok(());
            }
            // Read fresh and written under its resourceVersion: a `kubectl cordon`
            // the watch has not shown yet is not taken over as hale's own (and later
            // undone by hale's uncordon), and one between the read and the write is
            // a 409 and a fresh read.
            let current = bounded(self.nodes.get(node)).await?;
            if cordoned_as(&current, Some((by, reason))) {
                return Ok(());
            }
            if by == Actor::Hale.as_str() && foreign_cordon(&current) {
                return Err(OrchestratorError::refused(format!(
                    "node {node} was cordoned outside hale meanwhile: the cordon is the operator's"
                )));
            }
            self.merge(
                node,
                json!({
                    "metadata": {
                        "resourceVersion": current.metadata.resource_version,
                        "annotations": {CORDONED_BY: by, CORDON_REASON: reason},
                    },
                    "spec": {"unschedulable": true},
                }),
            )
            .await
        })
    }

    fn uncordon<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            if self.node_now(node).is_some_and(|n| cordoned_as(&n, None)) {
                return Ok(());
            }
            self.merge(
                node,
                json!({
                    "metadata": {"annotations": {
                        CORDONED_BY: null, CORDON_REASON: null, pods::EVICTED: null,
                    }},
                    "spec": {"unschedulable": null},
                }),
            )
            .await
        })
    }

    fn gate<'a>(&'a self, node: &'a str, on: bool) -> Fut<'a, ()> {
        Box::pin(self.taint(node, GATE, on))
    }

    fn release_work<'a>(&'a self, node: &'a str, on: bool) -> Fut<'a, ()> {
        Box::pin(self.taint(node, OUT_OF_SERVICE, on))
    }

    fn bmc_address(&self, node: &str) -> Option<String> {
        self.node_now(node)?
            .metadata
            .annotations?
            .get(BMC_ADDRESS)
            .cloned()
    }

    /// Passive: the cordon that precedes it is the whole of it. Active: every
    /// movable pod evicted, PodDisruptionBudgets permitting, and waited for until it
    /// has terminated (within `evictionTimeout`).
    fn drain<'a>(&'a self, node: &'a str, active: bool) -> Fut<'a, Done> {
        Box::pin(async move {
            if !active {
                return Ok(Done::default());
            }
            let until = std::time::Instant::now() + self.settings.eviction_timeout;
            let work = self.workloads_on(node).await?;
            let all: Vec<&Workload> = work.iter().collect();
            let blocked = self.evict_each(node, &all, &[], "").await?;
            let stopping = self.wait_terminated(node, until).await?;
            // A pod with no controller is evicted for good (as `kubectl drain
            // --force` does): ended, not moved.
            let evicted = all.iter().filter(|w| !blocked.contains(&w.id));
            let bare = evicted
                .clone()
                .filter(|w| w.owner.starts_with(pods::BARE))
                .count();
            Ok(Done {
                moved: (evicted.count() - bare) as u32,
                failed: bare as u32,
                blocked: blocked.len() as u32,
                stopping,
                ..Done::default()
            })
        })
    }

    fn workloads<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<Workload>> {
        Box::pin(self.workloads_on(node))
    }

    /// Both kinds leave the faulty node through the Eviction API (which marks each
    /// pod `DisruptionTarget`); each failed one, once gone, gets an Event saying why.
    fn evict<'a>(
        &'a self,
        node: &'a str,
        fault: &'a str,
        moved: &'a [&'a Workload],
        failed: &'a [&'a Workload],
        message: &'a str,
    ) -> Fut<'a, Vec<String>> {
        Box::pin(async move {
            let all: Vec<&Workload> = failed.iter().chain(moved).copied().collect();
            let blocked = self.evict_each(node, &all, failed, message).await?;
            // Said on the node, so a replica that takes over sees it done.
            self.merge(
                node,
                json!({"metadata": {"annotations": {pods::EVICTED: fault}}}),
            )
            .await?;
            Ok(blocked)
        })
    }

    fn terminate<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        Box::pin(self.replace(node))
    }

    fn term(&self) -> u64 {
        self.leadership.term()
    }

    fn release(&self) -> Fut<'_, ()> {
        Box::pin(async move {
            let election = self.election.lock().expect("election lock").take();
            if let Some(election) = election {
                election.abort();
                // Stopped for certain: a renewal in flight cannot lead again.
                let _ = election.await;
            }
            let release = lease::release(&self.lease, &self.lease_name, &self.leadership);
            if tokio::time::timeout(RELEASE_TIMEOUT, release)
                .await
                .is_err()
            {
                warn!("releasing the Lease timed out; it expires on its own");
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_that_gets_no_answer_is_a_transient_failure() {
        let hung = std::future::pending::<Result<(), kube::Error>>();
        let e = within(Duration::from_millis(20), hung).await.unwrap_err();
        assert_eq!(e.class, crate::orchestrator::Class::Transient, "{e}");
        assert!(e.to_string().contains("did not answer within 0.02s"), "{e}");
    }

    /// An API server (or a proxy before it) that echoes the request's headers
    /// into its Status: what hale says of it holds no credential.
    #[test]
    fn what_the_api_server_echoes_of_the_credentials_is_blanked() {
        let auth: kube::config::AuthInfo = serde_json::from_value(json!({
            "username": "kubeuser", "password": "kubePW\"x\\y-3c3c", "token": "CANARY-tok-3c3c"
        }))
        .unwrap();
        remember_credentials(&auth);
        for (code, echoed) in [
            (500, "bare CANARY-tok-3c3c; form CANARY%2Dtok%2D3c3c"),
            (
                401,
                "a3ViZXVzZXI6a3ViZVBXInhceS0zYzNj kubeuser:kubePW\"x\\y-3c3c",
            ),
            (
                500,
                "received headers: authorization: Bearer CANARY-kube-3c3c; host: x",
            ),
            (401, r#"got {"Authorization": "Basic Q0FOQVJZOnBhc3M="}"#),
        ] {
            let status: kube::core::Status = serde_json::from_value(json!({
                "status": "Failure", "message": echoed, "reason": "InternalError", "code": code
            }))
            .unwrap();
            let e = classify(kube::Error::Api(Box::new(status))).to_string();
            assert!(e.contains("***"), "{e}");
            assert!(
                !e.contains("CANARY") && !e.contains("Q0FOQVJZ") && !e.contains("3c3c"),
                "{e}"
            );
            assert!(!e.contains("a3ViZXVzZXI6"), "{e}");
        }
    }

    fn node(json: serde_json::Value) -> Node {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn status_labels_and_provisioning_come_from_the_node() {
        let table = [
            (
                json!({"metadata": {"name": "a"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                Status::Ready,
                false,
            ),
            (
                json!({"metadata": {"name": "b"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
                Status::NotReady,
                false,
            ),
            (
                json!({"metadata": {"name": "c"}, "spec": {"unschedulable": true}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                Status::Cordoned,
                false,
            ),
            (
                json!({"metadata": {"name": "d", "annotations": {pods::CAPI_MACHINE: "m-1"}}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                Status::Ready,
                true,
            ),
            (
                json!({"metadata": {"name": "e", "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "nc-1", "uid": "u"}]}}),
                Status::NotReady,
                true,
            ),
        ];
        for (json, status, provisioned) in table {
            let o = observed(&node(json));
            assert_eq!((o.status, o.provisioned), (status, provisioned), "{}", o.id);
        }
        let o = observed(&node(
            json!({"metadata": {"name": "f", "labels": {"pool": "gpu", "kubernetes.io/hostname": "f.example"}}}),
        ));
        assert_eq!(o.labels["pool"], "gpu");
        assert_eq!(o.hostname.as_deref(), Some("f.example"));
        assert!(!o.released && o.gated == Some(false));
        // A fence's taint, whoever put it there: the node's work is released.
        let o = observed(&node(
            json!({"metadata": {"name": "g"}, "spec": {"taints": [{"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute"}]}}),
        ));
        assert!(o.released && o.gated == Some(false));
    }

    #[test]
    fn the_gate_taint_is_added_once_and_removed_alone() {
        let n = node(
            json!({"metadata": {"name": "a"}, "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}),
        );
        let on = with_taint(&n, GATE, true).unwrap();
        assert_eq!(on.len(), 2);
        let gated = node(json!({"metadata": {"name": "a"}, "spec": {"taints": on}}));
        assert!(with_taint(&gated, GATE, true).is_none(), "already gated");
        let off = with_taint(&gated, GATE, false).unwrap();
        assert_eq!(
            off.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["gpu"]
        );
    }
}
