//! The Kubernetes orchestrator through the real `kube` client against the in-process
//! fake API server (`kube_fake.rs`; no real API server is installable here): the
//! inventory from the watch, cordons with who and why, the gate taint, cordons and
//! uncordons made with kubectl, and every request it served held against the Helm
//! chart's ClusterRole.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;
use crate::kube_fake::{FakeApi, kubeconfig, kubeconfig_as, pod, ready_node};

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

fn served(fake: &FakeApi) -> Served {
    (fake.served(), fake.served_leases())
}

/// Every scenario at once, each against its own fake API server; together they use
/// exactly what the chart grants — no request it would refuse, no grant unused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_adapter_uses_exactly_what_the_chart_grants() {
    let (a, b, c, d, e) = tokio::join!(
        nodes_cordons_and_the_gate_go_through_the_api_server(),
        conditions_score_and_health_are_published_on_the_node(),
        drains_and_fault_evictions_go_through_the_eviction_api(),
        replacement_deletes_the_machine_or_nodeclaim_once_the_node_is_empty(),
        two_replicas_one_leader_and_a_handover_without_double_action(),
    );
    let (mut cluster, mut namespace) = (BTreeSet::new(), BTreeSet::new());
    for (c, n) in [a, b, c, d, e] {
        cluster.extend(c);
        namespace.extend(n);
    }
    assert_eq!(
        cluster,
        granted("clusterRules"),
        "served vs the ClusterRole"
    );
    assert_eq!(namespace, granted("namespaceRules"), "served vs the Role");
}

async fn nodes_cordons_and_the_gate_go_through_the_api_server() -> Served {
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
    let r = reqwest::Client::new()
        .patch(format!("{}/api/v1/nodes/g-1", fake.url))
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

async fn conditions_score_and_health_are_published_on_the_node() -> Served {
    let mut n1 = ready_node("n-1", json!({}));
    // The Node Problem Detector's condition: never hale's to touch.
    n1["status"]["conditions"].as_array_mut().unwrap().push(
        json!({"type": "KernelDeadlock", "status": "False", "reason": "KernelHasNoDeadlock"}),
    );
    let fake = FakeApi::start(vec![n1, ready_node("n-2", json!({}))]).await;
    let mut am = Alertmanager::start(None).await;
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

    let ctype = "AlertManager_DiskDegraded";
    let node = fake_until("the condition on n-1", &fake, "n-1", |n| {
        condition(n, ctype).is_some()
    })
    .await;
    let c = condition(&node, ctype).unwrap().clone();
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "AlertIsFiring");
    assert_eq!(c["message"], "SMART health check failing on /dev/sda");
    let node = fake_until("score annotations", &fake, "n-1", |n| {
        n["metadata"]["annotations"]["hale.dev/score"] == "60"
    })
    .await;
    let view = hale.node("n-1").await.unwrap();
    assert_eq!(
        node["metadata"]["annotations"]["hale.dev/health"],
        view["health"]
    );
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

    // Unchanged: the heartbeat moves, the transition does not.
    let node = fake_until("heartbeat renewed", &fake, "n-1", |n| {
        condition(n, ctype).is_some_and(|x| x["lastHeartbeatTime"] != c["lastHeartbeatTime"])
    })
    .await;
    assert_eq!(
        condition(&node, ctype).unwrap()["lastTransitionTime"],
        c["lastTransitionTime"]
    );
    // Nothing to say about n-2: no status write at all, and the annotations
    // written once each time they changed, not every round.
    assert_eq!(asked(&fake, "", "patch", "nodes/status", "n-2"), 0);
    let writes = asked(&fake, "", "patch", "nodes", "n-2");
    assert!(writes <= 2, "{writes} annotation writes");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(asked(&fake, "", "patch", "nodes", "n-2"), writes);

    // Cleared: False, then gone once it has lingered.
    am.resolve(&[smart_failing("n-1")]).await;
    let node = fake_until("cleared", &fake, "n-1", |n| {
        condition(n, ctype).is_some_and(|x| x["status"] == "False")
    })
    .await;
    let cleared_at = std::time::Instant::now();
    let cleared = condition(&node, ctype).unwrap();
    assert_eq!(cleared["reason"], "AlertIsNotFiring");
    let time = |c: &Value, key: &str| {
        c[key]
            .as_str()
            .unwrap()
            .parse::<chrono::DateTime<chrono::Utc>>()
            .unwrap()
    };
    assert!(
        time(cleared, "lastTransitionTime") > time(&c, "lastTransitionTime"),
        "the transition to False moved lastTransitionTime: {cleared} after {c}"
    );
    fake_until("removed after the linger", &fake, "n-1", |n| {
        condition(n, ctype).is_none()
    })
    .await;
    // Whole-second timestamps and polling: at least 4 of the linger's 6 seconds.
    assert!(
        cleared_at.elapsed() >= Duration::from_secs(4),
        "removed after {:?}, before the 6 s linger",
        cleared_at.elapsed()
    );
    let node = fake.node("n-1");
    assert!(condition(&node, "KernelDeadlock").is_some());

    // Blind: every condition hale owns turns Unknown, none is cleared or removed.
    am.fire(&[smart_failing("n-1")]).await;
    fake_until("raised again", &fake, "n-1", |n| {
        condition(n, ctype).is_some_and(|x| x["status"] == "True")
    })
    .await;
    am.kill();
    let node = fake_until("unknown while stale", &fake, "n-1", |n| {
        condition(n, ctype).is_some_and(|x| x["status"] == "Unknown")
    })
    .await;
    assert_eq!(
        condition(&node, ctype).unwrap()["reason"],
        "AlertsUnavailable"
    );
    assert!(condition(&node, "KernelDeadlock").is_some());
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
    fake.put_object(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "etl", "namespace": "etl"}}));

    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &fake.url);
    let extra = format!(
        "nodeHealth: {{ evictOnFaultClasses: [GPU_ECC_ERRORS] }}\n{}",
        kube_extra(&kubeconfig, ", evictionTimeout: 8s")
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
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
    fake.pdb("web-pdb", "shop", json!({"app": "web"}), 1);
    let evicted = eventually("web-1 evicted", Duration::from_secs(30), || async {
        let e = fake.evicted();
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(evicted[0]["metadata"]["name"], "web-1");
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
    assert_eq!(drained["moved"], 1);

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
    assert!(
        events[0]["message"].as_str().unwrap().contains("node w-2"),
        "{}",
        events[0]["message"]
    );
    let w2 = fake.node("w-2");
    assert_eq!(w2["spec"]["unschedulable"], true);
    assert_eq!(
        w2["metadata"]["annotations"]["hale.dev/evicted"], "GPU_ECC_ERRORS",
        "the eviction is on the node, for a replica that takes over"
    );

    // A budget that never gives way: after evictionTimeout the pod stays, the drain
    // is recorded with what it could not move, and nothing is retried behind the
    // operator's back.
    let r = reqwest::Client::new()
        .post(format!("{}/drain", hale.node_url("w-3")))
        .bearer_auth(TOKEN)
        .json(&json!({"active": true, "reason": "disk swap"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let drained = eventually("w-3 drain recorded", Duration::from_secs(30), || async {
        let e = hale.events("w-3", "type=NODE_DRAINED").await;
        e["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["active"] == true)
            .cloned()
    })
    .await;
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
    let attempts = fake.eviction_attempts("data", "db-0");
    assert!(attempts >= 3, "{attempts} attempts in 8 s of backoff");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        fake.eviction_attempts("data", "db-0"),
        attempts,
        "retried after giving up"
    );
    served(&fake)
}

async fn replacement_deletes_the_machine_or_nodeclaim_once_the_node_is_empty() -> Served {
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
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        fake.object("NodeClaim", None, "nc-2").is_some(),
        "deleted while a pod still ran: {:?}",
        fake.deleted()
    );
    let view = hale.node("r-2").await.unwrap();
    assert_eq!(view["policy"]["kind"], "acted", "{view}");
    // The pod finishes: now the NodeClaim goes.
    let mut finished = pod(
        "shop",
        "api-0",
        "r-2",
        Some(("ReplicaSet", "api-rs")),
        json!({}),
    );
    finished["status"]["phase"] = json!("Succeeded");
    fake.put_pod(finished);
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
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        fake.deleted(),
        [
            ("Machine".to_string(), "m-1".to_string()),
            ("NodeClaim".into(), "nc-2".into())
        ]
    );
    for node in ["r-1", "r-2"] {
        let replaced = hale.events(node, "type=NODE_REPLACED").await;
        assert_eq!(replaced["events"].as_array().unwrap().len(), 1, "{node}");
    }
    served(&fake)
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
    hale.metrics().await.lines().any(|l| l == "hale_leader 1")
}

async fn two_replicas_one_leader_and_a_handover_without_double_action() -> Served {
    let nodes: Vec<Value> = (0..10)
        .map(|i| ready_node(&format!("g-{i}"), json!({"pool": "gpu"})))
        .collect();
    let fake = FakeApi::start(nodes).await;
    let am = Alertmanager::start(None).await;
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
    let b = start(dir_b.path().to_path_buf(), "replica-b").await;

    let mut alerts = vec![watchdog()];
    alerts.extend((0..10).map(|i| heartbeat(&format!("g-{i}"))));
    am.fire(&alerts).await;
    b.wait_node("b follows", "g-9", |n| n["score"] == 100).await;
    am.fire(&[gpu_ecc_uncorrectable("g-1")]).await;
    fake_until("g-1 cordoned", &fake, "g-1", |n| {
        n["spec"]["unschedulable"] == true
    })
    .await;
    b.wait_node("b saw it too", "g-1", |n| n["status"] == "Cordoned")
        .await;
    // The operator puts g-1 back in service: both replicas record it, and what b
    // had decided about g-1 must not come back when b leads.
    fake.kubectl("g-1", json!({"spec": {"unschedulable": null}}));
    for replica in [&a, &b] {
        replica
            .wait_node("uncordon seen", "g-1", |n| n["status"] == "Ready")
            .await;
    }
    // a, leading, takes hale's record of the cordon off the node.
    fake_until("stale cordon record removed", &fake, "g-1", |n| {
        n["metadata"]["annotations"]["hale.dev/cordoned-by"].is_null()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Only the leader writes and publishes node series; the follower refuses verbs.
    assert_eq!(writes_by(&fake, "replica-b"), 0, "{:?}", fake.requests());
    assert!(writes_by(&fake, "replica-a") > 0);
    assert!(!leads(&b).await);
    assert!(!b.metrics().await.contains("hale_node_reliability_score"));
    assert!(a.metrics().await.contains("hale_node_reliability_score{"));
    let r = reqwest::Client::new()
        .post(format!("{}/cordon", b.node_url("g-5")))
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
    let out = b.cli(&["node", "cordon", "g-5", "--reason", "test"]);
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
    // b carries on from where a left: g-2 is b's to cordon, a does nothing more,
    // and g-1 stays in service.
    am.fire(&[gpu_ecc_uncorrectable("g-2")]).await;
    fake_until("g-2 cordoned by b", &fake, "g-2", |n| {
        n["spec"]["unschedulable"] == true
    })
    .await;
    assert!(asked(&fake, "replica-b", "patch", "nodes", "g-2") > 0);
    a.wait_node("a decided it too", "g-2", |n| n["status"] == "Cordoned")
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let late: Vec<_> = fake.requests()[handover..]
        .iter()
        .filter(|r| r.user == "replica-a" && r.resource != "leases" && r.verb == "patch")
        .cloned()
        .collect();
    assert!(late.is_empty(), "a wrote after b took over: {late:?}");
    assert_eq!(
        fake.node("g-1")["spec"]["unschedulable"],
        Value::Null,
        "g-1 re-cordoned"
    );
    assert_eq!(
        asked(&fake, "replica-b", "patch", "nodes", "g-1"),
        0,
        "b acted on g-1"
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
