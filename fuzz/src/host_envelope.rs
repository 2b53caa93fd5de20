//! `Envelope::decode_host`, the strict decoder of host messages: everything the upstream
//! decoder promises, and on top of that a breach of I-JSON is reported exactly when the
//! text is not I-JSON by an independent reading (serde_json with duplicate names and depth
//! checked), placed inside `params` or the `id` only when that member itself breaks the
//! rules; and it agrees with the upstream decoder on every field.

use manifold_protocol::envelope::{Envelope, Place};

use crate::json;
use crate::upstream_envelope::{agrees_with_serde, fields_match, writes_back};

pub fn check(data: &[u8]) {
    let decoded = Envelope::decode_host(data);
    agrees_with_serde(data, &decoded, true);
    let Ok(env) = &decoded else { return };
    let text = String::from_utf8_lossy(data);
    fields_match(&text, env);
    writes_back(env);
    breach_is_real(&text, env);
    same_as_upstream_decoder(data, env);
}

fn breach_is_real(text: &str, env: &Envelope<'_>) {
    match env.violation() {
        None => assert!(json::is_ijson(text, 0), "an I-JSON breach went unreported"),
        Some((v, place)) => {
            assert!(!json::is_ijson(text, 0), "{v} reported in I-JSON");
            assert!(v.at <= text.len(), "{v} lies past the end");
            let member = match place {
                Place::Params => env.params,
                Place::Id => env.id,
                Place::Elsewhere => None,
            };
            if let Some(member) = member {
                assert!(!json::is_ijson(member, 1), "{v} placed in {place:?}");
            }
        }
    }
}

fn same_as_upstream_decoder(data: &[u8], env: &Envelope<'_>) {
    match Envelope::decode(data) {
        Ok(plain) => {
            assert_eq!(plain.id, env.id);
            assert_eq!(plain.method, env.method);
            assert_eq!(plain.jsonrpc, env.jsonrpc);
            assert_eq!(plain.params, env.params);
            assert_eq!(plain.result, env.result);
            assert_eq!(plain.error, env.error);
            assert_eq!(plain.kind(), env.kind());
        }
        // Only nesting the grammar scan will not recurse into is read further by the host
        // decoder, which must then report it.
        Err(e) => assert!(
            env.violation().is_some(),
            "the upstream decoder refused it ({e}), the host decoder saw no breach"
        ),
    }
}
