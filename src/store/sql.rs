//! The store's portable SQL layer (issue 27): one connection type over SQLite
//! (`rusqlite`) and PostgreSQL (the synchronous `postgres` client), so every file of the
//! store writes each statement once and runs on both backends.
//!
//! Statements are written in SQLite's spelling with numbered placeholders (`?1`, `?2`)
//! and the portable forms both engines accept (`INSERT … ON CONFLICT … DO NOTHING` /
//! `DO UPDATE`, `RETURNING`, `COALESCE`). [`Db`] renders them per dialect once and caches
//! the prepared statement: on PostgreSQL `?N` becomes `$N` and `rowid` (SQLite's implicit
//! insertion order, read on `tasks` and `pulls`) becomes their `seq` column. Parameters
//! are [`Value`]s, converted to whatever type the server declares for the column.
//! Timestamps are fixed-width RFC 3339 text on both (`rows::ts`): they sort as text.
//!
//! Write transactions ([`Db::begin_write`]) are `BEGIN IMMEDIATE` on SQLite (the file's
//! write lock is taken before anything is read) and, on PostgreSQL, `BEGIN` plus a
//! transaction-scoped advisory lock that every writing transaction of the store takes:
//! the same one-writer-at-a-time rule, so a read-then-write inside one never races
//! another daemon's, and no statement needs `FOR UPDATE`. Reads outside a transaction
//! see what was committed (SQLite's WAL snapshot, PostgreSQL's READ COMMITTED).
//!
//! The one exception is the owned claim on PostgreSQL ([`Db::begin_claim`], issue 27): it
//! takes that lock *shared*, so claimers run side by side while every other writer still
//! excludes them (and each other). It stays correct because a claim is one statement that
//! locks the row it takes (`FOR UPDATE SKIP LOCKED`, its state re-checked on the newest
//! version), and writes only what belongs to that task — its `tasks` row (the claim's owner
//! and lease and its summary are columns of it), its next `transitions` row (its
//! number read from the task's own rows) — reading besides only rows that
//! exclusive writers alone change (pull requests, follow-ups, attempts, quota waits). Two
//! claimers therefore touch disjoint rows and never take one task; a writer that reads
//! then writes still sees nothing change under it. PostgreSQL queues a shared request
//! behind a waiting exclusive one, so claimers cannot starve the other writers.
//!
//! Must not: let a driver's error type out of the store (they become [`StoreError`]).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Mutex;

use super::{Result, StoreError};

/// Which engine a [`Db`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    Sqlite,
    Postgres,
}

/// The advisory lock every writing transaction on PostgreSQL takes ("polw" in ASCII).
const WRITE_LOCK: i64 = 0x706f_6c77;

/// One connection.
pub(super) enum Db {
    Sqlite(rusqlite::Connection),
    Postgres(Box<PgConn>),
}

pub(super) struct PgConn {
    /// `None` only while being dropped.
    client: Mutex<Option<postgres::Client>>,
    statements: RefCell<HashMap<String, postgres::Statement>>,
    in_tx: Cell<bool>,
}

/// A statement parameter.
#[derive(Debug, Clone, Copy)]
pub(super) enum Value<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
    Bool(bool),
}

/// What can be a parameter (`params!` calls this on each argument).
pub(super) trait ToValue {
    fn to_value(&self) -> Value<'_>;
}

macro_rules! int_value {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value<'_> {
                Value::Int(*self as i64)
            }
        }
    )*};
}
int_value!(i64, i32, u32, u16, u8, usize, u64);

impl ToValue for bool {
    fn to_value(&self) -> Value<'_> {
        Value::Bool(*self)
    }
}
impl ToValue for f64 {
    fn to_value(&self) -> Value<'_> {
        Value::Real(*self)
    }
}
impl ToValue for str {
    fn to_value(&self) -> Value<'_> {
        Value::Text(self)
    }
}
impl ToValue for String {
    fn to_value(&self) -> Value<'_> {
        Value::Text(self)
    }
}
impl ToValue for std::borrow::Cow<'_, str> {
    fn to_value(&self) -> Value<'_> {
        Value::Text(self)
    }
}
impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value<'_> {
        (**self).to_value()
    }
}
impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value<'_> {
        match self {
            Some(v) => v.to_value(),
            None => Value::Null,
        }
    }
}
impl ToValue for Value<'_> {
    fn to_value(&self) -> Value<'_> {
        *self
    }
}

/// `params![a, b, …]`: the parameters of one statement, borrowed.
macro_rules! params {
    () => { &[] as &[$crate::store::sql::Value<'_>] };
    ($($x:expr),+ $(,)?) => {
        &[$($crate::store::sql::ToValue::to_value(&$x)),+] as &[$crate::store::sql::Value<'_>]
    };
}
pub(super) use params;

/// A text parameter as every backend stores it: each NUL as U+FFFD. PostgreSQL refuses a
/// NUL in text, and foreign text (an issue's title or body, an agent's output line, a
/// check's output) may hold one; SQLite stores the same so the backends agree. A lookup by
/// a key with a NUL is mapped alike, so it finds what was stored under that key.
pub(super) fn stored_text(t: &str) -> std::borrow::Cow<'_, str> {
    if t.contains('\0') {
        std::borrow::Cow::Owned(t.replace('\0', "\u{fffd}"))
    } else {
        std::borrow::Cow::Borrowed(t)
    }
}

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        use std::borrow::Cow;
        Ok(match *self {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Int(i) => ToSqlOutput::Borrowed(ValueRef::Integer(i)),
            Value::Real(f) => ToSqlOutput::Borrowed(ValueRef::Real(f)),
            Value::Text(t) => match stored_text(t) {
                Cow::Borrowed(t) => ToSqlOutput::Borrowed(ValueRef::Text(t.as_bytes())),
                Cow::Owned(t) => ToSqlOutput::Owned(rusqlite::types::Value::Text(t)),
            },
            Value::Bool(b) => ToSqlOutput::Borrowed(ValueRef::Integer(b as i64)),
        })
    }
}

type BoxError = Box<dyn std::error::Error + Sync + Send>;

impl postgres::types::ToSql for Value<'_> {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<postgres::types::IsNull, BoxError> {
        use bytes::BufMut;
        use postgres::types::{IsNull, Type};
        let int = |v: &Value<'_>| -> std::result::Result<i64, BoxError> {
            match *v {
                Value::Int(i) => Ok(i),
                Value::Bool(b) => Ok(b as i64),
                other => Err(format!("{other:?} is not an integer (column type {ty})").into()),
            }
        };
        match (*self, ty) {
            (Value::Null, _) => return Ok(IsNull::Yes),
            (v, &Type::INT8) => out.put_i64(int(&v)?),
            (v, &Type::INT4) => out.put_i32(i32::try_from(int(&v)?)?),
            (v, &Type::INT2) => out.put_i16(i16::try_from(int(&v)?)?),
            (v, &Type::BOOL) => out.put_u8((int(&v)? != 0) as u8),
            (Value::Real(f), &Type::FLOAT8) => out.put_f64(f),
            (v, &Type::FLOAT8) => out.put_f64(int(&v)? as f64),
            (Value::Real(f), &Type::FLOAT4) => out.put_f32(f as f32),
            (Value::Text(t), _) => out.put_slice(stored_text(t).as_bytes()),
            (Value::Int(i), &Type::TEXT | &Type::VARCHAR) => {
                out.put_slice(i.to_string().as_bytes())
            }
            (v, _) => return Err(format!("cannot send {v:?} as {ty}").into()),
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }

    fn to_sql_checked(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<postgres::types::IsNull, BoxError> {
        self.to_sql(ty, out)
    }
}

/// A column value as read from PostgreSQL, whatever its declared type.
#[derive(Debug)]
enum PgCell<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
    Bytes(&'a [u8]),
    Bool(bool),
}

impl<'a> postgres::types::FromSql<'a> for PgCell<'a> {
    fn from_sql(ty: &postgres::types::Type, raw: &'a [u8]) -> std::result::Result<Self, BoxError> {
        use postgres::types::Type;
        let fixed = |n: usize| -> std::result::Result<&'a [u8], BoxError> {
            (raw.len() == n)
                .then_some(raw)
                .ok_or_else(|| format!("{ty} value of {} bytes", raw.len()).into())
        };
        Ok(match *ty {
            Type::INT8 => PgCell::Int(i64::from_be_bytes(fixed(8)?.try_into()?)),
            Type::INT4 => PgCell::Int(i32::from_be_bytes(fixed(4)?.try_into()?) as i64),
            Type::INT2 => PgCell::Int(i16::from_be_bytes(fixed(2)?.try_into()?) as i64),
            Type::BOOL => PgCell::Bool(fixed(1)?[0] != 0),
            Type::FLOAT8 => PgCell::Real(f64::from_be_bytes(fixed(8)?.try_into()?)),
            Type::FLOAT4 => PgCell::Real(f32::from_be_bytes(fixed(4)?.try_into()?) as f64),
            Type::BYTEA => PgCell::Bytes(raw),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                PgCell::Text(std::str::from_utf8(raw)?)
            }
            _ => {
                return Err(format!(
                    "column type {ty} is not read by the store (cast it to BIGINT, DOUBLE PRECISION or TEXT)"
                )
                .into())
            }
        })
    }

    fn from_sql_null(_: &postgres::types::Type) -> std::result::Result<Self, BoxError> {
        Ok(PgCell::Null)
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }
}

/// A column value, borrowed from the row, the same for both engines.
#[derive(Debug, Clone, Copy)]
pub(super) enum Datum<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a [u8]),
}

/// What a column can be read as ([`Row::get`]).
pub(super) trait FromCell: Sized {
    fn from_cell(cell: Datum<'_>) -> std::result::Result<Self, String>;
}

impl FromCell for i64 {
    fn from_cell(cell: Datum<'_>) -> std::result::Result<Self, String> {
        match cell {
            Datum::Int(i) => Ok(i),
            Datum::Real(f) if f.fract() == 0.0 => Ok(f as i64),
            other => Err(format!("expected an integer, found {other:?}")),
        }
    }
}
macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl FromCell for $t {
            fn from_cell(cell: Datum<'_>) -> std::result::Result<Self, String> {
                let i = i64::from_cell(cell)?;
                <$t>::try_from(i).map_err(|e| format!("{i}: {e}"))
            }
        }
    )*};
}
from_int!(i32, u32, u64, usize, u16, u8);

impl FromCell for bool {
    fn from_cell(cell: Datum<'_>) -> std::result::Result<Self, String> {
        Ok(i64::from_cell(cell)? != 0)
    }
}
impl FromCell for f64 {
    fn from_cell(cell: Datum<'_>) -> std::result::Result<Self, String> {
        match cell {
            Datum::Real(f) => Ok(f),
            Datum::Int(i) => Ok(i as f64),
            other => Err(format!("expected a number, found {other:?}")),
        }
    }
}
impl FromCell for String {
    fn from_cell(cell: Datum<'_>) -> std::result::Result<Self, String> {
        match cell {
            Datum::Text(t) => String::from_utf8(t.to_vec()).map_err(|e| e.to_string()),
            other => Err(format!("expected text, found {other:?}")),
        }
    }
}
impl<T: FromCell> FromCell for Option<T> {
    fn from_cell(cell: Datum<'_>) -> std::result::Result<Self, String> {
        match cell {
            Datum::Null => Ok(None),
            other => T::from_cell(other).map(Some),
        }
    }
}

/// One result row, on either engine.
pub(super) enum Row<'a> {
    Sqlite(&'a rusqlite::Row<'a>),
    Postgres(&'a postgres::Row),
}

impl<'a> Row<'a> {
    /// The raw cell at `idx` (0-based).
    pub(super) fn cell(&self, idx: usize) -> Result<Datum<'a>> {
        match self {
            Row::Sqlite(r) => {
                use rusqlite::types::ValueRef;
                Ok(match r.get_ref(idx)? {
                    ValueRef::Null => Datum::Null,
                    ValueRef::Integer(i) => Datum::Int(i),
                    ValueRef::Real(f) => Datum::Real(f),
                    ValueRef::Text(t) | ValueRef::Blob(t) => Datum::Text(t),
                })
            }
            Row::Postgres(r) => Ok(match r.try_get::<_, PgCell<'a>>(idx)? {
                PgCell::Null => Datum::Null,
                PgCell::Int(i) => Datum::Int(i),
                PgCell::Real(f) => Datum::Real(f),
                PgCell::Text(t) => Datum::Text(t.as_bytes()),
                PgCell::Bytes(b) => Datum::Text(b),
                PgCell::Bool(b) => Datum::Int(b as i64),
            }),
        }
    }

    pub(super) fn get<T: FromCell>(&self, idx: usize) -> Result<T> {
        T::from_cell(self.cell(idx)?).map_err(|e| StoreError::Corrupt(format!("column {idx}: {e}")))
    }

    /// A text column borrowed from the row.
    pub(super) fn get_str(&self, idx: usize) -> Result<&'a str> {
        self.get_opt_str(idx)?
            .ok_or_else(|| StoreError::Corrupt(format!("column {idx}: NULL where text belongs")))
    }

    pub(super) fn get_opt_str(&self, idx: usize) -> Result<Option<&'a str>> {
        match self.cell(idx)? {
            Datum::Null => Ok(None),
            Datum::Text(t) => std::str::from_utf8(t)
                .map(Some)
                .map_err(|e| StoreError::Corrupt(format!("column {idx}: {e}"))),
            other => Err(StoreError::Corrupt(format!(
                "column {idx}: expected text, found {other:?}"
            ))),
        }
    }

    /// A text column's bytes as stored, without a UTF-8 check.
    pub(super) fn get_bytes(&self, idx: usize) -> Result<&'a [u8]> {
        match self.cell(idx)? {
            Datum::Text(t) => Ok(t),
            other => Err(StoreError::Corrupt(format!(
                "column {idx}: expected text, found {other:?}"
            ))),
        }
    }
}

/// `?N` to `$N` and the word `rowid` to `seq`, outside quoted text: SQLite's spelling of a
/// statement in PostgreSQL's.
pub(super) fn render_postgres(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let bytes = sql.as_bytes();
    let mut i = 0;
    let mut next_bare = 1;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\'' || c == b'"' {
            let end = sql[i + 1..]
                .find(c as char)
                .map_or(sql.len(), |e| i + 1 + e + 1);
            out.push_str(&sql[i..end]);
            i = end;
        } else if c == b'?' {
            let digits = sql[i + 1..].bytes().take_while(u8::is_ascii_digit).count();
            out.push('$');
            if digits == 0 {
                out.push_str(&next_bare.to_string());
                next_bare += 1;
            } else {
                out.push_str(&sql[i + 1..i + 1 + digits]);
            }
            i += 1 + digits;
        } else if (c.is_ascii_alphabetic() || c == b'_')
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
        {
            let len = sql[i..]
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            let word = &sql[i..i + len];
            if word.eq_ignore_ascii_case("rowid") {
                out.push_str("seq");
            } else {
                out.push_str(word);
            }
            i += len;
        } else {
            let ch = sql[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Runs `f` outside any tokio runtime. The `postgres` client blocks on a runtime of its
/// own (to connect, run a statement, or close when dropped), which tokio refuses inside
/// another runtime's context (an async task of the daemon calling the store): there, `f`
/// runs on a plain thread of its own while this one waits, as it would on SQLite's lock.
pub(super) fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

impl PgConn {
    /// Runs `f` on the client ([`off_runtime`]).
    fn call<T: Send>(&self, f: impl FnOnce(&mut postgres::Client) -> T + Send) -> T {
        let client = &self.client;
        off_runtime(|| {
            let mut guard = client.lock().unwrap_or_else(|p| p.into_inner());
            f(guard
                .as_mut()
                .expect("the client lives until the connection is dropped"))
        })
    }
}

impl Drop for PgConn {
    fn drop(&mut self) {
        // Closing the connection blocks on the client's runtime too.
        let client = self
            .client
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        off_runtime(move || drop(client));
    }
}

impl Db {
    pub(super) fn postgres(client: postgres::Client) -> Db {
        Db::Postgres(Box::new(PgConn {
            client: Mutex::new(Some(client)),
            statements: RefCell::new(HashMap::new()),
            in_tx: Cell::new(false),
        }))
    }

    pub(super) fn dialect(&self) -> Dialect {
        match self {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The SQLite connection, for what only SQLite has (pragmas, integrity checks, the
    /// online backup); `None` on PostgreSQL.
    pub(super) fn sqlite(&self) -> Option<&rusqlite::Connection> {
        match self {
            Db::Sqlite(c) => Some(c),
            Db::Postgres(_) => None,
        }
    }

    /// The value that means "no limit" for a `LIMIT ?` parameter.
    pub(super) fn limit(&self, limit: Option<usize>) -> Value<'static> {
        match (limit, self.dialect()) {
            (Some(l), _) => Value::Int(l as i64),
            (None, Dialect::Sqlite) => Value::Int(-1),
            (None, Dialect::Postgres) => Value::Null,
        }
    }

    fn pg_statement(pg: &PgConn, sql: &str) -> Result<postgres::Statement> {
        if let Some(s) = pg.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let rendered = render_postgres(sql);
        let stmt = pg.call(|c| c.prepare(&rendered))?;
        pg.statements
            .borrow_mut()
            .insert(sql.to_string(), stmt.clone());
        Ok(stmt)
    }

    fn pg_params<'v>(params: &'v [Value<'v>]) -> Vec<&'v (dyn postgres::types::ToSql + Sync)> {
        params
            .iter()
            .map(|v| v as &(dyn postgres::types::ToSql + Sync))
            .collect()
    }

    /// Runs one statement; the number of rows it changed.
    pub(super) fn execute(&self, sql: &str, params: &[Value<'_>]) -> Result<usize> {
        match self {
            Db::Sqlite(c) => Ok(c
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(params.iter()))?),
            Db::Postgres(pg) => {
                let stmt = Db::pg_statement(pg, sql)?;
                Ok(pg.call(|c| c.execute(&stmt, &Db::pg_params(params)))? as usize)
            }
        }
    }

    /// Runs statements without parameters (migrations).
    pub(super) fn batch(&self, sql: &str) -> Result<()> {
        match self {
            Db::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Db::Postgres(pg) => Ok(pg.call(|c| c.batch_execute(sql))?),
        }
    }

    /// Calls `f` with each row, in order; stops at its first error.
    pub(super) fn for_each<E>(
        &self,
        sql: &str,
        params: &[Value<'_>],
        mut f: impl FnMut(&Row<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E>
    where
        E: From<StoreError>,
    {
        match self {
            Db::Sqlite(c) => {
                let mut stmt = c.prepare_cached(sql).map_err(StoreError::from)?;
                let mut rows = stmt
                    .query(rusqlite::params_from_iter(params.iter()))
                    .map_err(StoreError::from)?;
                while let Some(row) = rows.next().map_err(StoreError::from)? {
                    f(&Row::Sqlite(row))?;
                }
                Ok(())
            }
            Db::Postgres(pg) => {
                let stmt = Db::pg_statement(pg, sql)?;
                // Collected before `f` runs, so `f` may use this connection again.
                let rows = pg
                    .call(|c| c.query(&stmt, &Db::pg_params(params)))
                    .map_err(StoreError::from)?;
                for row in &rows {
                    f(&Row::Postgres(row))?;
                }
                Ok(())
            }
        }
    }

    /// Every row, mapped by `f`.
    pub(super) fn query_map<T>(
        &self,
        sql: &str,
        params: &[Value<'_>],
        mut f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.for_each(sql, params, |r| {
            out.push(f(r)?);
            Ok::<(), StoreError>(())
        })?;
        Ok(out)
    }

    /// The first row mapped by `f`, if there is one.
    pub(super) fn query_opt<T>(
        &self,
        sql: &str,
        params: &[Value<'_>],
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        match self {
            Db::Sqlite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
                match rows.next()? {
                    Some(row) => f(&Row::Sqlite(row)).map(Some),
                    None => Ok(None),
                }
            }
            Db::Postgres(pg) => {
                let stmt = Db::pg_statement(pg, sql)?;
                let rows = pg.call(|c| c.query(&stmt, &Db::pg_params(params)))?;
                match rows.first() {
                    Some(row) => f(&Row::Postgres(row)).map(Some),
                    None => Ok(None),
                }
            }
        }
    }

    /// The first row mapped by `f`; a statement that returns none is an error.
    pub(super) fn query_row<T>(
        &self,
        sql: &str,
        params: &[Value<'_>],
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        self.query_opt(sql, params, f)?
            .ok_or_else(|| StoreError::Corrupt(format!("no row from `{sql}`")))
    }

    /// Whether a transaction is open on this connection.
    pub(super) fn in_transaction(&self) -> bool {
        match self {
            Db::Sqlite(c) => !c.is_autocommit(),
            Db::Postgres(pg) => pg.in_tx.get(),
        }
    }

    /// Opens a writing transaction: `BEGIN IMMEDIATE` on SQLite; on PostgreSQL `BEGIN`
    /// and the store's write lock (see the module docs), in one round trip.
    pub(super) fn begin_write(&self) -> Result<()> {
        match self {
            Db::Sqlite(c) => Ok(c.execute_batch("BEGIN IMMEDIATE")?),
            Db::Postgres(pg) => {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!("BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})")
                });
                self.pg_begin(pg, &SQL)
            }
        }
    }

    /// Opens a claiming transaction: on SQLite the same as [`Db::begin_write`]; on
    /// PostgreSQL `BEGIN` and the write lock *shared* (module docs: claims lock their rows).
    pub(super) fn begin_claim(&self) -> Result<()> {
        match self {
            Db::Sqlite(_) => self.begin_write(),
            Db::Postgres(pg) => {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!("BEGIN; SELECT pg_advisory_xact_lock_shared({WRITE_LOCK})")
                });
                self.pg_begin(pg, &SQL)
            }
        }
    }

    /// Opens a read-only transaction that reads one snapshot (PostgreSQL's `REPEATABLE
    /// READ`), for a listing read in pages; on SQLite a read of one statement is one
    /// snapshot already, and this is a plain deferred `BEGIN`.
    pub(super) fn begin_snapshot(&self) -> Result<()> {
        match self {
            Db::Sqlite(c) => Ok(c.execute_batch("BEGIN")?),
            Db::Postgres(pg) => {
                self.pg_begin(pg, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            }
        }
    }

    fn pg_begin(&self, pg: &PgConn, sql: &str) -> Result<()> {
        let begun = pg.call(|c| c.batch_execute(sql));
        pg.in_tx.set(true);
        if let Err(e) = begun {
            // A failed lock leaves the transaction open (and aborted): end it.
            self.rollback();
            return Err(e.into());
        }
        Ok(())
    }

    pub(super) fn commit(&self) -> Result<()> {
        match self {
            Db::Sqlite(c) => Ok(c.execute_batch("COMMIT")?),
            Db::Postgres(pg) => {
                let done = pg.call(|c| c.batch_execute("COMMIT"));
                pg.in_tx.set(false);
                Ok(done?)
            }
        }
    }

    /// Rolls back the open transaction; an error here leaves nothing to do (the
    /// transaction is gone either way).
    pub(super) fn rollback(&self) {
        match self {
            Db::Sqlite(c) => {
                let _ = c.execute_batch("ROLLBACK");
            }
            Db::Postgres(pg) => {
                let _ = pg.call(|c| c.batch_execute("ROLLBACK"));
                pg.in_tx.set(false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::render_postgres;

    #[test]
    fn placeholders_and_rowid_are_rendered_for_postgres_outside_quotes() {
        assert_eq!(
            render_postgres("SELECT rowid, id FROM tasks WHERE a = ?1 AND b = '?2 rowid' ORDER BY tasks.rowid LIMIT ?12"),
            "SELECT seq, id FROM tasks WHERE a = $1 AND b = '?2 rowid' ORDER BY tasks.seq LIMIT $12"
        );
        assert_eq!(render_postgres("x = ? AND y = ?"), "x = $1 AND y = $2");
        assert_eq!(render_postgres("rowids, my_rowid"), "rowids, my_rowid");
    }
}
