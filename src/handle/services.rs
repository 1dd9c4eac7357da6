//! Virtual-server operations.

use super::overlap::OVERLAP_SERVICES_FROM;
use super::{Answer, Error, Handle, Result, Target, Via};
use crate::codec::{reply, request};
use crate::model::{ServiceKey, ServiceSnapshot, VirtualServer};
use crate::netlink::Kind;

pub(crate) fn new_service_target(vs: &VirtualServer) -> Target {
    Target::NewService {
        key: vs.key,
        scheduler: vs.scheduler.name().to_owned(),
        engine: vs.persistence_engine.as_ref().map(|p| p.name().to_owned()),
    }
}

impl Handle {
    /// Adds a virtual server.
    ///
    /// ```no_run
    /// use ipvsctl::model::{Scheduler, ServiceKey, VirtualServer};
    /// let ipvs = ipvsctl::Handle::new()?;
    /// let vs = VirtualServer::new(ServiceKey::tcp("10.96.0.10:53".parse().unwrap()))
    ///     .with_scheduler(Scheduler::RoundRobin);
    /// ipvs.add_service(&vs)?;
    /// assert_eq!(ipvs.get_service(&vs.key)?.service, vs);
    /// # Ok::<(), ipvsctl::Error>(())
    /// ```
    pub fn add_service(&self, vs: &VirtualServer) -> Result<()> {
        let msg = request::new_service(vs)?;
        self.ack(msg, new_service_target(vs))
    }

    /// Changes a virtual server's configuration (scheduler, flags, timeout,
    /// netmask, persistence engine). The key selects the service.
    pub fn update_service(&self, vs: &VirtualServer) -> Result<()> {
        let msg = request::set_service(vs)?;
        self.ack(msg, new_service_target(vs))
    }

    /// Deletes a virtual server and its real servers.
    pub fn delete_service(&self, key: &ServiceKey) -> Result<()> {
        let msg = request::del_service(key)?;
        self.ack(msg, Target::Service(*key))
    }

    /// Reads one virtual server; [`Error::ServiceNotFound`] if it does not
    /// exist.
    pub fn get_service(&self, key: &ServiceKey) -> Result<ServiceSnapshot> {
        self.get_service_via(Via::Main, key)
    }

    /// [`Handle::get_service`] on a chosen socket.
    pub(crate) fn get_service_via(&self, via: Via, key: &ServiceKey) -> Result<ServiceSnapshot> {
        let msg = request::get_service(key)?;
        let answer = self.call(
            via,
            msg,
            Kind::Ack,
            Target::Service(*key),
            reply::service_from_body,
        )?;
        answer
            .data
            .into_iter()
            .next()
            .ok_or_else(|| Error::ServiceNotFound {
                op: super::describe(crate::codec::IpvsCmd::GetService, &Target::Service(*key)),
                key: *key,
            })
    }

    /// Lists every virtual server of the namespace (one dump).
    ///
    /// A caveat that comes from the kernel, not from this crate: the kernel
    /// answers a dump in datagrams of at most 32 KiB (about 200 services)
    /// and resumes each one by position in its service table, which is shared
    /// by all network namespaces. A service added or deleted in *any*
    /// namespace between two datagrams shifts the positions, so a large dump
    /// taken while other namespaces change can miss or repeat services
    /// (measured on 6.1: a third to a half of 800-service dumps taken while
    /// another namespace added and deleted services in a loop; repeating the
    /// dump does not help, because the same positions sit at the page
    /// boundaries each time). Repeats are removed here; a missing service can
    /// only be caught by asking for it ([`Handle::get_service`] is exact).
    /// Bulk sync repairs what a dump missed on its next pass. An answer that
    /// fits one datagram is one pass of the kernel and is exact.
    pub fn list_services(&self) -> Result<Vec<ServiceSnapshot>> {
        let answer = self.dump_services()?;
        let mut list = answer.data;
        if answer.datagrams > 1 {
            let mut seen = std::collections::HashSet::with_capacity(list.len());
            list.retain(|s| seen.insert(s.service.key));
        }
        Ok(list)
    }

    /// Every virtual server of the namespace (one dump), each handed to
    /// `each` in the kernel's order, repeats of a multi-part dump included
    /// (see [`Handle::list_services`]). From [`OVERLAP_SERVICES_FROM`]
    /// `expected` services on, a helper thread reads the dump while this one
    /// decodes it and runs `each`; on an error, the services handed on
    /// before it were read.
    ///
    /// Only the services' settings are decoded, not their statistics.
    pub(crate) fn each_service(
        &self,
        expected: usize,
        each: impl FnMut(VirtualServer),
    ) -> Result<()> {
        let (msg, target) = (request::dump_services(), Target::Global);
        let decode = reply::virtual_server_from_body;
        if expected < OVERLAP_SERVICES_FROM {
            let answer = self.call(Via::Tables, msg, Kind::Dump, target, decode)?;
            answer.data.into_iter().for_each(each);
            return Ok(());
        }
        self.dump_each(Via::Tables, msg, target, decode, each)
    }

    /// The service dump on this thread, each message decoded as it arrives,
    /// straight into a snapshot.
    fn dump_services(&self) -> Result<Answer<ServiceSnapshot>> {
        self.call(
            Via::Tables,
            request::dump_services(),
            Kind::Dump,
            Target::Global,
            reply::service_from_body,
        )
    }
}
