//! `remediation` and `fencing` (DESIGN §8, §15): parsed here, resolved into the
//! core's settings; the blocking alerts stay at the edge, which asks Alertmanager.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Deserialize;

use crate::core::settings::{
    Fencing, NodeType, Remediation, Window, de_duration, de_opt_duration, de_present,
};

/// `remediation:`; every key optional.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct RemediationConfig {
    pub failure_domain_label: Option<String>,
    pub domains_at_once: u32,
    pub max_per_domain: u32,
    #[serde(deserialize_with = "de_duration")]
    pub drain_timeout: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub return_timeout: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub verify_timeout: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub retry_after: Duration,
    pub max_failures_per_hour: u32,
    /// Nothing new is admitted while one of these fires.
    pub blocking_alerts: Vec<AlertMatch>,
    /// Left empty (`window:`) it is refused: commented out, its body would leave
    /// reboots at any hour.
    #[serde(default, deserialize_with = "de_present")]
    pub window: Option<WindowConfig>,
    pub node_types: Vec<NodeTypeConfig>,
}

impl Default for RemediationConfig {
    fn default() -> Self {
        let d = Remediation::default();
        RemediationConfig {
            failure_domain_label: d.failure_domain_label,
            domains_at_once: d.domains_at_once,
            max_per_domain: d.max_per_domain,
            drain_timeout: d.drain_timeout,
            return_timeout: d.return_timeout,
            verify_timeout: d.verify_timeout,
            retry_after: d.retry_after,
            max_failures_per_hour: d.max_failures_per_hour,
            blocking_alerts: Vec::new(),
            window: None,
            node_types: Vec::new(),
        }
    }
}

/// One blocking alert: labels it must carry (`{alertname: CephHealthError}`), or
/// Alertmanager matchers as amtool writes them (`'alertname=~"Ceph.*"'`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum AlertMatch {
    Labels(BTreeMap<String, String>),
    Matchers(String),
}

impl AlertMatch {
    /// The `filter` values of Alertmanager's `GET /api/v2/alerts`: one matcher
    /// each, split at the commas outside quotes.
    pub fn filters(&self) -> Vec<String> {
        match self {
            AlertMatch::Labels(labels) => labels
                .iter()
                .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
                .collect(),
            AlertMatch::Matchers(text) => {
                let text = text.trim();
                let text = text.strip_prefix('{').unwrap_or(text);
                let text = text.strip_suffix('}').unwrap_or(text);
                let (mut out, mut current) = (Vec::new(), String::new());
                let (mut quoted, mut escaped) = (false, false);
                for c in text.chars() {
                    match c {
                        _ if escaped => escaped = false,
                        '\\' => escaped = true,
                        '"' => quoted = !quoted,
                        ',' if !quoted => {
                            out.push(std::mem::take(&mut current));
                            continue;
                        }
                        _ => {}
                    }
                    current.push(c);
                }
                out.push(current);
                out.into_iter()
                    .map(|m| m.trim().to_string())
                    .filter(|m| !m.is_empty())
                    .collect()
            }
        }
    }

    /// Each filter read as Alertmanager reads it (`labels.ParseMatcher`), so that a
    /// matcher it would answer with a 400 — which blocks every reboot — is refused
    /// here instead.
    fn check(&self) -> Result<(), String> {
        let filters = self.filters();
        if filters.is_empty() {
            return Err("names no label to match".into());
        }
        for f in &filters {
            let Some(at) = f.find(['=', '!']) else {
                return Err(format!(
                    "`{f}` is not a matcher like alertname=\"X\" or alertname=~\"Ceph.*\""
                ));
            };
            let name = f[..at].trim();
            let named = name.chars().next().is_some_and(|c| !c.is_ascii_digit())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
            if !named {
                return Err(format!("`{f}` does not start with a label name"));
            }
            let rest = &f[at..];
            let op = ["=~", "!=", "!~", "="]
                .into_iter()
                .find(|op| rest.starts_with(op))
                .ok_or_else(|| format!("`{f}`: `!` is not an operator; use =, !=, =~ or !~"))?;
            let value = unquote(rest[op.len()..].trim())
                .map_err(|why| format!("`{f}`: {why} (separate matchers with commas)"))?;
            if op.ends_with('~') {
                // Alertmanager would refuse every query with it, and the flow
                // would stay blocked with no alert to show for it.
                regex_syntax::Parser::new()
                    .parse(&value)
                    .map_err(|e| format!("`{f}`: the regular expression does not parse: {e}"))?;
            } else if value.is_empty() && matches!(self, AlertMatch::Labels(_)) {
                return Err(format!(
                    "`{f}`: an empty value matches only alerts without the label, so it blocks nothing"
                ));
            }
        }
        Ok(())
    }
}

/// A matcher's value as Alertmanager reads it: quoted or not, a `"` inside only
/// escaped; `\\`, `\"` and `\n` unescaped.
fn unquote(raw: &str) -> Result<String, String> {
    let (body, quoted) = match raw.strip_prefix('"') {
        Some(rest) => (rest, true),
        None => (raw, false),
    };
    let mut value = String::with_capacity(body.len());
    let mut closed = false;
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if closed {
            return Err("the value goes on after its closing quote".into());
        }
        match c {
            '\\' => match chars.next() {
                Some('n') => value.push('\n'),
                Some(e @ ('"' | '\\')) => value.push(e),
                Some(other) => {
                    value.push('\\');
                    value.push(other);
                }
                None => value.push('\\'),
            },
            '"' if quoted => closed = true,
            '"' => return Err("the value holds a quote that is not escaped".into()),
            c => value.push(c),
        }
    }
    if quoted && !closed {
        return Err("the value's quote is not closed".into());
    }
    Ok(value)
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WindowConfig {
    /// `mon` … `sun`; every day when omitted. Left empty (`days:`) it is refused,
    /// as `[]` is.
    #[serde(default, deserialize_with = "de_present")]
    pub days: Option<Vec<String>>,
    /// `HH:MM`.
    pub start: String,
    pub end: String,
    /// An IANA zone (`Europe/London`); UTC when omitted. Left empty
    /// (`timeZone:`) it is refused.
    #[serde(default, deserialize_with = "crate::core::settings::de_present")]
    pub time_zone: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeTypeConfig {
    #[serde(default)]
    pub name: Option<String>,
    pub selector: BTreeMap<String, String>,
    /// Default true; control-plane nodes need it written.
    #[serde(default)]
    pub allowed: Option<bool>,
    #[serde(default)]
    pub max_per_domain: Option<u32>,
    #[serde(default)]
    pub blocking_alerts: Vec<AlertMatch>,
}

/// `fencing:`; its presence turns fencing on.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FencingConfig {
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub after: Option<Duration>,
    #[serde(default)]
    pub max_percent: Option<u32>,
}

/// The blocking alerts the service asks Alertmanager about: everyone's, and each
/// node type's by its name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Blocking {
    pub all: Vec<Vec<String>>,
    pub types: Vec<(String, Vec<Vec<String>>)>,
}

const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// `HH:MM` as minutes after midnight (`24:00` is the end of the day).
fn minutes(text: &str) -> Option<u16> {
    let (h, m) = text.trim().split_once(':')?;
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (m < 60 && (h < 24 || (h == 24 && m == 0))).then_some(h * 60 + m)
}

impl RemediationConfig {
    /// The core's settings and the edge's blocking alerts; the error is (key under
    /// `remediation`, message).
    pub fn resolve(&self) -> Result<(Remediation, Blocking), (String, String)> {
        let fail = |key: &str, message: String| Err((key.to_string(), message));
        if self.domains_at_once == 0 {
            return fail("domainsAtOnce", "must be at least 1".into());
        }
        if self.max_per_domain == 0 {
            return fail("maxPerDomain", "must be at least 1".into());
        }
        for (key, d) in [
            ("drainTimeout", self.drain_timeout),
            ("returnTimeout", self.return_timeout),
            ("verifyTimeout", self.verify_timeout),
        ] {
            if d.is_zero() {
                return fail(key, "must be positive".into());
            }
        }
        if self.max_failures_per_hour == 0 {
            return fail(
                "maxFailuresPerHour",
                "must be at least 1 (0 would halt the flow before it starts)".into(),
            );
        }
        if let Some(l) = &self.failure_domain_label
            && l.trim().is_empty()
        {
            return fail("failureDomainLabel", "must not be empty".into());
        }
        if let Some(why) = self
            .failure_domain_label
            .as_deref()
            .and_then(|l| super::unmatchable("label name", l))
        {
            return fail("failureDomainLabel", why);
        }
        let mut blocking = Blocking::default();
        for (i, m) in self.blocking_alerts.iter().enumerate() {
            m.check().map_err(|e| (format!("blockingAlerts[{i}]"), e))?;
            blocking.all.push(m.filters());
        }
        let window = match &self.window {
            None => None,
            Some(w) => Some(window(w)?),
        };
        let mut node_types = Vec::new();
        let mut names = BTreeSet::new();
        for (i, t) in self.node_types.iter().enumerate() {
            let at = format!("nodeTypes[{i}]");
            if t.selector.is_empty() {
                return fail(
                    &format!("{at}.selector"),
                    "an empty selector would take every node; name at least one label".into(),
                );
            }
            if t.max_per_domain == Some(0) {
                return fail(&format!("{at}.maxPerDomain"), "must be at least 1".into());
            }
            let name = t.name.clone().unwrap_or_else(|| at.clone());
            if !names.insert(name.clone()) {
                return fail(&format!("{at}.name"), format!("`{name}` is named twice"));
            }
            let mut matchers = Vec::new();
            for (j, m) in t.blocking_alerts.iter().enumerate() {
                m.check()
                    .map_err(|e| (format!("{at}.blockingAlerts[{j}]"), e))?;
                matchers.push(m.filters());
            }
            if !matchers.is_empty() {
                blocking.types.push((name.clone(), matchers));
            }
            node_types.push(NodeType {
                name,
                selector: t.selector.clone(),
                allowed: t.allowed.unwrap_or(true),
                allowed_explicitly: t.allowed == Some(true),
                max_per_domain: t.max_per_domain,
            });
        }
        Ok((
            Remediation {
                failure_domain_label: self.failure_domain_label.clone(),
                domains_at_once: self.domains_at_once,
                max_per_domain: self.max_per_domain,
                drain_timeout: self.drain_timeout,
                return_timeout: self.return_timeout,
                verify_timeout: self.verify_timeout,
                retry_after: self.retry_after,
                max_failures_per_hour: self.max_failures_per_hour,
                node_types,
                window,
            },
            blocking,
        ))
    }
}

fn window(w: &WindowConfig) -> Result<Window, (String, String)> {
    let fail = |key: &str, message: String| Err((format!("window.{key}"), message));
    let mut days = BTreeSet::new();
    match &w.days {
        None => days = (0..7).collect(),
        Some(named) if named.is_empty() => {
            return fail(
                "days",
                "is empty, so the window would never open: leave the key out for every day, or name the days".into(),
            );
        }
        Some(named) => {
            for d in named {
                match DAYS.iter().position(|x| x.eq_ignore_ascii_case(d.trim())) {
                    // Named twice: a slip for another day, most likely.
                    Some(i) if !days.insert(i as u8) => {
                        return fail(
                            "days",
                            format!("names {} twice: another day was meant?", DAYS[i]),
                        );
                    }
                    Some(_) => {}
                    None => {
                        return fail("days", format!("`{d}` is not a day ({})", DAYS.join(", ")));
                    }
                }
            }
        }
    }
    let Some(start) = minutes(&w.start).filter(|m| *m < 24 * 60) else {
        return fail(
            "start",
            format!(
                "`{}` is not a time like 09:00 (24:00 only ends a window)",
                w.start
            ),
        );
    };
    let Some(end) = minutes(&w.end) else {
        return fail("end", format!("`{}` is not a time like 17:00", w.end));
    };
    if start == end {
        return fail("end", "equals start: the window would be empty".into());
    }
    let name = w.time_zone.as_deref().unwrap_or("UTC");
    let zone = jiff::tz::TimeZone::get(name).map_err(|e| {
        (
            "window.timeZone".to_string(),
            format!("`{name}` is not a time zone this machine knows: {e}"),
        )
    })?;
    Ok(Window {
        days,
        start,
        end,
        zone,
        shown: format!(
            "{} {}-{} {name}",
            w.days
                .as_ref()
                .map_or_else(|| "daily".to_string(), |d| d.join(",")),
            w.start,
            w.end
        ),
    })
}

impl FencingConfig {
    /// The core's settings; `needs_not_ready`: the orchestrator has a readiness.
    pub fn resolve(&self, needs_not_ready: bool) -> Result<Fencing, (String, String)> {
        let after = self.after.unwrap_or(Duration::from_secs(300));
        if after.is_zero() {
            return Err(("after".into(), "must be positive".into()));
        }
        let max_percent = self.max_percent.unwrap_or(10);
        if !(1..=100).contains(&max_percent) {
            return Err(("maxPercent".into(), "must be 1..=100".into()));
        }
        Ok(Fencing {
            after,
            max_percent,
            per_day: 3,
            needs_not_ready,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> crate::core::Time {
        chrono::DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    /// A window on `days` from `start` to `end` in `tz`, as the config builds it.
    fn w(days: &[&str], start: &str, end: &str, tz: &str) -> Window {
        window(&WindowConfig {
            days: Some(days.iter().map(|d| d.to_string()).collect()),
            start: start.into(),
            end: end.into(),
            time_zone: Some(tz.into()),
        })
        .unwrap()
    }

    #[test]
    fn windows_follow_their_zone_days_and_midnight() {
        let office = w(
            &["mon", "tue", "wed", "thu", "fri"],
            "09:00",
            "17:00",
            "Europe/London",
        );
        // 2026-07-06 is a Monday; London is UTC+1 in summer.
        assert!(office.contains(at("2026-07-06T08:30:00Z")), "09:30 BST");
        assert!(!office.contains(at("2026-07-06T07:30:00Z")), "08:30 BST");
        assert!(
            !office.contains(at("2026-07-06T16:00:00Z")),
            "17:00 BST is the end"
        );
        assert!(!office.contains(at("2026-07-05T10:00:00Z")), "Sunday");
        // In winter London is UTC.
        assert!(
            office.contains(at("2026-12-07T16:30:00Z")),
            "16:30 GMT Monday"
        );
        let night = w(&["fri"], "22:00", "04:00", "UTC");
        assert!(night.contains(at("2026-07-10T23:00:00Z")), "Friday night");
        assert!(
            night.contains(at("2026-07-11T03:00:00Z")),
            "Saturday morning after it"
        );
        assert!(
            !night.contains(at("2026-07-11T23:00:00Z")),
            "Saturday night"
        );
        assert!(
            !night.contains(at("2026-07-10T03:00:00Z")),
            "Friday morning"
        );
    }

    /// When a closed window opens next, as the first minute it contains: in its
    /// zone, on its days, past midnight, at the end of a daylight-saving gap its
    /// start falls in, on a zone 45 minutes off the hour.
    #[test]
    fn a_closed_window_says_when_it_opens() {
        let week = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
        for (window, now, opens, said) in [
            (
                w(&week[..5], "09:00", "17:00", "Europe/London"),
                "2027-03-29T07:59:00Z",
                "2027-03-29T08:00:00Z",
                "opens Mon 2027-03-29 09:00 BST (in 0h 01m)",
            ),
            (
                w(&week[..5], "09:00", "17:00", "Europe/London"),
                "2027-04-02T16:30:00Z",
                "2027-04-05T08:00:00Z",
                "opens Mon 2027-04-05 09:00 BST (in 63h 30m)",
            ),
            // 01:30 does not exist that night: it opens as the gap ends, 02:00 BST.
            (
                w(&week, "01:30", "03:00", "Europe/London"),
                "2027-03-28T00:30:00Z",
                "2027-03-28T01:00:00Z",
                "opens Sun 2027-03-28 02:00 BST (in 0h 30m)",
            ),
            (
                w(&["mon"], "22:00", "02:00", "UTC"),
                "2027-03-30T03:00:00Z",
                "2027-04-05T22:00:00Z",
                "opens Mon 2027-04-05 22:00 UTC (in 163h 00m)",
            ),
            (
                w(&["tue"], "00:00", "24:00", "Asia/Kathmandu"),
                "2027-03-29T18:00:00Z",
                "2027-03-29T18:15:00Z",
                "opens Tue 2027-03-30 00:00 +0545 (in 0h 15m)",
            ),
        ] {
            assert!(!window.contains(at(now)), "{now}");
            assert_eq!(window.next_open(at(now)), Some(at(opens)), "{now}");
            assert_eq!(window.opens(at(now)).unwrap(), said, "{now}");
        }
    }

    #[test]
    fn bad_windows_and_matchers_name_their_key() {
        let bad = |w: WindowConfig| window(&w).unwrap_err().0;
        let base = WindowConfig {
            days: None,
            start: "09:00".into(),
            end: "17:00".into(),
            time_zone: None,
        };
        assert_eq!(
            bad(WindowConfig {
                days: Some(vec!["fun".into()]),
                ..base.clone()
            }),
            "window.days"
        );
        assert_eq!(
            bad(WindowConfig {
                days: Some(vec![]),
                ..base.clone()
            }),
            "window.days",
            "a window that never opens"
        );
        let twice = window(&WindowConfig {
            days: Some(vec!["Sat".into(), "sat".into()]),
            ..base.clone()
        })
        .unwrap_err();
        assert_eq!(twice.0, "window.days");
        assert!(twice.1.contains("names sat twice"), "{}", twice.1);
        assert_eq!(
            bad(WindowConfig {
                start: "9am".into(),
                ..base.clone()
            }),
            "window.start"
        );
        assert_eq!(
            bad(WindowConfig {
                end: "09:00".into(),
                ..base.clone()
            }),
            "window.end"
        );
        assert_eq!(
            bad(WindowConfig {
                time_zone: Some("Mars/Olympus".into()),
                ..base.clone()
            }),
            "window.timeZone"
        );
        assert_eq!(
            AlertMatch::Matchers(r#"{alertname=~"Ceph.*", severity="critical"}"#.into()).filters(),
            [r#"alertname=~"Ceph.*""#, r#"severity="critical""#]
        );
        assert_eq!(
            AlertMatch::Labels([("alertname".into(), "CephHealthError".into())].into()).filters(),
            [r#"alertname="CephHealthError""#]
        );
        assert!(AlertMatch::Matchers("Ceph".into()).check().is_err());
        assert!(AlertMatch::Matchers("".into()).check().is_err());
        // A comma inside quotes is the value's.
        assert_eq!(
            AlertMatch::Matchers(r#"{summary="a, b", severity="critical"}"#.into()).filters(),
            [r#"summary="a, b""#, r#"severity="critical""#]
        );
        // As Alertmanager's labels.ParseMatcher reads each (tests/e2e checks the
        // same table against a real one).
        for (text, ok) in [
            (r#"alertname="CephHealthError""#, true),
            (r#"alertname = "x""#, true),
            (r#"alert:name=x"#, true),
            (r#"summary="a \"quoted\" word""#, true),
            (r#"alertname="""#, true),
            (r#"alertname="CephHealthError"#, false),
            (r#"alertname=CephHealthError""#, false),
            (r#"alertname=="x""#, false),
            (r#"alertname="x" severity="critical""#, false),
            (r#"alertname="x\""#, false),
            (r#"alertname!"x""#, false),
            (r#"1alertname="x""#, false),
        ] {
            assert_eq!(
                AlertMatch::Matchers(text.into()).check().is_ok(),
                ok,
                "{text}: {:?}",
                AlertMatch::Matchers(text.into()).check()
            );
        }
    }
}
