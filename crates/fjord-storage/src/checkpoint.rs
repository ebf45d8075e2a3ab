//! Kafka's plain-text checkpoint files and the atomic file replacement they rely on.
//!
//! A checkpoint file is UTF-8 text: a version line, an entry-count line, then one line per entry.
//! The offset checkpoints kept in a log dir (`recovery-point-offset-checkpoint`,
//! `replication-offset-checkpoint`, `log-start-offset-checkpoint`, `cleaner-offset-checkpoint`)
//! use version 0 and `topic partition offset` entries; the per-partition
//! `leader-epoch-checkpoint` reuses the same envelope with `epoch start_offset` entries
//! (see [`crate::leader_epoch`]).
//!
//! Every write goes to `<file>.tmp`, is fsynced, renamed over the target and the directory is
//! fsynced, so a crash leaves either the old or the new file, never a torn one.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Version of the offset checkpoint format.
pub const OFFSET_CHECKPOINT_VERSION: i32 = 0;

/// Errors reading a checkpoint file. Each names the file so an operator can find it.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("error reading checkpoint file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("checkpoint file {path} is not valid UTF-8")]
    InvalidUtf8 { path: PathBuf },
    #[error("unrecognised version {found} (expected {expected}) in checkpoint file {path}")]
    UnsupportedVersion {
        path: PathBuf,
        found: i32,
        expected: i32,
    },
    #[error("malformed line {line_number} in checkpoint file {path}: {line:?}")]
    MalformedLine {
        path: PathBuf,
        /// 1-based, counting the version line as line 1.
        line_number: usize,
        line: String,
    },
    #[error("expected {expected} entries in checkpoint file {path}, but found {found}")]
    CountMismatch {
        path: PathBuf,
        expected: usize,
        found: usize,
    },
}

/// The temporary sibling a file is written to before it replaces `path`, as Kafka names it.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Replaces `path` with `contents` atomically and durably: write `<path>.tmp`, fsync it, rename it
/// over `path`, then fsync the parent directory so the rename itself survives a crash.
pub fn write_file_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = temp_path(path);
    let result = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        sync_parent_dir(path)
    })();
    if result.is_err() {
        // Best effort: a leftover temp file is harmless but untidy.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Fsyncs the directory holding `path`, making a create, rename or delete in it durable.
pub fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

/// Splits a line on runs of whitespace the way Java's `line.split("\\s+")` does: leading
/// whitespace yields an empty first field (so such a line is malformed), trailing whitespace is
/// dropped.
pub fn split_whitespace_fields(line: &str) -> Vec<&str> {
    let is_ws = |c: char| c.is_ascii_whitespace();
    if line.is_empty() {
        return vec![""];
    }
    let body = line.trim_end_matches(is_ws);
    if body.is_empty() {
        return Vec::new();
    }
    let mut fields = Vec::new();
    if body.starts_with(is_ws) {
        fields.push("");
    }
    fields.extend(body.split(is_ws).filter(|f| !f.is_empty()));
    fields
}

/// Writes a "version / count / lines" checkpoint file atomically, formatting each entry with
/// `format_entry` (which must not produce a newline).
pub fn write_checkpoint_file<T>(
    path: &Path,
    version: i32,
    entries: &[T],
    format_entry: impl Fn(&T) -> String,
) -> io::Result<()> {
    let mut text = format!("{version}\n{}\n", entries.len());
    for entry in entries {
        text.push_str(&format_entry(entry));
        text.push('\n');
    }
    write_file_atomically(path, text.as_bytes())
}

/// Reads a "version / count / lines" checkpoint file, parsing each entry line with `parse_entry`
/// (`None` means the line is malformed).
///
/// As in Kafka: a missing or empty file, or one holding only the version line, reads as no
/// entries; the version must equal `version`; the number of entry lines must equal the count.
pub fn read_checkpoint_file<T>(
    path: &Path,
    version: i32,
    parse_entry: impl Fn(&str) -> Option<T>,
) -> Result<Vec<T>, CheckpointError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(CheckpointError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let text = String::from_utf8(bytes).map_err(|_| CheckpointError::InvalidUtf8 {
        path: path.to_path_buf(),
    })?;
    let malformed = |line_number: usize, line: &str| CheckpointError::MalformedLine {
        path: path.to_path_buf(),
        line_number,
        line: line.to_string(),
    };

    let mut lines = text.lines();
    let Some(version_line) = lines.next() else {
        return Ok(Vec::new());
    };
    let found: i32 = version_line
        .parse()
        .map_err(|_| malformed(1, version_line))?;
    if found != version {
        return Err(CheckpointError::UnsupportedVersion {
            path: path.to_path_buf(),
            found,
            expected: version,
        });
    }
    let Some(count_line) = lines.next() else {
        return Ok(Vec::new());
    };
    let expected: usize = count_line
        .parse::<i32>()
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| malformed(2, count_line))?;

    // The capacity comes from the lines actually present, never from the declared count.
    let mut entries = Vec::new();
    for (index, line) in lines.enumerate() {
        let entry = parse_entry(line).ok_or_else(|| malformed(index + 3, line))?;
        entries.push(entry);
    }
    if entries.len() != expected {
        return Err(CheckpointError::CountMismatch {
            path: path.to_path_buf(),
            expected,
            found: entries.len(),
        });
    }
    Ok(entries)
}

/// Writes an offset checkpoint (`topic partition offset` per line, version 0) atomically.
pub fn write_offset_checkpoint(path: &Path, entries: &[(String, i32, i64)]) -> io::Result<()> {
    for (topic, _, _) in entries {
        // A topic containing whitespace could never be read back; Kafka's topic-name rules
        // forbid it, so this only trips on a caller bug.
        if topic.is_empty() || topic.chars().any(char::is_whitespace) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("topic name {topic:?} cannot be written to an offset checkpoint"),
            ));
        }
    }
    write_checkpoint_file(
        path,
        OFFSET_CHECKPOINT_VERSION,
        entries,
        |(topic, partition, offset)| format!("{topic} {partition} {offset}"),
    )
}

/// Reads an offset checkpoint written by Kafka or fjord. A missing file reads as empty.
pub fn read_offset_checkpoint(path: &Path) -> Result<Vec<(String, i32, i64)>, CheckpointError> {
    read_checkpoint_file(path, OFFSET_CHECKPOINT_VERSION, parse_offset_entry)
}

fn parse_offset_entry(line: &str) -> Option<(String, i32, i64)> {
    match split_whitespace_fields(line).as_slice() {
        [topic, partition, offset] if !topic.is_empty() => Some((
            topic.to_string(),
            partition.parse().ok()?,
            offset.parse().ok()?,
        )),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn path_in(dir: &tempfile::TempDir, name: &str) -> PathBuf {
        dir.path().join(name)
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(&dir, "recovery-point-offset-checkpoint");
        let entries = vec![
            ("orders".to_string(), 0, 42),
            ("orders".to_string(), 1, 0),
            ("__consumer_offsets".to_string(), 49, i64::MAX),
        ];
        write_offset_checkpoint(&path, &entries).unwrap();
        assert_eq!(read_offset_checkpoint(&path).unwrap(), entries);
        assert!(!temp_path(&path).exists());
    }

    #[test]
    fn writes_kafka_text_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(&dir, "replication-offset-checkpoint");
        write_offset_checkpoint(&path, &[("t".into(), 0, 5), ("t".into(), 1, 7)]).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "0\n2\nt 0 5\nt 1 7\n");
    }

    #[test]
    fn reads_kafka_written_fixture() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(&dir, "log-start-offset-checkpoint");
        fs::write(&path, "0\n3\nfoo 0 10\nfoo\t1   20\nbar-baz.x_y 2 30 \n").unwrap();
        assert_eq!(
            read_offset_checkpoint(&path).unwrap(),
            vec![
                ("foo".to_string(), 0, 10),
                ("foo".to_string(), 1, 20),
                ("bar-baz.x_y".to_string(), 2, 30)
            ]
        );
        fs::write(&path, "0\r\n1\r\nfoo 0 10\r\n").unwrap();
        assert_eq!(
            read_offset_checkpoint(&path).unwrap(),
            vec![("foo".to_string(), 0, 10)]
        );
    }

    #[test]
    fn missing_empty_and_header_only_files_read_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(&dir, "cp");
        assert!(read_offset_checkpoint(&path).unwrap().is_empty());
        fs::write(&path, "").unwrap();
        assert!(read_offset_checkpoint(&path).unwrap().is_empty());
        fs::write(&path, "0\n").unwrap();
        assert!(read_offset_checkpoint(&path).unwrap().is_empty());
        fs::write(&path, "0\n0\n").unwrap();
        assert!(read_offset_checkpoint(&path).unwrap().is_empty());
    }

    fn read_err(contents: &[u8]) -> CheckpointError {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(&dir, "cp");
        fs::write(&path, contents).unwrap();
        let err = read_offset_checkpoint(&path).unwrap_err();
        assert!(err.to_string().contains(&path.display().to_string()));
        err
    }

    #[test]
    fn malformed_lines_name_the_line() {
        let cases: &[(&[u8], usize)] = &[
            (b"zero\n", 1),
            (b"0\nmany\n", 2),
            (b"0\n-1\n", 2),
            (b"0\n1\nt 0\n", 3),
            (b"0\n1\nt 0 1 2\n", 3),
            (b"0\n1\n t 0 1\n", 3),
            (b"0\n2\nt 0 1\nt x 1\n", 4),
            (b"0\n1\nt 0 99999999999999999999\n", 3),
            (b"0\n1\nt 99999999999 1\n", 3),
            (b"0\n1\n\n", 3),
        ];
        for (contents, line) in cases {
            match read_err(contents) {
                CheckpointError::MalformedLine { line_number, .. } => {
                    assert_eq!(
                        line_number,
                        *line,
                        "{:?}",
                        String::from_utf8_lossy(contents)
                    )
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn wrong_version_count_mismatch_and_bad_utf8() {
        assert!(matches!(
            read_err(b"1\n0\n"),
            CheckpointError::UnsupportedVersion {
                found: 1,
                expected: 0,
                ..
            }
        ));
        assert!(matches!(
            read_err(b"0\n2\nt 0 1\n"),
            CheckpointError::CountMismatch {
                expected: 2,
                found: 1,
                ..
            }
        ));
        assert!(matches!(
            read_err(b"0\n0\nt 0 1\n"),
            CheckpointError::CountMismatch {
                expected: 0,
                found: 1,
                ..
            }
        ));
        assert!(matches!(
            read_err(b"0\n1\nt\xff 0 1\n"),
            CheckpointError::InvalidUtf8 { .. }
        ));
    }

    #[test]
    fn huge_declared_count_does_not_allocate() {
        assert!(matches!(
            read_err(b"0\n2147483647\nt 0 1\n"),
            CheckpointError::CountMismatch { found: 1, .. }
        ));
    }

    #[test]
    fn unwritable_topic_names_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(&dir, "cp");
        for topic in ["", "a b", "a\nb"] {
            let err = write_offset_checkpoint(&path, &[(topic.to_string(), 0, 1)]).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
        assert!(!path.exists());
    }

    #[test]
    fn write_replaces_and_fails_cleanly_in_missing_dir() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(&dir, "cp");
        write_offset_checkpoint(&path, &[("a".into(), 0, 1)]).unwrap();
        write_offset_checkpoint(&path, &[]).unwrap();
        assert!(read_offset_checkpoint(&path).unwrap().is_empty());
        let missing = dir.path().join("nope").join("cp");
        assert!(write_offset_checkpoint(&missing, &[]).is_err());
    }

    #[test]
    fn unreadable_path_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where a file is expected.
        assert!(matches!(
            read_offset_checkpoint(dir.path()),
            Err(CheckpointError::Io { .. })
        ));
    }

    #[test]
    fn java_style_field_splitting() {
        assert_eq!(split_whitespace_fields("a b"), vec!["a", "b"]);
        assert_eq!(split_whitespace_fields("a \t b  "), vec!["a", "b"]);
        assert_eq!(split_whitespace_fields(" a b"), vec!["", "a", "b"]);
        assert_eq!(split_whitespace_fields(""), vec![""]);
        assert!(split_whitespace_fields("  ").is_empty());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let dir = tempfile::tempdir().unwrap();
            let path = path_in(&dir, "cp");
            fs::write(&path, &bytes).unwrap();
            let _ = read_offset_checkpoint(&path);
        }

        #[test]
        fn valid_entries_round_trip(entries in proptest::collection::vec(
            ("[a-zA-Z0-9._-]{1,20}", proptest::num::i32::ANY, proptest::num::i64::ANY), 0..20)) {
            let dir = tempfile::tempdir().unwrap();
            let path = path_in(&dir, "cp");
            write_offset_checkpoint(&path, &entries).unwrap();
            proptest::prop_assert_eq!(read_offset_checkpoint(&path).unwrap(), entries);
        }
    }
}
