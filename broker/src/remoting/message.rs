//! Messages as RocketMQ 4 clients carry them: the stored record encoded for pulls and
//! checks, offset message ids, SEND_MESSAGE(_V2) headers and properties turned into the
//! core's new message, and batch bodies decoded.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use rocklet_core::broker::prop;
use rocklet_core::record::{self, sys_flag, Host};
use rocklet_core::{CheckRequest, Message, NewMessage};

use super::codec::{RemotingCommand, FLAG_ONEWAY};
use super::codes::code;

/// The CHECK_TRANSACTION_STATE request for a check: the header names the half message, the
/// body is the message itself with its producer group (PGROUP), as clients look it up. The
/// offset message id is the record's (its own STOREHOST), as consumers compute it.
#[must_use]
pub fn check_command(c: &CheckRequest) -> RemotingCommand {
    let m = &c.message;
    let offset_id = offset_msg_id(m.store_host, c.txn.0);
    let mut ext = BTreeMap::new();
    ext.insert("topic".into(), m.topic.clone());
    ext.insert("tranStateTableOffset".into(), m.queue_offset.to_string());
    ext.insert("commitLogOffset".into(), c.txn.0.to_string());
    ext.insert("msgId".into(), m.msg_id.clone());
    ext.insert("transactionId".into(), m.msg_id.clone());
    ext.insert("offsetMsgId".into(), offset_id);
    let extra = [(prop::PGROUP, c.group.as_str()), (prop::TRAN_MSG, "true")];
    let body = encode_message(m, c.txn.0, sys_flag::TRANSACTION_PREPARED_TYPE, &extra);
    let mut cmd = RemotingCommand::request(code::CHECK_TRANSACTION_STATE, ext, body);
    cmd.flag = FLAG_ONEWAY;
    cmd
}

/// RocketMQ's offset message id: the core's, the one every protocol and the console use.
pub use rocklet_core::offset_msg_id;

/// A stored message as RocketMQ 4 consumers decode it (the CommitLog record layout), under
/// its real topic and queue; `extra` properties are added (TAGS, KEYS and UNIQ_KEY always).
#[must_use]
pub fn encode_message(m: &Message, phys_offset: u64, sys: u32, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut props = Vec::new();
    if let Some(t) = &m.tag {
        record::push_prop(&mut props, prop::TAGS, t);
    }
    if !m.keys.is_empty() {
        record::push_prop(&mut props, prop::KEYS, &m.keys.join(" "));
    }
    if m.property(prop::UNIQ_KEY).is_none() {
        record::push_prop(&mut props, prop::UNIQ_KEY, &m.msg_id);
    }
    for (k, v) in &m.properties {
        if !extra.iter().any(|(e, _)| e == k) {
            record::push_prop(&mut props, k, v);
        }
    }
    for (k, v) in extra {
        record::push_prop(&mut props, k, v);
    }
    let header = record::Header {
        queue_id: m.queue_id,
        flag: m.flag,
        queue_offset: m.queue_offset,
        phys_offset,
        sys_flag: sys,
        born_timestamp: m.born_timestamp,
        born_host: m.born_host,
        store_timestamp: m.store_timestamp,
        store_host: m.store_host,
        reconsume_times: m.reconsume_times,
        prepared_offset: 0,
    };
    let mut out = Vec::new();
    if record::encode(&mut out, &header, &m.body, &m.topic, &props).is_err() {
        // Only a topic above 255 bytes or properties above 32 KiB get here, and the core
        // stored this message with both within bounds: encode without the extras.
        out.clear();
        let _ = record::encode(&mut out, &header, &m.body, &m.topic, &[]);
    }
    out
}

/// SEND_MESSAGE_V2's short header names.
pub(crate) const V2_NAMES: [(&str, &str); 14] = [
    ("a", "producerGroup"),
    ("b", "topic"),
    ("c", "defaultTopic"),
    ("d", "defaultTopicQueueNums"),
    ("e", "queueId"),
    ("f", "sysFlag"),
    ("g", "bornTimestamp"),
    ("h", "flag"),
    ("i", "properties"),
    ("j", "reconsumeTimes"),
    ("k", "unitMode"),
    ("l", "maxReconsumeTimes"),
    ("m", "batch"),
    ("n", "brokerName"),
];

/// The property naming the client a request message's reply goes to.
pub(crate) const REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
/// The property naming the broker's cluster (the reply topic's prefix).
pub(crate) const CLUSTER: &str = "CLUSTER";

/// Parses `key\x01value\x02…`.
#[must_use]
pub fn parse_properties(s: &str) -> Vec<(String, String)> {
    s.split('\u{2}')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            p.split_once('\u{1}')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// What a v4 producer sent, as the core takes it.
pub(crate) struct Incoming {
    pub(crate) message: NewMessage,
    /// Producer group of a transactional (half) message.
    pub(crate) txn_group: Option<String>,
    pub(crate) immunity_ms: Option<u64>,
}

/// A socket address as a record's host field.
pub fn host_of(a: SocketAddr) -> Host {
    match a {
        SocketAddr::V4(v4) => Host::V4(v4.ip().octets(), v4.port()),
        SocketAddr::V6(v6) => Host::V6(v6.ip().octets(), v6.port()),
    }
}

/// What the send header says about every message of the request.
#[derive(Clone, Copy)]
pub(crate) struct SendHead<'a> {
    pub(crate) topic: &'a str,
    pub(crate) queue_id: Option<u32>,
    pub(crate) born: Option<u64>,
    pub(crate) peer: SocketAddr,
    pub(crate) group: Option<&'a str>,
}

pub(crate) fn incoming(
    h: SendHead<'_>,
    body: Vec<u8>,
    flag: i32,
    props: Vec<(String, String)>,
) -> Incoming {
    let header_group = h.group;
    let mut m = NewMessage {
        topic: h.topic.to_string(),
        body,
        queue_id: h.queue_id,
        flag,
        born_timestamp: h.born,
        born_host: Some(host_of(h.peer)),
        ..Default::default()
    };
    let mut txn = false;
    let mut group = None;
    let mut immunity_ms = None;
    for (k, v) in props {
        match k.as_str() {
            prop::TAGS => m.tag = Some(v).filter(|t| !t.is_empty()),
            prop::KEYS => {
                m.keys = v
                    .split(' ')
                    .filter(|k| !k.is_empty())
                    .map(String::from)
                    .collect()
            }
            prop::UNIQ_KEY => m.message_id = Some(v).filter(|i| !i.is_empty()),
            prop::TRAN_MSG => txn = v == "true",
            prop::PGROUP => group = Some(v),
            prop::WAIT => {}
            prop::CHECK_IMMUNITY_TIME_IN_SECONDS => {
                immunity_ms = v.trim().parse::<u64>().ok().map(|s| s.saturating_mul(1000));
            }
            prop::SHARDING_KEY => m.message_group = Some(v).filter(|g| !g.is_empty()),
            _ => m.properties.push((k, v)),
        }
    }
    // A request message (`DefaultMQProducer.request()`): its replier's client builds the
    // reply topic `<CLUSTER>_REPLY_TOPIC` from this property, which Apache's broker adds.
    let props = &m.properties;
    if props.iter().any(|(k, _)| k == REPLY_TO_CLIENT) && !props.iter().any(|(k, _)| k == CLUSTER) {
        m.properties
            .push((CLUSTER.to_string(), super::BROKER_NAME.to_string()));
    }
    let txn_group = txn.then(|| {
        group
            .or_else(|| header_group.map(String::from))
            .unwrap_or_default()
    });
    Incoming {
        message: m,
        txn_group,
        immunity_ms,
    }
}

/// The messages of a SEND_BATCH_MESSAGE body (`MessageDecoder.encodeMessages`): per
/// message TOTALSIZE 4, MAGICCODE 4, BODYCRC 4, FLAG 4, BODY length 4 + body, PROPERTIES
/// length 2 + properties.
/// At most `max` messages are decoded (`max_batch_messages`; the core bounds the bytes).
pub fn decode_batch(mut b: &[u8], max: usize) -> Result<Vec<(i32, Vec<u8>, String)>, String> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if out.len() >= max {
            return Err(format!(
                "TOO_MANY_MESSAGES: the batch holds more than the broker's max_batch_messages of {max}; send it in smaller batches"
            ));
        }
        if b.len() < 20 {
            return Err(format!(
                "batch message {} is truncated ({} bytes left)",
                out.len(),
                b.len()
            ));
        }
        let total = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if total < 22 || total > b.len() {
            return Err(format!(
                "batch message {} declares {total} bytes, {} are left",
                out.len(),
                b.len()
            ));
        }
        let m = &b[..total];
        let flag = i32::from_be_bytes([m[12], m[13], m[14], m[15]]);
        let body_len = u32::from_be_bytes([m[16], m[17], m[18], m[19]]) as usize;
        if body_len > total - 22 {
            return Err(format!(
                "batch message {}: body of {body_len} bytes overruns the message",
                out.len()
            ));
        }
        let body = m[20..20 + body_len].to_vec();
        let p = 20 + body_len;
        let props_len = u16::from_be_bytes([m[p], m[p + 1]]) as usize;
        if p + 2 + props_len != total {
            return Err(format!(
                "batch message {}: properties of {props_len} bytes do not end the message",
                out.len()
            ));
        }
        let props = String::from_utf8(m[p + 2..total].to_vec())
            .map_err(|_| format!("batch message {}: properties are not UTF-8", out.len()))?;
        out.push((flag, body, props));
        b = &b[total..];
    }
    if out.is_empty() {
        return Err("the batch holds no message".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &[u8], props: &str) -> Vec<u8> {
        let total = 20 + body.len() + 2 + props.len();
        let mut v = (total as u32).to_be_bytes().to_vec();
        v.extend_from_slice(&[0; 8]);
        v.extend_from_slice(&5i32.to_be_bytes());
        v.extend_from_slice(&(body.len() as u32).to_be_bytes());
        v.extend_from_slice(body);
        v.extend_from_slice(&(props.len() as u16).to_be_bytes());
        v.extend_from_slice(props.as_bytes());
        v
    }

    #[test]
    fn batches_decode_and_malformed_ones_are_named() {
        let mut b = entry(b"one", "UNIQ_KEY\u{1}A\u{2}");
        b.extend(entry(b"", ""));
        let got = decode_batch(&b, 100).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0],
            (5, b"one".to_vec(), "UNIQ_KEY\u{1}A\u{2}".to_string())
        );
        assert_eq!(got[1].1, b"");
        assert!(decode_batch(&[], 100).unwrap_err().contains("no message"));
        assert!(decode_batch(&b, 1)
            .unwrap_err()
            .contains("max_batch_messages of 1"));
        assert!(decode_batch(&b[..b.len() - 1], 100).is_err());
        assert!(decode_batch(&b[..10], 100)
            .unwrap_err()
            .contains("truncated"));
        // a body length past the entry
        let mut bad = entry(b"abc", "");
        bad[16..20].copy_from_slice(&1000u32.to_be_bytes());
        assert!(decode_batch(&bad, 100).unwrap_err().contains("overruns"));
        // a total size past the bytes, and one too small to hold the fixed fields
        let mut bad = entry(b"abc", "");
        bad[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode_batch(&bad, 100).unwrap_err().contains("declares"));
        let mut bad = entry(b"abc", "");
        bad[0..4].copy_from_slice(&3u32.to_be_bytes());
        assert!(decode_batch(&bad, 100).is_err());
    }

    #[test]
    fn properties_parse_and_map_onto_the_core_message() {
        let p = parse_properties("TAGS\u{1}t\u{2}KEYS\u{1}a b\u{2}UNIQ_KEY\u{1}U\u{2}TRAN_MSG\u{1}true\u{2}PGROUP\u{1}G\u{2}WAIT\u{1}true\u{2}DELAY\u{1}2\u{2}x\u{1}y\u{2}junk\u{2}");
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let head = SendHead {
            topic: "T",
            queue_id: Some(1),
            born: None,
            peer,
            group: Some("H"),
        };
        let i = incoming(head, b"b".to_vec(), 0, p);
        assert_eq!(i.txn_group.as_deref(), Some("G"));
        assert_eq!(i.message.tag.as_deref(), Some("t"));
        assert_eq!(i.message.keys, ["a", "b"]);
        assert_eq!(i.message.message_id.as_deref(), Some("U"));
        assert_eq!(
            i.message.properties,
            [
                ("DELAY".to_string(), "2".to_string()),
                ("x".into(), "y".into())
            ]
        );
        assert_eq!(i.message.born_host, Some(Host::V4([127, 0, 0, 1], 5000)));
        // The header's group when PGROUP is absent; not transactional without TRAN_MSG.
        let p = parse_properties("TRAN_MSG\u{1}true\u{2}");
        let i = incoming(head, vec![1], 0, p);
        assert_eq!(i.txn_group.as_deref(), Some("H"));
        let i = incoming(head, vec![1], 0, Vec::new());
        assert_eq!(i.txn_group, None);
    }

    #[test]
    fn offset_message_ids_carry_host_and_offset() {
        let id = offset_msg_id(Host::V4([127, 0, 0, 1], 10911), 0x1234);
        assert_eq!(id, "7F00000100002A9F0000000000001234");
    }
}
