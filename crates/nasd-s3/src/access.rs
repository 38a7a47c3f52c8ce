//! Who a request comes from. s3s checks each request's SigV4 signature (header or presigned
//! URL, clock skew included) with the secret [`KeyAuth`] fetches from the manager
//! (`S3KeySecret`, which only a gateway's session may ask); the gateway then acts for the
//! key's user through a session the manager opened for it (`ActFor`), so every namespace
//! check is the manager's, made for that user, and the user's password never reaches the
//! gateway. Secrets and sessions are cached briefly: a revoked key stops working within
//! [`KEY_CACHE_MS`]. A session the manager ended (a password change ends them all) is
//! dropped at its first refusal and opened anew ([`session_ended`]).

use nasd_client::files::{Client, FsError};
use nasd_proto::manager::calls;
use nasd_proto::manager::{MgrStatus, S3KeyFound};
use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Error, S3Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How long a key's secret (and its user) is used before the manager is asked again.
pub const KEY_CACHE_MS: u64 = 5_000;
/// How long the gateway uses a session it opened for a user before it opens a fresh one
/// (well inside the hour the manager gives such sessions).
pub const USER_SESSION_MS: u64 = 20 * 60 * 1000;
/// Keys and users cached at most (the least recently fetched goes first).
pub const CACHED_MAX: usize = 4096;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

struct KeyEntry {
    user: String,
    secret: SecretKey,
    fetched_ms: u64,
}

/// A user's groups, and when they were read.
type Groups = (Arc<Vec<String>>, u64);

/// The gateway's identity and its caches of keys and user sessions.
pub struct Access {
    gateway: Arc<Client>,
    keys: Mutex<HashMap<String, KeyEntry>>,
    users: tokio::sync::Mutex<HashMap<String, (Arc<Client>, u64)>>,
    /// Each user's groups and when they were read (for permissions the gateway checks
    /// itself, [`crate::acl`]).
    groups: Mutex<HashMap<String, Groups>>,
}

impl Access {
    pub fn new(gateway: Arc<Client>) -> Arc<Access> {
        Arc::new(Access {
            gateway,
            keys: Mutex::new(HashMap::new()),
            users: tokio::sync::Mutex::new(HashMap::new()),
            groups: Mutex::new(HashMap::new()),
        })
    }

    /// The gateway's own client.
    pub fn gateway(&self) -> &Arc<Client> {
        &self.gateway
    }

    /// The user of access key `id`, if its secret was fetched lately (for the access log).
    pub fn cached_user(&self, id: &str) -> Option<String> {
        self.keys
            .lock()
            .expect("keys lock")
            .get(id)
            .map(|k| k.user.clone())
    }

    /// The user of access key `id` and its secret.
    pub(crate) async fn key(&self, id: &str) -> S3Result<(String, SecretKey)> {
        let now = now_ms();
        if let Some(k) = self.keys.lock().expect("keys lock").get(id) {
            if now < k.fetched_ms + KEY_CACHE_MS {
                return Ok((k.user.clone(), k.secret.clone()));
            }
        }
        let ask = calls::S3KeySecret {
            access_key_id: id.to_string(),
        };
        let (user, secret) = match self.gateway.call("/", ask).await {
            Ok(S3KeyFound { user, secret }) => (user, SecretKey::from(secret.0.as_str())),
            Err(e) if e.status() == Some(MgrStatus::UnknownUser) => {
                return Err(s3_error!(InvalidAccessKeyId))
            }
            Err(e) => return Err(internal(&e)),
        };
        let mut keys = self.keys.lock().expect("keys lock");
        if keys.len() >= CACHED_MAX {
            keys.retain(|_, k| now < k.fetched_ms + KEY_CACHE_MS);
            if keys.len() >= CACHED_MAX {
                keys.clear();
            }
        }
        keys.insert(
            id.to_string(),
            KeyEntry {
                user: user.clone(),
                secret: secret.clone(),
                fetched_ms: now,
            },
        );
        Ok((user, secret))
    }

    /// A client acting for the user of access key `id` (whose signature s3s checked).
    pub async fn client_for_key(&self, id: &str) -> S3Result<Arc<Client>> {
        let (user, _) = self.key(id).await?;
        self.client_for(&user).await
    }

    /// Drops the session cached for `user` if it is `dead` (the manager ended it), so the
    /// next request opens a fresh one.
    pub async fn forget(&self, user: &str, dead: &Arc<Client>) {
        let mut users = self.users.lock().await;
        if users.get(user).is_some_and(|(c, _)| Arc::ptr_eq(c, dead)) {
            users.remove(user);
        }
    }

    /// The groups `user` belongs to (read through the gateway's session, cached for
    /// [`KEY_CACHE_MS`]).
    pub async fn groups(&self, user: &str) -> S3Result<Arc<Vec<String>>> {
        let now = now_ms();
        if let Some((g, at)) = self.groups.lock().expect("groups lock").get(user) {
            if now < at + KEY_CACHE_MS {
                return Ok(g.clone());
            }
        }
        let users = match self.gateway.call("/", calls::UserList).await {
            Ok(u) => u,
            Err(e) => return Err(internal(&e)),
        };
        let mine = Arc::new(
            users
                .into_iter()
                .find(|u| u.name == user)
                .map(|u| u.groups)
                .unwrap_or_default(),
        );
        let mut g = self.groups.lock().expect("groups lock");
        if g.len() >= CACHED_MAX {
            g.clear();
        }
        g.insert(user.to_string(), (mine.clone(), now));
        Ok(mine)
    }

    /// A client acting for `user`: a cached session, or a fresh one the manager opens.
    pub async fn client_for(&self, user: &str) -> S3Result<Arc<Client>> {
        let now = now_ms();
        let mut users = self.users.lock().await;
        if let Some((c, made)) = users.get(user) {
            if now < made + USER_SESSION_MS {
                return Ok(c.clone());
            }
        }
        let c = self.gateway.act_for(user).await.map_err(|e| {
            tracing::warn!("acting for {user}: {e}");
            match e.status() {
                Some(MgrStatus::PermissionDenied) => {
                    s3_error!(AccessDenied, "the gateway may not act for this user")
                }
                Some(MgrStatus::UnknownUser) => s3_error!(InvalidAccessKeyId),
                _ => internal(&e),
            }
        })?;
        // Stats and metadata are cached under AFS callbacks, so a GET of an object read
        // before costs no manager round trip (seed 002 §3.2).
        c.enable_callbacks();
        if users.len() >= CACHED_MAX {
            users.retain(|_, (_, made)| now < *made + USER_SESSION_MS);
            if users.len() >= CACHED_MAX {
                users.clear();
            }
        }
        users.insert(user.to_string(), (c.clone(), now));
        Ok(c)
    }
}

/// The message of every `InternalError`: its cause is in the gateway's log, under the
/// request id the error carries, never in the reply (it names paths of the namespace).
pub const INTERNAL: &str = "internal error; the gateway's log has its cause under this request id";
/// The message of every `ServiceUnavailable` for an unreachable manager or drive.
pub const UNAVAILABLE: &str = "the storage cluster is unreachable for now; try again";
/// The message of the error that tells a request its user's session ended
/// ([`session_ended`]); it is answered as `ServiceUnavailable` if a fresh session fails too.
pub const SESSION_ENDED: &str = "the user's session ended; try again";

/// Whether the manager refused a request because its session is over: expired, or ended by
/// a logout or a credential change (then a fresh session is needed, not a retry).
pub fn is_session_over(e: &FsError) -> bool {
    matches!(
        e.status(),
        Some(MgrStatus::SessionExpired) | Some(MgrStatus::NotLoggedIn)
    )
}

/// Whether `e` is the error [`internal`] makes of an ended session.
pub fn session_ended(e: &S3Error) -> bool {
    *e.code() == s3s::S3ErrorCode::ServiceUnavailable && e.message() == Some(SESSION_ENDED)
}

/// An error the client cannot name as an S3 error: logged with its cause, and answered as
/// `InternalError` or `ServiceUnavailable` (the manager or a drive could not be reached, or
/// the user's session ended) without it.
pub fn internal(e: &FsError) -> S3Error {
    tracing::warn!("{e}");
    if is_session_over(e) {
        return s3_error!(ServiceUnavailable, "{SESSION_ENDED}");
    }
    let unavailable = matches!(e, FsError::Manager { error, .. } if error.is_unavailable())
        || matches!(e, FsError::Drive { .. } | FsError::Layout { .. });
    if unavailable {
        s3_error!(ServiceUnavailable, "{UNAVAILABLE}")
    } else {
        s3_error!(InternalError, "{INTERNAL}")
    }
}

/// The secret lookup s3s calls to check a signature.
pub struct KeyAuth(pub Arc<Access>);

#[async_trait::async_trait]
impl S3Auth for KeyAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        Ok(self.0.key(access_key).await?.1)
    }
}
