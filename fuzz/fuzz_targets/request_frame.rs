//! Decodes a request header and then the body it announces, from arbitrary bytes.
#![no_main]

use bytes::Bytes;
use fjord_protocol::{decode_request_header, ApiKey, Decoder, RequestBody};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Decoder::new(Bytes::copy_from_slice(data));
    let Ok(header) = decode_request_header(&mut input) else {
        return;
    };
    if let Some(api_key) = ApiKey::from_i16(header.request_api_key) {
        let _ = RequestBody::decode(api_key, &mut input, header.request_api_version);
    }
});
