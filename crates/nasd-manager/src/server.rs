//! The manager's TLS 1.3 listener and request dispatcher. One task per connection reads a
//! request, answers it, and reads the next; the first request must be a login.
//!
//! What a peer that has not logged in can hold is bounded ([`crate::conns`]): connections per
//! source and in all ([`CONNECTIONS_MAX`], the oldest unauthenticated one evicted when full),
//! the time from accept to a successful login, TLS handshake included
//! ([`LOGIN_DEADLINE_MS`]), the size of its frames ([`PRELOGIN_FRAME_BYTES_MAX`]), and the
//! password checks running at once ([`PASSWORD_CHECKS_CONCURRENT_MAX`]); failed logins back off
//! per source and per user ([`crate::backoff`]). A logged-in connection is closed when idle
//! ([`IDLE_TIMEOUT_MS`]), when its session expires, and on its next request after a logout or a
//! credential change ended its session (the manager's session epoch, see
//! [`Manager::session_epoch`]). Calls go through the protocol's table of calls: the session's
//! own (challenge, login, logout) are answered here, every other one by its handler in
//! [`crate::ops`].
//!
//! Background tasks check drive health and rotate working keys on the policy's schedule (and
//! once at start, see [`start_background`]).

use crate::backoff::LoginBackoff;
use crate::conns::{ConnId, ConnTable};
use crate::ops::{self, Handle};
use crate::service::{Caller, Manager};
use crate::store::DriveRecord;
use crate::{drives, now_ms, scrub, users, MgrError};
use nasd_proto::io::{read_frame, write_frame};
use nasd_proto::manager::*;
use nasd_proto::{DecodeError, DriveId};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use tokio::time::Instant;

pub use crate::conns::{CONNECTIONS_MAX, PRELOGIN_PER_SOURCE_MAX};

/// A logged-in connection without a request for this long is closed.
pub const IDLE_TIMEOUT_MS: u64 = 15 * 60_000;
/// From accept to a successful login, TLS handshake included; a connection that has not
/// logged in by then is closed. A client connects, shakes hands and logs in within one or two
/// round trips and one password check; 10 s leaves a wide margin for a slow network and a
/// queue of password checks, and bounds how long an unauthenticated slot can be held.
pub const LOGIN_DEADLINE_MS: u64 = 10_000;
/// Largest frame body accepted before login: a `Login` with the longest user name and password
/// fits (16 404 bytes). Frame buffers are allocated at their declared size, so before
/// authentication they stay small.
pub const PRELOGIN_FRAME_BYTES_MAX: usize = 17 << 10;
/// Legacy password checks (Argon2id: 19 MiB of memory and tens of milliseconds of CPU each;
/// only accounts made before manager protocol 15 log in so, once) running at once; more wait
/// their turn (within the login deadline), so a crowd of login attempts costs bounded memory.
/// OPAQUE logins hash nothing on the manager (the client runs the KSF).
pub const PASSWORD_CHECKS_CONCURRENT_MAX: usize = 4;

/// A login's user name or password as [`LOGIN_FRAME_BYTES_MAX`] allows it (the strings of
/// other calls, paths among them, may be longer: [`STRING_BYTES_MAX`]).
const LOGIN_STRING_BYTES_MAX: usize = 8192;
// Header (magic, version, kind, request id, tag), user, credential kind, password.
const LOGIN_FRAME_BYTES_MAX: usize =
    16 + (4 + LOGIN_STRING_BYTES_MAX) + 1 + (4 + LOGIN_STRING_BYTES_MAX);
const _: () = assert!(LOGIN_STRING_BYTES_MAX <= STRING_BYTES_MAX);
const _: () = assert!(PRELOGIN_FRAME_BYTES_MAX >= LOGIN_FRAME_BYTES_MAX);
const _: () = assert!(PRELOGIN_FRAME_BYTES_MAX <= MANAGER_FRAME_BYTES_MAX);

/// State the listener and every connection share.
struct Shared {
    mgr: Arc<Manager>,
    conns: Mutex<ConnTable<AbortHandle>>,
    logins: Mutex<LoginBackoff>,
    /// Held by a password check until its Argon2id work is done, also when the connection
    /// that asked is closed meanwhile (the blocking work cannot be cancelled).
    password_checks: Arc<Semaphore>,
}

/// Serves until `shutdown` completes.
pub async fn serve(
    mgr: Arc<Manager>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shutdown: impl Future<Output = ()>,
) {
    // The dummy verifiers are made before the first login, which must not pay for them.
    let _ = tokio::task::spawn_blocking(users::warm_up).await;
    // Clients reclaim their locks from the first accept on.
    mgr.locks.begin_grace(now_ms());
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let sh = Arc::new(Shared {
        mgr,
        conns: Mutex::new(ConnTable::default()),
        logins: Mutex::new(LoginBackoff::default()),
        password_checks: Arc::new(Semaphore::new(PASSWORD_CHECKS_CONCURRENT_MAX)),
    });
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => admit(&sh, &acceptor, tcp, peer),
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// Takes a connection into the table (closing the one it evicts) and starts its task, or
/// drops it when the table refuses it.
fn admit(sh: &Arc<Shared>, acceptor: &tokio_rustls::TlsAcceptor, tcp: TcpStream, peer: SocketAddr) {
    let accepted = Instant::now();
    let admitted = sh.conns.lock().expect("conns lock").admit(peer.ip());
    let (id, evicted) = match admitted {
        Ok(x) => x,
        Err(why) => {
            tracing::debug!(%peer, "connection refused: {why}");
            return;
        }
    };
    if let Some(e) = evicted {
        tracing::debug!(%peer, evicted_source = %e.source, "table full: closed the oldest connection not logged in");
        if let Some(closer) = e.closer {
            closer.abort();
        }
    }
    let task = tokio::spawn(connection_task(
        sh.clone(),
        acceptor.clone(),
        tcp,
        peer,
        id,
        accepted,
    ));
    // Only this loop admits (and so evicts); the task may already have ended and forgotten
    // its id, in which case this does nothing.
    sh.conns
        .lock()
        .expect("conns lock")
        .set_closer(id, task.abort_handle());
}

/// Removes a connection from the table however its task ends (returned, failed, aborted).
struct Seat {
    sh: Arc<Shared>,
    id: ConnId,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.sh.conns.lock().expect("conns lock").forget(self.id);
    }
}

async fn connection_task(
    sh: Arc<Shared>,
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
    id: ConnId,
    accepted: Instant,
) {
    let _seat = Seat { sh: sh.clone(), id };
    let _ = tcp.set_nodelay(true);
    let login_deadline = accepted + Duration::from_millis(LOGIN_DEADLINE_MS);
    match tokio::time::timeout_at(login_deadline, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => {
            let conn = Conn {
                id,
                peer,
                login_deadline,
                session: None,
                challenge: None,
                opaque_login: None,
                registration: None,
            };
            if let Err(e) = connection(&sh, conn, stream).await {
                tracing::debug!(%peer, "connection closed: {e}");
            }
        }
        Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
        Err(_) => tracing::debug!(%peer, "TLS handshake not done by the login deadline"),
    }
}

/// A logged-in connection's session.
struct Live {
    /// The caller, with the gateway that opened this session for them, if one did.
    caller: Caller,
    expires_ms: u64,
    token_hash: [u8; 32],
    /// The [`Manager::session_epoch`] at which the session was last known to be live.
    epoch: u64,
}

/// One connection's state.
struct Conn {
    id: ConnId,
    peer: SocketAddr,
    login_deadline: Instant,
    session: Option<Live>,
    /// The challenge given to this connection for a key login: (user, challenge), used once.
    challenge: Option<(String, [u8; CHALLENGE_BYTES])>,
    /// An OPAQUE login between KE2 and KE3, with its backoff attempt; used once.
    opaque_login: Option<(crate::login::PendingLogin, crate::backoff::Attempt)>,
    /// An OPAQUE registration between its response and its upload (with the backoff
    /// attempt of an enrollment); used once.
    registration: Option<(
        crate::login::PendingRegistration,
        Option<crate::backoff::Attempt>,
    )>,
}

/// Whether the connection stays open after a reply.
#[derive(Clone, Copy, PartialEq, Eq)]
enum After {
    Continue,
    Close,
}

async fn connection(
    sh: &Arc<Shared>,
    mut conn: Conn,
    mut s: tokio_rustls::server::TlsStream<TcpStream>,
) -> std::io::Result<()> {
    loop {
        // Before login, everything runs against the login deadline and frames stay small.
        let (until, frame_max) = match conn.session {
            Some(_) => (
                Instant::now() + Duration::from_millis(IDLE_TIMEOUT_MS),
                MANAGER_FRAME_BYTES_MAX,
            ),
            None => (conn.login_deadline, PRELOGIN_FRAME_BYTES_MAX),
        };
        let body = match tokio::time::timeout_at(until, read_frame(&mut s, frame_max)).await {
            Err(_) => return Ok(()),
            Ok(Ok(Some(b))) => b,
            Ok(Ok(None)) => return Ok(()),
            Ok(Err(e)) => return Err(e),
        };
        let (started, mut tag, mut store) = (std::time::Instant::now(), None, Duration::ZERO);
        let (id, (reply, after)) = match MgrRequest::decode(&body) {
            Ok((id, req)) => {
                tag = Some(req.tag());
                let answer;
                (answer, store) =
                    crate::metrics::with_store_time(dispatch(sh, &mut conn, req)).await;
                (id, answer)
            }
            Err(DecodeError::Version(v)) => (
                request_id_of(&body).unwrap_or(0),
                (
                    MgrReply::error(
                        MgrStatus::Version,
                        format!("client speaks {v}, manager {MANAGER_PROTOCOL_VERSION}"),
                    ),
                    After::Continue,
                ),
            ),
            Err(e) => (
                request_id_of(&body).unwrap_or(0),
                (
                    MgrReply::error(MgrStatus::Malformed, e.to_string()),
                    After::Continue,
                ),
            ),
        };
        let encoded = reply.encode(id);
        sh.mgr.metrics.record(crate::metrics::Answered {
            tag,
            reply: &reply,
            bytes_in: body.len(),
            bytes_out: encoded.len(),
            elapsed: started.elapsed(),
            store,
        });
        let write = write_frame(&mut s, &encoded);
        match conn.session {
            Some(_) => write.await?,
            None => tokio::time::timeout_at(conn.login_deadline, write)
                .await
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??,
        }
        if after == After::Close {
            let _ = s.shutdown().await;
            return Ok(());
        }
    }
}

/// Answers one request: through the table of calls, each to its [`Serve`].
async fn dispatch(sh: &Arc<Shared>, conn: &mut Conn, req: MgrRequest) -> (MgrReply, After) {
    macro_rules! serve_each {
        ($($tag:literal $C:ident $name:literal => $R:ty;)*) => {
            match req {
                $(MgrRequest::$C(q) => q.serve(sh, conn).await,)*
            }
        };
    }
    nasd_proto::for_each_manager_call!(serve_each)
}

/// How the server answers one call on a connection. The calls of the session itself touch
/// the connection (a challenge, a login, a logout); every other one passes the login gate
/// ([`gate`]) and goes to its handler ([`Handle`]).
trait Serve {
    async fn serve(self, sh: &Arc<Shared>, conn: &mut Conn) -> (MgrReply, After);
}

impl Serve for calls::Challenge {
    async fn serve(self, _: &Arc<Shared>, conn: &mut Conn) -> (MgrReply, After) {
        (challenge(conn, self.user), After::Continue)
    }
}

impl Serve for calls::Login {
    async fn serve(self, sh: &Arc<Shared>, conn: &mut Conn) -> (MgrReply, After) {
        login(sh, conn, self.user, self.proof).await
    }
}

impl Serve for calls::OpaqueLoginStart {
    async fn serve(self, sh: &Arc<Shared>, conn: &mut Conn) -> (MgrReply, After) {
        conn.opaque_login = None;
        let attempt = match begin_attempt(sh, conn, &self.user) {
            Ok(a) => a,
            Err(r) => return (*r, After::Continue),
        };
        let mgr = sh.mgr.clone();
        let started = tokio::task::spawn_blocking(move || {
            crate::login::login_start(&mgr.store, &mgr.opaque, &self.user, &self.request)
        })
        .await;
        match started {
            Ok(Ok((ke2, pending))) => {
                conn.opaque_login = Some((pending, attempt));
                (MgrReply::OpaqueMessage(OpaqueMessage(ke2)), After::Continue)
            }
            Ok(Err(e)) => (e.reply(), After::Continue),
            Err(e) => (
                MgrReply::error(MgrStatus::Internal, e.to_string()),
                After::Close,
            ),
        }
    }
}

impl Serve for calls::OpaqueLoginFinish {
    async fn serve(self, sh: &Arc<Shared>, conn: &mut Conn) -> (MgrReply, After) {
        let Some((pending, attempt)) = conn.opaque_login.take() else {
            let e = MgrError::new(
                MgrStatus::InvalidArgument,
                "an OPAQUE login finishes after its start, on the same connection",
            );
            return (e.reply(), After::Continue);
        };
        let (mgr, ttl) = (sh.mgr.clone(), sh.mgr.policy.session_ttl_ms);
        let checked = tokio::task::spawn_blocking(move || {
            pending.finish(&mgr.store, &self.finalization, ttl)
        })
        .await;
        logged_in(sh, conn, checked, Some(attempt))
    }
}

impl Serve for calls::OpaqueRegisterStart {
    async fn serve(self, sh: &Arc<Shared>, conn: &mut Conn) -> (MgrReply, After) {
        conn.registration = None;
        // From a session: the caller's own password; before login: an enrollment code,
        // throttled like a login.
        let (by, attempt) = match conn.session {
            Some(_) => match gate(sh, conn, Self::NAME) {
                Ok(c) => (Some(c.clone()), None),
                Err((e, after)) => return (e.reply(), after),
            },
            None => match begin_attempt(sh, conn, &self.user) {
                Ok(a) => (None, Some(a)),
                Err(r) => return (*r, After::Continue),
            },
        };
        let mgr = sh.mgr.clone();
        let user = self.user.clone();
        let started = tokio::task::spawn_blocking(move || {
            crate::login::register_start(
                &mgr.store,
                &mgr.opaque,
                by.as_ref(),
                &self.user,
                &self.request,
                self.code.as_deref(),
                now_ms(),
            )
        })
        .await;
        match started {
            Ok(Ok((response, pending))) => {
                conn.registration = Some((pending, attempt));
                (
                    MgrReply::OpaqueMessage(OpaqueMessage(response)),
                    After::Continue,
                )
            }
            Ok(Err(e)) => {
                tracing::info!(peer = %conn.peer, user = %user, "registration refused: {}", e.detail);
                (e.reply(), After::Continue)
            }
            Err(e) => (
                MgrReply::error(MgrStatus::Internal, e.to_string()),
                After::Close,
            ),
        }
    }
}

impl Serve for calls::OpaqueRegisterFinish {
    async fn serve(self, sh: &Arc<Shared>, conn: &mut Conn) -> (MgrReply, After) {
        let Some((pending, attempt)) = conn.registration.take() else {
            let e = MgrError::new(
                MgrStatus::InvalidArgument,
                "a registration finishes after its start, on the same connection",
            );
            return (e.reply(), After::Continue);
        };
        let user = pending.user.clone();
        let mgr = sh.mgr.clone();
        let done = tokio::task::spawn_blocking(move || {
            pending.finish(&mgr.store, &self.upload, &self.sealed)
        })
        .await;
        match done {
            Ok(Ok(())) => {
                if let Some(a) = attempt {
                    sh.logins.lock().expect("logins lock").succeeded(a);
                }
                // Every session of the user ended, this connection's included.
                sh.mgr.sessions_changed();
                tracing::info!(peer = %conn.peer, user = %user, "password file registered");
                (MgrReply::Ok(()), After::Continue)
            }
            Ok(Err(e)) => (e.reply(), After::Continue),
            Err(e) => (
                MgrReply::error(MgrStatus::Internal, e.to_string()),
                After::Close,
            ),
        }
    }
}

/// The backoff's verdict on a login (or enrollment) attempt for `user` from this
/// connection's source: the attempt, or the answer that refuses it.
fn begin_attempt(
    sh: &Shared,
    conn: &Conn,
    user: &str,
) -> Result<crate::backoff::Attempt, Box<MgrReply>> {
    let begun = sh
        .logins
        .lock()
        .expect("logins lock")
        .begin(user, conn.peer.ip(), now_ms());
    begun.map_err(|r| {
        tracing::info!(peer = %conn.peer, "login refused: backing off");
        Box::new(too_many_attempts(r))
    })
}

impl Serve for calls::Logout {
    async fn serve(self, sh: &Arc<Shared>, conn: &mut Conn) -> (MgrReply, After) {
        match gate(sh, conn, Self::NAME) {
            Ok(_) => logout(sh, conn),
            Err((e, after)) => (e.reply(), after),
        }
    }
}

impl<C: Handle> Serve for C {
    async fn serve(self, sh: &Arc<Shared>, conn: &mut Conn) -> (MgrReply, After) {
        let c = match gate(sh, conn, C::NAME) {
            Ok(c) => c,
            Err((e, after)) => return (e.reply(), after),
        };
        match ops::run(&sh.mgr, c, self).await {
            Ok(r) => (r, After::Continue),
            Err(e) => {
                tracing::debug!(user = %c.name, op = C::NAME, "refused: {e}");
                (e.reply(), After::Continue)
            }
        }
    }
}

/// The login gate: the caller of a connection whose session is live, else why `name` is
/// refused and whether the connection stays open (a session that ended closes it: its client
/// logs in anew).
fn gate<'c>(sh: &Shared, conn: &'c mut Conn, name: &str) -> Result<&'c Caller, (MgrError, After)> {
    let Some(live) = conn.session.as_mut() else {
        let e = MgrError::new(MgrStatus::NotLoggedIn, format!("{name} before login"));
        return Err((e, After::Continue));
    };
    if let Err(e) = still_live(sh, live) {
        conn.session = None;
        return Err((e, After::Close));
    }
    Ok(&conn.session.as_ref().expect("still live").caller)
}

/// Gives this connection a fresh challenge for a key login as `user`. Answered alike for every
/// name, known or not.
fn challenge(conn: &mut Conn, user: String) -> MgrReply {
    let mut c = [0u8; CHALLENGE_BYTES];
    nasd_crypto::random_bytes(&mut c);
    conn.challenge = Some((user, c));
    MgrReply::Challenge(c)
}

/// A login: the backoff first (a refused attempt checks nothing), then the credential, with
/// at most [`PASSWORD_CHECKS_CONCURRENT_MAX`] password checks at once.
async fn login(
    sh: &Arc<Shared>,
    conn: &mut Conn,
    user: String,
    credential: LoginProof,
) -> (MgrReply, After) {
    // A challenge serves one login attempt, and only for the user it was asked for.
    let ch = conn
        .challenge
        .take()
        .filter(|(u, _)| *u == user)
        .map(|(_, c)| c);
    let attempt = match credential {
        LoginProof::Token(_) => None,
        LoginProof::LegacyPassword(_) | LoginProof::Signature(_) => {
            match begin_attempt(sh, conn, &user) {
                Ok(a) => Some(a),
                Err(r) => return (*r, After::Continue),
            }
        }
    };
    let permit = match credential {
        LoginProof::LegacyPassword(_) => Some(
            sh.password_checks
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed"),
        ),
        _ => None,
    };
    let (mgr, ttl) = (sh.mgr.clone(), sh.mgr.policy.session_ttl_ms);
    let checked = tokio::task::spawn_blocking(move || {
        let r = users::login(&mgr.store, &user, &credential, ttl, ch.as_ref());
        drop(permit);
        r
    })
    .await;
    logged_in(sh, conn, checked, attempt)
}

/// Opens the connection's session after a checked login, or answers why not.
fn logged_in(
    sh: &Shared,
    conn: &mut Conn,
    checked: Result<crate::MgrResult<users::LoggedIn>, tokio::task::JoinError>,
    attempt: Option<crate::backoff::Attempt>,
) -> (MgrReply, After) {
    let ok = match checked {
        Ok(Ok(ok)) => ok,
        Ok(Err(e)) => {
            tracing::info!(peer = %conn.peer, "login refused: {}", e.detail);
            return (e.reply(), After::Continue);
        }
        Err(e) => {
            return (
                MgrReply::error(MgrStatus::Internal, e.to_string()),
                After::Close,
            )
        }
    };
    if let Some(a) = attempt {
        sh.logins.lock().expect("logins lock").succeeded(a);
    }
    if !sh.conns.lock().expect("conns lock").logged_in(conn.id) {
        // Evicted while the credential was checked; the task is being aborted.
        return (
            MgrReply::error(MgrStatus::NotLoggedIn, "connection closed"),
            After::Close,
        );
    }
    let reply = MgrReply::LoginOk(LoginOk {
        uid: ok.caller.uid,
        admin: ok.caller.admin,
        token: SessionToken(ok.token),
        expires_ms: ok.expires_ms,
    });
    let token_hash = users::token_hash(&ok.token);
    let mut caller = ok.caller;
    caller.session = u64::from_le_bytes(token_hash[..8].try_into().expect("8 bytes"));
    caller.via = ok.via;
    conn.session = Some(Live {
        caller,
        expires_ms: ok.expires_ms,
        token_hash,
        epoch: sh.mgr.session_epoch.load(Ordering::Acquire),
    });
    (reply, After::Continue)
}

fn too_many_attempts(r: crate::backoff::Refused) -> MgrReply {
    let who = if r.source {
        "from this address"
    } else {
        "for this user from this address"
    };
    MgrReply::error(
        MgrStatus::TooManyAttempts,
        format!(
            "login: {who}; retry in {} s",
            r.retry_after_ms.div_ceil(1000)
        ),
    )
}

/// Checks that a connection's session is still live: not expired, and, if any session ended
/// or any membership changed since it last looked, still in the store, with the user's groups
/// as they are now (a member removed from a group reads nothing more through it, a new
/// member at once).
fn still_live(sh: &Shared, live: &mut Live) -> Result<(), MgrError> {
    if live.expires_ms <= now_ms() {
        return Err(MgrError::new(
            MgrStatus::SessionExpired,
            format!("{}: the session expired", live.caller.name),
        ));
    }
    // Read before the store, so an end that lands during the check is seen next time.
    let epoch = sh.mgr.session_epoch.load(Ordering::Acquire);
    if epoch != live.epoch {
        let st = sh.mgr.store.lock().expect("store lock");
        if !users::session_live(st.as_ref(), &live.token_hash, live.caller.uid)? {
            return Err(MgrError::new(
                MgrStatus::SessionExpired,
                format!(
                    "{}: the session was ended by a logout or a credential change",
                    live.caller.name
                ),
            ));
        }
        live.caller.groups = st.groups_of(live.caller.uid).map_err(users::db)?;
        live.epoch = epoch;
    }
    Ok(())
}

/// Ends this connection's session in the store, tells every live connection to check its own,
/// and closes this one.
fn logout(sh: &Shared, conn: &mut Conn) -> (MgrReply, After) {
    let live = conn.session.take().expect("logged in");
    // The session's record locks end with it.
    sh.mgr.locks.drop_session(live.caller.session);
    let ended = users::logout(
        sh.mgr.store.lock().expect("store lock").as_mut(),
        &live.token_hash,
    );
    sh.mgr.sessions_changed();
    match ended {
        Ok(_) => {
            tracing::info!(user = %live.caller.name, "logged out");
            (MgrReply::Ok(()), After::Close)
        }
        Err(e) => (e.reply(), After::Close),
    }
}

fn persist(m: &Manager, rec: &DriveRecord) {
    if let Err(e) = m.store.lock().expect("store lock").put_drive(rec) {
        tracing::error!("storing a rotated working key: {e}");
    }
}

/// How long the start-up rotation waits for each drive before the manager serves anyway.
pub const ROTATE_AT_START_MS: u64 = 3_000;

/// Rotates every drive's working key, all drives at once, each within
/// [`ROTATE_AT_START_MS`]; returns the drives that could not take a new key. Run before the
/// manager serves: a rotation interrupted by a crash before the previous run stored its key
/// left the drive with a key the store does not have (the drive keeps only the one before
/// as "previous"), and a capability minted from the stored key would be refused.
pub async fn rotate_at_start(m: &Manager) -> Vec<DriveId> {
    let done = futures_util::future::join_all(m.drives.ids().into_iter().map(|d| async move {
        let r = tokio::time::timeout(
            Duration::from_millis(ROTATE_AT_START_MS),
            drives::rotate(&m.drives, d),
        )
        .await;
        (d, r)
    }))
    .await;
    let mut pending = vec![];
    for (d, r) in done {
        match r {
            Ok(Ok(rec)) => persist(m, &rec),
            Ok(Err(e)) => {
                tracing::warn!("working key rotation at start: {e}");
                pending.push(d);
            }
            Err(_) => {
                tracing::warn!(drive = %format!("{:016x}", d.0), "working key rotation at start: no answer in time");
                pending.push(d);
            }
        }
    }
    pending
}

/// Checks health and rotates on the policy's schedule (retrying, at each health check, the
/// drives in `pending` that missed the start-up rotation), rebuilds stale components at start
/// and whenever a drive comes back ([`Manager::heal_stale`]), settles the quota escrows of files
/// whose write capabilities expired (also those a restart left), and scrubs orphaned objects
/// at start and every [`scrub::ORPHAN_SCRUB_INTERVAL_MS`].
pub fn start_background(m: Arc<Manager>, mut pending: Vec<DriveId>) -> tokio::task::JoinHandle<()> {
    crate::heal::start_scrubber(m.clone());
    tokio::spawn(async move {
        let mut health =
            tokio::time::interval(Duration::from_millis(m.policy.health_check_ms.max(100)));
        let mut rotation =
            tokio::time::interval(Duration::from_millis(m.policy.key_rotation_ms.max(1000)));
        rotation.tick().await;
        // The first tick is immediate: a scrub at every start.
        let mut orphans =
            tokio::time::interval(Duration::from_millis(scrub::ORPHAN_SCRUB_INTERVAL_MS));
        let mut first = true;
        loop {
            tokio::select! {
                _ = health.tick() => {
                    let back = m.drives.check_health().await;
                    // Stale components are rebuilt once their drives are back (and at start).
                    if std::mem::take(&mut first) {
                        m.heal_stale("the manager started");
                    } else if !back.is_empty() {
                        m.drives_back(&back);
                    } else {
                        m.heal_if_due();
                    }
                    let mut still = vec![];
                    for d in pending.drain(..) {
                        match drives::rotate(&m.drives, d).await {
                            Ok(rec) => persist(&m, &rec),
                            Err(_) => still.push(d),
                        }
                    }
                    pending = still;
                    if m.revocations_pending() {
                        m.complete_revocations().await;
                    }
                    // Quota escrows of committed files whose capabilities are dead.
                    m.settle_expired_escrows().await;
                }
                _ = orphans.tick() => {
                    if let Err(e) = scrub::reclaim_orphans(&m, scrub::ORPHAN_GRACE_MS).await {
                        tracing::warn!("orphan scrub: {e}");
                    }
                }
                _ = rotation.tick() => {
                    for d in m.drives.ids() {
                        match drives::rotate(&m.drives, d).await {
                            Ok(rec) => persist(&m, &rec),
                            Err(e) => tracing::warn!("working key rotation: {e}"),
                        }
                    }
                }
            }
        }
    })
}
