#![no_main]
//! See `rocklet_fuzz::grpc` for what is checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rocklet_fuzz::grpc::run(data));
