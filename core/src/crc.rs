//! CRC-32 (IEEE 802.3, the polynomial of zlib and RocketMQ's `UtilAll.crc32`) of a
//! concatenation from the CRCs of its parts, so a record's bytes are read once.
//!
//! CRC-32 is linear over GF(2): for the standard (pre- and post-inverted) CRC,
//! `crc(a ‖ b) = crc(a) · x^(8·|b|) mod P ⊕ crc(b)`. [`combine`] computes the product with a
//! software carry-less multiply and a table reduction, the power of x from tables of
//! `x^(8·d·256^k) mod P`: one multiply per non-zero byte of `|b|` (one for a 1 KiB body), no
//! loop over the bits of the length and no matrix squaring (zlib's original method).
//!
//! Polynomials are *reflected*, as the CRC registers hold them: bit 31 is the coefficient
//! of x^0, bit 0 that of x^31.

/// The CRC-32 polynomial, reflected.
const POLY: u32 = 0xEDB8_8320;
/// The polynomial 1 (x^0), reflected.
const ONE: u32 = 1 << 31;

/// `a · b mod P`, a bit at a time (zlib's `multmodp`): the reference, and what builds the
/// tables at compile time.
const fn mul_bitwise(a: u32, mut b: u32) -> u32 {
    let mut m = ONE;
    let mut p = 0;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `SLICE[k][i] = i · x^(32 - 8·k) mod P` for the byte `i` in the low (highest-degree) byte
/// of the register: `SLICE[0]` is the byte-wise CRC table, the four together reduce a
/// 32-bit register times x^32 in four independent lookups (slicing-by-4).
const SLICE: [[u32; 256]; 4] = {
    let mut t = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            bit += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 4 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    t
};

/// `POW[k][d] = x^(8·d·256^k) mod P`: shifting a CRC over `n` bytes multiplies it by the
/// entries of `n`'s four bytes.
const POW: [[u32; 256]; 4] = {
    let mut t = [[0u32; 256]; 4];
    // x^8 (of degree below 32: no reduction), then x^(8·256^k).
    let mut base = ONE >> 8;
    let mut k = 0;
    while k < 4 {
        t[k][0] = ONE;
        let mut d = 1;
        while d < 256 {
            t[k][d] = mul_bitwise(t[k][d - 1], base);
            d += 1;
        }
        // x^(8·256^(k+1)) = (x^(8·256^k))^256 = the last entry times the base.
        base = mul_bitwise(t[k][255], base);
        k += 1;
    }
    t
};

/// Carry-less product of two 32-bit polynomials (bits as coefficients, 63-bit result),
/// with integer multiplies: each operand split into four sparse parts (every fourth bit),
/// so a lane's sum of at most eight products never carries into the next lane.
#[inline]
fn clmul32(x: u32, y: u32) -> u64 {
    const M: [u64; 4] = [0x1111_1111, 0x2222_2222, 0x4444_4444, 0x8888_8888];
    let (x, y) = (u64::from(x), u64::from(y));
    let (x0, x1, x2, x3) = (x & M[0], x & M[1], x & M[2], x & M[3]);
    let (y0, y1, y2, y3) = (y & M[0], y & M[1], y & M[2], y & M[3]);
    let z0 = (x0 * y0) ^ (x1 * y3) ^ (x2 * y2) ^ (x3 * y1);
    let z1 = (x0 * y1) ^ (x1 * y0) ^ (x2 * y3) ^ (x3 * y2);
    let z2 = (x0 * y2) ^ (x1 * y1) ^ (x2 * y0) ^ (x3 * y3);
    let z3 = (x0 * y3) ^ (x1 * y2) ^ (x2 * y1) ^ (x3 * y0);
    (z0 & 0x1111_1111_1111_1111)
        | (z1 & 0x2222_2222_2222_2222)
        | (z2 & 0x4444_4444_4444_4444)
        | (z3 & 0x8888_8888_8888_8888)
}

/// `a · b mod P`, reflected.
#[inline]
fn mul(a: u32, b: u32) -> u32 {
    // The product of the reflected operands is the reflected product over 63 bits; shifted
    // left once, its high half holds degrees 0..=31 and its low half h, the degrees
    // 32..=63 as h · x^32.
    let r = clmul32(a, b) << 1;
    ((r >> 32) as u32) ^ times_x32(r as u32)
}

/// `crc · x^(8·n) mod P`: a CRC register carried over `n` more bytes, as if they were zero
/// and the register had no pre- and post-inversion.
#[inline]
fn shift(mut crc: u32, n: u32) -> u32 {
    for (k, table) in POW.iter().enumerate() {
        let d = (n >> (8 * k)) & 0xFF;
        if d != 0 {
            crc = mul(crc, table[d as usize]);
        }
    }
    crc
}

/// `UNPAD[p]`: the register that `p` zero bytes carry to 0xFFFFFFFF, CRC-32's initial
/// register: `0xFFFFFFFF · x^(-8·p) mod P`, x's inverse a bit at a time (the register
/// step undone: its top bit says whether the polynomial was added).
const UNPAD: [u32; 16] = {
    let mut t = [0u32; 16];
    let mut r = u32::MAX;
    let mut p = 0;
    while p < 16 {
        t[p] = r;
        let mut bit = 0;
        while bit < 8 {
            r = if r & ONE != 0 {
                ((r ^ POLY) << 1) | 1
            } else {
                r << 1
            };
            bit += 1;
        }
        p += 1;
    }
    t
};

/// The CRC-32 of `buf[pad..]`, `buf[..pad]` being zeros (`pad` < 16): what lets a caller
/// hand crc32fast a whole number of 16-byte blocks, its fastest case below 128 bytes.
#[inline]
#[must_use]
pub fn hash_padded(buf: &[u8], pad: usize) -> u32 {
    debug_assert!(buf[..pad].iter().all(|&b| b == 0));
    let mut h = crc32fast::Hasher::new_with_initial(!UNPAD[pad]);
    h.update(buf);
    h.finalize()
}

/// [`crc32fast::Hasher`] carried over `bytes` from the CRC-32 `crc`: four bytes a step by
/// table (below 16 bytes, where crc32fast has no faster way and a call costs more than the
/// steps), else by crc32fast.
#[inline]
#[must_use]
pub fn update(crc: u32, bytes: &[u8]) -> u32 {
    if bytes.len() >= 16 {
        let mut h = crc32fast::Hasher::new_with_initial(crc);
        h.update(bytes);
        return h.finalize();
    }
    let mut r = !crc;
    let (head, words) = bytes.split_at(bytes.len() % 4);
    for &b in head {
        r = (r >> 8) ^ SLICE[0][((r ^ u32::from(b)) & 0xFF) as usize];
    }
    for w in words.chunks_exact(4) {
        r ^= u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        r = times_x32(r);
    }
    !r
}

/// `r · x^32 mod P`: slicing-by-4.
#[inline]
fn times_x32(r: u32) -> u32 {
    SLICE[3][(r & 0xFF) as usize]
        ^ SLICE[2][((r >> 8) & 0xFF) as usize]
        ^ SLICE[1][((r >> 16) & 0xFF) as usize]
        ^ SLICE[0][(r >> 24) as usize]
}

/// The CRC-32 of `a ‖ b` from `crc_a` (of `a`), `crc_b` (of `b`) and `b`'s length.
#[inline]
#[must_use]
pub fn combine(crc_a: u32, crc_b: u32, len_b: u32) -> u32 {
    shift(crc_a, len_b) ^ crc_b
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    /// `x^(8·n) mod P` by repeated multiplication by x^8: the slow way.
    fn pow_slow(n: u32) -> u32 {
        let x8 = POW[0][1];
        (0..n).fold(ONE, |p, _| mul_bitwise(p, x8))
    }

    #[test]
    fn tables_match_the_bitwise_definition() {
        // x^8 = x · x^7, and the byte table is the CRC table zlib prints.
        assert_eq!(POW[0][1], mul_bitwise(ONE >> 1, ONE >> 7));
        assert_eq!(SLICE[0][1], 0x7707_3096);
        assert_eq!(SLICE[0][255], 0x2D02_EF8D);
        for n in [0, 1, 2, 3, 255, 256, 257, 1000, 1024, 4099] {
            assert_eq!(shift(ONE, n), pow_slow(n), "x^(8·{n})");
        }
        for (k, table) in POW.iter().enumerate() {
            // x^(8·256^k) = x^(2^(3 + 8k)): x squared 3 + 8k times.
            let base = (0..3 + 8 * k).fold(ONE >> 1, |p, _| mul_bitwise(p, p));
            assert_eq!(table[1], base, "POW[{k}][1]");
            for d in [0usize, 2, 17, 128, 255] {
                let expect = (0..d).fold(ONE, |p, _| mul_bitwise(p, base));
                assert_eq!(table[d], expect, "POW[{k}][{d}]");
            }
        }
    }

    #[test]
    fn combine_of_known_strings() {
        let (a, b) = (b"123456789".as_slice(), b"".as_slice());
        assert_eq!(crc32fast::hash(a), 0xCBF4_3926);
        assert_eq!(
            combine(crc32fast::hash(a), crc32fast::hash(b), 0),
            0xCBF4_3926
        );
        assert_eq!(
            combine(crc32fast::hash(b"1234"), crc32fast::hash(b"56789"), 5),
            0xCBF4_3926
        );
        assert_eq!(combine(0, crc32fast::hash(a), 9), 0xCBF4_3926);
        // A length with three non-zero bytes.
        let long: Vec<u8> = (0..0x0101_0101u32 / 64).map(|i| (i * 31) as u8).collect();
        let split = 12_345;
        assert_eq!(
            combine(
                crc32fast::hash(&long[..split]),
                crc32fast::hash(&long[split..]),
                (long.len() - split) as u32
            ),
            crc32fast::hash(&long)
        );
        let zeros = [0u8; 64];
        let mut h = crc32fast::Hasher::new_with_initial(0x1234_5678);
        for _ in 0..(1 << 10) {
            h.update(&zeros);
        }
        // 64 KiB of zeros after bytes whose CRC is 0x12345678.
        assert_eq!(
            h.finalize(),
            combine(0x1234_5678, crc32fast::hash(&[0u8; 1 << 16]), 1 << 16)
        );
    }

    #[test]
    fn short_updates_of_every_length() {
        let bytes: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0x5A).collect();
        for start in [0, 1, 3, 7] {
            for end in start..bytes.len() {
                let crc = crc32fast::hash(&bytes[..start]);
                assert_eq!(
                    update(crc, &bytes[start..end]),
                    crc32fast::hash(&bytes[..end]),
                    "bytes {start}..{end}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn padded_and_short_updates_are_crc32fast(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            pad in 0usize..16,
            cut in any::<proptest::sample::Index>(),
        ) {
            let padded: Vec<u8> = core::iter::repeat_n(0, pad).chain(bytes.iter().copied()).collect();
            prop_assert_eq!(hash_padded(&padded, pad), crc32fast::hash(&bytes));
            let cut = cut.index(bytes.len() + 1);
            let (a, b) = bytes.split_at(cut);
            prop_assert_eq!(update(crc32fast::hash(a), b), crc32fast::hash(&bytes));
        }

        #[test]
        fn mul_is_the_bitwise_product(a: u32, b: u32) {
            prop_assert_eq!(mul(a, b), mul_bitwise(a, b));
            prop_assert_eq!(mul(a, ONE), a);
        }

        #[test]
        fn shift_is_the_power_of_x(crc: u32, n: u32) {
            // x^(8n) from its bytes, each power checked by the bitwise definition above.
            let direct = (0..4).fold(crc, |c, k| {
                mul_bitwise(c, POW[k][((n >> (8 * k)) & 0xFF) as usize])
            });
            prop_assert_eq!(shift(crc, n), direct);
        }

        #[test]
        fn combine_is_the_crc_of_the_concatenation(
            bytes in proptest::collection::vec(any::<u8>(), 0..5000),
            cut in any::<proptest::sample::Index>(),
        ) {
            let cut = cut.index(bytes.len() + 1);
            let (a, b) = bytes.split_at(cut);
            prop_assert_eq!(
                combine(crc32fast::hash(a), crc32fast::hash(b), b.len() as u32),
                crc32fast::hash(&bytes)
            );
        }

        #[test]
        fn three_parts_combine_as_a_record_does(
            head in proptest::collection::vec(any::<u8>(), 0..200),
            body in proptest::collection::vec(any::<u8>(), 0..3000),
            tail in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let whole: Vec<u8> = [&head[..], &body[..], &tail[..]].concat();
            let hb = combine(crc32fast::hash(&head), crc32fast::hash(&body), body.len() as u32);
            let mut h = crc32fast::Hasher::new_with_initial(hb);
            h.update(&tail);
            prop_assert_eq!(h.finalize(), crc32fast::hash(&whole));
        }
    }
}
