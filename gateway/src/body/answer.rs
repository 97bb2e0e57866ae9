//! The response body sent to the client: the upstream's, streamed as it
//! arrives, or a page the gateway wrote itself. It does not box, and
//! nothing bounds it in time once it started.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::upstream::UpstreamBody;

#[derive(Debug)]
pub enum GatewayBody {
    Local(Option<Bytes>),
    Upstream(UpstreamBody),
}

impl GatewayBody {
    /// A body written by the gateway.
    pub fn local(bytes: impl Into<Bytes>) -> GatewayBody {
        GatewayBody::Local(Some(bytes.into()))
    }

    pub fn empty() -> GatewayBody {
        GatewayBody::Local(None)
    }
}

impl Body for GatewayBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            GatewayBody::Local(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            GatewayBody::Upstream(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GatewayBody::Local(bytes) => bytes.is_none(),
            GatewayBody::Upstream(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GatewayBody::Local(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            GatewayBody::Upstream(body) => body.size_hint(),
        }
    }
}
