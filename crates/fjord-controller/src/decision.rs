//! What deciding a request yields, shared by every decision module: the [`Decision`] (records
//! and answer), and the [`Working`] image a request's later entries are decided on. It imports
//! none of the modules that decide, so each can use it without depending on another.

use fjord_metadata::{MetadataDelta, MetadataImage, MetadataRecord};
use fjord_protocol::messages::ResponseBody;

/// What a request decided: records to commit (none for a refusal or a validate-only request)
/// and the answer once they are.
#[derive(Debug)]
pub struct Decision {
    pub records: Vec<MetadataRecord>,
    pub response: ResponseBody,
}

impl Decision {
    /// An answer with nothing to commit.
    pub(crate) fn answer(response: ResponseBody) -> Self {
        Decision {
            records: Vec::new(),
            response,
        }
    }
}

/// The image as a request's earlier entries left it, so later entries see them (a topic created
/// by entry 1 exists for entry 2).
pub(crate) struct Working {
    image: MetadataImage,
    records: Vec<MetadataRecord>,
}

impl Working {
    pub(crate) fn new(image: &MetadataImage) -> Self {
        Working {
            image: image.clone(),
            records: Vec::new(),
        }
    }

    pub(crate) fn image(&self) -> &MetadataImage {
        &self.image
    }

    pub(crate) fn into_records(self) -> Vec<MetadataRecord> {
        self.records
    }

    pub(crate) fn add(&mut self, records: Vec<MetadataRecord>) {
        let mut delta = MetadataDelta::new(&self.image);
        for record in &records {
            // Plans are made against this image, so they apply; a record that does not is
            // refused again, atomically with its entry, when the log applies it.
            let _ = delta.apply(record);
        }
        self.image = delta.finish(self.image.offset());
        self.records.extend(records);
    }
}
