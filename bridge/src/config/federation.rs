//! `ui` and `federation`: who may read the web UI, and the other hales whose
//! clusters this one shows beside its own.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::Secret;
use crate::core::settings::{de_duration, de_present};

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct UiConfig {
    /// Reads need the API token too: the UI's pages (after signing in with it) and
    /// the API's `GET`s (as a bearer token). `/metrics`, `/healthz` and `/readyz`
    /// stay open.
    pub require_token: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct FederationConfig {
    /// The other hales, each serving its own cluster.
    pub members: Vec<MemberConfig>,
    /// How long one member has to answer one request; a member past it has no
    /// health on that page.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
}

impl Default for FederationConfig {
    fn default() -> Self {
        FederationConfig {
            members: Vec::new(),
            timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MemberConfig {
    /// The member's cluster (its `cluster:`): its answers must be for that cluster.
    pub name: String,
    /// Where the member's hale listens, as `http(s)://host:port`.
    pub url: String,
    /// The member's API token, sent on every request (needed where the member has
    /// `ui.requireToken`).
    #[serde(default, deserialize_with = "de_present")]
    pub token_file: Option<PathBuf>,
    /// CA bundle (PEM) to verify an https member by, instead of the system's roots.
    #[serde(default, deserialize_with = "de_present")]
    pub ca_file: Option<PathBuf>,
}

/// A member, checked, its token read. Its `Debug` shows no token.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub name: String,
    pub url: reqwest::Url,
    pub token: Option<Secret>,
    pub ca_file: Option<PathBuf>,
}

/// The longest `federation.timeout`: a page waits for its slowest member.
const MAX_TIMEOUT: Duration = Duration::from_secs(60);

impl FederationConfig {
    /// The token files, keyed as the file names them, to read as secrets.
    pub fn token_files(&self) -> Vec<(String, &PathBuf)> {
        self.files("tokenFile", |m| m.token_file.as_ref())
    }

    /// The CA files, keyed as the file names them, to check.
    pub fn ca_files(&self) -> Vec<(String, &PathBuf)> {
        self.files("caFile", |m| m.ca_file.as_ref())
    }

    fn files<'a>(
        &'a self,
        key: &str,
        file: impl Fn(&'a MemberConfig) -> Option<&'a PathBuf>,
    ) -> Vec<(String, &'a PathBuf)> {
        self.members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| Some((format!("federation.members[{i}].{key}"), file(m)?)))
            .collect()
    }

    /// Check what serde cannot; the error is (key under `federation`, message).
    pub fn validate(&self, cluster: &str) -> Result<(), (String, String)> {
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            return Err((
                "timeout".into(),
                format!(
                    "must be between 1ms and {}s: every page waits for its slowest member",
                    MAX_TIMEOUT.as_secs()
                ),
            ));
        }
        let mut names = BTreeSet::new();
        for (i, m) in self.members.iter().enumerate() {
            let at = |key: &str| format!("members[{i}].{key}");
            if m.name.trim().is_empty() || m.name.trim() != m.name {
                return Err((
                    at("name"),
                    "must be the member's cluster name, without spaces around it".into(),
                ));
            }
            if m.name == "*" {
                return Err((
                    at("name"),
                    "`*` means every cluster in a listing; name the member's cluster".into(),
                ));
            }
            if m.name == cluster {
                return Err((
                    at("name"),
                    format!("`{}` is this hale's own cluster", m.name),
                ));
            }
            if !names.insert(m.name.as_str()) {
                return Err((at("name"), format!("member `{}` is listed twice", m.name)));
            }
            match reqwest::Url::parse(&m.url) {
                Ok(u)
                    if matches!(u.scheme(), "http" | "https")
                        && u.query().is_none()
                        && u.username().is_empty()
                        && u.password().is_none() => {}
                _ => {
                    return Err((
                        at("url"),
                        format!(
                            "is not an http(s) URL without credentials or query (a token goes in tokenFile){}",
                            crate::bracket_hint(&m.url)
                        ),
                    ));
                }
            }
            if let Some(ca) = &m.ca_file {
                if m.url.starts_with("http:") {
                    return Err((
                        at("caFile"),
                        "is for an https member; this one's url is http".into(),
                    ));
                }
                crate::certificates(ca).map_err(|e| (at("caFile"), e))?;
            }
        }
        Ok(())
    }

    /// The members with their tokens, as `secret` hands them over by key.
    pub fn members(&self, mut secret: impl FnMut(&str) -> Secret) -> Vec<Member> {
        self.members
            .iter()
            .enumerate()
            .map(|(i, m)| Member {
                name: m.name.clone(),
                url: reqwest::Url::parse(&m.url).expect("validated"),
                token: m
                    .token_file
                    .as_ref()
                    .map(|_| secret(&format!("federation.members[{i}].tokenFile"))),
                ca_file: m.ca_file.clone(),
            })
            .collect()
    }
}
