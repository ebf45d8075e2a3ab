//! Arbitrary bytes as a raft request frame from a peer: read or refused, never a panic. Half the
//! inputs get a well-formed header, so the fuzzer reaches the RPC decoder behind it.
#![no_main]

use fjord_quorum::{check_raft_frame, RAFT_API_KEY};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = check_raft_frame(data);
    let mut framed = Vec::with_capacity(data.len() + 10);
    framed.extend_from_slice(&RAFT_API_KEY.to_be_bytes());
    framed.extend_from_slice(&0i16.to_be_bytes());
    framed.extend_from_slice(&1i32.to_be_bytes());
    framed.extend_from_slice(&0i16.to_be_bytes());
    framed.extend_from_slice(data);
    let _ = check_raft_frame(&framed);
});
