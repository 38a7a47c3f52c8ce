//! Healing: the striping manager's scrub, component rebuild and drive replacement, and the
//! cluster status that reports them (issue 13 §7; seed 002 §3.3 puts reconstruction in the
//! striping layer, seed 004 §3 gives the detection and location it uses).
//!
//! - A **scrub** of a file reads every current unit of every component back through the
//!   layout layer (`Striped::scrub_step`): the drive's integrity tree verifies each reply, the
//!   code checks each group, and damage is rewritten in place from the other components. With
//!   `repair`, stale components (a drive missed a write or a revocation) are first rebuilt
//!   onto fresh objects. The background scrub walks every file at a rate limit
//!   ([`Policy::scrub_bytes_per_s`](crate::service::Policy)), repairing as it goes.
//! - A **rebuild** of component `c` makes a new object (on the same drive if it is healthy and
//!   the object only went stale, else on a drive the layout does not use yet), fills it from
//!   `c` itself where that still reads, else from the others, and swaps it into the layout in
//!   one store transaction that is refused if the layout moved on meanwhile (a writer's commit
//!   wins; the rebuild is dropped and retried). Readers and writers go on throughout: they
//!   never see the new object before the swap, and the old one is removed only after it.
//! - A **drive replacement** rebuilds every component on drive `old` onto drive `new`, file by
//!   file in the background; `Status` shows its progress.
//! - **Drives that come back**: when a health check finds a drive up that was not, and when
//!   the manager starts, every stale component (a write or a revocation it missed, or an
//!   absent component of a file laid out while drives were down) is rebuilt in the
//!   background, file by file from the store's index of stale files, onto its own drive when
//!   that takes it, else onto one the layout does not use. Stale components on drives that
//!   are up (a write that missed a live drive) start a pass from a health check at most every
//!   [`HEAL_RETRY_MS`]. What cannot be rebuilt yet waits for the next pass, `nasd scrub
//!   --repair`, or the background scrub.
//! - **Status** comes from the counts the store keeps as files change (no walk of the
//!   namespace): files, stale files, components and bytes, per drive its files and stale
//!   components, with capacity and use as each drive last reported them.

use crate::service::Manager;
use crate::store::{Inode, ObjRef};
use crate::{now_ms, MgrError, MgrResult};
use nasd_client::component::ComponentIo;
use nasd_client::layer::FileIo;
use nasd_client::striped::ScrubTally;
use nasd_proto::manager::FileKind;
use nasd_proto::manager::{
    ClusterStatus, DriveStatus, MgrStatus, RebuildStatus, ScrubReport, ScrubStatus,
    STATUS_PATHS_MAX,
};
use nasd_proto::{AttrMask, Attributes, DriveId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Files a walk over the store takes per page (the store lock is held for one page).
pub const WALK_PAGE_FILES: usize = 256;
/// Attempts at one rebuild when writers keep committing new versions under it.
pub const REBUILD_ATTEMPTS_MAX: usize = 3;
/// Characters of problem text a report or a status keeps.
pub const DETAIL_CHARS_MAX: usize = 2000;
/// How often a health check may start a rebuild of stale components that lie on drives that
/// are up (a write that missed a live drive, an absent component on a drive full then):
/// what failed to rebuild is not tried again on every check.
pub const HEAL_RETRY_MS: u64 = 60_000;

/// What the healing tasks report through `Status`.
#[derive(Default)]
pub struct HealState {
    rebuild: Mutex<Option<RebuildStatus>>,
    scrub: Mutex<ScrubStatus>,
    /// A pass rebuilding stale components runs.
    healing: AtomicBool,
    /// Another pass is due when it ends (a drive came back meanwhile).
    heal_again: AtomicBool,
    /// When the last pass started (Unix ms).
    healed_ms: std::sync::atomic::AtomicU64,
}

impl HealState {
    /// The last drive replacement's progress, the background scrub's, and whether a pass
    /// rebuilding stale components runs (metrics).
    pub(crate) fn progress(&self) -> (Option<RebuildStatus>, ScrubStatus, bool) {
        (
            self.rebuild.lock().expect("heal lock").clone(),
            self.scrub.lock().expect("heal lock").clone(),
            self.healing.load(Ordering::Acquire),
        )
    }
}

fn append(detail: &mut String, what: &str) {
    if detail.len() < DETAIL_CHARS_MAX {
        if !detail.is_empty() {
            detail.push_str("; ");
        }
        detail.push_str(what);
        if detail.len() > DETAIL_CHARS_MAX {
            let mut cut = DETAIL_CHARS_MAX;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
        }
    }
}

fn internal(e: impl std::fmt::Display) -> MgrError {
    MgrError::new(MgrStatus::Internal, e.to_string())
}

fn unreachable_err(path: &str, e: impl std::fmt::Display) -> MgrError {
    MgrError::new(MgrStatus::DriveUnreachable, format!("{path}: {e}"))
}

/// Spaces out work to `bytes_per_s` since its start.
pub(crate) struct Pace {
    start: Instant,
    bytes: u64,
    bytes_per_s: u64,
}

impl Pace {
    fn new(bytes_per_s: u64) -> Pace {
        Pace {
            start: Instant::now(),
            bytes: 0,
            bytes_per_s,
        }
    }

    async fn done(&mut self, bytes: u64) {
        self.bytes += bytes;
        if self.bytes_per_s == 0 {
            return;
        }
        let due = Duration::from_secs_f64(self.bytes as f64 / self.bytes_per_s as f64);
        if let Some(wait) = due.checked_sub(self.start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
}

impl Manager {
    /// The path of inode `ino` (for reports; one of its names), or `#ino` if it has no name
    /// now. One indexed lookup per directory level.
    pub(crate) fn path_of(&self, ino: u64) -> String {
        let st = self.st();
        let mut names = vec![];
        let mut at = ino;
        while at != crate::store::ROOT_INO && names.len() < 256 {
            match st.name_of(at) {
                Ok(Some((parent, name))) => {
                    names.push(name);
                    at = parent;
                }
                _ => return format!("#{ino}"),
            }
        }
        names.reverse();
        format!("/{}", names.join("/"))
    }

    fn inode_of(&self, ino: u64, what: &str) -> MgrResult<Inode> {
        self.st()
            .inode(ino)
            .map_err(internal)?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, format!("{what}: gone")))
    }

    /// A [`FileIo`] over object `o` with the manager's working key.
    pub(crate) fn object_io(&self, k: usize, o: ObjRef) -> MgrResult<ComponentIo> {
        let rec = self.drives.record(o.drive).ok_or_else(|| {
            MgrError::new(
                MgrStatus::DriveUnreachable,
                format!("drive {:016x} is not registered", o.drive.0),
            )
        })?;
        let auth = nasd_client::Auth::Key {
            kind: nasd_proto::KeyType::Working,
            key: rec.working_key.clone(),
            suite: rec.suite,
            drive: rec.drive,
        };
        let t = nasd_client::object::Target {
            partition: o.partition,
            object: o.object,
            protection: crate::drives::MANAGER_PROTECTION,
        };
        Ok(ComponentIo::with_auth(
            self.pool.clone(),
            k,
            rec.addr,
            auth,
            t,
        ))
    }

    /// Scrubs the file `i` (named `path` in the report): see the module comment. `pace`
    /// spaces the reads out (the background scrub); the admin's request runs at full speed.
    pub(crate) async fn scrub_inode(
        &self,
        i: &Inode,
        path: &str,
        repair: bool,
        mut pace: Option<&mut Pace>,
    ) -> MgrResult<ScrubReport> {
        let mut report = ScrubReport {
            path: path.to_string(),
            ..ScrubReport::default()
        };
        let Some(l) = &i.layout else {
            return Err(MgrError::new(MgrStatus::IsADirectory, path.to_string()));
        };
        report.geometry = l.geometry.clone();
        let mut i = i.clone();
        if repair && l.stale != 0 && !l.sized_by_object() {
            for c in (0..l.components.len()).filter(|&c| l.is_stale(c)) {
                match self.rebuild_component(i.ino, c, None).await {
                    Ok(_) => report.rebuilt += 1,
                    Err(e) => append(
                        &mut report.detail,
                        &format!("component {c} not rebuilt: {}", e.detail),
                    ),
                }
            }
            i = self.inode_of(i.ino, path)?;
        }
        let l = i.layout.as_ref().expect("files keep a layout");
        let stale = l.stale.count_ones() as u64;
        report.unchecked += stale;
        if stale > 0 {
            append(
                &mut report.detail,
                &format!("{stale} stale component(s) not checked"),
            );
        }
        let (size, _) = self.file_times(&i).await.map_err(|e| e.at(path))?;
        let io = self.layout_io(l, size)?;
        let mut t = ScrubTally::default();
        for step in 0..io.scrub_steps() {
            let before = t.bytes_checked;
            io.scrub_step(step, repair, &mut t)
                .await
                .map_err(|e| unreachable_err(path, e))?;
            if let Some(p) = pace.as_deref_mut() {
                p.done(t.bytes_checked - before).await;
            }
        }
        report.bytes_checked = t.bytes_checked;
        report.groups = t.groups;
        report.damaged = t.damaged;
        report.repaired = t.repaired;
        report.unrecoverable = t.unrecoverable;
        report.unchecked += t.unreachable;
        if t.unreachable > 0 {
            append(
                &mut report.detail,
                &format!(
                    "{} group(s) not wholly checked: a drive did not answer",
                    t.unreachable
                ),
            );
        }
        for p in &t.problems {
            append(&mut report.detail, p);
        }
        if report.damaged > 0 || report.rebuilt > 0 {
            tracing::warn!(
                path,
                damaged = report.damaged,
                repaired = report.repaired,
                rebuilt = report.rebuilt,
                unrecoverable = report.unrecoverable,
                "scrub"
            );
        }
        Ok(report)
    }

    /// `Scrub` of one file by path (admins only; the server checks).
    pub async fn scrub_path(
        &self,
        c: &crate::service::Caller,
        path: &str,
        repair: bool,
    ) -> MgrResult<ScrubReport> {
        let i = self.resolve(c, path)?;
        if i.kind == FileKind::Dir {
            return Err(MgrError::new(
                MgrStatus::IsADirectory,
                format!("{path}: scrub files one by one (nasd scrub walks directories)"),
            ));
        }
        self.scrub_inode(&i, path, repair, None).await
    }

    /// Rebuilds component `c` of file `ino` onto a new object on `onto` (default: its own
    /// drive when healthy, else one the layout does not use), then swaps it in. Returns the
    /// bytes written.
    pub(crate) async fn rebuild_component(
        &self,
        ino: u64,
        c: usize,
        onto: Option<DriveId>,
    ) -> MgrResult<u64> {
        let mut last = None;
        for _ in 0..REBUILD_ATTEMPTS_MAX {
            match self.rebuild_once(ino, c, onto).await {
                Err(e) if e.status == MgrStatus::Conflict => last = Some(e),
                r => return r,
            }
        }
        Err(last.expect("attempted"))
    }

    async fn rebuild_once(&self, ino: u64, c: usize, onto: Option<DriveId>) -> MgrResult<u64> {
        let what = format!("#{ino}");
        let i = self.inode_of(ino, &what)?;
        let l = i
            .layout
            .clone()
            .ok_or_else(|| MgrError::new(MgrStatus::IsADirectory, what.clone()))?;
        let old = *l.components.get(c).ok_or_else(|| {
            MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{what}: no component {c}"),
            )
        })?;
        if onto.is_none() && !l.is_stale(c) {
            // Rebuilt meanwhile, or the file was rewritten: nothing stale to rebuild.
            return Ok(0);
        }
        let used = |d: DriveId| {
            l.components
                .iter()
                .enumerate()
                .any(|(k, o)| k != c && o.drive == d)
        };
        let (size, _) = self.file_times(&i).await?;
        let need =
            crate::striping::component_need(&crate::striping::geometry_of(&l.geometry)?, size);
        let busy: Vec<DriveId> = l.components.iter().map(|o| o.drive).collect();
        let drive = match onto {
            Some(d) if used(d) => {
                return Err(MgrError::new(
                    MgrStatus::InvalidArgument,
                    format!(
                        "{what}: drive {:016x} already holds another component of this file",
                        d.0
                    ),
                ))
            }
            Some(d) => d,
            None if self.drives.takes(old.drive, need) => old.drive,
            None => self.drives.spare(&busy, need).ok_or_else(|| {
                MgrError::new(
                    MgrStatus::NoDrives,
                    format!(
                        "{what}: drive {:016x} of component {c} is down or full, and no drive \
                         outside the layout takes it",
                        old.drive.0
                    ),
                )
            })?,
        };
        let (new, attrs) = self.create_object(drive, &i, i.e2e.is_some()).await?;
        let filled = async {
            if attrs.access_control_version != i.acv {
                let a = Attributes {
                    access_control_version: i.acv,
                    ..Attributes::default()
                };
                self.setattr(new, AttrMask::ACCESS_CONTROL_VERSION, a)
                    .await?;
            }
            let io = self.layout_io(&l, size)?;
            let target: Arc<dyn FileIo> = Arc::new(self.object_io(c, new)?);
            let n = io
                .move_range(c, 0, u64::MAX, target)
                .await
                .map_err(|e| unreachable_err(&what, e))?;
            let mut next = l.clone();
            next.components[c] = new;
            next.stale &= !(1u64 << c);
            self.st()
                .swap_layout(ino, l.version, &next, None)
                .map_err(|e| crate::service::store_err(e, &what))?;
            Ok::<u64, MgrError>(n)
        };
        match filled.await {
            Ok(n) => {
                self.remove_object(old).await;
                tracing::info!(ino, component = c, drive = %format!("{:016x}", drive.0), bytes = n, "component rebuilt");
                Ok(n)
            }
            Err(e) => {
                self.remove_object(new).await;
                Err(e)
            }
        }
    }

    /// `DriveReplace`: starts rebuilding every component on `old` onto `new` in the
    /// background. `Busy` while another replacement runs.
    pub fn drive_replace(self: &Arc<Self>, old: DriveId, new: DriveId) -> MgrResult<()> {
        for d in [old, new] {
            if self.drives.record(d).is_none() {
                return Err(MgrError::new(
                    MgrStatus::NoSuchPath,
                    format!("drive {:016x} is not registered", d.0),
                ));
            }
        }
        if old == new {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                "a drive cannot replace itself",
            ));
        }
        if !self.drives.healthy(new) {
            return Err(MgrError::new(
                MgrStatus::DriveUnreachable,
                format!("drive {:016x} is not healthy", new.0),
            ));
        }
        let mut files_total = 0;
        let mut after = 0;
        loop {
            let page = self
                .st()
                .files_with_drive(old, after, WALK_PAGE_FILES)
                .map_err(internal)?;
            files_total += page.len() as u64;
            match page.last() {
                Some(&last) => after = last,
                None => break,
            }
        }
        {
            let mut r = self.heal.rebuild.lock().expect("heal lock");
            if r.as_ref().is_some_and(|r| !r.finished) {
                return Err(MgrError::new(
                    MgrStatus::Busy,
                    "a drive replacement is running (see nasd status)",
                ));
            }
            *r = Some(RebuildStatus {
                old,
                new,
                files_total,
                ..RebuildStatus::default()
            });
        }
        tracing::info!(old = %format!("{:016x}", old.0), new = %format!("{:016x}", new.0), files_total, "drive replacement started");
        let m = self.clone();
        tokio::spawn(async move { m.replace_all(old, new).await });
        Ok(())
    }

    async fn replace_all(&self, old: DriveId, new: DriveId) {
        let update = |f: &dyn Fn(&mut RebuildStatus)| {
            if let Some(r) = self.heal.rebuild.lock().expect("heal lock").as_mut() {
                f(r);
            }
        };
        // Files that fail stay on `old`; skip past them.
        let mut after = 0;
        loop {
            let page = match self.st().files_with_drive(old, after, WALK_PAGE_FILES) {
                Ok(p) => p,
                Err(e) => {
                    update(&|r| append(&mut r.detail, &format!("store: {e}")));
                    break;
                }
            };
            let Some(&last) = page.last() else { break };
            after = last;
            for ino in page {
                let c = match self.st().inode(ino) {
                    Ok(Some(Inode {
                        layout: Some(l), ..
                    })) => l.components.iter().position(|o| o.drive == old),
                    _ => None,
                };
                let Some(c) = c else { continue };
                match self.rebuild_component(ino, c, Some(new)).await {
                    Ok(n) => update(&|r| {
                        r.files_done += 1;
                        r.bytes_done += n;
                    }),
                    Err(e) => {
                        let path = self.path_of(ino);
                        tracing::warn!(path, "drive replacement: {}", e.detail);
                        update(&|r| {
                            r.files_done += 1;
                            r.failed += 1;
                            append(&mut r.detail, &format!("{path}: {}", e.detail));
                        })
                    }
                }
            }
        }
        update(&|r| r.finished = true);
        tracing::info!(old = %format!("{:016x}", old.0), "drive replacement finished");
    }

    /// Every drive with its health, its files and stale components (as counted), and its
    /// capacity and use as it last reported them.
    pub fn drive_statuses(&self) -> MgrResult<Vec<DriveStatus>> {
        let counts = self.st().counts().map_err(internal)?;
        Ok(self
            .drives
            .snapshot()
            .into_iter()
            .map(|v| {
                let c = counts.drives.iter().find(|c| c.drive == v.rec.drive);
                DriveStatus {
                    drive: v.rec.drive,
                    addr: v.rec.addr,
                    partition: v.rec.partition,
                    healthy: v.healthy,
                    files: c.map_or(0, |c| c.files),
                    key_rotated_ms: v.rec.rotated_ms,
                    detail: v.detail,
                    stale: c.map_or(0, |c| c.stale),
                    capacity_bytes: v.capacity_bytes,
                    used_bytes: v.used_bytes,
                }
            })
            .collect())
    }

    /// `Status`: drives, the file counts, degraded files (a stale component, or one on a
    /// drive that is not healthy now), the drive replacement's and the background scrub's
    /// progress — from the counts the store keeps, never a walk. With `recount`, also what a
    /// walk of every file finds; counts that disagree with it are logged and replaced by it.
    pub fn cluster_status(&self, recount: bool) -> MgrResult<ClusterStatus> {
        let recounted = match recount {
            true => Some(self.recount_files()?),
            false => None,
        };
        let drives = self.drive_statuses()?;
        let down: Vec<DriveId> = drives
            .iter()
            .filter(|d| !d.healthy)
            .map(|d| d.drive)
            .collect();
        let (c, (degraded_files, degraded)) = {
            let st = self.st();
            let c = st.counts().map_err(internal)?;
            (c, st.degraded(&down, STATUS_PATHS_MAX).map_err(internal)?)
        };
        let mut s = ClusterStatus {
            drives,
            files: c.files,
            degraded_files,
            stale_files: c.stale_files,
            stale_components: c.stale_components,
            bytes: c.bytes,
            stale_bytes: c.stale_bytes,
            recounted,
            ..ClusterStatus::default()
        };
        s.degraded = degraded.into_iter().map(|ino| self.path_of(ino)).collect();
        s.rebuild = self.heal.rebuild.lock().expect("heal lock").clone();
        s.scrub = self.heal.scrub.lock().expect("heal lock").clone();
        s.scrub.rate_bytes_per_s = self.policy.scrub_bytes_per_s;
        Ok(s)
    }

    /// The file counts found by walking every file (one store transaction). Kept counts that
    /// differ are a bug: logged, and replaced by what the walk found.
    pub(crate) fn recount_files(&self) -> MgrResult<nasd_proto::manager::FileCounts> {
        let mut st = self.st();
        let kept = st.counts().map_err(internal)?;
        let counted = st.recount(true).map_err(internal)?;
        if kept != counted {
            tracing::error!(
                ?kept,
                ?counted,
                "file counts disagreed with a walk of every file; replaced"
            );
        }
        Ok(counted)
    }

    /// Drives found up again: connections kept to them are dead (they restarted), and stale
    /// components may be rebuilt now.
    pub fn drives_back(self: &Arc<Self>, back: &[DriveId]) {
        for d in back {
            if let Some(r) = self.drives.record(*d) {
                self.pool.forget(&r.addr);
            }
        }
        self.heal_stale(&format!("{} drive(s) came back", back.len()));
    }

    /// From a health check: a pass when stale components lie on drives that are up and none
    /// started within [`HEAL_RETRY_MS`].
    pub fn heal_if_due(self: &Arc<Self>) {
        let since = now_ms().saturating_sub(self.heal.healed_ms.load(Ordering::Acquire));
        if since < HEAL_RETRY_MS {
            return;
        }
        let Ok(c) = self.st().counts() else { return };
        let on_up = c
            .drives
            .iter()
            .any(|d| d.stale > 0 && self.drives.healthy(d.drive));
        if on_up {
            self.heal_stale("stale components lie on drives that are up");
        }
    }

    /// Starts a background pass that rebuilds every stale component it can (module docs),
    /// unless one runs; then that one runs once more when it ends. `why` is logged.
    pub fn heal_stale(self: &Arc<Self>, why: &str) {
        if self.st().counts().is_ok_and(|c| c.stale_files == 0) {
            return;
        }
        self.heal.heal_again.store(true, Ordering::Release);
        if self.heal.healing.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::info!("rebuilding stale components: {why}");
        let m = self.clone();
        tokio::spawn(async move {
            while m.heal.heal_again.swap(false, Ordering::AcqRel) {
                m.heal.healed_ms.store(now_ms(), Ordering::Release);
                m.heal_pass().await;
            }
            m.heal.healing.store(false, Ordering::Release);
        });
    }

    /// One pass over the files with stale components: each component rebuilt, or left for
    /// later when that fails (logged).
    async fn heal_pass(&self) {
        let (mut after, mut rebuilt, mut left) = (0, 0u64, 0u64);
        loop {
            let page = match self.st().stale_files_after(after, WALK_PAGE_FILES) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!("rebuilding stale components: {e}");
                    return;
                }
            };
            let Some(&last) = page.last() else { break };
            after = last;
            for ino in page {
                let stale = match self.st().inode(ino) {
                    Ok(Some(Inode {
                        layout: Some(l), ..
                    })) if !l.sized_by_object() => l.stale,
                    _ => continue,
                };
                for c in (0..64).filter(|c| stale >> c & 1 == 1) {
                    match self.rebuild_component(ino, c, None).await {
                        Ok(_) => rebuilt += 1,
                        Err(e) => {
                            left += 1;
                            tracing::info!(ino, component = c, "not rebuilt yet: {}", e.detail);
                        }
                    }
                }
            }
        }
        tracing::info!(rebuilt, left, "stale components rebuilt");
    }

    /// One background pass: every file scrubbed and repaired, at the policy's rate.
    pub async fn scrub_pass(&self) {
        let mut pace = Pace::new(self.policy.scrub_bytes_per_s);
        {
            let mut s = self.heal.scrub.lock().expect("heal lock");
            s.files = 0;
            s.bytes = 0;
        }
        let mut after = 0;
        loop {
            let page = match self.st().files_after(after, WALK_PAGE_FILES) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!("background scrub: {e}");
                    return;
                }
            };
            let Some(&last) = page.last() else { break };
            after = last;
            for ino in page {
                let Ok(Some(i)) = self.st().inode(ino) else {
                    continue;
                };
                if i.layout.is_none() {
                    continue;
                }
                let path = self.path_of(ino);
                match self.scrub_inode(&i, &path, true, Some(&mut pace)).await {
                    Ok(r) => {
                        let mut s = self.heal.scrub.lock().expect("heal lock");
                        s.files += 1;
                        s.bytes += r.bytes_checked;
                        s.damaged += r.damaged;
                        s.repaired += r.repaired + r.rebuilt;
                    }
                    Err(e) => tracing::info!(path, "background scrub: {}", e.detail),
                }
            }
        }
        let mut s = self.heal.scrub.lock().expect("heal lock");
        s.passes += 1;
        s.last_pass_ms = now_ms();
    }
}

/// Runs a background scrub pass every `Policy::scrub_interval_ms`, the first one interval
/// after start; a rate of 0 turns it off.
pub fn start_scrubber(m: Arc<Manager>) -> Option<tokio::task::JoinHandle<()>> {
    if m.policy.scrub_bytes_per_s == 0 || m.policy.scrub_interval_ms == 0 {
        return None;
    }
    Some(tokio::spawn(async move {
        let every = Duration::from_millis(m.policy.scrub_interval_ms);
        loop {
            tokio::time::sleep(every).await;
            m.scrub_pass().await;
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pace_spaces_work_out_to_its_rate() {
        let mut p = Pace::new(1 << 20);
        let t = Instant::now();
        p.done(256 << 10).await;
        p.done(256 << 10).await;
        assert!(
            t.elapsed() >= Duration::from_millis(450),
            "{:?}",
            t.elapsed()
        );
        let mut free = Pace::new(0);
        let t = Instant::now();
        free.done(1 << 40).await;
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn details_stay_bounded_and_whole_characters() {
        let mut d = String::new();
        for _ in 0..1000 {
            append(&mut d, "ünïcödé problem");
        }
        assert!(d.len() <= DETAIL_CHARS_MAX);
        assert!(d.starts_with("ünïcödé problem; "));
    }
}
