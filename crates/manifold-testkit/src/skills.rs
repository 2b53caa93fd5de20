//! What tests of the skills extension check a skill file against: the bytes a
//! `resources/read` answer carries, and their digest in the form skill entries announce.

use base64::Engine as _;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The bytes of a `resources/read` answer's one content: a text's UTF-8, a blob decoded.
pub fn bytes_of(read: &Value) -> Vec<u8> {
    let content = &read["result"]["contents"][0];
    match content["text"].as_str() {
        Some(text) => text.as_bytes().to_vec(),
        None => base64::engine::general_purpose::STANDARD
            .decode(content["blob"].as_str().expect("text or blob"))
            .expect("a base64 blob"),
    }
}

/// `sha256:` and the 64 lowercase hex digits of `bytes`' SHA-256, as skill entries write it.
pub fn sha256(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}
