//! A plain send loop, for profilers: `cargo run --release -p rocklet-core --example send_loop`.
use rocklet_core::{Broker, Config, MemStorage, NewMessage, Request, Resolution};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "send".into());
    let n: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let mut b = Broker::open(Config::default(), MemStorage::new(), 0).expect("open");
    let body = vec![7u8; 1024];
    let t = std::time::Instant::now();
    for _ in 0..n {
        if mode == "txn" {
            let req = Request::Prepare {
                group: "G".into(),
                message: NewMessage::new("T", body.clone()),
                check_immunity_ms: None,
            };
            let rocklet_core::Reply::Sent(r) = b.execute(1, req).expect("prepare") else {
                panic!()
            };
            let end = Request::EndTransaction {
                txn: r[0].txn.unwrap(),
                resolution: Resolution::Commit,
                group: Some("G".into()),
                from_check: false,
            };
            b.execute(1, end).expect("end");
        } else {
            b.execute(
                1,
                Request::Send {
                    messages: vec![NewMessage::new("T", body.clone())],
                },
            )
            .expect("send");
        }
    }
    let el = t.elapsed();
    println!(
        "{mode}: {n} in {el:?}: {:.0}/s",
        n as f64 / el.as_secs_f64()
    );
}
