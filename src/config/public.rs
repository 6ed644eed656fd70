//! Settings for a node strangers can reach: how many connections it keeps
//! (in all, from one address) and for how long one may sit idle, which
//! proxies it believes about a client's address, which `Host` names it
//! answers (so a page using DNS rebinding cannot talk to it), and the
//! one-time token that guards first-run set-up.

use super::ConfigError;
use std::net::IpAddr;
use std::time::Duration;

/// Connections the node keeps open at once, in all, when not set: far
/// below a default descriptor limit once raised (see `serve`), and far
/// above what a studio's traffic needs.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Connections from one address at once: a browser opens 6 per host, an
/// office behind one NAT some dozens of browsers.
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 256;
/// How long a connection may sit with no request in flight and nothing
/// read or written before it is closed.
pub const DEFAULT_IDLE_CONNECTION: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct Exposure {
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    pub idle_connection: Duration,
    /// Peers whose `X-Forwarded-For` is believed (a reverse proxy), and who
    /// are not held to the per-address connection cap.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    pub allowed_hosts: AllowedHosts,
    /// The set-up token the operator chose (`TOLLGATE_SETUP_TOKEN`); when
    /// unset, `serve` makes one up and prints it.
    pub setup_token: Option<String>,
}

/// The `Host` names the node answers besides IP literals, `localhost` and
/// the public URL's host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowedHosts {
    Any,
    Names(Vec<String>),
}

impl Default for Exposure {
    fn default() -> Self {
        Exposure {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            idle_connection: DEFAULT_IDLE_CONNECTION,
            trusted_proxies: Vec::new(),
            allowed_hosts: AllowedHosts::Names(Vec::new()),
            setup_token: None,
        }
    }
}

impl Exposure {
    pub(super) fn from_lookup(
        non_empty: impl Fn(&str) -> Option<String>,
    ) -> Result<Exposure, ConfigError> {
        let count = |name: &'static str, default: usize, max: usize| match non_empty(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| {
                    ConfigError::new(name, format!("{v:?} is not a number from 1 to {max}"))
                }),
        };
        let idle_seconds = count(
            "TOLLGATE_IDLE_CONNECTION_SECONDS",
            DEFAULT_IDLE_CONNECTION.as_secs() as usize,
            3600,
        )?;
        Ok(Exposure {
            max_connections: count(
                "TOLLGATE_MAX_CONNECTIONS",
                DEFAULT_MAX_CONNECTIONS,
                1_000_000,
            )?,
            max_connections_per_address: count(
                "TOLLGATE_MAX_CONNECTIONS_PER_ADDRESS",
                DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
                1_000_000,
            )?,
            idle_connection: Duration::from_secs(idle_seconds as u64),
            trusted_proxies: trusted_proxies(non_empty("TOLLGATE_TRUSTED_PROXIES"))?,
            allowed_hosts: allowed_hosts(non_empty("TOLLGATE_ALLOWED_HOSTS"))?,
            setup_token: setup_token(non_empty("TOLLGATE_SETUP_TOKEN"))?,
        })
    }

    /// Whether `peer` is one of the trusted proxies.
    pub fn is_trusted_proxy(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.trusted_proxies.iter().any(|net| net.contains(&peer))
    }

    /// The client behind a request from `peer`: the peer itself, unless it
    /// is a trusted proxy; then the `X-Forwarded-For` list is read from the
    /// right (what the nearest proxy saw), skipping trusted proxies, and the
    /// first other address is the client. A list a client wrote itself sits
    /// to the left of what our proxies appended, so it is never believed.
    pub fn client_address(&self, peer: IpAddr, forwarded_for: Option<&str>) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.is_trusted_proxy(peer) {
            return peer;
        }
        let mut client = peer;
        for hop in forwarded_for.unwrap_or_default().rsplit(',') {
            let Some(ip) = forwarded_ip(hop) else {
                // Malformed: what is left of it was not written by us.
                break;
            };
            client = ip;
            if !self.is_trusted_proxy(ip) {
                break;
            }
        }
        client
    }

    /// Whether a request naming `host` (a `Host` header or an authority,
    /// with or without its port) is for this node. IP literals and
    /// `localhost` always are: a rebinding page has a name of its own.
    pub fn host_allowed(&self, host: &str, public_origin: Option<&str>) -> bool {
        let Some(name) = host_name(host) else {
            return false;
        };
        if name.parse::<IpAddr>().is_ok() || name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        let public = public_origin
            .and_then(|o| o.split_once("://"))
            .and_then(|(_, authority)| host_name(authority));
        if public.as_deref() == Some(name.as_str()) {
            return true;
        }
        match &self.allowed_hosts {
            AllowedHosts::Any => true,
            AllowedHosts::Names(names) => names.contains(&name),
        }
    }
}

/// One hop of `X-Forwarded-For`: an address, an IPv6 one perhaps in
/// brackets, an IPv4 one perhaps with a port.
fn forwarded_ip(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    let bare = match hop.strip_prefix('[') {
        Some(rest) => rest.split_once(']')?.0,
        None => hop.rsplit_once(':')?.0,
    };
    bare.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())
}

/// The lower-cased name of `host[:port]`, brackets of an IPv6 literal
/// removed; `None` when it is not a host at all.
fn host_name(host: &str) -> Option<String> {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.starts_with(':')) {
            return None;
        }
        inside
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return None,
            None => host,
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let plausible = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:_".contains(&b));
    plausible.then_some(name)
}

fn trusted_proxies(raw: Option<String>) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    raw.split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| {
            c.parse::<ipnet::IpNet>()
                .or_else(|_| c.parse::<IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    ConfigError::new(
                        "TOLLGATE_TRUSTED_PROXIES",
                        format!(
                            "{c:?} is not an address like 10.0.0.7 or a network like 10.0.0.0/24"
                        ),
                    )
                })
        })
        .collect()
}

fn allowed_hosts(raw: Option<String>) -> Result<AllowedHosts, ConfigError> {
    let Some(raw) = raw else {
        return Ok(AllowedHosts::Names(Vec::new()));
    };
    if raw.trim() == "*" {
        return Ok(AllowedHosts::Any);
    }
    raw.split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| {
            host_name(h).ok_or_else(|| {
                ConfigError::new(
                    "TOLLGATE_ALLOWED_HOSTS",
                    format!("{h:?} is not a host name like tollgate.internal (or * for any)"),
                )
            })
        })
        .collect::<Result<_, _>>()
        .map(AllowedHosts::Names)
}

fn setup_token(raw: Option<String>) -> Result<Option<String>, ConfigError> {
    match raw.map(|t| t.trim().to_string()) {
        None => Ok(None),
        Some(t) if t.len() >= 16 && t.len() <= 200 && t.bytes().all(|b| b.is_ascii_graphic()) => {
            Ok(Some(t))
        }
        Some(_) => Err(ConfigError::new(
            "TOLLGATE_SETUP_TOKEN",
            "is not 16 to 200 printable characters without spaces",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposure(pairs: &[(&str, &str)]) -> Result<Exposure, ConfigError> {
        Exposure::from_lookup(|k| {
            pairs
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn hosts_are_names_the_operator_gave_or_cannot_be_rebound() {
        let e = exposure(&[(
            "TOLLGATE_ALLOWED_HOSTS",
            "tollgate.internal, Edge.Example.com",
        )])
        .unwrap();
        let public = Some("https://studio.example.com");
        for ok in [
            "127.0.0.1:3000",
            "[::1]:3000",
            "10.1.2.3",
            "localhost:3000",
            "studio.example.com",
            "STUDIO.example.com:443",
            "tollgate.internal:3000",
            "edge.example.com.",
        ] {
            assert!(e.host_allowed(ok, public), "{ok}");
        }
        for refused in [
            "evil.example.net:3000",
            "studio.example.com.evil.net",
            "",
            "a b",
            "[::1]x",
            "host:port",
        ] {
            assert!(!e.host_allowed(refused, public), "{refused}");
        }
        let any = exposure(&[("TOLLGATE_ALLOWED_HOSTS", "*")]).unwrap();
        assert!(any.host_allowed("whatever.example:80", None));
    }

    #[test]
    fn trusted_proxies_are_addresses_or_networks() {
        let e = exposure(&[("TOLLGATE_TRUSTED_PROXIES", "127.0.0.1, 10.0.0.0/8")]).unwrap();
        assert!(e.is_trusted_proxy("127.0.0.1".parse().unwrap()));
        assert!(e.is_trusted_proxy("::ffff:10.9.8.7".parse().unwrap()));
        assert!(!e.is_trusted_proxy("127.0.0.2".parse().unwrap()));
        let bad = exposure(&[("TOLLGATE_TRUSTED_PROXIES", "proxy.local")]).unwrap_err();
        assert_eq!(bad.setting, "TOLLGATE_TRUSTED_PROXIES");
    }

    #[test]
    fn the_client_is_the_first_untrusted_hop_from_the_right() {
        let e = exposure(&[("TOLLGATE_TRUSTED_PROXIES", "127.0.0.1,10.0.0.0/8")]).unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // Not from a proxy: the header is anyone's to write.
        assert_eq!(
            e.client_address(ip("203.0.113.9"), Some("198.51.100.1")),
            ip("203.0.113.9")
        );
        // From the proxy: what it appended.
        assert_eq!(
            e.client_address(ip("127.0.0.1"), Some("198.51.100.1")),
            ip("198.51.100.1")
        );
        // A client's own claim sits left of what the proxies saw.
        assert_eq!(
            e.client_address(ip("127.0.0.1"), Some("1.1.1.1, 198.51.100.1, 10.0.0.5")),
            ip("198.51.100.1")
        );
        assert_eq!(
            e.client_address(ip("::ffff:127.0.0.1"), Some("[2001:db8::1]:443")),
            ip("2001:db8::1")
        );
        assert_eq!(
            e.client_address(ip("127.0.0.1"), Some("198.51.100.1:5000")),
            ip("198.51.100.1")
        );
        // Nothing to read, or garbage: the proxy is all we know.
        assert_eq!(e.client_address(ip("127.0.0.1"), None), ip("127.0.0.1"));
        assert_eq!(
            e.client_address(ip("127.0.0.1"), Some("not an address")),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn limits_and_tokens_are_checked() {
        let d = exposure(&[]).unwrap();
        assert_eq!(d.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(d.idle_connection, DEFAULT_IDLE_CONNECTION);
        assert!(d.setup_token.is_none());
        for (name, value) in [
            ("TOLLGATE_MAX_CONNECTIONS", "0"),
            ("TOLLGATE_MAX_CONNECTIONS_PER_ADDRESS", "many"),
            ("TOLLGATE_IDLE_CONNECTION_SECONDS", "99999"),
            ("TOLLGATE_SETUP_TOKEN", "short"),
        ] {
            assert_eq!(exposure(&[(name, value)]).unwrap_err().setting, name);
        }
    }
}
