//! `picket demo`: a three-node cluster on loopback, on embedded
//! configurations, with its upstreams started in the same process, so that
//! one command shows Picket at work. Node 3 sees `web` differently (it
//! lists one more replica, which refuses), so the cluster view shows a
//! disagreement.
//!
//! - `web`: three healthy replicas that say which one answered;
//! - `slow`: one replica that takes 30 s to answer (first-answer bound 2 s:
//!   the client gets 504 at 2 s);
//! - `refused`: one replica whose port refuses connections (502 at once);
//! - `flaky`: one replica that listens for [`FLAP`], then refuses for as
//!   long, and so on: its hearts turn red and green again, and the TUI's
//!   history of the route fills.

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

/// How long the flaky replica listens, and then refuses.
pub const FLAP: Duration = Duration::from_secs(20);

/// The addresses of the demo upstreams.
#[derive(Debug, Clone)]
pub struct Upstreams {
    pub web: Vec<SocketAddr>,
    pub slow: SocketAddr,
    pub refused: SocketAddr,
    pub flaky: SocketAddr,
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
    let flaky = flap("flaky-1".into()).await?;
    Ok(Upstreams {
        web,
        slow,
        refused,
        flaky,
    })
}

/// A healthy replica that listens for [`FLAP`], then closes its port and
/// its connections for as long, and so on.
async fn flap(name: String) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let mut listener = Some(listener);
        loop {
            if let Some(up) = listener.take() {
                let serving = tokio::spawn(accept(up, name.clone(), Behaviour::Healthy));
                tokio::time::sleep(FLAP).await;
                // Dropping the accept loop closes the port and, with it,
                // every connection it served.
                serving.abort();
            }
            tokio::time::sleep(FLAP).await;
            // The port was free a moment ago; if something took it, try
            // again after another period.
            listener = TcpListener::bind(addr).await.ok();
        }
    });
    Ok(addr)
}

async fn serve(name: String, behaviour: Behaviour) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(accept(listener, name, behaviour));
    Ok(addr)
}

/// Serves every connection of `listener` until dropped: its connections
/// are its own tasks' children and end with it.
async fn accept(listener: TcpListener, name: String, behaviour: Behaviour) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
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
                connections.spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Where one demo node listens.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub proxy: SocketAddr,
    pub admin: SocketAddr,
    pub gossip: SocketAddr,
    /// The QUIC feed for `picket-tui`.
    pub feed: SocketAddr,
}

/// The `i`th node's addresses: each port of the first plus `i`.
pub fn ports(first: Ports, i: u16) -> Ports {
    let shift = |a: SocketAddr| SocketAddr::new(a.ip(), a.port().saturating_add(i));
    Ports {
        proxy: shift(first.proxy),
        admin: shift(first.admin),
        gossip: shift(first.gossip),
        feed: shift(first.feed),
    }
}

/// The configuration of demo node `i` (0, 1, 2), naming the upstreams'
/// real ports. Node 3 (`i = 2`) also lists a replica that refuses, so it
/// alone sees `web` orange: the cluster disagrees about one route, and
/// node 3 serves another route table than the other two.
pub fn config_text(
    upstreams: &Upstreams,
    i: u16,
    first: Ports,
    key_file: &std::path::Path,
) -> String {
    let mut web: Vec<String> = upstreams.web.iter().map(|a| format!("\"{a}\"")).collect();
    if i == 2 {
        web.push(format!("\"{}\"", upstreams.refused));
    }
    let seed = first.gossip;
    format!(
        r#"# picket demo: node {n} of a three-node cluster on loopback
[node]
name = "demo-{n}"
feed = "{feed}"
access_log = "off"

[cluster]
id = "demo"
gossip = "{gossip}"
seeds = ["{seed}"]
key_file = "{key}"
gossip_interval = "500ms"

[global]
connect_timeout = "2s"
first_answer_timeout = "5s"
check_every = "2s"

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

[[route]]
name = "flaky"
path_prefix = "/flaky"
replicas = ["{flaky}"]
"#,
        n = i + 1,
        gossip = ports(first, i).gossip,
        feed = ports(first, i).feed,
        key = key_file.display(),
        web = web.join(", "),
        slow = upstreams.slow,
        refused = upstreams.refused,
        flaky = upstreams.flaky,
    )
}

/// What `picket demo` prints once it listens.
pub fn banner(first: Ports) -> String {
    let (proxy, admin) = (first.proxy, first.admin);
    let admin3 = ports(first, 2).admin;
    let feed = first.feed;
    format!(
        "Picket demo: three nodes on loopback, gossiping their verdicts.\n\
         Node 1 proxies on {proxy} (nodes 2 and 3 on the next ports), status API on {admin}.\n\
         \n  curl -i http://{proxy}/          # web: three replicas, answered in turn\n\
         \x20 curl -i http://{proxy}/slow      # slow: 504 after its 2 s first-answer bound\n\
         \x20 curl -i http://{proxy}/refused   # refused: 502 at once\n\
         \x20 curl -i http://{proxy}/flaky     # flaky: up 20 s, down 20 s; watch its history\n\
         \x20 curl http://{admin}/v1/cluster   # every node's verdicts, liveness and age\n\
         \x20 curl http://{admin}/v1/routes/web   # web on every node: node 3 disagrees\n\
         \x20 curl http://{admin3}/v1/routes   # node 3's own view, with its ejected replica\n\
         \x20 curl http://{admin}/metrics      # requests, ejections, gossip\n\
         \nWatch every node's view side by side (the feed's certificate is\n         generated at start; on loopback the demo may skip pinning it):\n         \n  picket-tui --insecure {feed}\n         \nCtrl-C stops it.\n"
    )
}
