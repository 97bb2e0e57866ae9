//! What an idle client connection costs the node in heap: ten thousand
//! idle clients must not hold ten thousand copies of a buffer they are not
//! using. A node runs in this process, proxying to a replica that answers
//! as nginx does (a few header fields and a 100-byte body); the test
//! counts every byte this process holds (a counting global allocator),
//! opens [`CLIENTS`] connections one after the other, has each ask one
//! request, read its answer and stay open, then counts again. The clients
//! are blocking sockets on a thread of their own, allocating nothing while
//! they connect and read: the difference is the node's.
//!
//! The HTTP/2 client asks as browsers and curl do, its `:authority` and
//! `user-agent` inserted into the decoder's table (a literal with
//! incremental indexing): a table entry that shares the read buffer it was
//! read from would keep the whole buffer as long as the connection lives;
//! so would an answer's header field kept in the encoder's table.
//!
//! `tests/bench/idle.sh` measures the same beside nginx, as resident
//! memory.

use std::alloc::System;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use cap::Cap;
use picket_test_upstream::RawUpstream;
use picket_tests::node::TestNode;
use picket_tests::wire::{H2_PREFACE, h2_frame};

/// Counts the bytes this process holds from the heap.
#[global_allocator]
static HEAP: Cap<System> = Cap::new(System, usize::MAX);

fn held() -> isize {
    HEAP.allocated() as isize
}

/// Idle clients per measurement.
const CLIENTS: usize = 500;

/// Heap per idle connection, at most (this test's build: without the
/// release profile's optimisation, futures are larger). HTTP/1.1: the
/// connection's task and its socket's registration, 1.2 kB measured (nginx
/// holds about 600 bytes of memory per idle connection). HTTP/2: the same,
/// the protocol's state (settings, both HPACK tables and their entries)
/// and nothing else: no read, write or Huffman buffer, no room for streams
/// or frames, 6.8 kB measured. The published h2 keeps 28 kB of buffers for
/// a connection's life, and its stream and frame tables' room after their
/// last stream: about 47 kB in all (the node carries h2 with a change of
/// its own, `gateway/vendor/h2`). `tests/bench/idle.sh` asks at most 8 kB
/// of resident memory of the release build.
const HTTP1_MOST: isize = 2 * 1024;
const HTTP2_MOST: isize = 8 * 1024;

/// The replica's answer: nginx's header fields, a 100-byte body.
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\n\
Date: Sat, 05 Dec 2026 12:00:00 GMT\r\nContent-Type: application/octet-stream\r\n\
Content-Length: 100\r\nLast-Modified: Sat, 05 Dec 2026 11:00:00 GMT\r\n\
Connection: close\r\nETag: \"6751a1b0-64\"\r\nAccept-Ranges: bytes\r\n\r\n\
0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789";

#[derive(Clone, Copy, Debug)]
enum Protocol {
    Http1,
    Http2,
}

/// What each client sends: one request, whole.
fn request(protocol: Protocol, authority: &str) -> Vec<u8> {
    match protocol {
        Protocol::Http1 => {
            format!("GET / HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: idle/1\r\n\r\n")
                .into_bytes()
        }
        Protocol::Http2 => {
            let agent = b"idle/1 (a client that stays)";
            // :method GET, :scheme http, :path /, then :authority (static
            // index 1) and user-agent (58) as literals with incremental
            // indexing, not Huffman-coded.
            let mut block = vec![0x82, 0x86, 0x84, 0x41, authority.len() as u8];
            block.extend_from_slice(authority.as_bytes());
            block.extend_from_slice(&[0x7a, agent.len() as u8]);
            block.extend_from_slice(agent);
            let mut out = H2_PREFACE.to_vec();
            out.extend(h2_frame(4, 0, 0, &[]));
            out.extend(h2_frame(1, 0x5, 1, &block));
            out
        }
    }
}

/// Reads one answer whole: through the body's end (HTTP/1.1, 100 bytes
/// after the head) or stream 1's END_STREAM (HTTP/2), acknowledging the
/// node's SETTINGS. Panics on anything else.
fn read_answer(protocol: Protocol, stream: &mut TcpStream, buf: &mut [u8]) {
    match protocol {
        Protocol::Http1 => {
            let mut seen = 0;
            loop {
                let n = stream.read(&mut buf[seen..]).expect("read the answer");
                assert!(n > 0, "the node closed before answering");
                seen += n;
                let text = &buf[..seen];
                if let Some(end) = text.windows(4).position(|w| w == b"\r\n\r\n") {
                    assert!(
                        text.starts_with(b"HTTP/1.1 200"),
                        "answered {:?}",
                        String::from_utf8_lossy(&text[..end])
                    );
                    if seen >= end + 4 + 100 {
                        return;
                    }
                }
            }
        }
        Protocol::Http2 => loop {
            let mut head = [0u8; 9];
            stream.read_exact(&mut head).expect("read a frame's head");
            let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            stream
                .read_exact(&mut buf[..length])
                .expect("read a frame's payload");
            if kind == 4 && flags & 1 == 0 {
                stream
                    .write_all(&h2_frame(4, 1, 0, &[]))
                    .expect("acknowledge SETTINGS");
            }
            if kind == 1 && id == 1 {
                // :status 200 is static index 8.
                assert_eq!(buf[0], 0x88, "the answer is not a 200");
            }
            if id == 1 && (kind == 0 || kind == 1) && flags & 1 != 0 {
                return;
            }
        },
    }
}

/// Opens `clients` connections one after the other, each answered once
/// and left open; returns them.
fn open_idle(node: SocketAddr, protocol: Protocol, clients: usize) -> Vec<TcpStream> {
    let ask = request(protocol, &node.to_string());
    let mut buf = vec![0u8; 64 * 1024];
    let mut open = Vec::with_capacity(clients);
    for _ in 0..clients {
        let mut stream = TcpStream::connect(node).expect("connect to the node");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        stream.write_all(&ask).expect("send the request");
        read_answer(protocol, &mut stream, &mut buf);
        open.push(stream);
    }
    open
}

/// Heap the node holds for each of [`CLIENTS`] idle connections.
async fn held_per_connection(node: SocketAddr, protocol: Protocol) -> isize {
    let settle = || tokio::time::sleep(Duration::from_millis(500));
    // Warm: the runtime's and the pools' first allocations are not a
    // connection's.
    let warm = tokio::task::spawn_blocking(move || open_idle(node, protocol, CLIENTS))
        .await
        .expect("the clients");
    drop(warm);
    settle().await;
    let before = held();
    let idle = tokio::task::spawn_blocking(move || open_idle(node, protocol, CLIENTS))
        .await
        .expect("the clients");
    settle().await;
    let after = held();
    // The clients' own allocation: the vector of their sockets.
    let clients = (idle.capacity() * std::mem::size_of::<TcpStream>()) as isize;
    drop(idle);
    (after - before - clients) / CLIENTS as isize
}

/// One worker thread: an idle HTTP/1.1 connection gives its buffers to its
/// thread's shelf (`server/spare.rs`), which the next connection on that
/// thread takes them from; with one shelf, clients one after the other
/// leave it as they found it, and the count is the same from run to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn an_idle_connection_holds_no_buffer_it_is_not_using() {
    let replica = RawUpstream::start(ANSWER).await;
    let node = TestNode::start(&format!(
        "[node]\nidle_timeout = \"300s\"\n[[route]]\nname = \"idle\"\nreplicas = [\"{}\"]\n",
        replica.addr
    ));
    let http1 = held_per_connection(node.proxy, Protocol::Http1).await;
    let http2 = held_per_connection(node.proxy, Protocol::Http2).await;
    eprintln!("heap per idle connection: HTTP/1.1 {http1} bytes, HTTP/2 {http2} bytes");
    assert!(
        http1 <= HTTP1_MOST,
        "an idle HTTP/1.1 connection holds {http1} bytes"
    );
    assert!(
        http2 <= HTTP2_MOST,
        "an idle HTTP/2 connection holds {http2} bytes"
    );
}
