//! Forward proxies on the way to external hosts: `HTTP_PROXY` for
//! `http://` upstreams, `HTTPS_PROXY` for `https://` ones, and `NO_PROXY`
//! for the hosts reached directly.
//!
//! The variables are read once, at start. Whether a route goes through a
//! proxy is decided once, when the route is built ([`ProxyEnv::for_host`]),
//! and kept in its upstream: its requests, its connect checks and the
//! probes of its ejected replica all take that one path, so a check can
//! never pass on a path that requests do not take.
//!
//! ## How a connection goes through
//! - `http://` upstream behind `HTTP_PROXY`: the connection is to the
//!   proxy, and each request on it names its target in absolute form
//!   (`GET http://billing.example.net:8080/path HTTP/1.1`).
//! - `https://` upstream behind `HTTPS_PROXY`: the node asks the proxy for
//!   a tunnel (`CONNECT billing.example.net:443 HTTP/1.1`), waits for a 2xx,
//!   then does the TLS handshake with the host through the tunnel, verified
//!   exactly as without a proxy. Any other answer fails the connect
//!   ([`EjectReason::ProxyRefused`](super::health::EjectReason)).
//!
//! The connect bound covers it all: the connect to the proxy, `CONNECT`,
//! and the TLS handshake. Static replicas and runtime services never go
//! through a proxy.
//!
//! ## `NO_PROXY`
//! A comma-separated list: `*` (every host), a name (`localhost`, which also
//! matches its subdomains), `.internal` (any name ending so), or an IP
//! address (matched as written). Case does not matter; ports and CIDR
//! ranges are not understood.

use std::fmt;

use base64::Engine as _;
use bytes::BytesMut;
use http::Method;
use http::header::HeaderValue;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::Target;
use super::failure::ConnectFailure;
use crate::h1;

/// The longest answer to `CONNECT` the node reads.
const MAX_TUNNEL_ANSWER: usize = 16 * 1024;

/// The forward proxies of a node, from its environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    /// `HTTP_PROXY`: for `http://` upstreams.
    pub http: Option<ForwardProxy>,
    /// `HTTPS_PROXY`: for `https://` upstreams, by `CONNECT`.
    pub https: Option<ForwardProxy>,
    /// `NO_PROXY`: hosts (or `.suffixes`) reached directly; `*` for all.
    pub no_proxy: Vec<String>,
}

impl ProxyEnv {
    /// Reads the process environment.
    pub fn from_env() -> Option<ProxyEnv> {
        ProxyEnv::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY` (or their lower-case
    /// spellings) through `var`: the process environment, or a test's own
    /// table. `None` when no proxy is set. A proxy the node cannot use (a
    /// scheme other than `http://`) is ignored, and said once.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<ProxyEnv> {
        let read = |names: [&str; 2]| {
            names
                .iter()
                .find_map(|name| var(name))
                .filter(|v| !v.trim().is_empty())
        };
        let proxy = |names: [&str; 2]| {
            let value = read(names)?;
            match ForwardProxy::parse(&value) {
                Ok(proxy) => Some(proxy),
                Err(why) => {
                    tracing::warn!(variable = names[0], why, "forward proxy ignored");
                    None
                }
            }
        };
        let env = ProxyEnv {
            http: proxy(["HTTP_PROXY", "http_proxy"]),
            https: proxy(["HTTPS_PROXY", "https_proxy"]),
            no_proxy: no_proxy_list(read(["NO_PROXY", "no_proxy"]).as_deref()),
        };
        (env.http.is_some() || env.https.is_some()).then_some(env)
    }

    /// The proxy that connections to the external host `host` go through:
    /// `HTTPS_PROXY` for TLS, `HTTP_PROXY` otherwise, none when `NO_PROXY`
    /// names the host.
    pub fn for_host(&self, host: &str, tls: bool) -> Option<&ForwardProxy> {
        let proxy = if tls { &self.https } else { &self.http };
        proxy.as_ref().filter(|_| !self.bypasses(host))
    }

    /// Whether `NO_PROXY` names `host`.
    fn bypasses(&self, host: &str) -> bool {
        let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
        self.no_proxy.iter().any(|entry| {
            let name = entry.trim_start_matches('.');
            entry == "*" || host == name || host.ends_with(&format!(".{name}"))
        })
    }
}

fn no_proxy_list(text: Option<&str>) -> Vec<String> {
    text.unwrap_or("")
        .split(',')
        .map(|h| h.trim().trim_matches(['[', ']']).to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect()
}

/// One forward proxy: where it listens, and the credentials its URL gave.
#[derive(Clone, PartialEq, Eq)]
pub struct ForwardProxy {
    pub target: Target,
    /// `Proxy-Authorization` (Basic) from `http://user:password@proxy`.
    authorization: Option<HeaderValue>,
}

impl fmt::Debug for ForwardProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForwardProxy")
            .field("target", &self.target)
            .field("authorization", &self.authorization.as_ref().map(|_| "***"))
            .finish()
    }
}

impl ForwardProxy {
    /// `http://proxy:3128`, `proxy:3128` or `http://user:pw@proxy` (port
    /// 80 when none is given).
    pub fn parse(url: &str) -> Result<ForwardProxy, String> {
        let url = url.trim();
        let rest = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some((scheme, _)) => {
                return Err(format!(
                    "{scheme}:// proxies are not supported, only http://"
                ));
            }
            None => url,
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let (host, port) = if let Some(bracketed) = hostport.strip_prefix('[') {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| format!("{url:?} has an unclosed '['"))?;
            (host, after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (hostport, None),
            }
        };
        let port = match port {
            Some(port) => port
                .parse()
                .map_err(|_| format!("{url:?} has no valid port"))?,
            None => 80,
        };
        if host.is_empty() {
            return Err(format!("{url:?} names no host"));
        }
        let authorization = userinfo
            .map(|userinfo| {
                let credentials = percent_decode(userinfo);
                let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
                HeaderValue::from_str(&format!("Basic {encoded}"))
                    .map(|mut value| {
                        value.set_sensitive(true);
                        value
                    })
                    .map_err(|_| format!("{url:?} has credentials that cannot be sent"))
            })
            .transpose()?;
        Ok(ForwardProxy {
            target: Target::Named {
                host: host.to_ascii_lowercase().into(),
                port,
            },
            authorization,
        })
    }

    /// The `Proxy-Authorization` every request to this proxy carries.
    pub fn authorization(&self) -> Option<&HeaderValue> {
        self.authorization.as_ref()
    }

    /// Asks the proxy, connected on `tcp`, for a tunnel to `to`; the stream
    /// is the tunnel once the proxy answered 2xx. Unbounded: callers bound
    /// it.
    pub(super) async fn tunnel(
        &self,
        mut tcp: TcpStream,
        to: &Target,
    ) -> Result<TcpStream, ConnectFailure> {
        let authority = to.authority();
        let mut ask = Vec::with_capacity(128);
        ask.extend_from_slice(b"CONNECT ");
        ask.extend_from_slice(authority.as_bytes());
        ask.extend_from_slice(b" HTTP/1.1\r\n");
        h1::write_header(&mut ask, b"host", authority.as_bytes());
        if let Some(authorization) = &self.authorization {
            h1::write_header(&mut ask, b"proxy-authorization", authorization.as_bytes());
        }
        ask.extend_from_slice(b"\r\n");
        tcp.write_all(&ask)
            .await
            .map_err(|e| ConnectFailure::from_io(&e))?;
        let mut buf = BytesMut::with_capacity(1024);
        loop {
            let read = tcp
                .read_buf(&mut buf)
                .await
                .map_err(|e| ConnectFailure::from_io(&e))?;
            if read == 0 {
                return Err(ConnectFailure::Failed(
                    "the forward proxy closed the connection instead of answering CONNECT".into(),
                ));
            }
            let answer = h1::response::parse_response(&mut buf, &Method::CONNECT)
                .map_err(|e| ConnectFailure::Failed(format!("the forward proxy's answer: {e}")))?;
            match answer {
                Some(head) if !head.status.is_success() => {
                    return Err(ConnectFailure::Tunnel {
                        status: head.status.as_u16(),
                    });
                }
                // Nothing may come before the upstream's own TLS bytes.
                Some(_) if !buf.is_empty() => {
                    return Err(ConnectFailure::Failed(
                        "the forward proxy sent bytes of its own into the tunnel".into(),
                    ));
                }
                Some(_) => return Ok(tcp),
                None if buf.len() > MAX_TUNNEL_ANSWER => {
                    return Err(ConnectFailure::Failed(
                        "the forward proxy's answer to CONNECT is too long".into(),
                    ));
                }
                None => {}
            }
        }
    }
}

/// `%40` → `@` and the like, as credentials in a URL are written.
fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn named(host: &str, port: u16) -> Target {
        Target::Named {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn proxy_settings() {
        let env = ProxyEnv::from_vars(vars(&[
            ("HTTP_PROXY", "http://user:p%40ss@Proxy.corp:3128/"),
            ("https_proxy", "proxy.corp:3129"),
            ("NO_PROXY", "localhost, .internal,10.0.0.1,[::1]"),
        ]))
        .unwrap();
        let http = env.http.as_ref().unwrap();
        assert_eq!(http.target, named("proxy.corp", 3128));
        // user:p@ss
        assert_eq!(
            http.authorization().unwrap().to_str().unwrap(),
            "Basic dXNlcjpwQHNz"
        );
        assert!(!format!("{http:?}").contains("dXNl"), "{http:?}");
        let https = env.https.as_ref().unwrap();
        assert_eq!(https.target, named("proxy.corp", 3129));
        assert!(https.authorization().is_none());

        assert_eq!(env.for_host("billing.example.net", false), Some(http));
        assert_eq!(env.for_host("billing.example.net", true), Some(https));
        for direct in [
            "db.internal",
            "localhost",
            "api.localhost",
            "10.0.0.1",
            "::1",
            "LOCALHOST",
        ] {
            assert_eq!(env.for_host(direct, true), None, "{direct}");
            assert_eq!(env.for_host(direct, false), None, "{direct}");
        }
        assert_eq!(env.for_host("10.0.0.10", false), Some(http));
        assert_eq!(env.for_host("notlocalhost", false), Some(http));
    }

    #[test]
    fn each_scheme_has_its_own_proxy() {
        let only_http = ProxyEnv::from_vars(vars(&[("http_proxy", "proxy:8080")])).unwrap();
        assert_eq!(only_http.for_host("h", true), None);
        assert_eq!(
            only_http.for_host("h", false).map(|p| &p.target),
            Some(&named("proxy", 8080))
        );
        let everything = ProxyEnv::from_vars(vars(&[
            ("HTTPS_PROXY", "http://[fd00::1]:3128"),
            ("NO_PROXY", "*"),
        ]))
        .unwrap();
        assert_eq!(
            everything.https.as_ref().map(|p| &p.target),
            Some(&named("fd00::1", 3128))
        );
        assert_eq!(everything.for_host("anything.org", true), None);
    }

    #[test]
    fn unusable_proxies_are_ignored() {
        assert_eq!(ProxyEnv::from_vars(vars(&[])), None);
        assert_eq!(ProxyEnv::from_vars(vars(&[("HTTP_PROXY", "")])), None);
        assert_eq!(
            ProxyEnv::from_vars(vars(&[("HTTPS_PROXY", "socks5://proxy:1080")])),
            None
        );
        assert!(ForwardProxy::parse("https://proxy:443").is_err());
        assert!(ForwardProxy::parse("http://proxy:x").is_err());
        assert!(ForwardProxy::parse("http://:3128").is_err());
        assert_eq!(
            ForwardProxy::parse("proxy").unwrap().target,
            named("proxy", 80)
        );
    }

    /// A proxy that answers `answer` to whatever it is asked, and hands
    /// back what it was asked.
    async fn proxy_answering(answer: &'static [u8]) -> (Target, tokio::task::JoinHandle<Vec<u8>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = Target::Addr(listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut asked = Vec::new();
            while !asked.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                if stream.read(&mut byte).await.unwrap() == 0 {
                    break;
                }
                asked.push(byte[0]);
            }
            stream.write_all(answer).await.unwrap();
            asked
        });
        (target, task)
    }

    #[tokio::test]
    async fn tunnels_through_connect() {
        let to = named("billing.example.net", 443);
        let cases: [(&[u8], Result<(), ConnectFailure>); 4] = [
            (b"HTTP/1.1 200 Connection established\r\n\r\n", Ok(())),
            (
                b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n",
                Err(ConnectFailure::Tunnel { status: 407 }),
            ),
            (
                b"HTTP/1.1 200 OK\r\n\r\nsurprise",
                Err(ConnectFailure::Failed(
                    "the forward proxy sent bytes of its own into the tunnel".into(),
                )),
            ),
            (
                b"",
                Err(ConnectFailure::Failed(
                    "the forward proxy closed the connection instead of answering CONNECT".into(),
                )),
            ),
        ];
        for (answer, expected) in cases {
            let (target, asked) = proxy_answering(answer).await;
            let proxy = ForwardProxy {
                target: target.clone(),
                authorization: ForwardProxy::parse("http://u:p@x").unwrap().authorization,
            };
            let tcp = super::super::tcp_connect(&target).await.unwrap();
            let result = proxy.tunnel(tcp, &to).await.map(|_| ());
            assert_eq!(result, expected, "{}", String::from_utf8_lossy(answer));
            let asked = String::from_utf8(asked.await.unwrap()).unwrap();
            assert_eq!(
                asked,
                "CONNECT billing.example.net:443 HTTP/1.1\r\nhost: billing.example.net:443\r\n\
                 proxy-authorization: Basic dTpw\r\n\r\n"
            );
        }
    }
}
