//! Compression codecs of record batches: the codec id carried in a batch's attributes, and
//! bounded decompression / compression in the exact container formats Kafka clients produce.
//!
//! Every decoder here stops with an error as soon as the output would exceed the caller's bound,
//! and sizes its buffers from the bound and the input, so a small hostile input (a decompression
//! bomb) can never make the broker allocate much more than the bound.

use std::io::{Read, Write};

use crate::RecordsError;

/// The codec of a v2 batch, stored in the low three bits of its attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Compression {
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec for an id as stored in batch attributes; ids 5..=7 are unknown to Kafka.
    pub fn from_id(id: i16) -> Result<Compression, RecordsError> {
        match id {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(RecordsError::UnsupportedCompression(other)),
        }
    }

    /// The codec named by a batch's attributes.
    pub fn from_attributes(attributes: i16) -> Result<Compression, RecordsError> {
        Compression::from_id(attributes & crate::header::attributes::COMPRESSION_MASK)
    }

    /// Parses a `compression.type` value. `"producer"` (keep the producer's codec) is not a
    /// codec, so it yields `None` along with unknown names; the caller decides what it means.
    pub fn from_config_name(name: &str) -> Option<Compression> {
        match name {
            "none" | "uncompressed" => Some(Compression::None),
            "gzip" => Some(Compression::Gzip),
            "snappy" => Some(Compression::Snappy),
            "lz4" => Some(Compression::Lz4),
            "zstd" => Some(Compression::Zstd),
            _ => None,
        }
    }

    pub fn id(self) -> i16 {
        self as i16
    }

    /// The name used by `compression.type`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Decompresses `input` written with `codec`, failing with
/// [`RecordsError::DecompressedTooLarge`] once more than `max_out` bytes would be produced.
pub fn decompress(
    codec: Compression,
    input: &[u8],
    max_out: usize,
) -> Result<Vec<u8>, RecordsError> {
    match codec {
        Compression::None => {
            if input.len() > max_out {
                return Err(RecordsError::DecompressedTooLarge { max: max_out });
            }
            Ok(input.to_vec())
        }
        Compression::Gzip => {
            // Java's GZIPInputStream reads concatenated members, so a multi-member stream is valid.
            read_bounded(
                flate2::read::MultiGzDecoder::new(input),
                max_out,
                input.len(),
            )
        }
        Compression::Snappy => snappy::decompress(input, max_out),
        Compression::Lz4 => lz4::decompress(input, max_out),
        Compression::Zstd => zstd_decompress(input, max_out),
    }
}

/// Compresses `input` with `codec` in the container format Kafka's Java client writes.
/// `level` is the codec's level (`compression.<codec>.level`); `None` picks Kafka's default.
/// Out-of-range levels are clamped. LZ4 and Snappy have no levels here.
pub fn compress(
    codec: Compression,
    input: &[u8],
    level: Option<i32>,
) -> Result<Vec<u8>, RecordsError> {
    match codec {
        Compression::None => Ok(input.to_vec()),
        Compression::Gzip => {
            // Kafka's default is zlib's default, level 6.
            let level = level.unwrap_or(6).clamp(1, 9) as u32;
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(input.len() / 2 + 64),
                flate2::Compression::new(level),
            );
            enc.write_all(input)
                .and_then(|()| enc.finish())
                .map_err(|_| RecordsError::CompressionFailed("gzip"))
        }
        Compression::Snappy => snappy::compress(input),
        Compression::Lz4 => Ok(lz4::compress(input)),
        Compression::Zstd => {
            let level = level.unwrap_or(3).clamp(
                *zstd::compression_level_range().start(),
                *zstd::compression_level_range().end(),
            );
            zstd::bulk::compress(input, level).map_err(|_| RecordsError::CompressionFailed("zstd"))
        }
    }
}

/// Reads `reader` to its end into a vector that never holds more than `max_out` bytes nor has
/// capacity beyond `max_out`. `hint` sizes the first allocation.
fn read_bounded<R: Read>(
    mut reader: R,
    max_out: usize,
    hint: usize,
) -> Result<Vec<u8>, RecordsError> {
    let mut out: Vec<u8> = Vec::with_capacity(hint.min(max_out));
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(RecordsError::DecompressionFailed("invalid compressed data")),
        };
        if out.len() + n > max_out {
            return Err(RecordsError::DecompressedTooLarge { max: max_out });
        }
        let start = out.len();
        grow_zeroed(&mut out, n, max_out);
        if let (Some(dst), Some(src)) = (out.get_mut(start..), chunk.get(..n)) {
            dst.copy_from_slice(src);
        }
    }
}

/// Extends `out` by `additional` zeroed bytes, growing capacity geometrically but never past
/// `max_out`, so the buffer's footprint stays within the decompression bound.
fn grow_zeroed(out: &mut Vec<u8>, additional: usize, max_out: usize) {
    let needed = out.len() + additional;
    if needed > out.capacity() {
        let target = out
            .capacity()
            .saturating_mul(2)
            .max(needed)
            .min(max_out.max(needed));
        out.reserve_exact(target - out.len());
    }
    out.resize(needed, 0);
}

/// Smallest zstd window (log2) the decoder always accepts: Kafka's Java producer streams with
/// zstd level 3 and an unknown content size, which uses a 2 MiB window.
const ZSTD_MIN_WINDOW_LOG: u32 = 21;
/// zstd's own default limit for decoders.
const ZSTD_MAX_WINDOW_LOG: u32 = 27;

fn zstd_decompress(input: &[u8], max_out: usize) -> Result<Vec<u8>, RecordsError> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(input)
        .map_err(|_| RecordsError::DecompressionFailed("zstd decoder init"))?;
    // The decoder allocates the window a frame declares. A window larger than the whole allowed
    // output is never needed, so refuse such frames instead of allocating for them.
    let needed_log = usize::BITS - max_out.max(1).saturating_sub(1).leading_zeros();
    let window_log = needed_log.clamp(ZSTD_MIN_WINDOW_LOG, ZSTD_MAX_WINDOW_LOG);
    decoder
        .window_log_max(window_log)
        .map_err(|_| RecordsError::DecompressionFailed("zstd decoder init"))?;
    read_bounded(decoder, max_out, input.len().saturating_mul(4))
}

/// Snappy as Kafka clients write it: either the xerial stream framing used by the Java client
/// (`snappy-java`), or one raw snappy block as written by some non-Java clients.
mod snappy {
    use crate::RecordsError;

    /// The xerial stream header: magic, then big-endian version and minimum compatible version.
    const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
    const XERIAL_HEADER_LEN: usize = 16;
    const XERIAL_VERSION: i32 = 1;
    const XERIAL_COMPATIBLE_VERSION: i32 = 1;
    /// Uncompressed bytes per framed block; snappy-java's default.
    const XERIAL_BLOCK_SIZE: usize = 32 * 1024;
    /// The densest snappy element is a three-byte copy of 64 bytes, so a block can never
    /// expand by more than this factor; a larger declared length is corrupt.
    const MAX_EXPANSION: usize = 22;

    pub(super) fn decompress(input: &[u8], max_out: usize) -> Result<Vec<u8>, RecordsError> {
        match input.strip_prefix(&XERIAL_MAGIC[..]) {
            // Like snappy-java, anything without the full header is treated as a raw block.
            Some(rest) if input.len() >= XERIAL_HEADER_LEN => decompress_xerial(
                rest.get(XERIAL_HEADER_LEN - XERIAL_MAGIC.len()..)
                    .unwrap_or(&[]),
                max_out,
            ),
            _ => {
                let mut out = Vec::new();
                decompress_block(input, max_out, &mut out)?;
                Ok(out)
            }
        }
    }

    fn decompress_xerial(mut rest: &[u8], max_out: usize) -> Result<Vec<u8>, RecordsError> {
        let mut out = Vec::new();
        while !rest.is_empty() {
            // snappy-java accepts concatenated streams, each starting with its own header.
            if rest.len() >= XERIAL_HEADER_LEN && rest.starts_with(&XERIAL_MAGIC) {
                rest = rest.get(XERIAL_HEADER_LEN..).unwrap_or(&[]);
                continue;
            }
            let (len_bytes, tail) =
                rest.split_first_chunk::<4>()
                    .ok_or(RecordsError::DecompressionFailed(
                        "truncated snappy block length",
                    ))?;
            let len = u32::from_be_bytes(*len_bytes) as usize;
            if len > tail.len() {
                return Err(RecordsError::DecompressionFailed("truncated snappy block"));
            }
            let (block, after) = tail.split_at(len);
            decompress_block(block, max_out, &mut out)?;
            rest = after;
        }
        Ok(out)
    }

    /// Appends one raw snappy block to `out`, checking its declared length before allocating.
    fn decompress_block(
        block: &[u8],
        max_out: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordsError> {
        let declared = snap::raw::decompress_len(block)
            .map_err(|_| RecordsError::DecompressionFailed("invalid snappy block"))?;
        if declared > max_out.saturating_sub(out.len()) {
            return Err(RecordsError::DecompressedTooLarge { max: max_out });
        }
        if declared > block.len().saturating_mul(MAX_EXPANSION) {
            return Err(RecordsError::DecompressionFailed(
                "snappy length exceeds what the block can hold",
            ));
        }
        let start = out.len();
        super::grow_zeroed(out, declared, max_out);
        let written = snap::raw::Decoder::new()
            .decompress(block, out.get_mut(start..).unwrap_or(&mut []))
            .map_err(|_| RecordsError::DecompressionFailed("invalid snappy block"))?;
        out.truncate(start + written);
        Ok(())
    }

    pub(super) fn compress(input: &[u8]) -> Result<Vec<u8>, RecordsError> {
        let mut out =
            Vec::with_capacity(XERIAL_HEADER_LEN + snap::raw::max_compress_len(input.len()) + 64);
        out.extend_from_slice(&XERIAL_MAGIC);
        out.extend_from_slice(&XERIAL_VERSION.to_be_bytes());
        out.extend_from_slice(&XERIAL_COMPATIBLE_VERSION.to_be_bytes());
        let mut encoder = snap::raw::Encoder::new();
        let mut scratch = vec![0u8; snap::raw::max_compress_len(XERIAL_BLOCK_SIZE)];
        for chunk in input.chunks(XERIAL_BLOCK_SIZE) {
            let n = encoder
                .compress(chunk, &mut scratch)
                .map_err(|_| RecordsError::CompressionFailed("snappy"))?;
            let block = scratch
                .get(..n)
                .ok_or(RecordsError::CompressionFailed("snappy"))?;
            out.extend_from_slice(&(n as u32).to_be_bytes());
            out.extend_from_slice(block);
        }
        Ok(out)
    }
}

/// The LZ4 frame format restricted as Kafka restricts it: independent blocks only, no
/// dictionary id. Block checksums are verified when present; the content checksum is skipped,
/// as the Java client does. Written frames use 64 KiB independent blocks and no checksums.
mod lz4 {
    use crate::RecordsError;

    const MAGIC: u32 = 0x184D_2204;
    const FLG_VERSION_MASK: u8 = 0xC0;
    const FLG_VERSION_01: u8 = 0x40;
    const FLG_BLOCK_INDEPENDENCE: u8 = 0x20;
    const FLG_BLOCK_CHECKSUM: u8 = 0x10;
    const FLG_CONTENT_SIZE: u8 = 0x08;
    const FLG_CONTENT_CHECKSUM: u8 = 0x04;
    /// Bit 1 is reserved; Kafka also treats bit 0 (dictionary id in newer specs) as reserved.
    const FLG_RESERVED: u8 = 0x03;
    const BD_BLOCK_SIZE_SHIFT: u8 = 4;
    const BD_RESERVED: u8 = 0x8F;
    const BLOCK_UNCOMPRESSED: u32 = 0x8000_0000;
    const BD_64KB: u8 = 4;
    const WRITE_BLOCK_SIZE: usize = 64 * 1024;
    /// An LZ4 sequence of n bytes expands to at most about 255 * n bytes of output.
    const MAX_EXPANSION: usize = 255;

    fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], RecordsError> {
        if input.len() < n {
            return Err(RecordsError::DecompressionFailed("truncated lz4 frame"));
        }
        let (head, tail) = input.split_at(n);
        *input = tail;
        Ok(head)
    }

    fn take_u32_le(input: &mut &[u8]) -> Result<u32, RecordsError> {
        let b = take(input, 4)?;
        let mut a = [0u8; 4];
        a.copy_from_slice(b);
        Ok(u32::from_le_bytes(a))
    }

    pub(super) fn decompress(input: &[u8], max_out: usize) -> Result<Vec<u8>, RecordsError> {
        let mut rest = input;
        if take_u32_le(&mut rest)? != MAGIC {
            return Err(RecordsError::DecompressionFailed("not an lz4 frame"));
        }
        let descriptor_start = rest;
        let flg = *take(&mut rest, 1)?.first().unwrap_or(&0);
        let bd = *take(&mut rest, 1)?.first().unwrap_or(&0);
        if flg & FLG_VERSION_MASK != FLG_VERSION_01 || flg & FLG_RESERVED != 0 {
            return Err(RecordsError::DecompressionFailed(
                "unsupported lz4 frame flags",
            ));
        }
        if flg & FLG_BLOCK_INDEPENDENCE == 0 {
            return Err(RecordsError::DecompressionFailed(
                "dependent lz4 blocks are unsupported",
            ));
        }
        let block_size_code = (bd >> BD_BLOCK_SIZE_SHIFT) & 0x07;
        if bd & BD_RESERVED != 0 || !(4..=7).contains(&block_size_code) {
            return Err(RecordsError::DecompressionFailed(
                "invalid lz4 block descriptor",
            ));
        }
        let max_block = 1usize << (2 * block_size_code + 8);
        if flg & FLG_CONTENT_SIZE != 0 {
            take(&mut rest, 8)?;
        }
        let descriptor = descriptor_start
            .get(..descriptor_start.len() - rest.len())
            .unwrap_or(&[]);
        let header_checksum = *take(&mut rest, 1)?.first().unwrap_or(&0);
        if header_checksum != ((xxh32(descriptor, 0) >> 8) & 0xFF) as u8 {
            return Err(RecordsError::DecompressionFailed(
                "lz4 frame header checksum mismatch",
            ));
        }

        let mut out: Vec<u8> = Vec::new();
        loop {
            let word = take_u32_le(&mut rest)?;
            let size = (word & !BLOCK_UNCOMPRESSED) as usize;
            if size == 0 {
                // End mark. The content checksum, if any, follows and is not verified (as in Kafka).
                if flg & FLG_CONTENT_CHECKSUM != 0 {
                    take(&mut rest, 4)?;
                }
                return Ok(out);
            }
            if size > max_block {
                return Err(RecordsError::DecompressionFailed(
                    "lz4 block larger than its maximum",
                ));
            }
            let block = take(&mut rest, size)?;
            if flg & FLG_BLOCK_CHECKSUM != 0 && take_u32_le(&mut rest)? != xxh32(block, 0) {
                return Err(RecordsError::DecompressionFailed(
                    "lz4 block checksum mismatch",
                ));
            }
            let room = max_out.saturating_sub(out.len());
            if word & BLOCK_UNCOMPRESSED != 0 {
                if block.len() > room {
                    return Err(RecordsError::DecompressedTooLarge { max: max_out });
                }
                let start = out.len();
                super::grow_zeroed(&mut out, block.len(), max_out);
                if let Some(dst) = out.get_mut(start..) {
                    dst.copy_from_slice(block);
                }
                continue;
            }
            // Decode straight into the output's tail. The window is limited by the block maximum,
            // by what this block could expand to, and by the remaining bound; a block that
            // needs more room than the bound allows is a bomb (or corrupt) either way.
            let window = max_block
                .min(block.len().saturating_mul(MAX_EXPANSION))
                .min(room);
            let start = out.len();
            super::grow_zeroed(&mut out, window, max_out);
            let result =
                lz4_flex::block::decompress_into(block, out.get_mut(start..).unwrap_or(&mut []));
            match result {
                Ok(n) => out.truncate(start + n),
                Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) if window == room => {
                    return Err(RecordsError::DecompressedTooLarge { max: max_out });
                }
                Err(_) => return Err(RecordsError::DecompressionFailed("invalid lz4 block")),
            }
        }
    }

    pub(super) fn compress(input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len() + input.len() / 255 + 64);
        out.extend_from_slice(&MAGIC.to_le_bytes());
        let descriptor = [
            FLG_VERSION_01 | FLG_BLOCK_INDEPENDENCE,
            BD_64KB << BD_BLOCK_SIZE_SHIFT,
        ];
        out.extend_from_slice(&descriptor);
        out.push(((xxh32(&descriptor, 0) >> 8) & 0xFF) as u8);
        for chunk in input.chunks(WRITE_BLOCK_SIZE) {
            let compressed = lz4_flex::block::compress(chunk);
            if compressed.len() < chunk.len() {
                out.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
                out.extend_from_slice(&compressed);
            } else {
                out.extend_from_slice(&(chunk.len() as u32 | BLOCK_UNCOMPRESSED).to_le_bytes());
                out.extend_from_slice(chunk);
            }
        }
        out.extend_from_slice(&0u32.to_le_bytes());
        out
    }

    const PRIME1: u32 = 2_654_435_761;
    const PRIME2: u32 = 2_246_822_519;
    const PRIME3: u32 = 3_266_489_917;
    const PRIME4: u32 = 668_265_263;
    const PRIME5: u32 = 374_761_393;

    fn lane(b: &[u8]) -> u32 {
        let mut a = [0u8; 4];
        a.copy_from_slice(b);
        u32::from_le_bytes(a)
    }

    fn round(acc: u32, input: u32) -> u32 {
        acc.wrapping_add(input.wrapping_mul(PRIME2))
            .rotate_left(13)
            .wrapping_mul(PRIME1)
    }

    /// XXH32, which the LZ4 frame format uses for its header and block checksums.
    pub(super) fn xxh32(data: &[u8], seed: u32) -> u32 {
        let mut stripes = data.chunks_exact(16);
        let mut acc = if data.len() >= 16 {
            let mut v = [
                seed.wrapping_add(PRIME1).wrapping_add(PRIME2),
                seed.wrapping_add(PRIME2),
                seed,
                seed.wrapping_sub(PRIME1),
            ];
            for stripe in &mut stripes {
                for (i, word) in stripe.chunks_exact(4).enumerate() {
                    if let Some(slot) = v.get_mut(i) {
                        *slot = round(*slot, lane(word));
                    }
                }
            }
            v[0].rotate_left(1)
                .wrapping_add(v[1].rotate_left(7))
                .wrapping_add(v[2].rotate_left(12))
                .wrapping_add(v[3].rotate_left(18))
        } else {
            seed.wrapping_add(PRIME5)
        };
        acc = acc.wrapping_add(data.len() as u32);
        let tail = stripes.remainder();
        let mut words = tail.chunks_exact(4);
        for word in &mut words {
            acc = acc
                .wrapping_add(lane(word).wrapping_mul(PRIME3))
                .rotate_left(17)
                .wrapping_mul(PRIME4);
        }
        for &byte in words.remainder() {
            acc = acc
                .wrapping_add(u32::from(byte).wrapping_mul(PRIME5))
                .rotate_left(11)
                .wrapping_mul(PRIME1);
        }
        acc ^= acc >> 15;
        acc = acc.wrapping_mul(PRIME2);
        acc ^= acc >> 13;
        acc = acc.wrapping_mul(PRIME3);
        acc ^= acc >> 16;
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn codec_ids_and_names() {
        for c in Compression::ALL {
            assert_eq!(Compression::from_id(c.id()), Ok(c));
            assert_eq!(Compression::from_config_name(c.name()), Some(c));
            assert_eq!(Compression::from_attributes(c.id() | 0x18), Ok(c));
        }
        for id in 5..=7 {
            assert_eq!(
                Compression::from_id(id),
                Err(RecordsError::UnsupportedCompression(id))
            );
        }
        assert_eq!(Compression::from_config_name("producer"), None);
        assert_eq!(Compression::from_config_name("brotli"), None);
    }

    #[test]
    fn xxh32_known_values() {
        assert_eq!(lz4::xxh32(b"", 0), 0x02CC_5D05);
        assert_eq!(lz4::xxh32(b"abc", 0), 0x32D1_53FF);
        let data: Vec<u8> = (0..=255u8).collect();
        // Cross-checked against the lz4_flex frame encoder, which embeds xxh32 checksums.
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(
            lz4_flex::frame::FrameInfo::new()
                .block_mode(lz4_flex::frame::BlockMode::Independent)
                .block_checksums(true)
                .content_checksum(true),
            Vec::new(),
        );
        enc.write_all(&data).unwrap();
        let frame = enc.finish().unwrap();
        assert_eq!(decompress(Compression::Lz4, &frame, 1 << 20).unwrap(), data);
    }

    #[test]
    fn lz4_reads_frames_from_another_encoder() {
        let data = b"kafka kafka kafka kafka kafka kafka kafka".repeat(5000);
        for block_size in [
            lz4_flex::frame::BlockSize::Max64KB,
            lz4_flex::frame::BlockSize::Max256KB,
            lz4_flex::frame::BlockSize::Max4MB,
        ] {
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(
                lz4_flex::frame::FrameInfo::new()
                    .block_size(block_size)
                    .block_mode(lz4_flex::frame::BlockMode::Independent)
                    .content_size(Some(data.len() as u64)),
                Vec::new(),
            );
            enc.write_all(&data).unwrap();
            let frame = enc.finish().unwrap();
            assert_eq!(
                decompress(Compression::Lz4, &frame, data.len()).unwrap(),
                data
            );
        }
    }

    #[test]
    fn lz4_rejects_dependent_blocks_and_bad_header_checksum() {
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(
            lz4_flex::frame::FrameInfo::new().block_mode(lz4_flex::frame::BlockMode::Linked),
            Vec::new(),
        );
        enc.write_all(b"hello hello hello").unwrap();
        let frame = enc.finish().unwrap();
        assert!(matches!(
            decompress(Compression::Lz4, &frame, 1024),
            Err(RecordsError::DecompressionFailed(_))
        ));
        let mut ours = compress(Compression::Lz4, b"hello", None).unwrap();
        ours[6] ^= 1;
        assert!(decompress(Compression::Lz4, &ours, 1024).is_err());
    }

    #[test]
    fn snappy_xerial_sample_decodes() {
        // Hand-assembled snappy-java stream: header, then two framed raw blocks.
        let mut stream = vec![
            0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
        ];
        // Raw block: varint length 5, then a literal tag (len-1)<<2 and the bytes.
        let block1 = [0x05, 0x10, b'h', b'e', b'l', b'l', b'o'];
        let block2 = [0x06, 0x14, b' ', b'w', b'o', b'r', b'l', b'd'];
        for block in [&block1[..], &block2[..]] {
            stream.extend_from_slice(&(block.len() as u32).to_be_bytes());
            stream.extend_from_slice(block);
        }
        assert_eq!(
            decompress(Compression::Snappy, &stream, 64).unwrap(),
            b"hello world"
        );
        // The same first block unframed is a raw snappy payload.
        assert_eq!(
            decompress(Compression::Snappy, &block1, 64).unwrap(),
            b"hello"
        );
        // A framed block length running past the end is an error.
        let mut short = stream.clone();
        short.truncate(stream.len() - 1);
        assert!(decompress(Compression::Snappy, &short, 64).is_err());
    }

    #[test]
    fn snappy_reads_concatenated_xerial_streams() {
        let mut both = compress(Compression::Snappy, b"abc", None).unwrap();
        both.extend(compress(Compression::Snappy, b"def", None).unwrap());
        assert_eq!(
            decompress(Compression::Snappy, &both, 6).unwrap(),
            b"abcdef"
        );
    }

    #[test]
    fn output_capacity_stays_within_the_bound() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        for codec in Compression::ALL {
            let packed = compress(codec, &data, None).unwrap();
            let out = decompress(codec, &packed, data.len() + 10).unwrap();
            assert_eq!(out, data, "{codec}");
            assert!(
                out.capacity() <= data.len() + 10,
                "{codec}: capacity {}",
                out.capacity()
            );
        }
    }

    #[test]
    fn snappy_writes_xerial_framing() {
        let out = compress(Compression::Snappy, &[7u8; 100_000], None).unwrap();
        assert_eq!(&out[..8], b"\x82SNAPPY\x00");
        assert_eq!(&out[8..16], &[0, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(
            decompress(Compression::Snappy, &out, 100_000).unwrap(),
            vec![7u8; 100_000]
        );
    }

    #[test]
    fn gzip_reads_concatenated_members() {
        let mut both = compress(Compression::Gzip, b"abc", None).unwrap();
        both.extend(compress(Compression::Gzip, b"def", Some(9)).unwrap());
        assert_eq!(decompress(Compression::Gzip, &both, 6).unwrap(), b"abcdef");
    }

    #[test]
    fn bombs_are_refused_within_the_bound() {
        let big = vec![0u8; 8 << 20];
        let bound = 64 * 1024;
        for codec in Compression::ALL {
            let bomb = compress(codec, &big, None).unwrap();
            assert_eq!(
                decompress(codec, &bomb, bound),
                Err(RecordsError::DecompressedTooLarge { max: bound }),
                "{codec}"
            );
            // Exactly at the bound is fine.
            let exact = compress(codec, &big[..bound], None).unwrap();
            assert_eq!(
                decompress(codec, &exact, bound).unwrap().len(),
                bound,
                "{codec}"
            );
        }
    }

    #[test]
    fn raw_snappy_bomb_checked_before_allocation() {
        // Declares a 4 GiB output in a five-byte varint and nothing else.
        let bomb = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(
            decompress(Compression::Snappy, &bomb, 1024),
            Err(RecordsError::DecompressedTooLarge { max: 1024 })
        );
    }

    proptest! {
        #[test]
        fn every_codec_round_trips(data in proptest::collection::vec(any::<u8>(), 0..4096), level in proptest::option::of(-5i32..25)) {
            for codec in Compression::ALL {
                let packed = compress(codec, &data, level).unwrap();
                prop_assert_eq!(decompress(codec, &packed, data.len()).unwrap(), data.clone());
            }
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            for codec in Compression::ALL {
                if let Ok(out) = decompress(codec, &data, 4096) {
                    prop_assert!(out.len() <= 4096);
                }
            }
        }
    }
}
