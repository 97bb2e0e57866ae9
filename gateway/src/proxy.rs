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
//! 405. A request without a usable host → 400. Upstream failures are mapped
//! to 502/504 in [`error`].

pub mod error;
mod forward;
pub mod headers;

use std::sync::Arc;

use arc_swap::ArcSwap;
use http::header::{HOST, HeaderValue};
use http::{Method, Request, Response, Version};
use hyper::body::Incoming;

use crate::body::GatewayBody;
use crate::config::{RouteConfig, UpstreamConfig};
use crate::metrics::{Metrics, RouteMetrics};
use crate::router::RouteTable;
use crate::upstream::{Pools, TlsTarget, Upstream};
pub use error::ProxyError;
pub use headers::Client;

/// A route as the data path sees it.
#[derive(Debug)]
pub struct Route {
    pub config: RouteConfig,
    pub upstream: Arc<Upstream>,
    pub metrics: RouteMetrics,
    /// The `Host` sent to an external upstream; `None` keeps the client's.
    pub upstream_host: Option<HeaderValue>,
}

/// The route table of a node.
pub type Table = RouteTable<Arc<Route>>;

/// What building a route needs besides its configuration.
#[derive(Clone)]
pub struct RouteContext {
    pub pools: Arc<Pools>,
    pub metrics: Arc<Metrics>,
    pub tls: Arc<rustls::ClientConfig>,
}

impl Route {
    pub fn new(config: RouteConfig, ctx: &RouteContext) -> Route {
        let (tls, upstream_host) = match &config.upstream {
            UpstreamConfig::External(ext) => {
                let default_port = if ext.tls { 443 } else { 80 };
                let authority = if ext.port == default_port {
                    ext.host.clone()
                } else {
                    format!("{}:{}", ext.host, ext.port)
                };
                let tls = ext.tls.then(|| TlsTarget {
                    connector: tokio_rustls::TlsConnector::from(Arc::clone(&ctx.tls)),
                    // Validated with the configuration; a name rustls refuses
                    // makes every connect fail rather than go out in clear.
                    server_name: rustls::pki_types::ServerName::try_from(ext.host.clone()).ok(),
                });
                (tls, HeaderValue::from_str(&authority).ok())
            }
            UpstreamConfig::Replicas(_) => (None, None),
        };
        let pool = ctx.pools.get(config.bounds());
        let upstream = Upstream::new(&config, pool, tls, &ctx.metrics);
        Route {
            metrics: ctx.metrics.route(&config.name),
            config,
            upstream,
            upstream_host,
        }
    }
}

/// Builds a route table, keeping the route objects (and with them replica
/// health and pooled connections) of routes whose configuration is the same
/// as in `previous`.
pub fn build_table(routes: &[RouteConfig], previous: Option<&Table>, ctx: &RouteContext) -> Table {
    let reuse = |config: &RouteConfig| {
        previous?
            .values()
            .find(|r| r.config == *config)
            .map(Arc::clone)
    };
    RouteTable::new(routes.iter().map(|config| {
        let route = reuse(config).unwrap_or_else(|| Arc::new(Route::new(config.clone(), ctx)));
        (config.host.clone(), config.path_prefix.clone(), route)
    }))
}

/// The proxy of one node.
pub struct Proxy {
    table: ArcSwap<Table>,
    metrics: Arc<Metrics>,
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
        Proxy {
            table: ArcSwap::from_pointee(table),
            metrics,
        }
    }

    /// The table requests read now.
    pub fn table(&self) -> Arc<Table> {
        self.table.load_full()
    }

    /// Swaps the route table; requests in flight finish on the old one.
    pub fn swap(&self, table: Table) {
        self.table.store(Arc::new(table));
    }

    /// Answers one client request. Never fails: every error is a response.
    pub async fn handle(
        &self,
        mut req: Request<Incoming>,
        client: &Client,
    ) -> Response<GatewayBody> {
        if req.method() == Method::CONNECT {
            return ProxyError::Connect.response();
        }
        let host = match request_host(&req) {
            Ok(host) => host,
            Err(e) => return e.response(),
        };
        let route = {
            let table = self.table.load();
            let name = host.as_ref().and_then(|h| h.to_str().ok());
            match table.find(name, req.uri().path()) {
                Some(route) => Arc::clone(route),
                None => {
                    self.metrics.unrouted();
                    return ProxyError::NoRoute.response();
                }
            }
        };
        if let Some(host) = &host
            && (!req.headers().contains_key(HOST) || req.uri().authority().is_some())
        {
            req.headers_mut().insert(HOST, host.clone());
        }
        let response = match forward::forward(&route, req, client).await {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(route = %route.config.name, %error, "request failed");
                error.response()
            }
        };
        route.metrics.count(response.status());
        response
    }
}

/// The host a request is for: the URI's authority (absolute form and
/// HTTP/2), else the `Host` header. HTTP/1.1 requires one.
fn request_host(req: &Request<Incoming>) -> Result<Option<HeaderValue>, ProxyError> {
    if let Some(authority) = req.uri().authority() {
        return HeaderValue::from_str(authority.as_str())
            .map(Some)
            .map_err(|_| ProxyError::BadRequest("invalid authority"));
    }
    match req.headers().get(HOST) {
        Some(host) if is_host(host.as_bytes()) => Ok(Some(host.clone())),
        Some(_) => Err(ProxyError::BadRequest("invalid Host header")),
        None if req.version() == Version::HTTP_11 => Err(ProxyError::BadRequest(
            "HTTP/1.1 request without Host header",
        )),
        None => Ok(None),
    }
}

/// Whether `bytes` is a valid `Host` value (RFC 9110 §7.2: `uri-host
/// [":" port]`): the characters of a name, an IPv4 address or a bracketed
/// IPv6 literal, and a port.
fn is_host(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:[]".contains(b))
}

#[cfg(test)]
mod tests {
    use super::is_host;

    #[test]
    fn host_values() {
        for good in ["api.example.com", "api.example.com:8080", "10.0.0.1:80", "[::1]:8080", "xn--bcher-kva.example"] {
            assert!(is_host(good.as_bytes()), "{good}");
        }
        for bad in ["", "bad host", "a/b", "a\tb", "a@b"] {
            assert!(!is_host(bad.as_bytes()), "{bad}");
        }
    }
}
