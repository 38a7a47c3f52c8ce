//! The server-attached disk (SAD) of seed 002 §4: a store-and-forward file server. It reads
//! the same striped files from the same drives as a nasd client (with its own session and
//! capabilities, every reply verified), holds each piece in its memory, and forwards it to
//! the client that asked: every byte crosses the server's one link twice, in and out. It is
//! the lab's stand-in for the seed's NFS/AFS server in front of its disks (`nasd lab
//! sad-server`, a process of its own so its CPU can be read).
//!
//! The lab-only protocol over TCP (little-endian, one request at a time per connection; a
//! client opens one connection per read stream):
//!
//! ```text
//! request  path_len u16 | path (UTF-8, path_len bytes) | offset u64 | length u32
//! reply    status u8 (0 ok, 1 refused or failed) | length u32 | data, or the error as UTF-8
//! ```
//!
//! The server serves only paths under its root, at most [`READ_BYTES_MAX`] per request and
//! [`CONNECTIONS_MAX`] connections at once, and reads at most [`DRIVE_READS_MAX`] requests
//! from the drives at once; the others wait their turn in the server, as requests to an NFS
//! server wait for one of its fixed pool of daemon threads.

use std::sync::Arc;

use nasd_client::files::Client;
use nasd_client::session::SessionConfig;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::error::LabError;

/// Longest path a request may name, bytes.
pub const PATH_BYTES_MAX: usize = 1024;
/// Most bytes one request may ask for.
pub const READ_BYTES_MAX: u32 = 4 << 20;
/// Connections the server holds at once; later ones wait to be accepted.
pub const CONNECTIONS_MAX: usize = 256;
/// Requests the server reads from the drives at once (8: the classic default number of
/// nfsd threads). Two would keep its inbound link busy; without a bound, every client's
/// read-ahead would queue at once behind its one inbound link.
pub const DRIVE_READS_MAX: usize = 8;
/// How long a client waits for a reply.
pub const REPLY_TIMEOUT_MS: u64 = 30_000;
/// How long a read may wait on a drive before it fails. A file striped raid0 has nothing to
/// decode around a slow drive, and behind a capped link a queue of a second or more is
/// load, not a fault: wait as long as a drive request may take
/// (nasd-client's `conn::REQUEST_TIMEOUT_MS`), not the client's default of
/// `striped::READ_DEADLINE_MS` (2 s).
pub const DRIVE_READ_DEADLINE_MS: u64 = nasd_client::conn::REQUEST_TIMEOUT_MS;

/// Reply status: the data follows.
const STATUS_OK: u8 = 0;
/// Reply status: an error message follows.
const STATUS_ERROR: u8 = 1;

/// Serves reads of files under `root` on `listen` until the process ends, reading them from
/// the drives as the user of `cfg`. Calls `on_listening` with the bound address once it
/// accepts connections.
pub async fn serve(
    listen: &str,
    cfg: SessionConfig,
    root: &str,
    on_listening: impl FnOnce(std::net::SocketAddr),
) -> Result<(), LabError> {
    let client = Client::connect(cfg)
        .await
        .map_err(|e| LabError::Sad(format!("logging in to the manager: {e}")))?;
    client.set_read_deadline_ms(DRIVE_READ_DEADLINE_MS);
    let reads = Arc::new(tokio::sync::Semaphore::new(DRIVE_READS_MAX));
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| LabError::Sad(format!("listening on {listen}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| LabError::Sad(e.to_string()))?;
    on_listening(bound);
    let root = Arc::new(format!("{}/", root.trim_end_matches('/')));
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        let permit = slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (conn, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("sad server: accept: {e}");
                continue;
            }
        };
        conn.set_nodelay(true).ok();
        let (client, root, reads) = (client.clone(), root.clone(), reads.clone());
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = serve_connection(conn, &client, &root, &reads).await {
                tracing::debug!("sad server: connection ended: {e}");
            }
        });
    }
}

/// One connection: requests answered in order until the peer closes.
async fn serve_connection(
    mut conn: TcpStream,
    client: &Client,
    root: &str,
    reads: &tokio::sync::Semaphore,
) -> std::io::Result<()> {
    while let Some(req) = read_request(&mut conn).await? {
        let answer = match req {
            Err(e) => Err(e),
            Ok((path, offset, length)) => match check(&path, length, root) {
                Ok(path) => {
                    let _turn = reads.acquire().await.expect("never closed");
                    client
                        .read_at(&path, offset, u64::from(length))
                        .await
                        .map_err(|e| format!("{e}"))
                }
                Err(e) => Err(e),
            },
        };
        reply(&mut conn, answer).await?;
    }
    Ok(())
}

/// A request's (path, offset, length): `None` when the peer closed between requests, an
/// inner error for a path longer than [`PATH_BYTES_MAX`] (its bytes are skipped, so the
/// connection stays in step).
async fn read_request(
    conn: &mut TcpStream,
) -> std::io::Result<Option<Result<(Vec<u8>, u64, u32), String>>> {
    let path_len = match conn.read_u16_le().await {
        Ok(n) => n as usize,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut path = vec![0u8; path_len.min(PATH_BYTES_MAX)];
    conn.read_exact(&mut path).await?;
    if path_len > PATH_BYTES_MAX {
        let skip = (path_len - PATH_BYTES_MAX) as u64;
        tokio::io::copy(&mut (&mut *conn).take(skip), &mut tokio::io::sink()).await?;
    }
    let offset = conn.read_u64_le().await?;
    let length = conn.read_u32_le().await?;
    if path_len > PATH_BYTES_MAX {
        return Ok(Some(Err(format!(
            "a path of {path_len} bytes: at most {PATH_BYTES_MAX}"
        ))));
    }
    Ok(Some(Ok((path, offset, length))))
}

/// A request's path, if the server serves it and the length is within bounds.
fn check(path: &[u8], length: u32, root: &str) -> Result<String, String> {
    let path = std::str::from_utf8(path).map_err(|_| "path is not UTF-8".to_string())?;
    if !path.starts_with(root) || path.split('/').any(|c| c == "..") {
        return Err(format!("{path:?} is not under {root}"));
    }
    if length > READ_BYTES_MAX {
        return Err(format!(
            "{length} bytes: at most {READ_BYTES_MAX} per request"
        ));
    }
    Ok(path.to_string())
}

async fn reply(conn: &mut TcpStream, answer: Result<Vec<u8>, String>) -> std::io::Result<()> {
    let (status, body) = match answer {
        Ok(d) => (STATUS_OK, d),
        Err(e) => (STATUS_ERROR, e.into_bytes()),
    };
    let mut head = [0u8; 5];
    head[0] = status;
    head[1..].copy_from_slice(&(body.len() as u32).to_le_bytes());
    conn.write_all(&head).await?;
    conn.write_all(&body).await
}

/// Asks the SAD server on `conn` for `length` bytes of `path` at `offset`; returns how many
/// bytes came back. Fails after [`REPLY_TIMEOUT_MS`] without a reply.
pub async fn fetch(
    conn: &mut TcpStream,
    path: &str,
    offset: u64,
    length: u32,
) -> Result<usize, LabError> {
    let deadline = std::time::Duration::from_millis(REPLY_TIMEOUT_MS);
    tokio::time::timeout(deadline, fetch_now(conn, path, offset, length))
        .await
        .map_err(|_| LabError::Sad(format!("no reply for {path} within {REPLY_TIMEOUT_MS} ms")))?
}

async fn fetch_now(
    conn: &mut TcpStream,
    path: &str,
    offset: u64,
    length: u32,
) -> Result<usize, LabError> {
    let io = |e: std::io::Error| LabError::Sad(format!("reading {path} through the server: {e}"));
    assert!(path.len() <= PATH_BYTES_MAX && length <= READ_BYTES_MAX);
    let mut req = Vec::with_capacity(2 + path.len() + 12);
    req.extend_from_slice(&(path.len() as u16).to_le_bytes());
    req.extend_from_slice(path.as_bytes());
    req.extend_from_slice(&offset.to_le_bytes());
    req.extend_from_slice(&length.to_le_bytes());
    conn.write_all(&req).await.map_err(io)?;
    let status = conn.read_u8().await.map_err(io)?;
    let n = conn.read_u32_le().await.map_err(io)?;
    if status == STATUS_OK && n > length {
        return Err(LabError::Sad(format!(
            "the server sent {n} bytes for a read of {length}"
        )));
    }
    if status != STATUS_OK && n as usize > PATH_BYTES_MAX * 4 {
        return Err(LabError::Sad(format!("an error message of {n} bytes")));
    }
    let mut body = vec![0u8; n as usize];
    conn.read_exact(&mut body).await.map_err(io)?;
    if status != STATUS_OK {
        return Err(LabError::Sad(format!(
            "the server refused {path}: {}",
            String::from_utf8_lossy(&body)
        )));
    }
    Ok(body.len())
}

/// How long the SAD server process has to accept connections.
const READY_MS: u64 = 20_000;

/// How to start the SAD server process.
pub struct Launch<'a> {
    /// The command it runs under (`ip netns exec NS`).
    pub wrapper: &'a [std::ffi::OsString],
    pub nasd_bin: &'a std::path::Path,
    /// The client config of the user it reads as.
    pub config: &'a std::path::Path,
    pub addr: std::net::SocketAddr,
    /// It serves files under this directory only.
    pub root: &'a str,
    /// Its output goes here.
    pub log: &'a std::path::Path,
}

/// The SAD server process (`WRAPPER nasd lab sad-server ...`); dropping it stops it.
pub struct SadProcess {
    child: std::process::Child,
}

impl SadProcess {
    /// Starts the server and waits until it accepts connections on its address (which the
    /// calling thread must be able to reach).
    pub fn start(l: &Launch<'_>) -> Result<SadProcess, LabError> {
        let io = |what: &str, e: std::io::Error| LabError::Sad(format!("{what}: {e}"));
        let log = std::fs::File::create(l.log).map_err(|e| io(&l.log.display().to_string(), e))?;
        let log2 = log.try_clone().map_err(|e| io("its log", e))?;
        let (program, rest) = l.wrapper.split_first().expect("a wrapper command");
        let child = std::process::Command::new(program)
            .args(rest)
            .arg(l.nasd_bin)
            .args(["lab", "sad-server", "--config"])
            .arg(l.config)
            .args(["--listen", &l.addr.to_string(), "--root", l.root])
            // It reads with the config's own credentials, not the caller's overrides.
            .env_remove("NASD_USER")
            .env_remove("NASD_KEY")
            .env_remove("NASD_PASSWORD")
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| io("starting the SAD server", e))?;
        let mut s = SadProcess { child };
        s.wait_ready(l)?;
        Ok(s)
    }

    fn wait_ready(&mut self, l: &Launch<'_>) -> Result<(), LabError> {
        let t0 = std::time::Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(l.log).unwrap_or_default();
                return Err(LabError::Sad(format!(
                    "it exited ({status}):\n{}",
                    log.trim()
                )));
            }
            if std::net::TcpStream::connect(l.addr).is_ok() {
                return Ok(());
            }
            if super::net::interrupted() {
                return Err(LabError::Interrupted);
            }
            if t0.elapsed() > std::time::Duration::from_millis(READY_MS) {
                return Err(LabError::Sad(format!(
                    "it did not listen on {} within {READY_MS} ms",
                    l.addr
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for SadProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            nasd_cluster::process::stop_pid(self.child.id());
        }
        let _ = self.child.try_wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_under_the_root_and_bounded_reads_are_served() {
        let root = "/scaling/";
        assert_eq!(check(b"/scaling/f0", 1 << 19, root).unwrap(), "/scaling/f0");
        assert!(check(b"/etc/x", 1, root).is_err());
        assert!(check(b"/scaling/../x", 1, root).is_err());
        assert!(check(b"/scalingx", 1, root).is_err());
        assert!(check(&[0xff], 1, root).is_err());
        assert!(check(b"/scaling/f0", READ_BYTES_MAX + 1, root).is_err());
    }

    /// The client's requests and the server's replies agree on the frame layout: a server
    /// that answers `offset % 251` repeated, or refuses, seen from [`fetch`].
    #[tokio::test]
    async fn requests_and_replies_round_trip() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut c, _) = l.accept().await.unwrap();
            let mut seen = vec![];
            while let Some(r) = read_request(&mut c).await.unwrap() {
                let answer = r.and_then(|(path, offset, length)| {
                    seen.push((String::from_utf8(path.clone()).unwrap(), offset, length));
                    check(&path, length, "/s/").map(|_| vec![(offset % 251) as u8; length as usize])
                });
                reply(&mut c, answer).await.unwrap();
            }
            seen
        });
        let mut c = TcpStream::connect(addr).await.unwrap();
        assert_eq!(fetch(&mut c, "/s/f", 7, 1000).await.unwrap(), 1000);
        let e = fetch(&mut c, "/t/f", 0, 10).await.unwrap_err().to_string();
        assert!(e.contains("not under"), "{e}");
        assert_eq!(fetch(&mut c, "/s/g", 1 << 40, 0).await.unwrap(), 0);
        drop(c);
        let seen = server.await.unwrap();
        assert_eq!(
            seen,
            vec![
                ("/s/f".into(), 7, 1000),
                ("/t/f".into(), 0, 10),
                ("/s/g".into(), 1 << 40, 0)
            ]
        );
    }
}
