//! Simulated BMCs for the end-to-end tests: a real `sushy-emulator` (Redfish, fake
//! driver) and a real `ipmi_sim` (IPMI over LAN), each on 127.0.0.1 on a free port,
//! in its own temp dir, stopped by PID on drop. Passwords never go on a command line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::harness::{eventually, free_port, require, run_with_input};

/// The repository's root, where `tests/run.sh` makes the `.venv` with sushy-tools.
fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `file` in `dir`, opened to append: a child's stdout and stderr.
fn log_file(dir: &Path, file: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(file))
        .unwrap()
}

/// A real sushy-emulator (fake driver) with named systems, Basic auth (user `admin`).
pub struct Sushy {
    pub url: String,
    password: String,
    /// System name → the id the emulator lists under `/redfish/v1/Systems`.
    ids: HashMap<String, String>,
    child: Child,
    dir: tempfile::TempDir,
}

impl Sushy {
    /// Start with one system per name, each powered On; `password` is admin's password.
    pub async fn start(names: &[&str], password: &str) -> Sushy {
        let venv = repo_root().join(".venv/bin");
        let emulator = venv.join("sushy-emulator");
        assert!(
            emulator.is_file(),
            "{} is missing: run tests/run.sh, which installs the test components",
            emulator.display()
        );
        // Its state is a SQLite file written on every request, each write synced:
        // in memory (tmpfs, where there is one) a request costs milliseconds even
        // while other tests keep the disk busy.
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let port = free_port();
        let htpasswd = dir.path().join("htpasswd");
        write_htpasswd(&venv.join("python"), &htpasswd, "admin", password);
        let systems: Vec<Value> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let uuid = format!("5e5e{port:04x}-0000-4000-8000-{i:012x}");
                let mac = format!("52:54:00:{:02x}:{:02x}:{:02x}", port >> 8, port & 0xff, i);
                json!({
                    "uuid": uuid,
                    "name": name,
                    "power_state": "On",
                    "nics": [{"mac": mac, "ip": "127.0.0.1"}],
                })
            })
            .collect();
        // The config is Python; JSON strings and lists of objects of strings are
        // Python literals too.
        let config = format!(
            "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n\
             SUSHY_EMULATOR_LISTEN_PORT = {port}\n\
             SUSHY_EMULATOR_FAKE_DRIVER = True\n\
             SUSHY_EMULATOR_STATE_DIR = {}\n\
             SUSHY_EMULATOR_AUTH_FILE = {}\n\
             SUSHY_EMULATOR_FAKE_SYSTEMS = {}\n",
            json!(dir.path().join("state").display().to_string()),
            json!(htpasswd.display().to_string()),
            Value::from(systems),
        );
        std::fs::write(dir.path().join("sushy.conf"), config).unwrap();
        // On one thread: the fake driver reads a system, changes it and writes it
        // back whole, so under Flask's default thread per request a read that
        // applies a due power change can write back over a change another request
        // made meanwhile — an On asked for is lost and the machine stays Off (seen
        // on a busy machine). Its requests take milliseconds; one at a time is
        // what a BMC does anyway.
        let child = Command::new(venv.join("python"))
            .args([
                "-c",
                "import sys; from sushy_tools.emulator import main as m; run = m.app.run; \
                 m.app.run = lambda *a, **k: run(*a, threaded=False, **k); sys.exit(m.main())",
            ])
            .arg("--config")
            .arg(dir.path().join("sushy.conf"))
            .stdin(Stdio::null())
            .stdout(log_file(dir.path(), "sushy.log"))
            .stderr(log_file(dir.path(), "sushy.log"))
            .spawn()
            .unwrap();
        let mut sushy = Sushy {
            url: format!("http://127.0.0.1:{port}"),
            password: password.to_string(),
            ids: HashMap::new(),
            child,
            dir,
        };
        // The service root answers without credentials.
        let root = format!("{}/redfish/v1/", sushy.url);
        eventually("sushy-emulator ready", Duration::from_secs(30), || async {
            let r = reqwest::get(&root).await.ok()?;
            r.status().is_success().then_some(())
        })
        .await;
        let collection = sushy.get("/redfish/v1/Systems").await;
        for member in collection["Members"].as_array().unwrap() {
            let system = sushy.get(member["@odata.id"].as_str().unwrap()).await;
            let (name, id) = (system["Name"].as_str(), system["Id"].as_str());
            sushy
                .ids
                .insert(name.unwrap().to_string(), id.unwrap().to_string());
        }
        for name in names {
            assert!(
                sushy.ids.contains_key(*name),
                "sushy lists no {name}: {collection}"
            );
        }
        sushy
    }

    /// GET `path` with admin's credentials, as JSON; panics unless it answers 200.
    async fn get(&self, path: &str) -> Value {
        let r = reqwest::Client::new()
            .get(format!("{}{path}", self.url))
            .basic_auth("admin", Some(&self.password))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "GET {path}: {}", r.status());
        r.json().await.unwrap()
    }

    fn id(&self, name: &str) -> &str {
        self.ids
            .get(name)
            .unwrap_or_else(|| panic!("sushy has no system {name}"))
    }

    /// The Metal3-style address of system `name`:
    /// `redfish+http://127.0.0.1:PORT/redfish/v1/Systems/<id>`, with the id the
    /// emulator lists under `/redfish/v1/Systems` (no redirect to follow).
    pub fn address(&self, name: &str) -> String {
        format!("redfish+{}/redfish/v1/Systems/{}", self.url, self.id(name))
    }

    /// The system's PowerState as the emulator reports it now ("On" / "Off"); reading
    /// it is what lets the fake driver apply a pending change.
    pub async fn power(&self, name: &str) -> String {
        let system = self
            .get(&format!("/redfish/v1/Systems/{}", self.id(name)))
            .await;
        system["PowerState"].as_str().unwrap().to_string()
    }

    /// The emulator's log (Flask's request lines and errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sushy.log")).unwrap_or_default()
    }

    /// Stop the emulator (kill by PID), to simulate an unreachable BMC; drop also stops it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sushy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An htpasswd file at `path` with one bcrypt entry for `user`, hashed by the venv's
/// `python` with the `bcrypt` module sushy-tools itself verifies with; the password
/// travels on stdin.
fn write_htpasswd(python: &Path, path: &Path, user: &str, password: &str) {
    let out = run_with_input(
        Command::new(python).args([
            "-c",
            "import sys, bcrypt; print(bcrypt.hashpw(sys.stdin.buffer.read(), bcrypt.gensalt(rounds=4)).decode())",
        ]),
        password,
    );
    assert!(
        out.status.success(),
        "bcrypt: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hash = String::from_utf8(out.stdout).unwrap();
    std::fs::write(path, format!("{user}:{}\n", hash.trim())).unwrap();
}

/// The chassis_control program: ipmi_sim runs it as `script get power` (some builds
/// put a device name first) and `script set PARM VAL`. Power lives in `power`
/// (`1`/`0`); every `set` is appended to `commands`. A soft shutdown request is obeyed
/// (the simulated OS powers off); reset leaves power as it is.
const CHASSIS_SCRIPT: &str = r#"#!/bin/sh
dir=$(dirname "$0")
case "$1" in get|set) ;; *) shift ;; esac
op=$1
shift
case "$op" in
get)
  for p in "$@"; do
    case "$p" in power) echo "power:$(cat "$dir/power")" ;; esac
  done ;;
set)
  echo "$*" >> "$dir/commands"
  while [ $# -ge 2 ]; do
    case "$1" in
      power) echo "$2" > "$dir/power" ;;
      shutdown) [ "$2" = 1 ] && echo 0 > "$dir/power" ;;
    esac
    shift 2
  done ;;
*) exit 1 ;;
esac
"#;

/// A real ipmi_sim with a chassis_control script that keeps power in a file.
pub struct IpmiSim {
    pub port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl IpmiSim {
    /// User 2 = "admin" with `password`; power starts on.
    pub async fn start(name: &str, password: &str) -> IpmiSim {
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "an ipmi_sim name is [A-Za-z0-9_-]+: {name}"
        );
        assert!(
            password.len() <= 20 && !password.contains(['"', '\\', '\n']),
            "an IPMI password is at most 20 bytes, without quotes"
        );
        let sim = require("ipmi_sim");
        require("ipmitool");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let script = dir.path().join("chassis.sh");
        std::fs::write(&script, CHASSIS_SCRIPT).unwrap();
        let mut perms = std::fs::metadata(&script).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&script, perms).unwrap();
        std::fs::write(dir.path().join("power"), "1\n").unwrap();
        let auths = "none md2 md5 straight";
        let lan = format!(
            "name \"{name}\"\n\
             set_working_mc 0x20\n\
             \x20 startlan 1\n\
             \x20   addr 127.0.0.1 {port}\n\
             \x20   priv_limit admin\n\
             \x20   allowed_auths_callback {auths}\n\
             \x20   allowed_auths_user {auths}\n\
             \x20   allowed_auths_operator {auths}\n\
             \x20   allowed_auths_admin {auths}\n\
             \x20   guid 5e5e{port:04x}0000400080000000000000ff\n\
             \x20 endlan\n\
             \x20 chassis_control \"{}\"\n\
             \x20 user 2 true \"admin\" \"{password}\" admin 10 {auths}\n",
            script.display()
        );
        std::fs::write(dir.path().join("lan.conf"), lan).unwrap();
        std::fs::write(
            dir.path().join("bmc.emu"),
            "mc_setbmc 0x20\n\
             mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n\
             sel_enable 0x20 1000 0x0a\n\
             mc_enable 0x20\n",
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("state")).unwrap();
        let child = Command::new(sim)
            .arg("-c")
            .arg(dir.path().join("lan.conf"))
            .arg("-f")
            .arg(dir.path().join("bmc.emu"))
            .arg("-s")
            .arg(dir.path().join("state"))
            .arg("-n")
            .stdin(Stdio::null())
            .stdout(log_file(dir.path(), "ipmi_sim.log"))
            .stderr(log_file(dir.path(), "ipmi_sim.log"))
            .spawn()
            .unwrap();
        let sim = IpmiSim { port, child, dir };
        let password = password.to_string();
        eventually("ipmi_sim ready", Duration::from_secs(30), || {
            let password = password.clone();
            async move {
                let out = ipmitool(port, &password, &["chassis", "power", "status"]).await;
                out.status.success().then_some(())
            }
        })
        .await;
        sim
    }

    /// `ipmi://127.0.0.1:PORT`
    pub fn address(&self) -> String {
        format!("ipmi://127.0.0.1:{}", self.port)
    }

    /// Whether the simulated chassis is on (read from the script's state file).
    pub fn powered(&self) -> bool {
        std::fs::read_to_string(self.dir.path().join("power"))
            .unwrap()
            .trim()
            == "1"
    }

    /// Every `set` the chassis script received, in order, e.g. `["power 0", "power 1",
    /// "reset 1"]`.
    pub fn commands(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("commands"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for IpmiSim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ipmitool -I lanplus -C 3 -H 127.0.0.1 -p PORT -U admin -E -N 1 -R 1 ARGS…`, with
/// the password in `IPMI_PASSWORD` (never on the command line). ipmi_sim speaks
/// cipher suites 0–3 only; `-N 1 -R 1` bounds a call to a dead BMC to about 2 s.
pub async fn ipmitool(port: u16, password: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(require("ipmitool"));
    cmd.args(["-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(["-U", "admin", "-E", "-N", "1", "-R", "1"])
        .args(args)
        .env("IPMI_PASSWORD", password)
        .stdin(Stdio::null());
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn sushy_powers_a_system_off_behind_basic_auth() {
    let mut sushy = Sushy::start(&["bmc-a", "bmc-b"], "s3cret-pw").await;
    let address = sushy.address("bmc-a");
    let prefix = format!("redfish+{}/redfish/v1/Systems/", sushy.url);
    assert!(address.starts_with(&prefix), "{address}");
    assert_ne!(address, sushy.address("bmc-b"));
    assert_eq!(sushy.power("bmc-a").await, "On");
    assert_eq!(sushy.power("bmc-b").await, "On");

    let system = address.strip_prefix("redfish+").unwrap().to_string();
    let http = reqwest::Client::new();
    let reset = format!("{system}/Actions/ComputerSystem.Reset");
    let r = http
        .post(&reset)
        .basic_auth("admin", Some("s3cret-pw"))
        .json(&json!({"ResetType": "ForceOff"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "{}", sushy.log());
    // The fake driver lands the change 1–11 s later, on a read.
    eventually("bmc-a off", Duration::from_secs(30), || async {
        (sushy.power("bmc-a").await == "Off").then_some(())
    })
    .await;
    assert_eq!(sushy.power("bmc-b").await, "On");

    for password in [Some("wrong"), None] {
        let r = http
            .get(&system)
            .basic_auth("admin", password)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "password {password:?}");
        let r = http
            .post(&reset)
            .basic_auth("admin", password)
            .json(&json!({"ResetType": "On"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "password {password:?}");
    }
    assert_eq!(sushy.power("bmc-a").await, "Off");

    sushy.stop();
    assert!(
        http.get(&system).send().await.is_err(),
        "stopped sushy answers"
    );
}

#[tokio::test]
async fn ipmi_sim_powers_the_chassis_off_and_on() {
    let sim = IpmiSim::start("node-1", "s3cret-pw").await;
    assert_eq!(sim.address(), format!("ipmi://127.0.0.1:{}", sim.port));
    assert!(sim.powered());
    assert!(sim.commands().is_empty(), "{:?}", sim.commands());

    let out = ipmitool(sim.port, "s3cret-pw", &["chassis", "power", "off"]).await;
    assert!(out.status.success(), "{out:?}");
    eventually("chassis off", Duration::from_secs(30), || async {
        (!sim.powered() && sim.commands() == ["power 0"]).then_some(())
    })
    .await;
    let out = ipmitool(sim.port, "s3cret-pw", &["chassis", "power", "status"]).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Chassis Power is off"
    );

    let out = ipmitool(sim.port, "s3cret-pw", &["chassis", "power", "on"]).await;
    assert!(out.status.success(), "{out:?}");
    eventually("chassis on", Duration::from_secs(30), || async {
        (sim.powered() && sim.commands() == ["power 0", "power 1"]).then_some(())
    })
    .await;

    let out = ipmitool(sim.port, "wrong", &["chassis", "power", "off"]).await;
    assert!(!out.status.success(), "a wrong password is refused");
    assert!(sim.powered());
    assert_eq!(sim.commands(), ["power 0", "power 1"]);
}
