//! The same bytes from a client, read by picket-h1 and by hyper 1's
//! HTTP/1 server: where both accept a request, they must frame it alike,
//! or a request the proxy forwards is not the request a server behind
//! another hop reads (request smuggling).
//!
//! ## Compared
//! Each side reads the input as one connection: request after request,
//! each with its whole body, while the connection is kept. Where both
//! read request `i`, they agree on its method, its target (hyper's target
//! normalised as picket normalises, since picket routes and forwards the
//! normalised path; the host from an absolute-form target or `Host`;
//! CONNECT's authority is not compared, the proxy refuses CONNECT), and
//! its body: the same bytes, or both cut short by the end of the input.
//! Where one side has read a whole request that the other has not, the
//! other must have refused the bytes or closed the connection, not be
//! waiting for more of them: else they disagree on where the previous
//! request ended.
//!
//! Not a failure: one side refusing what the other accepts (picket is
//! stricter on purpose: both lengths, `Transfer-Encoding` other than
//! `chunked`, a bad or repeated `Host`, a fragment, a target it cannot
//! normalise), or closing where the other keeps the connection.
//!
//! ## How each side reads
//! picket-h1: `parse_request`, then the body with the head's decoder, then
//! the next request if the client keeps the connection and the gateway
//! would (it closes after a request it refuses unread: CONNECT, or HTTP/1.1
//! without a host, with a body). hyper: `http1::Builder::new()` with its
//! defaults, over an in-memory connection that hands over the whole input
//! and then waits (never EOF), and a service that records each request and
//! reads its body to the end before answering (`405` to CONNECT so that
//! hyper does not tunnel, `200` to the rest). The connection future is
//! polled by hand until it neither finishes nor wakes itself: nothing
//! else can move it, so no runtime is needed.

#![no_main]

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use bytes::{Bytes, BytesMut};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::service::service_fn;
use libfuzzer_sys::fuzz_target;
use picket_h1::body::Decoded;
use picket_h1::request::{BodyKind, parse_request};
use picket_h1::target;

/// The most pollings of hyper's connection for one input.
const MAX_POLLS: usize = 10_000;

fuzz_target!(|data: &[u8]| {
    let (picket, picket_after) = picket(data);
    let Some((hyper, hyper_after)) = hyper(data) else {
        return;
    };
    compare(data, &picket, picket_after, &hyper, hyper_after);
});

/// One request as a side read it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    method: Method,
    host: Option<Bytes>,
    /// Normalised, as picket routes and forwards it.
    path: Bytes,
    body: Vec<u8>,
    end: End,
}

/// How a request's body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Complete,
    /// The input ended before the body did.
    Truncated,
    Refused,
}

/// Where a side stands after its last request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// Waiting for more bytes: it took what it has for part of a message.
    Waiting,
    Refused,
    Closed,
}

fn picket(input: &[u8]) -> (Vec<Seen>, After) {
    let mut buf = BytesMut::from(input);
    let mut fields = Vec::new();
    let mut seen = Vec::new();
    loop {
        let parts = match parse_request(&mut buf, &mut fields) {
            Ok(Some(parts)) => parts,
            Ok(None) => return (seen, After::Waiting),
            Err(_) => return (seen, After::Refused),
        };
        let mut decoder = parts.body.decoder();
        let mut body = Vec::new();
        let end = loop {
            match decoder.decode(&mut buf) {
                Ok(Decoded::Data(data)) => body.extend_from_slice(&data),
                Ok(Decoded::Trailers(_)) => {}
                Ok(Decoded::Done) => break End::Complete,
                Ok(Decoded::NeedMore) => break End::Truncated,
                Err(_) => break End::Refused,
            }
        };
        seen.push(Seen {
            method: parts.method.clone(),
            host: (parts.method != Method::CONNECT)
                .then(|| parts.host.clone())
                .flatten(),
            path: parts.path.clone(),
            body,
            end,
        });
        match end {
            End::Complete => {}
            End::Truncated => return (seen, After::Waiting),
            End::Refused => return (seen, After::Refused),
        }
        // The gateway answers these without reading their body, then
        // keeps the connection only when there was none.
        let refused_unread = parts.method == Method::CONNECT
            || (parts.version == Version::HTTP_11 && parts.host.is_none());
        if !parts.keep_alive || (refused_unread && parts.body != BodyKind::None) {
            return (seen, After::Closed);
        }
        fields = parts.into_fields();
    }
}

/// What hyper read, or `None` when its connection never settled.
fn hyper(input: &[u8]) -> Option<(Vec<Seen>, After)> {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let record = seen.clone();
    let service = service_fn(move |request: Request<Incoming>| {
        let record = record.clone();
        async move { Ok::<_, Infallible>(serve(request, &record).await) }
    });
    let wire = Wire {
        input: Bytes::copy_from_slice(input),
    };
    let mut connection =
        pin!(hyper::server::conn::http1::Builder::new().serve_connection(wire, service));
    let woken = Arc::new(Woken(AtomicBool::new(false)));
    let waker = Waker::from(woken.clone());
    let mut cx = Context::from_waker(&waker);
    let mut after = None;
    for _ in 0..MAX_POLLS {
        woken.0.store(false, Ordering::Relaxed);
        match connection.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(())) => after = Some(After::Closed),
            Poll::Ready(Err(_)) => after = Some(After::Refused),
            Poll::Pending if woken.0.load(Ordering::Relaxed) => continue,
            Poll::Pending => after = Some(After::Waiting),
        }
        break;
    }
    let after = after?;
    let seen = seen.borrow().clone();
    Some((seen, after))
}

/// Records a request as hyper read it, with its whole body, and answers.
async fn serve(request: Request<Incoming>, record: &RefCell<Vec<Seen>>) -> Response<Empty<Bytes>> {
    let method = request.method().clone();
    let uri = request.uri();
    // CONNECT's target is an authority, which the proxy refuses: only its
    // framing is compared.
    let (host, path) = if method == Method::CONNECT && !uri.to_string().starts_with('/') {
        (None, "/".to_owned())
    } else if uri.scheme().is_some() {
        let pq = match uri.query() {
            Some(q) => format!("{}?{q}", uri.path()),
            None => uri.path().to_owned(),
        };
        (
            uri.authority()
                .map(|a| Bytes::copy_from_slice(a.as_str().as_bytes())),
            pq,
        )
    } else {
        let host = request
            .headers()
            .get(http::header::HOST)
            .map(|h| Bytes::copy_from_slice(h.as_bytes()));
        (host, uri.to_string())
    };
    let host = if method == Method::CONNECT {
        None
    } else {
        host
    };
    let path = if path == "*" {
        Bytes::from_static(b"*")
    } else {
        match target::normalize(path.as_bytes()) {
            Ok(normal) => Bytes::copy_from_slice(&normal),
            // Kept raw: a target picket accepts never reads so.
            Err(_) => Bytes::from(format!("(refused by normalize) {path}")),
        }
    };
    let index = {
        let mut record = record.borrow_mut();
        record.push(Seen {
            method: method.clone(),
            host,
            path,
            body: Vec::new(),
            end: End::Truncated,
        });
        record.len() - 1
    };
    let mut body = request.into_body();
    let end = loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    record.borrow_mut()[index].body.extend_from_slice(&data);
                }
            }
            Some(Err(_)) => break End::Refused,
            None => break End::Complete,
        }
    };
    record.borrow_mut()[index].end = end;
    let mut response = Response::new(Empty::new());
    if method == Method::CONNECT {
        *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    }
    response
}

fn compare(input: &[u8], picket: &[Seen], picket_after: After, hyper: &[Seen], hyper_after: After) {
    let common = picket.len().min(hyper.len());
    for i in 0..common {
        let (p, h) = (&picket[i], &hyper[i]);
        let why = |what: &str| {
            format!(
                "request {i}: {what}\ninput: {:?}\npicket: {picket:?} then {picket_after:?}\nhyper: {hyper:?} then {hyper_after:?}",
                Bytes::copy_from_slice(input)
            )
        };
        assert_eq!(p.method, h.method, "{}", why("methods differ"));
        assert_eq!(p.path, h.path, "{}", why("targets differ"));
        assert_eq!(p.host, h.host, "{}", why("hosts differ"));
        match (p.end, h.end) {
            (End::Refused, _) | (_, End::Refused) => return,
            (End::Complete, End::Complete) => {
                assert_eq!(p.body, h.body, "{}", why("bodies differ"));
            }
            (End::Truncated, End::Truncated) => {
                let (short, long) = if p.body.len() <= h.body.len() {
                    (&p.body, &h.body)
                } else {
                    (&h.body, &p.body)
                };
                assert!(
                    long.starts_with(short),
                    "{}",
                    why("cut-short bodies differ")
                );
                return;
            }
            (End::Complete, End::Truncated) | (End::Truncated, End::Complete) => {
                panic!(
                    "{}",
                    why("one side ended the body, the other waits for more of it")
                );
            }
        }
    }
    let why = |what: &str| {
        format!(
            "{what}\ninput: {:?}\npicket: {picket:?} then {picket_after:?}\nhyper: {hyper:?} then {hyper_after:?}",
            Bytes::copy_from_slice(input)
        )
    };
    if picket.len() > common {
        assert!(
            hyper_after != After::Waiting,
            "{}",
            why("picket read a whole request where hyper waits for more bytes")
        );
    }
    if hyper.len() > common {
        assert!(
            picket_after != After::Waiting,
            "{}",
            why("hyper read a whole request where picket waits for more bytes")
        );
    }
}

/// Marks that the connection asked to be polled again.
struct Woken(AtomicBool);

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A client connection that has sent `input` and then waits: reads hand
/// over what is left, then stay pending; writes go nowhere.
struct Wire {
    input: Bytes,
}

impl Read for Wire {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        if self.input.is_empty() {
            return Poll::Pending;
        }
        let n = self.input.len().min(buf.remaining());
        let taken = self.input.split_to(n);
        buf.put_slice(&taken);
        Poll::Ready(Ok(()))
    }
}

impl Write for Wire {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
