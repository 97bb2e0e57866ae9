//! The clients of the matrix: HTTP/1.0 and HTTP/1.1 written and read by
//! hand, on plain TCP or TLS, and HTTP/2 on hyper, in clear by prior
//! knowledge or over TLS by ALPN. A [`Conn`] carries several calls, so
//! that a case can check its connection is still usable after its body.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::h1::{BodyFraming, Reader, response_framing};
use super::{
    Digest, Framing, Pattern, StreamedBody, Summary, TRAILER, chunk_sizes, payload, plan, plan_rng,
    streamed, trailer, write_chunked, write_planned,
};
use crate::tls::TestCa;

/// What a client speaks to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http10,
    Http11,
    /// HTTP/2 in clear, by prior knowledge.
    H2c,
    Http11Tls,
    /// HTTP/2 over TLS, by ALPN.
    H2Tls,
}

impl Protocol {
    pub fn is_http2(self) -> bool {
        matches!(self, Protocol::H2c | Protocol::H2Tls)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Http10 => "HTTP/1.0",
            Protocol::Http11 => "HTTP/1.1",
            Protocol::H2c => "h2c",
            Protocol::Http11Tls => "HTTP/1.1+TLS",
            Protocol::H2Tls => "h2+TLS",
        })
    }
}

/// Where clients reach a node, and how they trust its certificate.
#[derive(Clone)]
pub struct Front {
    pub plain: SocketAddr,
    pub tls: SocketAddr,
    /// The name its certificate holds.
    pub name: String,
    h1: Arc<rustls::ClientConfig>,
    h2: Arc<rustls::ClientConfig>,
}

impl Front {
    pub fn new(plain: SocketAddr, tls: SocketAddr, name: &str, ca: &TestCa) -> Front {
        Front {
            plain,
            tls,
            name: name.to_string(),
            h1: crate::tls::client_config(ca, &[b"http/1.1"]),
            h2: crate::tls::client_config(ca, &[b"h2"]),
        }
    }
}

/// A byte stream of either kind.
pub trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}

/// A body a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upload {
    pub framing: Framing,
    pub pattern: Pattern,
    pub size: usize,
    pub seed: u64,
}

/// One request.
#[derive(Debug, Clone)]
pub struct Call {
    pub path: String,
    pub head_request: bool,
    pub upload: Option<Upload>,
}

/// What came back.
#[derive(Debug, Clone)]
pub struct Received {
    pub status: u16,
    /// Lower-case names.
    pub fields: Vec<(String, String)>,
    pub body: Summary,
    pub trailers: Vec<(String, String)>,
    /// The body's first bytes, to show.
    pub preview: String,
    /// Whether an HTTP/1 client got it chunked.
    pub chunked: bool,
}

impl Received {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A client connection to the node.
pub enum Conn {
    Http1 {
        reader: Reader<Box<dyn Duplex>>,
        minor: u8,
        host: String,
    },
    Http2 {
        send: SendRequest<StreamedBody>,
        base: String,
    },
}

impl Conn {
    pub async fn open(protocol: Protocol, front: &Front) -> anyhow::Result<Conn> {
        let http1 = |io: Box<dyn Duplex>, minor| Conn::Http1 {
            reader: Reader::new(io),
            minor,
            host: front.name.clone(),
        };
        Ok(match protocol {
            Protocol::Http10 | Protocol::Http11 => {
                let tcp = TcpStream::connect(front.plain).await?;
                tcp.set_nodelay(true)?;
                http1(Box::new(tcp), u8::from(protocol == Protocol::Http11))
            }
            Protocol::Http11Tls => http1(Box::new(tls(front, false).await?), 1),
            Protocol::H2c => {
                let tcp = TcpStream::connect(front.plain).await?;
                tcp.set_nodelay(true)?;
                http2(tcp, format!("http://{}", front.name)).await?
            }
            Protocol::H2Tls => {
                let stream = tls(front, true).await?;
                http2(stream, format!("https://{}", front.name)).await?
            }
        })
    }

    /// Sends `call` and reads its answer to the end.
    pub async fn call(&mut self, call: &Call) -> anyhow::Result<Received> {
        match self {
            Conn::Http1 {
                reader,
                minor,
                host,
            } => http1_call(reader, *minor, host, call).await,
            Conn::Http2 { send, base } => http2_call(send, base, call).await,
        }
    }

    /// Checks that the node closes an HTTP/1 connection after the answer,
    /// with nothing more written.
    pub async fn expect_close(&mut self, within: Duration) -> anyhow::Result<()> {
        match self {
            Conn::Http1 { reader, .. } => reader.expect_close(within).await,
            Conn::Http2 { .. } => bail!("an HTTP/2 connection stays open"),
        }
    }
}

async fn tls(
    front: &Front,
    h2: bool,
) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let config = if h2 { &front.h2 } else { &front.h1 };
    let stream = crate::tls::connect(front.tls, &front.name, Arc::clone(config)).await?;
    stream.get_ref().0.set_nodelay(true)?;
    let want: &[u8] = if h2 { b"h2" } else { b"http/1.1" };
    let alpn = stream.get_ref().1.alpn_protocol();
    ensure!(
        alpn == Some(want),
        "ALPN chose {:?}",
        alpn.map(String::from_utf8_lossy)
    );
    Ok(stream)
}

async fn http2(io: impl Duplex + 'static, base: String) -> anyhow::Result<Conn> {
    let (send, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await?;
    tokio::spawn(connection);
    Ok(Conn::Http2 { send, base })
}

fn method(call: &Call) -> &'static str {
    match (call.head_request, call.upload) {
        (true, _) => "HEAD",
        (false, Some(_)) => "POST",
        (false, None) => "GET",
    }
}

async fn http1_call(
    reader: &mut Reader<Box<dyn Duplex>>,
    minor: u8,
    host: &str,
    call: &Call,
) -> anyhow::Result<Received> {
    let mut message = format!(
        "{} {} HTTP/1.{minor}\r\nhost: {host}\r\n",
        method(call),
        call.path
    )
    .into_bytes();
    let Some(upload) = call.upload else {
        message.extend_from_slice(b"\r\n");
        reader.io().write_all(&message).await?;
        reader.io().flush().await?;
        return http1_answer(reader, minor, call.head_request).await;
    };
    let body = payload(upload.seed, upload.size);
    let mut rng = plan_rng(upload.seed, 3);
    let head = match upload.framing {
        Framing::Length => format!("content-length: {}\r\n\r\n", upload.size),
        Framing::Continue => format!(
            "content-length: {}\r\nexpect: 100-continue\r\n\r\n",
            upload.size
        ),
        Framing::Chunked => "transfer-encoding: chunked\r\n\r\n".to_string(),
        Framing::ChunkedTrailers => {
            format!("transfer-encoding: chunked\r\ntrailer: {TRAILER}\r\n\r\n")
        }
        other => bail!("{other} is no HTTP/1 request framing"),
    };
    message.extend_from_slice(head.as_bytes());
    let head_len = message.len();
    match upload.framing {
        Framing::Chunked => {
            write_chunked(&mut message, &body, &chunk_sizes(body.len(), &mut rng), &[])
        }
        Framing::ChunkedTrailers => {
            let sha = Summary::of(&body).sha256;
            let sizes = chunk_sizes(body.len(), &mut rng);
            write_chunked(&mut message, &body, &sizes, &[(TRAILER, &sha)]);
        }
        Framing::Length => message.extend_from_slice(&body),
        _ => {}
    }
    if upload.framing != Framing::Continue {
        let plan = plan(upload.pattern, message.len(), head_len, &mut rng);
        write_planned(reader.io(), &message, &plan).await?;
        return http1_answer(reader, minor, false).await;
    }
    // The head alone; the body once the node asks for it.
    reader.io().write_all(&message).await?;
    reader.io().flush().await?;
    let interim = reader.response_head().await?;
    if interim.status != 100 {
        ensure!(
            upload.size == 0,
            "answered {} before asking for the body",
            interim.status
        );
        return http1_rest(reader, minor, false, interim).await;
    }
    let plan = plan(upload.pattern, body.len(), 0, &mut rng);
    write_planned(reader.io(), &body, &plan).await?;
    http1_answer(reader, minor, false).await
}

/// Reads an answer, past any interim (1xx) heads.
async fn http1_answer(
    reader: &mut Reader<Box<dyn Duplex>>,
    minor: u8,
    head_request: bool,
) -> anyhow::Result<Received> {
    let head = loop {
        let head = reader.response_head().await?;
        if !(100..200).contains(&head.status) {
            break head;
        }
    };
    http1_rest(reader, minor, head_request, head).await
}

async fn http1_rest(
    reader: &mut Reader<Box<dyn Duplex>>,
    minor: u8,
    head_request: bool,
    head: super::h1::Head,
) -> anyhow::Result<Received> {
    let framing = response_framing(&head, head_request)?;
    ensure!(
        minor == 1 || framing != BodyFraming::Chunked,
        "a chunked answer to an HTTP/1.0 client"
    );
    let body = reader
        .body(framing)
        .await
        .with_context(|| format!("answer {}", head.status))?;
    Ok(Received {
        status: head.status,
        fields: head.fields,
        body: body.summary,
        trailers: body.trailers,
        preview: body.preview,
        chunked: framing == BodyFraming::Chunked,
    })
}

async fn http2_call(
    send: &mut SendRequest<StreamedBody>,
    base: &str,
    call: &Call,
) -> anyhow::Result<Received> {
    let mut request = Request::builder()
        .method(method(call))
        .uri(format!("{base}{}", call.path));
    let body = match call.upload {
        None => Empty::<Bytes>::new().boxed_unsync(),
        Some(upload) => {
            let data = payload(upload.seed, upload.size);
            let plan = plan(upload.pattern, data.len(), 0, &mut plan_rng(upload.seed, 3));
            let trailers = match upload.framing {
                Framing::Length => {
                    request = request.header(http::header::CONTENT_LENGTH, upload.size);
                    None
                }
                Framing::NoLength => None,
                Framing::Trailers => Some(trailer(&Summary::of(&data))),
                other => bail!("{other} is no HTTP/2 request framing"),
            };
            streamed(data, &plan, trailers)
        }
    };
    send.ready().await?;
    let response = send.send_request(request.body(body)?).await?;
    let status = response.status().as_u16();
    let fields = response
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut body = response.into_body();
    let mut digest = Digest::new();
    let mut trailers = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame =
            frame.with_context(|| format!("answer {status}: cut after {} bytes", digest.len()))?;
        match frame.into_data() {
            Ok(data) => digest.update(&data),
            Err(frame) => {
                if let Ok(map) = frame.into_trailers() {
                    trailers.extend(map.iter().map(|(n, v)| {
                        (
                            n.to_string(),
                            String::from_utf8_lossy(v.as_bytes()).into_owned(),
                        )
                    }));
                }
            }
        }
    }
    Ok(Received {
        status,
        fields,
        preview: digest.preview(),
        body: digest.finish(),
        trailers,
        chunked: false,
    })
}
