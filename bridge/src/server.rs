//! The HTTP server under the API and the UI: HTTP/1 on each connection accepted,
//! with the limits a port open to a network needs, since the webhook, the API
//! and the UI share it with whoever can reach it. A request's header must arrive
//! within [`HEADER_READ`] (and a kept-alive connection idle that long is closed),
//! its body within [`BODY_READ`], a write may stall for [`WRITE_STALL`] at most,
//! and at most [`MAX_CONNECTIONS`] are open at once — past that, new ones wait in
//! the kernel's queue rather than take the process's last file descriptors — an
//! eighth of them from one client address ([`per_client`]), whose next are closed
//! as they come once fewer than a quarter are free — and then every kept-alive
//! connection that has served a request is closed too (at once where idle
//! between requests, after its answer where busy), so a client's pool of idle
//! connections (Alertmanager's, after a burst of deliveries) gives its slots
//! back rather than lock out every client on its address until they time out. A client that sends nothing, a header a
//! byte at a time, or reads nothing holds one slot for a bounded time, not for
//! ever, and one client cannot hold them all. On shutdown it stops accepting and
//! lets the requests under way finish, for [`SHUTDOWN_WAIT`] at most.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{error, warn};

/// How long a request's header may take to arrive, and a kept-alive connection
/// may stay idle: longer than the intervals clients send at (Alertmanager's
/// `repeat_interval` of 30 s or a minute, a scrape every 15–60 s), so a client
/// does not send on a connection in the instant hale closes it.
pub const HEADER_READ: Duration = Duration::from_secs(75);
/// How long a request's body may take to arrive, from when its handler starts
/// reading it.
pub const BODY_READ: Duration = Duration::from_secs(30);
/// Connections open at once, at most: fewer where the process may open few files.
pub const MAX_CONNECTIONS: usize = 1024;
/// How long a write to a client may make no progress: one that asked for a large
/// answer (`/metrics`) and stopped reading holds its connection no longer.
pub const WRITE_STALL: Duration = Duration::from_secs(30);
/// How long a stop waits for the requests under way.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(20);
/// How often idle connections are closed while slots run short, at most.
const SHED_EVERY: Duration = Duration::from_secs(1);

/// What the connections are asked: those that have served a request to close,
/// each time `shed` moves (slots run short), or all of them for good (`stop`:
/// shutdown). Asked, a kept-alive connection idle between requests closes at
/// once, a busy one after its answer; one whose first request has not come yet
/// is left to [`HEADER_READ`], as before slots ran short.
#[derive(Debug, Clone, Copy, Default)]
struct Close {
    shed: u64,
    stop: bool,
}

/// Serve `app` on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, app: Router, shutdown: impl Future<Output = ()>) {
    serve_within(listener, app, shutdown, connection_cap()).await;
}

/// [`serve`] with `cap` connections at most.
async fn serve_within(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()>,
    cap: usize,
) {
    let app = app.layer(axum::middleware::from_fn(body_in_time));
    let slots = Arc::new(Semaphore::new(cap));
    let clients = Clients::new(per_client(cap));
    let (close, _) = tokio::sync::watch::channel(Close::default());
    let mut shed_at: Option<Instant> = None;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Past its share while slots run short, closed at once: its slot goes
        // back to the others. With room to spare, a client behind which many
        // stand (an ingress controller's kept-alive pool) is not cut short.
        let short = slots.available_permits() < cap / 4;
        if short && shed_at.is_none_or(|at| at.elapsed() >= SHED_EVERY) {
            shed_at = Some(Instant::now());
            close.send_modify(|c| c.shed += 1);
        }
        let Some(share) = clients.take(peer.ip(), short) else {
            continue;
        };
        let tower = TowerToHyperService::new(app.clone());
        let served = Arc::new(AtomicBool::new(false));
        let serving = served.clone();
        let service = hyper::service::service_fn(move |request| {
            serving.store(true, Ordering::Relaxed);
            hyper::service::Service::call(&tower, request)
        });
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ);
        let connection =
            http.serve_connection(TokioIo::new(Stalling::new(stream, WRITE_STALL)), service);
        // Subscribed now: a shed asked before it was accepted is not its.
        let mut asked = close.subscribe();
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let mut closing = false;
            loop {
                tokio::select! {
                    // Its end is the client's or the timeouts' doing: nothing to report.
                    _ = connection.as_mut() => break,
                    changed = asked.changed(), if !closing => {
                        let stop = changed.is_err() || asked.borrow_and_update().stop;
                        if stop || served.load(Ordering::Relaxed) {
                            connection.as_mut().graceful_shutdown();
                            closing = true;
                        }
                    }
                }
            }
            drop(share);
            drop(slot);
        });
    }
    drop(listener);
    close.send_modify(|c| c.stop = true);
    let every = u32::try_from(cap).unwrap_or(u32::MAX);
    if tokio::time::timeout(SHUTDOWN_WAIT, slots.acquire_many(every))
        .await
        .is_err()
    {
        warn!(
            wait_s = SHUTDOWN_WAIT.as_secs(),
            "requests still under way at shutdown were cut short"
        );
    }
}

/// How many of `cap` connections one client address may hold once fewer than a
/// quarter are free: an eighth, eight at least. Clients behind one address (a
/// NAT, a port-forward, which arrives from loopback) share it; an IPv6 client is
/// its /64, which one host may hold whole.
pub fn per_client(cap: usize) -> usize {
    (cap / 8).max(8).min(cap)
}

/// The address a client's share is counted under.
fn client_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !(u128::MAX >> 64);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

/// The connections each client address holds.
#[derive(Clone)]
struct Clients {
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
    most: usize,
    /// When a refusal was last logged: an address that keeps trying is said once
    /// a minute, not once a connection.
    said: Arc<Mutex<Option<Instant>>>,
}

/// One connection of a client's share, given back when dropped.
struct Share {
    clients: Clients,
    ip: IpAddr,
}

impl Clients {
    fn new(most: usize) -> Clients {
        Clients {
            held: Arc::default(),
            most,
            said: Arc::default(),
        }
    }

    /// A connection of `ip`'s share, or `None` when it holds all of it and
    /// slots are `short`.
    fn take(&self, ip: IpAddr, short: bool) -> Option<Share> {
        let ip = client_of(ip);
        let mut held = self.held.lock().expect("clients lock");
        let count = held.entry(ip).or_default();
        if short && *count >= self.most {
            drop(held);
            let mut said = self.said.lock().expect("clients lock");
            if said.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                *said = Some(Instant::now());
                warn!(
                    client = %ip,
                    most = self.most,
                    "a client holds as many connections as one may: its next are closed until one ends"
                );
            }
            return None;
        }
        *count += 1;
        Some(Share {
            clients: self.clone(),
            ip,
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.clients.held.lock().expect("clients lock");
        if let Some(count) = held.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

/// The files hale keeps for its own use beside its clients' connections: the
/// store's, the log's, Alertmanager's, NATS's, the BMCs' and the webhooks'
/// (about 20 at rest).
const OWN_FILES: usize = 64;

/// The connections' cap under an open-file limit of `files`: half of what the
/// limit leaves after hale's own, eight at least, [`MAX_CONNECTIONS`] at most.
fn cap_for(files: usize) -> usize {
    (files.saturating_sub(OWN_FILES) / 2).clamp(8, MAX_CONNECTIONS)
}

/// The process's open-file limit raised to what it may be (as Go's runtime does):
/// a soft limit of 1,024, systemd's default, is soon met by connections beside
/// the store's, Alertmanager's and the BMCs' own. The connections' cap is
/// [`cap_for`] it; a limit that leaves hale fewer than 64 connections is said.
fn connection_cap() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given, nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return MAX_CONNECTIONS;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    let files = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
    let cap = cap_for(files);
    if cap < 64 {
        tracing::warn!(
            open_files = files,
            connections = cap,
            "the open-file limit is low: hale keeps {OWN_FILES} files for its own use and serves at most {cap} connections at once; raise it (systemd: LimitNOFILE, a container's ulimit)"
        );
    }
    cap
}

/// A stream whose writes fail once one has made no progress for its limit.
struct Stalling<S> {
    inner: S,
    limit: Duration,
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Stalling<S> {
    fn new(inner: S, limit: Duration) -> Self {
        Stalling {
            inner,
            limit,
            stalled: None,
        }
    }

    /// Pending: start (or go on with) the clock, failing once it runs out.
    fn pending<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<T>> {
        let limit = self.limit;
        let clock = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if clock.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client read nothing for 30s",
            )));
        }
        std::task::Poll::Pending
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Stalling<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Stalling<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match std::pin::Pin::new(&mut self.inner).poll_write(cx, buf) {
            std::task::Poll::Pending => self.pending(cx),
            done => {
                self.stalled = None;
                done
            }
        }
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            std::task::Poll::Pending => self.pending(cx),
            done => {
                self.stalled = None;
                done
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A connection's failure (reset before it was taken) is the client's; anything
/// else (out of file descriptors) is waited out a second, as hyper does.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    error!(error = %e, "cannot accept a connection; trying again in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// A request's body ends with an error [`BODY_READ`] after its handler began
/// reading it, if it has not ended by then: a client that declared more than
/// it sends holds its connection no longer.
async fn body_in_time(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    // The deadline is set by the first read: a handler that never reads the body
    // starts no clock.
    let frames = body.into_data_stream();
    let timed = futures::stream::unfold(
        Some((frames, None::<tokio::time::Instant>)),
        |state| async move {
            let (mut frames, deadline) = state?;
            let by = deadline.unwrap_or_else(|| tokio::time::Instant::now() + BODY_READ);
            match tokio::time::timeout_at(by, frames.next()).await {
                Ok(Some(frame)) => Some((frame, Some((frames, Some(by))))),
                Ok(None) => None,
                Err(_) => Some((Err(late()), None)),
            }
        },
    );
    next.run(Request::from_parts(parts, Body::from_stream(timed)))
        .await
}

/// The error a body that did not arrive in time ends with.
fn late() -> axum::Error {
    axum::Error::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "the request body did not arrive within {}s",
            BODY_READ.as_secs()
        ),
    ))
}

/// Whether reading a body failed because it did not arrive in time.
pub fn timed_out(e: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Whether a body's read failed on the connection's side (a chunk size that is
/// no number, a body cut off), not on a limit hale set.
pub fn unreadable(e: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<hyper::Error>().is_some() {
            return true;
        }
        cause = c.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hale's own files come first: the connections take half of what the
    /// open-file limit leaves after them (at 32, half the limit left hale's
    /// own store and poll without a descriptor), eight at least, 1,024 at most.
    #[test]
    fn connections_leave_hale_its_own_files() {
        for (files, cap) in [
            (16, 8),
            (32, 8),
            (128, 32),
            (256, 96),
            (1024, 480),
            (2112, 1024),
            (1 << 20, 1024),
        ] {
            assert_eq!(cap_for(files), cap, "{files}");
        }
    }

    #[test]
    fn a_client_is_its_address_an_ipv6_client_its_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(client_of(ip("10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(client_of(ip("::ffff:10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(client_of(ip("2001:db8:1:2:3:4:5:6")), ip("2001:db8:1:2::"));
        assert_eq!(
            client_of(ip("2001:db8:1:2:ffff::1")),
            client_of(ip("2001:db8:1:2::9"))
        );
        assert_ne!(
            client_of(ip("2001:db8:1:3::1")),
            client_of(ip("2001:db8:1:2::1"))
        );
        assert_eq!(per_client(1024), 128);
        assert_eq!(per_client(64), 8);
        assert_eq!(per_client(16), 8);
    }

    #[test]
    fn a_share_is_held_to_only_when_slots_run_short() {
        let clients = Clients::new(2);
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        let shares: Vec<Share> = (0..5).filter_map(|_| clients.take(ip, false)).collect();
        assert_eq!(shares.len(), 5, "room to spare: nothing refused");
        assert!(clients.take(ip, true).is_none(), "short: past the share");
        let other: IpAddr = "10.0.0.8".parse().unwrap();
        assert!(clients.take(other, true).is_some());
        drop(shares);
        assert!(clients.take(ip, true).is_some(), "given back, taken again");
    }

    /// Slots running short close the kept-alive connections idle between
    /// requests: a client whose idle pool holds its whole share (Alertmanager
    /// after a burst of deliveries) gives the slots back, and a new connection
    /// from its address is served within a moment, not once they time out.
    #[tokio::test]
    async fn idle_connections_are_closed_when_slots_run_short() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(serve_within(listener, app, std::future::pending(), 16));
        let request = b"GET / HTTP/1.1\r\nhost: hale\r\n\r\n";
        // One request on a new connection, left open: its answer's first line.
        let ask = |mut conn: tokio::net::TcpStream| async move {
            conn.write_all(request).await.ok()?;
            let mut answer = [0u8; 64];
            let n = conn.read(&mut answer).await.ok()?;
            (n > 0).then(|| (conn, String::from_utf8_lossy(&answer[..n]).to_string()))
        };
        // 12 of 16 slots held by one address, idle after one request each: the
        // next, taking its own, leaves fewer than a quarter free.
        let mut idle = Vec::new();
        for _ in 0..12 {
            let (conn, answer) = ask(tokio::net::TcpStream::connect(at).await.unwrap())
                .await
                .expect("room to spare: served");
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            idle.push(conn);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let conn = tokio::net::TcpStream::connect(at).await.unwrap();
            if let Some((_, answer)) = ask(conn).await {
                assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "a new connection from the address is still refused"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The idle ones were closed by the server: read to their end.
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), idle[0].read_to_end(&mut rest))
            .await
            .expect("closed, not left open")
            .ok();
    }
}
