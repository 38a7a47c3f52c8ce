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
//! credential change ended its session (the server's session epoch, see `Shared`).
//!
//! Background tasks check drive health and rotate working keys on the policy's schedule (and
//! once at start, see [`start_background`]).

use crate::backoff::LoginBackoff;
use crate::conns::{ConnId, ConnTable};
use crate::service::{Caller, Manager};
use crate::store::DriveRecord;
use crate::{callbacks, drives, now_ms, scrub, users, MgrError};
use nasd_proto::io::{read_frame, write_frame};
use nasd_proto::manager::*;
use nasd_proto::{DecodeError, DriveId};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
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
/// Password checks (Argon2id: 19 MiB of memory and tens of milliseconds of CPU each) running
/// at once; more wait their turn (within the login deadline), so a crowd of login attempts
/// costs bounded memory.
pub const PASSWORD_CHECKS_CONCURRENT_MAX: usize = 4;

// Header (magic, version, kind, request id, tag), user, credential kind, password.
const LOGIN_FRAME_BYTES_MAX: usize = 16 + (4 + STRING_BYTES_MAX) + 1 + (4 + STRING_BYTES_MAX);
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
    /// Moves after every logout and credential change. A logged-in connection remembers the
    /// value it last saw; when it has moved, the connection checks that its session is still in
    /// the store before serving the next request. Nothing moves it on the hot path, so a
    /// request costs one atomic load.
    session_epoch: AtomicU64,
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
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let sh = Arc::new(Shared {
        mgr,
        conns: Mutex::new(ConnTable::default()),
        logins: Mutex::new(LoginBackoff::default()),
        password_checks: Arc::new(Semaphore::new(PASSWORD_CHECKS_CONCURRENT_MAX)),
        session_epoch: AtomicU64::new(0),
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
    caller: Caller,
    /// The gateway that opened this session for the caller, if one did.
    via: Option<u32>,
    expires_ms: u64,
    token_hash: [u8; 32],
    /// The [`Shared::session_epoch`] at which the session was last known to be live.
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
        let (id, (reply, after)) = match MgrRequest::decode(&body) {
            Ok((id, req)) => (id, dispatch(sh, &mut conn, req).await),
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

async fn dispatch(sh: &Arc<Shared>, conn: &mut Conn, req: MgrRequest) -> (MgrReply, After) {
    let name = req.name();
    let req = match req {
        MgrRequest::Challenge(calls::Challenge { user }) => {
            return (challenge(conn, user), After::Continue)
        }
        MgrRequest::Login(calls::Login { user, credential }) => {
            return login(sh, conn, user, credential).await
        }
        req => req,
    };
    let Some(live) = conn.session.as_mut() else {
        let e = MgrReply::error(MgrStatus::NotLoggedIn, format!("{name} before login"));
        return (e, After::Continue);
    };
    if let Err(e) = still_live(sh, live) {
        // The session is over: answer why, and close (the client logs in anew).
        conn.session = None;
        return (e.reply(), After::Close);
    }
    let live = conn.session.as_ref().expect("still live");
    let c = &live.caller;
    let r = match req {
        MgrRequest::Logout(calls::Logout) => return logout(sh, conn),
        MgrRequest::UserPasswd(calls::UserPasswd { .. }) if live.via.is_some() => {
            Err(MgrError::new(
                MgrStatus::PermissionDenied,
                "a session a gateway opened cannot change credentials",
            ))
        }
        MgrRequest::UserPasswd(calls::UserPasswd {
            name,
            password,
            public_key,
        }) => user_passwd(sh, c, name, password, public_key).await,
        MgrRequest::ActFor(calls::ActFor { user }) => act_for(sh, c, live.via, user).await,
        MgrRequest::UserGateway(calls::UserGateway { name, on }) => user_gateway(sh, c, name, on),
        MgrRequest::S3KeySecret(calls::S3KeySecret { .. }) if live.via.is_some() => {
            Err(MgrError::new(
                MgrStatus::PermissionDenied,
                "a session a gateway opened reads no S3 secrets",
            ))
        }
        MgrRequest::S3KeySecret(calls::S3KeySecret { access_key_id }) => {
            let st = sh.mgr.store.lock().expect("store lock");
            users::s3_key_secret(st.as_ref(), c, &access_key_id)
                .map(|(user, secret)| MgrReply::S3KeyFound(S3KeyFound { user, secret }))
        }
        MgrRequest::S3KeyCreate(calls::S3KeyCreate { user }) => {
            let mut st = sh.mgr.store.lock().expect("store lock");
            let made = users::s3_key_create(st.as_mut(), c, &user);
            if made.is_ok() {
                tracing::info!(by = %c.name, user = %user, "S3 key made");
            }
            made.map(|(access_key_id, secret)| {
                MgrReply::S3KeyMade(S3KeyMade {
                    access_key_id,
                    secret,
                })
            })
        }
        MgrRequest::S3KeyList(calls::S3KeyList { user }) => {
            let st = sh.mgr.store.lock().expect("store lock");
            users::s3_key_list(st.as_ref(), c, &user).map(MgrReply::S3Keys)
        }
        MgrRequest::S3KeyRevoke(calls::S3KeyRevoke {
            user,
            access_key_id,
        }) => {
            let mut st = sh.mgr.store.lock().expect("store lock");
            users::s3_key_revoke(st.as_mut(), c, &user, &access_key_id).map(|()| MgrReply::Ok(()))
        }
        MgrRequest::WaitBreaks(calls::WaitBreaks { acked, wait_ms }) => Ok(MgrReply::Breaks(
            sh.mgr
                .callbacks
                .poll(c.session, acked, wait_ms, now_ms())
                .await,
        )),
        req => handle(&sh.mgr, c, req).await,
    };
    if let Err(e) = &r {
        tracing::debug!(user = %c.name, op = name, "refused: {e}");
    }
    (r.unwrap_or_else(|e| e.reply()), After::Continue)
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
    credential: Credential,
) -> (MgrReply, After) {
    // A challenge serves one login attempt, and only for the user it was asked for.
    let ch = conn
        .challenge
        .take()
        .filter(|(u, _)| *u == user)
        .map(|(_, c)| c);
    let attempt = match credential {
        Credential::Token(_) => None,
        Credential::Password(_) | Credential::Signature(_) => {
            let begun =
                sh.logins
                    .lock()
                    .expect("logins lock")
                    .begin(&user, conn.peer.ip(), now_ms());
            match begun {
                Ok(a) => Some(a),
                Err(r) => {
                    tracing::info!(peer = %conn.peer, "login refused: backing off");
                    return (too_many_attempts(r), After::Continue);
                }
            }
        }
    };
    let permit = match credential {
        Credential::Password(_) => Some(
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
        via: ok.via,
        expires_ms: ok.expires_ms,
        token_hash,
        epoch: sh.session_epoch.load(Ordering::Acquire),
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
/// since it last looked, still in the store.
fn still_live(sh: &Shared, live: &mut Live) -> Result<(), MgrError> {
    if live.expires_ms <= now_ms() {
        return Err(MgrError::new(
            MgrStatus::SessionExpired,
            format!("{}: the session expired", live.caller.name),
        ));
    }
    // Read before the store, so an end that lands during the check is seen next time.
    let epoch = sh.session_epoch.load(Ordering::Acquire);
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
        live.epoch = epoch;
    }
    Ok(())
}

/// Ends this connection's session in the store, tells every live connection to check its own,
/// and closes this one.
fn logout(sh: &Shared, conn: &mut Conn) -> (MgrReply, After) {
    let live = conn.session.take().expect("logged in");
    let ended = users::logout(
        sh.mgr.store.lock().expect("store lock").as_mut(),
        &live.token_hash,
    );
    sh.session_epoch.fetch_add(1, Ordering::AcqRel);
    match ended {
        Ok(_) => {
            tracing::info!(user = %live.caller.name, "logged out");
            (MgrReply::Ok(()), After::Close)
        }
        Err(e) => (e.reply(), After::Close),
    }
}

/// `ActFor`: a gateway's session for `user` (see [`users::act_for`]); logged, since it is
/// the one way in without the user's credential.
async fn act_for(
    sh: &Shared,
    c: &Caller,
    via: Option<u32>,
    user: String,
) -> Result<MgrReply, MgrError> {
    let (mgr, gw, ttl) = (sh.mgr.clone(), c.clone(), sh.mgr.policy.session_ttl_ms);
    let name = user.clone();
    let ok = tokio::task::spawn_blocking(move || users::act_for(&mgr.store, &gw, via, &name, ttl))
        .await
        .map_err(|e| MgrError::new(MgrStatus::Internal, e.to_string()))??;
    tracing::info!(gateway = %c.name, user = %user, "gateway acts for user");
    Ok(MgrReply::LoginOk(LoginOk {
        uid: ok.caller.uid,
        admin: ok.caller.admin,
        token: SessionToken(ok.token),
        expires_ms: ok.expires_ms,
    }))
}

/// `user gateway NAME on|off` (admins): turning it off ends the sessions it opened, live
/// connections included.
fn user_gateway(sh: &Shared, c: &Caller, name: String, on: bool) -> Result<MgrReply, MgrError> {
    admin_only(c, "making a user a gateway")?;
    {
        let mut st = sh.mgr.store.lock().expect("store lock");
        users::set_gateway(st.as_mut(), &name, on)?;
    }
    sh.session_epoch.fetch_add(1, Ordering::AcqRel);
    tracing::info!(admin = %c.name, user = %name, on, "gateway flag set");
    Ok(MgrReply::Ok(()))
}

/// `user passwd`: a new password or key; every session of the user ends, live connections
/// included (their next request finds the session gone).
async fn user_passwd(
    sh: &Shared,
    c: &Caller,
    name: String,
    password: nasd_proto::manager::SecretString,
    public_key: Option<[u8; PUBLIC_KEY_BYTES]>,
) -> Result<MgrReply, MgrError> {
    let (mgr, by) = (sh.mgr.clone(), c.clone());
    tokio::task::spawn_blocking(move || {
        let new = match &public_key {
            Some(pk) => users::NewCredential::PublicKey(pk),
            None => users::NewCredential::Password(&password),
        };
        users::set_credential(&mgr.store, &by, &name, new)
    })
    .await
    .map_err(|e| MgrError::new(MgrStatus::Internal, e.to_string()))??;
    sh.session_epoch.fetch_add(1, Ordering::AcqRel);
    Ok(MgrReply::Ok(()))
}

fn admin_only(c: &Caller, what: &str) -> Result<(), MgrError> {
    if c.admin {
        Ok(())
    } else {
        Err(MgrError::new(
            MgrStatus::PermissionDenied,
            format!("{what} needs an admin"),
        ))
    }
}

fn db(e: crate::store::StoreError) -> MgrError {
    MgrError::new(MgrStatus::Internal, e.to_string())
}

/// Runs a request, with AFS callbacks around it (seed 002 §3.2, [`callbacks`]): a change is
/// answered only once every other session holding a callback on what it changed was told;
/// a reply that hands out a file's stat or capabilities registers a callback.
async fn handle(m: &Arc<Manager>, c: &Caller, req: MgrRequest) -> Result<MgrReply, MgrError> {
    if m.callbacks.idle() {
        return handle_op(m, c, req).await;
    }
    let changes = callbacks::touched(m, c, &req);
    let r = handle_op(m, c, req).await?;
    let now = now_ms();
    if !changes.is_empty() {
        m.callbacks.break_and_wait(&changes, c.session, now).await;
    }
    callbacks::register_reply(&m.callbacks, c.session, &r, now);
    Ok(r)
}

async fn handle_op(m: &Arc<Manager>, c: &Caller, req: MgrRequest) -> Result<MgrReply, MgrError> {
    use MgrRequest as Q;
    let req_name = req.name();
    Ok(match req {
        Q::Login(calls::Login { .. })
        | Q::Challenge(calls::Challenge { .. })
        | Q::Logout(calls::Logout)
        | Q::UserPasswd(calls::UserPasswd { .. })
        | Q::ActFor(calls::ActFor { .. })
        | Q::UserGateway(calls::UserGateway { .. })
        | Q::S3KeyCreate(calls::S3KeyCreate { .. })
        | Q::S3KeyList(calls::S3KeyList { .. })
        | Q::S3KeyRevoke(calls::S3KeyRevoke { .. })
        | Q::S3KeySecret(calls::S3KeySecret { .. })
        | Q::WaitBreaks(calls::WaitBreaks { .. }) => {
            unreachable!("handled by dispatch")
        }
        Q::Stat(calls::Stat { path }) => MgrReply::Stat(m.stat(c, &path).await?),
        Q::Readdir(calls::Readdir {
            path,
            after,
            limit,
            xattr,
        }) => MgrReply::Entries(
            m.readdir(c, &path, &after, limit as usize, xattr.as_deref())
                .await?,
        ),
        Q::Mkdir(calls::Mkdir { path, mode }) => {
            m.mkdir(c, &path, mode)?;
            MgrReply::Ok(())
        }
        Q::Rmdir(calls::Rmdir { path }) => {
            m.rmdir(c, &path)?;
            MgrReply::Ok(())
        }
        Q::Create(calls::Create {
            path,
            mode,
            exclusive,
            extend_by,
        }) => m.create(c, &path, mode, exclusive, extend_by).await?,
        Q::Open(calls::Open {
            path,
            write,
            extend_by,
        }) => m.open(c, &path, write, extend_by).await?,
        Q::QuotaSet(calls::QuotaSet { user, limit }) => {
            MgrReply::Quotas(m.quota_set(c, &user, limit).await?)
        }
        Q::QuotaGet(calls::QuotaGet { user }) => MgrReply::Quotas(m.quota_get(c, &user)?),
        Q::Commit(calls::Commit {
            path,
            drive,
            object,
            size,
            stale,
            xattrs,
            e2e,
        }) => {
            m.commit(c, &path, drive, object, size, stale, xattrs.as_deref(), e2e)
                .await?;
            MgrReply::Ok(())
        }
        Q::E2eUpdate(calls::E2eUpdate { path, update }) => {
            m.e2e_update(c, &path, update)?;
            MgrReply::Ok(())
        }
        Q::UserKeySet(calls::UserKeySet { user, keys }) => {
            m.user_key_set(c, &user, &keys)?;
            MgrReply::Ok(())
        }
        Q::UserKeyGet(calls::UserKeyGet { uids, names }) => {
            MgrReply::UserKeys(m.user_key_get(c, &uids, &names)?)
        }
        Q::GroupKeySet(calls::GroupKeySet {
            group,
            version,
            public,
            wraps,
        }) => {
            m.group_key_set(c, &group, version, &public, &wraps)?;
            MgrReply::Ok(())
        }
        Q::GroupKeyGet(calls::GroupKeyGet { gids, names }) => {
            MgrReply::GroupKeys(m.group_key_get(c, &gids, &names)?)
        }
        Q::Getxattrs(calls::Getxattrs { path }) => {
            let (stat, xattrs) = m.getxattrs(c, &path).await?;
            MgrReply::Xattrs(Xattrs { stat, xattrs })
        }
        Q::Setxattr(calls::Setxattr { path, name, value }) => {
            m.setxattr(c, &path, &name, value.as_deref())?;
            MgrReply::Ok(())
        }
        Q::StageWrite(calls::StageWrite { path, extend_by }) => {
            m.stage_write(c, &path, extend_by).await?
        }
        Q::Repair(calls::Repair {
            path,
            component,
            offset,
            len,
        }) => {
            m.repair(c, &path, component as usize, offset, len).await?;
            MgrReply::Ok(())
        }
        Q::Scrub(calls::Scrub { path, repair }) => {
            admin_only(c, req_name)?;
            MgrReply::Scrubbed(m.scrub_path(c, &path, repair).await?)
        }
        Q::Status(calls::Status) => {
            admin_only(c, req_name)?;
            MgrReply::Status(m.cluster_status()?)
        }
        Q::DriveReplace(calls::DriveReplace { old, new }) => {
            admin_only(c, req_name)?;
            m.drive_replace(old, new)?;
            MgrReply::Ok(())
        }
        Q::LayoutGet(calls::LayoutGet { path }) => {
            MgrReply::LayoutSpec(LayoutSpec(m.layout_get(c, &path)?))
        }
        Q::LayoutSet(calls::LayoutSet { path, spec }) => {
            m.layout_set(c, &path, &spec)?;
            MgrReply::Ok(())
        }
        Q::Abort(calls::Abort {
            path,
            drive,
            object,
        }) => {
            m.abort(c, &path, drive, object).await?;
            MgrReply::Ok(())
        }
        Q::Renew(calls::Renew {
            path,
            drive,
            object,
            extend_by,
        }) => m.renew(c, &path, drive, object, extend_by).await?,
        Q::Symlink(calls::Symlink { path, target }) => {
            m.symlink(c, &path, &target)?;
            MgrReply::Ok(())
        }
        Q::Readlink(calls::Readlink { path }) => {
            MgrReply::LinkTarget(LinkTarget(m.readlink(c, &path)?))
        }
        Q::Lstat(calls::Lstat { path }) => MgrReply::Stat(m.lstat(c, &path).await?),
        Q::Link(calls::Link { existing, new }) => {
            m.link(c, &existing, &new)?;
            MgrReply::Ok(())
        }
        Q::Prepare(calls::Prepare {
            dir,
            mode,
            count,
            extend_by,
        }) => MgrReply::Prepared(m.prepare(c, &dir, mode, count, extend_by).await?),
        Q::ReturnCapability(calls::ReturnCapability { path, audit_id }) => {
            tracing::info!(audit_id, user = %c.name, path, "capability returned");
            m.return_capability(c, &path).await?;
            MgrReply::Ok(())
        }
        Q::Unlink(calls::Unlink { path }) => {
            m.unlink(c, &path).await?;
            MgrReply::Ok(())
        }
        Q::Rename(calls::Rename { from, to }) => {
            m.rename(c, &from, &to).await?;
            MgrReply::Ok(())
        }
        Q::Chmod(calls::Chmod { path, mode }) => {
            m.chmod(c, &path, mode).await?;
            MgrReply::Ok(())
        }
        Q::Chown(calls::Chown { path, owner, group }) => {
            m.chown(c, &path, &owner, &group).await?;
            MgrReply::Ok(())
        }
        Q::Truncate(calls::Truncate { path, size }) => {
            m.truncate(c, &path, size).await?;
            MgrReply::Ok(())
        }
        Q::Utimes(calls::Utimes { path, mtime_us }) => {
            m.utimes(c, &path, mtime_us).await?;
            MgrReply::Ok(())
        }
        Q::UserAdd(calls::UserAdd {
            name,
            password,
            admin,
            public_key,
        }) => {
            admin_only(c, "adding a user")?;
            let m2 = m.clone();
            tokio::task::spawn_blocking(move || {
                let mut st = m2.store.lock().expect("store lock");
                match public_key {
                    Some(pk) => users::add_key_user(st.as_mut(), &name, &pk, admin),
                    None => users::add_user(st.as_mut(), &name, &password, admin),
                }
            })
            .await
            .map_err(|e| MgrError::new(MgrStatus::Internal, e.to_string()))??;
            MgrReply::Ok(())
        }
        Q::UserList(calls::UserList) => {
            let st = m.store.lock().expect("store lock");
            let mut out = vec![];
            for u in st.users().map_err(db)? {
                let mut groups = vec![];
                for g in st.groups_of(u.uid).map_err(db)? {
                    groups.push(
                        st.group_by_gid(g)
                            .map_err(db)?
                            .map(|g| g.name)
                            .unwrap_or_else(|| g.to_string()),
                    );
                }
                out.push(UserInfo {
                    name: u.name,
                    uid: u.uid,
                    admin: u.admin,
                    groups,
                });
            }
            MgrReply::Users(out)
        }
        Q::GroupAdd(calls::GroupAdd { name }) => {
            admin_only(c, "adding a group")?;
            users::check_account_name(&name)?;
            m.store
                .lock()
                .expect("store lock")
                .add_group(&name)
                .map_err(|e| match e {
                    crate::store::StoreError::Exists => {
                        MgrError::new(MgrStatus::Exists, format!("group {name}"))
                    }
                    e => db(e),
                })?;
            MgrReply::Ok(())
        }
        Q::GroupMember(calls::GroupMember { group, user }) => {
            admin_only(c, "changing group membership")?;
            let mut st = m.store.lock().expect("store lock");
            let g = st
                .group_by_name(&group)
                .map_err(db)?
                .ok_or_else(|| MgrError::new(MgrStatus::UnknownGroup, group.clone()))?;
            let u = st
                .user_by_name(&user)
                .map_err(db)?
                .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, user.clone()))?;
            st.add_member(g.gid, u.uid).map_err(db)?;
            MgrReply::Ok(())
        }
        Q::DriveAdd(calls::DriveAdd {
            addr,
            drive_key_file,
            master_key_file,
        }) => {
            admin_only(c, "registering a drive")?;
            let master = (!master_key_file.is_empty()).then_some(master_key_file.as_str());
            add_drive(m, &addr, &drive_key_file, master).await?;
            MgrReply::Ok(())
        }
        Q::DriveList(calls::DriveList) => MgrReply::Drives(m.drive_statuses()),
    })
}

/// Registers a new drive (taking over its drive key when given its master key file, see
/// [`drives::register`]), or records a known drive's new address.
pub async fn add_drive(
    m: &Arc<Manager>,
    addr: &str,
    key_file: &str,
    master_key_file: Option<&str>,
) -> Result<(), MgrError> {
    let kf = nasd_crypto::keyfile::KeyFile::decode(key_file)
        .map_err(|e| MgrError::new(MgrStatus::InvalidArgument, format!("drive key file: {e}")))?;
    if let Some(mut rec) = m.drives.record(kf.drive) {
        if rec.addr != addr {
            rec.addr = addr.to_string();
            m.store
                .lock()
                .expect("store lock")
                .put_drive(&rec)
                .map_err(db)?;
            m.drives.upsert(rec, None);
        }
        return Ok(());
    }
    let (rec, conn) = drives::register(addr, key_file, master_key_file).await?;
    m.store
        .lock()
        .expect("store lock")
        .put_drive(&rec)
        .map_err(db)?;
    tracing::info!(drive = %format!("{:016x}", rec.drive.0), addr, "drive registered");
    m.drives.upsert(rec, Some(conn));
    Ok(())
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
/// drives in `pending` that missed the start-up rotation), settles the quota escrows of files
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
        loop {
            tokio::select! {
                _ = health.tick() => {
                    m.drives.check_health().await;
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
