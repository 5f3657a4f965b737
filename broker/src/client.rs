//! `rocklet send`, `rocklet consume` and `rocklet tail`: quick checks against a running
//! broker (rocklet or any RocketMQ 5 gRPC endpoint) over RocketMQ 5 gRPC, as a simple
//! consumer / producer of the official clients would talk to it.
//!
//! The broker address comes from `--broker` or `ROCKLET_ADDR` (`HOST:PORT`, `http://…`,
//! `https://…`); credentials and TLS as for `rocklet admin` (`ROCKLET_ACCESS_KEY`,
//! `ROCKLET_SECRET_KEY`, `ROCKLET_TLS_CA`).

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_stream::StreamExt;
use tonic::transport::Channel;

use crate::auth::admin::{channel, ClientOptions, Signer};
use crate::pb::admin as admin_pb;
use crate::pb::admin::admin_client::AdminClient;
use crate::pb::v2 as pb;
use crate::pb::v2::messaging_service_client::MessagingServiceClient;

type Signed = tonic::service::interceptor::InterceptedService<Channel, Signer>;
type Client = MessagingServiceClient<Signed>;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest single long poll; `consume` uses less when its idle wait ends sooner.
const LONG_POLL: Duration = Duration::from_secs(5);
const RECV_BATCH: i32 = 32;
/// Invisible time of received messages: they are acked right after they are printed.
const INVISIBLE: Duration = Duration::from_secs(60);

/// Where and how to reach the broker.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// `HOST:PORT`, `http://HOST:PORT` or `https://HOST:PORT`.
    pub addr: String,
    pub options: ClientOptions,
}

/// One message for [`send`].
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    pub topic: String,
    pub body: Vec<u8>,
    pub tag: Option<String>,
    pub keys: Vec<String>,
    /// Deliver this many milliseconds after it is sent (a delay message).
    pub delay_ms: Option<u64>,
}

/// What [`consume`] reads and when it stops.
#[derive(Debug, Clone)]
pub struct Reading {
    pub topic: String,
    pub group: String,
    /// Tag filter (`*`: every message; `a || b`: either tag).
    pub tags: String,
    /// Stop after this many messages.
    pub count: Option<u64>,
    /// Stop when nothing came for this long (`None`: follow until `count` or killed). A
    /// reading that stops refuses a topic the broker does not have; one that follows waits
    /// for it (said on stderr).
    pub idle: Option<Duration>,
    /// Print queue, offset, id, tag and keys before each body.
    pub verbose: bool,
    /// Where a group starts in the queues it never received from.
    pub start: Start,
}

/// Where [`consume`]'s group starts in a queue it never received from (a queue it has a
/// position in always goes on from there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Where the broker starts new groups (rocklet: the queue's first message).
    Broker,
    /// The queue's end: only messages sent from now on (`rocklet tail`). Rocklet records the
    /// start through its admin service; a broker without it starts the group its own way
    /// (Apache RocketMQ's proxy: at the end too), said on stderr.
    End,
}

struct Conn {
    client: Client,
    admin: AdminClient<Signed>,
    client_id: String,
}

async fn connect(t: &Target) -> Result<Conn, String> {
    let ch = channel(&t.addr, &t.options).await?;
    let signer = match (&t.options.access_key, &t.options.secret_key) {
        (Some(a), Some(s)) => Signer::new(a, s),
        _ => Signer::default(),
    };
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "rocklet-cli".into());
    Ok(Conn {
        admin: AdminClient::with_interceptor(ch.clone(), signer.clone()),
        client: MessagingServiceClient::with_interceptor(ch, signer)
            .max_decoding_message_size(64 << 20),
        client_id: format!("{host}@{}@{}", std::process::id(), epoch_ms()),
    })
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(crate) fn resource(name: &str) -> Option<pb::Resource> {
    Some(pb::Resource {
        resource_namespace: String::new(),
        name: name.into(),
    })
}

pub(crate) fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

pub(crate) fn timestamp(ms: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// A request with the headers RocketMQ 5 proxies expect.
pub(crate) fn req<T>(msg: T, client_id: &str, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    let m = r.metadata_mut();
    for (k, v) in [
        ("x-mq-client-id", client_id.to_string()),
        ("x-mq-language", "RUST".to_string()),
        ("x-mq-protocol", "v2".to_string()),
        ("x-mq-client-version", env!("CARGO_PKG_VERSION").to_string()),
    ] {
        if let Ok(v) = v.parse() {
            m.insert(k, v);
        }
    }
    r.set_timeout(timeout);
    r
}

fn status(what: &str, s: Option<&pb::Status>) -> Result<(), String> {
    match s {
        Some(s) if s.code == pb::Code::Ok as i32 => Ok(()),
        Some(s) => Err(format!(
            "{what} refused: {} ({})",
            s.message,
            pb::Code::try_from(s.code).map_or_else(|_| s.code.to_string(), |c| format!("{c:?}"))
        )),
        None => Err(format!("{what}: the broker answered without a status")),
    }
}

fn grpc(what: &str, e: &tonic::Status) -> String {
    format!("{what} failed: {} ({:?})", e.message(), e.code())
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A RocketMQ 5 message id: version 01, 6 bytes of host, pid, seconds since 2021, sequence.
fn message_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_default();
    let h = host.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let secs = epoch_ms() / 1000 - 1_609_459_200;
    format!(
        "01{:012X}{:04X}{:08X}{:08X}",
        h & 0xFFFF_FFFF_FFFF,
        std::process::id() & 0xFFFF,
        secs as u32,
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Sends each message in turn; one line per message (`<message id> <topic> offset <n>`).
pub async fn send(t: &Target, messages: Vec<Outgoing>) -> Result<String, String> {
    let mut c = connect(t).await?;
    let mut out = String::new();
    for m in messages {
        let ty = if m.delay_ms.is_some() {
            pb::MessageType::Delay
        } else {
            pb::MessageType::Normal
        };
        let now = epoch_ms();
        let id = message_id();
        let msg = pb::Message {
            topic: resource(&m.topic),
            user_properties: Default::default(),
            system_properties: Some(pb::SystemProperties {
                tag: m.tag.clone(),
                keys: m.keys.clone(),
                message_id: id.clone(),
                message_type: ty as i32,
                body_encoding: pb::Encoding::Identity as i32,
                born_timestamp: Some(timestamp(now)),
                born_host: "127.0.0.1".into(),
                delivery_timestamp: m.delay_ms.map(|d| timestamp(now + d)),
                ..Default::default()
            }),
            body: m.body,
        };
        let r = c
            .client
            .send_message(req(
                pb::SendMessageRequest {
                    messages: vec![msg],
                },
                &c.client_id,
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| grpc("send", &e))?
            .into_inner();
        status("send", r.status.as_ref())?;
        let e = r.entries.first();
        if let Some(e) = e {
            status("send", e.status.as_ref())?;
        }
        let (id, offset) = e.map_or((id, 0), |e| (e.message_id.clone(), e.offset));
        out.push_str(&format!("{id} {} offset {offset}\n", m.topic));
    }
    Ok(out)
}

/// One line for a message: its body with newlines and backslashes escaped (invalid UTF-8
/// replaced), after its queue, offset, id, tag and keys when `verbose`.
fn line(m: &pb::Message, verbose: bool) -> String {
    let body = String::from_utf8_lossy(&m.body)
        .replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\r', "\\r");
    if !verbose {
        return body;
    }
    let sp = m.system_properties.clone().unwrap_or_default();
    format!(
        "queue={} offset={} id={} tag={} keys={} attempt={} body={body}",
        sp.queue_id,
        sp.queue_offset.unwrap_or(-1),
        sp.message_id,
        sp.tag.as_deref().unwrap_or(""),
        sp.keys.join(","),
        sp.delivery_attempt.unwrap_or(1),
    )
}

/// Whether the broker has topic `topic` (rocklet's admin service, GetTopic); `None` when
/// it cannot tell (not rocklet, the admin service on another port, or not a super user).
async fn topic_exists(c: &mut Conn, topic: &str) -> Result<Option<bool>, String> {
    match c
        .admin
        .get_topic(req(
            admin_pb::GetTopicRequest { name: topic.into() },
            &c.client_id,
            CALL_TIMEOUT,
        ))
        .await
    {
        Ok(r) => Ok(Some(r.into_inner().topic.is_some())),
        Err(e) if cannot_ask(&e) => Ok(None),
        Err(e) => Err(grpc("topic lookup", &e)),
    }
}

/// An admin call this client may not make here: no such service, or not allowed.
fn cannot_ask(e: &tonic::Status) -> bool {
    matches!(
        e.code(),
        tonic::Code::Unimplemented | tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
    )
}

/// Puts group `r.group` where `r.start` says in the queues it never received from, and
/// checks the topic exists: a reading that stops (`consume`) refuses a missing topic, one
/// that follows (`tail`) says on stderr it waits for it.
async fn start_group(c: &mut Conn, t: &Target, r: &Reading) -> Result<(), String> {
    if r.start == Start::End {
        let rq = admin_pb::StartGroupAtEndRequest {
            group: r.group.clone(),
            topic: r.topic.clone(),
        };
        match c
            .admin
            .start_group_at_end(req(rq, &c.client_id, CALL_TIMEOUT))
            .await
        {
            Ok(_) => {}
            Err(e) if e.code() == tonic::Code::Unimplemented => eprintln!(
                "note: the broker at {} has no rocklet admin service on this port: group {} starts where that broker starts new groups",
                t.addr, r.group
            ),
            Err(e) => {
                let hint = if cannot_ask(&e) {
                    " (following from now needs a super user when authentication is on; --from-beginning does not)"
                } else {
                    ""
                };
                return Err(format!(
                    "cannot start group {} at the end of topic {}: {} ({:?}){hint}",
                    r.group,
                    r.topic,
                    e.message(),
                    e.code()
                ));
            }
        }
    }
    if topic_exists(c, &r.topic).await? == Some(false) {
        if r.idle.is_some() {
            return Err(format!(
                "topic {} does not exist on the broker at {} (`rocklet admin topics` lists them)",
                r.topic, t.addr
            ));
        }
        eprintln!(
            "note: topic {} does not exist yet: waiting for its first message",
            r.topic
        );
    }
    Ok(())
}

/// Receives as consumer group `r.group`, writes one line per message to `out` and acks what
/// it wrote. Returns how many messages it read.
pub async fn consume(t: &Target, r: &Reading, out: &mut dyn Write) -> Result<u64, String> {
    let mut c = connect(t).await?;
    start_group(&mut c, t, r).await?;
    let assigned = c
        .client
        .query_assignment(req(
            pb::QueryAssignmentRequest {
                topic: resource(&r.topic),
                group: resource(&r.group),
                endpoints: None,
            },
            &c.client_id,
            CALL_TIMEOUT,
        ))
        .await
        .map_err(|e| grpc("route lookup", &e))?
        .into_inner();
    status(&format!("topic {}", r.topic), assigned.status.as_ref())?;
    let queue = assigned
        .assignments
        .into_iter()
        .find_map(|a| a.message_queue)
        .unwrap_or(pb::MessageQueue {
            topic: resource(&r.topic),
            id: -1,
            permission: pb::Permission::ReadWrite as i32,
            broker: None,
            accept_message_types: Vec::new(),
        });
    let mut read = 0u64;
    let mut last = Instant::now();
    loop {
        if r.count.is_some_and(|n| read >= n) {
            return Ok(read);
        }
        let poll = match r.idle {
            Some(idle) => match idle.checked_sub(last.elapsed()) {
                Some(left) if !left.is_zero() => left.min(LONG_POLL),
                _ => return Ok(read),
            },
            None => LONG_POLL,
        };
        let batch = r
            .count
            .map_or(RECV_BATCH, |n| (n - read).min(RECV_BATCH as u64) as i32);
        let rq = pb::ReceiveMessageRequest {
            group: resource(&r.group),
            message_queue: Some(queue.clone()),
            filter_expression: Some(pb::FilterExpression {
                r#type: pb::FilterType::Tag as i32,
                expression: r.tags.clone(),
            }),
            batch_size: batch,
            invisible_duration: Some(duration(INVISIBLE)),
            auto_renew: false,
            long_polling_timeout: Some(duration(poll.max(Duration::from_millis(100)))),
            attempt_id: None,
        };
        let mut stream = c
            .client
            .receive_message(req(rq, &c.client_id, poll + CALL_TIMEOUT))
            .await
            .map_err(|e| grpc("receive", &e))?
            .into_inner();
        let mut acks = Vec::new();
        while let Some(item) = stream.next().await {
            match item.map_err(|e| grpc("receive", &e))?.content {
                Some(pb::receive_message_response::Content::Message(m)) => {
                    writeln!(out, "{}", line(&m, r.verbose))
                        .and_then(|()| out.flush())
                        .map_err(|e| format!("cannot write a message out: {e}"))?;
                    let sp = m.system_properties.unwrap_or_default();
                    acks.push(pb::AckMessageEntry {
                        message_id: sp.message_id,
                        receipt_handle: sp.receipt_handle.unwrap_or_default(),
                    });
                }
                Some(pb::receive_message_response::Content::Status(s))
                    if s.code != pb::Code::Ok as i32
                        && s.code != pb::Code::MessageNotFound as i32 =>
                {
                    status("receive", Some(&s))?;
                }
                _ => {}
            }
        }
        if acks.is_empty() {
            continue;
        }
        read += acks.len() as u64;
        last = Instant::now();
        let a = c
            .client
            .ack_message(req(
                pb::AckMessageRequest {
                    group: resource(&r.group),
                    topic: resource(&r.topic),
                    entries: acks,
                },
                &c.client_id,
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|e| grpc("ack", &e))?
            .into_inner();
        status("ack", a.status.as_ref())?;
        for e in &a.entries {
            status("ack", e.status.as_ref())?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_rocketmq5_shaped_and_distinct() {
        let (a, b) = (message_id(), message_id());
        assert_eq!(a.len(), 34);
        assert!(a.starts_with("01") && a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn a_line_is_one_line() {
        let m = pb::Message {
            body: b"a\nb\\c".to_vec(),
            ..Default::default()
        };
        assert_eq!(line(&m, false), "a\\nb\\\\c");
    }
}
