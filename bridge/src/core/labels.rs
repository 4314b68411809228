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

/// Label pairs as Alertmanager sent them, borrowed from the body where possible,
/// with where each label of the contract sits: an alert is asked for them a dozen
/// times per poll, and 50,000 alerts should not be scanned for each.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Labels<'a> {
    pairs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// For each of [`KEYS`], 1 + its index in `pairs`; 0 when absent.
    known: [u8; KEYS.len()],
}

/// The labels hale reads, looked up by position rather than by name (`node` and
/// `instance`, the default identity, by name through [`key_of`]).
const KEYS: [&str; 16] = [
    "alertname",
    "hale_signal",
    "hale_condition",
    "hale_reason",
    "severity",
    "hale_sticky",
    "hale_fault_class",
    "priority",
    "hale_remediation",
    "hale_report_interval",
    "collector",
    "signal",
    "hale_job",
    "job_name",
    "node",
    "instance",
];

/// From this many labels on, an alert's are checked for a name given twice by
/// sorting them rather than one by one.
const SORTED_FROM: usize = 32;

/// A position in [`KEYS`].
#[derive(Clone, Copy)]
struct Key(usize);

const ALERTNAME: Key = Key(0);
const HALE_SIGNAL: Key = Key(1);
const HALE_CONDITION: Key = Key(2);
const HALE_REASON: Key = Key(3);
const SEVERITY: Key = Key(4);
const HALE_STICKY: Key = Key(5);
const HALE_FAULT_CLASS: Key = Key(6);
const PRIORITY: Key = Key(7);
const HALE_REMEDIATION: Key = Key(8);
const HALE_REPORT_INTERVAL: Key = Key(9);
const COLLECTOR: Key = Key(10);
const SIGNAL: Key = Key(11);
const HALE_JOB: Key = Key(12);
const JOB_NAME: Key = Key(13);

/// A hint to the processor to fetch the line at `p` into its caches: it reads
/// nothing and changes nothing, so any address is sound.
#[inline(always)]
pub(super) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch touches no memory a program can see and faults on no
    // address; SSE, which it needs, is in every x86-64 processor.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

fn key_of(name: &str) -> Option<Key> {
    KEYS.iter().position(|k| *k == name).map(Key)
}

impl<'a> Labels<'a> {
    pub fn get(&self, name: &str) -> Option<&str> {
        match key_of(name) {
            Some(k) => self.known(k),
            None => self
                .pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_ref()),
        }
    }

    /// The value of a label of the contract.
    fn known(&self, key: Key) -> Option<&str> {
        match usize::from(self.known[key.0]).checked_sub(1) {
            Some(at) => Some(self.pairs[at].1.as_ref()),
            // Past the places `known` can say, looked for.
            None if self.pairs.len() >= usize::from(u8::MAX) => self
                .pairs
                .iter()
                .find(|(k, _)| k == KEYS[key.0])
                .map(|(_, v)| v.as_ref()),
            None => None,
        }
    }

    pub fn insert(&mut self, name: impl Into<Cow<'a, str>>, value: impl Into<Cow<'a, str>>) {
        let (name, value) = (name.into(), value.into());
        match self.pairs.iter_mut().find(|(k, _)| *k == name) {
            Some((_, v)) => *v = value,
            None => self.push(name, value),
        }
    }

    /// Add a pair; the first of two with one name is the one read.
    fn push(&mut self, name: Cow<'a, str>, value: Cow<'a, str>) {
        if let Some(k) = key_of(&name)
            && self.known[k.0] == 0
            && let Ok(at) = u8::try_from(self.pairs.len() + 1)
        {
            self.known[k.0] = at;
        }
        self.pairs.push((name, value));
    }
}

impl<'a> FromIterator<(Cow<'a, str>, Cow<'a, str>)> for Labels<'a> {
    fn from_iter<I: IntoIterator<Item = (Cow<'a, str>, Cow<'a, str>)>>(pairs: I) -> Self {
        let mut labels = Labels::default();
        for (k, v) in pairs {
            labels.push(k, v);
        }
        labels
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
                let mut labels = Labels {
                    pairs: Vec::with_capacity(map.size_hint().unwrap_or(8)),
                    known: [0; KEYS.len()],
                };
                // Alertmanager's labels are a map: a sender that names one twice
                // means two things, and Go would read the last where hale read the
                // first.
                let twice = |name: &str| -> M::Error {
                    de::Error::custom(format_args!("label `{name}` is given twice"))
                };
                while let Some((k, v)) = map.next_entry::<Text, Text>()? {
                    // A few labels are compared as they come; a long list, sorted
                    // once at its end (compared as they come, 100,000 labels would
                    // take a minute).
                    if labels.pairs.len() < SORTED_FROM {
                        let given = match key_of(&k.0) {
                            Some(known) => labels.known[known.0] != 0,
                            None => labels.pairs.iter().any(|(n, _)| *n == k.0),
                        };
                        if given {
                            return Err(twice(&k.0));
                        }
                    }
                    labels.push(k.0, v.0);
                }
                if labels.pairs.len() > SORTED_FROM {
                    let mut names: Vec<&str> =
                        labels.pairs.iter().map(|(n, _)| n.as_ref()).collect();
                    names.sort_unstable();
                    if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
                        return Err(twice(pair[0]));
                    }
                }
                Ok(labels)
            }
        }
        d.deserialize_map(Pairs)
    }
}

/// The longest node id, in bytes: a DNS name's limit, which Kubernetes node names
/// keep. A longer label value is no node's name (and would outgrow the keys and
/// subjects a shared store files it under).
pub const MAX_NODE_ID: usize = 253;

/// Whether `value` (white space around it taken off) can be a node's id. `.` and
/// `..` cannot be named in a URL path (it resolves them away), so the API could
/// never show such a node; nor can an id with control or direction-changing
/// characters, which would forge log lines or show another id than it is.
pub fn nameable(value: &str) -> bool {
    !blank(value)
        && !matches!(value, "." | "..")
        && value.len() <= MAX_NODE_ID
        && !unprintable(value)
}

/// `value` without white space around it; looked at only where it starts or ends
/// with something other than a letter or digit (nearly never: a label read for
/// every alert of every poll costs two byte tests).
fn trimmed(value: &str) -> &str {
    let b = value.as_bytes();
    let edge = |c: Option<&u8>| c.is_some_and(u8::is_ascii_alphanumeric);
    if edge(b.first()) && edge(b.last()) {
        value
    } else {
        value.trim()
    }
}

/// A fault class as hale writes it: upper-cased, as `evictOnFaultClasses` and the
/// default (the condition type) are, so the three join.
fn upper(class: &str) -> super::Name {
    if class.is_ascii() {
        let mut class = super::Name::from(class);
        class.make_ascii_uppercase();
        class
    } else {
        super::Name::from(class.to_uppercase())
    }
}

/// Whether `value` holds a control character, a bidirectional override or an
/// invisible character (zero-width space or joiner, soft hyphen, byte order mark,
/// variation selector, tag, filler, a line or paragraph separator, a space other
/// than the ASCII one): what would forge a log line, or show as another id.
pub fn unprintable(value: &str) -> bool {
    value.bytes().any(|b| b < 0x20 || b == 0x7f)
        || (!value.is_ascii() && value.chars().any(|c| c.is_control() || invisible(c)))
}

/// A bidirectional override or isolate, a character that shows as nothing
/// (Unicode's default-ignorable code points and format characters, the
/// interlinear annotation marks, the Hangul and Khitan fillers, the blank braille
/// pattern), a line or paragraph separator, a space that looks like the ASCII one
/// but is not, a noncharacter or a private-use character (no font agrees on it).
pub fn invisible(c: char) -> bool {
    let code = c as u32;
    (code & 0xFFFE) == 0xFFFE
        || matches!(code, 0xE000..=0xF8FF | 0xF0000..=0x10FFFF)
        || matches!(
            c,
            '\u{600}'..='\u{605}'
                | '\u{6DD}'
                | '\u{70F}'
                | '\u{890}'..='\u{891}'
                | '\u{8E2}'
                | '\u{2800}'
                | '\u{FDD0}'..='\u{FDEF}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{16FE4}'
        )
        || matches!(
            c,
            '\u{A0}'
                | '\u{AD}'
                | '\u{34F}'
                | '\u{61C}'
                | '\u{115F}'..='\u{1160}'
                | '\u{1680}'
                | '\u{17B4}'..='\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{2000}'..='\u{200F}'
                | '\u{2028}'..='\u{202F}'
                | '\u{205F}'..='\u{206F}'
                | '\u{3000}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF0}'..='\u{FFFB}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

/// `text` for a log line: a bidirectional override or an invisible character is
/// written `\u{..}` (the log's own escaping covers control characters), so a line
/// read in `kubectl logs` shows what it holds, in its order; and a backslash
/// `\\`, so text that spells such an escape out (`\u{202e}` typed in a summary)
/// reads apart from the character.
pub fn loggable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\\') && (text.is_ascii() || !text.chars().any(invisible)) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if invisible(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `text` with each character `unsafe_char` picks written `\u{..}`; borrowed when
/// it picks none.
pub fn escaped(text: &str, unsafe_char: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(&unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Empty or only whitespace: a value that counts as absent. Decided by its first
/// byte for nearly every value.
fn blank(value: &str) -> bool {
    match value.as_bytes().first() {
        None => true,
        Some(b) if b.is_ascii_alphanumeric() => false,
        Some(_) => value.trim().is_empty(),
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

/// The most hale keeps of one label value or annotation, in bytes: an alert is
/// evidence, not a document, and what it keeps is written to the store with every
/// change (a NATS message holds 1 MiB by default).
pub const MAX_TEXT: usize = 1024;

/// `text` cut to [`MAX_TEXT`] bytes, at a character's boundary.
pub fn clip(text: &str) -> &str {
    if text.len() <= MAX_TEXT {
        return text;
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
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

/// An RFC 3339 time as chrono reads it. Every alert of every poll carries one, so
/// the form Alertmanager writes (`2026-08-05T12:00:00.123456789Z`, or with a
/// `+hh:mm` offset) is read directly; anything else goes to chrono.
pub fn rfc3339(text: &str) -> Option<DateTime<Utc>> {
    fast_rfc3339(text.as_bytes()).or_else(|| {
        DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    })
}

fn fast_rfc3339(b: &[u8]) -> Option<DateTime<Utc>> {
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        b.get(range)?.iter().try_fold(0u32, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(at(4, b'-') && at(7, b'-') && at(10, b'T') && at(13, b':') && at(16, b':')) {
        return None;
    }
    let date =
        chrono::NaiveDate::from_ymd_opt(digits(0..4)? as i32, digits(5..7)?, digits(8..10)?)?;
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if second > 59 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0;
    if at(i, b'.') {
        let count = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if !(1..=9).contains(&count) {
            return None;
        }
        nanos = digits(i + 1..i + 1 + count)? * 10u32.pow(9 - count as u32);
        i += 1 + count;
    }
    let offset = match b.get(i..)? {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (digits(i + 1..i + 3)?, digits(i + 4..i + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            let secs = (h * 3600 + m * 60) as i32;
            if *sign == b'-' { -secs } else { secs }
        }
        _ => return None,
    };
    let time = chrono::NaiveTime::from_hms_nano_opt(hour, minute, second, nanos)?;
    let utc = date
        .and_time(time)
        .checked_sub_signed(chrono::TimeDelta::seconds(offset.into()))?;
    Some(DateTime::from_naive_utc_and_offset(utc, Utc))
}

impl<'a> Alert<'a> {
    /// A contract label's value, white space around it dropped as around a node id
    /// (`hale_condition=" disk_degraded "` is `disk_degraded`, not a type of its
    /// own); a blank one is absent.
    fn label(&self, key: Key) -> Option<&str> {
        self.labels
            .known(key)
            .filter(|v| !blank(v))
            .map(|v| clip(trimmed(v)))
    }

    /// Asks the processor for the alert itself, where it lies in the answer's list:
    /// the first of three hints a loop over alerts out of the list's order (a poll's
    /// walk goes by node, and Alertmanager lists by fingerprint) gives each some way
    /// ahead of the one it reads. It reads no memory, so nothing waits on it.
    pub fn prefetch(&self) {
        let start = std::ptr::from_ref(self).cast::<u8>();
        for at in (0..std::mem::size_of::<Self>()).step_by(64) {
            prefetch(start.wrapping_add(at));
        }
    }

    /// Asks the processor for the memory that lists this alert's labels: the second
    /// hint ([`Alert::prefetch`] given earlier, where the alerts are read out of their
    /// list's order), or the first of two in a loop down the list. Read after the
    /// parse, an answer's alerts are no longer in any cache; waiting for each alert's
    /// labels and text in turn cost a 10,000-node poll a quarter of its work beyond
    /// the parse (`bench`).
    pub fn prefetch_labels(&self) {
        let pairs = self.labels.pairs.as_slice();
        let start = pairs.as_ptr().cast::<u8>();
        for at in (0..std::mem::size_of_val(pairs)).step_by(64) {
            prefetch(start.wrapping_add(at));
        }
    }

    /// The last hint ([`Alert::prefetch_labels`] given earlier): the text of its
    /// labels, annotations and fingerprint.
    pub fn prefetch_text(&self) {
        let a = &self.annotations;
        let notes = [&a.summary, &a.description, &a.message];
        let notes = notes.into_iter().flatten().map(|t| t.0.as_ptr());
        self.labels
            .pairs
            .iter()
            .map(|(_, v)| v.as_ptr())
            .chain(notes)
            .chain([self.fingerprint.as_ptr()])
            .for_each(prefetch);
    }

    /// When the alert started, if it says so validly.
    pub fn started(&self) -> Option<DateTime<Utc>> {
        rfc3339(self.starts_at.as_deref()?)
    }

    /// When Alertmanager expires the alert unless it is sent again.
    pub fn expires(&self) -> Option<DateTime<Utc>> {
        rfc3339(self.ends_at.as_deref()?)
    }

    pub fn alertname(&self) -> &str {
        self.label(ALERTNAME).unwrap_or("unnamed")
    }

    /// The node this alert is about: the first present identity label, with the
    /// `:port` of `instance` stripped when configured.
    pub fn node<'s>(&'s self, identity: &Identity) -> Option<&'s str> {
        // `instance=":9100"` is a port and no host: no node, try the next label.
        identity.labels.iter().find_map(|name| {
            // White space around a name is no part of it (no host or Kubernetes
            // node name holds any): `node=" gpu-1 "` is gpu-1, not a node of its own.
            let value = self.labels.get(name)?.trim();
            let value = if identity.strip_port && name == "instance" {
                strip_port(value)
            } else {
                value
            };
            nameable(value).then_some(value)
        })
    }

    pub fn signal(&self) -> Signal<'_> {
        let named = |fallback: &'static str| {
            self.label(COLLECTOR)
                .or_else(|| self.label(SIGNAL))
                .unwrap_or(fallback)
        };
        match self.label(HALE_SIGNAL) {
            Some("watchdog") => Signal::Watchdog,
            Some("heartbeat") => Signal::Heartbeat {
                interval: self
                    .label(HALE_REPORT_INTERVAL)
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
                    .label(HALE_JOB)
                    .or_else(|| self.label(JOB_NAME))
                    .unwrap_or_else(|| self.alertname()),
            },
            _ => Signal::Condition,
        }
    }

    /// Condition type: `hale_condition`, else the alertname verbatim.
    pub fn condition_type(&self) -> &str {
        self.label(HALE_CONDITION)
            .unwrap_or_else(|| self.alertname())
    }

    /// Whether an ordinary alert (`signal`, as [`Alert::signal`] read it) names
    /// one of the conditions hale raises itself from what it cannot see
    /// (`heartbeat_missed`, `telemetry_stale`, `collector_failed`), in any case, as
    /// its type. No
    /// alert may raise or hold one — a sticky one could never be cleared — so it is
    /// counted as unmatched and ignored; `collector_failed` comes from
    /// `hale_signal: collector_failed` alone.
    pub fn claims_own_condition(&self, signal: &Signal<'_>) -> bool {
        let named = self.condition_type().trim();
        *signal == Signal::Condition
            && super::BLIND_CONDITIONS
                .iter()
                .any(|own| own.eq_ignore_ascii_case(named))
    }

    /// Penalty-table reason: `hale_reason`, else the alertname.
    pub fn reason(&self) -> &str {
        self.label(HALE_REASON).unwrap_or_else(|| self.alertname())
    }

    /// `info`, `warning` or `critical`, in any case; anything else is a warning.
    pub fn severity(&self) -> Severity {
        match self.label(SEVERITY) {
            Some(s) if s.eq_ignore_ascii_case("info") => Severity::Info,
            Some(s) if s.eq_ignore_ascii_case("critical") => Severity::Critical,
            _ => Severity::Warning,
        }
    }

    /// Contract labels whose value hale did not take as written, each with what it
    /// read instead: a typo in an alert rule is shown (`hale alerts`), not silently
    /// turned into a default.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(v) = self.label(SEVERITY)
            && !["info", "warning", "critical"]
                .iter()
                .any(|s| v.eq_ignore_ascii_case(s))
        {
            notes.push(format!(
                "severity {v:?} is not info, warning or critical: read as warning"
            ));
        }
        let signal = self.label(HALE_SIGNAL);
        if let Some(v) = signal
            && !matches!(
                v,
                "watchdog" | "heartbeat" | "collector_failed" | "unavailable" | "job_failure"
            )
        {
            notes.push(format!(
                "hale_signal {v:?} is not a signal hale knows: read as an ordinary condition"
            ));
        }
        if let Some(v) = self.label(HALE_REPORT_INTERVAL)
            && signal == Some("heartbeat")
        {
            let why = match parse_duration(v) {
                Ok(d) if d.is_zero() => Some("is not a duration above zero".to_string()),
                Ok(_) => None,
                Err(e) => Some(format!("cannot be read: {e}")),
            };
            if let Some(why) = why {
                notes.push(format!(
                    "hale_report_interval {v:?} {why}: nodeHealth.reportIntervalSeconds applies"
                ));
            }
        }
        if let Some(v) = self.label(HALE_STICKY)
            && !matches!(v, "true" | "false")
        {
            notes.push(format!(
                "hale_sticky {v:?} is not \"true\" or \"false\": not sticky"
            ));
        }
        if let Some(v) = self.label(PRIORITY)
            && self.priority().is_none()
        {
            notes.push(format!(
                "priority {v:?} is not a number (\"6\" or \"P6\"): no priority"
            ));
        }
        if let Some(v) = self.remediation()
            && v != super::policy::REBOOT
        {
            notes.push(format!(
                "hale_remediation {v:?} is not \"reboot\": starts no remediation"
            ));
        }
        notes
    }

    pub fn sticky(&self) -> bool {
        self.label(HALE_STICKY) == Some("true")
    }

    /// Fault class for fault-triggered eviction; defaults to the upper-cased type.
    pub fn fault_class(&self) -> super::Name {
        upper(
            self.label(HALE_FAULT_CLASS)
                .unwrap_or_else(|| self.condition_type()),
        )
    }

    /// Whether `stored` is what [`Alert::fault_class`] would return, without allocating.
    pub fn fault_class_is(&self, stored: &str) -> bool {
        let class = self
            .label(HALE_FAULT_CLASS)
            .unwrap_or_else(|| self.condition_type());
        if !class.is_ascii() {
            return class.to_uppercase() == stored;
        }
        class.len() == stored.len()
            && class
                .bytes()
                .zip(stored.bytes())
                .all(|(a, b)| a.to_ascii_uppercase() == b)
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
            .find(|t| !t.trim().is_empty())
            .map_or_else(|| self.alertname(), clip)
    }

    /// Cloudflare-style priority (`"6"` or `"P6"`); lower is more urgent.
    pub fn priority(&self) -> Option<u8> {
        let p = self.label(PRIORITY)?;
        p.trim_start_matches(['P', 'p']).parse().ok()
    }

    pub fn remediation(&self) -> Option<&str> {
        self.label(HALE_REMEDIATION)
    }

    /// Message: annotation `summary`, else `description`, else `message` (a blank
    /// one is none), else the alertname; prefixed `[P6] ` when the alert carries a
    /// priority and its text does not begin so already.
    pub fn message(&self) -> String {
        let text = self.text();
        match self.priority() {
            Some(p) if !text.starts_with(&format!("[P{p}]")) => format!("[P{p}] {text}"),
            _ => text.to_string(),
        }
    }
}

impl Alert<'_> {
    /// The alert as a Node condition shows it, Sciuro's way: named by its
    /// `alertname`, worded `[P<priority>] <summary>`, priority 9 without a
    /// `priority` label. `None` for an alert Sciuro refuses: no alertname, or a
    /// priority that is not an integer.
    pub fn notice(&self) -> Option<Notice> {
        let alertname = self.label(ALERTNAME)?;
        let priority = self.notice_priority()?;
        let mut message = format!("[P{priority}]");
        if let Some(summary) = &self.annotations.summary {
            message.push(' ');
            message.push_str(clip(&summary.0));
        }
        Some(Notice {
            alertname: alertname.into(),
            priority,
            message,
        })
    }

    /// Whether `stored` is what [`Alert::notice`] returns, checked without allocating.
    pub fn notice_is(&self, stored: Option<&Notice>) -> bool {
        let (Some(alertname), Some(priority)) = (self.label(ALERTNAME), self.notice_priority())
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
            Some(summary) => rest.strip_prefix(' ') == Some(clip(&summary.0)),
            None => rest.is_empty(),
        }
    }

    /// The `priority` label read as Go's `strconv.Atoi` reads it (Sciuro does): an
    /// optional sign and decimal digits; 9 when absent; `None` when malformed.
    fn notice_priority(&self) -> Option<i64> {
        let Some(raw) = self.labels.known(PRIORITY) else {
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
    pub alertname: super::Name,
    /// Lower is more urgent; the most urgent alert of a name is the one shown.
    pub priority: i64,
    pub message: String,
}

/// `10.0.0.14:9100` and `10.0.0.14:` → `10.0.0.14`, `[fe80::1]:9100` and `[fe80::1]` → `fe80::1` (the
/// address as a `node` label or an inventory writes it); values without a numeric
/// port, or bare IPv6 addresses, are left alone. A URL (a blackbox probe's
/// `instance`) is its host: `http://h1.example:9100/metrics` → `h1.example`.
pub fn strip_port(value: &str) -> &str {
    let value = match value.split_once("://") {
        Some((scheme, rest))
            if !scheme.is_empty()
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')) =>
        {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            authority
                .rsplit_once('@')
                .map_or(authority, |(_, host)| host)
        }
        _ => value,
    };
    // An empty port (`h11:`) is a port left out, as in a URL.
    let host = match value.rsplit_once(':') {
        Some((host, port))
            if port.bytes().all(|b| b.is_ascii_digit())
                && (!host.contains(':') || (host.starts_with('[') && host.ends_with(']'))) =>
        {
            host
        }
        _ => value,
    };
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .filter(|h| h.contains(':'))
        .unwrap_or(host)
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
            annotations: Annotations::default(),
            fingerprint: Cow::Borrowed("f"),
            starts_at: None,
            ends_at: None,
            state: AlertState::Active,
        }
    }

    /// Each contract label taken otherwise than written says so, and what it
    /// read instead; the contract's own values say nothing.
    #[test]
    fn labels_read_otherwise_than_written_are_noted() {
        type Case = (
            &'static [(&'static str, &'static str)],
            &'static [&'static str],
        );
        let cases: &[Case] = &[
            (
                &[
                    ("severity", "critical"),
                    ("hale_signal", "heartbeat"),
                    ("hale_report_interval", "15s"),
                    ("hale_sticky", "false"),
                    ("priority", "P6"),
                    ("hale_remediation", "reboot"),
                ],
                &[],
            ),
            (&[("severity", "info")], &[]),
            (&[("severity", "CRITICAL")], &[]),
            (
                &[("severity", "page")],
                &["severity \"page\" is not info, warning or critical: read as warning"],
            ),
            (
                &[("hale_signal", "heartbeats")],
                &[
                    "hale_signal \"heartbeats\" is not a signal hale knows: read as an ordinary condition",
                ],
            ),
            (
                &[("hale_signal", "heartbeat"), ("hale_report_interval", "0s")],
                &[
                    "hale_report_interval \"0s\" is not a duration above zero: nodeHealth.reportIntervalSeconds applies",
                ],
            ),
            (
                &[
                    ("hale_signal", "heartbeat"),
                    ("hale_report_interval", "1m30s"),
                ],
                &[],
            ),
            (
                &[
                    ("hale_signal", "heartbeat"),
                    ("hale_report_interval", "100000d"),
                ],
                &[
                    "hale_report_interval \"100000d\" cannot be read: `100000d` is longer than a century: nodeHealth.reportIntervalSeconds applies",
                ],
            ),
            // Read only with a heartbeat.
            (&[("hale_report_interval", "soon")], &[]),
            (
                &[("hale_sticky", "yes"), ("priority", "high")],
                &[
                    "hale_sticky \"yes\" is not \"true\" or \"false\": not sticky",
                    "priority \"high\" is not a number (\"6\" or \"P6\"): no priority",
                ],
            ),
            (
                &[("hale_remediation", "reimage")],
                &["hale_remediation \"reimage\" is not \"reboot\": starts no remediation"],
            ),
        ];
        for (labels, want) in cases {
            assert_eq!(alert(labels).notes(), *want, "{labels:?}");
        }
    }

    /// A fault class given in lower case is written upper-cased, as the default
    /// and `evictOnFaultClasses` are: the condition and its eviction join.
    #[test]
    fn a_fault_class_is_written_upper_cased() {
        let a = alert(&[
            ("alertname", "GpuEcc"),
            ("hale_condition", "gpu_xid"),
            ("hale_fault_class", "gpu_ecc_errors"),
        ]);
        assert_eq!(a.fault_class().as_str(), "GPU_ECC_ERRORS");
        assert!(a.fault_class_is("GPU_ECC_ERRORS"));
        assert!(!a.fault_class_is("gpu_ecc_errors"));
    }

    /// White space around a contract label's value is no part of it, as around a
    /// node id: the alert is priced and typed as if written without it.
    #[test]
    fn contract_labels_are_read_without_surrounding_space() {
        let a = alert(&[
            ("alertname", "SmartWarn"),
            ("hale_condition", " disk_degraded "),
            ("hale_reason", " SmartWarning "),
            ("severity", " critical"),
            ("hale_sticky", "true "),
        ]);
        assert_eq!(a.condition_type(), "disk_degraded");
        assert_eq!(a.reason(), "SmartWarning");
        assert_eq!(a.severity(), Severity::Critical);
        assert!(a.sticky());
        assert_eq!(a.notes(), Vec::<String>::new());
    }

    #[test]
    fn a_long_label_list_is_read_whole_and_checked_for_a_name_given_twice() {
        let list = |names: &[String]| {
            let pairs: Vec<String> = names.iter().map(|n| format!("\"{n}\":\"v-{n}\"")).collect();
            format!("{{{}}}", pairs.join(","))
        };
        let filler = |n: usize| (0..n).map(|i| format!("a{i:05}")).collect::<Vec<_>>();
        // The contract's labels after more than 255 others (Alertmanager writes
        // them sorted by name) are still read.
        let mut names = filler(300);
        names.extend(["node".to_string(), "severity".to_string()]);
        let text = list(&names);
        let labels: Labels = serde_json::from_str(&text).expect("parses");
        assert_eq!(labels.get("node"), Some("v-node"));
        assert_eq!(labels.known(SEVERITY), Some("v-severity"));
        assert_eq!(labels.get("a00299"), Some("v-a00299"));
        // A name given twice is refused wherever in the list it is, a label of
        // the contract or not, early or late.
        for (first, again) in [(3, 90), (40, 41), (0, 301), (299, 300)] {
            let mut names = filler(300);
            names.push("node".into());
            names.insert(again, names[first].clone());
            let text = list(&names);
            let e = serde_json::from_str::<Labels>(&text).expect_err("refused");
            assert!(
                e.to_string().contains("is given twice"),
                "{first}, {again}: {e}"
            );
        }
        let mut late_node = filler(300);
        late_node.extend(["node".to_string(), "node".to_string()]);
        let text = list(&late_node);
        let e = serde_json::from_str::<Labels>(&text).expect_err("refused");
        assert!(e.to_string().contains("label `node` is given twice"), "{e}");
    }

    #[test]
    fn a_log_line_shows_overrides_and_invisible_characters_escaped() {
        assert!(matches!(
            loggable("disk sda: ok"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(loggable("résumé"), "résumé");
        assert_eq!(
            loggable("line2 \u{202E}evil \u{200B}x\u{FEFF}"),
            "line2 \\u{202e}evil \\u{200b}x\\u{feff}"
        );
        assert_eq!(
            loggable("a\u{2028}b\u{E0041}c\u{FE0F}"),
            "a\\u{2028}b\\u{e0041}c\\u{fe0f}"
        );
        // Text that spells an escape out reads apart from the character.
        assert_eq!(
            loggable("real \u{202E} typed \\u{202e} \\x1b"),
            "real \\u{202e} typed \\\\u{202e} \\\\x1b"
        );
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
            (&[("instance", "[fe80::1]:9100")], Some("fe80::1")),
            (&[("instance", "[fe80::1]")], Some("fe80::1")),
            (&[("instance", "fe80::1")], Some("fe80::1")),
            (&[("instance", "rack1/n3")], Some("rack1/n3")),
            (&[("node", "")], None),
            (&[("alertname", "x")], None),
            // A port and no host names no node (found by fuzzing).
            (&[("instance", ":9100")], None),
            (&[("instance", " :9100")], None),
            (&[("instance", ":")], None),
            (&[("instance", "h11:")], Some("h11")),
            (&[("instance", "[fe80::1]:")], Some("fe80::1")),
            (&[("instance", "fe80::")], Some("fe80::")),
            (&[("node", " gpu-14 ")], Some("gpu-14")),
            (&[("instance", "\t10.0.0.14:9100 ")], Some("10.0.0.14")),
            (&[("node", " "), ("instance", "h:9100")], Some("h")),
            (&[("node", ".."), ("instance", "h:9100")], Some("h")),
            (&[("node", ".")], None),
            (
                &[("node", "a\nERROR forged"), ("instance", "h:9100")],
                Some("h"),
            ),
            (&[("node", "a\u{0}b")], None),
            (&[("node", "\u{202E}kcab")], None),
            // Invisible characters would show as another id.
            (
                &[("node", "zw\u{200B}node"), ("instance", "h:9100")],
                Some("h"),
            ),
            (&[("node", "\u{FEFF}n1")], None),
            (&[("node", "n\u{AD}1")], None),
            // So would a tag, a variation selector, a combining grapheme joiner,
            // a filler, a separator, a space that is not the ASCII one.
            (&[("node", "gpu-14\u{E0001}")], None),
            (&[("node", "gpu-1\u{E0034}4")], None),
            (&[("node", "gpu\u{34F}-14")], None),
            (&[("node", "gpu-14\u{FE0F}")], None),
            (&[("node", "gpu-14\u{E0100}")], None),
            (&[("node", "gpu-14\u{1D173}")], None),
            (&[("node", "gpu-14\u{FFF9}")], None),
            (&[("node", "gpu-14\u{1BCA0}")], None),
            (&[("node", "gpu\u{17B4}-14")], None),
            (&[("node", "gpu-14\u{3164}")], None),
            (&[("node", "gpu-14\u{FFA0}")], None),
            (&[("node", "\u{115F}gpu-14")], None),
            (&[("node", "gpu-14\u{2028}x")], None),
            (&[("node", "gpu-14\u{2029}x")], None),
            (&[("node", "gpu\u{A0}14")], None),
            (&[("node", "gpu\u{3000}14")], None),
            (&[("node", "gpu\u{202F}14")], None),
            (&[("node", "gpu-14\u{2800}")], None),
            (&[("node", "gpu-14\u{600}")], None),
            (&[("node", "gpu-14\u{13430}")], None),
            (&[("node", "gpu-14\u{16FE4}")], None),
            (&[("node", "gpu-14\u{FDD0}")], None),
            (&[("node", "gpu-14\u{FFFE}")], None),
            (&[("node", "gpu-14\u{1FFFF}")], None),
            (&[("node", "gpu-14\u{E000}")], None),
            (&[("node", "gpu-14\u{F0000}")], None),
            // Letters of every script stay names.
            (&[("node", "Grafikkarte-ß")], Some("Grafikkarte-ß")),
            (&[("node", "ノード-14")], Some("ノード-14")),
            (&[("node", "gpu 14")], Some("gpu 14")),
            // A URL is its host.
            (
                &[("instance", "http://h1.example:9100/metrics")],
                Some("h1.example"),
            ),
            (
                &[("instance", "https://user@[fe80::1]:443/x?y")],
                Some("fe80::1"),
            ),
            (&[("instance", "tcp://db-1.example")], Some("db-1.example")),
            (&[("instance", "http://:9100/metrics")], None),
        ];
        for (labels, want) in cases {
            assert_eq!(alert(labels).node(&id), *want, "{labels:?}");
        }
        // As long as a DNS name may be, and not a byte longer.
        let longest: &'static str = "n".repeat(MAX_NODE_ID).leak();
        let longer: &'static str = "n".repeat(MAX_NODE_ID + 1).leak();
        assert_eq!(alert(&[("node", longest)]).node(&id), Some(longest));
        let named = alert(&[("node", longer), ("instance", "h:9100")]);
        assert_eq!(named.node(&id), Some("h"));
        let keep = Identity {
            labels: vec!["instance".into()],
            strip_port: false,
            ..Identity::default()
        };
        assert_eq!(alert(&[("instance", "h:9100")]).node(&keep), Some("h:9100"));
        let instance_first = Identity {
            labels: vec!["instance".into(), "node".into()],
            ..Identity::default()
        };
        let portless = alert(&[("instance", ":9100"), ("node", "n1")]);
        assert_eq!(portless.node(&instance_first), Some("n1"));
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
        for (written, read) in [
            ("info", Severity::Info),
            ("Critical", Severity::Critical),
            ("CRITICAL", Severity::Critical),
            ("WARNING", Severity::Warning),
            ("page", Severity::Warning),
        ] {
            assert_eq!(
                alert(&[("severity", written)]).severity(),
                read,
                "{written}"
            );
        }
        assert!(!a.sticky());
        assert_eq!(a.fault_class(), "CALICOTOOMANYINTERFACESEARLY");
        assert!(a.fault_class_is("CALICOTOOMANYINTERFACESEARLY"));
        assert!(!a.fault_class_is("CALICO"));
        // Upper-cased beyond ASCII too.
        let e = alert(&[("alertname", "x"), ("hale_condition", "émoji_cond")]);
        assert_eq!(e.fault_class(), "ÉMOJI_COND");
        assert!(e.fault_class_is("ÉMOJI_COND") && !e.fault_class_is("éMOJI_COND"));
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
        a.annotations.summary = Some(Text::new("   "));
        assert_eq!(a.message(), "d", "a blank summary is none");
        a.annotations.summary = Some(Text::new("s"));
        assert_eq!(a.message(), "s");
        assert!(a.message_is("s"));
        // A priority the text says already is not said twice.
        let mut p = alert(&[("alertname", "A"), ("priority", "3")]);
        p.annotations.summary = Some(Text::new("[P3] already"));
        assert_eq!(p.message(), "[P3] already");
        assert!(p.message_is("[P3] already"));
        p.annotations.summary = Some(Text::new("plain"));
        assert_eq!(p.message(), "[P3] plain");
        let parsed: Labels = serde_json::from_str(r#"{"a":"x","b":"with \"escape\""}"#).unwrap();
        assert_eq!(parsed.get("a"), Some("x"));
        assert_eq!(parsed.get("b"), Some("with \"escape\""));
    }

    proptest::proptest! {
        /// The direct read agrees with chrono on whatever it reads, and leaves the
        /// rest to it: dates that do not exist, odd fractions and offsets, noise.
        #[test]
        fn times_read_as_chrono_reads_them(
            date in (0u32..10_000, 0u32..14, 0u32..33),
            time in (0u32..25, 0u32..61, 0u32..62),
            fraction in proptest::option::of("[0-9]{0,11}"),
            zone in proptest::prop_oneof!["Z", "z", "[+-][0-9]{2}:[0-9]{2}", "[+-][0-9]{4}", ""],
            noise in proptest::option::of((0usize..40, proptest::char::any())),
        ) {
            let mut text = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                date.0, date.1, date.2, time.0, time.1, time.2
            );
            if let Some(f) = fraction {
                text.push('.');
                text.push_str(&f);
            }
            text.push_str(&zone);
            if let Some((at, c)) = noise {
                let at = (0..=at.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
                text.insert(at, c);
            }
            let chrono = DateTime::parse_from_rfc3339(&text).ok().map(|t| t.with_timezone(&Utc));
            proptest::prop_assert_eq!(rfc3339(&text), chrono, "{}", text);
            if let Some(fast) = fast_rfc3339(text.as_bytes()) {
                proptest::prop_assert_eq!(Some(fast), chrono, "{}", text);
            }
        }
    }

    #[test]
    fn alertmanagers_times_take_the_direct_read() {
        for text in [
            "2026-08-05T12:00:00Z",
            "2026-08-05T12:00:00.123456789Z",
            "2026-08-05T14:00:00.5+02:00",
        ] {
            let fast = fast_rfc3339(text.as_bytes()).expect(text);
            assert_eq!(
                fast,
                DateTime::parse_from_rfc3339(text)
                    .unwrap()
                    .with_timezone(&Utc)
            );
        }
    }
}
