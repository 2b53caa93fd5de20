//! `tools/list`, `prompts/list`, `resources/list` and `resources/templates/list`: pages of
//! the merged catalog, or of the caller's team's view, serialized once per catalog (or view)
//! generation.

use manifold_catalog::Kind;
use manifold_protocol::Params;

use crate::context::Context;
use crate::error::RouteError;
use crate::router::Router;

impl Router {
    pub(in crate::router) fn list(&self, ctx: Context, method: &str, params: &Params<'_>) {
        let kind = match method {
            "tools/list" => Kind::Tools,
            "prompts/list" => Kind::Prompts,
            "resources/list" => Kind::Resources,
            _ => Kind::ResourceTemplates,
        };
        let catalog = self.hub.catalog();
        let page = match ctx.caller.restricted() {
            // Pages of a team's view are serialized once per view, like the catalog's.
            Some(team) => team
                .view(&catalog)
                .listing(kind)
                .page(params.cursor.as_deref())
                .map(|body| ctx.reply(body)),
            None => catalog
                .listing(kind)
                .page(params.cursor.as_deref())
                .map(|body| ctx.reply(body)),
        };
        if page.is_err() {
            ctx.fail(&RouteError::BadCursor);
        }
    }
}
