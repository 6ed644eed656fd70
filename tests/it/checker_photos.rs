//! The local checker on real photographs (tests/photos, licences in its
//! README): for each photo and target, the answer a careful person would
//! give. The checker must never refuse a target that is plainly there, and
//! must agree with the person on at least nine pairs in ten.
//!
//! `cargo test --release --test checker_photos -- --nocapture` prints each
//! answer, the share of right ones and the time per check.

use std::time::{Duration, Instant};
use tollgate::model::TargetKind::{self, Background as Bg, Person, Pet};
use tollgate::providers::local;

/// What a person would say: `Ready`; `Refuse` (the target is absent, or
/// several and the request does not say which); `Plain`, a target plainly
/// there that must never be refused.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    Plain,
    Ready,
    Refuse,
}
use Answer::*;

const CASES: &[(&str, TargetKind, &str, Answer)] = &[
    // ../shared/photos
    ("astronaut.png", Person, "the astronaut", Plain),
    ("astronaut.png", Bg, "", Ready),
    ("astronaut.png", Pet, "the cat", Refuse),
    ("rocket.jpg", Person, "the pilot", Refuse),
    ("rocket.jpg", Pet, "the dog", Refuse),
    ("rocket.jpg", Bg, "", Ready),
    ("brick.png", Pet, "the dog", Refuse),
    ("brick.png", Person, "the man", Refuse),
    ("brick.png", Bg, "", Refuse),
    // Pets, one each.
    ("cat_chelsea.png", Pet, "the cat", Plain),
    ("cat_chelsea.png", Pet, "", Plain),
    ("cat_chelsea.png", Bg, "", Ready),
    ("cat_chelsea.png", Person, "", Refuse),
    ("cat_siamese.jpg", Pet, "my cat", Plain),
    ("cat_siamese.jpg", Person, "", Refuse),
    ("cat_siamese.jpg", Bg, "", Ready),
    ("cat_tabby.jpg", Pet, "the cat", Plain),
    ("cat_tabby.jpg", Person, "", Refuse),
    ("dog_corgi.jpg", Pet, "the dog", Plain),
    ("dog_corgi.jpg", Person, "", Refuse),
    ("dog_corgi.jpg", Bg, "", Ready),
    ("dog_german_shepherd.jpg", Pet, "", Plain),
    ("dog_german_shepherd.jpg", Person, "the owner", Refuse),
    ("dog_german_shepherd.jpg", Bg, "", Ready),
    ("dog_with_bicycle.jpg", Pet, "the dog", Plain),
    ("dog_with_bicycle.jpg", Person, "", Refuse),
    ("dog_with_bicycle.jpg", Bg, "", Ready),
    // Animals a pet order may name.
    ("raccoon.jpg", Pet, "the raccoon", Plain),
    ("raccoon.jpg", Person, "", Refuse),
    ("bird_eagle.jpg", Pet, "the eagle", Plain),
    ("bird_eagle.jpg", Person, "", Refuse),
    ("bird_eagle.jpg", Bg, "", Ready),
    // Several of a kind: which one, unless the request says.
    ("dogs_two_spaniels.jpg", Pet, "", Refuse),
    ("dogs_two_spaniels.jpg", Pet, "both dogs", Plain),
    ("dogs_two_spaniels.jpg", Pet, "the dog on the left", Plain),
    ("dogs_two_spaniels.jpg", Person, "", Refuse),
    ("horses_herd.jpg", Pet, "the horses", Plain),
    ("horses_herd.jpg", Person, "the rider", Refuse),
    ("people_group.jpg", Person, "", Refuse),
    ("people_group.jpg", Person, "everyone", Plain),
    ("people_group.jpg", Pet, "", Refuse),
    ("people_group.jpg", Bg, "", Ready),
    // People, and a person with animals.
    ("person_grace_hopper.jpg", Person, "", Plain),
    ("person_grace_hopper.jpg", Pet, "", Refuse),
    ("person_grace_hopper.jpg", Bg, "", Ready),
    ("person_dog_horse.jpg", Person, "", Plain),
    ("person_dog_horse.jpg", Pet, "the dog", Plain),
    ("person_dog_horse.jpg", Bg, "", Ready),
    // Things, landscapes and textures.
    ("coffee.jpg", Person, "", Refuse),
    ("coffee.jpg", Pet, "the cat", Refuse),
    ("coffee.jpg", Bg, "", Ready),
    ("flower_dahlia.jpg", Pet, "", Refuse),
    ("flower_dahlia.jpg", Person, "", Refuse),
    ("flower_dahlia.jpg", Bg, "", Ready),
    ("fig_in_bowl.jpg", Pet, "", Refuse),
    ("fig_in_bowl.jpg", Person, "", Refuse),
    ("fig_in_bowl.jpg", Bg, "", Ready),
    ("dandelions.jpg", Person, "", Refuse),
    ("dandelions.jpg", Pet, "", Refuse),
    ("landscape_autumn_mountains.jpg", Pet, "", Refuse),
    ("landscape_autumn_mountains.jpg", Person, "", Refuse),
    ("landscape_forest_creek.jpg", Pet, "the dog", Refuse),
    ("landscape_forest_creek.jpg", Person, "", Refuse),
    ("landscape_summer_palace.jpg", Person, "", Refuse),
    ("landscape_summer_palace.jpg", Pet, "", Refuse),
];

fn photo(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/photos/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_checker_answers_as_a_person_would() {
    let mut right = 0;
    let mut wrong_refusals = Vec::new();
    let mut wrong = Vec::new();
    let mut spent = Duration::ZERO;
    for &(file, target, description, answer) in CASES {
        let bytes = photo(file);
        let started = Instant::now();
        let img = local::decode(&bytes).expect("decode");
        let got = local::check(&img, target, description, None).expect("no mask");
        spent += started.elapsed();
        let ready = got.is_ok();
        let said = match &got {
            Ok(t) => format!("ready: {}", t.observation),
            Err(n) => format!("not ready: {} {:?}", n.message, n.questions),
        };
        println!("{file} {target:?} {description:?}: {said}");
        if let Err(n) = &got {
            assert!(
                !n.questions.is_empty() && n.questions.len() <= 3,
                "{file}: {n:?}"
            );
        }
        match (answer, ready) {
            (Plain | Ready, true) | (Refuse, false) => right += 1,
            (Plain, false) => wrong_refusals.push(format!("{file} {target:?} {description:?}")),
            _ => wrong.push(format!("{file} {target:?} {description:?}")),
        }
    }
    let share = f64::from(right) / CASES.len() as f64;
    println!(
        "right: {right} of {} ({:.0}%), {:.1?} per check (decode included)",
        CASES.len(),
        share * 100.0,
        spent / CASES.len() as u32
    );
    println!("wrong: {wrong:?}");
    assert!(
        wrong_refusals.is_empty(),
        "plainly present, refused: {wrong_refusals:?}"
    );
    assert!(
        share >= 0.9,
        "only {right} of {} right: {wrong:?}",
        CASES.len()
    );
}
