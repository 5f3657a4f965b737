//! `rocklet bench send --remoting HOST:PORT`: RocketMQ 4 remoting, with the request pattern
//! of the official v4 clients: each producer a connection sending one message per
//! SEND_MESSAGE_V2 (JSON headers, as the Java client's default), and per queue one puller
//! connection doing PULL_MESSAGE of up to 32 messages with long polling, committing its
//! offset in the next pull (the push consumer's `commitOffset` flag).

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

/// The topic's queue count, creating the topic when it does not exist.
async fn queues(c: &mut Conn, topic: &str) -> Result<u32, String> {
    for attempt in 0..2 {
        let r = c
            .call(
                code::GET_ROUTEINFO_BY_TOPIC,
                ext(&[("topic", topic.into())]),
                Vec::new(),
                CALL_TIMEOUT,
            )
            .await?;
        if r.code == status::SUCCESS {
            let route: serde_json::Value =
                serde_json::from_slice(&r.body).map_err(|e| format!("route of {topic}: {e}"))?;
            return route["queueDatas"][0]["readQueueNums"]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("route of {topic} names no queues: {route}"));
        }
        if r.code != status::TOPIC_NOT_EXIST || attempt > 0 {
            return Err(format!("route of {topic}: code {}: {:?}", r.code, r.remark));
        }
        let r = c
            .call(
                code::UPDATE_AND_CREATE_TOPIC,
                ext(&[("topic", topic.into()), ("perm", "6".into())]),
                Vec::new(),
                CALL_TIMEOUT,
            )
            .await?;
        if r.code != status::SUCCESS {
            return Err(format!(
                "creating topic {topic}: code {}: {:?}",
                r.code, r.remark
            ));
        }
    }
    Err(format!("topic {topic} has no route"))
}

/// Runs the remoting bench against `addr` (a broker's remoting listener).
pub async fn run(args: &BenchArgs, addr: &str) -> Result<Outcomes, String> {
    if args.mode != Mode::Send {
        return Err("--remoting measures sends (send + pull): use the send mode".into());
    }
    let pid = std::process::id();
    let sh = Arc::new(Shared {
        args: args.clone(),
        addr: addr.to_string(),
        topic: args.topic(),
        run_id: (epoch_ms() as u32) ^ pid.rotate_left(16),
        ledger: Mutex::new(Ledger::default()),
        rec: Mutex::new(Recorder::default()),
        next: AtomicU64::new(0),
        stop_consumers: AtomicBool::new(false),
    });
    let mut admin = Conn::open(addr).await?;
    let n = queues(&mut admin, &sh.topic).await?;
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
            "RocketMQ 4 remoting to {addr}: {} producer connections (one SEND_MESSAGE_V2 at a time each), {n} puller connections (one per queue, PULL_MESSAGE of up to {PULL_BATCH}, offsets committed in the next pull)",
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
            let Ok(Decoded::Record(m)) =
                record::decode(rest, u32::try_from(rest.len()).unwrap_or(u32::MAX))
            else {
                drop(g);
                sh.error(format!("pull of queue {queue}: an undecodable record"));
                break;
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
