//! Status codes: the core's [`ClientError`] and the broker's own refusals as RocketMQ 5
//! `Status{code, message}`. The message starts with the core's stable code and names the
//! problem (`MESSAGE_TOO_LARGE: message body of 5242880 bytes exceeds the maximum of 4194304`).

use rocklet_core::ClientError;

use crate::driver::CoreFailure;
use crate::pb::v2::{Code, Status};

/// OK.
#[must_use]
pub fn ok() -> Status {
    Status {
        code: Code::Ok as i32,
        message: "OK".into(),
    }
}

/// A status with a code and message.
#[must_use]
pub fn status(code: Code, message: impl Into<String>) -> Status {
    Status {
        code: code as i32,
        message: message.into(),
    }
}

/// A malformed request (a required field missing or out of range).
#[must_use]
pub fn bad_request(message: impl std::fmt::Display) -> Status {
    status(Code::BadRequest, format!("BAD_REQUEST: {message}"))
}

/// The RocketMQ code for a core error: every variant named, no wildcard (see
/// [`ClientError`]).
#[must_use]
pub fn code_of(e: &ClientError) -> Code {
    match e {
        ClientError::InvalidTopic(_) | ClientError::ReservedTopic(_) => Code::IllegalTopic,
        ClientError::UnknownTopic(_) => Code::TopicNotFound,
        ClientError::InvalidGroup(_) => Code::IllegalConsumerGroup,
        ClientError::EmptyBody => Code::MessageBodyEmpty,
        ClientError::MessageTooLarge { .. } => Code::MessageBodyTooLarge,
        ClientError::BatchTooLarge { .. } => Code::PayloadTooLarge,
        ClientError::InvalidDelay(_) => Code::IllegalDeliveryTime,
        ClientError::DelayOnTransaction => Code::MessagePropertyConflictWithType,
        ClientError::InvalidProperty(_) => Code::IllegalMessagePropertyKey,
        ClientError::PropertiesTooLarge(_) => Code::MessagePropertiesTooLarge,
        ClientError::UnknownTransaction(_)
        | ClientError::MalformedTransactionId(_)
        | ClientError::TransactionAlreadyResolved { .. }
        | ClientError::WrongProducerGroup { .. } => Code::InvalidTransactionId,
        ClientError::InvalidReceiptHandle(_) | ClientError::StaleReceiptHandle(_) => {
            Code::InvalidReceiptHandle
        }
        ClientError::InvalidQueue { .. }
        | ClientError::EmptyBatch
        | ClientError::MixedBatch(_)
        | ClientError::DelayInBatch
        | ClientError::BatchToRetryTopic
        | ClientError::InvalidArgument(_)
        | ClientError::ProducerGroupRequired(_)
        | ClientError::NotConsumable(_) => Code::BadRequest,
        // A limit of the broker's: retrying does not help.
        ClientError::TooManyGroups { .. } | ClientError::TooManyTopics { .. } => Code::Forbidden,
        // A replica: the clients take a server error as one to retry (elsewhere).
        ClientError::NotMaster => Code::HaNotAvailable,
        // Apache's proxy answers a store that is not writable (its SERVICE_NOT_AVAILABLE)
        // with INTERNAL_SERVER_ERROR; clients retry a send elsewhere.
        ClientError::DiskFull(_) => Code::InternalServerError,
    }
}

/// The status for a core error: its code, and a message with the core's code and text.
#[must_use]
pub fn client_error(e: &ClientError) -> Status {
    status(code_of(e), format!("{}: {e}", e.code()))
}

/// The status when the core could not answer (or answered something impossible,
/// [`CoreFailure::Unexpected`]).
#[must_use]
pub fn core_failure(e: &CoreFailure) -> Status {
    status(Code::InternalServerError, format!("INTERNAL: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_problem() {
        let s = client_error(&ClientError::MessageTooLarge { size: 5, max: 4 });
        assert_eq!(s.code, Code::MessageBodyTooLarge as i32);
        assert!(
            s.message.starts_with("MESSAGE_TOO_LARGE: "),
            "{}",
            s.message
        );
        assert!(
            s.message.contains("exceeds the maximum of 4"),
            "{}",
            s.message
        );
        let s = client_error(&ClientError::UnknownTransaction(rocklet_core::TxnId(7)));
        assert_eq!(s.code, Code::InvalidTransactionId as i32);
        assert!(s.message.contains("0000000000000007"), "{}", s.message);
        let s = client_error(&ClientError::NotMaster);
        assert_eq!(s.code, Code::HaNotAvailable as i32);
        assert!(s.message.starts_with("NOT_MASTER: "), "{}", s.message);
    }
}
