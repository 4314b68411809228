//! Work on a node and taking the node away: the pods a drain or a fault eviction
//! moves (through the Eviction API, so PodDisruptionBudgets hold), the workload
//! owners' `hale.dev/restart` declarations, Kubernetes Events on the pods a fault
//! fails, and replacement by deleting the Cluster API Machine or Karpenter NodeClaim
//! that owns the node.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Event, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time as KubeTime};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions,
};
use kube::core::GroupVersionKind;
use tracing::{debug, info, warn};

use super::{Kubernetes, bounded, classify};
use crate::orchestrator::{OrchestratorError, Result, Workload};

/// The annotation a pod or its owner sets to be moved, not failed, by a node fault.
pub const RESTART: &str = "hale.dev/restart";
pub const ON_NODE_FAULT: &str = "on-node-fault";
const MIRROR: &str = "kubernetes.io/config.mirror";
/// Cluster API's annotations naming the Machine that owns a node, and its namespace.
pub const CAPI_MACHINE: &str = "cluster.x-k8s.io/machine";
const CAPI_NAMESPACE: &str = "cluster.x-k8s.io/cluster-namespace";
/// Annotation: the fault class whose eviction hale performed on the node while it
/// is out of service (removed with the cordon).
pub const EVICTED: &str = "hale.dev/evicted";
/// Annotation: when hale deleted the node's owner; the node is on its way out.
pub const REPLACED_AT: &str = "hale.dev/replaced-at";
/// The owner of a pod no controller owns: the pod itself.
pub const BARE: &str = "Pod/";
/// How often a drain looks again for the pods it evicted.
const TERMINATION_POLL: Duration = Duration::from_secs(2);

/// A pod a drain must move: not a DaemonSet's (it would come straight back and its
/// controller tolerates the cordon), not a static pod's mirror (the API cannot delete
/// it), not finished, and not stuck past its deletion (its grace period ended over
/// a minute ago: a dead node's kubelet will never confirm it, and a replacement
/// must not wait on it forever).
pub fn movable(pod: &Pod, now: DateTime<Utc>) -> bool {
    let meta = &pod.metadata;
    let daemon = meta
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet");
    let mirror = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR));
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    let stuck = meta
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| now.timestamp() > t.0.as_second() + 60);
    !daemon && !mirror && !finished && !stuck
}

fn declared(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(RESTART))
        .is_some_and(|v| v == ON_NODE_FAULT)
}

/// `namespace/name` of a pod.
fn pod_id(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Evict the pod `w` names through the Eviction API, on condition that it is still
/// the pod that was listed (its uid): one made again under the same name since (a
/// StatefulSet's, perhaps already on another node) is not evicted in its place.
/// Posted as the real Eviction object: `Api::evict` names its options
/// `delete_options`, which the API server ignores.
async fn evict(pods: &Api<Pod>, w: &Workload) -> kube::Result<kube::core::Status> {
    let (namespace, name) = w.id.split_once('/').unwrap_or(("", &w.id));
    let eviction = serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": {"preconditions": {"uid": w.uid}},
    });
    pods.create_subresource("eviction", name, &PostParams::default(), &eviction)
        .await
}

/// The 409 of an eviction whose uid precondition failed: the pod listed is gone.
/// The API server words it as its delete's check does ("the UID in the
/// precondition (…) does not match…") or as its storage's ("Precondition failed:
/// UID in precondition: …").
fn replaced(status: &kube::core::Status) -> bool {
    status.code == 409
        && ["UID in the precondition", "UID in precondition"]
            .iter()
            .any(|m| status.message.contains(m))
}

/// A PodDisruptionBudget's 429: the cause says so (API Priority and Fairness
/// answers 429 too, with no budget behind it).
fn held_by_budget(status: &kube::core::Status) -> bool {
    status.code == 429
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "DisruptionBudget"))
}

/// The 403 of an eviction in a namespace being deleted.
fn namespace_ending(status: &kube::core::Status) -> bool {
    status.code == 403
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

/// How long the API server's own refusals of a pod are asked again past the
/// drain's deadline, counted from the first of them.
const API_GRACE: Duration = Duration::from_secs(30);

/// How often a pod whose namespace is being deleted is looked at again, as
/// `kubectl drain` asks again.
const NAMESPACE_WAIT: Duration = Duration::from_secs(5);

/// The API resource of an owner kind whose annotation hale reads.
fn owner_resource(kind: &str) -> Option<ApiResource> {
    let (group, version) = match kind {
        "ReplicaSet" | "StatefulSet" => ("apps", "v1"),
        "Job" => ("batch", "v1"),
        _ => return None,
    };
    Some(ApiResource::from_gvk(&GroupVersionKind::gvk(
        group, version, kind,
    )))
}

impl Kubernetes {
    /// The pods on `node`. `cached`: as the API server's watch cache holds them
    /// (`resourceVersion=0`: no read of etcd, the cache's index by node), which may
    /// lag the cluster a little; else read consistently.
    async fn pods_on(&self, node: &str, cached: bool) -> Result<Vec<Pod>> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let mut params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        if cached {
            params = params.match_any();
        }
        Ok(bounded(pods.list(&params)).await?.items)
    }

    /// How many pods a drain would still have to move off `node`: `cached` for
    /// what the inventory shows of each cordoned node, as often as every second;
    /// consistent for the count a replacement deletes a node's owner on.
    pub(super) async fn occupancy(&self, node: &str, cached: bool) -> Result<u32> {
        let now = Utc::now();
        let pods = self.pods_on(node, cached).await?;
        Ok(pods.iter().filter(|p| movable(p, now)).count() as u32)
    }

    /// The node's movable pods, each with the owner its restarts count against and
    /// whether it (or that owner) declared `hale.dev/restart: on-node-fault`.
    pub(super) async fn workloads_on(&self, node: &str) -> Result<Vec<Workload>> {
        let mut owners: BTreeMap<String, bool> = BTreeMap::new();
        let mut out = Vec::new();
        let now = Utc::now();
        // A pod already terminating is leaving (evicted by an earlier eviction, or
        // deleted): it is neither moved nor failed again.
        let pods = self.pods_on(node, false).await?;
        let leaving = |p: &&Pod| p.metadata.deletion_timestamp.is_some();
        for pod in pods
            .iter()
            .filter(|p| movable(p, now))
            .filter(|p| !leaving(p))
        {
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let controller = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true));
            let owner = match controller {
                Some(o) => format!("{}/{namespace}/{}", o.kind, o.name),
                None => format!("{BARE}{}", pod_id(pod)),
            };
            // Nothing runs a pod with no controller again: it is never moved,
            // whatever it declares.
            let mut restart = controller.is_some() && declared(pod.metadata.annotations.as_ref());
            if !restart && let Some(o) = controller {
                restart = match owners.get(&owner) {
                    Some(d) => *d,
                    None => {
                        let d = self.owner_declares(&namespace, &o.kind, &o.name).await?;
                        owners.insert(owner.clone(), d);
                        d
                    }
                };
            }
            out.push(Workload {
                id: pod_id(pod),
                owner,
                restart_on_node_fault: restart,
                uid: pod.metadata.uid.clone(),
            });
        }
        Ok(out)
    }

    async fn owner_declares(&self, namespace: &str, kind: &str, name: &str) -> Result<bool> {
        let Some(resource) = owner_resource(kind) else {
            return Ok(false);
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        match bounded(api.get_opt(name)).await? {
            Some(owner) => Ok(declared(owner.metadata.annotations.as_ref())),
            None => Ok(false),
        }
    }

    /// Evict `work` from `node`, one pod after the other, while the node is still
    /// out of service (an operator who put it back withdrew the eviction: what is
    /// left stays). A PodDisruptionBudget's 429 is retried with backoff until
    /// `evictionTimeout` after the first attempt; from then on a pod a budget holds
    /// is left where it is. A pod already gone counts as evicted, and so does one
    /// whose namespace is being deleted once it is marked for deletion. The API
    /// server's own refusals (throttled, a 5xx, a conflict) are asked again until
    /// the same deadline, or [`API_GRACE`] after the first where that is later,
    /// then fail the eviction. Each pod of
    /// `failed`, once evicted, gets an Event with `message`. Returns the ids left
    /// on the node.
    pub(super) async fn evict_each(
        &self,
        node: &str,
        work: &[&Workload],
        failed: &[&Workload],
        message: &str,
    ) -> Result<Vec<String>> {
        let deadline = Instant::now() + self.settings.eviction_timeout;
        let mut blocked = Vec::new();
        for (i, w) in work.iter().enumerate() {
            let namespace = w.id.split_once('/').map_or("", |(ns, _)| ns);
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
            let mut wait = Duration::from_secs(1);
            // Until when the API server's own refusals of this pod are asked again:
            // the drain's deadline, or a grace from the first of them where that
            // comes later (a pod reached after budgets held the others to it).
            let mut trouble_until: Option<Instant> = None;
            loop {
                if self.schedulable(node) {
                    if i == 0 {
                        return Err(OrchestratorError::refused(format!(
                            "node {node} is schedulable again: nothing evicted"
                        )));
                    }
                    warn!(node, "the node was put back in service: the eviction stops");
                    blocked.extend(work[i..].iter().map(|w| w.id.clone()));
                    return Ok(blocked);
                }
                match self.lead(evict(&pods, w)).await? {
                    Ok(_) => {
                        info!(node, pod = w.id, "evicted");
                        if failed.iter().any(|f| f.id == w.id)
                            && let Err(e) = self.tell_pod(w, message).await
                        {
                            warn!(node, pod = w.id, error = %super::said(&e), "could not record the failure on the pod");
                        }
                        break;
                    }
                    // Gone, or gone and made again under its name (a StatefulSet's
                    // pod, perhaps on another node): what was listed is evicted.
                    Err(kube::Error::Api(s)) if s.code == 404 || replaced(&s) => break,
                    // Tried until the deadline, and once more at it.
                    Err(kube::Error::Api(s)) if held_by_budget(&s) => {
                        let held = self.held_until(
                            node,
                            w,
                            (deadline, wait),
                            "a PodDisruptionBudget held the eviction past evictionTimeout; the pod stays",
                            "a PodDisruptionBudget holds the eviction; retrying",
                        );
                        if held.await {
                            blocked.push(w.id.clone());
                            break;
                        }
                        wait = (wait * 2).min(Duration::from_secs(15));
                    }
                    // The API server's answer to a pod under two budgets: it will
                    // not evict the pod until someone fixes the budgets.
                    Err(kube::Error::Api(s))
                        if s.message.contains("more than one PodDisruptionBudget") =>
                    {
                        warn!(node, pod = w.id, error = %super::said(&s.message), "cannot evict the pod; it stays");
                        blocked.push(w.id.clone());
                        break;
                    }
                    // Its namespace is being deleted: no eviction is taken there, and
                    // the namespace controller deletes the pod. As `kubectl drain`:
                    // once it is marked for deletion (or gone) it counts as evicted;
                    // until then, asked again.
                    Err(kube::Error::Api(s)) if namespace_ending(&s) => {
                        // Read as the node's pods (the chart grants pods `list`, not `get`).
                        let leaving = match self.pods_on(node, false).await {
                            Ok(pods) => pods.iter().find(|p| pod_id(p) == w.id).is_none_or(|p| {
                                p.metadata.deletion_timestamp.is_some() || p.metadata.uid != w.uid
                            }),
                            Err(e) => {
                                debug!(node, pod = w.id, error = %super::said(&e), "could not read the node's pods");
                                false
                            }
                        };
                        if leaving {
                            info!(
                                node,
                                pod = w.id,
                                "its namespace is being deleted, and the pod with it"
                            );
                            break;
                        }
                        let held = self.held_until(
                            node,
                            w,
                            (deadline, NAMESPACE_WAIT),
                            "the pod's namespace is being deleted, but the pod was not by evictionTimeout; it stays",
                            "the pod's namespace is being deleted; waiting for the pod's deletion",
                        );
                        if held.await {
                            blocked.push(w.id.clone());
                            break;
                        }
                    }
                    // The API server's own trouble (throttled by API Priority and
                    // Fairness, etcd changing leader, a conflict on the budget it
                    // updates): asked again with backoff until the deadline, or
                    // [`API_GRACE`] after the first where that is later; past it the
                    // drain fails and is tried again as a whole.
                    Err(kube::Error::Api(s)) if s.code == 429 || s.code == 409 || s.code >= 500 => {
                        let now = Instant::now();
                        let until = *trouble_until.get_or_insert(deadline.max(now + API_GRACE));
                        if now >= until {
                            return Err(classify(kube::Error::Api(s)));
                        }
                        warn!(node, pod = w.id, code = s.code, error = %super::said(&s.message), "the API server did not take the eviction; asking again");
                        tokio::time::sleep(wait.min(until - now)).await;
                        wait = (wait * 2).min(Duration::from_secs(15));
                    }
                    Err(e) => return Err(classify(e)),
                }
            }
        }
        Ok(blocked)
    }

    /// Whether an eviction of `w` held back (by a budget, by its namespace's
    /// deletion) is given up at the deadline — the pod stays, said as `stays` —
    /// else waited on for the pause (said as `waits`, at debug) before it is
    /// asked again.
    async fn held_until(
        &self,
        node: &str,
        w: &Workload,
        (deadline, pause): (Instant, Duration),
        stays: &str,
        waits: &str,
    ) -> bool {
        let now = Instant::now();
        if now >= deadline {
            warn!(
                node,
                pod = w.id,
                timeout_s = self.settings.eviction_timeout.as_secs(),
                "{stays}"
            );
            return true;
        }
        debug!(node, pod = w.id, "{waits}");
        tokio::time::sleep(pause.min(deadline - now)).await;
        false
    }

    /// Wait until no pod on `node` is still terminating — an evicted pod runs its
    /// grace period (a checkpoint, a flush) before its work is anywhere else, and a
    /// reboot meanwhile cuts it short, as `kubectl drain` waits for it — checking
    /// every [`TERMINATION_POLL`] until `deadline`. Not while the node is not Ready
    /// (its kubelet cannot end them; the reboot is what does) or is back in
    /// service. Returns how many were still terminating.
    pub(super) async fn wait_terminated(&self, node: &str, deadline: Instant) -> Result<u32> {
        loop {
            let now = Utc::now();
            let stopping = self
                .pods_on(node, false)
                .await?
                .iter()
                .filter(|p| movable(p, now) && p.metadata.deletion_timestamp.is_some())
                .count() as u32;
            // Not Ready, the kubelet cannot end them (the reboot will); back in
            // service, the operator withdrew the drain: nothing to wait for.
            if self.schedulable(node) || !self.ready(node) {
                return Ok(0);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if stopping == 0 || left.is_zero() {
                return Ok(stopping);
            }
            debug!(node, stopping, "waiting for evicted pods to terminate");
            tokio::time::sleep(TERMINATION_POLL.min(left)).await;
        }
    }

    /// Whether the node takes new work as hale last saw it (unknown nodes do not).
    fn schedulable(&self, node: &str) -> bool {
        self.node_now(node).is_some_and(|n| {
            !n.spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false)
        })
    }

    /// A Kubernetes Event on the pod saying why its work failed, where `kubectl
    /// describe pod` (which matches the pod's uid) and the workload's owner see it.
    async fn tell_pod(&self, w: &Workload, message: &str) -> Result<()> {
        let (namespace, name) = w.id.split_once('/').unwrap_or(("", &w.id));
        let now = chrono::Utc::now();
        let time =
            KubeTime(k8s_openapi::jiff::Timestamp::from_second(now.timestamp()).expect("in range"));
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}.")),
                namespace: Some(namespace.into()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                uid: w.uid.clone(),
                ..ObjectReference::default()
            },
            reason: Some("NodeFault".into()),
            message: Some(message.into()),
            type_: Some("Warning".into()),
            first_timestamp: Some(time.clone()),
            last_timestamp: Some(time),
            event_time: Some(MicroTime(
                k8s_openapi::jiff::Timestamp::from_second(now.timestamp()).expect("in range"),
            )),
            count: Some(1),
            action: Some("Evict".into()),
            reporting_component: Some("hale".into()),
            reporting_instance: Some(self.leadership.identity.clone()),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some("hale".into()),
                host: None,
            }),
            ..Event::default()
        };
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        self.lead(events.create(&PostParams::default(), &event))
            .await?
            .map_err(classify)?;
        Ok(())
    }

    /// Delete what owns the node: its Cluster API Machine or Karpenter NodeClaim,
    /// checked to still name this node, and only once no pod is left to move. A
    /// node without either is refused: hale never deletes a Node it cannot have
    /// re-provisioned.
    pub(super) async fn replace(&self, node: &str) -> Result<()> {
        let Some(current) = self.node_now(node) else {
            return Ok(());
        };
        let annotations = current.metadata.annotations.clone().unwrap_or_default();
        // Decided while hale had the node out of service; an operator who has put
        // it back since (or another hale that found it healthy) has the last word.
        let unschedulable = current
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if !unschedulable || annotations.get(super::CORDONED_BY).map(String::as_str) != Some("hale")
        {
            return Err(OrchestratorError::refused(format!(
                "node {node} is not cordoned by hale any more: nothing deleted"
            )));
        }
        let claim = current
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "NodeClaim" && o.api_version.starts_with("karpenter.sh/"))
            .map(|o| o.name.clone());
        let (api, name, machine) = if let Some(machine) = annotations.get(CAPI_MACHINE) {
            let namespace = annotations
                .get(CAPI_NAMESPACE)
                .map_or("default", String::as_str);
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
                "cluster.x-k8s.io",
                "v1beta1",
                "Machine",
            ));
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), namespace, &resource);
            (api, machine.clone(), true)
        } else if let Some(claim) = claim {
            let resource =
                ApiResource::from_gvk(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim"));
            (Api::all_with(self.client.clone(), &resource), claim, false)
        } else {
            return Err(OrchestratorError::refused(format!(
                "node {node} is owned by no Cluster API Machine or Karpenter NodeClaim; hale deletes nothing it cannot have re-provisioned"
            )));
        };
        let left = self.occupancy(node, false).await?;
        if left > 0 {
            return Err(OrchestratorError::transient(format!(
                "node {node} still runs {left} pod(s); replaced once it is empty"
            )));
        }
        let Some(owner) = bounded(api.get_opt(&name)).await? else {
            // Deleted already (by hale before a restart, or by its controller).
            return self.mark_replaced(node, &annotations).await;
        };
        let names_node = owner
            .data
            .pointer("/status/nodeRef/name")
            .or_else(|| owner.data.pointer("/status/nodeName"))
            .and_then(|v| v.as_str());
        if names_node != Some(node) {
            return Err(OrchestratorError::refused(format!(
                "node {node}: {name} does not name this node ({names_node:?}); nothing deleted"
            )));
        }
        // A MachineSet (a MachineDeployment's) brings a deleted Machine back; a
        // control plane's or a standalone Machine is not hale's to delete.
        let in_set = owner
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "MachineSet");
        if machine && !in_set {
            return Err(OrchestratorError::refused(format!(
                "node {node}: Machine {name} belongs to no MachineSet (a control plane's or a standalone Machine) and would not come back; nothing deleted"
            )));
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: owner.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match self.lead(api.delete(&name, &params)).await? {
            Ok(_) => info!(
                node,
                owner = name,
                "deleted the node's owner; it is re-provisioned"
            ),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(classify(e)),
        }
        self.mark_replaced(node, &annotations).await
    }

    /// Once its owner is deleted, mark the node: while the owner's controller drains
    /// and removes it, it is out of the fleet hale scores into another replacement.
    async fn mark_replaced(
        &self,
        node: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<()> {
        if annotations.contains_key(REPLACED_AT) {
            return Ok(());
        }
        let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let marked = self
            .merge(
                node,
                serde_json::json!({"metadata": {"annotations": {REPLACED_AT: at}}}),
            )
            .await;
        match marked {
            // The node may be gone already: that is the point.
            Err(e) if e.is_retriable() => Err(e),
            Err(_) | Ok(()) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn drains_skip_daemonsets_mirrors_finished_and_stuck_pods() {
        let now: DateTime<Utc> = "2026-11-30T12:00:00Z".parse().unwrap();
        let movable = |p: &Pod| movable(p, now);
        let pod = |v: serde_json::Value| -> Pod { serde_json::from_value(v).unwrap() };
        let owned = |kind: &str| {
            json!({"metadata": {"name": "p", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "u", "controller": true}]},
                "status": {"phase": "Running"}})
        };
        assert!(movable(&pod(owned("ReplicaSet"))));
        assert!(!movable(&pod(owned("DaemonSet"))));
        assert!(!movable(&pod(
            json!({"metadata": {"name": "p", "annotations": {MIRROR: "abc"}}})
        )));
        assert!(!movable(&pod(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}})
        )));
        assert!(movable(&pod(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Pending"}})
        )));
        // Terminating within its grace period (and a minute): still on the node.
        assert!(movable(&pod(
            json!({"metadata": {"name": "p", "deletionTimestamp": "2026-11-30T11:59:30Z"}})
        )));
        // Long past it: a dead node's pod, gone in all but name.
        assert!(!movable(&pod(
            json!({"metadata": {"name": "p", "deletionTimestamp": "2026-11-30T11:55:00Z"}})
        )));
    }
}
