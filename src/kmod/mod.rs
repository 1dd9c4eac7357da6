//! Kernel module check that says exactly what is missing and why (feature
//! `kmod`).
//!
//! kube-proxy once ran `modprobe -- ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh`,
//! kept only "exit status 1", concluded the modules were missing and fell
//! back to iptables, when modprobe had said
//! `could not insert 'ip_vs_rr': Exec format error`. This module keeps
//! everything and explains it.
//!
//! Three steps, each usable alone:
//!
//! 1. [`check`] reads files only (`/proc/modules`, `/sys/module`,
//!    `/lib/modules/<release>/modules.{builtin,dep}`) and gives each
//!    required module a [`Verdict`] — built in, loaded, loadable (with its
//!    file and dependency chain) or missing — with the [`Evidence`] behind
//!    it. The roots are parameters ([`Roots`]), so a container can check the
//!    host's files, and tests can check prepared trees.
//! 2. The load step is explicit and opt-in: [`modprobe`], or
//!    [`finit_load`] / [`finit_file`] through `finit_module(2)` for images
//!    without a modprobe program. Every [`LoadOutcome`] keeps the loader's
//!    exit status, output and errors in full; a [`LoadFailure`] explains
//!    itself ([`LoadFailure::explanation`]).
//! 3. The functional probe, the final word: [`probe_family`] asks the
//!    kernel for the `IPVS` generic netlink family (which makes a kernel
//!    that can autoload modules load `ip_vs` itself, with the host's own
//!    modprobe). [`probe_scheduler`] goes further and creates a test service
//!    in a private network namespace, which makes the kernel load the
//!    scheduler's module the same way.
//!
//! Load scheduler modules explicitly (step 2) before a proxy starts, rather
//! than letting the kernel load them on first use: the kernel loads a
//! scheduler while holding the IPVS mutex, and `ip_vs_lblc`/`ip_vs_lblcr`
//! then wait for any network-namespace cleanup in progress, which waits for
//! that mutex. A namespace deleted at that moment deadlocks IPVS and
//! namespace cleanup for good (seen on 6.1 and 6.12; `docs/kernel-notes.md`
//! in the repository). For those two, [`probe_scheduler`] is safe only
//! once the module is loaded.
//!
//! ## What the load step runs, and what it refuses
//!
//! Loading modules needs root (`CAP_SYS_MODULE`), so the load step takes
//! nothing from the caller's environment that could make it run or load
//! something else:
//!
//! - [`modprobe`] runs a program named by absolute path: the one given with
//!   [`Modprobe::at`] (a relative path is refused with
//!   [`KmodError::InvalidModprobePath`]), or the first of
//!   [`MODPROBE_CANDIDATES`] that exists. `PATH` is never searched.
//! - It runs with [`MODPROBE_ENVIRONMENT`] only (`HOME=/`, `TERM=linux`,
//!   `PATH=/sbin:/usr/sbin:/bin:/usr/bin`, as the kernel starts `modprobe`
//!   itself, and `LC_ALL=C`), in `/`, with standard input from `/dev/null`:
//!   no `MODPROBE_OPTIONS` (whose `-C DIR` could bring `install` commands),
//!   no `LD_PRELOAD`, no `PATH` of the caller's.
//! - [`finit_load`] and [`load_needed`] with [`Loader::FinitModule`] load
//!   only files inside the modules directory the check read. A
//!   `modules.dep` entry that is an absolute path elsewhere, climbs out with
//!   `..`, or resolves through a symbolic link to a file elsewhere fails
//!   the load with [`LoadFailure::OutsideModulesDir`], naming the entry,
//!   before any file of the chain is opened: nothing is loaded. Files are
//!   opened by their resolved path, without following a symbolic link. This
//!   trusts the modules directory itself (whoever can write there can put a
//!   module in it), not the paths its `modules.dep` names. On NixOS, whose
//!   module trees are symbolic links into the Nix store, load with
//!   [`modprobe`] instead.
//! - [`finit_file`] loads the one file the caller names, as `insmod` does.
//!
//! [`Requirements::default`] asks for `ip_vs`, `ip_vs_rr`, `ip_vs_wrr`,
//! `ip_vs_sh` and `nf_conntrack`, what kube-proxy in IPVS mode needs.
//!
//! ```no_run
//! use ipvsctl::kmod::{self, Loader, Modprobe, Requirements};
//!
//! let req = Requirements::default().with_scheduler("mh")?;
//! let report = kmod::check(&req);
//! if !report.all_present() {
//!     for outcome in kmod::load_needed(&report, &Loader::Modprobe(Modprobe::default())) {
//!         println!("{outcome}");
//!     }
//! }
//! let report = kmod::check(&req).with_probe(kmod::probe_family());
//! println!("{report}");
//! # Ok::<(), ipvsctl::kmod::KmodError>(())
//! ```
//!
//! For an "IPVS unavailable" error message, [`diagnose`] gives a cheap
//! one-line reason.
//!
//! ## Can this scheduler be used?
//!
//! One answer, in layers:
//!
//! - [`check`] is the answer: the [`Verdict`] of the scheduler's module
//!   (`ip_vs_<name>`), from files, with the evidence. Nothing is loaded.
//! - [`Capabilities::scheduler`](crate::capabilities::Capabilities::scheduler) is the same
//!   verdict summarised for a handle's user ([`Availability`](crate::capabilities::Availability):
//!   built in or loaded is `Present`, listed in `modules.dep` is `Loadable`,
//!   not listed in a `modules.dep` that was read is `Absent`, unreadable
//!   files are `Unknown`). It needs no feature: the check behind it is
//!   always compiled in.
//! - [`probe_scheduler`] confirms it with the kernel by creating a test
//!   service. It changes the kernel's state (the kernel may load the
//!   module), so it comes last: check, load what is needed, then probe.
//!
//! ## Deadlines
//!
//! Nothing here waits without end. [`modprobe`] runs the program in a
//! process group of its own for at most [`Modprobe::timeout`]
//! ([`DEFAULT_MODPROBE_TIMEOUT`], 30 s): then the group is killed
//! (`SIGKILL`) and reaped, and the outcome is [`LoadFailure::Killed`] with
//! what it printed until then. [`probe_scheduler`] waits at most the
//! timeout it is given ([`DEFAULT_PROBE_TIMEOUT`], 10 s, is a fair one),
//! then returns [`KmodError::ProbeTimedOut`]; its thread, stuck in the
//! kernel where no signal reaches it, is left detached. Both timeouts are
//! the crate's one [`Timeout`](crate::Timeout) type (1 ms to 1 h, checked
//! where it is made).
//!
//! `finit_module(2)` is a system call on the caller's thread and has no
//! deadline: a module whose initialisation never returns keeps the caller
//! in it. [`probe_family`] is one netlink request whose answer the kernel
//! may delay while it loads `ip_vs`.
//!
//! ## The `kmod` feature
//!
//! This module is public with the cargo feature `kmod`, off by default.
//! Without it, the file check and its report are still compiled in, but
//! private: they are what a [`Handle`](crate::Handle) needs to explain
//! [`Error::Unavailable`](crate::Error::Unavailable) and to fill
//! [`Capabilities`](crate::capabilities::Capabilities). The loaders (`modprobe`,
//! `finit_module`), the netlink probes, and the public types come with the
//! feature. Loading modules needs root and `CAP_SYS_MODULE` and is a
//! deployment's choice, not every user's: a program that only programs
//! IPVS has no use for a module loader in its binary or its API.

// Without the feature, the check's public API has no user but the handle,
// which uses a part of it.
#![cfg_attr(not(feature = "kmod"), allow(dead_code, unused_imports))]

// Always compiled: the file check and its report, which the handle uses.
mod check;
mod error;
mod evidence;
mod modules_dep;
mod name;
mod report;
mod roots;

// The loaders and the probes: only with the feature.
#[cfg(feature = "kmod")]
mod child;
#[cfg(feature = "kmod")]
mod confine;
#[cfg(feature = "kmod")]
mod explain;
#[cfg(feature = "kmod")]
mod load;
#[cfg(feature = "kmod")]
mod modprobe;
#[cfg(feature = "kmod")]
mod probe;

pub use check::{ModuleStatus, Verdict, check, check_with};
pub use error::KmodError;
pub use evidence::Evidence;
pub use modules_dep::{Compression, DepEntry, ModuleFile, ModulesDep, module_name_of_path};
pub use name::{
    DEFAULT_SCHEDULERS, KERNEL_PERSISTENCE_ENGINES, KERNEL_SCHEDULERS, MAX_MODULE_NAME_LEN,
    ModuleName, Purpose, Requirement, Requirements,
};
pub use report::{Diagnosis, FamilyInfo, ProbeResult, Report, Usability, diagnose, diagnose_with};
pub use roots::{CheckConfig, KernelRelease, ReleaseSource, Roots};

#[cfg(feature = "kmod")]
pub use confine::Escape;
#[cfg(feature = "kmod")]
pub use explain::Cause;
#[cfg(feature = "kmod")]
pub use load::{
    LoadFailure, LoadOutcome, LoadStep, LoadSuccess, Loader, MODULE_INIT_COMPRESSED_FILE,
    finit_file, finit_load, load_needed,
};
#[cfg(feature = "kmod")]
pub use modprobe::{
    CommandRun, DEFAULT_MODPROBE_TIMEOUT, KilledRun, MODPROBE_CANDIDATES, MODPROBE_ENVIRONMENT,
    Modprobe, modprobe,
};
#[cfg(feature = "kmod")]
pub use probe::{
    DEFAULT_PROBE_TIMEOUT, IPVS_FAMILY, SchedulerProbe, probe_family, probe_scheduler,
    resolve_family,
};
