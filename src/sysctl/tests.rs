use super::*;

#[test]
fn names_and_paths() {
    assert_eq!(
        knobs::EXPIRE_NODEST_CONN.name(),
        "net.ipv4.vs.expire_nodest_conn"
    );
    assert_eq!(
        knobs::arp_announce("eth0").map(|k| k.path()).ok(),
        Some(PathBuf::from("/proc/sys/net/ipv4/conf/eth0/arp_announce"))
    );
}

#[test]
fn ranges_are_checked_with_knob_and_reason() {
    match knobs::SYNC_RETRIES.check(&4) {
        Err(SysctlError::Invalid {
            knob,
            value,
            reason,
        }) => {
            assert_eq!(
                (knob.as_str(), value.as_str()),
                ("net.ipv4.vs.sync_retries", "4")
            );
            assert_eq!(reason, "must be from 0 to 3");
        }
        other => panic!("{other:?}"),
    }
    assert!(knobs::SYNC_RETRIES.check(&-1).is_err());
    assert!(knobs::EST_NICE.check(&-20).is_ok() && knobs::EST_NICE.check(&20).is_err());
    for ok in [1, 2, 4, 1 << 30] {
        assert!(knobs::SYNC_PORTS.check(&ok).is_ok(), "{ok}");
    }
    for bad in [0, 3, 6, -2, i32::MIN] {
        assert!(knobs::SYNC_PORTS.check(&bad).is_err(), "{bad}");
    }
    assert!(knobs::DROP_ENTRY.check(&3).is_ok() && knobs::DROP_ENTRY.check(&4).is_err());
    assert!(knobs::SYNC_REFRESH_PERIOD.check(&2_147_483).is_ok());
    assert!(knobs::SYNC_REFRESH_PERIOD.check(&2_147_484).is_err());
}

#[test]
fn typed_values_refuse_what_the_kernel_does_not_define() {
    assert!(knobs::CONN_REUSE_MODE.check(&ConnReuseMode::all()).is_ok());
    assert!(
        knobs::CONN_REUSE_MODE
            .check(&ConnReuseMode::from_bits_retain(4))
            .is_err()
    );
    let ignore = knobs::arp_ignore("all").expect("knob");
    assert!(ignore.check(&ArpIgnore::Never).is_ok());
    assert!(ignore.check(&ArpIgnore::Other(5)).is_err());
    let announce = knobs::arp_announce("default").expect("knob");
    assert!(announce.check(&ArpAnnounce::Other(3)).is_err());
}

#[test]
fn values_parse_as_the_kernel_prints_them() {
    assert_eq!(bool::parse("0"), Some(false));
    assert_eq!(bool::parse("2"), Some(true));
    assert_eq!(bool::parse("yes"), None);
    assert_eq!(true.render(), "1");
    assert_eq!(ConnReuseMode::parse("3"), Some(ConnReuseMode::all()));
    assert_eq!(ConnReuseMode::parse("0"), Some(ConnReuseMode::empty()));
    assert_eq!(ArpIgnore::parse("8"), Some(ArpIgnore::Never));
    assert_eq!(ArpIgnore::parse("5"), Some(ArpIgnore::Other(5)));
    assert_eq!(ArpAnnounce::parse("2"), Some(ArpAnnounce::BestLocalAddress));
    assert_eq!(ArpAnnounce::BestLocalAddress.render(), "2");
    assert_eq!(u64::parse("18446744073709551615"), Some(u64::MAX));
}

#[test]
fn bad_names_are_refused() {
    for bad in ["", ".", "..", "a/b", "sixteen-bytes-xx", "a b"] {
        assert!(
            matches!(knobs::arp_ignore(bad), Err(SysctlError::InvalidName { .. })),
            "{bad:?}"
        );
    }
    for bad in ["", "A", "x/y", "..", "conn.reuse"] {
        assert!(knobs::ipvs_integer(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn an_invalid_value_is_refused_before_the_namespace_is_entered() {
    // Pinned from a file that is not a network namespace: entering it
    // fails, so the range check must answer first.
    let pinned = NetNs::path("/proc/self/status").pin().unwrap();
    let ns = Sysctls::new().netns(pinned);
    let err = ns.write(&knobs::SYNC_VERSION, &2).err();
    assert!(matches!(err, Some(SysctlError::Invalid { .. })), "{err:?}");
    let err = ns.write(&knobs::SYNC_VERSION, &1).err();
    assert!(matches!(err, Some(SysctlError::Io { .. })), "{err:?}");
}

#[test]
fn arp_values_round_trip_through_their_numbers() {
    use super::value::KnobValue;
    for (v, text) in [
        (ArpIgnore::AnyAddress, "0"),
        (ArpIgnore::IncomingInterface, "1"),
        (ArpIgnore::IncomingInterfaceSameSubnet, "2"),
        (ArpIgnore::NotHostScope, "3"),
        (ArpIgnore::Never, "8"),
    ] {
        assert_eq!(v.render(), text);
        assert_eq!(ArpIgnore::parse(text), Some(v));
        assert_eq!(v.refuse(), None);
    }
    assert_eq!(ArpIgnore::parse("5"), Some(ArpIgnore::Other(5)));
    assert_eq!(
        ArpIgnore::Other(5).refuse().as_deref(),
        Some("5 is not one of 0, 1, 2, 3, 8")
    );
    for (v, text) in [
        (ArpAnnounce::AnyAddress, "0"),
        (ArpAnnounce::AvoidOtherSubnets, "1"),
        (ArpAnnounce::BestLocalAddress, "2"),
    ] {
        assert_eq!(v.render(), text);
        assert_eq!(ArpAnnounce::parse(text), Some(v));
    }
    assert_eq!(
        ArpAnnounce::Other(3).refuse().as_deref(),
        Some("3 is not one of 0, 1, 2")
    );
    assert_eq!(ArpAnnounce::parse("x"), None);
}
