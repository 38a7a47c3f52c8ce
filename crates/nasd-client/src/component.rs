//! The bottom layer of the file stack: one component object on one drive, reached through the
//! connection pool with the capability the manager granted for it. A lost connection is
//! retried once on a fresh one; every other failure goes up with the component's index and
//! drive, for the layout layer to route around (a degraded read) or the namespace to renew
//! the capability.

use crate::auth::{Auth, Capability};
use crate::layer::{FileIo, IoError, IoFuture, ReadOut};
use crate::object::Target;
use crate::pool::ConnPool;
use crate::{ClientError, DriveConn};
use nasd_proto::{AttrMask, Attributes, Op, Region};
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
        ComponentIo {
            pool,
            index,
            addr,
            auth: Auth::Capability(cap),
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
            let c = self.pool.get(&self.addr).await.map_err(|e| self.err(e))?;
            match f(c.clone()).await {
                Err(ClientError::ConnectionLost(_) | ClientError::Timeout { .. }) if !retried => {
                    retried = true;
                    self.pool.drop_conn(&self.addr, &c);
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

    fn write<'a>(&'a self, offset: u64, data: &'a [u8]) -> IoFuture<'a, ()> {
        Box::pin(async move {
            let (auth, t) = (&self.auth, self.target);
            self.run(|c| async move { c.write(auth, t, offset, data).await })
                .await
                .map(|_| ())
        })
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
