//! US dollars as an exact decimal with six places: what providers charge and
//! what we estimate. Never a float. Serialised as a string ("0.040000").

use rust_decimal::prelude::*;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Decimal places every amount is kept to (NUMERIC(12,6) in PostgreSQL).
pub const USD_SCALE: u32 = 6;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd(Decimal);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an amount in dollars like 0.05")]
pub struct UsdError(pub String);

impl Usd {
    pub const ZERO: Usd = Usd(Decimal::ZERO);

    pub fn new(d: Decimal) -> Usd {
        Usd(d.round_dp(USD_SCALE))
    }

    pub fn parse(s: &str) -> Result<Usd, UsdError> {
        let d = Decimal::from_str(s.trim()).map_err(|_| UsdError(s.to_string()))?;
        if d.is_sign_negative() || d.scale() > USD_SCALE || d > Decimal::from(999_999) {
            return Err(UsdError(s.to_string()));
        }
        Ok(Usd::new(d))
    }

    pub fn decimal(self) -> Decimal {
        self.0
    }

    pub fn times(self, factor: Decimal) -> Usd {
        Usd::new(self.0 * factor)
    }

    pub fn plus(self, other: Usd) -> Usd {
        Usd::new(self.0 + other.0)
    }

    /// An amount given in whole millionths of a dollar (how SQLite keeps
    /// money, so that sums and comparisons in SQL stay exact).
    pub fn from_micros(micros: i64) -> Usd {
        Usd(Decimal::new(micros, USD_SCALE))
    }

    /// The amount as people read it: "$12.40", "$0.0235". Exact, with at
    /// least two decimals; a small amount is never rounded to "$0.00".
    pub fn dollars(self) -> String {
        let d = self.0.normalize();
        if d.scale() < 2 {
            let mut d = d;
            d.rescale(2);
            format!("${d}")
        } else {
            format!("${d}")
        }
    }

    /// This amount as a whole percentage of `whole`, rounded down (0 when
    /// `whole` is zero): for bars and warnings, never for money.
    pub fn percent_of(self, whole: Usd) -> u32 {
        if whole.0.is_zero() {
            return 0;
        }
        (self.0 * Decimal::from(100) / whole.0)
            .floor()
            .to_u32()
            .unwrap_or(u32::MAX)
    }

    /// The amount in whole millionths of a dollar: exact, because amounts
    /// keep six places. `None` only past what an i64 holds.
    pub fn micros(self) -> Option<i64> {
        (self.0 * Decimal::from(1_000_000)).trunc().to_i64()
    }
}

#[cfg(test)]
mod dollars_tests {
    use super::*;

    #[test]
    fn people_read_exact_dollars() {
        let d = |s: &str| Usd::parse(s).unwrap().dollars();
        assert_eq!(d("12.4"), "$12.40");
        assert_eq!(d("0"), "$0.00");
        assert_eq!(d("0.0235"), "$0.0235");
        assert_eq!(d("0.000001"), "$0.000001");
        assert_eq!(d("50.000000"), "$50.00");
    }
}

impl fmt::Display for Usd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = self.0;
        d.rescale(USD_SCALE);
        write!(f, "{d}")
    }
}

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Usd::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// In the OpenAPI document: a string of dollars with exactly six decimals.
#[cfg(feature = "server")]
impl utoipa::PartialSchema for Usd {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(r"^[0-9]{1,6}\.[0-9]{6}$"))
            .examples(["0.040000"])
            .description(Some(
                "US dollars as an exact decimal with six places (never a float).",
            ))
            .into()
    }
}

#[cfg(feature = "server")]
impl utoipa::ToSchema for Usd {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_six_places() {
        assert_eq!(Usd::parse("0.04").unwrap().to_string(), "0.040000");
        assert_eq!(
            Usd::parse("0.1")
                .unwrap()
                .plus(Usd::parse("0.2").unwrap())
                .to_string(),
            "0.300000"
        );
        assert!(Usd::parse("-1").is_err());
        assert!(Usd::parse("0.0000001").is_err());
        assert!(Usd::parse("abc").is_err());
        assert_eq!(Usd::parse("0.120001").unwrap().micros(), Some(120_001));
        assert_eq!(Usd::parse("12.4").unwrap().micros(), Some(12_400_000));
        assert_eq!(Usd::from_micros(120_001), Usd::parse("0.120001").unwrap());
        assert_eq!(Usd::from_micros(0).to_string(), "0.000000");
        let json = serde_json::to_string(&Usd::parse("12.4").unwrap()).unwrap();
        assert_eq!(json, "\"12.400000\"");
    }
}
