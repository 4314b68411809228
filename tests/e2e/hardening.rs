//! The trust core hardened, end to end against a real Alertmanager: an Alertmanager
//! restart held, webhook-only trust without a watchdog, reads that cost no fetch,
//! paged node lists, inputs that bring in no node, and errors instead of panics.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};

use crate::harness::*;

#[tokio::test]
async fn an_alertmanager_restart_holds_absences_until_hold_after_restart() {
    let mut am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), heartbeat("n1"), smart_failing("n1")])
        .await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let am_keys = "pollInterval: 1s, holdAfterRestart: 20s, staleAfter: 1h";
    let hale = Hale::start_with(
        dir.path(),
        port,
        &config(dir.path(), port, &am.url, am_keys, ""),
    )
    .await;
    hale.wait_node("SMART raised", "n1", |n| has_condition(n, "disk_degraded"))
        .await;
    hale.after_polls(2.0).await;
    // Restarted, Alertmanager holds nothing until Prometheus re-sends it; the
    // harness re-sends the watchdog each second, as Prometheus would, but not the
    // node's alerts.
    am.restart().await;
    let source = eventually("the hold", Duration::from_secs(30), || async {
        let alerts: Value = reqwest::get(format!("{}/api/v1/alerts", hale.url))
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let reason = alerts["source"]["holdReason"].as_str()?;
        reason
            .contains("Alertmanager restarted")
            .then(|| alerts["source"].clone())
    })
    .await;
    hale.after_polls(3.0).await;
    let n1 = hale.node("n1").await.unwrap();
    assert!(
        has_condition(&n1, "disk_degraded"),
        "an absence after a restart ends nothing: {n1}"
    );
    assert_eq!(
        metric(&hale.metrics().await, "hale_alert_source_holding", &[]),
        Some(1.0)
    );
    assert!(hale.log().contains("Alertmanager restarted"));
    // The hold runs out 20 s after Alertmanager's start: then the absence counts.
    hale.wait_node_within(
        "SMART ended after the hold",
        "n1",
        Duration::from_secs(60),
        |n| !has_condition(n, "disk_degraded"),
    )
    .await;
    let events = hale.events("n1", "type=CONDITION_CLEARED").await;
    let cleared = events["events"][0]["occurredAt"].as_str().unwrap();
    let hold = source["holdUntil"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(cleared).unwrap()
            >= chrono::DateTime::parse_from_rfc3339(hold).unwrap(),
        "cleared at {cleared}, the hold ran until {hold}"
    );
}

#[tokio::test]
async fn without_polling_or_a_watchdog_every_delivery_is_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = config(
        dir.path(),
        port,
        "http://127.0.0.1:9",
        "pollInterval: 0, requireWatchdog: false, staleAfter: 10s",
        "nodeHealth: { reportIntervalSeconds: 1 }",
    );
    let hale = Hale::start_with(dir.path(), port, &config).await;
    let both = delivery(&[(&heartbeat("n1"), "firing"), (&heartbeat("n2"), "firing")]);
    assert_eq!(hale.deliver(&both).await, 200);
    assert_eq!(
        metric(&hale.metrics().await, "hale_alert_source_up", &[]),
        Some(1.0),
        "a delivery is the source when no watchdog is required"
    );
    // n2 keeps reporting every second; n1 went quiet.
    let only_n2 = delivery(&[(&heartbeat("n2"), "firing")]);
    let mut missed = None;
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(hale.deliver(&only_n2).await, 200);
        let n1 = hale.node("n1").await.unwrap();
        if has_condition(&n1, "heartbeat_missed") {
            missed = Some(n1);
            break;
        }
    }
    let n1 = missed.expect("n1 missed within 15 s and a little");
    assert_eq!(n1["health"], "Unknown");
    let n2 = hale.node("n2").await.unwrap();
    assert!(!has_condition(&n2, "heartbeat_missed"));
    assert!(!has_condition(&n2, "telemetry_stale"), "never stale: {n2}");
    assert!(
        hale.log()
            .lines()
            .any(|l| l.contains("stopped reporting") && l.contains("n1")),
        "the warning names the node"
    );
}

/// A recording proxy in front of Alertmanager: what hale asked of it, and with
/// which User-Agent.
#[derive(Clone)]
struct Proxy {
    url: String,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (log, upstream) = (seen.clone(), upstream.to_string());
        let app = axum::Router::new().fallback(
            move |uri: axum::http::Uri, headers: axum::http::HeaderMap| {
                let (log, upstream) = (log.clone(), upstream.clone());
                async move {
                    let agent = headers
                        .get("user-agent")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    log.lock().unwrap().push((uri.path().to_string(), agent));
                    // Alertmanager gone: a gateway's answer.
                    let Ok(resp) = reqwest::get(format!("{upstream}{uri}")).await else {
                        let mut out = axum::response::Response::new(axum::body::Body::empty());
                        *out.status_mut() = axum::http::StatusCode::BAD_GATEWAY;
                        return out;
                    };
                    let status = resp.status().as_u16();
                    let date = resp.headers().get("date").cloned();
                    let body = resp.bytes().await.unwrap();
                    let mut out = axum::response::Response::new(axum::body::Body::from(body));
                    *out.status_mut() = axum::http::StatusCode::from_u16(status).unwrap();
                    if let Some(d) = date {
                        out.headers_mut().insert("date", d);
                    }
                    out
                }
            },
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Proxy { url, seen }
    }

    fn asked(&self, path: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .count()
    }
}

#[tokio::test]
async fn reading_the_alerts_costs_no_fetch_and_every_request_says_who_asks() {
    let mut am = Alertmanager::start(None).await;
    let proxy = Proxy::start(&am.url).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let hale = Hale::start_with(
        dir.path(),
        port,
        &config(dir.path(), port, &proxy.url, "pollInterval: 2s", ""),
    )
    .await;
    am.fire(&[watchdog(), heartbeat("n1"), smart_failing("n1")])
        .await;
    hale.wait_node("SMART raised", "n1", |n| has_condition(n, "disk_degraded"))
        .await;
    let url = format!("{}/api/v1/alerts", hale.url);
    let first: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
    let alertnames: Vec<&str> = first["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["alertname"].as_str().unwrap())
        .collect();
    assert!(alertnames.contains(&"SmartFailing"), "{first}");
    assert_eq!(first["source"]["up"], true);
    // Fifty unauthenticated reads within a poll interval fetch nothing more.
    let before = proxy.asked("/api/v2/alerts");
    let reads = (0..50).map(|_| {
        let url = url.clone();
        async move { reqwest::get(&url).await.unwrap().status() }
    });
    for status in futures::future::join_all(reads).await {
        assert_eq!(status, 200);
    }
    assert!(
        proxy.asked("/api/v2/alerts") <= before + 1,
        "{} fetches for 50 reads",
        proxy.asked("/api/v2/alerts") - before
    );
    // A new alert shows once a poll has read it.
    am.fire(&[gpu_ecc_uncorrectable("n1")]).await;
    eventually("the new alert listed", Duration::from_secs(20), || async {
        let now: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
        now["alerts"]
            .as_array()?
            .iter()
            .any(|a| a["alertname"] == "GpuEccUncorrectable")
            .then_some(())
    })
    .await;
    // Each poll also reads the status, for Alertmanager's start time.
    assert!(proxy.asked("/api/v2/status") > 0);
    let agents: Vec<String> = proxy
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, a)| a.clone())
        .collect();
    let want = format!("hale/{}", env!("CARGO_PKG_VERSION"));
    assert!(agents.iter().all(|a| *a == want), "{agents:?}");
    // Alertmanager down: reads say so (502) from the failed poll, and ask it
    // nothing themselves.
    am.kill();
    eventually("a failed poll", Duration::from_secs(20), || async {
        let r = reqwest::get(&url).await.ok()?;
        (r.status() == 502).then_some(())
    })
    .await;
    let before = proxy.asked("/api/v2/alerts");
    for _ in 0..20 {
        let r = reqwest::get(&url).await.unwrap();
        assert_eq!(r.status(), 502);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "source_unavailable", "{body}");
    }
    assert!(
        proxy.asked("/api/v2/alerts") <= before + 1,
        "{} fetches for 20 reads of a failing Alertmanager",
        proxy.asked("/api/v2/alerts") - before
    );
}

/// An answer without end (a proxy gone wrong) is read up to
/// `alertmanager.maxAnswerBytes` and no further: the poll fails as `too_large`,
/// said in the log, nothing the source said before is cleared, and hale's memory
/// stays near the limit rather than growing until the kernel kills it.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_without_end_is_cut_off_at_its_limit() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let alert = r#"{"labels":{"alertname":"SmartFailing","node":"n1"},"annotations":{},"startsAt":"2026-12-01T00:00:00Z","endsAt":"2026-12-01T00:10:00Z","updatedAt":"2026-12-01T00:00:00Z","fingerprint":"f","receivers":[{"name":"hale"}],"status":{"state":"active","silencedBy":[],"inhibitedBy":[]}},"#;
    let chunk = axum::body::Bytes::from(alert.repeat(64));
    let app = axum::Router::new().route(
        "/api/v2/alerts",
        axum::routing::get(move || {
            let chunk = chunk.clone();
            async move {
                let endless = futures::stream::once(async { axum::body::Bytes::from("[") })
                    .chain(futures::stream::repeat(chunk))
                    .map(Ok::<_, std::convert::Infallible>);
                axum::body::Body::from_stream(endless)
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let hale = Hale::start_with(
        dir.path(),
        port,
        &config(
            dir.path(),
            port,
            &url,
            "pollInterval: 2s, staleAfter: 1h, requireWatchdog: false, maxAnswerBytes: 16777216",
            "",
        ),
    )
    .await;
    let fault = delivery(&[(&smart_failing("n0"), "firing")]);
    assert_eq!(hale.deliver(&fault).await, 200);
    eventually("a poll cut off", Duration::from_secs(30), || async {
        let text = hale.metrics().await;
        (metric(
            &text,
            "hale_alertmanager_polls_total",
            &[("result", "too_large")],
        )? >= 1.0)
            .then_some(())
    })
    .await;
    assert!(
        hale.log()
            .contains("past alertmanager.maxAnswerBytes (16777216 bytes)"),
        "{}",
        hale.log()
    );
    let n0 = hale.node("n0").await.unwrap();
    assert!(has_condition(&n0, "disk_degraded"), "nothing cleared: {n0}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", hale.pid())).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(rss_kib < 256 * 1024, "peak RSS {rss_kib} KiB");
}

#[tokio::test]
async fn the_node_list_pages_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "").await;
    let mut alerts: Vec<(Value, &str)> = vec![(watchdog(), "firing")];
    for i in 0..25 {
        alerts.push((heartbeat(&format!("n{i:02}")), "firing"));
    }
    for i in [3, 17] {
        alerts.push((smart_failing(&format!("n{i:02}")), "firing"));
    }
    let pairs: Vec<(&Value, &str)> = alerts.iter().map(|(a, s)| (a, *s)).collect();
    assert_eq!(hale.deliver(&delivery(&pairs)).await, 200);
    let list = |q: String| {
        let url = format!("{}/api/v1/nodes?{q}", hale.url);
        async move {
            let r = reqwest::get(url).await.unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        }
    };
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let q = match &token {
            Some(t) => format!("pageSize=10&pageToken={t}"),
            None => "pageSize=10".into(),
        };
        let (status, page) = list(q).await;
        assert_eq!(status, 200);
        pages += 1;
        seen.extend(
            page["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n["id"].as_str().unwrap().to_string()),
        );
        match page["nextPageToken"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let want: Vec<String> = (0..25).map(|i| format!("n{i:02}")).collect();
    assert_eq!(seen, want, "every node once, in order");
    let (_, degraded) = list("health=degraded".into()).await;
    let ids: Vec<&str> = degraded["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["n03", "n17"]);
    assert!(degraded["nextPageToken"].is_null());
    let (status, none) = list("cluster=elsewhere".into()).await;
    assert_eq!(status, 400);
    assert_eq!(
        none["detail"],
        "no cluster is named \"elsewhere\" here: default"
    );
    let (_, own) = list("cluster=default&health=degraded".into()).await;
    assert_eq!(own["nodes"].as_array().unwrap().len(), 2);
    let (_, unpooled) = list("pool=cluster&pageSize=500".into()).await;
    assert_eq!(
        unpooled["nodes"].as_array().unwrap().len(),
        25,
        "every node is in no pool"
    );
    for bad in [
        "pageSize=0",
        "pageToken=zz",
        "health=Sick",
        "status=up",
        "limit=3",
        "pool=nope",
        "health=Healthy&health=Degraded",
    ] {
        let (status, body) = list(bad.into()).await;
        assert_eq!(status, 400, "{bad}");
        assert_eq!(body["error"], "bad_request", "{bad}");
    }
    let out = hale.cli(&["node", "list", "--health", "Degraded"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 3, "a header and two nodes:\n{text}");
    let all = String::from_utf8(hale.cli(&["node", "list"]).stdout).unwrap();
    assert_eq!(all.lines().count(), 26);
}

#[tokio::test]
async fn inputs_that_name_no_node_bring_none_in_and_odd_queries_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "").await;
    let ghost = smart_failing("ghost");
    let blank = smart_failing("   ");
    let answer = hale
        .deliver(&delivery(&[
            (&watchdog(), "firing"),
            (&ghost, "resolved"),
            (&blank, "firing"),
        ]))
        .await;
    assert_eq!(answer, 200);
    assert!(
        hale.node("ghost").await.is_none(),
        "a resolved alert creates no node"
    );
    assert_eq!(hale.nodes().await["nodes"], json!([]));
    assert_eq!(
        metric(&hale.metrics().await, "hale_alerts_unmatched_total", &[]),
        Some(1.0),
        "a blank node label names no node"
    );
    // Time arithmetic with absurd input is a 400, never a dropped connection.
    assert_eq!(
        hale.deliver(&delivery(&[(&heartbeat("n1"), "firing")]))
            .await,
        200
    );
    for q in [
        "since=100000000d",
        "until=9999999999999999999s",
        "since=-5m",
    ] {
        let r = reqwest::get(format!("{}/events?{q}", hale.node_url("n1")))
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{q}");
    }
    let out = hale.cli(&[
        "policy",
        "backtest",
        "--config",
        dir.path().join("hale.yaml").to_str().unwrap(),
        "--since",
        "100000000d",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("--since"), "{err}");
}

#[tokio::test]
async fn check_config_names_the_key_written_and_says_the_other_is_a_default() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, text: &str| {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
            .args(["check-config"])
            .arg(&file)
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{text}");
        String::from_utf8(out.stderr).unwrap()
    };
    let e = run("cordon.yaml", "nodeHealth: { cordonBelow: 30 }\n");
    assert!(
        e.contains(
            "cordon.yaml:1: nodeHealth.cordonBelow: 30 is below drainBelow 45 (the default)"
        ),
        "{e}"
    );
    let e = run(
        "penalty.yaml",
        "cluster: a\nnodeHealth: { penalties: { SmartFailing: -5 } }\n",
    );
    assert!(
        e.contains("penalty.yaml:2: nodeHealth.penalties.SmartFailing:"),
        "{e}"
    );
    let e = run(
        "kind.yaml",
        "cluster: a\norchestrator:\n  kind: kubernetes\n  kubecnfig: /etc/kube\n",
    );
    assert!(
        e.contains("kind.yaml:4: orchestrator.kubecnfig:") && e.contains("unknown field"),
        "{e}"
    );
    let e = run(
        "none.yaml",
        "orchestrator: { kind: none, conditionPrefix: Hale }\n",
    );
    assert!(
        e.contains("none.yaml:1: orchestrator.conditionPrefix:"),
        "{e}"
    );
    let e = run(
        "hold.yaml",
        "alertmanager: { holdAfterRestart: 100000000d }\n",
    );
    assert!(
        e.contains("hold.yaml:1: alertmanager.holdAfterRestart:") && e.contains("century"),
        "{e}"
    );
}

#[tokio::test]
async fn logs_are_plain_off_a_terminal_and_json_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "").await;
    // A summary that would forge fields, and a NUL that made `grep` call the
    // log binary.
    let mut forging = smart_failing("n1");
    forging["annotations"]["summary"] =
        json!("SMART failing node=victim event=\"NODE_UNCORDONED\" by=operator\u{0}");
    assert_eq!(hale.deliver(&delivery(&[(&forging, "firing")])).await, 200);
    hale.wait_node("raised", "n1", |n| has_condition(n, "disk_degraded"))
        .await;
    let text = hale.log();
    assert!(text.contains("hale serving"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "no colour codes in a file: {text}"
    );
    assert!(!text.contains('\u{0}'), "{text}");
    let raised = text
        .lines()
        .find(|l| l.contains("CONDITION_RAISED"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        raised.contains(r#"SMART failing node=victim event=\"NODE_UNCORDONED\" by=operator\x00" node=n1 event="CONDITION_RAISED""#),
        "the summary stays inside the quoted message: {raised}"
    );
    assert!(!text.contains("no apiTokenFile"), "{text}");
    drop(hale);

    // Open to the network with no token: said at start.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "listen: 0.0.0.0:{port}\nstore: {{ path: {} }}\nalertmanager: {{ url: 'http://127.0.0.1:9', pollInterval: 0 }}\n",
        dir.path().display()
    );
    // `check-config` says it before.
    let file = dir.path().join("open.yaml");
    std::fs::write(&file, &config).unwrap();
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(checked.status.success());
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(
        said.contains(&format!(
            "warning: {}:1: listen: 0.0.0.0:{port}: no apiTokenFile, and listening beyond loopback",
            file.display()
        )),
        "{said}"
    );
    let hale = Hale::start_with(dir.path(), port, &config).await;
    let text = hale.log();
    assert!(
        text.contains("WARN")
            && text.contains("no apiTokenFile, and listening beyond loopback")
            && text.contains(&format!("listen=0.0.0.0:{port}")),
        "{text}"
    );
    drop(hale);

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = webhook_only_config(dir.path(), port, "");
    std::fs::write(dir.path().join("hale.yaml"), &config).unwrap();
    let log = std::fs::File::create(dir.path().join("json.log")).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["serve", "--config"])
        .arg(dir.path().join("hale.yaml"))
        .env("HALE_LOG_FORMAT", "json")
        // A filter for another crate alone leaves hale's own lines at info.
        .env("HALE_LOG", "kube=debug")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_healthy(&format!("http://127.0.0.1:{port}")).await;
    // A filter written with spaces around its directives (as a chart value may
    // be) is read without them: ` info` would be a target, and log nothing.
    let spaced = tempfile::tempdir().unwrap();
    let spaced_port = free_port();
    let config = webhook_only_config(spaced.path(), spaced_port, "");
    std::fs::write(spaced.path().join("hale.yaml"), &config).unwrap();
    let spaced_log = std::fs::File::create(spaced.path().join("hale.log")).unwrap();
    let mut spaced_child = std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["serve", "--config"])
        .arg(spaced.path().join("hale.yaml"))
        .env("HALE_LOG", " info , kube=debug ")
        .stdout(spaced_log.try_clone().unwrap())
        .stderr(spaced_log)
        .spawn()
        .unwrap();
    wait_healthy(&format!("http://127.0.0.1:{spaced_port}")).await;
    let _ = spaced_child.kill();
    let _ = spaced_child.wait();
    let said = std::fs::read_to_string(spaced.path().join("hale.log")).unwrap();
    assert!(said.contains("hale serving"), "{said}");
    // hale's variables set empty are unset, not empty values.
    let listed = std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
        .args([
            "node",
            "list",
            "--server",
            &format!("http://127.0.0.1:{port}"),
        ])
        .env("HALE_TOKEN_FILE", "")
        .output()
        .unwrap();
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    // HALE_SERVER set empty is the default server, which answers nothing here:
    // the error names that URL, not an empty one.
    let listed = std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["node", "list"])
        .env("HALE_SERVER", "")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&listed.stderr);
    assert!(
        said.contains("127.0.0.1:9470") && !said.contains("--server \"\""),
        "{said}"
    );
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(dir.path().join("json.log")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "hale serving" && l["level"] == "INFO"),
        "{text}"
    );

    // A log setting that is not one stops the start, naming it: the exit code
    // and what was said.
    let refused = |var: &str, value: &str| {
        let out = exits_within(
            std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
                .args(["serve", "--config"])
                .arg(dir.path().join("hale.yaml"))
                .env(var, value),
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, said) = refused("HALE_LOG", "garbage===");
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.starts_with("error: HALE_LOG=\"garbage===\" is not a log filter"),
        "{said}"
    );
    // A bare word that is no level would log nothing at all: refused too.
    for word in ["warning", "hale:debug"] {
        let (code, said) = refused("HALE_LOG", word);
        assert_eq!(code, Some(1), "{said}");
        assert!(said.contains(&format!("`{word}` is no level")), "{said}");
    }
    // Logging JSON, the error that stops the start is a JSON line of the log,
    // not plain text a JSON-only collector would drop.
    std::fs::write(
        dir.path().join("typo.yaml"),
        "alertmanager: { pollIntervall: 1s }\n",
    )
    .unwrap();
    let out = exits_within(
        std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
            .args(["serve", "--log-format", "json", "--config"])
            .arg(dir.path().join("typo.yaml")),
    );
    assert_eq!(out.status.code(), Some(1));
    let said: Vec<Value> = [out.stdout, out.stderr]
        .iter()
        .flat_map(|o| {
            String::from_utf8_lossy(o)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .map(|l| serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        said.iter().any(|l| l["level"] == "ERROR"
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("alertmanager.pollIntervall"))),
        "{said:?}"
    );
    // With the log off, the error is said on stderr all the same.
    let out = exits_within(
        std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
            .args(["serve", "--log-format", "json", "--config"])
            .arg(dir.path().join("typo.yaml"))
            .env("HALE_LOG", "off"),
    );
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.starts_with("error: ") && said.contains("pollIntervall"),
        "{said}"
    );
    // So is a log format, naming the variable as well as the flag.
    let (code, said) = refused("HALE_LOG_FORMAT", "xml");
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("HALE_LOG_FORMAT"), "{said}");
    // HALE_CONFIG set empty names no file: `hale serve` without --config says so
    // (not the built-in defaults, nor the parser's words about `--config`).
    let out = exits_within(
        std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
            .arg("serve")
            .env("HALE_CONFIG", ""),
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.starts_with("error: HALE_CONFIG is set but empty"),
        "{said}"
    );
}

/// A store has one writer: a second `hale serve` on the same directory stops at
/// once, naming the first, and the first serves on.
#[tokio::test]
async fn a_second_hale_on_one_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let first =
        Hale::start_with(dir.path(), port, &webhook_only_config(dir.path(), port, "")).await;
    let other = tempfile::tempdir().unwrap();
    let config = webhook_only_config(dir.path(), free_port(), "");
    std::fs::write(other.path().join("hale.yaml"), &config).unwrap();
    let out = exits_within(
        std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
            .args(["serve", "--config"])
            .arg(other.path().join("hale.yaml")),
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("in use by process ")
            && said.contains(" (hale serve): a store has one writer"),
        "{said}"
    );
    // A copy neither reads nor writes a store a hale is writing.
    let live = format!("sqlite:{}", dir.path().join("data").display());
    let elsewhere = format!("sqlite:{}", other.path().join("copy").display());
    hale::store::Sqlite::open(&other.path().join("copy")).unwrap();
    for (from, to) in [(&live, &elsewhere), (&elsewhere, &live)] {
        let out = exits_within(hale_cmd().args(["store", "copy", "--from", from, "--to", to]));
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{from} -> {to}: {said}");
        assert!(
            said.contains("in use by process ")
                && said.contains(" (hale serve): a store has one writer"),
            "{from} -> {to}: {said}"
        );
    }
    // A target that is no store is named.
    let junk = other.path().join("junk");
    std::fs::create_dir_all(&junk).unwrap();
    std::fs::write(
        junk.join(hale::store::sqlite::FILE),
        "not a database, not at all",
    )
    .unwrap();
    let out = exits_within(hale_cmd().args([
        "store",
        "copy",
        "--from",
        &elsewhere,
        "--to",
        &format!("sqlite:{}", junk.display()),
    ]));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.starts_with(&format!("error: sqlite:{}: store: ", junk.display())),
        "{said}"
    );
    let healthz = reqwest::get(format!("{}/healthz", first.url))
        .await
        .unwrap();
    assert_eq!(healthz.status(), 200);
}

/// A copy marks its target until all is written: one that stopped part-way
/// leaves a store `hale serve` refuses (it served an empty fleet beside part of
/// the history, saying nothing) and a copy will not read; a finished copy leaves
/// no mark, and is served.
#[tokio::test]
async fn a_store_holding_part_of_a_copy_is_refused() {
    use hale::store::Store;
    let dir = tempfile::tempdir().unwrap();
    recorded_and_stopped(dir.path()).await;
    let from = format!("sqlite:{}", dir.path().join("data").display());
    let copied = tempfile::tempdir().unwrap();
    let to = format!("sqlite:{}", copied.path().join("data").display());
    let out = exits_within(hale_cmd().args(["store", "copy", "--from", &from, "--to", &to]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let target = hale::store::Sqlite::open(&copied.path().join("data")).unwrap();
    assert!(!target.copying().unwrap(), "a finished copy leaves no mark");
    let mut target = target;
    target.mark_copying(true).unwrap();
    drop(target);

    let port = free_port();
    let config = copied.path().join("hale.yaml");
    std::fs::write(&config, webhook_only_config(copied.path(), port, "")).unwrap();
    let out = exits_within(hale_cmd().args(["serve", "--config"]).arg(&config));
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "store {path}: holds part of a `hale store copy` that did not finish: remove {path} and copy again",
            path = copied.path().join("data").display()
        )),
        "{said}"
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let out = exits_within(
        hale_cmd()
            .args(["store", "copy", "--from", &to, "--to"])
            .arg(format!(
                "sqlite:{}",
                elsewhere.path().join("data").display()
            )),
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("holds part of a copy that did not finish"),
        "{said}"
    );
    // A copy into it again says what to empty first, not only that it is not.
    let out = exits_within(hale_cmd().args(["store", "copy", "--from", &from, "--to", &to]));
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "{to} holds part of a copy that did not finish: remove {} before copying again",
            copied.path().join("data").display()
        )),
        "{said}"
    );
}

/// A line break in an alert's text or an operator's reason is written into the
/// log as `\n`: one record is one line, and no text can forge another record.
#[tokio::test]
async fn no_text_forges_a_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "").await;
    let forged =
        "2026-12-05T08:50:00.000000Z  WARN hale::service: node stopped reporting node=gpu-1";
    let tricky = alert(
        &[
            ("alertname", "SmartFailing"),
            ("hale_condition", "disk_degraded"),
            ("node", "lf1"),
        ],
        &format!("first line\n{forged}\r{forged}\u{1b}]0;pwned\u{7}\u{1b}[2J"),
    );
    assert_eq!(hale.deliver(&delivery(&[(&tricky, "firing")])).await, 200);
    hale.wait_node("raised", "lf1", |n| has_condition(n, "disk_degraded"))
        .await;
    let r = reqwest::Client::new()
        .post(format!("{}/cordon", hale.node_url("lf1")))
        .bearer_auth(TOKEN)
        .json(&json!({"reason": format!("mine\n{forged}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let log = eventually("the cordon logged", Duration::from_secs(10), || async {
        let log = hale.log();
        log.contains("NODE_CORDONED").then_some(log)
    })
    .await;
    assert!(
        !log.lines().any(|l| l.starts_with(forged)),
        "a forged record: {log}"
    );
    assert!(
        log.contains(&format!("first line\\n{forged}\\r{forged}")),
        "{log}"
    );
    assert!(log.contains(&format!("mine\\n{forged}")), "{log}");
    // Nor does the CLI hand a terminal an alert's escape sequences.
    let out = hale_cmd()
        .args(["node", "show", "lf1", "--server", &hale.url, "--token-file"])
        .arg(dir.path().join("token"))
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "{shown:?}"
    );
    assert!(shown.contains("\\u{1b}]0;pwned\\u{7}\\u{1b}[2J"), "{shown}");
    // Nor a line of its own that would read as one of the view's fields.
    assert!(!shown.lines().any(|l| l.starts_with(forged)), "{shown}");
}

fn hale_cmd() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
}

/// A store file hale cannot write is refused at start, as a directory it cannot
/// create is: it opened, served, answered ready and recorded nothing. Run as
/// `nobody` (`setpriv`), the store's owner, with the file read-only: root writes
/// any file. The suite runs as root (it makes network namespaces too).
#[tokio::test]
async fn a_store_it_cannot_write_is_refused_at_start() {
    let uid = std::process::Command::new("id").arg("-u").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "run as root: the test hands the store to nobody"
    );
    let dir = tempfile::tempdir().unwrap();
    recorded_and_stopped(dir.path()).await;
    let binary = dir.path().join("hale");
    std::fs::copy(env!("CARGO_BIN_EXE_hale"), &binary).unwrap();
    let nobody = "65534";
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{nobody}:{nobody}")])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(chown.success());
    let db = dir.path().join("data").join(hale::store::sqlite::FILE);
    std::fs::set_permissions(&db, std::os::unix::fs::PermissionsExt::from_mode(0o444)).unwrap();
    let serve_as_nobody = |config: &str| {
        exits_within(
            std::process::Command::new("setpriv")
                .args([
                    &format!("--reuid={nobody}"),
                    &format!("--regid={nobody}"),
                    "--clear-groups",
                ])
                .arg(&binary)
                .args(["serve", "--config"])
                .arg(dir.path().join(config)),
        )
    };
    let out = serve_as_nobody("hale.yaml");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("store {}: cannot be written", db.display())),
        "{said}"
    );
    // A store directory it may not write (root's): said as such, naming the lock
    // file it could not make, not as a directory it could not create.
    let theirs = dir.path().join("root-owned");
    std::fs::create_dir(&theirs).unwrap();
    let config = std::fs::read_to_string(dir.path().join("hale.yaml"))
        .unwrap()
        .replace(
            &dir.path().join("data").display().to_string(),
            &theirs.display().to_string(),
        );
    std::fs::write(dir.path().join("theirs.yaml"), config).unwrap();
    let out = serve_as_nobody("theirs.yaml");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "store {}: cannot be written (its lock file hale.lock: Permission denied",
            theirs.display()
        )),
        "{said}"
    );
}

/// A server that takes the connection and never answers (a wedged hale, a path
/// that drops what comes back) is an error after `--timeout`, not a CLI that
/// waits for ever.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_stops_waiting_for_a_server_that_never_answers() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let held = std::thread::spawn(move || listener.incoming().take(1).collect::<Vec<_>>());
    let out = exits_within(hale_cmd().args(["node", "list", "--timeout", "2s", "--server", &url]));
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "hale at {url}/ did not answer within 2s (--timeout)"
        )),
        "{said}"
    );
    drop(held);
}

/// A listing whose pages never end (a federation member answering the same page
/// again, through its hub) ends with an error, not a CLI that asks for ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_listing_that_does_not_move_on_is_an_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/api/v1/nodes",
        axum::routing::get(|| async {
            axum::Json(json!({"nodes": [], "nextPageToken": "6c6f6f70"}))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let out = exits_within(hale_cmd().args(["node", "list", "--server", &url]));
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("page token \"6c6f6f70\" came back a second time"),
        "{said}"
    );
}

/// A server that is not hale (a proxy gone wrong) answering with the request's
/// `Authorization` header: the CLI says what it answered, without the token —
/// a hale-shaped error, a text page, a 401 or an answer that is not JSON.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_never_repeats_its_token_from_what_a_server_echoes() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/api/v1/nodes/{id}",
        axum::routing::get(
            |axum::extract::Path(id): axum::extract::Path<String>,
             headers: axum::http::HeaderMap| async move {
                use axum::http::StatusCode;
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let said = format!(
                    "received authorization: {auth}; bare {}",
                    auth.trim_start_matches("Bearer ")
                );
                match id.as_str() {
                    "json" => (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        json!({"error": "boom", "detail": said}).to_string(),
                    ),
                    "text" => (StatusCode::BAD_GATEWAY, said),
                    "refused" => (StatusCode::UNAUTHORIZED, said),
                    _ => (StatusCode::OK, said),
                }
            },
        ),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "CANARY-cli-7f3a\n").unwrap();
    for id in ["json", "text", "refused", "ok"] {
        let out = exits_within(hale_cmd().args([
            "node",
            "show",
            id,
            "--server",
            &url,
            "--token-file",
            token.to_str().unwrap(),
        ]));
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{id}: {said}");
        if id == "ok" {
            assert!(said.contains("not as hale answers"), "{id}: {said}");
        } else {
            assert!(said.contains("received authorization: ***"), "{id}: {said}");
        }
        assert!(!said.contains("CANARY"), "{id}: {said}");
    }
}

/// A tmpfs mounted for a test, unmounted when it ends (however it ends).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &std::path::Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount a tmpfs (the suite runs as root)");
        Tmpfs(at.to_path_buf())
    }

    /// Fill it up: a file of every byte left.
    fn fill(&self) -> std::path::PathBuf {
        let filler = self.0.join("filler");
        let _ = std::process::Command::new("dd")
            .args(["if=/dev/zero", "bs=4k"])
            .arg(format!("of={}", filler.display()))
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A change the store does not take is never answered as kept: while the disk
/// under the store is full, a delivery is a 503 (Alertmanager sends it again) and
/// an operator's verb fails, each saying why; once there is room, the same
/// delivery is taken and a restart has it. A stop with a change still not
/// taken exits 1 saying it is lost, rather than 0.
#[tokio::test(flavor = "multi_thread")]
async fn what_the_store_does_not_take_is_never_answered_as_kept() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&dir.path().join("data"), "4m");
    let mut hale = Hale::webhook_only(dir.path(), "").await;
    let first = delivery(&[(&smart_failing("n1"), "firing")]);
    assert_eq!(hale.deliver(&first).await, 200);
    hale.wait_node("n1 recorded", "n1", |n| has_condition(n, "disk_degraded"))
        .await;

    // The write-ahead log has room for a few more writes: new nodes until one
    // is refused.
    let filler = disk.fill();
    let mut refused = None;
    for i in 0..500 {
        let second = delivery(&[(&smart_failing(&format!("m{i}")), "firing")]);
        let answer = reqwest::Client::new()
            .post(format!("{}/api/v1/alertmanager", hale.url))
            .bearer_auth(TOKEN)
            .json(&second)
            .send()
            .await
            .unwrap();
        if answer.status() != 200 {
            refused = Some((i, second, answer));
            break;
        }
    }
    let (i, second, answer) = refused.expect("a full disk refuses a write");
    assert_eq!(answer.status(), 503);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"], "store_unavailable", "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("not written to the store"),
        "{body}"
    );
    let out = hale.cli(&["node", "cordon", "n1", "--reason", "disk swap"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("not written to the store"), "{said}");
    // Each try writes all that is pending: while the disk stays full a write is
    // tried once a second, not once per delivery (each would cost the backlog).
    let tried = |text: &str| {
        metric(
            text,
            "hale_store_write_failures_total",
            &[("reason", "full")],
        )
    };
    let before = tried(&hale.metrics().await).unwrap();
    let started = std::time::Instant::now();
    for k in 0..40 {
        let more = delivery(&[(&smart_failing(&format!("r{k}")), "firing")]);
        assert_eq!(
            hale.deliver(&more).await,
            503,
            "refused while the disk is full"
        );
    }
    let tries = tried(&hale.metrics().await).unwrap() - before;
    let seconds = started.elapsed().as_secs_f64();
    assert!(
        tries <= seconds.ceil() + 1.0,
        "{tries} writes tried in {seconds:.1} s for 40 deliveries"
    );

    std::fs::remove_file(&filler).unwrap();
    eventually(
        "taken once there is room",
        Duration::from_secs(10),
        || async { (hale.deliver(&second).await == 200).then_some(()) },
    )
    .await;
    // Writes refused in a row (the deliveries, the cordon, the tick's tries): one
    // line for the run, one for its end.
    let log = hale.log();
    assert_eq!(log.matches("store write failed").count(), 1, "{log}");
    assert!(
        log.lines().any(|l| l.contains("the store writes again")),
        "{log}"
    );
    hale.stop();
    hale.restart().await;
    let kept = hale
        .node(&format!("m{i}"))
        .await
        .expect("the refused node kept across the restart, once sent again");
    assert!(has_condition(&kept, "disk_degraded"), "{kept}");
    // The cordon answered as failed was taken in memory, and written with the
    // delivery after it: sent again, it changes nothing.
    let n1 = hale.node("n1").await.unwrap();
    assert_eq!(n1["cordon"]["reason"], "disk swap", "{n1}");

    let filler = disk.fill();
    let mut sent = 0;
    while hale
        .deliver(&delivery(&[(
            &smart_failing(&format!("k{sent}")),
            "firing",
        )]))
        .await
        == 200
    {
        sent += 1;
        assert!(sent < 500, "a full disk refuses a write");
    }
    let status = hale.stopped();
    assert_eq!(status.code(), Some(1), "{}", hale.log());
    let log = hale.log();
    assert!(
        log.contains("stopped with changes the store did not take"),
        "{log}"
    );
    std::fs::remove_file(&filler).unwrap();
}

/// A trust record that does not read is started over, and said so in the log.
#[tokio::test]
async fn an_unreadable_trust_record_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = recorded_and_stopped(dir.path()).await;
    let db = dir.path().join("data").join(hale::store::sqlite::FILE);
    let changed = rusqlite::Connection::open(&db)
        .unwrap()
        .execute("UPDATE meta SET value = 'garbage' WHERE key = 'trust'", [])
        .unwrap();
    assert_eq!(changed, 1);
    h.restart().await;
    eventually("the warning", Duration::from_secs(10), || async {
        h.log()
            .contains("the stored trust record is unreadable")
            .then_some(())
    })
    .await;
    assert!(h.node("n1").await.is_some(), "the rest loads");
}

/// A hale on `dir` that recorded a fault on n1, then stopped: a store to tamper
/// with.
async fn recorded_and_stopped(dir: &std::path::Path) -> Hale {
    let mut h = Hale::webhook_only(dir, "").await;
    let fault = delivery(&[(&smart_failing("n1"), "firing")]);
    assert_eq!(h.deliver(&fault).await, 200);
    h.wait_node("recorded", "n1", |n| has_condition(n, "disk_degraded"))
        .await;
    h.stop();
    h
}

/// Run `cmd` to its end, which must come within 30 s: a `hale serve` that should
/// have refused to start, and serves instead, fails the test rather than hangs it.
fn exits_within(cmd: &mut std::process::Command) -> std::process::Output {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after 30 s: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// hale's log read through a pipe whose reader goes away (`| head`, a log shipper
/// restarting): hale goes on serving, the lines it cannot write dropped.
#[tokio::test]
async fn a_log_reader_that_goes_away_does_not_stop_hale() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("hale.yaml");
    std::fs::write(
        &cfg,
        config(
            dir.path(),
            port,
            "http://127.0.0.1:9",
            "pollInterval: 1s",
            "",
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Both read ends closed: every line from now on meets a broken pipe.
    drop(child.stdout.take());
    drop(child.stderr.take());
    let url = format!("http://127.0.0.1:{port}/metrics");
    // Each failed poll logs a warning; three of them written into the broken pipe.
    eventually("three failed polls", Duration::from_secs(30), || async {
        let text = reqwest::get(&url).await.ok()?.text().await.ok()?;
        let failed = metric(
            &text,
            "hale_alertmanager_polls_total",
            &[("result", "unreachable")],
        )?;
        (failed >= 3.0).then_some(())
    })
    .await;
    let alive = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(alive, "hale stopped when its log's reader went away");
}

/// Clients that hold a connection without finishing a request — nothing sent, a
/// header never ended (75 s), a body shorter than declared (30 s) — are cut off,
/// and everyone else is served meanwhile.
#[tokio::test]
async fn a_client_that_never_finishes_its_request_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::start(dir.path(), "http://127.0.0.1:9", "").await;
    let addr = hale.url.trim_start_matches("http://").to_string();
    let open = |first: Vec<u8>| {
        let addr = addr.clone();
        async move {
            let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
            c.write_all(&first).await.unwrap();
            c
        }
    };
    let started = std::time::Instant::now();
    let silent = open(Vec::new()).await;
    let header = open(b"GET /healthz HTTP/1.1\r\nHost: x\r\n".to_vec()).await;
    let body = open(
        format!(
            "POST /api/v1/alertmanager HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"version\":"
        )
        .into_bytes(),
    )
    .await;
    let client = reqwest::Client::new();
    assert!(
        client
            .get(format!("{}/healthz", hale.url))
            .send()
            .await
            .unwrap()
            .status()
            .is_success(),
        "served while three clients hold connections"
    );
    // Each ends with the server closing it: what it read until then, and when.
    let closed = |mut c: tokio::net::TcpStream| async move {
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(90), c.read_to_end(&mut got)).await;
        assert!(read.is_ok(), "still open after 90 s");
        (
            String::from_utf8_lossy(&got).into_owned(),
            started.elapsed(),
        )
    };
    let ((silent, s), (header, h), (body, b)) =
        tokio::join!(closed(silent), closed(header), closed(body));
    assert_eq!(silent, "", "a silent client is closed without an answer");
    // A header has 75 s, a body 30 s.
    for at in [s, h] {
        assert!(at >= Duration::from_secs(70), "closed after {at:?}");
    }
    assert!(b >= Duration::from_secs(25), "closed after {b:?}");
    assert!(header.is_empty() || header.contains(" 408 "), "{header}");
    assert!(
        body.starts_with("HTTP/1.1 408") && body.contains("did not arrive within 30s"),
        "{body}"
    );
    let text = hale.metrics().await;
    assert_eq!(
        metric(
            &text,
            "hale_alertmanager_webhook_requests_total",
            &[("code", "408")]
        ),
        Some(1.0)
    );
}

/// One client opening connection after connection and finishing no request
/// holds its share of the server's connections, not all of them: once slots run
/// short its next are closed as they come, and another client is served
/// meanwhile. (hale runs with 192 files, so 64 connections beside its own 64
/// files: the share is 8, and it is held to once fewer than 16 are free.)
#[tokio::test]
async fn one_client_holds_its_share_of_connections_not_all() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let config = webhook_only_config(dir.path(), port, "");
    let hale = Hale::start_under(
        dir.path(),
        &url,
        &config,
        &["prlimit", "--nofile=192:192", "--"],
    )
    .await;
    let addr = format!("127.0.0.1:{port}");
    let tries = 100;
    let mut held = Vec::new();
    for _ in 0..tries {
        let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
        // A header begun and never ended; a closed connection may refuse it.
        let _ = c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
        held.push(c);
    }
    // Another address is served while they are held.
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let answer = other.get(format!("{url}/healthz")).send().await;
    assert!(
        answer.is_ok_and(|a| a.status().is_success()),
        "another client is served"
    );
    // Each ends its header: those kept are answered, the rest were closed.
    let finish = |mut c: tokio::net::TcpStream| async move {
        let _ = c.write_all(b"Connection: close\r\n\r\n").await;
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(30), c.read_to_end(&mut got)).await;
        assert!(read.is_ok(), "neither answered nor closed");
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200")
    };
    let answered = futures::future::join_all(held.into_iter().map(finish))
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count();
    // Taken while three quarters of the 64 or fewer were in use, none after.
    assert!((40..=48).contains(&answered), "{answered} of {tries} kept");
    assert!(
        hale.log()
            .contains("a client holds as many connections as one may"),
        "{}",
        hale.log()
    );
}

/// A reload that shortens `pollInterval` polls at once: staleness is judged by the
/// new interval from the reload on, and the loop, asleep for the old one, must
/// not leave every node stale meanwhile.
#[tokio::test]
async fn a_shorter_poll_interval_polls_at_once_and_marks_nothing_stale() {
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), heartbeat("n1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let hale = Hale::start_with(
        dir.path(),
        port,
        &config(dir.path(), port, &am.url, "pollInterval: 10m", ""),
    )
    .await;
    hale.wait_node("first poll", "n1", |n| n["score"] == 100)
        .await;
    let before = hale.polls().await;
    std::fs::write(
        dir.path().join("hale.yaml"),
        config(dir.path(), port, &am.url, "pollInterval: 2s", ""),
    )
    .unwrap();
    hale.reload().await;
    eventually(
        "a poll right after the reload",
        Duration::from_secs(10),
        || async { (hale.polls().await > before).then_some(()) },
    )
    .await;
    // Polls every 2 s from then on: three more, and never stale between them.
    hale.after_polls(3.0).await;
    let history = hale.events("n1", "").await;
    let stale: Vec<&Value> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "CONDITION_RAISED" && e["condition"] == "telemetry_stale")
        .collect();
    assert!(stale.is_empty(), "{stale:?}");
}

/// A log reader that stops reading (a stalled shipper, a stuck pipe) costs log
/// lines, not hale: with its standard output's pipe full and never read, hale
/// goes on taking deliveries and answering, and says later how many lines it
/// dropped.
#[tokio::test]
async fn a_log_reader_that_stops_reading_does_not_stop_hale() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("hale.yaml");
    std::fs::write(&cfg, webhook_only_config(dir.path(), port, "")).unwrap();
    let mut child = Killed(
        std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
            .arg("serve")
            .arg("--config")
            .arg(&cfg)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Held open and never read until the end: the pipe fills (64 KiB) and stays full.
    let mut stdout = child.0.stdout.take().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    eventually("hale answering", Duration::from_secs(30), || async {
        client.get(format!("{base}/healthz")).send().await.ok()?;
        Some(())
    })
    .await;
    // Each node new with a condition: lines of log for each, far more than the
    // pipe holds.
    new_nodes(&client, &base, 3, 2000).await;
    let listed: Value = client
        .get(format!("{base}/api/v1/nodes?total=true&pageSize=1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["total"], 6000, "{listed}");
    // Read again: once there is room, the log says what it dropped.
    let log = Arc::new(Mutex::new(String::new()));
    let into = log.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 65536];
        while let Ok(n @ 1..) = stdout.read(&mut chunk) {
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    let dropped = eventually("the drop said", Duration::from_secs(30), || async {
        let log = log.lock().unwrap();
        let line = log.lines().find(|l| l.contains("log lines dropped"))?;
        line.split("dropped=")
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
    })
    .await;
    // Thousands of lines did not fit (three deliveries of 2,000 new nodes each):
    // the count says how many, not that one was.
    assert!(dropped > 1000, "dropped={dropped}");
}

/// `batches` webhook deliveries of `each` firing alerts to hale at `base`, each
/// on a node of its own, new to hale: a node record and lines of log apiece.
async fn new_nodes(client: &reqwest::Client, base: &str, batches: usize, each: usize) {
    for batch in 0..batches {
        let alerts: Vec<Value> = (0..each)
            .map(|i| {
                json!({"labels": {"alertname": "SmartFailing", "node": format!("n-{batch}-{i}"),
                    "severity": "warning", "hale_condition": "disk_degraded"}, "annotations": {}})
            })
            .collect();
        let firing: Vec<(&Value, &str)> = alerts.iter().map(|a| (a, "firing")).collect();
        let r = client
            .post(format!("{base}/api/v1/alertmanager"))
            .bearer_auth(TOKEN)
            .json(&delivery(&firing))
            .send()
            .await;
        assert!(
            r.is_ok_and(|r| r.status().is_success()),
            "delivery {batch} taken"
        );
    }
}

/// A child process stopped when the test ends, whether it passed or failed.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A client that asks for a large answer and stops reading it is cut off once the
/// write has made no progress for 30 s: it holds its connection no longer. Many
/// of them at once hold no more than the room for `/metrics` answers (64 MiB):
/// past it a scrape waits, then is answered 503, and hale's memory stays bounded
/// (each held its own 12 MiB answer, and a few hundred ended the process); once
/// they are cut off, scrapes are answered again.
#[tokio::test]
async fn clients_that_stop_reading_their_answers_are_cut_off_and_hold_bounded_memory() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "").await;
    // Enough nodes that `/metrics` outgrows what the kernel buffers on both sides.
    let client = reqwest::Client::new();
    new_nodes(&client, &hale.url, 4, 2500).await;
    let scrape = |client: reqwest::Client| {
        let url = format!("{}/metrics", hale.url);
        async move {
            let r = client.get(url).send().await.unwrap();
            (r.status().as_u16(), r.bytes().await.unwrap())
        }
    };
    // No scrape since the fleet grew: the room is taken by what the fleet will
    // render, not by the last (empty) answer's size.
    let addr: std::net::SocketAddr = hale.url.trim_start_matches("http://").parse().unwrap();
    // Eight from each of six addresses (one client holds eight connections at most).
    let mut stalled = Vec::new();
    let stalled_at = tokio::time::Instant::now();
    for from in 2..8u8 {
        for _ in 0..8 {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(4096).unwrap();
            socket
                .bind(std::net::SocketAddr::from(([127, 0, 0, from], 0)))
                .unwrap();
            let mut s = socket.connect(addr).await.unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            stalled.push(s);
        }
    }
    // Once the stalled answers fill the room, a scrape waits for it, then is
    // told to come back.
    let busy = eventually(
        "a scrape told to come back",
        Duration::from_secs(60),
        || async {
            let (status, body) = scrape(client.clone()).await;
            (status == 503).then_some(body)
        },
    )
    .await;
    assert!(
        String::from_utf8_lossy(&busy).contains("\"busy\""),
        "{busy:?}"
    );
    let rss_kib: u64 = std::fs::read_to_string(format!("/proc/{}/status", hale.pid()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap();
    assert!(
        rss_kib < 300 << 10,
        "48 answers of 12 MiB held {} MiB",
        rss_kib >> 10
    );
    // Not read for longer than the server lets a write stall: by then it gave up
    // the answers it held; those that waited were told to come back.
    tokio::time::sleep_until(stalled_at + Duration::from_secs(35)).await;
    let outcomes = futures::future::join_all(stalled.iter_mut().map(|s| async move {
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut got)).await;
        got
    }))
    .await;
    let answered = |got: &Vec<u8>| got.starts_with(b"HTTP/1.1 200");
    let whole = |got: &Vec<u8>| got.ends_with(b"\r\n0\r\n\r\n");
    let cut = outcomes.iter().filter(|g| answered(g) && !whole(g)).count();
    let told = outcomes
        .iter()
        .filter(|g| g.starts_with(b"HTTP/1.1 503"))
        .count();
    assert!(
        (1..=6).contains(&cut) && cut + told == outcomes.len(),
        "{cut} answers cut off, {told} told to come back, of {}",
        outcomes.len()
    );
    drop(stalled);
    let answer = eventually(
        "scrapes answered again",
        Duration::from_secs(40),
        || async {
            let (status, body) = scrape(client.clone()).await;
            (status == 200).then_some(body)
        },
    )
    .await;
    assert!(answer.len() > 10 << 20, "{} bytes", answer.len());
    assert!(
        client
            .get(format!("{}/healthz", hale.url))
            .send()
            .await
            .unwrap()
            .status()
            .is_success()
    );
}

/// libfaketime's preload for threaded programs, where Debian's `faketime` put it.
fn libfaketime() -> std::path::PathBuf {
    std::fs::read_dir("/usr/lib")
        .unwrap()
        .filter_map(Result::ok)
        .map(|arch| arch.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.exists())
        .expect("libfaketime is installed (Debian: faketime)")
}

/// The wall clock of a running hale stepped two hours forward, then back, as NTP
/// steps a clock (libfaketime on hale's wall clock only; the monotonic clock runs
/// on): forward, nothing goes stale or late — no time passed; back, a node that
/// stopped reporting is missed one window later, not two hours and a window.
#[tokio::test(flavor = "multi_thread")]
async fn a_clock_stepped_forward_or_back_keeps_every_window() {
    let dir = tempfile::tempdir().unwrap();
    let clock = dir.path().join("clock");
    std::fs::write(&clock, "+0\n").unwrap();
    let port = free_port();
    let preload = format!("LD_PRELOAD={}", libfaketime().display());
    let clock_file = format!("FAKETIME_TIMESTAMP_FILE={}", clock.display());
    let hale = Hale::start_under(
        dir.path(),
        &format!("http://127.0.0.1:{port}"),
        &webhook_only_config(
            dir.path(),
            port,
            "nodeHealth: { reportIntervalSeconds: 5 }\n",
        ),
        &[
            "env",
            &preload,
            &clock_file,
            "FAKETIME_NO_CACHE=1",
            "DONT_FAKE_MONOTONIC=1",
        ],
    )
    .await;
    let all = delivery(&[
        (&watchdog(), "firing"),
        (&heartbeat("n1"), "firing"),
        (&heartbeat("n2"), "firing"),
    ]);
    assert_eq!(hale.deliver(&all).await, 200);
    hale.wait_node("n2 reporting", "n2", |n| n["lastHeartbeat"].is_string())
        .await;

    // Forward two hours; n2 stops reporting: without the shift its last report
    // would be two hours old at the next tick, and it would be missed at once.
    std::fs::write(&clock, "+2h\n").unwrap();
    let one = delivery(&[(&watchdog(), "firing"), (&heartbeat("n1"), "firing")]);
    eventually("the forward step seen", Duration::from_secs(20), || async {
        assert_eq!(hale.deliver(&one).await, 200);
        hale.log()
            .contains("the clock stepped forward")
            .then_some(())
    })
    .await;
    for id in ["n1", "n2"] {
        let said = types(&hale.events(id, "").await);
        assert!(
            !said
                .iter()
                .any(|t| t == "HEARTBEAT_MISSED" || t == "CONDITION_RAISED"),
            "{id}: {said:?}"
        );
    }

    // Back two hours, n2 still silent: missed a window after its last report.
    std::fs::write(&clock, "+0\n").unwrap();
    eventually(
        "n2 missed after the step back",
        Duration::from_secs(60),
        || async {
            assert_eq!(hale.deliver(&one).await, 200);
            types(&hale.events("n2", "").await)
                .contains(&"HEARTBEAT_MISSED".to_string())
                .then_some(())
        },
    )
    .await;
    assert!(
        hale.log().contains("the clock stepped back"),
        "{}",
        hale.log()
    );
    let n1 = types(&hale.events("n1", "").await);
    assert!(!n1.contains(&"HEARTBEAT_MISSED".to_string()), "{n1:?}");
}

/// A reload whose file does not answer (a configuration on a mount that hangs;
/// here a FIFO no one writes put in its place) is refused after 30 s, the running
/// configuration kept, and one stuck behind a SIGHUP holds no stop: SIGTERM
/// still ends hale.
#[tokio::test]
async fn a_reload_that_cannot_read_its_files_is_refused_and_holds_no_stop() {
    let dir = tempfile::tempdir().unwrap();
    let mut hale = Hale::webhook_only(dir.path(), "").await;
    let config = dir.path().join("hale.yaml");
    std::fs::remove_file(&config).unwrap();
    never_answers(&config);
    let r = hale.ask_reload().await;
    assert_eq!(r.status(), 400);
    let said = r.text().await.unwrap();
    assert!(said.contains("took longer than 30 s"), "{said}");
    let metrics = reqwest::get(format!("{}/metrics", hale.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        metric(&metrics, "hale_config_last_reload_successful", &[]),
        Some(0.0)
    );
    hale.signal("HUP");
    eventually(
        "the SIGHUP's reload under way",
        Duration::from_secs(20),
        || async { (hale.log().matches("reloading the configuration").count() == 2).then_some(()) },
    )
    .await;
    hale.signal("TERM");
    let status = hale
        .exited_within(Duration::from_secs(60))
        .expect("hale exits with a reload stuck");
    assert!(status.success(), "{status}");
    assert!(!hale.log().contains("configuration reloaded"));
}

/// Proxy variables set for the site (a dead proxy here) are not used for
/// loopback: the CLI reaches hale on 127.0.0.1 and on localhost, as curl and Go
/// tools do.
#[tokio::test]
async fn a_proxy_in_the_environment_is_not_used_for_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "").await;
    let dead = format!("http://127.0.0.1:{}", free_port());
    let localhost = hale.url.replace("127.0.0.1", "localhost");
    for server in [hale.url.as_str(), localhost.as_str()] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
            .args(["node", "list", "--server", server])
            .env("HTTP_PROXY", &dead)
            .env("all_proxy", &dead)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{server}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A configuration that never answers (a FIFO here; a file on a mount that
/// hangs in life) stops `check-config` after 30 s with an error naming the file,
/// rather than a wait without end. (A secret, a credential or a CA named by the
/// configuration must be a regular file: a FIFO there is refused at once.)
#[tokio::test]
async fn check_config_gives_up_on_a_file_that_never_answers() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hale.yaml");
    never_answers(&config);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
        .arg("check-config")
        .arg(&config)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "check-config still waits"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut said).unwrap();
    assert!(!status.success());
    assert!(
        said.contains(&config.display().to_string()) && said.contains("took longer than 30 s"),
        "{said}"
    );
}

/// A file at `path` that never answers a read: a FIFO no one writes, as a file
/// on a mount that hangs stands in life.
fn never_answers(path: &std::path::Path) {
    assert!(
        std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap()
            .success()
    );
}
