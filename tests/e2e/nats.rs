//! The NATS JetStream store against a real three-server JetStream cluster on
//! loopback, with three `hale serve` replicas sharing it and a real Alertmanager
//! they poll: one leader writes and the others follow; a leader killed with
//! `kill -9` is replaced within the lease and its record stands, each event once;
//! one NATS server lost interrupts nothing; every NATS server lost leaves reads
//! answered, actions refused and readiness withdrawn until NATS is back.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;

fn nats_server() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/nats-server");
    if venv.is_file() {
        return venv;
    }
    require("nats-server")
}

/// One server of the cluster; its store directory survives a restart.
struct Server {
    port: u16,
    cluster_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// Three `nats-server`s routed to each other (`--cluster`, `--routes`), JetStream
/// on each; stopped by PID when dropped.
pub struct Cluster {
    servers: Vec<Server>,
    /// The address clients connect on.
    listen: String,
}

impl Cluster {
    pub async fn start() -> Cluster {
        Self::start_on("127.0.0.1").await
    }

    /// Clients served on `listen` (routes stay on loopback).
    pub async fn start_on(listen: &str) -> Cluster {
        let mut cluster = Self::planned(listen);
        cluster.restart_all().await;
        cluster
    }

    /// The cluster's ports and directories, no server started yet.
    fn planned(listen: &str) -> Cluster {
        let servers = (0..3)
            .map(|_| Server {
                port: free_port(),
                cluster_port: free_port(),
                dir: tempfile::tempdir().unwrap(),
                child: None,
            })
            .collect();
        Cluster {
            servers,
            listen: listen.to_string(),
        }
    }

    fn spawn(&mut self, i: usize) {
        let routes: Vec<String> = self
            .servers
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, s)| format!("nats://127.0.0.1:{}", s.cluster_port))
            .collect();
        let listen = self.listen.clone();
        let s = &mut self.servers[i];
        let log = std::fs::File::create(s.dir.path().join("nats.log")).unwrap();
        let child = Command::new(nats_server())
            .args(["-js", "-a", &listen, "-n", &format!("n{i}")])
            .args(["-p", &s.port.to_string()])
            .args(["--cluster", &format!("nats://127.0.0.1:{}", s.cluster_port)])
            .args(["--routes", &routes.join(","), "--cluster_name", "hale"])
            // Clients keep to the URLs they were given: a partition that cuts
            // one address off is not healed by another the servers advertise.
            .arg("--no_advertise=true")
            .arg("-sd")
            .arg(s.dir.path().join("js"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        s.child = Some(child);
    }

    /// Wait until JetStream answers a request through the cluster (its meta
    /// leader is elected).
    async fn wait_ready(&self) {
        let urls = self.urls();
        eventually("JetStream ready", Duration::from_secs(30), || {
            let urls = urls.clone();
            async move {
                let addrs: Vec<async_nats::ServerAddr> =
                    urls.split(',').map(|u| u.parse().unwrap()).collect();
                let client = async_nats::connect(addrs).await.ok()?;
                async_nats::jetstream::new(client)
                    .query_account()
                    .await
                    .ok()
                    .map(|_| ())
            }
        })
        .await;
    }

    pub fn urls(&self) -> String {
        self.urls_at("127.0.0.1")
    }

    /// The servers' URLs at `host` (one of the addresses they listen on).
    pub fn urls_at(&self, host: &str) -> String {
        self.servers
            .iter()
            .map(|s| format!("nats://{host}:{}", s.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.servers[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub async fn restart_all(&mut self) {
        for i in 0..3 {
            if self.servers[i].child.is_none() {
                self.spawn(i);
            }
        }
        self.wait_ready().await;
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill(i);
        }
    }
}

/// A replica's configuration: the shared store on `urls`, the default 20 s lease
/// (longer than JetStream's own leader election after a server is lost).
fn replica_config(dir: &Path, port: u16, am_url: &str, urls: &str, extra: &str) -> String {
    let urls: Vec<String> = urls.split(',').map(|u| format!("'{u}'")).collect();
    let store = format!(
        "store: {{ kind: nats, nats: {{ urls: [{}], replicas: 3 }} }}\n",
        urls.join(", ")
    );
    config(dir, port, am_url, "pollInterval: 1s", extra).replace(
        &format!("store: {{ path: {} }}\n", dir.join("data").display()),
        &store,
    )
}

async fn start_replicas(
    n: usize,
    am: &Alertmanager,
    urls: &str,
    extra: &str,
) -> (Vec<tempfile::TempDir>, Vec<Hale>) {
    start_replicas_leasing(n, am, urls, extra, "20s").await
}

/// [`start_replicas`] with a lease of `lease`.
async fn start_replicas_leasing(
    n: usize,
    am: &Alertmanager,
    urls: &str,
    extra: &str,
    lease: &str,
) -> (Vec<tempfile::TempDir>, Vec<Hale>) {
    let mut dirs = Vec::new();
    let mut replicas = Vec::new();
    for _ in 0..n {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let cfg = replica_config(dir.path(), port, &am.url, urls, extra).replace(
            "replicas: 3 }",
            &format!("replicas: 3, leaseDuration: {lease} }}"),
        );
        replicas.push(Hale::start_with(dir.path(), port, &cfg).await);
        dirs.push(dir);
    }
    (dirs, replicas)
}

/// `hale_leader` of a replica, `None` when it does not answer.
async fn leads(h: &Hale) -> Option<bool> {
    let text = reqwest::get(format!("{}/metrics", h.url))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    metric(&text, "hale_leader", &[]).map(|v| v == 1.0)
}

/// Wait until exactly one of `alive` leads; its index.
async fn one_leader(replicas: &[Hale], alive: &[usize], limit: Duration) -> usize {
    eventually("one leader", limit, || async {
        let mut leading = Vec::new();
        for &i in alive {
            if leads(&replicas[i]).await? {
                leading.push(i);
            }
        }
        (leading.len() == 1).then(|| leading[0])
    })
    .await
}

async fn event_types(h: &Hale, node: &str) -> Vec<String> {
    types(&h.events(node, "pageSize=500").await)
}

async fn status(url: &str) -> Option<u16> {
    Some(reqwest::get(url).await.ok()?.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_share_one_history_and_fail_over_without_loss_or_repeats() {
    let mut cluster = Cluster::start().await;
    let am = Alertmanager::start(None).await;
    let mut steady = vec![watchdog(), heartbeat("n1"), smart_failing("n1")];
    am.fire(&steady).await;
    let (_dirs, mut replicas) = start_replicas(3, &am, &cluster.urls(), "").await;
    let all = [0, 1, 2];
    let leader = one_leader(&replicas, &all, Duration::from_secs(20)).await;

    // Followers serve what the leader wrote.
    for h in &replicas {
        h.wait_node("n1's fault, through the shared store", "n1", |n| {
            has_condition(n, "disk_degraded")
        })
        .await;
    }
    let follower = all.iter().copied().find(|&i| i != leader).unwrap();
    // A follower asks Alertmanager nothing: it shows the leader's view of it, so
    // HaleAlertSourceDown stays quiet for a healthy follower.
    for h in &replicas {
        let up = metric(&h.metrics().await, "hale_alert_source_up", &[]);
        assert_eq!(up, Some(1.0), "every replica reports the source up");
        let alerts: Value = reqwest::get(format!("{}/api/v1/alerts", h.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(alerts["source"]["up"], true, "{alerts}");
    }
    let refused = reqwest::Client::new()
        .post(format!("{}/cordon", replicas[follower].node_url("n1")))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"reason": "test"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503, "a follower does not act");
    let delivered = replicas[follower]
        .deliver(&delivery(&[(&smart_failing("n9"), "firing")]))
        .await;
    assert_eq!(delivered, 503, "a follower leaves ingest to the leader");

    // A burst of new faults; the leader is killed in the middle of it.
    let burst: Vec<String> = (0..12).map(|i| format!("b{i}")).collect();
    let mut killed = Instant::now();
    for (i, node) in burst.iter().enumerate() {
        steady.push(smart_failing(node));
        am.fire(&steady).await;
        if i == 5 {
            replicas[leader].kill9();
            killed = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let alive: Vec<usize> = all.iter().copied().filter(|&i| i != leader).collect();
    let next = one_leader(&replicas, &alive, Duration::from_secs(40)).await;
    let failover = killed.elapsed();
    println!("failover: the leader killed, another leads {failover:?} later");
    assert!(
        failover < Duration::from_secs(30),
        "a new leader within the lease (20 s) and a second's look: {failover:?}"
    );
    let new = &replicas[next];
    for node in &burst {
        new.wait_node(
            "every fault Alertmanager took, after the failover",
            node,
            |n| has_condition(n, "disk_degraded"),
        )
        .await;
    }
    // Each raise recorded once, whichever leader saw it first.
    for node in burst.iter().chain(std::iter::once(&"n1".to_string())) {
        let types = event_types(new, node).await;
        let raised = types.iter().filter(|t| *t == "CONDITION_RAISED").count();
        assert_eq!(raised, 1, "{node}: {types:?}");
    }
    let other = alive.iter().copied().find(|&i| i != next).unwrap();
    for node in &burst {
        replicas[other]
            .wait_node("the remaining follower follows the new leader", node, |n| {
                has_condition(n, "disk_degraded")
            })
            .await;
    }
    // A follower measures the shared store too (every 5 s), as the leader does.
    eventually(
        "the follower's hale_store_bytes_used",
        Duration::from_secs(15),
        || async {
            let text = reqwest::get(format!("{}/metrics", replicas[other].url))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            (metric(&text, "hale_store_bytes_used", &[])? > 0.0).then_some(())
        },
    )
    .await;

    // One NATS server lost (JetStream re-elects the leaders of the streams it
    // led, 4-9 s): the leader keeps its lease throughout and the new fault is
    // taken in and followed.
    cluster.kill(0);
    steady.push(smart_failing("c1"));
    am.fire(&steady).await;
    eventually(
        "a fault taken in with a server down, by the same leader",
        Duration::from_secs(40),
        || async {
            assert_eq!(leads(new).await, Some(true), "the leader kept leading");
            for &i in &alive {
                let n = replicas[i].node("c1").await?;
                has_condition(&n, "disk_degraded").then_some(())?;
            }
            Some(())
        },
    )
    .await;

    // Every server lost: reads answered, readiness withdrawn, no leader.
    cluster.kill(1);
    cluster.kill(2);
    eventually(
        "no replica leads without NATS",
        Duration::from_secs(30),
        || async {
            let mut any = false;
            for &i in &alive {
                any |= leads(&replicas[i]).await?;
            }
            (!any).then_some(())
        },
    )
    .await;
    for &i in &alive {
        let h = &replicas[i];
        eventually(
            "not ready without NATS",
            Duration::from_secs(30),
            || async { (status(&format!("{}/readyz", h.url)).await? == 503).then_some(()) },
        )
        .await;
        // What HaleNotReady reads: the source may still show up, as last written.
        assert_eq!(metric(&h.metrics().await, "hale_ready", &[]), Some(0.0));
        let node: Option<Value> = h.node("c1").await;
        assert!(
            node.is_some_and(|n| has_condition(&n, "disk_degraded")),
            "reads still answered"
        );
    }
    // The leader says its term ended; a follower's refusal of a verb names no
    // leader once the lease has not answered for a lease (the one it last saw
    // cannot be leading any more).
    eventually(
        "the leader says it stopped leading",
        Duration::from_secs(30),
        || async { new.log().contains("no longer leading").then_some(()) },
    )
    .await;
    eventually(
        "a refusal naming no leader",
        Duration::from_secs(40),
        || async {
            let r = reqwest::Client::new()
                .post(format!("{}/cordon", replicas[other].node_url("n1")))
                .bearer_auth(TOKEN)
                .json(&serde_json::json!({"reason": "test"}))
                .send()
                .await
                .ok()?;
            (r.status() == 503 && r.text().await.ok()?.contains("no leader is elected yet"))
                .then_some(())
        },
    )
    .await;
    // The history lives in NATS alone: a read of it says NATS is away, soon,
    // as a 503 to retry after.
    let asked = Instant::now();
    let r = reqwest::get(format!("{}/events", replicas[alive[0]].node_url("c1")))
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "{}", r.text().await.unwrap_or_default());
    assert!(
        asked.elapsed() < Duration::from_secs(12),
        "{:?}",
        asked.elapsed()
    );

    // NATS back: a leader again, ready, the record whole.
    cluster.restart_all().await;
    let back = one_leader(&replicas, &alive, Duration::from_secs(30)).await;
    let h = &replicas[back];
    eventually("ready again", Duration::from_secs(30), || async {
        (status(&format!("{}/readyz", h.url)).await? == 200).then_some(())
    })
    .await;
    assert_eq!(metric(&h.metrics().await, "hale_ready", &[]), Some(1.0));
    // Each condition raised once: nothing of the record lost or written twice. A
    // leader back after an outage longer than staleAfter (nobody could read
    // Alertmanager meanwhile) may mark the fleet telemetry_stale until its first
    // poll lands: that is the outage said, not a repeat.
    for node in burst
        .iter()
        .chain(["n1".to_string(), "c1".to_string()].iter())
    {
        let events = h.events(node, "pageSize=500").await;
        let raised = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "CONDITION_RAISED" && e["condition"] != "telemetry_stale")
            .count();
        assert_eq!(raised, 1, "{node} after the outage: {:?}", types(&events));
    }
}

/// NATS coming up after hale, as when a chart and its NATS are installed
/// together: `hale serve` waits for its store, saying why, rather than exiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_before_nats_waits_for_it() {
    let mut cluster = Cluster::planned("127.0.0.1");
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), smart_failing("w0")]).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = replica_config(dir.path(), port, &am.url, &cluster.urls(), "");
    let log = dir.path().join("hale.log");
    // The three servers start and elect their leaders meanwhile; hale's tries
    // come every few seconds.
    let limit = Duration::from_secs(75);
    let (hale, ()) = tokio::join!(Hale::start_within(dir.path(), port, &cfg, limit), async {
        eventually(
            "hale saying it waits for its store",
            Duration::from_secs(15),
            || async {
                std::fs::read_to_string(&log)
                    .ok()?
                    .contains("the store cannot be opened yet")
                    .then_some(())
            },
        )
        .await;
        cluster.restart_all().await;
    });
    hale.wait_node("raised", "w0", |n| has_condition(n, "disk_degraded"))
        .await;
}

/// `hale store copy` moves an installation from SQLite to NATS and back: the
/// nodes, their conditions and every event, under the same history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_copy_moves_an_installation_between_kinds() {
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut h = Hale::webhook_only(dir.path(), "").await;
    let fault = delivery(&[
        (&smart_failing("n1"), "firing"),
        (&smart_failing("n2"), "firing"),
    ]);
    assert_eq!(h.deliver(&fault).await, 200);
    h.wait_node("n1 raised", "n1", |n| has_condition(n, "disk_degraded"))
        .await;
    let before = event_types(&h, "n1").await;
    h.kill9();

    let sqlite = format!("sqlite:{}", dir.path().join("data").display());
    let nats = cluster.urls();
    let copy_with = |from: &str, to: &str, settings: [&str; 4]| {
        Command::new(env!("CARGO_BIN_EXE_hale"))
            .args(["store", "copy", "--from", from, "--to", to])
            .args(settings)
            .output()
            .unwrap()
    };
    let copy = |from: &str, to: &str| {
        copy_with(
            from,
            to,
            ["--replicas", "3", "--event-retention-days", "90"],
        )
    };
    let out = copy(&sqlite, &nats);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("copied 2 nodes"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A store that holds records is not copied into, nor given the refused
    // copy's settings.
    let live = stream_settings(&nats).await;
    let again = copy_with(
        &sqlite,
        &nats,
        ["--replicas", "1", "--event-retention-days", "2"],
    );
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds"));
    assert_eq!(stream_settings(&nats).await, live, "refused, untouched");

    // A backtest of a configuration on the NATS store reads it as it is: the
    // candidate's copies and retention are not the live store's.
    assert_eq!(live.1, 3, "as copied: {live:?}");
    let candidate = dir.path().join("candidate.yaml");
    let urls: Vec<String> = nats.split(',').map(|u| format!("'{u}'")).collect();
    std::fs::write(
        &candidate,
        format!(
            "store: {{ kind: nats, eventRetentionDays: 1, nats: {{ urls: [{}], replicas: 1 }} }}\n",
            urls.join(", ")
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["policy", "backtest", "-o", "json", "--config"])
        .arg(&candidate)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.is_object(), "{report}");
    assert_eq!(
        stream_settings(&nats).await,
        live,
        "the live store untouched"
    );
    // Nor does copying out of it change it; a cluster it holds no store of is
    // refused by name, and nothing is made for it.
    let elsewhere = tempfile::tempdir().unwrap();
    let none = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["store", "copy", "--from", &nats, "--cluster", "dc9", "--to"])
        .arg(format!(
            "sqlite:{}",
            elsewhere.path().join("data").display()
        ))
        .output()
        .unwrap();
    assert!(!none.status.success());
    let said = String::from_utf8_lossy(&none.stderr);
    assert!(said.contains("no hale store of cluster dc9"), "{said}");

    // A store a replica leads on is being written: not copied from (a copy
    // would catch it between a change and its events). Stopped, it gives the
    // lease up and the copy goes on.
    let am = Alertmanager::start(None).await;
    let (_dirs, mut running) = start_replicas(1, &am, &nats, "").await;
    eventually("the replica leads", Duration::from_secs(30), || async {
        leads(&running[0]).await.filter(|l| *l)
    })
    .await;
    let busy = tempfile::tempdir().unwrap();
    let refused = copy_with(
        &nats,
        &format!("sqlite:{}", busy.path().join("data").display()),
        ["--replicas", "1", "--event-retention-days", "7"],
    );
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("is being written") && said.contains("stop every replica"),
        "{said}"
    );
    running[0].stop();

    // Back into a new SQLite store, served by hale as it was.
    let back = tempfile::tempdir().unwrap();
    let out = copy_with(
        &nats,
        &format!("sqlite:{}", back.path().join("data").display()),
        ["--replicas", "1", "--event-retention-days", "7"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = free_port();
    let h = Hale::start_with(
        back.path(),
        port,
        &webhook_only_config(back.path(), port, ""),
    )
    .await;
    let n1 = h.node("n1").await.expect("n1 copied");
    assert!(has_condition(&n1, "disk_degraded"));
    assert_eq!(event_types(&h, "n1").await, before, "the same history");
    assert!(h.node("n2").await.is_some());
    assert_eq!(stream_settings(&nats).await, live, "copied from, untouched");
}

/// The event stream of cluster `default`: its max age and copies.
async fn stream_settings(urls: &str) -> (Duration, usize) {
    let addrs: Vec<async_nats::ServerAddr> = urls.split(',').map(|u| u.parse().unwrap()).collect();
    let js = async_nats::jetstream::new(async_nats::connect(addrs).await.unwrap());
    let name = hale::store::nats::Names::of("default").stream;
    let info = js
        .get_stream(name)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    (info.config.max_age, info.config.num_replicas)
}

/// Webhooks on the shared store go out from a durable consumer: the leader
/// killed while retrying a delivery, the next one delivers it again (the same
/// `X-Hale-Event-Id`) and everything after it; no stored event is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhooks_resume_on_the_next_leader_with_nothing_skipped() {
    let cluster = Cluster::start().await;
    let am = Alertmanager::start(None).await;
    let receiver = Receiver::start().await;
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "s3cret\n").unwrap();
    let hooks = format!(
        "nodeEventWebhooks:\n  - url: {}/hook\n    secretFile: {}\n    events: [CONDITION_RAISED]\n    maxAttempts: 10\n",
        receiver.url,
        secret.path().display()
    );
    let mut steady = vec![watchdog()];
    am.fire(&steady).await;
    let (_dirs, mut replicas) = start_replicas(2, &am, &cluster.urls(), &hooks).await;
    let leader = one_leader(&replicas, &[0, 1], Duration::from_secs(20)).await;
    let ids = |r: &Receiver| -> std::collections::BTreeSet<String> {
        r.got("/hook")
            .iter()
            .map(|g| g.header("X-Hale-Event-Id").to_string())
            .collect()
    };
    for i in 0..3 {
        steady.push(smart_failing(&format!("f{i}")));
    }
    am.fire(&steady).await;
    eventually(
        "the first three delivered",
        Duration::from_secs(30),
        || async { (ids(&receiver).len() == 3).then_some(()) },
    )
    .await;

    // The next delivery fails at first; the leader dies while retrying it.
    receiver.fail_first("/hook", 3);
    steady.push(smart_failing("f3"));
    am.fire(&steady).await;
    eventually("f3 being retried", Duration::from_secs(30), || async {
        (receiver.got("/hook").len() >= 5).then_some(())
    })
    .await;
    replicas[leader].kill9();
    for i in 4..7 {
        steady.push(smart_failing(&format!("f{i}")));
    }
    am.fire(&steady).await;

    let next = 1 - leader;
    one_leader(&replicas, &[next], Duration::from_secs(40)).await;
    let h = &replicas[next];
    let mut stored = std::collections::BTreeSet::new();
    for i in 0..7 {
        let node = format!("f{i}");
        h.wait_node("raised", &node, |n| has_condition(n, "disk_degraded"))
            .await;
        let page = h.events(&node, "pageSize=100&type=CONDITION_RAISED").await;
        for e in page["events"].as_array().unwrap() {
            stored.insert(e["id"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(stored.len(), 7, "one raise per node: {stored:?}");
    eventually(
        "every stored event delivered",
        Duration::from_secs(60),
        || async { ids(&receiver).is_superset(&stored).then_some(()) },
    )
    .await;
    assert_eq!(ids(&receiver), stored, "no id that the store does not hold");
}

fn ip(args: &[&str]) {
    let out = Command::new(require("ip")).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace of the test's with a veth pair to the host: the host
/// side holds `.1` (the way back for HTTP) and `.3` (where the NATS servers are
/// reached from inside); the namespace `.2`. Cutting `.3` off inside the
/// namespace partitions a hale there from NATS while the test still reads it.
struct Netns {
    name: String,
    host_veth: String,
    net: String,
}

impl Netns {
    fn create() -> Netns {
        let id = std::process::id() % 200;
        let name = format!("hale-part-{}", std::process::id());
        let host_veth = format!("hp{id}h");
        let inner = format!("hp{id}n");
        let net = format!("10.213.{id}");
        ip(&["netns", "add", &name]);
        let ns = Netns {
            name,
            host_veth,
            net,
        };
        ip(&[
            "link",
            "add",
            &ns.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            &inner,
        ]);
        ip(&["link", "set", &inner, "netns", &ns.name]);
        ip(&[
            "addr",
            "add",
            &format!("{}.1/24", ns.net),
            "dev",
            &ns.host_veth,
        ]);
        ip(&[
            "addr",
            "add",
            &format!("{}.3/24", ns.net),
            "dev",
            &ns.host_veth,
        ]);
        ip(&["link", "set", &ns.host_veth, "up"]);
        let exec = |args: &[&str]| ip(&[&["netns", "exec", &ns.name, "ip"], args].concat());
        exec(&["addr", "add", &format!("{}.2/24", ns.net), "dev", &inner]);
        exec(&["link", "set", &inner, "up"]);
        exec(&["link", "set", "lo", "up"]);
        ns
    }

    /// Drop everything the namespace sends to the NATS address (`cut`) or stop.
    fn partition(&self, cut: bool) {
        let verb = if cut { "add" } else { "del" };
        ip(&[
            "netns",
            "exec",
            &self.name,
            "ip",
            "route",
            verb,
            "blackhole",
            &format!("{}.3/32", self.net),
        ]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        // Usually gone with the namespace already.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_veth])
            .stderr(Stdio::null())
            .status();
    }
}

/// A leader cut off from NATS (its own network namespace, the route to the NATS
/// servers blackholed) stops leading before its lease ends, while the other
/// replica takes over only once it has; nothing the cut-off leader took in lands
/// twice, before or after the partition heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_off_from_nats_stops_before_another_starts() {
    let ns = Netns::create();
    let cluster = Cluster::start_on("0.0.0.0").await;
    let lease = "store: { kind: nats, nats: { urls: [URLS], replicas: 3, leaseDuration: 6s } }";
    let replica = |dir: &Path, listen: &str, port: u16, host: &str| {
        let urls: Vec<String> = cluster
            .urls_at(host)
            .split(',')
            .map(|u| format!("'{u}'"))
            .collect();
        webhook_only_config(dir, port, "")
            .replace(
                &format!("store: {{ path: {} }}", dir.join("data").display()),
                &lease.replace("URLS", &urls.join(", ")),
            )
            .replace("listen: 127.0.0.1:", &format!("listen: {listen}:"))
    };
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let inside = format!("{}.2", ns.net);
    let a_port = free_port();
    let a_cfg = replica(a_dir.path(), &inside, a_port, &format!("{}.3", ns.net));
    let a = Hale::start_under(
        a_dir.path(),
        &format!("http://{inside}:{a_port}"),
        &a_cfg,
        &["ip", "netns", "exec", &ns.name],
    )
    .await;
    eventually(
        "the replica in the namespace leads",
        Duration::from_secs(20),
        || async { leads(&a).await?.then_some(()) },
    )
    .await;
    let b_port = free_port();
    let b = Hale::start_with(
        b_dir.path(),
        b_port,
        &replica(b_dir.path(), "127.0.0.1", b_port, "127.0.0.1"),
    )
    .await;
    assert_eq!(
        a.deliver(&delivery(&[(&smart_failing("f1"), "firing")]))
            .await,
        200
    );
    b.wait_node("the follower follows", "f1", |n| {
        has_condition(n, "disk_degraded")
    })
    .await;
    // Without polling, a replica taking the lead asks Alertmanager nothing either.
    let asked = |result| {
        let text = a.metrics();
        async move {
            metric(
                &text.await,
                "hale_alertmanager_polls_total",
                &[("result", result)],
            )
            .unwrap_or(0.0)
        }
    };
    assert_eq!(asked("unreachable").await + asked("trusted").await, 0.0);

    ns.partition(true);
    let cut = Instant::now();
    // Still leading for a moment: it takes the delivery in, cannot write it,
    // and says so (Alertmanager sends it again, to whoever leads then).
    let taken = a
        .deliver(&delivery(&[(&smart_failing("lost"), "firing")]))
        .await;
    assert_eq!(
        taken, 503,
        "not answered as kept by a leader that cannot write it"
    );
    let a_stopped = eventually(
        "the cut-off leader stops",
        Duration::from_secs(20),
        || async { (!leads(&a).await?).then(|| cut.elapsed()) },
    )
    .await;
    let b_started = eventually("the other takes over", Duration::from_secs(30), || async {
        leads(&b).await?.then(|| cut.elapsed())
    })
    .await;
    assert!(
        a_stopped < b_started,
        "stopped at {a_stopped:?}, the other led at {b_started:?}"
    );
    assert!(
        a_stopped <= Duration::from_secs(6),
        "within the lease: {a_stopped:?}"
    );
    // Cut off, it cannot tell who leads now: it does not send callers to itself.
    let refused = reqwest::Client::new()
        .post(format!("{}/cordon", a.node_url("f1")))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"reason": "test"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    let said: Value = refused.json().await.unwrap();
    assert_eq!(said["error"], "not_leader", "{said}");
    assert!(
        said["detail"]
            .as_str()
            .unwrap()
            .contains("no leader is elected"),
        "{said}"
    );
    // Once it has loaded the store, the new leader takes deliveries in.
    eventually(
        "the new leader ingests",
        Duration::from_secs(10),
        || async {
            let fault = delivery(&[(&smart_failing("f2"), "firing")]);
            (b.deliver(&fault).await == 200).then_some(())
        },
    )
    .await;

    ns.partition(false);
    a.wait_node_within(
        "the old leader follows the new one",
        "f2",
        Duration::from_secs(30),
        |n| has_condition(n, "disk_degraded"),
    )
    .await;
    assert_eq!(leads(&a).await, Some(false));
    // What the cut-off leader took in may land once its buffered write goes
    // through after the heal, or never (dropped when it stopped leading): never twice.
    for h in [&a, &b] {
        for node in ["f1", "f2", "lost"] {
            let r = reqwest::get(format!("{}/events?pageSize=500", h.node_url(node)))
                .await
                .unwrap();
            let raised = if r.status() == 404 {
                0
            } else {
                let page: Value = r.json().await.unwrap();
                page["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|e| e["type"] == "CONDITION_RAISED")
                    .count()
            };
            assert!(raised <= 1, "{node} raised {raised} times");
            if node != "lost" {
                assert_eq!(raised, 1, "{node}");
            }
        }
    }
}

/// Every server of `cluster` stopped (`SIGSTOP`) or let go on (`SIGCONT`): NATS
/// hangs as a full or overloaded JetStream does, answering nothing, without
/// losing what it holds or the leader's key.
fn signal_all(cluster: &Cluster, signal: &str) {
    for s in &cluster.servers {
        let pid = s.child.as_ref().unwrap().id().to_string();
        let done = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(done.success(), "kill {signal} {pid}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_that_leads_again_with_no_other_between_keeps_what_it_could_not_write() {
    let cluster = Cluster::start().await;
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), heartbeat("n1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = replica_config(dir.path(), port, &am.url, &cluster.urls(), "")
        .replace("replicas: 3 }", "replicas: 3, leaseDuration: 30s }");
    let hale = Hale::start_with(dir.path(), port, &cfg).await;
    eventually("the replica leads", Duration::from_secs(20), || async {
        leads(&hale).await?.then_some(())
    })
    .await;
    hale.wait_node("n1 known", "n1", |_| true).await;

    // NATS stops answering; an operator's cordon is taken in but cannot be
    // written (answered 503: not kept yet), and the lease's renewals fail until
    // leadership lapses.
    signal_all(&cluster, "-STOP");
    let cordon = {
        let url = format!("{}/cordon", hale.node_url("n1"));
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(url)
                .bearer_auth(TOKEN)
                .json(&serde_json::json!({"reason": "disk swap"}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    eventually("leadership lapses", Duration::from_secs(30), || async {
        (!leads(&hale).await?).then_some(())
    })
    .await;
    signal_all(&cluster, "-CONT");
    assert_eq!(
        cordon.await.unwrap().ok(),
        Some(503),
        "the cordon was taken in, and not answered as kept while unwritten"
    );
    eventually("leading again", Duration::from_secs(20), || async {
        leads(&hale).await?.then_some(())
    })
    .await;
    // No other replica led in between: the cordon is still this replica's
    // record, and lands in the store (its event is read from there).
    eventually("the cordon written", Duration::from_secs(20), || async {
        let types = event_types(&hale, "n1").await;
        types.iter().any(|t| t == "NODE_CORDONED").then_some(())
    })
    .await;
    let n1 = hale.node("n1").await.unwrap();
    assert_eq!(n1["status"], "Cordoned", "{n1}");
    assert!(
        hale.log()
            .contains("leading again: no other replica held the lease meanwhile"),
        "{}",
        hale.log()
    );
}

/// A leader stopped past its lease (a paused VM, `SIGSTOP`) while one of its
/// actions is under way: on resume it says it no longer leads, and what came of
/// the action is neither recorded nor counted there — the next leader holds the
/// action, does it, and records it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_stopped_past_its_lease_mid_action_leaves_the_action_to_the_next() {
    use crate::fuzzball::{FUZZBALL_TOKEN, FakeFuzzball, fz_node};
    let cluster = Cluster::start().await;
    let fake = FakeFuzzball::start(serde_json::json!([fz_node("fz-1", "c1", "READY", 0)])).await;
    let am = Alertmanager::start(None).await;
    am.fire(&[watchdog(), heartbeat("c1")]).await;
    // A `fuzzball` whose drain (hale's cordon) says it was called, then waits for
    // `go` before it acts.
    let gate = tempfile::tempdir().unwrap();
    let real = fake.cli(gate.path());
    let cli = gate.path().join("gated");
    std::fs::write(
        &cli,
        format!(
            "#!/bin/sh\ncase \"$*\" in *drain*) echo \"$$\" >> {calls}; while [ ! -e {go} ]; do sleep 0.1; done;; esac\nexec {real} \"$@\"\n",
            calls = gate.path().join("calls").display(),
            go = gate.path().join("go").display(),
            real = real.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(gate.path().join("fz-token"), FUZZBALL_TOKEN).unwrap();
    let extra = format!(
        "orchestrator: {{ kind: fuzzball, url: '{}/v4', tokenFile: {}, cli: {}, cliTimeout: 120s }}\n",
        fake.url,
        gate.path().join("fz-token").display(),
        cli.display()
    );
    let (_dirs, replicas) = start_replicas_leasing(2, &am, &cluster.urls(), &extra, "6s").await;
    let leader = one_leader(&replicas, &[0, 1], Duration::from_secs(30)).await;
    let next = 1 - leader;
    replicas[leader]
        .wait_node("c1 known", "c1", |n| n["status"] == "Ready")
        .await;
    replicas[next]
        .wait_node("c1 followed", "c1", |n| n["status"] == "Ready")
        .await;

    // An operator's cordon; the leader's drain is under way when it stops.
    let cordon = reqwest::Client::new()
        .post(format!("{}/cordon", replicas[leader].node_url("c1")))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"reason": "disk swap"}))
        .send()
        .await
        .unwrap();
    assert!(cordon.status().is_success(), "{}", cordon.status());
    let calls = || std::fs::read_to_string(gate.path().join("calls")).unwrap_or_default();
    eventually(
        "the leader's drain under way",
        Duration::from_secs(20),
        || async { (calls().lines().count() == 1).then_some(()) },
    )
    .await;
    replicas[leader].signal("STOP");
    let taken = one_leader(&replicas, &[next], Duration::from_secs(30)).await;
    assert_eq!(taken, next);
    eventually(
        "the new leader's drain under way",
        Duration::from_secs(30),
        || async { (calls().lines().count() == 2).then_some(()) },
    )
    .await;
    std::fs::write(gate.path().join("go"), "").unwrap();
    let cordon_done = [("action", "cordon"), ("result", "done")];
    eventually(
        "the cordon done by the new leader",
        Duration::from_secs(30),
        || async {
            let done = metric(
                &replicas[next].metrics().await,
                "hale_policy_actions_total",
                &cordon_done,
            );
            (done == Some(1.0)).then_some(())
        },
    )
    .await;
    assert_eq!(fake.node("fz-1").await["status"], "NODE_STATUS_CORDONED");
    let c1 = replicas[next].node("c1").await.unwrap();
    assert!(c1.get("pending").is_none(), "nothing left to do: {c1}");

    // Let go on, the old leader finds its lease lapsed and another holding it,
    // and its drain done.
    replicas[leader].signal("CONT");
    let old = &replicas[leader];
    eventually(
        "the old leader says it no longer leads",
        Duration::from_secs(20),
        || async {
            let log = old.log();
            // (Stopped in the middle of a renewal, it says the renewal went unanswered.)
            (log.contains("no longer leading: the NATS lease")
                && log.contains("finished after this replica stopped leading: not recorded here"))
            .then_some(())
        },
    )
    .await;
    assert_eq!(
        metric(
            &old.metrics().await,
            "hale_policy_actions_total",
            &cordon_done
        )
        .unwrap_or(0.0),
        0.0,
        "the old leader counts nothing of an action it no longer holds"
    );
    let new = &replicas[next];
    let types = event_types(new, "c1").await;
    let cordoned = types.iter().filter(|t| *t == "NODE_CORDONED").count();
    assert_eq!(cordoned, 1, "{types:?}");
    assert_eq!(leads(old).await, Some(false));
}
