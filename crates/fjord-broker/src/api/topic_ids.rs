//! Requests that name topics by id (KIP-516: Produce v13, OffsetCommit v10, OffsetFetch v10,
//! TxnOffsetCommit v6) have their names filled in from the metadata image once decoded, so
//! everything after works on names as for earlier versions. An id the image does not know
//! keeps an empty name; each API answers its partitions UNKNOWN_TOPIC_ID, as Kafka does.
//! Responses at these versions carry the request's ids back.

use std::sync::Arc;

use fjord_metadata::MetadataImage;
use fjord_protocol::RequestBody;

/// The first version of each API that names topics by id.
pub const PRODUCE_TOPIC_IDS_FROM: i16 = 13;
pub const OFFSET_COMMIT_TOPIC_IDS_FROM: i16 = fjord_group::OFFSET_COMMIT_TOPIC_IDS_FROM;
pub const OFFSET_FETCH_TOPIC_IDS_FROM: i16 = fjord_group::OFFSET_FETCH_TOPIC_IDS_FROM;
pub const TXN_OFFSET_COMMIT_TOPIC_IDS_FROM: i16 = fjord_group::TXN_OFFSET_COMMIT_TOPIC_IDS_FROM;

/// Whether `body`, at `version`, names its topics by id.
fn by_id(body: &RequestBody, version: i16) -> bool {
    match body {
        RequestBody::Produce(_) => version >= PRODUCE_TOPIC_IDS_FROM,
        RequestBody::OffsetCommit(_) => version >= OFFSET_COMMIT_TOPIC_IDS_FROM,
        RequestBody::TxnOffsetCommit(_) => version >= TXN_OFFSET_COMMIT_TOPIC_IDS_FROM,
        RequestBody::OffsetFetch(_) => version >= OFFSET_FETCH_TOPIC_IDS_FROM,
        _ => false,
    }
}

/// Fills in the topic names of a request that names its topics by id; `image` is taken only
/// for such a request (every request passes through here).
pub fn name_topics(
    image: impl FnOnce() -> Arc<MetadataImage>,
    body: &mut RequestBody,
    version: i16,
) {
    if !by_id(body, version) {
        return;
    }
    let image = image();
    let name = |id| {
        image
            .topic_by_id(id)
            .map(|t| t.name.clone())
            .unwrap_or_default()
    };
    match body {
        RequestBody::Produce(r) => {
            for t in &mut r.topic_data {
                t.name = name(&t.topic_id);
            }
        }
        RequestBody::OffsetCommit(r) => {
            for t in &mut r.topics {
                t.name = name(&t.topic_id);
            }
        }
        RequestBody::TxnOffsetCommit(r) => {
            for t in &mut r.topics {
                t.name = name(&t.topic_id);
            }
        }
        RequestBody::OffsetFetch(r) => {
            for t in r
                .groups
                .iter_mut()
                .flat_map(|g| g.topics.iter_mut().flatten())
            {
                t.name = name(&t.topic_id);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_common::Uuid;
    use fjord_metadata::{MetadataRecord, TopicRecord};
    use fjord_protocol::messages::produce_request::{ProduceRequest, TopicProduceData};

    #[test]
    fn ids_become_names_and_unknown_ids_stay_nameless() {
        let known = Uuid([7; 16]);
        let image = Arc::new(
            MetadataImage::from_records(
                1,
                &[MetadataRecord::Topic(TopicRecord {
                    name: "orders".into(),
                    topic_id: known,
                })],
            )
            .unwrap(),
        );
        let produce = |version| {
            let mut body = RequestBody::Produce(ProduceRequest {
                topic_data: vec![
                    TopicProduceData {
                        topic_id: known,
                        ..Default::default()
                    },
                    TopicProduceData {
                        topic_id: Uuid([9; 16]),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            });
            name_topics(|| image.clone(), &mut body, version);
            let RequestBody::Produce(r) = body else {
                unreachable!()
            };
            r.topic_data.into_iter().map(|t| t.name).collect::<Vec<_>>()
        };
        assert_eq!(produce(13), ["orders", ""]);
        // Before v13 names come from the request itself, and the image is not needed.
        assert_eq!(produce(12), ["", ""]);
        let mut fetch = RequestBody::OffsetFetch(Default::default());
        name_topics(|| unreachable!("no ids to name"), &mut fetch, 9);
    }
}
