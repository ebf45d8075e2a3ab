//! Kafka's 128-bit UUID type (topic ids, directory ids).

use std::fmt;

/// A Kafka UUID, stored as its 16 big-endian bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// The all-zero UUID, which Kafka uses to mean "no id".
    pub const ZERO: Uuid = Uuid([0; 16]);
}

const URL_SAFE_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Kafka prints UUIDs as URL-safe base64 without padding (22 characters).
impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = String::with_capacity(22);
        for chunk in self.0.chunks(3) {
            let b0 = chunk.first().copied().unwrap_or(0);
            let b1 = chunk.get(1).copied();
            let b2 = chunk.get(2).copied();
            let n = (u32::from(b0) << 16)
                | (u32::from(b1.unwrap_or(0)) << 8)
                | u32::from(b2.unwrap_or(0));
            let symbols = 2 + usize::from(b1.is_some()) + usize::from(b2.is_some());
            for i in 0..symbols {
                let index = ((n >> (18 - 6 * i)) & 0x3f) as usize;
                // The 6-bit mask keeps the index inside the 64-symbol alphabet.
                if let Some(&symbol) = URL_SAFE_ALPHABET.get(index) {
                    text.push(char::from(symbol));
                }
            }
        }
        f.write_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_as_url_safe_base64() {
        assert_eq!(Uuid::ZERO.to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(Uuid([0xff; 16]).to_string(), "_____________________w");
        let mut bytes = [0u8; 16];
        bytes[15] = 1;
        assert_eq!(Uuid(bytes).to_string(), "AAAAAAAAAAAAAAAAAAAAAQ");
    }
}
