//! The local checker's eyes: two trained detectors, run on the CPU by tract
//! (pure Rust), loaded once per process from the models folder.
//!
//! - CenterNet (MobileNetV3, COCO's 80 kinds) finds people, ten kinds of
//!   animal and everyday things, each with a box and a score.
//! - BlazeFace (MediaPipe, full range) finds faces, near or far, which
//!   CenterNet can miss in a close-up portrait.
//!
//! Both are optional: a missing file leaves that detector out and the
//! checker says what it could not look for (`Sight::looked`). Where the
//! weights come from, their licences and how they were converted to ONNX is
//! in `models/README.md`.

use image::RgbImage;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use tract_onnx::prelude::*;

/// CenterNet's file in the models folder.
pub const OBJECTS_FILE: &str = "centernet_heads.onnx";
/// BlazeFace's file in the models folder.
pub const FACES_FILE: &str = "face_detection_full_range.onnx";

/// The longest side CenterNet looks at. Its input sides are multiples of
/// 32; 320 finds a pet a tenth of the photo wide and costs ~60 ms.
const OBJECTS_SIDE: u32 = 320;
/// BlazeFace full range takes a 192 px square.
const FACES_SIDE: u32 = 192;
/// Photos whose sight is remembered (`Detector::seen`), most recent first.
const SEEN_MAX: usize = 256;
/// A CenterNet peak below this is not reported at all.
const PEAK_MIN: f32 = 0.2;

/// COCO's 80 kinds, in the model's order.
const COCO: [&str; 80] = [
    "person",
    "bicycle",
    "car",
    "motorcycle",
    "airplane",
    "bus",
    "train",
    "truck",
    "boat",
    "traffic light",
    "fire hydrant",
    "stop sign",
    "parking meter",
    "bench",
    "bird",
    "cat",
    "dog",
    "horse",
    "sheep",
    "cow",
    "elephant",
    "bear",
    "zebra",
    "giraffe",
    "backpack",
    "umbrella",
    "handbag",
    "tie",
    "suitcase",
    "frisbee",
    "skis",
    "snowboard",
    "sports ball",
    "kite",
    "baseball bat",
    "baseball glove",
    "skateboard",
    "surfboard",
    "tennis racket",
    "bottle",
    "wine glass",
    "cup",
    "fork",
    "knife",
    "spoon",
    "bowl",
    "banana",
    "apple",
    "sandwich",
    "orange",
    "broccoli",
    "carrot",
    "hot dog",
    "pizza",
    "donut",
    "cake",
    "chair",
    "couch",
    "potted plant",
    "bed",
    "dining table",
    "toilet",
    "tv",
    "laptop",
    "mouse",
    "remote",
    "keyboard",
    "cell phone",
    "microwave",
    "oven",
    "toaster",
    "sink",
    "refrigerator",
    "book",
    "clock",
    "vase",
    "scissors",
    "teddy bear",
    "hair drier",
    "toothbrush",
];

/// What a detection is, in the three kinds the targets name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Person,
    /// One of COCO's ten animals, or a teddy bear: the model calls furry
    /// faces it does not know (a mandrill, a raccoon) by that name.
    Animal,
    /// Anything else COCO knows: a cup, a car, a chair.
    Thing,
    /// A face (BlazeFace): a person, even when CenterNet saw no body.
    Face,
}

/// A box as fractions of the photo's width and height (0 to 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Frame {
    pub x0: f64,
    pub y0: f64,
    pub x1: f64,
    pub y1: f64,
}

impl Frame {
    pub fn area(&self) -> f64 {
        (self.x1 - self.x0).max(0.0) * (self.y1 - self.y0).max(0.0)
    }

    pub fn centre(&self) -> (f64, f64) {
        ((self.x0 + self.x1) / 2.0, (self.y0 + self.y1) / 2.0)
    }

    fn intersection(&self, o: &Frame) -> f64 {
        Frame {
            x0: self.x0.max(o.x0),
            y0: self.y0.max(o.y0),
            x1: self.x1.min(o.x1),
            y1: self.y1.min(o.y1),
        }
        .area()
    }

    /// Intersection over union, for suppressing duplicates.
    pub fn iou(&self, o: &Frame) -> f64 {
        let i = self.intersection(o);
        i / (self.area() + o.area() - i).max(1e-9)
    }

    /// How much of this box lies inside `o` (0 to 1).
    pub fn inside(&self, o: &Frame) -> f64 {
        self.intersection(o) / self.area().max(1e-9)
    }

    fn clamped(self) -> Frame {
        let c = |v: f64| v.clamp(0.0, 1.0);
        Frame {
            x0: c(self.x0),
            y0: c(self.y0),
            x1: c(self.x1),
            y1: c(self.y1),
        }
    }
}

/// One thing a detector found.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub kind: Kind,
    /// COCO's name for it ("dog", "cup"), or "face".
    pub label: &'static str,
    pub score: f32,
    pub frame: Frame,
}

/// Which detectors could look at a photo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Looked {
    pub objects: bool,
    pub faces: bool,
}

/// What the detectors saw, best first within each kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Sight {
    pub found: Vec<Found>,
    /// The highest animal score anywhere, even below the reporting line: a
    /// faint animal-like peak means "maybe an animal it does not know".
    pub animal_hint: f32,
    pub looked: Looked,
}

impl Sight {
    pub fn of(&self, kind: Kind) -> impl Iterator<Item = &Found> {
        self.found.iter().filter(move |f| f.kind == kind)
    }
}

type Plan = Arc<TypedRunnableModel>;

/// The loaded detectors. CenterNet takes any size that is a multiple of
/// 32, so each input shape gets its own optimised plan, made on first use
/// (a few shapes cover every aspect ratio at `OBJECTS_SIDE`).
pub struct Detector {
    objects: Option<InferenceModel>,
    object_plans: Mutex<HashMap<(usize, usize), Plan>>,
    faces: Option<Plan>,
    /// What the detectors saw in the last `SEEN_MAX` photos, by a SHA-256
    /// of their pixels. A job's look before paying and its review look at
    /// the same photo, a repair looks at it again, and a photo edited in
    /// several styles is looked at once per job: each is 40 to 90 ms of a
    /// core, a digest under 2 ms. The detectors are a pure function of
    /// the pixels, so a remembered sight is the one they would give again;
    /// a sight is a few boxes, so 256 of them are a few hundred KiB.
    seen: Mutex<VecDeque<([u8; 32], Sight)>>,
    /// Why a model is missing, for the log and the observation.
    pub missing: Vec<String>,
}

/// Where the models are: `TOLLGATE_MODELS_DIR`, else `models/` in the
/// working directory, else the one in the source tree this was built from.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TOLLGATE_MODELS_DIR") {
        return PathBuf::from(dir);
    }
    let here = PathBuf::from("models");
    if here.join(OBJECTS_FILE).exists() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models")
}

/// The process's detectors, loaded on first use.
pub fn detector() -> &'static Detector {
    static DETECTOR: OnceLock<Detector> = OnceLock::new();
    DETECTOR.get_or_init(|| {
        let d = Detector::load(&models_dir());
        for m in &d.missing {
            tracing::warn!("local checker: {m}; it checks less without it");
        }
        d
    })
}

impl Detector {
    pub fn load(dir: &Path) -> Detector {
        let mut missing = Vec::new();
        let objects = match tract_onnx::onnx().model_for_path(dir.join(OBJECTS_FILE)) {
            Ok(m) => Some(m),
            Err(e) => {
                missing.push(format!("no object detector ({}: {e})", OBJECTS_FILE));
                None
            }
        };
        let faces = match faces_plan(&dir.join(FACES_FILE)) {
            Ok(p) => Some(p),
            Err(e) => {
                missing.push(format!("no face detector ({}: {e})", FACES_FILE));
                None
            }
        };
        Detector {
            objects,
            object_plans: Mutex::new(HashMap::new()),
            faces,
            missing,
            seen: Mutex::new(VecDeque::new()),
        }
    }

    /// Both detectors on one photo, or what they saw when this photo's
    /// pixels were looked at lately. A sight in which a loaded detector
    /// failed is not remembered: the next look tries it again.
    pub fn look(&self, photo: &RgbImage) -> Sight {
        let digest = pixels_digest(photo);
        if let Some(sight) = self.remembered(&digest) {
            return sight;
        }
        let sight = self.look_afresh(photo);
        let complete = sight.looked.objects == self.objects.is_some()
            && sight.looked.faces == self.faces.is_some();
        if complete {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.push_front((digest, sight.clone()));
            seen.truncate(SEEN_MAX);
        }
        sight
    }

    /// A remembered sight of these pixels, moved to the front.
    fn remembered(&self, digest: &[u8; 32]) -> Option<Sight> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let at = seen.iter().position(|(d, _)| d == digest)?;
        let entry = seen.remove(at)?;
        let sight = entry.1.clone();
        seen.push_front(entry);
        Some(sight)
    }

    /// Forgets every remembered sight (to time the detectors themselves).
    pub fn forget(&self) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// How many photos' sights are remembered.
    pub fn remembered_len(&self) -> usize {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Both detectors on one photo. A detector that fails on it is treated
    /// as absent for this photo, never as "nothing there".
    fn look_afresh(&self, photo: &RgbImage) -> Sight {
        let mut found = Vec::new();
        let mut looked = Looked {
            objects: false,
            faces: false,
        };
        let mut animal_hint = 0.0;
        if let Ok((objects, hint)) = self.objects(photo) {
            found.extend(objects);
            animal_hint = hint;
            looked.objects = true;
        }
        if let Some(Ok(faces)) = self.faces.as_ref().map(|p| faces(p, photo)) {
            found.extend(faces);
            looked.faces = true;
        }
        found.sort_by(|a, b| b.score.total_cmp(&a.score));
        Sight {
            found,
            animal_hint,
            looked,
        }
    }

    fn object_plan(&self, h: usize, w: usize) -> TractResult<Option<Plan>> {
        let Some(model) = &self.objects else {
            return Ok(None);
        };
        let mut plans = self.object_plans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = plans.get(&(h, w)) {
            return Ok(Some(p.clone()));
        }
        let plan = model
            .clone()
            .with_input_fact(0, f32::fact([1, h, w, 3]).into())?
            .into_optimized()?
            .into_runnable()?;
        plans.insert((h, w), plan.clone());
        Ok(Some(plan))
    }

    /// CenterNet: peaks of each kind's heat map (local maxima over 3x3),
    /// each with the box the size head gives, duplicates suppressed per
    /// kind. Also the strongest animal peak at all.
    fn objects(&self, photo: &RgbImage) -> TractResult<(Vec<Found>, f32)> {
        let (pw, ph) = photo.dimensions();
        let long = pw.max(ph).max(1);
        let side = |v: u32| {
            ((f64::from(v) * f64::from(OBJECTS_SIDE) / f64::from(long) / 32.0).round() as u32)
                .max(1)
                * 32
        };
        let (w, h) = (side(pw), side(ph));
        let Some(plan) = self.object_plan(h as usize, w as usize)? else {
            return Err(TractError::msg("no object detector"));
        };
        let small = super::resized(photo, w, h);
        // Plain slices, not ndarray's indexing: tests run this unoptimised.
        let pixels: Vec<f32> = small.as_raw().iter().map(|&v| f32::from(v)).collect();
        let input = Tensor::from_shape(&[1, h as usize, w as usize, 3], &pixels)?;
        let out = plan.run(tvec!(input.into()))?;
        let shape = out[0].shape().to_vec();
        let (gh, gw, kinds): (usize, usize, usize) = (shape[1], shape[2], shape[3]);
        let (heat, sizes) = (
            out[0].to_plain_array_view::<f32>()?,
            out[1].to_plain_array_view::<f32>()?,
        );
        let contiguous = || TractError::msg("an output is not contiguous");
        let (heat, sizes) = (
            heat.as_slice().ok_or_else(contiguous)?,
            sizes.as_slice().ok_or_else(contiguous)?,
        );
        let at = |y: usize, x: usize, k: usize| heat[(y * gw + x) * kinds + k];
        let mut peaks: Vec<Found> = Vec::new();
        let mut animal_hint = 0f32;
        for y in 0..gh {
            for x in 0..gw {
                for (k, &label) in COCO.iter().enumerate().take(kinds) {
                    let v = at(y, x, k);
                    let kind = kind_of(k);
                    if kind == Kind::Animal {
                        animal_hint = animal_hint.max(v);
                    }
                    if v < PEAK_MIN {
                        continue;
                    }
                    let is_peak = (y.saturating_sub(1)..=(y + 1).min(gh - 1)).all(|yy| {
                        (x.saturating_sub(1)..=(x + 1).min(gw - 1)).all(|xx| at(yy, xx, k) <= v)
                    });
                    if !is_peak {
                        continue;
                    }
                    let s = |i: usize| f64::from(sizes[(y * gw + x) * 4 + i]);
                    let (cx, cy) = (x as f64 * 4.0, y as f64 * 4.0);
                    let frame = Frame {
                        x0: (cx - s(0)) / f64::from(w),
                        y0: (cy - s(1)) / f64::from(h),
                        x1: (cx + s(2)) / f64::from(w),
                        y1: (cy + s(3)) / f64::from(h),
                    }
                    .clamped();
                    peaks.push(Found {
                        kind,
                        label,
                        score: v,
                        frame,
                    });
                }
            }
        }
        Ok((suppress(peaks, 0.4), animal_hint))
    }
}

fn kind_of(coco: usize) -> Kind {
    match coco {
        0 => Kind::Person,
        14..=23 | 77 => Kind::Animal,
        _ => Kind::Thing,
    }
}

/// Greedy non-maximum suppression: of boxes of one label overlapping more
/// than `iou`, the best scored stays; so does the best of one kind over
/// nearly the same box (one dog read as dog, cow and sheep is one animal).
fn suppress(mut found: Vec<Found>, iou: f64) -> Vec<Found> {
    found.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut kept: Vec<Found> = Vec::new();
    for f in found {
        // A box mostly inside a better one of the same kind is a part of
        // it (a dog's head), except for people, who stand in front of
        // each other.
        let same = |k: &Found| {
            let o = k.frame.iou(&f.frame);
            (k.label == f.label && o > iou)
                || (k.kind == f.kind && o > 0.6)
                || (k.kind == f.kind && f.kind != Kind::Person && f.frame.inside(&k.frame) > 0.8)
        };
        if !kept.iter().any(same) {
            kept.push(f);
        }
    }
    kept
}

fn faces_plan(path: &Path) -> TractResult<Plan> {
    let side = FACES_SIDE as usize;
    tract_onnx::onnx()
        .model_for_path(path)?
        .with_input_fact(0, f32::fact([1, side, side, 3]).into())?
        .into_optimized()?
        .into_runnable()
}

/// BlazeFace full range: the photo letterboxed into a square (black, as
/// MediaPipe pads), one anchor per cell of a 48x48 grid, a box per anchor
/// and a logit; faces above even odds, duplicates suppressed.
fn faces(plan: &Plan, photo: &RgbImage) -> TractResult<Vec<Found>> {
    let (pw, ph) = photo.dimensions();
    let long = f64::from(pw.max(ph).max(1));
    let scale = f64::from(FACES_SIDE) / long;
    let (w, h) = (
        ((f64::from(pw) * scale).round() as u32).clamp(1, FACES_SIDE),
        ((f64::from(ph) * scale).round() as u32).clamp(1, FACES_SIDE),
    );
    let small = super::resized(photo, w, h);
    let side = FACES_SIDE as usize;
    let input: Tensor = tract_ndarray::Array4::from_shape_fn((1, side, side, 3), |(_, y, x, c)| {
        if (x as u32) < w && (y as u32) < h {
            f32::from(small.get_pixel(x as u32, y as u32)[c]) / 127.5 - 1.0
        } else {
            -1.0
        }
    })
    .into();
    let out = plan.run(tvec!(input.into()))?;
    let (boxes, logits) = if out[0].shape().last() == Some(&16) {
        (&out[0], &out[1])
    } else {
        (&out[1], &out[0])
    };
    let boxes = boxes.to_plain_array_view::<f32>()?;
    let logits = logits.to_plain_array_view::<f32>()?;
    let grid = 48usize;
    let s = f64::from(FACES_SIDE);
    // From the square's fractions to the photo's.
    let (fx, fy) = (long / f64::from(pw.max(1)), long / f64::from(ph.max(1)));
    let mut found = Vec::new();
    for a in 0..grid * grid {
        let logit = logits[[0, a, 0]].clamp(-80.0, 80.0);
        let score = 1.0 / (1.0 + (-logit).exp());
        if score < 0.5 {
            continue;
        }
        let (ax, ay) = (
            ((a % grid) as f64 + 0.5) / grid as f64,
            ((a / grid) as f64 + 0.5) / grid as f64,
        );
        let r = |i: usize| f64::from(boxes[[0, a, i]]) / s;
        let (cx, cy, bw, bh) = (r(0) + ax, r(1) + ay, r(2), r(3));
        found.push(Found {
            kind: Kind::Face,
            label: "face",
            score,
            frame: Frame {
                x0: (cx - bw / 2.0) * fx,
                y0: (cy - bh / 2.0) * fy,
                x1: (cx + bw / 2.0) * fx,
                y1: (cy + bh / 2.0) * fy,
            }
            .clamped(),
        });
    }
    Ok(suppress(found, 0.3))
}

/// A photo's identity for the remembered sights: its size and its pixels.
fn pixels_digest(photo: &RgbImage) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(photo.width().to_le_bytes());
    h.update(photo.height().to_le_bytes());
    h.update(photo.as_raw());
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;

    fn photo(seed: u8) -> RgbImage {
        RgbImage::from_fn(96, 64, |x, y| Rgb([seed, (x * 2) as u8, (y * 3) as u8]))
    }

    #[test]
    fn a_photo_looked_at_again_is_remembered_by_its_pixels() {
        let d = Detector::load(&models_dir());
        let first = d.look(&photo(1));
        assert_eq!(d.remembered_len(), 1);
        assert_eq!(d.look(&photo(1)), first, "the same pixels, the same sight");
        assert_eq!(d.remembered_len(), 1, "looked up, not looked at again");
        let mut other = photo(1);
        other.put_pixel(5, 5, Rgb([0, 0, 0]));
        d.look(&other);
        assert_eq!(d.remembered_len(), 2, "one pixel makes another photo");
    }

    #[test]
    fn remembered_sights_are_bounded_and_keep_the_latest() {
        let d = Detector::load(Path::new("/nonexistent"));
        for seed in 0..=255u8 {
            d.look(&photo(seed));
        }
        d.look(&RgbImage::from_pixel(8, 8, Rgb([9, 9, 9])));
        assert_eq!(d.remembered_len(), SEEN_MAX);
        assert!(d.remembered(&pixels_digest(&photo(255))).is_some());
        assert!(
            d.remembered(&pixels_digest(&photo(0))).is_none(),
            "the oldest went"
        );
    }
}
