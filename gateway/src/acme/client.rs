//! The HTTP client the ACME protocol runs on: one HTTP/1.1 connection over
//! rustls (aws-lc-rs) per request, trusting `[acme] ca` or the Mozilla
//! roots, each request bounded in time and its answer in size.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Limited};
use hyper_util::rt::TokioIo;
use instant_acme::{BodyWrapper, BytesResponse, Error, HttpClient};
use rustls::pki_types::ServerName;

/// How long one request to the CA may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read from the CA: a certificate chain is a few KiB.
const MAX_ANSWER: usize = 1 << 20;

/// The ACME client's HTTP.
pub struct Http {
    tls: Arc<rustls::ClientConfig>,
}

/// A failure on the way to the CA.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("the directory URL {0:?} has no host")]
    NoHost(String),
    #[error("{host}: {source}")]
    Connect {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{host}: its TLS certificate is not one the node trusts ({why}): set [acme] ca to the roots of the directory's certificate (without it, the Mozilla roots are trusted)"
    )]
    Untrusted { host: String, why: String },
    #[error("{0}")]
    Hyper(#[from] hyper::Error),
    #[error("the answer is larger than {MAX_ANSWER} bytes, or broke off: {0}")]
    Body(String),
    #[error("no answer within {}", humantime::format_duration(REQUEST_TIMEOUT))]
    Timeout,
}

impl Http {
    /// Trusting the PEM certificates of `ca` (its file, and the PEM: a
    /// private CA), else the Mozilla roots: as a route's `tls` trusts its
    /// replicas.
    pub fn new(ca: Option<(std::path::PathBuf, Vec<u8>)>) -> Result<Http, crate::tls::TlsError> {
        let tls = crate::tls::upstream_config(&crate::config::UpstreamTls {
            ca,
            server_name: None,
            client: None,
        })?;
        Ok(Http { tls })
    }
}

impl HttpClient for Http {
    fn request(
        &self,
        req: Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, Error>> + Send>> {
        let tls = Arc::clone(&self.tls);
        Box::pin(async move {
            match bounded(tls, req).await {
                Ok((parts, body)) => Ok(BytesResponse {
                    parts,
                    body: Box::new(body),
                }),
                Err(error) => Err(Error::Other(Box::new(error))),
            }
        })
    }
}

impl Http {
    /// `GET url`: its status and body, bounded as every request is.
    pub async fn get(&self, url: &str) -> Result<(http::StatusCode, Bytes), HttpError> {
        let request = Request::get(url)
            .body(BodyWrapper::default())
            .map_err(|_| HttpError::NoHost(url.to_string()))?;
        let (parts, body) = bounded(Arc::clone(&self.tls), request).await?;
        Ok((parts.status, body))
    }
}

async fn bounded(
    tls: Arc<rustls::ClientConfig>,
    req: Request<BodyWrapper<Bytes>>,
) -> Result<(http::response::Parts, Bytes), HttpError> {
    tokio::time::timeout(REQUEST_TIMEOUT, send(tls, req))
        .await
        .unwrap_or(Err(HttpError::Timeout))
}

async fn send(
    tls: Arc<rustls::ClientConfig>,
    req: Request<BodyWrapper<Bytes>>,
) -> Result<(http::response::Parts, Bytes), HttpError> {
    let uri = req.uri().clone();
    let host = uri
        .host()
        .ok_or_else(|| HttpError::NoHost(uri.to_string()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let connect = |source| HttpError::Connect {
        host: format!("{host}:{port}"),
        source,
    };
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(connect)?;
    let name = ServerName::try_from(host.clone())
        .map_err(|e| connect(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|error| match untrusted(&error) {
            Some(why) => HttpError::Untrusted {
                host: format!("{host}:{port}"),
                why,
            },
            None => connect(error),
        })?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    // Origin form, with the authority in Host.
    let (mut parts, body) = req.into_parts();
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or(host);
    if let Ok(value) = http::HeaderValue::from_str(&authority) {
        parts.headers.insert(http::header::HOST, value);
    }
    parts.uri = uri.path_and_query().map_or_else(
        || http::Uri::from_static("/"),
        |pq| {
            pq.as_str()
                .parse()
                .unwrap_or_else(|_| http::Uri::from_static("/"))
        },
    );
    let answer = sender
        .send_request(Request::from_parts(parts, body))
        .await?;
    let (parts, body) = answer.into_parts();
    let body = Limited::new(body, MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| HttpError::Body(e.to_string()))?
        .to_bytes();
    driver.abort();
    Ok((parts, body))
}

/// What a handshake that failed on the server's certificate says of it.
fn untrusted(error: &std::io::Error) -> Option<String> {
    let inner = error.get_ref()?.downcast_ref::<rustls::Error>()?;
    match inner {
        rustls::Error::InvalidCertificate(why) => Some(format!("{why:?}")),
        _ => None,
    }
}
