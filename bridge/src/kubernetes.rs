//! `orchestrator.kind: kubernetes` (DESIGN §13), through `kube` and `k8s-openapi`.
//! The inventory comes from a watch on Nodes (a reflector, never a list per cycle);
//! cordons are `spec.unschedulable` with annotations saying who and why; the gate is
//! the `hale.dev/low-score:NoSchedule` taint. Every write is a JSON merge patch, and
//! the taint list is replaced under the node's `resourceVersion` so a concurrent
//! change is a conflict to retry, never a lost update.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tracing::{info, warn};

use crate::config::OrchestratorConfig;
use crate::core::Status;
use crate::orchestrator::{Fut, Observed, Orchestrator, OrchestratorError, Workload};

/// Annotation: who took the node out of service.
pub const CORDONED_BY: &str = "hale.dev/cordoned-by";
/// Annotation: why.
pub const CORDON_REASON: &str = "hale.dev/cordon-reason";
/// The scheduling gate's taint key (effect `NoSchedule`).
pub const GATE_TAINT: &str = "hale.dev/low-score";
/// How long the first list of Nodes may take before `serve` gives up.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Cluster API's annotation naming the Machine that owns a node.
const CAPI_MACHINE: &str = "cluster.x-k8s.io/machine";

pub struct Kubernetes {
    nodes: Api<Node>,
    store: Store<Node>,
    /// What the API server answered to hale's last write of each node: while the
    /// watch (or a relist) shows an older version, a cordon just made must not read
    /// as an uncordon made by someone else.
    written: Mutex<HashMap<String, Node>>,
}

impl Kubernetes {
    /// Connect (kubeconfig path and context, else in-cluster), start the watch on
    /// Nodes and wait for its first full list.
    pub async fn connect(cfg: &OrchestratorConfig) -> anyhow::Result<Arc<Kubernetes>> {
        crate::init_tls();
        let options = KubeConfigOptions {
            context: cfg.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match &cfg.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path).map_err(|e| {
                    anyhow::anyhow!("orchestrator.kubeconfig {}: {e}", path.display())
                })?;
                kube::Config::from_custom_kubeconfig(file, &options).await?
            }
            None => kube::Config::infer().await?,
        };
        let client = kube::Client::try_from(config)?;
        let nodes: Api<Node> = Api::all(client);
        let (store, writer) = reflector::store();
        // Relists read from etcd, not a lagging cache that could undo a write.
        let config = watcher::Config::default().list_semantic(watcher::ListSemantic::MostRecent);
        let stream = watcher(nodes.clone(), config)
            .default_backoff()
            .reflect(writer)
            .applied_objects();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                if let Err(e) = event {
                    warn!(error = %e, "watch on Nodes interrupted; resuming");
                }
            }
        });
        // A cluster that never answers fails the start, rather than hanging it.
        tokio::time::timeout(CONNECT_TIMEOUT, store.wait_until_ready())
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "the API server did not list the Nodes within {}s",
                    CONNECT_TIMEOUT.as_secs()
                )
            })??;
        info!(nodes = store.state().len(), "watching Kubernetes Nodes");
        Ok(Arc::new(Kubernetes {
            nodes,
            store,
            written: Mutex::default(),
        }))
    }

    async fn merge(&self, node: &str, patch: serde_json::Value) -> crate::orchestrator::Result<()> {
        let updated = self
            .nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(classify)?;
        self.written
            .lock()
            .expect("written lock")
            .insert(node.to_string(), updated);
        Ok(())
    }

    /// The watch's view of every node, or hale's own write where that is newer.
    fn current(&self) -> Vec<Node> {
        let written = self.written.lock().expect("written lock");
        self.store
            .state()
            .into_iter()
            .map(|node| {
                let name = node.metadata.name.as_deref().unwrap_or_default();
                match written.get(name) {
                    Some(mine) if version(mine) > version(&node) => mine.clone(),
                    _ => Node::clone(&node),
                }
            })
            .collect()
    }
}

/// A node's resourceVersion as a number (opaque to clients, but an etcd revision on
/// every API server; an unreadable one counts as oldest).
fn version(node: &Node) -> u64 {
    node.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Conflicts, throttling, server errors and the network are worth retrying; the
/// rest (forbidden, not found, invalid) is not.
fn classify(e: kube::Error) -> OrchestratorError {
    match &e {
        kube::Error::Api(status) if matches!(status.code, 409 | 429) || status.code >= 500 => {
            OrchestratorError::Transient(e.to_string())
        }
        kube::Error::Api(_) => OrchestratorError::Refused(e.to_string()),
        _ => OrchestratorError::Transient(e.to_string()),
    }
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
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
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
    Observed {
        id: meta.name.clone().unwrap_or_default(),
        hostname: labels.get("kubernetes.io/hostname").cloned(),
        status,
        provisioned: owned_by_claim || annotations.contains_key(CAPI_MACHINE),
        labels,
        allocations: 0,
    }
}

/// The node's taints with the gate set to `on`; `None` when nothing changes.
fn gated_taints(node: &Node, on: bool) -> Option<Vec<Taint>> {
    let mut taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let has = taints.iter().any(|t| t.key == GATE_TAINT);
    if has == on {
        return None;
    }
    if on {
        taints.push(Taint {
            key: GATE_TAINT.into(),
            effect: "NoSchedule".into(),
            value: Some("true".into()),
            time_added: None,
        });
    } else {
        taints.retain(|t| t.key != GATE_TAINT);
    }
    Some(taints)
}

fn unsupported<T>(what: &str) -> crate::orchestrator::Result<T> {
    Err(OrchestratorError::Refused(format!(
        "the Kubernetes orchestrator does not {what} yet"
    )))
}

impl Orchestrator for Kubernetes {
    fn inventory(&self) -> Fut<'_, Option<Vec<Observed>>> {
        Box::pin(async move { Ok(Some(self.current().iter().map(observed).collect())) })
    }

    fn cordon<'a>(&'a self, node: &'a str, by: &'a str, reason: &'a str) -> Fut<'a, ()> {
        Box::pin(self.merge(
            node,
            json!({
                "metadata": {"annotations": {CORDONED_BY: by, CORDON_REASON: reason}},
                "spec": {"unschedulable": true},
            }),
        ))
    }

    fn uncordon<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        Box::pin(self.merge(
            node,
            json!({
                "metadata": {"annotations": {CORDONED_BY: null, CORDON_REASON: null}},
                "spec": {"unschedulable": null},
            }),
        ))
    }

    fn gate<'a>(&'a self, node: &'a str, on: bool) -> Fut<'a, ()> {
        Box::pin(async move {
            // Read fresh and write under its resourceVersion: a taint added by
            // someone else meanwhile is a 409 and a retry, not a loss.
            let current = self.nodes.get(node).await.map_err(classify)?;
            let Some(taints) = gated_taints(&current, on) else {
                return Ok(());
            };
            let patch = json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"taints": taints},
            });
            self.merge(node, patch).await
        })
    }

    fn drain<'a>(&'a self, _: &'a str, active: bool) -> Fut<'a, u32> {
        // Passive: the cordon that precedes it is the whole of it.
        Box::pin(async move {
            if active {
                unsupported("evict pods (active drain)")
            } else {
                Ok(0)
            }
        })
    }

    fn workloads<'a>(&'a self, _: &'a str) -> Fut<'a, Vec<Workload>> {
        Box::pin(async { unsupported("list a node's pods") })
    }

    fn evict<'a>(
        &'a self,
        _: &'a str,
        _: &'a [&'a Workload],
        _: &'a [&'a Workload],
        _: &'a str,
    ) -> Fut<'a, ()> {
        Box::pin(async { unsupported("evict pods") })
    }

    fn terminate<'a>(&'a self, _: &'a str) -> Fut<'a, ()> {
        Box::pin(async { unsupported("delete Machines or NodeClaims") })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                json!({"metadata": {"name": "d", "annotations": {CAPI_MACHINE: "m-1"}}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
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
    }

    #[test]
    fn the_gate_taint_is_added_once_and_removed_alone() {
        let n = node(
            json!({"metadata": {"name": "a"}, "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}),
        );
        let on = gated_taints(&n, true).unwrap();
        assert_eq!(on.len(), 2);
        let gated = node(json!({"metadata": {"name": "a"}, "spec": {"taints": on}}));
        assert!(gated_taints(&gated, true).is_none(), "already gated");
        let off = gated_taints(&gated, false).unwrap();
        assert_eq!(
            off.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["gpu"]
        );
    }
}
