//! Answers: success and failure commands, the core's client errors as response codes,
//! header fields read with named refusals, and requests refused before they are handled.

use std::sync::atomic::Ordering;

use rocklet_core::ClientError;
use tracing::debug;

use super::codec::RemotingCommand;
use super::codes::{code, status};
use super::conn::{Conn, Ctx};
use crate::config::BrokerConfig;
use crate::driver::CoreFailure;

pub(crate) fn ok(req: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(req, status::SUCCESS, None)
}

pub(crate) fn fail(req: &RemotingCommand, code: i32, remark: impl Into<String>) -> RemotingCommand {
    RemotingCommand::response_to(req, code, Some(remark.into()))
}

/// The core's client error as RocketMQ's response code: every variant named, no wildcard (see
/// [`ClientError`]); the remark starts with the core's stable code.
pub(crate) fn client_error(req: &RemotingCommand, e: &ClientError) -> RemotingCommand {
    let code = match e {
        ClientError::UnknownTopic(_) => status::TOPIC_NOT_EXIST,
        ClientError::InvalidGroup(_) => status::SUBSCRIPTION_GROUP_NOT_EXIST,
        ClientError::UnknownTransaction(_)
        | ClientError::TransactionAlreadyResolved { .. }
        | ClientError::WrongProducerGroup { .. }
        | ClientError::MalformedTransactionId(_)
        | ClientError::InvalidReceiptHandle(_)
        | ClientError::StaleReceiptHandle(_)
        | ClientError::ProducerGroupRequired(_)
        | ClientError::NotConsumable(_)
        | ClientError::TooManyGroups { .. }
        | ClientError::TooManyTopics { .. } => status::SYSTEM_ERROR,
        ClientError::InvalidTopic(_)
        | ClientError::ReservedTopic(_)
        | ClientError::InvalidQueue { .. }
        | ClientError::EmptyBody
        | ClientError::MessageTooLarge { .. }
        | ClientError::BatchTooLarge { .. }
        | ClientError::EmptyBatch
        | ClientError::MixedBatch(_)
        | ClientError::DelayInBatch
        | ClientError::BatchToRetryTopic
        | ClientError::InvalidDelay(_)
        | ClientError::DelayOnTransaction
        | ClientError::InvalidProperty(_)
        | ClientError::PropertiesTooLarge(_)
        | ClientError::InvalidArgument(_) => status::MESSAGE_ILLEGAL,
        // A replica: v4 producers retry SERVICE_NOT_AVAILABLE on another broker at once (as
        // Apache's slave answers), where MESSAGE_ILLEGAL would end the send.
        ClientError::NotMaster => status::SERVICE_NOT_AVAILABLE,
        // As Apache's broker answers a put while its disk is full: v4 producers retry it on
        // another broker.
        ClientError::DiskFull(_) => status::SERVICE_NOT_AVAILABLE,
    };
    fail(req, code, format!("{}: {e}", e.code()))
}

/// The core could not answer: SERVICE_NOT_AVAILABLE (clients retry it), but SYSTEM_ERROR for
/// a reply that does not answer the request (a broker bug: retrying will not help).
pub(crate) fn core_failure(req: &RemotingCommand, e: &CoreFailure) -> RemotingCommand {
    let code = match e {
        CoreFailure::Stopped | CoreFailure::Storage(_) => status::SERVICE_NOT_AVAILABLE,
        CoreFailure::Unexpected(_) => status::SYSTEM_ERROR,
    };
    fail(req, code, e.to_string())
}

/// A header field (with its SEND_MESSAGE_V2 short name, if any).
pub(crate) fn field<'a>(req: &'a RemotingCommand, name: &str) -> Option<&'a str> {
    req.ext.get(name).map(String::as_str)
}

pub(crate) fn required<'a>(
    req: &'a RemotingCommand,
    name: &str,
) -> Result<&'a str, RemotingCommand> {
    match field(req, name) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("the request header lacks `{name}`"),
        )),
    }
}

pub(crate) fn number<T: std::str::FromStr>(
    req: &RemotingCommand,
    name: &str,
) -> Result<T, RemotingCommand> {
    let v = required(req, name)?;
    v.trim().parse().map_err(|_| {
        fail(
            req,
            status::SYSTEM_ERROR,
            format!("header field `{name}` = `{v}` is not a valid number"),
        )
    })
}

pub(crate) fn number_or<T: std::str::FromStr>(
    req: &RemotingCommand,
    name: &str,
    default: T,
) -> Result<T, RemotingCommand> {
    match field(req, name) {
        None | Some("") => Ok(default),
        Some(_) => number(req, name),
    }
}

/// Most body bytes of a request whose body is JSON (HEART_BEAT, LOCK_BATCH_MQ,
/// UNLOCK_BATCH_MQ, CHECK_CLIENT_CONFIG): a heartbeat of a client with thousands of subscriptions is far below it.
pub const MAX_JSON_BODY: usize = 4 << 20;

/// Most body bytes a request of `request_code` may carry: sends their message or batch (as
/// much as a gRPC SendMessage may decode), JSON requests [`MAX_JSON_BODY`], every other
/// served request none (a body there was only held, never read: 96 long-polling pulls with
/// 15 MiB bodies held 1.4 GiB). Codes rocklet does not serve are answered whatever they carry.
#[must_use]
pub fn max_body(cfg: &BrokerConfig, request_code: i32) -> usize {
    match request_code {
        code::SEND_MESSAGE
        | code::SEND_MESSAGE_V2
        | code::SEND_BATCH_MESSAGE
        | code::SEND_REPLY_MESSAGE
        | code::SEND_REPLY_MESSAGE_V2 => cfg.max_request_message_bytes(),
        code::HEART_BEAT
        | code::LOCK_BATCH_MQ
        | code::UNLOCK_BATCH_MQ
        | code::CHECK_CLIENT_CONFIG => MAX_JSON_BODY,
        c if super::stats::code_name(c) == "OTHER" => super::codec::MAX_FRAME,
        _ => 0,
    }
}

/// The answer to a request whose body of `body_len` bytes is more than its kind carries
/// ([`max_body`]), or `None` when it fits.
#[must_use]
pub fn body_refusal(ctx: &Ctx, req: &RemotingCommand, body_len: usize) -> Option<RemotingCommand> {
    let max = max_body(&ctx.cfg, req.code);
    if body_len <= max {
        return None;
    }
    let name = super::stats::code_name(req.code);
    ctx.over_limit("remoting_request_body");
    Some(if max == 0 {
        fail(
            req,
            status::SYSTEM_ERROR,
            format!("BODY_NOT_EXPECTED: {name} carries no body; this one has {body_len} bytes (refused unread)"),
        )
    } else {
        fail(
            req,
            status::MESSAGE_ILLEGAL,
            format!("BODY_TOO_LARGE: the body of {name} is {body_len} bytes, more than the {max} it may carry (refused unread)"),
        )
    })
}

/// The answer to a request whose body does not fit in the broker's request budget (read
/// unheld, skipped as it arrives).
#[must_use]
pub fn busy(req: &RemotingCommand, over: &crate::budget::OverRequestBudget) -> RemotingCommand {
    fail(req, status::SYSTEM_BUSY, over.to_string())
}

/// A request refused before it was handled: counted, and answered unless it is oneway.
pub fn refused(ctx: &Ctx, conn: &Conn, req: &RemotingCommand, answer: RemotingCommand) {
    ctx.stats.count(req.code, false);
    if let Some(m) = &ctx.metrics {
        m.request_errors.fetch_add(1, Ordering::Relaxed);
    }
    debug!(code = req.code, remark = ?answer.remark, "remoting request refused unread");
    if !req.is_oneway() {
        conn.send(&answer);
    }
}

/// A tag filter header field (`subscription` of pulls, `exp` of pops), at most
/// `max_filter_expression_bytes` long.
pub(crate) fn filter_field<'a>(
    ctx: &Ctx,
    req: &'a RemotingCommand,
    name: &str,
) -> Result<&'a str, RemotingCommand> {
    filter_len_ok(ctx, req, name, field(req, name).unwrap_or("*"))
}

/// `v`, the filter expression `name`, if at most `max_filter_expression_bytes` long.
pub(crate) fn filter_len_ok<'a>(
    ctx: &Ctx,
    req: &RemotingCommand,
    name: &str,
    v: &'a str,
) -> Result<&'a str, RemotingCommand> {
    let max = ctx.cfg.max_filter_expression_bytes;
    if v.len() > max {
        ctx.over_limit("max_filter_expression_bytes");
        return Err(fail(
            req,
            status::SUBSCRIPTION_PARSE_FAILED,
            format!("FILTER_TOO_LONG: `{name}` is {} bytes, more than the broker's max_filter_expression_bytes of {max}", v.len()),
        ));
    }
    Ok(v)
}

/// A pull's or pop's filter: the expression in `expr_field`, of the type in `type_field`
/// (`TAG` or none: a tag expression; `SQL92`: parsed here, once, and refused with the parser's
/// message and position as Apache refuses it, `SUBSCRIPTION_PARSE_FAILED`; with
/// `enable_property_filter` off, `SYSTEM_ERROR` as Apache's broker answers).
pub(crate) fn request_filter(
    ctx: &Ctx,
    req: &RemotingCommand,
    type_field: &str,
    expr_field: &str,
) -> Result<rocklet_core::TagFilter, RemotingCommand> {
    let expr = filter_field(ctx, req, expr_field)?;
    parse_filter(ctx, req, field(req, type_field), expr, expr_field)
}

/// A filter expression `expr` (named `name` in refusals) of type `ty`: see [`request_filter`].
pub(crate) fn parse_filter(
    ctx: &Ctx,
    req: &RemotingCommand,
    ty: Option<&str>,
    expr: &str,
    name: &str,
) -> Result<rocklet_core::TagFilter, RemotingCommand> {
    use rocklet_core::TagFilter;
    match ty {
        None | Some("" | "TAG") => Ok(TagFilter::parse(expr)),
        Some("SQL92") if !ctx.cfg.enable_property_filter => Err(fail(
            req,
            status::SYSTEM_ERROR,
            "The broker does not support consumer to filter message by SQL92 (enable_property_filter is off)",
        )),
        Some("SQL92") => TagFilter::sql92(expr).map_err(|e| {
            fail(
                req,
                status::SUBSCRIPTION_PARSE_FAILED,
                format!("SUBSCRIPTION_PARSE_FAILED: `{name}`: {e}"),
            )
        }),
        Some(other) => Err(fail(
            req,
            status::MESSAGE_ILLEGAL,
            format!("filter type `{other}` is not supported: use TAG or SQL92"),
        )),
    }
}

pub(crate) type Answer = Result<RemotingCommand, RemotingCommand>;

pub(crate) fn json_body(req: &RemotingCommand) -> Result<serde_json::Value, RemotingCommand> {
    serde_json::from_slice(&req.body).map_err(|e| {
        fail(
            req,
            status::SYSTEM_ERROR,
            format!("the body is not valid JSON: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicas_refusal_is_one_producers_retry() {
        use std::collections::BTreeMap;
        let req = RemotingCommand::request(code::SEND_MESSAGE_V2, BTreeMap::new(), Vec::new());
        let r = client_error(&req, &ClientError::NotMaster);
        assert_eq!(r.code, status::SERVICE_NOT_AVAILABLE);
        assert!(r.remark.unwrap().starts_with("NOT_MASTER: "));
        let r = client_error(&req, &ClientError::EmptyBody);
        assert_eq!(r.code, status::MESSAGE_ILLEGAL);
    }

    /// A core that is gone is worth a retry elsewhere; a reply that answers another request
    /// (a broker bug) is not.
    #[test]
    fn an_impossible_reply_is_a_system_error() {
        use std::collections::BTreeMap;
        let req = RemotingCommand::request(code::SEND_MESSAGE_V2, BTreeMap::new(), Vec::new());
        let r = core_failure(&req, &CoreFailure::Stopped);
        assert_eq!(r.code, status::SERVICE_NOT_AVAILABLE);
        let e = crate::driver::answer::sent(rocklet_core::Reply::Acked).unwrap_err();
        let r = core_failure(&req, &e);
        assert_eq!(r.code, status::SYSTEM_ERROR);
        assert_eq!(
            r.remark.as_deref(),
            Some("unexpected reply from the core: Acked to Send")
        );
    }
}
