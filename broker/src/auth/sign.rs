//! The signatures the official clients send, checked exactly as Apache RocketMQ 5 checks
//! them (`DefaultAuthenticationContextBuilder` and `DefaultAuthenticationHandler` of
//! apache/rocketmq's `auth` module).
//!
//! **gRPC (RocketMQ 5 clients).** Every call carries
//!
//! ```text
//! x-mq-date-time: 20260301T101500Z
//! authorization:  MQv2-HMAC-SHA1 Credential=<AccessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>
//! x-mq-session-token: <token>            (only when the client was given one)
//! ```
//!
//! where the signature is HMAC-SHA1, keyed by the SecretKey, of the `x-mq-date-time` value's
//! bytes, in hex (Python and Go lower case, Node and C# upper case: hex is read either way).
//! `Credential` may carry more after a `/` (the Go client sends `AK//Rocketmq`); the access
//! key is what comes before it. The date-time is the client's wall clock with a literal
//! `Z`: Node formats UTC, while Java (`new SimpleDateFormat(..).format(new Date())`), Go
//! (`time.Now().Format(..)`), Python (`datetime.now()`) and C# (`DateTime.Now`) format
//! their *local* time, so a client in UTC+8 sends a time 8 h ahead. [`TimeCheck`] accepts a
//! date-time within the window around each zone offset the operator lists
//! (`auth.client_utc_offsets`, default UTC only), so the window is what it says: accepting
//! every zone of the world would let a captured request be replayed for 26 hours.
//!
//! **Remoting (RocketMQ 4 clients, `AclClientRPCHook`).** The hook adds `AccessKey` (and
//! `SecurityToken` when set) to the request's extFields, then `Signature` = Base64 of
//! HMAC-SHA1, keyed by the SecretKey, over the values of every extField but `Signature`,
//! sorted by key (Java `TreeMap` order: UTF-16 code units), concatenated as UTF-8, followed
//! by the body bytes. For requests of version 399 (`V4_9_3`) and older the broker leaves
//! `_UNIQUE_KEY_QUERY` out, as RocketMQ does.

use std::collections::BTreeMap;

use base64::Engine as _;
use ring::hmac;

/// The algorithm the v5 clients name.
pub const ALGORITHM: &str = "MQv2-HMAC-SHA1";
/// The gRPC headers.
pub const AUTHORIZATION: &str = "authorization";
pub const DATE_TIME: &str = "x-mq-date-time";
pub const SESSION_TOKEN: &str = "x-mq-session-token";
/// The remoting extFields.
pub const ACCESS_KEY: &str = "AccessKey";
pub const SIGNATURE: &str = "Signature";
pub const SECURITY_TOKEN: &str = "SecurityToken";
/// Left out of the signed content of requests up to [`V4_9_3`].
pub const UNIQUE_KEY_QUERY: &str = "_UNIQUE_KEY_QUERY";
/// `MQVersion.Version.V4_9_3.ordinal()`.
pub const V4_9_3: i32 = 399;

/// What a v5 `authorization` header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    pub access_key: String,
    /// The HMAC, decoded from hex.
    pub signature: Vec<u8>,
}

/// Parses `MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature=HEX`.
/// An empty `Credential` (the Python client's header without credentials) gives an empty
/// access key; the caller decides what that means.
pub fn parse_authorization(header: &str) -> Result<Authorization, String> {
    let (algorithm, rest) = header
        .trim()
        .split_once(' ')
        .ok_or("the authorization header is not `MQv2-HMAC-SHA1 Credential=…, SignedHeaders=…, Signature=…`")?;
    if algorithm != ALGORITHM {
        return Err(format!(
            "the authorization header names the algorithm `{algorithm}`, not {ALGORITHM}"
        ));
    }
    let mut access_key = None;
    let mut signature = None;
    for item in rest.split(',') {
        let Some((k, v)) = item.trim().split_once('=') else {
            return Err(format!(
                "the authorization header has an item without `=`: `{}`",
                item.trim()
            ));
        };
        match k {
            "Credential" => access_key = Some(v.split('/').next().unwrap_or("").to_string()),
            "Signature" => {
                signature = Some(
                    hex_decode(v)
                        .ok_or("the authorization header's Signature is not hexadecimal")?,
                )
            }
            _ => {}
        }
    }
    Ok(Authorization {
        access_key: access_key.ok_or("the authorization header has no Credential")?,
        signature: signature.unwrap_or_default(),
    })
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim().as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let nib = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.chunks(2)
        .map(|p| Some(nib(p[0])? << 4 | nib(p[1])?))
        .collect()
}

fn key(secret: &str) -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes())
}

/// Whether `signature` is the HMAC-SHA1 of `data` keyed by `secret` (constant time).
#[must_use]
pub fn verify(secret: &str, data: &[u8], signature: &[u8]) -> bool {
    hmac::verify(&key(secret), data, signature).is_ok()
}

/// The HMAC-SHA1 of `data` keyed by `secret`.
#[must_use]
pub fn hmac_sha1(secret: &str, data: &[u8]) -> Vec<u8> {
    hmac::sign(&key(secret), data).as_ref().to_vec()
}

/// The v5 `authorization` header a client with these credentials sends at `date_time`
/// (the bench and the tests sign their calls with it).
#[must_use]
pub fn grpc_authorization(access_key: &str, secret: &str, date_time: &str) -> String {
    let sig: String = hmac_sha1(secret, date_time.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME}, Signature={sig}")
}

/// `yyyyMMdd'T'HHmmss'Z'` of a time in ms since the epoch (UTC).
#[must_use]
pub fn format_date_time(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Parses `yyyyMMdd'T'HHmmss'Z'` as ms since the epoch, read as UTC.
#[must_use]
pub fn parse_date_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, sec) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    Some(((days * 86_400) + h * 3600 + mi * 60 + sec) * 1000)
}

// Howard Hinnant's civil calendar algorithms.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// Which time zones a client's `x-mq-date-time` may be in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientZones {
    /// Any whole quarter hour from UTC-12:00 to UTC+14:00 (every zone there is): what a
    /// Java, Python or C# client sends from anywhere is accepted, and a captured request can
    /// be replayed for about 26 hours (`client_utc_offsets = ["any"]`, never the default).
    Any,
    /// Only these offsets from UTC, in ms (Node clients always send UTC: `+00:00`). The
    /// default is UTC alone.
    Offsets(Vec<i64>),
}

/// The replay window: a signed date-time is accepted only within `window_ms` of the broker's
/// clock, read in one of the client zones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeCheck {
    pub window_ms: i64,
    pub zones: ClientZones,
}

const QUARTER_HOUR_MS: i64 = 15 * 60 * 1000;
const HOUR_MS: i64 = 3_600_000;

impl TimeCheck {
    /// `Err` with a message naming how far off the date-time is.
    pub fn check(&self, signed_ms: i64, now_ms: i64) -> Result<(), String> {
        if self.window_ms <= 0 {
            return Ok(());
        }
        let skew = signed_ms - now_ms;
        let near = |offset: i64| (skew - offset).abs() <= self.window_ms;
        let ok = match &self.zones {
            ClientZones::Any => {
                let nearest = (skew as f64 / QUARTER_HOUR_MS as f64).round() as i64;
                let offset = nearest.clamp(-12 * 4, 14 * 4) * QUARTER_HOUR_MS;
                near(offset)
            }
            ClientZones::Offsets(list) => list.iter().any(|o| near(*o)),
        };
        if ok {
            return Ok(());
        }
        let secs = skew / 1000;
        // A client that signs with its local time sends a whole quarter hour off: name it.
        let zone = (skew as f64 / QUARTER_HOUR_MS as f64).round() as i64 * QUARTER_HOUR_MS;
        let hint = match &self.zones {
            ClientZones::Offsets(list)
                if zone != 0
                    && (-12 * HOUR_MS..=14 * HOUR_MS).contains(&zone)
                    && (skew - zone).abs() <= self.window_ms
                    && !list.contains(&zone) =>
            {
                let z = format_utc_offset(zone);
                format!("; a client signing with its local time in UTC{z} needs \"{z}\" in auth.client_utc_offsets")
            }
            ClientZones::Offsets(_) => "; check the client's clock".into(),
            ClientZones::Any => String::new(),
        };
        Err(format!(
            "expired timestamp: x-mq-date-time is {}{} s {} the broker's clock{}, outside the replay window of {} s (auth.timestamp_window_s){hint}",
            if secs < 0 { "" } else { "+" },
            secs,
            if secs < 0 { "behind" } else { "ahead of" },
            match &self.zones {
                ClientZones::Any => String::new(),
                ClientZones::Offsets(_) => " in every zone of auth.client_utc_offsets".into(),
            },
            self.window_ms / 1000
        ))
    }
}

/// `+08:00`, `-03:30` of an offset in ms.
#[must_use]
pub fn format_utc_offset(ms: i64) -> String {
    let m = ms.abs() / 60_000;
    format!(
        "{}{:02}:{:02}",
        if ms < 0 { '-' } else { '+' },
        m / 60,
        m % 60
    )
}

/// Parses `+08:00`, `-03:30`, `+00:00`, `Z` into ms.
pub fn parse_utc_offset(s: &str) -> Result<i64, String> {
    let bad = || format!("`{s}` is not a UTC offset like +08:00, -03:30 or +00:00");
    let t = s.trim();
    if t == "Z" || t.eq_ignore_ascii_case("utc") {
        return Ok(0);
    }
    let (sign, rest) = match t.as_bytes().first() {
        Some(b'+') => (1, &t[1..]),
        Some(b'-') => (-1, &t[1..]),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').ok_or_else(bad)?;
    let (h, m): (i64, i64) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if h > 14 || m > 59 {
        return Err(bad());
    }
    Ok(sign * (h * HOUR_MS + m * 60_000))
}

/// The bytes `AclClientRPCHook` signs: the extField values but `Signature`, sorted by key in
/// Java's String order, then the body.
#[must_use]
pub fn remoting_content(ext: &BTreeMap<String, String>, version: i32, body: &[u8]) -> Vec<u8> {
    let mut fields: Vec<(&String, &String)> = ext
        .iter()
        .filter(|(k, _)| k.as_str() != SIGNATURE)
        .filter(|(k, _)| !(version <= V4_9_3 && k.as_str() == UNIQUE_KEY_QUERY))
        .collect();
    // Java's TreeMap<String, _> compares UTF-16 code units; byte order differs only for
    // keys beyond the Basic Multilingual Plane, but be exact.
    fields.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
    let mut out =
        Vec::with_capacity(fields.iter().map(|(_, v)| v.len()).sum::<usize>() + body.len());
    for (_, v) in fields {
        out.extend_from_slice(v.as_bytes());
    }
    out.extend_from_slice(body);
    out
}

/// The `Signature` extField a v4 client with this secret puts on a request.
#[must_use]
pub fn remoting_signature(
    secret: &str,
    ext: &BTreeMap<String, String>,
    version: i32,
    body: &[u8],
) -> String {
    base64::engine::general_purpose::STANDARD
        .encode(hmac_sha1(secret, &remoting_content(ext, version, body)))
}

/// Decodes a remoting `Signature` (Base64).
#[must_use]
pub fn decode_base64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values computed independently with Python's hmac/hashlib/base64 (the same
    // primitives rocketmq-python-client signs with).
    #[test]
    fn grpc_signature_matches_the_clients() {
        // hmac.new(b"secret", b"20260301T101500Z", sha1).hexdigest()
        let h = grpc_authorization("ak", "secret", "20260301T101500Z");
        let a = parse_authorization(&h).unwrap();
        assert_eq!(a.access_key, "ak");
        assert!(verify("secret", b"20260301T101500Z", &a.signature));
        assert!(!verify("Secret", b"20260301T101500Z", &a.signature));
        assert!(!verify("secret", b"20260301T101501Z", &a.signature));
        let hex: String = a.signature.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "c07d59ee90df22e41b8d03d8250caf02c0c95532");
        // Upper-case hex (Node, C#) and Go's `AK//Rocketmq` credential.
        let up = format!(
            "MQv2-HMAC-SHA1 Credential=ak//Rocketmq, SignedHeaders=x-mq-date-time, Signature={}",
            hex.to_uppercase()
        );
        let b = parse_authorization(&up).unwrap();
        assert_eq!(b, a);
        // Python without credentials.
        let none = parse_authorization(
            "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=ab",
        )
        .unwrap();
        assert_eq!(none.access_key, "");
        for bad in [
            "Bearer x",
            "MQv2-HMAC-SHA1",
            "MQv2-HMAC-SHA1 Credential=a, Signature=xyz",
            "MQv2-HMAC-SHA1 Signature=ab",
            "MQv2-HMAC-SHA1 Credential",
        ] {
            assert!(parse_authorization(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn remoting_signature_matches_acl_client_rpc_hook() {
        let mut ext = BTreeMap::new();
        ext.insert("topic".to_string(), "T".to_string());
        ext.insert("AccessKey".to_string(), "rocketmq2".to_string());
        ext.insert("queueId".to_string(), "1".to_string());
        // Sorted: AccessKey, queueId, topic -> "rocketmq21T" + body.
        assert_eq!(remoting_content(&ext, 473, b"body"), b"rocketmq21Tbody");
        // base64.b64encode(hmac.new(b"12345678", b"rocketmq21Tbody", sha1).digest())
        let sig = remoting_signature("12345678", &ext, 473, b"body");
        assert_eq!(sig, "p5ByQv9yYCo5Er0Q8G5LUDG7J4g=");
        ext.insert(SIGNATURE.into(), sig.clone());
        assert_eq!(remoting_content(&ext, 473, b"body"), b"rocketmq21Tbody");
        let raw = decode_base64(&sig).unwrap();
        assert!(verify(
            "12345678",
            &remoting_content(&ext, 473, b"body"),
            &raw
        ));
        // _UNIQUE_KEY_QUERY counts for new clients only.
        ext.insert(UNIQUE_KEY_QUERY.into(), "false".into());
        assert_eq!(remoting_content(&ext, 399, b""), b"rocketmq21T");
        assert_eq!(
            remoting_content(&ext, 473, b""),
            b"rocketmq2false1T",
            "`_` sorts before `q`"
        );
        // UTF-16 order: U+FF21 (BMP) sorts after U+1F600 in UTF-8 but before it in UTF-16.
        let mut e = BTreeMap::new();
        e.insert("\u{1F600}".to_string(), "b".to_string());
        e.insert("\u{FF21}".to_string(), "a".to_string());
        assert_eq!(remoting_content(&e, 473, b""), b"ba");
    }

    #[test]
    fn date_times() {
        let ms = parse_date_time("20260301T101500Z").unwrap();
        assert_eq!(ms, 1_772_360_100_000);
        assert_eq!(format_date_time(ms as u64), "20260301T101500Z");
        assert_eq!(format_date_time(0), "19700101T000000Z");
        for bad in [
            "20260301101500Z",
            "20261301T101500Z",
            "2026030xT101500Z",
            "20260301T101500",
        ] {
            assert!(parse_date_time(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn the_replay_window() {
        let now = parse_date_time("20260301T101500Z").unwrap();
        let min = 60_000;
        let strict = TimeCheck {
            window_ms: 5 * min,
            zones: ClientZones::Offsets(vec![0]),
        };
        assert!(strict.check(now + 4 * min, now).is_ok());
        let e = strict.check(now - 60 * min, now).unwrap_err();
        assert!(
            e.starts_with("expired timestamp: x-mq-date-time is -3600 s behind"),
            "{e}"
        );
        assert!(
            e.ends_with("a client signing with its local time in UTC-01:00 needs \"-01:00\" in auth.client_utc_offsets"),
            "{e}"
        );
        let e = strict.check(now + 2 * 60 * min + 7 * min, now).unwrap_err();
        assert!(e.ends_with("check the client's clock"), "{e}");
        assert_eq!(format_utc_offset(-(3 * 60 + 30) * min), "-03:30");
        assert_eq!(format_utc_offset(8 * 60 * min), "+08:00");
        // A Java client in UTC+8 sends its local time with a Z.
        let any = TimeCheck {
            window_ms: 5 * min,
            zones: ClientZones::Any,
        };
        assert!(any.check(now + 8 * 60 * min + 2 * min, now).is_ok());
        assert!(
            any.check(now - 3 * 60 * min - 30 * min, now).is_ok(),
            "UTC-03:30"
        );
        assert!(
            any.check(now + 8 * 60 * min + 7 * min, now).is_err(),
            "between zones"
        );
        assert!(
            any.check(now + 15 * 60 * min, now).is_err(),
            "beyond UTC+14"
        );
        assert!(
            any.check(now - 13 * 60 * min, now).is_err(),
            "beyond UTC-12"
        );
        let off = TimeCheck {
            window_ms: 0,
            zones: ClientZones::Offsets(vec![]),
        };
        assert!(off.check(0, now).is_ok(), "window 0: no check");
        assert_eq!(parse_utc_offset("+08:00").unwrap(), 8 * 60 * min);
        assert_eq!(parse_utc_offset("-03:30").unwrap(), -(3 * 60 + 30) * min);
        assert!(parse_utc_offset("8").is_err());
    }
}
