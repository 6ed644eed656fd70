//! The one place an engine error becomes an HTTP response:
//! `{"error": {"code", "message", "details"}}`. 500s are logged with their
//! cause and answered without it.

use crate::usecases::error::Error;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// The error body for `e`, shared with the app's server functions.
pub fn error_body(e: &Error) -> Value {
    let details = match e {
        Error::Invalid { fields, .. } => json!({ "fields": fields }),
        Error::RateLimited { retry_after_s } | Error::ShareUsed { retry_after_s } => {
            json!({ "retry_after_s": retry_after_s })
        }
        _ => json!({}),
    };
    json!({ "error": { "code": e.code(), "message": e.public_message(), "details": details } })
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        if let Error::Internal(cause) = &self {
            tracing::error!(%cause, "internal error");
        }
        let status =
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(error_body(&self))).into_response();
        if let Error::RateLimited { retry_after_s } | Error::ShareUsed { retry_after_s } = self {
            if let Ok(v) = HeaderValue::from_str(&retry_after_s.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        response
    }
}

pub async fn not_found() -> Error {
    Error::NotFound("route")
}

pub async fn method_not_allowed() -> Error {
    Error::BadRequest {
        status: 405,
        code: "METHOD_NOT_ALLOWED",
        message: "this route does not accept that method".into(),
    }
}
