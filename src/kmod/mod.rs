//! Kernel module check that says exactly what is missing and why.
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

mod check;
mod confine;
mod error;
mod evidence;
mod explain;
mod load;
mod modules_dep;
mod name;
mod probe;
mod report;
mod roots;

pub use check::{ModuleStatus, Verdict, check, check_with};
pub use confine::Escape;
pub use error::KmodError;
pub use evidence::Evidence;
pub use explain::Cause;
pub use load::{
    CommandRun, LoadFailure, LoadOutcome, LoadStep, LoadSuccess, Loader, MODPROBE_CANDIDATES,
    MODPROBE_ENVIRONMENT, MODULE_INIT_COMPRESSED_FILE, Modprobe, finit_file, finit_load,
    load_needed, modprobe,
};
pub use modules_dep::{Compression, DepEntry, ModuleFile, ModulesDep, module_name_of_path};
pub use name::{
    DEFAULT_SCHEDULERS, KERNEL_PERSISTENCE_ENGINES, KERNEL_SCHEDULERS, MAX_MODULE_NAME_LEN,
    ModuleName, Purpose, Requirement, Requirements,
};
pub use probe::{
    FamilyInfo, IPVS_FAMILY, SchedulerProbe, probe_family, probe_scheduler, resolve_family,
};
pub use report::{Diagnosis, ProbeResult, Report, Usability, diagnose, diagnose_with};
pub use roots::{CheckConfig, KernelRelease, ReleaseSource, Roots};
