//! The alert label contract of DESIGN §3: how one Alertmanager alert names a node, a
//! condition, a reason, a severity and a special signal. Pure; borrows from the parsed
//! alert so the hot ingest path allocates only what it keeps.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use super::Severity;
use crate::config::{NodeIdentity, parse_duration};
use chrono::{DateTime, Utc};

pub type Labels<'a> = BTreeMap<Cow<'a, str>, Cow<'a, str>>;

/// Where an alert stands, as the source reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertState {
    /// Firing and routed to hale.
    Active,
    /// Firing but silenced or inhibited: operator intent, costs no points.
    Suppressed,
    /// Ended (webhook deliveries only; the v2 API never returns resolved alerts).
    Resolved,
}

/// One alert from either path (poll or webhook), normalised.
#[derive(Debug, Clone)]
pub struct Alert<'a> {
    pub labels: Labels<'a>,
    pub annotations: Labels<'a>,
    /// Alertmanager's fingerprint: the same for an alert on both paths.
    pub fingerprint: Cow<'a, str>,
    pub starts_at: Option<DateTime<Utc>>,
    pub state: AlertState,
}

/// What an alert means to hale (`hale_signal`, DESIGN §3–4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal<'s> {
    /// Proves the whole pipeline is alive.
    Watchdog,
    /// The node is alive; `interval` from `hale_report_interval`.
    Heartbeat { interval: Option<Duration> },
    /// A collector ran and could not produce a reading.
    CollectorFailed { collector: &'s str },
    /// A signal that does not exist on this node (no GPU, no ECC).
    Unavailable { signal: &'s str },
    /// A job failed and is attributed to this node.
    JobFailure { job: &'s str },
    /// An ordinary condition.
    Condition,
}

impl<'a> Alert<'a> {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .get(name)
            .map(|v| v.as_ref())
            .filter(|v| !v.is_empty())
    }

    pub fn alertname(&self) -> &str {
        self.label("alertname").unwrap_or("unnamed")
    }

    /// The node this alert is about: the first present identity label, with the
    /// `:port` of `instance` stripped when configured.
    pub fn node<'s>(&'s self, identity: &NodeIdentity) -> Option<&'s str> {
        identity.labels.iter().find_map(|name| {
            let value = self.label(name)?;
            Some(if identity.strip_port && name == "instance" {
                strip_port(value)
            } else {
                value
            })
        })
    }

    pub fn signal(&self) -> Signal<'_> {
        let named = |fallback: &'static str| {
            self.label("collector")
                .or_else(|| self.label("signal"))
                .unwrap_or(fallback)
        };
        match self.label("hale_signal") {
            Some("watchdog") => Signal::Watchdog,
            Some("heartbeat") => Signal::Heartbeat {
                interval: self
                    .label("hale_report_interval")
                    .and_then(|t| parse_duration(t).ok())
                    .filter(|d| !d.is_zero()),
            },
            Some("collector_failed") => Signal::CollectorFailed {
                collector: named("unknown"),
            },
            Some("unavailable") => Signal::Unavailable {
                signal: named("unknown"),
            },
            Some("job_failure") => Signal::JobFailure {
                job: self
                    .label("hale_job")
                    .or_else(|| self.label("job_name"))
                    .unwrap_or_else(|| self.alertname()),
            },
            _ => Signal::Condition,
        }
    }

    /// Condition type: `hale_condition`, else the alertname verbatim.
    pub fn condition_type(&self) -> &str {
        self.label("hale_condition")
            .unwrap_or_else(|| self.alertname())
    }

    /// Penalty-table reason: `hale_reason`, else the alertname.
    pub fn reason(&self) -> &str {
        self.label("hale_reason")
            .unwrap_or_else(|| self.alertname())
    }

    pub fn severity(&self) -> Severity {
        match self.label("severity") {
            Some("info") => Severity::Info,
            Some("critical") => Severity::Critical,
            _ => Severity::Warning,
        }
    }

    pub fn sticky(&self) -> bool {
        self.label("hale_sticky") == Some("true")
    }

    /// Fault class for fault-triggered eviction; defaults to the upper-cased type.
    pub fn fault_class(&self) -> String {
        self.label("hale_fault_class")
            .map(str::to_string)
            .unwrap_or_else(|| self.condition_type().to_uppercase())
    }

    /// Cloudflare-style priority (`"6"` or `"P6"`); lower is more urgent.
    pub fn priority(&self) -> Option<u8> {
        let p = self.label("priority")?;
        p.trim_start_matches(['P', 'p']).parse().ok()
    }

    pub fn remediation(&self) -> Option<&str> {
        self.label("hale_remediation")
    }

    /// Message: annotation `summary`, else `description`, else `message`, else the
    /// alertname; prefixed `[P6] ` when the alert carries a priority.
    pub fn message(&self) -> String {
        let text = ["summary", "description", "message"]
            .iter()
            .find_map(|k| self.annotations.get(*k).filter(|v| !v.is_empty()))
            .map(|v| v.as_ref())
            .unwrap_or_else(|| self.alertname());
        match self.priority() {
            Some(p) => format!("[P{p}] {text}"),
            None => text.to_string(),
        }
    }
}

/// `10.0.0.14:9100` → `10.0.0.14`, `[fe80::1]:9100` → `[fe80::1]`; values without a
/// numeric port, or bare IPv6 addresses, are left alone.
pub fn strip_port(value: &str) -> &str {
    match value.rsplit_once(':') {
        Some((host, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!host.contains(':') || (host.starts_with('[') && host.ends_with(']'))) =>
        {
            host
        }
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(labels: &[(&'static str, &'static str)]) -> Alert<'static> {
        Alert {
            labels: labels
                .iter()
                .map(|(k, v)| (Cow::Borrowed(*k), Cow::Borrowed(*v)))
                .collect(),
            annotations: Labels::new(),
            fingerprint: Cow::Borrowed("f"),
            starts_at: None,
            state: AlertState::Active,
        }
    }

    #[test]
    fn node_identity_order_and_port_stripping() {
        let id = NodeIdentity::default();
        type Case = (
            &'static [(&'static str, &'static str)],
            Option<&'static str>,
        );
        let cases: &[Case] = &[
            (
                &[("node", "gpu-14"), ("instance", "10.0.0.14:9100")],
                Some("gpu-14"),
            ),
            (&[("instance", "10.0.0.14:9100")], Some("10.0.0.14")),
            (&[("instance", "[fe80::1]:9100")], Some("[fe80::1]")),
            (&[("instance", "fe80::1")], Some("fe80::1")),
            (&[("instance", "rack1/n3")], Some("rack1/n3")),
            (&[("node", "")], None),
            (&[("alertname", "x")], None),
        ];
        for (labels, want) in cases {
            assert_eq!(alert(labels).node(&id), *want, "{labels:?}");
        }
        let keep = NodeIdentity {
            labels: vec!["instance".into()],
            strip_port: false,
        };
        assert_eq!(alert(&[("instance", "h:9100")]).node(&keep), Some("h:9100"));
    }

    #[test]
    fn defaults_follow_the_contract() {
        let a = alert(&[
            ("alertname", "CalicoTooManyInterfacesEarly"),
            ("priority", "6"),
        ]);
        assert_eq!(a.condition_type(), "CalicoTooManyInterfacesEarly");
        assert_eq!(a.reason(), "CalicoTooManyInterfacesEarly");
        assert_eq!(a.severity(), Severity::Warning);
        assert!(!a.sticky());
        assert_eq!(a.fault_class(), "CALICOTOOMANYINTERFACESEARLY");
        assert_eq!(a.signal(), Signal::Condition);
        assert_eq!(a.message(), "[P6] CalicoTooManyInterfacesEarly");
    }

    #[test]
    fn signals() {
        let cases: &[(&[(&str, &str)], Signal)] = &[
            (&[("hale_signal", "watchdog")], Signal::Watchdog),
            (
                &[
                    ("hale_signal", "heartbeat"),
                    ("hale_report_interval", "15s"),
                ],
                Signal::Heartbeat {
                    interval: Some(Duration::from_secs(15)),
                },
            ),
            (
                &[("hale_signal", "heartbeat")],
                Signal::Heartbeat { interval: None },
            ),
            (
                &[("hale_signal", "collector_failed"), ("collector", "smart")],
                Signal::CollectorFailed { collector: "smart" },
            ),
            (
                &[("hale_signal", "unavailable"), ("signal", "gpu")],
                Signal::Unavailable { signal: "gpu" },
            ),
            (
                &[
                    ("hale_signal", "job_failure"),
                    ("alertname", "JobFailed"),
                    ("hale_job", "j-7"),
                ],
                Signal::JobFailure { job: "j-7" },
            ),
            (&[("hale_signal", "bogus")], Signal::Condition),
        ];
        for (labels, want) in cases {
            assert_eq!(&alert(labels).signal(), want, "{labels:?}");
        }
    }

    #[test]
    fn message_precedence() {
        let mut a = alert(&[("alertname", "A")]);
        a.annotations.insert("message".into(), "m".into());
        assert_eq!(a.message(), "m");
        a.annotations.insert("description".into(), "d".into());
        assert_eq!(a.message(), "d");
        a.annotations.insert("summary".into(), "s".into());
        assert_eq!(a.message(), "s");
    }
}
