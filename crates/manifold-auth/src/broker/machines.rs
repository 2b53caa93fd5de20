//! Tokens obtained without a browser: client credentials (with a secret or
//! `private_key_jwt`), token exchange (RFC 8693), and the identity assertion grant
//! (an ID-JAG from the identity provider, redeemed with the JWT-bearer grant).

use manifold_config::{
    ClientCredentialsSettings, IdentityAssertionSettings, Secret, TokenExchangeSettings,
    UpstreamAuth,
};

use super::inner::{failed, Inner, Upstream};
use super::CredentialError;
use crate::oauth::client::{secret_method, AuthMethod, ClientIdentity};
use crate::oauth::discovery::AuthServerMetadata;
use crate::oauth::token::{self, Endpoint, Exchange, Keep};
use crate::store::Grant;

/// What an identity assertion is asked for as (draft enterprise-managed authorization).
const ID_JAG: &str = "urn:ietf:params:oauth:token-type:id-jag";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

fn identity(id: &str, secret: Option<&Secret>, metadata: &AuthServerMetadata) -> ClientIdentity {
    let secret = secret.map(|s| s.expose().to_owned());
    ClientIdentity {
        client_id: id.to_owned(),
        method: secret_method(metadata, secret.is_some()),
        client_secret: secret,
    }
}

/// A server whose metadata is unknown (an endpoint given by the operator): RFC 8414's default
/// method, `client_secret_basic`.
fn unknown_server() -> AuthServerMetadata {
    AuthServerMetadata::default()
}

impl Inner {
    pub(super) async fn obtain(
        &self,
        key: &str,
        upstream: &Upstream,
        subject: Option<&str>,
        scopes: Option<&[String]>,
    ) -> Result<Grant, CredentialError> {
        match &upstream.auth {
            UpstreamAuth::ClientCredentials(cc) => {
                self.client_credentials(key, upstream, cc, scopes).await
            }
            UpstreamAuth::TokenExchange(te) => {
                self.token_exchange(key, upstream, te, subject.unwrap_or_default(), scopes)
                    .await
            }
            UpstreamAuth::IdentityAssertion(ia) => {
                self.identity_assertion(key, upstream, ia, subject.unwrap_or_default(), scopes)
                    .await
            }
            UpstreamAuth::OAuth(_) => Err(CredentialError::Refused {
                reason: format!("{key:?} needs a browser authorization"),
            }),
        }
    }

    async fn client_credentials(
        &self,
        key: &str,
        upstream: &Upstream,
        cc: &ClientCredentialsSettings,
        scopes: Option<&[String]>,
    ) -> Result<Grant, CredentialError> {
        let (endpoint, resource, metadata, issuer, found_scopes) = match &cc.token_endpoint {
            Some(endpoint) => (
                endpoint.clone(),
                upstream.url.clone(),
                unknown_server(),
                None,
                None,
            ),
            None => {
                let found = self.discovery(key, upstream, None).await?;
                let endpoint = found
                    .token_endpoint()
                    .map_err(|e| failed(key, e))?
                    .to_owned();
                let challenged = self.challenge(key).and_then(|c| c.scopes);
                let scopes = challenged.or_else(|| found.resource_scopes.clone());
                (
                    endpoint,
                    found.resource.clone(),
                    found.metadata.clone(),
                    Some(found.issuer.clone()),
                    scopes,
                )
            }
        };
        let mut client = identity(&cc.client_id, cc.client_secret.as_ref(), &metadata);
        if cc.signing_key.is_some() {
            client.method = AuthMethod::PrivateKeyJwt;
        }
        let asked: Vec<String> = scopes
            .map(<[String]>::to_vec)
            .or_else(|| cc.scopes.clone())
            .or(found_scopes)
            .unwrap_or_default();
        let answer = token::request(
            &self.http,
            &Endpoint {
                url: &endpoint,
                client: Some(&client),
                key: cc.signing_key.as_ref(),
                issuer: issuer.as_deref(),
            },
            token::client_credentials_form(&asked, &resource),
        )
        .await
        .map_err(|e| failed(key, e))?;
        Ok(token::into_grant(
            answer,
            &Keep {
                asked: &asked,
                issuer: issuer.as_deref(),
                client_id: Some(&cc.client_id),
                principal: "shared",
                previous_refresh: None,
            },
        ))
    }

    async fn token_exchange(
        &self,
        key: &str,
        upstream: &Upstream,
        te: &TokenExchangeSettings,
        subject: &str,
        scopes: Option<&[String]>,
    ) -> Result<Grant, CredentialError> {
        let client = te
            .client_id
            .as_deref()
            .map(|id| identity(id, te.client_secret.as_ref(), &unknown_server()));
        let asked: Vec<String> = scopes
            .map(<[String]>::to_vec)
            .or_else(|| te.scopes.clone())
            .unwrap_or_default();
        let resource = te.resource.clone().unwrap_or_else(|| upstream.url.clone());
        let form = token::exchange_form(&Exchange {
            subject_token: subject,
            subject_type: &te.subject_token_type,
            requested: Some(ACCESS_TOKEN),
            audience: te.audience.as_deref(),
            resource: Some(&resource),
            scopes: &asked,
        });
        let answer = token::request(
            &self.http,
            &Endpoint {
                url: &te.token_endpoint,
                client: client.as_ref(),
                key: None,
                issuer: None,
            },
            form,
        )
        .await
        .map_err(|e| failed(key, e))?;
        Ok(token::into_grant(
            answer,
            &Keep {
                asked: &asked,
                issuer: None,
                client_id: te.client_id.as_deref(),
                principal: "",
                previous_refresh: None,
            },
        ))
    }

    async fn identity_assertion(
        &self,
        key: &str,
        upstream: &Upstream,
        ia: &IdentityAssertionSettings,
        subject: &str,
        scopes: Option<&[String]>,
    ) -> Result<Grant, CredentialError> {
        let found = self
            .discovery(key, upstream, ia.authorization_server.as_deref())
            .await?;
        let asked: Vec<String> = scopes
            .map(<[String]>::to_vec)
            .or_else(|| ia.scopes.clone())
            .unwrap_or_default();
        // First the identity provider: the caller's identity token for an ID-JAG meant for
        // the upstream's authorization server and resource.
        let idp_client = ia
            .idp_client_id
            .as_deref()
            .map(|id| identity(id, ia.idp_client_secret.as_ref(), &unknown_server()));
        let form = token::exchange_form(&Exchange {
            subject_token: subject,
            subject_type: &ia.subject_token_type,
            requested: Some(ID_JAG),
            audience: Some(&found.issuer),
            resource: Some(&found.resource),
            scopes: &asked,
        });
        let jag = token::request(
            &self.http,
            &Endpoint {
                url: &ia.idp_token_endpoint,
                client: idp_client.as_ref(),
                key: None,
                issuer: None,
            },
            form,
        )
        .await
        .map_err(|e| failed(key, e))?;
        // Then the authorization server: the ID-JAG redeemed with the JWT-bearer grant.
        let client = identity(&ia.client_id, ia.client_secret.as_ref(), &found.metadata);
        let endpoint = found.token_endpoint().map_err(|e| failed(key, e))?;
        let answer = token::request(
            &self.http,
            &Endpoint {
                url: endpoint,
                client: Some(&client),
                key: None,
                issuer: Some(&found.issuer),
            },
            token::jwt_bearer_form(&jag.access_token, &asked, &found.resource),
        )
        .await
        .map_err(|e| failed(key, e))?;
        Ok(token::into_grant(
            answer,
            &Keep {
                asked: &asked,
                issuer: Some(&found.issuer),
                client_id: Some(&ia.client_id),
                principal: "",
                previous_refresh: None,
            },
        ))
    }
}
