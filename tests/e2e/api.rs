//! The HTTP API, metrics and CLI of a running hale: bad input, auth, ids with `/` and
//! `:`, promtool on the exposition, decommission.

use std::process::Command;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use serde_json::{Value, json};

use crate::harness::*;

async fn running() -> (Alertmanager, tempfile::TempDir, Hale) {
    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::start(
        dir.path(),
        &am.url,
        "inventory:\n  - id: spare-1\n    hostname: spare1.example\n",
    )
    .await;
    am.fire(&[
        watchdog(),
        heartbeat("rack1/n:3"),
        smart_failing("rack1/n:3"),
        alert(&[("alertname", "ClusterWide")], "names no node"),
    ])
    .await;
    hale.wait_node("scored", "rack1/n:3", |n| n["score"] == 60)
        .await;
    (am, dir, hale)
}

/// An operator verb's body that is not its JSON is a 400 in JSON, whatever the
/// Content-Type, and changes nothing; a clear needs its reason.
#[tokio::test]
async fn bad_operator_bodies_are_json_errors_and_change_nothing() {
    let (_am, _dir, hale) = running().await;
    let client = reqwest::Client::new();
    let node = format!("{}/api/v1/nodes/rack1%2Fn:3", hale.url);
    let before = hale.node("rack1/n:3").await.unwrap();
    // A reason is kept on the node and its events: 1,024 bytes at most.
    let long = format!(r#"{{"reason": "{}"}}"#, "x".repeat(600_000));
    for (verb, body, says) in [
        (
            "cordon",
            long.as_str(),
            "reason: 600000 bytes: at most 1024",
        ),
        ("drain", long.as_str(), "reason: 600000 bytes: at most 1024"),
        (
            "conditions/disk_degraded/clear",
            long.as_str(),
            "reason: 600000 bytes: at most 1024",
        ),
        ("cordon", "{bad", "the request body"),
        ("cordon", r#"{"reason": 5}"#, "reason: invalid type"),
        ("uncordon", r#"{"reasn": "typo"}"#, "unknown field"),
        ("drain", r#"{"active": "yes"}"#, "active: invalid type"),
        ("reboot", r#""now""#, "must be a JSON object"),
        ("cordon", "[]", "must be a JSON object"),
        ("conditions/disk_degraded/clear", "{}", "needs a reason"),
        (
            "conditions/disk_degraded/clear",
            r#"{"reason": "  "}"#,
            "needs a reason",
        ),
    ] {
        // No Content-Type at all, as a hand-written request may send it.
        let r = client
            .post(format!("{node}/{verb}"))
            .bearer_auth(TOKEN)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{verb} {body}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"], "bad_request", "{verb} {body}: {e}");
        let detail = e["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{verb} {body}: {detail}");
    }
    // A failure must say it is JSON (curl's --data says it is a form).
    let r = client
        .post(format!("{node}/failures"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(r#"{"job": "j1"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"], "unsupported_media_type", "{e}");
    let r = client
        .post(format!("{node}/failures"))
        .bearer_auth(TOKEN)
        .json(&json!({"job": "j1", "occurredAt": "2099-01-01T00:00:00Z"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert!(
        e["detail"].as_str().unwrap().contains("in the future"),
        "{e}"
    );
    // Older than nodeIdentity.forgetAfter (7 days by default): not counted, as a
    // job_failure alert that started then is not; a body missing its job is said
    // as an operator verb's is.
    for (body, says) in [
        (
            json!({"job": "j1", "occurredAt": "1970-01-01T00:00:00Z"}),
            "more than nodeIdentity.forgetAfter (7d) ago",
        ),
        (
            json!({"reason": "oom"}),
            "the request body: missing field `job`",
        ),
    ] {
        let r = client
            .post(format!("{node}/failures"))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"], "bad_request", "{e}");
        assert!(e["detail"].as_str().unwrap().contains(says), "{e}");
    }
    // A body past the 2 MiB limit (a UI form's 64 KiB) is a 413 in JSON, whichever
    // verb it was sent to, refused from its declared length before it is read (one
    // sent in chunks is refused once it passes the limit: a unit test in http.rs).
    let addr = hale.url.trim_start_matches("http://").to_string();
    let verbs = ["cordon", "drain", "reboot", "failures", "power"];
    let paths = verbs
        .iter()
        .map(|verb| format!("/api/v1/nodes/rack1%2Fn:3/{verb}"))
        .chain(["/ui/login".to_string()]);
    for verb in paths {
        let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST {verb} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            (2 << 20) + 1
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = conn.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "{verb}: {answer}");
        let limit = if verb.starts_with("/ui/") {
            "limited to 65536 bytes"
        } else {
            "limited to 2097152 bytes"
        };
        assert!(
            answer.contains(r#""error":"payload_too_large""#) && answer.contains(limit),
            "{verb}: {answer}"
        );
    }
    // A node's page takes no parameter: one given is said, not ignored.
    let r = client
        .get(format!("{node}?pageSize=5"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["detail"], r#"unknown parameter "pageSize""#, "{e}");
    // A method an endpoint does not take is a 405 in JSON too.
    let r = client.put(&node).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 405);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"], "method_not_allowed", "{e}");
    let after = hale.node("rack1/n:3").await.unwrap();
    assert_eq!(after["conditions"], before["conditions"]);
    assert_eq!(after["cordon"], before["cordon"]);
    assert_eq!(after["remediation"], before["remediation"]);
    assert_eq!(after["failures"], before["failures"]);
}

/// Alert texts reach the log escaped: a line break cannot forge a line, nor a
/// bidirectional override reorder what `kubectl logs` shows of the rest.
#[tokio::test]
async fn alert_texts_reach_the_log_escaped() {
    let (_am, _dir, hale) = running().await;
    let mut a = smart_failing("n9");
    a["annotations"]["summary"] =
        json!("red \u{1b}[31mALERT\nERROR forged \u{202E}evil, spelled \\u{202e}out");
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/alertmanager", hale.url))
        .bearer_auth(TOKEN)
        .body(delivery(&[(&a, "firing")]).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let line = eventually(
        "the condition logged",
        std::time::Duration::from_secs(10),
        || async {
            hale.log()
                .lines()
                .find(|l| l.contains("n9") && l.contains("disk_degraded raised"))
                .map(str::to_string)
        },
    )
    .await;
    // The character escaped; text that spells the escape out, apart from it.
    assert!(line.contains(" \\u{202e}evil"), "{line}");
    assert!(line.contains(" \\\\u{202e}out"), "{line}");
    let log = hale.log();
    assert!(
        !log.contains('\u{202E}') && !log.contains('\u{1b}'),
        "{log}"
    );
    assert!(!log.lines().any(|l| l.starts_with("ERROR forged")), "{log}");
}

#[tokio::test]
async fn bad_webhook_input_changes_nothing() {
    let (_am, _dir, hale) = running().await;
    let client = reqwest::Client::new();
    let url = format!("{}/api/v1/alertmanager", hale.url);
    let before = hale.nodes().await;

    let r = client.post(&url).body("{}").send().await.unwrap();
    assert_eq!(r.status(), 401, "no token");
    let r = client
        .post(&url)
        .bearer_auth("wrong")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "wrong token");
    assert_eq!(r.headers()["www-authenticate"], r#"Bearer realm="hale""#);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "unauthorized");
    // Said on hale's side too: an Alertmanager with the wrong token went unseen.
    let line = eventually(
        "the refusal logged",
        std::time::Duration::from_secs(10),
        || async {
            hale.log()
                .lines()
                .find(|l| l.contains("an Alertmanager webhook delivery was refused"))
                .map(str::to_string)
        },
    )
    .await;
    assert!(
        line.contains("apiTokenFile") && line.contains("status=401"),
        "{line}"
    );

    let resolved_all = json!({"version": "4", "alerts": [
        {"status": "resolved", "labels": {"node": "rack1/n:3", "alertname": "SmartFailing",
          "hale_condition": "disk_degraded"}, "fingerprint": "x"},
        {"status": "bogus"}
    ]});
    let bad_time = json!({"version": "4", "alerts": [
        {"status": "firing", "labels": {"node": "rack1/n:3", "alertname": "X"},
         "fingerprint": "t", "startsAt": "yesterday", "endsAt": "0001-01-01T00:00:00Z"}
    ]});
    // A route for another receiver pointed at hale by mistake: hale reads its own.
    let other_receiver = json!({"version": "4", "receiver": "pagerduty", "alerts": [
        {"status": "firing", "labels": {"node": "elsewhere", "alertname": "X"}, "fingerprint": "r"}
    ]});
    for body in [
        "{not json".to_string(),
        r#"{"version":"3","alerts":[]}"#.to_string(),
        resolved_all.to_string(),
        bad_time.to_string(),
        other_receiver.to_string(),
    ] {
        let r = client
            .post(&url)
            .bearer_auth(TOKEN)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"], "bad_request");
        assert!(!e["detail"].as_str().unwrap().is_empty());
    }
    // An oversized body is refused from its declared length, before it is read.
    let addr = hale.url.trim_start_matches("http://").to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /api/v1/alertmanager HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        64 << 20
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains(r#""error":"payload_too_large""#),
        "{answer}"
    );
    // A body in chunks whose size is no number is unreadable, not too large: a
    // 400, not a 413 that would blame maxWebhookBytes.
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /api/v1/alertmanager HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n{{}}\r\n0\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains(r#""error":"bad_request""#)
            && answer.contains("the request body could not be read"),
        "{answer}"
    );
    // A body encoded on the way (a proxy's gzip) is refused as such, not read as
    // the text it is not.
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/alertmanager", hale.url))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let e: Value = r.json().await.unwrap();
    assert!(
        e["detail"]
            .as_str()
            .unwrap()
            .contains(r#"Content-Encoding "gzip" is not taken"#),
        "{e}"
    );

    let after = hale.nodes().await;
    assert_eq!(before, after, "state untouched");
    let metrics = hale.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "hale_alertmanager_webhook_requests_total",
            &[("code", "400")]
        ),
        Some(6.0),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "hale_alertmanager_webhook_requests_total",
            &[("code", "401")]
        ),
        Some(2.0),
        "refused deliveries counted: {metrics}"
    );
    // The node-less alert arrives by its own webhook group or the next poll,
    // whichever is first: wait for it to be counted.
    eventually(
        "the node-less alert counted",
        std::time::Duration::from_secs(20),
        || async {
            let metrics = hale.metrics().await;
            metric(&metrics, "hale_alerts_unmatched_total", &[]).filter(|n| *n > 0.0)
        },
    )
    .await;
    // The refusals after the first, within its 10 s, are said at their end, one
    // line per reason with its count: the unreadable bodies (the one sent for
    // another receiver on a line of its own), the wrong token, the oversized body.
    let refused = |l: &str| -> u64 {
        l.split("refused=")
            .nth(1)
            .and_then(|n| n.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let said = eventually(
        "the refusals after the first said",
        std::time::Duration::from_secs(20),
        || async {
            let said: Vec<String> = hale
                .log()
                .lines()
                .filter(|l| l.contains("refused:"))
                .map(str::to_string)
                .collect();
            let unreadable: u64 = said
                .iter()
                .filter(|l| l.contains("status=400"))
                .map(|l| refused(l))
                .sum();
            (unreadable == 6).then_some(said)
        },
    )
    .await;
    let other = said
        .iter()
        .find(|l| l.contains("pagerduty"))
        .unwrap_or_else(|| panic!("{said:#?}"));
    assert!(other.contains("refused=1"), "{other}");
    assert!(
        said.iter().any(|l| l.contains("status=401")
            && l.contains("refused=1")
            && l.contains("apiTokenFile")),
        "{said:#?}"
    );
}

#[tokio::test]
async fn node_ids_with_slash_and_colon_and_operator_verbs() {
    let (am, _dir, hale) = running().await;
    let id = "rack1/n:3";
    assert!(hale.node_url(id).contains("rack1%2Fn:3"));
    let n = hale.node(id).await.unwrap();
    assert_eq!(n["id"], id);

    let client = reqwest::Client::new();
    // Failures: auth, validation, 404, success.
    let failures = format!("{}/failures", hale.node_url(id));
    let r = client
        .post(&failures)
        .json(&json!({"job": "j1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = client
        .post(&failures)
        .bearer_auth(TOKEN)
        .json(&json!({"jb": "typo"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = client
        .post(format!("{}/failures", hale.node_url("nope")))
        .bearer_auth(TOKEN)
        .json(&json!({"job": "j1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "not_found");
    // A verb's answer says whether this request changed the node.
    let verb = |verb: &str, reason: &str| {
        let (client, url) = (client.clone(), format!("{}/{verb}", hale.node_url(id)));
        let reason = reason.to_string();
        async move {
            let r = client
                .post(url)
                .bearer_auth(TOKEN)
                .json(&json!({"reason": reason}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.headers()["hale-changed"].to_str().unwrap().to_string()
        }
    };
    for (name, reason, changed) in [
        ("uncordon", "", "false"),
        ("cordon", "bios", "true"),
        ("cordon", "bios", "false"),
        ("cordon", "firmware", "true"),
        ("drain", "firmware", "true"),
        ("drain", "firmware", "false"),
        ("uncordon", "", "true"),
        ("uncordon", "", "false"),
    ] {
        assert_eq!(verb(name, reason).await, changed, "{name} {reason:?}");
        // Done before the next verb: the same verb asked again while the last is
        // still queued for the orchestrator is a change of its own.
        hale.wait_node("the verb's actions done", id, |n| {
            n.get("pending").is_none()
        })
        .await;
    }
    // Reads that take no parameters say so of one given, as every other.
    for path in ["alerts", "remediations"] {
        let r = client
            .get(format!("{}/api/v1/{path}?pageSize=5", hale.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{path}");
        let body: Value = r.json().await.unwrap();
        assert!(
            body["detail"].as_str().unwrap().contains("pageSize"),
            "{path}: {body}"
        );
    }
    // A path no node id can be (not UTF-8, or a '%' that starts no escape):
    // refused in JSON as the rest, not looked up as it stands.
    for bad in ["%FF", "%ZZ", "gpu-1%2"] {
        for path in ["", "/events"] {
            let r = client
                .get(format!("{}/api/v1/nodes/{bad}{path}", hale.url))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{bad}{path}");
            assert_eq!(r.json::<Value>().await.unwrap()["error"], "bad_request");
        }
    }
    let r = client
        .post(&failures)
        .bearer_auth(TOKEN)
        .json(&json!({"job": "j1", "reason": "disk_degraded"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let n: Value = r.json().await.unwrap();
    assert_eq!(n["failures"]["total"], 1);
    assert_eq!(n["score"], 55);
    // 55 is below the default cordonBelow (60), not below drainBelow (45).
    let text = hale.metrics().await;
    let below = |threshold| {
        metric(
            &text,
            "hale_node_below_threshold",
            &[("node_id", id), ("threshold", threshold)],
        )
    };
    assert_eq!(
        (below("cordonBelow"), below("drainBelow")),
        (Some(1.0), None),
        "{text}"
    );

    // A sticky condition is cleared by the operator through the CLI.
    am.fire(&[gpu_ecc_uncorrectable(id)]).await;
    hale.wait_node("ECC", id, |n| has_condition(n, "gpu_ecc_errors"))
        .await;
    am.resolve(&[gpu_ecc_uncorrectable(id)]).await;
    hale.cli_ok(&[
        "node",
        "clear",
        id,
        // The title `node show` prints names it as well as the type.
        "GPU ECC errors",
        "--reason",
        "GPU swapped",
    ]);
    let n = hale.node(id).await.unwrap();
    assert!(!has_condition(&n, "gpu_ecc_errors"));
    // hale's own conditions are not cleared, in whatever case they are named.
    for own in ["telemetry_stale", "HEARTBEAT_MISSED"] {
        let out = hale.cli(&["node", "clear", id, own, "--reason", "x"]);
        assert!(!out.status.success(), "{own}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("conflict"), "{own}: {said}");
    }
    // Two types that differ only in case: a name in a third case is refused, not
    // one of them picked; the type as written clears that one.
    let variant = |t: &str| {
        alert(
            &[
                ("alertname", "CaseVariant"),
                ("hale_condition", t),
                ("node", id),
            ],
            "case",
        )
    };
    am.fire(&[variant("DiskX"), variant("diskx")]).await;
    hale.wait_node("both variants", id, |n| {
        has_condition(n, "DiskX") && has_condition(n, "diskx")
    })
    .await;
    let out = hale.cli(&["node", "clear", id, "DISKX", "--reason", "x"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("differ only in case"), "{said}");
    am.resolve(&[variant("DiskX"), variant("diskx")]).await;
    hale.wait_node("both variants ended", id, |n| {
        !has_condition(n, "DiskX") && !has_condition(n, "diskx") && n["score"] == 55
    })
    .await;

    // CLI views.
    let out = hale.cli(&["node", "list"]);
    let table = String::from_utf8(out.stdout).unwrap();
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "ID", "CLUSTER", "HOSTNAME", "STATUS", "HEALTH", "SCORE", "JOBS"
        ]
    );
    let spare: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("spare-1"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        spare,
        [
            "spare-1",
            "default",
            "spare1.example",
            "Ready",
            "Unknown",
            "-",
            "0"
        ]
    );
    let out = hale.cli(&["node", "show", id, "-o", "json"]);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["id"], id);
    let out = hale.cli(&["node", "show", id]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Score:     55/100 (penalties: cluster)"),
        "{text}"
    );
    assert!(
        text.contains("Disk Degraded (disk_degraded) [Critical] SMART health check failing"),
        "{text}"
    );
    let out = hale.cli(&["node", "show", "spare-1"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("not yet scored: no alert has named this node yet"),
        "{text}"
    );
    // A severity outside the contract is read as warning, and `hale alerts` says so.
    am.fire(&[alert(
        &[
            ("alertname", "DiskPage"),
            ("node", "typo-1"),
            ("severity", "page"),
        ],
        "paged",
    )])
    .await;
    hale.wait_node("the page read", "typo-1", |n| n["score"] == 95)
        .await;
    let out = hale.cli(&["alerts"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "Note: DiskPage on typo-1: severity \"page\" is not info, warning or critical: read as warning"
        ),
        "{text}"
    );
    let out = hale.cli(&["alerts", "-o", "json"]);
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["source"]["up"], true);
    assert!(
        seen["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["meaning"] == "watchdog")
    );
    let cluster_wide = seen["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["alertname"] == "ClusterWide")
        .unwrap();
    assert_eq!(
        cluster_wide["meaning"],
        "ignored: names no node (none of node, instance holds a node's name)",
        "{cluster_wide}"
    );
    let out = hale.cli(&["alerts"]);
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("condition:disk_degraded")
    );
    // An error is one line, whatever RUST_BACKTRACE says.
    let out = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["node", "show", "nope"])
        .env("HALE_SERVER", &hale.url)
        .env("HALE_TOKEN_FILE", hale.dir.join("token"))
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: not_found (404)"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // A server URL's credentials are not repeated in an error.
    let out = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args([
            "node",
            "list",
            "--server",
            "http://ops:pa55word@127.0.0.1:9",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: cannot reach hale at http://127.0.0.1:9/:")
            && !stderr.contains("pa55word"),
        "{stderr}"
    );
    // Without a token, the 401 says how to give one.
    let out = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["node", "clear", id, "disk_degraded", "--reason", "x"])
        .env("HALE_SERVER", &hale.url)
        .env_remove("HALE_TOKEN_FILE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("(401): a valid API token is required in the Authorization header")
            && stderr.contains("--token-file FILE or set HALE_TOKEN_FILE"),
        "{stderr}"
    );
}

#[tokio::test]
async fn metrics_pass_promtool_and_follow_the_node() {
    let (_am, _dir, hale) = running().await;
    let text = hale.metrics().await;
    if let Some(promtool) = which("promtool") {
        let out = run_with_input(Command::new(promtool).args(["check", "metrics"]), &text);
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        panic!("promtool is not installed: run tests/run.sh");
    }
    // Which build answers, as `hale --version` says it: a rolling upgrade tells
    // its replicas apart.
    let version = Command::new(env!("CARGO_BIN_EXE_hale"))
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    let commit = version
        .trim()
        .strip_prefix(&format!("hale {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{version}"));
    assert_eq!(
        metric(
            &text,
            "hale_build_info",
            &[("version", env!("CARGO_PKG_VERSION")), ("commit", commit)]
        ),
        Some(1.0),
        "{text}"
    );
    let node = r#"node_id="rack1/n:3",cluster="default""#;
    assert!(
        text.contains(&format!("hale_node_reliability_score{{{node}}} 60")),
        "{text}"
    );
    // At cordonBelow (60), not below it.
    assert_eq!(
        metric(
            &text,
            "hale_node_below_threshold",
            &[("node_id", "rack1/n:3")]
        ),
        None,
        "{text}"
    );
    assert!(text.contains(&format!(
        "hale_node_condition{{{node},condition=\"disk_degraded\"}} 3"
    )));
    assert!(text.contains(&format!(
        "hale_node_condition{{{node},condition=\"heartbeat_missed\"}} 0"
    )));
    assert!(text.contains(&format!(
        "hale_node_health_state{{{node},state=\"Degraded\"}} 1"
    )));
    // The unscored inventory node: health Unknown, no score series.
    assert!(text.contains(
        r#"hale_node_health_state{node_id="spare-1",cluster="default",state="Unknown"} 1"#
    ));
    assert!(!text.contains(r#"hale_node_reliability_score{node_id="spare-1""#));

    let client = reqwest::Client::new();
    let r = client
        .delete(hale.node_url("spare-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // The inventory lists it: it goes when the inventory lets it go.
    let r = client
        .delete(hale.node_url("spare-1"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"], "conflict", "{e}");
    assert!(e["detail"].as_str().unwrap().contains("inventory"), "{e}");
    assert!(hale.node("spare-1").await.is_some());
    let r = client
        .delete(hale.node_url("rack1/n:3"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert!(hale.node("rack1/n:3").await.is_none());
    assert!(
        !hale.metrics().await.contains("rack1/n:3"),
        "series removed on decommission"
    );
}

#[test]
fn check_config_names_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "cluster: lab\nnodeHealth:\n  cordonBelow: 50\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["check-config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "cluster: lab\nnodeHealth:\n  cordonBelow: 50\n  drainBelow: 70\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["check-config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:4: nodeHealth.drainBelow:", bad.display())),
        "{err}"
    );
    // Kubernetes with no kubeconfig where the machine offers no cluster: `serve`
    // would stop at start, so the check says so (a warning: the pod it is meant
    // for has its service account); offered one, nothing is said.
    let kube = dir.path().join("kube.yaml");
    std::fs::write(&kube, "orchestrator: { kind: kubernetes }\n").unwrap();
    let home = tempfile::tempdir().unwrap();
    let check = |kubeconfig: Option<&std::path::Path>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hale"));
        c.args(["check-config"])
            .arg(&kube)
            .env("HOME", home.path())
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST");
        if let Some(k) = kubeconfig {
            c.env("KUBECONFIG", k);
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = check(None);
    assert!(
        said.contains("orchestrator.kubeconfig: not set, and this machine has no KUBECONFIG"),
        "{said}"
    );
    assert!(!check(Some(&kube)).contains("orchestrator.kubeconfig"));
}

/// The listing's order, search and count over HTTP, the overview's row, and each
/// parameter that is not one of theirs refused as a 400 that says why.
#[tokio::test]
async fn the_listing_sorts_searches_counts_and_refuses_what_it_cannot_do() {
    let (_am, _dir, hale) = running().await;
    let get = |path: String| async move {
        let r = reqwest::get(path).await.unwrap();
        (r.status(), r.json::<Value>().await.unwrap())
    };
    let (status, list) = get(format!(
        "{}/api/v1/nodes?sort=-score&total=true&pageSize=1",
        hale.url
    ))
    .await;
    assert_eq!(status, 200);
    assert_eq!(list["total"], 2);
    // Descending score: the spare (unscored) sorts last, the scored node first.
    assert_eq!(list["nodes"][0]["id"], "rack1/n:3");
    let token = list["nextPageToken"].as_str().unwrap().to_string();
    let (_, next) = get(format!(
        "{}/api/v1/nodes?sort=-score&pageSize=1&pageToken={token}",
        hale.url
    ))
    .await;
    assert_eq!(next["nodes"][0]["id"], "spare-1");
    assert!(next["nextPageToken"].is_null());
    assert!(next.get("total").is_none(), "counted only when asked");
    let (_, found) = get(format!(
        "{}/api/v1/nodes?q=SPARE1.EXAMPLE&total=true",
        hale.url
    ))
    .await;
    assert_eq!(
        (found["total"].clone(), found["nodes"][0]["id"].clone()),
        (json!(1), json!("spare-1"))
    );

    for (query, says) in [
        ("sort=age", "sort=\"age\" is none of"),
        (
            &format!("sort=score&pageToken={token}") as &str,
            "for this sort",
        ),
        ("total=maybe", "total=\"maybe\" is not a yes or no"),
        ("allClusters=true&total=true", "counted per cluster"),
        (
            "allClusters=true&cluster=a",
            "name one with cluster=NAME alone",
        ),
    ] {
        let (status, e) = get(format!("{}/api/v1/nodes?{query}", hale.url)).await;
        assert_eq!(status, 400, "{query}");
        assert!(e["detail"].as_str().unwrap().contains(says), "{query}: {e}");
    }

    let (status, overview) = get(format!("{}/api/v1/clusters", hale.url)).await;
    assert_eq!(status, 200);
    let row = &overview["clusters"][0];
    assert_eq!(row["name"], "default");
    assert_eq!(row["health"]["state"], "1 degraded, worst 60, 1 unknown");
    assert_eq!(row["health"]["nodes"], 2);
    assert_eq!(row["health"]["lowestScore"], 60);
    assert_eq!(row["health"]["source"]["up"], true);
    for query in ["local=perhaps", "local=true&local=false"] {
        let (status, _) = get(format!("{}/api/v1/clusters?{query}", hale.url)).await;
        assert_eq!(status, 400, "{query}");
    }
}

/// A verb, a webhook or a reload that a browser says another site sent is refused
/// and changes nothing, token or not; the same request from a client that is no
/// browser (curl, the CLI, Alertmanager) goes through.
#[tokio::test]
async fn what_another_site_sends_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // No apiTokenFile: the quick start's hale, where this matters most.
    let port = free_port();
    let config = webhook_only_config(dir.path(), port, "")
        .lines()
        .filter(|l| !l.starts_with("apiTokenFile"))
        .collect::<Vec<_>>()
        .join("\n");
    let hale = Hale::start_with(dir.path(), port, &config).await;
    let client = reqwest::Client::new();
    let fired = client
        .post(format!("{}/api/v1/alertmanager", hale.url))
        .body(delivery(&[(&smart_failing("n1"), "firing")]).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(fired.status(), 200);
    let cordon = format!("{}/cordon", hale.node_url("n1"));
    for (name, value) in [
        ("Origin", "http://evil.example"),
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Site", "same-site"),
    ] {
        let r = client
            .post(&cordon)
            .header("Content-Type", "text/plain")
            .header(name, value)
            .body(r#"{"reason": "from another site"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{name}: {value}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"], "cross_site");
    }
    let forged = client
        .post(format!("{}/api/v1/alertmanager", hale.url))
        .header("Origin", "http://evil.example")
        .body(delivery(&[(&smart_failing("forged"), "firing")]).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    assert!(hale.node("forged").await.is_none());
    assert_eq!(hale.node("n1").await.unwrap()["status"], "Ready");
    // The same verb from curl, and with the page's own origin.
    let r = client
        .post(&cordon)
        .header("Origin", hale.url.clone())
        .header("Host", hale.url.trim_start_matches("http://").to_string())
        .body(r#"{"reason": "same site"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(hale.node("n1").await.unwrap()["status"], "Cordoned");
    // A page whose own name was rebound to this hale after it loaded (DNS
    // rebinding): same-origin in the browser's eyes, but sent to a name.
    let port = hale.url.rsplit(':').next().unwrap().to_string();
    let rebound = |path: String, body: String| {
        let site = format!("rebind.evil.example:{port}");
        client
            .post(path)
            .header("Host", site.clone())
            .header("Origin", format!("http://{site}"))
            .header("Sec-Fetch-Site", "same-origin")
            .header("Content-Type", "text/plain")
            .body(body)
            .send()
    };
    for (path, body) in [
        (
            format!("{}/uncordon", hale.node_url("n1")),
            r#"{"reason": "rebound"}"#.to_string(),
        ),
        (
            format!("{}/api/v1/alertmanager", hale.url),
            delivery(&[(&smart_failing("rebound"), "firing")]).to_string(),
        ),
        (format!("{}/-/reload", hale.url), String::new()),
    ] {
        let r = rebound(path.clone(), body).await.unwrap();
        assert_eq!(r.status(), 403, "{path}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"], "named_host", "{path}");
        assert!(!e["detail"].as_str().unwrap().contains("  "), "{e}");
    }
    assert!(hale.node("rebound").await.is_none());
    assert_eq!(hale.node("n1").await.unwrap()["status"], "Cordoned");
    // At an address — localhost, an IP — a browser's post is taken.
    let site = format!("localhost:{port}");
    let r = client
        .post(format!("{}/uncordon", hale.node_url("n1")))
        .header("Host", site.clone())
        .header("Origin", format!("http://{site}"))
        .header("Sec-Fetch-Site", "same-origin")
        .body(r#"{"reason": "from localhost"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
