//! `orchestrator: { kind: kubernetes, … }`: the Kubernetes orchestrator's own keys,
//! their defaults and their checks.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::core::settings::{de_duration, de_present};

/// The Kubernetes orchestrator's settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Config {
    /// `kubernetes`.
    pub kind: String,
    /// The kubeconfig file; omitted: `KUBECONFIG`, `~/.kube/config`, or the
    /// in-cluster service account (written empty it is refused: never read as
    /// whatever cluster those name).
    #[serde(deserialize_with = "de_present")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; omitted: its current context.
    #[serde(deserialize_with = "de_present")]
    pub context: Option<String>,
    /// The prefix of the Node conditions hale owns (Sciuro's default).
    pub condition_prefix: String,
    /// How long a cleared condition stays on the Node as `False`.
    #[serde(deserialize_with = "de_duration")]
    pub condition_linger: Duration,
    /// How often an unchanged condition's `lastHeartbeatTime` is renewed.
    #[serde(deserialize_with = "de_duration")]
    pub condition_heartbeat: Duration,
    /// How long a drain or eviction retries the pods PodDisruptionBudgets hold;
    /// after it, they are left on the node and recorded as blocked.
    #[serde(deserialize_with = "de_duration")]
    pub eviction_timeout: Duration,
    /// The leader election's Lease.
    pub lease: LeaseConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            kind: "kubernetes".into(),
            kubeconfig: None,
            context: None,
            condition_prefix: "AlertManager_".into(),
            condition_linger: Duration::from_secs(96 * 3600),
            condition_heartbeat: Duration::from_secs(300),
            eviction_timeout: Duration::from_secs(300),
            lease: LeaseConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LeaseConfig {
    pub name: String,
    /// Omitted: `POD_NAMESPACE` (the chart sets it), else `default`.
    pub namespace: Option<String>,
    /// How long a silent leader keeps the Lease; it renews every third of it.
    #[serde(deserialize_with = "de_duration")]
    pub duration: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            name: "hale".into(),
            namespace: None,
            duration: Duration::from_secs(15),
        }
    }
}

impl Config {
    /// The files this kind reads, by key.
    pub fn files(&self) -> Vec<(&'static str, &PathBuf)> {
        self.kubeconfig.iter().map(|p| ("kubeconfig", p)).collect()
    }

    /// What serde cannot check; the error is (key under `orchestrator`, message).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let fail = |key: &str, message: String| Err((key.to_string(), message));
        if let Some(p) = &self.kubeconfig {
            if let Err(e) = std::fs::metadata(p) {
                return fail("kubeconfig", format!("cannot read {}: {e}", p.display()));
            }
            // What connecting would refuse, refused here, check-config included.
            let file = kube::config::Kubeconfig::read_from(p).map_err(|e| {
                (
                    "kubeconfig".to_string(),
                    format!("{} is no kubeconfig: {}", p.display(), first_line(&e)),
                )
            })?;
            let known = || {
                let names: Vec<&str> = file.contexts.iter().map(|c| c.name.as_str()).collect();
                names.join(", ")
            };
            let chosen = self.context.as_ref().or(file.current_context.as_ref());
            if let Some(context) = chosen
                .and_then(|c| file.contexts.iter().find(|n| &n.name == c))
                .and_then(|n| n.context.as_ref())
            {
                // The files the context's cluster and user name are read by the
                // client: held to what hale's own such files are.
                let cluster = file
                    .clusters
                    .iter()
                    .filter(|c| c.name == context.cluster)
                    .filter_map(|c| c.cluster.as_ref())
                    .filter_map(|c| {
                        Some(("certificate-authority", c.certificate_authority.as_deref()?))
                    });
                let user = file
                    .auth_infos
                    .iter()
                    .filter(|a| context.user.as_ref() == Some(&a.name))
                    .filter_map(|a| a.auth_info.as_ref())
                    .flat_map(|a| {
                        [
                            ("client-certificate", a.client_certificate.as_deref()),
                            ("client-key", a.client_key.as_deref()),
                            ("tokenFile", a.token_file.as_deref()),
                        ]
                    })
                    .filter_map(|(field, path)| Some((field, path?)));
                for (field, path) in cluster.chain(user) {
                    if let Err(e) = crate::small_file(std::path::Path::new(path)) {
                        return fail("kubeconfig", format!("{}: its {field}: {e}", p.display()));
                    }
                }
            }
            match (&self.context, &file.current_context) {
                (Some(c), _) | (None, Some(c)) if !file.contexts.iter().any(|n| &n.name == c) => {
                    let key = if self.context.is_some() {
                        "context"
                    } else {
                        "kubeconfig"
                    };
                    return fail(
                        key,
                        format!("{} has no context `{c}` (it has: {})", p.display(), known()),
                    );
                }
                (None, None) => {
                    return fail(
                        "context",
                        format!(
                            "{} names no current-context: name one here (it has: {})",
                            p.display(),
                            known()
                        ),
                    );
                }
                _ => {}
            }
        }
        let prefix = &self.condition_prefix;
        if prefix.is_empty()
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return fail(
                "conditionPrefix",
                "letters, digits and `_`, at least one: kubectl's condition types are words".into(),
            );
        }
        for (key, d) in [
            ("conditionHeartbeat", self.condition_heartbeat),
            ("evictionTimeout", self.eviction_timeout),
        ] {
            if d.is_zero() {
                return fail(key, "must be longer than 0".into());
            }
        }
        if self.lease.duration < Duration::from_secs(3) {
            return fail(
                "lease.duration",
                "at least 3s: the leader renews every third of it".into(),
            );
        }
        if !dns_name(&self.lease.name, 253) {
            return fail(
                "lease.name",
                format!(
                    "`{}` is not a Kubernetes object name: lowercase letters, digits, `-` and `.`, starting and ending with a letter or digit, at most 253",
                    self.lease.name
                ),
            );
        }
        if let Some(ns) = &self.lease.namespace
            && (!dns_name(ns, 63) || ns.contains('.'))
        {
            return fail(
                "lease.namespace",
                format!(
                    "`{ns}` is not a namespace name: lowercase letters, digits and `-`, starting and ending with a letter or digit, at most 63"
                ),
            );
        }
        Ok(())
    }
}

/// A name the API server takes for an object (RFC 1123 subdomain, `max` long):
/// one it refuses would fail every renewal of the Lease, not the start.
fn dns_name(name: &str, max: usize) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= max
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .split('.')
            .all(|part| !part.is_empty() && !part.starts_with('-') && !part.ends_with('-'))
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

impl Config {
    pub async fn connect(
        &self,
    ) -> Result<std::sync::Arc<dyn crate::orchestrator::Orchestrator>, super::ConnectError> {
        Ok(super::Kubernetes::connect(self).await?)
    }
}

/// The first line of a kubeconfig's error: the YAML parser goes on to quote the
/// lines around the fault, and a kubeconfig's lines are tokens and keys.
pub(super) fn first_line(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    text.lines()
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

/// Whether this machine offers a cluster to a configuration that names no
/// kubeconfig: `KUBECONFIG`, `~/.kube/config`, or a pod's service account.
pub fn ambient_cluster() -> bool {
    let set = |var: &str| std::env::var_os(var).is_some_and(|v| !v.is_empty());
    set("KUBECONFIG")
        || std::env::var_os("HOME")
            .is_some_and(|home| PathBuf::from(home).join(".kube/config").is_file())
        || (set("KUBERNETES_SERVICE_HOST")
            && std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token")
                .is_file())
}
