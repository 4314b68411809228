//! `orchestrator: { kind: fuzzball }` (DESIGN §13): the inventory from Fuzzball's
//! public REST API (`GET /v4/nodes`, `GET /v4/nodes/{id}`), the actions through its
//! CLI (`fuzzball node drain [--active] --reason …`, `fuzzball node uncordon`),
//! which is how Fuzzball's own documentation takes nodes out of service. What the
//! public surface cannot do — a scheduling gate short of a cordon, terminating a
//! node's instance, failing a job rather than requeueing it — is refused, never
//! faked.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tracing::warn;

use crate::core::Status;
use crate::core::policy::{Done, Observed, OrchestratorHealth};
use crate::core::settings::de_duration;
use crate::orchestrator::{
    CommandFailed, Fut, Orchestrator, OrchestratorError, Report, Result, Workload, run_command,
};

/// `orchestrator: { kind: fuzzball, … }`: Fuzzball's own keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Config {
    /// `fuzzball`.
    pub kind: String,
    /// The API's base, with its version: `https://fuzzball.example.com/v4`.
    pub url: String,
    /// A bearer token for the API, read at every request (a rotated Secret is
    /// taken up without a reload).
    #[serde(deserialize_with = "crate::core::settings::de_present")]
    pub token_file: Option<PathBuf>,
    /// Trust only this CA for the API (PEM).
    #[serde(deserialize_with = "crate::core::settings::de_present")]
    pub ca_file: Option<PathBuf>,
    /// The `fuzzball` CLI, run without a shell; it uses its own login context.
    pub cli: PathBuf,
    /// One CLI run at most.
    #[serde(deserialize_with = "de_duration")]
    pub cli_timeout: Duration,
    /// One API request at most.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// What names a node in hale (and in the alerts): `hostName` (default) or
    /// Fuzzball's node `id`.
    pub node_name: NodeName,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum NodeName {
    #[default]
    HostName,
    Id,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            kind: "fuzzball".into(),
            url: String::new(),
            token_file: None,
            ca_file: None,
            cli: PathBuf::from("fuzzball"),
            cli_timeout: Duration::from_secs(120),
            timeout: Duration::from_secs(30),
            node_name: NodeName::HostName,
        }
    }
}

impl Config {
    /// The files this kind reads, by key.
    pub fn files(&self) -> Vec<(&'static str, &PathBuf)> {
        let token = self.token_file.iter().map(|p| ("tokenFile", p));
        let ca = self.ca_file.iter().map(|p| ("caFile", p));
        token.chain(ca).collect()
    }

    /// What serde cannot check; the error is (key under `orchestrator`, message).
    pub fn validate(&self) -> std::result::Result<(), (String, String)> {
        let fail = |key: &str, message: String| Err((key.to_string(), message));
        match reqwest::Url::parse(&self.url) {
            // Credentials belong in tokenFile: a URL's are sent as Basic, which the
            // API does not read, and a URL is shown in logs and the config.
            Ok(u) if !u.username().is_empty() || u.password().is_some() => {
                return fail(
                    "url",
                    "holds a user or password: the API takes a token, from orchestrator.tokenFile"
                        .into(),
                );
            }
            Ok(u) if u.query().is_some() || u.fragment().is_some() => {
                return fail(
                    "url",
                    "holds a query or fragment: the API's base is a path, like https://fuzzball.example.com/v4 (a token goes in orchestrator.tokenFile)".into(),
                );
            }
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => {
                return fail(
                    "url",
                    format!(
                        "`{}` is not the API's http(s) base, like https://fuzzball.example.com/v4{}",
                        crate::shown_address(&self.url),
                        crate::bracket_hint(&self.url)
                    ),
                );
            }
        }
        if let Some(p) = &self.token_file {
            crate::token_text(p).map_err(|e| ("tokenFile".to_string(), e))?;
        }
        if let Some(p) = &self.ca_file {
            if !self.url.starts_with("https://") {
                return fail(
                    "caFile",
                    "the API's url is not https: there is no certificate to check".into(),
                );
            }
            crate::certificates(p).map_err(|e| ("caFile".to_string(), e))?;
        }
        if self.cli.as_os_str().is_empty() {
            return fail("cli", "must name the fuzzball CLI".into());
        }
        // Found missing at run time, every cordon and drain would fail.
        if let Some(why) = crate::orchestrator::unrunnable(&self.cli) {
            return fail("cli", format!("{why} (hale acts on nodes through it)"));
        }
        for (key, d) in [("cliTimeout", self.cli_timeout), ("timeout", self.timeout)] {
            if d.is_zero() {
                return fail(key, "must be longer than 0".into());
            }
        }
        Ok(())
    }

    pub async fn connect(&self) -> std::result::Result<Arc<dyn Orchestrator>, String> {
        Ok(Arc::new(Fuzzball::new(self)?))
    }
}

/// The words of Fuzzball's refusal to drain a node that is not ready (the seed's).
const NOT_DRAINABLE: &str = "cannot be drained";

pub struct Fuzzball {
    http: reqwest::Client,
    base: reqwest::Url,
    token_file: Option<PathBuf>,
    cli: PathBuf,
    cli_timeout: Duration,
    node_name: NodeName,
    /// hale's name of each node → Fuzzball's id, as the last inventory listed them.
    ids: Mutex<HashMap<String, String>>,
    /// Running jobs per node, as the last inventory counted them.
    jobs: Mutex<HashMap<String, u32>>,
    /// Names more than one node had at the last inventory, with their ids (said
    /// once in the log).
    shared: Mutex<BTreeMap<String, Vec<String>>>,
    /// The reason of each node's cordon as this process sent it: an active drain
    /// after it says the same (Fuzzball keeps one reason, the last one given).
    reasons: Mutex<HashMap<String, String>>,
}

impl Fuzzball {
    pub fn new(cfg: &Config) -> std::result::Result<Fuzzball, String> {
        let mut builder = crate::http_client()
            .user_agent(crate::USER_AGENT)
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout.min(Duration::from_secs(5)));
        if let Some(ca) = &cfg.ca_file {
            builder = builder.tls_certs_only(crate::certificates(ca)?);
        }
        let mut base = reqwest::Url::parse(&cfg.url).map_err(|e| e.to_string())?;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        Ok(Fuzzball {
            http: builder.build().map_err(|e| crate::error_chain(&e))?,
            base,
            token_file: cfg.token_file.clone(),
            cli: cfg.cli.clone(),
            cli_timeout: cfg.cli_timeout,
            node_name: cfg.node_name,
            ids: Mutex::new(HashMap::new()),
            jobs: Mutex::new(HashMap::new()),
            shared: Mutex::new(BTreeMap::new()),
            reasons: Mutex::new(HashMap::new()),
        })
    }

    /// `GET <base>/<segments…>` as JSON; each segment percent-encoded (a node id
    /// may hold a `/`, as `10.0.0.42/9100` does).
    async fn get(&self, segments: &[&str]) -> Result<Value> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|_| OrchestratorError::refused("the API's url cannot take a path"))?
            .pop_if_empty()
            .extend(segments);
        let shown = crate::shown_url(&url);
        let mut request = self.http.get(url).header("accept", "application/json");
        // What the API says is repeated without the token, in any form: a proxy
        // in front of it may echo the request it refused.
        let mut secrets = crate::redact::Secrets::new();
        // Read each time: API tokens expire, and the Secret that holds one is
        // rotated under the running hale.
        if let Some(file) = &self.token_file {
            let token = crate::token_text(file)
                .map_err(|e| OrchestratorError::transient(format!("tokenFile: {e}")))?;
            secrets.add(&token);
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| {
            OrchestratorError::transient(format!(
                "{shown}: {}",
                crate::error_chain(&e.without_url())
            ))
        })?;
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            // 401: no valid token (none sent, wrong, or expired: the file is read
            // again at the next request); 403: a valid one without the permission.
            let why = match (
                &self.token_file,
                status == reqwest::StatusCode::UNAUTHORIZED,
            ) {
                (None, _) => {
                    "the Fuzzball API wants a token: set orchestrator.tokenFile".to_string()
                }
                (Some(p), true) => format!(
                    "the Fuzzball API refused the token in {} (wrong or expired)",
                    p.display()
                ),
                (Some(p), false) => format!(
                    "the token in {} is valid but lacks the permission for this request",
                    p.display()
                ),
            };
            return Err(OrchestratorError::refused(format!(
                "{shown}: {status}: {why}"
            )));
        }
        let body = response.bytes().await.map_err(|e| {
            OrchestratorError::transient(format!(
                "{shown}: {}",
                crate::error_chain(&e.without_url())
            ))
        })?;
        if !status.is_success() {
            // google.rpc.Status: {code, message, details}.
            let said = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_default();
            let e = format!("{shown}: {status}: {}", secrets.scrub(&said));
            return Err(if status.is_server_error() || status.as_u16() == 429 {
                OrchestratorError::transient(e)
            } else {
                OrchestratorError::refused(e)
            });
        }
        serde_json::from_slice(&body).map_err(|e| {
            OrchestratorError::refused(format!(
                "{shown}: not a JSON answer: {}",
                crate::redact::unquoted(&e.to_string())
            ))
        })
    }

    /// The id Fuzzball knows `node` by (its name where the inventory has not
    /// listed it). One the CLI would read as an option (`--all`: a name an alert
    /// gave) is refused, never passed.
    fn id_of(&self, node: &str, op: &'static str) -> Result<String> {
        let id = self
            .ids
            .lock()
            .expect("ids lock")
            .get(node)
            .cloned()
            .unwrap_or_else(|| node.to_string());
        if id.is_empty() || id.starts_with('-') {
            return Err(OrchestratorError::refused(format!(
                "`{id}` is not a node id: the fuzzball CLI would read it as an option, so hale passes nothing"
            ))
            .during(node, op));
        }
        Ok(id)
    }

    /// Run `fuzzball node ARGS…` (no shell); its standard output.
    async fn cli(&self, args: &[&str]) -> Result<String> {
        let mut command = tokio::process::Command::new(&self.cli);
        command.arg("node").args(args);
        let shown = format!("{} node {}", self.cli.display(), args.join(" "));
        run_command(command, &shown, self.cli_timeout)
            .await
            .map_err(|failed| match failed {
                CommandFailed::Error(e) => e,
                // A node Fuzzball will not drain is a refusal, not something to retry.
                CommandFailed::Exited { message, stderr }
                    if stderr.contains(NOT_DRAINABLE) || stderr.contains("not found") =>
                {
                    OrchestratorError::refused(message)
                }
                CommandFailed::Exited { message, .. } => OrchestratorError::transient(message),
            })
    }

    /// Warn of the names that more than one node of Fuzzball's has, once for each
    /// set of ids (every round would fill the log).
    fn say_shared(
        &self,
        shared: &BTreeMap<String, Vec<String>>,
        named: &BTreeMap<String, (Observed, String)>,
    ) {
        let mut said = self.shared.lock().expect("shared lock");
        if *said == *shared {
            return;
        }
        for (name, ids) in shared {
            if said.get(name) != Some(ids) {
                let kept = named.get(name).map_or("", |(_, id)| id.as_str());
                warn!(
                    node = %name, ids = %ids.join(", "), kept,
                    "Fuzzball lists more than one node under this name: hale keeps one (the one it had, else the first listed) and leaves the others out; name nodes by id (orchestrator.nodeName: id) or give each its own hostName"
                );
            }
        }
        *said = shared.clone();
    }

    /// One listed node as hale's policy sees it.
    fn observed(&self, n: &Value) -> Option<(Observed, String)> {
        let text = |k: &str| n.get(k).and_then(Value::as_str).unwrap_or_default();
        let id = text("id");
        if id.is_empty() {
            return None;
        }
        let host = text("hostName");
        let name = match self.node_name {
            NodeName::HostName if !host.is_empty() => host,
            _ => id,
        };
        let status = match text("status") {
            "NODE_STATUS_READY" => Status::Ready,
            "NODE_STATUS_CORDONED" => Status::Cordoned,
            "NODE_STATUS_OFFLINE" => Status::Offline,
            _ => Status::NotReady,
        };
        let mut labels: BTreeMap<String, String> = n
            .pointer("/resource/annotations")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        for (label, key) in [
            ("fuzzball.io/definition", "definitionId"),
            ("fuzzball.io/cluster", "clusterId"),
        ] {
            if !text(key).is_empty() {
                labels.insert(label.into(), text(key).into());
            }
        }
        // int64 arrives as a number, or as a string from grpc-gateway.
        let number =
            |v: Option<&Value>| v.and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()));
        let jobs = number(n.get("runningJobs")).map(|j| j.min(u64::from(u32::MAX)) as u32);
        let health = match text("healthState") {
            "" | "NODE_HEALTH_STATE_UNSPECIFIED" => None,
            s => Some(
                s.trim_start_matches("NODE_HEALTH_STATE_")
                    .to_ascii_lowercase(),
            ),
        };
        let score = number(n.get("reliabilityScore")).map(|s| s.min(100) as u8);
        let observed = Observed {
            id: name.to_string(),
            uid: Some(id.to_string()),
            hostname: (!host.is_empty()).then(|| host.to_string()),
            status,
            labels,
            provisioned: !text("definitionId").is_empty(),
            allocations: jobs,
            // Fuzzball keeps no record of who drained a node: hale's own books say
            // which cordons are its own; any other is the operator's.
            cordoned_by: None,
            gated: None,
            evicted: None,
            not_ready: matches!(status, Status::NotReady | Status::Offline),
            released: false,
            orchestrator_health: (health.is_some() || score.is_some()).then(|| {
                OrchestratorHealth {
                    state: health.unwrap_or_else(|| "unknown".into()),
                    score,
                }
            }),
            version: None,
            before: None,
        };
        Some((observed, id.to_string()))
    }
}

impl Orchestrator for Fuzzball {
    fn fails_work(&self) -> bool {
        false
    }

    fn restart_hint(&self) -> &'static str {
        "Fuzzball requeues every job of a node it drains actively: make work safe to run again from the beginning"
    }

    // Fuzzball computes its own health; its public API takes none from outside.
    fn publishes(&self) -> bool {
        false
    }

    fn publish<'a>(&'a self, _: &'a [Report]) -> Fut<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn inventory(&self) -> Fut<'_, Option<Vec<Observed>>> {
        Box::pin(async {
            let answer = self
                .get(&["nodes"])
                .await
                .map_err(|e| e.doing("inventory"))?;
            let listed = answer
                .get("nodes")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut named: BTreeMap<String, (Observed, String)> = BTreeMap::new();
            let mut shared: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for n in &listed {
                let Some((o, id)) = self.observed(n) else {
                    continue;
                };
                match named.get_mut(&o.id) {
                    None => {
                        named.insert(o.id.clone(), (o, id));
                    }
                    // Two machines under one name: the alerts naming it cannot
                    // say which they are about. The one hale had keeps the name
                    // (else the first listed), so the node is not retired and
                    // made anew at every round.
                    Some(kept) => {
                        let ids = shared
                            .entry(o.id.clone())
                            .or_insert_with(|| vec![kept.1.clone()]);
                        ids.push(id.clone());
                        let had = self.ids.lock().expect("ids lock").get(&o.id) == Some(&id);
                        if had {
                            *kept = (o, id);
                        }
                    }
                }
            }
            self.say_shared(&shared, &named);
            let mut ids = HashMap::new();
            let mut jobs = HashMap::new();
            let mut nodes = Vec::new();
            for (name, (o, id)) in named {
                jobs.insert(name.clone(), o.allocations.unwrap_or(0));
                ids.insert(name, id);
                nodes.push(o);
            }
            *self.ids.lock().expect("ids lock") = ids;
            *self.jobs.lock().expect("jobs lock") = jobs;
            Ok(Some(nodes))
        })
    }

    fn cordon<'a>(&'a self, node: &'a str, by: &'a str, reason: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            let id = self.id_of(node, "cordon")?;
            let reason = format!("{by}: {reason}");
            self.cli(&["drain", &id, "--reason", &reason])
                .await
                .map_err(|e| e.during(node, "cordon"))?;
            self.reasons
                .lock()
                .expect("reasons lock")
                .insert(node.to_string(), reason);
            Ok(())
        })
    }

    fn uncordon<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            let id = self.id_of(node, "uncordon")?;
            self.cli(&["uncordon", &id])
                .await
                .map_err(|e| e.during(node, "uncordon"))?;
            self.reasons.lock().expect("reasons lock").remove(node);
            Ok(())
        })
    }

    fn gate<'a>(&'a self, node: &'a str, _on: bool) -> Fut<'a, ()> {
        Box::pin(async move {
            Err(OrchestratorError::refused(
                "Fuzzball's public surface has no scheduling gate short of a cordon",
            )
            .during(node, "gate"))
        })
    }

    fn drain<'a>(&'a self, node: &'a str, active: bool) -> Fut<'a, Done> {
        Box::pin(async move {
            if !active {
                // The cordon before it is the whole of a passive drain.
                return Ok(Done::default());
            }
            let id = self.id_of(node, "drain")?;
            let running = self.jobs.lock().expect("jobs lock").get(node).copied();
            let reason = self
                .reasons
                .lock()
                .expect("reasons lock")
                .get(node)
                .cloned()
                .unwrap_or_else(|| "hale: active drain".into());
            self.cli(&["drain", &id, "--active", "--reason", &reason])
                .await
                .map_err(|e| e.during(node, "drain"))?;
            Ok(Done {
                moved: running.unwrap_or(0),
                ..Done::default()
            })
        })
    }

    fn workloads<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<Workload>> {
        Box::pin(async move {
            let id = self.id_of(node, "workloads")?;
            let detail = self
                .get(&["nodes", &id])
                .await
                .map_err(|e| e.during(node, "workloads"))?;
            let jobs = detail
                .get("runningJobs")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            Ok(jobs
                .iter()
                .filter_map(|j| {
                    let job = j.get("jobId")?.as_str()?.to_string();
                    let owner = j
                        .get("workflowId")
                        .and_then(Value::as_str)
                        .filter(|w| !w.is_empty())
                        .map_or_else(|| job.clone(), |w| format!("workflow/{w}"));
                    // An active drain requeues every job: each may restart.
                    Some(Workload {
                        id: job,
                        owner,
                        restart_on_node_fault: true,
                        uid: None,
                    })
                })
                .collect())
        })
    }

    fn evict<'a>(
        &'a self,
        node: &'a str,
        fault: &'a str,
        _moved: &'a [&'a Workload],
        _failed: &'a [&'a Workload],
        _message: &'a str,
    ) -> Fut<'a, Vec<String>> {
        Box::pin(async move {
            let id = self.id_of(node, "evict")?;
            let reason = format!("hale: {fault}");
            self.cli(&["drain", &id, "--active", "--reason", &reason])
                .await
                .map_err(|e| e.during(node, "evict"))?;
            Ok(Vec::new())
        })
    }

    fn terminate<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            Err(OrchestratorError::refused(
                "Fuzzball's public API names no provisioner instance for a node, so hale cannot terminate one",
            )
            .during(node, "terminate"))
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fuzzball(node_name: NodeName) -> Fuzzball {
        Fuzzball::new(&Config {
            url: "http://127.0.0.1:9/v4".into(),
            node_name,
            ..Config::default()
        })
        .unwrap()
    }

    /// A node named like an option (an alert's, not one Fuzzball lists) is never
    /// handed to the CLI, whatever the verb.
    #[tokio::test]
    async fn a_name_the_cli_would_read_as_an_option_is_refused() {
        let fz = fuzzball(NodeName::HostName);
        let refusals = [
            fz.cordon("--all", "hale", "x").await.unwrap_err(),
            fz.uncordon("-a").await.unwrap_err(),
            fz.drain("--all", true).await.unwrap_err(),
        ];
        for e in refusals {
            assert_eq!(e.metric_label(), "refused", "{e}");
            assert!(e.to_string().contains("not a node id"), "{e}");
        }
    }

    /// An API (or the proxy before it) that refuses with the request's
    /// `Authorization` header in its message: what hale says of it holds no
    /// token, whole or bare.
    #[tokio::test]
    async fn what_the_api_echoes_of_the_token_is_blanked() {
        use axum::http::{HeaderMap, StatusCode};
        let app = axum::Router::new().route(
            "/v4/nodes",
            axum::routing::get(|headers: HeaderMap| async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let message = format!(
                    "received headers: authorization: {auth}; token {}",
                    auth.trim_start_matches("Bearer ")
                );
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    axum::Json(json!({"code": 13, "message": message})),
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "CANARY-fb-4d4d\n").unwrap();
        let fz = Fuzzball::new(&Config {
            url: format!("http://{addr}/v4"),
            token_file: Some(token),
            ..Config::default()
        })
        .unwrap();
        let e = fz.inventory().await.unwrap_err().to_string();
        assert!(e.contains("500"), "{e}");
        assert!(e.contains("authorization: ***"), "{e}");
        assert!(!e.contains("CANARY"), "{e}");
    }

    #[test]
    fn listed_nodes_map_to_hale_s_view() {
        let fz = fuzzball(NodeName::HostName);
        let statuses = [
            ("NODE_STATUS_READY", Status::Ready, false),
            ("NODE_STATUS_CORDONED", Status::Cordoned, false),
            ("NODE_STATUS_OFFLINE", Status::Offline, true),
            ("NODE_STATUS_NOT_READY", Status::NotReady, true),
            ("NODE_STATUS_UNSPECIFIED", Status::NotReady, true),
        ];
        for (wire, status, not_ready) in statuses {
            let (o, id) = fz
                .observed(&json!({"id": "fz-1", "hostName": "c1", "status": wire}))
                .unwrap();
            assert_eq!(
                (o.status, o.not_ready, id.as_str()),
                (status, not_ready, "fz-1"),
                "{wire}"
            );
        }
        let (o, _) = fz
            .observed(&json!({
                "id": "fz-2", "hostName": "c2", "status": "NODE_STATUS_READY",
                "runningJobs": "3", "definitionId": "gpu-h200", "clusterId": "default",
                "resource": {"annotations": {"pool": "gpu"}},
                "healthState": "NODE_HEALTH_STATE_DEGRADED", "reliabilityScore": 55
            }))
            .unwrap();
        assert_eq!(o.id, "c2");
        assert_eq!(
            o.allocations,
            Some(3),
            "int64 as a string, as grpc-gateway sends it"
        );
        assert!(o.provisioned);
        assert_eq!(o.labels["pool"], "gpu");
        assert_eq!(o.labels["fuzzball.io/definition"], "gpu-h200");
        assert_eq!(
            o.orchestrator_health,
            Some(OrchestratorHealth {
                state: "degraded".into(),
                score: Some(55)
            })
        );
        // Unscored and unknown to health tracking: nothing of Fuzzball's to show.
        let (o, _) = fz
            .observed(&json!({"id": "fz-3", "status": "NODE_STATUS_READY"}))
            .unwrap();
        assert_eq!(o.id, "fz-3", "no hostName: named by its id");
        assert_eq!(o.orchestrator_health, None);
        assert_eq!(o.allocations, None);
        assert!(
            fz.observed(&json!({"hostName": "x"})).is_none(),
            "no id, no node"
        );
        let by_id = fuzzball(NodeName::Id);
        let (o, _) = by_id
            .observed(
                &json!({"id": "10.0.0.42/9100", "hostName": "c4", "status": "NODE_STATUS_READY"}),
            )
            .unwrap();
        assert_eq!(o.id, "10.0.0.42/9100");
    }
}
