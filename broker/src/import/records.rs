//! What the import knows of RocketMQ's records: the property names it reads, which topics
//! are whose (user, retry, transaction, schedule, system), and the messages inside an inner
//! batch.

use rocklet_core::{record, topic};

/// RocketMQ property names the import reads (MessageConst).
pub(super) mod prop {
    pub const TAGS: &str = "TAGS";
    pub const KEYS: &str = "KEYS";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QID: &str = "REAL_QID";
    pub const PGROUP: &str = "PGROUP";
    pub const TRAN_MSG: &str = "TRAN_MSG";
    pub const DELAY: &str = "DELAY";
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
    pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
    pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
    pub const TIMER_ROLL_TIMES: &str = "TIMER_ROLL_TIMES";
    pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
    pub const CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    pub const CHECK_IMMUNITY: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
    pub const PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
    pub const INNER_NUM: &str = "INNER_NUM";
    pub const INNER_BASE: &str = "INNER_BASE";
    pub const MULTI_DISPATCH: &str = "INNER_MULTI_DISPATCH";
    pub const SHARDING_KEY: &str = "__SHARDINGKEY";
}

/// RocketMQ's transaction checker group (MixAll.CID_SYS_RMQ_TRANS).
pub(super) const CHECKER_GROUP: &str = "CID_RMQ_SYS_TRANS";
/// RocketMQ's predefined groups (MixAll.PREDEFINE_GROUP_SET) and the CID_RMQ_SYS_ prefix.
pub(super) const SYSTEM_GROUPS: [&str; 14] = [
    "DEFAULT_CONSUMER",
    "DEFAULT_PRODUCER",
    "TOOLS_CONSUMER",
    "SCHEDULE_CONSUMER",
    "FILTERSRV_CONSUMER",
    "__MONITOR_CONSUMER",
    "CLIENT_INNER_PRODUCER",
    "SELF_TEST_P_GROUP",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_ONSAPI_PULL",
    CHECKER_GROUP,
];

pub(super) fn system_group(g: &str) -> bool {
    g.starts_with("CID_RMQ_SYS_") || SYSTEM_GROUPS.contains(&g)
}

/// What a topic's records are to the import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    User,
    Half,
    Op,
    Schedule,
    Timer,
    /// Not imported, for this reason.
    Skip(String),
}

pub(super) fn kind(t: &str) -> Kind {
    match t {
        topic::HALF => Kind::Half,
        topic::OP => Kind::Op,
        topic::SCHEDULE => Kind::Schedule,
        topic::TIMER => Kind::Timer,
        topic::CHECK_MAX => Kind::Skip(format!(
            "records of {t}: half messages RocketMQ's checker gave up on (transactionCheckMax)"
        )),
        t if t.starts_with("rmq_sys_REVIVE_LOG") => Kind::Skip(format!(
            "records of {t}: pop checkpoints and acks (a message popped and not acked is not made visible again)"
        )),
        t if t.starts_with("RMQ_SYS_") || t == "CHECKPOINT_TOPIC" => {
            Kind::Skip(format!("records of RocketMQ system topic {t}"))
        }
        t if t.starts_with(topic::DLQ_PREFIX) => Kind::Skip(format!(
            "messages of dead-letter topic {t}: the core takes no sends to %DLQ% topics"
        )),
        t => match topic::validate_user_topic(t) {
            Ok(()) => Kind::User,
            Err(_) if topic::is_system(t) => {
                Kind::Skip(format!("records of RocketMQ system topic {t}"))
            }
            Err(e) => Kind::Skip(format!("messages of topic {t}: {e}")),
        },
    }
}

/// One message of an inner batch (MessageDecoder.encodeMessage: TOTALSIZE 4, MAGICCODE 4,
/// BODYCRC 4, FLAG 4, BODY length 4 and bytes, PROPERTIES length 2 and bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Inner<'a> {
    pub flag: i32,
    pub body: &'a [u8],
    pub props: &'a [u8],
}

/// Splits an inner batch's body into its messages.
pub(super) fn split_inner(mut b: &[u8]) -> Result<Vec<Inner<'_>>, String> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let be32 = |b: &[u8], at: usize| u32::from_be_bytes(b[at..at + 4].try_into().expect("4"));
        if b.len() < 22 {
            return Err(format!(
                "{} bytes left, less than an inner message",
                b.len()
            ));
        }
        let total = be32(b, 0) as usize;
        let body_len = be32(b, 16) as usize;
        if total > b.len() || 20 + body_len + 2 > total {
            return Err(format!("inner message {} says {total} bytes", out.len()));
        }
        let props_len = usize::from(u16::from_be_bytes([b[20 + body_len], b[21 + body_len]]));
        if 22 + body_len + props_len != total {
            return Err(format!(
                "inner message {}: its lengths do not add up",
                out.len()
            ));
        }
        let props = &b[22 + body_len..total];
        if !record::validate_props(props) {
            return Err(format!("inner message {}: malformed properties", out.len()));
        }
        out.push(Inner {
            flag: be32(b, 12) as i32,
            body: &b[20..20 + body_len],
            props,
        });
        b = &b[total..];
    }
    if out.is_empty() {
        return Err("an inner batch holds no message".into());
    }
    Ok(out)
}
