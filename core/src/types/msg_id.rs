//! Message ids: the one a send answers ([`MsgId`]) and RocketMQ's offset message id
//! ([`OffsetMsgId`]), with their text forms.

use core::fmt;

/// A message id, borrowed or formatted in place: see [`SendReceipt::msg_id`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgId<'a> {
    /// The client's id (UNIQ_KEY).
    Client(&'a str),
    /// RocketMQ's offset message id.
    Offset(OffsetMsgId),
}

impl MsgId<'_> {
    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            MsgId::Client(s) => s,
            MsgId::Offset(o) => o.as_str(),
        }
    }
}

impl fmt::Display for MsgId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// RocketMQ's offset message id (`MessageDecoder.createMessageId`): the store host and the
/// log offset, as upper-case hex, formatted without allocating. The one place the broker
/// builds it (every host and every protocol asks here) and reads it back ([`Self::parse`]).
///
/// ```text
///  IPv4 store host, 16 bytes = 32 hex digits:
///  +-------------+-------------+-----------------------------+
///  | IPv4 (4)    | port (4 BE) | log offset (8 BE)           |
///  +-------------+-------------+-----------------------------+
///  IPv6 store host, 28 bytes = 56 hex digits:
///  +---------------------------+-------------+-----------------------------+
///  | IPv6 (16)                 | port (4 BE) | log offset (8 BE)           |
///  +---------------------------+-------------+-----------------------------+
/// ```
///
/// An unspecified host is written as IPv4 0.0.0.0, port 0 (32 digits).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct OffsetMsgId {
    hex: [u8; 56],
    len: u8,
}

impl OffsetMsgId {
    /// The id of the record at `offset` of a broker whose store host is `store_host`.
    #[must_use]
    pub fn new(store_host: crate::record::Host, offset: u64) -> Self {
        use crate::record::Host;
        let mut b = [0u8; 28];
        let (ip, port): (&[u8], u16) = match &store_host {
            Host::V4(ip, port) => (ip, *port),
            Host::V6(ip, port) => (ip, *port),
            Host::Unspecified => (&[0; 4], 0),
        };
        let n = ip.len() + 12;
        b[..ip.len()].copy_from_slice(ip);
        b[ip.len()..ip.len() + 4].copy_from_slice(&u32::from(port).to_be_bytes());
        b[ip.len() + 4..n].copy_from_slice(&offset.to_be_bytes());
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut hex = [0u8; 56];
        for (i, x) in b[..n].iter().enumerate() {
            hex[2 * i] = HEX[usize::from(x >> 4)];
            hex[2 * i + 1] = HEX[usize::from(x & 15)];
        }
        OffsetMsgId {
            hex,
            len: (2 * n) as u8,
        }
    }

    /// The store host and log offset an offset message id names (either length, hex digits
    /// of either case, as `MessageDecoder.decodeMessageId` reads it); `None` for anything
    /// else, a client's own id (UNIQ_KEY) included, or a port above 65535.
    #[must_use]
    pub fn parse(id: &str) -> Option<(crate::record::Host, u64)> {
        use crate::record::Host;
        let ip_len = match id.len() {
            32 => 4,
            56 => 16,
            _ => return None,
        };
        let mut b = [0u8; 28];
        for (i, pair) in id.as_bytes().chunks_exact(2).enumerate() {
            let digit = |c: u8| char::from(c).to_digit(16);
            b[i] = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
        }
        let port = u32::from_be_bytes(b[ip_len..ip_len + 4].try_into().ok()?);
        let port = u16::try_from(port).ok()?;
        let offset = u64::from_be_bytes(b[ip_len + 4..ip_len + 12].try_into().ok()?);
        let host = if ip_len == 4 {
            Host::V4(b[..4].try_into().ok()?, port)
        } else {
            Host::V6(b[..16].try_into().ok()?, port)
        };
        Some((host, offset))
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written.
        core::str::from_utf8(&self.hex[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl fmt::Display for OffsetMsgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for OffsetMsgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OffsetMsgId({})", self.as_str())
    }
}
