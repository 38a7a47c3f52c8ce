//! The clients of a run: one thread per client, each in its own network namespace with its
//! own runtime, reading a set of files sequentially in 512 KiB pieces (seed 002 §4.2's raw
//! read benchmark) with a few reads in flight (the read-ahead of §4.5), either straight from
//! the drives (NASD) or through the SAD server. All clients start together at a [`Gate`] and
//! count the bytes of the reads that complete inside a common window after a warm-up.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nasd_client::files::Client;
use nasd_client::session::SessionConfig;
use tokio::net::TcpStream;

use super::net::{enter, interrupted};
use super::sad;
use crate::error::LabError;

/// What every client reads, and for how long.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The file set (paths on the cluster), each `file_bytes` long.
    pub files: Vec<String>,
    pub file_bytes: u64,
    /// Bytes per read.
    pub chunk_bytes: u32,
    /// Reads in flight per client (each stream reads every `streams`-th piece).
    pub streams: usize,
    /// From the gate's opening to the start of the window.
    pub warmup: Duration,
    /// The measured window.
    pub window: Duration,
}

impl Workload {
    /// Piece `c` of client `client`'s sequence: (file, offset). Client `i` starts with file
    /// `i mod F` and goes through the set in order, each file front to back, round and round.
    pub fn piece(&self, client: usize, c: u64) -> (&str, u64) {
        let per_file = (self.file_bytes / u64::from(self.chunk_bytes)).max(1);
        let f = (client as u64 + c / per_file) % self.files.len() as u64;
        (
            &self.files[f as usize],
            (c % per_file) * u64::from(self.chunk_bytes),
        )
    }
}

/// Where a client's reads go.
#[derive(Clone)]
pub enum Source {
    /// Straight to the drives, as a nasd client of the manager with this session.
    Nasd(SessionConfig),
    /// To the SAD server at this address.
    Sad(SocketAddr),
}

/// What one client moved inside the window.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientCount {
    pub bytes: u64,
    pub reads: u64,
}

/// Where the clients wait until every one is ready; then opened with a common origin, or
/// aborted.
#[derive(Default)]
pub struct Gate {
    /// `None` while closed; then `Some(Some(origin))` once open, `Some(None)` once aborted.
    state: Mutex<Option<Option<Instant>>>,
    cv: Condvar,
}

impl Gate {
    /// Lets the clients go; returns the origin of their timing.
    pub fn open(&self) -> Instant {
        let origin = Instant::now();
        *self.state.lock().expect("gate lock") = Some(Some(origin));
        self.cv.notify_all();
        origin
    }

    /// Sends the clients home without reading.
    pub fn abort(&self) {
        *self.state.lock().expect("gate lock") = Some(None);
        self.cv.notify_all();
    }

    /// Waits for [`Gate::open`] (the origin) or [`Gate::abort`] (`None`).
    fn wait(&self) -> Option<Instant> {
        let mut g = self.state.lock().expect("gate lock");
        loop {
            if let Some(s) = *g {
                return s;
            }
            g = self.cv.wait(g).expect("gate lock");
        }
    }
}

/// A client's connection to what it reads from.
enum Reader {
    Nasd(Arc<Client>),
    Sad(Vec<TcpStream>),
}

/// Client `index`: enters `ns`, connects (and touches every file, so capabilities and
/// drive connections are in place before the window), says it is `ready` (exactly once),
/// waits at the gate and reads until the window ends.
pub fn client(
    ns: &str,
    index: usize,
    source: Source,
    w: &Workload,
    gate: &Gate,
    ready: mpsc::Sender<Result<(), LabError>>,
) -> Result<ClientCount, LabError> {
    let set_up = (|| {
        enter(ns)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| LabError::Client(format!("a runtime: {e}")))?;
        let reader = rt.block_on(connect(source, w))?;
        Ok((rt, reader))
    })();
    let (rt, reader) = match set_up {
        Ok(x) => {
            let _ = ready.send(Ok(()));
            x
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return Err(LabError::Client(format!("client {index} was not set up")));
        }
    };
    drop(ready);
    let Some(origin) = gate.wait() else {
        return Ok(ClientCount::default());
    };
    rt.block_on(read_window(reader, index, w, origin))
}

async fn connect(source: Source, w: &Workload) -> Result<Reader, LabError> {
    match source {
        Source::Nasd(cfg) => {
            let c = Client::connect(cfg)
                .await
                .map_err(|e| LabError::Client(format!("logging in: {e}")))?;
            // As the SAD server's: waiting behind a capped link is not a drive failure.
            c.set_read_deadline_ms(sad::DRIVE_READ_DEADLINE_MS);
            for f in &w.files {
                c.read_at(f, 0, 1)
                    .await
                    .map_err(|e| LabError::Client(format!("reading {f}: {e}")))?;
            }
            Ok(Reader::Nasd(c))
        }
        Source::Sad(addr) => {
            let mut conns = vec![];
            for _ in 0..w.streams {
                let mut c = TcpStream::connect(addr)
                    .await
                    .map_err(|e| LabError::Client(format!("connecting to {addr}: {e}")))?;
                c.set_nodelay(true).ok();
                sad::fetch(&mut c, &w.files[0], 0, 1).await?;
                conns.push(c);
            }
            Ok(Reader::Sad(conns))
        }
    }
}

/// Reads with `w.streams` reads in flight until the window's end; counts the reads that
/// complete inside it.
async fn read_window(
    reader: Reader,
    index: usize,
    w: &Workload,
    origin: Instant,
) -> Result<ClientCount, LabError> {
    let t0 = origin + w.warmup;
    let t1 = t0 + w.window;
    let mut tasks = tokio::task::JoinSet::new();
    let (nasd, mut sad_conns): (_, Vec<Option<TcpStream>>) = match reader {
        Reader::Nasd(c) => (Some(c), vec![]),
        Reader::Sad(v) => (None, v.into_iter().map(Some).collect()),
    };
    for stream in 0..w.streams {
        let w = w.clone();
        let nasd = nasd.clone();
        let mut conn = sad_conns.get_mut(stream).and_then(Option::take);
        tasks.spawn(async move {
            let mut count = ClientCount::default();
            let mut c = stream as u64;
            loop {
                if interrupted() {
                    return Err(LabError::Interrupted);
                }
                let (path, offset) = w.piece(index, c);
                let read = async {
                    match (&nasd, conn.as_mut()) {
                        (Some(cl), _) => cl
                            .read_at(path, offset, u64::from(w.chunk_bytes))
                            .await
                            .map(|d| d.len())
                            .map_err(|e| LabError::Client(format!("reading {path}: {e}"))),
                        (None, Some(s)) => sad::fetch(s, path, offset, w.chunk_bytes).await,
                        (None, None) => unreachable!("a SAD stream has its connection"),
                    }
                };
                let Ok(got) = tokio::time::timeout_at(t1.into(), read).await else {
                    return Ok(count);
                };
                let got = got?;
                let now = Instant::now();
                if now >= t1 {
                    return Ok(count);
                }
                if now >= t0 {
                    count.bytes += got as u64;
                    count.reads += 1;
                }
                c += w.streams as u64;
            }
        });
    }
    let mut total = ClientCount::default();
    while let Some(r) = tasks.join_next().await {
        let c = r.map_err(|e| LabError::Client(format!("a read stream panicked: {e}")))??;
        total.bytes += c.bytes;
        total.reads += c.reads;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_walk_the_file_set_from_their_own_file() {
        let w = Workload {
            files: vec!["/a".into(), "/b".into(), "/c".into()],
            file_bytes: 4 << 20,
            chunk_bytes: 1 << 20,
            streams: 2,
            warmup: Duration::ZERO,
            window: Duration::ZERO,
        };
        assert_eq!(w.piece(0, 0), ("/a", 0));
        assert_eq!(w.piece(0, 3), ("/a", 3 << 20));
        assert_eq!(w.piece(0, 4), ("/b", 0));
        assert_eq!(w.piece(1, 0), ("/b", 0));
        assert_eq!(w.piece(2, 5), ("/a", 1 << 20));
        assert_eq!(w.piece(4, 12), ("/b", 0), "round and round");
    }
}
