//! What every request to an MCP endpoint (`/mcp`, `/sse`, `/messages`) goes through before its
//! handler does its own work, in this order: the browser origin check ([`Origins`], around each
//! route), then the caller's credentials and, where the route asks for it, the
//! `MCP-Protocol-Version` header ([`Admitted`], extracted before the handler runs); last, on the
//! way out, the CORS headers ([`Origins`] again), on the handler's answer and on the refusals of
//! the checks after the origin's alike.
//!
//! The order decides which refusal a request that fails several checks gets, so it is fixed
//! here once: a middleware runs before any extractor, and one extractor makes both of its
//! checks in sequence.

use std::sync::Arc;

use actix_web::body::BoxBody;
use actix_web::dev::{forward_ready, Payload, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::error::InternalError;
use actix_web::{web, Error, FromRequest, HttpRequest, HttpResponse};
use futures::future::{ready, Either, LocalBoxFuture, Map, Ready};
use futures::FutureExt;

use super::{caller_from, check_origin, check_version, cors_headers, AppState};
use manifold_core::policy::Caller;

/// The browser rules of an MCP route: a request from an origin that is not allowed is refused
/// before anything else is looked at, without CORS headers (the page that sent it may not read
/// why); any other response, refusals included, gets the CORS headers its origin needs.
#[derive(Clone)]
pub(super) struct Origins {
    /// `server.allowed_origins`, shared by every route and worker.
    allowed: Arc<[String]>,
}

impl Origins {
    pub(super) fn new(allowed: &[String]) -> Self {
        Self {
            allowed: allowed.into(),
        }
    }
}

impl<S> Transform<S, ServiceRequest> for Origins
where
    S: Service<ServiceRequest, Response = ServiceResponse<BoxBody>, Error = Error>,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = Error;
    type Transform = OriginsService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(OriginsService {
            service,
            allowed: Arc::clone(&self.allowed),
        }))
    }
}

/// [`Origins`] around one route's service.
pub(super) struct OriginsService<S> {
    service: S,
    allowed: Arc<[String]>,
}

/// How a response on its way out gets its CORS headers (a plain function, so that the
/// service's future has a type that can be named and needs no allocation of its own).
type AddCors = fn(Result<ServiceResponse, Error>) -> Result<ServiceResponse, Error>;

impl<S> Service<ServiceRequest> for OriginsService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<BoxBody>, Error = Error>,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = Error;
    type Future = Either<Ready<Result<ServiceResponse, Error>>, Map<S::Future, AddCors>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        if let Err(refusal) = check_origin(req.request(), &self.allowed) {
            return Either::Left(ready(Ok(req.into_response(refusal))));
        }
        Either::Right(self.service.call(req).map(add_cors as AddCors))
    }
}

fn add_cors(response: Result<ServiceResponse, Error>) -> Result<ServiceResponse, Error> {
    response.map(|mut r| {
        let origin = r.request().headers().get(actix_web::http::header::ORIGIN);
        if let Some(origin) = origin.cloned() {
            cors_headers(r.response_mut().headers_mut(), origin);
        }
        r
    })
}

/// A request admitted to an MCP endpoint: its caller authenticated (anonymous when hosts do
/// not authenticate) and, when `VERSION` is true, its `MCP-Protocol-Version` (if it sends one)
/// a revision Manifold speaks. Authentication comes first: a request that fails both gets 401.
///
/// A refusal is the extractor's error; it carries the exact response to send, which
/// [`Origins`] then gives its CORS headers as it does every other response.
pub(super) struct Admitted<const VERSION: bool> {
    pub caller: Arc<Caller>,
}

/// Streamable HTTP's POST and GET, which check the protocol version.
pub(super) type Versioned = Admitted<true>;

/// Streamable HTTP's DELETE, which has never checked the version (a host may end its session
/// whatever it sends), and the HTTP+SSE transport, whose hosts predate the header.
pub(super) type Unversioned = Admitted<false>;

impl<const VERSION: bool> Admitted<VERSION> {
    /// The version check, once the caller is known, and the refusal as an error.
    fn finish(req: &HttpRequest, caller: Result<Arc<Caller>, HttpResponse>) -> Result<Self, Error> {
        let caller = caller.map_err(refused)?;
        if VERSION {
            check_version(req.headers()).map_err(refused)?;
        }
        Ok(Self { caller })
    }
}

/// A refusal as an extractor error that answers with exactly `response`.
fn refused(response: HttpResponse) -> Error {
    InternalError::from_response("request refused", response).into()
}

impl<const VERSION: bool> FromRequest for Admitted<VERSION> {
    type Error = Error;
    // Credentials that can be checked at once (none configured, an API key, a JWT whose key
    // is cached) are checked without an allocation; only a JWT whose key must first be
    // fetched waits, in a boxed future.
    type Future = Either<Ready<Result<Self, Error>>, LocalBoxFuture<'static, Result<Self, Error>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let Some(shared) = req.app_data::<web::Data<AppState>>() else {
            // Every MCP route is registered with the shared state; this is never reached.
            return Either::Left(ready(Err(actix_web::error::ErrorInternalServerError(
                "the server's state is missing",
            ))));
        };
        let Some(auth) = shared.auth.get() else {
            return Either::Left(ready(Self::finish(req, Ok(Caller::anonymous()))));
        };
        let auth = &auth.authenticator;
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
        if let Some(verdict) = auth.authenticate_now(header("authorization"), header("x-api-key")) {
            return Either::Left(ready(Self::finish(req, caller_from(req, shared, verdict))));
        }
        let (req, shared, auth) = (req.clone(), shared.clone(), Arc::clone(auth));
        Either::Right(Box::pin(async move {
            let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
            let verdict = auth
                .authenticate(header("authorization"), header("x-api-key"))
                .await;
            Self::finish(&req, caller_from(&req, &shared, verdict))
        }))
    }
}
