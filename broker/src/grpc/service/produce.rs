//! SendMessage and EndTransaction: the request converted, the core asked through its typed
//! door ([`CoreHandle::send`], [`CoreHandle::prepare`], [`CoreHandle::end_transaction`]), the
//! answer coded ([`super::super::status`]).

use super::*;

/// The longest transaction id (a message id) an EndTransaction may name: RocketMQ's are 32
/// (v4) or 34 (v5) hex digits.
const MAX_MESSAGE_ID: usize = 128;

impl Messaging {
    pub(super) async fn send(
        &self,
        req: pb::SendMessageRequest,
        client: String,
    ) -> (Status, Vec<pb::SendResultEntry>) {
        let n = req.messages.len();
        if n == 0 {
            return (bad_request("SendMessage holds no message"), Vec::new());
        }
        if !self.core.writable() {
            return (
                status(
                    Code::Forbidden,
                    "the broker's write permission was wiped (mqadmin wipeWritePerm; addWritePerm restores it): send to another broker group",
                ),
                Vec::new(),
            );
        }
        let limit = self.cfg.max_batch_messages as usize;
        if n > limit {
            self.metrics.over_limit("max_batch_messages");
            return (
                status(
                    Code::PayloadTooLarge,
                    format!("TOO_MANY_MESSAGES: SendMessage holds {n} messages, more than the broker's max_batch_messages of {limit}; send them in smaller batches"),
                ),
                Vec::new(),
            );
        }
        let mut ids = Vec::with_capacity(n);
        let mut converted = Vec::with_capacity(n);
        let mut any_txn = false;
        for (i, m) in req.messages.into_iter().enumerate() {
            let ty = convert::message_type(&m);
            let id = m
                .system_properties
                .as_ref()
                .map(|s| s.message_id.clone())
                .unwrap_or_default();
            let (msg, immunity) = match convert::new_message(m, i) {
                Ok(x) => x,
                Err(s) => return (s, Vec::new()),
            };
            let accepted = self.cfg.accepted_types(&msg.topic);
            if !accepted.contains(&ty) {
                let names: Vec<&str> = accepted.iter().map(|t| t.as_str()).collect();
                return (
                    status(
                        Code::MessagePropertyConflictWithType,
                        format!(
                            "MESSAGE_TYPE_NOT_ACCEPTED: topic `{}` accepts {} messages, not {}",
                            msg.topic,
                            names.join(", "),
                            ty.as_str()
                        ),
                    ),
                    Vec::new(),
                );
            }
            any_txn |= ty == TopicMessageType::Transaction;
            ids.push(id);
            converted.push((msg, immunity, ty));
        }
        let sent = if any_txn {
            if n > 1 {
                return (
                    bad_request(
                        "a transactional message cannot be sent in a batch (send one per call)",
                    ),
                    Vec::new(),
                );
            }
            let (message, immunity, _) = converted.pop().expect("one message");
            if !client.is_empty() {
                // This client's telemetry stream can answer checks of the topic.
                self.core.producer_sends(client, message.topic.clone());
            }
            let group = txn_group(&message.topic);
            self.core
                .prepare(group, message, immunity)
                .await
                .map(|r| r.map(|(half, _)| vec![half]))
        } else {
            let messages = converted.into_iter().map(|(m, _, _)| m).collect();
            self.core.send(messages).await
        };
        match sent {
            Ok(Ok(results)) => {
                let entries = results
                    .into_iter()
                    .zip(ids)
                    .map(|(r, id)| {
                        let message_id = if id.is_empty() { r.msg_id } else { id };
                        pb::SendResultEntry {
                            status: Some(ok()),
                            // As Apache's proxy: a half's transaction id is its message id
                            // (UNIQ_KEY), the one checks carry too (`end_transaction`).
                            transaction_id: if r.txn.is_some() {
                                message_id.clone()
                            } else {
                                String::new()
                            },
                            message_id,
                            offset: r.queue_offset as i64,
                        }
                    })
                    .collect();
                (ok(), entries)
            }
            Ok(Err(e)) => (client_error(&e), Vec::new()),
            Err(e) => (core_failure(&e), Vec::new()),
        }
    }

    /// The transaction an EndTransaction names: its id is the half's message id (RocketMQ's
    /// form, looked up in the topic's index, [`rocklet_core::Broker::transaction_by_message_id`]),
    /// or a log offset of 16 hex digits as Rocklet gave before (a message id is 32 or more).
    async fn named_transaction(&self, req: &pb::EndTransactionRequest) -> Result<TxnId, Status> {
        let id = req.transaction_id.trim();
        if id.len() == 16 {
            return id.parse().map_err(|e| client_error(&e));
        }
        let topic = req
            .topic
            .as_ref()
            .map(|t| t.name.clone())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| bad_request("an EndTransaction names its message's topic"))?;
        if id.is_empty() || id.len() > MAX_MESSAGE_ID {
            return Err(client_error(&ClientError::MalformedTransactionId(
                id.chars().take(MAX_MESSAGE_ID).collect(),
            )));
        }
        let (t, key) = (topic.clone(), id.to_string());
        match self
            .core
            .read_log(move |b| b.transaction_by_message_id(&t, &key))
            .await
        {
            Ok(Ok(Some(txn))) => Ok(txn),
            Ok(Ok(None)) => Err(status(
                Code::InvalidTransactionId,
                format!("UNKNOWN_TRANSACTION: no half message of topic {topic} has the transaction id {id}"),
            )),
            Ok(Err(e)) => Err(core_failure(&crate::driver::CoreFailure::Storage(e.to_string()))),
            Err(e) => Err(core_failure(&e)),
        }
    }

    pub(super) async fn end_transaction(&self, req: pb::EndTransactionRequest) -> Status {
        let txn = match self.named_transaction(&req).await {
            Ok(t) => t,
            Err(s) => return s,
        };
        let resolution = match req.resolution() {
            pb::TransactionResolution::Commit => Resolution::Commit,
            pb::TransactionResolution::Rollback => Resolution::Rollback,
            pb::TransactionResolution::Unspecified => Resolution::Unknown,
        };
        let from_check = req.source() == pb::TransactionSource::SourceServerCheck;
        // The topic names the transaction's group: an END sent with another topic is refused
        // (WRONG_PRODUCER_GROUP) instead of resolving someone else's transaction.
        let group = req
            .topic
            .as_ref()
            .filter(|t| !t.name.is_empty())
            .map(|t| txn_group(&t.name));
        let ended = self
            .core
            .end_transaction(txn, resolution, group, from_check)
            .await;
        match ended {
            Ok(Ok(_)) => {
                debug!(%txn, resolution = resolution.as_str(), from_check, "transaction ended");
                ok()
            }
            Ok(Err(e)) => client_error(&e),
            Err(e) => core_failure(&e),
        }
    }
}
