//! Errors that are not the client's: storage failures, corrupt logs, bad configuration.

use alloc::string::String;
use core::fmt;

use crate::config::ConfigError;

/// A failure of the broker itself. A client's mistake is a [`Reply::Error`](crate::Reply::Error).
///
/// Not `#[non_exhaustive]`, on purpose: every host maps each variant to its own code, and a
/// new variant must break those mappings at compile time rather than fall into a wildcard.
#[derive(Debug)]
pub enum Error<E> {
    /// The storage failed; the request that hit it was not applied.
    Storage(E),
    /// The configuration cannot work.
    Config(ConfigError),
    /// The log holds something recovery cannot accept (and will not cut off by itself).
    Corrupted { offset: u64, reason: String },
    /// A record would not fit the format (a topic over 255 bytes and the like).
    Encode(crate::record::EncodeError),
    /// The broker stopped taking requests after a failed sync
    /// ([`Broker::failed`](crate::Broker::failed)): open the storage again.
    Failed { reason: String },
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Storage(e) => write!(f, "storage failed: {e}"),
            Error::Config(e) => e.fmt(f),
            Error::Corrupted { offset, reason } => {
                write!(f, "corrupt log at offset {offset}: {reason}")
            }
            Error::Encode(e) => write!(f, "record cannot be encoded: {e:?}"),
            Error::Failed { reason } => write!(
                f,
                "the broker stopped after a failed sync ({reason}); reopen it to recover what is durable"
            ),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> core::error::Error for Error<E> {}

impl<E> From<ConfigError> for Error<E> {
    fn from(e: ConfigError) -> Self {
        Error::Config(e)
    }
}
