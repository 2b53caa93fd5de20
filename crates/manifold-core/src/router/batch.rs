//! JSON-RPC batches: accepted from hosts that negotiated the one revision that requires
//! servers to accept them (2025-03-26; the next removed them), answered with one array.

use std::sync::Arc;

use manifold_protocol::{scan, Envelope, Kind, MessageError};

use super::{Handled, Router};
use crate::context::{reply_error, Origin};
use crate::outlet::BatchOutlet;

/// The revision whose hosts may send JSON-RPC batches.
const BATCH_VERSION: &str = "2025-03-26";

impl Router {
    /// A JSON-RPC batch: accepted from hosts that negotiated the revision that requires it,
    /// answered with one array; refused for everyone else.
    pub(super) fn batch(self: &Arc<Self>, origin: &Origin, line: &[u8]) -> Handled {
        let version = origin.session.as_ref().and_then(|s| s.version());
        if version != Some(BATCH_VERSION) {
            reply_error(
                &*origin.outlet,
                None,
                origin.era(),
                &MessageError::Batch.into(),
            );
            return Handled::Rejected;
        }
        // The line was checked as JSON by the decoder: it is UTF-8 and an array.
        let elements = std::str::from_utf8(line)
            .ok()
            .and_then(|text| scan::elements(text).ok())
            .unwrap_or_default();
        if elements.is_empty() {
            let e = MessageError::Invalid("an empty batch".into());
            reply_error(&*origin.outlet, None, origin.era(), &e.into());
            return Handled::Rejected;
        }
        let decoded: Vec<_> = elements
            .iter()
            .map(|e| Envelope::decode_host(e.as_bytes()))
            .collect();
        // Every element answers except notifications and responses.
        let expected = decoded
            .iter()
            .filter(|d| match d {
                Ok(env) => !matches!(env.kind(), Ok(Kind::Notification | Kind::Response)),
                Err(_) => true,
            })
            .count();
        let batch = Origin {
            session: origin.session.clone(),
            outlet: Arc::new(BatchOutlet::new(Arc::clone(&origin.outlet), expected)),
            trace: origin.trace.clone(),
            caller: origin.caller.clone(),
            owner: origin.owner,
            asked: None,
        };
        for d in decoded {
            match d {
                Ok(env) if env.method.as_deref() == Some("initialize") && env.id.is_some() => {
                    let e = MessageError::Invalid("initialize must not be part of a batch".into());
                    reply_error(&*batch.outlet, env.id, batch.era(), &e.into());
                }
                Ok(env) => {
                    self.handle_envelope(&batch, &env);
                }
                Err(e) => reply_error(&*batch.outlet, None, batch.era(), &e.into()),
            }
        }
        Handled::Batch(expected)
    }
}
