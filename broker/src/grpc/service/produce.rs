//! SendMessage and EndTransaction: the request converted, the core asked through its typed
//! door ([`CoreHandle::send`], [`CoreHandle::prepare`], [`CoreHandle::end_transaction`]), the
//! answer coded ([`super::super::status`]).

use super::*;

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
                    .map(|(r, id)| pb::SendResultEntry {
                        status: Some(ok()),
                        message_id: if id.is_empty() { r.msg_id } else { id },
                        transaction_id: r.txn.map(|t| t.to_string()).unwrap_or_default(),
                        offset: r.queue_offset as i64,
                    })
                    .collect();
                (ok(), entries)
            }
            Ok(Err(e)) => (client_error(&e), Vec::new()),
            Err(e) => (core_failure(&e), Vec::new()),
        }
    }

    pub(super) async fn end_transaction(&self, req: pb::EndTransactionRequest) -> Status {
        let txn: TxnId = match req.transaction_id.parse() {
            Ok(t) => t,
            Err(e) => return client_error(&e),
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
