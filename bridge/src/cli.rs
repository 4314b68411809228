//! The `hale` command line: `serve`, `check-config`, and the client verbs that talk to a
//! running hale over its HTTP API (`--server` / `HALE_SERVER`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::de::DeserializeOwned;

use hale::core::Status;
use hale::core::policy::{Actor, Conclusion, Entry, Remediations};
use hale::store::StoreError;
use hale::view::{
    AlertsView, ClearRequest, DrainRequest, ErrorBody, EventsView, NodeList, NodeView,
    OperateRequest, PendingView, PowerRequest, RebootRequest,
};

/// The least `node power` waits for hale's answer: hale answers once the BMC
/// confirms the change, after a graceful shutdown's timeout at worst.
const POWER_WAIT: Duration = Duration::from_secs(30 * 60);

/// How often the CLI asks again when a follower answered instead of the leader.
const LEADER_ATTEMPTS: u64 = 5;

#[derive(Parser, Debug)]
#[command(
    name = "hale",
    version = hale::VERSION,
    about = "Prometheus alerts in, node health out"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the service: poll and receive Alertmanager, score nodes, serve the API.
    Serve {
        /// Configuration file; without it the built-in defaults apply.
        #[arg(long, short = 'c', env = CONFIG_VAR)]
        config: Option<PathBuf>,
        /// `text` (colours only on a terminal) or `json`, one object per line, for
        /// log collectors.
        #[arg(long, env = "HALE_LOG_FORMAT", value_parser = log_format, default_value = "text")]
        log_format: LogFormat,
    },
    /// Validate a configuration file with the same code `serve` uses.
    CheckConfig { file: PathBuf },
    /// Inspect and act on nodes.
    Node {
        #[command(subcommand)]
        verb: NodeVerb,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// What hale currently sees from Alertmanager.
    Alerts {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// The reboot flow and fences: `remediation list`.
    Remediation {
        #[command(subcommand)]
        verb: RemediationVerb,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// The policy's offline tools.
    Policy {
        #[command(subcommand)]
        verb: PolicyVerb,
    },
    /// Node facts no exporter has, written for node_exporter's textfile collector.
    Collect {
        #[command(subcommand)]
        what: Collect,
    },
    /// Move an installation between store kinds.
    Store {
        #[command(subcommand)]
        verb: StoreVerb,
    },
}

#[derive(Subcommand, Debug)]
pub enum StoreVerb {
    /// Copy node state, the trust record, the policy ledger and every event from
    /// one store into another, empty one (stop hale first).
    Copy {
        /// `sqlite:PATH` (the directory of `store.path`) or `nats://HOST:PORT`
        /// (several servers separated by commas).
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        /// The `cluster` whose records a NATS store holds.
        #[arg(long, default_value = "default")]
        cluster: String,
        /// Copies JetStream keeps of the NATS store copied into (at most the
        /// servers in the cluster: 1 for a single server); a store copied from is
        /// read as it is.
        #[arg(long, default_value_t = 3)]
        replicas: usize,
        /// A NATS store's event retention (its stream's max age), as
        /// `store.eventRetentionDays` says.
        #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(1..=36500))]
        event_retention_days: u32,
    },
}

/// Open a store named `sqlite:PATH` or `nats://…`; `create`: the store may be made,
/// and a NATS one's settings are made `replicas` and `retention`. The source of a
/// copy is opened as it is: its stream and buckets keep their settings.
fn open_store(
    spec: &str,
    (cluster, replicas, retention): (&str, usize, u32),
    create: bool,
) -> anyhow::Result<Box<dyn hale::store::Store>> {
    if let Some(path) = spec.strip_prefix("sqlite:") {
        let path = PathBuf::from(path);
        if !create && !path.join(hale::store::sqlite::FILE).is_file() {
            bail!("no hale store at {}", path.display());
        }
        // Locked as `hale serve` locks it: a store a hale is writing is not copied.
        // The target is written; the source is only read, and may be a
        // read-only copy.
        let opened = hale::store::Sqlite::open_locked(&path, "hale store copy").and_then(|store| {
            if create {
                store.writable().map(|()| store)
            } else {
                Ok(store)
            }
        });
        return match opened {
            Ok(store) => Ok(Box::new(store)),
            Err(e @ (StoreError::InUse { .. } | StoreError::Create { .. })) => Err(e.into()),
            Err(e) => Err(anyhow::anyhow!("{spec}: {e}")),
        };
    }
    if spec.starts_with("nats://") || spec.starts_with("tls://") {
        let cfg = hale::store::nats::NatsConfig {
            urls: spec.split(',').map(str::to_string).collect(),
            creds_file: None,
            tls: None,
            replicas,
            lease_duration: Duration::from_secs(20),
        };
        cfg.validate()
            .map_err(|(key, why)| anyhow::anyhow!("{}: {key} {why}", shown_store(spec)))?;
        let opened = if create {
            hale::store::Nats::open(&cfg, cluster, retention)
        } else {
            hale::store::Nats::open_existing(&cfg, cluster)
        };
        return match opened {
            Ok(store) => Ok(Box::new(store)),
            Err(e) => Err(anyhow::anyhow!("{}: {e}", shown_store(spec))),
        };
    }
    bail!(
        "{:?} names no store: sqlite:PATH or nats://HOST:PORT",
        shown_store(spec)
    )
}

/// A store as it may be printed: a NATS URL's user and password left out.
fn shown_store(spec: &str) -> String {
    if spec.starts_with("sqlite:") {
        return spec.to_string();
    }
    hale::shown_urls(spec.split(','))
}

/// `hale store copy`: events first, oldest first, in slices; then the state.
pub fn run_store_copy(verb: StoreVerb) -> anyhow::Result<()> {
    let StoreVerb::Copy {
        from,
        to,
        cluster,
        replicas,
        event_retention_days,
    } = verb;
    if from == to {
        bail!("--from and --to name the same store: copy into another, empty one");
    }
    let nats = (cluster.as_str(), replicas, event_retention_days);
    let source = open_store(&from, nats, false)?;
    // A store a replica writes meanwhile would be copied part before a change and
    // part after it (an event whose change is missing, raised again on serving).
    if let Some(leader) = source.leader()? {
        bail!(
            "{} is being written: hale replica {leader} leads on it (it holds the lease); stop every replica first",
            shown_store(&from)
        );
    }
    let now = chrono::Utc::now();
    // A target that holds anything is refused before it is opened to be written:
    // opened so, a NATS store would take this copy's retention and copies.
    let full = |store: &dyn hale::store::Store| -> anyhow::Result<bool> {
        Ok(!store.load(now)?.nodes.is_empty() || !store.history(0)?.is_empty())
    };
    // What to empty before copying into `to` again.
    let empty = || match to.strip_prefix("sqlite:") {
        Some(path) => format!("remove {path}"),
        None => hale::store::nats::Names::of(&cluster).to_empty(),
    };
    if let Ok(existing) = open_store(&to, nats, false) {
        if existing.copying()? {
            bail!(
                "{} holds part of a copy that did not finish: {} before copying again",
                shown_store(&to),
                empty()
            );
        }
        if full(existing.as_ref())? {
            bail!(
                "{} already holds nodes or events: copy into an empty store",
                shown_store(&to)
            );
        }
    }
    if source.copying()? {
        bail!(
            "{} holds part of a copy that did not finish: copy from the store it was copied from",
            shown_store(&from)
        );
    }
    let mut target = open_store(&to, nats, true)?;
    let fleet = source.load(now)?;
    let history = source.history(0)?;
    if full(target.as_ref())? {
        bail!(
            "{} already holds nodes or events: copy into an empty store",
            shown_store(&to)
        );
    }
    // A copy that stops part-way leaves the target holding part of it, which the
    // next try would refuse: say what to empty.
    let partly = |e: hale::store::StoreError| {
        anyhow::anyhow!(
            "{e}\nthe copy stopped part-way: {} holds part of it; {} before copying again",
            shown_store(&to),
            empty()
        )
    };
    // Marked until all is written: `hale serve` refuses a store holding part of a copy.
    target.mark_copying(true).map_err(partly)?;
    let trust = serde_json::to_string(&fleet.trust)?;
    for slice in history.chunks(10_000) {
        target
            .write(&hale::store::Batch {
                events: slice,
                trust: trust.clone(),
                ..hale::store::Batch::default()
            })
            .map_err(partly)?;
    }
    let nodes = fleet
        .nodes
        .values()
        .map(|n| Ok((n.id.clone(), serde_json::to_string(n)?)))
        .collect::<serde_json::Result<Vec<_>>>()?;
    target
        .write(&hale::store::Batch {
            nodes,
            trust,
            ledger: Some(serde_json::to_string(&fleet.ledger)?),
            restarts: fleet
                .ledger
                .moves
                .iter()
                .map(|(owner, m)| (owner.clone(), Some(*m)))
                .collect(),
            ..hale::store::Batch::default()
        })
        .map_err(partly)?;
    target.mark_copying(false).map_err(partly)?;
    println!(
        "copied {} nodes and {} events from {} to {}",
        fleet.nodes.len(),
        history.len(),
        shown_store(&from),
        shown_store(&to)
    );
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum Collect {
    /// GPU health from `nvidia-smi -q -x`, for sites without DCGM: ECC counts,
    /// remapped rows, retired pages, clock event reasons, PCIe replays and the
    /// driver's recovery action per GPU, and whether nvidia-smi answered.
    Gpu {
        /// The file to write, replaced atomically: a `.prom` file in node_exporter's
        /// `--collector.textfile.directory`; `-` for standard output.
        #[arg(long, short = 'o', value_parser = hale::collect::Output::parse)]
        output: hale::collect::Output,
        /// The nvidia-smi to run: a name looked up on PATH (on none: no driver
        /// here, GPU health unavailable) or a path (missing: an error).
        #[arg(long, default_value = "nvidia-smi")]
        nvidia_smi: PathBuf,
        /// How long nvidia-smi may take before it is killed and the run counts as
        /// failed (a GPU that fell off the bus can hang it).
        #[arg(long, default_value = "10s", value_parser = duration)]
        timeout: Duration,
        /// Run every INTERVAL instead of once (for a container or a service
        /// without a timer): at least 1s; keep it under 5m (a textfile older
        /// than that fails the collector: from 5m up it runs, and says so on
        /// standard error).
        #[arg(long, value_parser = collect_interval)]
        interval: Option<Duration>,
    },
}

/// `view` with a line break inside any of its texts written as `\n` (`\r` as `\r`).
fn one_line<T: serde::Serialize + serde::de::DeserializeOwned>(view: &T) -> T {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) if s.contains(['\n', '\r']) => {
                *s = s.replace('\n', "\\n").replace('\r', "\\r");
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            serde_json::Value::Object(o) => o.values_mut().for_each(walk),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(view).expect("views serialise");
    walk(&mut v);
    serde_json::from_value(v).expect("a view reads back as written")
}

/// The environment variables the arguments read that, set empty, are unset.
/// Not [`CONFIG_VAR`]: set empty, it names no file, which `hale serve` refuses
/// rather than run on the built-in defaults.
pub const ENV_VARS: [&str; 3] = ["HALE_LOG_FORMAT", "HALE_SERVER", "HALE_TOKEN_FILE"];

/// `hale serve`'s configuration file.
pub const CONFIG_VAR: &str = "HALE_CONFIG";

/// A node id as the CLI takes it: not empty (the API would answer "node  is not
/// known"), nor white space alone, nor one no node can have.
fn node_id(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("a node id is needed, not an empty one".into());
    }
    if !hale::core::labels::nameable(text) || text.trim() != text {
        return Err(format!(
            "no node has the id {}: `.`, `..`, white space around it, control, invisible or direction-changing characters and more than {} bytes are no node's name",
            hale::core::labels::escaped(text, |c| c.is_control()
                || hale::core::labels::invisible(c)),
            hale::core::labels::MAX_NODE_ID
        ));
    }
    Ok(text.to_string())
}

fn duration(text: &str) -> Result<Duration, String> {
    hale::core::settings::parse_duration(text).and_then(|d| {
        if d.is_zero() {
            Err("must be more than 0s".into())
        } else {
            Ok(d)
        }
    })
}

/// How often `collect` runs its tool: not back to back.
fn collect_interval(text: &str) -> Result<Duration, String> {
    let every = duration(text)?;
    if every < Duration::from_secs(1) {
        return Err(
            "must be at least 1s: nvidia-smi run back to back only loads the driver".into(),
        );
    }
    Ok(every)
}

#[derive(Subcommand, Debug)]
pub enum RemediationVerb {
    /// The queue (in admission order, with what holds each), the flows and fences
    /// under way, and what holds every admission back.
    List,
}

/// How `serve` writes its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// A log format named by the flag or the environment: a bad one says both, as
/// clap's own message names only the flag.
fn log_format(text: &str) -> Result<LogFormat, String> {
    match text {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err("text or json, from --log-format or else HALE_LOG_FORMAT".into()),
    }
}

#[derive(Subcommand, Debug)]
pub enum PolicyVerb {
    /// Replay the recorded history through the policy with a candidate configuration
    /// and show what it would have done beside what was recorded.
    Backtest {
        /// The candidate configuration.
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// How far back: a duration (30d, 12h) or an RFC 3339 time.
        #[arg(long, default_value = "30d")]
        since: String,
        /// A SQLite store to read (its directory); default: the candidate's store
        /// (`store.path`, or its NATS store, read as it is).
        #[arg(long)]
        store: Option<PathBuf>,
        #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

/// `hale policy backtest`: reads the store directly (SQLite allows it beside a running
/// hale) and never writes to it.
pub fn run_backtest(verb: PolicyVerb) -> anyhow::Result<()> {
    let PolicyVerb::Backtest {
        config,
        since,
        store,
        output,
    } = verb;
    let loaded = hale::config::Config::load_bounded(Some(&config))?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let kept = &loaded.config.store;
    // The one `--store` names, else the candidate's. A NATS store is opened as it
    // is: opened as `hale serve` opens it, its stream and buckets would take the
    // candidate's settings (retention, copies, the lease).
    let store: Box<dyn hale::store::Store> = match (store, &kept.nats) {
        (None, Some(nats)) if kept.kind == hale::config::StoreKind::Nats => Box::new(
            hale::store::Nats::open_existing(nats, &loaded.config.cluster).map_err(|e| {
                anyhow::anyhow!(
                    "{}: {e}",
                    hale::shown_urls(nats.urls.iter().map(String::as_str))
                )
            })?,
        ),
        (store, _) => {
            let path = store.unwrap_or_else(|| kept.path.clone());
            if !path.join(hale::store::sqlite::FILE).is_file() {
                bail!("no hale store at {}", path.display());
            }
            Box::new(hale::store::Sqlite::open(&path)?)
        }
    };
    let now = chrono::Utc::now();
    let since = match chrono::DateTime::parse_from_rfc3339(&since) {
        Ok(t) => t.with_timezone(&chrono::Utc),
        Err(_) => {
            let ago = hale::core::settings::parse_duration(&since).map_err(|_| {
                anyhow::anyhow!(
                    "--since {since:?} is neither a duration (30d) nor an RFC 3339 time"
                )
            })?;
            chrono::TimeDelta::from_std(ago)
                .ok()
                .and_then(|ago| now.checked_sub_signed(ago))
                .ok_or_else(|| anyhow::anyhow!("--since {since:?} is too far back"))?
        }
    };
    let known = store.load(now)?.nodes;
    // All of it: what came before the window rebuilds the state it starts in.
    let history = store.history(0)?;
    let inventory: Vec<hale::core::Listed> = loaded
        .config
        .inventory
        .iter()
        .map(hale::config::InventoryNode::listed)
        .collect();
    let report =
        hale::core::replay::backtest(&loaded.core, &known, &inventory, &history, Some(since), now);
    if output == Output::Json {
        print_json(&report);
    } else {
        print!(
            "{}",
            terminal(&backtest_table(&report, &config.display().to_string()))
        );
    }
    Ok(())
}

/// `text` as a terminal may be given it: texts from alerts and reasons are anyone's,
/// so a control character other than a line break or tab (an escape sequence that
/// clears the screen or sets the title), or a bidirectional override (that shows
/// one id as another), is written as `\u{..}` — and a backslash as `\\`, as the
/// log writes it, so a text that spells `\u{202e}` out reads apart from one that
/// holds the character.
pub fn terminal(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        c == '\\'
            || (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{61c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if unsafe_char(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

fn backtest_table(r: &hale::core::replay::Backtest, candidate: &str) -> String {
    use hale::core::replay::Tally;
    let cells = |t: &Tally| {
        [
            t.recommendations,
            t.cordons,
            t.drains,
            t.replacements,
            t.halts,
        ]
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} event(s) since {} replayed with {candidate}",
        r.events_replayed,
        r.since.map_or("the start".into(), hale::core::shown_time)
    );
    let _ = writeln!(
        o,
        "{:<24} {:>12} {:>8} {:>7} {:>13} {:>6}",
        "", "RECOMMENDED", "CORDONS", "DRAINS", "REPLACEMENTS", "HALTS"
    );
    for (name, t) in [("candidate", &r.candidate), ("recorded", &r.recorded)] {
        let [a, b, c, d, e] = cells(t);
        let _ = writeln!(o, "{name:<24} {a:>12} {b:>8} {c:>7} {d:>13} {e:>6}");
    }
    for (name, t) in [("candidate", &r.candidate), ("recorded", &r.recorded)] {
        if !t.halted_by.is_empty() {
            let why: Vec<String> = t
                .halted_by
                .iter()
                .map(|(guardrail, n)| format!("{guardrail} {n}"))
                .collect();
            let _ = writeln!(o, "{name} halts by guardrail: {}", why.join(", "));
        }
    }
    if !r.nodes.is_empty() {
        let _ = writeln!(o, "\nper node, candidate/recorded:");
        for (id, side) in &r.nodes {
            let c = cells(&side.candidate);
            let rec = cells(&side.recorded);
            let pair = |i: usize| format!("{}/{}", c[i], rec[i]);
            let _ = writeln!(
                o,
                "{id:<24} {:>12} {:>8} {:>7} {:>13} {:>6}",
                pair(0),
                pair(1),
                pair(2),
                pair(3),
                pair(4)
            );
        }
    }
    o
}

#[derive(Subcommand, Debug)]
pub enum NodeVerb {
    /// List nodes: ID, CLUSTER, HOSTNAME, STATUS, HEALTH, SCORE, JOBS.
    List {
        /// Only nodes in this health state (Healthy, Degraded, Unknown).
        #[arg(long)]
        health: Option<String>,
        /// Only nodes in this status (Ready, NotReady, Cordoned, Offline).
        #[arg(long)]
        status: Option<String>,
        /// Only nodes priced by this pool (`cluster`: by no pool).
        #[arg(long)]
        pool: Option<String>,
        /// The nodes of this cluster: this hale's, or a federation member's.
        #[arg(long, conflicts_with = "all_clusters")]
        cluster: Option<String>,
        /// This hale's nodes, then every federation member's, each with the
        /// state and score its own cluster holds.
        #[arg(long)]
        all_clusters: bool,
    },
    /// A node's conditions, score breakdown, failures and unavailable signals.
    Show {
        #[arg(value_parser = node_id)]
        id: String,
    },
    /// A node's history, oldest first: TIME, TYPE, DETAIL.
    Events {
        #[arg(value_parser = node_id)]
        id: String,
        /// From this time on: RFC 3339, or a duration meaning that long ago (24h).
        #[arg(long)]
        since: Option<String>,
        /// Before this time (same forms as --since).
        #[arg(long)]
        until: Option<String>,
        /// Only these types (score_changed, CONDITION_RAISED, …); repeatable.
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
        /// The newest page instead of the oldest.
        #[arg(long)]
        latest: bool,
        /// Events per page (1-1000).
        #[arg(long, default_value_t = 100)]
        page_size: usize,
        /// Continue where a previous page ended.
        #[arg(long)]
        page_token: Option<String>,
    },
    /// Take a node out of service: no new work; running work is left alone.
    Cordon {
        #[arg(value_parser = node_id)]
        id: String,
        /// Why: recorded on the event.
        #[arg(long, default_value = "")]
        reason: String,
        /// How long to wait for the orchestrator to do it; not done by then, the
        /// exit status is 1 (hale goes on trying). 0s: record it and return.
        #[arg(long, default_value = "10s", value_parser = hale::core::settings::parse_duration)]
        wait: Duration,
    },
    /// Return a node to service. Automation then leaves it alone for
    /// cordonSuppressionMinutes.
    Uncordon {
        #[arg(value_parser = node_id)]
        id: String,
        #[arg(long, default_value = "")]
        reason: String,
        /// How long to wait for the orchestrator to do it; not done by then, the
        /// exit status is 1 (hale goes on trying). 0s: record it and return.
        #[arg(long, default_value = "10s", value_parser = hale::core::settings::parse_duration)]
        wait: Duration,
    },
    /// Cordon, then let running work finish (passive) or move it (--active).
    Drain {
        /// The node; with --all, every ready node instead.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Every ready node; the count is what this took out of service.
        #[arg(long)]
        all: bool,
        /// Also move running work: what may run again is requeued (it restarts from
        /// the beginning elsewhere), the rest failed (Slurm: cancelled).
        #[arg(long)]
        active: bool,
        #[arg(long, default_value = "")]
        reason: String,
        /// How long to wait for the orchestrator to cordon the node; not cordoned
        /// by then, the exit status is 1 (hale goes on trying). 0s: record it and
        /// return. The drain after the cordon is waited for within the same time,
        /// and may go on past it (said as under way).
        #[arg(long, default_value = "10s", value_parser = hale::core::settings::parse_duration)]
        wait: Duration,
    },
    /// Power through the node's BMC, confirmed by reading the state back:
    /// status, on, off (graceful, forced after bmc.gracefulTimeout), cycle, reset.
    Power {
        #[arg(value_parser = node_id)]
        id: String,
        #[arg(value_parser = ["status", "on", "off", "cycle", "reset"])]
        action: String,
        /// Skip the graceful shutdown.
        #[arg(long)]
        force: bool,
    },
    /// Queue the node for the reboot flow: cordon, drain, reboot through the BMC,
    /// wait for its return, verify, uncordon what the flow cordoned.
    Reboot {
        #[arg(value_parser = node_id)]
        id: String,
        #[arg(long, default_value = "")]
        reason: String,
        /// Skip the graceful shutdown.
        #[arg(long)]
        force: bool,
    },
    /// Clear a condition (the only way a sticky one ends).
    Clear {
        #[arg(value_parser = node_id)]
        id: String,
        #[arg(value_name = "TYPE")]
        condition: String,
        /// Why: recorded on the event.
        #[arg(long)]
        reason: String,
    },
}

#[derive(Args, Debug)]
pub struct ClientArgs {
    /// hale's API address.
    #[arg(
        long,
        env = "HALE_SERVER",
        default_value = "http://127.0.0.1:9470",
        global = true
    )]
    server: String,
    /// File holding the bearer token: for the verbs that change a node, and for
    /// reads too where hale sets `ui.requireToken`.
    #[arg(long, env = "HALE_TOKEN_FILE", global = true)]
    token_file: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table, global = true)]
    output: Output,
    /// How long to wait for each of hale's answers (`node power` waits 30m at
    /// least, for the BMC's confirmation).
    #[arg(long, default_value = "60s", value_parser = duration, global = true)]
    timeout: Duration,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

struct Client {
    http: reqwest::Client,
    base: reqwest::Url,
    timeout: Duration,
    token: Option<String>,
}

impl Client {
    fn new(args: &ClientArgs) -> anyhow::Result<Client> {
        let base = reqwest::Url::parse(&args.server).with_context(|| {
            format!(
                "--server {:?} is not a URL{}",
                args.server,
                hale::bracket_hint(&args.server)
            )
        })?;
        let token = match &args.token_file {
            Some(p) => Some(hale::token_text(p).map_err(|e| anyhow::anyhow!("token file: {e}"))?),
            None => None,
        };
        Ok(Client {
            http: hale::http_client()
                .user_agent(hale::USER_AGENT)
                .connect_timeout(args.timeout.min(Duration::from_secs(10)))
                .build()
                .context("building the HTTP client")?,
            base,
            timeout: args.timeout,
            token,
        })
    }

    /// URL of `segments` under the base, each percent-encoded (node ids may hold `/`).
    fn url(&self, segments: &[&str]) -> reqwest::Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("http URLs have paths")
            .pop_if_empty()
            .extend(segments);
        url
    }

    /// Send `req`. Behind a Service over several replicas a change may reach a
    /// follower, which answers 503 `not_leader`: asked again, the Service soon
    /// picks the leader.
    async fn send<T: DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> anyhow::Result<T> {
        self.send_within(req, self.timeout).await
    }

    /// [`Client::send`], waiting `limit` for the whole answer: a hale that takes
    /// the connection and never answers (wedged, or a network path that drops
    /// what comes back) is an error, not a wait without end.
    async fn send_within<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
        limit: Duration,
    ) -> anyhow::Result<T> {
        self.answered_within(req, limit)
            .await
            .map(|(answer, _)| answer)
    }

    /// [`Client::send_within`], with the answer's headers.
    async fn answered_within<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
        limit: Duration,
    ) -> anyhow::Result<(T, reqwest::header::HeaderMap)> {
        let req = req.timeout(limit);
        let mut req = match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let failed = |e: reqwest::Error, doing: &str| {
            let at = hale::shown_url(&self.base);
            if e.is_timeout() {
                anyhow::anyhow!("hale at {at} did not answer within {limit:?} (--timeout)")
            } else {
                let why = hale::error_chain(&e.without_url());
                let proxy = hale::proxy_note(&self.base);
                anyhow::anyhow!("{doing} hale at {at}: {why}{proxy}")
            }
        };
        let mut attempt = 1;
        let (status, headers, text) = loop {
            let again = req.try_clone();
            let resp = req.send().await.map_err(|e| failed(e, "cannot reach"))?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let text = resp
                .text()
                .await
                .map_err(|e| failed(e, "reading the answer of"))?;
            let follower = status == reqwest::StatusCode::SERVICE_UNAVAILABLE
                && serde_json::from_str::<ErrorBody>(&text).is_ok_and(|e| e.error == "not_leader");
            match again {
                Some(next) if follower && attempt < LEADER_ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                    attempt += 1;
                    req = next;
                }
                _ => break (status, headers, text),
            }
        };
        // What is not hale's answer is said without the token: a proxy (or a
        // server that is not hale) may echo the request it got.
        let secrets = match &self.token {
            Some(token) => hale::redact::Secrets::new().with(token),
            None => hale::redact::Secrets::new(),
        };
        if !status.is_success() {
            let text = secrets.scrub(&text);
            // What to do about a refused token, said where it is refused.
            let hint = match (status, &self.token) {
                (reqwest::StatusCode::UNAUTHORIZED, None) => {
                    " — this hale wants a token: pass --token-file FILE or set HALE_TOKEN_FILE"
                }
                (reqwest::StatusCode::UNAUTHORIZED, Some(_)) => {
                    " — the token from --token-file / HALE_TOKEN_FILE is not the one in hale's apiTokenFile"
                }
                _ => "",
            };
            match serde_json::from_str::<ErrorBody>(&text) {
                Ok(e) => bail!("{} ({}): {}{hint}", e.error, status.as_u16(), e.detail),
                Err(_) => bail!(
                    "{} answered {status}, not as hale answers (is it hale?): {}{hint}",
                    hale::shown_url(&self.base),
                    text.chars().take(200).collect::<String>()
                ),
            }
        }
        // Said by where it fails to parse, not by what it holds; one that parses
        // is taken without the token in it.
        serde_json::from_str(&secrets.scrub_known_in_json(&text))
            .map(|answer| (answer, headers))
            .map_err(|e| {
                anyhow::anyhow!(
                    "{} answered, not as hale answers (is it hale?): {}",
                    hale::shown_url(&self.base),
                    secrets.scrub(&hale::redact::unquoted(&e.to_string()))
                )
            })
    }

    async fn get<T: DeserializeOwned>(&self, segments: &[&str]) -> anyhow::Result<T> {
        self.send(self.http.get(self.url(segments))).await
    }

    /// `POST /api/v1/nodes/{id}/{verb}` with `body`; the node as it now is.
    async fn operate(
        &self,
        id: &str,
        verb: &str,
        body: &impl serde::Serialize,
    ) -> anyhow::Result<(NodeView, Option<bool>)> {
        let url = self.url(&["api", "v1", "nodes", id, verb]);
        let (node, headers) = self
            .answered_within(self.http.post(url).json(body), self.timeout)
            .await?;
        // Whether this verb changed the node, as the server judged it under its
        // lock (an earlier hale says nothing).
        let changed = headers
            .get(hale::http::CHANGED)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        Ok((node, changed))
    }
}

/// Print the node after a verb: the whole record as JSON, or a line saying what
/// happened and the detail.
fn report(json: bool, node: &NodeView, done: &str) {
    if json {
        print_json(node);
    } else {
        println!("{done}");
        print!("{}", terminal(&node_detail(node)));
    }
}

/// Where a verb's action stands once waited for.
enum Settled {
    /// Done: the node is as asked.
    Done(NodeView),
    /// Still queued when the wait ended: the action, and why its last try failed.
    Pending(NodeView, PendingView),
    /// Taken off the queue without the node being as asked: the orchestrator
    /// refused it (why is in the node's POLICY_HALTED event), or a later change
    /// (another request, or someone outside hale) undid it ([`undone`] tells).
    Refused(NodeView),
}

/// Wait up to `wait` for the orchestrator to do the `action` a verb queued on
/// `node`; `holds` says whether the node is then as the verb asked.
async fn settled(
    client: &Client,
    node: NodeView,
    action: &str,
    wait: Duration,
    holds: fn(&NodeView) -> bool,
) -> anyhow::Result<Settled> {
    let mut all = settled_all(client, vec![node], action, wait, holds).await?;
    Ok(all.pop().expect("one node asked, one answered"))
}

/// [`settled`] for many nodes at once: each round asks again only for those
/// still waiting, in the order given.
async fn settled_all(
    client: &Client,
    mut nodes: Vec<NodeView>,
    action: &str,
    wait: Duration,
    holds: fn(&NodeView) -> bool,
) -> anyhow::Result<Vec<Settled>> {
    let held = |n: &NodeView| n.pending.iter().find(|p| p.action == action).cloned();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() || !nodes.iter().any(|n| held(n).is_some()) {
            break;
        }
        tokio::time::sleep(left.min(Duration::from_millis(200))).await;
        for n in nodes.iter_mut().filter(|n| held(n).is_some()) {
            *n = client
                .get(&["api", "v1", "nodes", &n.id])
                .await
                .with_context(|| {
                    format!(
                        "the {action} of {} was recorded; waiting for it to be done (`hale node show {}` says where it stands)",
                        n.id, n.id
                    )
                })?;
        }
    }
    Ok(nodes
        .into_iter()
        .map(|node| match held(&node) {
            Some(pending) => Settled::Pending(node, pending),
            None if holds(&node) => Settled::Done(node),
            None => Settled::Refused(node),
        })
        .collect())
}

/// What took a verb's action off the queue without the node being as asked.
enum Undone {
    /// The orchestrator refused it: its halt says why.
    Refused(String),
    /// A later change undid it (another request, concurrent with the verb, or
    /// someone outside hale): its event says which.
    Changed(String),
}

/// What took a verb's action on `node` off the queue: the latest of its cordons,
/// uncordons and the orchestrator's refusals — a refusal, or the change that
/// undid it (a guardrail's halt recorded after that change is not it).
async fn undone(client: &Client, node: &str) -> Undone {
    use hale::core::EventKind;
    let mut url = client.url(&["api", "v1", "nodes", node, "events"]);
    url.query_pairs_mut()
        .append_pair("type", "POLICY_HALTED")
        .append_pair("type", "NODE_CORDONED")
        .append_pair("type", "NODE_UNCORDONED")
        .append_pair("latest", "true")
        .append_pair("pageSize", "20");
    let page: anyhow::Result<EventsView> = client.send(client.http.get(url)).await;
    let refusal = |kind: &EventKind| matches!(kind, EventKind::PolicyHalted { guardrail, .. } if guardrail == "orchestrator");
    let latest = page.ok().and_then(|p| {
        p.events.into_iter().rev().find(|e| {
            refusal(&e.event.kind) || !matches!(e.event.kind, EventKind::PolicyHalted { .. })
        })
    });
    match latest {
        Some(e) if refusal(&e.event.kind) => Undone::Refused(e.event.message),
        Some(e) => Undone::Changed(e.event.message),
        None => Undone::Refused(format!(
            "see `hale node events {node} --type POLICY_HALTED`"
        )),
    }
}

/// After a verb: wait up to `wait` for the orchestrator to do the `action` the
/// verb queued on `node`, then print the node with `done`, or say what is not
/// done yet or was refused. Either is an error (exit status 1: the node is not
/// as asked); what is not done yet, hale goes on trying.
async fn settle(
    client: &Client,
    json: bool,
    node: NodeView,
    action: &str,
    wait: Duration,
    holds: fn(&NodeView) -> bool,
    done: &str,
) -> anyhow::Result<()> {
    let settled = settled(client, node, action, wait, holds).await?;
    conclude(client, json, settled, action, wait, done).await
}

/// Say where a verb's `action` stands once waited for `wait` (see [`settle`]).
async fn conclude(
    client: &Client,
    json: bool,
    settled: Settled,
    action: &str,
    wait: Duration,
    done: &str,
) -> anyhow::Result<()> {
    match settled {
        Settled::Done(node) => {
            report(json, &node, done);
            Ok(())
        }
        Settled::Refused(node) => match undone(client, &node.id).await {
            Undone::Refused(why) => {
                report(json, &node, &format!("{}: {action} refused", node.id));
                bail!(
                    "the orchestrator refused the {action} of {}: {why}",
                    node.id
                )
            }
            Undone::Changed(what) => {
                report(json, &node, &format!("{}: {action} undone since", node.id));
                bail!(
                    "the {action} of {} was undone by a later change: {what} (`hale node events {}`)",
                    node.id,
                    node.id
                )
            }
        },
        Settled::Pending(node, pending) if wait.is_zero() => {
            let queued = format!(
                "{}: {} recorded, not waited for (`hale node show {}` lists it until done)",
                node.id, pending.action, node.id
            );
            report(json, &node, &queued);
            Ok(())
        }
        Settled::Pending(node, pending) => {
            report(
                json,
                &node,
                &format!("{}: {} recorded, not done yet", node.id, pending.action),
            );
            let why = match (&pending.last_try, &pending.last_error) {
                (Some(_), Some(e)) => format!("its last try failed: {e}"),
                (None, Some(e)) => e.clone(),
                _ => "the orchestrator has not answered yet".into(),
            };
            bail!(
                "{} of {} not done within {wait:?}: {why}; hale goes on trying (`hale node show {}`)",
                pending.action,
                node.id,
                node.id
            )
        }
    }
}

/// Whether a node is out of service, as a cordon or a drain asks.
fn out_of_service(n: &NodeView) -> bool {
    n.cordon.is_some()
}

/// Whether a node is out of service and drained, as a drain asks (not where the
/// orchestrator refused the drain).
fn drained(n: &NodeView) -> bool {
    n.cordon.as_ref().is_some_and(|c| c.drained)
}

/// Whether an uncordon has something to do: the node is out of service, or an
/// uncordon asked before is not done yet (waited for as this one).
fn out_of_service_or_leaving(n: &NodeView) -> bool {
    n.cordon.is_some()
        || n.status == Status::Cordoned
        || n.pending.iter().any(|p| p.action == "uncordon")
}

/// Whether a node is back in service, as an uncordon asks.
fn in_service(n: &NodeView) -> bool {
    n.cordon.is_none() && n.status != Status::Cordoned
}

/// Run a client verb, printing to stdout.
pub async fn run_node(verb: NodeVerb, args: ClientArgs) -> anyhow::Result<()> {
    let client = Client::new(&args)?;
    let json = args.output == Output::Json;
    match verb {
        NodeVerb::List {
            health,
            status,
            pool,
            cluster,
            all_clusters,
        } => {
            let all = all_clusters.then(|| "true".to_string());
            let filters: Vec<(&str, &str)> = [
                ("health", &health),
                ("status", &status),
                ("pool", &pool),
                ("cluster", &cluster),
                ("allClusters", &all),
            ]
            .into_iter()
            .filter_map(|(key, value)| Some((key, value.as_deref()?)))
            .collect();
            let list = every_node(&client, &filters).await?;
            for u in &list.unreachable {
                eprintln!(
                    "hale: cluster {} could not be asked; its nodes (or the rest of them) are not listed: {}",
                    u.cluster,
                    terminal(&u.error)
                );
            }
            if json {
                print_json(&list);
            } else {
                print!("{}", terminal(&node_table(&list)));
            }
            if !list.unreachable.is_empty() {
                anyhow::bail!(
                    "{} cluster(s) could not be asked: the listing is not the whole fleet",
                    list.unreachable.len()
                );
            }
        }
        NodeVerb::Show { id } => {
            let node: NodeView = client.get(&["api", "v1", "nodes", &id]).await?;
            if json {
                print_json(&node);
            } else {
                print!("{}", terminal(&node_detail(&node)));
            }
        }
        NodeVerb::Events {
            id,
            since,
            until,
            types,
            latest,
            page_size,
            page_token,
        } => {
            let mut url = client.url(&["api", "v1", "nodes", &id, "events"]);
            {
                let mut q = url.query_pairs_mut();
                if let Some(v) = &since {
                    q.append_pair("since", v);
                }
                if let Some(v) = &until {
                    q.append_pair("until", v);
                }
                for t in &types {
                    q.append_pair("type", t);
                }
                if latest {
                    q.append_pair("latest", "true");
                }
                q.append_pair("pageSize", &page_size.to_string());
                if let Some(v) = &page_token {
                    q.append_pair("pageToken", v);
                }
            }
            let page: EventsView = client.send(client.http.get(url)).await?;
            if json {
                print_json(&page);
            } else {
                print!("{}", terminal(&events_table(&page)));
                if let Some(token) = &page.next_page_token {
                    eprintln!("more events: --page-token {token}");
                }
            }
        }
        NodeVerb::Cordon { id, reason, wait } => {
            let before: NodeView = client.get(&["api", "v1", "nodes", &id]).await?;
            let same = before.cordon.as_ref().is_some_and(|c| {
                c.by == Actor::Operator && (reason.is_empty() || c.reason == reason)
            });
            let (node, changed) = client
                .operate(&id, "cordon", &OperateRequest { reason })
                .await?;
            // The server's word where it says (it judged under its lock, after any
            // request racing this one); the node read before, where it does not.
            let done = if changed.map_or(same, |changed| !changed) {
                format!(
                    "{id} was cordoned by an operator already, for this reason: nothing new recorded"
                )
            } else {
                format!("{id} cordoned")
            };
            settle(&client, json, node, "cordon", wait, out_of_service, &done).await?;
        }
        NodeVerb::Uncordon { id, reason, wait } => {
            let before: NodeView = client.get(&["api", "v1", "nodes", &id]).await?;
            let (node, changed) = client
                .operate(&id, "uncordon", &OperateRequest { reason })
                .await?;
            if !changed.unwrap_or_else(|| out_of_service_or_leaving(&before)) {
                // Nothing to wait for: a cordon made after it is not its business.
                report(json, &node, &format!("{id} was not cordoned: nothing done"));
                return Ok(());
            }
            let done = format!("{id} uncordoned");
            settle(&client, json, node, "uncordon", wait, in_service, &done).await?;
        }
        NodeVerb::Drain {
            id: Some(id),
            active,
            reason,
            wait,
            ..
        } => {
            let before: NodeView = client.get(&["api", "v1", "nodes", &id]).await?;
            // As the server judges it: a passive drain an operator made already,
            // for this reason, records nothing new.
            let same = !active
                && before.cordon.as_ref().is_some_and(|c| {
                    c.by == Actor::Operator
                        && c.drained
                        && !c.drain_refused
                        && (reason.is_empty()
                            || c.reason == reason
                            || c.drain_reason.as_deref() == Some(reason.as_str()))
                })
                && !before
                    .pending
                    .iter()
                    .any(|p| p.action == "drain" || p.action == "cordon");
            let (node, changed) = client
                .operate(&id, "drain", &DrainRequest { active, reason })
                .await?;
            let same = changed.map_or(same, |changed| !changed);
            let how = if active { "active" } else { "passive" };
            // The cordon, then the drain after it, within the same --wait: the
            // drain may go on past it (an active drain waits for its work to
            // stop), and a drain the orchestrator refused is said so.
            let started = tokio::time::Instant::now();
            let (settled, action) = match settled(&client, node, "cordon", wait, out_of_service)
                .await?
            {
                Settled::Done(n) => {
                    let left = wait.saturating_sub(started.elapsed());
                    match settled(&client, n, "drain", left, drained).await? {
                        Settled::Pending(n, _) => {
                            let under_way =
                                format!("{id} cordoned; the drain ({how}) is under way");
                            report(json, &n, &under_way);
                            return Ok(());
                        }
                        // Uncordoned meanwhile (by whoever): withdrawn, not refused.
                        Settled::Refused(n) if n.cordon.is_none() => {
                            report(json, &n, &format!("{id}: uncordoned before drained"));
                            bail!(
                                "{id} was put back in service before the drain was done: not drained"
                            );
                        }
                        other => (other, "drain"),
                    }
                }
                other => (other, "cordon"),
            };
            let done = if same {
                format!(
                    "{id} was drained by an operator already, for this reason: nothing new recorded"
                )
            } else {
                format!("{id} drained ({how})")
            };
            conclude(&client, json, settled, action, wait, &done).await?;
        }
        NodeVerb::Drain {
            id: None,
            active,
            reason,
            wait,
            ..
        } => {
            // Only ready nodes are drained, and only those the orchestrator took
            // out count.
            let list = every_node(&client, &[("status", "Ready")]).await?;
            let mut asked = Vec::new();
            for n in list.nodes.iter().filter(|n| n.status == Status::Ready) {
                let req = DrainRequest {
                    active,
                    reason: reason.clone(),
                };
                // A node that left Ready since the listing is skipped, not fatal.
                match client.operate(&n.id, "drain", &req).await {
                    Ok((node, _)) => asked.push(node),
                    Err(e) if e.to_string().contains("(409)") => {
                        eprintln!("skipped {}: {}", n.id, terminal(&e.to_string()));
                    }
                    Err(e) => return Err(e),
                }
            }
            let (mut drained, mut refused, mut pending, mut changed) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for settled in settled_all(&client, asked, "cordon", wait, out_of_service).await? {
                match settled {
                    Settled::Done(n) => drained.push(n.id),
                    Settled::Refused(n) => match undone(&client, &n.id).await {
                        Undone::Refused(why) => {
                            eprintln!("refused {}: {}", n.id, terminal(&why));
                            refused.push(n.id);
                        }
                        Undone::Changed(what) => {
                            eprintln!("undone since {}: {}", n.id, terminal(&what));
                            changed.push(n.id);
                        }
                    },
                    Settled::Pending(n, _) => pending.push(n.id),
                }
            }
            if json {
                print_json(&serde_json::json!({
                    "drained": drained.len(), "nodes": drained,
                    "refused": refused, "pending": pending, "undone": changed,
                }));
            } else {
                println!("Cordoned {} node(s)", drained.len());
                if !pending.is_empty() {
                    println!(
                        "{} not done yet (hale goes on trying): {}",
                        pending.len(),
                        pending.join(", ")
                    );
                }
            }
            if !(refused.is_empty() && changed.is_empty() && (pending.is_empty() || wait.is_zero()))
            {
                bail!(
                    "{} node(s) refused by the orchestrator, {} undone by a later change, {} not cordoned within {wait:?}",
                    refused.len(),
                    changed.len(),
                    pending.len()
                );
            }
        }
        NodeVerb::Power { id, action, force } => {
            let url = client.url(&["api", "v1", "nodes", &id, "power"]);
            let req = PowerRequest { action, force };
            let limit = client.timeout.max(POWER_WAIT);
            let done: serde_json::Value = client
                .send_within(client.http.post(url).json(&req), limit)
                .await?;
            if json {
                print_json(&done);
            } else {
                let field = |k: &str| {
                    done.get(k)
                        .and_then(|v| v.as_str())
                        .unwrap_or("-")
                        .to_string()
                };
                let sent: Vec<&str> = done
                    .get("sent")
                    .and_then(|v| v.as_array())
                    .map(|a| a.iter().filter_map(|s| s.as_str()).collect())
                    .unwrap_or_default();
                if req.action == "status" {
                    println!("{id}: power {}", field("after"));
                } else {
                    println!(
                        "{id}: power {} {}: {} → {}{}",
                        req.action,
                        field("result"),
                        field("before"),
                        field("after"),
                        if sent.is_empty() {
                            String::new()
                        } else {
                            format!(" (sent {})", sent.join(", "))
                        }
                    );
                }
            }
        }
        NodeVerb::Reboot { id, reason, force } => {
            let (node, _) = client
                .operate(&id, "reboot", &RebootRequest { reason, force })
                .await?;
            report(json, &node, &format!("{id} queued for a reboot"));
        }
        NodeVerb::Clear {
            id,
            condition,
            reason,
        } => {
            // `node show` prints a condition's title beside its type: either names
            // it. The type as written first; then in any case, or by its title.
            let shown: NodeView = client.get(&["api", "v1", "nodes", &id]).await?;
            let wanted = condition.trim();
            let condition = match shown.conditions.iter().find(|c| c.ctype == wanted) {
                Some(c) => c.ctype.to_string(),
                None => {
                    let loose: Vec<&str> = shown
                        .conditions
                        .iter()
                        .filter(|c| {
                            c.ctype.eq_ignore_ascii_case(wanted)
                                || title(&c.ctype).eq_ignore_ascii_case(wanted)
                        })
                        .map(|c| c.ctype.as_str())
                        .collect();
                    match loose[..] {
                        [] => condition.clone(),
                        [one] => one.to_string(),
                        _ => anyhow::bail!(
                            "{wanted} names {} conditions on {id} (types differ only in case): write the type as node show prints it",
                            loose.join(" and ")
                        ),
                    }
                }
            };
            let url = client.url(&["api", "v1", "nodes", &id, "conditions", &condition, "clear"]);
            let node: NodeView = client
                .send(client.http.post(url).json(&ClearRequest { reason }))
                .await?;
            if json {
                print_json(&node);
            } else {
                println!("cleared {condition} on {id}");
                print!("{}", terminal(&node_detail(&node)));
            }
        }
    }
    Ok(())
}

/// `hale remediation list`.
pub async fn run_remediation(verb: RemediationVerb, args: ClientArgs) -> anyhow::Result<()> {
    let client = Client::new(&args)?;
    match verb {
        RemediationVerb::List => {
            let view: Remediations = client.get(&["api", "v1", "remediations"]).await?;
            if args.output == Output::Json {
                print_json(&view);
            } else {
                print!("{}", terminal(&remediations_table(&view)));
            }
        }
    }
    Ok(())
}

/// The remediation listing as operators read it.
pub fn remediations_table(v: &Remediations) -> String {
    let mut out = String::new();
    if v.blocked.is_empty() {
        out.push_str("Admission: open\n");
    } else {
        for why in &v.blocked {
            out.push_str(&format!("Blocked: {why}\n"));
        }
    }
    out.push_str(&format!(
        "Failures in the last hour: {}\n",
        v.failures_last_hour
    ));
    let rows = |entries: &[Entry], waiting: bool| -> Vec<Vec<String>> {
        entries
            .iter()
            .map(|e| {
                let mut row = vec![
                    e.node.clone(),
                    e.action.clone(),
                    e.step.clone(),
                    e.priority.to_string(),
                    e.domain.clone(),
                    e.trigger.clone(),
                    e.since.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                ];
                if waiting {
                    row.push(e.waiting.clone().unwrap_or_else(|| "next".into()));
                }
                row
            })
            .collect()
    };
    let head = [
        "NODE", "ACTION", "STEP", "PRIORITY", "DOMAIN", "TRIGGER", "SINCE",
    ];
    for (title, entries, waiting) in [
        ("In flight", &v.in_flight, false),
        ("Fencing", &v.fencing, false),
        ("Queued", &v.queued, true),
    ] {
        out.push_str(&format!("\n{title}: {}\n", entries.len()));
        if !entries.is_empty() {
            let mut header = head.to_vec();
            if waiting {
                header.push("WAITING ON");
            }
            out.push_str(&table(&header, &rows(entries, waiting)));
        }
    }
    out
}

pub async fn run_alerts(args: ClientArgs) -> anyhow::Result<()> {
    let client = Client::new(&args)?;
    let view: AlertsView = client.get(&["api", "v1", "alerts"]).await?;
    if args.output == Output::Json {
        print_json(&view);
    } else {
        print!("{}", terminal(&alerts_table(&view)));
    }
    Ok(())
}

fn print_json<T: serde::Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("views serialise")
    );
}

/// Left-aligned columns separated by three spaces.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    // One row a line: a line break inside a cell (an alert's text) is written as
    // `\n`, or it would start a row of its own.
    let cell = |c: &String| c.replace('\n', "\\n").replace('\r', "\\r");
    let rows: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(cell).collect()).collect();
    let rows = &rows;
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                let _ = write!(l, "{cell:<w$}   ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

pub fn node_table(list: &NodeList) -> String {
    let rows: Vec<Vec<String>> = list
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.id.clone(),
                n.cluster.clone(),
                n.hostname.clone(),
                format!("{:?}", n.status),
                format!("{:?}", n.health),
                n.score.map_or("-".into(), |s| s.to_string()),
                n.jobs.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "ID", "CLUSTER", "HOSTNAME", "STATUS", "HEALTH", "SCORE", "JOBS",
        ],
        &rows,
    )
}

/// Why a node with `heartbeat_missed`, `telemetry_stale` or `collector_failed` has
/// no policy decided for it.
const HELD: &str = "hale neither acts on nor decides for a node it cannot fully see";

fn title(ctype: &str) -> String {
    ctype
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn node_detail(n: &NodeView) -> String {
    // Each field its own line: a line break inside a text (an alert's reason or
    // summary) is written as `\n`, or it could show as a field of its own.
    let n = &one_line(n);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Node:      {} (cluster {}, hostname {})",
        n.id, n.cluster, n.hostname
    );
    let _ = writeln!(o, "Status:    {:?}", n.status);
    if let Some(c) = &n.cordon {
        let drained = hale::view::drain_note(c);
        let reason = match c.reason.trim() {
            "" => String::new(),
            reason => format!(": {reason}"),
        };
        let _ = writeln!(
            o,
            "Cordoned:  by {} at {}{reason}{drained}",
            c.by.as_str(),
            hale::core::shown_time(c.at),
        );
    }
    for p in &n.pending {
        let _ = match (&p.last_try, &p.last_error) {
            (Some(at), Some(e)) => writeln!(
                o,
                "Pending:   {} (not done yet; the try at {} failed: {e})",
                p.action,
                hale::core::shown_time(*at)
            ),
            (None, Some(e)) => writeln!(o, "Pending:   {} ({e})", p.action),
            _ => writeln!(o, "Pending:   {} (not done yet)", p.action),
        };
    }
    if n.gated {
        let _ = writeln!(
            o,
            "Gated:     new work kept off (the score fell below drainBelow; lifted once it has stayed at or above for 15 minutes)"
        );
    }
    if let Some(f) = &n.remediation {
        let _ = writeln!(
            o,
            "Reboot:    {} since {} (by {}, priority {}): {}",
            f.step.as_str(),
            hale::core::shown_time(f.since),
            f.by.as_str(),
            f.priority,
            f.reason
        );
    }
    if let Some(h) = &n.orchestrator_health {
        let _ = writeln!(
            o,
            "Orchestrator: {}, score {} (its own view, not part of hale's)",
            h.state,
            h.score
                .map_or_else(|| "none".to_string(), |s| s.to_string())
        );
    }
    if let Some(f) = &n.fence {
        let _ = writeln!(
            o,
            "Fence:     {} since {}",
            f.step.as_str(),
            hale::core::shown_time(f.since)
        );
    }
    let lifts = n
        .policy_lifts_at
        .map(|t| {
            format!(
                "; recovered, stands until {} unless it degrades again",
                hale::core::shown_time(t)
            )
        })
        .unwrap_or_default();
    let lifts = if n.policy_held_by.is_empty() {
        lifts
    } else {
        format!(
            "{lifts}; on hold while {}: {HELD}, so this is the last decided",
            n.policy_held_by.join(", ")
        )
    };
    match &n.policy {
        None if !n.policy_held_by.is_empty() => {
            let _ = writeln!(
                o,
                "Policy:    on hold while {}: {HELD}",
                n.policy_held_by.join(", ")
            );
        }
        Some(Conclusion::Recommended { action }) => {
            let _ = writeln!(o, "Policy:    would {} (observe){lifts}", action.as_str());
        }
        Some(Conclusion::Acted { action, waiting }) => {
            let waiting = if *waiting {
                ", waiting for the node to empty"
            } else {
                ""
            };
            let _ = writeln!(o, "Policy:    {}{waiting}{lifts}", action.as_str());
        }
        Some(Conclusion::Halted { action, guardrail }) => {
            let _ = writeln!(
                o,
                "Policy:    {} halted by {}{lifts}",
                action.as_str(),
                guardrail.as_str()
            );
        }
        None => {}
    }
    match n.last_report {
        Some(t) => {
            let _ = writeln!(
                o,
                "Health:    {:?} (last reported {})",
                n.health,
                hale::core::shown_time(t)
            );
        }
        None => {
            let _ = writeln!(o, "Health:    {:?}", n.health);
        }
    }
    match (n.score, &n.scored_by) {
        (Some(score), Some(by)) => {
            let _ = writeln!(o, "Score:     {score}/100 (penalties: {by})");
            for d in &n.breakdown {
                let _ = writeln!(o, "  -{:<4}{}", d.points, d.reason);
            }
            let charged: u64 = n.breakdown.iter().map(|d| u64::from(d.points)).sum();
            if charged > 100 {
                let _ = writeln!(
                    o,
                    "  (the penalties add up to {charged}: the score stops at 0)"
                );
            }
        }
        // An alert fed one of its conditions (hale's own, a missed heartbeat or
        // stale telemetry, need none).
        _ if n.last_report.is_none()
            && n.conditions.iter().any(|c| {
                ![hale::core::HEARTBEAT_MISSED, hale::core::TELEMETRY_STALE]
                    .contains(&c.ctype.as_str())
            }) =>
        {
            let _ = writeln!(
                o,
                "Score:     not yet scored: its alerts came while hale did not trust its source (no watchdog, or Alertmanager unreachable); the first trusted poll or delivery that names it scores it"
            );
        }
        _ if n.last_report.is_none() => {
            let _ = writeln!(
                o,
                "Score:     not yet scored: no alert has named this node yet (alerts name a node by their `node` label, else `instance` without the port: nodeIdentity)"
            );
        }
        _ => {
            let _ = writeln!(o, "Score:     not yet scored");
        }
    }
    if n.conditions.is_empty() {
        let _ = writeln!(o, "Conditions: none");
    } else {
        let _ = writeln!(o, "Conditions:");
        for c in &n.conditions {
            let mut flags = Vec::new();
            if c.sticky {
                flags.push("sticky");
            }
            if c.suppressed {
                flags.push("suppressed");
            }
            let flags = if flags.is_empty() {
                String::new()
            } else {
                format!(" ({})", flags.join(", "))
            };
            let severity = title(c.severity.as_str());
            let _ = writeln!(
                o,
                "  {} ({}) [{severity}] {}{flags}",
                title(&c.ctype),
                c.ctype,
                c.message
            );
            let _ = writeln!(
                o,
                "    first seen {}, {} observation{}",
                hale::core::shown_time(c.first_seen),
                c.observations,
                if c.observations == 1 { "" } else { "s" }
            );
        }
    }
    let f = &n.failures;
    match f.last {
        Some(last) => {
            let _ = writeln!(
                o,
                "Attributed job failures: {} (last {}), costing {} points now",
                f.total,
                hale::core::shown_time(last),
                f.deduction
            );
            // Reasons as sent (a job's own words): not titled as condition types are.
            for (reason, count) in &f.by_reason {
                let _ = writeln!(o, "  {reason}: {count}");
            }
        }
        None => {
            let _ = writeln!(o, "Attributed job failures: 0");
        }
    }
    if !n.unavailable_signals.is_empty() {
        let shown: Vec<String> = n
            .unavailable_signals
            .iter()
            .map(|s| format!("{s}: unavailable"))
            .collect();
        let _ = writeln!(o, "Not checked: {}", shown.join(", "));
    }
    o
}

pub fn events_table(page: &EventsView) -> String {
    let rows: Vec<Vec<String>> = page
        .events
        .iter()
        .map(|e| {
            vec![
                hale::core::shown_time(e.event.occurred_at),
                e.event.kind.name().to_string(),
                e.event.message.clone(),
            ]
        })
        .collect();
    table(&["TIME", "TYPE", "DETAIL"], &rows)
}

pub fn alerts_table(v: &AlertsView) -> String {
    let s = &v.source;
    // Without polling `up` says nothing: trust is the deliveries'.
    let state = match (s.polling, s.last_trusted) {
        (true, _) if s.up => "up".to_string(),
        (true, _) => "DOWN".to_string(),
        (false, Some(t)) => format!(
            "webhook only, last trusted delivery {}",
            hale::core::shown_time(t)
        ),
        (false, None) => "webhook only, no trusted delivery yet".to_string(),
    };
    let mut o = format!(
        "Source:    {} (receiver {}) {state}{}\n",
        s.url,
        s.receiver,
        if s.stale { ", telemetry STALE" } else { "" }
    );
    if let Some(e) = &s.last_error {
        let _ = writeln!(o, "Error:     {e}");
    }
    if let Some(until) = s.hold_until {
        let _ = writeln!(
            o,
            "Holding:   an alert's absence ends nothing until {} ({})",
            hale::core::shown_time(until),
            s.hold_reason
                .as_deref()
                .unwrap_or("the pipeline restarted lately")
        );
    }
    let rows: Vec<Vec<String>> = v
        .alerts
        .iter()
        .map(|a| {
            vec![
                a.alertname.clone(),
                a.node.clone().unwrap_or_else(|| "-".into()),
                a.meaning.clone(),
                a.severity.as_str().into(),
                a.state.clone(),
            ]
        })
        .collect();
    o.push_str(&table(
        &["ALERT", "NODE", "MEANING", "SEVERITY", "STATE"],
        &rows,
    ));
    for a in &v.alerts {
        for note in &a.notes {
            let on = a
                .node
                .as_deref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default();
            let _ = writeln!(o, "Note: {}{on}: {note}", a.alertname);
        }
    }
    o
}

/// `hale collect gpu`: once, or every `interval`. A run that could not read every
/// GPU still writes its file (saying why in it) and says why on standard error;
/// run once, it then exits with status 1.
pub async fn run_collect(what: Collect) -> anyhow::Result<()> {
    use hale::collect::{Tool, gpu};
    let Collect::Gpu {
        output,
        nvidia_smi,
        timeout,
        interval,
    } = what;
    if let Some(every) = interval.filter(|i| *i >= gpu::STALE_AFTER) {
        eprintln!(
            "hale collect gpu: --interval {every:?} is not under {:?}: the rules take a textfile that old for a collector that stopped (GpuCollectorFailed), between every two runs",
            gpu::STALE_AFTER
        );
    }
    let missing = if nvidia_smi == Path::new("nvidia-smi") {
        "nvidia-smi is on no PATH directory: no NVIDIA driver here, GPU health unavailable (give --nvidia-smi its path if it is installed elsewhere)".to_string()
    } else {
        format!(
            "--nvidia-smi {} is on no PATH directory: GPU health unavailable (give it as a path if it is installed elsewhere)",
            nvidia_smi.display()
        )
    };
    let mut tool = Tool::new(nvidia_smi, gpu::NVIDIA_SMI_ARGS, timeout);
    if let Some(marker) = output.marker("nvidia-smi") {
        tool = tool.remembering_in(marker);
    }
    let mut every = interval.map(|i| {
        let mut every = tokio::time::interval(i);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every
    });
    // Stopped, it kills the nvidia-smi it runs (its own process group) rather
    // than leave it behind; a service stopped between runs ends cleanly.
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    );
    let mut first = true;
    loop {
        let run = async {
            if let Some(every) = every.as_mut() {
                every.tick().await;
            }
            tool.run().await
        };
        let stopped = tokio::select! {
            run = run => Ok(run),
            _ = term.recv() => Err("SIGTERM"),
            _ = int.recv() => Err("SIGINT"),
        };
        let run = match stopped {
            Ok(run) => run,
            Err(_) if interval.is_some() => return Ok(()),
            Err(signal) => bail!("stopped by {signal} before nvidia-smi answered: nothing written"),
        };
        let collected = gpu::Collected::from_run(run);
        if matches!(collected, gpu::Collected::NoDriver) && std::mem::take(&mut first) {
            eprintln!("hale collect gpu: {missing}");
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let written = output
            .write(&collected.render(now))
            .with_context(|| format!("writing {output}"));
        let problem = collected.problem();
        if every.is_none() {
            written?;
            return problem.map_or(Ok(()), |p| Err(anyhow::anyhow!(p)));
        }
        // Repeating: say it and try again next time (a full disk passes).
        for problem in [written.err().map(|e| format!("{e:#}")), problem]
            .into_iter()
            .flatten()
        {
            eprintln!("hale collect gpu: {problem}");
        }
    }
}

/// Every node the filters take, page by page (a page holds at most 1,000).
async fn every_node(client: &Client, filters: &[(&str, &str)]) -> anyhow::Result<NodeList> {
    let mut list = NodeList {
        nodes: Vec::new(),
        next_page_token: None,
        total: None,
        unreachable: Vec::new(),
    };
    let mut token: Option<String> = None;
    // A server whose pages never end (a member answering the same page again)
    // would hold the CLI for ever: a token seen before ends the listing.
    let mut seen = std::collections::HashSet::new();
    loop {
        let mut url = client.url(&["api", "v1", "nodes"]);
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("pageSize", "1000");
            for (key, value) in filters {
                q.append_pair(key, value);
            }
            if let Some(t) = &token {
                q.append_pair("pageToken", t);
            }
        }
        let page: NodeList = client.send(client.http.get(url)).await?;
        list.nodes.extend(page.nodes);
        list.unreachable.extend(page.unreachable);
        token = page.next_page_token;
        match &token {
            None => return Ok(list),
            Some(t) if !seen.insert(t.clone()) => bail!(
                "the listing does not move on: page token {t:?} came back a second time after {} node(s); a federation member (or a proxy) answers the same page again",
                list.nodes.len()
            ),
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hale::core::{Health, Status};
    use hale::view::NodeSummary;

    fn summary(id: &str, score: Option<u8>, health: Health) -> NodeSummary {
        NodeSummary {
            id: id.into(),
            cluster: "default".into(),
            hostname: id.into(),
            status: Status::Ready,
            health,
            score,
            scored_by: score.map(|_| "cluster".into()),
            conditions: vec![],
            last_report: None,
            jobs: 0,
        }
    }

    /// A verb's action taken off the queue without the node as asked: refused by
    /// the orchestrator where the latest of its cordons, uncordons and refusals
    /// is a refusal; undone by a later change where it is that change — a
    /// guardrail's halt recorded after the change is passed over.
    #[tokio::test]
    async fn an_action_undone_is_told_from_one_refused() {
        use hale::core::{Event, EventKind};
        use hale::store::StoredEvent;
        let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let halted = |guardrail: &str| EventKind::PolicyHalted {
            action: "cordon".into(),
            guardrail: guardrail.into(),
            policy_mode: "observe".into(),
            scored_by: "cluster".into(),
            score: None,
        };
        let latest = move |node: &str| {
            let events = match node {
                "refused" => vec![(
                    halted("orchestrator"),
                    "the operator's cordon was refused: not ready",
                )],
                _ => vec![
                    (
                        EventKind::NodeUncordoned {
                            by: "operator".into(),
                            reason: "back".into(),
                        },
                        "uncordoned by operator: back",
                    ),
                    (
                        halted("cordonSuppressionMinutes"),
                        "cordon would be halted: an operator uncordoned it less than 30 minutes ago",
                    ),
                ],
            };
            axum::Json(EventsView {
                events: events
                    .into_iter()
                    .enumerate()
                    .map(|(i, (kind, message))| StoredEvent {
                        id: format!("x-{i}"),
                        event: Event {
                            node_id: node.into(),
                            kind,
                            occurred_at: at,
                            message: message.into(),
                        },
                    })
                    .collect(),
                next_page_token: None,
            })
        };
        let app =
            axum::Router::new().route(
                "/api/v1/nodes/{id}/events",
                axum::routing::get(
                    move |axum::extract::Path(id): axum::extract::Path<String>| async move {
                        latest(&id)
                    },
                ),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        hale::init_tls();
        let client = Client {
            http: reqwest::Client::new(),
            base: reqwest::Url::parse(&base).unwrap(),
            timeout: Duration::from_secs(10),
            token: None,
        };
        assert!(matches!(
            undone(&client, "refused").await,
            Undone::Refused(why) if why == "the operator's cordon was refused: not ready"
        ));
        assert!(matches!(
            undone(&client, "changed").await,
            Undone::Changed(what) if what == "uncordoned by operator: back"
        ));
    }

    /// Penalties past 100 are said to stop at 0, so the breakdown adds up.
    #[test]
    fn a_breakdown_past_100_says_the_score_stops_at_0() {
        let view = |points: [u32; 2]| -> hale::view::NodeView {
            serde_json::from_value(serde_json::json!({
                "id": "n1", "cluster": "default", "hostname": "n1", "status": "Ready",
                "health": "Degraded", "score": 100u32.saturating_sub(points[0] + points[1]),
                "scoredBy": "cluster",
                "breakdown": [{"reason": "SmartFailing", "points": points[0]},
                              {"reason": "GpuXidHardware", "points": points[1]}],
                "conditions": [],
                "failures": { "total": 0, "last": null, "deduction": 0, "byReason": {} },
                "lastReport": null, "lastHeartbeat": null, "unavailableSignals": [],
                "jobs": 0, "gated": false
            }))
            .unwrap()
        };
        let said = "the score stops at 0";
        let text = node_detail(&view([60, 45]));
        assert!(
            text.contains("  (the penalties add up to 105: the score stops at 0)\n"),
            "{text}"
        );
        assert!(!node_detail(&view([60, 40])).contains(said));
    }

    #[test]
    fn an_empty_node_id_is_refused_by_the_cli() {
        for text in ["", "  "] {
            let e = Cli::try_parse_from(["hale", "node", "cordon", text, "--reason", "x"])
                .expect_err("no node");
            assert!(e.to_string().contains("a node id is needed"), "{e}");
        }
        assert!(Cli::try_parse_from(["hale", "node", "show", "gpu-1"]).is_ok());
        // Nor one no node can have: a URL path resolves `.` and `..` away.
        for text in [".", "..", " n1", "n\u{200b}1", "a\u{202e}b"] {
            let e = Cli::try_parse_from(["hale", "node", "show", text]).expect_err(text);
            assert!(e.to_string().contains("no node has the id"), "{e}");
        }
        assert!(Cli::try_parse_from(["hale", "node", "show", "rack1/n:3"]).is_ok());
    }

    /// `collect --interval` runs nvidia-smi at most once a second.
    #[test]
    fn a_collect_interval_under_a_second_is_refused() {
        for text in ["1ms", "999ms"] {
            let e = Cli::try_parse_from(["hale", "collect", "gpu", "-o", "-", "--interval", text])
                .expect_err(text);
            assert!(e.to_string().contains("must be at least 1s"), "{e}");
        }
        for text in ["1s", "30s", "10m"] {
            assert!(
                Cli::try_parse_from(["hale", "collect", "gpu", "-o", "-", "--interval", text])
                    .is_ok(),
                "{text}"
            );
        }
    }

    /// A node no alert named is not said to have had alerts, when it has only
    /// hale's own conditions (stale telemetry while the source is away).
    #[test]
    fn an_unscored_node_says_why_by_what_fed_its_conditions() {
        let view = |ctype: &str| -> hale::view::NodeView {
            serde_json::from_value(serde_json::json!({
                "id": "n1", "cluster": "default", "hostname": "n1", "status": "Ready",
                "health": "Unknown", "score": null, "scoredBy": null, "breakdown": [],
                "conditions": [{
                    "type": ctype, "reason": "r", "severity": "warning", "message": "m",
                    "firstSeen": "2026-12-01T00:00:00Z", "lastSeen": "2026-12-01T00:00:00Z",
                    "observations": 1, "sticky": false, "suppressed": false, "faultClass": "x"
                }],
                "failures": { "total": 0, "last": null, "deduction": 0, "byReason": {} },
                "lastReport": null, "lastHeartbeat": null, "unavailableSignals": [],
                "jobs": 0, "gated": false
            }))
            .unwrap()
        };
        let text = node_detail(&view("telemetry_stale"));
        assert!(text.contains("no alert has named this node yet"), "{text}");
        // An uncordon asked and not yet done: another is waited for, not "not
        // cordoned: nothing done".
        let mut leaving = view("disk_degraded");
        assert!(!out_of_service_or_leaving(&leaving));
        leaving.pending =
            serde_json::from_value(serde_json::json!([{"action": "uncordon"}])).unwrap();
        assert!(out_of_service_or_leaving(&leaving));
        let text = node_detail(&view("disk_degraded"));
        assert!(
            text.contains("its alerts came while hale did not trust"),
            "{text}"
        );
        // A cordon asked for without a reason shows none, not an empty one.
        let mut cordoned = view("disk_degraded");
        for (reason, shown) in [
            ("", "00:00:00Z, drained\n"),
            ("BIOS update", "00:00:00Z: BIOS update, drained\n"),
        ] {
            cordoned.cordon = serde_json::from_value(serde_json::json!({
                "by": "operator", "reason": reason, "at": "2026-12-01T00:00:00Z", "drained": true
            }))
            .unwrap();
            let text = node_detail(&cordoned);
            assert!(text.contains(shown), "{text}");
        }
        // A job failure's reason is shown as sent, not titled as a condition type.
        let mut failed = view("disk_degraded");
        failed.failures = serde_json::from_value(serde_json::json!({
            "total": 2, "last": "2026-12-01T00:00:00Z", "deduction": 10,
            "byReason": {"oom_killer in cgroup/slurm": 1, "unspecified": 1}
        }))
        .unwrap();
        let text = node_detail(&failed);
        assert!(
            text.contains("  oom_killer in cgroup/slurm: 1\n  unspecified: 1\n"),
            "{text}"
        );
        // What is decided and not yet done says so, with why its last try failed.
        cordoned.pending = serde_json::from_value(serde_json::json!([
            {"action": "cordon", "lastError": "node n1: cordon: refused\nforged", "lastTry": "2026-12-01T00:00:01Z"},
            {"action": "drain"}
        ]))
        .unwrap();
        let text = node_detail(&cordoned);
        assert!(
            text.contains("Pending:   cordon (not done yet; the try at 2026-12-01T00:00:01Z failed: node n1: cordon: refused\\nforged)\nPending:   drain (not done yet)\n"),
            "{text}"
        );
        // A node hale cannot see has no policy decided: said so, with the last
        // conclusion as the last decided, not as what holds it now.
        let mut blind = view("heartbeat_missed");
        blind.policy_held_by = vec!["heartbeat_missed".into()];
        let text = node_detail(&blind);
        assert!(
            text.contains("Policy:    on hold while heartbeat_missed: hale neither acts on nor decides for a node it cannot fully see\n"),
            "{text}"
        );
        blind.policy = serde_json::from_value(serde_json::json!(
            {"kind": "halted", "action": "cordon", "guardrail": "maxUnavailablePercent"}
        ))
        .unwrap();
        let text = node_detail(&blind);
        assert!(
            text.contains("Policy:    cordon halted by maxUnavailablePercent; on hold while heartbeat_missed: hale neither acts on nor decides for a node it cannot fully see, so this is the last decided\n"),
            "{text}"
        );
    }

    /// `hale store copy` refuses what `store.eventRetentionDays` refuses, and
    /// names a store it cannot read as it was given.
    #[test]
    fn a_store_copy_refuses_what_the_config_refuses() {
        for days in ["0", "36501"] {
            let copy = [
                "hale",
                "store",
                "copy",
                "--from",
                "sqlite:a",
                "--to",
                "sqlite:b",
                "--event-retention-days",
                days,
            ];
            assert!(Cli::try_parse_from(copy).is_err(), "{days}");
        }
        let e = open_store("bogus", ("default", 1, 90), false)
            .err()
            .expect("no store");
        assert!(e.to_string().starts_with("\"bogus\" names no store"), "{e}");
    }

    #[test]
    fn a_line_break_in_a_cell_starts_no_row() {
        let rows = vec![vec!["a".to_string(), "first\nforged   row\rx".to_string()]];
        assert_eq!(
            table(&["K", "V"], &rows),
            "K   V\na   first\\nforged   row\\rx\n"
        );
    }

    #[test]
    fn terminal_escapes_what_a_terminal_would_act_on() {
        for (text, shown) in [
            (
                "plain, with a\nline and a\ttab",
                "plain, with a\nline and a\ttab",
            ),
            ("\u{1b}[2Jcleared", "\\u{1b}[2Jcleared"),
            ("bell\u{7} and CR\r", "bell\\u{7} and CR\\u{d}"),
            ("C1 \u{9b}31m", "C1 \\u{9b}31m"),
            ("id \u{202e}evil", "id \\u{202e}evil"),
            // Spelled out, apart from the character.
            ("typed \\u{202e}", "typed \\\\u{202e}"),
            ("émoji ✓", "émoji ✓"),
        ] {
            assert_eq!(terminal(text), shown, "{text:?}");
        }
    }

    #[test]
    fn node_list_columns_and_unscored_dash() {
        let list = NodeList {
            nodes: vec![
                summary("node-02", Some(55), Health::Degraded),
                summary("node-03", None, Health::Unknown),
            ],
            next_page_token: None,
            total: None,
            unreachable: Vec::new(),
        };
        assert_eq!(
            node_table(&list),
            "ID        CLUSTER   HOSTNAME   STATUS   HEALTH     SCORE   JOBS\n\
             node-02   default   node-02    Ready    Degraded   55      0\n\
             node-03   default   node-03    Ready    Unknown    -       0\n"
        );
    }

    #[test]
    fn condition_titles() {
        assert_eq!(title("disk_degraded"), "Disk Degraded");
        assert_eq!(
            title("CalicoTooManyInterfacesEarly"),
            "CalicoTooManyInterfacesEarly"
        );
    }

    #[test]
    fn the_alerts_table_says_a_hold_and_why() {
        use chrono::TimeZone;
        let until = chrono::Utc.with_ymd_and_hms(2026, 12, 1, 12, 5, 0).unwrap();
        let mut view = AlertsView {
            source: hale::view::SourceView {
                url: "http://am:9093/".into(),
                receiver: "hale".into(),
                polling: true,
                up: true,
                stale: false,
                last_trusted: None,
                last_error: None,
                hold_until: None,
                hold_reason: None,
            },
            alerts: vec![],
        };
        assert!(!alerts_table(&view).contains("Holding"));
        view.source.hold_until = Some(until);
        view.source.hold_reason = Some("trusted input returned after a time without it".into());
        let table = alerts_table(&view);
        assert!(
            table.contains(
                "Holding:   an alert's absence ends nothing until 2026-12-01T12:05:00Z (trusted input returned after a time without it)"
            ),
            "{table}"
        );
        // Without polling, whether Alertmanager answers is not hale's to say.
        view.source.polling = false;
        view.source.up = false;
        assert!(
            alerts_table(&view).starts_with(
                "Source:    http://am:9093/ (receiver hale) webhook only, no trusted delivery yet\n"
            ),
            "{}",
            alerts_table(&view)
        );
        view.source.last_trusted = Some(until);
        assert!(
            alerts_table(&view)
                .contains("webhook only, last trusted delivery 2026-12-01T12:05:00Z\n"),
            "{}",
            alerts_table(&view)
        );
    }
}
