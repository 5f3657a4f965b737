//! Java's string conversions as RocketMQ's filter applies them to property values:
//! `Integer.valueOf`, `Long.valueOf`, `Double.valueOf`, `Boolean.valueOf`, and `Double.compare`.
//!
//! A property value is always a string; comparing it with a number literal converts it with the
//! literal's Java type, and a value that does not convert makes the whole evaluation fail (the
//! message is not delivered). These follow the JDK 17's grammars: `parseInt` reads any
//! decimal digit of the Basic Multilingual Plane, `Double.valueOf` ASCII digits only.

use core::cmp::Ordering;

/// `Integer.valueOf(s)`: optional sign, ASCII digits, no spaces; `None` where Java throws.
pub(super) fn parse_int(s: &str) -> Option<i32> {
    i32::try_from(parse_signed(s)?).ok()
}

/// `Long.valueOf(s)`.
pub(super) fn parse_long(s: &str) -> Option<i64> {
    i64::try_from(parse_signed(s)?).ok()
}

/// Optional `+`/`-` then at least one decimal digit, as an i128 (enough for a 64-bit range
/// check; longer digit strings are out of range anyway).
fn parse_signed(s: &str) -> Option<i128> {
    let (neg, digits) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: i128 = 0;
    for c in digits.chars() {
        v = v * 10 + i128::from(digit(c)?);
        if v > i128::from(u64::MAX) {
            return None;
        }
    }
    Some(if neg { -v } else { v })
}

/// The zero of each run of ten decimal digits in the Basic Multilingual Plane (Unicode category
/// Nd), as Java 17's `Character.digit(char, 10)` reads them: `parseInt` and `parseLong` take
/// `١٢` for 12. (Printed by Java itself; digits beyond the BMP are two `char`s to Java, and not
/// digits to `parseInt`.)
const DIGIT_ZEROS: [u32; 37] = [
    0x0030, 0x0660, 0x06F0, 0x07C0, 0x0966, 0x09E6, 0x0A66, 0x0AE6, 0x0B66, 0x0BE6, 0x0C66, 0x0CE6,
    0x0D66, 0x0DE6, 0x0E50, 0x0ED0, 0x0F20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80,
    0x1A90, 0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0,
    0xFF10,
];

/// `Character.digit(c, 10)`.
fn digit(c: char) -> Option<u32> {
    let c = u32::from(c);
    let run = DIGIT_ZEROS.partition_point(|&z| z <= c).checked_sub(1)?;
    let d = c - DIGIT_ZEROS[run];
    (d < 10).then_some(d)
}

/// `Boolean.valueOf(s)`: true exactly when `s` is "true" in any case; never fails.
pub(super) fn parse_bool(s: &str) -> bool {
    s.eq_ignore_ascii_case("true")
}

/// `Double.valueOf(s)`: surrounding characters up to U+0020 trimmed, optional sign, then
/// `NaN`, `Infinity`, a decimal (`1`, `1.`, `.5`, `1e3`) or a hexadecimal (`0x1.8p3`) number,
/// with an optional `f`/`F`/`d`/`D` suffix.
pub(super) fn parse_double(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c: char| c <= ' ');
    let (neg, body) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let v = match body {
        "NaN" => f64::NAN,
        "Infinity" => f64::INFINITY,
        _ if body.starts_with("0x") || body.starts_with("0X") => parse_hex(&body[2..])?,
        _ => parse_decimal(body)?,
    };
    Some(if neg { -v } else { v })
}

/// Splits `[digits][.digits]` (at least one digit) off the front: (integer, fraction, rest).
fn split_mantissa(s: &str, hex: bool) -> Option<(&str, &str, &str)> {
    let is_digit = |b: u8| {
        if hex {
            b.is_ascii_hexdigit()
        } else {
            b.is_ascii_digit()
        }
    };
    let int_len = s.bytes().take_while(|&b| is_digit(b)).count();
    let (int, rest) = s.split_at(int_len);
    let (frac, rest) = match rest.strip_prefix('.') {
        Some(r) => r.split_at(r.bytes().take_while(|&b| is_digit(b)).count()),
        None => ("", rest),
    };
    (!int.is_empty() || !frac.is_empty()).then_some((int, frac, rest))
}

/// `[eE|pP][+-]digits` then an optional type suffix and the end: the exponent text.
fn split_exponent(rest: &str, marks: [u8; 2], required: bool) -> Option<&str> {
    let (exp, rest) = match rest.as_bytes().first() {
        Some(m) if marks.contains(m) => {
            let r = &rest[1..];
            let sign = usize::from(r.starts_with(['+', '-']));
            let n = r[sign..].bytes().take_while(u8::is_ascii_digit).count();
            if n == 0 {
                return None;
            }
            r.split_at(sign + n)
        }
        _ if required => return None,
        _ => ("", rest),
    };
    matches!(rest, "" | "f" | "F" | "d" | "D").then_some(exp)
}

fn parse_decimal(s: &str) -> Option<f64> {
    let (_, _, rest) = split_mantissa(s, false)?;
    split_exponent(rest, [b'e', b'E'], false)?;
    // Checked against Java's grammar above; Rust's (correctly rounded) parser takes every form
    // of it (`1.`, `.5`, `1.e5`) once the type suffix is off.
    s.trim_end_matches(['f', 'F', 'd', 'D']).parse().ok()
}

/// A hexadecimal floating-point number after its `0x` (the binary exponent is required),
/// rounded to nearest, ties to even, as Java does.
fn parse_hex(s: &str) -> Option<f64> {
    let (int, frac, rest) = split_mantissa(s, true)?;
    let exp_text = split_exponent(rest, [b'p', b'P'], true)?;
    // An exponent beyond i64 is far beyond the f64 range either way.
    let exp: i64 = exp_text.parse().unwrap_or(if exp_text.starts_with('-') {
        -(1 << 40)
    } else {
        1 << 40
    });
    // Keep the first 60 significant bits exactly; any later nonzero digit only breaks ties.
    let mut mant: u64 = 0;
    let mut sticky = false;
    let mut e2: i64 = exp;
    let mut seen = false;
    for (i, c) in int.chars().chain(frac.chars()).enumerate() {
        let d = u64::from(c.to_digit(16)?);
        let in_frac = i >= int.len();
        if !seen && d == 0 {
            if in_frac {
                e2 = e2.saturating_sub(4);
            }
            continue;
        }
        seen = true;
        if mant >> 56 == 0 {
            mant = mant << 4 | d;
            if in_frac {
                e2 = e2.saturating_sub(4);
            }
        } else {
            sticky |= d != 0;
            if !in_frac {
                e2 = e2.saturating_add(4);
            }
        }
    }
    Some(round_binary(mant, sticky, e2))
}

/// `(mant + a little if sticky) * 2^e2`, rounded to the nearest f64, ties to even.
fn round_binary(mant: u64, sticky: bool, e2: i64) -> f64 {
    if mant == 0 {
        return 0.0;
    }
    let bits = i64::from(64 - mant.leading_zeros());
    let top = e2 + bits - 1; // the exponent of the leading bit
    if top > 1023 {
        return f64::INFINITY;
    }
    // Significant bits the result can hold: 53, fewer for subnormals.
    let prec = if top >= -1022 { 53 } else { 53 - (-1022 - top) };
    if prec < 0 {
        return 0.0;
    }
    let shift = bits - prec; // bits to drop
    let (q, scale) = if shift <= 0 {
        (mant, e2)
    } else {
        let shift = u32::try_from(shift).unwrap_or(64);
        let (q, rem, half) = if shift >= 64 {
            (0, u128::from(mant), 1u128 << 63 << (shift - 64).min(63))
        } else {
            (
                mant >> shift,
                u128::from(mant & ((1u64 << shift) - 1)),
                1u128 << (shift - 1),
            )
        };
        let up = rem > half || (rem == half && (sticky || q & 1 == 1));
        (q + u64::from(up), e2 + i64::from(shift))
    };
    // q < 2^54 is exact in an f64; scaling by powers of two in steps keeps it exact.
    #[allow(clippy::cast_precision_loss)]
    let mut v = q as f64;
    let mut scale = scale;
    while scale > 0 {
        let step = scale.min(1000);
        v *= pow2(step);
        scale -= step;
    }
    while scale < 0 {
        let step = scale.max(-1000);
        v *= pow2(step);
        scale -= step;
    }
    v
}

/// 2^e for -1022 <= e <= 1023.
fn pow2(e: i64) -> f64 {
    let biased = u64::try_from(e + 1023).unwrap_or(0);
    f64::from_bits(biased << 52)
}

/// `Double.compare(a, b)`: numeric order, with -0.0 below 0.0 and NaN above everything (and
/// equal to itself).
pub(super) fn compare_double(a: f64, b: f64) -> Ordering {
    a.partial_cmp(&b)
        .filter(|o| o.is_ne())
        .unwrap_or_else(|| java_bits(a).cmp(&java_bits(b)))
}

/// `Double.doubleToLongBits`: the bits, every NaN folded into one.
fn java_bits(v: f64) -> i64 {
    let v = if v.is_nan() { f64::NAN } else { v };
    i64::from_ne_bytes(v.to_bits().to_ne_bytes())
}

/// `Double.equals`: equal bits after folding NaNs (so NaN equals NaN, 0.0 is not -0.0).
pub(super) fn double_equals(a: f64, b: f64) -> bool {
    java_bits(a) == java_bits(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_java() {
        assert_eq!(parse_int("+12"), Some(12));
        assert_eq!(parse_int("-2147483648"), Some(i32::MIN));
        assert_eq!(parse_int("2147483648"), None);
        assert_eq!(parse_int(" 1"), None);
        assert_eq!(parse_int("1.0"), None);
        assert_eq!(parse_int("-"), None);
        assert_eq!(parse_int("\u{661}\u{662}"), Some(12));
        assert_eq!(parse_int("\u{ff11}0"), Some(10));
        assert_eq!(parse_int("\u{65f}"), None);
        assert_eq!(parse_int("\u{1d7ce}"), None);
        assert_eq!(parse_long("9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_long("-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_long("9223372036854775808"), None);
        assert_eq!(
            parse_long("99999999999999999999999999999999999999999"),
            None
        );
    }

    #[test]
    fn doubles_follow_java() {
        assert_eq!(parse_double(" 1.5 "), Some(1.5));
        assert_eq!(parse_double("1."), Some(1.0));
        assert_eq!(parse_double(".5e1"), Some(5.0));
        assert_eq!(parse_double("1e3d"), Some(1000.0));
        assert_eq!(parse_double("-Infinity"), Some(f64::NEG_INFINITY));
        assert!(parse_double("NaN").is_some_and(f64::is_nan));
        assert_eq!(parse_double("inf"), None);
        assert_eq!(parse_double("1e"), None);
        assert_eq!(parse_double("."), None);
        assert_eq!(parse_double("1_0"), None);
        assert_eq!(parse_double("0x1p3"), Some(8.0));
        assert_eq!(parse_double("0x1.8p1"), Some(3.0));
        assert_eq!(parse_double("0x.8p1"), Some(1.0));
        assert_eq!(parse_double("0x1"), None);
        assert_eq!(parse_double("0x1p-1074"), Some(f64::from_bits(1)));
        assert_eq!(parse_double("0x1p-1075"), Some(0.0));
        assert_eq!(parse_double("0x1.8p-1075"), Some(f64::from_bits(1)));
        assert_eq!(parse_double("0x1fffffffffffff8p-3"), Some(2f64.powi(54)));
        assert_eq!(parse_double("1e400"), Some(f64::INFINITY));
        assert_eq!(parse_double("1e99999999999999999999"), Some(f64::INFINITY));
    }

    #[test]
    fn double_order_is_javas() {
        assert_eq!(compare_double(-0.0, 0.0), Ordering::Less);
        assert_eq!(compare_double(f64::NAN, f64::INFINITY), Ordering::Greater);
        assert_eq!(compare_double(f64::NAN, f64::NAN), Ordering::Equal);
        assert!(double_equals(f64::NAN, -f64::NAN));
        assert!(!double_equals(0.0, -0.0));
    }
}
