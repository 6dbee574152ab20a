//! Column codecs shared by the store's files: timestamps as fixed-width text, enums and
//! JSON columns decoded with an error that names the column.

use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{types::Type, Row};
use serde::Serialize;

use super::{Result, StoreError};

/// Fixed-width RFC 3339 in UTC with microseconds: comparing the text compares the times.
pub(super) fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

pub(super) fn conversion(idx: usize, msg: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, msg.into())
}

pub(super) fn parse_col<T: FromStr>(r: &Row<'_>, idx: usize) -> rusqlite::Result<T>
where
    T::Err: std::fmt::Display,
{
    let text: String = r.get(idx)?;
    text.parse::<T>()
        .map_err(|e| conversion(idx, format!("`{text}`: {e}")))
}

pub(super) fn time_col(r: &Row<'_>, idx: usize) -> rusqlite::Result<DateTime<Utc>> {
    let text: String = r.get(idx)?;
    DateTime::parse_from_rfc3339(&text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| conversion(idx, format!("time `{text}`: {e}")))
}

pub(super) fn opt_time_col(r: &Row<'_>, idx: usize) -> rusqlite::Result<Option<DateTime<Utc>>> {
    match r.get::<_, Option<String>>(idx)? {
        None => Ok(None),
        Some(_) => time_col(r, idx).map(Some),
    }
}

pub(super) fn json_col<T: serde::de::DeserializeOwned>(
    r: &Row<'_>,
    idx: usize,
) -> rusqlite::Result<T> {
    let text: String = r.get(idx)?;
    serde_json::from_str(&text).map_err(|e| conversion(idx, format!("JSON: {e}")))
}

pub(super) fn to_json<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| StoreError::Json { what, source })
}

/// A text column borrowed from the row.
pub(super) fn str_col<'r>(r: &'r Row<'_>, idx: usize) -> rusqlite::Result<&'r str> {
    r.get_ref(idx)?.as_str().map_err(Into::into)
}

pub(super) fn opt_str_col<'r>(r: &'r Row<'_>, idx: usize) -> rusqlite::Result<Option<&'r str>> {
    r.get_ref(idx)?.as_str_or_null().map_err(Into::into)
}

/// Parses a stored enum: the stored text is the canonical name, so compare first and only
/// fall back to the (allocating, lenient) `FromStr` for anything else.
pub(super) fn enum_col<T>(
    r: &Row<'_>,
    idx: usize,
    all: &[T],
    name: fn(&T) -> &'static str,
) -> rusqlite::Result<T>
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
