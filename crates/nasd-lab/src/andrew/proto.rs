//! The protocol of the baseline file server ([`super::server`]): every file operation of
//! the benchmark as one request and one reply over TCP, by path, like an NFS server without
//! file handles. Lab-only; little-endian; one request at a time per connection.
//!
//! ```text
//! frame    body_len u32 | body                  (body_len <= FRAME_BYTES_MAX)
//! request  op u8 | path_len u16 | path (UTF-8) | arguments of op
//!   0 stat     -                                 -> attr
//!   1 list     -                                 -> entries
//!   2 mkdir    mode u32                          -> attr
//!   3 create   mode u32   (truncates)            -> attr
//!   4 read     offset u64 | length u32           -> data
//!   5 write    offset u64 | len u32 | bytes      -> written
//!   6 truncate size u64                          -> attr
//!   7 unlink   -                                 -> done
//!   8 rmdir    -                                 -> done
//!   9 rename   to_len u16 | to (UTF-8)           -> done
//!  10 chmod    mode u32                          -> attr
//!  11 utimes   mtime_us u64                      -> attr
//!  12 commit   -   (the file's data to disk)     -> done
//! reply    tag u8 | payload
//!   0 error    code u8 (ErrorCode)
//!   1 done     -
//!   2 attr     attr
//!   3 entries  count u32 | (name_len u16 | name | attr) x count
//!   4 data     len u32 | bytes
//!   5 written  len u32
//! attr     kind u8 (1 file, 2 dir, 3 symlink) | mode u32 | size u64 | mtime_us u64 |
//!          ctime_us u64 | ino u64 | nlink u32 | uid u32 | gid u32          (49 bytes)
//! ```
//!
//! Every decoder is total: short input, trailing bytes, an unknown tag, a bad kind, a path
//! or name that is not UTF-8 or is too long, or a length over its bound is an error, never
//! a panic, and lengths are checked before anything is allocated.

use std::io::{Read, Write};

/// Largest frame body, bytes: one full write or read plus its header, or a listing.
pub const FRAME_BYTES_MAX: usize = 2 << 20;
/// Largest read or write of one request, bytes (what the FUSE client asks the kernel for).
pub const DATA_BYTES_MAX: usize = 1 << 20;
/// Longest path, bytes (Linux's PATH_MAX).
pub const PATH_BYTES_MAX: usize = 4096;
/// Longest name in a listing, bytes (Linux's NAME_MAX).
pub const NAME_BYTES_MAX: usize = 255;
/// Most entries in one listing.
pub const ENTRIES_MAX: usize = 4096;
/// Bytes of an encoded [`Attr`].
pub const ATTR_BYTES: usize = 49;

const _: () = assert!(DATA_BYTES_MAX + 1 + 2 + PATH_BYTES_MAX + 12 <= FRAME_BYTES_MAX);
const _: () = assert!(4 + ENTRIES_MAX * (2 + NAME_BYTES_MAX + ATTR_BYTES) <= FRAME_BYTES_MAX);

/// What a decoder found wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtoError {
    /// The input ended before the message did.
    #[error("truncated message")]
    Truncated,
    /// Bytes are left after the message.
    #[error("{0} bytes after the message")]
    Trailing(usize),
    /// An unknown operation or reply tag.
    #[error("unknown tag {0}")]
    Tag(u8),
    /// An unknown file kind in an attribute.
    #[error("unknown file kind {0}")]
    Kind(u8),
    /// An unknown error code.
    #[error("unknown error code {0}")]
    Code(u8),
    /// A path or name is not UTF-8.
    #[error("a name that is not UTF-8")]
    Utf8,
    /// A length over its bound.
    #[error("{what} of {len} bytes: at most {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
}

/// A file's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
}

/// A file's attributes as the server's file system has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    pub kind: Kind,
    pub mode: u32,
    pub size: u64,
    pub mtime_us: u64,
    pub ctime_us: u64,
    pub ino: u64,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
}

/// Why an operation failed, as stable codes (the client turns them into errnos).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    NotFound = 1,
    Exists = 2,
    NotEmpty = 3,
    NotDir = 4,
    IsDir = 5,
    Access = 6,
    Invalid = 7,
    Io = 8,
    NameTooLong = 9,
    NoSpace = 10,
}

impl ErrorCode {
    fn of(c: u8) -> Result<ErrorCode, ProtoError> {
        use ErrorCode::*;
        Ok(match c {
            1 => NotFound,
            2 => Exists,
            3 => NotEmpty,
            4 => NotDir,
            5 => IsDir,
            6 => Access,
            7 => Invalid,
            8 => Io,
            9 => NameTooLong,
            10 => NoSpace,
            c => return Err(ProtoError::Code(c)),
        })
    }

    /// The code of a server-side I/O error.
    pub fn of_io(e: &std::io::Error) -> ErrorCode {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::NotFound => ErrorCode::NotFound,
            K::AlreadyExists => ErrorCode::Exists,
            K::DirectoryNotEmpty => ErrorCode::NotEmpty,
            K::NotADirectory => ErrorCode::NotDir,
            K::IsADirectory => ErrorCode::IsDir,
            K::PermissionDenied => ErrorCode::Access,
            K::InvalidInput | K::InvalidFilename => ErrorCode::Invalid,
            K::StorageFull => ErrorCode::NoSpace,
            _ => ErrorCode::Io,
        }
    }

    /// The errno a program sees.
    pub fn errno(self) -> i32 {
        match self {
            ErrorCode::NotFound => libc::ENOENT,
            ErrorCode::Exists => libc::EEXIST,
            ErrorCode::NotEmpty => libc::ENOTEMPTY,
            ErrorCode::NotDir => libc::ENOTDIR,
            ErrorCode::IsDir => libc::EISDIR,
            ErrorCode::Access => libc::EACCES,
            ErrorCode::Invalid => libc::EINVAL,
            ErrorCode::Io => libc::EIO,
            ErrorCode::NameTooLong => libc::ENAMETOOLONG,
            ErrorCode::NoSpace => libc::ENOSPC,
        }
    }
}

/// One request: an operation on a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub path: String,
    pub op: Op,
}

/// The operations and their arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Stat,
    List,
    Mkdir {
        mode: u32,
    },
    Create {
        mode: u32,
    },
    Read {
        offset: u64,
        length: u32,
    },
    Write {
        offset: u64,
        data: Vec<u8>,
    },
    Truncate {
        size: u64,
    },
    Unlink,
    Rmdir,
    Rename {
        to: String,
    },
    Chmod {
        mode: u32,
    },
    Utimes {
        mtime_us: u64,
    },
    /// Make what was written to the file stable (NFSv3's COMMIT), sent when it is closed.
    Commit,
}

/// One reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Error(ErrorCode),
    Done,
    Attr(Attr),
    Entries(Vec<(String, Attr)>),
    Data(Vec<u8>),
    Written(u32),
}

/// Reads what a decoder has not consumed yet.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.0.len() < n {
            return Err(ProtoError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, ProtoError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    /// A `len u16 | UTF-8` string of at most `max` bytes.
    fn str16(&mut self, what: &'static str, max: usize) -> Result<String, ProtoError> {
        let len = self.u16()? as usize;
        if len > max {
            return Err(ProtoError::TooLong { what, len, max });
        }
        let b = self.take(len)?;
        String::from_utf8(b.to_vec()).map_err(|_| ProtoError::Utf8)
    }

    /// A `len u32 | bytes` run of at most [`DATA_BYTES_MAX`] bytes.
    fn data(&mut self) -> Result<Vec<u8>, ProtoError> {
        let len = self.u32()? as usize;
        if len > DATA_BYTES_MAX {
            return Err(ProtoError::TooLong {
                what: "data",
                len,
                max: DATA_BYTES_MAX,
            });
        }
        Ok(self.take(len)?.to_vec())
    }

    fn attr(&mut self) -> Result<Attr, ProtoError> {
        let kind = match self.u8()? {
            1 => Kind::File,
            2 => Kind::Dir,
            3 => Kind::Symlink,
            k => return Err(ProtoError::Kind(k)),
        };
        Ok(Attr {
            kind,
            mode: self.u32()?,
            size: self.u64()?,
            mtime_us: self.u64()?,
            ctime_us: self.u64()?,
            ino: self.u64()?,
            nlink: self.u32()?,
            uid: self.u32()?,
            gid: self.u32()?,
        })
    }

    fn end(&self) -> Result<(), ProtoError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(ProtoError::Trailing(n)),
        }
    }
}

fn put_str16(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_attr(out: &mut Vec<u8>, a: &Attr) {
    out.push(match a.kind {
        Kind::File => 1,
        Kind::Dir => 2,
        Kind::Symlink => 3,
    });
    out.extend_from_slice(&a.mode.to_le_bytes());
    out.extend_from_slice(&a.size.to_le_bytes());
    out.extend_from_slice(&a.mtime_us.to_le_bytes());
    out.extend_from_slice(&a.ctime_us.to_le_bytes());
    out.extend_from_slice(&a.ino.to_le_bytes());
    out.extend_from_slice(&a.nlink.to_le_bytes());
    out.extend_from_slice(&a.uid.to_le_bytes());
    out.extend_from_slice(&a.gid.to_le_bytes());
}

impl Request {
    /// The request's frame body. Callers keep paths within [`PATH_BYTES_MAX`] and data
    /// within [`DATA_BYTES_MAX`] (asserted: a longer one is a programmer error).
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.path.len() <= PATH_BYTES_MAX, "path too long");
        let mut out = Vec::with_capacity(32 + self.path.len());
        let tag = match &self.op {
            Op::Stat => 0,
            Op::List => 1,
            Op::Mkdir { .. } => 2,
            Op::Create { .. } => 3,
            Op::Read { .. } => 4,
            Op::Write { .. } => 5,
            Op::Truncate { .. } => 6,
            Op::Unlink => 7,
            Op::Rmdir => 8,
            Op::Rename { .. } => 9,
            Op::Chmod { .. } => 10,
            Op::Utimes { .. } => 11,
            Op::Commit => 12,
        };
        out.push(tag);
        put_str16(&mut out, &self.path);
        match &self.op {
            Op::Stat | Op::List | Op::Unlink | Op::Rmdir | Op::Commit => {}
            Op::Mkdir { mode } | Op::Create { mode } | Op::Chmod { mode } => {
                out.extend_from_slice(&mode.to_le_bytes())
            }
            Op::Read { offset, length } => {
                assert!(*length as usize <= DATA_BYTES_MAX, "read too long");
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&length.to_le_bytes());
            }
            Op::Write { offset, data } => {
                assert!(data.len() <= DATA_BYTES_MAX, "write too long");
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&(data.len() as u32).to_le_bytes());
                out.extend_from_slice(data);
            }
            Op::Truncate { size } => out.extend_from_slice(&size.to_le_bytes()),
            Op::Rename { to } => {
                assert!(to.len() <= PATH_BYTES_MAX, "path too long");
                put_str16(&mut out, to)
            }
            Op::Utimes { mtime_us } => out.extend_from_slice(&mtime_us.to_le_bytes()),
        }
        out
    }

    /// A request from a frame body.
    pub fn decode(body: &[u8]) -> Result<Request, ProtoError> {
        let mut c = Cursor(body);
        let tag = c.u8()?;
        let path = c.str16("path", PATH_BYTES_MAX)?;
        let op = match tag {
            0 => Op::Stat,
            1 => Op::List,
            2 => Op::Mkdir { mode: c.u32()? },
            3 => Op::Create { mode: c.u32()? },
            4 => {
                let offset = c.u64()?;
                let length = c.u32()?;
                if length as usize > DATA_BYTES_MAX {
                    return Err(ProtoError::TooLong {
                        what: "read",
                        len: length as usize,
                        max: DATA_BYTES_MAX,
                    });
                }
                Op::Read { offset, length }
            }
            5 => Op::Write {
                offset: c.u64()?,
                data: c.data()?,
            },
            6 => Op::Truncate { size: c.u64()? },
            7 => Op::Unlink,
            8 => Op::Rmdir,
            9 => Op::Rename {
                to: c.str16("path", PATH_BYTES_MAX)?,
            },
            10 => Op::Chmod { mode: c.u32()? },
            11 => Op::Utimes { mtime_us: c.u64()? },
            12 => Op::Commit,
            t => return Err(ProtoError::Tag(t)),
        };
        c.end()?;
        Ok(Request { path, op })
    }
}

impl Reply {
    /// The reply's frame body. Listings and data stay within their bounds (asserted).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        match self {
            Reply::Error(code) => out.extend_from_slice(&[0, *code as u8]),
            Reply::Done => out.push(1),
            Reply::Attr(a) => {
                out.push(2);
                put_attr(&mut out, a);
            }
            Reply::Entries(v) => {
                assert!(v.len() <= ENTRIES_MAX, "listing too long");
                out.push(3);
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                for (name, a) in v {
                    assert!(name.len() <= NAME_BYTES_MAX, "name too long");
                    put_str16(&mut out, name);
                    put_attr(&mut out, a);
                }
            }
            Reply::Data(d) => {
                assert!(d.len() <= DATA_BYTES_MAX, "data too long");
                out.push(4);
                out.extend_from_slice(&(d.len() as u32).to_le_bytes());
                out.extend_from_slice(d);
            }
            Reply::Written(n) => {
                out.push(5);
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        out
    }

    /// A reply from a frame body.
    pub fn decode(body: &[u8]) -> Result<Reply, ProtoError> {
        let mut c = Cursor(body);
        let r = match c.u8()? {
            0 => Reply::Error(ErrorCode::of(c.u8()?)?),
            1 => Reply::Done,
            2 => Reply::Attr(c.attr()?),
            3 => {
                let n = c.u32()? as usize;
                if n > ENTRIES_MAX {
                    return Err(ProtoError::TooLong {
                        what: "listing",
                        len: n,
                        max: ENTRIES_MAX,
                    });
                }
                let mut v = Vec::with_capacity(n.min(c.0.len() / (2 + ATTR_BYTES)));
                for _ in 0..n {
                    let name = c.str16("name", NAME_BYTES_MAX)?;
                    v.push((name, c.attr()?));
                }
                Reply::Entries(v)
            }
            4 => Reply::Data(c.data()?),
            5 => Reply::Written(c.u32()?),
            t => return Err(ProtoError::Tag(t)),
        };
        c.end()?;
        Ok(r)
    }
}

/// Writes one frame: `body_len u32 | body`.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    assert!(body.len() <= FRAME_BYTES_MAX, "frame too long");
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(body);
    w.write_all(&frame)
}

/// Reads one frame's body: `None` when the peer closed between frames; an error for a
/// frame over [`FRAME_BYTES_MAX`] (checked before allocating) or one cut short.
pub fn read_frame(r: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes: at most {FRAME_BYTES_MAX}"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn attr(ino: u64) -> Attr {
        Attr {
            kind: Kind::File,
            mode: 0o644,
            size: 1 << 33,
            mtime_us: 1_700_000_000_000_000,
            ctime_us: 1_700_000_000_000_001,
            ino,
            nlink: 2,
            uid: 0,
            gid: 7,
        }
    }

    fn requests() -> Vec<Request> {
        let r = |op| Request {
            path: "/src/util/m00.c".into(),
            op,
        };
        vec![
            r(Op::Stat),
            r(Op::List),
            r(Op::Mkdir { mode: 0o755 }),
            r(Op::Create { mode: 0o644 }),
            r(Op::Read {
                offset: 1 << 40,
                length: DATA_BYTES_MAX as u32,
            }),
            r(Op::Write {
                offset: 3,
                data: vec![9; 1000],
            }),
            r(Op::Truncate { size: 77 }),
            r(Op::Unlink),
            r(Op::Rmdir),
            r(Op::Rename { to: "/é/x".into() }),
            r(Op::Chmod { mode: 0o4755 }),
            r(Op::Utimes { mtime_us: 12 }),
            r(Op::Commit),
        ]
    }

    fn replies() -> Vec<Reply> {
        let mut d = attr(5);
        d.kind = Kind::Dir;
        let mut l = attr(6);
        l.kind = Kind::Symlink;
        vec![
            Reply::Error(ErrorCode::NotEmpty),
            Reply::Error(ErrorCode::NoSpace),
            Reply::Done,
            Reply::Attr(attr(4)),
            Reply::Entries(vec![]),
            Reply::Entries(vec![("a".into(), d), ("b.c".into(), l)]),
            Reply::Data(vec![]),
            Reply::Data(vec![1, 2, 3]),
            Reply::Written(4096),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for r in requests() {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        for r in replies() {
            assert_eq!(Reply::decode(&r.encode()).unwrap(), r);
        }
        assert_eq!(put_attr_len(), ATTR_BYTES);
    }

    fn put_attr_len() -> usize {
        let mut v = vec![];
        put_attr(&mut v, &attr(1));
        v.len()
    }

    #[test]
    fn every_cut_and_every_extension_is_refused() {
        for r in requests() {
            let b = r.encode();
            for cut in 0..b.len() {
                assert!(Request::decode(&b[..cut]).is_err(), "{r:?} cut at {cut}");
            }
            let mut long = b.clone();
            long.push(0);
            assert_eq!(Request::decode(&long), Err(ProtoError::Trailing(1)));
        }
        for r in replies() {
            let b = r.encode();
            for cut in 0..b.len() {
                assert!(Reply::decode(&b[..cut]).is_err(), "{r:?} cut at {cut}");
            }
            let mut long = b.clone();
            long.push(0);
            assert_eq!(Reply::decode(&long), Err(ProtoError::Trailing(1)));
        }
    }

    #[test]
    fn bad_tags_kinds_codes_names_and_lengths_are_refused() {
        assert_eq!(Request::decode(&[13, 0, 0]), Err(ProtoError::Tag(13)));
        assert_eq!(Reply::decode(&[6]), Err(ProtoError::Tag(6)));
        assert_eq!(Reply::decode(&[0, 0]), Err(ProtoError::Code(0)));
        assert_eq!(Reply::decode(&[0, 11]), Err(ProtoError::Code(11)));
        let mut a = Reply::Attr(attr(1)).encode();
        a[1] = 4;
        assert_eq!(Reply::decode(&a), Err(ProtoError::Kind(4)));
        assert_eq!(Request::decode(&[0, 1, 0, 0xff]), Err(ProtoError::Utf8));
        let long = (PATH_BYTES_MAX as u16 + 1).to_le_bytes();
        assert!(matches!(
            Request::decode(&[0, long[0], long[1]]),
            Err(ProtoError::TooLong { .. })
        ));
        let mut read = vec![4, 1, 0, b'/'];
        read.extend_from_slice(&0u64.to_le_bytes());
        read.extend_from_slice(&(DATA_BYTES_MAX as u32 + 1).to_le_bytes());
        assert!(matches!(
            Request::decode(&read),
            Err(ProtoError::TooLong { .. })
        ));
        let mut data = vec![4];
        data.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Reply::decode(&data),
            Err(ProtoError::TooLong { .. })
        ));
        let mut entries = vec![3];
        entries.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Reply::decode(&entries),
            Err(ProtoError::TooLong { .. })
        ));
    }

    #[test]
    fn frames_are_bounded_and_a_cut_frame_is_an_error() {
        let mut buf = vec![];
        write_frame(&mut buf, b"hello").unwrap();
        write_frame(&mut buf, b"").unwrap();
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"hello");
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"");
        assert!(read_frame(&mut r).unwrap().is_none());
        let mut cut = &buf[..6];
        assert!(read_frame(&mut cut).is_err());
        let mut cut = &buf[..2];
        assert!(read_frame(&mut cut).is_err());
        let big = ((FRAME_BYTES_MAX + 1) as u32).to_le_bytes();
        assert!(read_frame(&mut &big[..]).is_err());
    }

    proptest! {
        /// Whatever arrives, the decoders answer with a message or an error, never a panic.
        #[test]
        fn decoders_are_total(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Request::decode(&body);
            let _ = Reply::decode(&body);
        }
    }
}
