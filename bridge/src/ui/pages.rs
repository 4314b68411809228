//! The UI's pages, rendered from the API's own views: what a page shows is what
//! `GET /api/v1/…` answers, never a second reading of the state. Pure functions:
//! views in, HTML out.

use std::fmt::Write;

use super::chart::{self, Change};
use super::html::{esc, node_href, query, score, segment, when};
use crate::core::{Health, Severity, Status, Time};
use crate::store::StoredEvent;
use crate::view::{ClusterView, NodeList, NodeView, Sort, SortKey};

/// What every page carries around its body.
pub struct Chrome<'a> {
    pub title: &'a str,
    /// The page's own path and query, to come back to after signing in.
    pub here: &'a str,
    pub auth: &'a Auth,
    pub now: Time,
    /// A message at the top: what a verb did, or why it was refused.
    pub flash: Option<(Flash, String)>,
    /// Whether the page keeps itself current (not a form to fill in).
    pub refresh: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Flash {
    Done,
    Refused,
}

/// Who is reading: what the header offers, whether verbs are shown.
#[derive(Debug, Clone, PartialEq)]
pub enum Auth {
    /// No `apiTokenFile`: the UI reads, and nobody operates from it.
    NoToken,
    /// Not signed in; verbs need the token.
    Reader,
    /// Signed in with the API token; forms carry this CSRF token.
    Operator { csrf: String },
}

impl Auth {
    pub fn csrf(&self) -> Option<&str> {
        match self {
            Auth::Operator { csrf } => Some(csrf),
            _ => None,
        }
    }
}

pub fn layout(c: &Chrome<'_>, body: &str) -> String {
    let who = match c.auth {
        Auth::NoToken => {
            r#"<span class="muted" title="Operator verbs need hale's apiTokenFile">read-only</span>"#.to_string()
        }
        // On the sign-in page itself, the link is that page as it stands: its
        // `next` is where signing in leads, not back to signing in.
        Auth::Reader if c.here.starts_with("/ui/login") => {
            format!(r#"<a href="{}">Sign in</a>"#, esc(c.here))
        }
        Auth::Reader => format!(
            r#"<a href="/ui/login{}">Sign in</a>"#,
            query(&[("next", c.here)])
        ),
        Auth::Operator { csrf } => format!(
            r#"<form method="post" action="/ui/logout" class="inline"><input type="hidden" name="csrf" value="{}"><button type="submit" class="link">Sign out</button></form>"#,
            esc(csrf)
        ),
    };
    let flash = match &c.flash {
        Some((Flash::Done, text)) => {
            format!(r#"<p class="flash done" role="status">{}</p>"#, esc(text))
        }
        Some((Flash::Refused, text)) => {
            format!(r#"<p class="flash refused" role="alert">{}</p>"#, esc(text))
        }
        None => String::new(),
    };
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · hale</title><link rel="icon" href="/ui/static/hale.svg" type="image/svg+xml"><link rel="stylesheet" href="/ui/static/hale.css"><script src="/ui/static/hale.js" defer></script></head>
<body><header><a class="brand" href="/">hale</a><nav><a href="/">Overview</a><a href="/ui/nodes">Nodes</a></nav><div class="who">{who}</div></header>
<main id="live"{refresh}>{flash}{body}<p class="updated">Updated <time id="updated" datetime="{iso}">{shown}</time>{every}</p></main></body></html>
"#,
        refresh = if c.refresh {
            r#" data-refresh="5""#
        } else {
            ""
        },
        every = if c.refresh {
            " · refreshes every 5 s"
        } else {
            ""
        },
        title = esc(c.title),
        iso = c.now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        shown = c.now.format("%H:%M:%S UTC"),
    )
}

fn health_class(h: Health) -> &'static str {
    match h {
        Health::Healthy => "healthy",
        Health::Degraded => "degraded",
        Health::Unknown => "unknown",
    }
}

fn badge(h: Health) -> String {
    format!(
        r#"<span class="badge {}">{}</span>"#,
        health_class(h),
        h.as_str()
    )
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Ready => "Ready",
        Status::NotReady => "NotReady",
        Status::Cordoned => "Cordoned",
        Status::Offline => "Offline",
    }
}

/// The overview: the fleet tile, a row per cluster, halts and remediations.
pub fn overview(rows: &[ClusterView]) -> String {
    let reachable: Vec<_> = rows.iter().filter_map(|r| r.health.as_ref()).collect();
    let total: u64 = reachable.iter().map(|h| h.nodes).sum();
    let healthy: u64 = reachable.iter().map(|h| h.healthy).sum();
    let degraded: u64 = reachable.iter().map(|h| h.degraded).sum();
    let unknown: u64 = reachable.iter().map(|h| h.unknown).sum();
    let dark = rows.len() - reachable.len();
    let mut out = String::from("<h1>Overview</h1>");
    let _ = write!(
        out,
        r#"<section class="tiles"><div class="tile" id="fleet"><div class="big"><span id="fleet-healthy">{healthy}</span> of <span id="fleet-nodes">{total}</span></div><div>nodes healthy</div><div class="muted">{degraded} degraded · {unknown} unknown</div>{}</div></section>"#,
        if dark > 0 {
            format!(
                r#"<div class="warn" id="fleet-dark">{dark} cluster{} without health: {} nodes not counted</div>"#,
                if dark == 1 { "" } else { "s" },
                if dark == 1 { "its" } else { "their" }
            )
        } else {
            String::new()
        }
    );
    out.push_str(
        r#"<table id="clusters"><thead><tr><th>Cluster</th><th>State</th><th>Nodes</th><th>Healthy</th><th>Degraded</th><th>Unknown</th><th>Lowest score</th><th>Alert source</th><th>Halts</th><th>Remediations</th></tr></thead><tbody>"#,
    );
    for r in rows {
        let name = match &r.member {
            Some(_) => format!(
                r#"<a href="/ui/nodes{}">{}</a> <span class="muted">member</span>"#,
                query(&[("cluster", &r.name)]),
                esc(&r.name)
            ),
            None => format!(
                r#"<a href="/ui/nodes{}">{}</a>"#,
                query(&[("cluster", &r.name)]),
                esc(&r.name)
            ),
        };
        let _ = write!(
            out,
            r#"<tr class="cluster" data-cluster="{}">"#,
            esc(&r.name)
        );
        match &r.health {
            None => {
                let _ = write!(
                    out,
                    r#"<td>{name}</td><td class="state nohealth">No health</td><td colspan="8" class="error">{}</td></tr>"#,
                    esc(r.error.as_deref().unwrap_or("no answer"))
                );
            }
            Some(h) => {
                let class = if h.degraded > 0 {
                    "degraded"
                } else if h.unknown > 0 {
                    "unknown"
                } else if h.nodes == 0 {
                    "empty"
                } else {
                    "healthy"
                };
                let s = &h.source;
                let source = if s.stale {
                    format!(
                        r#"<span class="bad">stale</span><div class="muted">no trusted input since {}</div>"#,
                        when(s.last_trusted)
                    )
                } else if !s.polling {
                    format!(
                        r#"<span class="good">webhook only</span><div class="muted">last trusted input {}</div>"#,
                        when(s.last_trusted)
                    )
                } else if !s.up {
                    format!(
                        r#"<span class="bad">Alertmanager down</span><div class="muted">{}</div>"#,
                        esc(s.last_error.as_deref().unwrap_or(""))
                    )
                } else {
                    format!(
                        r#"<span class="good">up</span><div class="muted">last trusted poll {}</div>"#,
                        when(s.last_trusted)
                    )
                };
                let rem = &h.remediations;
                let _ = write!(
                    out,
                    r#"<td>{name}</td><td class="state {class}">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td>{source}</td><td class="n">{}</td><td>{} in flight · {} queued · {} fencing{}</td></tr>"#,
                    esc(&h.state),
                    h.nodes,
                    h.healthy,
                    h.degraded,
                    h.unknown,
                    score(h.lowest_score),
                    h.halts.len(),
                    rem.in_flight,
                    rem.queued,
                    rem.fencing,
                    if rem.blocked.is_empty() {
                        String::new()
                    } else {
                        format!(
                            r#"<div class="muted">held: {}</div>"#,
                            esc(&rem.blocked.join("; "))
                        )
                    }
                );
            }
        }
    }
    out.push_str("</tbody></table>");
    let halts: Vec<_> = rows
        .iter()
        .filter_map(|r| Some((r, r.health.as_ref()?)))
        .flat_map(|(r, h)| h.halts.iter().map(move |halt| (r, halt)))
        .collect();
    out.push_str(r#"<h2>Policy halts</h2>"#);
    if halts.is_empty() {
        out.push_str(r#"<p class="muted" id="halts">No guardrail is holding an action back.</p>"#);
    } else {
        out.push_str(r#"<table id="halts"><thead><tr><th>Node</th><th>Cluster</th><th>Action</th><th>Guardrail</th></tr></thead><tbody>"#);
        for (r, halt) in halts {
            let _ = write!(
                out,
                r#"<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                esc(&node_href(&halt.node, r.member.as_deref())),
                esc(&halt.node),
                esc(&r.name),
                esc(&serde_plain(&halt.action)),
                esc(&serde_plain(&halt.guardrail)),
            );
        }
        out.push_str("</tbody></table>");
    }
    out
}

/// A unit enum's name as the API writes it.
fn serde_plain<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// The filters of the nodes table, as the page's query has them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filters {
    pub q: String,
    pub health: String,
    pub status: String,
    pub pool: String,
    /// A cluster's name, or `*` for every cluster.
    pub cluster: String,
    pub sort: Sort,
    /// Where this page starts, counted from 1 (for "showing 51–100").
    pub start: usize,
    pub token: String,
}

impl Filters {
    /// The query of this listing with some keys replaced (and the page reset).
    fn href(&self, sort: Sort, token: &str, start: usize) -> String {
        let start = start.to_string();
        let sort = sort.name();
        format!(
            "/ui/nodes{}",
            query(&[
                ("q", &self.q),
                ("health", &self.health),
                ("status", &self.status),
                ("pool", &self.pool),
                ("cluster", &self.cluster),
                ("sort", if sort == "id" { "" } else { &sort }),
                ("pageToken", token),
                ("start", if start == "1" { "" } else { &start }),
            ])
        )
    }
}

pub const NODES_PER_PAGE: usize = 50;

/// The nodes table with its filters; `listing` is the page, or why it is missing.
pub fn nodes(
    f: &Filters,
    listing: &Result<NodeList, String>,
    pools: &[String],
    clusters: &[String],
    notes: &[String],
) -> String {
    let mut out = String::from("<h1>Nodes</h1>");
    for note in notes {
        let _ = write!(out, r#"<p class="flash refused note">{}</p>"#, esc(note));
    }
    let option = |value: &str, shown: &str, chosen: &str| {
        format!(
            r#"<option value="{}"{}>{}</option>"#,
            esc(value),
            if value == chosen { " selected" } else { "" },
            esc(shown)
        )
    };
    let mut cluster_options = String::new();
    for c in clusters {
        cluster_options.push_str(&option(c, c, &f.cluster));
    }
    cluster_options.push_str(&option("*", "All clusters", &f.cluster));
    let mut health_options = option("", "Any health", &f.health);
    for h in ["Healthy", "Degraded", "Unknown"] {
        health_options.push_str(&option(h, h, &f.health));
    }
    let mut status_options = option("", "Any status", &f.status);
    for s in ["Ready", "NotReady", "Cordoned", "Offline"] {
        status_options.push_str(&option(s, s, &f.status));
    }
    // Pools are offered for this hale's own cluster only.
    let pool_select = if pools.is_empty() {
        String::new()
    } else {
        let mut options = option("", "Any pool", &f.pool);
        for p in pools {
            options.push_str(&option(p, p, &f.pool));
        }
        format!(r#"<select name="pool" aria-label="Pool">{options}</select>"#)
    };
    let sort_name = f.sort.name();
    let mut sort_options = String::new();
    for k in SortKey::ALL {
        for descending in [false, true] {
            let s = Sort { key: k, descending };
            let label = format!("{} {}", k.as_str(), if descending { "↓" } else { "↑" });
            sort_options.push_str(&option(&s.name(), &label, &sort_name));
        }
    }
    let _ = write!(
        out,
        r#"<form method="get" action="/ui/nodes" class="filters" id="filters"><input type="search" name="q" placeholder="id or hostname" value="{}" aria-label="Search"><select name="cluster" aria-label="Cluster">{cluster_options}</select><select name="health" aria-label="Health">{health_options}</select><select name="status" aria-label="Status">{status_options}</select>{pool_select}<select name="sort" aria-label="Sort">{sort_options}</select><button type="submit">Filter</button></form>"#,
        esc(&f.q)
    );
    let list = match listing {
        Ok(list) => list,
        Err(e) => {
            let _ = write!(
                out,
                r#"<p class="flash refused" id="nodes-error" role="alert">{}</p>"#,
                esc(e)
            );
            return out;
        }
    };
    for u in &list.unreachable {
        let _ = write!(
            out,
            r#"<p class="flash refused unreachable" role="alert">Cluster {} could not be listed: {}. Its nodes are not shown.</p>"#,
            esc(&u.cluster),
            esc(&u.error)
        );
    }
    let end = f.start + list.nodes.len().saturating_sub(1);
    let _ = write!(
        out,
        r#"<p class="count" id="count">{}</p>"#,
        match (list.nodes.is_empty(), list.total) {
            (true, _) => "No node matches.".to_string(),
            (false, Some(total)) => format!("Showing {}–{end} of {total}", f.start),
            (false, None) => format!("Showing {}–{end}", f.start),
        }
    );
    let header = |key: SortKey, title: &str| {
        let next = Sort {
            key,
            descending: f.sort.key == key && !f.sort.descending,
        };
        let mark = match (f.sort.key == key, f.sort.descending) {
            (true, false) => " ↑",
            (true, true) => " ↓",
            _ => "",
        };
        format!(
            r#"<th><a href="{}">{title}{mark}</a></th>"#,
            esc(&f.href(next, "", 1))
        )
    };
    let _ = write!(
        out,
        r#"<table id="nodes"><thead><tr>{}<th>Cluster</th>{}{}{}{}<th>Jobs</th><th>Conditions</th></tr></thead><tbody>"#,
        header(SortKey::Id, "ID"),
        header(SortKey::Hostname, "Hostname"),
        header(SortKey::Status, "Status"),
        header(SortKey::Health, "Health"),
        header(SortKey::Score, "Score"),
    );
    let local = clusters.first().map(String::as_str);
    for n in &list.nodes {
        let member = (Some(n.cluster.as_str()) != local).then_some(n.cluster.as_str());
        let _ = write!(
            out,
            r#"<tr class="node" data-id="{id}"><td><a href="{href}">{id}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td>{}</td></tr>"#,
            esc(&n.cluster),
            esc(&n.hostname),
            status_name(n.status),
            badge(n.health),
            score(n.score),
            n.jobs,
            esc(&n.conditions.join(", ")),
            id = esc(&n.id),
            href = esc(&node_href(&n.id, member)),
        );
    }
    out.push_str("</tbody></table><nav class=\"pages\">");
    if f.start > 1 {
        let _ = write!(
            out,
            r#"<a href="{}" id="first">« First page</a>"#,
            esc(&f.href(f.sort, "", 1))
        );
    }
    if let Some(next) = &list.next_page_token {
        let _ = write!(
            out,
            r#"<a href="{}" id="next" rel="next">Next page »</a>"#,
            esc(&f.href(f.sort, next, f.start + list.nodes.len()))
        );
    }
    out.push_str("</nav>");
    out
}

/// The score trend's windows, and the default.
pub const WINDOWS: [&str; 5] = ["1h", "6h", "24h", "7d", "30d"];
pub const DEFAULT_WINDOW: &str = "24h";

/// Everything a node's page shows.
pub struct NodePage<'a> {
    pub node: &'a NodeView,
    /// The federation member holding the node (`None`: this hale).
    pub member: Option<&'a str>,
    /// Its member's own UI, for the verbs.
    pub member_url: Option<&'a str>,
    pub window: &'a str,
    pub from: Time,
    pub to: Time,
    /// The score changes in the window, oldest first, or why they are missing.
    pub changes: Result<Vec<Change>, String>,
    /// Whether the window held more changes than the chart draws.
    pub changes_cut: bool,
    /// The timeline's page, its next token and the chosen types.
    pub events: Result<(Vec<StoredEvent>, Option<String>), String>,
    pub types: &'a [String],
    /// `latest` (the newest page) or `window` (oldest first from the window's start).
    pub order: &'a str,
    pub auth: &'a Auth,
}

pub fn node(p: &NodePage<'_>) -> String {
    let n = p.node;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<h1 id="node-id">{}</h1><p class="sub">{}{} · hostname {}</p>"#,
        esc(&n.id),
        esc(&n.cluster),
        if p.member.is_some() {
            " (federation member)"
        } else {
            ""
        },
        esc(&n.hostname)
    );
    let _ = write!(
        out,
        r#"<section class="tiles"><div class="tile"><div class="big" id="score">{}</div><div>score{}</div></div><div class="tile"><div class="big">{}</div><div>health</div></div><div class="tile"><div class="big" id="status">{}</div><div>status</div></div><div class="tile"><div class="big">{}</div><div>jobs</div></div></section>"#,
        score(n.score),
        n.scored_by
            .as_deref()
            .map(|b| format!(" (priced by {})", esc(b)))
            .unwrap_or_default(),
        badge(n.health),
        status_name(n.status),
        n.jobs,
    );
    // What the policy and operators did and are doing.
    let mut facts = String::new();
    let mut fact = |k: &str, v: String| {
        let _ = write!(facts, "<dt>{k}</dt><dd>{v}</dd>");
    };
    fact("Last report", when(n.last_report));
    fact("Last heartbeat", when(n.last_heartbeat));
    if let Some(c) = &n.cordon {
        fact(
            "Out of service",
            format!(
                "by {} at {}{}: {}",
                serde_plain(&c.by),
                when(Some(c.at)),
                crate::view::drain_note(c),
                esc(&c.reason)
            ),
        );
    }
    for a in &n.pending {
        let failed = match (a.last_try, &a.last_error) {
            (Some(at), Some(e)) => format!("; the try at {} failed: {}", when(Some(at)), esc(e)),
            _ => String::new(),
        };
        fact(
            "Pending",
            format!("{}: decided, not done yet{failed}", esc(&a.action)),
        );
    }
    if let Some(c) = &n.policy {
        use crate::core::policy::Conclusion;
        fact(
            "Policy",
            match c {
                Conclusion::Recommended { action } => {
                    format!("recommends {} (observe mode)", serde_plain(action))
                }
                Conclusion::Acted { action, waiting } => format!(
                    "{} done{}",
                    serde_plain(action),
                    if *waiting {
                        ", waiting for the node to empty"
                    } else {
                        ""
                    }
                ),
                Conclusion::Halted { action, guardrail } => format!(
                    "{} halted by the guardrail {}",
                    serde_plain(action),
                    serde_plain(guardrail)
                ),
            },
        );
    }
    if let Some(t) = n.policy_lifts_at {
        fact("Policy lifts", when(Some(t)));
    }
    if !n.policy_held_by.is_empty() {
        fact(
            "Policy held",
            format!(
                "while {}: hale neither acts on nor decides for a node it cannot fully see{}",
                esc(&n.policy_held_by.join(", ")),
                if n.policy.is_some() {
                    "; the policy above is the last decided"
                } else {
                    ""
                }
            ),
        );
    }
    if let Some(f) = &n.remediation {
        fact(
            "Reboot flow",
            format!(
                "{} since {} (by {}: {})",
                esc(&serde_plain(&f.step)),
                when(Some(f.since)),
                serde_plain(&f.by),
                esc(&f.reason)
            ),
        );
    }
    if let Some(f) = &n.fence {
        fact(
            "Fence",
            format!("{} since {}", serde_plain(&f.step), when(Some(f.since))),
        );
    }
    if n.gated {
        fact(
            "Gated",
            "new work is kept off (the score fell below drainBelow; lifted once it has stayed at or above for 15 minutes)".into(),
        );
    }
    if !n.unavailable_signals.is_empty() {
        fact(
            "Signals unavailable",
            esc(&n.unavailable_signals.join(", ")),
        );
    }
    let _ = write!(out, r#"<dl class="facts">{facts}</dl>"#);
    out.push_str(&verbs(p));

    out.push_str("<h2>Conditions</h2>");
    if n.conditions.is_empty() {
        out.push_str(r#"<p class="muted" id="conditions">No conditions.</p>"#);
    } else {
        out.push_str(r#"<table id="conditions"><thead><tr><th>Type</th><th>Reason</th><th>Severity</th><th>Sticky</th><th>Suppressed</th><th>First seen</th><th>Last seen</th><th>Seen</th><th>Message</th><th></th></tr></thead><tbody>"#);
        for c in &n.conditions {
            let clear = match (p.auth, p.member) {
                (Auth::Operator { .. }, None) if c.sticky => format!(
                    r#"<a class="button" href="/ui/nodes/{}/confirm{}">Clear…</a>"#,
                    segment(&n.id),
                    esc(&query(&[("verb", "clear"), ("condition", &c.ctype)]))
                ),
                _ => String::new(),
            };
            let _ = write!(
                out,
                r#"<tr class="condition"><td>{}</td><td>{}</td><td><span class="sev {sev}">{sev}</span></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="n">{}</td><td class="message">{}</td><td>{clear}</td></tr>"#,
                esc(&c.ctype),
                esc(&c.reason),
                if c.sticky { "sticky" } else { "" },
                if c.suppressed { "suppressed" } else { "" },
                when(Some(c.first_seen)),
                when(Some(c.last_seen)),
                c.observations,
                esc(&c.message),
                sev = severity_name(c.severity),
            );
        }
        out.push_str("</tbody></table>");
    }

    out.push_str("<h2>Score breakdown</h2>");
    match n.score {
        None => out.push_str(
            r#"<p class="muted" id="breakdown">Not scored yet: the node has not reported.</p>"#,
        ),
        Some(total) => {
            out.push_str(r#"<table id="breakdown"><thead><tr><th>Reason</th><th>Points</th></tr></thead><tbody><tr><td>Start</td><td class="n">100</td></tr>"#);
            for d in &n.breakdown {
                let _ = write!(
                    out,
                    r#"<tr><td>{}</td><td class="n">−{}</td></tr>"#,
                    esc(&d.reason),
                    d.points
                );
            }
            let charged: u64 = n.breakdown.iter().map(|d| u64::from(d.points)).sum();
            if charged > 100 {
                let _ = write!(
                    out,
                    r#"<tr><td>The penalties add up to {charged}: the score stops at 0</td><td class="n"></td></tr>"#
                );
            }
            let _ = write!(
                out,
                r#"<tr class="total"><td>Score{}</td><td class="n">{total}</td></tr></tbody></table>"#,
                n.scored_by
                    .as_deref()
                    .map(|b| format!(" (scoredBy {})", esc(b)))
                    .unwrap_or_default()
            );
        }
    }

    let with = |pairs: &[(&str, &str)]| {
        let mut all: Vec<(&str, &str)> = vec![("cluster", p.member.unwrap_or(""))];
        all.extend_from_slice(pairs);
        format!("/ui/nodes/{}{}", segment(&n.id), query(&all))
    };
    let _ = write!(out, r#"<h2>Score trend</h2><nav class="windows">"#);
    for w in WINDOWS {
        let class = if w == p.window {
            r#" class="chosen""#
        } else {
            ""
        };
        // Another window keeps the timeline's filter and order.
        let mut pairs: Vec<(&str, &str)> = vec![("window", w)];
        if p.order != "latest" {
            pairs.push(("order", p.order));
        }
        pairs.extend(p.types.iter().map(|t| ("type", t.as_str())));
        let _ = write!(out, r#"<a href="{}"{class}>{w}</a>"#, esc(&with(&pairs)));
    }
    out.push_str("</nav>");
    match &p.changes {
        Ok(changes) => {
            out.push_str(&chart::trend(changes, p.from, p.to, n.score));
            let _ = write!(
                out,
                r#"<p class="muted" id="trend-note">{} score change{} in the last {}{}.</p>"#,
                changes.len(),
                if changes.len() == 1 { "" } else { "s" },
                esc(p.window),
                if p.changes_cut {
                    " (the newest ones; narrow the window to see every change)"
                } else {
                    ""
                }
            );
        }
        Err(e) => {
            let _ = write!(out, r#"<p class="flash refused">{}</p>"#, esc(e));
        }
    }

    out.push_str("<h2>Job failures</h2>");
    let f = &n.failures;
    if f.total == 0 {
        out.push_str(r#"<p class="muted" id="failures">No job failure attributed.</p>"#);
    } else {
        let _ = write!(
            out,
            r#"<p id="failures">{} attributed in all, the last at {}; they cost {} points now.</p>"#,
            f.total,
            when(f.last),
            f.deduction
        );
    }
    if !f.by_reason.is_empty() {
        out.push_str(r#"<table><thead><tr><th>Reason</th><th>Failures</th></tr></thead><tbody>"#);
        for (reason, count) in &f.by_reason {
            let _ = write!(
                out,
                r#"<tr><td>{}</td><td class="n">{count}</td></tr>"#,
                esc(reason)
            );
        }
        out.push_str("</tbody></table>");
    }

    out.push_str(r#"<h2>Events</h2>"#);
    let _ = write!(
        out,
        r#"<form method="get" action="/ui/nodes/{}" class="filters" id="event-types"><input type="hidden" name="cluster" value="{}"><input type="hidden" name="window" value="{}"><select name="type" multiple size="4" aria-label="Event types">"#,
        segment(&n.id),
        esc(p.member.unwrap_or("")),
        esc(p.window)
    );
    for t in crate::core::EVENT_TYPES {
        let _ = write!(
            out,
            r#"<option value="{t}"{}>{t}</option>"#,
            if p.types.iter().any(|c| c == t) {
                " selected"
            } else {
                ""
            }
        );
    }
    let _ = write!(
        out,
        r#"</select><select name="order" aria-label="Order"><option value="latest"{}>Newest first</option><option value="window"{}>From the window's start</option></select><button type="submit">Show</button></form>"#,
        if p.order == "latest" { " selected" } else { "" },
        if p.order == "window" { " selected" } else { "" },
    );
    match &p.events {
        Err(e) => {
            let _ = write!(out, r#"<p class="flash refused">{}</p>"#, esc(e));
        }
        Ok((events, _)) if events.is_empty() => {
            out.push_str(r#"<p class="muted" id="events">No events.</p>"#)
        }
        Ok((events, next)) => {
            out.push_str(r#"<table id="events"><thead><tr><th>Time</th><th>Type</th><th>Message</th></tr></thead><tbody>"#);
            let shown: Box<dyn Iterator<Item = &StoredEvent>> = if p.order == "latest" {
                Box::new(events.iter().rev())
            } else {
                Box::new(events.iter())
            };
            for e in shown {
                let ty = serde_json::to_value(&e.event.kind)
                    .ok()
                    .and_then(|v| v.get("type")?.as_str().map(str::to_string))
                    .unwrap_or_default();
                let _ = write!(
                    out,
                    r#"<tr class="event" data-type="{ty}"><td>{}</td><td>{ty}</td><td class="message">{}</td></tr>"#,
                    when(Some(e.event.occurred_at)),
                    esc(&e.event.message),
                    ty = esc(&ty),
                );
            }
            out.push_str("</tbody></table>");
            if let Some(token) = next {
                let mut pairs: Vec<(&str, &str)> = vec![
                    ("window", p.window),
                    ("order", "window"),
                    ("pageToken", token),
                ];
                pairs.extend(p.types.iter().map(|t| ("type", t.as_str())));
                let _ = write!(
                    out,
                    r#"<nav class="pages"><a href="{}" id="events-next" rel="next">Later events »</a></nav>"#,
                    esc(&with(&pairs))
                );
            } else if p.order == "latest" {
                let mut pairs: Vec<(&str, &str)> = vec![("window", p.window), ("order", "window")];
                pairs.extend(p.types.iter().map(|t| ("type", t.as_str())));
                let _ = write!(
                    out,
                    r#"<nav class="pages"><a href="{}" id="events-window">Every event of the window, oldest first »</a></nav>"#,
                    esc(&with(&pairs))
                );
            }
        }
    }
    out
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Critical => "critical",
    }
}

/// The operator verbs, each to a confirmation page; or what stands in their way.
fn verbs(p: &NodePage<'_>) -> String {
    let id = segment(&p.node.id);
    if let Some(member) = p.member {
        return format!(
            r#"<p class="muted" id="verbs">Operate this node from its own hale{}: cluster {} is a federation member.</p>"#,
            p.member_url
                .map(|u| format!(
                    r#" at <a href="{}/ui/nodes/{id}">{}</a>"#,
                    esc(u.trim_end_matches('/')),
                    esc(u)
                ))
                .unwrap_or_default(),
            esc(member)
        );
    }
    match p.auth {
        Auth::NoToken => r#"<p class="muted" id="verbs">Operator verbs need hale's apiTokenFile; this UI is read-only.</p>"#.into(),
        Auth::Reader => format!(
            r#"<p class="muted" id="verbs"><a href="/ui/login{}">Sign in</a> with the API token to cordon, uncordon, drain or clear.</p>"#,
            esc(&query(&[("next", &node_href(&p.node.id, None))]))
        ),
        Auth::Operator { .. } => {
            let mut out = String::from(r#"<div class="verbs" id="verbs">"#);
            let cordoned = p.node.status == Status::Cordoned || p.node.cordon.is_some();
            let offered: &[&str] = if cordoned {
                &["uncordon", "drain"]
            } else {
                &["cordon", "drain"]
            };
            for verb in offered {
                let _ = write!(
                    out,
                    r#"<a class="button" id="verb-{verb}" href="/ui/nodes/{id}/confirm?verb={verb}">{}…</a>"#,
                    title(verb)
                );
            }
            out.push_str("</div>");
            out
        }
    }
}

pub fn title(verb: &str) -> String {
    let mut c = verb.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// What a verb will do, asked before it is done.
pub fn confirm(id: &str, verb: &str, condition: Option<&str>, csrf: &str) -> String {
    let what = match (verb, condition) {
        ("cordon", _) => "Keep new work off this node. hale records you as the one who took it out of service.".to_string(),
        ("uncordon", _) => "Put the node back in service. Automation leaves it alone for cordonSuppressionMinutes after.".to_string(),
        ("drain", _) => "Cordon the node and let its running work finish (tick to move the running work now: it restarts elsewhere).".to_string(),
        ("clear", Some(c)) => format!("Clear the condition {} now. It returns if its alert fires again.", esc(c)),
        _ => String::new(),
    };
    let active = if verb == "drain" {
        r#"<label><input type="checkbox" name="active" value="true"> Move the running work now</label>"#
    } else {
        ""
    };
    format!(
        r#"<h1>{} {}?</h1><p>{what}</p><form method="post" action="/ui/nodes/{}/{verb}" id="confirm"><input type="hidden" name="csrf" value="{}"><input type="hidden" name="condition" value="{}"><label>Reason (recorded on the event) <input type="text" name="reason" required maxlength="1024" id="reason"></label>{active}<div class="verbs"><button type="submit" id="confirm-{verb}">{}</button> <a href="{}">Cancel</a></div></form>"#,
        esc(&title(verb)),
        esc(id),
        segment(id),
        esc(csrf),
        esc(condition.unwrap_or("")),
        esc(&title(verb)),
        esc(&node_href(id, None)),
    )
}

/// The sign-in form.
pub fn login(next: &str, refused: bool) -> String {
    format!(
        r#"<h1>Sign in</h1>{}<p>Sign in with hale's API token (the contents of apiTokenFile) to operate nodes from here.</p><form method="post" action="/ui/login" id="login"><input type="hidden" name="next" value="{}"><label>API token <input type="password" name="token" autocomplete="current-password" required id="token"></label> <button type="submit" id="sign-in">Sign in</button></form>"#,
        if refused {
            r#"<p class="flash refused" role="alert">That is not hale's API token.</p>"#
        } else {
            ""
        },
        esc(next)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{ClusterHealth, Halt, RemediationCounts, SourceView};

    fn source() -> SourceView {
        SourceView {
            url: "http://am:9093/".into(),
            receiver: "hale".into(),
            polling: true,
            up: true,
            stale: false,
            last_trusted: None,
            last_error: None,
            hold_until: None,
            hold_reason: None,
        }
    }

    fn row(name: &str, counts: Option<(u64, u64, u64)>) -> ClusterView {
        ClusterView {
            name: name.into(),
            member: None,
            url: None,
            health: counts.map(|(healthy, degraded, unknown)| ClusterHealth {
                state: crate::view::worst_state(
                    degraded,
                    Some(40),
                    unknown,
                    healthy + degraded + unknown,
                ),
                nodes: healthy + degraded + unknown,
                healthy,
                degraded,
                unknown,
                lowest_score: Some(40),
                source: source(),
                halts: vec![Halt {
                    node: "<b>n1</b>".into(),
                    action: crate::core::policy::Verdict::Cordon,
                    guardrail: crate::core::policy::Guardrail::MaxUnavailable,
                }],
                remediations: RemediationCounts::default(),
            }),
            error: counts.is_none().then(|| "did not answer <in time>".into()),
        }
    }

    #[test]
    fn the_fleet_tile_counts_only_clusters_with_health() {
        let page = overview(&[row("a", Some((3, 2, 1))), row("b", None)]);
        assert!(
            page.contains(
                r#"<span id="fleet-healthy">3</span> of <span id="fleet-nodes">6</span>"#
            ),
            "{page}"
        );
        assert!(page.contains("1 cluster without health: its nodes not counted"));
        assert!(page.contains("2 degraded, worst 40, 1 unknown"));
        assert!(page.contains(r#"<td class="state nohealth">No health</td>"#));
        // A member's error and a node id from an alert are text, never markup.
        assert!(page.contains("did not answer &lt;in time&gt;"));
        assert!(page.contains("&lt;b&gt;n1&lt;/b&gt;"));
        assert!(!page.contains("<b>n1"));
        assert!(page.contains("maxUnavailablePercent"));
    }

    /// An action decided and not yet done shows on the node's page, with why its
    /// last try failed, as text.
    #[test]
    fn a_pending_action_shows_with_its_failed_try() {
        let view: NodeView = serde_json::from_value(serde_json::json!({
            "id": "n1", "cluster": "default", "hostname": "n1", "status": "Cordoned",
            "health": "Degraded", "score": 0, "scoredBy": "cluster",
            "breakdown": [{"reason": "SmartFailing", "points": 60},
                          {"reason": "GpuXidHardware", "points": 45}],
            "conditions": [],
            "failures": { "total": 0, "last": null, "deduction": 0, "byReason": {} },
            "lastReport": null, "lastHeartbeat": null, "unavailableSignals": [],
            "jobs": 0, "gated": false,
            "pending": [{"action": "cordon", "lastError": "refused <b>x</b>",
                         "lastTry": "2026-12-01T00:00:01Z"}],
            "policy": {"kind": "halted", "action": "cordon", "guardrail": "maxUnavailablePercent"},
            "policyHeldBy": ["collector_failed"]
        }))
        .unwrap();
        let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let page = node(&NodePage {
            node: &view,
            member: None,
            member_url: None,
            window: DEFAULT_WINDOW,
            from: at,
            to: at,
            changes: Ok(Vec::new()),
            changes_cut: false,
            events: Ok((Vec::new(), None)),
            types: &[],
            order: "latest",
            auth: &Auth::NoToken,
        });
        assert!(
            page.contains("<dt>Pending</dt><dd>cordon: decided, not done yet; the try at "),
            "{page}"
        );
        assert!(
            page.contains("failed: refused &lt;b&gt;x&lt;/b&gt;</dd>"),
            "{page}"
        );
        assert!(
            page.contains("<td>The penalties add up to 105: the score stops at 0</td>"),
            "{page}"
        );
        assert!(
            page.contains("<dt>Policy held</dt><dd>while collector_failed: hale neither acts on nor decides for a node it cannot fully see; the policy above is the last decided</dd>"),
            "{page}"
        );
    }

    #[test]
    fn the_confirmation_escapes_what_it_names() {
        let page = confirm("a\"><script>", "clear", Some("<x>"), "tok\"en");
        assert!(!page.contains("<script>"));
        assert!(page.contains(r#"value="tok&quot;en""#));
        assert!(page.contains("action=\"/ui/nodes/a%22%3E%3Cscript%3E/clear\""));
    }
}
