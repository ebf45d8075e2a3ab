//! Kafka's 128-bit UUID type (topic ids, directory ids) and its text form.

use std::fmt;
use std::str::FromStr;

/// A Kafka UUID, stored as its 16 big-endian bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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

/// Text that is not a Kafka UUID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UuidError {
    #[error("{0:?} is not a base64 UUID: expected 22 characters (or 24 with padding)")]
    Length(String),
    #[error("{0:?} is not a base64 UUID: invalid character")]
    InvalidCharacter(String),
}

fn sextet(c: u8) -> Option<u32> {
    URL_SAFE_ALPHABET
        .iter()
        .position(|&a| a == c)
        .map(|p| p as u32)
}

/// Decodes Kafka's UUID text. Like Java's URL-safe decoder it accepts the padded form too and
/// ignores the unused low bits of the last character.
impl FromStr for Uuid {
    type Err = UuidError;

    fn from_str(s: &str) -> Result<Uuid, UuidError> {
        let body = match s.len() {
            22 => s,
            24 => s
                .strip_suffix("==")
                .ok_or_else(|| UuidError::InvalidCharacter(s.to_string()))?,
            _ => return Err(UuidError::Length(s.chars().take(24).collect())),
        };
        let mut bits: u128 = 0;
        let mut chars = body.as_bytes().iter();
        // 21 characters carry 126 bits; the 22nd contributes its top 2 bits and 4 unused ones.
        for &c in chars.by_ref().take(21) {
            let v = sextet(c).ok_or_else(|| UuidError::InvalidCharacter(s.to_string()))?;
            bits = bits << 6 | u128::from(v);
        }
        for &c in chars {
            let v = sextet(c).ok_or_else(|| UuidError::InvalidCharacter(s.to_string()))?;
            bits = bits << 2 | u128::from(v >> 4);
        }
        Ok(Uuid(bits.to_be_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: [u8; 16] = [
        0x5c, 0x1a, 0xd4, 0x7e, 0x00, 0xff, 0x41, 0x9b, 0x8e, 0x2f, 0xc3, 0x10, 0x77, 0xfe, 0xfb,
        0xbf,
    ];

    #[test]
    fn text_matches_java() {
        // RFC 4648 URL-safe base64 without padding, which is what java.util.Base64 produces.
        assert_eq!(Uuid(ID).to_string(), "XBrUfgD_QZuOL8MQd_77vw");
        assert_eq!("XBrUfgD_QZuOL8MQd_77vw".parse(), Ok(Uuid(ID)));
        assert_eq!("XBrUfgD_QZuOL8MQd_77vw==".parse(), Ok(Uuid(ID)));
        let mut one = [0u8; 16];
        one[15] = 1;
        assert_eq!("AAAAAAAAAAAAAAAAAAAAAQ".parse(), Ok(Uuid(one)));
    }

    #[test]
    fn bad_text() {
        for bad in [
            "",
            "short",
            "XBrUfgD_QZuOL8MQd_77vwAA",
            "XBrUfgD_QZuOL8MQd_77vw=",
            "XBrUfgD_QZuOL8MQd_77vwxxxxxxxxxx",
        ] {
            assert!(bad.parse::<Uuid>().is_err(), "{bad}");
        }
        // Standard-alphabet characters are not URL-safe base64.
        assert!(matches!(
            "XBrUfgD/QZuOL8MQd+77vw".parse::<Uuid>(),
            Err(UuidError::InvalidCharacter(_))
        ));
        assert!("XBrUfgD_QZuOL8MQd_77v\u{e9}".parse::<Uuid>().is_err());
        assert!("XBrUfgD_QZuOL8MQd_7é".parse::<Uuid>().is_err());
    }

    proptest::proptest! {
        #[test]
        fn text_round_trips(id in proptest::array::uniform16(proptest::num::u8::ANY)) {
            let text = Uuid(id).to_string();
            proptest::prop_assert_eq!(text.len(), 22);
            proptest::prop_assert_eq!(text.parse::<Uuid>(), Ok(Uuid(id)));
        }

        #[test]
        fn arbitrary_text_never_panics(s in ".{0,30}") {
            let _ = s.parse::<Uuid>();
        }
    }

    #[test]
    fn displays_as_url_safe_base64() {
        assert_eq!(Uuid::ZERO.to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(Uuid([0xff; 16]).to_string(), "_____________________w");
        let mut bytes = [0u8; 16];
        bytes[15] = 1;
        assert_eq!(Uuid(bytes).to_string(), "AAAAAAAAAAAAAAAAAAAAAQ");
    }
}
