//! A message's way out of the log: where a delayed one is written, its offset message id,
//! and the [`Message`] a record reads as.

use super::*;

pub(super) struct Plan {
    pub(super) props: Vec<u8>,
    pub(super) delay_due: Option<Millis>,
    pub(super) level: Option<u32>,
}

impl Plan {
    /// Where the record of a message for `topic`'s queue `queue_id` is written: there, or,
    /// when it is delayed, in the schedule topic (a level's queue) or the timer topic, with
    /// its real topic, queue and due time in its properties.
    pub(super) fn route<'t>(&mut self, topic: &'t str, queue_id: u32) -> (&'t str, u32) {
        let Some(due) = self.delay_due else {
            return (topic, queue_id);
        };
        record::push_prop(&mut self.props, prop::REAL_TOPIC, topic);
        record::push_prop(
            &mut self.props,
            prop::REAL_QID,
            itoa(u64::from(queue_id)).as_str(),
        );
        record::push_prop(&mut self.props, prop::TIMER_OUT_MS, itoa(due).as_str());
        match self.level {
            Some(l) => (topic::SCHEDULE, l - 1),
            None => (topic::TIMER, 0),
        }
    }
}

/// RocketMQ's offset message id of the record at `offset` stored by `store_host`
/// ([`OffsetMsgId`]: 32 hex digits for an IPv4 host, 56 for IPv6), as a `String`.
#[must_use]
pub fn offset_msg_id(store_host: Host, offset: u64) -> String {
    String::from(OffsetMsgId::new(store_host, offset).as_str())
}

pub(super) fn message_from(r: &RecordView<'_>, offset: u64, store_host: Host) -> Message {
    let mut tag = None;
    let mut keys = Vec::new();
    let mut msg_id = None;
    let mut properties = Vec::new();
    for (k, v) in r.props() {
        match k {
            prop::TAGS => tag = Some(String::from(v)),
            prop::KEYS => {
                keys = v
                    .split(' ')
                    .filter(|k| !k.is_empty())
                    .map(String::from)
                    .collect()
            }
            prop::UNIQ_KEY => msg_id = Some(String::from(v)),
            k if prop::INTERNAL.contains(&k) => {}
            k => properties.push((String::from(k), String::from(v))),
        }
    }
    Message {
        topic: String::new(),
        queue_id: 0,
        queue_offset: 0,
        offset,
        msg_id: msg_id.unwrap_or_else(|| offset_msg_id(store_host, offset)),
        tag,
        keys,
        properties,
        body: r.body.to_vec(),
        born_timestamp: r.header.born_timestamp,
        store_timestamp: r.header.store_timestamp,
        reconsume_times: r.header.reconsume_times,
        flag: r.header.flag,
        sys_flag: r.header.sys_flag,
        born_host: r.header.born_host,
        store_host: r.header.store_host,
    }
}

/// Formats an integer without allocating (and without the formatting machinery: it is on
/// the write path of every transaction).
pub(super) fn itoa(mut v: u64) -> Digits {
    let mut d = Digits {
        buf: [0; 20],
        start: 20,
    };
    loop {
        d.start -= 1;
        d.buf[d.start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    d
}

/// Decimal digits from [`itoa`].
pub(super) struct Digits {
    pub(super) buf: [u8; 20],
    pub(super) start: usize,
}

impl Digits {
    pub(super) fn as_str(&self) -> &str {
        // Only ASCII digits are ever written.
        core::str::from_utf8(&self.buf[self.start..]).unwrap_or_default()
    }
}

#[cfg(test)]
mod itoa_tests {
    use alloc::string::ToString;

    #[test]
    fn moved_finds_what_was_inserted_in_any_order() {
        let mut m = super::Moved::default();
        let mut reference = alloc::collections::BTreeMap::new();
        // Mostly ascending, some out of order, one key twice.
        for (i, off) in [10u64, 20, 15, 30, 5, 40, 20, 35, 50]
            .into_iter()
            .enumerate()
        {
            m.insert(off, (i as u32, off * 2));
            reference.insert(off, (i as u32, off * 2));
        }
        for off in 0..60 {
            assert_eq!(m.get(off), reference.get(&off).copied(), "{off}");
        }
    }

    #[test]
    fn itoa_is_display() {
        for v in [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            assert_eq!(super::itoa(v).as_str(), v.to_string());
        }
    }
}
