#![no_main]
//! See `rocklet_fuzz::checks::batch_decode` for what is checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rocklet_fuzz::checks::batch_decode(data));
