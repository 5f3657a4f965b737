//! The Python-visible value types (mirrors core `types.rs`). Built by `convert.rs`.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// A frozen value class (`get_all`, module `rocklet`) whose repr shows the listed fields as
/// Python values: `Name(a=1, b='x', c=None)`; `field(f)` shows `f(self)` instead, and
/// `methods { .. }` adds methods.
macro_rules! value_class {
    ($(#[$m:meta])* $ty:ident => $name:literal {
        $($(#[$fm:meta])* pub $f:ident: $t:ty,)*
    } repr($($r:ident $(($show:expr))?),*) $(methods { $($extra:tt)* })?) => {
        #[pyclass(frozen, get_all, module = "rocklet", name = $name)]
        $(#[$m])*
        #[derive(Debug)]
        pub struct $ty {
            $($(#[$fm])* pub $f: $t,)*
        }

        #[pymethods]
        impl $ty {
            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                let parts: Vec<String> = vec![$(format!(
                    concat!(stringify!($r), "={}"),
                    crate::convert::repr(py, shown!(self, $r $(, $show)?))?
                )),*];
                Ok(format!(concat!($name, "({})"), parts.join(", ")))
            }
            $($($extra)*)?
        }
    };
}

/// A repr field's value: the field itself, or what the given function shows of the value.
macro_rules! shown {
    ($s:ident, $r:ident) => {
        $s.$r.clone()
    };
    ($s:ident, $r:ident, $show:expr) => {
        ($show)($s)
    };
}

/// A stored message as consumers (and checkers) see it.
#[pyclass(frozen, module = "rocklet", name = "Message")]
#[derive(Debug)]
pub struct PyMessage {
    /// Topic.
    #[pyo3(get)]
    pub topic: String,
    pub body: Py<PyBytes>,
    /// RocketMQ tag, if any.
    #[pyo3(get)]
    pub tag: Option<String>,
    /// Business keys.
    #[pyo3(get)]
    pub keys: Vec<String>,
    pub properties: Vec<(String, String)>,
    /// Message id (the client's UNIQ_KEY, else the offset message id).
    #[pyo3(get)]
    pub msg_id: String,
    /// Queue.
    #[pyo3(get)]
    pub queue_id: u32,
    /// Position in the queue.
    #[pyo3(get)]
    pub queue_offset: u64,
    /// Log offset of the record holding the body.
    #[pyo3(get)]
    pub offset: u64,
    /// Producer's timestamp (ms).
    #[pyo3(get)]
    pub born_timestamp: u64,
    /// When it was stored (ms, broker clock).
    #[pyo3(get)]
    pub store_timestamp: u64,
    /// Times it was sent back for retry.
    #[pyo3(get)]
    pub reconsume_times: u32,
    /// Transaction id: set only on a message handed to a checker.
    #[pyo3(get)]
    pub transaction_id: Option<String>,
    /// Which check this is (from 1): set only on a message handed to a checker.
    #[pyo3(get)]
    pub check_times: Option<u32>,
}

#[pymethods]
impl PyMessage {
    /// The body, as bytes.
    #[getter]
    fn body(&self, py: Python<'_>) -> Py<PyBytes> {
        self.body.clone_ref(py)
    }
    /// User properties (not TAGS, KEYS or the broker's own).
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.properties {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
    /// The body decoded as UTF-8 (errors replaced).
    fn text(&self, py: Python<'_>) -> String {
        String::from_utf8_lossy(self.body.as_bytes(py)).into_owned()
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Message(topic={}, queue_id={}, queue_offset={}, msg_id={}, tag={}, body={} bytes)",
            crate::convert::repr(py, self.topic.clone())?,
            self.queue_id,
            self.queue_offset,
            crate::convert::repr(py, self.msg_id.clone())?,
            crate::convert::repr(py, self.tag.clone())?,
            self.body.as_bytes(py).len()
        ))
    }
}

value_class! {
    /// Where a sent (or prepared) message was stored.
    #[derive(Clone)]
    PySendResult => "SendResult" {
        /// Message id.
        pub msg_id: String,
        /// Topic.
        pub topic: String,
        /// Queue.
        pub queue_id: u32,
        /// Position in the queue (0 for a half message).
        pub queue_offset: u64,
        /// Log offset of the record.
        pub offset: u64,
        /// Transaction id (16 hex digits) for a prepared message, else None.
        pub transaction_id: Option<String>,
    } repr(msg_id, topic, queue_id, queue_offset, offset, transaction_id)
}

value_class! {
    /// A received message with the handle that acks it.
    PyReceived => "Received" {
        /// The message.
        pub message: Py<PyMessage>,
        /// Receipt handle: pass it to `ack` or `change_invisible`.
        pub handle: String,
        /// Delivery attempt, from 1.
        pub attempt: u32,
        /// When it becomes visible again unless acked (ms, broker clock).
        pub visible_at: u64,
    } repr(handle, attempt, visible_at)
}

value_class! {
    /// One page of a queue read by `pull_queue`.
    PyPullResult => "PullResult" {
        /// Messages, in queue order.
        pub messages: Vec<Py<PyMessage>>,
        /// Offset to read from next.
        pub next_offset: u64,
        /// Messages visible in the queue.
        pub max_offset: u64,
    } repr(messages(|s: &Self| s.messages.len()), next_offset, max_offset)
}

value_class! {
    /// One queue of a topic.
    #[derive(Clone)]
    PyQueueInfo => "QueueInfo" {
        /// Queue id.
        pub queue_id: u32,
        /// Next queue offset (messages written).
        pub next_offset: u64,
        /// Messages consumers can see (durable ones, under sync flush).
        pub visible: u64,
    } repr(queue_id, next_offset, visible)
}

value_class! {
    /// A topic and its queues.
    PyTopicInfo => "TopicInfo" {
        /// Topic name.
        pub name: String,
        /// Its queues.
        pub queues: Vec<PyQueueInfo>,
    } repr(name, queues(|s: &Self| s.queues.len()), depth(Self::depth)) methods {
        /// Visible messages over all queues.
        #[getter]
        fn depth(&self) -> u64 {
            self.queues.iter().map(|q| q.visible).sum()
        }
    }
}

value_class! {
    /// A transaction waiting for its resolution.
    PyPendingTransaction => "PendingTransaction" {
        /// Transaction id (16 hex digits).
        pub transaction_id: String,
        /// Producer group (whose checker is asked).
        pub group: String,
        /// Topic it will be delivered to.
        pub topic: String,
        /// Queue it will be delivered to.
        pub queue_id: u32,
        /// Checks made so far.
        pub checks: u32,
        /// Time of the next check (ms); None while no checker of the group is registered.
        pub next_check: Option<u64>,
    } repr(transaction_id, group, topic, checks, next_check)
}

value_class! {
    /// A delayed message not yet delivered.
    PyPendingDelay => "PendingDelay" {
        /// Log offset of the stored delayed message.
        pub offset: u64,
        /// Topic it will be delivered to.
        pub topic: String,
        /// Queue it will be delivered to.
        pub queue_id: u32,
        /// When it becomes visible (ms).
        pub due: u64,
    } repr(offset, topic, queue_id, due)
}

value_class! {
    /// A torn tail cut off the log on open (nothing acknowledged can be in one).
    #[derive(Clone)]
    PyCut => "Cut" {
        /// Log offset of the first byte cut.
        pub offset: u64,
        /// Bytes cut.
        pub bytes: u64,
        /// Why.
        pub reason: String,
        /// The file under `quarantine/` in the data directory that keeps the cut bytes that were
        /// not zero; None when they were all zero.
        pub kept_as: Option<String>,
    } repr(offset, bytes, kept_as, reason)
}

value_class! {
    /// A damaged range that `repair=True` moved out of the log into quarantine.
    #[derive(Clone)]
    PyQuarantined => "Quarantined" {
        /// Log offset of the first damaged byte.
        pub offset: u64,
        /// Bytes moved.
        pub bytes: u64,
        /// What was wrong (names the segment file and the position in it).
        pub reason: String,
        /// The file under `quarantine/` in the data directory holding the bytes, unchanged.
        pub name: String,
    } repr(offset, bytes, name, reason)
}

value_class! {
    /// What recovery found when the broker opened.
    PyRecoveryReport => "RecoveryReport" {
        /// Segment files read.
        pub segments: usize,
        /// Valid records kept.
        pub records: u64,
        /// Bytes read.
        pub bytes_scanned: u64,
        /// Bytes cut off a torn tail.
        pub bytes_truncated: u64,
        /// Bytes `repair=True` moved to quarantine.
        pub bytes_quarantined: u64,
        /// Torn tails cut (at most one: the end of the last segment).
        pub cuts: Vec<PyCut>,
        /// Damaged ranges `repair=True` moved to quarantine (empty after a plain open, which
        /// raises `CorruptLog` instead).
        pub quarantined: Vec<PyQuarantined>,
    } repr(
        segments,
        records,
        bytes_scanned,
        bytes_truncated,
        cuts(|s: &Self| s.cuts.len()),
        quarantined(|s: &Self| s.quarantined.len())
    )
}
