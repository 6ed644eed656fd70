//! The crash test, with real processes: `tollgate serve` is killed with
//! SIGKILL while jobs are mid-flight and started again on the same
//! database. Every job ends in one terminal state, paid once, with every
//! attempt on record; the ledger matches the outcomes and no reservation is
//! left unsettled. Runs on SQLite and on PostgreSQL.
#![cfg(feature = "ssr")]

use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::both_backends;
use tollgate::model::{Credits, JobId, JobStatus, Role, Usd};
use tollgate::testkit::TestDb;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `tollgate serve` on the test's database and folder; waits for /healthz.
async fn serve(db: &TestDb) -> Child {
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("serve")
        .env("TOLLGATE_DATABASE_URL", &db.url)
        .env("TOLLGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("TOLLGATE_STORAGE", db.dir.join("objects"))
        .env("TOLLGATE_SITE_ROOT", db.dir.join("site"))
        .env("TOLLGATE_WORKERS", "2")
        .env("TOLLGATE_LEASE_SECONDS", "2")
        .env("TOLLGATE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tollgate serve");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if http
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
            .is_ok()
        {
            return child;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("tollgate serve did not come up");
}

fn photo() -> Vec<u8> {
    let img = image::RgbImage::from_fn(240, 180, |x, y| {
        let (dx, dy) = ((x as f64 - 90.0) / 40.0, (y as f64 - 110.0) / 28.0);
        if dx * dx + dy * dy < 1.0 {
            image::Rgb([150, 95, 50])
        } else if y < 90 {
            image::Rgb([130, 180, 235])
        } else {
            image::Rgb([70, 150, 60])
        }
    });
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

both_backends!(sigkill_mid_flight_then_restart);

async fn sigkill_mid_flight_then_restart(db: TestDb) {
    let t = &db.tollgate;
    let u = t
        .add_user("u@example.com", Role::User, "correct horse battery")
        .await
        .unwrap();
    t.grant_credits(None, u.id, Credits(1_000), None, None)
        .await
        .unwrap();
    let source = t
        .upload_asset(&u, Some("image/png"), photo().into())
        .await
        .unwrap();
    let styles = [
        "embroidery",
        "origami",
        "mosaic",
        "linocut",
        "watercolour",
        "quilt",
    ];
    let mut ids: Vec<JobId> = Vec::new();
    for i in 0..24 {
        let body = if i % 6 == 5 {
            json!({"kind": "video", "prompt": format!("boat {i}"), "duration_s": 2, "resolution": "720p"})
        } else {
            json!({"kind": "image_edit", "source": source.id, "target": {"kind": "pet"},
                   "style": styles[i % styles.len()], "strength": "strong"})
        };
        ids.push(
            t.submit_job(&u, Some(&format!("crash-{i}")), &body)
                .await
                .unwrap()
                .job
                .id,
        );
    }

    // Kill the first node as soon as some jobs have finished and others have not.
    let mut first = serve(&db).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut done = 0;
        for id in &ids {
            if db
                .store()
                .job(*id)
                .await
                .unwrap()
                .unwrap()
                .status
                .is_terminal()
            {
                done += 1;
            }
        }
        if done >= 3 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().expect("SIGKILL");
    first.wait().unwrap();
    let mut unfinished = 0;
    for id in &ids {
        if !db
            .store()
            .job(*id)
            .await
            .unwrap()
            .unwrap()
            .status
            .is_terminal()
        {
            unfinished += 1;
        }
    }
    assert!(unfinished > 0, "the kill came too late to test anything");

    // A second node on the same database finishes the rest.
    let mut second = serve(&db).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let jobs = loop {
        let mut jobs = Vec::new();
        for id in &ids {
            jobs.push(db.store().job(*id).await.unwrap().unwrap());
        }
        if jobs.iter().all(|j| j.status.is_terminal()) || Instant::now() > deadline {
            break jobs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    second.kill().ok();
    second.wait().ok();

    let mut spent_credits = 0;
    let mut spent_usd = Usd::ZERO;
    for job in &jobs {
        assert_eq!(
            job.status,
            JobStatus::Succeeded,
            "job {} ended {:?}: {:?}",
            job.id,
            job.status,
            job.error
        );
        spent_credits += job.credits.get();
        spent_usd = spent_usd.plus(job.estimated_usd);
        // One terminal state, one succeeded (paid) attempt, every attempt kept.
        let events = db.store().job_events(job.id).await.unwrap();
        assert_eq!(events.iter().filter(|e| e.kind == "succeeded").count(), 1);
        let attempts = db.store().attempts(job.id).await.unwrap();
        assert_eq!(
            attempts.iter().filter(|a| a.state == "succeeded").count(),
            1,
            "{attempts:?}"
        );
        assert!(attempts
            .iter()
            .all(|a| a.state == "succeeded" || a.error_class.as_deref() == Some("interrupted")));
        let (key, _) = db
            .store()
            .job_output(job.id)
            .await
            .unwrap()
            .expect("an output");
        let meta = t
            .objects()
            .head(&tollgate::storage::ObjectKey::parse(&key).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.written_by, format!("job:{}", job.id));
    }
    // The ledger matches the outcomes: charged once each, nothing refunded.
    let balance = t.user(u.id).await.unwrap().balance;
    assert_eq!(balance, Credits(1_000 - spent_credits));
    assert_eq!(db.store().ledger_sum(u.id).await.unwrap(), balance);
    // No reservation is left unsettled, and each job was booked once.
    let day = db
        .store()
        .budget_day(chrono::Utc::now().date_naive(), Usd::parse("50").unwrap())
        .await
        .unwrap();
    assert_eq!(day.reserved_usd, Usd::ZERO);
    assert_eq!(day.used_usd, spent_usd);
}
