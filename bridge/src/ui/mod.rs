//! The web UI (DESIGN §11): server-rendered pages at `/` and under `/ui/`, embedded
//! in the binary with one small script of hale's own (the refresh) and one style
//! sheet; nothing is fetched from anywhere else, so it works offline.
//!
//! Reading needs nothing unless `ui.requireToken`. Operating needs the API token:
//! a reader signs in with it and gets a session cookie (HttpOnly, SameSite=Strict,
//! 12 hours) that is an HMAC of its expiry under the token, so it needs no server
//! state, holds across replicas and dies with a changed token. Every form that
//! changes anything carries a CSRF token bound to that cookie, and a cross-site
//! `Origin` is refused as well.

mod chart;
mod html;
mod pages;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::Utc;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::Joined as _;
use crate::core::{CoreError, EventKind, Time};
use crate::http::{listing, same_origin};
use crate::secrets_equal;
use crate::service::{Hale, StepError};
use crate::store::EventQuery;
use chart::Change;
use html::{node_href, query};
use pages::{Auth, Chrome, Filters, Flash, NodePage};

const COOKIE: &str = "hale_session";
const SESSION: Duration = Duration::from_secs(12 * 3600);
/// The most score changes one chart draws (the newest of its window).
const MAX_CHANGES: usize = 1000;
/// Events per page of a node's timeline.
const EVENTS_PER_PAGE: usize = 50;

const CSS: &str = include_str!("static/hale.css");
const JS: &str = include_str!("static/hale.js");
const ICON: &str = include_str!("static/hale.svg");

/// The UI's routes, to merge with the API's [`crate::http::router`].
pub fn router(hale: Arc<Hale>) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/ui/nodes", get(nodes))
        .route("/ui/nodes/{id}", get(node))
        .route("/ui/nodes/{id}/confirm", get(confirm))
        .route("/ui/nodes/{id}/{verb}", get(no_page).post(act))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/static/hale.css", get(|| asset("text/css", CSS)))
        .route("/ui/static/hale.js", get(|| asset("text/javascript", JS)))
        .route("/ui/static/hale.svg", get(|| asset("image/svg+xml", ICON)))
        .route("/ui/{*rest}", get(no_page))
        .layer(axum::extract::DefaultBodyLimit::max(
            crate::http::FORM_LIMIT,
        ))
        .with_state(hale)
}

/// A page the UI does not have, said as a page: most often a node id holding
/// `/` pasted into the address unescaped.
async fn no_page(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    let auth = auth(&hale, &headers, Utc::now());
    let path = uri.path();
    let hint = if path.starts_with("/ui/nodes/") {
        " A node id holding `/` is written with %2F in the address: /ui/nodes/rack1%2Fn-3."
    } else {
        ""
    };
    refused(
        &auth,
        "/",
        StatusCode::NOT_FOUND,
        "No such page",
        format!("hale has no page at {path}.{hint}"),
    )
}

async fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// An HTML answer with the headers that keep a page from being framed, sniffed,
/// cached or made to run anything but hale's own script.
fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    r
}

fn redirect(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

fn mac(token: &str, what: &str) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("HMAC takes any key");
    m.update(what.as_bytes());
    crate::hex(&m.finalize().into_bytes())
}

/// A session cookie's value for a session ending at `expiry` (unix seconds).
fn session_value(token: &str, expiry: i64) -> String {
    format!(
        "{expiry}.{}",
        mac(token, &format!("hale-ui-session:{expiry}"))
    )
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether a session cookie's value is one hale issued under `token` and has not
/// ended by `now`.
fn session_holds(token: &str, value: &str, now: Time) -> bool {
    value
        .split_once('.')
        .and_then(|(expiry, _)| expiry.parse::<i64>().ok())
        .is_some_and(|expiry| {
            expiry > now.timestamp()
                && secrets_equal(value.as_bytes(), session_value(token, expiry).as_bytes())
        })
}

/// Who is asking: no token configured, a reader, or a signed-in operator.
fn auth(hale: &Hale, headers: &HeaderMap, now: Time) -> Auth {
    let cfg = hale.config();
    let Some(token) = cfg.api_token.as_ref().map(|t| t.expose()) else {
        return Auth::NoToken;
    };
    match cookie(headers, COOKIE).filter(|value| session_holds(token, value, now)) {
        Some(value) => Auth::Operator {
            csrf: mac(token, &format!("hale-ui-csrf:{value}")),
        },
        None => Auth::Reader,
    }
}

/// The path and query a request was for, to come back to.
fn here(path: &str, raw: &Option<String>) -> String {
    match raw {
        Some(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path.to_string(),
    }
}

/// Who reads the page at `path` (with its query), and the page's own address;
/// with `ui.requireToken`, a reader who has not signed in is sent to sign in.
fn reader(
    hale: &Hale,
    headers: &HeaderMap,
    path: &str,
    raw: &Option<String>,
) -> Result<(Auth, String), Box<Response>> {
    let auth = auth(hale, headers, Utc::now());
    let here = here(path, raw);
    let required = hale.config().config.ui.require_token;
    if required && !matches!(auth, Auth::Operator { .. }) {
        return Err(Box::new(redirect(&format!(
            "/ui/login{}",
            query(&[("next", &here)])
        ))));
    }
    Ok((auth, here))
}

/// A page in hale's frame; `refresh`: whether it keeps itself current (not a
/// form to fill in, nor a refusal to read).
fn page(
    title: &str,
    here: &str,
    auth: &Auth,
    flash: Option<(Flash, String)>,
    body: &str,
    refresh: bool,
) -> String {
    pages::layout(
        &Chrome {
            title,
            here,
            auth,
            now: Utc::now(),
            flash,
            refresh,
        },
        body,
    )
}

async fn overview(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let (auth, here) = match reader(&hale, &headers, "/", &raw) {
        Ok(read) => read,
        Err(r) => return *r,
    };
    let rows = hale.clusters(false).await;
    html(
        StatusCode::OK,
        page(
            "Overview",
            &here,
            &auth,
            None,
            &pages::overview(&rows),
            true,
        ),
    )
}

async fn nodes(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let (auth, here) = match reader(&hale, &headers, "/ui/nodes", &raw) {
        Ok(read) => read,
        Err(r) => return *r,
    };
    let cfg = hale.config();
    let local = cfg.config.cluster.clone();
    let mut f = Filters {
        start: 1,
        cluster: local.clone(),
        ..Filters::default()
    };
    let mut bad = None;
    for (key, value) in form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes()) {
        let value = value.into_owned();
        match key.as_ref() {
            "q" => f.q = value,
            "health" => f.health = value,
            "status" => f.status = value,
            "pool" => f.pool = value,
            "cluster" if !value.is_empty() => f.cluster = value,
            "sort" => match crate::view::Sort::parse(&value) {
                Some(s) => f.sort = s,
                None => bad = Some(format!("sort={value:?} is not an order")),
            },
            "pageToken" => f.token = value,
            "start" => f.start = value.parse().unwrap_or(1).max(1),
            _ => {}
        }
    }
    // Where a page starts counts only beside its token: without one it is the first.
    if f.token.is_empty() {
        f.start = 1;
    }
    // Pools are this hale's: a member's or every cluster's listing takes none.
    let here_only = f.cluster == local;
    let fed = hale.federation();
    let mut notes = Vec::new();
    if !here_only && !f.pool.is_empty() {
        notes.push(format!(
            "Pools are each cluster's own: the pool filter applies to {local} only, and is left out here."
        ));
        f.pool.clear();
    }
    if !here_only && f.cluster != "*" && !fed.names().any(|n| n == f.cluster) {
        notes.push(format!(
            "No cluster {:?} is served here or by a federation member.",
            f.cluster
        ));
    }
    let size = pages::NODES_PER_PAGE.to_string();
    let sort = f.sort.name();
    let all = f.cluster == "*";
    let listing = match bad {
        Some(e) => Err(e),
        None => {
            let api = query(&[
                ("q", &f.q),
                ("health", &f.health),
                ("status", &f.status),
                ("pool", &f.pool),
                ("cluster", if all { "" } else { &f.cluster }),
                ("allClusters", if all { "true" } else { "" }),
                ("total", if all { "" } else { "true" }),
                ("sort", &sort),
                ("pageSize", &size),
                ("pageToken", &f.token),
            ]);
            listing(hale.clone(), api.trim_start_matches('?'))
                .await
                .map_err(|e| e.detail().to_string())
        }
    };
    let pools: Vec<String> = std::iter::once("cluster".to_string())
        .chain(cfg.config.pools.iter().map(|p| p.name.clone()))
        .filter(|_| here_only)
        .collect();
    let clusters: Vec<String> = std::iter::once(local)
        .chain(fed.names().map(str::to_string))
        .collect();
    html(
        StatusCode::OK,
        page(
            "Nodes",
            &here,
            &auth,
            None,
            &pages::nodes(&f, &listing, &pools, &clusters, &notes),
            true,
        ),
    )
}

/// The window a node's page charts: one of [`pages::WINDOWS`].
fn window(text: &str) -> Option<chrono::TimeDelta> {
    pages::WINDOWS.contains(&text).then_some(())?;
    let d = crate::core::settings::parse_duration(text).ok()?;
    chrono::TimeDelta::from_std(d).ok()
}

fn refused(
    hale_auth: &Auth,
    here: &str,
    status: StatusCode,
    title: &str,
    text: String,
) -> Response {
    html(
        status,
        page(
            title,
            here,
            hale_auth,
            Some((Flash::Refused, text)),
            &format!(
                r#"<h1>{}</h1><p><a href="/">Back to the overview</a></p>"#,
                html::esc(title)
            ),
            false,
        ),
    )
}

async fn node(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let now = Utc::now();
    let path = format!("/ui/nodes/{}", html::segment(&id));
    let (auth, here) = match reader(&hale, &headers, &path, &raw) {
        Ok(read) => read,
        Err(r) => return *r,
    };
    let local = hale.config().config.cluster.clone();
    let (mut member, mut win, mut order, mut token, mut types, mut done) = (
        None,
        pages::DEFAULT_WINDOW.to_string(),
        "latest".to_string(),
        None,
        Vec::new(),
        None,
    );
    // What the page cannot take is said above it, and left out.
    let mut bad = Vec::new();
    for (key, value) in form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes()) {
        let value = value.into_owned();
        match key.as_ref() {
            "cluster" if !value.is_empty() && value != local => member = Some(value),
            "window" if window(&value).is_some() => win = value,
            "window" => bad.push(format!(
                "window={value:?} is not one of {}",
                pages::WINDOWS.join(", ")
            )),
            "order" if value == "window" || value == "latest" => order = value,
            "order" => bad.push(format!("order={value:?} is not latest or window")),
            "pageToken" if !value.is_empty() => token = Some(value),
            "type" if crate::core::EVENT_TYPES.contains(&value.as_str()) => types.push(value),
            "type" => bad.push(format!("type={value:?} is not an event type")),
            "done" if VERBS.contains(&value.as_str()) => done = Some(value),
            _ => {}
        }
    }
    let from = now - window(&win).expect("checked");
    let fed = hale.federation();
    let member_url = member.as_deref().and_then(|m| fed.url(m));
    if let Some(m) = member.as_deref()
        && !fed.names().any(|n| n == m)
    {
        return refused(
            &auth,
            &here,
            StatusCode::NOT_FOUND,
            "No such cluster",
            format!("no federation member serves cluster {m:?}"),
        );
    }
    let since = from.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let most = MAX_CHANGES.to_string();
    let trend = [
        ("type", "SCORE_CHANGED"),
        ("since", since.as_str()),
        ("pageSize", most.as_str()),
        ("latest", "true"),
    ];
    let size = EVENTS_PER_PAGE.to_string();
    let mut asked: Vec<(&str, &str)> = vec![("pageSize", &size)];
    if order == "latest" {
        asked.push(("latest", "true"));
    } else {
        asked.push(("since", &since));
        if let Some(t) = &token {
            asked.push(("pageToken", t));
        }
    }
    asked.extend(types.iter().map(|t| ("type", t.as_str())));
    // The node, its trend and its timeline are asked at once: from a member, three
    // requests that wait together.
    let view = async {
        match &member {
            None => {
                let h = hale.clone();
                let node = id.clone();
                tokio::task::spawn_blocking(move || h.node(&node))
                    .joined()
                    .await
                    .ok_or_else(|| (StatusCode::NOT_FOUND, format!("hale knows no node {id:?}")))
            }
            Some(m) => fed.node(m, &id).await.map_err(|e| match e {
                crate::federation::MemberError::Refused { status: 404, .. } => (
                    StatusCode::NOT_FOUND,
                    format!("cluster {m} knows no node {id:?}"),
                ),
                e => (
                    StatusCode::BAD_GATEWAY,
                    format!("cluster {m} has no health here: {e}"),
                ),
            }),
        }
    };
    let (view, changes, events) = tokio::join!(
        view,
        read_events(&hale, member.as_deref(), &id, &trend),
        read_events(&hale, member.as_deref(), &id, &asked),
    );
    let view = match view {
        Ok(v) => v,
        Err((status, text)) => {
            let title = if status == StatusCode::NOT_FOUND {
                "No such node"
            } else {
                "No answer"
            };
            return refused(&auth, &here, status, title, text);
        }
    };
    let changes = changes.map(|(events, _)| {
        events
            .iter()
            .filter_map(|e| match e.event.kind {
                EventKind::ScoreChanged {
                    score,
                    previous_score,
                    ..
                } => Some(Change {
                    at: e.event.occurred_at,
                    score,
                    previous: previous_score,
                }),
                _ => None,
            })
            .collect::<Vec<_>>()
    });
    let changes_cut = changes.as_ref().is_ok_and(|c| c.len() >= MAX_CHANGES);
    let flash = done
        .map(|verb| {
            (
                Flash::Done,
                format!(
                    "{}: done. The node below is as hale now holds it.",
                    pages::title(&verb)
                ),
            )
        })
        .or_else(|| {
            (!bad.is_empty()).then(|| (Flash::Refused, format!("{}: left out.", bad.join("; "))))
        });
    let body = pages::node(&NodePage {
        node: &view,
        member: member.as_deref(),
        member_url: member_url.as_deref(),
        window: &win,
        from,
        to: now,
        changes,
        changes_cut,
        events,
        types: &types,
        order: &order,
        auth: &auth,
    });
    html(
        StatusCode::OK,
        page(&view.id, &here, &auth, flash, &body, true),
    )
}

/// A page of a node's events, from this hale's store or from its member; the
/// query as the events endpoint takes it.
async fn read_events(
    hale: &Arc<Hale>,
    member: Option<&str>,
    id: &str,
    asked: &[(&str, &str)],
) -> Result<(Vec<crate::store::StoredEvent>, Option<String>), String> {
    if let Some(m) = member {
        return hale
            .federation()
            .events(m, id, asked)
            .await
            .map(|v| (v.events, v.next_page_token))
            .map_err(|e| format!("cluster {m} has no history here: {e}"));
    }
    let raw = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(asked)
        .finish();
    let q: EventQuery =
        crate::http::event_query(id, &raw, Utc::now()).map_err(|e| e.detail().to_string())?;
    let h = hale.clone();
    let node = id.to_string();
    tokio::task::spawn_blocking(move || h.events(&node, &q))
        .joined()
        .await
        .map_err(|e| format!("the store did not answer: {e}"))
        .map(|page| {
            page.map_or((Vec::new(), None), |p| {
                (
                    p.events,
                    p.next.map(|seq| crate::http::events_token(id, seq)),
                )
            })
        })
}

const VERBS: [&str; 4] = ["cordon", "uncordon", "drain", "clear"];

async fn confirm(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let auth = auth(&hale, &headers, Utc::now());
    let here = here(&format!("/ui/nodes/{}/confirm", html::segment(&id)), &raw);
    let Some(csrf) = auth.csrf().map(str::to_string) else {
        return redirect(&format!("/ui/login{}", query(&[("next", &here)])));
    };
    let (mut verb, mut condition) = (None, None);
    for (key, value) in form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes()) {
        match key.as_ref() {
            "verb" if VERBS.contains(&value.as_ref()) => verb = Some(value.into_owned()),
            "condition" if !value.is_empty() => condition = Some(value.into_owned()),
            _ => {}
        }
    }
    let Some(verb) = verb.filter(|v| v != "clear" || condition.is_some()) else {
        return refused(
            &auth,
            &here,
            StatusCode::BAD_REQUEST,
            "No such verb",
            "verb must be cordon, uncordon, drain, or clear with a condition".into(),
        );
    };
    let node = {
        let (h, id) = (hale.clone(), id.clone());
        tokio::task::spawn_blocking(move || h.node(&id))
            .joined()
            .await
    };
    let Some(node) = node else {
        return refused(
            &auth,
            &here,
            StatusCode::NOT_FOUND,
            "No such node",
            format!("hale knows no node {id:?}"),
        );
    };
    if let Some(c) = condition.as_deref()
        && verb == "clear"
        && !node.conditions.iter().any(|k| k.ctype == c)
    {
        return refused(
            &auth,
            &here,
            StatusCode::NOT_FOUND,
            "No such condition",
            format!("node {id:?} has no condition {c:?}"),
        );
    }
    let body = pages::confirm(&id, &verb, condition.as_deref(), &csrf);
    html(
        StatusCode::OK,
        page(
            &format!("{} {id}", pages::title(&verb)),
            &here,
            &auth,
            None,
            &body,
            false,
        ),
    )
}

/// A posted form's fields.
struct Form(Vec<(String, String)>);

impl Form {
    fn parse(body: &[u8]) -> Form {
        Form(form_urlencoded::parse(body).into_owned().collect())
    }

    /// The first value of `name` ("" when absent).
    fn field(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The answer to a form posted from another site.
fn cross_site(auth: &Auth) -> Response {
    refused(
        auth,
        "/",
        StatusCode::FORBIDDEN,
        "Refused",
        "This form was not sent from this hale's own page (its Origin or Sec-Fetch-Site names another site). Behind a proxy, pass the Host through or set X-Forwarded-Host.".into(),
    )
}

/// A form post that changes something: signed in, the CSRF token bound to the
/// session, from this site. Returns the form's fields.
fn checked_form(
    hale: &Hale,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(Auth, Form), Box<Response>> {
    let auth = auth(hale, headers, Utc::now());
    let form = Form::parse(body);
    let sent = form.field("csrf");
    let Some(want) = auth.csrf() else {
        let text = if auth == Auth::NoToken {
            "This hale has no apiTokenFile: its UI is read-only."
        } else {
            "Operating needs the API token: sign in with it."
        };
        return Err(Box::new(refused(
            &auth,
            "/",
            StatusCode::UNAUTHORIZED,
            "Sign in first",
            text.into(),
        )));
    };
    if !same_origin(headers) {
        return Err(Box::new(cross_site(&auth)));
    }
    if !secrets_equal(sent.as_bytes(), want.as_bytes()) {
        return Err(Box::new(refused(
            &auth,
            "/",
            StatusCode::FORBIDDEN,
            "Refused",
            "This form's CSRF token is not this session's: it was not sent from this hale's own page, or the session changed. Reload the page and try again.".into(),
        )));
    }
    Ok((auth, form))
}

async fn act(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    Path((id, verb)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let (auth, form) = match checked_form(&hale, &headers, &body) {
        Ok(ok) => ok,
        Err(r) => return *r,
    };
    let (reason, condition, active) = (
        form.field("reason").trim().to_string(),
        form.field("condition").to_string(),
        form.field("active") == "true",
    );
    let back = node_href(&id, None);
    if !VERBS.contains(&verb.as_str()) {
        return refused(
            &auth,
            &back,
            StatusCode::NOT_FOUND,
            "No such verb",
            format!("{verb:?} is not a verb"),
        );
    }
    if reason.is_empty() {
        return refused(
            &auth,
            &back,
            StatusCode::BAD_REQUEST,
            "A reason is needed",
            "Say why: the reason is recorded on the node's event.".into(),
        );
    }
    if reason.len() > crate::view::MAX_REASON {
        return refused(
            &auth,
            &back,
            StatusCode::BAD_REQUEST,
            "The reason is too long",
            format!(
                "{} bytes: at most {} are kept (a letter outside ASCII takes two to four). Say it shorter.",
                reason.len(),
                crate::view::MAX_REASON
            ),
        );
    }
    if let Err(e) = hale.leading() {
        return refused(
            &auth,
            &back,
            StatusCode::SERVICE_UNAVAILABLE,
            "Not the leader",
            e,
        );
    }
    let h = hale.clone();
    let node = id.clone();
    let v = verb.clone();
    let result = tokio::task::spawn_blocking(move || {
        h.apply_durable(|fleet, cfg, now| match v.as_str() {
            "cordon" => fleet.cordon(now, &node, &reason),
            "uncordon" => fleet.uncordon(now, &node, &reason),
            "drain" => fleet.drain(now, &node, active, &reason),
            _ => fleet.clear_condition(cfg, now, &node, &condition, &reason),
        })
    })
    .joined()
    .await;
    match result {
        Ok(_) => redirect(&format!("{back}{}", query(&[("done", &verb)]))),
        Err(e) => {
            let (status, title) = match e {
                StepError::Core(CoreError::UnknownNode(_) | CoreError::UnknownCondition { .. }) => {
                    (StatusCode::NOT_FOUND, "refused")
                }
                StepError::Unwritten(_) => (StatusCode::SERVICE_UNAVAILABLE, "not written"),
                _ => (StatusCode::CONFLICT, "refused"),
            };
            refused(
                &auth,
                &back,
                status,
                &format!("{} {title}", pages::title(&verb)),
                e.to_string(),
            )
        }
    }
}

async fn login_page(
    State(hale): State<Arc<Hale>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let auth = auth(&hale, &headers, Utc::now());
    let next = form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "next")
        .map(|(_, v)| local_path(&v))
        .unwrap_or_else(|| "/".into());
    if auth == Auth::NoToken {
        return refused(
            &auth,
            "/",
            StatusCode::NOT_FOUND,
            "No sign-in",
            "This hale has no apiTokenFile: its UI is read-only.".into(),
        );
    }
    // Signed in already: on to where signing in would lead.
    if matches!(auth, Auth::Operator { .. }) {
        return redirect(&next);
    }
    html(
        StatusCode::OK,
        page(
            "Sign in",
            &format!("/ui/login{}", query(&[("next", &next)])),
            &auth,
            None,
            &pages::login(&next, false),
            false,
        ),
    )
}

/// `next` if it is a path on this site, else `/` (never another site).
fn local_path(next: &str) -> String {
    // Browsers drop tabs and newlines from a URL, and read `\` as `/`: `/\t/x`
    // would be `//x`, another site.
    let plain = next
        .chars()
        .all(|c| !c.is_control() && !c.is_whitespace() && c != '\\');
    // Never back to the sign-in page: signed in, it would only lead on again.
    if plain && next.starts_with('/') && !next.starts_with("//") && !next.starts_with("/ui/login") {
        next.to_string()
    } else {
        "/".into()
    }
}

async fn login(State(hale): State<Arc<Hale>>, headers: HeaderMap, body: Bytes) -> Response {
    let now = Utc::now();
    let auth = auth(&hale, &headers, now);
    let form = Form::parse(&body);
    let next = local_path(form.field("next"));
    let cfg = hale.config();
    let Some(token) = cfg.api_token.as_ref().map(|t| t.expose()) else {
        return refused(
            &auth,
            "/",
            StatusCode::NOT_FOUND,
            "No sign-in",
            "This hale has no apiTokenFile: its UI is read-only.".into(),
        );
    };
    if !same_origin(&headers) {
        return cross_site(&auth);
    }
    if !secrets_equal(form.field("token").trim().as_bytes(), token.as_bytes()) {
        tracing::warn!("a UI sign-in was refused: not the API token");
        return html(
            StatusCode::UNAUTHORIZED,
            page(
                "Sign in",
                &format!("/ui/login{}", query(&[("next", &next)])),
                &auth,
                None,
                &pages::login(&next, true),
                false,
            ),
        );
    }
    let expiry = now.timestamp() + SESSION.as_secs() as i64;
    let mut r = redirect(&next);
    let cookie = format!(
        "{COOKIE}={}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}",
        session_value(token, expiry),
        SESSION.as_secs(),
        secure(&headers)
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn logout(State(hale): State<Arc<Hale>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = checked_form(&hale, &headers, &body) {
        return *r;
    }
    let mut r = redirect("/");
    let cookie = format!(
        "{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict{}",
        secure(&headers)
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// `; Secure` where the browser reached hale over https (through a proxy that
/// terminates TLS and says so in `X-Forwarded-Proto`), so the cookie never
/// travels in the clear afterwards.
fn secure(headers: &HeaderMap) -> &'static str {
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    if https { "; Secure" } else { "" }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A form past 64 KiB is a 413, refused from what it declares before it is
    /// read, or once it passes the limit when sent in chunks.
    #[tokio::test]
    async fn a_form_is_held_to_its_limit() {
        use tower::ServiceExt as _;
        let dir = tempfile::tempdir().unwrap();
        let hale = crate::http::token_hale(dir.path());
        let app = crate::http::limited(router(Arc::clone(&hale)), hale);
        let endless = || {
            axum::body::Body::from_stream(
                futures::stream::pending::<Result<Bytes, std::io::Error>>(),
            )
        };
        let declared = axum::extract::Request::post("/ui/login")
            .header("content-length", crate::http::FORM_LIMIT + 1)
            .body(endless())
            .unwrap();
        let answer = app.clone().oneshot(declared).await.unwrap();
        assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let chunks = futures::stream::iter(
            (0..2).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'a'; 40 << 10]))),
        );
        let chunked = axum::extract::Request::post("/ui/login")
            .header("transfer-encoding", "chunked")
            .body(axum::body::Body::from_stream(chunks))
            .unwrap();
        let answer = app.oneshot(chunked).await.unwrap();
        assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn a_session_is_the_tokens_and_ends() {
        let v = session_value("s3cret", 2_000_000_000);
        assert!(v.starts_with("2000000000."));
        assert_ne!(v, session_value("other", 2_000_000_000));
        assert_ne!(v, session_value("s3cret", 2_000_000_001));
        assert!(!v.contains("s3cret"));
    }

    #[test]
    fn sign_in_returns_only_to_this_site() {
        assert_eq!(local_path("/ui/nodes?q=a"), "/ui/nodes?q=a");
        for away in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil",
            "/\t/evil.example",
            "/\n/evil.example",
            "/ /evil.example",
            "",
            "/ui/login?next=%2Fui%2Fnodes",
        ] {
            assert_eq!(local_path(away), "/", "{away}");
        }
    }

    #[test]
    fn a_cross_site_post_is_not_same_origin() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9470"));
        assert!(same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:9470"),
        );
        assert!(same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(!same_origin(&h));
        // Behind a proxy that rewrites Host, the forwarded host is the one asked.
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://hale.example"),
        );
        assert!(!same_origin(&h));
        h.insert("x-forwarded-host", HeaderValue::from_static("hale.example"));
        assert!(same_origin(&h));
        // The browser's own word wins.
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&h));
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(same_origin(&h));
    }

    #[test]
    fn a_session_holds_until_its_end_and_only_as_issued() {
        let now = chrono::Utc::now();
        let end = now.timestamp() + 60;
        let value = session_value("s3cret", end);
        assert!(session_holds("s3cret", &value, now));
        assert!(!session_holds(
            "s3cret",
            &value,
            now + chrono::TimeDelta::seconds(61)
        ));
        assert!(!session_holds("rotated", &value, now));
        // A later end written over the signature does not verify.
        let (_, signature) = value.split_once('.').unwrap();
        let extended = format!("{}.{signature}", end + 3600);
        assert!(!session_holds("s3cret", &extended, now));
        for junk in ["", ".", "abc", &format!("{end}."), &format!("{end}.00")] {
            assert!(!session_holds("s3cret", junk, now), "{junk:?}");
        }
    }
}
