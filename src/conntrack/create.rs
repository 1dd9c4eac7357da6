//! Making entries (`IPCTNL_MSG_CT_NEW`, as `conntrack -I`), pipelined: for
//! tests and benchmarks that need a table of a given size quickly. Only
//! through `ipvsctl::unstable`.

use super::io::{Ctnl, kernel_error};
use super::{Conntrack, ConntrackError};
use crate::codec::conntrack::{CtRequest, NewEntry};
use crate::netlink::{Failure, Kind};

const CREATE: &str = "create";

/// Creates `entries` in `ct`'s namespace, many per datagram; returns how
/// many the kernel created. The first entry refused is the error.
pub(crate) fn create(ct: &Conntrack, entries: &[NewEntry]) -> Result<usize, ConntrackError> {
    let mut ctnl = Ctnl::open(&ct.netns, ct.timeout)?;
    let mut created = 0;
    let mut first_error = None;
    ctnl.run(
        entries.iter().map(|e| (CtRequest::New(e), Kind::Quiet, ())),
        |_, _| Ok(()),
        |i, (), reply| match reply.result {
            Ok(()) => created += 1,
            Err(f) if first_error.is_none() => first_error = Some((i, f)),
            Err(_) => {}
        },
    )
    .map_err(|source| ConntrackError::Io {
        request: CREATE,
        source,
    })?;
    match first_error {
        None => Ok(created),
        Some((_, Failure::Kernel(e))) => Err(kernel_error(CREATE, e.errno())),
        Some((i, f)) => Err(ConntrackError::Io {
            request: CREATE,
            source: std::io::Error::other(format!("entry {i}: {f:?}")),
        }),
    }
}
