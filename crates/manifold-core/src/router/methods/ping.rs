//! `ping`: answered at once, before the handshake too (the spec allows it then).

use crate::context::Context;

pub(in crate::router) fn ping(ctx: Context) {
    ctx.reply("{}");
}
