//! The Alertmanager adapter: the v2 API poll (`GET /api/v2/alerts?receiver=…`, active
//! and suppressed) and the webhook payload (version 4). Both parse into the core's
//! [`Alert`], borrowing from the body so a 50,000-alert answer costs little to map.

use std::borrow::Cow;
use std::time::Duration;

use serde::Deserialize;

use crate::config::AlertmanagerConfig;
use crate::core::labels::{Alert, AlertState, Annotations, Labels, Text, rfc3339};

pub type Result<T, E = IngestError> = std::result::Result<T, E>;

/// A wait as an operator reads it: `60.0 s`, or `250 ms` under a second.
fn seconds(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum IngestError {
    #[error("cannot reach Alertmanager at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error(
        "Alertmanager at {url} sent no whole answer within {} (alertmanager.timeout, or 3x the last answer's time when longer)",
        seconds(*after)
    )]
    Timeout { url: String, after: Duration },
    #[error("Alertmanager at {url} answered HTTP {status}{}", refused_hint(*status, auth))]
    Status {
        url: String,
        status: u16,
        /// The key holding the credentials hale sent, if any.
        auth: Option<&'static str>,
    },
    #[error(
        "Alertmanager at {url} answered HTTP {status}, a redirect to {to}: hale follows none (its credentials would go wherever it points); set alertmanager.url to the address that answers"
    )]
    Redirected {
        url: String,
        status: u16,
        to: String,
    },
    #[error("not a valid {what}: {reason}")]
    Malformed { what: &'static str, reason: String },
    #[error("cannot send Alertmanager the credentials of {key}: {reason}")]
    Credentials { key: &'static str, reason: String },
    #[error("unsupported webhook payload version {0:?} (hale reads version \"4\")")]
    Version(String),
    #[error(
        "not an Alertmanager v2 alerts answer: {0} (is alertmanager.url an Alertmanager's, serving /api/v2?)"
    )]
    NotV2(&'static str),
    #[error(
        "Alertmanager at {url} sent an answer past alertmanager.maxAnswerBytes ({limit} bytes): cut off there, nothing applied"
    )]
    TooLarge { url: String, limit: usize },
    #[error(
        "Alertmanager at {url} routes no alerts to a receiver named {receiver:?} (alertmanager.receiver; its routes send to {}): it lists none for it, so nothing is taken from its answers",
        known.join(", ")
    )]
    NoReceiver {
        url: String,
        receiver: String,
        known: Vec<String>,
    },
}

/// What a refusal says about the credentials hale sent (`auth`: their key).
fn refused_hint(status: u16, auth: &Option<&'static str>) -> String {
    match (status, auth) {
        (401, Some(key)) => format!(" (it refused the credentials of {key})"),
        (401, None) => {
            " (it asks for credentials: alertmanager.basicAuth or alertmanager.bearerTokenFile)"
                .into()
        }
        (403, Some(key)) => format!(" (the credentials of {key} lack the permission)"),
        _ => String::new(),
    }
}

impl IngestError {
    /// Low-cardinality label for failure counters.
    /// Every value [`IngestError::metric_label`] returns.
    pub const METRIC_LABELS: [&'static str; 8] = [
        "unreachable",
        "timeout",
        "status",
        "malformed",
        "version",
        "credentials",
        "too_large",
        "receiver",
    ];

    pub fn metric_label(&self) -> &'static str {
        match self {
            IngestError::Unreachable { .. } => "unreachable",
            IngestError::Timeout { .. } => "timeout",
            IngestError::Status { .. } | IngestError::Redirected { .. } => "status",
            IngestError::Malformed { .. } => "malformed",
            IngestError::Version(_) | IngestError::NotV2(_) => "version",
            IngestError::Credentials { .. } => "credentials",
            IngestError::TooLarge { .. } => "too_large",
            IngestError::NoReceiver { .. } => "receiver",
        }
    }
}

#[derive(Deserialize)]
struct V2Alert<'a> {
    #[serde(borrow)]
    labels: Labels<'a>,
    #[serde(borrow, default)]
    annotations: Annotations<'a>,
    #[serde(borrow)]
    fingerprint: Cow<'a, str>,
    #[serde(rename = "startsAt", borrow, default)]
    starts_at: Option<Text<'a>>,
    #[serde(rename = "endsAt", borrow, default)]
    ends_at: Option<Text<'a>>,
    #[serde(borrow)]
    status: V2Status<'a>,
}

#[derive(Deserialize)]
struct V2Status<'a> {
    #[serde(borrow)]
    state: Cow<'a, str>,
}

/// The longest fingerprint a webhook delivery's alert may carry, in bytes.
pub const MAX_FINGERPRINT: usize = 128;

/// How deep a poll's answer may nest its lists and objects: Alertmanager's nest
/// four deep. The parser skips what it does not read (a field it does not know,
/// a value of the wrong type) recursively, one stack frame a level: a value
/// nested deeper than the stack holds would end the process.
const MAX_NESTING: usize = 128;

/// Whether no list or object of the JSON `text` lies more than `limit` deep; if
/// one does, the byte offset of its opening bracket. Brackets inside strings do
/// not count. Malformed JSON is left to the parser, which stops at its first
/// fault: up to it, this reads strings and brackets as the parser does.
///
/// 64 bytes at a time, as simdjson finds a document's structure: a bit per byte
/// for each quote, backslash, opening and closing bracket; the escaped bytes from
/// the backslashes; the bytes inside strings from the unescaped quotes (a running
/// XOR); then the brackets outside strings counted. A block whose openings could
/// pass the limit is walked bracket by bracket.
fn nested_within(text: &[u8], limit: usize) -> std::result::Result<(), usize> {
    let limit = limit as i64;
    let mut depth = 0i64;
    // Whether the byte after the last block is escaped, and whether that block
    // ended inside a string.
    let (mut escape_next, mut in_string) = (false, 0u64);
    let mut padded = [b' '; 64];
    for (n, chunk) in text.chunks(64).enumerate() {
        let block: &[u8; 64] = match chunk.try_into() {
            Ok(block) => block,
            Err(_) => {
                padded[..chunk.len()].copy_from_slice(chunk);
                &padded
            }
        };
        let Bits {
            quotes,
            backslashes,
            opens,
            closes,
        } = Bits::of(block);
        // Each backslash not itself escaped escapes the byte after it.
        let mut escaped = u64::from(escape_next);
        let mut escapers = backslashes & !escaped;
        escape_next = false;
        while escapers != 0 {
            let at = escapers.trailing_zeros();
            if at == 63 {
                escape_next = true;
            } else {
                escaped |= 1 << (at + 1);
                escapers &= !(1 << (at + 1));
            }
            escapers &= escapers - 1;
        }
        // Inside a string: from an unescaped quote to the next.
        let mut inside = quotes & !escaped;
        for shift in [1, 2, 4, 8, 16, 32] {
            inside ^= inside << shift;
        }
        inside ^= in_string;
        in_string = if inside >> 63 == 1 { u64::MAX } else { 0 };
        let (opens, closes) = (opens & !inside, closes & !inside);
        if depth + i64::from(opens.count_ones()) <= limit {
            depth += i64::from(opens.count_ones()) - i64::from(closes.count_ones());
            continue;
        }
        let mut brackets = opens | closes;
        while brackets != 0 {
            let at = brackets.trailing_zeros();
            if opens >> at & 1 == 1 {
                depth += 1;
                if depth > limit {
                    return Err(n * 64 + at as usize);
                }
            } else {
                depth -= 1;
            }
            brackets &= brackets - 1;
        }
    }
    Ok(())
}

/// A 64-byte block's quotes, backslashes, opening (`[`, `{`) and closing (`]`,
/// `}`) brackets: bit `i` for byte `i`.
struct Bits {
    quotes: u64,
    backslashes: u64,
    opens: u64,
    closes: u64,
}

impl Bits {
    /// With SSE2, which every x86-64 processor has: 16 bytes compared at once.
    #[cfg(target_arch = "x86_64")]
    fn of(block: &[u8; 64]) -> Bits {
        use std::arch::x86_64::{
            _mm_and_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        let mut bits = [0u64; 4];
        for (i, part) in block.chunks_exact(16).enumerate() {
            // SAFETY: SSE2 is part of x86-64; `part` holds the 16 bytes read.
            let found = unsafe {
                let v = _mm_loadu_si128(part.as_ptr().cast());
                // `[` and `{`, `]` and `}` differ by one bit (0x20).
                let folded = _mm_and_si128(v, _mm_set1_epi8(0xDFu8 as i8));
                [
                    _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8))),
                    _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8))),
                    _mm_movemask_epi8(_mm_cmpeq_epi8(folded, _mm_set1_epi8(b'[' as i8))),
                    _mm_movemask_epi8(_mm_cmpeq_epi8(folded, _mm_set1_epi8(b']' as i8))),
                ]
            };
            for (b, m) in bits.iter_mut().zip(found) {
                *b |= u64::from(m as u16) << (16 * i);
            }
        }
        let [quotes, backslashes, opens, closes] = bits;
        Bits {
            quotes,
            backslashes,
            opens,
            closes,
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn of(block: &[u8; 64]) -> Bits {
        let mut bits = Bits {
            quotes: 0,
            backslashes: 0,
            opens: 0,
            closes: 0,
        };
        for (i, b) in block.iter().enumerate() {
            let bit = 1u64 << i;
            match b {
                b'"' => bits.quotes |= bit,
                b'\\' => bits.backslashes |= bit,
                b'[' | b'{' => bits.opens |= bit,
                b']' | b'}' => bits.closes |= bit,
                _ => {}
            }
        }
        bits
    }
}

/// Parse a `GET /api/v2/alerts` answer. `unprocessed` alerts have not been routed yet
/// and are treated as active: they are firing.
pub fn parse_v2(body: &[u8]) -> Result<Vec<Alert<'_>>> {
    let malformed = |reason: String| IngestError::Malformed {
        what: "Alertmanager v2 alerts answer",
        reason,
    };
    // One UTF-8 check of the whole body is cheaper than one per string.
    let text = std::str::from_utf8(body).map_err(|e| malformed(e.to_string()))?;
    // The v1 API's envelope (`{"status":"success","data":[…]}`), an error
    // object, a proxy's page: another shape than the v2 list, said as such.
    match text.trim_start().chars().next() {
        Some('[') => {}
        Some('{') => {
            return Err(IngestError::NotV2(
                "a JSON object where /api/v2/alerts answers a list (the v1 API's envelope?)",
            ));
        }
        _ => {
            return Err(malformed(
                "not the JSON list /api/v2/alerts answers (a proxy's page?)".into(),
            ));
        }
    }
    if let Err(at) = nested_within(body, MAX_NESTING) {
        return Err(malformed(format!(
            "nested more than {MAX_NESTING} deep at byte {at} (Alertmanager's answers nest four deep)"
        )));
    }
    // What the error quotes is left out: an answer that is not Alertmanager's may
    // be a proxy's echo of the request, credentials and all, and the error is
    // logged and served without a token.
    let raw: Vec<V2Alert> =
        sonic_rs::from_str(text).map_err(|e| malformed(crate::redact::unquoted(&e.to_string())))?;
    let mut alerts = Vec::with_capacity(raw.len());
    for (i, a) in raw.into_iter().enumerate() {
        checked(i, &a.labels, &a.fingerprint, &a.starts_at, &a.ends_at).map_err(malformed)?;
        let state = match a.status.state.as_ref() {
            "active" | "unprocessed" => AlertState::Active,
            "suppressed" => AlertState::Suppressed,
            other => {
                return Err(malformed(format!(
                    "alert {}: state {other:?} is none of active, suppressed and unprocessed",
                    a.fingerprint
                )));
            }
        };
        alerts.push(Alert {
            labels: a.labels,
            annotations: a.annotations,
            fingerprint: a.fingerprint,
            starts_at: a.starts_at.map(|t| t.0),
            ends_at: a.ends_at.map(|t| t.0),
            state,
        });
    }
    Ok(alerts)
}

/// What a poll's alert and a delivery's must be alike: a fingerprint (kept in
/// each condition it feeds and in the job failures it counts: Alertmanager's are
/// 16 hex digits), and its times in RFC 3339, which the conditions, their holds
/// and the trust in the source are reckoned from.
/// `i`: the alert's place in its list, which with its name finds an alert whose
/// fingerprint cannot.
fn checked(
    i: usize,
    labels: &Labels<'_>,
    fingerprint: &str,
    starts_at: &Option<Text<'_>>,
    ends_at: &Option<Text<'_>>,
) -> std::result::Result<(), String> {
    let which = || {
        let name = labels.get("alertname").unwrap_or("unnamed");
        format!("alert {name:?} (number {} in the list)", i + 1)
    };
    if fingerprint.is_empty() {
        return Err(format!("{} has no fingerprint", which()));
    }
    if fingerprint.len() > MAX_FINGERPRINT {
        return Err(format!(
            "{}: its fingerprint is {} bytes, over the {MAX_FINGERPRINT} hale takes (Alertmanager's are 16 hex digits)",
            which(),
            fingerprint.len()
        ));
    }
    for (field, time) in [("startsAt", starts_at), ("endsAt", ends_at)] {
        if let Some(time) = time.as_ref().filter(|t| rfc3339(&t.0).is_none()) {
            return Err(format!(
                "alert {fingerprint}: {field} {:?} is not an RFC 3339 time",
                time.0
            ));
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WebhookMessage<'a> {
    #[serde(borrow)]
    version: Cow<'a, str>,
    #[serde(borrow, default)]
    receiver: Option<Cow<'a, str>>,
    #[serde(default)]
    truncated_alerts: u64,
    #[serde(borrow)]
    alerts: Vec<WebhookAlert<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WebhookAlert<'a> {
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(borrow)]
    labels: Labels<'a>,
    #[serde(borrow, default)]
    annotations: Annotations<'a>,
    #[serde(borrow, default)]
    fingerprint: Cow<'a, str>,
    #[serde(borrow, default)]
    starts_at: Option<Text<'a>>,
    #[serde(borrow, default)]
    ends_at: Option<Text<'a>>,
}

/// One webhook delivery.
pub struct Delivery<'a> {
    /// The receiver Alertmanager sent it for.
    pub receiver: Option<Cow<'a, str>>,
    pub alerts: Vec<Alert<'a>>,
    /// Alerts Alertmanager left out of this delivery (`max_alerts`): poll at once.
    pub truncated: u64,
}

/// Parse a webhook body (payload version 4).
pub fn parse_webhook(body: &[u8]) -> Result<Delivery<'_>> {
    let malformed = |reason: String| IngestError::Malformed {
        what: "Alertmanager webhook payload",
        reason,
    };
    let text = std::str::from_utf8(body).map_err(|e| malformed(e.to_string()))?;
    // serde would take an array for the message's fields in order, and say so in
    // its own terms.
    if !text.trim_start().starts_with('{') {
        return Err(malformed(
            "not a JSON object: Alertmanager sends one message object per delivery".into(),
        ));
    }
    let msg: WebhookMessage = serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
    if msg.version != "4" {
        return Err(IngestError::Version(msg.version.into_owned()));
    }
    let mut alerts = Vec::with_capacity(msg.alerts.len());
    for (i, a) in msg.alerts.into_iter().enumerate() {
        let state = match a.status.as_ref() {
            "firing" => AlertState::Active,
            "resolved" => AlertState::Resolved,
            other => {
                return Err(IngestError::Malformed {
                    what: "Alertmanager webhook payload",
                    reason: format!("alert status {other:?} is neither firing nor resolved"),
                });
            }
        };
        checked(i, &a.labels, &a.fingerprint, &a.starts_at, &a.ends_at).map_err(malformed)?;
        alerts.push(Alert {
            labels: a.labels,
            annotations: a.annotations,
            fingerprint: a.fingerprint,
            starts_at: a.starts_at.map(|t| t.0),
            // A firing alert's is zeroed in notifications; a resolved one's says when
            // it ended, which tells a resolution from an expiry.
            ends_at: (state == AlertState::Resolved)
                .then_some(a.ends_at)
                .flatten()
                .map(|t| t.0),
            state,
        });
    }
    Ok(Delivery {
        receiver: msg.receiver,
        alerts,
        truncated: msg.truncated_alerts,
    })
}

/// An answer's allowance grows to this many times the last whole answer's time, so
/// a fleet that grows, or an Alertmanager slowed by a storm, is not cut off at the
/// configured timeout the first poll it passes it.
const ALLOWANCE_OVER_LAST: u32 = 3;
/// However slow the last answer, one poll waits no longer than this.
const MAX_ALLOWANCE: Duration = Duration::from_secs(600);

/// Reads the receiver's alerts from Alertmanager's v2 API.
#[derive(Clone)]
pub struct Client {
    /// Or why it could not be built (`alertmanager.caFile` unreadable since the
    /// configuration was loaded), said by every request.
    http: std::result::Result<reqwest::Client, String>,
    auth: Option<Auth>,
    alerts_url: reqwest::Url,
    status_url: reqwest::Url,
    timeout: Duration,
    /// Largest answer read (`alertmanager.maxAnswerBytes`).
    max_answer: usize,
    /// The receiver asked for (`alertmanager.receiver`).
    receiver: String,
    /// How long the last whole answer took to arrive.
    last_answer: std::sync::Arc<std::sync::Mutex<Option<Duration>>>,
}

/// The credentials hale sends Alertmanager, their files read at every request:
/// a password or token rotated under the running hale is used at the next poll.
#[derive(Clone)]
enum Auth {
    Basic(crate::config::BasicAuth),
    Bearer(std::path::PathBuf),
    /// A user written into `alertmanager.url`, which the client sends itself.
    InUrl,
}

impl Auth {
    /// The key they are configured under, for errors.
    fn key(&self) -> &'static str {
        match self {
            Auth::Basic(_) => "alertmanager.basicAuth",
            Auth::Bearer(_) => "alertmanager.bearerTokenFile",
            Auth::InUrl => "the user in alertmanager.url",
        }
    }
}

/// The part of `GET /api/v2/status` hale reads.
#[derive(Deserialize)]
struct Status {
    /// When this Alertmanager process started (RFC 3339).
    uptime: String,
    #[serde(default)]
    config: Option<StatusConfig>,
}

#[derive(Deserialize)]
struct StatusConfig {
    /// The configuration it runs, as YAML.
    original: String,
}

/// The part of Alertmanager's configuration hale reads: the receivers its routes
/// send to (a receiver no route names gets no alerts: Alertmanager does not even
/// create it).
#[derive(Deserialize)]
struct Routing {
    #[serde(default)]
    route: Option<Route>,
}

#[derive(Deserialize)]
struct Route {
    #[serde(default)]
    receiver: Option<String>,
    #[serde(default)]
    routes: Vec<Route>,
}

impl Route {
    /// The receivers this route and those under it name, each once, in order.
    fn receivers<'a>(&'a self, into: &mut Vec<&'a str>) {
        if let Some(r) = &self.receiver
            && !into.contains(&r.as_str())
        {
            into.push(r);
        }
        for route in &self.routes {
            route.receivers(into);
        }
    }
}

/// What `GET /api/v2/status` says.
struct StatusRead {
    started: chrono::DateTime<chrono::Utc>,
    /// The receivers its routes send to; `None` where they could not be read (no
    /// configuration shown, or one hale cannot parse: nothing is judged by it).
    receivers: Option<Vec<String>>,
}

/// The receivers the routes of Alertmanager's configuration (`original`) send to.
fn receivers(original: &str) -> Option<Vec<String>> {
    let read: Routing = serde_saphyr::from_str(original).ok()?;
    let route = read.route?;
    let mut names = Vec::new();
    route.receivers(&mut names);
    (!names.is_empty()).then(|| names.into_iter().map(str::to_string).collect())
}

/// Alertmanager reads `receiver` as a regular expression, anchored (`^(?:…)$`): a
/// name is sent with Go's metacharacters escaped (`regexp.QuoteMeta`), so it
/// matches that receiver only — `hale (gpu)` would otherwise match `hale gpu`, and
/// `hale[x` be refused.
fn regex_quoted(name: &str) -> String {
    let mut quoted = String::with_capacity(name.len());
    for c in name.chars() {
        if r"\.+*?()|[]{}^$".contains(c) {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted
}

impl Client {
    pub fn new(cfg: &AlertmanagerConfig) -> Client {
        let base = reqwest::Url::parse(&cfg.url).expect("validated by config");
        let under = |segments: &[&str]| {
            let mut url = base.clone();
            url.path_segments_mut()
                .expect("http URLs have paths")
                .pop_if_empty()
                .extend(segments);
            url
        };
        let mut url = under(&["api", "v2", "alerts"]);
        url.query_pairs_mut()
            .append_pair("receiver", &regex_quoted(&cfg.receiver))
            .append_pair("active", "true")
            .append_pair("silenced", "true")
            .append_pair("inhibited", "true")
            .append_pair("unprocessed", "true");
        // No redirects: the credentials would follow them, or a poll be trusted
        // from another host than the one configured.
        let builder = crate::http_client()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout.min(Duration::from_secs(5)))
            .user_agent(crate::USER_AGENT);
        let http = match &cfg.ca_file {
            Some(ca) => crate::certificates(ca)
                .map(|c| builder.tls_certs_only(c))
                .map_err(|e| format!("alertmanager.caFile: {e}")),
            None => Ok(builder),
        }
        .and_then(|b| b.build().map_err(|e| crate::error_chain(&e)));
        let auth = match (&cfg.basic_auth, &cfg.bearer_token_file) {
            (Some(basic), _) => Some(Auth::Basic(basic.clone())),
            (None, Some(file)) => Some(Auth::Bearer(file.clone())),
            (None, None) if !base.username().is_empty() || base.password().is_some() => {
                Some(Auth::InUrl)
            }
            (None, None) => None,
        };
        Client {
            http,
            auth,
            alerts_url: url,
            status_url: under(&["api", "v2", "status"]),
            timeout: cfg.timeout,
            max_answer: cfg.max_answer_bytes,
            receiver: cfg.receiver.clone(),
            last_answer: Default::default(),
        }
    }

    /// How long the next poll may take to arrive whole: `alertmanager.timeout`, or
    /// three times the last answer's time when that is longer (ten minutes at most).
    pub fn allowance(&self) -> Duration {
        let last = self.last_answer.lock().expect("answer time lock");
        last.map_or(self.timeout, |t| {
            (t * ALLOWANCE_OVER_LAST).clamp(self.timeout, MAX_ALLOWANCE.max(self.timeout))
        })
    }

    /// When the Alertmanager answering now started (`/api/v2/status` uptime), and the
    /// receivers it has. Asked after the alerts, so a restart between the two reads
    /// as one.
    async fn status(&self) -> Result<StatusRead> {
        let url = crate::shown_url(&self.status_url);
        let resp = self
            .get(self.status_url.clone(), &url)?
            .send()
            .await
            .map_err(|e| IngestError::Unreachable {
                url: url.clone(),
                reason: format!(
                    "{}{}",
                    crate::error_chain(&e.without_url()),
                    crate::proxy_note(&self.alerts_url)
                ),
            })?;
        self.answered(&resp, url)?;
        let malformed = |reason: String| IngestError::Malformed {
            what: "Alertmanager status answer",
            reason,
        };
        let body = resp
            .bytes()
            .await
            .map_err(|e| malformed(crate::error_chain(&e.without_url())))?;
        let status: Status = serde_json::from_slice(&body)
            .map_err(|e| malformed(crate::redact::unquoted(&e.to_string())))?;
        let started = chrono::DateTime::parse_from_rfc3339(&status.uptime)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|e| malformed(format!("its uptime is not an RFC 3339 time: {e}")))?;
        Ok(StatusRead {
            started,
            receivers: status.config.and_then(|c| receivers(&c.original)),
        })
    }

    fn shown_url(&self) -> String {
        crate::shown_url(&self.alerts_url)
    }

    /// A GET of `url` (shown as `shown`) with the credentials configured.
    fn get(&self, url: reqwest::Url, shown: &str) -> Result<reqwest::RequestBuilder> {
        let unreachable = |reason: String| IngestError::Unreachable {
            url: shown.to_string(),
            reason,
        };
        let request = self
            .http
            .as_ref()
            .map_err(|e| unreachable(e.clone()))?
            .get(url)
            .header("accept", "application/json");
        let unreadable = |key| move |reason| IngestError::Credentials { key, reason };
        Ok(match &self.auth {
            None | Some(Auth::InUrl) => request,
            Some(Auth::Basic(basic)) => {
                let password = crate::secret_text(&basic.password_file)
                    .map_err(unreadable("alertmanager.basicAuth.passwordFile"))?;
                request.basic_auth(&basic.username, Some(password))
            }
            Some(Auth::Bearer(file)) => {
                let token =
                    crate::token_text(file).map_err(unreadable("alertmanager.bearerTokenFile"))?;
                request.bearer_auth(token)
            }
        })
    }

    /// A refusal or error status as the error it is.
    fn answered(&self, resp: &reqwest::Response, url: String) -> Result<()> {
        // hale asks for no encoding: one there is a proxy's between, which hale
        // does not undo.
        if let Some(encoding) = resp
            .headers()
            .get(reqwest::header::CONTENT_ENCODING)
            .filter(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"))
        {
            return Err(IngestError::Malformed {
                what: "Alertmanager answer",
                reason: format!(
                    "it came with Content-Encoding {}, which hale did not ask for (a proxy between?)",
                    String::from_utf8_lossy(encoding.as_bytes())
                ),
            });
        }
        if resp.status().is_success() {
            return Ok(());
        }
        if resp.status().is_redirection() {
            let to = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| resp.url().join(l).ok())
                .map_or_else(|| "nowhere it says".to_string(), |to| crate::shown_url(&to));
            return Err(IngestError::Redirected {
                url,
                status: resp.status().as_u16(),
                to,
            });
        }
        Err(IngestError::Status {
            url,
            status: resp.status().as_u16(),
            auth: self.auth.as_ref().map(Auth::key),
        })
    }

    /// The names of the active alerts matching every one of `filters`
    /// (Alertmanager matchers), whatever receiver they go to, silenced and
    /// inhibited ones included: the remediation flow's blocking alerts. A silence
    /// stops the pages, not the trouble (kured reads Prometheus' ALERTS alike).
    pub async fn firing(&self, filters: &[String]) -> Result<Vec<String>> {
        let mut url = self.alerts_url.clone();
        url.set_query(None);
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("active", "true")
                .append_pair("silenced", "true")
                .append_pair("inhibited", "true");
            for f in filters {
                q.append_pair("filter", f);
            }
        }
        let shown = crate::shown_url(&url);
        let resp = self
            .get(url, &shown)?
            .send()
            .await
            .map_err(|e| IngestError::Unreachable {
                url: shown.clone(),
                reason: format!(
                    "{}{}",
                    crate::error_chain(&e.without_url()),
                    crate::proxy_note(&self.alerts_url)
                ),
            })?;
        self.answered(&resp, shown.clone())?;
        let body = resp.bytes().await.map_err(|e| IngestError::Unreachable {
            url: shown,
            reason: format!(
                "{}{}",
                crate::error_chain(&e.without_url()),
                crate::proxy_note(&self.alerts_url)
            ),
        })?;
        let alerts = parse_v2(&body)?;
        Ok(alerts
            .iter()
            .map(|a| a.labels.get("alertname").unwrap_or("?").to_string())
            .collect())
    }

    /// Fetch the raw answer; parse it with [`parse_v2`].
    pub async fn fetch(&self) -> Result<Answer> {
        let allowance = self.allowance();
        let began = std::time::Instant::now();
        let unreachable = |e: reqwest::Error| {
            if e.is_timeout() {
                IngestError::Timeout {
                    url: self.shown_url(),
                    after: allowance,
                }
            } else {
                IngestError::Unreachable {
                    url: self.shown_url(),
                    reason: format!(
                        "{}{}",
                        crate::error_chain(&e.without_url()),
                        crate::proxy_note(&self.alerts_url)
                    ),
                }
            }
        };
        let resp = self
            .get(self.alerts_url.clone(), &self.shown_url())?
            .timeout(allowance)
            .send()
            .await
            .map_err(unreachable)?;
        self.answered(&resp, self.shown_url())?;
        let date = resp
            .headers()
            .get(reqwest::header::DATE)
            .and_then(|d| d.to_str().ok())
            .and_then(|d| chrono::DateTime::parse_from_rfc2822(d).ok())
            .map(|d| d.with_timezone(&chrono::Utc));
        let body = self.read_body(resp).await.map_err(|e| match e {
            Read::Failed(e) => unreachable(e),
            Read::TooLarge => IngestError::TooLarge {
                url: self.shown_url(),
                limit: self.max_answer,
            },
        })?;
        *self.last_answer.lock().expect("answer time lock") = Some(began.elapsed());
        let status = self.status().await.map_err(|e| e.to_string());
        // A receiver Alertmanager does not have is asked for in vain: its answer
        // is empty, and taken as trusted (without the watchdog required) it would
        // end every condition.
        if let Ok(StatusRead {
            receivers: Some(known),
            ..
        }) = &status
            && !known.contains(&self.receiver)
        {
            return Err(IngestError::NoReceiver {
                url: self.shown_url(),
                receiver: self.receiver.clone(),
                known: known.clone(),
            });
        }
        let started = status.map(|s| s.started);
        Ok(Answer {
            body,
            date,
            started,
        })
    }
}

/// Why an answer's body was not read whole.
enum Read {
    Failed(reqwest::Error),
    /// Past `alertmanager.maxAnswerBytes`.
    TooLarge,
}

impl Client {
    /// The answer's body, refused past `alertmanager.maxAnswerBytes` — as soon as
    /// its declared length says so, else as its bytes come — so an answer without
    /// end (a proxy gone wrong) costs that much memory at most.
    async fn read_body(&self, mut resp: reqwest::Response) -> std::result::Result<Vec<u8>, Read> {
        let declared = resp.content_length().map(|n| n as usize);
        if declared.is_some_and(|n| n > self.max_answer) {
            return Err(Read::TooLarge);
        }
        let mut body = Vec::with_capacity(declared.unwrap_or(0));
        while let Some(chunk) = resp.chunk().await.map_err(Read::Failed)? {
            if body.len() + chunk.len() > self.max_answer {
                return Err(Read::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// One answer of the v2 API.
pub struct Answer {
    pub body: Vec<u8>,
    /// Alertmanager's clock when it answered (its `Date` header, to the second).
    pub date: Option<chrono::DateTime<chrono::Utc>>,
    /// When the Alertmanager that answered started, by its status; why its status
    /// could not be read.
    pub started: Result<chrono::DateTime<chrono::Utc>, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE_V2: &str = include_str!("../tests/data/alertmanager-0.25-api-v2-alerts.json");
    const SAMPLE_WEBHOOKS: &str =
        include_str!("../tests/data/alertmanager-0.25-webhook-deliveries.json");

    /// A refusal names the credentials hale sent, the user of the URL included;
    /// a file that cannot be read is said as such, not as a network fault.
    #[test]
    fn refusals_name_the_credentials_sent() {
        let key = |url: &str| {
            Client::new(&AlertmanagerConfig {
                url: url.into(),
                ..AlertmanagerConfig::default()
            })
            .auth
            .as_ref()
            .map(Auth::key)
        };
        assert_eq!(key("http://am:9093"), None);
        assert_eq!(
            key("https://hale:pw@am:9093"),
            Some("the user in alertmanager.url")
        );
        let refused = |status, auth| {
            IngestError::Status {
                url: "https://am:9093/api/v2/alerts".into(),
                status,
                auth,
            }
            .to_string()
        };
        assert!(
            refused(401, Some("the user in alertmanager.url")).ends_with(
                "answered HTTP 401 (it refused the credentials of the user in alertmanager.url)"
            )
        );
        assert!(refused(401, None).contains("it asks for credentials"));
        assert!(refused(403, Some("alertmanager.bearerTokenFile")).contains("lack the permission"));
        assert!(refused(500, Some("alertmanager.basicAuth")).ends_with("HTTP 500"));
        let unread = IngestError::Credentials {
            key: "alertmanager.basicAuth.passwordFile",
            reason: "/etc/hale/pw is empty".into(),
        };
        assert_eq!(unread.metric_label(), "credentials");
        assert!(!unread.to_string().contains("reach"), "{unread}");
    }

    #[test]
    fn the_receivers_are_read_from_the_configuration_alertmanager_shows() {
        // As Alertmanager 0.25's /api/v2/status shows its configuration: the
        // receivers routed to, nested ones too, each once; `spare` no route
        // names (Alertmanager does not create it).
        let original = "global:\n  resolve_timeout: 5m\nroute:\n  receiver: hale\n  routes:\n  - receiver: hale (gpu)\n    matchers:\n    - x=\"y\"\n    routes:\n    - receiver: deep\n    - receiver: hale\nreceivers:\n- name: hale\n  webhook_configs:\n  - send_resolved: true\n    url: <secret>\n- name: hale (gpu)\n- name: deep\n- name: spare\ntemplates: []\n";
        assert_eq!(
            receivers(original),
            Some(vec![
                "hale".to_string(),
                "hale (gpu)".to_string(),
                "deep".to_string()
            ])
        );
        // Nothing to judge by: no route shown, or no YAML.
        assert_eq!(receivers("receivers: [{ name: x }]\n"), None);
        assert_eq!(receivers("{{ not yaml"), None);
    }

    #[test]
    fn the_receiver_is_asked_for_by_its_name_only() {
        for (name, sent) in [
            ("hale", "hale"),
            ("hale (gpu)", r"hale \(gpu\)"),
            ("hale[x", r"hale\[x"),
            (r"a.b|c*d+e?f{2}^$\", r"a\.b\|c\*d\+e\?f\{2\}\^\$\\"),
        ] {
            assert_eq!(regex_quoted(name), sent, "{name}");
        }
        let url = Client::new(&AlertmanagerConfig {
            receiver: "hale (gpu)".into(),
            ..AlertmanagerConfig::default()
        })
        .alerts_url
        .to_string();
        assert!(url.contains("receiver=hale+%5C%28gpu%5C%29&"), "{url}");
    }

    #[test]
    fn parses_a_real_v2_answer() {
        let alerts = parse_v2(SAMPLE_V2.as_bytes()).unwrap();
        assert_eq!(alerts.len(), 4);
        let states: Vec<_> = alerts.iter().map(|a| (a.alertname(), a.state)).collect();
        assert!(states.contains(&("Watchdog", AlertState::Active)));
        assert!(
            states.iter().any(|(_, s)| *s == AlertState::Suppressed),
            "the silenced SMART alert is suppressed: {states:?}"
        );
        assert!(alerts.iter().all(|a| !a.fingerprint.is_empty()));
    }

    /// A poll's alerts are held to what a delivery's are: a fingerprint of at
    /// most 128 bytes, RFC 3339 times, a state Alertmanager gives.
    #[test]
    fn a_polls_alerts_are_checked_as_a_deliverys_are() {
        let answer = |fingerprint: &str, starts: &str, ends: &str, state: &str| {
            format!(
                r#"[{{"labels":{{"alertname":"A","node":"n1"}},"fingerprint":"{fingerprint}","startsAt":"{starts}","endsAt":"{ends}","status":{{"state":"{state}"}}}}]"#
            )
        };
        let t = "2026-12-07T10:00:00.123Z";
        let parse = |body: String| {
            parse_v2(body.as_bytes())
                .map(|a| a[0].state)
                .map_err(|e| e.to_string())
        };
        assert_eq!(parse(answer("f1", t, t, "active")), Ok(AlertState::Active));
        assert_eq!(
            parse(answer("f1", t, t, "unprocessed")),
            Ok(AlertState::Active)
        );
        assert_eq!(
            parse(answer("f1", t, t, "suppressed")),
            Ok(AlertState::Suppressed)
        );
        for (body, said) in [
            (
                answer("f1", t, "garbage", "active"),
                r#"alert f1: endsAt "garbage" is not an RFC 3339 time"#,
            ),
            (
                answer("f1", "0000-01-01", t, "active"),
                "startsAt \"0000-01-01\" is not",
            ),
            (
                answer(&"f".repeat(129), t, t, "active"),
                "fingerprint is 129 bytes",
            ),
            (
                answer("", t, t, "active"),
                r#"alert "A" (number 1 in the list) has no fingerprint"#,
            ),
            (
                answer("f1", t, t, "weird"),
                r#"state "weird" is none of active"#,
            ),
        ] {
            let e = parse(body).unwrap_err();
            assert!(
                e.contains("not a valid Alertmanager v2 alerts answer") && e.contains(said),
                "{e}"
            );
        }
        assert!(parse(answer(&"f".repeat(128), t, t, "active")).is_ok());
    }

    /// Nesting as deep as the parser's stack cannot hold, in a field hale does
    /// not read or a value of the wrong type: a malformed answer, not the end
    /// of the process (the parser skips such values recursively).
    #[test]
    fn an_answer_nested_past_the_limit_is_malformed() {
        let deep = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let extra = |depth: usize| {
            let end = SAMPLE_V2.rfind('}').unwrap();
            format!(
                "{}, \"extra\": {}{}",
                &SAMPLE_V2[..end],
                deep(depth),
                &SAMPLE_V2[end..]
            )
        };
        // On a thread of the runtime's stack size.
        let parse = |body: String| {
            std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || {
                    parse_v2(body.as_bytes())
                        .map(|a| a.len())
                        .map_err(|e| e.to_string())
                })
                .unwrap()
                .join()
                .unwrap()
        };
        assert_eq!(parse(extra(MAX_NESTING - 2)), Ok(4));
        for body in [extra(MAX_NESTING - 1), extra(100_000), deep(100_000)] {
            let e = parse(body).unwrap_err();
            assert!(e.contains("nested more than 128 deep at byte"), "{e}");
        }
    }

    /// The block-wise count against a byte-by-byte one, on bodies of quotes,
    /// escapes and brackets that cross the 64-byte blocks at every offset, each
    /// up to its first backslash outside a string (where the parser stops).
    #[test]
    fn nesting_is_counted_as_a_byte_by_byte_walk_counts_it() {
        fn unquoted_backslash(text: &[u8]) -> Option<usize> {
            let (mut inside, mut escaped) = (false, false);
            text.iter().position(|&b| {
                match (inside, b) {
                    _ if escaped => escaped = false,
                    (true, b'\\') => escaped = true,
                    (_, b'"') => inside = !inside,
                    (false, b'\\') => return true,
                    _ => {}
                }
                false
            })
        }
        fn walk(text: &[u8], limit: usize) -> std::result::Result<(), usize> {
            // A closing bracket too many is the parser's fault to find: no floor.
            let (mut depth, mut inside, mut escaped) = (0i64, false, false);
            for (i, &b) in text.iter().enumerate() {
                if inside {
                    match b {
                        _ if escaped => escaped = false,
                        b'\\' => escaped = true,
                        b'"' => inside = false,
                        _ => {}
                    }
                    continue;
                }
                match b {
                    b'"' => inside = true,
                    b'[' | b'{' => {
                        depth += 1;
                        if depth > limit as i64 {
                            return Err(i);
                        }
                    }
                    b']' | b'}' => depth -= 1,
                    _ => {}
                }
            }
            Ok(())
        }
        let alphabet = b"[]{}\"\\\\ax,:";
        let mut rng: u64 = 0x2545_f491_4f6c_dd1d;
        let mut over = 0;
        for case in 0..4000 {
            let len = 1 + case % 300;
            // Mostly openings at first, so some cases pass the limit.
            let body: Vec<u8> = (0..len)
                .map(|i| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    if i < len / 2 && rng % 3 == 0 {
                        b'['
                    } else {
                        alphabet[(rng >> 8) as usize % alphabet.len()]
                    }
                })
                .collect();
            let body = &body[..unquoted_backslash(&body).unwrap_or(body.len())];
            for limit in [4, 16] {
                let want = walk(body, limit);
                over += usize::from(want.is_err());
                assert_eq!(
                    nested_within(body, limit),
                    want,
                    "{}",
                    String::from_utf8_lossy(body)
                );
            }
        }
        assert!(over > 500, "{over} cases passed a limit");
        // A string, then 40 lists in one: 41 deep.
        let string = |inner: &str| format!("[\"{inner}\", {}{}]", "[".repeat(40), "]".repeat(40));
        assert_eq!(nested_within(string("[[[").as_bytes(), 41), Ok(()));
        assert_eq!(nested_within(string(r#"\"[["#).as_bytes(), 41), Ok(()));
        assert_eq!(nested_within(string(r"\\").as_bytes(), 40), Err(46));
    }

    #[test]
    fn parses_real_webhook_deliveries() {
        let bodies: Vec<serde_json::Value> = serde_json::from_str(SAMPLE_WEBHOOKS).unwrap();
        let mut resolved = 0;
        for body in &bodies {
            let bytes = serde_json::to_vec(body.get("body").unwrap_or(body)).unwrap();
            let d = parse_webhook(&bytes).unwrap();
            resolved += d
                .alerts
                .iter()
                .filter(|a| a.state == AlertState::Resolved)
                .count();
        }
        assert!(resolved >= 1, "one delivery resolves an alert");
    }

    #[test]
    fn rejects_what_is_not_a_webhook() {
        for (body, label) in [
            (&b"{"[..], "malformed"),
            (b"[]", "malformed"),
            (br#"{"version":"3","alerts":[]}"#, "version"),
            (
                br#"{"version":"4","alerts":[{"status":"odd","labels":{},"fingerprint":"f"}]}"#,
                "malformed",
            ),
            (
                br#"{"version":"4","alerts":[{"status":"firing","labels":{}}]}"#,
                "malformed",
            ),
            (
                br#"{"version":"4","alerts":[{"status":"firing","labels":{},"fingerprint":"f","startsAt":"yesterday"}]}"#,
                "malformed",
            ),
            (
                br#"{"version":"4","alerts":[{"status":"firing","labels":{},"fingerprint":"f","startsAt":""}]}"#,
                "malformed",
            ),
            (
                br#"{"version":"4","alerts":[{"status":"resolved","labels":{},"fingerprint":"f","startsAt":"2026-08-05T12:00:00Z","endsAt":"garbage"}]}"#,
                "malformed",
            ),
        ] {
            let e = parse_webhook(body).err().expect("rejected");
            assert_eq!(e.metric_label(), label, "{e}");
        }
        for body in [&b"[]"[..], b" [\"4\", \"firing\", \"hale\", []]", b"4", b""] {
            let e = parse_webhook(body).err().expect("rejected").to_string();
            assert!(e.contains("not a JSON object"), "{e}");
        }
        // A label named twice: Alertmanager would read the last, hale the first.
        let twice = br#"{"version":"4","alerts":[{"status":"firing","labels":{"alertname":"A","node":"n-a","node":"n-b"},"fingerprint":"f","startsAt":"2026-08-05T12:00:00Z"}]}"#;
        let e = parse_webhook(twice).err().expect("rejected").to_string();
        assert!(e.contains("label `node` is given twice"), "{e}");
        // A fingerprint of a megabyte would be kept in every condition it feeds.
        let long = |len: usize| {
            format!(
                r#"{{"version":"4","alerts":[{{"status":"firing","labels":{{"alertname":"A","node":"n"}},"fingerprint":"{}","startsAt":"2026-08-05T12:00:00Z"}}]}}"#,
                "f".repeat(len)
            )
        };
        assert!(parse_webhook(long(MAX_FINGERPRINT).as_bytes()).is_ok());
        let e = parse_webhook(long(MAX_FINGERPRINT + 1).as_bytes())
            .err()
            .expect("rejected");
        assert_eq!(e.metric_label(), "malformed");
        assert!(e.to_string().contains("fingerprint is 129 bytes"), "{e}");
    }

    #[test]
    fn garbage_from_the_api_is_an_error_not_an_empty_fleet() {
        let label = |body: &[u8]| parse_v2(body).expect_err("refused").metric_label();
        assert_eq!(label(b"<html>proxy error</html>"), "malformed");
        // Another shape than the v2 list: the v1 API's envelope, an error object.
        assert_eq!(label(br#"{"status":"success","data":[]}"#), "version");
        assert_eq!(label(b"  {}"), "version");
        assert_eq!(label(br#"[{"labels":{}}]"#), "malformed");
        assert_eq!(parse_v2(b"[]").unwrap().len(), 0);
        // What an answer that is not Alertmanager's holds is not repeated: a
        // proxy's echo of the request carries its credentials.
        for echo in [
            &br#""authorization: Bearer CANARY-77""#[..],
            br#"[{"labels": "authorization: Bearer CANARY-77"}]"#,
            b"authorization: Bearer CANARY-77",
        ] {
            let e = parse_v2(echo).expect_err("refused").to_string();
            assert!(!e.contains("CANARY"), "{e}");
        }
    }

    /// A request's line and headers, read off `conn`.
    async fn request_head(conn: &mut tokio::net::TcpStream) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).await.unwrap();
            request.extend_from_slice(&buf[..n]);
        }
        request
    }

    /// An Alertmanager on 127.0.0.1 that sends each alerts answer's headers at once
    /// and its body (`[]`) after the next of `delays`; other paths get 404.
    async fn slow_alertmanager(delays: Vec<Duration>) -> String {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let mut delays = delays.into_iter();
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                if !request_head(&mut conn)
                    .await
                    .starts_with(b"GET /api/v2/alerts")
                {
                    let _ = conn
                        .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .await;
                    continue;
                }
                let delay = delays.next().expect("no more polls than delays");
                tokio::spawn(async move {
                    conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n")
                        .await
                        .unwrap();
                    tokio::time::sleep(delay).await;
                    let _ = conn.write_all(b"[]").await;
                });
            }
        });
        url
    }

    #[tokio::test]
    async fn a_slow_answer_times_out_and_a_slower_fleet_stretches_the_allowance() {
        let ms = Duration::from_millis;
        let url = slow_alertmanager(vec![ms(1500), ms(300), ms(700)]).await;
        let client = Client::new(&AlertmanagerConfig {
            url,
            timeout: ms(500),
            ..AlertmanagerConfig::default()
        });
        assert_eq!(
            client.allowance(),
            ms(500),
            "the configured timeout until an answer came"
        );
        let e = client
            .fetch()
            .await
            .err()
            .expect("1.5 s is past the 0.5 s timeout");
        assert_eq!(e.metric_label(), "timeout", "{e}");
        assert!(e.to_string().contains("within 500 ms ("), "{e}");
        assert_eq!(
            client.allowance(),
            ms(500),
            "a timed-out answer teaches nothing"
        );

        client.fetch().await.expect("0.3 s fits");
        let allowance = client.allowance();
        assert!(
            allowance >= ms(900),
            "three times the 0.3 s answer: {allowance:?}"
        );
        assert!(allowance < ms(1500), "{allowance:?}");
        // Past the configured timeout, within three times the last answer.
        let answer = client
            .fetch()
            .await
            .expect("0.7 s fits the stretched allowance");
        assert_eq!(parse_v2(&answer.body).unwrap().len(), 0);
    }
    /// A redirect is not followed — the poll is trusted from the address
    /// configured or not at all — and says where it pointed; an answer in an
    /// encoding hale did not ask for says so, not that its bytes are bad.
    #[tokio::test]
    async fn a_redirect_or_an_encoding_is_said_as_such() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let answers: [&[u8]; 3] = [
            b"HTTP/1.1 302 Found\r\nlocation: http://localhost:1/api/v2/alerts?x=1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]",
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]",
        ];
        tokio::spawn(async move {
            for answer in answers {
                let (mut conn, _) = listener.accept().await.unwrap();
                request_head(&mut conn).await;
                conn.write_all(answer).await.unwrap();
            }
        });
        let client = Client::new(&AlertmanagerConfig {
            url,
            ..AlertmanagerConfig::default()
        });
        let e = client.fetch().await.err().expect("not followed");
        assert_eq!(e.metric_label(), "status");
        assert!(
            e.to_string()
                .contains("answered HTTP 302, a redirect to http://localhost:1/api/v2/alerts"),
            "{e}"
        );
        let e = client.fetch().await.err().expect("not decoded");
        assert_eq!(e.metric_label(), "malformed");
        assert!(e.to_string().contains("Content-Encoding gzip"), "{e}");
        client.fetch().await.expect("a plain answer");
    }
}
