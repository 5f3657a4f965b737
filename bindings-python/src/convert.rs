//! Every conversion between Python values and core types, in one place.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyInt, PyMapping, PyString};
use pyo3::IntoPyObjectExt;
use rocklet_core::{
    CheckRequest, Config, Delay, Message, PendingDelayInfo, PendingTxnInfo, ReceiptHandle,
    Received, RecoveryReport, Resolution, SendResult, Stats, TagFilter, TopicInfo, TxnId,
};
use rocklet_embed::config::Value;

use crate::error::{client_error, err};
use crate::types::{PyMessage, PyReceived, PySendResult};

// ---- Python -> core ----------------------------------------------------------------------

/// `rocklet._support`: what this binding leaves to Python (checker calls, logging, batch
/// items, config values as JSON), imported once.
static SUPPORT: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

pub fn support(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    let m = SUPPORT.get_or_try_init(py, || py.import("rocklet._support").map(Bound::unbind))?;
    Ok(m.bind(py))
}

/// The broker's `Config` from the keyword arguments of `Broker(...)`: each keyword is a core
/// `Config` field by its snake_case name; the rest keep the core's defaults.
pub fn config(py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Config> {
    let mut entries = Vec::new();
    if let Some(kw) = kwargs {
        let json: Vec<(String, String)> =
            support(py)?.call_method1("config_json", (kw,))?.extract()?;
        for (key, j) in json {
            let value = j.parse::<Value>();
            let value =
                value.map_err(|e| err(py, "ConfigError", format!("config `{key}`: {e}")))?;
            entries.push((key, value));
        }
    }
    let naming = rocklet_embed::config::Naming::Snake;
    rocklet_embed::config::config(&Config::default(), entries, naming, &[], &[])
        .map_err(|e| err(py, "ConfigError", e.to_string()))
}

/// A body: bytes, bytearray, memoryview or str (sent as UTF-8).
pub fn body(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(s.to_cow()?.as_bytes().to_vec());
    }
    if let Ok(b) = v.cast::<PyByteArray>() {
        return Ok(b.to_vec());
    }
    if v.get_type().name()?.to_cow()? == "memoryview" {
        return Ok(v
            .call_method0("tobytes")?
            .cast::<PyBytes>()?
            .as_bytes()
            .to_vec());
    }
    Err(PyTypeError::new_err(format!(
        "body must be bytes or str, not {}",
        v.get_type().name()?
    )))
}

/// Keys: one string, or an iterable of strings.
pub fn keys(v: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    match v {
        None => Ok(Vec::new()),
        Some(v) if v.is_none() => Ok(Vec::new()),
        Some(v) => {
            if let Ok(s) = v.cast::<PyString>() {
                return Ok(vec![s.to_cow()?.into_owned()]);
            }
            v.try_iter()?
                .map(|k| {
                    k?.extract::<String>()
                        .map_err(|_| PyTypeError::new_err("keys must be strings"))
                })
                .collect()
        }
    }
}

/// Properties: a mapping of str to str, in its iteration order.
pub fn properties(v: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, String)>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    let m = v
        .cast::<PyMapping>()
        .map_err(|_| PyTypeError::new_err("properties must be a mapping of str to str"))?;
    let mut out = Vec::new();
    for item in m.items()?.iter() {
        let (k, val): (String, String) = item
            .extract()
            .map_err(|_| PyTypeError::new_err("properties must be a mapping of str to str"))?;
        out.push((k, val));
    }
    Ok(out)
}

/// At most one of the delay arguments.
pub fn delay(
    level: Option<u32>,
    at_ms: Option<u64>,
    after_ms: Option<u64>,
) -> PyResult<Option<Delay>> {
    let delays = [
        level.map(Delay::Level),
        at_ms.map(Delay::At),
        after_ms.map(Delay::After),
    ];
    rocklet_embed::input::one_delay(delays).ok_or_else(|| {
        crate::error::argument("give at most one of delay_level, deliver_at_ms, delay_ms")
    })
}

/// A transaction id from its 16 hex digits.
pub fn txn_id(py: Python<'_>, s: &str) -> PyResult<TxnId> {
    s.parse().map_err(|e| client_error(py, &e))
}

/// A resolution from `"commit"`, `"rollback"` or `"unknown"`; `what` names the value (an
/// argument, or the checker's answer). Another string is a ValueError.
pub fn resolution(what: &str, v: &Bound<'_, PyAny>) -> PyResult<Resolution> {
    let s = v.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be 'commit', 'rollback' or 'unknown', not {}",
            type_name(v)
        ))
    })?;
    s.to_cow()?.parse().map_err(|_| {
        crate::error::argument(format!(
            "{what} must be 'commit', 'rollback' or 'unknown', not {}",
            v.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    })
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

/// A str argument; `what` names it in the TypeError.
pub fn string(what: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    match v.cast::<PyString>() {
        Ok(s) => Ok(s.to_cow()?.into_owned()),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be a str, not {}",
            type_name(v)
        ))),
    }
}

/// A whole-number argument that fits a u32; out of range is a ValueError naming it.
pub fn u32_arg(what: &str, v: i128) -> PyResult<u32> {
    rocklet_embed::arg::int_u32(what, v).map_err(crate::error::argument)
}

/// A whole-number argument that fits a u64 (ms, offsets).
pub fn u64_arg(what: &str, v: i128) -> PyResult<u64> {
    rocklet_embed::arg::int(what, v, u64::MAX).map_err(crate::error::argument)
}

pub fn opt_u32(what: &str, v: Option<i128>) -> PyResult<Option<u32>> {
    v.map(|v| u32_arg(what, v)).transpose()
}

pub fn opt_u64(what: &str, v: Option<i128>) -> PyResult<Option<u64>> {
    v.map(|v| u64_arg(what, v)).transpose()
}

/// `limit=None`: all.
pub fn limit(v: Option<i128>) -> PyResult<usize> {
    Ok(rocklet_embed::arg::limit(opt_u64("limit", v)?))
}

/// `repr()` of a value as Python shows it (for reprs: `None`, `'x'`, `6000`).
pub fn repr<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: T) -> PyResult<String> {
    let o = v.into_bound_py_any(py)?;
    Ok(o.repr()?.to_cow()?.into_owned())
}

/// A receipt handle: its string, or the `Received` that carries it.
pub fn handle(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<ReceiptHandle> {
    let s: String = if let Ok(r) = v.cast::<PyReceived>() {
        r.get().handle.clone()
    } else {
        v.extract()
            .map_err(|_| PyTypeError::new_err("a receipt handle is a str or a Received"))?
    };
    s.parse().map_err(|e| client_error(py, &e))
}

/// A tag expression (`*`, `a || b`).
pub fn tags(expr: &str) -> TagFilter {
    TagFilter::parse(expr)
}

// ---- core -> Python ----------------------------------------------------------------------

/// A message for Python; `check` is set for the message handed to a checker.
pub fn message(py: Python<'_>, m: Message, check: Option<(TxnId, u32)>) -> PyResult<Py<PyMessage>> {
    Py::new(
        py,
        PyMessage {
            body: PyBytes::new(py, &m.body).unbind(),
            topic: m.topic,
            tag: m.tag,
            keys: m.keys,
            properties: m.properties,
            msg_id: m.msg_id,
            queue_id: m.queue_id,
            queue_offset: m.queue_offset,
            offset: m.offset,
            born_timestamp: m.born_timestamp,
            store_timestamp: m.store_timestamp,
            reconsume_times: m.reconsume_times,
            transaction_id: check.map(|(t, _)| t.to_string()),
            check_times: check.map(|(_, c)| c),
        },
    )
}

/// The message of a check, for the checker.
pub fn check_message(py: Python<'_>, c: CheckRequest) -> PyResult<Py<PyMessage>> {
    message(py, c.message, Some((c.txn, c.check)))
}

pub fn messages(py: Python<'_>, ms: Vec<Message>) -> PyResult<Vec<Py<PyMessage>>> {
    ms.into_iter().map(|m| message(py, m, None)).collect()
}

pub fn send_result(r: SendResult) -> PySendResult {
    PySendResult {
        msg_id: r.msg_id,
        topic: r.topic,
        queue_id: r.queue_id,
        queue_offset: r.queue_offset,
        offset: r.offset,
        transaction_id: r.txn.map(|t| t.to_string()),
    }
}

/// `rocklet._types`, imported once.
static TYPES: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn types(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    let m = TYPES.get_or_try_init(py, || py.import("rocklet._types").map(Bound::unbind))?;
    Ok(m.bind(py))
}

/// Adds the Python value classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    add_all(m, types(m.py())?)
}

/// Adds every class of `source.ALL` to the module `m`, by its name.
pub fn add_all(m: &Bound<'_, PyModule>, source: &Bound<'_, PyModule>) -> PyResult<()> {
    for class in source.getattr("ALL")?.try_iter()? {
        let class = class?;
        m.add(class.getattr("__name__")?.cast_into::<PyString>()?, class)?;
    }
    Ok(())
}

/// A value of class `name` built from its fields, in order.
fn value<'py, A: pyo3::call::PyCallArgs<'py>>(
    py: Python<'py>,
    name: &str,
    fields: A,
) -> PyResult<Bound<'py, PyAny>> {
    types(py)?.getattr(name)?.call1(fields)
}

/// A Python value built here.
pub type Made<'py> = PyResult<Bound<'py, PyAny>>;

pub fn received(py: Python<'_>, r: Received) -> PyResult<Py<PyReceived>> {
    let received = PyReceived {
        message: message(py, r.message, None)?,
        handle: r.handle.to_string(),
        attempt: r.attempt,
        visible_at: r.visible_at,
    };
    Py::new(py, received)
}

pub fn pull_result(py: Python<'_>, ms: Vec<Message>, next: u64, max: u64) -> Made<'_> {
    value(py, "PullResult", (messages(py, ms)?, next, max))
}

pub fn topic_info(py: Python<'_>, t: TopicInfo) -> Made<'_> {
    let queues = t
        .queues
        .into_iter()
        .map(|(id, next, visible)| value(py, "QueueInfo", (id, next, visible)))
        .collect::<PyResult<Vec<_>>>()?;
    value(py, "TopicInfo", (t.name, queues))
}

pub fn pending_txn(py: Python<'_>, t: PendingTxnInfo) -> Made<'_> {
    let txn = t.txn.to_string();
    value(
        py,
        "PendingTransaction",
        (txn, t.group, t.topic, t.queue_id, t.checks, t.next_check),
    )
}

pub fn pending_delay(py: Python<'_>, d: PendingDelayInfo) -> Made<'_> {
    value(py, "PendingDelay", (d.offset, d.topic, d.queue_id, d.due))
}

pub fn recovery_report<'py>(py: Python<'py>, r: &RecoveryReport) -> Made<'py> {
    let cuts = r
        .cuts
        .iter()
        .map(|c| value(py, "Cut", (c.offset, c.bytes, &c.reason, &c.kept_as)));
    let quarantined = r
        .quarantined
        .iter()
        .map(|q| value(py, "Quarantined", (q.offset, q.bytes, &q.reason, &q.name)));
    value(
        py,
        "RecoveryReport",
        (
            r.segments,
            r.records,
            r.bytes_scanned,
            r.bytes_truncated,
            r.bytes_quarantined(),
            cuts.collect::<PyResult<Vec<_>>>()?,
            quarantined.collect::<PyResult<Vec<_>>>()?,
        ),
    )
}

/// The counters as a dict of name to count.
pub fn stats<'py>(py: Python<'py>, s: Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in rocklet_embed::view::stats_fields(&s) {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// An int argument; `what` names it in the TypeError.
pub fn int(what: &str, v: &Bound<'_, PyAny>) -> PyResult<i128> {
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not {}",
            type_name(v)
        )));
    }
    v.extract::<i128>()
        .map_err(|_| crate::error::argument(format!("{what} is out of range: {}", v)))
}

pub fn opt_int(what: &str, v: &Bound<'_, PyAny>) -> PyResult<Option<i128>> {
    if v.is_none() {
        return Ok(None);
    }
    int(what, v).map(Some)
}

pub fn opt_string(what: &str, v: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if v.is_none() {
        return Ok(None);
    }
    string(what, v).map(Some)
}

/// Argument extractors that name their argument in the error (`#[pyo3(from_py_with)]`).
pub mod arg {
    use super::*;

    macro_rules! named {
        ($($f:ident: $t:ty = $conv:ident($name:literal),)*) => {
            $(pub fn $f(v: &Bound<'_, PyAny>) -> PyResult<$t> {
                $conv($name, v)
            })*
        };
    }

    named! {
    check_immunity_ms_opt_int: Option<i128> = opt_int("check_immunity_ms"),
    delay_level_opt_int: Option<i128> = opt_int("delay_level"),
    delay_ms_opt_int: Option<i128> = opt_int("delay_ms"),
    deliver_at_ms_opt_int: Option<i128> = opt_int("deliver_at_ms"),
    group_opt_str: Option<String> = opt_string("group"),
    group_str: String = string("group"),
    invisible_ms_int: i128 = int("invisible_ms"),
    limit_opt_int: Option<i128> = opt_int("limit"),
    max_int: i128 = int("max"),
    message_group_opt_str: Option<String> = opt_string("message_group"),
    message_id_opt_str: Option<String> = opt_string("message_id"),
    offset_int: i128 = int("offset"),
    offset_opt_int: Option<i128> = opt_int("offset"),
    queue_opt_int: Option<i128> = opt_int("queue"),
    queue_id_int: i128 = int("queue_id"),
    queue_id_opt_int: Option<i128> = opt_int("queue_id"),
    start_ms_opt_int: Option<i128> = opt_int("start_ms"),
    tag_opt_str: Option<String> = opt_string("tag"),
    topic_str: String = string("topic"),
    }
}
