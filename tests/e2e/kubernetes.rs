//! The Kubernetes orchestrator through the real `kube` client against the in-process
//! fake API server (`kube_fake.rs`; no real API server is installable here): the
//! inventory from the watch, cordons with who and why, the gate taint, cordons and
//! uncordons made with kubectl, and every request it served held against the Helm
//! chart's ClusterRole.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;
use crate::kube_fake::{FakeApi, kubeconfig, ready_node};

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

/// The (verb, resource) pairs the chart's ClusterRole grants.
fn granted() -> BTreeSet<(String, String)> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/hale/files/rbac.yaml");
    let rbac: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut granted = BTreeSet::new();
    for rule in rbac["clusterRules"].as_array().unwrap() {
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

#[tokio::test]
async fn nodes_cordons_and_the_gate_go_through_the_api_server() {
    let mut nodes: Vec<Value> = (0..10)
        .map(|i| ready_node(&format!("g-{i}"), json!({"pool": "gpu"})))
        .collect();
    // A taint someone else owns: the gate must keep it.
    nodes[4]["spec"]["taints"] = json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]);
    let fake = FakeApi::start(nodes).await;
    let am = Alertmanager::start(None).await;
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
    // g-4 below drainBelow: gated by the taint too.
    am.fire(&[gpu_ecc_uncorrectable("g-4"), smart_failing("g-4")])
        .await;
    let node = fake_until("g-4 gated", &fake, "g-4", |n| {
        taints(n).contains(&"hale.dev/low-score".to_string())
    })
    .await;
    assert_eq!(taints(&node), ["nvidia.com/gpu", "hale.dev/low-score"]);
    assert_eq!(node["spec"]["taints"][1]["effect"], "NoSchedule");

    // kubectl uncordon g-3: hale records the operator's uncordon and leaves it alone.
    fake.kubectl("g-3", json!({"spec": {"unschedulable": null}}));
    let n = hale
        .wait_node("uncordon seen", "g-3", |n| n["status"] == "Ready")
        .await;
    assert!(n["cordon"].is_null(), "{n}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        fake.node("g-3")["spec"]["unschedulable"],
        Value::Null,
        "not re-cordoned"
    );
    let events = hale
        .events("g-3", "type=NODE_UNCORDONED&type=POLICY_HALTED")
        .await;
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["NODE_UNCORDONED", "POLICY_HALTED"]);
    assert_eq!(events["events"][0]["by"], "operator");

    // kubectl cordon g-7: the operator's, counted against the ceiling.
    fake.kubectl("g-7", json!({"spec": {"unschedulable": true}}));
    let n = hale
        .wait_node("cordon seen", "g-7", |n| n["status"] == "Cordoned")
        .await;
    assert_eq!(n["cordon"]["by"], "operator");

    // The fake refuses what the real server refuses.
    let r = reqwest::Client::new()
        .patch(format!("{}/api/v1/nodes/g-1", fake.url))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);

    // Every request hale made is one the chart's ClusterRole grants.
    let served = fake.served();
    assert!(
        served.is_subset(&granted()),
        "served {served:?}, granted {:?}",
        granted()
    );
    for needed in [
        ("list", "nodes"),
        ("watch", "nodes"),
        ("get", "nodes"),
        ("patch", "nodes"),
    ] {
        assert!(
            served.contains(&(needed.0.to_string(), needed.1.to_string())),
            "{needed:?} not exercised: {served:?}"
        );
    }
}
