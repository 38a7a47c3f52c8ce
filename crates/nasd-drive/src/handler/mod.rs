//! Request handling: decode, authenticate, check, execute, reply.
//!
//! The checks of seed 002 §2.4, in the order they run (cheap ones first; the nonce is recorded
//! only after the digest verified, so forged requests can neither fill the replay cache nor
//! burn a legitimate client's nonce):
//! 1. the request's protection meets the capability's minimum (`ProtectionTooWeak`);
//! 2. the capability's minimum meets the drive's and partition's minimum
//!    (`CapabilityBelowMinimum`; for key-authorized requests the request's own protection must);
//! 3. the nonce is inside the clock window (`NonceOutsideWindow`);
//! 4. the capability has not expired (`CapabilityExpired`);
//! 5. the capability names this drive (`WrongDrive`) and the request's partition and object
//!    (`ObjectMismatch`);
//! 6. its rights cover the operation (`RightsDenied`);
//! 7. every region lies inside the capability's region (`RegionOutsideCapability`);
//! 8. the digest verifies under the capability key recomputed from the current, then the
//!    previous, working key and the object's `access_control_version` (`BadDigest`), compared
//!    in constant time (the keys come from [`crate::cap_cache`] when the drive keeps one: the
//!    same keys, found by every input of the derivation);
//! 9. under a capability that names a writer key, a request that changes the object's bytes
//!    (a write, a setattr of the size) carries that key's Ed25519 signature over this drive,
//!    object, nonce and change, verified strictly before anything is stored (`BadSignature`;
//!    seed 001 §3.3.1 scheme 1, `check_writer_signature`);
//! 10. the nonce is covered by the durable replay floor (`IoError` if that cannot be made
//!     durable) and has not been seen by this request's principal (`NonceReplayed`).
//!
//! Requests authorized by a key of the hierarchy (not a capability) must carry at least
//! INTEGRITY_ARGS whatever the minimums say, so the digest proves possession of the key.
//!
//! Each check is a function of `checks.rs`, so [`Drive::authenticate`] reads as the list
//! above; each operation a function of `ops.rs`, so [`Drive::execute`] is a match of calls.
//!
//! A request that fails any check changes nothing and gets its specific status. Replies to
//! authenticated requests carry the request's protection, a fresh nonce and a MAC under the same
//! key bound to the request's nonce; replies to requests that could not be authenticated carry
//! no protection (a client must treat them as unauthenticated).

mod checks;
mod ops;

use crate::audit::{Audit, AuditRecord};
use crate::cache::{BlockCache, CacheStats};
use crate::cap_cache::{CapKeyCache, CAP_KEY_CACHE_ENTRIES};
use crate::options::DriveOptions;
use crate::prefetch::Prefetcher;
use crate::replay_floor::ReplayFloor;
use crate::store::{Material, Store};
use crate::writer::Writer;
use crate::{now_us, DriveError};
use nasd_crypto::integrity::{pieces, CHUNK_BYTES};
use nasd_crypto::nonce::{NonceCache, NONCE_CACHE_ENTRIES_MAX, NONCE_WINDOW_MS};
use nasd_crypto::request::{privacy_key, reply_mac, Field};
use nasd_crypto::{aead, Cost, Key};
use nasd_proto::ops::ERROR_DETAIL_BYTES_MAX;
use nasd_proto::{
    CapField, CapabilityArgs, DriveInfo, Nonce, Op, OpCode, PartitionId, PartitionInfo, Protection,
    Region, ReplyBody, ReplyHeader, RequestHeader, Status,
};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Request and hashing counters (the bench's `drive_hashed_bytes_per_op`).
#[derive(Default)]
pub struct Metrics {
    pub requests: AtomicU64,
    /// Object data and attribute bytes the drive fed to a hash or MAC.
    pub data_bytes_hashed: AtomicU64,
    pub refused: AtomicU64,
    /// CPU time spent handling requests (this thread's, so waits are excluded), nanoseconds;
    /// counted only while [`Drive::meter_cpu`] is on (two clock syscalls per request).
    pub handler_cpu_ns: AtomicU64,
    meter_cpu: AtomicBool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    pub requests: u64,
    pub data_bytes_hashed: u64,
    pub refused: u64,
    /// CPU the drive spent on requests: request handling (while [`Drive::meter_cpu`] is on)
    /// plus the writer thread's work. Socket I/O is not included.
    pub cpu_ns: u64,
}

/// A reply as it goes on the wire: one frame whose body is `head` followed by `data`, kept
/// apart so bulk data is written to the socket without being copied behind the header.
pub struct ReplyBytes {
    pub head: Vec<u8>,
    pub data: Vec<u8>,
    /// The request passed the checks of seed 002 §2.4 (whatever its execution came to): its
    /// sender holds a key or capability of this drive's.
    pub authenticated: bool,
}

impl ReplyBytes {
    /// The frame body in one buffer (tests and tools).
    pub fn into_body(self) -> Vec<u8> {
        let mut v = self.head;
        v.extend_from_slice(&self.data);
        v
    }
}

/// Most bytes of any reply but a read's: attributes, error details, and an inquiry's
/// `DriveInfo` with `PARTITIONS_MAX` partitions (28 bytes each) fit.
pub const SMALL_REPLY_BYTES_MAX: usize = 128 << 10;
const _: () = assert!(SMALL_REPLY_BYTES_MAX > 64 + nasd_proto::ops::PARTITIONS_MAX * 28 + 4096);

/// The replay floor's file in a drive's data directory.
pub const NONCE_FLOOR_FILE: &str = "nonce.floor";

/// A running drive: store, writer thread, replay cache and its durable floor, audit trail,
/// metrics.
pub struct Drive {
    pub store: Arc<Store>,
    writer: Writer,
    nonces: Mutex<NonceCache>,
    floor: ReplayFloor,
    audit: Audit,
    metrics: Metrics,
    /// Requests, errors, bytes and latency per operation (`--metrics`, [`crate::metrics`]).
    ops: nasd_metrics::OpStats,
    /// The clock, behind a seam so tests can move it.
    clock: Box<dyn Fn() -> u64 + Send + Sync>,
    /// Reply nonces: a random start drawn at open, then one step per reply, so every reply's
    /// nonce is unique for the drive's life without a system call per reply.
    reply_nonces: AtomicU64,
    options: DriveOptions,
    cache: Option<Arc<BlockCache>>,
    /// The `prefetch` extension (seed 002 §4.6), when served.
    prefetcher: Option<Prefetcher>,
    /// Capability keys already derived (seed 002 §2.4, §4.4), unless the options turn it off.
    cap_keys: Option<CapKeyCache>,
}

/// A refusal or failure with its status and a human detail for the reply.
struct Refusal(Status, String);

impl From<DriveError> for Refusal {
    fn from(e: DriveError) -> Self {
        Refusal(e.status(), e.to_string())
    }
}

fn refuse<T>(s: Status, detail: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(s, detail.into()))
}

/// What authentication established.
struct Authed {
    key: Option<Key>,
    cap: Option<CapabilityArgs>,
    op: Op,
    /// Decrypted request data under privacy; otherwise the data is the request body's tail.
    plain: Option<Vec<u8>>,
    /// A refusal found after the digest verified (region, replay): answered authenticated.
    refused: Option<Refusal>,
    write_pieces: Vec<Vec<pieces::PieceHash>>,
}

impl Drive {
    /// Opens the drive in `data_dir` (`meta.redb`, `data.blk`, `nonce.floor`, `audit.log`).
    pub fn open(data_dir: &Path) -> Result<Arc<Drive>, DriveError> {
        Self::open_with(data_dir, None)
    }

    /// [`Drive::open`] with the passphrase a drive with sealed keys needs. Refuses a data
    /// directory that anyone but its owner may access (it holds the keys and every object),
    /// and names a missing data file instead of making an empty one.
    pub fn open_with(data_dir: &Path, passphrase: Option<&[u8]>) -> Result<Arc<Drive>, DriveError> {
        Self::open_with_options(data_dir, passphrase, DriveOptions::default())
    }

    /// [`Drive::open_with`] with run-time options (cache, prefetching, a slow and cold disk).
    pub fn open_with_options(
        data_dir: &Path,
        passphrase: Option<&[u8]>,
        options: DriveOptions,
    ) -> Result<Arc<Drive>, DriveError> {
        nasd_private::check_tree(data_dir).map_err(|e| DriveError::Config(e.to_string()))?;
        let existing = |name: &str| {
            let path = data_dir.join(name);
            crate::storage::FileStorage::open_existing(&path).map_err(|e| {
                DriveError::Config(match e.kind() {
                    std::io::ErrorKind::NotFound if name == "meta.redb" => format!(
                        "{} is missing: {} is not a drive (run `nasd drive init`)",
                        path.display(),
                        data_dir.display()
                    ),
                    std::io::ErrorKind::NotFound => format!(
                        "{} is missing: the drive's data file is gone, so its objects are \
                         lost; restore it from a backup, or make a new drive",
                        path.display()
                    ),
                    _ => format!("{}: {e}", path.display()),
                })
            })
        };
        let meta = Arc::new(existing("meta.redb")?);
        let mut data: Arc<dyn crate::storage::Storage> = Arc::new(existing("data.blk")?);
        if options.slow() {
            data = Arc::new(crate::storage::SlowDisk::new(
                data,
                options.seek_ms,
                options.spindles,
                options.cold,
            ));
        }
        let store = Arc::new(Store::open_with(meta, data, passphrase)?);
        let floor_path = data_dir.join(NONCE_FLOOR_FILE);
        // A drive without a floor file (made before it existed; `init` makes one) may have
        // accepted nonces up to a window ahead of now: start above all of them.
        let fresh = if floor_path.exists() {
            0
        } else {
            now_us() + NONCE_WINDOW_MS * 1000
        };
        let floor = Arc::new(crate::storage::FileStorage::open(&floor_path)?);
        Self::with_parts_options(
            store,
            floor,
            fresh,
            Some(&data_dir.join("audit.log")),
            options,
        )
    }

    /// A drive over an already opened store with a fresh in-memory replay floor (tests use
    /// simulated storage).
    pub fn with_store(store: Arc<Store>, audit: Option<&Path>) -> Result<Arc<Drive>, DriveError> {
        Self::with_parts(store, Arc::new(crate::storage::SimDisk::new()), 0, audit)
    }

    /// A drive over an opened store and the storage of its replay floor; `fresh_floor_us` is
    /// the floor when that storage is empty (see [`ReplayFloor::open`]).
    pub fn with_parts(
        store: Arc<Store>,
        floor: Arc<dyn crate::storage::Storage>,
        fresh_floor_us: u64,
        audit: Option<&Path>,
    ) -> Result<Arc<Drive>, DriveError> {
        Self::with_parts_options(store, floor, fresh_floor_us, audit, DriveOptions::default())
    }

    /// [`Drive::with_parts`] with run-time options. The options' slow disk is not applied
    /// here: the store's storage is already open.
    pub fn with_parts_options(
        store: Arc<Store>,
        floor: Arc<dyn crate::storage::Storage>,
        fresh_floor_us: u64,
        audit: Option<&Path>,
        options: DriveOptions,
    ) -> Result<Arc<Drive>, DriveError> {
        let cache = (options.cache_bytes > 0).then(|| {
            store.block_cache_or_init(|| BlockCache::new(options.cache_bytes, options.cache_reads))
        });
        let prefetcher = match (&cache, options.prefetch) {
            (Some(c), Some(p)) if options.prefetching() => {
                Some(Prefetcher::start(store.clone(), c.clone(), p))
            }
            _ => None,
        };
        let (floor, floor_us) = ReplayFloor::open(floor, fresh_floor_us)?;
        let mut nonces = NonceCache::new(NONCE_WINDOW_MS, NONCE_CACHE_ENTRIES_MAX);
        nonces.set_floor(floor_us);
        Ok(Arc::new(Drive {
            writer: Writer::start(store.clone()),
            store,
            nonces: Mutex::new(nonces),
            floor,
            audit: Audit::open(audit)?,
            metrics: Metrics::default(),
            ops: crate::metrics::op_stats(),
            clock: Box::new(now_us),
            reply_nonces: AtomicU64::new(nasd_crypto::random_u64()),
            cap_keys: options
                .cap_key_cache
                .then(|| CapKeyCache::new(CAP_KEY_CACHE_ENTRIES)),
            options,
            cache,
            prefetcher,
        }))
    }

    pub fn options(&self) -> &DriveOptions {
        &self.options
    }

    /// The block cache's counters (all zero without a cache).
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.as_ref().map(|c| c.stats()).unwrap_or_default()
    }

    /// The extensions this drive serves, for its Drive Control object (seed 002 §3.4).
    pub fn extensions(&self) -> Vec<nasd_proto::ext::Extension> {
        if self.prefetcher.is_none() {
            return vec![];
        }
        [OpCode::Hint, OpCode::Consume]
            .into_iter()
            .map(|op| nasd_proto::ext::Extension {
                opcode: op as u8,
                version: nasd_proto::ext::EXT_PREFETCH_VERSION,
                name: nasd_proto::ext::EXT_PREFETCH.into(),
            })
            .collect()
    }

    /// Replaces the clock (tests).
    pub fn set_clock(self: &mut Arc<Self>, clock: impl Fn() -> u64 + Send + Sync + 'static) {
        Arc::get_mut(self)
            .expect("set the clock before sharing the drive")
            .clock = Box::new(clock);
    }

    pub fn now_us(&self) -> u64 {
        (self.clock)()
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            requests: self.metrics.requests.load(Ordering::Relaxed),
            data_bytes_hashed: self.metrics.data_bytes_hashed.load(Ordering::Relaxed),
            refused: self.metrics.refused.load(Ordering::Relaxed),
            cpu_ns: self.metrics.handler_cpu_ns.load(Ordering::Relaxed)
                + self.store.writer_cpu_ns.load(Ordering::Relaxed),
        }
    }

    /// Requests, errors, bytes and latency per operation.
    pub fn op_stats(&self) -> &nasd_metrics::OpStats {
        &self.ops
    }

    /// `Ok`, or why the drive cannot serve: its store does not answer
    /// ([`crate::store::Store::probe`]) or its writer thread is gone.
    pub fn health(&self) -> Result<(), String> {
        if let Err(e) = self.store.probe() {
            return Err(format!("the store does not answer: {e}"));
        }
        if !self.writer.running() {
            return Err("the writer thread is not running".into());
        }
        Ok(())
    }

    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// The handshake answer.
    pub fn welcome(&self) -> nasd_proto::Welcome {
        nasd_proto::Welcome {
            version: nasd_proto::PROTOCOL_VERSION,
            drive: self.store.drive_id(),
            suite: self.store.suite(),
            block_bytes: nasd_crypto::integrity::BLOCK_BYTES as u32,
            chunk_bytes: CHUNK_BYTES as u32,
            clock_us: self.now_us(),
            nonce_window_ms: NONCE_WINDOW_MS,
            nonce_floor_us: self.nonces.lock().floor_us(),
        }
    }

    pub fn drive_info(&self) -> DriveInfo {
        let c = self.store.cached();
        DriveInfo {
            drive: c.drive.drive,
            suite: c.drive.suite,
            block_bytes: nasd_crypto::integrity::BLOCK_BYTES as u32,
            chunk_bytes: CHUNK_BYTES as u32,
            clock_us: self.now_us(),
            nonce_window_ms: NONCE_WINDOW_MS,
            capacity_bytes: c.drive.capacity_bytes,
            used_bytes: self.store.used_blocks() * nasd_crypto::integrity::BLOCK_BYTES,
            min_protection: c.drive.min_protection,
            vendor: format!("nasd {}", env!("CARGO_PKG_VERSION")),
            partitions: c
                .partitions
                .iter()
                .map(|(id, p)| PartitionInfo {
                    id: PartitionId(*id),
                    quota_bytes: p.quota_bytes,
                    used_bytes: p.used_blocks * nasd_crypto::integrity::BLOCK_BYTES,
                    objects: p.objects,
                    default_scheme: p.default_scheme,
                    min_protection: p.min_protection,
                })
                .collect(),
            cache_bytes: self.cache.as_ref().map_or(0, |c| c.bytes_max()),
            extensions: self.extensions(),
        }
    }

    /// Turns on metering of the CPU time spent in [`Self::handle`] (`MetricsSnapshot::cpu_ns`),
    /// for benchmarks that share CPUs with the drive and cannot read its threads' time.
    pub fn meter_cpu(&self, on: bool) {
        self.metrics.meter_cpu.store(on, Ordering::Relaxed);
    }

    /// The most bytes the reply to the request `body` can hold, which a connection reserves
    /// before it runs the request: a read's data (clamped, widened by at most two chunks per
    /// region) and proofs, or [`SMALL_REPLY_BYTES_MAX`] for anything else. Reads whose
    /// arguments are sealed (privacy) cannot be looked into and count as the largest frame.
    pub fn reply_bytes_bound(body: &[u8]) -> usize {
        let Some((protection, OpCode::Read, args)) = RequestHeader::peek_args(body) else {
            return SMALL_REPLY_BYTES_MAX;
        };
        if protection.privacy_args() {
            return nasd_proto::FRAME_BYTES_MAX;
        }
        let Some((regions, total)) = nasd_proto::ops::read_extent(args) else {
            return SMALL_REPLY_BYTES_MAX;
        };
        let data = total.min(nasd_proto::DATA_BYTES_MAX as u64) as usize;
        const PER_REGION_BYTES: usize = 2 * CHUNK_BYTES as usize // widening
            + 2 + 32 * 2 * nasd_crypto::integrity::tree::LEVELS_MAX; // proof
        (data + regions * PER_REGION_BYTES + SMALL_REPLY_BYTES_MAX).min(nasd_proto::FRAME_BYTES_MAX)
    }

    /// Handles one request body and returns the reply. Never panics on bad input.
    pub fn handle(&self, body: Vec<u8>) -> ReplyBytes {
        if !self.metrics.meter_cpu.load(Ordering::Relaxed) {
            return self.handle_inner(body);
        }
        let cpu0 = crate::thread_cpu_ns();
        let r = self.handle_inner(body);
        let ns = crate::thread_cpu_ns().saturating_sub(cpu0);
        self.metrics.handler_cpu_ns.fetch_add(ns, Ordering::Relaxed);
        r
    }

    fn handle_inner(&self, body: Vec<u8>) -> ReplyBytes {
        self.metrics.requests.fetch_add(1, Ordering::Relaxed);
        let request_id = body
            .get(1..9)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .unwrap_or(0);
        let (h, data_at) = match RequestHeader::decode(&body) {
            Ok(x) => x,
            Err(e) => {
                self.metrics.refused.fetch_add(1, Ordering::Relaxed);
                return self.unauthenticated(
                    request_id,
                    Status::Malformed,
                    &format!("malformed request: {e}"),
                );
            }
        };
        let mut cost = Cost::default();
        let now = self.now_us();
        let authed = self.authenticate(&h, &body, &body[data_at..], now, &mut cost);
        let (status, audit_id, region) = match &authed {
            Ok(a) => (
                Status::Ok,
                a.cap.map(|c| c.audit_id).unwrap_or(0),
                first_region(&a.op),
            ),
            Err(r) => (r.0, cap_audit(&h), Region::default()),
        };
        let reply = match authed {
            Err(Refusal(s, d)) => {
                self.metrics.refused.fetch_add(1, Ordering::Relaxed);
                self.unauthenticated(h.request_id, s, &d)
            }
            Ok(mut a) => {
                let out = match a.refused.take() {
                    Some(r) => {
                        self.metrics.refused.fetch_add(1, Ordering::Relaxed);
                        Err(r)
                    }
                    None => self.execute(&h, &mut a, body, data_at, &mut cost),
                };
                let st = match &out {
                    Ok(_) => Status::Ok,
                    Err(r) => r.0,
                };
                let mut reply = self.reply(&h, &a, out, &mut cost);
                reply.authenticated = true;
                self.audit(now, audit_id, &h, region, st);
                self.metrics
                    .data_bytes_hashed
                    .fetch_add(cost.data_bytes, Ordering::Relaxed);
                return reply;
            }
        };
        self.audit(now, audit_id, &h, region, status);
        self.metrics
            .data_bytes_hashed
            .fetch_add(cost.data_bytes, Ordering::Relaxed);
        reply
    }

    fn audit(&self, now: u64, audit_id: u64, h: &RequestHeader, region: Region, status: Status) {
        self.audit.record(AuditRecord {
            time_us: now,
            audit_id,
            op: h.op.name(),
            partition: h.partition.0,
            object: h.object.0,
            offset: region.offset,
            len: region.len,
            status,
        });
    }

    fn unauthenticated(&self, request_id: u64, status: Status, detail: &str) -> ReplyBytes {
        let mut d = detail.as_bytes().to_vec();
        d.truncate(ERROR_DETAIL_BYTES_MAX);
        let head = ReplyHeader {
            request_id,
            status,
            protection: Protection::NONE,
            nonce: self.fresh_nonce(),
            args: d,
            digest: [0; 32],
        }
        .encode();
        ReplyBytes {
            head,
            data: vec![],
            authenticated: false,
        }
    }

    fn fresh_nonce(&self) -> Nonce {
        Nonce {
            time_us: self.now_us(),
            random: self.reply_nonces.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn reply(
        &self,
        h: &RequestHeader,
        a: &Authed,
        out: Result<(ReplyBody, Vec<u8>, Material), Refusal>,
        cost: &mut Cost,
    ) -> ReplyBytes {
        let suite = self.store.suite();
        let Some(key) = &a.key else {
            // NO_PROTECTION (or privacy-capability alone): nothing to protect the reply with.
            return match out {
                Ok((body, data, _)) => {
                    let v = ReplyHeader {
                        request_id: h.request_id,
                        status: Status::Ok,
                        protection: Protection::NONE,
                        nonce: self.fresh_nonce(),
                        args: body.encode(),
                        digest: [0; 32],
                    }
                    .encode();
                    ReplyBytes {
                        head: v,
                        data,
                        authenticated: false,
                    }
                }
                Err(Refusal(s, d)) => self.unauthenticated(h.request_id, s, &d),
            };
        };
        let mut trailer_bytes = 0;
        let (status, mut args, mut data, material) = match out {
            Ok((body, data, m)) => {
                trailer_bytes = body.unmacced_tail_bytes(h.protection);
                (Status::Ok, body.encode(), data, m)
            }
            Err(Refusal(s, d)) => {
                let mut d = d.into_bytes();
                d.truncate(ERROR_DETAIL_BYTES_MAX);
                (s, d, vec![], Material::None)
            }
        };
        let pk = (h.protection.privacy_args() || h.protection.privacy_data())
            .then(|| privacy_key(suite, key, &h.nonce));
        let mut mac_data: Option<Vec<u8>> = None;
        if let Some(pk) = &pk {
            if h.protection.privacy_args() {
                args = aead::seal(pk, Field::ReplyArgs.nonce(), b"", &args);
            }
            if h.protection.privacy_data() && !data.is_empty() {
                if matches!(material, Material::Data) {
                    mac_data = Some(data.clone());
                }
                aead::seal_in_place(pk, Field::ReplyData.nonce(), b"", &mut data);
            }
        }
        let header = ReplyHeader {
            request_id: h.request_id,
            status,
            protection: h.protection,
            nonce: self.fresh_nonce(),
            args,
            digest: [0; 32],
        };
        let mut v = header.encode();
        let mac_input = ReplyHeader::mac_input_without_trailer(&v, trailer_bytes)
            .expect("the trailer is inside the header just encoded");
        let mut mac = reply_mac(suite, key, &h.nonce, mac_input);
        match &material {
            Material::None => {}
            Material::Data => mac.update_data(mac_data.as_deref().unwrap_or(&data), cost),
            Material::Bytes(b) => mac.update(b),
        }
        let digest = mac.finalize(cost);
        let hlen = u32::from_le_bytes(v[9..13].try_into().unwrap()) as usize;
        v[13 + hlen - 32..13 + hlen].copy_from_slice(&digest);
        ReplyBytes {
            head: v,
            data,
            authenticated: false,
        }
    }
}

/// Who a request's nonce is booked to in the replay cache: what its digest proved it holds.
/// Principals share the cache fairly (`nasd_crypto::nonce`). Hint streams are owned by one
/// too (`crate::prefetch`), so no other holder can consume or replace them.
#[derive(Hash, Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Principal {
    Capability(CapabilityArgs),
    /// A key of the hierarchy: its type and the partition named.
    Key(u8, u16),
}

fn first_region(op: &Op) -> Region {
    checks::op_regions(op).first().copied().unwrap_or_default()
}

fn cap_audit(h: &RequestHeader) -> u64 {
    match &h.cap {
        CapField::Plain(c) => c.audit_id,
        _ => 0,
    }
}
