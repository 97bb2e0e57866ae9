//! A chitchat transport whose every datagram is sealed ([`super::seal`]).
//!
//! chitchat encodes and decodes its messages only inside its own UDP
//! socket, so this transport keeps one of those on loopback as a codec:
//! - to send, chitchat's socket sends the message to a local tap socket;
//!   the bytes read there are sealed and sent to the peer;
//! - to receive, a datagram from the network is opened first; only an
//!   authentic one is handed to chitchat's socket (from a local feeder
//!   socket), and chitchat's answer is attributed to the real peer.
//!
//! So nothing that fails to verify is ever parsed. The local sockets
//! accept only each other: a datagram on the tap from anything but the
//! codec, or on the codec from anything but the feeder, is dropped, and
//! garbage on the codec is counted and logged once per episode, never
//! once per datagram ([`garbage`]). One received message is in the codec
//! at a time.
//!
//! ## Sender and recipient
//! Every packet names this node's advertised address as its sender, and
//! the address it is sent to as its recipient, or, for an answer to a
//! source address, the advertised address last heard from there. The
//! opener refuses this node's own packets and packets for other nodes,
//! knowing the node's advertised address and the address its socket is
//! bound to ([`Own`]). chitchat may gossip to this node's own address (an
//! earlier generation of itself, still in the view): such a packet is not
//! sent at all, so `replayed` counts only packets that really came back.

mod garbage;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use chitchat::ChitchatEnvelope;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket, Transport, UdpSocket as CodecSocket};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::seal::{Keys, MAX_DATAGRAM, Opener, Own, Sealer};
use crate::clock::now_unix_ms;
use crate::metrics::{Dropped, GossipMetrics};
use garbage::Garbage;

/// How long the codec may take to decode one handed-over message.
const DECODE_WAIT: Duration = Duration::from_secs(1);

/// Opens sealed sockets.
#[derive(Debug, Clone)]
pub struct SealedTransport {
    pub keys: Arc<ArcSwap<Keys>>,
    pub metrics: GossipMetrics,
    /// The address this node gossips as: every packet's sender.
    pub advertise: SocketAddr,
}

#[async_trait]
impl Transport for SealedTransport {
    async fn open(&self, listen: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let public = UdpSocket::bind(listen)
            .await
            .map_err(|e| anyhow::anyhow!("binding gossip to {listen}/udp: {e}"))?;
        self.open_on(public).await
    }
}

impl SealedTransport {
    /// A sealed socket on an already bound public socket.
    pub async fn open_on(&self, public: UdpSocket) -> anyhow::Result<Box<dyn Socket>> {
        Ok(Box::new(self.sealed(public).await?))
    }

    async fn sealed(&self, public: UdpSocket) -> anyhow::Result<SealedSocket> {
        let own = Own {
            advertise: self.advertise,
            bound: public.local_addr()?,
        };
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let codec = CodecSocket::open(loopback).await?;
        let tap = UdpSocket::bind(loopback).await?;
        let feeder = UdpSocket::bind(loopback).await?;
        let feeder_addr = feeder.local_addr()?;
        Ok(SealedSocket {
            codec_addr: codec.local_addr()?,
            tap_addr: tap.local_addr()?,
            feeder_addr,
            public,
            codec,
            tap,
            feeder,
            keys: Arc::clone(&self.keys),
            own,
            sealer: Sealer::new(self.advertise),
            opener: Opener::new(own),
            pending: None,
            buf: vec![0; MAX_DATAGRAM + 1].into_boxed_slice(),
            garbage: Garbage::new(feeder_addr, self.metrics.clone()),
            metrics: self.metrics.clone(),
        })
    }
}

/// A message handed to the codec, waiting to come out decoded.
#[derive(Debug, Clone, Copy)]
struct Pending {
    from: SocketAddr,
    deadline: Instant,
    received: usize,
}

/// What the codec made of what it received.
enum Decoded {
    Message(RecvOutcome),
    /// The message the feeder handed over was garbage.
    Undecodable,
}

struct SealedSocket {
    public: UdpSocket,
    codec: CodecSocket,
    codec_addr: SocketAddr,
    tap: UdpSocket,
    tap_addr: SocketAddr,
    feeder: UdpSocket,
    feeder_addr: SocketAddr,
    keys: Arc<ArcSwap<Keys>>,
    own: Own,
    sealer: Sealer,
    opener: Opener,
    pending: Option<Pending>,
    buf: Box<[u8]>,
    garbage: Garbage,
    metrics: GossipMetrics,
}

/// The codec's next message, with chitchat's warnings about garbage heard
/// by `garbage` instead of logged. Cancel-safe, as the codec's receive is.
async fn decode(codec: &mut CodecSocket, garbage: &mut Garbage) -> anyhow::Result<Decoded> {
    let mut recv = codec.recv();
    std::future::poll_fn(|cx| {
        let polled = garbage.listening(|| recv.as_mut().poll(cx));
        let garbled = garbage.tally(Instant::now());
        match polled {
            Poll::Ready(outcome) => Poll::Ready(outcome.map(Decoded::Message)),
            Poll::Pending if garbled => Poll::Ready(Ok(Decoded::Undecodable)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

fn transient(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::OutOfMemory
    )
}

#[async_trait]
impl Socket for SealedSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.public.local_addr()?)
    }

    async fn send(
        &mut self,
        to: SocketAddr,
        envelope: ChitchatEnvelope,
    ) -> anyhow::Result<SendOutcome> {
        if self.own.is(to) {
            return Ok(SendOutcome { num_bytes_sent: 0 });
        }
        self.codec.send(self.tap_addr, envelope).await?;
        let len = loop {
            let (len, from) = tokio::time::timeout(DECODE_WAIT, self.tap.recv_from(&mut self.buf))
                .await
                .map_err(|_| anyhow::anyhow!("the gossip codec did not encode in time"))??;
            if from == self.codec_addr {
                break len;
            }
            self.metrics.dropped(Dropped::Injected);
        };
        let keys = self.keys.load();
        let packets = self.sealer.seal(&keys, &self.buf[..len], to, now_unix_ms());
        let mut sent = 0;
        for packet in &packets {
            match self.public.send_to(packet, to).await {
                Ok(n) => sent += n,
                Err(e) if transient(&e) => {}
                Err(e) => return Err(anyhow::anyhow!("sending gossip to {to}: {e}")),
            }
        }
        self.metrics.sent(packets.len(), sent);
        Ok(SendOutcome {
            num_bytes_sent: sent,
        })
    }

    /// Cancel-safe: every await is a cancel-safe receive, and a message
    /// handed to the codec stays pending across calls.
    async fn recv(&mut self) -> anyhow::Result<RecvOutcome> {
        loop {
            if let Some(pending) = self.pending {
                let decoded = decode(&mut self.codec, &mut self.garbage);
                match tokio::time::timeout_at(pending.deadline, decoded).await {
                    Ok(Ok(Decoded::Message(outcome))) => {
                        if outcome.from_addr != self.feeder_addr {
                            self.metrics.dropped(Dropped::Injected);
                            continue;
                        }
                        self.pending = None;
                        return Ok(RecvOutcome {
                            from_addr: pending.from,
                            envelope: outcome.envelope,
                            num_bytes_received: pending.received,
                        });
                    }
                    Ok(Ok(Decoded::Undecodable)) => {
                        // Counted as undecodable when heard.
                        self.pending = None;
                        continue;
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(_) => {
                        self.pending = None;
                        self.metrics.dropped(Dropped::Undecodable);
                        continue;
                    }
                }
            }
            let (len, from) = match self.public.recv_from(&mut self.buf).await {
                Ok(received) => received,
                Err(e) if transient(&e) => continue,
                Err(e) => return Err(anyhow::anyhow!("receiving gossip: {e}")),
            };
            self.metrics.received(len);
            let keys = self.keys.load();
            match self.opener.open(&keys, &self.buf[..len], now_unix_ms()) {
                Ok(Some(opened)) => {
                    self.sealer.heard(from, opened.sender);
                    self.feeder
                        .send_to(&opened.message, self.codec_addr)
                        .await?;
                    self.pending = Some(Pending {
                        from,
                        deadline: Instant::now() + DECODE_WAIT,
                        received: len,
                    });
                }
                Ok(None) => {}
                Err(why) => self.metrics.dropped(why),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chitchat::{ChitchatMessage, ProtocolVersion};

    use super::*;
    use crate::gossip::seal::Key;
    use crate::testing::Captured;

    const SOON: Duration = Duration::from_secs(5);

    fn keys() -> Arc<ArcSwap<Keys>> {
        Arc::new(ArcSwap::from_pointee(
            Keys::new(vec![Key::new(&[7; 32])]).unwrap(),
        ))
    }

    /// A sealed socket bound to `bind`, gossiping as `advertise` (the
    /// bound address when `None`).
    async fn node(keys: &Arc<ArcSwap<Keys>>, bind: &str, advertise: Option<&str>) -> SealedSocket {
        let public = UdpSocket::bind(bind).await.unwrap();
        let port = public.local_addr().unwrap().port();
        let advertise = match advertise {
            Some(ip) => SocketAddr::new(ip.parse().unwrap(), port),
            None => public.local_addr().unwrap(),
        };
        let transport = SealedTransport {
            keys: Arc::clone(keys),
            metrics: GossipMetrics::default(),
            advertise,
        };
        transport.sealed(public).await.unwrap()
    }

    fn bad_cluster() -> ChitchatEnvelope {
        ChitchatEnvelope {
            version: ProtocolVersion::V1,
            message: ChitchatMessage::BadCluster,
        }
    }

    #[tokio::test]
    async fn garbage_on_the_codec_is_counted_and_logged_once() {
        let captured = Captured::default();
        let writer = captured.clone();
        let log = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || writer.clone())
            .finish();
        let _log = tracing::subscriber::set_default(log);
        let keys = keys();
        let (mut a, mut b) = (
            node(&keys, "127.0.0.1:0", None).await,
            node(&keys, "127.0.0.1:0", None).await,
        );
        let b_addr = b.own.advertise;

        // A stranger on the host sends garbage to b's codec, then a
        // message comes: it gets through, the garbage is counted.
        let stranger = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        for i in 0..50 {
            let noise = vec![0x5a; i % 7 * 10];
            stranger.send_to(&noise, b.codec_addr).await.unwrap();
        }
        a.send(b_addr, bad_cluster()).await.unwrap();
        let received = tokio::time::timeout(SOON, b.recv()).await.unwrap().unwrap();
        assert_eq!(received.from_addr, a.own.advertise);
        assert_eq!(received.envelope, bad_cluster());
        assert_eq!(b.metrics.dropped_count(Dropped::Injected), 50);

        // An authentic message that is not chitchat's: garbage the feeder
        // handed over, dropped as soon as the codec says so.
        let keys_now = keys.load();
        let sealed = a
            .sealer
            .seal(&keys_now, b"not chitchat", b_addr, now_unix_ms());
        a.public.send_to(&sealed[0], b_addr).await.unwrap();
        a.send(b_addr, bad_cluster()).await.unwrap();
        let received = tokio::time::timeout(SOON, b.recv()).await.unwrap().unwrap();
        assert_eq!(received.envelope, bad_cluster());
        assert_eq!(b.metrics.dropped_count(Dropped::Undecodable), 1);

        let log = captured.text();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("garbage on the gossip codec socket"))
            .collect();
        assert_eq!(lines.len(), 1, "one episode, one line:\n{log}");
        assert!(lines[0].contains(&stranger.local_addr().unwrap().to_string()));
        assert!(lines[0].contains("reason=\"injected\""), "{}", lines[0]);
        assert!(
            !log.contains("invalid-chitchat-payload"),
            "chitchat's own line per datagram:\n{log}"
        );
    }

    /// b is bound to every interface and gossips as 127.0.0.2; a as
    /// 127.0.0.3, but its packets leave from 127.0.0.1, as a node's behind
    /// NAT leave from an address it does not know as its own.
    #[tokio::test]
    async fn answers_reach_a_node_bound_to_every_interface() {
        let keys = keys();
        let (mut a, mut b) = (
            node(&keys, "0.0.0.0:0", Some("127.0.0.3")).await,
            node(&keys, "0.0.0.0:0", Some("127.0.0.2")).await,
        );
        a.send(b.own.advertise, bad_cluster()).await.unwrap();
        let asked = tokio::time::timeout(SOON, b.recv()).await.unwrap().unwrap();
        assert_ne!(
            asked.from_addr, a.own.advertise,
            "a's source is not its own"
        );
        // chitchat answers where the question came from.
        b.send(asked.from_addr, bad_cluster()).await.unwrap();
        let answer = tokio::time::timeout(SOON, a.recv()).await.unwrap().unwrap();
        assert_eq!(answer.envelope, bad_cluster());
        for node in [&a, &b] {
            assert_eq!(node.metrics.dropped_total(), 0);
        }
    }

    #[tokio::test]
    async fn nothing_is_sent_to_this_node_itself() {
        let keys = keys();
        let mut a = node(&keys, "0.0.0.0:0", Some("127.0.0.1")).await;
        let own = a.own.advertise;
        let outcome = a.send(own, bad_cluster()).await.unwrap();
        assert_eq!(outcome.num_bytes_sent, 0);
        assert_eq!(a.metrics.bytes_sent(), 0);
        let nothing = tokio::time::timeout(Duration::from_millis(200), a.recv()).await;
        assert!(nothing.is_err(), "nothing arrived");
        assert_eq!(a.metrics.packets_received(), 0);
    }
}
