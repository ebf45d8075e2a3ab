//! The `partition.metadata` file in each partition directory, which binds the directory to its
//! topic id, and Kafka's text form of a UUID (URL-safe base64 without padding, 22 characters).
//!
//! The file is two lines, `version: 0` and `topic_id: <id>`. It lets a broker notice that a
//! directory belongs to an older, deleted topic of the same name.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::checkpoint::write_file_atomically;

/// Name of the file inside a partition directory.
pub const PARTITION_METADATA_FILE_NAME: &str = "partition.metadata";
/// Version fjord writes. Newer versions are read too, as Kafka does, for downgrade safety.
pub const PARTITION_METADATA_VERSION: i32 = 0;

/// Errors decoding Kafka's base64 UUID text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UuidError {
    #[error("{0:?} is not a base64 UUID: expected 22 characters (or 24 with padding)")]
    Length(String),
    #[error("{0:?} is not a base64 UUID: invalid character")]
    InvalidCharacter(String),
}

/// Errors reading `partition.metadata`.
#[derive(Debug, thiserror::Error)]
pub enum PartitionMetadataError {
    #[error("error reading partition metadata file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("malformed line in partition metadata file {path}: {line:?}")]
    MalformedLine { path: PathBuf, line: String },
    #[error("unrecognised version {version} of partition metadata file {path}")]
    UnsupportedVersion { path: PathBuf, version: i32 },
    #[error("invalid topic id in partition metadata file {path}: {source}")]
    InvalidTopicId {
        path: PathBuf,
        #[source]
        source: UuidError,
    },
    #[error("invalid topic id in partition metadata file {path}: the zero UUID is reserved")]
    ZeroTopicId { path: PathBuf },
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Encodes a UUID the way Kafka prints one: URL-safe base64, no padding.
pub fn uuid_to_string(id: &[u8; 16]) -> String {
    let mut out = String::with_capacity(22);
    let mut push = |sextet: u32| {
        if let Some(&c) = ALPHABET.get((sextet & 0x3f) as usize) {
            out.push(char::from(c));
        }
    };
    let mut chunks = id.chunks_exact(3);
    for chunk in &mut chunks {
        if let [a, b, c] = *chunk {
            let n = u32::from(a) << 16 | u32::from(b) << 8 | u32::from(c);
            for shift in [18, 12, 6, 0] {
                push(n >> shift);
            }
        }
    }
    // 16 = 5 * 3 + 1: one byte is left, giving two characters.
    if let [a] = *chunks.remainder() {
        let n = u32::from(a) << 16;
        push(n >> 18);
        push(n >> 12);
    }
    out
}

fn sextet(c: u8) -> Option<u32> {
    ALPHABET.iter().position(|&a| a == c).map(|p| p as u32)
}

/// Decodes Kafka's UUID text. Like Java's URL-safe decoder it accepts the padded form too and
/// ignores the unused low bits of the last character.
pub fn uuid_from_str(s: &str) -> Result<[u8; 16], UuidError> {
    let body = match s.len() {
        22 => s,
        24 => s
            .strip_suffix("==")
            .ok_or_else(|| UuidError::InvalidCharacter(s.to_string()))?,
        _ => return Err(UuidError::Length(s.chars().take(24).collect())),
    };
    let mut bits: u128 = 0;
    let mut chars = body.as_bytes().iter();
    // 21 characters carry 126 bits; the 22nd contributes its top 2 bits and 4 unused ones.
    for &c in chars.by_ref().take(21) {
        let v = sextet(c).ok_or_else(|| UuidError::InvalidCharacter(s.to_string()))?;
        bits = bits << 6 | u128::from(v);
    }
    for &c in chars {
        let v = sextet(c).ok_or_else(|| UuidError::InvalidCharacter(s.to_string()))?;
        bits = bits << 2 | u128::from(v >> 4);
    }
    Ok(bits.to_be_bytes())
}

/// Path of the file inside partition directory `dir`.
pub fn partition_metadata_path(dir: &Path) -> PathBuf {
    dir.join(PARTITION_METADATA_FILE_NAME)
}

/// Writes `partition.metadata` into partition directory `dir` atomically.
pub fn write_partition_metadata(dir: &Path, topic_id: &[u8; 16]) -> io::Result<()> {
    let text = format!(
        "version: {PARTITION_METADATA_VERSION}\ntopic_id: {}",
        uuid_to_string(topic_id)
    );
    write_file_atomically(&partition_metadata_path(dir), text.as_bytes())
}

/// Reads the topic id from `partition.metadata` in partition directory `dir`; `None` if the file
/// does not exist.
pub fn read_partition_metadata(dir: &Path) -> Result<Option<[u8; 16]>, PartitionMetadataError> {
    let path = partition_metadata_path(dir);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(PartitionMetadataError::Io { path, source }),
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut lines = text.lines();
    let malformed = |line: Option<&str>| PartitionMetadataError::MalformedLine {
        path: path.clone(),
        line: line.unwrap_or("").to_string(),
    };

    let version_line = lines.next();
    let version: i32 = match split_on_colon_space(version_line.unwrap_or("")).as_slice() {
        [_, v] => v.parse().map_err(|_| malformed(version_line))?,
        _ => return Err(malformed(version_line)),
    };
    if version < PARTITION_METADATA_VERSION {
        return Err(PartitionMetadataError::UnsupportedVersion { path, version });
    }
    let id_line = lines.next();
    let id = match split_on_colon_space(id_line.unwrap_or("")).as_slice() {
        [_, id] => uuid_from_str(id).map_err(|source| PartitionMetadataError::InvalidTopicId {
            path: path.clone(),
            source,
        })?,
        _ => return Err(malformed(id_line)),
    };
    if id == [0; 16] {
        return Err(PartitionMetadataError::ZeroTopicId { path });
    }
    Ok(Some(id))
}

/// Splits on `:` followed by at least one whitespace character, as Kafka's reader does
/// (so `version:0` is one field while `version:  0` is two), dropping trailing empty fields.
fn split_on_colon_space(line: &str) -> Vec<&str> {
    let bytes = line.as_bytes();
    let mut parts = Vec::new();
    let mut field_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes.get(i) == Some(&b':') && bytes.get(i + 1).is_some_and(u8::is_ascii_whitespace) {
            parts.push(line.get(field_start..i).unwrap_or(""));
            i += 1;
            while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
                i += 1;
            }
            field_start = i;
        } else {
            i += 1;
        }
    }
    parts.push(line.get(field_start..).unwrap_or(""));
    while parts.len() > 1 && parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    parts
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    const ID: [u8; 16] = [
        0x5c, 0x1a, 0xd4, 0x7e, 0x00, 0xff, 0x41, 0x9b, 0x8e, 0x2f, 0xc3, 0x10, 0x77, 0xfe, 0xfb,
        0xbf,
    ];

    #[test]
    fn uuid_text_matches_java() {
        // RFC 4648 URL-safe base64 without padding, which is what java.util.Base64 produces.
        assert_eq!(uuid_to_string(&[0; 16]), "AAAAAAAAAAAAAAAAAAAAAA");
        let mut one = [0u8; 16];
        one[15] = 1;
        assert_eq!(uuid_to_string(&one), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(uuid_to_string(&[0xff; 16]), "_____________________w");
        assert_eq!(uuid_to_string(&ID), "XBrUfgD_QZuOL8MQd_77vw");
        assert_eq!(uuid_from_str("XBrUfgD_QZuOL8MQd_77vw").unwrap(), ID);
        assert_eq!(uuid_from_str("XBrUfgD_QZuOL8MQd_77vw==").unwrap(), ID);
        assert_eq!(uuid_from_str("AAAAAAAAAAAAAAAAAAAAAQ").unwrap(), one);
    }

    #[test]
    fn uuid_errors() {
        for bad in [
            "",
            "short",
            "XBrUfgD_QZuOL8MQd_77vwAA",
            "XBrUfgD_QZuOL8MQd_77vw=",
            "XBrUfgD_QZuOL8MQd_77vwxxxxxxxxxx",
        ] {
            assert!(uuid_from_str(bad).is_err(), "{bad}");
        }
        // Standard-alphabet characters are not URL-safe base64.
        assert!(matches!(
            uuid_from_str("XBrUfgD/QZuOL8MQd+77vw"),
            Err(UuidError::InvalidCharacter(_))
        ));
        assert!(uuid_from_str("XBrUfgD_QZuOL8MQd_77v\u{e9}").is_err());
        assert!(uuid_from_str("XBrUfgD_QZuOL8MQd_7é").is_err());
    }

    #[test]
    fn file_round_trip_and_exact_text() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_partition_metadata(dir.path()).unwrap(), None);
        write_partition_metadata(dir.path(), &ID).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("partition.metadata")).unwrap(),
            "version: 0\ntopic_id: XBrUfgD_QZuOL8MQd_77vw"
        );
        assert_eq!(read_partition_metadata(dir.path()).unwrap(), Some(ID));
    }

    #[test]
    fn reads_kafka_variants() {
        let dir = tempfile::tempdir().unwrap();
        let path = partition_metadata_path(dir.path());
        for text in [
            "version: 0\ntopic_id: XBrUfgD_QZuOL8MQd_77vw\n",
            "version:   0\r\ntopic_id:\tXBrUfgD_QZuOL8MQd_77vw",
            "version: 3\ntopic_id: XBrUfgD_QZuOL8MQd_77vw\nfuture: stuff\n",
        ] {
            fs::write(&path, text).unwrap();
            assert_eq!(
                read_partition_metadata(dir.path()).unwrap(),
                Some(ID),
                "{text:?}"
            );
        }
    }

    #[test]
    fn every_error_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = partition_metadata_path(dir.path());
        let read = |text: &[u8]| {
            fs::write(&path, text).unwrap();
            read_partition_metadata(dir.path()).unwrap_err()
        };
        use PartitionMetadataError as E;
        assert!(matches!(read(b""), E::MalformedLine { .. }));
        assert!(matches!(
            read(b"version:0\ntopic_id: XBrUfgD_QZuOL8MQd_77vw"),
            E::MalformedLine { .. }
        ));
        assert!(matches!(
            read(b"version: x\ntopic_id: XBrUfgD_QZuOL8MQd_77vw"),
            E::MalformedLine { .. }
        ));
        assert!(matches!(read(b"version: 0"), E::MalformedLine { .. }));
        assert!(matches!(
            read(b"version: 0\ntopic_id: "),
            E::MalformedLine { .. }
        ));
        assert!(matches!(
            read(b"version: 0\ntopic_id: a: b"),
            E::MalformedLine { .. }
        ));
        assert!(matches!(
            read(b"version: -1\ntopic_id: XBrUfgD_QZuOL8MQd_77vw"),
            E::UnsupportedVersion { version: -1, .. }
        ));
        assert!(matches!(
            read(b"version: 0\ntopic_id: nope"),
            E::InvalidTopicId { .. }
        ));
        assert!(matches!(
            read(b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA"),
            E::ZeroTopicId { .. }
        ));
        assert!(matches!(
            read(b"version: 0\ntopic_id: \xff\xfe"),
            E::InvalidTopicId { .. }
        ));
        let msg = read(b"garbage").to_string();
        assert!(msg.contains("partition.metadata"), "{msg}");

        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        assert!(matches!(
            read_partition_metadata(dir.path()),
            Err(E::Io { .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn uuid_round_trips(id in proptest::array::uniform16(proptest::num::u8::ANY)) {
            let text = uuid_to_string(&id);
            proptest::prop_assert_eq!(text.len(), 22);
            proptest::prop_assert_eq!(uuid_from_str(&text).unwrap(), id);
        }

        #[test]
        fn arbitrary_files_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
            let dir = tempfile::tempdir().unwrap();
            fs::write(partition_metadata_path(dir.path()), &bytes).unwrap();
            let _ = read_partition_metadata(dir.path());
        }

        #[test]
        fn arbitrary_uuid_text_never_panics(s in ".{0,30}") {
            let _ = uuid_from_str(&s);
        }
    }
}
