//! The HTTP/1.1 server of `--metrics ADDR`: `GET /metrics` (the [`Source`]'s metrics and the
//! process's own, in the text format) and `GET /health` (`200 ok`, or `503` and the reason).
//! It answers one request per connection and closes it, and holds bounded memory and time
//! whatever a peer sends: the request head is read into at most
//! [`REQUEST_HEAD_BYTES_MAX`] (more is `431`), within [`REQUEST_READ_TIMEOUT_MS`] (else
//! `408`), anything that is not a request line and header lines is `400`, any method but
//! GET and HEAD `405`; at most [`CONNECTIONS_MAX`] connections are served at once (more are
//! closed at accept), and at most [`CHECKS_IN_FLIGHT_MAX`] renders or health checks run at
//! once, on the blocking pool (they may take a database's lock), each answered as failed
//! after [`CHECK_TIMEOUT_MS`]. No body is ever read.

use crate::text::{Exposition, Kind, CONTENT_TYPE};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Largest request head (request line and headers) read; a scraper's is a few hundred bytes.
pub const REQUEST_HEAD_BYTES_MAX: usize = 8 << 10;
/// Connections served at once; a scraper holds one.
pub const CONNECTIONS_MAX: usize = 16;
/// Renders and health checks running at once.
pub const CHECKS_IN_FLIGHT_MAX: usize = 2;
/// Time for a request head to arrive, from accept.
pub const REQUEST_READ_TIMEOUT_MS: u64 = 5_000;
/// Time for a response to leave.
pub const RESPONSE_WRITE_TIMEOUT_MS: u64 = 10_000;
/// Time a render or a health check may take before it is answered as failed (a manager's
/// database waits this long at most for its lock).
pub const CHECK_TIMEOUT_MS: u64 = 5_000;
/// Bytes read from the socket at a time.
const READ_CHUNK_BYTES: usize = 1024;

const _: () = assert!(CHECKS_IN_FLIGHT_MAX <= CONNECTIONS_MAX);
const _: () = assert!(READ_CHUNK_BYTES <= REQUEST_HEAD_BYTES_MAX);

/// What a process shows through its metrics server.
pub trait Source: Send + Sync + 'static {
    /// Writes the process's metrics (run on the blocking pool).
    fn render(&self, e: &mut Exposition);
    /// `Ok`, or why the process cannot serve (run on the blocking pool).
    fn health(&self) -> Result<(), String>;
}

/// The server's bounds; [`Limits::default`] is the named constants'.
#[derive(Clone, Debug)]
pub struct Limits {
    pub head_bytes_max: usize,
    pub connections_max: usize,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    pub check_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            head_bytes_max: REQUEST_HEAD_BYTES_MAX,
            connections_max: CONNECTIONS_MAX,
            read_timeout: Duration::from_millis(REQUEST_READ_TIMEOUT_MS),
            write_timeout: Duration::from_millis(RESPONSE_WRITE_TIMEOUT_MS),
            check_timeout: Duration::from_millis(CHECK_TIMEOUT_MS),
        }
    }
}

struct Shared {
    source: Arc<dyn Source>,
    limits: Limits,
    checks: Arc<Semaphore>,
    started: std::time::SystemTime,
}

/// Binds `addr` and serves `source` there on the current runtime until the process ends;
/// returns the address bound (`ADDR` may ask for port 0).
pub async fn start(addr: &str, source: Arc<dyn Source>) -> std::io::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(serve(
        listener,
        source,
        Limits::default(),
        std::future::pending(),
    ));
    Ok(bound)
}

/// Serves `source` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    source: Arc<dyn Source>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let conns = Arc::new(Semaphore::new(limits.connections_max));
    let sh = Arc::new(Shared {
        source,
        limits,
        checks: Arc::new(Semaphore::new(CHECKS_IN_FLIGHT_MAX)),
        started: std::time::SystemTime::now(),
    });
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => return,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::debug!("metrics: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // At the limit the newcomer is closed at once: scrapers retry.
        let Ok(permit) = conns.clone().try_acquire_owned() else {
            continue;
        };
        let sh = sh.clone();
        tokio::spawn(async move {
            connection(&sh, stream).await;
            drop(permit);
        });
    }
}

/// A response: status, extra header lines, body.
struct Response {
    status: u16,
    headers: &'static str,
    content_type: &'static str,
    body: String,
}

impl Response {
    fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            headers: "",
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

async fn connection(sh: &Shared, mut s: TcpStream) {
    let head = tokio::time::timeout(
        sh.limits.read_timeout,
        read_head(&mut s, sh.limits.head_bytes_max),
    )
    .await;
    let (response, head_only) = match head {
        Err(_) => (
            Response::text(408, "request head not received in time\n"),
            false,
        ),
        Ok(Err(HeadError::Closed)) => return,
        Ok(Err(HeadError::TooLarge)) => (Response::text(431, "request head too large\n"), false),
        Ok(Ok(head)) => match parse(&head) {
            Err(why) => (
                Response::text(400, format!("malformed request: {why}\n")),
                false,
            ),
            Ok((method, path)) => (route(sh, method, path).await, method == "HEAD"),
        },
    };
    let bytes = encode(&response, head_only);
    let _ = tokio::time::timeout(sh.limits.write_timeout, async {
        s.write_all(&bytes).await?;
        s.shutdown().await
    })
    .await;
}

fn encode(r: &Response, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len(),
        r.headers
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(r.body.as_bytes());
    }
    out
}

async fn route(sh: &Shared, method: &str, path: &str) -> Response {
    if method != "GET" && method != "HEAD" {
        let mut r = Response::text(405, "only GET and HEAD\n");
        r.headers = "Allow: GET, HEAD\r\n";
        return r;
    }
    match path {
        "/metrics" => match check(sh, Check::Render).await {
            Ok(body) => Response {
                status: 200,
                headers: "",
                content_type: CONTENT_TYPE,
                body,
            },
            Err(why) => Response::text(503, format!("metrics unavailable: {why}\n")),
        },
        "/health" => match check(sh, Check::Health).await {
            Ok(_) => Response::text(200, "ok\n"),
            Err(why) => Response::text(503, format!("unhealthy: {why}\n")),
        },
        _ => Response::text(404, "not found: try /metrics or /health\n"),
    }
}

#[derive(Clone, Copy)]
enum Check {
    Render,
    Health,
}

/// Runs a render or a health check on the blocking pool, within the bounds.
async fn check(sh: &Shared, what: Check) -> Result<String, String> {
    let Ok(permit) = sh.checks.clone().try_acquire_owned() else {
        return Err("too many checks in flight".into());
    };
    let source = sh.source.clone();
    let started = sh.started;
    // The permit goes with the work: a check that outlives its timeout still counts until
    // it ends.
    let work = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        match what {
            Check::Health => source.health().map(|()| String::new()),
            Check::Render => {
                let mut e = Exposition::new();
                source.render(&mut e);
                process_metrics(&mut e, started);
                Ok(e.finish())
            }
        }
    });
    match tokio::time::timeout(sh.limits.check_timeout, work).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("the check failed: {e}")),
        Err(_) => Err(format!(
            "no answer within {} ms",
            sh.limits.check_timeout.as_millis()
        )),
    }
}

enum HeadError {
    Closed,
    TooLarge,
}

/// Reads up to the blank line that ends a request head; never more than `max` bytes plus
/// one read's worth.
async fn read_head(s: &mut TcpStream, max: usize) -> Result<Vec<u8>, HeadError> {
    let mut head = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut chunk = [0u8; READ_CHUNK_BYTES];
    loop {
        let n = s.read(&mut chunk).await.map_err(|_| HeadError::Closed)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        // Look for the end from a little before the new bytes, in case it straddles reads.
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&head[from..]) {
            head.truncate(from + end);
            return Ok(head);
        }
        if head.len() > max {
            return Err(HeadError::TooLarge);
        }
    }
}

/// Where the head ends (after its blank line: CRLF CRLF, or bare LFs as RFC 9112 allows).
fn head_end(b: &[u8]) -> Option<usize> {
    (0..b.len()).find_map(|i| {
        if b[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if b[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

/// The method and path (query left off) of a request head, or what is wrong with it.
fn parse(head: &[u8]) -> Result<(&str, &str), &'static str> {
    let text = std::str::from_utf8(head).map_err(|_| "not UTF-8")?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().ok_or("empty")?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the request line is not METHOD TARGET VERSION");
    };
    if method.is_empty() || !method.bytes().all(|c| c.is_ascii_uppercase()) {
        return Err("bad method");
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err("not HTTP/1.0 or HTTP/1.1");
    }
    if !target.starts_with('/') || target.bytes().any(|c| c.is_ascii_control()) {
        return Err("bad target");
    }
    for h in lines.filter(|l| !l.is_empty()) {
        let Some((name, _)) = h.split_once(':') else {
            return Err("a header line without a colon");
        };
        if name.is_empty() || name.bytes().any(|c| c.is_ascii_whitespace()) {
            return Err("bad header name");
        }
    }
    let path = target.split('?').next().unwrap_or(target);
    Ok((method, path))
}

/// The process's own metrics, from `/proc/self` where it has them (Linux): CPU time,
/// resident memory, open descriptors, and the start time.
fn process_metrics(e: &mut Exposition, started: std::time::SystemTime) {
    let start = started
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    e.single(
        "process_start_time_seconds",
        Kind::Gauge,
        "When the metrics server started, seconds since the Unix epoch.",
        start,
    );
    // SAFETY: sysconf takes any name and has no other precondition.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
        if let (Some(u), Some(s)) = (field(11), field(12)) {
            e.single(
                "process_cpu_seconds_total",
                Kind::Counter,
                "CPU time the process used, user and system, in seconds.",
                (u + s) as f64 / ticks,
            );
        }
    }
    let rss_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        });
    if let Some(kib) = rss_kib {
        e.single(
            "process_resident_memory_bytes",
            Kind::Gauge,
            "Resident memory of the process, bytes.",
            kib * 1024,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        e.single(
            "process_open_fds",
            Kind::Gauge,
            "File descriptors the process has open.",
            fds.count(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Fake {
        healthy: bool,
    }

    impl Source for Fake {
        fn render(&self, e: &mut Exposition) {
            e.single("nasd_fake_total", Kind::Counter, "Fakes.", 7u64);
        }
        fn health(&self) -> Result<(), String> {
            match self.healthy {
                true => Ok(()),
                false => Err("the store does not answer".into()),
            }
        }
    }

    async fn server(healthy: bool, limits: Limits) -> std::net::SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let source = Arc::new(Fake { healthy });
        tokio::spawn(serve(l, source, limits, std::future::pending()));
        addr
    }

    /// Sends `req` and reads the whole response (the server closes after it).
    async fn exchange(addr: std::net::SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        // The server may answer and close before it read everything (an oversized head).
        let _ = s.write_all(req).await;
        let mut out = vec![];
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8(out).unwrap()
    }

    fn status(r: &str) -> &str {
        r.split(' ').nth(1).unwrap_or("")
    }

    #[tokio::test]
    async fn metrics_and_health_are_served_and_anything_else_refused() {
        let addr = server(true, Limits::default()).await;
        let r = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(status(&r), "200", "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"));
        assert!(r.contains("\r\n\r\n# HELP nasd_fake_total Fakes.\n"));
        assert!(r.contains("nasd_fake_total 7\n"));
        assert!(r.contains("process_start_time_seconds "));
        let body = r.split_once("\r\n\r\n").unwrap().1;
        let len: usize = r
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(body.len(), len);
        let r = exchange(addr, b"GET /health?verbose=1 HTTP/1.0\n\n").await;
        assert_eq!(status(&r), "200");
        assert!(r.ends_with("\r\n\r\nok\n"));
        let r = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
        assert_eq!(status(&r), "200");
        assert!(r.ends_with("\r\n\r\n"), "HEAD has no body");
        let r = exchange(addr, b"GET /nope HTTP/1.1\r\n\r\n").await;
        assert_eq!(status(&r), "404");
        let r = exchange(
            addr,
            b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        )
        .await;
        assert_eq!(status(&r), "405");
        assert!(r.contains("Allow: GET, HEAD\r\n"));
    }

    #[tokio::test]
    async fn an_unhealthy_process_answers_503_with_its_reason() {
        let addr = server(false, Limits::default()).await;
        let r = exchange(addr, b"GET /health HTTP/1.1\r\n\r\n").await;
        assert_eq!(status(&r), "503", "{r}");
        assert!(r.ends_with("unhealthy: the store does not answer\n"));
    }

    #[tokio::test]
    async fn malformed_requests_are_refused_with_400() {
        let addr = server(true, Limits::default()).await;
        for bad in [
            &b"GET /metrics\r\n\r\n"[..],
            b"GET  /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/2.0\r\n\r\n",
            b"get /metrics HTTP/1.1\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"GET /m\xffx HTTP/1.1\r\n\r\n",
            b"\r\n\r\n",
        ] {
            let r = exchange(addr, bad).await;
            assert_eq!(status(&r), "400", "{:?}: {r}", String::from_utf8_lossy(bad));
        }
    }

    #[tokio::test]
    async fn an_oversized_head_is_refused_after_reading_at_most_the_limit() {
        let addr = server(true, Limits::default()).await;
        let mut req = b"GET /metrics HTTP/1.1\r\n".to_vec();
        while req.len() <= REQUEST_HEAD_BYTES_MAX + 4 * READ_CHUNK_BYTES {
            req.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        // A head that never ends: the server must not wait for its end.
        let r = exchange(addr, &req).await;
        assert_eq!(status(&r), "431", "{r}");
        // Still serving.
        let r = exchange(addr, b"GET /health HTTP/1.1\r\n\r\n").await;
        assert_eq!(status(&r), "200");
    }

    #[tokio::test]
    async fn a_slow_client_gets_408_and_connections_past_the_limit_are_closed() {
        let limits = Limits {
            read_timeout: Duration::from_millis(200),
            connections_max: 1,
            ..Limits::default()
        };
        let addr = server(true, limits).await;
        // Holds the only slot, sending half a request line.
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /met").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let r = exchange(addr, b"GET /health HTTP/1.1\r\n\r\n").await;
        assert_eq!(r, "", "closed at accept while the slot is held");
        let mut out = vec![];
        slow.read_to_end(&mut out).await.unwrap();
        assert_eq!(status(&String::from_utf8(out).unwrap()), "408");
        let r = exchange(addr, b"GET /health HTTP/1.1\r\n\r\n").await;
        assert_eq!(status(&r), "200", "the slot is free again");
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }
}
