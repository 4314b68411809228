//! hale's view on the Node, where `kubectl describe node` shows it: one Sciuro-style
//! condition per raised hale condition, and the score and health as annotations.
//! Everything here is pure — the Node as the watch shows it, hale's report and `now`
//! in, the patch to send (or nothing) out — so the rules are table-tested.
//!
//! A condition hale owns carries its prefix (`AlertManager_` by default). Raised:
//! `True`/`AlertIsFiring` with the alert's message; cleared: `False`/`AlertIsNotFiring`
//! until it has been False for the linger, then removed; while hale cannot see the
//! node's alerts, every condition it owns is `Unknown`/`AlertsUnavailable`.
//! `lastTransitionTime` moves only when the status does; `lastHeartbeatTime` when
//! anything is written, and at least every heartbeat interval, so a reader can tell a
//! statement hale still stands behind from one a stopped hale left behind.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as KubeTime;
use serde_json::{Value, json};

pub use crate::orchestrator::Report;

/// Annotation: the node's reliability score (absent while unscored).
pub const SCORE: &str = "hale.dev/score";
/// Annotation: `Healthy`, `Degraded` or `Unknown`.
pub const HEALTH: &str = "hale.dev/health";

pub const FIRING: &str = "AlertIsFiring";
pub const NOT_FIRING: &str = "AlertIsNotFiring";
pub const UNAVAILABLE: &str = "AlertsUnavailable";

/// How conditions are written (`orchestrator.condition*`).
#[derive(Debug, Clone, PartialEq)]
pub struct Style {
    pub prefix: String,
    pub linger: Duration,
    pub heartbeat: Duration,
}

/// The Node condition type of a hale condition: the prefix and the type in
/// CamelCase (`gpu_ecc_errors` → `GpuEccErrors`); an alertname keeps its name.
pub fn condition_type(prefix: &str, ctype: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + ctype.len());
    out.push_str(prefix);
    for part in ctype.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    out
}

fn kube_time(t: DateTime<Utc>) -> KubeTime {
    let ts = k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
        .expect("a chrono time is in range");
    KubeTime(ts)
}

fn chrono_time(t: &KubeTime) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), 0).unwrap_or_default()
}

/// The strategic-merge patch of `status.conditions` bringing the Node to `report`,
/// or `None` when every condition hale owns already says it and none needs its
/// heartbeat refreshed. Conditions of other owners are never named in the patch.
pub fn status_patch(
    node: &Node,
    report: &Report,
    style: &Style,
    now: DateTime<Utc>,
) -> Option<Value> {
    let current: BTreeMap<&str, &NodeCondition> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.type_.starts_with(&style.prefix))
        .map(|c| (c.type_.as_str(), c))
        .collect();
    let mut wanted: BTreeMap<String, (&str, &str, String)> = report
        .conditions
        .iter()
        .map(|(ctype, message)| {
            let (status, reason) = if report.stale {
                ("Unknown", UNAVAILABLE)
            } else {
                ("True", FIRING)
            };
            (
                condition_type(&style.prefix, ctype),
                (status, reason, message.clone()),
            )
        })
        .collect();
    let linger = chrono::TimeDelta::from_std(style.linger).unwrap_or(chrono::TimeDelta::MAX);
    let mut delete = Vec::new();
    for (ctype, c) in &current {
        if wanted.contains_key(*ctype) {
            continue;
        }
        let message = c.message.clone().unwrap_or_default();
        if report.stale {
            wanted.insert(ctype.to_string(), ("Unknown", UNAVAILABLE, message));
        } else if c.status != "False" {
            wanted.insert(ctype.to_string(), ("False", NOT_FIRING, message));
        } else if c
            .last_transition_time
            .as_ref()
            .is_some_and(|t| now - chrono_time(t) >= linger)
        {
            delete.push(json!({"$patch": "delete", "type": ctype}));
        } else {
            wanted.insert(ctype.to_string(), ("False", NOT_FIRING, message));
        }
    }
    let heartbeat = chrono::TimeDelta::from_std(style.heartbeat).unwrap_or(chrono::TimeDelta::MAX);
    let mut patch = delete;
    for (ctype, (status, reason, message)) in wanted {
        let old = current.get(ctype.as_str());
        let same = old.is_some_and(|c| {
            c.status == status
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref().unwrap_or_default() == message
        });
        let fresh = old
            .and_then(|c| c.last_heartbeat_time.as_ref())
            .is_some_and(|t| now - chrono_time(t) < heartbeat);
        if same && fresh {
            continue;
        }
        let transition = match old {
            Some(c) if c.status == status => c
                .last_transition_time
                .clone()
                .unwrap_or_else(|| kube_time(now)),
            _ => kube_time(now),
        };
        patch.push(json!({
            "type": ctype,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": kube_time(now),
            "lastTransitionTime": transition,
        }));
    }
    (!patch.is_empty()).then(|| json!({"status": {"conditions": patch}}))
}

/// The annotations hale keeps on the Node: score and health, and no leftover record
/// of a cordon once the node is schedulable again (`kubectl uncordon` leaves hale's
/// annotations behind). `None` when they already say it.
pub fn annotations(node: &Node, report: &Report, cordon_keys: &[&str]) -> Option<Value> {
    let current = node.metadata.annotations.as_ref();
    let get = |k: &str| current.and_then(|a| a.get(k)).map(String::as_str);
    let mut patch = serde_json::Map::new();
    let score = report.score.map(|s| s.to_string());
    if get(SCORE) != score.as_deref() {
        patch.insert(SCORE.into(), json!(score));
    }
    if get(HEALTH) != Some(report.health.as_str()) {
        patch.insert(HEALTH.into(), json!(report.health.as_str()));
    }
    let schedulable = !node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    if schedulable {
        for key in cordon_keys {
            if get(key).is_some() {
                patch.insert((*key).into(), Value::Null);
            }
        }
    }
    (!patch.is_empty()).then(|| {
        json!({"metadata": {
            "annotations": patch,
            "resourceVersion": node.metadata.resource_version,
        }})
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Health;

    const T0: &str = "2026-11-30T00:00:00Z";

    fn at(offset_secs: i64) -> DateTime<Utc> {
        T0.parse::<DateTime<Utc>>().unwrap() + chrono::TimeDelta::seconds(offset_secs)
    }

    fn style() -> Style {
        Style {
            prefix: "AlertManager_".into(),
            linger: Duration::from_secs(96 * 3600),
            heartbeat: Duration::from_secs(300),
        }
    }

    fn report(stale: bool, conditions: &[(&str, &str)]) -> Report {
        Report {
            id: "n1".into(),
            score: Some(75),
            health: Health::Healthy,
            stale,
            conditions: conditions
                .iter()
                .map(|(t, m)| (t.to_string(), m.to_string()))
                .collect(),
        }
    }

    /// A node carrying kubelet's Ready and `conditions` as
    /// (type, status, reason, message, transition offset, heartbeat offset).
    fn node(conditions: &[(&str, &str, &str, &str, i64, i64)]) -> Node {
        let mut cs = vec![json!({"type": "Ready", "status": "True", "reason": "KubeletReady"})];
        cs.extend(conditions.iter().map(|(t, s, r, m, tr, hb)| {
            json!({"type": t, "status": s, "reason": r, "message": m,
                "lastTransitionTime": at(*tr).to_rfc3339(), "lastHeartbeatTime": at(*hb).to_rfc3339()})
        }));
        serde_json::from_value(json!({"metadata": {"name": "n1", "resourceVersion": "7"},
            "status": {"conditions": cs}}))
        .unwrap()
    }

    fn patched(patch: &Option<Value>) -> Vec<(String, String, String)> {
        patch
            .as_ref()
            .map(|p| {
                p["status"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| {
                        let t = c["type"].as_str().unwrap().to_string();
                        match c["$patch"].as_str() {
                            Some(d) => (t, d.to_string(), String::new()),
                            None => (
                                t,
                                c["status"].as_str().unwrap().to_string(),
                                c["lastTransitionTime"].as_str().unwrap().to_string(),
                            ),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn types_are_prefixed_camel_case_and_alertnames_keep_theirs() {
        for (ctype, want) in [
            ("gpu_ecc_errors", "AlertManager_GpuEccErrors"),
            ("heartbeat_missed", "AlertManager_HeartbeatMissed"),
            (
                "CalicoTooManyInterfacesEarly",
                "AlertManager_CalicoTooManyInterfacesEarly",
            ),
            (
                "collector_failed:textfile",
                "AlertManager_CollectorFailedTextfile",
            ),
        ] {
            assert_eq!(condition_type("AlertManager_", ctype), want);
        }
        assert_eq!(condition_type("Hale", "disk_degraded"), "HaleDiskDegraded");
    }

    #[test]
    fn condition_table() {
        let t = |s: i64| at(s).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let firing = "AlertManager_GpuEccErrors";
        let hour = 3600;
        // (name, node conditions, report stale, raised, now, expected patch)
        type Case<'a> = (
            &'a str,
            Node,
            bool,
            Vec<(&'a str, &'a str)>,
            i64,
            Vec<(&'a str, &'a str, String)>,
        );
        let table: Vec<Case> = vec![
            (
                "raised: True with a fresh transition",
                node(&[]),
                false,
                vec![("gpu_ecc_errors", "[P2] ECC")],
                10,
                vec![(firing, "True", t(10))],
            ),
            (
                "unchanged and heartbeat fresh: nothing",
                node(&[(firing, "True", FIRING, "[P2] ECC", 0, 0)]),
                false,
                vec![("gpu_ecc_errors", "[P2] ECC")],
                299,
                vec![],
            ),
            (
                "unchanged, heartbeat due: rewritten, transition kept",
                node(&[(firing, "True", FIRING, "[P2] ECC", 0, 0)]),
                false,
                vec![("gpu_ecc_errors", "[P2] ECC")],
                300,
                vec![(firing, "True", t(0))],
            ),
            (
                "message changed: rewritten, transition kept",
                node(&[(firing, "True", FIRING, "[P2] ECC", 0, 0)]),
                false,
                vec![("gpu_ecc_errors", "[P1] ECC uncorrectable")],
                20,
                vec![(firing, "True", t(0))],
            ),
            (
                "cleared: False from now",
                node(&[(firing, "True", FIRING, "[P2] ECC", 0, 0)]),
                false,
                vec![],
                50,
                vec![(firing, "False", t(50))],
            ),
            (
                "lingering, heartbeat fresh: nothing",
                node(&[(firing, "False", NOT_FIRING, "[P2] ECC", 50, 95 * hour)]),
                false,
                vec![],
                50 + 95 * hour,
                vec![],
            ),
            (
                "lingering, heartbeat due: rewritten, transition kept",
                node(&[(firing, "False", NOT_FIRING, "[P2] ECC", 50, 50)]),
                false,
                vec![],
                50 + 95 * hour,
                vec![(firing, "False", t(50))],
            ),
            (
                "linger over: removed",
                node(&[(firing, "False", NOT_FIRING, "[P2] ECC", 50, 50)]),
                false,
                vec![],
                50 + 96 * hour,
                vec![(firing, "delete", String::new())],
            ),
            (
                "raised again while lingering: True from now",
                node(&[(firing, "False", NOT_FIRING, "[P2] ECC", 50, 50)]),
                false,
                vec![("gpu_ecc_errors", "[P2] ECC")],
                100,
                vec![(firing, "True", t(100))],
            ),
            (
                "stale: every owned condition Unknown, lingering ones too",
                node(&[
                    (firing, "True", FIRING, "[P2] ECC", 0, 0),
                    (
                        "AlertManager_SmartFailing",
                        "False",
                        NOT_FIRING,
                        "SMART",
                        5,
                        5,
                    ),
                ]),
                true,
                vec![("gpu_ecc_errors", "[P2] ECC")],
                60,
                vec![
                    (firing, "Unknown", t(60)),
                    ("AlertManager_SmartFailing", "Unknown", t(60)),
                ],
            ),
            (
                "seeing again: back to True",
                node(&[(firing, "Unknown", UNAVAILABLE, "[P2] ECC", 60, 60)]),
                false,
                vec![("gpu_ecc_errors", "[P2] ECC")],
                90,
                vec![(firing, "True", t(90))],
            ),
            (
                "others' conditions are never named",
                node(&[("KernelDeadlock", "True", "NPD", "deadlock", 0, 0)]),
                false,
                vec![],
                10,
                vec![],
            ),
        ];
        for (name, n, stale, raised, now, want) in table {
            let patch = status_patch(&n, &report(stale, &raised), &style(), at(now));
            let mut got = patched(&patch);
            got.sort();
            let mut want: Vec<(String, String, String)> = want
                .into_iter()
                .map(|(a, b, c)| (a.to_string(), b.to_string(), c))
                .collect();
            want.sort();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_written_condition_names_its_owner_reason_and_times() {
        let patch = status_patch(
            &node(&[]),
            &report(false, &[("SmartFailing", "[P6] SMART failing")]),
            &style(),
            at(0),
        )
        .unwrap();
        assert_eq!(
            patch["status"]["conditions"][0],
            json!({"type": "AlertManager_SmartFailing", "status": "True", "reason": FIRING,
                "message": "[P6] SMART failing", "lastHeartbeatTime": T0, "lastTransitionTime": T0})
        );
    }

    #[test]
    fn annotations_change_only_when_they_differ() {
        let keys = ["hale.dev/cordoned-by", "hale.dev/cordon-reason"];
        let bare: Node =
            serde_json::from_value(json!({"metadata": {"name": "n1", "resourceVersion": "3"}}))
                .unwrap();
        let p = annotations(&bare, &report(false, &[]), &keys).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"annotations": {SCORE: "75", HEALTH: "Healthy"}, "resourceVersion": "3"}})
        );
        let written: Node = serde_json::from_value(json!({"metadata": {"name": "n1",
            "annotations": {SCORE: "75", HEALTH: "Healthy"}}}))
        .unwrap();
        assert_eq!(annotations(&written, &report(false, &[]), &keys), None);
        let uncordoned: Node = serde_json::from_value(json!({"metadata": {"name": "n1",
            "annotations": {SCORE: "75", HEALTH: "Healthy", "hale.dev/cordoned-by": "hale",
                "hale.dev/cordon-reason": "score below cordonBelow 60"}}}))
        .unwrap();
        let p = annotations(&uncordoned, &report(false, &[]), &keys).unwrap();
        assert_eq!(
            p["metadata"]["annotations"],
            json!({"hale.dev/cordoned-by": null, "hale.dev/cordon-reason": null})
        );
        let mut cordoned = uncordoned.clone();
        cordoned.spec = Some(serde_json::from_value(json!({"unschedulable": true})).unwrap());
        assert_eq!(annotations(&cordoned, &report(false, &[]), &keys), None);
    }
}
