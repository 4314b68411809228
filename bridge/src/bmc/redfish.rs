//! Redfish (DMTF DSP0266) over reqwest: `PowerState` from the ComputerSystem, power
//! changes through `Actions/ComputerSystem.Reset` with a `ResetType` the system
//! lists as allowed. A session (`X-Auth-Token`) where the service offers a
//! SessionService, else Basic authentication.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;
use tokio::sync::Mutex;

use super::{
    Bmc, BmcError, Credentials, Failure, Fut, PowerState, Request, Result, Target, Timing,
};

pub struct Redfish {
    client: reqwest::Client,
    origin: reqwest::Url,
    system: String,
    credentials: Credentials,
    /// `None` until the service root was read; then the sessions collection, if any.
    sessions: Mutex<Option<Option<String>>>,
    /// The session's token and its URL (`Location`), to log out with.
    token: Mutex<Option<(String, Option<String>)>>,
    /// The last session token, blanked in what the BMC answers (read where the
    /// token's own lock is held, so a lock of its own).
    last_token: std::sync::Mutex<Option<String>>,
}

/// The `ResetType`s that do `request`, most fitting first.
fn reset_types(request: Request) -> &'static [&'static str] {
    match request {
        Request::On => &["On", "ForceOn"],
        Request::GracefulOff => &["GracefulShutdown"],
        Request::ForceOff => &["ForceOff"],
        Request::Cycle => &["PowerCycle", "ForceRestart"],
        Request::Reset => &["ForceRestart", "PowerCycle"],
    }
}

impl Redfish {
    pub fn new(target: &Target, timing: Timing) -> Result<Redfish> {
        let super::Address::Redfish { origin, system } = &target.address else {
            unreachable!("connect dispatches by address kind")
        };
        // No redirects: a POST turned into a GET would "succeed" without a reset,
        // and a login resent elsewhere would carry the password there.
        let mut builder = crate::http_client()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(crate::USER_AGENT)
            .timeout(timing.timeout)
            .connect_timeout(timing.timeout.min(Duration::from_secs(5)));
        if let Some(ca) = &target.tls.ca_file {
            let pem = crate::read_small(ca).map_err(|e| BmcError::new(Failure::Missing, e))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| BmcError::new(Failure::Missing, format!("{}: {e}", ca.display())))?;
            builder = builder.tls_certs_only(certs);
        }
        if target.tls.insecure {
            builder = builder.tls_danger_accept_invalid_certs(true);
        }
        let client = builder
            .build()
            .map_err(|e| BmcError::new(Failure::Missing, crate::error_chain(&e)))?;
        Ok(Redfish {
            client,
            origin: origin.clone(),
            system: system.clone(),
            credentials: target.credentials.clone(),
            sessions: Mutex::new(None),
            token: Mutex::new(None),
            last_token: std::sync::Mutex::new(None),
        })
    }

    fn url(&self, path: &str) -> reqwest::Url {
        let mut u = self.origin.clone();
        u.set_path(path);
        u
    }

    /// The sessions collection the service root names, read once.
    async fn sessions(&self) -> Result<Option<String>> {
        let mut known = self.sessions.lock().await;
        if let Some(s) = &*known {
            return Ok(s.clone());
        }
        let request = self.client.get(self.url("/redfish/v1/"));
        let root = self.answer("/redfish/v1/", request).await?;
        let found = root
            .pointer("/Links/Sessions/@odata.id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| {
                root.get("SessionService")
                    .map(|_| "/redfish/v1/SessionService/Sessions".to_string())
            });
        *known = Some(found.clone());
        Ok(found)
    }

    /// A session token, logging in when there is none.
    async fn login(&self, sessions: &str) -> Result<Option<String>> {
        let mut token = self.token.lock().await;
        if let Some((t, _)) = &*token {
            return Ok(Some(t.clone()));
        }
        let body = serde_json::json!({
            "UserName": self.credentials.username,
            "Password": self.credentials.password(),
        });
        let response = self
            .client
            .post(self.url(sessions))
            .json(&body)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND || status == StatusCode::METHOD_NOT_ALLOWED {
            // Listed but not served: Basic it is.
            return Ok(None);
        }
        if !status.is_success() {
            return Err(self.refusal(status, response).await);
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        *token = header("X-Auth-Token").map(|t| (t, header("Location")));
        if let Some((t, _)) = &*token {
            *self.last_token.lock().expect("token lock") = Some(t.clone());
        }
        Ok(token.as_ref().map(|(t, _)| t.clone()))
    }

    /// One request, authenticated as the service allows; a token the service
    /// forgot is renewed once.
    async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value> {
        for renewed in [false, true] {
            match self.fetch(method.clone(), path, body).await {
                Err(e)
                    if e.class == Failure::Auth
                        && !renewed
                        && self.token.lock().await.is_some() =>
                {
                    *self.token.lock().await = None;
                }
                other => return other,
            }
        }
        unreachable!("the second round returns")
    }

    async fn fetch(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value> {
        let mut request = self.client.request(method, self.url(path));
        let token = match self.sessions().await? {
            Some(s) => self.login(&s).await?,
            None => None,
        };
        request = match token {
            Some(t) => request.header("X-Auth-Token", t),
            None => request.basic_auth(
                &self.credentials.username,
                Some(self.credentials.password()),
            ),
        };
        if let Some(b) = body {
            request = request.json(b);
        }
        self.answer(path, request).await
    }

    /// Send `request`; its JSON answer (`null` when empty).
    async fn answer(&self, path: &str, request: reqwest::RequestBuilder) -> Result<Value> {
        let response = request.send().await.map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.refusal(status, response).await);
        }
        if status == StatusCode::NO_CONTENT {
            return Ok(Value::Null);
        }
        let bytes = response.bytes().await.map_err(|e| self.unreachable(&e))?;
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            BmcError::new(
                Failure::Refused,
                self.scrub(&format!("{path}: not a JSON answer: {e}")),
            )
        })
    }

    fn unreachable(&self, e: &reqwest::Error) -> BmcError {
        BmcError::new(Failure::Unreachable, self.scrub(&crate::error_chain(e)))
    }

    /// `text` without the credentials or the session token in any form: a BMC
    /// (or a proxy before it) may echo the request it refused.
    fn scrub(&self, text: &str) -> String {
        let mut secrets = self.credentials.secrets();
        if let Some(token) = &*self.last_token.lock().expect("token lock") {
            secrets.add(token);
        }
        secrets.scrub(text)
    }

    async fn refusal(&self, status: StatusCode, response: reqwest::Response) -> BmcError {
        let url = crate::shown_url(response.url());
        // Blanked whole, before it is cut short: a secret cut in two is not found.
        let text = self.scrub(&response.text().await.unwrap_or_default());
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| {
                v.pointer("/error/@Message.ExtendedInfo/0/Message")
                    .or_else(|| v.pointer("/error/message"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_else(|| text.chars().take(200).collect());
        let class = match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Failure::Auth,
            _ => Failure::Refused,
        };
        let said = match class {
            Failure::Auth => "the BMC refused the credentials".to_string(),
            _ if status.is_redirection() => {
                "the BMC redirects elsewhere: write the address it redirects to".to_string()
            }
            // Blanked again: a JSON message unescaped once may show a password
            // the raw text held escaped twice.
            _ => self.scrub(message.trim()),
        };
        BmcError::new(class, format!("{url}: {status}: {said}"))
    }
}

impl Bmc for Redfish {
    fn kind(&self) -> &'static str {
        "redfish"
    }

    /// Log the session out (`DELETE` its `Location`), if one was opened.
    fn close(&self) -> Fut<'_, ()> {
        Box::pin(async {
            let Some((token, Some(location))) = self.token.lock().await.take() else {
                return Ok(());
            };
            let url = match reqwest::Url::parse(&location) {
                Ok(u) => u,
                Err(_) => self.url(&location),
            };
            self.client
                .delete(url)
                .header("X-Auth-Token", token)
                .send()
                .await
                .map_err(|e| self.unreachable(&e))?;
            Ok(())
        })
    }

    fn state(&self) -> Fut<'_, PowerState> {
        Box::pin(async {
            let system = self.call(Method::GET, &self.system, None).await?;
            match system.get("PowerState").and_then(Value::as_str) {
                Some("On" | "PoweringOff" | "Paused") => Ok(PowerState::On),
                Some("Off" | "PoweringOn") => Ok(PowerState::Off),
                other => Err(BmcError::new(
                    Failure::Refused,
                    format!("{}: PowerState is {other:?}", self.system),
                )),
            }
        })
    }

    fn send(&self, request: Request) -> Fut<'_, ()> {
        Box::pin(async move {
            let system = self.call(Method::GET, &self.system, None).await?;
            let action = system.pointer("/Actions/#ComputerSystem.Reset");
            let target = action
                .and_then(|a| a.get("target"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("{}/Actions/ComputerSystem.Reset", self.system));
            let allowed: Option<Vec<&str>> = action
                .and_then(|a| a.get("ResetType@Redfish.AllowableValues"))
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect());
            let wanted = reset_types(request);
            let chosen = match &allowed {
                Some(list) => wanted.iter().find(|w| list.contains(w)).ok_or_else(|| {
                    BmcError::new(
                        Failure::Refused,
                        format!(
                            "the system allows no ResetType for {} (wanted one of {}; it allows {})",
                            request.as_str(),
                            wanted.join(", "),
                            list.join(", ")
                        ),
                    )
                })?,
                None => &wanted[0],
            };
            let body = serde_json::json!({ "ResetType": chosen });
            self.call(Method::POST, &target, Some(&body)).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    //! The session path, which sushy-emulator does not offer (it speaks Basic
    //! only; the end-to-end tests use it for that): a service with a
    //! SessionService, answered as DSP0266 says — a token on `POST …/Sessions`, 401
    //! for a request without a valid one.

    use std::sync::{Arc, Mutex};

    use axum::Json;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::{get, post};
    use serde_json::{Value, json};

    use super::*;
    use crate::bmc::{Address, Tls};

    #[derive(Default)]
    struct Service {
        logins: u32,
        logouts: u32,
        token: Option<String>,
        resets: Vec<String>,
        basic_seen: bool,
    }

    type Shared = Arc<Mutex<Service>>;

    fn authorised(s: &Service, headers: &HeaderMap) -> bool {
        headers.get("X-Auth-Token").and_then(|v| v.to_str().ok()) == s.token.as_deref()
            && s.token.is_some()
    }

    async fn serve() -> (String, Shared) {
        let state: Shared = Arc::default();
        let app = axum::Router::new()
            .route(
                "/redfish/v1/",
                get(|| async {
                    Json(json!({"Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}}))
                }),
            )
            .route(
                "/redfish/v1/SessionService/Sessions",
                post(|State(s): State<Shared>, Json(body): Json<Value>| async move {
                    let mut s = s.lock().unwrap();
                    if body["UserName"] != "root" || body["Password"] != "calvin-pw" {
                        return (StatusCode::UNAUTHORIZED, HeaderMap::new());
                    }
                    s.logins += 1;
                    let token = format!("token-{}", s.logins);
                    s.token = Some(token.clone());
                    let mut h = HeaderMap::new();
                    h.insert("X-Auth-Token", token.parse().unwrap());
                    let at = format!("/redfish/v1/SessionService/Sessions/{}", s.logins);
                    h.insert("Location", at.parse().unwrap());
                    (StatusCode::CREATED, h)
                }),
            )
            .route(
                "/redfish/v1/SessionService/Sessions/{id}",
                axum::routing::delete(|State(s): State<Shared>, headers: HeaderMap| async move {
                    let mut s = s.lock().unwrap();
                    if !authorised(&s, &headers) {
                        return StatusCode::UNAUTHORIZED;
                    }
                    s.logouts += 1;
                    s.token = None;
                    StatusCode::NO_CONTENT
                }),
            )
            .route(
                "/redfish/v1/Systems/1",
                get(|State(s): State<Shared>, headers: HeaderMap| async move {
                    let mut s = s.lock().unwrap();
                    s.basic_seen |= headers.contains_key("authorization");
                    if !authorised(&s, &headers) {
                        return Err(StatusCode::UNAUTHORIZED);
                    }
                    Ok(Json(json!({
                        "PowerState": "On",
                        "Actions": {"#ComputerSystem.Reset": {
                            "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                            "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown", "ForceRestart"]
                        }}
                    })))
                }),
            )
            .route(
                "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                post(|State(s): State<Shared>, headers: HeaderMap, Json(body): Json<Value>| async move {
                    let mut s = s.lock().unwrap();
                    if !authorised(&s, &headers) {
                        return StatusCode::UNAUTHORIZED;
                    }
                    s.resets.push(body["ResetType"].as_str().unwrap_or_default().to_string());
                    StatusCode::NO_CONTENT
                }),
            )
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (format!("redfish+http://{addr}/redfish/v1/Systems/1"), state)
    }

    fn client(address: &str, password: &str) -> Redfish {
        let target = Target {
            address: Address::parse(address).unwrap(),
            credentials: Credentials::new("root", password),
            tls: Tls::default(),
        };
        Redfish::new(&target, Timing::default()).unwrap()
    }

    #[tokio::test]
    async fn a_session_is_opened_once_renewed_when_forgotten_and_never_basic() {
        let (address, state) = serve().await;
        let bmc = client(&address, "calvin-pw");
        assert_eq!(bmc.state().await.unwrap(), PowerState::On);
        assert_eq!(bmc.state().await.unwrap(), PowerState::On);
        assert_eq!(
            state.lock().unwrap().logins,
            1,
            "one session for both reads"
        );
        // The BMC forgets the session (a reset of its own): hale logs in again once.
        state.lock().unwrap().token = Some("forgotten".into());
        bmc.send(Request::GracefulOff).await.unwrap();
        {
            let s = state.lock().unwrap();
            assert_eq!(s.logins, 2);
            assert_eq!(s.resets, ["GracefulShutdown"]);
            assert!(
                !s.basic_seen,
                "a service with sessions gets no Basic credentials"
            );
        }
        // An operation through the Controller gives its session back at the end.
        let c = crate::bmc::Controller::new(
            Box::new(client(&address, "calvin-pw")),
            Timing::default(),
            None,
        );
        let out = c.run(crate::bmc::Verb::Status, false).await.unwrap();
        assert_eq!(out.after, PowerState::On);
        let s = state.lock().unwrap();
        assert_eq!((s.logins, s.logouts), (3, 1), "logged in once, out once");
    }

    #[tokio::test]
    async fn reset_types_come_from_the_allowed_list_and_refusals_say_why() {
        let (address, state) = serve().await;
        let bmc = client(&address, "calvin-pw");
        // PowerCycle is not allowed here: a cycle is a ForceRestart.
        bmc.send(Request::Cycle).await.unwrap();
        bmc.send(Request::On).await.unwrap();
        assert_eq!(state.lock().unwrap().resets, ["ForceRestart", "On"]);

        let wrong = client(&address, "not-the-password");
        let e = wrong.state().await.unwrap_err();
        assert_eq!(e.class, Failure::Auth);
        assert!(e.to_string().contains("refused the credentials"), "{e}");
        assert!(!e.to_string().contains("not-the-password"));
    }

    /// Where a BMC (or a proxy before it) refuses with the request it got.
    #[derive(Clone, Copy)]
    enum Echo {
        /// The system's read, over Basic.
        Basic,
        /// The session's login (its body holds the password).
        Login,
        /// A Reset, over a session.
        Reset,
    }

    /// A BMC that refuses as `echo` says, with the headers and the body it got.
    async fn echoing(echo: Echo) -> String {
        let refuse = |status: StatusCode| {
            move |headers: HeaderMap, body: String| async move {
                let seen: Vec<String> = headers
                    .iter()
                    .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap_or_default()))
                    .collect();
                let basic = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Basic "))
                    .unwrap_or_default()
                    .to_string();
                let message = format!("seen {}; credential {basic}; body {body}", seen.join("; "));
                (status, Json(json!({"error": {"message": message}})))
            }
        };
        let root = match echo {
            Echo::Basic => json!({}),
            _ => {
                json!({"Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}})
            }
        };
        let app = axum::Router::new()
            .route(
                "/redfish/v1/",
                get(move || async move { Json(root.clone()) }),
            )
            .route(
                "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                post(refuse(StatusCode::BAD_REQUEST)),
            );
        let app = match echo {
            Echo::Basic => app.route(
                "/redfish/v1/Systems/1",
                get(refuse(StatusCode::INTERNAL_SERVER_ERROR)),
            ),
            Echo::Login => app.route(
                "/redfish/v1/SessionService/Sessions",
                post(refuse(StatusCode::BAD_REQUEST)),
            ),
            Echo::Reset => app
                .route(
                    "/redfish/v1/SessionService/Sessions",
                    post(|| async {
                        let mut h = HeaderMap::new();
                        h.insert("X-Auth-Token", "sess-tok-5e5e".parse().unwrap());
                        (StatusCode::CREATED, h)
                    }),
                )
                .route(
                    "/redfish/v1/Systems/1",
                    get(|| async { Json(json!({"PowerState": "On"})) }),
                ),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("redfish+http://{addr}/redfish/v1/Systems/1")
    }

    #[tokio::test]
    async fn what_a_bmc_echoes_of_the_request_is_blanked() {
        let password = r#"pa"ss\w-91c2"#;
        // Basic: the header, and the bare base64 of `root:password`.
        let basic = client(&echoing(Echo::Basic).await, password)
            .state()
            .await
            .unwrap_err()
            .to_string();
        assert!(basic.contains("500"), "{basic}");
        assert!(basic.contains("credential ***"), "{basic}");
        assert!(basic.contains("authorization: ***"), "{basic}");
        assert!(!basic.contains("cm9vd"), "no base64 of `root:…`: {basic}");
        // The login's body: the password JSON-escaped.
        let login = client(&echoing(Echo::Login).await, password)
            .send(Request::ForceOff)
            .await
            .unwrap_err()
            .to_string();
        assert!(login.contains(r#""Password":"***""#), "{login}");
        // A session's request: its token.
        let reset = client(&echoing(Echo::Reset).await, password)
            .send(Request::ForceOff)
            .await
            .unwrap_err()
            .to_string();
        assert!(reset.contains("x-auth-token: ***"), "{reset}");
        for said in [basic, login, reset] {
            for leaked in ["sess-tok-5e5e", "91c2"] {
                assert!(!said.contains(leaked), "{leaked} in {said}");
            }
        }
    }
}
