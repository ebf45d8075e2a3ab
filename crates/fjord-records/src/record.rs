//! Records inside a v2 batch: parsing (borrowed, allocation-free) and encoding.
//!
//! Layout of one record, all integers zig-zag varints:
//! ```text
//! length (body bytes), attributes i8, timestampDelta varlong, offsetDelta varint,
//! keyLength, key, valueLength, value, headerCount,
//! headers: [headerKeyLength, headerKey, headerValueLength, headerValue]
//! ```
//! A negative key, value or header value length means null; a negative header key length or
//! header count is invalid. Every length is checked against the bytes of the record body.

use std::ops::Range;

use bytes::Bytes;

use crate::varint::{
    read_varint, read_varlong, varint_len, varlong_len, write_varint, write_varlong,
};
use crate::RecordsError;

/// A record header. Kafka treats the key as a UTF-8 string; it is kept as bytes here so
/// that reading and rewriting a record is lossless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// One record with its key, value and headers sharing the batch's (decompressed) buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<Header>,
}

impl Record {
    /// Appends this record's wire form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), RecordsError> {
        let headers: Vec<(&[u8], Option<&[u8]>)> = self
            .headers
            .iter()
            .map(|h| (&h.key[..], h.value.as_deref()))
            .collect();
        encode_record(
            out,
            self.attributes,
            self.timestamp_delta,
            self.offset_delta,
            self.key.as_deref(),
            self.value.as_deref(),
            &headers,
        )
    }
}

/// Positions of one parsed record inside the buffer it was read from.
#[derive(Debug, Clone)]
struct RawRecord {
    attributes: i8,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<Range<usize>>,
    value: Option<Range<usize>>,
    header_count: i32,
    headers: Range<usize>,
}

/// A record borrowed from its batch; produced by [`RecordRefIter`] without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    header_count: i32,
    headers: &'a [u8],
}

impl<'a> RecordRef<'a> {
    pub fn header_count(&self) -> i32 {
        self.header_count
    }

    /// The headers as `(key, value)` pairs; they were already checked when the record was read.
    pub fn headers(&self) -> HeaderRefIter<'a> {
        HeaderRefIter {
            buf: self.headers,
            pos: 0,
            remaining: self.header_count,
        }
    }
}

/// Iterator over a [`RecordRef`]'s headers.
#[derive(Debug, Clone)]
pub struct HeaderRefIter<'a> {
    buf: &'a [u8],
    pos: usize,
    remaining: i32,
}

impl<'a> Iterator for HeaderRefIter<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining <= 0 {
            return None;
        }
        self.remaining -= 1;
        let (key, value) = read_header(self.buf, &mut self.pos, self.buf.len()).ok()?;
        Some((self.buf.get(key)?, value.and_then(|v| self.buf.get(v))))
    }
}

/// Reads a length-prefixed byte string ending no later than `end`; negative length is null.
fn read_nullable(
    buf: &[u8],
    pos: &mut usize,
    end: usize,
) -> Result<Option<Range<usize>>, RecordsError> {
    let len = read_varint(buf, pos)?;
    if len < 0 {
        return Ok(None);
    }
    let start = *pos;
    let stop = start
        .checked_add(len as usize)
        .filter(|&stop| stop <= end)
        .ok_or(RecordsError::InvalidRecord(
            "record field length exceeds the record size",
        ))?;
    *pos = stop;
    Ok(Some(start..stop))
}

type HeaderRanges = (Range<usize>, Option<Range<usize>>);

fn read_header(buf: &[u8], pos: &mut usize, end: usize) -> Result<HeaderRanges, RecordsError> {
    let key = read_nullable(buf, pos, end)?
        .ok_or(RecordsError::InvalidRecord("negative header key length"))?;
    let value = read_nullable(buf, pos, end)?;
    Ok((key, value))
}

/// Reads the record starting at `*pos`. Reads are confined to the record's declared body, which
/// must lie within `buf` and be consumed exactly.
fn read_raw(buf: &[u8], pos: &mut usize) -> Result<RawRecord, RecordsError> {
    let body_len = read_varint(buf, pos)?;
    if body_len < 0 {
        return Err(RecordsError::InvalidRecord("negative record size"));
    }
    let end = pos
        .checked_add(body_len as usize)
        .filter(|&end| end <= buf.len())
        .ok_or(RecordsError::InvalidRecord(
            "record size exceeds the remaining batch bytes",
        ))?;
    // Parse within the body only, so no field can reach into the next record.
    let body = buf.get(..end).ok_or(RecordsError::InvalidRecord(
        "record size exceeds the remaining batch bytes",
    ))?;
    let attributes = *body
        .get(*pos)
        .ok_or(RecordsError::InvalidRecord("record too short"))? as i8;
    *pos += 1;
    let timestamp_delta = read_varlong(body, pos)?;
    let offset_delta = read_varint(body, pos)?;
    let key = read_nullable(body, pos, end)?;
    let value = read_nullable(body, pos, end)?;
    let header_count = read_varint(body, pos)?;
    if header_count < 0 {
        return Err(RecordsError::InvalidRecord("negative header count"));
    }
    // Each header takes at least two bytes, so a count larger than that is a lie; checking
    // first keeps a hostile count from driving a long loop.
    if header_count as usize > (end - *pos) / 2 {
        return Err(RecordsError::InvalidRecord(
            "header count exceeds the record size",
        ));
    }
    let headers_start = *pos;
    for _ in 0..header_count {
        read_header(body, pos, end)?;
    }
    if *pos != end {
        return Err(RecordsError::InvalidRecord(
            "record size does not match its fields",
        ));
    }
    Ok(RawRecord {
        attributes,
        timestamp_delta,
        offset_delta,
        key,
        value,
        header_count,
        headers: headers_start..end,
    })
}

/// Reads `count` records from a batch's (decompressed) records section without allocating.
/// Yields at most `count` items and stops after the first error; call
/// [`RecordRefIter::finish`] once done to check no bytes are left over.
#[derive(Debug, Clone)]
pub struct RecordRefIter<'a> {
    buf: &'a [u8],
    pos: usize,
    remaining: i32,
}

impl<'a> RecordRefIter<'a> {
    pub fn new(records: &'a [u8], count: i32) -> RecordRefIter<'a> {
        RecordRefIter {
            buf: records,
            pos: 0,
            remaining: count.max(0),
        }
    }

    /// Succeeds if every record was read and nothing follows the last one.
    pub fn finish(&self) -> Result<(), RecordsError> {
        if self.remaining > 0 {
            return Err(RecordsError::InvalidRecord(
                "fewer records than the batch's record count",
            ));
        }
        if self.pos != self.buf.len() {
            return Err(RecordsError::InvalidRecord(
                "bytes left after the batch's last record",
            ));
        }
        Ok(())
    }
}

impl<'a> Iterator for RecordRefIter<'a> {
    type Item = Result<RecordRef<'a>, RecordsError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining <= 0 {
            return None;
        }
        let raw = match read_raw(self.buf, &mut self.pos) {
            Ok(raw) => raw,
            Err(e) => {
                self.remaining = 0;
                // Leave the cursor short of the end so `finish` also reports the failure.
                self.pos = usize::MAX;
                return Some(Err(e));
            }
        };
        self.remaining -= 1;
        let buf = self.buf;
        let slice = |r: Range<usize>| buf.get(r).unwrap_or(&[]);
        Some(Ok(RecordRef {
            attributes: raw.attributes,
            timestamp_delta: raw.timestamp_delta,
            offset_delta: raw.offset_delta,
            key: raw.key.map(slice),
            value: raw.value.map(slice),
            header_count: raw.header_count,
            headers: slice(raw.headers),
        }))
    }
}

/// Owned records read from one batch: keys, values and headers are slices of one shared
/// buffer (the batch itself when uncompressed). Yields the batch's record count of records,
/// then an error if bytes remain; stops after the first error.
#[derive(Debug, Clone)]
pub struct Records {
    data: Bytes,
    pos: usize,
    remaining: i32,
    done: bool,
}

impl Records {
    /// Records from an already-decompressed records section holding `count` records.
    pub fn new(records: Bytes, count: i32) -> Records {
        Records {
            data: records,
            pos: 0,
            remaining: count.max(0),
            done: false,
        }
    }

    fn fail(&mut self, e: RecordsError) -> Option<Result<Record, RecordsError>> {
        self.done = true;
        Some(Err(e))
    }
}

impl Iterator for Records {
    type Item = Result<Record, RecordsError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.remaining <= 0 {
            self.done = true;
            if self.pos != self.data.len() {
                return Some(Err(RecordsError::InvalidRecord(
                    "bytes left after the batch's last record",
                )));
            }
            return None;
        }
        let raw = match read_raw(&self.data, &mut self.pos) {
            Ok(raw) => raw,
            Err(e) => return self.fail(e),
        };
        self.remaining -= 1;
        let data = &self.data;
        let mut headers = Vec::with_capacity(raw.header_count as usize);
        let mut pos = raw.headers.start;
        for _ in 0..raw.header_count {
            match read_header(data, &mut pos, raw.headers.end) {
                Ok((key, value)) => headers.push(Header {
                    key: data.slice(key),
                    value: value.map(|v| data.slice(v)),
                }),
                Err(e) => return self.fail(e),
            }
        }
        Some(Ok(Record {
            attributes: raw.attributes,
            timestamp_delta: raw.timestamp_delta,
            offset_delta: raw.offset_delta,
            key: raw.key.map(|r| data.slice(r)),
            value: raw.value.map(|r| data.slice(r)),
            headers,
        }))
    }
}

fn nullable_len(field: Option<&[u8]>) -> Result<(i32, usize), RecordsError> {
    match field {
        None => Ok((-1, varint_len(-1))),
        Some(b) => {
            let len = i32::try_from(b.len())
                .map_err(|_| RecordsError::InvalidRecord("record field too large"))?;
            Ok((len, varint_len(len) + b.len()))
        }
    }
}

fn write_nullable(out: &mut Vec<u8>, field: Option<&[u8]>, len: i32) {
    write_varint(out, len);
    if let Some(b) = field {
        out.extend_from_slice(b);
    }
}

/// Appends one record's wire form to `out`.
pub fn encode_record(
    out: &mut Vec<u8>,
    attributes: i8,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&[u8], Option<&[u8]>)],
) -> Result<(), RecordsError> {
    let (key_len, key_size) = nullable_len(key)?;
    let (value_len, value_size) = nullable_len(value)?;
    let header_count = i32::try_from(headers.len())
        .map_err(|_| RecordsError::InvalidRecord("too many headers"))?;
    let mut body =
        1 + varlong_len(timestamp_delta) + varint_len(offset_delta) + key_size + value_size;
    body += varint_len(header_count);
    let mut header_sizes = Vec::with_capacity(headers.len());
    for (hk, hv) in headers {
        let (hk_len, hk_size) = nullable_len(Some(hk))?;
        let (hv_len, hv_size) = nullable_len(*hv)?;
        body += hk_size + hv_size;
        header_sizes.push((hk_len, hv_len));
    }
    let body_len =
        i32::try_from(body).map_err(|_| RecordsError::InvalidRecord("record too large"))?;
    out.reserve(varint_len(body_len) + body);
    write_varint(out, body_len);
    out.push(attributes as u8);
    write_varlong(out, timestamp_delta);
    write_varint(out, offset_delta);
    write_nullable(out, key, key_len);
    write_nullable(out, value, value_len);
    write_varint(out, header_count);
    for ((hk, hv), (hk_len, hv_len)) in headers.iter().zip(header_sizes) {
        write_nullable(out, Some(hk), hk_len);
        write_nullable(out, *hv, hv_len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            attributes: 0,
            timestamp_delta: 17,
            offset_delta: 0,
            key: Some(Bytes::from_static(b"k")),
            value: None,
            headers: vec![
                Header {
                    key: Bytes::from_static(b"h1"),
                    value: Some(Bytes::from_static(b"v1")),
                },
                Header {
                    key: Bytes::from_static(b""),
                    value: None,
                },
            ],
        }
    }

    #[test]
    fn encode_then_read_both_ways() {
        let rec = sample();
        let mut buf = Vec::new();
        rec.encode(&mut buf).unwrap();
        let mut it = RecordRefIter::new(&buf, 1);
        let r = it.next().unwrap().unwrap();
        assert_eq!(r.key, Some(&b"k"[..]));
        assert_eq!(r.value, None);
        assert_eq!(r.timestamp_delta, 17);
        let hs: Vec<_> = r.headers().collect();
        assert_eq!(hs, vec![(&b"h1"[..], Some(&b"v1"[..])), (&b""[..], None)]);
        assert!(it.next().is_none());
        it.finish().unwrap();

        let owned: Vec<_> = Records::new(Bytes::from(buf), 1).collect();
        assert_eq!(owned, vec![Ok(rec)]);
    }

    #[test]
    fn count_mismatches_are_errors() {
        let mut buf = Vec::new();
        sample().encode(&mut buf).unwrap();
        let mut it = RecordRefIter::new(&buf, 2);
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().unwrap().is_err());
        assert!(it.finish().is_err());

        let mut two = buf.clone();
        two.extend_from_slice(&buf);
        let it = RecordRefIter::new(&two, 1);
        assert_eq!(it.count(), 1);
        let mut it = RecordRefIter::new(&two, 1);
        it.next();
        assert!(it.finish().is_err());
        let owned: Vec<_> = Records::new(Bytes::from(two), 1).collect();
        assert_eq!(owned.len(), 2);
        assert!(owned[1].is_err());
    }

    #[test]
    fn body_length_must_match_fields() {
        let mut buf = Vec::new();
        sample().encode(&mut buf).unwrap();
        // Claim one more body byte and supply it: the fields then end before the body does.
        let body_len = buf[0] as i32 / 2;
        let mut longer = vec![((body_len + 1) * 2) as u8];
        longer.extend_from_slice(&buf[1..]);
        longer.push(0);
        assert!(RecordRefIter::new(&longer, 1).next().unwrap().is_err());
        // Claim one fewer: the last field runs past the body.
        let mut shorter = vec![((body_len - 1) * 2) as u8];
        shorter.extend_from_slice(&buf[1..]);
        assert!(RecordRefIter::new(&shorter, 1).next().unwrap().is_err());
    }

    #[test]
    fn negative_header_key_and_count_are_errors() {
        // body: attrs, ts 0, offset 0, key null, value null, header count -1
        let neg_count = [5 * 2, 0, 0, 0, 1, 1, 1];
        assert!(RecordRefIter::new(&neg_count, 1).next().unwrap().is_err());
        // header count 1, header key length -1, header value null
        let neg_key = [7 * 2, 0, 0, 0, 1, 1, 2, 1, 1];
        assert!(RecordRefIter::new(&neg_key, 1).next().unwrap().is_err());
        // huge header count with no bytes for it
        let huge = [9 * 2, 0, 0, 0, 1, 1, 0xfe, 0xff, 0xff, 0xff, 0x07];
        assert!(RecordRefIter::new(&huge, 1).next().unwrap().is_err());
    }

    #[test]
    fn every_truncation_is_an_error() {
        let mut buf = Vec::new();
        sample().encode(&mut buf).unwrap();
        for cut in 0..buf.len() {
            let mut it = RecordRefIter::new(&buf[..cut], 1);
            assert!(it.next().unwrap().is_err(), "cut at {cut}");
            let owned: Vec<_> = Records::new(Bytes::copy_from_slice(&buf[..cut]), 1).collect();
            assert!(owned[0].is_err());
        }
    }
}
