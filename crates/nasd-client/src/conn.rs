//! One TCP connection to a drive, pipelined: many requests in flight, a writer task that owns
//! the socket's write half, and a reader task that owns its read half and routes each reply to
//! its caller by request id. In-flight requests are bounded ([`IN_FLIGHT_REQUESTS_MAX`]) and
//! each waits at most [`REQUEST_TIMEOUT_MS`].

use crate::auth::Auth;
use crate::object::Target;
use crate::wire::{
    build_request_signing, open_reply, reply_request_id, BuiltRequest, Reply, ReplyFrame,
    RequestSpec, Signing,
};
use crate::ClientError;
use nasd_proto::io::{read_frame_buffered, read_frame_len, read_into};
use nasd_proto::{
    frame, DriveId, Hello, Nonce, ObjectId, Op, PartitionId, Scheme, Suite, Welcome,
    FRAME_BYTES_MAX, PROTOCOL_VERSION, REPLY_PREFIX_BYTES,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// Most requests one connection has in flight; further callers wait for a slot.
pub const IN_FLIGHT_REQUESTS_MAX: usize = 64;
/// How long a request waits for its reply.
pub const REQUEST_TIMEOUT_MS: u64 = 30_000;
/// How long connecting and the handshake may take.
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Objects whose integrity scheme a connection remembers (to pick a write's digest form).
pub const SCHEME_CACHE_ENTRIES_MAX: usize = 4096;
/// Read buffer of the reader task.
const READ_BUFFER_BYTES: usize = 256 << 10;

const _: () = assert!(IN_FLIGHT_REQUESTS_MAX > 0 && REQUEST_TIMEOUT_MS >= CONNECT_TIMEOUT_MS);

type ReplySlot = oneshot::Sender<Result<ReplyFrame, String>>;

/// Replies still owed, by request id. Shared by callers (insert, remove on timeout) and the
/// reader task (take on reply, drain on loss); held only for a map operation.
#[derive(Default)]
struct Pending {
    slots: HashMap<u64, ReplySlot>,
    /// Set once the connection is lost: why. Later callers fail at once.
    lost: Option<String>,
}

/// What the drive said in its welcome.
#[derive(Clone, Debug)]
pub struct DriveInfoBrief {
    pub drive: DriveId,
    pub suite: Suite,
    pub block_bytes: u32,
    pub chunk_bytes: u32,
    pub nonce_window_ms: u64,
    /// Drive clock minus local clock at the handshake, in microseconds.
    pub clock_offset_us: i64,
    /// The drive refuses nonces older than this (see [`Welcome::nonce_floor_us`]).
    pub nonce_floor_us: u64,
}

pub struct DriveConn {
    addr: String,
    welcome: DriveInfoBrief,
    next_id: AtomicU64,
    pending: Arc<Mutex<Pending>>,
    outgoing: mpsc::Sender<Vec<u8>>,
    slots: Arc<Semaphore>,
    schemes: Mutex<HashMap<(PartitionId, ObjectId), Scheme>>,
    reader: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
}

impl Drop for DriveConn {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

fn local_now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Reads one reply frame, its head and its data into buffers of their own; `Ok(None)` at a
/// clean end of stream. A body too short for the header length it names is read whole into the
/// head, for [`open_reply`] to refuse.
async fn read_reply<R: AsyncReadExt + Unpin>(
    r: &mut BufReader<R>,
) -> std::io::Result<Option<ReplyFrame>> {
    let Some(n) = read_frame_len(r, FRAME_BYTES_MAX).await? else {
        return Ok(None);
    };
    let mut head = vec![];
    read_into(r, &mut head, n.min(REPLY_PREFIX_BYTES)).await?;
    let data_at = ReplyFrame::data_at(&head, n);
    let rest = data_at - head.len();
    read_into(r, &mut head, rest).await?;
    let mut data = vec![];
    read_into(r, &mut data, n - data_at).await?;
    Ok(Some(ReplyFrame { head, data }))
}

/// Reads one frame body; `Ok(None)` at a clean end of stream (the shared frame reader of
/// [`read_frame_buffered`] with the drive protocol's limit).
async fn read_frame<R: AsyncReadExt + Unpin>(
    r: &mut BufReader<R>,
) -> Result<Option<Vec<u8>>, String> {
    read_frame_buffered(r, FRAME_BYTES_MAX)
        .await
        .map_err(|e| e.to_string())
}

impl DriveConn {
    /// Connects, says hello, and reads the drive's welcome.
    pub async fn connect(addr: &str) -> Result<DriveConn, ClientError> {
        let deadline = Duration::from_millis(CONNECT_TIMEOUT_MS);
        let hs = |detail: String| ClientError::Handshake {
            addr: addr.to_string(),
            detail,
        };
        let stream = tokio::time::timeout(deadline, TcpStream::connect(addr))
            .await
            .map_err(|_| ClientError::Connect {
                addr: addr.to_string(),
                source: std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
            })?
            .map_err(|source| ClientError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        stream.set_nodelay(true).ok();
        let (rd, mut wr) = stream.into_split();
        let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, rd);
        wr.write_all(&frame(
            &Hello {
                version: PROTOCOL_VERSION,
            }
            .encode(),
        ))
        .await
        .map_err(|e| hs(e.to_string()))?;
        let body = tokio::time::timeout(deadline, read_frame(&mut rd))
            .await
            .map_err(|_| hs("no welcome in time".into()))?
            .map_err(hs)?
            .ok_or_else(|| hs("the drive closed the connection".into()))?;
        let w = Welcome::decode(&body).map_err(|e| hs(e.to_string()))?;
        let welcome = DriveInfoBrief {
            drive: w.drive,
            suite: w.suite,
            block_bytes: w.block_bytes,
            chunk_bytes: w.chunk_bytes,
            nonce_window_ms: w.nonce_window_ms,
            clock_offset_us: w.clock_us as i64 - local_now_us() as i64,
            nonce_floor_us: w.nonce_floor_us,
        };

        let pending = Arc::new(Mutex::new(Pending::default()));
        let (outgoing, mut rx) = mpsc::channel::<Vec<u8>>(IN_FLIGHT_REQUESTS_MAX);
        let p = pending.clone();
        let reader = tokio::spawn(async move {
            let why = loop {
                match read_reply(&mut rd).await {
                    Ok(Some(body)) => {
                        let Some(id) = reply_request_id(&body.head) else {
                            break "a reply too short to name its request".to_string();
                        };
                        let slot = p.lock().expect("pending lock").slots.remove(&id);
                        match slot {
                            Some(tx) => {
                                let _ = tx.send(Ok(body));
                            }
                            // A reply for a request that timed out, or one never sent.
                            None => tracing::debug!(request_id = id, "reply nobody waits for"),
                        }
                    }
                    Ok(None) => break "the drive closed the connection".to_string(),
                    Err(e) => break e.to_string(),
                }
            };
            let mut g = p.lock().expect("pending lock");
            g.lost = Some(why.clone());
            for (_, tx) in g.slots.drain() {
                let _ = tx.send(Err(why.clone()));
            }
        });
        let p = pending.clone();
        let writer = tokio::spawn(async move {
            while let Some(f) = rx.recv().await {
                if let Err(e) = wr.write_all(&f).await {
                    let mut g = p.lock().expect("pending lock");
                    let why = format!("sending: {e}");
                    g.lost.get_or_insert(why.clone());
                    for (_, tx) in g.slots.drain() {
                        let _ = tx.send(Err(why.clone()));
                    }
                    break;
                }
            }
            let _ = wr.shutdown().await;
        });
        Ok(DriveConn {
            addr: addr.to_string(),
            welcome,
            next_id: AtomicU64::new(1),
            pending,
            outgoing,
            slots: Arc::new(Semaphore::new(IN_FLIGHT_REQUESTS_MAX)),
            schemes: Mutex::new(HashMap::new()),
            reader,
            writer,
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn welcome(&self) -> &DriveInfoBrief {
        &self.welcome
    }

    /// A fresh nonce stamped with the drive's clock (local time corrected by the offset seen
    /// at the handshake, and never below the drive's replay floor) and 64 random bits.
    pub fn nonce(&self) -> Nonce {
        let now = local_now_us().saturating_add_signed(self.welcome.clock_offset_us);
        Nonce {
            time_us: now.max(self.welcome.nonce_floor_us),
            random: nasd_crypto::random_u64(),
        }
    }

    /// The scheme of an object, when a reply has told this connection.
    pub fn known_scheme(&self, partition: PartitionId, object: ObjectId) -> Option<Scheme> {
        self.schemes
            .lock()
            .expect("scheme lock")
            .get(&(partition, object))
            .copied()
    }

    pub fn remember_scheme(&self, partition: PartitionId, object: ObjectId, scheme: Scheme) {
        let mut m = self.schemes.lock().expect("scheme lock");
        if m.len() >= SCHEME_CACHE_ENTRIES_MAX && !m.contains_key(&(partition, object)) {
            m.clear();
        }
        m.insert((partition, object), scheme);
    }

    /// Builds a request with `nonce` (see [`DriveConn::nonce`]) without sending it, so a
    /// caller can keep its exact bytes (`--save-request`) or bind a wrapped key to the nonce.
    pub fn prepare(
        &self,
        nonce: Nonce,
        auth: &Auth,
        t: Target,
        op: &Op,
        data: &[u8],
    ) -> Result<BuiltRequest, ClientError> {
        self.prepare_signing(nonce, auth, t, op, data, Signing::Required)
    }

    /// [`DriveConn::prepare`], saying how a write under a writer key is signed ([`Signing`]).
    pub fn prepare_signing(
        &self,
        nonce: Nonce,
        auth: &Auth,
        t: Target,
        op: &Op,
        data: &[u8],
        signing: Signing,
    ) -> Result<BuiltRequest, ClientError> {
        if auth.drive() != self.welcome.drive {
            return Err(ClientError::Usage(format!(
                "the key or capability is for drive {:016x} but {} is drive {:016x}",
                auth.drive().0,
                self.addr,
                self.welcome.drive.0
            )));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        build_request_signing(
            self.welcome.suite,
            id,
            nonce,
            &RequestSpec {
                auth,
                protection: t.protection,
                partition: t.partition,
                object: t.object,
                op,
                data,
            },
            signing,
        )
    }

    /// Sends a prepared request and returns its verified reply.
    pub async fn submit(&self, req: BuiltRequest) -> Result<Reply, ClientError> {
        let op = req.pending.op.name();
        let reply = self
            .exchange_frame(req.pending.request_id, req.frame, op)
            .await?;
        open_reply(&req.pending, reply)
    }

    /// Sends raw frame bytes whose request id is `request_id` and returns the raw reply body.
    /// Replay uses it to resend saved bytes unchanged.
    pub async fn exchange(
        &self,
        request_id: u64,
        frame_bytes: Vec<u8>,
        op: &'static str,
    ) -> Result<Vec<u8>, ClientError> {
        Ok(self
            .exchange_frame(request_id, frame_bytes, op)
            .await?
            .into_body())
    }

    async fn exchange_frame(
        &self,
        request_id: u64,
        frame_bytes: Vec<u8>,
        op: &'static str,
    ) -> Result<ReplyFrame, ClientError> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| ClientError::ConnectionLost("connection closed".into()))?;
        let (tx, rx) = oneshot::channel();
        {
            let mut g = self.pending.lock().expect("pending lock");
            if let Some(why) = &g.lost {
                return Err(ClientError::ConnectionLost(why.clone()));
            }
            if g.slots.insert(request_id, tx).is_some() {
                return Err(ClientError::Usage(format!(
                    "request id {request_id} is already in flight on this connection"
                )));
            }
        }
        if self.outgoing.send(frame_bytes).await.is_err() {
            self.pending
                .lock()
                .expect("pending lock")
                .slots
                .remove(&request_id);
            return Err(ClientError::ConnectionLost("writer stopped".into()));
        }
        match tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), rx).await {
            Ok(Ok(Ok(body))) => Ok(body),
            Ok(Ok(Err(why))) => Err(ClientError::ConnectionLost(why)),
            Ok(Err(_)) => Err(ClientError::ConnectionLost("reader stopped".into())),
            Err(_) => {
                self.pending
                    .lock()
                    .expect("pending lock")
                    .slots
                    .remove(&request_id);
                Err(ClientError::Timeout {
                    op,
                    ms: REQUEST_TIMEOUT_MS,
                })
            }
        }
    }

    /// Sends any operation to `t` and returns its verified reply.
    pub async fn call(
        &self,
        auth: &Auth,
        t: Target,
        op: &Op,
        data: &[u8],
    ) -> Result<Reply, ClientError> {
        let req = self.prepare(self.nonce(), auth, t, op, data)?;
        let reply = self.submit(req).await?;
        self.learn(t.partition, t.object, &reply);
        Ok(reply)
    }

    fn learn(&self, partition: PartitionId, object: ObjectId, reply: &Reply) {
        use nasd_proto::ReplyBody;
        let scheme = match &reply.body {
            ReplyBody::Read(rr) => Some(rr.scheme),
            ReplyBody::Written { scheme, .. } => Some(*scheme),
            ReplyBody::Attrs => reply.attributes().map(|a| a.scheme),
            ReplyBody::Object { object: new } => {
                if let Some(a) = reply.attributes() {
                    self.remember_scheme(partition, *new, a.scheme);
                }
                None
            }
            _ => None,
        };
        if let Some(s) = scheme {
            self.remember_scheme(partition, object, s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Capability;
    use crate::fake::FakeDrive;
    use nasd_proto::{CapabilityArgs, Protection, Region, Rights};
    use tokio::net::TcpListener;

    /// A drive stand-in over TCP: welcome, then answers requests in batches of `batch`, each
    /// batch in reverse order, so the client must route replies by request id.
    async fn serve(listener: TcpListener, mut fake: FakeDrive, batch: usize) {
        let (s, _) = listener.accept().await.unwrap();
        let (rd, mut wr) = s.into_split();
        let mut rd = BufReader::new(rd);
        let hello = read_frame(&mut rd).await.unwrap().unwrap();
        Hello::decode(&hello).unwrap();
        let w = Welcome {
            version: PROTOCOL_VERSION,
            drive: fake.drive,
            suite: fake.suite,
            block_bytes: 8192,
            chunk_bytes: 1024,
            clock_us: local_now_us() + 5_000_000,
            nonce_window_ms: 30_000,
            nonce_floor_us: 0,
        };
        wr.write_all(&frame(&w.encode())).await.unwrap();
        let mut queue = vec![];
        while let Ok(Some(body)) = read_frame(&mut rd).await {
            queue.push(fake.handle(&body));
            if queue.len() == batch {
                for r in queue.drain(..).rev() {
                    wr.write_all(&frame(&r)).await.unwrap();
                }
            }
        }
    }

    /// A reply's head and data land in buffers of their own, split where its header says; a
    /// body shorter than the header it names is read whole into the head (and refused later),
    /// and the frame behind it is read intact.
    #[tokio::test]
    async fn replies_split_into_head_and_data() {
        use tokio::io::AsyncWriteExt as _;
        let head = nasd_proto::ReplyHeader {
            request_id: 5,
            status: nasd_proto::Status::Ok,
            protection: nasd_proto::Protection::NONE,
            nonce: Nonce::default(),
            args: vec![1, 2, 3],
            digest: [0; 32],
        }
        .encode();
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut good = head.clone();
        good.extend_from_slice(&data);
        let mut short = head.clone();
        short.truncate(20);
        let (mut tx, rx) = tokio::io::duplex(4096);
        let wire = [frame(&good), frame(&short), frame(&good)].concat();
        tokio::spawn(async move { tx.write_all(&wire).await.unwrap() });
        let mut r = BufReader::new(rx);
        let f = read_reply(&mut r).await.unwrap().unwrap();
        assert!(f.head == head && f.data == data);
        let f = read_reply(&mut r).await.unwrap().unwrap();
        assert!(f.head == short && f.data.is_empty());
        let f = read_reply(&mut r).await.unwrap().unwrap();
        assert!(f.head == head && f.data == data);
        assert!(read_reply(&mut r).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn pipelined_requests_get_their_own_replies() {
        let mut fake = FakeDrive::new(Suite::Blake3);
        let objects: Vec<ObjectId> = (0..8).map(|_| fake.create(Scheme::Tree)).collect();
        let wk = fake.working_key.clone();
        let drive = fake.drive;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(serve(listener, fake, 8));
        let conn = Arc::new(DriveConn::connect(&addr).await.unwrap());
        assert_eq!(conn.welcome().drive, drive);
        // The drive's clock is 5 s ahead: nonces follow it.
        assert!(conn.nonce().time_us > local_now_us() + 4_000_000);
        let mut tasks = vec![];
        for (i, obj) in objects.iter().enumerate() {
            let conn = conn.clone();
            let auth = Auth::Capability(Capability::mint(
                Suite::Blake3,
                &wk,
                CapabilityArgs {
                    drive,
                    partition: PartitionId(1),
                    object: *obj,
                    region: Region::new(0, u64::MAX),
                    rights: Rights::ALL,
                    expiry_ms: u64::MAX,
                    audit_id: 0,
                    min_protection: Protection::NONE,
                    writer_key: None,
                },
                0,
                false,
            ));
            let t = Target {
                partition: PartitionId(1),
                object: *obj,
                protection: Protection::INTEGRITY_DATA,
            };
            tasks.push(tokio::spawn(async move {
                let data = vec![i as u8 + 1; 3000 + i];
                // Each task's write is answered only when all eight are in flight.
                let w = conn.write(&auth, t, 0, &data).await.unwrap();
                assert_eq!(w.logical_size, data.len() as u64);
                data
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await.unwrap().len(), 3000 + i);
        }
        assert_eq!(
            conn.known_scheme(PartitionId(1), objects[0]),
            Some(Scheme::Tree)
        );
    }

    #[tokio::test]
    async fn lost_connection_fails_waiting_callers() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let fake = FakeDrive::new(Suite::Blake3);
        let drive = fake.drive;
        tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let (rd, mut wr) = s.into_split();
            let mut rd = BufReader::new(rd);
            read_frame(&mut rd).await.unwrap();
            let w = Welcome {
                version: PROTOCOL_VERSION,
                drive,
                suite: Suite::Blake3,
                block_bytes: 8192,
                chunk_bytes: 1024,
                clock_us: local_now_us(),
                nonce_window_ms: 30_000,
                nonce_floor_us: 0,
            };
            wr.write_all(&frame(&w.encode())).await.unwrap();
            read_frame(&mut rd).await.unwrap();
            // drop both halves without answering
        });
        let conn = DriveConn::connect(&addr).await.unwrap();
        let auth = Auth::Key {
            kind: nasd_proto::KeyType::Drive,
            key: nasd_crypto::Key::generate(),
            suite: Suite::Blake3,
            drive,
        };
        let t = Target {
            partition: PartitionId(0),
            object: ObjectId(0),
            protection: Protection::INTEGRITY_ARGS,
        };
        let e = conn.inquiry(&auth, t).await.unwrap_err();
        assert!(matches!(e, ClientError::ConnectionLost(_)), "{e}");
    }
}
