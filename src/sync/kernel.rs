//! What a sync asks of the kernel, as one trait: the syncer's logic (reading,
//! ownership, planning, settling answers, healing) is written against it,
//! and its one implementation for real use drives the handle's sockets. The
//! ownership property test drives the same logic against a table in memory.

use std::borrow::Borrow;

use super::read;
use super::state::ObservedDest;
use super::wire::Writer;
use crate::batch::Write;
use crate::conntrack::{Conntrack, ConntrackError, DeleteReport, Filter};
use crate::model::{ServiceKey, VirtualServer};
use crate::{Error, Handle, Operation, Result};

/// The reads and writes of a sync.
pub(crate) trait Kernel {
    /// Every virtual server of the namespace (one dump), each handed to
    /// `each` as it is read, in the kernel's order; a multi-part dump can
    /// repeat one. About `expected` are expected (a hint for how to read
    /// them). On an error, the services handed on before it were read.
    fn services(&mut self, expected: usize, each: impl FnMut(VirtualServer)) -> Result<()>;

    /// Each service of `keys`, `None` where there is none.
    fn lookup(&mut self, keys: &[ServiceKey]) -> Result<Vec<Option<VirtualServer>>>;

    /// The real servers of each service of `keys`, handed to `each(index,
    /// result)`, using up to `sockets` sockets. `Err` when the reading
    /// itself failed: services not handed to `each` by then were not read.
    fn destinations(
        &mut self,
        keys: &[ServiceKey],
        sockets: usize,
        each: impl FnMut(usize, Result<Vec<ObservedDest>>),
    ) -> Result<()>;

    /// Sends `ops` in order and hands each answer to `on_result(index,
    /// result)`, in order. `Err` when the socket could not be opened
    /// ([`Operation::OpenSyncSocket`]: nothing was sent) or failed
    /// ([`Operation::SyncWrite`]: operations not answered by then have
    /// unknown outcomes).
    fn write(
        &mut self,
        ops: &[Write],
        one_by_one: bool,
        on_result: impl FnMut(usize, std::result::Result<(), Error>),
    ) -> std::result::Result<(), Error>;

    /// Deletes the conntrack entries `filters` select (one dump, pipelined
    /// deletes), in the namespace of the IPVS table.
    fn forget_flows(
        &mut self,
        filters: &[Filter],
    ) -> std::result::Result<DeleteReport, ConntrackError>;
}

/// The kernel behind a handle: its socket for reads, extra sockets for
/// parallel reads, and the syncer's write socket (each opened on first use).
pub(crate) struct HandleKernel<'a, H: Borrow<Handle>> {
    pub(crate) handle: &'a H,
    pub(crate) readers: &'a mut Vec<Handle>,
    pub(crate) writer: &'a mut Option<Box<Writer>>,
}

impl<H: Borrow<Handle>> Kernel for HandleKernel<'_, H> {
    fn services(&mut self, expected: usize, each: impl FnMut(VirtualServer)) -> Result<()> {
        read::services(self.handle.borrow(), expected, each)
    }

    fn lookup(&mut self, keys: &[ServiceKey]) -> Result<Vec<Option<VirtualServer>>> {
        read::lookup(self.handle.borrow(), keys)
    }

    fn destinations(
        &mut self,
        keys: &[ServiceKey],
        sockets: usize,
        mut each: impl FnMut(usize, Result<Vec<ObservedDest>>),
    ) -> Result<()> {
        let handle = self.handle.borrow();
        if sockets <= 1 {
            // Each service's real servers are handed on as they arrive,
            // while the kernel works on the next dumps.
            return read::destinations_each(handle, keys, each);
        }
        while self.readers.len() + 1 < sockets {
            self.readers.push(handle.open_sibling()?);
        }
        let mut handles: Vec<&Handle> = vec![handle];
        handles.extend(self.readers.iter().take(sockets - 1));
        for (index, d) in read::destinations(&handles, keys)?.into_iter().enumerate() {
            each(index, Ok(d));
        }
        Ok(())
    }

    fn write(
        &mut self,
        ops: &[Write],
        one_by_one: bool,
        on_result: impl FnMut(usize, std::result::Result<(), Error>),
    ) -> std::result::Result<(), Error> {
        // Taken out for the send and put back only when every request was
        // answered: a socket that failed, timed out or unwound from a panic
        // mid-batch may still get answers, and is closed instead (the next
        // write opens a fresh one).
        let mut writer = match self.writer.take() {
            Some(w) => w,
            None => Writer::open(self.handle.borrow())
                .map(Box::new)
                .map_err(|e| Error::io(Operation::OpenSyncSocket, e))?,
        };
        let sent = writer
            .send(ops, one_by_one, on_result)
            .map_err(|e| Error::io(Operation::SyncWrite, e))?;
        if sent.answered {
            *self.writer = Some(writer);
        }
        Ok(())
    }

    fn forget_flows(
        &mut self,
        filters: &[Filter],
    ) -> std::result::Result<DeleteReport, ConntrackError> {
        let handle = self.handle.borrow();
        Conntrack::new()
            .netns(handle.netns().clone())
            .timeout(handle.timeout())
            .delete_all(filters)
    }
}
