//! Real-server operations.

use std::net::SocketAddr;

use super::{Answer, Error, Handle, Result, Target, Via};
use crate::codec::{IpvsCmd, reply, request};
use crate::model::{
    AddressFamily, DestinationSnapshot, ForwardMethod, RealServer, ServiceKey, Tunnel,
};
use crate::netlink::Kind;

impl Handle {
    /// Adds a real server to a virtual server.
    ///
    /// Tunnel settings beyond plain IP-in-IP are read back after the add: a
    /// kernel older than 5.2 ignores them silently, and that is reported as
    /// [`Error::Unsupported`] instead of being lost.
    ///
    /// ```no_run
    /// use ipvsctl::model::{ForwardMethod, RealServer, ServiceKey};
    /// let ipvs = ipvsctl::Handle::new()?;
    /// let key = ServiceKey::tcp("10.96.0.10:80".parse().unwrap());
    /// let rs = RealServer::new("10.244.1.7:8080".parse().unwrap())
    ///     .with_forward(ForwardMethod::Masquerade);
    /// ipvs.add_destination(&key, &rs)?;
    /// # Ok::<(), ipvsctl::Error>(())
    /// ```
    pub fn add_destination(&self, service: &ServiceKey, rs: &RealServer) -> Result<()> {
        let msg = request::new_dest(service, rs)?;
        self.ack(msg, dest_target(service, rs.addr))?;
        self.confirm_tunnel(IpvsCmd::NewDest, service, rs)
    }

    /// Changes a real server's weight, forwarding method or thresholds.
    pub fn update_destination(&self, service: &ServiceKey, rs: &RealServer) -> Result<()> {
        let msg = request::set_dest(service, rs)?;
        self.ack(msg, dest_target(service, rs.addr))?;
        self.confirm_tunnel(IpvsCmd::SetDest, service, rs)
    }

    /// Removes a real server from a virtual server.
    pub fn delete_destination(&self, service: &ServiceKey, server: SocketAddr) -> Result<()> {
        let msg = request::del_dest(service, server)?;
        self.ack(msg, dest_target(service, server))
    }

    /// Lists a virtual server's real servers (one dump), each once.
    ///
    /// The kernel answers an empty dump both for a service without real
    /// servers and for a service that does not exist; when the dump is empty
    /// this asks for the service too, so a missing service is
    /// [`Error::ServiceNotFound`], never an empty list.
    ///
    /// A list too long for one page-sized datagram is dumped in several
    /// passes that the kernel resumes by position, so a real server added or
    /// deleted in between would make it repeat or miss one. Such a list is
    /// read again on the handle's large-datagram socket until one read comes
    /// in a single pass or two reads in a row agree (each real server once);
    /// a table that keeps changing is [`Error::Inconsistent`] after four
    /// reads.
    pub fn list_destinations(&self, service: &ServiceKey) -> Result<Vec<DestinationSnapshot>> {
        let family = service.family();
        let read = |via: Via| -> Result<Answer<DestinationSnapshot>> {
            let msg = request::dump_dests(service)?;
            self.call(via, msg, Kind::Dump, Target::Service(*service), |body| {
                reply::destination_from_body(body, family)
            })
        };
        let first = read(Via::Main)?;
        let data = settle(service, first, || read(Via::Tables), |d| d.server.addr)?;
        if data.is_empty() {
            self.get_service(service)?;
        }
        Ok(data)
    }

    /// Lists the real servers of each service in `services` (one dump per
    /// service) and calls `each(index, result)` once per service, in order,
    /// on this thread; each result is what [`Handle::list_destinations`]
    /// would return for that service.
    ///
    /// Above a few dozen services a helper thread talks to the kernel while
    /// this thread decodes the answers and runs `each`, so the library's
    /// work and the caller's hide behind the kernel's, and a large read
    /// takes less time than a loop over [`Handle::list_destinations`]
    /// (figures in `docs/performance.md` in the repository).
    ///
    /// `each` may use the handle for anything, another listing included: no
    /// socket is held while it runs. The helper reads ahead of `each` by at
    /// most about 270 services (or half a megabyte of answers); then it
    /// stops, lets go of the socket and waits for `each` to catch up, so a
    /// slow `each` costs no more memory than a fast one. While it reads it
    /// lets go of the socket between two dumps whenever another call waits
    /// for it, so a call from `each` (or from another thread) waits for one
    /// dump at most, not for the whole listing.
    ///
    /// Lists that take several passes are checked as in
    /// [`Handle::list_destinations`], on the handle's other socket.
    ///
    /// Returns early only when the socket itself fails or a wait for it
    /// runs out ([`Error::Timeout`]); then the services not yet reported
    /// have no result. A panic in `each` ends the listing (the helper stops
    /// at its next dump) and leaves the handle usable.
    ///
    /// ```no_run
    /// let ipvs = ipvsctl::Handle::new()?;
    /// let services: Vec<_> = ipvs.list_services()?.iter().map(|s| s.service.key).collect();
    /// ipvs.list_destinations_each(&services, |i, dests| match dests {
    ///     Ok(dests) => println!("{}: {} real servers", services[i], dests.len()),
    ///     Err(e) => eprintln!("{e}"),
    /// })?;
    /// # Ok::<(), ipvsctl::Error>(())
    /// ```
    pub fn list_destinations_each(
        &self,
        services: &[ServiceKey],
        mut each: impl FnMut(usize, Result<Vec<DestinationSnapshot>>),
    ) -> Result<()> {
        let family = |index: usize| {
            services
                .get(index)
                .map_or(AddressFamily::Inet, ServiceKey::family)
        };
        self.dump_dests_each(
            services,
            |index, body| reply::destination_from_body(body, family(index)),
            |d| d.server.addr,
            |index, r| {
                // An empty dump is also the answer for a missing service. The
                // main socket may be busy with the dumps: ask on the other.
                let r = match (r, services.get(index)) {
                    (Ok(d), Some(key)) if d.is_empty() => {
                        self.get_service_via(Via::Tables, key).map(|_| d)
                    }
                    (r, _) => r,
                };
                each(index, r);
            },
        )
    }

    /// Reads back a tunnelled real server whose settings an old kernel could
    /// have dropped.
    fn confirm_tunnel(&self, cmd: IpvsCmd, service: &ServiceKey, rs: &RealServer) -> Result<()> {
        let ForwardMethod::Tunnel(wanted) = rs.forward else {
            return Ok(());
        };
        if wanted == Tunnel::IPIP {
            return Ok(());
        }
        let found = self
            .list_destinations(service)?
            .into_iter()
            .find(|d| d.server.addr == rs.addr);
        match found.map(|d| d.server.forward) {
            Some(ForwardMethod::Tunnel(got)) if got == wanted => Ok(()),
            other => Err(Error::Unsupported {
                op: super::describe(cmd, &dest_target(service, rs.addr)),
                what: format!(
                    "tunnel settings {wanted:?} (read back: {})",
                    other.map_or_else(|| "no such real server".to_owned(), |f| format!("{f:?}"))
                ),
            }),
        }
    }
}

/// How many times a real-server list dumped in several passes is read
/// before the table counts as changing too fast to list
/// ([`Error::Inconsistent`]).
const MAX_READS: usize = 4;

/// The real servers of one dump, checked to be a list the table really had.
///
/// Each pass of a real-server dump runs under the kernel's IPVS mutex and
/// sees a consistent table, but the next pass resumes by position, so a real
/// server added between passes shifts one into the part already sent (it is
/// listed twice) and one deleted shifts one out of it (it is missed). An
/// answer in one datagram came from one pass and is returned as it is;
/// otherwise the list is read again with `again` until a read comes in one
/// datagram or two reads in a row list the same real servers, each once.
pub(crate) fn settle<D>(
    service: &ServiceKey,
    first: Answer<D>,
    mut again: impl FnMut() -> Result<Answer<D>>,
    addr: impl Fn(&D) -> SocketAddr,
) -> Result<Vec<D>> {
    if first.datagrams <= 1 {
        return Ok(first.data);
    }
    let mut previous = members(&first.data, &addr);
    for _ in 1..MAX_READS {
        let next = again()?;
        let current = members(&next.data, &addr);
        if current.is_some() && (next.datagrams <= 1 || current == previous) {
            return Ok(next.data);
        }
        previous = current;
    }
    Err(Error::Inconsistent {
        op: super::describe(IpvsCmd::GetDest, &Target::Service(*service)),
        reads: MAX_READS,
    })
}

/// The sorted addresses of a list, or `None` when one is listed twice.
fn members<D>(data: &[D], addr: impl Fn(&D) -> SocketAddr) -> Option<Vec<SocketAddr>> {
    let mut addrs: Vec<SocketAddr> = data.iter().map(addr).collect();
    addrs.sort_unstable();
    let listed = addrs.len();
    addrs.dedup();
    (addrs.len() == listed).then_some(addrs)
}

pub(crate) fn dest_target(service: &ServiceKey, addr: SocketAddr) -> Target {
    Target::Dest {
        key: *service,
        addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 244, 0, 1], port))
    }

    fn answer(ports: &[u16], datagrams: usize) -> Answer<SocketAddr> {
        Answer {
            data: ports.iter().map(|p| sa(*p)).collect(),
            datagrams,
        }
    }

    /// Runs `settle` on `first`, with `more` as the answers to the re-reads;
    /// returns the ports listed (or the number of reads when inconsistent)
    /// and how many re-reads were made.
    fn run(
        first: Answer<SocketAddr>,
        more: Vec<Answer<SocketAddr>>,
    ) -> (std::result::Result<Vec<u16>, usize>, usize) {
        let key = ServiceKey::tcp("10.96.0.1:80".parse().unwrap());
        let mut more = more.into_iter();
        let mut asked = 0;
        let got = settle(
            &key,
            first,
            || {
                asked += 1;
                Ok(more.next().expect("asked once too often"))
            },
            |a| *a,
        );
        let got = match got {
            Ok(v) => Ok(v.iter().map(SocketAddr::port).collect()),
            Err(Error::Inconsistent { reads, .. }) => Err(reads),
            Err(e) => panic!("{e}"),
        };
        (got, asked)
    }

    #[test]
    fn one_pass_is_trusted() {
        assert_eq!(run(answer(&[1, 2, 3], 1), vec![]), (Ok(vec![1, 2, 3]), 0));
        assert_eq!(run(answer(&[], 0), vec![]), (Ok(vec![]), 0));
    }

    #[test]
    fn several_passes_are_read_again() {
        // The re-read comes in one pass: it is the answer.
        let (got, asked) = run(answer(&[1, 2, 2], 3), vec![answer(&[3, 1, 2], 1)]);
        assert_eq!((got, asked), (Ok(vec![3, 1, 2]), 1));
        // Two multi-pass reads that agree (in any order).
        let (got, asked) = run(answer(&[1, 2, 3], 2), vec![answer(&[2, 3, 1], 2)]);
        assert_eq!((got, asked), (Ok(vec![2, 3, 1]), 1));
        // A skip shows as a disagreement; the next two reads agree.
        let (got, asked) = run(
            answer(&[1, 3], 2),
            vec![answer(&[1, 2, 3], 2), answer(&[1, 2, 3], 2)],
        );
        assert_eq!((got, asked), (Ok(vec![1, 2, 3]), 2));
        // Two reads with the same repeat never count as agreeing.
        let (got, asked) = run(
            answer(&[1, 1, 2], 2),
            vec![
                answer(&[1, 1, 2], 2),
                answer(&[1, 2], 2),
                answer(&[2, 3], 2),
            ],
        );
        assert_eq!((got, asked), (Err(4), 3));
    }

    #[test]
    fn a_table_that_keeps_changing_is_inconsistent() {
        let reads = vec![answer(&[2, 3], 2), answer(&[1, 3], 2), answer(&[1, 2], 2)];
        assert_eq!(run(answer(&[1, 2, 3], 2), reads), (Err(MAX_READS), 3));
    }
}
