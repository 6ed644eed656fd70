//! The one cursor codec and page shape of every list (jobs, the review
//! queue, attempts, webhook deliveries, the ledger).
//!
//! A cursor is a position in a list (its sort key, then the id that breaks
//! ties) and a direction: after it is the next page, before it the previous
//! one. Clients treat the text as opaque; it is the position's parts joined
//! by `|`, led by `<` when it goes back, in URL-safe base64 without
//! padding. A forward cursor is the same text earlier versions issued, so a
//! `next_cursor` a client kept stays good.

use crate::store::Seek;
use crate::usecases::error::{Error, Result};
use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};

/// Leads the parts of a cursor that goes back a page.
const BACK: &str = "<";

/// A place in a list, written as a few parts of text.
pub trait Position: Sized + Copy {
    fn parts(&self) -> Vec<String>;
    /// `None` for anything `parts` did not write.
    fn read(parts: &[&str]) -> Option<Self>;
}

pub fn encode<P: Position>(seek: Seek<P>) -> String {
    let mut parts = seek.key().parts();
    if let Seek::Before(_) = seek {
        parts.insert(0, BACK.to_string());
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(parts.join("|"))
}

pub fn decode<P: Position>(text: &str) -> Result<Seek<P>> {
    let bad = || Error::invalid("cursor", "is not a cursor returned by this API");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| bad())?;
    let raw = String::from_utf8(raw).map_err(|_| bad())?;
    let parts: Vec<&str> = raw.split('|').collect();
    match parts.split_first() {
        Some((&BACK, rest)) => P::read(rest).map(Seek::Before),
        _ => P::read(&parts).map(Seek::After),
    }
    .ok_or_else(bad)
}

/// An absent or empty cursor is the list's first page.
pub fn decode_opt<P: Position>(text: Option<&str>) -> Result<Option<Seek<P>>> {
    text.filter(|t| !t.is_empty()).map(decode).transpose()
}

/// A time as cursors write it: exact to the nanosecond, so no two rows
/// written apart read as one.
pub fn time_part(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

pub fn read_time(part: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(part)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// One page of a list, in the list's order, with the cursors to the pages
/// on either side (`None` at either end).
#[derive(Clone, Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
    pub prev: Option<String>,
    /// Where the page sits in the whole list, when the caller asked.
    pub place: Option<Place>,
}

/// "51–100 of 116": how many rows come before the page, and how many the
/// list has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub before: u64,
    pub total: u64,
}

/// Where `page` sits in its whole list, from two counts of the list's
/// rows: all of them (no seek), and those before the page's first (`Before`
/// it). The count is the list's own filter, so the two never disagree.
pub async fn place_of<T, P, Fut>(
    page: &Page<T>,
    at: impl Fn(&T) -> P,
    count: impl Fn(Option<Seek<P>>) -> Fut,
) -> Result<Place>
where
    P: Position,
    Fut: std::future::Future<Output = crate::store::StoreResult<i64>>,
{
    let total = count(None).await?;
    let before = match page.items.first() {
        Some(first) => count(Some(Seek::Before(at(first)))).await?,
        None => 0,
    };
    Ok(Place {
        before: u64::try_from(before).unwrap_or(0),
        total: u64::try_from(total).unwrap_or(0),
    })
}

impl<T> Page<T> {
    /// A page from the rows a store read for `seek` with a limit of
    /// `limit + 1`, in the list's order: the one row past the limit says
    /// whether the list goes on that way.
    pub fn of<P: Position>(
        mut rows: Vec<T>,
        limit: usize,
        seek: Option<Seek<P>>,
        at: impl Fn(&T) -> P,
    ) -> Page<T> {
        debug_assert!(rows.len() <= limit + 1, "a store read past its limit");
        let more = rows.len() > limit;
        let after = |r: Option<&T>| r.map(|r| encode(Seek::After(at(r))));
        let before = |r: Option<&T>| r.map(|r| encode(Seek::Before(at(r))));
        let (next, prev) = match seek {
            // Read back from a position: the extra row is the farthest,
            // first in the list's order; the position itself comes next.
            Some(Seek::Before(_)) => {
                if more {
                    rows.remove(0);
                }
                let prev = if more { before(rows.first()) } else { None };
                (after(rows.last()), prev)
            }
            Some(Seek::After(_)) | None => {
                rows.truncate(limit);
                let next = if more { after(rows.last()) } else { None };
                let prev = if seek.is_some() {
                    before(rows.first())
                } else {
                    None
                };
                (next, prev)
            }
        };
        Page {
            items: rows,
            next,
            prev,
            place: None,
        }
    }

    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            next: self.next,
            prev: self.prev,
            place: self.place,
        }
    }
}

impl Position for crate::store::JobCursor {
    fn parts(&self) -> Vec<String> {
        vec![time_part(self.created_at), self.id.to_string()]
    }

    fn read(parts: &[&str]) -> Option<Self> {
        let [at, id] = parts else { return None };
        Some(Self {
            created_at: read_time(at)?,
            id: id.parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobId;
    use crate::store::JobCursor;

    fn at(n: i64) -> JobCursor {
        JobCursor {
            created_at: DateTime::from_timestamp(1_700_000_000 + n, 123).unwrap(),
            id: JobId(uuid::Uuid::from_u128(n as u128)),
        }
    }

    #[test]
    fn both_directions_read_back_as_written() {
        for seek in [Seek::After(at(1)), Seek::Before(at(2))] {
            assert_eq!(decode::<JobCursor>(&encode(seek)).unwrap(), seek);
        }
    }

    #[test]
    fn a_forward_cursor_is_the_text_earlier_versions_issued() {
        let c = at(3);
        let old = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(
            "{}|{}",
            c.created_at.to_rfc3339_opts(SecondsFormat::Nanos, true),
            c.id
        ));
        assert_eq!(encode(Seek::After(c)), old);
    }

    #[test]
    fn anything_else_is_refused_as_a_field_error() {
        for text in ["", "!!", "bm90IGEgY3Vyc29y", "PHw", "PA"] {
            let err = decode::<JobCursor>(text).unwrap_err();
            assert!(matches!(err, Error::Invalid { .. }), "{text}: {err:?}");
        }
        assert_eq!(decode_opt::<JobCursor>(Some("")).unwrap(), None);
    }

    /// Ten rows, newest first, numbered 10 down to 1.
    fn list() -> Vec<i64> {
        (1..=10).rev().collect()
    }

    fn page(seek: Option<Seek<JobCursor>>, limit: usize) -> Page<i64> {
        let rows: Vec<i64> = match seek {
            None => list().into_iter().take(limit + 1).collect(),
            Some(Seek::After(c)) => list()
                .into_iter()
                .filter(|n| at(*n).created_at < c.created_at)
                .take(limit + 1)
                .collect(),
            Some(Seek::Before(c)) => {
                let newer: Vec<i64> = list()
                    .into_iter()
                    .filter(|n| at(*n).created_at > c.created_at)
                    .collect();
                newer[newer.len().saturating_sub(limit + 1)..].to_vec()
            }
        };
        Page::of(rows, limit, seek, |n| at(*n))
    }

    #[test]
    fn pages_walk_to_the_end_and_back() {
        let mut seen = Vec::new();
        let mut p = page(None, 4);
        assert_eq!(p.prev, None);
        loop {
            seen.push(p.items.clone());
            match p.next.clone() {
                Some(n) => p = page(Some(decode(&n).unwrap()), 4),
                None => break,
            }
        }
        assert_eq!(seen, vec![vec![10, 9, 8, 7], vec![6, 5, 4, 3], vec![2, 1]]);
        let mut back = Vec::new();
        while let Some(prev) = p.prev.clone() {
            p = page(Some(decode(&prev).unwrap()), 4);
            back.push(p.items.clone());
        }
        assert_eq!(back, vec![vec![6, 5, 4, 3], vec![10, 9, 8, 7]]);
        assert!(p.next.is_some());
    }
}
