//! Type mapping, the one place the backends store a value differently:
//! money is NUMERIC(12,6) on PostgreSQL and whole millionths of a dollar
//! (INTEGER) on SQLite, so that SQL arithmetic and sums stay exact on both.
//! Everything else (uuid, timestamps, JSON, booleans) sqlx maps itself.

use crate::model::Usd;
use rust_decimal::Decimal;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef};
use sqlx::sqlite::{SqliteArgumentValue, SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, Encode, Postgres, Sqlite, Type};

impl Type<Sqlite> for Usd {
    fn type_info() -> SqliteTypeInfo {
        <i64 as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <i64 as Type<Sqlite>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Sqlite> for Usd {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        let micros = self
            .micros()
            .ok_or_else(|| format!("{self} is too large to store"))?;
        <i64 as Encode<'q, Sqlite>>::encode(micros, buf)
    }
}

impl<'r> Decode<'r, Sqlite> for Usd {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Usd::from_micros(<i64 as Decode<'r, Sqlite>>::decode(
            value,
        )?))
    }
}

impl Type<Postgres> for Usd {
    fn type_info() -> PgTypeInfo {
        <Decimal as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Decimal as Type<Postgres>>::compatible(ty)
    }
}

impl sqlx::postgres::PgHasArrayType for Usd {
    fn array_type_info() -> PgTypeInfo {
        <Decimal as sqlx::postgres::PgHasArrayType>::array_type_info()
    }
}

impl Encode<'_, Postgres> for Usd {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <Decimal as Encode<'_, Postgres>>::encode(self.decimal(), buf)
    }
}

impl<'r> Decode<'r, Postgres> for Usd {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Usd::new(<Decimal as Decode<'r, Postgres>>::decode(value)?))
    }
}
