//! `parse_duration`, `strip_port`, and every public method of an `Alert` built from
//! arbitrary labels and annotations.
//!
//! The input is text (invalid UTF-8 is replaced), one item a line:
//!
//! ```text
//! alertname=GpuEccUncorrectable     a label: name, `=`, value (a line without `=` is
//! priority=P3                       a label with an empty value)
//! @summary 1 ECC error on GPU 0     annotations: @summary, @description, @message
//! @startsAt 2026-08-05T11:00:00Z    @startsAt, @endsAt: the alert's times, verbatim
//! @state suppressed                 active (default), suppressed or resolved
//! @identity node,instance           the identity labels (default: hale's default)
//! @keepport                         do not strip instance ports
//! @duration 30s                     a parse_duration input
//! @port [fe80::1]:9100              a strip_port input
//! ```
//!
//! Besides not panicking: a parsed duration is at most `MAX_DURATION`; `strip_port`
//! returns its input or a prefix of it followed by `:digits`; `message_is`,
//! `fault_class_is` and `notice_is` accept what `message`, `fault_class` and `notice`
//! return and refuse a changed copy of it; a node is never blank.
#![no_main]

use std::borrow::Cow;

use hale::core::labels::{
    Alert, AlertState, Annotations, Labels, Notice, Signal, Text, strip_port,
};
use hale::core::settings::{Identity, MAX_DURATION, parse_duration};
use libfuzzer_sys::fuzz_target;

fn duration(text: &str) {
    if let Ok(d) = parse_duration(text) {
        assert!(d <= MAX_DURATION, "parse_duration({text:?}) = {d:?}");
    }
}

fn port(text: &str) {
    let host = strip_port(text);
    if host.len() != text.len() {
        assert!(text.starts_with(host), "strip_port({text:?}) = {host:?}");
        let rest = &text[host.len()..];
        let digits = rest.strip_prefix(':');
        assert!(
            digits.is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())),
            "strip_port({text:?}) = {host:?} dropped {rest:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    duration(&text);
    port(&text);

    let mut labels = Labels::default();
    let mut annotations = Annotations::default();
    let (mut starts_at, mut ends_at) = (None, None);
    let mut state = AlertState::Active;
    let mut identity = Identity::default();
    for line in text.lines() {
        if let Some(directive) = line.strip_prefix('@') {
            let (name, value) = directive.split_once(' ').unwrap_or((directive, ""));
            match name {
                "summary" => annotations.summary = Some(Text::new(value.to_string())),
                "description" => annotations.description = Some(Text::new(value.to_string())),
                "message" => annotations.message = Some(Text::new(value.to_string())),
                "startsAt" => starts_at = Some(Cow::Owned(value.to_string())),
                "endsAt" => ends_at = Some(Cow::Owned(value.to_string())),
                "state" => {
                    state = match value {
                        "suppressed" => AlertState::Suppressed,
                        "resolved" => AlertState::Resolved,
                        _ => AlertState::Active,
                    }
                }
                "identity" => identity.labels = value.split(',').map(str::to_string).collect(),
                "keepport" => identity.strip_port = false,
                "duration" => duration(value),
                "port" => port(value),
                _ => {}
            }
        } else {
            let (k, v) = line.split_once('=').unwrap_or((line, ""));
            duration(v);
            port(v);
            labels.insert(k.to_string(), v.to_string());
        }
    }
    let alert = Alert {
        labels,
        annotations,
        fingerprint: Cow::Borrowed("fuzz"),
        starts_at,
        ends_at,
        state,
    };

    for id in [&Identity::default(), &identity] {
        if let Some(node) = alert.node(id) {
            assert!(!node.trim().is_empty(), "node {node:?} is blank");
        }
    }
    match alert.signal() {
        Signal::Heartbeat { interval: Some(d) } => {
            assert!(
                !d.is_zero() && d <= MAX_DURATION,
                "heartbeat interval {d:?}"
            )
        }
        Signal::Heartbeat { interval: None }
        | Signal::Watchdog
        | Signal::CollectorFailed { .. }
        | Signal::Unavailable { .. }
        | Signal::JobFailure { .. }
        | Signal::Condition => {}
    }
    let _ = (alert.condition_type(), alert.reason(), alert.alertname());
    let _ = (alert.severity(), alert.sticky(), alert.remediation());
    let _ = (alert.started(), alert.expires());

    let message = alert.message();
    assert!(
        alert.message_is(&message),
        "message_is({message:?}) is false"
    );
    assert!(
        !alert.message_is(&format!("{message}x")),
        "message_is accepts {message:?} + x"
    );
    if let Some(p) = alert.priority() {
        assert!(message.starts_with(&format!("[P{p}] ")), "{message:?}");
    }

    let class = alert.fault_class();
    assert!(
        alert.fault_class_is(&class),
        "fault_class_is({class:?}) is false"
    );
    assert!(
        !alert.fault_class_is(&format!("{class}X")),
        "fault_class_is accepts {class:?} + X"
    );

    let notice = alert.notice();
    assert!(
        alert.notice_is(notice.as_ref()),
        "notice_is({notice:?}) is false"
    );
    match &notice {
        None => {}
        Some(n) => {
            assert!(!alert.notice_is(None), "notice_is(None) with {n:?}");
            let changed = |f: &dyn Fn(&mut Notice)| {
                let mut c = n.clone();
                f(&mut c);
                c
            };
            for other in [
                changed(&|c| c.message.push('x')),
                changed(&|c| c.alertname.push('x')),
                changed(&|c| c.priority = c.priority.wrapping_add(1)),
            ] {
                assert!(
                    !alert.notice_is(Some(&other)),
                    "notice_is accepts {other:?} for {n:?}"
                );
            }
        }
    }
});
