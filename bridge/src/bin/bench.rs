//! `bench`: how fast and how lean hale is, as ratios against baselines measured in
//! the same run, on the hard cases. Build with `cargo build --release --bins`, run
//! `target/release/bench [NODES]` (10,000 by default; 5 alerts per node), or
//! `target/release/bench stores [NODES]` for the event stores and restarts alone,
//! `target/release/bench live [NODES]` for the real Alertmanager and `hale serve`
//! alone.
//!
//! 1. A realistic Alertmanager v2 answer, in Alertmanager's order (by fingerprint, so
//!    a node's alerts lie scattered over it), and the same fleet's answers as they move:
//!    each later round changes a tenth of the alerts (their summaries count up, their
//!    timestamps move) and moves a critical alert from 0.5 % of the nodes to another
//!    0.5 % (1 % of the nodes change score; new and resolved alerts); then the same
//!    with every alert re-sent (every expiry moved), as Prometheus does each minute.
//! 2. Baseline: hale's own parse of those bytes — the floor of any cycle.
//! 3. hale's cycle (parse → map → diff → score → decide → persist) on the first
//!    (cold) answer, the same answer again (steady) and the moving ones (churn). The
//!    cold cycle is the median of three first polls, each in a process of its own
//!    (`bench first NODES` runs one), as only a new hale makes one.
//! 4. Where `prometheus-alertmanager` is installed: the real Alertmanager's time to
//!    serve the same alerts, then a real `hale serve` polling it every 5 s on its
//!    defaults — refused loudly unless it holds the whole fleet — its RSS, webhook →
//!    API-visible latency while it polls and `/metrics` is scraped every second,
//!    each scrape's time, the node listing's hard cases (UI and API pages sorted,
//!    filtered, searched and counted over the whole fleet) against the in-process
//!    floor of a page that looks at every node, and a restart back to serving its
//!    state.
//! 5. (Run between 3 and 4.) The event stores side by side: appends, pages of a
//!    long history and a restart on SQLite (the baseline; in process, and a real
//!    `hale serve` started on the same store), then on NATS JetStream
//!    where `nats-server` is found, each NATS figure beside bare JetStream's doing
//!    the same work on the same servers (its floor).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{TimeDelta, Utc};
use hale::config::Config;
use hale::core::{Fleet, NodeGroups, Outcome, PollAnswer};
use hale::service::POLL_SLICE;
use hale::store::{Batch, Opened, Sqlite, Store};
use serde_json::{Value, json};

const NODES: usize = 10_000;
const PER_NODE: usize = 5;
/// How often the live hale polls, and how often `/metrics` is scraped meanwhile.
const POLL_EVERY: Duration = Duration::from_secs(5);
const SCRAPE_EVERY: Duration = Duration::from_secs(1);

fn main() -> anyhow::Result<()> {
    hale::init_tls();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    const USAGE: &str = "usage: bench [ingest|stores|live|first] [NODES]";
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return Ok(());
    }
    let section = args
        .first()
        .filter(|a| matches!(a.as_str(), "ingest" | "stores" | "live" | "first"))
        .cloned();
    if section.is_some() {
        args.remove(0);
    }
    let nodes = match args.as_slice() {
        [] => NODES,
        [n] => n.parse().context(USAGE)?,
        _ => bail!(USAGE),
    };
    let work = std::env::temp_dir().join(format!("hale-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let mut report = Report::default();
    let result = match section.as_deref() {
        Some("ingest") => ingest(nodes, &work, &mut report, Polls::All).map(drop),
        Some("first") => ingest(nodes, &work, &mut report, Polls::First).map(drop),
        Some("stores") => stores_alone(nodes, &work, &mut report),
        Some("live") => live_alone(nodes, &work, &mut report),
        _ => run(nodes, &work, &mut report),
    };
    let _ = std::fs::remove_dir_all(&work);
    result?;
    report.finish()
}

/// Targets met and missed, said once more at the end.
#[derive(Default)]
struct Report {
    missed: Vec<String>,
}

impl Report {
    /// `ok` or `MISSED` after a figure with a target.
    fn target(&mut self, what: &str, met: bool) -> &'static str {
        if met {
            "ok"
        } else {
            self.missed.push(what.to_string());
            "MISSED"
        }
    }

    fn finish(self) -> anyhow::Result<()> {
        if self.missed.is_empty() {
            println!("every target met");
        } else {
            println!("targets missed: {}", self.missed.join("; "));
        }
        Ok(())
    }
}

/// One in-process cycle's time, phase by phase.
#[derive(Clone, Copy, Default)]
struct Cycle {
    parse: Duration,
    apply: Duration,
    persist: Duration,
    /// The poll's holds of the fleet lock, as `hale serve` takes them: the answer
    /// judged, the longest slice of nodes, the last step. A delivery can wait for
    /// the longest.
    holds: [Duration; 3],
    nodes_written: usize,
    events: usize,
}

impl Cycle {
    fn total(&self) -> Duration {
        self.parse + self.apply + self.persist
    }
}

/// The median cycle of `cycles` by total time (`cycles` left sorted).
fn median_cycle(cycles: &mut [Cycle]) -> Cycle {
    cycles.sort_by_key(Cycle::total);
    cycles[cycles.len() / 2]
}

fn run(nodes: usize, work: &Path, report: &mut Report) -> anyhow::Result<()> {
    let Ingested {
        fleet,
        alerts,
        cold,
        churn,
    } = ingest(nodes, work, report, Polls::All)?.context("every poll was measured")?;
    stores(work, &fleet, report)?;
    drop(fleet);

    let Some(am_bin) = which("prometheus-alertmanager") else {
        println!("prometheus-alertmanager is not installed: skipping the live measures");
        return Ok(());
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(live(
        &am_bin,
        work,
        nodes,
        alerts,
        Some([cold, churn]),
        report,
    ))
}

/// `bench live`: the real Alertmanager and `hale serve` alone, without the cycles
/// in process to compare Alertmanager's time with.
fn live_alone(nodes: usize, work: &Path, report: &mut Report) -> anyhow::Result<()> {
    let am_bin = which("prometheus-alertmanager")
        .context("bench live needs prometheus-alertmanager installed")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(live(&am_bin, work, nodes, nodes * PER_NODE, None, report))
}

/// A poll applied as `hale serve` applies it: its alerts grouped by node, then
/// under the fleet lock the answer judged, [`POLL_SLICE`] nodes at a time, and
/// the last step; with how long each held the lock (the longest slice's).
fn sliced_poll(
    fleet: &mut Fleet,
    cfg: &hale::core::settings::CoreSettings,
    now: chrono::DateTime<Utc>,
    alerts: &[hale::core::labels::Alert<'_>],
) -> (Outcome, [Duration; 3]) {
    let none = std::collections::BTreeSet::new();
    let groups = NodeGroups::of(alerts, &cfg.identity);
    let t = Instant::now();
    let (mut slices, mut out) = fleet.poll_begin(cfg, now, &PollAnswer::of(alerts, now), groups);
    let judged = t.elapsed();
    let mut slice = Duration::ZERO;
    while !slices.done() {
        let t = Instant::now();
        out.absorb(fleet.poll_slice(cfg, now, &mut slices, alerts, &none, POLL_SLICE));
        slice = slice.max(t.elapsed());
    }
    let t = Instant::now();
    out.absorb(fleet.poll_end(cfg, now, &slices));
    (out, [judged, slice, t.elapsed()])
}

/// The tick `hale serve` runs every second under the fleet lock, its two parts
/// timed apart, the clock a second on each time: the time-driven rules
/// (heartbeats, the sweep, decay, the policy; the median and the slowest of eleven,
/// the slowest passing the policy over every node as one tick in ten does) and
/// remediation (the median of seven).
fn tick_holds(
    fleet: &mut Fleet,
    cfg: &hale::core::settings::CoreSettings,
    from: chrono::DateTime<Utc>,
) -> [Duration; 3] {
    let facts = hale::core::policy::Facts::default();
    let mut second = 0;
    let mut next = || {
        second += 1;
        from + TimeDelta::seconds(second)
    };
    let mut ticks: Vec<Duration> = (0..11)
        .map(|_| {
            let now = next();
            let t = Instant::now();
            std::hint::black_box(fleet.tick(cfg, now));
            t.elapsed()
        })
        .collect();
    ticks.sort();
    let (tick, whole) = (ticks[5], ticks[10]);
    let remediate = median(7, || {
        let now = next();
        let t = Instant::now();
        std::hint::black_box(fleet.remediate(cfg, now, &facts));
        t.elapsed()
    });
    [tick, whole, remediate]
}

/// What the in-process cycles leave for the rest of the run.
struct Ingested {
    fleet: Fleet,
    alerts: usize,
    cold: Cycle,
    churn: Cycle,
}

/// Which of the in-process cycles to measure.
#[derive(Clone, Copy, PartialEq)]
enum Polls {
    All,
    /// The first poll alone, printed as [`Cycle::line`] for the process that asked.
    First,
}

impl Cycle {
    /// The cycle on one line, as `bench first` prints it.
    fn line(&self) -> String {
        let [judged, slice, end] = self.holds;
        let ns = |d: Duration| d.as_nanos().to_string();
        let times = [self.parse, self.apply, self.persist, judged, slice, end].map(ns);
        format!(
            "first-poll {} {} {}",
            times.join(" "),
            self.nodes_written,
            self.events
        )
    }

    /// A cycle from the last line `bench first` printed.
    fn parse_line(out: &str) -> anyhow::Result<Cycle> {
        let line = out
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("first-poll "))
            .context("`bench first` printed no cycle")?;
        let n: Vec<u64> = line
            .split(' ')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .context("`bench first` printed a cycle unread")?;
        let [parse, apply, persist, judged, slice, end, nodes, events] = n[..] else {
            bail!("`bench first` printed {} numbers, not 8", n.len());
        };
        Ok(Cycle {
            parse: Duration::from_nanos(parse),
            apply: Duration::from_nanos(apply),
            persist: Duration::from_nanos(persist),
            holds: [judged, slice, end].map(Duration::from_nanos),
            nodes_written: nodes as usize,
            events: events as usize,
        })
    }
}

/// A first poll of `nodes` in a new process (`bench first`).
fn first_poll_apart(nodes: usize) -> anyhow::Result<Cycle> {
    let out = Command::new(std::env::current_exe()?)
        .args(["first", &nodes.to_string()])
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("`bench first {nodes}` failed: {}", out.status);
    }
    Cycle::parse_line(&String::from_utf8_lossy(&out.stdout))
}

/// hale's cycle in process against its own parse: cold, steady, churn. With
/// [`Polls::First`], the first poll alone, printed and nothing returned.
fn ingest(
    nodes: usize,
    work: &Path,
    report: &mut Report,
    polls: Polls,
) -> anyhow::Result<Option<Ingested>> {
    // The other two first polls before this process builds its own fleet: a
    // failing one fails the run at once, and they do not share the machine's
    // memory with this one's fleet.
    let apart = match polls {
        Polls::All => [first_poll_apart(nodes)?, first_poll_apart(nodes)?],
        Polls::First => [Cycle::default(); 2],
    };
    let rss_start = rss_kib(std::process::id()).unwrap_or(0);
    let synthesized = Instant::now();
    let base = answer(nodes, 0, false);
    let alerts = hale::alertmanager::parse_v2(&base)?.len();
    println!(
        "input: {alerts} alerts over {nodes} nodes, {:.1} MiB of v2 JSON (built in {:.1} s)\n",
        base.len() as f64 / (1 << 20) as f64,
        synthesized.elapsed().as_secs_f64()
    );

    // Warmed up, the median of seven; measured again after the cycles, and the
    // faster of the two taken: the floor is the fastest parse.
    let parse_time = |body: &[u8]| {
        let parse_once = || {
            let t = Instant::now();
            let parsed = hale::alertmanager::parse_v2(body).expect("parses");
            std::hint::black_box(parsed);
            t.elapsed()
        };
        parse_once();
        parse_once();
        median(7, parse_once)
    };
    let parse_before = parse_time(&base);

    let cfg = Config::default().resolve("<bench>", "")?.core;
    // As `hale serve` keeps it: checkpoints off the write path, run between cycles.
    let Opened {
        writer: mut store,
        upkeep,
        ..
    } = Sqlite::open_pair(&work.join("cycle"))?;
    let mut checkpoints = Duration::ZERO;
    let start = Utc::now();
    let mut fleet = Fleet::new(start);
    let mut round = 0i64;
    let mut cycle = |body: &[u8], fleet: &mut Fleet| {
        let t = Instant::now();
        let parsed = hale::alertmanager::parse_v2(body).expect("parses");
        let parsed_at = t.elapsed();
        let now = start + TimeDelta::seconds(30 * round);
        round += 1;
        let (out, holds) = sliced_poll(fleet, &cfg, now, &parsed);
        let applied_at = t.elapsed();
        let batch = Batch::of(fleet, &out);
        store.write(&batch).expect("store writes");
        let c = Cycle {
            parse: parsed_at,
            apply: applied_at - parsed_at,
            persist: t.elapsed() - applied_at,
            holds,
            nodes_written: batch.nodes.len(),
            events: batch.events.len(),
        };
        drop(parsed);
        let t = Instant::now();
        upkeep.upkeep().expect("checkpoints");
        checkpoints = checkpoints.max(t.elapsed());
        c
    };
    let cold = cycle(&base, &mut fleet);
    if fleet.nodes.len() != nodes {
        bail!(
            "the first cycle holds {} nodes, not the {nodes} the answer names",
            fleet.nodes.len()
        );
    }
    if polls == Polls::First {
        println!("{}", cold.line());
        return Ok(None);
    }
    let steady = median_cycle(&mut (0..5).map(|_| cycle(&base, &mut fleet)).collect::<Vec<_>>());
    let mut churns = Vec::new();
    for r in 1..=7 {
        let body = answer(nodes, r, false);
        churns.push(cycle(&body, &mut fleet));
    }
    let churn = median_cycle(&mut churns);
    let mut resends = Vec::new();
    for r in 8..=12 {
        let body = answer(nodes, r, true);
        resends.push(cycle(&body, &mut fleet));
    }
    let resent = median_cycle(&mut resends);
    let parse = parse_before.min(parse_time(&base));
    drop(base);
    let ticked = tick_holds(&mut fleet, &cfg, start + TimeDelta::seconds(30 * round));
    let rss_fleet = rss_kib(std::process::id()).unwrap_or(0);
    let mut colds = [cold, apart[0], apart[1]];
    let cold = median_cycle(&mut colds);

    println!("ingest (in process); baseline: hale's own parse of the answer");
    println!("  parse (sonic-rs, borrowed)  {:>9.1} ms", ms(parse));
    let row = |name: &str, c: &Cycle, target: &str| {
        println!(
            "  {name:<27} {:>9.1} ms = {:>5.2}x parse {target}",
            ms(c.total()),
            ratio(c.total(), parse)
        );
        println!(
            "    parse+map {:.1} ms, diff+score+decide {:.1} ms, persist {:.1} ms ({} node records, {} events)",
            ms(c.parse),
            ms(c.apply),
            ms(c.persist),
            c.nodes_written,
            c.events
        );
        let [judged, slice, end] = c.holds;
        println!(
            "    holds of the fleet lock: the answer judged {:.1} ms, the longest slice of {POLL_SLICE} nodes {:.1} ms, the last step {:.1} ms",
            ms(judged),
            ms(slice),
            ms(end)
        );
    };
    row("cycle, cold (median of 3)", &cold, "");
    println!(
        "    the three first polls, each in a new process: {}",
        colds
            .iter()
            .map(|c| format!("{:.1} ms", ms(c.total())))
            .collect::<Vec<_>>()
            .join(", ")
    );
    row("cycle, steady", &steady, "");
    let churn_ok = report.target(
        "churn cycle <= 2x parse",
        churn.total() <= parse.mul_f64(2.0),
    );
    row(
        "cycle, churn",
        &churn,
        &format!("(target <= 2x: {churn_ok})"),
    );
    row("cycle, churn, all re-sent", &resent, "");
    let [tick, whole, remediate] = ticked;
    println!(
        "  the 1-second tick's hold of the fleet lock: the time-driven rules {:.1} ms ({:.1} ms with the policy over every node, one tick in ten), remediation {:.1} ms",
        ms(tick),
        ms(whole),
        ms(remediate)
    );
    println!(
        "  the longest checkpoint (after the first poll; off the ingest path, as in hale serve): {:.1} ms",
        ms(checkpoints)
    );
    println!(
        "  bench process RSS: {:.1} MiB at start, {:.1} MiB holding the fleet\n",
        rss_start as f64 / 1024.0,
        rss_fleet as f64 / 1024.0
    );
    Ok(Some(Ingested {
        fleet,
        alerts,
        cold,
        churn,
    }))
}

/// The live measures, on real processes.
async fn live(
    am_bin: &Path,
    work: &Path,
    nodes: usize,
    alerts: usize,
    cycles: Option<[Cycle; 2]>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let am_port = free_port();
    let am_url = format!("http://127.0.0.1:{am_port}");
    std::fs::write(
        work.join("am.yml"),
        "route:\n  receiver: hale\n  group_by: [node]\nreceivers:\n  - name: hale\n",
    )?;
    let _am = Proc(
        Command::new(am_bin)
            .arg(format!("--config.file={}", work.join("am.yml").display()))
            .arg(format!("--storage.path={}", work.join("am").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{am_port}"))
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    wait_ok(&http, &format!("{am_url}/-/ready")).await?;

    let loading = Instant::now();
    let ends = (Utc::now() + TimeDelta::hours(4)).to_rfc3339();
    for first in (0..nodes).step_by(400) {
        let mut postable = Vec::new();
        synthesize(first..(first + 400).min(nodes), nodes, 0, |a| {
            postable.push(json!({
                "labels": a.labels(), "annotations": a.annotations(),
                "startsAt": a.starts_at, "endsAt": ends,
            }));
        });
        let r = http
            .post(format!("{am_url}/api/v2/alerts"))
            .json(&postable)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("Alertmanager refused alerts: {}", r.text().await?);
        }
    }
    let loaded_in = loading.elapsed();
    let alerts_url = format!("{am_url}/api/v2/alerts?receiver=hale");
    let mut serve = Vec::new();
    let mut served = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let bytes = http.get(&alerts_url).send().await?.bytes().await?;
        serve.push(t.elapsed());
        served = hale::alertmanager::parse_v2(&bytes)?.len();
    }
    serve.sort();
    let serve = serve[1];
    if served != alerts {
        bail!("Alertmanager serves {served} alerts, not the {alerts} loaded into it");
    }
    println!(
        "Alertmanager (real, {}), loaded in {:.1} s",
        am_version(am_bin),
        loaded_in.as_secs_f64()
    );
    println!(
        "  GET /api/v2/alerts, {served} alerts {:>9.1} ms",
        ms(serve)
    );
    if let Some([cold, churn]) = cycles {
        let churn_share = ratio(churn.total(), serve);
        let cold_share = ratio(cold.total(), serve);
        let churn_ok = report.target("churn cycle <= 10% of Alertmanager", churn_share <= 0.10);
        let cold_ok = report.target("cold cycle <= 25% of Alertmanager", cold_share <= 0.25);
        println!(
            "  hale churn cycle / serving    {:>8.1} %   (target <= 10%: {churn_ok})",
            100.0 * churn_share
        );
        println!(
            "  hale cold cycle / serving     {:>8.1} %   (target <= 25%: {cold_ok})",
            100.0 * cold_share
        );
    }
    println!();

    // A real hale polling that Alertmanager on its defaults, beside an idle one.
    let hale_bin = hale_bin().context(
        "the hale binary is not next to bench: build with `cargo build --release --bins`",
    )?;
    let idle_rss = {
        let idle = start_hale(&hale_bin, &work.join("idle"), "http://127.0.0.1:9")?;
        wait_ok(&http, &format!("{}/healthz", idle.url)).await?;
        rss_kib(idle.proc.0.id()).unwrap_or(0)
    };
    let mut hale = start_hale(&hale_bin, &work.join("hale"), &am_url)?;
    let hale_url = hale.url.clone();
    let took = Instant::now();
    wait_ok(&http, &format!("{hale_url}/healthz")).await?;
    let held = holds(&http, &hale_url, nodes, Duration::from_secs(600)).await?;
    println!(
        "hale serve (pollInterval {}s, every other setting its default) held {held} nodes {:.1} s after it started",
        POLL_EVERY.as_secs(),
        took.elapsed().as_secs_f64()
    );
    let pids = (hale.proc.0.id(), _am.0.id());
    let rss = latency(&http, &hale_url, nodes, pids, report).await?;
    let budget_kib = 2 * nodes + served;
    let mib = |kib: usize| kib as f64 / 1024.0;
    let above = rss.settled.saturating_sub(idle_rss) as f64 / budget_kib as f64;
    let rss_ok = report.target("RSS within 2 KiB/node + 1 KiB/alert", above <= 1.0);
    println!(
        "RSS of that hale, sampled every 100 ms meanwhile: {:.1} MiB between polls, {:.1} MiB at most (while a poll's answer and its parse are held); an idle hale {:.1} MiB",
        mib(rss.settled),
        mib(rss.peak),
        mib(idle_rss)
    );
    println!(
        "  between polls, {above:.2}x the budget of 2 KiB/node + 1 KiB/alert ({:.1} MiB) above an idle hale: {rss_ok}; at most {:.2}x\n",
        mib(budget_kib),
        rss.peak.saturating_sub(idle_rss) as f64 / budget_kib as f64
    );

    listings(&http, &hale_url, nodes, report).await?;

    // Restart: stopped as an operator stops it, started again on its store. First at
    // once, while Alertmanager may still be building the answer to the poll the old
    // hale had in flight (on this machine they share the cores; a site runs them
    // apart), then again once Alertmanager is idle: hale's own cost.
    let am_pid = _am.0.id();
    let busy = restart_timed(&http, &mut hale, &hale_bin, work, nodes, am_pid).await?;
    wait_idle(am_pid, Duration::from_secs(120)).await;
    let quiet = restart_timed(&http, &mut hale, &hale_bin, work, nodes, am_pid).await?;
    wait_ok(&http, &format!("{hale_url}/readyz")).await?;
    let ready = quiet.started.elapsed();
    let restart_ok = report.target(
        "restart to serving <= 2 s",
        busy.serving.max(quiet.serving) <= Duration::from_secs(2),
    );
    println!(
        "restart with {nodes} nodes of state: serving them {:.2} s after start, Alertmanager idle; /readyz (after its first poll) {:.1} s",
        quiet.serving.as_secs_f64(),
        ready.as_secs_f64()
    );
    println!(
        "  restarted at once, Alertmanager perhaps still serving the stopped hale's poll: serving them {:.2} s after start (target, both <= 2 s: {restart_ok}; Alertmanager used {:.2} of a core meanwhile, {:.2} in the idle restart)",
        busy.serving.as_secs_f64(),
        busy.am_share,
        quiet.am_share
    );
    Ok(())
}

/// Wait until the hale at `url` holds `nodes` nodes; say loudly why when it does not.
async fn holds(
    http: &reqwest::Client,
    url: &str,
    nodes: usize,
    within: Duration,
) -> anyhow::Result<usize> {
    let deadline = Instant::now() + within;
    loop {
        let counted = count_nodes(http, url).await?;
        if counted == nodes {
            return Ok(counted);
        }
        if Instant::now() > deadline {
            let said: Vec<String> = metric(http, url, "hale_alertmanager_polls_total")
                .await?
                .iter()
                .filter(|(_, v)| *v > 0.0)
                .map(|(l, v)| format!("{l}: {v}"))
                .collect();
            bail!(
                "hale serve holds {counted} of the {nodes} nodes it was given after {} s — \
                 nothing measured on it would mean anything (its polls so far: {})",
                within.as_secs(),
                if said.is_empty() {
                    "none".into()
                } else {
                    said.join(", ")
                }
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Every node hale serves, counted through the paged list.
async fn count_nodes(http: &reqwest::Client, url: &str) -> anyhow::Result<usize> {
    let mut count = 0;
    let mut token: Option<String> = None;
    loop {
        let mut page_url = format!("{url}/api/v1/nodes?pageSize=1000");
        if let Some(t) = &token {
            page_url.push_str(&format!("&pageToken={t}"));
        }
        let page: Value = http.get(page_url).send().await?.json().await?;
        count += page["nodes"].as_array().map_or(0, Vec::len);
        match page["nextPageToken"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => return Ok(count),
        }
    }
}

/// (result label, value) of every series of a counter family labelled by `result`.
async fn metric(
    http: &reqwest::Client,
    url: &str,
    name: &str,
) -> anyhow::Result<Vec<(String, f64)>> {
    let text = http
        .get(format!("{url}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix("{result=\"")?;
            let (result, value) = rest.split_once("\"} ")?;
            Some((result.to_string(), value.trim().parse().ok()?))
        })
        .collect())
}

/// The polls of `result` a `/metrics` text counts, found without reading its
/// every line: at 100,000 nodes the text is over 100 MiB.
fn polls_in(text: &str, result: &str) -> Option<f64> {
    let series = format!("\nhale_alertmanager_polls_total{{result=\"{result}\"}} ");
    let at = text.find(&series)? + series.len();
    let value = text[at..].split('\n').next()?;
    value.trim().parse().ok()
}

/// The RSS of a process over a while, in KiB.
struct Rss {
    /// The least sampled: what it holds between polls.
    settled: usize,
    peak: usize,
}

/// Webhook → visible in `GET /api/v1/nodes/{id}`, while hale polls every 5 s and
/// `/metrics` is scraped every second; each scrape's time; hale's RSS meanwhile.
async fn latency(
    http: &reqwest::Client,
    url: &str,
    nodes: usize,
    (pid, am_pid): (u32, u32),
    report: &mut Report,
) -> anyhow::Result<Rss> {
    let polls_before = trusted_polls(http, url).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Some(rss) = rss_kib(pid) {
                    samples.push(Sample {
                        at: Instant::now(),
                        rss,
                        hale_cpu: cpu_ticks(pid).unwrap_or(0),
                        am_cpu: cpu_ticks(am_pid).unwrap_or(0),
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            samples
        })
    };
    // The trusted polls each scrape counted: the deliveries go on until two landed.
    let polls_seen = Arc::new(AtomicU64::new(polls_before as u64));
    // A scraper of its own, as Prometheus is: its thread, runtime and connections,
    // so reading a 124 MiB text delays none of the deliveries' requests.
    let scraper = {
        let (url, stop) = (url.to_string(), stop.clone());
        let polls_seen = polls_seen.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::spawn(move || {
            rt.block_on(async move {
                let http = reqwest::Client::new();
                let mut scrapes = Vec::new();
                let mut landed = Vec::new();
                let mut bytes = 0;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    if let Ok(r) = http.get(format!("{url}/metrics")).send().await
                        && let Ok(body) = r.text().await
                    {
                        bytes = body.len();
                        scrapes.push((t, t.elapsed()));
                        if let Some(polls) = polls_in(&body, "trusted")
                            && polls_seen.swap(polls as u64, Ordering::Relaxed) != polls as u64
                        {
                            landed.push(t);
                        }
                    }
                    tokio::time::sleep(SCRAPE_EVERY.saturating_sub(t.elapsed())).await;
                }
                (scrapes, bytes, landed)
            })
        })
    };
    // At least this long, and on until two polls landed among the deliveries (a
    // poll of 100,000 nodes can take Alertmanager a minute to serve beside them),
    // but no longer than `most`.
    let (window, most) = if nodes <= 20_000 {
        (Duration::from_secs(40), Duration::from_secs(240))
    } else {
        (Duration::from_secs(90), Duration::from_secs(480))
    };
    let polled = || polls_seen.load(Ordering::Relaxed) as f64 - polls_before >= 2.0;
    let began = Instant::now();
    let mut samples = Vec::new();
    let mut posts = Vec::new();
    let mut i = 0usize;
    while began.elapsed() < window || (!polled() && began.elapsed() < most) {
        let node = format!("node-{:06}", (i * 7919) % nodes);
        let want = format!("BenchProbe{i}");
        let body = json!({
            "version": "4", "status": "firing", "receiver": "hale", "groupKey": "{}:{node=\"x\"}",
            "truncatedAlerts": 0, "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://alertmanager.example",
            "alerts": [{
                "status": "firing", "fingerprint": format!("bench{i:011x}"),
                "labels": {"alertname": want, "node": node, "severity": "warning"},
                "annotations": {"summary": "latency probe"},
                "startsAt": Utc::now().to_rfc3339(), "endsAt": "0001-01-01T00:00:00Z",
            }]
        });
        let t = Instant::now();
        let r = http
            .post(format!("{url}/api/v1/alertmanager"))
            .json(&body)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("webhook refused: {}", r.text().await?);
        }
        let posted = t.elapsed();
        loop {
            let n: Value = http
                .get(format!("{url}/api/v1/nodes/{node}"))
                .send()
                .await?
                .json()
                .await?;
            let seen = n["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == want.as_str()));
            if seen {
                break;
            }
        }
        samples.push((t, t.elapsed()));
        posts.push(posted);
        i += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = began.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (scrapes, scrape_bytes, landed) = scraper.join().expect("the scraper does not panic");
    let sampled = sampler.join().expect("the sampler does not panic");
    let polls = trusted_polls(http, url).await? - polls_before;
    if polls < 2.0 {
        bail!(
            "only {polls} trusted polls landed in the {} s of deliveries: the latency was not measured under polling",
            took.as_secs()
        );
    }
    if scrapes.is_empty() {
        bail!("no /metrics scrape completed while the deliveries were measured");
    }
    // What the processes did while the slowest waited: busy (a core or two) or
    // blocked (next to none).
    let slowest = |v: &[(Instant, Duration)]| v.iter().max_by_key(|(_, d)| *d).copied();
    let (slow_delivery, slow_scrape) = (slowest(&samples), slowest(&scrapes));
    let say_slowest = |slow: Option<(Instant, Duration)>, what: &str| {
        if let Some((at, took)) = slow {
            let (hale, am) = cpu_share(&sampled, at, at + took);
            println!(
                "  the slowest {what}: {:.0} ms, {:.1} s into the window; meanwhile hale used {:.0} % of a core, Alertmanager {:.0} %",
                ms(took),
                at.duration_since(began).as_secs_f64(),
                100.0 * hale,
                100.0 * am
            );
        }
    };
    slow_timeline(&samples, &posts, &landed, began, target_ms(nodes));
    let mut samples: Vec<Duration> = samples.into_iter().map(|(_, d)| d).collect();
    let mut scrapes: Vec<Duration> = scrapes.into_iter().map(|(_, d)| d).collect();
    samples.sort();
    scrapes.sort();
    let p = |v: &[Duration], q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    let target = target_ms(nodes);
    let ok = report.target(
        &format!("webhook p99 <= {target} ms"),
        ms(p(&samples, 0.99)) <= target,
    );
    println!(
        "webhook -> visible in GET /api/v1/nodes/{{id}}: {} deliveries over {} s, {polls} polls and {} scrapes among them",
        samples.len(),
        took.as_secs(),
        scrapes.len()
    );
    println!(
        "  p50 {:>7.1} ms   p99 {:>7.1} ms   max {:>7.1} ms   (target p99 <= {target} ms: {ok})",
        ms(p(&samples, 0.5)),
        ms(p(&samples, 0.99)),
        ms(p(&samples, 1.0))
    );
    say_slowest(slow_delivery, "delivery");
    println!(
        "GET /metrics ({:.1} MiB): p50 {:.1} ms, max {:.1} ms",
        scrape_bytes as f64 / (1 << 20) as f64,
        ms(p(&scrapes, 0.5)),
        ms(p(&scrapes, 1.0))
    );
    say_slowest(slow_scrape, "scrape");
    println!();
    Ok(Rss {
        settled: sampled.iter().map(|s| s.rss).min().unwrap_or(0),
        peak: sampled.iter().map(|s| s.rss).max().unwrap_or(0),
    })
}

/// The webhook p99's target at this size, in ms.
fn target_ms(nodes: usize) -> f64 {
    if nodes <= 20_000 { 50.0 } else { 100.0 }
}

/// Where the deliveries slower than `target` ms fell: each second of the window
/// holding one, its count, the slowest and how much of that was the POST (the rest
/// is the reads until the change showed), beside the polls landed (as the scrapes
/// saw them).
fn slow_timeline(
    samples: &[(Instant, Duration)],
    posts: &[Duration],
    landed: &[Instant],
    began: Instant,
    target: f64,
) {
    let at = |t: Instant| t.duration_since(began).as_secs();
    let mut seconds: std::collections::BTreeMap<u64, (usize, Duration, Duration)> =
        Default::default();
    for ((t, took), post) in samples.iter().zip(posts) {
        if ms(*took) > target {
            let s = seconds.entry(at(*t)).or_default();
            s.0 += 1;
            if *took > s.1 {
                (s.1, s.2) = (*took, *post);
            }
        }
    }
    let polls: Vec<String> = landed.iter().map(|t| format!("{} s", at(*t))).collect();
    println!(
        "  deliveries over {target} ms by second of the window (polls seen landed at {}):",
        polls.join(", ")
    );
    let line: Vec<String> = seconds
        .iter()
        .map(|(s, (n, worst, post))| {
            format!("{s} s: {n} (max {:.0}, POST {:.0})", ms(*worst), ms(*post))
        })
        .collect();
    for chunk in line.chunks(6) {
        println!("    {}", chunk.join("; "));
    }
}

/// One look at the live hale: its RSS (KiB), and the CPU time (clock ticks) it and
/// Alertmanager had used by then.
struct Sample {
    at: Instant,
    rss: usize,
    hale_cpu: u64,
    am_cpu: u64,
}

/// The share of a core hale and Alertmanager each used from `from` to `to`, by the
/// samples around that span.
fn cpu_share(samples: &[Sample], from: Instant, to: Instant) -> (f64, f64) {
    let first = samples
        .iter()
        .rev()
        .find(|s| s.at <= from)
        .or(samples.first());
    let last = samples.iter().find(|s| s.at >= to).or(samples.last());
    let (Some(a), Some(b)) = (first, last) else {
        return (0.0, 0.0);
    };
    let span = b.at.duration_since(a.at);
    if span.is_zero() {
        return (0.0, 0.0);
    }
    let share = |x: u64, y: u64| ticks_per_sec(y.saturating_sub(x), span);
    (share(a.hale_cpu, b.hale_cpu), share(a.am_cpu, b.am_cpu))
}

/// User and system CPU time a process has used, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis: utime and stime are the 12th
    // and 13th of them.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

async fn trusted_polls(http: &reqwest::Client, url: &str) -> anyhow::Result<f64> {
    let text = http
        .get(format!("{url}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(polls_in(&text, "trusted").unwrap_or(0.0))
}

/// Requests of each listing timed, after one to warm.
const LISTING_RUNS: usize = 7;
/// The UI's page of nodes, and the API page asked for beside it.
const PAGE: usize = 50;
/// The `pageSize` of the walk to a token deep in the fleet.
const WALK: usize = 1000;

/// The node listing's hard cases on the live hale, each request timed whole (sent
/// to body read): the UI's first page (which always counts every match), a UI page
/// sorted by score and filtered by health, the API in score order with a count —
/// its first page, the next one by that page's token, and one from the middle of
/// the fleet — and a search with a count. Each must look at every node, so the
/// baseline is that floor in this process ([`page_floor`]); `GET /healthz` says
/// what a request costs by itself. The target: the UI's first page within 1 s.
async fn listings(
    http: &reqwest::Client,
    url: &str,
    nodes: usize,
    report: &mut Report,
) -> anyhow::Result<()> {
    let floor = page_floor(nodes);
    let request = timed(http, &format!("{url}/healthz")).await?;
    let api = |query: &str| format!("{url}/api/v1/nodes?{query}");
    let search = "E-0042";
    let degraded = total(http, &api("health=Degraded&total=true&pageSize=1")).await?;
    let found = total(http, &api(&format!("q={search}&total=true&pageSize=1"))).await?;

    let ui_first = timed(http, &format!("{url}/ui/nodes")).await?;
    rows(&ui_first, PAGE.min(nodes))?;
    let ui_sorted = timed(http, &format!("{url}/ui/nodes?sort=-score&health=Degraded")).await?;
    rows(&ui_sorted, PAGE.min(degraded))?;
    let by_score = format!("sort=score&total=true&pageSize={PAGE}");
    let first = timed(http, &api(&by_score)).await?;
    let token = counted_page(&first, nodes, PAGE)?.context("one page holds the whole fleet")?;
    let next = timed(http, &api(&format!("{by_score}&pageToken={token}"))).await?;
    counted_page(&next, nodes, PAGE.min(nodes - PAGE))?;
    let middle = token_at(http, url, "score", nodes / 2).await?;
    let deep = timed(http, &api(&format!("{by_score}&pageToken={middle}"))).await?;
    counted_page(&deep, nodes, PAGE.min(nodes - nodes / 2))?;
    let searched = timed(
        http,
        &api(&format!("q={search}&total=true&pageSize={PAGE}")),
    )
    .await?;
    counted_page(&searched, found, PAGE.min(found))?;

    println!(
        "node listing on that hale, {nodes} nodes ({degraded} Degraded), each the median of {LISTING_RUNS} requests (slowest after it)"
    );
    println!(
        "  baseline: the {} smallest of {nodes} (score, id) pairs, all counted, in process {:>8.2} ms",
        PAGE + 1,
        ms(floor)
    );
    println!(
        "  GET /healthz (a request by itself)                               {:>8.2} ms",
        ms(request.median)
    );
    let row = |name: &str, t: &Timed| {
        println!(
            "  {name:<64} {:>8.2} ms = {:>6.1}x the floor; slowest {:.2} ms",
            ms(t.median),
            ratio(t.median, floor),
            ms(t.slowest)
        )
    };
    row("GET /ui/nodes (first page, every match counted)", &ui_first);
    row("GET /ui/nodes?sort=-score&health=Degraded", &ui_sorted);
    row(&format!("GET /api/v1/nodes?{by_score}"), &first);
    row("  its next page (pageToken from the first)", &next);
    row(
        &format!(
            "  the page after node {} of {nodes} in that order",
            nodes / 2
        ),
        &deep,
    );
    row(
        &format!("GET /api/v1/nodes?q={search}&total=true&pageSize={PAGE} ({found} found)"),
        &searched,
    );
    let slowest = ui_first.slowest.max(ui_sorted.slowest);
    let ok = report.target(
        &format!("nodes page first page < 1 s at {nodes} nodes"),
        slowest < Duration::from_secs(1),
    );
    println!(
        "  the slowest UI page: {:.1} ms (target first page < 1 s: {ok})\n",
        ms(slowest)
    );
    Ok(())
}

/// The floor of a listing page that must look at every node: `nodes` (score, id)
/// pairs in a vector, each looked at and counted, the [`PAGE`] + 1 smallest by
/// (score, id) picked with `select_nth_unstable` and sorted — as a server holding
/// nothing but those pairs, and no index, would. The median of seven, warmed.
fn page_floor(nodes: usize) -> Duration {
    let fleet: Vec<(Option<u8>, String)> = (0..nodes)
        .map(|i| {
            let score = (i % 23 != 0).then_some((i.wrapping_mul(2_654_435_761) % 101) as u8);
            (score, format!("node-{i:06}"))
        })
        .collect();
    let once = || {
        let t = Instant::now();
        let mut page: Vec<(Option<u8>, &str)> = fleet
            .iter()
            .map(|(score, id)| (*score, id.as_str()))
            .collect();
        let counted = page.len();
        if page.len() > PAGE + 1 {
            page.select_nth_unstable(PAGE);
            page.truncate(PAGE + 1);
        }
        page.sort_unstable();
        std::hint::black_box((counted, page));
        t.elapsed()
    };
    once();
    median(7, once)
}

/// One listing's requests: their median and slowest time, and the last body.
struct Timed {
    median: Duration,
    slowest: Duration,
    body: String,
}

/// `GET url` [`LISTING_RUNS`] times after one to warm; refused unless it succeeds.
async fn timed(http: &reqwest::Client, url: &str) -> anyhow::Result<Timed> {
    let mut runs = Vec::new();
    let mut body = String::new();
    for _ in 0..=LISTING_RUNS {
        let t = Instant::now();
        let r = http.get(url).send().await?;
        let status = r.status();
        body = r.text().await?;
        runs.push(t.elapsed());
        if !status.is_success() {
            bail!("GET {url}: {status}: {body}");
        }
    }
    runs.remove(0);
    runs.sort();
    Ok(Timed {
        median: runs[runs.len() / 2],
        slowest: runs[runs.len() - 1],
        body,
    })
}

/// A UI page must show `want` nodes: a blank page would measure nothing.
fn rows(page: &Timed, want: usize) -> anyhow::Result<()> {
    let shown = page.body.matches(r#"<tr class="node""#).count();
    if shown != want {
        bail!("a UI page of nodes shows {shown} rows, not {want}");
    }
    Ok(())
}

/// An API page must count `total` matches and hold `held` of them; its token.
fn counted_page(page: &Timed, total: usize, held: usize) -> anyhow::Result<Option<String>> {
    let list: Value = serde_json::from_str(&page.body)?;
    let counted = list["total"].as_u64().unwrap_or(0) as usize;
    let listed = list["nodes"].as_array().map_or(0, Vec::len);
    if counted != total || listed != held {
        bail!(
            "a page of the listing counts {counted} nodes and holds {listed}, not {total} and {held}"
        );
    }
    Ok(list["nextPageToken"].as_str().map(str::to_string))
}

/// The `total` an API listing counts.
async fn total(http: &reqwest::Client, url: &str) -> anyhow::Result<usize> {
    let list: Value = http.get(url).send().await?.json().await?;
    let total = list["total"]
        .as_u64()
        .context("the listing counted nothing")?;
    Ok(total as usize)
}

/// The token of the page after the first `skip` nodes in `sort`, walked to a
/// [`WALK`] at a time.
async fn token_at(
    http: &reqwest::Client,
    url: &str,
    sort: &str,
    skip: usize,
) -> anyhow::Result<String> {
    let mut token: Option<String> = None;
    let mut walked = 0;
    while walked < skip.max(1) {
        let size = (skip - walked).clamp(1, WALK);
        let mut page_url = format!("{url}/api/v1/nodes?sort={sort}&pageSize={size}");
        if let Some(t) = &token {
            page_url.push_str(&format!("&pageToken={t}"));
        }
        let page: Value = http.get(page_url).send().await?.json().await?;
        walked += page["nodes"].as_array().map_or(0, Vec::len);
        let next = page["nextPageToken"].as_str();
        token = Some(
            next.context("the listing ended before its middle")?
                .to_string(),
        );
    }
    token.context("no page walked")
}

fn am_version(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            text.split_whitespace()
                .skip_while(|w| *w != "version")
                .nth(1)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "version unknown".into())
}

/// Event appends per second, and paged reads on a node holding 100,000 events.
/// What one store kind measured, for the ratios against SQLite.
struct StoreFigures {
    appends: f64,
    page_p50: Duration,
    page_p99: Duration,
}

fn events(
    store: &mut dyn Store,
    kind: &str,
    baseline: Option<&StoreFigures>,
    report: &mut Report,
) -> anyhow::Result<StoreFigures> {
    use hale::store::EventQuery;

    let trust = serde_json::to_string(&Fleet::new(Utc::now()).trust)?;
    let start = Utc::now() - TimeDelta::days(30);
    let event = |node: &str, i: usize| bench_event(start, node, i);
    // 100,000 events on one node, among 100,000 on 1,000 others, 1,000 per transaction.
    let total = 200_000;
    let t = Instant::now();
    for chunk in 0..total / 1000 {
        let events: Vec<hale::core::Event> = (0..1000)
            .map(|k| {
                let i = chunk * 1000 + k;
                if i % 2 == 0 {
                    event("big", i)
                } else {
                    event(&format!("node-{:04}", i % 1000), i)
                }
            })
            .collect();
        store.write(&Batch {
            events: &events,
            trust: trust.clone(),
            ..Batch::default()
        })?;
    }
    let batched = total as f64 / t.elapsed().as_secs_f64();
    let singles = 2_000;
    let t = Instant::now();
    for i in 0..singles {
        store.write(&Batch {
            events: &[event("single", i)],
            trust: trust.clone(),
            ..Batch::default()
        })?;
    }
    let single = singles as f64 / t.elapsed().as_secs_f64();

    let first = store.events(
        "big",
        &EventQuery {
            page_size: 1,
            ..EventQuery::default()
        },
    )?;
    let first_seq: i64 = first.events[0]
        .id
        .rsplit('-')
        .next()
        .unwrap_or("1")
        .parse()?;
    let mut reads = Vec::new();
    for point in page_points(total as u64 - 400) {
        let after = first_seq + point as i64;
        let t = Instant::now();
        let page = store.events(
            "big",
            &EventQuery {
                page_size: 100,
                after: Some(after),
                ..EventQuery::default()
            },
        )?;
        reads.push(t.elapsed());
        assert_eq!(page.events.len(), 100);
    }
    reads.sort();
    let p = |q: f64| reads[((reads.len() as f64 - 1.0) * q).round() as usize];
    let t = Instant::now();
    let latest = store.events(
        "big",
        &EventQuery {
            page_size: 100,
            latest: true,
            types: vec!["SCORE_CHANGED".into()],
            ..EventQuery::default()
        },
    )?;
    let latest_t = t.elapsed();
    assert_eq!(latest.events.len(), 100);
    let appends_ok = report.target(
        &format!("{kind}: appends >= 50,000 events/s"),
        batched >= 50_000.0,
    );
    let page_ok = report.target(
        &format!("{kind}: event page p99 <= 10 ms"),
        p(0.99) <= Duration::from_millis(10),
    );
    let against = |f: &dyn Fn(&StoreFigures) -> String| baseline.map(f).unwrap_or_default();
    println!("event store ({kind})");
    println!(
        "  appends, 1,000 per write  {batched:>10.0} events/s (target >= 50,000/s: {appends_ok}){}",
        against(&|b| format!("; {:.2}x SQLite's", batched / b.appends))
    );
    println!("  appends, one per write    {single:>10.0} events/s");
    println!(
        "  page of 100 on a node holding 100,000 events: p50 {:.2} ms, p99 {:.2} ms (target p99 <= 10 ms: {page_ok}){}; latest page {:.2} ms",
        ms(p(0.5)),
        ms(p(0.99)),
        against(&|b| format!(", {:.1}x SQLite's p99", ratio(p(0.99), b.page_p99))),
        ms(latest_t)
    );
    Ok(StoreFigures {
        appends: batched,
        page_p50: p(0.5),
        page_p99: p(0.99),
    })
}

/// Where the 1,000 pages of a store's benchmark start, below `span`: the same
/// points in every run and for every store (xorshift).
fn page_points(span: u64) -> impl Iterator<Item = u64> {
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..1000).map(move |_| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % span
    })
}

/// The `i`th event the store benchmark writes.
fn bench_event(start: chrono::DateTime<Utc>, node: &str, i: usize) -> hale::core::Event {
    hale::core::Event {
        node_id: node.to_string(),
        kind: hale::core::EventKind::ScoreChanged {
            score: (i % 100) as u8,
            previous_score: ((i + 1) % 100) as u8,
            scored_by: "cluster".into(),
        },
        occurred_at: start + TimeDelta::milliseconds(i as i64 * 20),
        message: format!("score {} -> {}", (i + 1) % 100, i % 100),
    }
}

/// The floor under the NATS store on the same servers: bare JetStream doing the
/// same work with nothing of hale's around it. 200,000 messages of an event's
/// size to a stream of `replicas` copies, every other one on one subject, 1,000
/// in flight per write, each with a message id (as the store publishes an event,
/// without its node records and marks); then 1,000 pages of 100 from random
/// points of that subject, each one batched direct get on its own inbox.
/// Returns its figures and the median wait for a page's first message.
fn bare_jetstream(
    cfg: &hale::store::nats::NatsConfig,
    replicas: usize,
) -> anyhow::Result<(StoreFigures, Duration)> {
    use async_nats::jetstream::{self, stream};
    use futures::StreamExt;
    let (body, rt) = bare_setup()?;
    rt.block_on(async move {
        let client = hale::store::nats::connect(cfg).await?;
        let js = jetstream::new(client.clone());
        js.create_stream(stream::Config {
            name: "BARE".into(),
            subjects: vec!["bare.>".into()],
            num_replicas: replicas,
            allow_direct: true,
            ..Default::default()
        })
        .await?;
        let total = 200_000;
        let t = Instant::now();
        for chunk in 0..total / 1000 {
            let mut acks = Vec::with_capacity(1000);
            for k in 0..1000 {
                let i = chunk * 1000 + k;
                let subject = bare_subject("bare", i);
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(async_nats::header::NATS_MESSAGE_ID, i.to_string().as_str());
                acks.push(
                    js.publish_with_headers(subject, headers, body.clone())
                        .await?,
                );
            }
            for a in acks {
                a.await?;
            }
        }
        let appends = total as f64 / t.elapsed().as_secs_f64();
        let mut reads = Vec::new();
        let mut firsts = Vec::new();
        for point in page_points(total as u64 - 400) {
            let seq = 1 + point;
            let t = Instant::now();
            let inbox = client.new_inbox();
            let mut replies = client.subscribe(inbox.clone()).await?;
            let request = json!({"next_by_subj": "bare.big", "seq": seq, "batch": 101});
            client
                .publish_with_reply("$JS.API.DIRECT.GET.BARE", inbox, request.to_string().into())
                .await?;
            let mut read = 0;
            while let Some(m) = tokio::time::timeout(Duration::from_secs(5), replies.next()).await?
            {
                if read == 0 {
                    firsts.push(t.elapsed());
                }
                if m.status.is_some() {
                    break;
                }
                read += 1;
            }
            reads.push(t.elapsed());
            anyhow::ensure!(read == 101, "a bare page read {read} messages, not 101");
        }
        reads.sort();
        firsts.sort();
        js.delete_stream("BARE").await?;
        let p = |q: f64| reads[((reads.len() - 1) as f64 * q).round() as usize];
        Ok((
            StoreFigures {
                appends,
                page_p50: p(0.5),
                page_p99: p(0.99),
            },
            firsts[firsts.len() / 2],
        ))
    })
}

/// What bare JetStream publishes, a message of an event's size, and the runtime
/// its client runs on.
fn bare_setup() -> anyhow::Result<(bytes::Bytes, tokio::runtime::Runtime)> {
    let body = bytes::Bytes::from(serde_json::to_vec(&bench_event(
        Utc::now(),
        "node-0001",
        7,
    ))?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    Ok((body, rt))
}

/// The subject of bare JetStream's `i`th message: every other one on one node's
/// subject, the rest over 1,000 others, as the store's benchmark writes them.
fn bare_subject(prefix: &str, i: usize) -> String {
    if i % 2 == 0 {
        format!("{prefix}.big")
    } else {
        format!("{prefix}.node-{:04}", i % 1000)
    }
}

/// Bare JetStream's appends as the store makes them on a stream of several
/// copies: the same 200,000 messages, each with a message id, as atomic batches
/// of 1,000 (each message but the last published unacknowledged, the last
/// committing the batch), one batch at a time.
fn bare_batches(cfg: &hale::store::nats::NatsConfig, replicas: usize) -> anyhow::Result<f64> {
    use async_nats::jetstream::{self, stream};
    let (body, rt) = bare_setup()?;
    rt.block_on(async move {
        let client = hale::store::nats::connect(cfg).await?;
        let js = jetstream::new(client.clone());
        js.create_stream(stream::Config {
            name: "BARE_BATCHES".into(),
            subjects: vec!["batches.>".into()],
            num_replicas: replicas,
            allow_direct: true,
            allow_atomic_publish: true,
            ..Default::default()
        })
        .await?;
        let total = 200_000;
        let t = Instant::now();
        for chunk in 0..total / 1000 {
            let batch = format!("bench-{chunk}");
            for k in 0..1000 {
                let i = chunk * 1000 + k;
                let subject = bare_subject("batches", i);
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(async_nats::header::NATS_MESSAGE_ID, i.to_string().as_str());
                headers.insert("Nats-Batch-Id", batch.as_str());
                headers.insert("Nats-Batch-Sequence", (k + 1).to_string().as_str());
                if k == 999 {
                    headers.insert("Nats-Batch-Commit", "1");
                    js.publish_with_headers(subject, headers, body.clone())
                        .await?
                        .await?;
                } else {
                    client
                        .publish_with_headers(subject, headers, body.clone())
                        .await?;
                }
            }
        }
        let appends = total as f64 / t.elapsed().as_secs_f64();
        js.delete_stream("BARE_BATCHES").await?;
        Ok(appends)
    })
}

/// A replica's restart on each kind: open the store and load a fleet of
/// `fleet`'s nodes, as `hale serve` does before it serves.
fn restart(
    fleet: &Fleet,
    open: &dyn Fn() -> anyhow::Result<Box<dyn Store>>,
    kind: &str,
    baseline: Option<Duration>,
    report: &mut Report,
) -> anyhow::Result<Duration> {
    let mut store = open()?;
    let nodes = fleet
        .nodes
        .values()
        .map(|n| Ok((n.id.clone(), serde_json::to_string(n)?)))
        .collect::<serde_json::Result<Vec<_>>>()?;
    store.write(&Batch {
        nodes,
        trust: serde_json::to_string(&fleet.trust)?,
        ..Batch::default()
    })?;
    drop(store);
    let took = median(3, || {
        let t = Instant::now();
        let store = open().expect("the store opens");
        let loaded = store.load(Utc::now()).expect("the store loads");
        assert_eq!(loaded.nodes.len(), fleet.nodes.len());
        t.elapsed()
    });
    let ok = report.target(
        &format!("{kind}: restart with {} nodes <= 2 s", fleet.nodes.len()),
        took <= Duration::from_secs(2),
    );
    println!(
        "  restart: open the store and load {} nodes  {:>8.1} ms (target <= 2 s: {ok}){}",
        fleet.nodes.len(),
        ms(took),
        baseline
            .map(|b| format!("; {:.1}x SQLite's", ratio(took, b)))
            .unwrap_or_default()
    );
    Ok(took)
}

/// A fresh `hale serve` on the SQLite store [`restart`] left, until it serves
/// every node: what an operator's restart costs, where the load in process above
/// reuses memory the allocator already holds (a new process faults in every page).
fn fresh_restart(data: &Path, nodes: usize, report: &mut Report) -> anyhow::Result<()> {
    let Some(bin) = hale_bin() else {
        println!("  hale serve: not next to bench, its restart not timed");
        return Ok(());
    };
    let dir = data.with_extension("serve");
    std::fs::create_dir_all(&dir)?;
    let port = free_port();
    std::fs::write(
        dir.join("hale.yaml"),
        format!(
            "listen: 127.0.0.1:{port}\nstore: {{ path: {} }}\nalertmanager: {{ url: http://127.0.0.1:9 }}\n",
            data.display()
        ),
    )?;
    let url = format!("http://127.0.0.1:{port}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let http = reqwest::Client::new();
    let mut took = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let mut hale = spawn_hale(&bin, &dir)?;
        runtime.block_on(wait_ok(&http, &format!("{url}/healthz")))?;
        took.push(started.elapsed());
        let counted = runtime.block_on(count_nodes(&http, &url))?;
        if counted != nodes {
            bail!("restarted, hale serves {counted} nodes of the {nodes} it held");
        }
        hale.terminate()?;
    }
    took.sort();
    let ok = report.target(
        &format!("hale serve on SQLite: restart with {nodes} nodes <= 2 s"),
        took[1] <= Duration::from_secs(2),
    );
    println!(
        "  hale serve started on that store, serving its nodes: {:>8.1} ms, median of 3 ({:.1}–{:.1}) (target <= 2 s: {ok})",
        ms(took[1]),
        ms(took[0]),
        ms(took[2])
    );
    Ok(())
}

/// The stores' section alone, on the fleet of one first poll.
fn stores_alone(nodes: usize, work: &Path, report: &mut Report) -> anyhow::Result<()> {
    let cfg = Config::default().resolve("<bench>", "")?.core;
    let body = answer(nodes, 0, false);
    let parsed = hale::alertmanager::parse_v2(&body)?;
    let mut fleet = Fleet::new(Utc::now());
    fleet.poll(&cfg, Utc::now(), &parsed);
    stores(work, &fleet, report)
}

/// The event store and a restart on SQLite, then on NATS JetStream (a
/// three-server cluster on loopback, three copies of everything) where a
/// `nats-server` is found.
fn stores(work: &Path, fleet: &Fleet, report: &mut Report) -> anyhow::Result<()> {
    let mut sqlite = Sqlite::open(&work.join("events"))?;
    let base = events(&mut sqlite, "embedded SQLite", None, report)?;
    let dir = work.join("restart");
    let base_restart = restart(
        fleet,
        &|| Ok(Box::new(Sqlite::open(&dir)?) as Box<dyn Store>),
        "SQLite",
        None,
        report,
    )?;
    fresh_restart(&dir, fleet.nodes.len(), report)?;
    println!();
    let Some(server) = nats_server() else {
        println!(
            "nats-server is not installed: skipping the NATS store (tests/run.sh installs it)"
        );
        return Ok(());
    };
    // The deployment the issue names (three servers, three copies), then one
    // server with one copy: what replication costs on this machine.
    for servers in [3, 1] {
        let cluster = NatsCluster::start(&server, &work.join(format!("nats{servers}")), servers)?;
        let cfg = cluster.config();
        let (floor, first) = bare_jetstream(&cfg, servers)?;
        let mut nats = hale::store::Nats::open(&cfg, "bench-events", 90)?;
        let kind = format!("NATS JetStream, {servers} server(s), {servers} cop(ies)");
        let hale = events(&mut nats, &kind, Some(&base), report)?;
        println!(
            "  bare JetStream on the same servers (the floor): appends {:.0}/s, page p50 {:.2} ms, p99 {:.2} ms; the store: {:.2}x its appends, {:.1}x its page p99",
            floor.appends,
            ms(floor.page_p50),
            ms(floor.page_p99),
            hale.appends / floor.appends,
            ratio(hale.page_p99, floor.page_p99)
        );
        println!(
            "  of a bare page's p50, {:.2} ms pass before its first message: a batched direct get first counts the subject's messages from the page's start, one by one through the block it lies in",
            ms(first)
        );
        if servers > 1 {
            let batches = bare_batches(&cfg, servers)?;
            println!(
                "  bare JetStream in atomic batches of 1,000, as the store sends a large write to several copies: appends {batches:.0}/s; the store: {:.2}x it",
                hale.appends / batches
            );
        }
        restart(
            fleet,
            &|| Ok(Box::new(hale::store::Nats::open(&cfg, "bench-restart", 90)?) as Box<dyn Store>),
            &kind,
            Some(base_restart),
            report,
        )?;
        println!();
    }
    Ok(())
}

/// The repository's `.venv` nats-server (what tests/run.sh installs), else one
/// on `PATH`.
fn nats_server() -> Option<PathBuf> {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/nats-server");
    venv.is_file()
        .then_some(venv)
        .or_else(|| which("nats-server"))
}

/// `nats-server`s routed to each other, JetStream on each; killed on drop.
struct NatsCluster {
    urls: Vec<String>,
    children: Vec<Child>,
}

impl NatsCluster {
    fn start(bin: &Path, dir: &Path, servers: usize) -> anyhow::Result<NatsCluster> {
        let ports: Vec<(u16, u16)> = (0..servers).map(|_| (free_port(), free_port())).collect();
        let mut children = Vec::new();
        for (i, (port, cport)) in ports.iter().enumerate() {
            let routes: Vec<String> = ports
                .iter()
                .filter(|(p, _)| p != port)
                .map(|(_, c)| format!("nats://127.0.0.1:{c}"))
                .collect();
            let mut server = Command::new(bin);
            server
                .args(["-js", "-a", "127.0.0.1", "-n", &format!("n{i}")])
                .args(["-p", &port.to_string()])
                .arg("-sd")
                .arg(dir.join(format!("n{i}")))
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if servers > 1 {
                server
                    .args(["--cluster", &format!("nats://127.0.0.1:{cport}")])
                    .args(["--routes", &routes.join(","), "--cluster_name", "bench"]);
            }
            children.push(server.spawn().context("start nats-server")?);
        }
        let cluster = NatsCluster {
            urls: ports
                .iter()
                .map(|(p, _)| format!("nats://127.0.0.1:{p}"))
                .collect(),
            children,
        };
        // Ready once JetStream takes a stream: its meta leader is elected.
        let deadline = Instant::now() + Duration::from_secs(30);
        let cfg = cluster.config();
        while hale::store::Nats::open(&cfg, "bench-ready", 1).is_err() {
            if Instant::now() > deadline {
                bail!("the NATS cluster did not become ready");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(cluster)
    }
}

impl NatsCluster {
    /// The store's configuration on these servers, a copy on each.
    fn config(&self) -> hale::store::nats::NatsConfig {
        hale::store::nats::NatsConfig {
            urls: self.urls.clone(),
            creds_file: None,
            tls: None,
            replicas: self.urls.len(),
            lease_duration: Duration::from_secs(20),
        }
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One synthetic alert.
struct Synth {
    labels: Vec<(&'static str, String)>,
    summary: String,
    suppressed: bool,
    starts_at: String,
    /// The round this alert last changed in: its timestamps are that round's.
    changed: usize,
}

impl Synth {
    fn labels(&self) -> serde_json::Map<String, Value> {
        self.labels
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(v.as_str())))
            .collect()
    }

    fn name(&self) -> &str {
        self.labels
            .iter()
            .find(|(k, _)| *k == "alertname")
            .map_or("", |(_, v)| v)
    }

    fn annotations(&self) -> Value {
        let name = self.name();
        json!({
            "summary": self.summary,
            "description": format!("{name}: see the runbook for what to check and how to clear it."),
            "runbook_url": format!("https://runbooks.example/hale/{name}"),
        })
    }

    /// Alertmanager's fingerprint stands in as a hash of the sorted labels.
    fn fingerprint(&self) -> String {
        let mut sorted: Vec<&(&str, String)> = self.labels.iter().collect();
        sorted.sort();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (k, v) in sorted {
            for b in k.bytes().chain([0xff]).chain(v.bytes()).chain([0xfe]) {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("{h:016x}")
    }

    /// The v2 `GettableAlert` Alertmanager lists, as last sent in round `sent`.
    fn gettable(&self, sent: usize) -> Value {
        let name = self.name();
        let sent = epoch() + TimeDelta::seconds(30 * sent as i64);
        json!({
            "annotations": self.annotations(),
            "endsAt": (sent + TimeDelta::minutes(5)).to_rfc3339(),
            "fingerprint": self.fingerprint(),
            "receivers": [{"name": "hale"}],
            "startsAt": self.starts_at,
            "status": {
                "inhibitedBy": [],
                "silencedBy": if self.suppressed { vec!["2b7c2ad8-5d8e-4c39-9b2f-0e7e1d7b4b10"] } else { vec![] },
                "state": if self.suppressed { "suppressed" } else { "active" },
            },
            "updatedAt": sent.to_rfc3339(),
            "generatorURL": format!("http://prometheus.example:9090/graph?g0.expr={name}"),
            "labels": self.labels(),
        })
    }
}

/// The alerts of a hardware fleet: per node a heartbeat and four GPU, disk, memory,
/// collector or unavailable signals; one alert in ten silenced; the watchdog in
/// place of the last node's last alert.
const KINDS: [&[(&str, &str)]; 10] = [
    &[
        ("alertname", "GpuEccCorrectable"),
        ("hale_condition", "gpu_ecc_errors"),
        ("hale_reason", "GpuEccCorrectable"),
        ("gpu", "0"),
        ("severity", "warning"),
    ],
    &[
        ("alertname", "GpuEccCorrectable"),
        ("hale_condition", "gpu_ecc_errors"),
        ("hale_reason", "GpuEccCorrectable"),
        ("gpu", "1"),
        ("severity", "warning"),
    ],
    &[
        ("alertname", "GpuThrottling"),
        ("hale_condition", "gpu_throttling"),
        ("hale_reason", "GpuThrottling"),
        ("gpu", "2"),
        ("severity", "warning"),
    ],
    &[
        ("alertname", "SmartWarning"),
        ("hale_condition", "disk_degraded"),
        ("hale_reason", "SmartWarning"),
        ("device", "/dev/sda"),
        ("severity", "warning"),
    ],
    &[
        ("alertname", "IoErrors"),
        ("hale_condition", "disk_degraded"),
        ("hale_reason", "IoErrors"),
        ("device", "/dev/sdb"),
        ("severity", "warning"),
    ],
    &[
        ("alertname", "CorrectableMemoryErrors"),
        ("hale_condition", "memory_errors"),
        ("hale_reason", "CorrectableMemoryErrors"),
        ("mc", "0"),
        ("severity", "warning"),
    ],
    &[
        ("alertname", "GpuXidApplication"),
        ("hale_condition", "gpu_xid_errors"),
        ("hale_reason", "GpuXidApplication"),
        ("xid", "13"),
        ("severity", "warning"),
    ],
    &[
        ("alertname", "HaleCollectorFailed"),
        ("hale_signal", "collector_failed"),
        ("collector", "smart"),
        ("severity", "warning"),
    ],
    &[
        ("alertname", "HaleSignalUnavailable"),
        ("hale_signal", "unavailable"),
        ("signal", "gpu_ecc"),
        ("severity", "info"),
    ],
    &[
        ("alertname", "GpuXidHardware"),
        ("hale_condition", "gpu_xid_errors"),
        ("hale_reason", "GpuXidHardware"),
        ("xid", "79"),
        ("hale_sticky", "true"),
        ("severity", "critical"),
    ],
];

/// The critical alert that moves from node to node between rounds.
const MOVING: &[(&str, &str)] = &[
    ("alertname", "MachineCheckErrors"),
    ("hale_condition", "machine_check_errors"),
    ("hale_reason", "MachineCheckErrors"),
    ("bank", "4"),
    ("severity", "critical"),
];

/// Call `each` with the alerts of the nodes in `range` (of `nodes`) as Alertmanager
/// lists them in `round`. Round 0 is the base; from one round to the next a tenth of
/// the alerts change value (their summaries count up), the critical [`MOVING`]
/// alert resolves on 0.5 % of the nodes and fires on another 0.5 %.
fn synthesize(
    range: std::ops::Range<usize>,
    nodes: usize,
    round: usize,
    mut each: impl FnMut(&Synth),
) {
    let started = (epoch() - TimeDelta::minutes(30)).to_rfc3339();
    for i in range {
        let node = format!("node-{i:06}");
        let instance = format!("10.{}.{}.{}:9100", i / 65536, (i / 256) % 256, i % 256);
        let mut sets: Vec<&[(&str, &str)]> = vec![&[
            ("alertname", "HaleNodeReporting"),
            ("hale_signal", "heartbeat"),
            ("severity", "info"),
        ]];
        sets.extend((0..PER_NODE - 1).map(|k| KINDS[(i + 3 * k) % KINDS.len()]));
        if round > 0 && i % 200 == round % 200 {
            sets.push(MOVING);
        }
        for (j, set) in sets.into_iter().enumerate() {
            let k = i * PER_NODE + j;
            let watchdog = i == nodes - 1 && j == PER_NODE - 1;
            let mut labels: Vec<(&'static str, String)> =
                set.iter().map(|(k, v)| (*k, v.to_string())).collect();
            if watchdog {
                labels = vec![
                    ("alertname", "Watchdog".into()),
                    ("hale_signal", "watchdog".into()),
                    ("severity", "info".into()),
                ];
            } else {
                labels.extend([
                    ("node", node.clone()),
                    ("instance", instance.clone()),
                    ("job", "node".into()),
                    ("cluster", "bench".into()),
                ]);
            }
            // How often this alert's value moved by this round: its tenth moves in
            // the rounds that share its remainder (1 to 10).
            let slice = k % 10 + 1;
            let moved = (round + 10 - slice) / 10;
            // The watchdog is re-sent every round, as Prometheus keeps it firing.
            let changed = match (set == MOVING || watchdog, moved) {
                (true, _) => round,
                (false, 0) => 0,
                (false, m) => slice + 10 * (m - 1),
            };
            let name = labels[0].1.clone();
            let synth = Synth {
                summary: format!("{name} on {node}: {} since the last reboot", 1 + moved),
                suppressed: !watchdog && k % 10 == 9,
                starts_at: started.clone(),
                changed,
                labels,
            };
            each(&synth);
        }
    }
}

/// When the bench's alerts were first sent, fixed for the run.
fn epoch() -> chrono::DateTime<Utc> {
    static EPOCH: std::sync::OnceLock<chrono::DateTime<Utc>> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Utc::now)
}

/// The whole answer of `GET /api/v2/alerts` in `round`: an alert carries the
/// timestamps of the round it last changed in, or — `resent` — of this round, as
/// when Prometheus has re-sent every alert since (it does every minute by default,
/// and Alertmanager moves each one's expiry). In Alertmanager's order, by
/// fingerprint, which scatters a node's alerts over the whole answer.
fn answer(nodes: usize, round: usize, resent: bool) -> Vec<u8> {
    let mut listed = Vec::with_capacity(nodes * PER_NODE);
    synthesize(0..nodes, nodes, round, |a| {
        let sent = if resent { round } else { a.changed };
        let alert = serde_json::to_vec(&a.gettable(sent)).expect("writes to memory");
        listed.push((a.fingerprint(), alert));
    });
    listed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::with_capacity(listed.iter().map(|(_, a)| a.len() + 1).sum::<usize>() + 2);
    out.push(b'[');
    for (i, (_, alert)) in listed.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(alert);
    }
    out.push(b']');
    out
}

struct Proc(Child);

/// A `hale serve` started by the bench.
struct Running {
    url: String,
    proc: Proc,
}

fn start_hale(bin: &Path, dir: &Path, am_url: &str) -> anyhow::Result<Running> {
    std::fs::create_dir_all(dir)?;
    let port = free_port();
    std::fs::write(
        dir.join("hale.yaml"),
        format!(
            "listen: 127.0.0.1:{port}\nstore: {{ path: {} }}\nalertmanager:\n  url: {am_url}\n  pollInterval: {}s\n",
            dir.join("data").display(),
            POLL_EVERY.as_secs()
        ),
    )?;
    Ok(Running {
        url: format!("http://127.0.0.1:{port}"),
        proc: spawn_hale(bin, dir)?,
    })
}

/// A restart of `hale` on its store, timed until it serves every node it held.
struct Restart {
    started: Instant,
    serving: Duration,
    /// The share of a core Alertmanager used meanwhile.
    am_share: f64,
}

async fn restart_timed(
    http: &reqwest::Client,
    hale: &mut Running,
    bin: &Path,
    work: &Path,
    nodes: usize,
    am_pid: u32,
) -> anyhow::Result<Restart> {
    hale.proc.terminate()?;
    let am_before = cpu_ticks(am_pid).unwrap_or(0);
    let started = Instant::now();
    hale.proc = spawn_hale(bin, &work.join("hale"))?;
    wait_ok(http, &format!("{}/healthz", hale.url)).await?;
    let serving = started.elapsed();
    let am_share = ticks_per_sec(
        cpu_ticks(am_pid).unwrap_or(0).saturating_sub(am_before),
        serving,
    );
    let counted = count_nodes(http, &hale.url).await?;
    if counted != nodes {
        bail!("restarted, hale serves {counted} nodes of the {nodes} it held");
    }
    Ok(Restart {
        started,
        serving,
        am_share,
    })
}

/// Wait until `pid` uses under a tenth of a core over half a second, or `most`
/// passed.
async fn wait_idle(pid: u32, most: Duration) {
    let deadline = Instant::now() + most;
    let span = Duration::from_millis(500);
    while Instant::now() < deadline {
        let before = cpu_ticks(pid).unwrap_or(0);
        tokio::time::sleep(span).await;
        if ticks_per_sec(cpu_ticks(pid).unwrap_or(0).saturating_sub(before), span) < 0.1 {
            return;
        }
    }
}

/// `ticks` of CPU time over `span`, as a share of one core.
fn ticks_per_sec(ticks: u64, span: Duration) -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / per_sec / span.as_secs_f64().max(f64::EPSILON)
}

/// The `hale` binary built beside this one.
fn hale_bin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.join("hale")).filter(|p| p.is_file())
}

/// `hale serve` on the configuration in `dir`.
fn spawn_hale(bin: &Path, dir: &Path) -> anyhow::Result<Proc> {
    let child = Command::new(bin)
        .args(["serve", "--config"])
        .arg(dir.join("hale.yaml"))
        .env("HALE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok(Proc(child))
}

impl Proc {
    /// Stop it as an operator would (SIGTERM) and wait until it has exited.
    fn terminate(&mut self) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()?;
        if !status.success() {
            bail!("kill -TERM {} failed", self.0.id());
        }
        self.0.wait()?;
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_ok(http: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(r) = http.get(url).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("{url} did not become ready")
}

fn median(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut v: Vec<Duration> = (0..runs).map(|_| f()).collect();
    v.sort();
    v[runs / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn rss_kib(pid: u32) -> Option<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn which(binary: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(binary))
            .find(|p| p.is_file())
    })
}
