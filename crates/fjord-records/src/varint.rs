//! Zig-zag variable-length integers as used inside v2 records (the protobuf encoding).
//!
//! Readers work on a slice plus a cursor so record parsing never allocates; every read is bounds
//! checked and a too-long encoding is an error rather than a silent wrap.

use crate::RecordsError;

/// Longest encoding of a 32-bit varint.
const MAX_VARINT_LEN: usize = 5;
/// Longest encoding of a 64-bit varlong.
const MAX_VARLONG_LEN: usize = 10;

/// Reads an unsigned LEB128 value of at most `max_len` bytes. Bits beyond 64 are dropped, as the
/// Java reader drops bits beyond the target width on the final byte.
fn read_unsigned(buf: &[u8], pos: &mut usize, max_len: usize) -> Result<u64, RecordsError> {
    let mut value: u64 = 0;
    for i in 0..max_len {
        let byte = *buf
            .get(*pos)
            .ok_or(RecordsError::InvalidRecord("truncated varint"))?;
        *pos += 1;
        value |= u64::from(byte & 0x7f).wrapping_shl(7 * i as u32);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(RecordsError::InvalidRecord("varint is too long"))
}

/// Reads a zig-zag encoded i32 at `*pos`, advancing the cursor.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<i32, RecordsError> {
    // Truncation to 32 bits matches Kafka, which shifts the fifth byte into an int.
    let raw = read_unsigned(buf, pos, MAX_VARINT_LEN)? as u32;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// Reads a zig-zag encoded i64 at `*pos`, advancing the cursor.
pub fn read_varlong(buf: &[u8], pos: &mut usize) -> Result<i64, RecordsError> {
    let raw = read_unsigned(buf, pos, MAX_VARLONG_LEN)?;
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

pub fn zigzag_i32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

pub fn zigzag_i64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn write_unsigned(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn write_varint(out: &mut Vec<u8>, v: i32) {
    write_unsigned(out, u64::from(zigzag_i32(v)));
}

pub fn write_varlong(out: &mut Vec<u8>, v: i64) {
    write_unsigned(out, zigzag_i64(v));
}

fn unsigned_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Encoded size of `v` as a varint.
pub fn varint_len(v: i32) -> usize {
    unsigned_len(u64::from(zigzag_i32(v)))
}

/// Encoded size of `v` as a varlong.
pub fn varlong_len(v: i64) -> usize {
    unsigned_len(zigzag_i64(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_encodings() {
        let cases: &[(i32, &[u8])] = &[
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for (v, enc) in cases {
            let mut out = Vec::new();
            write_varint(&mut out, *v);
            assert_eq!(&out[..], *enc, "encoding {v}");
            let mut pos = 0;
            assert_eq!(read_varint(enc, &mut pos), Ok(*v));
            assert_eq!(pos, enc.len());
        }
    }

    #[test]
    fn too_long_and_truncated_are_errors() {
        let mut pos = 0;
        assert!(read_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01], &mut pos).is_err());
        let mut pos = 0;
        assert!(read_varlong(&[0x80; 11], &mut pos).is_err());
        let mut pos = 0;
        assert!(read_varint(&[0x80, 0x80], &mut pos).is_err());
        let mut pos = 0;
        assert!(read_varint(&[], &mut pos).is_err());
    }

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<i32>()) {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            prop_assert_eq!(out.len(), varint_len(v));
            let mut pos = 0;
            prop_assert_eq!(read_varint(&out, &mut pos), Ok(v));
            prop_assert_eq!(pos, out.len());
        }

        #[test]
        fn varlong_round_trip(v in any::<i64>()) {
            let mut out = Vec::new();
            write_varlong(&mut out, v);
            prop_assert_eq!(out.len(), varlong_len(v));
            let mut pos = 0;
            prop_assert_eq!(read_varlong(&out, &mut pos), Ok(v));
            prop_assert_eq!(pos, out.len());
        }
    }
}
