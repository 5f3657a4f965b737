//! RocketMQ 5 gRPC (`apache.rocketmq.v2.MessagingService`), the protocol the official v5
//! clients speak.
//!
//! A call flows through, in order:
//! 1. [`gate`]: before tonic decodes anything, the call gets its read deadline and reserves
//!    its bytes in the broker-wide request budget (or is answered at once when they do not
//!    fit);
//! 2. authentication and the ACL ([`crate::auth::grpc`]), from the headers and the request;
//! 3. [`service`]: the RPC converts its request ([`convert`]), asks the core thread through
//!    its typed door ([`crate::driver::CoreHandle`]) and converts the answer back; a client's
//!    mistake becomes a RocketMQ `Status` ([`status`]) naming the problem. `service.rs` holds
//!    the entry points, `service/{route,produce,consume,budget}.rs` the methods by concept;
//! 4. [`lease`]: deliveries a push consumer holds are renewed while it holds them.
//!
//! [`builder`] is the listener's tonic server with the broker's HTTP/2 settings.

pub mod convert;
pub mod gate;
pub mod lease;
pub mod service;
pub mod status;

use crate::config::BrokerConfig;

/// The messaging listener's tonic server with the broker's HTTP/2 settings (the stream cap,
/// the header list size, keepalive), before its layers and services.
#[must_use]
pub fn builder(cfg: &BrokerConfig) -> tonic::transport::Server {
    let ms = std::time::Duration::from_millis;
    tonic::transport::Server::builder()
        // Streams one connection may have open (tonic's default is no limit).
        .max_concurrent_streams(cfg.max_concurrent_streams)
        .http2_max_header_list_size(cfg.grpc_max_header_list_bytes)
        // Dead peers go: a PING every interval, closed when one is not answered in time.
        .http2_keepalive_interval(Some(ms(cfg.http2_keepalive_interval_ms)))
        .http2_keepalive_timeout(Some(ms(cfg.http2_keepalive_timeout_ms)))
}
