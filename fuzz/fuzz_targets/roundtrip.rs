//! Whatever decodes must re-encode and decode to the same value.
#![no_main]

use bytes::{Bytes, BytesMut};
use fjord_protocol::{ApiKey, Decoder, RequestBody, ResponseBody};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte picks the API, second the version; the rest is the body.
    let [key_index, version, body @ ..] = data else {
        return;
    };
    let Some(&api_key) = ApiKey::ALL.get(usize::from(*key_index) % ApiKey::ALL.len()) else {
        return;
    };
    let version = i16::from(*version % 20);
    let frame = Bytes::copy_from_slice(body);
    if let Ok(request) = RequestBody::decode(api_key, &mut Decoder::new(frame.clone()), version) {
        let mut out = BytesMut::new();
        request.encode(&mut out, version).expect("decoded request re-encodes");
        let again = RequestBody::decode(api_key, &mut Decoder::new(out.freeze()), version)
            .expect("re-encoded request decodes");
        assert_eq!(again, request);
    }
    if let Ok(response) = ResponseBody::decode(api_key, &mut Decoder::new(frame), version) {
        let mut out = BytesMut::new();
        response.encode(&mut out, version).expect("decoded response re-encodes");
        let again = ResponseBody::decode(api_key, &mut Decoder::new(out.freeze()), version)
            .expect("re-encoded response decodes");
        assert_eq!(again, response);
    }
});
