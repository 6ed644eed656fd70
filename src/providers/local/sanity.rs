//! The look at a provider's output before it is delivered (issue 33, 2).
//! A result that is plainly not an edit of the photo (it will not decode,
//! it is a thumbnail of a large photo, it has another shape, or it is one
//! flat colour where the photo is not) fails its attempt as a provider
//! failure: the person is refunded instead of receiving it as "done".
//! Anything short of plainly broken is delivered, and the review after
//! says what it found.

use super::decode_limits;
use super::memo::decoded;
use image::RgbImage;
use std::io::Cursor;

/// An output whose shorter side is under this many pixels is not an edit
/// of a photo that is larger (models answer at 256 px and more).
pub const OUTPUT_SIDE_MIN: u32 = 64;
/// How far the output's proportions may stray from the photo's. Models
/// answer at their own sizes (1536×1024 for a 4:3 photo is 1.125 off, a
/// square for a 4:3 photo 1.33): past 1.5, the picture was not kept.
pub const ASPECT_STRAY_MAX: f64 = 1.5;
/// Brightness spread (between the 1st and 99th percentile, out of 255) at
/// or under which an image is one flat colour: a black frame from a
/// safety filter, a placeholder. Compression noise stays under it; any
/// photograph is far over it.
pub const FLAT_SPREAD_MAX: u8 = 8;

/// Why `output` is plainly not an edit of `photo`, in words for the
/// person; `None` when it may be one. A photo that cannot be read is not
/// the output's fault: then only the output itself is judged.
pub fn plainly_broken(photo: &[u8], output: &[u8]) -> Option<String> {
    let (ow, oh) = match dimensions(output) {
        Ok(d) => d,
        Err(e) => return Some(format!("the result could not be read as an image ({e})")),
    };
    let photo_size = dimensions(photo).ok();
    if let Some((pw, ph)) = photo_size {
        let side_min = OUTPUT_SIDE_MIN.min(pw.min(ph));
        if ow.min(oh) < side_min {
            return Some(format!(
                "the result is {ow}×{oh} pixels, far too small for a {pw}×{ph} photo"
            ));
        }
        let stray = aspect_stray((pw, ph), (ow, oh));
        if stray > ASPECT_STRAY_MAX {
            return Some(format!(
                "the result is {ow}×{oh} pixels, not the shape of the {pw}×{ph} photo"
            ));
        }
    }
    let out = match decoded(output) {
        Ok(img) => img,
        Err(e) => return Some(format!("the result could not be read as an image ({e})")),
    };
    if is_flat(&out) && !decoded(photo).is_ok_and(|p| is_flat(&p)) {
        return Some("the result is one flat colour, with nothing of the photo in it".into());
    }
    None
}

/// Width and height from the image's header, within the decoder's limits.
fn dimensions(bytes: &[u8]) -> Result<(u32, u32), String> {
    if bytes.is_empty() {
        return Err("it is empty".into());
    }
    let mut reader = image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())?;
    reader.limits(decode_limits());
    let (w, h) = reader.into_dimensions().map_err(|e| e.to_string())?;
    if w == 0 || h == 0 {
        return Err(format!("it is {w}×{h}"));
    }
    Ok((w, h))
}

/// How many times wider (or taller) one shape is than the other: 1.0 for
/// the same proportions, whichever way round.
pub fn aspect_stray((pw, ph): (u32, u32), (ow, oh): (u32, u32)) -> f64 {
    let p = f64::from(pw) / f64::from(ph);
    let o = f64::from(ow) / f64::from(oh);
    (p / o).max(o / p)
}

/// One colour, give or take compression: the spread of brightness between
/// the 1st and the 99th percentile, so a caption or a few stray pixels on
/// a black frame do not make it a picture.
pub fn is_flat(img: &RgbImage) -> bool {
    let mut counts = [0u64; 256];
    for p in img.pixels() {
        let [r, g, b] = p.0;
        let luma = (u32::from(r) * 299 + u32::from(g) * 587 + u32::from(b) * 114) / 1000;
        counts[luma.min(255) as usize] += 1;
    }
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return true;
    }
    let cut = total / 100;
    let percentile = |from_top: bool| {
        let mut seen = 0;
        let order: Box<dyn Iterator<Item = usize>> = if from_top {
            Box::new((0..256).rev())
        } else {
            Box::new(0..256)
        };
        for v in order {
            seen += counts[v];
            if seen > cut {
                return v;
            }
        }
        0
    };
    let (low, high) = (percentile(false), percentile(true));
    high.saturating_sub(low) <= usize::from(FLAT_SPREAD_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageFormat, Rgb};

    fn png(img: &RgbImage) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    }

    fn gradient(w: u32, h: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| {
            Rgb([
                (x * 255 / w) as u8,
                (y * 255 / h) as u8,
                ((x + y) % 256) as u8,
            ])
        })
    }

    #[test]
    fn a_result_of_the_photos_shape_with_content_passes() {
        let photo = png(&gradient(400, 300));
        assert_eq!(plainly_broken(&photo, &png(&gradient(400, 300))), None);
        // Models answer at their own sizes: 3:2 or square for a 4:3 photo.
        assert_eq!(plainly_broken(&photo, &png(&gradient(1536, 1024))), None);
        assert_eq!(plainly_broken(&photo, &png(&gradient(256, 256))), None);
    }

    #[test]
    fn empty_tiny_misshapen_and_flat_results_are_broken() {
        let photo = png(&gradient(400, 300));
        assert!(plainly_broken(&photo, &[])
            .unwrap()
            .contains("could not be read"));
        assert!(plainly_broken(&photo, b"\x89PNG\r\n\x1a\nrest")
            .unwrap()
            .contains("could not be read"));
        let flat16 = RgbImage::from_pixel(16, 16, Rgb([10, 128, 245]));
        assert!(plainly_broken(&photo, &png(&flat16))
            .unwrap()
            .contains("too small"));
        let strip = gradient(400, 100);
        assert!(plainly_broken(&photo, &png(&strip))
            .unwrap()
            .contains("shape"));
        let mut black = RgbImage::from_pixel(400, 300, Rgb([0, 0, 0]));
        // A caption on the black frame does not make it a picture.
        for x in 10..60 {
            black.put_pixel(x, 10, Rgb([255, 255, 255]));
        }
        assert!(plainly_broken(&photo, &png(&black))
            .unwrap()
            .contains("flat"));
    }

    #[test]
    fn a_small_or_flat_photo_allows_a_small_or_flat_result() {
        let small = png(&gradient(40, 30));
        assert_eq!(plainly_broken(&small, &png(&gradient(40, 30))), None);
        let grey = RgbImage::from_pixel(200, 200, Rgb([128, 128, 128]));
        assert_eq!(plainly_broken(&png(&grey), &png(&grey)), None);
    }

    #[test]
    fn noise_on_a_flat_frame_is_still_flat() {
        let noisy = RgbImage::from_fn(300, 300, |x, y| {
            let n = ((x * 7 + y * 13) % 5) as u8;
            Rgb([n, n, n])
        });
        assert!(is_flat(&noisy));
        assert!(!is_flat(&gradient(300, 300)));
        assert!((aspect_stray((4, 3), (3, 4)) - 16.0 / 9.0).abs() < 1e-9);
    }

    /// Every real photograph in `tests/photos` (and brick, a plain wall)
    /// is a picture, and an edit of its own shape passes.
    #[test]
    fn real_photographs_are_not_flat_and_pass_as_their_own_result() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/photos");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if !matches!(ext, "jpg" | "png") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !is_flat(&super::super::decode(&bytes).unwrap()),
                "{path:?} read as flat"
            );
            assert_eq!(plainly_broken(&bytes, &bytes), None, "{path:?}");
            seen += 1;
        }
        assert!(seen >= 20, "only {seen} photos");
    }
}
