//! The trust core's hardening: what trust means in each mode, holds after a restart of
//! the pipeline, how a condition fed by several reasons is charged, bounded state,
//! observe mode meeting the guardrails, and the orchestrator's inventory as the fleet.

use super::*;

/// The watchdog as Alertmanager holds it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dog {
    Firing,
    Silenced,
    Absent,
}

/// What one input of the matrix carries: the watchdog as given and the heartbeats.
fn input(dog: Dog, heartbeats: &[&str], polling: bool) -> Vec<A> {
    let mut alerts: Vec<A> = heartbeats.iter().map(|n| heartbeat(n)).collect();
    match dog {
        Dog::Firing => alerts.push(watchdog()),
        // Silenced alerts are listed by the poll, never delivered by a webhook.
        Dog::Silenced if polling => alerts.push(watchdog().suppressed()),
        _ => {}
    }
    alerts
}

#[test]
fn trust_follows_the_polling_the_watchdog_requirement_and_the_watchdog() {
    use Dog::*;
    // (pollInterval, requireWatchdog, watchdog) →
    // (source up, a delivery at 45 s applied as trusted, n1 missed, stale by 60 s)
    type Row = (&'static str, bool, Dog, bool, bool, bool, bool);
    let table: &[Row] = &[
        ("30s", true, Firing, true, true, true, false),
        ("30s", true, Silenced, true, true, true, false),
        ("30s", true, Absent, false, false, false, true),
        ("30s", false, Firing, true, true, true, false),
        ("30s", false, Silenced, true, true, true, false),
        ("30s", false, Absent, true, true, true, false),
        ("0", true, Firing, true, true, true, false),
        ("0", true, Silenced, false, false, false, true),
        ("0", true, Absent, false, false, false, true),
        ("0", false, Firing, true, true, true, false),
        ("0", false, Silenced, true, true, true, false),
        ("0", false, Absent, true, true, true, false),
    ];
    for &(interval, require, dog, up, applied, missed, stale) in table {
        let case = format!("pollInterval {interval}, requireWatchdog {require}, watchdog {dog:?}");
        let polling = interval != "0";
        let mut s = script(&format!(
            "alertmanager: {{ pollInterval: {interval}, requireWatchdog: {require}, staleAfter: 30s }}\n\
             nodeHealth: {{ reportIntervalSeconds: 1 }}"
        ));
        let mut trusted_at_45 = None;
        for t in (0..=60).step_by(5) {
            // n1's heartbeat stops after the first input; n2 goes on reporting.
            let beats: &[&str] = if t == 0 { &["n1", "n2"] } else { &["n2"] };
            let alerts = input(dog, beats, polling);
            s.at(t);
            if polling {
                s.poll(&alerts);
            } else {
                s.webhook(&alerts);
            }
            if t == 45 {
                trusted_at_45 = Some(s.last.trusted);
            }
            if !polling {
                // Without polls, the service's tick is what notices time passing.
                s.tick();
            }
            if t == 10 {
                assert_eq!(s.fleet.trust.source_up, up, "source up: {case}");
            }
        }
        assert_eq!(trusted_at_45, Some(applied), "applied as trusted: {case}");
        assert_eq!(
            s.node("n1").conditions.contains_key(HEARTBEAT_MISSED),
            missed,
            "n1 missed: {case}"
        );
        assert!(
            !s.node("n2").conditions.contains_key(HEARTBEAT_MISSED),
            "n2 reports: {case}"
        );
        assert_eq!(s.fleet.trust.stale, stale, "stale: {case}");
    }
}

/// A poll answered by an Alertmanager that started `started` seconds after t0.
fn poll_from(s: &mut Script, at: i64, started: i64, alerts: &[A]) {
    let now = t0() + TimeDelta::seconds(at);
    s.now = now;
    let alerts: Vec<Alert> = alerts.iter().map(|a| a.0.clone()).collect();
    let answer = PollAnswer {
        started: Some(t0() + TimeDelta::seconds(started)),
        ..PollAnswer::of(&alerts, now)
    };
    let out = s.fleet.poll_answer(&s.cfg, now, &answer);
    s.record(out);
}

/// NVLink errors on `node`'s GPUs.
fn nvlink_errors(node: &str) -> A {
    alert("GpuNvlinkErrors")
        .on(node)
        .condition("gpu_nvlink", "GpuNvlinkErrors")
}

/// In an Alertmanager HA cluster every peer notifies, each from its own picture:
/// a peer that flushed before a resolution reached it sends "firing" after
/// another sent "resolved". A delivery of an episode Prometheus resolved (its
/// fingerprint and `startsAt`) raises nothing for an hour; a new episode, or a
/// poll listing it, does. And a late resolution of an older episode ends
/// nothing of the one firing now.
#[test]
fn a_late_notification_of_an_ended_episode_changes_nothing() {
    let mut s = script("");
    let start = t0();
    let nvlink = || nvlink_errors("n2");
    s.at(0).poll(&[
        watchdog_sent(0),
        heartbeat("n2"),
        nvlink().starts(start).expires(240),
    ]);
    assert!(s.node("n2").conditions.contains_key("gpu_nvlink"));
    // Prometheus resolves it: one peer says so.
    s.at(60).webhook(&[
        watchdog_sent(30),
        nvlink().starts(start).resolved().expires(58),
    ]);
    assert!(!s.node("n2").conditions.contains_key("gpu_nvlink"));
    s.took();
    // Another peer's notification, flushed before the resolution reached it.
    s.at(66)
        .webhook(&[watchdog_sent(30), nvlink().starts(start)]);
    assert!(!s.node("n2").conditions.contains_key("gpu_nvlink"));
    assert!(s.took().is_empty(), "no event");
    // Through a restart of hale too: the memory is the node's record.
    let kept: Node = serde_json::from_str(&serde_json::to_string(s.node("n2")).unwrap()).unwrap();
    assert_eq!(kept.ended, s.node("n2").ended);
    // The alert fires again: a new episode, raised.
    let again = start + TimeDelta::seconds(100);
    s.at(110).poll(&[
        watchdog_sent(110),
        heartbeat("n2"),
        nvlink().starts(again).expires(350),
    ]);
    assert!(s.node("n2").conditions.contains_key("gpu_nvlink"));
    // A late resolution of the first episode ends nothing of the second.
    s.took();
    s.at(120).webhook(&[
        watchdog_sent(110),
        nvlink().starts(start).resolved().expires(58),
    ]);
    assert!(s.node("n2").conditions.contains_key("gpu_nvlink"));
    assert!(s.took().is_empty());
    // Its own resolution does.
    s.at(130).webhook(&[
        watchdog_sent(120),
        nvlink().starts(again).resolved().expires(128),
    ]);
    assert!(!s.node("n2").conditions.contains_key("gpu_nvlink"));

    // A poll that finds the alert gone before its expiry ends it first; the
    // late "firing" after it raises nothing either.
    let third = start + TimeDelta::seconds(200);
    s.at(210).poll(&[
        watchdog_sent(210),
        heartbeat("n2"),
        nvlink().starts(third).expires(450),
    ]);
    assert!(s.node("n2").conditions.contains_key("gpu_nvlink"));
    s.at(240).poll(&[watchdog_sent(240), heartbeat("n2")]);
    assert!(!s.node("n2").conditions.contains_key("gpu_nvlink"));
    s.took();
    s.at(250)
        .webhook(&[watchdog_sent(240), nvlink().starts(third)]);
    assert!(!s.node("n2").conditions.contains_key("gpu_nvlink"));
    assert!(s.took().is_empty());
    // A poll is the whole picture: one that lists the episode raises it, and
    // the memory of its end is dropped.
    s.at(270).poll(&[
        watchdog_sent(270),
        heartbeat("n2"),
        nvlink().starts(third).expires(500),
    ]);
    assert!(s.node("n2").conditions.contains_key("gpu_nvlink"));
    assert!(s.node("n2").ended.is_empty());
    s.at(300).webhook(&[
        watchdog_sent(270),
        nvlink().starts(third).resolved().expires(290),
    ]);
    assert!(!s.node("n2").conditions.contains_key("gpu_nvlink"));
    assert_eq!(s.node("n2").ended.len(), 1);
    // An hour on, the memory is spent: the same firing is taken.
    s.at(300 + 3601)
        .webhook(&[watchdog_sent(3900), nvlink().starts(third)]);
    assert!(s.node("n2").conditions.contains_key("gpu_nvlink"));
}

/// An alert a condition keeps no source for (more than 64 feed it) is not over
/// because its source went: only an alert gone from the answer is.
#[test]
fn a_source_left_out_by_the_cap_is_not_an_ended_episode() {
    let mut s = script("");
    let link = |i: usize| {
        alert(&format!("Link{i:02}"))
            .on("n3")
            .condition("gpu_nvlink", "GpuNvlinkErrors")
            .starts(t0())
            .expires(240)
    };
    let mut alerts: Vec<A> = (0..64).map(link).collect();
    alerts.extend([watchdog_sent(0), heartbeat("n3")]);
    s.at(0).poll(&alerts);
    assert_eq!(s.node("n3").conditions["gpu_nvlink"].sources.len(), 64);
    // A critical one comes: the cap keeps it and leaves a warning out.
    alerts.push(link(64).critical());
    s.at(30).poll(&alerts);
    assert_eq!(s.node("n3").conditions["gpu_nvlink"].sources.len(), 64);
    assert!(s.node("n3").ended.is_empty(), "{:?}", s.node("n3").ended);
}

/// An alert that expired (Prometheus stopped sending it) did not end: a
/// Prometheus restarted within its outage tolerance sends the same episode again
/// (its `for:` state restored, the same `startsAt`), and it is taken.
#[test]
fn an_expired_episode_sent_again_is_taken() {
    let mut s = script("alertmanager: { pollInterval: 0 }");
    let start = t0();
    let nvlink = || nvlink_errors("n2");
    s.at(0).webhook(&[watchdog(), nvlink().starts(start)]);
    // Notified resolved at its expiry: an expiry, as far as anyone can tell.
    s.at(300)
        .webhook(&[watchdog(), nvlink().starts(start).resolved().expires(240)]);
    assert!(s.node("n2").ended.is_empty(), "not remembered as ended");
    s.at(400).webhook(&[watchdog(), nvlink().starts(start)]);
    assert!(s.node("n2").conditions.contains_key("gpu_nvlink"));
}

/// A silenced or inhibited alert that reads live where that cannot be trusted
/// to mean its mute ended stays muted: in the polls of a hold (a restarted
/// Alertmanager's inhibiting alerts come back in any order) and in a delivery
/// while polling (a peer's notification may be older than the mute). The first
/// poll that can be trusted with it lifts it.
#[test]
fn a_mute_is_lifted_only_by_a_poll_outside_a_hold() {
    let mut s = script("");
    let fatal = || {
        alert("FatalMachineCheck")
            .on("n6")
            .condition("machine_check_errors", "FatalMachineCheck")
            .critical()
    };
    let all = |sent: i64, live: bool| {
        let mut alerts = vec![watchdog_sent(sent), heartbeat("n6")];
        if live {
            alerts.push(fatal());
        } else {
            alerts.extend([alert("NodeMaintenance").on("n6"), fatal().suppressed()]);
        }
        alerts
    };
    poll_from(&mut s, 0, -86_400, &all(0, false));
    poll_from(&mut s, 30, -86_400, &all(0, false));
    let muted = |s: &Script| s.node("n6").conditions["machine_check_errors"].suppressed();
    assert!(muted(&s));
    let score = s.score("n6");
    s.took();
    // Alertmanager restarts: Prometheus re-sends the machine check before the
    // maintenance alert that inhibits it.
    poll_from(&mut s, 105, 100, &all(60, true));
    assert!(s.fleet.trust.holding(s.now));
    assert!(muted(&s), "still muted through the hold");
    assert_eq!(s.score("n6"), score);
    assert_eq!(s.took(), Vec::<String>::new(), "nothing changes");
    // The inhibitor back, then the hold over with the alert still live: muted,
    // then lifted by the first poll after the hold.
    poll_from(&mut s, 135, 100, &all(90, false));
    assert!(muted(&s));
    poll_from(&mut s, 100 + 20 * 60 + 30, 100, &all(1300, true));
    assert!(!s.fleet.trust.holding(s.now));
    assert!(!muted(&s), "a poll outside a hold lifts it");

    // A delivery, polling on: a live notification of an alert the last poll
    // listed as silenced does not lift its silence; the next poll does.
    let mut s = script("");
    let smart = || smart_failing("n5");
    s.at(0)
        .poll(&[watchdog(), heartbeat("n5"), smart().suppressed()]);
    let score = s.score("n5");
    s.took();
    s.at(10).webhook(&[watchdog(), smart()]);
    assert!(s.node("n5").conditions["disk_degraded"].suppressed());
    assert_eq!(s.score("n5"), score);
    assert!(s.took().is_empty());
    s.at(30).poll(&[watchdog(), heartbeat("n5"), smart()]);
    assert!(!s.node("n5").conditions["disk_degraded"].suppressed());
    assert!(s.score("n5") < score);
}

#[test]
fn an_alertmanager_restart_holds_every_absence_for_hold_after_restart() {
    let mut s = script("");
    let all = |sent: i64| {
        vec![
            watchdog_sent(sent),
            heartbeat("n1"),
            edac("n1").expires(sent + 240),
            smart_failing("n2").expires(sent + 240),
        ]
    };
    poll_from(&mut s, 0, -86_400, &all(0));
    poll_from(&mut s, 30, -86_400, &all(0));
    s.took();
    // Alertmanager restarts at 100 s. Its first answers hold only what Prometheus
    // has re-sent so far; both alerts were due to expire at 240 s, so their absence
    // would read as a resolution.
    poll_from(&mut s, 105, 100, &[watchdog_sent(60), heartbeat("n1")]);
    assert!(s.fleet.trust.holding(s.now));
    assert!(
        s.last
            .held
            .as_deref()
            .is_some_and(|h| h.contains("restarted"))
    );
    assert!(s.node("n1").conditions.contains_key("memory_errors"));
    assert!(s.node("n2").conditions.contains_key("disk_degraded"));
    assert_eq!(s.took(), Vec::<String>::new(), "nothing ends");
    // Prometheus re-sends EDAC; SMART stays away (it was resolved meanwhile). A
    // later poll from the same Alertmanager starts no new hold.
    poll_from(
        &mut s,
        130,
        100,
        &[watchdog_sent(120), heartbeat("n1"), edac("n1").expires(360)],
    );
    assert!(s.last.held.is_none());
    poll_from(
        &mut s,
        100 + 1199,
        100,
        &[
            watchdog_sent(1260),
            heartbeat("n1"),
            edac("n1").expires(1500),
        ],
    );
    assert!(s.node("n2").conditions.contains_key("disk_degraded"));
    // The hold runs out 20 minutes after Alertmanager started: SMART ends now.
    poll_from(
        &mut s,
        100 + 1200,
        100,
        &[
            watchdog_sent(1260),
            heartbeat("n1"),
            edac("n1").expires(1500),
        ],
    );
    assert!(!s.node("n2").conditions.contains_key("disk_degraded"));
    assert!(s.node("n1").conditions.contains_key("memory_errors"));
    assert_eq!(s.took(), ["n2 CONDITION_CLEARED", "n2 SCORE_CHANGED"]);

    // Asked before Prometheus re-sent anything, a restarted Alertmanager answers
    // without the watchdog too: the hold is said to be for the restart.
    let mut s = script("");
    poll_from(&mut s, 0, -86_400, &all(0));
    poll_from(&mut s, 30, -86_400, &all(0));
    poll_from(&mut s, 101, 100, &[]);
    assert!(s.fleet.trust.holding(s.now));
    let why = s.fleet.trust.hold_reason.clone().unwrap_or_default();
    assert!(why.contains("Alertmanager restarted"), "{why}");
}

/// A watchdog once posted by hand with a long expiry, then lost with an
/// Alertmanager restart: Prometheus's own, expiring sooner, is what moves from
/// then on. Measured against the hand-posted expiry, no move would count for an
/// hour, and no alert that left would end (outside pass H).
#[test]
fn after_an_alertmanager_restart_the_watchdog_moves_from_what_the_new_one_shows() {
    let mut s = script("alertmanager: { holdAfterRestart: 60s }");
    poll_from(
        &mut s,
        0,
        -86_400,
        &[watchdog().expires(3600), heartbeat("n1")],
    );
    poll_from(
        &mut s,
        30,
        -86_400,
        &[watchdog().expires(3600), heartbeat("n1")],
    );
    // Alertmanager restarts at 100 s, its alerts gone; Prometheus re-sends.
    poll_from(&mut s, 110, 100, &[watchdog_sent(105), heartbeat("n1")]);
    let mut sent = 105;
    // Past the hold, an alert raised and left: two moves of the watchdog after
    // it left, it ends.
    for at in [170, 200] {
        sent += 30;
        poll_from(
            &mut s,
            at,
            100,
            &[
                watchdog_sent(sent),
                heartbeat("n1"),
                edac("n1").expires(at + 60),
            ],
        );
    }
    assert!(s.node("n1").conditions.contains_key("memory_errors"));
    s.took();
    for at in [270, 300, 330] {
        sent += 30;
        poll_from(&mut s, at, 100, &[watchdog_sent(sent), heartbeat("n1")]);
    }
    assert!(!s.node("n1").conditions.contains_key("memory_errors"));
    assert_eq!(s.took(), ["n1 CONDITION_CLEARED", "n1 SCORE_CHANGED"]);
}

/// Heartbeats lost with an Alertmanager restart (its alerts gone until Prometheus
/// sends them again) get a full window from the restart to come back, as they do
/// when trust returns — with or without a watchdog.
#[test]
fn heartbeats_get_a_full_window_after_an_alertmanager_restart() {
    for yaml in ["", "alertmanager: { requireWatchdog: false }"] {
        let mut s = script(yaml);
        let beat = |sent| vec![watchdog_sent(sent), heartbeat("n1")];
        poll_from(&mut s, 0, -86_400, &beat(0));
        poll_from(&mut s, 30, -86_400, &beat(0));
        // Restarted at 100 s; neither the heartbeat nor the watchdog sent again yet
        // (without a watchdog, the answer is trusted all the same).
        let watchdog = if yaml.is_empty() {
            beat(60)[..1].to_vec()
        } else {
            vec![]
        };
        poll_from(&mut s, 105, 100, &watchdog);
        assert!(s.fleet.trust.holding(s.now), "{yaml}");
        // 90 s after the last heartbeat, not 90 s after the restart: not missed.
        poll_from(&mut s, 150, 100, &watchdog);
        s.at(160).tick();
        assert!(
            !s.node("n1").conditions.contains_key(HEARTBEAT_MISSED),
            "missed within its window after the restart: {yaml:?}"
        );
        // A whole window after the restart, still silent: missed.
        poll_from(&mut s, 196, 100, &watchdog);
        s.at(197).tick();
        assert!(
            s.node("n1").conditions.contains_key(HEARTBEAT_MISSED),
            "{yaml:?}"
        );
    }
}

/// A poll whose Alertmanager's status could not be read (`started` unknown).
fn poll_unread(s: &mut Script, at: i64, alerts: &[A]) {
    let now = t0() + TimeDelta::seconds(at);
    s.now = now;
    let alerts: Vec<Alert> = alerts.iter().map(|a| a.0.clone()).collect();
    let answer = PollAnswer {
        status_unread: true,
        ..PollAnswer::of(&alerts, now)
    };
    let out = s.fleet.poll_answer(&s.cfg, now, &answer);
    s.record(out);
}

/// A status that stays unreadable renews its hold at every poll; the heartbeat
/// window it gives starts once, where the hold began: a node that dies meanwhile
/// is still missed.
#[test]
fn a_node_silent_while_the_status_stays_unreadable_is_missed() {
    let mut s = script("");
    poll_from(
        &mut s,
        0,
        -86_400,
        &[watchdog_sent(0), heartbeat("n1"), heartbeat("n2")],
    );
    for at in (30..=300).step_by(30) {
        poll_unread(&mut s, at, &[watchdog_sent(at), heartbeat("n2")]);
    }
    assert!(s.fleet.trust.holding(s.now));
    assert!(
        s.node("n1").conditions.contains_key(HEARTBEAT_MISSED),
        "n1 silent since 0 s, the hold renewed since 30 s"
    );
    assert!(!s.node("n2").conditions.contains_key(HEARTBEAT_MISSED));
}

#[test]
fn an_unreadable_status_holds_absences_as_a_restart_would() {
    let mut s = script("");
    let all = |sent: i64| {
        vec![
            watchdog_sent(sent),
            heartbeat("n1"),
            smart_failing("n2").expires(sent + 240),
        ]
    };
    poll_from(&mut s, 0, -86_400, &all(0));
    s.took();
    // The status fails (a proxy that lets only the alerts through): the answer that
    // misses SMART may be a restarted, emptied Alertmanager's.
    poll_unread(&mut s, 300, &[watchdog_sent(300), heartbeat("n1")]);
    assert!(s.fleet.trust.holding(s.now));
    assert!(
        s.last
            .held
            .as_deref()
            .is_some_and(|h| h.contains("/api/v2/status")),
        "{:?}",
        s.last.held
    );
    assert!(s.node("n2").conditions.contains_key("disk_degraded"));
    // Still unread a poll later: held on, said once.
    poll_unread(&mut s, 330, &[watchdog_sent(330), heartbeat("n1")]);
    assert!(s.last.held.is_none());
    assert_eq!(s.took(), Vec::<String>::new(), "nothing ends while unread");
    // Read again, the same Alertmanager (no restart meanwhile): the hold, which
    // ran staleAfter (90 s) past the last unread poll, lapses, and SMART ends.
    poll_from(&mut s, 360, -86_400, &[watchdog_sent(360), heartbeat("n1")]);
    assert!(s.node("n2").conditions.contains_key("disk_degraded"));
    poll_from(
        &mut s,
        330 + 90,
        -86_400,
        &[watchdog_sent(420), heartbeat("n1")],
    );
    assert!(!s.node("n2").conditions.contains_key("disk_degraded"));
}

#[test]
fn a_resolution_prometheus_sent_ends_even_during_a_hold() {
    let mut s = script("");
    poll_from(
        &mut s,
        0,
        -60,
        &[watchdog_sent(0), heartbeat("n1"), edac("n1").expires(240)],
    );
    poll_from(&mut s, 30, 20, &[watchdog_sent(0), heartbeat("n1")]);
    assert!(s.fleet.trust.holding(s.now));
    assert!(s.node("n1").conditions.contains_key("memory_errors"));
    // Resolved by Prometheus at 40 s, long before its expiry: that is no absence.
    s.at(42).webhook(&[edac("n1").resolved().expires(40)]);
    assert!(!s.node("n1").conditions.contains_key("memory_errors"));
}

#[test]
fn a_watchdog_not_resent_for_half_its_validity_holds_absences() {
    let mut s = script("alertmanager: { staleAfter: 1h }");
    // Prometheus re-sends every 60 s with a 240 s validity...
    for t in (0..=120).step_by(30) {
        let sent = t / 60 * 60;
        s.at(t).poll(&[
            watchdog_sent(sent),
            heartbeat("n1"),
            edac("n1").expires(sent + 240),
        ]);
    }
    assert!(
        !s.fleet.trust.holding(s.now),
        "regular re-sends hold nothing"
    );
    // ...then stops after its send at 120 s. At 270 s the same expiry has been
    // shown for 150 s, more than half of 240 s.
    for t in [150, 180, 210, 240] {
        s.at(t)
            .poll(&[watchdog_sent(120), heartbeat("n1"), edac("n1").expires(360)]);
    }
    assert!(!s.fleet.trust.holding(s.now));
    s.at(270)
        .poll(&[watchdog_sent(120), heartbeat("n1"), edac("n1").expires(360)]);
    assert!(s.fleet.trust.holding(s.now));
    assert!(
        s.last
            .held
            .as_deref()
            .is_some_and(|h| h.contains("not been re-sent"))
    );
    // Prometheus is back: the watchdog at once, EDAC (a `for:` alert) not yet; its
    // absence is held however often the watchdog moves.
    s.took();
    for t in [300, 330, 360, 420, 480, 540] {
        s.at(t).poll(&[watchdog_sent(t), heartbeat("n1")]);
    }
    assert!(s.node("n1").conditions.contains_key("memory_errors"));
    assert_eq!(s.took(), Vec::<String>::new());
    s.at(540)
        .poll(&[watchdog_sent(540), heartbeat("n1"), edac("n1").expires(780)]);
    assert!(
        s.node("n1").conditions["memory_errors"]
            .sources
            .values()
            .all(|src| src.vanished.is_none()),
        "back before the hold ran out: nothing ended"
    );
}

#[test]
fn without_polling_a_hold_keeps_resolutions_until_it_lapses() {
    let mut s = script("alertmanager: { pollInterval: 0, staleAfter: 60s }");
    s.at(0).webhook(&[watchdog(), smart_failing("n1")]);
    s.at(90).tick();
    assert!(s.fleet.trust.stale);
    // The watchdog is delivered again: trust returns, and a hold with it.
    s.at(100).webhook(&[watchdog()]);
    assert!(s.fleet.trust.holding(s.now));
    // An expiry notified as a resolution cannot be told from a real one here.
    s.at(110)
        .webhook(&[watchdog(), smart_failing("n1").resolved()]);
    assert!(s.node("n1").conditions.contains_key("disk_degraded"));
    s.took();
    for t in (160..1300).step_by(50) {
        s.at(t).webhook(&[watchdog()]).tick();
    }
    assert!(s.node("n1").conditions.contains_key("disk_degraded"));
    s.at(1300).webhook(&[watchdog()]).tick();
    assert!(!s.node("n1").conditions.contains_key("disk_degraded"));
    assert_eq!(s.took(), ["n1 CONDITION_CLEARED", "n1 SCORE_CHANGED"]);
}

fn io_errors(node: &str) -> A {
    alert("IoErrors")
        .on(node)
        .condition("disk_degraded", "IoErrors")
        .summary("I/O errors on /dev/sda")
}

#[test]
fn a_condition_fed_by_several_reasons_is_charged_for_one_and_says_which() {
    let mut s = script("");
    let smart = smart_failing("n1").sticky();
    s.at(0).poll(&[watchdog(), heartbeat("n1"), smart.clone()]);
    assert_eq!(s.score("n1"), Some(60));
    s.took();
    // I/O errors join: recorded, and the condition is still charged for SMART
    // (critical, 40): one reason per condition, never the sum.
    s.at(30)
        .poll(&[watchdog(), heartbeat("n1"), smart, io_errors("n1")]);
    assert_eq!(s.took(), ["n1 CONDITION_UPDATED"]);
    let c = &s.node("n1").conditions["disk_degraded"];
    assert_eq!(c.reason, "SmartFailing");
    assert_eq!(
        c.message,
        "SMART health check failing on /dev/sda; I/O errors on /dev/sda"
    );
    assert_eq!(s.score("n1"), Some(60));
    // SMART's alert ends; the sticky condition stays charged for it, and says so.
    s.at(60)
        .poll(&[watchdog(), heartbeat("n1"), io_errors("n1")]);
    let c = &s.node("n1").conditions["disk_degraded"];
    assert_eq!(c.reason, "SmartFailing");
    assert_eq!(
        c.message,
        "SMART health check failing on /dev/sda; I/O errors on /dev/sda"
    );
    assert_eq!(s.score("n1"), Some(60));
    let updated = s
        .events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ConditionUpdated {
                reason,
                reasons,
                alerts,
                ..
            } => Some((reason.clone(), reasons.clone(), *alerts, e.message.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        updated,
        (
            "SmartFailing".into(),
            vec!["IoErrors".to_string()],
            1,
            "disk_degraded now fed by 1 alert(s), still charged for SmartFailing whose alert ended: \
             SMART health check failing on /dev/sda; I/O errors on /dev/sda"
                .to_string()
        )
    );
}

#[test]
fn between_reasons_of_one_severity_the_costlier_is_charged() {
    let read_only = alert("DeviceReadOnly")
        .on("n1")
        .condition("disk_degraded", "DeviceReadOnly")
        .critical()
        .summary("/ is read-only");
    // Equal by default (40 each): the first by name is charged.
    let mut s = script("");
    s.at(0).poll(&[
        watchdog(),
        heartbeat("n1"),
        smart_failing("n1"),
        read_only.clone(),
    ]);
    assert_eq!(
        s.node("n1").conditions["disk_degraded"].reason,
        "DeviceReadOnly"
    );
    // Priced apart, the costlier one is charged, and a costlier one joining later
    // moves the charge up (never down).
    let mut s = script("nodeHealth: { penalties: { DeviceReadOnly: 30 } }");
    s.at(0)
        .poll(&[watchdog(), heartbeat("n1"), read_only.clone()]);
    assert_eq!(s.score("n1"), Some(70));
    s.took();
    s.at(30)
        .poll(&[watchdog(), heartbeat("n1"), read_only, smart_failing("n1")]);
    assert_eq!(
        s.node("n1").conditions["disk_degraded"].reason,
        "SmartFailing"
    );
    assert_eq!(s.score("n1"), Some(60));
    assert_eq!(s.took(), ["n1 CONDITION_UPDATED", "n1 SCORE_CHANGED"]);
}

#[test]
fn resolved_alerts_and_blank_names_bring_in_no_node() {
    let mut s = script("");
    s.at(0)
        .webhook(&[watchdog(), smart_failing("ghost").resolved()]);
    assert!(!s.fleet.nodes.contains_key("ghost"));
    s.at(1).webhook(&[watchdog(), smart_failing("  ")]);
    assert!(s.fleet.nodes.is_empty());
    assert_eq!(s.last.unmatched, 1, "a blank node label names no node");
}

#[test]
fn with_an_orchestrator_alerts_for_unknown_nodes_are_unmatched() {
    let mut s = script("orchestrator: { kind: kubernetes }");
    s.at(0)
        .poll(&[watchdog(), heartbeat("stray"), smart_failing("stray")]);
    assert!(s.fleet.nodes.is_empty());
    assert_eq!(s.last.unmatched, 2);
    let mut s =
        script("orchestrator: { kind: kubernetes }\nnodeIdentity: { createFromAlerts: true }");
    s.at(0).poll(&[watchdog(), heartbeat("stray")]);
    assert!(s.fleet.nodes.contains_key("stray"));
}

#[test]
fn beyond_max_nodes_new_nodes_are_refused_and_counted() {
    let mut s = script("nodeIdentity: { maxNodes: 2 }");
    s.pool("inv", 1, "cpu");
    s.at(0)
        .poll(&[watchdog(), heartbeat("a"), heartbeat("b"), heartbeat("c")]);
    assert_eq!(s.fleet.nodes.len(), 2);
    assert!(s.fleet.nodes.contains_key("a"));
    assert_eq!(
        s.last.refused.iter().collect::<Vec<_>>(),
        ["b", "c"],
        "refused, not dropped silently"
    );
}

#[test]
fn nodes_known_only_from_alerts_retire_after_forget_after() {
    let mut s = script("alertmanager: { staleAfter: 30d }\nnodeIdentity: { forgetAfter: 7d }");
    s.pool("inv", 1, "cpu");
    let inv = "inv-0";
    let sticky = gpu_ecc_uncorrectable("sticky", "0");
    s.at(0).poll(&[
        watchdog(),
        heartbeat("gone"),
        heartbeat(inv),
        heartbeat("sticky"),
        sticky,
        heartbeat("cordoned"),
        heartbeat("back"),
        heartbeat("fenced"),
    ]);
    s.fleet.cordon(s.now, "cordoned", "maintenance").unwrap();
    // A machine a fence left off (its power-on failed), never heard from again:
    // counted toward fencing.maxPercent until it reports, so kept.
    s.fleet.nodes.get_mut("fenced").unwrap().policy.fence = Some(policy::Fence {
        sent: None,
        unreleased: false,
        found_off: false,
        step: policy::FenceStep::Fenced,
        since: s.now,
    });
    s.took();
    // `gated` scores 20, is gated on its second report, then goes silent: blind,
    // its gate stays, yet it changes nothing outside hale for a node no
    // orchestrator lists, and does not keep it.
    let low = |n: &str| {
        [
            heartbeat(n),
            smart_failing(n),
            alert("DeviceReadOnly")
                .on(n)
                .condition("disk_readonly", "DeviceReadOnly")
                .critical(),
        ]
    };
    s.at(30)
        .poll(&[&[watchdog(), heartbeat("back")][..], &low("gated")].concat());
    s.at(60)
        .poll(&[&[watchdog(), heartbeat("back")][..], &low("gated")].concat());
    assert!(s.node("gated").policy.gated, "gated below drainBelow");
    act(&mut s);
    s.took();
    for day in 1..=7 {
        s.at(day * DAY - 60).poll(&[watchdog(), heartbeat("back")]);
        s.at(day * DAY - 60 + 61).tick();
    }
    s.at(7 * DAY + 120).tick();
    let ids: Vec<&str> = s.fleet.nodes.keys().map(String::as_str).collect();
    assert_eq!(
        ids,
        ["back", "cordoned", "fenced", inv, "sticky"],
        "retired: known from alerts, named by none for 7 days, holding nothing"
    );
    let retired: Vec<(String, String)> = s
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::NodeDecommissioned { by } => Some((e.node_id.clone(), by.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        retired,
        [
            ("gone".to_string(), "retired".to_string()),
            ("gated".to_string(), "retired".to_string())
        ]
    );
    assert!(s.last.removed.contains(&"gone".to_string()) || !s.fleet.nodes.contains_key("gone"));
}

#[test]
fn nothing_retires_while_hale_is_blind() {
    let mut s = script("alertmanager: { staleAfter: 1h }\nnodeIdentity: { forgetAfter: 1d }");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(2 * DAY).poll(&[]);
    s.at(2 * DAY + 120).tick();
    assert!(
        s.fleet.nodes.contains_key("n1"),
        "an answer without the watchdog proves nothing"
    );
}

#[test]
fn condition_types_are_remembered_for_forget_after_and_at_most_64() {
    let mut s = script("nodeIdentity: { forgetAfter: 1d }\nalertmanager: { staleAfter: 30d }");
    // 70 one-off condition types raised and cleared on one node.
    for i in 0..70 {
        let t = i * 60;
        s.at(t).poll(&[
            watchdog(),
            heartbeat("n1"),
            alert(&format!("Oddity{i}")).on("n1"),
        ]);
        s.at(t + 30).poll(&[watchdog(), heartbeat("n1")]);
    }
    s.at(70 * 60 + 61).tick();
    let seen = &s.node("n1").seen_types;
    assert_eq!(seen.len(), MAX_SEEN_TYPES, "the oldest go first");
    assert!(seen.contains_key("Oddity69") && !seen.contains_key("Oddity0"));
    s.at(2 * DAY).poll(&[watchdog(), heartbeat("n1")]);
    s.at(2 * DAY + 61).tick();
    assert!(
        s.node("n1").seen_types.is_empty(),
        "cleared a day ago: forgotten"
    );
    // Sixty raised at once and cleared at once, then sixty others: 64 kept at
    // once, not only from the next sweep.
    for (round, name) in [(0, "Burst"), (1, "Other")] {
        let mut many: Vec<A> = (0..60)
            .map(|i| alert(&format!("{name}{i}")).on("n2"))
            .collect();
        many.extend([watchdog(), heartbeat("n2")]);
        s.at(3 * DAY + round * 60).poll(&many);
        assert_eq!(s.node("n2").conditions.len(), 60, "raised, each a series");
        s.at(3 * DAY + round * 60 + 30)
            .poll(&[watchdog(), heartbeat("n2")]);
    }
    assert_eq!(s.node("n2").seen_types.len(), MAX_SEEN_TYPES);
}

#[test]
fn a_node_holds_at_most_64_condition_types_the_most_telling() {
    let mut s = script("alertmanager: { staleAfter: 30d }");
    // A rule naming its condition from a label of many values: a hundred types
    // on one node, one of them critical, with a collector failing beside them.
    let mut many: Vec<A> = (0..100)
        .map(|i| alert(&format!("Path{i:03}")).on("n1"))
        .collect();
    many.push(alert("Zz").on("n1").critical());
    many.push(alert("Zy").on("n1").suppressed());
    many.extend([
        watchdog(),
        heartbeat("n1"),
        collector_failed("n1", "smartmon"),
    ]);
    let held = |s: &Script| -> BTreeSet<String> {
        s.node("n1")
            .conditions
            .keys()
            .filter(|c| c.as_str() != COLLECTOR_FAILED)
            .map(|c| c.to_string())
            .collect()
    };
    s.at(0).poll(&many);
    let first = held(&s);
    assert_eq!(first.len(), MAX_CONDITIONS);
    assert!(first.contains("Zz"), "the most severe is kept");
    assert!(
        !first.contains("Zy"),
        "a silenced one goes before a live one"
    );
    assert!(first.contains("Path000") && !first.contains("Path099"));
    assert!(s.node("n1").conditions.contains_key(COLLECTOR_FAILED));
    assert_eq!(s.last.crowded.get("n1"), Some(&38), "{:?}", s.last.crowded);
    assert_eq!(s.score("n1"), Some(0));
    // The same answer again changes nothing: those raised stay raised.
    s.took();
    s.at(30).poll(&many);
    assert_eq!(held(&s), first);
    assert!(s.took().is_empty());
    // A type more severe than those held pushes out the least severe one raised
    // (said: its alerts still fire), never a sticky one.
    let mut more = many.clone();
    more.push(alert("Aa").on("n1").critical());
    s.took();
    s.at(60).poll(&more);
    let mut second = first.clone();
    second.remove("Path062");
    second.insert("Aa".into());
    assert_eq!(held(&s), second);
    let evicted = s.recorded("CONDITION_CLEARED");
    assert_eq!(evicted.len(), 1);
    assert!(
        evicted[0]
            .message
            .contains("Path062 cleared, its alerts still firing")
    );
    // A delivery takes no new type no more severe than those held, and still
    // updates what it holds.
    s.at(90).webhook(&[
        watchdog(),
        alert("New").on("n1"),
        alert("Path001").on("n1").critical(),
    ]);
    assert_eq!(held(&s), second);
    assert_eq!(s.last.crowded.get("n1"), Some(&1));
    assert_eq!(
        s.node("n1").conditions["Path001"].severity,
        Severity::Critical
    );
    // Once the alerts end, room is made: a delivery's new type is taken.
    s.at(120)
        .poll(&[watchdog(), heartbeat("n1"), alert("Path005").on("n1")]);
    s.at(150).webhook(&[watchdog(), alert("New").on("n1")]);
    assert_eq!(held(&s), BTreeSet::from(["Path005".into(), "New".into()]));
    assert!(s.last.crowded.is_empty());
}

/// What a node holds whatever a poll says — its sticky conditions, and during a
/// hold those the poll leaves out — takes room too: new types cannot grow it
/// past 64 while an Alertmanager restart holds absences.
#[test]
fn held_and_sticky_conditions_count_toward_the_64() {
    let mut s = script("");
    let types = |name: &str, n: usize| -> Vec<A> {
        (0..n)
            .map(|i| alert(&format!("{name}{i:03}")).on("n1").expires(240))
            .collect()
    };
    let mut first = types("Old", 60);
    first.extend([watchdog_sent(0), heartbeat("n1")]);
    poll_from(&mut s, 0, -86_400, &first);
    assert_eq!(s.node("n1").conditions.len(), 60);
    // Alertmanager restarts: the 60 are absent and held; 30 new types come.
    let mut then = types("New", 30);
    then.extend([watchdog_sent(60), heartbeat("n1")]);
    poll_from(&mut s, 105, 100, &then);
    assert!(s.fleet.trust.holding(s.now));
    assert_eq!(s.node("n1").conditions.len(), MAX_CONDITIONS);
    assert_eq!(s.last.crowded.get("n1"), Some(&26));
}

#[test]
fn without_polling_alerts_no_delivery_confirms_are_dropped_after_forget_after() {
    let mut s = script(
        "alertmanager: { pollInterval: 0, staleAfter: 1h }\nnodeIdentity: { forgetAfter: 1d }",
    );
    s.at(0)
        .webhook(&[watchdog(), heartbeat("n1"), smart_failing("n1"), edac("n1")]);
    // EDAC is re-notified every hour; SMART's resolution was lost.
    for h in 1..=25 {
        s.at(h * 3600)
            .webhook(&[watchdog(), heartbeat("n1"), edac("n1")]);
    }
    s.at(25 * 3600 + 61).tick();
    let n1 = s.node("n1");
    assert!(!n1.conditions.contains_key("disk_degraded"));
    assert!(n1.conditions.contains_key("memory_errors"));
}

#[test]
fn restart_counts_are_forgotten_after_forget_after() {
    let mut s = script("nodeIdentity: { forgetAfter: 1d }\nalertmanager: { staleAfter: 30d }");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.fleet.ledger.moves.insert(
        "job/old".into(),
        policy::Moves {
            count: 2,
            last: Some(t0()),
        },
    );
    s.fleet.ledger.moves.insert(
        "job/legacy".into(),
        policy::Moves {
            count: 1,
            last: None,
        },
    );
    s.at(DAY + 61).poll(&[watchdog(), heartbeat("n1")]);
    assert!(!s.fleet.ledger.moves.contains_key("job/old"));
    assert!(s.last.moved.contains("job/old"), "written as forgotten");
    assert!(s.fleet.ledger.moves.contains_key("job/legacy"));
}

#[test]
fn observe_mode_records_the_halt_cordon_mode_would_meet() {
    // Two nodes: 20 % of 2 is none, so not even one may go.
    for (mode, want) in [
        ("observe", "POLICY_HALTED cordon maxUnavailablePercent"),
        ("cordon", "POLICY_HALTED cordon maxUnavailablePercent"),
    ] {
        let mut s = pool_script(mode);
        let ids = s.pool("g", 2, "gpu");
        s.at(0).report(&ids, &["g-0"], low);
        s.at(30).report(&ids, &["g-0"], low);
        assert_eq!(s.policy_events(), [format!("g-0 {want}")], "{mode}");
    }
    // Ten nodes: two may go in either mode, the third is halted in both.
    for mode in ["observe", "cordon"] {
        let mut s = pool_script(mode);
        let ids = s.pool("g", 10, "gpu");
        let sick = ["g-0", "g-1", "g-2"];
        s.at(0).report(&ids, &sick, low);
        s.at(30).report(&ids, &sick, low);
        let halted = s
            .events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::PolicyHalted { .. }))
            .count();
        assert_eq!(halted, 1, "{mode}: the third is halted");
    }
}

#[test]
fn the_backtest_names_each_halts_guardrail() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 2, "gpu");
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    let history: Vec<Event> = std::mem::take(&mut s.events);
    let candidate = pool_script("observe").cfg;
    let report = replay::backtest(&candidate, &s.fleet.nodes, &[], &history, None, s.now);
    assert_eq!(
        report.candidate.halted_by,
        [("maxUnavailablePercent".to_string(), 1)].into()
    );
    assert_eq!(report.recorded.halted_by, report.candidate.halted_by);
}

#[test]
fn a_node_gone_from_the_cluster_or_renamed_onto_a_new_machine_is_retired() {
    let mut s = script("orchestrator: { kind: kubernetes }");
    let mut a = shown("a", Status::Ready);
    a.uid = Some("uid-a1".into());
    let mut b = shown("b", Status::Ready);
    b.uid = Some("uid-b".into());
    let out = s.fleet.observe(&s.cfg, s.now, &[a.clone(), b.clone()]);
    s.record(out);
    s.at(0).poll(&[
        watchdog(),
        heartbeat("a"),
        gpu_ecc_uncorrectable("a", "0"),
        heartbeat("b"),
    ]);
    s.fleet.cordon(s.now, "b", "maintenance").unwrap();
    s.took();
    // `b` is deleted from the cluster; `a`'s name now belongs to a new machine.
    a.uid = Some("uid-a2".into());
    let now = s.at(60).now;
    let out = s.fleet.observe(&s.cfg, now, &[a]);
    s.record(out);
    assert!(
        !s.fleet.nodes.contains_key("b"),
        "its record and its queue go"
    );
    let fresh = s.node("a");
    assert!(
        fresh.conditions.is_empty(),
        "the old machine's sticky fault is not the new one's"
    );
    assert_eq!(fresh.uid.as_deref(), Some("uid-a2"));
    assert_eq!(fresh.score, None);
    assert_eq!(s.took(), ["b NODE_DECOMMISSIONED", "a NODE_DECOMMISSIONED"]);
}

#[test]
fn a_hold_keeps_only_alerts_seen_before_it_began() {
    let mut s = script("alertmanager: { staleAfter: 1h }");
    s.at(0)
        .poll(&[watchdog_sent(0), heartbeat("n1"), edac("n1").expires(240)]);
    // The watchdog goes missing once: a hold begins at 30 s.
    s.at(30).poll(&[heartbeat("n1"), edac("n1").expires(240)]);
    assert!(s.fleet.trust.holding(s.now));
    // SMART first fires after the gap, and is resolved well before its expiry.
    s.at(60).poll(&[
        watchdog_sent(60),
        heartbeat("n1"),
        edac("n1").expires(300),
        smart_failing("n1").expires(300),
    ]);
    s.took();
    s.at(90).poll(&[watchdog_sent(60), heartbeat("n1")]);
    assert!(
        !s.node("n1").conditions.contains_key("disk_degraded"),
        "seen by the pipeline as it now is: its resolution counts"
    );
    assert!(
        s.node("n1").conditions.contains_key("memory_errors"),
        "seen before the gap: held"
    );
}

#[test]
fn failure_reasons_reported_through_the_api_are_bounded() {
    let mut s = script("");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    for i in 0..100 {
        let out = s
            .fleet
            .attribute_failure(&s.cfg, s.now, "n1", "job", Some(&format!("why-{i}")), None)
            .unwrap();
        s.record(out);
    }
    let f = &s.node("n1").failures;
    assert_eq!(f.total, 100);
    assert_eq!(f.by_reason.len(), 65, "64 reasons, and the rest together");
    assert_eq!(f.by_reason["other"], 36);
}

/// A pool in `replace` mode on Kubernetes, its four provisioned nodes listed
/// ready, c-0 scored once far below every threshold.
fn replace_pool() -> (Script, Vec<String>) {
    let mut s = script(
        "orchestrator: { kind: kubernetes }\n\
         pools: [{ name: gpu, selector: { pool: gpu }, nodeHealth: { mode: replace, maxUnavailablePercent: 100 } }]",
    );
    let ids: Vec<String> = (0..4).map(|i| format!("c-{i}")).collect();
    let all: Vec<policy::Observed> = ids
        .iter()
        .map(|id| provisioned(id, Status::Ready))
        .collect();
    let out = s.fleet.observe(&s.cfg, s.now, &all);
    s.record(out);
    s.at(0).report(&ids, &["c-0"], very_low);
    (s, ids)
}

/// A cloud node as its orchestrator lists it: empty once cordoned.
fn provisioned(id: &str, status: Status) -> policy::Observed {
    policy::Observed {
        provisioned: true,
        allocations: (status == Status::Cordoned).then_some(0),
        ..shown(id, status)
    }
}

/// The cluster shows c-0 cordoned and empty, the others ready.
fn c0_cordoned_and_empty(s: &mut Script, ids: &[String]) {
    let mut now: Vec<policy::Observed> = ids
        .iter()
        .map(|id| provisioned(id, Status::Ready))
        .collect();
    now[0] = provisioned("c-0", Status::Cordoned);
    let out = s.fleet.observe(&s.cfg, s.now, &now);
    s.record(out);
}

/// A cordon refused once, then done, leaves nothing behind: the replacement that
/// follows is acted on, not halted as a termination refused.
#[test]
fn a_cordon_refused_once_does_not_halt_the_later_replacement() {
    let (mut s, ids) = replace_pool();
    s.at(30)
        .report(&ids, &["c-0"], very_low)
        .refuse_cordon("c-0");
    // Ten minutes on, the cordon goes through; the cluster shows it empty.
    s.at(30 + 601).report(&ids, &["c-0"], very_low);
    act(&mut s);
    c0_cordoned_and_empty(&mut s, &ids);
    s.policy_events();
    s.at(30 + 620).tick();
    assert!(actions(&s).contains(&("c-0".to_string(), policy::Action::Terminate)));
    let events = s.policy_events();
    assert!(
        events.iter().all(|e| !e.contains("terminationRejected")),
        "{events:?}"
    );
}

#[test]
fn a_node_being_replaced_leaves_the_inventory_replaced_not_gone() {
    let (mut s, ids) = replace_pool();
    s.at(30).report(&ids, &["c-0"], very_low);
    // The cluster shows it cordoned and empty: its termination is decided.
    c0_cordoned_and_empty(&mut s, &ids);
    s.at(45).tick();
    assert!(actions(&s).contains(&("c-0".to_string(), policy::Action::Terminate)));
    s.took();
    // Its owner deleted, the node leaves the inventory before the termination is
    // recorded: it stays until then, and is recorded replaced, not gone.
    let rest: Vec<policy::Observed> = ids[1..]
        .iter()
        .map(|id| provisioned(id, Status::Ready))
        .collect();
    let out = s.fleet.observe(&s.cfg, s.now, &rest);
    s.record(out);
    assert!(s.fleet.nodes.contains_key("c-0"));
    act(&mut s);
    assert!(!s.fleet.nodes.contains_key("c-0"));
    let took = s.took();
    assert!(took.contains(&"c-0 NODE_REPLACED".to_string()), "{took:?}");
    assert!(
        !took.contains(&"c-0 NODE_DECOMMISSIONED".to_string()),
        "{took:?}"
    );
    assert_eq!(
        s.fleet.ledger.replacements["gpu"].len(),
        1,
        "counted in the budget"
    );
}

/// An orchestrator that shows a whole pool not ready for a moment (a Slurm
/// controller restarting lists every node `unknown`) lets no node be taken out
/// past `maxUnavailablePercent`: one cordoned now would stay out once ready.
#[test]
fn a_pool_shown_not_ready_for_a_moment_is_cordoned_no_further_than_the_limit() {
    let mut s = script(
        "orchestrator: { kind: kubernetes }\n\
         pools: [{ name: gpu, selector: { pool: gpu }, nodeHealth: { mode: cordon, maxUnavailablePercent: 34 } }]",
    );
    let ids: Vec<String> = (0..3).map(|i| format!("s-{i}")).collect();
    let listed = |status: Status| -> Vec<policy::Observed> {
        ids.iter()
            .map(|id| policy::Observed {
                not_ready: status == Status::NotReady,
                released: false,
                ..shown(id, status)
            })
            .collect()
    };
    let out = s.fleet.observe(&s.cfg, s.now, &listed(Status::Ready));
    s.record(out);
    s.at(0).report(&ids, &["s-0", "s-1"], low);
    s.at(30).report(&ids, &["s-0", "s-1"], low);
    act(&mut s);
    let out_of_service = |s: &Script| {
        ids.iter()
            .filter(|id| s.node(id).status == Status::Cordoned)
            .count()
    };
    assert_eq!(out_of_service(&s), 1, "34% of 3: one");
    let cordoned = ids
        .iter()
        .find(|id| s.node(id).status == Status::Cordoned)
        .unwrap()
        .clone();
    // The controller restarts: every node listed not ready, the cordoned one
    // still drained.
    let mut restarting = listed(Status::NotReady);
    for o in &mut restarting {
        if o.id == cordoned {
            o.status = Status::Cordoned;
        }
    }
    let out = s.fleet.observe(&s.cfg, s.now, &restarting);
    s.record(out);
    s.at(45).tick();
    s.at(60).report(&ids, &["s-0", "s-1"], low);
    act(&mut s);
    // Back, each node as hale left it: still one of three out of service.
    let back: Vec<policy::Observed> = ids
        .iter()
        .map(|id| shown(id, s.node(id).status))
        .map(|o| policy::Observed {
            status: if o.status == Status::Cordoned {
                Status::Cordoned
            } else {
                Status::Ready
            },
            ..o
        })
        .collect();
    let out = s.fleet.observe(&s.cfg, s.now, &back);
    s.record(out);
    s.at(90).report(&ids, &["s-0", "s-1"], low);
    act(&mut s);
    assert_eq!(out_of_service(&s), 1);
}

#[test]
fn a_resent_alert_keeps_its_latest_expiry_so_its_end_reads_as_a_resolution() {
    let mut s = script("");
    // Prometheus re-sends every minute; each answer moves the expiry, nothing else.
    for sent in (0..=600).step_by(60) {
        s.at(sent).poll(&[
            watchdog_sent(sent),
            heartbeat("n1"),
            edac("n1").expires(sent + 240),
        ]);
    }
    s.took();
    // Gone at 630 s, before the expiry of its last re-send (840 s) though long past
    // its first (240 s): Prometheus resolved it, and it ends at once.
    s.at(630).poll(&[watchdog_sent(600), heartbeat("n1")]);
    assert!(!s.node("n1").conditions.contains_key("memory_errors"));
    assert_eq!(s.took(), ["n1 CONDITION_CLEARED", "n1 SCORE_CHANGED"]);
}

/// A restart of the pipeline while a hold runs holds what was seen before it —
/// also what first fired after the running hold began.
#[test]
fn a_restart_during_a_hold_holds_what_was_seen_before_it() {
    let mut s = script("alertmanager: { staleAfter: 1h }");
    poll_from(&mut s, 0, -86_400, &[watchdog_sent(0), heartbeat("n1")]);
    // The watchdog goes missing once: a hold begins at 30 s.
    poll_from(&mut s, 30, -86_400, &[heartbeat("n1")]);
    assert!(s.fleet.trust.holding(s.now));
    // SMART first fires after that, and is re-sent with each evaluation.
    for t in (60..=300).step_by(30) {
        poll_from(
            &mut s,
            t,
            -86_400,
            &[
                watchdog_sent(t),
                heartbeat("n1"),
                smart_failing("n1").expires(t + 120),
            ],
        );
    }
    s.took();
    // Alertmanager restarts at 310; Prometheus has not re-sent SMART yet.
    poll_from(&mut s, 315, 310, &[watchdog_sent(315), heartbeat("n1")]);
    assert!(
        s.last
            .held
            .as_deref()
            .is_some_and(|h| h.contains("restarted"))
    );
    // Its expiry passes, and Alertmanager notifies it resolved at that expiry.
    poll_from(&mut s, 450, 310, &[watchdog_sent(450), heartbeat("n1")]);
    s.at(455)
        .webhook(&[smart_failing("n1").resolved().expires(420)]);
    assert!(
        s.node("n1").conditions.contains_key("disk_degraded"),
        "held: the restart may have dropped it"
    );
    assert_eq!(s.took(), Vec::<String>::new());
    // The restart's hold runs out 20 minutes after Alertmanager started.
    poll_from(
        &mut s,
        310 + 1200,
        310,
        &[watchdog_sent(1500), heartbeat("n1")],
    );
    assert!(!s.node("n1").conditions.contains_key("disk_degraded"));
}

/// A reload that shortens the poll interval counts staleness from the reload until
/// the next answer: the last answer came a long old interval ago, and the new
/// interval's staleness must not mark every node stale before the next poll lands.
#[test]
fn a_shortened_poll_interval_counts_staleness_from_the_reload() {
    let mut s = script("alertmanager: { pollInterval: 2s, staleAfter: 6s }");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    // The old interval, 10 minutes: the reload comes 300 s after the last answer.
    let at = |t: i64| t0() + TimeDelta::seconds(t);
    s.fleet.poll_interval_shortened(at(300));
    s.at(303).tick();
    assert!(
        !s.fleet.trust.stale,
        "stale before the next poll could land"
    );
    // No answer within the new staleAfter of the reload: stale.
    s.at(307).tick();
    assert!(s.fleet.trust.stale);
    // Another reload, then an answer: from then on the answers count.
    s.fleet.poll_interval_shortened(at(400));
    s.at(401).poll(&[watchdog(), heartbeat("n1")]);
    assert!(!s.fleet.trust.stale);
    assert_eq!(s.fleet.trust.interval_shortened, None);
    s.at(408).tick();
    assert!(s.fleet.trust.stale, "7 s without an answer");
}

/// The wall clock steps back an hour under a running hale (NTP stepping a clock
/// that ran fast), or hale restarts on a machine whose clock is an hour behind the
/// one that wrote its store: what was recorded ahead of the clock counts from
/// now. A node that stops reporting is missed one window later, not an hour and a
/// window; trusted input after a gap ends staleness; a hold begun before the step
/// ends no later than one begun now; a failed flow counts against the hour's
/// budget for an hour from now, not two.
#[test]
fn a_clock_stepped_back_keeps_heartbeats_trust_holds_and_budgets_in_time() {
    for restarted in [false, true] {
        let mut s = script("");
        s.at(0)
            .poll(&[watchdog(), heartbeat("n1"), heartbeat("n2")]);
        s.at(30)
            .poll(&[watchdog(), heartbeat("n1"), heartbeat("n2")]);
        // The watchdog missing once holds absences for holdAfterRestart (20m).
        s.at(40).poll(&[heartbeat("n1"), heartbeat("n2")]);
        s.fleet.ledger.flow_failures.push(s.now);
        s.took();
        let back = TimeDelta::seconds(3600);
        s.now -= back;
        if restarted {
            s.restart();
        }
        // n2 stops reporting as the clock goes back.
        s.poll(&[watchdog(), heartbeat("n1")]);
        let now = s.now;
        // Restarted, how far back is not known: how far ahead the store was,
        // which is the step here (the budget's failure was recorded last).
        assert_eq!(s.last.clock_back, Some(back), "restarted: {restarted}");
        let hold = s.fleet.trust.hold_until.expect("held");
        assert!(
            hold <= now + TimeDelta::minutes(20),
            "a hold of {}s from now",
            (hold - now).num_seconds()
        );
        assert!(s.fleet.ledger.flow_failures.iter().all(|t| *t <= now));
        s.now = now + TimeDelta::seconds(100);
        s.poll(&[watchdog(), heartbeat("n1")]);
        assert!(
            s.fleet.nodes["n2"]
                .conditions
                .contains_key(HEARTBEAT_MISSED),
            "restarted: {restarted}: n2 missed one window after the step"
        );
        // The watchdog gone long enough to go stale, then back: trusted again.
        s.now = now + TimeDelta::seconds(300);
        s.poll(&[heartbeat("n1")]);
        assert!(s.fleet.trust.stale, "restarted: {restarted}");
        s.now = now + TimeDelta::seconds(310);
        s.poll(&[watchdog(), heartbeat("n1")]);
        assert!(
            !s.fleet.trust.stale,
            "restarted: {restarted}: trusted input after the step ends staleness"
        );
    }
}

/// The wall clock steps forward an hour while no time passes (as the service
/// tells it from its monotonic clock): every instant recorded moves with it. The
/// fleet does not go stale, a node that stops reporting at the step is missed a
/// window after it, not at once, and a failure stays in the hour's budget.
#[test]
fn a_clock_stepped_forward_cuts_no_window_short() {
    let mut s = script("");
    s.at(0).poll(&[
        watchdog(),
        heartbeat("n1"),
        heartbeat("n2"),
        smart_failing("n1"),
    ]);
    s.at(30).poll(&[
        watchdog(),
        heartbeat("n1"),
        heartbeat("n2"),
        smart_failing("n1"),
    ]);
    s.fleet.ledger.flow_failures.push(s.now);
    s.took();
    let first_seen = |s: &Script| s.fleet.nodes["n1"].conditions["disk_degraded"].first_seen;
    let before = first_seen(&s);
    let moved = s.fleet.clock_stepped(TimeDelta::hours(1));
    assert!(moved.dirty.contains("n1") && moved.ledger, "{moved:?}");
    // A condition's episode moves too: fencing counts a silence from one.
    assert_eq!(first_seen(&s), before + TimeDelta::hours(1));
    s.at(3630)
        .poll(&[watchdog(), heartbeat("n1"), smart_failing("n1")]);
    assert_eq!(s.took(), Vec::<String>::new(), "nothing went stale or late");
    s.at(3660)
        .poll(&[watchdog(), heartbeat("n1"), smart_failing("n1")]);
    assert!(
        !s.fleet.nodes["n2"]
            .conditions
            .contains_key(HEARTBEAT_MISSED)
    );
    s.at(3730)
        .poll(&[watchdog(), heartbeat("n1"), smart_failing("n1")]);
    assert_eq!(s.took(), ["n2 HEARTBEAT_MISSED"]);
    assert_eq!(
        s.fleet.ledger.flow_failures,
        [t0() + TimeDelta::seconds(3630)]
    );
}
