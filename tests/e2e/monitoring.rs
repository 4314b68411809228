//! The shipped monitoring content end to end, on real servers: node_exporter
//! (textfile collector) and mtail (fed kernel-log lines) → Prometheus running
//! `rules/` and `alerts/` → Alertmanager running `examples/alertmanager.yml` →
//! hale (webhook and poll) → hale's `/metrics`, scraped back by the same
//! Prometheus, whose score alerts then fire; the dashboard's queries answered by it.
//!
//! Time runs 15× faster than in production: every rule window, offset and `for`
//! of the shipped files is divided by [`SPEEDUP`], Prometheus scrapes and evaluates
//! every second and re-sends alerts every second (so Alertmanager expires them
//! seconds, not minutes, after Prometheus stops). Nothing else in the files changes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

/// How much faster than production the rules run.
const SPEEDUP: u64 = 15;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A rule file with every duration divided by [`SPEEDUP`]: range windows, offsets,
/// `for`, the rates' `/ 300` (a 5-minute window in seconds), the textfile
/// freshness limits and the heartbeat's report interval.
pub(crate) fn compress(text: &str) -> String {
    let mut out = text
        .replace("/ 300", &format!("/ {}", 300 / SPEEDUP))
        .replace("> 900", &format!("> {}", 900 / SPEEDUP))
        .replace("> 300", &format!("> {}", 300 / SPEEDUP))
        .replace("< 300", &format!("< {}", 300 / SPEEDUP))
        .replace("hale_report_interval: 30s", "hale_report_interval: 2s");
    for prefix in ["[", "offset ", "for: "] {
        out = scale_after(&out, prefix);
    }
    out
}

/// Rewrites `<prefix><N>m` and `<prefix><N>h` as seconds divided by [`SPEEDUP`].
fn scale_after(text: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let (head, tail) = rest.split_at(i + prefix.len());
        out.push_str(head);
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        let unit = match tail.as_bytes().get(digits) {
            Some(b'm') if tail.as_bytes().get(digits + 1) != Some(&b's') => 60,
            Some(b'h') => 3600,
            _ => 0,
        };
        if digits == 0 || unit == 0 {
            rest = tail;
            continue;
        }
        let n: u64 = tail[..digits].parse().unwrap();
        out.push_str(&format!("{}s", n * unit / SPEEDUP));
        rest = &tail[digits + 1..];
    }
    out.push_str(rest);
    out
}

/// Copies of the shipped rule files under `dir/{rules,alerts}`, compressed in time.
pub(crate) fn shipped_rules(dir: &Path) {
    for sub in ["rules", "alerts"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        for entry in std::fs::read_dir(repo().join(sub)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yml") {
                let text = compress(&std::fs::read_to_string(&path).unwrap());
                for stale in ["m]", "offset 5m", "for: 1m", "for: 5m"] {
                    assert!(
                        !text.contains(stale),
                        "{}: a duration escaped compression ({stale})",
                        path.display()
                    );
                }
                std::fs::write(dir.join(sub).join(path.file_name().unwrap()), text).unwrap();
            }
        }
    }
}

/// A server process started by this test and killed by it.
pub(crate) struct Server {
    child: Option<Child>,
}

impl Server {
    pub(crate) async fn start(name: &str, cmd: &mut Command, log: &Path, ready: &str) -> Server {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let server = Server { child: Some(child) };
        eventually(
            &format!("{name} ready"),
            Duration::from_secs(30),
            || async {
                let r = reqwest::get(ready).await.ok()?;
                r.status().is_success().then_some(())
            },
        )
        .await;
        server
    }

    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One host's node_exporter, serving the metrics this test writes to its textfile
/// directory; series marked climbing go up by one every second.
pub(crate) struct Host {
    id: &'static str,
    port: u16,
    exporter: Server,
    series: Arc<Mutex<BTreeMap<String, (f64, bool)>>>,
}

impl Host {
    pub(crate) async fn start(id: &'static str, dir: &Path) -> Host {
        let textfiles = dir.join(id);
        std::fs::create_dir_all(&textfiles).unwrap();
        let port = free_port();
        let exporter = Server::start(
            &format!("node_exporter of {id}"),
            Command::new(require("prometheus-node-exporter"))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .args(["--collector.disable-defaults", "--collector.textfile"])
                .arg(format!(
                    "--collector.textfile.directory={}",
                    textfiles.display()
                )),
            &dir.join(format!("{id}-node-exporter.log")),
            &format!("http://127.0.0.1:{port}/metrics"),
        )
        .await;
        let series: Arc<Mutex<BTreeMap<String, (f64, bool)>>> = Arc::default();
        let shared = series.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let body: String = {
                    let mut series = shared.lock().unwrap();
                    series
                        .iter_mut()
                        .map(|(name, (value, climbing))| {
                            if *climbing {
                                *value += 1.0;
                            }
                            format!("{name} {value}\n")
                        })
                        .collect()
                };
                // Atomically, so the collector never reads half a file.
                let tmp = textfiles.join(".hale.prom.tmp");
                if std::fs::write(&tmp, body).is_ok() {
                    let _ = std::fs::rename(&tmp, textfiles.join("hale.prom"));
                }
            }
        });
        Host {
            id,
            port,
            exporter,
            series,
        }
    }

    pub(crate) fn set(&self, series: &str, value: f64) {
        self.series
            .lock()
            .unwrap()
            .insert(series.into(), (value, false));
    }

    fn climb(&self, series: &str, climbing: bool) {
        self.series
            .lock()
            .unwrap()
            .entry(series.into())
            .or_insert((0.0, false))
            .1 = climbing;
    }
}

/// One host's mtail running the shipped kernel-log program over a log file.
pub(crate) struct KernelLog {
    id: &'static str,
    port: u16,
    log: PathBuf,
    _mtail: Server,
}

impl KernelLog {
    pub(crate) async fn start(id: &'static str, dir: &Path) -> KernelLog {
        let log = dir.join(format!("{id}-kern.log"));
        std::fs::write(&log, "").unwrap();
        let port = free_port();
        let mtail = Server::start(
            &format!("mtail of {id}"),
            Command::new(require("mtail"))
                .arg("--progs")
                .arg(repo().join("rules/mtail"))
                .arg("--logs")
                .arg(&log)
                .args(["--address", "127.0.0.1", "--port", &port.to_string()])
                .arg("--logtostderr"),
            &dir.join(format!("{id}-mtail.log")),
            &format!("http://127.0.0.1:{port}/metrics"),
        )
        .await;
        KernelLog {
            id,
            port,
            log,
            _mtail: mtail,
        }
    }

    /// Append `line` to the log every second until the returned flag is cleared.
    pub(crate) fn keep_logging(&self, line: &'static str) -> Arc<AtomicBool> {
        let log = self.log.clone();
        let on = Arc::new(AtomicBool::new(true));
        let running = on.clone();
        tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
                writeln!(f, "{line}").unwrap();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        on
    }
}

pub(crate) fn prometheus_config(
    dir: &Path,
    am: &str,
    hale: &str,
    hosts: &[&Host],
    logs: &[&KernelLog],
) -> String {
    let target = |port: u16, id: &str, as_port: u16| {
        json!({"targets": [format!("127.0.0.1:{port}")],
               "labels": {"node": id, "instance": format!("{id}:{as_port}")}})
    };
    // JSON is YAML: the structure stays readable and needs no YAML writer.
    json!({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [dir.join("rules/*.yml"), dir.join("alerts/*.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am.trim_start_matches("http://")]}]}]},
        "scrape_configs": [
            {"job_name": "node",
             "static_configs": hosts.iter().map(|h| target(h.port, h.id, 9100)).collect::<Vec<_>>()},
            {"job_name": "mtail",
             "static_configs": logs.iter().map(|k| target(k.port, k.id, 3903)).collect::<Vec<_>>()},
            {"job_name": "hale", "static_configs": [{"targets": [hale.trim_start_matches("http://")]}]},
        ],
    })
    .to_string()
}

/// `examples/alertmanager.yml` as shipped, delivering to `hale` with the token in
/// `token_file`.
pub(crate) fn shipped_alertmanager_config(hale: &str, token_file: &Path) -> String {
    let shipped = std::fs::read_to_string(repo().join("examples/alertmanager.yml")).unwrap();
    let config = shipped
        .replace("http://127.0.0.1:9470", hale)
        .replace("/etc/alertmanager/hale-token", token_file.to_str().unwrap());
    assert_ne!(
        config, shipped,
        "the example's hale URL and token path moved"
    );
    config
}

pub(crate) struct Prometheus {
    url: String,
    server: Server,
}

impl Prometheus {
    pub(crate) async fn start(dir: &Path, config: &str) -> Prometheus {
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let server = Server::start(
            "prometheus",
            Command::new(require("prometheus"))
                .arg(format!(
                    "--config.file={}",
                    dir.join("prometheus.yml").display()
                ))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("tsdb").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--rules.alert.resend-delay=1s"),
            &dir.join("prometheus.log"),
            &format!("{url}/-/ready"),
        )
        .await;
        Prometheus { url, server }
    }

    pub(crate) async fn query(&self, promql: &str) -> Vec<Value> {
        let r: Value = reqwest::Client::new()
            .get(format!("{}/api/v1/query", self.url))
            .query(&[("query", promql)])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["status"], "success", "{promql}: {r}");
        r["data"]["result"].as_array().unwrap().clone()
    }

    /// Wait until Prometheus has `alertname` firing with `label` = `value`.
    pub(crate) async fn wait_firing(&self, alertname: &str, label: &str, value: &str) {
        let what = format!("{alertname}{{{label}=\"{value}\"}} firing in Prometheus");
        eventually(&what, Duration::from_secs(60), || async {
            let r: Value = reqwest::get(format!("{}/api/v1/alerts", self.url))
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            r["data"]["alerts"]
                .as_array()?
                .iter()
                .any(|a| {
                    a["labels"]["alertname"] == alertname
                        && a["labels"][label] == value
                        && a["state"] == "firing"
                })
                .then_some(())
        })
        .await;
    }
}

/// What every test of the shipped pipeline starts from: the shipped rules
/// compressed into its directory, Alertmanager running the shipped receiver
/// config towards a hale that will listen on `hale_port`, and hale's directory
/// holding its API token.
pub(crate) struct Stage {
    pub(crate) hale_port: u16,
    pub(crate) hale_url: String,
    pub(crate) am: Alertmanager,
    pub(crate) hale_dir: PathBuf,
}

impl Stage {
    pub(crate) async fn set(dir: &Path) -> Stage {
        shipped_rules(dir);
        let hale_port = free_port();
        let hale_url = format!("http://127.0.0.1:{hale_port}");
        std::fs::write(dir.join("am-token"), TOKEN).unwrap();
        let am = Alertmanager::with_config(&shipped_alertmanager_config(
            &hale_url,
            &dir.join("am-token"),
        ))
        .await;
        let hale_dir = dir.join("hale");
        std::fs::create_dir_all(&hale_dir).unwrap();
        std::fs::write(hale_dir.join("token"), TOKEN).unwrap();
        Stage {
            hale_port,
            hale_url,
            am,
            hale_dir,
        }
    }
}

pub(crate) fn condition<'a>(node: &'a Value, ctype: &str) -> Option<&'a Value> {
    node["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ctype)
}

pub(crate) fn severity_of(node: &Value, ctype: &str) -> Option<String> {
    condition(node, ctype).map(|c| c["severity"].as_str().unwrap().to_string())
}

pub(crate) const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_rules_alerts_and_receiver_drive_hale() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let Stage {
        hale_port,
        hale_url,
        am,
        hale_dir,
    } = Stage::set(dir).await;
    let receiver = Receiver::start().await;
    receiver.fail_first("/events", 1);
    std::fs::write(dir.join("webhook-secret"), "e2e-webhook-secret").unwrap();
    // A BMC for disk-1, so the remediation panels have a request to show.
    let sushy = crate::bmc_sim::Sushy::start(&["bmc-1"], "e2e-bmc-password").await;
    std::fs::write(dir.join("bmc"), "admin:e2e-bmc-password\n").unwrap();
    let hale_config = format!(
        "listen: 127.0.0.1:{hale_port}\napiTokenFile: {}\n\
         store: {{ path: {}, maxBytes: 1073741824 }}\n\
         alertmanager: {{ url: '{}', pollInterval: 1s, staleAfter: 20s, holdAfterRestart: 80s }}\n\
         nodeEventWebhooks: [{{ url: '{}/events', secretFile: {} }}]\n\
         bmc: {{ credentialsFile: {} }}\n\
         inventory: [{{ id: disk-1, bmc: {{ address: '{}' }} }}]\n",
        hale_dir.join("token").display(),
        hale_dir.join("data").display(),
        am.url,
        receiver.url,
        dir.join("webhook-secret").display(),
        dir.join("bmc").display(),
        sushy.address("bmc-1"),
    );
    let hale = Hale::start_with(&hale_dir, hale_port, &hale_config).await;

    let disk = Host::start("disk-1", dir).await;
    let mem = Host::start("mem-1", dir).await;
    let gpu = Host::start("gpu-1", dir).await;
    let mut quiet = Host::start("hb-1", dir).await;
    let xid_hw = KernelLog::start("xid-a", dir).await;
    let xid_app = KernelLog::start("xid-b", dir).await;
    let mut prometheus = Prometheus::start(
        dir,
        &prometheus_config(
            dir,
            &am.url,
            &hale_url,
            &[&disk, &mem, &gpu, &quiet],
            &[&xid_hw, &xid_app],
        ),
    )
    .await;

    // Evidence, all at once; each scenario is then checked in turn.
    disk.set(r#"smartctl_device_smart_status{device="sda"}"#, 0.0);
    mem.climb(
        r#"node_edac_correctable_errors_total{controller="0"}"#,
        true,
    );
    const SBE: &str = r#"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{gpu="0",UUID="GPU-8c2a"}"#;
    const DBE: &str = r#"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",UUID="GPU-8c2a"}"#;
    gpu.set(DBE, 0.0);
    gpu.climb(SBE, true);
    // Give each mtail a live scrape history first, then log Xids for a few seconds.
    eventually("both mtails scraped twice", MINUTE, || async {
        let up = prometheus
            .query(r#"count_over_time(up{job="mtail"}[1m]) >= 2"#)
            .await;
        (up.len() == 2).then_some(())
    })
    .await;
    let xid_79 = xid_hw.keep_logging(
        "[ 8012.114466] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    );
    let xid_13 = xid_app.keep_logging(
        "Nov 29 23:18:54 xid-b kernel: NVRM: Xid (PCI:0000:af:00): 13, pid=4321, name=python, Graphics Exception: ESR 0x504224=0x80000000",
    );

    // SMART failing: critical, sticky, 100 − 40.
    let n = hale
        .wait_node_within("SMART failing scored", "disk-1", MINUTE, |n| {
            n["score"] == 60
        })
        .await;
    let c = condition(&n, "disk_degraded").expect("disk_degraded raised");
    assert_eq!(c["severity"], "critical");
    assert_eq!(c["reason"], "SmartFailing");
    assert_eq!(n["health"], "Degraded");
    assert!(
        n["lastHeartbeat"].is_string(),
        "NodeHeartbeat reached hale: {n}"
    );

    // EDAC correctable climbing: raised; once the count stops, cleared.
    hale.wait_node_within("EDAC climbing raised", "mem-1", MINUTE, |n| {
        severity_of(n, "memory_errors").as_deref() == Some("warning")
    })
    .await;
    mem.climb(
        r#"node_edac_correctable_errors_total{controller="0"}"#,
        false,
    );
    let n = hale
        .wait_node_within("EDAC stopped cleared", "mem-1", MINUTE, |n| {
            condition(n, "memory_errors").is_none()
        })
        .await;
    assert_eq!(n["score"], 100);
    assert_eq!(n["health"], "Healthy");

    // Xid 79 is critical and stays after its count stops; Xid 13 is a warning that
    // clears once its count stops.
    hale.wait_node_within("Xid 79 raised", "xid-a", MINUTE, |n| {
        severity_of(n, "gpu_xid_errors").as_deref() == Some("critical")
    })
    .await;
    hale.wait_node_within("Xid 13 raised", "xid-b", MINUTE, |n| {
        severity_of(n, "gpu_xid_errors").as_deref() == Some("warning")
    })
    .await;
    xid_79.store(false, Ordering::Relaxed);
    xid_13.store(false, Ordering::Relaxed);
    hale.wait_node_within(
        "Xid 13 cleared after its count stopped",
        "xid-b",
        MINUTE,
        |n| condition(n, "gpu_xid_errors").is_none(),
    )
    .await;
    // Only once Prometheus no longer fires it does "stays" mean sticky.
    eventually("GpuXidHardware no longer firing", MINUTE, || async {
        let firing = prometheus
            .query(r#"ALERTS{alertname="GpuXidHardware", node="xid-a", alertstate="firing"}"#)
            .await;
        firing.is_empty().then_some(())
    })
    .await;
    // Gone from Alertmanager, and hale has polled it three times since.
    eventually("GpuXidHardware gone from Alertmanager", MINUTE, || async {
        let names = active_alertnames(&am.url).await?;
        (!names.iter().any(|n| n == "GpuXidHardware")).then_some(())
    })
    .await;
    hale.after_polls(3.0).await;
    let n = hale.node("xid-a").await.unwrap();
    let c = condition(&n, "gpu_xid_errors").expect("Xid 79 stays raised");
    assert_eq!(c["reason"], "GpuXidHardware");
    assert!(
        c["message"].as_str().unwrap().contains("Xid 79"),
        "the summary names the Xid: {c}"
    );

    // GPU ECC: correctable (warning, 90), then uncorrectable (critical, 55).
    hale.wait_node_within("GPU ECC correctable", "gpu-1", MINUTE, |n| n["score"] == 90)
        .await;
    gpu.climb(DBE, true);
    let n = hale
        .wait_node_within("GPU ECC uncorrectable", "gpu-1", MINUTE, |n| {
            n["score"] == 55
        })
        .await;
    assert_eq!(
        condition(&n, "gpu_ecc_errors").unwrap()["reason"],
        "GpuEccUncorrectable"
    );
    gpu.climb(SBE, false);
    gpu.climb(DBE, false);

    // hale's own metrics, scraped back: the score alert fires for exactly the nodes
    // below cordonBelow (60) — gpu-1 at 55 and xid-a — and not for disk-1 at 60.
    prometheus
        .wait_firing("HaleNodeScoreBelowCordon", "node_id", "gpu-1")
        .await;
    prometheus
        .wait_firing("HaleNodeScoreBelowCordon", "node_id", "xid-a")
        .await;
    let below: Vec<String> = hale.nodes().await["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["score"].as_u64().is_some_and(|s| s < 60))
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(below, ["gpu-1", "xid-a"]);
    let firing: Vec<Value> = prometheus
        .query(r#"ALERTS{alertname="HaleNodeScoreBelowCordon", alertstate="firing"}"#)
        .await;
    let mut firing: Vec<&str> = firing
        .iter()
        .map(|s| s["metric"]["node_id"].as_str().unwrap())
        .collect();
    firing.sort();
    assert_eq!(firing, below);

    // A job failure attributed to a node (the scheduler's alert, as a site routes it).
    am.fire(&[alert(
        &[
            ("alertname", "JobFailedOnNode"),
            ("node", "mem-1"),
            ("hale_signal", "job_failure"),
            ("hale_job", "train-7"),
        ],
        "job train-7 failed on mem-1",
    )])
    .await;
    // One failure costs failureTallyPenalty (5), however often the alert is polled
    // and delivered.
    hale.wait_node_within("job failure attributed", "mem-1", MINUTE, |n| {
        n["failures"]["total"] == 1
    })
    .await;

    // node_exporter stopped: heartbeat missed, Unknown; hale's alert on it fires.
    quiet.exporter.stop();
    let n = hale
        .wait_node_within("heartbeat missed", "hb-1", MINUTE, |n| {
            condition(n, "heartbeat_missed").is_some()
        })
        .await;
    assert_eq!(n["health"], "Unknown");
    prometheus
        .wait_firing("HaleHeartbeatMissed", "node_id", "hb-1")
        .await;

    let status = hale.cli(&["node", "power", "disk-1", "status"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    dashboard_queries_return_series(&prometheus).await;

    // A condition that is not sticky, raised again: the expiry must not end it either.
    mem.climb(
        r#"node_edac_correctable_errors_total{controller="0"}"#,
        true,
    );
    hale.wait_node_within("EDAC climbing again", "mem-1", MINUTE, |n| {
        condition(n, "memory_errors").is_some()
    })
    .await;

    // Prometheus restarts on an empty TSDB, so no `for` state is restored: its
    // alerts leave Alertmanager as they expire, and a `for:` alert comes back only
    // once its `for` has elapsed anew. hale sees the watchdog stall (or vanish),
    // holds the absence, and the condition never ends.
    let config = std::fs::read_to_string(dir.join("prometheus.yml")).unwrap();
    prometheus.server.stop();
    // Down until hale has seen the gap, however fast this machine restarts it.
    eventually("absences held", MINUTE, || async {
        let m = hale.metrics().await;
        (metric(&m, "hale_alert_source_holding", &[]) == Some(1.0)).then_some(())
    })
    .await;
    let again = dir.join("restarted");
    std::fs::create_dir_all(&again).unwrap();
    prometheus = Prometheus::start(&again, &config).await;
    prometheus
        .wait_firing("CorrectableMemoryErrors", "node", "mem-1")
        .await;
    hale.after_polls(3.0).await;
    let cleared = hale.events("mem-1", "type=CONDITION_CLEARED").await;
    let since_restart = cleared["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["condition"] == "memory_errors")
        .count();
    assert_eq!(
        since_restart, 1,
        "memory_errors ended once (before the restart) and not across it: {cleared}"
    );

    // Prometheus stopped: the watchdog leaves Alertmanager with every other alert;
    // hale marks every node telemetry_stale and clears nothing — not when its polls
    // lose the watchdog, and not when Alertmanager sends the expiries as resolved.
    let expiring = active_alertnames(&am.url)
        .await
        .unwrap()
        .iter()
        .filter(|n| *n != "JobFailedOnNode")
        .count();
    let by_webhook = || async {
        metric(
            &hale.metrics().await,
            "hale_alerts_ingested_total",
            &[("path", "webhook")],
        )
        .unwrap_or(0.0)
    };
    let before = by_webhook().await;
    prometheus.server.stop();
    for id in ["disk-1", "mem-1", "gpu-1", "xid-a", "hb-1"] {
        hale.wait_node_within("telemetry_stale", id, MINUTE, |n| {
            condition(n, "telemetry_stale").is_some()
        })
        .await;
    }
    let expired = eventually("alerts expired in Alertmanager", MINUTE, || async {
        let names = active_alertnames(&am.url).await?;
        names.iter().all(|n| n == "JobFailedOnNode").then_some(())
    });
    expired.await;
    // Every alert that expired, notified as resolved (after the shipped receiver's
    // group_interval), has reached hale since Prometheus stopped.
    eventually("the expiries notified as resolved", MINUTE, || async {
        (by_webhook().await >= before + expiring as f64).then_some(())
    })
    .await;
    let disk = hale.node("disk-1").await.unwrap();
    assert_eq!(
        severity_of(&disk, "disk_degraded").as_deref(),
        Some("critical")
    );
    let gpu = hale.node("gpu-1").await.unwrap();
    assert_eq!(
        severity_of(&gpu, "gpu_ecc_errors").as_deref(),
        Some("critical")
    );
    let mem = hale.node("mem-1").await.unwrap();
    assert_eq!(
        severity_of(&mem, "memory_errors").as_deref(),
        Some("warning")
    );
    assert_eq!(
        mem["failures"]["total"], 1,
        "the job failure, polled and delivered all along, counted once: {mem}"
    );
    let xid = hale.node("xid-a").await.unwrap();
    assert_eq!(
        severity_of(&xid, "gpu_xid_errors").as_deref(),
        Some("critical")
    );
    assert_eq!(
        disk["health"], "Degraded",
        "fault evidence wins over Unknown"
    );
    let quiet = hale.node("hb-1").await.unwrap();
    assert_eq!(quiet["health"], "Unknown", "{quiet}");
    for id in ["disk-1", "mem-1", "gpu-1"] {
        let n = hale.node(id).await.unwrap();
        assert!(
            condition(&n, "heartbeat_missed").is_none(),
            "the heartbeats left with the watchdog: the pipeline stopped, not the node: {n}"
        );
    }
    let m = hale.metrics().await;
    assert_eq!(metric(&m, "hale_alert_source_up", &[]), Some(0.0), "{m}");
}

/// The alertnames of the alerts Alertmanager holds active, once per alert.
async fn active_alertnames(am: &str) -> Option<Vec<String>> {
    let r: Value = reqwest::get(format!("{am}/api/v2/alerts?active=true"))
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    r.as_array()?
        .iter()
        .map(|a| a["labels"]["alertname"].as_str().map(str::to_string))
        .collect()
}

/// Every panel of the shipped dashboard, its variables set as Grafana would for this
/// hale, returns series from the live Prometheus.
async fn dashboard_queries_return_series(prometheus: &Prometheus) {
    let text = std::fs::read_to_string(repo().join("dashboards/node-reliability.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                exprs.push((
                    panel["title"].as_str().unwrap().to_string(),
                    expr.to_string(),
                ));
            }
        }
    }
    assert!(exprs.len() >= 10, "the dashboard has its panels");
    // Every replica publishes the same node series: a panel over them takes one
    // per node (the chart runs two replicas by default), never a count of both.
    for (title, expr) in &exprs {
        if expr.contains("hale_node_") && !expr.starts_with("min(") {
            assert!(
                expr.contains("max by (node_id"),
                "panel {title:?} counts each replica's series: {expr}"
            );
        }
    }
    for (title, expr) in exprs {
        let promql = expr
            .replace("$cluster", "default")
            .replace("$hale_instance", ".*")
            .replace("$__rate_interval", "1m");
        let series = eventually(
            &format!("panel {title:?} returning series: {promql}"),
            MINUTE,
            || async {
                let got = prometheus.query(&promql).await;
                (!got.is_empty()).then_some(got)
            },
        )
        .await;
        assert!(!series.is_empty());
    }
}
