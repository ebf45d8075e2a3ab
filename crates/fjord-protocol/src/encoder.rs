//! Writers for the protocol's composite types (strings, bytes, arrays, tagged fields), in both
//! the classic and the flexible-version ("compact") encodings.

use bytes::{BufMut, BytesMut};

use crate::varint::put_unsigned_varint;
use crate::EncodeError;

fn put_length(
    out: &mut BytesMut,
    len: usize,
    compact: bool,
    short: bool,
) -> Result<(), EncodeError> {
    if compact {
        let len = u32::try_from(len)
            .ok()
            .and_then(|n| n.checked_add(1))
            .ok_or(EncodeError::TooLong(len))?;
        put_unsigned_varint(out, len);
    } else if short {
        out.put_i16(i16::try_from(len).map_err(|_| EncodeError::TooLong(len))?);
    } else {
        out.put_i32(i32::try_from(len).map_err(|_| EncodeError::TooLong(len))?);
    }
    Ok(())
}

fn put_null(out: &mut BytesMut, compact: bool, short: bool) {
    if compact {
        put_unsigned_varint(out, 0);
    } else if short {
        out.put_i16(-1);
    } else {
        out.put_i32(-1);
    }
}

/// Writes a non-null string.
pub fn put_string(out: &mut BytesMut, value: &str, compact: bool) -> Result<(), EncodeError> {
    put_length(out, value.len(), compact, true)?;
    out.put_slice(value.as_bytes());
    Ok(())
}

/// Writes a string that may be null.
pub fn put_nullable_string(
    out: &mut BytesMut,
    value: Option<&str>,
    compact: bool,
) -> Result<(), EncodeError> {
    match value {
        Some(value) => put_string(out, value, compact),
        None => {
            put_null(out, compact, true);
            Ok(())
        }
    }
}

/// Writes a non-null byte sequence.
pub fn put_bytes(out: &mut BytesMut, value: &[u8], compact: bool) -> Result<(), EncodeError> {
    put_length(out, value.len(), compact, false)?;
    out.put_slice(value);
    Ok(())
}

/// Writes a byte sequence that may be null.
pub fn put_nullable_bytes(
    out: &mut BytesMut,
    value: Option<&[u8]>,
    compact: bool,
) -> Result<(), EncodeError> {
    match value {
        Some(value) => put_bytes(out, value, compact),
        None => {
            put_null(out, compact, false);
            Ok(())
        }
    }
}

/// Writes a non-null array, each element written by `put_element`.
pub fn put_array<T>(
    out: &mut BytesMut,
    elements: &[T],
    compact: bool,
    mut put_element: impl FnMut(&mut BytesMut, &T) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    put_length(out, elements.len(), compact, false)?;
    for element in elements {
        put_element(out, element)?;
    }
    Ok(())
}

/// Writes an array that may be null.
pub fn put_nullable_array<T>(
    out: &mut BytesMut,
    elements: Option<&[T]>,
    compact: bool,
    put_element: impl FnMut(&mut BytesMut, &T) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    match elements {
        Some(elements) => put_array(out, elements, compact, put_element),
        None => {
            put_null(out, compact, false);
            Ok(())
        }
    }
}

/// Collects the tagged fields of one struct so the count can precede them on the wire.
#[derive(Debug, Default)]
pub struct TaggedFields {
    count: u32,
    fields: BytesMut,
}

impl TaggedFields {
    /// Adds one field; callers add fields in ascending tag order.
    pub fn push(&mut self, tag: u32, value: &[u8]) -> Result<(), EncodeError> {
        let len = u32::try_from(value.len()).map_err(|_| EncodeError::TooLong(value.len()))?;
        put_unsigned_varint(&mut self.fields, tag);
        put_unsigned_varint(&mut self.fields, len);
        self.fields.put_slice(value);
        self.count += 1;
        Ok(())
    }

    /// Writes the section: the field count, then the fields.
    pub fn finish(self, out: &mut BytesMut) {
        put_unsigned_varint(out, self.count);
        out.put_slice(&self.fields);
    }
}
