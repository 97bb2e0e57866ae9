//! Day two at the gateway, through real upstreams: the access log's
//! fields, request IDs, prefix rewriting, redirects naming the replica,
//! header rules, `max_body` and the rate limit.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use picket_tests::client::{self, Answer};
use picket_tests::logs::{access_lines, with_access_log};
use picket_tests::node::{TestNode, eventually, route};
use picket_tests::ports::refusing;
use picket_tests::recorder::Recorder;
use picket_tests::wire::Wire;
use tokio::net::TcpListener;

/// What a replica saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    uri: String,
    headers: HeaderMap,
}

type Handler = Arc<dyn Fn(&Seen) -> Response<Full<Bytes>> + Send + Sync>;

/// An HTTP/1.1 replica answering with `handler`, recording each request.
async fn replica(handler: Handler) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (record, handler) = (Arc::clone(&record), Arc::clone(&handler));
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (record, handler) = (Arc::clone(&record), Arc::clone(&handler));
                    async move {
                        let (parts, body) = req.into_parts();
                        let _ = body.collect().await;
                        let seen = Seen {
                            uri: parts.uri.to_string(),
                            headers: parts.headers,
                        };
                        let response = handler(&seen);
                        record.lock().unwrap().push(seen);
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

fn ok(body: &'static str) -> Handler {
    Arc::new(move |_| Response::new(Full::new(Bytes::from_static(body.as_bytes()))))
}

fn status(code: u16) -> Handler {
    Arc::new(move |_| {
        let mut response = Response::new(Full::new(Bytes::from_static(b"no")));
        *response.status_mut() = StatusCode::from_u16(code).unwrap();
        response
    })
}

/// A replica that takes connections and never answers.
async fn silent() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    addr
}

async fn get_with(addr: SocketAddr, host: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut req = client::request(Method::GET, host, path, Bytes::new());
    for (name, value) in headers {
        req.headers_mut().append(
            http::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    client::send(addr, req).await.unwrap()
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    (dir, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_tells_a_success_with_every_field() {
    let (_dir, log) = temp();
    let (addr, _) = replica(ok("hello")).await;
    let node = TestNode::start(&with_access_log(
        &log,
        "json",
        &route("shop", "/", &[addr], ""),
    ));
    let mut req = client::request(Method::POST, "shop.test", "/cart?x=1", Bytes::from("abc"));
    req.headers_mut()
        .insert("user-agent", "day-two/1".parse().unwrap());
    let answer = client::send(node.proxy, req).await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    let id = answer.headers["x-request-id"].to_str().unwrap().to_string();
    let line = &access_lines(&log, 1).await[0];
    assert_eq!(line["request_id"], id.as_str());
    assert_eq!(line["client"], "127.0.0.1");
    assert_eq!(line["method"], "POST");
    assert_eq!(line["host"], "shop.test");
    assert_eq!(line["path"], "/cart?x=1");
    assert_eq!(line["protocol"], "HTTP/1.1");
    assert_eq!(line["status"], 200);
    assert_eq!(line["bytes_in"], 3);
    assert_eq!(line["bytes_out"], 5);
    assert!(line["duration_ms"].as_f64().unwrap() >= 0.0, "{line}");
    assert_eq!(line["route"], "shop");
    assert_eq!(line["replica"], addr.to_string());
    assert_eq!(line["tries"], 1);
    assert_eq!(line["decided_by"], serde_json::Value::Null);
    assert_eq!(line["ending"], "complete");
    assert_eq!(line["phase"], serde_json::Value::Null);
    assert_eq!(line["user_agent"], "day-two/1");
    assert!(line["time"].as_str().unwrap().ends_with('Z'), "{line}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_tells_a_retry_on_another_replica() {
    let (_dir, log) = temp();
    let (bad, _) = replica(status(503)).await;
    let (good, _) = replica(ok("fine")).await;
    let node = TestNode::start(&with_access_log(
        &log,
        "json",
        &route(
            "r",
            "/",
            &[bad, good],
            "tries = 2\nconsecutive_gateway_errors = 100\n",
        ),
    ));
    for _ in 0..4 {
        let answer = client::get(node.proxy, "h", "/").await.unwrap();
        assert_eq!(answer.status, StatusCode::OK);
    }
    let lines = access_lines(&log, 4).await;
    assert!(
        lines
            .iter()
            .all(|l| l["replica"] == good.to_string() && l["status"] == 200),
        "{lines:#?}"
    );
    let retried: Vec<_> = lines.iter().filter(|l| l["tries"] == 2).collect();
    assert!(
        !retried.is_empty(),
        "round robin starts on the 503 at least once: {lines:#?}"
    );
    assert!(lines.iter().all(|l| l["tries"] == 1 || l["tries"] == 2));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_says_which_bound_or_breaker_decided() {
    let (_dir, log) = temp();
    let refused = refusing();
    let tripped = refusing();
    let quiet = silent().await;
    let routes = format!(
        "{}{}{}",
        route("down", "/down", &[refused.addr], ""),
        route("slow", "/slow", &[quiet], "first_answer_timeout = \"1s\"\n"),
        route(
            "tripped",
            "/tripped",
            &[tripped.addr],
            "[route.breaker]\nenabled = true\nfailures = 2\n"
        ),
    );
    let node = TestNode::start(&with_access_log(&log, "json", &routes));
    assert_eq!(
        client::get(node.proxy, "h", "/down").await.unwrap().status,
        StatusCode::BAD_GATEWAY
    );
    assert_eq!(
        client::get(node.proxy, "h", "/slow").await.unwrap().status,
        StatusCode::GATEWAY_TIMEOUT
    );
    for _ in 0..2 {
        let failed = client::get(node.proxy, "h", "/tripped").await.unwrap();
        assert_eq!(failed.status, StatusCode::BAD_GATEWAY);
    }
    let open = client::get(node.proxy, "h", "/tripped").await.unwrap();
    assert_eq!(open.status, StatusCode::SERVICE_UNAVAILABLE);
    let lines = access_lines(&log, 5).await;
    let find = |path: &str, status: u64| {
        lines
            .iter()
            .find(|l| l["path"] == path && l["status"] == status)
            .unwrap_or_else(|| panic!("no {status} for {path}: {lines:#?}"))
    };
    let down = find("/down", 502);
    assert_eq!(down["decided_by"], "connect");
    assert_eq!(down["ending"], "replica_closed");
    assert_eq!(down["phase"], "connect");
    assert_eq!(down["route"], "down");
    assert_eq!(down["tries"], 1);
    let slow = find("/slow", 504);
    assert_eq!(slow["decided_by"], "first_answer_timeout");
    assert_eq!(slow["ending"], "bound_first_answer");
    assert_eq!(slow["phase"], "head");
    assert_eq!(slow["replica"], quiet.to_string());
    assert!(slow["duration_ms"].as_f64().unwrap() >= 1000.0, "{slow}");
    let open = find("/tripped", 503);
    assert_eq!(open["decided_by"], "breaker");
    assert_eq!(open["ending"], "node_refused");
    assert_eq!(open["phase"], "request");
    assert_eq!(open["tries"], 0, "an open circuit tries nothing");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_combined_format_reads_as_nginx_writes_it() {
    let (_dir, log) = temp();
    let (addr, _) = replica(ok("hello")).await;
    let node = TestNode::start(&with_access_log(
        &log,
        "combined",
        &route("r", "/", &[addr], ""),
    ));
    let answer = get_with(node.proxy, "h", "/a?b=1", &[("referer", "http://x/")]).await;
    let id = answer.headers["x-request-id"].to_str().unwrap().to_string();
    eventually("a combined line", Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.ends_with('\n'))
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    let re = format!(
        "\"GET /a?b=1 HTTP/1.1\" 200 5 \"http://x/\" \"-\" route=r replica={addr} tries=1 decided_by=- ending=complete request_id={id} duration_ms="
    );
    assert!(text.starts_with("127.0.0.1 - - ["), "{text}");
    assert!(text.contains(" +0000] "), "{text}");
    assert!(text.contains(&re), "{text}\nwanted: {re}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_are_kept_generated_and_returned() {
    let (_dir, log) = temp();
    let (addr, seen) = replica(ok("x")).await;
    let node = TestNode::start(&with_access_log(
        &log,
        "json",
        &route("r", "/", &[addr], "host = \"h\"\n"),
    ));
    // Kept.
    let kept = get_with(
        node.proxy,
        "h",
        "/1",
        &[
            ("x-request-id", "0f8fad5b-d9cb-469f-a165-70867728950e"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("tracestate", "vendor=a,other=b"),
        ],
    )
    .await;
    assert_eq!(
        kept.headers["x-request-id"],
        "0f8fad5b-d9cb-469f-a165-70867728950e"
    );
    // Generated: none sent, and one that is not safe to keep.
    let generated = client::get(node.proxy, "h", "/2").await.unwrap();
    let replaced = get_with(node.proxy, "h", "/3", &[("x-request-id", "a b<script>")]).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen[0].headers["x-request-id"],
        "0f8fad5b-d9cb-469f-a165-70867728950e"
    );
    assert_eq!(
        seen[0].headers["traceparent"],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    assert_eq!(seen[0].headers["tracestate"], "vendor=a,other=b");
    for (answer, upstream) in [(&generated, &seen[1]), (&replaced, &seen[2])] {
        let id = answer.headers["x-request-id"].to_str().unwrap();
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert_eq!(
            upstream.headers["x-request-id"], id,
            "the replica got the same"
        );
        assert_eq!(upstream.headers.get_all("x-request-id").iter().count(), 1);
    }
    assert_ne!(
        generated.headers["x-request-id"],
        replaced.headers["x-request-id"]
    );
    // In the log, and on the node's own pages.
    // A line is written once its answer is sent, so the order of lines
    // can differ from the order of the requests: found by ID.
    let kept_line = lines_with(&log, "0f8fad5b-d9cb-469f-a165-70867728950e").await;
    assert_eq!(kept_line["path"], "/1");
    let page = get_with(node.proxy, "nowhere", "/x", &[("x-request-id", "page-1")]).await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    assert_eq!(page.headers["x-request-id"], "page-1");
    assert!(
        page.text().contains("request id: page-1"),
        "{}",
        page.text()
    );
    let unrouted = &lines_with(&log, "page-1").await;
    assert_eq!(unrouted["decided_by"], "no_route");
    assert_eq!(unrouted["route"], serde_json::Value::Null);
    node.stop().await;
}

/// The line of the request with this ID.
async fn lines_with(log: &Path, id: &str) -> serde_json::Value {
    let found = || {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| l["request_id"] == id)
    };
    eventually("the request's line", Duration::from_secs(10), || {
        found().is_some()
    })
    .await;
    found().unwrap()
}

/// An HTTP/2 (prior knowledge) connection to the node.
async fn h2_sender(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

/// An HTTP/2 (h2c) request to the node.
async fn h2_get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response<Bytes> {
    let mut sender = h2_sender(addr).await;
    let mut req = Request::new(Full::new(Bytes::new()));
    *req.uri_mut() = format!("http://h2.test{path}").parse().unwrap();
    for (name, value) in headers {
        req.headers_mut().append(
            http::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let response = sender.send_request(req).await.unwrap();
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, body.collect().await.unwrap().to_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_the_id_and_the_log_line_are_the_same() {
    let (_dir, log) = temp();
    let (addr, seen) = replica(ok("h2 body")).await;
    let node = TestNode::start(&with_access_log(
        &log,
        "json",
        &route("r", "/", &[addr], ""),
    ));
    let answer = h2_get(node.proxy, "/over/h2", &[("x-request-id", "h2-id")]).await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.headers()["x-request-id"], "h2-id");
    assert_eq!(seen.lock().unwrap()[0].headers["x-request-id"], "h2-id");
    let line = lines_with(&log, "h2-id").await;
    assert_eq!(line["protocol"], "HTTP/2.0");
    assert_eq!(line["path"], "/over/h2");
    assert_eq!(line["bytes_out"], 7);
    assert_eq!(line["replica"], addr.to_string());
    let missing = h2_get(node.proxy, "/", &[]).await;
    let id = missing.headers()["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 32);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripped_prefix_goes_up_and_redirects_come_back_under_it() {
    let redirect: Handler = Arc::new(|seen: &Seen| {
        let mut response = Response::new(Full::new(Bytes::from(seen.uri.clone())));
        if seen.uri.starts_with("/v2/old") {
            *response.status_mut() = StatusCode::FOUND;
            response
                .headers_mut()
                .insert("location", "/v2/new?from=old".parse().unwrap());
            response.headers_mut().insert(
                "content-location",
                "http://shop.test/v2/new".parse().unwrap(),
            );
        }
        response
    });
    let (addr, seen) = replica(redirect).await;
    let node = TestNode::start(&route(
        "api",
        "/api",
        &[addr],
        "strip_prefix = true\nadd_prefix = \"/v2\"\n",
    ));
    let answer = client::get(node.proxy, "shop.test", "/api/users?x=1")
        .await
        .unwrap();
    assert_eq!(answer.text(), "/v2/users?x=1");
    let root = client::get(node.proxy, "shop.test", "/api").await.unwrap();
    assert_eq!(root.text(), "/v2/");
    let moved = client::get(node.proxy, "shop.test", "/api/old")
        .await
        .unwrap();
    assert_eq!(moved.status, StatusCode::FOUND);
    assert_eq!(moved.headers["location"], "/api/new?from=old");
    assert_eq!(
        moved.headers["content-location"],
        "http://shop.test/api/new"
    );
    assert_eq!(seen.lock().unwrap().len(), 3);
    // Strip alone.
    let (plain, _) = replica(redirect_to("/login")).await;
    let strip = TestNode::start(&route("app", "/app/", &[plain], "strip_prefix = true\n"));
    let login = client::get(strip.proxy, "h", "/app/x").await.unwrap();
    assert_eq!(login.text(), "/x");
    assert_eq!(login.headers["location"], "/app/login");
    strip.stop().await;
    node.stop().await;
}

fn redirect_to(location: &'static str) -> Handler {
    Arc::new(move |seen: &Seen| {
        let mut response = Response::new(Full::new(Bytes::from(seen.uri.clone())));
        *response.status_mut() = StatusCode::SEE_OTHER;
        response
            .headers_mut()
            .insert("location", location.parse().unwrap());
        response
    })
}

/// A replica that redirects as nginx does with absolute redirects: `/own`
/// to its own address as connected, `/host` to the `Host` it was sent,
/// `/other` to another host, `/relative` and `/next` to references without
/// a host.
async fn self_redirecting() -> SocketAddr {
    let own: Arc<std::sync::OnceLock<SocketAddr>> = Arc::default();
    let at = Arc::clone(&own);
    let handler: Handler = Arc::new(move |seen: &Seen| {
        let host = seen.headers["host"].to_str().unwrap();
        let location = match seen.uri.rsplit('/').next().unwrap() {
            "own" => format!("http://{}/a/?x=1", at.get().unwrap()),
            "host" => format!("http://{host}/a/"),
            "other" => "http://elsewhere.test/a/".to_string(),
            "relative" => "/a/".to_string(),
            _ => "next/".to_string(),
        };
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::FOUND;
        response
            .headers_mut()
            .insert("location", location.parse().unwrap());
        response
    });
    let (addr, _) = replica(handler).await;
    own.set(addr).unwrap();
    addr
}

/// A redirect naming the replica (its address, or the `Host` the node sent
/// it) comes back naming the client's scheme, host and prefix, over
/// HTTP/1.1, HTTP/2 and TLS alike, as nginx's `proxy_redirect default`
/// does; another host's URL is left alone, and a reference without a host
/// only has its prefix moved back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_naming_the_replica_come_back_naming_the_client_origin() {
    let ca = picket_tests::tls::TestCa::new("redirect CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "app", &["app.test"]);
    let addr = self_redirecting().await;
    let node = TestNode::start(&format!(
        "[node]\nlisten_tls = \"127.0.0.1:0\"\n\n{}\n{}\n{}",
        leaf.table(),
        route("api", "/api", &[addr], "strip_prefix = true\n"),
        route("site", "/", &[addr], "")
    ));
    let tls = node.tls.unwrap();

    let cases = [
        ("/api/own", "http://shop.test:8080/api/a/?x=1"),
        ("/own", "http://shop.test:8080/a/?x=1"),
        ("/api/host", "http://shop.test:8080/api/a/"),
        ("/api/other", "http://elsewhere.test/a/"),
        ("/other", "http://elsewhere.test/a/"),
        ("/api/relative", "/api/a/"),
        ("/api/next", "next/"),
    ];
    for (path, expected) in cases {
        let answer = client::get(node.proxy, "shop.test:8080", path)
            .await
            .unwrap();
        assert_eq!(answer.status, StatusCode::FOUND, "{path}");
        assert_eq!(answer.headers["location"], expected, "HTTP/1.1 {path}");
    }

    let cases = [
        ("/api/own", "http://h2.test/api/a/?x=1"),
        ("/own", "http://h2.test/a/?x=1"),
        ("/host", "http://h2.test/a/"),
        ("/api/other", "http://elsewhere.test/a/"),
        ("/relative", "/a/"),
    ];
    for (path, expected) in cases {
        let answer = h2_get(node.proxy, path, &[]).await;
        assert_eq!(answer.headers()["location"], expected, "HTTP/2 {path}");
    }

    // Over TLS the replica is still spoken to in plain HTTP, and names
    // itself `http://`: the client gets `https://`.
    for alpn in [&b"http/1.1"[..], b"h2"] {
        let config = picket_tests::tls::client_config(&ca, &[alpn]);
        for (path, expected) in [
            ("/api/own", "https://app.test/api/a/?x=1"),
            ("/own", "https://app.test/a/?x=1"),
            ("/api/host", "https://app.test/api/a/"),
            ("/host", "https://app.test/a/"),
            ("/other", "http://elsewhere.test/a/"),
        ] {
            let (answer, _, _) = picket_tests::tls::get(tls, config.clone(), "app.test", path)
                .await
                .unwrap();
            assert_eq!(
                answer.headers["location"],
                expected,
                "{} {path}",
                String::from_utf8_lossy(alpn)
            );
        }
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_rules_apply_from_global_and_route() {
    let answer_headers: Handler = Arc::new(|_| {
        let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
        let headers = response.headers_mut();
        headers.insert("server", "secret/1.0".parse().unwrap());
        headers.insert("x-powered-by", "php".parse().unwrap());
        headers.insert("x-request-id", "from-the-replica".parse().unwrap());
        response
    });
    let (addr, seen) = replica(answer_headers).await;
    let text = format!(
        "[global]\nrequest_headers = {{ set = {{ \"x-env\" = \"prod\", \"x-team\" = \"all\" }}, remove = [\"x-debug\"] }}\n\
         response_headers = {{ set = {{ \"strict-transport-security\" = \"max-age=63072000\" }}, remove = [\"server\"] }}\n\n{}",
        route(
            "r",
            "/",
            &[addr],
            "request_headers = { set = { \"x-team\" = \"shop\" }, remove = [\"cookie\"] }\n\
             response_headers = { set = { \"x-frame-options\" = \"DENY\" }, remove = [\"x-powered-by\"] }\n"
        )
    );
    let node = TestNode::start(&text);
    let answer = get_with(
        node.proxy,
        "h",
        "/",
        &[
            ("cookie", "session=1"),
            ("x-debug", "1"),
            ("x-team", "spoofed"),
            ("x-keep", "yes"),
        ],
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    let up = seen.lock().unwrap()[0].headers.clone();
    assert_eq!(up["x-env"], "prod");
    assert_eq!(up["x-team"], "shop", "the route's set wins over [global]'s");
    assert_eq!(
        up.get_all("x-team").iter().count(),
        1,
        "the client's is gone"
    );
    assert!(
        up.get("cookie").is_none() && up.get("x-debug").is_none(),
        "{up:?}"
    );
    assert_eq!(up["x-keep"], "yes");
    let down = &answer.headers;
    assert!(
        down.get("server").is_none() && down.get("x-powered-by").is_none(),
        "{down:?}"
    );
    assert_eq!(down["strict-transport-security"], "max-age=63072000");
    assert_eq!(down["x-frame-options"], "DENY");
    assert_ne!(
        down["x-request-id"], "from-the-replica",
        "the request's own ID"
    );
    assert_eq!(down["content-length"], "2", "the node's framing stands");
    node.stop().await;
}

#[test]
fn rules_cannot_touch_framing_forwarding_or_the_id() {
    for (section, name) in [
        ("request_headers", "content-length"),
        ("request_headers", "Transfer-Encoding"),
        ("request_headers", "host"),
        ("request_headers", "x-forwarded-for"),
        ("request_headers", "connection"),
        ("response_headers", "content-length"),
        ("response_headers", "transfer-encoding"),
        ("response_headers", "x-request-id"),
        ("response_headers", "upgrade"),
    ] {
        for shape in [
            format!("{section} = {{ set = {{ \"{name}\" = \"0\" }} }}"),
            format!("{section} = {{ remove = [\"{name}\"] }}"),
        ] {
            let text = format!("[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\n{shape}\n");
            let error = picket::config::Config::parse("rules.toml", &text)
                .expect_err(&shape)
                .to_string();
            assert!(
                error.contains("rules.toml:4:")
                    && error.contains("no rule may set, remove or admit it"),
                "{shape}: {error}"
            );
        }
    }
    let bad_value = "[global]\nresponse_headers = { set = { \"x-a\" = \"one\\ntwo\" } }\n";
    let error = picket::config::Config::parse("v.toml", bad_value)
        .unwrap_err()
        .to_string();
    assert!(error.contains("v.toml:2:"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_body_over_max_body_is_refused_before_the_replica_sees_it() {
    let recorder = Recorder::start().await;
    let node = TestNode::start(&route("r", "/", &[recorder.addr], "max_body = 100\n"));
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(
        b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n",
    )
    .await;
    let answer = wire.response(false).await.expect("an answer");
    assert_eq!(answer.status, 413);
    assert!(answer.headers.contains_key("x-request-id"));
    assert!(
        wire.closed().await,
        "the body was not read: the connection ends"
    );
    let at_limit = client::send(
        node.proxy,
        client::request(Method::POST, "h", "/", Bytes::from(vec![b'a'; 100])),
    )
    .await
    .unwrap();
    assert_eq!(at_limit.status, StatusCode::OK, "100 bytes are within 100");
    assert!(recorder.wait_requests(1, Duration::from_secs(5)).await);
    let (bytes, requests) = recorder.take();
    assert_eq!(requests, 1, "only the request within the limit went up");
    assert!(!String::from_utf8_lossy(&bytes).contains("/up"));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_is_cut_at_max_body_and_nothing_past_it_goes_up() {
    let recorder = Recorder::start().await;
    let node = TestNode::start(&route("r", "/", &[recorder.addr], "max_body = \"100\"\n"));
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(b"POST /stream HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await;
    // 60 bytes, then 60 more: the second chunk passes the limit.
    wire.send(format!("3c\r\n{}\r\n", "a".repeat(60)).as_bytes())
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    wire.send(format!("3c\r\n{}\r\n", "b".repeat(60)).as_bytes())
        .await;
    let answer = wire.response(false).await.expect("an answer");
    assert_eq!(
        answer.status,
        413,
        "{:?}",
        String::from_utf8_lossy(&answer.body)
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (bytes, requests) = recorder.take();
    assert_eq!(requests, 0, "the replica never got a whole request");
    assert!(!bytes.contains(&b'Z'), "nothing of the excess crossed");
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains(&"a".repeat(60)),
        "the first chunk went up: {text}"
    );
    let metrics = client::get(node.admin, "admin", "/metrics")
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains("picket_body_too_large_requests_total{route=\"r\"} 1"),
        "{metrics}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_answers_429_and_refills_on_time() {
    let (addr, seen) = replica(ok("x")).await;
    let node = TestNode::start(&route(
        "r",
        "/",
        &[addr],
        "rate = { per_second = 2, burst = 2 }\n",
    ));
    for _ in 0..2 {
        assert_eq!(
            client::get(node.proxy, "h", "/").await.unwrap().status,
            StatusCode::OK
        );
    }
    let limited = client::get(node.proxy, "h", "/").await.unwrap();
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.headers["retry-after"], "1");
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "the refused request never went up"
    );
    // Two a second: a token is back within 500 ms (and a little).
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        client::get(node.proxy, "h", "/").await.unwrap().status,
        StatusCode::OK
    );
    assert_eq!(
        client::get(node.proxy, "h", "/").await.unwrap().status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let (_, routes) = node.admin_json("/v1/routes").await;
    let rate = &routes["routes"][0]["limits"]["rate"];
    assert_eq!(rate["limited"], 2, "{routes}");
    assert_eq!(rate["by"], "route");
    let metrics = client::get(node.admin, "admin", "/metrics")
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains("picket_rate_limited_requests_total{route=\"r\"} 2"),
        "{metrics}"
    );
    node.stop().await;
}

/// `GET /` from a client bound to `from`.
async fn get_from(from: [u8; 4], to: SocketAddr) -> u16 {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from((from, 0)))
        .expect("loopback holds 127.0.0.0/8");
    let mut stream = socket.connect(to).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = Vec::new();
    stream.read_to_end(&mut text).await.unwrap();
    String::from_utf8_lossy(&text)[9..12].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_by_client_gives_each_client_its_own_bucket() {
    let (addr, _) = replica(ok("x")).await;
    let node = TestNode::start(&route(
        "r",
        "/",
        &[addr],
        "rate = { per_second = 0.5, burst = 1, by = \"client\" }\n",
    ));
    assert_eq!(get_from([127, 0, 0, 1], node.proxy).await, 200);
    assert_eq!(get_from([127, 0, 0, 1], node.proxy).await, 429);
    assert_eq!(
        get_from([127, 0, 0, 2], node.proxy).await,
        200,
        "another client"
    );
    assert_eq!(get_from([127, 0, 0, 2], node.proxy).await, 429);
    let (_, routes) = node.admin_json("/v1/routes").await;
    assert_eq!(routes["routes"][0]["limits"]["rate"]["clients"], 2);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_reopens_the_access_log_for_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let (addr, _) = replica(ok("x")).await;
    let routes = route("r", "/", &[addr], "");
    let node = picket_tests::process::NodeProcess::start_alone(
        &picket_tests::binaries::picket(),
        dir.path(),
        "rotated",
        &routes,
        &[("PICKET_ACCESS_LOG", log.to_str().unwrap())],
    );
    node.ready(Duration::from_secs(30)).await;
    let first = get_with(node.proxy, "h", "/", &[("x-request-id", "before")]).await;
    assert_eq!(first.status, StatusCode::OK);
    lines_with(&log, "before").await;
    // logrotate: move the file away, then signal.
    let moved = dir.path().join("access.log.1");
    std::fs::rename(&log, &moved).unwrap();
    let pid = node.pid().expect("running");
    let status = std::process::Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    eventually("the node logs the reopen", Duration::from_secs(10), || {
        node.log_text().contains("access log reopened")
    })
    .await;
    let second = get_with(node.proxy, "h", "/", &[("x-request-id", "after")]).await;
    assert_eq!(second.status, StatusCode::OK);
    lines_with(&log, "after").await;
    let old = std::fs::read_to_string(&moved).unwrap();
    assert!(
        old.contains("\"before\"") && !old.contains("\"after\""),
        "{old}"
    );
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("\"before\"")
    );
}

#[test]
fn picket_check_names_the_line_of_each_bad_day_two_setting() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    let cases = [
        (
            "[node]\naccess_log_format = \"xml\"\n",
            2,
            "access_log_format",
        ),
        (
            "[node]\naccess_log = \"no/such/dir/a.log\"\n",
            2,
            "its directory does not exist",
        ),
        ("[global]\nmax_body = \"ten megs\"\n", 2, "max_body"),
        ("[global]\nmax_body = 0\n", 2, "max_body"),
        (
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nstrip_prefix = true\n",
            4,
            "strip_prefix needs",
        ),
        (
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nadd_prefix = \"v2/\"\n",
            4,
            "add_prefix",
        ),
        (
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nadd_prefix = \"/a/../b\"\n",
            4,
            "add_prefix",
        ),
        (
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nrate = { per_second = 0 }\n",
            4,
            "per_second",
        ),
        (
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nrate = { burst = 3 }\n",
            4,
            "needs per_second",
        ),
        (
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nrate = { per_second = 1, burst = 0 }\n",
            4,
            "burst",
        ),
        (
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nrate = { per_second = 1, by = \"ip\" }\n",
            4,
            "rate.by",
        ),
        (
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nrequest_headers = { set = { \"bad name\" = \"1\" } }\n",
            4,
            "not a header name",
        ),
        (
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nrequest_headers = { set = { \"x-a\" = \"1\" }, remove = [\"X-A\"] }\n",
            4,
            "both set and removed",
        ),
        (
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nresponse_headers = { trailers = [\"content-length\"] }\n",
            4,
            "no rule may set, remove or admit it",
        ),
        (
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nrequest_headers = { trailers = [\"X-Client-IP\"] }\n",
            4,
            "never crosses in a trailer",
        ),
        (
            "[global]\nresponse_headers = { trailers = [\"a b\"] }\n",
            2,
            "not a header name",
        ),
    ];
    for (text, line, says) in cases {
        std::fs::write(&file, text).unwrap();
        let output = std::process::Command::new(picket_tests::binaries::picket())
            .arg("check")
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{text}");
        assert!(
            stderr.contains(&format!("bad.toml:{line}:")) && stderr.contains(says),
            "{text}: {stderr}"
        );
    }
    std::fs::write(
        &file,
        "[[route]]\nname = \"r\"\npath_prefix = \"/api\"\nreplicas = [\"127.0.0.1:9\"]\n\
         strip_prefix = true\nadd_prefix = \"/v2\"\nmax_body = \"10MiB\"\n\
         rate = { per_second = 0.5, by = \"client\" }\n",
    )
    .unwrap();
    let output = std::process::Command::new(picket_tests::binaries::picket())
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    for shown in [
        "strip_prefix = true",
        "add_prefix = \"/v2\"",
        "max_body = 10485760",
        "rate = { per_second = 0.5, burst = 1, by = \"client\" }",
        "access_log = \"stdout\"",
    ] {
        assert!(stdout.contains(shown), "{shown} in {stdout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_limits_answer_413_and_429() {
    let (addr, seen) = replica(ok("x")).await;
    let node = TestNode::start(&route(
        "r",
        "/",
        &[addr],
        "max_body = 10\nrate = { per_second = 0.1, burst = 2 }\n",
    ));
    let mut sender = h2_sender(node.proxy).await;
    let post = |body: &'static [u8]| {
        let mut req = Request::new(Full::new(Bytes::from_static(body)));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = "http://h2.test/up".parse().unwrap();
        req
    };
    let large = sender.send_request(post(&[b'a'; 11])).await.unwrap();
    assert_eq!(large.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let small = sender.send_request(post(b"0123456789")).await.unwrap();
    assert_eq!(small.status(), StatusCode::OK);
    let limited = sender.send_request(post(b"x")).await.unwrap();
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.headers()["retry-after"], "10");
    assert!(limited.headers().contains_key("x-request-id"));
    assert_eq!(seen.lock().unwrap().len(), 1, "only the small body went up");
    node.stop().await;
}
