//! On-disk framing shared by the metadata log, vote and snapshot files, and the
//! crash-safe file replacement they use.
//!
//! A frame is `length: u32 BE | crc32c(payload): u32 BE | payload`. Readers
//! stop at the first frame that is incomplete or fails its checksum, which is how
//! a tail torn by a crash is told apart from the durable prefix before it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

const HEADER_LEN: usize = 8;

/// Frames `payload` for appending to a file.
pub(crate) fn encode(payload: &[u8]) -> io::Result<Vec<u8>> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame payload over 4 GiB"))?;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

/// One intact frame found in a buffer.
pub(crate) struct Frame<'a> {
    /// Byte position of the frame header in the buffer.
    pub(crate) position: usize,
    /// Byte position just past the frame.
    pub(crate) end: usize,
    pub(crate) payload: &'a [u8],
}

/// Iterates the intact frames at the start of a buffer, stopping at the first
/// incomplete or corrupt one; [`Frames::valid_len`] then tells where that was.
pub(crate) struct Frames<'a> {
    buf: &'a [u8],
    position: usize,
}

impl<'a> Frames<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, position: 0 }
    }

    /// Length of the prefix made of intact frames returned so far.
    pub(crate) fn valid_len(&self) -> usize {
        self.position
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Frame<'a>;

    fn next(&mut self) -> Option<Frame<'a>> {
        let rest = self.buf.get(self.position..)?;
        let header = rest.get(..HEADER_LEN)?;
        let (len, crc) = header.split_at(4);
        let len = usize::try_from(u32::from_be_bytes(len.try_into().ok()?)).ok()?;
        let crc = u32::from_be_bytes(crc.try_into().ok()?);
        // Payloads are never empty; an all-zero header (crc32c of nothing is 0) is
        // what a file extended by a crash but never written looks like.
        if len == 0 {
            return None;
        }
        let payload = rest.get(HEADER_LEN..HEADER_LEN.checked_add(len)?)?;
        if crc32c::crc32c(payload) != crc {
            return None;
        }
        let position = self.position;
        self.position = position + HEADER_LEN + len;
        Some(Frame {
            position,
            end: self.position,
            payload,
        })
    }
}

/// Decodes a buffer that must hold exactly one intact frame.
pub(crate) fn decode_single(buf: &[u8]) -> Option<&[u8]> {
    let mut frames = Frames::new(buf);
    let frame = frames.next()?;
    (frame.end == buf.len()).then_some(frame.payload)
}

/// Replaces `dir/name` with `bytes` so that after a crash the file holds either
/// the old or the new contents in full: write a temporary file, fsync it, rename
/// it over the target, fsync the directory.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)
}

/// Makes creations, renames and deletions of entries in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Reads a whole file, or `None` if it does not exist.
pub(crate) fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_stop_at_torn_or_corrupt_data() {
        let mut buf = encode(b"one").unwrap();
        buf.extend(encode(b"two").unwrap());
        let full = buf.len();
        for cut in 0..=full {
            let mut frames = Frames::new(&buf[..cut]);
            let payloads: Vec<_> = frames.by_ref().map(|f| f.payload.to_vec()).collect();
            let expected: &[&[u8]] = match cut {
                0..=10 => &[],
                11..=21 => &[b"one"],
                _ => &[b"one", b"two"],
            };
            assert_eq!(payloads, expected, "cut at {cut}");
            assert_eq!(frames.valid_len(), expected.len() * 11);
        }
        // A flipped payload bit fails the checksum.
        let mut bad = buf.clone();
        bad[20] ^= 1;
        let mut frames = Frames::new(&bad);
        assert_eq!(frames.by_ref().count(), 1);
        assert_eq!(frames.valid_len(), 11);
        // A huge length in a short buffer is just an incomplete frame.
        let mut huge = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        huge.extend_from_slice(b"x");
        assert_eq!(Frames::new(&huge).count(), 0);
        // Zero fill after a crash is not an empty frame.
        assert_eq!(Frames::new(&[0; 16]).count(), 0);
    }

    #[test]
    fn single_frame_must_fill_the_buffer() {
        let buf = encode(b"vote").unwrap();
        assert_eq!(decode_single(&buf), Some(&b"vote"[..]));
        let mut longer = buf.clone();
        longer.push(0);
        assert_eq!(decode_single(&longer), None);
        assert_eq!(decode_single(&buf[..buf.len() - 1]), None);
    }

    #[test]
    fn atomic_write_replaces_contents() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(dir.path(), "f", b"old").unwrap();
        write_atomic(dir.path(), "f", b"new").unwrap();
        assert_eq!(
            read_optional(&dir.path().join("f")).unwrap().as_deref(),
            Some(&b"new"[..])
        );
        assert!(!dir.path().join("f.tmp").exists());
        assert_eq!(read_optional(&dir.path().join("g")).unwrap(), None);
    }
}
