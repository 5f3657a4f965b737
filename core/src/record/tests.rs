use super::*;
use alloc::vec;
use proptest::prelude::*;

fn sample(body: &[u8]) -> Vec<u8> {
    let header = Header {
        queue_id: 3,
        flag: 7,
        queue_offset: 42,
        phys_offset: 1000,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: Host::V4([127, 0, 0, 1], 5555),
        store_timestamp: 1_700_000_000_001,
        store_host: Host::V4([10, 0, 0, 2], 10911),
        reconsume_times: 1,
        prepared_offset: 0,
    };
    let mut props = Vec::new();
    push_prop(&mut props, "TAGS", "TagA");
    push_prop(&mut props, "KEYS", "k1 k2");
    let mut out = Vec::new();
    encode(&mut out, &header, body, "TopicTest", &props).unwrap();
    out
}

#[test]
fn roundtrip() {
    let bytes = sample(b"hello");
    assert_eq!(bytes.len(), FIXED_LEN_V4 + 5 + 9 + 21 + CRC_RESERVED);
    let Decoded::Record(r) = decode(&bytes, 1 << 20).unwrap() else {
        panic!("not a record")
    };
    assert_eq!(r.body, b"hello");
    assert_eq!(r.topic, "TopicTest");
    assert_eq!(r.header.queue_offset, 42);
    assert_eq!(r.header.born_host, Host::V4([127, 0, 0, 1], 5555));
    assert_eq!(r.prop("TAGS"), Some("TagA"));
    assert_eq!(r.prop("KEYS"), Some("k1 k2"));
    assert_eq!(r.props().count(), 2);
    assert_eq!(r.body_crc, crc32(b"hello"));
}

#[test]
fn props_of_is_prop_per_key() {
    let bytes = sample(b"hello");
    let Decoded::Record(r) = decode(&bytes, 1 << 20).unwrap() else {
        panic!("not a record")
    };
    let keys = ["KEYS", "NOPE", "TAGS", "TAGS", "CRC", ""];
    let by_pairs = |k: &str| r.props().find(|(pk, _)| *pk == k).map(|(_, v)| v);
    assert_eq!(r.props_of(keys), keys.map(by_pairs));
    assert_eq!(keys.map(|k| r.prop(k)), keys.map(by_pairs));
    assert_eq!(r.props_of(["TAGS", "KEYS"]), [Some("TagA"), Some("k1 k2")]);
}

#[test]
fn split_pair_splits_as_props_does() {
    for bytes in [
        &b"a\x01b\x02rest"[..],
        b"ab\x02c\x01d\x02",
        b"a\x01b",
        b"\x01b\x02",
        b"a\x01\x02",
        b"a\x00\x01b\x00\x02",
        b"",
    ] {
        let split = split_pair(bytes).map(|(k, v, _)| (k, v));
        let by_props = Props::new(bytes)
            .next()
            .map(|(k, v)| (k.as_bytes(), v.as_bytes()));
        assert_eq!(split, by_props, "{bytes:?}");
    }
    assert_eq!(
        split_pair(b"a\x01b\x02rest"),
        Some((&b"a"[..], &b"b"[..], &b"rest"[..]))
    );
}

#[test]
fn encode_viewed_is_what_decode_reads() {
    let mut props = Vec::new();
    push_prop(&mut props, "TAGS", "TagA");
    for (born, store) in [
        (
            Host::V4([127, 0, 0, 1], 5555),
            Host::V4([10, 0, 0, 2], 10911),
        ),
        (Host::V4([0; 4], 0), Host::Unspecified),
        (Host::V6([1; 16], 7), Host::V4([0; 4], 0)),
    ] {
        let header = Header {
            queue_id: 3,
            queue_offset: 42,
            phys_offset: 1000,
            sys_flag: sys_flag::TRANSACTION_PREPARED_TYPE | sys_flag::STOREHOST_V6,
            born_host: born,
            store_host: store,
            ..Header::default()
        };
        let mut out = vec![1, 2, 3];
        let view = encode_viewed(&mut out, &header, b"body", "T", &props).unwrap();
        assert_eq!(decode(&out[3..], 1 << 20), Ok(Decoded::Record(view)));
    }
}

#[test]
fn every_flipped_bit_is_detected() {
    let bytes = sample(b"some body bytes");
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            match decode(&b, 1 << 20) {
                Ok(Decoded::Record(_)) => panic!("flip at byte {i} bit {bit} not detected"),
                Ok(Decoded::Blank { .. } | Decoded::Repaired { .. }) => {
                    panic!("flip at byte {i} decoded as blank")
                }
                Ok(Decoded::Incomplete { .. }) | Err(_) => {}
            }
        }
    }
}

#[test]
fn every_prefix_is_incomplete_or_error() {
    let bytes = sample(b"xyz");
    for cut in 0..bytes.len() {
        assert!(matches!(
            decode(&bytes[..cut], 1 << 20),
            Ok(Decoded::Incomplete { .. })
        ));
    }
}

#[test]
fn blank_and_bad_magic() {
    let mut b = vec![];
    encode_blank(&mut b, 4096);
    assert_eq!(decode(&b, 1 << 20), Ok(Decoded::Blank { len: 4096 }));
    b[4] = 0;
    assert!(matches!(decode(&b, 1 << 20), Err(Corruption::BadMagic(_))));
}

#[test]
fn oversize_length_is_rejected_without_reading() {
    let mut b = sample(b"abc");
    b[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(decode(&b, 1 << 20), Err(Corruption::BadTotalSize(u32::MAX)));
}

/// The encoder as it was before the CRC combine and the one-array header: every field
/// pushed in turn, the record CRC one more pass over all the bytes.
fn encode_reference(header: &Header, body: &[u8], topic: &str, props: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let total = encoded_len(header, body.len(), topic.len(), props.len());
    let mut sys = header.sys_flag & !(sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6);
    if header.born_host.is_v6() {
        sys |= sys_flag::BORNHOST_V6;
    }
    if header.store_host.is_v6() {
        sys |= sys_flag::STOREHOST_V6;
    }
    let host = |out: &mut Vec<u8>, h: Host| match h {
        Host::V4(ip, port) => {
            out.extend_from_slice(&ip);
            out.extend_from_slice(&u32::from(port).to_be_bytes());
        }
        Host::V6(ip, port) => {
            out.extend_from_slice(&ip);
            out.extend_from_slice(&u32::from(port).to_be_bytes());
        }
        Host::Unspecified => out.extend_from_slice(&[0; 8]),
    };
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&MESSAGE_MAGIC.to_be_bytes());
    out.extend_from_slice(&crc32(body).to_be_bytes());
    out.extend_from_slice(&header.queue_id.to_be_bytes());
    out.extend_from_slice(&header.flag.to_be_bytes());
    out.extend_from_slice(&header.queue_offset.to_be_bytes());
    out.extend_from_slice(&header.phys_offset.to_be_bytes());
    out.extend_from_slice(&sys.to_be_bytes());
    out.extend_from_slice(&header.born_timestamp.to_be_bytes());
    host(&mut out, header.born_host);
    out.extend_from_slice(&header.store_timestamp.to_be_bytes());
    host(&mut out, header.store_host);
    out.extend_from_slice(&header.reconsume_times.to_be_bytes());
    out.extend_from_slice(&header.prepared_offset.to_be_bytes());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    out.push(topic.len() as u8);
    out.extend_from_slice(topic.as_bytes());
    out.extend_from_slice(&((props.len() + CRC_RESERVED) as u16).to_be_bytes());
    out.extend_from_slice(props);
    let crc = crc32(&out);
    out.extend_from_slice(CRC_KEY.as_bytes());
    out.push(NAME_VALUE_SEPARATOR);
    let mut v = crc;
    for _ in 0..10 {
        out.push(b'0' + (v % 10) as u8);
        v /= 10;
    }
    out.push(PROPERTY_SEPARATOR);
    out
}

fn any_host() -> impl Strategy<Value = Host> {
    prop_oneof![
        Just(Host::Unspecified),
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| Host::V4(ip, port)),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| Host::V6(ip, port)),
    ]
}

fn any_header() -> impl Strategy<Value = Header> {
    (
        (
            any::<u32>(),
            any::<i32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
        ),
        (any::<u64>(), any_host(), any::<u64>(), any_host()),
        (any::<u32>(), any::<u64>()),
    )
        .prop_map(
            |(
                (queue_id, flag, queue_offset, phys_offset, sys_flag),
                (born_timestamp, born_host, store_timestamp, store_host),
                (reconsume_times, prepared_offset),
            )| Header {
                queue_id,
                flag,
                queue_offset,
                phys_offset,
                sys_flag,
                born_timestamp,
                born_host,
                store_timestamp,
                store_host,
                reconsume_times,
                prepared_offset,
            },
        )
}

proptest! {
    #[test]
    fn encode_writes_the_reference_bytes(
        header in any_header(),
        body in proptest::collection::vec(any::<u8>(), 0..3000),
        topic in "[a-zA-Z0-9_%|-]{0,255}",
        pairs in proptest::collection::vec(("[A-Z]{1,8}", "[ -~]{0,40}"), 0..4),
        before in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let mut props = Vec::new();
        for (k, v) in &pairs {
            push_prop(&mut props, k, v);
        }
        let mut out = before.clone();
        let view = encode_viewed(&mut out, &header, &body, &topic, &props).unwrap();
        let expect = encode_reference(&header, &body, &topic, &props);
        prop_assert_eq!(&out[..before.len()], &before[..]);
        prop_assert_eq!(&out[before.len()..], &expect[..]);
        prop_assert_eq!(decode(&expect, u32::MAX), Ok(Decoded::Record(view)));
    }
}

#[test]
fn props_validation() {
    assert!(validate_props(b""));
    assert!(validate_props(b"a\x01b\x02"));
    assert!(!validate_props(b"a\x01b"));
    assert!(!validate_props(b"\x01b\x02"));
    assert!(!validate_props(b"ab\x02"));
    assert!(!validate_props(b"a\x01b\x01c\x02"));
}
