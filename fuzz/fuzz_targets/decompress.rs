//! Arbitrary bytes through every codec's decoder: output stays within the bound, and decoding
//! returns an error rather than panicking.
#![no_main]

use fjord_records::{decompress, Compression};
use libfuzzer_sys::fuzz_target;

const BOUND: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    for codec in Compression::ALL {
        if let Ok(out) = decompress(codec, data, BOUND) {
            assert!(out.len() <= BOUND);
        }
    }
});
