//! The `local` provider: real edits on the CPU with the `image` crate. The
//! selected region (the painted mask for `area`; for `pet`, `person` and
//! `background` the region the readiness check finds) is re-rendered in the
//! chosen medium, each with its own technique; strength sets how far; the
//! rest of the photo is left exactly as it was. Video is a short animated
//! GIF of the requested duration and resolution. Readiness and review are
//! measurements, not guesses.

pub mod detect;
pub mod look;
pub mod memo;
pub mod sanity;

use super::{
    Cost, ErrorClass, Finished, Input, Lookup, Output, Poll, Provider, ProviderError, Submission,
};
use crate::config::models::{LocalFaults, ModelSpec};
use crate::model::{JobRequest, Resolution, Strength, TargetKind};
use image::{imageops, GrayImage, ImageFormat, Luma, Rgb, RgbImage};
use rand::Rng;
use std::io::Cursor;
use std::time::Duration;

/// The local provider, with the faults its configuration injects.
#[derive(Clone, Debug, Default)]
pub struct LocalProvider {
    pub faults: LocalFaults,
}

impl LocalProvider {
    /// Which injected fault, if any, this call suffers (one roll per call).
    fn roll(f: &LocalFaults) -> Option<ErrorClass> {
        let x: f64 = rand::thread_rng().gen();
        let mut edge = 0.0;
        for (rate, class) in [
            (f.rate_limit_rate, ErrorClass::RateLimited),
            (f.failure_rate, ErrorClass::Failed),
            (f.refusal_rate, ErrorClass::Refused),
            (f.drop_after_accept_rate, ErrorClass::Uncertain),
        ] {
            edge += rate;
            if x < edge {
                return Some(class);
            }
        }
        None
    }
}

fn render_input(input: Input) -> Result<(Vec<u8>, &'static str), String> {
    match input.request {
        JobRequest::ImageEdit(edit) => {
            let looked = memo::looked(
                &input.photo.ok_or("the photo is gone")?,
                edit.target.kind,
                &edit.target.description,
                input.mask.as_deref(),
            )?;
            let (img, region) = (&looked.photo, looked.region()?);
            let out = match (input.instruction.as_deref(), input.previous.as_deref()) {
                (Some(instruction), Some(previous)) => {
                    let previous = at_size_of(img, previous)?;
                    repair(
                        img,
                        &region,
                        &edit.style,
                        edit.strength,
                        &previous,
                        crate::model::direction(instruction),
                    )
                }
                _ => render(img, &region, &edit.style, edit.strength),
            };
            Ok((encode_png(&out)?, "image/png"))
        }
        JobRequest::Video(v) => Ok((clip(&v.prompt, v.duration_s, v.resolution)?, "image/gif")),
    }
}

#[async_trait::async_trait]
impl Provider for LocalProvider {
    async fn submit(
        &self,
        model: &ModelSpec,
        input: &Input,
        _key: &str,
    ) -> Result<Submission, ProviderError> {
        let faults = model.faults.as_ref().unwrap_or(&self.faults);
        if faults.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(faults.latency_ms)).await;
        }
        let rate_card = Cost::Derived(input.rate_card_usd);
        match Self::roll(faults) {
            Some(ErrorClass::RateLimited) => {
                let mut e = ProviderError::new(
                    ErrorClass::RateLimited,
                    "injected fault: rate limited",
                    Cost::Nothing,
                );
                e.retry_after = Some(Duration::from_secs(1));
                return Err(e);
            }
            Some(ErrorClass::Uncertain) => {
                // The work was accepted (and would be charged); the answer is lost.
                return Err(ProviderError::new(
                    ErrorClass::Uncertain,
                    "injected fault: accepted, then the answer was dropped",
                    Cost::Unknown,
                ));
            }
            Some(class) => {
                return Err(ProviderError::new(
                    class,
                    format!("injected fault: {}", class.as_str()),
                    rate_card,
                ))
            }
            None => {}
        }
        let input = input.clone();
        let rendered = tokio::task::spawn_blocking(move || render_input(input))
            .await
            .map_err(|e| ProviderError::new(ErrorClass::Failed, e.to_string(), Cost::Nothing))?;
        let (bytes, content_type) =
            rendered.map_err(|e| ProviderError::new(ErrorClass::InvalidInput, e, Cost::Nothing))?;
        let unpriced = rand::thread_rng().gen::<f64>() < faults.unpriced_rate;
        Ok(Submission::Finished(Finished {
            usage: serde_json::json!({"bytes": bytes.len()}),
            output: Output::Bytes {
                bytes,
                content_type: content_type.into(),
            },
            cost: if unpriced { Cost::Unknown } else { rate_card },
        }))
    }

    async fn poll(&self, _model: &ModelSpec, _id: &str) -> Result<Poll, ProviderError> {
        // Local work finishes inside `submit`; there is nothing to poll.
        Ok(Poll::Failed(ProviderError::new(
            ErrorClass::Failed,
            "the local provider keeps no predictions",
            Cost::Unknown,
        )))
    }

    async fn lookup(&self, _model: &ModelSpec, _key: &str) -> Result<Lookup, ProviderError> {
        // The configuration refuses `lookup` for local models.
        Ok(Lookup::Unclear(
            "the local provider keeps no predictions".into(),
        ))
    }

    async fn fetch(
        &self,
        _model: &ModelSpec,
        output: &Output,
    ) -> Result<(Vec<u8>, String), ProviderError> {
        match output {
            Output::Bytes {
                bytes,
                content_type,
            } => Ok((bytes.clone(), content_type.clone())),
            Output::Url(_) => Err(ProviderError::new(
                ErrorClass::Failed,
                "the local provider has no URLs",
                Cost::Nothing,
            )),
        }
    }
}

/// Longest side an edit is rendered at (keeps a CPU edit to a second or two).
pub const EDIT_SIDE_MAX: u32 = 1024;
/// Frames per second of a local clip.
const CLIP_FPS: u32 = 4;

#[derive(Debug, Clone, PartialEq)]
pub struct NotReady {
    pub message: String,
    pub questions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Review {
    /// "passed" or "issues".
    pub verdict: &'static str,
    pub notes: String,
}

/// The photo at the size edits work at (`EDIT_SIDE_MAX` on the long side).
/// The largest image any decode here takes, in pixels and on a side, and
/// the memory one decode may allocate: what a person uploads is refused
/// past these, and a provider's output (which nobody vetted) is never
/// decoded past them either (issue 29, 8).
pub const IMAGE_PIXELS_MAX: u64 = 40_000_000;
pub const IMAGE_SIDE_MAX: u32 = 10_000;
pub const DECODE_ALLOC_MAX: u64 = 512 * 1024 * 1024;

/// The decoder's limits for any image we did not make ourselves.
pub fn decode_limits() -> image::Limits {
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(IMAGE_SIDE_MAX);
    limits.max_image_height = Some(IMAGE_SIDE_MAX);
    limits.max_alloc = Some(DECODE_ALLOC_MAX);
    limits
}

/// Decodes an image (a photo, a mask, a provider's output) within
/// `decode_limits`, at most the edit size: a larger one is reduced.
pub fn decode(bytes: &[u8]) -> Result<RgbImage, String> {
    if let Some(img) = large_jpeg(bytes) {
        return Ok(img);
    }
    let mut reader = image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| format!("cannot read the image: {e}"))?;
    reader.limits(decode_limits());
    let (w, h) = reader
        .into_dimensions()
        .map_err(|e| format!("cannot decode the image: {e}"))?;
    if u64::from(w) * u64::from(h) > IMAGE_PIXELS_MAX {
        return Err(format!(
            "the image is {w}×{h}, more than {IMAGE_PIXELS_MAX} pixels"
        ));
    }
    let mut reader = image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| format!("cannot read the image: {e}"))?;
    reader.limits(decode_limits());
    let img = reader
        .decode()
        .map_err(|e| format!("cannot decode the image: {e}"))?;
    let (w, h) = (img.width(), img.height());
    match edit_size(w, h) {
        Some((ew, eh)) => Ok(resized(&img.to_rgb8(), ew, eh)),
        None => Ok(img.to_rgb8()),
    }
}

/// The size a photo is brought to, when it is larger than edits work at.
fn edit_size(w: u32, h: u32) -> Option<(u32, u32)> {
    let scale = f64::from(EDIT_SIDE_MAX) / f64::from(w.max(h));
    (scale < 1.0).then(|| {
        (
            ((f64::from(w) * scale) as u32).max(1),
            ((f64::from(h) * scale) as u32).max(1),
        )
    })
}

/// A colour JPEG at least twice the edit size, decoded at the smallest of
/// a half, quarter or eighth of its size that still covers the edit size
/// (the decoder's reduced IDCT), then brought to the edit size. A phone's
/// 12-megapixel photo costs a fraction of a full decode. Anything else
/// (grey, CMYK, a decoder error) takes the full decode.
fn large_jpeg(bytes: &[u8]) -> Option<RgbImage> {
    if !bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return None;
    }
    let mut d = jpeg_decoder::Decoder::new(bytes);
    d.read_info().ok()?;
    let info = d.info()?;
    let (w, h) = (u32::from(info.width), u32::from(info.height));
    let too_large = w.max(h) > IMAGE_SIDE_MAX || u64::from(w) * u64::from(h) > IMAGE_PIXELS_MAX;
    if too_large
        || info.pixel_format != jpeg_decoder::PixelFormat::RGB24
        || w.max(h) < 2 * EDIT_SIDE_MAX
    {
        // Too large goes to the full decode, whose limits refuse it.
        return None;
    }
    let (ew, eh) = edit_size(w, h)?;
    let (sw, sh) = d
        .scale(u16::try_from(ew).ok()?, u16::try_from(eh).ok()?)
        .ok()?;
    let img = RgbImage::from_raw(u32::from(sw), u32::from(sh), d.decode().ok()?)?;
    Some(resized(&img, ew, eh))
}

/// The squared distance of two colours (their first three channels):
/// exact in integers, so thresholds compare without a square root.
fn dist2(a: &[u8], b: &[u8]) -> i32 {
    (0..3)
        .map(|i| (i32::from(a[i]) - i32::from(b[i])).pow(2))
        .sum()
}

fn dist(a: &Rgb<u8>, b: &Rgb<u8>) -> f64 {
    f64::from(dist2(&a.0, &b.0)).sqrt()
}

/// The region to change, 255 inside. `area` uses the mask (any painted,
/// non-transparent pixel, scaled to the photo); the others separate the
/// subject from the background by its distance from the border's colour.
pub fn region(
    photo: &RgbImage,
    target: TargetKind,
    mask: Option<&[u8]>,
) -> Result<GrayImage, String> {
    let (w, h) = photo.dimensions();
    if target == TargetKind::Area {
        return mask_region(photo, mask.ok_or("an area edit needs its mask")?);
    }
    // The border's dominant colours stand for the background (a photo's
    // edges are mostly background): coarse buckets covering ≥ 8% of it.
    // 8 levels a channel: a bucket's place is its three levels.
    let mut buckets = vec![(0u64, [0u64; 3]); 512];
    let mut add = |p: &Rgb<u8>| {
        let e = &mut buckets
            [usize::from(p[0] / 32) * 64 + usize::from(p[1] / 32) * 8 + usize::from(p[2] / 32)];
        e.0 += 1;
        (0..3).for_each(|i| e.1[i] += u64::from(p[i]));
    };
    for x in 0..w {
        add(photo.get_pixel(x, 0));
        add(photo.get_pixel(x, h - 1));
    }
    for y in 0..h {
        add(photo.get_pixel(0, y));
        add(photo.get_pixel(w - 1, y));
    }
    let total: u64 = buckets.iter().map(|b| b.0).sum();
    let background: Vec<[u8; 3]> = buckets
        .iter()
        .filter(|b| b.0 > 0 && b.0 * 100 >= total * 8)
        .map(|b| [0, 1, 2].map(|i| (b.1[i] / b.0) as u8))
        .collect();
    // Within 48 of a background colour; compared squared, which saves a
    // square root per pixel and colour.
    let is_bg = |p: &[u8]| background.iter().any(|b| dist2(p, b) < 48 * 48);
    let (inside, outside) = match target {
        TargetKind::Background => (0, 255),
        _ => (255, 0),
    };
    let mut region = GrayImage::new(w, h);
    for (r, p) in region.iter_mut().zip(photo.as_raw().chunks_exact(3)) {
        *r = if is_bg(p) { outside } else { inside };
    }
    Ok(region)
}

pub fn fraction(region: &GrayImage) -> f64 {
    let inside = region.pixels().filter(|p| p[0] > 0).count();
    inside as f64 / (region.width() as f64 * region.height() as f64).max(1.0)
}

fn percent(f: f64) -> String {
    let p = f * 100.0;
    if p < 1.0 {
        "under 1%".into()
    } else {
        format!("{p:.0}%")
    }
}

/// The painted mask at the photo's size, 255 where any non-transparent
/// pixel was painted.
pub fn mask_region(photo: &RgbImage, mask: &[u8]) -> Result<GrayImage, String> {
    let (w, h) = photo.dimensions();
    let m = image::load_from_memory(mask)
        .map_err(|e| format!("cannot decode the mask: {e}"))?
        .to_rgba8();
    let m = imageops::resize(&m, w, h, imageops::FilterType::Nearest);
    Ok(GrayImage::from_fn(w, h, |x, y| {
        Luma([if m.get_pixel(x, y)[3] > 16 { 255 } else { 0 }])
    }))
}

/// The look before paying on a decoded photo and the mask's bytes: the
/// target's region and what was seen, or why the order should not go
/// ahead (the outer error: the mask could not be read).
pub fn check(
    photo: &RgbImage,
    target: TargetKind,
    description: &str,
    mask: Option<&[u8]>,
) -> Result<Result<look::Target, NotReady>, String> {
    let mask = mask.map(|m| mask_region(photo, m)).transpose()?;
    Ok(look::look(photo, target, description, mask.as_ref()))
}

/// The region an edit changes and its review measures: what the look
/// before paying chose (`look::target_region`).
pub fn selection(
    photo: &RgbImage,
    target: TargetKind,
    description: &str,
    mask: Option<&[u8]>,
) -> Result<GrayImage, String> {
    let mask = mask.map(|m| mask_region(photo, m)).transpose()?;
    look::target_region(photo, target, description, mask.as_ref())
}

fn swatch(style: &str) -> [Rgb<u8>; 3] {
    let hex = |s: &str| {
        let v = u32::from_str_radix(s.trim_start_matches('#'), 16).unwrap_or(0x808080);
        Rgb([(v >> 16) as u8, (v >> 8) as u8, v as u8])
    };
    let s = crate::model::style(style)
        .map(|s| s.swatch)
        .unwrap_or(["#888888", "#dddddd", "#444444"]);
    [hex(s[0]), hex(s[1]), hex(s[2])]
}

fn luma(p: &Rgb<u8>) -> f64 {
    0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.114 * f64::from(p[2])
}

fn mix(a: &Rgb<u8>, b: &Rgb<u8>, t: f64) -> Rgb<u8> {
    let t = t.clamp(0.0, 1.0);
    Rgb([0, 1, 2].map(|i| (f64::from(a[i]) * (1.0 - t) + f64::from(b[i]) * t).round() as u8))
}

/// The nearest of a palette.
fn nearest(p: &Rgb<u8>, palette: &[Rgb<u8>]) -> Rgb<u8> {
    *palette
        .iter()
        .min_by(|a, b| dist(p, a).total_cmp(&dist(p, b)))
        .unwrap_or(p)
}

/// The photo's colours pulled toward the medium's swatch.
fn palette(style: &str, photo: &RgbImage) -> Vec<Rgb<u8>> {
    let sw = swatch(style);
    let small = imageops::thumbnail(photo, 4, 4);
    let mut p: Vec<Rgb<u8>> = small.pixels().map(|c| mix(c, &sw[1], 0.35)).collect();
    p.extend_from_slice(&sw);
    p
}

/// Renders one pixel of the medium; `cell` is the technique's grain.
///
/// Long on purpose: one arm per medium, read as a table of small pixel
/// rules side by side; split up, each rule would be a function of one line
/// called from here per pixel.
fn medium_pixel(
    style: &str,
    photo: &RgbImage,
    blurred: &RgbImage,
    pal: &[Rgb<u8>],
    x: u32,
    y: u32,
    cell: u32,
) -> Rgb<u8> {
    let sw = swatch(style);
    let (cx, cy) = (x / cell * cell + cell / 2, y / cell * cell + cell / 2);
    let (w, h) = photo.dimensions();
    let centre = *blurred.get_pixel(cx.min(w - 1), cy.min(h - 1));
    let (u, v) = (
        f64::from(x % cell) / f64::from(cell),
        f64::from(y % cell) / f64::from(cell),
    );
    match style {
        // Crossed threads in each cell of a counted grid.
        "cross_stitch" => {
            let on = (u - v).abs() < 0.22 || (u + v - 1.0).abs() < 0.22;
            if on {
                nearest(&centre, pal)
            } else {
                mix(&sw[1], &centre, 0.15)
            }
        }
        // Long satin stitches running diagonally, with a sheen.
        "embroidery" => {
            let stripe = ((f64::from(x + y) / 3.0).sin() * 0.5 + 0.5) * 0.35;
            mix(&nearest(&centre, pal), &Rgb([255, 255, 255]), stripe)
        }
        // Loops (crochet) and V stitches (knitting) on a yarn grid.
        "crochet" | "knitted_wool" => {
            let shape = if style == "crochet" {
                ((u - 0.5).powi(2) + (v - 0.5).powi(2)).sqrt()
            } else {
                ((u - 0.5).abs() * 2.0 - v).abs()
            };
            mix(
                &nearest(&centre, pal),
                &Rgb([0, 0, 0]),
                (shape * 0.9).min(0.45),
            )
        }
        // Patches of fabric with a running stitch at each seam.
        "quilt" => {
            let seam = u < 0.06 || v < 0.06;
            let dash = (x + y) % 6 < 3;
            if seam && dash {
                sw[1]
            } else {
                nearest(&centre, pal)
            }
        }
        // Flat folded facets: each cell split on its diagonal, lit differently.
        "origami" | "paper_collage" => {
            let base = nearest(&centre, pal);
            let lit = if style == "origami" {
                if u > v {
                    0.25
                } else {
                    -0.15
                }
            } else if (x / cell + y / cell).is_multiple_of(3) {
                0.12
            } else {
                -0.05
            };
            if lit > 0.0 {
                mix(&base, &Rgb([255, 255, 255]), lit)
            } else {
                mix(&base, &Rgb([0, 0, 0]), -lit)
            }
        }
        // One ink on paper with carved lines (wood adds a grain).
        "linocut" | "woodcut" | "pencil_sketch" => {
            let l = luma(photo.get_pixel(x, y)) / 255.0;
            let line = if style == "woodcut" {
                ((f64::from(y) / 2.5 + (f64::from(x) / 17.0).sin() * 3.0).sin() * 0.5 + 0.5) * 0.6
            } else if style == "pencil_sketch" {
                (f64::from((x + 2 * y) % 7) / 7.0) * 0.8
            } else {
                (f64::from((x + y) % 5) / 5.0) * 0.5
            };
            if l < 0.3 + line {
                sw[0]
            } else {
                sw[1]
            }
        }
        // Tiles or panes of flat colour held in dark lines.
        "stained_glass" | "mosaic" => {
            let grout = u < 0.1 || v < 0.1;
            if grout {
                if style == "mosaic" {
                    Rgb([200, 195, 185])
                } else {
                    Rgb([25, 25, 30])
                }
            } else {
                nearest(&centre, pal)
            }
        }
        // Soft washes that pool at their edges on white paper.
        "watercolour" => {
            let c = mix(&centre, &Rgb([255, 255, 255]), 0.3);
            let edge = (dist(photo.get_pixel(x, y), &centre) / 120.0).min(0.4);
            mix(&c, &sw[0], edge)
        }
        // Smooth modelled forms with a fuzzy (felt) or thumbprinted (clay) skin.
        "needle_felt" | "clay" => {
            let noise =
                f64::from((x.wrapping_mul(73_856_093) ^ y.wrapping_mul(19_349_663)) % 100) / 100.0;
            let base = nearest(blurred.get_pixel(x, y), pal);
            let amount = if style == "needle_felt" {
                noise * 0.25
            } else {
                ((u - 0.5).powi(2) + (v - 0.5).powi(2)).sqrt() * 0.3
            };
            mix(&base, &Rgb([255, 255, 255]), amount)
        }
        _ => nearest(&centre, pal),
    }
}

/// Re-renders the region in the medium; outside the region every pixel is
/// the photo's own.
pub fn render(photo: &RgbImage, region: &GrayImage, style: &str, strength: Strength) -> RgbImage {
    let (w, h) = photo.dimensions();
    let cell = (w.max(h) / 90).max(4);
    let blurred = imageops::blur(photo, 2.0);
    let pal = palette(style, photo);
    let amount = match strength {
        Strength::Subtle => 0.45,
        Strength::Balanced => 0.75,
        Strength::Strong => 1.0,
    };
    RgbImage::from_fn(w, h, |x, y| {
        let original = *photo.get_pixel(x, y);
        if region.get_pixel(x, y)[0] == 0 {
            return original;
        }
        mix(
            &original,
            &medium_pixel(style, photo, &blurred, &pal, x, y, cell),
            amount,
        )
    })
}

/// An image decoded at `like`'s size (a provider may answer at another).
pub fn at_size_of(like: &RgbImage, bytes: &[u8]) -> Result<RgbImage, String> {
    let img = image::load_from_memory(bytes)
        .map_err(|e| format!("cannot decode the previous version: {e}"))?
        .to_rgb8();
    Ok(if img.dimensions() == like.dimensions() {
        img
    } else {
        resized(&img, like.width(), like.height())
    })
}

/// `img` at `w` by `h`, bilinear (image's Triangle filter), with SIMD.
fn resized(img: &RgbImage, w: u32, h: u32) -> RgbImage {
    use fast_image_resize as fr;
    let slow = || imageops::resize(img, w, h, imageops::FilterType::Triangle);
    let Ok(src) =
        fr::images::ImageRef::new(img.width(), img.height(), img.as_raw(), fr::PixelType::U8x3)
    else {
        return slow();
    };
    let mut dst = fr::images::Image::new(w, h, fr::PixelType::U8x3);
    let bilinear =
        fr::ResizeOptions::new().resize_alg(fr::ResizeAlg::Convolution(fr::FilterType::Bilinear));
    // It refuses only sizes image's resize handles (an empty image).
    match fr::Resizer::new().resize(&src, &mut dst, &bilinear) {
        Ok(()) => RgbImage::from_raw(w, h, dst.into_vec()).unwrap_or_else(slow),
        Err(_) => slow(),
    }
}

/// A repair of the version the person has (`previous`), as the local
/// renderer can follow an instruction: further into the medium when it asks
/// for more, back toward the photo when it asks for less; anything else it
/// cannot read, so it renders the edit afresh from the photo.
pub fn repair(
    photo: &RgbImage,
    region: &GrayImage,
    style: &str,
    strength: Strength,
    previous: &RgbImage,
    direction: crate::model::Direction,
) -> RgbImage {
    use crate::model::Direction;
    let (w, h) = photo.dimensions();
    match direction {
        Direction::Other => render(photo, region, style, strength),
        Direction::Stronger => {
            let full = render(photo, region, style, Strength::Strong);
            RgbImage::from_fn(w, h, |x, y| {
                if region.get_pixel(x, y)[0] == 0 {
                    return *photo.get_pixel(x, y);
                }
                // Half of the way from the version it had to the full medium,
                // and a little past the full medium's grain.
                let toward = mix(previous.get_pixel(x, y), full.get_pixel(x, y), 0.6);
                let sw = swatch(style);
                mix(&toward, &nearest(&toward, &sw), 0.25)
            })
        }
        Direction::Subtler => RgbImage::from_fn(w, h, |x, y| {
            let original = *photo.get_pixel(x, y);
            if region.get_pixel(x, y)[0] == 0 {
                return original;
            }
            mix(previous.get_pixel(x, y), &original, 0.45)
        }),
    }
}

/// Mean colour distance from the photo inside and outside the region
/// (the review's measure and the comparison's).
fn change(photo: &RgbImage, other: &RgbImage, region: &GrayImage) -> (f64, f64) {
    let (mut inside, mut n_in, mut outside, mut n_out) = (0f64, 0f64, 0f64, 0f64);
    let pixels = photo
        .as_raw()
        .chunks_exact(3)
        .zip(other.as_raw().chunks_exact(3));
    for ((p, o), r) in pixels.zip(region.as_raw()) {
        let d = f64::from(dist2(p, o)).sqrt();
        if *r > 0 {
            inside += d;
            n_in += 1.0;
        } else {
            outside += d;
            n_out += 1.0;
        }
    }
    (inside / n_in.max(1.0), outside / n_out.max(1.0))
}

/// The local checker's comparison of a repair's candidate with the version
/// the person has, measured against the photo: what the instruction asked
/// for (more or less of the medium inside the selection), and whether the
/// rest of the photo stayed as intact. An instruction it cannot measure is
/// judged by what stayed intact alone.
pub fn compare(
    photo: &RgbImage,
    region: &GrayImage,
    previous: &RgbImage,
    candidate: &RgbImage,
    direction: crate::model::Direction,
) -> (crate::model::CompareOutcome, String) {
    use crate::model::CompareOutcome as O;
    let fit = |img: &RgbImage| {
        if img.dimensions() == photo.dimensions() {
            img.clone()
        } else {
            resized(img, photo.width(), photo.height())
        }
    };
    let (previous, candidate) = (fit(previous), fit(candidate));
    let (p_in, p_out) = change(photo, &previous, region);
    let (c_in, c_out) = change(photo, &candidate, region);
    let (between, _) = change(&previous, &candidate, region);
    let measured = format!(
        "inside the selection the candidate differs from the photo by {c_in:.1} (the version you have: {p_in:.1}); outside by {c_out:.1} ({p_out:.1})"
    );
    if c_out > p_out + 1.0 {
        return (
            O::Worse,
            format!("The candidate changed more of the photo outside the selection: {measured}."),
        );
    }
    judge(direction, c_in - p_in, between, (c_out, p_out), &measured)
}

/// What the measured changes mean for the instruction: a stronger or
/// subtler one must move the selection that way (by more than the noise);
/// any other is judged by what it kept intact.
fn judge(
    direction: crate::model::Direction,
    moved: f64,
    between: f64,
    (c_out, p_out): (f64, f64),
    measured: &str,
) -> (crate::model::CompareOutcome, String) {
    use crate::model::{CompareOutcome as O, Direction};
    match direction {
        Direction::Stronger | Direction::Subtler => {
            let wanted = if direction == Direction::Stronger {
                1.0
            } else {
                -1.0
            };
            if moved * wanted > 2.0 {
                (
                    O::Improved,
                    format!("The candidate went the way the instruction asks: {measured}."),
                )
            } else if moved * wanted < -2.0 {
                (
                    O::Worse,
                    format!("The candidate went against the instruction: {measured}."),
                )
            } else {
                (
                    O::Unchanged,
                    format!("The candidate is about the same as the version you have: {measured}."),
                )
            }
        }
        Direction::Other => {
            if between < 1.0 {
                (
                    O::Unchanged,
                    format!("The candidate is the same as the version you have: {measured}."),
                )
            } else if c_out + 1.0 < p_out {
                (
                    O::Improved,
                    format!("The candidate keeps more of the photo intact: {measured}."),
                )
            } else {
                (
                    O::Unchanged,
                    format!("No measurable improvement on the version you have: {measured}."),
                )
            }
        }
    }
}

/// The check after: did the selection change, and did nothing else?
pub fn review(photo: &RgbImage, output: &RgbImage, region: &GrayImage) -> Review {
    // A provider may answer at another size: compare at the photo's.
    let at_photo_size;
    let output = if output.dimensions() == photo.dimensions() {
        output
    } else {
        at_photo_size = resized(output, photo.width(), photo.height());
        &at_photo_size
    };
    let (inside, outside) = change(photo, output, region);
    if inside < 6.0 {
        Review {
            verdict: "issues",
            notes: format!("The selection barely changed (mean difference {inside:.1})."),
        }
    } else if outside > 1.0 {
        Review {
            verdict: "issues",
            notes: format!("Pixels outside the selection changed (mean difference {outside:.1})."),
        }
    } else {
        Review {
            verdict: "passed",
            notes: format!("The selection changed (mean difference {inside:.1}); the rest of the photo is untouched."),
        }
    }
}

pub fn encode_png(img: &RgbImage) -> Result<Vec<u8>, String> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, ImageFormat::Png)
        .map_err(|e| e.to_string())?;
    Ok(out.into_inner())
}

/// A short animated clip: the prompt's hash picks a palette; a paper-cut
/// shape drifts across a washed background, one frame per quarter second.
pub fn clip(prompt: &str, duration_s: u32, resolution: Resolution) -> Result<Vec<u8>, String> {
    use image::codecs::gif::{GifEncoder, Repeat};
    use image::{Delay, Frame, RgbaImage};
    let (w, h) = match resolution {
        Resolution::P720 => (1280u32, 720u32),
        Resolution::P1080 => (1920, 1080),
    };
    let seed = prompt
        .bytes()
        .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
    let sky = Rgb([
        (seed % 80 + 120) as u8,
        ((seed >> 8) % 80 + 140) as u8,
        ((seed >> 16) % 60 + 190) as u8,
    ]);
    let ink = Rgb([
        ((seed >> 4) % 200) as u8,
        ((seed >> 12) % 120) as u8,
        ((seed >> 20) % 120) as u8,
    ]);
    let frames = (duration_s * CLIP_FPS).max(1);
    let mut out = Vec::new();
    {
        let mut enc = GifEncoder::new_with_speed(&mut out, 30);
        enc.set_repeat(Repeat::Infinite)
            .map_err(|e| e.to_string())?;
        for f in 0..frames {
            let t = f64::from(f) / f64::from(frames);
            let cx = (t * f64::from(w)) as i64;
            let cy = (f64::from(h) * (0.55 + 0.05 * (t * std::f64::consts::TAU).sin())) as i64;
            let img = RgbaImage::from_fn(w, h, |x, y| {
                let (dx, dy) = (i64::from(x) - cx, i64::from(y) - cy);
                let boat =
                    dy > -(h as i64 / 10) && dy < 0 && dx.abs() < i64::from(h / 6) - dy.abs();
                let water = y > h * 6 / 10;
                let c = if boat {
                    ink
                } else if water {
                    mix(&sky, &Rgb([30, 60, 120]), 0.5)
                } else {
                    mix(
                        &sky,
                        &Rgb([255, 255, 255]),
                        f64::from(y) / f64::from(h) * 0.5,
                    )
                };
                image::Rgba([c[0], c[1], c[2], 255])
            });
            let delay = Delay::from_numer_denom_ms(1000 / CLIP_FPS, 1);
            enc.encode_frame(Frame::from_parts(img, 0, 0, delay))
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 29, 8: a provider's output is decoded within the same limits
    /// as an upload: a picture wider than any we take is refused from its
    /// header (it compresses to a few hundred bytes), and nonsense is an
    /// error, never a panic.
    #[test]
    fn outputs_past_the_limits_are_refused_unread() {
        let wide = GrayImage::new(IMAGE_SIDE_MAX + 2_000, 4);
        let mut png = Vec::new();
        wide.write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
            .unwrap();
        assert!(png.len() < 10_000, "{} bytes", png.len());
        let refused = decode(&png).unwrap_err();
        assert!(refused.contains("limit"), "{refused}");
        assert!(decode(b"not an image at all").is_err());
        assert!(decode(&[]).is_err());
        let fine = GrayImage::new(40, 30);
        let mut png = Vec::new();
        fine.write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
            .unwrap();
        assert_eq!(decode(&png).unwrap().dimensions(), (40, 30));
    }

    /// The SIMD resize gives image's Triangle filter, up to rounding, up
    /// and down, on real photographs and on a provider's tiny answer.
    #[test]
    fn resize_matches_images_triangle_filter() {
        let mut cases = vec![(photo(), 64, 48), (photo(), 16, 16), (photo(), 300, 7)];
        cases.push((real("rocket.jpg"), 640, 480));
        cases.push((real("rocket.jpg"), 97, 61));
        cases.push((
            imageops::resize(&photo(), 16, 16, imageops::FilterType::Nearest),
            64,
            48,
        ));
        for (img, w, h) in cases {
            let ours = resized(&img, w, h);
            let theirs = imageops::resize(&img, w, h, imageops::FilterType::Triangle);
            assert_eq!(ours.dimensions(), (w, h));
            let worst = ours
                .as_raw()
                .iter()
                .zip(theirs.as_raw())
                .map(|(a, b)| a.abs_diff(*b))
                .max();
            assert!(
                worst <= Some(2),
                "{}x{} to {w}x{h}: {worst:?}",
                img.width(),
                img.height()
            );
        }
        assert_eq!(resized(&photo(), 0, 5).dimensions(), (0, 5));
    }

    /// The separable square filter gives exactly imageproc's dilation and
    /// erosion with `Norm::LInf`, at every size (one pixel, one row, one
    /// column), density and radius the survey could meet.
    #[test]
    fn square_filter_matches_imageproc() {
        use image::{GrayImage, Luma};
        use imageproc::distance_transform::Norm;
        use imageproc::morphology::{dilate, erode};
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let sizes = [(1, 1), (1, 7), (7, 1), (2, 3), (5, 5), (13, 9), (64, 48)];
        for (w, h) in sizes {
            for density in [0u64, 10, 50, 90, 100] {
                for _ in 0..4 {
                    let img = GrayImage::from_fn(w, h, |_, _| {
                        Luma([if next() % 100 < density {
                            (next() % 255 + 1) as u8
                        } else {
                            0
                        }])
                    });
                    for k in 0..=3u8 {
                        // imageproc counts "no such pixel" as w + h away,
                        // so within a k that large it answers wrongly for
                        // an image all of one kind; the filter does not.
                        if w + h <= u32::from(k) {
                            continue;
                        }
                        let what = format!("{w}x{h}, {density}%, k {k}");
                        let want = dilate(&img, Norm::LInf, k);
                        assert_eq!(
                            square(&img, k.into(), Spread::Foreground),
                            want,
                            "dilate {what}"
                        );
                        let want = erode(&img, Norm::LInf, k);
                        assert_eq!(
                            square(&img, k.into(), Spread::Background),
                            want,
                            "erode {what}"
                        );
                    }
                }
            }
        }
    }

    fn photo() -> RgbImage {
        // Sky, lawn, and a brown "dog" in the middle.
        RgbImage::from_fn(120, 80, |x, y| {
            let (dx, dy) = ((x as f64 - 60.0) / 20.0, (y as f64 - 45.0) / 15.0);
            if dx * dx + dy * dy < 1.0 {
                Rgb([150, 95, 50])
            } else if y < 40 {
                Rgb([130, 180, 235])
            } else {
                Rgb([70, 150, 60])
            }
        })
    }

    #[test]
    fn every_medium_changes_the_region_and_nothing_else() {
        let p = photo();
        let r = region(&p, TargetKind::Pet, None).unwrap();
        let f = fraction(&r);
        assert!(f > 0.01 && f < 0.9, "found the dog: {f}");
        let mut renders = Vec::new();
        for s in crate::model::STYLES {
            let out = render(&p, &r, s.id, Strength::Strong);
            let rev = review(&p, &out, &r);
            assert_eq!(rev.verdict, "passed", "{}: {}", s.id, rev.notes);
            renders.push(out);
        }
        // Techniques differ: no two media render the same pixels.
        for i in 0..renders.len() {
            for j in i + 1..renders.len() {
                assert_ne!(
                    renders[i],
                    renders[j],
                    "{} and {}",
                    crate::model::STYLES[i].id,
                    crate::model::STYLES[j].id
                );
            }
        }
    }

    #[test]
    fn strength_changes_how_far() {
        let p = photo();
        let r = region(&p, TargetKind::Pet, None).unwrap();
        let diff = |s| {
            let out = render(&p, &r, "origami", s);
            p.pixels()
                .zip(out.pixels())
                .map(|(a, b)| dist(a, b))
                .sum::<f64>()
        };
        assert!(diff(Strength::Subtle) < diff(Strength::Strong));
    }

    fn real(name: &str) -> RgbImage {
        let path = format!("{}/tests/photos/{name}", env!("CARGO_MANIFEST_DIR"));
        decode(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))).unwrap()
    }

    #[test]
    fn a_clip_has_the_requested_length() {
        let gif = clip("a paper boat", 2, Resolution::P720).unwrap();
        let decoder = image::codecs::gif::GifDecoder::new(Cursor::new(&gif)).unwrap();
        use image::AnimationDecoder;
        let frames = decoder.into_frames().collect_frames().unwrap();
        assert_eq!(frames.len(), 8);
        assert_eq!(frames[0].buffer().dimensions(), (1280, 720));
    }
}

/// What the local checker measured of the photo's subjects: the shapes
/// that stand apart from the border's colours, largest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Survey {
    /// Each shape of at least `SHAPE_MIN` of the photo, largest first.
    pub shapes: Vec<Shape>,
    /// How much of the photo stands apart from the background at all.
    pub foreground: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// Of the photo (0 to 1).
    pub fraction: f64,
    /// The centre of its bounding box, as fractions of width and height.
    pub centre: (f64, f64),
    /// Bounding box width and height, as fractions of the photo's.
    pub size: (f64, f64),
    /// Of its pixels, how many have the colours of skin (0 to 1).
    pub skin: f64,
}

/// A shape smaller than this is detail, not a subject.
const SHAPE_MIN: f64 = 0.015;
/// Side the survey works at: enough for shapes, cheap on any photo.
const SURVEY_SIDE: u32 = 192;

impl Shape {
    /// Where it is, in the words a person uses.
    pub fn position(&self) -> &'static str {
        let (x, y) = self.centre;
        match (x, y) {
            (x, _) if x < 0.36 => "on the left",
            (x, _) if x > 0.64 => "on the right",
            (_, y) if y < 0.36 => "at the top",
            (_, y) if y > 0.64 => "at the bottom",
            _ => "in the middle",
        }
    }
}

/// Skin in YCbCr (Chai and Ngan's ranges): orange, red and brown objects
/// fall outside it, faces and hands of many complexions inside.
fn is_skin(p: &Rgb<u8>) -> bool {
    let (r, g, b) = (f64::from(p[0]), f64::from(p[1]), f64::from(p[2]));
    let cb = 128.0 - 0.168_736 * r - 0.331_264 * g + 0.5 * b;
    let cr = 128.0 + 0.5 * r - 0.418_688 * g - 0.081_312 * b;
    (77.0..=127.0).contains(&cb) && (133.0..=173.0).contains(&cr) && r > 60.0
}

/// What a square window spreads over a binary image.
#[derive(Clone, Copy)]
enum Spread {
    /// Dilation: a pixel is on when any pixel in its window is.
    Foreground,
    /// Erosion: a pixel is off when any pixel in its window is.
    Background,
}

/// Binary dilation or erosion by the square of radius `k` (pixels within
/// Chebyshev distance `k`, inside the image): what imageproc's `dilate` and
/// `erode` give with `Norm::LInf` (non-zero is foreground; 255 or 0 out),
/// as two separable passes. imageproc goes through distance transforms,
/// which were most of the survey's time, once per job.
fn square(img: &GrayImage, k: u32, spread: Spread) -> GrayImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let k = k as usize;
    let hit = |v: u8| match spread {
        Spread::Foreground => v > 0,
        Spread::Background => v == 0,
    };
    let (hit_out, miss_out) = match spread {
        Spread::Foreground => (255, 0),
        Spread::Background => (0, 255),
    };
    let mut out = GrayImage::new(img.width(), img.height());
    if w == 0 || h == 0 {
        return out;
    }
    // First along each row (1 where a hit is within k), then down each
    // column of that; both as ORs of whole shifted rows, without a branch
    // per pixel (an early-exit search per pixel was three times slower).
    let hits: Vec<u8> = img.as_raw().iter().map(|&v| u8::from(hit(v))).collect();
    let mut rows = hits.clone();
    for (line, r) in hits.chunks_exact(w).zip(rows.chunks_exact_mut(w)) {
        for off in 1..=k.min(w - 1) {
            r[..w - off]
                .iter_mut()
                .zip(&line[off..])
                .for_each(|(r, v)| *r |= v);
            r[off..]
                .iter_mut()
                .zip(&line[..w - off])
                .for_each(|(r, v)| *r |= v);
        }
    }
    let mut any = vec![0u8; w];
    let buf: &mut [u8] = &mut out;
    for (y, line) in buf.chunks_exact_mut(w).enumerate() {
        any.fill(0);
        for near in rows[y.saturating_sub(k) * w..((y + k).min(h - 1) + 1) * w].chunks_exact(w) {
            any.iter_mut().zip(near).for_each(|(a, r)| *a |= r);
        }
        for (o, a) in line.iter_mut().zip(&any) {
            *o = if *a > 0 { hit_out } else { miss_out };
        }
    }
    out
}

/// Separates the shapes that stand apart from the background: the border
/// colours' foreground, opened and closed (so texture and thin seams do not
/// count), then its connected regions.
///
/// Long on purpose: one pipeline over one reduced image (the border's
/// colours, the mask, its opening and closing, the labelled regions and
/// their measures), each stage feeding the next; apart, each would hand the
/// next a half-made image.
pub fn survey(photo: &RgbImage) -> Result<Survey, String> {
    use imageproc::region_labelling::{connected_components, Connectivity};
    let small = if photo.width().max(photo.height()) > SURVEY_SIDE {
        imageops::thumbnail(
            photo,
            (photo.width() * SURVEY_SIDE / photo.width().max(photo.height())).max(1),
            (photo.height() * SURVEY_SIDE / photo.width().max(photo.height())).max(1),
        )
    } else {
        photo.clone()
    };
    let (w, h) = small.dimensions();
    let fg = region(&small, TargetKind::Pet, None)?;
    let fg = square(&square(&fg, 1, Spread::Background), 1, Spread::Foreground);
    let fg = square(&square(&fg, 2, Spread::Foreground), 2, Spread::Background);
    let total = f64::from(w) * f64::from(h);
    let foreground = fg.pixels().filter(|p| p[0] > 0).count() as f64 / total;
    let labels = connected_components(&fg, Connectivity::Eight, Luma([0u8]));
    #[derive(Default, Clone, Copy)]
    struct Acc {
        n: u64,
        skin: u64,
        x0: u32,
        y0: u32,
        x1: u32,
        y1: u32,
    }
    // Labels run from 1 up without gaps: a shape's place is its label.
    let mut acc: Vec<Option<Acc>> = Vec::new();
    for (x, y, l) in labels.enumerate_pixels() {
        let Ok(l) = usize::try_from(l[0]) else {
            continue;
        };
        if l == 0 {
            continue;
        }
        if acc.len() <= l {
            acc.resize(l + 1, None);
        }
        let a = acc[l].get_or_insert(Acc {
            x0: x,
            y0: y,
            x1: x,
            y1: y,
            ..Acc::default()
        });
        a.n += 1;
        a.skin += u64::from(is_skin(small.get_pixel(x, y)));
        a.x0 = a.x0.min(x);
        a.y0 = a.y0.min(y);
        a.x1 = a.x1.max(x);
        a.y1 = a.y1.max(y);
    }
    let mut shapes: Vec<Shape> = acc
        .iter()
        .flatten()
        .filter(|a| a.n as f64 / total >= SHAPE_MIN)
        .map(|a| Shape {
            fraction: a.n as f64 / total,
            centre: (
                (f64::from(a.x0 + a.x1) / 2.0 + 0.5) / f64::from(w),
                (f64::from(a.y0 + a.y1) / 2.0 + 0.5) / f64::from(h),
            ),
            size: (
                f64::from(a.x1 - a.x0 + 1) / f64::from(w),
                f64::from(a.y1 - a.y0 + 1) / f64::from(h),
            ),
            skin: a.skin as f64 / a.n as f64,
        })
        .collect();
    shapes.sort_by(|a, b| b.fraction.total_cmp(&a.fraction));
    Ok(Survey { shapes, foreground })
}
