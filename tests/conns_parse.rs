//! The connection-table reader on arbitrary input: never a panic, every
//! failure a typed error naming a line; and entries the kernel's format
//! describes read back to the values they were printed from.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipvsctl::conns::{ConnError, ConnReader, ConnState};
use ipvsctl::model::Protocol;
use proptest::prelude::*;

const HEADER: &str =
    "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n";

/// An address as the kernel prints it: `%08X` of the host-order IPv4
/// address, `%pI6` (eight groups of four digits) for IPv6.
fn kernel_addr(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => format!("{:08X}", u32::from(a)),
        IpAddr::V6(a) => a
            .segments()
            .iter()
            .map(|s| format!("{s:04x}"))
            .collect::<Vec<_>>()
            .join(":"),
    }
}

fn any_ip(v6: bool) -> BoxedStrategy<IpAddr> {
    if v6 {
        any::<u128>()
            .prop_map(|b| IpAddr::V6(Ipv6Addr::from(b)))
            .boxed()
    } else {
        any::<u32>()
            .prop_map(|b| IpAddr::V4(Ipv4Addr::from(b)))
            .boxed()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600), with_header in any::<bool>()) {
        let mut input = if with_header { HEADER.as_bytes().to_vec() } else { Vec::new() };
        input.extend_from_slice(&body);
        let mut errors = 0;
        for item in ConnReader::new(input.as_slice()) {
            if let Err(e) = item {
                errors += 1;
                match e {
                    ConnError::Parse(p) => prop_assert!(p.line >= 1),
                    ConnError::Io { .. } => {}
                    other => prop_assert!(false, "unexpected error {other:?}"),
                }
            }
        }
        prop_assert!(errors <= 1);
    }

    #[test]
    fn printed_entries_read_back(
        v6 in any::<bool>(),
        ips in (any::<bool>(), any::<bool>()).prop_flat_map(|(v6, d6)| (any_ip(v6), any_ip(v6), any_ip(d6))),
        ports in any::<(u16, u16, u16)>(),
        expires in 0u64..100_000,
        tcp in any::<bool>(),
    ) {
        let _ = v6;
        let (c, v, d) = ips;
        let (proto, state) = if tcp { ("TCP", "ESTABLISHED") } else { ("UDP", "UDP") };
        let line = format!(
            "{proto:<3} {} {:04X} {} {:04X} {} {:04X} {state:<11} {expires:>7}\n",
            kernel_addr(c), ports.0, kernel_addr(v), ports.1, kernel_addr(d), ports.2
        );
        let text = format!("{HEADER}{line}");
        let got: Vec<_> = ConnReader::new(text.as_bytes()).collect();
        prop_assert_eq!(got.len(), 1);
        let e = got.into_iter().next().unwrap().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(e.protocol, if tcp { Protocol::Tcp } else { Protocol::Udp });
        prop_assert_eq!(e.client, SocketAddr::new(c, ports.0));
        prop_assert_eq!(e.virtual_addr, SocketAddr::new(v, ports.1));
        prop_assert_eq!(e.real, SocketAddr::new(d, ports.2));
        prop_assert_eq!(e.state, if tcp { ConnState::Established } else { ConnState::Udp });
        prop_assert_eq!(e.expires_secs, expires);
    }
}
