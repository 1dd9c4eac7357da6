//! Real-server operations.

use std::net::SocketAddr;

use super::{Error, Handle, Result, Target, Via};
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
        self.call(msg, Kind::Ack, dest_target(service, rs.addr))?;
        self.confirm_tunnel(IpvsCmd::NewDest, service, rs)
    }

    /// Changes a real server's weight, forwarding method or thresholds.
    pub fn update_destination(&self, service: &ServiceKey, rs: &RealServer) -> Result<()> {
        let msg = request::set_dest(service, rs)?;
        self.call(msg, Kind::Ack, dest_target(service, rs.addr))?;
        self.confirm_tunnel(IpvsCmd::SetDest, service, rs)
    }

    /// Removes a real server from a virtual server.
    pub fn delete_destination(&self, service: &ServiceKey, server: SocketAddr) -> Result<()> {
        let msg = request::del_dest(service, server)?;
        self.call(msg, Kind::Ack, dest_target(service, server))
            .map(drop)
    }

    /// Lists a virtual server's real servers (one dump).
    ///
    /// The kernel answers an empty dump both for a service without real
    /// servers and for a service that does not exist; when the dump is empty
    /// this asks for the service too, so a missing service is
    /// [`Error::ServiceNotFound`], never an empty list.
    pub fn list_destinations(&self, service: &ServiceKey) -> Result<Vec<DestinationSnapshot>> {
        let msg = request::dump_dests(service)?;
        let family = service.family();
        let data = self
            .call_decoded(msg, Kind::Dump, Target::Service(*service), |body| {
                reply::destination_from_body(body, family)
            })?
            .data;
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
    /// (figures in `docs/performance.md` in the repository). The helper
    /// never waits for `each`: answers not yet handed over are queued, so a
    /// slow `each` holds at most the whole answer in memory. `each` may use
    /// the handle, but a call on the handle's main socket waits until every
    /// dump is read.
    ///
    /// Returns early only when the socket itself fails; then the services not
    /// yet reported have no result.
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

pub(crate) fn dest_target(service: &ServiceKey, addr: SocketAddr) -> Target {
    Target::Dest {
        key: *service,
        addr,
    }
}
