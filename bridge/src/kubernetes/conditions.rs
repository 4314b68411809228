//! hale's view on the Node, where `kubectl describe node` shows it: the node's alerts
//! as conditions exactly as Sciuro writes them, and hale's own view — score, health,
//! its condition types — as annotations. Everything here is pure — the Node as the
//! watch shows it, hale's report and `now` in, the patch to send (or nothing) out —
//! so the rules are table-tested, Sciuro's own test cases among them.
//!
//! A condition hale owns carries its prefix (`AlertManager_` by default) and the
//! alertname verbatim. Firing: `True`/`AlertIsFiring`, `[P<priority>] <summary>` of
//! the most urgent alert of that name (priority 9 without one); not firing:
//! `False`/`AlertIsNotFiring` with no message until it has been False for longer
//! than the linger, then removed; while hale cannot see the node's alerts, every
//! condition it owns is `Unknown`/`AlertsUnavailable` with no message and none is
//! added. `lastTransitionTime` moves only when the status does; `lastHeartbeatTime`
//! when anything is written, and at least every heartbeat interval, so a reader can
//! tell a statement hale still stands behind from one a stopped hale left behind.

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
/// Annotation: hale's raised condition types, comma-separated (absent when none):
/// its own view, the missed heartbeats and failed collectors among it.
pub const CONDITIONS: &str = "hale.dev/conditions";

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

/// The Node condition type of an alert: the prefix and the alertname as it is
/// (Sciuro's rule: `node_disk_full` → `AlertManager_node_disk_full`).
pub fn condition_type(prefix: &str, alertname: &str) -> String {
    format!("{prefix}{alertname}")
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
///
/// A condition hale owns but the report does not name turns False only when the
/// report is `complete` (hale holds the node's whole picture): until then it may be
/// an alert hale has not heard of yet, and it is left as it is.
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
    let mut wanted: BTreeMap<String, (&str, &str, &str)> = BTreeMap::new();
    if !report.stale {
        for n in &report.notices {
            wanted.insert(
                condition_type(&style.prefix, &n.alertname),
                ("True", FIRING, n.message.as_str()),
            );
        }
    }
    let linger = chrono::TimeDelta::from_std(style.linger).unwrap_or(chrono::TimeDelta::MAX);
    let mut delete = Vec::new();
    for (ctype, c) in &current {
        if wanted.contains_key(*ctype) {
            continue;
        }
        if report.stale {
            wanted.insert(ctype.to_string(), ("Unknown", UNAVAILABLE, ""));
        } else if !report.complete {
            continue;
        } else if c.status == "False"
            && c.last_transition_time
                .as_ref()
                .is_some_and(|t| now - chrono_time(t) > linger)
        {
            delete.push(json!({"$patch": "delete", "type": ctype}));
        } else {
            wanted.insert(ctype.to_string(), ("False", NOT_FIRING, ""));
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
    let raised = (!report.conditions.is_empty()).then(|| report.conditions.join(","));
    if get(CONDITIONS) != raised.as_deref() {
        patch.insert(CONDITIONS.into(), json!(raised));
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
    use crate::core::labels::Notice;

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

    fn notice(alertname: &str, priority: i64, message: &str) -> Notice {
        Notice {
            alertname: alertname.into(),
            priority,
            message: message.into(),
        }
    }

    fn report(stale: bool, firing: &[(&str, &str)]) -> Report {
        Report {
            id: "n1".into(),
            score: Some(75),
            health: Health::Healthy,
            stale,
            complete: true,
            notices: firing.iter().map(|(a, m)| notice(a, 2, m)).collect(),
            conditions: Vec::new(),
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
    fn types_are_the_prefix_and_the_alertname_as_it_is() {
        for (alertname, want) in [
            ("NodeOnFire", "AlertManager_NodeOnFire"),
            ("node_disk_full", "AlertManager_node_disk_full"),
            (
                "CalicoTooManyInterfacesEarly",
                "AlertManager_CalicoTooManyInterfacesEarly",
            ),
        ] {
            assert_eq!(condition_type("AlertManager_", alertname), want);
        }
    }

    #[test]
    fn condition_table() {
        let t = |s: i64| at(s).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let firing = "AlertManager_GpuEccUncorrectable";
        let ecc = "GpuEccUncorrectable";
        let hour = 3600;
        // (name, node conditions, report stale, firing, now, expected patch)
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
                vec![(ecc, "[P2] ECC")],
                10,
                vec![(firing, "True", t(10))],
            ),
            (
                "unchanged and heartbeat fresh: nothing",
                node(&[(firing, "True", FIRING, "[P2] ECC", 0, 0)]),
                false,
                vec![(ecc, "[P2] ECC")],
                299,
                vec![],
            ),
            (
                "unchanged, heartbeat due: rewritten, transition kept",
                node(&[(firing, "True", FIRING, "[P2] ECC", 0, 0)]),
                false,
                vec![(ecc, "[P2] ECC")],
                300,
                vec![(firing, "True", t(0))],
            ),
            (
                "message changed: rewritten, transition kept",
                node(&[(firing, "True", FIRING, "[P2] ECC", 0, 0)]),
                false,
                vec![(ecc, "[P1] ECC uncorrectable")],
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
                node(&[(firing, "False", NOT_FIRING, "", 50, 95 * hour)]),
                false,
                vec![],
                50 + 95 * hour,
                vec![],
            ),
            (
                "lingering, heartbeat due: rewritten, transition kept",
                node(&[(firing, "False", NOT_FIRING, "", 50, 50)]),
                false,
                vec![],
                50 + 95 * hour,
                vec![(firing, "False", t(50))],
            ),
            (
                "linger reached, not passed: kept, its heartbeat renewed",
                node(&[(firing, "False", NOT_FIRING, "", 50, 50 + 95 * hour)]),
                false,
                vec![],
                50 + 96 * hour,
                vec![(firing, "False", t(50))],
            ),
            (
                "linger passed: removed",
                node(&[(firing, "False", NOT_FIRING, "", 50, 50)]),
                false,
                vec![],
                51 + 96 * hour,
                vec![(firing, "delete", String::new())],
            ),
            (
                "raised again while lingering: True from now",
                node(&[(firing, "False", NOT_FIRING, "", 50, 50)]),
                false,
                vec![(ecc, "[P2] ECC")],
                100,
                vec![(firing, "True", t(100))],
            ),
            (
                "stale: every owned condition Unknown, lingering ones too, none added",
                node(&[
                    (firing, "True", FIRING, "[P2] ECC", 0, 0),
                    ("AlertManager_SmartFailing", "False", NOT_FIRING, "", 5, 5),
                ]),
                true,
                vec![(ecc, "[P2] ECC"), ("NewAlert", "[P9]")],
                60,
                vec![
                    (firing, "Unknown", t(60)),
                    ("AlertManager_SmartFailing", "Unknown", t(60)),
                ],
            ),
            (
                "seeing again: back to True",
                node(&[(firing, "Unknown", UNAVAILABLE, "", 60, 60)]),
                false,
                vec![(ecc, "[P2] ECC")],
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
    fn an_incomplete_picture_turns_nothing_false() {
        let n = node(&[("AlertManager_NodeOnFire", "True", FIRING, "[P9] fire", 0, 0)]);
        let mut r = report(false, &[]);
        r.complete = false;
        assert_eq!(status_patch(&n, &r, &style(), at(3600)), None);
        r.complete = true;
        assert_eq!(
            patched(&status_patch(&n, &r, &style(), at(3600)))[0].1,
            "False"
        );
    }

    #[test]
    fn annotations_change_only_when_they_differ() {
        let keys = ["hale.dev/cordoned-by", "hale.dev/cordon-reason"];
        let bare: Node =
            serde_json::from_value(json!({"metadata": {"name": "n1", "resourceVersion": "3"}}))
                .unwrap();
        let mut raised = report(false, &[]);
        raised.conditions = vec!["heartbeat_missed".into(), "gpu_ecc_errors".into()];
        let p = annotations(&bare, &raised, &keys).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"annotations": {SCORE: "75", HEALTH: "Healthy",
                CONDITIONS: "heartbeat_missed,gpu_ecc_errors"}, "resourceVersion": "3"}})
        );
        let written: Node = serde_json::from_value(json!({"metadata": {"name": "n1",
            "annotations": {SCORE: "75", HEALTH: "Healthy", CONDITIONS: "gpu_ecc_errors"}}}))
        .unwrap();
        let p = annotations(&written, &report(false, &[]), &keys).unwrap();
        assert_eq!(
            p["metadata"]["annotations"],
            json!({CONDITIONS: null}),
            "none raised: the annotation goes"
        );
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

    /// Sciuro's own cases (`cloudflare/sciuro`, `internal/node/reconciler_test.go`),
    /// translated: the alerts through hale's label contract into a report (as
    /// `service::reports` builds it), the node and times as Sciuro's test has them,
    /// the linger 24 h as there.
    mod sciuro {
        use super::*;
        use crate::core::labels::{Alert, AlertState, Annotations, Labels, Text};
        use std::borrow::Cow;

        const OLD: &str = "2020-03-18T12:33:45Z";
        const REALLY_OLD: &str = "2020-03-17T12:33:45Z";
        const CURRENT: &str = "2020-03-18T13:17:58Z";
        const FIRE: &str = "Node has erupted into fire at 500C";
        const NOF: &str = "AlertManager_NodeOnFire";

        fn time(t: &str) -> DateTime<Utc> {
            t.parse().unwrap()
        }

        fn style() -> Style {
            Style {
                prefix: "AlertManager_".into(),
                linger: Duration::from_secs(24 * 3600),
                heartbeat: Duration::from_secs(300),
            }
        }

        /// An alert with `labels`, and `summary` as its summary annotation when given
        /// (else only a description, which Sciuro does not read).
        fn alert(
            labels: &[(&'static str, &'static str)],
            summary: Option<&'static str>,
        ) -> Alert<'static> {
            let mut l = Labels::default();
            for (k, v) in labels {
                l.insert(Cow::Borrowed(*k), Cow::Borrowed(*v));
            }
            Alert {
                labels: l,
                annotations: Annotations {
                    summary: summary.map(Text::new),
                    description: Some(Text::new("a description")),
                    message: None,
                },
                fingerprint: Cow::Borrowed("fp"),
                starts_at: None,
                ends_at: None,
                state: AlertState::Active,
            }
        }

        fn report_of(alerts: &[Alert<'static>], stale: bool) -> Report {
            let notices: Vec<Notice> = alerts.iter().filter_map(Alert::notice).collect();
            Report {
                id: "node1".into(),
                score: None,
                health: Health::Unknown,
                stale,
                complete: true,
                notices: crate::orchestrator::most_urgent(notices),
                conditions: Vec::new(),
            }
        }

        /// A node: Ready (no times) and `conditions` as (type, status, reason,
        /// message, transition, heartbeat).
        fn node_of(conditions: &[(&str, &str, &str, &str, &str, &str)]) -> Node {
            let mut cs = vec![json!({"type": "Ready", "status": "True"})];
            cs.extend(conditions.iter().map(|(t, s, r, m, tr, hb)| {
                json!({"type": t, "status": s, "reason": r, "message": m,
                    "lastTransitionTime": tr, "lastHeartbeatTime": hb})
            }));
            serde_json::from_value(json!({"metadata": {"name": "node1"},
                "status": {"conditions": cs}}))
            .unwrap()
        }

        /// The node's conditions after the patch, as Sciuro's expected list has them.
        fn after(n: &Node, patch: Option<Value>) -> Vec<Value> {
            let mut cs: Vec<Value> = serde_json::to_value(n).unwrap()["status"]["conditions"]
                .as_array()
                .unwrap()
                .clone();
            for c in patch.map_or(Vec::new(), |p| {
                p["status"]["conditions"].as_array().unwrap().clone()
            }) {
                let t = c["type"].clone();
                let at = cs.iter().position(|x| x["type"] == t);
                match (c["$patch"].as_str(), at) {
                    (Some("delete"), Some(i)) => {
                        cs.remove(i);
                    }
                    (_, Some(i)) => cs[i] = c,
                    (_, None) => cs.push(c),
                }
            }
            cs
        }

        fn cond(t: &str, s: &str, r: &str, m: &str, tr: &str, hb: &str) -> Value {
            json!({"type": t, "status": s, "reason": r, "message": m,
                "lastTransitionTime": tr, "lastHeartbeatTime": hb})
        }

        fn ready() -> Value {
            json!({"type": "Ready", "status": "True"})
        }

        #[test]
        fn reconciler_cases() {
            let nof = |p: Option<&'static str>| {
                let mut l = vec![("alertname", "NodeOnFire"), ("node", "node1")];
                if let Some(p) = p {
                    l.push(("priority", p));
                }
                l
            };
            // (case, node, alerts, stale, now, expected conditions)
            type Case = (
                &'static str,
                Node,
                Vec<Alert<'static>>,
                bool,
                &'static str,
                Vec<Value>,
            );
            let cases: Vec<Case> = vec![
                (
                    "1 update node / 3 single add (no priority)",
                    node_of(&[]),
                    vec![alert(&nof(None), Some(FIRE))],
                    false,
                    CURRENT,
                    vec![
                        ready(),
                        cond(
                            NOF,
                            "True",
                            FIRING,
                            &format!("[P9] {FIRE}"),
                            CURRENT,
                            CURRENT,
                        ),
                    ],
                ),
                (
                    "2 no update",
                    node_of(&[(NOF, "True", FIRING, &format!("[P3] {FIRE}"), OLD, OLD)]),
                    vec![alert(&nof(Some("3")), Some(FIRE))],
                    false,
                    OLD,
                    vec![
                        ready(),
                        cond(NOF, "True", FIRING, &format!("[P3] {FIRE}"), OLD, OLD),
                    ],
                ),
                (
                    "4 single add (with priority)",
                    node_of(&[]),
                    vec![alert(&nof(Some("5")), Some(FIRE))],
                    false,
                    CURRENT,
                    vec![
                        ready(),
                        cond(
                            NOF,
                            "True",
                            FIRING,
                            &format!("[P5] {FIRE}"),
                            CURRENT,
                            CURRENT,
                        ),
                    ],
                ),
                (
                    "5 multiple alerts with the same name: the most urgent",
                    node_of(&[]),
                    vec![
                        alert(&nof(Some("5")), Some(FIRE)),
                        alert(&nof(Some("6")), Some(FIRE)),
                    ],
                    false,
                    CURRENT,
                    vec![
                        ready(),
                        cond(
                            NOF,
                            "True",
                            FIRING,
                            &format!("[P5] {FIRE}"),
                            CURRENT,
                            CURRENT,
                        ),
                    ],
                ),
                (
                    "6 multiple alerts with the same name, reversed",
                    node_of(&[]),
                    vec![
                        alert(&nof(Some("6")), Some(FIRE)),
                        alert(&nof(Some("5")), Some(FIRE)),
                    ],
                    false,
                    CURRENT,
                    vec![
                        ready(),
                        cond(
                            NOF,
                            "True",
                            FIRING,
                            &format!("[P5] {FIRE}"),
                            CURRENT,
                            CURRENT,
                        ),
                    ],
                ),
                (
                    "7 malformed priority: refused (Sciuro fails the node; hale leaves the alert off)",
                    node_of(&[]),
                    vec![alert(&nof(Some("blah")), Some(FIRE))],
                    false,
                    CURRENT,
                    vec![ready()],
                ),
                (
                    "8 no alertname: refused",
                    node_of(&[]),
                    vec![alert(&[("", "othervalue"), ("node", "node1")], Some(FIRE))],
                    false,
                    CURRENT,
                    vec![ready()],
                ),
                (
                    "9 missing summary annotation: the priority alone",
                    node_of(&[]),
                    vec![alert(&nof(None), None)],
                    false,
                    CURRENT,
                    vec![ready(), cond(NOF, "True", FIRING, "[P9]", CURRENT, CURRENT)],
                ),
                (
                    "10 alerts unavailable, no condition of its own: unchanged",
                    node_of(&[]),
                    vec![],
                    true,
                    CURRENT,
                    vec![ready()],
                ),
                (
                    "11 alerts unavailable: Unknown, message emptied",
                    node_of(&[(NOF, "True", FIRING, FIRE, OLD, OLD)]),
                    vec![],
                    true,
                    CURRENT,
                    vec![
                        ready(),
                        cond(NOF, "Unknown", UNAVAILABLE, "", CURRENT, CURRENT),
                    ],
                ),
                (
                    "12 heartbeat updated, transition kept",
                    node_of(&[(NOF, "True", FIRING, &format!("[P9] {FIRE}"), OLD, OLD)]),
                    vec![alert(&nof(None), Some(FIRE))],
                    false,
                    CURRENT,
                    vec![
                        ready(),
                        cond(NOF, "True", FIRING, &format!("[P9] {FIRE}"), OLD, CURRENT),
                    ],
                ),
                (
                    "13 priority updated, transition kept",
                    node_of(&[(NOF, "True", FIRING, &format!("[P8] {FIRE}"), OLD, OLD)]),
                    vec![alert(&nof(Some("7")), Some(FIRE))],
                    false,
                    CURRENT,
                    vec![
                        ready(),
                        cond(NOF, "True", FIRING, &format!("[P7] {FIRE}"), OLD, CURRENT),
                    ],
                ),
                (
                    "14 status to False, message emptied",
                    node_of(&[(NOF, "True", FIRING, FIRE, OLD, OLD)]),
                    vec![],
                    false,
                    CURRENT,
                    vec![
                        ready(),
                        cond(NOF, "False", NOT_FIRING, "", CURRENT, CURRENT),
                    ],
                ),
                (
                    "15 False remains before the linger",
                    node_of(&[(NOF, "False", NOT_FIRING, "", OLD, OLD)]),
                    vec![],
                    false,
                    CURRENT,
                    vec![ready(), cond(NOF, "False", NOT_FIRING, "", OLD, CURRENT)],
                ),
                (
                    "16 False deleted after the linger",
                    node_of(&[(NOF, "False", NOT_FIRING, "", REALLY_OLD, OLD)]),
                    vec![],
                    false,
                    CURRENT,
                    vec![ready()],
                ),
            ];
            for (case, n, alerts, stale, now, want) in cases {
                let patch = status_patch(&n, &report_of(&alerts, stale), &style(), time(now));
                let times = |v: Vec<Value>| -> Vec<Value> {
                    // Times compared as instants, whatever their spelling.
                    v.into_iter()
                        .map(|mut c| {
                            for k in ["lastTransitionTime", "lastHeartbeatTime"] {
                                if let Some(t) = c[k].as_str() {
                                    c[k] = json!(time(t).timestamp());
                                }
                            }
                            c
                        })
                        .collect()
                };
                assert_eq!(times(after(&n, patch)), times(want), "{case}");
            }
        }

        #[test]
        fn removal_leaves_others_where_they_are() {
            // Sciuro's cases 17 and 18: lingered conditions go from the head or the
            // middle; a kubelet condition with old times stays as it is.
            let n: Node = serde_json::from_value(json!({"metadata": {"name": "node1"},
            "status": {"conditions": [
                cond(NOF, "False", NOT_FIRING, "", REALLY_OLD, OLD),
                ready(),
                cond("DiskPressure", "False", "NoDiskPressure", "", REALLY_OLD, OLD),
            ]}}))
            .unwrap();
            let patch = status_patch(&n, &report_of(&[], false), &style(), time(CURRENT));
            assert_eq!(
                after(&n, patch),
                [
                    ready(),
                    cond(
                        "DiskPressure",
                        "False",
                        "NoDiskPressure",
                        "",
                        REALLY_OLD,
                        OLD
                    )
                ]
            );
        }
    }
}
