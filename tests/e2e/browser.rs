//! A real headless Chromium, driven over WebDriver by the real chromedriver (Debian's
//! `chromium` and `chromium-driver`): started on a free port by the test, in its own
//! process group, and stopped with that group on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{eventually, free_port, require};

pub struct Browser {
    driver: Child,
    base: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

/// Where the tests write their screenshots (`target/ui-screenshots`), to be looked
/// at before any goes into the README.
pub fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Browser {
    pub async fn start() -> Browser {
        let driver = require("chromedriver");
        let chromium = require("chromium");
        let port = free_port();
        let profile = tempfile::tempdir().unwrap();
        use std::os::unix::process::CommandExt as _;
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let status = format!("{base}/status");
        eventually("chromedriver ready", Duration::from_secs(20), || {
            let (http, status) = (http.clone(), status.clone());
            async move {
                let v: Value = http.get(&status).send().await.ok()?.json().await.ok()?;
                v["value"]["ready"].as_bool().filter(|r| *r)
            }
        })
        .await;
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1280,1000",
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }
        }}});
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {answer}"))
            .to_string();
        Browser {
            driver: child,
            base: format!("{base}/session/{session}"),
            http,
            _profile: profile,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            r = r.json(&b);
        }
        let v: Value = r.send().await.unwrap().json().await.unwrap();
        if v["value"].get("error").is_some() {
            panic!("WebDriver {path}: {}", v["value"]);
        }
        v["value"].clone()
    }

    /// What the pages said to the console at level SEVERE since the last ask (a
    /// script's error, a resource that failed to load), as chromedriver logs it.
    pub async fn console_errors(&self) -> Vec<String> {
        let entries = self
            .call(
                reqwest::Method::POST,
                "/se/log",
                Some(json!({"type": "browser"})),
            )
            .await;
        entries
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Size the window as a user would drag it.
    pub async fn resize(&self, width: u32, height: u32) {
        self.call(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await;
    }

    /// Load `url` and wait for it (WebDriver returns once the document has loaded).
    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// Run `body` (a function body: `return …`) in the page.
    pub async fn js(&self, body: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": body, "args": []})),
        )
        .await
    }

    /// The visible text of the first element `css` selects ("" when none does).
    pub async fn text(&self, css: &str) -> String {
        let css = serde_json::to_string(css).unwrap();
        self.js(&format!(
            "const e = document.querySelector({css}); return e ? e.innerText : '';"
        ))
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// The texts of every element `css` selects.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let css = serde_json::to_string(css).unwrap();
        let v = self
            .js(&format!(
                "return Array.from(document.querySelectorAll({css})).map(e => e.innerText);"
            ))
            .await;
        serde_json::from_value(v).unwrap()
    }

    async fn element(&self, css: &str) -> String {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}"))
            .to_string()
    }

    /// Click the first element `css` selects, as a user would.
    pub async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Type `text` into the field `css` selects.
    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Choose the option `value` of the select `css` selects.
    pub async fn choose(&self, css: &str, value: &str) {
        self.click(&format!("{css} option[value='{value}']")).await;
    }

    pub async fn url(&self) -> String {
        self.call(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    /// A cookie of the page's site, by name.
    pub async fn cookie(&self, name: &str) -> Option<String> {
        let v = self.call(reqwest::Method::GET, "/cookie", None).await;
        v.as_array()?
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["value"].as_str())
            .map(str::to_string)
    }

    /// Wait until the element `css` selects shows text for which `want` holds.
    pub async fn wait_text(&self, what: &str, css: &str, want: impl Fn(&str) -> bool) -> String {
        eventually(what, Duration::from_secs(30), || async {
            let t = self.text(css).await;
            want(&t).then_some(t)
        })
        .await
    }

    /// Save a screenshot of the whole page, however long, as `name`.
    pub async fn screenshot_page(&self, name: &str) {
        let height = self
            .js("return document.documentElement.scrollHeight;")
            .await
            .as_u64()
            .unwrap();
        let rect = json!({"width": 1280, "height": height.clamp(600, 4000) + 140});
        self.call(reqwest::Method::POST, "/window/rect", Some(rect))
            .await;
        self.screenshot(name).await;
        let back = json!({"width": 1280, "height": 1000});
        self.call(reqwest::Method::POST, "/window/rect", Some(back))
            .await;
    }

    /// Save a screenshot of the page as `name` under [`screenshots`].
    pub async fn screenshot(&self, name: &str) {
        let v = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = decode_base64(v.as_str().unwrap());
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
        std::fs::write(screenshots().join(name), png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver and the Chromium it started share its process group.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.wait();
    }
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let clean: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|c| *c != b'=').collect();
        let mut n = 0u32;
        for (i, c) in data.iter().enumerate() {
            n |= value(*c) << (18 - 6 * i);
        }
        out.extend(
            n.to_be_bytes()[1..]
                .iter()
                .take(data.len().saturating_sub(1)),
        );
    }
    out
}
