//! Statements through the connection's statement cache. `Connection::query_row` and
//! `Connection::execute` parse their SQL at every call; a metadata operation runs several
//! statements, so parsing was a tenth of the manager's SQLite time. [`Cached::row`] and
//! [`Cached::exec`] take the same arguments and parse each statement once per connection
//! (SQLite re-prepares a cached statement itself when a migration changes the schema).
//! Every statement the store runs is one of a fixed set (those built with `format!` splice in
//! constant names only), so the cache holds them all.

use rusqlite::{Connection, Params, Row};

/// Distinct statements the cache keeps per connection: more than the store has, so none is
/// parsed twice.
pub(super) const STATEMENTS_CACHED: usize = 512;

pub(super) trait Cached {
    /// `Connection::query_row`, cached.
    fn row<T, P: Params, F: FnOnce(&Row<'_>) -> rusqlite::Result<T>>(
        &self,
        sql: &str,
        params: P,
        f: F,
    ) -> rusqlite::Result<T>;

    /// `Connection::execute`, cached.
    fn exec<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;
}

impl Cached for Connection {
    fn row<T, P: Params, F: FnOnce(&Row<'_>) -> rusqlite::Result<T>>(
        &self,
        sql: &str,
        params: P,
        f: F,
    ) -> rusqlite::Result<T> {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    fn exec<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }
}
