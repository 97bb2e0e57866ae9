//! Opening connections to replicas, within the connect bound, racing the
//! next replica when one is slow.
//!
//! ## The race
//! A request that needs a new connection starts a connect to its replica.
//! If that connect is still pending after [`RACE_DELAY`], the replica is
//! marked stalled (other requests avoid it) and a connect to the next
//! replica starts beside it, within the request's tries. The first
//! connection wins. Connects that lose keep running in their own task until
//! their own bound: their outcome still feeds the replica's health, and a
//! connection that arrives late goes to the idle pool.
//!
//! The request itself never waits longer than the connect bound for a
//! connection: past it, the caller answers 502.
//!
//! ## One way to connect
//! Requests, connect checks and probes all open connections with [`open`]:
//! through the route's forward proxy when it has one, and with the TLS
//! handshake for an `https://` upstream, verified with the route's own TLS
//! settings. A check therefore passes only when a request could connect.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use super::conn::Conn;
use super::failure::ConnectFailure;
use super::forward_proxy::ForwardProxy;
use super::handshake::TlsFailure;
use super::health::{HttpCheckFailure, Observation};
use super::http1::Connection;
use super::{RACE_DELAY, Replica, ReplicaKey, Target, Tried, Upstream};
use crate::config::CheckKind;
use tokio_util::either::Either;

/// How long a check waits, after a TLS 1.3 handshake, for the replica to
/// refuse it: a round trip on any network a route's replicas share with
/// the node.
pub const SETTLE: Duration = Duration::from_millis(100);

/// An HTTP check connected but got no answer head in time.
const NO_ANSWER: ConnectFailure = ConnectFailure::HttpCheck(HttpCheckFailure::NoAnswer);

/// TLS settings of an `https://` upstream.
#[derive(Clone)]
pub struct TlsTarget {
    pub connector: tokio_rustls::TlsConnector,
    /// `None` for a name TLS cannot verify: every connect then fails.
    pub server_name: Option<rustls::pki_types::ServerName<'static>>,
    /// Tells these settings apart in the connection pool
    /// ([`crate::tls::profile`]).
    pub profile: u64,
}

impl TlsTarget {
    /// The same settings with session resumption off: a resumed session
    /// skips the server's certificate, so a check that resumed would never
    /// see a certificate replaced, or expired, since its first handshake.
    pub fn without_resumption(&self) -> TlsTarget {
        let mut config = (*self.connector.config()).as_ref().clone();
        config.resumption = rustls::client::Resumption::disabled();
        TlsTarget {
            connector: tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)),
            server_name: self.server_name.clone(),
            profile: self.profile,
        }
    }
}

impl std::fmt::Debug for TlsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTarget")
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// A connection ready for one request.
#[derive(Debug)]
pub struct Attempt {
    pub replica: Arc<Replica>,
    pub conn: Conn,
    /// Taken from the idle pool rather than opened for this request.
    pub reused: bool,
}

impl Upstream {
    /// A connection for the next attempt of a request: an idle pooled one to
    /// the chosen replica, or a new one (racing as described above).
    pub async fn connection(
        self: &Arc<Self>,
        tried: &mut Tried,
    ) -> Result<Attempt, ConnectFailure> {
        let first = self
            .next_untried(tried)
            .ok_or_else(|| match self.unresolved() {
                Some(why) if tried.is_empty() => ConnectFailure::Unresolved(why),
                _ => ConnectFailure::NoReplica,
            })?;
        if let Some(conn) = self.pool.checkout(&first) {
            return Ok(Attempt {
                replica: first,
                conn,
                reused: true,
            });
        }
        // HTTP/2: a connect to this replica under way serves this request
        // too, when it has room. A connect slower than the race delay is
        // not waited for: the request races as any other.
        if first.key.protocol != crate::config::Protocol::Http1
            && let Some(conn) = self.pool.after_connect(&first.key, RACE_DELAY).await
        {
            return Ok(Attempt {
                replica: first,
                conn,
                reused: true,
            });
        }
        // Boxed: only new connections pay for the race's state.
        Box::pin(self.race(first, tried)).await
    }

    /// A new connection to one given replica, without racing: for a request
    /// whose pooled connection the upstream had closed.
    pub async fn fresh_connection(
        self: &Arc<Self>,
        replica: Arc<Replica>,
    ) -> Result<Attempt, ConnectFailure> {
        let (replica, result) = Box::pin(self.spawn_connect(replica)).await;
        result.map(|conn| Attempt {
            replica,
            conn,
            reused: false,
        })
    }

    async fn race(
        self: &Arc<Self>,
        first: Arc<Replica>,
        tried: &mut Tried,
    ) -> Result<Attempt, ConnectFailure> {
        let deadline = Instant::now() + self.pool.bounds.connect;
        let mut pending = FuturesUnordered::new();
        pending.push(self.spawn_connect(first));
        let race = sleep(RACE_DELAY);
        tokio::pin!(race);
        let mut racing = true;
        loop {
            tokio::select! {
                Some((replica, result)) = pending.next() => match result {
                    Ok(conn) => return Ok(Attempt { replica, conn, reused: false }),
                    Err(failure) => match self.next_untried(tried) {
                        Some(next) => {
                            pending.push(self.spawn_connect(next));
                            race.as_mut().reset(Instant::now() + RACE_DELAY);
                        }
                        None if pending.is_empty() => return Err(failure),
                        None => racing = false,
                    },
                },
                () = &mut race, if racing => match self.next_untried(tried) {
                    Some(next) => {
                        pending.push(self.spawn_connect(next));
                        race.as_mut().reset(Instant::now() + RACE_DELAY);
                    }
                    None => racing = false,
                },
                () = sleep_until(deadline) => return Err(ConnectFailure::TimedOut),
            }
        }
    }

    /// One connect to `replica` made exactly as requests make it, within
    /// `bound`, and dropped: what a connect check or a probe learns. Over
    /// TLS 1.3 it then waits up to [`SETTLE`] (within `bound`) for the
    /// replica to refuse the handshake it has just accepted (a client
    /// certificate it requires and did not get), which requests would meet
    /// on their first read.
    pub async fn try_connect(
        &self,
        replica: &Replica,
        bound: Duration,
    ) -> Result<(), ConnectFailure> {
        let deadline = Instant::now() + bound;
        let open = async {
            let (conn, not_after) =
                open_seen(&replica.key, self.check_tls.as_ref(), self.via.as_ref()).await?;
            if let Some(not_after) = not_after {
                self.certificate_seen(replica, not_after);
            }
            Ok(conn)
        };
        match timeout(bound, open).await {
            // The HTTP/2 handshake ends with a PING answered: a refusal
            // after the TLS handshake came before it.
            Ok(Ok(Conn::H2(mut conn))) => {
                crate::resources::LOCAL.ok();
                let scheme = if replica.key.tls == 0 {
                    "http"
                } else {
                    "https"
                };
                let authority = replica.key.target.authority();
                let left = deadline.saturating_duration_since(Instant::now());
                match &self.check {
                    CheckKind::Connect => Ok(()),
                    CheckKind::Grpc { service } => {
                        let check =
                            super::http2::health_check(&mut conn, scheme, &authority, service);
                        timeout(left, check)
                            .await
                            .unwrap_or(Err(ConnectFailure::TimedOut))
                    }
                    CheckKind::Http(http) => {
                        let host = http.host.as_deref().unwrap_or(&authority);
                        let check = super::http_check::http2(&mut conn, scheme, http, host);
                        timeout(left, check).await.unwrap_or(Err(NO_ANSWER))
                    }
                }
            }
            Ok(Ok(Conn::H1(mut conn))) => {
                crate::resources::LOCAL.ok();
                // An answer proves the handshake was accepted: no settling.
                if let CheckKind::Http(http) = &self.check {
                    let authority = replica.key.target.authority();
                    let host = http.host.as_deref().unwrap_or(&authority);
                    let left = deadline.saturating_duration_since(Instant::now());
                    let check = super::http_check::http1(&mut conn, http, host);
                    return timeout(left, check).await.unwrap_or(Err(NO_ANSWER));
                }
                let settle = SETTLE.min(deadline.saturating_duration_since(Instant::now()));
                match conn.refused_after_handshake(settle).await {
                    None => Ok(()),
                    Some(e) => Err(ConnectFailure::Tls {
                        failure: TlsFailure::of(&e),
                        detail: format!("refused after the handshake: {e}"),
                    }),
                }
            }
            Ok(Err(failure)) => Err(failure),
            Err(_) => Err(ConnectFailure::TimedOut),
        }
    }

    /// Connects to a replica in a task of its own, so that the outcome is
    /// recorded even when the request that asked has moved on.
    fn spawn_connect(
        self: &Arc<Self>,
        replica: Arc<Replica>,
    ) -> impl Future<Output = (Arc<Replica>, Result<Conn, ConnectFailure>)> + use<> {
        let (tx, rx) = oneshot::channel();
        let upstream = Arc::clone(self);
        let task_replica = Arc::clone(&replica);
        tokio::spawn(async move {
            let replica = task_replica;
            // Requests to an HTTP/2 replica wait for this connect rather
            // than open their own, until it ends.
            let _connecting = match replica.key.protocol {
                crate::config::Protocol::Http1 => None,
                _ => upstream.pool.begin_connect(&replica.key),
            };
            let bound = upstream.pool.bounds.connect;
            let open = open(&replica.key, upstream.tls.as_ref(), upstream.via.as_ref());
            tokio::pin!(open);
            let result = match timeout(RACE_DELAY.min(bound), &mut open).await {
                Ok(result) => result,
                Err(_) => {
                    upstream.observe(&replica, Observation::ConnectOverdue);
                    let rest = bound.saturating_sub(RACE_DELAY);
                    timeout(rest, open)
                        .await
                        .unwrap_or(Err(ConnectFailure::TimedOut))
                }
            };
            match result {
                Ok(conn) => {
                    crate::resources::LOCAL.ok();
                    upstream.observe(&replica, Observation::ConnectOk);
                    // An HTTP/2 connection is shared from the start, the
                    // asking request's stream reserved before others see it.
                    let conn = match conn {
                        Conn::H2(mut shared) => {
                            let mine = shared.reserve();
                            upstream.pool.share(&replica.key, shared.clone());
                            Conn::H2(mine.unwrap_or(shared))
                        }
                        conn => conn,
                    };
                    if let Err(Ok(conn)) = tx.send(Ok(conn)) {
                        upstream.pool.put(&replica, conn);
                    }
                }
                Err(failure) => {
                    if failure.blames_replica() {
                        upstream.connect_failed(&replica, &failure, false);
                    }
                    let _ = tx.send(Err(failure));
                }
            }
        });
        async move {
            let result = rx
                .await
                .unwrap_or_else(|_| Err(ConnectFailure::Failed("connect task ended".into())));
            (replica, result)
        }
    }
}

/// Opens a connection to a replica: TCP, to the forward proxy `via` when
/// given (with a `CONNECT` tunnel for TLS and HTTP/2), then the TLS
/// handshake when asked, then the HTTP/2 handshake when the route speaks
/// it (or, with `auto`, when ALPN picked it). Unbounded: callers bound it,
/// all steps together.
pub async fn open(
    key: &ReplicaKey,
    tls: Option<&TlsTarget>,
    via: Option<&ForwardProxy>,
) -> Result<Conn, ConnectFailure> {
    open_seen(key, tls, via).await.map(|(conn, _)| conn)
}

/// [`open`], and when the replica's certificate expires (Unix seconds),
/// for a TLS replica whose certificate the node could read.
async fn open_seen(
    key: &ReplicaKey,
    tls: Option<&TlsTarget>,
    via: Option<&ForwardProxy>,
) -> Result<(Conn, Option<i64>), ConnectFailure> {
    use crate::config::Protocol;
    let conn = match open_stream(key, tls, via).await {
        Ok(conn) => conn,
        // A replica that offers no protocol the route asked for refuses
        // the handshake itself.
        Err(ConnectFailure::Tls { detail, .. })
            if key.protocol == Protocol::H2 && detail.contains("NoApplicationProtocol") =>
        {
            return Err(ConnectFailure::NoHttp2(
                "it offers no h2 in the TLS handshake (ALPN)".into(),
            ));
        }
        Err(failure) => return Err(failure),
    };
    let h2 = match key.protocol {
        Protocol::Http1 => false,
        Protocol::H2c | Protocol::Auto if tls.is_none() => key.protocol == Protocol::H2c,
        Protocol::H2c => true,
        Protocol::H2 if !conn.alpn_h2() => {
            return Err(ConnectFailure::NoHttp2(
                "it did not agree to h2 in the TLS handshake (ALPN)".into(),
            ));
        }
        Protocol::H2 | Protocol::Auto => conn.alpn_h2(),
    };
    let not_after = conn.peer_not_after();
    if h2 {
        // Boxed, as the TLS handshake and the tunnel below: a connect
        // check of every replica runs at once, each holding only what a
        // plain TCP connect needs.
        return Box::pin(super::http2::handshake(conn.into_io()))
            .await
            .map(|conn| (Conn::H2(conn), not_after));
    }
    Ok((Conn::H1(conn), not_after))
}

/// The stream of [`open`], before any HTTP.
async fn open_stream(
    key: &ReplicaKey,
    tls: Option<&TlsTarget>,
    via: Option<&ForwardProxy>,
) -> Result<Connection, ConnectFailure> {
    let tunnel = tls.is_some() || key.protocol == crate::config::Protocol::H2c;
    let tcp = match via {
        None => tcp_connect(&key.target).await?,
        // TLS and HTTP/2 go through a tunnel; plain HTTP/1.1 is asked of
        // the proxy itself, in absolute form.
        Some(proxy) => {
            let tcp = tcp_connect(&proxy.target).await?;
            if tunnel {
                Box::pin(proxy.tunnel(tcp, &key.target)).await?
            } else {
                tcp
            }
        }
    };
    let io = match tls {
        Some(tls) => {
            let name = tls.server_name.clone().ok_or_else(|| ConnectFailure::Tls {
                failure: TlsFailure::InvalidName,
                detail: TlsFailure::InvalidName.to_string(),
            })?;
            let stream = Box::pin(tls.connector.connect(name, tcp))
                .await
                .map_err(|e| ConnectFailure::Tls {
                    failure: TlsFailure::of(&e),
                    detail: e.to_string(),
                })?;
            Either::Right(Box::new(stream))
        }
        None => Either::Left(tcp),
    };
    Ok(Connection::new(io))
}

/// A plain TCP connect to a target, trying each resolved address in turn.
pub async fn tcp_connect(target: &Target) -> Result<TcpStream, ConnectFailure> {
    match target {
        Target::Addr(addr) => connect_addr(*addr).await,
        Target::Named { host, port } => {
            let addrs = tokio::net::lookup_host((&**host, *port))
                .await
                .map_err(|e| ConnectFailure::Unresolvable(format!("resolving {host}: {e}")))?;
            let mut last = ConnectFailure::Unresolvable(format!("{host} resolved to no address"));
            for addr in addrs {
                match connect_addr(addr).await {
                    Ok(stream) => return Ok(stream),
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
    }
}

async fn connect_addr(addr: SocketAddr) -> Result<TcpStream, ConnectFailure> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| ConnectFailure::from_io(&e))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}
