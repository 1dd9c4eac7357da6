//! `TCP_CHECK`: the server is up when a TCP connection opens within
//! `connect_timeout`.

use super::Attempt;
use super::net::{ConnectError, tcp_connect};
use crate::config::model::CheckerConf;

/// One `TCP_CHECK` attempt against `conf.connect`, bound to `conf.bind`.
pub fn attempt(conf: &CheckerConf) -> Attempt {
    match tcp_connect(conf.connect, conf.bind, conf.connect_timeout) {
        // Dropping the stream closes it: the check only needs the handshake.
        Ok(_stream) => Attempt::Up { weight: None },
        Err(ConnectError::Timeout) => Attempt::down("TCP connection timeout"),
        Err(ConnectError::Failed(e)) => Attempt::down(format!("TCP connection failed: {e}")),
        Err(ConnectError::Setup(e)) => Attempt::Error {
            reason: format!("TCP socket bind failed: {e}"),
        },
    }
}
