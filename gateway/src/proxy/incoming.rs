//! A client's request as the proxy forwards it, whichever protocol brought
//! it: HTTP/1 heads keep their header lines as they arrived, HTTP/2
//! requests come as a header map.

use http::Method;
use http::header::HeaderMap;

use crate::h1::request::{BodyKind, RequestParts};

/// The headers of a client's request.
#[derive(Debug, Clone, Copy)]
pub enum Fields<'a> {
    /// Header lines as they arrived over HTTP/1.
    Raw(&'a RequestParts),
    /// A header map, from HTTP/2.
    Map(&'a HeaderMap),
}

impl<'a> Fields<'a> {
    /// Calls `f` with each header as (name, value), in order.
    pub fn each(&self, mut f: impl FnMut(&[u8], &[u8])) {
        match self {
            Fields::Raw(parts) => parts.fields().for_each(|(n, v)| f(n, v)),
            Fields::Map(map) => map
                .iter()
                .for_each(|(n, v)| f(n.as_str().as_bytes(), v.as_bytes())),
        }
    }

    /// Every value of a header, in order; `name` in lower case.
    pub fn all(&self, name: &str) -> Vec<&'a [u8]> {
        match *self {
            Fields::Raw(parts) => parts
                .fields()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
                .map(|(_, v)| v)
                .collect(),
            Fields::Map(map) => map.get_all(name).iter().map(|v| v.as_bytes()).collect(),
        }
    }

    /// The first value of a header; `name` in lower case.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        match self {
            Fields::Raw(parts) => parts.get(name),
            Fields::Map(map) => std::str::from_utf8(name)
                .ok()
                .and_then(|n| map.get(n))
                .map(|v| v.as_bytes()),
        }
    }
}

/// A request, ready to be forwarded.
#[derive(Debug, Clone, Copy)]
pub struct ClientRequest<'a> {
    pub method: &'a Method,
    /// Origin form: path and query.
    pub path: &'a [u8],
    /// The host the client asked for.
    pub host: Option<&'a [u8]>,
    pub fields: Fields<'a>,
    /// The protocol of an upgrade the client asks for.
    pub upgrade: Option<&'a [u8]>,
    pub body: BodyKind,
    /// A gRPC call ([`super::grpc::is_call`]), decided once by the client
    /// protocol.
    pub grpc: bool,
    /// Its ID, sent upstream as `X-Request-Id`.
    pub id: &'a super::rules::RequestId,
}
