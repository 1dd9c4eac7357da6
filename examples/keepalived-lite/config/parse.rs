//! Keywords to raw blocks: the top level, `global_defs` and
//! `virtual_server_group` (keepalived 2.2.7 `process_stream`,
//! `global_parser.c`, `check_parser.c` `vsg_handler`/`alloc_vsg_entry` in
//! check_data.c). `virtual_server` blocks are read by `vs`.
//!
//! Blocks and keys of keepalived's VRRP (and BFD) half are skipped with one
//! notice each, as keepalived's checker process skips them. Everything
//! else keepalived-lite does not run is refused, never ignored.

use std::net::IpAddr;
use std::path::PathBuf;

use ipvsctl::model::AddressFamily;

use super::lexer::{Kind, Line};
use super::model::{ConfigError, Global, LvsTimeouts, Notice};
use super::values::{ip, port, unsigned, unsigned32};
use super::vs::{self, RawVs};

/// `LVS_MAX_TIMEOUT`: 31 days.
pub(crate) const LVS_MAX_TIMEOUT: u32 = 86400 * 31;
/// A virtual server group may expand to at most this many services.
const MAX_GROUP_SERVICES: u128 = 65536;

/// The whole file, keywords read, defaults not yet resolved.
pub(crate) struct Raw {
    pub global: Global,
    pub groups: Vec<RawGroup>,
    pub servers: Vec<RawVs>,
    pub notices: Vec<Notice>,
}

/// A `virtual_server_group`.
pub(crate) struct RawGroup {
    pub line: usize,
    pub name: String,
    pub entries: Vec<GroupEntry>,
}

/// One line of a `virtual_server_group`.
pub(crate) enum GroupEntry {
    /// `IP [PORT]`, `IP-END [PORT]`, `IP/LEN [PORT]`: every address from
    /// `first` to `last`.
    Range {
        first: IpAddr,
        last: IpAddr,
        port: u16,
    },
    /// `fwmark N [inet|inet6]`.
    Fwmark {
        mark: u32,
        family: Option<AddressFamily>,
    },
}

/// Walks the logical lines.
pub(crate) struct Cursor<'a> {
    lines: &'a [Line],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Option<&'a Line> {
        let line = self.lines.get(self.pos)?;
        self.pos += 1;
        Some(line)
    }

    /// Expects `{` after `head`, then hands every keyword line to `each`
    /// until the matching `}`.
    pub(crate) fn block(
        &mut self,
        head: &Line,
        mut each: impl FnMut(&mut Self, &'a Line) -> Result<(), ConfigError>,
    ) -> Result<(), ConfigError> {
        match self.next() {
            Some(l) if l.kind == Kind::Open => {}
            _ => return Err(head.error("missing '{' after the keyword")),
        }
        loop {
            let Some(line) = self.next() else {
                return Err(head.error("block not closed (missing '}')"));
            };
            match line.kind {
                Kind::Close => return Ok(()),
                Kind::Open => return Err(line.error("unexpected '{'")),
                Kind::Words => each(self, line)?,
            }
        }
    }

    /// Skips the `{ ... }` block after `head`, if there is one.
    fn skip(&mut self, head: &Line) -> Result<(), ConfigError> {
        if self
            .lines
            .get(self.pos)
            .is_none_or(|l| l.kind != Kind::Open)
        {
            return Ok(());
        }
        let mut depth = 0usize;
        while let Some(line) = self.next() {
            match line.kind {
                Kind::Open => depth += 1,
                Kind::Close => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                Kind::Words => {}
            }
        }
        Err(head.error("block not closed (missing '}')"))
    }
}

/// The values after the keyword: between `min` and `max` of them.
pub(crate) fn args(line: &Line, min: usize, max: usize) -> Result<&[String], ConfigError> {
    let values = line.words.get(1..).unwrap_or_default();
    if values.len() < min {
        return Err(line.error("missing value"));
    }
    if values.len() > max {
        return Err(line.error(format!("unexpected extra value '{}'", values[max])));
    }
    Ok(values)
}

/// `reason` as an error at `line`.
pub(crate) fn bad(line: &Line) -> impl Fn(String) -> ConfigError + '_ {
    move |reason| line.error(reason)
}

/// A keyword keepalived knows that keepalived-lite does not run.
pub(crate) fn unsupported(line: &Line) -> ConfigError {
    line.error("not supported by keepalived-lite")
}

/// A keyword nobody knows (at this level).
pub(crate) fn unknown(line: &Line) -> ConfigError {
    line.error("unknown keyword")
}

/// Top-level blocks of the VRRP and BFD half.
const OTHER_ROOT: &[&str] = &[
    "vrrp_instance",
    "vrrp_sync_group",
    "vrrp_script",
    "vrrp_track_process",
    "vrrp_track_file",
    "track_file",
    "static_ipaddress",
    "static_routes",
    "static_rules",
    "track_group",
    "garp_group",
    "linkbeat_interfaces",
    "linkbeat_use_polling",
    "interface_up_down_delays",
    "namespace_with_ipsets",
    "bfd_instance",
];

/// Top-level keywords keepalived-lite does not run.
const UNSUPPORTED_ROOT: &[&str] = &[
    "SSL",
    "net_namespace",
    "net_namespace_ipvs",
    "use_pid_dir",
    "instance",
    "child_wait_time",
];

/// Reads the whole file.
pub(crate) fn parse(lines: &[Line]) -> Result<Raw, ConfigError> {
    let mut raw = Raw {
        global: Global::default(),
        groups: Vec::new(),
        servers: Vec::new(),
        notices: Vec::new(),
    };
    let mut cur = Cursor { lines, pos: 0 };
    while let Some(line) = cur.next() {
        match line.kind {
            Kind::Open => return Err(line.error("unexpected '{'")),
            Kind::Close => return Err(line.error("extra '}'")),
            Kind::Words => {}
        }
        match line.keyword() {
            "global_defs" => {
                args(line, 0, 0)?;
                cur.block(line, |cur, l| {
                    global_key(cur, l, &mut raw.global, &mut raw.notices)
                })?;
            }
            "virtual_server_group" => {
                let group = group(&mut cur, line)?;
                if let Some(g) = raw.groups.iter().find(|g| g.name == group.name) {
                    return Err(line.error(format!(
                        "group {} already defined at line {}",
                        g.name, g.line
                    )));
                }
                raw.groups.push(group);
            }
            "virtual_server" => raw
                .servers
                .push(vs::virtual_server(&mut cur, line, &raw.global)?),
            k if OTHER_ROOT.contains(&k) => skip(&mut cur, line, &mut raw.notices)?,
            k if UNSUPPORTED_ROOT.contains(&k) => return Err(unsupported(line)),
            _ => return Err(unknown(line)),
        }
    }
    Ok(raw)
}

fn skip(cur: &mut Cursor<'_>, line: &Line, notices: &mut Vec<Notice>) -> Result<(), ConfigError> {
    notices.push(Notice {
        file: PathBuf::clone(&line.file),
        line: line.line,
        keyword: line.keyword().to_owned(),
    });
    cur.skip(line)
}

/// `global_defs` keys that serve only the VRRP/BFD half or mail.
fn other_half_global(k: &str) -> bool {
    (k.starts_with("vrrp_") || k.starts_with("bfd_") || k.starts_with("enable_snmp_"))
        && k != "enable_snmp_checker"
        || matches!(
            k,
            "notification_email"
                | "notification_email_from"
                | "smtp_server"
                | "smtp_helo_name"
                | "smtp_connect_timeout"
                | "smtp_alert"
                | "no_email_faults"
                | "dynamic_interfaces"
                | "default_interface"
                | "disable_local_igmp"
                | "max_auto_priority"
                | "min_auto_priority_delay"
                | "nftables"
                | "nftables_priority"
                | "nftables_ifindex"
                | "nftables_counters"
                | "snmp_socket"
                | "enable_traps"
                | "enable_dbus"
                | "dbus_service_name"
                | "vmac_prefix"
                | "vmac_addr_prefix"
                | "log_unknown_vrids"
                | "process_monitor_rcv_bufs"
                | "process_monitor_rcv_bufs_force"
                | "fifo_write_vrrp_states_on_reload"
        )
}

/// `global_defs` keys keepalived-lite does not run (the checker process's
/// own settings, notify FIFOs, the sync daemon, ...).
const UNSUPPORTED_GLOBAL: &[&str] = &[
    "process_names",
    "process_name",
    "checker_process_name",
    "lvs_process_name",
    "startup_script",
    "startup_script_timeout",
    "shutdown_script",
    "shutdown_script_timeout",
    "smtp_alert_checker",
    "checker_log_all_failures",
    "lvs_sync_daemon",
    "nftables_ipvs",
    "nftables_ipvs_priority",
    "nftables_ipvs_start_fwmark",
    "notify_fifo",
    "notify_fifo_script",
    "lvs_notify_fifo",
    "lvs_notify_fifo_script",
    "checker_priority",
    "checker_no_swap",
    "checker_rt_priority",
    "checker_cpu_affinity",
    "checker_rlimit_rttime",
    "checker_rlimit_rtime",
    "enable_snmp_checker",
    "lvs_netlink_cmd_rcv_bufs",
    "lvs_netlink_cmd_rcv_bufs_force",
    "lvs_netlink_monitor_rcv_bufs",
    "lvs_netlink_monitor_rcv_bufs_force",
    "rs_init_notifies",
    "no_checker_emails",
    "umask",
    "random_seed",
    "reload_check_config",
    "reload_time_file",
    "reload_repeat",
    "reload_file",
    "include_check",
    "config_save_dir",
    "tmp_config_directory",
    "data_use_instance",
];

fn global_key(
    cur: &mut Cursor<'_>,
    l: &Line,
    g: &mut Global,
    notices: &mut Vec<Notice>,
) -> Result<(), ConfigError> {
    match l.keyword() {
        "router_id" => g.router_id = Some(args(l, 1, 1)?[0].clone()),
        "lvs_flush" => {
            args(l, 0, 0)?;
            g.lvs_flush = true;
        }
        // `lvs_flush_onstop` is the deprecated spelling. `VS` (flush only
        // the configured services) is not supported.
        "lvs_flush_on_stop" | "lvs_flush_onstop" => match args(l, 0, 1)? {
            [] => g.lvs_flush_onstop = true,
            [v] if v == "VS" => return Err(l.error("'VS' is not supported by keepalived-lite")),
            [v, ..] => return Err(l.error(format!("unknown flush type '{v}'"))),
        },
        "lvs_timeouts" => {
            let values = args(l, 2, usize::MAX)?;
            let t = g.lvs_timeouts.get_or_insert_with(LvsTimeouts::default);
            for pair in values.chunks(2) {
                let [name, value] = pair else {
                    return Err(l.error(format!("no value for '{}'", pair[0])));
                };
                let v = unsigned32(value, 0, LVS_MAX_TIMEOUT).map_err(bad(l))?;
                match name.as_str() {
                    "tcp" => t.tcp = v,
                    "tcpfin" => t.tcp_fin = v,
                    "udp" => t.udp = v,
                    other => return Err(l.error(format!("unknown option '{other}'"))),
                }
            }
        }
        // USER [GROUP], kept as written.
        "script_user" => g.script_user = Some(args(l, 1, 2)?.join(" ")),
        "enable_script_security" => {
            args(l, 0, 0)?;
            g.script_security = true;
        }
        k if other_half_global(k) => skip(cur, l, notices)?,
        k if UNSUPPORTED_GLOBAL.contains(&k) => return Err(unsupported(l)),
        _ => return Err(unknown(l)),
    }
    Ok(())
}

fn group(cur: &mut Cursor<'_>, head: &Line) -> Result<RawGroup, ConfigError> {
    let name = args(head, 1, 1)?[0].clone();
    let mut entries = Vec::new();
    let mut count: u128 = 0;
    cur.block(head, |_, l| {
        let entry = group_entry(l)?;
        let n = match &entry {
            GroupEntry::Range { first, last, .. } => span(first, last),
            GroupEntry::Fwmark { .. } => 1,
        };
        // Saturating: a range can span all of IPv6.
        count = count.saturating_add(n);
        if count > MAX_GROUP_SERVICES {
            return Err(l.error(format!(
                "group expands to more than {MAX_GROUP_SERVICES} services"
            )));
        }
        entries.push(entry);
        Ok(())
    })?;
    if entries.is_empty() {
        return Err(head.error("virtual server group has no entries"));
    }
    let has = |fam: AddressFamily| {
        entries.iter().any(|e| match e {
            GroupEntry::Range { first, .. } => AddressFamily::of(first) == fam,
            GroupEntry::Fwmark { family, .. } => *family == Some(fam),
        })
    };
    let fwmark_no_family = entries
        .iter()
        .any(|e| matches!(e, GroupEntry::Fwmark { family: None, .. }));
    if has(AddressFamily::Inet) && has(AddressFamily::Inet6) && fwmark_no_family {
        return Err(head.error("group with IPv4, IPv6 and fwmark without family"));
    }
    Ok(RawGroup {
        line: head.line,
        name,
        entries,
    })
}

/// How many addresses from `first` to `last` (same family, in order).
pub(crate) fn span(first: &IpAddr, last: &IpAddr) -> u128 {
    match (first, last) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            u128::from(u32::from(*b).saturating_sub(u32::from(*a))) + 1
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => u128::from(*b)
            .saturating_sub(u128::from(*a))
            .saturating_add(1),
        _ => 0,
    }
}

fn group_entry(l: &Line) -> Result<GroupEntry, ConfigError> {
    if l.keyword() == "fwmark" {
        let a = args(l, 1, 2)?;
        // keepalived takes 0, which is no service at all: refused.
        let mark = unsigned32(&a[0], 1, u32::MAX).map_err(bad(l))?;
        let family = match a.get(1).map(String::as_str) {
            None => None,
            Some("inet") => Some(AddressFamily::Inet),
            Some("inet6") => Some(AddressFamily::Inet6),
            Some(other) => return Err(l.error(format!("unknown family '{other}'"))),
        };
        return Ok(GroupEntry::Fwmark { mark, family });
    }
    if l.words.len() > 2 {
        return Err(l.error(format!("unexpected extra value '{}'", l.words[2])));
    }
    let (first, last) = range(l.keyword()).map_err(bad(l))?;
    let port = port(l.word(1)).map_err(bad(l))?;
    Ok(GroupEntry::Range { first, last, port })
}

/// `IP`, `IP-LAST` (last octet, or last hex group for IPv6), `IP-IP`, or
/// `IP/LEN` with the host bits clear.
fn range(s: &str) -> Result<(IpAddr, IpAddr), String> {
    if let Some((addr, len)) = s.split_once('/') {
        let first = ip(addr)?;
        let bits: u32 = if first.is_ipv4() { 32 } else { 128 };
        // In 1..=bits by construction.
        let len = unsigned(len, 1, u64::from(bits)).map_err(|e| format!("netmask: {e}"))? as u32;
        let clear = || format!("address mask bits not empty in '{s}'");
        return match first {
            IpAddr::V4(a) => {
                let host = u32::MAX.checked_shr(len).unwrap_or(0);
                let a = u32::from(a);
                if a & host != 0 {
                    return Err(clear());
                }
                Ok((first, IpAddr::V4((a | host).into())))
            }
            IpAddr::V6(a) => {
                let host = u128::MAX.checked_shr(len).unwrap_or(0);
                let a = u128::from(a);
                if a & host != 0 {
                    return Err(clear());
                }
                Ok((first, IpAddr::V6((a | host).into())))
            }
        };
    }
    let Some((addr, end)) = s.split_once('-') else {
        let a = ip(s)?;
        return Ok((a, a));
    };
    let first = ip(addr)?;
    let full_end = match first {
        IpAddr::V4(_) => end.contains('.'),
        IpAddr::V6(_) => end.contains(':'),
    };
    let last = if full_end {
        let last = ip(end)?;
        if last.is_ipv4() != first.is_ipv4() {
            return Err(format!("range address families do not match in '{s}'"));
        }
        if last < first {
            return Err(format!("range end is less than range start in '{s}'"));
        }
        last
    } else {
        match first {
            IpAddr::V4(a) => {
                let n = unsigned(end, 0, 255).map_err(|e| format!("range end: {e}"))? as u32;
                let a = u32::from(a);
                if a & 0xff >= n {
                    return Err(format!(
                        "range end is not greater than range start in '{s}'"
                    ));
                }
                IpAddr::V4(((a & !0xff) | n).into())
            }
            IpAddr::V6(a) => {
                let n = u16::from_str_radix(end, 16)
                    .ok()
                    .filter(|_| !end.is_empty() && end.bytes().all(|b| b.is_ascii_hexdigit()))
                    .ok_or_else(|| format!("invalid range end '{end}'"))?;
                let a = u128::from(a);
                if a & 0xffff >= u128::from(n) {
                    return Err(format!(
                        "range end is not greater than range start in '{s}'"
                    ));
                }
                IpAddr::V6(((a & !0xffff) | u128::from(n)).into())
            }
        }
    };
    Ok((first, last))
}
