//! Sockets for the checkers: bind (optional) and connect within a time
//! limit, without `unsafe` (rustix for the socket calls, std for the rest).

use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketFlags, SocketType, ipproto, sockopt};

/// How a TCP connect ended when it did not succeed.
#[derive(Debug)]
pub enum ConnectError {
    /// No answer within the time limit.
    Timeout,
    /// Refused, unreachable, reset...: the server is down.
    Failed(io::Error),
    /// The socket could not be made or bound: the check could not run.
    Setup(io::Error),
}

fn family(addr: &SocketAddr) -> AddressFamily {
    match addr {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    }
}

/// A socket of `kind` for `dst`, bound to `bind` if given.
fn socket(dst: &SocketAddr, bind: Option<&SocketAddr>, kind: SocketType) -> io::Result<OwnedFd> {
    let proto = if kind == SocketType::STREAM {
        ipproto::TCP
    } else {
        ipproto::UDP
    };
    let fd = rustix::net::socket_with(family(dst), kind, SocketFlags::CLOEXEC, Some(proto))?;
    if let Some(b) = bind {
        rustix::net::bind(&fd, b)?;
    }
    Ok(fd)
}

/// Whether keepalived counts a connect error as "server down" rather than
/// "could not run the check" (its list in `socket_bind_connect`).
fn is_down_error(e: Errno) -> bool {
    [
        Errno::NETUNREACH,
        Errno::HOSTUNREACH,
        Errno::CONNREFUSED,
        Errno::HOSTDOWN,
        Errno::NETDOWN,
        Errno::CONNRESET,
        Errno::CONNABORTED,
        Errno::TIMEDOUT,
    ]
    .contains(&e)
}

/// Connects a TCP socket to `dst` within `timeout`. A blocking connect
/// waits at most SO_SNDTIMEO on Linux and then returns EINPROGRESS, which
/// gives a bounded connect with a bind first, without a poll loop.
pub fn tcp_connect(
    dst: SocketAddr,
    bind: Option<SocketAddr>,
    timeout: Duration,
) -> Result<TcpStream, ConnectError> {
    let setup = |e: Errno| ConnectError::Setup(e.into());
    let fd = socket(&dst, bind.as_ref(), SocketType::STREAM).map_err(ConnectError::Setup)?;
    // keepalived lingers 5 s on close so the port is freed after a proper
    // shutdown; only a hint for the kernel, so a failure is ignored.
    let _ = sockopt::set_socket_linger(&fd, Some(Duration::from_secs(5)));
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ConnectError::Timeout);
        }
        sockopt::set_socket_timeout(&fd, sockopt::Timeout::Send, Some(left)).map_err(setup)?;
        match rustix::net::connect(&fd, &dst) {
            Ok(()) | Err(Errno::ISCONN) => break,
            Err(Errno::INPROGRESS) => return Err(ConnectError::Timeout),
            // A signal cut the wait short; calling connect again waits on
            // the same attempt (EALREADY is returned only once it ends).
            Err(Errno::INTR) | Err(Errno::ALREADY) => continue,
            Err(e) if is_down_error(e) => return Err(ConnectError::Failed(e.into())),
            Err(e) => return Err(ConnectError::Setup(e.into())),
        }
    }
    sockopt::set_socket_timeout(&fd, sockopt::Timeout::Send, None).map_err(setup)?;
    Ok(TcpStream::from(fd))
}

/// A UDP socket bound (if asked) and connected to `dst`, so that an ICMP
/// port unreachable comes back as ECONNREFUSED on the next receive.
pub fn udp_connect(dst: SocketAddr, bind: Option<SocketAddr>) -> io::Result<UdpSocket> {
    let fd = socket(&dst, bind.as_ref(), SocketType::DGRAM)?;
    rustix::net::connect(&fd, &dst)?;
    Ok(UdpSocket::from(fd))
}
