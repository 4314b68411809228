//! Federation (DESIGN §11): other hales' clusters, read through their own API. A
//! member's answer is asked for when a page or a listing needs it and never kept,
//! so a member that cannot be reached shows no health — never its last answer —
//! and its nodes are absent, not counted healthy. Members are asked at once, each
//! within `federation.timeout`, so one slow member does not hold the rest.

use serde::de::DeserializeOwned;

use crate::config::{Loaded, Member, Secret};
use crate::view::{ClusterList, ClusterView, ErrorBody, EventsView, NodeList, NodeView};

/// The header on every request to a member: a hale that receives it answers for
/// its own cluster only, so two hales that name each other cannot loop.
pub const FEDERATED: &str = "x-hale-federated";

/// The largest answer read from a member (a page of 1,000 nodes is about 300 kB).
const MAX_ANSWER: usize = 16 << 20;

/// The configured members and a client for each.
pub struct Federation {
    members: Vec<Remote>,
}

struct Remote {
    name: String,
    url: reqwest::Url,
    http: Result<reqwest::Client, String>,
    token: Option<Secret>,
}

/// A member's refusal as said: a 401 or 403 is this hale's token, not the
/// reader's, so it says which.
fn refused(status: u16, detail: &str) -> String {
    match status {
        // Its words are not passed on: a proxy in front of it may echo the
        // credentials it was sent, and the overview is read without a token.
        401 | 403 => format!(
            "answered HTTP {status}: the member refused this hale (the member's tokenFile in federation.members)"
        ),
        400 | 404 => detail.to_string(),
        _ => format!("answered HTTP {status}: {detail}"),
    }
}

/// Why a member's answer is not there.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MemberError {
    #[error("no federation member serves cluster `{0}`")]
    Unknown(String),
    /// No answer, or one that is not what was asked for.
    #[error("{0}")]
    Failed(String),
    /// The member answered with an API error of its own (a 404 for a node it
    /// does not know, a 400 for a bad filter), passed on as it said it.
    #[error("{}", refused(*status, detail))]
    Refused {
        status: u16,
        error: String,
        detail: String,
    },
}

impl Federation {
    pub fn new(cfg: &Loaded) -> Federation {
        let timeout = cfg.config.federation.timeout;
        let members = cfg
            .members
            .iter()
            .map(|m: &Member| {
                let builder = crate::http_client()
                    .user_agent(crate::USER_AGENT)
                    .timeout(timeout)
                    .connect_timeout(timeout)
                    .redirect(reqwest::redirect::Policy::none());
                let http = match &m.ca_file {
                    Some(ca) => crate::certificates(ca).map(|c| builder.tls_certs_only(c)),
                    None => Ok(builder),
                }
                .and_then(|b| b.build().map_err(|e| crate::error_chain(&e)));
                Remote {
                    name: m.name.clone(),
                    url: m.url.clone(),
                    http,
                    token: m.token.clone(),
                }
            })
            .collect();
        Federation { members }
    }

    /// The members' cluster names, in the order configured.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|m| m.name.as_str())
    }

    /// Where member `name`'s hale is, without credentials.
    pub fn url(&self, name: &str) -> Option<String> {
        Some(crate::shown_url(&self.member(name).ok()?.url))
    }

    fn member(&self, name: &str) -> Result<&Remote, MemberError> {
        self.members
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| MemberError::Unknown(name.into()))
    }

    /// Each member's row of the overview, asked of all at once. A member that does
    /// not answer in time, or answers with anything but its own cluster's row,
    /// has no health and says why.
    pub async fn clusters(&self) -> Vec<ClusterView> {
        let asked = self.members.iter().map(|m| async move {
            let answer: Result<ClusterList, MemberError> = m
                .get(&["api", "v1", "clusters"], &[("local", "true")])
                .await;
            let row = answer.and_then(|list| match <[ClusterView; 1]>::try_from(list.clusters) {
                Ok([row]) if row.name == m.name && row.health.is_some() => Ok(row),
                Ok([row]) if row.name != m.name => Err(MemberError::Failed(format!(
                    "answers for cluster `{}`, not `{}`",
                    row.name, m.name
                ))),
                _ => Err(MemberError::Failed(
                    "answered without its cluster's health".into(),
                )),
            });
            match row {
                Ok(mut row) => {
                    row.member = Some(m.name.clone());
                    row.url = Some(crate::shown_url(&m.url));
                    row
                }
                Err(e) => ClusterView {
                    name: m.name.clone(),
                    member: Some(m.name.clone()),
                    url: Some(crate::shown_url(&m.url)),
                    health: None,
                    error: Some(e.to_string()),
                },
            }
        });
        futures::future::join_all(asked).await
    }

    /// One page of a member's nodes; `query` is passed on as it came (without
    /// `allClusters`). Every node must be of the member's cluster.
    pub async fn nodes(&self, name: &str, query: &[(&str, &str)]) -> Result<NodeList, MemberError> {
        let m = self.member(name)?;
        let mut pairs: Vec<(&str, &str)> = query
            .iter()
            .filter(|(k, _)| !matches!(*k, "cluster" | "allClusters"))
            .copied()
            .collect();
        pairs.push(("cluster", name));
        let asked: usize = pairs
            .iter()
            .find(|(k, _)| *k == "pageSize")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(500);
        let list: NodeList = m.get(&["api", "v1", "nodes"], &pairs).await?;
        if list.nodes.len() > asked {
            return Err(MemberError::Failed(format!(
                "answered {} nodes for a page of {asked}",
                list.nodes.len()
            )));
        }
        match list.nodes.iter().find(|n| n.cluster != name) {
            Some(n) => Err(MemberError::Failed(format!(
                "answered with a node of cluster `{}`, not `{name}`",
                n.cluster
            ))),
            None => Ok(list),
        }
    }

    /// A member's node, as its own hale holds it.
    pub async fn node(&self, name: &str, id: &str) -> Result<NodeView, MemberError> {
        let m = self.member(name)?;
        let node: NodeView = m.get(&["api", "v1", "nodes", id], &[]).await?;
        if node.cluster != name || node.id != id {
            return Err(MemberError::Failed(format!(
                "answered with node `{}` of cluster `{}`",
                node.id, node.cluster
            )));
        }
        Ok(node)
    }

    /// A page of a member's node's events; `query` as the events endpoint takes it.
    pub async fn events(
        &self,
        name: &str,
        id: &str,
        query: &[(&str, &str)],
    ) -> Result<EventsView, MemberError> {
        self.member(name)?
            .get(&["api", "v1", "nodes", id, "events"], query)
            .await
    }
}

impl Remote {
    /// `GET` a JSON answer of the member's API; each path segment percent-encoded.
    /// What the member said is passed on without this hale's token, in any form:
    /// a proxy in front of it may echo the request, and the overview is read
    /// without a token.
    async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, &str)],
    ) -> Result<T, MemberError> {
        let secrets = match &self.token {
            Some(token) => crate::redact::Secrets::new().with(token.expose()),
            None => crate::redact::Secrets::new(),
        };
        self.answer(segments, query, &secrets)
            .await
            .map_err(|e| match e {
                MemberError::Failed(said) => MemberError::Failed(secrets.scrub(&said)),
                MemberError::Refused {
                    status,
                    error,
                    detail,
                } => MemberError::Refused {
                    status,
                    error: secrets.scrub(&error),
                    detail: secrets.scrub(&detail),
                },
                unknown @ MemberError::Unknown(_) => unknown,
            })
    }

    async fn answer<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, &str)],
        secrets: &crate::redact::Secrets,
    ) -> Result<T, MemberError> {
        let http = self
            .http
            .as_ref()
            .map_err(|e| MemberError::Failed(e.clone()))?;
        let mut url = self.url.clone();
        let path = segments
            .iter()
            .map(|s| crate::path_segment(s))
            .collect::<Vec<_>>()
            .join("/");
        url.set_path(&format!("{}/{path}", self.url.path().trim_end_matches('/')));
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        // A member never passes this request on to a cluster of its own members.
        let mut request = http.get(url).header(FEDERATED, "1");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token.expose());
        }
        let failed = |e: reqwest::Error| {
            MemberError::Failed(if e.is_timeout() {
                "did not answer in time (federation.timeout)".into()
            } else {
                crate::error_chain(&e.without_url())
            })
        };
        let mut response = request.send().await.map_err(failed)?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err(MemberError::Failed(format!(
                    "answered more than {} MiB",
                    MAX_ANSWER >> 20
                )));
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(match serde_json::from_slice::<ErrorBody>(&body) {
                Ok(e) => MemberError::Refused {
                    status: status.as_u16(),
                    error: e.error,
                    detail: e.detail,
                },
                // A proxy in front of the member refuses in its own words.
                Err(_) if matches!(status.as_u16(), 401 | 403) => MemberError::Refused {
                    status: status.as_u16(),
                    error: "unauthorized".into(),
                    detail: format!("answered HTTP {status}"),
                },
                Err(_) => MemberError::Failed(format!("answered HTTP {status}")),
            });
        }
        // Even an answer that reads as hale's passes on no token of this hale's.
        let body = secrets.scrub_known_in_json(&String::from_utf8_lossy(&body));
        serde_json::from_str(&body).map_err(|e| {
            MemberError::Failed(format!(
                "answered something that is not hale's API: {}",
                crate::redact::unquoted(&e.to_string())
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::get;

    use super::*;

    /// A member (or the proxy before it) that answers each path with the
    /// request's `Authorization` header in its words: an API error with a
    /// status of the path's, or a JSON string.
    async fn echoing() -> String {
        let said = |headers: &HeaderMap| {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            format!(
                "received headers: authorization: {auth}; bare {}",
                auth.trim_start_matches("Bearer ")
            )
        };
        let listed = move |headers: HeaderMap| async move {
            axum::Json(serde_json::json!({"nodes": [], "nextPageToken": said(&headers)}))
        };
        let app = axum::Router::new()
            .route("/api/v1/nodes", get(listed))
            .route(
                "/api/v1/{status}",
                get(
                    move |axum::extract::Path(status): axum::extract::Path<u16>,
                          headers: HeaderMap| async move {
                        let said = said(&headers);
                        match status {
                            200 => (StatusCode::OK, serde_json::to_string(&said).unwrap()),
                            code => (
                                StatusCode::from_u16(code).unwrap(),
                                serde_json::json!({"error": said, "detail": said}).to_string(),
                            ),
                        }
                    },
                ),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn what_a_member_echoes_of_the_hubs_token_is_blanked() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "CANARY-fed-abab\n").unwrap();
        let config = dir.path().join("hale.yaml");
        std::fs::write(
            &config,
            format!(
                "cluster: hub\nfederation:\n  members:\n    - {{ name: east, url: '{}', tokenFile: '{}' }}\n",
                echoing().await,
                token.display()
            ),
        )
        .unwrap();
        let federation = Federation::new(&crate::config::Config::load(Some(&config)).unwrap());
        let remote = &federation.members[0];
        for status in ["500", "404", "400", "200"] {
            let e = remote
                .get::<NodeList>(&["api", "v1", status], &[])
                .await
                .expect_err("no node list");
            let said = format!("{e} {e:?}");
            assert!(!said.contains("CANARY"), "{status}: {said}");
            if status != "200" {
                assert!(said.contains("authorization: ***"), "{status}: {said}");
            }
        }
        // An answer that reads as hale's, holding the token.
        let list = remote
            .get::<NodeList>(&["api", "v1", "nodes"], &[])
            .await
            .unwrap();
        let page = list.next_page_token.unwrap();
        assert!(
            page.contains("Bearer ***") && !page.contains("CANARY"),
            "{page}"
        );
    }
}
