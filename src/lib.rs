//! # ipvsctl
//!
//! Control Linux IPVS, the kernel's layer-4 load balancer, over generic
//! netlink: typed models, a sans-IO codec, a handle for every `ipvsadm`
//! operation, and bulk sync of whole tables to a desired state.
//!
//! It is meant for load balancers and node agents built on IPVS:
//! keepalived-style balancers, kube-router- and kube-vip-style agents,
//! Swarm-style service meshes, and exporters that read the table and its
//! counters. (Kubernetes deprecated kube-proxy's own IPVS mode in 1.35,
//! KEP-5495.)
//!
//! Linux only. Talking to IPVS needs `CAP_NET_ADMIN` in the initial user
//! namespace (in practice: root). The behaviour is tested against the real
//! kernel IPVS of Debian's Linux 5.10, 6.1, 6.12 and newest 7.x, and the
//! examples' `ipvsadm-lite` against Debian's `ipvsadm` 1.31.
//!
//! # Layers
//!
//! Data flows one way; each layer uses only the ones above it:
//!
//! 1. [`model`]: plain data (virtual servers, real servers, timeouts, sync
//!    daemons) and its validation, no I/O. Bad values get a typed error
//!    naming the field and the reason before anything is sent.
//! 2. [`codec`]: model values to and from IPVS generic-netlink messages,
//!    pure (sans-IO), so it can be tested and fuzzed without a kernel.
//! 3. [`netlink`]: network namespaces ([`NetNs`], pinned once as
//!    [`PinnedNetNs`]) and, privately, the one socket driver and sans-IO
//!    request pipeline every component's requests go through, generic
//!    netlink and rtnetlink alike: packing, sequence numbers, overruns, cut
//!    datagrams, foreign senders, and waits that end at a deadline (a
//!    [`Timeout`]) whatever signals arrive.
//! 4. [`Handle`]: the operations, codec and netlink put together: add, edit,
//!    delete and list services and real servers, timeouts, sync daemons,
//!    counters, flush, and pipelined batches ([`Handle::apply`]).
//! 5. [`sync`]: make the kernel's table equal to a desired state:
//!    [`DesiredState`](sync::DesiredState) (validated on insertion), a pure
//!    [`plan`](sync::plan()), and a [`Syncer`](sync::Syncer) that applies it
//!    pipelined, remembers what the kernel acknowledged and only touches the
//!    services it owns ([`Scope`](sync::Scope)).
//!
//! The crate root holds what every caller touches: [`Handle`] and its
//! [`HandleOptions`], [`Error`] and [`Result`], the [`Operation`] an error
//! is about, the [`NetNs`] a handle works in (and the [`PinnedNetNs`] every
//! component takes), and the [`Timeout`] that bounds every wait. Batches of writes
//! ([`batch::Write`], [`Handle::apply`]) are in [`batch`], which also says
//! how a `Write`, an `Operation` and the codec's
//! [`IpvsCmd`](codec::IpvsCmd) differ; what the running kernel supports
//! ([`Handle::capabilities`]) is in [`capabilities`].
//!
//! Beside them, for the host a load balancer runs on:
//!
//! * [`nodeips`]: the addresses of every interface that is up (the node IPs
//!   NodePort services listen on) in one link and one address dump, with a
//!   per-interface explanation when none is found
//!   ([`node_ips`](nodeips::node_ips)).
//! * [`vip`]: a dummy device holding exactly a set of virtual IPs, changed
//!   by the difference only.
//! * [`sysctl`]: the IPVS and neighbouring sysctls of a namespace, typed.
//! * [`conns`]: the connection table (`/proc/net/ip_vs_conn`) of a
//!   namespace.
//! * [`conntrack`]: the connection-tracking entries of a service, of one
//!   real server behind it or of a virtual address, read and deleted over
//!   ctnetlink (what `conntrack -D` does after a UDP or SCTP real server
//!   goes away).
//! * `kmod` (feature `kmod`): which IPVS kernel modules are built in,
//!   loaded, loadable or missing, and why (`kmod::check`); loading them on
//!   request, with a deadline. Without the feature a [`Handle`] still
//!   explains a missing IPVS with the same check.
//!
//! The first five work in the caller's namespace unless given a
//! [`PinnedNetNs`] (for example [`Handle::netns`]), so all of them stay in
//! the namespace the handle opened even if its name is deleted and made
//! again.
//!
//! # Example
//!
//! One service and one real server, one call each (as `ipvsadm -A` and
//! `ipvsadm -a` would), the table read back (as `ipvsadm -Ln`), then a
//! whole table of a hundred services made to exist with one sync:
//!
//! ```no_run
//! use ipvsctl::Handle;
//! use ipvsctl::model::{ForwardMethod, RealServer, Scheduler, ServiceKey, VirtualServer};
//! use ipvsctl::sync::{DesiredState, Syncer, Verify};
//!
//! let ipvs = Handle::new()?;
//!
//! let web = ServiceKey::tcp("192.0.2.10:80".parse()?);
//! ipvs.add_service(&VirtualServer::new(web).with_scheduler(Scheduler::RoundRobin))?;
//! let backend = RealServer::new("198.51.100.1:8080".parse()?).with_forward(ForwardMethod::Masquerade);
//! ipvs.add_destination(&web, &backend)?;
//!
//! for snapshot in ipvs.list_services()? {
//!     let service = &snapshot.service;
//!     println!("{} {}", service.key, service.scheduler);
//!     for dest in ipvs.list_destinations(&service.key)? {
//!         println!("  -> {} {} weight {}", dest.server.addr, dest.server.forward, dest.server.weight);
//!     }
//! }
//!
//! // The complete set of services this agent wants, each with its real servers.
//! let mut desired = DesiredState::new();
//! for i in 1..=100u8 {
//!     let key = ServiceKey::tcp(format!("10.96.0.{i}:80").parse()?);
//!     let servers = (1..=3u8).map(|j| {
//!         let addr = format!("10.244.{i}.{j}:8080").parse().expect("a valid address");
//!         RealServer::new(addr).with_forward(ForwardMethod::Masquerade)
//!     });
//!     desired.insert(VirtualServer::new(key), servers)?;
//! }
//! let mut syncer = Syncer::new(&ipvs);
//! let report = syncer.sync(&desired, Verify::Services)?;
//! assert!(report.is_ok(), "{report:?}");
//! println!("{} services added in {} writes", report.services.added, report.writes_sent);
//! // 192.0.2.10:80 was never given to the syncer, so the sync left it alone.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Defaults and options
//!
//! Where `ipvsadm`, kube-proxy or the kernel does a thing, this crate does
//! the same by default ([`VirtualServer::new`](model::VirtualServer::new) has
//! `ipvsadm`'s defaults, [`RealServer::new`](model::RealServer::new) routes
//! directly with weight 1 as `ipvsadm -a` does); going further is an explicit
//! option. Nothing is deleted that the caller did not say is theirs: a
//! [`Syncer`](sync::Syncer) changes and deletes only the services its
//! [`Ledger`](sync::Ledger) says it made or was given, unless told otherwise
//! ([`Scope`](sync::Scope)), and with a [`LedgerStore`](sync::LedgerStore)
//! that record survives a crash.
//!
//! # Features
//!
//! * `serde`: `Serialize` and `Deserialize` for the model types (desired
//!   states read from files; the `mini-proxy` example uses it).
//! * `arbitrary`: `arbitrary::Arbitrary` for the model types, for fuzzing.
//! * `unstable`: the module `unstable`, the crate's netlink socket, request
//!   pipeline and driver, for tests, benchmarks and capture tools. Outside
//!   semver: it may change in any release.
//! * `tokio`: the module `asynchronous`, an async front: `AsyncHandle`
//!   and `AsyncSyncer`, each running its
//!   operations in order on a worker thread of its own, so async code never
//!   blocks on the kernel. Without it, call the blocking [`Handle`] from
//!   `spawn_blocking`.
//! * `kmod`: the module `kmod`, public: the kernel-module check and its
//!   report, loading modules with `modprobe` or `finit_module(2)`, and the
//!   netlink probes. Off by default: a handle needs only the check, which is
//!   always compiled in (privately) to explain [`Error::Unavailable`] and to
//!   fill [`Capabilities`](capabilities::Capabilities).
//!
//! # More
//!
//! The repository's README has a quick start that runs on a machine
//! without IPVS too (`examples/quick_start.rs`, in a QEMU guest). Its
//! `docs/` covers the kernel facts found while testing
//! (`docs/kernel-notes.md`), the examples (`ipvsadm-lite`, a drop-in for
//! `ipvsadm` 1.31, `mini-proxy`, a small service proxy, and
//! `ipvs-exporter`, node_exporter's IPVS metrics and more) and porting from
//! the Go libraries moby/ipvs and cloudflare/ipvs and from kube-proxy
//! (`docs/porting.md`); its CONTRIBUTING.md covers testing against real
//! kernels and fuzzing. Measured figures, with how and on which kernel they
//! were taken, are in `docs/performance.md`.
#![deny(missing_docs)]
#![forbid(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "tokio")]
pub mod asynchronous;
pub mod codec;
pub mod conns;
pub mod conntrack;
mod handle;
#[cfg(feature = "kmod")]
pub mod kmod;
// rustdoc collects the examples of private modules too, and those of kmod
// need the public module: without the feature, they are not collected.
#[cfg(all(not(feature = "kmod"), not(doctest)))]
mod kmod;
pub mod model;
pub mod netlink;
pub mod nodeips;
pub mod sync;
pub mod sysctl;
mod timeout;
#[cfg(feature = "unstable")]
pub mod unstable;
pub mod vip;

pub use handle::{Error, Handle, HandleOptions, Operation, Result};
pub use handle::{batch, capabilities};
pub use netlink::netns::{NetNs, PinnedNetNs};
pub use timeout::{Timeout, TimeoutError};

/// The README's examples, compiled as doctests (with `--all-features`: one
/// of them needs `kmod`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's examples (`docs/guide.md`), compiled as doctests (with
/// `--all-features`: one of them needs `tokio`).
#[cfg(doctest)]
#[doc = include_str!("../docs/guide.md")]
pub struct GuideDoctests;
