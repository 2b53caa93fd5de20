//! A lock guard that counts itself (in debug builds), so that the rule below is checked where
//! hosts are written to: the pending tables' locks, and the server's locks on a request's
//! host side.
//!
//! Invariant: no counted guard is alive on a thread while that thread writes to a host (an
//! [`Exchange`](super::Exchange) call here, an outlet write in the server).

use std::ops::{Deref, DerefMut};
use std::sync::MutexGuard;

#[cfg(debug_assertions)]
thread_local! {
    /// Guards of pending tables alive on this thread.
    static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counted guards alive on this thread (always 0 in release builds, which do not count).
pub fn guards_held() -> usize {
    #[cfg(debug_assertions)]
    {
        HELD.with(std::cell::Cell::get)
    }
    #[cfg(not(debug_assertions))]
    {
        0
    }
}

/// A counted lock guard.
pub struct TableGuard<'a, T> {
    inner: MutexGuard<'a, T>,
}

impl<'a, T> TableGuard<'a, T> {
    pub fn new(inner: MutexGuard<'a, T>) -> Self {
        #[cfg(debug_assertions)]
        HELD.with(|held| held.set(held.get() + 1));
        Self { inner }
    }
}

impl<T> Drop for TableGuard<'_, T> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        HELD.with(|held| held.set(held.get().saturating_sub(1)));
    }
}

impl<T> Deref for TableGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for TableGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}
