//! Images nobody vetted: a person's upload and a provider's output. On any
//! bytes, the checks answer (a type refused, an image that cannot be read,
//! one too large) and never panic; nothing past the side and pixel limits
//! is decoded, whatever its header claims (issue 29, 8).

use crate::model::{served_content_type, sniff_output};
use crate::providers::local::{decode, EDIT_SIDE_MAX, IMAGE_PIXELS_MAX, IMAGE_SIDE_MAX};
use crate::usecases::assets::inspect;
use image::{ImageFormat, RgbImage};
use proptest::prelude::*;
use std::io::Cursor;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";
const JPEG: &[u8] = &[0xFF, 0xD8, 0xFF];

/// Bytes that start as an image says it starts, then anything.
fn magic_then_anything() -> impl Strategy<Value = Vec<u8>> {
    let magic = prop::sample::select(vec![
        PNG.to_vec(),
        JPEG.to_vec(),
        b"RIFF\0\0\0\0WEBP".to_vec(),
        b"GIF89a".to_vec(),
    ]);
    (magic, prop::collection::vec(any::<u8>(), 0..512)).prop_map(|(mut m, tail)| {
        m.extend(tail);
        m
    })
}

/// A real small picture, encoded, then damaged: a few bytes changed and
/// perhaps cut short. This reaches deep into each decoder.
fn damaged_picture() -> impl Strategy<Value = Vec<u8>> {
    let format = prop::sample::select(vec![ImageFormat::Png, ImageFormat::Jpeg, ImageFormat::WebP]);
    let damage = prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8);
    (
        1u32..40,
        1u32..40,
        any::<u8>(),
        format,
        damage,
        prop::option::of(any::<prop::sample::Index>()),
    )
        .prop_map(|(w, h, shade, format, damage, cut)| {
            let img = RgbImage::from_fn(w, h, |x, y| {
                image::Rgb([shade, (x * 7) as u8, (y * 13) as u8])
            });
            let mut bytes = Vec::new();
            img.write_to(&mut Cursor::new(&mut bytes), format)
                .expect("encodes");
            for (at, value) in damage {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len()).max(1));
            }
            bytes
        })
}

/// A PNG whose header claims `w`×`h`, with a few bytes of pixels: what a
/// decompression bomb looks like from the outside.
fn png_claiming(w: u32, h: u32, pixels: &[u8]) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend((data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend(kind);
        out.extend(data);
        let crc = crc32(&out[start..]);
        out.extend(crc.to_be_bytes());
    }
    let mut ihdr = Vec::new();
    ihdr.extend(w.to_be_bytes());
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]); // 8-bit RGB, no interlace
    let mut out = PNG.to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", pixels);
    chunk(&mut out, b"IEND", &[]);
    out
}

/// CRC-32 (IEEE), as PNG chunks carry it.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn any_image_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        magic_then_anything(),
        damaged_picture(),
    ]
}

fn within_limits(w: u32, h: u32) -> bool {
    (1..=IMAGE_SIDE_MAX).contains(&w)
        && (1..=IMAGE_SIDE_MAX).contains(&h)
        && u64::from(w) * u64::from(h) <= IMAGE_PIXELS_MAX
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// An upload, whatever its bytes and declared type: accepted only as
    /// what the bytes are, within the limits; otherwise refused.
    #[test]
    fn an_upload_is_checked_never_a_panic(
        bytes in any_image_bytes(),
        declared in prop::sample::select(vec!["image/png", "image/jpeg", "image/webp", "image/gif"]),
    ) {
        if let Ok((content_type, w, h)) = inspect(&bytes, Some(declared)) {
            prop_assert_eq!(content_type, declared);
            prop_assert!(within_limits(w, h), "{}×{} accepted", w, h);
            prop_assert_eq!(sniff_output(&bytes), Some(content_type));
        }
    }

    /// A provider's output, whatever its bytes: read at most at the edit
    /// size, or refused.
    #[test]
    fn an_output_is_decoded_within_the_edit_size_or_refused(bytes in any_image_bytes()) {
        if let Ok(img) = decode(&bytes) {
            prop_assert!(img.width().max(img.height()) <= EDIT_SIDE_MAX);
            prop_assert!(img.width() >= 1 && img.height() >= 1);
        }
    }

    /// The type of stored output is what its first bytes say, or nothing.
    #[test]
    fn sniffing_reads_only_the_magic(bytes in any_image_bytes()) {
        match sniff_output(&bytes) {
            Some("image/png") => prop_assert!(bytes.starts_with(PNG)),
            Some("image/jpeg") => prop_assert!(bytes.starts_with(JPEG)),
            Some(other) => prop_assert_eq!(served_content_type(other), Some(other)),
            None => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A header claiming more than the limits is refused from the header:
    /// the test would run out of memory or time if it were decoded.
    #[test]
    fn a_header_claiming_too_much_is_refused_before_decoding(
        w in prop_oneof![1u32..64, 1u32..=u32::MAX / 2],
        h in prop_oneof![1u32..64, 1u32..=u32::MAX / 2],
        pixels in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let bytes = png_claiming(w, h, &pixels);
        let answer = inspect(&bytes, Some("image/png"));
        if !within_limits(w, h) {
            prop_assert!(answer.is_err(), "{}×{} was accepted", w, h);
        }
        let _ = decode(&bytes);
    }
}
