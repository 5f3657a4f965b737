//! Every conversion between RocketMQ 5 protocol messages and core types.

use std::net::{IpAddr, SocketAddr};

use md5::{Digest as _, Md5};
use rocklet_core::record::Host;
use rocklet_core::{broker::prop, CheckRequest, Delay, Message, Millis, NewMessage, Received};

use super::status::bad_request;
use crate::config::TopicMessageType;
use crate::pb::v2 as pb;
use crate::pb::v2::Status;

/// Property that remembers a body the producer sent compressed (RocketMQ's COMPRESSED sys
/// flag), so consumers get it back with the same `body_encoding`.
pub const BODY_ENCODING_PROP: &str = "__rocklet_body_encoding";

/// Keys the broker keeps out of the user properties consumers see.
const SYSTEM_KEYS: [&str; 12] = [
    prop::TRAN_MSG,
    prop::PGROUP,
    prop::SHARDING_KEY,
    prop::DELAY,
    prop::TIMER_DELIVER_MS,
    prop::TIMER_DELAY_SEC,
    prop::TIMER_DELAY_MS,
    prop::CHECK_IMMUNITY_TIME_IN_SECONDS,
    prop::TRANSACTION_CHECK_TIMES,
    prop::WAIT,
    prop::RECONSUME_TIME,
    BODY_ENCODING_PROP,
];

/// ms since the epoch as a protobuf timestamp.
#[must_use]
pub fn timestamp(ms: Millis) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// A protobuf timestamp as ms since the epoch; `None` before the epoch or out of range.
#[must_use]
pub fn timestamp_ms(t: &prost_types::Timestamp) -> Option<Millis> {
    if t.seconds < 0 || t.nanos < 0 || t.nanos >= 1_000_000_000 {
        return None;
    }
    (t.seconds as u64)
        .checked_mul(1000)?
        .checked_add(t.nanos as u64 / 1_000_000)
}

/// ms as a protobuf duration.
#[must_use]
pub fn duration(ms: Millis) -> prost_types::Duration {
    prost_types::Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// A protobuf duration in ms; `None` when negative or out of range.
#[must_use]
pub fn duration_ms(d: &prost_types::Duration) -> Option<Millis> {
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return None;
    }
    (d.seconds as u64)
        .checked_mul(1000)?
        .checked_add(d.nanos as u64 / 1_000_000)
}

/// The name of a resource, or a BAD_REQUEST naming the field.
pub fn resource_name(r: Option<&pb::Resource>, field: &str) -> Result<String, Status> {
    match r {
        Some(r) if !r.name.is_empty() => Ok(r.name.clone()),
        _ => Err(bad_request(format!("`{field}` is missing"))),
    }
}

/// The message type a producer meant: the declared one, else what the fields imply.
#[must_use]
pub fn message_type(m: &pb::Message) -> TopicMessageType {
    let sp = m.system_properties.as_ref();
    match sp.map(|s| s.message_type()) {
        Some(pb::MessageType::Normal) => TopicMessageType::Normal,
        Some(pb::MessageType::Fifo) => TopicMessageType::Fifo,
        Some(pb::MessageType::Delay) => TopicMessageType::Delay,
        Some(pb::MessageType::Transaction) => TopicMessageType::Transaction,
        _ => {
            if sp.is_some_and(|s| s.delivery_timestamp.is_some()) {
                TopicMessageType::Delay
            } else if sp.is_some_and(|s| s.message_group.is_some()) {
                TopicMessageType::Fifo
            } else {
                TopicMessageType::Normal
            }
        }
    }
}

/// A message as sent, converted for the core; `index` names it in errors.
pub fn new_message(m: pb::Message, index: usize) -> Result<(NewMessage, Option<Millis>), Status> {
    let topic = resource_name(m.topic.as_ref(), &format!("messages[{index}].topic"))?;
    let Some(sp) = m.system_properties else {
        return Err(bad_request(format!(
            "`messages[{index}].system_properties` is missing"
        )));
    };
    let mut properties: Vec<(String, String)> = m.user_properties.into_iter().collect();
    properties.sort();
    if sp.body_encoding() == pb::Encoding::Gzip {
        properties.push((BODY_ENCODING_PROP.into(), "GZIP".into()));
    }
    let delay = match &sp.delivery_timestamp {
        Some(t) => Some(Delay::At(timestamp_ms(t).ok_or_else(|| {
            super::status::status(
                pb::Code::IllegalDeliveryTime,
                format!("INVALID_DELAY: messages[{index}].delivery_timestamp {t:?} is not a time after 1970"),
            )
        })?)),
        None => None,
    };
    let immunity = match &sp.orphaned_transaction_recovery_duration {
        Some(d) => Some(duration_ms(d).ok_or_else(|| {
            bad_request(format!(
                "messages[{index}].orphaned_transaction_recovery_duration is negative"
            ))
        })?),
        None => None,
    };
    if sp.queue_id < 0 {
        return Err(bad_request(format!(
            "messages[{index}].queue_id {} is negative",
            sp.queue_id
        )));
    }
    let msg = NewMessage {
        topic,
        body: m.body,
        tag: sp.tag.filter(|t| !t.is_empty()),
        keys: sp.keys,
        properties,
        // The broker picks the queue, as Apache's proxy does whatever the client set (proto3
        // cannot tell a queue 0 chosen from one left unset, and the Python client leaves it):
        // by the message group's hash for FIFO messages, round robin otherwise.
        queue_id: None,
        message_id: Some(sp.message_id).filter(|id| !id.is_empty()),
        delay,
        message_group: sp.message_group.filter(|g| !g.is_empty()),
        born_timestamp: sp.born_timestamp.as_ref().and_then(timestamp_ms),
        born_host: parse_host(&sp.born_host),
        flag: 0,
    };
    Ok((msg, immunity))
}

fn parse_host(s: &str) -> Option<Host> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Some(host_of(a.ip(), a.port()));
    }
    s.parse::<IpAddr>().ok().map(|ip| host_of(ip, 0))
}

fn host_of(ip: IpAddr, port: u16) -> Host {
    match ip {
        IpAddr::V4(v4) => Host::V4(v4.octets(), port),
        IpAddr::V6(v6) => Host::V6(v6.octets(), port),
    }
}

fn host_string(h: Host) -> String {
    match h {
        Host::V4(ip, _) => IpAddr::from(ip).to_string(),
        Host::V6(ip, _) => IpAddr::from(ip).to_string(),
        Host::Unspecified => String::new(),
    }
}

/// MD5 of the body, upper-case hex, as clients verify it.
#[must_use]
pub fn md5_hex(body: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(32);
    for b in Md5::digest(body) {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
    s
}

/// What a consumer gets for a stored message.
#[must_use]
pub fn message_out(m: &Message) -> pb::Message {
    let mut user = std::collections::HashMap::new();
    for (k, v) in &m.properties {
        if !SYSTEM_KEYS.contains(&k.as_str()) {
            user.insert(k.clone(), v.clone());
        }
    }
    let group = m.property(prop::SHARDING_KEY).map(String::from);
    let deliver_at = m
        .property(prop::TIMER_DELIVER_MS)
        .and_then(|v| v.parse::<Millis>().ok());
    let ty = if m.property(prop::TRAN_MSG) == Some("true") {
        pb::MessageType::Transaction
    } else if group.is_some() {
        pb::MessageType::Fifo
    } else if deliver_at.is_some() || m.property(prop::DELAY).is_some() {
        pb::MessageType::Delay
    } else {
        pb::MessageType::Normal
    };
    let encoding = if m.property(BODY_ENCODING_PROP) == Some("GZIP") {
        pb::Encoding::Gzip
    } else {
        pb::Encoding::Identity
    };
    let sp = pb::SystemProperties {
        tag: m.tag.clone(),
        keys: m.keys.clone(),
        message_id: m.msg_id.clone(),
        body_digest: Some(pb::Digest {
            r#type: pb::DigestType::Md5 as i32,
            checksum: md5_hex(&m.body),
        }),
        body_encoding: encoding as i32,
        message_type: ty as i32,
        born_timestamp: Some(timestamp(m.born_timestamp)),
        born_host: host_string(m.born_host),
        store_timestamp: Some(timestamp(m.store_timestamp)),
        store_host: m.store_host.to_string(),
        delivery_timestamp: Some(timestamp(deliver_at.unwrap_or(m.store_timestamp))),
        queue_id: m.queue_id as i32,
        queue_offset: Some(m.queue_offset as i64),
        message_group: group,
        ..Default::default()
    };
    pb::Message {
        topic: Some(pb::Resource {
            resource_namespace: String::new(),
            name: m.topic.clone(),
        }),
        user_properties: user,
        system_properties: Some(sp),
        body: m.body.clone(),
    }
}

/// A received message with its receipt handle, attempt and invisible time.
#[must_use]
pub fn received_out(r: &Received, invisible_ms: Millis) -> pb::Message {
    let mut m = message_out(&r.message);
    if let Some(sp) = m.system_properties.as_mut() {
        sp.receipt_handle = Some(r.handle.to_string());
        sp.delivery_attempt = Some(i32::try_from(r.attempt).unwrap_or(i32::MAX));
        sp.invisible_duration = Some(duration(invisible_ms));
    }
    m
}

/// The message a transaction check carries to the producer.
#[must_use]
pub fn check_out(c: &CheckRequest) -> pb::TelemetryCommand {
    let mut m = message_out(&c.message);
    if let Some(sp) = m.system_properties.as_mut() {
        sp.message_type = pb::MessageType::Transaction as i32;
    }
    pb::TelemetryCommand {
        status: Some(super::status::ok()),
        command: Some(
            pb::telemetry_command::Command::RecoverOrphanedTransactionCommand(
                pb::RecoverOrphanedTransactionCommand {
                    message: Some(m),
                    // RocketMQ's form: the half's message id (`end_transaction` finds it).
                    transaction_id: c.message.msg_id.clone(),
                },
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        assert_eq!(
            timestamp_ms(&timestamp(1_700_000_123_456)),
            Some(1_700_000_123_456)
        );
        assert_eq!(duration_ms(&duration(3_500)), Some(3_500));
        assert_eq!(
            timestamp_ms(&prost_types::Timestamp {
                seconds: -1,
                nanos: 0
            }),
            None
        );
        assert_eq!(
            duration_ms(&prost_types::Duration {
                seconds: 0,
                nanos: -5
            }),
            None
        );
    }

    #[test]
    fn md5_is_upper_hex() {
        assert_eq!(md5_hex(b"hello"), "5D41402ABC4B2A76B9719D911017C592");
    }

    #[test]
    fn missing_topic_is_named() {
        let e = new_message(pb::Message::default(), 3).unwrap_err();
        assert_eq!(e.code, pb::Code::BadRequest as i32);
        assert!(e.message.contains("messages[3].topic"), "{}", e.message);
    }

    #[test]
    fn delivery_timestamp_becomes_an_absolute_delay() {
        let m = pb::Message {
            topic: Some(pb::Resource {
                resource_namespace: String::new(),
                name: "t".into(),
            }),
            system_properties: Some(pb::SystemProperties {
                delivery_timestamp: Some(timestamp(5_000)),
                born_host: "10.1.2.3".into(),
                ..Default::default()
            }),
            body: b"x".to_vec(),
            ..Default::default()
        };
        let (n, _) = new_message(m, 0).unwrap();
        assert_eq!(n.delay, Some(Delay::At(5_000)));
        assert_eq!(n.born_host, Some(Host::V4([10, 1, 2, 3], 0)));
    }
}
