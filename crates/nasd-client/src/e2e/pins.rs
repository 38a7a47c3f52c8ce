//! Pins: MT-EINT over nasd's own drive trees (seed 003; requirements B.3, "shortcut for
//! nasd"). Every component object of an encrypted MT file is a `tree` object whose drive
//! answers each read with `size || top` under its reply MAC and a proof of the bytes against
//! that top. The file's last writer pinned, at the manager, the size and top each component
//! must have ([`nasd_e2e::side::Pin`], bound into the trusted record's root), computed from
//! what it wrote ([`TreeTrack`]), never from what a drive said. So:
//!
//! - a **reader**'s component compares every reply's size and top with its pin: an older copy
//!   of the object (a restored data directory), another object's bytes, or a tree the drive
//!   made up all fail, though their MACs are good, and the layout reads around the component
//!   (or, for a one-object file, the read fails naming the file);
//! - a **writer**'s component keeps a [`TreeTrack`] of the object: writes that replace whole
//!   nodes are folded in at once; anything else first reads the chunks the track asks for,
//!   with proofs, while no other write to the object is in flight, and refuses a reply whose
//!   top is not the one the track expects. Reads in a writer's stack wait for its writes and
//!   are checked against the track's top the same way.

use nasd_crypto::integrity::track::{ChunkProof, Need, TreeTrack};
use nasd_crypto::integrity::CHUNK_BYTES;
use nasd_crypto::Digest;
use nasd_e2e::side::Pin;
use nasd_proto::Suite;
use std::sync::Mutex;

/// What a component checks its replies against, or keeps track of.
pub enum PinMode {
    /// A reader: every reply must show this size and top.
    Check(Pin),
    /// A writer: the track of what the object holds after the writes sent so far.
    Track(Mutex<TreeTrack>),
}

/// One component's pin (module docs).
pub struct ComponentPin {
    pub mode: PinMode,
    /// Writes hold it shared while they are in flight; a slow path and a checked read hold it
    /// alone, so the object is what the track says while they look.
    pub gate: tokio::sync::RwLock<()>,
    /// A writer could not learn what the object holds (it missed the writes and could not be
    /// rebuilt from the others then): the pin is unknown, and readers read around it.
    lost: std::sync::atomic::AtomicBool,
}

impl ComponentPin {
    pub fn check(pin: Pin) -> ComponentPin {
        ComponentPin {
            mode: PinMode::Check(pin),
            gate: Default::default(),
            lost: Default::default(),
        }
    }

    /// A writer's pin of a fresh, empty object.
    pub fn fresh(suite: Suite) -> ComponentPin {
        Self::track(TreeTrack::empty(suite))
    }

    /// A writer's pin of a copy of a committed object, known by its pin.
    pub fn copy_of(suite: Suite, pin: &Pin) -> ComponentPin {
        Self::track(TreeTrack::pinned(suite, pin.size, pin.top))
    }

    fn track(t: TreeTrack) -> ComponentPin {
        ComponentPin {
            mode: PinMode::Track(Mutex::new(t)),
            gate: Default::default(),
            lost: Default::default(),
        }
    }

    /// The pin the object has now (a writer's, for its commit).
    pub fn pin(&self) -> Pin {
        if self.lost.load(std::sync::atomic::Ordering::Acquire) {
            return Pin {
                known: false,
                size: 0,
                top: [0; 32],
            };
        }
        match &self.mode {
            PinMode::Check(p) => *p,
            PinMode::Track(t) => {
                let t = t.lock().expect("track lock");
                Pin {
                    known: true,
                    size: t.size(),
                    top: t.top(),
                }
            }
        }
    }

    /// Whether a reply showing `size` and `top` is the pinned object (the caller holds the
    /// gate alone for a writer's track).
    pub fn matches(&self, size: u64, top: &Digest) -> bool {
        let p = self.pin();
        p.known && p.size == size && nasd_crypto::ct_eq(&p.top, top)
    }
}

/// Chunks to read for a [`Need`], as `(offset, len)` regions of an object of `size` bytes.
pub fn need_regions(need: &Need, size: u64) -> Vec<(u64, u64)> {
    need.chunks
        .iter()
        .map(|&c| {
            let at = c * CHUNK_BYTES;
            (at, CHUNK_BYTES.min(size.saturating_sub(at)))
        })
        .collect()
}

/// Splits a multi-region read's data and proofs into the chunks a [`Need`] asked for.
pub fn chunk_proofs(
    need: &Need,
    size: u64,
    data: &[u8],
    proofs: &[Vec<Digest>],
) -> Option<Vec<ChunkProof>> {
    let regions = need_regions(need, size);
    if regions.len() != proofs.len() {
        return None;
    }
    let mut at = 0usize;
    let mut out = Vec::with_capacity(regions.len());
    for ((&c, (_, len)), proof) in need.chunks.iter().zip(regions).zip(proofs) {
        let b = data.get(at..at + len as usize)?;
        at += len as usize;
        out.push(ChunkProof {
            index: c,
            data: b.to_vec(),
            proof: proof.clone(),
        });
    }
    (at == data.len()).then_some(out)
}

/// A component that only keeps track: the content a layout rebuilds for a component that
/// missed the writes goes into a fresh [`TreeTrack`], never to a drive, so its writer can pin
/// what the manager's rebuild will put there.
pub struct TrackSink {
    pub track: Mutex<TreeTrack>,
}

impl TrackSink {
    pub fn new(suite: Suite) -> TrackSink {
        TrackSink {
            track: Mutex::new(TreeTrack::empty(suite)),
        }
    }
}

impl crate::layer::FileIo for TrackSink {
    fn read(&self, _offset: u64, _len: u64) -> crate::layer::IoFuture<'_, crate::layer::ReadOut> {
        Box::pin(async {
            Err(crate::layer::IoError::Usage(
                "a track sink is not read".into(),
            ))
        })
    }

    fn write<'a>(&'a self, offset: u64, data: &'a [u8]) -> crate::layer::IoFuture<'a, ()> {
        Box::pin(async move {
            let mut t = self.track.lock().expect("track lock");
            t.plan_write(offset, data.len() as u64).map_err(|need| {
                crate::layer::IoError::Usage(format!("a rebuild wrote out of order: {need:?}"))
            })?;
            t.apply_write(offset, data, &mut nasd_crypto::Cost::default());
            Ok(())
        })
    }

    fn size(&self) -> crate::layer::IoFuture<'_, u64> {
        Box::pin(async move { Ok(self.track.lock().expect("track lock").size()) })
    }

    fn set_size(&self, size: u64) -> crate::layer::IoFuture<'_, ()> {
        Box::pin(async move {
            let mut t = self.track.lock().expect("track lock");
            t.plan_set_size(size)
                .map_err(|need| crate::layer::IoError::Usage(format!("a rebuild cut: {need:?}")))?;
            t.apply_set_size(size, &mut nasd_crypto::Cost::default());
            Ok(())
        })
    }
}

impl ComponentPin {
    /// Takes the track a [`TrackSink`] built (a writer's component that missed its writes).
    pub fn replace_track(&self, sink: TrackSink) {
        if let PinMode::Track(t) = &self.mode {
            *t.lock().expect("track lock") = sink.track.into_inner().expect("track lock");
            self.lost.store(false, std::sync::atomic::Ordering::Release);
        }
    }

    /// Gives up on knowing what the object holds: it missed the writes and cannot be rebuilt
    /// now, so whatever a rebuild later puts there is not what this version pins. Its pin is
    /// committed unknown, and readers read around the component until a writer pins it again.
    pub fn forget(&self) {
        self.lost.store(true, std::sync::atomic::Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer's component that could not be pinned commits an unknown pin (readers read
    /// around it), until a rebuilt track pins it again.
    #[test]
    fn a_forgotten_pin_is_unknown_until_a_track_replaces_it() {
        let p = ComponentPin::fresh(Suite::Blake3);
        let empty = p.pin();
        assert!(empty.known);
        assert!(p.matches(empty.size, &empty.top));
        p.forget();
        assert!(!p.pin().known);
        assert!(!p.matches(empty.size, &empty.top));
        let sink = TrackSink::new(Suite::Blake3);
        p.replace_track(sink);
        assert_eq!(p.pin(), empty);
    }
}
