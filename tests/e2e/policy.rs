//! The policy and the operators' verbs through the real binary: decisions recorded
//! and performed (orchestrator `none`), the CLI verbs, and the backtest over the
//! store a run left behind.

use serde_json::Value;

use crate::harness::*;

fn event_types(events: &Value) -> Vec<String> {
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

/// `out`, after checking the command succeeded (its stderr shown if not).
fn succeed(out: std::process::Output) -> std::process::Output {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[tokio::test]
async fn cordon_mode_acts_once_inside_the_guardrails_and_backtest_replays_it() {
    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let pools = "pools: [{ name: gpu, selector: { pool: gpu }, nodeHealth: { mode: cordon } }]\n\
                 inventory:\n";
    let inventory: String = (0..10)
        .map(|i| format!("  - {{ id: g-{i}, labels: {{ pool: gpu }} }}\n"))
        .collect();
    let hale = Hale::start(dir.path(), &am.url, &format!("{pools}{inventory}")).await;

    let mut alerts = vec![watchdog()];
    alerts.extend((0..10).map(|i| heartbeat(&format!("g-{i}"))));
    am.fire(&alerts).await;
    hale.wait_node("reported", "g-3", |n| n["score"] == 100)
        .await;
    // Three nodes of a rack degrade at once: 20% of ten may go, the third is halted.
    am.fire(&[
        gpu_ecc_uncorrectable("g-3"),
        gpu_ecc_uncorrectable("g-4"),
        gpu_ecc_uncorrectable("g-5"),
    ])
    .await;
    for id in ["g-3", "g-4"] {
        let n = hale
            .wait_node("cordoned by hale", id, |n| n["status"] == "Cordoned")
            .await;
        assert_eq!(n["cordon"]["by"], "hale");
        assert_eq!(n["policy"]["kind"], "acted");
    }
    let n = hale
        .wait_node("halted", "g-5", |n| n["policy"]["kind"] == "halted")
        .await;
    assert_eq!(n["status"], "Ready");
    assert_eq!(n["policy"]["guardrail"], "maxUnavailablePercent");
    // More polls conclude nothing new.
    hale.after_polls(3.0).await;
    let g3 = hale
        .events("g-3", "type=POLICY_ACTED&type=NODE_CORDONED")
        .await;
    assert_eq!(event_types(&g3), ["NODE_CORDONED", "POLICY_ACTED"]);
    let g5 = hale.events("g-5", "type=POLICY_HALTED").await;
    assert_eq!(event_types(&g5), ["POLICY_HALTED"]);
    let m = hale.metrics().await;
    assert_eq!(
        metric(
            &m,
            "hale_policy_actions_total",
            &[("action", "cordon"), ("result", "done")]
        ),
        Some(2.0),
        "both cordons performed: {m}"
    );

    // The operator uncordons g-3: automation leaves it alone (one halt), and the
    // freed capacity lets the policy cordon g-5.
    succeed(hale.cli(&["node", "uncordon", "g-3", "--reason", "DIMM reseated"]));
    let n = hale
        .wait_node("suppressed", "g-3", |n| {
            n["policy"]["guardrail"] == "cordonSuppressionMinutes"
        })
        .await;
    assert_eq!(n["status"], "Ready");
    hale.wait_node("g-5 cordoned", "g-5", |n| n["status"] == "Cordoned")
        .await;

    // Backtest: a drain-mode candidate over this store, beside what was recorded.
    let candidate = dir.path().join("candidate.yaml");
    std::fs::write(
        &candidate,
        format!(
            "pools: [{{ name: gpu, selector: {{ pool: gpu }}, nodeHealth: {{ mode: drain, drainBelow: 60 }} }}]\nstore: {{ path: {} }}\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let out = succeed(hale.cli(&[
        "policy",
        "backtest",
        "--config",
        candidate.to_str().unwrap(),
        "--since",
        "1h",
        "-o",
        "json",
    ]));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["recorded"]["cordons"], 3, "{r}");
    assert_eq!(r["recorded"]["halts"], 2, "{r}");
    assert!(r["candidate"]["drains"].as_u64().unwrap() >= 2, "{r}");
    let table = hale.cli(&[
        "policy",
        "backtest",
        "--config",
        candidate.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("RECOMMENDED") && text.contains("g-3"),
        "{text}"
    );
}

#[tokio::test]
async fn operator_verbs_are_events_and_drain_all_counts_what_it_took_out() {
    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::start(dir.path(), &am.url, "").await;
    am.fire(&[watchdog(), heartbeat("a"), heartbeat("b"), heartbeat("c")])
        .await;
    hale.wait_node("reported", "c", |n| n["score"] == 100).await;

    let out = succeed(hale.cli(&[
        "node",
        "cordon",
        "a",
        "--reason",
        "BIOS update",
        "-o",
        "json",
    ]));
    let node: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(node["status"], "Cordoned");
    assert_eq!(node["cordon"]["by"], "operator");
    assert_eq!(node["cordon"]["reason"], "BIOS update");

    let out = succeed(hale.cli(&["node", "drain", "--all", "--reason", "maintenance"]));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Cordoned 2 node(s)",
        "a was already out"
    );
    let out = hale.cli(&["node", "drain", "--all", "-o", "json"]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["drained"], 0, "nothing left to take out: {r}");

    // a is cordoned already: the verb waits for the drain after the cordon too,
    // and says it is done only when nothing of it is pending.
    let out = succeed(hale.cli(&["node", "drain", "a", "--active", "--reason", "failing disk"]));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("a drained (active)\n"), "{said}");
    assert!(!said.contains("Pending:"), "{said}");
    let out = succeed(hale.cli(&["node", "uncordon", "b"]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("b uncordoned"));
    // Asked again, an uncordon that changes nothing says so.
    let out = succeed(hale.cli(&["node", "uncordon", "b"]));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("b was not cordoned: nothing done"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let a = event_types(&hale.events("a", "").await);
    assert_eq!(
        a.iter()
            .filter(|t| t.starts_with("NODE_"))
            .collect::<Vec<_>>(),
        ["NODE_CORDONED", "NODE_DRAINED"],
        "the active drain is recorded once done, with its count"
    );
    let b = event_types(&hale.events("b", "").await);
    assert!(b.ends_with(&[
        "NODE_CORDONED".into(),
        "NODE_DRAINED".into(),
        "NODE_UNCORDONED".into()
    ]));

    // Unknown nodes and missing tokens are refused.
    let out = hale.cli(&["node", "cordon", "nope"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not_found"));
    let r = reqwest::Client::new()
        .post(format!("{}/cordon", hale.node_url("c")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(hale.node("c").await.unwrap()["status"], "Cordoned");
}

/// `drain --all` takes out every ready node, page after page (1,000 a page).
#[tokio::test]
async fn drain_all_takes_out_every_ready_node_of_a_large_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "").await;
    let mut alerts = vec![watchdog()];
    alerts.extend((0..1_100).map(|i| heartbeat(&format!("n{i:04}"))));
    let pairs: Vec<(&Value, &str)> = alerts.iter().map(|a| (a, "firing")).collect();
    assert_eq!(hale.deliver(&delivery(&pairs)).await, 200);
    succeed(hale.cli(&["node", "cordon", "n1099", "--reason", "BIOS update"]));
    let out = hale.cli(&["node", "drain", "--all", "-o", "json"]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["drained"], 1_099, "every ready node: {}", r["drained"]);
    let list: Value = reqwest::get(format!("{}/api/v1/nodes?status=Ready&total=true", hale.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["total"], 0, "{}", list["total"]);
}
