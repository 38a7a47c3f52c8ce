//! The callback channel (manager protocol 9; seed 002 §3.2): a long poll a client sends on a
//! connection of its own, answered with the breaks of its callbacks.
//! ```text
//! WaitBreaks := u64 acked, u32 wait_ms
//! Breaks     := u32 n (<= BREAKS_PER_REPLY_MAX), n x (u64 seq, u64 ino, u64 parent, string name)
//! ```

use crate::codec::{Reader, Writer};
use crate::manager::codec::{get_count, get_str, put_str};
use crate::manager::Wire;
use crate::DecodeError;

/// Longest wait of one [`WaitBreaks`], in ms; a client polls again at once, so a connection
/// is never idle longer than this.
pub const BREAK_WAIT_MS_MAX: u32 = 20_000;
/// How long a callback that `Stat`, `Lstat` or `Getxattrs` registers lasts, in ms (an `Open`'s
/// lasts as long as its capabilities); a client trusts what it cached under one no longer.
pub const CALLBACK_LEASE_MS: u64 = 30_000;
/// Most breaks in one `Breaks` reply.
pub const BREAKS_PER_REPLY_MAX: usize = 1024;

/// The callback channel's long poll (seed 002 §3.2): acknowledges every break up to
/// sequence number `acked`, then waits up to `wait_ms` (at most [`BREAK_WAIT_MS_MAX`]) for
/// breaks newer than it, answered with the [`CallbackBreak`]s (none when none came). A
/// session holds callbacks only while it polls.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct WaitBreaks {
    pub acked: u64,
    pub wait_ms: u32,
}

impl Wire for WaitBreaks {
    fn put(&self, w: &mut Writer) {
        w.u64(self.acked);
        w.u32(self.wait_ms);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(WaitBreaks {
            acked: r.u64("acked")?,
            wait_ms: r.u32("wait ms")?,
        })
    }
}

/// A callback break: file `ino` changed (its bytes or attributes), or, with `name`, the name
/// `name` of it in directory `parent` was removed, replaced or renamed. The receiver drops
/// what it cached about the file (and that name) before acknowledging `seq`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CallbackBreak {
    pub seq: u64,
    pub ino: u64,
    /// The directory holding `name` (0 when no name is involved).
    pub parent: u64,
    pub name: String,
}

impl Wire for Vec<CallbackBreak> {
    fn put(&self, w: &mut Writer) {
        debug_assert!(self.len() <= BREAKS_PER_REPLY_MAX);
        w.u32(self.len() as u32);
        for b in self {
            w.u64(b.seq);
            w.u64(b.ino);
            w.u64(b.parent);
            put_str(w, &b.name);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = get_count(r, 28, "breaks")?;
        if n > BREAKS_PER_REPLY_MAX {
            return Err(DecodeError::BadValue("breaks"));
        }
        let mut bs = Vec::with_capacity(n);
        for _ in 0..n {
            bs.push(CallbackBreak {
                seq: r.u64("seq")?,
                ino: r.u64("ino")?,
                parent: r.u64("parent")?,
                name: get_str(r, "name")?,
            });
        }
        Ok(bs)
    }
}
