//! The local image work done once per photo, not once per job: a decoded
//! image by a SHA-256 of its encoded bytes, and the look before paying by
//! its whole input (photo, mask, target). A job looks at its photo before
//! paying, checks the output against it, and reviews it; a repair looks
//! again; a photo edited in several styles is one photo. Decoding a
//! 500×500 progressive JPEG costs ~5 ms of a core and the look's region
//! several more; hashing its bytes costs ~0.1 ms. Both are pure functions
//! of their input, so a remembered answer is the one they would give again.
//! Only answers are kept (an error is recomputed), within a count and a
//! budget of bytes, the most recently used first.

use super::look::{self, Target};
use super::{decode, mask_region, NotReady};
use crate::model::TargetKind;
use image::{GrayImage, RgbImage};
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Decoded images kept, at most, and their pixels' bytes.
const DECODED_MAX: usize = 64;
const DECODED_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Looks kept, at most, and the bytes of their photos, masks and regions.
const LOOKS_MAX: usize = 64;
const LOOKS_BYTES_MAX: usize = 64 * 1024 * 1024;

static DECODED: Memory<[u8; 32], Arc<RgbImage>> = Memory::new(DECODED_MAX, DECODED_BYTES_MAX);
static LOOKS: Memory<LookKey, Arc<Looked>> = Memory::new(LOOKS_MAX, LOOKS_BYTES_MAX);

/// A bounded memory, most recently used first. A few dozen entries are
/// scanned faster than they are hashed, so a list is enough.
pub struct Memory<K, V> {
    entries: Mutex<VecDeque<(K, V, usize)>>,
    count_max: usize,
    bytes_max: usize,
}

impl<K: PartialEq, V: Clone> Memory<K, V> {
    pub const fn new(count_max: usize, bytes_max: usize) -> Memory<K, V> {
        Memory {
            entries: Mutex::new(VecDeque::new()),
            count_max,
            bytes_max,
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, VecDeque<(K, V, usize)>> {
        // What is kept stays whole under a panic elsewhere: each change is
        // one push or one removal.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value kept for `key`, moved to the front.
    pub fn get(&self, key: &K) -> Option<V> {
        let mut entries = self.entries();
        let at = entries.iter().position(|(k, _, _)| k == key)?;
        let entry = entries.remove(at)?;
        let value = entry.1.clone();
        entries.push_front(entry);
        Some(value)
    }

    /// Keeps `value` (weighing `bytes`) in front, forgetting the least
    /// recently used past either bound. One heavier than the whole budget
    /// is not kept.
    pub fn keep(&self, key: K, value: V, bytes: usize) {
        if bytes > self.bytes_max {
            return;
        }
        let mut entries = self.entries();
        entries.retain(|(k, _, _)| *k != key);
        entries.push_front((key, value, bytes));
        let mut total: usize = entries.iter().map(|e| e.2).sum();
        while entries.len() > self.count_max || total > self.bytes_max {
            let Some(last) = entries.pop_back() else {
                break;
            };
            total -= last.2;
        }
    }

    pub fn len(&self) -> usize {
        self.entries().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&self) {
        self.entries().clear();
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// `decode`, once per distinct image.
pub fn decoded(bytes: &[u8]) -> Result<Arc<RgbImage>, String> {
    let key = digest(bytes);
    if let Some(image) = DECODED.get(&key) {
        return Ok(image);
    }
    let image = Arc::new(decode(bytes)?);
    DECODED.keep(key, image.clone(), image.as_raw().len());
    Ok(image)
}

#[derive(PartialEq)]
struct LookKey {
    photo: [u8; 32],
    mask: Option<[u8; 32]>,
    target: TargetKind,
    description: String,
}

/// The look before paying at one photo, and what the steps after it need.
pub struct Looked {
    pub photo: Arc<RgbImage>,
    mask: Option<GrayImage>,
    target_kind: TargetKind,
    pub target: Result<Target, NotReady>,
}

impl Looked {
    /// The region an edit changes and its review measures
    /// (`look::target_region`, without looking again).
    pub fn region(&self) -> Result<GrayImage, String> {
        look::region_of(
            &self.target,
            &self.photo,
            self.target_kind,
            self.mask.as_ref(),
        )
    }

    fn bytes(&self) -> usize {
        let region = self.target.as_ref().map_or(0, |t| t.region.len());
        self.photo.len() + self.mask.as_ref().map_or(0, |m| m.len()) + region
    }
}

/// The look at a photo (decoded within the limits) for a target, once per
/// distinct photo, mask and target. The error: the photo or the mask
/// could not be read.
pub fn looked(
    photo: &[u8],
    target: TargetKind,
    description: &str,
    mask: Option<&[u8]>,
) -> Result<Arc<Looked>, String> {
    let key = LookKey {
        photo: digest(photo),
        mask: mask.map(digest),
        target,
        description: description.to_string(),
    };
    if let Some(looked) = LOOKS.get(&key) {
        return Ok(looked);
    }
    let photo = decoded(photo)?;
    let mask = mask.map(|m| mask_region(&photo, m)).transpose()?;
    let looked = Arc::new(Looked {
        target: look::look(&photo, target, description, mask.as_ref()),
        photo,
        mask,
        target_kind: target,
    });
    LOOKS.keep(key, looked.clone(), looked.bytes());
    Ok(looked)
}

/// Forgets every decoded image and look (to time the work itself).
pub fn forget() {
    DECODED.clear();
    LOOKS.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_keeps_the_latest_within_its_count_and_bytes() {
        let m: Memory<u32, u32> = Memory::new(3, 100);
        for k in 0..5 {
            m.keep(k, k * 10, 10);
        }
        assert_eq!(m.len(), 3, "the count bounds it");
        assert_eq!(m.get(&4), Some(40));
        assert_eq!(m.get(&1), None, "the least recently used went first");
        assert_eq!(m.get(&2), Some(20));
        m.keep(5, 50, 85);
        assert_eq!(m.get(&5), Some(50));
        assert_eq!(m.get(&4), None, "the budget keeps 85 + 10, the oldest went");
        assert_eq!(m.get(&2), Some(20), "the more recently used stayed");
        m.keep(6, 60, 101);
        assert_eq!(m.get(&6), None, "heavier than the budget is not kept");
        m.keep(2, 21, 10);
        assert_eq!(
            m.get(&2),
            Some(21),
            "a key is kept once, with its latest value"
        );
        assert_eq!(m.len(), 2);
    }

    fn png(img: &RgbImage) -> Vec<u8> {
        super::super::encode_png(img).unwrap()
    }

    #[test]
    fn a_look_is_the_one_made_afresh_and_is_made_once() {
        let photo = RgbImage::from_fn(96, 72, |x, y| {
            let inside = (30..66).contains(&x) && (20..52).contains(&y);
            image::Rgb(if inside { [200, 60, 40] } else { [40, 90, 200] })
        });
        let bytes = png(&photo);
        let first = looked(&bytes, TargetKind::Pet, "", None).unwrap();
        let again = looked(&bytes, TargetKind::Pet, "", None).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "looked up, not looked at again"
        );
        let afresh = look::look(&decode(&bytes).unwrap(), TargetKind::Pet, "", None);
        assert_eq!(first.target, afresh);
        let other = looked(&bytes, TargetKind::Person, "", None).unwrap();
        assert!(
            !Arc::ptr_eq(&first, &other),
            "another target is another look"
        );
        assert!(
            Arc::ptr_eq(&first.photo, &other.photo),
            "one photo, decoded once"
        );
        let region = look::target_region(&first.photo, TargetKind::Pet, "", None).unwrap();
        assert_eq!(first.region().unwrap(), region);
        assert!(looked(b"not an image", TargetKind::Pet, "", None).is_err());
    }
}
