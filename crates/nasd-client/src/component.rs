//! The bottom layer of the file stack: one component object on one drive, reached through the
//! connection pool with the capability the manager granted for it (or, in the manager, its
//! working key). A lost connection is retried once on a fresh one; every other failure goes
//! up with the component's index and drive, for the layout layer to route around (a degraded
//! read) or the namespace to renew the capability. Scatter-gather reads and writes go out as
//! one drive request per [`REGIONS_MAX`] regions and [`DATA_BYTES_MAX`] bytes.
//!
//! A component of an encrypted MT file carries a pin ([`crate::e2e::pins`]): a reader's checks
//! every reply's size and tree top against what the file's writer pinned at the manager; a
//! writer's keeps the object's tree top itself, reading what it needs with proofs first.

use crate::auth::{Auth, Capability};
use crate::e2e::pins::{chunk_proofs, need_regions, ComponentPin, PinMode};
use crate::layer::{held, FileIo, IoError, IoFuture, ReadOut, Span};
use crate::object::Target;
use crate::pool::ConnPool;
use crate::{ClientError, DriveConn};
use nasd_proto::ops::REGIONS_MAX;
use nasd_proto::{AttrMask, Attributes, Op, Region, Scheme, DATA_BYTES_MAX};
use std::future::Future;
use std::sync::Arc;

/// One component object and the grant for it.
pub struct ComponentIo {
    pool: Arc<ConnPool>,
    /// Its index in the file's layout.
    pub index: usize,
    pub addr: String,
    auth: Auth,
    target: Target,
    pin: Option<Arc<ComponentPin>>,
}

impl ComponentIo {
    pub fn new(pool: Arc<ConnPool>, index: usize, addr: String, cap: Capability) -> ComponentIo {
        let target = Target {
            partition: cap.args.partition,
            object: cap.args.object,
            protection: cap.args.min_protection,
        };
        Self::with_auth(pool, index, addr, Auth::Capability(cap), target)
    }

    /// A component reached with any authority (the manager's working key).
    pub fn with_auth(
        pool: Arc<ConnPool>,
        index: usize,
        addr: String,
        auth: Auth,
        target: Target,
    ) -> ComponentIo {
        ComponentIo {
            pool,
            index,
            addr,
            auth,
            target,
            pin: None,
        }
    }

    /// This component, checking its replies against `pin` (a reader's) or keeping track of
    /// its tree (a writer's).
    pub fn with_pin(mut self, pin: Arc<ComponentPin>) -> ComponentIo {
        self.pin = Some(pin);
        self
    }

    /// A reply's object must be the pinned one (MT-EINT): its size and tree top.
    fn check_pinned(
        &self,
        pin: &ComponentPin,
        r: &crate::object::ReadResult,
    ) -> Result<(), IoError> {
        let ok = r
            .tree
            .as_ref()
            .is_some_and(|t| pin.matches(r.logical_size, &t.top));
        if ok {
            return Ok(());
        }
        Err(self.err(ClientError::Integrity {
            op: "read",
            what: format!(
                "the object is not the version the file's writer pinned (drive reports {} bytes{}): an older, another or a forged copy",
                r.logical_size,
                if r.tree.is_none() { " and no tree top" } else { "" }
            ),
        }))
    }

    /// Reads `regions` as one request, checked against the pin if there is one (a writer's
    /// track is read with its writes drained).
    async fn read_regions(
        &self,
        regions: Vec<Region>,
    ) -> Result<crate::object::ReadResult, IoError> {
        let (auth, t) = (&self.auth, self.target);
        let read = || {
            self.run(|c| {
                let regions = regions.clone();
                async move { c.read(auth, t, regions).await }
            })
        };
        let Some(pin) = &self.pin else {
            return read().await;
        };
        let _alone = match pin.mode {
            PinMode::Track(_) => Some(pin.gate.write().await),
            PinMode::Check(_) => None,
        };
        let r = read().await?;
        self.check_pinned(pin, &r)?;
        Ok(r)
    }

    /// Brings a writer's track to where `plan` holds: reads the chunks it needs, with proofs,
    /// and installs them (checked against the track's own top). Called with the gate held
    /// alone.
    async fn fill_track(
        &self,
        pin: &ComponentPin,
        plan: impl Fn(
            &nasd_crypto::integrity::track::TreeTrack,
        ) -> Result<(), nasd_crypto::integrity::track::Need>,
    ) -> Result<(), IoError> {
        let PinMode::Track(track) = &pin.mode else {
            return Ok(());
        };
        for _ in 0..2 {
            let (need, size) = {
                let t = track.lock().expect("track lock");
                match plan(&t) {
                    Ok(()) => return Ok(()),
                    Err(need) => (need, t.size()),
                }
            };
            let regions: Vec<Region> = need_regions(&need, size)
                .into_iter()
                .map(|(o, l)| Region::new(o, l))
                .collect();
            let (auth, t) = (&self.auth, self.target);
            let r = self
                .run(|c| {
                    let regions = regions.clone();
                    async move { c.read(auth, t, regions).await }
                })
                .await?;
            let bad = |what: String| self.err(ClientError::Integrity { op: "read", what });
            let tv = r
                .tree
                .as_ref()
                .ok_or_else(|| bad("a tree read without its top".into()))?;
            let chunks = chunk_proofs(&need, size, &r.data, &tv.proofs)
                .ok_or_else(|| bad("a tree read whose proofs do not match its regions".into()))?;
            let mut cost = nasd_crypto::Cost::default();
            track
                .lock()
                .expect("track lock")
                .install(r.logical_size, &tv.top, &chunks, &mut cost)
                .map_err(|e| {
                    bad(format!(
                        "the object is not what this writer left it as: {e}"
                    ))
                })?;
        }
        Err(self.err(ClientError::Integrity {
            op: "write",
            what: "the object's tree could not be brought up to date".into(),
        }))
    }

    /// Sends one batch of spans as a drive write.
    async fn send(&self, batch: &[Span], bytes: &[u8]) -> Result<(), IoError> {
        let (auth, t) = (&self.auth, self.target);
        let regions: Vec<Region> = batch.iter().map(|&(o, l)| Region::new(o, l)).collect();
        self.run(|c| {
            let regions = regions.clone();
            async move {
                let form = c
                    .known_scheme(t.partition, t.object)
                    .unwrap_or(Scheme::Tree);
                c.write_regions(auth, t, regions, form, false, bytes).await
            }
        })
        .await
        .map(|_| ())
    }

    /// A writer's write: each span folded into the track before it is sent; a span the track
    /// cannot take at once waits for the writes in flight, reads what it needs, then goes.
    async fn write_tracked(
        &self,
        pin: &ComponentPin,
        spans: &[Span],
        data: &[u8],
    ) -> Result<(), IoError> {
        let PinMode::Track(track) = &pin.mode else {
            return Err(self.err(ClientError::Usage(
                "a reader's component was written".into(),
            )));
        };
        let mut cost = nasd_crypto::Cost::default();
        let mut at = 0usize;
        let mut k = 0;
        while k < spans.len() {
            // The spans the track takes now, sent under the shared gate.
            let shared = pin.gate.read().await;
            let mut n = 0;
            {
                let mut t = track.lock().expect("track lock");
                let mut off = at;
                for &(o, l) in &spans[k..] {
                    if t.plan_write(o, l).is_err() {
                        break;
                    }
                    t.apply_write(o, &data[off..off + l as usize], &mut cost);
                    off += l as usize;
                    n += 1;
                }
            }
            if n > 0 {
                let bytes: usize = spans[k..k + n].iter().map(|s| s.1 as usize).sum();
                self.write_batches(&spans[k..k + n], &data[at..at + bytes])
                    .await?;
                at += bytes;
                k += n;
                continue;
            }
            drop(shared);
            // One span alone: drain, bring the track up to date, apply, send.
            let _alone = pin.gate.write().await;
            let (o, l) = spans[k];
            self.fill_track(pin, |t| t.plan_write(o, l)).await?;
            track
                .lock()
                .expect("track lock")
                .apply_write(o, &data[at..at + l as usize], &mut cost);
            self.write_batches(&spans[k..k + 1], &data[at..at + l as usize])
                .await?;
            at += l as usize;
            k += 1;
        }
        Ok(())
    }

    async fn write_batches(&self, spans: &[Span], data: &[u8]) -> Result<(), IoError> {
        let mut at = 0usize;
        for batch in batches(spans) {
            let n: usize = batch.iter().map(|s| s.1 as usize).sum();
            self.send(&batch, &data[at..at + n]).await?;
            at += n;
        }
        Ok(())
    }

    fn err(&self, error: ClientError) -> IoError {
        IoError::Drive {
            component: self.index,
            addr: self.addr.clone(),
            error,
        }
    }

    /// Runs `f` on a pooled connection; a lost connection is dropped and `f` tried once more
    /// on a fresh one.
    async fn run<T, F, Fut>(&self, f: F) -> Result<T, IoError>
    where
        F: Fn(Arc<DriveConn>) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let mut retried = false;
        loop {
            let c = self.pool.get(&self.addr).await.map_err(|e| {
                self.pool.mark_down(&self.addr);
                self.err(e)
            })?;
            match f(c.clone()).await {
                Err(ClientError::ConnectionLost(_) | ClientError::Timeout { .. }) if !retried => {
                    retried = true;
                    self.pool.drop_conn(&self.addr, &c);
                }
                Err(e @ (ClientError::ConnectionLost(_) | ClientError::Timeout { .. })) => {
                    self.pool.drop_conn(&self.addr, &c);
                    self.pool.mark_down(&self.addr);
                    return Err(self.err(e));
                }
                r => return r.map_err(|e| self.err(e)),
            }
        }
    }

    /// The object's attributes (its size, its `fs_specific` record).
    pub async fn getattr(&self) -> Result<Attributes, IoError> {
        let (auth, t) = (&self.auth, self.target);
        self.run(|c| async move { c.getattr(auth, t).await }).await
    }
}

impl FileIo for ComponentIo {
    fn read(&self, offset: u64, len: u64) -> IoFuture<'_, ReadOut> {
        Box::pin(async move {
            let r = self.read_regions(vec![Region::new(offset, len)]).await?;
            Ok(ReadOut {
                data: r.data,
                size: r.logical_size,
            })
        })
    }

    fn read_vectored<'a>(&'a self, spans: &'a [Span]) -> IoFuture<'a, ReadOut> {
        Box::pin(async move {
            let mut out = ReadOut {
                data: Vec::with_capacity(spans.iter().map(|s| s.1).sum::<u64>() as usize),
                size: 0,
            };
            for batch in batches(spans) {
                let regions: Vec<Region> = batch.iter().map(|&(o, l)| Region::new(o, l)).collect();
                let r = self.read_regions(regions).await?;
                let want: u64 = batch.iter().map(|&s| held(s, r.logical_size)).sum();
                if r.data.len() as u64 != want {
                    return Err(self.err(ClientError::Integrity {
                        op: "read",
                        what: format!(
                            "{} bytes for regions that hold {want} of an object of {}",
                            r.data.len(),
                            r.logical_size
                        ),
                    }));
                }
                out.size = r.logical_size;
                if out.data.is_empty() {
                    out.data = r.data;
                } else {
                    out.data.extend_from_slice(&r.data);
                }
            }
            Ok(out)
        })
    }

    fn write_vectored<'a>(&'a self, spans: &'a [Span], data: &'a [u8]) -> IoFuture<'a, ()> {
        Box::pin(async move {
            match &self.pin {
                Some(pin) => self.write_tracked(pin, spans, data).await,
                None => self.write_batches(spans, data).await,
            }
        })
    }

    fn write<'a>(&'a self, offset: u64, data: &'a [u8]) -> IoFuture<'a, ()> {
        Box::pin(async move {
            if let Some(pin) = &self.pin {
                return self
                    .write_tracked(pin, &[(offset, data.len() as u64)], data)
                    .await;
            }
            let (auth, t) = (&self.auth, self.target);
            self.run(|c| async move { c.write(auth, t, offset, data).await })
                .await
                .map(|_| ())
        })
    }

    fn available(&self) -> bool {
        !self.pool.is_down(&self.addr)
    }

    fn size(&self) -> IoFuture<'_, u64> {
        Box::pin(async move { Ok(self.getattr().await?.logical_size) })
    }

    /// Extends by writing a zero byte at the new end (a write capability holds no setattr
    /// right); cutting short takes a setattr, which only the manager's capabilities allow.
    fn set_size(&self, size: u64) -> IoFuture<'_, ()> {
        Box::pin(async move {
            let now = self.getattr().await?.logical_size;
            if size > now {
                return self.write(size - 1, &[0]).await;
            }
            if size == now {
                return Ok(());
            }
            let (auth, t) = (&self.auth, self.target);
            let op = Op::SetAttr {
                mask: AttrMask::LOGICAL_SIZE,
                attrs: Box::new(Attributes {
                    logical_size: size,
                    ..Attributes::default()
                }),
                signature: None,
            };
            self.run(|c| {
                let op = op.clone();
                async move { c.call(auth, t, &op, &[]).await }
            })
            .await
            .map(|_| ())
        })
    }
}

/// `spans` cut into runs a drive takes in one request: at most [`REGIONS_MAX`] regions and
/// [`DATA_BYTES_MAX`] bytes (a longer span goes alone, in pieces of that size).
fn batches(spans: &[Span]) -> Vec<Vec<Span>> {
    let max = DATA_BYTES_MAX as u64;
    let mut out: Vec<Vec<Span>> = vec![];
    let mut cur: Vec<Span> = vec![];
    let mut bytes = 0u64;
    for &(mut o, mut l) in spans {
        while l > 0 {
            if cur.len() == REGIONS_MAX || bytes == max {
                out.push(std::mem::take(&mut cur));
                bytes = 0;
            }
            let take = l.min(max - bytes);
            cur.push((o, take));
            bytes += take;
            o += take;
            l -= take;
        }
    }
    if !cur.is_empty() || out.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_respect_the_region_and_byte_limits_and_keep_order() {
        let max = DATA_BYTES_MAX as u64;
        assert_eq!(batches(&[]), vec![Vec::<Span>::new()]);
        assert_eq!(batches(&[(0, 5), (10, 5)]), vec![vec![(0, 5), (10, 5)]]);
        let many: Vec<Span> = (0..REGIONS_MAX as u64 + 1).map(|i| (i * 10, 1)).collect();
        let b = batches(&many);
        assert_eq!((b.len(), b[0].len(), b[1].len()), (2, REGIONS_MAX, 1));
        let b = batches(&[(7, max + 3), (1, 2)]);
        assert_eq!(b, vec![vec![(7, max)], vec![(7 + max, 3), (1, 2)]]);
        let flat: Vec<Span> = b.concat();
        assert_eq!(flat.iter().map(|s| s.1).sum::<u64>(), max + 5);
    }
}
