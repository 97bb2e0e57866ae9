//! An open connection to a replica and the body of its answer, in the
//! protocol it speaks: HTTP/1.1 ([`super::http1`]) or HTTP/2
//! ([`super::http2`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::Release;
use super::http1::{Connection, H1Body};
use crate::h1::response::BodyFraming;

/// An open connection to a replica, in the protocol it speaks.
#[derive(Debug)]
pub enum Conn {
    H1(Connection),
    /// A handle on a multiplexed connection.
    H2(super::http2::H2Conn),
}

/// A response body read from a replica.
#[derive(Debug)]
pub enum UpstreamBody {
    H1(H1Body),
    H2(super::http2::H2Body),
}

impl UpstreamBody {
    pub fn new(
        conn: Connection,
        framing: BodyFraming,
        keep_alive: bool,
        release: Option<Release>,
    ) -> UpstreamBody {
        UpstreamBody::H1(H1Body::new(conn, framing, keep_alive, release))
    }

    /// The next piece of the body among the bytes already read, without
    /// reading: a response that arrived whole goes out with its head.
    pub fn next_buffered(&mut self) -> io::Result<Option<Bytes>> {
        match self {
            UpstreamBody::H1(body) => body.next_buffered(),
            UpstreamBody::H2(_) => Ok(None),
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            UpstreamBody::H1(body) => Pin::new(body).poll_frame(cx),
            UpstreamBody::H2(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::H1(body) => body.is_end_stream(),
            UpstreamBody::H2(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::H1(body) => body.size_hint(),
            UpstreamBody::H2(body) => body.size_hint(),
        }
    }
}
