//! The manager's calls, one handler each. Every request type of the protocol's call table
//! (`nasd_proto::manager::calls`) that a logged-in session sends implements [`Handle`]: its
//! handler checks what the caller may do and carries the call out on the [`Manager`] (the
//! service), and names what the call will change, for AFS callbacks ([`Handle::touched`]).
//! The server answers the calls of the session itself (login, challenge, logout) and hands
//! every other one, past its login gate, to [`run`]. Handlers depend on the service, never
//! the reverse.
//!
//! # Layout
//! One module per family of calls, as `nasd_proto::manager::calls` groups them: `session`
//! (a gateway acting for a user), `namespace`, `files`, `xattr`, `users`, `s3keys`, `e2e`,
//! `quota`, `heal` (drives, repair, scrub, status), `callbacks` (the channel's poll) and
//! `locks` (record locks and `flock`).

mod callbacks;
mod e2e;
mod files;
mod heal;
mod locks;
mod namespace;
mod quota;
mod s3keys;
mod session;
mod users;
mod xattr;

use crate::callbacks::Changed;
use crate::service::{Caller, Manager};
use crate::{now_ms, MgrError, MgrResult};
use nasd_proto::manager::{Call, MgrReply, MgrStatus, Reply};
use std::future::Future;
use std::sync::Arc;

/// How the manager answers one call of a logged-in session.
pub(crate) trait Handle: Call {
    /// Whether a session a gateway opened for a user (`ActFor`) may send this call: only the
    /// object operations a gateway serves for that user, so whoever holds a gateway's
    /// credential changes no key, password, S3 key, owner or policy of the users it acts for
    /// (issue 21 §6). Refused unless a call says otherwise, so a new call is never delegated
    /// by mistake.
    const DELEGATED: bool = false;

    /// What the call will change, found before it runs (a name it removes or renames must be
    /// looked up while it still exists): the callbacks on it are broken once it succeeded.
    /// Nothing, for calls that change no file or name.
    fn touched(&self, _m: &Manager, _c: &Caller) -> Vec<Changed> {
        Vec::new()
    }

    /// Carries the call out for `c`.
    fn handle(
        self,
        m: &Arc<Manager>,
        c: &Caller,
    ) -> impl Future<Output = MgrResult<Self::Reply>> + Send;
}

/// Runs a call with AFS callbacks around it (seed 002 §3.2, [`crate::callbacks`]): a change
/// is answered only once every other session holding a callback on what it changed was told;
/// a reply that hands out a file's stat or capabilities registers a callback.
pub(crate) async fn run<C: Handle>(m: &Arc<Manager>, c: &Caller, call: C) -> MgrResult<MgrReply> {
    if c.via.is_some() && !C::DELEGATED {
        return Err(MgrError::new(
            MgrStatus::PermissionDenied,
            format!(
                "{}: a session a gateway opened may not send {}",
                c.name,
                C::NAME
            ),
        ));
    }
    if m.callbacks.idle() {
        return Ok(call.handle(m, c).await?.into_reply());
    }
    let changes = call.touched(m, c);
    let r = call.handle(m, c).await?.into_reply();
    let now = now_ms();
    if !changes.is_empty() {
        m.callbacks.break_and_wait(&changes, c.session, now).await;
    }
    crate::callbacks::register_reply(&m.callbacks, c.session, &r, now);
    Ok(r)
}

/// Refuses `what` to a caller who is not an admin.
fn admin_only(c: &Caller, what: &str) -> MgrResult<()> {
    if c.admin {
        Ok(())
    } else {
        Err(MgrError::new(
            MgrStatus::PermissionDenied,
            format!("{what} needs an admin"),
        ))
    }
}

/// A blocking task's failure to finish (it panicked or was cancelled), as an internal error.
fn joined(e: tokio::task::JoinError) -> MgrError {
    MgrError::new(MgrStatus::Internal, e.to_string())
}
