//! Variable-length integer encodings shared by the protocol (unsigned varints for compact
//! lengths and tagged fields) and by record batches (zigzag varints and varlongs).

use bytes::BufMut;

use crate::DecodeError;

/// Maps signed to unsigned so small magnitudes of either sign encode in few bytes.
pub fn zigzag_encode_i32(value: i32) -> u32 {
    ((value << 1) ^ (value >> 31)) as u32
}

/// Inverse of [`zigzag_encode_i32`].
pub fn zigzag_decode_i32(value: u32) -> i32 {
    ((value >> 1) as i32) ^ -((value & 1) as i32)
}

/// 64-bit variant of [`zigzag_encode_i32`].
pub fn zigzag_encode_i64(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Inverse of [`zigzag_encode_i64`].
pub fn zigzag_decode_i64(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// Appends `value` as an unsigned LEB128 varint (at most 5 bytes).
pub fn put_unsigned_varint(out: &mut impl BufMut, mut value: u32) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// Appends `value` as an unsigned LEB128 varlong (at most 10 bytes).
pub fn put_unsigned_varlong(out: &mut impl BufMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// Appends `value` zigzag-encoded as a varint.
pub fn put_varint(out: &mut impl BufMut, value: i32) {
    put_unsigned_varint(out, zigzag_encode_i32(value));
}

/// Appends `value` zigzag-encoded as a varlong.
pub fn put_varlong(out: &mut impl BufMut, value: i64) {
    put_unsigned_varlong(out, zigzag_encode_i64(value));
}

/// Encoded size of `value` as an unsigned varint.
pub fn unsigned_varint_len(value: u32) -> usize {
    let bits = 32 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Encoded size of `value` as an unsigned varlong.
pub fn unsigned_varlong_len(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Encoded size of `value` as a zigzag varint.
pub fn varint_len(value: i32) -> usize {
    unsigned_varint_len(zigzag_encode_i32(value))
}

/// Encoded size of `value` as a zigzag varlong.
pub fn varlong_len(value: i64) -> usize {
    unsigned_varlong_len(zigzag_encode_i64(value))
}

/// Reads an unsigned varint from the front of `buf`, returning the value and bytes consumed.
/// Like Kafka, bits of a fifth byte beyond the 32-bit range are dropped; a sixth byte is an error.
pub fn get_unsigned_varint(buf: &[u8]) -> Result<(u32, usize), DecodeError> {
    let mut value: u32 = 0;
    for (i, &byte) in buf.iter().enumerate() {
        let shift = 7 * i as u32;
        if shift > 28 {
            return Err(DecodeError::VarintTooLong);
        }
        value |= u32::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(DecodeError::Truncated {
        needed: buf.len() + 1,
        remaining: buf.len(),
    })
}

/// Reads an unsigned varlong from the front of `buf`, returning the value and bytes consumed.
pub fn get_unsigned_varlong(buf: &[u8]) -> Result<(u64, usize), DecodeError> {
    let mut value: u64 = 0;
    for (i, &byte) in buf.iter().enumerate() {
        let shift = 7 * i as u32;
        if shift > 63 {
            return Err(DecodeError::VarintTooLong);
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(DecodeError::Truncated {
        needed: buf.len() + 1,
        remaining: buf.len(),
    })
}

/// Reads a zigzag varint from the front of `buf`.
pub fn get_varint(buf: &[u8]) -> Result<(i32, usize), DecodeError> {
    get_unsigned_varint(buf).map(|(v, n)| (zigzag_decode_i32(v), n))
}

/// Reads a zigzag varlong from the front of `buf`.
pub fn get_varlong(buf: &[u8]) -> Result<(i64, usize), DecodeError> {
    get_unsigned_varlong(buf).map(|(v, n)| (zigzag_decode_i64(v), n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn zigzag_i32_round_trips(v in any::<i32>()) {
            prop_assert_eq!(zigzag_decode_i32(zigzag_encode_i32(v)), v);
        }

        #[test]
        fn zigzag_i64_round_trips(v in any::<i64>()) {
            prop_assert_eq!(zigzag_decode_i64(zigzag_encode_i64(v)), v);
        }

        #[test]
        fn unsigned_varint_round_trips(v in any::<u32>()) {
            let mut buf = Vec::new();
            put_unsigned_varint(&mut buf, v);
            prop_assert_eq!(buf.len(), unsigned_varint_len(v));
            prop_assert_eq!(get_unsigned_varint(&buf), Ok((v, buf.len())));
        }

        #[test]
        fn varint_round_trips(v in any::<i32>()) {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            prop_assert_eq!(buf.len(), varint_len(v));
            prop_assert_eq!(get_varint(&buf), Ok((v, buf.len())));
        }

        #[test]
        fn varlong_round_trips(v in any::<i64>()) {
            let mut buf = Vec::new();
            put_varlong(&mut buf, v);
            prop_assert_eq!(buf.len(), varlong_len(v));
            prop_assert_eq!(get_varlong(&buf), Ok((v, buf.len())));
        }

        #[test]
        fn truncated_varlong_is_an_error(v in any::<i64>()) {
            let mut buf = Vec::new();
            put_varlong(&mut buf, v);
            for cut in 0..buf.len() {
                prop_assert!(get_varlong(&buf[..cut]).is_err());
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..16)) {
            if let Ok((_, n)) = get_unsigned_varint(&buf) { prop_assert!(n <= 5 && n <= buf.len()); }
            if let Ok((_, n)) = get_unsigned_varlong(&buf) { prop_assert!(n <= 10 && n <= buf.len()); }
        }
    }

    #[test]
    fn known_encodings() {
        // Values from the zigzag table in the protobuf encoding documentation.
        assert_eq!(zigzag_encode_i32(0), 0);
        assert_eq!(zigzag_encode_i32(-1), 1);
        assert_eq!(zigzag_encode_i32(1), 2);
        assert_eq!(zigzag_encode_i32(-2), 3);
        assert_eq!(zigzag_encode_i32(i32::MAX), u32::MAX - 1);
        assert_eq!(zigzag_encode_i32(i32::MIN), u32::MAX);
        let mut buf = Vec::new();
        put_unsigned_varint(&mut buf, 300);
        assert_eq!(buf, [0xac, 0x02]);
        assert_eq!(unsigned_varint_len(u32::MAX), 5);
        assert_eq!(unsigned_varlong_len(u64::MAX), 10);
    }

    #[test]
    fn overlong_varints_are_rejected() {
        assert_eq!(
            get_unsigned_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
            Err(DecodeError::VarintTooLong)
        );
        assert_eq!(
            get_unsigned_varlong(&[0xff; 11]),
            Err(DecodeError::VarintTooLong)
        );
    }
}
