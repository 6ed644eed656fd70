//! Uploads: the type is sniffed from the bytes (never trusted from the
//! header), size and pixel limits are checked from the header before the
//! image is decoded (a decompression bomb is refused), and the original is
//! stored privately under a content-addressed key.

use crate::model::{AssetId, Role, UserId};
use crate::storage::{NewObjectMeta, ObjectBody, ObjectKey, PutOutcome};
use crate::store::{Asset, User};
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use bytes::Bytes;
use chrono::Utc;
use image::{ImageFormat, ImageReader};
use sha2::{Digest, Sha256};
use std::io::Cursor;

/// Largest upload, in bytes.
pub const ASSET_BYTES_MAX: usize = 20 * 1024 * 1024;
/// Largest image, in pixels, and on either side: what any decode takes.
pub const ASSET_PIXELS_MAX: u64 = crate::providers::local::IMAGE_PIXELS_MAX;
pub const ASSET_SIDE_MAX: u32 = crate::providers::local::IMAGE_SIDE_MAX;

/// The formats we accept, by what the bytes say they are.
fn sniff(bytes: &[u8]) -> Option<(ImageFormat, &'static str)> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some((ImageFormat::Png, "image/png"))
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some((ImageFormat::Jpeg, "image/jpeg"))
    } else if bytes.len() >= 12 && &bytes[0..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some((ImageFormat::WebP, "image/webp"))
    } else {
        None
    }
}

fn unsupported(message: impl Into<String>) -> Error {
    Error::BadRequest {
        status: 415,
        code: "UNSUPPORTED_MEDIA_TYPE",
        message: message.into(),
    }
}

fn undecodable(message: impl Into<String>) -> Error {
    Error::BadRequest {
        status: 422,
        code: "UNDECODABLE_IMAGE",
        message: message.into(),
    }
}

/// Checks an upload and returns (content type, width, height). Runs on a
/// blocking thread: decoding is CPU work.
pub(crate) fn inspect(bytes: &[u8], declared: Option<&str>) -> Result<(&'static str, u32, u32)> {
    let declared = declared.map(|d| {
        d.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    let accepted = ["image/png", "image/jpeg", "image/webp"];
    match declared.as_deref() {
        Some(d) if accepted.contains(&d) => {}
        _ => {
            return Err(unsupported(
                "send the image with Content-Type image/png, image/jpeg or image/webp",
            ))
        }
    }
    if bytes.is_empty() {
        return Err(undecodable("the body is empty"));
    }
    let (format, sniffed) =
        sniff(bytes).ok_or_else(|| unsupported("the bytes are not a PNG, JPEG or WebP image"))?;
    if declared.as_deref() != Some(sniffed) {
        return Err(unsupported(format!(
            "the bytes are {sniffed} but the Content-Type says {}",
            declared.unwrap_or_default()
        )));
    }
    let limits = crate::providers::local::decode_limits();

    // The header first: a bomb is refused before a pixel is decoded.
    let (w, h) = ImageReader::with_format(Cursor::new(bytes), format)
        .into_dimensions()
        .map_err(|e| undecodable(format!("cannot read the image header: {e}")))?;
    if w == 0 || h == 0 {
        return Err(undecodable("the image has no pixels"));
    }
    if w > ASSET_SIDE_MAX || h > ASSET_SIDE_MAX || u64::from(w) * u64::from(h) > ASSET_PIXELS_MAX {
        return Err(Error::BadRequest {
            status: 413,
            code: "IMAGE_TOO_LARGE",
            message: format!(
                "the image is {w}×{h}; at most {ASSET_PIXELS_MAX} pixels and {ASSET_SIDE_MAX} on a side"
            ),
        });
    }
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(limits);
    reader
        .decode()
        .map_err(|e| undecodable(format!("the image cannot be decoded: {e}")))?;
    Ok((sniffed, w, h))
}

impl Tollgate {
    /// A place to receive one upload of `user`'s, taken before its body is
    /// read: 429 when they already send a few, a wait when the node reads
    /// many bodies at once (issue 29, 9). Held until the upload is stored.
    pub async fn begin_upload(
        &self,
        user: &User,
    ) -> Result<crate::usecases::limits::UploadSlot<'_>> {
        self.inner_upload_slots().begin(user.id).await
    }

    /// Stores an upload for `user`. The same bytes from the same person are
    /// the same asset.
    pub async fn upload_asset(
        &self,
        user: &User,
        declared: Option<&str>,
        bytes: Bytes,
    ) -> Result<Asset> {
        if bytes.len() > ASSET_BYTES_MAX {
            return Err(Error::BadRequest {
                status: 413,
                code: "PAYLOAD_TOO_LARGE",
                message: format!("uploads are at most {ASSET_BYTES_MAX} bytes"),
            });
        }
        // A person's uploads are bounded as a whole, too.
        let quota = self.config().storage_quota_bytes;
        let used = self.store().asset_bytes_of(user.id).await?;
        if used.saturating_add(bytes.len() as u64) > quota {
            return Err(Error::BadRequest {
                status: 413,
                code: "STORAGE_QUOTA_EXCEEDED",
                message: format!(
                    "your uploads already use {} MB of your {} MB; this one does not fit",
                    used / 1_000_000,
                    quota / 1_000_000
                ),
            });
        }
        let declared = declared.map(str::to_string);
        let checked = bytes.clone();
        let slot = self.decode_slot().await;
        let (content_type, width, height) = tokio::task::spawn_blocking(move || {
            let inspected = inspect(&checked, declared.as_deref());
            drop(slot);
            inspected
        })
        .await
        .map_err(|e| Error::Internal(format!("inspecting an upload: {e}")))??;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        let key = ObjectKey::parse(&format!("assets/{sha256}"))
            .map_err(|e| Error::Internal(e.to_string()))?;
        let meta = NewObjectMeta {
            written_by: format!("asset:{sha256}"),
            provider: None,
            content_type: content_type.to_string(),
        };
        let size = bytes.len() as u64;
        match self.objects().put_if_absent(&key, bytes, &meta).await {
            // Content-addressed: an object already at the key holds these bytes.
            Ok(PutOutcome::Created) | Ok(PutOutcome::Exists(_)) => {}
            Err(e) => return Err(Error::Internal(format!("storing an upload: {e}"))),
        }
        let asset = self
            .store()
            .insert_asset(&Asset {
                id: AssetId::new(),
                user_id: user.id,
                sha256,
                content_type: content_type.to_string(),
                width,
                height,
                bytes: size,
                object_key: key.as_str().to_string(),
                created_at: Utc::now(),
            })
            .await?;
        Ok(asset)
    }

    /// An asset its owner, a reviewer or an admin may see; 404 for anyone else.
    pub async fn visible_asset(&self, viewer: &User, id: AssetId) -> Result<Asset> {
        let asset = self
            .store()
            .asset(id)
            .await?
            .ok_or(Error::NotFound("asset"))?;
        if asset.user_id == viewer.id || viewer.role.allows(Role::Reviewer) {
            Ok(asset)
        } else {
            Err(Error::NotFound("asset"))
        }
    }

    /// Whether every id names an asset `owner` uploaded.
    pub async fn owns_assets(&self, owner: UserId, ids: &[AssetId]) -> Result<Option<AssetId>> {
        for id in ids {
            match self.store().asset(*id).await? {
                Some(a) if a.user_id == owner => {}
                _ => return Ok(Some(*id)),
            }
        }
        Ok(None)
    }

    /// A stored object's bytes, for the engine's own reading (no viewer).
    pub(crate) async fn object_bytes(
        &self,
        key: &str,
    ) -> crate::store::StoreResult<Option<Vec<u8>>> {
        let corrupt = |e: String| crate::store::StoreError::Corrupt(e);
        let key = ObjectKey::parse(key).map_err(|e| corrupt(e.to_string()))?;
        Ok(self
            .objects()
            .read(&key)
            .await
            .map_err(|e| corrupt(e.to_string()))?
            .map(|b| b.to_vec()))
    }

    /// A succeeded job's stored output, whole (a repair's previous version).
    pub(crate) async fn job_output_bytes(
        &self,
        job: crate::model::JobId,
    ) -> crate::store::StoreResult<Option<Vec<u8>>> {
        match self.store().job_output(job).await? {
            Some((key, _)) => self.object_bytes(&key).await,
            None => Ok(None),
        }
    }

    /// The bytes of a visible asset, streamed.
    pub async fn asset_content(&self, viewer: &User, id: AssetId) -> Result<(Asset, ObjectBody)> {
        let asset = self.visible_asset(viewer, id).await?;
        let key =
            ObjectKey::parse(&asset.object_key).map_err(|e| Error::Internal(e.to_string()))?;
        let body = self
            .objects()
            .get(&key)
            .await
            .map_err(|e| Error::Internal(format!("reading an asset: {e}")))?
            .ok_or_else(|| {
                Error::Internal(format!("asset {id} has no object at {}", asset.object_key))
            })?;
        Ok((asset, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let img = image::RgbImage::from_pixel(w, h, image::Rgb([10, 200, 30]));
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    }

    #[test]
    fn sniffs_and_checks() {
        let p = png(4, 3);
        assert_eq!(inspect(&p, Some("image/png")).unwrap(), ("image/png", 4, 3));
        assert_eq!(
            inspect(&p, Some("image/jpeg")).unwrap_err().code(),
            "UNSUPPORTED_MEDIA_TYPE"
        );
        assert_eq!(
            inspect(&p, Some("text/plain")).unwrap_err().code(),
            "UNSUPPORTED_MEDIA_TYPE"
        );
        assert_eq!(
            inspect(b"hello", Some("image/png")).unwrap_err().code(),
            "UNSUPPORTED_MEDIA_TYPE"
        );
        let mut broken = p.clone();
        broken.truncate(40);
        assert_eq!(
            inspect(&broken, Some("image/png")).unwrap_err().code(),
            "UNDECODABLE_IMAGE"
        );
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn a_bomb_is_refused_from_its_header() {
        // A well-formed PNG whose header claims 9000×9000 pixels (81 MP)
        // while carrying one pixel of data: refused before decoding.
        let mut p = png(1, 1);
        p[16..20].copy_from_slice(&9_000u32.to_be_bytes());
        p[20..24].copy_from_slice(&9_000u32.to_be_bytes());
        let crc = crc32(&p[12..29]);
        p[29..33].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            inspect(&p, Some("image/png")).unwrap_err().code(),
            "IMAGE_TOO_LARGE"
        );
        let wide = png(ASSET_SIDE_MAX + 1, 1);
        assert_eq!(
            inspect(&wide, Some("image/png")).unwrap_err().code(),
            "IMAGE_TOO_LARGE"
        );
    }
}
