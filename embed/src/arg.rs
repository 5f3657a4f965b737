//! Argument checks every binding makes before the core sees a value, with one set of texts:
//! a whole number in a range (`queue_id must be a whole number from 0 to 4294967295, not -1`).

use alloc::format;
use alloc::string::String;

/// Largest integer a JS number holds exactly (2^53 - 1).
pub const MAX_SAFE: u64 = 9_007_199_254_740_991;

fn out_of_range(what: &str, max: u64, v: impl core::fmt::Display) -> String {
    format!("{what} must be a whole number from 0 to {max}, not {v}")
}

/// An integer argument (Python's int) from 0 to `max`; the error names it.
pub fn int(what: &str, v: i128, max: u64) -> Result<u64, String> {
    u64::try_from(v)
        .ok()
        .filter(|n| *n <= max)
        .ok_or_else(|| out_of_range(what, max, v))
}

/// A number argument (JS) that must be whole, from 0 to `max` (at most [`MAX_SAFE`]).
pub fn number(what: &str, v: f64, max: u64) -> Result<u64, String> {
    let max = max.min(MAX_SAFE);
    // No `f64::fract` in core: a whole number survives the round trip through u64.
    let fits = v.is_finite() && v >= 0.0 && v <= max as f64 && (v as u64) as f64 == v;
    if fits {
        Ok(v as u64)
    } else {
        Err(out_of_range(what, max, v))
    }
}

/// [`int`] into a u32.
pub fn int_u32(what: &str, v: i128) -> Result<u32, String> {
    int(what, v, u32::MAX.into()).map(|n| n as u32)
}

/// [`number`] into a u32.
pub fn number_u32(what: &str, v: f64) -> Result<u32, String> {
    number(what, v, u32::MAX.into()).map(|n| n as u32)
}

/// The `limit` of an introspection call: absent is no limit.
pub fn limit(v: Option<u64>) -> usize {
    v.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX))
}
