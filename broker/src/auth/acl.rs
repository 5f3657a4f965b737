//! RocketMQ 5's ACL 2.0 model: users (super or normal), and entries granting or denying
//! actions on resources to a user, optionally only from some source addresses.
//!
//! - Resources: `Topic:<name>`, `Group:<name>`, `Cluster` (or `Cluster:<name>`), with `*`
//!   for every name (`Topic:*`), a trailing `*` for a prefix (`Topic:order*`), and `*` alone
//!   for every resource of every type. A group resource of a retry topic (`%RETRY%g`) is the
//!   group `g`, as RocketMQ's `Resource.ofGroup` has it.
//! - Actions: `Pub`, `Sub`, `Create`, `Update`, `Delete`, `Get`, `List`, `All`; names are
//!   case-insensitive, as RocketMQ's `Action.getByName`.
//! - Decision: `Allow` or `Deny`. A request is allowed when an `Allow` entry of the user
//!   matches it (resource, one of the request's actions, source address) and no `Deny`
//!   entry does: **any matching Deny wins**. (RocketMQ's `AclAuthorizationHandler` ranks
//!   entries by how specific their resource is and lets Deny win only between equally
//!   specific ones, so there an `Allow Topic:orders` punches through a `Deny Topic:*`;
//!   rocklet never lets an Allow override a Deny. Write "everything but X" as Allows of
//!   what is allowed.) With no matching entry the request is refused.
//! - Super users may do everything; entries of a super user are never consulted.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a request does to a resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    All,
    Pub,
    Sub,
    Create,
    Update,
    Delete,
    Get,
    List,
}

impl Action {
    /// Every action, in RocketMQ's order.
    pub const EVERY: [Action; 8] = [
        Action::All,
        Action::Pub,
        Action::Sub,
        Action::Create,
        Action::Update,
        Action::Delete,
        Action::Get,
        Action::List,
    ];

    /// RocketMQ's name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Action::All => "All",
            Action::Pub => "Pub",
            Action::Sub => "Sub",
            Action::Create => "Create",
            Action::Update => "Update",
            Action::Delete => "Delete",
            Action::Get => "Get",
            Action::List => "List",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Action {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Action::EVERY
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!("`{s}` is not an action (Pub, Sub, Create, Update, Delete, Get, List, All)")
            })
    }
}

/// Allow or deny.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    Allow,
    Deny,
}

impl Decision {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "Allow",
            Decision::Deny => "Deny",
        }
    }
}

impl FromStr for Decision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "allow" => Ok(Decision::Allow),
            "deny" => Ok(Decision::Deny),
            _ => Err(format!("`{s}` is not a decision (Allow or Deny)")),
        }
    }
}

/// Kinds of resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResourceType {
    Cluster,
    Topic,
    Group,
}

impl ResourceType {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceType::Cluster => "Cluster",
            ResourceType::Topic => "Topic",
            ResourceType::Group => "Group",
        }
    }
}

/// A concrete resource a request touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    pub ty: ResourceType,
    pub name: String,
}

impl Resource {
    /// The cluster (rocklet is one broker of one cluster).
    #[must_use]
    pub fn cluster() -> Self {
        Resource {
            ty: ResourceType::Cluster,
            name: crate::auth::CLUSTER_NAME.into(),
        }
    }

    #[must_use]
    pub fn topic(name: &str) -> Self {
        Resource {
            ty: ResourceType::Topic,
            name: name.into(),
        }
    }

    /// A group; a retry topic's name (`%RETRY%g`) is the group `g`.
    #[must_use]
    pub fn group(name: &str) -> Self {
        Resource {
            ty: ResourceType::Group,
            name: name.strip_prefix(RETRY_PREFIX).unwrap_or(name).into(),
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ty.as_str(), self.name)
    }
}

/// The prefix of a retry topic (`%RETRY%<group>`).
pub const RETRY_PREFIX: &str = "%RETRY%";
/// The prefix of a dead-letter topic (`%DLQ%<group>`).
pub const DLQ_PREFIX: &str = "%DLQ%";

/// The group a retry (`%RETRY%g`) or dead-letter (`%DLQ%g`) topic belongs to: `g`.
#[must_use]
pub fn owner_group(topic: &str) -> Option<&str> {
    topic
        .strip_prefix(RETRY_PREFIX)
        .or_else(|| topic.strip_prefix(DLQ_PREFIX))
}

/// What an entry's resource matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// `*`: every resource of every type.
    Everything,
    /// `Topic:*`: every resource of the type.
    AnyName(ResourceType),
    /// `Topic:orders`.
    Literal(ResourceType, String),
    /// `Topic:order*`.
    Prefixed(ResourceType, String),
}

impl Pattern {
    /// Whether the pattern covers the resource.
    #[must_use]
    pub fn matches(&self, r: &Resource) -> bool {
        match self {
            Pattern::Everything => true,
            Pattern::AnyName(t) => *t == r.ty,
            Pattern::Literal(t, n) => *t == r.ty && *n == r.name,
            Pattern::Prefixed(t, p) => *t == r.ty && r.name.starts_with(p.as_str()),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Everything => f.write_str("*"),
            Pattern::AnyName(t) => write!(f, "{}:*", t.as_str()),
            Pattern::Literal(t, n) => write!(f, "{}:{n}", t.as_str()),
            Pattern::Prefixed(t, p) => write!(f, "{}:{p}*", t.as_str()),
        }
    }
}

impl FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "*" {
            return Ok(Pattern::Everything);
        }
        let (ty, name) = s.split_once(':').unwrap_or((s, ""));
        let ty = match ty.to_ascii_lowercase().as_str() {
            "cluster" => ResourceType::Cluster,
            "topic" => ResourceType::Topic,
            "group" => ResourceType::Group,
            _ => {
                return Err(format!(
                    "`{s}` is not a resource (Topic:<name>, Group:<name>, Cluster, with `*` for any name or a prefix)"
                ))
            }
        };
        if name.is_empty() {
            // `Cluster` names the one cluster there is.
            return if ty == ResourceType::Cluster {
                Ok(Pattern::AnyName(ty))
            } else {
                Err(format!("`{s}` names no {}", ty.as_str().to_lowercase()))
            };
        }
        Ok(if name == "*" {
            Pattern::AnyName(ty)
        } else if let Some(prefix) = name.strip_suffix('*') {
            Pattern::Prefixed(ty, prefix.into())
        } else {
            let name = if ty == ResourceType::Group {
                name.strip_prefix(RETRY_PREFIX).unwrap_or(name)
            } else {
                name
            };
            Pattern::Literal(ty, name.into())
        })
    }
}

/// A source address range: `10.0.0.0/8`, `192.168.1.7`, `fd00::/8`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl Cidr {
    /// Whether `ip` is in the range (IPv4-mapped IPv6 addresses count as IPv4).
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not an IP address or CIDR range (10.0.0.0/8, fd00::/8)");
        let (a, bits) = match s.trim().split_once('/') {
            Some((a, b)) => (a, Some(b.parse::<u8>().map_err(|_| bad())?)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        if bits > max {
            return Err(bad());
        }
        Ok(Cidr { addr, bits })
    }
}

/// One ACL entry of a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub user: String,
    pub resource: Pattern,
    pub actions: Vec<Action>,
    pub decision: Decision,
    /// Empty: from anywhere.
    pub source_ips: Vec<Cidr>,
}

impl Entry {
    /// Whether the entry applies to a request doing any of `actions` on `r` from `ip`.
    #[must_use]
    pub fn matches(&self, r: &Resource, actions: &[Action], ip: Option<IpAddr>) -> bool {
        self.resource.matches(r)
            && (self.actions.contains(&Action::All)
                || actions.iter().any(|a| self.actions.contains(a)))
            && (self.source_ips.is_empty()
                || ip.is_some_and(|ip| self.source_ips.iter().any(|c| c.contains(ip))))
    }
}

/// The config file's and the store's form of an entry: strings, as RocketMQ's ACL 2.0
/// metadata (`resource`, `actions`, `decision`, `sourceIps`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntrySpec {
    pub user: String,
    pub resource: String,
    pub actions: Vec<String>,
    #[serde(default = "allow")]
    pub decision: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
}

fn allow() -> String {
    "Allow".into()
}

impl EntrySpec {
    /// Parses the strings; the error names the bad one.
    pub fn parse(&self) -> Result<Entry, String> {
        if self.user.is_empty() {
            return Err("an ACL entry names no user".into());
        }
        let actions = self
            .actions
            .iter()
            .map(|a| a.parse())
            .collect::<Result<Vec<Action>, _>>()?;
        if actions.is_empty() {
            return Err(format!(
                "the ACL entry of `{}` on `{}` lists no action",
                self.user, self.resource
            ));
        }
        Ok(Entry {
            user: self.user.clone(),
            resource: self.resource.parse()?,
            actions,
            decision: self.decision.parse()?,
            source_ips: self
                .source_ips
                .iter()
                .map(|c| c.parse())
                .collect::<Result<_, _>>()?,
        })
    }

    /// The canonical spec of an entry.
    #[must_use]
    pub fn of(e: &Entry) -> Self {
        EntrySpec {
            user: e.user.clone(),
            resource: e.resource.to_string(),
            actions: e.actions.iter().map(|a| a.as_str().to_string()).collect(),
            decision: e.decision.as_str().into(),
            source_ips: e.source_ips.iter().map(ToString::to_string).collect(),
        }
    }
}

/// Why a request was refused by the ACL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    pub user: String,
    pub resource: Resource,
    pub actions: Vec<Action>,
    pub why: &'static str,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let acts: Vec<&str> = self.actions.iter().map(|a| a.as_str()).collect();
        write!(
            f,
            "FORBIDDEN: user `{}` may not {} on {}: {}",
            self.user,
            acts.join(" or "),
            self.resource,
            self.why
        )
    }
}

/// Checks one need (any of `actions` on `r`) of a normal user against its entries.
pub fn check<'a>(
    user: &str,
    entries: impl Iterator<Item = &'a Entry>,
    r: &Resource,
    actions: &[Action],
    ip: Option<IpAddr>,
) -> Result<(), Denied> {
    let mut allowed = false;
    for e in entries.filter(|e| e.user == user && e.matches(r, actions, ip)) {
        match e.decision {
            Decision::Deny => {
                return Err(Denied {
                    user: user.into(),
                    resource: r.clone(),
                    actions: actions.to_vec(),
                    why: "a Deny entry matches",
                })
            }
            Decision::Allow => allowed = true,
        }
    }
    if allowed {
        Ok(())
    } else {
        Err(Denied {
            user: user.into(),
            resource: r.clone(),
            actions: actions.to_vec(),
            why: "no ACL entry allows it",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(user: &str, res: &str, actions: &[&str], decision: &str, ips: &[&str]) -> Entry {
        EntrySpec {
            user: user.into(),
            resource: res.into(),
            actions: actions.iter().map(|s| s.to_string()).collect(),
            decision: decision.into(),
            source_ips: ips.iter().map(|s| s.to_string()).collect(),
        }
        .parse()
        .unwrap()
    }

    #[test]
    fn patterns_parse_and_match_like_rocketmq() {
        let t = Resource::topic("orders");
        assert!("*".parse::<Pattern>().unwrap().matches(&t));
        assert!("Topic:*".parse::<Pattern>().unwrap().matches(&t));
        assert!("topic:ord*".parse::<Pattern>().unwrap().matches(&t));
        assert!("Topic:orders".parse::<Pattern>().unwrap().matches(&t));
        assert!(!"Topic:order".parse::<Pattern>().unwrap().matches(&t));
        assert!(!"Group:orders".parse::<Pattern>().unwrap().matches(&t));
        assert!("Cluster"
            .parse::<Pattern>()
            .unwrap()
            .matches(&Resource::cluster()));
        assert_eq!(Resource::group("%RETRY%g1"), Resource::group("g1"));
        assert_eq!(
            "Group:%RETRY%g1".parse::<Pattern>().unwrap(),
            "Group:g1".parse().unwrap()
        );
        for bad in ["Queue:x", "Topic", "Topic:"] {
            assert!(bad.parse::<Pattern>().is_err(), "{bad}");
        }
        assert_eq!(
            "topic:ord*".parse::<Pattern>().unwrap().to_string(),
            "Topic:ord*"
        );
    }

    #[test]
    fn cidrs() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nowhere".parse::<Cidr>().is_err());
    }

    #[test]
    fn allow_needs_a_matching_entry_and_any_deny_wins() {
        let entries = [
            entry("alice", "Topic:*", &["Pub"], "Allow", &[]),
            entry("alice", "Topic:secret", &["Pub", "Sub"], "Deny", &[]),
            entry("alice", "Group:g*", &["Sub"], "Allow", &["127.0.0.0/8"]),
            entry("bob", "*", &["All"], "Allow", &[]),
        ];
        let lo: Option<IpAddr> = Some("127.0.0.1".parse().unwrap());
        let far: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        let ok = |r: Resource, a: &[Action], ip| check("alice", entries.iter(), &r, a, ip);
        assert!(ok(Resource::topic("orders"), &[Action::Pub], lo).is_ok());
        let e = ok(Resource::topic("orders"), &[Action::Sub], lo).unwrap_err();
        assert_eq!(e.why, "no ACL entry allows it");
        assert!(e
            .to_string()
            .starts_with("FORBIDDEN: user `alice` may not Sub on Topic:orders"));
        // The Deny of the specific topic beats the Allow of every topic.
        let e = ok(Resource::topic("secret"), &[Action::Pub], lo).unwrap_err();
        assert_eq!(e.why, "a Deny entry matches");
        // A Deny of every topic also beats the Allow of one (unlike RocketMQ's ranking).
        let deny_all = [
            entry("carol", "Topic:orders", &["Pub"], "Allow", &[]),
            entry("carol", "Topic:*", &["Pub"], "Deny", &[]),
        ];
        assert!(check(
            "carol",
            deny_all.iter(),
            &Resource::topic("orders"),
            &[Action::Pub],
            lo
        )
        .is_err());
        // Source addresses.
        assert!(ok(Resource::group("g1"), &[Action::Sub], lo).is_ok());
        assert!(ok(Resource::group("g1"), &[Action::Sub], far).is_err());
        assert!(ok(Resource::group("g1"), &[Action::Sub], None).is_err());
        // Any one of the request's actions is enough; All covers every action.
        assert!(ok(Resource::topic("x"), &[Action::Sub, Action::Pub], lo).is_ok());
        assert!(check(
            "bob",
            entries.iter(),
            &Resource::group("any"),
            &[Action::Delete],
            far
        )
        .is_ok());
        // Nobody else's entries count.
        assert!(check(
            "mallory",
            entries.iter(),
            &Resource::topic("x"),
            &[Action::Pub],
            lo
        )
        .is_err());
    }

    #[test]
    fn specs_round_trip_and_bad_ones_are_named() {
        let e = entry("u", "topic:a*", &["pub", "SUB"], "deny", &["10.0.0.0/8"]);
        let s = EntrySpec::of(&e);
        assert_eq!(s.resource, "Topic:a*");
        assert_eq!(s.actions, vec!["Pub", "Sub"]);
        assert_eq!(s.decision, "Deny");
        assert_eq!(s.parse().unwrap(), e);
        let mut bad = s.clone();
        bad.actions = vec!["Publish".into()];
        assert!(bad.parse().unwrap_err().contains("Publish"));
        let mut bad = s;
        bad.decision = "Maybe".into();
        assert!(bad.parse().unwrap_err().contains("Maybe"));
    }
}
