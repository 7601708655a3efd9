//! Cross-origin requests from browsers: off unless origins are configured. A page from an
//! allowed origin may call the API (its preflight is answered, the answers name the origin
//! and expose our headers); any other origin gets no CORS headers, so the browser keeps the
//! answer from the page, and its preflight is a 403 that says why.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ServeError;

/// Which browser origins may call the API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CorsOrigins {
    /// None (the default): browsers may not read the answers of another origin's page.
    #[default]
    Off,
    /// These origins exactly (`scheme://host[:port]`, as browsers send them).
    Only(Vec<String>),
    /// Any origin (for APIs whose keys are not secrets a page could leak).
    Any,
}

impl CorsOrigins {
    /// From configured values: empty is off, `"*"` alone is any, else the exact origins;
    /// an origin that is not `http(s)://host[:port]` without a path is refused.
    pub fn parse(values: &[String]) -> Result<CorsOrigins, String> {
        if values.is_empty() {
            return Ok(CorsOrigins::Off);
        }
        if values.iter().any(|v| v == "*") {
            if values.len() > 1 {
                return Err("\"*\" allows every origin and cannot be listed with others".into());
            }
            return Ok(CorsOrigins::Any);
        }
        for value in values {
            let rest = value
                .strip_prefix("https://")
                .or_else(|| value.strip_prefix("http://"))
                .ok_or_else(|| format!("{value:?} is not an origin (http:// or https://)"))?;
            if rest.is_empty()
                || rest.contains('/')
                || !rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
            {
                return Err(format!(
                    "{value:?} is not an origin: scheme://host[:port], no path"
                ));
            }
        }
        Ok(CorsOrigins::Only(values.to_vec()))
    }

    fn allows(&self, origin: &str) -> bool {
        match self {
            CorsOrigins::Off => false,
            CorsOrigins::Any => true,
            CorsOrigins::Only(origins) => origins.iter().any(|o| o == origin),
        }
    }
}

/// What the middleware needs: the origins and the headers a page may send.
pub(crate) struct Cors {
    pub(crate) origins: CorsOrigins,
    /// `authorization, content-type, x-session-id, idempotency-key, x-request-id` and each
    /// trusted front end's user and chat headers.
    pub(crate) allow_headers: HeaderValue,
}

const EXPOSED: &str =
    "x-request-id, x-session-id, x-nanobot-history, x-nanobot-replayed, retry-after";

pub(crate) async fn layer(State(cors): State<Arc<Cors>>, request: Request, next: Next) -> Response {
    if cors.origins == CorsOrigins::Off {
        return next.run(request).await;
    }
    let origin = request.headers().get(header::ORIGIN).cloned();
    let allowed = origin
        .as_ref()
        .and_then(|o| o.to_str().ok())
        .is_some_and(|o| cors.origins.allows(o));
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        if !allowed {
            let mut refused = ServeError::Forbidden(
                "this origin may not call the API (serve.cors_origins)".into(),
            )
            .into_response();
            refused
                .headers_mut()
                .insert(header::VARY, HeaderValue::from_static("origin"));
            return refused;
        }
        let mut response = StatusCode::NO_CONTENT.into_response();
        let headers = response.headers_mut();
        allow(headers, origin);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            cors.allow_headers.clone(),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        return response;
    }
    let mut response = next.run(request).await;
    if allowed {
        allow(response.headers_mut(), origin);
        response.headers_mut().insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED),
        );
    } else {
        response
            .headers_mut()
            .insert(header::VARY, HeaderValue::from_static("origin"));
    }
    response
}

fn allow(headers: &mut HeaderMap, origin: Option<HeaderValue>) {
    if let Some(origin) = origin {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    }
    headers.insert(header::VARY, HeaderValue::from_static("origin"));
}
