//! The `meta.properties` file at the root of each log directory, which records which cluster
//! and node the directory belongs to, in Java properties syntax as Kafka writes it.
//!
//! Checking it at startup stops a node from serving another node's or another cluster's data
//! after a misconfiguration.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::checkpoint::write_file_atomically;
use fjord_common::Uuid;

/// Name of the file inside a log directory.
pub const META_PROPERTIES_FILE_NAME: &str = "meta.properties";

const VERSION_PROP: &str = "version";
const CLUSTER_ID_PROP: &str = "cluster.id";
const BROKER_ID_PROP: &str = "broker.id";
const NODE_ID_PROP: &str = "node.id";
const DIRECTORY_ID_PROP: &str = "directory.id";

/// Layout version of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaPropertiesVersion {
    /// The ZooKeeper-era layout: the node id is stored as `broker.id`.
    V0,
    /// The KRaft layout: `node.id` and `cluster.id` are always present.
    V1,
}

impl MetaPropertiesVersion {
    pub fn number(self) -> i32 {
        match self {
            Self::V0 => 0,
            Self::V1 => 1,
        }
    }

    fn node_id_prop(self) -> &'static str {
        match self {
            Self::V0 => BROKER_ID_PROP,
            Self::V1 => NODE_ID_PROP,
        }
    }
}

/// The identity recorded in a log directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub version: MetaPropertiesVersion,
    pub cluster_id: String,
    pub node_id: i32,
    /// The directory's own UUID in Kafka's base64 text form, if assigned.
    pub directory_id: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum MetaPropertiesError {
    #[error("error accessing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("invalid {path}: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error(
        "log directory belongs to cluster {found:?} but this node is configured for cluster \
         {expected:?}; point the node at its own data directories"
    )]
    ClusterIdMismatch { expected: String, found: String },
    #[error(
        "log directory belongs to node {found} but this node is configured as node {expected}; \
         if the data was moved, configure the matching node.id, or remove the data to start a \
         new node"
    )]
    NodeIdMismatch { expected: i32, found: i32 },
}

impl MetaProperties {
    /// Path of the file inside log directory `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(META_PROPERTIES_FILE_NAME)
    }

    /// Reads `meta.properties` from log directory `dir`; `None` if the directory has none yet.
    pub fn read(dir: &Path) -> Result<Option<MetaProperties>, MetaPropertiesError> {
        let path = Self::path(dir);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(MetaPropertiesError::Io { path, source }),
        };
        let props = parse_properties(&bytes);
        let malformed = |reason: String| MetaPropertiesError::Malformed {
            path: path.clone(),
            reason,
        };

        let version_text = props.get(VERSION_PROP).map_or("0", String::as_str);
        let version = match version_text.trim().parse::<i32>() {
            Ok(0) => MetaPropertiesVersion::V0,
            Ok(1) => MetaPropertiesVersion::V1,
            Ok(n) => return Err(malformed(format!("unknown version {n}"))),
            Err(_) => return Err(malformed(format!("invalid version {version_text:?}"))),
        };
        let node_id_prop = version.node_id_prop();
        let node_id_text = props
            .get(node_id_prop)
            .ok_or_else(|| malformed(format!("{node_id_prop} is missing")))?;
        let node_id = node_id_text.parse::<i32>().map_err(|_| {
            malformed(format!(
                "{node_id_prop} {node_id_text:?} is not a base-10 number"
            ))
        })?;
        let cluster_id = props
            .get(CLUSTER_ID_PROP)
            .ok_or_else(|| malformed(format!("{CLUSTER_ID_PROP} is missing")))?
            .clone();
        let directory_id = match props.get(DIRECTORY_ID_PROP) {
            None => None,
            Some(text) => {
                text.parse::<Uuid>()
                    .map_err(|e| malformed(format!("{DIRECTORY_ID_PROP}: {e}")))?;
                Some(text.clone())
            }
        };
        Ok(Some(MetaProperties {
            version,
            cluster_id,
            node_id,
            directory_id,
        }))
    }

    /// Writes `meta.properties` into log directory `dir` atomically.
    pub fn write(dir: &Path, props: &MetaProperties) -> io::Result<()> {
        if let Some(id) = &props.directory_id {
            id.parse::<Uuid>().map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{DIRECTORY_ID_PROP}: {e}"),
                )
            })?;
        }
        let mut text = String::from("#\n");
        let mut put = |key: &str, value: &str| {
            text.push_str(key);
            text.push('=');
            escape_value(value, &mut text);
            text.push('\n');
        };
        put(VERSION_PROP, &props.version.number().to_string());
        put(CLUSTER_ID_PROP, &props.cluster_id);
        put(props.version.node_id_prop(), &props.node_id.to_string());
        if let Some(id) = &props.directory_id {
            put(DIRECTORY_ID_PROP, id);
        }
        write_file_atomically(&Self::path(dir), text.as_bytes())
    }

    /// Confirms this directory belongs to the configured node. `expected_cluster_id` is `None`
    /// when the cluster id is not known yet (any stored id is then accepted).
    pub fn check(
        &self,
        expected_cluster_id: Option<&str>,
        expected_node_id: i32,
    ) -> Result<(), MetaPropertiesError> {
        if let Some(expected) = expected_cluster_id {
            if expected != self.cluster_id {
                return Err(MetaPropertiesError::ClusterIdMismatch {
                    expected: expected.to_string(),
                    found: self.cluster_id.clone(),
                });
            }
        }
        if expected_node_id != self.node_id {
            return Err(MetaPropertiesError::NodeIdMismatch {
                expected: expected_node_id,
                found: self.node_id,
            });
        }
        Ok(())
    }
}

/// Escapes a value for a properties file. Non-ASCII and control characters become `\uXXXX`, so
/// the file is plain ASCII and reads the same whether decoded as Latin-1 (as Kafka's reader does)
/// or UTF-8.
fn escape_value(value: &str, out: &mut String) {
    for (i, c) in value.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{c}' => out.push_str("\\f"),
            // Leading spaces would be skipped by the reader.
            ' ' if i == 0 => out.push_str("\\ "),
            '=' | ':' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
        }
    }
}

fn is_prop_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\u{c}')
}

/// Joins natural lines into logical lines: drops blank and comment lines, and follows a line
/// ending in an odd number of backslashes onto the next line, skipping that line's leading
/// whitespace.
fn logical_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    // "\r\n" is one line terminator, as are lone "\n" and "\r".
    let text = text.replace("\r\n", "\n");
    for raw in text.split(['\n', '\r']) {
        let line = raw.trim_start_matches(is_prop_whitespace);
        let continuing = current.is_some();
        if !continuing && (line.is_empty() || line.starts_with('#') || line.starts_with('!')) {
            continue;
        }
        let trailing_backslashes = line.chars().rev().take_while(|&c| c == '\\').count();
        let continues = trailing_backslashes % 2 == 1;
        let body = if continues {
            line.get(..line.len() - 1).unwrap_or("")
        } else {
            line
        };
        let mut acc = current.take().unwrap_or_default();
        acc.push_str(body);
        if continues {
            current = Some(acc);
        } else {
            out.push(acc);
        }
    }
    if let Some(acc) = current {
        out.push(acc);
    }
    out
}

/// Parses Java properties text. Bytes are decoded as Latin-1, matching `Properties.load` on a
/// stream; later keys override earlier ones.
fn parse_properties(bytes: &[u8]) -> HashMap<String, String> {
    let text: String = bytes.iter().map(|&b| char::from(b)).collect();
    let mut props = HashMap::new();
    for line in logical_lines(&text) {
        let mut chars = line.chars().peekable();
        let mut key_raw = String::new();
        // The key ends at the first unescaped separator or whitespace.
        while let Some(c) = chars.next() {
            if c == '\\' {
                key_raw.push(c);
                if let Some(next) = chars.next() {
                    key_raw.push(next);
                }
                continue;
            }
            if c == '=' || c == ':' || is_prop_whitespace(c) {
                // Whitespace may be followed by one '=' or ':' before the value.
                if is_prop_whitespace(c) {
                    while chars.peek().is_some_and(|&c| is_prop_whitespace(c)) {
                        chars.next();
                    }
                    if chars.peek().is_some_and(|&c| c == '=' || c == ':') {
                        chars.next();
                    }
                }
                break;
            }
            key_raw.push(c);
        }
        while chars.peek().is_some_and(|&c| is_prop_whitespace(c)) {
            chars.next();
        }
        let value_raw: String = chars.collect();
        props.insert(unescape(&key_raw), unescape(&value_raw));
    }
    props
}

fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    // A UTF-16 high surrogate from a `\\uXXXX` escape, waiting for its low half.
    let mut pending_high: Option<u16> = None;
    while let Some(c) = chars.next() {
        let is_unicode_escape = c == '\\' && chars.peek() == Some(&'u');
        if !is_unicode_escape && pending_high.take().is_some() {
            out.push(char::REPLACEMENT_CHARACTER);
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let Ok(unit) = u16::from_str_radix(&hex, 16) else {
                    // Java rejects a malformed escape; keeping the text lets whoever parses
                    // the value report it as invalid.
                    if pending_high.take().is_some() {
                        out.push(char::REPLACEMENT_CHARACTER);
                    }
                    out.push_str("\\u");
                    out.push_str(&hex);
                    continue;
                };
                if let Some(high) = pending_high.take() {
                    if (0xDC00..0xE000).contains(&unit) {
                        let code = 0x10000
                            + ((u32::from(high) - 0xD800) << 10)
                            + (u32::from(unit) - 0xDC00);
                        out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                        continue;
                    }
                    out.push(char::REPLACEMENT_CHARACTER);
                }
                if (0xD800..0xDC00).contains(&unit) {
                    pending_high = Some(unit);
                } else {
                    out.push(
                        char::from_u32(u32::from(unit)).unwrap_or(char::REPLACEMENT_CHARACTER),
                    );
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    if pending_high.is_some() {
        out.push(char::REPLACEMENT_CHARACTER);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    const DIR_ID: &str = "XBrUfgD_QZuOL8MQd_77vw";

    fn sample() -> MetaProperties {
        MetaProperties {
            version: MetaPropertiesVersion::V1,
            cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".to_string(),
            node_id: 3,
            directory_id: Some(DIR_ID.to_string()),
        }
    }

    fn write_raw(dir: &Path, text: &[u8]) {
        fs::write(MetaProperties::path(dir), text).unwrap();
    }

    #[test]
    fn round_trip_and_text() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(MetaProperties::read(dir.path()).unwrap(), None);
        MetaProperties::write(dir.path(), &sample()).unwrap();
        assert_eq!(
            fs::read_to_string(MetaProperties::path(dir.path())).unwrap(),
            format!("#\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\nnode.id=3\ndirectory.id={DIR_ID}\n")
        );
        assert_eq!(MetaProperties::read(dir.path()).unwrap(), Some(sample()));

        let v0 = MetaProperties {
            version: MetaPropertiesVersion::V0,
            directory_id: None,
            ..sample()
        };
        MetaProperties::write(dir.path(), &v0).unwrap();
        let text = fs::read_to_string(MetaProperties::path(dir.path())).unwrap();
        assert!(text.contains("broker.id=3\n") && !text.contains("node.id"));
        assert_eq!(MetaProperties::read(dir.path()).unwrap(), Some(v0));
    }

    #[test]
    fn odd_values_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let props = MetaProperties {
            cluster_id: " lead=a:b#c!d\\e\tf\ng\u{e9}\u{1F600} ".to_string(),
            ..sample()
        };
        MetaProperties::write(dir.path(), &props).unwrap();
        assert!(fs::read(MetaProperties::path(dir.path()))
            .unwrap()
            .is_ascii());
        assert_eq!(MetaProperties::read(dir.path()).unwrap(), Some(props));
    }

    #[test]
    fn reads_kafka_written_file() {
        let dir = tempfile::tempdir().unwrap();
        write_raw(
            dir.path(),
            format!(
                "#\n#Tue Mar 14 10:12:01 UTC 2023\nnode.id=1\ndirectory.id={DIR_ID}\nversion=1\ncluster.id=J8qXRwI-Qyi2G0guFTiuYw\n"
            )
            .as_bytes(),
        );
        assert_eq!(
            MetaProperties::read(dir.path()).unwrap(),
            Some(MetaProperties {
                version: MetaPropertiesVersion::V1,
                cluster_id: "J8qXRwI-Qyi2G0guFTiuYw".to_string(),
                node_id: 1,
                directory_id: Some(DIR_ID.to_string()),
            })
        );
    }

    #[test]
    fn java_properties_syntax() {
        let props = parse_properties(
            b"  ! comment\r\n# another\n\n  a = 1\nb:2\nc 3\nd\\\r\n    continued\ne\\=x=y\\u0041\\z\nf\nlong\\\\\nlast=\xe9",
        );
        assert_eq!(props["a"], "1");
        assert_eq!(props["b"], "2");
        assert_eq!(props["c"], "3");
        assert_eq!(props["dcontinued"], "");
        assert_eq!(props["e=x"], "yAz");
        assert_eq!(props["f"], "");
        assert_eq!(props["long\\"], "");
        assert_eq!(props["last"], "\u{e9}");
        assert_eq!(unescape("\\uD83D\\uDE00"), "\u{1F600}");
        assert_eq!(unescape("\\uD83D"), "\u{FFFD}");
        assert_eq!(unescape("\\uD83Dx"), "\u{FFFD}x");
        assert_eq!(unescape("\\uD83D\\u0041"), "\u{FFFD}A");
        assert_eq!(unescape("\\uDE00"), "\u{FFFD}");
        assert_eq!(unescape("\\uZZ"), "\\uZZ");
        assert_eq!(unescape("trailing\\"), "trailing");
    }

    #[test]
    fn malformed_files() {
        let dir = tempfile::tempdir().unwrap();
        let cases: &[&str] = &[
            "version=2\nnode.id=1\ncluster.id=c\n",
            "version=one\nnode.id=1\ncluster.id=c\n",
            "version=1\ncluster.id=c\n",
            "version=1\nbroker.id=1\ncluster.id=c\n",
            "version=1\nnode.id=1 \ncluster.id=c\n",
            "version=1\nnode.id=x\ncluster.id=c\n",
            "version=1\nnode.id=1\n",
            "version=1\nnode.id=1\ncluster.id=c\ndirectory.id=nope\n",
            "node.id=1\ncluster.id=c\n",
        ];
        for text in cases {
            write_raw(dir.path(), text.as_bytes());
            let err = MetaProperties::read(dir.path()).unwrap_err();
            assert!(
                matches!(err, MetaPropertiesError::Malformed { .. }),
                "{text:?}"
            );
            assert!(err.to_string().contains("meta.properties"));
        }
        // A version line with surrounding spaces is fine, as in Kafka.
        write_raw(dir.path(), b"version= 1 \nnode.id=1\ncluster.id=c\n");
        assert_eq!(
            MetaProperties::read(dir.path()).unwrap().unwrap().node_id,
            1
        );
        // Version 0 without a version line uses broker.id.
        write_raw(dir.path(), b"broker.id=7\ncluster.id=c\n");
        let v0 = MetaProperties::read(dir.path()).unwrap().unwrap();
        assert_eq!((v0.version, v0.node_id), (MetaPropertiesVersion::V0, 7));
    }

    #[test]
    fn io_errors() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(MetaProperties::path(dir.path())).unwrap();
        assert!(matches!(
            MetaProperties::read(dir.path()),
            Err(MetaPropertiesError::Io { .. })
        ));
        let bad_id = MetaProperties {
            directory_id: Some("x".to_string()),
            ..sample()
        };
        let other = tempfile::tempdir().unwrap();
        assert_eq!(
            MetaProperties::write(other.path(), &bad_id)
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(!MetaProperties::path(other.path()).exists());
    }

    #[test]
    fn check_identity() {
        let p = sample();
        p.check(Some("MkU3OEVBNTcwNTJENDM2Qk"), 3).unwrap();
        p.check(None, 3).unwrap();
        let err = p.check(Some("other"), 3).unwrap_err();
        assert!(matches!(err, MetaPropertiesError::ClusterIdMismatch { .. }));
        assert!(err.to_string().contains("other"));
        let err = p.check(None, 4).unwrap_err();
        assert!(matches!(
            err,
            MetaPropertiesError::NodeIdMismatch {
                expected: 4,
                found: 3
            }
        ));
        assert!(err.to_string().contains("node 3"));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_files_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..120)) {
            let dir = tempfile::tempdir().unwrap();
            write_raw(dir.path(), &bytes);
            let _ = MetaProperties::read(dir.path());
        }

        #[test]
        fn any_cluster_id_round_trips(cluster_id in "\\PC{0,24}", node_id in proptest::num::i32::ANY) {
            let dir = tempfile::tempdir().unwrap();
            let props = MetaProperties { cluster_id, node_id, directory_id: None, ..sample() };
            MetaProperties::write(dir.path(), &props).unwrap();
            proptest::prop_assert_eq!(MetaProperties::read(dir.path()).unwrap(), Some(props));
        }
    }
}
