//! The local checker on photographs: what its detectors see and what it
//! answers, and how long a check takes.
//!
//! `cargo run --release --example look -- PHOTO...` prints each photo's
//! detections and answers for `pet`, `person` and `background`.
//! `cargo run --release --example look -- --bench PHOTO` makes a
//! 12-megapixel JPEG (4032x3024, as a phone takes) of the photo and times
//! whole checks on it, decode included, on one thread, each looking afresh;
//! then a check of the same photo again, whose detectors' sight is
//! remembered.

use image::codecs::jpeg::JpegEncoder;
use std::time::{Duration, Instant};
use tollgate::model::TargetKind;
use tollgate::providers::local::{check, decode, detect};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--bench") {
        for path in &args[1..] {
            bench(path);
        }
        return;
    }
    let d = detect::detector();
    for path in &args {
        let photo = decode(&std::fs::read(path).expect("read")).expect("decode");
        let sight = d.look(&photo);
        println!("{path}: {}x{}", photo.width(), photo.height());
        for f in &sight.found {
            let b = f.frame;
            println!(
                "  {:?} {} {:.2} [{:.2} {:.2} {:.2} {:.2}]",
                f.kind, f.label, f.score, b.x0, b.y0, b.x1, b.y1
            );
        }
        for target in [TargetKind::Pet, TargetKind::Person, TargetKind::Background] {
            let said = match check(&photo, target, "", None).expect("no mask") {
                Ok(t) => format!("ready: {}", t.observation),
                Err(n) => format!("not ready: {} {:?}", n.message, n.questions),
            };
            println!("  {target:?}: {said}");
        }
    }
}

fn bench(path: &str) {
    let photo = image::open(path).expect("open").to_rgb8();
    let big = image::imageops::resize(&photo, 4032, 3024, image::imageops::FilterType::Triangle);
    let mut jpeg = Vec::new();
    JpegEncoder::new_with_quality(&mut jpeg, 90)
        .encode_image(&big)
        .expect("encode");
    let runs = 30;
    let mut times: Vec<Duration> = Vec::new();
    // The first check makes the detector's plan for this shape: not timed.
    // Each timed check looks afresh (the detector forgets what it saw).
    for i in 0..=runs {
        detect::detector().forget();
        let t = Instant::now();
        let img = decode(&jpeg).expect("decode");
        let _ = check(&img, TargetKind::Pet, "", None).expect("no mask");
        if i > 0 {
            times.push(t.elapsed());
        }
    }
    times.sort();
    // Where it goes: the decode alone, and a full decode then resize.
    let p50 = |f: &dyn Fn()| {
        let mut t: Vec<Duration> = (0..11)
            .map(|_| {
                let s = Instant::now();
                f();
                s.elapsed()
            })
            .collect();
        t.sort();
        t[5]
    };
    let reduced = p50(&|| drop(decode(&jpeg).expect("decode")));
    let full = p50(&|| {
        let img = image::load_from_memory(&jpeg).expect("decode").to_rgb8();
        drop(image::imageops::thumbnail(&img, 1024, 768));
    });
    let small = decode(&jpeg).expect("decode");
    let sight = p50(&|| {
        detect::detector().forget();
        drop(detect::detector().look(&small))
    });
    // The same photo checked again (a job's review, a second style): the
    // detectors' sight is remembered, the rest of the check is done again.
    let again = p50(&|| {
        let img = decode(&jpeg).expect("decode");
        drop(check(&img, TargetKind::Pet, "", None).expect("no mask"))
    });
    println!(
        "{path} as a 4032x3024 JPEG ({} KB): check p50 {:.1?}, p90 {:.1?}, over {runs} checks; \
         decode {reduced:.1?} (full decode and resize {full:.1?}), detectors {sight:.1?}; \
         checked again {again:.1?}",
        jpeg.len() / 1024,
        times[runs / 2],
        times[runs * 9 / 10]
    );
}
