//! HTTP/2 clients (prior knowledge), served by hyper: each request becomes
//! a [`ClientRequest`] with a header map, and each answer a hyper response
//! whose body streams from the upstream connection.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, HOST};
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::h1::Rewind;
use crate::body::GatewayBody;
use crate::h1::request::{BodyKind, is_host};
use crate::proxy::{
    AnswerBody, BodyError, Client, ClientRequest, Fields, Proxy, ProxyError, RequestBody, forward,
};
use crate::shutdown::Shutdown;

/// Serves HTTP/2 on `io` until the client or the node ends it.
pub async fn serve(io: Rewind, proxy: Arc<Proxy>, client: Client, mut shutdown: Shutdown) {
    let client = Arc::new(client);
    let service = service_fn(move |req| {
        let proxy = Arc::clone(&proxy);
        let client = Arc::clone(&client);
        async move { Ok::<_, Infallible>(handle(&proxy, req, &client).await) }
    });
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .max_header_list_size(crate::h1::MAX_HEAD as u32);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "HTTP/2 client connection ended with an error");
            }
        }
        () = shutdown.wait() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// Answers one HTTP/2 request. Never fails: every error is a response.
async fn handle(proxy: &Proxy, req: Request<Incoming>, client: &Client) -> Response<GatewayBody> {
    let (parts, body) = req.into_parts();
    let accept = parts.headers.get(ACCEPT).map(|v| v.as_bytes());
    if parts.method == Method::CONNECT {
        return ProxyError::Connect.response(accept);
    }
    let host = match parts.uri.authority() {
        Some(authority) => Some(authority.as_str().as_bytes()),
        None => parts.headers.get(HOST).map(|h| h.as_bytes()),
    };
    if host.is_some_and(|h| !is_host(h)) {
        return ProxyError::BadRequest("invalid host").response(accept);
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or(&b"/"[..], |pq| pq.as_str().as_bytes());
    let route = match proxy.route(host, path) {
        Ok(route) => route,
        Err(error) => return error.response(accept),
    };
    let kind = if http_body::Body::is_end_stream(&body) {
        BodyKind::None
    } else {
        match parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
        {
            Some(n) => BodyKind::Length(n),
            None => BodyKind::Chunked,
        }
    };
    let req = ClientRequest {
        method: &parts.method,
        path,
        host,
        fields: Fields::Map(&parts.headers),
        upgrade: None,
        body: kind,
    };
    let mut body = IncomingBody(body);
    let response = match forward(&route, &req, &mut body, client).await {
        Ok(answer) => {
            let mut response = Response::new(GatewayBody::empty());
            *response.status_mut() = answer.head.status;
            *response.headers_mut() = answer.head.header_map();
            if let AnswerBody::Stream(stream) = answer.body {
                *response.body_mut() = GatewayBody::Upstream(stream);
            }
            response
        }
        Err(error) => {
            tracing::debug!(route = %route.config.name, %error, "request failed");
            error.response(accept)
        }
    };
    route.metrics.count(response.status());
    response
}

/// The body of an HTTP/2 request.
struct IncomingBody(Incoming);

impl RequestBody for IncomingBody {
    async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
        loop {
            match self.0.frame().await? {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        return Some(Ok(data));
                    }
                }
                Err(e) => return Some(Err(BodyError(Box::new(e)))),
            }
        }
    }
}
