//! No way into our network (SSRF): a URL we are asked to call must be
//! `https://` (plain `http://` only to networks the operator allows), and
//! every address its host resolves to is checked: loopback, private,
//! link-local, CGNAT, benchmarking, `0.0.0.0/8`, multicast, broadcast,
//! reserved, documentation, ULA, IPv6 link-local and the IPv4-mapped and
//! -compatible forms of any of them are refused unless allowed. The check
//! runs when the URL is given (422) and again at every send; the connection
//! then goes only to addresses that were checked (`GuardedResolver`), so a
//! name that resolves differently the second time (DNS rebinding) cannot
//! slip through.

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// Longest URL we keep.
pub const URL_LEN_MAX: usize = 2000;

/// Why an address or URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{0}")]
    Url(String),
    /// Which address, and why it is internal, are kept for the server's
    /// own log: the caller is told neither (nor whether the name resolved
    /// at all), so the guard answers no questions about a network it
    /// protects.
    #[error("{} cannot be called: {REFUSED_HOST}", host_of(.host))]
    Internal {
        host: String,
        addr: IpAddr,
        why: &'static str,
    },
    #[error("{} cannot be called: {REFUSED_HOST}", host_of(.0))]
    Unresolved(String),
}

/// The one reason given for a host that is internal or does not resolve.
const REFUSED_HOST: &str =
    "webhooks reach only hosts with public addresses (or the networks in TOLLGATE_WEBHOOK_ALLOW_NETWORKS)";

/// A host as the refusal names it: the name the caller gave, shortened.
fn host_of(host: &str) -> String {
    host.chars().take(255).collect()
}

/// What an address is, when it is not a public unicast address.
pub fn internal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

fn internal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "in 0.0.0.0/8 (this network)",
        (10, _, _) => "private (10.0.0.0/8)",
        (100, 64..=127, _) => "shared address space (100.64.0.0/10, CGNAT)",
        (127, _, _) => "loopback",
        (169, 254, _) => "link-local",
        (172, 16..=31, _) => "private (172.16.0.0/12)",
        (192, 0, 0) => "reserved for protocol assignments (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "reserved for documentation",
        (192, 88, 99) => "reserved (6to4 relay anycast)",
        (192, 168, _) => "private (192.168.0.0/16)",
        (198, 18..=19, _) => "reserved for benchmarking (198.18.0.0/15)",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved (240.0.0.0/4) or broadcast",
        _ => return None,
    })
}

fn internal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_loopback() {
        return Some("loopback");
    }
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    // IPv4-mapped (::ffff:a.b.c.d) and the old IPv4-compatible (::a.b.c.d):
    // judged as the IPv4 address they carry.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return internal_v4(v4).or(Some("an IPv4-mapped address"));
    }
    let s = ip.segments();
    if s[0..6] == [0, 0, 0, 0, 0, 0] {
        return internal_v4(Ipv4Addr::new(
            (s[6] >> 8) as u8,
            s[6] as u8,
            (s[7] >> 8) as u8,
            s[7] as u8,
        ))
        .or(Some("an IPv4-compatible address"));
    }
    Some(match s[0] {
        x if x & 0xfe00 == 0xfc00 => "unique local (fc00::/7)",
        x if x & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        x if x & 0xffc0 == 0xfec0 => "site-local (fec0::/10)",
        x if x & 0xff00 == 0xff00 => "multicast",
        0x2001 if s[1] == 0x0db8 => "reserved for documentation (2001:db8::/32)",
        0x2001 if s[1] < 0x0200 => "reserved (2001::/23)",
        // NAT64 (64:ff9b::/96) may reach anything behind it.
        0x0064 if s[1] == 0xff9b => "NAT64 (64:ff9b::/96)",
        0x2002 => "6to4 (2002::/16)",
        0x0100 if s[1..4] == [0, 0, 0] => "discard-only (100::/64)",
        _ => return None,
    })
}

/// The address guard: what the operator allows although it is internal,
/// and whether public addresses may be called at all.
#[derive(Clone, Debug)]
pub struct Guard {
    allow: Arc<Vec<IpNet>>,
    public: bool,
}

impl Default for Guard {
    fn default() -> Guard {
        Guard::new(Vec::new())
    }
}

impl Guard {
    pub fn new(allow: Vec<IpNet>) -> Guard {
        Guard {
            allow: Arc::new(allow),
            public: true,
        }
    }

    /// Only the allowed networks may be called (no public address): for
    /// a closed network, and for tests, which must call nothing else.
    pub fn allowed_networks_only(mut self) -> Guard {
        self.public = false;
        self
    }

    fn allowed_network(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        self.allow.iter().any(|n| n.contains(&ip))
    }

    /// `Err` names why `ip` may not be called.
    pub fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), Refused> {
        if self.allowed_network(ip) {
            return Ok(());
        }
        if !self.public {
            return Err(Refused::Internal {
                host: host.to_string(),
                addr: ip,
                why: "outside the networks webhooks may reach (TOLLGATE_WEBHOOK_ALLOW_PUBLIC is false)",
            });
        }
        match internal(ip) {
            None => Ok(()),
            Some(why) => Err(Refused::Internal {
                host: host.to_string(),
                addr: ip,
                why,
            }),
        }
    }

    /// A URL's shape: http(s), a host, no credentials, not too long.
    pub fn parse(&self, raw: &str) -> Result<reqwest::Url, Refused> {
        if raw.len() > URL_LEN_MAX {
            return Err(Refused::Url(format!("at most {URL_LEN_MAX} characters")));
        }
        let url = reqwest::Url::parse(raw).map_err(|e| Refused::Url(format!("not a URL ({e})")))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(Refused::Url("must be an https:// URL".into()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refused::Url(
                "must not carry a user name or password".into(),
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(Refused::Url("must name a host".into()));
        }
        Ok(url)
    }

    /// Resolves the URL's host and checks every address: all must be
    /// allowed, and plain http only to allowed networks. Returns the
    /// addresses to connect to.
    pub async fn check_url(&self, raw: &str) -> Result<(reqwest::Url, Vec<SocketAddr>), Refused> {
        let url = self.parse(raw)?;
        let host = url.host_str().unwrap_or_default().to_string();
        let port = url.port_or_known_default().unwrap_or(443);
        let addrs = self.resolve(&host, port).await?;
        if url.scheme() == "http" && !addrs.iter().all(|a| self.allowed_network(a.ip())) {
            return Err(Refused::Url(
                "must be https:// (plain http:// only to networks in TOLLGATE_WEBHOOK_ALLOW_NETWORKS)"
                    .into(),
            ));
        }
        Ok((url, addrs))
    }

    /// Every address of `host`, each checked; an IP literal is its own.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Refused> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((bare, port))
                .await
                .map_err(|_| Refused::Unresolved(host.to_string()))?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(Refused::Unresolved(host.to_string()));
        }
        for a in &addrs {
            self.check_ip(host, a.ip())?;
        }
        Ok(addrs)
    }
}

/// reqwest's resolver, through the guard: the client connects only to the
/// addresses that were checked, whatever the name resolves to later.
#[derive(Clone, Debug)]
pub struct GuardedResolver(pub Guard);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.0.clone();
        Box::pin(async move {
            let addrs = guard
                .resolve(name.as_str(), 0)
                .await
                .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) })?;
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &str) -> bool {
        internal(s.parse().unwrap()).is_some()
    }

    #[test]
    fn every_internal_range_is_refused() {
        for a in [
            "127.0.0.1",
            "127.255.255.254",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "198.18.0.1",
            "198.19.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.255",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "192.0.0.8",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2001:db8::1",
            "2002:a00:1::",
        ] {
            assert!(refused(a), "{a} must be refused");
        }
        for a in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "2606:4700:4700::1111",
        ] {
            assert!(!refused(a), "{a} is public");
        }
    }

    #[test]
    fn without_public_addresses_only_the_allowed_networks_pass() {
        let g = Guard::new(vec!["127.0.0.0/8".parse().unwrap()]).allowed_networks_only();
        assert!(g.check_ip("h", "127.0.0.1".parse().unwrap()).is_ok());
        assert!(g.check_ip("h", "1.1.1.1".parse().unwrap()).is_err());
    }

    #[test]
    fn allowed_networks_are_let_through_and_only_they() {
        let g = Guard::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(g.check_ip("h", "127.0.0.1".parse().unwrap()).is_ok());
        assert!(g.check_ip("h", "::ffff:127.0.0.1".parse().unwrap()).is_ok());
        assert!(g.check_ip("h", "::1".parse().unwrap()).is_err());
        assert!(g.check_ip("h", "10.0.0.1".parse().unwrap()).is_err());
    }

    #[test]
    fn urls_are_shaped_first() {
        let g = Guard::default();
        for bad in [
            "ftp://example.com/x",
            "https://user:pw@example.com/",
            "not a url",
            "https://",
            "file:///etc/passwd",
        ] {
            assert!(g.parse(bad).is_err(), "{bad}");
        }
        assert!(g
            .parse(&format!("https://e.com/{}", "a".repeat(2001)))
            .is_err());
        assert!(g.parse("https://example.com/hook").is_ok());
    }

    #[tokio::test]
    async fn names_and_literals_resolving_inside_are_refused() {
        let g = Guard::default();
        for url in [
            "https://127.0.0.1/hook",
            "https://[::1]/hook",
            "https://localhost/hook",
            "https://[::ffff:7f00:1]/hook",
            "https://0x7f000001/hook",
            "https://2130706433/hook",
        ] {
            let r = g.check_url(url).await;
            assert!(r.is_err(), "{url}: {r:?}");
        }
        // Allowed for tests: plain http to loopback, never to anything else.
        let g = Guard::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(g.check_url("http://127.0.0.1:9/hook").await.is_ok());
        let (_, addrs) = g
            .check_url("http://localhost:9/hook")
            .await
            .unwrap_or_else(|e| {
                // A resolver that also answers ::1 makes localhost refused
                // (::1 is not in the allowed network): that is the guard working.
                assert!(matches!(e, Refused::Internal { .. }), "{e}");
                (
                    reqwest::Url::parse("http://127.0.0.1:9/").unwrap(),
                    vec!["127.0.0.1:9".parse().unwrap()],
                )
            });
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
