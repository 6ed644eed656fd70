//! The look before paying, on the CPU (rule 14): from what the detectors
//! saw (`detect`), is the named target there, and is it clear which one?
//! It owns the region an edit changes and a review measures, so the three
//! steps agree about what "the person" or "the pet" is.
//!
//! It answers as a careful person would. A wrong refusal costs someone
//! their order; a wrong pass costs one local render. So it refuses only
//! when the named kind is clearly absent (the detector that knows that kind
//! looked and saw something else, or nothing stands out at all), when
//! several candidates of that kind are found and nothing in the request says
//! which, or when a painted area is empty or everything. When it cannot
//! tell (an animal its model does not know, a photo too small, a detector
//! missing), it lets the order through and says what it could not check.

use super::detect::{self, Detector, Found, Frame, Kind, Sight};
use super::{fraction, percent, region, square, survey, NotReady, Spread, Survey};
use crate::model::TargetKind;
use image::{GrayImage, Luma, RgbImage};

/// Below these scores a detection is not taken as seen.
const PERSON_MIN: f32 = 0.3;
const FACE_MIN: f32 = 0.6;
const ANIMAL_MIN: f32 = 0.2;
const THING_MIN: f32 = 0.35;
/// A faint animal-like peak: maybe an animal the model does not know.
const ANIMAL_HINT: f32 = 0.12;
/// A candidate this share of the largest one's size is a rival to it.
const RIVAL: f64 = 0.35;
/// A photo this small cannot be checked.
const SIDE_MIN: u32 = 48;

/// What the look found, when the edit may go ahead.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The pixels the edit changes (255) and the review measures.
    pub region: GrayImage,
    /// Of the photo (0 to 1).
    pub fraction: f64,
    /// What it saw, in words, for the edit and the person.
    pub observation: String,
}

/// Where a box is, in the words a person uses.
pub fn position((x, y): (f64, f64)) -> &'static str {
    match (x, y) {
        (x, _) if x < 0.36 => "on the left",
        (x, _) if x > 0.64 => "on the right",
        (_, y) if y < 0.36 => "at the top",
        (_, y) if y > 0.64 => "at the bottom",
        _ => "in the middle",
    }
}

/// The look: the target's region, or why the order should not go ahead.
pub fn look(
    photo: &RgbImage,
    target: TargetKind,
    description: &str,
    mask: Option<&GrayImage>,
) -> Result<Target, NotReady> {
    look_with(detect::detector(), photo, target, description, mask)
}

/// The look with the given detectors (a test gives it none).
pub fn look_with(
    detector: &Detector,
    photo: &RgbImage,
    target: TargetKind,
    description: &str,
    mask: Option<&GrayImage>,
) -> Result<Target, NotReady> {
    let words = Words::new(target, description);
    if target == TargetKind::Area {
        return painted(mask.ok_or_else(|| words.cannot("an area edit needs its mask"))?);
    }
    let (w, h) = photo.dimensions();
    if w.min(h) < SIDE_MIN {
        return Ok(unchecked(
            photo,
            target,
            format!("The photo is {w}x{h} pixels, too small to check for {}; the edit goes ahead on what stands apart from its edges.", words.subject),
        ));
    }
    let sight = detector.look(photo);
    match target {
        TargetKind::Person | TargetKind::Pet => subject(photo, &sight, &words, mask),
        _ => background(photo, &sight, &words),
    }
}

/// The region alone, for the edit, the review and a repair's comparison:
/// what the look chose, or (when the look would now refuse, which a
/// reviewer may have overruled) what stands apart from the photo's edges.
pub fn target_region(
    photo: &RgbImage,
    target: TargetKind,
    description: &str,
    mask: Option<&GrayImage>,
) -> Result<GrayImage, String> {
    region_of(&look(photo, target, description, mask), photo, target, mask)
}

/// The region of a look already made: the target's, or when the look
/// refused, the painted mask or the plain finder's.
pub fn region_of(
    looked: &Result<Target, NotReady>,
    photo: &RgbImage,
    target: TargetKind,
    mask: Option<&GrayImage>,
) -> Result<GrayImage, String> {
    match looked {
        Ok(t) => Ok(t.region.clone()),
        Err(_) if target == TargetKind::Area => Ok(mask.cloned().unwrap_or_default()),
        Err(_) => region(photo, target, None),
    }
}

/// The words of the answers: what the person called the target.
struct Words {
    /// "the pet", or what they typed, in quotes.
    subject: String,
    /// "person" or "animal": the kind the detector looks for.
    kind: &'static str,
    description: String,
}

impl Words {
    fn new(target: TargetKind, description: &str) -> Words {
        let what = match target {
            TargetKind::Pet => "pet",
            TargetKind::Person => "person",
            TargetKind::Background => "background",
            TargetKind::Area => "painted area",
        };
        let subject = if description.trim().is_empty() {
            format!("the {what}")
        } else {
            format!("“{}”", description.trim())
        };
        Words {
            subject,
            kind: if target == TargetKind::Person {
                "person"
            } else {
                "animal"
            },
            description: description.to_lowercase(),
        }
    }

    fn paint(&self) -> String {
        "Could you paint the part to change instead (choose “An area I paint”)?".into()
    }

    fn cannot(&self, why: &str) -> NotReady {
        NotReady {
            message: format!("I could not check this photo: {why}."),
            questions: vec![self.paint()],
        }
    }
}

fn painted(mask: &GrayImage) -> Result<Target, NotReady> {
    let f = fraction(mask);
    if f < 0.005 {
        return Err(NotReady {
            message: format!(
                "The painted area is empty ({} of the photo): there is nothing marked to change.",
                percent(f)
            ),
            questions: vec![
                "Could you paint over the part you want changed?".into(),
                "Did the brush strokes get lost? Try a larger brush.".into(),
            ],
        });
    }
    if f > 0.95 {
        return Err(NotReady {
            message: format!(
                "The painted area covers nearly the whole photo ({}); I cannot tell what should stay as it is.",
                percent(f)
            ),
            questions: vec![
                "Which part should change? Paint only that part.".into(),
                "Should the whole photo change? Then choose a style for the background or the subject instead.".into(),
            ],
        });
    }
    Ok(Target {
        region: mask.clone(),
        fraction: f,
        observation: format!("The painted area covers {} of the photo.", percent(f)),
    })
}

/// The order goes ahead on what stands apart from the photo's edges,
/// saying what could not be checked.
fn unchecked(photo: &RgbImage, target: TargetKind, observation: String) -> Target {
    let region = region(photo, target, None)
        .unwrap_or_else(|_| GrayImage::from_pixel(photo.width(), photo.height(), Luma([255])));
    Target {
        fraction: fraction(&region),
        region,
        observation,
    }
}

/// How a found box is named: "a dog on the left (12% of the photo)".
fn described(f: &Found) -> String {
    // The detector's species is often wrong below an even score (cats
    // and dogs swap): then it is "an animal".
    let name = match f.kind {
        Kind::Person | Kind::Face => "a person".to_string(),
        Kind::Animal if f.score < 0.5 => "an animal".to_string(),
        _ => article(f.label),
    };
    format!(
        "{name} {} ({} of the photo)",
        position(f.frame.centre()),
        percent(f.frame.area())
    )
}

fn article(label: &str) -> String {
    let an = label.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {label}", if an { "an" } else { "a" })
}

/// The candidates for a person or a pet, largest first. A face with no
/// body box around it stands for a person by its head and shoulders.
fn candidates(sight: &Sight, target: TargetKind) -> Vec<Found> {
    let mut c: Vec<Found> = match target {
        TargetKind::Person => {
            let people: Vec<Found> = sight
                .of(Kind::Person)
                .filter(|f| f.score >= PERSON_MIN)
                .cloned()
                .collect();
            let lone_faces = sight
                .of(Kind::Face)
                .filter(|f| f.score >= FACE_MIN)
                .filter(|f| !people.iter().any(|p| f.frame.inside(&p.frame) > 0.5))
                .map(|f| Found {
                    kind: Kind::Person,
                    frame: head_and_shoulders(&f.frame),
                    ..f.clone()
                })
                .collect::<Vec<_>>();
            people.into_iter().chain(lone_faces).collect()
        }
        _ => sight
            .of(Kind::Animal)
            .filter(|f| f.score >= ANIMAL_MIN)
            .cloned()
            .collect(),
    };
    c.sort_by(|a, b| b.frame.area().total_cmp(&a.frame.area()));
    c
}

fn head_and_shoulders(face: &Frame) -> Frame {
    let (w, h) = (face.x1 - face.x0, face.y1 - face.y0);
    Frame {
        x0: (face.x0 - 0.7 * w).max(0.0),
        y0: (face.y0 - 0.4 * h).max(0.0),
        x1: (face.x1 + 0.7 * w).min(1.0),
        y1: (face.y1 + 1.8 * h).min(1.0),
    }
}

/// `pet` or `person`: found, absent, or several with nothing saying which.
fn subject(
    photo: &RgbImage,
    sight: &Sight,
    words: &Words,
    mask: Option<&GrayImage>,
) -> Result<Target, NotReady> {
    let target = if words.kind == "person" {
        TargetKind::Person
    } else {
        TargetKind::Pet
    };
    let mut found = candidates(sight, target);
    // "The dog" beside a larger horse: the name chooses before the size.
    let named = named_species(&found, &words.description);
    if !named.is_empty() && named.len() < found.len() {
        found = named;
    }
    let Some(largest) = found.first() else {
        return absent(photo, sight, words, target);
    };
    let rivals: Vec<&Found> = found
        .iter()
        .filter(|f| f.frame.area() >= largest.frame.area() * RIVAL)
        .collect();
    let chosen = match (rivals.len(), mask) {
        (1, _) => vec![largest],
        (_, Some(m)) => by_mask(&rivals, m).ok_or_else(|| conflict(words, &rivals))?,
        _ => by_words(&rivals, &found, &words.description).ok_or_else(|| which(words, &rivals))?,
    };
    let mut region = GrayImage::new(photo.width(), photo.height());
    for f in &chosen {
        add(&mut region, &outline(photo, &f.frame));
    }
    let others = candidates(sight, target).len().saturating_sub(chosen.len());
    let seen = chosen
        .iter()
        .map(|f| described(f))
        .collect::<Vec<_>>()
        .join(" and ");
    let mut observation = format!("I found {seen}.");
    match others {
        0 => {}
        1 => observation.push_str(&format!(" One other {} stays as it is.", words.kind)),
        n => observation.push_str(&format!(
            " {n} other {} stay as they are.",
            plural(words.kind)
        )),
    }
    Ok(Target {
        fraction: fraction(&region),
        region,
        observation,
    })
}

/// The named kind was not found. Clearly absent when the detector that
/// knows it looked and saw other things, or nothing stands out at all;
/// otherwise the order goes ahead, saying what could not be checked.
fn absent(
    photo: &RgbImage,
    sight: &Sight,
    words: &Words,
    target: TargetKind,
) -> Result<Target, NotReady> {
    let knows = match target {
        TargetKind::Person => sight.looked.objects || sight.looked.faces,
        _ => sight.looked.objects,
    };
    let stands = survey(photo).ok();
    let standing = stands.as_ref().and_then(|s| s.shapes.first()).cloned();
    if !knows {
        return match standing {
            Some(s) => Ok(unchecked(photo, target, format!(
                "Something stands apart {} ({} of the photo); the detector for a {} is not installed, so I could not check that it is {}.",
                position(s.centre), percent(s.fraction), words.kind, words.subject
            ))),
            None => Err(flat(words)),
        };
    }
    let seen = notable(sight);
    if target == TargetKind::Pet && sight.animal_hint >= ANIMAL_HINT && standing.is_some() {
        return Ok(unchecked(photo, target, format!(
            "I could not name an animal here, but something animal-like stands apart; I could not check that it is {}.",
            words.subject
        )));
    }
    if seen.is_empty() && standing.is_none() {
        return Err(flat(words));
    }
    let list = if seen.is_empty() {
        let s = standing.expect("checked above");
        format!(
            "something I cannot name {} ({} of the photo)",
            position(s.centre),
            percent(s.fraction)
        )
    } else {
        seen.iter()
            .take(3)
            .map(described)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut questions = vec![format!("Is {} in this photo? Where?", words.subject)];
    let other_kind = seen.iter().find(|f| match target {
        TargetKind::Person => f.kind == Kind::Animal,
        _ => matches!(f.kind, Kind::Person | Kind::Face),
    });
    if let Some(o) = other_kind {
        questions.push(match o.kind {
            Kind::Animal => "Did you mean the animal? Then choose “A pet”.".into(),
            _ => "Did you mean the person? Then choose “A person”.".into(),
        });
    }
    questions.push(words.paint());
    Err(NotReady {
        message: format!(
            "I found no {} in this photo. What I see: {list}.",
            words.kind
        ),
        questions,
    })
}

/// What the detectors saw that a person would name, largest first.
fn notable(sight: &Sight) -> Vec<Found> {
    let mut seen: Vec<Found> = sight
        .found
        .iter()
        .filter(|f| match f.kind {
            Kind::Person => f.score >= PERSON_MIN,
            Kind::Face => f.score >= FACE_MIN,
            Kind::Animal => f.score >= ANIMAL_MIN,
            Kind::Thing => f.score >= THING_MIN,
        })
        .cloned()
        .collect();
    // A face inside a person's box is the same person.
    let people: Vec<Frame> = seen
        .iter()
        .filter(|f| f.kind == Kind::Person)
        .map(|f| f.frame)
        .collect();
    seen.retain(|f| f.kind != Kind::Face || !people.iter().any(|p| f.frame.inside(p) > 0.5));
    seen.sort_by(|a, b| b.frame.area().total_cmp(&a.frame.area()));
    seen
}

fn flat(words: &Words) -> NotReady {
    NotReady {
        message: format!(
            "I could not find {}: nothing in this photo stands apart from the rest (it looks like one surface all over).",
            words.subject
        ),
        questions: vec![
            format!("Where in the photo is {}?", words.subject),
            "Is this the photo you meant to upload?".into(),
            words.paint(),
        ],
    }
}

/// The candidates the painted mask touches; none is a conflict.
fn by_mask<'a>(rivals: &[&'a Found], mask: &GrayImage) -> Option<Vec<&'a Found>> {
    let (w, h) = (f64::from(mask.width()), f64::from(mask.height()));
    let touched: Vec<&Found> = rivals
        .iter()
        .copied()
        .filter(|f| {
            let (x0, y0) = ((f.frame.x0 * w) as u32, (f.frame.y0 * h) as u32);
            let (x1, y1) = ((f.frame.x1 * w) as u32, (f.frame.y1 * h) as u32);
            (y0..y1.min(mask.height()))
                .any(|y| (x0..x1.min(mask.width())).any(|x| mask.get_pixel(x, y)[0] > 0))
        })
        .collect();
    (!touched.is_empty()).then_some(touched)
}

/// The detector's names for what a person may call an animal. Its cat
/// and dog are often swapped, so a name only chooses among several.
const SPECIES: &[(&str, &[&str])] = &[
    ("dog", &["dog", "dogs", "puppy", "puppies", "pup"]),
    ("cat", &["cat", "cats", "kitten", "kittens", "kitty"]),
    ("horse", &["horse", "horses", "pony", "ponies", "foal"]),
    (
        "bird",
        &[
            "bird", "birds", "parrot", "eagle", "duck", "goose", "chicken", "hen",
        ],
    ),
    ("sheep", &["sheep", "lamb", "lambs"]),
    ("cow", &["cow", "cows", "calf", "cattle", "bull"]),
];

/// Words that ask for every candidate found.
const ALL_WORDS: &[&str] = &[
    "pets",
    "animals",
    "people",
    "persons",
    "men",
    "women",
    "children",
    "kids",
    "dogs",
    "cats",
    "horses",
    "birds",
    "cows",
    "puppies",
    "kittens",
    "both",
    "all",
    "everyone",
    "everybody",
    "each",
    "every",
    "them",
    "they",
    "two",
    "three",
    "four",
    "group",
    "together",
    "family",
];

/// The candidates of the species the description names, if it names one.
fn named_species(found: &[Found], description: &str) -> Vec<Found> {
    let words: Vec<&str> = description.split(|c: char| !c.is_alphanumeric()).collect();
    found
        .iter()
        .filter(|f| {
            SPECIES
                .iter()
                .any(|(label, said)| f.label == *label && said.iter().any(|s| words.contains(s)))
        })
        .cloned()
        .collect()
}

fn plural(kind: &str) -> String {
    if kind == "person" {
        "people".into()
    } else {
        format!("{kind}s")
    }
}

/// Which of several the description names: all of them ("both", "the two", "everyone"), or one by its place or
/// size.
fn by_words<'a>(
    rivals: &[&'a Found],
    found: &'a [Found],
    description: &str,
) -> Option<Vec<&'a Found>> {
    let has = |w: &[&str]| {
        description
            .split(|c: char| !c.is_alphanumeric())
            .any(|t| w.contains(&t))
    };
    if rivals.len() == 1 {
        return Some(rivals.to_vec());
    }
    if has(ALL_WORDS) {
        return Some(found.iter().collect());
    }
    let by = |key: &dyn Fn(&Found) -> f64| {
        rivals
            .iter()
            .copied()
            .min_by(|a, b| key(a).total_cmp(&key(b)))
            .map(|f| vec![f])
    };
    if has(&["left", "leftmost"]) {
        by(&|f| f.frame.centre().0)
    } else if has(&["right", "rightmost"]) {
        by(&|f| -f.frame.centre().0)
    } else if has(&["middle", "centre", "center", "central"]) {
        by(&|f| (f.frame.centre().0 - 0.5).abs())
    } else if has(&["top", "upper", "above"]) {
        by(&|f| f.frame.centre().1)
    } else if has(&["bottom", "lower", "below"]) {
        by(&|f| -f.frame.centre().1)
    } else if has(&[
        "big", "bigger", "biggest", "large", "larger", "largest", "front", "closest", "nearest",
    ]) {
        by(&|f| -f.frame.area())
    } else if has(&[
        "small", "smaller", "smallest", "little", "back", "behind", "furthest",
    ]) {
        by(&|f| f.frame.area())
    } else {
        None
    }
}

fn which(words: &Words, rivals: &[&Found]) -> NotReady {
    let mut named: Vec<&Found> = rivals.to_vec();
    // Named left to right, as a person reads them.
    named.sort_by(|a, b| a.frame.centre().0.total_cmp(&b.frame.centre().0));
    let mut places: Vec<String> = named
        .iter()
        .take(3)
        .map(|f| format!("the one {}", position(f.frame.centre())))
        .collect();
    // Two in the same part of the photo are told apart by their order.
    let distinct = places
        .iter()
        .collect::<std::collections::HashSet<_>>()
        .len();
    if distinct < places.len() {
        let order: &[&str] = match places.len() {
            2 => &["on the left", "on the right"],
            _ => &["on the left", "in the middle", "on the right"],
        };
        places = order.iter().map(|p| format!("the one {p}")).collect();
    }
    let plural = plural(words.kind);
    NotReady {
        message: format!(
            "I found {} {plural} of about the same size: {}. I cannot tell which one is {}.",
            rivals.len(),
            named
                .iter()
                .take(3)
                .map(|f| described(f))
                .collect::<Vec<_>>()
                .join(", "),
            words.subject
        ),
        questions: vec![
            format!("Which one is {}: {}?", words.subject, places.join(" or ")),
            format!("Or should all {} {plural} change?", rivals.len()),
            words.paint(),
        ],
    }
}

fn conflict(words: &Words, rivals: &[&Found]) -> NotReady {
    NotReady {
        message: format!(
            "The painted area touches none of the {} {}s I found ({}).",
            rivals.len(),
            words.kind,
            rivals
                .iter()
                .take(3)
                .map(|f| described(f))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        questions: vec![
            format!("Which one is {}? Paint over it.", words.subject),
            "Did you mean to change the painted part only? Then choose “An area I paint”.".into(),
        ],
    }
}

/// `background`: ready when a subject stands apart from what is behind it.
fn background(photo: &RgbImage, sight: &Sight, words: &Words) -> Result<Target, NotReady> {
    let (w, h) = photo.dimensions();
    let subjects: Vec<Found> = notable(sight)
        .into_iter()
        .filter(|f| f.frame.area() >= 0.01)
        .collect();
    let mut kept = GrayImage::new(w, h);
    let seen = if subjects.is_empty() {
        let survey: Survey = survey(photo).map_err(|e| words.cannot(&e))?;
        let Some(s) = survey.shapes.first() else {
            return Err(NotReady {
                message: "Nothing in this photo stands apart from the rest (it looks like one surface all over), so there is no subject to keep and no background to change.".into(),
                questions: vec![
                    "Should the whole photo change? Then paint all of it (choose “An area I paint”).".into(),
                    "Is this the photo you meant to upload?".into(),
                ],
            });
        };
        // What stands apart from the edges is the subject to keep.
        let apart = region(photo, TargetKind::Pet, None).map_err(|e| words.cannot(&e))?;
        add(&mut kept, &apart);
        format!(
            "a subject {} ({} of the photo)",
            position(s.centre),
            percent(s.fraction)
        )
    } else {
        for f in &subjects {
            add(&mut kept, &outline(photo, &f.frame));
        }
        subjects
            .iter()
            .take(3)
            .map(described)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let region = GrayImage::from_fn(w, h, |x, y| {
        Luma([if kept.get_pixel(x, y)[0] > 0 { 0 } else { 255 }])
    });
    let f = fraction(&region);
    if !(0.05..=0.97).contains(&f) {
        return Err(NotReady {
            message: format!(
                "The background is {} of the photo around {seen}; I cannot tell it from the subject.",
                percent(f)
            ),
            questions: vec![
                "Where does the background end and the subject begin?".into(),
                words.paint(),
            ],
        });
    }
    Ok(Target {
        fraction: f,
        region,
        observation: format!(
            "The background is {} of the photo, around {seen}, which stays as it is.",
            percent(f)
        ),
    })
}

fn add(into: &mut GrayImage, part: &GrayImage) {
    for (a, b) in into.iter_mut().zip(part.iter()) {
        *a = (*a).max(*b);
    }
}

/// The subject inside a detector's box, 255 inside: the pixels whose
/// colours differ from those just around the box (its local background),
/// opened and closed; the ellipse the box holds when that cannot tell (the
/// box fills the photo, or colours do not separate).
pub fn outline(photo: &RgbImage, frame: &Frame) -> GrayImage {
    let (w, h) = photo.dimensions();
    let px = |v: f64, side: u32| ((v * f64::from(side)).round() as u32).min(side);
    let (x0, y0, x1, y1) = (
        px(frame.x0, w),
        px(frame.y0, h),
        px(frame.x1, w),
        px(frame.y1, h),
    );
    let mut out = GrayImage::new(w, h);
    if x1 <= x0 || y1 <= y0 {
        return out;
    }
    let band = ((x1 - x0).min(y1 - y0) / 12).max(2);
    let ring = ring_colours(photo, (x0, y0, x1, y1), band);
    let separated = ring.map(|bg| {
        let mut fg = GrayImage::new(w, h);
        for y in y0..y1 {
            for x in x0..x1 {
                let p = photo.get_pixel(x, y);
                if bg.iter().all(|b| super::dist2(&p.0, b) >= 40 * 40) {
                    fg.put_pixel(x, y, Luma([255]));
                }
            }
        }
        let fg = square(&square(&fg, 1, Spread::Background), 1, Spread::Foreground);
        square(&square(&fg, 3, Spread::Foreground), 3, Spread::Background)
    });
    let box_area = f64::from((x1 - x0) * (y1 - y0));
    if let Some(fg) = separated {
        let cover = fg.iter().filter(|v| **v > 0).count() as f64 / box_area;
        if (0.2..=0.95).contains(&cover) {
            return fg;
        }
    }
    let (cx, cy) = (f64::from(x0 + x1) / 2.0, f64::from(y0 + y1) / 2.0);
    let (rx, ry) = (f64::from(x1 - x0) / 2.0, f64::from(y1 - y0) / 2.0);
    for y in y0..y1 {
        for x in x0..x1 {
            let (dx, dy) = (
                (f64::from(x) + 0.5 - cx) / rx,
                (f64::from(y) + 0.5 - cy) / ry,
            );
            if dx * dx + dy * dy <= 1.0 {
                out.put_pixel(x, y, Luma([255]));
            }
        }
    }
    out
}

/// The dominant colours of the band around a box, when enough of the band
/// lies inside the photo to speak for the background.
fn ring_colours(
    photo: &RgbImage,
    (x0, y0, x1, y1): (u32, u32, u32, u32),
    band: u32,
) -> Option<Vec<[u8; 3]>> {
    let (w, h) = photo.dimensions();
    let (ox0, oy0) = (x0.saturating_sub(band), y0.saturating_sub(band));
    let (ox1, oy1) = ((x1 + band).min(w), (y1 + band).min(h));
    let full = f64::from(2 * band * ((x1 - x0) + (y1 - y0)));
    let mut buckets = vec![(0u64, [0u64; 3]); 512];
    let mut n = 0u64;
    for y in oy0..oy1 {
        for x in ox0..ox1 {
            if (x0..x1).contains(&x) && (y0..y1).contains(&y) {
                continue;
            }
            let p = photo.get_pixel(x, y);
            let e = &mut buckets
                [usize::from(p[0] / 32) * 64 + usize::from(p[1] / 32) * 8 + usize::from(p[2] / 32)];
            e.0 += 1;
            (0..3).for_each(|i| e.1[i] += u64::from(p[i]));
            n += 1;
        }
    }
    if (n as f64) < full * 0.3 {
        return None;
    }
    Some(
        buckets
            .iter()
            .filter(|b| b.0 > 0 && b.0 * 100 >= n * 6)
            .map(|b| [0, 1, 2].map(|i| (b.1[i] / b.0) as u8))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;

    fn real(name: &str) -> RgbImage {
        let path = format!("{}/tests/photos/{name}", env!("CARGO_MANIFEST_DIR"));
        super::super::decode(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
            .unwrap()
    }

    fn found(label: &'static str, x0: f64, x1: f64) -> Found {
        Found {
            kind: Kind::Animal,
            label,
            score: 0.4,
            frame: Frame {
                x0,
                y0: 0.3,
                x1,
                y1: 0.7,
            },
        }
    }

    #[test]
    fn the_words_choose_among_several() {
        let all = [
            found("dog", 0.1, 0.3),
            found("dog", 0.4, 0.6),
            found("horse", 0.7, 0.95),
        ];
        let rivals: Vec<&Found> = all.iter().collect();
        let pick = |d: &str| {
            by_words(&rivals, &all, d).map(|v| v.iter().map(|f| f.frame.x0).collect::<Vec<_>>())
        };
        assert_eq!(pick("the dog on the left"), Some(vec![0.1]));
        assert_eq!(pick("the one on the right"), Some(vec![0.7]));
        assert_eq!(pick("both of them"), Some(vec![0.1, 0.4, 0.7]));
        assert_eq!(pick("Rex"), None);
        assert_eq!(named_species(&all, "the horse").len(), 1);
        assert_eq!(named_species(&all, "my puppy").len(), 2);
        assert!(named_species(&all, "the cat").is_empty());
    }

    #[test]
    fn a_painted_area_must_mark_something_and_not_everything() {
        let p = RgbImage::from_pixel(120, 80, Rgb([90, 120, 60]));
        let empty = GrayImage::new(120, 80);
        let e = look(&p, TargetKind::Area, "", Some(&empty)).unwrap_err();
        assert!(e.message.contains("empty"), "{}", e.message);
        let full = GrayImage::from_pixel(120, 80, Luma([255]));
        let e = look(&p, TargetKind::Area, "", Some(&full)).unwrap_err();
        assert!(
            e.message.contains("nearly the whole photo (100%)"),
            "{}",
            e.message
        );
        let half = GrayImage::from_fn(120, 80, |x, _| Luma([if x < 60 { 255 } else { 0 }]));
        assert_eq!(
            look(&p, TargetKind::Area, "", Some(&half))
                .unwrap()
                .fraction,
            0.5
        );
    }

    /// Without the model files the checker still runs, lets through what it
    /// cannot check, and says so; it still refuses a photo with nothing in it.
    #[test]
    fn without_its_models_the_checker_says_what_it_could_not_check() {
        let none = Detector::load(std::path::Path::new("/nonexistent"));
        assert_eq!(none.missing.len(), 2);
        let cat = real("cat_chelsea.png");
        let t = look_with(&none, &cat, TargetKind::Pet, "", None);
        // The close-up fills the frame: nothing stands apart from its edges,
        // so without a detector this one is refused as flat; a photo with a
        // subject apart from its background goes through, saying why.
        let corgi = real("dog_corgi.jpg");
        let ok = look_with(&none, &corgi, TargetKind::Pet, "", None).unwrap();
        assert!(
            ok.observation.contains("not installed"),
            "{}",
            ok.observation
        );
        assert!(t.is_ok() || t.unwrap_err().message.contains("stands apart"));
        let brick = real("brick.png");
        assert!(look_with(&none, &brick, TargetKind::Person, "", None).is_err());
    }

    #[test]
    fn the_region_is_the_subject_found_not_the_whole_box() {
        let corgi = real("dog_corgi.jpg");
        let t = look(&corgi, TargetKind::Pet, "the dog", None).unwrap();
        assert!((0.03..0.3).contains(&t.fraction), "{}", t.fraction);
        let bg = look(&corgi, TargetKind::Background, "", None).unwrap();
        assert!(
            (t.fraction + bg.fraction - 1.0).abs() < 0.05,
            "{} {}",
            t.fraction,
            bg.fraction
        );
    }
}
