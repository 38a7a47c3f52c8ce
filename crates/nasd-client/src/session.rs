//! A TLS 1.3 session with the file manager: connect, trust only the cluster CA named in the
//! client's config, log in (a password through OPAQUE, which never shows the manager the
//! password, a session token, or an Ed25519 signature over the manager's challenge), then one
//! request at a time; [`Session::logout`] ends the session on the manager. [`Session::enroll`]
//! makes a new account's password file with the code `user add` gave. Requests and replies are the messages of `nasd_proto::manager`; capability keys arrive only inside
//! this TLS session.

use crate::managers::{ManagerAddrs, FAILOVER_ROUND_PAUSE_MS, FAILOVER_WAIT_MS};
use nasd_proto::io::{read_frame, write_frame};
use nasd_proto::manager::*;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

fn opaque_err(e: crate::opaque::OpaqueError) -> SessionError {
    SessionError::Protocol(e.to_string())
}

/// How long connecting, the TLS handshake and the login may take.
pub const MANAGER_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// How long one request waits for its reply.
pub const MANAGER_REQUEST_TIMEOUT_MS: u64 = 60_000;

#[derive(Debug, Clone, thiserror::Error)]
pub enum SessionError {
    #[error("cannot reach the manager at {addr}: {detail}")]
    Connect { addr: String, detail: String },
    #[error("TLS with the manager at {addr} failed: {detail}")]
    Tls { addr: String, detail: String },
    #[error("connection to the manager lost: {0}")]
    Lost(String),
    #[error("{op}: {}{}", .status.text(), if .detail.is_empty() { String::new() } else { format!(" ({})", .detail) })]
    Refused {
        op: &'static str,
        status: MgrStatus,
        detail: String,
    },
    #[error("manager protocol: {0}")]
    Protocol(String),
}

impl SessionError {
    pub fn status(&self) -> Option<MgrStatus> {
        match self {
            SessionError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
    /// True when the manager could not be reached or the connection broke (retry later).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            SessionError::Connect { .. } | SessionError::Lost(_) | SessionError::Tls { .. }
        )
    }
}

/// Where the manager is and whom to trust and log in as.
#[derive(Clone)]
pub struct SessionConfig {
    /// Every manager of the cluster (one serves at a time).
    pub manager: ManagerAddrs,
    /// DER of the cluster CA.
    pub ca_der: Vec<u8>,
    pub user: String,
    /// Used unless `signing_key` is set.
    pub credential: Credential,
    /// An Ed25519 secret seed ([`crate::userkey`]): log in by signing the manager's challenge.
    pub signing_key: Option<nasd_crypto::Key>,
}

pub struct Session {
    stream: ManagerStream,
    /// After a password login: the key that seals this user's end-to-end seed, from OPAQUE's
    /// export key.
    pub seed_key: Option<Arc<crate::opaque::SeedKey>>,
    next_id: u64,
    /// A call is between sending its request and reading its reply. Still set when the next
    /// call starts, the earlier one was cancelled mid-flight (its future dropped): the stream
    /// may hold half a frame or an unread reply, so the connection is given up.
    in_call: bool,
    pub user: String,
    pub uid: u32,
    pub admin: bool,
    pub token: [u8; TOKEN_BYTES],
    pub expires_ms: u64,
}

fn tls_config(ca_der: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(ca_der.to_vec()))
        .map_err(|e| format!("the cluster CA certificate is not usable: {e}"))?;
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// The TLS stream of a manager session.
pub type ManagerStream = tokio_rustls::client::TlsStream<TcpStream>;

/// A TLS stream to the manager that serves: each of `managers` in turn, from the one that
/// answered last; with several, rounds of tries go on for up to [`FAILOVER_WAIT_MS`] while
/// none accepts (one took over from a leader that died). See [`tls_stream`].
pub async fn manager_stream(
    managers: &ManagerAddrs,
    ca_der: &[u8],
    source: Option<IpAddr>,
) -> Result<ManagerStream, SessionError> {
    let wait = if managers.several() {
        FAILOVER_WAIT_MS
    } else {
        0
    };
    let give_up = std::time::Instant::now() + Duration::from_millis(wait);
    loop {
        let mut last = None;
        for (i, addr) in managers.in_turn() {
            match tls_stream(addr, ca_der, source).await {
                Ok(s) => {
                    managers.answered(i);
                    return Ok(s);
                }
                Err(e) if e.is_unavailable() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        if std::time::Instant::now() >= give_up {
            return Err(last.expect("a cluster has at least one manager"));
        }
        tokio::time::sleep(Duration::from_millis(FAILOVER_ROUND_PAUSE_MS)).await;
    }
}

/// Connects to the manager at `addr` and completes the TLS 1.3 handshake, trusting only the
/// cluster CA `ca_der`. With `source`, the connection leaves from that local address (a
/// multi-homed client; tests that play several hosts on loopback). Nothing is sent inside.
pub async fn tls_stream(
    addr: &str,
    ca_der: &[u8],
    source: Option<IpAddr>,
) -> Result<ManagerStream, SessionError> {
    let tls_err = |detail: String| SessionError::Tls {
        addr: addr.to_string(),
        detail,
    };
    let connect_err = |detail: String| SessionError::Connect {
        addr: addr.to_string(),
        detail,
    };
    let tls = tls_config(ca_der).map_err(tls_err)?;
    let deadline = Duration::from_millis(MANAGER_CONNECT_TIMEOUT_MS);
    let tcp = tokio::time::timeout(deadline, tcp_connect(addr, source))
        .await
        .map_err(|_| connect_err("timed out".into()))?
        .map_err(|e| connect_err(e.to_string()))?;
    tcp.set_nodelay(true).ok();
    let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr);
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let name = rustls::pki_types::ServerName::try_from(host).map_err(|e| tls_err(e.to_string()))?;
    tokio::time::timeout(
        deadline,
        tokio_rustls::TlsConnector::from(tls).connect(name, tcp),
    )
    .await
    .map_err(|_| tls_err("handshake timed out".into()))?
    .map_err(|e| tls_err(e.to_string()))
}

/// A TCP connection to `addr`, from `source` when given.
async fn tcp_connect(addr: &str, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(source) = source else {
        return TcpStream::connect(addr).await;
    };
    let mut last = std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("{addr} resolves to no address of {source}'s family"),
    );
    for peer in tokio::net::lookup_host(addr).await? {
        let socket = match peer {
            SocketAddr::V4(_) if source.is_ipv4() => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) if source.is_ipv6() => tokio::net::TcpSocket::new_v6()?,
            _ => continue,
        };
        socket.bind(SocketAddr::new(source, 0))?;
        match socket.connect(peer).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl Session {
    /// Connects, verifies the manager's certificate against the cluster CA, and logs in.
    pub async fn connect(cfg: &SessionConfig) -> Result<Session, SessionError> {
        Session::connect_from(cfg, None).await
    }

    /// [`Session::connect`] from the local address `source` (see [`tls_stream`]).
    pub async fn connect_from(
        cfg: &SessionConfig,
        source: Option<IpAddr>,
    ) -> Result<Session, SessionError> {
        let mut s = Session::unauthenticated(cfg, source).await?;
        let proof = match (&cfg.signing_key, &cfg.credential) {
            (Some(k), _) => {
                let ask = calls::Challenge {
                    user: cfg.user.clone(),
                };
                let c = s.call(ask).await?;
                LoginProof::Signature(crate::userkey::sign_login(k, &cfg.user, &c))
            }
            (None, Credential::Password(p)) => {
                let ok = s.opaque_login(&cfg.user, p).await?;
                s.logged_in(ok);
                return Ok(s);
            }
            (None, Credential::LegacyPassword(p)) => LoginProof::LegacyPassword(p.clone()),
            (None, Credential::Token(t)) => LoginProof::Token(*t),
            (None, Credential::Signature(sig)) => LoginProof::Signature(*sig),
        };
        let login = calls::Login {
            user: cfg.user.clone(),
            proof,
        };
        let ok = s.call(login).await?;
        s.logged_in(ok);
        Ok(s)
    }

    /// A TLS session with the manager that has not logged in.
    async fn unauthenticated(
        cfg: &SessionConfig,
        source: Option<IpAddr>,
    ) -> Result<Session, SessionError> {
        let stream = manager_stream(&cfg.manager, &cfg.ca_der, source).await?;
        Ok(Session {
            stream,
            seed_key: None,
            next_id: 1,
            in_call: false,
            user: cfg.user.clone(),
            uid: 0,
            admin: false,
            token: [0; TOKEN_BYTES],
            expires_ms: 0,
        })
    }

    /// An OPAQUE login (RFC 9807): KE1, KE2, KE3; the password stays here. A password that
    /// does not open the password file is refused here, before KE3, with the answer the
    /// manager gives every failed login.
    async fn opaque_login(&mut self, user: &str, password: &str) -> Result<LoginOk, SessionError> {
        let refused = || SessionError::Refused {
            op: "login",
            status: MgrStatus::WrongPassword,
            detail: "login: unknown user or wrong password".into(),
        };
        let pw = password.as_bytes();
        let start = crate::opaque::client_login_start(pw).map_err(opaque_err)?;
        let ke2 = self
            .call(calls::OpaqueLoginStart {
                user: user.to_string(),
                request: start.message,
            })
            .await?;
        let (ke3, seed_key) = match start.finish(pw, &ke2.0) {
            Ok(x) => x,
            Err(crate::opaque::OpaqueError::Refused) => return Err(refused()),
            Err(e) => return Err(opaque_err(e)),
        };
        let ok = self
            .call(calls::OpaqueLoginFinish { finalization: ke3 })
            .await?;
        self.seed_key = Some(Arc::new(seed_key));
        Ok(ok)
    }

    fn logged_in(&mut self, ok: LoginOk) {
        self.uid = ok.uid;
        self.admin = ok.admin;
        self.token = ok.token.0;
        self.expires_ms = ok.expires_ms;
    }

    /// Completes the enrollment of a new (or reset) account: with the one-time `code` from
    /// `user add` (or an admin's `user passwd`), the client registers `cfg.user`'s password
    /// (`cfg.credential`) through OPAQUE; the manager keeps only the password file. The
    /// account then logs in with [`Session::connect`].
    pub async fn enroll(cfg: &SessionConfig, code: &str) -> Result<(), SessionError> {
        let Credential::Password(p) = &cfg.credential else {
            return Err(SessionError::Protocol(
                "enrollment sets a password: give one".into(),
            ));
        };
        let mut s = Session::unauthenticated(cfg, None).await?;
        s.register(&cfg.user, p, Some(code.into()), |_| vec![])
            .await
            .map(drop)
    }

    /// Registers `password` as `user`'s new password file (OPAQUE registration, on this
    /// connection): before login with an enrollment `code`, or from the user's own session.
    /// `sealed` seals the user's seed under the new key ([`crate::opaque::SeedKey`]), or
    /// gives nothing to keep the user's keys unsealed anew. Every session of the user ends.
    pub async fn register(
        &mut self,
        user: &str,
        password: &str,
        code: Option<SecretString>,
        sealed: impl FnOnce(&crate::opaque::SeedKey) -> Vec<u8>,
    ) -> Result<crate::opaque::SeedKey, SessionError> {
        let pw = password.as_bytes();
        let start = crate::opaque::client_register_start(pw).map_err(opaque_err)?;
        let response = self
            .call(calls::OpaqueRegisterStart {
                user: user.to_string(),
                request: start.message,
                code,
            })
            .await?;
        let (upload, seed_key) = start.finish(pw, &response.0).map_err(opaque_err)?;
        let sealed = sealed(&seed_key);
        self.call(calls::OpaqueRegisterFinish { upload, sealed })
            .await?;
        Ok(seed_key)
    }

    /// Ends this session on the manager (its token then logs in nowhere) and closes the
    /// connection.
    pub async fn logout(mut self) -> Result<(), SessionError> {
        self.call(calls::Logout).await
    }

    /// Sends call `c` and returns its typed reply; an `Error` reply becomes
    /// [`SessionError::Refused`], a reply of another kind [`SessionError::Protocol`].
    pub async fn call<C: Call>(&mut self, c: C) -> Result<C::Reply, SessionError> {
        let r = self.request(&c.into()).await?;
        C::Reply::from_reply(r)
            .map_err(|reply| SessionError::Protocol(format!("{} answered with {reply}", C::NAME)))
    }

    /// Sends a request and returns the reply as it came (an `Error` reply included).
    async fn exchange(&mut self, req: &MgrRequest) -> Result<MgrReply, SessionError> {
        if self.in_call {
            return Err(SessionError::Lost(
                "an earlier request on this connection was cancelled before its reply".into(),
            ));
        }
        self.in_call = true;
        let id = self.next_id;
        self.next_id += 1;
        let io = async {
            write_frame(&mut self.stream, &req.encode(id)).await?;
            read_frame(&mut self.stream, MANAGER_FRAME_BYTES_MAX).await
        };
        let body = tokio::time::timeout(Duration::from_millis(MANAGER_REQUEST_TIMEOUT_MS), io)
            .await
            .map_err(|_| SessionError::Lost(format!("{}: no reply in time", req.name())))?
            .map_err(|e| SessionError::Lost(e.to_string()))?
            .ok_or_else(|| SessionError::Lost("the manager closed the connection".into()))?;
        self.in_call = false;
        let (rid, reply) =
            MgrReply::decode(&body).map_err(|e| SessionError::Protocol(e.to_string()))?;
        if rid != id {
            return Err(SessionError::Protocol(format!(
                "reply to request {rid}, expected {id}"
            )));
        }
        Ok(reply)
    }

    /// Sends a request; an `Error` reply becomes [`SessionError::Refused`].
    pub async fn request(&mut self, req: &MgrRequest) -> Result<MgrReply, SessionError> {
        match self.exchange(req).await? {
            MgrReply::Error(Refused { status, detail }) => Err(SessionError::Refused {
                op: req.name(),
                status,
                detail,
            }),
            r => Ok(r),
        }
    }
}
