#![no_main]
//! See `rocklet_fuzz::remoting` for what is checked.
use rocklet_fuzz::remoting::{run_ops, Cmd};

libfuzzer_sys::fuzz_target!(|ops: Vec<Cmd>| run_ops(&ops));
