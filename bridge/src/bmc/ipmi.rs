//! IPMI over LAN through `ipmitool -I lanplus`: the password travels in the
//! environment (`-E`, `IPMI_PASSWORD`), never on a command line another process
//! could read; the cipher suite is configurable (17 is real BMCs' usual, many
//! simulators speak only 0–3); every call is bounded by `bmc.timeout`.

use std::process::Stdio;
use std::time::Duration;

use super::{
    Bmc, BmcError, Credentials, Failure, Fut, PowerState, Request, Result, Target, Timing,
};

/// The `ipmitool` binary; tests and unusual installs may point elsewhere.
const IPMITOOL_ENV: &str = "HALE_IPMITOOL";

pub struct Ipmi {
    host: String,
    port: u16,
    credentials: Credentials,
    timing: Timing,
}

impl Ipmi {
    pub fn new(target: &Target, timing: Timing) -> Ipmi {
        let super::Address::Ipmi { host, port } = &target.address else {
            unreachable!("connect dispatches by address kind")
        };
        Ipmi {
            host: host.clone(),
            port: *port,
            credentials: target.credentials.clone(),
            timing,
        }
    }

    /// `ipmitool … chassis power WORD`; its standard output.
    async fn power(&self, word: &str) -> Result<String> {
        // A password IPMI cannot take (one read from a template's credentials,
        // which the configuration could not check) is said as what it is: ipmitool
        // refuses it before sending anything, in words hale would read as the
        // BMC's refusal.
        takes(&self.credentials).map_err(|e| {
            BmcError::new(
                Failure::Auth,
                format!(
                    "{}:{}: chassis power {word}: {e}: nothing was sent",
                    self.host, self.port
                ),
            )
        })?;
        let program = std::env::var(IPMITOOL_ENV).unwrap_or_else(|_| "ipmitool".into());
        // One session attempt per two seconds of the budget, at least one.
        let retries = (self.timing.timeout.as_secs() / 2).clamp(1, 5);
        let mut command = tokio::process::Command::new(&program);
        command
            .args(["-I", "lanplus", "-C"])
            .arg(self.timing.cipher_suite.to_string())
            .arg("-H")
            .arg(&self.host)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-U")
            .arg(&self.credentials.username)
            .args(["-E", "-N", "2", "-R"])
            .arg(retries.to_string())
            .args(["chassis", "power", word])
            .env("IPMI_PASSWORD", self.credentials.password())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|e| BmcError::new(Failure::Missing, format!("cannot run {program}: {e}")))?;
        let limit = self.timing.timeout + Duration::from_secs(1);
        let output = tokio::time::timeout(limit, child.wait_with_output())
            .await
            .map_err(|_| {
                BmcError::new(
                    Failure::Unreachable,
                    format!(
                        "no answer from {}:{} in {}s",
                        self.host,
                        self.port,
                        limit.as_secs()
                    ),
                )
            })?
            .map_err(|e| BmcError::new(Failure::Unreachable, e.to_string()))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            return Ok(stdout);
        }
        let stderr = self
            .credentials
            .scrub(String::from_utf8_lossy(&output.stderr).trim());
        let lower = stderr.to_ascii_lowercase();
        let class = if lower.contains("rakp")
            || lower.contains("unauthorized")
            || lower.contains("invalid user")
            || lower.contains("password")
        {
            Failure::Auth
        } else if lower.contains("unable to establish")
            || lower.contains("no response")
            || lower.contains("timeout")
            || lower.contains("insufficient resources")
        {
            Failure::Unreachable
        } else {
            Failure::Refused
        };
        let said = if class == Failure::Auth {
            "the BMC refused the credentials".to_string()
        } else {
            let line = stderr.lines().last().unwrap_or("").trim();
            if line.is_empty() {
                format!("ipmitool exited with {}", output.status)
            } else if lower.contains("unable to establish") {
                // ipmitool says the same whichever step of the session failed.
                format!(
                    "{line}: the BMC did not answer, refused the credentials, or offers no cipher suite bmc.cipherSuite names"
                )
            } else {
                line.to_string()
            }
        };
        Err(BmcError::new(
            class,
            format!("{}:{}: chassis power {word}: {said}", self.host, self.port),
        ))
    }
}

/// The most bytes of password an IPMI 2.0 session takes.
const MAX_PASSWORD: usize = 20;

/// Whether IPMI can take `credentials`: why not, if it cannot.
pub(super) fn takes(credentials: &Credentials) -> std::result::Result<(), String> {
    let n = credentials.password().len();
    if n > MAX_PASSWORD {
        return Err(format!(
            "the password is {n} bytes, and IPMI takes at most {MAX_PASSWORD}"
        ));
    }
    Ok(())
}

/// `Chassis Power is on|off`.
fn parse_status(stdout: &str) -> Option<PowerState> {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("Chassis Power is"))?;
    match line.trim().rsplit(' ').next()? {
        "on" => Some(PowerState::On),
        "off" => Some(PowerState::Off),
        _ => None,
    }
}

impl Bmc for Ipmi {
    fn kind(&self) -> &'static str {
        "ipmi"
    }

    /// Each read opens a new RMCP+ session; BMCs run out of them when asked every
    /// second.
    fn poll_every(&self, configured: Duration) -> Duration {
        configured.max(Duration::from_secs(3))
    }

    fn state(&self) -> Fut<'_, PowerState> {
        Box::pin(async {
            let out = self.power("status").await?;
            parse_status(&out).ok_or_else(|| {
                BmcError::new(
                    Failure::Refused,
                    format!("unexpected answer to chassis power status: {}", out.trim()),
                )
            })
        })
    }

    fn send(&self, request: Request) -> Fut<'_, ()> {
        Box::pin(async move {
            let word = match request {
                Request::On => "on",
                Request::GracefulOff => "soft",
                Request::ForceOff => "off",
                Request::Cycle => "cycle",
                Request::Reset => "reset",
            };
            self.power(word).await.map(|_| ())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chassis_power_status_is_parsed() {
        assert_eq!(parse_status("Chassis Power is on\n"), Some(PowerState::On));
        assert_eq!(
            parse_status("Chassis Power is off\n"),
            Some(PowerState::Off)
        );
        assert_eq!(parse_status("Chassis Power Control: Up/On\n"), None);
        assert_eq!(parse_status(""), None);
    }
}
