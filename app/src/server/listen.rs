//! Serving a listener so that no client can hold the node: a cap on open
//! connections in all and from one address (trusted proxies excepted), a
//! first request due soon after a connection opens and an idle limit after
//! that, whatever the client sent (nothing, one byte, an HTTP/2 preface),
//! hyper's header timer for HTTP/1 (slowloris), HTTP/2 stream and header
//! limits, the peer's address for every request (`ConnectInfo`), and a
//! shutdown that lets requests in flight finish.
//!
//! "Idle" is judged by the connection itself rather than by hyper's timers,
//! which start only once a protocol is chosen: a connection is idle when
//! no request is in flight and no byte moved either way for the limit.

use axum::extract::connect_info::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tollgate::config::Exposure;
use tower::ServiceExt;

/// How long a client may take to send its request head, and how long a new
/// connection may go without beginning a request.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long in-flight requests get to finish at shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection asked to close (idle, or the node stopping) gets
/// to do so before its socket is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// HTTP/2: streams at once on one connection, and the largest header list.
const H2_MAX_STREAMS: u32 = 64;
const H2_MAX_HEADER_LIST: u32 = 64 * 1024;

/// Serves `app` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: &Exposure,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let caps = Arc::new(Caps::new(limits));
    let exposure = Arc::new(limits.clone());
    let idle = limits.idle_connection;
    let (stopping, stop) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A slot first: at the cap, new connections wait in the kernel's
        // backlog, where they cost the node no descriptor.
        let slot = tokio::select! {
            slot = caps.total.clone().acquire_owned() => slot.expect("never closed"),
            _ = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, go on.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Some(held) = caps.admit(peer.ip(), slot) else {
            tracing::debug!(%peer, "too many connections from one address; closed");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let conn = Connection {
            stream: Watched {
                inner: stream,
                activity: activity.clone(),
            },
            peer,
            exposure: exposure.clone(),
            activity,
            idle,
        };
        tokio::spawn(conn.run(app.clone(), stop.clone(), held));
    }
    drop(listener);
    let _ = stopping.send(true);
    // Every connection gives its slot back when it ends.
    let everyone = u32::try_from(caps.max).unwrap_or(u32::MAX);
    if tokio::time::timeout(
        DRAIN_TIMEOUT + CLOSE_GRACE,
        caps.total.acquire_many(everyone),
    )
    .await
    .is_err()
    {
        tracing::warn!("connections still open at shutdown; stopping anyway");
    }
    Ok(())
}

/// Connections open now: in all, and per address.
struct Caps {
    total: Arc<Semaphore>,
    max: usize,
    per_address: usize,
    by_address: Mutex<HashMap<IpAddr, usize>>,
    trusted: Exposure,
}

impl Caps {
    fn new(limits: &Exposure) -> Caps {
        Caps {
            total: Arc::new(Semaphore::new(limits.max_connections)),
            max: limits.max_connections,
            per_address: limits.max_connections_per_address,
            by_address: Mutex::new(HashMap::new()),
            trusted: limits.clone(),
        }
    }

    /// Counts a connection from `ip`, unless that address already holds
    /// its share (a trusted proxy speaks for many and has none).
    fn admit(self: &Arc<Self>, ip: IpAddr, slot: OwnedSemaphorePermit) -> Option<Held> {
        let ip = ip.to_canonical();
        if self.trusted.is_trusted_proxy(ip) {
            return Some(Held {
                caps: self.clone(),
                ip: None,
                _slot: slot,
            });
        }
        let mut open = self.by_address.lock().expect("not poisoned");
        let n = open.entry(ip).or_insert(0);
        if *n >= self.per_address {
            return None;
        }
        *n += 1;
        Some(Held {
            caps: self.clone(),
            ip: Some(ip),
            _slot: slot,
        })
    }
}

/// One open connection's place under the caps, given back on drop.
struct Held {
    caps: Arc<Caps>,
    ip: Option<IpAddr>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(ip) = self.ip else { return };
        let mut open = self.caps.by_address.lock().expect("not poisoned");
        if let Some(n) = open.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&ip);
            }
        }
    }
}

/// What a connection did last: when a byte moved, how many requests are in
/// flight, how many began.
struct Activity {
    opened: Instant,
    /// Milliseconds after `opened` when a byte last moved.
    last_io_ms: AtomicU64,
    in_flight: AtomicUsize,
    requests: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            opened: Instant::now(),
            last_io_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = self.opened.elapsed().as_millis() as u64;
        self.last_io_ms.store(ms, Ordering::Relaxed);
    }

    /// When this connection is due to close if nothing more happens;
    /// `None` while a request is in flight.
    fn due(&self, idle: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        if self.requests.load(Ordering::Acquire) == 0 {
            // Whatever it trickles, a connection begins a request soon.
            return Some(self.opened + HEADER_READ_TIMEOUT.min(idle));
        }
        let last = Duration::from_millis(self.last_io_ms.load(Ordering::Relaxed));
        Some(self.opened + last + idle)
    }

    /// Resolves once the connection has been idle past its limit.
    async fn idle_past(&self, idle: Duration) {
        loop {
            match self.due(idle) {
                Some(at) if Instant::now() >= at => return,
                Some(at) => tokio::time::sleep_until(at).await,
                // A request's own timeout bounds it; look again later.
                None => tokio::time::sleep(idle).await,
            }
        }
    }
}

/// A request in flight on a connection, counted until its answer is ready
/// (the body then streams, which counts as activity by itself).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn begin(activity: &Arc<Activity>) -> InFlight {
        activity.requests.fetch_add(1, Ordering::AcqRel);
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The client a request is from: the peer, or, behind a trusted proxy,
/// what the proxy says (`TOLLGATE_TRUSTED_PROXIES`).
#[derive(Clone, Copy, Debug)]
pub struct ClientAddress(pub IpAddr);

struct Connection {
    stream: Watched<tokio::net::TcpStream>,
    peer: SocketAddr,
    exposure: Arc<Exposure>,
    activity: Arc<Activity>,
    idle: Duration,
}

impl Connection {
    async fn run(self, app: Router, mut stop: watch::Receiver<bool>, held: Held) {
        let Connection {
            stream,
            peer,
            exposure,
            activity,
            idle,
        } = self;
        let counted = activity.clone();
        let service = app
            .map_request(move |req: axum::http::Request<hyper::body::Incoming>| {
                let mut req = req.map(axum::body::Body::new);
                let forwarded = req
                    .headers()
                    .get("x-forwarded-for")
                    .and_then(|v| v.to_str().ok());
                let client = exposure.client_address(peer.ip(), forwarded);
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                req.extensions_mut().insert(ClientAddress(client));
                req
            })
            .map_future(move |answer| {
                let in_flight = InFlight::begin(&counted);
                async move {
                    let answer = answer.await;
                    drop(in_flight);
                    answer
                }
            });
        let builder = builder();
        let conn = builder.serve_connection_with_upgrades(
            TokioIo::new(stream),
            TowerToHyperService::new(service),
        );
        let mut conn = std::pin::pin!(conn);
        let ended = tokio::select! {
            result = conn.as_mut() => Some(result),
            _ = activity.idle_past(idle) => None,
            _ = stop.wait_for(|stopping| *stopping) => None,
        };
        match ended {
            Some(Err(e)) => tracing::debug!(error = %e, "a connection ended with an error"),
            Some(Ok(())) => {}
            None => {
                // Idle or stopping: let what is in flight finish, briefly
                // for an idle one, then drop the socket whatever it does.
                conn.as_mut().graceful_shutdown();
                let grace = if activity.in_flight.load(Ordering::Acquire) > 0 {
                    DRAIN_TIMEOUT
                } else {
                    CLOSE_GRACE
                };
                let _ = tokio::time::timeout(grace, conn.as_mut()).await;
            }
        }
        drop(held);
    }
}

fn builder() -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    // No keep-alive pings from our side: the idle limit closes what is
    // quiet, and a ping would count as activity.
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(H2_MAX_HEADER_LIST);
    builder
}

/// A socket that notes when a byte moves.
struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Raises this process's open-file limit to what the system allows, so
/// the connection cap, not the descriptor table, is what bounds clients.
pub fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %e, "could not raise the open-file limit");
        }
    }
}
