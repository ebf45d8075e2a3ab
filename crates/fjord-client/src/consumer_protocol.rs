//! The consumer protocol's embedded formats: the Subscription a classic-group member sends as
//! its JoinGroup metadata and the Assignment the leader hands out through SyncGroup (versions
//! 0-3 of both). Each is a big-endian i16 version followed by non-flexible fields.

use bytes::{BufMut, Bytes, BytesMut};
use fjord_protocol::{put_nullable_bytes, put_nullable_string, put_string, Decoder};

use crate::error::ClientError;

/// The `protocol_type` of groups whose members use these formats.
pub const PROTOCOL_TYPE: &str = "consumer";

/// The newest Subscription and Assignment version this module knows. Newer versions only add
/// fields at the end, so they are read as this version (as Kafka's consumer does).
pub const LATEST_VERSION: i16 = 3;

/// Partitions of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicPartitions {
    pub topic: String,
    pub partitions: Vec<i32>,
}

/// A member's JoinGroup metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub topics: Vec<String>,
    pub user_data: Option<Bytes>,
    /// From version 1: partitions the member owns (cooperative rebalancing).
    pub owned_partitions: Vec<TopicPartitions>,
    /// From version 2: the generation the member last joined, -1 if none.
    pub generation_id: i32,
    /// From version 3.
    pub rack_id: Option<String>,
}

impl Default for Subscription {
    fn default() -> Self {
        Subscription {
            topics: Vec::new(),
            user_data: None,
            owned_partitions: Vec::new(),
            generation_id: -1,
            rack_id: None,
        }
    }
}

/// A member's SyncGroup assignment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    pub assigned_partitions: Vec<TopicPartitions>,
    pub user_data: Option<Bytes>,
}

fn malformed(what: &str, e: impl std::fmt::Display) -> ClientError {
    ClientError::Malformed(format!("consumer protocol {what}: {e}"))
}

fn read_version(input: &mut Decoder, what: &str) -> Result<i16, ClientError> {
    let version = input.read_i16().map_err(|e| malformed(what, e))?;
    if version < 0 {
        return Err(malformed(what, format_args!("negative version {version}")));
    }
    Ok(version.min(LATEST_VERSION))
}

fn read_topic_partitions(
    input: &mut Decoder,
    what: &str,
) -> Result<Vec<TopicPartitions>, ClientError> {
    // Each entry is at least a 2-byte topic length and a 4-byte partition count.
    let count = input
        .read_array_len(false, 6)
        .map_err(|e| malformed(what, e))?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let topic = input.read_string(false).map_err(|e| malformed(what, e))?;
        let n = input
            .read_array_len(false, 4)
            .map_err(|e| malformed(what, e))?;
        let mut partitions = Vec::with_capacity(n);
        for _ in 0..n {
            partitions.push(input.read_i32().map_err(|e| malformed(what, e))?);
        }
        out.push(TopicPartitions { topic, partitions });
    }
    Ok(out)
}

fn put_topic_partitions(
    out: &mut BytesMut,
    entries: &[TopicPartitions],
) -> Result<(), ClientError> {
    out.put_i32(len_i32(entries.len())?);
    for entry in entries {
        put_string(out, &entry.topic, false)?;
        out.put_i32(len_i32(entry.partitions.len())?);
        for p in &entry.partitions {
            out.put_i32(*p);
        }
    }
    Ok(())
}

fn len_i32(len: usize) -> Result<i32, ClientError> {
    i32::try_from(len).map_err(|_| ClientError::Encode(fjord_protocol::EncodeError::TooLong(len)))
}

impl Subscription {
    /// Reads a Subscription; any malformed input is an error.
    pub fn decode(bytes: Bytes) -> Result<Subscription, ClientError> {
        const WHAT: &str = "subscription";
        let mut input = Decoder::new(bytes);
        let version = read_version(&mut input, WHAT)?;
        let count = input
            .read_array_len(false, 2)
            .map_err(|e| malformed(WHAT, e))?;
        let mut topics = Vec::with_capacity(count);
        for _ in 0..count {
            topics.push(input.read_string(false).map_err(|e| malformed(WHAT, e))?);
        }
        let user_data = input
            .read_nullable_bytes(false)
            .map_err(|e| malformed(WHAT, e))?;
        let mut this = Subscription {
            topics,
            user_data,
            ..Subscription::default()
        };
        if version >= 1 {
            this.owned_partitions = read_topic_partitions(&mut input, WHAT)?;
        }
        if version >= 2 {
            this.generation_id = input.read_i32().map_err(|e| malformed(WHAT, e))?;
        }
        if version >= 3 {
            this.rack_id = input
                .read_nullable_string(false)
                .map_err(|e| malformed(WHAT, e))?;
        }
        Ok(this)
    }

    /// Writes this Subscription in `version` (0-3); fields the version lacks are dropped.
    pub fn encode(&self, version: i16) -> Result<Bytes, ClientError> {
        check_version(version)?;
        let mut out = BytesMut::new();
        out.put_i16(version);
        out.put_i32(len_i32(self.topics.len())?);
        for topic in &self.topics {
            put_string(&mut out, topic, false)?;
        }
        put_nullable_bytes(&mut out, self.user_data.as_deref(), false)?;
        if version >= 1 {
            put_topic_partitions(&mut out, &self.owned_partitions)?;
        }
        if version >= 2 {
            out.put_i32(self.generation_id);
        }
        if version >= 3 {
            put_nullable_string(&mut out, self.rack_id.as_deref(), false)?;
        }
        Ok(out.freeze())
    }
}

impl Assignment {
    /// Reads an Assignment; any malformed input is an error.
    pub fn decode(bytes: Bytes) -> Result<Assignment, ClientError> {
        const WHAT: &str = "assignment";
        let mut input = Decoder::new(bytes);
        // Versions 0-3 share one layout; the version only tells the consumer what it may send.
        read_version(&mut input, WHAT)?;
        let assigned_partitions = read_topic_partitions(&mut input, WHAT)?;
        let user_data = input
            .read_nullable_bytes(false)
            .map_err(|e| malformed(WHAT, e))?;
        Ok(Assignment {
            assigned_partitions,
            user_data,
        })
    }

    /// Writes this Assignment in `version` (0-3).
    pub fn encode(&self, version: i16) -> Result<Bytes, ClientError> {
        check_version(version)?;
        let mut out = BytesMut::new();
        out.put_i16(version);
        put_topic_partitions(&mut out, &self.assigned_partitions)?;
        put_nullable_bytes(&mut out, self.user_data.as_deref(), false)?;
        Ok(out.freeze())
    }
}

fn check_version(version: i16) -> Result<(), ClientError> {
    if (0..=LATEST_VERSION).contains(&version) {
        Ok(())
    } else {
        Err(ClientError::Encode(
            fjord_protocol::EncodeError::UnsupportedVersion {
                message: "ConsumerProtocol",
                version,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_subscription() -> Subscription {
        Subscription {
            topics: vec!["orders".into(), "payments".into()],
            user_data: Some(Bytes::from_static(b"ud")),
            owned_partitions: vec![TopicPartitions {
                topic: "orders".into(),
                partitions: vec![0, 2],
            }],
            generation_id: 7,
            rack_id: Some("rack-a".into()),
        }
    }

    #[test]
    fn subscription_round_trips_in_every_version() {
        let full = sample_subscription();
        for version in 0..=LATEST_VERSION {
            let bytes = full.encode(version).unwrap();
            let back = Subscription::decode(bytes).unwrap();
            let mut expected = full.clone();
            if version < 1 {
                expected.owned_partitions.clear();
            }
            if version < 2 {
                expected.generation_id = -1;
            }
            if version < 3 {
                expected.rack_id = None;
            }
            assert_eq!(back, expected, "version {version}");
        }
    }

    #[test]
    fn subscription_v0_has_kafka_layout() {
        let sub = Subscription {
            topics: vec!["t".into()],
            user_data: None,
            ..Subscription::default()
        };
        let bytes = sub.encode(0).unwrap();
        assert_eq!(
            bytes.as_ref(),
            &[0, 0, 0, 0, 0, 1, 0, 1, b't', 0xff, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn assignment_round_trips_and_has_kafka_layout() {
        let a = Assignment {
            assigned_partitions: vec![TopicPartitions {
                topic: "t".into(),
                partitions: vec![1],
            }],
            user_data: None,
        };
        for version in 0..=LATEST_VERSION {
            let bytes = a.encode(version).unwrap();
            assert_eq!(Assignment::decode(bytes).unwrap(), a);
        }
        let bytes = a.encode(1).unwrap();
        assert_eq!(
            bytes.as_ref(),
            &[0, 1, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn newer_versions_read_as_the_latest_known() {
        let mut bytes = BytesMut::from(sample_subscription().encode(3).unwrap().as_ref());
        bytes[1] = 9;
        bytes.extend_from_slice(b"future fields");
        assert_eq!(
            Subscription::decode(bytes.freeze()).unwrap(),
            sample_subscription()
        );
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert!(Subscription::decode(Bytes::new()).is_err());
        assert!(Assignment::decode(Bytes::from_static(&[0])).is_err());
        assert!(Assignment::decode(Bytes::from_static(&[0xff, 0xff, 0, 0, 0, 0])).is_err());
        // A huge topic count with no bytes behind it must fail before allocating.
        assert!(Assignment::decode(Bytes::from_static(&[0, 0, 0x7f, 0xff, 0xff, 0xff])).is_err());
        assert!(Subscription::decode(Bytes::from_static(&[0, 1, 0, 0, 0, 1, 0, 5, b'a'])).is_err());
        assert!(Assignment::decode(Bytes::from_static(&[
            0, 0, 0, 0, 0, 1, 0, 1, b't', 0x7f, 0, 0, 0
        ]))
        .is_err());
        assert!(Subscription::default().encode(4).is_err());
    }

    #[test]
    fn every_truncation_of_a_valid_subscription_is_an_error() {
        let bytes = sample_subscription().encode(3).unwrap();
        for len in 0..bytes.len() {
            assert!(
                Subscription::decode(bytes.slice(..len)).is_err(),
                "len {len}"
            );
        }
    }
}
