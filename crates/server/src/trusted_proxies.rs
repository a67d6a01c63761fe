//! `forwarded_allow_ips`: which peers may set the client address and scheme through
//! `X-Forwarded-For` / `X-Forwarded-Proto`.
//!
//! Only a trusted peer's headers are believed; the client address is the right-most entry of
//! `X-Forwarded-For` that is not itself a trusted proxy (entries to its left could be forged
//! by the client). Unix-socket peers are trusted (only a local proxy can reach them), as in
//! gunicorn. The RFC 7239 `Forwarded` header is not read yet (docs/settings.md says so).
//!
//! One parsed value per worker, shared by whatever reports the client (the WSGI environ
//! today). It only parses and matches: it must not read requests or know of Python (the
//! `python` crate turns a [`TrustedProxiesError`] into a `ValueError`).

use std::net::IpAddr;

use crate::listener::Peer;

/// Why a `forwarded_allow_ips` entry was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrustedProxiesError {
    /// The entry (as given) is neither an IP address nor a network.
    NotAnAddress(String),
    /// The entry's prefix length is not a number within its address's width.
    BadPrefix(String),
}

impl std::fmt::Display for TrustedProxiesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrustedProxiesError::NotAnAddress(entry) => write!(
                f,
                "forwarded_allow_ips: '{entry}' is not an IP address or network"
            ),
            TrustedProxiesError::BadPrefix(entry) => {
                write!(f, "forwarded_allow_ips: bad prefix in '{entry}'")
            }
        }
    }
}

impl std::error::Error for TrustedProxiesError {}

/// One allowed network (an address and a prefix length).
#[derive(Clone, Debug)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl Network {
    fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(self.prefix))
                };
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(self.prefix))
                };
                u128::from(net) & mask == u128::from(ip) & mask
            }
            (IpAddr::V6(_), IpAddr::V4(ip)) => self.contains(IpAddr::V6(ip.to_ipv6_mapped())),
            (IpAddr::V4(_), IpAddr::V6(ip)) => ip
                .to_ipv4_mapped()
                .is_some_and(|v4| self.contains(IpAddr::V4(v4))),
        }
    }
}

/// The parsed `forwarded_allow_ips` setting.
#[derive(Clone, Debug)]
pub enum TrustedProxies {
    /// `*`: every peer.
    Any,
    /// These networks only (possibly none).
    Networks(Vec<Network>),
}

impl TrustedProxies {
    /// Parses entries like `127.0.0.1`, `10.0.0.0/8`, `::1`, `*`.
    pub fn parse(entries: &[String]) -> Result<TrustedProxies, TrustedProxiesError> {
        let mut networks = Vec::new();
        for entry in entries {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            if entry == "*" {
                return Ok(TrustedProxies::Any);
            }
            let (addr, prefix) = match entry.split_once('/') {
                Some((addr, prefix)) => (addr, Some(prefix)),
                None => (entry, None),
            };
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| TrustedProxiesError::NotAnAddress(entry.to_string()))?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix = match prefix {
                Some(text) => text
                    .parse::<u8>()
                    .ok()
                    .filter(|&p| p <= max)
                    .ok_or_else(|| TrustedProxiesError::BadPrefix(entry.to_string()))?,
                None => max,
            };
            networks.push(Network { addr, prefix });
        }
        Ok(TrustedProxies::Networks(networks))
    }

    /// Whether `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        match self {
            TrustedProxies::Any => true,
            TrustedProxies::Networks(networks) => {
                networks.iter().any(|network| network.contains(ip))
            }
        }
    }

    /// Whether `peer`'s X-Forwarded-* headers are believed: a Unix-socket peer always, a TCP
    /// peer when its address is a trusted proxy.
    pub fn trusts_peer(&self, peer: Peer) -> bool {
        match peer {
            Peer::Tcp(addr) => !self.is_empty() && self.trusts(addr.ip()),
            Peer::Unix => true,
        }
    }

    /// True when no peer is trusted (the common fast path: skip header inspection).
    pub fn is_empty(&self) -> bool {
        matches!(self, TrustedProxies::Networks(networks) if networks.is_empty())
    }

    /// The client address from the `X-Forwarded-For` field lines, given last line first (the
    /// lines form one list, RFC 9110 5.3): the right-most entry that is not itself a trusted
    /// proxy, or the left-most when all are. Entries are split and parsed as bytes, so what a
    /// client wrote left of its proxy's entry (invalid UTF-8, `unknown`) is never read;
    /// `[v6]`, `v4:port` and `[v6]:port` forms are understood. `None` when that entry is not
    /// an address (the caller keeps the peer's).
    pub fn client_from<'v>(
        &self,
        lines_last_first: impl Iterator<Item = &'v [u8]>,
    ) -> Option<IpAddr> {
        let mut last = None;
        for line in lines_last_first {
            for entry in line.rsplit(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if entry.is_empty() {
                    continue;
                }
                match parse_forwarded_address(entry) {
                    Some(ip) if self.trusts(ip) => last = Some(ip),
                    found => return found,
                }
            }
        }
        last
    }
}

/// An `X-Forwarded-For` entry as an address: `1.2.3.4`, `2001:db8::1`, `[2001:db8::1]`,
/// `1.2.3.4:5678` or `[2001:db8::1]:5678`.
fn parse_forwarded_address(entry: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(entry).ok()?;
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, _port) = rest.split_once(']')?;
        return inside.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let (host, port) = text.split_once(':')?;
    if port.bytes().all(|b| b.is_ascii_digit()) {
        return host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(list: &[&str]) -> TrustedProxies {
        TrustedProxies::parse(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn trusts_addresses_inside_allowed_networks_only() {
        let trusted = proxies(&["10.0.0.0/8", "::1"]);
        assert!(trusted.trusts("10.1.2.3".parse().unwrap()));
        assert!(!trusted.trusts("11.0.0.1".parse().unwrap()));
        assert!(trusted.trusts("::1".parse().unwrap()));
    }

    #[test]
    fn client_is_the_rightmost_untrusted_forwarded_entry() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let one = |line: &'static str| trusted.client_from([line.as_bytes()].into_iter());
        assert_eq!(one("6.6.6.6, 1.2.3.4, 10.0.0.2"), Some(ip("1.2.3.4")));
        assert_eq!(one("10.0.0.3"), Some(ip("10.0.0.3")));
        assert_eq!(one("[2001:db8::1]:443, 10.0.0.2"), Some(ip("2001:db8::1")));
        assert_eq!(one("1.2.3.4:5678"), Some(ip("1.2.3.4")));
        assert_eq!(one("unknown"), None);
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn what_a_client_wrote_left_of_its_proxys_entry_is_never_read() {
        let trusted = proxies(&["10.0.0.0/8"]);
        // Invalid UTF-8 and junk on the left; the proxy appended the real address.
        let line: &[u8] = b"\xff\xfe, unknown, 1.2.3.4";
        assert_eq!(trusted.client_from([line].into_iter()), Some(ip("1.2.3.4")));
    }

    #[test]
    fn repeated_lines_form_one_list_read_from_the_last() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let lines: [&[u8]; 2] = [b"10.0.0.9", b"6.6.6.6, 10.0.0.1"];
        // Given last line first: 10.0.0.1 (trusted), 6.6.6.6 (the client).
        assert_eq!(trusted.client_from(lines.into_iter()), Some(ip("6.6.6.6")));
    }

    #[test]
    fn rejects_malformed_entries() {
        assert!(TrustedProxies::parse(&["nope".to_string()]).is_err());
        assert!(TrustedProxies::parse(&["10.0.0.0/33".to_string()]).is_err());
    }
}
