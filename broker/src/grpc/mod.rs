//! RocketMQ 5 gRPC (`apache.rocketmq.v2.MessagingService`), the protocol the official v5
//! clients speak.
//!
//! A call flows through, in order:
//! 1. [`gate`]: before tonic decodes anything, the call gets its read deadline and reserves
//!    its bytes in the broker-wide request budget (or is answered at once when they do not
//!    fit);
//! 2. authentication and the ACL ([`crate::auth::grpc`]), from the headers and the request;
//! 3. [`service`]: the RPC converts its request ([`convert`]), asks the core thread
//!    ([`crate::driver`]) and converts the reply back; a client's mistake becomes a RocketMQ
//!    `Status` ([`status`]) naming the problem;
//! 4. [`lease`]: deliveries a push consumer holds are renewed while it holds them.

pub mod convert;
pub mod gate;
pub mod lease;
pub mod service;
pub mod status;
