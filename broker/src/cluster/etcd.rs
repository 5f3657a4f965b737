//! A small etcd v3 client: KV get, put and transactions, and leases, over tonic with the
//! schema in `proto/etcd.proto` (compiled with protox like the others, so building needs no
//! `protoc`; the `etcd-client` crate compiles etcd's schema with `protoc` in its build
//! script, which every build of the workspace would then need).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::pb::etcd as pb;
use crate::pb::etcd::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::pb::etcd::kv_client::KvClient;
use crate::pb::etcd::lease_client::LeaseClient;

/// How long one etcd call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// An etcd call that failed (unreachable, timed out, refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdError(pub String);

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "etcd: {}", self.0)
    }
}

impl std::error::Error for EtcdError {}

pub type EtcdResult<T> = Result<T, EtcdError>;

/// A key's value and revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub value: Vec<u8>,
    pub mod_revision: i64,
    pub version: i64,
    pub lease: i64,
}

/// A connection to one etcd member.
#[derive(Debug, Clone)]
pub struct Etcd {
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
    /// The endpoint connected to.
    pub endpoint: String,
}

async fn timed<T>(f: impl std::future::Future<Output = Result<T, tonic::Status>>) -> EtcdResult<T> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(s)) => Err(EtcdError(format!("{}: {}", s.code(), s.message()))),
        Err(_) => Err(EtcdError(format!("no answer within {CALL_TIMEOUT:?}"))),
    }
}

impl Etcd {
    /// Connects to the first of `endpoints` that answers, starting at `first` (so a
    /// reconnect tries the next member first).
    pub async fn connect(endpoints: &[String], first: usize) -> EtcdResult<Self> {
        let mut last = EtcdError("no endpoint".into());
        for i in 0..endpoints.len() {
            let e = &endpoints[(first + i) % endpoints.len()];
            let ep = Endpoint::from_shared(e.clone())
                .map_err(|err| EtcdError(format!("bad endpoint `{e}`: {err}")))?
                .connect_timeout(CALL_TIMEOUT)
                .tcp_nodelay(true);
            match tokio::time::timeout(CALL_TIMEOUT, ep.connect()).await {
                Ok(Ok(ch)) => {
                    return Ok(Etcd {
                        kv: KvClient::new(ch.clone()),
                        lease: LeaseClient::new(ch),
                        endpoint: e.clone(),
                    })
                }
                Ok(Err(err)) => last = EtcdError(format!("cannot connect to {e}: {err}")),
                Err(_) => last = EtcdError(format!("connecting to {e} timed out")),
            }
        }
        Err(last)
    }

    /// The value of `key`, if it exists.
    pub async fn get(&mut self, key: &str) -> EtcdResult<Option<Kv>> {
        let r = timed(self.kv.range(pb::RangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        }))
        .await?
        .into_inner();
        Ok(r.kvs.into_iter().next().map(|kv| Kv {
            value: kv.value,
            mod_revision: kv.mod_revision,
            version: kv.version,
            lease: kv.lease,
        }))
    }

    /// Every key under `prefix` with its value.
    pub async fn list(&mut self, prefix: &str) -> EtcdResult<Vec<(String, Vec<u8>)>> {
        let r = timed(self.kv.range(pb::RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            ..Default::default()
        }))
        .await?
        .into_inner();
        Ok(r.kvs
            .into_iter()
            .map(|kv| (String::from_utf8_lossy(&kv.key).into_owned(), kv.value))
            .collect())
    }

    /// Writes `key` (on `lease` unless 0).
    pub async fn put(&mut self, key: &str, value: Vec<u8>, lease: i64) -> EtcdResult<()> {
        timed(self.kv.put(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value,
            lease,
            ..Default::default()
        }))
        .await?;
        Ok(())
    }

    /// If every comparison holds, does `then`; whether it did.
    pub async fn txn(
        &mut self,
        when: Vec<pb::Compare>,
        then: Vec<pb::RequestOp>,
    ) -> EtcdResult<bool> {
        let r = timed(self.kv.txn(pb::TxnRequest {
            compare: when,
            success: then,
            failure: Vec::new(),
        }))
        .await?
        .into_inner();
        Ok(r.succeeded)
    }

    /// A lease of `ttl` seconds; its id.
    pub async fn grant(&mut self, ttl: i64) -> EtcdResult<i64> {
        let r = timed(self.lease.lease_grant(pb::LeaseGrantRequest { ttl, id: 0 }))
            .await?
            .into_inner();
        if !r.error.is_empty() {
            return Err(EtcdError(r.error));
        }
        Ok(r.id)
    }

    /// Ends a lease (its keys go).
    pub async fn revoke(&mut self, id: i64) -> EtcdResult<()> {
        timed(self.lease.lease_revoke(pb::LeaseRevokeRequest { id })).await?;
        Ok(())
    }

    /// Opens a keep-alive stream for lease `id` (renewing it once: etcd answers the call
    /// with its first renewal).
    pub async fn keep_alive(&mut self, id: i64) -> EtcdResult<KeepAlive> {
        let (tx, rx) = mpsc::channel(4);
        tx.send(pb::LeaseKeepAliveRequest { id })
            .await
            .map_err(|_| EtcdError("the keep-alive stream closed".into()))?;
        let mut stream = timed(self.lease.lease_keep_alive(ReceiverStream::new(rx)))
            .await?
            .into_inner();
        match timed(stream.message()).await? {
            Some(r) if r.ttl > 0 => Ok(KeepAlive { id, tx, stream }),
            Some(_) => Err(EtcdError(format!("lease {id} is gone"))),
            None => Err(EtcdError("the keep-alive stream ended".into())),
        }
    }
}

/// A lease's keep-alive stream.
#[derive(Debug)]
pub struct KeepAlive {
    id: i64,
    tx: mpsc::Sender<pb::LeaseKeepAliveRequest>,
    stream: tonic::Streaming<pb::LeaseKeepAliveResponse>,
}

impl KeepAlive {
    /// Renews the lease once: the TTL etcd granted (0 or less: the lease is gone).
    pub async fn renew(&mut self) -> EtcdResult<i64> {
        self.tx
            .send(pb::LeaseKeepAliveRequest { id: self.id })
            .await
            .map_err(|_| EtcdError("the keep-alive stream closed".into()))?;
        match timed(self.stream.message()).await? {
            Some(r) => Ok(r.ttl),
            None => Err(EtcdError("the keep-alive stream ended".into())),
        }
    }
}

/// The range end that covers every key starting with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn compare(key: &str, target: CompareTarget, value: TargetUnion) -> pb::Compare {
    pb::Compare {
        result: CompareResult::Equal as i32,
        target: target as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(value),
        range_end: Vec::new(),
    }
}

/// `key`'s version equals `v` (0: the key does not exist).
#[must_use]
pub fn version_is(key: &str, v: i64) -> pb::Compare {
    compare(key, CompareTarget::Version, TargetUnion::Version(v))
}

/// `key` was last written at revision `rev`.
#[must_use]
pub fn mod_revision_is(key: &str, rev: i64) -> pb::Compare {
    compare(key, CompareTarget::Mod, TargetUnion::ModRevision(rev))
}

/// `key`'s value equals `value`.
#[must_use]
pub fn value_is(key: &str, value: &[u8]) -> pb::Compare {
    compare(
        key,
        CompareTarget::Value,
        TargetUnion::Value(value.to_vec()),
    )
}

/// Puts `value` at `key` (on `lease` unless 0), inside a transaction.
#[must_use]
pub fn put(key: &str, value: Vec<u8>, lease: i64) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value,
            lease,
            ..Default::default()
        })),
    }
}

/// Deletes `key`, inside a transaction.
#[must_use]
pub fn delete(key: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestDeleteRange(
            pb::DeleteRangeRequest {
                key: key.as_bytes().to_vec(),
                ..Default::default()
            },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_covers_the_prefix() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
