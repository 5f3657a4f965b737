//! What a refused request is counted under: the reason ([`Failure`]) and the protocol
//! ([`Protocol`]), each with its metrics label. A leaf: it imports nothing of the broker, so
//! the counters ([`crate::metrics::Metrics`]) can size their table by it while `auth` counts
//! into them.

/// Why a request could not be authenticated: each has a metrics label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    NoCredentials,
    Malformed,
    UnknownKey,
    BadSignature,
    ExpiredTimestamp,
    BadSessionToken,
    /// Authenticated, but the ACL refused the request.
    Forbidden,
}

impl Failure {
    /// Every failure, in the order of [`Metrics::auth_failures`](crate::metrics::Metrics::auth_failures).
    pub const ALL: [Failure; 7] = [
        Failure::NoCredentials,
        Failure::Malformed,
        Failure::UnknownKey,
        Failure::BadSignature,
        Failure::ExpiredTimestamp,
        Failure::BadSessionToken,
        Failure::Forbidden,
    ];

    /// The metrics label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Failure::NoCredentials => "no_credentials",
            Failure::Malformed => "malformed",
            Failure::UnknownKey => "unknown_key",
            Failure::BadSignature => "bad_signature",
            Failure::ExpiredTimestamp => "expired_timestamp",
            Failure::BadSessionToken => "bad_session_token",
            Failure::Forbidden => "forbidden",
        }
    }
}

/// The protocol a request came over (a metrics label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    Remoting,
    Admin,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Grpc, Protocol::Remoting, Protocol::Admin];

    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::Remoting => "remoting",
            Protocol::Admin => "admin",
        }
    }
}
