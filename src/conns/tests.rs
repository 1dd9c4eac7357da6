use super::*;

const HEADER: &str =
    "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n";
const SYNC_HEADER: &str =
    "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Origin Expires\n";

fn read(text: &str) -> Vec<Result<Connection, ConnError>> {
    ConnReader::new(text.as_bytes()).collect()
}

fn parse_err(text: &str) -> ConnParseError {
    match read(text).pop() {
        Some(Err(ConnError::Parse(e))) => e,
        other => panic!("expected a parse error for {text:?}, got {other:?}"),
    }
}

#[test]
fn ipv4_tcp_entry() {
    let text =
        format!("{HEADER}TCP 0A000002 9C40 0A090909 0050 0A010002 1F90 ESTABLISHED     899\n");
    let e = read(&text).remove(0).expect("entry");
    assert_eq!(e.protocol, Protocol::Tcp);
    assert_eq!(e.client, "10.0.0.2:40000".parse().unwrap());
    assert_eq!(e.virtual_addr, "10.9.9.9:80".parse().unwrap());
    assert_eq!(e.real, "10.1.0.2:8080".parse().unwrap());
    assert_eq!(e.state, ConnState::Established);
    assert_eq!(e.expires_secs, 899);
    assert_eq!(e.persistence, None);
    assert_eq!(e.origin, None);
    assert_eq!(e.fwmark(), None);
}

#[test]
fn ipv6_entry_and_ipv6_destination_of_an_ipv4_service() {
    let text = format!(
        "{HEADER}UDP 2001:0db8:0000:0000:0000:0000:0000:0002 A000 2001:0db8:0000:0000:0000:0000:0000:0009 0035 \
         2001:0db8:0001:0000:0000:0000:0000:0002 0035 UDP             299\n\
         TCP 0A000002 9C40 0A090909 0050 2001:0db8:0001:0000:0000:0000:0000:0002 0050 SYN_RECV         59\n"
    );
    let mut entries = read(&text).into_iter();
    let v6 = entries.next().unwrap().expect("v6 entry");
    assert_eq!(v6.client, "[2001:db8::2]:40960".parse().unwrap());
    assert_eq!(v6.real, "[2001:db8:1::2]:53".parse().unwrap());
    assert_eq!(v6.state, ConnState::Udp);
    let mixed = entries.next().unwrap().expect("mixed entry");
    assert!(mixed.client.is_ipv4() && mixed.real.is_ipv6());
    assert_eq!(mixed.state, ConnState::SynRecv);
}

#[test]
fn persistence_engine_columns_and_fwmark_templates() {
    let text = format!(
        "{HEADER}UDP 0A000002 13C4 0A090909 13C4 0A010002 13C4 UDP             179 sip a84b4c76e66710\n\
         IP  0A000002 0000 00000007 0000 0A010002 0000 ASSURED         359\n"
    );
    let mut entries = read(&text).into_iter();
    let sip = entries.next().unwrap().expect("sip entry");
    let pe = sip.persistence.expect("pe columns");
    assert_eq!(
        (pe.engine.as_str(), pe.data.as_str()),
        ("sip", "a84b4c76e66710")
    );
    let template = entries.next().unwrap().expect("template");
    assert_eq!(template.protocol, Protocol::Other(0));
    assert_eq!(template.fwmark(), Some(7));
    assert_eq!(template.state, ConnState::Assured);
}

#[test]
fn sync_view_has_origin_before_expiry() {
    let text = format!(
        "{SYNC_HEADER}TCP 0A000002 9C40 0A090909 0050 0A010002 1F90 ESTABLISHED LOCAL      899\n\
         TCP 0A000003 9C40 0A090909 0050 0A010002 1F90 CLOSE       SYNC         9\n"
    );
    let mut r = ConnReader::new(text.as_bytes());
    let a = r.next().unwrap().expect("local");
    assert_eq!(r.table(), Some(Table::ConnSync));
    assert_eq!(a.origin, Some(Origin::Local));
    let b = r.next().unwrap().expect("sync");
    assert_eq!((b.origin, b.expires_secs), (Some(Origin::Sync), 9));
    assert!(r.next().is_none());
}

#[test]
fn empty_table_has_only_the_header() {
    assert!(read(HEADER).is_empty());
}

#[test]
fn errors_name_line_and_field() {
    let e = parse_err("");
    assert_eq!((e.line, e.field), (1, Field::Header));
    let e = parse_err("garbage\n");
    assert_eq!((e.line, e.field), (1, Field::Header));
    let ok = "TCP 0A000002 9C40 0A090909 0050 0A010002 1F90 ESTABLISHED     899\n";
    let cases = [
        (
            "TCX 0A000002 9C40 0A090909 0050 0A010002 1F90 NONE 1",
            Field::Protocol,
        ),
        (
            "TCP 0A00002 9C40 0A090909 0050 0A010002 1F90 NONE 1",
            Field::ClientAddress,
        ),
        (
            "TCP 0A000002 9C4G 0A090909 0050 0A010002 1F90 NONE 1",
            Field::ClientPort,
        ),
        (
            "TCP 0A000002 9C40 zz 0050 0A010002 1F90 NONE 1",
            Field::VirtualAddress,
        ),
        (
            "TCP 0A000002 9C40 0A090909 10050 0A010002 1F90 NONE 1",
            Field::VirtualPort,
        ),
        (
            "TCP 0A000002 9C40 0A090909 0050 2001:db8:::1 1F90 NONE 1",
            Field::RealAddress,
        ),
        ("TCP 0A000002 9C40 0A090909 0050 0A010002", Field::RealPort),
        (
            "TCP 0A000002 9C40 0A090909 0050 0A010002 1F90",
            Field::State,
        ),
        (
            "TCP 0A000002 9C40 0A090909 0050 0A010002 1F90 NONE -1",
            Field::Expires,
        ),
        (
            "TCP 0A000002 9C40 ::1 0050 0A010002 1F90 NONE 1",
            Field::VirtualAddress,
        ),
    ];
    for (line, field) in cases {
        let e = parse_err(&format!("{HEADER}{ok}{line}\n"));
        assert_eq!((e.line, e.field), (3, field), "{line}: {e}");
        assert!(
            e.to_string().starts_with("connection table line 3: "),
            "{e}"
        );
    }
    let e = parse_err(&format!(
        "{SYNC_HEADER}TCP 0A000002 9C40 0A090909 0050 0A010002 1F90 NONE MAYBE 1\n"
    ));
    assert_eq!(e.field, Field::Origin);
    let e = parse_err(&format!(
        "{HEADER}TCP 0A000002 9C40 0A090909 0050 0A010002 1F90 NONE 1x\n"
    ));
    assert_eq!(e.field, Field::Expires);
}

#[test]
fn invalid_utf8_is_an_error_not_a_panic() {
    let mut bytes = HEADER.as_bytes().to_vec();
    bytes.extend_from_slice(b"TCP \xff\xfe\n");
    let got: Vec<_> = ConnReader::new(bytes.as_slice()).collect();
    match got.as_slice() {
        [Err(ConnError::Parse(e))] => assert_eq!((e.line, e.field), (2, Field::Line)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn iteration_stops_after_the_first_error() {
    let text = format!("{HEADER}bad\nTCP 0A000002 9C40 0A090909 0050 0A010002 1F90 NONE 1\n");
    let got = read(&text);
    assert_eq!(got.len(), 1);
    assert!(got[0].is_err());
}

#[test]
fn missing_file_names_path_and_namespace() {
    let ns = NetNs::Current;
    let err = open(&ns, "/nonexistent/ip_vs_conn").expect_err("error");
    let text = err.to_string();
    assert!(
        text.contains("/nonexistent/ip_vs_conn") && text.contains("current"),
        "{text}"
    );
}
