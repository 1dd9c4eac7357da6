//! The sync's write path: plan operations written straight into the send
//! buffer (no intermediate message values, no allocation per operation) and
//! sent pipelined on the syncer's own socket, every ACK matched to its
//! operation by sequence number.
//!
//! The bytes are exactly those of
//! `frame::encode_request(op.encode()?, ..)` (a property test checks it);
//! this path exists because under emulation building the generic message
//! values costs as much as the kernel's own work.

use std::io;
use std::net::{IpAddr, SocketAddr};

use crate::codec::IpvsCmd;
use crate::codec::consts::{FAMILY_VERSION, cmd_attr, dest_attr, svc_attr};
use crate::codec::frame::{self, FrameBody, NLM_F_ACK, NLM_F_REQUEST, NlError};
use crate::handle::{Target, describe};
use crate::model::{ForwardMethod, RealServer, ServiceFlags, ServiceKey, VirtualServer};
use crate::netlink::GenlSocket;
use crate::{Error, Op};

fn pad(out: &mut Vec<u8>) {
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

fn put(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    pad(out);
}

fn put_cstr(out: &mut Vec<u8>, kind: u16, s: &str) {
    out.extend_from_slice(&((5 + s.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    pad(out);
}

fn begin(out: &mut Vec<u8>, kind: u16) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&kind.to_ne_bytes());
    at
}

fn end(out: &mut [u8], at: usize) {
    let len = (out.len() - at) as u16;
    out[at..at + 2].copy_from_slice(&len.to_ne_bytes());
}

fn addr16(ip: IpAddr) -> [u8; 16] {
    let mut b = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => b[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => b = v6.octets(),
    }
    b
}

fn service_key(out: &mut Vec<u8>, key: &ServiceKey) {
    put(out, svc_attr::AF, &key.family().to_raw().to_ne_bytes());
    match key {
        ServiceKey::FwMark { mark, .. } => put(out, svc_attr::FWMARK, &mark.to_ne_bytes()),
        ServiceKey::Addr { protocol, addr } => {
            put(out, svc_attr::PROTOCOL, &protocol.to_raw().to_ne_bytes());
            put(out, svc_attr::ADDR, &addr16(addr.ip()));
            put(out, svc_attr::PORT, &addr.port().to_be_bytes());
        }
    }
}

fn service(out: &mut Vec<u8>, vs: &VirtualServer) {
    service_key(out, &vs.key);
    put_cstr(out, svc_attr::SCHED_NAME, vs.scheduler.name());
    if let Some(pe) = &vs.persistence_engine {
        put_cstr(out, svc_attr::PE_NAME, pe.name());
    }
    let mut flags = [0u8; 8];
    flags[..4].copy_from_slice(&(vs.flags.bits() & !ServiceFlags::KERNEL_HASHED).to_ne_bytes());
    flags[4..].copy_from_slice(&(!ServiceFlags::KERNEL_HASHED).to_ne_bytes());
    put(out, svc_attr::FLAGS, &flags);
    put(out, svc_attr::TIMEOUT, &vs.timeout.to_ne_bytes());
    put(out, svc_attr::NETMASK, &vs.netmask.to_wire());
}

fn dest_key(out: &mut Vec<u8>, addr: &SocketAddr) {
    put(out, dest_attr::ADDR, &addr16(addr.ip()));
    put(out, dest_attr::PORT, &addr.port().to_be_bytes());
}

fn dest(out: &mut Vec<u8>, rs: &RealServer) {
    dest_key(out, &rs.addr);
    put(out, dest_attr::FWD_METHOD, &rs.forward.raw().to_ne_bytes());
    put(out, dest_attr::WEIGHT, &rs.weight.to_ne_bytes());
    put(out, dest_attr::U_THRESH, &rs.upper_threshold.to_ne_bytes());
    put(out, dest_attr::L_THRESH, &rs.lower_threshold.to_ne_bytes());
    put(
        out,
        dest_attr::ADDR_FAMILY,
        &rs.family().to_raw().to_ne_bytes(),
    );
    if let ForwardMethod::Tunnel(t) = rs.forward {
        put(out, dest_attr::TUN_TYPE, &[t.encap.raw_type()]);
        put(out, dest_attr::TUN_PORT, &t.encap.port().to_be_bytes());
        put(out, dest_attr::TUN_FLAGS, &t.flags.bits().to_ne_bytes());
    }
}

/// The command of an operation.
pub(crate) fn cmd(op: &Op) -> IpvsCmd {
    match op {
        Op::AddService(_) => IpvsCmd::NewService,
        Op::UpdateService(_) => IpvsCmd::SetService,
        Op::DeleteService(_) => IpvsCmd::DelService,
        Op::AddDestination(..) => IpvsCmd::NewDest,
        Op::UpdateDestination(..) => IpvsCmd::SetDest,
        Op::DeleteDestination(..) => IpvsCmd::DelDest,
    }
}

/// Appends one request for `op` (with `NLM_F_ACK`). The operation must be
/// valid (plan operations are: desired values are validated on insertion,
/// deletes name objects the kernel reported).
pub(crate) fn encode(out: &mut Vec<u8>, op: &Op, family: u16, seq: u32) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&family.to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[cmd(op).to_raw(), FAMILY_VERSION, 0, 0]);
    let svc = begin(out, cmd_attr::SERVICE);
    match op {
        Op::AddService(vs) | Op::UpdateService(vs) => {
            service(out, vs);
            end(out, svc);
        }
        Op::DeleteService(key) => {
            service_key(out, key);
            end(out, svc);
        }
        Op::AddDestination(key, rs) | Op::UpdateDestination(key, rs) => {
            service_key(out, key);
            end(out, svc);
            let d = begin(out, cmd_attr::DEST);
            dest(out, rs);
            end(out, d);
        }
        Op::DeleteDestination(key, addr) => {
            service_key(out, key);
            end(out, svc);
            let d = begin(out, cmd_attr::DEST);
            dest_key(out, addr);
            put(
                out,
                dest_attr::ADDR_FAMILY,
                &crate::model::AddressFamily::of(&addr.ip())
                    .to_raw()
                    .to_ne_bytes(),
            );
            end(out, d);
        }
    }
    let len = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

/// What failed requests are described with.
pub(crate) fn target(op: &Op) -> Target {
    match op {
        Op::AddService(vs) | Op::UpdateService(vs) => Target::NewService {
            key: vs.key,
            scheduler: vs.scheduler.name().to_owned(),
            engine: vs.persistence_engine.as_ref().map(|p| p.name().to_owned()),
        },
        Op::DeleteService(key) => Target::Service(*key),
        Op::AddDestination(key, rs) | Op::UpdateDestination(key, rs) => Target::Dest {
            key: *key,
            addr: rs.addr,
        },
        Op::DeleteDestination(key, addr) => Target::Dest {
            key: *key,
            addr: *addr,
        },
    }
}

/// The syncer's write socket.
#[derive(Debug)]
pub(crate) struct Writer {
    sock: GenlSocket,
    family: u16,
    seq: u32,
    buf: Vec<u8>,
    answers: Vec<Option<Result<(), NlError>>>,
}

/// `MSG_DONTWAIT`.
const MSG_DONTWAIT: i32 = 0x40;
/// `ENOBUFS`.
const ENOBUFS: i32 = 105;

impl Writer {
    pub(crate) fn open(handle: &crate::Handle) -> io::Result<Writer> {
        Ok(Writer {
            sock: GenlSocket::open(handle.netns())?,
            family: handle.family_id(),
            seq: 0,
            buf: Vec::with_capacity(64 << 10),
            answers: Vec::new(),
        })
    }

    /// Sends `ops` in order, as many per datagram as the socket's buffers
    /// allow (or one per round trip), and calls `on_result(index, result)`
    /// exactly once per operation, in order. Returns the number of requests
    /// sent; `Err` when the socket itself failed (operations not reported by
    /// then have unknown outcomes).
    pub(crate) fn send(
        &mut self,
        ops: &[Op],
        one_by_one: bool,
        mut on_result: impl FnMut(usize, Result<(), Error>),
    ) -> io::Result<usize> {
        let max_batch = if one_by_one { 1 } else { self.sock.max_batch() };
        let max_send = self.sock.max_send();
        let mut next = 0;
        while next < ops.len() {
            self.buf.clear();
            let first = next;
            let first_seq = self.seq.wrapping_add(1);
            while next < ops.len() && next - first < max_batch {
                let before = self.buf.len();
                encode(
                    &mut self.buf,
                    &ops[next],
                    self.family,
                    self.seq.wrapping_add(1),
                );
                if self.buf.len() > max_send && next > first {
                    self.buf.truncate(before);
                    break;
                }
                self.seq = self.seq.wrapping_add(1);
                next += 1;
            }
            let count = next - first;
            self.sock.send(&self.buf)?;
            self.answers.clear();
            self.answers.resize_with(count, || None);
            self.collect(first_seq, count)?;
            for (i, answer) in self.answers.drain(..).enumerate() {
                let index = first + i;
                let op = &ops[index];
                let r = match answer {
                    Some(Ok(())) => Ok(()),
                    Some(Err(e)) => {
                        let t = target(op);
                        Err(Error::from_kernel(describe(cmd(op), &t), &t, e))
                    }
                    None => Err(Error::Lost {
                        op: describe(cmd(op), &target(op)),
                    }),
                };
                on_result(index, r);
            }
        }
        Ok(ops.len())
    }

    /// Receives until every request of a datagram is answered, or, after an
    /// overrun, until the queue is drained.
    fn collect(&mut self, first_seq: u32, count: usize) -> io::Result<()> {
        let mut open = count;
        let mut overrun = false;
        let port = self.sock.port();
        while open > 0 {
            let datagram = if overrun {
                match self.sock.recv_with_flags(MSG_DONTWAIT) {
                    Ok(d) => d,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            } else {
                match self.sock.recv() {
                    Ok(d) => d,
                    Err(e) if e.raw_os_error() == Some(ENOBUFS) => {
                        // Answers were dropped; the kernel has answered every
                        // request already (it does so before send returns):
                        // drain what is queued, the rest is lost.
                        overrun = true;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            };
            for f in frame::frames(datagram) {
                let f = f.map_err(io::Error::other)?;
                if f.header.port != 0 && f.header.port != port {
                    continue;
                }
                let FrameBody::Error(e) = f.body else {
                    continue;
                };
                let slot = f.header.seq.wrapping_sub(first_seq) as usize;
                let Some(a) = self.answers.get_mut(slot) else {
                    continue; // a stale answer
                };
                if a.is_none() {
                    *a = Some(if e.is_ack() { Ok(()) } else { Err(e) });
                    open -= 1;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AddressFamily, TunnelEncap};
    use crate::model::{Netmask, PersistenceEngine, Protocol, Scheduler, Tunnel, TunnelFlags};

    fn check(op: Op) {
        let mut fast = Vec::new();
        encode(&mut fast, &op, 0x24, 77);
        let mut reference = Vec::new();
        frame::encode_request(&mut reference, &op.encode().unwrap(), 0x24, 77, NLM_F_ACK).unwrap();
        assert_eq!(fast, reference, "{op:?}");
        assert!(fast.len() >= frame::NLMSG_HDRLEN);
    }

    #[test]
    fn bytes_match_the_codec() {
        let keys = [
            ServiceKey::tcp("10.96.0.1:80".parse().unwrap()),
            ServiceKey::udp("[2001:db8::1]:53".parse().unwrap()),
            ServiceKey::Addr {
                protocol: Protocol::Sctp,
                addr: "10.0.0.1:3868".parse().unwrap(),
            },
            ServiceKey::fwmark(7, AddressFamily::Inet6),
        ];
        for key in keys {
            let mut vs = VirtualServer::new(key)
                .with_scheduler(Scheduler::from_name("mh"))
                .with_persistence(300)
                .with_netmask(Netmask::from_prefix(key.family(), 24));
            check(Op::AddService(vs.clone()));
            vs.persistence_engine = Some(PersistenceEngine::sip());
            vs.scheduler = Scheduler::from_name("abcdefghijklmno");
            check(Op::UpdateService(vs));
            check(Op::DeleteService(key));
            let other: SocketAddr = match key.family() {
                AddressFamily::Inet => "[2001:db8::9]:0".parse().unwrap(),
                AddressFamily::Inet6 => "10.1.2.3:0".parse().unwrap(),
            };
            let same: SocketAddr = match key.family() {
                AddressFamily::Inet => "10.244.0.1:8080".parse().unwrap(),
                AddressFamily::Inet6 => "[2001:db8::2]:8080".parse().unwrap(),
            };
            for rs in [
                RealServer::new(same).with_weight(5).with_thresholds(10, 3),
                RealServer::new(same).with_forward(ForwardMethod::Masquerade),
                RealServer::new(other).with_forward(ForwardMethod::Tunnel(Tunnel {
                    encap: TunnelEncap::Gue { port: 6080 },
                    flags: TunnelFlags::CSUM,
                })),
                RealServer::new(other).with_forward(ForwardMethod::Tunnel(Tunnel::IPIP)),
            ] {
                check(Op::AddDestination(key, rs));
                check(Op::UpdateDestination(key, rs));
                check(Op::DeleteDestination(key, rs.addr));
            }
        }
    }
}
