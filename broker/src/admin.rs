//! Rocklet's admin gRPC service (`rocklet.admin.v1.Admin`, on the broker's port) and the
//! client side that `rocklet admin` runs.

use std::sync::Arc;

use rocklet_core::{broker::prop, record, Millis, Resolution, TxnId};
use tonic::{Request as GrpcRequest, Response, Status as GrpcStatus};
use tracing::info;

use crate::clock::Clock;
use crate::driver::CoreHandle;
use crate::metrics::Metrics;
use crate::ops::{self, OpError};
use crate::pb::admin as pb;
use crate::pb::admin::admin_server::Admin;

/// Pending transactions listed when the request names no limit.
const DEFAULT_LIMIT: usize = 1000;

/// The admin service.
#[derive(Debug, Clone)]
pub struct AdminService {
    core: CoreHandle,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    backups: crate::backup::Backups,
}

impl AdminService {
    /// A service over a running core thread.
    #[must_use]
    pub fn new(core: CoreHandle, clock: Arc<dyn Clock>, metrics: Arc<Metrics>) -> Self {
        AdminService {
            core,
            clock,
            metrics,
            backups: crate::backup::Backups::default(),
        }
    }
}

/// A topic and its queues as the admin service answers them.
fn topic_info(t: rocklet_core::TopicInfo) -> pb::TopicInfo {
    pb::TopicInfo {
        name: t.name,
        queues: t
            .queues
            .into_iter()
            .map(|(queue_id, next_offset, visible)| pb::QueueInfo {
                queue_id,
                next_offset,
                visible,
            })
            .collect(),
    }
}

fn internal(e: impl std::fmt::Display) -> GrpcStatus {
    GrpcStatus::internal(e.to_string())
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn list_topics(
        &self,
        _: GrpcRequest<pb::ListTopicsRequest>,
    ) -> Result<Response<pb::ListTopicsResponse>, GrpcStatus> {
        self.metrics.request("Admin");
        let topics = self.core.inspect(|b| b.topics()).await.map_err(internal)?;
        let topics = topics.into_iter().map(topic_info).collect();
        Ok(Response::new(pb::ListTopicsResponse { topics }))
    }

    async fn get_topic(
        &self,
        request: GrpcRequest<pb::GetTopicRequest>,
    ) -> Result<Response<pb::GetTopicResponse>, GrpcStatus> {
        self.metrics.request("Admin");
        let name = request.into_inner().name;
        let topic = self
            .core
            .inspect(move |b| b.topic_info(&name))
            .await
            .map_err(internal)?;
        Ok(Response::new(pb::GetTopicResponse {
            topic: topic.map(topic_info),
        }))
    }

    async fn list_pending(
        &self,
        request: GrpcRequest<pb::ListPendingRequest>,
    ) -> Result<Response<pb::ListPendingResponse>, GrpcStatus> {
        self.metrics.request("Admin");
        let limit = match request.into_inner().limit {
            0 => DEFAULT_LIMIT,
            n => n as usize,
        };
        let now = self.clock.now();
        let (total, list) = self
            .core
            .read_log(move |b| {
                let total = b.pending_transaction_count() as u64;
                let list: Vec<_> = b
                    .pending_transactions(limit)
                    .into_iter()
                    .map(|p| {
                        // The half record tells when it was stored and the client's message id.
                        let (stored, msg_id) = half_details(b, p.txn.0);
                        (p, stored, msg_id)
                    })
                    .collect();
                (total, list)
            })
            .await
            .map_err(internal)?;
        let transactions = list
            .into_iter()
            .map(|(p, stored, message_id)| pb::PendingTransaction {
                transaction_id: p.txn.to_string(),
                producer_group: p.group,
                topic: p.topic,
                queue_id: p.queue_id,
                checks: p.checks,
                age_ms: stored.map_or(0, |s| now.saturating_sub(s)),
                next_check_in_ms: p.next_check.map(|t| t as i64 - now as i64),
                message_id,
            })
            .collect();
        Ok(Response::new(pb::ListPendingResponse {
            transactions,
            total,
        }))
    }

    async fn resolve(
        &self,
        request: GrpcRequest<pb::ResolveRequest>,
    ) -> Result<Response<pb::ResolveResponse>, GrpcStatus> {
        self.metrics.request("Admin");
        let req = request.into_inner();
        let txn: TxnId = req
            .transaction_id
            .parse()
            .map_err(|e| GrpcStatus::invalid_argument(format!("{e}")))?;
        let resolution = match req.resolution.parse::<Resolution>() {
            Ok(r @ (Resolution::Commit | Resolution::Rollback)) => r,
            _ => {
                return Err(GrpcStatus::invalid_argument(format!(
                    "resolution `{}` is not commit or rollback",
                    req.resolution
                )))
            }
        };
        match ops::resolve(&self.core, txn, resolution).await {
            Ok(duplicate) => {
                info!(%txn, resolution = resolution.as_str(), duplicate, "transaction resolved by an operator");
                Ok(Response::new(pb::ResolveResponse { duplicate }))
            }
            Err(e @ OpError::Refused(_)) => Err(GrpcStatus::failed_precondition(e.to_string())),
            Err(e @ (OpError::Failed(_) | OpError::Unreadable(_))) => Err(internal(e)),
        }
    }

    async fn declare_group(
        &self,
        request: GrpcRequest<pb::DeclareGroupRequest>,
    ) -> Result<Response<pb::DeclareGroupResponse>, GrpcStatus> {
        self.metrics.request("Admin");
        let pb::DeclareGroupRequest { name, fifo } = request.into_inner();
        match ops::declare_group(&self.core, name.clone(), fifo).await {
            Ok(()) => {
                info!(group = %name, fifo, "consumer group declared by an operator");
                Ok(Response::new(pb::DeclareGroupResponse {}))
            }
            Err(e @ OpError::Refused(_)) => Err(GrpcStatus::invalid_argument(e.to_string())),
            Err(e @ (OpError::Failed(_) | OpError::Unreadable(_))) => Err(internal(e)),
        }
    }

    async fn get_group(
        &self,
        request: GrpcRequest<pb::GetGroupRequest>,
    ) -> Result<Response<pb::GetGroupResponse>, GrpcStatus> {
        self.metrics.request("Admin");
        let name = request.into_inner().name;
        let fifo = self
            .core
            .inspect(move |b| b.group_is_fifo(&name))
            .await
            .map_err(internal)?;
        Ok(Response::new(pb::GetGroupResponse { fifo }))
    }

    async fn start_group_at_end(
        &self,
        request: GrpcRequest<pb::StartGroupAtEndRequest>,
    ) -> Result<Response<pb::StartGroupAtEndResponse>, GrpcStatus> {
        self.metrics.request("Admin");
        let pb::StartGroupAtEndRequest { group, topic } = request.into_inner();
        match ops::start_group_at_end(&self.core, group.clone(), topic.clone()).await {
            Ok(started) => {
                if started > 0 {
                    info!(%group, %topic, queues = started, "receive group started at the topic's end");
                }
                Ok(Response::new(pb::StartGroupAtEndResponse { started }))
            }
            Err(e @ OpError::Refused(_)) => Err(GrpcStatus::failed_precondition(e.to_string())),
            Err(e @ (OpError::Failed(_) | OpError::Unreadable(_))) => Err(internal(e)),
        }
    }

    async fn backup(
        &self,
        request: GrpcRequest<pb::BackupRequest>,
    ) -> Result<Response<pb::BackupResponse>, GrpcStatus> {
        self.metrics.request("Admin");
        let to = std::path::PathBuf::from(request.into_inner().to);
        let now = self.clock.now();
        match self.backups.run(&self.core, &to, now).await {
            Ok(r) => {
                info!(dir = %to.display(), log_offset = r.log_offset, files_copied = r.files_copied, bytes_copied = r.bytes_copied, files_held = r.files_held, elapsed_ms = r.elapsed.as_millis() as u64, core_us = r.core.as_micros() as u64, "backup written");
                Ok(Response::new(pb::BackupResponse {
                    log_offset: r.log_offset,
                    time_ms: r.time_ms,
                    files_copied: r.files_copied,
                    bytes_copied: r.bytes_copied,
                    files_held: r.files_held,
                    bytes_held: r.bytes_held,
                    elapsed_ms: r.elapsed.as_millis() as u64,
                    core_us: r.core.as_micros() as u64,
                }))
            }
            Err(e) => {
                tracing::warn!(dir = %to.display(), error = %e, "backup refused or failed");
                Err(GrpcStatus::failed_precondition(e))
            }
        }
    }
}

/// Store time and message id of a half message.
fn half_details(b: &mut crate::driver::CoreBroker, offset: u64) -> (Option<Millis>, String) {
    let Ok(records) = b.raw_records(offset, 1) else {
        return (None, String::new());
    };
    let Some((_, bytes)) = records.into_iter().next() else {
        return (None, String::new());
    };
    match record::decode_trusted(&bytes) {
        Ok(record::Decoded::Record(r)) => (
            Some(r.header.store_timestamp),
            r.prop(prop::UNIQ_KEY).unwrap_or_default().to_string(),
        ),
        _ => (None, String::new()),
    }
}

/// The client side of `rocklet admin`.
pub mod client {
    use std::fmt::Write as _;

    use crate::pb::admin as pb;
    use crate::pb::admin::admin_client::AdminClient;

    /// Signed with the process's credentials, over TLS when asked (`crate::auth::admin`).
    async fn connect(
        addr: &str,
    ) -> Result<
        AdminClient<
            tonic::service::interceptor::InterceptedService<
                tonic::transport::Channel,
                crate::auth::admin::Signer,
            >,
        >,
        String,
    > {
        crate::auth::admin::admin_client(addr).await
    }

    fn status(e: tonic::Status) -> String {
        format!("{} ({:?})", e.message(), e.code())
    }

    /// `rocklet admin topics`: one line per queue.
    pub async fn topics(addr: &str) -> Result<String, String> {
        let mut c = connect(addr).await?;
        let r = c
            .list_topics(pb::ListTopicsRequest {})
            .await
            .map_err(status)?
            .into_inner();
        let mut out = format!(
            "{:<40} {:>6} {:>14} {:>14}\n",
            "TOPIC", "QUEUE", "NEXT_OFFSET", "VISIBLE"
        );
        for t in r.topics {
            for q in t.queues {
                let _ = writeln!(
                    out,
                    "{:<40} {:>6} {:>14} {:>14}",
                    t.name, q.queue_id, q.next_offset, q.visible
                );
            }
        }
        Ok(out)
    }

    /// `rocklet admin pending`: one line per pending transaction.
    pub async fn pending(addr: &str, limit: u32) -> Result<String, String> {
        let mut c = connect(addr).await?;
        let r = c
            .list_pending(pb::ListPendingRequest { limit })
            .await
            .map_err(status)?
            .into_inner();
        let mut out = format!(
            "{:<18} {:<28} {:<28} {:>10} {:>7} {:>14}  {}\n",
            "TXN_ID", "GROUP", "TOPIC", "AGE_S", "CHECKS", "NEXT_CHECK_S", "MESSAGE_ID"
        );
        for t in &r.transactions {
            let next = match t.next_check_in_ms {
                Some(ms) => format!("{:.1}", ms as f64 / 1000.0),
                None => "parked".into(),
            };
            let _ = writeln!(
                out,
                "{:<18} {:<28} {:<28} {:>10.1} {:>7} {:>14}  {}",
                t.transaction_id,
                t.producer_group,
                t.topic,
                t.age_ms as f64 / 1000.0,
                t.checks,
                next,
                t.message_id
            );
        }
        let _ = writeln!(out, "{} pending transaction(s)", r.total);
        Ok(out)
    }

    /// `rocklet admin group <name> [--fifo | --no-fifo]`: declares the group when `fifo` is
    /// given, then says what it is.
    pub async fn group(addr: &str, name: &str, fifo: Option<bool>) -> Result<String, String> {
        let mut c = connect(addr).await?;
        if let Some(fifo) = fifo {
            c.declare_group(pb::DeclareGroupRequest {
                name: name.into(),
                fifo,
            })
            .await
            .map_err(status)?;
        }
        let r = c
            .get_group(pb::GetGroupRequest { name: name.into() })
            .await
            .map_err(status)?
            .into_inner();
        let what = if r.fifo {
            "FIFO (orderly receives)"
        } else {
            "not FIFO"
        };
        Ok(match fifo {
            Some(_) => format!("group {name} declared: {what}\n"),
            None => format!("group {name}: {what}\n"),
        })
    }

    /// `rocklet admin backup --to DIR`: one line saying what was copied.
    pub async fn backup(addr: &str, to: &str) -> Result<String, String> {
        let mut c = connect(addr).await?;
        let r = c
            .backup(pb::BackupRequest { to: to.into() })
            .await
            .map_err(status)?
            .into_inner();
        Ok(format!(
            "backup of log offset {} written to {to}: copied {} files, {} bytes; held {} \
             files, {} bytes from an earlier backup; {:.3} s (core thread {} us)\n",
            r.log_offset,
            r.files_copied,
            r.bytes_copied,
            r.files_held,
            r.bytes_held,
            r.elapsed_ms as f64 / 1000.0,
            r.core_us
        ))
    }

    /// `rocklet admin resolve <txn> commit|rollback`.
    pub async fn resolve(addr: &str, txn: &str, resolution: &str) -> Result<String, String> {
        let mut c = connect(addr).await?;
        let r = c
            .resolve(pb::ResolveRequest {
                transaction_id: txn.into(),
                resolution: resolution.into(),
            })
            .await
            .map_err(status)?
            .into_inner();
        Ok(if r.duplicate {
            format!("transaction {txn} was already resolved ({resolution}); nothing changed\n")
        } else {
            format!("transaction {txn}: {resolution} applied\n")
        })
    }
}
