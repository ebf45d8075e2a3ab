//! Reads the topic list out of a `consumer` protocol member's subscription (Kafka's
//! ConsumerProtocolSubscription: an i16 version, then an array of topic names, then fields the
//! coordinator does not need). Used only to answer whether a group consumes a topic.

use bytes::Bytes;
use fjord_protocol::{read_array, Decoder};

/// The subscribed topics, or `None` when the bytes are not a readable subscription.
pub fn topics(metadata: &Bytes) -> Option<Vec<String>> {
    let mut input = Decoder::new(metadata.clone());
    let version = input.read_i16().ok()?;
    if version < 0 {
        return None;
    }
    read_array(&mut input, false, 2, |d| d.read_string(false)).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_topics_and_rejects_garbage() {
        let bytes = Bytes::from_static(&[0, 1, 0, 0, 0, 2, 0, 1, b'a', 0, 2, b'b', b'c', 0xff]);
        assert_eq!(
            topics(&bytes).unwrap(),
            vec!["a".to_string(), "bc".to_string()]
        );
        assert_eq!(topics(&Bytes::from_static(&[0, 1, 0, 0, 0, 9])), None);
        assert_eq!(topics(&Bytes::from_static(&[0xff, 0xff])), None);
        assert_eq!(topics(&Bytes::new()), None);
    }
}
