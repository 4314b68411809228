//! An in-process fake of the Kubernetes API server for exactly the endpoints hale
//! uses, speaking the real wire format and refusing what the real server refuses:
//! Nodes (LIST with a resourceVersion, WATCH as a stream of newline-delimited events
//! resumed from a resourceVersion, GET, and PATCH of the node and of its status as a
//! JSON merge patch or a strategic merge patch, with optimistic concurrency on
//! `metadata.resourceVersion`), the Pods on a node, their eviction under
//! PodDisruptionBudgets, Events, the workload owners of pods, the Cluster API
//! Machines and Karpenter NodeClaims behind nodes, and the Lease of the leader
//! election. Status errors carry the code, reason and details the real server
//! gives, because the kube client reads them. Every request is recorded with the
//! bearer token that made it, for the tests that hold the (verb, resource) pairs
//! against the Helm chart's RBAC and that tell hale's replicas apart.

// A refusal is the handler's finished answer (an axum `Response`), returned early
// from the checks every endpoint shares; its size is irrelevant in a test server.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, patch, post};
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

/// One request past authentication: the bearer token that made it ("" without
/// one), and the verb, resource (with its subresource) and name the API server's
/// RBAC sees in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub name: String,
}

/// A PodDisruptionBudget as the eviction subresource reads it.
struct Budget {
    match_labels: Map<String, Value>,
    allowed: u32,
}

#[derive(Default)]
struct Cluster {
    nodes: BTreeMap<String, Value>,
    /// One counter for every write, as etcd's revision is.
    version: u64,
    /// Every node change, for watches resumed from an older resourceVersion.
    log: Vec<(u64, Value)>,
    served: BTreeSet<(String, String)>,
    /// Apart: the chart grants leases in a namespaced Role, the rest cluster-wide.
    served_leases: BTreeSet<(String, String)>,
    requests: Vec<Request>,
    /// Tokens refused on Leases only (their Role taken away).
    lease_forbidden: BTreeSet<String>,
    /// Everything but nodes and events, by (resource, namespace or "", name).
    objects: BTreeMap<(String, String, String), Value>,
    budgets: BTreeMap<(String, String), Budget>,
    events: Vec<Value>,
    evicted: Vec<Value>,
    eviction_attempts: BTreeMap<(String, String), u32>,
    deleted: Vec<(String, String)>,
}

#[derive(Clone)]
pub struct FakeApi {
    pub url: String,
    state: Arc<Mutex<Cluster>>,
    changes: broadcast::Sender<(u64, Value)>,
}

/// A kind the fake stores besides Node, with what its URLs and messages name it by.
struct Kind {
    kind: &'static str,
    resource: &'static str,
    api_version: &'static str,
    namespaced: bool,
}

const KINDS: &[Kind] = &[
    Kind {
        kind: "Node",
        resource: "nodes",
        api_version: "v1",
        namespaced: false,
    },
    Kind {
        kind: "Pod",
        resource: "pods",
        api_version: "v1",
        namespaced: true,
    },
    Kind {
        kind: "Event",
        resource: "events",
        api_version: "v1",
        namespaced: true,
    },
    Kind {
        kind: "ReplicaSet",
        resource: "replicasets",
        api_version: "apps/v1",
        namespaced: true,
    },
    Kind {
        kind: "StatefulSet",
        resource: "statefulsets",
        api_version: "apps/v1",
        namespaced: true,
    },
    Kind {
        kind: "Job",
        resource: "jobs",
        api_version: "batch/v1",
        namespaced: true,
    },
    Kind {
        kind: "Machine",
        resource: "machines",
        api_version: "cluster.x-k8s.io/v1beta1",
        namespaced: true,
    },
    Kind {
        kind: "NodeClaim",
        resource: "nodeclaims",
        api_version: "karpenter.sh/v1",
        namespaced: false,
    },
    Kind {
        kind: "Lease",
        resource: "leases",
        api_version: "coordination.k8s.io/v1",
        namespaced: true,
    },
];

impl Kind {
    fn by_kind(kind: &str) -> &'static Kind {
        KINDS
            .iter()
            .find(|k| k.kind == kind)
            .unwrap_or_else(|| panic!("the fake API server does not serve kind {kind}"))
    }

    fn by_resource(resource: &str) -> &'static Kind {
        KINDS.iter().find(|k| k.resource == resource).unwrap()
    }

    fn group(&self) -> &'static str {
        self.api_version.split_once('/').map_or("", |(g, _)| g)
    }

    /// `replicasets.apps`, `pods`: how messages name the resource.
    fn qualified(&self) -> String {
        match self.group() {
            "" => self.resource.to_string(),
            g => format!("{}.{g}", self.resource),
        }
    }
}

const OPTIMISTIC_LOCK: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// A Kubernetes `Status` of a failure; `reason` "" is the real server's unknown
/// reason, left out as it leaves it out.
fn failure(code: StatusCode, reason: &str, message: &str, details: Option<Value>) -> Response {
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "code": code.as_u16(),
    });
    if !reason.is_empty() {
        body["reason"] = json!(reason);
    }
    if let Some(details) = details {
        body["details"] = details;
    }
    (code, axum::Json(body)).into_response()
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    failure(code, reason, message, None)
}

/// `details` naming the object a failure is about.
fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut d = json!({"name": name, "kind": kind});
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

fn not_found(k: &Kind, name: &str) -> Response {
    failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{} \"{name}\" not found", k.qualified()),
        Some(details(name, k.group(), k.resource)),
    )
}

fn already_exists(k: &Kind, name: &str) -> Response {
    failure(
        StatusCode::CONFLICT,
        "AlreadyExists",
        &format!("{} \"{name}\" already exists", k.qualified()),
        Some(details(name, k.group(), k.resource)),
    )
}

/// A 409 Conflict on `what` (a qualified resource, or a kind where the real server
/// names the kind), whose details name `group` and `kind` alike.
fn conflict(what: &str, group: &str, kind: &str, name: &str, why: &str) -> Response {
    failure(
        StatusCode::CONFLICT,
        "Conflict",
        &format!("Operation cannot be fulfilled on {what} \"{name}\": {why}"),
        Some(details(name, group, kind)),
    )
}

/// One field error of a validation, as the real server words and classifies it.
struct FieldError {
    field: String,
    cause: &'static str,
    body: String,
}

fn required(field: &str, detail: &str) -> FieldError {
    FieldError {
        field: field.into(),
        cause: "FieldValueRequired",
        body: match detail {
            "" => "Required value".into(),
            d => format!("Required value: {d}"),
        },
    }
}

/// `value` as Go's `%#v` shows it: strings quoted, numbers bare.
fn invalid(field: &str, value: &str, detail: &str) -> FieldError {
    FieldError {
        field: field.into(),
        cause: "FieldValueInvalid",
        body: format!("Invalid value: {value}: {detail}"),
    }
}

/// 422 Invalid for `errors` of `name`; `what` is the qualified kind the message names.
fn unprocessable(
    what: &str,
    group: &str,
    kind: &str,
    name: &str,
    errors: &[FieldError],
) -> Response {
    let each: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.body))
        .collect();
    let all = match &each[..] {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let mut d = details(name, group, kind);
    d["causes"] = errors
        .iter()
        .map(|e| json!({"reason": e.cause, "message": e.body, "field": e.field}))
        .collect();
    failure(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        &format!("{what} \"{name}\" is invalid: {all}"),
        Some(d),
    )
}

/// Something the real server accepts but this fake does not emulate: a loud 400
/// rather than an answer that would mislead the test.
fn unemulated(what: &str) -> Response {
    status(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        &format!("the fake API server does not emulate {what}"),
    )
}

/// The request's media type, without parameters such as `charset`.
fn media(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or("")
        .trim()
}

fn unsupported_media(media: &str, accepted: &str) -> Response {
    status(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UnsupportedMediaType",
        &format!(
            "the body of the request was in an unknown format - accepted media types include: {accepted} (got {media:?})"
        ),
    )
}

/// A create or update body: a JSON object (the real server also reads YAML and
/// protobuf; hale sends JSON).
fn json_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, Response> {
    let media = media(headers);
    if media != "application/json" {
        return Err(unsupported_media(
            media,
            "application/json, application/yaml, application/vnd.kubernetes.protobuf",
        ));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        _ => Err(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the body of the request is not a JSON object",
        )),
    }
}

/// What the API server checks of any body before the resource's own logic: its
/// apiVersion and kind when given (a missing one defaults to the endpoint's), and a
/// namespace agreeing with the URL's (filled in when missing).
fn check_body(
    obj: &mut Value,
    versions: &[&str],
    kind: &str,
    namespace: &str,
) -> Result<(), Response> {
    let bad = |m: String| Err(status(StatusCode::BAD_REQUEST, "BadRequest", &m));
    if let Some(v) = obj["apiVersion"].as_str()
        && !versions.contains(&v)
    {
        return bad(format!(
            "the API version in the data ({v}) does not match the expected API version ({})",
            versions[0]
        ));
    }
    if let Some(k) = obj["kind"].as_str()
        && k != kind
    {
        return bad(format!("a {k} is not a {kind}"));
    }
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() && ns != namespace => bad(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        ),
        _ => {
            obj["metadata"]["namespace"] = json!(namespace);
            Ok(())
        }
    }
}

/// A MicroTime as the real server decodes it (Go's RFC3339Micro): exactly six
/// fractional digits, then `Z` or an offset; anything else fails the decode.
fn micro_time_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let zone = b.get(26..).unwrap_or_default();
    s.get(..19)
        .is_some_and(|t| chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S").is_ok())
        && b.get(19) == Some(&b'.')
        && digits(20..26)
        && (zone == b"Z"
            || (zone.len() == 6
                && matches!(zone[0], b'+' | b'-')
                && digits(27..29)
                && zone[3] == b':'
                && digits(30..32)))
}

/// The MicroTime fields at `paths` of a `kind` body, decoded as the real server does.
fn micro_times(obj: &Value, paths: &[&str], kind: &str) -> Result<(), Response> {
    for path in paths {
        if let Some(t) = obj.pointer(path).and_then(Value::as_str)
            && !micro_time_ok(t)
        {
            return Err(status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!(
                    "{kind} in version \"v1\" cannot be handled as a {kind}: parsing time \"{t}\" as \"2006-01-02T15:04:05.000000Z07:00\""
                ),
            ));
        }
    }
    Ok(())
}

/// An RFC 1123 subdomain, as object names must be.
fn dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

fn name_error(name: &str) -> FieldError {
    invalid(
        "metadata.name",
        &json!(name).to_string(),
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    )
}

/// The name of a new object: `metadata.name`, or `metadata.generateName` with five
/// characters from the real generator's alphabet (its prefix cut to 58 as there).
fn new_name(obj: &Value, seed: u64) -> Option<String> {
    if let Some(name) = obj["metadata"]["name"].as_str().filter(|n| !n.is_empty()) {
        return Some(name.into());
    }
    let prefix = obj["metadata"]["generateName"]
        .as_str()
        .filter(|n| !n.is_empty())?;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let suffix: String = (0..5)
        .map(|_| {
            x ^= x >> 29;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            ALPHABET[(x % ALPHABET.len() as u64) as usize] as char
        })
        .collect();
    let cut = prefix
        .char_indices()
        .nth(58)
        .map_or(prefix.len(), |(i, _)| i);
    Some(format!("{}{suffix}", &prefix[..cut]))
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// RFC 7386: objects merge key by key, `null` deletes, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().unwrap();
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// A strategic merge patch as the API server applies it to a Node, for the one
/// list hale relies on: like a merge patch, except that `status.conditions` merges
/// by `type` and `{"$patch": "delete", "type": X}` removes X. Other lists replace
/// (the real Node also merges a few others hale does not write); other directives
/// are refused rather than stored as fields.
fn strategic(target: &mut Value, patch: &Value, path: &str) -> Result<(), Response> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().unwrap();
    for (k, v) in p {
        if k.starts_with('$') {
            return Err(unemulated(&format!("the strategic merge directive {k}")));
        }
        let here = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        if v.is_null() {
            t.remove(k);
        } else if here == "status.conditions" {
            merge_by_type(t.entry(k.clone()).or_insert(json!([])), v)?;
        } else {
            strategic(t.entry(k.clone()).or_insert(Value::Null), v, &here)?;
        }
    }
    Ok(())
}

fn merge_by_type(list: &mut Value, patch: &Value) -> Result<(), Response> {
    let Some(items) = patch.as_array() else {
        return Err(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "status.conditions in a strategic merge patch must be a list",
        ));
    };
    if !list.is_array() {
        *list = json!([]);
    }
    let list = list.as_array_mut().unwrap();
    for item in items {
        let Some(ctype) = item.get("type").and_then(Value::as_str) else {
            // The real server's error, an unclassified one: a 500 without a reason.
            return Err(status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "",
                &format!("map: {item} does not contain declared merge key: type"),
            ));
        };
        let at = list.iter().position(|c| c["type"] == ctype);
        match item.get("$patch").and_then(Value::as_str) {
            Some("delete") => {
                if let Some(i) = at {
                    list.remove(i);
                }
                continue;
            }
            Some(other) => return Err(unemulated(&format!("$patch: {other} in a list"))),
            None => {}
        }
        match at {
            Some(i) => strategic(&mut list[i], item, "status.conditions[]")?,
            None => {
                let mut fresh = json!({});
                strategic(&mut fresh, item, "status.conditions[]")?;
                list.push(fresh);
            }
        }
    }
    Ok(())
}

/// The verb, resource (with its subresource) and name RBAC sees in a request, as
/// the API server's RequestInfo resolves them.
fn request_info(method: &Method, path: &str, query: Option<&str>) -> (String, String, String) {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match &segments[..] {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    let (resource, name) = match rest {
        [] => (String::new(), ""),
        [r] => (r.to_string(), ""),
        [r, n] => (r.to_string(), *n),
        [r, n, sub, ..] => (format!("{r}/{sub}"), *n),
    };
    let watch = query.is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "watch" && (v == "true" || v == "1"))
    });
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if name.is_empty() => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if name.is_empty() => "deletecollection",
        Method::DELETE => "delete",
        ref other => return (other.as_str().to_lowercase(), resource, name.into()),
    };
    (verb.into(), resource, name.into())
}

/// Ahead of every endpoint: a token forbidden the Leases is refused there as RBAC
/// refuses it; anything else is recorded and served.
async fn gate(
    State(fake): State<FakeApi>,
    request: axum::extract::Request,
    next: Next,
) -> Response {
    let user = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string();
    let (verb, resource, name) = request_info(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    {
        let mut c = fake.state.lock().unwrap();
        if resource == "leases" && c.lease_forbidden.contains(&user) {
            return status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &format!(
                    "leases.coordination.k8s.io \"{name}\" is forbidden: User \"{user}\" cannot {verb} resource \"leases\" in API group \"coordination.k8s.io\""
                ),
            );
        }
        let pair = (verb.clone(), resource.clone());
        if resource == "leases" {
            c.served_leases.insert(pair);
        } else {
            c.served.insert(pair);
        }
        c.requests.push(Request {
            user,
            verb,
            resource,
            name,
        });
    }
    next.run(request).await
}

impl Cluster {
    fn bump(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    /// What a write to etcd gives an object: a new resourceVersion, and on its
    /// first write a uid, a creationTimestamp, and its apiVersion and kind.
    fn stamp(&mut self, k: &Kind, mut obj: Value) -> Value {
        let v = self.bump();
        if obj["kind"].is_null() {
            obj["apiVersion"] = json!(k.api_version);
            obj["kind"] = json!(k.kind);
        }
        let meta = &mut obj["metadata"];
        meta["resourceVersion"] = json!(v.to_string());
        if meta["uid"].as_str().is_none_or(str::is_empty) {
            meta["uid"] = json!(format!("00000000-0000-4000-8000-{v:012x}"));
        }
        if meta["creationTimestamp"].is_null() {
            meta["creationTimestamp"] = json!(now());
        }
        obj
    }

    fn key(k: &Kind, namespace: &str, name: &str) -> (String, String, String) {
        let namespace = if k.namespaced { namespace } else { "" };
        (k.resource.into(), namespace.into(), name.into())
    }

    /// Create or replace an object; a namespaced one without a namespace goes to
    /// `default`, as kubectl puts it.
    fn store(&mut self, k: &Kind, obj: Value) -> Value {
        let mut obj = self.stamp(k, obj);
        let meta = obj["metadata"].as_object_mut().unwrap();
        if !k.namespaced {
            meta.remove("namespace");
        } else if meta
            .get("namespace")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            meta.insert("namespace".into(), json!("default"));
        }
        let key = Cluster::key(
            k,
            meta.get("namespace").and_then(Value::as_str).unwrap_or(""),
            meta.get("name")
                .and_then(Value::as_str)
                .expect("an object has a name"),
        );
        self.objects.insert(key, obj.clone());
        obj
    }

    /// A Lease created, by POST or by a PUT of one that does not exist (leases
    /// allow create on update).
    fn create_lease(&mut self, ns: &str, mut lease: Value) -> Response {
        let k = Kind::by_kind("Lease");
        let Some(name) = new_name(&lease, self.version + 1) else {
            return unprocessable(
                "Lease.coordination.k8s.io",
                k.group(),
                k.kind,
                "",
                &[required(
                    "metadata.name",
                    "name or generateName is required",
                )],
            );
        };
        lease["metadata"]["name"] = json!(name);
        if let Err(r) = valid_lease(&lease) {
            return r;
        }
        if self.objects.contains_key(&Cluster::key(k, ns, &name)) {
            return already_exists(k, &name);
        }
        let lease = self.store(k, lease);
        (StatusCode::CREATED, axum::Json(lease)).into_response()
    }
}

/// The Kubernetes DeleteOptions preconditions, checked as the real server checks
/// them ahead of a delete: `Err` with the reason of the 409.
fn preconditions(options: &Value, obj: &Value) -> Result<(), String> {
    let meta = &obj["metadata"];
    let have = |field: &str| meta[field].as_str().unwrap_or("").to_string();
    if let Some(uid) = options["preconditions"]["uid"].as_str()
        && uid != have("uid")
    {
        return Err(format!(
            "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
            have("uid")
        ));
    }
    if let Some(rv) = options["preconditions"]["resourceVersion"].as_str()
        && rv != have("resourceVersion")
    {
        return Err(format!(
            "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
            have("resourceVersion")
        ));
    }
    Ok(())
}

fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// A GET of one object of `resource`, namespaced by the route's `{ns}` or not.
fn getter(resource: &'static str) -> MethodRouter<FakeApi> {
    get(
        move |State(fake): State<FakeApi>, Path(p): Path<BTreeMap<String, String>>| async move {
            let k = Kind::by_resource(resource);
            let key = Cluster::key(k, p.get("ns").map_or("", String::as_str), &p["name"]);
            match fake.state.lock().unwrap().objects.get(&key) {
                Some(obj) => axum::Json(obj.clone()).into_response(),
                None => not_found(k, &p["name"]),
            }
        },
    )
}

/// GET and DELETE of one object of `resource`.
fn getter_deleter(resource: &'static str) -> MethodRouter<FakeApi> {
    getter(resource).delete(
        move |State(fake): State<FakeApi>,
              Path(p): Path<BTreeMap<String, String>>,
              body: Bytes| async move {
            fake.delete_object(Kind::by_resource(resource), &p, &body)
        },
    )
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
            .route("/api/v1/nodes/{name}/status", patch(patch_node_status))
            .route("/api/v1/pods", get(list_pods))
            .route("/api/v1/namespaces/{ns}/pods/{name}/eviction", post(evict))
            .route("/api/v1/namespaces/{ns}/events", post(create_event))
            .route(
                "/apis/apps/v1/namespaces/{ns}/replicasets/{name}",
                getter("replicasets"),
            )
            .route(
                "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}",
                getter("statefulsets"),
            )
            .route("/apis/batch/v1/namespaces/{ns}/jobs/{name}", getter("jobs"))
            .route(
                "/apis/cluster.x-k8s.io/v1beta1/namespaces/{ns}/machines/{name}",
                getter_deleter("machines"),
            )
            .route(
                "/apis/karpenter.sh/v1/nodeclaims/{name}",
                getter_deleter("nodeclaims"),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                post(create_lease),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                getter("leases").put(update_lease),
            )
            .method_not_allowed_fallback(|| async {
                failure(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                    Some(json!({})),
                )
            })
            .fallback(|| async {
                failure(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    "the server could not find the requested resource",
                    Some(json!({})),
                )
            })
            .layer(axum::middleware::from_fn_with_state(fake.clone(), gate))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeApi { url, ..fake }
    }

    /// Create or replace a node, as the kubelet or `kubectl` would.
    pub fn put(&self, node: Value) {
        self.put_locked(&mut self.state.lock().unwrap(), node);
    }

    fn put_locked(&self, c: &mut Cluster, mut node: Value) -> Value {
        let v = c.bump();
        node["metadata"]["resourceVersion"] = json!(v.to_string());
        let name = node["metadata"]["name"].as_str().unwrap().to_string();
        let kind = if c.nodes.contains_key(&name) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        let event = json!({"type": kind, "object": node});
        c.nodes.insert(name, node.clone());
        c.log.push((v, event.clone()));
        let _ = self.changes.send((v, event));
        node
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

    /// The (verb, resource) pairs served, leases apart: what the chart's
    /// ClusterRole must grant.
    pub fn served(&self) -> BTreeSet<(String, String)> {
        self.state.lock().unwrap().served.clone()
    }

    /// The (verb, resource) pairs served on leases: what the chart's Role must grant.
    pub fn served_leases(&self) -> BTreeSet<(String, String)> {
        self.state.lock().unwrap().served_leases.clone()
    }

    /// Every request served, in order (refused tokens are not).
    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }

    /// From now on, refuse `token` every request on Leases (403), and nothing
    /// else: one replica that cannot renew while it still could write Nodes.
    pub fn forbid_leases(&self, token: &str) {
        self.state
            .lock()
            .unwrap()
            .lease_forbidden
            .insert(token.into());
    }

    /// Create or replace a pod, as its controller and the scheduler would.
    pub fn put_pod(&self, pod: Value) {
        assert!(
            pod["kind"].is_null() || pod["kind"] == "Pod",
            "not a Pod: {pod}"
        );
        self.state.lock().unwrap().store(Kind::by_kind("Pod"), pod);
    }

    /// Every pod, by namespace and name.
    pub fn pods(&self) -> Vec<Value> {
        let c = self.state.lock().unwrap();
        c.objects
            .iter()
            .filter(|((r, _, _), _)| r == "pods")
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Create or replace the PodDisruptionBudget `name` in `namespace` over the pods
    /// whose labels include `match_labels`, with `allowed` disruptions left. Its
    /// status reads 1 pod desired healthy and 1 currently healthy, so that, as on
    /// the real server, an unready pod leaves without spending the budget.
    pub fn pdb(&self, name: &str, namespace: &str, match_labels: Value, allowed: u32) {
        let Value::Object(match_labels) = match_labels else {
            panic!("matchLabels is a map: {match_labels}");
        };
        self.state.lock().unwrap().budgets.insert(
            (namespace.into(), name.into()),
            Budget {
                match_labels,
                allowed,
            },
        );
    }

    /// The pods evicted, as they were when deleted, in order.
    pub fn evicted(&self) -> Vec<Value> {
        self.state.lock().unwrap().evicted.clone()
    }

    /// The evictions asked of one pod, refused ones included.
    pub fn eviction_attempts(&self, namespace: &str, name: &str) -> u32 {
        let c = self.state.lock().unwrap();
        c.eviction_attempts
            .get(&(namespace.into(), name.into()))
            .copied()
            .unwrap_or(0)
    }

    /// The Events created, in order.
    pub fn events(&self) -> Vec<Value> {
        self.state.lock().unwrap().events.clone()
    }

    /// Create or replace an object of its `kind`: ReplicaSet, StatefulSet, Job,
    /// Machine, NodeClaim (or Pod, Lease). Namespaced ones default to `default`.
    pub fn put_object(&self, obj: Value) {
        let kind = obj["kind"].as_str().expect("an object has a kind");
        let k = Kind::by_kind(kind);
        assert!(
            !matches!(k.kind, "Node" | "Event"),
            "nodes go through put(), events through the API"
        );
        self.state.lock().unwrap().store(k, obj);
    }

    /// The object of `kind` named `name` (in `namespace` for namespaced kinds).
    pub fn object(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let key = Cluster::key(Kind::by_kind(kind), namespace.unwrap_or(""), name);
        self.state.lock().unwrap().objects.get(&key).cloned()
    }

    /// The (kind, name) of every delete accepted, in order. An object with
    /// finalizers stays, marked with a deletionTimestamp, as the real server leaves
    /// it for its controller to finish.
    pub fn deleted(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().deleted.clone()
    }

    pub fn lease(&self, ns: &str, name: &str) -> Option<Value> {
        self.object("Lease", Some(ns), name)
    }

    /// A DELETE as the real server answers it for an object without graceful
    /// deletion: the preconditions checked first, then removed at once (200 with the
    /// object), or, with finalizers, marked for deletion and kept. The garbage
    /// collector has no dependents to wait for here, so the propagation policy
    /// changes nothing.
    fn delete_object(&self, k: &Kind, p: &BTreeMap<String, String>, body: &Bytes) -> Response {
        let name = &p["name"];
        let options = if body.is_empty() {
            json!({})
        } else {
            match serde_json::from_slice::<Value>(body) {
                Ok(v) if v.is_object() => v,
                _ => {
                    return status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        "the DeleteOptions are not a JSON object",
                    );
                }
            }
        };
        if !options["dryRun"].is_null() {
            return unemulated("dryRun");
        }
        let mut c = self.state.lock().unwrap();
        let key = Cluster::key(k, p.get("ns").map_or("", String::as_str), name);
        let Some(mut obj) = c.objects.get(&key).cloned() else {
            return not_found(k, name);
        };
        if let Err(why) = preconditions(&options, &obj) {
            let what = match k.group() {
                "" => k.kind.to_string(),
                g => format!("{}.{g}", k.kind),
            };
            return conflict(&what, k.group(), k.kind, name, &why);
        }
        c.deleted.push((k.kind.into(), name.clone()));
        if obj["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
        {
            if obj["metadata"]["deletionTimestamp"].is_null() {
                obj["metadata"]["deletionTimestamp"] = json!(now());
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                obj = c.store(k, obj);
            }
            return axum::Json(obj).into_response();
        }
        c.objects.remove(&key);
        c.bump();
        axum::Json(obj).into_response()
    }

    /// The eviction subresource once the body is read: the pod, its one
    /// PodDisruptionBudget, the preconditions, then the DisruptionTarget condition
    /// and the delete, in the real server's order.
    fn evict_checked(&self, ns: &str, name: &str, eviction: &mut Value, dry_run: bool) -> Response {
        if let Err(r) = check_body(eviction, &["policy/v1", "policy/v1beta1"], "Eviction", ns) {
            return r;
        }
        if eviction["metadata"]["name"].as_str() != Some(name) {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "name in URL does not match name in Eviction object",
            );
        }
        let options = &eviction["deleteOptions"];
        if dry_run || !options["dryRun"].is_null() {
            return unemulated("dryRun");
        }
        let pods = Kind::by_kind("Pod");
        let mut c = self.state.lock().unwrap();
        let key = Cluster::key(pods, ns, name);
        let Some(mut pod) = c.objects.get(&key).cloned() else {
            return not_found(pods, name);
        };
        let settled = matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed" | "Pending")
        ) || !pod["metadata"]["deletionTimestamp"].is_null();
        if !settled {
            let labels = &pod["metadata"]["labels"];
            let budgets: Vec<String> = c
                .budgets
                .iter()
                .filter(|((bns, _), b)| {
                    bns == ns
                        && !b.match_labels.is_empty()
                        && b.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
                })
                .map(|((_, b), _)| b.clone())
                .collect();
            if budgets.len() > 1 {
                // Returned by the real server as a Status object, not an error: no reason.
                return status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                );
            }
            if let [budget] = &budgets[..]
                && pod_ready(&pod)
            {
                let b = c.budgets.get_mut(&(ns.into(), budget.clone())).unwrap();
                if b.allowed == 0 {
                    return failure(
                        StatusCode::TOO_MANY_REQUESTS,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        Some(json!({"causes": [{
                            "reason": "DisruptionBudget",
                            "message": format!("The disruption budget {budget} needs 1 healthy pods and has 1 currently"),
                        }]})),
                    );
                }
                b.allowed -= 1;
            }
        }
        if let Err(why) = preconditions(options, &pod) {
            return conflict("Pod", "", "Pod", name, &why);
        }
        let condition = json!({
            "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting", "lastTransitionTime": now(),
        });
        let conditions = &mut pod["status"]["conditions"];
        if !conditions.is_array() {
            *conditions = json!([]);
        }
        let conditions = conditions.as_array_mut().unwrap();
        match conditions
            .iter_mut()
            .find(|c| c["type"] == "DisruptionTarget")
        {
            Some(c) => *c = condition,
            None => conditions.push(condition),
        }
        // No kubelet here: the pod goes at once rather than after its grace period.
        let pod = c.store(pods, pod);
        c.objects.remove(&key);
        c.bump();
        c.evicted.push(pod);
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201,
        });
        (StatusCode::CREATED, axum::Json(body)).into_response()
    }
}

/// The 422 the API server answers for an invalid Lease, if it is one.
fn valid_lease(lease: &Value) -> Result<(), Response> {
    let errors = lease_errors(lease);
    if errors.is_empty() {
        return Ok(());
    }
    let k = Kind::by_kind("Lease");
    let name = lease["metadata"]["name"].as_str().unwrap_or("");
    Err(unprocessable(
        "Lease.coordination.k8s.io",
        k.group(),
        k.kind,
        name,
        &errors,
    ))
}

/// ValidateLease's checks of the fields hale writes.
fn lease_errors(lease: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = lease["metadata"]["name"].as_str().unwrap_or("");
    if !dns_subdomain(name) {
        errors.push(name_error(name));
    }
    let spec = &lease["spec"];
    if let Some(d) = spec["leaseDurationSeconds"].as_i64()
        && d <= 0
    {
        errors.push(invalid(
            "spec.leaseDurationSeconds",
            &d.to_string(),
            "must be greater than 0",
        ));
    }
    if let Some(t) = spec["leaseTransitions"].as_i64()
        && t < 0
    {
        errors.push(invalid(
            "spec.leaseTransitions",
            &t.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    errors
}

async fn list_or_watch(
    State(fake): State<FakeApi>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
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
    let c = fake.state.lock().unwrap();
    let body = json!({
        "kind": "NodeList", "apiVersion": "v1",
        "metadata": {"resourceVersion": c.version.to_string()},
        "items": c.nodes.values().collect::<Vec<_>>(),
    });
    axum::Json(body).into_response()
}

async fn get_node(State(fake): State<FakeApi>, Path(name): Path<String>) -> Response {
    match fake.state.lock().unwrap().nodes.get(&name) {
        Some(n) => axum::Json(n.clone()).into_response(),
        None => not_found(Kind::by_kind("Node"), &name),
    }
}

async fn patch_node(
    State(fake): State<FakeApi>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    patch_node_part(&fake, &name, &headers, &body, "status")
}

async fn patch_node_status(
    State(fake): State<FakeApi>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    patch_node_part(&fake, &name, &headers, &body, "spec")
}

/// A PATCH applied to the whole node, then the part this endpoint may not change
/// (`kept`) put back, as the API server's node strategies do: the node's own
/// endpoint keeps the status, the status subresource keeps the spec (and, as on the
/// real server, metadata does change through it). A patch that changes nothing
/// writes nothing: no new resourceVersion, no watch event.
fn patch_node_part(
    fake: &FakeApi,
    name: &str,
    headers: &HeaderMap,
    body: &Bytes,
    kept: &str,
) -> Response {
    let strategic_patch = match media(headers) {
        "application/merge-patch+json" => false,
        "application/strategic-merge-patch+json" => true,
        other => {
            return unsupported_media(
                other,
                "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml",
            );
        }
    };
    let patch = match serde_json::from_slice::<Value>(body) {
        Ok(p) if p.is_object() => p,
        _ => {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "the patch is not a JSON object",
            );
        }
    };
    let mut c = fake.state.lock().unwrap();
    let Some(old) = c.nodes.get(name).cloned() else {
        return not_found(Kind::by_kind("Node"), name);
    };
    if let Some(want) = patch["metadata"]["resourceVersion"].as_str()
        && Some(want) != old["metadata"]["resourceVersion"].as_str()
    {
        return conflict("nodes", "", "nodes", name, OPTIMISTIC_LOCK);
    }
    let mut node = old.clone();
    if strategic_patch {
        if let Err(r) = strategic(&mut node, &patch, "") {
            return r;
        }
    } else {
        merge(&mut node, &patch);
    }
    match old.get(kept) {
        Some(part) => node[kept] = part.clone(),
        None => {
            node.as_object_mut().unwrap().remove(kept);
        }
    }
    // The patch's resourceVersion, even a `null` one, was only a precondition.
    node["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    if node == old {
        return axum::Json(old).into_response();
    }
    axum::Json(fake.put_locked(&mut c, node)).into_response()
}

/// Pod field selectors the real server supports (less `status.podIPs`), and the
/// pod's value for one.
fn pod_field(pod: &Value, field: &str) -> Option<String> {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    Some(match field {
        "metadata.name" => text(&pod["metadata"]["name"]),
        "metadata.namespace" => text(&pod["metadata"]["namespace"]),
        "spec.nodeName" => text(&pod["spec"]["nodeName"]),
        "spec.restartPolicy" => text(&pod["spec"]["restartPolicy"]),
        "spec.schedulerName" => text(&pod["spec"]["schedulerName"]),
        "spec.serviceAccountName" => text(&pod["spec"]["serviceAccountName"]),
        "spec.hostNetwork" => pod["spec"]["hostNetwork"]
            .as_bool()
            .unwrap_or(false)
            .to_string(),
        "status.phase" => text(&pod["status"]["phase"]),
        "status.podIP" => text(&pod["status"]["podIP"]),
        "status.nominatedNodeName" => text(&pod["status"]["nominatedNodeName"]),
        _ => return None,
    })
}

async fn list_pods(
    State(fake): State<FakeApi>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let selector = q.get("fieldSelector").map_or("", String::as_str);
    let mut requirements = Vec::new();
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let requirement = if let Some((f, v)) = term.split_once("!=") {
            (f, false, v)
        } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            (f, true, v)
        } else {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("invalid selector: '{selector}'; can't understand '{term}'"),
            );
        };
        if pod_field(&json!({}), requirement.0).is_none() {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("field label not supported: {}", requirement.0),
            );
        }
        requirements.push(requirement);
    }
    let c = fake.state.lock().unwrap();
    let items: Vec<&Value> = c
        .objects
        .iter()
        .filter(|((r, _, _), _)| r == "pods")
        .map(|(_, p)| p)
        .filter(|p| {
            requirements
                .iter()
                .all(|(f, eq, v)| (pod_field(p, f).as_deref() == Some(*v)) == *eq)
        })
        .collect();
    let body = json!({
        "kind": "PodList", "apiVersion": "v1",
        "metadata": {"resourceVersion": c.version.to_string()},
        "items": items,
    });
    axum::Json(body).into_response()
}

async fn evict(
    State(fake): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    *fake
        .state
        .lock()
        .unwrap()
        .eviction_attempts
        .entry((ns.clone(), name.clone()))
        .or_default() += 1;
    let mut eviction = match json_body(&headers, &body) {
        Ok(e) => e,
        Err(r) => return r,
    };
    // The real server decodes with field validation "Warn": an unknown field (kube's
    // `Api::evict` sends `delete_options`) is ignored, with a warning.
    let warnings: Vec<String> = eviction
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| !["apiVersion", "kind", "metadata", "deleteOptions"].contains(&k.as_str()))
        .map(|k| format!("299 - \"unknown field \\\"{k}\\\"\""))
        .collect();
    let mut response = fake.evict_checked(&ns, &name, &mut eviction, q.contains_key("dryRun"));
    for w in warnings {
        response
            .headers_mut()
            .append(header::WARNING, HeaderValue::from_str(&w).unwrap());
    }
    response
}

/// A core/v1 Event as the real server validates it for that version, plus the
/// `involvedObject`, `reason` and `message` hale's events always carry.
async fn create_event(
    State(fake): State<FakeApi>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut event = match json_body(&headers, &body) {
        Ok(e) => e,
        Err(r) => return r,
    };
    if let Err(r) = check_body(&mut event, &["v1"], "Event", &ns) {
        return r;
    }
    if let Err(r) = micro_times(&event, &["/eventTime"], "Event") {
        return r;
    }
    let mut c = fake.state.lock().unwrap();
    let Some(name) = new_name(&event, c.version + 1) else {
        return unprocessable(
            "Event",
            "",
            "Event",
            "",
            &[required(
                "metadata.name",
                "name or generateName is required",
            )],
        );
    };
    event["metadata"]["name"] = json!(name);
    let text = |field: &str| event[field].as_str().unwrap_or("");
    let mut errors = Vec::new();
    if !event["involvedObject"].is_object() {
        errors.push(required("involvedObject", ""));
    }
    for field in ["reason", "message"] {
        if text(field).is_empty() {
            errors.push(required(field, ""));
        }
    }
    let involved_ns = event["involvedObject"]["namespace"].as_str().unwrap_or("");
    let ns_ok = if event["eventTime"].is_null() {
        // An event about a cluster-scoped object lives in "default".
        if involved_ns.is_empty() {
            ns == "default"
        } else {
            involved_ns == ns
        }
    } else {
        !involved_ns.is_empty() || ns == "default" || ns == "kube-system"
    };
    if !ns_ok {
        errors.push(invalid(
            "involvedObject.namespace",
            &json!(involved_ns).to_string(),
            "does not match event.namespace",
        ));
    }
    if !event["eventTime"].is_null() {
        // The newer form of event must say who reports it, and keep to lengths.
        for field in ["reportingComponent", "reportingInstance", "action"] {
            if text(field).is_empty() {
                errors.push(required(field, ""));
            }
        }
        for (field, limit) in [
            ("reportingInstance", 128),
            ("action", 128),
            ("reason", 128),
            ("message", 1024),
        ] {
            if text(field).len() > limit {
                errors.push(invalid(
                    field,
                    "\"\"",
                    &format!("can have at most {limit} characters"),
                ));
            }
        }
    }
    if !errors.is_empty() {
        return unprocessable("Event", "", "Event", &name, &errors);
    }
    let k = Kind::by_kind("Event");
    if c.events.iter().any(|e| {
        e["metadata"]["namespace"] == ns.as_str() && e["metadata"]["name"] == name.as_str()
    }) {
        return already_exists(k, &name);
    }
    let event = c.stamp(k, event);
    c.events.push(event.clone());
    (StatusCode::CREATED, axum::Json(event)).into_response()
}

/// A Lease in a create or update body, checked as the API server checks it.
fn lease_body(headers: &HeaderMap, body: &Bytes, ns: &str) -> Result<Value, Response> {
    let mut lease = json_body(headers, body)?;
    check_body(&mut lease, &["coordination.k8s.io/v1"], "Lease", ns)?;
    micro_times(&lease, &["/spec/acquireTime", "/spec/renewTime"], "Lease")?;
    Ok(lease)
}

async fn create_lease(
    State(fake): State<FakeApi>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let lease = match lease_body(&headers, &body, &ns) {
        Ok(l) => l,
        Err(r) => return r,
    };
    if lease["metadata"]["resourceVersion"]
        .as_str()
        .is_some_and(|v| !v.is_empty())
    {
        // etcd's refusal, which the real server passes on unclassified.
        return status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "",
            "resourceVersion should not be set on objects to be created",
        );
    }
    fake.state.lock().unwrap().create_lease(&ns, lease)
}

/// A PUT of a Lease: an update conditional on its resourceVersion (leases allow no
/// unconditional update), or a create when it does not exist.
async fn update_lease(
    State(fake): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut lease = match lease_body(&headers, &body, &ns) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let body_name = lease["metadata"]["name"].as_str().unwrap_or("");
    if body_name != name {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            ),
        );
    }
    let k = Kind::by_kind("Lease");
    let mut c = fake.state.lock().unwrap();
    let Some(old) = c.objects.get(&Cluster::key(k, &ns, &name)).cloned() else {
        lease["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        return c.create_lease(&ns, lease);
    };
    let meta = &mut lease["metadata"];
    if let Some(uid) = meta["uid"].as_str().filter(|u| !u.is_empty())
        && Some(uid) != old["metadata"]["uid"].as_str()
    {
        let why = format!(
            "StorageError: invalid object, Code: 4, Key: /registry/leases/{ns}/{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            old["metadata"]["uid"].as_str().unwrap_or("")
        );
        return conflict(&k.qualified(), k.group(), k.resource, &name, &why);
    }
    match meta["resourceVersion"].as_str().filter(|v| !v.is_empty()) {
        None => {
            return unprocessable(
                &k.qualified(),
                k.group(),
                k.resource,
                &name,
                &[invalid(
                    "metadata.resourceVersion",
                    "0x0",
                    "must be specified for an update",
                )],
            );
        }
        Some(v) if Some(v) != old["metadata"]["resourceVersion"].as_str() => {
            return conflict(
                &k.qualified(),
                k.group(),
                k.resource,
                &name,
                OPTIMISTIC_LOCK,
            );
        }
        Some(_) => {}
    }
    meta["uid"] = old["metadata"]["uid"].clone();
    meta["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
    if let Err(r) = valid_lease(&lease) {
        return r;
    }
    if lease == old {
        return axum::Json(old).into_response();
    }
    axum::Json(c.store(k, lease)).into_response()
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

/// A Running, Ready pod on `node`. With an `owner` (kind, name): a controller
/// ownerReference to it (uid `uid-<name>`) and the label `app: <name>`, as a
/// workload's pod template gives.
pub fn pod(
    namespace: &str,
    name: &str,
    node: &str,
    owner: Option<(&str, &str)>,
    annotations: Value,
) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    });
    if annotations.is_object() {
        pod["metadata"]["annotations"] = annotations;
    }
    if let Some((kind, owner)) = owner {
        let api_version = match kind {
            "ReplicaSet" | "StatefulSet" | "DaemonSet" => "apps/v1",
            "Job" => "batch/v1",
            _ => "v1",
        };
        pod["metadata"]["labels"] = json!({"app": owner});
        pod["metadata"]["ownerReferences"] = json!([{
            "apiVersion": api_version, "kind": kind, "name": owner,
            "uid": format!("uid-{owner}"), "controller": true, "blockOwnerDeletion": true,
        }]);
    }
    pod
}

fn write_kubeconfig(path: std::path::PathBuf, url: &str, user: &str) -> std::path::PathBuf {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\nusers:\n- name: hale\n  user: {user}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: hale\ncurrent-context: fake\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A kubeconfig pointing at the fake, without credentials.
pub fn kubeconfig(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    write_kubeconfig(dir.join("kubeconfig"), url, "{}")
}

/// A kubeconfig pointing at the fake with the bearer `token`: one replica's
/// identity in `requests()`, and what `forbid_leases` cuts off.
pub fn kubeconfig_as(dir: &std::path::Path, url: &str, token: &str) -> std::path::PathBuf {
    // A JSON string is a YAML string, whatever the token holds.
    let user = format!("{{token: {}}}", json!(token));
    write_kubeconfig(dir.join(format!("kubeconfig-{token}")), url, &user)
}
