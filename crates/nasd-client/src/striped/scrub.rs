//! Scrub: every unit of every current component read back, checked against its drive's
//! integrity tree (the read verifies it) and against the code, and — on request — rewritten
//! where it is wrong.
//!
//! A scrub walks a file in steps of at most [`SCRUB_STEP_BYTES`] of each component, one read
//! per component per step, all components at once. A component whose reply fails verification
//! is read again unit by unit to find which units are damaged. Then each parity group is
//! checked: with every unit at hand the code must hold (seed 004 §3's detection); a group
//! that does not is located — raid6x by its own corrector (seed 004 §3.2, up to two bad units
//! per byte), `rs` by leaving out one unit at a time, which names the bad unit when exactly
//! one choice makes the group consistent — and otherwise reported unrecoverable, never
//! guessed. Mirrors compare their copies chunk by chunk; a strict majority wins. Units a
//! drive refused or the code located are rewritten in place from the others (`repair`).
//!
//! Stale components are not scrubbed here: they are rebuilt onto fresh objects by the
//! striping manager, which also owns the rate limit of the background scrub.

use super::{refused, Codec, Striped};
use crate::layer::{IoError, Span};
use crate::ClientError;
use nasd_ec::{Code, CorrectError, Window};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

/// Object bytes of each component one scrub step reads (a multiple of every group's span on
/// a component: two units of at most 1 MiB).
pub const SCRUB_STEP_BYTES: u64 = 4 << 20;
/// Mirror copies are compared, and narrowed after a failed read, in chunks of this many bytes.
pub const MIRROR_CHUNK_BYTES: u64 = 64 << 10;
/// Problems a tally keeps in words (the counts go on).
pub const SCRUB_PROBLEMS_MAX: usize = 8;

const _: () = assert!(SCRUB_STEP_BYTES.is_multiple_of(2 * nasd_ec::layout::UNIT_BYTES_MAX as u64));
const _: () = assert!(SCRUB_STEP_BYTES.is_multiple_of(MIRROR_CHUNK_BYTES));

/// What a scrub found and did, summed over its steps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubTally {
    /// Bytes read back from the drives and verified.
    pub bytes_checked: u64,
    /// Parity groups (stripes for raid0, chunks for mirror) checked.
    pub groups: u64,
    /// Units found damaged: refused by their drive's integrity check or located by the code.
    pub damaged: u64,
    /// Damaged units rewritten with the right bytes.
    pub repaired: u64,
    /// Groups with more damage than the code corrects, or damage it cannot locate.
    pub unrecoverable: u64,
    /// Groups not wholly checked because a component did not answer.
    pub unreachable: u64,
    /// The first problems, in words.
    pub problems: Vec<String>,
}

impl ScrubTally {
    fn note(&mut self, p: String) {
        if self.problems.len() < SCRUB_PROBLEMS_MAX {
            self.problems.push(p);
        }
    }

    /// Whether the scrub found the file whole (or made it so).
    pub fn clean(&self) -> bool {
        self.unrecoverable == 0 && self.unreachable == 0 && self.damaged == self.repaired
    }
}

/// One component's bytes in a step: the span read (zeros past the object's end), which of
/// its units (index within the step) failed verification, and whether it answered at all.
struct Read {
    bytes: Vec<u8>,
    /// Bytes the component holds in the span (the rest of `bytes` is zeros).
    len: u64,
    bad: BTreeSet<u64>,
    down: bool,
}

/// Whether a failed read means the bytes are damaged (the drive answered, the proof failed or
/// the drive reported a media error), not that the drive is away.
fn damaged(e: &IoError) -> bool {
    matches!(
        e,
        IoError::Drive {
            error: ClientError::Integrity { .. } | ClientError::MalformedReply { .. },
            ..
        }
    ) || matches!(e.status(), Some(nasd_proto::Status::IoError))
}

impl Striped {
    /// Object bytes a step covers on each component.
    fn step_span(&self) -> u64 {
        SCRUB_STEP_BYTES
    }

    /// How many steps a scrub of the whole file takes.
    pub fn scrub_steps(&self) -> u64 {
        let size = self.size.load(Ordering::Acquire);
        let longest = (0..self.parts.len())
            .map(|c| self.geo.component_len(c, size))
            .max()
            .unwrap_or(0);
        longest.div_ceil(self.step_span())
    }

    /// Scrubs step `step` (see the module comment) into `t`; with `repair`, rewrites what it
    /// finds damaged where the code covers it. An error means the step could not run at all
    /// (a refused grant); damage and absent drives are counted, not returned.
    ///
    /// Background work, so it waits for slow drives rather than read around them at the
    /// read deadline: a drive that is only slow is neither damaged nor down.
    pub async fn scrub_step(
        &self,
        step: u64,
        repair: bool,
        t: &mut ScrubTally,
    ) -> Result<(), IoError> {
        super::PATIENT
            .scope(true, self.scrub_step_now(step, repair, t))
            .await
    }

    async fn scrub_step_now(
        &self,
        step: u64,
        repair: bool,
        t: &mut ScrubTally,
    ) -> Result<(), IoError> {
        let span = self.step_span();
        let base = step * span;
        let grain = self.geo.unit_bytes().map_or(MIRROR_CHUNK_BYTES, u64::from);
        let size = self.size.load(Ordering::Acquire);
        let reads = (0..self.parts.len()).map(|c| self.scrub_read(c, base, span, grain, size));
        let mut got = Vec::with_capacity(self.parts.len());
        for r in futures_util::future::join_all(reads).await {
            let r = r?;
            if !r.down {
                t.bytes_checked += r.len.saturating_sub(r.bad.len() as u64 * grain);
            }
            got.push(r);
        }
        match (&self.codec, self.geo.code()) {
            (Some(codec), _) => self.scrub_groups(codec, base, &mut got, repair, t).await,
            (None, Code::Mirror { .. }) => self.scrub_copies(base, &mut got, repair, t).await,
            (None, _) => {
                // raid0: the drives' trees are the only check, and nothing to repair from.
                let longest = got.iter().map(|r| r.len).max().unwrap_or(0);
                t.groups += longest.div_ceil(grain);
                for (c, r) in got.iter().enumerate() {
                    if r.down && self.stale >> c & 1 == 0 {
                        t.unreachable += 1;
                        t.note(format!("component {c} did not answer"));
                    }
                    for ui in &r.bad {
                        t.damaged += 1;
                        t.unrecoverable += 1;
                        t.note(format!(
                            "component {c} at {}: damaged, and a {} file has no redundancy",
                            base + ui * grain,
                            self.geo
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads `[base, base + span)` of component `c` (cut at its length in a file of `size`
    /// bytes), narrowing a failed verification to the `grain`-sized pieces that fail.
    async fn scrub_read(
        &self,
        c: usize,
        base: u64,
        span: u64,
        grain: u64,
        size: u64,
    ) -> Result<Read, IoError> {
        let len = self
            .geo
            .component_len(c, size)
            .saturating_sub(base)
            .min(span);
        let mut out = Read {
            bytes: vec![0u8; span as usize],
            len,
            bad: BTreeSet::new(),
            down: false,
        };
        if self.stale >> c & 1 == 1 {
            out.down = true;
            return Ok(out);
        }
        if len == 0 {
            return Ok(out);
        }
        match self.read_spans(c, &[(base, len)]).await {
            Ok(r) => {
                out.bytes[..r.data.len()].copy_from_slice(&r.data);
                return Ok(out);
            }
            Err(e) if refused(&e) => return Err(e),
            Err(e) if !damaged(&e) => {
                out.down = true;
                return Ok(out);
            }
            Err(_) => {}
        }
        let mut at = 0;
        while at < len {
            let piece: Span = (base + at, grain.min(len - at));
            match self.read_spans(c, &[piece]).await {
                Ok(r) => {
                    out.bytes[at as usize..at as usize + r.data.len()].copy_from_slice(&r.data)
                }
                Err(e) if refused(&e) => return Err(e),
                Err(e) if damaged(&e) => {
                    out.bad.insert(at / grain);
                }
                Err(_) => {
                    out.down = true;
                    return Ok(out);
                }
            }
            at += grain;
        }
        Ok(out)
    }

    async fn scrub_groups(
        &self,
        codec: &Codec,
        base: u64,
        got: &mut [Read],
        repair: bool,
        t: &mut ScrubTally,
    ) {
        let u = self.unit();
        let spg = self.geo.stripes_per_group();
        let size = self.size.load(Ordering::Acquire);
        let group_bytes = self.geo.group_bytes().expect("parity layouts have groups");
        let g0 = base / u / spg;
        let g1 = ((base + self.step_span()) / u / spg).min(size.div_ceil(group_bytes));
        let d = self.geo.units_per_group()
            - self.geo.parity_per_stripe() * self.geo.stripes_per_group() as usize;
        for g in g0..g1 {
            t.groups += 1;
            let units = self.geo.group_units(g);
            let n = units.len();
            let mut shards: Vec<Vec<u8>> = Vec::with_capacity(n);
            let mut present = vec![true; n];
            let mut bad = vec![false; n];
            for (i, gu) in units.iter().enumerate() {
                let r = &got[gu.component];
                let at = gu.object_offset - base;
                shards.push(r.bytes[at as usize..(at + u) as usize].to_vec());
                bad[i] = r.bad.contains(&(at / u));
                present[i] = !r.down && !bad[i];
            }
            let missing: Vec<bool> = present.iter().map(|p| !p).collect();
            let lost = missing.iter().filter(|m| **m).count();
            if lost > 0 && codec.reconstruct(&mut shards, &present, &missing).is_err() {
                t.unrecoverable += 1;
                t.note(format!(
                    "group {g}: {lost} of its {n} units are unreadable, more than the code covers"
                ));
                continue;
            }
            // With redundancy to spare, the code must hold; if it does not, find the one
            // unit that disagrees.
            if n - lost > d && !codec.consistent(&shards) {
                match locate(codec, &mut shards, &present) {
                    Some(found) => {
                        for i in found {
                            bad[i] = true;
                            t.note(format!(
                                "group {g}: unit {i} (component {}) disagrees with the code",
                                units[i].component
                            ));
                        }
                    }
                    None => {
                        t.unrecoverable += 1;
                        t.note(format!(
                            "group {g}: the units disagree and the damage cannot be located"
                        ));
                        continue;
                    }
                }
            }
            for (i, gu) in units.iter().enumerate() {
                if !bad[i] {
                    continue;
                }
                t.damaged += 1;
                let c = gu.component;
                if !repair || got[c].down {
                    continue;
                }
                let keep = self
                    .geo
                    .component_len(c, size)
                    .saturating_sub(gu.object_offset)
                    .min(u);
                match self.parts[c]
                    .write(gu.object_offset, &shards[i][..keep as usize])
                    .await
                {
                    Ok(()) => t.repaired += 1,
                    Err(e) => t.note(format!("group {g}: component {c} not rewritten: {e}")),
                }
            }
            // Stale components are the striping manager's to count; an absent drive is ours.
            let absent =
                (0..n).any(|i| missing[i] && !bad[i] && self.stale >> units[i].component & 1 == 0);
            if absent {
                t.unreachable += 1;
            }
        }
    }

    async fn scrub_copies(&self, base: u64, got: &mut [Read], repair: bool, t: &mut ScrubTally) {
        let size = self.size.load(Ordering::Acquire);
        let len = size.saturating_sub(base).min(self.step_span());
        let n = got.len();
        let mut chunk = 0;
        while chunk * MIRROR_CHUNK_BYTES < len {
            t.groups += 1;
            let a = (chunk * MIRROR_CHUNK_BYTES) as usize;
            let b = (a + MIRROR_CHUNK_BYTES as usize).min(len as usize);
            let good: Vec<usize> = (0..n)
                .filter(|&c| !got[c].down && !got[c].bad.contains(&chunk))
                .collect();
            // The bytes most good copies hold; a tie leaves the chunk unrecoverable.
            let mut best: Option<(usize, usize)> = None;
            for &c in &good {
                let votes = good
                    .iter()
                    .filter(|&&o| got[o].bytes[a..b] == got[c].bytes[a..b])
                    .count();
                if best.is_none_or(|(_, v)| votes > v) {
                    best = Some((c, votes));
                }
            }
            let winner = match best {
                Some((c, votes)) if votes * 2 > good.len() => c,
                _ => {
                    t.unrecoverable += 1;
                    t.note(format!(
                        "bytes {}..{}: no copy the others agree with",
                        base + a as u64,
                        base + b as u64
                    ));
                    chunk += 1;
                    continue;
                }
            };
            let right = got[winner].bytes[a..b].to_vec();
            for (c, r) in got.iter().enumerate() {
                let wrong = r.bad.contains(&chunk) || (!r.down && r.bytes[a..b] != right[..]);
                if !wrong {
                    continue;
                }
                t.damaged += 1;
                if !repair || r.down {
                    continue;
                }
                match self.parts[c].write(base + a as u64, &right).await {
                    Ok(()) => t.repaired += 1,
                    Err(e) => t.note(format!("copy {c} not rewritten: {e}")),
                }
            }
            if (0..n).any(|c| got[c].down && self.stale >> c & 1 == 0) {
                t.unreachable += 1;
            }
            chunk += 1;
        }
    }
}

impl Codec {
    /// Whether a complete group satisfies the code.
    fn consistent(&self, units: &[Vec<u8>]) -> bool {
        let refs: Vec<&[u8]> = units.iter().map(|u| u.as_slice()).collect();
        match self {
            Codec::Rs(c) => c.verify(&refs).unwrap_or(false),
            Codec::Raid6x(c) => c
                .check(&refs, &vec![true; refs.len()])
                .is_ok_and(|k| k.is_consistent()),
        }
    }
}

/// The units of an inconsistent group that are wrong, corrected in `units`; `None` when the
/// damage cannot be located without guessing. raid6x uses its corrector (two bad units per
/// byte at most, ambiguity reported); `rs` (and raid6x, if its corrector cannot) leaves one
/// present unit out at a time and accepts the answer only when exactly one choice makes the
/// group consistent.
fn locate(codec: &Codec, units: &mut [Vec<u8>], present: &[bool]) -> Option<Vec<usize>> {
    if let (Codec::Raid6x(c), true) = (codec, present.iter().all(|p| *p)) {
        let mut work = units.to_vec();
        match c.correct(&mut work, Window::Byte, 2) {
            Ok(k) if !k.units.is_empty() => {
                units.clone_from_slice(&work);
                return Some(k.units);
            }
            Ok(_) | Err(CorrectError::Ambiguous { .. }) => return None,
            Err(_) => {}
        }
    }
    let mut found: Option<(usize, Vec<u8>)> = None;
    for i in (0..units.len()).filter(|&i| present[i]) {
        let mut work = units.to_vec();
        let mut have = present.to_vec();
        have[i] = false;
        let wanted: Vec<bool> = have.iter().map(|h| !h).collect();
        if codec.reconstruct(&mut work, &have, &wanted).is_err() || !codec.consistent(&work) {
            continue;
        }
        if found.is_some() {
            return None;
        }
        found = Some((i, std::mem::take(&mut work[i])));
    }
    let (i, right) = found?;
    units[i] = right;
    Some(vec![i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::FileIo;
    use crate::memio::{Fault, MemIo};
    use nasd_ec::Layout as Geometry;
    use std::sync::Arc;

    use crate::striped::tests::pseudo;

    async fn written(spec: &str, len: usize) -> (Vec<Arc<MemIo>>, Vec<u8>) {
        let geo: Geometry = spec.parse().unwrap();
        let mems: Vec<Arc<MemIo>> = (0..geo.components())
            .map(|i| Arc::new(MemIo::new(i)))
            .collect();
        let parts: Vec<Arc<dyn FileIo>> =
            mems.iter().map(|m| m.clone() as Arc<dyn FileIo>).collect();
        let s = Striped::new(geo, parts, 0, 0).unwrap();
        let data = pseudo(len, len as u64);
        s.write(0, &data).await.unwrap();
        (mems, data)
    }

    fn over(spec: &str, mems: &[Arc<MemIo>], size: u64) -> Striped {
        let parts: Vec<Arc<dyn FileIo>> =
            mems.iter().map(|m| m.clone() as Arc<dyn FileIo>).collect();
        Striped::new(spec.parse().unwrap(), parts, size, 0).unwrap()
    }

    async fn scrub(s: &Striped, repair: bool) -> ScrubTally {
        let mut t = ScrubTally::default();
        for step in 0..s.scrub_steps() {
            s.scrub_step(step, repair, &mut t).await.unwrap();
        }
        t
    }

    #[tokio::test]
    async fn a_whole_file_scrubs_clean_and_counts_every_byte() {
        for spec in ["rs:4+2/4K", "raid6x:3/4K", "mirror:3", "raid0:3/4K"] {
            let (mems, data) = written(spec, 300_000).await;
            let s = over(spec, &mems, data.len() as u64);
            let t = scrub(&s, false).await;
            assert!(t.clean(), "{spec}: {t:?}");
            let stored: u64 = mems.iter().map(|m| m.contents().len() as u64).sum();
            assert_eq!(t.bytes_checked, stored, "{spec}");
            assert!(t.groups > 0);
        }
    }

    #[tokio::test]
    async fn silently_wrong_bytes_are_located_by_the_code_and_repaired() {
        // A drive that returns wrong bytes its own tree vouches for: only the code sees it.
        for spec in ["rs:4+2/4K", "rs:3+3/4K", "raid6x:4/4K", "mirror:3"] {
            let (mems, data) = written(spec, 200_000).await;
            for victim in 0..mems.len() {
                let before = mems[victim].contents();
                let mut wrong = before.clone();
                wrong[5000] ^= 0x5A;
                wrong[5001] ^= 0x01;
                mems[victim].write(0, &wrong).await.unwrap();
                let s = over(spec, &mems, data.len() as u64);
                let t = scrub(&s, true).await;
                assert_eq!(
                    (t.damaged, t.repaired, t.unrecoverable),
                    (1, 1, 0),
                    "{spec} {t:?}"
                );
                assert_eq!(
                    mems[victim].contents(),
                    before,
                    "{spec}: component {victim}"
                );
                assert!(scrub(&s, false).await.clean());
            }
        }
    }

    #[tokio::test]
    async fn units_a_drive_refuses_are_rebuilt_from_the_others() {
        let spec = "rs:4+2/4K";
        let (mems, data) = written(spec, 500_000).await;
        let before: Vec<Vec<u8>> = mems.iter().map(|m| m.contents()).collect();
        // Two components fail verification on one unit each.
        mems[1].set_fault(Fault::CorruptAt(8192, 10));
        mems[4].set_fault(Fault::CorruptAt(40_000, 1));
        let s = over(spec, &mems, data.len() as u64);
        let t = scrub(&s, true).await;
        assert_eq!((t.damaged, t.repaired), (2, 2), "{t:?}");
        for m in &mems {
            m.set_fault(Fault::None);
        }
        let after: Vec<Vec<u8>> = mems.iter().map(|m| m.contents()).collect();
        assert_eq!(after, before);
    }

    #[tokio::test]
    async fn more_damage_than_the_code_covers_is_reported_not_guessed() {
        let spec = "rs:4+1/4K";
        let (mems, data) = written(spec, 100_000).await;
        // One parity: a wrong unit is detected but cannot be located.
        let mut wrong = mems[2].contents();
        wrong[100] ^= 1;
        mems[2].write(0, &wrong).await.unwrap();
        let s = over(spec, &mems, data.len() as u64);
        let t = scrub(&s, true).await;
        assert_eq!((t.unrecoverable, t.repaired), (1, 0), "{t:?}");
        assert_eq!(mems[2].contents(), wrong, "nothing is rewritten on a guess");
        // Two refused units in one group of a one-parity code.
        let (mems, data) = written(spec, 100_000).await;
        mems[0].set_fault(Fault::CorruptAt(0, 1));
        mems[3].set_fault(Fault::CorruptAt(0, 1));
        let s = over(spec, &mems, data.len() as u64);
        let t = scrub(&s, true).await;
        assert_eq!((t.unrecoverable, t.repaired), (1, 0), "{t:?}");
        assert!(!t.clean());
    }

    #[tokio::test]
    async fn an_absent_drive_is_counted_not_taken_for_damage() {
        let spec = "raid6x:3/4K";
        let (mems, data) = written(spec, 150_000).await;
        mems[2].set_fault(Fault::Unreachable);
        let s = over(spec, &mems, data.len() as u64);
        let t = scrub(&s, true).await;
        assert_eq!((t.damaged, t.unrecoverable), (0, 0), "{t:?}");
        assert!(t.unreachable > 0);
        assert!(!t.clean());
    }
}
