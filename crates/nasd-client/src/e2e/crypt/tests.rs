//! The encryption layer against a naive oracle (a plain `Vec<u8>`): random writes, reads and
//! growths through [`CryptIo`] over in-memory components, one object and erasure-coded, for
//! each construction; a reader opening the written state afresh sees the same bytes; parallel
//! writes sharing blocks and moving the end lose nothing; the stored bytes are ciphertext of
//! exactly the file's length; a changed stored byte is refused under RAND- and COMP-EINT.
//! Randomized with fixed seeds; a failure names its seed.

use super::*;
use crate::memio::{Fault, MemIo};
use crate::striped::{group_locks, Striped};

const BLOCK: u32 = 4096;

fn rng(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n.max(1)
    }
}

fn key() -> FileKey {
    FileKey::from_bytes([0x42; 32])
}

fn file_id() -> FileId {
    FileId([0x17; 16])
}

/// A new file of `scheme` over `lower`.
fn fresh(scheme: Eint, lower: Arc<dyn FileIo>) -> CryptIo {
    let f = CryptFile::create(
        "/t",
        file_id(),
        scheme,
        BLOCK,
        1,
        &key(),
        KeyFile::new(),
        vec![],
        Lineage::default(),
    )
    .unwrap();
    CryptIo {
        file: Arc::new(f),
        lower,
    }
}

/// The lower layer: one in-memory object, or `rs:2+1/4K` over three; and the objects.
fn lower(striped: bool) -> (Arc<dyn FileIo>, Vec<Arc<MemIo>>) {
    if !striped {
        let m = Arc::new(MemIo::new(0));
        return (m.clone(), vec![m]);
    }
    let mems: Vec<Arc<MemIo>> = (0..3).map(|i| Arc::new(MemIo::new(i))).collect();
    let parts = mems.iter().map(|m| m.clone() as Arc<dyn FileIo>).collect();
    let s = Striped::new("rs:2+1/4K".parse().unwrap(), parts, 0, 0)
        .unwrap()
        .with_locks(group_locks());
    (Arc::new(s), mems)
}

/// A reader of what `w` has written: its record and side data opened afresh over `lower`.
fn reopen(w: &CryptIo, lower: Arc<dyn FileIo>) -> Result<CryptIo, String> {
    let (record, side) = w.file.state(None);
    let keys = BTreeMap::from([(1, key())]);
    let f = CryptFile::open("/t", &record, &side, &keys, vec![])?;
    Ok(CryptIo {
        file: Arc::new(f),
        lower,
    })
}

const SCHEMES: [Eint; 3] = [Eint::Mt, Eint::Rand, Eint::Comp];

#[tokio::test]
async fn random_operations_match_a_plain_buffer_and_a_fresh_reader_agrees() {
    for seed in 1..=12u64 {
        for scheme in SCHEMES {
            for striped in [false, true] {
                let mut next = rng(seed);
                let (lo, _) = lower(striped);
                let io = fresh(scheme, lo.clone());
                let mut model: Vec<u8> = vec![];
                for op in 0..40 {
                    let ctx = format!("seed {seed}, {scheme:?}, striped {striped}, op {op}");
                    match next(10) {
                        0..=4 => {
                            let off = next(60_000);
                            let len = 1 + next(20_000) as usize;
                            // Text-like bytes (RAND/COMP keep no leaf for them) or random.
                            let data: Vec<u8> = if next(3) == 0 {
                                (0..len).map(|_| next(256) as u8).collect()
                            } else {
                                (0..len).map(|i| b"lorem ipsum "[i % 12]).collect()
                            };
                            io.write(off, &data).await.expect(&ctx);
                            let end = off as usize + len;
                            if model.len() < end {
                                model.resize(end, 0);
                            }
                            model[off as usize..end].copy_from_slice(&data);
                        }
                        5 => {
                            let size = model.len() as u64 + next(10_000);
                            io.set_size(size).await.expect(&ctx);
                            model.resize(size as usize, 0);
                        }
                        _ => {
                            let off = next(model.len() as u64 + 100);
                            let len = next(30_000);
                            let got = io.read(off, len).await.expect(&ctx);
                            let end = ((off + len) as usize).min(model.len());
                            let want = model.get(off as usize..end).unwrap_or(&[]);
                            assert!(got.data == want, "{ctx}: read {off}+{len}");
                            assert_eq!(got.size, model.len() as u64, "{ctx}");
                        }
                    }
                }
                let ctx = format!("seed {seed}, {scheme:?}, striped {striped}");
                assert_eq!(io.size().await.unwrap(), model.len() as u64, "{ctx}");
                let r = reopen(&io, lo.clone()).expect(&ctx);
                let got = r.read(0, u64::MAX).await.expect(&ctx);
                assert!(got.data == model, "{ctx}: a fresh reader");
                // Length-preserving: the layout holds exactly the file.
                assert_eq!(lo.size().await.unwrap(), model.len() as u64, "{ctx}");
            }
        }
    }
}

/// Writers in parallel, each its own range, the ranges sharing blocks (a read-modify-write
/// of each shared block's other bytes) and most of them moving the end: every byte lands,
/// over slow components so that the writes interleave.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_writes_sharing_blocks_and_moving_the_end_lose_nothing() {
    for scheme in SCHEMES {
        for striped in [false, true] {
            let (lo, mems) = lower(striped);
            for m in &mems {
                m.set_fault(Fault::SlowMs(2));
            }
            let io = Arc::new(fresh(scheme, lo.clone()));
            const PIECE: usize = 5000;
            const WRITERS: usize = 24;
            let mut order: Vec<usize> = (0..WRITERS).collect();
            let mut next = rng(7);
            for i in (1..order.len()).rev() {
                order.swap(i, next(i as u64 + 1) as usize);
            }
            let tasks: Vec<_> = order
                .into_iter()
                .map(|w| {
                    let io = io.clone();
                    tokio::spawn(async move {
                        let data: Vec<u8> = (0..PIECE).map(|i| (w * 7 + i % 13) as u8).collect();
                        io.write((w * PIECE) as u64, &data).await
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap().unwrap();
            }
            for m in &mems {
                m.set_fault(Fault::None);
            }
            let want: Vec<u8> = (0..WRITERS)
                .flat_map(|w| (0..PIECE).map(move |i| (w * 7 + i % 13) as u8))
                .collect();
            let ctx = format!("{scheme:?}, striped {striped}");
            let got = io.read(0, u64::MAX).await.expect(&ctx);
            assert!(got.data == want, "{ctx}");
            let r = reopen(&io, lo).expect(&ctx);
            assert!(
                r.read(0, u64::MAX).await.unwrap().data == want,
                "{ctx}: reader"
            );
        }
    }
}

#[tokio::test]
async fn the_stored_bytes_are_ciphertext_and_a_changed_byte_is_refused() {
    let text: Vec<u8> = (0..50_000).map(|i| b"plain words "[i % 12]).collect();
    for scheme in SCHEMES {
        let (lo, mems) = lower(false);
        let io = fresh(scheme, lo.clone());
        io.write(0, &text).await.unwrap();
        let stored = mems[0].contents();
        assert_eq!(stored.len(), text.len(), "{scheme:?}");
        assert!(
            !stored.windows(12).any(|w| w == b"plain words "),
            "{scheme:?}: plaintext stored"
        );
        if scheme == Eint::Mt {
            // MT-EINT's check is the components' pins (a drive's tree top), not here.
            continue;
        }
        let r = reopen(&io, lo.clone()).unwrap();
        assert!(r.read(0, u64::MAX).await.unwrap().data == text);
        let mut b = [stored[9000]];
        b[0] ^= 1;
        mems[0].write(9000, &b).await.unwrap();
        let r = reopen(&io, lo.clone()).unwrap();
        let e = r.read(8192, 4096).await.unwrap_err();
        assert!(e.to_string().contains("/t"), "{scheme:?}: {e}");
        // Other blocks still read.
        assert!(r.read(0, 8192).await.unwrap().data == text[..8192]);
        // An object its drive extended is refused too.
        mems[0].write(9000, &stored[9000..9001]).await.unwrap();
        mems[0].write(stored.len() as u64, &[0; 10]).await.unwrap();
        let r = reopen(&io, lo.clone()).unwrap();
        assert!(r.read(0, 100).await.is_err(), "{scheme:?}: extended");
    }
}
