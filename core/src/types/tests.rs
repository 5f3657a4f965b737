use super::OffsetMsgId;
use crate::record::Host;

const V6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

#[test]
fn offset_message_ids_have_rocketmq_s_layout_for_both_address_families() {
    let v4 = OffsetMsgId::new(Host::V4([127, 0, 0, 1], 10911), 0x1234);
    assert_eq!(v4.as_str(), "7F00000100002A9F0000000000001234");
    let v6 = OffsetMsgId::new(Host::V6(V6, 10911), 0x1234);
    assert_eq!(
        v6.as_str(),
        "20010DB8000000000000000000000001\
         00002A9F\
         0000000000001234"
    );
    assert_eq!(v6.as_str().len(), 56);
    let none = OffsetMsgId::new(Host::Unspecified, u64::MAX);
    assert_eq!(none.as_str(), "0000000000000000FFFFFFFFFFFFFFFF");
}

#[test]
fn offset_message_ids_parse_back_to_host_and_offset() {
    for host in [Host::V4([10, 0, 0, 2], 65535), Host::V6(V6, 8081)] {
        for offset in [0, 4242, u64::MAX] {
            let id = OffsetMsgId::new(host, offset);
            assert_eq!(OffsetMsgId::parse(id.as_str()), Some((host, offset)));
            let lower = id.as_str().to_ascii_lowercase();
            assert_eq!(OffsetMsgId::parse(&lower), Some((host, offset)));
        }
    }
    assert_eq!(
        OffsetMsgId::parse("0000000000000000FFFFFFFFFFFFFFFF"),
        Some((Host::V4([0; 4], 0), u64::MAX))
    );
    for bad in [
        "",
        "not-an-id",
        // A client's id (RocketMQ 4 UNIQ_KEY: 32 hex digits of another layout would
        // parse; these do not: 34 characters, and a port above 65535).
        "0100000000000000000000000000000000",
        "7F000001000100000000000000001234",
        "7F00000100002A9F000000000000123G",
        "7F00000100002A9F00000000000012345",
    ] {
        assert_eq!(OffsetMsgId::parse(bad), None, "{bad}");
    }
}
