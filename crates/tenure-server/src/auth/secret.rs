//! Token secrets: new random secrets, their SHA-256 hashes as the configuration holds
//! them, and constant-time comparison.

use crate::config::ConfigError;

/// A SHA-256 digest.
pub(super) type Hash = [u8; 32];

/// The SHA-256 of a secret, as the configuration's `sha256` holds it (lowercase hex).
pub fn hash_secret(secret: &str) -> String {
    hex(&digest(secret))
}

pub(super) fn digest(secret: &str) -> Hash {
    let d = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    let mut h = [0u8; 32];
    h.copy_from_slice(d.as_ref());
    h
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn parse_hash(s: &str) -> Option<Hash> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut h = [0u8; 32];
    for (i, byte) in h.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(h)
}

/// A new random secret (256 bits from the system's generator, hex), for a new token.
pub fn new_secret() -> Result<String, ConfigError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| ConfigError::Invalid("the system's random generator failed".into()))?;
    Ok(format!("tnr_{}", hex(&bytes)))
}

/// Equal digests, compared in constant time (no early exit on the first difference).
pub(super) fn same(a: &Hash, b: &Hash) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}
