//! The addresses peers and operators reach this node at.

use std::net::{SocketAddr, UdpSocket as StdUdpSocket};

use crate::config::ClusterSettings;

/// The address peers reach this node at: configured, the bound address,
/// or the local address of the route towards the first seed that resolves.
pub(super) async fn discover(settings: &ClusterSettings, bound: SocketAddr) -> SocketAddr {
    if let Some(addr) = settings.advertise {
        return addr;
    }
    if !bound.ip().is_unspecified() {
        return bound;
    }
    for seed in &settings.seeds {
        let Ok(mut addrs) = tokio::net::lookup_host(seed.as_str()).await else {
            continue;
        };
        let Some(seed) = addrs.next() else { continue };
        let local = if seed.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        if let Ok(probe) = StdUdpSocket::bind(local)
            && probe.connect(seed).is_ok()
            && let Ok(addr) = probe.local_addr()
        {
            return SocketAddr::new(addr.ip(), bound.port());
        }
    }
    tracing::warn!(%bound, "no advertise address and no seed to derive one from; peers cannot reach this node's gossip");
    SocketAddr::new([127, 0, 0, 1].into(), bound.port())
}

/// A listener's address as peers and operators reach it: one bound to
/// every interface is reached at the gossip advertise address's IP.
pub(super) fn reachable(bound: &str, advertise: SocketAddr) -> String {
    match bound.parse::<SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() && !advertise.ip().is_unspecified() => {
            SocketAddr::new(advertise.ip(), addr.port()).to_string()
        }
        _ => bound.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_on_every_interface_is_reached_at_the_advertised_ip() {
        let advertise: SocketAddr = "10.0.0.7:7946".parse().unwrap();
        assert_eq!(reachable("0.0.0.0:9900", advertise), "10.0.0.7:9900");
        assert_eq!(reachable("127.0.0.1:9900", advertise), "127.0.0.1:9900");
        assert_eq!(
            reachable("0.0.0.0:9900", "0.0.0.0:7946".parse().unwrap()),
            "0.0.0.0:9900"
        );
        assert_eq!(reachable("not an address", advertise), "not an address");
    }

    #[tokio::test]
    async fn a_configured_or_bound_address_is_advertised_as_it_is() {
        let mut settings = ClusterSettings {
            id: "test".into(),
            gossip: "0.0.0.0:7946".parse().unwrap(),
            advertise: None,
            seeds: Vec::new(),
            key_file: None,
            insecure: true,
            gossip_interval: std::time::Duration::from_secs(1),
        };
        let bound: SocketAddr = "127.0.0.3:7946".parse().unwrap();
        assert_eq!(discover(&settings, bound).await, bound);
        settings.advertise = Some("10.1.2.3:17946".parse().unwrap());
        assert_eq!(
            discover(&settings, bound).await,
            settings.advertise.unwrap()
        );
    }
}
