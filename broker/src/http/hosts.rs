//! Which names an HTTP listener of the broker (the console, the metrics) answers to: the
//! defence against DNS rebinding.
//!
//! A page of another site cannot read a loopback or private listener directly, but it can
//! point its own name at the listener's address (DNS rebinding); the browser then sends the
//! page's requests to the listener as same-origin, with `Host: evil.example:PORT` and, on a
//! POST, `Origin: http://evil.example:PORT`. The browser always names the site it thinks it
//! talks to, so a listener that answers only requests naming *itself* is out of reach:
//!
//! - `Host` must name the address the connection reached (`ip:port` as the socket's local
//!   address, `[v6]:port` for IPv6), `localhost:port` when that address is loopback, or an
//!   entry of the listener's allowed list (`console_allowed_hosts`, `metrics_allowed_hosts`:
//!   `host[:port]`, a host without a port allowing every port). A `Host` without a port
//!   names port 80 or 443. A request without `Host` is refused (HTTP/1.1 requires one).
//! - `Origin`, when present, must name one of the same (its port defaulting by scheme);
//!   `Origin: null` (a sandboxed frame, a `data:` page) names nothing and is refused.
//!
//! A client that is not a browser sends what it likes and is checked by authentication, as
//! on every listener; this check only keeps browsers from being used against the broker.

use std::net::{IpAddr, SocketAddr};

/// A `host[:port]` as a request or the config names it: the host lower-cased, without the
/// brackets of an IPv6 literal or a trailing dot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authority {
    pub host: String,
    pub port: Option<u16>,
}

impl std::str::FromStr for Authority {
    type Err = String;

    /// Parses `host`, `host:port`, `[v6]` or `[v6]:port`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("`{s}` is not host[:port] ({why})");
        let s_trim = s.trim();
        if s_trim.is_empty() {
            return Err(bad("empty"));
        }
        let (host, port) = if let Some(rest) = s_trim.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(|| bad("no `]`"))?;
            h.parse::<std::net::Ipv6Addr>()
                .map_err(|_| bad("not an IPv6 address in brackets"))?;
            match after {
                "" => (h, None),
                p => (
                    h,
                    Some(p.strip_prefix(':').ok_or_else(|| bad("junk after `]`"))?),
                ),
            }
        } else {
            match s_trim.split_once(':') {
                None => (s_trim, None),
                Some((h, p)) => (h, Some(p)),
            }
        };
        let port = match port {
            None => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .map_err(|_| bad("the port is not 0 to 65535"))?,
            ),
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host.is_empty()
            || !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
        {
            return Err(bad(
                "a host is letters, digits, `.`, `-`, `_` or an IP address",
            ));
        }
        Ok(Authority { host, port })
    }
}

/// The names a listener answers to besides its own address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    /// The config field, for messages (`console_allowed_hosts`).
    field: &'static str,
    /// What the listener is, for messages (`console`).
    what: &'static str,
    names: Vec<Authority>,
}

impl AllowedHosts {
    /// The list of config field `field` (`host[:port]` each), for the listener `what`.
    pub fn parse(what: &'static str, field: &'static str, list: &[String]) -> Result<Self, String> {
        let names = list
            .iter()
            .map(|s| {
                s.parse()
                    .map_err(|e| format!("invalid config `{field}`: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(AllowedHosts { field, what, names })
    }

    fn names_listener(&self, a: &Authority, ports: &[u16], local: SocketAddr) -> bool {
        let port_ok = |p: Option<u16>| match p {
            Some(p) => p == local.port(),
            None => ports.contains(&local.port()),
        };
        let local_ip = local.ip().to_canonical();
        let own = match a.host.parse::<IpAddr>() {
            Ok(ip) => ip.to_canonical() == local_ip,
            Err(_) => a.host == "localhost" && local_ip.is_loopback(),
        };
        if own && port_ok(a.port) {
            return true;
        }
        self.names.iter().any(|n| {
            n.host == a.host
                && match n.port {
                    None => true,
                    Some(np) => match a.port {
                        Some(p) => p == np,
                        None => ports.contains(&np),
                    },
                }
        })
    }

    /// Checks a request's `Host` header against the address the connection reached:
    /// `Err((status, message))`, 400 without one, 421 (Misdirected Request) for another name.
    pub fn check_host(&self, host: Option<&str>, local: SocketAddr) -> Result<(), (u16, String)> {
        let Some(h) = host else {
            return Err((
                400,
                "the request has no Host header (HTTP/1.1 requires one)".into(),
            ));
        };
        let ok = h
            .parse::<Authority>()
            .is_ok_and(|a| self.names_listener(&a, &[80, 443], local));
        if ok {
            return Ok(());
        }
        Err((
            421,
            format!(
                "Host `{h}` names neither this {} ({local}) nor an entry of `{}`: refused, as a \
                 page of another site reaching it through DNS rebinding would send it; if it is \
                 a name of this broker, add it to `{}`",
                self.what, self.field, self.field
            ),
        ))
    }

    /// Checks a request's `Host` and, when present, its `Origin`: `Err((status, message))`,
    /// 400 or 421 for the `Host` ([`AllowedHosts::check_host`]), 403 for the `Origin`.
    pub fn check(&self, req: &super::HttpRequest, local: SocketAddr) -> Result<(), (u16, String)> {
        self.check_host(req.header("host"), local)?;
        match req.header("origin") {
            Some(origin) => self.check_origin(origin, local).map_err(|m| (403, m)),
            None => Ok(()),
        }
    }

    /// Checks an `Origin` header (`scheme://host[:port]`) the same way: `Err(message)` when it
    /// names another site (answered 403).
    pub fn check_origin(&self, origin: &str, local: SocketAddr) -> Result<(), String> {
        let ok = origin
            .split_once("://")
            .and_then(|(scheme, rest)| {
                let default = match scheme.to_ascii_lowercase().as_str() {
                    "http" => 80,
                    "https" => 443,
                    _ => return None,
                };
                let a = rest.parse::<Authority>().ok()?;
                Some(self.names_listener(&a, &[default], local))
            })
            .unwrap_or(false);
        if ok {
            return Ok(());
        }
        Err(format!(
            "Origin `{origin}` is neither this {} ({local}) nor an entry of `{}`: a page of \
             another site may not use the {}",
            self.what, self.field, self.what
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &[&str]) -> AllowedHosts {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        AllowedHosts::parse("console", "console_allowed_hosts", &list).unwrap()
    }

    #[test]
    fn authorities_parse() {
        let a: Authority = "Example.COM.:8083".parse().unwrap();
        assert_eq!((a.host.as_str(), a.port), ("example.com", Some(8083)));
        let a: Authority = "[::1]:9".parse().unwrap();
        assert_eq!((a.host.as_str(), a.port), ("::1", Some(9)));
        let a: Authority = "[::1]".parse().unwrap();
        assert_eq!(a.port, None);
        for bad in [
            "", "http://x", "x/y", "x:99999", "x:", "[::1", "[x]:1", "::1", "a b",
        ] {
            assert!(bad.parse::<Authority>().is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_name_the_listener_or_an_entry() {
        let lo: SocketAddr = "127.0.0.1:8083".parse().unwrap();
        let h = hosts(&["ops.example", "dash.example:443"]);
        for ok in [
            "127.0.0.1:8083",
            "localhost:8083",
            "LOCALHOST.:8083",
            "ops.example",
            "ops.example:1",
            "dash.example",
            "dash.example:443",
        ] {
            assert!(h.check_host(Some(ok), lo).is_ok(), "{ok}");
        }
        for bad in [
            "evil.example:8083",
            "127.0.0.1:8084",
            "127.0.0.2:8083",
            "127.0.0.1",
            "dash.example:8083",
            "localhost.evil.example:8083",
            "",
        ] {
            let (status, msg) = h.check_host(Some(bad), lo).unwrap_err();
            assert_eq!(status, 421, "{bad}");
            assert!(msg.contains("console_allowed_hosts"), "{msg}");
        }
        assert_eq!(h.check_host(None, lo).unwrap_err().0, 400);
        // localhost only on loopback; a v4-mapped local address is its IPv4 one.
        let public: SocketAddr = "10.0.0.5:8083".parse().unwrap();
        assert!(h.check_host(Some("localhost:8083"), public).is_err());
        assert!(h.check_host(Some("10.0.0.5:8083"), public).is_ok());
        let mapped: SocketAddr = "[::ffff:10.0.0.5]:8083".parse().unwrap();
        assert!(h.check_host(Some("10.0.0.5:8083"), mapped).is_ok());
        let v6: SocketAddr = "[::1]:80".parse().unwrap();
        assert!(h.check_host(Some("[::1]"), v6).is_ok());
        assert!(h.check_host(Some("localhost"), v6).is_ok());
    }

    #[test]
    fn origins_name_the_listener_or_an_entry() {
        let lo: SocketAddr = "127.0.0.1:8083".parse().unwrap();
        let h = hosts(&["dash.example"]);
        for ok in [
            "http://127.0.0.1:8083",
            "https://localhost:8083",
            "https://dash.example",
        ] {
            assert!(h.check_origin(ok, lo).is_ok(), "{ok}");
        }
        for bad in [
            "null",
            "http://evil.example:8083",
            "http://127.0.0.1",
            "file://",
            "http://127.0.0.1:8083/path",
        ] {
            assert!(h.check_origin(bad, lo).unwrap_err().contains(bad), "{bad}");
        }
    }
}
