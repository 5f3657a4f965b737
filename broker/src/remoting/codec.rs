//! The remoting frame (RocketMQ 4's `RemotingCommand` on the wire).
//!
//! ```text
//!  offset size  field
//!  ------ ----  ---------------------------------------------------------------
//!       0    4  LENGTH       bytes after this field: 4 + header length + body length (big-endian)
//!       4    4  HEADER LEN   high byte: serialization (0 JSON, 1 RocketMQ binary); low 24 bits: length
//!       8    n  HEADER       code, language, version, opaque, flag, remark, extFields
//!     8+n    .  BODY         the rest of the frame
//! ```
//!
//! The RocketMQ binary header (`RocketMQSerializable`):
//!
//! ```text
//!   2  code      i16
//!   1  language  LanguageCode ordinal
//!   2  version   i16
//!   4  opaque    i32
//!   4  flag      i32 (bit 0: response, bit 1: oneway)
//!   4  remark length, then UTF-8 (0: none)
//!   4  extFields length, then per field: 2 key length, key, 4 value length, value
//! ```
//!
//! Every declared length is checked against what is left of the frame before anything is
//! allocated, and a frame is at most [`MAX_FRAME`] bytes, so a hostile peer costs at most
//! one frame of memory per connection.

use std::collections::BTreeMap;
use std::fmt;

/// Largest frame accepted (the LENGTH field).
pub const MAX_FRAME: usize = 16 << 20;
/// Flag bit: the command is a response.
pub const FLAG_RESPONSE: i32 = 1;
/// Flag bit: the request expects no response.
pub const FLAG_ONEWAY: i32 = 2;

/// How the header is serialized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SerializeType {
    /// JSON (what most clients send).
    #[default]
    Json,
    /// RocketMQ's binary header.
    RocketMq,
}

/// Client languages in `LanguageCode` order (the binary header carries the ordinal).
const LANGUAGES: [&str; 13] = [
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
    "OMS", "RUST",
];

/// One remoting command, request or response.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RemotingCommand {
    pub code: i32,
    pub language: String,
    pub version: i32,
    pub opaque: i32,
    pub flag: i32,
    pub remark: Option<String>,
    pub ext: BTreeMap<String, String>,
    pub body: Vec<u8>,
    /// How the header was (or will be) serialized; responses use the request's.
    pub serialize: SerializeType,
}

/// Why a frame could not be read. The connection cannot be resynchronized after any of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodecError {
    /// LENGTH is below the 4 bytes of the header length field, or above [`MAX_FRAME`].
    BadLength(usize),
    /// The header length does not fit in the frame.
    BadHeaderLength { header: usize, frame: usize },
    /// Serialization type other than 0 (JSON) or 1 (binary).
    UnknownSerialization(u8),
    /// The header could not be decoded.
    BadHeader(String),
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::BadLength(n) => {
                write!(f, "frame length {n} is not within 4..={MAX_FRAME} bytes")
            }
            CodecError::BadHeaderLength { header, frame } => write!(
                f,
                "header length {header} does not fit in a frame of {frame} bytes"
            ),
            CodecError::UnknownSerialization(t) => {
                write!(
                    f,
                    "serialization type {t} is neither 0 (JSON) nor 1 (RocketMQ)"
                )
            }
            CodecError::BadHeader(e) => write!(f, "undecodable header: {e}"),
        }
    }
}

impl std::error::Error for CodecError {}

impl RemotingCommand {
    /// A request.
    #[must_use]
    pub fn request(code: i32, ext: BTreeMap<String, String>, body: Vec<u8>) -> Self {
        RemotingCommand {
            code,
            language: "JAVA".into(),
            version: 399,
            ext,
            body,
            ..Default::default()
        }
    }

    /// A response to `req` (same opaque and serialization).
    #[must_use]
    pub fn response_to(req: &RemotingCommand, code: i32, remark: Option<String>) -> Self {
        RemotingCommand {
            code,
            language: "JAVA".into(),
            version: req.version,
            opaque: req.opaque,
            flag: FLAG_RESPONSE,
            remark,
            serialize: req.serialize,
            ..Default::default()
        }
    }

    /// Whether this is a response.
    #[must_use]
    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    /// Whether the sender expects no answer.
    #[must_use]
    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    /// The whole frame, LENGTH field included.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let header = match self.serialize {
            SerializeType::Json => self.json_header(),
            SerializeType::RocketMq => self.binary_header(),
        };
        let ty: u32 = match self.serialize {
            SerializeType::Json => 0,
            SerializeType::RocketMq => 1,
        };
        let mut out = Vec::with_capacity(8 + header.len() + self.body.len());
        out.extend_from_slice(&((4 + header.len() + self.body.len()) as u32).to_be_bytes());
        out.extend_from_slice(&((ty << 24) | (header.len() as u32 & 0x00FF_FFFF)).to_be_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&self.body);
        out
    }

    fn json_header(&self) -> Vec<u8> {
        let mut h = serde_json::Map::new();
        h.insert("code".into(), self.code.into());
        h.insert("language".into(), self.language.clone().into());
        h.insert("version".into(), self.version.into());
        h.insert("opaque".into(), self.opaque.into());
        h.insert("flag".into(), self.flag.into());
        if let Some(r) = &self.remark {
            h.insert("remark".into(), r.clone().into());
        }
        if !self.ext.is_empty() {
            let ext: serde_json::Map<String, serde_json::Value> = self
                .ext
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            h.insert("extFields".into(), ext.into());
        }
        h.insert("serializeTypeCurrentRPC".into(), "JSON".into());
        serde_json::to_vec(&h).unwrap_or_default()
    }

    fn binary_header(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&(self.code as i16).to_be_bytes());
        let lang = LANGUAGES
            .iter()
            .position(|l| *l == self.language)
            .unwrap_or(0);
        out.push(lang as u8);
        out.extend_from_slice(&(self.version as i16).to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.flag.to_be_bytes());
        match &self.remark {
            Some(r) => {
                out.extend_from_slice(&(r.len() as u32).to_be_bytes());
                out.extend_from_slice(r.as_bytes());
            }
            None => out.extend_from_slice(&0u32.to_be_bytes()),
        }
        let mut ext = Vec::new();
        for (k, v) in &self.ext {
            ext.extend_from_slice(&(k.len() as u16).to_be_bytes());
            ext.extend_from_slice(k.as_bytes());
            ext.extend_from_slice(&(v.len() as u32).to_be_bytes());
            ext.extend_from_slice(v.as_bytes());
        }
        out.extend_from_slice(&(ext.len() as u32).to_be_bytes());
        out.extend_from_slice(&ext);
        out
    }
}

/// Reads the LENGTH field of a frame: how many bytes follow it. Checked against [`MAX_FRAME`].
pub fn frame_length(prefix: [u8; 4]) -> Result<usize, CodecError> {
    let n = u32::from_be_bytes(prefix) as usize;
    if !(4..=MAX_FRAME).contains(&n) {
        return Err(CodecError::BadLength(n));
    }
    Ok(n)
}

/// Reads the HEADER LEN field of a frame of `frame` bytes (LENGTH): the serialization type
/// and the header length, checked to fit in the frame. The body is the rest of the frame.
pub fn header_length(field: [u8; 4], frame: usize) -> Result<(u8, usize), CodecError> {
    let ori = u32::from_be_bytes(field);
    let ty = (ori >> 24) as u8;
    let header_len = (ori & 0x00FF_FFFF) as usize;
    if header_len > frame.saturating_sub(4) {
        return Err(CodecError::BadHeaderLength {
            header: header_len,
            frame,
        });
    }
    Ok((ty, header_len))
}

/// Decodes a header of serialization type `ty` (the command without its body).
pub fn decode_header(ty: u8, header: &[u8]) -> Result<RemotingCommand, CodecError> {
    match ty {
        0 => decode_json(header),
        1 => decode_binary(header),
        t => Err(CodecError::UnknownSerialization(t)),
    }
}

/// Decodes the bytes after the LENGTH field (exactly LENGTH of them).
pub fn decode_frame(frame: &[u8]) -> Result<RemotingCommand, CodecError> {
    if frame.len() < 4 || frame.len() > MAX_FRAME {
        return Err(CodecError::BadLength(frame.len()));
    }
    let (ty, header_len) = header_length([frame[0], frame[1], frame[2], frame[3]], frame.len())?;
    let (header, body) = frame[4..].split_at(header_len);
    let mut cmd = decode_header(ty, header)?;
    cmd.body = body.to_vec();
    Ok(cmd)
}

/// Decodes a whole frame, LENGTH field included (tests and clients).
pub fn decode(bytes: &[u8]) -> Result<RemotingCommand, CodecError> {
    if bytes.len() < 4 {
        return Err(CodecError::BadLength(bytes.len()));
    }
    let n = frame_length([bytes[0], bytes[1], bytes[2], bytes[3]])?;
    if bytes.len() - 4 != n {
        return Err(CodecError::BadLength(n));
    }
    decode_frame(&bytes[4..])
}

fn int_of(v: Option<&serde_json::Value>, field: &str) -> Result<i32, CodecError> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(0),
        Some(serde_json::Value::Number(n)) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| CodecError::BadHeader(format!("`{field}` {n} is not a 32-bit integer"))),
        Some(serde_json::Value::String(s)) => s
            .parse()
            .map_err(|_| CodecError::BadHeader(format!("`{field}` `{s}` is not an integer"))),
        Some(other) => Err(CodecError::BadHeader(format!(
            "`{field}` is {other}, not an integer"
        ))),
    }
}

fn decode_json(header: &[u8]) -> Result<RemotingCommand, CodecError> {
    let v: serde_json::Value =
        serde_json::from_slice(header).map_err(|e| CodecError::BadHeader(e.to_string()))?;
    let serde_json::Value::Object(h) = v else {
        return Err(CodecError::BadHeader(
            "the JSON header is not an object".into(),
        ));
    };
    let mut ext = BTreeMap::new();
    match h.get("extFields") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Object(m)) => {
            for (k, v) in m {
                let s = match v {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Null => continue,
                    other => other.to_string(),
                };
                ext.insert(k.clone(), s);
            }
        }
        Some(_) => return Err(CodecError::BadHeader("`extFields` is not an object".into())),
    }
    let language = match h.get("language") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .and_then(|i| LANGUAGES.get(i as usize))
            .map_or_else(|| "OTHER".to_string(), |s| (*s).to_string()),
        _ => "OTHER".into(),
    };
    Ok(RemotingCommand {
        code: int_of(h.get("code"), "code")?,
        language,
        version: int_of(h.get("version"), "version")?,
        opaque: int_of(h.get("opaque"), "opaque")?,
        flag: int_of(h.get("flag"), "flag")?,
        remark: h.get("remark").and_then(|r| r.as_str()).map(String::from),
        ext,
        body: Vec::new(),
        serialize: SerializeType::Json,
    })
}

/// A bounds-checked reader over the binary header.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], CodecError> {
        if self.buf.len() - self.pos < n {
            return Err(CodecError::BadHeader(format!(
                "{what} needs {n} bytes, {} left",
                self.buf.len() - self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8, CodecError> {
        Ok(self.take(1, what)?[0])
    }
    fn i16(&mut self, what: &str) -> Result<i16, CodecError> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self, what: &str) -> Result<i32, CodecError> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn string(&mut self, len: usize, what: &str) -> Result<String, CodecError> {
        let b = self.take(len, what)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| CodecError::BadHeader(format!("{what} is not UTF-8")))
    }
    fn len32(&mut self, what: &str) -> Result<usize, CodecError> {
        let n = self.i32(what)?;
        usize::try_from(n)
            .map_err(|_| CodecError::BadHeader(format!("{what} length {n} is negative")))
    }
}

fn decode_binary(header: &[u8]) -> Result<RemotingCommand, CodecError> {
    let mut r = Reader {
        buf: header,
        pos: 0,
    };
    let code = i32::from(r.i16("code")?);
    let lang = r.u8("language")?;
    let version = i32::from(r.i16("version")?);
    let opaque = r.i32("opaque")?;
    let flag = r.i32("flag")?;
    let remark_len = r.len32("remark")?;
    let remark = if remark_len > 0 {
        Some(r.string(remark_len, "remark")?)
    } else {
        None
    };
    let ext_len = r.len32("extFields")?;
    let ext_bytes = r.take(ext_len, "extFields")?;
    let mut e = Reader {
        buf: ext_bytes,
        pos: 0,
    };
    let mut ext = BTreeMap::new();
    while e.pos < ext_bytes.len() {
        let kl = e.i16("extFields key length")?;
        let kl = usize::try_from(kl)
            .map_err(|_| CodecError::BadHeader(format!("extFields key length {kl} is negative")))?;
        let k = e.string(kl, "extFields key")?;
        let vl = e.len32("extFields value")?;
        let v = e.string(vl, "extFields value")?;
        ext.insert(k, v);
    }
    Ok(RemotingCommand {
        code,
        language: LANGUAGES
            .get(lang as usize)
            .map_or("OTHER", |s| *s)
            .to_string(),
        version,
        opaque,
        flag,
        remark,
        ext,
        body: Vec::new(),
        serialize: SerializeType::RocketMq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ser: SerializeType) -> RemotingCommand {
        let mut ext = BTreeMap::new();
        ext.insert("topic".to_string(), "T".to_string());
        ext.insert("queueId".to_string(), "3".to_string());
        RemotingCommand {
            code: 310,
            language: "RUST".into(),
            version: 473,
            opaque: 42,
            flag: FLAG_ONEWAY,
            remark: Some("héllo".into()),
            ext,
            body: b"body".to_vec(),
            serialize: ser,
        }
    }

    #[test]
    fn json_round_trip() {
        let c = sample(SerializeType::Json);
        let bytes = c.encode();
        assert_eq!(bytes[4], 0, "serialization type JSON");
        assert_eq!(decode(&bytes).unwrap(), c);
    }

    #[test]
    fn binary_round_trip() {
        let c = sample(SerializeType::RocketMq);
        let bytes = c.encode();
        assert_eq!(bytes[4], 1, "serialization type RocketMQ");
        // code 310 as i16, language RUST = 12
        assert_eq!(&bytes[8..11], &[0x01, 0x36, 12]);
        assert_eq!(decode(&bytes).unwrap(), c);
        let mut none = c.clone();
        none.remark = None;
        none.ext.clear();
        assert_eq!(decode(&none.encode()).unwrap(), none);
    }

    #[test]
    fn json_as_java_writes_it() {
        let header = br#"{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":433}"#;
        let mut frame = Vec::new();
        frame.extend_from_slice(&((4 + header.len()) as u32).to_be_bytes());
        frame.extend_from_slice(&(header.len() as u32).to_be_bytes());
        frame.extend_from_slice(header);
        let c = decode(&frame).unwrap();
        assert_eq!(c.code, 105);
        assert_eq!(c.opaque, 7);
        assert_eq!(c.ext["topic"], "TopicTest");
        assert!(c.body.is_empty());
        assert!(!c.is_response() && !c.is_oneway());
        let r = RemotingCommand::response_to(&c, 0, None);
        assert!(r.is_response());
        assert_eq!(r.opaque, 7);
    }

    #[test]
    fn bad_lengths_are_refused() {
        assert_eq!(frame_length([0, 0, 0, 3]), Err(CodecError::BadLength(3)));
        assert_eq!(
            frame_length(((MAX_FRAME + 1) as u32).to_be_bytes()),
            Err(CodecError::BadLength(MAX_FRAME + 1))
        );
        assert!(matches!(
            frame_length([0xFF, 0xFF, 0xFF, 0xFF]),
            Err(CodecError::BadLength(_))
        ));
        assert_eq!(frame_length([0, 0, 0, 4]), Ok(4));
        // header length above what the frame holds
        let mut f = Vec::new();
        f.extend_from_slice(&100u32.to_be_bytes());
        f.extend_from_slice(b"{}");
        assert!(matches!(
            decode_frame(&f),
            Err(CodecError::BadHeaderLength { header: 100, .. })
        ));
        // huge header length in the low 24 bits
        let f = 0x00FF_FFFFu32.to_be_bytes();
        assert!(matches!(
            decode_frame(&f),
            Err(CodecError::BadHeaderLength { .. })
        ));
        // LENGTH disagreeing with the bytes present
        let mut bytes = sample(SerializeType::Json).encode();
        bytes.pop();
        assert!(matches!(decode(&bytes), Err(CodecError::BadLength(_))));
    }

    #[test]
    fn unknown_serialization_is_refused() {
        let mut f = Vec::new();
        f.extend_from_slice(&((2u32 << 24) | 2).to_be_bytes());
        f.extend_from_slice(b"{}");
        assert_eq!(decode_frame(&f), Err(CodecError::UnknownSerialization(2)));
    }

    #[test]
    fn truncated_binary_headers_are_refused() {
        let full = sample(SerializeType::RocketMq).encode();
        let header_len =
            (u32::from_be_bytes([full[4], full[5], full[6], full[7]]) & 0xFF_FFFF) as usize;
        for cut in 0..header_len {
            let mut f = Vec::new();
            f.extend_from_slice(&((1u32 << 24) | cut as u32).to_be_bytes());
            f.extend_from_slice(&full[8..8 + cut]);
            assert!(
                matches!(decode_frame(&f), Err(CodecError::BadHeader(_))),
                "header cut at {cut}"
            );
        }
        // a remark length far beyond the header, and a negative one
        let mut h = vec![0, 10, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
        h.extend_from_slice(&0x7FFF_FFFFu32.to_be_bytes());
        let mut f = ((1u32 << 24) | h.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(&h);
        assert!(matches!(decode_frame(&f), Err(CodecError::BadHeader(_))));
        let mut h = vec![0, 10, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
        h.extend_from_slice(&(-5i32).to_be_bytes());
        let mut f = ((1u32 << 24) | h.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(&h);
        assert!(matches!(decode_frame(&f), Err(CodecError::BadHeader(_))));
    }

    #[test]
    fn malformed_json_headers_are_refused() {
        for h in [
            &b"{"[..],
            b"[]",
            b"{\"code\":\"x\"}",
            b"{\"code\":99999999999}",
            b"{\"extFields\":3}",
            b"\xff\xfe",
        ] {
            let mut f = (h.len() as u32).to_be_bytes().to_vec();
            f.extend_from_slice(h);
            assert!(
                matches!(decode_frame(&f), Err(CodecError::BadHeader(_))),
                "{:?}",
                String::from_utf8_lossy(h)
            );
        }
    }
}
