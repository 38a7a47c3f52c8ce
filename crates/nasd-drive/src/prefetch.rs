//! Informed prefetching (seed 002 §4.6, after TIP, Patterson 95): the drive side of the
//! `prefetch` extension.
//!
//! A client hints the reads it will make of one object, in order (`hint`), and later says how
//! many of them it has consumed (`consume`): "the client periodically notifies the drive of the
//! reads it has issued", because its own cache hides how fast it progresses. Each (partition,
//! object, principal) has one *stream* of hints; the principal is what the request's digest
//! proved it holds (its capability, or a key), so no other client can consume, replace or learn
//! about a stream, and a hint is accepted only under a capability that may read every hinted
//! region (the handler's checks of seed 002 §2.4 run on it as on a read).
//!
//! Fetcher threads walk each stream's hints in order and read the blocks they name into the
//! [`BlockCache`], pinned, within budgets: at most [`PrefetchOptions::ahead_bytes`] of a
//! stream's blocks fetched and not yet consumed (in flight included), never more than the
//! cache can pin, and at most [`PrefetchOptions::fetchers`] block reads in flight drive-wide.
//! A block several consecutive hints share is fetched once. Blocks are read and checked
//! against their CRC exactly as a read would, and a read then finds them in the cache; the
//! reply is built and MACed the same way either way. Consumed blocks are unpinned (dropped);
//! replacing a stream's hints drops its blocks. Streams are bounded ([`STREAMS_MAX`]; the
//! least recently used goes), and a stream dies with its capability's expiry or after
//! [`STREAM_IDLE_MS`] without a hint or consume.

use crate::cache::BlockCache;
use crate::handler::Principal;
use crate::store::Store;
use crate::DriveError;
use nasd_crypto::integrity::BLOCK_BYTES;
use nasd_proto::ext::StreamCounters;
use nasd_proto::{ObjectId, PartitionId, Region};
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default bytes one stream may hold fetched ahead and not yet consumed.
pub const AHEAD_BYTES_DEFAULT: u64 = 4 << 20;
/// Default fetcher threads (block reads in flight for prefetching, drive-wide).
pub const FETCHERS_DEFAULT: usize = 4;
/// Most fetcher threads.
pub const FETCHERS_MAX: usize = 32;
/// Most hint streams at once, all clients together.
pub const STREAMS_MAX: usize = 64;
/// Most hinted reads one stream holds unconsumed (16 full hints).
pub const STREAM_HINTS_MAX: usize = 16 * nasd_proto::ext::HINT_REGIONS_MAX;
/// A stream without a hint or consume for this long is dropped with its blocks.
pub const STREAM_IDLE_MS: u64 = 60_000;
/// How long an idle fetcher sleeps before it looks for expired streams again.
const FETCHER_WAIT_MS: u64 = 200;

/// The prefetcher's budgets.
#[derive(Clone, Copy, Debug)]
pub struct PrefetchOptions {
    pub ahead_bytes: u64,
    pub fetchers: usize,
}

impl Default for PrefetchOptions {
    fn default() -> Self {
        PrefetchOptions {
            ahead_bytes: AHEAD_BYTES_DEFAULT,
            fetchers: FETCHERS_DEFAULT,
        }
    }
}

/// Who owns a stream: the object and the principal that hinted it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct StreamKey {
    pub p: PartitionId,
    pub o: ObjectId,
    pub principal: Principal,
}

struct Stream {
    /// Unique for the drive's life: a fetch names the stream it was made for, so one landing
    /// after its stream died does not touch a new stream under the same key.
    id: u64,
    /// Unconsumed hinted reads; `hints[k]` has index `base + k`.
    hints: VecDeque<Region>,
    base: u64,
    next_index: u64,
    /// The object's size when last hinted: no block at or past it is fetched.
    size: u64,
    /// The next block to consider: hint index and block number within it (None: its first).
    cursor: (u64, Option<u64>),
    /// Pinned blocks as their fetches landed: the last hint index that needs each, and its
    /// block.
    pinned: VecDeque<(u64, u64)>,
    inflight: usize,
    /// Bumped when hints are replaced, so fetches of the old hints are not pinned.
    generation: u64,
    expiry_ms: u64,
    last_used: Instant,
    prefetched: u64,
    dropped: u64,
    hits: Arc<AtomicU64>,
}

impl Stream {
    fn new(id: u64, size: u64, expiry_ms: u64) -> Stream {
        Stream {
            id,
            hints: VecDeque::new(),
            base: 0,
            next_index: 0,
            size,
            cursor: (0, None),
            pinned: VecDeque::new(),
            inflight: 0,
            generation: 0,
            expiry_ms,
            last_used: Instant::now(),
            prefetched: 0,
            dropped: 0,
            hits: Arc::new(AtomicU64::new(0)),
        }
    }

    fn held_bytes(&self) -> u64 {
        (self.pinned.len() + self.inflight) as u64 * BLOCK_BYTES
    }

    /// Blocks of hint `index` inside the object, as a range of block numbers.
    fn blocks_of(&self, index: u64) -> Option<(u64, u64)> {
        let r = self.hints.get(index.checked_sub(self.base)? as usize)?;
        let end = r.end().unwrap_or(u64::MAX).min(self.size);
        if r.len == 0 || r.offset >= end {
            return Some((0, 0));
        }
        Some((r.offset / BLOCK_BYTES, end.div_ceil(BLOCK_BYTES)))
    }

    /// The next block to fetch and the last consecutive hint index that needs it, advancing
    /// the cursor past every hint that lies in that block.
    fn next_block(&mut self) -> Option<(u64, u64)> {
        loop {
            let (i, at) = self.cursor;
            let (b0, b1) = self.blocks_of(i)?;
            let b = at.unwrap_or(b0);
            if b >= b1 {
                self.cursor = (i + 1, None);
                continue;
            }
            self.cursor = (i, Some(b + 1));
            let mut last = i;
            // Later hints that start in the same block share this fetch.
            while let Some((n0, n1)) = self.blocks_of(last + 1) {
                if n0 != b || n1 <= n0 {
                    break;
                }
                last += 1;
                self.cursor = (last, Some(b + 1));
            }
            return Some((b, last));
        }
    }

    fn counters(&self) -> StreamCounters {
        StreamCounters {
            prefetched_blocks: self.prefetched,
            cache_hit_blocks: self.hits.load(Ordering::Relaxed),
            dropped_blocks: self.dropped,
        }
    }
}

struct Job {
    key: StreamKey,
    stream: u64,
    generation: u64,
    block: u64,
    last_index: u64,
    hits: Arc<AtomicU64>,
}

#[derive(Default)]
struct State {
    streams: HashMap<StreamKey, Stream>,
    /// Fetches under way, all streams: each may pin a block when it lands.
    inflight: u64,
    /// Where the next [`pick`] starts looking, so streams take turns.
    turn: usize,
    /// The id the next new stream gets.
    next_stream: u64,
}

struct Shared {
    state: Mutex<State>,
    work: Condvar,
    stop: AtomicBool,
    store: Arc<Store>,
    cache: Arc<BlockCache>,
    opts: PrefetchOptions,
    now_ms: Box<dyn Fn() -> u64 + Send + Sync>,
}

/// The prefetcher: hint streams and the fetcher threads that serve them.
pub struct Prefetcher {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Prefetcher {
    /// Starts `opts.fetchers` fetcher threads over `store` and `cache`.
    pub fn start(store: Arc<Store>, cache: Arc<BlockCache>, opts: PrefetchOptions) -> Prefetcher {
        assert!((1..=FETCHERS_MAX).contains(&opts.fetchers));
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            stop: AtomicBool::new(false),
            store,
            cache,
            opts,
            now_ms: Box::new(|| crate::now_us() / 1000),
        });
        let threads = (0..opts.fetchers)
            .map(|i| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(format!("nasd-prefetch-{i}"))
                    .spawn(move || fetcher(&s))
                    .expect("spawning a prefetch thread")
            })
            .collect();
        Prefetcher { shared, threads }
    }

    /// Adds `regions` to the stream of `key` (after dropping its hints and blocks when
    /// `replace`); returns the index of the first region and the next index.
    pub(crate) fn hint(
        &self,
        key: StreamKey,
        expiry_ms: u64,
        replace: bool,
        regions: &[Region],
    ) -> Result<(u64, u64), DriveError> {
        let size = self.shared.store.object(key.p, key.o)?.attrs.logical_size;
        let mut st = self.shared.state.lock();
        self.sweep(&mut st);
        if !st.streams.contains_key(&key) && st.streams.len() >= STREAMS_MAX {
            // The least recently used stream makes room: one client cannot hold them all.
            let oldest = st
                .streams
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                let s = st.streams.remove(&k).expect("just found");
                self.release(s.pinned);
            }
        }
        let id = st.next_stream;
        let s = st
            .streams
            .entry(key)
            .or_insert_with(|| Stream::new(id, size, expiry_ms));
        if s.id == id {
            st.next_stream += 1;
        }
        let s = st.streams.get_mut(&key).expect("just made");
        s.size = size;
        s.expiry_ms = expiry_ms;
        s.last_used = Instant::now();
        if replace {
            let pinned = std::mem::take(&mut s.pinned);
            s.dropped += pinned.len() as u64;
            s.hints.clear();
            s.base = s.next_index;
            s.cursor = (s.next_index, None);
            s.generation += 1;
            self.release(pinned);
        }
        if s.hints.len() + regions.len() > STREAM_HINTS_MAX {
            return Err(DriveError::Invalid(format!(
                "a hint stream holds at most {STREAM_HINTS_MAX} unconsumed reads; consume some first"
            )));
        }
        let first = s.next_index;
        s.hints.extend(regions.iter().copied());
        s.next_index += regions.len() as u64;
        drop(st);
        self.shared.work.notify_all();
        Ok((first, first + regions.len() as u64))
    }

    /// The stream of `key` has consumed every hinted read below `consumed`: its blocks for them
    /// are dropped and fetching moves on. Returns the stream's counters (zeros if it has none).
    pub(crate) fn consume(&self, key: StreamKey, consumed: u64) -> StreamCounters {
        let mut st = self.shared.state.lock();
        self.sweep(&mut st);
        let Some(s) = st.streams.get_mut(&key) else {
            return StreamCounters::default();
        };
        s.last_used = Instant::now();
        let consumed = consumed.min(s.next_index);
        while s.base < consumed {
            s.hints.pop_front();
            s.base += 1;
        }
        // Fetches land out of order, so the consumed blocks are anywhere in the list.
        let (done, keep): (VecDeque<_>, VecDeque<_>) =
            s.pinned.drain(..).partition(|(i, _)| *i < consumed);
        s.pinned = keep;
        if s.cursor.0 < consumed {
            s.cursor = (consumed, None);
        }
        let counters = s.counters();
        self.release(done);
        drop(st);
        self.shared.work.notify_all();
        counters
    }

    /// Streams live now (tests, metrics).
    pub fn streams(&self) -> usize {
        self.shared.state.lock().streams.len()
    }

    fn release(&self, pinned: VecDeque<(u64, u64)>) {
        for (_, phys) in pinned {
            self.shared.cache.unpin(phys);
        }
    }

    /// Drops expired and idle streams with their blocks.
    fn sweep(&self, st: &mut State) {
        sweep(&self.shared, st);
    }
}

fn sweep(sh: &Shared, st: &mut State) {
    let now_ms = (sh.now_ms)();
    let idle = Duration::from_millis(STREAM_IDLE_MS);
    let dead: Vec<StreamKey> = st
        .streams
        .iter()
        .filter(|(_, s)| now_ms >= s.expiry_ms || s.last_used.elapsed() > idle)
        .map(|(k, _)| *k)
        .collect();
    for k in dead {
        let s = st.streams.remove(&k).expect("listed");
        for (_, phys) in s.pinned {
            sh.cache.unpin(phys);
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.work.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for Prefetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetcher")
            .field("opts", &self.shared.opts)
            .field("streams", &self.streams())
            .finish()
    }
}

/// The next job: a block of the next stream in turn that has one to fetch inside its
/// budgets (streams take turns, so one client's long hint list cannot starve another's).
/// Marks it in flight.
fn pick(sh: &Shared, st: &mut State) -> Option<Job> {
    if !sh.cache.has_room(st.inflight) {
        return None;
    }
    let keys: Vec<StreamKey> = st.streams.keys().copied().collect();
    let n = keys.len();
    st.turn = st.turn.wrapping_add(1);
    for k in 0..n {
        let key = &keys[st.turn.wrapping_add(k) % n];
        let s = st.streams.get_mut(key).expect("listed");
        if s.held_bytes() + BLOCK_BYTES > sh.opts.ahead_bytes {
            continue;
        }
        if let Some((block, last_index)) = s.next_block() {
            let job = Job {
                key: *key,
                stream: s.id,
                generation: s.generation,
                block,
                last_index,
                hits: s.hits.clone(),
            };
            s.inflight += 1;
            st.inflight += 1;
            return Some(job);
        }
    }
    None
}

fn fetcher(sh: &Shared) {
    loop {
        let job = {
            let mut st = sh.state.lock();
            loop {
                if sh.stop.load(Ordering::Relaxed) {
                    return;
                }
                if let Some(j) = pick(sh, &mut st) {
                    break j;
                }
                if sh
                    .work
                    .wait_for(&mut st, Duration::from_millis(FETCHER_WAIT_MS))
                    .timed_out()
                {
                    sweep(sh, &mut st);
                }
            }
        };
        let fetched = fetch(sh, &job);
        let mut st = sh.state.lock();
        st.inflight -= 1;
        let s = match st.streams.get_mut(&job.key) {
            Some(s) if s.id == job.stream => s,
            _ => {
                if let Ok(Some((phys, true))) = fetched {
                    sh.cache.unpin(phys);
                }
                continue;
            }
        };
        s.inflight -= 1;
        let wanted = s.generation == job.generation && job.last_index >= s.base;
        match fetched {
            Ok(Some((phys, pinned))) if wanted && pinned => {
                s.prefetched += 1;
                s.pinned.push_back((job.last_index, phys));
            }
            Ok(Some((phys, true))) => {
                // Consumed or replaced while it was read: let it go at once.
                sh.cache.unpin(phys);
                s.dropped += 1;
            }
            Ok(Some((_, false))) => s.dropped += 1,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(partition = %job.key.p, object = %job.key.o, block = job.block, "prefetch read failed: {e}");
                s.dropped += 1;
            }
        }
        drop(st);
        sh.work.notify_all();
    }
}

/// Reads one hinted block into the cache, pinned for the job's stream: `Some((phys, pinned))`,
/// or `None` for a hole or a block past the object's end (nothing to read).
fn fetch(sh: &Shared, job: &Job) -> Result<Option<(u64, bool)>, DriveError> {
    // The generation is taken before the snapshot the block map comes from (see `cache`).
    let generation = sh.cache.generation();
    let _reading = sh.store.reader();
    let Some(e) = sh.store.block_entry(job.key.p, job.key.o, job.block)? else {
        return Ok(None);
    };
    if sh.cache.pin_if_cached(e.phys, e.crc, job.hits.clone()) {
        return Ok(Some((e.phys, true)));
    }
    let data = sh.store.load_checked(&e)?;
    let pinned = sh.cache.insert(
        generation,
        e.phys,
        e.crc,
        data.into(),
        Some(job.hits.clone()),
    );
    Ok(Some((e.phys, pinned)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(hints: &[(u64, u64)], size: u64) -> Stream {
        let mut s = Stream::new(0, size, u64::MAX);
        s.hints = hints.iter().map(|&(o, l)| Region::new(o, l)).collect();
        s.next_index = hints.len() as u64;
        s
    }

    #[test]
    fn the_cursor_walks_blocks_in_hint_order_and_fetches_a_shared_block_once() {
        const B: u64 = BLOCK_BYTES;
        // two 4 KiB reads in block 0, a read across blocks 3-4, an empty read, one past the end
        let mut s = stream(
            &[
                (0, 4096),
                (4096, 4096),
                (3 * B + 10, B),
                (5, 0),
                (100 * B, 10),
            ],
            10 * B,
        );
        let mut got = vec![];
        while let Some(x) = s.next_block() {
            got.push(x);
        }
        assert_eq!(got, vec![(0, 1), (3, 2), (4, 2)]);
    }

    #[test]
    fn scattered_reads_are_fetched_each_in_order() {
        const B: u64 = BLOCK_BYTES;
        let mut s = stream(
            &[(7 * B, 1024), (2 * B, 1024), (7 * B + 2048, 1024)],
            10 * B,
        );
        let mut got = vec![];
        while let Some(x) = s.next_block() {
            got.push(x);
        }
        // block 7 comes back for hint 2: not consecutive, so fetched (or found pinned) again
        assert_eq!(got, vec![(7, 0), (2, 1), (7, 2)]);
    }
}
