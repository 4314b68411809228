//! The web UI in a real headless Chromium: the overview, the nodes table at 10,000
//! nodes, a node's page against the API's history, an operator's cordon, alert text
//! that tries to be markup, and federation with members on loopback. Each test
//! writes a screenshot under `target/ui-screenshots`.

use std::time::Instant;

use serde_json::Value;

use crate::browser::Browser;
use crate::harness::*;

fn warning(node: &str, name: &str) -> Value {
    alert(
        &[("alertname", name), ("node", node), ("severity", "warning")],
        "a warning",
    )
}

fn fine(node: &str) -> Value {
    alert(
        &[
            ("alertname", "NodeInfo"),
            ("node", node),
            ("severity", "info"),
        ],
        "all well",
    )
}

async fn fire(hale: &Hale, alerts: &[Value]) {
    let pairs: Vec<(&Value, &str)> = alerts.iter().map(|a| (a, "firing")).collect();
    assert_eq!(hale.deliver(&delivery(&pairs)).await, 200);
}

/// The overview's row for this cluster says its worst state, the tile counts the
/// fleet, and both follow a change on their own, without reloading the page.
#[tokio::test]
async fn the_overview_shows_each_state_and_keeps_itself_current() {
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "cluster: east\ninventory:\n  - id: spare-1\n").await;
    fire(&hale, &[fine("ok-1"), fine("ok-2"), smart_failing("bad-1")]).await;
    hale.wait_node("scored", "bad-1", |n| n["score"] == 60)
        .await;

    let browser = Browser::start().await;
    browser.goto(&format!("{}/", hale.url)).await;
    let row = "tr.cluster[data-cluster='east']";
    assert_eq!(
        browser.text(&format!("{row} td.state")).await,
        "1 degraded, worst 60, 1 unknown"
    );
    let cells = browser.texts(&format!("{row} td.n")).await;
    assert_eq!(
        cells[..5],
        ["4", "2", "1", "1", "60"],
        "nodes, healthy, degraded, unknown, lowest"
    );
    assert_eq!(browser.text("#fleet-healthy").await, "2");
    assert_eq!(browser.text("#fleet-nodes").await, "4");
    // This hale takes webhooks only: it polls no Alertmanager to call down.
    let source = browser.text(&format!("{row} td:nth-child(8)")).await;
    assert!(source.starts_with("webhook only"), "{source}");
    browser.screenshot("overview.png").await;

    // A second node degrades: the page shows it by itself, and is the same page.
    browser.js("window.sameDocument = true; return null;").await;
    fire(
        &hale,
        &[smart_failing("ok-2"), warning("ok-2", "DiskDegraded")],
    )
    .await;
    browser
        .wait_text("the row to follow", &format!("{row} td.state"), |t| {
            t == "2 degraded, worst 55, 1 unknown"
        })
        .await;
    assert_eq!(browser.text("#fleet-healthy").await, "1");
    assert_eq!(
        browser.js("return window.sameDocument === true;").await,
        true
    );
    // Nothing the page asked for failed (its icon included), nor any script.
    assert_eq!(browser.console_errors().await, Vec::<String>::new());
}

/// 10,000 nodes: the first page is a page of 50 with the count, a health filter
/// and paging work from the form and the links, and search and sort narrow it.
#[tokio::test]
async fn the_nodes_table_filters_and_pages_ten_thousand_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let mut inventory = String::from("inventory:\n");
    for i in 0..10_000 {
        inventory.push_str(&format!("  - id: node-{i:05}\n"));
    }
    let hale = Hale::webhook_only(dir.path(), &inventory).await;
    let failing: Vec<Value> = (0..300)
        .map(|i| smart_failing(&format!("node-{:05}", i * 7)))
        .collect();
    fire(&hale, &failing).await;
    fire(&hale, &[fine("node-00001")]).await;
    hale.wait_node("scored", "node-02093", |n| n["score"] == 60)
        .await;

    let browser = Browser::start().await;
    let asked = Instant::now();
    browser.goto(&format!("{}/ui/nodes", hale.url)).await;
    let loaded = asked.elapsed();
    let rendered = browser
        .js("const t = performance.getEntriesByType('navigation')[0]; return t.domContentLoadedEventEnd;")
        .await;
    println!(
        "nodes page at 10,000 nodes: loaded in {} ms, DOM ready {} ms after navigation start",
        loaded.as_millis(),
        rendered
    );
    assert_eq!(browser.text("#count").await, "Showing 1–50 of 10000");
    let ids = browser.texts("#nodes tbody tr td:first-child").await;
    assert_eq!(ids.len(), 50);
    assert_eq!(
        (ids[0].as_str(), ids[49].as_str()),
        ("node-00000", "node-00049")
    );

    // A search typed and not yet submitted outlives the refresh: it holds off.
    browser.type_into("#filters input[name=q]", "node-0").await;
    browser
        .js("document.activeElement.blur(); return null;")
        .await;
    eventually(
        "a refresh held off",
        std::time::Duration::from_secs(20),
        || async {
            let held = browser
                .js("return Number(document.getElementById('live').dataset.held || 0);")
                .await;
            (held.as_u64() >= Some(1)).then_some(())
        },
    )
    .await;
    assert_eq!(
        browser
            .js("return document.querySelector('#filters input[name=q]').value;")
            .await,
        "node-0"
    );
    browser.goto(&format!("{}/ui/nodes", hale.url)).await;

    // Degraded only, from the form.
    browser
        .choose("#filters select[name=health]", "Degraded")
        .await;
    browser.click("#filters button").await;
    browser
        .wait_text("the filtered count", "#count", |t| {
            t == "Showing 1–50 of 300"
        })
        .await;
    let first = browser.texts("#nodes tbody tr td:first-child").await;
    assert_eq!(first[..2], ["node-00000", "node-00007"]);
    let healths = browser.texts("#nodes tbody tr td:nth-child(5)").await;
    assert!(healths.iter().all(|h| h == "Degraded"), "{healths:?}");
    browser.screenshot("nodes.png").await;

    // The next page continues where the first ended.
    browser.click("#next").await;
    browser
        .wait_text("page two", "#count", |t| t == "Showing 51–100 of 300")
        .await;
    let second = browser.texts("#nodes tbody tr td:first-child").await;
    assert_eq!(second[0], "node-00350");
    assert!(browser.url().await.contains("health=Degraded"));

    // Sorted by score, highest first: the one healthy scored node leads.
    browser
        .goto(&format!("{}/ui/nodes?sort=-score", hale.url))
        .await;
    assert_eq!(
        browser.text("#nodes tbody tr td:first-child").await,
        "node-00001"
    );
    // A search by part of an id, in any case.
    browser
        .goto(&format!("{}/ui/nodes?q=NODE-0999", hale.url))
        .await;
    assert_eq!(browser.text("#count").await, "Showing 1–10 of 10");
    // A start with no page token is the first page's.
    browser
        .goto(&format!("{}/ui/nodes?q=NODE-0999&start=2001", hale.url))
        .await;
    assert_eq!(browser.text("#count").await, "Showing 1–10 of 10");
    // A narrow window: the table scrolls in its own box, the page does not.
    browser.resize(500, 900).await;
    browser.goto(&format!("{}/ui/nodes", hale.url)).await;
    assert_eq!(
        browser
            .js("return document.documentElement.scrollWidth <= document.documentElement.clientWidth;")
            .await,
        true
    );
}

/// A node's page: the chart's points are the API's SCORE_CHANGED history, the
/// conditions and breakdown are the API's, and an alert summary holding a script
/// is shown as text and never runs.
#[tokio::test]
async fn a_node_page_draws_the_history_and_escapes_what_alerts_say() {
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "").await;
    let evil = alert(
        &[
            ("alertname", "SmartFailing"),
            ("node", "n1"),
            ("severity", "critical"),
            ("hale_sticky", "true"),
        ],
        "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">",
    );
    fire(&hale, std::slice::from_ref(&evil)).await;
    hale.wait_node("scored", "n1", |n| n["score"] == 60).await;
    let disk = warning("n1", "DiskDegraded");
    fire(&hale, std::slice::from_ref(&disk)).await;
    hale.wait_node("second change", "n1", |n| n["score"] == 55)
        .await;
    // Both resolve: the warning clears, the sticky SmartFailing stays.
    let resolved = delivery(&[(&evil, "resolved"), (&disk, "resolved")]);
    assert_eq!(hale.deliver(&resolved).await, 200);
    hale.wait_node("the warning cleared", "n1", |n| n["score"] == 60)
        .await;

    let browser = Browser::start().await;
    browser.goto(&format!("{}/ui/nodes/n1", hale.url)).await;
    let points = browser
        .js("return Array.from(document.querySelectorAll('svg.trend circle.point')).map(c => [c.dataset.at, Number(c.dataset.score)]);")
        .await;
    let history = hale.events("n1", "type=SCORE_CHANGED&since=24h").await;
    let expected: Vec<Value> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let at = chrono::DateTime::parse_from_rfc3339(e["occurredAt"].as_str().unwrap())
                .unwrap()
                .to_utc()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            serde_json::json!([at, e["score"]])
        })
        .collect();
    assert_eq!(expected.len(), 3, "{history}");
    assert_eq!(points, Value::Array(expected));
    assert_eq!(browser.text("#score").await, "60");

    // The script is text on the page (the sticky condition is still listed).
    let node = hale.node("n1").await.unwrap();
    let messages = browser.texts("#conditions td.message").await;
    let shown: Vec<&str> = node["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, shown);
    assert!(
        messages
            .iter()
            .any(|m| m.contains("<script>window.pwned = 1</script>"))
    );
    assert_eq!(browser.js("return window.pwned === undefined;").await, true);
    assert_eq!(
        browser.js("return document.scripts.length;").await,
        1,
        "only hale's own script"
    );
    let breakdown = browser.texts("#breakdown tbody tr td:first-child").await;
    let reasons: Vec<String> = node["breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["reason"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(breakdown[1..breakdown.len() - 1], reasons[..]);
    browser.screenshot_page("node.png").await;

    // The timeline's type filter keeps to the chosen type.
    browser
        .goto(&format!("{}/ui/nodes/n1?type=SCORE_CHANGED", hale.url))
        .await;
    let types = browser.texts("#events tbody tr td:nth-child(2)").await;
    assert_eq!(types, ["SCORE_CHANGED"; 3]);
    // Another window keeps the filter.
    browser.click("nav.windows a:nth-child(4)").await;
    browser
        .wait_text("the 7d window", "nav.windows a.chosen", |t| t == "7d")
        .await;
    let types = browser.texts("#events tbody tr td:nth-child(2)").await;
    assert_eq!(types, ["SCORE_CHANGED"; 3]);
    // A type that is none is said, not silently dropped.
    browser
        .goto(&format!("{}/ui/nodes/n1?type=BOGUS", hale.url))
        .await;
    assert_eq!(
        browser.text(".flash.refused").await,
        "type=\"BOGUS\" is not an event type: left out."
    );

    // A page the UI has not, an id with `/` pasted unescaped among them, is a page
    // that says so.
    for (path, says) in [
        ("/ui/nodes/rack1/n:3", "written with %2F"),
        ("/ui/nodes/", "no page at /ui/nodes/"),
        ("/ui/what", "no page at /ui/what"),
    ] {
        let r = reqwest::get(format!("{}{path}", hale.url)).await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{path}"
        );
        let text = r.text().await.unwrap();
        assert!(
            text.contains("No such page") && text.contains(says),
            "{path}: {text}"
        );
    }
}

/// Without a session a verb is refused and changes nothing; signed in with the
/// API token an operator cordons through the confirmation, and the API shows it.
/// A form post without the session's CSRF token is refused too.
#[tokio::test]
async fn an_operator_cordons_through_the_ui_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "").await;
    fire(&hale, &[smart_failing("n1")]).await;
    hale.wait_node("scored", "n1", |n| n["score"] == 60).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let cordon = format!("{}/ui/nodes/n1/cordon", hale.url);
    let form = "reason=no+session&csrf=guess";
    let r = http
        .post(&cordon)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    let browser = Browser::start().await;
    browser.goto(&format!("{}/ui/nodes/n1", hale.url)).await;
    assert!(browser.text("#verbs").await.contains("Sign in"));
    browser
        .goto(&format!("{}/ui/login?next=/ui/nodes/n1", hale.url))
        .await;
    browser.type_into("#token", "not-the-token").await;
    browser.click("#sign-in").await;
    browser
        .wait_text("the refusal", "main", |t| {
            t.contains("That is not hale's API token")
        })
        .await;
    // The header's own link on the sign-in page leads where the page does.
    assert_eq!(
        browser
            .js("return [...document.querySelectorAll('a')].find(a => a.textContent == 'Sign in').getAttribute('href');")
            .await,
        "/ui/login?next=%2Fui%2Fnodes%2Fn1"
    );
    browser.type_into("#token", TOKEN).await;
    browser.click("#sign-in").await;
    browser
        .wait_text("the verbs", "#verbs", |t| t.contains("Cordon"))
        .await;
    let session = browser
        .cookie("hale_session")
        .await
        .expect("a session cookie");
    assert!(!session.contains(TOKEN));
    // Signed in, the sign-in page leads on to where signing in would.
    let r = http
        .get(format!("{}/ui/login?next=/ui/nodes/n1", hale.url))
        .header("Cookie", format!("hale_session={session}"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (
            r.status().as_u16(),
            r.headers()["location"].to_str().unwrap()
        ),
        (303, "/ui/nodes/n1")
    );

    // The session alone is not enough: the form's CSRF token must match it.
    let r = http
        .post(&cordon)
        .header("Cookie", format!("hale_session={session}"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(hale.node("n1").await.unwrap()["status"], "Ready");

    // The field counts characters, the API bytes: 1,024 `é` are 2,048 bytes, a
    // reason the API refuses, and so does the form.
    browser.click("#verb-cordon").await;
    browser
        .wait_text("the confirmation", "h1", |t| t.starts_with("Cordon n1"))
        .await;
    browser.type_into("#reason", &"é".repeat(1024)).await;
    browser.click("#confirm-cordon").await;
    browser
        .wait_text("the refusal", "main", |t| {
            t.contains("The reason is too long") && t.contains("2048 bytes")
        })
        .await;
    assert_eq!(hale.node("n1").await.unwrap()["status"], "Ready");
    browser.goto(&format!("{}/ui/nodes/n1", hale.url)).await;

    browser.click("#verb-cordon").await;
    browser
        .wait_text("the confirmation", "h1", |t| t.starts_with("Cordon n1"))
        .await;
    browser.type_into("#reason", "disk swap tonight").await;
    browser.screenshot("confirm.png").await;
    browser.click("#confirm-cordon").await;
    browser
        .wait_text("the outcome", ".flash.done", |t| {
            t.starts_with("Cordon: done")
        })
        .await;
    let node = hale.node("n1").await.unwrap();
    assert_eq!(node["status"], "Cordoned");
    assert_eq!(node["cordon"]["by"], "operator");
    assert_eq!(node["cordon"]["reason"], "disk swap tonight");
    assert_eq!(browser.text("#status").await, "Cordoned");
    let page = hale.events("n1", "type=NODE_CORDONED").await;
    assert_eq!(page["events"].as_array().unwrap().len(), 1);
}

/// With `ui.requireToken` a reader signs in before any page, and the API's reads
/// need the bearer token; `/healthz` stays open.
#[tokio::test]
async fn require_token_closes_reads_too() {
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::webhook_only(dir.path(), "ui: { requireToken: true }\n").await;
    fire(&hale, &[fine("n1")]).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http
        .get(format!("{}/ui/nodes?q=n", hale.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(
        r.headers()["location"],
        "/ui/login?next=%2Fui%2Fnodes%3Fq%3Dn"
    );
    let nodes = format!("{}/api/v1/nodes", hale.url);
    assert_eq!(http.get(&nodes).send().await.unwrap().status(), 401);
    let r = http.get(&nodes).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let list: Value = r.json().await.unwrap();
    assert_eq!(list["nodes"][0]["id"], "n1");
    for path in [
        "/api/v1/nodes/n1",
        "/api/v1/nodes/n1/events",
        "/api/v1/clusters",
        "/api/v1/remediations",
        "/api/v1/alerts",
    ] {
        let r = http
            .get(format!("{}{path}", hale.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    for page in ["/", "/ui/nodes/n1"] {
        let r = http
            .get(format!("{}{page}", hale.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 303, "{page}");
    }
    let health = http
        .get(format!("{}/healthz", hale.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    let browser = Browser::start().await;
    browser.goto(&format!("{}/ui/nodes", hale.url)).await;
    browser.type_into("#token", TOKEN).await;
    browser.click("#sign-in").await;
    browser
        .wait_text("the table after signing in", "#count", |t| {
            t == "Showing 1–1 of 1"
        })
        .await;
}

/// A hub with two member hales on loopback, one that answers garbage and one that
/// never answers: the
/// overview has a row per cluster and counts every reachable node; the listing
/// carries each member's own state and score. One member killed: its row says no
/// health, its nodes leave the counts and the listings.
/// A member that refuses the hub's token says it is the hub's tokenFile at fault,
/// not the reader's: in the overview's rows as in the listing.
#[tokio::test]
async fn a_member_refusing_the_hub_names_the_hubs_token() {
    let (locked_dir, hub_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let locked = Hale::webhook_only(
        locked_dir.path(),
        "cluster: locked\nui: { requireToken: true }\n",
    )
    .await;
    let port = free_port();
    let members = format!(
        "cluster: hub\nfederation:\n  members:\n    - {{ name: locked, url: '{}' }}\n",
        locked.url
    );
    let hub = Hale::start_with(
        hub_dir.path(),
        port,
        &webhook_only_config(hub_dir.path(), port, &members),
    )
    .await;
    let rows: Value = reqwest::get(format!("{}/api/v1/clusters", hub.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let row = rows["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "locked")
        .expect("a row for the member")
        .clone();
    assert!(row["health"].is_null(), "{row}");
    assert!(
        row["error"]
            .as_str()
            .unwrap()
            .contains("the member's tokenFile in federation.members"),
        "{row}"
    );
    // Asked by another hub, a hale answers for its own cluster only, as
    // `local=true` asks: two hales naming each other never ask each other round.
    let federated: Value = reqwest::Client::new()
        .get(format!("{}/api/v1/clusters", hub.url))
        .header("X-Hale-Federated", "1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = federated["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hub"], "{federated}");
    let r = reqwest::get(format!("{}/api/v1/nodes?cluster=locked", hub.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"], "member_unauthorized", "{e}");
}

#[tokio::test]
async fn federation_shows_members_and_never_a_dead_ones_last_answer() {
    let (east_dir, west_dir, hub_dir) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let east = Hale::webhook_only(east_dir.path(), "cluster: east\n").await;
    let mut west = Hale::webhook_only(west_dir.path(), "cluster: west\n").await;
    fire(&east, &[fine("e1"), smart_failing("e2")]).await;
    fire(
        &west,
        &[fine("w1"), fine("w2"), warning("w3", "DiskDegraded")],
    )
    .await;
    east.wait_node("scored", "e2", |n| n["score"] == 60).await;
    west.wait_node("scored", "w3", |n| n["score"] == 95).await;
    let garbage = Receiver::start().await;
    // `loop` names the hub itself: a member answering for another cluster, and
    // a request that must not go round.
    let port = free_port();
    let members = format!(
        "cluster: hub\nfederation:\n  timeout: 2s\n  members:\n    - {{ name: east, url: '{}' }}\n    - {{ name: west, url: '{}' }}\n    - {{ name: odd, url: '{}' }}\n    - {{ name: slow, url: '{}/hang' }}\n    - {{ name: loop, url: 'http://127.0.0.1:{port}' }}\n",
        east.url, west.url, garbage.url, garbage.url
    );
    let hub = Hale::start_with(
        hub_dir.path(),
        port,
        &webhook_only_config(hub_dir.path(), port, &members),
    )
    .await;
    fire(&hub, &[fine("h1")]).await;
    hub.wait_node("scored", "h1", |n| n["score"] == 100).await;

    let browser = Browser::start().await;
    browser.goto(&format!("{}/", hub.url)).await;
    let state = |c: &str| format!("tr.cluster[data-cluster='{c}'] td.state");
    assert_eq!(browser.text(&state("hub")).await, "All healthy");
    assert_eq!(browser.text(&state("east")).await, "1 degraded, worst 60");
    assert_eq!(browser.text(&state("west")).await, "1 degraded, worst 95");
    assert_eq!(browser.text(&state("odd")).await, "No health");
    assert!(
        browser
            .text("tr.cluster[data-cluster='odd'] td.error")
            .await
            .contains("not hale's API"),
    );
    // A member that never answers is cut off at the timeout, and says so.
    assert_eq!(browser.text(&state("slow")).await, "No health");
    assert!(
        browser
            .text("tr.cluster[data-cluster='slow'] td.error")
            .await
            .contains("did not answer in time"),
    );
    assert!(
        browser
            .text("tr.cluster[data-cluster='loop'] td.error")
            .await
            .contains("answers for cluster `hub`, not `loop`"),
    );
    assert_eq!(browser.text("#fleet-nodes").await, "6");
    assert_eq!(browser.text("#fleet-healthy").await, "4");
    browser.screenshot("federation.png").await;

    // A member's nodes, through the hub, are as the member holds them.
    let via_hub: Value = reqwest::get(format!("{}/api/v1/nodes?cluster=west", hub.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(via_hub["nodes"], west.nodes().await["nodes"]);
    // Members that could not be asked: the listing is printed, and the exit
    // status says it is not the whole fleet.
    let listed = hub.cli(&["node", "list", "--all-clusters", "-o", "json"]);
    assert_eq!(listed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&listed.stderr).contains("not the whole fleet"));
    let all: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let ids: Vec<&str> = all["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["h1", "e1", "e2", "w1", "w2", "w3"]);
    assert!(String::from_utf8_lossy(&listed.stderr).contains("cluster odd could not be asked"));
    // Small pages cross from cluster to cluster and list each node once.
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let page: Value = reqwest::get(format!(
            "{}/api/v1/nodes?allClusters=true&pageSize=2&pageToken={token}",
            hub.url
        ))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        let nodes = page["nodes"].as_array().unwrap();
        assert!(nodes.len() <= 2, "{page}");
        paged.extend(nodes.iter().map(|n| n["id"].as_str().unwrap().to_string()));
        match page["nextPageToken"].as_str() {
            Some(t) => token = t.to_string(),
            None => break,
        }
    }
    assert_eq!(paged, ids);
    // The member that names the hub: the hub does not ask itself round and round.
    let r = reqwest::get(format!("{}/api/v1/nodes?cluster=loop", hub.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"], "federation_loop", "{e}");
    assert!(
        e["detail"]
            .as_str()
            .unwrap()
            .contains("passes no federated request on"),
        "{e}"
    );
    let east_only = hub.cli_ok(&["node", "list", "--cluster", "east"]);
    let table = String::from_utf8_lossy(&east_only.stdout);
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(
        table.contains("e2  ") && table.contains("Degraded"),
        "{table}"
    );
    browser
        .goto(&format!("{}/ui/nodes/e2?cluster=east", hub.url))
        .await;
    assert_eq!(browser.text("#score").await, "60");
    // Operated from its own hale: the link goes to the node's page there.
    assert_eq!(
        browser
            .js("return document.querySelector('#verbs a').getAttribute('href');")
            .await,
        format!("{}/ui/nodes/e2", east.url.trim_end_matches('/'))
    );

    // West dies: no health, and its three nodes leave the counts.
    west.kill9();
    browser.goto(&format!("{}/", hub.url)).await;
    browser
        .wait_text("west without health", &state("west"), |t| t == "No health")
        .await;
    assert_eq!(browser.text("#fleet-nodes").await, "3");
    assert_eq!(browser.text("#fleet-healthy").await, "2");
    assert!(
        browser
            .text("#fleet")
            .await
            .contains("4 clusters without health")
    );
    let all: Value = reqwest::get(format!("{}/api/v1/nodes?allClusters=true", hub.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let clusters: Vec<&str> = all["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(clusters, ["hub", "east", "east"]);
    let gone: Vec<&str> = all["unreachable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(gone, ["west", "odd", "slow", "loop"]);
    let r = reqwest::get(format!("{}/api/v1/nodes?cluster=west", hub.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    browser.screenshot("federation-member-down.png").await;
}
