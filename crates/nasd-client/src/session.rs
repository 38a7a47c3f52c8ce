//! A TLS 1.3 session with the file manager: connect, trust only the cluster CA named in the
//! client's config, log in (password, session token, or an Ed25519 signature over the manager's
//! challenge), then one request at a time. Requests and replies are the messages of `nasd_proto::manager`; capability keys arrive only inside
//! this TLS session.

use nasd_proto::manager::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How long connecting, the TLS handshake and the login may take.
pub const MANAGER_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// How long one request waits for its reply.
pub const MANAGER_REQUEST_TIMEOUT_MS: u64 = 60_000;

/// Reads one length-prefixed frame body; `Ok(None)` at a clean end of stream. Frames over
/// `max` bytes are refused before anything is allocated for them.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let Some(n) = read_frame_len(r, max).await? else {
        return Ok(None);
    };
    // Read into spare capacity: no zeroing of a buffer about to be overwritten.
    let mut body = Vec::with_capacity(n);
    r.take(n as u64).read_to_end(&mut body).await?;
    if body.len() != n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(body))
}

/// Bodies with at least this many bytes still to come are read from the socket straight into
/// the body, not through the reader's buffer: one copy instead of two. Shorter ones go through
/// the buffer, where one system call also picks up the frames behind them.
pub const DIRECT_READ_BYTES_MIN: usize = 32 << 10;

/// [`read_frame`] from a buffered reader, through [`read_into`].
pub async fn read_frame_buffered<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let Some(n) = read_frame_len(r, max).await? else {
        return Ok(None);
    };
    let mut body = vec![];
    read_into(r, &mut body, n).await?;
    Ok(Some(body))
}

/// Appends exactly `n` bytes from `r` to `out`: what the buffer holds is taken from it, and a
/// remainder of at least [`DIRECT_READ_BYTES_MIN`] is read from the socket into `out`'s spare
/// capacity (no zeroing, one copy). Every read is bounded by what is left of the `n`, so none
/// takes bytes that follow them.
pub async fn read_into<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    out: &mut Vec<u8>,
    n: usize,
) -> std::io::Result<()> {
    out.reserve_exact(n);
    let end = out.len() + n;
    let held = r.buffer();
    let k = held.len().min(n);
    out.extend_from_slice(&held[..k]);
    r.consume(k);
    while out.len() < end {
        let rest = end - out.len();
        let got = if rest >= DIRECT_READ_BYTES_MIN {
            r.get_mut().take(rest as u64).read_buf(out).await?
        } else {
            (&mut *r).take(rest as u64).read_buf(out).await?
        };
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// A frame's length prefix; `Ok(None)` at a clean end of stream, an error over `max` or at 0.
pub(crate) async fn read_frame_len<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<Option<usize>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = u32::from_le_bytes(len) as usize;
    if n == 0 || n > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {n} bytes refused"),
        ));
    }
    Ok(Some(n))
}

/// Writes one length-prefixed frame and flushes it.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, body: &[u8]) -> std::io::Result<()> {
    debug_assert!(body.len() <= MANAGER_FRAME_BYTES_MAX);
    let mut f = Vec::with_capacity(4 + body.len());
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(body);
    w.write_all(&f).await?;
    w.flush().await
}

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
    pub manager: String,
    /// DER of the cluster CA.
    pub ca_der: Vec<u8>,
    pub user: String,
    /// Used unless `signing_key` is set.
    pub credential: Credential,
    /// An Ed25519 secret seed ([`crate::userkey`]): log in by signing the manager's challenge.
    pub signing_key: Option<nasd_crypto::Key>,
}

pub struct Session {
    stream: tokio_rustls::client::TlsStream<TcpStream>,
    next_id: u64,
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

impl Session {
    /// Connects, verifies the manager's certificate against the cluster CA, and logs in.
    pub async fn connect(cfg: &SessionConfig) -> Result<Session, SessionError> {
        let addr = cfg.manager.clone();
        let tls_err = |detail: String| SessionError::Tls {
            addr: addr.clone(),
            detail,
        };
        let tls = tls_config(&cfg.ca_der).map_err(tls_err)?;
        let deadline = Duration::from_millis(MANAGER_CONNECT_TIMEOUT_MS);
        let tcp = tokio::time::timeout(deadline, TcpStream::connect(&addr))
            .await
            .map_err(|_| SessionError::Connect {
                addr: addr.clone(),
                detail: "timed out".into(),
            })?
            .map_err(|e| SessionError::Connect {
                addr: addr.clone(),
                detail: e.to_string(),
            })?;
        tcp.set_nodelay(true).ok();
        let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(&addr);
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let name =
            rustls::pki_types::ServerName::try_from(host).map_err(|e| tls_err(e.to_string()))?;
        let stream = tokio::time::timeout(
            deadline,
            tokio_rustls::TlsConnector::from(tls).connect(name, tcp),
        )
        .await
        .map_err(|_| tls_err("handshake timed out".into()))?
        .map_err(|e| tls_err(e.to_string()))?;
        let mut s = Session {
            stream,
            next_id: 1,
            user: cfg.user.clone(),
            uid: 0,
            admin: false,
            token: [0; TOKEN_BYTES],
            expires_ms: 0,
        };
        let credential = match &cfg.signing_key {
            None => cfg.credential.clone(),
            Some(k) => {
                let ask = MgrRequest::Challenge {
                    user: cfg.user.clone(),
                };
                match s.request(&ask).await? {
                    MgrReply::Challenge(c) => {
                        Credential::Signature(crate::userkey::sign_login(k, &cfg.user, &c))
                    }
                    other => {
                        return Err(SessionError::Protocol(format!(
                            "challenge answered with {other:?}"
                        )))
                    }
                }
            }
        };
        let login = MgrRequest::Login {
            user: cfg.user.clone(),
            credential,
        };
        match s.request(&login).await? {
            MgrReply::LoginOk {
                uid,
                admin,
                token,
                expires_ms,
            } => {
                s.uid = uid;
                s.admin = admin;
                s.token = token;
                s.expires_ms = expires_ms;
                Ok(s)
            }
            other => Err(SessionError::Protocol(format!(
                "login answered with {other:?}"
            ))),
        }
    }

    /// Sends a request and returns the reply as it came (an `Error` reply included).
    pub async fn call(&mut self, req: &MgrRequest) -> Result<MgrReply, SessionError> {
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
        match self.call(req).await? {
            MgrReply::Error { status, detail } => Err(SessionError::Refused {
                op: req.name(),
                status,
                detail,
            }),
            r => Ok(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of every size class back to back, written in odd-sized pieces: each comes back
    /// whole, none takes bytes of the next, whether read through the buffer or around it.
    #[tokio::test]
    async fn buffered_frames_come_back_whole_and_in_order() {
        let sizes = [
            1usize,
            100,
            DIRECT_READ_BYTES_MIN - 1,
            DIRECT_READ_BYTES_MIN,
            5,
            3 * DIRECT_READ_BYTES_MIN + 7,
            17,
            300 << 10,
        ];
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7) as u8).collect())
            .collect();
        let mut wire = vec![];
        for f in &frames {
            wire.extend_from_slice(&(f.len() as u32).to_le_bytes());
            wire.extend_from_slice(f);
        }
        let (mut tx, rx) = tokio::io::duplex(8 << 10);
        let writer = tokio::spawn(async move {
            for piece in wire.chunks(4093) {
                tx.write_all(piece).await.unwrap();
            }
        });
        let mut r = BufReader::with_capacity(256 << 10, rx);
        for f in &frames {
            let got = read_frame_buffered(&mut r, 1 << 20).await.unwrap().unwrap();
            assert!(got == *f, "frame of {} bytes", f.len());
        }
        writer.await.unwrap();
        assert!(read_frame_buffered(&mut r, 1 << 20)
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn buffered_frames_over_the_limit_or_cut_short_are_errors() {
        let (mut tx, rx) = tokio::io::duplex(1 << 10);
        tx.write_all(&100u32.to_le_bytes()).await.unwrap();
        tx.write_all(&[0; 10]).await.unwrap();
        drop(tx);
        let mut r = BufReader::new(rx);
        assert!(read_frame_buffered(&mut r, 50).await.is_err());
        let (mut tx, rx) = tokio::io::duplex(1 << 10);
        tx.write_all(&100u32.to_le_bytes()).await.unwrap();
        tx.write_all(&[0; 10]).await.unwrap();
        drop(tx);
        let mut r = BufReader::new(rx);
        let e = read_frame_buffered(&mut r, 1000).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
