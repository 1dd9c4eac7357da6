//! Pure codec properties: what is encoded decodes to the same value, and
//! what decodes re-encodes to the same bytes.

mod strategies;

use ipvsctl::codec::frame::{self, FrameBody, NLM_F_ACK};
use ipvsctl::codec::{IpvsMessage, reply, request};
use ipvsctl::model::{DaemonRole, SyncDaemon, Timeouts};
use proptest::prelude::*;

/// Encodes a message as a request datagram and decodes its body back.
fn wire_roundtrip(msg: &IpvsMessage) -> (Vec<u8>, IpvsMessage) {
    let mut out = Vec::new();
    frame::encode_request(&mut out, msg, 0x20, 42, NLM_F_ACK).unwrap();
    let f = frame::frames(&out).next().unwrap().unwrap();
    assert_eq!(f.header.seq, 42);
    let FrameBody::Data(body) = f.body else {
        panic!("not data")
    };
    (out.clone(), frame::decode_message(body).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// decode(encode(x)) == x for services: requests and replies share the
    /// attribute layout, so a NEW_SERVICE request decodes as a service.
    #[test]
    fn service_roundtrip(vs in strategies::virtual_server(true)) {
        let msg = request::new_service(&vs).unwrap();
        let (_, back) = wire_roundtrip(&msg);
        prop_assert_eq!(&back, &msg);
        prop_assert_eq!(reply::service(back).unwrap().service, vs);
    }

    #[test]
    fn destination_roundtrip(
        (vs, rs) in strategies::virtual_server(false)
            .prop_flat_map(|vs| { let f = vs.family(); (Just(vs), strategies::real_server(f)) })
    ) {
        let msg = request::new_dest(&vs.key, &rs).unwrap();
        let (_, back) = wire_roundtrip(&msg);
        prop_assert_eq!(&back, &msg);
        prop_assert_eq!(reply::destination(back, vs.family()).unwrap().server, rs);
    }

    /// Emitting a decoded message gives the same bytes back.
    #[test]
    fn reencode_is_identical(vs in strategies::virtual_server(true)) {
        let msg = request::set_service(&vs).unwrap();
        let (bytes, back) = wire_roundtrip(&msg);
        let mut again = Vec::new();
        frame::encode_request(&mut again, &back, 0x20, 42, NLM_F_ACK).unwrap();
        prop_assert_eq!(bytes, again);
    }

    /// Arbitrary bytes never panic the decoders.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for f in frame::frames(&bytes).flatten() {
            if let FrameBody::Data(body) = f.body
                && let Ok(m) = frame::decode_message(body) {
                    let _ = reply::service(m.clone());
                    let _ = reply::destination(m.clone(), ipvsctl::model::AddressFamily::Inet);
                    let _ = reply::daemon(m.clone());
                    let _ = reply::timeouts(&m);
                    let _ = reply::info(&m);
                }
        }
        if let Ok(m) = frame::decode_message(&bytes) {
            let _ = reply::service(m);
        }
    }
}

#[test]
fn daemon_and_config_roundtrip() {
    let mut d = SyncDaemon::new(DaemonRole::Backup, "eth0");
    d.sync_id = 7;
    d.max_len = Some(1472);
    d.group = Some("239.1.2.3".parse().unwrap());
    d.port = Some(8849);
    d.ttl = Some(3);
    let (_, back) = wire_roundtrip(&request::new_daemon(&d).unwrap());
    assert_eq!(reply::daemon(back).unwrap(), d);

    let t = Timeouts::new(900, 120, 300);
    let (_, back) = wire_roundtrip(&request::set_config(&t).unwrap());
    assert_eq!(reply::timeouts(&back).unwrap(), t);
}
