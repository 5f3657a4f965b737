#![no_main]
//! See `rocklet_fuzz::remoting` for what is checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rocklet_fuzz::remoting::run_frames(data));
