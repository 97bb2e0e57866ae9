//! The replicas of the matrix: an HTTP/1.1 one written by hand, so that
//! its framing and the timing of its writes are exactly the case's, and
//! an HTTP/2 one on hyper whose body streams in the case's DATA pieces,
//! in clear (h2c) or behind TLS with ALPN `h2`. Both do what the request's
//! path asks ([`Ask`]).

use std::convert::Infallible;
use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::bail;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::h1::{Body, Reader, request_framing};
use super::{
    Answer, Ask, Digest, Framing, StreamedBody, Summary, TRAILER, payload, plan, plan_rng,
    streamed, trailer, write_chunked, write_planned,
};

/// A replica listening on loopback; stops when dropped.
#[derive(Debug)]
pub struct Replica {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Replica {
    /// The hand-written HTTP/1.1 replica.
    pub async fn http1() -> Replica {
        Replica::listen(|tcp| async move {
            if let Err(error) = http1_connection(tcp).await {
                tracing::debug!(%error, "HTTP/1.1 replica connection");
            }
        })
        .await
    }

    /// The HTTP/2 replica: prior knowledge in clear, or behind `tls`.
    pub async fn h2(tls: Option<Arc<rustls::ServerConfig>>) -> Replica {
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        Replica::listen(move |tcp| {
            let acceptor = acceptor.clone();
            async move {
                let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                let service = hyper::service::service_fn(h2_exchange);
                let served = match acceptor {
                    None => builder.serve_connection(TokioIo::new(tcp), service).await,
                    Some(acceptor) => {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        builder.serve_connection(TokioIo::new(tls), service).await
                    }
                };
                if let Err(error) = served {
                    tracing::debug!(%error, "HTTP/2 replica connection");
                }
            }
        })
        .await
    }

    async fn listen<F, Fut>(serve: F) -> Replica
    where
        F: Fn(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a replica");
        let addr = listener.local_addr().expect("its address");
        let task = tokio::spawn(async move {
            // Connections end with the replica.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                connections.spawn(serve(tcp));
                while connections.try_join_next().is_some() {}
            }
        });
        Replica { addr, task }
    }
}

async fn http1_connection(tcp: TcpStream) -> anyhow::Result<()> {
    tcp.set_nodelay(true)?;
    let mut reader = Reader::new(tcp);
    while let Some(head) = reader.request_head().await? {
        let body = reader.body(request_framing(&head)?).await?;
        match Ask::parse(&head.target) {
            Ok(Ask::Answer(answer)) => {
                let (message, head_len) = http1_answer(&answer)?;
                let plan = plan(
                    answer.pattern,
                    message.len(),
                    head_len,
                    &mut plan_rng(answer.seed, 1),
                );
                write_planned(reader.io(), &message, &plan).await?;
                if answer.framing == Framing::UntilClose {
                    reader.io().shutdown().await?;
                    return Ok(());
                }
            }
            Ok(Ask::Take) => {
                reader.io().write_all(&took(&body)).await?;
            }
            Err(error) => {
                let text = error.to_string();
                let answer = format!(
                    "HTTP/1.1 400 Bad Request\r\ncontent-length: {}\r\n\r\n{text}",
                    text.len()
                );
                reader.io().write_all(answer.as_bytes()).await?;
            }
        }
    }
    Ok(())
}

/// The whole answer an HTTP/1.1 replica writes, and the length of its
/// head.
fn http1_answer(answer: &Answer) -> anyhow::Result<(Vec<u8>, usize)> {
    let body = payload(answer.seed, answer.size);
    let mut out = Vec::with_capacity(body.len() + 512);
    let status = match answer.framing {
        Framing::NoContent => "204 No Content",
        Framing::NotModified => "304 Not Modified",
        _ => "200 OK",
    };
    write!(out, "HTTP/1.1 {status}\r\nx-seed: {}\r\n", answer.seed)?;
    match answer.framing {
        Framing::Length | Framing::Head => {
            write!(out, "content-length: {}\r\n", answer.size)?;
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::ChunkedTrailers => {
            write!(out, "transfer-encoding: chunked\r\ntrailer: {TRAILER}\r\n")?
        }
        Framing::UntilClose => out.extend_from_slice(b"connection: close\r\n"),
        Framing::NoContent => {}
        Framing::NotModified => write!(out, "etag: \"{}\"\r\n", answer.seed)?,
        Framing::NoLength | Framing::Trailers | Framing::LengthTrailers | Framing::Continue => {
            bail!("{} is not an HTTP/1.1 answer", answer.framing)
        }
    }
    out.extend_from_slice(b"\r\n");
    let head_len = out.len();
    let mut rng = plan_rng(answer.seed, 2);
    match answer.framing {
        Framing::Length | Framing::UntilClose => out.extend_from_slice(&body),
        Framing::Chunked => write_chunked(
            &mut out,
            &body,
            &super::chunk_sizes(body.len(), &mut rng),
            &[],
        ),
        Framing::ChunkedTrailers => {
            let sha = Summary::of(&body).sha256;
            let sizes = super::chunk_sizes(body.len(), &mut rng);
            write_chunked(&mut out, &body, &sizes, &[(TRAILER, &sha)]);
        }
        _ => {}
    }
    Ok((out, head_len))
}

/// The answer to [`Ask::Take`]: what arrived, in `x-got-*` headers.
fn took(body: &Body) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-got-length: {}\r\nx-got-sha256: {}\r\n",
        body.summary.len, body.summary.sha256
    );
    if let Some((_, value)) = body.trailers.iter().find(|(n, _)| n == TRAILER) {
        out.push_str(&format!("x-got-trailer: {value}\r\n"));
    }
    out.push_str("\r\nok");
    out.into_bytes()
}

async fn h2_exchange(req: Request<Incoming>) -> Result<Response<StreamedBody>, Infallible> {
    let page = |status: u16, text: String| {
        let mut response = Response::new(Full::new(Bytes::from(text)).boxed_unsync());
        *response.status_mut() = http::StatusCode::from_u16(status).expect("a status");
        response
    };
    Ok(match Ask::parse(req.uri().path()) {
        Ok(Ask::Answer(answer)) => h2_answer(&answer).unwrap_or_else(|e| page(400, e.to_string())),
        Ok(Ask::Take) => {
            let mut body = req.into_body();
            let mut digest = Digest::new();
            let mut got_trailer = None;
            while let Some(frame) = body.frame().await {
                let frame = match frame {
                    Ok(frame) => frame,
                    Err(error) => {
                        let text = format!("the body broke after {} bytes: {error}", digest.len());
                        return Ok(page(500, text));
                    }
                };
                match frame.into_data() {
                    Ok(data) => digest.update(&data),
                    Err(frame) => {
                        if let Some(value) = frame.trailers_ref().and_then(|t| t.get(TRAILER)) {
                            got_trailer = Some(value.clone());
                        }
                    }
                }
            }
            let summary = digest.finish();
            let mut response = page(200, "ok".to_string());
            let headers = response.headers_mut();
            headers.insert("x-got-length", summary.len.into());
            headers.insert("x-got-sha256", summary.sha256.parse().expect("hex"));
            if let Some(value) = got_trailer {
                headers.insert("x-got-trailer", value);
            }
            response
        }
        Err(error) => page(400, error.to_string()),
    })
}

/// An HTTP/2 replica's answer: the body in the pieces of its pattern.
fn h2_answer(answer: &Answer) -> anyhow::Result<Response<StreamedBody>> {
    let body = payload(answer.seed, answer.size);
    let plan = plan(answer.pattern, body.len(), 0, &mut plan_rng(answer.seed, 1));
    let summary = Summary::of(&body);
    let (length, trailers) = match answer.framing {
        Framing::Length => (true, None),
        Framing::NoLength => (false, None),
        Framing::Trailers => (false, Some(trailer(&summary))),
        Framing::LengthTrailers => (true, Some(trailer(&summary))),
        other => bail!("{other} is not an HTTP/2 answer here"),
    };
    let mut response = Response::new(streamed(body, &plan, trailers));
    response.headers_mut().insert("x-seed", answer.seed.into());
    if length {
        response
            .headers_mut()
            .insert(http::header::CONTENT_LENGTH, answer.size.into());
    }
    Ok(response)
}
