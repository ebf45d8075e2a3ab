//! Writers for the protocol's composite types (strings, bytes, arrays, tagged fields), in both
//! the classic and the flexible-version ("compact") encodings, and the deferred encoding of
//! `records` fields ([`encode_deferring_records`]) that lets a response's record batches go to
//! the socket from their own buffers instead of being copied into the encoded message.

use std::cell::RefCell;
use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};

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

/// One piece of a message encoded as parts ([`encode_with_external_records`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Bytes to send as they are: encoded fields, or record batches held in memory.
    Bytes(Bytes),
    /// The record batches of the [`ExternalRecords`] with this id, which the caller sends itself.
    External(u32),
}

/// Record batches that a `records` field announces but the encoder never holds: their bytes stay
/// where they are (a segment file) and the network layer sends them itself, with `sendfile`.
/// Put [`ExternalRecords::stand_in`] in the field and pass this to
/// [`encode_with_external_records`]: the message gets the batches' length and, where their
/// bytes go, a [`Part::External`] with this id.
#[derive(Debug)]
pub struct ExternalRecords {
    id: u32,
    len: usize,
    /// A one-byte buffer of its own: its address identifies this entry while encoding.
    stand_in: Bytes,
}

impl ExternalRecords {
    pub fn new(id: u32, len: usize) -> Self {
        ExternalRecords {
            id,
            len,
            stand_in: Bytes::from(vec![0u8]),
        }
    }

    /// The value to put in the `records` field.
    pub fn stand_in(&self) -> Bytes {
        self.stand_in.clone()
    }
}

/// Where record batches are being deferred on this thread: the identity (address) of the
/// buffer the message is encoded into, each deferred part with its position in that buffer, and
/// the external records (stand-in address, id, length) the message may contain.
struct Deferred {
    buffer: usize,
    parts: Vec<(usize, Part)>,
    /// Stand-in address → (id, length): one lookup per `records` field, however many there are.
    externals: HashMap<usize, (u32, usize)>,
}

thread_local! {
    // Set only for the duration of one synchronous `encode_with_external_records` call.
    static DEFERRED: RefCell<Option<Deferred>> = const { RefCell::new(None) };
}

/// Writes a non-null `records` field: the length, then the bytes — or, inside
/// [`encode_with_external_records`] and written straight into its buffer, only the length, with
/// the bytes (or the external records a stand-in names) remembered as a part to send after the
/// encoded bytes before that point.
pub fn put_records(out: &mut BytesMut, value: &Bytes, compact: bool) -> Result<(), EncodeError> {
    let identity = out as *const BytesMut as usize;
    DEFERRED.with(|deferred| {
        match deferred.borrow_mut().as_mut() {
            // A nested buffer (a tagged field's) is not the message: its bytes must stay inline.
            Some(d) if d.buffer == identity && !value.is_empty() => {
                let (len, part) = match d.externals.get(&(value.as_ptr() as usize)) {
                    Some(&(id, len)) => (len, Part::External(id)),
                    None => (value.len(), Part::Bytes(value.clone())),
                };
                put_length(out, len, compact, false)?;
                d.parts.push((out.len(), part));
            }
            _ => {
                put_length(out, value.len(), compact, false)?;
                out.put_slice(value);
            }
        }
        Ok(())
    })
}

/// Writes a `records` field that may be null.
pub fn put_nullable_records(
    out: &mut BytesMut,
    value: Option<&Bytes>,
    compact: bool,
) -> Result<(), EncodeError> {
    match value {
        Some(value) => put_records(out, value, compact),
        None => {
            put_null(out, compact, false);
            Ok(())
        }
    }
}

/// Runs `encode` into `out` with `records` fields deferred, and returns the message as parts to
/// send in order: encoded bytes interleaved with the record batches — the caller's own `Bytes`
/// (shared, not copied), or [`Part::External`] for each of `externals` whose stand-in a field
/// held. Every external must be placed exactly once. Concatenated, with the externals' bytes in
/// their places, the parts are exactly what `encode` alone writes with the real batches.
pub fn encode_with_external_records(
    mut out: BytesMut,
    externals: &[ExternalRecords],
    encode: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>,
) -> Result<Vec<Part>, EncodeError> {
    let identity = &out as *const BytesMut as usize;
    let previous = DEFERRED.with(|deferred| {
        deferred.borrow_mut().replace(Deferred {
            buffer: identity,
            parts: Vec::new(),
            externals: externals
                .iter()
                .map(|e| (e.stand_in.as_ptr() as usize, (e.id, e.len)))
                .collect(),
        })
    });
    let result = encode(&mut out);
    let deferred =
        DEFERRED.with(|deferred| std::mem::replace(&mut *deferred.borrow_mut(), previous));
    result?;
    let records = deferred.map(|d| d.parts).unwrap_or_default();
    let mut placed: HashMap<u32, usize> = HashMap::with_capacity(externals.len());
    for (_, part) in &records {
        if let Part::External(id) = part {
            *placed.entry(*id).or_default() += 1;
        }
    }
    if let Some(external) = externals
        .iter()
        .find(|e| placed.get(&e.id).copied().unwrap_or(0) != 1)
    {
        return Err(EncodeError::ExternalRecordsNotPlaced(external.id));
    }
    let mut parts = Vec::with_capacity(records.len() * 2 + 1);
    let mut consumed = 0;
    for (position, batch) in records {
        // Positions ascend and lie within the buffer, as put_records recorded them.
        let head = out.split_to(position.saturating_sub(consumed).min(out.len()));
        consumed += head.len();
        if !head.is_empty() {
            parts.push(Part::Bytes(head.freeze()));
        }
        parts.push(batch);
    }
    if !out.is_empty() {
        parts.push(Part::Bytes(out.freeze()));
    }
    Ok(parts)
}

/// [`encode_with_external_records`] without externals: every part is bytes.
pub fn encode_deferring_records(
    out: BytesMut,
    encode: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>,
) -> Result<Vec<Bytes>, EncodeError> {
    Ok(encode_with_external_records(out, &[], encode)?
        .into_iter()
        .filter_map(|part| match part {
            Part::Bytes(bytes) => Some(bytes),
            Part::External(_) => None,
        })
        .collect())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn concat(parts: &[Bytes]) -> Vec<u8> {
        parts.iter().flat_map(|p| p.iter().copied()).collect()
    }

    #[test]
    fn deferred_records_concatenate_to_the_inline_encoding() {
        let batches = [
            Bytes::from_static(b"first batch"),
            Bytes::from_static(b"second"),
        ];
        let write = |out: &mut BytesMut| -> Result<(), EncodeError> {
            out.put_i32(7);
            put_records(out, &batches[0], true)?;
            put_nullable_records(out, None, true)?;
            put_records(out, &Bytes::new(), false)?;
            put_nullable_records(out, Some(&batches[1]), false)?;
            out.put_i16(-1);
            Ok(())
        };
        let mut inline = BytesMut::new();
        write(&mut inline).unwrap();
        let parts = encode_deferring_records(BytesMut::new(), write).unwrap();
        assert_eq!(concat(&parts), inline.to_vec());
        // The batches are the caller's buffers, not copies.
        assert!(parts.iter().any(|p| p.as_ptr() == batches[0].as_ptr()));
        assert!(parts.iter().any(|p| p.as_ptr() == batches[1].as_ptr()));
        // Outside a deferred encoding, records are written inline again.
        let mut after = BytesMut::new();
        put_records(&mut after, &batches[0], false).unwrap();
        assert_eq!(&after[4..], &batches[0][..]);
    }

    #[test]
    fn records_in_a_nested_buffer_stay_inline() {
        let batch = Bytes::from_static(b"tagged");
        let parts = encode_deferring_records(BytesMut::new(), |out| {
            let mut nested = BytesMut::new();
            put_records(&mut nested, &batch, true)?;
            out.put_slice(&nested);
            Ok(())
        })
        .unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(&parts[0][1..], &batch[..]);
    }

    #[test]
    fn external_records_leave_their_length_and_a_part() {
        let in_memory = Bytes::from_static(b"held");
        let file_batches = b"batches from a file";
        let external = ExternalRecords::new(7, file_batches.len());
        let write = |out: &mut BytesMut, records: &Bytes| -> Result<(), EncodeError> {
            out.put_i32(1);
            put_records(out, &in_memory, true)?;
            put_records(out, records, true)?;
            out.put_i16(2);
            Ok(())
        };
        let mut inline = BytesMut::new();
        write(&mut inline, &Bytes::from_static(file_batches)).unwrap();
        let stand_in = external.stand_in();
        let parts =
            encode_with_external_records(BytesMut::new(), &[external], |out| write(out, &stand_in))
                .unwrap();
        assert!(parts.contains(&Part::External(7)));
        let joined: Vec<u8> = parts
            .iter()
            .flat_map(|p| match p {
                Part::Bytes(b) => b.to_vec(),
                Part::External(_) => file_batches.to_vec(),
            })
            .collect();
        assert_eq!(joined, inline.to_vec());
    }

    #[test]
    fn an_external_left_out_of_the_message_is_an_error() {
        let external = ExternalRecords::new(3, 10);
        let result = encode_with_external_records(BytesMut::new(), &[external], |out| {
            out.put_i32(0);
            Ok(())
        });
        assert!(matches!(
            result,
            Err(EncodeError::ExternalRecordsNotPlaced(3))
        ));
    }

    #[test]
    fn a_failed_encoding_defers_nothing_afterwards() {
        let result = encode_deferring_records(BytesMut::new(), |out| {
            put_records(out, &Bytes::from_static(b"x"), true)?;
            Err(EncodeError::TooLong(0))
        });
        assert!(result.is_err());
        let mut out = BytesMut::new();
        put_records(&mut out, &Bytes::from_static(b"y"), true).unwrap();
        assert_eq!(&out[..], &[2, b'y']);
    }
}
