//! The striping manager (seed 002 §3.3): what a file's layout means on the drives, kept apart
//! from the namespace code, which sees only an object-like file — create, attributes, revoke,
//! remove, capabilities. It owns the allocation of component objects and their capabilities.
//!
//! Invariants:
//! - a layout's components lie on distinct drives, chosen among those that take them now by
//!   their room; a component that has no object ([`ObjectId::ABSENT`]: its drive could not
//!   take one when the file was laid out) is stale, its grant authorizes nothing, and it is
//!   never removed, revoked or read;
//! - every component of a file carries the file's `fs_specific` record (so any one proves which
//!   file it belongs to) and the file's access_control_version: they are created together at
//!   version 0, and revocation moves them together, so one capability key per component is
//!   minted from the one version the inode keeps;
//! - a file spread over several objects has its size and modify time kept here (component
//!   sizes include padding and parity); a one-object file's are its object's attributes.

use crate::drives::{self, MANAGER_PROTECTION};
use crate::service::{FsAttr, Manager};
use crate::store::{FileLayout, Inode, ObjRef};
use crate::{MgrError, MgrResult};
use nasd_client::layer::FileIo;
use nasd_client::object::Target;
use nasd_client::striped::Striped;
use nasd_client::Capability;
use nasd_ec::Layout as Geometry;
use nasd_proto::manager::{CapGrant, Component, Layout, MgrStatus};
use nasd_proto::{AttrMask, Attributes, CapabilityArgs, DriveId, ObjectId, Op, ReplyBody, Rights};
use std::sync::Arc;

/// The bytes a component of `geo` takes for a file of `size` bytes (the largest component: a
/// parity layout's are whole units of each group): what placement must find room for.
pub fn component_need(geo: &Geometry, size: u64) -> u64 {
    (0..geo.components())
        .map(|c| geo.component_bound(c, size))
        .max()
        .unwrap_or(0)
}

/// The layout every file gets when neither its directory nor an ancestor names one, unless
/// the cluster's policy says otherwise.
pub const DEFAULT_LAYOUT: &str = "single";

/// The geometry a layout spec names, or why it is not a layout.
pub fn geometry_of(spec: &str) -> MgrResult<Geometry> {
    spec.parse::<Geometry>()
        .map_err(|e| MgrError::new(MgrStatus::InvalidArgument, format!("layout {spec:?}: {e}")))
}

/// The number of component objects a layout spec asks for, or why it is not a layout.
pub fn components_of(spec: &str) -> MgrResult<usize> {
    Ok(geometry_of(spec)?.components())
}

/// How many of a layout's components may be lost (stale) with every byte still readable.
pub fn tolerated(l: &FileLayout) -> usize {
    geometry_of(&l.geometry).map_or(0, |g| g.tolerated_failures())
}

/// What capabilities for a file allow: reading, or writing as far as the bound says.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write(crate::quota::WriteBound),
}

impl Manager {
    /// Creates the component objects of a new layout `spec` for the file `i`, to hold
    /// `extend_by` bytes, each with `i`'s `fs_specific` record (flagged when they will hold
    /// ciphertext): on distinct drives that take them now, chosen by room
    /// ([`crate::drives::Registry::place`]), in parallel. A drive that fails meanwhile is
    /// replaced by another that takes a component. A layout with redundancy is made while at
    /// least as many components as it needs are: the rest are absent (on drives down or full
    /// now, [`ObjectId::ABSENT`]) and stale, rebuilt once a drive takes them, so new files
    /// are written while reads work. Beyond that, or on any other failure, the objects made
    /// are removed and the error says which drives could not take a component.
    pub(crate) async fn create_layout(
        &self,
        spec: &str,
        i: &Inode,
        encrypted: bool,
        extend_by: u64,
    ) -> MgrResult<FileLayout> {
        let geo = geometry_of(spec)?;
        let (n, tolerated) = (geo.components(), geo.tolerated_failures());
        let need = component_need(&geo, extend_by);
        let what = format!("a new {spec} file");
        let plan = self.drives.place(n, tolerated, need, &[], &what)?;
        let made = futures_util::future::join_all(
            plan.drives
                .iter()
                .map(|&d| self.create_fresh(d, i, encrypted)),
        )
        .await;
        let mut components = Vec::with_capacity(n);
        let mut absent: Vec<DriveId> = plan.absent.clone();
        let mut failure = None;
        let mut used: Vec<DriveId> = plan.drives.iter().chain(&plan.absent).copied().collect();
        for (&d, r) in plan.drives.iter().zip(made) {
            match r {
                Ok(o) => components.push(o),
                Err(e) => {
                    tracing::warn!(drive = %format!("{:016x}", d.0), "no component made: {}", e.detail);
                    failure.get_or_insert(e);
                    // Another drive that takes it, else an absent component here.
                    let mut placed = None;
                    while let Some(spare) = self.drives.spare(&used, need) {
                        used.push(spare);
                        if let Ok(o) = self.create_fresh(spare, i, encrypted).await {
                            placed = Some(o);
                            break;
                        }
                    }
                    match placed {
                        Some(o) => components.push(o),
                        None => absent.push(d),
                    }
                }
            }
        }
        if absent.len() > tolerated {
            self.remove_objects(&components).await;
            let (status, why) = failure.map_or((MgrStatus::NoDrives, String::new()), |e| {
                (e.status, format!(": {}", e.detail))
            });
            return Err(MgrError::new(
                status,
                format!(
                    "{what}: {} of its {n} components could not be made, and it can do \
                     without {tolerated}{why}",
                    absent.len()
                ),
            ));
        }
        let real = components.len();
        let partition = drives::FILES_PARTITION;
        components.extend(absent.iter().map(|&drive| ObjRef {
            drive,
            partition,
            object: ObjectId::ABSENT,
        }));
        let stale = (real..n).fold(0u64, |m, k| m | 1 << k);
        if stale != 0 {
            tracing::info!(
                ino = i.ino,
                absent = n - real,
                layout = spec,
                "a new file laid out without the drives that are down or full"
            );
        }
        Ok(FileLayout {
            version: 1,
            geometry: spec.to_string(),
            components,
            stale,
        })
    }

    /// A new object for `i` on drive `d`, at access_control_version 0 (else removed, and an
    /// error).
    async fn create_fresh(&self, d: DriveId, i: &Inode, encrypted: bool) -> MgrResult<ObjRef> {
        let (o, a) = self.create_object(d, i, encrypted).await?;
        if a.access_control_version != 0 {
            self.remove_object(o).await;
            return Err(MgrError::new(
                MgrStatus::Internal,
                "a new object does not start at access_control_version 0",
            ));
        }
        Ok(o)
    }

    /// Copy-on-write copies of `l`'s components (drive FastCopy: blocks are shared until
    /// written), for a change staged without touching the committed objects. A component that
    /// is stale, or whose drive cannot copy it, stays as it is and is marked stale in the copy
    /// (the change's writes skip it, a rebuild makes it current later); more of those than the
    /// layout covers fail the staging, and the copies made are removed.
    pub(crate) async fn stage_copies(&self, l: &FileLayout) -> MgrResult<FileLayout> {
        let copies = futures_util::future::join_all(l.components.iter().enumerate().map(
            |(k, &o)| async move {
                if l.is_stale(k) {
                    return None;
                }
                match self.fastcopy(o).await {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::warn!(drive = %o.drive, "component not copied: {}", e.detail);
                        None
                    }
                }
            },
        ))
        .await;
        let mut staged = FileLayout {
            version: l.version + 1,
            geometry: l.geometry.clone(),
            components: l.components.clone(),
            stale: 0,
        };
        for (k, c) in copies.iter().enumerate() {
            match c {
                Some(c) => staged.components[k] = *c,
                None => staged.stale |= 1 << k,
            }
        }
        let lost = staged.stale.count_ones() as usize;
        if lost > tolerated(l) || lost == l.components.len() {
            self.remove_objects(&copies.into_iter().flatten().collect::<Vec<_>>())
                .await;
            return Err(MgrError::new(
                MgrStatus::DriveUnreachable,
                format!(
                    "{lost} of the {} components of this {} file cannot be copied now; it covers {}",
                    l.components.len(),
                    l.geometry,
                    tolerated(l)
                ),
            ));
        }
        Ok(staged)
    }

    /// FastCopy of one object on its drive.
    async fn fastcopy(&self, o: ObjRef) -> MgrResult<ObjRef> {
        let (object, _) = self
            .drives
            .with_working(o.drive, |c, auth, partition| async move {
                c.fastcopy(
                    &auth,
                    Target {
                        partition,
                        object: o.object,
                        protection: MANAGER_PROTECTION,
                    },
                )
                .await
            })
            .await?;
        Ok(ObjRef { object, ..o })
    }

    /// The layout layer over `l`'s objects, reached with the manager's working keys: what
    /// the manager reads, rebuilds and resizes files through.
    pub(crate) fn layout_io(&self, l: &FileLayout, size: u64) -> MgrResult<Striped> {
        let geo = geometry_of(&l.geometry)?;
        let mut parts: Vec<Arc<dyn FileIo>> = Vec::with_capacity(l.components.len());
        for (k, &o) in l.components.iter().enumerate() {
            parts.push(Arc::new(self.object_io(k, o)?));
        }
        Striped::new(geo, parts, size, l.stale)
            .map_err(|e| MgrError::new(MgrStatus::Internal, e.to_string()))
    }

    /// Creates an object on drive `d` whose `fs_specific` mirrors `i` (flagged when it will
    /// hold ciphertext).
    pub(crate) async fn create_object(
        &self,
        d: DriveId,
        i: &Inode,
        encrypted: bool,
    ) -> MgrResult<(ObjRef, Attributes)> {
        let fs = FsAttr::encode(i, encrypted);
        let (object, attrs) = self
            .drives
            .with_working(d, |conn, auth, partition| async move {
                let op = Op::Create {
                    scheme: None,
                    mask: AttrMask::FS_SPECIFIC,
                    attrs: Box::new(Attributes {
                        fs_specific: fs,
                        ..Attributes::default()
                    }),
                };
                let t = Target {
                    partition,
                    object: ObjectId::ANY,
                    protection: MANAGER_PROTECTION,
                };
                let r = conn.call(&auth, t, &op, &[]).await?;
                match (&r.body, r.attributes()) {
                    (ReplyBody::Object { object }, Some(a)) => Ok((*object, a)),
                    _ => Err(nasd_client::ClientError::Usage(
                        "create: unexpected reply".into(),
                    )),
                }
            })
            .await?;
        let partition = self
            .drives
            .record(d)
            .map(|r| r.partition)
            .unwrap_or(drives::FILES_PARTITION);
        Ok((
            ObjRef {
                drive: d,
                partition,
                object,
            },
            attrs,
        ))
    }

    /// Removes objects whose names are already gone from the store, in parallel; a failure
    /// leaves only an unreachable object (logged, and reclaimed by the orphan scrub), never a
    /// visible half-file.
    pub(crate) async fn remove_objects(&self, objects: &[ObjRef]) {
        futures_util::future::join_all(objects.iter().map(|&o| self.remove_object(o))).await;
    }

    /// An object's attributes, read with the working key.
    pub async fn object_attributes(&self, o: ObjRef) -> MgrResult<Attributes> {
        self.drives
            .with_working(o.drive, |c, auth, partition| async move {
                c.getattr(
                    &auth,
                    Target {
                        partition,
                        object: o.object,
                        protection: MANAGER_PROTECTION,
                    },
                )
                .await
            })
            .await
    }

    pub(crate) async fn setattr(
        &self,
        o: ObjRef,
        mask: AttrMask,
        attrs: Attributes,
    ) -> MgrResult<Attributes> {
        self.drives
            .with_working(o.drive, |c, auth, partition| {
                let attrs = attrs.clone();
                async move {
                    c.setattr(
                        &auth,
                        Target {
                            partition,
                            object: o.object,
                            protection: MANAGER_PROTECTION,
                        },
                        mask,
                        attrs,
                    )
                    .await
                }
            })
            .await
    }

    /// Removes one object (see [`Manager::remove_objects`]); an absent component has none.
    pub(crate) async fn remove_object(&self, o: ObjRef) {
        if o.object == ObjectId::ABSENT {
            return;
        }
        let r = self
            .drives
            .with_working(o.drive, |c, auth, partition| async move {
                c.remove(
                    &auth,
                    Target {
                        partition,
                        object: o.object,
                        protection: MANAGER_PROTECTION,
                    },
                )
                .await
            })
            .await;
        if let Err(e) = r {
            tracing::warn!(drive = %o.drive, object = %o.object, "orphaned object not removed: {}", e.detail);
        }
    }

    /// Revokes every capability for the file `i` (seed 002 §2.4): each component's
    /// access_control_version moves to `i.acv` (the new version, already stored with the
    /// revocation intent), and its `fs_specific` mirrors `i`. Idempotent. Returns the
    /// components that could not take it. A layout without
    /// redundancy fails the revocation rather than let a component keep honouring old
    /// capabilities; one with redundancy marks those components stale (never read again until
    /// rebuilt onto fresh objects; an old capability they still honour expires with its
    /// lifetime) as long as it covers them.
    pub(crate) async fn revoke_layout(&self, i: &Inode) -> MgrResult<u64> {
        let Some(l) = &i.layout else {
            return Ok(0);
        };
        let attrs = Attributes {
            access_control_version: i.acv,
            fs_specific: FsAttr::encode(i, i.e2e.is_some()),
            ..Attributes::default()
        };
        let mask = AttrMask::ACCESS_CONTROL_VERSION.with(AttrMask::FS_SPECIFIC);
        let done = futures_util::future::join_all(l.components.iter().map(|&o| {
            let attrs = attrs.clone();
            async move {
                match o.object {
                    ObjectId::ABSENT => Ok(Attributes::default()),
                    _ => self.setattr(o, mask, attrs).await,
                }
            }
        }))
        .await;
        let mut missed = 0u64;
        let mut first = None;
        for (k, r) in done.into_iter().enumerate() {
            if let Err(e) = r {
                if !l.is_stale(k) {
                    missed |= 1 << k;
                    first.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first {
            if (l.stale | missed).count_ones() as usize > tolerated(l) {
                return Err(e);
            }
        }
        Ok(missed)
    }

    /// The file's size and modify time: a one-object file's from its object, another's as
    /// kept here.
    pub(crate) async fn file_times(&self, i: &Inode) -> MgrResult<(u64, u64)> {
        match &i.layout {
            Some(l) if l.sized_by_object() => {
                let a = self.object_attributes(l.first()).await?;
                // An encrypted file's size is kept here (its record's); its modify time is
                // its object's, as a plaintext one's.
                let size = match i.sized_by_object() {
                    true => a.logical_size,
                    false => i.size.unwrap_or(0),
                };
                Ok((size, a.file_mtime_us()))
            }
            Some(_) => Ok((i.size.unwrap_or(0), i.mtime_us)),
            None => Ok((0, i.mtime_us)),
        }
    }

    /// The layout of `i` as the wire carries it, and one capability per component, minted
    /// from `i`'s access_control_version: read/getattr to readers, time-limited write
    /// capabilities to writers, rights never wider than the mode allows. Regions are whole
    /// objects unless a quota bounds the writes (`bound.end`, seed 002 §3.2), when each
    /// component's region ends where writes below that logical offset can reach
    /// ([`crate::quota::regions`]). With `writer_key` the capabilities name the key whose
    /// signature the drives require on every write (seed 001 §3.3.1 scheme 1).
    pub(crate) fn mint_layout(
        &self,
        user: &str,
        path: &str,
        i: &Inode,
        rights: Rights,
        bound: crate::quota::WriteBound,
        writer_key: Option<nasd_proto::WriterPublicKey>,
    ) -> MgrResult<(Layout, Vec<CapGrant>)> {
        let l = i
            .layout
            .as_ref()
            .ok_or_else(|| MgrError::new(MgrStatus::IsADirectory, path.to_string()))?;
        // Pair assertion with the drive's check (STYLE.md): never wider than the policy.
        debug_assert!(!rights.contains(Rights::SETATTR) && !rights.contains(Rights::REMOVE));
        let expiry_ms = bound.expiry_ms;
        let regions = crate::quota::regions(&geometry_of(&l.geometry)?, bound.end);
        let audit_id = nasd_crypto::random_u64();
        let mut components = Vec::with_capacity(l.components.len());
        let mut caps = Vec::with_capacity(l.components.len());
        for (k, o) in l.components.iter().enumerate() {
            let rec = self.drives.record(o.drive).ok_or_else(|| {
                MgrError::new(
                    MgrStatus::DriveUnreachable,
                    format!("{path}: drive {:016x} is not registered", o.drive.0),
                )
            })?;
            let args = CapabilityArgs {
                drive: o.drive,
                partition: o.partition,
                object: o.object,
                region: regions[k],
                rights,
                expiry_ms,
                audit_id,
                min_protection: self.min_protection(),
                writer_key,
            };
            let key = match o.object {
                // No object: a grant that authorizes nothing (no rights, a key no drive has).
                ObjectId::ABSENT => *nasd_crypto::Key::generate().expose(),
                _ => *Capability::mint(rec.suite, &rec.working_key, args, i.acv, false)
                    .key
                    .expose(),
            };
            let args = match o.object {
                ObjectId::ABSENT => CapabilityArgs {
                    rights: Rights::default(),
                    ..args
                },
                _ => args,
            };
            components.push(Component {
                drive: o.drive,
                addr: rec.addr,
                suite: rec.suite,
                partition: o.partition,
                object: o.object,
                stale: l.is_stale(k),
            });
            caps.push(CapGrant { args, key });
        }
        tracing::info!(audit_id, user, path, rights = %rights, components = components.len(), write_end = bound.end, "capabilities issued");
        Ok((
            Layout {
                version: l.version,
                geometry: l.geometry.clone(),
                components,
            },
            caps,
        ))
    }

    /// Sets the size of the file `i` (cut short, or extended with zeros). A one-object file's
    /// object takes it directly. Another layout changes copy-on-write like a client's change:
    /// copies of its components are cut through the layout layer (which zeroes the rest of
    /// the last group so parity stays right), then swapped in with the new size in one store
    /// transaction; the old objects go. Growing needs no copies (bytes past the end read as
    /// zeros, parity included).
    pub(crate) async fn truncate_layout(&self, path: &str, i: &Inode, size: u64) -> MgrResult<()> {
        let l = i
            .layout
            .as_ref()
            .ok_or_else(|| MgrError::new(MgrStatus::IsADirectory, path.to_string()))?;
        if l.sized_by_object() {
            let attrs = Attributes {
                logical_size: size,
                ..Attributes::default()
            };
            self.setattr(l.first(), AttrMask::LOGICAL_SIZE, attrs)
                .await?;
            return Ok(());
        }
        let old_size = i.size.unwrap_or(0);
        if size >= old_size {
            self.st()
                .swap_layout(i.ino, l.version, l, Some(size))
                .map_err(|e| crate::service::store_err(e, path))?;
            return Ok(());
        }
        let staged = self.stage_copies(l).await?;
        let io = self.layout_io(&staged, old_size)?;
        let cut = async {
            io.set_size(size)
                .await
                .map_err(|e| MgrError::new(MgrStatus::DriveUnreachable, e.to_string()))?;
            let mut next = staged.clone();
            next.stale |= io.missed();
            self.st()
                .swap_layout(i.ino, l.version, &next, Some(size))
                .map_err(|e| crate::service::store_err(e, path))
        };
        match cut.await {
            Ok(_) => {
                self.remove_objects(&l.not_in(Some(&staged))).await;
                Ok(())
            }
            Err(e) => {
                self.remove_objects(&staged.not_in(Some(l))).await;
                Err(e)
            }
        }
    }
}
