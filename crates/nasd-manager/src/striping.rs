//! The striping manager (seed 002 §3.3): what a file's layout means on the drives, kept apart
//! from the namespace code, which sees only an object-like file — create, attributes, revoke,
//! remove, capabilities. It owns the allocation of component objects and their capabilities.
//!
//! Invariants:
//! - a layout's components lie on distinct drives, chosen among the healthy ones;
//! - every component of a file carries the file's `fs_specific` record (so any one proves which
//!   file it belongs to) and the file's access_control_version: they are created together at
//!   version 0, and revocation moves them together, so one capability key per component is
//!   minted from the one version the inode keeps;
//! - a file spread over several objects has its size and modify time kept here (component
//!   sizes include padding and parity); a one-object file's are its object's attributes.

use crate::drives::{self, MANAGER_PROTECTION};
use crate::service::{effective_mtime, FsAttr, Manager};
use crate::store::{FileLayout, Inode, ObjRef};
use crate::{MgrError, MgrResult};
use nasd_client::object::Target;
use nasd_client::Capability;
use nasd_proto::manager::{CapGrant, Component, Layout, MgrStatus};
use nasd_proto::{
    AttrMask, Attributes, CapabilityArgs, DriveId, ObjectId, Op, Region, ReplyBody, Rights,
};

/// The layout every file gets when neither its directory nor an ancestor names one, unless
/// the cluster's policy says otherwise.
pub const DEFAULT_LAYOUT: &str = "single";

/// The number of component objects a layout spec asks for, or why it is not a layout.
pub fn components_of(spec: &str) -> MgrResult<usize> {
    match spec {
        "single" => Ok(1),
        _ => Err(MgrError::new(
            MgrStatus::InvalidArgument,
            format!("layout {spec:?}: not a layout this manager knows"),
        )),
    }
}

/// What capabilities for a file allow.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    Read,
    Write,
}

impl Manager {
    /// Creates the component objects of a new layout `spec` for the file `i`, on distinct
    /// healthy drives and in parallel, each with `i`'s `fs_specific` record. On any failure
    /// the objects already made are removed.
    pub(crate) async fn create_layout(&self, spec: &str, i: &Inode) -> MgrResult<FileLayout> {
        let n = components_of(spec)?;
        let drives = self.drives.choose_n(n)?;
        let made =
            futures_util::future::join_all(drives.iter().map(|&d| self.create_object(d, i))).await;
        let mut components = Vec::with_capacity(n);
        let mut failure = None;
        for r in made {
            match r {
                Ok((o, a)) if a.access_control_version == 0 => components.push(o),
                Ok((o, _)) => {
                    components.push(o);
                    failure.get_or_insert(MgrError::new(
                        MgrStatus::Internal,
                        "a new object does not start at access_control_version 0",
                    ));
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure {
            self.remove_objects(&components).await;
            return Err(e);
        }
        Ok(FileLayout {
            version: 1,
            geometry: spec.to_string(),
            components,
            stale: 0,
        })
    }

    /// Creates an object on drive `d` whose `fs_specific` mirrors `i`.
    async fn create_object(&self, d: DriveId, i: &Inode) -> MgrResult<(ObjRef, Attributes)> {
        let fs = FsAttr::encode(i);
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

    /// Removes one object (see [`Manager::remove_objects`]).
    pub(crate) async fn remove_object(&self, o: ObjRef) {
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
    /// access_control_version moves to `i.acv + 1`, and its `fs_specific` mirrors `i`.
    /// Returns the new version. Every component must take it: a component that cannot be
    /// reached fails the revocation rather than keep honouring old capabilities.
    pub(crate) async fn revoke_layout(&self, i: &Inode) -> MgrResult<u64> {
        let Some(l) = &i.layout else {
            return Ok(i.acv);
        };
        let attrs = Attributes {
            access_control_version: i.acv + 1,
            fs_specific: FsAttr::encode(i),
            ..Attributes::default()
        };
        let mask = AttrMask::ACCESS_CONTROL_VERSION.with(AttrMask::FS_SPECIFIC);
        let done = futures_util::future::join_all(
            l.components
                .iter()
                .map(|&o| self.setattr(o, mask, attrs.clone())),
        )
        .await;
        for r in done {
            r?;
        }
        Ok(i.acv + 1)
    }

    /// The file's size and modify time: a one-object file's from its object, another's as
    /// kept here.
    pub(crate) async fn file_times(&self, i: &Inode) -> MgrResult<(u64, u64)> {
        match &i.layout {
            Some(l) if l.sized_by_object() => {
                let a = self.object_attributes(l.first()).await?;
                Ok((a.logical_size, effective_mtime(&a)))
            }
            Some(_) => Ok((i.size.unwrap_or(0), i.mtime_us)),
            None => Ok((0, i.mtime_us)),
        }
    }

    /// The layout of `i` as the wire carries it, and one capability per component, minted
    /// from `i`'s access_control_version: read/getattr to readers, time-limited write
    /// capabilities to writers, whole-object regions, rights never wider than the mode allows.
    pub(crate) fn mint_layout(
        &self,
        user: &str,
        path: &str,
        i: &Inode,
        rights: Rights,
        ttl_ms: u64,
    ) -> MgrResult<(Layout, Vec<CapGrant>)> {
        let l = i
            .layout
            .as_ref()
            .ok_or_else(|| MgrError::new(MgrStatus::IsADirectory, path.to_string()))?;
        // Pair assertion with the drive's check (STYLE.md): never wider than the policy.
        debug_assert!(!rights.contains(Rights::SETATTR) && !rights.contains(Rights::REMOVE));
        let expiry_ms = crate::now_ms() + ttl_ms;
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
                region: Region::new(0, u64::MAX),
                rights,
                expiry_ms,
                audit_id,
                min_protection: self.min_protection(),
            };
            let cap = Capability::mint(rec.suite, &rec.working_key, args, i.acv, false);
            components.push(Component {
                drive: o.drive,
                addr: rec.addr,
                suite: rec.suite,
                partition: o.partition,
                object: o.object,
                stale: l.is_stale(k),
            });
            caps.push(CapGrant {
                args,
                key: *cap.key.expose(),
            });
        }
        tracing::info!(audit_id, user, path, rights = %rights, components = components.len(), "capabilities issued");
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
    /// object takes it directly; another layout's components are resized through the layout
    /// layer, which keeps parity consistent, and the store keeps the new size.
    pub(crate) async fn truncate_layout(
        &self,
        path: &str,
        l: &FileLayout,
        size: u64,
    ) -> MgrResult<()> {
        if l.sized_by_object() {
            let attrs = Attributes {
                logical_size: size,
                ..Attributes::default()
            };
            self.setattr(l.first(), AttrMask::LOGICAL_SIZE, attrs)
                .await?;
            return Ok(());
        }
        Err(MgrError::new(
            MgrStatus::InvalidArgument,
            format!("{path}: truncating a {} file is not supported", l.geometry),
        ))
    }
}
