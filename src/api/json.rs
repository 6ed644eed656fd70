//! `ApiJson<T>`: axum's `Json` with its rejections in our error shape.
//! Bodies are `deny_unknown_fields` structs, so an unknown field is a 422.

use crate::usecases::error::Error;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::Json;
use serde::de::DeserializeOwned;

pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Error> {
        // A body declared too large is refused before a byte of it is read.
        if super::declared_length(req.headers()) > Some(super::JSON_BODY_BYTES_MAX) {
            return Err(too_large());
        }
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(match rejection {
                JsonRejection::JsonDataError(e) => Error::invalid("body", e.body_text()),
                JsonRejection::JsonSyntaxError(e) => Error::BadRequest {
                    status: 400,
                    code: "MALFORMED_JSON",
                    message: format!("the body is not valid JSON: {}", e.body_text()),
                },
                JsonRejection::MissingJsonContentType(_) => Error::BadRequest {
                    status: 415,
                    code: "UNSUPPORTED_MEDIA_TYPE",
                    message: "send the body as JSON with Content-Type: application/json".into(),
                },
                JsonRejection::BytesRejection(e) if e.status().as_u16() == 413 => too_large(),
                other => Error::BadRequest {
                    status: 400,
                    code: "BAD_REQUEST",
                    message: other.body_text(),
                },
            }),
        }
    }
}

fn too_large() -> Error {
    Error::BadRequest {
        status: 413,
        code: "PAYLOAD_TOO_LARGE",
        message: format!(
            "the body is larger than {} bytes",
            super::JSON_BODY_BYTES_MAX
        ),
    }
}
