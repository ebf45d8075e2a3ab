//! Choosing and decoding request/response header versions.

use crate::messages::RequestHeader;
use crate::{ApiKey, Decodable, DecodeError, Decoder};

/// The request header version used with `version` of `api_key`: v2 (with tagged fields) for
/// flexible versions, v1 otherwise. Versions above the newest known count as flexible when the
/// API has flexible versions at all, so that newer clients' headers still parse.
pub fn request_header_version(api_key: ApiKey, version: i16) -> i16 {
    if api_key.is_flexible(version) {
        2
    } else {
        1
    }
}

/// The response header version used with `version` of `api_key`: v1 for flexible versions,
/// v0 otherwise. ApiVersions responses always use v0 so that a client that sent an unsupported
/// version can still read the broker's answer.
pub fn response_header_version(api_key: ApiKey, version: i16) -> i16 {
    if api_key != ApiKey::ApiVersions && api_key.is_flexible(version) {
        1
    } else {
        0
    }
}

/// Reads a request header, looking at the API key and version first to pick the header
/// version. Unknown API keys are an error because their header layout cannot be known.
pub fn decode_request_header(input: &mut Decoder) -> Result<RequestHeader, DecodeError> {
    let mut peek = input.clone();
    let api_key = peek.read_i16()?;
    let version = peek.read_i16()?;
    let key = ApiKey::from_i16(api_key).ok_or(DecodeError::UnknownApiKey(api_key))?;
    RequestHeader::decode(input, request_header_version(key, version))
}
