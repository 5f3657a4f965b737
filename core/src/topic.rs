//! Topic names: RocketMQ's validation rules and the broker's system topics.

use alloc::format;
use alloc::string::String;

use crate::types::ClientError;

/// Half (prepare) messages.
pub const HALF: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// Op records resolving or checking half messages.
pub const OP: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// Half messages whose checks ran out.
pub const CHECK_MAX: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// Messages delayed by level (queue = level - 1).
pub const SCHEDULE: &str = "SCHEDULE_TOPIC_XXXX";
/// Messages delayed to an arbitrary time (RocketMQ 5's timer topic).
pub const TIMER: &str = "rmq_sys_wheel_timer";
/// Delivery records of delayed messages.
pub const DELAY_OP: &str = "rmq_sys_schedule_delivered";
/// Committed pull offsets.
pub const OFFSETS: &str = "rmq_sys_consumer_offset";
/// Receive / ack / invisible-time records (RocketMQ 5's pop revive log).
pub const REVIVE: &str = "rmq_sys_REVIVE_LOG";
/// Topic creations and their queue counts (what RocketMQ keeps in topics.json).
pub const TOPICS: &str = "rmq_sys_topic_config";
/// Retry topic prefix.
pub const RETRY_PREFIX: &str = "%RETRY%";
/// Dead-letter topic prefix.
pub const DLQ_PREFIX: &str = "%DLQ%";
/// RocketMQ's TOPIC_MAX_LENGTH.
pub const MAX_TOPIC_LEN: usize = 127;
/// RocketMQ's CHARACTER_MAX_LENGTH for groups.
pub const MAX_GROUP_LEN: usize = 255;

/// What a topic holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicKind {
    User,
    Retry,
    DeadLetter,
    CheckMax,
    Half,
    Op,
    Schedule,
    DelayOp,
    State,
}

impl TopicKind {
    /// Consumers may read it.
    #[must_use]
    pub fn is_readable(self) -> bool {
        matches!(
            self,
            TopicKind::User | TopicKind::Retry | TopicKind::DeadLetter | TopicKind::CheckMax
        )
    }
}

/// Classifies a topic name.
#[must_use]
pub fn classify(name: &str) -> TopicKind {
    match name {
        HALF => TopicKind::Half,
        OP => TopicKind::Op,
        CHECK_MAX => TopicKind::CheckMax,
        SCHEDULE | TIMER => TopicKind::Schedule,
        DELAY_OP => TopicKind::DelayOp,
        OFFSETS | REVIVE | TOPICS => TopicKind::State,
        n if n.starts_with(RETRY_PREFIX) => TopicKind::Retry,
        n if n.starts_with(DLQ_PREFIX) => TopicKind::DeadLetter,
        _ => TopicKind::User,
    }
}

/// RocketMQ's TopicValidator.isSystemTopic, plus the topics of this broker.
#[must_use]
pub fn is_system(name: &str) -> bool {
    const SYSTEM: [&str; 12] = [
        HALF,
        OP,
        CHECK_MAX,
        SCHEDULE,
        "TBW102",
        "BenchmarkTest",
        "RMQ_SYS_TRACE_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "DefaultCluster",
        "RMQ_SYS_SELF_TEST_TOPIC",
        "DefaultHeartBeatSyncerTopic",
    ];
    name.starts_with("rmq_sys_") || SYSTEM.contains(&name)
}

/// Whether a topic is a retry topic.
#[must_use]
pub fn is_retry(name: &str) -> bool {
    name.starts_with(RETRY_PREFIX)
}

/// `%RETRY%<group>`.
#[must_use]
pub fn retry(group: &str) -> String {
    format!("{RETRY_PREFIX}{group}")
}

/// `%DLQ%<group>`.
#[must_use]
pub fn dlq(group: &str) -> String {
    format!("{DLQ_PREFIX}{group}")
}

fn valid_chars(name: &str) -> bool {
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
}

/// A name RocketMQ accepts: 1..=127 bytes of `[%|a-zA-Z0-9_-]`.
pub fn validate_name(name: &str) -> Result<(), ClientError> {
    if name.is_empty() {
        return Err(ClientError::InvalidTopic("topic name is empty".into()));
    }
    if name.len() > MAX_TOPIC_LEN {
        return Err(ClientError::InvalidTopic(format!(
            "topic name is {} bytes, longer than {MAX_TOPIC_LEN}",
            name.len()
        )));
    }
    if !valid_chars(name) {
        return Err(ClientError::InvalidTopic(format!(
            "topic `{}` has characters outside [%|a-zA-Z0-9_-]",
            name.escape_debug()
        )));
    }
    Ok(())
}

/// A topic a producer may send to.
pub fn validate_user_topic(name: &str) -> Result<(), ClientError> {
    validate_name(name)?;
    if is_system(name) || name.starts_with(DLQ_PREFIX) {
        return Err(ClientError::ReservedTopic(name.into()));
    }
    Ok(())
}

/// A topic a consumer may read.
pub fn validate_readable_topic(name: &str) -> Result<(), ClientError> {
    validate_name(name)?;
    if !classify(name).is_readable() {
        return Err(ClientError::ReservedTopic(name.into()));
    }
    Ok(())
}

/// A producer or consumer group name: 1..=255 bytes of `[%|a-zA-Z0-9_-]`.
pub fn validate_group(name: &str) -> Result<(), ClientError> {
    if name.is_empty() {
        return Err(ClientError::InvalidGroup("group name is empty".into()));
    }
    if name.len() > MAX_GROUP_LEN {
        return Err(ClientError::InvalidGroup(format!(
            "group name is {} bytes, longer than {MAX_GROUP_LEN}",
            name.len()
        )));
    }
    if !valid_chars(name) {
        return Err(ClientError::InvalidGroup(format!(
            "group `{}` has characters outside [%|a-zA-Z0-9_-]",
            name.escape_debug()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_user_topic("TopicTest").is_ok());
        assert!(validate_user_topic("a-b_c%d|e").is_ok());
        assert!(matches!(
            validate_user_topic(""),
            Err(ClientError::InvalidTopic(_))
        ));
        assert!(matches!(
            validate_user_topic("has space"),
            Err(ClientError::InvalidTopic(_))
        ));
        assert!(matches!(
            validate_user_topic(&"x".repeat(128)),
            Err(ClientError::InvalidTopic(_))
        ));
        assert!(validate_user_topic(&"x".repeat(127)).is_ok());
        assert!(matches!(
            validate_user_topic(HALF),
            Err(ClientError::ReservedTopic(_))
        ));
        assert!(matches!(
            validate_user_topic("rmq_sys_x"),
            Err(ClientError::ReservedTopic(_))
        ));
        assert!(matches!(
            validate_user_topic("%DLQ%g"),
            Err(ClientError::ReservedTopic(_))
        ));
        assert!(validate_user_topic("%RETRY%g").is_ok());
        assert!(validate_readable_topic(CHECK_MAX).is_ok());
        assert!(validate_readable_topic(HALF).is_err());
        assert!(validate_group("").is_err());
        assert!(validate_group("g.1").is_err());
    }
}
