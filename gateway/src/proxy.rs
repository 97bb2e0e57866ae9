//! The proxy: from a client request to the route, to an upstream replica,
//! and back.
//!
//! ## What a request reads
//! One snapshot of the route table (swapped whole by a reload; a request
//! keeps the route it started with), its route's replica states (atomics),
//! and one idle connection from the pool. It takes no lock across an
//! `.await`.
//!
//! ## Answers the gateway writes itself
//! No route → 404 (nothing is forwarded: never an open proxy). `CONNECT` →
//! 405. A request without a usable host → 400. A plain-HTTP request to an
//! `https_only` route → 308 to HTTPS ([`scheme`]). Upstream failures are mapped
//! to 502/504 in [`error`].
//!
//! The client protocols live in `server`: each parses its
//! requests, asks for the [`Proxy::route`], calls [`forward`] and writes
//! the [`Answer`] out its own way.

pub mod breaker;
pub mod error;
pub mod forward;
pub mod grpc;
pub mod headers;
pub mod incoming;
pub mod limits;
pub mod plan;
pub mod redirect;
pub mod rewrite;
pub mod rules;
pub mod scheme;

use std::sync::Arc;

use arc_swap::ArcSwap;
use http::header::HeaderValue;
use picket_proto::TableGeneration;
use tokio::sync::watch;

pub use crate::body::{BodyError, IncomingBody, RequestBody};
use crate::config::declared::Refused;
use crate::config::{RouteConfig, UpstreamConfig};
use crate::metrics::{Metrics, RouteMetrics};
use crate::router::{Owner, PathRule, RouteTable};
use crate::upstream::{Pools, ProxyEnv, TlsTarget, Upstream};
pub use breaker::{Breaker, BreakerSnapshot, TransitionSnapshot};
pub use error::{Page, ProxyError};
pub use forward::{Answer, AnswerBody, forward};
pub use headers::Client;
pub use incoming::{ClientRequest, Fields};
pub use rules::RequestId;
pub use scheme::Scheme;

/// A route as the data path sees it.
#[derive(Debug)]
pub struct Route {
    pub config: RouteConfig,
    pub upstream: Arc<Upstream>,
    pub metrics: RouteMetrics,
    /// The `Host` sent to an external upstream; `None` keeps the client's.
    pub upstream_host: Option<HeaderValue>,
    /// `http://host:port`, naming an `http://` upstream in the absolute
    /// form of each request, when its connections go to `HTTP_PROXY`.
    pub proxy_origin: Option<String>,
    /// This node's circuit breaker of the route, when enabled.
    pub breaker: Option<Arc<Breaker>>,
    /// `strip_prefix` and `add_prefix`, when it has either.
    pub rewrite: Option<rewrite::Rewrite>,
    /// This node's rate limit of the route, when it has one.
    pub rate: Option<Arc<limits::RateLimit>>,
}

/// The route table of a node.
pub type Table = RouteTable<Arc<Route>>;

/// What building a route needs besides its configuration.
#[derive(Clone)]
pub struct RouteContext {
    /// The node's name, for logs.
    pub node: Arc<str>,
    pub pools: Arc<Pools>,
    pub metrics: Arc<Metrics>,
    /// Woken by every change that can move a verdict.
    pub changes: Arc<crate::changes::Changes>,
    pub tls: Arc<rustls::ClientConfig>,
    /// The forward proxies of external hosts, as read at start.
    pub proxy_env: Option<Arc<ProxyEnv>>,
    /// Where service routes get their replicas.
    pub catalog: Arc<crate::targets::Catalog>,
}

/// The TLS of a route with its own `tls`: its roots and client identity,
/// and its `server_name` (an `https://` host's name when it sets none). A
/// configuration rustls cannot use leaves the route without a name to
/// verify: every connect fails, none goes out in clear.
fn upstream_tls(
    config: &RouteConfig,
    own: &crate::config::UpstreamTls,
    external: Option<TlsTarget>,
    ctx: &RouteContext,
) -> TlsTarget {
    let server_name = match &own.server_name {
        Some(name) => rustls::pki_types::ServerName::try_from(name.clone()).ok(),
        None => external.and_then(|t| t.server_name),
    };
    let profile = crate::tls::profile(Some(own));
    match crate::tls::upstream_config(own) {
        Ok(client) => TlsTarget {
            connector: tokio_rustls::TlsConnector::from(client),
            server_name,
            profile,
        },
        Err(error) => {
            tracing::error!(route = config.name, %error, "the route's TLS settings are unusable; every connect to it fails");
            TlsTarget {
                connector: tokio_rustls::TlsConnector::from(Arc::clone(&ctx.tls)),
                server_name: None,
                profile,
            }
        }
    }
}

impl Route {
    pub fn new(config: RouteConfig, ctx: &RouteContext) -> Route {
        let (mut tls, mut via, mut upstream_host, mut proxy_origin) = (None, None, None, None);
        if let UpstreamConfig::External(ext) = &config.upstream {
            let default_port = if ext.tls { 443 } else { 80 };
            let host = if ext.host.contains(':') {
                format!("[{}]", ext.host)
            } else {
                ext.host.clone()
            };
            let authority = if ext.port == default_port {
                host
            } else {
                format!("{host}:{}", ext.port)
            };
            tls = ext.tls.then(|| TlsTarget {
                connector: tokio_rustls::TlsConnector::from(Arc::clone(&ctx.tls)),
                // Validated with the configuration; a name rustls refuses
                // makes every connect fail rather than go out in clear.
                server_name: rustls::pki_types::ServerName::try_from(ext.host.clone()).ok(),
                profile: crate::tls::profile(None),
            });
            via = ctx
                .proxy_env
                .as_ref()
                .and_then(|env| env.for_host(&ext.host, ext.tls))
                .cloned();
            if let Some(proxy) = &via {
                tracing::debug!(route = config.name, upstream = %ext, proxy = ?proxy.target, "through a forward proxy");
            }
            proxy_origin = (via.is_some() && !ext.tls).then(|| format!("http://{authority}"));
            upstream_host = HeaderValue::from_str(&authority).ok();
        }
        if let Some(own) = &config.tls {
            tls = Some(upstream_tls(&config, own, tls.take(), ctx));
        }
        // HTTP/2 over TLS is asked for in the handshake.
        if config.protocol != crate::config::Protocol::Http1
            && let Some(target) = &mut tls
        {
            let mut client = (*target.connector.config()).as_ref().clone();
            client.alpn_protocols = config.protocol.alpn();
            target.connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        }
        let pool = ctx.pools.get(config.bounds());
        let upstream = Upstream::new(
            &config,
            pool,
            tls,
            via,
            &ctx.metrics,
            Arc::clone(&ctx.changes),
        );
        if let UpstreamConfig::Service { name, port } = &config.upstream {
            ctx.catalog.attach(&upstream, name, port);
        }
        Route {
            metrics: ctx.metrics.route(&config.name),
            rewrite: rewrite::Rewrite::new(&config),
            rate: config
                .rate
                .map(|rate| Arc::new(limits::RateLimit::new(rate))),
            breaker: new_breaker(&config, ctx),
            config,
            upstream,
            upstream_host,
            proxy_origin,
        }
    }

    /// This route under `config`, which reaches the same replicas the same
    /// way ([`RouteConfig::same_upstream`]): the same upstream (replica
    /// health, ejections, pooled connections), the same circuit when the
    /// breaker's settings are the same, the same buckets when the rate's
    /// are. A reload that changes a node-wide field, or how the route
    /// treats requests, resets none of it.
    fn renewed(&self, config: RouteConfig, ctx: &RouteContext) -> Route {
        self.upstream.set_underscores(config.underscores_in_headers);
        let breaker = match (&self.breaker, config.breaker.active()) {
            (Some(breaker), Some(settings)) if breaker.settings() == settings => {
                Some(Arc::clone(breaker))
            }
            _ => new_breaker(&config, ctx),
        };
        let rate = match (&self.rate, config.rate) {
            (Some(rate), Some(settings)) if rate.settings == settings => Some(Arc::clone(rate)),
            (_, settings) => settings.map(|rate| Arc::new(limits::RateLimit::new(rate))),
        };
        Route {
            metrics: ctx.metrics.route(&config.name),
            rewrite: rewrite::Rewrite::new(&config),
            rate,
            breaker,
            upstream: Arc::clone(&self.upstream),
            upstream_host: self.upstream_host.clone(),
            proxy_origin: self.proxy_origin.clone(),
            config,
        }
    }
}

/// A new breaker for the route, when it has one.
fn new_breaker(config: &RouteConfig, ctx: &RouteContext) -> Option<Arc<Breaker>> {
    let settings = config.breaker.active()?;
    Some(Arc::new(Breaker::new(
        &config.name,
        &ctx.node,
        settings,
        ctx.metrics.breaker(&config.name),
        Arc::clone(&ctx.changes),
    )))
}

/// Builds a route table, keeping the route objects (and with them replica
/// health, pooled connections, circuits and rate buckets) of routes whose
/// configuration is the same as in `previous`, and the state of those
/// that still reach the same replicas the same way ([`Route::renewed`]).
pub fn build_table(routes: &[RouteConfig], previous: Option<&Table>, ctx: &RouteContext) -> Table {
    let reuse = |config: &RouteConfig| {
        let previous = previous?
            .values()
            .find(|r| r.config.name == config.name && r.config.same_upstream(config))?;
        Some(match previous.config == *config {
            true => Arc::clone(previous),
            false => Arc::new(previous.renewed(config.clone(), ctx)),
        })
    };
    RouteTable::with_owners(routes.iter().map(|config| {
        let route = reuse(config).unwrap_or_else(|| Arc::new(Route::new(config.clone(), ctx)));
        let path = if config.exact_path {
            PathRule::Exact(config.path_prefix.clone())
        } else {
            PathRule::Prefix(config.path_prefix.clone())
        };
        let owner = match config.declared_by {
            None => Owner::File,
            Some(_) => Owner::Runtime,
        };
        (config.host.clone(), path, owner, route)
    }))
}

/// The generation of a route table: a digest of every route it serves, as
/// configured, in name order, and how many.
pub fn generation(table: &Table, now_unix_ms: u64) -> TableGeneration {
    let mut routes: Vec<&RouteConfig> = table.values().map(|r| &r.config).collect();
    routes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut text = String::new();
    for route in &routes {
        crate::config::render_route(&mut text, route);
    }
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
    TableGeneration {
        digest: digest.as_ref()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        routes: u32::try_from(routes.len()).unwrap_or(u32::MAX),
        since_unix_ms: now_unix_ms,
    }
}

/// The proxy of one node.
pub struct Proxy {
    table: ArcSwap<Table>,
    /// The routes the runtime declared that the table does not serve.
    refused: ArcSwap<Vec<Refused>>,
    /// The generation of the table, told when its digest changes.
    generation: watch::Sender<Option<TableGeneration>>,
    metrics: Arc<Metrics>,
    /// `None` when the access log is off.
    access_log: Option<Arc<crate::access::AccessLog>>,
    /// ACME HTTP-01 challenges, answered before any route.
    challenges: Arc<crate::challenges::Challenges>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("routes", &self.table.load().len())
            .finish()
    }
}

impl Proxy {
    pub fn new(table: Table, metrics: Arc<Metrics>) -> Proxy {
        let first = generation(&table, crate::clock::now_unix_ms());
        Proxy {
            table: ArcSwap::from_pointee(table),
            refused: ArcSwap::default(),
            generation: watch::channel(Some(first)).0,
            metrics,
            access_log: None,
            challenges: Arc::default(),
        }
    }

    /// The proxy, answering the ACME HTTP-01 challenges of `challenges`
    /// before any route, on every listener.
    pub fn with_challenges(self, challenges: Arc<crate::challenges::Challenges>) -> Proxy {
        Proxy { challenges, ..self }
    }

    /// The proxy, writing each request to `log`.
    pub fn with_access_log(self, log: Option<Arc<crate::access::AccessLog>>) -> Proxy {
        Proxy {
            access_log: log,
            ..self
        }
    }

    pub fn access_log(&self) -> Option<&crate::access::AccessLog> {
        self.access_log.as_deref()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The table requests read now.
    pub fn table(&self) -> Arc<Table> {
        self.table.load_full()
    }

    /// Swaps the route table; requests in flight finish on the old one.
    pub fn swap(&self, table: Table) {
        self.install(table, Vec::new());
    }

    /// Swaps the route table and what was refused beside it; requests in
    /// flight finish on the old table. A table that routes as the last
    /// one did keeps its generation.
    pub fn install(&self, table: Table, refused: Vec<Refused>) {
        let next = generation(&table, crate::clock::now_unix_ms());
        self.table.store(Arc::new(table));
        self.refused.store(Arc::new(refused));
        self.generation.send_if_modified(|current| {
            if current.as_ref().map(|c| &c.digest) == Some(&next.digest) {
                return false;
            }
            *current = Some(next);
            true
        });
    }

    /// The routes the runtime declared that the table does not serve.
    pub fn refused(&self) -> Arc<Vec<Refused>> {
        self.refused.load_full()
    }

    /// The generation of the table, now and as it changes.
    pub fn generation(&self) -> watch::Receiver<Option<TableGeneration>> {
        self.generation.subscribe()
    }

    /// The route of a request from `client` by its host and the path of
    /// its (normalised) target, never its query; `NoRoute` (and a count)
    /// when none matches, `HttpsOnly` when the route is for HTTPS and the
    /// request came over plain HTTP.
    pub fn route(
        &self,
        host: Option<&[u8]>,
        target: &[u8],
        client: &Client,
    ) -> Result<Arc<Route>, ProxyError> {
        let table = self.table.load();
        let (path, _query) = crate::h1::target::split_query(target);
        if let Some(authorization) = self.challenges.http(path) {
            return Err(ProxyError::Challenge(authorization));
        }
        let raw_host = host;
        let host = host.and_then(|h| std::str::from_utf8(h).ok());
        let path = std::str::from_utf8(path)
            .map_err(|_| ProxyError::BadRequest("request target is not UTF-8"))?;
        match table.find(host, path) {
            Some(route) => match client.scheme() {
                Scheme::Http { https_port } if route.config.https_only => {
                    let location = raw_host
                        .and_then(|h| scheme::https_location(h, target, https_port.unwrap_or(443)));
                    Err(match location {
                        Some(location) => ProxyError::HttpsOnly(location),
                        None => ProxyError::BadRequest(
                            "this route is served over HTTPS only, and the request names no host",
                        ),
                    })
                }
                _ => Ok(Arc::clone(route)),
            },
            None => {
                self.metrics.unrouted();
                Err(ProxyError::NoRoute)
            }
        }
    }
}
