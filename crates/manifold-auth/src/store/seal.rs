//! Sealing what a store keeps at rest: AES-256-GCM with the `[credentials]` keys.
//!
//! A sealed value is a version byte, a random 96-bit nonce, then the ciphertext and its tag.
//! The first key seals; every key opens, so that a value sealed before a rotation (`key`
//! moved to `previous_keys`) still opens, and is sealed with the new key when next written.
//! The associated data is where the value is kept (its store key), so that a value copied
//! under another key (another upstream, another owner) does not open.

use manifold_config::SealKey;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use super::{Grant, Owner, StoreError};

/// The format of what [`Sealer::seal`] writes; another first byte is refused.
const VERSION: u8 = 1;
/// Tells these values apart from anything else sealed with the same key.
const DOMAIN: &[u8] = b"manifold-token-store\0";

/// Seals with the first key and opens with any.
pub struct Sealer {
    keys: Vec<LessSafeKey>,
    random: SystemRandom,
}

/// What [`Sealer::open`] found: the value, and whether it was sealed with a key other than
/// the current one (it should be sealed again).
#[derive(Debug)]
pub struct Opened {
    pub value: Vec<u8>,
    pub stale: bool,
}

impl Sealer {
    /// A sealer of `keys` (the current one first). No key: an error, since a store that keeps
    /// anything at rest must seal it.
    pub fn new(keys: &[SealKey]) -> Result<Self, StoreError> {
        if keys.is_empty() {
            return Err(StoreError(
                "a token store that keeps tokens at rest needs [credentials] key".into(),
            ));
        }
        let keys = keys
            .iter()
            .map(|k| {
                UnboundKey::new(&AES_256_GCM, &k.0)
                    .map(LessSafeKey::new)
                    .map_err(|_| StoreError("a [credentials] key is not a 32-byte key".into()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            keys,
            random: SystemRandom::new(),
        })
    }

    /// `value` sealed with the current key, bound to `place` (its store key).
    pub fn seal(&self, place: &[u8], value: &[u8]) -> Result<Vec<u8>, StoreError> {
        let key = self
            .keys
            .first()
            .ok_or_else(|| StoreError("no key to seal tokens with".into()))?;
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| StoreError("no randomness for a nonce".into()))?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + value.len() + AES_256_GCM.tag_len());
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        let mut body = value.to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(associated(place)),
            &mut body,
        )
        .map_err(|_| StoreError("sealing a token failed".into()))?;
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// What [`seal`](Self::seal) sealed under `place`, with any key. A value sealed with an
    /// unknown key, under another place, or altered, is an error (naming neither).
    pub fn open(&self, place: &[u8], sealed: &[u8]) -> Result<Opened, StoreError> {
        let unreadable = || StoreError("a sealed token does not open".into());
        let (&version, rest) = sealed.split_first().ok_or_else(unreadable)?;
        if version != VERSION || rest.len() < NONCE_LEN + AES_256_GCM.tag_len() {
            return Err(unreadable());
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let aad = associated(place);
        for (i, key) in self.keys.iter().enumerate() {
            let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| unreadable())?;
            let mut buffer = body.to_vec();
            if let Ok(value) = key.open_in_place(nonce, Aad::from(&aad), &mut buffer) {
                return Ok(Opened {
                    value: value.to_vec(),
                    stale: i > 0,
                });
            }
        }
        Err(StoreError(
            "a sealed token does not open with the configured keys ([credentials] key, \
             previous_keys), or was altered"
                .into(),
        ))
    }

    /// `grant` as kept for (`upstream`, `owner`): JSON, sealed under its place.
    pub fn seal_grant(
        &self,
        upstream: &str,
        owner: &Owner,
        grant: &Grant,
    ) -> Result<Vec<u8>, StoreError> {
        let json = serde_json::to_vec(grant)
            .map_err(|e| StoreError(format!("a grant could not be written: {e}")))?;
        self.seal(&grant_place(upstream, owner), &json)
    }

    /// The grant [`seal_grant`](Self::seal_grant) kept for (`upstream`, `owner`).
    pub fn open_grant(
        &self,
        upstream: &str,
        owner: &Owner,
        sealed: &[u8],
    ) -> Result<(Grant, bool), StoreError> {
        let opened = self.open(&grant_place(upstream, owner), sealed)?;
        // serde's error could quote part of the value, which holds tokens: not repeated.
        let grant = serde_json::from_slice(&opened.value)
            .map_err(|_| StoreError("a sealed grant opened but is not a grant".into()))?;
        Ok((grant, opened.stale))
    }
}

/// Where the grant of (`upstream`, `owner`) is kept, as its seal binds it.
pub fn grant_place(upstream: &str, owner: &Owner) -> Vec<u8> {
    format!("grant\0{upstream}\0{}", owner.hex()).into_bytes()
}

/// Where a once-value is kept, as its seal binds it.
pub fn once_place(key: &str) -> Vec<u8> {
    format!("once\0{key}").into_bytes()
}

fn associated(place: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(DOMAIN.len() + place.len());
    aad.extend_from_slice(DOMAIN);
    aad.extend_from_slice(place);
    aad
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn key(byte: u8) -> SealKey {
        SealKey([byte; 32])
    }

    pub(crate) fn grant(token: &str) -> Grant {
        Grant {
            access_token: token.into(),
            token_type: "Bearer".into(),
            expires_at_ms: Some(1_000),
            refresh_token: Some(format!("refresh-{token}")),
            scopes: vec!["repo".into()],
            issuer: Some("https://as.example".into()),
            client_id: Some("manifold".into()),
            principal: "eng/key:alice".into(),
            obtained_at_ms: 1,
        }
    }

    #[test]
    fn a_sealed_grant_opens_to_what_was_sealed_and_hides_it() {
        let sealer = Sealer::new(&[key(1)]).unwrap();
        let owner = Owner::caller("eng", "key:alice");
        let sealed = sealer
            .seal_grant("forge", &owner, &grant("tok-123"))
            .unwrap();
        let text = String::from_utf8_lossy(&sealed);
        assert!(!text.contains("tok-123") && !text.contains("refresh"));
        let (opened, stale) = sealer.open_grant("forge", &owner, &sealed).unwrap();
        assert_eq!((opened, stale), (grant("tok-123"), false));
        // A fresh nonce each time: the same grant never seals to the same bytes.
        let again = sealer
            .seal_grant("forge", &owner, &grant("tok-123"))
            .unwrap();
        assert_ne!(sealed, again);
    }

    #[test]
    fn a_value_sealed_with_a_previous_key_opens_and_is_stale() {
        let old = Sealer::new(&[key(1)]).unwrap();
        let sealed = old.seal(b"p", b"value").unwrap();
        let rotated = Sealer::new(&[key(2), key(1)]).unwrap();
        let opened = rotated.open(b"p", &sealed).unwrap();
        assert_eq!(
            (opened.value.as_slice(), opened.stale),
            (&b"value"[..], true)
        );
        let resealed = rotated.seal(b"p", &opened.value).unwrap();
        assert!(!rotated.open(b"p", &resealed).unwrap().stale);
        // Once the old key is dropped, the old value no longer opens; the new one does.
        let dropped = Sealer::new(&[key(2)]).unwrap();
        assert!(dropped.open(b"p", &sealed).is_err());
        assert!(dropped.open(b"p", &resealed).is_ok());
    }

    #[test]
    fn altered_or_moved_values_are_refused_without_naming_a_secret() {
        let sealer = Sealer::new(&[key(1)]).unwrap();
        let alice = Owner::caller("eng", "key:alice");
        let bob = Owner::caller("eng", "key:bob");
        let sealed = sealer.seal_grant("forge", &alice, &grant("tok-9")).unwrap();
        let moved = [
            sealer.open_grant("forge", &bob, &sealed).err(),
            sealer.open_grant("wiki", &alice, &sealed).err(),
        ];
        for e in moved {
            let e = e.unwrap().to_string();
            assert!(e.contains("does not open") && !e.contains("tok-9"), "{e}");
        }
        for i in 0..sealed.len() {
            let mut altered = sealed.clone();
            altered[i] ^= 0x40;
            assert!(sealer.open_grant("forge", &alice, &altered).is_err());
        }
        assert!(sealer.open(b"p", &[]).is_err());
        assert!(sealer.open(b"p", &sealed[..10]).is_err());
    }

    #[test]
    fn no_key_is_a_clear_error() {
        let e = Sealer::new(&[]).err().unwrap().to_string();
        assert!(e.contains("[credentials] key"), "{e}");
    }
}
