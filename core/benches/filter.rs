//! The cost per message of a consumer's filter: a SQL92 expression against a tag filter.
//!
//! `cargo bench -p rocklet-core --bench filter` — figures go to docs/benchmarks.md (issue 34).
//! Each iteration decides one message: the tag filter compares the message's tag (or its tag
//! hash, as a consume-queue unit carries it); the SQL92 filters look properties up in the
//! message's decoded property list (linear, as a record's few properties are).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rocklet_core::filter::Sql92;
use rocklet_core::{tag_hash, TagFilter};

/// A message's properties as a record carries them (RocketMQ's system ones and two of the user's).
const PROPS: [(&str, &str); 7] = [
    ("TAGS", "TagB"),
    ("KEYS", "order-4711"),
    ("UNIQ_KEY", "7F0000010E1C18B4AAC2776F5E8A0000"),
    ("WAIT", "true"),
    ("region", "eu-west"),
    ("price", "129.90"),
    ("CLUSTER", "DefaultCluster"),
];

fn lookup(name: &str) -> Option<&'static str> {
    PROPS.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
}

fn filters(c: &mut Criterion) {
    let mut g = c.benchmark_group("filter per message");
    let tags = TagFilter::parse("TagA || TagB || TagC");
    g.bench_function("tag filter, TagA || TagB || TagC", |b| {
        b.iter(|| black_box(tags.matches(black_box(Some("TagB")))));
    });
    let hashes = ["TagA", "TagB", "TagC"].map(|t| tag_hash(Some(t)));
    let message_hash = tag_hash(Some("TagB"));
    g.bench_function("tag hash, 3 hashes", |b| {
        b.iter(|| black_box(hashes.contains(black_box(&message_hash))));
    });
    for (name, expr) in [
        ("sql92, one property", "region = 'eu-west'"),
        (
            "sql92, typical",
            "TAGS IN ('TagA', 'TagB') AND region = 'eu-west' AND price > 100.0",
        ),
        (
            "sql92, 8 conditions",
            "(TAGS = 'TagA' OR TAGS = 'TagB') AND KEYS STARTSWITH 'order-' AND region <> 'us' \
             AND price BETWEEN 10.0 AND 1000.0 AND WAIT = TRUE AND missing IS NULL",
        ),
    ] {
        let f = Sql92::parse(expr).expect("parses");
        assert!(f.matches(lookup), "{expr} selects the message");
        g.bench_function(name, |b| b.iter(|| black_box(f.matches(black_box(lookup)))));
    }
    g.bench_function("sql92 parse, typical", |b| {
        b.iter(|| {
            black_box(Sql92::parse(black_box(
                "TAGS IN ('TagA', 'TagB') AND region = 'eu-west' AND price > 100.0",
            )))
        });
    });
    g.finish();
}

criterion_group!(benches, filters);
criterion_main!(benches);
