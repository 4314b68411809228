//! hale: Prometheus alerts in, node health (conditions, a reliability score, a durable
//! history) out. The decision core in [`core`] is pure; everything that talks to the
//! world — Alertmanager, the store, HTTP, metrics — is an adapter module at the edge.

pub mod alertmanager;
pub mod bmc;
pub mod collect;
pub mod config;
pub mod core;
pub mod election;
pub mod federation;
pub mod fleet_lock;
pub mod fuzzball;
pub mod http;
pub mod kubernetes;
pub mod liveness;
pub mod logline;
pub mod metrics;
pub mod notify;
pub mod orchestrator;
pub mod redact;
pub mod server;
pub mod service;
pub mod slurm;
pub mod store;
pub mod streak;
pub mod ui;
pub mod view;

/// The version and the commit hale was built from (`0.1.0 (3f2a9c1b7e04 2026-12-07)`):
/// `hale --version`, and `hale_build_info` on `/metrics`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("HALE_COMMIT"),
    " ",
    env!("HALE_COMMIT_DATE"),
    ")"
);

/// Awaiting a blocking task: its panic is carried on; cancelled — which happens
/// only while the runtime shuts down, dropping the task that awaits it too — it
/// never returns, where unwrapping the error would abort the process on its way
/// out (a SIGTERM while a Slurm command ran).
pub trait Joined<T> {
    fn joined(self) -> impl std::future::Future<Output = T> + Send;
}

impl<T: Send + 'static> Joined<T> for tokio::task::JoinHandle<T> {
    async fn joined(self) -> T {
        match self.await {
            Ok(value) => value,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => std::future::pending().await,
        }
    }
}

/// Install the TLS crypto provider reqwest uses (ring: aws-lc-rs would add a long C
/// build). Idempotent; [`http_client`] calls it, as must any other client.
pub fn init_tls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client builder for hale's outbound HTTP, TLS set up and the proxy variables
/// read as curl and Go read them: `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and
/// `NO_PROXY`, upper or lower case; a loopback host (`localhost`, 127.0.0.0/8,
/// `::1`) is never proxied, `NO_PROXY=*` proxies nothing, and a `NO_PROXY` entry in
/// brackets (`[::1]`) is read without them. A proxy hale cannot speak to (not
/// http or https) is left out, and [`proxies`] says so.
pub fn http_client() -> reqwest::ClientBuilder {
    init_tls();
    let mut builder = reqwest::Client::builder().no_proxy();
    let env = process_env;
    for p in proxies_in(&env).into_iter().filter(|p| p.usable) {
        let proxy = match p.scheme {
            "http" => reqwest::Proxy::http(p.url.as_str()),
            _ => reqwest::Proxy::https(p.url.as_str()),
        };
        if let Ok(proxy) = proxy {
            let bypass = reqwest::NoProxy::from_string(&no_proxy_in(&env));
            builder = builder.proxy(proxy.no_proxy(bypass));
        }
    }
    builder
}

/// Where the proxy variables are read from: this process's environment.
type Env<'a> = &'a dyn Fn(&'static str) -> Option<String>;

fn process_env(var: &'static str) -> Option<String> {
    std::env::var(var).ok()
}

/// A proxy the environment names for one scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvProxy {
    /// `http` or `https`: the requests it takes.
    pub scheme: &'static str,
    /// The variable that named it.
    pub var: &'static str,
    pub url: reqwest::Url,
    /// Whether hale can speak to it (an http or https proxy).
    pub usable: bool,
}

impl EnvProxy {
    /// As a log line names it, without credentials.
    pub fn shown(&self) -> String {
        format!(
            "{} {}",
            self.var,
            shown_url(&self.url).trim_end_matches('/')
        )
    }
}

/// The value of `name` or of its lower-case spelling, set and not empty.
fn env_var(env: Env, name: &'static str) -> Option<(&'static str, String)> {
    let lower: &'static str = match name {
        "HTTP_PROXY" => "http_proxy",
        "HTTPS_PROXY" => "https_proxy",
        "ALL_PROXY" => "all_proxy",
        _ => "no_proxy",
    };
    [name, lower].into_iter().find_map(|var| {
        env(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .map(|v| (var, v))
    })
}

/// The proxies the environment names for http and https requests (none where
/// `NO_PROXY` is `*`). A value without a scheme is taken as `http://`.
pub fn proxies() -> Vec<EnvProxy> {
    proxies_in(&process_env)
}

fn proxies_in(env: Env) -> Vec<EnvProxy> {
    if env_var(env, "NO_PROXY").is_some_and(|(_, v)| v == "*") {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (scheme, var) in [("http", "HTTP_PROXY"), ("https", "HTTPS_PROXY")] {
        let Some((var, value)) = env_var(env, var).or_else(|| env_var(env, "ALL_PROXY")) else {
            continue;
        };
        let text = if value.contains("://") {
            value
        } else {
            format!("http://{value}")
        };
        if let Ok(url) = reqwest::Url::parse(&text) {
            let usable = matches!(url.scheme(), "http" | "https");
            out.push(EnvProxy {
                scheme,
                var,
                url,
                usable,
            });
        }
    }
    out
}

/// `NO_PROXY` as the proxies take it: brackets off IPv6 entries, `*.` read as a
/// domain, and loopback.
fn no_proxy_in(env: Env) -> String {
    let mut entries: Vec<String> = env_var(env, "NO_PROXY")
        .map(|(_, v)| {
            v.split(',')
                // `*.example.com` as Go reads it: the domain, as `.example.com`.
                .map(|e| {
                    let e = e.trim().trim_start_matches('[').replace("]", "");
                    match e.strip_prefix("*.") {
                        Some(domain) => format!(".{domain}"),
                        None => e,
                    }
                })
                .filter(|e| !e.is_empty())
                .collect()
        })
        .unwrap_or_default();
    entries.extend(["localhost", "127.0.0.0/8", "::1"].map(String::from));
    entries.join(",")
}

/// What an error reaching `url` should add: the proxy the request went through,
/// where the environment names one for its scheme and neither loopback nor
/// `NO_PROXY` sends it direct.
pub fn proxy_note(url: &reqwest::Url) -> String {
    proxy_note_in(url, &process_env)
}

fn proxy_note_in(url: &reqwest::Url, env: Env) -> String {
    let host = url.host_str().unwrap_or("localhost");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if bypassed(host, &no_proxy_in(env)) {
        return String::new();
    }
    proxies_in(env)
        .into_iter()
        .find(|p| p.scheme == url.scheme() && p.usable)
        .map(|p| format!(" (through the proxy {})", p.shown()))
        .unwrap_or_default()
}

/// Whether a `NO_PROXY` list (as [`no_proxy_in`] makes it, loopback included)
/// sends requests to `host` direct: `*`; an address, or a CIDR holding it; a
/// name, or a domain it is under (`example.com` and `.example.com` alike).
fn bypassed(host: &str, list: &str) -> bool {
    use std::net::IpAddr;
    let ip = host.parse::<IpAddr>().ok();
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    list.split(',').map(str::trim).any(|entry| {
        if entry == "*" {
            return true;
        }
        match (ip, entry.split_once('/')) {
            (Some(ip), Some((net, bits))) => match (net.parse::<IpAddr>(), bits.parse::<u32>()) {
                (Ok(IpAddr::V4(net)), Ok(bits)) if bits <= 32 => match ip {
                    IpAddr::V4(ip) => {
                        let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
                        u32::from(ip) & mask == u32::from(net) & mask
                    }
                    IpAddr::V6(_) => false,
                },
                (Ok(IpAddr::V6(net)), Ok(bits)) if bits <= 128 => match ip {
                    IpAddr::V6(ip) => {
                        let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                        u128::from(ip) & mask == u128::from(net) & mask
                    }
                    IpAddr::V4(_) => false,
                },
                _ => false,
            },
            (Some(ip), None) => entry.parse::<IpAddr>().is_ok_and(|e| e == ip),
            (None, _) => {
                let domain = entry.trim_start_matches("*.").trim_start_matches('.');
                let domain = domain.to_ascii_lowercase();
                !domain.is_empty() && (host == domain || host.ends_with(&format!(".{domain}")))
            }
        }
    })
}

/// What a URL that failed to parse lacks where its host is an IPv6 address
/// written without brackets (`http://::1:9093`).
pub fn bracket_hint(url: &str) -> &'static str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host.matches(':').count() >= 2 && !host.contains('[') {
        " (an IPv6 address goes in brackets, as in http://[::1]:9093)"
    } else {
        ""
    }
}

/// The most a file hale reads for a secret, a token, credentials or a CA bundle
/// may hold (the largest CA bundles are a few hundred KiB).
pub const MAX_SMALL_FILE: u64 = 4 << 20;

/// `path` opened, where it is a regular file of at most [`MAX_SMALL_FILE`]: a
/// secret's or a certificate's path set to `/dev/zero`, a pipe, a log or a disk
/// image would otherwise be read until memory runs out, or waited on for ever.
/// An error names the file, never its text.
pub fn small_file(path: &std::path::Path) -> Result<std::fs::File, String> {
    let cannot = |e: std::io::Error| {
        format!(
            "cannot read {}: {e}{}",
            path.display(),
            unexpanded(path).unwrap_or_default()
        )
    };
    let meta = std::fs::metadata(path).map_err(cannot)?;
    if meta.is_dir() {
        return Err(format!("{} is a directory, not a file", path.display()));
    }
    if !meta.is_file() {
        return Err(format!(
            "{} is not a regular file (a device, a pipe?)",
            path.display()
        ));
    }
    if meta.len() > MAX_SMALL_FILE {
        return Err(too_large(path));
    }
    std::fs::File::open(path).map_err(cannot)
}

/// What to say of a path that begins with `~` or `$`, which a shell would expand
/// and hale takes as written (a directory of that name under the one hale runs
/// in); `None` for any other.
pub fn unexpanded(path: &std::path::Path) -> Option<&'static str> {
    let first = path.components().next()?.as_os_str().to_string_lossy();
    (first.starts_with('~') || first.starts_with('$')).then_some(
        " (hale does not expand `~` or environment variables: write the path out in full, or `./` before a name that does begin so)",
    )
}

fn too_large(path: &std::path::Path) -> String {
    format!(
        "{} holds more than {} MiB: not a secret, a token, credentials or a CA bundle",
        path.display(),
        MAX_SMALL_FILE >> 20
    )
}

/// The bytes of [`small_file`] `path`, read no further than its limit.
pub fn read_small(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    small_file(path)?
        .take(MAX_SMALL_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_SMALL_FILE {
        return Err(too_large(path));
    }
    Ok(bytes)
}

/// [`read_small`], as UTF-8 text.
pub fn read_small_text(path: &std::path::Path) -> Result<String, String> {
    String::from_utf8(read_small(path)?).map_err(|_| {
        format!(
            "cannot read {}: it is not UTF-8 text (a binary file?)",
            path.display()
        )
    })
}

/// The certificates of a PEM bundle, to verify a server by instead of the system's
/// roots; an error names the file.
pub fn certificates(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>, String> {
    let pem = read_small(path)?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(c) if !c.is_empty() => Ok(c),
        _ => Err(format!("{} holds no PEM certificate", path.display())),
    }
}

/// One URL path segment, percent-encoded: a node id may hold `/`, `:`, `?`, `#` or
/// spaces, and one that is all dots (`.`, `..`) is encoded whole, so no client or
/// server takes it for a step in the path.
pub fn path_segment(text: &str) -> String {
    use std::fmt::Write as _;
    let dots = !text.is_empty() && text.bytes().all(|b| b == b'.');
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || (b"-_~".contains(&b)) || (b == b'.' && !dots) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A label value as the Prometheus text format writes it: `\\`, `"` and a newline
/// escaped (borrowed when there is nothing to escape, as nearly always).
pub fn label_value(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        return std::borrow::Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The bytes a [`hex`] text stands for; `None` for anything else.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A secret's file read: its text without surrounding white space (a trailing
/// newline or none), one line; an empty file is refused. The error names the
/// file, never the text.
pub fn secret_text(path: &std::path::Path) -> Result<String, String> {
    let secret = trimmed_text(path)?;
    // A second line would become part of the secret, which the other side then
    // refuses with no hint why.
    if secret.contains(['\r', '\n']) {
        return Err(format!(
            "{} holds more than one line: a secret is one line",
            path.display()
        ));
    }
    Ok(secret)
}

/// A file's text without surrounding white space or a byte-order mark; an
/// empty one refused.
fn trimmed_text(path: &std::path::Path) -> Result<String, String> {
    if path.as_os_str().is_empty() {
        return Err("must name a file".into());
    }
    let text = read_small_text(path)?;
    // A byte-order mark is what some editors write before the text, not part of it.
    match text.strip_prefix('\u{feff}').unwrap_or(&text).trim() {
        "" => Err(format!("{} is empty", path.display())),
        text => Ok(text.to_string()),
    }
}

/// A bearer token's file read as [`secret_text`] reads a secret, and one word
/// of visible ASCII: it travels in an `Authorization` header (RFC 6750), so a
/// file of two lines, a token with a space inside or a character beyond ASCII
/// (which no header compares equal) is refused here rather than never matching.
pub fn token_text(path: &std::path::Path) -> Result<String, String> {
    let token = trimmed_text(path)?;
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{} holds white space or a control character inside the token (more than one line?): a token is one word",
            path.display()
        ));
    }
    if !token.is_ascii() {
        return Err(format!(
            "{} holds a character beyond ASCII: a token travels in an HTTP header, which carries ASCII only",
            path.display()
        ));
    }
    Ok(token)
}

/// Whether two secrets are equal, in time that depends on neither (their digests
/// are compared, so not even their lengths show).
pub fn secrets_equal(a: &[u8], b: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    let (x, y) = (Sha256::digest(a), Sha256::digest(b));
    x.iter()
        .zip(y.iter())
        .fold(0u8, |acc, (p, q)| acc | (p ^ q))
        == 0
}

/// hale's `User-Agent` on every request it makes (Alertmanager, Kubernetes, webhooks,
/// the CLI), so their logs can tell it apart.
pub const USER_AGENT: &str = concat!("hale/", env!("CARGO_PKG_VERSION"));

/// A URL without user, password or query, for logs and labels.
pub fn shown_url(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_password(None);
    let _ = u.set_username("");
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

/// A webhook endpoint as logs and metric labels show it: scheme, host and port,
/// and in place of the rest (path, query, credentials) `…` and 8 hex digits of an
/// HMAC-SHA256 of it keyed by the endpoint's signing `secret`. Chat services put
/// a secret in the path (`hooks.slack.com/services/T…/B…/<secret>`), others in
/// the query (`?token=…`), so neither is ever shown; the digest still tells two
/// endpoints on one host apart, and, keyed, cannot be matched against guessed
/// paths by whoever reads the open `/metrics`. An endpoint with a path alone keeps
/// the digest of its path.
pub fn shown_endpoint(url: &reqwest::Url, secret: &[u8]) -> String {
    use hmac::{Hmac, KeyInit, Mac};
    let origin = url.origin().ascii_serialization();
    let path = match url.path() {
        "/" => "",
        path => path,
    };
    let credentials = !url.username().is_empty() || url.password().is_some();
    if path.is_empty() && url.query().is_none() && !credentials {
        return origin;
    }
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(path.as_bytes());
    if let Some(query) = url.query() {
        mac.update(b"?");
        mac.update(query.as_bytes());
    }
    if credentials {
        mac.update(b"\0");
        mac.update(url.username().as_bytes());
        mac.update(b":");
        mac.update(url.password().unwrap_or("").as_bytes());
    }
    let digest = mac.finalize().into_bytes();
    format!("{origin}/…{}", hex(&digest[..4]))
}

/// Text meant as a URL or an address, as it may be shown whether or not it parses
/// (an error about it): any `user:password@` before the host, the query and the
/// fragment left out.
pub fn shown_address(text: &str) -> String {
    let start = text.find("://").map_or(0, |i| i + 3);
    let rest = &text[start..];
    let rest = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let host = authority.rfind('@').map_or(0, |at| at + 1);
    format!("{}{}", &text[..start], &rest[host..])
}

/// A list of server URLs as [`shown_url`] shows each, comma-separated.
pub fn shown_urls<'u>(urls: impl IntoIterator<Item = &'u str>) -> String {
    urls.into_iter()
        .map(|u| match reqwest::Url::parse(u) {
            Ok(url) => shown_url(&url).trim_end_matches('/').to_string(),
            // Without an `@` it holds no user or password: shown as it is.
            Err(_) if !u.contains('@') => u.to_string(),
            Err(_) => "<not a URL>".into(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// An error and its causes, `outer: inner: innermost` (reqwest hides the cause that
/// says what actually went wrong, such as "Connection refused").
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// The module picture of the README's layout, held true: each module imports only
/// from layers below its own, so there is no cycle and the core stands on nothing.
#[cfg(test)]
mod tests {
    use super::Joined as _;
    use futures::FutureExt as _;

    /// A blocking task's panic goes on to its awaiter; a cancelled one (the
    /// runtime shutting down) leaves it waiting, never a panic.
    #[tokio::test]
    async fn a_cancelled_task_is_waited_for_and_a_panic_carried_on() {
        let task = tokio::spawn(std::future::pending::<u8>());
        task.abort();
        while !task.is_finished() {
            tokio::task::yield_now().await;
        }
        let waited = std::panic::AssertUnwindSafe(task.joined())
            .catch_unwind()
            .now_or_never();
        assert!(waited.is_none(), "no answer, and no panic");
        let panicked = tokio::task::spawn_blocking(|| -> u8 { panic!("inside") });
        let carried = std::panic::AssertUnwindSafe(panicked.joined())
            .catch_unwind()
            .await;
        assert!(carried.is_err());
    }

    /// An error names the proxy only where the request went through it: not to
    /// loopback, nor to a host `NO_PROXY` names (a domain, an address, a CIDR,
    /// a bracketed IPv6 address, `*`).
    #[test]
    fn an_error_names_the_proxy_only_where_it_was_used() {
        let note = |no_proxy: &str, url: &str| {
            let no_proxy = no_proxy.to_string();
            let env = move |var: &'static str| match var {
                "HTTP_PROXY" => Some("http://proxy:3128".to_string()),
                "NO_PROXY" => Some(no_proxy.clone()),
                _ => None,
            };
            super::proxy_note_in(&reqwest::Url::parse(url).unwrap(), &env)
        };
        let through = " (through the proxy HTTP_PROXY http://proxy:3128)";
        for (no_proxy, url, proxied) in [
            ("", "http://am.example:9093/", true),
            ("", "https://am.example:9093/", false),
            ("", "http://127.0.0.2:9093/", false),
            ("", "http://[::1]:9093/", false),
            ("", "http://LocalHost:9093/", false),
            (".example", "http://am.example:9093/", false),
            ("example", "http://am.example:9093/", false),
            ("*.example", "http://am.example:9093/", false),
            ("ample", "http://am.example:9093/", true),
            ("10.0.0.0/8", "http://10.2.3.4/", false),
            ("10.0.0.0/8", "http://11.2.3.4/", true),
            ("[2001:db8::1]", "http://[2001:db8::1]:9093/", false),
            ("2001:db8::/32", "http://[2001:db8::5]/", false),
            ("2001:db8::/32", "http://[2001:db9::5]/", true),
            ("*", "http://am.example:9093/", false),
        ] {
            let expected = if proxied { through } else { "" };
            assert_eq!(note(no_proxy, url), expected, "{no_proxy:?} {url}");
        }
    }

    /// The proxy variables as curl and Go read them: either case, ALL_PROXY
    /// behind the per-scheme ones, a bare host:port taken as http, `NO_PROXY=*`
    /// none, a socks proxy named as one hale cannot use; loopback and bracketed
    /// IPv6 entries added to what bypasses them.
    #[test]
    fn proxy_variables_are_read_as_curl_reads_them() {
        let read = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let env = move |var: &'static str| {
                vars.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone())
            };
            let shown: Vec<String> = super::proxies_in(&env)
                .iter()
                .map(|p| format!("{} {} {}", p.scheme, p.shown(), p.usable))
                .collect();
            (shown, super::no_proxy_in(&env))
        };
        let loopback = "localhost,127.0.0.0/8,::1";
        // The variables set; the proxies read (scheme, variable, URL, usable);
        // what bypasses them.
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], String);
        let table: &[Case] = &[
            (&[], &[], loopback.into()),
            (
                &[
                    ("http_proxy", "proxy:3128"),
                    ("HTTPS_PROXY", "https://u:p@p2:443"),
                ],
                &[
                    "http http_proxy http://proxy:3128 true",
                    "https HTTPS_PROXY https://p2 true",
                ],
                loopback.into(),
            ),
            (
                &[
                    ("ALL_PROXY", "http://all:8080"),
                    ("HTTP_PROXY", "http://h:1"),
                ],
                &[
                    "http HTTP_PROXY http://h:1 true",
                    "https ALL_PROXY http://all:8080 true",
                ],
                loopback.into(),
            ),
            (
                &[("all_proxy", "socks5://s:1080")],
                &[
                    "http all_proxy socks5://s:1080 false",
                    "https all_proxy socks5://s:1080 false",
                ],
                loopback.into(),
            ),
            (
                &[("HTTP_PROXY", "http://h:1"), ("NO_PROXY", " * ")],
                &[],
                format!("*,{loopback}"),
            ),
            (
                &[
                    ("HTTP_PROXY", ""),
                    ("no_proxy", "[::1], *.corp.example ,10.0.0.0/8"),
                ],
                &[],
                format!("::1,.corp.example,10.0.0.0/8,{loopback}"),
            ),
        ];
        for (vars, proxies, bypass) in table {
            assert_eq!(
                read(vars),
                (
                    proxies.iter().map(|p| p.to_string()).collect(),
                    bypass.clone()
                ),
                "{vars:?}"
            );
        }
    }
}

/// What `log` writes through a text subscriber with [`logline::Logfmt`], each record's
/// header (time, level, target) aside: one line a record.
#[cfg(test)]
pub(crate) fn captured(log: impl FnOnce()) -> String {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let written = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .fmt_fields(crate::logline::Logfmt)
        .with_ansi(false)
        .without_time()
        .with_level(false)
        .with_target(false)
        .with_writer(move || written.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, log);
    String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
}

#[cfg(test)]
mod layers {
    /// Bottom up.
    const LAYERS: &[&[&str]] = &[
        &["core"],
        &[
            "orchestrator",
            "store",
            "liveness",
            "fleet_lock",
            "server",
            "redact",
            "logline",
            "streak",
        ],
        &[
            "kubernetes",
            "fuzzball",
            "slurm",
            "bmc",
            "collect",
            "view",
            "election",
        ],
        &["config"],
        &["alertmanager", "notify", "federation"],
        &["metrics"],
        &["service"],
        &["http"],
        &["ui"],
    ];

    fn layer(module: &str) -> Option<usize> {
        LAYERS.iter().position(|l| l.contains(&module))
    }

    /// The crate modules `text` refers to in code (doc comments aside).
    fn uses(text: &str) -> Vec<String> {
        let mut found = Vec::new();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                found.push(name);
            }
        }
        found
    }

    #[test]
    fn each_module_imports_only_from_below() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut checked = 0;
        let mut files = vec![src.clone()];
        while let Some(path) = files.pop() {
            if path.is_dir() {
                // The core's tests build their settings from YAML through config.
                if !path.ends_with("core/tests") && !path.ends_with("bin") {
                    files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                }
                continue;
            }
            let top = path.strip_prefix(&src).unwrap();
            let module = top
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string();
            let Some(own) = layer(&module) else {
                // The crate root's helpers, and the binary's own modules.
                assert!(
                    ["lib", "main", "cli"].contains(&module.as_str()),
                    "{module} is in no layer: place it in LAYERS and the README's picture"
                );
                continue;
            };
            for used in uses(&std::fs::read_to_string(&path).unwrap()) {
                if let Some(theirs) = layer(&used) {
                    assert!(
                        theirs < own || used == module,
                        "{}: {module} (layer {own}) uses {used} (layer {theirs})",
                        path.display()
                    );
                }
            }
            checked += 1;
        }
        assert!(checked > 30, "read the crate's files");
    }
}
