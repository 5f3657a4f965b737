//! `rocklet bench send --remoting HOST:PORT`: RocketMQ 4 remoting, with the request pattern
//! of the official v4 clients: each producer a connection sending one message per
//! SEND_MESSAGE_V2 (JSON headers, as the Java client's default), and per queue one puller
//! connection doing PULL_MESSAGE of up to 32 messages with long polling, committing its
//! offset in the next pull (the push consumer's `commitOffset` flag). The broker is the one
//! the name server's route names (Apache's name server, or Rocklet's), read as RocketMQ
//! writes it ([`fastjson`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocklet_core::record::{self, Decoded};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::ledger::{Fate, Ledger};
use super::{
    body, epoch_ms, parse_body, us, BenchArgs, CpuMark, Live, Mode, Outcomes, Recorder, RunCpu,
};
use crate::remoting::codec::{self, RemotingCommand, SerializeType};
use crate::remoting::codes::{code, status};

const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Long-poll of a pull (the push consumer's default is 15 s; shorter so a run ends quickly).
const SUSPEND_MS: u64 = 1000;
const PULL_BATCH: u32 = 32;

/// PULL_MESSAGE sysFlag bits: commit the offset given, suspend (long poll), subscription.
const PULL_FLAGS: i32 = 0x1 | 0x2 | 0x4;

/// One connection, one request at a time.
struct Conn {
    rd: BufReader<tokio::net::tcp::OwnedReadHalf>,
    wr: tokio::net::tcp::OwnedWriteHalf,
    opaque: i32,
}

impl Conn {
    async fn open(addr: &str) -> Result<Conn, String> {
        let s = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("cannot reach {addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let (rd, wr) = s.into_split();
        Ok(Conn {
            rd: BufReader::new(rd),
            wr,
            opaque: 0,
        })
    }

    async fn call(
        &mut self,
        code: i32,
        ext: BTreeMap<String, String>,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<RemotingCommand, String> {
        self.opaque = self.opaque.wrapping_add(1);
        let mut c = RemotingCommand::request(code, ext, body);
        c.opaque = self.opaque;
        c.serialize = SerializeType::Json;
        self.wr
            .write_all(&c.encode())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let read = async {
            loop {
                let mut len = [0u8; 4];
                self.rd
                    .read_exact(&mut len)
                    .await
                    .map_err(|e| format!("read: {e}"))?;
                let n = codec::frame_length(len).map_err(|e| e.to_string())?;
                let mut buf = vec![0; n];
                self.rd
                    .read_exact(&mut buf)
                    .await
                    .map_err(|e| format!("read: {e}"))?;
                let r = codec::decode_frame(&buf).map_err(|e| e.to_string())?;
                if r.is_response() && r.opaque == self.opaque {
                    return Ok::<_, String>(r);
                }
            }
        };
        tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| format!("no answer to request code {code} within {timeout:?}"))?
    }
}

fn ext(fields: &[(&str, String)]) -> BTreeMap<String, String> {
    fields
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

struct Shared {
    args: BenchArgs,
    addr: String,
    topic: String,
    run_id: u32,
    ledger: Mutex<Ledger>,
    rec: Mutex<Recorder>,
    next: AtomicU64,
    stop_consumers: AtomicBool,
}

impl Shared {
    fn error(&self, e: impl Into<String>) {
        self.rec.lock().expect("recorder").error(e);
    }
}

/// How many queues the bench creates its topic with when it does not exist (mqadmin
/// updateTopic's default, so Rocklet and Apache are measured on the same topic shape).
const NEW_TOPIC_QUEUES: u32 = 8;

/// RocketMQ's JSON as its name server and broker write it (fastjson): map keys that are
/// integers are not quoted (`"brokerAddrs":{0:"127.0.0.1:10911"}`). Quotes them, then parses.
///
/// # Errors
/// Names the problem when the text is not JSON even then.
pub fn fastjson(bytes: &[u8]) -> Result<serde_json::Value, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.char_indices().peekable();
    let (mut in_string, mut escaped) = (false, false);
    while let Some((_, ch)) = chars.next() {
        out.push(ch);
        if in_string {
            match (escaped, ch) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match ch {
            '"' => in_string = true,
            '{' | ',' => {
                // A bare integer key: `{0:` or `,12:`.
                while let Some((_, w)) = chars.next_if(|(_, c)| c.is_whitespace()) {
                    out.push(w);
                }
                let Some(&(start, first)) = chars.peek() else {
                    continue;
                };
                if !(first.is_ascii_digit() || first == '-') {
                    continue;
                }
                let rest = &text[start..];
                let len = rest
                    .char_indices()
                    .skip(1)
                    .find(|(_, c)| !c.is_ascii_digit())
                    .map_or(rest.len(), |(i, _)| i);
                if rest[len..].trim_start().starts_with(':') {
                    out.push('"');
                    out.push_str(&rest[..len]);
                    out.push('"');
                    for _ in 0..rest[..len].chars().count() {
                        chars.next();
                    }
                }
            }
            _ => {}
        }
    }
    serde_json::from_str(&out).map_err(|e| format!("{e} in {text}"))
}

/// The master address of the first broker a route or cluster-info `brokerDatas` entry names.
fn master_of(broker: &serde_json::Value) -> Option<String> {
    broker["brokerAddrs"]["0"].as_str().map(String::from)
}

/// Where a v4 client's sends go: asks the name server at `namesrv` for the topic's route
/// (GET_ROUTEINFO_BY_TOPIC, as the clients do), creating the topic with
/// [`NEW_TOPIC_QUEUES`] queues on the cluster's first broker when the name server has none
/// (GET_BROKER_CLUSTER_INFO, then UPDATE_AND_CREATE_TOPIC at that broker). Returns the
/// broker's address and the topic's queue count there.
async fn resolve(namesrv: &str, topic: &str) -> Result<(String, u32), String> {
    let mut ns = Conn::open(namesrv).await?;
    let mut created = false;
    // A broker registers a new topic with its name server in the background (Apache's does
    // at once, but asynchronously): the route is asked for a few times.
    for _ in 0..50 {
        let r = ns
            .call(
                code::GET_ROUTEINFO_BY_TOPIC,
                ext(&[("topic", topic.into())]),
                Vec::new(),
                CALL_TIMEOUT,
            )
            .await?;
        if r.code == status::SUCCESS {
            let route = fastjson(&r.body).map_err(|e| format!("route of {topic}: {e}"))?;
            let broker = &route["brokerDatas"][0];
            let addr = master_of(broker)
                .ok_or_else(|| format!("route of {topic} names no master broker: {route}"))?;
            let name = broker["brokerName"].as_str().unwrap_or_default();
            let queues = route["queueDatas"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|q| q["brokerName"].as_str() == Some(name))
                .and_then(|q| q["writeQueueNums"].as_u64())
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("route of {topic} names no queues on {name}: {route}"))?;
            return Ok((addr, queues));
        }
        if r.code != status::TOPIC_NOT_EXIST {
            return Err(format!("route of {topic}: code {}: {:?}", r.code, r.remark));
        }
        if !created {
            create_topic(&mut ns, topic).await?;
            created = true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!(
        "the name server {namesrv} has no route for {topic} 10 s after it was created"
    ))
}

/// Creates `topic` on the first broker the name server's cluster info names.
async fn create_topic(ns: &mut Conn, topic: &str) -> Result<(), String> {
    let r = ns
        .call(
            code::GET_BROKER_CLUSTER_INFO,
            BTreeMap::new(),
            Vec::new(),
            CALL_TIMEOUT,
        )
        .await?;
    if r.code != status::SUCCESS {
        return Err(format!("cluster info: code {}: {:?}", r.code, r.remark));
    }
    let info = fastjson(&r.body).map_err(|e| format!("cluster info: {e}"))?;
    let broker = info["brokerAddrTable"]
        .as_object()
        .and_then(|t| t.values().find_map(master_of))
        .ok_or_else(|| format!("the cluster info names no master broker: {info}"))?;
    let n = NEW_TOPIC_QUEUES.to_string();
    let r = Conn::open(&broker)
        .await?
        .call(
            code::UPDATE_AND_CREATE_TOPIC,
            ext(&[
                ("topic", topic.into()),
                ("defaultTopic", "TBW102".into()),
                ("readQueueNums", n.clone()),
                ("writeQueueNums", n),
                ("perm", "6".into()),
                ("topicFilterType", "SINGLE_TAG".into()),
                ("topicSysFlag", "0".into()),
                ("order", "false".into()),
            ]),
            Vec::new(),
            CALL_TIMEOUT,
        )
        .await?;
    if r.code != status::SUCCESS {
        return Err(format!(
            "creating topic {topic} at {broker}: code {}: {:?}",
            r.code, r.remark
        ));
    }
    Ok(())
}

/// Runs the remoting bench through the name server at `namesrv` (v4 clients' `namesrvAddr`;
/// Rocklet's broker listener answers routes too), against the broker its route names.
pub async fn run(args: &BenchArgs, namesrv: &str) -> Result<Outcomes, String> {
    if args.mode != Mode::Send {
        return Err("--remoting measures sends (send + pull): use the send mode".into());
    }
    let topic = args.topic();
    let (addr, n) = resolve(namesrv, &topic).await?;
    let addr = addr.as_str();
    let pid = std::process::id();
    let sh = Arc::new(Shared {
        args: args.clone(),
        addr: addr.to_string(),
        topic,
        run_id: (epoch_ms() as u32) ^ pid.rotate_left(16),
        ledger: Mutex::new(Ledger::default()),
        rec: Mutex::new(Recorder::default()),
        next: AtomicU64::new(0),
        stop_consumers: AtomicBool::new(false),
    });
    let mut admin = Conn::open(addr).await?;
    // Every puller starts at its queue's end: messages of earlier runs are not consumed.
    let mut pullers = Vec::new();
    for q in 0..n {
        let r = admin
            .call(
                code::GET_MAX_OFFSET,
                ext(&[("topic", sh.topic.clone()), ("queueId", q.to_string())]),
                Vec::new(),
                CALL_TIMEOUT,
            )
            .await?;
        let start: u64 = r
            .ext
            .get("offset")
            .and_then(|o| o.parse().ok())
            .ok_or_else(|| format!("GET_MAX_OFFSET of queue {q}: no offset ({:?})", r.remark))?;
        let c = Conn::open(addr).await?;
        let sh = sh.clone();
        pullers.push(tokio::spawn(async move { pull(sh, c, q, start).await }));
    }
    let live_stop = Arc::new(AtomicBool::new(false));
    let live = {
        let sh = sh.clone();
        let stop = live_stop.clone();
        tokio::spawn(async move {
            let mut l = Live::new(sh.args.live);
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if l.due() {
                    let consumed = sh.ledger.lock().expect("ledger").consumed_total();
                    let r = sh.rec.lock().expect("recorder");
                    l.print(sh.args.mode.noun(), &r, consumed, 0);
                }
            }
            l.finish();
        })
    };
    let mut producers = Vec::new();
    for _ in 0..args.clients {
        producers.push(Conn::open(addr).await?);
    }
    let cpu0 = CpuMark::now(args.broker_pid)?;
    let t0 = Instant::now();
    let stop_at = args.duration.map(|d| t0 + d);
    let tasks: Vec<_> = producers
        .into_iter()
        .map(|c| {
            let sh = sh.clone();
            tokio::spawn(async move { produce(sh, c, n, stop_at).await })
        })
        .collect();
    for t in tasks {
        t.await.map_err(|e| format!("producer failed: {e}"))?;
    }
    let elapsed = t0.elapsed();
    // Past the drain timeout, up to --late-wait more: what comes then is late, not missing.
    let until = Instant::now() + args.drain_timeout;
    let mut late_until = None;
    loop {
        let (left, _) = sh.ledger.lock().expect("ledger").outstanding();
        if left == 0 {
            break;
        }
        let now = Instant::now();
        if now >= until && late_until.is_none() {
            sh.ledger.lock().expect("ledger").mark_late();
            late_until = Some(now + args.late_wait);
        }
        if late_until.is_some_and(|l| now >= l) {
            sh.error(format!(
                "drain timed out after {:?} and {:?} more: {left} messages not consumed",
                args.drain_timeout, args.late_wait
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu = RunCpu::between(cpu0, CpuMark::now(args.broker_pid)?);
    // A little longer, so a duplicate would show.
    tokio::time::sleep(Duration::from_millis(600)).await;
    sh.stop_consumers.store(true, Ordering::Relaxed);
    for p in pullers {
        let _ = p.await;
    }
    live_stop.store(true, Ordering::Relaxed);
    let _ = live.await;
    let ledger = std::mem::take(&mut *sh.ledger.lock().expect("ledger"));
    let rec = std::mem::take(&mut *sh.rec.lock().expect("recorder"));
    Ok(Outcomes {
        consumed: ledger.consumed_total(),
        verdict: ledger.verdict(),
        rec,
        elapsed,
        fsyncs: None,
        log_bytes: None,
        notes: vec![format!(
            "RocketMQ 4 remoting to {addr} (the route of name server {namesrv}): {} producer connections (one SEND_MESSAGE_V2 at a time each), {n} puller connections (one per queue, PULL_MESSAGE of up to {PULL_BATCH}, offsets committed in the next pull)",
            args.clients
        )],
        fields: Vec::new(),
        cpu,
    })
}

async fn produce(sh: Arc<Shared>, mut c: Conn, queues: u32, stop_at: Option<Instant>) {
    let args = &sh.args;
    loop {
        if stop_at.is_some_and(|t| Instant::now() >= t) {
            return;
        }
        let seq = sh.next.fetch_add(1, Ordering::Relaxed);
        if stop_at.is_none() && seq >= args.count {
            return;
        }
        let t0 = Instant::now();
        // The Java client's properties: a unique key and WAIT, name\x01value\x02 each.
        let props = format!(
            "UNIQ_KEY\u{1}{:08X}{seq:016X}\u{2}WAIT\u{1}true\u{2}",
            sh.run_id
        );
        let fields = ext(&[
            ("a", "RockletBenchProducer".into()),
            ("b", sh.topic.clone()),
            ("c", "TBW102".into()),
            ("d", "4".into()),
            ("e", (seq % u64::from(queues)).to_string()),
            ("f", "0".into()),
            ("g", epoch_ms().to_string()),
            ("h", "0".into()),
            ("i", props),
            ("j", "0".into()),
            ("k", "false".into()),
        ]);
        sh.ledger.lock().expect("ledger").set(seq, Fate::Ambiguous);
        match c
            .call(
                code::SEND_MESSAGE_V2,
                fields,
                body(sh.run_id, seq, args.size),
                CALL_TIMEOUT,
            )
            .await
        {
            Ok(r) if r.code == status::SUCCESS => {
                sh.ledger.lock().expect("ledger").set(seq, Fate::Once);
                let mut r = sh.rec.lock().expect("recorder");
                let _ = r.op.record(us(t0.elapsed()));
                r.done += 1;
            }
            Ok(r) => sh.error(format!("send: code {}: {:?}", r.code, r.remark)),
            Err(e) => {
                sh.error(format!("send: {e}"));
                // The connection is in an unknown state: a new one.
                match Conn::open(&sh.addr).await {
                    Ok(n) => c = n,
                    Err(e) => {
                        sh.error(e);
                        return;
                    }
                }
            }
        }
    }
}

async fn pull(sh: Arc<Shared>, mut c: Conn, queue: u32, mut offset: u64) {
    let group = sh.args.group.clone();
    while !sh.stop_consumers.load(Ordering::Relaxed) {
        let fields = ext(&[
            ("consumerGroup", group.clone()),
            ("topic", sh.topic.clone()),
            ("queueId", queue.to_string()),
            ("queueOffset", offset.to_string()),
            ("maxMsgNums", PULL_BATCH.to_string()),
            ("sysFlag", PULL_FLAGS.to_string()),
            ("commitOffset", offset.to_string()),
            ("suspendTimeoutMillis", SUSPEND_MS.to_string()),
            ("subscription", "*".into()),
            ("subVersion", "0".into()),
        ]);
        let r = match c
            .call(
                code::PULL_MESSAGE,
                fields,
                Vec::new(),
                CALL_TIMEOUT + Duration::from_millis(SUSPEND_MS),
            )
            .await
        {
            Ok(r) => r,
            Err(e) => {
                sh.error(format!("pull of queue {queue}: {e}"));
                match Conn::open(&sh.addr).await {
                    Ok(n) => c = n,
                    Err(e) => {
                        sh.error(e);
                        return;
                    }
                }
                continue;
            }
        };
        if let Some(next) = r.ext.get("nextBeginOffset").and_then(|o| o.parse().ok()) {
            offset = next;
        }
        if r.code != status::SUCCESS {
            // Nothing new before the long poll ended (PULL_NOT_FOUND) or retry at once.
            continue;
        }
        let now = epoch_ms();
        let mut rest = &r.body[..];
        let mut g = sh.ledger.lock().expect("ledger");
        while !rest.is_empty() {
            // Apache's records carry no CRC property (its default): BODYCRC checks them.
            let m = match record::decode_rocketmq(
                rest,
                u32::try_from(rest.len()).unwrap_or(u32::MAX),
            ) {
                Ok(Decoded::Record(m)) => m,
                other => {
                    drop(g);
                    sh.error(format!(
                        "pull of queue {queue}: an undecodable record ({other:?})"
                    ));
                    break;
                }
            };
            match parse_body(m.body) {
                Some((run, seq)) if run == sh.run_id => {
                    g.consumed(seq, now, 0);
                }
                _ => g.foreign(),
            }
            let size = m.total_size as usize;
            rest = &rest[size.min(rest.len())..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fastjson_integer_keys_are_read() {
        // As Apache RocketMQ 5.5.0's name server answers GET_ROUTEINFO_BY_TOPIC.
        let route = br#"{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}"#;
        assert!(serde_json::from_slice::<serde_json::Value>(route).is_err());
        let v = fastjson(route).unwrap();
        assert_eq!(
            master_of(&v["brokerDatas"][0]).as_deref(),
            Some("127.0.0.1:10911")
        );
        assert_eq!(v["brokerDatas"][0]["brokerAddrs"]["1"], "127.0.0.1:10921");
        assert_eq!(v["queueDatas"][0]["writeQueueNums"], 8);
        // Quoted keys, strings holding `{0:` and `,1:`, negative keys and spaces are kept.
        let v = fastjson(br#"{ "a" : "{0:x,1:y}", "m" : { -1 : [1, 2], "q\"" : 3 } }"#).unwrap();
        assert_eq!(v["a"], "{0:x,1:y}");
        assert_eq!(v["m"]["-1"], serde_json::json!([1, 2]));
        assert_eq!(v["m"]["q\""], 3);
        assert!(fastjson(b"{0 1}").is_err());
    }
}
