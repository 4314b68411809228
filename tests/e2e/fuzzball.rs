//! The Fuzzball orchestrator against a fake Fuzzball API built from the public spec
//! (`tests/fuzzball/fake.py`: every answer validated against the spec's
//! definitions before it is sent, tokens checked) and a stand-in `fuzzball` CLI
//! (`tests/fuzzball/fuzzball`: the documented node verbs, outputs and refusals,
//! acting on the fake's state, so a drain through the CLI shows in `GET /nodes`).
//! No Fuzzball is installable here.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

pub(crate) const FUZZBALL_TOKEN: &str = "fz-token-e2e-5b1c";

fn here() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fuzzball"))
}

/// The fake API, on a free port, stopped on drop.
pub(crate) struct FakeFuzzball {
    pub(crate) url: String,
    port: u16,
    state: PathBuf,
    child: Child,
    dir: tempfile::TempDir,
}

impl FakeFuzzball {
    pub(crate) async fn start(nodes: Value) -> FakeFuzzball {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        std::fs::write(&state, json!({ "nodes": nodes }).to_string()).unwrap();
        let port = free_port();
        let child = Self::spawn(port, &state, dir.path());
        let fake = FakeFuzzball {
            url: format!("http://127.0.0.1:{port}"),
            port,
            state,
            child,
            dir,
        };
        fake.ready().await;
        fake
    }

    fn spawn(port: u16, state: &Path, dir: &Path) -> Child {
        let python = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.venv/bin/python"));
        assert!(
            python.is_file(),
            "{} is missing: run tests/run.sh",
            python.display()
        );
        let log = std::fs::File::create(dir.join("fake.log")).unwrap();
        Command::new(python)
            .arg(here().join("fake.py"))
            .arg(port.to_string())
            .arg(FUZZBALL_TOKEN)
            .arg(state)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    async fn ready(&self) {
        eventually("the fake Fuzzball API", Duration::from_secs(20), || async {
            reqwest::get(format!("{}/test/state", self.url))
                .await
                .ok()
                .filter(|r| r.status().is_success())
                .map(|_| ())
        })
        .await;
    }

    async fn state(&self) -> Value {
        reqwest::get(format!("{}/test/state", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn set(&self, change: Value) {
        let r = reqwest::Client::new()
            .post(format!("{}/test/state", self.url))
            .json(&change)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }

    pub(crate) async fn node(&self, id: &str) -> Value {
        self.state().await["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            .cloned()
            .unwrap()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start again on the same port, with the state it had.
    async fn restart(&mut self, state: Value) {
        std::fs::write(&self.state, state.to_string()).unwrap();
        self.child = Self::spawn(self.port, &self.state, self.dir.path());
        self.ready().await;
    }

    /// What the fake wrote to stderr: an answer off the spec is said there.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("fake.log")).unwrap_or_default()
    }

    /// A `fuzzball` for hale: the stand-in CLI pointed at this fake.
    pub(crate) fn cli(&self, dir: &Path) -> PathBuf {
        let path = dir.join("fuzzball");
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\nFAKE_FUZZBALL_URL={} exec {} {} \"$@\"\n",
                self.url,
                concat!(env!("CARGO_MANIFEST_DIR"), "/../.venv/bin/python"),
                here().join("fuzzball").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

impl Drop for FakeFuzzball {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A node as the fake keeps it: the spec's ListNodeInfo fields, its jobs apart.
pub(crate) fn fz_node(id: &str, host: &str, status: &str, jobs: usize) -> Value {
    let jobs: Vec<Value> = (0..jobs)
        .map(|j| {
            json!({"jobId": format!("{id}-job-{j}"), "jobName": "train", "workflowId": format!("wf-{j}"),
                   "requestedCores": 4, "requestedMemoryGb": 8.0, "startedTimestamp": "1780000000"})
        })
        .collect();
    json!({
        "id": id, "hostName": host, "cpu": "x86_64", "cores": 64, "memoryGb": 512.0, "devices": 8,
        "definitionId": "gpu-h200", "clusterId": "default",
        "resource": {"annotations": {"pool": "gpu", "rack": "r1"}},
        "status": format!("NODE_STATUS_{status}"),
        "healthState": "NODE_HEALTH_STATE_HEALTHY", "reliabilityScore": 100,
        "jobs": jobs,
    })
}

fn fuzzball_config(dir: &Path, fake: &FakeFuzzball, token: &str) -> String {
    std::fs::write(dir.join("fz-token"), format!("{token}\n")).unwrap();
    format!(
        "pools: [ {{ name: gpu, selector: {{ pool: gpu }}, nodeHealth: {{ mode: cordon, maxUnavailablePercent: 75 }} }} ]\n\
         orchestrator: {{ kind: fuzzball, url: '{}/v4', tokenFile: {}, cli: {}, timeout: 5s, cliTimeout: 10s }}\n",
        fake.url,
        dir.join("fz-token").display(),
        fake.cli(dir).display()
    )
}

fn events_of(page: &Value, t: &str) -> Vec<Value> {
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == t)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn fuzzball_inventory_cordons_drains_and_operators_through_the_cli() {
    let fake = FakeFuzzball::start(json!([
        fz_node("fz-1", "c1", "READY", 2),
        fz_node("fz-2", "c2", "READY", 0),
        fz_node("fz-3", "c3", "READY", 1),
        fz_node("fz-4", "c4", "READY", 0),
    ]))
    .await;
    let am = Alertmanager::start(None).await;
    am.fire(&[
        watchdog(),
        heartbeat("c1"),
        heartbeat("c2"),
        heartbeat("c3"),
        heartbeat("c4"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let hale = Hale::start(
        dir.path(),
        &am.url,
        &fuzzball_config(dir.path(), &fake, FUZZBALL_TOKEN),
    )
    .await;

    // The inventory: named by hostname, status, jobs, labels for pools, and
    // Fuzzball's own health beside hale's.
    let c1 = hale
        .wait_node("inventory", "c1", |n| n["jobs"] == 2 && n["score"] == 100)
        .await;
    assert_eq!(c1["status"], "Ready");
    assert_eq!(
        c1["orchestratorHealth"],
        json!({"state": "healthy", "score": 100})
    );
    let out = hale.cli(&["node", "show", "c1"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Orchestrator: healthy, score 100"));
    let listed = hale.cli(&["node", "list", "--pool", "gpu", "-o", "json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(
        listed["nodes"].as_array().unwrap().len(),
        4,
        "labels from the API select the pool"
    );

    // Policy cordon in cordon mode: a passive drain through the CLI, Cordoned in
    // Fuzzball; the score (15) is below drainBelow too, which asks for the gate.
    am.fire(&[gpu_ecc_uncorrectable("c2"), smart_failing("c2")])
        .await;
    eventually(
        "c2 drained in Fuzzball",
        Duration::from_secs(30),
        || async { (fake.node("fz-2").await["status"] == "NODE_STATUS_CORDONED").then_some(()) },
    )
    .await;
    assert!(
        fake.state().await["reasons"]["fz-2"]
            .as_str()
            .unwrap()
            .starts_with("hale: ")
    );
    let c2 = hale
        .wait_node("c2 cordoned", "c2", |n| n["status"] == "Cordoned")
        .await;
    assert_eq!(c2["cordon"]["by"], "hale");
    // The gate has no place in Fuzzball: refused, recorded as a halt.
    let halted = eventually(
        "the gate refused and said",
        Duration::from_secs(30),
        || async {
            let e = events_of(&hale.events("c2", "").await, "POLICY_HALTED");
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert_eq!(halted[0]["guardrail"], "orchestrator");
    assert!(
        halted[0]["message"]
            .as_str()
            .unwrap()
            .contains("no scheduling gate"),
        "{halted:?}"
    );

    // A manual active drain requeues the node's jobs.
    hale.cli_ok(&[
        "node",
        "drain",
        "c1",
        "--active",
        "--reason",
        "failing disk",
    ]);
    let drained = eventually("c1's jobs requeued", Duration::from_secs(30), || async {
        let e = events_of(&hale.events("c1", "").await, "NODE_DRAINED");
        e.iter().find(|e| e["active"] == true).cloned()
    })
    .await;
    assert_eq!(drained["moved"], 2);
    assert_eq!(fake.node("fz-1").await["jobs"], json!([]));
    // Fuzzball keeps one reason, the last given: the active drain keeps the
    // operator's.
    assert_eq!(
        fake.state().await["reasons"]["fz-1"],
        "operator: failing disk"
    );

    // An operator's drain with the real verbs, outside hale: the operator's.
    let cli = fake.cli(dir.path());
    let out = Command::new(&cli)
        .args(["node", "drain", "fz-3", "--reason", "maintenance"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c3 = hale
        .wait_node("c3 seen cordoned", "c3", |n| n["status"] == "Cordoned")
        .await;
    assert_eq!(c3["cordon"]["by"], "operator");
    // Its uncordon, outside hale too: recorded, and the suppression window starts.
    let out = Command::new(&cli)
        .args(["node", "uncordon", "fz-3"])
        .output()
        .unwrap();
    assert!(out.status.success());
    hale.wait_node("c3 back", "c3", |n| n["status"] == "Ready")
        .await;
    let back = events_of(&hale.events("c3", "").await, "NODE_UNCORDONED");
    assert_eq!(back[0]["by"], "operator");

    // Fuzzball refuses to drain a node that is not ready: a refusal, not a retry.
    fake.set(json!({"refuse": ["fz-4"]})).await;
    am.fire(&[gpu_ecc_uncorrectable("c4")]).await;
    eventually("the refusal logged", Duration::from_secs(30), || async {
        hale.log().contains("cannot be drained").then_some(())
    })
    .await;
    hale.after_polls(5.0).await;
    assert_eq!(
        fake.state().await["drains"]["fz-4"],
        1,
        "asked once, not retried"
    );
    let halted = events_of(&hale.events("c4", "").await, "POLICY_HALTED");
    assert!(
        halted.iter().any(|e| e["guardrail"] == "cordonRefused"),
        "{halted:?}"
    );
    assert_eq!(fake.node("fz-4").await["status"], "NODE_STATUS_READY");

    // Two machines under one hostName: hale keeps the one it had and says so
    // once, rather than retire the node and make it anew at every round.
    let mut nodes = fake.state().await["nodes"].clone();
    nodes
        .as_array_mut()
        .unwrap()
        .push(fz_node("fz-9", "c1", "READY", 5));
    fake.set(json!({ "nodes": nodes })).await;
    let shared = "Fuzzball lists more than one node under this name";
    eventually("the shared name said", Duration::from_secs(30), || async {
        hale.log().contains(shared).then_some(())
    })
    .await;
    // An inventory comes before each poll.
    hale.after_polls(3.0).await;
    assert_eq!(hale.log().matches(shared).count(), 1, "said once");
    let retired = events_of(&hale.events("c1", "").await, "NODE_DECOMMISSIONED");
    assert!(retired.is_empty(), "{retired:?}");
    let c1 = hale.node("c1").await.unwrap();
    assert_eq!(
        (&c1["status"], &c1["jobs"]),
        (&json!("Cordoned"), &json!(0)),
        "still fz-1: {c1}"
    );

    // An operator's cordon Fuzzball refuses is said as refused, with Fuzzball's
    // reason, and fails; so does `drain --all`, counting only what it took out.
    let out = hale.cli(&["node", "cordon", "c4", "--reason", "rack work"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.starts_with("c4: cordon refused"), "{stdout}");
    assert!(
        stderr.contains("the orchestrator refused the cordon of c4")
            && stderr.contains("cannot be drained"),
        "{stderr}"
    );
    let out = hale.cli(&[
        "node",
        "drain",
        "--all",
        "--reason",
        "maintenance",
        "-o",
        "json",
    ]);
    assert!(!out.status.success());
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["refused"], json!(["c4"]), "{r}");
    assert_eq!(r["nodes"], json!(["c3"]), "{r}");
    assert_eq!(r["drained"], 1, "{r}");

    // An active drain Fuzzball refuses on a node it holds cordoned: said as
    // refused, and fails; the node reads cordoned, its drain refused.
    fake.set(json!({"refuse": ["fz-3", "fz-4"]})).await;
    let out = hale.cli(&["node", "drain", "c3", "--active", "--reason", "rack work"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.starts_with("c3: drain refused"), "{stdout}");
    assert!(
        stderr.contains("the orchestrator refused the drain of c3")
            && stderr.contains("cannot be drained"),
        "{stderr}"
    );
    let c3 = hale.node("c3").await.unwrap();
    assert_eq!(
        (
            &c3["status"],
            &c3["cordon"]["drained"],
            &c3["cordon"]["drainRefused"]
        ),
        (&json!("Cordoned"), &json!(false), &json!(true)),
        "{c3}"
    );
    let shown = hale.cli(&["node", "show", "c3"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains(": maintenance, drain refused\n"), "{shown}");
    assert!(!fake.log().contains("off spec"), "{}", fake.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn fuzzball_down_or_refusing_the_token_acts_on_nothing_and_says_why() {
    let mut fake = FakeFuzzball::start(json!([
        fz_node("fz-1", "c1", "READY", 0),
        fz_node("fz-2", "c2", "READY", 0)
    ]))
    .await;
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), heartbeat("c1"), heartbeat("c2")])
        .await;
    let dir = tempfile::tempdir().unwrap();
    let mut hale = Hale::start(
        dir.path(),
        &am.url,
        &fuzzball_config(dir.path(), &fake, FUZZBALL_TOKEN),
    )
    .await;
    hale.wait_node("inventory", "c1", |n| n["score"] == 100)
        .await;

    // The API down: a clear error, nothing acted on, taken in again once it is back.
    let before = fake.state().await;
    fake.stop();
    am.fire(&[gpu_ecc_uncorrectable("c1")]).await;
    eventually(
        "the API's absence logged",
        Duration::from_secs(60),
        || async {
            let log = hale.log();
            (log.contains("inventory") && log.contains("Connection refused")).then_some(())
        },
    )
    .await;
    fake.restart(before).await;
    eventually(
        "c1 cordoned once the API is back",
        Duration::from_secs(60),
        || async { (fake.node("fz-1").await["status"] == "NODE_STATUS_CORDONED").then_some(()) },
    )
    .await;

    // A wrong token: the error names the file, never the token.
    hale.kill9();
    let dir2 = tempfile::tempdir().unwrap();
    let wrong = "not-the-fuzzball-token";
    let hale2 = Hale::start(
        dir2.path(),
        &am.url,
        &fuzzball_config(dir2.path(), &fake, wrong),
    )
    .await;
    let file = dir2.path().join("fz-token").display().to_string();
    eventually(
        "the refused token named by its file",
        Duration::from_secs(60),
        || async {
            hale2
                .log()
                .contains(&format!("refused the token in {file}"))
                .then_some(())
        },
    )
    .await;
    // A token with too little right: said as such, not as a wrong one.
    let token_file = dir2.path().join("fz-token");
    let (readonly, rotated) = ("fz-readonly-3e1", "fz-token-rotated-9d2");
    fake.set(json!({"forbidden": [readonly]})).await;
    std::fs::write(&token_file, format!("{readonly}\n")).unwrap();
    eventually(
        "the token's missing permission named",
        Duration::from_secs(60),
        || async {
            hale2
                .log()
                .contains(&format!(
                    "the token in {file} is valid but lacks the permission"
                ))
                .then_some(())
        },
    )
    .await;
    // Fuzzball's token rotated, and the Secret with it: taken up at the next round,
    // without a reload or a restart.
    fake.set(json!({"token": rotated})).await;
    std::fs::write(&token_file, format!("{rotated}\n")).unwrap();
    hale2
        .wait_node("the inventory with the rotated token", "c1", |n| {
            n["status"] == "Cordoned"
        })
        .await;
    for token in [wrong, readonly, rotated] {
        assert!(!hale2.log().contains(token), "{token} in the log");
    }
    assert!(!hale.log().contains(FUZZBALL_TOKEN));

    // No tokenFile at all: said as a token wanted, naming the key to set.
    let dir3 = tempfile::tempdir().unwrap();
    let tokenless = fuzzball_config(dir3.path(), &fake, "unused").replace(
        &format!("tokenFile: {}, ", dir3.path().join("fz-token").display()),
        "",
    );
    assert!(!tokenless.contains("tokenFile"), "{tokenless}");
    let hale3 = Hale::start(dir3.path(), &am.url, &tokenless).await;
    eventually(
        "the missing token said",
        Duration::from_secs(60),
        || async {
            hale3
                .log()
                .contains("the Fuzzball API wants a token: set orchestrator.tokenFile")
                .then_some(())
        },
    )
    .await;
    assert!(!fake.log().contains("off spec"), "{}", fake.log());
}

/// A Fuzzball API that takes connections and never answers holds no poll behind
/// it: polls go on with the last inventory (none here), trusted, and the source
/// never goes stale, while the log says the inventory is slow.
#[tokio::test(flavor = "multi_thread")]
async fn a_fuzzball_api_that_never_answers_holds_no_poll_behind_it() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}/v4", listener.local_addr().unwrap());
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            keep.lock().unwrap().push(conn);
        }
    });
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fz-token"), "t\n").unwrap();
    let port = free_port();
    let extra = format!(
        "orchestrator: {{ kind: fuzzball, url: '{api}', tokenFile: {}, cli: /bin/true }}\n",
        dir.path().join("fz-token").display()
    );
    let hale = Hale::start_with(
        dir.path(),
        port,
        &config(
            dir.path(),
            port,
            &am.url,
            "pollInterval: 1s, staleAfter: 10s",
            &extra,
        ),
    )
    .await;
    // Each poll waits 1 s for the inventory (its default timeout is 30 s).
    hale.after_polls(8.0).await;
    let text = hale.metrics().await;
    assert!(
        metric(
            &text,
            "hale_alertmanager_polls_total",
            &[("result", "trusted")]
        )
        .is_some_and(|n| n >= 8.0),
        "{text}"
    );
    assert_eq!(metric(&text, "hale_alert_source_up", &[]), Some(1.0));
    let log = hale.log();
    assert!(!log.contains("no trusted alert data"), "{log}");
    assert!(
        log.contains("the orchestrator's inventory is slow: polls go on"),
        "{log}"
    );
    assert!(!held.lock().unwrap().is_empty(), "asked the API");
}

/// An operator's uncordon while hale's cordon is still under way (Fuzzball's CLI
/// slow to answer): the node shows in service meanwhile, but the cordon may land
/// yet — `hale node uncordon` waits for the uncordon sent after it, rather than
/// saying the node is back while the cordon lands, and the node ends in service.
#[tokio::test(flavor = "multi_thread")]
async fn an_uncordon_behind_a_cordon_under_way_waits_for_it_to_land() {
    let dir = tempfile::tempdir().unwrap();
    // The CLI hale runs says it was called, then waits while `hold` is there.
    let (called, hold) = (dir.path().join("called"), dir.path().join("hold"));
    let (fake, _am, hale) = two_nodes_behind(dir.path(), |cli| {
        format!(
            "touch {}\nwhile [ -e {} ]; do sleep 0.1; done\nexec {} \"$@\"\n",
            called.display(),
            hold.display(),
            cli.display()
        )
    })
    .await;

    std::fs::write(&hold, "").unwrap();
    let out = hale.cli_ok(&["node", "cordon", "c2", "--reason", "bios", "--wait", "0s"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("recorded, not waited for"));
    eventually("the cordon under way", Duration::from_secs(20), || async {
        called.exists().then_some(())
    })
    .await;
    let mut uncordon = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args([
            "node",
            "uncordon",
            "c2",
            "--reason",
            "wrong node",
            "--wait",
            "60s",
        ])
        .env("HALE_SERVER", &hale.url)
        .env("HALE_TOKEN_FILE", hale.dir.join("token"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let c2 = hale
        .wait_node("the uncordon recorded", "c2", |n| n["cordon"].is_null())
        .await;
    assert_eq!(c2["pending"][0]["action"], "uncordon", "{c2}");
    // Inventories read meanwhile show c2 in service: not taken for the uncordon.
    hale.after_polls(3.0).await;
    assert!(
        uncordon.try_wait().unwrap().is_none(),
        "the uncordon said done while the cordon was under way"
    );
    let c2 = hale.node("c2").await.unwrap();
    assert_eq!(c2["pending"][0]["action"], "uncordon", "{c2}");
    std::fs::remove_file(&hold).unwrap();
    let out = tokio::task::spawn_blocking(move || uncordon.wait_with_output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("c2 uncordoned"), "{stdout}");
    assert_eq!(fake.node("fz-2").await["status"], "NODE_STATUS_READY");
    let events = hale.events("c2", "").await;
    assert_eq!(events_of(&events, "NODE_CORDONED").len(), 1, "{events}");
    assert_eq!(events_of(&events, "NODE_UNCORDONED").len(), 1, "{events}");
    let c2 = hale
        .wait_node("nothing left pending", "c2", |n| n["pending"].is_null())
        .await;
    assert_eq!(c2["status"], "Ready", "{c2}");
}

/// A cordon Fuzzball's CLI keeps failing (a transient error) is tried a few times
/// with backoff, then again every 10 s — not once more on every poll that wakes
/// the actions, which asked a failing orchestrator several times a second.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_cordon_is_tried_again_every_ten_seconds_not_every_poll() {
    let dir = tempfile::tempdir().unwrap();
    // Each call is written down with its time, and fails as a server error would.
    let calls = dir.path().join("calls");
    let (_fake, am, hale) = two_nodes_behind(dir.path(), |_| {
        format!(
            "date +%s.%N >> {}\necho 'Error: internal server error' >&2\nexit 1\n",
            calls.display()
        )
    })
    .await;
    // Alerts that change every poll keep the node's record changing, and with
    // it waking the actions, as the tester's heartbeats did.
    am.fire(&[smart_failing("c2")]).await;
    let out = hale.cli(&["node", "cordon", "c2", "--reason", "bios", "--wait", "0s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let times = || -> Vec<f64> {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    };
    // The first round of tries, then the next round: 10 s after the first ended.
    let seen = eventually(
        "a second round of tries",
        Duration::from_secs(60),
        || async {
            let t = times();
            t.windows(2)
                .position(|w| w[1] - w[0] > 5.0)
                .map(|at| (t.clone(), at))
        },
    )
    .await;
    let (t, gap) = seen;
    assert!(
        (1..=4).contains(&(gap + 1)),
        "one round is a try and at most three more with backoff: {t:?}"
    );
    assert!(
        (9.0..15.0).contains(&(t[gap + 1] - t[gap])),
        "the next round 10 s after the last try: {t:?}"
    );
    let c2 = hale.node("c2").await.unwrap();
    assert_eq!(c2["pending"][0]["action"], "cordon", "{c2}");
    assert!(
        c2["pending"][0]["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("internal server error")),
        "{c2}"
    );
}

/// Fuzzball with c1 and c2, an Alertmanager firing their heartbeats, and hale
/// running Fuzzball's CLI through a shell script of `body` (given the stand-in
/// CLI's path), once hale holds c2.
async fn two_nodes_behind(
    dir: &Path,
    body: impl FnOnce(&Path) -> String,
) -> (FakeFuzzball, Alertmanager, Hale) {
    let fake = FakeFuzzball::start(json!([
        fz_node("fz-1", "c1", "READY", 0),
        fz_node("fz-2", "c2", "READY", 0),
    ]))
    .await;
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), heartbeat("c1"), heartbeat("c2")])
        .await;
    let config = fuzzball_config(dir, &fake, FUZZBALL_TOKEN);
    let cli = fake.cli(dir);
    let script = dir.join("wrapped-fuzzball");
    std::fs::write(&script, format!("#!/bin/sh\n{}", body(&cli))).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = config.replace(
        &format!("cli: {},", cli.display()),
        &format!("cli: {},", script.display()),
    );
    assert!(config.contains("wrapped-fuzzball"), "{config}");
    let hale = Hale::start(dir, &am.url, &config).await;
    hale.wait_node("inventory", "c2", |n| n["score"] == 100)
        .await;
    (fake, am, hale)
}
