//! Operator actions, written once: resolving a transaction by hand, declaring and deleting
//! a consumer group, creating (or growing) and deleting a topic, setting a topic's order
//! flag and conf. Each checks what it is given, makes the core call and names a refusal in
//! one text; the front ends only parse their request and put an [`OpError`] in their
//! protocol's terms:
//!
//! - `rocklet admin` (gRPC, [`crate::admin`]): `Refused` is FAILED_PRECONDITION (a
//!   resolve) or INVALID_ARGUMENT (a declaration), `Failed` and `Unreadable` are INTERNAL;
//! - the console's actions ([`crate::console`]): the text, in the action's result;
//! - mqadmin's requests ([`crate::remoting::admin`]): `Refused` is SYSTEM_ERROR, `Failed`
//!   the remoting code of a core failure.
//!
//! Changes to the tables go through [`CoreHandle::change`] (or
//! [`CoreHandle::declare_group`]): durable before they are answered.

use rocklet_core::{ClientError, Resolution, TxnId};

use crate::driver::{CoreFailure, CoreHandle};

/// Why an operator action was not done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpError {
    /// The request names something that is not there, or the core refused it (nothing
    /// changed): `CODE: what`.
    Refused(String),
    /// The core could not answer.
    Failed(CoreFailure),
    /// The log could not be read to find what the request names.
    Unreadable(String),
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::Refused(e) | OpError::Unreadable(e) => f.write_str(e),
            OpError::Failed(e) => write!(f, "{e}"),
        }
    }
}

impl From<CoreFailure> for OpError {
    fn from(e: CoreFailure) -> Self {
        OpError::Failed(e)
    }
}

/// The core's refusal as an operator reads it: its stable code, then what is wrong.
fn refused(e: &ClientError) -> OpError {
    OpError::Refused(format!("{}: {e}", e.code()))
}

/// Ends transaction `txn` by hand, in its own producer group's name. `Ok(true)`: it was
/// already resolved this way (nothing changed).
pub async fn resolve(
    core: &CoreHandle,
    txn: TxnId,
    resolution: Resolution,
) -> Result<bool, OpError> {
    let group = core
        .read_log(move |b| b.transaction_group(txn).map_err(|e| e.to_string()))
        .await?
        .map_err(OpError::Unreadable)?
        .ok_or_else(|| OpError::Refused(format!("UNKNOWN_TRANSACTION: no transaction {txn}")))?;
    match core
        .end_transaction(txn, resolution, Some(group), false)
        .await?
    {
        Ok(ended) => Ok(ended.duplicate),
        Err(e) => Err(refused(&e)),
    }
}

/// Declares consumer group `name` (FIFO or not), durably.
pub async fn declare_group(core: &CoreHandle, name: String, fifo: bool) -> Result<(), OpError> {
    core.declare_group(name, fifo)
        .await?
        .map_err(|e| refused(&e))
}

/// Starts receive group `group` at the end of each queue of `topic` it never received from,
/// durably; how many queues that was.
pub async fn start_group_at_end(
    core: &CoreHandle,
    group: String,
    topic: String,
) -> Result<u32, OpError> {
    core.change(move |b| b.start_group_at_end(&group, &topic))
        .await?
        .map_err(|e| refused(&e))
}

/// Deletes consumer group `name` durably (its declaration, offsets and receive positions;
/// its records stay in the log). `missing_ok`: a group the broker does not know is no
/// refusal (mqadmin's deleteSubGroup answers success for it, as Apache does).
pub async fn delete_group(
    core: &CoreHandle,
    name: String,
    missing_ok: bool,
) -> Result<(), OpError> {
    core.change(move |b| {
        if let Err(e) = rocklet_core::topic::validate_group(&name) {
            return Ok(Err(e));
        }
        if missing_ok && !b.group_known(&name) {
            return Ok(Ok(()));
        }
        b.delete_group(&name)
    })
    .await?
    .map_err(|e| refused(&e))
}

/// Creates topic `name` with `queues` queues, or grows it to that many; queues are never
/// removed (a request for fewer than it has is refused).
pub async fn create_topic(core: &CoreHandle, name: String, queues: u32) -> Result<(), OpError> {
    core.change(move |b| {
        if let Some(have) = b.topic_queue_count(&name) {
            if have > queues {
                return Ok(Err(ClientError::InvalidArgument(format!(
                    "topic `{name}` has {have} queues; rocklet cannot remove queues (asked for {queues})"
                ))));
            }
        }
        b.create_topic(&name, queues)
    })
    .await?
    .map_err(|e| refused(&e))
}

/// Creates topic `name` with `queues` queues (or grows it, as [`create_topic`]), then sets
/// its order flag (mqadmin updateTopic's `order`; its order conf stays), durably.
pub async fn create_topic_with_order(
    core: &CoreHandle,
    name: String,
    queues: u32,
    order: bool,
) -> Result<(), OpError> {
    create_topic(core, name.clone(), queues).await?;
    core.change(move |b| b.set_topic_order(&name, order))
        .await?
        .map_err(|e| refused(&e))
}

/// Puts (`Some`) or deletes (`None`) topic `name`'s order conf (`brokerName:queueCount;…`,
/// the name server's ORDER_TOPIC_CONFIG entry), durably. Each broker name must be one of
/// `brokers` (the broker groups rocklet knows). `missing_ok`: deleting the conf of a topic
/// that does not exist is no refusal (mqadmin deleteTopic asks after the topic is gone).
pub async fn set_order_conf(
    core: &CoreHandle,
    name: String,
    conf: Option<String>,
    brokers: Vec<String>,
    missing_ok: bool,
) -> Result<(), OpError> {
    if let Some(c) = &conf {
        let entries = rocklet_core::parse_order_conf(c).map_err(|e| refused(&e))?;
        if let Some((b, _)) = entries.iter().find(|e| !brokers.iter().any(|k| k == e.0)) {
            return Err(refused(&ClientError::InvalidArgument(format!(
                "order conf names broker `{b}`, which rocklet does not know (its broker groups: {})",
                brokers.join(", ")
            ))));
        }
    }
    core.change(move |b| {
        if missing_ok && conf.is_none() && b.topic_order(&name).is_none() {
            return Ok(Ok(()));
        }
        b.set_order_conf(&name, conf.as_deref())
    })
    .await?
    .map_err(|e| refused(&e))
}

/// Deletes topic `name` durably (its records stay in the log; the name starts afresh).
/// `missing_ok`: a topic that does not exist is no refusal.
pub async fn delete_topic(
    core: &CoreHandle,
    name: String,
    missing_ok: bool,
) -> Result<(), OpError> {
    core.change(move |b| {
        if missing_ok && b.topic_info(&name).is_none() {
            return Ok(Ok(()));
        }
        b.delete_topic(&name)
    })
    .await?
    .map_err(|e| refused(&e))
}

#[cfg(test)]
mod tests {
    use rocklet_core::{AnyStorage, Broker, MemStorage, NewMessage};

    use super::*;

    async fn core() -> (CoreHandle, std::thread::JoinHandle<()>) {
        let now = 1_700_000_000_000;
        let clock = std::sync::Arc::new(crate::clock::ManualClock::new(now));
        let cfg = rocklet_core::Config {
            auto_create_topics: true,
            ..rocklet_core::Config::default()
        };
        let b = Broker::open(cfg, AnyStorage::Mem(MemStorage::new()), now).unwrap();
        crate::driver::spawn(
            b,
            clock,
            std::sync::Arc::new(crate::metrics::Metrics::default()),
        )
        .unwrap()
    }

    /// A resolve names an unknown transaction, ends a prepared one in its own group's name,
    /// and says when it was already ended that way.
    #[tokio::test]
    async fn resolve_by_hand() {
        let (core, _t) = core().await;
        let unknown = resolve(&core, TxnId(123), Resolution::Commit).await;
        assert_eq!(
            unknown,
            Err(OpError::Refused(format!(
                "UNKNOWN_TRANSACTION: no transaction {}",
                TxnId(123)
            )))
        );
        let half = core
            .prepare("G".into(), NewMessage::new("T", b"x".to_vec()), None)
            .await;
        let Ok(Ok((_, txn))) = half else {
            panic!("{half:?}")
        };
        assert_eq!(resolve(&core, txn, Resolution::Commit).await, Ok(false));
        assert_eq!(resolve(&core, txn, Resolution::Commit).await, Ok(true));
        let other = resolve(&core, txn, Resolution::Rollback).await;
        assert!(
            matches!(&other, Err(OpError::Refused(t)) if t.starts_with("TRANSACTION_ALREADY_RESOLVED: ")),
            "{other:?}"
        );
        core.shutdown().await;
    }

    /// A topic grows but never shrinks; a missing topic's deletion is refused unless asked
    /// to pass; a group name the core refuses is named.
    #[tokio::test]
    async fn topics_and_groups() {
        let (core, _t) = core().await;
        assert_eq!(create_topic(&core, "T".into(), 2).await, Ok(()));
        assert_eq!(create_topic(&core, "T".into(), 4).await, Ok(()));
        let shrink = create_topic(&core, "T".into(), 1).await;
        assert_eq!(
            shrink,
            Err(OpError::Refused(
                "INVALID_ARGUMENT: invalid argument: topic `T` has 4 queues; rocklet cannot remove queues (asked for 1)"
                    .into()
            ))
        );
        assert_eq!(delete_topic(&core, "T".into(), false).await, Ok(()));
        assert!(matches!(
            delete_topic(&core, "T".into(), false).await,
            Err(OpError::Refused(_))
        ));
        assert_eq!(delete_topic(&core, "T".into(), true).await, Ok(()));
        assert_eq!(declare_group(&core, "G".into(), true).await, Ok(()));
        assert!(core.inspect(|b| b.group_is_fifo("G")).await.unwrap());
        assert!(matches!(
            declare_group(&core, String::new(), false).await,
            Err(OpError::Refused(t)) if t.starts_with("INVALID_GROUP: ")
        ));
        core.shutdown().await;
    }
}
