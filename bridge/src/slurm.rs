//! `orchestrator: { kind: slurm }` (DESIGN §13): the inventory from `sinfo --json`
//! and `squeue --json`, the actions through `scontrol` and `scancel` — run without
//! a shell, each bounded by `timeout`. A drain is Slurm's cordon (running jobs go
//! on); hale's own drains carry the reason `hale: …`, so whose a drain is reads
//! off the node itself.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::core::Status;
use crate::core::policy::{Actor, Done, Observed};
use crate::core::settings::de_duration;
use crate::orchestrator::{
    CommandFailed, Fut, Orchestrator, OrchestratorError, Report, Result, Workload, run_command,
};

/// `orchestrator: { kind: slurm, … }`: Slurm's own keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Config {
    /// `slurm`.
    pub kind: String,
    /// `SLURM_CONF` for every command; omitted: the environment's, else Slurm's
    /// default (written empty it is refused: never read as whichever that is).
    #[serde(deserialize_with = "crate::core::settings::de_present")]
    pub slurm_conf: Option<PathBuf>,
    /// Where `sinfo`, `squeue`, `scontrol` and `scancel` are; omitted: `PATH`.
    #[serde(deserialize_with = "crate::core::settings::de_present")]
    pub bin_dir: Option<PathBuf>,
    /// One command at most.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// `scontrol reboot` works here (`RebootProgram` is set): the reboot flow may
    /// reboot a node without a BMC through it.
    pub reboot: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            kind: "slurm".into(),
            slurm_conf: None,
            bin_dir: None,
            timeout: Duration::from_secs(30),
            reboot: false,
        }
    }
}

impl Config {
    /// The files this kind reads, by key.
    pub fn files(&self) -> Vec<(&'static str, &PathBuf)> {
        self.slurm_conf.iter().map(|p| ("slurmConf", p)).collect()
    }

    /// What serde cannot check; the error is (key under `orchestrator`, message).
    pub fn validate(&self) -> std::result::Result<(), (String, String)> {
        if let Some(p) = &self.slurm_conf
            && let Err(e) = std::fs::metadata(p)
        {
            return Err((
                "slurmConf".into(),
                format!("cannot read {}: {e}", p.display()),
            ));
        }
        if let Some(d) = &self.bin_dir {
            if !d.is_dir() {
                return Err((
                    "binDir".into(),
                    format!("{} is not a directory", d.display()),
                ));
            }
            // Found missing at run time, an operator's cordon would be refused.
            for command in COMMANDS {
                let path = d.join(command);
                if !crate::orchestrator::executable(&path) {
                    return Err((
                        "binDir".into(),
                        format!(
                            "{} is missing or not executable (hale runs {} from binDir)",
                            path.display(),
                            COMMANDS.join(", ")
                        ),
                    ));
                }
            }
        }
        if self.timeout.is_zero() {
            return Err(("timeout".into(), "must be longer than 0".into()));
        }
        Ok(())
    }

    pub async fn connect(&self) -> std::result::Result<Arc<dyn Orchestrator>, String> {
        Ok(Arc::new(Slurm {
            cfg: self.clone(),
            weights: Mutex::new(HashMap::new()),
            comments: Mutex::new(HashMap::new()),
        }))
    }
}

/// The Slurm commands hale runs.
const COMMANDS: [&str; 4] = ["sinfo", "squeue", "scontrol", "scancel"];

/// Added to a node's own scheduling weight to gate it: Slurm places work on the
/// lowest weight first, so a gated node is chosen last, and its own weight stays
/// in the gated one — restored when the gate is lifted, across hale's restarts.
pub const GATE_BASE: u64 = 1_000_000_000;
/// The gate of earlier versions, which kept the node's own weight in memory only:
/// read as gated, lifted to weight 1.
const OLD_GATE_WEIGHT: u64 = 65_000;

/// Whether a node's weight is hale's gate.
fn gated(weight: u64) -> bool {
    weight >= GATE_BASE || weight == OLD_GATE_WEIGHT
}

/// The weight to write for the gate `on` over a node weighing `weight` now
/// (`None`: not read yet, taken as Slurm's default of 1).
fn gate_weight(weight: Option<u64>, on: bool) -> u64 {
    let now = weight.unwrap_or(1);
    let own = match now {
        w if w >= GATE_BASE => w - GATE_BASE,
        OLD_GATE_WEIGHT => 1,
        w => w,
    };
    if on {
        GATE_BASE + own.min(GATE_BASE - 1)
    } else {
        own
    }
}
/// The reason prefixes that say whose a drain is.
const HALE: &str = "hale: ";
const OPERATOR: &str = "operator: ";
/// How long an active drain waits for the jobs it requeued or cancelled to
/// complete; the reboot flow asks again until `drainTimeout`.
const STOP_WAIT: Duration = Duration::from_secs(120);
/// The reason Slurm gives a node it set down because it stopped answering.
const NOT_RESPONDING: &str = "Not responding";

/// `node` as scontrol takes one node. A name it reads as several — a host list
/// (`n[3-5]`, `n1,n5`), the reserved `ALL` — or as an option would act on nodes no
/// alert named, past every guardrail: refused, never sent. (An alert may name
/// such a node where `createFromAlerts` takes it in.) A `NodeSet` name reads as
/// one: [`Slurm::node_now`] asks Slurm.
fn one_node(node: &str, op: &'static str) -> Result<()> {
    let several = node.is_empty()
        || node.contains(['[', ']', ','])
        || node.chars().any(char::is_whitespace)
        || node.eq_ignore_ascii_case("all")
        || node.starts_with('-');
    if several {
        return Err(OrchestratorError::refused(format!(
            "`{node}` is not one Slurm node name: scontrol would read it as a host list, every node or an option, so hale sends nothing"
        ))
        .during(node, op));
    }
    Ok(())
}

/// What `scontrol show node` shows of a node's state.
#[derive(Debug, Default, PartialEq)]
struct Shown {
    /// `IDLE+DRAIN`, `MIXED`, `DOWN+NOT_RESPONDING`…
    state: String,
    /// The reason it was drained or set down, without Slurm's `[user@time]`.
    reason: String,
}

impl Shown {
    /// From `scontrol show node` (one field group a line; `Reason=` on its own,
    /// so a comment that holds `Reason=` is not read as one).
    fn read(shown: &str) -> Shown {
        let state = shown
            .split_whitespace()
            .find_map(|w| w.strip_prefix("State="))
            .unwrap_or_default()
            .to_string();
        let reason = shown
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("Reason="))
            .map(|r| match r.rfind(" [") {
                Some(at) if r.ends_with(']') => &r[..at],
                _ => r,
            })
            .unwrap_or_default()
            .to_string();
        Shown { state, reason }
    }

    fn drained(&self) -> bool {
        self.state.contains("DRAIN")
    }
}

pub struct Slurm {
    cfg: Config,
    /// Each node's weight as the inventory last read it (a gated one holds the
    /// node's own).
    weights: Mutex<HashMap<String, u64>>,
    /// Each node's comment as the inventory last read it (publish writes only
    /// what changed).
    comments: Mutex<HashMap<String, String>>,
}

/// `n[1-3,7]` → `n1 n2 n3 n7`; a plain name is itself.
pub fn hostnames(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        let Some((prefix, rest)) = part.split_once('[') else {
            out.push(part.to_string());
            continue;
        };
        let (ranges, suffix) = rest.split_once(']').unwrap_or((rest, ""));
        for range in ranges.split(',') {
            match range.split_once('-') {
                Some((a, b)) => {
                    let width = a.len();
                    if let (Ok(a), Ok(b)) = (a.parse::<u64>(), b.parse::<u64>()) {
                        for n in a..=b {
                            out.push(format!("{prefix}{n:0width$}{suffix}"));
                        }
                    }
                }
                None => out.push(format!("{prefix}{range}{suffix}")),
            }
        }
    }
    out
}

/// The state of a node or job, as upper-case words, from `keys` of its JSON.
/// Slurm 22.05 writes a node's base state as one word (`"idle"`) and its flags
/// apart (`state_flags: ["DRAIN"]`), a job's as one word (`"RUNNING"`); 23.02
/// and later write one list of both (`state: ["IDLE", "DRAIN"]`, `job_state:
/// ["RUNNING"]`).
fn states(v: &Value, keys: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for k in keys {
        match v.get(*k) {
            Some(Value::String(s)) => out.push(s.to_ascii_uppercase()),
            Some(Value::Array(a)) => out.extend(
                a.iter()
                    .filter_map(|w| Some(w.as_str()?.to_ascii_uppercase())),
            ),
            _ => {}
        }
    }
    out
}

/// The jobs of an `squeue --json` answer.
fn jobs(answer: &Value) -> impl Iterator<Item = &Value> {
    answer
        .get("jobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Whether a job of `squeue --json` runs.
fn runs(job: &Value) -> bool {
    states(job, &["job_state"]).iter().any(|s| s == "RUNNING")
}

/// A node of `sinfo --json` as hale's policy sees it.
fn observed(n: &Value, jobs: &HashMap<String, u32>) -> Option<Observed> {
    let name = n.get("name")?.as_str()?.to_string();
    let text = |k: &str| n.get(k).and_then(Value::as_str).unwrap_or_default();
    let state = states(n, &["state", "state_flags"]);
    let flagged = |f: &str| state.iter().any(|x| x.starts_with(f));
    let not_ready = ["DOWN", "FAIL", "FUTURE", "UNKNOWN", "NOT_RESPONDING"]
        .iter()
        .any(|s| flagged(s));
    let reason = text("reason");
    // Set down with a reason (`scontrol update state=down reason="psu swap"`) the
    // node is out of service by someone else's hand, as a drain of theirs is: a
    // drain of hale's would overwrite their reason, and a resume of hale's then put
    // the node back. Not Slurm's own "Not responding", which Slurm lifts itself
    // when the node answers again: that one is a node gone silent.
    let downed = flagged("DOWN")
        && !reason.is_empty()
        && !reason.starts_with(HALE)
        && !reason.eq_ignore_ascii_case(NOT_RESPONDING);
    let drained = flagged("DRAIN") || downed;
    let status = if drained {
        Status::Cordoned
    } else if not_ready {
        Status::NotReady
    } else {
        Status::Ready
    };
    // Whose a drain is, by its reason: hale's, an operator's through hale, or —
    // any other reason, someone's `scontrol` or Slurm's own (`Kill task failed`) —
    // the operator's too: hale resumes only the drains it made.
    let cordoned_by = drained
        .then(|| {
            if let Some(r) = reason.strip_prefix(HALE) {
                Some((Actor::Hale, r.to_string()))
            } else if let Some(r) = reason.strip_prefix(OPERATOR) {
                Some((Actor::Operator, r.to_string()))
            } else {
                (!reason.is_empty()).then(|| (Actor::Operator, reason.to_string()))
            }
        })
        .flatten();
    let mut labels = BTreeMap::new();
    let list = |k: &str| -> Vec<String> {
        match n.get(k) {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| Some(v.as_str()?.to_string()))
                .collect(),
            Some(Value::String(s)) => s
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        }
    };
    let partitions = list("partitions");
    if let Some(first) = partitions.first() {
        labels.insert("partition".to_string(), first.clone());
    }
    for p in &partitions {
        labels.insert(format!("partition/{p}"), "true".into());
    }
    for f in list("active_features") {
        labels.insert(format!("feature/{f}"), "true".into());
    }
    let weight = n.get("weight").and_then(Value::as_u64);
    Some(Observed {
        id: name.clone(),
        uid: None,
        hostname: Some(text("hostname"))
            .filter(|h| !h.is_empty() && *h != "localhost")
            .map(str::to_string),
        status,
        labels,
        provisioned: flagged("CLOUD"),
        allocations: Some(jobs.get(&name).copied().unwrap_or(0)),
        cordoned_by,
        gated: weight.map(gated),
        evicted: None,
        not_ready,
        released: false,
        orchestrator_health: None,
        version: None,
        before: None,
    })
}

impl Slurm {
    /// Run `command ARGS…` (no shell); its standard output.
    async fn run(&self, command: &str, args: &[&str]) -> Result<String> {
        let program = match &self.cfg.bin_dir {
            Some(d) => d.join(command),
            None => PathBuf::from(command),
        };
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args(args);
        if let Some(conf) = &self.cfg.slurm_conf {
            cmd.env("SLURM_CONF", conf);
        }
        let shown = format!("{} {}", program.display(), args.join(" "));
        run_command(cmd, &shown, self.cfg.timeout)
            .await
            .map_err(|failed| match failed {
                CommandFailed::Error(e) => e,
                // slurmctld away is worth retrying; a node or job it does not know
                // is not.
                CommandFailed::Exited { message, stderr } => {
                    let lower = stderr.to_ascii_lowercase();
                    if lower.contains("invalid node name") || lower.contains("invalid job id") {
                        OrchestratorError::refused(message)
                    } else {
                        OrchestratorError::transient(message)
                    }
                }
            })
    }

    /// `command --json`. Slurm answers a controller it cannot reach with exit
    /// status 0, no nodes and an `errors` list: that is an error, never an empty
    /// cluster (which would retire every node).
    async fn json(&self, command: &str) -> Result<Value> {
        let out = self.run(command, &["--json"]).await?;
        let answer: Value = serde_json::from_str(&out).map_err(|e| {
            OrchestratorError::transient(format!("`{command} --json`: not JSON: {e}"))
        })?;
        let errors: Vec<String> = answer
            .get("errors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|e| {
                e.get("description")
                    .or_else(|| e.get("error"))
                    .and_then(Value::as_str)
                    .map_or_else(|| e.to_string(), str::to_string)
            })
            .collect();
        if !errors.is_empty() {
            return Err(OrchestratorError::transient(format!(
                "`{command} --json`: {}",
                errors.join("; ")
            )));
        }
        Ok(answer)
    }

    /// How many jobs on `node` still run or complete (their processes ended,
    /// their epilog still running): work that is not yet off the node.
    async fn stopping_on(&self, node: &str) -> Result<u32> {
        let answer = self.json("squeue").await?;
        Ok(jobs(&answer)
            .filter(|j| {
                states(j, &["job_state"])
                    .iter()
                    .any(|s| s == "RUNNING" || s == "COMPLETING")
            })
            .filter(|j| {
                hostnames(j.get("nodes").and_then(Value::as_str).unwrap_or(""))
                    .iter()
                    .any(|n| n == node)
            })
            .count() as u32)
    }

    /// Wait until no job on `node` runs or completes, looking every 2 s for at most
    /// [`STOP_WAIT`]; how many still do.
    async fn wait_stopped(&self, node: &str) -> Result<u32> {
        let until = std::time::Instant::now() + STOP_WAIT;
        loop {
            let stopping = self.stopping_on(node).await?;
            if stopping == 0 || std::time::Instant::now() >= until {
                return Ok(stopping);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// The running jobs: (id, requeue allowed, the nodes it runs on).
    async fn running(&self) -> Result<Vec<(String, bool, Vec<String>)>> {
        let answer = self.json("squeue").await?;
        Ok(jobs(&answer)
            .filter(|j| runs(j))
            .filter_map(|j| {
                let id = j.get("job_id")?.as_u64()?.to_string();
                let requeue = j.get("requeue").and_then(Value::as_bool).unwrap_or(false);
                let nodes = hostnames(j.get("nodes").and_then(Value::as_str).unwrap_or(""));
                Some((id, requeue, nodes))
            })
            .collect())
    }

    /// `node` as Slurm shows it now, before a verb changes it: one node of that
    /// very name, or refused. `scontrol update nodename=` reads a `NodeSet`'s
    /// name (`NodeSet=gpus Feature=gpu`) as every node in it, where `scontrol show
    /// node` knows no such node: a name Slurm does not show as one node is never
    /// sent, whatever hale took in under it.
    async fn node_now(&self, node: &str, op: &'static str) -> Result<Shown> {
        one_node(node, op)?;
        let shown = match self.run("scontrol", &["show", "node", node]).await {
            Ok(shown) => shown,
            Err(e) if e.detail.contains(&format!("Node {node} not found")) => {
                return Err(OrchestratorError::refused(format!(
                    "Slurm shows no node `{node}` (a NodeSet's name, or a name only alerts use): scontrol would act on whatever it names, so hale sends nothing"
                ))
                .during(node, op));
            }
            Err(e) => return Err(e.during(node, op)),
        };
        let records: Vec<&str> = shown
            .lines()
            .filter(|l| l.starts_with("NodeName="))
            .collect();
        let named = format!("NodeName={node}");
        if records.len() != 1 || records[0].split_whitespace().next() != Some(named.as_str()) {
            return Err(OrchestratorError::refused(format!(
                "Slurm shows `{node}` as {} node(s), not one of that name: hale sends nothing",
                records.len()
            ))
            .during(node, op));
        }
        Ok(Shown::read(&shown))
    }

    async fn update(&self, what: &[&str]) -> Result<()> {
        let mut args = vec!["update"];
        args.extend_from_slice(what);
        self.run("scontrol", &args).await.map(|_| ())
    }
}

impl Orchestrator for Slurm {
    fn restart_hint(&self) -> &'static str {
        "Submit work that is safe to run again from the beginning with --requeue"
    }

    fn can_reboot(&self) -> bool {
        self.cfg.reboot
    }

    fn publish<'a>(&'a self, reports: &'a [Report]) -> Fut<'a, ()> {
        Box::pin(async move {
            for r in reports {
                // Where `scontrol show node` shows it: the node's comment.
                let comment = format!(
                    "hale: score={} health={}{}",
                    r.score.map_or_else(|| "-".to_string(), |s| s.to_string()),
                    r.health.as_str(),
                    if r.stale { " (stale)" } else { "" }
                );
                let known = self
                    .comments
                    .lock()
                    .expect("comments lock")
                    .get(&r.id)
                    .cloned();
                if known.as_deref() == Some(comment.as_str()) || known.is_none() {
                    continue;
                }
                let set = format!("comment={comment}");
                self.update(&[&format!("nodename={}", r.id), &set])
                    .await
                    .map_err(|e| e.during(&r.id, "publish"))?;
                self.comments
                    .lock()
                    .expect("comments lock")
                    .insert(r.id.clone(), comment);
            }
            Ok(())
        })
    }

    fn inventory(&self) -> Fut<'_, Option<Vec<Observed>>> {
        Box::pin(async {
            let nodes = self.json("sinfo").await.map_err(|e| e.doing("inventory"))?;
            let mut jobs: HashMap<String, u32> = HashMap::new();
            for (_, _, on) in self.running().await.map_err(|e| e.doing("inventory"))? {
                for n in on {
                    *jobs.entry(n).or_default() += 1;
                }
            }
            let listed = nodes
                .get("nodes")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut weights = self.weights.lock().expect("weights lock");
            let mut comments = self.comments.lock().expect("comments lock");
            let mut out = Vec::new();
            for n in &listed {
                let Some(o) = observed(n, &jobs) else {
                    continue;
                };
                if let Some(w) = n.get("weight").and_then(Value::as_u64) {
                    weights.insert(o.id.clone(), w);
                }
                let comment = n.get("comment").and_then(Value::as_str).unwrap_or_default();
                comments.insert(o.id.clone(), comment.to_string());
                out.push(o);
            }
            Ok(Some(out))
        })
    }

    fn cordon<'a>(&'a self, node: &'a str, by: &'a str, reason: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            let now = self.node_now(node, "cordon").await?;
            let reason = format!("{by}: {reason}");
            if now.drained() && now.reason == reason {
                return Ok(());
            }
            // Drained by someone else since the inventory was read: theirs, not
            // taken over as hale's (and resumed by hale's uncordon later).
            if by == Actor::Hale.as_str() && now.drained() && !now.reason.starts_with(HALE) {
                return Err(OrchestratorError::refused(format!(
                    "node {node} was drained outside hale meanwhile (reason: {}): the drain is the operator's",
                    now.reason
                ))
                .during(node, "cordon"));
            }
            self.update(&[
                &format!("nodename={node}"),
                "state=drain",
                &format!("reason={reason}"),
            ])
            .await
            .map_err(|e| e.during(node, "cordon"))
        })
    }

    fn uncordon<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            self.node_now(node, "uncordon").await?;
            match self
                .update(&[&format!("nodename={node}"), "state=resume"])
                .await
            {
                // Slurm refuses to resume a node that is not drained: it is as asked
                // (asked twice, an uncordon leaves the node as asked once; taken for
                // trouble, it was retried for ever). It refuses one it will not
                // resume yet too (powering up, rebooting): that one is still drained.
                Err(e) if e.to_string().contains("Invalid node state specified") => {
                    if self.node_now(node, "uncordon").await?.drained() {
                        Err(e.during(node, "uncordon"))
                    } else {
                        Ok(())
                    }
                }
                done => done.map_err(|e| e.during(node, "uncordon")),
            }
        })
    }

    fn gate<'a>(&'a self, node: &'a str, on: bool) -> Fut<'a, ()> {
        Box::pin(async move {
            self.node_now(node, "gate").await?;
            let now = self
                .weights
                .lock()
                .expect("weights lock")
                .get(node)
                .copied();
            let weight = gate_weight(now, on);
            self.update(&[&format!("nodename={node}"), &format!("weight={weight}")])
                .await
                .map_err(|e| e.during(node, "gate"))
        })
    }

    fn drain<'a>(&'a self, node: &'a str, active: bool) -> Fut<'a, Done> {
        Box::pin(async move {
            if !active {
                return Ok(Done::default());
            }
            let work = self.workloads(node).await?;
            let (moved, failed): (Vec<&Workload>, Vec<&Workload>) =
                work.iter().partition(|w| w.restart_on_node_fault);
            let message = format!("hale: node {node} drained (active)");
            self.evict(node, "active drain", &moved, &failed, &message)
                .await?;
            // A requeued or cancelled job completes (its processes killed, its
            // epilog run) before the node is empty: a reboot meanwhile cuts that.
            let stopping = self
                .wait_stopped(node)
                .await
                .map_err(|e| e.during(node, "drain"))?;
            Ok(Done {
                moved: moved.len() as u32,
                failed: failed.len() as u32,
                moved_owners: moved.iter().map(|w| w.owner.clone()).collect(),
                stopping,
                ..Done::default()
            })
        })
    }

    fn workloads<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<Workload>> {
        Box::pin(async move {
            let running = self
                .running()
                .await
                .map_err(|e| e.during(node, "workloads"))?;
            Ok(running
                .into_iter()
                .filter(|(_, _, on)| on.iter().any(|n| n == node))
                .map(|(id, requeue, _)| Workload {
                    // A requeued job keeps its id: its restarts count against it.
                    owner: format!("job/{id}"),
                    id,
                    restart_on_node_fault: requeue,
                    uid: None,
                })
                .collect())
        })
    }

    fn evict<'a>(
        &'a self,
        node: &'a str,
        _fault: &'a str,
        moved: &'a [&'a Workload],
        failed: &'a [&'a Workload],
        message: &'a str,
    ) -> Fut<'a, Vec<String>> {
        Box::pin(async move {
            for w in moved {
                self.run("scontrol", &["requeue", &w.id])
                    .await
                    .map_err(|e| e.during(node, "evict"))?;
            }
            for w in failed {
                let comment = format!("admincomment={message}");
                self.update(&[&format!("jobid={}", w.id), &comment])
                    .await
                    .map_err(|e| e.during(node, "evict"))?;
                self.run("scancel", &[&w.id])
                    .await
                    .map_err(|e| e.during(node, "evict"))?;
            }
            Ok(Vec::new())
        })
    }

    fn terminate<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            self.node_now(node, "terminate").await?;
            // Only a cloud node (Slurm's power saving) has a machine Slurm makes:
            // powered down, Slurm resumes a fresh one when work needs it.
            self.update(&[
                &format!("nodename={node}"),
                "state=power_down_force",
                "reason=hale: replaced",
            ])
            .await
            .map_err(|e| e.during(node, "terminate"))
        })
    }

    fn reboot<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            if !self.cfg.reboot {
                return Err(OrchestratorError::refused(
                    "no BMC, and orchestrator.reboot is off (Slurm needs RebootProgram for scontrol reboot)",
                )
                .during(node, "reboot"));
            }
            self.node_now(node, "reboot").await?;
            // Neither `nextstate=resume` nor `ASAP` (which drains and sets the next
            // state to resume all the same): Slurm would put the node back in
            // service once it is back, before the flow verifies it, and hale would
            // read that as an operator's uncordon, cancelling the flow. The flow has
            // drained the node already; it stays drained, and the flow's uncordon
            // resumes it.
            self.run("scontrol", &["reboot", "reason=hale: reboot", node])
                .await
                .map(|_| ())
                .map_err(|mut e| {
                    // scontrol answered (slurmctld unreachable, access denied, no
                    // RebootProgram): not sent, and refused for good; only one that
                    // did not finish may have gone.
                    if !e.detail.contains("did not finish") {
                        e.class = crate::orchestrator::Class::Refused;
                    }
                    e.during(node, "reboot")
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// `scontrol show node` as Slurm 22.05 prints it: the state, and the reason
    /// without its `[user@time]`, not taken from a comment that quotes one.
    #[test]
    fn a_shown_node_reads_its_state_and_reason() {
        let shown = "NodeName=n1 Arch=x86_64 CoresPerSocket=1\n   \
                     OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC @0\n   \
                     State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1\n   \
                     Reason=bios update  x=y [root@2026-12-07T06:32:44]\n   \
                     Comment=hale: score=60 health=Degraded Reason=forged\n";
        assert_eq!(
            Shown::read(shown),
            Shown {
                state: "IDLE+DRAIN".into(),
                reason: "bios update  x=y".into()
            }
        );
        assert!(Shown::read(shown).drained());
        let idle = "NodeName=n2 Arch=x86_64\n   State=IDLE ThreadsPerCore=1\n";
        let idle = Shown::read(idle);
        assert_eq!((idle.state.as_str(), idle.reason.as_str()), ("IDLE", ""));
        assert!(!idle.drained());
    }

    /// A `binDir` is checked at load for every command hale runs from it.
    #[test]
    fn a_bin_dir_lacking_a_command_is_refused_at_load() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            bin_dir: Some(dir.path().to_path_buf()),
            ..Config::default()
        };
        let place = |name: &str, mode: u32| {
            let path = dir.path().join(name);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        for command in ["sinfo", "squeue", "scancel"] {
            place(command, 0o755);
        }
        let (key, message) = cfg.validate().unwrap_err();
        assert_eq!(key, "binDir");
        assert!(
            message.contains("scontrol is missing or not executable"),
            "{message}"
        );
        place("scontrol", 0o644);
        assert!(cfg.validate().is_err());
        place("scontrol", 0o755);
        cfg.validate().unwrap();
    }

    /// A name scontrol would read as more than one node is never sent; one node's
    /// name, dotted or dashed, is.
    #[test]
    fn only_one_node_is_named_to_scontrol() {
        for several in ["n[3-5]", "n1,n5", "ALL", "all", "-h", "n 1", ""] {
            let e = one_node(several, "cordon").expect_err(several);
            assert_eq!(e.metric_label(), "refused", "{several}");
            assert!(e.to_string().contains("not one Slurm node name"), "{e}");
        }
        for one in ["n1", "gpu-14.rack2", "node_07", "allnodes"] {
            one_node(one, "cordon").expect(one);
        }
    }

    /// The gate raises a node's weight past every other's, keeping its own in the
    /// raised one: lifted, it is back, whoever gated it and however often asked.
    #[test]
    fn the_gate_keeps_the_nodes_own_weight() {
        for (now, on, written) in [
            (Some(10), true, GATE_BASE + 10),
            (Some(GATE_BASE + 10), true, GATE_BASE + 10),
            (Some(GATE_BASE + 10), false, 10),
            (Some(10), false, 10),
            (None, true, GATE_BASE + 1),
            (None, false, 1),
            (Some(OLD_GATE_WEIGHT), true, GATE_BASE + 1),
            (Some(OLD_GATE_WEIGHT), false, 1),
            (Some(4_000_000_000), false, 3_000_000_000),
        ] {
            assert_eq!(gate_weight(now, on), written, "{now:?} {on}");
        }
        assert!(gated(GATE_BASE) && gated(OLD_GATE_WEIGHT) && !gated(10));
    }

    #[test]
    fn hostlists_expand() {
        assert_eq!(hostnames("n1"), ["n1"]);
        assert_eq!(hostnames("n[1-3]"), ["n1", "n2", "n3"]);
        assert_eq!(
            hostnames("gpu[01-02,7],cpu1"),
            ["gpu01", "gpu02", "gpu7", "cpu1"]
        );
        assert!(hostnames("").is_empty());
    }

    #[test]
    fn sinfo_states_and_flags_map_to_hale_s() {
        let jobs: HashMap<String, u32> = [("n1".to_string(), 2)].into();
        let cases = [
            ("idle", json!([]), "", Status::Ready, false, None),
            ("allocated", json!([]), "", Status::Ready, false, None),
            (
                "mixed",
                json!(["DRAIN"]),
                "hale: score below cordonBelow 60",
                Status::Cordoned,
                false,
                Some(Actor::Hale),
            ),
            (
                "idle",
                json!(["DRAIN"]),
                "maintenance",
                Status::Cordoned,
                false,
                Some(Actor::Operator),
            ),
            (
                "idle",
                json!(["DRAIN"]),
                "operator: bios",
                Status::Cordoned,
                false,
                Some(Actor::Operator),
            ),
            ("down", json!([]), "", Status::NotReady, true, None),
            (
                "down",
                json!([]),
                "Not responding",
                Status::NotReady,
                true,
                None,
            ),
            (
                "down",
                json!([]),
                "psu swap - bob",
                Status::Cordoned,
                true,
                Some(Actor::Operator),
            ),
            (
                "idle",
                json!(["NOT_RESPONDING"]),
                "",
                Status::NotReady,
                true,
                None,
            ),
            (
                "down",
                json!(["DRAIN"]),
                "hale: x",
                Status::Cordoned,
                true,
                Some(Actor::Hale),
            ),
        ];
        for (state, flags, reason, status, not_ready, by) in cases {
            let o = observed(
                &json!({"name": "n1", "state": state, "state_flags": flags, "reason": reason,
                        "partitions": ["gpu", "debug"], "active_features": "a100,ib", "weight": 1}),
                &jobs,
            )
            .unwrap();
            assert_eq!(
                (o.status, o.not_ready),
                (status, not_ready),
                "{state} {flags}"
            );
            assert_eq!(
                o.cordoned_by.map(|(a, _)| a),
                by,
                "{state} {flags} {reason}"
            );
            assert_eq!(o.allocations, Some(2));
            assert_eq!(o.labels["partition"], "gpu");
            assert_eq!(o.labels["feature/ib"], "true");
            assert_eq!(o.gated, Some(false));
        }
    }

    /// Slurm 23.02 and later: one list of the base state and its flags, features
    /// as lists, as `sinfo --json` of 24.11 writes them.
    #[test]
    fn sinfo_of_slurm_23_and_later_reads_the_same() {
        let jobs: HashMap<String, u32> = HashMap::new();
        let cases = [
            (json!(["IDLE"]), "", Status::Ready, false, None),
            (json!(["MIXED"]), "", Status::Ready, false, None),
            (
                json!(["IDLE", "DRAIN"]),
                "hale: score below cordonBelow 60",
                Status::Cordoned,
                false,
                Some(Actor::Hale),
            ),
            (
                json!(["ALLOCATED", "DRAIN"]),
                "bios update",
                Status::Cordoned,
                false,
                Some(Actor::Operator),
            ),
            (
                json!(["DOWN", "NOT_RESPONDING"]),
                "Not responding",
                Status::NotReady,
                true,
                None,
            ),
            (
                json!(["IDLE", "NOT_RESPONDING"]),
                "",
                Status::NotReady,
                true,
                None,
            ),
            (
                json!(["DOWN", "DRAIN"]),
                "hale: x",
                Status::Cordoned,
                true,
                Some(Actor::Hale),
            ),
            // An admin's down: out of service by their hand, their reason kept.
            (
                json!(["DOWN"]),
                "PSU failing - do not use (erin)",
                Status::Cordoned,
                true,
                Some(Actor::Operator),
            ),
            (
                json!(["IDLE", "POWER_DRAIN", "CLOUD"]),
                "",
                Status::Ready,
                false,
                None,
            ),
        ];
        for (state, reason, status, not_ready, by) in cases {
            let o = observed(
                &json!({"name": "n1", "state": state, "reason": reason, "hostname": "n1.lab",
                        "next_state_after_reboot": ["INVALID"], "partitions": ["gpu"],
                        "features": ["a100", "ib"], "active_features": ["a100", "ib"], "weight": 1,
                        "free_mem": {"set": true, "infinite": false, "number": 39871}}),
                &jobs,
            )
            .unwrap();
            assert_eq!((o.status, o.not_ready), (status, not_ready), "{state}");
            assert_eq!(o.cordoned_by.map(|(a, _)| a), by, "{state} {reason}");
            assert_eq!(o.labels["feature/ib"], "true");
            assert_eq!(o.hostname.as_deref(), Some("n1.lab"));
        }
        let cloud = json!({"name": "c1", "state": ["IDLE", "CLOUD"]});
        assert!(observed(&cloud, &jobs).unwrap().provisioned);
    }

    #[test]
    fn job_states_are_read_in_either_shape() {
        for (state, running) in [
            (json!("RUNNING"), true),
            (json!(["RUNNING"]), true),
            (json!(["RUNNING", "CONFIGURING"]), true),
            (json!("PENDING"), false),
            (json!(["PENDING", "REQUEUED"]), false),
            (json!(["COMPLETING"]), false),
        ] {
            let job = json!({"job_id": 7, "job_state": state});
            assert_eq!(runs(&job), running, "{state}");
        }
    }
}
