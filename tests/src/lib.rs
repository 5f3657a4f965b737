//! # rocklet-conformance
//!
//! The Rust runner of the scenario vectors (`tests/vectors/scenarios/*.json`, format in
//! `tests/vectors/README.md`), shared by the `bless` binary and the `vectors` test, plus
//! helpers the model, crash and format tests share.
//!
//! A scenario runs through the embedding layer every binding uses (`rocklet_embed::Engine` over
//! [`MemStorage`], a manual clock starting at 0): before each step the clock advances to the
//! step's `at` by `rocklet_embed::Drive`, firing every timer on the way at its own time and
//! answering each step's checks with the group's checker before the next. So the vectors test
//! the shared layer once, and each binding's runner its conversions. Each step yields a
//! normalized JSON result (or none) that is compared with its `expect`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rocklet_core::{
    Broker, CheckRequest, ClientError, Config, Delay, MemStorage, Millis, NewMessage,
    ReceiptHandle, Reply, Request, Resolution, TagFilter, TxnId,
};
use rocklet_embed::{Drive, Fail, ManualClock};
use serde_json::{json, Map, Value};

/// The group `consume` reads with when the step names none.
pub const DEFAULT_READER: &str = "vector-reader";

/// A loaded scenario file.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Where it was loaded from.
    pub path: PathBuf,
    /// Its `name`.
    pub name: String,
    /// The whole file.
    pub raw: Value,
}

impl Scenario {
    /// Loads and checks the shape of a scenario file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(path, &text)
    }

    /// Parses a scenario from text.
    pub fn parse(path: &Path, text: &str) -> Result<Self, String> {
        let raw: Value = serde_json::from_str(text)
            .map_err(|e| format!("{}: invalid JSON: {e}", path.display()))?;
        let name = raw
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{}: no `name`", path.display()))?
            .to_string();
        if !raw.get("steps").is_some_and(Value::is_array) {
            return Err(format!("{}: no `steps` list", path.display()));
        }
        Ok(Scenario {
            path: path.to_path_buf(),
            name,
            raw,
        })
    }

    /// The steps.
    #[must_use]
    pub fn steps(&self) -> &[Value] {
        self.raw["steps"].as_array().map_or(&[], Vec::as_slice)
    }

    /// The broker configuration: defaults overridden by `config`.
    pub fn config(&self) -> Result<Config, String> {
        match self.raw.get("config") {
            None | Some(Value::Null) => Ok(Config::default()),
            Some(c) => serde_json::from_value(c.clone())
                .map_err(|e| format!("{}: bad config: {e}", self.name)),
        }
    }

    /// Runs every step; one result per step (`None` for steps that yield none).
    pub fn run(&self) -> Result<Vec<Option<Value>>, String> {
        let mut runner = Runner::new(self.config()?)?;
        let mut out = Vec::with_capacity(self.steps().len());
        for (i, step) in self.steps().iter().enumerate() {
            let r = runner
                .step(step)
                .map_err(|e| format!("{}: step {i}: {e}", self.name))?;
            out.push(r);
        }
        Ok(out)
    }

    /// Runs the scenario and lists every step whose `expect` differs from the result.
    pub fn check(&self) -> Result<Vec<Mismatch>, String> {
        let results = self.run()?;
        let mut out = Vec::new();
        for (i, (step, got)) in self.steps().iter().zip(results).enumerate() {
            let Some(expected) = step.get("expect") else {
                continue;
            };
            let got = got.unwrap_or(Value::Null);
            if *expected != got {
                out.push(Mismatch {
                    scenario: self.name.clone(),
                    step: i,
                    op: step.get("op").and_then(Value::as_str).unwrap_or("?").into(),
                    expected: expected.clone(),
                    got,
                });
            }
        }
        Ok(out)
    }

    /// Rewrites every `expect` from the Rust core, except on steps marked
    /// `"hand_written": true` (a known core bug: the correct expectation stays). Returns the
    /// new file text.
    pub fn blessed(&self) -> Result<String, String> {
        let results = self.run()?;
        let mut raw = self.raw.clone();
        let steps = raw["steps"].as_array_mut().expect("checked on load");
        for (step, got) in steps.iter_mut().zip(results) {
            let obj = step.as_object_mut().ok_or("a step is not an object")?;
            if obj.get("hand_written").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            match got {
                Some(v) => {
                    obj.insert("expect".into(), v);
                }
                None => {
                    obj.remove("expect");
                }
            }
        }
        Ok(render_scenario(&raw))
    }
}

/// A step whose result is not its `expect`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub scenario: String,
    pub step: usize,
    pub op: String,
    pub expected: Value,
    pub got: Value,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "scenario `{}` step {} ({}):\n  expected {}\n  got      {}",
            self.scenario, self.step, self.op, self.expected, self.got
        )
    }
}

/// The scenario directory of this crate.
#[must_use]
pub fn scenario_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("vectors")
        .join("scenarios")
}

/// Every scenario file, sorted by name.
pub fn scenario_files() -> Result<Vec<PathBuf>, String> {
    let dir = scenario_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    Ok(files)
}

/// Runs scenarios step by step against one broker.
#[derive(Debug)]
pub struct Runner {
    host: rocklet_embed::Engine<MemStorage, ManualClock>,
    /// group → answer; `None` = no checker (producer offline).
    checkers: BTreeMap<String, Option<Resolution>>,
    txn_by_label: HashMap<String, TxnId>,
    label_by_txn: HashMap<TxnId, String>,
    handles: HashMap<String, Vec<Option<ReceiptHandle>>>,
    checks: Vec<Value>,
}

type StepResult = Result<Option<Value>, String>;

/// A pull's bodies, next offset and max offset, or the client error.
type PullOutcome = Result<(Vec<Value>, u64, u64), ClientError>;

fn pull_req(
    group: &str,
    topic: &str,
    queue_id: u32,
    offset: Option<u64>,
    max: u32,
    tags: &str,
    auto_commit: bool,
) -> Request {
    Request::Pull {
        group: group.into(),
        topic: topic.into(),
        queue_id,
        offset,
        max,
        filter: TagFilter::parse(tags),
        auto_commit,
    }
}

fn err_value(e: &ClientError) -> Value {
    json!({ "error": e.code() })
}

fn str_field<'a>(step: &'a Value, key: &str) -> Result<&'a str, String> {
    step.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("missing string field `{key}`"))
}

fn opt_str<'a>(step: &'a Value, key: &str) -> Option<&'a str> {
    step.get(key).and_then(Value::as_str)
}

fn u64_field(step: &Value, key: &str) -> Result<Option<u64>, String> {
    match step.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` is not a non-negative integer")),
    }
}

fn resolution(s: &str) -> Result<Resolution, String> {
    match s {
        "commit" => Ok(Resolution::Commit),
        "rollback" => Ok(Resolution::Rollback),
        "unknown" => Ok(Resolution::Unknown),
        other => Err(format!(
            "resolution `{other}` is not commit, rollback or unknown"
        )),
    }
}

fn body_text(b: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(b).into_owned())
}

/// A message from a step (or a batch entry): body, tag, keys, properties.
fn message(topic: &str, m: &Value) -> Result<NewMessage, String> {
    let body = str_field(m, "body")?;
    let mut msg = NewMessage::new(topic, body.as_bytes().to_vec());
    msg.tag = opt_str(m, "tag").map(String::from);
    if let Some(keys) = m.get("keys") {
        let keys = keys.as_array().ok_or("`keys` is not a list")?;
        msg.keys = keys
            .iter()
            .map(|k| k.as_str().map(String::from).ok_or("a key is not a string"))
            .collect::<Result<_, _>>()?;
    }
    if let Some(props) = m.get("properties") {
        let props = props.as_object().ok_or("`properties` is not an object")?;
        for (k, v) in props {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            msg.properties.push((k.clone(), v));
        }
    }
    Ok(msg)
}

impl Runner {
    /// A broker over empty memory storage at time 0.
    pub fn new(cfg: Config) -> Result<Self, String> {
        // Memory storage: durable once written, so the host syncs after each burst.
        let host = rocklet_embed::Engine::open(cfg, MemStorage::new(), ManualClock::new(0), false)
            .map_err(|e| format!("open: {e}"))?
            .eager_sync(true);
        Ok(Runner {
            host,
            checkers: BTreeMap::new(),
            txn_by_label: HashMap::new(),
            label_by_txn: HashMap::new(),
            handles: HashMap::new(),
            checks: Vec::new(),
        })
    }

    /// The broker.
    pub fn broker(&mut self) -> &mut Broker<MemStorage> {
        self.host.core_mut().expect("broker is open")
    }

    /// The clock.
    #[must_use]
    pub fn now(&self) -> u64 {
        self.host.now()
    }

    fn exec(&mut self, req: Request) -> Result<Reply, String> {
        let reply = match self.host.execute(req) {
            Ok(r) => r,
            Err(Fail::Client(e)) => Reply::Error(e),
            Err(e) => return Err(format!("broker failed: {e}")),
        };
        self.answer(None)?;
        Ok(reply)
    }

    /// Answers checks with the registered checkers, recording each: those given, or those
    /// the host has (a request or a checker coming online sent them at the current time).
    fn answer(&mut self, checks: Option<Vec<(CheckRequest, Millis)>>) -> Result<(), String> {
        let checks = checks.unwrap_or_else(|| self.host.take_checks());
        for (c, at) in checks {
            let label = self
                .label_by_txn
                .get(&c.txn)
                .cloned()
                .unwrap_or_else(|| c.txn.to_string());
            self.checks
                .push(json!({ "group": c.group, "txn": label, "check": c.check, "at": at }));
            let answer = self
                .checkers
                .get(&c.group)
                .copied()
                .flatten()
                .unwrap_or(Resolution::Unknown);
            self.host
                .answer(&c, answer)
                .map_err(|e| format!("broker failed: {e}"))?;
        }
        Ok(())
    }

    /// Fires what is due at the current time.
    fn fire(&mut self) -> Result<(), String> {
        let now = self.host.now();
        self.host
            .jump_to(now)
            .map_err(|e| format!("broker failed: {e}"))?;
        self.answer(None)
    }

    /// Advances the clock to `to`, firing every timer on the way at its own time.
    pub fn advance_to(&mut self, to: u64) -> Result<(), String> {
        if to < self.host.now() {
            return Err(format!(
                "`at` {to} is before the current time {}",
                self.host.now()
            ));
        }
        self.fire()?;
        let mut d = Drive::to(to);
        loop {
            let checks = d
                .next(&mut self.host)
                .map_err(|e| format!("broker failed: {e}"))?;
            if checks.is_empty() {
                return Ok(());
            }
            self.answer(Some(checks))?;
        }
    }

    /// Runs one step.
    pub fn step(&mut self, step: &Value) -> StepResult {
        if let Some(at) = u64_field(step, "at")? {
            self.advance_to(at)?;
        }
        let op = str_field(step, "op")?;
        match op {
            "send" => self.send(step),
            "send_batch" => self.send_batch(step),
            "prepare" => self.prepare(step),
            "end" => self.end(step),
            "checker" => self.checker(step),
            "declare_group" => self.declare_group(step),
            "advance" => Ok(None),
            "checks" => Ok(Some(json!({ "checks": std::mem::take(&mut self.checks) }))),
            "consume" => self.consume(step),
            "pull" => self.pull(step),
            "receive" => self.receive(step),
            "ack" => self.ack(step),
            "change_invisible" => self.change_invisible(step),
            "pending" => {
                let b = self.broker();
                Ok(Some(
                    json!({ "transactions": b.pending_transaction_count(), "delays": b.pending_delay_count() }),
                ))
            }
            "reopen" => self.reopen(),
            other => Err(format!("unknown op `{other}`")),
        }
    }

    fn send(&mut self, step: &Value) -> StepResult {
        let mut m = message(str_field(step, "topic")?, step)?;
        m.queue_id = u64_field(step, "queue_id")?.map(|q| q as u32);
        if let Some(l) = u64_field(step, "delay_level")? {
            m.delay = Some(Delay::Level(u32::try_from(l).unwrap_or(u32::MAX)));
        }
        if let Some(at) = u64_field(step, "deliver_at_ms")? {
            m.delay = Some(Delay::At(at));
        }
        Ok(Some(
            match self.exec(Request::Send { messages: vec![m] })? {
                Reply::Sent(_) => json!({ "ok": true }),
                Reply::Error(e) => err_value(&e),
                other => return Err(format!("unexpected reply {other:?}")),
            },
        ))
    }

    fn send_batch(&mut self, step: &Value) -> StepResult {
        let topic = str_field(step, "topic")?;
        let list = step
            .get("messages")
            .and_then(Value::as_array)
            .ok_or("missing `messages` list")?;
        let queue_id = u64_field(step, "queue_id")?.map(|q| q as u32);
        let mut messages = Vec::new();
        for m in list {
            // A batch entry may name its own topic (to show a mixed-topic batch is refused).
            let mut msg = message(opt_str(m, "topic").unwrap_or(topic), m)?;
            msg.queue_id = queue_id;
            messages.push(msg);
        }
        Ok(Some(match self.exec(Request::Send { messages })? {
            Reply::Sent(r) => json!({ "ok": true, "count": r.len() }),
            Reply::Error(e) => err_value(&e),
            other => return Err(format!("unexpected reply {other:?}")),
        }))
    }

    fn prepare(&mut self, step: &Value) -> StepResult {
        let group = str_field(step, "group")?.to_string();
        let message = message(str_field(step, "topic")?, step)?;
        let reply = self.exec(Request::Prepare {
            group,
            message,
            check_immunity_ms: None,
        })?;
        Ok(Some(match reply {
            Reply::Sent(r) => {
                let txn = r
                    .first()
                    .and_then(|r| r.txn)
                    .ok_or("prepare answered without a transaction id")?;
                if let Some(label) = opt_str(step, "as") {
                    self.txn_by_label.insert(label.into(), txn);
                    self.label_by_txn.insert(txn, label.into());
                }
                json!({ "ok": true })
            }
            Reply::Error(e) => err_value(&e),
            other => return Err(format!("unexpected reply {other:?}")),
        }))
    }

    fn end(&mut self, step: &Value) -> StepResult {
        let label = str_field(step, "txn")?;
        let resolution = resolution(str_field(step, "resolution")?)?;
        let txn = match self.txn_by_label.get(label) {
            Some(t) => *t,
            None => match label.parse::<TxnId>() {
                Ok(t) => t,
                Err(e) => return Ok(Some(err_value(&e))),
            },
        };
        // The step's group (a test of a foreign end), else the transaction's own.
        let group = match step.get("group").and_then(Value::as_str) {
            Some(g) => Some(g.to_string()),
            None => self
                .broker()
                .transaction_group(txn)
                .map_err(|e| format!("broker failed: {e}"))?,
        };
        let reply = self.exec(Request::EndTransaction {
            txn,
            resolution,
            group,
            from_check: false,
        })?;
        Ok(Some(match reply {
            Reply::Ended { duplicate, .. } => json!({ "ok": true, "duplicate": duplicate }),
            Reply::Error(e) => err_value(&e),
            other => return Err(format!("unexpected reply {other:?}")),
        }))
    }

    fn declare_group(&mut self, step: &Value) -> StepResult {
        let group = str_field(step, "group")?;
        let fifo = match step.get("fifo") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("`fifo` is not a boolean".into()),
        };
        Ok(Some(
            match self
                .host
                .declare_group(group, fifo)
                .map_err(|e| format!("broker failed: {e}"))?
            {
                Ok(()) => json!({ "ok": true }),
                Err(e) => err_value(&e),
            },
        ))
    }

    fn checker(&mut self, step: &Value) -> StepResult {
        let group = str_field(step, "group")?.to_string();
        let answer = match step.get("answer") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(resolution(s)?),
            Some(_) => return Err("`answer` is not a string or null".into()),
        };
        self.checkers.insert(group.clone(), answer);
        self.host
            .set_producer_online(&group, answer.is_some())
            .map_err(|e| format!("broker failed: {e}"))?;
        self.fire()?;
        Ok(None)
    }

    fn pull_once(&mut self, req: Request) -> Result<PullOutcome, String> {
        match self.exec(req)? {
            Reply::Pulled {
                messages,
                next_offset,
                max_offset,
            } => Ok(Ok((
                messages.iter().map(|m| body_text(&m.body)).collect(),
                next_offset,
                max_offset,
            ))),
            Reply::Error(e) => Ok(Err(e)),
            other => Err(format!("unexpected reply {other:?}")),
        }
    }

    fn consume(&mut self, step: &Value) -> StepResult {
        let topic = str_field(step, "topic")?;
        let group = opt_str(step, "group").unwrap_or(DEFAULT_READER);
        let tags = opt_str(step, "tags").unwrap_or("*");
        let queues: Vec<u32> = self
            .broker()
            .topics()
            .into_iter()
            .find(|t| t.name == topic)
            .map(|t| t.queues.iter().map(|q| q.0).collect())
            .unwrap_or_default();
        if queues.is_empty() {
            // No such topic (yet): still let the broker judge the name.
            return Ok(Some(
                match self.pull_once(pull_req(group, topic, 0, Some(0), 32, tags, false))? {
                    Ok((bodies, _, _)) => json!({ "bodies": bodies }),
                    Err(e) => err_value(&e),
                },
            ));
        }
        let mut bodies = Vec::new();
        for q in queues {
            let mut offset = 0;
            loop {
                match self.pull_once(pull_req(group, topic, q, Some(offset), 1024, tags, false))? {
                    Ok((b, next, max)) => {
                        bodies.extend(b);
                        if next <= offset || next >= max {
                            break;
                        }
                        offset = next;
                    }
                    Err(e) => return Ok(Some(err_value(&e))),
                }
            }
        }
        Ok(Some(json!({ "bodies": bodies })))
    }

    fn pull(&mut self, step: &Value) -> StepResult {
        let group = str_field(step, "group")?.to_string();
        let topic = str_field(step, "topic")?.to_string();
        let queue_id = u64_field(step, "queue_id")?.ok_or("missing `queue_id`")? as u32;
        let max = u64_field(step, "max")?.unwrap_or(32) as u32;
        let tags = opt_str(step, "tags").unwrap_or("*");
        Ok(Some(
            match self.pull_once(pull_req(&group, &topic, queue_id, None, max, tags, true))? {
                Ok((bodies, next, _)) => json!({ "bodies": bodies, "next_offset": next }),
                Err(e) => err_value(&e),
            },
        ))
    }

    fn receive(&mut self, step: &Value) -> StepResult {
        let group = str_field(step, "group")?.to_string();
        let topic = str_field(step, "topic")?.to_string();
        let max = u64_field(step, "max")?.ok_or("missing `max`")? as u32;
        let invisible_ms = u64_field(step, "invisible_ms")?.ok_or("missing `invisible_ms`")?;
        let filter = TagFilter::parse(opt_str(step, "tags").unwrap_or("*"));
        let req = Request::Receive {
            group,
            topic,
            queue_id: None,
            max,
            invisible_ms,
            filter,
        };
        Ok(Some(match self.exec(req)? {
            Reply::Received(list) => {
                let bodies: Vec<Value> = list.iter().map(|r| body_text(&r.message.body)).collect();
                let attempts: Vec<Value> = list.iter().map(|r| json!(r.attempt)).collect();
                if let Some(label) = opt_str(step, "as") {
                    self.handles.insert(
                        label.into(),
                        list.into_iter().map(|r| Some(r.handle)).collect(),
                    );
                }
                json!({ "bodies": bodies, "attempts": attempts })
            }
            Reply::Error(e) => err_value(&e),
            other => return Err(format!("unexpected reply {other:?}")),
        }))
    }

    /// Resolves `"<label>[i]"` to (label, i, handle).
    fn handle(&self, step: &Value) -> Result<(String, usize, ReceiptHandle), String> {
        let text = str_field(step, "handle")?;
        let (label, rest) = text
            .split_once('[')
            .ok_or_else(|| format!("handle `{text}` is not `<label>[i]`"))?;
        let i: usize = rest
            .strip_suffix(']')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("handle `{text}` is not `<label>[i]`"))?;
        let handle = self
            .handles
            .get(label)
            .and_then(|l| l.get(i))
            .cloned()
            .flatten()
            .ok_or_else(|| format!("no receive labelled `{label}` with a message {i}"))?;
        Ok((label.into(), i, handle))
    }

    fn ack(&mut self, step: &Value) -> StepResult {
        let group = str_field(step, "group")?.to_string();
        let (_, _, handle) = self.handle(step)?;
        Ok(Some(match self.exec(Request::Ack { group, handle })? {
            Reply::Acked => json!({ "ok": true }),
            Reply::Error(e) => err_value(&e),
            other => return Err(format!("unexpected reply {other:?}")),
        }))
    }

    fn change_invisible(&mut self, step: &Value) -> StepResult {
        let group = str_field(step, "group")?.to_string();
        let (label, i, handle) = self.handle(step)?;
        let invisible_ms = u64_field(step, "invisible_ms")?.ok_or("missing `invisible_ms`")?;
        Ok(Some(
            match self.exec(Request::ChangeInvisible {
                group,
                handle,
                invisible_ms,
            })? {
                Reply::InvisibleChanged { handle, .. } => {
                    self.handles.get_mut(&label).expect("resolved above")[i] = Some(handle);
                    json!({ "ok": true })
                }
                Reply::Error(e) => err_value(&e),
                other => return Err(format!("unexpected reply {other:?}")),
            },
        ))
    }

    /// Drops the broker and opens a new one over the same storage; checkers stay registered.
    pub fn reopen(&mut self) -> StepResult {
        self.host.reopen().map_err(|e| format!("reopen: {e}"))?;
        let online: Vec<String> = self
            .checkers
            .iter()
            .filter(|(_, a)| a.is_some())
            .map(|(g, _)| g.clone())
            .collect();
        for g in online {
            self.host
                .set_producer_online(&g, true)
                .map_err(|e| format!("broker failed: {e}"))?;
        }
        self.fire()?;
        Ok(None)
    }
}

// ---- rendering ----------------------------------------------------------------------------

const TOP_ORDER: [&str; 6] = ["name", "description", "covers", "notes", "config", "steps"];
const STEP_ORDER: [&str; 24] = [
    "at",
    "op",
    "group",
    "topic",
    "queue_id",
    "txn",
    "resolution",
    "answer",
    "handle",
    "body",
    "tag",
    "keys",
    "properties",
    "delay_level",
    "deliver_at_ms",
    "messages",
    "tags",
    "max",
    "invisible_ms",
    "as",
    "comment",
    "hand_written",
    "bug",
    "expect",
];

fn ordered<'a>(m: &'a Map<String, Value>, order: &[&str]) -> Vec<(&'a String, &'a Value)> {
    // Unknown keys go just before the last known one (`expect` / `steps`), alphabetically.
    let rank = |k: &str| match order.iter().position(|o| *o == k) {
        Some(i) => 2 * i + 1,
        None => (2 * order.len()).saturating_sub(2),
    };
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by(|a, b| (rank(a.0), a.0).cmp(&(rank(b.0), b.0)));
    v
}

fn compact(v: &Value, order: &[&str], out: &mut String) {
    match v {
        Value::Object(m) => {
            out.push('{');
            for (i, (k, v)) in ordered(m, order).into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{}: ", Value::String(k.clone()));
                compact(v, order, out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                compact(v, order, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Renders a scenario in the house layout: top-level keys one per line, one step per line,
/// keys in a fixed order. Stable: rendering a parsed rendering gives the same text.
#[must_use]
pub fn render_scenario(raw: &Value) -> String {
    let Value::Object(top) = raw else {
        return format!("{raw:#}\n");
    };
    let mut out = String::from("{\n");
    let entries = ordered(top, &TOP_ORDER);
    let n = entries.len();
    for (i, (k, v)) in entries.into_iter().enumerate() {
        let _ = write!(out, "  {}: ", Value::String(k.clone()));
        match (k.as_str(), v) {
            ("steps", Value::Array(steps)) => {
                out.push_str("[\n");
                for (j, s) in steps.iter().enumerate() {
                    out.push_str("    ");
                    compact(s, &STEP_ORDER, &mut out);
                    if j + 1 < steps.len() {
                        out.push(',');
                    }
                    out.push('\n');
                }
                out.push_str("  ]");
            }
            _ => compact(v, &[], &mut out),
        }
        if i + 1 < n {
            out.push(',');
        }
        out.push('\n');
    }
    out.push_str("}\n");
    out
}

// ---- helpers for the model, crash and property tests ---------------------------------------

/// Observing a broker and a raw log, independently of the broker's own bookkeeping.
pub mod probe {
    use std::collections::BTreeMap;

    use rocklet_core::record::{self, sys_flag, Decoded};
    use rocklet_core::{Broker, Storage};

    /// Every visible body of every consumer-visible topic: topic → bodies, each topic's
    /// bodies sorted (queues together). Reads from offset 0 and commits nothing.
    pub fn visible<S: Storage>(b: &mut Broker<S>, now: u64) -> BTreeMap<String, Vec<Vec<u8>>> {
        // `browse` reads what consumers may see without a group, and never syncs (a pull
        // through `execute` would sync what an earlier `handle` left unsynced).
        let _ = now;
        let mut out = BTreeMap::new();
        for t in b.topics() {
            let mut bodies = Vec::new();
            for (qid, _, _) in &t.queues {
                let mut offset = 0;
                loop {
                    let page = match b.browse(&t.name, *qid, offset, 1024) {
                        Ok(p) => p,
                        Err(e) => panic!("browse of {}:{qid} failed: {e}", t.name),
                    };
                    let Some(last) = page.last() else { break };
                    offset = last.queue_offset + 1;
                    bodies.extend(page.into_iter().map(|m| m.body));
                }
            }
            bodies.sort();
            if !bodies.is_empty() {
                out.insert(t.name.clone(), bodies);
            }
        }
        out
    }

    /// One record of a raw log.
    #[derive(Debug, Clone)]
    pub struct RawRecord {
        pub offset: u64,
        pub len: u64,
        pub topic: String,
        pub body: Vec<u8>,
        pub sys_flag: u32,
        pub prepared_offset: u64,
        pub props: Vec<(String, String)>,
    }

    impl RawRecord {
        /// A property.
        #[must_use]
        pub fn prop(&self, k: &str) -> Option<&str> {
            self.props
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        }
        /// End offset.
        #[must_use]
        pub fn end(&self) -> u64 {
            self.offset + self.len
        }
    }

    /// Decodes a single-segment log (segment base 0) until the first invalid byte or blank.
    #[must_use]
    pub fn records(seg: &[u8]) -> Vec<RawRecord> {
        let mut out = Vec::new();
        let mut pos = 0usize;
        while let Ok(Decoded::Record(r)) = record::decode(&seg[pos..], u32::MAX) {
            out.push(RawRecord {
                offset: pos as u64,
                len: u64::from(r.total_size),
                topic: r.topic.into(),
                body: r.body.to_vec(),
                sys_flag: r.header.sys_flag,
                prepared_offset: r.header.prepared_offset,
                props: r
                    .props()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            });
            pos += r.total_size as usize;
        }
        out
    }

    /// Offsets where a crash may leave the log and recovery must keep everything before:
    /// record boundaries outside atomic groups (batches, dead-letter moves).
    #[must_use]
    pub fn clean_boundaries(recs: &[RawRecord]) -> Vec<u64> {
        let mut out = vec![0];
        let mut left = 0u32;
        for r in recs {
            if left == 0 {
                if let Some(n) = r.prop("__BATCH_LEN").and_then(|v| v.parse::<u32>().ok()) {
                    left = n;
                }
            }
            left = left.saturating_sub(1);
            if left == 0 {
                out.push(r.end());
            }
        }
        out
    }

    /// What a log prefix must mean, computed from its records alone (RocketMQ semantics).
    #[derive(Debug, Default, PartialEq, Eq)]
    pub struct Expected {
        /// Topic → sorted visible bodies.
        pub visible: BTreeMap<String, Vec<Vec<u8>>>,
        /// Pending transactions.
        pub pending_txns: usize,
        /// Pending delayed messages.
        pub pending_delays: usize,
    }

    /// Replays the records of a log prefix into the expected consumer view.
    #[must_use]
    pub fn expected(recs: &[RawRecord]) -> Expected {
        let mut halves: BTreeMap<u64, (String, Vec<u8>)> = BTreeMap::new();
        let mut delays: BTreeMap<u64, (String, Vec<u8>)> = BTreeMap::new();
        let mut visible: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        for r in recs {
            match r.topic.as_str() {
                "RMQ_SYS_TRANS_HALF_TOPIC" => {
                    halves.insert(
                        r.offset,
                        (
                            r.prop("REAL_TOPIC").unwrap_or_default().into(),
                            r.body.clone(),
                        ),
                    );
                }
                "RMQ_SYS_TRANS_OP_HALF_TOPIC" => match r.prop("TAGS") {
                    Some("d") => {
                        if let Some((t, b)) = halves.remove(&r.prepared_offset) {
                            let commit = r.sys_flag & sys_flag::TRANSACTION_TYPE_MASK
                                == sys_flag::TRANSACTION_COMMIT_TYPE;
                            if commit {
                                visible.entry(t).or_default().push(b);
                            }
                        }
                    }
                    Some("x") => {
                        if let Some((_, b)) = halves.remove(&r.prepared_offset) {
                            visible
                                .entry("TRANS_CHECK_MAX_TIME_TOPIC".into())
                                .or_default()
                                .push(b);
                        }
                    }
                    Some("e") => {
                        halves.remove(&r.prepared_offset);
                    }
                    _ => {}
                },
                "SCHEDULE_TOPIC_XXXX" | "rmq_sys_wheel_timer" => {
                    delays.insert(
                        r.offset,
                        (
                            r.prop("REAL_TOPIC").unwrap_or_default().into(),
                            r.body.clone(),
                        ),
                    );
                }
                "rmq_sys_schedule_delivered" => {
                    if let Some((t, b)) = delays.remove(&r.prepared_offset) {
                        visible.entry(t).or_default().push(b);
                    }
                }
                t if t.starts_with("rmq_sys_") => {}
                t => visible.entry(t.into()).or_default().push(r.body.clone()),
            }
        }
        for v in visible.values_mut() {
            v.sort();
        }
        Expected {
            visible,
            pending_txns: halves.len(),
            pending_delays: delays.len(),
        }
    }

    /// The same view, read from a broker.
    pub fn observed<S: Storage>(b: &mut Broker<S>, now: u64) -> Expected {
        Expected {
            visible: visible(b, now),
            pending_txns: b.pending_transaction_count(),
            pending_delays: b.pending_delay_count(),
        }
    }
}
