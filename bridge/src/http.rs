//! The HTTP surface (DESIGN §11): the node API, the Alertmanager webhook receiver,
//! `/metrics`, `/healthz` and `/readyz`. Errors are JSON `{error, detail}`; mutating
//! endpoints and the receiver require the bearer token when one is configured.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::Joined as _;
use crate::bmc::Verb;
use crate::core::policy::Remediations;
use crate::core::settings::parse_duration;
use crate::core::{CoreError, EVENT_TYPES, Fleet, Health, Outcome, Status, Time};
use crate::federation::MemberError;
use crate::metrics::CodeLabel;
use crate::service::{Hale, PowerError, PowerReport, StepError};
use crate::store::EventQuery;
use crate::view::{
    ClearRequest, ClusterList, DrainRequest, ErrorBody, EventsView, FailureReport, NodeList,
    NodeQuery, OperateRequest, PowerRequest, RebootRequest, Sort, Unreachable, page_after,
};

/// A path's segments, as `Path` reads them, refused as the API refuses anything
/// else (a JSON `400 bad_request`), not in axum's plain text: `%FF` is no node id,
/// and nor is `%ZZ` (which decoding would leave as it is, to be looked up).
pub struct Segments<T>(pub T);

/// Whether every `%` of `path` starts an escape: two hex digits.
fn well_escaped(path: &str) -> bool {
    let b = path.as_bytes();
    b.iter().enumerate().all(|(i, c)| {
        *c != b'%'
            || b.get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    })
}

impl<S, T> FromRequestParts<S> for Segments<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        if !well_escaped(parts.uri.path()) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!(
                    "{}: a '%' in a path starts an escape of two hex digits (a node id's own '%' is sent as %25)",
                    parts.uri.path()
                ),
            ));
        }
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| Segments(t))
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()))
    }
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    error: &'static str,
    detail: String,
}

impl ApiError {
    /// The same error, said of federation member `cluster`.
    fn about(mut self, cluster: &str) -> ApiError {
        self.detail = format!("cluster {cluster}: {}", self.detail);
        self
    }

    /// What went wrong, in words.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub(crate) fn new(status: StatusCode, error: &'static str, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            error,
            detail: detail.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.error.into(),
            detail: self.detail,
        };
        let mut response = (self.status, Json(body)).into_response();
        // RFC 6750: a 401 names the scheme that would be accepted.
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"hale\""),
            );
        }
        response
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::UnknownNode(_) | CoreError::UnknownCondition { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string())
            }
            CoreError::Forgotten { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.to_string())
            }
            CoreError::NotClearable { .. }
            | CoreError::NotDrainable { .. }
            | CoreError::Busy { .. }
            | CoreError::Listed { .. } => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
        }
    }
}

impl From<StepError> for ApiError {
    fn from(e: StepError) -> Self {
        match e {
            StepError::Core(e) => e.into(),
            StepError::Input(e) => {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.to_string())
            }
            // Alertmanager and the CLI try a 503 again; the step is idempotent.
            StepError::Unwritten(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                e.to_string(),
            ),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
        match e {
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                e.body_text(),
            ),
            JsonRejection::BytesRejection(e) => e.into(),
            // Worded as an operator verb's body is: what is wrong, and where.
            JsonRejection::JsonDataError(ref inner) => malformed(&e, inner),
            JsonRejection::JsonSyntaxError(ref inner) => malformed(&e, inner),
            _ => ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()),
        }
    }
}

/// A JSON body that did not read as its request: `the request body: ` and what
/// serde said, the field at fault first.
fn malformed(e: &JsonRejection, inner: &dyn std::error::Error) -> ApiError {
    let why = inner
        .source()
        .map_or_else(|| e.body_text(), ToString::to_string);
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "bad_request",
        format!("the request body: {why}"),
    )
}

/// A request body that could not be read: too large (axum's default limit), or
/// cut off.
impl From<BytesRejection> for ApiError {
    fn from(e: BytesRejection) -> Self {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return too_large(BODY_LIMIT);
        }
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text())
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("request bodies are limited to {limit} bytes"),
    )
}

/// Where Alertmanager delivers.
const WEBHOOK_PATH: &str = "/api/v1/alertmanager";

/// axum's limit on a request body (the webhook has `alertmanager.maxWebhookBytes`).
const BODY_LIMIT: usize = 2 << 20;

/// The most a web UI form sends (a sign-in, a verb and its reason): far less than
/// an API body, since anyone may post one before hale knows who they are.
pub(crate) const FORM_LIMIT: usize = 64 << 10;

/// The most a request to `path` may send: `webhook` (`alertmanager.maxWebhookBytes`)
/// to the webhook, [`FORM_LIMIT`] to the UI, [`BODY_LIMIT`] elsewhere.
fn body_limit(path: &str, webhook: usize) -> usize {
    if path == WEBHOOK_PATH {
        webhook
    } else if path.starts_with("/ui/") {
        FORM_LIMIT
    } else {
        BODY_LIMIT
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// A request body as sent, or why it could not be read.
type Sent = Result<Bytes, BytesRejection>;

/// An operator verb's optional JSON body: none (or an empty one) is the request's
/// defaults; anything else must be that JSON, whatever its Content-Type says, or
/// the answer is a 400 saying what is wrong with it.
fn optional_body<T: serde::de::DeserializeOwned + Default>(body: Sent) -> ApiResult<T> {
    let body = body?;
    let Some(first) = body.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Ok(T::default());
    };
    // serde would read a request from an array, field by field.
    if *first != b'{' {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the request body must be a JSON object",
        ));
    }
    // With the path, so a refused field is named (`reason: 2000 bytes: …`).
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(&body)).map_err(
        |e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("the request body: {e}"),
            )
        },
    )
}

pub fn router(hale: Arc<Hale>) -> Router {
    Router::new()
        .route("/api/v1/nodes", get(list_nodes))
        .route("/api/v1/nodes/{id}", get(show_node).delete(decommission))
        .route("/api/v1/nodes/{id}/failures", post(attribute_failure))
        .route("/api/v1/nodes/{id}/cordon", post(cordon))
        .route("/api/v1/nodes/{id}/uncordon", post(uncordon))
        .route("/api/v1/nodes/{id}/drain", post(drain))
        .route("/api/v1/nodes/{id}/power", post(power))
        .route("/api/v1/nodes/{id}/reboot", post(reboot))
        .route("/api/v1/remediations", get(remediations))
        .route("/api/v1/clusters", get(clusters))
        .route(
            "/api/v1/nodes/{id}/conditions/{ctype}/clear",
            post(clear_condition),
        )
        .route("/api/v1/nodes/{id}/events", get(node_events))
        .route("/api/v1/alerts", get(alerts))
        .route("/-/reload", post(reload))
        .route(WEBHOOK_PATH, post(webhook))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this endpoint does not take that method",
            )
        })
        .with_state(hale)
}

/// `app` (the API's routes and the UI's) with a limit on what a request may send
/// by route, [`ROOM`] for the bodies read at once, and the API's bodies read only
/// once their request is authorized.
pub fn limited(app: Router, hale: Arc<Hale>) -> Router {
    let webhook = Arc::clone(&hale);
    let room = Room::new(ROOM, move || {
        webhook.config().config.alertmanager.max_webhook_bytes
    });
    app.layer(axum::middleware::from_fn_with_state(room, wait_for_room))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(hale, authorize_first))
        .layer(axum::middleware::from_fn(refuse_declared_too_large))
}

/// A request that sends a body to the API (a verb, the webhook, a reload) is
/// authorized before any of its body is read or given room: without the token
/// it is answered at once, and a client that may not post cannot hold the room
/// open with slow bodies. The UI's forms carry their own proof (the sign-in
/// form the token itself) and are held to [`FORM_LIMIT`] instead.
async fn authorize_first(
    State(hale): State<Arc<Hale>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let headers = request.headers();
    let sends = declared_length(headers).is_some_and(|n| n > 0)
        || headers.contains_key(header::TRANSFER_ENCODING);
    let path = request.uri().path();
    let api = path.starts_with("/api/") || path.starts_with("/-/");
    if sends && api && !request.method().is_safe() {
        if let Err(e) = authorize(&hale, headers) {
            if path == WEBHOOK_PATH {
                return webhook_refused(&hale, e);
            }
            return e.into_response();
        }
    }
    next.run(request).await
}

/// The bytes of request bodies hale holds at once, all requests together: each
/// body may be a few MiB (`alertmanager.maxWebhookBytes`), and a thousand
/// connections each sending one would otherwise hold gigabytes.
const ROOM: usize = 64 << 20;

/// Room for the request bodies being read: a request takes its share before its
/// body is read (what it declares; the most its route takes when it sends in
/// chunks), all at once so no two wait on each other, and gives it back when it
/// is answered.
#[derive(Clone)]
struct Room {
    kib: Arc<tokio::sync::Semaphore>,
    total: u32,
    webhook_limit: Arc<dyn Fn() -> usize + Send + Sync>,
}

impl Room {
    fn new(bytes: usize, webhook_limit: impl Fn() -> usize + Send + Sync + 'static) -> Room {
        let total = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        Room {
            kib: Arc::new(tokio::sync::Semaphore::new(total as usize)),
            total,
            webhook_limit: Arc::new(webhook_limit),
        }
    }

    /// The KiB `request`'s body takes: none without one, or when its declared
    /// length will be refused unread; a body larger than the room takes all of it.
    fn need(&self, path: &str, headers: &HeaderMap) -> u32 {
        let limit = body_limit(path, (self.webhook_limit)());
        let bytes = match declared_length(headers) {
            Some(n) if n > limit => 0,
            Some(n) => n,
            None if headers.contains_key(header::TRANSFER_ENCODING) => limit,
            None => 0,
        };
        u32::try_from(bytes.div_ceil(1024)).map_or(self.total, |kib| kib.min(self.total))
    }
}

/// A 503 `busy` with `Retry-After: 5` for a request that found no room, said in
/// the log by `say` once a minute at most (`said` keeps when it last was).
fn busy(
    said: &std::sync::Mutex<Option<std::time::Instant>>,
    say: impl FnOnce(),
    detail: &'static str,
) -> Response {
    let now = std::time::Instant::now();
    {
        let mut said = said.lock().expect("said lock");
        if said.is_none_or(|t| now.duration_since(t) >= std::time::Duration::from_secs(60)) {
            *said = Some(now);
            say();
        }
    }
    let mut response =
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", detail).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
    response
}

/// When the last request that found no room was said in the log.
static ROOMLESS_SAID: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

/// Wait for room for the request's body, [`crate::server::BODY_READ`] at most,
/// else a 503 with `Retry-After` (Alertmanager sends again), said once a minute.
async fn wait_for_room(
    State(room): State<Room>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let need = room.need(request.uri().path(), request.headers());
    if need == 0 {
        return next.run(request).await;
    }
    let wait = tokio::time::timeout(
        crate::server::BODY_READ,
        room.kib.clone().acquire_many_owned(need),
    );
    let Ok(Ok(taken)) = wait.await else {
        return busy(
            &ROOMLESS_SAID,
            || {
                tracing::warn!(
                    room_bytes = u64::from(room.total) * 1024,
                    "the request bodies being read fill their room: requests wait {}s, then are answered 503",
                    crate::server::BODY_READ.as_secs()
                );
            },
            "too many request bodies are being read at once; try again",
        );
    };
    let response = next.run(request).await;
    drop(taken);
    response
}

/// A request whose declared length passes its route's limit is answered before
/// its body is read (the webhook's says its key, in its own answer), so its
/// sender reads the 413 rather than a connection closed under it.
async fn refuse_declared_too_large(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path();
    let limit = body_limit(path, usize::MAX);
    if declared_length(request.headers()).is_some_and(|n| n > limit) && path != WEBHOOK_PATH {
        return too_large(limit).into_response();
    }
    next.run(request).await
}

/// The body length a request declares (`Content-Length`), if it declares one.
fn declared_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// With `ui.requireToken`, reads need the bearer token as mutations do.
fn authorize_read(hale: &Hale, headers: &HeaderMap) -> ApiResult<()> {
    if hale.config().config.ui.require_token {
        authorize(hale, headers)
    } else {
        Ok(())
    }
}

/// Whether a request that changes something came from this site (or from no
/// browser at all). `Sec-Fetch-Site`, which every current
/// browser sends, says so outright; without it, an `Origin` must name the host
/// the post was sent to (`X-Forwarded-Host` behind a proxy that rewrites `Host`).
/// A client that sends neither is no browser another site could drive.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        return matches!(site, "same-origin" | "none");
    }
    let Some(origin) = text("origin") else {
        return true;
    };
    let Some((_, origin_host)) = origin.split_once("://") else {
        return false;
    };
    [text("x-forwarded-host"), text("host")]
        .into_iter()
        .flatten()
        .any(|host| !host.is_empty() && host == origin_host)
}

/// Whether a browser sent the request: every current one names its `Origin` on a
/// post (and `Sec-Fetch-Site` where it may), same site or not; no other client
/// hale serves (Alertmanager, the CLI, curl) sends either.
fn browser(headers: &HeaderMap) -> bool {
    headers.contains_key(header::ORIGIN) || headers.contains_key("sec-fetch-site")
}

/// Whether the request was sent to an address no one can rebind: an IP, or
/// `localhost` (and `*.localhost`, which browsers keep on loopback themselves)
/// — not a DNS name, which a page's own site can point at hale after it loaded
/// (DNS rebinding), its posts then same-origin in the browser's eyes.
fn addressed(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let hosts: Vec<&str> = [text("x-forwarded-host"), text(header::HOST.as_str())]
        .into_iter()
        .flatten()
        .collect();
    !hosts.is_empty() && hosts.into_iter().all(address)
}

/// Whether a `Host` value (`host[:port]`) is an IP or localhost.
fn address(host: &str) -> bool {
    let port = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`
        return rest.split_once(']').is_some_and(|(v6, after)| {
            v6.parse::<std::net::Ipv6Addr>().is_ok()
                && (after.is_empty() || after.strip_prefix(':').is_some_and(port))
        });
    }
    let name = match host.rsplit_once(':') {
        Some((name, p)) if port(p) => name,
        _ => host,
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
}

/// Check the bearer token in constant time, and refuse what a browser says
/// another site sent: without a token (the default) any page an operator opened
/// could otherwise post a verb, a webhook or a reload here.
pub(crate) fn authorize(hale: &Hale, headers: &HeaderMap) -> ApiResult<()> {
    if !same_origin(headers) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_site",
            "a browser says another site sent this request (Origin or Sec-Fetch-Site); \
             hale takes changes from its own pages and from clients that are no browser",
        ));
    }
    let cfg = hale.config();
    let Some(want) = cfg.api_token.as_ref().map(|t| t.expose()) else {
        if browser(headers) && !addressed(headers) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "named_host",
                "without an apiTokenFile, hale takes changes from a browser only at an address \
                 (an IP, localhost): a page could rebind a name of its own to this hale and \
                 post as its own site; set apiTokenFile, or open hale by its IP or through \
                 kubectl port-forward",
            ));
        }
        return Ok(());
    };
    let got = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, token)| token.trim())
        })
        .unwrap_or("");
    if crate::secrets_equal(got.as_bytes(), want.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid API token is required in the Authorization header",
        ))
    }
}

async fn list_nodes(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<NodeList>> {
    authorize_read(&hale, &headers)?;
    let raw = raw.unwrap_or_default();
    // A hub's request is answered from this cluster alone: a member whose url
    // names another hale, or two hales naming each other, must not loop.
    if headers.contains_key(crate::federation::FEDERATED) {
        let query = node_query(&raw)?;
        let local = hale.config().config.cluster.clone();
        if query.all_clusters || query.cluster.as_ref().is_some_and(|c| *c != local) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "federation_loop",
                format!(
                    "this hale serves cluster {local:?} and passes no federated request on \
                     (does a federation member's url name the wrong hale?)"
                ),
            ));
        }
    }
    listing(hale, &raw).await.map(Json)
}

/// The node listing a query asks for: this hale's nodes, a member's, or every
/// cluster's.
pub(crate) async fn listing(hale: Arc<Hale>, raw: &str) -> ApiResult<NodeList> {
    let query = node_query(raw)?;
    let local = hale.config().config.cluster.clone();
    let pairs: Vec<(String, String)> = form_urlencoded::parse(raw.as_bytes())
        .into_owned()
        .collect();
    if query.all_clusters {
        return all_clusters(hale, query, &pairs).await;
    }
    if let Some(cluster) = query.cluster.as_ref().filter(|c| **c != local) {
        let fed = hale.federation();
        if !fed.names().any(|n| n == cluster) {
            // Refused, as a pool nobody configured is: an empty list would read as a
            // cluster with no nodes.
            let names: Vec<&str> = std::iter::once(local.as_str()).chain(fed.names()).collect();
            return Err(bad_request(format!(
                "no cluster is named {cluster:?} here: {}",
                names.join(", ")
            )));
        }
        let pairs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        return fed
            .nodes(cluster, &pairs)
            .await
            .map_err(|e| member_error(e).about(cluster));
    }
    check_pool(&hale, &query)?;
    Ok(local_nodes(hale, query).await)
}

/// A `pool` filter must name a pool of this hale's (or `cluster`).
fn check_pool(hale: &Hale, query: &NodeQuery) -> ApiResult<()> {
    let Some(pool) = &query.pool else {
        return Ok(());
    };
    let cfg = hale.config();
    let names: Vec<&str> = std::iter::once("cluster")
        .chain(cfg.config.pools.iter().map(|p| p.name.as_str()))
        .collect();
    if names.contains(&pool.as_str()) {
        Ok(())
    } else {
        Err(bad_request(format!(
            "no pool is named {pool:?}: {} (`cluster`: nodes in no pool)",
            names.join(", ")
        )))
    }
}

pub(crate) async fn local_nodes(hale: Arc<Hale>, query: NodeQuery) -> NodeList {
    tokio::task::spawn_blocking(move || hale.nodes(&query))
        .joined()
        .await
}

/// `allClusters=true`: this hale's nodes, then each member's in the order
/// configured, a page at a time. The clusters a page may need are asked at once,
/// so dead members cost one timeout, not one each. The token names the cluster
/// whose turn it is and carries that cluster's own token. A member that cannot be
/// asked is named in `unreachable` and skipped: its nodes are absent, never
/// guessed.
async fn all_clusters(
    hale: Arc<Hale>,
    query: NodeQuery,
    pairs: &[(String, String)],
) -> ApiResult<NodeList> {
    if query.count {
        return Err(bad_request(
            "total is counted per cluster: ask each with cluster=NAME&total=true",
        ));
    }
    if query.pool.is_some() {
        return Err(bad_request(
            "pools are each cluster's own: filter by pool with cluster=NAME",
        ));
    }
    if query.cluster.is_some() {
        return Err(bad_request(
            "allClusters lists every cluster: name one with cluster=NAME alone",
        ));
    }
    let fed = hale.federation();
    let clusters: Vec<String> = std::iter::once(hale.config().config.cluster.clone())
        .chain(fed.names().map(str::to_string))
        .collect();
    let token = pairs
        .iter()
        .find(|(k, v)| k == "pageToken" && !v.is_empty())
        .map(|(_, v)| v.as_str());
    let (at, inner) = match token {
        None => (0, None),
        Some(t) => {
            let (cluster, inner) = cluster_token(t)
                .ok_or_else(|| bad_request("pageToken is not one this server issued"))?;
            let at = clusters.iter().position(|c| *c == cluster).ok_or_else(|| {
                bad_request(format!(
                    "pageToken continues in cluster {cluster:?}, which is no longer listed here"
                ))
            })?;
            (at, inner)
        }
    };
    let want = query.page_size;
    let size = want.to_string();
    let asked = clusters[at..].iter().enumerate().map(|(i, cluster)| {
        let (hale, fed, query, size) = (hale.clone(), fed.clone(), query.clone(), &size);
        let inner = if i == 0 { inner.clone() } else { None };
        async move {
            if at + i == 0 {
                let mut q = query;
                q.cluster = None;
                q.after =
                    match &inner {
                        Some(t) => Some(page_after(q.sort, t).ok_or_else(|| {
                            bad_request("pageToken is not one this server issued")
                        })?),
                        None => None,
                    };
                return ApiResult::Ok(Ok(local_nodes(hale, q).await));
            }
            let mut passed: Vec<(&str, &str)> = pairs
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "pageToken" | "pageSize"))
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            passed.push(("pageSize", size));
            if let Some(t) = &inner {
                passed.push(("pageToken", t));
            }
            ApiResult::Ok(fed.nodes(cluster, &passed).await)
        }
    });
    let mut out = NodeList {
        nodes: Vec::new(),
        next_page_token: None,
        total: None,
        unreachable: Vec::new(),
    };
    // The cluster the token names first; only if its answer leaves room are the
    // rest asked, all at once, and read in order. Those not needed are dropped.
    let mut asked = asked.into_iter();
    let first = asked.next().expect("the token's cluster is listed");
    let mut answers = futures::stream::FuturesOrdered::new();
    answers.push_back(first);
    let mut rest = Some(asked);
    let mut i = 0;
    while let Some(answer) = futures::StreamExt::next(&mut answers).await {
        if let Some(rest) = rest.take() {
            answers.extend(rest);
        }
        let cluster = &clusters[at + i];
        i += 1;
        let page = match answer? {
            Ok(page) => page,
            Err(e) => {
                out.unreachable.push(Unreachable {
                    cluster: cluster.clone(),
                    error: e.to_string(),
                });
                continue;
            }
        };
        let room = want - out.nodes.len();
        if page.nodes.len() > room {
            // The page is full inside this cluster: continue after its last node taken.
            let last = &page.nodes[room - 1];
            let key = query.sort.key(
                &last.id,
                &last.hostname,
                last.status,
                last.health,
                last.score,
            );
            let inner = crate::view::page_token(query.sort, &crate::view::Place::of(key));
            out.nodes.extend(page.nodes.into_iter().take(room));
            out.next_page_token = Some(cluster_page_token(cluster, &inner));
            return Ok(out);
        }
        out.nodes.extend(page.nodes);
        if let Some(next) = page.next_page_token {
            out.next_page_token = Some(cluster_page_token(cluster, &next));
            return Ok(out);
        }
        if out.nodes.len() == want {
            // Full at a cluster's end: the next page starts with the next cluster.
            if let Some(next) = clusters.get(at + i) {
                out.next_page_token = Some(cluster_page_token(next, ""));
            }
            return Ok(out);
        }
    }
    Ok(out)
}

/// A token of the federated listing: `f` and the hex of `[cluster, its token]`.
fn cluster_page_token(cluster: &str, inner: &str) -> String {
    let json = serde_json::json!([cluster, inner]).to_string();
    format!("f{}", crate::hex(json.as_bytes()))
}

/// The cluster and its own token (`None`: from its start) a [`cluster_page_token`]
/// names.
fn cluster_token(token: &str) -> Option<(String, Option<String>)> {
    let bytes = crate::unhex(token.strip_prefix('f')?)?;
    let (cluster, inner): (String, String) = serde_json::from_slice(&bytes).ok()?;
    Some((cluster, Some(inner).filter(|t| !t.is_empty())))
}

/// A member's refusal of a request (400, 404) passes on as it said it; anything
/// else — no answer, a refused token, its own failure — is a 502.
pub(crate) fn member_error(e: MemberError) -> ApiError {
    match e {
        MemberError::Refused {
            status: status @ (400 | 404),
            ref detail,
            ..
        } => ApiError {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            error: if status == 404 {
                "not_found"
            } else {
                "bad_request"
            },
            detail: detail.clone(),
        },
        MemberError::Refused { ref error, .. } if error == "federation_loop" => {
            ApiError::new(StatusCode::BAD_GATEWAY, "federation_loop", e.to_string())
        }
        MemberError::Refused {
            status: 401 | 403, ..
        } => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "member_unauthorized",
            e.to_string(),
        ),
        MemberError::Refused { .. } => {
            ApiError::new(StatusCode::BAD_GATEWAY, "member_error", e.to_string())
        }
        MemberError::Unknown(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
        MemberError::Failed(_) => {
            ApiError::new(StatusCode::BAD_GATEWAY, "member_unreachable", e.to_string())
        }
    }
}

/// `GET /api/v1/clusters`: this hale's cluster and, unless `local=true`, each
/// federation member's (asked now, at once).
async fn clusters(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<ClusterList>> {
    authorize_read(&hale, &headers)?;
    let mut local = None;
    for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        let given = match key.as_ref() {
            "local" => flag("local", &value)?,
            other => return Err(bad_request(format!("unknown parameter {other:?}"))),
        };
        if local.replace(given).is_some() {
            return Err(bad_request("local is given once"));
        }
    }
    // A hub's request is answered from this cluster alone, whatever it asks: two
    // hales naming each other must not ask each other round.
    let local = local.unwrap_or(false) || headers.contains_key(crate::federation::FEDERATED);
    Ok(Json(ClusterList {
        clusters: hale.clusters(local).await,
    }))
}

/// A yes-or-no query parameter: `true` or `false` in any case, `1` or `0`, or
/// given bare (`?total`) for true.
fn flag(key: &str, value: &str) -> ApiResult<bool> {
    match value {
        "" | "1" => Ok(true),
        "0" => Ok(false),
        v if v.eq_ignore_ascii_case("true") => Ok(true),
        v if v.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err(bad_request(format!(
            "{key}={value:?} is not a yes or no: true or false, 1 or 0, or {key} alone for true"
        ))),
    }
}

/// Default and largest `pageSize` of `GET /api/v1/nodes`.
const NODE_PAGE: usize = 500;

/// Parse the node list's query: `pageSize`, `pageToken`, `health`, `status`, `pool`,
/// `cluster`, `q`, `sort`, `total`, `allClusters`; anything else, or a value that
/// is none of the states, is a 400.
pub fn node_query(raw: &str) -> ApiResult<NodeQuery> {
    let mut q = NodeQuery {
        page_size: NODE_PAGE,
        ..NodeQuery::default()
    };
    let one_of = |key: &str, value: &str, names: &[&str]| {
        names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(value))
            .ok_or_else(|| bad_request(format!("{key}={value:?} is none of {}", names.join(", "))))
    };
    let mut token = None;
    let mut given = std::collections::BTreeSet::new();
    for (key, value) in form_urlencoded::parse(raw.as_bytes()) {
        // Each takes one value: a second would silently replace the first.
        if !given.insert(key.clone()) {
            return Err(bad_request(format!("{key} is given more than once")));
        }
        match key.as_ref() {
            "pageSize" => q.page_size = page_size(&value)?,
            "pageToken" => token = Some(value.into_owned()).filter(|t| !t.is_empty()),
            "sort" => {
                q.sort = Sort::parse(&value).ok_or_else(|| {
                    bad_request(format!(
                        "sort={value:?} is none of id, hostname, status, health, score (`-` before one reverses it)"
                    ))
                })?
            }
            "q" => {
                let text = value.trim().to_lowercase();
                q.search = Some(text).filter(|t| !t.is_empty());
            }
            "total" => q.count = flag("total", &value)?,
            "allClusters" => q.all_clusters = flag("allClusters", &value)?,
            "health" => {
                q.health = Some(
                    Health::ALL[one_of("health", &value, &["Healthy", "Degraded", "Unknown"])?],
                )
            }
            "status" => {
                const STATUSES: [Status; 4] = [
                    Status::Ready,
                    Status::NotReady,
                    Status::Cordoned,
                    Status::Offline,
                ];
                let names = ["Ready", "NotReady", "Cordoned", "Offline"];
                q.status = Some(STATUSES[one_of("status", &value, &names)?]);
            }
            "pool" => q.pool = Some(value.into_owned()),
            "cluster" => q.cluster = Some(value.into_owned()),
            other => return Err(bad_request(format!("unknown parameter {other:?}"))),
        }
    }
    // A token continues the order it was issued in; with allClusters it is the
    // federated listing's own.
    if let Some(token) = token.filter(|_| !q.all_clusters) {
        q.after =
            Some(page_after(q.sort, &token).ok_or_else(|| {
                bad_request("pageToken is not one this server issued for this sort")
            })?);
    }
    Ok(q)
}

/// A node's view, read off the async workers (the fleet lock may be held by ingest).
async fn view(hale: Arc<Hale>, id: String) -> ApiResult<crate::view::NodeView> {
    let shown = id.clone();
    tokio::task::spawn_blocking(move || hale.node(&id))
        .joined()
        .await
        .ok_or_else(|| unknown(&shown))
}

fn unknown(id: &str) -> ApiError {
    ApiError::from(CoreError::UnknownNode(id.into()))
}

async fn show_node(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    Segments(id): Segments<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<impl IntoResponse> {
    authorize_read(&hale, &headers)?;
    no_parameters(raw)?;
    view(hale, id).await.map(Json)
}

/// A read that takes no parameters: one given is a mistake to say, as the
/// listing says it.
fn no_parameters(raw: Option<String>) -> ApiResult<()> {
    match form_urlencoded::parse(raw.unwrap_or_default().as_bytes()).next() {
        Some((key, _)) => Err(bad_request(format!("unknown parameter {key:?}"))),
        None => Ok(()),
    }
}

async fn decommission(
    State(hale): State<Arc<Hale>>,
    Segments(id): Segments<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    authorize(&hale, &headers)?;
    leader(&hale)?;
    blocking(move || hale.apply_durable(|fleet, cfg, now| fleet.decommission(cfg, now, &id)))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A JSON body a request needs (its Content-Type JSON): an object — serde would
/// read a request from an array, field by field — read with the path of a field
/// it refuses.
fn object_body<T: serde::de::DeserializeOwned>(body: Object) -> ApiResult<T> {
    let Json(map) = body.map_err(|e| match e {
        JsonRejection::JsonDataError(_) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the request body must be a JSON object",
        ),
        e => e.into(),
    })?;
    serde_path_to_error::deserialize(serde_json::Value::Object(map)).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("the request body: {e}"),
        )
    })
}

type Object = Result<Json<serde_json::Map<String, serde_json::Value>>, JsonRejection>;

async fn attribute_failure(
    State(hale): State<Arc<Hale>>,
    Segments(id): Segments<String>,
    headers: HeaderMap,
    body: Object,
) -> ApiResult<impl IntoResponse> {
    authorize(&hale, &headers)?;
    leader(&hale)?;
    let report: FailureReport = object_body(body)?;
    if report.job.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "job must name the failed job",
        ));
    }
    // A few minutes ahead is clock skew, taken as now; more is a wrong time.
    if let Some(at) = report.occurred_at
        && at > chrono::Utc::now() + chrono::TimeDelta::minutes(5)
    {
        return Err(bad_request(format!(
            "occurredAt {} is in the future",
            at.to_rfc3339()
        )));
    }
    let h = hale.clone();
    let node = id.clone();
    blocking(move || {
        h.apply_durable(|fleet, cfg, now| {
            fleet.attribute_failure(
                cfg,
                now,
                &node,
                &report.job,
                report.reason.as_deref(),
                report.occurred_at,
            )
        })
    })
    .await?;
    Ok((StatusCode::CREATED, Json(view(hale, id).await?)))
}

async fn clear_condition(
    State(hale): State<Arc<Hale>>,
    Segments((id, ctype)): Segments<(String, String)>,
    headers: HeaderMap,
    body: Sent,
) -> ApiResult<impl IntoResponse> {
    authorize(&hale, &headers)?;
    leader(&hale)?;
    let ClearRequest { reason } = optional_body(body)?;
    if reason.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "a clear needs a reason (`{\"reason\": \"…\"}`), recorded on its event".to_string(),
        ));
    }
    let h = hale.clone();
    let node = id.clone();
    blocking(move || {
        h.apply_durable(|fleet, cfg, now| fleet.clear_condition(cfg, now, &node, &ctype, &reason))
    })
    .await?;
    Ok(Json(view(hale, id).await?))
}

async fn cordon(
    State(hale): State<Arc<Hale>>,
    Segments(id): Segments<String>,
    headers: HeaderMap,
    body: Sent,
) -> ApiResult<impl IntoResponse> {
    with_reason(hale, id, &headers, body, Fleet::cordon).await
}

async fn uncordon(
    State(hale): State<Arc<Hale>>,
    Segments(id): Segments<String>,
    headers: HeaderMap,
    body: Sent,
) -> ApiResult<impl IntoResponse> {
    with_reason(hale, id, &headers, body, Fleet::uncordon).await
}

/// A verb whose only argument is the operator's reason.
async fn with_reason(
    hale: Arc<Hale>,
    id: String,
    headers: &HeaderMap,
    body: Sent,
    verb: fn(&mut Fleet, Time, &str, &str) -> Result<Outcome, CoreError>,
) -> ApiResult<Operated> {
    authorize(&hale, headers)?;
    let OperateRequest { reason } = optional_body(body)?;
    operate(hale, id, move |fleet, now, node| {
        verb(fleet, now, node, &reason)
    })
    .await
}

async fn drain(
    State(hale): State<Arc<Hale>>,
    Segments(id): Segments<String>,
    headers: HeaderMap,
    body: Sent,
) -> ApiResult<impl IntoResponse> {
    authorize(&hale, &headers)?;
    let req: DrainRequest = optional_body(body)?;
    operate(hale, id, move |fleet, now, node| {
        fleet.drain(now, node, req.active, &req.reason)
    })
    .await
}

impl From<PowerError> for ApiError {
    fn from(e: PowerError) -> Self {
        match e {
            PowerError::Core(c) => c.into(),
            PowerError::NoBmc { .. } => {
                ApiError::new(StatusCode::CONFLICT, "no_bmc", e.to_string())
            }
            PowerError::NotLeader(m) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_leader", m)
            }
            PowerError::Bmc(_) if e.is_bmc() => {
                ApiError::new(StatusCode::BAD_GATEWAY, "bmc_failed", e.to_string())
            }
            PowerError::Bmc(_) => ApiError::new(StatusCode::CONFLICT, "no_bmc", e.to_string()),
            PowerError::Observe { .. } => {
                ApiError::new(StatusCode::CONFLICT, "observe", e.to_string())
            }
            PowerError::Unwritten(e) => e.into(),
        }
    }
}

/// `POST /api/v1/nodes/{id}/power {"action": …, "force": bool}`: done at once and
/// confirmed by reading the power state back.
async fn power(
    State(hale): State<Arc<Hale>>,
    Segments(id): Segments<String>,
    headers: HeaderMap,
    body: Object,
) -> ApiResult<Json<PowerReport>> {
    authorize(&hale, &headers)?;
    let req: PowerRequest = object_body(body)?;
    let verb = Verb::parse(&req.action)
        .filter(|v| *v != Verb::Reboot)
        .ok_or_else(|| {
            bad_request(format!(
                "action {:?} is none of status, on, off, cycle, reset (a reboot that checks its repair is POST …/reboot)",
                req.action
            ))
        })?;
    Ok(Json(hale.power(&id, verb, req.force).await?))
}

/// `POST /api/v1/nodes/{id}/reboot`: queue the node for the reboot flow; 202 with
/// the node as it now is.
async fn reboot(
    State(hale): State<Arc<Hale>>,
    Segments(id): Segments<String>,
    headers: HeaderMap,
    body: Sent,
) -> ApiResult<impl IntoResponse> {
    authorize(&hale, &headers)?;
    let req: RebootRequest = optional_body(body)?;
    let h = hale.clone();
    let node = id.clone();
    tokio::task::spawn_blocking(move || h.request_reboot(&node, &req.reason, req.force))
        .joined()
        .await?;
    Ok((StatusCode::ACCEPTED, Json(view(hale, id).await?)))
}

/// `GET /api/v1/remediations`: the reboot flow's queue, flows and fences under way,
/// and what holds them.
async fn remediations(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Remediations>> {
    authorize_read(&hale, &headers)?;
    no_parameters(raw)?;
    Ok(Json(
        tokio::task::spawn_blocking(move || hale.remediations())
            .joined()
            .await,
    ))
}

/// Changes to nodes are the leader's: a follower would queue what it may not
/// perform, or keep a record the leader never sees.
fn leader(hale: &Hale) -> ApiResult<()> {
    hale.leading()
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_leader", e))
}

/// Apply an operator's verb to node `id` and answer with the node as it now is.
/// Run an operator's verb on node `id`: the node as it is after, and in
/// [`CHANGED`] whether this verb changed it (a client cannot tell from the node
/// alone where another request changed it meanwhile).
async fn operate(
    hale: Arc<Hale>,
    id: String,
    verb: impl FnOnce(&mut Fleet, Time, &str) -> Result<Outcome, CoreError> + Send + 'static,
) -> ApiResult<Operated> {
    leader(&hale)?;
    let h = hale.clone();
    let node = id.clone();
    let outcome =
        blocking(move || h.apply_durable(|fleet, _, now| verb(fleet, now, &node))).await?;
    let changed = if outcome.dirty.contains(&id) {
        "true"
    } else {
        "false"
    };
    Ok(([(CHANGED, changed)], Json(view(hale, id).await?)))
}

/// The header of a verb's answer that says whether the verb changed the node.
pub const CHANGED: &str = "hale-changed";

/// A verb's answer: [`CHANGED`], and the node.
type Operated = (
    [(&'static str, &'static str); 1],
    Json<crate::view::NodeView>,
);

/// Largest `pageSize` accepted; the default is 100.
const MAX_PAGE_SIZE: usize = 1000;

/// A `pageSize` parameter: 1..=[`MAX_PAGE_SIZE`].
fn page_size(value: &str) -> ApiResult<usize> {
    value
        .parse()
        .ok()
        .filter(|n| (1..=MAX_PAGE_SIZE).contains(n))
        .ok_or_else(|| bad_request(format!("pageSize must be 1..={MAX_PAGE_SIZE}")))
}

fn bad_request(detail: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_request", detail)
}

/// `since` / `until`: an RFC 3339 time, or a duration meaning that long ago (`24h`).
fn parse_time(key: &str, value: &str, now: Time) -> ApiResult<i64> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(value) {
        return Ok(t.timestamp_millis());
    }
    let ago = parse_duration(value).map_err(|_| {
        bad_request(format!(
            "{key}={value:?} is neither an RFC 3339 time nor a duration like 24h"
        ))
    })?;
    chrono::TimeDelta::from_std(ago)
        .ok()
        .and_then(|ago| now.checked_sub_signed(ago))
        .map(|t| t.timestamp_millis())
        .ok_or_else(|| bad_request(format!("{key}={value:?} is too far back")))
}

/// The token of the page of `node`'s events after `seq`: the position, and a check
/// that it was made for this node (a digest, not a secret), so a token made up,
/// mistyped or taken from another node is refused rather than read as the end of
/// a history.
pub fn events_token(node: &str, seq: i64) -> String {
    format!("{seq:x}.{}", events_check(node, seq))
}

fn events_check(node: &str, seq: i64) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("hale events\n{node}\n{seq}"));
    crate::hex(&digest[..6])
}

/// Where a page token of `node`'s events says to continue.
fn events_after(node: &str, token: &str) -> ApiResult<i64> {
    let refused = || bad_request("pageToken is not one this server issued for this node's events");
    let (seq, check) = token.split_once('.').ok_or_else(refused)?;
    let seq = i64::from_str_radix(seq, 16).map_err(|_| refused())?;
    if events_check(node, seq) != check {
        return Err(refused());
    }
    Ok(seq)
}

/// Parse the events query of `node`: `since`, `until`, `type` (repeatable, any
/// case), `pageSize`, `pageToken`, `latest`.
pub fn event_query(node: &str, raw: &str, now: Time) -> ApiResult<EventQuery> {
    let mut q = EventQuery {
        page_size: 100,
        ..EventQuery::default()
    };
    let mut given = std::collections::BTreeSet::new();
    for (key, value) in form_urlencoded::parse(raw.as_bytes()) {
        // `type` may repeat; each other takes one value, which a second would replace.
        if key != "type" && !given.insert(key.clone()) {
            return Err(bad_request(format!("{key} is given more than once")));
        }
        match key.as_ref() {
            "since" => q.since = Some(parse_time("since", &value, now)?),
            "until" => q.until = Some(parse_time("until", &value, now)?),
            "type" => {
                for t in value.split(',').filter(|t| !t.is_empty()) {
                    let upper = t.to_ascii_uppercase();
                    if !EVENT_TYPES.contains(&upper.as_str()) {
                        return Err(bad_request(format!(
                            "type={t:?} is not an event type ({})",
                            EVENT_TYPES.join(", ")
                        )));
                    }
                    q.types.push(upper);
                }
            }
            "pageSize" => q.page_size = page_size(&value)?,
            "pageToken" => q.after = Some(events_after(node, &value)?),
            "latest" => q.latest = flag("latest", &value)?,
            other => return Err(bad_request(format!("unknown parameter {other:?}"))),
        }
    }
    if q.latest && q.after.is_some() {
        return Err(bad_request(
            "latest returns the newest page; it takes no pageToken",
        ));
    }
    if let (Some(since), Some(until)) = (q.since, q.until)
        && since >= until
    {
        return Err(bad_request(
            "since must come before until: that window holds no time",
        ));
    }
    Ok(q)
}

async fn node_events(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    Segments(id): Segments<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<EventsView>> {
    authorize_read(&hale, &headers)?;
    let query = event_query(&id, raw.as_deref().unwrap_or(""), chrono::Utc::now())?;
    let node = id.clone();
    let page = blocking(move || hale.events(&node, &query))
        .await
        .map_err(|e| {
            // NATS not answering is a pause to retry after, not a fault of hale's.
            let status = match e {
                crate::store::StoreError::Nats { .. } => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            ApiError::new(status, "store", e.to_string())
        })?
        .ok_or_else(|| unknown(&id))?;
    Ok(Json(EventsView {
        events: page.events,
        next_page_token: page.next.map(|seq| events_token(&id, seq)),
    }))
}

/// `POST /-/reload`: re-read the configuration; an invalid one is refused and the
/// running one stays.
async fn reload(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
) -> ApiResult<Json<serde_json::Value>> {
    authorize(&hale, &headers)?;
    hale.reload_bounded()
        .await
        .map(|warnings| Json(serde_json::json!({"reloaded": true, "warnings": warnings})))
        .map_err(|e| {
            // Said in the log too, as a SIGHUP's refusal is: whoever reads the log
            // sees every reload that did not happen.
            tracing::error!(error = %e, "reload refused; the running configuration stays");
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_config", e.to_string())
        })
}

/// `{source, alerts}`: the list as rendered once per poll, spliced in without a copy.
async fn alerts(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    authorize_read(&hale, &headers)?;
    no_parameters(raw)?;
    let list = hale
        .alerts()
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "source_unavailable", e.to_string()))?;
    let source = hale.off_runtime(Hale::source).await;
    let source = serde_json::to_vec(&source).expect("the source view serialises");
    let parts: [Result<Bytes, std::convert::Infallible>; 4] = [
        Ok(Bytes::from_static(b"{\"source\":")),
        Ok(source.into()),
        Ok(Bytes::from_static(b",\"alerts\":")),
        Ok(list),
    ];
    let body = Body::from_stream(futures::stream::iter(
        parts.into_iter().chain([Ok(Bytes::from_static(b"}"))]),
    ));
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// The Alertmanager webhook receiver. The body is read up to the configured limit;
/// nothing is applied unless all of it parses.
async fn webhook(State(hale): State<Arc<Hale>>, headers: HeaderMap, body: Body) -> Response {
    match receive(hale.clone(), headers, body).await {
        Ok(result) => counted(&hale, Json(result).into_response()),
        Err(e) => webhook_refused(&hale, e),
    }
}

/// A refused delivery's answer, said in the log and counted.
fn webhook_refused(hale: &Hale, e: ApiError) -> Response {
    log_refused(&e);
    counted(hale, e.into_response())
}

/// Count a delivery's answer by its status.
fn counted(hale: &Hale, response: Response) -> Response {
    hale.metrics
        .webhook_requests
        .get_or_create(&CodeLabel {
            code: response.status().as_u16().to_string(),
        })
        .inc();
    response
}

/// The refused deliveries the log has not said yet, by answer.
struct Refusals {
    /// When the last line was written.
    said: Option<std::time::Instant>,
    /// (status, error, the detail without its numbers) → how many since, and the
    /// last one's detail.
    since: std::collections::BTreeMap<(u16, &'static str, String), (u64, String)>,
    /// A line for them is due.
    due: bool,
}

static REFUSALS: std::sync::Mutex<Refusals> = std::sync::Mutex::new(Refusals {
    said: None,
    since: std::collections::BTreeMap::new(),
    due: false,
});

/// The quietest the log is about refused deliveries.
const REFUSALS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Say a refused Alertmanager delivery in the log: at once when none was said in
/// the last 10 s, else at the end of those 10 s, with how many were refused
/// meanwhile for each answer (one line per kind of refusal). The sender may be an
/// Alertmanager whose credentials do not match `apiTokenFile`, or one repeating a
/// malformed body: either would otherwise go unseen on hale's side, or fill its
/// log. A leader's refusal on a follower is no fault and says nothing.
fn log_refused(e: &ApiError) {
    if e.status == StatusCode::SERVICE_UNAVAILABLE {
        return;
    }
    let now = std::time::Instant::now();
    let mut r = REFUSALS.lock().expect("refusals lock");
    let quiet = r
        .said
        .is_none_or(|t| now.duration_since(t) >= REFUSALS_EVERY);
    if quiet && !r.due {
        r.said = Some(now);
        drop(r);
        say_refused(e.status.as_u16(), e.error, 1, &e.detail);
        return;
    }
    // One line per reason: a body that is no payload and one sent for another
    // receiver are told apart, not counted as the last one's (at most 16 kinds a
    // window; more are counted under the last).
    let mut kind = (
        e.status.as_u16(),
        e.error,
        // Positions and sizes in the detail make no reason of their own.
        e.detail
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .take(200)
            .collect(),
    );
    if r.since.len() >= 16 && !r.since.contains_key(&kind) {
        kind = r.since.keys().next_back().cloned().expect("sixteen kinds");
    }
    let seen = r.since.entry(kind).or_insert((0, String::new()));
    seen.0 += 1;
    seen.1.clone_from(&e.detail);
    if !r.due {
        r.due = true;
        let wait = r.said.map_or(std::time::Duration::ZERO, |t| {
            REFUSALS_EVERY.saturating_sub(now.duration_since(t))
        });
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let mut r = REFUSALS.lock().expect("refusals lock");
            r.due = false;
            r.said = Some(std::time::Instant::now());
            let since = std::mem::take(&mut r.since);
            drop(r);
            for ((status, error, _), (refused, detail)) in since {
                say_refused(status, error, refused, &detail);
            }
        });
    }
}

fn say_refused(status: u16, error: &str, refused: u64, detail: &str) {
    let hint = if status == StatusCode::UNAUTHORIZED.as_u16() {
        ": the receiver's credentials (http_config.authorization.credentials_file) must be apiTokenFile's token"
    } else {
        ""
    };
    tracing::warn!(
        status,
        error,
        refused,
        "{} refused: {}{hint}",
        if refused == 1 {
            "an Alertmanager webhook delivery was".to_string()
        } else {
            format!("{refused} Alertmanager webhook deliveries were")
        },
        crate::core::labels::loggable(detail)
    );
}

async fn receive(
    hale: Arc<Hale>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<crate::service::WebhookResult> {
    authorize(&hale, &headers)?;
    // On a shared store the leader alone ingests: Alertmanager retries a 503,
    // and its next try may reach the leader.
    if hale.shared() {
        leader(&hale)?;
    }
    let limit = hale.config().config.alertmanager.max_webhook_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("webhook bodies are limited to {limit} bytes (alertmanager.maxWebhookBytes)"),
        )
    };
    if declared_length(&headers).is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    // Alertmanager sends its webhooks as they are: a body encoded on the way (a
    // proxy's gzip) would read as text it is not.
    if let Some(coding) = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|c| !c.is_empty() && c != "identity")
    {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "Content-Encoding {coding:?} is not taken: Alertmanager sends webhooks unencoded (a proxy between should pass them as they are)"
            ),
        ));
    }
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|e| {
        if crate::server::timed_out(&e) {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                e.to_string(),
            )
        } else if crate::server::unreadable(&e) {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("the request body could not be read: {e}"),
            )
        } else {
            too_large()
        }
    })?;
    Ok(blocking(move || hale.ingest_webhook(&bytes)).await?)
}

/// The bytes of `/metrics` answers rendered or being sent at once, all scrapes
/// together: one is about 1.2 KiB a node (12 MiB at 10,000 nodes), and a
/// hundred clients that ask and then read nothing would otherwise hold a GiB.
const ANSWER_ROOM: usize = 64 << 20;

/// How long a scrape waits for room for its answer: Prometheus's default
/// `scrape_timeout`.
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Room for the `/metrics` answers under way, in KiB: each takes what it will
/// take, as the last render and the fleet since say (all of the room when it is
/// larger), before it is rendered, and gives it back once its answer is sent or
/// its connection gone.
static ANSWERS: std::sync::LazyLock<Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| Arc::new(tokio::sync::Semaphore::new(ANSWER_ROOM / 1024)));

/// When the last scrape that found no room was said in the log.
static ANSWERLESS_SAID: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

async fn metrics(State(hale): State<Arc<Hale>>) -> Response {
    // Off the async workers: counting the nodes takes the fleet lock.
    let counted = Arc::clone(&hale);
    let hint = tokio::task::spawn_blocking(move || counted.metrics.size_hint())
        .await
        .unwrap_or(ANSWER_ROOM);
    let kib = hint.div_ceil(1024).clamp(1, ANSWER_ROOM / 1024);
    let wait = tokio::time::timeout(ANSWER_WAIT, ANSWERS.clone().acquire_many_owned(kib as u32));
    let Ok(Ok(taken)) = wait.await else {
        return busy(
            &ANSWERLESS_SAID,
            || {
                tracing::warn!(
                    room_bytes = ANSWER_ROOM,
                    "the /metrics answers under way fill their room (clients that ask and read slowly, or not at all): scrapes wait {}s, then are answered 503",
                    ANSWER_WAIT.as_secs()
                );
            },
            "too many /metrics answers are being sent at once; try again",
        );
    };
    let text = tokio::task::spawn_blocking(move || {
        hale.refresh_gauges();
        hale.metrics.render()
    })
    .await
    .unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        held(Bytes::from(text), taken),
    )
        .into_response()
}

/// A body that holds `taken` until it is sent, or dropped with its connection:
/// sent 64 KiB at a time, each part taken only when the connection has room for
/// it, so the room is given back once the answer is out, not when it is queued.
fn held(bytes: Bytes, taken: tokio::sync::OwnedSemaphorePermit) -> Body {
    const PART: usize = 64 << 10;
    let parts = futures::stream::unfold((bytes, taken), |(mut rest, taken)| async move {
        if rest.is_empty() {
            return None;
        }
        let part = rest.split_to(rest.len().min(PART));
        Some((Ok::<_, std::convert::Infallible>(part), (rest, taken)))
    });
    Body::from_stream(parts)
}

/// Liveness: 503 once a panic poisoned the state or a loop stopped going round, so a
/// supervisor restarts hale rather than leaving it to serve a frozen picture.
async fn healthz(State(hale): State<Arc<Hale>>) -> ApiResult<&'static str> {
    hale.alive()
        .map(|()| "ok")
        .map_err(|why| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unhealthy", why))
}

async fn readyz(State(hale): State<Arc<Hale>>) -> ApiResult<&'static str> {
    if hale.ready() {
        Ok("ready")
    } else {
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            if hale.shared() {
                "the shared store does not answer, this replica is still taking over from the last leader (see its log), or its first Alertmanager poll as leader has not completed yet"
            } else {
                "the first Alertmanager poll has not completed yet"
            },
        ))
    }
}

/// Run a store-touching closure off the async workers.
async fn blocking<T, E>(f: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    tokio::task::spawn_blocking(f).joined().await
}

/// A hale on a store in `dir` whose API token is `s3cret`.
#[cfg(test)]
pub(crate) fn token_hale(dir: &std::path::Path) -> Arc<Hale> {
    std::fs::write(dir.join("token"), "s3cret\n").unwrap();
    let path = dir.join("hale.yaml");
    std::fs::write(
        &path,
        format!(
            "apiTokenFile: {}\nstore: {{ path: {} }}\nalertmanager: {{ pollInterval: 0 }}\n",
            dir.join("token").display(),
            dir.join("data").display()
        ),
    )
    .unwrap();
    Hale::open(
        crate::config::Config::load(Some(&path)).unwrap(),
        Arc::new(crate::orchestrator::NoOrchestrator),
    )
    .unwrap()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    /// `?total`, `total=1`, `total=TRUE` and `total=true` alike; anything else
    /// is refused, naming the forms taken.
    #[test]
    fn a_yes_or_no_is_read_one_way_everywhere() {
        for (value, want) in [
            ("", true),
            ("1", true),
            ("true", true),
            ("TRUE", true),
            ("0", false),
            ("False", false),
        ] {
            assert_eq!(flag("total", value).unwrap(), want, "{value:?}");
            assert_eq!(node_query(&format!("total={value}")).unwrap().count, want);
        }
        for value in ["yes", "2", "tru"] {
            let e = flag("latest", value).unwrap_err();
            assert!(
                e.detail.contains("true or false, 1 or 0, or latest alone"),
                "{}",
                e.detail
            );
        }
        assert!(node_query("total").unwrap().count);
    }

    use super::*;

    #[test]
    fn an_address_is_an_ip_or_localhost_never_a_name() {
        for host in [
            "127.0.0.1:9470",
            "10.0.0.7",
            "[::1]:9470",
            "[fe80::1]",
            "localhost:9470",
            "LOCALHOST",
            "localhost.",
            "hale.localhost:9470",
        ] {
            assert!(address(host), "{host}");
        }
        for host in [
            "rebind.evil.example:9470",
            "hale.monitoring.svc",
            "hale",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "[::1].evil:9470",
            "",
        ] {
            assert!(!address(host), "{host}");
        }
    }

    /// A body sent in chunks, with no length declared, is refused once it passes
    /// the limit: a 413 in JSON, as one declaring its length is.
    #[tokio::test]
    async fn a_body_past_the_limit_is_a_413_however_it_is_sent() {
        use axum::extract::FromRequest as _;
        let chunks = futures::stream::iter(
            (0..3).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 1 << 20]))),
        );
        let request = axum::extract::Request::new(Body::from_stream(chunks));
        let sent = Bytes::from_request(request, &()).await;
        let e = optional_body::<OperateRequest>(sent).unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(e.error, "payload_too_large");
        assert_eq!(e.detail, "request bodies are limited to 2097152 bytes");
        let small = axum::extract::Request::new(Body::from(r#"{"reason": "bios"}"#));
        let sent = Bytes::from_request(small, &()).await;
        assert_eq!(
            optional_body::<OperateRequest>(sent).unwrap().reason,
            "bios"
        );
    }

    #[test]
    fn a_body_takes_what_it_declares_or_the_most_its_route_takes() {
        let room = Room::new(4 << 20, || 8 << 20);
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            h
        };
        let declared = |n: &str| headers(&[("content-length", n)]);
        let chunked = headers(&[("transfer-encoding", "chunked")]);
        for (path, headers, kib) in [
            (WEBHOOK_PATH, declared("1"), 1),
            (WEBHOOK_PATH, declared("5000"), 5),
            (WEBHOOK_PATH, declared("8192"), 8),
            (WEBHOOK_PATH, declared("0"), 0),
            // Refused unread: it takes no room.
            (WEBHOOK_PATH, declared("8388609"), 0),
            ("/api/v1/nodes/n1/cordon", declared("2097153"), 0),
            ("/api/v1/nodes/n1/cordon", chunked.clone(), 2048),
            ("/api/v1/nodes/n1/cordon", HeaderMap::new(), 0),
            // Larger than the room: all of it, not a wait for ever.
            (WEBHOOK_PATH, declared("6291456"), 4096),
            (WEBHOOK_PATH, chunked.clone(), 4096),
            // A form takes far less than an API body.
            ("/ui/login", declared("300"), 1),
            ("/ui/login", declared("65537"), 0),
            ("/ui/nodes/n1/cordon", chunked.clone(), 64),
        ] {
            assert_eq!(room.need(path, &headers), kib, "{path} {headers:?}");
        }
    }

    /// A body that finds no room waits, then is a 503 to be sent again; a
    /// request without a body never waits; the room is given back as the
    /// request is answered.
    #[tokio::test(start_paused = true)]
    async fn bodies_past_the_room_wait_then_are_told_to_come_back() {
        use tower::ServiceExt as _;
        let room = Room::new(8 << 10, || 8 << 10);
        let app = Router::new()
            .route(
                WEBHOOK_PATH,
                post(|body: Bytes| async move { body.len().to_string() }),
            )
            .route("/healthz", get(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state(
                room.clone(),
                wait_for_room,
            ));
        let post_of = |length: usize, body: Body| {
            axum::extract::Request::post(WEBHOOK_PATH)
                .header("content-length", length)
                .body(body)
                .unwrap()
        };
        // A slow sender declares 6 KiB and holds them while it sends.
        let (send, sent) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let slow = tokio::spawn(
            app.clone()
                .oneshot(post_of(6 << 10, Body::from_stream(tokio_stream_of(sent)))),
        );
        for _ in 0..1000 {
            if room.kib.available_permits() == 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(room.kib.available_permits(), 2, "the slow body holds 6 KiB");
        let busy = app
            .clone()
            .oneshot(post_of(4 << 10, Body::from(vec![b'x'; 4 << 10])))
            .await
            .unwrap();
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "5");
        let no_body = axum::extract::Request::get("/healthz")
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            app.clone().oneshot(no_body).await.unwrap().status(),
            StatusCode::OK
        );
        send.send(Ok(Bytes::from(vec![b'x'; 6 << 10])))
            .await
            .unwrap();
        drop(send);
        let answered = slow.await.unwrap().unwrap();
        assert_eq!(answered.status(), StatusCode::OK);
        assert_eq!(room.kib.available_permits(), 8);
        let after = app
            .oneshot(post_of(4 << 10, Body::from(vec![b'x'; 4 << 10])))
            .await
            .unwrap();
        let body = axum::body::to_bytes(after.into_body(), 64).await.unwrap();
        assert_eq!(&body[..], b"4096");
    }

    /// A request that posts a body to the API without the token is answered
    /// before any of it is read or given room — one whose body never ends, too —
    /// and one with the token is read.
    #[tokio::test]
    async fn a_body_to_the_api_is_read_only_once_its_request_is_authorized() {
        use tower::ServiceExt as _;
        let dir = tempfile::tempdir().unwrap();
        let hale = token_hale(dir.path());
        let app = limited(router(Arc::clone(&hale)), hale);
        let endless =
            || Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        for (path, length) in [
            (WEBHOOK_PATH, Some("1000000")),
            (WEBHOOK_PATH, None),
            ("/api/v1/nodes/n1/cordon", Some("100")),
            ("/api/v1/nodes/n1/failures", None),
            ("/-/reload", None),
        ] {
            let mut request = axum::extract::Request::post(path);
            request = match length {
                Some(n) => request.header("content-length", n),
                None => request.header("transfer-encoding", "chunked"),
            };
            let answer = tokio::time::timeout(
                std::time::Duration::from_secs(60),
                app.clone().oneshot(request.body(endless()).unwrap()),
            )
            .await
            .expect("answered without reading the body")
            .unwrap();
            assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{path}");
        }
        let body = r#"{"reason": "bios"}"#;
        let authorized = axum::extract::Request::post("/api/v1/nodes/n1/cordon")
            .header("authorization", "Bearer s3cret")
            .header("content-length", body.len())
            .body(Body::from(body))
            .unwrap();
        let answer = app.oneshot(authorized).await.unwrap();
        assert_eq!(answer.status(), StatusCode::NOT_FOUND, "read and answered");
    }

    /// The chunks a channel receives, as a stream.
    fn tokio_stream_of<T: Send + 'static>(
        mut chunks: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures::Stream<Item = T> + Send {
        futures::stream::poll_fn(move |cx| chunks.poll_recv(cx))
    }

    /// A failure report that does not read is said as an operator verb's body is:
    /// `the request body: `, the field at fault, what is wrong with it.
    #[tokio::test]
    async fn a_failure_report_that_does_not_read_names_its_field() {
        use axum::extract::FromRequest as _;
        for (body, says) in [
            ("{}", "the request body: missing field `job`"),
            (
                r#"{"job": "j", "occurredAt": "yesterday"}"#,
                "the request body: occurredAt: \"yesterday\" is not an RFC 3339 time",
            ),
            (
                r#"{"job": "j", "occurredAt": "2026-12-06"}"#,
                "the request body: occurredAt: \"2026-12-06\" is not an RFC 3339 time",
            ),
            (
                r#"{"job": "j", "occurredAt": 12345}"#,
                "the request body: occurredAt: 12345 is not an RFC 3339 time",
            ),
            (
                r#"{"job": "j", "node": "n1"}"#,
                "the request body: node: unknown field `node`",
            ),
            (
                r#"["j", "r", null]"#,
                "the request body must be a JSON object",
            ),
            ("[]", "the request body must be a JSON object"),
            (r#"{"job": "#, "the request body: "),
        ] {
            let request = axum::extract::Request::builder()
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap();
            let sent =
                Json::<serde_json::Map<String, serde_json::Value>>::from_request(request, &())
                    .await;
            let e = object_body::<FailureReport>(sent).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert!(e.detail.starts_with(says), "{body}: {}", e.detail);
        }
        // A time as chrono reads one, a space for the `T` too.
        let request = axum::extract::Request::builder()
            .header("content-type", "application/json")
            .body(Body::from(
                r#"{"job": "j", "occurredAt": "2026-12-06 09:30:00+01:00"}"#,
            ))
            .unwrap();
        let sent =
            Json::<serde_json::Map<String, serde_json::Value>>::from_request(request, &()).await;
        let report = object_body::<FailureReport>(sent).unwrap();
        assert_eq!(
            report.occurred_at.unwrap().to_rfc3339(),
            "2026-12-06T08:30:00+00:00"
        );
    }

    #[test]
    fn event_queries() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap();
        let ms = |t: &str| {
            chrono::DateTime::parse_from_rfc3339(t)
                .unwrap()
                .timestamp_millis()
        };
        let q = event_query("n1", "", now).unwrap();
        assert_eq!((q.page_size, q.latest, q.types.len()), (100, false, 0));
        let raw = format!(
            "since=24h&until=2026-08-05T11%3A00%3A00Z&type=score_changed&type=CONDITION_RAISED,heartbeat_missed&pageSize=20&pageToken={}",
            events_token("n1", 255)
        );
        let q = event_query("n1", &raw, now).unwrap();
        assert_eq!(q.since, Some(ms("2026-08-04T12:00:00Z")));
        assert_eq!(q.until, Some(ms("2026-08-05T11:00:00Z")));
        assert_eq!(
            q.types,
            ["SCORE_CHANGED", "CONDITION_RAISED", "HEARTBEAT_MISSED"]
        );
        assert_eq!((q.page_size, q.after), (20, Some(255)));
        assert!(event_query("n1", "latest=true", now).unwrap().latest);
        let other = format!("pageToken={}", events_token("n2", 255));
        let latest_and_token = format!("latest=true&pageToken={}", events_token("n1", 1));
        for bad in [
            "type=SCORE_CHANGD",
            "pageSize=0",
            "pageSize=1001",
            "pageToken=zz",
            // Hex, but not issued: once read as a position past the end.
            "pageToken=abc",
            "pageToken=ff.000000000000",
            // Another node's.
            &other,
            "since=yesterday",
            "since=100000000d",
            "latest=maybe",
            &latest_and_token,
            "limit=5",
            "pageSize=1&pageSize=5",
            "since=1h&since=2h",
            "since=1h&until=2h",
            "since=2026-08-05T11:00:00Z&until=2026-08-05T11:00:00Z",
        ] {
            let e = event_query("n1", bad, now).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
    }
}
