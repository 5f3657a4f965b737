//! The console's actions (`POST`): commit or roll back pending transactions, resend dead
//! letters to their original topic; each written to the log as an audit record.

use std::net::SocketAddr;

use rocklet_core::broker::prop;
use rocklet_core::{NewMessage, Resolution, TxnId};
use serde_json::{json, Value};
use tracing::{info, warn};

use super::{dlq_topic, ApiError, Console, Operator, MAX_ACTION_ITEMS};

impl Console {
    pub(super) async fn resolve(&self, body: &Value, op: &Operator<'_>) -> Result<Value, ApiError> {
        let (who, peer) = (op.name, op.peer);
        let resolution = match body.get("resolution").and_then(Value::as_str) {
            Some("commit") => Resolution::Commit,
            Some("rollback") => Resolution::Rollback,
            other => {
                return Err(ApiError(
                    400,
                    format!("`resolution` must be \"commit\" or \"rollback\", not {other:?}"),
                ))
            }
        };
        let ids = string_list(body, "transactions")?;
        let mut results = Vec::new();
        for id in ids {
            let r = self.resolve_one(&id, resolution, op).await;
            match &r {
                Ok(duplicate) => info!(
                    target: "rocklet::audit",
                    action = "resolve",
                    transaction = %id,
                    resolution = resolution.as_str(),
                    duplicate,
                    operator = who,
                    %peer,
                    "transaction resolved by an operator from the console"
                ),
                Err(e) => warn!(
                    target: "rocklet::audit",
                    action = "resolve",
                    transaction = %id,
                    resolution = resolution.as_str(),
                    operator = who,
                    %peer,
                    error = %e,
                    "an operator's resolve from the console failed"
                ),
            }
            if let (Ok(false), Ok(txn)) = (&r, id.parse::<TxnId>()) {
                self.stories.note(
                    txn.0,
                    self.clock.now(),
                    "operator_resolved",
                    format!("{} by {who} from the console", resolution.as_str()),
                );
            }
            results.push(match r {
                Ok(duplicate) => json!({"transaction_id": id, "ok": true, "duplicate": duplicate}),
                Err(e) => json!({"transaction_id": id, "ok": false, "error": e}),
            });
        }
        Ok(json!({"resolution": resolution.as_str(), "results": results}))
    }

    async fn resolve_one(
        &self,
        id: &str,
        resolution: Resolution,
        op: &Operator<'_>,
    ) -> Result<bool, String> {
        let txn: TxnId = id.parse().map_err(|e| format!("{e}"))?;
        // A replica's page: the master carries it out.
        if let Some(link) = self.cluster.get() {
            if let Some(m) = link.master_elsewhere() {
                return self
                    .resolve_on_master(&m, txn, resolution, op.credentials)
                    .await;
            }
        }
        crate::ops::resolve(&self.core, txn, resolution)
            .await
            .map_err(|e| e.to_string())
    }
    pub(super) async fn resend(
        &self,
        body: &Value,
        who: &str,
        peer: SocketAddr,
    ) -> Result<Value, ApiError> {
        let t = dlq_topic(body.get("topic").and_then(Value::as_str))?;
        let offsets: Vec<u64> = match body.get("offsets").and_then(Value::as_array) {
            Some(a) if a.len() <= MAX_ACTION_ITEMS => a
                .iter()
                .map(|v| {
                    v.as_u64().ok_or_else(|| {
                        ApiError(400, format!("`offsets`: {v} is not a queue offset"))
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(a) => {
                return Err(ApiError(
                    400,
                    format!(
                        "`offsets` names {} messages; at most {MAX_ACTION_ITEMS} per action",
                        a.len()
                    ),
                ))
            }
            None => {
                return Err(ApiError(
                    400,
                    "`offsets` (a list of queue offsets) is required".into(),
                ))
            }
        };
        let mut results = Vec::new();
        for off in offsets {
            let r = self.resend_one(&t, off).await;
            match &r {
                Ok((to, id)) => {
                    info!(target: "rocklet::audit", action = "resend", dlq = %t, queue_offset = off,
                    to = %to, message_id = %id, operator = who, %peer,
                    "dead letter resent to its original topic by an operator from the console")
                }
                Err(e) => {
                    warn!(target: "rocklet::audit", action = "resend", dlq = %t, queue_offset = off,
                    operator = who, %peer, error = %e, "an operator's resend from the console failed")
                }
            }
            results.push(match r {
                Ok((to, id)) => {
                    json!({"queue_offset": off, "ok": true, "topic": to, "message_id": id})
                }
                Err(e) => json!({"queue_offset": off, "ok": false, "error": e}),
            });
        }
        Ok(json!({"results": results}))
    }

    async fn resend_one(&self, dlq: &str, off: u64) -> Result<(String, String), String> {
        let t = dlq.to_string();
        let m = self
            .core
            .read_log(move |b| b.browse(&t, 0, off, 1).map_err(|e| e.to_string()))
            .await
            .map_err(|e| e.to_string())??
            .into_iter()
            .find(|m| m.queue_offset == off)
            .ok_or_else(|| format!("no message at queue offset {off} of {dlq}"))?;
        let to = m
            .property(prop::RETRY_TOPIC)
            .ok_or_else(|| {
                format!("the message at {off} of {dlq} names no original topic (RETRY_TOPIC)")
            })?
            .to_string();
        let id = m
            .property(prop::ORIGIN_MESSAGE_ID)
            .unwrap_or(m.msg_id.as_str())
            .to_string();
        let mut out = NewMessage::new(to.clone(), m.body.clone());
        out.tag = m.tag.clone();
        out.keys = m.keys.clone();
        out.flag = m.flag;
        out.born_timestamp = Some(m.born_timestamp);
        out.message_id = Some(id.clone());
        out.properties = m
            .properties
            .iter()
            .filter(|(k, _)| {
                ![
                    prop::RETRY_TOPIC,
                    prop::ORIGIN_MESSAGE_ID,
                    prop::RECONSUME_TIME,
                    prop::UNIQ_KEY,
                ]
                .contains(&k.as_str())
                    && !prop::RESERVED.contains(&k.as_str())
            })
            .cloned()
            .collect();
        match self.core.send(vec![out]).await.map_err(|e| e.to_string())? {
            Ok(_) => Ok((to, id)),
            Err(e) => Err(format!("{}: {e}", e.code())),
        }
    }
}

fn string_list(body: &Value, field: &str) -> Result<Vec<String>, ApiError> {
    let Some(a) = body.get(field).and_then(Value::as_array) else {
        return Err(ApiError(400, format!("`{field}` (a list) is required")));
    };
    if a.is_empty() || a.len() > MAX_ACTION_ITEMS {
        return Err(ApiError(
            400,
            format!(
                "`{field}` names {}; 1 to {MAX_ACTION_ITEMS} per action",
                a.len()
            ),
        ));
    }
    a.iter()
        .map(|v| {
            v.as_str()
                .map(String::from)
                .ok_or_else(|| ApiError(400, format!("`{field}`: {v} is not a string")))
        })
        .collect()
}
