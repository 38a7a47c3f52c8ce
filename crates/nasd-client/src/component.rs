//! The bottom layer of the file stack: one component object on one drive, reached through the
//! connection pool with the capability the manager granted for it (or, in the manager, its
//! working key). A lost connection is retried once on a fresh one; every other failure goes
//! up with the component's index and drive, for the layout layer to route around (a degraded
//! read) or the namespace to renew the capability. Scatter-gather reads and writes go out as
//! one drive request per [`REGIONS_MAX`] regions and [`DATA_BYTES_MAX`] bytes.

use crate::auth::{Auth, Capability};
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
        }
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
            let (auth, t) = (&self.auth, self.target);
            let r = self
                .run(|c| async move { c.read(auth, t, vec![Region::new(offset, len)]).await })
                .await?;
            Ok(ReadOut {
                data: r.data,
                size: r.logical_size,
            })
        })
    }

    fn read_vectored<'a>(&'a self, spans: &'a [Span]) -> IoFuture<'a, ReadOut> {
        Box::pin(async move {
            let (auth, t) = (&self.auth, self.target);
            let mut out = ReadOut {
                data: Vec::with_capacity(spans.iter().map(|s| s.1).sum::<u64>() as usize),
                size: 0,
            };
            for batch in batches(spans) {
                let regions: Vec<Region> = batch.iter().map(|&(o, l)| Region::new(o, l)).collect();
                let r = self
                    .run(|c| {
                        let regions = regions.clone();
                        async move { c.read(auth, t, regions).await }
                    })
                    .await?;
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
            let (auth, t) = (&self.auth, self.target);
            let mut at = 0usize;
            for batch in batches(spans) {
                let n: usize = batch.iter().map(|s| s.1 as usize).sum();
                let bytes = &data[at..at + n];
                at += n;
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
                .await?;
            }
            Ok(())
        })
    }

    fn write<'a>(&'a self, offset: u64, data: &'a [u8]) -> IoFuture<'a, ()> {
        Box::pin(async move {
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
