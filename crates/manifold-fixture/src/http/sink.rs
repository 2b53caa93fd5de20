//! The ways back to an HTTP client: the POST that carried a request (Streamable HTTP), or
//! the session's one stream (HTTP+SSE).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;

use super::session::Session;
use crate::exchange::Sink;

/// How the POST handler answers: with the first thing the request sent.
pub enum First {
    /// The answer came first: a JSON response.
    Answer(Bytes),
    /// Something came before the answer: an SSE stream, ending with the answer.
    Stream(UnboundedReceiver<Bytes>),
}

/// One Streamable HTTP request's way back: its POST's response. Dropped without an answer
/// (a cancelled call), it ends the stream, or lets the handler answer 202.
pub struct PostSink {
    session: Arc<Session>,
    state: Mutex<Post>,
}

enum Post {
    /// Nothing sent yet: the handler waits to learn whether to answer JSON or SSE.
    Waiting(oneshot::Sender<First>),
    /// Messages go to this stream of the session.
    Streaming(u64),
    /// The answer was sent: anything more goes to the session's own stream.
    Answered,
}

impl PostSink {
    pub fn new(session: Arc<Session>) -> (Self, oneshot::Receiver<First>) {
        let (tx, rx) = oneshot::channel();
        let sink = Self {
            session,
            state: Mutex::new(Post::Waiting(tx)),
        };
        (sink, rx)
    }

    fn lock(&self) -> MutexGuard<'_, Post> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The request's stream, opened (and handed to the handler) if this is the first
    /// message; None once the answer was sent.
    fn stream(&self, post: &mut Post) -> Option<u64> {
        match post {
            Post::Streaming(id) => Some(*id),
            Post::Answered => None,
            Post::Waiting(_) => {
                let (id, events) = self.session.open();
                if let Post::Waiting(tx) = std::mem::replace(post, Post::Streaming(id)) {
                    // The handler is gone only if its client went away; nothing to do then.
                    let _ = tx.send(First::Stream(events));
                }
                Some(id)
            }
        }
    }
}

impl Sink for PostSink {
    fn send(&self, line: Vec<u8>) {
        let mut post = self.lock();
        let stream = self.stream(&mut post).unwrap_or(0);
        self.session.push(stream, &line);
    }

    fn answer(&self, line: Vec<u8>) {
        let mut post = self.lock();
        match std::mem::replace(&mut *post, Post::Answered) {
            Post::Waiting(tx) => {
                let _ = tx.send(First::Answer(Bytes::from(line)));
            }
            Post::Streaming(id) => {
                self.session.push(id, &line);
                self.session.finish(id);
            }
            Post::Answered => self.session.push(0, &line),
        }
    }

    fn close_stream(&self) {
        let mut post = self.lock();
        if let Some(id) = self.stream(&mut post) {
            self.session.detach(id);
        }
    }

    fn client(&self) -> &str {
        &self.session.id
    }
}

impl Drop for PostSink {
    fn drop(&mut self) {
        let post = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Post::Streaming(id) = post {
            self.session.finish(*id);
        }
    }
}

/// An HTTP+SSE session's way back: everything goes on its one stream. Also the sink of
/// Streamable HTTP notifications and responses, which never send anything.
pub struct SessionSink(pub Arc<Session>);

impl Sink for SessionSink {
    fn send(&self, line: Vec<u8>) {
        self.0.push(0, &line);
    }

    fn answer(&self, line: Vec<u8>) {
        self.0.push(0, &line);
    }

    fn client(&self) -> &str {
        &self.0.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::session::{Kind, Sessions};

    #[test]
    fn an_answer_first_is_plain_json() {
        let session = Sessions::new(false).create(Kind::Streamable, true);
        let (sink, mut first) = PostSink::new(Arc::clone(&session));
        sink.answer(b"{\"id\":1}".to_vec());
        let Ok(First::Answer(body)) = first.try_recv() else {
            panic!("expected a JSON answer");
        };
        assert_eq!(&body[..], b"{\"id\":1}");
        // Later messages go to the session's own stream.
        let mut own = session.listen(None);
        sink.send(b"{}".to_vec());
        assert!(own.try_recv().is_ok());
    }

    #[test]
    fn a_notification_first_opens_a_stream_that_ends_with_the_answer() {
        let session = Sessions::new(false).create(Kind::Streamable, false);
        let (sink, mut first) = PostSink::new(Arc::clone(&session));
        sink.send(b"{\"n\":1}".to_vec());
        let Ok(First::Stream(mut events)) = first.try_recv() else {
            panic!("expected a stream");
        };
        sink.answer(b"{\"id\":1}".to_vec());
        assert_eq!(
            &events.try_recv().unwrap()[..],
            b"id: 1-1\ndata: {\"n\":1}\n\n"
        );
        assert_eq!(
            &events.try_recv().unwrap()[..],
            b"id: 1-2\ndata: {\"id\":1}\n\n"
        );
        assert!(events.try_recv().is_err(), "the stream ended");
    }

    #[test]
    fn dropped_unanswered_ends_the_exchange() {
        let session = Sessions::new(false).create(Kind::Streamable, false);
        let (sink, mut first) = PostSink::new(Arc::clone(&session));
        drop(sink);
        assert!(first.try_recv().is_err());
    }
}
