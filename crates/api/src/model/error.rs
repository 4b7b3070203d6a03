//! The error object every failed request answers with.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A stable, machine-readable error class. Each maps to one HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed or names impossible values (400).
    InvalidArgument,
    /// The object named in the path does not exist, or the path is unknown (404).
    NotFound,
    /// The path exists but not with this method (405).
    MethodNotAllowed,
    /// The object is in use, already exists, or is in the wrong state for the request (409).
    Conflict,
    /// The request body is larger than the server accepts (413).
    PayloadTooLarge,
    /// The request over TCP carries no API token or a wrong one (401).
    Unauthenticated,
    /// The daemon is starting, stopping or at its connection limit; try again (503).
    Unavailable,
    /// A bug or an unexpected failure inside the daemon (500).
    Internal,
    /// A code this client does not know (sent by a newer daemon).
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// The HTTP status this code is sent with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidArgument => 400,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::Conflict => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal | ErrorCode::Unknown => 500,
        }
    }

    /// The code's wire name.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::Conflict => "conflict",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A refused or failed request: `{"error": {"code": "...", "message": "..."}}` on the wire.
/// `message` is one human sentence saying what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// The stable class of the error, for scripts.
    pub code: ErrorCode,
    /// One sentence for humans.
    pub message: String,
}

impl ApiError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
        }
    }

    /// `invalid_argument`: the request names impossible values.
    pub fn invalid_argument(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::InvalidArgument, message)
    }

    /// `not_found`: the object does not exist.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::NotFound, message)
    }

    /// `conflict`: in use, exists already, or in the wrong state.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Conflict, message)
    }

    /// `unavailable`: the daemon is starting or stopping.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Unavailable, message)
    }

    /// `internal`: a failure inside the daemon.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Internal, message)
    }

    /// The HTTP status this error is sent with.
    pub fn http_status(&self) -> u16 {
        self.code.http_status()
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

/// The wire envelope of an error: `{"error": {...}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error itself.
    pub error: ApiError,
}
