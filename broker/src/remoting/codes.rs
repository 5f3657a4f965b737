//! Every RocketMQ 4 remoting code Rocklet knows, in one place: request codes (RocketMQ's
//! `RequestCode`) and response codes (`ResponseCode`), with the names of request codes for
//! refusals and counters. The handlers, mqadmin's requests, the ACL, the counters and the
//! bench all use these.

/// Request codes (RocketMQ's `RequestCode`).
pub mod code {
    pub const SEND_MESSAGE: i32 = 10;
    pub const PULL_MESSAGE: i32 = 11;
    pub const QUERY_CONSUMER_OFFSET: i32 = 14;
    pub const UPDATE_CONSUMER_OFFSET: i32 = 15;
    pub const GET_MAX_OFFSET: i32 = 30;
    pub const GET_MIN_OFFSET: i32 = 31;
    pub const HEART_BEAT: i32 = 34;
    pub const UNREGISTER_CLIENT: i32 = 35;
    pub const CONSUMER_SEND_MSG_BACK: i32 = 36;
    pub const END_TRANSACTION: i32 = 37;
    pub const GET_CONSUMER_LIST_BY_GROUP: i32 = 38;
    pub const CHECK_TRANSACTION_STATE: i32 = 39;
    pub const NOTIFY_CONSUMER_IDS_CHANGED: i32 = 40;
    pub const LOCK_BATCH_MQ: i32 = 41;
    pub const UNLOCK_BATCH_MQ: i32 = 42;
    pub const CHECK_CLIENT_CONFIG: i32 = 46;
    pub const GET_ROUTEINFO_BY_TOPIC: i32 = 105;
    pub const SEND_MESSAGE_V2: i32 = 310;
    pub const SEND_BATCH_MESSAGE: i32 = 320;
    /// A consumer's reply to a request message (`MessageUtil.createReplyMessage`).
    pub const SEND_REPLY_MESSAGE: i32 = 324;
    pub const SEND_REPLY_MESSAGE_V2: i32 = 325;
    /// The broker's push of a reply to the requester's connection.
    pub const PUSH_REPLY_MESSAGE_TO_CLIENT: i32 = 326;
    pub const LITE_PULL_MESSAGE: i32 = 361;
    pub const POP_MESSAGE: i32 = 200_050;
    pub const ACK_MESSAGE: i32 = 200_051;
    pub const CHANGE_MESSAGE_INVISIBLETIME: i32 = 200_053;

    // mqadmin's requests (`super::super::admin`).
    pub const QUERY_MESSAGE: i32 = 12;
    pub const UPDATE_AND_CREATE_TOPIC: i32 = 17;
    pub const GET_BROKER_RUNTIME_INFO: i32 = 28;
    pub const SEARCH_OFFSET_BY_TIMESTAMP: i32 = 29;
    pub const VIEW_MESSAGE_BY_ID: i32 = 33;
    pub const GET_BROKER_CLUSTER_INFO: i32 = 106;
    pub const UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: i32 = 200;
    pub const GET_TOPIC_STATS_INFO: i32 = 202;
    pub const GET_CONSUMER_CONNECTION_LIST: i32 = 203;
    pub const GET_PRODUCER_CONNECTION_LIST: i32 = 204;
    pub const GET_ALL_TOPIC_LIST_FROM_NAMESERVER: i32 = 206;
    pub const GET_CONSUME_STATS: i32 = 208;
    pub const DELETE_TOPIC_IN_BROKER: i32 = 215;
    pub const DELETE_TOPIC_IN_NAMESRV: i32 = 216;
    pub const RESET_CONSUMER_CLIENT_OFFSET: i32 = 220;
    pub const INVOKE_BROKER_TO_RESET_OFFSET: i32 = 222;
    pub const WIPE_WRITE_PERM_OF_BROKER: i32 = 205;
    pub const ADD_WRITE_PERM_OF_BROKER: i32 = 327;
    pub const UPDATE_BROKER_CONFIG: i32 = 25;
    pub const GET_BROKER_CONFIG: i32 = 26;
    pub const GET_NAMESRV_CONFIG: i32 = 319;
    pub const GET_BROKER_CONSUME_STATS: i32 = 317;
    pub const GET_SUBSCRIPTIONGROUP_CONFIG: i32 = 352;
    pub const GET_ALL_SUBSCRIPTIONGROUP_CONFIG: i32 = 201;
    pub const DELETE_SUBSCRIPTIONGROUP: i32 = 207;
    /// consumerStatus: asked of the broker, which asks the client ([`super::super::admin`]).
    pub const GET_CONSUMER_RUNNING_INFO: i32 = 307;
    pub const QUERY_CONSUME_QUEUE: i32 = 321;
    pub const QUERY_TOPIC_CONSUME_BY_WHO: i32 = 300;
    pub const GET_TOPIC_CONFIG: i32 = 351;
    /// The name server's KV config, for order topics' confs.
    pub const PUT_KV_CONFIG: i32 = 100;
    pub const GET_KV_CONFIG: i32 = 101;
    pub const DELETE_KV_CONFIG: i32 = 102;
}

/// Response codes (RocketMQ's `ResponseCode`).
pub mod status {
    pub const SUCCESS: i32 = 0;
    pub const SYSTEM_ERROR: i32 = 1;
    pub const SYSTEM_BUSY: i32 = 2;
    pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
    pub const MESSAGE_ILLEGAL: i32 = 13;
    pub const SERVICE_NOT_AVAILABLE: i32 = 14;
    pub const TOPIC_NOT_EXIST: i32 = 17;
    pub const PULL_NOT_FOUND: i32 = 19;
    pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
    /// A pull below the queue's first offset (its oldest segments retired: RocketMQ's
    /// OFFSET_TOO_SMALL), with nextBeginOffset the first offset.
    pub const PULL_OFFSET_MOVED: i32 = 21;
    pub const QUERY_NOT_FOUND: i32 = 22;
    pub const SUBSCRIPTION_PARSE_FAILED: i32 = 23;
    pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;
    /// Failed authentication and the ACL's refusals alike.
    pub const NO_PERMISSION: i32 = 16;
    /// INVOKE_BROKER_TO_RESET_OFFSET for a group with no client online.
    pub const CONSUMER_NOT_ONLINE: i32 = 206;
}

/// Every request code the remoting counters count (the handlers serve them) and its RocketMQ name; the last slot counts the rest.
pub const COUNTED: [(i32, &str); 25] = [
    (code::SEND_MESSAGE, "SEND_MESSAGE"),
    (code::PULL_MESSAGE, "PULL_MESSAGE"),
    (code::QUERY_CONSUMER_OFFSET, "QUERY_CONSUMER_OFFSET"),
    (code::UPDATE_CONSUMER_OFFSET, "UPDATE_CONSUMER_OFFSET"),
    (code::GET_MAX_OFFSET, "GET_MAX_OFFSET"),
    (code::GET_MIN_OFFSET, "GET_MIN_OFFSET"),
    (code::HEART_BEAT, "HEART_BEAT"),
    (code::UNREGISTER_CLIENT, "UNREGISTER_CLIENT"),
    (code::CONSUMER_SEND_MSG_BACK, "CONSUMER_SEND_MSG_BACK"),
    (code::END_TRANSACTION, "END_TRANSACTION"),
    (
        code::GET_CONSUMER_LIST_BY_GROUP,
        "GET_CONSUMER_LIST_BY_GROUP",
    ),
    (code::CHECK_TRANSACTION_STATE, "CHECK_TRANSACTION_STATE"),
    (code::LOCK_BATCH_MQ, "LOCK_BATCH_MQ"),
    (code::UNLOCK_BATCH_MQ, "UNLOCK_BATCH_MQ"),
    (code::CHECK_CLIENT_CONFIG, "CHECK_CLIENT_CONFIG"),
    (code::GET_ROUTEINFO_BY_TOPIC, "GET_ROUTEINFO_BY_TOPIC"),
    (code::SEND_MESSAGE_V2, "SEND_MESSAGE_V2"),
    (code::SEND_BATCH_MESSAGE, "SEND_BATCH_MESSAGE"),
    (code::SEND_REPLY_MESSAGE, "SEND_REPLY_MESSAGE"),
    (code::SEND_REPLY_MESSAGE_V2, "SEND_REPLY_MESSAGE_V2"),
    (code::LITE_PULL_MESSAGE, "LITE_PULL_MESSAGE"),
    (code::POP_MESSAGE, "POP_MESSAGE"),
    (code::ACK_MESSAGE, "ACK_MESSAGE"),
    (
        code::CHANGE_MESSAGE_INVISIBLETIME,
        "CHANGE_MESSAGE_INVISIBLETIME",
    ),
    (i32::MIN, "OTHER"),
];

/// RocketMQ names of request codes rocklet does not serve, so a refusal names what was
/// asked (mqadmin's other commands, name-server and controller requests).
pub const UNSERVED: [(i32, &str); 44] = [
    (13, "QUERY_BROKER_OFFSET"),
    (18, "UPDATE_AND_CREATE_TOPIC_LIST"),
    (21, "GET_ALL_TOPIC_CONFIG"),
    (22, "GET_TOPIC_CONFIG_LIST"),
    (23, "GET_TOPIC_NAME_LIST"),
    (27, "TRIGGER_DELETE_FILES"),
    (32, "GET_EARLIEST_MSG_STORETIME"),
    (43, "GET_ALL_CONSUMER_OFFSET"),
    (45, "GET_ALL_DELAY_OFFSET"),
    (47, "GET_CLIENT_CONFIG"),
    (60, "GET_TIMER_CHECK_POINT"),
    (61, "GET_TIMER_METRICS"),
    (103, "REGISTER_BROKER"),
    (104, "UNREGISTER_BROKER"),
    (209, "SUSPEND_CONSUMER"),
    (210, "RESUME_CONSUMER"),
    (211, "RESET_CONSUMER_OFFSET_IN_CONSUMER"),
    (212, "RESET_CONSUMER_OFFSET_IN_BROKER"),
    (213, "ADJUST_CONSUMER_THREAD_POOL"),
    (214, "WHO_CONSUME_THE_MESSAGE"),
    (217, "REGISTER_TOPIC_IN_NAMESRV"),
    (219, "GET_KVLIST_BY_NAMESPACE"),
    (220, "RESET_CONSUMER_CLIENT_OFFSET"),
    (221, "GET_CONSUMER_STATUS_FROM_CLIENT"),
    (223, "INVOKE_BROKER_TO_GET_CONSUMER_STATUS"),
    (224, "GET_TOPICS_BY_CLUSTER"),
    (225, "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST"),
    (303, "QUERY_CONSUME_TIME_SPAN"),
    (304, "GET_SYSTEM_TOPIC_LIST_FROM_NS"),
    (305, "GET_SYSTEM_TOPIC_LIST_FROM_BROKER"),
    (306, "CLEAN_EXPIRED_CONSUMEQUEUE"),
    (308, "QUERY_CORRECTION_OFFSET"),
    (309, "CONSUME_MESSAGE_DIRECTLY"),
    (314, "CLONE_GROUP_OFFSET"),
    (315, "VIEW_BROKER_STATS_DATA"),
    (316, "CLEAN_UNUSED_TOPIC"),
    (318, "UPDATE_NAMESRV_CONFIG"),
    (322, "QUERY_DATA_VERSION"),
    (323, "RESUME_CHECK_HALF_MESSAGE"),
    (328, "GET_ALL_PRODUCER_INFO"),
    (329, "DELETE_EXPIRED_COMMITLOG"),
    (370, "RECALL_MESSAGE"),
    (400, "QUERY_ASSIGNMENT"),
    (513, "UPDATE_AND_CREATE_STATIC_TOPIC"),
];

/// The RocketMQ name of a request code rocklet does not serve, if it is a known one.
#[must_use]
pub fn unserved_name(request_code: i32) -> Option<&'static str> {
    UNSERVED
        .iter()
        .find(|(c, _)| *c == request_code)
        .map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unserved_codes_are_named() {
        assert_eq!(unserved_name(18), Some("UPDATE_AND_CREATE_TOPIC_LIST"));
        assert_eq!(unserved_name(221), Some("GET_CONSUMER_STATUS_FROM_CLIENT"));
        assert_eq!(unserved_name(207), None, "served");
        assert_eq!(unserved_name(215), None, "served");
        assert_eq!(unserved_name(100), None, "served");
        assert_eq!(unserved_name(99_999), None);
    }
}
