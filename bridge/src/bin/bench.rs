//! `bench`: how fast and how lean hale's ingest is, as ratios against baselines measured
//! in the same run. Build with `cargo build --release --bins`, run `target/release/bench`.
//!
//! 1. A realistic Alertmanager v2 answer: 50,000 alerts over 10,000 nodes.
//! 2. Baseline: a bare serde parse of those bytes into the v2 schema (owned strings).
//! 3. hale's ingest cycle on the same bytes: parse → map → diff → score → persist.
//! 4. Where `prometheus-alertmanager` is installed: the time the real Alertmanager takes
//!    to serve the same alerts through its v2 API, then a real `hale serve` polling it —
//!    its RSS — and webhook → API-visible latency against that loaded hale.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{TimeDelta, Utc};
use hale::config::Config;
use hale::core::Fleet;
use hale::store::{Batch, Store};
use serde::Deserialize;
use serde_json::{Value, json};

const NODES: usize = 10_000;
const PER_NODE: usize = 5;

fn main() -> anyhow::Result<()> {
    hale::init_tls();
    let nodes = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()
        .context("usage: bench [NODES]")?
        .unwrap_or(NODES);
    let work = std::env::temp_dir().join(format!("hale-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let result = run(nodes, &work);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn run(nodes: usize, work: &Path) -> anyhow::Result<()> {
    let rss_start = rss_kib(std::process::id()).unwrap_or(0);
    let alerts = synthesize(nodes);
    let body = serde_json::to_vec(&alerts)?;
    println!(
        "input: {} alerts over {nodes} nodes, {:.1} MiB of v2 JSON\n",
        alerts.len(),
        body.len() as f64 / (1 << 20) as f64
    );

    let parse = median(5, || {
        let t = Instant::now();
        let parsed: Vec<GettableAlert> = serde_json::from_slice(&body).expect("parses");
        std::hint::black_box(parsed);
        t.elapsed()
    });

    let cfg = Config::default().resolve("<bench>", "")?.core;
    let mut store = Store::open(&work.join("cycle"))?;
    let start = Utc::now();
    let mut fleet = Fleet::new(start);
    let mut phases = [Duration::ZERO; 3];
    let mut cycle = |i: i32, fleet: &mut Fleet, phases: &mut [Duration; 3]| {
        let t = Instant::now();
        let parsed = hale::alertmanager::parse_v2(&body).expect("parses");
        let parsed_at = t.elapsed();
        let now = start + TimeDelta::seconds(30 * i64::from(i));
        let out = fleet.poll(&cfg, now, &parsed);
        let applied_at = t.elapsed();
        let batch = Batch::of(fleet, &out);
        store.write(&batch).expect("store writes");
        let total = t.elapsed();
        *phases = [parsed_at, applied_at - parsed_at, total - applied_at];
        (total, batch.nodes.len(), batch.events.len())
    };
    let (cold, cold_nodes, cold_events) = cycle(0, &mut fleet, &mut phases);
    let mut steady = Vec::new();
    let mut steady_writes = 0;
    for i in 1..=7 {
        let (t, written, _) = cycle(i, &mut fleet, &mut phases);
        steady.push(t);
        steady_writes = written;
    }
    steady.sort();
    let steady = steady[steady.len() / 2];
    drop(body);
    let rss_fleet = rss_kib(std::process::id()).unwrap_or(0);

    println!("ingest (in process)");
    println!("  bare serde parse (owned v2 schema) {:>9.1} ms", ms(parse));
    println!(
        "  hale cycle, first poll             {:>9.1} ms  ({cold_nodes} nodes, {cold_events} events written)",
        ms(cold)
    );
    println!(
        "  hale cycle, steady state           {:>9.1} ms  = {:.2}x bare parse (target <= 2x)",
        ms(steady),
        ratio(steady, parse)
    );
    println!(
        "    last cycle: parse+map {:.1} ms, diff+score {:.1} ms, persist {:.1} ms ({steady_writes} node records)",
        ms(phases[0]),
        ms(phases[1]),
        ms(phases[2])
    );
    println!(
        "  bench process RSS: {:.1} MiB at start, {:.1} MiB holding the fleet\n",
        rss_start as f64 / 1024.0,
        rss_fleet as f64 / 1024.0
    );

    events(work)?;

    let Some(am_bin) = which("prometheus-alertmanager") else {
        println!("prometheus-alertmanager is not installed: skipping the Alertmanager comparison");
        return Ok(());
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(live(&am_bin, work, &alerts, steady))
}

/// The Alertmanager comparison, hale's RSS and webhook latency, on real processes.
async fn live(am_bin: &Path, work: &Path, alerts: &[Value], cycle: Duration) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let am_port = free_port();
    let am_url = format!("http://127.0.0.1:{am_port}");
    std::fs::write(
        work.join("am.yml"),
        "route:\n  receiver: hale\n  group_by: [node]\nreceivers:\n  - name: hale\n",
    )?;
    let _am = Proc(
        Command::new(am_bin)
            .arg(format!("--config.file={}", work.join("am.yml").display()))
            .arg(format!("--storage.path={}", work.join("am").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{am_port}"))
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    wait_ok(&http, &format!("{am_url}/-/ready")).await?;

    let loading = Instant::now();
    let ends = (Utc::now() + TimeDelta::hours(2)).to_rfc3339();
    for chunk in alerts.chunks(2_000) {
        let postable: Vec<Value> = chunk
            .iter()
            .map(|a| {
                json!({"labels": a["labels"], "annotations": a["annotations"],
                       "startsAt": a["startsAt"], "endsAt": ends})
            })
            .collect();
        let r = http
            .post(format!("{am_url}/api/v2/alerts"))
            .json(&postable)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("Alertmanager refused alerts: {}", r.text().await?);
        }
    }
    let loaded_in = loading.elapsed();
    let alerts_url = format!("{am_url}/api/v2/alerts?receiver=hale");
    let mut serve = Vec::new();
    let mut served = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let bytes = http.get(&alerts_url).send().await?.bytes().await?;
        serve.push(t.elapsed());
        served = serde_json::from_slice::<Vec<serde::de::IgnoredAny>>(&bytes)?.len();
    }
    serve.sort();
    let serve = serve[1];
    println!(
        "Alertmanager (real, 0.25 here), loaded in {:.1} s",
        loaded_in.as_secs_f64()
    );
    println!(
        "  GET /api/v2/alerts, {served} alerts    {:>9.1} ms",
        ms(serve)
    );
    println!(
        "  hale cycle / Alertmanager serving  {:>9.1} %   (target <= 10%)\n",
        100.0 * ratio(cycle, serve)
    );

    // A real hale polling that Alertmanager: its RSS once it holds the whole fleet,
    // beside the RSS of an idle hale with nothing to hold.
    let hale_bin = std::env::current_exe()?
        .parent()
        .map(|d| d.join("hale"))
        .filter(|p| p.is_file())
        .context(
            "the hale binary is not next to bench: build with `cargo build --release --bins`",
        )?;
    let idle_rss = {
        let idle = start_hale(&hale_bin, &work.join("idle"), "http://127.0.0.1:9")?;
        wait_ok(&http, &format!("{}/readyz", idle.url)).await?;
        rss_kib(idle.proc.0.id()).unwrap_or(0)
    };
    let hale = start_hale(&hale_bin, &work.join("hale"), &am_url)?;
    let hale_url = hale.url.clone();
    wait_ok(&http, &format!("{hale_url}/readyz")).await?;
    let mut node_count = 0;
    let mut token: Option<String> = None;
    loop {
        let mut url = format!("{hale_url}/api/v1/nodes?pageSize=1000");
        if let Some(t) = &token {
            url.push_str(&format!("&pageToken={t}"));
        }
        let page: Value = http.get(url).send().await?.json().await?;
        node_count += page["nodes"].as_array().map_or(0, Vec::len);
        match page["nextPageToken"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    let rss = rss_kib(hale.proc.0.id()).unwrap_or(0);
    let budget_kib = 2 * node_count + served;
    println!("hale serve holding {node_count} nodes and {served} active alerts");
    println!(
        "  RSS {:>8.1} MiB; an idle hale {:.1} MiB; the difference is {:.2}x the budget of 2 KiB/node + 1 KiB/alert ({:.1} MiB)",
        rss as f64 / 1024.0,
        idle_rss as f64 / 1024.0,
        rss.saturating_sub(idle_rss) as f64 / budget_kib as f64,
        budget_kib as f64 / 1024.0
    );
    println!(
        "  (the whole RSS is {:.2}x that budget)\n",
        rss as f64 / budget_kib as f64
    );

    // Webhook → API-visible latency on the loaded hale.
    let mut samples = Vec::new();
    for i in 0..300 {
        let node = format!("node-{:05}", i % node_count.max(1));
        let fingerprint = format!("bench{i:011x}");
        let body = json!({
            "version": "4", "status": "firing", "receiver": "hale", "groupKey": "{}:{node=\"x\"}",
            "truncatedAlerts": 0, "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": am_url,
            "alerts": [{
                "status": "firing", "fingerprint": fingerprint,
                "labels": {"alertname": format!("BenchProbe{i}"), "node": node, "severity": "warning"},
                "annotations": {"summary": "latency probe"},
                "startsAt": Utc::now().to_rfc3339(), "endsAt": "0001-01-01T00:00:00Z",
            }]
        });
        let want = format!("BenchProbe{i}");
        let t = Instant::now();
        let r = http
            .post(format!("{hale_url}/api/v1/alertmanager"))
            .json(&body)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("webhook refused: {}", r.text().await?);
        }
        loop {
            let n: Value = http
                .get(format!("{hale_url}/api/v1/nodes/{node}"))
                .send()
                .await?
                .json()
                .await?;
            let seen = n["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == want.as_str()));
            if seen {
                break;
            }
        }
        samples.push(t.elapsed());
    }
    samples.sort();
    let p = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "webhook -> visible in GET /api/v1/nodes/{{id}} ({} samples)",
        samples.len()
    );
    println!(
        "  p50 {:>7.1} ms   p99 {:>7.1} ms   (target p99 <= 100 ms)",
        ms(p(0.5)),
        ms(p(0.99))
    );
    Ok(())
}

/// Event appends per second, and paged reads on a node holding 100,000 events.
fn events(work: &Path) -> anyhow::Result<()> {
    use hale::core::{Event, EventKind};
    use hale::store::EventQuery;

    let mut store = Store::open(&work.join("events"))?;
    let trust = serde_json::to_string(&Fleet::new(Utc::now()).trust)?;
    let start = Utc::now() - TimeDelta::days(30);
    let event = |node: &str, i: usize| Event {
        node_id: node.to_string(),
        kind: EventKind::ScoreChanged {
            score: (i % 100) as u8,
            previous_score: ((i + 1) % 100) as u8,
            scored_by: "cluster".into(),
        },
        occurred_at: start + TimeDelta::milliseconds(i as i64 * 20),
        message: format!("score {} -> {}", (i + 1) % 100, i % 100),
    };
    // 100,000 events on one node, among 100,000 on 1,000 others, 1,000 per transaction.
    let total = 200_000;
    let t = Instant::now();
    for chunk in 0..total / 1000 {
        let events = (0..1000)
            .map(|k| {
                let i = chunk * 1000 + k;
                if i % 2 == 0 {
                    event("big", i)
                } else {
                    event(&format!("node-{:04}", i % 1000), i)
                }
            })
            .collect();
        store.write(&Batch {
            events,
            trust: trust.clone(),
            ..Batch::default()
        })?;
    }
    let batched = total as f64 / t.elapsed().as_secs_f64();
    let singles = 2_000;
    let t = Instant::now();
    for i in 0..singles {
        store.write(&Batch {
            events: vec![event("single", i)],
            trust: trust.clone(),
            ..Batch::default()
        })?;
    }
    let single = singles as f64 / t.elapsed().as_secs_f64();

    let first = store.events(
        "big",
        &EventQuery {
            page_size: 1,
            ..EventQuery::default()
        },
    )?;
    let first_seq: i64 = first.events[0]
        .id
        .rsplit('-')
        .next()
        .unwrap_or("1")
        .parse()?;
    let mut reads = Vec::new();
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..1000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let after = first_seq + (rng % (total as u64 - 400)) as i64;
        let t = Instant::now();
        let page = store.events(
            "big",
            &EventQuery {
                page_size: 100,
                after: Some(after),
                ..EventQuery::default()
            },
        )?;
        reads.push(t.elapsed());
        assert_eq!(page.events.len(), 100);
    }
    reads.sort();
    let p = |q: f64| reads[((reads.len() as f64 - 1.0) * q).round() as usize];
    let t = Instant::now();
    let latest = store.events(
        "big",
        &EventQuery {
            page_size: 100,
            latest: true,
            types: vec!["SCORE_CHANGED".into()],
            ..EventQuery::default()
        },
    )?;
    let latest_t = t.elapsed();
    assert_eq!(latest.events.len(), 100);
    println!("event store (embedded SQLite)");
    println!("  appends, 1,000 per transaction  {batched:>10.0} events/s (target >= 50,000/s)");
    println!("  appends, one per transaction    {single:>10.0} events/s");
    println!(
        "  page of 100 on a node holding 100,000 events: p50 {:.2} ms, p99 {:.2} ms (target p99 <= 10 ms); latest page {:.2} ms\n",
        ms(p(0.5)),
        ms(p(0.99)),
        ms(latest_t)
    );
    Ok(())
}

/// The v2 `GettableAlert` schema with owned strings: what a plain client would parse.
#[derive(Deserialize)]
#[allow(dead_code)]
#[serde(rename_all = "camelCase")]
struct GettableAlert {
    labels: HashMap<String, String>,
    annotations: HashMap<String, String>,
    receivers: Vec<HashMap<String, String>>,
    fingerprint: String,
    starts_at: String,
    ends_at: String,
    updated_at: String,
    #[serde(rename = "generatorURL")]
    generator_url: Option<String>,
    status: Status,
}

#[derive(Deserialize)]
#[allow(dead_code)]
#[serde(rename_all = "camelCase")]
struct Status {
    state: String,
    silenced_by: Vec<String>,
    inhibited_by: Vec<String>,
}

/// `nodes` nodes × 5 alerts (a heartbeat and four hardware or special signals), one of
/// them replaced by the watchdog; one alert in ten suppressed.
fn synthesize(nodes: usize) -> Vec<Value> {
    let kinds: [&[(&str, &str)]; 10] = [
        &[
            ("alertname", "GpuEccCorrectable"),
            ("hale_condition", "gpu_ecc_errors"),
            ("hale_reason", "GpuEccCorrectable"),
            ("gpu", "0"),
            ("severity", "warning"),
        ],
        &[
            ("alertname", "GpuEccCorrectable"),
            ("hale_condition", "gpu_ecc_errors"),
            ("hale_reason", "GpuEccCorrectable"),
            ("gpu", "1"),
            ("severity", "warning"),
        ],
        &[
            ("alertname", "GpuThrottling"),
            ("hale_condition", "gpu_throttling"),
            ("hale_reason", "GpuThrottling"),
            ("gpu", "2"),
            ("severity", "warning"),
        ],
        &[
            ("alertname", "SmartWarning"),
            ("hale_condition", "disk_degraded"),
            ("hale_reason", "SmartWarning"),
            ("device", "/dev/sda"),
            ("severity", "warning"),
        ],
        &[
            ("alertname", "IoErrors"),
            ("hale_condition", "disk_degraded"),
            ("hale_reason", "IoErrors"),
            ("device", "/dev/sdb"),
            ("severity", "warning"),
        ],
        &[
            ("alertname", "CorrectableMemoryErrors"),
            ("hale_condition", "memory_errors"),
            ("hale_reason", "CorrectableMemoryErrors"),
            ("mc", "0"),
            ("severity", "warning"),
        ],
        &[
            ("alertname", "GpuXidApplication"),
            ("hale_condition", "gpu_xid_errors"),
            ("hale_reason", "GpuXidApplication"),
            ("xid", "13"),
            ("severity", "warning"),
        ],
        &[
            ("alertname", "HaleCollectorFailed"),
            ("hale_signal", "collector_failed"),
            ("collector", "smart"),
            ("severity", "warning"),
        ],
        &[
            ("alertname", "HaleSignalUnavailable"),
            ("hale_signal", "unavailable"),
            ("signal", "gpu_ecc"),
            ("severity", "info"),
        ],
        &[
            ("alertname", "GpuXidHardware"),
            ("hale_condition", "gpu_xid_errors"),
            ("hale_reason", "GpuXidHardware"),
            ("xid", "79"),
            ("hale_sticky", "true"),
            ("severity", "critical"),
        ],
    ];
    let now = Utc::now();
    let mut out = Vec::with_capacity(nodes * PER_NODE);
    for i in 0..nodes {
        let node = format!("node-{i:05}");
        let instance = format!("10.{}.{}.{}:9100", i / 65536, (i / 256) % 256, i % 256);
        let mut sets: Vec<BTreeMap<&str, String>> = vec![BTreeMap::from([
            ("alertname", "HaleNodeReporting".to_string()),
            ("hale_signal", "heartbeat".into()),
            ("severity", "info".into()),
        ])];
        for k in 0..PER_NODE - 1 {
            sets.push(
                kinds[(i + 3 * k) % kinds.len()]
                    .iter()
                    .map(|(k, v)| (*k, v.to_string()))
                    .collect(),
            );
        }
        for (j, mut labels) in sets.into_iter().enumerate() {
            labels.insert("node", node.clone());
            labels.insert("instance", instance.clone());
            labels.insert("job", "node".into());
            labels.insert("cluster", "bench".into());
            let suppressed = (i * PER_NODE + j) % 10 == 9;
            out.push(gettable(&labels, suppressed, now));
        }
    }
    let watchdog = BTreeMap::from([
        ("alertname", "Watchdog".to_string()),
        ("hale_signal", "watchdog".into()),
        ("severity", "info".into()),
    ]);
    if let Some(last) = out.last_mut() {
        *last = gettable(&watchdog, false, now);
    }
    out
}

fn gettable(
    labels: &BTreeMap<&str, String>,
    suppressed: bool,
    now: chrono::DateTime<Utc>,
) -> Value {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (k, v) in labels {
        for b in k.bytes().chain([0xff]).chain(v.bytes()).chain([0xfe]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let name = &labels["alertname"];
    let t = |d: i64| (now + TimeDelta::minutes(d)).to_rfc3339();
    json!({
        "annotations": {
            "summary": format!("{name} on {}", labels.get("node").map_or("the pipeline", |n| n.as_str())),
            "description": format!("{name}: see the runbook for what to check and how to clear it."),
            "runbook_url": format!("https://runbooks.example/hale/{name}"),
        },
        "endsAt": t(5),
        "fingerprint": format!("{h:016x}"),
        "receivers": [{"name": "hale"}],
        "startsAt": t(-30),
        "status": {
            "inhibitedBy": [],
            "silencedBy": if suppressed { vec!["2b7c2ad8-5d8e-4c39-9b2f-0e7e1d7b4b10"] } else { vec![] },
            "state": if suppressed { "suppressed" } else { "active" },
        },
        "updatedAt": t(-1),
        "generatorURL": format!("http://prometheus.example:9090/graph?g0.expr={name}"),
        "labels": labels,
    })
}

struct Proc(Child);

/// A `hale serve` started by the bench.
struct Running {
    url: String,
    proc: Proc,
}

fn start_hale(bin: &Path, dir: &Path, am_url: &str) -> anyhow::Result<Running> {
    std::fs::create_dir_all(dir)?;
    let port = free_port();
    std::fs::write(
        dir.join("hale.yaml"),
        format!(
            "listen: 127.0.0.1:{port}\nstore: {{ path: {} }}\nalertmanager:\n  url: {am_url}\n  pollInterval: 10m\n",
            dir.join("data").display()
        ),
    )?;
    let child = Command::new(bin)
        .args(["serve", "--config"])
        .arg(dir.join("hale.yaml"))
        .env("HALE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok(Running {
        url: format!("http://127.0.0.1:{port}"),
        proc: Proc(child),
    })
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_ok(http: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(r) = http.get(url).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{url} did not become ready")
}

fn median(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut v: Vec<Duration> = (0..runs).map(|_| f()).collect();
    v.sort();
    v[runs / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn rss_kib(pid: u32) -> Option<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn which(binary: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(binary))
            .find(|p| p.is_file())
    })
}
