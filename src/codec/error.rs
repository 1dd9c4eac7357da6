//! The codec's one error type.

use std::fmt;

/// A reply (or request body) that could not be decoded: truncated, with a
/// malformed attribute, or with a value of the wrong size or meaning. The
/// message names what was being read.
///
/// This crate's own type: its [`Display`](fmt::Display) text is for people,
/// and it does not depend on any netlink crate's error type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    message: String,
}

impl DecodeError {
    /// What could not be decoded, and why.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<String> for DecodeError {
    fn from(message: String) -> Self {
        DecodeError { message }
    }
}

impl From<&str> for DecodeError {
    fn from(message: &str) -> Self {
        DecodeError {
            message: message.to_owned(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecodeError {}
