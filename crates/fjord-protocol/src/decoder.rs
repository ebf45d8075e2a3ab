//! The read cursor over a received frame. Every length read from the wire is checked against
//! the bytes remaining before anything is allocated, so hostile input cannot cause large
//! allocations; `bytes` and `records` values are zero-copy slices of the frame.

use bytes::Bytes;

use crate::varint;
use crate::{DecodeError, Uuid};

/// A cursor over one frame.
#[derive(Debug, Clone)]
pub struct Decoder {
    buf: Bytes,
    pos: usize,
}

impl Decoder {
    /// Starts reading at the beginning of `buf`.
    pub fn new(buf: Bytes) -> Self {
        Decoder { buf, pos: 0 }
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The unconsumed bytes, without consuming them.
    pub fn peek(&self) -> &[u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// Consumes `len` bytes and returns them as a zero-copy slice of the frame.
    pub fn read_slice(&mut self, len: usize) -> Result<Bytes, DecodeError> {
        let remaining = self.remaining();
        if len > remaining {
            return Err(DecodeError::Truncated {
                needed: len,
                remaining,
            });
        }
        let slice = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(slice)
    }

    /// Consumes `len` bytes and returns a decoder over exactly those bytes.
    pub fn sub_decoder(&mut self, len: usize) -> Result<Decoder, DecodeError> {
        self.read_slice(len).map(Decoder::new)
    }

    fn read_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let remaining = self.remaining();
        let bytes = self
            .peek()
            .get(..N)
            .and_then(|s| <[u8; N]>::try_from(s).ok())
            .ok_or(DecodeError::Truncated {
                needed: N,
                remaining,
            })?;
        self.pos += N;
        Ok(bytes)
    }

    pub fn read_i8(&mut self) -> Result<i8, DecodeError> {
        self.read_array::<1>().map(i8::from_be_bytes)
    }

    pub fn read_i16(&mut self) -> Result<i16, DecodeError> {
        self.read_array::<2>().map(i16::from_be_bytes)
    }

    pub fn read_u16(&mut self) -> Result<u16, DecodeError> {
        self.read_array::<2>().map(u16::from_be_bytes)
    }

    pub fn read_i32(&mut self) -> Result<i32, DecodeError> {
        self.read_array::<4>().map(i32::from_be_bytes)
    }

    pub fn read_i64(&mut self) -> Result<i64, DecodeError> {
        self.read_array::<8>().map(i64::from_be_bytes)
    }

    pub fn read_f64(&mut self) -> Result<f64, DecodeError> {
        self.read_array::<8>().map(f64::from_be_bytes)
    }

    /// Any non-zero byte is true, as in Kafka.
    pub fn read_bool(&mut self) -> Result<bool, DecodeError> {
        self.read_i8().map(|b| b != 0)
    }

    pub fn read_uuid(&mut self) -> Result<Uuid, DecodeError> {
        self.read_array::<16>().map(Uuid)
    }

    pub fn read_unsigned_varint(&mut self) -> Result<u32, DecodeError> {
        let (value, len) = varint::get_unsigned_varint(self.peek())?;
        self.pos += len;
        Ok(value)
    }

    pub fn read_varint(&mut self) -> Result<i32, DecodeError> {
        let (value, len) = varint::get_varint(self.peek())?;
        self.pos += len;
        Ok(value)
    }

    pub fn read_varlong(&mut self) -> Result<i64, DecodeError> {
        let (value, len) = varint::get_varlong(self.peek())?;
        self.pos += len;
        Ok(value)
    }

    /// Reads a length prefix: `None` for null (-1, or 0 in compact form). `compact` selects the
    /// unsigned varint N+1 form; otherwise a signed int16 (`short`) or int32 prefix.
    fn read_length(&mut self, compact: bool, short: bool) -> Result<Option<usize>, DecodeError> {
        let len = if compact {
            i64::from(self.read_unsigned_varint()?) - 1
        } else if short {
            i64::from(self.read_i16()?)
        } else {
            i64::from(self.read_i32()?)
        };
        match len {
            -1 => Ok(None),
            n if n < 0 => Err(DecodeError::InvalidLength(n)),
            n => usize::try_from(n)
                .map(Some)
                .map_err(|_| DecodeError::InvalidLength(n)),
        }
    }

    fn to_string(bytes: Bytes) -> Result<String, DecodeError> {
        std::str::from_utf8(&bytes)
            .map(str::to_owned)
            .map_err(|_| DecodeError::InvalidUtf8)
    }

    /// A string that may be null; `compact` selects the flexible-version encoding.
    pub fn read_nullable_string(&mut self, compact: bool) -> Result<Option<String>, DecodeError> {
        match self.read_length(compact, true)? {
            None => Ok(None),
            Some(len) => Self::to_string(self.read_slice(len)?).map(Some),
        }
    }

    /// A string that must not be null.
    pub fn read_string(&mut self, compact: bool) -> Result<String, DecodeError> {
        self.read_nullable_string(compact)?
            .ok_or(DecodeError::UnexpectedNull)
    }

    /// A byte sequence that may be null, as a zero-copy slice.
    pub fn read_nullable_bytes(&mut self, compact: bool) -> Result<Option<Bytes>, DecodeError> {
        match self.read_length(compact, false)? {
            None => Ok(None),
            Some(len) => self.read_slice(len).map(Some),
        }
    }

    /// A byte sequence that must not be null, as a zero-copy slice.
    pub fn read_bytes(&mut self, compact: bool) -> Result<Bytes, DecodeError> {
        self.read_nullable_bytes(compact)?
            .ok_or(DecodeError::UnexpectedNull)
    }

    /// An array length that may be null. The count is refused unless `count * min_element_size`
    /// bytes remain, which bounds any allocation sized by it.
    pub fn read_nullable_array_len(
        &mut self,
        compact: bool,
        min_element_size: usize,
    ) -> Result<Option<usize>, DecodeError> {
        let Some(count) = self.read_length(compact, false)? else {
            return Ok(None);
        };
        let remaining = self.remaining();
        match count.checked_mul(min_element_size.max(1)) {
            Some(needed) if needed <= remaining => Ok(Some(count)),
            _ => Err(DecodeError::ArrayTooLong {
                count,
                min_element_size,
                remaining,
            }),
        }
    }

    /// An array length that must not be null; bounded like [`Self::read_nullable_array_len`].
    pub fn read_array_len(
        &mut self,
        compact: bool,
        min_element_size: usize,
    ) -> Result<usize, DecodeError> {
        self.read_nullable_array_len(compact, min_element_size)?
            .ok_or(DecodeError::UnexpectedNull)
    }

    /// Reads a tagged-field section and discards every field in it.
    pub fn skip_tagged_fields(&mut self) -> Result<(), DecodeError> {
        let count = self.read_unsigned_varint()?;
        for _ in 0..count {
            self.read_tagged_field()?;
        }
        Ok(())
    }

    /// Reads one tagged field's tag and returns a decoder over its value.
    pub fn read_tagged_field(&mut self) -> Result<(u32, Decoder), DecodeError> {
        let tag = self.read_unsigned_varint()?;
        let size = self.read_unsigned_varint()?;
        let size = usize::try_from(size).map_err(|_| DecodeError::InvalidLength(size.into()))?;
        Ok((tag, self.sub_decoder(size)?))
    }
}

/// Reads an array whose elements are read by `read_element`, bounded by `min_element_size`.
pub fn read_array<T>(
    input: &mut Decoder,
    compact: bool,
    min_element_size: usize,
    read_element: impl FnMut(&mut Decoder) -> Result<T, DecodeError>,
) -> Result<Vec<T>, DecodeError> {
    let count = input.read_array_len(compact, min_element_size)?;
    read_elements(input, count, read_element)
}

/// Like [`read_array`], but a null array decodes as `None`.
pub fn read_nullable_array<T>(
    input: &mut Decoder,
    compact: bool,
    min_element_size: usize,
    read_element: impl FnMut(&mut Decoder) -> Result<T, DecodeError>,
) -> Result<Option<Vec<T>>, DecodeError> {
    match input.read_nullable_array_len(compact, min_element_size)? {
        None => Ok(None),
        Some(count) => read_elements(input, count, read_element).map(Some),
    }
}

fn read_elements<T>(
    input: &mut Decoder,
    count: usize,
    mut read_element: impl FnMut(&mut Decoder) -> Result<T, DecodeError>,
) -> Result<Vec<T>, DecodeError> {
    // `count` was already checked against the remaining input by the length reader.
    let mut elements = Vec::with_capacity(count);
    for _ in 0..count {
        elements.push(read_element(input)?);
    }
    Ok(elements)
}
