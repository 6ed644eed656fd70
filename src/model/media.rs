//! What a stored output may be: only types we recognise from their bytes
//! (never from what a provider's header claims), so an HTML or SVG answer
//! can never be served from our origin.

/// The content type `bytes` really are, when it is one we serve: PNG,
/// JPEG, WebP, GIF, MP4 or WebM.
pub fn sniff_output(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, ..] => Some("image/png"),
        [0xFF, 0xD8, 0xFF, ..] => Some("image/jpeg"),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some("image/webp"),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some("image/gif"),
        [_, _, _, _, b'f', b't', b'y', b'p', ..] => Some("video/mp4"),
        [0x1A, 0x45, 0xDF, 0xA3, ..] => Some("video/webm"),
        _ => None,
    }
}

/// `content_type` when it is one of the types we serve (as stored, from
/// sniffing); `None` for anything else.
pub fn served_content_type(content_type: &str) -> Option<&'static str> {
    [
        "image/png",
        "image/jpeg",
        "image/webp",
        "image/gif",
        "video/mp4",
        "video/webm",
    ]
    .into_iter()
    .find(|t| content_type.eq_ignore_ascii_case(t))
}

#[cfg(test)]
mod tests {
    use super::sniff_output;

    #[test]
    fn only_what_the_bytes_say() {
        assert_eq!(sniff_output(b"\x89PNG\r\n\x1a\n...."), Some("image/png"));
        assert_eq!(sniff_output(&[0xFF, 0xD8, 0xFF, 0xE0]), Some("image/jpeg"));
        assert_eq!(sniff_output(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff_output(b"GIF89a......"), Some("image/gif"));
        assert_eq!(sniff_output(b"\0\0\0\x18ftypmp42"), Some("video/mp4"));
        assert_eq!(
            sniff_output(&[0x1A, 0x45, 0xDF, 0xA3, 0x01]),
            Some("video/webm")
        );
        for bad in [
            &b"<html><script>alert(1)</script>"[..],
            b"<svg onload=alert(1)>",
            b"<?xml version='1.0'?><svg/>",
            b"%PDF-1.7",
            b"",
            b"GIF",
        ] {
            assert_eq!(sniff_output(bad), None);
        }
    }
}
