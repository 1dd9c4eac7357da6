//! What a converge did.

use ipnetwork::IpNetwork;

use super::error::AddressFailure;

/// What [`VipDevice::converge`](super::VipDevice::converge) found and
/// changed.
#[derive(Debug)]
#[non_exhaustive]
pub struct VipReport {
    /// The device name.
    pub device: String,
    /// Its interface index.
    pub index: u32,
    /// The device did not exist and was created.
    pub created: bool,
    /// The device existed, was down, and was brought up.
    pub brought_up: bool,
    /// Addresses added (host prefixes).
    pub added: Vec<IpNetwork>,
    /// Addresses removed: not wanted, or wanted at another prefix (then
    /// added again at host prefix).
    pub removed: Vec<IpNetwork>,
    /// Wanted addresses the device already held.
    pub unchanged: usize,
    /// Changes the kernel refused; the rest went through.
    pub failed: Vec<AddressFailure>,
}

impl VipReport {
    /// Whether every change went through.
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty()
    }

    /// Whether anything was changed (device created or brought up, address
    /// added or removed).
    pub fn changed(&self) -> bool {
        self.created || self.brought_up || !self.added.is_empty() || !self.removed.is_empty()
    }
}
