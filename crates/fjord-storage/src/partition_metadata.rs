//! The `partition.metadata` file in each partition directory, which binds the directory to its
//! topic id (in Kafka's text form of a UUID).
//!
//! The file is two lines, `version: 0` and `topic_id: <id>`. It lets a broker notice that a
//! directory belongs to an older, deleted topic of the same name.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use fjord_common::{TopicId, UuidError};

use crate::checkpoint::write_file_atomically;

/// Name of the file inside a partition directory.
pub const PARTITION_METADATA_FILE_NAME: &str = "partition.metadata";
/// Version fjord writes. Newer versions are read too, as Kafka does, for downgrade safety.
pub const PARTITION_METADATA_VERSION: i32 = 0;

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

/// Path of the file inside partition directory `dir`.
pub fn partition_metadata_path(dir: &Path) -> PathBuf {
    dir.join(PARTITION_METADATA_FILE_NAME)
}

/// Writes `partition.metadata` into partition directory `dir` atomically.
pub fn write_partition_metadata(dir: &Path, topic_id: &TopicId) -> io::Result<()> {
    let text = format!(
        "version: {PARTITION_METADATA_VERSION}\ntopic_id: {}",
        topic_id
    );
    write_file_atomically(&partition_metadata_path(dir), text.as_bytes())
}

/// Reads the topic id from `partition.metadata` in partition directory `dir`; `None` if the file
/// does not exist.
pub fn read_partition_metadata(dir: &Path) -> Result<Option<TopicId>, PartitionMetadataError> {
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
        [_, id] => id
            .parse()
            .map_err(|source| PartitionMetadataError::InvalidTopicId {
                path: path.clone(),
                source,
            })?,
        _ => return Err(malformed(id_line)),
    };
    if id == TopicId::ZERO {
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

    const ID: TopicId = fjord_common::Uuid([
        0x5c, 0x1a, 0xd4, 0x7e, 0x00, 0xff, 0x41, 0x9b, 0x8e, 0x2f, 0xc3, 0x10, 0x77, 0xfe, 0xfb,
        0xbf,
    ]);

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
        fn arbitrary_files_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
            let dir = tempfile::tempdir().unwrap();
            fs::write(partition_metadata_path(dir.path()), &bytes).unwrap();
            let _ = read_partition_metadata(dir.path());
        }
    }
}
