//! An in-process fake of the Kubernetes API server for exactly the endpoints hale
//! uses, speaking the real wire format and refusing what the real server refuses:
//! Nodes (LIST, exact or not, at a resourceVersion; WATCH as a stream of
//! newline-delimited events resumed from a resourceVersion, ended after its timeout,
//! with bookmarks when asked, and `410 Gone` once its history is compacted; GET; and
//! PATCH of the node and of its status as a JSON patch, a JSON merge patch, a
//! strategic merge patch or a server-side apply, with optimistic concurrency on
//! `metadata.resourceVersion`), the Pods on a node, their eviction under
//! PodDisruptionBudgets and their graceful termination, Events, the workload owners
//! of pods, the Cluster API Machines and Karpenter NodeClaims behind nodes, and the
//! Lease of the leader election. Status errors carry the code, reason and details the
//! real server gives, because the kube client reads them. Every request is recorded
//! with the bearer token that made it, its User-Agent and how it was answered, for
//! the tests that hold the (verb, resource) pairs against the Helm chart's RBAC,
//! that tell hale's replicas apart and that see a conflict happen.

// A refusal is the handler's finished answer (an axum `Response`), returned early
// from the checks every endpoint shares; its size is irrelevant in a test server.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, patch, post};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

/// One request past authentication: the bearer token that made it ("" without
/// one), the verb, resource (with its subresource) and name the API server's RBAC
/// sees in it, the `User-Agent` it carried (its values joined by ", "; "" without
/// one), and the status code it was answered with (0 while it is being served).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub name: String,
    pub user_agent: String,
    pub status: u16,
}

/// A PodDisruptionBudget as the eviction subresource reads it.
struct Budget {
    match_labels: Map<String, Value>,
    allowed: u32,
}

/// An object besides nodes and events: (resource, namespace or "", name).
type Key = (String, String, String);

/// A change another writer makes to a node, as `on_next_get` takes it.
type Mutation = Box<dyn FnOnce(&mut Value) + Send>;

/// How the fake paces what the real server and the kubelets pace with clocks.
struct Timing {
    /// The longest a watch stays open (the client's `timeoutSeconds`, when shorter,
    /// ends it sooner).
    watch_timeout: Duration,
    /// How often a watch that allows bookmarks gets one.
    bookmarks: Duration,
    /// The part of its grace period a terminating pod waits out before its kubelet
    /// confirms it: 0 confirms at once, 1 waits the whole period.
    grace_scale: f64,
}

impl Default for Timing {
    /// Shorter than the real server's (`timeoutSeconds` of 290 s from kube's watcher,
    /// a bookmark a minute), so that a test of a minute sees its watches resumed; and
    /// kubelets whose containers stop at once on SIGTERM.
    fn default() -> Timing {
        Timing {
            watch_timeout: Duration::from_secs(10),
            bookmarks: Duration::from_secs(4),
            grace_scale: 0.0,
        }
    }
}

#[derive(Default)]
struct Cluster {
    nodes: BTreeMap<String, Value>,
    /// One counter for every write, as etcd's revision is.
    version: u64,
    /// Every node change since `compacted`, for watches resumed from a
    /// resourceVersion and lists at an exact one.
    log: Vec<(u64, Value)>,
    /// The revision the history was last compacted at: a watch or an exact list from
    /// before it is 410 Gone.
    compacted: u64,
    /// The nodes as they stood at `compacted`, where an exact list replays the log from.
    at_compaction: BTreeMap<String, Value>,
    /// How many compactions there were: a watch opened before the last one has lost
    /// its place in the history.
    compactions: u64,
    timing: Timing,
    /// Another writer's change to a node, made right after its next GET is served.
    on_get: BTreeMap<String, Mutation>,
    served: BTreeSet<(String, String)>,
    /// Apart: the chart grants leases in a namespaced Role, the rest cluster-wide.
    served_leases: BTreeSet<(String, String)>,
    requests: Vec<Request>,
    /// Tokens refused on Leases only (their Role taken away).
    lease_forbidden: BTreeSet<String>,
    /// Tokens refused every request on Nodes (a Role that lacks them).
    nodes_forbidden: BTreeSet<String>,
    /// Leases (namespace, name) another writer changes right before their next
    /// update is served.
    lease_races: BTreeSet<(String, String)>,
    /// Leases whose next update is answered with a 500, as an API server answers
    /// while etcd changes leader.
    lease_faults: BTreeSet<(String, String)>,
    /// Everything but nodes and events.
    objects: BTreeMap<Key, Value>,
    /// Terminating pods, and when their kubelet confirms each.
    terminating: BTreeMap<Key, Instant>,
    budgets: BTreeMap<(String, String), Budget>,
    events: Vec<Value>,
    evicted: Vec<Value>,
    eviction_attempts: BTreeMap<(String, String), u32>,
    eviction_times: BTreeMap<(String, String), Vec<Instant>>,
    deleted: Vec<(String, String)>,
    /// Namespaces being deleted: when the namespace controller deletes their
    /// pods, and whether it has.
    ending: BTreeMap<String, (Instant, bool)>,
    /// Pod lists served from the watch cache (`resourceVersion=0`), and read
    /// consistently.
    pod_lists: (usize, usize),
    /// What the next evictions meet before any pod is looked at, in order.
    eviction_faults: std::collections::VecDeque<EvictionFault>,
}

/// An eviction answered by the API server's own trouble, not the pod's.
#[derive(Clone, Copy, Debug)]
pub enum EvictionFault {
    /// API Priority and Fairness turning the request away: a 429 in plain text,
    /// no budget behind it, a `Retry-After` of a second.
    Throttled,
    /// A 500, as the server answers while etcd changes leader.
    Internal,
}

#[derive(Clone)]
pub struct FakeApi {
    pub url: String,
    state: Arc<Mutex<Cluster>>,
    /// Moved on by every node change and compaction, to wake the open watches.
    changes: watch::Sender<u64>,
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

/// A Kubernetes `Status` of a failure, as a body or a watch's ERROR event carries
/// it; `reason` "" is the real server's unknown reason, left out as it leaves it out.
fn status_body(code: StatusCode, reason: &str, message: &str, details: Option<Value>) -> Value {
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
    body
}

fn failure(code: StatusCode, reason: &str, message: &str, details: Option<Value>) -> Response {
    let body = status_body(code, reason, message, details);
    (code, axum::Json(body)).into_response()
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    failure(code, reason, message, None)
}

/// `details` naming the object a failure is about (an empty name left out, as the
/// real server leaves it out).
fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut d = json!({"kind": kind});
    if !name.is_empty() {
        d["name"] = json!(name);
    }
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

/// The 410 of a resourceVersion older than the history kept (the watch cache's
/// words: the version asked for, then the oldest it can serve from).
fn expired(rv: u64, compacted: u64) -> Value {
    status_body(
        StatusCode::GONE,
        "Expired",
        &format!("too old resource version: {rv} ({compacted})"),
        None,
    )
}

/// The 504 of a resourceVersion newer than any the server has issued.
fn too_large(rv: u64, current: u64) -> Value {
    status_body(
        StatusCode::GATEWAY_TIMEOUT,
        "Timeout",
        &format!("Timeout: Too large resource version: {rv}, current: {current}"),
        Some(json!({
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        })),
    )
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

fn forbidden(field: &str, detail: &str) -> FieldError {
    FieldError {
        field: field.into(),
        cause: "FieldValueForbidden",
        body: format!("Forbidden: {detail}"),
    }
}

/// A value outside `supported`, each quoted as Go quotes it.
fn not_supported(field: &str, value: &str, supported: &[&str]) -> FieldError {
    let supported: Vec<String> = supported.iter().map(|v| json!(v).to_string()).collect();
    FieldError {
        field: field.into(),
        cause: "FieldValueNotSupported",
        body: format!(
            "Unsupported value: {}: supported values: {}",
            json!(value),
            supported.join(", ")
        ),
    }
}

/// 422 Invalid for the options of a request (`ListOptions`, `PatchOptions`), which
/// the real server checks before it looks at any object.
fn invalid_options(kind: &str, errors: &[FieldError]) -> Response {
    unprocessable(
        &format!("{kind}.meta.k8s.io"),
        "meta.k8s.io",
        kind,
        "",
        errors,
    )
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
    in_seconds(0)
}

/// The time `seconds` from now, as the real server writes a Time.
fn in_seconds(seconds: i64) -> String {
    (chrono::Utc::now() + chrono::TimeDelta::seconds(seconds))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
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

/// An RFC 6902 JSON patch applied as the API server's json-patch library applies
/// it: every operation in order, or none. `Err` is that library's message, which the
/// server returns as the cause of a 422 (the wording of a few is approximate).
fn json_patch(doc: &mut Value, ops: &[Value]) -> Result<(), String> {
    let mut patched = doc.clone();
    for op in ops {
        let kind = op["op"].as_str().unwrap_or_default();
        let field = |name: &str| {
            op[name].as_str().ok_or_else(|| {
                format!("{kind} operation failed to decode {name}: operation missing {name} field")
            })
        };
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("{kind} operation has no value"))
        };
        match kind {
            "add" => pointer_add(&mut patched, field("path")?, value()?)?,
            "remove" => {
                pointer_remove(&mut patched, field("path")?, kind)?;
            }
            "replace" => {
                let path = field("path")?;
                let target = patched.pointer_mut(path).ok_or_else(|| {
                    format!("replace operation does not apply: doc is missing key: {path}: missing value")
                })?;
                *target = value()?;
            }
            "move" => {
                let (from, path) = (field("from")?, field("path")?);
                let moved = pointer_remove(&mut patched, from, kind)?;
                pointer_add(&mut patched, path, moved)?;
            }
            "copy" => {
                let (from, path) = (field("from")?, field("path")?);
                let copied = patched.pointer(from).cloned().ok_or_else(|| {
                    format!("copy operation does not apply: doc is missing from path: \"{from}\": missing value")
                })?;
                pointer_add(&mut patched, path, copied)?;
            }
            "test" => {
                let path = field("path")?;
                let found = patched.pointer(path).ok_or_else(|| {
                    format!("test operation does not apply: is missing path: {path}: missing value")
                })?;
                if *found != value()? {
                    return Err(format!("testing value {path} failed: test failed"));
                }
            }
            other => return Err(format!("Unexpected kind: {other}")),
        }
    }
    *doc = patched;
    Ok(())
}

/// A JSON pointer's parent and its last token, unescaped.
fn pointer_split(path: &str) -> Option<(&str, String)> {
    let (parent, last) = path.rsplit_once('/')?;
    Some((parent, last.replace("~1", "/").replace("~0", "~")))
}

/// RFC 6902 `add`: a member set, or an element inserted (`-` appends).
fn pointer_add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let missing =
        || format!("add operation does not apply: doc is missing path: \"{path}\": missing value");
    let (parent, key) = pointer_split(path).ok_or_else(missing)?;
    match doc.pointer_mut(parent).ok_or_else(missing)? {
        Value::Object(members) => {
            members.insert(key, value);
        }
        Value::Array(items) => {
            let at = match key.as_str() {
                "-" => items.len(),
                i => i
                    .parse::<usize>()
                    .ok()
                    .filter(|i| *i <= items.len())
                    .ok_or_else(|| {
                        format!("error in add for path: '{path}': Unable to access invalid index: {i}: invalid index referenced")
                    })?,
            };
            items.insert(at, value);
        }
        _ => return Err(missing()),
    }
    Ok(())
}

/// RFC 6902 `remove` (and the first half of `move`): the value taken out.
fn pointer_remove(doc: &mut Value, path: &str, kind: &str) -> Result<Value, String> {
    let missing = || {
        format!("{kind} operation does not apply: doc is missing path: \"{path}\": missing value")
    };
    let (parent, key) = pointer_split(path).ok_or_else(missing)?;
    let gone = match doc.pointer_mut(parent).ok_or_else(missing)? {
        Value::Object(members) => members.remove(&key),
        Value::Array(items) => key
            .parse::<usize>()
            .ok()
            .filter(|i| *i < items.len())
            .map(|i| items.remove(i)),
        _ => None,
    };
    gone.ok_or_else(|| {
        format!("error in {kind} for path: '{path}': unable to remove nonexistent key: {key}: missing value")
    })
}

/// What a server-side apply records of the fields the applied object names, in the
/// `FieldsV1` form of `managedFields`. Simplified: a list is owned whole, as an
/// atomic list is (the real server owns the items of a list keyed by a field, such as
/// the conditions by `type`, one by one).
fn fields_v1(applied: &Value) -> Value {
    match applied {
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (format!("f:{k}"), fields_v1(v)))
                .collect(),
        ),
        _ => json!({}),
    }
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
    let user_agent = request
        .headers()
        .get_all(header::USER_AGENT)
        .iter()
        .map(|v| v.to_str().unwrap_or("<not text>"))
        .collect::<Vec<_>>()
        .join(", ");
    let index = {
        let mut c = fake.state.lock().unwrap();
        if resource == "nodes" && c.nodes_forbidden.contains(&user) {
            return status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &format!(
                    "nodes is forbidden: User \"{user}\" cannot {verb} resource \"nodes\" in API group \"\" at the cluster scope"
                ),
            );
        }
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
            user_agent,
            status: 0,
        });
        c.requests.len() - 1
    };
    let response = next.run(request).await;
    fake.state.lock().unwrap().requests[index].status = response.status().as_u16();
    response
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

    fn key(k: &Kind, namespace: &str, name: &str) -> Key {
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

    /// The terminating pods whose kubelet has confirmed them by now leave.
    fn sweep(&mut self) {
        let now = Instant::now();
        // The namespace controller deletes an ending namespace's pods, gracefully.
        let due: Vec<String> = self
            .ending
            .iter_mut()
            .filter(|(_, (at, done))| !*done && *at <= now)
            .map(|(ns, (_, done))| {
                *done = true;
                ns.clone()
            })
            .collect();
        for ns in due {
            let pods: Vec<(Key, Value)> = self
                .objects
                .iter()
                .filter(|((resource, namespace, _), _)| resource == "pods" && *namespace == ns)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (key, pod) in pods {
                self.delete_pod(&key, pod, None);
            }
        }
        let done: Vec<Key> = self
            .terminating
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in done {
            self.terminating.remove(&key);
            self.objects.remove(&key);
            self.bump();
        }
    }

    /// A pod deleted, by DELETE or by an eviction, as the real pod registry deletes
    /// it: given `grace` seconds (a negative one is 1), else the pod's own
    /// `terminationGracePeriodSeconds` (30 unless set), and none for a pod never
    /// scheduled or already finished. With a grace period it is marked (its
    /// `deletionTimestamp` when the period ends, its `deletionGracePeriodSeconds`)
    /// and stays, terminating, until its kubelet confirms; without one it goes at
    /// once. A pod already terminating only has its period cut short by a shorter
    /// `grace`. Returns the pod as the delete left it, and whether it changed.
    fn delete_pod(&mut self, key: &Key, mut pod: Value, grace: Option<i64>) -> (Value, bool) {
        let grace = grace.map(|g| if g < 0 { 1 } else { g });
        let meta = &pod["metadata"];
        let period = if meta["deletionTimestamp"].is_null() {
            let unscheduled = pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty);
            let finished = matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            );
            let period = grace
                .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
                .unwrap_or(30);
            let period = if unscheduled || finished { 0 } else { period };
            pod["metadata"]["deletionTimestamp"] = json!(in_seconds(period));
            period
        } else {
            let current = meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0);
            match grace {
                // Marked without a grace period: deleted now, as the real server
                // recovers from a delete interrupted between its two writes.
                _ if current == 0 => 0,
                Some(shorter) if shorter < current => {
                    let ends = meta["deletionTimestamp"]
                        .as_str()
                        .and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok())
                        .unwrap_or_else(chrono::Utc::now)
                        - chrono::TimeDelta::seconds(current - shorter);
                    pod["metadata"]["deletionTimestamp"] =
                        json!(ends.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
                    shorter
                }
                _ => return (pod, false),
            }
        };
        pod["metadata"]["deletionGracePeriodSeconds"] = json!(period);
        let pod = self.store(Kind::by_kind("Pod"), pod);
        let left = pod["metadata"]["deletionTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok())
            .map_or(0.0, |t| {
                (t - chrono::Utc::now()).num_milliseconds().max(0) as f64 / 1000.0
            });
        let confirmed = if period == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(left * self.timing.grace_scale)
        };
        self.terminating
            .insert(key.clone(), Instant::now() + confirmed);
        self.sweep();
        (pod, true)
    }

    /// An object put by the test in place of whatever was there: a new one, so not
    /// terminating either.
    fn replace(&mut self, k: &Kind, obj: Value) {
        let obj = self.store(k, obj);
        let meta = &obj["metadata"];
        let key = Cluster::key(
            k,
            meta["namespace"].as_str().unwrap_or(""),
            meta["name"].as_str().unwrap_or(""),
        );
        self.terminating.remove(&key);
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
            let mut c = fake.state.lock().unwrap();
            c.sweep();
            match c.objects.get(&key) {
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
        let (changes, _) = watch::channel(0);
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
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}",
                getter_deleter("pods"),
            )
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

    /// Create or replace a node, as the kubelet or `kubectl` would. A new node gets
    /// a uid (and a creationTimestamp) unless it brings its own; a replaced one keeps
    /// its own, unless this one brings another: then it is a new node under the old
    /// name, the old one deleted and this one created, two events on the watch.
    pub fn put(&self, node: Value) {
        self.put_locked(&mut self.state.lock().unwrap(), node);
    }

    fn put_locked(&self, c: &mut Cluster, mut node: Value) -> Value {
        let name = node["metadata"]["name"].as_str().unwrap().to_string();
        let uid = node["metadata"]["uid"]
            .as_str()
            .filter(|u| !u.is_empty())
            .map(String::from);
        if let Some(old) = c.nodes.get(&name) {
            if uid.is_none() || uid.as_deref() == old["metadata"]["uid"].as_str() {
                return self.modify(c, node);
            }
            let old = c.nodes.remove(&name).unwrap();
            self.record(c, "DELETED", old);
        }
        let meta = &mut node["metadata"];
        if uid.is_none() {
            meta["uid"] = json!(format!("00000000-0000-4000-8000-{:012x}", c.version + 1));
        }
        if meta["creationTimestamp"].is_null() {
            meta["creationTimestamp"] = json!(now());
        }
        let node = self.record(c, "ADDED", node);
        c.nodes.insert(name, node.clone());
        node
    }

    /// An update of an existing node, which keeps its uid and creationTimestamp as
    /// the API server keeps them.
    fn modify(&self, c: &mut Cluster, mut node: Value) -> Value {
        let name = node["metadata"]["name"].as_str().unwrap().to_string();
        let old = &c.nodes[&name]["metadata"];
        node["metadata"]["uid"] = old["uid"].clone();
        node["metadata"]["creationTimestamp"] = old["creationTimestamp"].clone();
        let node = self.record(c, "MODIFIED", node);
        c.nodes.insert(name, node.clone());
        node
    }

    /// A node change written: the next revision on the object, the event in the
    /// history, and the open watches woken.
    fn record(&self, c: &mut Cluster, kind: &str, mut node: Value) -> Value {
        let v = c.bump();
        node["metadata"]["resourceVersion"] = json!(v.to_string());
        c.log.push((v, json!({"type": kind, "object": node})));
        self.changes.send_modify(|n| *n += 1);
        node
    }

    /// Delete a node, as `kubectl delete node` or a cloud's node controller would:
    /// a DELETED event on the watch carrying its last state at the new revision.
    pub fn delete_node(&self, name: &str) {
        let mut c = self.state.lock().unwrap();
        let node = c
            .nodes
            .remove(name)
            .unwrap_or_else(|| panic!("no node {name} to delete"));
        self.record(&mut c, "DELETED", node);
    }

    /// Compact the history up to the current revision, as etcd's compaction does:
    /// a watch resumed, or a list at an exact resourceVersion, from before it is
    /// 410 Gone from now on. Every watch open now loses its place too, and ends with
    /// an ERROR event carrying that 410, as the real server ends a watch whose
    /// position has left its history: a watching client must list again.
    pub fn compact(&self) {
        let mut c = self.state.lock().unwrap();
        c.at_compaction = c.nodes.clone();
        c.compacted = c.version;
        c.log.clear();
        c.compactions += 1;
        self.changes.send_modify(|n| *n += 1);
    }

    /// The longest a watch opened from now on stays open before the server ends it
    /// (the client then resumes from the last resourceVersion it saw). A client's
    /// shorter `timeoutSeconds` ends it sooner.
    pub fn set_watch_timeout(&self, timeout: Duration) {
        self.state.lock().unwrap().timing.watch_timeout = timeout;
    }

    /// How often a watch opened from now on that allows bookmarks gets one (and it
    /// gets one more as it ends).
    pub fn set_bookmark_interval(&self, every: Duration) {
        assert!(!every.is_zero(), "bookmarks need an interval");
        self.state.lock().unwrap().timing.bookmarks = every;
    }

    /// Right after the next GET of node `name` is served, another writer changes the
    /// node (at a new resourceVersion, as a concurrent `kubectl taint` would): a
    /// write conditional on what that GET returned then meets a genuine 409.
    pub fn on_next_get(&self, name: &str, mutation: impl FnOnce(&mut Value) + Send + 'static) {
        self.state
            .lock()
            .unwrap()
            .on_get
            .insert(name.into(), Box::new(mutation));
    }

    /// How long the kubelets take to confirm a terminating pod, as a part of its
    /// grace period: 0 (the default) at once, 1 the whole period, in real time.
    /// Pods already terminating keep the time they were given.
    pub fn set_grace_scale(&self, scale: f64) {
        assert!(scale >= 0.0, "a grace scale is not negative: {scale}");
        self.state.lock().unwrap().timing.grace_scale = scale;
    }

    /// Every terminating pod confirmed now, by its kubelet, and gone.
    pub fn finish_terminating(&self) {
        let mut c = self.state.lock().unwrap();
        for at in c.terminating.values_mut() {
            *at = Instant::now();
        }
        c.sweep();
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

    /// From now on, refuse `token` every request on Nodes (403): a ClusterRole
    /// that lacks them.
    pub fn forbid_nodes(&self, token: &str) {
        self.state
            .lock()
            .unwrap()
            .nodes_forbidden
            .insert(token.into());
    }

    /// Serve `token` on Leases again (its Role given back).
    pub fn allow_leases(&self, token: &str) {
        self.state.lock().unwrap().lease_forbidden.remove(token);
    }

    /// Right before the next update of the Lease `name` in `namespace` is served,
    /// another writer changes it (at a new resourceVersion, as a `kubectl annotate`
    /// would): an update conditional on the version read before meets a genuine 409.
    pub fn race_next_lease_update(&self, namespace: &str, name: &str) {
        self.state
            .lock()
            .unwrap()
            .lease_races
            .insert((namespace.into(), name.into()));
    }

    /// Answer the next update of the Lease `name` in `namespace` with a 500 (etcd
    /// changing leader under the API server), changing nothing.
    pub fn fail_next_lease_update(&self, namespace: &str, name: &str) {
        self.state
            .lock()
            .unwrap()
            .lease_faults
            .insert((namespace.into(), name.into()));
    }

    /// Create or replace a pod, as its controller and the scheduler would (its
    /// `terminationGracePeriodSeconds` defaulted to 30, as the real server defaults
    /// it). A pod replaced while terminating is a new pod, not terminating.
    pub fn put_pod(&self, mut pod: Value) {
        assert!(
            pod["kind"].is_null() || pod["kind"] == "Pod",
            "not a Pod: {pod}"
        );
        if pod["spec"]["terminationGracePeriodSeconds"].is_null() {
            pod["spec"]["terminationGracePeriodSeconds"] = json!(30);
        }
        self.state
            .lock()
            .unwrap()
            .replace(Kind::by_kind("Pod"), pod);
    }

    /// Delete a pod as its controller would (a ReplicaSet scaled down), gracefully
    /// over its own grace period, recorded as nothing hale was served.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        let key = Cluster::key(Kind::by_kind("Pod"), namespace, name);
        let mut c = self.state.lock().unwrap();
        c.sweep();
        let pod = c
            .objects
            .get(&key)
            .cloned()
            .unwrap_or_else(|| panic!("no pod {namespace}/{name} to delete"));
        c.delete_pod(&key, pod, None);
    }

    /// Every pod, by namespace and name, the terminating ones included.
    pub fn pods(&self) -> Vec<Value> {
        let mut c = self.state.lock().unwrap();
        c.sweep();
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

    /// Pod lists so far: (from the watch cache, read consistently).
    pub fn pod_lists(&self) -> (usize, usize) {
        self.state.lock().unwrap().pod_lists
    }

    /// `namespace` deleted: evictions in it are refused from now on, and the
    /// namespace controller deletes its pods `after` from now.
    pub fn end_namespace(&self, namespace: &str, after: Duration) {
        self.state
            .lock()
            .unwrap()
            .ending
            .insert(namespace.into(), (Instant::now() + after, false));
    }

    /// The next evictions, whatever their pod, each meet one of `faults` in turn.
    pub fn fault_evictions(&self, faults: &[EvictionFault]) {
        self.state
            .lock()
            .unwrap()
            .eviction_faults
            .extend(faults.iter().copied());
    }

    /// The pods evicted, as each eviction left them (marked for deletion, with the
    /// DisruptionTarget condition), in order; a pod evicted again while it
    /// terminates is not counted twice.
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

    /// When each eviction of one pod was asked, refused ones included, in order.
    pub fn eviction_times(&self, namespace: &str, name: &str) -> Vec<Instant> {
        let c = self.state.lock().unwrap();
        c.eviction_times
            .get(&(namespace.into(), name.into()))
            .cloned()
            .unwrap_or_default()
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
        self.state.lock().unwrap().replace(k, obj);
    }

    /// The object of `kind` named `name` (in `namespace` for namespaced kinds).
    pub fn object(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let key = Cluster::key(Kind::by_kind(kind), namespace.unwrap_or(""), name);
        let mut c = self.state.lock().unwrap();
        c.sweep();
        c.objects.get(&key).cloned()
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

    /// A DELETE as the real server answers it: the preconditions checked first; then
    /// a pod deleted gracefully (`Cluster::delete_pod`, its finalizers not
    /// emulated); any other object, without graceful deletion, removed at once (200
    /// with the object), or, with finalizers, marked for deletion and kept. The
    /// garbage collector has no dependents to wait for here, so the propagation
    /// policy changes nothing.
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
        c.sweep();
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
        if k.kind == "Pod" {
            let (pod, _) = c.delete_pod(&key, obj, options["gracePeriodSeconds"].as_i64());
            return axum::Json(pod).into_response();
        }
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
    /// and the graceful delete, in the real server's order. A pod already
    /// terminating skips the budget and, evicted again, is left as it is (201 all the
    /// same, as the real server answers: its delete is already pending).
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
        c.sweep();
        match c.eviction_faults.pop_front() {
            // As the real filter writes it (`http.Error`): plain text, the pause
            // in a header alone.
            Some(EvictionFault::Throttled) => {
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [
                        (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                        (header::RETRY_AFTER, "1"),
                    ],
                    "Too many requests, please try again later.\n",
                )
                    .into_response();
            }
            Some(EvictionFault::Internal) => {
                return status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "Internal error occurred: etcdserver: leader changed",
                );
            }
            None => {}
        }
        // NamespaceLifecycle admission, before the pod is looked for: nothing new
        // (an Eviction is created) in a namespace being deleted.
        if c.ending.contains_key(ns) {
            return failure(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &format!(
                    "pods \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated"
                ),
                Some(json!({"name": name, "kind": "pods", "causes": [{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace",
                }]})),
            );
        }
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
        // The condition is written only where it is not already there as the
        // eviction words it: evicting a terminating pod again changes nothing.
        let condition = json!({
            "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting", "lastTransitionTime": now(),
        });
        let conditions = &mut pod["status"]["conditions"];
        if !conditions.is_array() {
            *conditions = json!([]);
        }
        let conditions = conditions.as_array_mut().unwrap();
        let written = match conditions
            .iter_mut()
            .find(|c| c["type"] == "DisruptionTarget")
        {
            Some(c)
                if ["status", "reason", "message"]
                    .iter()
                    .all(|f| c[*f] == condition[*f]) =>
            {
                false
            }
            Some(c) => {
                *c = condition;
                true
            }
            None => {
                conditions.push(condition);
                true
            }
        };
        if written {
            pod = c.store(pods, pod);
        }
        let grace = options["gracePeriodSeconds"].as_i64();
        let (pod, deleted) = c.delete_pod(&key, pod, grace);
        if deleted {
            c.evicted.push(pod);
        }
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

/// One line of a watch stream.
fn line(event: &Value) -> String {
    format!("{event}\n")
}

/// A LIST of the nodes (at a resourceVersion, exact or not older) or a WATCH of them,
/// with the ListOptions checked first, as the real server checks them.
async fn list_or_watch(
    State(fake): State<FakeApi>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let flag = |k: &str| q.get(k).is_some_and(|v| v == "true" || v == "1");
    let rv = q.get("resourceVersion").map_or("", String::as_str);
    let matching = q.get("resourceVersionMatch").map_or("", String::as_str);
    let watching = flag("watch");
    let mut errors = Vec::new();
    if !matching.is_empty() {
        let field = "resourceVersionMatch";
        if watching && !q.contains_key("sendInitialEvents") {
            errors.push(forbidden(
                field,
                "resourceVersionMatch is forbidden for watch",
            ));
        }
        if rv.is_empty() {
            errors.push(forbidden(
                field,
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !["Exact", "NotOlderThan"].contains(&matching) {
            errors.push(not_supported(
                field,
                matching,
                &["Exact", "NotOlderThan", ""],
            ));
        }
        if matching == "Exact" && rv == "0" {
            errors.push(forbidden(
                field,
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if !errors.is_empty() {
        return invalid_options("ListOptions", &errors);
    }
    if flag("sendInitialEvents") {
        return unemulated("sendInitialEvents (a streaming list)");
    }
    let at = match rv {
        "" => None,
        v => match v.parse::<u64>() {
            Ok(v) => Some(v),
            Err(_) => {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("invalid resource version: {v:?}"),
                );
            }
        },
    };
    if watching {
        return watch_nodes(&fake, at, &q);
    }
    let c = fake.state.lock().unwrap();
    let (items, version): (Vec<Value>, u64) = match at {
        Some(v) if v > c.version => {
            return (
                StatusCode::GATEWAY_TIMEOUT,
                axum::Json(too_large(v, c.version)),
            )
                .into_response();
        }
        Some(v) if matching == "Exact" => {
            if v < c.compacted {
                return (StatusCode::GONE, axum::Json(expired(v, c.compacted))).into_response();
            }
            (c.nodes_at(v), v)
        }
        _ => (c.nodes.values().cloned().collect(), c.version),
    };
    let body = json!({
        "kind": "NodeList", "apiVersion": "v1",
        "metadata": {"resourceVersion": version.to_string()},
        "items": items,
    });
    axum::Json(body).into_response()
}

impl Cluster {
    /// The nodes as they stood at revision `at` (not before the last compaction).
    fn nodes_at(&self, at: u64) -> Vec<Value> {
        let mut nodes = self.at_compaction.clone();
        for (_, event) in self.log.iter().take_while(|(v, _)| *v <= at) {
            let node = &event["object"];
            let name = node["metadata"]["name"].as_str().unwrap().to_string();
            if event["type"] == "DELETED" {
                nodes.remove(&name);
            } else {
                nodes.insert(name, node.clone());
            }
        }
        nodes.into_values().collect()
    }
}

/// A WATCH of the nodes: from a resourceVersion, the changes after it; without one
/// (or from "0"), every node as ADDED first. A resourceVersion before the last
/// compaction, or after the newest, gets the real server's answer to it: HTTP 200,
/// then one ERROR event carrying the Status, and the end of the stream.
fn watch_nodes(fake: &FakeApi, at: Option<u64>, q: &BTreeMap<String, String>) -> Response {
    // Without timeoutSeconds, the real server picks one of at least its
    // min-request-timeout, 1800 s.
    let asked = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    let bookmarks = q
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true" || v == "1");
    // Subscribe before reading the history, so that no change falls between the two.
    let wake = fake.changes.subscribe();
    let c = fake.state.lock().unwrap();
    let mut first = String::new();
    let at = match at {
        None | Some(0) => {
            for node in c.nodes.values() {
                first.push_str(&line(&json!({"type": "ADDED", "object": node})));
            }
            c.version
        }
        Some(v) if v < c.compacted => return watch_error(expired(v, c.compacted)),
        Some(v) if v > c.version => return watch_error(too_large(v, c.version)),
        Some(v) => v,
    };
    let now = tokio::time::Instant::now();
    let every = c.timing.bookmarks;
    let watch = NodeWatch {
        fake: fake.clone(),
        wake,
        at,
        compactions: c.compactions,
        ends: now + asked.min(c.timing.watch_timeout),
        bookmarks: bookmarks.then_some((every, now + every)),
        first,
        done: false,
    };
    drop(c);
    let stream = futures::stream::unfold(watch, |mut watch| async move {
        let chunk = watch.next_chunk().await?;
        Some((Ok::<_, std::io::Error>(Bytes::from(chunk)), watch))
    });
    watch_response(Body::from_stream(stream))
}

fn watch_response(body: Body) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap()
}

/// A watch refused once it has begun: its one ERROR event.
fn watch_error(status: Value) -> Response {
    watch_response(Body::from(line(
        &json!({"type": "ERROR", "object": status}),
    )))
}

/// One open watch of the nodes.
struct NodeWatch {
    fake: FakeApi,
    wake: watch::Receiver<u64>,
    /// The revision this watch has brought its client up to.
    at: u64,
    /// The compactions there had been when it opened: another one ends it.
    compactions: u64,
    /// When the server ends it.
    ends: tokio::time::Instant,
    /// With bookmarks allowed: how often, and when the next one is due.
    bookmarks: Option<(Duration, tokio::time::Instant)>,
    /// What it sends before any change: every node, for a watch from "now".
    first: String,
    done: bool,
}

impl NodeWatch {
    /// The next lines to send, once there are any: the changes after `at`, a
    /// bookmark when one is due (always one as the watch ends), or the ERROR that
    /// ends a watch whose place in the history was compacted away. `None`: the
    /// server ends the stream.
    async fn next_chunk(&mut self) -> Option<String> {
        while !self.done {
            let now = tokio::time::Instant::now();
            let closing = now >= self.ends;
            let mut out = std::mem::take(&mut self.first);
            {
                let c = self.fake.state.lock().unwrap();
                if c.compactions != self.compactions {
                    self.done = true;
                    let status = expired(self.at, c.compacted);
                    out.push_str(&line(&json!({"type": "ERROR", "object": status})));
                    return Some(out);
                }
                let from = self.at;
                for (v, event) in c.log.iter().filter(|(v, _)| *v > from) {
                    out.push_str(&line(event));
                    self.at = *v;
                }
                if let Some((every, due)) = &mut self.bookmarks
                    && (closing || now >= *due)
                {
                    // Every change up to the current revision is sent above.
                    self.at = c.version;
                    out.push_str(&line(&json!({"type": "BOOKMARK", "object": {
                        "kind": "Node", "apiVersion": "v1",
                        "metadata": {"resourceVersion": c.version.to_string()},
                    }})));
                    *due = now + *every;
                }
            }
            self.done = closing;
            if !out.is_empty() {
                return Some(out);
            }
            if self.done {
                break;
            }
            let wake_at = self
                .bookmarks
                .map_or(self.ends, |(_, due)| due.min(self.ends));
            tokio::select! {
                _ = self.wake.changed() => {}
                _ = tokio::time::sleep_until(wake_at) => {}
            }
        }
        None
    }
}

/// A GET of a node; another writer's change `on_next_get` asked for is made right
/// after, so that what this GET returned is already stale.
async fn get_node(State(fake): State<FakeApi>, Path(name): Path<String>) -> Response {
    let mut c = fake.state.lock().unwrap();
    let Some(node) = c.nodes.get(&name).cloned() else {
        return not_found(Kind::by_kind("Node"), &name);
    };
    if let Some(mutation) = c.on_get.remove(&name) {
        let mut changed = node.clone();
        mutation(&mut changed);
        fake.modify(&mut c, changed);
    }
    axum::Json(node).into_response()
}

async fn patch_node(
    State(fake): State<FakeApi>,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    patch_node_part(&fake, &name, &q, &headers, &body, "status")
}

async fn patch_node_status(
    State(fake): State<FakeApi>,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    patch_node_part(&fake, &name, &q, &headers, &body, "spec")
}

/// The four kinds of PATCH the API server takes, by their media type.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

/// A patch body decoded as its kind requires: a JSON array of operations, a JSON
/// object, or (apply) a YAML object.
fn decode_patch(kind: PatchKind, body: &Bytes) -> Result<Value, Response> {
    let bad = |m: &str| Err(status(StatusCode::BAD_REQUEST, "BadRequest", m));
    match kind {
        PatchKind::Json => match serde_json::from_slice::<Value>(body) {
            Ok(Value::Array(ops)) if ops.iter().all(Value::is_object) => Ok(Value::Array(ops)),
            Ok(Value::Array(_)) => {
                bad("json: cannot unmarshal array into Go value of type jsonpatch.Operation")
            }
            Ok(other) => {
                let what = match other {
                    Value::Object(_) => "object",
                    Value::String(_) => "string",
                    Value::Number(_) => "number",
                    _ => "bool",
                };
                bad(&format!(
                    "json: cannot unmarshal {what} into Go value of type jsonpatch.Patch"
                ))
            }
            Err(e) => bad(&format!("error decoding patch: {e}")),
        },
        PatchKind::Apply => {
            let text = std::str::from_utf8(body).unwrap_or("");
            match serde_saphyr::from_str::<Value>(text) {
                Ok(p) if p.is_object() => Ok(p),
                Ok(_) => bad("error decoding YAML: the apply patch is not an object"),
                Err(e) => bad(&format!("error decoding YAML: {e}")),
            }
        }
        PatchKind::Merge | PatchKind::Strategic => match serde_json::from_slice::<Value>(body) {
            Ok(p) if p.is_object() => Ok(p),
            _ => bad("the patch is not a JSON object"),
        },
    }
}

/// A server-side apply of `applied` by `manager` through the endpoint that keeps
/// `kept`. Simplified: the applied object merges like a strategic merge patch of the
/// fields it names (so conditions merge by `type`), and the manager's `Apply` entry
/// in `managedFields` records those fields. Not emulated: conflicts with the fields
/// other managers own (no apply answers 409, forced or not), and the removal of a
/// field this manager applied before and now leaves out (it stays). Creating a node
/// by apply is not emulated either (404).
fn apply(node: &mut Value, applied: &Value, manager: &str, kept: &str) -> Result<(), Response> {
    let bad = |m: String| Err(status(StatusCode::BAD_REQUEST, "BadRequest", &m));
    let version = applied["apiVersion"].as_str().unwrap_or("");
    if version != "v1" {
        return bad(format!(
            "Incorrect version specified in apply patch. Specified patch version: {version}, expected: v1"
        ));
    }
    let kind = applied["kind"].as_str().unwrap_or("");
    if kind != "Node" {
        return bad(format!(
            "the kind in the apply patch ({kind}) does not match the kind of the object (Node)"
        ));
    }
    let name = node["metadata"]["name"].as_str().unwrap_or("").to_string();
    if let Some(other) = applied["metadata"]["name"].as_str()
        && other != name
    {
        return bad(format!(
            "the name of the object ({other}) does not match the name on the URL ({name})"
        ));
    }
    if !applied["metadata"]["managedFields"].is_null() {
        return bad("metadata.managedFields must be nil".into());
    }
    strategic(node, applied, "")?;
    let mut owned = applied.clone();
    let object = owned.as_object_mut().unwrap();
    for gone in ["apiVersion", "kind", kept] {
        object.remove(gone);
    }
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("name");
        meta.remove("resourceVersion");
    }
    let subresource = if kept == "spec" { "status" } else { "" };
    let mut entry = json!({
        "manager": manager, "operation": "Apply", "apiVersion": "v1", "time": now(),
        "fieldsType": "FieldsV1", "fieldsV1": fields_v1(&owned),
    });
    if !subresource.is_empty() {
        entry["subresource"] = json!(subresource);
    }
    let managed = &mut node["metadata"]["managedFields"];
    if !managed.is_array() {
        *managed = json!([]);
    }
    let managed = managed.as_array_mut().unwrap();
    let same = |e: &Value| {
        e["manager"] == manager
            && e["operation"] == "Apply"
            && e["subresource"].as_str().unwrap_or("") == subresource
    };
    match managed.iter_mut().find(|e| same(e)) {
        // The same fields applied again: the entry (and its time) stays as it is.
        Some(e) if e["fieldsV1"] == entry["fieldsV1"] => {}
        Some(e) => *e = entry,
        None => managed.push(entry),
    }
    Ok(())
}

/// A PATCH applied to the whole node, then the part this endpoint may not change
/// (`kept`) put back, as the API server's node strategies do: the node's own
/// endpoint keeps the status, the status subresource keeps the spec (and, as on the
/// real server, metadata does change through it). Whatever resourceVersion the
/// patched node carries is a precondition (a `null` or removed one, none). A patch
/// that changes nothing writes nothing: no new resourceVersion, no watch event.
fn patch_node_part(
    fake: &FakeApi,
    name: &str,
    q: &BTreeMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
    kept: &str,
) -> Response {
    let kind = match media(headers) {
        "application/json-patch+json" => PatchKind::Json,
        "application/merge-patch+json" => PatchKind::Merge,
        "application/strategic-merge-patch+json" => PatchKind::Strategic,
        "application/apply-patch+yaml" => PatchKind::Apply,
        other => {
            return unsupported_media(
                other,
                "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml",
            );
        }
    };
    // The PatchOptions, checked before the body is read.
    let manager = q.get("fieldManager").map_or("", String::as_str);
    if kind == PatchKind::Apply && manager.is_empty() {
        return invalid_options(
            "PatchOptions",
            &[required("fieldManager", "is required for apply patch")],
        );
    }
    if kind != PatchKind::Apply && q.contains_key("force") {
        return invalid_options(
            "PatchOptions",
            &[forbidden(
                "force",
                "may not be specified for non-apply patch",
            )],
        );
    }
    let patch = match decode_patch(kind, body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let mut c = fake.state.lock().unwrap();
    let Some(old) = c.nodes.get(name).cloned() else {
        return not_found(Kind::by_kind("Node"), name);
    };
    let mut node = old.clone();
    let applied = match kind {
        PatchKind::Merge => {
            merge(&mut node, &patch);
            Ok(())
        }
        PatchKind::Strategic => strategic(&mut node, &patch, ""),
        PatchKind::Apply => apply(&mut node, &patch, manager, kept),
        PatchKind::Json => json_patch(&mut node, patch.as_array().unwrap()).map_err(|why| {
            // How the real server passes on the json-patch library's error.
            failure(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                "the server rejected our request due to an error in our request",
                Some(json!({"causes": [{"reason": "UnexpectedServerResponse", "message": why}]})),
            )
        }),
    };
    if let Err(r) = applied {
        return r;
    }
    match old.get(kept) {
        Some(part) => node[kept] = part.clone(),
        None => {
            node.as_object_mut().unwrap().remove(kept);
        }
    }
    let meta = &node["metadata"];
    if let Some(want) = meta["resourceVersion"].as_str().filter(|v| !v.is_empty())
        && Some(want) != old["metadata"]["resourceVersion"].as_str()
    {
        return conflict("nodes", "", "nodes", name, OPTIMISTIC_LOCK);
    }
    for field in ["name", "uid"] {
        if let Some(new) = meta[field].as_str().filter(|v| !v.is_empty())
            && Some(new) != old["metadata"][field].as_str()
        {
            return unprocessable(
                "Node",
                "",
                "Node",
                name,
                &[invalid(
                    &format!("metadata.{field}"),
                    &json!(new).to_string(),
                    "field is immutable",
                )],
            );
        }
    }
    node["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    node["metadata"]["name"] = json!(name);
    node["metadata"]["uid"] = old["metadata"]["uid"].clone();
    if node == old {
        return axum::Json(old).into_response();
    }
    axum::Json(fake.modify(&mut c, node)).into_response()
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
    // How the real server reads `resourceVersion`: unset, a consistent read (of
    // etcd, before 1.31); "0", whatever its watch cache holds; a match strategy
    // needs a version beside it.
    let version = q.get("resourceVersion").map(String::as_str);
    if q.contains_key("resourceVersionMatch") && version.is_none_or(str::is_empty) {
        return status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        );
    }
    let mut c = fake.state.lock().unwrap();
    match version {
        Some("0") => c.pod_lists.0 += 1,
        _ => c.pod_lists.1 += 1,
    }
    // A pod its kubelet has confirmed gone is listed no more.
    c.sweep();
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
    {
        let mut c = fake.state.lock().unwrap();
        let pod = (ns.clone(), name.clone());
        *c.eviction_attempts.entry(pod.clone()).or_default() += 1;
        c.eviction_times
            .entry(pod)
            .or_default()
            .push(Instant::now());
    }
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
    if c.lease_faults.remove(&(ns.clone(), name.clone())) {
        return status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "Internal error occurred: etcdserver: leader changed",
        );
    }
    if c.lease_races.remove(&(ns.clone(), name.clone()))
        && let Some(raced) = c.objects.get(&Cluster::key(k, &ns, &name)).cloned()
    {
        c.store(k, raced);
    }
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

/// A Ready node named `name` with `labels` (its uid the fake's to give).
pub fn ready_node(name: &str, labels: Value) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/hostname"] = json!(format!("{name}.example"));
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
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

#[cfg(test)]
mod tests {
    //! The paths of the fake that hale's scenarios cannot reach at will, each proven
    //! with a plain HTTP client.

    use super::*;

    fn client() -> reqwest::Client {
        hale::init_tls();
        reqwest::Client::new()
    }

    async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
        let r = request.send().await.unwrap();
        let code = r.status().as_u16();
        (code, r.json().await.unwrap())
    }

    async fn get(fake: &FakeApi, path: &str) -> (u16, Value) {
        send(client().get(format!("{}{path}", fake.url))).await
    }

    async fn patch(fake: &FakeApi, path: &str, media: &str, body: &str) -> (u16, Value) {
        let request = client()
            .patch(format!("{}{path}", fake.url))
            .header("content-type", media)
            .body(body.to_string());
        send(request).await
    }

    async fn evict(fake: &FakeApi, name: &str, options: Value) -> u16 {
        let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": "ns"}, "deleteOptions": options});
        let url = format!("{}/api/v1/namespaces/ns/pods/{name}/eviction", fake.url);
        send(client().post(url).json(&eviction)).await.0
    }

    async fn open_watch(fake: &FakeApi, query: &str) -> reqwest::Response {
        let url = format!("{}/api/v1/nodes?watch=true&{query}", fake.url);
        let r = client().get(url).send().await.unwrap();
        assert_eq!(r.status(), 200, "a watch begins with 200, whatever follows");
        r
    }

    /// The events of a watch until the server ends it.
    async fn read_all(watch: &mut reqwest::Response) -> Vec<Value> {
        let (mut buffer, mut events) = (Vec::new(), Vec::new());
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(20), watch.chunk())
            .await
            .expect("the server ends the watch")
            .unwrap()
        {
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                events.push(serde_json::from_slice(&line).unwrap());
            }
        }
        events
    }

    fn kinds(events: &[Value]) -> Vec<&str> {
        events.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    fn rv(obj: &Value) -> &str {
        obj["metadata"]["resourceVersion"].as_str().unwrap()
    }

    #[tokio::test]
    async fn a_watch_ends_after_its_timeout_with_a_bookmark_and_carries_deletes() {
        let fake = FakeApi::start(vec![ready_node("a", json!({}))]).await;
        fake.set_watch_timeout(Duration::from_secs(1));
        fake.set_bookmark_interval(Duration::from_secs(60));
        let mut watch = open_watch(&fake, "resourceVersion=1&allowWatchBookmarks=true").await;
        fake.kubectl("a", json!({"spec": {"unschedulable": true}}));
        let last = fake.node("a");
        fake.delete_node("a");
        let events = read_all(&mut watch).await;
        assert_eq!(kinds(&events), ["MODIFIED", "DELETED", "BOOKMARK"]);
        let deleted = &events[1]["object"];
        assert_eq!(rv(deleted), "3", "the deletion's own revision");
        let mut expected = last;
        expected["metadata"]["resourceVersion"] = json!("3");
        assert_eq!(*deleted, expected, "the last state of the node");
        assert_eq!(
            events[2]["object"],
            json!({"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": "3"}})
        );
        // Without bookmarks asked for, none; the client's shorter timeout wins.
        fake.set_watch_timeout(Duration::from_secs(60));
        let mut watch = open_watch(&fake, "resourceVersion=3&timeoutSeconds=1").await;
        assert!(read_all(&mut watch).await.is_empty());
    }

    #[tokio::test]
    async fn a_node_recreated_under_its_name_has_another_uid() {
        let fake = FakeApi::start(vec![ready_node("a", json!({}))]).await;
        let first = fake.node("a")["metadata"]["uid"].clone();
        assert!(first.is_string());
        fake.kubectl("a", json!({"metadata": {"labels": {"x": "y"}}}));
        assert_eq!(
            fake.node("a")["metadata"]["uid"],
            first,
            "kept across updates"
        );
        fake.delete_node("a");
        fake.put(ready_node("a", json!({})));
        let second = fake.node("a")["metadata"]["uid"].clone();
        assert_ne!(second, first);
        // A node put with another uid replaces the one there: deleted, then added.
        fake.set_watch_timeout(Duration::from_secs(1));
        let mut watch = open_watch(&fake, "resourceVersion=4").await;
        let mut other = ready_node("a", json!({}));
        other["metadata"]["uid"] = json!("another");
        fake.put(other);
        let events = read_all(&mut watch).await;
        assert_eq!(kinds(&events), ["DELETED", "ADDED"]);
        assert_eq!(events[0]["object"]["metadata"]["uid"], second);
        assert_eq!(events[1]["object"]["metadata"]["uid"], "another");
    }

    #[tokio::test]
    async fn after_a_compaction_an_older_resource_version_is_gone() {
        let fake = FakeApi::start(vec![ready_node("a", json!({}))]).await;
        let mut open = open_watch(&fake, "resourceVersion=1").await;
        fake.kubectl("a", json!({"spec": {"unschedulable": true}}));
        fake.compact();
        // The open watch lost its place: its last event is the 410, then it ends.
        let events = read_all(&mut open).await;
        let error = events.last().unwrap();
        assert_eq!(error["type"], "ERROR", "{events:?}");
        assert_eq!(error["object"]["code"], 410);
        assert_eq!(error["object"]["reason"], "Expired");
        // A watch from before the compaction: 200, one ERROR event, the end.
        let mut late = open_watch(&fake, "resourceVersion=1").await;
        let gone = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": "too old resource version: 1 (2)",
            "reason": "Expired", "code": 410});
        assert_eq!(
            read_all(&mut late).await,
            [json!({"type": "ERROR", "object": gone})]
        );
        // A list at that exact version: HTTP 410; at a kept one, the nodes then.
        let (code, body) = get(
            &fake,
            "/api/v1/nodes?resourceVersion=1&resourceVersionMatch=Exact",
        )
        .await;
        assert_eq!((code, body), (410, gone));
        fake.kubectl("a", json!({"spec": {"unschedulable": null}}));
        let (code, list) = get(
            &fake,
            "/api/v1/nodes?resourceVersion=2&resourceVersionMatch=Exact",
        )
        .await;
        assert_eq!(code, 200);
        assert_eq!(rv(&list), "2");
        assert_eq!(list["items"][0]["spec"]["unschedulable"], true);
        let (code, list) = get(
            &fake,
            "/api/v1/nodes?resourceVersion=1&resourceVersionMatch=NotOlderThan",
        )
        .await;
        assert_eq!((code, rv(&list)), (200, "3"), "not older: the newest");
        let (code, body) = get(
            &fake,
            "/api/v1/nodes?resourceVersion=9&resourceVersionMatch=Exact",
        )
        .await;
        assert_eq!((code, body["reason"].clone()), (504, json!("Timeout")));
        let (code, body) = get(&fake, "/api/v1/nodes?resourceVersionMatch=Exact").await;
        assert_eq!(code, 422);
        assert_eq!(
            body["message"],
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
        );
    }

    #[tokio::test]
    async fn an_evicted_pod_terminates_for_its_grace_period() {
        let fake = FakeApi::start(vec![ready_node("a", json!({}))]).await;
        fake.set_grace_scale(1.0);
        fake.put_pod(pod("ns", "p", "a", None, json!({})));
        assert_eq!(evict(&fake, "p", json!({})).await, 201);
        let terminating = fake.object("Pod", Some("ns"), "p").expect("still listed");
        assert_eq!(terminating["metadata"]["deletionGracePeriodSeconds"], 30);
        let ends: chrono::DateTime<chrono::Utc> = terminating["metadata"]["deletionTimestamp"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let left = ends - chrono::Utc::now();
        assert!(
            left.num_seconds() > 25,
            "ends when the grace period does: {left}"
        );
        // Evicted again while terminating: accepted, and nothing changes.
        assert_eq!(evict(&fake, "p", json!({})).await, 201);
        assert_eq!(fake.object("Pod", Some("ns"), "p").unwrap(), terminating);
        assert_eq!(fake.evicted(), [terminating]);
        // A delete with a shorter grace period cuts it short.
        let url = format!("{}/api/v1/namespaces/ns/pods/p", fake.url);
        let request = client().delete(url).json(&json!({"gracePeriodSeconds": 5}));
        let (code, shortened) = send(request).await;
        assert_eq!(code, 200);
        assert_eq!(shortened["metadata"]["deletionGracePeriodSeconds"], 5);
        fake.finish_terminating();
        assert!(fake.object("Pod", Some("ns"), "p").is_none());
        // No grace period: gone at once.
        fake.put_pod(pod("ns", "q", "a", None, json!({})));
        assert_eq!(
            evict(&fake, "q", json!({"gracePeriodSeconds": 0})).await,
            201
        );
        assert!(fake.pods().is_empty());
    }

    #[tokio::test]
    async fn json_patches_and_applies_reach_the_node() {
        let fake = FakeApi::start(vec![ready_node("a", json!({}))]).await;
        let (json_patch, apply) = (
            "application/json-patch+json",
            "application/apply-patch+yaml",
        );
        let ops = r#"[{"op": "test", "path": "/metadata/name", "value": "a"},
            {"op": "add", "path": "/spec/taints", "value": [{"key": "k", "effect": "NoSchedule"}]}]"#;
        let (code, node) = patch(&fake, "/api/v1/nodes/a", json_patch, ops).await;
        assert_eq!(
            (code, node["spec"]["taints"][0]["key"].clone()),
            (200, json!("k"))
        );
        let failing = r#"[{"op": "remove", "path": "/spec/taints"},
            {"op": "test", "path": "/metadata/name", "value": "b"}]"#;
        let (code, body) = patch(&fake, "/api/v1/nodes/a", json_patch, failing).await;
        assert_eq!((code, body["reason"].clone()), (422, json!("Invalid")));
        assert_eq!(
            body["details"]["causes"][0]["message"],
            "testing value /metadata/name failed: test failed"
        );
        assert!(
            fake.node("a")["spec"]["taints"].is_array(),
            "all or nothing"
        );

        let yaml = "apiVersion: v1\nkind: Node\nmetadata:\n  name: a\n  labels:\n    team: gpu\n";
        let (code, body) = patch(&fake, "/api/v1/nodes/a", apply, yaml).await;
        assert_eq!(code, 422);
        assert_eq!(
            body["message"],
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
        );
        let path = "/api/v1/nodes/a?fieldManager=ops";
        let (code, node) = patch(&fake, path, apply, yaml).await;
        assert_eq!(
            (code, node["metadata"]["labels"]["team"].clone()),
            (200, json!("gpu"))
        );
        assert_eq!(node["metadata"]["managedFields"][0]["manager"], "ops");
        assert_eq!(
            node["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:team": {}}}})
        );
        let (_, again) = patch(&fake, path, apply, yaml).await;
        assert_eq!(rv(&again), rv(&node), "the same apply again writes nothing");
        let (code, _) = patch(&fake, "/api/v1/nodes/a/status", "application/yaml", yaml).await;
        assert_eq!(code, 415);
    }

    #[tokio::test]
    async fn a_write_between_a_get_and_a_conditional_patch_is_a_409() {
        let fake = FakeApi::start(vec![ready_node("a", json!({}))]).await;
        fake.on_next_get("a", |n| {
            n["spec"]["taints"] = json!([{"key": "theirs", "effect": "NoSchedule"}]);
        });
        let (_, read) = get(&fake, "/api/v1/nodes/a").await;
        assert!(
            read["spec"]["taints"].is_null(),
            "served before the other write"
        );
        let mine = json!({"metadata": {"resourceVersion": rv(&read)},
            "spec": {"taints": [{"key": "mine", "effect": "NoSchedule"}]}});
        let merge = "application/merge-patch+json";
        let (code, body) = patch(&fake, "/api/v1/nodes/a", merge, &mine.to_string()).await;
        assert_eq!((code, body["reason"].clone()), (409, json!("Conflict")));
        let (_, fresh) = get(&fake, "/api/v1/nodes/a").await;
        assert_eq!(fresh["spec"]["taints"][0]["key"], "theirs");
        assert_eq!(fake.node("a"), fresh, "once only");
    }
}
