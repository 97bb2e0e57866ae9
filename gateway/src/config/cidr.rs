//! Address ranges in CIDR notation, for `[global] trusted_proxies`: which
//! clients are proxies whose forwarding headers the node takes as true.
//!
//! A range is an address and a prefix length (`10.0.0.0/8`,
//! `2001:db8::/32`); a bare address is a range of one (`192.0.2.7`). A
//! range with bits set past its prefix (`10.1.2.3/8`) is refused rather
//! than rounded down: it is most often a typo for a single address or a
//! prefix, and the node cannot tell which. An IPv4-mapped IPv6 range
//! (`::ffff:10.0.0.0/104`) is read as the IPv4 range it maps, since
//! clients' addresses are compared in their canonical form.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// One range of addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a range does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error(
        "{0:?} is not an IP address or a CIDR range such as \"10.0.0.0/8\" or \"2001:db8::/32\""
    )]
    Malformed(String),
    #[error("{text:?}: the prefix length of an {family} range is at most {max}")]
    PrefixTooLong {
        text: String,
        family: &'static str,
        max: u8,
    },
    #[error("{text:?} has bits set past its prefix: the range is {network}")]
    HostBits { text: String, network: Cidr },
}

impl Cidr {
    /// Reads `10.0.0.0/8`, `2001:db8::/32` or a bare address.
    pub fn parse(text: &str) -> Result<Cidr, CidrError> {
        let malformed = || CidrError::Malformed(text.to_string());
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address.parse().map_err(|_| malformed())?;
        let max: u8 = match address {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let prefix = match prefix {
            None => u16::from(max),
            Some(digits) => {
                if digits.is_empty()
                    || digits.len() > 3
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(malformed());
                }
                digits.parse::<u16>().map_err(|_| malformed())?
            }
        };
        let Some(prefix) = u8::try_from(prefix).ok().filter(|p| *p <= max) else {
            return Err(CidrError::PrefixTooLong {
                text: text.to_string(),
                family: if max == 32 { "IPv4" } else { "IPv6" },
                max,
            });
        };
        let cidr = Cidr {
            network: masked(address, prefix),
            prefix,
        };
        if cidr.network != address {
            return Err(CidrError::HostBits {
                text: text.to_string(),
                network: cidr,
            });
        }
        Ok(cidr.canonical())
    }

    /// Whether `ip` is in the range; an IPv4-mapped IPv6 address counts
    /// as the IPv4 address it maps.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_canonical(),
            v4 => v4,
        };
        ip.is_ipv4() == self.network.is_ipv4() && masked(ip, self.prefix) == self.network
    }

    /// An IPv4-mapped IPv6 range as the IPv4 range it maps, when its
    /// prefix covers the mapping (96 bits or more).
    fn canonical(self) -> Cidr {
        match self.network {
            IpAddr::V6(v6) if self.prefix >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => Cidr {
                    network: IpAddr::V4(v4),
                    prefix: self.prefix - 96,
                },
                None => self,
            },
            _ => self,
        }
    }
}

/// `address` with every bit past `prefix` cleared.
fn masked(address: IpAddr, prefix: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

impl fmt::Display for Cidr {
    /// A range of one address is written as the address alone.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = match self.network {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if self.prefix == whole {
            write!(f, "{}", self.network)
        } else {
            write!(f, "{}/{}", self.network, self.prefix)
        }
    }
}

/// `[global] trusted_proxies`: the clients whose forwarding headers the
/// node appends to instead of replacing. Empty by default: no client is
/// trusted. Shared by every route, so cheap to clone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TrustedProxies(Arc<[Cidr]>);

impl TrustedProxies {
    pub fn new(ranges: Vec<Cidr>) -> TrustedProxies {
        TrustedProxies(ranges.into())
    }

    /// Whether a client at `ip` is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|range| range.contains(ip))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn ranges(&self) -> &[Cidr] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn ranges_and_single_addresses_parse_and_contain() {
        let table: &[(&str, &[&str], &[&str])] = &[
            (
                "10.0.0.0/8",
                &["10.0.0.0", "10.255.255.255", "::ffff:10.1.2.3"],
                &["11.0.0.0", "9.255.255.255", "::a00:1"],
            ),
            ("192.0.2.7", &["192.0.2.7"], &["192.0.2.6", "192.0.2.8"]),
            ("192.0.2.7/32", &["192.0.2.7"], &["192.0.2.6"]),
            ("0.0.0.0/0", &["1.2.3.4", "255.255.255.255"], &["::1"]),
            (
                "2001:db8::/32",
                &["2001:db8::1", "2001:db8:ffff::"],
                &["2001:db9::", "10.0.0.1"],
            ),
            ("::1", &["::1"], &["127.0.0.1", "::2"]),
            ("::/0", &["::1", "2001:db8::1"], &["127.0.0.1"]),
            // IPv4-mapped ranges are their IPv4 range.
            ("::ffff:10.0.0.0/104", &["10.9.9.9"], &["11.0.0.0"]),
        ];
        for (text, inside, outside) in table {
            let cidr = Cidr::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            for a in *inside {
                assert!(cidr.contains(ip(a)), "{a} in {text}");
            }
            for a in *outside {
                assert!(!cidr.contains(ip(a)), "{a} not in {text}");
            }
        }
    }

    #[test]
    fn malformed_ranges_are_refused_saying_why() {
        for text in [
            "",
            "10.0.0.0/",
            "10.0.0/8",
            "10.0.0.0/8/8",
            "10.0.0.0/+8",
            "10.0.0.0/ 8",
            " 10.0.0.0/8",
            "10.0.0.0/1000",
            "10.0.0.0/-1",
            "fe80::1%eth0",
            "example.com",
            "010.0.0.1",
        ] {
            assert_eq!(
                Cidr::parse(text),
                Err(CidrError::Malformed(text.to_string())),
                "{text:?}"
            );
        }
        assert!(matches!(
            Cidr::parse("10.0.0.0/33"),
            Err(CidrError::PrefixTooLong { max: 32, .. })
        ));
        assert!(matches!(
            Cidr::parse("10.0.0.0/256"),
            Err(CidrError::PrefixTooLong { max: 32, .. })
        ));
        assert!(matches!(
            Cidr::parse("2001:db8::/129"),
            Err(CidrError::PrefixTooLong { max: 128, .. })
        ));
        let host_bits = Cidr::parse("10.1.2.3/8").unwrap_err();
        assert_eq!(
            host_bits.to_string(),
            "\"10.1.2.3/8\" has bits set past its prefix: the range is 10.0.0.0/8"
        );
    }

    #[test]
    fn a_range_is_written_as_it_reads() {
        for (text, shown) in [
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("192.0.2.7", "192.0.2.7"),
            ("192.0.2.7/32", "192.0.2.7"),
            ("2001:db8::/32", "2001:db8::/32"),
            ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
        ] {
            let cidr = Cidr::parse(text).unwrap();
            assert_eq!(cidr.to_string(), shown);
            assert_eq!(Cidr::parse(shown), Ok(cidr));
        }
    }

    #[test]
    fn nobody_is_trusted_by_default() {
        let none = TrustedProxies::default();
        assert!(none.is_empty() && !none.contains(ip("127.0.0.1")));
        let some = TrustedProxies::new(vec![
            Cidr::parse("10.0.0.0/8").unwrap(),
            Cidr::parse("2001:db8::/32").unwrap(),
        ]);
        assert!(some.contains(ip("10.2.3.4")) && some.contains(ip("2001:db8::7")));
        assert!(!some.contains(ip("192.0.2.1")));
    }

    #[test]
    fn a_bad_range_names_file_line_and_column() {
        let text = "[global]\ntrusted_proxies = [\"10.0.0.0/8\", \"10.0.0.0/33\", \"proxy\"]\n";
        let error = crate::config::Config::parse("picket.toml", text)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("picket.toml:2:34: trusted_proxies: \"10.0.0.0/33\""),
            "{error}"
        );
        assert!(
            error.contains("picket.toml:2:49: trusted_proxies: \"proxy\" is not an IP address"),
            "{error}"
        );
        let good =
            "[global]\ntrusted_proxies = [\"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.7\"]\n";
        let config = crate::config::Config::parse("picket.toml", good).unwrap();
        assert_eq!(config.global.trusted_proxies.value.ranges().len(), 3);
    }
}
