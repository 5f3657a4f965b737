#![no_main]
//! See `rocklet_fuzz::model` for what is checked.
use rocklet_fuzz::model::{run, Op};

libfuzzer_sys::fuzz_target!(|ops: Vec<Op>| run(&ops));
