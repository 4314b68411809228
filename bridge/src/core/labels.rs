//! The alert label contract of DESIGN §3: how one Alertmanager alert names a node, a
//! condition, a reason, a severity and a special signal. Pure; borrows from the parsed
//! alert so the hot ingest path allocates only what it keeps.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

use super::Severity;
use super::settings::{Identity, parse_duration};

/// Label or annotation pairs as Alertmanager sent them, borrowed from the body where
/// possible. An alert has a handful: a linear scan beats building a map for each of
/// 50,000 alerts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Labels<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'a> Labels<'a> {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_ref())
    }

    pub fn insert(&mut self, name: impl Into<Cow<'a, str>>, value: impl Into<Cow<'a, str>>) {
        let (name, value) = (name.into(), value.into());
        match self.0.iter_mut().find(|(k, _)| *k == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name, value)),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Labels<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = Labels<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Labels<'de>, M::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((k, v)) = map.next_entry::<Text, Text>()? {
                    pairs.push((k.0, v.0));
                }
                Ok(Labels(pairs))
            }
        }
        d.deserialize_map(Pairs)
    }
}

/// A string borrowed from the input unless it had escapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'a> Text<'a> {
    pub fn new(text: impl Into<Cow<'a, str>>) -> Self {
        Text(text.into())
    }
}

/// The annotations hale reads; the others (`runbook_url`, …) are skipped unparsed.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct Annotations<'a> {
    #[serde(borrow, default)]
    pub summary: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub description: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub message: Option<Text<'a>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

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
    pub annotations: Annotations<'a>,
    /// Alertmanager's fingerprint: the same for an alert on both paths.
    pub fingerprint: Cow<'a, str>,
    /// `startsAt` as sent; parsed only where needed ([`Alert::started`]), since most
    /// of 50,000 alerts never need it.
    pub starts_at: Option<Cow<'a, str>>,
    /// `endsAt` as Alertmanager's API reports it for an active alert (when it expires
    /// unless its source sends it again), or a resolved notification's end. Parsed
    /// per condition alert on each poll: the source keeps its latest expiry.
    pub ends_at: Option<Cow<'a, str>>,
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
    /// A label's value; an empty or blank one counts as absent (a node named `" "`
    /// is no node).
    fn label(&self, name: &str) -> Option<&str> {
        self.labels.get(name).filter(|v| !v.trim().is_empty())
    }

    /// When the alert started, if it says so validly.
    pub fn started(&self) -> Option<DateTime<Utc>> {
        let text = self.starts_at.as_deref()?;
        DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    /// When Alertmanager expires the alert unless it is sent again.
    pub fn expires(&self) -> Option<DateTime<Utc>> {
        let text = self.ends_at.as_deref()?;
        DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    pub fn alertname(&self) -> &str {
        self.label("alertname").unwrap_or("unnamed")
    }

    /// The node this alert is about: the first present identity label, with the
    /// `:port` of `instance` stripped when configured.
    pub fn node<'s>(&'s self, identity: &Identity) -> Option<&'s str> {
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
            .unwrap_or_else(|| self.condition_type().to_ascii_uppercase())
    }

    /// Whether `stored` is what [`Alert::fault_class`] would return, without allocating.
    pub fn fault_class_is(&self, stored: &str) -> bool {
        match self.label("hale_fault_class") {
            Some(class) => class == stored,
            None => {
                let ctype = self.condition_type();
                ctype.len() == stored.len()
                    && ctype
                        .bytes()
                        .zip(stored.bytes())
                        .all(|(a, b)| a.to_ascii_uppercase() == b)
            }
        }
    }

    /// Whether `stored` is what [`Alert::message`] would return, without allocating
    /// unless the alert carries a priority.
    pub fn message_is(&self, stored: &str) -> bool {
        match self.priority() {
            Some(_) => self.message() == stored,
            None => self.text() == stored,
        }
    }

    fn text(&self) -> &str {
        let a = &self.annotations;
        [&a.summary, &a.description, &a.message]
            .into_iter()
            .flatten()
            .map(|t| t.0.as_ref())
            .find(|t| !t.is_empty())
            .unwrap_or_else(|| self.alertname())
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
        let text = self.text();
        match self.priority() {
            Some(p) => format!("[P{p}] {text}"),
            None => text.to_string(),
        }
    }
}

impl Alert<'_> {
    /// The alert as a Node condition shows it, Sciuro's way: named by its
    /// `alertname`, worded `[P<priority>] <summary>`, priority 9 without a
    /// `priority` label. `None` for an alert Sciuro refuses: no alertname, or a
    /// priority that is not an integer.
    pub fn notice(&self) -> Option<Notice> {
        let alertname = self.label("alertname")?;
        let priority = self.notice_priority()?;
        let mut message = format!("[P{priority}]");
        if let Some(summary) = &self.annotations.summary {
            message.push(' ');
            message.push_str(&summary.0);
        }
        Some(Notice {
            alertname: alertname.to_string(),
            priority,
            message,
        })
    }

    /// Whether `stored` is what [`Alert::notice`] returns, checked without allocating.
    pub fn notice_is(&self, stored: Option<&Notice>) -> bool {
        let (Some(alertname), Some(priority)) = (self.label("alertname"), self.notice_priority())
        else {
            return stored.is_none();
        };
        let Some(n) = stored else { return false };
        if n.alertname != alertname || n.priority != priority {
            return false;
        }
        // `[P<priority>]`, then ` <summary>` when there is one.
        let Some(rest) = n
            .message
            .strip_prefix("[P")
            .and_then(|r| r.split_once(']'))
            .map(|(_, r)| r)
        else {
            return false;
        };
        match &self.annotations.summary {
            Some(summary) => rest.strip_prefix(' ') == Some(summary.0.as_ref()),
            None => rest.is_empty(),
        }
    }

    /// The `priority` label read as Go's `strconv.Atoi` reads it (Sciuro does): an
    /// optional sign and decimal digits; 9 when absent; `None` when malformed.
    fn notice_priority(&self) -> Option<i64> {
        let Some(raw) = self.labels.get("priority") else {
            return Some(DEFAULT_NOTICE_PRIORITY);
        };
        let digits = raw.strip_prefix(['+', '-']).unwrap_or(raw);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        raw.parse().ok()
    }
}

/// Sciuro's priority for an alert without one.
pub const DEFAULT_NOTICE_PRIORITY: i64 = 9;

/// How an alert shows as a Node condition (see [`Alert::notice`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Notice {
    pub alertname: String,
    /// Lower is more urgent; the most urgent alert of a name is the one shown.
    pub priority: i64,
    pub message: String,
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
            labels: Labels(
                labels
                    .iter()
                    .map(|(k, v)| (Cow::Borrowed(*k), Cow::Borrowed(*v)))
                    .collect(),
            ),
            annotations: Annotations::default(),
            fingerprint: Cow::Borrowed("f"),
            starts_at: None,
            ends_at: None,
            state: AlertState::Active,
        }
    }

    #[test]
    fn node_identity_order_and_port_stripping() {
        let id = Identity::default();
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
        let keep = Identity {
            labels: vec!["instance".into()],
            strip_port: false,
            ..Identity::default()
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
        assert!(a.fault_class_is("CALICOTOOMANYINTERFACESEARLY"));
        assert!(!a.fault_class_is("CALICO"));
        assert!(a.message_is("[P6] CalicoTooManyInterfacesEarly"));
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
        a.annotations.message = Some(Text::new("m"));
        assert_eq!(a.message(), "m");
        a.annotations.description = Some(Text::new("d"));
        assert_eq!(a.message(), "d");
        a.annotations.summary = Some(Text::new("s"));
        assert_eq!(a.message(), "s");
        assert!(a.message_is("s"));
        let parsed: Labels = serde_json::from_str(r#"{"a":"x","b":"with \"escape\""}"#).unwrap();
        assert_eq!(parsed.get("a"), Some("x"));
        assert_eq!(parsed.get("b"), Some("with \"escape\""));
    }
}
