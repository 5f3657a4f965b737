//! The floor of RocketMQ 4 remoting serving (issue #16): the broker's own remoting codec
//! (`remoting::codec`) and record encoder (`rocklet_core::record`) over a TCP_NODELAY accept
//! loop on the broker's runtime, with the least work behind what `rocklet bench send
//! --remoting` calls: GET_ROUTEINFO_BY_TOPIC (the broker's default queue count),
//! GET_MAX_OFFSET, SEND_MESSAGE_V2 (the message encoded as the stored record a pull returns,
//! appended to an in-memory queue behind a `std::sync::Mutex`) and PULL_MESSAGE (up to the
//! batch asked for, long-polling on a `Notify` while the queue is empty). Each connection is
//! one task reading a request, answering it and writing the answer: no writer task, request
//! budget, idle timer, auth, stats or core thread.
//!
//! ```text
//! cargo build --release -p rocklet-broker --example remoting_floor
//! target/release/examples/remoting_floor [127.0.0.1:0]   # prints `remoting=127.0.0.1:PORT`
//! ```

mod floor;

use floor::{lock, now_ms};

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rocklet_broker::config::BrokerConfig;
use rocklet_broker::remoting::codec::{self, RemotingCommand};
use rocklet_broker::remoting::codes::code::{
    GET_MAX_OFFSET, GET_ROUTEINFO_BY_TOPIC, PULL_MESSAGE, SEND_MESSAGE_V2,
};
use rocklet_broker::remoting::codes::status::{
    PULL_NOT_FOUND, REQUEST_CODE_NOT_SUPPORTED, SUCCESS, SYSTEM_ERROR,
};
use rocklet_broker::remoting::handlers::PULL_SUSPEND;
use rocklet_broker::remoting::message::host_of;
use rocklet_core::record::{self, Header, Host};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Long polls wait at most this long (the broker's default cap).
const MAX_LONG_POLL_MS: u64 = 20_000;

#[derive(Default)]
struct Queue {
    /// Encoded records by queue offset.
    records: Vec<Vec<u8>>,
}

struct Floor {
    store_host: Host,
    queue_count: u32,
    /// One topic's queues (the bench uses one topic).
    queues: Vec<(Mutex<Queue>, Notify)>,
}

fn num<T: std::str::FromStr>(req: &RemotingCommand, key: &str) -> Option<T> {
    req.ext.get(key).and_then(|v| v.parse().ok())
}

impl Floor {
    fn queue(&self, req: &RemotingCommand, key: &str) -> Option<&(Mutex<Queue>, Notify)> {
        self.queues.get(num::<usize>(req, key)?)
    }

    async fn handle(&self, req: RemotingCommand) -> RemotingCommand {
        match req.code {
            SEND_MESSAGE_V2 => self.send(req),
            PULL_MESSAGE => self.pull(req).await,
            GET_MAX_OFFSET => {
                let mut r = RemotingCommand::response_to(&req, SUCCESS, None);
                let n = self
                    .queue(&req, "queueId")
                    .map_or(0, |q| lock(&q.0).records.len());
                r.ext.insert("offset".into(), n.to_string());
                r
            }
            GET_ROUTEINFO_BY_TOPIC => {
                let mut r = RemotingCommand::response_to(&req, SUCCESS, None);
                let n = self.queue_count;
                r.body = format!(
                    r#"{{"queueDatas":[{{"brokerName":"floor","readQueueNums":{n},"writeQueueNums":{n},"perm":6,"topicSysFlag":0}}],"brokerDatas":[{{"cluster":"floor","brokerName":"floor","brokerAddrs":{{"0":"{}"}}}}]}}"#,
                    self.store_host
                )
                .into_bytes();
                r
            }
            _ => RemotingCommand::response_to(
                &req,
                REQUEST_CODE_NOT_SUPPORTED,
                Some("not in the floor".into()),
            ),
        }
    }

    /// SEND_MESSAGE_V2's short header names: b topic, e queueId, f flag, g bornTimestamp,
    /// i properties, j reconsumeTimes.
    fn send(&self, req: RemotingCommand) -> RemotingCommand {
        let Some(q) = self.queue(&req, "e") else {
            return RemotingCommand::response_to(&req, SYSTEM_ERROR, Some("no such queue".into()));
        };
        let topic = req.ext.get("b").map_or("", String::as_str);
        let props = req.ext.get("i").map_or("", String::as_str);
        let queue_id = num::<u32>(&req, "e").unwrap_or(0);
        let offset = {
            let mut g = lock(&q.0);
            let offset = g.records.len() as u64;
            let header = Header {
                queue_id,
                flag: num(&req, "f").unwrap_or(0),
                queue_offset: offset,
                born_timestamp: num(&req, "g").unwrap_or(0),
                store_timestamp: now_ms(),
                store_host: self.store_host,
                reconsume_times: num(&req, "j").unwrap_or(0),
                ..Header::default()
            };
            let mut rec = Vec::new();
            if record::encode(&mut rec, &header, &req.body, topic, props.as_bytes()).is_err() {
                return RemotingCommand::response_to(
                    &req,
                    SYSTEM_ERROR,
                    Some("not encodable".into()),
                );
            }
            g.records.push(rec);
            offset
        };
        q.1.notify_waiters();
        let mut r = RemotingCommand::response_to(&req, SUCCESS, None);
        r.ext
            .insert("msgId".into(), format!("{queue_id:08X}{offset:016X}"));
        r.ext.insert("queueId".into(), queue_id.to_string());
        r.ext.insert("queueOffset".into(), offset.to_string());
        r
    }

    async fn pull(&self, req: RemotingCommand) -> RemotingCommand {
        let answer = |code: i32, next: u64, max_offset: u64, body: Vec<u8>| {
            let mut r = RemotingCommand::response_to(&req, code, None);
            r.ext.insert("suggestWhichBrokerId".into(), "0".into());
            r.ext.insert("nextBeginOffset".into(), next.to_string());
            r.ext.insert("minOffset".into(), "0".into());
            r.ext.insert("maxOffset".into(), max_offset.to_string());
            r.body = body;
            r
        };
        let offset = num::<u64>(&req, "queueOffset").unwrap_or(0);
        let Some(q) = self.queue(&req, "queueId") else {
            return answer(PULL_NOT_FOUND, offset, 0, Vec::new());
        };
        let max = num::<usize>(&req, "maxMsgNums").unwrap_or(32).max(1);
        let flags = num::<i32>(&req, "sysFlag").unwrap_or(0);
        let wait = if flags & PULL_SUSPEND != 0 {
            num::<u64>(&req, "suspendTimeoutMillis")
                .unwrap_or(MAX_LONG_POLL_MS)
                .min(MAX_LONG_POLL_MS)
        } else {
            0
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait);
        loop {
            let notified = q.1.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (body, next, end) = {
                let g = lock(&q.0);
                let end = g.records.len();
                let from = usize::try_from(offset).unwrap_or(usize::MAX).min(end);
                let to = from.saturating_add(max).min(end);
                let mut body = Vec::new();
                for r in &g.records[from..to] {
                    body.extend_from_slice(r);
                }
                (body, to as u64, end as u64)
            };
            if !body.is_empty() {
                return answer(SUCCESS, next, end, body);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return answer(PULL_NOT_FOUND, offset, end, Vec::new());
            }
        }
    }
}

/// One connection: a request read, answered and written at a time.
async fn conn(floor: Arc<Floor>, s: TcpStream) {
    let (rd, mut wr) = s.into_split();
    let mut rd = BufReader::new(rd);
    loop {
        let mut len = [0u8; 4];
        if rd.read_exact(&mut len).await.is_err() {
            return;
        }
        let Ok(n) = codec::frame_length(len) else {
            return;
        };
        let mut frame = vec![0; n];
        if rd.read_exact(&mut frame).await.is_err() {
            return;
        }
        let Ok(req) = codec::decode_frame(&frame) else {
            return;
        };
        drop(frame);
        if req.is_response() {
            continue;
        }
        let oneway = req.is_oneway();
        let resp = floor.handle(req).await;
        if !oneway && wr.write_all(&resp.encode()).await.is_err() {
            return;
        }
    }
}

async fn serve(listen: SocketAddr) -> Result<(), String> {
    let cfg = BrokerConfig::default();
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let store_host = host_of(addr);
    let queue_count = cfg.core.default_queues;
    let floor = Arc::new(Floor {
        store_host,
        queue_count,
        queues: (0..queue_count)
            .map(|_| (Mutex::new(Queue::default()), Notify::new()))
            .collect(),
    });
    println!("remoting_floor listening remoting={addr}");
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => {
                    if let Err(e) = s.set_nodelay(true) {
                        eprintln!("cannot set TCP_NODELAY: {e}");
                    }
                    tokio::spawn(conn(floor.clone(), s));
                }
                Err(e) => {
                    eprintln!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

fn main() -> std::process::ExitCode {
    floor::run(serve)
}
