//! Out-of-band remediation end to end (DESIGN §8): the real `hale` binary, a real
//! Alertmanager, and real BMC simulators — sushy-emulator (Redfish) and ipmi_sim
//! (IPMI). Each simulated machine behaves like one: while its BMC reads On and it
//! has booted it sends its heartbeat (and, until it is rebooted, its uptime
//! alert); powered off it goes silent; powered on it boots for a while before it
//! reports again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::bmc_sim::{IpmiSim, Sushy, ipmitool};
use crate::harness::*;
use crate::kube_fake::{FakeApi, kubeconfig, ready_node};

const PASSWORD: &str = "bmc-Pa55word-e2e";
/// How long a simulated machine boots before it reports: longer than hale needs
/// to see a heartbeat missed (15 s at a 5 s interval), as a real server's POST is.
const BOOT: Duration = Duration::from_secs(20);

fn beat(node: &str) -> Value {
    let mut hb = heartbeat(node);
    hb["labels"]["hale_report_interval"] = json!("5s");
    hb
}

fn uptime(node: &str, priority: &str) -> Value {
    alert(
        &[
            ("alertname", "WorkerUptimeTooHigh"),
            ("hale_condition", "uptime_too_high"),
            ("hale_remediation", "reboot"),
            ("priority", priority),
            ("severity", "info"),
            ("node", node),
        ],
        "Up for 4w 3d, due for a reboot",
    )
}

/// One simulated machine's state.
#[derive(Default, Clone)]
struct Machine {
    booted: bool,
    on_since: Option<Instant>,
    /// Times it went off.
    offs: u32,
    /// Partitioned: its network is down, so it never reports, whatever its power.
    cut: bool,
}

/// Simulated machines behind a sushy-emulator, reporting to Alertmanager.
struct Machines {
    state: Arc<Mutex<BTreeMap<String, Machine>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Machines {
    /// Every machine booted and reporting; `uptimes` the uptime alerts to send
    /// until each machine is rebooted.
    async fn start(
        am: Arc<Alertmanager>,
        sushy: Arc<Sushy>,
        names: &[&str],
        uptimes: Vec<Value>,
    ) -> Machines {
        let state: BTreeMap<String, Machine> = names
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    Machine {
                        booted: true,
                        ..Machine::default()
                    },
                )
            })
            .collect();
        let mut first: Vec<Value> = names.iter().map(|n| beat(n)).collect();
        first.extend(uptimes.iter().cloned());
        am.fire(&first).await;
        let state = Arc::new(Mutex::new(state));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let names: Vec<String> = shared.lock().unwrap().keys().cloned().collect();
                for name in names {
                    // Reading the power is also what lets the fake driver apply a change.
                    let on = sushy.power(&name).await == "On";
                    let (silence, report) = {
                        let mut all = shared.lock().unwrap();
                        let m = all.get_mut(&name).unwrap();
                        if !on {
                            let was = m.booted;
                            m.booted = false;
                            m.on_since = None;
                            m.offs += u32::from(was);
                            (was, false)
                        } else if !m.booted {
                            let since = *m.on_since.get_or_insert_with(Instant::now);
                            let up = since.elapsed() >= BOOT;
                            m.booted = up;
                            (false, up && !m.cut)
                        } else {
                            (false, false)
                        }
                    };
                    if silence {
                        // Off: no heartbeat, and its uptime starts again.
                        let gone: Vec<Value> = std::iter::once(beat(&name))
                            .chain(
                                uptimes
                                    .iter()
                                    .filter(|u| u["labels"]["node"] == name.as_str())
                                    .cloned(),
                            )
                            .collect();
                        am.resolve(&gone).await;
                    }
                    if report {
                        am.fire(&[beat(&name)]).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Machines { state, task }
    }

    fn offs(&self, name: &str) -> u32 {
        self.state.lock().unwrap()[name].offs
    }

    /// Cut `names` off the network: silent whatever their power.
    async fn cut(&self, am: &Alertmanager, names: &[&str]) {
        for n in names {
            self.state.lock().unwrap().get_mut(*n).unwrap().cut = true;
        }
        let beats: Vec<Value> = names.iter().map(|n| beat(n)).collect();
        am.resolve(&beats).await;
    }
}

impl Drop for Machines {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `type`s (and `step`s) of a node's events, oldest first.
async fn history(hale: &Hale, id: &str) -> Vec<Value> {
    hale.events(id, "pageSize=1000").await["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn of_type<'e>(events: &'e [Value], t: &str) -> Vec<&'e Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

fn time(e: &Value) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(e["occurredAt"].as_str().unwrap())
        .unwrap()
        .to_utc()
}

async fn wait_event(hale: &Hale, id: &str, t: &str, limit: Duration) -> Value {
    eventually(&format!("{t} on {id}"), limit, || async {
        of_type(&history(hale, id).await, t)
            .first()
            .map(|e| (*e).clone())
    })
    .await
}

fn credentials(dir: &std::path::Path, password: &str) -> std::path::PathBuf {
    let path = dir.join("bmc-credentials");
    std::fs::write(&path, format!("admin:{password}\n")).unwrap();
    path
}

/// Whether `needle` appears in any file under `dir` (the store, the log, …).
fn found_under(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        if p.is_dir() {
            todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else if p.file_name().is_some_and(|n| n != "bmc-credentials")
            && let Ok(bytes) = std::fs::read(&p)
            && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
        {
            hits.push(p.display().to_string());
        }
    }
    hits
}

#[tokio::test(flavor = "multi_thread")]
async fn uptime_reboots_a_rack_at_a_time_through_redfish_each_node_checked() {
    let names = ["n1", "n2", "n3", "n4"];
    let sushy = Arc::new(Sushy::start(&names, PASSWORD).await);
    let am = Arc::new(Alertmanager::start(None).await);
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), PASSWORD);
    let rack = |n: &str| if n == "n1" || n == "n2" { "r1" } else { "r2" };
    let inventory: String = names
        .iter()
        .map(|n| {
            format!(
                "  - {{ id: {n}, labels: {{ rack: {} }}, bmc: {{ address: '{}' }} }}\n",
                rack(n),
                sushy.address(n)
            )
        })
        .collect();
    // Four machines read four times a second and two flows at once, all through
    // one emulator serving a request at a time: its requests may queue for
    // seconds on a busy machine, which no BMC request here should count as a
    // dead BMC.
    let extra = format!(
        "nodeHealth: {{ mode: cordon, maxUnavailablePercent: 100 }}\n\
         bmc: {{ credentialsFile: {}, gracefulTimeout: 30s, timeout: 15s }}\n\
         remediation: {{ failureDomainLabel: rack, maxPerDomain: 2, returnTimeout: 3m, verifyTimeout: 20s }}\n\
         inventory:\n{inventory}",
        creds.display()
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    // Rack r2 is the more urgent: P2 against r1's P5.
    let uptimes: Vec<Value> = names
        .iter()
        .map(|n| uptime(n, if rack(n) == "r2" { "P2" } else { "P5" }))
        .collect();
    let machines = Machines::start(am.clone(), sushy.clone(), &names, uptimes).await;

    // Each wave takes about a minute alone; the bound leaves room for a machine
    // busy with the other tests, and a failed flow ends the wait with its event.
    let mut done = BTreeMap::new();
    for n in names {
        let e = eventually(
            &format!("REMEDIATION_SUCCEEDED on {n}"),
            Duration::from_secs(600),
            || async {
                let events = history(&hale, n).await;
                if let Some(failed) = of_type(&events, "REMEDIATION_FAILED").first() {
                    panic!("the flow failed on {n}: {failed}");
                }
                of_type(&events, "REMEDIATION_SUCCEEDED")
                    .first()
                    .map(|e| (*e).clone())
            },
        )
        .await;
        done.insert(n, time(&e));
    }
    let mut started = BTreeMap::new();
    for n in names {
        let events = history(&hale, n).await;
        started.insert(n, time(of_type(&events, "REMEDIATION_STARTED")[0]));
        let steps: Vec<&str> = of_type(&events, "REMEDIATION_STEP")
            .iter()
            .map(|e| e["step"].as_str().unwrap())
            .collect();
        assert_eq!(
            steps,
            [
                "cordon",
                "diagnostics",
                "drain",
                "reboot",
                "return",
                "verify",
                "uncordon"
            ],
            "{n}"
        );
        let power: Vec<&Value> = of_type(&events, "NODE_POWER");
        assert_eq!(power.len(), 1, "{n}: one reboot: {power:?}");
        assert_eq!(power[0]["action"], "reboot");
        assert_eq!(power[0]["by"], "hale");
        assert_eq!(machines.offs(n), 1, "{n} went off once");
        assert_eq!(of_type(&events, "NODE_CORDONED").len(), 1);
        assert_eq!(of_type(&events, "NODE_UNCORDONED")[0]["by"], "hale");
        let node = hale.node(n).await.unwrap();
        assert_eq!(node["status"], "Ready", "{n}");
        assert!(node.get("remediation").is_none(), "{n}: the flow is over");
    }
    // One rack at a time, the urgent one first, both of its nodes together.
    let r2_done = done["n3"].max(done["n4"]);
    assert!(
        started["n1"] >= r2_done && started["n2"] >= r2_done,
        "{started:?} {done:?}"
    );
    assert!(
        started["n4"] < done["n3"] && started["n3"] < done["n4"],
        "r2 in parallel"
    );

    let text = hale.metrics().await;
    assert_eq!(
        metric(
            &text,
            "hale_remediations_total",
            &[("action", "reboot"), ("result", "succeeded")]
        ),
        Some(4.0)
    );
    assert_eq!(metric(&text, "hale_remediation_in_flight", &[]), Some(0.0));
    assert!(
        metric(
            &text,
            "hale_bmc_requests_total",
            &[
                ("kind", "redfish"),
                ("operation", "graceful_off"),
                ("result", "ok")
            ]
        )
        .unwrap_or(0.0)
            >= 4.0,
        "{text}"
    );
    let list = hale.cli(&["remediation", "list", "-o", "json"]);
    assert!(list.status.success());
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list["inFlight"], json!([]));
    assert_eq!(list["queued"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn power_verbs_through_ipmi_and_redfish_and_the_password_nowhere() {
    let ipmi = IpmiSim::start("n1", PASSWORD).await;
    let sushy = Sushy::start(&["n2"], "another-password").await;
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), beat("n1"), beat("n2"), beat("n3"), beat("n4")])
        .await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), PASSWORD);
    let dead = free_port();
    let extra = format!(
        "nodeHealth: {{ mode: cordon, maxUnavailablePercent: 100 }}\n\
         bmc: {{ credentialsFile: {}, cipherSuite: 3, gracefulTimeout: 20s, timeout: 5s }}\n\
         inventory:\n\
         - {{ id: n1, bmc: {{ address: '{}' }} }}\n\
         - {{ id: n2, bmc: {{ address: '{}' }} }}\n\
         - {{ id: n3 }}\n\
         - {{ id: n4, bmc: {{ address: 'ipmi://127.0.0.1:{dead}' }} }}\n",
        creds.display(),
        ipmi.address(),
        sushy.address("n2"),
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    hale.wait_node("reported", "n3", |n| n["score"] == 100)
        .await;

    // IPMI: status, a graceful off (the chassis script obeys the shutdown), on.
    let out = hale.cli_ok(&["node", "power", "n1", "status", "-o", "json"]);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (status["after"].as_str(), status["result"].as_str()),
        (Some("On"), Some("unchanged"))
    );
    let out = hale.cli_ok(&["node", "power", "n1", "off"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("On → Off"));
    assert!(!ipmi.powered());
    assert!(
        ipmi.commands().iter().any(|c| c.starts_with("shutdown")),
        "{:?}",
        ipmi.commands()
    );
    // Asked again: already off, nothing sent.
    let out = hale.cli(&["node", "power", "n1", "off", "-o", "json"]);
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["sent"], json!([]));
    hale.cli_ok(&["node", "power", "n1", "on", "--force"]);
    assert!(ipmi.powered());
    let power: Vec<Value> = of_type(&history(&hale, "n1").await, "NODE_POWER")
        .into_iter()
        .cloned()
        .collect();
    let seen: Vec<(&str, &str, &str)> = power
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["result"].as_str().unwrap(),
                e["by"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("off", "done", "operator"),
            ("off", "unchanged", "operator"),
            ("on", "done", "operator")
        ]
    );

    // No BMC: a 409 that says what is missing.
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/nodes/n3/power", hale.url))
        .bearer_auth(TOKEN)
        .json(&json!({"action": "status"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "no_bmc");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("hale.dev/bmc-address"),
        "{body}"
    );
    let out = hale.cli(&["node", "reboot", "n3"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no BMC"));
    // A verb that is none: 400.
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/nodes/n1/power", hale.url))
        .bearer_auth(TOKEN)
        .json(&json!({"action": "explode"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // The wrong password (sushy has another): a 502 that says so, without it.
    let out = hale.cli(&["node", "power", "n2", "status"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused the credentials"), "{err}");
    // A reboot with the wrong password fails at the reboot; the node stays cordoned.
    hale.cli_ok(&["node", "reboot", "n2", "--reason", "kernel update"]);
    let failed = wait_event(&hale, "n2", "REMEDIATION_FAILED", Duration::from_secs(60)).await;
    assert_eq!(failed["step"], "reboot");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("refused the credentials"),
        "{failed}"
    );
    assert_eq!(hale.node("n2").await.unwrap()["status"], "Cordoned");
    // A BMC that does not answer: also a failure at the reboot, said as such.
    hale.cli_ok(&["node", "reboot", "n4"]);
    let failed = wait_event(&hale, "n4", "REMEDIATION_FAILED", Duration::from_secs(60)).await;
    assert_eq!(failed["step"], "reboot");
    assert_eq!(hale.node("n4").await.unwrap()["status"], "Cordoned");
    let text = hale.metrics().await;
    assert!(
        metric(
            &text,
            "hale_bmc_requests_total",
            &[
                ("kind", "ipmi"),
                ("operation", "status"),
                ("result", "unreachable")
            ]
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );

    for secret in [PASSWORD, "another-password"] {
        let hits = found_under(dir.path(), secret);
        assert!(hits.is_empty(), "the password is in {hits:?}");
    }
    assert!(!hale.log().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_the_reboot_was_sent_the_restarted_hale_does_not_reboot_again() {
    let sushy = Arc::new(Sushy::start(&["n1"], PASSWORD).await);
    let am = Arc::new(Alertmanager::start(None).await);
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), PASSWORD);
    let extra = format!(
        "nodeHealth: {{ mode: cordon, maxUnavailablePercent: 100 }}\n\
         bmc: {{ credentialsFile: {}, gracefulTimeout: 30s, timeout: 5s }}\n\
         remediation: {{ returnTimeout: 3m, verifyTimeout: 20s }}\n\
         inventory: [ {{ id: n1, bmc: {{ address: '{}' }} }} ]\n",
        creds.display(),
        sushy.address("n1"),
    );
    let mut hale = Hale::start(dir.path(), &am.url, &extra).await;
    let machines = Machines::start(am.clone(), sushy.clone(), &["n1"], Vec::new()).await;
    hale.wait_node("reported", "n1", |n| n["score"] == 100)
        .await;
    hale.cli_ok(&["node", "reboot", "n1", "--reason", "firmware"]);
    // The machine goes off: the reboot is under way. hale dies there.
    eventually("the machine off", Duration::from_secs(60), || async {
        (machines.offs("n1") == 1).then_some(())
    })
    .await;
    let view = hale.node("n1").await.unwrap();
    assert!(view["remediation"]["sent"].is_string(), "{view}");
    hale.kill9();
    hale.restart().await;
    wait_event(
        &hale,
        "n1",
        "REMEDIATION_SUCCEEDED",
        Duration::from_secs(180),
    )
    .await;
    assert_eq!(machines.offs("n1"), 1, "rebooted once, not twice");
    let events = history(&hale, "n1").await;
    assert!(
        of_type(&events, "REMEDIATION_STEP")
            .iter()
            .any(|e| e["message"]
                .as_str()
                .unwrap()
                .contains("not sending it again")),
        "{events:?}"
    );
    assert!(
        !of_type(&events, "NODE_POWER")
            .iter()
            .any(|e| e["action"] == "reboot" && e["result"] == "done"),
        "the restarted hale sent no reboot"
    );
    assert_eq!(hale.node("n1").await.unwrap()["status"], "Ready");
}

/// A `blockingAlerts` matcher `hale check-config` accepts is one a real
/// Alertmanager accepts as a filter, and one it refuses Alertmanager refuses too:
/// a matcher it answers with a 400 would block every reboot for good.
#[tokio::test(flavor = "multi_thread")]
async fn blocking_matchers_are_read_as_alertmanager_reads_them() {
    let am = Alertmanager::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hale.yaml");
    for matcher in [
        r#"alertname="CephHealthError""#,
        r#"alertname = "x""#,
        "alert:name=x",
        r#"summary="a \"quoted\" word""#,
        r#"alertname=~"Ceph.*""#,
        r#"alertname!~"a|b""#,
        r#"alertname="CephHealthError"#,
        r#"alertname=CephHealthError""#,
        r#"alertname=="x""#,
        r#"alertname="x" severity="critical""#,
        r#"alertname="x\""#,
        r#"alertname=~"Ceph(.*""#,
        r#"1alertname="x""#,
    ] {
        // A single-quoted YAML scalar: its quotes doubled.
        std::fs::write(
            &config,
            format!(
                "remediation: {{ blockingAlerts: [ '{}' ] }}\n",
                matcher.replace('\'', "''")
            ),
        )
        .unwrap();
        let ours = std::process::Command::new(env!("CARGO_BIN_EXE_hale"))
            .arg("check-config")
            .arg(&config)
            .output()
            .unwrap();
        let theirs = reqwest::Client::new()
            .get(format!("{}/api/v2/alerts", am.url))
            .query(&[("filter", matcher)])
            .send()
            .await
            .unwrap()
            .status();
        assert!(
            theirs == 200 || theirs == 400,
            "{matcher}: Alertmanager answered {theirs}"
        );
        assert_eq!(
            ours.status.success(),
            theirs == 200,
            "{matcher}: Alertmanager answered {theirs}; check-config said {}",
            String::from_utf8_lossy(&ours.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blocking_alert_holds_every_admission_until_it_resolves() {
    let am = Alertmanager::start(None).await;
    let ceph = alert(
        &[("alertname", "CephHealthError"), ("severity", "critical")],
        "HEALTH_ERR",
    );
    am.fire(&[watchdog(), beat("n1"), ceph.clone()]).await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), PASSWORD);
    // A BMC nobody answers for: the flow gets as far as the test needs.
    let extra = format!(
        "nodeHealth: {{ mode: cordon, maxUnavailablePercent: 100 }}\n\
         bmc: {{ credentialsFile: {} }}\n\
         remediation: {{ blockingAlerts: [ {{ alertname: CephHealthError }} ] }}\n\
         inventory: [ {{ id: n1, bmc: {{ address: 'ipmi://127.0.0.1:{}' }} }} ]\n",
        creds.display(),
        free_port()
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    am.fire(&[uptime("n1", "P3")]).await;
    let list = eventually(
        "n1 queued, held by the blocking alert",
        Duration::from_secs(60),
        || async {
            let out = hale.cli(&["remediation", "list", "-o", "json"]);
            let v: Value = serde_json::from_slice(&out.stdout).ok()?;
            let blocked = v["blocked"].to_string();
            (v["queued"][0]["node"] == "n1" && blocked.contains("CephHealthError")).then_some(v)
        },
    )
    .await;
    assert_eq!(list["inFlight"], json!([]));
    let table = hale.cli(&["remediation", "list"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("Blocked: blocking alert CephHealthError fires"),
        "{table}"
    );
    assert!(of_type(&history(&hale, "n1").await, "REMEDIATION_STARTED").is_empty());
    am.resolve(&[ceph]).await;
    wait_event(&hale, "n1", "REMEDIATION_STARTED", Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rack_gone_silent_is_not_fenced_beyond_max_percent() {
    let names: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let sushy = Arc::new(Sushy::start(&refs, PASSWORD).await);
    let am = Arc::new(Alertmanager::start(None).await);
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), PASSWORD);
    let inventory: String = refs
        .iter()
        .map(|n| {
            format!(
                "  - {{ id: {n}, bmc: {{ address: '{}' }} }}\n",
                sushy.address(n)
            )
        })
        .collect();
    let extra = format!(
        "nodeHealth: {{ mode: cordon }}\n\
         bmc: {{ credentialsFile: {}, gracefulTimeout: 30s, timeout: 5s }}\n\
         fencing: {{ after: 10s, maxPercent: 10 }}\n\
         inventory:\n{inventory}",
        creds.display()
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    let machines = Machines::start(am.clone(), sushy.clone(), &refs, Vec::new()).await;
    hale.wait_node("reported", "n9", |n| n["score"] == 100)
        .await;
    let rack = ["n0", "n1", "n2", "n3", "n4"];
    machines.cut(&am, &rack).await;
    // One fenced (10 % of 10), the four others held back, each said once.
    let fenced = eventually("one node fenced", Duration::from_secs(120), || async {
        for n in rack {
            if !of_type(&history(&hale, n).await, "NODE_FENCED").is_empty() {
                return Some(n);
            }
        }
        None
    })
    .await;
    for n in rack.iter().filter(|n| **n != fenced) {
        let e = wait_event(&hale, n, "POLICY_HALTED", Duration::from_secs(30)).await;
        assert_eq!(e["guardrail"], "fencing.maxPercent");
    }
    // The fenced one was powered off (confirmed) and on again; it stays counted
    // while it does not report, so no other is fenced.
    eventually(
        "the fenced machine back on",
        Duration::from_secs(60),
        || async {
            (sushy.power(fenced).await == "On" && machines.offs(fenced) == 1).then_some(())
        },
    )
    .await;
    hale.after_polls(3.0).await;
    for n in rack.iter().filter(|n| **n != fenced) {
        let events = history(&hale, n).await;
        assert!(
            of_type(&events, "REMEDIATION_STARTED").is_empty(),
            "{n} not fenced"
        );
        assert_eq!(of_type(&events, "POLICY_HALTED").len(), 1, "{n}: said once");
        assert_eq!(machines.offs(n), 0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_not_ready_kubernetes_node_is_fenced_with_the_out_of_service_taint() {
    let sushy = Arc::new(Sushy::start(&["k1", "k2"], PASSWORD).await);
    let mut k1 = ready_node("k1", json!({}));
    k1["metadata"]["annotations"] = json!({"hale.dev/bmc-address": sushy.address("k1")});
    let k2 = ready_node("k2", json!({}));
    let fake = FakeApi::start(vec![k1.clone(), k2]).await;
    let am = Arc::new(Alertmanager::start(None).await);
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), PASSWORD);
    let config = kubeconfig(dir.path(), &fake.url);
    let extra = format!(
        "nodeHealth: {{ mode: cordon }}\n\
         bmc: {{ credentialsFile: {}, gracefulTimeout: 30s, timeout: 5s, insecure: true }}\n\
         fencing: {{ after: 5s, maxPercent: 50 }}\n\
         orchestrator: {{ kind: kubernetes, kubeconfig: {} }}\n",
        creds.display(),
        config.display()
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    let machines = Machines::start(am.clone(), sushy.clone(), &["k1", "k2"], Vec::new()).await;
    hale.wait_node("reported", "k1", |n| n["score"] == 100)
        .await;
    // k1 hangs: silent, and the kubelet stops posting Ready.
    machines.cut(&am, &["k1"]).await;
    let mut hung = fake.node("k1");
    hung["status"]["conditions"] =
        json!([{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]);
    fake.put(hung);
    let fenced = wait_event(&hale, "k1", "NODE_FENCED", Duration::from_secs(90)).await;
    assert_eq!(fenced["phase"], "fenced");
    let taints = |n: &Value| -> Vec<String> {
        n["spec"]["taints"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| {
                        format!(
                            "{}={}:{}",
                            t["key"].as_str().unwrap(),
                            t["value"].as_str().unwrap_or(""),
                            t["effect"].as_str().unwrap()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        taints(&fake.node("k1"))
            .contains(&"node.kubernetes.io/out-of-service=nodeshutdown:NoExecute".to_string()),
        "{}",
        fake.node("k1")
    );
    // The machine itself went off (the simulation sees it a moment later).
    eventually("k1 seen off", Duration::from_secs(30), || async {
        (machines.offs("k1") == 1).then_some(())
    })
    .await;
    // It boots and reports again, the kubelet says Ready: the taint goes.
    machines.state.lock().unwrap().get_mut("k1").unwrap().cut = false;
    eventually("k1 on again", Duration::from_secs(60), || async {
        (sushy.power("k1").await == "On").then_some(())
    })
    .await;
    am.fire(&[beat("k1")]).await;
    let mut back = fake.node("k1");
    back["status"]["conditions"] =
        json!([{"type": "Ready", "status": "True", "reason": "KubeletReady"}]);
    fake.put(back);
    eventually(
        "the out-of-service taint removed",
        Duration::from_secs(60),
        || async { taints(&fake.node("k1")).is_empty().then_some(()) },
    )
    .await;
    let restored: Vec<Value> = of_type(&history(&hale, "k1").await, "NODE_FENCED")
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(restored.last().unwrap()["phase"], "restored");
    assert!(of_type(&history(&hale, "k2").await, "NODE_FENCED").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_condition_that_outlives_the_reboot_fails_at_verify_and_stays_cordoned() {
    let sushy = Arc::new(Sushy::start(&["n1"], PASSWORD).await);
    let am = Arc::new(Alertmanager::start(None).await);
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), PASSWORD);
    let extra = format!(
        "nodeHealth: {{ mode: cordon, maxUnavailablePercent: 100 }}\n\
         bmc: {{ credentialsFile: {}, gracefulTimeout: 30s, timeout: 5s }}\n\
         remediation: {{ verifyTimeout: 10s }}\n\
         inventory: [ {{ id: n1, bmc: {{ address: '{}' }} }} ]\n",
        creds.display(),
        sushy.address("n1"),
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    // The machine does not end this alert when it reboots: the fault outlives it.
    let machines = Machines::start(am.clone(), sushy.clone(), &["n1"], Vec::new()).await;
    am.fire(&[uptime("n1", "P3")]).await;
    let failed = wait_event(&hale, "n1", "REMEDIATION_FAILED", Duration::from_secs(180)).await;
    assert_eq!(failed["step"], "verify");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("uptime_too_high still raised"),
        "{failed}"
    );
    assert_eq!(machines.offs("n1"), 1);
    let node = hale.node("n1").await.unwrap();
    assert_eq!(node["status"], "Cordoned");
    assert!(node.get("remediation").is_none());
    assert!(of_type(&history(&hale, "n1").await, "NODE_UNCORDONED").is_empty());
    let text = hale.metrics().await;
    assert_eq!(
        metric(
            &text,
            "hale_remediations_total",
            &[("action", "reboot"), ("result", "failed")]
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kubernetes_node_is_cordoned_drained_through_evictions_rebooted_and_put_back() {
    let sushy = Arc::new(Sushy::start(&["k1", "k2"], PASSWORD).await);
    let mut k1 = ready_node("k1", json!({}));
    k1["metadata"]["annotations"] = json!({"hale.dev/bmc-address": sushy.address("k1")});
    let fake = FakeApi::start(vec![k1, ready_node("k2", json!({}))]).await;
    fake.set_grace_scale(0.3);
    fake.put_pod(crate::kube_fake::pod(
        "shop",
        "web-1",
        "k1",
        Some(("ReplicaSet", "web-rs")),
        json!({}),
    ));
    fake.put_object(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-rs", "namespace": "shop"}}));
    let am = Arc::new(Alertmanager::start(None).await);
    am.fire(&[watchdog()]).await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), PASSWORD);
    let config = kubeconfig(dir.path(), &fake.url);
    let extra = format!(
        "nodeHealth: {{ mode: cordon, maxUnavailablePercent: 50 }}\n\
         bmc: {{ credentialsFile: {}, gracefulTimeout: 30s, timeout: 5s, insecure: true }}\n\
         remediation: {{ returnTimeout: 3m, verifyTimeout: 20s }}\n\
         orchestrator: {{ kind: kubernetes, kubeconfig: {} }}\n",
        creds.display(),
        config.display()
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    let machines = Machines::start(am.clone(), sushy.clone(), &["k1", "k2"], Vec::new()).await;
    hale.wait_node("reported", "k1", |n| n["score"] == 100)
        .await;
    hale.cli_ok(&["node", "reboot", "k1", "--reason", "kernel 6.8"]);
    // Cordoned on the Node, its pod evicted through the Eviction API.
    eventually("k1 cordoned", Duration::from_secs(30), || async {
        (fake.node("k1")["spec"]["unschedulable"] == true).then_some(())
    })
    .await;
    let evicted = eventually("web-1 evicted", Duration::from_secs(30), || async {
        let e = fake.evicted();
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(evicted[0]["metadata"]["name"], "web-1");
    // The pod runs its grace period (30 s, scaled to 9): nothing reboots the node
    // under it, the flow's drain waits until it has terminated.
    eventually("web-1 terminated", Duration::from_secs(60), || async {
        let step = hale.node("k1").await.unwrap()["remediation"]["step"].clone();
        let gone = fake.object("Pod", Some("shop"), "web-1").is_none();
        let offs = machines.offs("k1");
        assert!(
            gone || (!["reboot", "return", "verify", "uncordon"]
                .contains(&step.as_str().unwrap_or_default())
                && offs == 0),
            "rebooted under a terminating pod: step {step}, powered off {offs} time(s)"
        );
        gone.then_some(())
    })
    .await;
    wait_event(
        &hale,
        "k1",
        "REMEDIATION_SUCCEEDED",
        Duration::from_secs(180),
    )
    .await;
    assert_eq!(machines.offs("k1"), 1);
    assert_eq!(machines.offs("k2"), 0);
    // Put back in service on the Node, hale's cordon record gone with it.
    let node = fake.node("k1");
    assert_ne!(node["spec"]["unschedulable"], true, "{node}");
    assert!(
        node["metadata"]["annotations"]
            .get("hale.dev/cordoned-by")
            .is_none(),
        "{node}"
    );
    let drained = of_type(&history(&hale, "k1").await, "NODE_DRAINED")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(drained[0]["by"], "hale");
    assert_eq!(drained[0]["moved"], 1);
}

/// A machine someone switched off outside hale (a repair, a PSU swap) is left
/// off by a reboot hale's policy starts: the flow fails at its reboot, saying
/// why, and nothing is sent to the BMC — a reboot would only have powered it on.
/// An operator's `hale node reboot` of the same machine starts it.
#[tokio::test(flavor = "multi_thread")]
async fn a_reboot_the_policy_started_leaves_a_machine_switched_off_outside_hale_off() {
    let ipmi = IpmiSim::start("n1", PASSWORD).await;
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), beat("n1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), PASSWORD);
    let extra = format!(
        "nodeHealth: {{ mode: cordon, maxUnavailablePercent: 100 }}\n\
         bmc: {{ credentialsFile: {}, cipherSuite: 3, gracefulTimeout: 20s, timeout: 5s }}\n\
         remediation: {{ returnTimeout: 3m, verifyTimeout: 20s }}\n\
         inventory:\n\
         - {{ id: n1, bmc: {{ address: '{}' }} }}\n",
        creds.display(),
        ipmi.address(),
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    hale.wait_node("reported", "n1", |n| n["score"] == 100)
        .await;
    // Switched off by hand; its heartbeat stops with it.
    let out = ipmitool(ipmi.port, PASSWORD, &["chassis", "power", "off"]).await;
    assert!(out.status.success(), "{out:?}");
    eventually("chassis off", Duration::from_secs(30), || async {
        (!ipmi.powered()).then_some(())
    })
    .await;
    am.resolve(&[beat("n1")]).await;
    am.fire(&[uptime("n1", "P9")]).await;
    let failed = wait_event(&hale, "n1", "REMEDIATION_FAILED", Duration::from_secs(120)).await;
    assert_eq!(failed["step"], "reboot", "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("switched off outside hale, so it is left off"),
        "{failed}"
    );
    assert!(!ipmi.powered());
    assert_eq!(ipmi.commands(), ["power 0"], "only the operator's off");
    // The operator's own reboot, asked of hale, starts it.
    hale.cli_ok(&["node", "reboot", "n1", "--reason", "back from repair"]);
    eventually("chassis on", Duration::from_secs(60), || async {
        ipmi.powered().then_some(())
    })
    .await;
    assert_eq!(ipmi.commands(), ["power 0", "power 1"]);
}
