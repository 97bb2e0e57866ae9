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
//! codec, or on the codec from anything but the feeder, is dropped.
//! One received message is in the codec at a time.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use chitchat::ChitchatEnvelope;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket, Transport, UdpSocket as CodecSocket};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::seal::{Dropped, Keys, MAX_DATAGRAM, Opener, Sealer};
use crate::metrics::GossipMetrics;
use crate::verdict::board::now_unix_ms;

/// How long the codec may take to decode one handed-over message.
const DECODE_WAIT: Duration = Duration::from_secs(1);

/// Opens sealed sockets.
#[derive(Debug, Clone)]
pub struct SealedTransport {
    pub keys: Arc<ArcSwap<Keys>>,
    pub metrics: GossipMetrics,
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
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let codec = CodecSocket::open(loopback).await?;
        let tap = UdpSocket::bind(loopback).await?;
        let feeder = UdpSocket::bind(loopback).await?;
        Ok(Box::new(SealedSocket {
            codec_addr: codec.local_addr()?,
            tap_addr: tap.local_addr()?,
            feeder_addr: feeder.local_addr()?,
            public,
            codec,
            tap,
            feeder,
            keys: Arc::clone(&self.keys),
            sealer: Sealer::new(),
            opener: Opener::default(),
            pending: None,
            buf: vec![0; MAX_DATAGRAM + 1].into_boxed_slice(),
            metrics: self.metrics.clone(),
        }))
    }
}

/// A message handed to the codec, waiting to come out decoded.
#[derive(Debug, Clone, Copy)]
struct Pending {
    from: SocketAddr,
    deadline: Instant,
    received: usize,
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
    sealer: Sealer,
    opener: Opener,
    pending: Option<Pending>,
    buf: Box<[u8]>,
    metrics: GossipMetrics,
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
        let packets = self.sealer.seal(&keys, &self.buf[..len], now_unix_ms());
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
                match tokio::time::timeout_at(pending.deadline, self.codec.recv()).await {
                    Ok(outcome) => {
                        let outcome = outcome?;
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
            match self
                .opener
                .open(&keys, &self.buf[..len], from, now_unix_ms())
            {
                Ok(Some(message)) => {
                    self.feeder.send_to(&message, self.codec_addr).await?;
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
