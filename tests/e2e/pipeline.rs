//! The ingest pipeline: poll path, webhook path, trust, restart.

use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

#[tokio::test]
async fn poll_path_raises_scores_suppresses_and_clears() {
    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::start(dir.path(), &am.url, "").await;

    am.fire(&[watchdog(), heartbeat("gpu-14"), smart_failing("gpu-14")])
        .await;
    let n = hale
        .wait_node("SMART failing scored", "gpu-14", |n| n["score"] == 60)
        .await;
    assert_eq!(n["health"], "Degraded");
    assert_eq!(n["scoredBy"], "cluster");
    assert_eq!(
        n["breakdown"],
        serde_json::json!([{"reason": "SmartFailing", "points": 40}])
    );
    let c = &n["conditions"][0];
    assert_eq!(c["type"], "disk_degraded");
    assert_eq!(c["severity"], "critical");
    assert_eq!(c["message"], "SMART health check failing on /dev/sda");
    assert!(n["lastHeartbeat"].is_string());

    // A silenced alert is shown as suppressed and costs nothing.
    am.fire(&[gpu_ecc_uncorrectable("gpu-14")]).await;
    hale.wait_node("ECC raised", "gpu-14", |n| n["score"] == 15)
        .await;
    am.silence("GpuEccUncorrectable").await;
    let n = hale
        .wait_node("ECC suppressed", "gpu-14", |n| n["score"] == 60)
        .await;
    let ecc = n["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "gpu_ecc_errors")
        .unwrap();
    assert_eq!(ecc["suppressed"], true);

    // Resolved in Alertmanager → absent from the next trusted poll → cleared.
    am.resolve(&[smart_failing("gpu-14")]).await;
    let n = hale
        .wait_node("SMART cleared", "gpu-14", |n| {
            !has_condition(n, "disk_degraded")
        })
        .await;
    assert_eq!(n["score"], 100);
    assert_eq!(n["health"], "Healthy");
}

#[tokio::test]
async fn webhook_path_delivers_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let hale_url = format!("http://127.0.0.1:{port}");
    let am = Alertmanager::start(Some((&hale_url, TOKEN))).await;
    // Polling off: only Alertmanager's deliveries can tell hale anything.
    let am_keys = "pollInterval: 0, staleAfter: 1h";
    let config = config(dir.path(), port, &am.url, am_keys, "");
    let hale = Hale::start_with(dir.path(), port, &config).await;

    am.fire(&[watchdog(), smart_failing("n1")]).await;
    hale.wait_node("delivered by webhook", "n1", |n| n["score"] == 60)
        .await;
    am.resolve(&[smart_failing("n1")]).await;
    hale.wait_node("resolved by webhook", "n1", |n| {
        !has_condition(n, "disk_degraded") && n["score"] == 100
    })
    .await;
    let metrics = hale.metrics().await;
    assert!(
        metric(
            &metrics,
            "hale_alertmanager_webhook_requests_total",
            &[("code", "200")]
        )
        .is_some_and(|n| n > 0.0),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "hale_alertmanager_webhook_requests_total",
            &[("code", "401")]
        ),
        None,
        "Alertmanager sent the token"
    );
    assert_eq!(metric(&metrics, "hale_alert_source_up", &[]), Some(1.0));
}

#[tokio::test]
async fn missing_watchdog_clears_nothing_and_marks_every_node_stale() {
    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let am_keys = "pollInterval: 1s, holdAfterRestart: 10s";
    let hale = Hale::start_with(
        dir.path(),
        port,
        &config(dir.path(), port, &am.url, am_keys, ""),
    )
    .await;
    am.fire(&[
        watchdog(),
        heartbeat("n1"),
        heartbeat("n2"),
        smart_failing("n1"),
    ])
    .await;
    hale.wait_node("scored", "n1", |n| n["score"] == 60).await;

    // The watchdog ends: answers are no longer trusted, and SMART resolving must not
    // be taken as a recovery.
    am.resolve(&[watchdog(), smart_failing("n1")]).await;
    for id in ["n1", "n2"] {
        hale.wait_node("telemetry_stale", id, |n| {
            has_condition(n, "telemetry_stale")
        })
        .await;
    }
    let n1 = hale.node("n1").await.unwrap();
    assert!(has_condition(&n1, "disk_degraded"), "nothing cleared: {n1}");
    assert_eq!(n1["health"], "Degraded", "fault evidence wins over Unknown");
    assert_eq!(hale.node("n2").await.unwrap()["health"], "Unknown");
    let metrics = hale.metrics().await;
    assert_eq!(
        metric(&metrics, "hale_alert_source_up", &[]),
        Some(0.0),
        "{metrics}"
    );
    assert!(
        metric(
            &metrics,
            "hale_alertmanager_polls_total",
            &[("result", "untrusted")]
        )
        .is_some_and(|n| n > 0.0)
    );

    // Trust returns: stale clears, and what ended meanwhile ends once the hold a
    // watchdog gap starts has lapsed (a gap may be a restarted Prometheus, whose
    // `for:` alerts come back only later).
    am.fire(&[watchdog()]).await;
    hale.wait_node("trusted again", "n1", |n| {
        !has_condition(n, "telemetry_stale")
    })
    .await;
    let n1 = hale
        .wait_node_within(
            "SMART ended after the hold",
            "n1",
            Duration::from_secs(40),
            |n| !has_condition(n, "disk_degraded"),
        )
        .await;
    assert_eq!(n1["score"], 100);
}

#[tokio::test]
async fn alertmanager_killed_clears_nothing() {
    let mut am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::start(dir.path(), &am.url, "").await;
    am.fire(&[watchdog(), heartbeat("n1"), smart_failing("n1")])
        .await;
    hale.wait_node("scored", "n1", |n| n["score"] == 60).await;
    // Asked once, the alerts are kept from each poll: the last one is not shown
    // once Alertmanager stops answering.
    let r = reqwest::get(format!("{}/api/v1/alerts", hale.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    hale.after_polls(1.0).await;
    am.kill();
    let n1 = hale
        .wait_node("stale after the source died", "n1", |n| {
            has_condition(n, "telemetry_stale")
        })
        .await;
    assert!(has_condition(&n1, "disk_degraded"));
    assert!(
        !has_condition(&n1, "heartbeat_missed"),
        "hale is blind, not the node"
    );
    assert_eq!(n1["score"], 60);
    assert_eq!(
        metric(&hale.metrics().await, "hale_alert_source_up", &[]),
        Some(0.0)
    );
    let r = reqwest::get(format!("{}/api/v1/alerts", hale.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"], "source_unavailable");
    let detail = e["detail"].as_str().unwrap();
    assert!(detail.contains("cannot reach Alertmanager"), "{detail}");
    let out = hale.cli(&["alerts"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("source_unavailable"));
    // Poll after poll fails: the run is said at its start (then once a minute),
    // not at every poll, and its end once.
    eventually("three failed polls", Duration::from_secs(30), || async {
        let text = hale.metrics().await;
        let failed = metric(
            &text,
            "hale_alertmanager_polls_total",
            &[("result", "unreachable")],
        );
        failed.filter(|n| *n >= 3.0)
    })
    .await;
    let log = hale.log();
    assert_eq!(log.matches("poll failed").count(), 1, "{log}");
    assert!(log.contains("failed_polls=1 for_s=0"), "{log}");
    am.restart().await;
    am.fire(&[watchdog(), heartbeat("n1"), smart_failing("n1")])
        .await;
    hale.wait_node("fresh again", "n1", |n| {
        !has_condition(n, "telemetry_stale")
    })
    .await;
    let log = hale.log();
    let again = log
        .lines()
        .find(|l| l.contains("Alertmanager answers again"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(again.contains("failed_polls="), "{again}");
}

/// The first read of the alerts in a while is one poll's answer: its list and the
/// source's state, and the nodes it shows, come from the same answer — not a list
/// fetched past the poll the rest of the picture is from.
#[tokio::test]
async fn the_first_read_of_the_alerts_is_one_polls_answer() {
    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    // Polled at start, then not for ten minutes.
    am.fire(&[watchdog(), heartbeat("n1")]).await;
    let port = free_port();
    let config = config(dir.path(), port, &am.url, "pollInterval: 10m", "");
    let hale = Hale::start_with(dir.path(), port, &config).await;
    hale.wait_node("the first poll", "n1", |n| n["score"] == 100)
        .await;
    am.fire(&[gpu_ecc_uncorrectable("n1")]).await;
    let r: Value = reqwest::get(format!("{}/api/v1/alerts", hale.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        r["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["alertname"] == "GpuEccUncorrectable"),
        "{r}"
    );
    assert_eq!(r["source"]["up"], true, "{r}");
    let n1 = hale.node("n1").await.unwrap();
    assert!(
        has_condition(&n1, "gpu_ecc_errors"),
        "the answer listed is the one the nodes show: {n1}"
    );
}

#[tokio::test]
async fn heartbeat_missed_when_a_node_goes_quiet() {
    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::start(
        dir.path(),
        &am.url,
        "nodeHealth: { reportIntervalSeconds: 1 }\n",
    )
    .await;
    am.fire(&[watchdog(), fast_heartbeat("n1"), fast_heartbeat("n2")])
        .await;
    hale.wait_node("reporting", "n1", |n| n["score"] == 100)
        .await;
    am.resolve(&[fast_heartbeat("n1")]).await;
    // The 15 s floor applies to a 1 s interval.
    let n1 = hale
        .wait_node("heartbeat missed", "n1", |n| {
            has_condition(n, "heartbeat_missed")
        })
        .await;
    assert_eq!(n1["health"], "Unknown");
    assert!(!has_condition(
        &hale.node("n2").await.unwrap(),
        "heartbeat_missed"
    ));
    let log = hale.log();
    assert!(
        log.contains("node stopped reporting") && log.contains("n1"),
        "a warning names the node: {log}"
    );
    am.fire(&[fast_heartbeat("n1")]).await;
    hale.wait_node("resumed", "n1", |n| !has_condition(n, "heartbeat_missed"))
        .await;
}

/// hale stopped (`SIGSTOP`) past `staleAfter` and its nodes' heartbeat window,
/// then let go on: it says it did not run, and takes its silence for its own —
/// no node stale, no heartbeat missed, no hold — once the next poll answers.
#[tokio::test]
async fn a_hale_stopped_and_let_go_takes_the_silence_for_its_own() {
    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::start(
        dir.path(),
        &am.url,
        "nodeHealth: { reportIntervalSeconds: 1 }\n",
    )
    .await;
    am.fire(&[watchdog(), fast_heartbeat("n1"), fast_heartbeat("n2")])
        .await;
    hale.wait_node("reporting", "n1", |n| n["score"] == 100)
        .await;
    let trusted = |metrics: &str| {
        metric(
            metrics,
            "hale_alertmanager_polls_total",
            &[("result", "trusted")],
        )
        .unwrap_or(0.0)
    };
    // Past the 15 s window a 1 s heartbeat has, and the 3 s staleAfter.
    hale.signal("STOP");
    tokio::time::sleep(Duration::from_secs(17)).await;
    hale.signal("CONT");
    let before = trusted(&hale.metrics().await);
    eventually(
        "two polls answered since",
        Duration::from_secs(20),
        || async { (trusted(&hale.metrics().await) >= before + 2.0).then_some(()) },
    )
    .await;
    let log = hale.log();
    let (_, after) = log
        .split_once("hale did not run for")
        .unwrap_or_else(|| panic!("the stop is said: {log}"));
    assert!(!after.contains("no trusted alert data"), "{log}");
    assert!(!after.contains("stopped reporting"), "{log}");
    assert!(!after.contains("holdAfterRestart"), "{log}");
    for node in ["n1", "n2"] {
        let events = hale
            .events(node, "type=HEARTBEAT_MISSED&type=CONDITION_RAISED")
            .await;
        assert_eq!(events["events"], serde_json::json!([]), "{node}: {events}");
    }
}

#[tokio::test]
async fn state_survives_kill_9() {
    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let mut hale = Hale::start(dir.path(), &am.url, "").await;
    am.fire(&[watchdog(), heartbeat("n1"), gpu_ecc_uncorrectable("n1")])
        .await;
    hale.wait_node("scored", "n1", |n| n["score"] == 55).await;
    let client = reqwest::Client::new();
    for job in ["a", "b"] {
        let r = client
            .post(format!("{}/failures", hale.node_url("n1")))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({"job": job, "reason": "gpu_ecc_errors"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    // The sticky condition outlives its alert.
    am.resolve(&[gpu_ecc_uncorrectable("n1")]).await;
    let before = hale
        .wait_node("failures counted", "n1", |n| {
            n["failures"]["total"] == 2 && n["score"] == 45
        })
        .await;
    // A poll after the change has been applied; then stop the world without warning.
    hale.after_polls(1.0).await;
    let before = hale.node("n1").await.unwrap_or(before);
    hale.restart().await;
    let after = hale.node("n1").await.expect("node still known");
    for key in ["score", "scoredBy", "breakdown", "failures"] {
        assert_eq!(before[key], after[key], "{key}");
    }
    let strip = |n: &Value| {
        let mut cs = n["conditions"].clone();
        for c in cs.as_array_mut().unwrap() {
            c.as_object_mut().unwrap().remove("lastSeen");
            c.as_object_mut().unwrap().remove("observations");
        }
        cs
    };
    assert_eq!(strip(&before), strip(&after));
    assert!(after["lastHeartbeat"].as_str().unwrap() >= before["lastHeartbeat"].as_str().unwrap());
    assert_eq!(after["conditions"][0]["type"], "gpu_ecc_errors");
}

/// A clean stop writes what a crash may lose: the observation counts, last-seen
/// and report times that reports keep in memory between saves.
#[tokio::test]
async fn a_clean_stop_keeps_every_observation() {
    let dir = tempfile::tempdir().unwrap();
    let mut hale = Hale::webhook_only(dir.path(), "").await;
    let body = delivery(&[(&watchdog(), "firing"), (&smart_failing("n1"), "firing")]);
    for _ in 0..4 {
        assert_eq!(hale.deliver(&body).await, 200);
    }
    let before = hale
        .wait_node("observed four times", "n1", |n| {
            n["conditions"][0]["observations"] == 4
        })
        .await;
    hale.stop();
    hale.restart().await;
    let after = hale.node("n1").await.expect("node still known");
    assert_eq!(after["conditions"], before["conditions"]);
    assert_eq!(after["lastReport"], before["lastReport"]);
}

#[tokio::test]
async fn a_truncated_webhook_triggers_an_immediate_poll() {
    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = config(dir.path(), port, &am.url, "pollInterval: 1h", "");
    let hale = Hale::start_with(dir.path(), port, &config).await;
    am.fire(&[watchdog(), smart_failing("n1")]).await;
    // Only the heartbeat is in the delivery; the SMART alert was left out of it.
    let delivery = serde_json::json!({
        "version": "4", "status": "firing", "receiver": "hale", "truncatedAlerts": 1,
        "alerts": [{"status": "firing", "fingerprint": "hb1",
                    "labels": {"alertname": "HaleNodeReporting", "hale_signal": "heartbeat", "node": "n1"}}]
    });
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/alertmanager", hale.url))
        .bearer_auth(TOKEN)
        .json(&delivery)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let n1 = hale
        .wait_node("the poll filled in what the delivery left out", "n1", |n| {
            has_condition(n, "disk_degraded")
        })
        .await;
    assert_eq!(n1["score"], 60);
}

/// Alertmanager's webhook gives a job failure's `startsAt` to the nanosecond, its
/// API to the millisecond: one failure, delivered and polled again and again, is
/// one instance and counts once.
#[tokio::test]
async fn a_job_failure_delivered_and_polled_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let hale_url = format!("http://127.0.0.1:{port}");
    let am = Alertmanager::start(Some((&hale_url, TOKEN))).await;
    let config = config(dir.path(), port, &am.url, "pollInterval: 1s", "");
    let hale = Hale::start_with(dir.path(), port, &config).await;
    let failed = alert(
        &[
            ("alertname", "JobFailed"),
            ("hale_signal", "job_failure"),
            ("hale_job", "sim-7"),
            ("node", "n1"),
        ],
        "job sim-7 failed on n1",
    );
    am.fire(&[watchdog(), heartbeat("n1"), failed]).await;
    let count = |text: &str, name: &str, label: (&str, &str)| {
        metric(text, name, &[label]).unwrap_or(0.0) as u64
    };
    // The watchdog's group and n1's are two deliveries.
    eventually("both groups delivered", Duration::from_secs(30), || async {
        let text = hale.metrics().await;
        let delivered = count(
            &text,
            "hale_alertmanager_webhook_requests_total",
            ("code", "200"),
        );
        (delivered >= 2).then_some(())
    })
    .await;
    let polls = |text: String| {
        count(
            &text,
            "hale_alertmanager_polls_total",
            ("result", "trusted"),
        )
    };
    let from = polls(hale.metrics().await);
    eventually(
        "two trusted polls after them",
        Duration::from_secs(30),
        || async { (polls(hale.metrics().await) >= from + 2).then_some(()) },
    )
    .await;
    let n1 = hale.node("n1").await.unwrap();
    assert_eq!(n1["failures"]["total"], 1, "{n1}");
    let events = hale.events("n1", "type=job_failure_attributed").await;
    assert_eq!(events["events"].as_array().unwrap().len(), 1, "{events}");
}

#[tokio::test]
async fn an_alertmanager_behind_tls_and_basic_auth_is_polled_with_the_password_read_each_time() {
    let (am, guard) =
        Alertmanager::guarded("route:\n  receiver: hale\nreceivers:\n  - name: hale\n").await;
    assert!(am.url.starts_with("https://"), "{}", am.url);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let am_keys = format!(
        "pollInterval: 1s, staleAfter: 60s, caFile: '{}', basicAuth: {{ username: {AM_USER}, passwordFile: '{}' }}",
        guard.ca.display(),
        guard.password_file.display()
    );
    let hale = Hale::start_with(
        dir.path(),
        port,
        &config(dir.path(), port, &am.url, &am_keys, ""),
    )
    .await;
    am.fire(&[watchdog(), heartbeat("n1"), smart_failing("n1")])
        .await;
    hale.wait_node("scored through TLS and basic auth", "n1", |n| {
        n["score"] == 60
    })
    .await;

    // A password changed under the running hale is read at the next poll: a wrong
    // one is refused (and said so), and polls refused clear nothing, though the
    // fault resolved meanwhile; the right one works again (within `staleAfter`,
    // so no hold of absences follows the gap).
    std::fs::write(&guard.password_file, "not-the-password\n").unwrap();
    let refusal = "answered HTTP 401 (it refused the credentials of alertmanager.basicAuth)";
    eventually("the refusal logged", Duration::from_secs(20), || async {
        hale.log().contains(refusal).then_some(())
    })
    .await;
    am.resolve(&[smart_failing("n1")]).await;
    // Counted each (the log says a run of them once a minute).
    let refused_polls = || async {
        let text = hale.metrics().await;
        metric(
            &text,
            "hale_alertmanager_polls_total",
            &[("result", "status")],
        )
        .unwrap_or(0.0)
    };
    let refused = refused_polls().await;
    eventually(
        "two more polls refused",
        Duration::from_secs(20),
        || async { (refused_polls().await >= refused + 2.0).then_some(()) },
    )
    .await;
    eventually("the source down", Duration::from_secs(20), || async {
        (metric(&hale.metrics().await, "hale_alert_source_up", &[]) == Some(0.0)).then_some(())
    })
    .await;
    let n1 = hale.node("n1").await.unwrap();
    assert!(
        has_condition(&n1, "disk_degraded"),
        "a refused poll clears nothing: {n1}"
    );
    std::fs::write(&guard.password_file, format!("{AM_PASSWORD}\n")).unwrap();
    hale.wait_node_within(
        "cleared once polls are let in again",
        "n1",
        Duration::from_secs(40),
        |n| !has_condition(n, "disk_degraded"),
    )
    .await;
    let log = hale.log();
    assert!(
        !log.contains(AM_PASSWORD) && !log.contains("not-the-password"),
        "{log}"
    );

    // Without the CA, the certificate does not verify: said by hale (a run of
    // failed polls at its start), with whom, and not again by the verifier in a
    // line naming no one.
    let other = tempfile::tempdir().unwrap();
    let port = free_port();
    let untrusting = Hale::start_with(
        other.path(),
        port,
        &config(other.path(), port, &am.url, "pollInterval: 1s", ""),
    )
    .await;
    let said = eventually("the poll's refusal", Duration::from_secs(20), || async {
        untrusting
            .log()
            .lines()
            .find(|l| l.contains("poll failed") && l.contains("UnknownIssuer"))
            .map(str::to_string)
    })
    .await;
    assert!(
        said.contains(&am.url.trim_end_matches('/').to_string()),
        "{said}"
    );
    let log = untrusting.log();
    assert!(!log.contains("rustls_platform_verifier"), "{log}");
}

/// `node`'s heartbeat, every second: missed after the 15 s floor of a window.
fn fast_heartbeat(node: &str) -> Value {
    let mut hb = heartbeat(node);
    hb["labels"]["hale_report_interval"] = "1s".into();
    hb
}

/// A poll's answer that arrived in time but waits to be applied — behind
/// deliveries holding the fleet, on a loaded machine — is not a silent source: a
/// step taken meanwhile, past `staleAfter` since the last trusted answer, leaves
/// the fleet trusted, and the answer, once applied, raises nothing and starts no
/// hold. (In process, so the wait between the answer's arrival and its
/// application is the test's to choose.)
#[tokio::test]
async fn a_poll_answer_waiting_to_be_applied_is_not_a_silent_source() {
    use hale::store::EventQuery;
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), heartbeat("n1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hale.yaml");
    std::fs::write(
        &path,
        format!(
            "store: {{ path: {} }}\nalertmanager: {{ url: '{}', pollInterval: 1s, staleAfter: 4s }}\n",
            dir.path().join("data").display(),
            am.url
        ),
    )
    .unwrap();
    let loaded = hale::config::Config::load(Some(&path)).unwrap();
    let hale = hale::service::Hale::open(
        loaded,
        std::sync::Arc::new(hale::orchestrator::NoOrchestrator),
    )
    .unwrap();
    hale.poll_once().await;
    let source = hale.source();
    assert!(source.up && !source.stale, "{source:?}");
    let last = source.last_trusted.unwrap();
    let after = |ms: i64| {
        let at = last + chrono::TimeDelta::milliseconds(ms) - chrono::Utc::now();
        tokio::time::sleep(at.to_std().unwrap_or_default())
    };
    // The next answer arrives two seconds on and waits until `staleAfter` has
    // passed since the last one (less than that since it arrived).
    after(2000).await;
    let fetched = hale.fetch_poll().await;
    after(4500).await;
    hale.apply(|fleet, cfg, now| Ok(fleet.tick(cfg, now)))
        .unwrap();
    let source = hale.source();
    assert!(!source.stale, "stale with an answer in hand: {source:?}");
    hale.apply_poll(fetched).await;
    let source = hale.source();
    assert!(
        source.up && !source.stale && source.hold_until.is_none(),
        "{source:?}"
    );
    let query = EventQuery {
        page_size: 100,
        ..EventQuery::default()
    };
    let page = hale.events("n1", &query).unwrap().unwrap();
    let kinds: Vec<String> = page
        .events
        .iter()
        .map(|e| format!("{:?}", e.event.kind))
        .collect();
    assert!(
        !kinds.iter().any(|k| k.contains("telemetry_stale")),
        "{kinds:?}"
    );
}

/// New nodes refused past `nodeIdentity.maxNodes` are counted at every poll that
/// names them, and said in the log once a minute, not at every poll.
#[tokio::test]
async fn nodes_refused_past_max_nodes_are_said_once_a_minute() {
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), heartbeat("n1"), heartbeat("n2")])
        .await;
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::start(dir.path(), &am.url, "nodeIdentity: { maxNodes: 1 }\n").await;
    hale.after_polls(4.0).await;
    let refused = metric(&hale.metrics().await, "hale_nodes_refused_total", &[]).unwrap();
    assert!(refused >= 4.0, "each poll's refusal counted: {refused}");
    let said = hale
        .log()
        .matches("more nodes than nodeIdentity.maxNodes")
        .count();
    assert_eq!(said, 1, "{}", hale.log());
}

/// A receiver Alertmanager does not have (a typo, a rename on its side) is
/// asked for in vain: its answers are empty, and taken as trusted — without the
/// watchdog required — they would end every condition. hale reads the receivers
/// from Alertmanager's status, takes nothing from such answers, and says why.
#[tokio::test]
async fn a_receiver_alertmanager_does_not_have_clears_nothing_and_is_named() {
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), heartbeat("n1"), smart_failing("n1")])
        .await;
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::start(dir.path(), &am.url, "").await;
    hale.wait_node("SMART failing scored", "n1", |n| {
        has_condition(n, "disk_degraded")
    })
    .await;
    // The receiver renamed by mistake, the watchdog no longer required.
    let path = dir.path().join("hale.yaml");
    let config = std::fs::read_to_string(&path).unwrap().replace(
        "pollInterval: 1s",
        "pollInterval: 1s, receiver: hael, requireWatchdog: false",
    );
    std::fs::write(&path, config).unwrap();
    hale.reload().await;
    let error = eventually("the receiver named", Duration::from_secs(20), || async {
        let log = hale.log();
        let line = log.lines().find(|l| l.contains("routes no alerts to"))?;
        Some(line.to_string())
    })
    .await;
    assert!(
        error.contains("hael")
            && error.contains("(alertmanager.receiver; its routes send to hale)"),
        "{error}"
    );
    let polls = metric(
        &hale.metrics().await,
        "hale_alertmanager_polls_total",
        &[("result", "receiver")],
    );
    assert!(polls.is_some_and(|n| n >= 1.0), "counted as failed polls");
    let n1 = hale.node("n1").await.unwrap();
    assert!(has_condition(&n1, "disk_degraded"), "nothing cleared: {n1}");
}
