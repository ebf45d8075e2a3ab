//! Shared checks run by the generated per-message tests.

use std::ops::RangeInclusive;

use bytes::{Bytes, BytesMut};

use crate::{Decodable, Decoder, Encodable};

/// For every version: the sample encodes, decodes back to itself consuming every byte, and
/// every strict prefix of its encoding fails to decode instead of panicking.
pub fn check_message<T>(versions: RangeInclusive<i16>, sample: fn(i16) -> T)
where
    T: Encodable + Decodable + PartialEq + std::fmt::Debug,
{
    for version in versions {
        let value = sample(version);
        let mut out = BytesMut::new();
        value
            .encode(&mut out, version)
            .unwrap_or_else(|e| panic!("encode v{version}: {e}"));
        let frame: Bytes = out.freeze();
        let mut input = Decoder::new(frame.clone());
        let decoded =
            T::decode(&mut input, version).unwrap_or_else(|e| panic!("decode v{version}: {e}"));
        assert_eq!(decoded, value, "round trip of version {version}");
        assert_eq!(input.remaining(), 0, "trailing bytes in version {version}");
        for cut in 0..frame.len() {
            let mut input = Decoder::new(frame.slice(..cut));
            assert!(
                T::decode(&mut input, version).is_err(),
                "prefix of {cut}/{} bytes decoded in version {version}",
                frame.len()
            );
        }
    }
}
