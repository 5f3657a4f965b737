//! A checkpoint's bytes: magic, version, covered offset, body length, CRC, then the
//! postcard body; written and read here.

use super::*;

/// The first bytes of a checkpoint.
const MAGIC: [u8; 8] = *b"RKLTCKPT";
/// Magic, version, covered offset, body length, CRC.
const HEADER: usize = 8 + 4 + 8 + 4 + 4;

/// A checkpoint's bytes: header, then the postcard body; the CRC covers version, offset,
/// length and body.
pub(in crate::broker) fn encode(snap: &Snapshot) -> Vec<u8> {
    encode_version(snap, CHECKPOINT_VERSION)
}

/// [`encode`] in layout `version` (1: without the order settings, as older builds wrote).
pub(in crate::broker) fn encode_version(snap: &Snapshot, version: u32) -> Vec<u8> {
    let mut body = postcard::to_allocvec(snap).expect("postcard to a Vec cannot fail");
    if version >= 2 {
        body.extend(postcard::to_allocvec(&snap.orders).expect("postcard to a Vec cannot fail"));
    }
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&snap.covers.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&out[8..HEADER - 4]);
    h.update(&body);
    out.extend_from_slice(&h.finalize().to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The log offset a checkpoint's header names, if it has a header at all (for a replica
/// cutting its log: [`crate::log::truncate_storage`]).
pub(crate) fn covered_offset(bytes: &[u8]) -> Option<u64> {
    if bytes.len() < HEADER || bytes[..8] != MAGIC {
        return None;
    }
    Some(u64::from_le_bytes(bytes[12..20].try_into().ok()?))
}

/// The log offset a checkpoint covers when its bytes are whole (magic, version, length and
/// CRC right; the body is not decoded), for a storage that looks before the core opens.
#[cfg(feature = "std")]
pub(crate) fn whole_covers(bytes: &[u8]) -> Option<u64> {
    verify(bytes).ok()
}

/// Checks a checkpoint's header, length and CRC; returns the offset it covers.
fn verify(bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() < HEADER || bytes[..8] != MAGIC {
        return Err(alloc::format!(
            "not a checkpoint ({} bytes, no CHECKPOINT header)",
            bytes.len()
        ));
    }
    let le32 =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let version = le32(8);
    if !(1..=CHECKPOINT_VERSION).contains(&version) {
        return Err(alloc::format!(
            "checkpoint version {version}; this build reads versions 1 to {CHECKPOINT_VERSION}"
        ));
    }
    let len = le32(20) as usize;
    if bytes.len() - HEADER != len {
        return Err(alloc::format!(
            "checkpoint holds {} bytes after its header, its header says {len} (torn?)",
            bytes.len() - HEADER
        ));
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&bytes[8..HEADER - 4]);
    h.update(&bytes[HEADER..]);
    if h.finalize() != le32(24) {
        return Err("checkpoint CRC does not match its bytes (damaged)".into());
    }
    Ok(u64::from_le_bytes(
        bytes[12..20].try_into().expect("8 bytes"),
    ))
}

/// Reads a checkpoint; `Err` says what is wrong with it.
pub(in crate::broker) fn decode(bytes: &[u8]) -> Result<Snapshot, String> {
    verify(bytes)?;
    let unreadable = |e| alloc::format!("checkpoint body unreadable: {e}");
    let (mut snap, rest): (Snapshot, &[u8]) =
        postcard::take_from_bytes(&bytes[HEADER..]).map_err(unreadable)?;
    if u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) >= 2 {
        snap.orders = postcard::from_bytes(rest).map_err(unreadable)?;
    }
    if snap.covers != u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes")) {
        return Err("checkpoint header and body name different offsets".into());
    }
    Ok(snap)
}
