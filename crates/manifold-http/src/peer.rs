//! Whether a host is still connected while its request waits for an upstream. actix-web
//! notices a host that went away only when it next writes to it, and a stateless request
//! waiting for its JSON answer writes nothing meanwhile; yet in the stateless era a closed
//! response stream cancels the request. So each connection keeps a duplicate of its socket
//! (taken when it is accepted), on which a waiting request peeks now and then: end of stream
//! (or a reset) means the host is gone.

use std::any::Any;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Extensions;
use actix_web::rt::net::TcpStream;
use rustix::net::RecvFlags;
use tokio::sync::watch;

/// A connection's socket, as a request on it sees it.
#[derive(Clone)]
pub(super) struct Peer(Arc<OwnedFd>);

/// Keeps a duplicate of the socket of each accepted connection (plain or TLS) in its data.
pub(super) fn on_connect(conn: &dyn Any, data: &mut Extensions) {
    let tcp = conn.downcast_ref::<TcpStream>().or_else(|| {
        conn.downcast_ref::<actix_tls::accept::rustls_0_23::TlsStream<TcpStream>>()
            .map(|tls| tls.get_ref().0)
    });
    if let Some(fd) = tcp.and_then(|t| t.as_fd().try_clone_to_owned().ok()) {
        data.insert(Peer(Arc::new(fd)));
    }
}

impl Peer {
    /// Resolves once the host closed the connection, looking at each of `ticks` (one clock
    /// shared by every waiting request, so that a request sets no timer of its own). Bytes it
    /// sent meanwhile (a next request) say nothing either way: it is then taken as still there.
    pub(super) async fn closed(&self, mut ticks: watch::Receiver<()>) {
        loop {
            if ticks.changed().await.is_err() {
                // The clock stopped (shutdown): nothing more to look for.
                return std::future::pending().await;
            }
            let mut byte = [0u8; 1];
            match rustix::net::recv(&*self.0, &mut byte, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
                Ok((0, _)) => return,
                Ok(_) => {}
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }
}

/// The clock requests waiting for their answer look for their host on: a tick every `every`,
/// from one task on `runtime`, for as long as a receiver is left.
pub(super) fn clock(runtime: &tokio::runtime::Handle, every: Duration) -> watch::Receiver<()> {
    let (tx, rx) = watch::channel(());
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    rx
}
