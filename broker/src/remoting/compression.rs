//! Compressed message bodies from v4 producers.
//!
//! RocketMQ 4 clients compress a body above a threshold (4 KiB by default in the Java and
//! C++ clients) and set the COMPRESSED bit of the send header's `sysFlag`. Clients of 4.9+
//! and 5.x also name the algorithm in bits 8..=10:
//!
//! ```text
//!  sysFlag bit  meaning
//!  -----------  ----------------------------------------------------------
//!            0  COMPRESSED: the body is compressed
//!        8..10  algorithm: 0 (older clients: zlib), 1 LZ4, 2 zstd, 3 zlib
//! ```
//!
//! The send handlers inflate such a body here and hand the core the plain bytes, so every
//! protocol (v4 pull and push, v5 receive) delivers the real body and nothing downstream
//! sees a compression flag. Inflation is bounded: a body that would inflate past the
//! broker's largest message is refused after at most that many bytes were produced.

use std::fmt;
use std::io::Read;

use rocklet_core::record::sys_flag;

/// Bits 8..=10 of `sysFlag`: the compression algorithm.
const TYPE_MASK: u32 = 0x7 << 8;
const TYPE_SHIFT: u32 = 8;
const TYPE_LZ4: u32 = 1;
const TYPE_ZSTD: u32 = 2;
const TYPE_ZLIB: u32 = 3;

/// Why a compressed body was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InflateError {
    /// The algorithm bits name something other than zlib.
    Unsupported(&'static str),
    /// The algorithm bits hold a value no client defines.
    UnknownType(u32),
    /// The body inflates past `limit` bytes.
    TooLarge { limit: usize },
    /// The body is not a valid zlib stream.
    Malformed(String),
}

impl fmt::Display for InflateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InflateError::Unsupported(name) => write!(
                f,
                "the body is compressed with {name}; rocklet inflates zlib only (set the producer's compression type to ZLIB)"
            ),
            InflateError::UnknownType(t) => write!(
                f,
                "sysFlag names compression type {t}, which is none of 0 or 3 (zlib), 1 (LZ4), 2 (zstd)"
            ),
            InflateError::TooLarge { limit } => write!(
                f,
                "the compressed body inflates past the broker's max message size of {limit} bytes (max_message_size)"
            ),
            InflateError::Malformed(e) => write!(f, "the compressed body is not valid zlib data: {e}"),
        }
    }
}

impl std::error::Error for InflateError {}

/// Whether `sys` marks the body as compressed.
#[must_use]
pub fn is_compressed(sys: u32) -> bool {
    sys & sys_flag::COMPRESSED != 0
}

/// The plain body of a message whose `sysFlag` is `sys`: `body` itself when the COMPRESSED
/// bit is clear, otherwise its inflation, which may not exceed `limit` bytes (the work done
/// and the memory taken stop at `limit` + 1 bytes of output).
pub fn plain_body(sys: u32, body: Vec<u8>, limit: usize) -> Result<Vec<u8>, InflateError> {
    if !is_compressed(sys) {
        return Ok(body);
    }
    match (sys & TYPE_MASK) >> TYPE_SHIFT {
        0 | TYPE_ZLIB => inflate_zlib(&body, limit),
        TYPE_LZ4 => Err(InflateError::Unsupported("LZ4")),
        TYPE_ZSTD => Err(InflateError::Unsupported("zstd")),
        t => Err(InflateError::UnknownType(t)),
    }
}

fn inflate_zlib(compressed: &[u8], limit: usize) -> Result<Vec<u8>, InflateError> {
    let mut d = flate2::bufread::ZlibDecoder::new(compressed);
    let mut out = Vec::with_capacity(compressed.len().saturating_mul(4).min(limit) + 1);
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    (&mut d)
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| InflateError::Malformed(e.to_string()))?;
    if out.len() > limit {
        return Err(InflateError::TooLarge { limit });
    }
    // The stream ended where the decoder stopped: anything after it is not ours to drop.
    let rest = d.into_inner().len();
    if rest > 0 {
        return Err(InflateError::Malformed(format!(
            "{rest} bytes follow the end of the zlib stream"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn plain_bodies_pass_through() {
        assert_eq!(plain_body(0, b"abc".to_vec(), 1).unwrap(), b"abc");
        // Transaction bits alone are not compression.
        assert_eq!(plain_body(0x8, b"abc".to_vec(), 1).unwrap(), b"abc");
    }

    #[test]
    fn zlib_bodies_inflate_with_and_without_the_type_bits() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let z = zlib(&data);
        assert!(z.len() < data.len());
        assert_eq!(plain_body(1, z.clone(), 1 << 20).unwrap(), data);
        assert_eq!(plain_body(1 | (3 << 8), z.clone(), 1 << 20).unwrap(), data);
        // Exactly at the limit is fine.
        assert_eq!(plain_body(1, z, data.len()).unwrap(), data);
        assert_eq!(plain_body(1, zlib(b""), 0).unwrap(), b"");
    }

    #[test]
    fn a_zip_bomb_stops_at_the_limit() {
        let z = zlib(&vec![0u8; 8 << 20]);
        assert!(z.len() < 16 << 10, "{} bytes", z.len());
        let e = plain_body(1, z, 4 << 20).unwrap_err();
        assert_eq!(e, InflateError::TooLarge { limit: 4 << 20 });
        assert!(e.to_string().contains("4194304 bytes"), "{e}");
        let z = zlib(&[7; 11]);
        assert_eq!(
            plain_body(1, z, 10).unwrap_err(),
            InflateError::TooLarge { limit: 10 }
        );
    }

    #[test]
    fn malformed_data_is_named_never_a_panic() {
        let good = zlib(b"hello hello hello hello");
        for bad in [
            Vec::new(),
            b"not zlib at all".to_vec(),
            good[..good.len() - 1].to_vec(),
            good[..3].to_vec(),
            {
                let mut v = good.clone();
                v.push(0);
                v
            },
            {
                // a flipped bit in the data: adler32 or the stream itself fails
                let mut v = good.clone();
                v[4] ^= 0x40;
                v
            },
        ] {
            assert!(
                matches!(
                    plain_body(1, bad.clone(), 1 << 20),
                    Err(InflateError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn other_algorithms_are_refused_by_name() {
        let e = plain_body(1 | (1 << 8), vec![1, 2, 3], 100).unwrap_err();
        assert!(e.to_string().contains("LZ4"), "{e}");
        let e = plain_body(1 | (2 << 8), vec![1, 2, 3], 100).unwrap_err();
        assert!(e.to_string().contains("zstd"), "{e}");
        assert_eq!(
            plain_body(1 | (5 << 8), vec![1], 100).unwrap_err(),
            InflateError::UnknownType(5)
        );
    }
}
