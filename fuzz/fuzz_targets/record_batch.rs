//! Arbitrary bytes as a produce request's records field: splitting, validation and iteration
//! must return errors, never panic, hang or over-allocate.
#![no_main]

use bytes::Bytes;
use fjord_records::{records, split_batches, validate_batch, ValidationConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut cfg = ValidationConfig::new(1_700_000_000_000);
    cfg.max_decompressed_bytes = 1 << 20;
    let _ = validate_batch(data, &cfg);
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(batches) = split_batches(&bytes) {
        for batch in batches {
            let _ = validate_batch(&batch, &cfg);
            if let Ok(it) = records(&batch, 1 << 20) {
                for record in it {
                    let _ = record;
                }
            }
        }
    }
});
