//! Column codecs shared by the store's files: timestamps as fixed-width text, enums and
//! JSON columns decoded with an error that names the column.

use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use super::sql::Row;
use super::{Result, StoreError};

/// Fixed-width RFC 3339 in UTC with microseconds: comparing the text compares the times.
pub(super) fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// PostgreSQL's `clock_timestamp()` (the time now, not the transaction's start) as
/// [`ts`] writes it, in the bytewise collation lease columns compare in (the store's
/// clock for leases: `owners::lease_clock`).
pub(super) const PG_CLOCK: &str =
    "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') COLLATE \"C\"";

/// The error of a stored value that does not decode, naming its column.
pub(super) fn conversion(idx: usize, msg: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("column {idx}: {msg}"))
}

pub(super) fn parse_col<T: FromStr>(r: &Row<'_>, idx: usize) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    let text = r.get_str(idx)?;
    text.parse::<T>()
        .map_err(|e| conversion(idx, format!("`{text}`: {e}")))
}

pub(super) fn time_col(r: &Row<'_>, idx: usize) -> Result<DateTime<Utc>> {
    let text = r.get_str(idx)?;
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| conversion(idx, format!("time `{text}`: {e}")))
}

pub(super) fn opt_time_col(r: &Row<'_>, idx: usize) -> Result<Option<DateTime<Utc>>> {
    match r.get_opt_str(idx)? {
        None => Ok(None),
        Some(_) => time_col(r, idx).map(Some),
    }
}

pub(super) fn json_col<T: serde::de::DeserializeOwned>(r: &Row<'_>, idx: usize) -> Result<T> {
    let text = r.get_bytes(idx)?;
    serde_json::from_slice(text).map_err(|e| conversion(idx, format!("JSON: {e}")))
}

pub(super) fn to_json<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| StoreError::Json { what, source })
}

/// A text column borrowed from the row.
pub(super) fn str_col<'r>(r: &Row<'r>, idx: usize) -> Result<&'r str> {
    r.get_str(idx)
}

pub(super) fn opt_str_col<'r>(r: &Row<'r>, idx: usize) -> Result<Option<&'r str>> {
    r.get_opt_str(idx)
}

/// Parses a stored enum: the stored text is the canonical name, so compare first and only
/// fall back to the (allocating, lenient) `FromStr` for anything else.
pub(super) fn enum_col<T>(
    r: &Row<'_>,
    idx: usize,
    all: &[T],
    name: fn(&T) -> &'static str,
) -> Result<T>
where
    T: Copy + FromStr,
    T::Err: std::fmt::Display,
{
    let text = str_col(r, idx)?;
    match all.iter().find(|v| name(v) == text) {
        Some(v) => Ok(*v),
        None => text
            .parse::<T>()
            .map_err(|e| conversion(idx, format!("`{text}`: {e}"))),
    }
}
