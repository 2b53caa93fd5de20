//! Multi round-trip requests across the two eras: one mechanism, two directions. Mid-request,
//! an upstream may need its client's input (sampling, elicitation, roots); when the host and
//! the upstream speak different eras, Manifold translates the asking.
//!
//! - `park.rs`: a stateless host's request to a session-era upstream. The upstream's questions
//!   become an `input_required` answer; the request waits, parked, for the host's retry.
//! - `gather.rs`: a session-era host's request to a stateless upstream. The upstream's
//!   `input_required` becomes requests to the host; their answers go back in the retry the
//!   upstream asked for.

pub(super) mod gather;
pub(super) mod park;
