//! Cursors and pages: every position of every list reads back from its
//! cursor exactly (to the nanosecond, whatever the id), any other text is
//! refused as a field error, and following `next` then `prev` walks any list
//! to its end and back, each row once.

use crate::model::{AttemptId, DeliveryId, JobId, LedgerEntryId, ParkedId, Usd};
use crate::store::{AttemptCursor, DeliveryCursor, JobCursor, LedgerCursor, ParkedCursor, Seek};
use crate::usecases::cursor::{decode, encode, Page, Position};
use crate::usecases::Error;
use chrono::{DateTime, NaiveDate, Utc};
use proptest::prelude::*;
use uuid::Uuid;

/// Any moment a row could have been written, to the nanosecond.
fn moment() -> impl Strategy<Value = DateTime<Utc>> {
    (0i64..7_258_118_400, 0u32..1_000_000_000)
        .prop_map(|(s, n)| DateTime::from_timestamp(s, n).expect("in range"))
}

fn uuid() -> impl Strategy<Value = Uuid> {
    any::<u128>().prop_map(Uuid::from_u128)
}

fn seek<P: std::fmt::Debug + Clone>(p: impl Strategy<Value = P>) -> impl Strategy<Value = Seek<P>> {
    (p, any::<bool>()).prop_map(|(p, back)| {
        if back {
            Seek::Before(p)
        } else {
            Seek::After(p)
        }
    })
}

fn reads_back<P: Position + PartialEq + std::fmt::Debug>(s: Seek<P>) -> Result<(), TestCaseError> {
    let text = encode(s);
    prop_assert!(text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    prop_assert_eq!(
        decode::<P>(&text).map_err(|e| TestCaseError::fail(e.to_string()))?,
        s
    );
    Ok(())
}

fn refused<P: Position + std::fmt::Debug>(text: &str) -> Result<(), TestCaseError> {
    if let Err(e) = decode::<P>(text) {
        prop_assert!(matches!(e, Error::Invalid { .. }), "{:?}", e);
    }
    Ok(())
}

/// `p` as a seek in the direction drawn.
fn toward<P>(before: bool, p: P) -> Seek<P> {
    if before {
        Seek::Before(p)
    } else {
        Seek::After(p)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_position_reads_back_as_written(
        at in moment(), id in uuid(), day in 0i32..100_000,
        exposure in prop::option::of(0i64..=999_999_999_999), back in seek(Just(())),
    ) {
        let before = matches!(back, Seek::Before(()));
        reads_back(toward(before, JobCursor { created_at: at, id: JobId(id) }))?;
        reads_back(toward(before, LedgerCursor { created_at: at, id: LedgerEntryId(id) }))?;
        reads_back(toward(before, DeliveryCursor { created_at: at, id: DeliveryId(id) }))?;
        reads_back(toward(before, ParkedCursor {
            exposure_usd: exposure.map(Usd::from_micros),
            created_at: at,
            id: ParkedId(id),
        }))?;
        let day = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap() + chrono::Days::new(day as u64);
        reads_back(toward(before, AttemptCursor { day, started_at: at, id: AttemptId(id) }))?;
    }

    /// Text a client made up, or a real cursor with a byte changed: a page
    /// or a field error, never a panic and never another kind of error.
    #[test]
    fn any_other_text_is_a_field_error(
        text in prop_oneof![".{0,40}", "[A-Za-z0-9_-]{0,80}"],
        real in seek(moment()), flip in any::<prop::sample::Index>(), to in any::<char>(),
    ) {
        refused::<JobCursor>(&text)?;
        refused::<ParkedCursor>(&text)?;
        refused::<AttemptCursor>(&text)?;
        let job = |at| JobCursor { created_at: at, id: JobId(Uuid::nil()) };
        let good = encode(match real {
            Seek::After(at) => Seek::After(job(at)),
            Seek::Before(at) => Seek::Before(job(at)),
        });
        let mut chars: Vec<char> = good.chars().collect();
        let i = flip.index(chars.len());
        chars[i] = to;
        let bad: String = chars.into_iter().collect();
        refused::<JobCursor>(&bad)?;
        refused::<LedgerCursor>(&bad)?;
        refused::<DeliveryCursor>(&bad)?;
    }

    /// Any list, any page size: `next` to the end sees every row once in
    /// order, and `prev` from there comes back through the same pages.
    #[test]
    fn pages_walk_any_list_to_its_end_and_back(len in 0usize..60, limit in 1usize..12, gaps in prop::collection::vec(1i64..5, 60)) {
        // Rows newest first; their times strictly fall, by uneven steps.
        let mut t = 1_700_000_000i64;
        let rows: Vec<JobCursor> = (0..len).map(|i| {
            t -= gaps[i];
            JobCursor { created_at: DateTime::from_timestamp(t, 0).unwrap(), id: JobId(Uuid::from_u128(i as u128)) }
        }).collect();
        let read = |seek: Option<Seek<JobCursor>>| -> Page<JobCursor> {
            let found: Vec<JobCursor> = match seek {
                None => rows.iter().copied().take(limit + 1).collect(),
                Some(Seek::After(c)) => rows.iter().copied().filter(|r| r.created_at < c.created_at).take(limit + 1).collect(),
                Some(Seek::Before(c)) => {
                    let newer: Vec<JobCursor> = rows.iter().copied().filter(|r| r.created_at > c.created_at).collect();
                    newer[newer.len().saturating_sub(limit + 1)..].to_vec()
                }
            };
            Page::of(found, limit, seek, |r| *r)
        };
        let mut pages = vec![read(None)];
        prop_assert_eq!(pages[0].prev.clone(), None);
        while let Some(next) = pages.last().unwrap().next.clone() {
            prop_assert!(pages.len() <= len, "more pages than rows");
            pages.push(read(Some(decode(&next).unwrap())));
        }
        let seen: Vec<JobCursor> = pages.iter().flat_map(|p| p.items.clone()).collect();
        prop_assert_eq!(&seen, &rows);
        prop_assert!(pages.iter().all(|p| p.items.len() <= limit));
        let mut back = pages.pop().unwrap();
        while let Some(prev) = back.prev.clone() {
            back = read(Some(decode(&prev).unwrap()));
            let expected = pages.pop().expect("no more pages back than forward");
            prop_assert_eq!(&back.items, &expected.items);
        }
        prop_assert!(pages.is_empty(), "the walk back stopped short");
    }
}
