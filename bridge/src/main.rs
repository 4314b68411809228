//! The `hale` binary: parse the command line and hand off. `serve` loads the
//! configuration, starts logging, builds the shared state, spawns the loops and serves
//! HTTP until SIGTERM or Ctrl-C.

mod cli;

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use cli::{Cli, Command, LogFormat};
use hale::config::{Config, Loaded, OrchestratorConfig};
use hale::service::Hale;
use tracing::{info, warn};

/// An error ends the process with status 1 and its chain of causes on one line —
/// never a backtrace, whatever `RUST_BACKTRACE` says (a panic still prints one).
fn main() -> std::process::ExitCode {
    // Set empty, a variable of hale's is unset, as HALE_LOG's is (`Environment=
    // HALE_SERVER=` in a unit file); the argument parser would read an empty value.
    for var in cli::ENV_VARS {
        if std::env::var_os(var).is_some_and(|v| v.is_empty()) {
            // SAFETY: no other thread runs yet to read the environment meanwhile.
            unsafe { std::env::remove_var(var) };
        }
    }
    // All but HALE_CONFIG: set empty it names no file, and `hale serve` on the
    // built-in defaults in place of a configuration meant is refused (`run`).
    if std::env::var_os(cli::CONFIG_VAR).is_some_and(|v| v.is_empty()) {
        EMPTY_CONFIG_VAR.store(true, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { std::env::remove_var(cli::CONFIG_VAR) };
    }
    hale::service::tune_allocator();
    // A panic ends the process at once (release builds abort): the lines queued
    // for the log, the ones that tell what led to it, are written first.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |panic| {
        flush_log();
        report(panic);
    }));
    let ran = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
        .and_then(|runtime| {
            let ran = runtime.block_on(run());
            // A read that never returns (a file on a mount that hangs, behind a
            // reload) holds no stop: the runtime waits this long for it, no more.
            runtime.shutdown_timeout(std::time::Duration::from_secs(5));
            ran
        });
    // Logging JSON, the error that ends the process is a line of the log like
    // the others, for a collector that reads only JSON (the crash loop's cause).
    let json = LOGS_JSON.load(std::sync::atomic::Ordering::Relaxed)
        && tracing::enabled!(tracing::Level::ERROR);
    if let Err(e) = &ran
        && json
    {
        tracing::error!("{}", format!("{e:#}"));
    }
    flush_log();
    match ran {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            if !json {
                eprintln!("error: {}", cli::terminal(&format!("{e:#}")));
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// The log is JSON (`--log-format json`), set up.
static LOGS_JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `HALE_CONFIG` was set, and empty.
static EMPTY_CONFIG_VAR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Serve { config: None, .. } = &cli.command
        && EMPTY_CONFIG_VAR.load(std::sync::atomic::Ordering::Relaxed)
    {
        anyhow::bail!(
            "HALE_CONFIG is set but empty, so it names no configuration file: name the file (or pass --config), or unset HALE_CONFIG to run on the built-in defaults"
        );
    }
    if !matches!(cli.command, Command::Serve { .. }) {
        // A client's output piped into `head` ends quietly when the reader has
        // had enough, as other command-line tools do, instead of panicking on
        // the broken pipe (Rust ignores SIGPIPE; the server keeps it so).
        // SAFETY: setting a signal's disposition to the default, before any
        // thread of ours writes, touches no memory of the program's.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match cli.command {
        Command::Serve { config, log_format } => {
            log(log_format)?;
            serve(Config::load_bounded(config.as_deref())?).await
        }
        Command::CheckConfig { file } => {
            let loaded = Config::load_bounded(Some(&file))?;
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            println!(
                "{}: ok (cluster {}, {} pool(s), {} inventory node(s))",
                file.display(),
                loaded.config.cluster,
                loaded.core.pools.len(),
                loaded.config.inventory.len()
            );
            // Metrics and logs name an endpoint without its path (it may hold a
            // secret): which one is which.
            for (i, hook) in loaded.webhooks.iter().enumerate() {
                println!(
                    "  nodeEventWebhooks[{i}] is endpoint=\"{}\" in metrics and logs",
                    hook.shown()
                );
            }
            Ok(())
        }
        Command::Node { verb, client } => cli::run_node(verb, client).await,
        Command::Alerts { client } => cli::run_alerts(client).await,
        Command::Remediation { verb, client } => cli::run_remediation(verb, client).await,
        Command::Policy { verb } => cli::run_backtest(verb),
        Command::Collect { what } => cli::run_collect(what).await,
        Command::Store { verb } => cli::run_store_copy(verb),
    }
}

/// Standard output for the log, whose reader may go away (a `| head`, a log
/// shipper restarting) or stop reading (a stuck pipe, a stalled shipper): lines
/// go to a thread of their own through a queue of [`LOG_BACKLOG`], and one the
/// queue has no room for is dropped and counted, so a reader that stops costs log
/// lines, never the threads that ingest, answer and act. A line the reader cannot
/// take is dropped too; hale neither stops nor complains on a standard error
/// that may be the same pipe. One record is one line: a line break inside it (an
/// alert's text, an operator's reason) is written as `\n` or `\r`, or it would
/// start a forged record.
struct LogOut;

/// Lines the log's thread may have waiting.
const LOG_BACKLOG: usize = 4096;

/// The queue to the log's thread, and the lines dropped since it last wrote.
struct LogPump {
    lines: std::sync::mpsc::SyncSender<Vec<u8>>,
    dropped: std::sync::atomic::AtomicU64,
    waiting: std::sync::atomic::AtomicUsize,
}

static LOG_PUMP: std::sync::OnceLock<LogPump> = std::sync::OnceLock::new();

fn log_pump() -> &'static LogPump {
    use std::sync::atomic::Ordering;
    LOG_PUMP.get_or_init(|| {
        let (lines, queue) = std::sync::mpsc::sync_channel::<Vec<u8>>(LOG_BACKLOG);
        std::thread::Builder::new()
            .name("log".into())
            .spawn(move || {
                use std::io::Write;
                let mut out = std::io::stdout();
                for line in queue {
                    let _ = out.write_all(&line);
                    let _ = out.flush();
                    let pump = LOG_PUMP.get().expect("set before any line");
                    // Said once the queue has room for it (said into a full queue, the
                    // count itself would be dropped, and counted as one).
                    if pump.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
                        let dropped = pump.dropped.swap(0, Ordering::AcqRel);
                        if dropped > 0 {
                            warn!(
                                dropped,
                                "log lines dropped: standard output was not read fast enough"
                            );
                        }
                    }
                }
            })
            .expect("start the log's thread");
        LogPump {
            lines,
            dropped: 0.into(),
            waiting: 0.into(),
        }
    })
}

/// Let the log's thread write what is queued, for a second at most: the last
/// lines before the process ends.
fn flush_log() {
    use std::sync::atomic::Ordering;
    let Some(pump) = LOG_PUMP.get() else { return };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while pump.waiting.load(Ordering::Acquire) > 0 && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

impl std::io::Write for LogOut {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        use std::sync::atomic::Ordering;
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        let one = if body.iter().any(|b| matches!(b, b'\n' | b'\r')) {
            let mut one = Vec::with_capacity(line.len() + 16);
            for &b in body {
                match b {
                    b'\n' => one.extend_from_slice(b"\\n"),
                    b'\r' => one.extend_from_slice(b"\\r"),
                    _ => one.push(b),
                }
            }
            one.extend_from_slice(&line[body.len()..]);
            one
        } else {
            line.to_vec()
        };
        let pump = log_pump();
        pump.waiting.fetch_add(1, Ordering::AcqRel);
        if pump.lines.try_send(one).is_err() {
            pump.waiting.fetch_sub(1, Ordering::AcqRel);
            pump.dropped.fetch_add(1, Ordering::AcqRel);
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The crate whose log lines only repeat an error hale reports itself.
const QUIET: &str = "rustls_platform_verifier";

/// The crate whose debug lines quote what the Kubernetes API server answered.
const KUBE_CLIENT: &str = "kube_client";

/// Start the log: `HALE_LOG` filters it; colours only on a terminal, so a file or
/// `kubectl logs` reads clean; JSON lines for collectors.
/// A `HALE_LOG` that is not a filter stops the start, as a bad configuration does.
fn log(format: LogFormat) -> anyhow::Result<()> {
    let spec = std::env::var("HALE_LOG");
    let filter = match &spec {
        // Set empty (`Environment=HALE_LOG=`) is unset: no directive would log nothing.
        Ok(spec) if spec.trim().is_empty() => "info".into(),
        Ok(spec) => {
            let not_a_filter = |why: String| {
                anyhow::anyhow!(
                    "HALE_LOG={spec:?} is not a log filter (info, hale=debug, warn,hale=info, …): {why}"
                )
            };
            // A bare word is read as a module to log everything of — `warning` would
            // log nothing of hale's: only a level or one of hale's modules is taken.
            if let Some(word) = spec
                .split(',')
                .map(str::trim)
                .find(|d| !d.is_empty() && !d.contains(['=', '[']) && !level_or_module(d))
            {
                return Err(not_a_filter(format!(
                    "`{word}` is no level (trace, debug, info, warn, error, off) and no module of hale's; another crate is written with its level, like kube=debug"
                )));
            }
            // Read without the spaces around each directive, as checked above (the
            // parser would take ` info` for a target, and log nothing).
            let spec = spec
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .collect::<Vec<_>>()
                .join(",");
            // The parser's error repeats its cause as its source: said once.
            let filter = tracing_subscriber::EnvFilter::try_new(&spec)
                .map_err(|e| not_a_filter(e.to_string()))?;
            // Without a level of its own (`kube=debug`) the rest logs at info:
            // a filter for one crate must not silence hale's warnings and errors.
            if spec.split(',').map(str::trim).any(level) {
                filter
            } else {
                filter.add_directive(tracing::level_filters::LevelFilter::INFO.into())
            }
        }
        Err(std::env::VarError::NotPresent) => "info".into(),
        Err(std::env::VarError::NotUnicode(_)) => anyhow::bail!("HALE_LOG is not UTF-8"),
    };
    // A certificate that does not verify is said by what hale was doing (a
    // federation member's row, a poll's error), with whom: the verifier's own
    // error line, naming no one, once per request, only when asked for by name.
    let named = |name: &str| spec.as_ref().is_ok_and(|s| s.contains(name));
    let filter = if named(QUIET) {
        filter
    } else {
        filter.add_directive(format!("{QUIET}=off").parse().expect("a directive"))
    };
    // Two clients are quieter unless a directive names their crate (`kube=debug`,
    // `kube_client=trace`, `async_nats=info`; hale's own `hale::kubernetes` is
    // not kube's): kube's logs at debug what the API server answered, which may
    // echo the token it refused; the NATS client says at info each reconnection
    // try and which port it reached, naming no server, where hale's own lines
    // name the store and what failed.
    let directs = |prefix: &str| {
        spec.as_ref()
            .is_ok_and(|s| s.split(',').any(|d| d.trim().starts_with(prefix)))
    };
    let mut filter = filter;
    for (prefix, quieted) in [
        ("kube", format!("{KUBE_CLIENT}=info")),
        ("async_nats", "async_nats=warn".to_string()),
    ] {
        if !directs(prefix) {
            filter = filter.add_directive(quieted.parse().expect("a directive"));
        }
    }
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LogOut);
    match format {
        LogFormat::Json => {
            log.json().with_current_span(false).init();
            LOGS_JSON.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        LogFormat::Text => log
            .fmt_fields(hale::logline::Logfmt)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init(),
    }
    Ok(())
}

/// Whether a bare `HALE_LOG` directive is a level (a name or 0-5), `hale`, or a
/// module path (`hale::service`, `kube::client`).
fn level_or_module(d: &str) -> bool {
    let path = d.contains("::") && d.split("::").all(|part| !part.is_empty());
    level(d) || path || d == "hale"
}

/// Whether a `HALE_LOG` directive is a bare level, by name or 0-5.
fn level(d: &str) -> bool {
    ["trace", "debug", "info", "warn", "error", "off"]
        .iter()
        .any(|l| d.eq_ignore_ascii_case(l))
        || matches!(d, "0" | "1" | "2" | "3" | "4" | "5")
}

async fn serve(loaded: Loaded) -> anyhow::Result<()> {
    let listen = loaded.config.listen.clone();
    let orchestrator = loaded
        .config
        .orchestrator
        .connect()
        .await
        .map_err(anyhow::Error::msg)?;
    let hale = Hale::open(loaded, orchestrator).context("opening the store")?;
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let cfg = hale.config();
    info!(
        listen = %listener.local_addr()?,
        alertmanager = %hale::shown_url(&reqwest::Url::parse(&cfg.config.alertmanager.url)?),
        receiver = %cfg.config.alertmanager.receiver,
        mode = %hale::core::policy::mode_name(cfg.core.cluster.mode),
        "hale serving"
    );
    for w in &cfg.warnings {
        warn!("{w}");
    }
    for p in hale::proxies() {
        if p.usable {
            info!(scheme = p.scheme, proxy = %p.shown(),
                "outbound requests go through this proxy, except to loopback and the hosts NO_PROXY names");
        } else {
            warn!(scheme = p.scheme, proxy = %p.shown(),
                "not an http or https proxy, which is all hale speaks to: its requests go direct");
        }
    }
    tokio::spawn(Arc::clone(&hale).poll_loop());
    tokio::spawn(Arc::clone(&hale).tick_loop());
    tokio::spawn(Arc::clone(&hale).act_loop());
    tokio::spawn(Arc::clone(&hale).blocking_loop());
    // Only an orchestrator with nodes of its own has somewhere to show hale's view.
    if cfg.config.orchestrator != OrchestratorConfig::None {
        tokio::spawn(Arc::clone(&hale).publish_loop());
        tokio::spawn(Arc::clone(&hale).inventory_loop());
    }
    tokio::spawn(Arc::clone(&hale).retention_loop());
    tokio::spawn(Arc::clone(&hale).follow_loop());
    tokio::spawn(reload_on_hangup(Arc::clone(&hale)));
    hale::server::serve(
        listener,
        hale::http::limited(
            hale::http::router(Arc::clone(&hale)).merge(hale::ui::router(Arc::clone(&hale))),
            Arc::clone(&hale),
        ),
        shutdown(),
    )
    .await;
    // A last step writes what is held only in memory, and anything a failed write
    // left pending; what the store will not take now is lost, and the exit says so.
    hale.write_now();
    let last = hale.apply_durable(|fleet, cfg, now| Ok(fleet.stop(cfg, now)));
    hale.step_down().await;
    match last {
        Err(hale::service::StepError::Unwritten(why)) => anyhow::bail!(
            "stopped with changes the store did not take ({why}): they are lost; the next start has the store as last written"
        ),
        last => last.map(drop).context("the last step"),
    }
}

/// SIGHUP re-reads the configuration; a bad file is logged and the running one stays.
async fn reload_on_hangup(hale: Arc<Hale>) {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .expect("SIGHUP handler");
    while hup.recv().await.is_some() {
        if let Err(e) = hale.reload_bounded().await {
            tracing::error!(error = %e, "reload refused; the running configuration stays");
        }
    }
}

async fn shutdown() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    info!("shutting down");
}
