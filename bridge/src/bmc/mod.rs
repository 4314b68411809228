//! The BMC port (DESIGN §8): out-of-band power control of a node's machine, beside
//! the orchestrator port. A kind (one file each: [`redfish`], [`ipmi`]) only reads
//! the power state and sends one request; [`Controller`] makes every operation
//! idempotent (asked for the state the machine is in, it sends nothing) and
//! confirmed (it reads the state back until it shows, or a deadline passes).
//! Credentials never leave this module: no `Debug`, log line, event or error
//! carries them.

pub mod config;
mod ipmi;
mod redfish;

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A machine's power as its BMC reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PowerState {
    On,
    Off,
}

impl PowerState {
    pub fn as_str(self) -> &'static str {
        match self {
            PowerState::On => "On",
            PowerState::Off => "Off",
        }
    }
}

/// One request a kind sends; the kind picks its own words for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    On,
    /// Ask the operating system to shut down.
    GracefulOff,
    ForceOff,
    /// Off and on again.
    Cycle,
    /// A hard reset, power staying on.
    Reset,
}

impl Request {
    pub fn as_str(self) -> &'static str {
        match self {
            Request::On => "on",
            Request::GracefulOff => "graceful_off",
            Request::ForceOff => "force_off",
            Request::Cycle => "cycle",
            Request::Reset => "reset",
        }
    }
}

/// The verbs an operator (or a flow) asks of a machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Status,
    On,
    /// Graceful, forced after `bmc.gracefulTimeout` (at once with `force`).
    Off,
    Cycle,
    Reset,
    /// Off (graceful, then forced), confirmed Off, then On, confirmed On: a reboot
    /// that is seen to have happened.
    Reboot,
}

impl Verb {
    pub const ALL: [Verb; 6] = [
        Verb::Status,
        Verb::On,
        Verb::Off,
        Verb::Cycle,
        Verb::Reset,
        Verb::Reboot,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Status => "status",
            Verb::On => "on",
            Verb::Off => "off",
            Verb::Cycle => "cycle",
            Verb::Reset => "reset",
            Verb::Reboot => "reboot",
        }
    }

    pub fn parse(text: &str) -> Option<Verb> {
        Verb::ALL.into_iter().find(|v| v.as_str() == text)
    }
}

/// A BMC failure: which node, which operation, what kind of failure. The detail
/// never holds a credential.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}{detail}", self.context())]
pub struct BmcError {
    pub node: Option<String>,
    pub op: Option<&'static str>,
    pub class: Failure,
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No answer (refused, timed out, TLS).
    Unreachable,
    /// The BMC refused the credentials.
    Auth,
    /// The BMC answered and refused the request, or answered nonsense.
    Refused,
    /// The request was taken, but the machine did not reach the state in time.
    Unconfirmed,
    /// hale has no way to reach this node's BMC (no address, bad address, no
    /// credentials).
    Missing,
}

impl BmcError {
    pub fn new(class: Failure, detail: impl Into<String>) -> Self {
        BmcError {
            node: None,
            op: None,
            class,
            detail: detail.into(),
        }
    }

    /// The same failure, said of `node` and `op`.
    pub fn during(mut self, node: &str, op: &'static str) -> Self {
        self.node.get_or_insert_with(|| node.to_string());
        self.op.get_or_insert(op);
        self
    }

    /// Every value [`BmcError::metric_label`] returns.
    pub const METRIC_LABELS: [&'static str; 5] =
        ["unreachable", "auth", "refused", "unconfirmed", "missing"];

    pub fn metric_label(&self) -> &'static str {
        match self.class {
            Failure::Unreachable => "unreachable",
            Failure::Auth => "auth",
            Failure::Refused => "refused",
            Failure::Unconfirmed => "unconfirmed",
            Failure::Missing => "missing",
        }
    }

    fn context(&self) -> String {
        match (&self.node, self.op) {
            (Some(n), Some(op)) => format!("node {n}: BMC {op}: "),
            (Some(n), None) => format!("node {n}: BMC: "),
            (None, Some(op)) => format!("BMC {op}: "),
            (None, None) => "BMC: ".into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, BmcError>;
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// What each kind implements: read the power, send one request.
pub trait Bmc: Send + Sync {
    /// `redfish` or `ipmi`, for metric labels.
    fn kind(&self) -> &'static str;
    fn state(&self) -> Fut<'_, PowerState>;
    fn send(&self, request: Request) -> Fut<'_, ()>;
    /// How often the power is read back while waiting for a change: each read is
    /// a request a busy BMC has to serve.
    fn poll_every(&self, configured: Duration) -> Duration {
        configured
    }
    /// Give back what the operation held (a Redfish session), so BMCs with few
    /// session slots are not left full.
    fn close(&self) -> Fut<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}

/// Where a node's BMC is, as Metal3 writes it.
#[derive(Clone, PartialEq, Eq)]
pub enum Address {
    /// `redfish+https://host/redfish/v1/Systems/1` (also `redfish+http`, and
    /// `redfish://`, which is https): the service root's origin and the system's path.
    Redfish {
        origin: reqwest::Url,
        system: String,
    },
    /// `ipmi://host:623`.
    Ipmi { host: String, port: u16 },
}

impl Address {
    pub fn parse(text: &str) -> std::result::Result<Address, String> {
        let text = text.trim();
        // Errors show it without credentials, which it may carry by mistake.
        let shown = crate::shown_address(text);
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("`{shown}` is not an address like redfish+https://host/redfish/v1/Systems/1 or ipmi://host:623"))?;
        match scheme {
            "redfish" | "redfish+https" | "redfish+http" => {
                let http = if scheme == "redfish+http" {
                    "http"
                } else {
                    "https"
                };
                let url = reqwest::Url::parse(&format!("{http}://{rest}"))
                    .map_err(|e| format!("`{shown}`: {e}"))?;
                if !url.username().is_empty() || url.password().is_some() {
                    return Err(
                        "a BMC address carries no credentials: put them in a credentialsFile"
                            .into(),
                    );
                }
                let system = url.path().trim_end_matches('/').to_string();
                if !system.starts_with("/redfish/v1/Systems/") {
                    return Err(format!(
                        "`{shown}` names no system: end it with the system's path, like /redfish/v1/Systems/1"
                    ));
                }
                let mut origin = url.clone();
                origin.set_path("/");
                origin.set_query(None);
                Ok(Address::Redfish { origin, system })
            }
            "ipmi" => {
                let rest = rest.trim_end_matches('/');
                if rest.contains('@') {
                    return Err(
                        "a BMC address carries no credentials: put them in a credentialsFile"
                            .into(),
                    );
                }
                if rest.contains('/') {
                    return Err(format!("`{shown}` is not an address like ipmi://host:623"));
                }
                let (host, port) = match rest.rsplit_once(':') {
                    Some((h, p)) if !h.ends_with(']') || p.is_empty() => (
                        h.to_string(),
                        p.parse::<u16>()
                            .map_err(|_| format!("`{shown}`: `{p}` is not a port"))?,
                    ),
                    _ => (rest.to_string(), 623),
                };
                if host.is_empty() {
                    return Err(format!("`{shown}` names no host"));
                }
                Ok(Address::Ipmi { host, port })
            }
            other => Err(format!(
                "`{other}` is not a BMC scheme (redfish+https, redfish+http, redfish, ipmi)"
            )),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Address::Redfish { .. } => "redfish",
            Address::Ipmi { .. } => "ipmi",
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Redfish { origin, system } => {
                let scheme = if origin.scheme() == "http" {
                    "redfish+http"
                } else {
                    "redfish+https"
                };
                let host = origin.host_str().unwrap_or_default();
                match origin.port() {
                    Some(p) => write!(f, "{scheme}://{host}:{p}{system}"),
                    None => write!(f, "{scheme}://{host}{system}"),
                }
            }
            Address::Ipmi { host, port } => write!(f, "ipmi://{host}:{port}"),
        }
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// A BMC user and password. `Debug` shows the user only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credentials({}, ***)", self.username)
    }
}

impl Credentials {
    pub fn new(username: &str, password: &str) -> Credentials {
        Credentials {
            username: username.into(),
            password: password.into(),
        }
    }

    /// `username:password` in a file, or a mounted Secret: a directory holding
    /// `username` and `password` files. The error names the path, never the text.
    pub fn read(path: &Path) -> std::result::Result<Credentials, String> {
        let read = |p: &Path| crate::read_small_text(p);
        let (username, password) = if path.is_dir() {
            let user = read(&path.join("username"))?;
            let pass = read(&path.join("password"))?;
            (
                user.trim().to_string(),
                pass.trim_end_matches(['\r', '\n']).to_string(),
            )
        } else {
            let text = read(path)?;
            let line = text.trim_end_matches(['\r', '\n']);
            let (u, p) = line.split_once(':').ok_or_else(|| {
                format!(
                    "{} is not `username:password` (or a directory with username and password files)",
                    path.display()
                )
            })?;
            (u.trim().to_string(), p.to_string())
        };
        if username.is_empty() || password.is_empty() {
            return Err(format!("{}: empty username or password", path.display()));
        }
        // A second line would become part of the password, which the BMC then
        // refuses with no hint why.
        if username.contains(['\r', '\n']) || password.contains(['\r', '\n']) {
            return Err(if path.is_dir() {
                format!(
                    "{}: its username or password file holds more than one line; each holds one",
                    path.display()
                )
            } else {
                format!(
                    "{}: more than one line; credentials are one `username:password` line",
                    path.display()
                )
            });
        }
        Ok(Credentials { username, password })
    }

    pub(crate) fn password(&self) -> &str {
        &self.password
    }

    /// What a BMC's answer must not repeat: the password, as it is, JSON-escaped
    /// and inside the basic authentication header.
    pub(crate) fn secrets(&self) -> crate::redact::Secrets {
        crate::redact::Secrets::new().with_basic(&self.username, &self.password)
    }

    /// `text` with the credentials blanked, for an error that quotes a BMC's answer.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.secrets().scrub(text)
    }
}

/// How hale trusts a Redfish BMC's certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// Trust only this CA (PEM).
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate (self-signed BMCs); said in the log at start.
    pub insecure: bool,
}

/// One node's BMC: where, as whom, how to trust it.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub address: Address,
    pub credentials: Credentials,
    pub tls: Tls,
}

/// Timings every BMC shares (`bmc` section).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// One request.
    pub timeout: Duration,
    /// A graceful off is forced after this; also how long any change may take to
    /// show in the power state.
    pub graceful: Duration,
    /// How often the power state is read back while waiting.
    pub poll: Duration,
    /// IPMI cipher suite.
    pub cipher_suite: u8,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            timeout: Duration::from_secs(10),
            graceful: Duration::from_secs(120),
            poll: Duration::from_secs(1),
            cipher_suite: 17,
        }
    }
}

/// Told of every request a BMC answered or failed, for the metrics.
pub trait Observer: Send + Sync {
    fn request(&self, kind: &'static str, operation: &'static str, result: &str, secs: f64);
}

/// Open a client for `target`.
pub fn connect(target: &Target, timing: Timing) -> Result<Box<dyn Bmc>> {
    match &target.address {
        Address::Redfish { .. } => Ok(Box::new(redfish::Redfish::new(target, timing)?)),
        Address::Ipmi { .. } => Ok(Box::new(ipmi::Ipmi::new(target, timing))),
    }
}

/// What an operation found and did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// The power state read before anything was sent.
    pub before: PowerState,
    /// The state confirmed at the end.
    pub after: PowerState,
    /// What was sent, in order (empty: the machine was already as asked).
    pub sent: Vec<&'static str>,
}

/// Runs the verbs over one BMC: idempotent, confirmed, each request observed.
pub struct Controller {
    bmc: Box<dyn Bmc>,
    timing: Timing,
    observer: Option<Arc<dyn Observer>>,
    /// Asked before a graceful off that went unconfirmed is forced: whether the
    /// action is still wanted.
    wanted: Option<Wanted>,
    /// A reboot of a machine that reads off is refused ([`Controller::leaving_off`]).
    leave_off: bool,
}

/// Whether an action under way is still wanted (an operator may have withdrawn it).
pub type Wanted = Box<dyn Fn() -> futures::future::BoxFuture<'static, bool> + Send + Sync>;

impl Controller {
    pub fn new(bmc: Box<dyn Bmc>, timing: Timing, observer: Option<Arc<dyn Observer>>) -> Self {
        Controller {
            bmc,
            timing,
            observer,
            wanted: None,
            leave_off: false,
        }
    }

    /// Refuse a reboot of a machine that reads off before anything is sent:
    /// someone switched it off, and a reboot would only power it on (hale's own
    /// flows; an operator's `reboot` of an off machine starts it).
    pub fn leaving_off(mut self) -> Self {
        self.leave_off = true;
        self
    }

    /// Force a graceful off that went unconfirmed only while `wanted` says so: an
    /// operator who put the node back in service meanwhile gets it running, not
    /// powered off under the work it took on again.
    pub fn forcing_only_while(mut self, wanted: Wanted) -> Self {
        self.wanted = Some(wanted);
        self
    }

    /// Do `verb`; `force` skips the graceful off. What the BMC held for it is
    /// given back whatever the outcome.
    pub async fn run(&self, verb: Verb, force: bool) -> Result<Outcome> {
        let result = self.run_open(verb, force).await;
        self.close().await;
        result
    }

    /// Finish a reboot a stopped process sent: a machine still on may be shutting
    /// down (the graceful off under way when that process stopped), so it is
    /// waited for, up to the graceful timeout, and started again once off; one
    /// that stays on is left on (the reboot was never sent, or is over). A machine
    /// already off is started.
    pub async fn finish_reboot(&self) -> Result<Outcome> {
        let result = self.finish_reboot_open().await;
        self.close().await;
        result
    }

    /// Finish a power-off a stopped process sent: nothing is sent again; the
    /// machine is waited for, up to the graceful timeout, to read off (a BMC may
    /// take its time to act on a forced off), and one still on is unconfirmed.
    pub async fn finish_off(&self) -> Result<Outcome> {
        let result = async {
            let before = self.read().await?;
            let after = match before {
                PowerState::Off => before,
                PowerState::On => self.wait_for(PowerState::Off, self.timing.graceful).await?,
            };
            Ok(Outcome {
                before,
                after,
                sent: Vec::new(),
            })
        }
        .await;
        self.close().await;
        result
    }

    /// Give back what the BMC held (a session).
    async fn close(&self) {
        if let Err(e) = self.bmc.close().await {
            tracing::debug!(error = %e, "closing the BMC session failed; it expires on its own");
        }
    }

    async fn finish_reboot_open(&self) -> Result<Outcome> {
        let before = self.read().await?;
        let mut sent = Vec::new();
        let off = match before {
            PowerState::Off => before,
            PowerState::On => match self.wait_for(PowerState::Off, self.timing.graceful).await {
                Ok(off) => off,
                Err(e) if e.class == Failure::Unconfirmed => before,
                Err(e) => return Err(e),
            },
        };
        let after = self.on(off, &mut sent).await?;
        Ok(Outcome {
            before,
            after,
            sent,
        })
    }

    async fn run_open(&self, verb: Verb, force: bool) -> Result<Outcome> {
        let before = self.read().await?;
        let mut sent = Vec::new();
        if verb == Verb::Reboot && self.leave_off && before == PowerState::Off {
            return Err(BmcError::new(
                Failure::Refused,
                "the machine reads Off before its reboot: switched off outside hale, so it is left off",
            ));
        }
        let after = match verb {
            Verb::Status => before,
            Verb::On => self.on(before, &mut sent).await?,
            Verb::Off => self.off(before, force, &mut sent).await?,
            Verb::Cycle | Verb::Reset if before == PowerState::Off => {
                // A machine that is off is started, not cycled.
                self.on(before, &mut sent).await?
            }
            Verb::Cycle => {
                self.send(Request::Cycle, &mut sent).await?;
                self.wait_for(PowerState::On, self.timing.graceful).await?
            }
            Verb::Reset => {
                self.send(Request::Reset, &mut sent).await?;
                self.wait_for(PowerState::On, self.timing.graceful).await?
            }
            Verb::Reboot => {
                let off = self.off(before, force, &mut sent).await?;
                self.on(off, &mut sent).await?
            }
        };
        Ok(Outcome {
            before,
            after,
            sent,
        })
    }

    async fn on(&self, now: PowerState, sent: &mut Vec<&'static str>) -> Result<PowerState> {
        if now == PowerState::On {
            return Ok(now);
        }
        self.send(Request::On, sent).await?;
        self.wait_for(PowerState::On, self.timing.graceful).await
    }

    async fn off(
        &self,
        now: PowerState,
        force: bool,
        sent: &mut Vec<&'static str>,
    ) -> Result<PowerState> {
        if now == PowerState::Off {
            return Ok(now);
        }
        if !force {
            match self.send(Request::GracefulOff, sent).await {
                Ok(()) => match self.wait_for(PowerState::Off, self.timing.graceful).await {
                    Ok(off) => return Ok(off),
                    Err(e) if e.class == Failure::Unconfirmed => {}
                    Err(e) => return Err(e),
                },
                // A BMC that offers no graceful shutdown is powered off.
                Err(e) if e.class == Failure::Refused => {}
                Err(e) => return Err(e),
            }
            if let Some(wanted) = &self.wanted
                && !wanted().await
            {
                // The shutdown asked for may still complete (an OS taking its
                // time): followed for another graceful timeout, and a machine that
                // goes off is started again, as the node is back in service.
                let detail = match self.wait_for(PowerState::Off, self.timing.graceful).await {
                    Ok(off) => {
                        self.on(off, sent).await?;
                        "the action was withdrawn during the graceful off, which then completed: powered on again"
                    }
                    Err(e) if e.class == Failure::Unconfirmed => {
                        "the graceful off went unconfirmed, and the action was withdrawn meanwhile: not forced"
                    }
                    Err(e) => return Err(e),
                };
                return Err(BmcError::new(Failure::Unconfirmed, detail));
            }
        }
        self.send(Request::ForceOff, sent).await?;
        self.wait_for(PowerState::Off, self.timing.graceful).await
    }

    async fn send(&self, request: Request, sent: &mut Vec<&'static str>) -> Result<()> {
        let start = Instant::now();
        let result = self.bmc.send(request).await;
        self.observe(request.as_str(), &result, start);
        result?;
        sent.push(request.as_str());
        Ok(())
    }

    async fn read(&self) -> Result<PowerState> {
        let start = Instant::now();
        let result = self.bmc.state().await;
        self.observe("status", &result, start);
        result
    }

    /// Read the power until it shows `want`, for at most `limit`. A BMC busy with
    /// the change may fail a read or two: only the deadline ends the wait (wrong
    /// credentials end it at once).
    async fn wait_for(&self, want: PowerState, limit: Duration) -> Result<PowerState> {
        let deadline = Instant::now() + limit;
        let every = self.bmc.poll_every(self.timing.poll);
        let mut last: Result<PowerState>;
        loop {
            last = self.read().await;
            match &last {
                Ok(state) if *state == want => return Ok(*state),
                Err(e) if matches!(e.class, Failure::Auth | Failure::Missing) => return last,
                _ => {}
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(every).await;
        }
        let shown = match last {
            Ok(state) => format!("still reads {}", state.as_str()),
            Err(e) => format!("could not be read ({e})"),
        };
        Err(BmcError::new(
            Failure::Unconfirmed,
            format!(
                "the machine {shown} after {}s (asked for {})",
                limit.as_secs(),
                want.as_str()
            ),
        ))
    }

    fn observe<T>(&self, operation: &'static str, result: &Result<T>, start: Instant) {
        if let Some(o) = &self.observer {
            let label = match result {
                Ok(_) => "ok",
                Err(e) => e.metric_label(),
            };
            o.request(
                self.bmc.kind(),
                operation,
                label,
                start.elapsed().as_secs_f64(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_as_metal3_writes_them() {
        let cases = [
            (
                "redfish+https://10.1.0.14/redfish/v1/Systems/1",
                Ok("redfish+https://10.1.0.14/redfish/v1/Systems/1"),
            ),
            (
                "redfish+http://127.0.0.1:8000/redfish/v1/Systems/abc/",
                Ok("redfish+http://127.0.0.1:8000/redfish/v1/Systems/abc"),
            ),
            (
                "redfish://bmc-7.example/redfish/v1/Systems/System.Embedded.1",
                Ok("redfish+https://bmc-7.example/redfish/v1/Systems/System.Embedded.1"),
            ),
            ("ipmi://10.1.0.15:623", Ok("ipmi://10.1.0.15:623")),
            ("ipmi://10.1.0.15", Ok("ipmi://10.1.0.15:623")),
            ("ipmi://bmc:6230/", Ok("ipmi://bmc:6230")),
            ("redfish+https://10.1.0.14/", Err("names no system")),
            (
                "redfish+https://root:pw@10.1.0.14/redfish/v1/Systems/1",
                Err("no credentials"),
            ),
            ("ipmi://root:pw@10.1.0.15:623", Err("no credentials")),
            ("ipmi://10.1.0.15:x", Err("not a port")),
            ("ipmi://", Err("names no host")),
            ("idrac://10.1.0.15", Err("not a BMC scheme")),
            ("10.1.0.15", Err("not an address")),
        ];
        for (text, want) in cases {
            match (Address::parse(text), want) {
                (Ok(a), Ok(shown)) => assert_eq!(a.to_string(), shown, "{text}"),
                (Err(e), Err(part)) => assert!(e.contains(part), "{text}: {e}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn credentials_read_from_a_file_or_a_secret_and_never_show() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bmc");
        std::fs::write(&file, "admin:s3cr:et\n").unwrap();
        let c = Credentials::read(&file).unwrap();
        assert_eq!((c.username.as_str(), c.password()), ("admin", "s3cr:et"));
        assert!(!format!("{c:?}").contains("s3cr"));
        assert_eq!(c.scrub("bad s3cr:et here"), "bad *** here");

        let secret = dir.path().join("secret");
        std::fs::create_dir(&secret).unwrap();
        std::fs::write(secret.join("username"), "root\n").unwrap();
        std::fs::write(secret.join("password"), "calvin").unwrap();
        let c = Credentials::read(&secret).unwrap();
        assert_eq!((c.username.as_str(), c.password()), ("root", "calvin"));

        std::fs::write(&file, "no-colon-here").unwrap();
        let e = Credentials::read(&file).unwrap_err();
        assert!(
            e.contains("username:password") && !e.contains("no-colon"),
            "{e}"
        );
        std::fs::write(&file, "admin:\n").unwrap();
        assert!(Credentials::read(&file).unwrap_err().contains("empty"));
        for two in ["admin:realpass\nsecond:zzz\n", "admin:realpass\r\nx\n"] {
            std::fs::write(&file, two).unwrap();
            let e = Credentials::read(&file).unwrap_err();
            assert!(
                e.contains("more than one line") && !e.contains("realpass"),
                "{e}"
            );
        }
        std::fs::write(secret.join("password"), "calvin\nhobbes\n").unwrap();
        assert!(
            Credentials::read(&secret)
                .unwrap_err()
                .contains("more than one line")
        );
    }

    /// A machine that changes state a few reads after it is asked.
    struct Slow {
        state: std::sync::Mutex<(PowerState, Option<(PowerState, u32)>)>,
        sent: std::sync::Mutex<Vec<Request>>,
        ignores_graceful: bool,
    }

    impl Bmc for Slow {
        fn kind(&self) -> &'static str {
            "test"
        }
        fn state(&self) -> Fut<'_, PowerState> {
            Box::pin(async {
                let mut s = self.state.lock().unwrap();
                if let Some((to, reads)) = s.1 {
                    if reads == 0 {
                        s.0 = to;
                        s.1 = None;
                    } else {
                        s.1 = Some((to, reads - 1));
                    }
                }
                Ok(s.0)
            })
        }
        fn send(&self, request: Request) -> Fut<'_, ()> {
            Box::pin(async move {
                self.sent.lock().unwrap().push(request);
                let to = match request {
                    Request::On | Request::Cycle | Request::Reset => PowerState::On,
                    Request::GracefulOff if self.ignores_graceful => return Ok(()),
                    Request::GracefulOff | Request::ForceOff => PowerState::Off,
                };
                self.state.lock().unwrap().1 = Some((to, 2));
                Ok(())
            })
        }
    }

    fn controller(on: bool, ignores_graceful: bool) -> (Controller, Arc<Slow>) {
        let start = if on { PowerState::On } else { PowerState::Off };
        let slow = Arc::new(Slow {
            state: std::sync::Mutex::new((start, None)),
            sent: std::sync::Mutex::new(Vec::new()),
            ignores_graceful,
        });
        struct Shared(Arc<Slow>);
        impl Bmc for Shared {
            fn kind(&self) -> &'static str {
                "test"
            }
            fn state(&self) -> Fut<'_, PowerState> {
                self.0.state()
            }
            fn send(&self, r: Request) -> Fut<'_, ()> {
                self.0.send(r)
            }
        }
        let timing = Timing {
            graceful: Duration::from_millis(50),
            poll: Duration::from_millis(1),
            ..Timing::default()
        };
        (
            Controller::new(Box::new(Shared(slow.clone())), timing, None),
            slow,
        )
    }

    /// A reboot taken up after a restart: a graceful off still under way is
    /// followed to off, then on; a machine that stays on is left so; one off is
    /// started.
    #[tokio::test]
    async fn a_reboot_taken_up_is_followed_through_its_shutdown() {
        use PowerState::{Off, On};
        for (start, shutting_down, sent) in [
            (On, true, &[Request::On][..]),
            (On, false, &[][..]),
            (Off, false, &[Request::On][..]),
        ] {
            let (c, bmc) = controller(start == On, false);
            if shutting_down {
                // Off after two more reads: the OS finishing its shutdown.
                bmc.state.lock().unwrap().1 = Some((Off, 2));
            }
            let out = c.finish_reboot().await.unwrap();
            assert_eq!(
                (out.before, out.after),
                (start, On),
                "{start:?} {shutting_down}"
            );
            assert_eq!(*bmc.sent.lock().unwrap(), sent, "{start:?} {shutting_down}");
        }
    }

    /// A fence's power-off taken up after a restart is never sent again: a machine
    /// the BMC is still switching off is followed to off, one off is confirmed, one
    /// that stays on is unconfirmed.
    #[tokio::test]
    async fn a_power_off_taken_up_is_waited_for_never_sent_again() {
        use PowerState::{Off, On};
        for (start, going_off) in [(On, true), (Off, false), (On, false)] {
            let (c, bmc) = controller(start == On, false);
            if going_off {
                bmc.state.lock().unwrap().1 = Some((Off, 2));
            }
            let result = c.finish_off().await;
            assert!(bmc.sent.lock().unwrap().is_empty(), "{start:?} {going_off}");
            match (start, going_off) {
                (On, false) => assert_eq!(result.unwrap_err().class, Failure::Unconfirmed),
                _ => {
                    let out = result.unwrap();
                    assert_eq!((out.before, out.after), (start, Off));
                }
            }
        }
    }

    /// A reboot withdrawn while its graceful off goes unconfirmed is not forced;
    /// one still wanted is.
    #[tokio::test]
    async fn a_graceful_off_is_forced_only_while_still_wanted() {
        for wanted in [false, true] {
            let (c, bmc) = controller(true, true);
            let c = c.forcing_only_while(Box::new(move || Box::pin(async move { wanted })));
            let result = c.run(Verb::Reboot, false).await;
            let sent = bmc.sent.lock().unwrap().clone();
            if wanted {
                assert!(result.is_ok(), "{result:?}");
                assert_eq!(sent, [Request::GracefulOff, Request::ForceOff, Request::On]);
            } else {
                let e = result.unwrap_err();
                assert!(
                    e.detail.contains("withdrawn") && e.detail.contains("not forced"),
                    "{e}"
                );
                assert_eq!(sent, [Request::GracefulOff], "nothing forced");
            }
        }
        // Withdrawn while an OS took its time to shut down, which it then did: on
        // again.
        let (c, bmc) = controller(true, true);
        let late = bmc.clone();
        let c = c.forcing_only_while(Box::new(move || {
            // Asked once the graceful wait ran out: the shutdown completes now.
            late.state.lock().unwrap().1 = Some((PowerState::Off, 2));
            Box::pin(async { false })
        }));
        let e = c.run(Verb::Reboot, false).await.unwrap_err();
        assert!(e.detail.contains("powered on again"), "{e}");
        assert_eq!(
            *bmc.sent.lock().unwrap(),
            [Request::GracefulOff, Request::On]
        );
    }

    #[tokio::test]
    async fn each_verb_is_idempotent_and_confirmed() {
        use PowerState::{Off, On};
        /// (verb, force, powered on, ignores graceful) → (after, requests sent)
        type Case = (Verb, bool, bool, bool, PowerState, &'static [Request]);
        let cases: &[Case] = &[
            (Verb::Status, false, true, false, On, &[]),
            (Verb::On, false, true, false, On, &[]),
            (Verb::On, false, false, false, On, &[Request::On]),
            (Verb::Off, false, false, false, Off, &[]),
            (Verb::Off, false, true, false, Off, &[Request::GracefulOff]),
            (Verb::Off, true, true, false, Off, &[Request::ForceOff]),
            (
                Verb::Off,
                false,
                true,
                true,
                Off,
                &[Request::GracefulOff, Request::ForceOff],
            ),
            (Verb::Cycle, false, true, false, On, &[Request::Cycle]),
            (Verb::Cycle, false, false, false, On, &[Request::On]),
            (Verb::Reset, false, true, false, On, &[Request::Reset]),
            (
                Verb::Reboot,
                false,
                true,
                false,
                On,
                &[Request::GracefulOff, Request::On],
            ),
            (
                Verb::Reboot,
                true,
                true,
                false,
                On,
                &[Request::ForceOff, Request::On],
            ),
            (Verb::Reboot, false, false, false, On, &[Request::On]),
        ];
        for &(verb, force, on, ignores, after, sent) in cases {
            let (c, slow) = controller(on, ignores);
            let out = c.run(verb, force).await.unwrap();
            assert_eq!(out.after, after, "{verb:?} force={force} on={on}");
            assert_eq!(
                &*slow.sent.lock().unwrap(),
                sent,
                "{verb:?} force={force} on={on}"
            );
        }
    }

    #[tokio::test]
    async fn a_machine_that_never_changes_is_unconfirmed() {
        struct Stuck;
        impl Bmc for Stuck {
            fn kind(&self) -> &'static str {
                "test"
            }
            fn state(&self) -> Fut<'_, PowerState> {
                Box::pin(async { Ok(PowerState::On) })
            }
            fn send(&self, _: Request) -> Fut<'_, ()> {
                Box::pin(async { Ok(()) })
            }
        }
        let timing = Timing {
            graceful: Duration::from_millis(20),
            poll: Duration::from_millis(1),
            ..Timing::default()
        };
        let c = Controller::new(Box::new(Stuck), timing, None);
        let e = c.run(Verb::Off, true).await.unwrap_err();
        assert_eq!(e.class, Failure::Unconfirmed);
        assert!(e.to_string().contains("still reads On"), "{e}");
    }
}
