//! The HTTP bearer token: where it comes from, and the middleware that checks it in constant
//! time so that response timing does not leak how much of a guess was right.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::ServeError;

/// Environment variable that holds the token when no `--token-file` is given.
pub const TOKEN_ENV: &str = "QUORUMLOCK_MCP_TOKEN";

/// A secret every HTTP request except `/healthz` must present as `Authorization: Bearer …`.
#[derive(Clone)]
pub struct BearerToken(Arc<[u8]>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

impl BearerToken {
    /// The environment variable [`BearerToken::load`] reads without a file.
    pub const ENV: &'static str = TOKEN_ENV;

    /// A token from its text; surrounding whitespace (a trailing newline in a file) is dropped.
    pub fn new(secret: &str) -> Result<BearerToken, ServeError> {
        let secret = secret.trim();
        if secret.is_empty() {
            return Err(ServeError::EmptyToken);
        }
        Ok(BearerToken(Arc::from(secret.as_bytes())))
    }

    /// The token from `file`, else from [`TOKEN_ENV`], else none.
    pub fn load(file: Option<&Path>) -> Result<Option<BearerToken>, ServeError> {
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ServeError::TokenFile {
                path: path.to_path_buf(),
                source,
            })?;
            return BearerToken::new(&text).map(Some);
        }
        match std::env::var(TOKEN_ENV) {
            Ok(text) => BearerToken::new(&text).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// True when the `Authorization` header carries this token.
    pub fn admits(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(presented) = authorization.and_then(|value| bearer_credentials(value.as_bytes()))
        else {
            return false;
        };
        bool::from(presented.ct_eq(&self.0))
    }
}

/// The credentials of a `Bearer` authorization (the scheme is case-insensitive).
fn bearer_credentials(header: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = header.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    Some(rest.trim_ascii())
}

/// Middleware: lets a request through only with the right token (when one is configured).
pub async fn require_bearer(
    State(token): State<Option<BearerToken>>,
    request: Request,
    next: Next,
) -> Response {
    match &token {
        Some(token) if !token.admits(request.headers().get(header::AUTHORIZATION)) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"quorumlock\"")],
            "missing or wrong bearer token: send `Authorization: Bearer <token>` with the server's QUORUMLOCK_MCP_TOKEN\n",
        )
            .into_response(),
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let token = BearerToken::new(" s3cret-token\n").ok();
        let admits = |value: &str| {
            token
                .as_ref()
                .is_some_and(|t| t.admits(HeaderValue::from_str(value).ok().as_ref()))
        };
        assert!(admits("Bearer s3cret-token"));
        assert!(admits("bearer s3cret-token"));
        assert!(!admits("Bearer s3cret-toke"));
        assert!(!admits("Bearer s3cret-token2"));
        assert!(!admits("Basic s3cret-token"));
        assert!(!admits("s3cret-token"));
        assert!(!admits(""));
        assert!(token.as_ref().is_some_and(|t| !t.admits(None)));
        assert!(BearerToken::new("  \n").is_err());
    }
}
