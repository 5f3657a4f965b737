//! Prints the step sequence a `state_machine` input decodes to, then runs it:
//! `cargo run --example replay_ops -- <input file>`.
use arbitrary::{Arbitrary, Unstructured};
use rocklet_fuzz::model::{run, Op};

fn main() {
    let path = std::env::args().nth(1).expect("usage: replay_ops <input>");
    let data = std::fs::read(path).expect("readable input");
    let ops = Vec::<Op>::arbitrary_take_rest(Unstructured::new(&data)).expect("decodable");
    for (i, op) in ops.iter().enumerate() {
        println!("{i:3} {op:?}");
    }
    run(&ops);
    println!("ok");
}
