//! The store port's handle (issue 27): *where* the queue lives, decided once — from
//! `store:` in config.yaml, the `POLYPHONY_STORE_URL` environment variable, or the home's
//! `queue.db` — and passed to the orchestrator, the HTTP server and every verb. Callers
//! open connections through it ([`StoreHandle::open`]) instead of naming a file, so the
//! backend is chosen in one place.
//!
//! SQLite (`$POLYPHONY_HOME/queue.db`) is the embedded default; a `postgres://` URL puts
//! the same [`Store`] (one implementation: `store::sql` renders each statement for the
//! engine) on a PostgreSQL server shared by a fleet. [`StoreHandle::open_shared`] opens
//! its queue core ([`super::QueueCore`]: tasks, owned claims with leases, pins,
//! fleet-wide usage limits) as a trait object; the store contract suite runs the same
//! tests against both (docs/SCALING.md).
//!
//! Must not: print or keep a password. [`StoreHandle`]'s `Display` and `Debug` show the
//! URL without it; a password comes from the URL or from `PGPASSWORD` at connect time.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Result, Store, StoreError};

/// The environment variable that points a home at a shared PostgreSQL store.
pub const STORE_URL_VAR: &str = "POLYPHONY_STORE_URL";

/// Where the queue lives. Cheap to clone; built once per process.
#[derive(Clone)]
pub struct StoreHandle {
    location: Arc<Location>,
}

enum Location {
    Sqlite(PathBuf),
    Postgres(Box<super::pg::PgTarget>),
}

impl StoreHandle {
    /// The embedded SQLite queue at `path`.
    pub fn sqlite(path: impl Into<PathBuf>) -> StoreHandle {
        StoreHandle {
            location: Arc::new(Location::Sqlite(path.into())),
        }
    }

    /// A PostgreSQL store at `url` (`postgres://user@host:port/db`). A password missing
    /// from the URL is read from `PGPASSWORD` when connecting.
    pub fn postgres(url: &str) -> Result<StoreHandle> {
        let config: postgres::Config =
            url.parse()
                .map_err(|e: postgres::Error| StoreError::BadUrl {
                    shown: shown_without_password(url),
                    detail: e.to_string(),
                })?;
        let shown = describe_pg(&config);
        Ok(StoreHandle {
            location: Arc::new(Location::Postgres(Box::new(super::pg::PgTarget {
                config,
                shown,
            }))),
        })
    }

    /// The handle for a home: `configured` (`store.url` in config.yaml) when set, else
    /// `$POLYPHONY_STORE_URL` when set, else `home/queue.db`. Verbs that work on a home
    /// whose YAML is broken pass `None`.
    pub fn resolve(
        home: &Path,
        configured: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<StoreHandle> {
        let url = configured
            .map(str::to_string)
            .or_else(|| env(STORE_URL_VAR).filter(|u| !u.trim().is_empty()));
        match url {
            Some(url) if is_postgres_url(&url) => StoreHandle::postgres(url.trim()),
            Some(url) => Err(StoreError::BadUrl {
                shown: shown_without_password(&url),
                detail: "only postgres:// (or postgresql://) URLs are supported; leave \
                         store.url and POLYPHONY_STORE_URL unset for the home's queue.db"
                    .into(),
            }),
            None => Ok(StoreHandle::sqlite(crate::config::db_path(home))),
        }
    }

    /// The handle of a loaded config: `store.url`, else `$POLYPHONY_STORE_URL`, else the
    /// home's `queue.db`. Built once by each verb and by the orchestrator.
    pub fn for_config(
        config: &crate::config::Config,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<StoreHandle> {
        StoreHandle::resolve(config.home(), config.global().store.url.as_deref(), env)
    }

    /// The handle for verbs that must work on a home whose config does not load
    /// (`enqueue`, `status`, `logs`, `backup`): `store.url` when config.yaml parses far
    /// enough to have one, else `$POLYPHONY_STORE_URL`, else `home/queue.db`.
    pub fn for_home(home: &Path) -> Result<StoreHandle> {
        let configured = std::fs::read_to_string(home.join("config.yaml"))
            .ok()
            .and_then(|text| serde_yaml::from_str::<serde_yaml::Value>(&text).ok())
            .and_then(|v| v.get("store")?.get("url")?.as_str().map(str::to_string));
        StoreHandle::resolve(home, configured.as_deref(), |n| std::env::var(n).ok())
    }

    /// Whether there is a queue to read: the SQLite file exists, or a server is named
    /// (verbs that only read say "no tasks yet" rather than create an empty file).
    pub fn exists(&self) -> bool {
        match &*self.location {
            Location::Sqlite(path) => path.exists(),
            Location::Postgres(_) => true,
        }
    }

    /// Opens a connection to the full store. Each thread opens its own (see the module
    /// docs of `store`).
    pub fn open(&self) -> Result<Store> {
        match &*self.location {
            Location::Sqlite(path) => Store::open(path),
            Location::Postgres(pg) => super::pg::connect(pg),
        }
    }

    /// Opens the shared queue core ([`super::QueueCore`]) on either backend: what the
    /// store contract suite and the fleet's claims, leases and limits run on.
    pub fn open_shared(&self) -> Result<Box<dyn super::QueueCore>> {
        match &*self.location {
            Location::Sqlite(path) => Ok(Box::new(Store::open(path)?)),
            Location::Postgres(pg) => Ok(Box::new(super::pg::connect(pg)?)),
        }
    }

    /// A connection listening for the fleet's wake-ups (PostgreSQL, `store::wake`);
    /// `None` on SQLite, whose daemon wakes by its home's socket.
    pub fn wake_listener(&self) -> Result<Option<super::WakeListener>> {
        match &*self.location {
            Location::Sqlite(_) => Ok(None),
            Location::Postgres(pg) => super::WakeListener::listen(super::pg::client(pg)?).map(Some),
        }
    }

    /// Opens the PostgreSQL store (`doctor`, benchmarks); `None` for SQLite.
    pub fn open_postgres(&self) -> Option<Result<Store>> {
        match &*self.location {
            Location::Sqlite(_) => None,
            Location::Postgres(pg) => Some(super::pg::connect(pg)),
        }
    }

    /// The SQLite file, when this is the embedded store (backups, integrity checks and
    /// file-size figures apply to it only).
    pub fn sqlite_path(&self) -> Option<&Path> {
        match &*self.location {
            Location::Sqlite(path) => Some(path),
            Location::Postgres(_) => None,
        }
    }

    /// `"sqlite"` or `"postgresql"`.
    pub fn backend(&self) -> &'static str {
        match &*self.location {
            Location::Sqlite(_) => "sqlite",
            Location::Postgres(_) => "postgresql",
        }
    }
}

impl fmt::Display for StoreHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.location {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Postgres(pg) => f.write_str(&pg.shown),
        }
    }
}

impl fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreHandle({} {self})", self.backend())
    }
}

fn is_postgres_url(url: &str) -> bool {
    let url = url.trim_start();
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// `postgresql://user@host:port/db` from a parsed config: never the password.
fn describe_pg(config: &postgres::Config) -> String {
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                postgres::config::Host::Tcp(name) => name.clone(),
                postgres::config::Host::Unix(path) => path.display().to_string(),
            };
            match config.get_ports().get(i).or(config.get_ports().first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .collect();
    let db = config.get_dbname().unwrap_or("");
    format!("postgresql://{user}{}/{db}", hosts.join(","))
}

/// The URL text with anything between `:` and `@` of its authority blanked: for messages
/// about a URL that did not parse.
fn shown_without_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return "(not a URL)".into();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            let user = authority[..at].split(':').next().unwrap_or("");
            format!(
                "{}://{user}:***@{}{}",
                &url[..scheme_end],
                &authority[at + 1..],
                &rest[authority_end..]
            )
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_handle_never_shows_its_password() {
        let h = StoreHandle::postgres("postgres://poly:s3cret@127.0.0.1:5433/queue").unwrap();
        assert_eq!(h.to_string(), "postgresql://poly@127.0.0.1:5433/queue");
        assert!(!format!("{h:?}").contains("s3cret"));
        assert_eq!(h.backend(), "postgresql");
        assert!(h.sqlite_path().is_none());
        // Nothing listens on port 9 of loopback: the refusal names the URL without it.
        let h = StoreHandle::postgres("postgres://poly:s3cret@127.0.0.1:9/queue").unwrap();
        let err = h.open().err().expect("no server there");
        assert!(matches!(err, StoreError::Unreachable { .. }), "{err}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    #[test]
    fn a_bad_url_is_reported_without_its_password() {
        let err =
            StoreHandle::resolve(Path::new("/h"), Some("mysql://root:hunter2@db/x"), |_| None)
                .err()
                .unwrap();
        let text = err.to_string();
        assert!(text.contains("mysql://root:***@db/x"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(matches!(err, StoreError::BadUrl { .. }));
    }

    #[test]
    fn config_wins_over_the_environment_which_wins_over_the_home_file() {
        let env = |n: &str| (n == STORE_URL_VAR).then(|| "postgres://e@127.0.0.1/env".to_string());
        let h =
            StoreHandle::resolve(Path::new("/h"), Some("postgres://c@127.0.0.1/cfg"), env).unwrap();
        assert_eq!(h.to_string(), "postgresql://c@127.0.0.1:5432/cfg");
        let h = StoreHandle::resolve(Path::new("/h"), None, env).unwrap();
        assert_eq!(h.to_string(), "postgresql://e@127.0.0.1:5432/env");
        let h = StoreHandle::resolve(Path::new("/h"), None, |_| None).unwrap();
        assert_eq!(h.sqlite_path(), Some(Path::new("/h/queue.db")));
        assert_eq!(h.backend(), "sqlite");
    }
}
