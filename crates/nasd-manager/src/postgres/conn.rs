//! One connection to PostgreSQL, with the calls the engine makes on it: statements prepared
//! once and cached, parameters and columns converted between the store's types and
//! PostgreSQL's, and transactions.
//!
//! # Threading
//! The connection is `tokio-postgres`'s: a [`Client`] that sends requests over a channel, and
//! a connection future that owns the socket. The future runs on a thread of its own (named
//! [`THREAD_NAME`]) under a current-thread runtime of its own; the store's methods wait for
//! the client's replies with [`futures_executor::block_on`], which needs no runtime. So the
//! store works the same from a plain thread, from a task of a multi-threaded runtime and from
//! a task of a current-thread runtime (where the manager's tests run): the thread that waits
//! never has to drive the socket. (The synchronous `postgres` crate cannot be used here: it
//! enters a runtime of its own on every call, which panics inside a tokio task, and the
//! manager calls its store from tasks while holding the store's `Mutex`.) A call blocks its
//! caller until the server answers, as SQLite's disk reads and fsyncs do. The thread ends when
//! the store (its client) is dropped: the connection then closes.
//!
//! # Statements
//! Every statement is prepared once per connection and kept by its text ([`Conn::prepared`],
//! at most [`STATEMENTS_MAX`]); a statement whose text is built at run time (lists of drive
//! ids) is kept too, and the cache starts over when full. Parameters go through [`Param`]
//! (integers as `BIGINT`, by bit-cast for 64-bit ids, as the SQLite engine stores them), and
//! columns come back through [`Column`], which checks ranges: a row that does not decode is
//! a [`StoreError::Db`], never a panic.

use crate::store::{StoreError, StoreResult};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use tokio_postgres::types::{FromSql, ToSql};
use tokio_postgres::{Client, NoTls, Statement};

/// The most prepared statements kept per connection (the engine has fewer than 200 texts).
pub const STATEMENTS_MAX: usize = 1024;
/// The name of the thread that drives the connection's socket.
pub const THREAD_NAME: &str = "nasd-postgres";
/// How long connecting may take when the connection string does not say.
pub const CONNECT_TIMEOUT_MS: u64 = 10_000;
/// TCP keepalives when the connection string does not set them: the first probe after this
/// long idle, then one every [`KEEPALIVE_INTERVAL_MS`], the connection ended after
/// [`KEEPALIVE_RETRIES`] unanswered (about 11 s from a server going silent).
pub const KEEPALIVE_IDLE_MS: u64 = 5_000;
pub const KEEPALIVE_INTERVAL_MS: u64 = 2_000;
pub const KEEPALIVE_RETRIES: u32 = 3;
/// tokio-postgres' default idle time before the first keepalive (the system's two hours).
const KEEPALIVES_IDLE_SYSTEM: std::time::Duration = std::time::Duration::from_secs(2 * 60 * 60);

/// One parameter of a statement, as PostgreSQL takes it.
pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A value the store passes as a statement parameter: integers become `BIGINT` (`u64` by
/// bit-cast), booleans `BOOLEAN`, text and bytes as they are.
pub trait Param {
    type Sql: ToSql + Sync;
    fn sql(&self) -> Self::Sql;
}

macro_rules! int_param {
    ($($t:ty),*) => {$(
        impl Param for $t {
            type Sql = i64;
            fn sql(&self) -> i64 {
                *self as i64
            }
        }
    )*};
}
int_param!(u8, u16, u32, i32, i64, u64, usize);

impl Param for bool {
    type Sql = bool;
    fn sql(&self) -> bool {
        *self
    }
}

impl Param for str {
    type Sql = String;
    fn sql(&self) -> String {
        self.to_owned()
    }
}

impl Param for String {
    type Sql = String;
    fn sql(&self) -> String {
        self.clone()
    }
}

impl Param for [u8] {
    type Sql = Vec<u8>;
    fn sql(&self) -> Vec<u8> {
        self.to_vec()
    }
}

impl Param for Vec<u8> {
    type Sql = Vec<u8>;
    fn sql(&self) -> Vec<u8> {
        self.clone()
    }
}

impl<T: Param + ?Sized> Param for &T {
    type Sql = T::Sql;
    fn sql(&self) -> T::Sql {
        (**self).sql()
    }
}

impl<T: Param> Param for Option<T> {
    type Sql = Option<T::Sql>;
    fn sql(&self) -> Option<T::Sql> {
        self.as_ref().map(Param::sql)
    }
}

/// The parameters of one statement: `params![a, b]`, each through [`Param`].
macro_rules! params {
    ($($x:expr),* $(,)?) => {
        &[$(&$crate::postgres::conn::Param::sql(&$x) as &(dyn tokio_postgres::types::ToSql + Sync)),*]
    };
}
pub(crate) use params;

/// A column value the store reads: integers from `BIGINT` with their range checked (`u64`
/// ids by bit-cast), booleans, text, bytes, and `NULL` as `None`.
pub trait Column: Sized {
    type Raw: for<'a> FromSql<'a>;
    fn convert(raw: Self::Raw) -> Result<Self, String>;
}

macro_rules! int_column {
    ($($t:ty),*) => {$(
        impl Column for $t {
            type Raw = i64;
            fn convert(raw: i64) -> Result<$t, String> {
                <$t>::try_from(raw).map_err(|_| format!("{raw} is out of range for {}", stringify!($t)))
            }
        }
    )*};
}
int_column!(u8, u16, u32);

macro_rules! same_column {
    ($($t:ty),*) => {$(
        impl Column for $t {
            type Raw = $t;
            fn convert(raw: $t) -> Result<$t, String> {
                Ok(raw)
            }
        }
    )*};
}
same_column!(i64, bool, String, Vec<u8>);

impl<T: Column> Column for Option<T> {
    type Raw = Option<T::Raw>;
    fn convert(raw: Option<T::Raw>) -> Result<Option<T>, String> {
        raw.map(T::convert).transpose()
    }
}

/// One row of a result.
pub struct Row<'a>(&'a tokio_postgres::Row);

impl Row<'_> {
    /// Column `idx`, converted; a missing column, another type or a value out of range is a
    /// [`StoreError::Db`] naming the column.
    pub fn get<T: Column>(&self, idx: usize) -> StoreResult<T> {
        let raw: T::Raw = self.0.try_get(idx).map_err(|e| {
            StoreError::Db(format!(
                "column {idx} of a row: {}",
                chain(&e as &dyn std::error::Error)
            ))
        })?;
        T::convert(raw).map_err(|e| StoreError::Db(format!("column {idx} of a row: {e}")))
    }
}

/// An error and its causes, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// A PostgreSQL error as the store reports it, with its causes (the server's message).
pub fn pg(e: tokio_postgres::Error) -> StoreError {
    StoreError::Db(format!("postgresql: {}", chain(&e)))
}

/// A connection and its statements.
pub struct Conn {
    client: Client,
    statements: RefCell<HashMap<String, Statement>>,
    /// While set, transactions commit without waiting for their WAL to reach disk
    /// ([`Conn::set_relaxed`]).
    relaxed: Cell<bool>,
    /// Closes when the connection has ended (its thread dropped the sender).
    ended: tokio::sync::watch::Receiver<()>,
}

impl Conn {
    /// Connects to the server `conninfo` names (a `postgres://` URL or `key=value` pairs) and
    /// starts the thread that drives the connection.
    pub fn connect(conninfo: &str) -> StoreResult<Conn> {
        let mut config: tokio_postgres::Config = conninfo
            .parse()
            .map_err(|e| StoreError::Db(format!("postgresql connection string: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_millis(CONNECT_TIMEOUT_MS));
        }
        // A server that went silent (its host gone, the network cut) ends the connection in
        // seconds, not in the system's default two hours: a manager that leads must learn it
        // has lost the database's lock soon ([`crate::store::Leadership`]).
        if config.get_keepalives_idle() == KEEPALIVES_IDLE_SYSTEM {
            config
                .keepalives_idle(std::time::Duration::from_millis(KEEPALIVE_IDLE_MS))
                .keepalives_interval(std::time::Duration::from_millis(KEEPALIVE_INTERVAL_MS))
                .keepalives_retries(KEEPALIVE_RETRIES);
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (ended_tx, ended) = tokio::sync::watch::channel(());
        std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                drive(config, tx);
                drop(ended_tx);
            })
            .map_err(|e| StoreError::Db(format!("starting the postgresql thread: {e}")))?;
        let client = rx
            .recv()
            .map_err(|_| StoreError::Db("the postgresql thread ended".into()))??;
        Ok(Conn {
            client,
            statements: RefCell::new(HashMap::new()),
            relaxed: Cell::new(false),
            ended,
        })
    }

    /// Closes when this connection has ended.
    pub fn ended(&self) -> tokio::sync::watch::Receiver<()> {
        self.ended.clone()
    }

    /// The prepared statement of `sql`, prepared now if this connection has not yet.
    pub fn prepared(&self, sql: &str) -> StoreResult<Statement> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let s = futures_executor::block_on(self.client.prepare(sql)).map_err(pg)?;
        let mut cache = self.statements.borrow_mut();
        if cache.len() >= STATEMENTS_MAX {
            cache.clear();
        }
        cache.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    /// Runs `sql` (one statement); the rows it changed.
    pub fn execute(&self, sql: &str, params: Params<'_>) -> StoreResult<u64> {
        let s = self.prepared(sql)?;
        futures_executor::block_on(self.client.execute(&s, params)).map_err(pg)
    }

    /// Runs `sql`, statements separated by `;`, with no parameters and nothing cached.
    pub fn execute_batch(&self, sql: &str) -> StoreResult<()> {
        futures_executor::block_on(self.client.batch_execute(sql)).map_err(pg)
    }

    fn rows(&self, sql: &str, params: Params<'_>) -> StoreResult<Vec<tokio_postgres::Row>> {
        let s = self.prepared(sql)?;
        futures_executor::block_on(self.client.query(&s, params)).map_err(pg)
    }

    /// The first row of `sql`, through `f`; `None` when there is none.
    pub fn query_opt<T>(
        &self,
        sql: &str,
        params: Params<'_>,
        f: impl FnOnce(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        self.rows(sql, params)?
            .first()
            .map(|r| f(&Row(r)))
            .transpose()
    }

    /// The first row of `sql`, through `f`; a query that returns none is an error (one that
    /// always returns a row: an aggregate, `EXISTS`).
    pub fn query_row<T>(
        &self,
        sql: &str,
        params: Params<'_>,
        f: impl FnOnce(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.query_opt(sql, params, f)?
            .ok_or_else(|| StoreError::Db(format!("no row from: {sql}")))
    }

    /// Every row of `sql`, each through `f`.
    pub fn query_map<T>(
        &self,
        sql: &str,
        params: Params<'_>,
        mut f: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        self.rows(sql, params)?.iter().map(|r| f(&Row(r))).collect()
    }

    /// Starts a serializable transaction: its statements see and change the database as if
    /// no other transaction ran meanwhile, or its commit fails. Dropped without
    /// [`Tx::commit`], it rolls back.
    pub fn transaction(&mut self) -> StoreResult<Tx<'_>> {
        let begin = if self.relaxed.get() {
            "BEGIN ISOLATION LEVEL SERIALIZABLE; SET LOCAL synchronous_commit TO off"
        } else {
            "BEGIN ISOLATION LEVEL SERIALIZABLE"
        };
        self.execute_batch(begin)?;
        Ok(Tx {
            conn: self,
            done: false,
        })
    }

    /// Whether the transactions started from now on commit without waiting for their WAL to
    /// reach disk (`synchronous_commit = off`).
    pub fn set_relaxed(&self, on: bool) {
        self.relaxed.set(on);
    }
}

/// Runs the connection to `config`'s server on this thread until its client is dropped,
/// handing the client over `to` once connected (or the error).
fn drive(config: tokio_postgres::Config, to: std::sync::mpsc::SyncSender<StoreResult<Client>>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = to.send(Err(StoreError::Db(format!(
                "a runtime for the postgresql connection: {e}"
            ))));
            return;
        }
    };
    rt.block_on(async move {
        let (client, connection) = match config.connect(NoTls).await {
            Ok(c) => c,
            Err(e) => {
                let _ = to.send(Err(pg(e)));
                return;
            }
        };
        if to.send(Ok(client)).is_err() {
            return;
        }
        if let Err(e) = connection.await {
            tracing::error!("postgresql connection: {}", chain(&e));
        }
    });
}

/// A transaction in progress ([`Conn::set_relaxed`]); it reads as its connection.
pub struct Tx<'a> {
    conn: &'a mut Conn,
    done: bool,
}

impl Tx<'_> {
    /// Commits; a serialization failure (another writer's transaction conflicted) is an
    /// error and nothing changed.
    pub fn commit(mut self) -> StoreResult<()> {
        self.done = true;
        self.conn.execute_batch("COMMIT")
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.done {
            // An error on the way (or a refusal) left it open: nothing it did stays. A
            // rollback that fails leaves the connection broken, and its next call fails.
            if let Err(e) = self.conn.execute_batch("ROLLBACK") {
                tracing::error!("rolling back: {e}");
            }
        }
    }
}
