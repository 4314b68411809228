//! Event history and outbound webhooks: the events API and CLI, signed CloudEvents
//! against a real HTTP receiver (and the example receiver), retries, a hanging
//! receiver, overflow, filters, reload, and crash consistency of state and events.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;

const SECRET: &str = "webhook-shared-secret";

#[tokio::test]
async fn events_api_pages_filters_and_outlives_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "").await;
    let smart = smart_failing("n1");
    assert_eq!(
        hale.deliver(&delivery(&[(&heartbeat("n1"), "firing")]))
            .await,
        200
    );
    assert_eq!(hale.deliver(&delivery(&[(&smart, "firing")])).await, 200);
    assert_eq!(hale.deliver(&delivery(&[(&smart, "resolved")])).await, 200);
    assert_eq!(hale.deliver(&delivery(&[(&smart, "firing")])).await, 200);

    let all = hale.events("n1", "").await;
    assert_eq!(
        types(&all),
        [
            "CONDITION_RAISED",
            "SCORE_CHANGED",
            "CONDITION_CLEARED",
            "SCORE_CHANGED",
            "CONDITION_RAISED",
            "SCORE_CHANGED"
        ]
    );
    assert!(all["nextPageToken"].is_null());
    let first = &all["events"][1];
    assert_eq!(first["nodeId"], "n1");
    assert_eq!(
        (first["score"].clone(), first["previousScore"].clone()),
        (json!(60), json!(100))
    );
    assert!(first["id"].is_string() && first["occurredAt"].is_string());

    // Pages of two, by token, cover everything exactly once.
    let mut ids = Vec::new();
    let mut query = "pageSize=2".to_string();
    loop {
        let page = hale.events("n1", &query).await;
        ids.extend(
            page["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].clone()),
        );
        match page["nextPageToken"].as_str() {
            Some(t) => query = format!("pageSize=2&pageToken={t}"),
            None => break,
        }
    }
    let want: Vec<Value> = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(ids, want);

    let scores = hale.events("n1", "type=score_changed").await;
    assert_eq!(types(&scores), ["SCORE_CHANGED"; 3]);
    let latest = hale.events("n1", "latest=true&pageSize=2").await;
    assert_eq!(types(&latest), ["CONDITION_RAISED", "SCORE_CHANGED"]);
    assert!(latest["nextPageToken"].is_null());
    let none = hale
        .events(
            "n1",
            "since=2000-01-01T00:00:00Z&until=2000-01-02T00:00:00Z",
        )
        .await;
    assert_eq!(types(&none), Vec::<String>::new());

    let bad = reqwest::get(format!("{}/events?type=bogus", hale.node_url("n1")))
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let unknown = reqwest::get(format!("{}/events", hale.node_url("nobody")))
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);

    // CLI: the table and JSON.
    let out = hale.cli(&[
        "node",
        "events",
        "n1",
        "--since",
        "1h",
        "--type",
        "score_changed",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["TIME", "TYPE", "DETAIL"]
    );
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[1].contains("SCORE_CHANGED") && lines[1].contains("score 100 -> 60"),
        "{text}"
    );
    let out = hale.cli(&[
        "node",
        "events",
        "n1",
        "--latest",
        "--page-size",
        "1",
        "-o",
        "json",
    ]);
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(types(&page), ["SCORE_CHANGED"]);
    let out = hale.cli(&["node", "events", "n1", "--page-size", "4"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--page-token"));

    // Decommissioned: the record goes, the history stays.
    let r = reqwest::Client::new()
        .delete(hale.node_url("n1"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let after = hale.events("n1", "latest=true&pageSize=1").await;
    assert_eq!(types(&after), ["NODE_DECOMMISSIONED"]);
}

#[tokio::test]
async fn webhooks_are_signed_retried_and_filtered() {
    let receiver = Receiver::start().await;
    receiver.fail_first("/all", 2);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), format!("{SECRET}\n")).unwrap();
    let hooks = format!(
        "nodeEventWebhooks:\n  - url: {url}/all\n    secretFile: {secret}\n    maxAttempts: 3\n  - url: {url}/scores\n    secretFile: {secret}\n    events: [score_changed]\n  - url: {url}/moved\n    secretFile: {secret}\n",
        url = receiver.url,
        secret = dir.path().join("secret").display()
    );
    let hale = Hale::webhook_only(dir.path(), &hooks).await;
    assert_eq!(
        hale.deliver(&delivery(&[(&smart_failing("n1"), "firing")]))
            .await,
        200
    );

    // /all answers 500 twice: the first event arrives three times, same id, each
    // with its own timestamp and signature.
    eventually(
        "both events delivered to /all",
        Duration::from_secs(30),
        || async {
            let got = receiver.got("/all");
            let ids: BTreeSet<&str> = got.iter().map(|r| r.header("X-Hale-Event-Id")).collect();
            (got.len() >= 4 && ids.len() == 2).then_some(())
        },
    )
    .await;
    let got = receiver.got("/all");
    let first_id = got[0].header("X-Hale-Event-Id").to_string();
    let tries: Vec<&Received> = got
        .iter()
        .filter(|r| r.header("X-Hale-Event-Id") == first_id)
        .collect();
    assert_eq!(tries.len(), 3, "two 500s then success");
    let stamps: BTreeSet<&str> = tries.iter().map(|r| r.header("X-Hale-Timestamp")).collect();
    let sigs: BTreeSet<&str> = tries.iter().map(|r| r.header("X-Hale-Signature")).collect();
    assert_eq!(
        (stamps.len(), sigs.len()),
        (3, 3),
        "fresh timestamp and signature per attempt"
    );
    for r in &got {
        assert!(r.verifies(SECRET, &r.body), "signature verifies");
        let mut tampered = r.body.clone();
        tampered[10] ^= 1;
        assert!(!r.verifies(SECRET, &tampered), "a tampered body does not");
        assert!(!r.verifies("another-secret", &r.body));
        assert_eq!(
            r.header("content-type"),
            "application/cloudevents+json; charset=utf-8"
        );
    }
    let ce = tries[2].json();
    assert_eq!(ce["specversion"], "1.0");
    assert_eq!(ce["type"], "dev.hale.node.CONDITION_RAISED");
    assert_eq!(ce["subject"], "n1");
    assert_eq!(ce["id"], first_id.as_str());
    assert_eq!(ce["data"]["condition"], "disk_degraded");
    // `data` is the event exactly as the events API renders it.
    let api = hale.events("n1", "").await;
    assert_eq!(ce["data"], api["events"][0]);

    // The filtered endpoint got only the score change.
    eventually(
        "score change at /scores",
        Duration::from_secs(10),
        || async { (!receiver.got("/scores").is_empty()).then_some(()) },
    )
    .await;
    let scores: Vec<String> = receiver
        .got("/scores")
        .iter()
        .map(|r| r.json()["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(scores, ["dev.hale.node.SCORE_CHANGED"]);
    let metrics = hale.metrics().await;
    let endpoint = shown_endpoint(&format!("{}/all", receiver.url), SECRET);
    assert_eq!(
        metric(
            &metrics,
            "hale_webhook_attempt_failures_total",
            &[("endpoint", &endpoint), ("reason", "status_500")]
        ),
        Some(2.0),
        "{metrics}"
    );
    // The fixed reasons are there at 0 before their first failure.
    assert_eq!(
        metric(
            &metrics,
            "hale_webhook_attempt_failures_total",
            &[("endpoint", &endpoint), ("reason", "timeout")]
        ),
        Some(0.0),
        "{metrics}"
    );
    // A redirect is not followed (it may lead anywhere with the signed body):
    // each event is refused there, once.
    let moved = shown_endpoint(&format!("{}/moved", receiver.url), SECRET);
    eventually(
        "both refused at /moved",
        Duration::from_secs(10),
        || async {
            let metrics = hale.metrics().await;
            let dropped = &[("endpoint", moved.as_str()), ("reason", "rejected")];
            (metric(&metrics, "hale_webhook_dropped_total", dropped) == Some(2.0)).then_some(())
        },
    )
    .await;
    assert_eq!(receiver.got("/moved").len(), 2);
    assert!(receiver.got("/landed").is_empty());
    assert!(
        hale.log().contains("HTTP 307 (redirects are not followed"),
        "{}",
        hale.log()
    );
    assert!(
        !hale.log().contains(SECRET),
        "the secret never reaches the log"
    );
}

#[tokio::test]
async fn a_hanging_receiver_does_not_slow_ingest_and_overflow_is_counted() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), SECRET).unwrap();
    let hooks = format!(
        "nodeEventWebhooks:\n  - url: {}/hang\n    secretFile: {}\n    queueSize: 3\n    timeout: 2s\n    maxAttempts: 1\n",
        receiver.url,
        dir.path().join("secret").display()
    );
    let hale = Hale::webhook_only(dir.path(), &hooks).await;
    let started = Instant::now();
    for i in 0..40 {
        let node = format!("n{i}");
        assert_eq!(
            hale.deliver(&delivery(&[(&smart_failing(&node), "firing")]))
                .await,
            200
        );
    }
    let took = started.elapsed();
    println!("40 webhook ingests while the receiver hangs: {took:?}");
    assert_eq!(receiver.in_flight(), 1, "one delivery at a time");
    // 80 events (raised + score per node): each either tried (and given up after
    // its 2 s) or, waiting beyond the 3 the queue holds, dropped as overflow —
    // none lost without a count. The first fetch took at most 8.
    let endpoint = shown_endpoint(&format!("{}/hang", receiver.url), SECRET);
    let dropped = |text: &str, reason| {
        metric(
            text,
            "hale_webhook_dropped_total",
            &[("endpoint", &endpoint), ("reason", reason)],
        )
        .unwrap_or(0.0)
    };
    let backlog = |text: &str| metric(text, "hale_webhook_backlog", &[("endpoint", &endpoint)]);
    // The one under way and those waiting behind it.
    let behind = backlog(&hale.metrics().await).expect("the backlog gauge");
    assert!(behind >= 1.0, "{behind} waiting");
    let (overflow, exhausted) = eventually(
        "every event tried or dropped",
        Duration::from_secs(60),
        || async {
            let text = hale.metrics().await;
            let counts = (dropped(&text, "overflow"), dropped(&text, "exhausted"));
            (counts.0 + counts.1 == 80.0).then_some(counts)
        },
    )
    .await;
    assert!(overflow >= 69.0, "{overflow} overflow, {exhausted} tried");
    eventually("nothing waiting", Duration::from_secs(30), || async {
        (backlog(&hale.metrics().await) == Some(0.0)).then_some(())
    })
    .await;
    assert!(
        hale.log()
            .contains("webhook queue full; the oldest events waiting dropped")
    );
}

/// Events waiting for a receiver that is down are delivered after a restart,
/// the one under way again with the same id: every endpoint resumes from the
/// store where it stopped.
#[tokio::test]
async fn events_waiting_for_a_receiver_outlive_a_restart() {
    let receiver = Receiver::start().await;
    receiver.fail_first("/later", usize::MAX);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), SECRET).unwrap();
    let hooks = format!(
        "nodeEventWebhooks:\n  - url: {}/later\n    secretFile: {}\n    maxAttempts: 20\n",
        receiver.url,
        dir.path().join("secret").display()
    );
    let mut hale = Hale::webhook_only(dir.path(), &hooks).await;
    for node in ["n1", "n2", "n3"] {
        let body = delivery(&[(&smart_failing(node), "firing")]);
        assert_eq!(hale.deliver(&body).await, 200);
    }
    let mut stored = BTreeSet::new();
    for node in ["n1", "n2", "n3"] {
        for e in hale.events(node, "").await["events"].as_array().unwrap() {
            stored.insert(e["id"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(stored.len(), 6, "raised and scored, three nodes");
    eventually("the first event tried", Duration::from_secs(10), || async {
        (!receiver.got("/later").is_empty()).then_some(())
    })
    .await;
    hale.stop();
    let before = receiver.got("/later").len();
    receiver.fail_first("/later", 0);
    hale.restart().await;
    let delivered = eventually("every event delivered", Duration::from_secs(30), || async {
        let ids: BTreeSet<String> = receiver.got("/later")[before..]
            .iter()
            .map(|r| r.header("X-Hale-Event-Id").to_string())
            .collect();
        (ids.len() >= stored.len()).then_some(ids)
    })
    .await;
    assert_eq!(delivered, stored);
}

#[tokio::test]
async fn the_example_receiver_verifies_and_deduplicates() {
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("secret");
    std::fs::write(&secret_file, SECRET).unwrap();
    let rport = free_port();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/webhook-receiver.py"
    );
    let mut child = Command::new("python3")
        .arg(example)
        .args(["--port", &rport.to_string()])
        .env("HALE_WEBHOOK_SECRET_FILE", &secret_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{rport}");
    let client = reqwest::Client::new();
    eventually("example receiver up", Duration::from_secs(10), || async {
        client.post(&url).body("x").send().await.ok().map(|_| ())
    })
    .await;

    // hale delivers to it.
    let hooks = format!(
        "nodeEventWebhooks:\n  - url: {url}/hale\n    secretFile: {}\n    events: [CONDITION_RAISED]\n",
        secret_file.display()
    );
    let hale = Hale::webhook_only(dir.path(), &hooks).await;
    assert_eq!(
        hale.deliver(&delivery(&[(&smart_failing("n1"), "firing")]))
            .await,
        200
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let accepted: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(accepted["type"], "dev.hale.node.CONDITION_RAISED");
    assert_eq!(accepted["subject"], "n1");

    // And refuses what it should.
    let send = |ts: String, body: &'static str, sig: Option<String>, id: &'static str| {
        let sig =
            sig.unwrap_or_else(|| hale::notify::signature(SECRET.as_bytes(), &ts, body.as_bytes()));
        client
            .post(&url)
            .header("X-Hale-Timestamp", ts)
            .header("X-Hale-Signature", sig)
            .header("X-Hale-Event-Id", id)
            .body(body)
    };
    let now = chrono::Utc::now().timestamp();
    let r = send(now.to_string(), r#"{"id":"e1"}"#, None, "e1")
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (200, "ok".into())
    );
    let r = send(now.to_string(), r#"{"id":"e1"}"#, None, "e1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "duplicate");
    let forged = hale::notify::signature(b"wrong", &now.to_string(), br#"{"id":"e2"}"#);
    let r = send(now.to_string(), r#"{"id":"e2"}"#, Some(forged), "e2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = send((now - 301).to_string(), r#"{"id":"e3"}"#, None, "e3")
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (401, "timestamp more than 5 minutes off".into())
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn sighup_reloads_endpoints_and_penalties_and_a_bad_file_changes_nothing() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), SECRET).unwrap();
    let port = free_port();
    let hooks = |path: &str, smart: u32| {
        format!(
            "nodeHealth: {{ penalties: {{ SmartFailing: {smart} }} }}\nnodeEventWebhooks:\n  - url: {}{path}\n    secretFile: {}\n    events: [SCORE_CHANGED]\n",
            receiver.url,
            dir.path().join("secret").display()
        )
    };
    let hale = Hale::start_with(
        dir.path(),
        port,
        &webhook_only_config(dir.path(), port, &hooks("/before", 40)),
    )
    .await;
    let smart = smart_failing("n1");
    hale.deliver(&delivery(&[(&smart, "firing")])).await;
    hale.wait_node("scored", "n1", |n| n["score"] == 60).await;
    eventually("delivered to /before", Duration::from_secs(10), || async {
        (receiver.got("/before").len() == 1).then_some(())
    })
    .await;
    // Every endpoint a webhook series names, with its count of delivered events.
    let endpoints = || async {
        let text = hale.metrics().await;
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("an exposition parses");
        let mut named = BTreeMap::new();
        for s in &scrape.samples {
            if !s.metric.starts_with("hale_webhook_") {
                continue;
            }
            let endpoint = s.labels.get("endpoint").unwrap_or_default().to_string();
            let delivered = named.entry(endpoint).or_insert(0.0);
            if s.metric == "hale_webhook_deliveries_total"
                && s.labels.get("result") == Some("delivered")
                && let prometheus_parse::Value::Counter(v) = s.value
            {
                *delivered = v;
            }
        }
        named
    };
    let before = endpoints().await;
    assert_eq!(before.values().collect::<Vec<_>>(), [&1.0], "{before:?}");

    std::fs::write(
        dir.path().join("hale.yaml"),
        webhook_only_config(dir.path(), port, &hooks("/after", 30)),
    )
    .unwrap();
    hale.signal("HUP");
    eventually("reloaded", Duration::from_secs(10), || async {
        hale.log().contains("configuration reloaded").then_some(())
    })
    .await;
    hale.deliver(&delivery(&[(&smart, "firing")])).await;
    hale.wait_node("repriced on the next report", "n1", |n| n["score"] == 70)
        .await;
    eventually("delivered to /after", Duration::from_secs(10), || async {
        (receiver.got("/after").len() == 1).then_some(())
    })
    .await;
    assert_eq!(
        receiver.got("/before").len(),
        1,
        "the old endpoint gets nothing new"
    );
    // The old endpoint's series went with it; the new one's count from zero.
    eventually(
        "the new endpoint's delivery counted",
        Duration::from_secs(10),
        || async {
            let after = endpoints().await;
            (after.values().collect::<Vec<_>>() == [&1.0]).then_some(after)
        },
    )
    .await;
    let after = endpoints().await;
    assert!(
        after.keys().all(|e| !before.contains_key(e)),
        "{before:?} {after:?}"
    );
    assert!(
        hale.log()
            .contains("applied=\"nodeHealth, nodeEventWebhooks\""),
        "the reload says what it applied: {}",
        hale.log()
    );

    // The inventory follows a reload: a node listed since is known at once.
    let after = webhook_only_config(dir.path(), port, &hooks("/after", 30));
    std::fs::write(
        dir.path().join("hale.yaml"),
        format!("{after}inventory: [{{ id: late-1 }}]\n"),
    )
    .unwrap();
    // A reload through the API: its status and its JSON answer.
    let reload = || async {
        let r = hale.ask_reload().await;
        (r.status(), r.json::<Value>().await.unwrap())
    };
    assert_eq!(
        reload().await,
        (
            reqwest::StatusCode::OK,
            json!({"reloaded": true, "warnings": []})
        )
    );
    hale.wait_node("listed by the reload", "late-1", |n| n["score"].is_null())
        .await;
    // Legal but probably not meant: reloaded, and said in the answer.
    std::fs::write(
        dir.path().join("hale.yaml"),
        format!(
            "{after}inventory: [{{ id: late-1 }}]\npools: [{{ name: a, selector: {{p: a}} }}, {{ name: b, selector: {{p: a}} }}]\n"
        ),
    )
    .unwrap();
    let (status, answer) = reload().await;
    assert_eq!(status, reqwest::StatusCode::OK);
    let said = answer["warnings"][0]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        said.contains("pools[1].selector") && said.contains("takes none"),
        "{answer}"
    );
    // What only a restart changes refuses the reload, naming it.
    std::fs::write(
        dir.path().join("hale.yaml"),
        webhook_only_config(dir.path(), free_port(), &hooks("/after", 30)),
    )
    .unwrap();
    // Refused: its error.
    let refused_reload = || async {
        let (status, e) = reload().await;
        assert_eq!(status, 400);
        e
    };
    let e = refused_reload().await;
    assert!(
        e["detail"]
            .as_str()
            .unwrap()
            .contains("hale.yaml:1: listen: changes only with a restart; nothing was reloaded"),
        "{e}"
    );
    assert!(
        hale.node("late-1").await.is_some(),
        "the refused reload changed nothing"
    );

    // A bad file: refused on SIGHUP and on /-/reload, the running config stays.
    std::fs::write(
        dir.path().join("hale.yaml"),
        "nodeHealth:\n  cordonBelw: 3\n",
    )
    .unwrap();
    let refusals = |log: &str| log.matches("reload refused").count();
    let before = refusals(&hale.log());
    hale.signal("HUP");
    eventually("reload refused", Duration::from_secs(10), || async {
        (refusals(&hale.log()) == before + 1).then_some(())
    })
    .await;
    let e = refused_reload().await;
    assert_eq!(e["error"], "invalid_config");
    assert!(
        e["detail"]
            .as_str()
            .unwrap()
            .contains("hale.yaml:2: nodeHealth.cordonBelw"),
        "{e}"
    );
    // Logged as the SIGHUP's was: the log tells every reload that did not happen.
    eventually("the refusal logged", Duration::from_secs(10), || async {
        (refusals(&hale.log()) == before + 2).then_some(())
    })
    .await;
    // And a metric says it until a reload takes a file: the next restart would
    // not start on this one.
    let text = hale.metrics().await;
    assert_eq!(
        metric(&text, "hale_config_last_reload_successful", &[]),
        Some(0.0)
    );
    assert!(
        metric(
            &text,
            "hale_config_last_reload_success_timestamp_seconds",
            &[]
        )
        .is_some_and(|t| t > 1.7e9)
    );
    let r = reqwest::Client::new()
        .post(format!("{}/-/reload", hale.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    hale.deliver(&delivery(&[(&smart, "resolved")])).await;
    hale.wait_node("still running the reloaded config", "n1", |n| {
        n["score"] == 100
    })
    .await;
    eventually(
        "still delivering to /after",
        Duration::from_secs(10),
        || async { (receiver.got("/after").len() == 2).then_some(()) },
    )
    .await;

    // The first endpoint's feed was forgotten when a reload removed it: added
    // back, it starts afresh, and is not sent the score changes recorded while it
    // was away (60 -> 70 -> 100, delivered to /after).
    assert!(
        hale.log()
            .contains("the feeds of webhook endpoints no longer configured are forgotten"),
        "{}",
        hale.log()
    );
    let reloads = hale.log().matches("configuration reloaded").count();
    std::fs::write(
        dir.path().join("hale.yaml"),
        webhook_only_config(dir.path(), port, &hooks("/before", 30)),
    )
    .unwrap();
    hale.signal("HUP");
    eventually(
        "reloaded with /before back",
        Duration::from_secs(10),
        || async { (hale.log().matches("configuration reloaded").count() > reloads).then_some(()) },
    )
    .await;
    hale.deliver(&delivery(&[(&smart, "firing")])).await;
    hale.wait_node("scored again", "n1", |n| n["score"] == 70)
        .await;
    eventually(
        "the new change delivered to /before",
        Duration::from_secs(10),
        || async { (receiver.got("/before").len() >= 2).then_some(()) },
    )
    .await;
    let scores: Vec<Value> = receiver
        .got("/before")
        .iter()
        .map(|r| r.json()["data"]["score"].clone())
        .collect();
    assert_eq!(scores, [json!(60), json!(70)], "nothing from the gap");
}

/// A reload while a delivery is under way: the new configuration's task waits for
/// the old one to finish it, and no event is delivered twice.
#[tokio::test]
async fn a_reload_during_a_delivery_delivers_nothing_twice() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), SECRET).unwrap();
    let port = free_port();
    let config = webhook_only_config(
        dir.path(),
        port,
        &format!(
            "nodeEventWebhooks:\n  - url: {}/held\n    secretFile: {}\n    events: [SCORE_CHANGED]\n    timeout: 60s\n",
            receiver.url,
            dir.path().join("secret").display()
        ),
    );
    let hale = Hale::start_with(dir.path(), port, &config).await;
    let smart = smart_failing("n1");
    hale.deliver(&delivery(&[(&smart, "firing")])).await;
    eventually(
        "the first delivery under way",
        Duration::from_secs(10),
        || async { (receiver.in_flight() == 1).then_some(()) },
    )
    .await;
    hale.reload().await;
    hale.deliver(&delivery(&[(&smart, "resolved")])).await;
    hale.wait_node("scored again", "n1", |n| n["score"] == 100)
        .await;
    receiver.release();
    let scores = || {
        receiver
            .got("/held")
            .iter()
            .map(|r| r.json()["data"]["score"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    eventually("both events delivered", Duration::from_secs(20), || async {
        scores().contains(&100).then_some(())
    })
    .await;
    let ids: Vec<String> = receiver
        .got("/held")
        .iter()
        .map(|r| r.header("X-Hale-Event-Id").to_string())
        .collect();
    assert_eq!(scores(), [60, 100], "{ids:?}");
}

#[tokio::test]
async fn kill_9_during_a_burst_keeps_state_and_events_in_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut hale = Hale::webhook_only(dir.path(), "").await;
    let nodes: Vec<String> = (0..12).map(|i| format!("n{i}")).collect();
    let mut senders = Vec::new();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for (i, node) in nodes.iter().cloned().enumerate() {
        let url = hale.url.clone();
        let accepted = accepted.clone();
        senders.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let alerts = [smart_failing(&node), gpu_ecc_uncorrectable(&node)];
            for round in 0.. {
                let a = &alerts[(round + i) % 2];
                let status = if round % 3 == 2 { "resolved" } else { "firing" };
                let sent = client
                    .post(format!("{url}/api/v1/alertmanager"))
                    .bearer_auth(TOKEN)
                    .json(&delivery(&[(a, status)]))
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status().is_success() => {
                        accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }));
    }
    // Killed in the middle of the burst: once a good many deliveries were applied
    // and a burst's worth of events kept (how many events a delivery makes
    // depends on how the senders interleave).
    eventually("deliveries applied", Duration::from_secs(60), || async {
        if accepted.load(std::sync::atomic::Ordering::Relaxed) < 60 {
            return None;
        }
        let mut kept = 0;
        for node in &nodes {
            if hale.node(node).await.is_some() {
                let page = hale.events(node, "pageSize=1000").await;
                kept += page["events"].as_array().map_or(0, Vec::len);
            }
        }
        (kept >= 100).then_some(())
    })
    .await;
    hale.kill9();
    for s in senders {
        let _ = s.await;
    }
    hale.restart().await;

    let mut replayed = 0;
    for node in &nodes {
        let Some(state) = hale.node(node).await else {
            continue;
        };
        let mut events = Vec::new();
        let mut query = "pageSize=1000".to_string();
        loop {
            let page = hale.events(node, &query).await;
            events.extend(page["events"].as_array().unwrap().clone());
            match page["nextPageToken"].as_str() {
                Some(t) => query = format!("pageSize=1000&pageToken={t}"),
                None => break,
            }
        }
        // Replay the history: it must arrive exactly at the stored state.
        let mut raised = BTreeSet::new();
        let mut score = None;
        for e in &events {
            match e["type"].as_str().unwrap() {
                "CONDITION_RAISED" => {
                    raised.insert(e["condition"].as_str().unwrap().to_string());
                }
                "CONDITION_CLEARED" => {
                    raised.remove(e["condition"].as_str().unwrap());
                }
                "SCORE_CHANGED" => score = e["score"].as_u64(),
                _ => {}
            }
        }
        replayed += events.len();
        let stored: BTreeSet<String> = conditions(&state).into_iter().collect();
        assert_eq!(raised, stored, "{node}: conditions replayed from events");
        assert_eq!(
            state["score"].as_u64(),
            Some(score.unwrap_or(100)),
            "{node}: score"
        );
    }
    assert!(replayed >= 100, "the burst was a burst: {replayed} events");
}
