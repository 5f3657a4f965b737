//! ReceiveMessage (long polling, the receive budget), AckMessage, ChangeInvisibleDuration and
//! ForwardMessageToDeadLetterQueue: each asks the core through its typed door
//! ([`CoreHandle::receive`], [`CoreHandle::ack`], …) and codes the answer.

use super::*;

impl Messaging {
    /// A receive's responses, and the budget charge they hold while they are in flight.
    pub(super) async fn receive(
        &self,
        req: pb::ReceiveMessageRequest,
        grpc_timeout: Option<Millis>,
        client: &str,
    ) -> (Vec<pb::ReceiveMessageResponse>, Option<Charge>) {
        let one = |s: Status| {
            (
                vec![pb::ReceiveMessageResponse {
                    content: Some(pb::receive_message_response::Content::Status(s)),
                }],
                None,
            )
        };
        let group = match self.name(req.group.as_ref(), "group") {
            Ok(g) => g,
            Err(s) => return one(s),
        };
        let topic = match self.name(
            req.message_queue.as_ref().and_then(|q| q.topic.as_ref()),
            "message_queue.topic",
        ) {
            Ok(t) => t,
            Err(s) => return one(s),
        };
        let filter = match req.filter_expression.as_ref() {
            None => TagFilter::All,
            Some(f) if f.expression.len() > self.cfg.max_filter_expression_bytes => {
                self.metrics.over_limit("max_filter_expression_bytes");
                return one(status(
                    Code::IllegalFilterExpression,
                    format!(
                        "FILTER_TOO_LONG: filter_expression.expression is {} bytes, more than the broker's max_filter_expression_bytes of {}",
                        f.expression.len(),
                        self.cfg.max_filter_expression_bytes
                    ),
                ));
            }
            Some(f) if f.r#type() == pb::FilterType::Sql => {
                if !self.cfg.enable_property_filter {
                    return one(status(
                        Code::IllegalFilterExpression,
                        "ILLEGAL_FILTER_EXPRESSION: The broker does not support consumer to filter message by SQL92 (enable_property_filter is off)",
                    ));
                }
                match TagFilter::sql92(&f.expression) {
                    Ok(filter) => filter,
                    Err(e) => {
                        return one(status(
                            Code::IllegalFilterExpression,
                            format!("ILLEGAL_FILTER_EXPRESSION: filter_expression.expression: {e}"),
                        ))
                    }
                }
            }
            Some(f) => TagFilter::parse(&f.expression),
        };
        let invisible_ms = match (&req.invisible_duration, req.auto_renew) {
            (Some(d), _) => match duration_ms(d) {
                Some(ms) if ms > 0 => ms,
                _ => {
                    return one(status(
                        Code::IllegalInvisibleTime,
                        format!("ILLEGAL_INVISIBLE_TIME: invisible_duration {d:?} must be above 0"),
                    ))
                }
            },
            (None, true) => self.cfg.core.default_invisible_ms,
            (None, false) => {
                return one(status(
                    Code::IllegalInvisibleTime,
                    "ILLEGAL_INVISIBLE_TIME: a simple consumer's receive needs invisible_duration",
                ))
            }
        };
        let long_poll = match &req.long_polling_timeout {
            Some(d) => match duration_ms(d) {
                Some(ms) => ms,
                None => {
                    return one(status(
                        Code::IllegalPollingTime,
                        format!("ILLEGAL_POLLING_TIME: long_polling_timeout {d:?} is negative"),
                    ))
                }
            },
            None => DEFAULT_LONG_POLL_MS,
        }
        .min(self.cfg.max_long_polling_ms);
        let mut wait = long_poll;
        if let Some(t) = grpc_timeout {
            wait = wait.min(t.saturating_sub(DEADLINE_MARGIN_MS.max(t / 10)));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait);
        let max = u32::try_from(req.batch_size).unwrap_or(1).max(1);
        loop {
            // Pop nothing while the budget is used up: the messages stay available.
            let reservation = match self.budget.reserve(max).await {
                Ok(r) => r,
                Err(over) => {
                    self.metrics
                        .receives_over_budget
                        .fetch_add(1, Ordering::Relaxed);
                    return one(status(Code::TooManyRequests, over.to_string()));
                }
            };
            let received = self
                .core
                .receive(
                    group.clone(),
                    topic.clone(),
                    None,
                    reservation.count(),
                    invisible_ms,
                    filter.clone(),
                )
                .await;
            let (reply, woken) = match received {
                Ok(x) => x,
                Err(e) => return one(core_failure(&e)),
            };
            match reply {
                Ok(msgs) if !msgs.is_empty() => {
                    if req.auto_renew {
                        // A push consumer: held invisible for as long as it holds them.
                        let now = self.clock.now();
                        for r in &msgs {
                            self.leases
                                .add(client, &group, &r.handle, r.visible_at, now);
                        }
                    }
                    let mut out = Vec::with_capacity(msgs.len() + 2);
                    out.push(pb::ReceiveMessageResponse {
                        content: Some(pb::receive_message_response::Content::Status(ok())),
                    });
                    for r in &msgs {
                        let m = convert::received_out(r, invisible_ms);
                        out.push(pb::ReceiveMessageResponse {
                            content: Some(pb::receive_message_response::Content::Message(m)),
                        });
                    }
                    out.push(delivery_now());
                    let bytes = out.iter().map(|r| r.encoded_len() as u64).sum();
                    return (out, Some(reservation.charge(bytes)));
                }
                Ok(_) => {}
                Err(e) => return one(client_error(&e)),
            }
            drop(reservation);
            // Nothing ready: wait for a message or the deadline (the guard also counts a
            // poll the client gives up on, when this future is dropped).
            let waiting = Waiting::new(&self.metrics);
            let timed_out = tokio::time::timeout_at(deadline, woken).await.is_err();
            drop(waiting);
            if timed_out || tokio::time::Instant::now() >= deadline {
                let (mut out, charge) = one(status(
                    Code::MessageNotFound,
                    "MESSAGE_NOT_FOUND: no new message before the long-polling timeout",
                ));
                out.push(delivery_now());
                return (out, charge);
            }
        }
    }

    pub(super) async fn ack(&self, req: pb::AckMessageRequest) -> pb::AckMessageResponse {
        let group = match self.name(req.group.as_ref(), "group") {
            Ok(g) => g,
            Err(s) => {
                return pb::AckMessageResponse {
                    status: Some(s),
                    entries: Vec::new(),
                }
            }
        };
        if req.entries.is_empty() {
            return pb::AckMessageResponse {
                status: Some(bad_request("AckMessage holds no entry")),
                entries: Vec::new(),
            };
        }
        // Send every ack first, then collect: one group commit covers them all.
        let mut waits = Vec::with_capacity(req.entries.len());
        let topic = given_name(req.topic.as_ref());
        for e in &req.entries {
            let handle = match handle_of_topic(&e.receipt_handle, topic) {
                Ok(()) => self.leases.resolve(&group, &e.receipt_handle).await,
                Err(e) => Err(e),
            };
            waits.push(match handle {
                Ok(handle) => Ok(self.core.ack(group.clone(), handle)),
                Err(err) => Err(client_error(&err)),
            });
        }
        let mut entries = Vec::with_capacity(waits.len());
        for (e, w) in req.entries.into_iter().zip(waits) {
            let s = match w {
                Err(s) => s,
                Ok(acked) => match acked.await {
                    Ok(Ok(())) => ok(),
                    Ok(Err(err)) => client_error(&err),
                    Err(f) => core_failure(&f),
                },
            };
            entries.push(pb::AckMessageResultEntry {
                message_id: e.message_id,
                receipt_handle: e.receipt_handle,
                status: Some(s),
            });
        }
        let status = summary(entries.iter().filter_map(|e| e.status.as_ref()));
        pb::AckMessageResponse {
            status: Some(status),
            entries,
        }
    }

    pub(super) async fn change_invisible(
        &self,
        req: pb::ChangeInvisibleDurationRequest,
    ) -> pb::ChangeInvisibleDurationResponse {
        let fail = |s: Status| pb::ChangeInvisibleDurationResponse {
            status: Some(s),
            receipt_handle: String::new(),
        };
        let group = match self.name(req.group.as_ref(), "group") {
            Ok(g) => g,
            Err(s) => return fail(s),
        };
        let handle = match self.leases.resolve(&group, &req.receipt_handle).await {
            Ok(h) => h,
            Err(e) => return fail(client_error(&e)),
        };
        let Some(invisible_ms) = req.invisible_duration.as_ref().and_then(duration_ms) else {
            return fail(status(
                Code::IllegalInvisibleTime,
                "ILLEGAL_INVISIBLE_TIME: invisible_duration is missing or negative",
            ));
        };
        match self
            .core
            .change_invisible(group, handle, invisible_ms)
            .await
        {
            Ok(Ok((handle, _))) => pb::ChangeInvisibleDurationResponse {
                status: Some(ok()),
                receipt_handle: handle.to_string(),
            },
            Ok(Err(e)) => fail(client_error(&e)),
            Err(e) => fail(core_failure(&e)),
        }
    }

    pub(super) async fn forward_to_dlq(
        &self,
        req: pb::ForwardMessageToDeadLetterQueueRequest,
    ) -> Status {
        let group = match self.name(req.group.as_ref(), "group") {
            Ok(g) => g,
            Err(s) => return s,
        };
        // The ACL checked the request's topic: the handle must be of that topic, or a
        // handle of another topic's delivery would copy its message into this group's DLQ.
        if let Err(e) = handle_of_topic(&req.receipt_handle, given_name(req.topic.as_ref())) {
            return client_error(&e);
        }
        let handle = match self.leases.resolve(&group, &req.receipt_handle).await {
            Ok(h) => h,
            Err(e) => return client_error(&e),
        };
        match self.core.forward_to_dead_letter(group, handle).await {
            Ok(Ok(())) => ok(),
            Ok(Err(e)) => client_error(&e),
            Err(e) => core_failure(&e),
        }
    }
}

/// Counts a waiting long poll for as long as it lives.
pub(super) struct Waiting<'a>(&'a Metrics);

impl<'a> Waiting<'a> {
    pub(super) fn new(m: &'a Metrics) -> Self {
        m.long_polls_waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(m)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.long_polls_waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(super) fn delivery_now() -> pb::ReceiveMessageResponse {
    let now = crate::clock::Clock::now(&crate::clock::SystemClock);
    pb::ReceiveMessageResponse {
        content: Some(pb::receive_message_response::Content::DeliveryTimestamp(
            timestamp(now),
        )),
    }
}

/// OK when every entry is; the one status when all share it; else MULTIPLE_RESULTS.
pub(super) fn summary<'a>(mut statuses: impl Iterator<Item = &'a Status>) -> Status {
    let Some(first) = statuses.next() else {
        return ok();
    };
    let mut all_same = true;
    for s in statuses {
        if s.code != first.code {
            all_same = false;
        }
    }
    if all_same {
        first.clone()
    } else {
        status(
            Code::MultipleResults,
            "MULTIPLE_RESULTS: entries have different results; see each entry",
        )
    }
}

/// A resource's name as given (empty when missing).
pub(super) fn given_name(r: Option<&pb::Resource>) -> &str {
    r.map_or("", |r| r.name.as_str())
}

/// Refuses a receipt handle of another topic than the one the request names (and the ACL
/// checked). A handle that does not parse is left to the lease lookup to refuse.
pub(super) fn handle_of_topic(given: &str, topic: &str) -> Result<(), ClientError> {
    match given.parse::<rocklet_core::ReceiptHandle>() {
        Ok(h) if h.topic != topic => Err(ClientError::InvalidReceiptHandle(if topic.is_empty() {
            format!(
                "the receipt handle is of topic `{}`, and the request names no topic (`topic` is required)",
                h.topic
            )
        } else {
            format!(
                "the receipt handle is of topic `{}`, the request names topic `{topic}`",
                h.topic
            )
        })),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_handle_must_be_of_the_topic_the_request_names() {
        let h = rocklet_core::ReceiptHandle {
            topic: "TB".into(),
            queue_id: 0,
            queue_offset: 3,
            generation: 0x40,
        }
        .to_string();
        assert_eq!(handle_of_topic(&h, "TB"), Ok(()));
        for named in ["TC", ""] {
            let e = handle_of_topic(&h, named).unwrap_err();
            assert!(e.to_string().contains("is of topic `TB`"), "{e}");
        }
        // Not a handle: the lease lookup refuses it (INVALID_RECEIPT_HANDLE too).
        assert_eq!(handle_of_topic("garbage", "TB"), Ok(()));
    }
}
