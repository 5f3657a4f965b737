use super::{Message, TagFilter};
use crate::record::Host;
use alloc::string::ToString;
use alloc::vec;

fn message(keys: &[&str]) -> Message {
    Message {
        topic: "T".into(),
        queue_id: 0,
        queue_offset: 0,
        offset: 0,
        msg_id: "id".into(),
        tag: Some("TagA".into()),
        keys: keys.iter().map(ToString::to_string).collect(),
        properties: vec![("a".into(), "5".into())],
        body: vec![],
        born_timestamp: 0,
        store_timestamp: 0,
        reconsume_times: 0,
        flag: 0,
        sys_flag: 0,
        born_host: Host::V4([127, 0, 0, 1], 1),
        store_host: Host::V4([127, 0, 0, 1], 2),
    }
}

#[test]
fn sql92_sees_tags_keys_joined_by_a_space_and_user_properties() {
    let f = |e: &str| TagFilter::sql92(e).unwrap();
    let two = message(&["k1", "k2"]);
    assert!(f("TAGS = 'TagA' AND a > 4").matches_message(&two));
    assert!(f("KEYS = 'k1 k2'").matches_message(&two));
    assert!(!f("KEYS = 'k1'").matches_message(&two));
    assert!(f("KEYS = 'k1'").matches_message(&message(&["k1"])));
    assert!(f("KEYS IS NULL").matches_message(&message(&[])));
    assert!(
        !f("b = 1").matches_message(&two),
        "a missing property is NULL"
    );
    // Equal when the texts are; a refusal names where.
    assert_eq!(f("a > 4"), f("a > 4"));
    let e = TagFilter::sql92("a >").unwrap_err();
    assert_eq!(e.position, 3);
}
