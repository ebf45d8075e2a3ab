//! Envelopes (KIP-590): a broker forwards a client's request to the controller inside an
//! Envelope that names the client's principal and address, so the controller decides it for
//! that client rather than for the forwarding broker. The principal is written as Kafka's
//! default principal serde writes it (DefaultPrincipalData v0, version-prefixed: type, name,
//! whether it authenticated with a delegation token).

use std::net::{IpAddr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};
use fjord_common::{Authentication, KafkaPrincipal, Requester};
use fjord_protocol::messages::envelope_request::EnvelopeRequest;
use fjord_protocol::messages::envelope_response::EnvelopeResponse;
use fjord_protocol::varint::put_unsigned_varint;
use fjord_protocol::{
    decode_request_header, put_string, request_header_version, response_header_version, ApiKey,
    Decodable, Decoder, Encodable, RequestBody, RequestHeader, ResponseBody, ResponseHeader,
};

/// The principal bytes of an Envelope.
fn encode_principal(principal: &KafkaPrincipal, authentication: Authentication) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(0);
    // Compact strings cannot fail to encode below 2^32 bytes, which a principal never reaches.
    let _ = put_string(&mut out, &principal.principal_type, true);
    let _ = put_string(&mut out, &principal.name, true);
    out.put_u8(u8::from(authentication == Authentication::DelegationToken));
    put_unsigned_varint(&mut out, 0);
    out.freeze()
}

fn decode_principal(bytes: Bytes) -> Result<(KafkaPrincipal, Authentication), String> {
    let mut input = Decoder::new(bytes);
    let read = |input: &mut Decoder| -> Result<_, fjord_protocol::DecodeError> {
        let version = input.read_i16()?;
        let principal_type = input.read_string(true)?;
        let name = input.read_string(true)?;
        let token = input.read_bool()?;
        input.skip_tagged_fields()?;
        Ok((version, principal_type, name, token))
    };
    let (version, principal_type, name, token) =
        read(&mut input).map_err(|e| format!("unreadable principal: {e}"))?;
    if version != 0 {
        return Err(format!("principal data v{version} is not known"));
    }
    // A forwarded principal authenticated on the broker that forwards it.
    let authentication = if token {
        Authentication::DelegationToken
    } else {
        Authentication::Sasl
    };
    Ok((
        KafkaPrincipal {
            principal_type,
            name,
        },
        authentication,
    ))
}

/// `body` (at `version`) in an Envelope for `client`.
pub fn wrap(
    version: i16,
    client_id: &str,
    body: &RequestBody,
    client: &Requester,
) -> Result<EnvelopeRequest, fjord_protocol::EncodeError> {
    let api = body.api_key();
    let header = RequestHeader {
        request_api_key: api as i16,
        request_api_version: version,
        correlation_id: 0,
        client_id: Some(client_id.to_string()),
    };
    let mut data = BytesMut::new();
    header.encode(&mut data, request_header_version(api, version))?;
    body.encode(&mut data, version)?;
    let address = match client.peer.ip() {
        IpAddr::V4(v4) => Bytes::copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => Bytes::copy_from_slice(&v6.octets()),
    };
    Ok(EnvelopeRequest {
        request_data: data.freeze(),
        request_principal: Some(encode_principal(&client.principal, client.authentication)),
        client_host_address: address,
    })
}

/// The request inside an Envelope, and the client it names (its port unknown: 0).
pub fn open(envelope: EnvelopeRequest) -> Result<(RequestHeader, RequestBody, Requester), String> {
    let principal = envelope
        .request_principal
        .ok_or("an Envelope without a principal")?;
    let (principal, authentication) = decode_principal(principal)?;
    let address = match envelope.client_host_address.len() {
        4 => {
            let mut octets = [0; 4];
            octets.copy_from_slice(&envelope.client_host_address);
            IpAddr::from(octets)
        }
        16 => {
            let mut octets = [0; 16];
            octets.copy_from_slice(&envelope.client_host_address);
            IpAddr::from(octets)
        }
        n => return Err(format!("a client address of {n} bytes")),
    };
    let mut input = Decoder::new(envelope.request_data);
    let header =
        decode_request_header(&mut input).map_err(|e| format!("unreadable request header: {e}"))?;
    let api = ApiKey::from_i16(header.request_api_key)
        .ok_or_else(|| format!("unknown API key {}", header.request_api_key))?;
    let body = RequestBody::decode(api, &mut input, header.request_api_version)
        .map_err(|e| format!("malformed {}: {e}", api.name()))?;
    let client =
        Requester::new(principal, SocketAddr::new(address, 0)).authenticated_by(authentication);
    Ok((header, body, client))
}

/// The Envelope response carrying `response` (a response header and body).
pub fn seal(response: Bytes) -> EnvelopeResponse {
    EnvelopeResponse {
        response_data: Some(response),
        error_code: fjord_common::errors::NONE,
    }
}

/// The response inside an Envelope response (one the controller did not refuse) to a request of
/// `api` at `version`.
pub fn unwrap(
    api: ApiKey,
    version: i16,
    envelope: EnvelopeResponse,
) -> Result<ResponseBody, String> {
    let data = envelope
        .response_data
        .ok_or("an Envelope response without data")?;
    let mut input = Decoder::new(data);
    ResponseHeader::decode(&mut input, response_header_version(api, version))
        .map_err(|e| format!("unreadable response header: {e}"))?;
    ResponseBody::decode(api, &mut input, version)
        .map_err(|e| format!("malformed {}: {e}", api.name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_protocol::messages::renew_delegation_token_request::RenewDelegationTokenRequest;

    #[test]
    fn a_request_and_its_client_come_out_as_they_went_in() {
        let client = Requester::new(KafkaPrincipal::user("alice"), "[::1]:0".parse().unwrap())
            .authenticated_by(Authentication::DelegationToken);
        let body = RequestBody::RenewDelegationToken(RenewDelegationTokenRequest {
            hmac: Bytes::from_static(b"mac"),
            renew_period_ms: 5,
        });
        let envelope = wrap(2, "fjord-broker-1", &body, &client).unwrap();
        let (header, opened, named) = open(envelope).unwrap();
        assert_eq!(header.request_api_version, 2);
        assert_eq!(opened, body);
        assert_eq!(named, client);
    }

    proptest::proptest! {
        /// Any bytes in any field: opened or refused, never a panic.
        #[test]
        fn any_envelope_is_opened_or_refused(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            principal in proptest::option::of(proptest::collection::vec(proptest::num::u8::ANY, 0..32)),
            address in proptest::collection::vec(proptest::num::u8::ANY, 0..20),
        ) {
            let _ = open(EnvelopeRequest {
                request_data: Bytes::from(data),
                request_principal: principal.map(Bytes::from),
                client_host_address: Bytes::from(address),
            });
        }
    }

    #[test]
    fn garbage_is_refused_not_trusted() {
        let cut = EnvelopeRequest {
            request_data: Bytes::from_static(b"\x00\x27"),
            request_principal: Some(Bytes::from_static(b"\x00\x00\x03Us")),
            client_host_address: Bytes::from_static(&[127, 0, 0, 1]),
        };
        assert!(open(cut).is_err());
        let no_principal = EnvelopeRequest {
            request_data: Bytes::new(),
            request_principal: None,
            client_host_address: Bytes::from_static(&[127, 0, 0, 1]),
        };
        assert!(open(no_principal).is_err());
    }
}
