//! Plain-word explanations of why a module did not load.

use std::fmt;

use rustix::io::Errno;

/// The recognised reason a load failed.
///
/// ```
/// use ipvsctl::kmod::Cause;
///
/// let c = Cause::from_loader_output("modprobe: ERROR: could not insert 'ip_vs': Operation not permitted");
/// assert_eq!(c, Cause::NotPermitted);
/// assert!(c.explanation().contains("CAP_SYS_MODULE"));
/// ```
///
/// `#[non_exhaustive]`: loaders find new ways to fail, and each one this
/// crate learns to recognise gets its own variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cause {
    /// `ENOEXEC`, "Exec format error": the file is not a module for this
    /// kernel.
    ExecFormat,
    /// `EPERM`, "Operation not permitted": no `CAP_SYS_MODULE`, or loading
    /// is disabled.
    NotPermitted,
    /// The module (or its file) is not there.
    NotFound,
    /// The `modprobe` program is not installed.
    ModprobeNotInstalled,
    /// `EKEYREJECTED` / `ENOKEY`: the signature was refused.
    SignatureRejected,
    /// `EINVAL`: the kernel refused the module, e.g. unknown symbols or bad
    /// parameters.
    InvalidModule,
    /// The kernel cannot decompress the file itself.
    CompressionUnsupported,
    /// `ENOSYS`: the kernel has no loadable module support.
    NoModuleSupport,
    /// `modules.dep` names a file outside its modules directory.
    OutsideModulesDir,
    /// The loader did not finish within its timeout and was killed.
    TimedOut,
    /// Anything else.
    Other,
}

impl Cause {
    /// Classifies an errno from `finit_module(2)` or `open(2)`.
    ///
    /// ```
    /// use ipvsctl::kmod::Cause;
    ///
    /// assert_eq!(Cause::from_errno(8), Cause::ExecFormat); // ENOEXEC
    /// assert_eq!(Cause::from_errno(1), Cause::NotPermitted); // EPERM
    /// ```
    pub fn from_errno(errno: i32) -> Cause {
        // Compared as raw numbers: `Errno` refuses values out of range.
        let is = |e: Errno| e.raw_os_error() == errno;
        if is(Errno::NOEXEC) {
            Cause::ExecFormat
        } else if is(Errno::PERM) {
            Cause::NotPermitted
        } else if is(Errno::NOENT) {
            Cause::NotFound
        } else if is(Errno::KEYREJECTED) || is(Errno::NOKEY) {
            Cause::SignatureRejected
        } else if is(Errno::INVAL) {
            Cause::InvalidModule
        } else if is(Errno::NOSYS) {
            Cause::NoModuleSupport
        } else {
            Cause::Other
        }
    }

    /// Classifies what a loader (`modprobe`, `insmod`) printed, e.g.
    /// `modprobe: ERROR: could not insert 'ip_vs_rr': Exec format error`.
    ///
    /// The loader is run with `LC_ALL=C`, so these are the C locale's words.
    ///
    /// ```
    /// use ipvsctl::kmod::Cause;
    ///
    /// assert_eq!(
    ///     Cause::from_loader_output("modprobe: ERROR: could not insert 'ip_vs_rr': Exec format error"),
    ///     Cause::ExecFormat
    /// );
    /// assert_eq!(
    ///     Cause::from_loader_output("modprobe: FATAL: Module ip_vs_x not found in directory /lib/modules/6.1.0"),
    ///     Cause::NotFound
    /// );
    /// ```
    pub fn from_loader_output(text: &str) -> Cause {
        // kmod's modprobe prints strerror(); its insmod prints its own words
        // for some errnos ("Invalid module format" for ENOEXEC).
        const TABLE: [(&str, Cause); 14] = [
            ("Exec format error", Cause::ExecFormat),
            ("Invalid module format", Cause::ExecFormat),
            ("wrong symbol version", Cause::ExecFormat),
            ("Operation not permitted", Cause::NotPermitted),
            ("Key was rejected by service", Cause::SignatureRejected),
            ("Required key not available", Cause::SignatureRejected),
            ("Function not implemented", Cause::NoModuleSupport),
            ("Unknown symbol", Cause::InvalidModule),
            ("Invalid argument", Cause::InvalidModule),
            ("Invalid parameters", Cause::InvalidModule),
            ("not found in directory", Cause::NotFound),
            ("could not find module", Cause::NotFound),
            ("No such file or directory", Cause::NotFound),
            ("could not open moddep file", Cause::NotFound),
        ];
        TABLE
            .iter()
            .find(|(needle, _)| text.contains(needle))
            .map(|&(_, c)| c)
            .or_else(|| {
                // kmod: "Module X not found in directory ..."; busybox and
                // module-init-tools: "module X not found".
                let lower = text.to_ascii_lowercase();
                (lower.contains("module") && lower.contains("not found")).then_some(Cause::NotFound)
            })
            .unwrap_or(Cause::Other)
    }

    /// The plain-word explanation, with the fix.
    pub fn explanation(self) -> &'static str {
        match self {
            Cause::ExecFormat => {
                "the module file was built for another kernel or architecture than the running \
                 one (Exec format error, ENOEXEC), or the file is damaged. This is typical in a \
                 container whose /lib/modules does not match the host's kernel: load the modules \
                 on the host (modprobe there), or mount the host's own /lib/modules for the \
                 running release."
            }
            Cause::NotPermitted => {
                "loading kernel modules needs CAP_SYS_MODULE, which this process does not have \
                 (Operation not permitted, EPERM). This is typical in a container: load the \
                 modules on the host, or run with CAP_SYS_MODULE. It also happens when module \
                 loading is switched off (kernel.modules_disabled=1) or under kernel lockdown."
            }
            Cause::NotFound => {
                "the module is not installed for the running kernel: install the package with \
                 this kernel's modules (for example linux-modules-extra or linux-image), or use \
                 a kernel built with IPVS."
            }
            Cause::ModprobeNotInstalled => {
                "the modprobe program is not installed (no such file when starting it): install \
                 kmod, or load with finit_module, which needs no program."
            }
            Cause::SignatureRejected => {
                "the kernel only accepts signed modules and refused this one's signature (Secure \
                 Boot or module.sig_enforce): use the modules signed for this kernel."
            }
            Cause::InvalidModule => {
                "the kernel refused the module (Invalid argument): usually unknown symbols from \
                 a dependency of another build, or bad parameters. The kernel log (dmesg) names \
                 the reason."
            }
            Cause::CompressionUnsupported => {
                "the module file is compressed and this kernel cannot decompress it itself (that \
                 needs Linux 5.17 or later built with CONFIG_MODULE_DECOMPRESS and this \
                 compression): load it with modprobe, or decompress it first."
            }
            Cause::NoModuleSupport => {
                "the kernel was built without loadable module support: IPVS must be built in."
            }
            Cause::OutsideModulesDir => {
                "modules.dep names a module file outside its modules directory (an absolute \
                 path elsewhere, a \"..\" that climbs out, or a symbolic link to elsewhere). \
                 depmod writes no such entry: find out what wrote this modules.dep, then \
                 regenerate it with depmod for this release."
            }
            Cause::TimedOut => {
                "the loader did not finish within its timeout and was killed. A module's \
                 initialisation can wait for the kernel for ever: ip_vs_lblc and ip_vs_lblcr \
                 wait for network-namespace cleanup, which can wait for them (see the \
                 kernel's hung-task messages in dmesg). Load scheduler modules when nothing \
                 else uses IPVS, at boot or before the proxy starts."
            }
            Cause::Other => {
                "the loader failed for a reason not recognised here: see its output above and \
                 the kernel log (dmesg)."
            }
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.explanation())
    }
}
