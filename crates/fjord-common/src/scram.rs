//! SCRAM credentials (RFC 5802, RFC 7677) as Kafka keeps them: for a user and a mechanism
//! (SCRAM-SHA-256 or SCRAM-SHA-512), the salt, the iteration count, and the stored and server keys
//! derived from the salted password. The password itself is never kept.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};

/// A SCRAM mechanism, with Kafka's type code (`ScramMechanism.type()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

/// The fewest iterations Kafka accepts for a credential.
pub const MIN_ITERATIONS: i32 = 4096;
/// The most iterations Kafka accepts for a credential.
pub const MAX_ITERATIONS: i32 = 16384;

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The mechanism's SASL name.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's code for the mechanism on the wire (1, 2); 0 is UNKNOWN.
    pub fn code(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<ScramMechanism> {
        Self::ALL.into_iter().find(|m| m.code() == code)
    }

    /// H(data).
    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// HMAC(key, data).
    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        fn run<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            // HMAC takes keys of any length.
            let mut mac = <M as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            ScramMechanism::Sha256 => run::<Hmac<Sha256>>(key, data),
            ScramMechanism::Sha512 => run::<Hmac<Sha512>>(key, data),
        }
    }

    /// Hi(password, salt, iterations): PBKDF2 with this mechanism's HMAC, the salted password.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => {
                let mut out = vec![0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out
            }
            ScramMechanism::Sha512 => {
                let mut out = vec![0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out
            }
        }
    }
}

/// What the cluster keeps of a user's password for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub mechanism: ScramMechanism,
    pub salt: Vec<u8>,
    /// H(HMAC(salted password, "Client Key")): checks a client's proof.
    pub stored_key: Vec<u8>,
    /// HMAC(salted password, "Server Key"): signs the server's answer.
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl ScramCredential {
    /// The credential of a salted password (what AlterUserScramCredentials carries).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: Vec<u8>,
        salted_password: &[u8],
        iterations: i32,
    ) -> ScramCredential {
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        ScramCredential {
            mechanism,
            salt,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
            iterations,
        }
    }

    /// The credential of a password.
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        salt: Vec<u8>,
        iterations: i32,
    ) -> ScramCredential {
        let salted = mechanism.salted_password(
            password.as_bytes(),
            &salt,
            u32::try_from(iterations).unwrap_or(0),
        );
        Self::from_salted_password(mechanism, salt, &salted, iterations)
    }
}

/// A delegation token's HMAC, as Kafka makes it: HMAC-SHA512 of the token id keyed with
/// `delegation.token.secret.key`. Its base64 text is the password the token authenticates with.
pub fn delegation_token_hmac(secret_key: &str, token_id: &str) -> Vec<u8> {
    ScramMechanism::Sha512.hmac(secret_key.as_bytes(), token_id.as_bytes())
}

/// Whether `hmac` is the HMAC of token `token_id`, compared in constant time (it is the token's
/// password).
pub fn is_delegation_token_hmac(secret_key: &str, token_id: &str, hmac: &[u8]) -> bool {
    let Ok(mut mac) = <Hmac<Sha512> as KeyInit>::new_from_slice(secret_key.as_bytes()) else {
        return false;
    };
    mac.update(token_id.as_bytes());
    mac.verify_slice(hmac).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example: user "user", password "pencil".
    #[test]
    fn the_rfc_7677_exchange_verifies_with_the_derived_keys() {
        let salt = [
            0x5b, 0x6d, 0x99, 0x68, 0x9d, 0x12, 0x35, 0x8e, 0xec, 0xa0, 0x4b, 0x14, 0x12, 0x36,
            0xfa, 0x81,
        ]; // "W22ZaJ0SNY7soEsUEjb6gQ=="
        let credential =
            ScramCredential::from_password(ScramMechanism::Sha256, "pencil", salt.to_vec(), 4096);
        let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,\
            r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,\
            c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        // v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=
        let server_signature = [
            0xea, 0xba, 0xe2, 0x4d, 0x10, 0x62, 0xdb, 0x75, 0xa9, 0x45, 0x1f, 0xf0, 0xb6, 0xea,
            0x7e, 0x98, 0xc8, 0x54, 0x65, 0x49, 0xff, 0x74, 0x1e, 0x67, 0x2d, 0x32, 0x51, 0xb2,
            0x39, 0x7d, 0xe4, 0x6e,
        ];
        let signed = ScramMechanism::Sha256.hmac(&credential.server_key, auth_message.as_bytes());
        assert_eq!(signed, server_signature);
    }

    #[test]
    fn mechanisms_by_name_and_code() {
        for m in ScramMechanism::ALL {
            assert_eq!(ScramMechanism::from_name(m.name()), Some(m));
            assert_eq!(ScramMechanism::from_code(m.code()), Some(m));
        }
        assert_eq!(ScramMechanism::from_name("PLAIN"), None);
        assert_eq!(ScramMechanism::from_code(0), None);
        let c = ScramCredential::from_password(ScramMechanism::Sha512, "pw", vec![1; 16], 4096);
        assert_eq!((c.stored_key.len(), c.server_key.len()), (64, 64));
    }
}
