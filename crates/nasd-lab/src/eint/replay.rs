//! Replays of a synthetic trace (Fig 10) under one configuration: the population written once
//! (untimed, unmetered), then the operations replayed from that snapshot as often as asked, every
//! file reopened from its trusted record (cold caches), each block operation timed and metered.
//! A write that covers part of a block reads it first (read-modify-write, counted as a read);
//! an append to a file with a short last block rewrites that block longer. Every read is checked
//! against the bytes the trace last wrote there (untimed).

use std::time::Instant;

use nasd_e2e::{EintFile, FileId, FileKey, MemStore, TrustedRecord};

use super::bench::{Config, Meter, Storage, KEY_VERSION};
use super::content::{mix, Pool};
use super::trace::{Op, Trace};
use crate::error::LabError;

/// One replay of a trace's operations (Fig 10).
#[derive(Debug, Clone, PartialEq)]
pub struct TracePass {
    pub read: Meter,
    pub write: Meter,
    /// Reads made only to rewrite part of a block (read-modify-write), inside `read`.
    pub rmw_reads: u64,
    pub storage: Storage,
    /// Whole blocks at the end, and those `IsRand` finds random-looking.
    pub whole_blocks: u64,
    pub random_whole_blocks: u64,
}

/// Replays of one configuration: everything of the first (the same in every replay), and the
/// seconds of each (the sum of its operations' times).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRun {
    pub read: Meter,
    pub write: Meter,
    pub rmw_reads: u64,
    pub seconds: Vec<f64>,
    pub storage: Storage,
    pub whole_blocks: u64,
    pub random_whole_blocks: u64,
}

impl TraceRun {
    pub fn from_passes(passes: &[TracePass]) -> TraceRun {
        let p = passes.first().expect("at least one pass");
        TraceRun {
            read: p.read,
            write: p.write,
            rmw_reads: p.rmw_reads,
            seconds: passes
                .iter()
                .map(|p| p.read.seconds + p.write.seconds)
                .collect(),
            storage: p.storage,
            whole_blocks: p.whole_blocks,
            random_whole_blocks: p.random_whole_blocks,
        }
    }
}

/// One file of a replay: the scheme's state, its store, and what each block should hold.
struct Replayed {
    file: EintFile,
    store: MemStore,
    size: u64,
    /// Per block: the content key of its current version, and how many times it was written.
    keys: Vec<(u64, u64)>,
}

/// One populated file: what a replay reopens it from.
struct Snapshot {
    record: TrustedRecord,
    store: MemStore,
    size: u64,
    keys: Vec<(u64, u64)>,
}

/// A trace's population written under one configuration, ready to be replayed from.
pub struct Prepared<'a> {
    cfg: Config,
    key: FileKey,
    trace: &'a Trace,
    pool: &'a Pool,
    files: Vec<Snapshot>,
}

/// Writes `trace`'s population (untimed, unmetered): what every replay starts from.
pub fn prepare<'a>(
    cfg: Config,
    key: &FileKey,
    trace: &'a Trace,
    pool: &'a Pool,
) -> Result<Prepared<'a>, LabError> {
    let mut r = Replay {
        cfg,
        trace,
        pool,
        files: Vec::with_capacity(trace.files.len()),
        read: Meter::default(),
        write: Meter::default(),
        rmw_reads: 0,
    };
    for (i, tf) in trace.files.iter().enumerate() {
        let file = EintFile::create(
            FileId::from_u128(i as u128),
            cfg.scheme,
            cfg.block_bytes,
            KEY_VERSION,
            key,
            cfg.cache_bytes,
        )
        .map_err(cfg.eint_err("create", i, 0))?;
        r.files.push(Replayed {
            file,
            store: MemStore::new(),
            size: 0,
            keys: Vec::new(),
        });
        r.grow(i, tf.initial_bytes, false)?;
    }
    Ok(Prepared {
        cfg,
        key: key.clone(),
        trace,
        pool,
        files: r
            .files
            .into_iter()
            .map(|f| Snapshot {
                record: *f.file.record(),
                store: f.store,
                size: f.size,
                keys: f.keys,
            })
            .collect(),
    })
}

impl Prepared<'_> {
    /// Replays the trace's operations from the population, every file opened anew from its
    /// trusted record (cold caches), each block operation timed and metered.
    pub fn replay(&self) -> Result<TracePass, LabError> {
        let cfg = self.cfg;
        let mut files = Vec::with_capacity(self.files.len());
        for (i, snap) in self.files.iter().enumerate() {
            let id = FileId::from_u128(i as u128);
            let mut file = EintFile::open(id, snap.record, cfg.cache_bytes)
                .map_err(cfg.eint_err("open", i, 0))?;
            file.add_key(KEY_VERSION, &self.key);
            files.push(Replayed {
                file,
                store: snap.store.clone(),
                size: snap.size,
                keys: snap.keys.clone(),
            });
        }
        let mut r = Replay {
            cfg,
            trace: self.trace,
            pool: self.pool,
            files,
            read: Meter::default(),
            write: Meter::default(),
            rmw_reads: 0,
        };
        for op in &self.trace.ops {
            r.apply(op)?;
        }
        r.finish()
    }
}

/// The replay of one trace under one configuration.
struct Replay<'a> {
    cfg: Config,
    trace: &'a Trace,
    pool: &'a Pool,
    files: Vec<Replayed>,
    read: Meter,
    write: Meter,
    rmw_reads: u64,
}

impl Replay<'_> {
    fn b(&self) -> u64 {
        u64::from(self.cfg.block_bytes)
    }

    fn block_len(&self, file: usize, index: u64) -> usize {
        (self.files[file].size - index * self.b()).min(self.b()) as usize
    }

    fn apply(&mut self, op: &Op) -> Result<(), LabError> {
        match *op {
            Op::Read { file, offset, len } => {
                for i in offset / self.b()..(offset + len).div_ceil(self.b()) {
                    self.read_block(file, i)?;
                }
            }
            Op::Write { file, offset, len } => {
                for i in offset / self.b()..(offset + len).div_ceil(self.b()) {
                    let start = i * self.b();
                    let end = start + self.block_len(file, i) as u64;
                    if offset > start || offset + len < end {
                        self.read_block(file, i)?;
                        self.rmw_reads += 1;
                    }
                    self.write_block(file, i, true)?;
                }
            }
            Op::Append { file, len } => {
                let size = self.files[file].size;
                self.grow(file, size + len, true)?;
            }
        }
        Ok(())
    }

    /// Extends `file` to `new_size` bytes: rewrites a short last block longer (after reading it,
    /// when `metered`), then appends whole blocks and a tail.
    fn grow(&mut self, file: usize, new_size: u64, metered: bool) -> Result<(), LabError> {
        let b = self.b();
        let old = self.files[file].size;
        let first = old / b;
        if old % b != 0 && metered {
            self.read_block(file, first)?;
            self.rmw_reads += 1;
        }
        self.files[file].size = new_size;
        for i in first..new_size.div_ceil(b) {
            self.write_block(file, i, metered)?;
        }
        Ok(())
    }

    /// Writes a new version of block `index` (its content kind from the trace, its bytes from
    /// the pool), timed and metered when `metered`.
    fn write_block(&mut self, file: usize, index: u64, metered: bool) -> Result<(), LabError> {
        let len = self.block_len(file, index);
        let kind = self.trace.files[file].kind_at(index * self.b());
        let f = &mut self.files[file];
        if index as usize == f.keys.len() {
            f.keys.push((0, 0));
        }
        let (_, version) = f.keys[index as usize];
        let content_key = mix(mix(mix(file as u64) ^ index) ^ version);
        f.keys[index as usize] = (content_key, version + 1);
        let data = self.pool.window(kind, content_key, len);
        let t = Instant::now();
        let m = f
            .file
            .write_block(&mut f.store, index, data)
            .map_err(self.cfg.eint_err("write", file, index))?;
        if metered {
            self.write.seconds += t.elapsed().as_secs_f64();
            self.write.add_write(&m, &f.store);
        }
        Ok(())
    }

    /// Reads block `index`, timed and metered, and checks its bytes (untimed).
    fn read_block(&mut self, file: usize, index: u64) -> Result<(), LabError> {
        let len = self.block_len(file, index);
        let kind = self.trace.files[file].kind_at(index * self.b());
        let f = &mut self.files[file];
        let t = Instant::now();
        let (p, m) = f
            .file
            .read_block(&f.store, index)
            .map_err(self.cfg.eint_err("read", file, index))?;
        self.read.seconds += t.elapsed().as_secs_f64();
        self.read.add_read(&m);
        let want = self.pool.window(kind, f.keys[index as usize].0, len);
        if p != want {
            return Err(self.cfg.mismatch(file, index));
        }
        Ok(())
    }

    /// The meters, the storage at the end, and the random-looking share of the final blocks.
    fn finish(self) -> Result<TracePass, LabError> {
        let mut storage = Storage::default();
        let test = nasd_e2e::entropy::EntropyTest::new(self.cfg.block_bytes);
        let (mut whole, mut random) = (0u64, 0u64);
        for (i, f) in self.files.iter().enumerate() {
            storage
                .add(&f.file, &f.store)
                .map_err(self.cfg.eint_err("storage", i, 0))?;
            for (b, (key, _)) in f.keys.iter().enumerate() {
                let len = (f.size - b as u64 * self.b()).min(self.b()) as usize;
                if len == self.cfg.block_bytes as usize {
                    let kind = self.trace.files[i].kind_at(b as u64 * self.b());
                    whole += 1;
                    random += u64::from(test.is_random_looking(self.pool.window(kind, *key, len)));
                }
            }
        }
        Ok(TracePass {
            read: self.read,
            write: self.write,
            rmw_reads: self.rmw_reads,
            storage,
            whole_blocks: whole,
            random_whole_blocks: random,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::bench::file_key;
    use super::super::trace::{generate, Sizing, SHAPES};
    use super::*;
    use nasd_e2e::Scheme;

    fn cfg(scheme: Scheme, cache_bytes: usize) -> Config {
        Config {
            scheme,
            block_bytes: 4096,
            cache_bytes,
        }
    }

    fn untimed(m: Meter) -> Meter {
        Meter { seconds: 0.0, ..m }
    }

    #[test]
    fn traces_replay_identically_and_cost_mt_the_most_at_zero_share() {
        let sizing = Sizing {
            files: 8,
            file_bytes_max: 256 << 10,
            ops: 60,
        };
        let pool = Pool::new(3);
        let key = file_key(3);
        let t = generate(&SHAPES[1], 0, &sizing, 3);
        let replay = |s: Scheme, t| {
            let p = prepare(cfg(s, 4096), &key, t, &pool).unwrap();
            let passes = [p.replay().unwrap(), p.replay().unwrap()];
            assert_eq!(untimed(passes[0].read), untimed(passes[1].read));
            assert_eq!(untimed(passes[0].write), untimed(passes[1].write));
            assert_eq!(passes[0].storage, passes[1].storage);
            TraceRun::from_passes(&passes)
        };
        let mt = replay(Scheme::Mt, &t);
        assert_eq!(mt.seconds.len(), 2);
        assert!(mt.read.ops > 0 && mt.write.ops > 0);
        let rand = replay(Scheme::Rand, &t);
        // The same writes leave the same counter intervals in every scheme.
        assert_eq!(mt.write.counter_bytes, rand.write.counter_bytes);
        assert!(mt.write.counter_bytes > 0 && mt.write.counter_bytes < mt.write.integrity_bytes());
        assert_eq!(mt.random_whole_blocks, 0);
        assert_eq!(rand.storage.blocks, mt.storage.blocks);
        assert!(rand.storage.untrusted_bytes * 2 < mt.storage.untrusted_bytes);
        assert!(rand.write.integrity_bytes() < mt.write.integrity_bytes());
        let all = generate(&SHAPES[1], 100, &sizing, 3);
        let mt = replay(Scheme::Mt, &all);
        let rand = replay(Scheme::Rand, &all);
        assert_eq!(mt.random_whole_blocks, mt.whole_blocks);
        assert_eq!(rand.storage.untrusted_bytes, mt.storage.untrusted_bytes);
        assert_eq!(rand.read.integrity_bytes(), mt.read.integrity_bytes());
    }
}
