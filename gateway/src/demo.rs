//! `picket demo`: a node on an embedded configuration, with its upstreams
//! started in the same process, so that one command shows Picket at work.
//!
//! - `web`: three healthy replicas that say which one answered;
//! - `slow`: one replica that takes 30 s to answer (first-answer bound 2 s:
//!   the client gets 504 at 2 s);
//! - `refused`: one replica whose port refuses connections (502 at once).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// The addresses of the demo upstreams.
#[derive(Debug, Clone)]
pub struct Upstreams {
    pub web: Vec<SocketAddr>,
    pub slow: SocketAddr,
    pub refused: SocketAddr,
}

/// How a demo replica answers.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    Healthy,
    Slow(Duration),
}

/// Starts the demo upstreams on loopback ports in the current runtime.
pub async fn start_upstreams() -> std::io::Result<Upstreams> {
    let mut web = Vec::new();
    for i in 1..=3 {
        web.push(serve(format!("web-{i}"), Behaviour::Healthy).await?);
    }
    let slow = serve("slow-1".into(), Behaviour::Slow(Duration::from_secs(30))).await?;
    // A port that was just free: nothing listens there, so connects are refused.
    let refused = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    Ok(Upstreams { web, slow, refused })
}

async fn serve(name: String, behaviour: Behaviour) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let name = name.clone();
            let service = service_fn(move |req: Request<Incoming>| {
                let name = name.clone();
                async move {
                    if let Behaviour::Slow(delay) = behaviour {
                        tokio::time::sleep(delay).await;
                    }
                    let body =
                        format!("hello from {name}: {} {}\n", req.method(), req.uri().path());
                    let mut response = Response::new(Full::new(Bytes::from(body)));
                    if let Ok(value) = http::HeaderValue::from_str(&name) {
                        response.headers_mut().insert("x-replica", value);
                    }
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    Ok(addr)
}

/// The demo's configuration file, naming the upstreams' real ports.
pub fn config_text(upstreams: &Upstreams) -> String {
    let web: Vec<String> = upstreams.web.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        r#"# picket demo: three routes on the demo upstreams
[node]
name = "demo"

[global]
connect_timeout = "2s"
first_answer_timeout = "5s"

[[route]]
name = "web"
path_prefix = "/"
replicas = [{web}]

[[route]]
name = "slow"
path_prefix = "/slow"
replicas = ["{slow}"]
first_answer_timeout = "2s"

[[route]]
name = "refused"
path_prefix = "/refused"
replicas = ["{refused}"]
"#,
        web = web.join(", "),
        slow = upstreams.slow,
        refused = upstreams.refused,
    )
}

/// What `picket demo` prints once it listens.
pub fn banner(config: &crate::config::Config) -> String {
    let proxy = config.node.listen.value;
    let admin = config.node.admin.value;
    format!(
        "Picket demo: a node on {proxy} with three routes.\n\
         \n  curl -i http://{proxy}/          # web: three replicas, answered in turn\n\
         \x20 curl -i http://{proxy}/slow      # slow: 504 after its 2 s first-answer bound\n\
         \x20 curl -i http://{proxy}/refused   # refused: 502 at once\n\
         \x20 curl http://{admin}/metrics      # requests by status class, ejections, retries\n\
         \nCtrl-C stops it.\n"
    )
}
