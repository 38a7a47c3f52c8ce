//! The manager's TLS 1.3 listener and request dispatcher. One task per connection reads a
//! request, answers it, and reads the next; the first request must be a login. Connections are
//! capped ([`CONNECTIONS_MAX`]), idle ones closed ([`IDLE_TIMEOUT_MS`]), and the TLS handshake
//! bounded ([`HANDSHAKE_TIMEOUT_MS`]). Background tasks check drive health and rotate working
//! keys on the policy's schedule (and once at start, see [`start_background`]).

use crate::service::{Caller, Manager};
use crate::store::DriveRecord;
use crate::{drives, now_ms, scrub, users, MgrError};
use nasd_proto::io::{read_frame, write_frame};
use nasd_proto::manager::*;
use nasd_proto::DecodeError;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub const CONNECTIONS_MAX: usize = 256;
pub const IDLE_TIMEOUT_MS: u64 = 15 * 60_000;
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// Serves until `shutdown` completes.
pub async fn serve(
    mgr: Arc<Manager>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let conns = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = conns.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "refused: {CONNECTIONS_MAX} connections open");
                    continue;
                };
                let (m, acc) = (mgr.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let _ = tcp.set_nodelay(true);
                    match tokio::time::timeout(Duration::from_millis(HANDSHAKE_TIMEOUT_MS), acc.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            if let Err(e) = connection(m, stream).await {
                                tracing::debug!(%peer, "connection closed: {e}");
                            }
                        }
                        Ok(Err(e)) => tracing::info!(%peer, "TLS handshake failed: {e}"),
                        Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                    }
                    drop(permit);
                });
            }
        }
    }
}

async fn connection(
    mgr: Arc<Manager>,
    mut s: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
) -> std::io::Result<()> {
    let mut session: Option<(Caller, u64)> = None;
    // The challenge given to this connection for a key login: (user, challenge), used once.
    let mut challenge: Option<(String, [u8; CHALLENGE_BYTES])> = None;
    loop {
        let body = match tokio::time::timeout(
            Duration::from_millis(IDLE_TIMEOUT_MS),
            read_frame(&mut s, MANAGER_FRAME_BYTES_MAX),
        )
        .await
        {
            Err(_) => return Ok(()),
            Ok(Ok(Some(b))) => b,
            Ok(Ok(None)) => return Ok(()),
            Ok(Err(e)) => return Err(e),
        };
        let (id, reply) = match MgrRequest::decode(&body) {
            Ok((id, req)) => (id, dispatch(&mgr, &mut session, &mut challenge, req).await),
            Err(DecodeError::Version(v)) => (
                request_id_of(&body).unwrap_or(0),
                MgrReply::error(
                    MgrStatus::Version,
                    format!("client speaks {v}, manager {MANAGER_PROTOCOL_VERSION}"),
                ),
            ),
            Err(e) => (
                request_id_of(&body).unwrap_or(0),
                MgrReply::error(MgrStatus::Malformed, e.to_string()),
            ),
        };
        write_frame(&mut s, &reply.encode(id)).await?;
    }
}

async fn dispatch(
    m: &Arc<Manager>,
    session: &mut Option<(Caller, u64)>,
    challenge: &mut Option<(String, [u8; CHALLENGE_BYTES])>,
    req: MgrRequest,
) -> MgrReply {
    let name = req.name();
    if let MgrRequest::Challenge { user } = req {
        let mut c = [0u8; CHALLENGE_BYTES];
        nasd_crypto::random_bytes(&mut c);
        *challenge = Some((user, c));
        return MgrReply::Challenge(c);
    }
    if let MgrRequest::Login { user, credential } = req {
        let (m2, ttl) = (m.clone(), m.policy.session_ttl_ms);
        // A challenge serves one login attempt, and only for the user it was asked for.
        let ch = challenge.take().filter(|(u, _)| *u == user).map(|(_, c)| c);
        let r = tokio::task::spawn_blocking(move || {
            users::login(&m2.store, &user, &credential, ttl, ch.as_ref())
        })
        .await;
        return match r {
            Ok(Ok((c, token, expires_ms))) => {
                let reply = MgrReply::LoginOk {
                    uid: c.uid,
                    admin: c.admin,
                    token,
                    expires_ms,
                };
                *session = Some((c, expires_ms));
                reply
            }
            Ok(Err(e)) => e.reply(),
            Err(e) => MgrReply::error(MgrStatus::Internal, e.to_string()),
        };
    }
    let Some((c, expires_ms)) = session.as_ref() else {
        return MgrReply::error(MgrStatus::NotLoggedIn, format!("{name} before login"));
    };
    if *expires_ms <= now_ms() {
        return MgrReply::error(
            MgrStatus::SessionExpired,
            format!("the session of {} expired", c.name),
        );
    }
    let r = handle(m, c, req).await;
    if let Err(e) = &r {
        tracing::debug!(user = %c.name, op = name, "refused: {e}");
    }
    r.unwrap_or_else(|e| e.reply())
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

async fn handle(m: &Arc<Manager>, c: &Caller, req: MgrRequest) -> Result<MgrReply, MgrError> {
    use MgrRequest as Q;
    Ok(match req {
        Q::Login { .. } | Q::Challenge { .. } => unreachable!("handled by dispatch"),
        Q::Stat { path } => MgrReply::Stat(m.stat(c, &path).await?),
        Q::Readdir { path } => MgrReply::Entries(m.readdir(c, &path).await?),
        Q::Mkdir { path, mode } => {
            m.mkdir(c, &path, mode)?;
            MgrReply::Ok
        }
        Q::Rmdir { path } => {
            m.rmdir(c, &path)?;
            MgrReply::Ok
        }
        Q::Create {
            path,
            mode,
            exclusive,
        } => m.create(c, &path, mode, exclusive).await?,
        Q::Open { path, write } => m.open(c, &path, write).await?,
        Q::Commit {
            path,
            drive,
            object,
        } => {
            m.commit(c, &path, drive, object).await?;
            MgrReply::Ok
        }
        Q::Abort {
            path,
            drive,
            object,
        } => {
            m.abort(c, &path, drive, object).await?;
            MgrReply::Ok
        }
        Q::Renew {
            path,
            drive,
            object,
        } => m.renew(c, &path, drive, object).await?,
        Q::ReturnCapability { path, audit_id } => {
            tracing::info!(audit_id, user = %c.name, path, "capability returned");
            MgrReply::Ok
        }
        Q::Unlink { path } => {
            m.unlink(c, &path).await?;
            MgrReply::Ok
        }
        Q::Rename { from, to } => {
            m.rename(c, &from, &to).await?;
            MgrReply::Ok
        }
        Q::Chmod { path, mode } => {
            m.chmod(c, &path, mode).await?;
            MgrReply::Ok
        }
        Q::Chown { path, owner, group } => {
            m.chown(c, &path, &owner, &group).await?;
            MgrReply::Ok
        }
        Q::Truncate { path, size } => {
            m.truncate(c, &path, size).await?;
            MgrReply::Ok
        }
        Q::Utimes { path, mtime_us } => {
            m.utimes(c, &path, mtime_us).await?;
            MgrReply::Ok
        }
        Q::UserAdd {
            name,
            password,
            admin,
            public_key,
        } => {
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
            MgrReply::Ok
        }
        Q::UserPasswd { name, password } => {
            let m2 = m.clone();
            let c2 = c.clone();
            tokio::task::spawn_blocking(move || {
                let phc = users::hash_password(&password)?;
                let mut st = m2.store.lock().expect("store lock");
                let u = st
                    .user_by_name(&name)
                    .map_err(db)?
                    .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, name.clone()))?;
                if !c2.admin && u.uid != c2.uid {
                    return Err(MgrError::new(
                        MgrStatus::PermissionDenied,
                        format!("changing the password of {name}"),
                    ));
                }
                st.set_password(u.uid, &phc).map_err(db)
            })
            .await
            .map_err(|e| MgrError::new(MgrStatus::Internal, e.to_string()))??;
            MgrReply::Ok
        }
        Q::UserList => {
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
        Q::GroupAdd { name } => {
            admin_only(c, "adding a group")?;
            crate::service::check_name(&name)?;
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
            MgrReply::Ok
        }
        Q::GroupMember { group, user } => {
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
            MgrReply::Ok
        }
        Q::DriveAdd {
            addr,
            drive_key_file,
            master_key_file,
        } => {
            admin_only(c, "registering a drive")?;
            let master = (!master_key_file.is_empty()).then_some(master_key_file.as_str());
            add_drive(m, &addr, &drive_key_file, master).await?;
            MgrReply::Ok
        }
        Q::DriveList => {
            let snap = m.drives.snapshot();
            let st = m.store.lock().expect("store lock");
            MgrReply::Drives(
                snap.into_iter()
                    .map(|(r, healthy, detail)| DriveStatus {
                        drive: r.drive,
                        addr: r.addr,
                        partition: r.partition,
                        healthy,
                        files: st.files_on_drive(r.drive).unwrap_or(0),
                        key_rotated_ms: r.rotated_ms,
                        detail,
                    })
                    .collect(),
            )
        }
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

/// Rotates every drive's working key now (so a rotation interrupted by a crash before the
/// previous run stored its key is healed: the drive keeps the key before as "previous"), then
/// checks health and rotates on the policy's schedule, and scrubs orphaned objects at start
/// and every [`scrub::ORPHAN_SCRUB_INTERVAL_MS`].
pub fn start_background(m: Arc<Manager>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for d in m.drives.ids() {
            match drives::rotate(&m.drives, d).await {
                Ok(rec) => persist(&m, &rec),
                Err(e) => tracing::warn!("working key rotation at start: {e}"),
            }
        }
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
                _ = health.tick() => m.drives.check_health().await,
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
