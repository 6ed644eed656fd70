//! Money: dollars are exact decimals with six places that read back as
//! written and add without drift; credits are whole and bounded; and an
//! unknown cost stays unknown: never read as zero, never shown as "$0.00".

use crate::model::{AttemptState, Credits, Happening, Usd, GRANT_MAX};
use crate::usecases::spend::Tally;
use proptest::prelude::*;
use rust_decimal::Decimal;

/// The largest amount parsing accepts, in millionths.
const MICROS_MAX: i64 = 999_999_000_000;

fn micros() -> impl Strategy<Value = i64> {
    prop_oneof![0i64..=1_000, 0i64..=MICROS_MAX]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn dollars_read_back_exactly_as_written(m in micros()) {
        let usd = Usd::from_micros(m);
        prop_assert_eq!(usd.micros(), Some(m));
        let text = usd.to_string();
        prop_assert_eq!(text.split('.').nth(1).map(str::len), Some(6), "{}", text);
        prop_assert_eq!(Usd::parse(&text), Ok(usd));
        let json = serde_json::to_string(&usd).unwrap();
        prop_assert_eq!(serde_json::from_str::<Usd>(&json).unwrap(), usd);
        // What people read is the same amount, never rounded away.
        let shown = usd.dollars();
        prop_assert_eq!(Usd::parse(shown.trim_start_matches('$')), Ok(usd), "{}", shown);
        prop_assert_eq!(shown == "$0.00", m == 0);
    }

    #[test]
    fn sums_are_exact(a in micros(), b in micros(), c in micros()) {
        let (ua, ub, uc) = (Usd::from_micros(a), Usd::from_micros(b), Usd::from_micros(c));
        prop_assert_eq!(ua.plus(ub).micros(), Some(a + b));
        prop_assert_eq!(ua.plus(ub).plus(uc), ua.plus(ub.plus(uc)));
        prop_assert_eq!(ua.plus(ub), ub.plus(ua));
    }

    /// A rate card's factor (seconds, a share): the product is the exact
    /// product rounded to six places, and never panics.
    #[test]
    fn products_round_to_six_places(m in micros(), f in 0i64..=100_000_000, scale in 0u32..=6) {
        let factor = Decimal::new(f, scale);
        let got = Usd::from_micros(m).times(factor);
        let exact = Decimal::new(m, 6) * factor;
        prop_assert_eq!(got.decimal(), exact.round_dp(6));
    }

    /// Any text: an amount within the bounds, or a refusal; never a panic.
    #[test]
    fn any_text_is_an_amount_or_refused(text in prop_oneof![".{0,16}", "-?[0-9]{0,9}(\\.[0-9]{0,9})?", "[0-9eE+.-]{0,12}"]) {
        if let Ok(usd) = Usd::parse(&text) {
            prop_assert!(usd.micros().is_some_and(|m| (0..=MICROS_MAX).contains(&m)), "{}", text);
        }
        if let Ok(c) = Credits::parse_grant(&text) {
            prop_assert!((1..=GRANT_MAX).contains(&c.get()), "{}", text);
        }
    }

    #[test]
    fn a_share_of_a_cap_is_a_percent_and_never_panics(part in micros(), whole in micros()) {
        let p = Usd::from_micros(part).percent_of(Usd::from_micros(whole));
        if whole == 0 {
            prop_assert_eq!(p, 0);
        } else {
            // Past what a u32 holds it saturates: a bar is full either way.
            let exact = (part as u64 * 100) / whole as u64;
            prop_assert_eq!(u64::from(p), exact.min(u64::from(u32::MAX)));
        }
    }

    /// A tally with calls nobody priced, or still out, never reads as a
    /// bare total: "$0.00" only when every call is priced and cost nothing.
    #[test]
    fn a_total_never_hides_an_unknown_cost(priced in 0i64..50, unpriced in 0i64..50, pending in 0i64..50, m in micros()) {
        let tally = Tally {
            attempts: priced + unpriced + pending,
            priced_usd: if priced == 0 { Usd::ZERO } else { Usd::from_micros(m) },
            priced,
            unpriced,
        };
        let words = tally.words();
        prop_assert_eq!(words.contains("unpriced"), unpriced > 0, "{}", words);
        prop_assert_eq!(words.contains("pending"), pending > 0, "{}", words);
        prop_assert_eq!(words.starts_with('$'), priced > 0 || (unpriced == 0 && pending == 0), "{}", words);
    }

    /// An attempt's end stored without a cost reads back without one: the
    /// unknown is `null`, never `0`.
    #[test]
    fn an_unpriced_end_stays_unknown(attempt in 1i32..100, cost in prop::option::of(micros())) {
        let ended = Happening::AttemptEnded {
            attempt,
            state: AttemptState::Failed,
            error_class: None,
            usd: cost.map(Usd::from_micros),
            priced: cost.is_some(),
        };
        let (kind, detail) = ended.to_stored();
        prop_assert_eq!(detail["usd"].is_null(), cost.is_none());
        prop_assert_eq!(Happening::from_stored(kind, detail), ended);
    }
}
