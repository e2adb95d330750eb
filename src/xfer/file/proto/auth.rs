//! The HELLO authentication answer to the receiver's CHALLENGE nonce.

use super::Digest;

/// BLAKE3 `derive_key` context for the authentication key.
pub const AUTH_CONTEXT: &str = "rdmaxfer 2025-01 file transfer auth key v1";
/// Prefix of the MAC input, binding the answer to its purpose.
const AUTH_LABEL: &[u8] = b"rdmaxfer HELLO answer v1\0";

/// A fresh random 32-byte nonce (ChaCha CSPRNG seeded by the OS).
pub fn new_nonce() -> Digest {
    rand::random()
}

/// The authentication answer: `blake3::keyed_hash(derive_key(AUTH_CONTEXT, token),
/// "rdmaxfer HELLO answer v1\0" ‖ nonce)`.
pub fn auth_answer(token: &[u8], nonce: &Digest) -> Digest {
    let key = blake3::derive_key(AUTH_CONTEXT, token);
    let mut h = blake3::Hasher::new_keyed(&key);
    h.update(AUTH_LABEL);
    h.update(nonce);
    *h.finalize().as_bytes()
}

/// Prefix of the receiver's proof, distinct from the sender's answer (a receiver cannot get a
/// sender's answer by sending it as its own proof, nor the other way round).
const PROOF_LABEL: &[u8] = b"rdmaxfer CHALLENGE proof v1\0";

/// The receiver's proof that it knows the token, sent with its CHALLENGE:
/// `blake3::keyed_hash(derive_key(AUTH_CONTEXT, token), "rdmaxfer CHALLENGE proof v1\0" ‖ nonce)`.
pub fn receiver_proof(token: &[u8], nonce: &Digest) -> Digest {
    let key = blake3::derive_key(AUTH_CONTEXT, token);
    let mut h = blake3::Hasher::new_keyed(&key);
    h.update(PROOF_LABEL);
    h.update(nonce);
    *h.finalize().as_bytes()
}

/// True when `proof` is the receiver's proof for `nonce` under `token`; constant-time compare.
pub fn receiver_proof_ok(token: &[u8], nonce: &Digest, proof: Option<&Digest>) -> bool {
    match proof {
        Some(p) => blake3::Hash::from(receiver_proof(token, nonce)) == blake3::Hash::from(*p),
        None => false,
    }
}

/// True when `answer` is the right answer for `nonce` under `token`; constant-time compare.
pub fn auth_verify(token: &[u8], nonce: &Digest, answer: Option<&Digest>) -> bool {
    match answer {
        // blake3::Hash equality is constant-time.
        Some(a) => blake3::Hash::from(auth_answer(token, nonce)) == blake3::Hash::from(*a),
        None => false,
    }
}
