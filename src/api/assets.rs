//! `POST /v1/assets` (raw image bytes) and reading an asset back, only to
//! its owner, reviewers and admins. Nothing is served from a public URL.

use crate::assets::ASSET_BYTES_MAX;
use crate::auth::{AnyUser, Authorized};
use crate::error::{Error, Result};
use crate::model::AssetId;
use crate::store::Asset;
use crate::Tollgate;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use serde_json::{json, Value};

pub fn asset_json(a: &Asset) -> Value {
    json!({
        "id": a.id, "content_type": a.content_type, "width": a.width, "height": a.height,
        "bytes": a.bytes, "sha256": a.sha256,
        "created_at": a.created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    })
}

fn asset_id(raw: &str) -> Result<AssetId> {
    raw.parse().map_err(|_| Error::NotFound("asset"))
}

pub async fn upload(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    headers: HeaderMap,
    body: std::result::Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<(StatusCode, Json<Value>)> {
    let bytes = body.map_err(|_| Error::BadRequest {
        status: 413,
        code: "PAYLOAD_TOO_LARGE",
        message: format!("uploads are at most {ASSET_BYTES_MAX} bytes"),
    })?;
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let asset = t.upload_asset(who.user(), declared, bytes).await?;
    Ok((StatusCode::CREATED, Json(asset_json(&asset))))
}

pub async fn show(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let asset = t.visible_asset(who.user(), asset_id(&id)?).await?;
    Ok(Json(asset_json(&asset)))
}

pub async fn content(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Response> {
    let (asset, body) = t.asset_content(who.user(), asset_id(&id)?).await?;
    Ok(super::private_object(&asset.content_type, body))
}
