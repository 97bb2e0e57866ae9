//! A forward proxy for tests, as `HTTP_PROXY`/`HTTPS_PROXY` name one: it
//! takes absolute-form requests (`GET http://host:port/path HTTP/1.1`) and
//! `CONNECT host:port` tunnels, passes each on to where it names, and
//! records the first line of every request head it was asked.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The longest request head the proxy reads.
const MAX_HEAD: usize = 64 * 1024;

/// A running test forward proxy.
#[derive(Debug)]
pub struct ForwardProxy {
    pub addr: SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl ForwardProxy {
    /// A proxy that passes everything on.
    pub async fn start() -> ForwardProxy {
        ForwardProxy::start_with(None).await
    }

    /// A proxy that answers `status` to every `CONNECT` (and still passes
    /// absolute-form requests on).
    pub async fn refusing_tunnels(status: u16) -> ForwardProxy {
        ForwardProxy::start_with(Some(status)).await
    }

    async fn start_with(refuse: Option<u16>) -> ForwardProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a test proxy");
        let addr = listener.local_addr().expect("local address");
        let asked = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(serve(listener, refuse, Arc::clone(&asked)));
        ForwardProxy { addr, asked, task }
    }

    /// `http://127.0.0.1:port`, as `HTTP_PROXY` names it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The request lines asked so far, in order:
    /// `CONNECT 127.0.0.1:4443 HTTP/1.1`, `GET http://127.0.0.1:8080/x HTTP/1.1`.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("asked lock").clone()
    }
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, refuse: Option<u16>, asked: Arc<Mutex<Vec<String>>>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        connections.spawn(relay(stream, refuse, Arc::clone(&asked)));
    }
}

async fn relay(mut client: TcpStream, refuse: Option<u16>, asked: Arc<Mutex<Vec<String>>>) {
    // The head, and whatever came after it.
    let mut buf = Vec::new();
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        match client.read(&mut chunk).await {
            // A connect check: connected, asked nothing.
            Ok(0) | Err(_) => return,
            Ok(n) if buf.len() + n <= MAX_HEAD => buf.extend_from_slice(&chunk[..n]),
            Ok(_) => return,
        }
    };
    let line = String::from_utf8_lossy(&buf[..buf.iter().position(|b| *b == b'\r').unwrap_or(0)])
        .into_owned();
    asked.lock().expect("asked lock").push(line.clone());
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let tunnel = method == "CONNECT";
    let authority = if tunnel {
        target.to_string()
    } else {
        let Ok(uri) = target.parse::<http::Uri>() else {
            let _ = client
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
            return;
        };
        let Some(authority) = uri.authority() else {
            let _ = client
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
            return;
        };
        let port = authority.port_u16().unwrap_or(80);
        format!("{}:{port}", authority.host())
    };
    if let (true, Some(status)) = (tunnel, refuse) {
        let _ = client
            .write_all(format!("HTTP/1.1 {status} Refused\r\ncontent-length: 0\r\n\r\n").as_bytes())
            .await;
        return;
    }
    let Ok(mut upstream) = TcpStream::connect(authority.as_str()).await else {
        let _ = client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    let sent = if tunnel {
        let ok = client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await;
        // Anything sent after the head goes through the tunnel.
        ok.and(upstream.write_all(&buf[end..]).await)
    } else {
        // The origin server takes the absolute form too: passed on as asked.
        upstream.write_all(&buf).await
    };
    if sent.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
}
