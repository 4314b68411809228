//! Real processes for the end-to-end tests: a real Alertmanager and the real `hale`
//! binary, each on 127.0.0.1 on a free port, in its own temp dir, stopped on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use serde_json::{Value, json};

/// A port for a server a test starts: free now, never handed out twice in
/// this run, and below the kernel's ephemeral range, so no client connection
/// (whose local port comes from that range) can take it before the server
/// binds it. Port 0 would pick from that very range.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    hale::init_tls();
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let (low, span) = (10_000, ephemeral_low.saturating_sub(10_000).max(1_000));
    // Another test run on this machine at the same time starts elsewhere.
    let start = std::process::id().wrapping_mul(7_919) % span;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < span, "no free port left below {ephemeral_low}");
        let port = u16::try_from(low + (start + n) % span).expect("below 65536");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A webhook endpoint's URL, signed with `secret`, as hale's logs and metric
/// labels show it.
pub fn shown_endpoint(url: &str, secret: &str) -> String {
    hale::shown_endpoint(&reqwest::Url::parse(url).unwrap(), secret.as_bytes())
}

/// Wait for `check` to hold, polling every 100 ms; panic with `what` after `limit`.
pub async fn eventually<F, Fut, T>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn require(binary: &str) -> PathBuf {
    which(binary).unwrap_or_else(|| {
        panic!("{binary} is not installed: run tests/run.sh, which installs the test components")
    })
}

/// Run `cmd` with `input` on its standard input; what it printed and how it ended.
pub fn run_with_input(cmd: &mut Command, input: &str) -> std::process::Output {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

pub fn which(binary: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(binary))
            .find(|p| p.is_file())
    })
}

/// A real `prometheus-alertmanager` routing everything to receiver `hale`. A firing
/// watchdog is re-sent every second, as Prometheus re-sends it: hale ends a condition
/// only after it has seen the watchdog's expiry move forward.
pub struct Alertmanager {
    pub url: String,
    child: Child,
    resend: Arc<Mutex<Vec<Value>>>,
    port: u16,
    dir: tempfile::TempDir,
    access: Access,
}

/// How the harness itself reaches an Alertmanager: a [`Alertmanager::guarded`]
/// one asks for its CA and its user.
#[derive(Clone)]
struct Access {
    client: reqwest::Client,
    basic: bool,
}

impl Access {
    fn request(&self, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
        let request = self.client.request(method, url);
        if self.basic {
            request.basic_auth(AM_USER, Some(AM_PASSWORD))
        } else {
            request
        }
    }
}

/// What hale is given to reach a [`Alertmanager::guarded`] one: the CA its
/// certificate is signed by, and a file holding the password of [`AM_USER`].
pub struct Guard {
    pub ca: PathBuf,
    pub password_file: PathBuf,
}

pub const AM_USER: &str = "hale";
pub const AM_PASSWORD: &str = "am-e2e-password";
/// [`AM_PASSWORD`] as Alertmanager's `basic_auth_users` takes it (bcrypt, cost 4).
const AM_PASSWORD_BCRYPT: &str = "$2b$04$3sO3n5k7kg14GkJEEj7/.OxX5lAXcKM.iMjZqJ92vUJylESUNP0vS";

impl Alertmanager {
    /// `webhook`: deliver to this hale URL with this bearer token; `None`: no
    /// notifications (the receiver exists for polling only).
    pub async fn start(webhook: Option<(&str, &str)>) -> Alertmanager {
        let receiver = match webhook {
            Some((url, token)) => format!(
                "  - name: hale\n    webhook_configs:\n      - url: {url}/api/v1/alertmanager\n        send_resolved: true\n        http_config:\n          authorization:\n            credentials: {token}\n"
            ),
            None => "  - name: hale\n".into(),
        };
        let config = format!(
            "route:\n  receiver: hale\n  group_by: [node]\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n{receiver}"
        );
        Self::with_config(&config).await
    }

    /// A real Alertmanager running `config` (YAML text).
    pub async fn with_config(config: &str) -> Alertmanager {
        let dir = tempfile::tempdir().unwrap();
        hale::init_tls();
        Self::launch(
            dir,
            config,
            Access {
                client: reqwest::Client::new(),
                basic: false,
            },
        )
        .await
    }

    /// A real Alertmanager running `config` behind its own TLS (a CA made for the
    /// test) and basic auth (`--web.config.file`), as a site guards one.
    pub async fn guarded(config: &str) -> (Alertmanager, Guard) {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let openssl = |args: &[&str]| {
            let out = Command::new(require("openssl"))
                .args(args)
                .current_dir(d)
                .output()
                .unwrap();
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.crt",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=hale-e2e-ca",
                ],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req"][..],
                &ec,
                &[
                    "-keyout",
                    "server.key",
                    "-out",
                    "server.csr",
                    "-subj",
                    "/CN=127.0.0.1",
                ],
            ]
            .concat(),
        );
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]);
        std::fs::write(
            d.join("web.yml"),
            format!(
                "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  {AM_USER}: '{AM_PASSWORD_BCRYPT}'\n",
                d.join("server.crt").display(),
                d.join("server.key").display()
            ),
        )
        .unwrap();
        std::fs::write(d.join("password"), format!("{AM_PASSWORD}\n")).unwrap();
        let ca = d.join("ca.crt");
        let pem = std::fs::read(&ca).unwrap();
        hale::init_tls();
        let client = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
            .build()
            .unwrap();
        let guard = Guard {
            ca,
            password_file: d.join("password"),
        };
        let am = Self::launch(
            dir,
            config,
            Access {
                client,
                basic: true,
            },
        )
        .await;
        (am, guard)
    }

    async fn launch(dir: tempfile::TempDir, config: &str, access: Access) -> Alertmanager {
        let port = free_port();
        std::fs::write(dir.path().join("am.yml"), config).unwrap();
        let child = Self::spawn(dir.path(), port);
        let scheme = if access.basic { "https" } else { "http" };
        let am = Alertmanager {
            url: format!("{scheme}://127.0.0.1:{port}"),
            child,
            resend: Arc::default(),
            port,
            dir,
            access,
        };
        let (url, resend, access) = (am.url.clone(), am.resend.clone(), am.access.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let alerts: Vec<Value> = resend.lock().unwrap().clone();
                if !alerts.is_empty() {
                    let _ = access
                        .request(reqwest::Method::POST, format!("{url}/api/v2/alerts"))
                        .json(&with_times(&alerts, 3600))
                        .send()
                        .await;
                }
            }
        });
        am.ready().await;
        am
    }

    fn spawn(dir: &Path, port: u16) -> Child {
        let web = dir.join("web.yml");
        Command::new(require("prometheus-alertmanager"))
            .arg(format!("--config.file={}", dir.join("am.yml").display()))
            .arg(format!("--storage.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .args(
                web.exists()
                    .then(|| format!("--web.config.file={}", web.display())),
            )
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.join("am.log"))
                    .unwrap(),
            )
            .spawn()
            .unwrap()
    }

    async fn ready(&self) {
        let ready = format!("{}/-/ready", self.url);
        eventually("alertmanager ready", Duration::from_secs(20), || async {
            let r = self
                .access
                .request(reqwest::Method::GET, ready.clone())
                .send()
                .await
                .ok()?;
            r.status().is_success().then_some(())
        })
        .await;
    }

    /// Stop and start again on the same port and storage: like any Alertmanager
    /// restart, it comes back without alerts until they are sent again.
    pub async fn restart(&mut self) {
        self.kill();
        self.child = Self::spawn(self.dir.path(), self.port);
        self.ready().await;
    }

    /// Post alerts through the v2 API. `ends_in_s` ≤ 0 resolves them.
    pub async fn post(&self, alerts: &[Value], ends_in_s: i64) {
        {
            let mut resend = self.resend.lock().unwrap();
            for a in alerts
                .iter()
                .filter(|a| a["labels"]["hale_signal"] == "watchdog")
            {
                resend.retain(|r| r["labels"] != a["labels"]);
                if ends_in_s > 0 {
                    resend.push(a.clone());
                }
            }
        }
        let resp = self
            .access
            .request(reqwest::Method::POST, format!("{}/api/v2/alerts", self.url))
            .json(&with_times(alerts, ends_in_s))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    }

    pub async fn fire(&self, alerts: &[Value]) {
        self.post(alerts, 3600).await;
    }

    pub async fn resolve(&self, alerts: &[Value]) {
        self.post(alerts, -1).await;
    }

    /// Silence alerts whose `alertname` matches.
    pub async fn silence(&self, alertname: &str) {
        let now = Utc::now();
        let body = json!({
            "matchers": [{"name": "alertname", "value": alertname, "isRegex": false, "isEqual": true}],
            "startsAt": now.to_rfc3339(),
            "endsAt": (now + TimeDelta::hours(1)).to_rfc3339(),
            "createdBy": "e2e", "comment": "maintenance",
        });
        let resp = self
            .access
            .request(
                reqwest::Method::POST,
                format!("{}/api/v2/silences", self.url),
            )
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `alerts` stamped as sent now, started a minute ago, ending in `ends_in_s`.
fn with_times(alerts: &[Value], ends_in_s: i64) -> Vec<Value> {
    let now = Utc::now();
    alerts
        .iter()
        .map(|a| {
            let mut a = a.clone();
            a["startsAt"] = json!((now - TimeDelta::minutes(1)).to_rfc3339());
            a["endsAt"] = json!((now + TimeDelta::seconds(ends_in_s)).to_rfc3339());
            a
        })
        .collect()
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An alert body for the v2 API.
pub fn alert(labels: &[(&str, &str)], summary: &str) -> Value {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({"labels": labels, "annotations": {"summary": summary}})
}

pub fn watchdog() -> Value {
    alert(
        &[
            ("alertname", "Watchdog"),
            ("hale_signal", "watchdog"),
            ("severity", "info"),
        ],
        "Alerting pipeline is alive",
    )
}

pub fn heartbeat(node: &str) -> Value {
    alert(
        &[
            ("alertname", "HaleNodeReporting"),
            ("hale_signal", "heartbeat"),
            ("node", node),
            ("severity", "info"),
        ],
        "node is reporting",
    )
}

pub fn smart_failing(node: &str) -> Value {
    alert(
        &[
            ("alertname", "SmartFailing"),
            ("hale_condition", "disk_degraded"),
            ("hale_reason", "SmartFailing"),
            ("severity", "critical"),
            ("node", node),
        ],
        "SMART health check failing on /dev/sda",
    )
}

pub fn gpu_ecc_uncorrectable(node: &str) -> Value {
    alert(
        &[
            ("alertname", "GpuEccUncorrectable"),
            ("hale_condition", "gpu_ecc_errors"),
            ("hale_reason", "GpuEccUncorrectable"),
            ("hale_sticky", "true"),
            ("severity", "critical"),
            ("gpu", "0"),
            ("node", node),
        ],
        "1 uncorrectable GPU ECC error on GPU 0",
    )
}

/// A running `hale serve`.
pub struct Hale {
    pub url: String,
    pub dir: PathBuf,
    child: Option<Child>,
    /// A command hale runs under (`ip netns exec NS`), if any.
    prefix: Vec<String>,
}

pub const TOKEN: &str = "e2e-secret-token";

impl Hale {
    /// Start hale with `extra` YAML appended to a config that listens on a free port,
    /// stores under `dir` and reads `am_url`.
    pub async fn start(dir: &Path, am_url: &str, extra: &str) -> Hale {
        let port = free_port();
        let config = config(dir, port, am_url, "pollInterval: 1s", extra);
        Self::start_with(dir, port, &config).await
    }

    /// Start hale on webhook-only ingest ([`webhook_only_config`]) with `extra` YAML.
    pub async fn webhook_only(dir: &Path, extra: &str) -> Hale {
        let port = free_port();
        Self::start_with(dir, port, &webhook_only_config(dir, port, extra)).await
    }

    pub async fn start_with(dir: &Path, port: u16, config: &str) -> Hale {
        Self::start_under(dir, &format!("http://127.0.0.1:{port}"), config, &[]).await
    }

    /// As [`Hale::start_with`], waiting `limit` for it to answer.
    pub async fn start_within(dir: &Path, port: u16, config: &str, limit: Duration) -> Hale {
        let mut hale = Self::configured(dir, &format!("http://127.0.0.1:{port}"), config, &[]);
        hale.launch();
        hale.wait_up(limit).await;
        hale
    }

    /// Start hale on `config`, answering at `url`, run under `prefix` (e.g. `ip
    /// netns exec NS`, for a hale in a network namespace of the test's).
    pub async fn start_under(dir: &Path, url: &str, config: &str, prefix: &[&str]) -> Hale {
        let mut hale = Self::configured(dir, url, config, prefix);
        hale.spawn().await;
        hale
    }

    /// A hale not started yet, its configuration written.
    fn configured(dir: &Path, url: &str, config: &str, prefix: &[&str]) -> Hale {
        std::fs::write(dir.join("hale.yaml"), config).unwrap();
        Hale {
            url: url.to_string(),
            dir: dir.to_path_buf(),
            child: None,
            prefix: prefix.iter().map(|p| p.to_string()).collect(),
        }
    }

    async fn spawn(&mut self) {
        self.launch();
        self.wait_up(Duration::from_secs(20)).await;
    }

    /// Start the process, its output appended to `hale.log`.
    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("hale.log"))
            .unwrap();
        let hale = env!("CARGO_BIN_EXE_hale").to_string();
        let (program, args) = match self.prefix.split_first() {
            Some((first, rest)) => (first.clone(), [rest, &[hale]].concat()),
            None => (hale, Vec::new()),
        };
        let child = Command::new(program)
            .args(args)
            .args(["serve", "--config"])
            .arg(self.dir.join("hale.yaml"))
            .env("HALE_LOG", "info")
            // Set empty, as a unit file's `Environment=HALE_LOG_FORMAT=` does: unset,
            // so the text the tests read.
            .env("HALE_LOG_FORMAT", "")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// Wait for `/healthz` (`limit` at most); a hale that exits or never answers
    /// fails the test with its log, which says why.
    async fn wait_up(&mut self, limit: Duration) {
        let health = format!("{}/healthz", self.url);
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(r) = reqwest::get(&health).await
                && r.status().is_success()
            {
                return;
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() >= deadline {
                let log = std::fs::read_to_string(self.dir.join("hale.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!(
                    "hale never became healthy ({}); its log ends:\n{}",
                    exited.map_or("still running".to_string(), |s| format!("exited: {s}")),
                    tail.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `kill -9`: no chance to flush or clean up.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn().await;
    }

    /// SIGTERM, as an orchestrator stops a pod, and wait for hale to exit.
    pub fn stop(&mut self) {
        let status = self.stopped();
        assert!(status.success(), "hale stopped with {status}");
    }

    /// SIGTERM, and how hale exited.
    pub fn stopped(&mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        self.child.take().expect("running").wait().unwrap()
    }

    /// How hale exited, if it did within `limit` (else it is left running).
    pub fn exited_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Send a signal (`HUP`, …) with kill(1).
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name}");
    }

    /// POST an Alertmanager webhook delivery with the token.
    pub async fn deliver(&self, body: &Value) -> reqwest::StatusCode {
        reqwest::Client::new()
            .post(format!("{}/api/v1/alertmanager", self.url))
            .bearer_auth(TOKEN)
            .json(body)
            .send()
            .await
            .unwrap()
            .status()
    }

    /// `GET /api/v1/nodes/{id}/events?{query}`.
    pub async fn events(&self, id: &str, query: &str) -> Value {
        let r = reqwest::get(format!("{}/events?{query}", self.node_url(id)))
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        r.json().await.unwrap()
    }

    /// `POST /-/reload` with the token: the config file read again, applied.
    pub async fn reload(&self) {
        let r = self.ask_reload().await;
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    }

    /// `POST /-/reload` with the token, and its answer whatever it is.
    pub async fn ask_reload(&self) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/-/reload", self.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("hale.log")).unwrap_or_default()
    }

    pub fn node_url(&self, id: &str) -> String {
        let mut url = reqwest::Url::parse(&self.url).unwrap();
        url.path_segments_mut()
            .unwrap()
            .extend(["api", "v1", "nodes", id]);
        url.to_string()
    }

    /// `GET /api/v1/nodes/{id}` as JSON, `None` on 404.
    pub async fn node(&self, id: &str) -> Option<Value> {
        let r = reqwest::get(self.node_url(id)).await.unwrap();
        if r.status() == 404 {
            return None;
        }
        assert!(r.status().is_success());
        Some(r.json().await.unwrap())
    }

    pub async fn nodes(&self) -> Value {
        reqwest::get(format!("{}/api/v1/nodes", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// How many trusted polls hale has made so far.
    pub async fn polls(&self) -> f64 {
        metric(
            &self.metrics().await,
            "hale_alertmanager_polls_total",
            &[("result", "trusted")],
        )
        .unwrap_or(0.0)
    }

    /// Wait until hale has made `n` more trusted polls: proof it has read
    /// Alertmanager, and applied what it read, since the call.
    pub async fn after_polls(&self, n: f64) {
        let start = self.polls().await;
        eventually("trusted polls", Duration::from_secs(30), || async {
            (self.polls().await >= start + n).then_some(())
        })
        .await;
    }

    /// Wait until node `id` satisfies `check`.
    pub async fn wait_node(&self, what: &str, id: &str, check: impl Fn(&Value) -> bool) -> Value {
        self.wait_node_within(what, id, Duration::from_secs(20), check)
            .await
    }

    /// [`Hale::wait_node`] with its own time limit.
    pub async fn wait_node_within(
        &self,
        what: &str,
        id: &str,
        limit: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let node = self.node(id).await;
            if let Some(n) = node.as_ref().filter(|n| check(n)) {
                return n.clone();
            }
            if Instant::now() >= deadline {
                // What a failure in CI needs to be read: the node as hale last
                // showed it and what hale said meanwhile.
                let log = self.log();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(40)..].join("\n");
                let shown = node.map_or_else(|| "not known".to_string(), |n| n.to_string());
                panic!(
                    "timed out waiting for {what}: node {id} is {shown}\nhale's log, last lines:\n{tail}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Run the `hale` CLI against this server.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_hale"))
            .args(args)
            .env("HALE_SERVER", &self.url)
            .env("HALE_TOKEN_FILE", self.dir.join("token"))
            .output()
            .unwrap()
    }

    /// [`Hale::cli`] that must succeed; its output.
    pub fn cli_ok(&self, args: &[&str]) -> std::process::Output {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "hale {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for Hale {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The value of the series `name` with (at least) `labels` in a Prometheus
/// exposition, read by `prometheus-parse`: by name and labels, never by the start
/// of a line (`hale_x` is not `hale_x_total`).
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("an exposition parses");
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .and_then(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
}

/// Condition types present on a node JSON.
/// The `type`s of a page of events, oldest first.
pub fn types(page: &Value) -> Vec<String> {
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

pub fn conditions(node: &Value) -> Vec<String> {
    node["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap().to_string())
        .collect()
}

pub fn has_condition(node: &Value, ctype: &str) -> bool {
    conditions(node).iter().any(|c| c == ctype)
}

/// A webhook delivery (version 4) of firing or resolved alerts.
pub fn delivery(alerts: &[(&Value, &str)]) -> Value {
    let alerts: Vec<Value> = alerts
        .iter()
        .map(|(a, status)| {
            let labels = &a["labels"];
            // As Alertmanager's: 16 hex digits, one per label set.
            let fingerprint = {
                use std::hash::{Hash, Hasher};
                let mut h = std::hash::DefaultHasher::new();
                labels.to_string().hash(&mut h);
                format!("{:016x}", h.finish())
            };
            json!({"status": status, "labels": labels, "annotations": a["annotations"],
                   "fingerprint": fingerprint, "startsAt": Utc::now().to_rfc3339()})
        })
        .collect();
    json!({"version": "4", "status": "firing", "receiver": "hale", "groupKey": "{}", "truncatedAlerts": 0, "alerts": alerts})
}

/// A config for webhook-only ingest (no polling, trust for an hour), plus `extra`.
pub fn webhook_only_config(dir: &Path, port: u16, extra: &str) -> String {
    let am = "pollInterval: 0, staleAfter: 1h";
    config(dir, port, "http://127.0.0.1:9", am, extra)
}

/// A config listening on `port`, with the token and the store under `dir`, reading
/// the Alertmanager at `am_url` with the flow-style `alertmanager` keys `am`, then
/// `extra` top-level YAML.
pub fn config(dir: &Path, port: u16, am_url: &str, am: &str, extra: &str) -> String {
    std::fs::write(dir.join("token"), TOKEN).unwrap();
    format!(
        "listen: 127.0.0.1:{port}\napiTokenFile: {}\nstore: {{ path: {} }}\nalertmanager: {{ url: '{am_url}', {am} }}\n{extra}",
        dir.join("token").display(),
        dir.join("data").display(),
    )
}

/// One request a [`Receiver`] took.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub headers: axum::http::HeaderMap,
    pub body: Vec<u8>,
}

#[derive(Default)]
struct ReceiverState {
    got: Vec<Received>,
    /// Per path: how many requests to answer 500 before answering 200.
    fail_first: std::collections::HashMap<String, usize>,
    in_flight: usize,
    /// `/held/...` requests are answered only once this is set.
    released: bool,
}

/// A real HTTP receiver for outbound webhooks: records every request; `/hang/...`
/// never answers within a test's life; `/held/...` answers once released;
/// `/moved/...` redirects to `/landed`; paths set with `fail_first` answer 500 first.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    state: std::sync::Arc<std::sync::Mutex<ReceiverState>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let state = std::sync::Arc::new(std::sync::Mutex::new(ReceiverState::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let st = state.clone();
        let app = axum::Router::new().fallback(
            move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let st = st.clone();
                async move {
                    let path = uri.path().to_string();
                    let fail = {
                        let mut s = st.lock().unwrap();
                        s.got.push(Received {
                            path: path.clone(),
                            headers,
                            body: body.to_vec(),
                        });
                        s.in_flight += 1;
                        match s.fail_first.get_mut(&path) {
                            Some(n) if *n > 0 => {
                                *n -= 1;
                                true
                            }
                            _ => false,
                        }
                    };
                    if path.starts_with("/hang") {
                        tokio::time::sleep(Duration::from_secs(600)).await;
                    }
                    while path.starts_with("/held") && !st.lock().unwrap().released {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    st.lock().unwrap().in_flight -= 1;
                    use axum::response::IntoResponse;
                    if path.starts_with("/moved") {
                        let to = [(axum::http::header::LOCATION, "/landed")];
                        return (axum::http::StatusCode::TEMPORARY_REDIRECT, to).into_response();
                    }
                    if fail {
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response()
                    } else {
                        axum::http::StatusCode::OK.into_response()
                    }
                }
            },
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, state }
    }

    pub fn fail_first(&self, path: &str, n: usize) {
        self.state
            .lock()
            .unwrap()
            .fail_first
            .insert(path.to_string(), n);
    }

    pub fn got(&self, path: &str) -> Vec<Received> {
        self.state
            .lock()
            .unwrap()
            .got
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// Answer the `/held/...` requests waiting, and those to come.
    pub fn release(&self) {
        self.state.lock().unwrap().released = true;
    }

    pub fn in_flight(&self) -> usize {
        self.state.lock().unwrap().in_flight
    }
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// Whether the signature verifies for `body` under `secret`.
    pub fn verifies(&self, secret: &str, body: &[u8]) -> bool {
        let expected =
            hale::notify::signature(secret.as_bytes(), self.header("X-Hale-Timestamp"), body);
        expected == self.header("X-Hale-Signature")
    }
}

/// Wait until the hale at `url` answers `/healthz` with success (20 s at most).
pub async fn wait_healthy(url: &str) {
    let health = format!("{url}/healthz");
    eventually("hale healthy", Duration::from_secs(20), || async {
        reqwest::get(&health)
            .await
            .ok()?
            .status()
            .is_success()
            .then_some(())
    })
    .await;
}
