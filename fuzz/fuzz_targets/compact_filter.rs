//! Arbitrary bytes as a batch read back from a segment by the log cleaner: filtering and key
//! visits and horizon stamping must return errors, never panic, hang or over-allocate, and a
//! rewritten batch must be a valid batch holding at most the records it came from.
#![no_main]

use bytes::Bytes;
use fjord_records::compact::{
    filter_batch, for_each_key, stamp_delete_horizon, FilterOptions, Filtered,
};
use fjord_records::header::compute_crc;
use fjord_records::{records, BatchHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, batch)) = data.split_first() else {
        return;
    };
    let _ = for_each_key(batch, 1 << 20, |_, _| true);
    if let Ok(stamped) = stamp_delete_horizon(batch, 1_700_000_000_000, 1 << 20) {
        // A stamped batch is a valid batch with the horizon and the same records.
        let header = BatchHeader::parse(&stamped).expect("a stamped batch parses");
        assert_eq!(header.total_len(), stamped.len());
        assert_eq!(compute_crc(&stamped), header.crc);
        assert_eq!(header.delete_horizon_ms(), Some(1_700_000_000_000));
    }
    let options = FilterOptions {
        retain_empty: mode & 1 != 0,
        delete_horizon_ms: 1_700_000_000_000,
        max_decompressed: 1 << 20,
    };
    let mut n = 0u32;
    let Ok((filtered, counts)) = filter_batch(batch, options, |_| {
        n += 1;
        (mode >> (n % 7 + 1)) & 1 != 0
    }) else {
        return;
    };
    assert!(counts.records_kept <= counts.records_read);
    if let Filtered::Rewritten(out) = filtered {
        let out = Bytes::from(out);
        let header = BatchHeader::parse(&out).expect("a rewritten batch parses");
        assert_eq!(header.total_len(), out.len());
        assert_eq!(compute_crc(&out), header.crc);
        let kept = records(&out, 1 << 20)
            .expect("its records decode")
            .map(|r| r.expect("each record decodes"))
            .count();
        assert_eq!(kept as u64, counts.records_kept);
    }
});
