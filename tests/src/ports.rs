//! Ports for processes the tests start, which must be told theirs before
//! they bind (`picket run --listen`, `picket demo`, containers).
//!
//! A port found by binding port 0 and letting it go comes from the
//! kernel's ephemeral range, the very range every other test's outgoing
//! connections and port-0 listeners draw from: by the time the child binds
//! it, another socket may hold it. These come from just below that range,
//! where the kernel hands nothing out unasked; each is handed out at most
//! once per test process (a process-wide counter, started at an offset of
//! this process's own), and only when it is free for TCP and UDP alike.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};

/// How many ports below the ephemeral range are used.
const SPAN: u32 = 12_000;

/// The first port of the kernel's ephemeral range (32768 by default).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// The ports handed out so far in this process, counted from an offset.
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

fn free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
        && UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// The first of `n` consecutive loopback ports, free for TCP and UDP and
/// never handed out before in this process.
pub fn consecutive(n: u16) -> u16 {
    let top = ephemeral_start().clamp(2_048, 65_536);
    let bottom = top.saturating_sub(SPAN).max(1_024);
    let span = top - bottom;
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7_919) % span,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    for _ in 0..span {
        let at = NEXT.fetch_add(u32::from(n), Ordering::AcqRel) % span;
        if at + u32::from(n) > span {
            continue;
        }
        let Ok(first) = u16::try_from(bottom + at) else {
            continue;
        };
        if (0..n).all(|i| free(first + i)) {
            return first;
        }
    }
    panic!("no {n} consecutive free ports between {bottom} and {top}");
}

/// One loopback port, free for TCP and UDP and never handed out before in
/// this process.
pub fn free_port() -> u16 {
    consecutive(1)
}

/// A loopback address that refuses connections for as long as the value
/// lives: a socket bound to it and not listening. A port found by binding
/// and letting go refuses only until another test's listener takes it,
/// which turned a replica meant to be down into one that answers.
pub struct Refusing {
    _socket: tokio::net::TcpSocket,
    pub addr: SocketAddr,
}

/// See [`Refusing`].
pub fn refusing() -> Refusing {
    let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
    socket
        .bind((Ipv4Addr::LOCALHOST, 0).into())
        .expect("a loopback port");
    let addr = socket.local_addr().expect("its address");
    Refusing {
        _socket: socket,
        addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_handed_out_twice() {
        let top = ephemeral_start();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let port = free_port();
            assert!(u32::from(port) < top, "{port} is ephemeral");
            assert!(seen.insert(port), "{port} handed out twice");
        }
        let first = consecutive(3);
        for port in first..first + 3 {
            assert!(seen.insert(port), "{port} handed out twice");
        }
    }

    #[test]
    fn a_refusing_address_refuses_and_keeps_its_port() {
        let refusing = refusing();
        let refused = std::net::TcpStream::connect(refusing.addr).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        assert!(
            TcpListener::bind(refusing.addr).is_err(),
            "no other listener may take its port"
        );
    }
}
