//! The Kubernetes orchestrator through the real `kube` client against the in-process
//! fake API server (`kube_fake.rs`; no real API server is installable here): the
//! inventory from the watch (resumed, relisted after a compaction, nodes deleted and
//! recreated), cordons with who and why, the gate taint through a genuine conflict,
//! Sciuro's conditions and hale's annotations, webhook-only ingest, drains and
//! replacements over pods' grace periods, the leader's Lease, and every request it
//! served held against the Helm chart's ClusterRole and marked as hale's.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;
use crate::kube_fake::{EvictionFault, FakeApi, kubeconfig, kubeconfig_as, pod, ready_node};

/// The User-Agent of the test's own requests to the fake, told apart from hale's.
const TEST_AGENT: &str = "hale-e2e-test";

fn taints(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| t["key"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

async fn fake_until(
    what: &str,
    fake: &FakeApi,
    name: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    eventually(what, Duration::from_secs(20), || async {
        let n = fake.node(name);
        check(&n).then_some(n)
    })
    .await
}

/// The (verb, resource) pairs the chart grants: `clusterRules` (its ClusterRole) or
/// `namespaceRules` (its Role, for the Lease).
fn granted(section: &str) -> BTreeSet<(String, String)> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/hale/files/rbac.yaml");
    let rbac: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut granted = BTreeSet::new();
    for rule in rbac[section].as_array().unwrap() {
        for resource in rule["resources"].as_array().unwrap() {
            for verb in rule["verbs"].as_array().unwrap() {
                granted.insert((
                    verb.as_str().unwrap().to_string(),
                    resource.as_str().unwrap().to_string(),
                ));
            }
        }
    }
    granted
}

/// Everything the adapter asked of the API server in one scenario.
type Served = (BTreeSet<(String, String)>, BTreeSet<(String, String)>);

/// What one scenario's hale asked of its fake, once every request it made is checked
/// to carry `User-Agent: hale/<version>` (the API server's audit log names the
/// client by it).
fn served(fake: &FakeApi) -> Served {
    let hale = format!("hale/{}", env!("CARGO_PKG_VERSION"));
    let unnamed: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.user_agent != hale && r.user_agent != TEST_AGENT)
        .collect();
    assert!(
        unnamed.is_empty(),
        "requests without User-Agent {hale}: {unnamed:?}"
    );
    (fake.served(), fake.served_leases())
}

/// Every scenario at once, each against its own fake API server; together they use
/// exactly what the chart grants — no request it would refuse, no grant unused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_adapter_uses_exactly_what_the_chart_grants() {
    let (a, b, c, d, e, f, g, h) = tokio::join!(
        nodes_cordons_and_the_gate_go_through_the_api_server(),
        conditions_are_sciuros_and_hales_view_is_in_annotations(),
        webhook_only_waits_for_the_whole_picture_and_follows_the_cluster(),
        the_watch_survives_compaction_deletion_and_recreation(),
        drains_and_fault_evictions_go_through_the_eviction_api(),
        replacement_deletes_the_machine_or_nodeclaim_once_the_node_is_empty(),
        two_replicas_one_leader_and_a_handover_without_double_action(),
        a_drain_rides_out_the_api_servers_own_refusals(),
    );
    let (f, first_replace) = f;
    let (mut cluster, mut namespace) = (BTreeSet::new(), BTreeSet::new());
    for (c, n) in [a, b, c, d, e, f, g, h] {
        cluster.extend(c);
        namespace.extend(n);
    }
    assert_eq!(
        cluster,
        granted("clusterRules"),
        "served vs the ClusterRole"
    );
    assert_eq!(namespace, granted("namespaceRules"), "served vs the Role");
    // Checked last, so that it hides no other scenario's outcome: a replacement waits
    // on the node's pods from its first word, never "drained and empty, terminating"
    // while one runs.
    assert_eq!(
        first_replace["waitingOn"], 1,
        "concluded to terminate r-2 while a pod ran on it: {first_replace}"
    );
}

/// The inventory shows the cordon a node left when uncordoned outside hale, as the
/// watch brought it: a replica whose poll comes only after its leader's cordon
/// and the operator's `kubectl uncordon` learns of both, in order, and does not
/// keep its own cordon of the node queued (to send once it leads). A change of
/// anything else, or hale's own uncordon, leaves it as it is; a node deleted
/// takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inventory_shows_the_cordon_a_quick_uncordon_undid() {
    use hale::kubernetes::{CORDON_REASON, CORDONED_BY};
    use hale::orchestrator::Orchestrator;

    let fake = FakeApi::start(vec![
        ready_node("q-0", json!({})),
        ready_node("q-1", json!({})),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let k8s = hale::kubernetes::Kubernetes::connect(&hale::kubernetes::Config {
        kubeconfig: Some(kubeconfig(dir.path(), &fake.url)),
        ..hale::kubernetes::Config::default()
    })
    .await
    .unwrap();
    let version = |name: &str| {
        fake.node(name)["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    // The inventory once it shows `name` at the fake's version of it now.
    let caught_up = |name: &'static str| {
        let (k8s, want) = (k8s.clone(), version(name));
        eventually("the watch caught up", Duration::from_secs(20), move || {
            let k8s = k8s.clone();
            async move {
                let listed = k8s.inventory().await.unwrap().unwrap();
                let o = listed.into_iter().find(|o| o.id == name);
                o.filter(|o| o.version == Some(want))
            }
        })
    };
    let first = caught_up("q-0").await;
    assert_eq!(first.status, hale::core::Status::Ready);
    assert!(first.before.is_none(), "{first:?}");

    fake.kubectl(
        "q-0",
        json!({"metadata": {"annotations": {CORDONED_BY: "hale", CORDON_REASON: "score below cordonBelow 60"}},
            "spec": {"unschedulable": true}}),
    );
    let cordoned = version("q-0");
    fake.kubectl("q-0", json!({"spec": {"unschedulable": null}}));
    let now = caught_up("q-0").await;
    assert_eq!(now.status, hale::core::Status::Ready);
    let before = now.before.expect("the cordon the uncordon undid");
    assert_eq!(before.status, hale::core::Status::Cordoned);
    assert_eq!(before.version, Some(cordoned));
    assert_eq!(
        before.cordoned_by,
        Some((
            hale::core::policy::Actor::Hale,
            "score below cordonBelow 60".to_string()
        ))
    );

    // A label changes: not a change of service state, the cordon is still the
    // state before.
    fake.kubectl("q-0", json!({"metadata": {"labels": {"rack": "r7"}}}));
    let now = caught_up("q-0").await;
    assert_eq!(now.labels.get("rack").map(String::as_str), Some("r7"));
    assert_eq!(now.before.map(|b| b.version), Some(Some(cordoned)));

    // Cordoned again and uncordoned as hale uncordons, its record taken off in the
    // same write: hale's own, no cordon undone outside it.
    fake.kubectl(
        "q-0",
        json!({"metadata": {"annotations": {CORDONED_BY: "operator", CORDON_REASON: "bios"}},
            "spec": {"unschedulable": true}}),
    );
    fake.kubectl(
        "q-0",
        json!({"metadata": {"annotations": {CORDONED_BY: null, CORDON_REASON: null}},
            "spec": {"unschedulable": null}}),
    );
    let now = caught_up("q-0").await;
    assert_eq!(now.status, hale::core::Status::Ready);
    assert_eq!(now.before.map(|b| b.version), Some(Some(cordoned)));

    // Deleted and made again: the new node has no state before.
    fake.delete_node("q-0");
    fake.put(ready_node("q-0", json!({})));
    let now = caught_up("q-0").await;
    assert!(now.before.is_none(), "{now:?}");
}

/// The Alertmanager polls hale has made so far, whatever their result.
async fn polls(hale: &Hale) -> u64 {
    let text = hale.metrics().await;
    [
        "trusted",
        "untrusted",
        "unreachable",
        "status",
        "malformed",
        "version",
    ]
    .iter()
    .filter_map(|r| metric(&text, "hale_alertmanager_polls_total", &[("result", r)]))
    .sum::<f64>() as u64
}

/// Wait until hale has polled `n` more times: as many more rounds in which it
/// reported, decided and acted on what it saw.
async fn polled(hale: &Hale, n: u64) {
    let from = polls(hale).await;
    eventually(
        &format!("{n} more polls"),
        Duration::from_secs(20),
        || async { (polls(hale).await >= from + n).then_some(()) },
    )
    .await;
}

async fn nodes_cordons_and_the_gate_go_through_the_api_server() -> Served {
    let mut nodes: Vec<Value> = (0..10)
        .map(|i| ready_node(&format!("g-{i}"), json!({"pool": "gpu"})))
        .collect();
    // A taint someone else owns: the gate must keep it.
    nodes[4]["spec"]["taints"] = json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]);
    let fake = FakeApi::start(nodes).await;
    let am = Alertmanager::start(None).await;
    // The pipeline is up before hale starts, as it is where hale is deployed.
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &fake.url);
    let extra = format!(
        "pools: [{{ name: gpu, selector: {{ pool: gpu }}, nodeHealth: {{ mode: cordon }} }}]\n\
         orchestrator: {{ kind: kubernetes, kubeconfig: {} }}\n",
        kubeconfig.display()
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;

    // The inventory comes from the watch: every node, its labels and hostname,
    // before any alert names it.
    let n = hale
        .wait_node("inventory from the watch", "g-9", |n| {
            n["hostname"] == "g-9.example"
        })
        .await;
    assert_eq!(n["status"], "Ready");

    let mut alerts = vec![watchdog()];
    alerts.extend((0..10).map(|i| heartbeat(&format!("g-{i}"))));
    am.fire(&alerts).await;
    hale.wait_node("reported", "g-3", |n| n["score"] == 100)
        .await;

    // g-3 below cordonBelow: cordoned through the API server, with who and why.
    am.fire(&[gpu_ecc_uncorrectable("g-3")]).await;
    let node = fake_until("g-3 cordoned", &fake, "g-3", |n| {
        n["spec"]["unschedulable"] == true
    })
    .await;
    assert_eq!(
        node["metadata"]["annotations"]["hale.dev/cordoned-by"],
        "hale"
    );
    assert_eq!(
        node["metadata"]["annotations"]["hale.dev/cordon-reason"],
        "score below cordonBelow 60"
    );
    // g-4 below drainBelow (two critical alerts, 40 + 45 points): gated by the taint
    // too. Someone taints it between hale's read of the node and its write of the
    // gate: a genuine 409, retried on a fresh read, and both taints stay.
    fake.on_next_get("g-4", |n| {
        n["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "example.com/maintenance", "effect": "NoSchedule"}));
    });
    am.fire(&[gpu_ecc_uncorrectable("g-4"), smart_failing("g-4")])
        .await;
    let node = fake_until("g-4 gated", &fake, "g-4", |n| {
        taints(n).contains(&"hale.dev/low-score".to_string())
    })
    .await;
    assert_eq!(
        taints(&node),
        [
            "nvidia.com/gpu",
            "example.com/maintenance",
            "hale.dev/low-score"
        ]
    );
    assert_eq!(node["spec"]["taints"][2]["effect"], "NoSchedule");
    let answers: Vec<u16> = fake
        .requests()
        .iter()
        .filter(|r| r.verb == "patch" && r.resource == "nodes" && r.name == "g-4")
        .map(|r| r.status)
        .collect();
    assert!(
        answers.contains(&409),
        "the other writer's taint never met hale's write: {answers:?}"
    );

    // kubectl uncordon g-3: hale records the operator's uncordon and leaves it alone.
    fake.kubectl("g-3", json!({"spec": {"unschedulable": null}}));
    let n = hale
        .wait_node("uncordon seen", "g-3", |n| n["status"] == "Ready")
        .await;
    assert!(n["cordon"].is_null(), "{n}");
    // The policy, deciding again on g-3's next report, holds back: its halt is the
    // sign; two more rounds after it, still nothing re-cordoned.
    eventually("g-3's halt", Duration::from_secs(20), || async {
        let e = hale.events("g-3", "type=POLICY_HALTED").await;
        (!e["events"].as_array().unwrap().is_empty()).then_some(())
    })
    .await;
    polled(&hale, 2).await;
    assert_eq!(
        fake.node("g-3")["spec"]["unschedulable"],
        Value::Null,
        "not re-cordoned"
    );
    let events = hale
        .events("g-3", "type=NODE_UNCORDONED&type=POLICY_HALTED")
        .await;
    assert_eq!(types(&events), ["NODE_UNCORDONED", "POLICY_HALTED"]);
    assert_eq!(events["events"][0]["by"], "operator");

    // g-5 below cordonBelow while an operator runs `kubectl cordon g-5` between
    // hale's read of the node and its write: hale's write meets a 409, its fresh read
    // shows the operator's cordon, and that cordon stays the operator's — not taken
    // over as hale's, which hale's own uncordon would later undo.
    fake.on_next_get("g-5", |n| n["spec"]["unschedulable"] = json!(true));
    am.fire(&[gpu_ecc_uncorrectable("g-5")]).await;
    let n = hale
        .wait_node("g-5's cordon the operator's", "g-5", |n| {
            n["cordon"]["by"] == "operator"
        })
        .await;
    assert_eq!(n["status"], "Cordoned");
    let node = fake.node("g-5");
    assert_eq!(node["spec"]["unschedulable"], true);
    assert!(
        node["metadata"]["annotations"]["hale.dev/cordoned-by"].is_null(),
        "hale took the operator's cordon over: {node}"
    );
    let answers: Vec<u16> = fake
        .requests()
        .iter()
        .filter(|r| r.verb == "patch" && r.resource == "nodes" && r.name == "g-5")
        .map(|r| r.status)
        .collect();
    assert!(
        answers.contains(&409),
        "hale's write never met the operator's cordon: {answers:?}"
    );

    // kubectl cordon g-7: the operator's, counted against the ceiling.
    fake.kubectl("g-7", json!({"spec": {"unschedulable": true}}));
    let n = hale
        .wait_node("cordon seen", "g-7", |n| n["status"] == "Cordoned")
        .await;
    assert_eq!(n["cordon"]["by"], "operator");

    // The fake refuses what the real server refuses.
    let r = reqwest::Client::new()
        .patch(format!("{}/api/v1/nodes/g-1", fake.url))
        .header("user-agent", TEST_AGENT)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let r = reqwest::Client::new()
        .patch(format!("{}/api/v1/nodes/g-1", fake.url))
        .header("user-agent", TEST_AGENT)
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": true}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409, "a stale resourceVersion is a conflict");

    served(&fake)
}

fn condition<'a>(node: &'a Value, ctype: &str) -> Option<&'a Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ctype)
}

/// The Node conditions hale owns (the `AlertManager_` prefix), by type.
fn owned(node: &Value) -> BTreeSet<String> {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["type"].as_str())
        .filter(|t| t.starts_with("AlertManager_"))
        .map(String::from)
        .collect()
}

fn kube_extra(kubeconfig: &std::path::Path, more: &str) -> String {
    format!(
        "orchestrator: {{ kind: kubernetes, kubeconfig: {}, lease: {{ duration: 6s }}{more} }}\n",
        kubeconfig.display()
    )
}

/// Requests of `verb` on `resource` named `name` that `user` made.
fn asked(fake: &FakeApi, user: &str, verb: &str, resource: &str, name: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.user == user && r.verb == verb && r.resource == resource && r.name == name)
        .count()
}

/// A time a condition carries.
fn time(c: &Value, key: &str) -> chrono::DateTime<chrono::Utc> {
    c[key]
        .as_str()
        .unwrap()
        .parse::<chrono::DateTime<chrono::Utc>>()
        .unwrap()
}

/// The annotation of hale's raised condition types on a Node ("" when absent).
fn raised(node: &Value) -> &str {
    node["metadata"]["annotations"]["hale.dev/conditions"]
        .as_str()
        .unwrap_or("")
}

async fn conditions_are_sciuros_and_hales_view_is_in_annotations() -> Served {
    let mut n1 = ready_node("n-1", json!({}));
    // The Node Problem Detector's condition: never hale's to touch.
    n1["status"]["conditions"].as_array_mut().unwrap().push(
        json!({"type": "KernelDeadlock", "status": "False", "reason": "KernelHasNoDeadlock"}),
    );
    let fake = FakeApi::start(vec![n1, ready_node("n-2", json!({}))]).await;
    let mut am = Alertmanager::start(None).await;
    // The pipeline is up before hale starts, as it is where hale is deployed.
    am.fire(&[watchdog()]).await;
    // Silenced before it fires: the operator's intent, never written on the Node.
    am.silence("ChassisIntrusion").await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &fake.url);
    let extra = kube_extra(&kubeconfig, ", conditionLinger: 6s, conditionHeartbeat: 2s");
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    am.fire(&[
        watchdog(),
        heartbeat("n-1"),
        heartbeat("n-2"),
        smart_failing("n-1"),
    ])
    .await;

    // Sciuro's condition: named after the alert verbatim (not hale's condition type
    // disk_degraded), its priority (9 without one) before its summary.
    let ctype = "AlertManager_SmartFailing";
    let node = fake_until("the condition on n-1", &fake, "n-1", |n| {
        condition(n, ctype).is_some()
    })
    .await;
    let c = condition(&node, ctype).unwrap().clone();
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "AlertIsFiring");
    assert_eq!(c["message"], "[P9] SMART health check failing on /dev/sda");
    assert_eq!(owned(&node), BTreeSet::from([ctype.to_string()]), "{node}");
    // hale's own view is in the annotations.
    let node = fake_until("score annotations", &fake, "n-1", |n| {
        n["metadata"]["annotations"]["hale.dev/score"] == "60"
    })
    .await;
    let view = hale.node("n-1").await.unwrap();
    assert_eq!(
        node["metadata"]["annotations"]["hale.dev/health"],
        view["health"]
    );
    assert_eq!(raised(&node), "disk_degraded");
    for kept in ["Ready", "KernelDeadlock"] {
        assert!(
            condition(&node, kept).is_some(),
            "{kept} was removed: {node}"
        );
    }
    assert_eq!(
        condition(&node, "KernelDeadlock").unwrap()["status"],
        "False"
    );
    let n2 = fake_until("n-2 scored", &fake, "n-2", |n| {
        n["metadata"]["annotations"]["hale.dev/score"] == "100"
    })
    .await;
    assert_eq!(n2["metadata"]["annotations"]["hale.dev/health"], "Healthy");
    assert!(
        n2["metadata"]["annotations"]
            .get("hale.dev/conditions")
            .is_none(),
        "none raised, no annotation: {n2}"
    );

    // Unchanged: the heartbeat moves, the transition does not.
    let renewed = next_heartbeat(&fake, "n-1", ctype, &c).await;
    assert_eq!(renewed["lastTransitionTime"], c["lastTransitionTime"]);
    // Nothing to say about n-2: no status write at all, and the annotations written
    // once each time they changed, not every round. Two more renewals: the first a
    // round begun after this count, finished before the second began.
    assert_eq!(asked(&fake, "", "patch", "nodes/status", "n-2"), 0);
    let writes = asked(&fake, "", "patch", "nodes", "n-2");
    assert!(writes <= 2, "{writes} annotation writes");
    let renewed = next_heartbeat(&fake, "n-1", ctype, &renewed).await;
    next_heartbeat(&fake, "n-1", ctype, &renewed).await;
    assert_eq!(asked(&fake, "", "patch", "nodes", "n-2"), writes);
    assert_eq!(asked(&fake, "", "patch", "nodes/status", "n-2"), 0);

    // Sciuro's rules for what else fires on n-1 (info: no points, no policy):
    // - a priority that is not an integer: left off the Node;
    // - two alerts of one name: one condition, the most urgent's (P5 over P6);
    // - no summary (a description is not read): the priority alone;
    // - silenced: not written.
    let no_summary = json!({"labels": {"alertname": "PsuDegraded", "severity": "info",
        "node": "n-1"}, "annotations": {"description": "PSU 2 lost its redundancy"}});
    let info = |name: &'static str, extra: &[(&'static str, &'static str)], summary: &str| {
        let mut labels = vec![("alertname", name), ("severity", "info"), ("node", "n-1")];
        labels.extend_from_slice(extra);
        alert(&labels, summary)
    };
    am.fire(&[
        info("FanFailing", &[("priority", "blah")], "fan 3 stopped"),
        info(
            "NvlinkDown",
            &[("priority", "6"), ("gpu", "1")],
            "NVLink down on GPU 1",
        ),
        info(
            "NvlinkDown",
            &[("priority", "5"), ("gpu", "0")],
            "NVLink down on GPU 0",
        ),
        no_summary,
        info("ChassisIntrusion", &[], "chassis opened"),
    ])
    .await;
    // hale raised all four (the annotation lists them), and wrote the Node's
    // conditions before the annotations in that same round.
    let node = fake_until("hale's view of the new alerts", &fake, "n-1", |n| {
        raised(n) == "ChassisIntrusion,FanFailing,NvlinkDown,PsuDegraded,disk_degraded"
    })
    .await;
    let want: BTreeSet<String> = [ctype, "AlertManager_NvlinkDown", "AlertManager_PsuDegraded"]
        .map(String::from)
        .into();
    assert_eq!(owned(&node), want, "{node}");
    let nvlink = condition(&node, "AlertManager_NvlinkDown").unwrap();
    let nvlink_since = nvlink["lastTransitionTime"].clone();
    assert_eq!(
        (&nvlink["status"], &nvlink["reason"], &nvlink["message"]),
        (
            &json!("True"),
            &json!("AlertIsFiring"),
            &json!("[P5] NVLink down on GPU 0")
        )
    );
    let psu = condition(&node, "AlertManager_PsuDegraded").unwrap();
    assert_eq!(
        (&psu["status"], &psu["message"]),
        (&json!("True"), &json!("[P9]"))
    );
    let view = hale.node("n-1").await.unwrap();
    let suppressed = view["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ChassisIntrusion")
        .map(|c| c["suppressed"].clone());
    assert_eq!(suppressed, Some(json!(true)), "{view}");

    // The most urgent of them ends: the next one speaks for the name, the condition
    // still True since it was raised.
    am.resolve(&[info(
        "NvlinkDown",
        &[("priority", "5"), ("gpu", "0")],
        "NVLink down on GPU 0",
    )])
    .await;
    let node = fake_until("the next most urgent", &fake, "n-1", |n| {
        condition(n, "AlertManager_NvlinkDown")
            .is_some_and(|c| c["message"] == "[P6] NVLink down on GPU 1")
    })
    .await;
    let nvlink = condition(&node, "AlertManager_NvlinkDown").unwrap();
    assert_eq!(nvlink["status"], "True");
    assert_eq!(nvlink["lastTransitionTime"], nvlink_since);

    // Cleared: False with no message, then gone once it has lingered.
    am.resolve(&[smart_failing("n-1")]).await;
    let node = fake_until("cleared", &fake, "n-1", |n| {
        condition(n, ctype).is_some_and(|x| x["status"] == "False")
    })
    .await;
    let cleared = condition(&node, ctype).unwrap().clone();
    assert_eq!(cleared["reason"], "AlertIsNotFiring");
    assert_eq!(cleared["message"], "", "{cleared}");
    assert!(
        time(&cleared, "lastTransitionTime") > time(&c, "lastTransitionTime"),
        "the transition to False moved lastTransitionTime: {cleared} after {c}"
    );
    fake_until("removed after the linger", &fake, "n-1", |n| {
        condition(n, ctype).is_none()
    })
    .await;
    // Removed only once False for longer than the 6 s linger (hale's clock is this
    // machine's).
    let lingered = chrono::Utc::now() - time(&cleared, "lastTransitionTime");
    assert!(
        lingered > chrono::TimeDelta::seconds(6),
        "removed {lingered} after turning False, within the 6 s linger"
    );
    let node = fake.node("n-1");
    assert!(condition(&node, "KernelDeadlock").is_some());

    // Blind: every condition hale owns turns Unknown with no message, none is cleared
    // or removed, and none is added; hale's telemetry_stale is in its annotation,
    // not among the Node's conditions.
    am.fire(&[smart_failing("n-1")]).await;
    fake_until("raised again", &fake, "n-1", |n| {
        condition(n, ctype).is_some_and(|x| x["status"] == "True")
    })
    .await;
    am.kill();
    let node = fake_until("unknown while stale", &fake, "n-1", |n| {
        !owned(n).is_empty()
            && owned(n)
                .iter()
                .all(|t| condition(n, t).unwrap()["status"] == "Unknown")
    })
    .await;
    assert_eq!(owned(&node), want, "{node}");
    for t in &want {
        let c = condition(&node, t).unwrap();
        assert_eq!(
            (&c["reason"], &c["message"]),
            (&json!("AlertsUnavailable"), &json!("")),
            "{c}"
        );
    }
    assert!(condition(&node, "KernelDeadlock").is_some());
    // A delivery while blind: hale takes the new alert in (its annotation says so),
    // but writes no condition for it.
    let late = alert(
        &[
            ("alertname", "LateAlert"),
            ("severity", "info"),
            ("node", "n-1"),
        ],
        "arrived while blind",
    );
    assert_eq!(hale.deliver(&delivery(&[(&late, "firing")])).await, 200);
    let node = fake_until("hale's view while blind", &fake, "n-1", |n| {
        let r = raised(n);
        r.contains("LateAlert") && r.contains("telemetry_stale")
    })
    .await;
    assert_eq!(owned(&node), want, "a condition added while blind: {node}");
    let types: BTreeSet<String> = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap().to_string())
        .collect();
    let mut expected = want.clone();
    expected.extend(["Ready", "KernelDeadlock"].map(String::from));
    assert_eq!(types, expected, "hale's own conditions are not the Node's");
    served(&fake)
}

/// Node `name`'s condition `ctype` once its heartbeat has moved past `after`'s.
async fn next_heartbeat(fake: &FakeApi, name: &str, ctype: &str, after: &Value) -> Value {
    let node = fake_until("heartbeat renewed", fake, name, |n| {
        condition(n, ctype).is_some_and(|x| x["lastHeartbeatTime"] != after["lastHeartbeatTime"])
    })
    .await;
    condition(&node, ctype).unwrap().clone()
}

/// POST one Alertmanager webhook delivery to hale at `url`.
async fn deliver_to(url: &str, body: &Value) {
    let r = reqwest::Client::new()
        .post(format!("{url}/api/v1/alertmanager"))
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

/// Deliver the watchdog and the node alerts `firing` holds, each in its own group, as
/// Alertmanager re-sends them: at once, then every second until aborted.
fn resend(url: String, firing: Arc<Mutex<Vec<Value>>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            deliver_to(&url, &delivery(&[(&watchdog(), "firing")])).await;
            let alerts = firing.lock().unwrap().clone();
            let each: Vec<(&Value, &str)> = alerts.iter().map(|a| (a, "firing")).collect();
            deliver_to(&url, &delivery(&each)).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

async fn webhook_only_waits_for_the_whole_picture_and_follows_the_cluster() -> Served {
    let mut nodes: Vec<Value> = (0..10)
        .map(|i| ready_node(&format!("h-{i}"), json!({"pool": "hook"})))
        .collect();
    // Written by Sciuro before hale started: hale has no record of the alert behind
    // it, and without polling no answer tells it that alert has ended.
    nodes[1]["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({
            "type": "AlertManager_SomethingElse", "status": "True", "reason": "AlertIsFiring",
            "message": "[P3] something else is wrong",
            "lastHeartbeatTime": "2026-01-05T10:00:00Z", "lastTransitionTime": "2026-01-05T10:00:00Z",
        }));
    let fake = FakeApi::start(nodes).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &fake.url);
    let port = free_port();
    let extra = format!(
        "pools: [{{ name: hook, selector: {{ pool: hook }}, nodeHealth: {{ mode: cordon }} }}, \
         {{ name: late, selector: {{ pool: late }} }}]\n{}",
        kube_extra(&kubeconfig, "")
    );
    let stale_after = Duration::from_secs(6);
    let am = format!("pollInterval: 0, staleAfter: {}s", stale_after.as_secs());
    let cfg = config(dir.path(), port, "http://127.0.0.1:9", &am, &extra);
    let hale = Hale::start_with(dir.path(), port, &cfg).await;

    let firing = Arc::new(Mutex::new(
        (0..10)
            .map(|i| heartbeat(&format!("h-{i}")))
            .collect::<Vec<_>>(),
    ));
    let first = Instant::now();
    let resending = resend(hale.url.clone(), firing.clone());
    hale.wait_node("reported", "h-9", |n| n["score"] == 100)
        .await;
    firing.lock().unwrap().push(smart_failing("h-1"));
    let node = fake_until("h-1's own alert on the Node", &fake, "h-1", |n| {
        condition(n, "AlertManager_SmartFailing").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let early = first.elapsed();
    assert!(
        early < stale_after,
        "published only after {early:?}: too late to tell an incomplete picture apart"
    );
    // The picture is not complete before trusted input has run for staleAfter: an
    // alert hale has not heard of may yet be re-sent, so Sciuro's condition stands.
    let other = condition(&node, "AlertManager_SomethingElse").unwrap();
    assert_eq!(
        (&other["status"], &other["message"]),
        (&json!("True"), &json!("[P3] something else is wrong")),
        "turned after {early:?}, before the picture was complete"
    );
    // Once it is, what hale has no record of is not firing (written by the next
    // publishing round, at most ten seconds on).
    let node = eventually(
        "the unknown condition not firing",
        Duration::from_secs(30),
        || async {
            let n = fake.node("h-1");
            condition(&n, "AlertManager_SomethingElse")
                .is_some_and(|c| c["status"] == "False")
                .then_some(n)
        },
    )
    .await;
    assert!(
        first.elapsed() >= stale_after,
        "turned False {:?} after the first delivery, before staleAfter",
        first.elapsed()
    );
    let other = condition(&node, "AlertManager_SomethingElse").unwrap();
    assert_eq!(
        (&other["reason"], &other["message"]),
        (&json!("AlertIsNotFiring"), &json!(""))
    );
    assert_eq!(
        condition(&node, "AlertManager_SmartFailing").unwrap()["status"],
        "True"
    );

    // Without polling, the cluster is still followed: hale cordons h-2, and the
    // operator's uncordon is recorded.
    firing.lock().unwrap().push(gpu_ecc_uncorrectable("h-2"));
    let node = fake_until("h-2 cordoned", &fake, "h-2", |n| {
        n["spec"]["unschedulable"] == true
    })
    .await;
    assert_eq!(
        node["metadata"]["annotations"]["hale.dev/cordoned-by"],
        "hale"
    );
    fake.kubectl("h-2", json!({"spec": {"unschedulable": null}}));
    let uncordoned = eventually(
        "h-2's uncordon recorded",
        Duration::from_secs(20),
        || async {
            let e = hale.events("h-2", "type=NODE_UNCORDONED").await;
            e["events"].as_array().unwrap().first().cloned()
        },
    )
    .await;
    assert_eq!(uncordoned["by"], "operator", "{uncordoned}");
    fake.kubectl("h-7", json!({"spec": {"unschedulable": true}}));
    let n = hale
        .wait_node("the operator's cordon seen", "h-7", |n| {
            n["status"] == "Cordoned"
        })
        .await;
    assert_eq!(n["cordon"]["by"], "operator");
    // A node that joins the cluster joins hale's inventory, with its labels.
    fake.put(ready_node("h-late", json!({"pool": "late"})));
    let n = hale
        .wait_node("the new node", "h-late", |n| n["status"] == "Ready")
        .await;
    assert_eq!(n["hostname"], "h-late.example");
    let listed: Value = reqwest::get(format!("{}/api/v1/nodes?pool=late", hale.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = listed["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["h-late"], "{listed}");
    resending.abort();
    served(&fake)
}

/// Requests `user` made of `verb` on nodes (a list or a watch names none).
fn node_requests(fake: &FakeApi, user: &str, verb: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.user == user && r.verb == verb && r.resource == "nodes")
        .count()
}

async fn the_watch_survives_compaction_deletion_and_recreation() -> Served {
    let mut nodes: Vec<Value> = (0..10)
        .map(|i| ready_node(&format!("k-{i}"), json!({"pool": "kube"})))
        .collect();
    // k-4 is in no pool: observed only, so its faults cordon nothing.
    nodes[4] = ready_node("k-4", json!({}));
    let fake = FakeApi::start(nodes).await;
    // Watches end often, and are resumed from bookmarks in between.
    fake.set_watch_timeout(Duration::from_secs(3));
    fake.set_bookmark_interval(Duration::from_secs(1));
    let am = Alertmanager::start(None).await;
    // The pipeline is up before hale starts, as it is where hale is deployed.
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    let me = "watcher";
    let kubeconfig = kubeconfig_as(dir.path(), &fake.url, me);
    let extra = format!(
        "pools: [{{ name: kube, selector: {{ pool: kube }}, nodeHealth: {{ mode: cordon, maxUnavailablePercent: 50 }} }}]\n{}",
        kube_extra(&kubeconfig, "")
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    eventually("leading", Duration::from_secs(20), || async {
        leads(&hale).await.then_some(())
    })
    .await;
    let mut alerts = vec![watchdog()];
    alerts.extend((0..10).map(|i| heartbeat(&format!("k-{i}"))));
    am.fire(&alerts).await;
    hale.wait_node("reported", "k-9", |n| n["score"] == 100)
        .await;
    eventually("a watch resumed", Duration::from_secs(20), || async {
        (node_requests(&fake, me, "watch") >= 2).then_some(())
    })
    .await;

    // The history is compacted: the open watch ends with a 410, hale lists again and
    // follows what changes after.
    let lists = node_requests(&fake, me, "list");
    fake.compact();
    eventually("a relist", Duration::from_secs(20), || async {
        (node_requests(&fake, me, "list") > lists).then_some(())
    })
    .await;
    fake.kubectl(
        "k-1",
        json!({"metadata": {"labels": {"kubernetes.io/hostname": "k-1.renamed"}}}),
    );
    hale.wait_node("a change after the compaction", "k-1", |n| {
        n["hostname"] == "k-1.renamed"
    })
    .await;

    // Cut off from its Lease, hale stops acting but goes on deciding: k-2 and k-3 are
    // to be cordoned, pending.
    fake.forbid_leases(me);
    eventually("stepped down", Duration::from_secs(20), || async {
        (!leads(&hale).await).then_some(())
    })
    .await;
    am.fire(&[gpu_ecc_uncorrectable("k-2"), gpu_ecc_uncorrectable("k-3")])
        .await;
    for node in ["k-2", "k-3"] {
        hale.wait_node("decided, not done", node, |n| n["status"] == "Cordoned")
            .await;
        assert_eq!(fake.node(node)["spec"]["unschedulable"], Value::Null);
    }
    // k-2 is deleted: it leaves hale, its history stays, ending with its
    // decommissioning, and its pending cordon goes with it.
    let deleted = fake.requests().len();
    fake.delete_node("k-2");
    eventually("k-2 gone from hale", Duration::from_secs(20), || async {
        hale.node("k-2").await.is_none().then_some(())
    })
    .await;
    let history = hale.events("k-2", "").await;
    let last = history["events"].as_array().unwrap().last().unwrap();
    assert_eq!(last["type"], "NODE_DECOMMISSIONED", "{history}");
    assert_eq!(last["by"], "orchestrator", "{last}");
    // Leading again, hale performs what is pending: k-3's cordon, never k-2's.
    fake.allow_leases(me);
    fake_until("k-3's pending cordon performed", &fake, "k-3", |n| {
        n["spec"]["unschedulable"] == true
    })
    .await;
    polled(&hale, 2).await;
    let touched: Vec<_> = fake.requests()[deleted..]
        .iter()
        .filter(|r| r.name == "k-2")
        .cloned()
        .collect();
    assert!(touched.is_empty(), "acted on the deleted k-2: {touched:?}");

    // k-4's sticky fault (its alert resolved, the condition kept), then a new machine
    // under its name: the new node starts afresh, the old history stays.
    am.fire(&[gpu_ecc_uncorrectable("k-4")]).await;
    hale.wait_node("sticky condition raised", "k-4", |n| {
        has_condition(n, "gpu_ecc_errors")
    })
    .await;
    am.resolve(&[gpu_ecc_uncorrectable("k-4")]).await;
    fake_until("the alert ended on the Node", &fake, "k-4", |n| {
        condition(n, "AlertManager_GpuEccUncorrectable").is_some_and(|c| c["status"] == "False")
    })
    .await;
    let view = hale.node("k-4").await.unwrap();
    assert!(has_condition(&view, "gpu_ecc_errors"), "sticky: {view}");
    let mut renewed = ready_node("k-4", json!({}));
    renewed["metadata"]["uid"] = json!("k-4-second-machine");
    fake.put(renewed);
    let decommissioned = eventually("the old k-4 retired", Duration::from_secs(20), || async {
        let e = hale.events("k-4", "type=NODE_DECOMMISSIONED").await;
        e["events"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(decommissioned["by"], "orchestrator", "{decommissioned}");
    polled(&hale, 2).await;
    let view = hale.node("k-4").await.unwrap();
    assert!(
        !has_condition(&view, "gpu_ecc_errors"),
        "the old machine's sticky condition on the new one: {view}"
    );
    let history = types(&hale.events("k-4", "").await);
    let raised = history.iter().position(|t| t == "CONDITION_RAISED");
    let retired = history.iter().position(|t| t == "NODE_DECOMMISSIONED");
    assert!(
        raised.is_some() && raised < retired,
        "the old history kept: {history:?}"
    );
    am.fire(&[gpu_ecc_uncorrectable("k-4")]).await;
    hale.wait_node("raised by the new machine's own alert", "k-4", |n| {
        has_condition(n, "gpu_ecc_errors")
    })
    .await;
    served(&fake)
}

async fn drains_and_fault_evictions_go_through_the_eviction_api() -> Served {
    // Ten nodes: the eviction's cordon must fit under maxUnavailablePercent.
    let fake = FakeApi::start(
        (0..10)
            .map(|i| ready_node(&format!("w-{i}"), json!({})))
            .collect(),
    )
    .await;
    // w-1: a web pod behind a PodDisruptionBudget, and pods a drain leaves alone.
    let mut web = pod(
        "shop",
        "web-1",
        "w-1",
        Some(("ReplicaSet", "web-rs")),
        json!({}),
    );
    web["metadata"]["labels"] = json!({"app": "web"});
    fake.put_pod(web);
    fake.put_object(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-rs", "namespace": "shop"}}));
    fake.put_pod(pod(
        "kube-system",
        "agent-w1",
        "w-1",
        Some(("DaemonSet", "agent")),
        json!({}),
    ));
    fake.put_pod(pod(
        "kube-system",
        "etcd-w1",
        "w-1",
        None,
        json!({"kubernetes.io/config.mirror": "abc"}),
    ));
    let mut done = pod(
        "batch",
        "report-1",
        "w-1",
        Some(("Job", "report")),
        json!({}),
    );
    done["status"]["phase"] = json!("Succeeded");
    fake.put_pod(done);
    // A pod no controller owns: evicted (as `kubectl drain --force` would), and
    // counted as ended, since nothing runs it again.
    fake.put_pod(pod("tools", "debug-shell", "w-1", None, json!({})));
    fake.pdb("web-pdb", "shop", json!({"app": "web"}), 0);
    // w-2: work that declared it may restart (on the Job, on the pod) and work
    // that did not.
    fake.put_pod(pod(
        "ml",
        "train-0",
        "w-2",
        Some(("Job", "train")),
        json!({"hale.dev/restart": "on-node-fault"}),
    ));
    fake.put_pod(pod(
        "ml",
        "cache-0",
        "w-2",
        Some(("StatefulSet", "cache")),
        json!({}),
    ));
    fake.put_object(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "cache", "namespace": "ml",
            "annotations": {"hale.dev/restart": "on-node-fault"}}}));
    fake.put_pod(pod("etl", "etl-0", "w-2", Some(("Job", "etl")), json!({})));
    // w-3: a database whose budget never allows a disruption.
    let mut db = pod(
        "data",
        "db-0",
        "w-3",
        Some(("StatefulSet", "db")),
        json!({}),
    );
    db["metadata"]["labels"] = json!({"app": "db"});
    fake.put_pod(db);
    fake.put_object(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "data"}}));
    fake.pdb("db-pdb", "data", json!({"app": "db"}), 0);
    // w-4: another replica of it, for the shortest evictionTimeout.
    let mut db = pod(
        "data",
        "db-1",
        "w-4",
        Some(("StatefulSet", "db")),
        json!({}),
    );
    db["metadata"]["labels"] = json!({"app": "db"});
    fake.put_pod(db);
    fake.put_object(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "etl", "namespace": "etl"}}));

    let am = Alertmanager::start(None).await;
    // The pipeline is up before hale starts, as it is where hale is deployed.
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &fake.url);
    let extra = format!(
        "nodeHealth: {{ evictOnFaultClasses: [GPU_ECC_ERRORS] }}\n{}",
        kube_extra(&kubeconfig, ", evictionTimeout: 5s")
    );
    let mut hale = Hale::start(dir.path(), &am.url, &extra).await;
    let mut alerts = vec![watchdog()];
    alerts.extend((0..10).map(|i| heartbeat(&format!("w-{i}"))));
    am.fire(&alerts).await;
    hale.wait_node("reported", "w-2", |n| n["score"] == 100)
        .await;

    // An operator's active drain: the budget holds the eviction, hale retries.
    let r = reqwest::Client::new()
        .post(format!("{}/drain", hale.node_url("w-1")))
        .bearer_auth(TOKEN)
        .json(&json!({"active": true, "reason": "firmware update"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    eventually(
        "evictions refused by the budget",
        Duration::from_secs(20),
        || async { (fake.eviction_attempts("shop", "web-1") >= 2).then_some(()) },
    )
    .await;
    assert!(fake.evicted().is_empty());
    // Meanwhile web-1 is deleted and made again under its name on w-5 (a new uid),
    // as a StatefulSet makes its pods: once the budget allows, hale's next attempt
    // must not evict the new pod, which never ran on w-1.
    let attempts = fake.eviction_attempts("shop", "web-1");
    fake.delete_pod("shop", "web-1");
    let mut again = pod(
        "shop",
        "web-1",
        "w-5",
        Some(("ReplicaSet", "web-rs")),
        json!({}),
    );
    again["metadata"]["labels"] = json!({"app": "web"});
    fake.put_pod(again);
    fake.pdb("web-pdb", "shop", json!({"app": "web"}), 1);
    let evicted = eventually("debug-shell evicted", Duration::from_secs(30), || async {
        let e = fake.evicted();
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(evicted.len(), 1, "{evicted:?}");
    assert_eq!(evicted[0]["metadata"]["name"], "debug-shell");
    assert!(
        fake.eviction_attempts("shop", "web-1") > attempts,
        "web-1 was not asked for again"
    );
    let web = fake
        .pods()
        .into_iter()
        .find(|p| p["metadata"]["name"] == "web-1")
        .expect("the new web-1 stays");
    assert_eq!(web["spec"]["nodeName"], "w-5");
    assert!(web["metadata"]["deletionTimestamp"].is_null(), "{web}");
    let left: BTreeSet<String> = fake
        .pods()
        .iter()
        .filter(|p| p["spec"]["nodeName"] == "w-1")
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        left,
        ["agent-w1", "etcd-w1", "report-1"].map(String::from).into(),
        "DaemonSet, mirror and finished pods stay"
    );
    let drained = eventually("drain recorded", Duration::from_secs(10), || async {
        let e = hale.events("w-1", "type=NODE_DRAINED").await;
        e["events"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(drained["active"], true);
    assert_eq!(
        (drained["moved"].clone(), drained["failed"].clone()),
        (json!(1), json!(1)),
        "{drained}"
    );

    // A GPU fault: every pod leaves, the declared ones moved, the other failed
    // with the reason on the pod.
    am.fire(&[gpu_ecc_uncorrectable("w-2")]).await;
    let evicted = eventually("w-2 emptied", Duration::from_secs(30), || async {
        let e = hale.events("w-2", "type=NODE_EVICTED").await;
        e["events"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(
        (evicted["moved"].clone(), evicted["failed"].clone()),
        (json!(2), json!(1))
    );
    let gone: BTreeSet<String> = fake
        .evicted()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        ["train-0", "cache-0", "etl-0"]
            .iter()
            .all(|p| gone.contains(*p)),
        "{gone:?}"
    );
    for p in fake.evicted() {
        let conditions = p["status"]["conditions"].as_array().unwrap();
        assert!(
            conditions.iter().any(|c| c["type"] == "DisruptionTarget"),
            "{p}"
        );
    }
    let events = fake.events();
    assert_eq!(events.len(), 1, "one Event, on the failed pod: {events:?}");
    assert_eq!(events[0]["involvedObject"]["name"], "etl-0");
    let etl = fake
        .evicted()
        .into_iter()
        .find(|p| p["metadata"]["name"] == "etl-0")
        .unwrap();
    assert_eq!(
        events[0]["involvedObject"]["uid"], etl["metadata"]["uid"],
        "kubectl describe pod finds events by uid"
    );
    assert_eq!(events[0]["type"], "Warning");
    let message = events[0]["message"].as_str().unwrap();
    assert!(message.contains("node w-2"), "{message}");
    // What a Kubernetes user can do about it, in Kubernetes' words.
    assert!(
        message.contains("hale.dev/restart=on-node-fault"),
        "{message}"
    );
    assert!(!message.contains("Set policy.restart"), "{message}");
    let w2 = fake.node("w-2");
    assert_eq!(w2["spec"]["unschedulable"], true);
    assert_eq!(
        w2["metadata"]["annotations"]["hale.dev/evicted"], "GPU_ECC_ERRORS",
        "the eviction is on the node, for a replica that takes over"
    );

    // A budget that never gives way: after evictionTimeout the pod stays, the drain
    // is recorded with what it could not move, and nothing is retried behind the
    // operator's back.
    let drained = active_drain(&hale, "w-3", "disk swap", Duration::from_secs(30)).await;
    assert_eq!(
        (drained["moved"].clone(), drained["blocked"].clone()),
        (json!(0), json!(1))
    );
    assert!(
        drained["message"]
            .as_str()
            .unwrap()
            .contains("held on the node"),
        "{drained}"
    );
    assert!(fake.pods().iter().any(|p| p["metadata"]["name"] == "db-0"));
    // Asked again and again until evictionTimeout had passed, and once more at it:
    // not given up before. (The fake times each attempt as it arrives; the first
    // one's way there, milliseconds, is not hale's to count.)
    let times = fake.eviction_times("data", "db-0");
    let span = times.last().unwrap().duration_since(times[0]);
    assert!(
        times.len() >= 3 && span >= Duration::from_millis(4_900),
        "{} attempts over {span:?} of a 5 s evictionTimeout",
        times.len()
    );
    let attempts = times.len();

    // The shortest timeout still tries again before it gives up. (The adapter reads
    // it at start: hale restarted with it, the Lease handed over on the way.)
    hale.signal("TERM");
    eventually("the Lease released", Duration::from_secs(15), || async {
        let lease = fake.lease("default", "hale")?;
        lease["spec"]["holderIdentity"].is_null().then_some(())
    })
    .await;
    let path = dir.path().join("hale.yaml");
    let cfg = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        cfg.replace("evictionTimeout: 5s", "evictionTimeout: 1s"),
    )
    .unwrap();
    hale.restart().await;
    eventually("leading again", Duration::from_secs(20), || async {
        leads(&hale).await.then_some(())
    })
    .await;
    let drained = active_drain(&hale, "w-4", "disk swap", Duration::from_secs(30)).await;
    assert_eq!(drained["blocked"], 1, "{drained}");
    let tries = fake.eviction_attempts("data", "db-1");
    assert!(tries >= 2, "{tries} attempts within a 1 s evictionTimeout");
    // w-3's drain, given up on before, was not retried behind the operator's back
    // (nor by the restarted hale).
    assert_eq!(
        fake.eviction_attempts("data", "db-0") as usize,
        attempts,
        "retried after giving up"
    );
    served(&fake)
}

/// Refusals that are the API server's, not a budget's, met within one drain, past
/// its `evictionTimeout` (2 s): API Priority and Fairness's 429 (plain text, no
/// budget behind it) and a 500, asked again with backoff for a grace after the
/// first — a budget's 429 would have left the pod blocked at the deadline — then a
/// namespace being deleted (no eviction taken there; the namespace controller has
/// deleted the pod meanwhile). The drain ends with both pods moved, none blocked,
/// no failed try.
async fn a_drain_rides_out_the_api_servers_own_refusals() -> Served {
    let fake = FakeApi::start(
        (0..10)
            .map(|i| ready_node(&format!("q-{i}"), json!({})))
            .collect(),
    )
    .await;
    fake.put_pod(pod(
        "ci",
        "build-0",
        "q-1",
        Some(("ReplicaSet", "build")),
        json!({}),
    ));
    fake.put_pod(pod(
        "shop",
        "web-0",
        "q-1",
        Some(("ReplicaSet", "web")),
        json!({}),
    ));
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &fake.url);
    let hale = Hale::start(
        dir.path(),
        &am.url,
        &kube_extra(&kubeconfig, ", evictionTimeout: 2s"),
    )
    .await;
    let mut alerts = vec![watchdog()];
    alerts.extend((0..10).map(|i| heartbeat(&format!("q-{i}"))));
    am.fire(&alerts).await;
    hale.wait_node("reported", "q-1", |n| n["score"] == 100)
        .await;
    eventually("leading", Duration::from_secs(20), || async {
        leads(&hale).await.then_some(())
    })
    .await;

    // build-0 (namespace ci, evicted first) meets them all: at 0, 1, 3 and 7 s,
    // then the namespace's refusal at 15 s, its pod deleted at 3 s.
    fake.fault_evictions(&[
        EvictionFault::Throttled,
        EvictionFault::Internal,
        EvictionFault::Throttled,
        EvictionFault::Throttled,
    ]);
    fake.end_namespace("ci", Duration::from_secs(3));
    let drained = active_drain(&hale, "q-1", "kernel update", Duration::from_secs(45)).await;
    assert_eq!(
        (drained["moved"].clone(), drained.get("blocked")),
        (json!(2), None),
        "{drained}"
    );
    assert_eq!(
        fake.eviction_attempts("ci", "build-0"),
        5,
        "each refusal asked again"
    );
    let evicted: Vec<Value> = fake.evicted();
    assert_eq!(evicted.len(), 1, "{evicted:?}");
    assert_eq!(evicted[0]["metadata"]["name"], "web-0");
    assert!(
        fake.pods()
            .iter()
            .filter(|p| p["metadata"]["name"] == "build-0")
            .all(|p| !p["metadata"]["deletionTimestamp"].is_null()),
        "build-0 left by its namespace's deletion"
    );
    assert_eq!(
        metric(
            &hale.metrics().await,
            "hale_orchestrator_failures_total",
            &[("operation", "drain"), ("reason", "transient")]
        ),
        Some(0.0),
        "the drain failed and was tried again as a whole"
    );
    served(&fake)
}

/// An operator's active drain of `node` through the API, and the `NODE_DRAINED`
/// it records once done.
async fn active_drain(hale: &Hale, node: &str, reason: &str, within: Duration) -> Value {
    let r = reqwest::Client::new()
        .post(format!("{}/drain", hale.node_url(node)))
        .bearer_auth(TOKEN)
        .json(&json!({"active": true, "reason": reason}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    eventually(&format!("{node}'s drain recorded"), within, || async {
        let e = hale.events(node, "type=NODE_DRAINED").await;
        e["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["active"] == true)
            .cloned()
    })
    .await
}

/// Also returns hale's first conclusion to replace r-2, a node still running a pod.
async fn replacement_deletes_the_machine_or_nodeclaim_once_the_node_is_empty() -> (Served, Value) {
    let mut nodes: Vec<Value> = (0..10)
        .map(|i| ready_node(&format!("r-{i}"), json!({"pool": "metal"})))
        .collect();
    nodes[1]["metadata"]["annotations"] = json!({
        "cluster.x-k8s.io/machine": "m-1", "cluster.x-k8s.io/cluster-namespace": "capi"});
    nodes[2]["metadata"]["ownerReferences"] = json!([{"apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim", "name": "nc-2", "uid": "uid-nc-2"}]);
    // r-4: a control plane's Machine, which nothing would bring back.
    nodes[4]["metadata"]["annotations"] = json!({
        "cluster.x-k8s.io/machine": "cp-4", "cluster.x-k8s.io/cluster-namespace": "capi"});
    let fake = FakeApi::start(nodes).await;
    // A pod's kubelet confirms its end a quarter of its grace period after it is
    // deleted: 7.5 s of the default 30.
    fake.set_grace_scale(0.25);
    fake.put_object(
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
        "metadata": {"name": "m-1", "namespace": "capi", "ownerReferences": [{
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineSet",
            "name": "workers-abc", "uid": "uid-ms", "controller": true}]},
        "status": {"nodeRef": {"name": "r-1"}}}),
    );
    fake.put_object(
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
        "metadata": {"name": "cp-4", "namespace": "capi", "ownerReferences": [{
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
            "name": "cp", "uid": "uid-kcp", "controller": true}]},
        "status": {"nodeRef": {"name": "r-4"}}}),
    );
    fake.put_object(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "nc-2"}, "status": {"nodeName": "r-2"}}));
    // r-2 runs a pod the replacement must wait for; r-1 only a DaemonSet's.
    fake.put_pod(pod(
        "shop",
        "api-0",
        "r-2",
        Some(("ReplicaSet", "api-rs")),
        json!({}),
    ));
    fake.put_object(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "api-rs", "namespace": "shop"}}));
    fake.put_pod(pod(
        "kube-system",
        "agent-r1",
        "r-1",
        Some(("DaemonSet", "agent")),
        json!({}),
    ));

    let am = Alertmanager::start(None).await;
    // The pipeline is up before hale starts, as it is where hale is deployed.
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &fake.url);
    let extra = format!(
        "pools: [{{ name: metal, selector: {{ pool: metal }}, nodeHealth: {{ mode: replace, maxUnavailablePercent: 50 }} }}]\n{}",
        kube_extra(&kubeconfig, "")
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    let mut alerts = vec![watchdog()];
    alerts.extend((0..10).map(|i| heartbeat(&format!("r-{i}"))));
    am.fire(&alerts).await;
    hale.wait_node("reported", "r-9", |n| n["score"] == 100)
        .await;
    let broken: Vec<Value> = (1..=4)
        .flat_map(|i| {
            let n = format!("r-{i}");
            [gpu_ecc_uncorrectable(&n), smart_failing(&n)]
        })
        .collect();
    am.fire(&broken).await;

    eventually("Machine m-1 deleted", Duration::from_secs(30), || async {
        fake.deleted()
            .contains(&("Machine".into(), "m-1".into()))
            .then_some(())
    })
    .await;
    fake_until("r-2 cordoned", &fake, "r-2", |n| {
        n["spec"]["unschedulable"] == true
    })
    .await;
    // Waiting on the running pod: rounds that counted r-2's pods, and no deletion.
    pod_lists(&fake, 6).await;
    assert!(
        fake.object("NodeClaim", None, "nc-2").is_some(),
        "deleted while a pod still ran: {:?}",
        fake.deleted()
    );
    let view = hale.node("r-2").await.unwrap();
    assert_eq!(view["policy"]["kind"], "acted", "{view}");
    assert_eq!(view["policy"]["waiting"], true, "{view}");
    // Its ReplicaSet scales down: the pod terminates over its grace period, and while
    // it does, it is still on the node.
    fake.delete_pod("shop", "api-0");
    let terminating = |fake: &FakeApi| {
        fake.pods().iter().any(|p| {
            p["metadata"]["name"] == "api-0" && p["metadata"]["deletionTimestamp"].is_string()
        })
    };
    assert!(terminating(&fake));
    pod_lists(&fake, 6).await;
    assert!(
        terminating(&fake),
        "the pod left before hale looked at it terminating: the test is too slow"
    );
    assert!(
        fake.object("NodeClaim", None, "nc-2").is_some(),
        "deleted while a pod was still terminating: {:?}",
        fake.deleted()
    );
    // Gone: now the NodeClaim goes.
    eventually(
        "NodeClaim nc-2 deleted",
        Duration::from_secs(30),
        || async {
            fake.object("NodeClaim", None, "nc-2")
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(!fake.pods().iter().any(|p| p["metadata"]["name"] == "api-0"));
    // The inventory counted pods from the API server's watch cache; consistent
    // reads remain where they must (the count a deletion rests on among them).
    let (cached, consistent) = fake.pod_lists();
    assert!(
        cached > 0 && consistent > 0,
        "{cached} pod lists from the watch cache, {consistent} consistent"
    );
    // r-3 belongs to no provisioner: taken out, never deleted.
    let halted = eventually("r-3 halted", Duration::from_secs(20), || async {
        let e = hale.events("r-3", "type=POLICY_HALTED").await;
        e["events"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(halted["guardrail"], "notProvisioned", "{halted}");
    // r-4's Machine belongs to a control plane: refused, and kept.
    let halted = eventually("r-4 refused", Duration::from_secs(20), || async {
        let e = hale.events("r-4", "type=POLICY_HALTED").await;
        e["events"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(halted["guardrail"], "terminationRejected", "{halted}");
    assert!(fake.object("Machine", Some("capi"), "cp-4").is_some());
    // A replaced node is on its way out: marked, out of the fleet hale schedules
    // for, never replaced twice while its owner's controller removes it.
    let r1 = fake.node("r-1");
    assert!(
        r1["metadata"]["annotations"]["hale.dev/replaced-at"].is_string(),
        "{r1}"
    );
    polled(&hale, 3).await;
    assert_eq!(
        fake.deleted(),
        [
            ("Machine".to_string(), "m-1".to_string()),
            ("NodeClaim".into(), "nc-2".into())
        ]
    );
    // Each replacement recorded (and counted against maxReplacementsPerHour), the
    // replaced node not taken for one gone from the cluster.
    for node in ["r-1", "r-2"] {
        let history = hale.events(node, "").await;
        let replaced = types(&history)
            .iter()
            .filter(|t| *t == "NODE_REPLACED")
            .count();
        assert_eq!(replaced, 1, "{node}: {history}");
    }
    // r-2 ran api-0 when hale first concluded to replace it: its first conclusion,
    // held to waiting on that pod once every scenario has run.
    let acted = hale.events("r-2", "type=POLICY_ACTED").await;
    let first = acted["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "replace")
        .cloned()
        .unwrap_or_default();
    (served(&fake), first)
}

/// Wait until hale has listed pods `n` more times (each a look at what a cordoned
/// node still runs).
async fn pod_lists(fake: &FakeApi, n: usize) {
    let count = |fake: &FakeApi| {
        fake.requests()
            .iter()
            .filter(|r| r.verb == "list" && r.resource == "pods" && r.status == 200)
            .count()
    };
    let from = count(fake);
    eventually("hale counting pods", Duration::from_secs(20), || async {
        (count(fake) >= from + n).then_some(())
    })
    .await;
}

/// Node writes (`patch`, `create`, `delete` outside the Lease) `user` made.
fn writes_by(fake: &FakeApi, user: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| {
            r.user == user
                && r.resource != "leases"
                && r.verb != "get"
                && r.verb != "list"
                && r.verb != "watch"
        })
        .count()
}

async fn leads(hale: &Hale) -> bool {
    metric(&hale.metrics().await, "hale_leader", &[]) == Some(1.0)
}

async fn two_replicas_one_leader_and_a_handover_without_double_action() -> Served {
    let nodes: Vec<Value> = (0..10)
        .map(|i| ready_node(&format!("l-{i}"), json!({"pool": "gpu"})))
        .collect();
    let fake = FakeApi::start(nodes).await;
    let am = Alertmanager::start(None).await;
    // The pipeline is up before hale starts, as it is where hale is deployed.
    am.fire(&[watchdog()]).await;
    let pool = "pools: [{ name: gpu, selector: { pool: gpu }, nodeHealth: { mode: cordon } }]\n";
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let start = |dir: std::path::PathBuf, token: &'static str| {
        let kubeconfig = kubeconfig_as(&dir, &fake.url, token);
        let extra = format!(
            "{pool}orchestrator: {{ kind: kubernetes, kubeconfig: {}, lease: {{ duration: 6s }} }}\n",
            kubeconfig.display()
        );
        let am_url = am.url.clone();
        async move { Hale::start(&dir, &am_url, &extra).await }
    };
    let a = start(dir_a.path().to_path_buf(), "replica-a").await;
    eventually("a leads", Duration::from_secs(20), || async {
        leads(&a).await.then_some(())
    })
    .await;
    // Someone else writes the Lease between a's read and its renewal: a genuine 409,
    // which is a race to read again, not another replica holding the Lease.
    let renewals = |fake: &FakeApi, status: u16| {
        fake.requests()
            .iter()
            .filter(|r| r.user == "replica-a" && r.verb == "update" && r.resource == "leases")
            .filter(|r| r.status == status)
            .count()
    };
    fake.race_next_lease_update("default", "hale");
    eventually(
        "a renewal met the race",
        Duration::from_secs(20),
        || async { (renewals(&fake, 409) == 1).then_some(()) },
    )
    .await;
    let renewed = renewals(&fake, 200);
    eventually("a renewed after it", Duration::from_secs(20), || async {
        (renewals(&fake, 200) > renewed).then_some(())
    })
    .await;
    assert!(leads(&a).await, "a stopped leading over a conflict");
    let log = a.log();
    assert!(
        !log.contains("held by another replica"),
        "a conflict taken for another holder:\n{log}"
    );
    // One renewal answered with a 500 (etcd changing leader): a tries again soon
    // and leads on in the same term, never stepping down in between.
    fake.fail_next_lease_update("default", "hale");
    eventually("a renewal met the 500", Duration::from_secs(20), || async {
        (renewals(&fake, 500) == 1).then_some(())
    })
    .await;
    let renewed = renewals(&fake, 200);
    eventually("a renewed after it", Duration::from_secs(20), || async {
        (renewals(&fake, 200) > renewed).then_some(())
    })
    .await;
    let log = a.log();
    assert_eq!(
        log.matches("leading: this replica acts").count(),
        1,
        "a lost its lead over one failed renewal:\n{log}"
    );
    let b = start(dir_b.path().to_path_buf(), "replica-b").await;

    let mut alerts = vec![watchdog()];
    alerts.extend((0..10).map(|i| heartbeat(&format!("l-{i}"))));
    am.fire(&alerts).await;
    b.wait_node("b follows", "l-9", |n| n["score"] == 100).await;
    am.fire(&[gpu_ecc_uncorrectable("l-1")]).await;
    fake_until("l-1 cordoned", &fake, "l-1", |n| {
        n["spec"]["unschedulable"] == true
    })
    .await;
    b.wait_node("b saw it too", "l-1", |n| n["status"] == "Cordoned")
        .await;
    // The operator puts l-1 back in service: both replicas record it, and what b
    // had decided about l-1 must not come back when b leads.
    fake.kubectl("l-1", json!({"spec": {"unschedulable": null}}));
    for replica in [&a, &b] {
        replica
            .wait_node("uncordon seen", "l-1", |n| n["status"] == "Ready")
            .await;
    }
    // a, leading, takes hale's record of the cordon off the node.
    fake_until("stale cordon record removed", &fake, "l-1", |n| {
        n["metadata"]["annotations"]["hale.dev/cordoned-by"].is_null()
    })
    .await;
    // Two more rounds of b's since: it would have written by now if it thought it
    // led.
    polled(&b, 2).await;

    // Only the leader writes and publishes node series; the follower refuses verbs.
    assert_eq!(writes_by(&fake, "replica-b"), 0, "{:?}", fake.requests());
    assert!(writes_by(&fake, "replica-a") > 0);
    assert!(!leads(&b).await);
    assert!(metric(&b.metrics().await, "hale_node_reliability_score", &[]).is_none());
    assert!(metric(&a.metrics().await, "hale_node_reliability_score", &[]).is_some());
    let r = reqwest::Client::new()
        .post(format!("{}/cordon", b.node_url("l-5")))
        .bearer_auth(TOKEN)
        .json(&json!({"reason": "test"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "not_leader");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("-{}", a.pid())),
        "names the leader: {body}"
    );
    // The CLI asks again (behind a Service, another replica may answer), then
    // says why it gave up.
    let out = b.cli(&["node", "cordon", "l-5", "--reason", "test"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not_leader (503)"), "{err}");

    // a can no longer renew the Lease, though it could still write Nodes: it must
    // stop acting on its own, before b starts.
    fake.forbid_leases("replica-a");
    let cut = std::time::Instant::now();
    loop {
        let (la, lb) = (leads(&a).await, leads(&b).await);
        assert!(!(la && lb), "two leaders at once");
        if lb {
            break;
        }
        assert!(cut.elapsed() < Duration::from_secs(30), "b never took over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let handover = fake.requests().len();
    // b carries on from where a left: l-2 is b's to cordon, a does nothing more,
    // and l-1 stays in service.
    am.fire(&[gpu_ecc_uncorrectable("l-2")]).await;
    fake_until("l-2 cordoned by b", &fake, "l-2", |n| {
        n["spec"]["unschedulable"] == true
    })
    .await;
    assert!(asked(&fake, "replica-b", "patch", "nodes", "l-2") > 0);
    a.wait_node("a decided it too", "l-2", |n| n["status"] == "Cordoned")
        .await;
    // Two more rounds of a's since: its pending cordon would have been written.
    polled(&a, 2).await;
    let late: Vec<_> = fake.requests()[handover..]
        .iter()
        .filter(|r| r.user == "replica-a" && r.resource != "leases" && r.verb == "patch")
        .cloned()
        .collect();
    assert!(late.is_empty(), "a wrote after b took over: {late:?}");
    assert_eq!(
        fake.node("l-1")["spec"]["unschedulable"],
        Value::Null,
        "l-1 re-cordoned"
    );
    assert_eq!(
        asked(&fake, "replica-b", "patch", "nodes", "l-1"),
        0,
        "b acted on l-1"
    );
    let lease = fake.lease("default", "hale").unwrap();
    let holder = lease["spec"]["holderIdentity"].as_str().unwrap();
    assert!(holder.ends_with(&format!("-{}", b.pid())), "{lease}");
    assert!(lease["spec"]["leaseTransitions"].as_i64().unwrap() >= 1);
    // SIGTERM: b gives the Lease up rather than leaving the next leader to wait
    // out its duration (a, cut off from the Leases, cannot take it meanwhile).
    b.signal("TERM");
    let released = eventually("the Lease released", Duration::from_secs(15), || async {
        let lease = fake.lease("default", "hale").unwrap();
        lease["spec"]["holderIdentity"].is_null().then_some(lease)
    })
    .await;
    assert_eq!(released["spec"]["leaseDurationSeconds"], 1, "{released}");
    served(&fake)
}

/// A ClusterRole without Nodes (403 at every list): the start waits its 30 s for
/// the first list, says the watch's failure once rather than at every retry, and
/// stops naming the refusal — the cause, not only the wait.
#[tokio::test]
async fn nodes_forbidden_stop_the_start_naming_the_refusal() {
    let fake = FakeApi::start(vec![ready_node("k1", json!({}))]).await;
    fake.forbid_nodes("no-nodes");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig_as(dir.path(), &fake.url, "no-nodes");
    let port = free_port();
    let config = webhook_only_config(
        dir.path(),
        port,
        &format!(
            "orchestrator: {{ kind: kubernetes, kubeconfig: {} }}\n",
            kubeconfig.display()
        ),
    );
    std::fs::write(dir.path().join("hale.yaml"), config).unwrap();
    let out = tokio::task::spawn_blocking({
        let path = dir.path().join("hale.yaml");
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
                .args(["serve", "--config"])
                .arg(path)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("the API server did not list the Nodes within 30s (the last try:")
            && said.contains("forbidden"),
        "{said}"
    );
    let log = String::from_utf8_lossy(&out.stdout);
    let warned = log.matches("watch on Nodes interrupted").count();
    assert_eq!(warned, 1, "said once, not at every retry: {log}");
}
