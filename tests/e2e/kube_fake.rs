//! An in-process fake of the Kubernetes API server for exactly the Node endpoints
//! hale uses, speaking the real wire format: LIST with a resourceVersion, WATCH as a
//! stream of newline-delimited events resumed from a resourceVersion, GET, and PATCH
//! as a JSON merge patch only (other patch types are refused as the real server
//! refuses an unsupported media type), with optimistic concurrency on
//! `metadata.resourceVersion` (409 when stale). Every (verb, resource) it served is
//! recorded, for the test that holds them against the Helm chart's ClusterRole.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::broadcast;

#[derive(Default)]
struct Cluster {
    nodes: BTreeMap<String, Value>,
    version: u64,
    /// Every change, for watches resumed from an older resourceVersion.
    log: Vec<(u64, Value)>,
    served: BTreeSet<(String, String)>,
}

#[derive(Clone)]
pub struct FakeApi {
    pub url: String,
    state: Arc<Mutex<Cluster>>,
    changes: broadcast::Sender<(u64, Value)>,
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

/// RFC 7386: objects merge key by key, `null` deletes, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

impl FakeApi {
    /// Serve `nodes` (Node objects) on a free port.
    pub async fn start(nodes: Vec<Value>) -> FakeApi {
        let (changes, _) = broadcast::channel(1024);
        let fake = FakeApi {
            url: String::new(),
            state: Arc::default(),
            changes,
        };
        for node in nodes {
            fake.put(node);
        }
        let app = axum::Router::new()
            .route("/api/v1/nodes", get(list_or_watch))
            .route("/api/v1/nodes/{name}", get(get_node).patch(patch_node))
            .fallback(|| async { status(StatusCode::NOT_FOUND, "NotFound", "no such endpoint") })
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeApi { url, ..fake }
    }

    /// Create or replace a node, as the kubelet or `kubectl` would.
    pub fn put(&self, mut node: Value) {
        let mut c = self.state.lock().unwrap();
        c.version += 1;
        let v = c.version;
        node["metadata"]["resourceVersion"] = json!(v.to_string());
        let name = node["metadata"]["name"].as_str().unwrap().to_string();
        let kind = if c.nodes.contains_key(&name) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        let event = json!({"type": kind, "object": node});
        c.nodes.insert(name, node);
        c.log.push((v, event.clone()));
        let _ = self.changes.send((v, event));
    }

    /// A change made by someone else (`kubectl cordon`): a merge patch, recorded as
    /// nothing hale was served.
    pub fn kubectl(&self, name: &str, patch: Value) {
        let mut node = self.node(name);
        merge(&mut node, &patch);
        self.put(node);
    }

    pub fn node(&self, name: &str) -> Value {
        self.state.lock().unwrap().nodes[name].clone()
    }

    /// The (verb, resource) pairs served to hale.
    pub fn served(&self) -> BTreeSet<(String, String)> {
        self.state.lock().unwrap().served.clone()
    }

    fn serve(&self, verb: &str, resource: &str) {
        self.state
            .lock()
            .unwrap()
            .served
            .insert((verb.into(), resource.into()));
    }
}

async fn list_or_watch(
    State(fake): State<FakeApi>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        fake.serve("watch", "nodes");
        let from: u64 = q
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        // Subscribe before reading the log so no change falls between the two.
        let live = fake.changes.subscribe();
        let backlog: Vec<(u64, Value)> = fake
            .state
            .lock()
            .unwrap()
            .log
            .iter()
            .filter(|(v, _)| *v > from)
            .cloned()
            .collect();
        let last = backlog.last().map_or(from, |(v, _)| *v);
        let line = |e: &Value| Ok::<_, std::io::Error>(Bytes::from(format!("{e}\n")));
        let backlog =
            futures::stream::iter(backlog.iter().map(|(_, e)| line(e)).collect::<Vec<_>>());
        let live = futures::stream::unfold((live, last), move |(mut rx, last)| async move {
            loop {
                match rx.recv().await {
                    Ok((v, e)) if v > last => return Some((line(&e), (rx, v))),
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        return Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(futures::StreamExt::chain(backlog, live)))
            .unwrap();
    }
    fake.serve("list", "nodes");
    let c = fake.state.lock().unwrap();
    let body = json!({
        "kind": "NodeList", "apiVersion": "v1",
        "metadata": {"resourceVersion": c.version.to_string()},
        "items": c.nodes.values().collect::<Vec<_>>(),
    });
    axum::Json(body).into_response()
}

async fn get_node(State(fake): State<FakeApi>, Path(name): Path<String>) -> Response {
    fake.serve("get", "nodes");
    match fake.state.lock().unwrap().nodes.get(&name) {
        Some(n) => axum::Json(n.clone()).into_response(),
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("nodes \"{name}\" not found"),
        ),
    }
}

async fn patch_node(
    State(fake): State<FakeApi>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if media != "application/merge-patch+json" {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {media:?})"
            ),
        );
    }
    fake.serve("patch", "nodes");
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "malformed JSON");
    };
    let mut node = {
        let c = fake.state.lock().unwrap();
        let Some(node) = c.nodes.get(&name) else {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("nodes \"{name}\" not found"),
            );
        };
        node.clone()
    };
    if let Some(want) = patch["metadata"]["resourceVersion"].as_str()
        && Some(want) != node["metadata"]["resourceVersion"].as_str()
    {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on nodes \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        );
    }
    merge(&mut node, &patch);
    fake.put(node);
    axum::Json(fake.node(&name)).into_response()
}

/// A Ready node named `name` with `labels`.
pub fn ready_node(name: &str, labels: Value) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/hostname"] = json!(format!("{name}.example"));
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "uid": format!("uid-{name}")},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    })
}

/// A kubeconfig pointing at the fake, without credentials.
pub fn kubeconfig(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\nusers:\n- name: hale\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: hale\ncurrent-context: fake\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}
