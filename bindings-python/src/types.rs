//! The hot value types, native for speed: `Message` (every pull and receive makes them),
//! `SendResult` (every send) and `Received` (every receive). The others are Python dataclasses (`rocklet/_types.py`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::convert::repr;

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
            repr(py, &self.topic)?,
            self.queue_id,
            self.queue_offset,
            repr(py, &self.msg_id)?,
            repr(py, &self.tag)?,
            self.body.as_bytes(py).len()
        ))
    }
}

/// Where a sent (or prepared) message was stored.
#[pyclass(frozen, get_all, module = "rocklet", name = "SendResult")]
#[derive(Debug, Clone)]
pub struct PySendResult {
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
}

#[pymethods]
impl PySendResult {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "SendResult(msg_id={}, topic={}, queue_id={}, queue_offset={}, offset={}, transaction_id={})",
            repr(py, &self.msg_id)?,
            repr(py, &self.topic)?,
            self.queue_id,
            self.queue_offset,
            self.offset,
            repr(py, &self.transaction_id)?
        ))
    }
}

/// A received message with the handle that acks it.
#[pyclass(frozen, get_all, module = "rocklet", name = "Received")]
#[derive(Debug)]
pub struct PyReceived {
    /// The message.
    pub message: Py<PyMessage>,
    /// Receipt handle: pass it to `ack` or `change_invisible`.
    pub handle: String,
    /// Delivery attempt, from 1.
    pub attempt: u32,
    /// When it becomes visible again unless acked (ms, broker clock).
    pub visible_at: u64,
}

#[pymethods]
impl PyReceived {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Received(handle={}, attempt={}, visible_at={})",
            repr(py, &self.handle)?,
            self.attempt,
            self.visible_at
        ))
    }
}
