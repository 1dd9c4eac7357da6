//! Listings byte for byte as ipvsadm 1.31 prints them, pure: the caller reads
//! the kernel state, this module turns it into text.
//!
//! The details that scripts notice are all here: the header lines, column
//! widths and trailing spaces, `K`/`M`/`G`/`T` suffixes (or `--exact`), the
//! service-line suffixes (`(sh-port)`, `persistent N mask M pe P`, `ops`), the
//! tunnel column, `FWM  N` lines, the `-S` rule lines, and ipvsadm's sort
//! order, which comes from comparing addresses by subtracting them as 32-bit
//! numbers (so it wraps: `200.0.0.1` sorts before `10.0.0.1`), sorted with
//! glibc's merge sort.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use ipvsctl::model::{
    AddressFamily, DestinationSnapshot, ForwardMethod, Info, Netmask, Protocol, ServiceFlags,
    ServiceKey, ServiceSnapshot, SyncDaemon, Timeouts, TunnelEncap, TunnelFlags, VirtualServer,
};

use super::rules::Format;

/// Names ports (and, if it can, addresses) when `-n` is not given.
pub trait Namer: Sync {
    /// The service name of a port, e.g. `http` for TCP 80.
    fn port_name(&self, port: u16, protocol: Protocol) -> Option<String>;
    /// The host name of an address.
    fn host_name(&self, addr: IpAddr) -> Option<String>;
}

/// Names nothing: the output is numeric whatever the format says.
#[derive(Debug, Clone, Copy, Default)]
pub struct Numeric;

impl Namer for Numeric {
    fn port_name(&self, _: u16, _: Protocol) -> Option<String> {
        None
    }
    fn host_name(&self, _: IpAddr) -> Option<String> {
        None
    }
}

/// A service with its destinations, as read from the kernel.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The service.
    pub service: ServiceSnapshot,
    /// Its destinations in the kernel's order.
    pub dests: Vec<DestinationSnapshot>,
}

/// `IP Virtual Server version 1.2.1 (size=4096)`.
pub fn version_header(out: &mut String, info: &Info) {
    let _ = writeln!(
        out,
        "IP Virtual Server version {} (size={})",
        info.version, info.conn_tab_size
    );
}

/// The two title lines of a listing (none for `-S`).
pub fn title(out: &mut String, f: &Format) {
    if f.stats {
        let _ = writeln!(
            out,
            "{:<33} {:>8} {:>8} {:>8} {:>8} {:>8}\n  -> RemoteAddress:Port",
            "Prot LocalAddress:Port", "Conns", "InPkts", "OutPkts", "InBytes", "OutBytes"
        );
    } else if f.rate {
        let _ = writeln!(
            out,
            "{:<33} {:>8} {:>8} {:>8} {:>8} {:>8}\n  -> RemoteAddress:Port",
            "Prot LocalAddress:Port", "CPS", "InPPS", "OutPPS", "InBPS", "OutBPS"
        );
    } else if f.thresholds {
        let _ = writeln!(
            out,
            "{:<33} {:<10} {:<10} {:<10} {:<10}\n  -> RemoteAddress:Port",
            "Prot LocalAddress:Port", "Uthreshold", "Lthreshold", "ActiveConn", "InActConn"
        );
    } else if f.persistent_conn {
        let _ = writeln!(
            out,
            "{:<33} {:<9} {:<11} {:<10} {:<10}\n  -> RemoteAddress:Port",
            "Prot LocalAddress:Port", "Weight", "PersistConn", "ActiveConn", "InActConn"
        );
    } else if f.tun_info {
        out.push_str("Prot LocalAddress:Port Scheduler Flags\n");
        out.push_str(
            "  -> RemoteAddress:Port           Forward TunnelInfo    Weight ActiveConn InActConn\n",
        );
    } else if !f.rule {
        out.push_str("Prot LocalAddress:Port Scheduler Flags\n");
        out.push_str("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n");
    }
}

/// A full `-L` listing (header, title, every service) or a `-S` listing.
#[allow(dead_code)] // the format tests' entry point; the binary formats in parts
pub fn list_all(
    out: &mut String,
    info: &Info,
    entries: &mut Vec<Entry>,
    f: &Format,
    n: &dyn Namer,
) {
    list_head(out, info, f);
    if !f.nosort {
        sort_services(entries);
    }
    for e in entries.iter_mut() {
        service_entry(out, e, f, n);
    }
}

/// What a listing of the whole table prints before its services: the
/// version line (not in `-S`) and the column titles.
pub fn list_head(out: &mut String, info: &Info, f: &Format) {
    if !f.rule {
        version_header(out, info);
    }
    title(out, f);
}

/// One service and its destinations.
pub fn service_entry(out: &mut String, e: &mut Entry, f: &Format, n: &dyn Namer) {
    let vs = &e.service.service;
    let name = service_name(vs, f, n);
    if f.rule {
        let _ = write!(out, "-A {name} -s {}", vs.scheduler);
        if vs.flags.contains(ServiceFlags::PERSISTENT) {
            let _ = write!(out, " -p {}", vs.timeout);
            if let Some(m) = mask_suffix(vs) {
                let _ = write!(out, " -M {m}");
            }
        }
        if let Some(pe) = &vs.persistence_engine {
            let _ = write!(out, " --pe {pe}");
        }
        if vs.flags.contains(ServiceFlags::ONE_PACKET) {
            out.push_str(" -o");
        }
        if let Some(flags) = sched_flags(vs) {
            let _ = write!(out, " -b {flags}");
        }
    } else if f.stats {
        let s = &e.service.stats;
        let _ = write!(out, "{name:<33}");
        for v in [s.conns, s.in_pkts, s.out_pkts, s.in_bytes, s.out_bytes] {
            largenum(out, v, f.exact);
        }
    } else if f.rate {
        let s = &e.service.stats;
        let _ = write!(out, "{name:<33}");
        for v in [s.cps, s.in_pps, s.out_pps, s.in_bps, s.out_bps] {
            largenum(out, v, f.exact);
        }
    } else {
        let _ = write!(out, "{name} {}", vs.scheduler);
        if let Some(flags) = sched_flags(vs) {
            let _ = write!(out, " ({flags})");
        }
        if vs.flags.contains(ServiceFlags::PERSISTENT) {
            let _ = write!(out, " persistent {}", vs.timeout);
            if let Some(m) = mask_suffix(vs) {
                let _ = write!(out, " mask {m}");
            }
            if let Some(pe) = &vs.persistence_engine {
                let _ = write!(out, " pe {pe}");
            }
        }
        if vs.flags.contains(ServiceFlags::ONE_PACKET) {
            out.push_str(" ops");
        }
    }
    out.push('\n');

    if !f.nosort {
        sort_dests(&mut e.dests);
    }
    let protocol = match vs.key {
        ServiceKey::Addr { protocol, .. } => protocol,
        ServiceKey::FwMark { .. } => Protocol::Tcp,
    };
    for d in &e.dests {
        let rs = &d.server;
        let mut dname = addrport(rs.addr, protocol, f, n);
        if !f.rule && rs.addr.is_ipv4() {
            truncate(&mut dname, 28);
        }
        let c = &d.conns;
        let s = &d.stats;
        if f.rule {
            let _ = write!(
                out,
                "-a {name} -r {dname} {} -w {}",
                forward_switch(&rs.forward),
                rs.weight
            );
            if let ForwardMethod::Tunnel(t) = rs.forward {
                match t.encap {
                    TunnelEncap::Gre => {
                        let _ = write!(out, " --tun-type gre {}", tunnel_flag_option(t.flags));
                    }
                    TunnelEncap::Gue { port } => {
                        let _ = write!(
                            out,
                            " --tun-type gue --tun-port {port} {}",
                            tunnel_flag_option(t.flags)
                        );
                    }
                    TunnelEncap::Ipip => out.push_str(" --tun-type ipip"),
                    // A type ipvsadm 1.31 has no option for.
                    _ => {}
                }
            }
            out.push('\n');
        } else if f.stats {
            let _ = write!(out, "  -> {dname:<28}");
            for v in [s.conns, s.in_pkts, s.out_pkts, s.in_bytes, s.out_bytes] {
                largenum(out, v, f.exact);
            }
            out.push('\n');
        } else if f.rate {
            let _ = write!(
                out,
                "  -> {dname:<28} {:>8} {:>8} {:>8}",
                s.cps, s.in_pps, s.out_pps
            );
            largenum(out, s.in_bps, f.exact);
            largenum(out, s.out_bps, f.exact);
            out.push('\n');
        } else if f.thresholds {
            let _ = writeln!(
                out,
                "  -> {dname:<28} {:<10} {:<10} {:<10} {:<10}",
                rs.upper_threshold, rs.lower_threshold, c.active, c.inactive
            );
        } else if f.persistent_conn {
            let _ = writeln!(
                out,
                "  -> {dname:<28} {:<9} {:<11} {:<10} {:<10}",
                rs.weight, c.persistent, c.active, c.inactive
            );
        } else if f.tun_info {
            let _ = writeln!(
                out,
                "  -> {dname:<28} {:<7} {:<13} {:<6} {:<10} {:<10}",
                forward_name(&rs.forward),
                tunnel_info(&rs.forward),
                rs.weight,
                c.active,
                c.inactive
            );
        } else {
            // "  -> {dname:<28} {fwd:<7} {weight:<6} {active:<10} {inactive:<10}"
            out.push_str("  -> ");
            push_left(out, &dname, 28);
            out.push(' ');
            push_left(out, forward_name(&rs.forward), 7);
            out.push(' ');
            push_uint_left(out, u64::from(rs.weight), 6);
            out.push(' ');
            push_uint_left(out, u64::from(c.active), 10);
            out.push(' ');
            push_uint_left(out, u64::from(c.inactive), 10);
            out.push('\n');
        }
    }
}

/// `Timeout (tcp tcpfin udp): 900 120 300`.
pub fn timeouts(out: &mut String, t: &Timeouts) {
    let _ = writeln!(
        out,
        "Timeout (tcp tcpfin udp): {} {} {}",
        t.tcp, t.tcp_fin, t.udp
    );
}

/// One line per running sync daemon.
pub fn daemons(out: &mut String, daemons: &[SyncDaemon]) {
    for d in daemons {
        let role = match d.role {
            ipvsctl::model::DaemonRole::Master => "master",
            ipvsctl::model::DaemonRole::Backup => "backup",
        };
        let _ = write!(
            out,
            "{role} sync daemon (mcast={}, syncid={}",
            d.interface, d.sync_id
        );
        if let Some(len) = d.max_len.filter(|l| *l != 0) {
            let _ = write!(out, ", maxlen={len}");
        }
        if let Some(group) = d.group {
            let _ = write!(out, ", group={group}");
        }
        if let Some(port) = d.port.filter(|p| *p != 0) {
            let _ = write!(out, ", port={port}");
        }
        if let Some(ttl) = d.ttl.filter(|t| *t != 0) {
            let _ = write!(out, ", ttl={ttl}");
        }
        out.push_str(")\n");
    }
}

/// How a service is named on its line: `TCP  10.0.0.1:80`, `FWM  5 IPv6`,
/// or in rule form `-t 10.0.0.1:80`, `-f 5 -6`.
pub fn service_name(vs: &VirtualServer, f: &Format, n: &dyn Namer) -> String {
    match vs.key {
        ServiceKey::FwMark { mark, family } => {
            // ipvsadm prints the mark with %d.
            let mark = if f.unsigned_marks {
                i64::from(mark)
            } else {
                i64::from(mark as i32)
            };
            match (f.rule, family) {
                (true, AddressFamily::Inet6) => format!("-f {mark} -6"),
                (true, AddressFamily::Inet) => format!("-f {mark}"),
                (false, AddressFamily::Inet6) => format!("FWM  {mark} IPv6"),
                (false, AddressFamily::Inet) => format!("FWM  {mark}"),
            }
        }
        ServiceKey::Addr { protocol, addr } => {
            let v = addrport(addr, protocol, f, n);
            if f.rule {
                let opt = match protocol {
                    Protocol::Tcp => "-t",
                    Protocol::Udp => "-u",
                    Protocol::Sctp => "--sctp-service",
                    _ => "--xxx-service",
                };
                format!("{opt} {v}")
            } else {
                let name = match protocol {
                    Protocol::Tcp => "TCP",
                    Protocol::Udp => "UDP",
                    Protocol::Sctp => "SCTP",
                    _ => "?",
                };
                let mut s = format!("{name:<4} {v}");
                if addr.is_ipv4() {
                    truncate(&mut s, 33);
                }
                s
            }
        }
    }
}

/// `addr:port`, `[v6]:port`; names unless numeric.
pub fn addrport(addr: SocketAddr, protocol: Protocol, f: &Format, n: &dyn Namer) -> String {
    if let (true, SocketAddr::V4(a)) = (f.numeric, addr) {
        // The common case without `format!`: at most 21 bytes.
        let mut s = String::with_capacity(21);
        for (i, octet) in a.ip().octets().into_iter().enumerate() {
            if i > 0 {
                s.push('.');
            }
            push_uint_left(&mut s, u64::from(octet), 0);
        }
        s.push(':');
        push_uint_left(&mut s, u64::from(a.port()), 0);
        return s;
    }
    let (host, port) = if f.numeric {
        (addr.ip().to_string(), addr.port().to_string())
    } else {
        (
            n.host_name(addr.ip())
                .unwrap_or_else(|| addr.ip().to_string()),
            n.port_name(addr.port(), protocol)
                .unwrap_or_else(|| addr.port().to_string()),
        )
    };
    let mut s = if addr.is_ipv4() {
        format!("{host}:{port}")
    } else {
        format!("[{host}]:{port}")
    };
    // ipvsadm formats into a 60-byte buffer.
    truncate(&mut s, 59);
    s
}

fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

fn mask_suffix(vs: &VirtualServer) -> Option<String> {
    match (vs.family(), vs.netmask) {
        (AddressFamily::Inet, Netmask::V4(m)) if m != std::net::Ipv4Addr::BROADCAST => {
            Some(m.to_string())
        }
        (AddressFamily::Inet6, Netmask::V6(p)) if p != 128 => Some(p.to_string()),
        _ => None,
    }
}

/// The scheduler flags as ipvsadm names them for this scheduler.
fn sched_flags(vs: &VirtualServer) -> Option<String> {
    let fl = vs.flags;
    let named: &[(ServiceFlags, &str)] = match vs.scheduler.name() {
        "sh" => &[
            (ServiceFlags::SH_FALLBACK, "sh-fallback"),
            (ServiceFlags::SH_PORT, "sh-port"),
        ],
        "mh" => &[
            (ServiceFlags::MH_FALLBACK, "mh-fallback"),
            (ServiceFlags::MH_PORT, "mh-port"),
        ],
        _ => &[
            (ServiceFlags::SCHED1, "flag-1"),
            (ServiceFlags::SCHED2, "flag-2"),
            (ServiceFlags::SCHED3, "flag-3"),
        ],
    };
    let any = ServiceFlags::SCHED1 | ServiceFlags::SCHED2 | ServiceFlags::SCHED3;
    if !fl.intersects(any) {
        return None;
    }
    let names: Vec<&str> = named
        .iter()
        .filter(|(b, _)| fl.contains(*b))
        .map(|(_, n)| *n)
        .collect();
    Some(names.join(","))
}

/// The `Forward` column. ipvsadm has no name for bypass and prints glibc's
/// `(null)`.
fn forward_name(f: &ForwardMethod) -> &'static str {
    match f {
        ForwardMethod::Masquerade => "Masq",
        ForwardMethod::Local => "Local",
        ForwardMethod::Tunnel(_) => "Tunnel",
        ForwardMethod::DirectRoute => "Route",
        // Bypass and any method ipvsadm has no name for.
        _ => "(null)",
    }
}

// Listings of 100,000 real servers spend most of their time formatting:
// the plain listing's lines are written with these instead of `write!`
// (a third of the instructions; the format tests hold them to ipvsadm's
// bytes).

/// Appends `s` left-aligned in `width` columns, as `{:<width}` does.
fn push_left(out: &mut String, s: &str, width: usize) {
    out.push_str(s);
    // Columns are characters; counting them is slow, and listings are ASCII.
    let columns = if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    };
    for _ in columns..width {
        out.push(' ');
    }
}

/// Appends `v` in decimal, left-aligned in `width` columns.
fn push_uint_left(out: &mut String, v: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = v;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for d in &digits[at..] {
        out.push(char::from(*d));
    }
    for _ in digits.len() - at..width {
        out.push(' ');
    }
}

/// The `-S` switch of a forwarding method.
fn forward_switch(f: &ForwardMethod) -> &'static str {
    match f {
        ForwardMethod::Masquerade => "-m",
        ForwardMethod::Tunnel(_) => "-i",
        ForwardMethod::Local | ForwardMethod::DirectRoute => "-g",
        // Bypass and any method ipvsadm has no switch for.
        _ => "(null)",
    }
}

fn tunnel_flag_index(flags: TunnelFlags) -> usize {
    if flags.contains(TunnelFlags::REMCSUM) {
        2
    } else if flags.contains(TunnelFlags::CSUM) {
        1
    } else {
        0
    }
}

fn tunnel_flag_option(flags: TunnelFlags) -> &'static str {
    ["--tun-nocsum", "--tun-csum", "--tun-remcsum"][tunnel_flag_index(flags)]
}

/// The `TunnelInfo` column: `ipip`, `gue:PORT:±c`, `gre:±c`, or `n/a`.
fn tunnel_info(f: &ForwardMethod) -> String {
    let ForwardMethod::Tunnel(t) = f else {
        return "n/a".to_owned();
    };
    let csum = ["-c", "+c", "r+c"][tunnel_flag_index(t.flags)];
    let mut s = match t.encap {
        TunnelEncap::Ipip => "ipip".to_owned(),
        TunnelEncap::Gue { port } => format!("gue:{port}:{csum}"),
        TunnelEncap::Gre => format!("gre:{csum}"),
        // A type ipvsadm 1.31 has no name for.
        _ => "?".to_owned(),
    };
    // ipvsadm formats into 16 bytes.
    truncate(&mut s, 15);
    s
}

/// A counter in a 9-column field: exact, or scaled with a K/M/G/T suffix.
pub fn largenum(out: &mut String, i: u64, exact: bool) {
    if exact {
        let len = i.to_string().len();
        let width = if len <= 8 { 9 } else { len + 1 };
        let _ = write!(out, "{i:>width$}");
    } else if i < 100_000_000 {
        let _ = write!(out, "{i:>9}");
    } else if i < 1_000_000_000 {
        let _ = write!(out, "{:>8}K", i / 1000);
    } else if i < 100_000_000_000 {
        let _ = write!(out, "{:>8}M", i / 1_000_000);
    } else if i < 100_000_000_000_000 {
        let _ = write!(out, "{:>8}G", i / 1_000_000_000);
    } else {
        let _ = write!(out, "{:>8}T", i / 1_000_000_000_000);
    }
}

// --- ipvsadm's sort order ----------------------------------------------------------

/// An address as four host-order 32-bit words (IPv4 in the first, the rest
/// zero, as the kernel's 16-byte address attribute holds it).
fn words(ip: IpAddr) -> [u32; 4] {
    match ip {
        IpAddr::V4(a) => [u32::from(a), 0, 0, 0],
        IpAddr::V6(a) => {
            let o = a.octets();
            let w = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            [w(0), w(4), w(8), w(12)]
        }
    }
}

/// `a - b` the way C computes `int r = u32 - u32`.
fn diff(a: u32, b: u32) -> i32 {
    a.wrapping_sub(b) as i32
}

fn cmp_addr(first_v6: bool, a: IpAddr, b: IpAddr) -> i32 {
    let (wa, wb) = (words(a), words(b));
    let n = if first_v6 { 4 } else { 1 };
    let mut r = 0;
    for i in 0..n {
        r = diff(wa[i], wb[i]);
        if r != 0 {
            break;
        }
    }
    r
}

fn family_raw(f: AddressFamily) -> i32 {
    i32::from(f.to_raw())
}

/// ipvsadm's service comparison: firewall mark, family, protocol, address,
/// port, each as a (wrapping) difference.
pub fn cmp_services(a: &VirtualServer, b: &VirtualServer) -> i32 {
    let parts = |vs: &VirtualServer| match vs.key {
        ServiceKey::FwMark { mark, family } => (
            mark,
            family,
            6u16,
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            0u16,
        ),
        ServiceKey::Addr { protocol, addr } => (
            0,
            AddressFamily::of(&addr.ip()),
            protocol.to_raw(),
            addr.ip(),
            addr.port(),
        ),
    };
    let (ma, fa, pa, ia, qa) = parts(a);
    let (mb, fb, pb, ib, qb) = parts(b);
    let r = diff(ma, mb);
    if r != 0 {
        return r;
    }
    let r = family_raw(fa) - family_raw(fb);
    if r != 0 {
        return r;
    }
    let r = i32::from(pa) - i32::from(pb);
    if r != 0 {
        return r;
    }
    let r = cmp_addr(fa == AddressFamily::Inet6, ia, ib);
    if r != 0 {
        return r;
    }
    i32::from(qa) - i32::from(qb)
}

/// ipvsadm's destination comparison: address (as the first one's family
/// sees it), then port.
pub fn cmp_dests(a: &SocketAddr, b: &SocketAddr) -> i32 {
    let r = cmp_addr(a.is_ipv6(), a.ip(), b.ip());
    if r != 0 {
        return r;
    }
    i32::from(a.port()) - i32::from(b.port())
}

/// Sorts services as ipvsadm does.
pub fn sort_services(entries: &mut Vec<Entry>) {
    let order = sorted_order(entries, &|a: &Entry, b: &Entry| {
        cmp_services(&a.service.service, &b.service.service)
    });
    permute(entries, &order);
}

/// Sorts destinations as ipvsadm does.
pub fn sort_dests(dests: &mut Vec<DestinationSnapshot>) {
    let order = sorted_order(
        dests,
        &|a: &DestinationSnapshot, b: &DestinationSnapshot| {
            cmp_dests(&a.server.addr, &b.server.addr)
        },
    );
    permute(dests, &order);
}

/// The indices of `items` in sorted order (sorting indices, not the items).
fn sorted_order<T>(items: &[T], cmp: &dyn Fn(&T, &T) -> i32) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..items.len()).collect();
    glibc_msort(
        &mut idx,
        &|a: &usize, b: &usize| match (items.get(*a), items.get(*b)) {
            (Some(x), Some(y)) => cmp(x, y),
            _ => 0,
        },
    );
    idx
}

/// Reorders `items` by a permutation of its indices.
fn permute<T>(items: &mut Vec<T>, order: &[usize]) {
    let mut slots: Vec<Option<T>> = items.drain(..).map(Some).collect();
    items.extend(
        order
            .iter()
            .filter_map(|&i| slots.get_mut(i).and_then(Option::take)),
    );
}

/// The merge sort glibc's `qsort` runs (top-down, the first half of
/// `n / 2` elements, ties to the left). The comparisons above are not a
/// total order (the subtraction wraps), so the result depends on the exact
/// algorithm and the input order, both of which this reproduces.
pub fn glibc_msort<T: Clone>(v: &mut [T], cmp: &dyn Fn(&T, &T) -> i32) {
    if v.len() <= 1 {
        return;
    }
    let n1 = v.len() / 2;
    {
        let (left, right) = v.split_at_mut(n1);
        glibc_msort(left, cmp);
        glibc_msort(right, cmp);
    }
    let mut merged: Vec<T> = Vec::with_capacity(v.len());
    let (left, right) = v.split_at(n1);
    let (mut i, mut j) = (0, 0);
    while i < left.len() && j < right.len() {
        if cmp(&left[i], &right[j]) <= 0 {
            merged.push(left[i].clone());
            i += 1;
        } else {
            merged.push(right[j].clone());
            j += 1;
        }
    }
    merged.extend_from_slice(&left[i..]);
    merged.extend_from_slice(&right[j..]);
    v.clone_from_slice(&merged);
}
