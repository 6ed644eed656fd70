//! `POST /v1/assets` (raw image bytes) and reading an asset back, only to
//! its owner, reviewers and admins. Nothing is served from a public URL.

use crate::model::AssetId;
use crate::usecases::assets::ASSET_BYTES_MAX;
use crate::usecases::auth::{AnyUser, Authorized};
use crate::usecases::error::{Error, Result};
use crate::wire::{AssetObject, ErrorBody};
use crate::Tollgate;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<Tollgate> {
    OpenApiRouter::new()
        // The handler reads the body itself, with its own bound.
        .routes(routes!(upload_asset).layer(DefaultBodyLimit::disable()))
        .routes(routes!(get_asset))
        .routes(routes!(get_asset_content))
}

fn asset_id(raw: &str) -> Result<AssetId> {
    raw.parse().map_err(|_| Error::NotFound("asset"))
}

/// Uploads a photo or mask: typed from its bytes (not its header), at most
/// 20 MB, 40 megapixels and 10,000 px a side. The same bytes twice are the
/// same asset.
#[utoipa::path(
    post, path = "/assets", tag = "assets", operation_id = "upload_asset",
    request_body(content(
        (Vec<u8> = "image/png"), (Vec<u8> = "image/jpeg"), (Vec<u8> = "image/webp"))),
    responses(
        (status = 201, description = "The stored asset.", body = AssetObject,
            links(
                ("GetAsset" = (operation_id = "get_asset", parameters(("id" = "$response.body#/id")))),
                ("AssetContent" = (operation_id = "get_asset_content", parameters(("id" = "$response.body#/id")))),
            )),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 413, description = "Too large, or a decompression bomb.", body = ErrorBody),
        (status = 415, description = "Not PNG, JPEG or WebP, or not what the header says.", body = ErrorBody),
        (status = 422, description = "An image that cannot be decoded.", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED: the caller already sends 3 uploads at once. Retry after the header's seconds.", body = ErrorBody,
            headers(("Retry-After" = String, description = "seconds to wait"))),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn upload_asset(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<(StatusCode, Json<AssetObject>)> {
    let too_large = || Error::BadRequest {
        status: 413,
        code: "PAYLOAD_TOO_LARGE",
        message: format!("uploads are at most {ASSET_BYTES_MAX} bytes"),
    };
    // Declared too large: refused before a byte of the body is read.
    if super::declared_length(&headers) > Some(ASSET_BYTES_MAX) {
        return Err(too_large());
    }
    let _slot = t.begin_upload(who.user()).await?;
    let bytes: Bytes = axum::body::to_bytes(body, ASSET_BYTES_MAX)
        .await
        .map_err(|_| too_large())?;
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let asset = t.upload_asset(who.user(), declared, bytes).await?;
    Ok((StatusCode::CREATED, Json(AssetObject::from(&asset))))
}

/// An asset's record.
#[utoipa::path(
    get, path = "/assets/{id}", tag = "assets", operation_id = "get_asset",
    params(("id" = AssetId, Path, description = "The asset's id.")),
    responses(
        (status = 200, description = "The asset.", body = AssetObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 404, description = "No such asset of yours.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn get_asset(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Json<AssetObject>> {
    let asset = t.visible_asset(who.user(), asset_id(&id)?).await?;
    Ok(Json(AssetObject::from(&asset)))
}

/// An asset's bytes.
#[utoipa::path(
    get, path = "/assets/{id}/content", tag = "assets", operation_id = "get_asset_content",
    params(("id" = AssetId, Path, description = "The asset's id.")),
    responses(
        (status = 200, description = "The bytes.", content(
            (Vec<u8> = "image/png"), (Vec<u8> = "image/jpeg"), (Vec<u8> = "image/webp"))),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 404, description = "No such asset of yours.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn get_asset_content(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Response> {
    let (asset, body) = t.asset_content(who.user(), asset_id(&id)?).await?;
    Ok(super::private_object(
        &asset.content_type,
        &format!("asset-{}", asset.id),
        body,
    ))
}
